//! CreatePartitions: grows a topic to `count` partitions (never shrinks), with the client's
//! replica assignments or placed over the usable brokers (`server::placement`, continuing the
//! topic's leader rotation) at the replication factor of partition 0, committed through the
//! metadata quorum.

use std::collections::BTreeSet;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::controller::partition_limits::{ReplicaBudget, EXCESSIVE_PARTITIONS, MAX_PARTITIONS_PER_REQUEST};
use crate::controller::{ApplyOutcome, MetadataRecord};
use crate::security::acl::{Operation, ResourceType};
use crate::server::placement::{self, PlacementSpec, Start};
use crate::server::{controller_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: CreatePartitionsRequest,
) -> Option<CreatePartitionsResponse> {
    let mut seen = BTreeSet::new();
    let duplicated: BTreeSet<&str> = request.topics.iter().map(|t| &*t.name.0).filter(|n| !seen.insert(*n)).collect();
    let mut created = false;
    // One budget for the request, so its topics count against each other.
    let mut budget = ReplicaBudget::of(&broker.controller.image(), broker.settings.max_broker_partitions);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let outcome = if duplicated.contains(&*topic.name.0) {
            Err((ResponseError::InvalidRequest, "Duplicate topic name.".to_string()))
        } else if !broker.authorized(Operation::Alter, ResourceType::Topic, &topic.name.0) {
            Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string()))
        } else {
            grow(broker, &mut budget, topic, request.validate_only).await
        };
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        results.push(match outcome {
            Ok(applied) => {
                created |= applied;
                result
            }
            Err((code, message)) => result.with_error_code(code.code()).with_error_message(Some(str_bytes(&message))),
        });
    }
    if created {
        broker.reconcile_now().await;
    }
    Some(CreatePartitionsResponse::default().with_results(results))
}

/// Grows `name` to `count` partitions placed like any request's (an internal topic that must
/// follow another's partition count); `Ok(false)` when it already has that many or more.
pub(crate) async fn grow_to(broker: &Broker, name: &str, count: u32) -> Result<bool, (ResponseError, String)> {
    let has = broker.controller.image().topics.get(name).map_or(0, |t| t.partitions.len());
    if has >= count as usize {
        return Ok(false);
    }
    let mut budget = ReplicaBudget::of(&broker.controller.image(), broker.settings.max_broker_partitions);
    let topic = CreatePartitionsTopic::default()
        .with_name(kafka_protocol::messages::TopicName(str_bytes(name)))
        .with_count(i32::try_from(count).unwrap_or(i32::MAX))
        .with_assignments(None);
    match grow(broker, &mut budget, &topic, false).await {
        Ok(true) => {
            broker.reconcile_now().await;
            Ok(true)
        }
        // Grown meanwhile by another worker.
        Err((ResponseError::InvalidPartitions, _)) => Ok(false),
        other => other,
    }
}

