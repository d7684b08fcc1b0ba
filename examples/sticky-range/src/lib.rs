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

use runnel_sdk::assign::{Assignor, Member, MemberAssignment, TopicMetadata, TopicPartitions};
use runnel_sdk::Error;

/// The assignor; see the crate docs.
pub struct StickyRange;

impl Assignor for StickyRange {
    fn name() -> &'static str {
        "sticky-range"
    }

    fn assign(members: &[Member], topics: &[TopicMetadata]) -> Result<Vec<MemberAssignment>, Error> {
        let mut result: Vec<MemberAssignment> = members
            .iter()
            .map(|m| MemberAssignment { member_id: m.member_id.clone(), partitions: Vec::new() })
            .collect();
        let mut topic_order: Vec<&TopicMetadata> = topics.iter().collect();
        topic_order.sort_by(|a, b| a.name.cmp(&b.name));
        for topic in topic_order {
            let mut subscribers: Vec<usize> =
                (0..members.len()).filter(|&m| members[m].subscribes_to(&topic.name)).collect();
            subscribers.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
            let n = topic.partition_count();
            if subscribers.is_empty() || n == 0 {
                continue;
            }
            for (m, partitions) in assign_topic(members, &subscribers, &topic.name, n) {
                if !partitions.is_empty() {
                    let partitions = partitions.into_iter().map(|p| p as i32).collect();
                    result[m].partitions.push(TopicPartitions { topic: topic.name.clone(), partitions });
                }
            }
        }
        Ok(result)
    }
}

/// One topic's plan: (member index, its partitions) for each subscriber.
fn assign_topic(members: &[Member], subscribers: &[usize], topic: &str, n: usize) -> Vec<(usize, BTreeSet<usize>)> {
    // What each subscriber owns of this topic now (valid partitions, each claimed once).
    let mut claimed = vec![false; n];
    let owned: Vec<BTreeSet<usize>> = subscribers
        .iter()
        .map(|&m| {
            let mut mine = BTreeSet::new();
            for tp in members[m].owned.iter().filter(|tp| tp.topic == topic) {
                for &p in &tp.partitions {
                    if let Ok(p) = usize::try_from(p) {
                        if p < n && !claimed[p] {
                            claimed[p] = true;
                            mine.insert(p);
                        }
                    }
                }
            }
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
    let mut assigned: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); subscribers.len()];
    for (i, mine) in owned.iter().enumerate() {
        for &p in mine.iter().take(share[i]) {
            owner[p] = Some(i);
            assigned[i].insert(p);
        }
    }
    // Hand out the rest in partition order.
    for p in 0..n {
        if owner[p].is_some() {
            continue;
        }
        let previous = p.checked_sub(1).and_then(|q| owner[q]).filter(|&i| assigned[i].len() < share[i]);
        let chosen = previous.unwrap_or_else(|| {
            (0..subscribers.len())
                .filter(|&i| assigned[i].len() < share[i])
                .min_by_key(|&i| (assigned[i].len(), i))
                .expect("the shares add up to the partition count")
        });
        owner[p] = Some(chosen);
        assigned[chosen].insert(p);
    }
    subscribers.iter().copied().zip(assigned).collect()
}

runnel_sdk::export_assignor!(StickyRange);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{assign, check_assignment};

    fn partitions_of(result: &[MemberAssignment], member: &str, topic: &str) -> Vec<i32> {
        result
            .iter()
            .filter(|a| a.member_id == member)
            .flat_map(|a| a.partitions.iter().filter(|tp| tp.topic == topic).flat_map(|tp| tp.partitions.clone()))
            .collect()
    }

    /// The members as they stand after `result`: each owns what it was assigned.
    fn owning(members: &[&str], result: &[MemberAssignment], topics: &[&str]) -> Vec<Member> {
        members
            .iter()
            .map(|id| {
                let mut m = Member::new(id, topics);
                m.owned = result.iter().filter(|a| a.member_id == *id).flat_map(|a| a.partitions.clone()).collect();
                m
            })
            .collect()
    }

    fn moved(before: &[MemberAssignment], after: &[MemberAssignment], topic: &str, n: i32) -> usize {
        let owner = |result: &[MemberAssignment], p: i32| {
            result
                .iter()
                .find(|a| a.partitions.iter().any(|tp| tp.topic == topic && tp.partitions.contains(&p)))
                .map(|a| a.member_id.clone())
        };
        (0..n).filter(|&p| owner(before, p) != owner(after, p)).count()
    }

    /// A new group gets contiguous ranges, the larger ones first, as `range` does.
    #[test]
    fn a_new_group_gets_contiguous_ranges() {
        let members = [Member::new("a", &["t"]), Member::new("b", &["t"]), Member::new("c", &["t"])];
        let result = assign::<StickyRange>(&members, &[TopicMetadata::new("t", &[0; 8])]).unwrap();
        assert_eq!(partitions_of(&result, "a", "t"), [0, 1, 2]);
        assert_eq!(partitions_of(&result, "b", "t"), [3, 4, 5]);
        assert_eq!(partitions_of(&result, "c", "t"), [6, 7]);
    }

    /// Scaling out by one member moves only the partitions the newcomer takes; scaling back in
    /// moves only the leaver's.
    #[test]
    fn adding_or_removing_a_member_moves_only_what_it_must() {
        let topics = [TopicMetadata::new("t", &[0; 12])];
        let two = assign::<StickyRange>(&[Member::new("a", &["t"]), Member::new("b", &["t"])], &topics).unwrap();
        let mut three_members = owning(&["a", "b"], &two, &["t"]);
        three_members.push(Member::new("c", &["t"]));
        let three = assign::<StickyRange>(&three_members, &topics).unwrap();
        assert_eq!(moved(&two, &three, "t", 12), 4, "{three:?}");
        assert_eq!(partitions_of(&three, "c", "t").len(), 4);

        let back = owning(&["a", "c"], &three, &["t"]);
        let two_again = assign::<StickyRange>(&back, &topics).unwrap();
        assert_eq!(moved(&three, &two_again, "t", 12), 4, "{two_again:?}");
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
            let topics: Vec<TopicMetadata> =
                names.iter().map(|t| TopicMetadata::new(t, &vec![0; next(10) as usize])).collect();
            let members: Vec<Member> = (0..1 + next(5))
                .map(|i| {
                    let subs: Vec<&str> = names.iter().copied().filter(|_| next(3) > 0).collect();
                    let mut m = Member::new(&format!("m{i}"), &subs);
                    m.owned = names
                        .iter()
                        .map(|t| TopicPartitions {
                            topic: t.to_string(),
                            partitions: (0..next(4)).map(|_| next(12) as i32 - 1).collect(),
                        })
                        .collect();
                    m
                })
                .collect();
            let result = StickyRange::assign(&members, &topics).unwrap();
            check_assignment(&members, &topics, &result).unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
    }

    #[test]
    fn name_is_the_selector() {
        assert_eq!(StickyRange::name(), "sticky-range");
    }
}
