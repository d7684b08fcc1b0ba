//! AlterPartitionReassignments (`kafka-reassign-partitions.sh --execute` / `--cancel`): a target
//! replica list starts a reassignment (the replica list becomes the target followed by the
//! replicas it drops, with the adding and removing replicas recorded; the added brokers create
//! their replicas and fetch from the leader), a null one cancels the ongoing reassignment. The
//! rules are `controller/election.rs`'s; each change is a `PartitionChange` computed from the
//! partition epoch it saw, and the controller's decision loop completes the reassignment once
//! every target replica is in the ISR.

use crate::security::acl::Operation;
use kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::controller::election::{self, ReassignmentError};
use crate::controller::{ApplyOutcome, MetadataImage, NodeId};
use crate::server::{controller_error_code, reassignment_error_code, Broker};

/// How often a change is recomputed when a concurrent one (an ISR change, a fencing) moved the
/// partition epoch between reading the image and committing.
const STALE_RETRIES: usize = 5;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: AlterPartitionReassignmentsRequest,
) -> Option<AlterPartitionReassignmentsResponse> {
    // v0 has no such field: the replication factor may always change.
    let allow_rf_change = header.request_api_version == 0 || request.allow_replication_factor_change;
    if !broker.authorized_cluster(Operation::Alter) {
        return Some(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                .with_error_message(Some(super::str_bytes("Cluster authorization failed."))),
        );
    }
    let mut changed = false;
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in &topic.partitions {
            let outcome = alter_one(broker, &topic.name, partition, allow_rf_change).await;
            changed |= matches!(outcome, Ok(true));
            let response = ReassignablePartitionResponse::default().with_partition_index(partition.partition_index);
            partitions.push(match outcome {
                Ok(_) => response.with_error_message(None),
                Err((code, message)) => {
                    tracing::info!(topic = %&*topic.name, partition = partition.partition_index, %message, "partition reassignment refused");
                    response.with_error_code(code.code()).with_error_message(Some(str_bytes(&message)))
                }
            });
        }
        responses.push(ReassignableTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    if changed {
        broker.reconcile_now().await;
    }
    Some(
        AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(allow_rf_change)
            .with_error_message(None)
            .with_responses(responses),
    )
}

/// `Ok(true)` when a change was committed, `Ok(false)` when none was needed.
async fn alter_one(
    broker: &Broker,
    topic: &str,
    target: &ReassignablePartition,
    allow_rf_change: bool,
) -> Result<bool, (ResponseError, String)> {
    let refused = |e: ReassignmentError| (reassignment_error_code(&e), e.to_string());
    let target_replicas: Option<Vec<NodeId>> = match &target.replicas {
        None => None,
        Some(ids) => Some(ids.iter().map(|id| NodeId::try_from(id.0)).collect::<Result<_, _>>().map_err(|_| {
            refused(ReassignmentError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes an invalid broker id in {:?}.",
                ids.iter().map(|id| id.0).collect::<Vec<_>>()
            )))
        })?),
    };
    for _ in 0..STALE_RETRIES {
        let image = broker.controller.image();
        let Some(record) =
            decide(broker, &image, topic, target.partition_index, target_replicas.as_deref(), allow_rf_change)?
        else {
            return Ok(false);
        };
        match broker.controller.propose(record).await {
            Ok(ApplyOutcome::Applied) => return Ok(true),
            Ok(ApplyOutcome::StalePartitionEpoch { .. }) => continue,
            Ok(ApplyOutcome::UnknownTopic) => return Err(unknown_partition(topic, target.partition_index)),
            Ok(outcome) => {
                return Err((ResponseError::UnknownServerError, format!("reassignment not applied: {outcome:?}")));
            }
            Err(e) => return Err((controller_error_code(&e), e.to_string())),
        }
    }
    Err((
        ResponseError::RequestTimedOut,
        format!("{topic}-{} kept changing while the reassignment was computed; retry", target.partition_index),
    ))
}

/// The record of one partition's reassignment step from `image`; `None`: nothing changes.
fn decide(
    broker: &Broker,
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<&[NodeId]>,
    allow_rf_change: bool,
) -> Result<Option<crate::controller::MetadataRecord>, (ResponseError, String)> {
    let refused = |e: ReassignmentError| (reassignment_error_code(&e), e.to_string());
    let Some(topic_image) = image.topic(topic) else {
        return Err((ResponseError::UnknownTopicOrPartition, format!("Unable to find a topic named {topic}.")));
    };
    let p = u32::try_from(partition)
        .ok()
        .and_then(|i| image.partition(topic, i))
        .ok_or_else(|| unknown_partition(topic, partition))?;
    let (state, ongoing) = (p.election_state(), p.reassignment());
    let is_live = |r| image.is_live(r);
    let change = match target {
        None => {
            let unclean_allowed = broker.topic_log_config(&topic_image.configs).unclean_leader_election_enable;
            Some(election::cancel_reassignment(&state, &ongoing, unclean_allowed, is_live).map_err(refused)?)
        }
        Some(target) => {
            election::validate_target(target, |b| image.brokers.contains_key(&b)).map_err(refused)?;
            let current = election::original_replicas(&state, &ongoing).len();
            if !allow_rf_change && current != target.len() {
                return Err(refused(ReassignmentError::ReplicationFactorChange { current, target: target.len() }));
            }
            election::reassign(&state, &ongoing, target, is_live)
        }
    };
    Ok(change.map(|change| p.reassignment_record(topic, change)))
}

fn unknown_partition(topic: &str, partition: i32) -> (ResponseError, String) {
    (ResponseError::UnknownTopicOrPartition, format!("Unable to find partition {topic}:{partition}."))
}