/// Validates and (unless `validate_only`) adds the partitions. `Ok(true)` when committed.
async fn grow(
    broker: &Broker,
    budget: &mut ReplicaBudget,
    topic: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<bool, (ResponseError, String)> {
    let name: &str = &topic.name.0;
    let image = broker.controller.image();
    let Some(current) = image.topics.get(name) else {
        return Err((ResponseError::UnknownTopicOrPartition, format!("topic '{name}' does not exist")));
    };
    if name == crate::group::OFFSETS_TOPIC {
        // Groups map to partitions by count: growing it would strand every group's offsets.
        return Err((ResponseError::PolicyViolation, crate::group::OFFSETS_TOPIC_PARTITIONS_REFUSED.to_string()));
    }
    let current_count = current.partitions.len();
    let additional = check_count(current_count, topic.count)?;
    let first_new = current_count as u32;
    let replication_factor = current.partitions.first().map_or(0, |p| p.replicas.len());
    let new_partitions = match &topic.assignments {
        Some(assignments) => {
            let assignments: Vec<Vec<i32>> =
                assignments.iter().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect();
            let checked =
                check_assignments(&assignments, additional, replication_factor, |id| image.brokers.contains_key(&id))?;
            check_some_live(&checked, first_new, |id| image.is_live(id))?;
            checked
        }
        None => {
            let replication_factor = if replication_factor == 0 {
                broker.settings.default_replication_factor as usize
            } else {
                replication_factor
            };
            let brokers = placement::usable_brokers(&image);
            let partition_0_first_replica = current.partitions.first().and_then(|p| p.replicas.first().copied());
            let spec = PlacementSpec {
                first_partition: first_new,
                partitions: additional,
                replication_factor: i32::try_from(replication_factor).unwrap_or(i32::MAX),
            };
            // Kafka answers the placer's own message here, without CreateTopics' prefix.
            placement::assign_replicas(&brokers, spec, Start::continuing(&brokers, partition_0_first_replica))
                .map_err(|e| (ResponseError::InvalidReplicationFactor, e.to_string()))?
        }
    };
    budget.take(name, &new_partitions).map_err(|message| (ResponseError::PolicyViolation, message))?;
    if validate_only {
        return Ok(false);
    }
    let record = MetadataRecord::CreatePartitions {
        topic: name.to_string(),
        new_partitions,
        max_broker_partitions: Some(broker.settings.max_broker_partitions),
    };
    match broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => Ok(true),
        Ok(ApplyOutcome::UnknownTopic) => {
            Err((ResponseError::UnknownTopicOrPartition, format!("topic '{name}' does not exist")))
        }
        // Another request grew the topic between our check and the commit.
        Ok(ApplyOutcome::InvalidPartitionCount { current }) => Err((
            ResponseError::InvalidPartitions,
            format!("Topic currently has {current} partitions, which is higher than the requested {}.", topic.count),
        )),
        Ok(other) => Err(refused_creation(other)),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}

/// The number of partitions to add; only increases are allowed, as in Kafka.
fn check_count(current: usize, requested: i32) -> Result<u32, (ResponseError, String)> {
    if requested as i64 == current as i64 {
        return Err((ResponseError::InvalidPartitions, format!("Topic already has {current} partitions.")));
    }
    if (requested as i64) < current as i64 {
        return Err((
            ResponseError::InvalidPartitions,
            format!("Topic currently has {current} partitions, which is higher than the requested {requested}."),
        ));
    }
    let additional = (requested as i64 - current as i64) as u64;
    if additional > MAX_PARTITIONS_PER_REQUEST {
        // CreateTopics' bound on one request, applied to the partitions this one adds.
        return Err((ResponseError::PolicyViolation, EXCESSIVE_PARTITIONS.to_string()));
    }
    Ok(additional as u32)
}

/// The answer to a creation (CreateTopics or CreatePartitions) the image refused where it
/// applied, for the outcomes both share.
pub(super) fn refused_creation(outcome: ApplyOutcome) -> (ResponseError, String) {
    match outcome {
        // Another creation committed first took the room this one was checked against.
        ApplyOutcome::ReplicaLimit { message } => (ResponseError::PolicyViolation, message),
        ApplyOutcome::InvalidReplicaAssignment => {
            (ResponseError::InvalidReplicaAssignment, "a replica list is empty or names a broker twice".into())
        }
        other => (ResponseError::UnknownServerError, format!("unexpected outcome {other:?}")),
    }
}

/// Kafka's checks of manual assignments: one per new partition, no empty list, no broker twice,
/// only registered brokers, and the replication factor of the existing partitions.
pub(super) fn check_assignments(
    assignments: &[Vec<i32>],
    additional: u32,
    replication_factor: usize,
    registered: impl Fn(u64) -> bool,
) -> Result<Vec<Vec<u64>>, (ResponseError, String)> {
    let invalid = |message: String| Err((ResponseError::InvalidReplicaAssignment, message));
    if assignments.len() != additional as usize {
        return invalid(format!(
            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        ));
    }
    let mut result = Vec::with_capacity(assignments.len());
    for replicas in assignments {
        if replicas.is_empty() {
            return invalid("The manual partition assignment includes an empty replica list.".to_string());
        }
        let mut ids = Vec::with_capacity(replicas.len());
        for &id in replicas {
            let Ok(node) = u64::try_from(id) else {
                return invalid(format!(
                    "The manual partition assignment includes broker {id}, but no such broker is registered."
                ));
            };
            if ids.contains(&node) {
                return invalid(format!("The manual partition assignment includes the broker {id} more than once."));
            }
            if !registered(node) {
                return invalid(format!(
                    "The manual partition assignment includes broker {id}, but no such broker is registered."
                ));
            }
            ids.push(node);
        }
        if replication_factor != 0 && ids.len() != replication_factor {
            return invalid(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not \
                 consistent with previous partitions, which have {replication_factor} replica(s).",
                ids.len()
            ));
        }
        result.push(ids);
    }
    Ok(result)
}

/// Kafka's `createTopic` / `createPartitions` check: a manual assignment of a partition whose
/// brokers are all fenced is refused (it could have no leader); `first` numbers the first one.
pub(super) fn check_some_live(
    assignments: &[Vec<u64>],
    first: u32,
    live: impl Fn(u64) -> bool,
) -> Result<(), (ResponseError, String)> {
    for (replicas, partition) in assignments.iter().zip(first..) {
        if !replicas.iter().any(|&id| live(id)) {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "All brokers specified in the manual partition assignment for partition {partition} are fenced \
                     or in controlled shutdown."
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_increases_are_allowed() {
        // Proves equal and smaller counts are INVALID_PARTITIONS with Kafka's wording.
        assert_eq!(check_count(3, 5).unwrap(), 2);
        let equal = check_count(3, 3).unwrap_err();
        assert_eq!(equal.0, ResponseError::InvalidPartitions);
        let smaller = check_count(3, 2).unwrap_err();
        assert_eq!(smaller.1, "Topic currently has 3 partitions, which is higher than the requested 2.");
        assert_eq!(check_count(3, -1).unwrap_err().0, ResponseError::InvalidPartitions);
        assert_eq!(check_count(3, i32::MAX).unwrap_err().0, ResponseError::PolicyViolation);
        assert_eq!(check_count(3, 10_003).unwrap(), 10_000);
    }

    #[test]
    fn manual_assignments_are_checked_like_kafka() {
        // Proves count, empty lists, repeats, unknown or negative brokers and a changed
        // replication factor are INVALID_REPLICA_ASSIGNMENT.
        let registered = |id: u64| id <= 2;
        assert_eq!(
            check_assignments(&[vec![0, 1], vec![2, 0]], 2, 2, registered).unwrap(),
            vec![vec![0, 1], vec![2, 0]]
        );
        for (assignments, additional) in [
            (vec![vec![0, 1]], 2),
            (vec![vec![]], 1),
            (vec![vec![1, 1]], 1),
            (vec![vec![0, 7]], 1),
            (vec![vec![0, -1]], 1),
            (vec![vec![0]], 1),
        ] {
            let err = check_assignments(&assignments, additional, 2, registered).unwrap_err();
            assert_eq!(err.0, ResponseError::InvalidReplicaAssignment, "{assignments:?}: {}", err.1);
        }
    }
}
