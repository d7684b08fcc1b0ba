//! Replica placement for partitions the cluster creates itself (CreateTopics and
//! CreatePartitions without a manual assignment, auto-created and internal topics).
//!
//! Owns: which brokers may receive new replicas ([`usable_brokers`], the one place that decides
//! it) and the assignment itself, Kafka's `AdminUtils.assignReplicasToBrokers`: brokers are
//! arranged rack by rack in turn (the rack-alternated list), partition `p` is led by the broker
//! at `(p + start) mod n` of that list, and its followers are shifted from the leader by an
//! amount that grows every `n` partitions, so that partitions do not all share the same follower
//! sets. With racks, a replica is skipped onto the next candidate while a rack without a
//! replica of the partition, or a broker without one, remains. Without racks this is Kafka's
//! rack-unaware assignment exactly.
//!
//! Invariants: no broker appears twice in a partition; every partition has exactly the
//! replication factor; leaders are spread evenly (over any run of partitions, leader counts
//! of two brokers differ by at most one); when the replication factor is at most the number of
//! racks, every replica of a partition is on a different rack. The functions here are pure
//! except [`Start::random`]; nothing here does I/O or proposes anything.
//!
//! Where Runnel differs from Kafka 4: brokers without a rack form a rack of their own instead of
//! making a mixed cluster an error (KRaft's `StripedReplicaPlacer` accepts mixed clusters too),
//! and only unfenced brokers are usable (KRaft also places followers on fenced brokers, the
//! leader never).

use std::collections::BTreeMap;

use crate::controller::{MetadataImage, NodeId};

/// A broker that may receive new replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    pub node_id: NodeId,
    /// `broker.rack`, if the broker registered one.
    pub rack: Option<String>,
}

/// The brokers new replicas may go to, by node id: every live broker (registered and not
/// fenced: a fenced broker's lease expired or it is shutting down, and it would start out of
/// every ISR).
pub fn usable_brokers(image: &MetadataImage) -> Vec<UsableBroker> {
    image
        .brokers
        .values()
        .filter(|b| image.is_live(b.node_id))
        .map(|b| UsableBroker { node_id: b.node_id, rack: b.rack.clone() })
        .collect()
}

/// Why partitions could not be placed. The messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("Invalid replication factor {replication_factor}: the replication factor must be positive.")]
    NotPositive { replication_factor: i32 },
    #[error(
        "The target replication factor of {replication_factor} cannot be reached because only {brokers} broker(s) \
         are registered."
    )]
    TooFewBrokers { replication_factor: i32, brokers: usize },
}

/// What to place: partitions `first_partition..first_partition + partitions` of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementSpec {
    pub first_partition: u32,
    pub partitions: u32,
    pub replication_factor: i32,
}

/// Kafka's two random numbers of an assignment: the position in the rack-alternated broker list
/// that leads partition 0, and the initial shift of the followers from their leader. Any value is
/// valid; both are taken modulo the number of brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub index: usize,
    pub replica_shift: usize,
}

impl Start {
    /// Kafka's `fixedStartIndex`: both numbers the same (tests, and growing a topic).
    pub fn fixed(index: usize) -> Start {
        Start { index, replica_shift: index }
    }

    /// Fresh random numbers, as Kafka draws them for every new topic.
    pub fn random() -> Start {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b) as usize
        };
        Start { index: word(0), replica_shift: word(8) }
    }

    /// The start that continues a topic's existing assignment when partitions are added (Kafka's
    /// `createPartitions`: a fixed start at the position of partition 0's first replica in the
    /// broker list), so the new partitions' leaders carry on the topic's rotation. Random when
    /// that broker is no longer usable or the topic has no partitions.
    pub fn continuing(brokers: &[UsableBroker], partition_0_first_replica: Option<NodeId>) -> Start {
        let arranged = rack_alternated(brokers);
        match partition_0_first_replica.and_then(|first| arranged.iter().position(|(id, _)| *id == first)) {
            Some(index) => Start::fixed(index),
            None => Start::random(),
        }
    }
}

