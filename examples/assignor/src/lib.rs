//! Rack-aware, size-balancing consumer group assignor (`group.remote.assignor=rack-aware-size`).
//!
//! For each subscribed topic, partitions are placed largest first on a subscriber of the topic
//! that (1) has fewer than its fair share of the topic's partitions (`ceil(partitions /
//! subscribers)`), (2) preferably sits in a rack holding a replica of the partition (fetching
//! from a same-rack replica saves cross-zone traffic), and (3) has the fewest bytes assigned so
//! far across all topics. The cap on partition counts is what makes the rack preference give
//! way when honouring it would pile a topic onto a few members. Ties break by member id, so the
//! result is deterministic.

use runnel_sdk::assign::{Assignor, Member, MemberAssignment, TopicMetadata, TopicPartitions};
use runnel_sdk::Error;

/// The assignor; see the crate docs.
pub struct RackAwareSize;

impl Assignor for RackAwareSize {
    fn name() -> &'static str {
        "rack-aware-size"
    }

    fn assign(members: &[Member], topics: &[TopicMetadata]) -> Result<Vec<MemberAssignment>, Error> {
        // Deterministic order whatever order the host lists members and topics in.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
        let mut bytes = vec![0u64; members.len()];
        let mut result: Vec<MemberAssignment> = members
            .iter()
            .map(|m| MemberAssignment { member_id: m.member_id.clone(), partitions: Vec::new() })
            .collect();

        let mut topic_order: Vec<&TopicMetadata> = topics.iter().collect();
        topic_order.sort_by(|a, b| a.name.cmp(&b.name));
        for topic in topic_order {
            let subscribers: Vec<usize> =
                order.iter().copied().filter(|&m| members[m].subscribes_to(&topic.name)).collect();
            if subscribers.is_empty() || topic.partition_count() == 0 {
                continue;
            }
            let cap = topic.partition_count().div_ceil(subscribers.len());
            let mut counts = vec![0usize; members.len()];
            let mut partitions: Vec<usize> = (0..topic.partition_count()).collect();
            partitions.sort_by(|&a, &b| topic.partition_sizes[b].cmp(&topic.partition_sizes[a]).then(a.cmp(&b)));
            let mut assigned: Vec<Vec<i32>> = vec![Vec::new(); members.len()];
            for p in partitions {
                let racks = topic.racks(p);
                let same_rack = |m: usize| members[m].rack.as_ref().is_some_and(|r| racks.contains(r));
                // `subscribers` is non-empty and the caps add up to at least the partition
                // count, so some subscriber is always under its cap.
                let Some(&chosen) = subscribers
                    .iter()
                    .filter(|&&m| counts[m] < cap)
                    .min_by_key(|&&m| (!same_rack(m), bytes[m], counts[m]))
                else {
                    return Err(Error::new(format_args!("no subscriber of `{}` left for partition {p}", topic.name)));
                };
                counts[chosen] += 1;
                bytes[chosen] = bytes[chosen].saturating_add(topic.partition_sizes[p]);
                assigned[chosen].push(p as i32);
            }
            for (m, mut parts) in assigned.into_iter().enumerate() {
                if !parts.is_empty() {
                    parts.sort_unstable();
                    result[m].partitions.push(TopicPartitions { topic: topic.name.clone(), partitions: parts });
                }
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

    fn owner(result: &[MemberAssignment], topic: &str, partition: i32) -> String {
        result
            .iter()
            .find(|a| a.partitions.iter().any(|tp| tp.topic == topic && tp.partitions.contains(&partition)))
            .map(|a| a.member_id.clone())
            .unwrap()
    }

    fn bytes_of(result: &[MemberAssignment], topics: &[TopicMetadata]) -> Vec<u64> {
        result
            .iter()
            .map(|a| {
                a.partitions
                    .iter()
                    .map(|tp| {
                        let t = topics.iter().find(|t| t.name == tp.topic).unwrap();
                        tp.partitions.iter().map(|&p| t.partition_sizes[p as usize]).sum::<u64>()
                    })
                    .sum()
            })
            .collect()
    }

    /// Partitions go to a member in a replica's rack when that keeps counts balanced.
    #[test]
    fn rack_preference_honoured() {
        let members = [Member::new("m1", &["t"]).with_rack("a"), Member::new("m2", &["t"]).with_rack("b")];
        let topics = [TopicMetadata::new("t", &[5, 5, 5, 5]).with_racks(&[&["a"], &["b"], &["b", "c"], &["a", "c"]])];
        let result = assign::<RackAwareSize>(&members, &topics).unwrap();
        assert_eq!([owner(&result, "t", 0), owner(&result, "t", 3)], ["m1", "m1"]);
        assert_eq!([owner(&result, "t", 1), owner(&result, "t", 2)], ["m2", "m2"]);
    }

    /// When every replica is in one rack, preference gives way to balance.
    #[test]
    fn rack_preference_yields_to_balance() {
        let members = [Member::new("m1", &["t"]).with_rack("a"), Member::new("m2", &["t"]).with_rack("b")];
        let topics = [TopicMetadata::new("t", &[1; 4]).with_racks(&[&["a"], &["a"], &["a"], &["a"]])];
        let result = assign::<RackAwareSize>(&members, &topics).unwrap();
        let counts: Vec<usize> = result.iter().map(|a| a.partitions[0].partitions.len()).collect();
        assert_eq!(counts, [2, 2]);
    }

    /// Skewed partition sizes are spread so members' byte totals differ by at most the largest
    /// partition.
    #[test]
    fn balanced_by_size() {
        let members = [Member::new("a", &["t", "u"]), Member::new("b", &["t", "u"]), Member::new("c", &["t", "u"])];
        let topics = [
            TopicMetadata::new("t", &[900, 10, 10, 10, 500, 400, 20, 30, 700]),
            TopicMetadata::new("u", &[100, 200, 300]),
        ];
        let result = assign::<RackAwareSize>(&members, &topics).unwrap();
        let bytes = bytes_of(&result, &topics);
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
            let topics: Vec<TopicMetadata> = topic_names
                .iter()
                .map(|name| {
                    let n = next(12) as usize;
                    let sizes: Vec<u64> = (0..n).map(|_| next(1000)).collect();
                    let rack_lists: Vec<Vec<&str>> =
                        (0..n).map(|_| (0..next(3)).map(|_| racks[next(3) as usize]).collect()).collect();
                    let rack_refs: Vec<&[&str]> = rack_lists.iter().map(Vec::as_slice).collect();
                    TopicMetadata::new(name, &sizes).with_racks(&rack_refs)
                })
                .collect();
            let members: Vec<Member> = (0..1 + next(6))
                .map(|i| {
                    let subs: Vec<&str> = topic_names.iter().copied().filter(|_| next(3) > 0).collect();
                    let m = Member::new(&format!("m{i}"), &subs);
                    if next(2) == 0 {
                        m.with_rack(racks[next(3) as usize])
                    } else {
                        m
                    }
                })
                .collect();
            let result = RackAwareSize::assign(&members, &topics).unwrap();
            check_assignment(&members, &topics, &result).unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(result.len(), members.len());
        }
    }

    /// Members without subscriptions get an empty assignment; the name is the selector.
    #[test]
    fn idle_members_and_name() {
        let members = [Member::new("a", &["t"]), Member::new("idle", &[])];
        let result = assign::<RackAwareSize>(&members, &[TopicMetadata::new("t", &[1, 2])]).unwrap();
        assert!(result[1].partitions.is_empty());
        assert_eq!(RackAwareSize::name(), "rack-aware-size");
    }
}
