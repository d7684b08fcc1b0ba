//! One file per Kafka API. Each exposes
//! `async fn handle(broker: &Broker, header: &RequestHeader, request: XRequest) -> Option<XResponse>`
//! (`None` only where Kafka sends no response: produce with acks=0). Handlers turn every
//! client mistake into an error code in the response; none of them panics on input.

pub mod acls;
pub use acls::{create_acls, delete_acls, describe_acls};
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Where the client of the request being handled reaches broker `b`: its endpoint on the
/// listener the request came in on (none: the broker lacks that listener, and Kafka leaves it
/// out of the answer), or its inter-broker address for requests from outside a Kafka listener.
pub(crate) fn client_endpoint(b: &crate::controller::BrokerInfo) -> Option<(&str, u16)> {
    match crate::server::listener_name() {
        Some(listener) => b.endpoint(&listener),
        None => Some((&b.host, b.port)),
    }
}

/// Removes from `items` those whose topic the client may not `operation` and returns them: the
/// handler serves the rest and answers TOPIC_AUTHORIZATION_FAILED for these (Kafka's per-topic
/// authorization). Nothing is removed without an authorizer or for the node's own calls.
pub(crate) fn take_denied_topics<T>(
    broker: &crate::server::Broker,
    items: &mut Vec<T>,
    topic: impl Fn(&T) -> &str,
    operation: crate::security::acl::Operation,
) -> Vec<T> {
    if !broker.settings.authorizer.enabled || crate::server::current_client().is_none() {
        return Vec::new();
    }
    let (allowed, denied) = std::mem::take(items)
        .into_iter()
        .partition(|item| broker.authorized(operation, crate::security::acl::ResourceType::Topic, topic(item)));
    *items = allowed;
    denied
}

/// Kafka's rule for configs: DESCRIBE_CONFIGS (or ALTER_CONFIGS) on the topic of a topic
/// resource, on the cluster for a broker or broker logger; TOPIC_ or CLUSTER_AUTHORIZATION_FAILED.
pub(crate) fn authorize_config_resource(
    broker: &crate::server::Broker,
    resource_type: i8,
    name: &str,
    operation: crate::security::acl::Operation,
) -> Result<(), (kafka_protocol::ResponseError, String)> {
    use kafka_protocol::ResponseError;
    if resource_type == describe_configs::RESOURCE_TOPIC {
        if !broker.authorized(operation, crate::security::acl::ResourceType::Topic, name) {
            return Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".into()));
        }
    } else if !broker.authorized_cluster(operation) {
        return Err((ResponseError::ClusterAuthorizationFailed, "Authorization failed.".into()));
    }
    Ok(())
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
/// this node does not host, UNKNOWN_TOPIC_OR_PARTITION when the hosted partition belongs to
/// another incarnation of the topic than the image's (deleted and recreated under the same
/// name, not reconciled yet): a request must never append to or read from a stale incarnation.
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
    let hosted = broker.replicas.get(topic, partition as u32).ok_or(ResponseError::NotLeaderOrFollower)?;
    check_topic_id(known.topic_id, hosted.topic_id(), None)?;
    Ok(hosted)
}

/// The leader of `topic`-`partition` and its epoch as the image names them (-1, -1 when unknown):
/// what NOT_LEADER_OR_FOLLOWER answers carry so clients move without a metadata round trip
/// (KIP-951).
pub(crate) fn current_leader(
    image: &crate::controller::MetadataImage,
    topic: &str,
    partition: i32,
) -> (kafka_protocol::messages::BrokerId, i32) {
    let p = u32::try_from(partition).ok().and_then(|i| image.partition(topic, i));
    match p {
        Some(p) => (kafka_protocol::messages::BrokerId(p.leader.map_or(-1, |l| l as i32)), p.leader_epoch),
        None => (kafka_protocol::messages::BrokerId(-1), -1),
    }
}

/// Topic ids along a request: the image's id for the name must be the hosted partition's, and
/// so must the request's where its version carries one (`requested`; all zeros means none, as
/// in Kafka). A request naming an id the image does not have gets UNKNOWN_TOPIC_ID.
pub(crate) fn check_topic_id(
    image_topic_id: [u8; 16],
    hosted_topic_id: [u8; 16],
    requested: Option<[u8; 16]>,
) -> Result<(), kafka_protocol::ResponseError> {
    use kafka_protocol::ResponseError;
    if let Some(requested) = requested.filter(|id| *id != [0; 16]) {
        if requested != image_topic_id {
            return Err(ResponseError::UnknownTopicId);
        }
    }
    if hosted_topic_id != image_topic_id {
        return Err(ResponseError::UnknownTopicOrPartition);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_topic_id;
    use kafka_protocol::ResponseError;

    #[test]
    fn a_stale_incarnation_or_an_unknown_requested_id_is_refused() {
        // Proves a hosted partition of another incarnation than the image's is never used, and a
        // request's own topic id must be the image's.
        let (old, new) = ([1; 16], [2; 16]);
        assert_eq!(check_topic_id(new, new, None), Ok(()));
        assert_eq!(check_topic_id(new, new, Some([0; 16])), Ok(()));
        assert_eq!(check_topic_id(new, new, Some(new)), Ok(()));
        assert_eq!(check_topic_id(new, old, None), Err(ResponseError::UnknownTopicOrPartition));
        assert_eq!(check_topic_id(new, new, Some(old)), Err(ResponseError::UnknownTopicId));
    }
}