/// The replicas of each partition of `spec`, leader first.
pub fn assign_replicas(
    brokers: &[UsableBroker],
    spec: PlacementSpec,
    start: Start,
) -> Result<Vec<Vec<NodeId>>, PlacementError> {
    let replication_factor = spec.replication_factor;
    if replication_factor <= 0 {
        return Err(PlacementError::NotPositive { replication_factor });
    }
    let arranged = rack_alternated(brokers);
    let n = arranged.len();
    if replication_factor as usize > n {
        return Err(PlacementError::TooFewBrokers { replication_factor, brokers: n });
    }
    let replication_factor = replication_factor as usize;
    let rack_count = {
        let mut racks: Vec<&Option<String>> = arranged.iter().map(|(_, rack)| *rack).collect();
        racks.sort();
        racks.dedup();
        racks.len()
    };
    let start_index = start.index % n;
    let mut replica_shift = start.replica_shift % n;
    let mut result = Vec::with_capacity(spec.partitions as usize);
    for partition in spec.first_partition as usize..spec.first_partition as usize + spec.partitions as usize {
        if partition > 0 && partition % n == 0 {
            replica_shift += 1;
        }
        let first = (partition + start_index) % n;
        let (leader, leader_rack) = arranged[first];
        let mut replicas = Vec::with_capacity(replication_factor);
        replicas.push(leader);
        let mut racks_with_replicas = vec![leader_rack];
        let mut k = 0;
        while replicas.len() < replication_factor {
            // Each candidate of Kafka's walk is tried once; the walk visits every other broker
            // within its first n - 1 steps, so it ends well before this bound.
            assert!(k < n * n, "the follower walk visits every broker");
            let (broker, rack) = arranged[follower_index(first, replica_shift * rack_count, k, n)];
            k += 1;
            let rack_is_new = !racks_with_replicas.contains(&rack) || racks_with_replicas.len() == rack_count;
            // Every rack is in `racks_with_replicas` once all brokers are taken, so the broker
            // condition alone decides then.
            if rack_is_new && !replicas.contains(&broker) {
                replicas.push(broker);
                if !racks_with_replicas.contains(&rack) {
                    racks_with_replicas.push(rack);
                }
            }
        }
        debug_assert!(
            replicas.iter().enumerate().all(|(i, b)| !replicas[..i].contains(b)),
            "no broker twice in a partition"
        );
        result.push(replicas);
    }
    Ok(result)
}

/// Kafka's `replicaIndex`: the `k`-th follower candidate of the partition led from position
/// `first`, never the leader's own position (the shift is in `1..n`).
fn follower_index(first: usize, shift: usize, k: usize, n: usize) -> usize {
    let shift = 1 + (shift + k) % (n - 1).max(1);
    (first + shift) % n
}

