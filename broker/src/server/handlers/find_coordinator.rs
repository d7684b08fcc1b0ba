//! FindCoordinator: the coordinator of a group is the leader of partition
//! `partition_for(group)` of `__consumer_offsets`, that of a transactional id (key type 1) the
//! leader of its partition of `__transaction_state`; both topics are created on first use. v4+
//! batch several keys.

use crate::security::acl::{Operation, ResourceType};
use std::collections::BTreeMap;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::join_group::coordinator_partition;
use super::{broker_id, create_topics, str_bytes};
use crate::group::OFFSETS_TOPIC;
use crate::server::{placement, Broker};
use crate::txn::TRANSACTION_STATE_TOPIC;

/// Key type of a group coordinator.
const KEY_TYPE_GROUP: i8 = 0;
/// Key type of a transaction coordinator.
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Topic configs of `__consumer_offsets`, as Kafka creates it.
pub(crate) fn offsets_topic_configs() -> BTreeMap<String, String> {
    [("cleanup.policy", "compact"), ("segment.bytes", "104857600"), ("compression.type", "producer")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The replication factor `__consumer_offsets` is created with: `offsets.topic.replication.factor`
/// capped to the usable brokers, so that a one-node cluster keeps working (Kafka refuses to
/// create it, and so to coordinate groups, until that many brokers are up). At least 1: with no
/// usable broker, placement fails and the caller answers COORDINATOR_NOT_AVAILABLE.
fn offsets_topic_replication_factor(configured: u16, usable_brokers: usize) -> i16 {
    let capped = usize::from(configured).min(usable_brokers).max(1);
    i16::try_from(capped).unwrap_or(i16::MAX)
}

/// Creates an internal topic through the metadata quorum if the image does not have it yet,
/// with `configured_replication_factor` capped to the usable brokers and `configs` for the
/// factor it gets.
async fn ensure_internal_topic(
    broker: &Broker,
    name: &str,
    partitions: u32,
    configured_replication_factor: u16,
    configs: impl FnOnce(i16) -> BTreeMap<String, String>,
) -> Result<(), ResponseError> {
    if broker.controller.image().topics.contains_key(name) {
        return Ok(());
    }
    let usable = placement::usable_brokers(&broker.controller.image()).len();
    let replication_factor = offsets_topic_replication_factor(configured_replication_factor, usable);
    let partitions = i32::try_from(partitions).unwrap_or(i32::MAX);
    match create_topics::create(broker, name, partitions, replication_factor, configs(replication_factor)).await {
        Ok(_) | Err(ResponseError::TopicAlreadyExists) => {
            broker.reconcile_now().await;
            Ok(())
        }
        Err(code) => {
            tracing::warn!(topic = name, ?code, "could not create an internal topic");
            Err(ResponseError::CoordinatorNotAvailable)
        }
    }
}

/// Creates `__consumer_offsets` through the metadata quorum if the image does not have it yet.
pub(crate) async fn ensure_offsets_topic(broker: &Broker) -> Result<(), ResponseError> {
    let (partitions, replication_factor) =
        (broker.groups.offsets_topic_num_partitions, broker.groups.offsets_topic_replication_factor);
    ensure_internal_topic(broker, OFFSETS_TOPIC, partitions, replication_factor, |_| offsets_topic_configs()).await
}

/// Creates a stateful transform's changelog topic if the image does not have it yet: compacted,
/// with the replication of `__consumer_offsets` (the state is as precious as the positions it
/// commits with); grows it to `partitions` (the input's count) when the input has gained
/// partitions since, so a new input partition's worker has its changelog partition (partition
/// `p` holds input partition `p`'s state: growing moves no existing state).
pub(crate) async fn ensure_state_topic(broker: &Broker, name: &str, partitions: u32) -> Result<(), ResponseError> {
    let replication_factor = broker.groups.offsets_topic_replication_factor;
    ensure_internal_topic(broker, name, partitions, replication_factor, transaction_topic_configs).await?;
    super::create_partitions::grow_to(broker, name, partitions).await.map(|_| ()).map_err(|(code, message)| {
        tracing::warn!(topic = name, ?code, %message, "could not grow a changelog topic to its input's partitions");
        ResponseError::CoordinatorNotAvailable
    })
}

/// The leader of `partition` of `topic` and its endpoint: the coordinator of a key mapped there.
fn partition_leader(
    image: &crate::controller::MetadataImage,
    topic: &crate::controller::TopicImage,
    partition: u32,
) -> Result<(u64, (BrokerId, String, i32)), ResponseError> {
    let leader = topic
        .partitions
        .get(partition as usize)
        .and_then(|p| p.leader)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let broker = image.brokers.get(&leader).ok_or(ResponseError::CoordinatorNotAvailable)?;
    // A coordinator without the client's listener cannot be reached by it.
    let (host, port) = super::client_endpoint(broker).ok_or(ResponseError::CoordinatorNotAvailable)?;
    Ok((leader, (broker_id(broker.node_id), host.to_string(), port as i32)))
}

/// (node id, host, port) of the coordinator of `group`.
async fn group_coordinator(broker: &Broker, group: &str) -> Result<(BrokerId, String, i32), ResponseError> {
    ensure_offsets_topic(broker).await?;
    let partition = coordinator_partition(broker, group)?;
    let image = broker.controller.image();
    let topic = image.topics.get(OFFSETS_TOPIC).ok_or(ResponseError::CoordinatorNotAvailable)?;
    let (leader, endpoint) = partition_leader(&image, topic, partition)?;
    if leader == broker.settings.node_id {
        // Load the group's partition now, off the async workers, so the requests that follow
        // find it in memory. A failure shows up again, with its code, on those requests.
        let groups = broker.groups.clone();
        let loaded = tokio::task::spawn_blocking(move || groups.offsets.ensure_loaded(partition)).await;
        if let Ok(Err(e)) = loaded {
            tracing::debug!(partition, error = %e, "could not load __consumer_offsets partition");
        }
    }
    Ok(endpoint)
}

/// Topic configs of `__transaction_state`, as Kafka creates it (`transaction.state.log.*`:
/// compacted, `min.insync.replicas` 2 where there are that many replicas).
fn transaction_topic_configs(replication_factor: i16) -> BTreeMap<String, String> {
    let min_isr = replication_factor.clamp(1, 2).to_string();
    let mut configs = offsets_topic_configs();
    configs.insert("min.insync.replicas".to_string(), min_isr);
    configs.insert("unclean.leader.election.enable".to_string(), "false".to_string());
    configs
}

/// Creates `__transaction_state` through the metadata quorum if the image does not have it yet.
pub(crate) async fn ensure_transaction_topic(broker: &Broker) -> Result<(), ResponseError> {
    let settings = &broker.txn.settings;
    let (partitions, replication_factor) = (settings.num_partitions, settings.replication_factor);
    ensure_internal_topic(broker, TRANSACTION_STATE_TOPIC, partitions, replication_factor, transaction_topic_configs)
        .await
}

/// (node id, host, port) of the coordinator of `transactional_id`.
async fn transaction_coordinator(
    broker: &Broker,
    transactional_id: &str,
) -> Result<(BrokerId, String, i32), ResponseError> {
    ensure_transaction_topic(broker).await?;
    let image = broker.controller.image();
    let topic = image.topics.get(TRANSACTION_STATE_TOPIC).ok_or(ResponseError::CoordinatorNotAvailable)?;
    broker.txn.set_partition_count(topic.partitions.len() as u32);
    let partition = broker.txn.partition_of(transactional_id);
    partition_leader(&image, topic, partition).map(|(_, endpoint)| endpoint)
}

async fn coordinator(broker: &Broker, key_type: i8, key: &str) -> Result<(BrokerId, String, i32), ResponseError> {
    match key_type {
        KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION if key.is_empty() => Err(ResponseError::InvalidRequest),
        // Kafka: DESCRIBE on the group or transactional id.
        KEY_TYPE_GROUP if !broker.authorized(Operation::Describe, ResourceType::Group, key) => {
            Err(ResponseError::GroupAuthorizationFailed)
        }
        KEY_TYPE_TRANSACTION if !broker.authorized(Operation::Describe, ResourceType::TransactionalId, key) => {
            Err(ResponseError::TransactionalIdAuthorizationFailed)
        }
        KEY_TYPE_GROUP => group_coordinator(broker, key).await,
        KEY_TYPE_TRANSACTION => transaction_coordinator(broker, key).await,
        _ => Err(ResponseError::InvalidRequest),
    }
}

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
) -> Option<FindCoordinatorResponse> {
    let version = header.request_api_version;
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in &request.coordinator_keys {
            let entry = Coordinator::default().with_key(key.clone());
            coordinators.push(match coordinator(broker, request.key_type, key).await {
                Ok((node_id, host, port)) => entry.with_node_id(node_id).with_host(str_bytes(&host)).with_port(port),
                Err(code) => entry
                    .with_node_id(BrokerId(-1))
                    .with_host(str_bytes(""))
                    .with_port(-1)
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&code.to_string()))),
            });
        }
        return Some(FindCoordinatorResponse::default().with_coordinators(coordinators));
    }
    let response = FindCoordinatorResponse::default();
    Some(match coordinator(broker, request.key_type, &request.key).await {
        Ok((node_id, host, port)) => response.with_node_id(node_id).with_host(str_bytes(&host)).with_port(port),
        Err(code) => {
            let response =
                response.with_node_id(BrokerId(-1)).with_host(str_bytes("")).with_port(-1).with_error_code(code.code());
            if version >= 1 {
                response.with_error_message(Some(str_bytes(&code.to_string())))
            } else {
                response
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;

    #[test]
    fn offsets_topic_configs_are_valid() {
        // Proves every config we create __consumer_offsets with is a known, valid topic config.
        let mut config = LogConfig::default();
        for (name, value) in offsets_topic_configs() {
            config.set(&name, &value).unwrap();
        }
        assert!(config.cleanup_policy.compact);
        assert_eq!(config.segment_bytes, 104_857_600);
    }

    #[test]
    fn offsets_topic_replication_factor_is_capped_to_the_usable_brokers() {
        // Proves the default 3 becomes 1 on a one-node cluster and stays 3 on larger ones, and
        // that a cluster with no usable broker still asks for one replica (placement refuses).
        assert_eq!(offsets_topic_replication_factor(3, 1), 1);
        assert_eq!(offsets_topic_replication_factor(3, 2), 2);
        assert_eq!(offsets_topic_replication_factor(3, 5), 3);
        assert_eq!(offsets_topic_replication_factor(1, 5), 1);
        assert_eq!(offsets_topic_replication_factor(3, 0), 1);
        assert_eq!(offsets_topic_replication_factor(u16::MAX, 100_000), i16::MAX);
    }
}
