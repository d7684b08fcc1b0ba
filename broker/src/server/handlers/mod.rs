//! One file per Kafka API. Each exposes
//! `async fn handle(broker: &Broker, header: &RequestHeader, request: XRequest) -> Option<XResponse>`
//! (`None` only where Kafka sends no response: produce with acks=0). Handlers turn every
//! client mistake into an error code in the response; none of them panics on input.

pub mod alter_configs;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sync_group;

use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn broker_id(node_id: u64) -> BrokerId {
    BrokerId(node_id as i32)
}

pub(crate) fn uuid_of(topic_id: [u8; 16]) -> Uuid {
    Uuid::from_bytes(topic_id)
}

/// Kafka's rule for topic names: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(crate) fn validate_topic_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("topic name is empty");
    }
    if name == "." || name == ".." {
        return Err("topic name cannot be '.' or '..'");
    }
    if name.len() > 249 {
        return Err("topic name is longer than 249 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Err("topic name contains a character other than ASCII alphanumerics, '.', '_' and '-'");
    }
    Ok(())
}

/// The hosted partition a request names, or the error Kafka gives: UNKNOWN_TOPIC_OR_PARTITION
/// for a topic or partition index the metadata does not know, NOT_LEADER_OR_FOLLOWER for one
/// this node does not host.
pub(crate) fn hosted_partition(
    broker: &crate::server::Broker,
    image: &crate::controller::MetadataImage,
    topic: &str,
    partition: i32,
) -> Result<std::sync::Arc<crate::partition::Partition>, kafka_protocol::ResponseError> {
    use kafka_protocol::ResponseError;
    let known = image.topics.get(topic).ok_or(ResponseError::UnknownTopicOrPartition)?;
    if partition < 0 || partition as usize >= known.partitions.len() {
        return Err(ResponseError::UnknownTopicOrPartition);
    }
    broker.replicas.get(topic, partition as u32).ok_or(ResponseError::NotLeaderOrFollower)
}