/// Kafka's `getRackAlternatedBrokerList`: racks in name order (brokers without a rack first, as
/// one rack), each rack's brokers by id, taken one rack at a time in turn until all are listed.
/// Without racks, the brokers by id.
fn rack_alternated(brokers: &[UsableBroker]) -> Vec<(NodeId, &Option<String>)> {
    let mut by_rack: BTreeMap<&Option<String>, Vec<NodeId>> = BTreeMap::new();
    for broker in brokers {
        by_rack.entry(&broker.rack).or_default().push(broker.node_id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
        ids.dedup();
    }
    let total: usize = by_rack.values().map(Vec::len).sum();
    let mut arranged = Vec::with_capacity(total);
    let mut round = 0;
    while arranged.len() < total {
        for (rack, ids) in &by_rack {
            if let Some(&id) = ids.get(round) {
                arranged.push((id, *rack));
            }
        }
        round += 1;
    }
    arranged
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn brokers(racks: &[(NodeId, Option<&str>)]) -> Vec<UsableBroker> {
        racks.iter().map(|(id, rack)| UsableBroker { node_id: *id, rack: rack.map(str::to_string) }).collect()
    }

    fn unracked(ids: impl IntoIterator<Item = NodeId>) -> Vec<UsableBroker> {
        ids.into_iter().map(|node_id| UsableBroker { node_id, rack: None }).collect()
    }

    fn spec(partitions: u32, replication_factor: i32) -> PlacementSpec {
        PlacementSpec { first_partition: 0, partitions, replication_factor }
    }

    fn leader_counts(assignment: &[Vec<NodeId>]) -> BTreeMap<NodeId, usize> {
        let mut counts = BTreeMap::new();
        for replicas in assignment {
            *counts.entry(replicas[0]).or_default() += 1;
        }
        counts
    }

    #[test]
    fn rack_unaware_matches_kafkas_documented_example() {
        // Proves the rack-unaware assignment is Kafka's: the example in AdminUtils' docs
        // (5 brokers, 10 partitions, replication factor 3, start index 0).
        let assignment = assign_replicas(&unracked(0..5), spec(10, 3), Start::fixed(0)).unwrap();
        assert_eq!(
            assignment,
            vec![
                vec![0, 1, 2],
                vec![1, 2, 3],
                vec![2, 3, 4],
                vec![3, 4, 0],
                vec![4, 0, 1],
                vec![0, 2, 3],
                vec![1, 3, 4],
                vec![2, 4, 0],
                vec![3, 0, 1],
                vec![4, 1, 2],
            ]
        );
    }

    #[test]
    fn rack_aware_matches_kafkas_documented_example() {
        // Proves the rack-alternated list and the rack-aware walk are Kafka's: the example in
        // AdminUtils' docs (racks 1: {0, 5}, 2: {3, 4}, 3: {1, 2}; list 0, 3, 1, 5, 4, 2).
        let cluster = brokers(&[
            (0, Some("rack1")),
            (1, Some("rack3")),
            (2, Some("rack3")),
            (3, Some("rack2")),
            (4, Some("rack2")),
            (5, Some("rack1")),
        ]);
        let arranged: Vec<NodeId> = rack_alternated(&cluster).into_iter().map(|(id, _)| id).collect();
        assert_eq!(arranged, vec![0, 3, 1, 5, 4, 2]);
        let assignment = assign_replicas(&cluster, spec(8, 3), Start::fixed(0)).unwrap();
        assert_eq!(
            assignment,
            vec![
                vec![0, 3, 1],
                vec![3, 1, 5],
                vec![1, 5, 4],
                vec![5, 4, 2],
                vec![4, 2, 0],
                vec![2, 0, 3],
                vec![0, 4, 2],
                vec![3, 2, 0],
            ]
        );
    }

    #[test]
    fn leaders_are_spread_evenly_and_no_broker_is_repeated() {
        // Proves, for many cluster shapes and starts, that leader counts differ by at most one,
        // every partition has the replication factor with distinct brokers, and every replica
        // is a usable broker.
        for n in 1..=7u64 {
            for rf in 1..=n as i32 {
                for partitions in [1, 5, 12, 50] {
                    for start in 0..n as usize {
                        let cluster = unracked((0..n).map(|i| 100 + i * 3));
                        let start = Start { index: start, replica_shift: start * 7 + 1 };
                        let assignment = assign_replicas(&cluster, spec(partitions, rf), start).unwrap();
                        assert_eq!(assignment.len(), partitions as usize);
                        for replicas in &assignment {
                            assert_eq!(replicas.len(), rf as usize);
                            let distinct: BTreeSet<_> = replicas.iter().collect();
                            assert_eq!(distinct.len(), replicas.len(), "{replicas:?}");
                            assert!(replicas.iter().all(|b| cluster.iter().any(|c| c.node_id == *b)));
                        }
                        let counts = leader_counts(&assignment);
                        let max = counts.values().max().unwrap();
                        let min = if counts.len() < n as usize { &0 } else { counts.values().min().unwrap() };
                        assert!(max - min <= 1, "n={n} rf={rf} p={partitions}: {counts:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn followers_are_spread_over_brokers() {
        // Proves the growing shift varies follower sets: with 4 brokers and RF 2, the 12
        // partitions do not all follow their leader's next broker, and every broker holds
        // the same number of replicas.
        let assignment = assign_replicas(&unracked(1..=4), spec(12, 2), Start::fixed(0)).unwrap();
        let pairs: BTreeSet<(NodeId, NodeId)> = assignment.iter().map(|r| (r[0], r[1])).collect();
        assert!(pairs.len() > 4, "{assignment:?}");
        let mut replicas_per_broker = BTreeMap::new();
        for id in assignment.iter().flatten() {
            *replicas_per_broker.entry(*id).or_insert(0) += 1;
        }
        assert_eq!(replicas_per_broker.values().collect::<BTreeSet<_>>(), BTreeSet::from([&6]));
    }

    #[test]
    fn replicas_of_a_partition_are_on_different_racks() {
        // Proves rack spread: with 3 racks (of unequal sizes) and RF up to 3, no partition has two
        // replicas in one rack; with RF 4 every rack still holds one; leaders stay even.
        let cluster = brokers(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
            (5, Some("c")),
            (6, Some("c")),
            (7, Some("a")),
        ]);
        let rack_of = |id: NodeId| cluster.iter().find(|b| b.node_id == id).unwrap().rack.clone();
        for start in 0..7 {
            for rf in 1..=4 {
                let assignment =
                    assign_replicas(&cluster, spec(21, rf), Start { index: start, replica_shift: 3 * start + 2 })
                        .unwrap();
                for replicas in &assignment {
                    let racks: BTreeSet<_> = replicas.iter().map(|id| rack_of(*id)).collect();
                    assert_eq!(racks.len(), (rf as usize).min(3), "rf={rf}: {replicas:?}");
                }
                let counts = leader_counts(&assignment);
                assert_eq!(counts.values().collect::<BTreeSet<_>>(), BTreeSet::from([&3]), "{counts:?}");
            }
        }
    }

    #[test]
    fn brokers_without_a_rack_form_one_rack() {
        // Proves a mixed cluster is placed (Kafka's AdminUtils refuses it, KRaft does not): the
        // rack-less brokers act as one rack.
        let cluster = brokers(&[(1, None), (2, None), (3, Some("x")), (4, Some("x"))]);
        let assignment = assign_replicas(&cluster, spec(8, 2), Start::fixed(0)).unwrap();
        for replicas in &assignment {
            let racked = replicas.iter().filter(|id| **id >= 3).count();
            assert_eq!(racked, 1, "one replica in rack x, one without a rack: {replicas:?}");
        }
    }

    #[test]
    fn the_same_start_gives_the_same_assignment() {
        // Proves determinism: placement depends only on the brokers, the spec and the start
        // (not on the order brokers are listed in).
        let cluster = brokers(&[(3, Some("b")), (1, Some("a")), (2, Some("b")), (4, Some("a"))]);
        let mut reversed = cluster.clone();
        reversed.reverse();
        let start = Start { index: 5, replica_shift: 11 };
        let first = assign_replicas(&cluster, spec(9, 2), start).unwrap();
        assert_eq!(first, assign_replicas(&reversed, spec(9, 2), start).unwrap());
        assert_ne!(first, assign_replicas(&cluster, spec(9, 2), Start::fixed(1)).unwrap());
    }

    #[test]
    fn too_few_brokers_is_kafkas_error() {
        // Proves RF above the usable brokers, and a non-positive RF, fail with Kafka's words.
        let err = assign_replicas(&unracked([1, 2]), spec(1, 3), Start::fixed(0)).unwrap_err();
        assert_eq!(err, PlacementError::TooFewBrokers { replication_factor: 3, brokers: 2 });
        assert_eq!(
            err.to_string(),
            "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered."
        );
        let none = assign_replicas(&[], spec(1, 1), Start::fixed(0)).unwrap_err();
        assert_eq!(none, PlacementError::TooFewBrokers { replication_factor: 1, brokers: 0 });
        let zero = assign_replicas(&unracked([1]), spec(1, 0), Start::fixed(0)).unwrap_err();
        assert_eq!(zero.to_string(), "Invalid replication factor 0: the replication factor must be positive.");
    }

    #[test]
    fn added_partitions_continue_the_topic() {
        // Proves CreatePartitions continues the pattern: the partitions added to a topic are the
        // ones a creation with the total count from the same start would have had.
        let cluster = unracked(1..=5);
        let created = assign_replicas(&cluster, spec(4, 3), Start::fixed(2)).unwrap();
        let start = Start::continuing(&cluster, Some(created[0][0]));
        assert_eq!(start, Start::fixed(2));
        let added = assign_replicas(
            &cluster,
            PlacementSpec { first_partition: 4, partitions: 6, replication_factor: 3 },
            start,
        )
        .unwrap();
        let whole = assign_replicas(&cluster, spec(10, 3), Start::fixed(2)).unwrap();
        assert_eq!(added, whole[4..]);
        let all: Vec<Vec<NodeId>> = created.into_iter().chain(added).collect();
        let counts = leader_counts(&all);
        assert_eq!(counts.values().collect::<BTreeSet<_>>(), BTreeSet::from([&2]));
    }

    #[test]
    fn fenced_brokers_are_not_usable() {
        // Proves usable_brokers leaves fenced brokers out and keeps racks.
        let mut image = MetadataImage::default();
        for (id, fenced) in [(1, false), (2, true), (3, false)] {
            image.brokers.insert(
                id,
                crate::controller::BrokerInfo {
                    node_id: id,
                    host: "h".into(),
                    port: 9092,
                    rack: Some(format!("r{id}")),
                    listeners: Vec::new(),
                    broker_epoch: 1,
                    fenced,
                },
            );
        }
        let usable = usable_brokers(&image);
        assert_eq!(usable, brokers(&[(1, Some("r1")), (3, Some("r3"))]));
    }
}
