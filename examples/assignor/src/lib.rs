//! Rack-aware, size-balancing consumer group assignor (`group.remote.assignor=rack-aware-size`).
//!
//! For each subscribed topic, partitions are placed largest first on a subscriber of the topic
//! that (1) has fewer than its fair share of the topic's partitions (`ceil(partitions /
//! subscribers)`), (2) preferably sits in a rack holding a replica of the partition (fetching
//! from a same-rack replica saves cross-zone traffic), and (3) has the fewest bytes assigned so
//! far across all topics (ties: member id). The cap on partition counts is what makes the rack preference give
//! way when honouring it would pile a topic onto a few members. Ties break by member id, so the
//! result is deterministic.

use std::collections::BTreeSet;

use runnel_sdk::assign::{Assignor, Group, MemberAssignment, TopicPartition};
use runnel_sdk::Error;

/// The assignor; see the crate docs.
pub struct RackAwareSize;

impl Assignor for RackAwareSize {
    fn name() -> &'static str {
        "rack-aware-size"
    }

    fn assign(group: &Group) -> Result<Vec<MemberAssignment>, Error> {
        let members = &group.members;
        // Deterministic order whatever order the host lists members and topics in.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
        let mut bytes = vec![0u64; members.len()];
        let mut result: Vec<MemberAssignment> =
            (0..members.len() as u32).map(|member| MemberAssignment { member, partitions: Vec::new() }).collect();

        let mut topic_order: Vec<u32> = (0..group.topics.len() as u32).collect();
        topic_order.sort_by(|&a, &b| group.topics[a as usize].name.cmp(&group.topics[b as usize].name));
        for t in topic_order {
            let topic = &group.topics[t as usize];
            // Subscribers in member id order; a subscriber is named by its position here.
            let subscribers: Vec<usize> = order.iter().copied().filter(|&m| members[m].subscribes_to(t)).collect();
            if subscribers.is_empty() || topic.partition_count() == 0 {
                continue;
            }
            let cap = topic.partition_count().div_ceil(subscribers.len());
            let mut counts = vec![0usize; subscribers.len()];
            // The subscribers under their cap, ordered by (bytes so far, partitions of this
            // topic so far, position): all of them, and those of each rack. The first of a
            // replica rack's set is the best same-rack choice, the first of `open` the best of all.
            let mut open: BTreeSet<(u64, usize, usize)> = BTreeSet::new();
            let mut in_rack: Vec<BTreeSet<(u64, usize, usize)>> = vec![BTreeSet::new(); group.racks.len()];
            let racks = group.racks.len();
            let rack_of = |pos: usize| members[subscribers[pos]].rack.map(|r| r as usize).filter(|&r| r < racks);
            for (pos, &m) in subscribers.iter().enumerate() {
                open.insert((bytes[m], 0, pos));
                if let Some(r) = rack_of(pos) {
                    in_rack[r].insert((bytes[m], 0, pos));
                }
            }
            let mut partitions: Vec<usize> = (0..topic.partition_count()).collect();
            partitions.sort_by(|&a, &b| topic.partition_sizes[b].cmp(&topic.partition_sizes[a]).then(a.cmp(&b)));
            let mut assigned: Vec<Vec<i32>> = vec![Vec::new(); subscribers.len()];
            for p in partitions {
                let same_rack = group
                    .replica_racks(t, p)
                    .iter()
                    .filter_map(|&r| in_rack.get(r as usize).and_then(|set| set.first()))
                    .min()
                    .copied();
                // The caps add up to at least the partition count, so some subscriber is
                // always under its cap.
                let Some(key) = same_rack.or_else(|| open.first().copied()) else {
                    return Err(Error::new(format_args!("no subscriber of `{}` left for partition {p}", topic.name)));
                };
                let pos = key.2;
                let m = subscribers[pos];
                open.remove(&key);
                if let Some(r) = rack_of(pos) {
                    in_rack[r].remove(&key);
                }
                counts[pos] += 1;
                bytes[m] = bytes[m].saturating_add(topic.partition_sizes[p]);
                assigned[pos].push(p as i32);
                if counts[pos] < cap {
                    open.insert((bytes[m], counts[pos], pos));
                    if let Some(r) = rack_of(pos) {
                        in_rack[r].insert((bytes[m], counts[pos], pos));
                    }
                }
            }
            for (pos, mut parts) in assigned.into_iter().enumerate() {
                parts.sort_unstable();
                let partitions = parts.into_iter().map(|partition| TopicPartition { topic: t, partition });
                result[subscribers[pos]].partitions.extend(partitions);
            }
        }
        Ok(result)
    }
}

