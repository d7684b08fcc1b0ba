//! Consumer groups (classic protocol): membership and rebalances (`membership`), committed
//! offsets and group metadata stored as records in the compacted `__consumer_offsets` topic
//! (`offsets`, with Kafka's key/value schemas in `schema`).
//!
//! The coordinator of a group is the leader of partition `partition_for(group)` of
//! `__consumer_offsets`, as in Kafka. Invariant: committed offsets and group metadata are
//! durable only once their record is in that partition's log; the in-memory state is rebuilt
//! from the partition when this node first serves it.

pub mod membership;
pub mod offsets;
pub mod schema;

use std::sync::Arc;

use crate::partition::ReplicaManager;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's `offsets.topic.num.partitions` default.
pub const OFFSETS_TOPIC_PARTITIONS: u32 = 50;

/// Kafka's `partitionFor(groupId)`: `Utils.abs(groupId.hashCode()) % partitions`, with Java's
/// `String.hashCode` (UTF-16 code units, wrapping `31 * h + c`) and `Utils.abs` (`i & 0x7fffffff`).
pub fn partition_for(group_id: &str, partitions: u32) -> u32 {
    let mut hash: i32 = 0;
    for unit in group_id.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (hash & 0x7fff_ffff) as u32 % partitions
}

/// Everything group-related a handler can reach.
pub struct GroupCoordinator {
    pub offsets: offsets::OffsetStore,
    pub membership: membership::Membership,
}

impl GroupCoordinator {
    pub fn new(replicas: Arc<ReplicaManager>) -> GroupCoordinator {
        GroupCoordinator {
            offsets: offsets::OffsetStore::new(replicas, OFFSETS_TOPIC_PARTITIONS),
            membership: membership::Membership::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_kafka() {
        // Proves Java's String.hashCode and Utils.abs; expected values printed by a JVM
        // (`"billing".hashCode() == -109829509`, `(h & 0x7fffffff) % 50`).
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("billing", 50), 39);
        assert_eq!(partition_for("console-consumer-12345", 50), 6);
        assert_eq!(partition_for("grüße", 50), 23);
    }
}
