//! Bounds on the partitions a client can make the cluster hold, checked by CreateTopics (Kafka
//! API and HTTP) and CreatePartitions before anything is proposed; a request past a bound
//! creates nothing and is answered POLICY_VIOLATION with a message naming the bound.
//!
//! - **Per request** ([`MAX_PARTITIONS_PER_REQUEST`]): Kafka 4's `MAX_PARTITIONS_PER_BATCH`
//!   (KAFKA-17870), with Kafka's words. One creation is one quorum entry and one reconcile; this
//!   keeps either from stalling a node for seconds.
//! - **Per broker** (`max.broker.partitions`, the setting KIP-578 proposes): partition replicas
//!   one broker may host, counting every topic's replicas in the metadata image plus the new
//!   assignment. Redpanda bounds partitions per core the same way. The internal topics are
//!   exempt: the broker creates them itself, at sizes its own settings bound, and groups and
//!   transactions stop working without them.
//!
//! The per-broker bound is checked twice: by the handler against the image it sees (its answer
//! to a request past the bound), and again when the creation record applies
//! (`MetadataImage::apply`, against the image at that point of the log, with the bound the
//! record carries): two requests checked against one image, or sent to two nodes, cannot both
//! pass past it. What a broker already holds is never refused or removed.

use std::collections::BTreeMap;

use crate::controller::{MetadataImage, NodeId};

/// Kafka 4's bound on the partitions one CreateTopics request may create, over all its topics.
pub const MAX_PARTITIONS_PER_REQUEST: u64 = 10_000;

/// Kafka's message for a request past [`MAX_PARTITIONS_PER_REQUEST`].
pub const EXCESSIVE_PARTITIONS: &str = "Excessively large number of partitions per request.";

/// Whether a topic is exempt from the per-broker bound (see the module docs).
pub fn exempt(topic: &str) -> bool {
    super::is_coordinator_topic(topic)
}

/// Partition replicas per broker, as the image holds them, that new assignments are checked
/// against and then added to (so the topics of one request count against each other).
#[derive(Debug)]
pub struct ReplicaBudget {
    held: BTreeMap<NodeId, u64>,
    limit: u64,
}

impl ReplicaBudget {
    /// The replicas each broker of `image` hosts (a partition being reassigned counts on both
    /// its old and new replicas, as its data is on both), bounded by `limit` per broker.
    pub fn of(image: &MetadataImage, limit: u64) -> ReplicaBudget {
        let mut held = BTreeMap::new();
        for topic in image.topics.values() {
            for partition in &topic.partitions {
                for replica in &partition.replicas {
                    *held.entry(*replica).or_insert(0) += 1;
                }
            }
        }
        ReplicaBudget { held, limit }
    }

    /// Adds `topic`'s new partitions (`assignment[p]` = the replicas of one) if no broker would
    /// then host more than the limit; otherwise adds nothing and says which broker is over.
    pub fn take(&mut self, topic: &str, assignment: &[Vec<NodeId>]) -> Result<(), String> {
        self.check(topic, assignment)?;
        self.add(assignment);
        Ok(())
    }

    /// Whether `topic`'s new partitions fit under the limit (see [`ReplicaBudget::take`]),
    /// adding nothing.
    pub fn check(&self, topic: &str, assignment: &[Vec<NodeId>]) -> Result<(), String> {
        if exempt(topic) {
            return Ok(());
        }
        for (broker, count) in per_broker(assignment) {
            let held = self.held.get(&broker).copied().unwrap_or(0);
            if held + count > self.limit {
                return Err(format!(
                    "Topic '{topic}' would put {count} more partition replica(s) on broker {broker}, which hosts \
                     {held}: above its max.broker.partitions of {}.",
                    self.limit
                ));
            }
        }
        Ok(())
    }

    /// Counts partitions that were created.
    pub fn add(&mut self, assignment: &[Vec<NodeId>]) {
        for (broker, count) in per_broker(assignment) {
            *self.held.entry(broker).or_insert(0) += count;
        }
    }

    /// The same counts under another limit.
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }
}

fn per_broker(assignment: &[Vec<NodeId>]) -> BTreeMap<NodeId, u64> {
    let mut added: BTreeMap<NodeId, u64> = BTreeMap::new();
    for replicas in assignment {
        for replica in replicas {
            *added.entry(*replica).or_insert(0) += 1;
        }
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_past_its_limit_refuses_the_whole_assignment_and_keeps_its_count() {
        // Proves the bound is per broker, counts earlier takes, refuses an assignment as a
        // whole (nothing of it is added) and exempts the internal topics.
        let mut budget = ReplicaBudget { held: BTreeMap::from([(1, 8)]), limit: 10 };
        budget.take("a", &[vec![1, 2], vec![2, 1]]).expect("1 reaches 10, 2 holds 2");
        let refused = budget.take("b", &[vec![2], vec![1]]).unwrap_err();
        assert!(refused.contains("broker 1, which hosts 10: above its max.broker.partitions of 10"), "{refused}");
        assert_eq!(budget.held.get(&2), Some(&2), "a refused take adds nothing");
        budget.take("c", &vec![vec![2]; 8]).expect("2 reaches 10");
        budget.take(crate::group::OFFSETS_TOPIC, &vec![vec![1]; 50]).expect("internal topics are exempt");
    }
}