runnel_sdk::export_assignor!(RackAwareSize);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{assign, check_assignment};

    fn owner(group: &Group, result: &[MemberAssignment], topic: &str, partition: i32) -> String {
        let plan = group.plan(result);
        let owners = plan.iter().filter(|(_, topics)| topics.get(topic).is_some_and(|p| p.contains(&partition)));
        owners.map(|(member, _)| member.clone()).next().unwrap()
    }

    fn bytes_of(group: &Group, result: &[MemberAssignment]) -> Vec<u64> {
        result
            .iter()
            .map(|a| {
                a.partitions
                    .iter()
                    .map(|tp| group.topics[tp.topic as usize].partition_sizes[tp.partition as usize])
                    .sum()
            })
            .collect()
    }

    /// Partitions go to a member in a replica's rack when that keeps counts balanced.
    #[test]
    fn rack_preference_honoured() {
        let group = Group::builder()
            .topic_in_racks("t", &[5, 5, 5, 5], &[&["a"], &["b"], &["b", "c"], &["a", "c"]])
            .member_in_rack("m1", "a", &["t"])
            .member_in_rack("m2", "b", &["t"])
            .build();
        let result = assign::<RackAwareSize>(&group).unwrap();
        assert_eq!([owner(&group, &result, "t", 0), owner(&group, &result, "t", 3)], ["m1", "m1"]);
        assert_eq!([owner(&group, &result, "t", 1), owner(&group, &result, "t", 2)], ["m2", "m2"]);
    }

    /// When every replica is in one rack, preference gives way to balance.
    #[test]
    fn rack_preference_yields_to_balance() {
        let group = Group::builder()
            .topic_in_racks("t", &[1; 4], &[&["a"], &["a"], &["a"], &["a"]])
            .member_in_rack("m1", "a", &["t"])
            .member_in_rack("m2", "b", &["t"])
            .build();
        let result = assign::<RackAwareSize>(&group).unwrap();
        let counts: Vec<usize> = result.iter().map(|a| a.partitions.len()).collect();
        assert_eq!(counts, [2, 2]);
    }

    /// Skewed partition sizes are spread so members' byte totals differ by at most the largest
    /// partition.
    #[test]
    fn balanced_by_size() {
        let group = Group::builder()
            .topic("t", &[900, 10, 10, 10, 500, 400, 20, 30, 700])
            .topic("u", &[100, 200, 300])
            .member("a", &["t", "u"])
            .member("b", &["t", "u"])
            .member("c", &["t", "u"])
            .build();
        let result = assign::<RackAwareSize>(&group).unwrap();
        let bytes = bytes_of(&group, &result);
        let (min, max) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
        assert!(max - min <= 900, "{bytes:?}");
    }

    /// Every partition of every subscribed topic is assigned exactly once, to a subscriber, for
    /// many pseudo-random groups (mixed subscriptions, racks, sizes, unsubscribed topics).
    #[test]
    fn every_partition_exactly_once() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let racks = ["r0", "r1", "r2"];
        for round in 0..300 {
            let topic_names = ["t0", "t1", "t2", "t3"];
            let mut builder = Group::builder();
            for name in topic_names {
                let n = next(12) as usize;
                let sizes: Vec<u64> = (0..n).map(|_| next(1000)).collect();
                let rack_lists: Vec<Vec<&str>> =
                    (0..n).map(|_| (0..next(3)).map(|_| racks[next(3) as usize]).collect()).collect();
                let rack_refs: Vec<&[&str]> = rack_lists.iter().map(Vec::as_slice).collect();
                builder = builder.topic_in_racks(name, &sizes, &rack_refs);
            }
            for i in 0..1 + next(6) {
                let subs: Vec<&str> = topic_names.iter().copied().filter(|_| next(3) > 0).collect();
                builder = if next(2) == 0 {
                    builder.member_in_rack(&format!("m{i}"), racks[next(3) as usize], &subs)
                } else {
                    builder.member(&format!("m{i}"), &subs)
                };
            }
            let group = builder.build();
            let result = RackAwareSize::assign(&group).unwrap();
            check_assignment(&group, &result).unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(result.len(), group.members.len());
            assert_eq!(group.plan(&result), group.plan(&by_scanning(&group)), "round {round}");
        }
    }

    /// The crate docs' rule applied literally: every partition scans every subscriber (what the
    /// ordered sets of `assign` must agree with).
    fn by_scanning(group: &Group) -> Vec<MemberAssignment> {
        let members = &group.members;
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
        let mut bytes = vec![0u64; members.len()];
        let mut result: Vec<MemberAssignment> =
            (0..members.len() as u32).map(|member| MemberAssignment { member, partitions: Vec::new() }).collect();
        let mut topic_order: Vec<u32> = (0..group.topics.len() as u32).collect();
        topic_order.sort_by(|&a, &b| group.topics[a as usize].name.cmp(&group.topics[b as usize].name));
        for t in topic_order {
            let topic = &group.topics[t as usize];
            let subscribers: Vec<usize> = order.iter().copied().filter(|&m| members[m].subscribes_to(t)).collect();
            if subscribers.is_empty() {
                continue;
            }
            let cap = topic.partition_count().div_ceil(subscribers.len());
            let mut counts = vec![0usize; members.len()];
            let mut partitions: Vec<usize> = (0..topic.partition_count()).collect();
            partitions.sort_by(|&a, &b| topic.partition_sizes[b].cmp(&topic.partition_sizes[a]).then(a.cmp(&b)));
            for p in partitions {
                let racks = group.replica_racks(t, p);
                let same_rack = |m: usize| members[m].rack.is_some_and(|r| racks.contains(&r));
                let chosen = *subscribers
                    .iter()
                    .filter(|&&m| counts[m] < cap)
                    .min_by_key(|&&m| (!same_rack(m), bytes[m], counts[m]))
                    .unwrap();
                counts[chosen] += 1;
                bytes[chosen] += topic.partition_sizes[p];
                result[chosen].partitions.push(TopicPartition { topic: t, partition: p as i32 });
            }
        }
        result
    }

    /// Members without subscriptions get an empty assignment; the name is the selector.
    #[test]
    fn idle_members_and_name() {
        let group = Group::builder().topic("t", &[1, 2]).member("a", &["t"]).member("idle", &[]).build();
        let result = assign::<RackAwareSize>(&group).unwrap();
        assert!(result[1].partitions.is_empty());
        assert_eq!(RackAwareSize::name(), "rack-aware-size");
    }
}
