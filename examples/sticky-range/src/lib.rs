//! Sticky range assignor (`group.remote.assignor=sticky-range`): each subscriber of a topic gets
//! a contiguous range of its partitions, as Kafka's `range` does, but when members come and go
//! a member keeps the partitions it owns up to its fair share, so a rebalance moves only the
//! partitions it must. Useful when consumers keep per-partition caches or state keyed by
//! partition ranges: a scale-out by one member moves about `partitions / members` partitions,
//! not most of them.
//!
//! Shares: with `n` partitions and `m` subscribers, every member gets `n / m` and the `n % m`
//! members owning the most now (ties by member id) one more. A member keeps its lowest owned
//! partitions up to its share; the rest go, in partition order, to the member that holds the
//! partition just before (keeping ranges contiguous) if it has room, else to the member with
//! the fewest so far (ties by member id). Deterministic for the same input.

use std::collections::BTreeSet;

use runnel_sdk::assign::{Assignor, Group, MemberAssignment, TopicPartition};
use runnel_sdk::Error;

/// The assignor; see the crate docs.
pub struct StickyRange;

impl Assignor for StickyRange {
    fn name() -> &'static str {
        "sticky-range"
    }

    fn assign(group: &Group) -> Result<Vec<MemberAssignment>, Error> {
        let members = &group.members;
        let mut result: Vec<MemberAssignment> =
            (0..members.len() as u32).map(|member| MemberAssignment { member, partitions: Vec::new() }).collect();
        let mut topic_order: Vec<u32> = (0..group.topics.len() as u32).collect();
        topic_order.sort_by(|&a, &b| group.topics[a as usize].name.cmp(&group.topics[b as usize].name));
        for t in topic_order {
            let mut subscribers: Vec<usize> = group.subscribers(t).collect();
            subscribers.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
            let n = group.topics[t as usize].partition_count();
            if subscribers.is_empty() || n == 0 {
                continue;
            }
            for (m, partitions) in assign_topic(group, &subscribers, t, n) {
                let partitions = partitions.into_iter().map(|p| TopicPartition { topic: t, partition: p as i32 });
                result[m].partitions.extend(partitions);
            }
        }
        Ok(result)
    }
}

/// One topic's plan: (member index, its partitions in ascending order) for each subscriber.
fn assign_topic(group: &Group, subscribers: &[usize], topic: u32, n: usize) -> Vec<(usize, Vec<usize>)> {
    // What each subscriber owns of this topic now (valid partitions, each claimed once), sorted.
    let mut claimed = vec![false; n];
    let owned: Vec<Vec<usize>> = subscribers
        .iter()
        .map(|&m| {
            let mut mine = Vec::new();
            for tp in group.members[m].owned.iter().filter(|tp| tp.topic == topic) {
                if let Ok(p) = usize::try_from(tp.partition) {
                    if p < n && !claimed[p] {
                        claimed[p] = true;
                        mine.push(p);
                    }
                }
            }
            mine.sort_unstable();
            mine
        })
        .collect();

    // Shares: the extra partitions go to the members owning most now (ties: member id order).
    let (base, extra) = (n / subscribers.len(), n % subscribers.len());
    let mut by_owned: Vec<usize> = (0..subscribers.len()).collect();
    by_owned.sort_by(|&a, &b| owned[b].len().cmp(&owned[a].len()).then(a.cmp(&b)));
    let mut share = vec![base; subscribers.len()];
    for &i in by_owned.iter().take(extra) {
        share[i] += 1;
    }

    // Keep the lowest owned partitions up to the share.
    let mut owner: Vec<Option<usize>> = vec![None; n];
    let mut assigned: Vec<Vec<usize>> = vec![Vec::new(); subscribers.len()];
    for (i, mine) in owned.iter().enumerate() {
        for &p in mine.iter().take(share[i]) {
            owner[p] = Some(i);
            assigned[i].push(p);
        }
    }
    // Hand out the rest in partition order. `open`: the subscribers below their share, by
    // (partitions so far, index): its first is the member with the fewest.
    let mut open: BTreeSet<(usize, usize)> =
        (0..subscribers.len()).filter(|&i| assigned[i].len() < share[i]).map(|i| (assigned[i].len(), i)).collect();
    for p in 0..n {
        if owner[p].is_some() {
            continue;
        }
        let previous = p.checked_sub(1).and_then(|q| owner[q]).filter(|&i| assigned[i].len() < share[i]);
        let chosen =
            previous.or_else(|| open.first().map(|&(_, i)| i)).expect("the shares add up to the partition count");
        open.remove(&(assigned[chosen].len(), chosen));
        owner[p] = Some(chosen);
        assigned[chosen].push(p);
        if assigned[chosen].len() < share[chosen] {
            open.insert((assigned[chosen].len(), chosen));
        }
    }
    for partitions in &mut assigned {
        partitions.sort_unstable();
    }
    subscribers.iter().copied().zip(assigned).collect()
}

