//! The metadata records that go through the quorum and the outcome of applying one.
//!
//! Owns: the record vocabulary (`MetadataRecord`) and its deterministic result (`ApplyOutcome`).
//! Invariant: records are self-contained facts decided by the proposer (ids, assignments and
//! configs are computed and validated before proposing); applying one depends only on the image
//! it is applied to, never on time, randomness or the local node, so every voter computes the same
//! image and the same outcome from the same log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Identifies a node of the cluster: a raft voter of the metadata quorum and a broker.
pub type NodeId = u64;

/// One change to the cluster metadata, committed through the raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// Adds or replaces the endpoint of a broker.
    RegisterBroker { node_id: NodeId, host: String, port: u16, rack: Option<String> },
    /// Creates a topic. `partitions[p]` lists the replicas of partition `p`; the first replica is the
    /// leader (leader epoch 0) and all replicas start in the ISR.
    CreateTopic { name: String, topic_id: [u8; 16], partitions: Vec<Vec<NodeId>>, configs: BTreeMap<String, String> },
    /// Deletes a topic.
    DeleteTopic { name: String },
    /// Appends partitions to a topic: `new_partitions[i]` are the replicas of partition `current + i`.
    CreatePartitions { topic: String, new_partitions: Vec<Vec<NodeId>> },
    /// Replaces the topic's whole config override map (the caller computed it, validated).
    SetTopicConfigs { topic: String, configs: BTreeMap<String, String> },
    /// Leader / ISR change of one partition; bumps `leader_epoch` when the leader changes, always
    /// bumps `partition_epoch`.
    PartitionChange { topic: String, partition: u32, leader: Option<NodeId>, isr: Vec<NodeId> },
}

/// The deterministic result of applying one record to the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApplyOutcome {
    /// The record changed the image.
    Applied,
    /// `CreateTopic` with a name (or topic id) that already exists; the image is unchanged.
    TopicAlreadyExists,
    /// The record names a topic (or a partition of it) that does not exist; the image is unchanged.
    /// Kafka reports both as UNKNOWN_TOPIC_OR_PARTITION.
    UnknownTopic,
    /// `CreatePartitions` that would not increase the partition count; the image is unchanged.
    InvalidPartitionCount { current: u32 },
}