runnel_sdk::export_assignor!(StickyRange);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{assign, check_assignment};

    fn partitions_of(group: &Group, result: &[MemberAssignment], member: &str, topic: &str) -> Vec<i32> {
        group.plan(result).get(member).and_then(|topics| topics.get(topic)).cloned().unwrap_or_default()
    }

    /// A group of `members` (all subscribed to "t" of `n` partitions), each owning what it was
    /// assigned in `before` (by member id, in `previous`).
    fn owning(members: &[&str], n: usize, previous: Option<(&Group, &[MemberAssignment])>) -> Group {
        let mut builder = Group::builder().topic("t", &vec![0; n]);
        for id in members {
            builder = builder.member(id, &["t"]);
            if let Some((group, result)) = previous {
                builder = builder.owning("t", &partitions_of(group, result, id, "t"));
            }
        }
        builder.build()
    }

    fn moved(before: (&Group, &[MemberAssignment]), after: (&Group, &[MemberAssignment]), n: i32) -> usize {
        let owner = |(group, result): (&Group, &[MemberAssignment]), p: i32| {
            group
                .plan(result)
                .into_iter()
                .find(|(_, topics)| topics.get("t").is_some_and(|ps| ps.contains(&p)))
                .map(|(m, _)| m)
        };
        (0..n).filter(|&p| owner(before, p) != owner(after, p)).count()
    }

    /// A new group gets contiguous ranges, the larger ones first, as `range` does.
    #[test]
    fn a_new_group_gets_contiguous_ranges() {
        let group = owning(&["a", "b", "c"], 8, None);
        let result = assign::<StickyRange>(&group).unwrap();
        assert_eq!(partitions_of(&group, &result, "a", "t"), [0, 1, 2]);
        assert_eq!(partitions_of(&group, &result, "b", "t"), [3, 4, 5]);
        assert_eq!(partitions_of(&group, &result, "c", "t"), [6, 7]);
    }

    /// Scaling out by one member moves only the partitions the newcomer takes; scaling back in
    /// moves only the leaver's.
    #[test]
    fn adding_or_removing_a_member_moves_only_what_it_must() {
        let two_group = owning(&["a", "b"], 12, None);
        let two = assign::<StickyRange>(&two_group).unwrap();
        let three_group = owning(&["a", "b", "c"], 12, Some((&two_group, &two)));
        let three = assign::<StickyRange>(&three_group).unwrap();
        assert_eq!(moved((&two_group, &two), (&three_group, &three), 12), 4, "{three:?}");
        assert_eq!(partitions_of(&three_group, &three, "c", "t").len(), 4);

        let back_group = owning(&["a", "c"], 12, Some((&three_group, &three)));
        let two_again = assign::<StickyRange>(&back_group).unwrap();
        assert_eq!(moved((&three_group, &three), (&back_group, &two_again), 12), 4, "{two_again:?}");
    }

    /// Every partition of every subscribed topic is assigned exactly once, to a subscriber,
    /// whatever the members claim to own (stale, duplicate or out-of-range claims included).
    #[test]
    fn every_partition_exactly_once() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names = ["t0", "t1", "t2"];
        for round in 0..300 {
            let mut builder = Group::builder();
            for t in names {
                builder = builder.topic(t, &vec![0; next(10) as usize]);
            }
            for i in 0..1 + next(5) {
                let subs: Vec<&str> = names.iter().copied().filter(|_| next(3) > 0).collect();
                builder = builder.member(&format!("m{i}"), &subs);
                for t in names {
                    let claims: Vec<i32> = (0..next(4)).map(|_| next(12) as i32 - 1).collect();
                    builder = builder.owning(t, &claims);
                }
            }
            let group = builder.build();
            let result = StickyRange::assign(&group).unwrap();
            check_assignment(&group, &result).unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
    }

    #[test]
    fn name_is_the_selector() {
        assert_eq!(StickyRange::name(), "sticky-range");
    }
}
