//! ElectLeaders (`kafka-leader-election.sh`): a preferred election gives each named partition
//! (or every partition, when the request names none) back to its first replica if that replica
//! is live and in the ISR; an unclean election (v1+) gives an offline partition to its first live
//! replica. Each change is a `PartitionChange` computed from the partition epoch it saw.

use crate::security::acl::Operation;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::controller::election::{elect_leader, elect_preferred, PreferredElection};
use crate::controller::{ApplyOutcome, MetadataImage};
use crate::server::{controller_error_code, Broker};

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: ElectLeadersRequest,
) -> Option<ElectLeadersResponse> {
    let election_type = if header.request_api_version == 0 { PREFERRED } else { request.election_type };
    let image = broker.controller.image();
    // Kafka: ALTER on the cluster, checked first: refused, the answer names only the partitions
    // asked for (none for "all"), never the cluster's topics.
    if !broker.authorized_cluster(Operation::Alter) {
        let denied = |partitions: &Vec<i32>| {
            let error = ResponseError::ClusterAuthorizationFailed;
            partitions
                .iter()
                .map(|&p| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(error.code())
                        .with_error_message(Some(str_bytes("Cluster authorization failed.")))
                })
                .collect()
        };
        let results = request
            .topic_partitions
            .iter()
            .flatten()
            .map(|t| {
                ReplicaElectionResult::default()
                    .with_topic(t.topic.clone())
                    .with_partition_result(denied(&t.partitions))
            })
            .collect();
        let response = ElectLeadersResponse::default().with_replica_election_results(results);
        return Some(if header.request_api_version >= 1 {
            response.with_error_code(ResponseError::ClusterAuthorizationFailed.code())
        } else {
            response
        });
    }
    let all = request.topic_partitions.is_none();
    let wanted: Vec<(String, Vec<i32>)> = match &request.topic_partitions {
        Some(topics) => topics.iter().map(|t| (t.topic.0.to_string(), t.partitions.clone())).collect(),
        // Null: every partition of every topic (Kafka's "all topic partitions").
        None => image
            .topics
            .values()
            .map(|t| (t.name.clone(), t.partitions.iter().map(|p| p.partition as i32).collect()))
            .collect(),
    };
    let mut results = Vec::with_capacity(wanted.len());
    let mut changed = false;
    for (topic, partitions) in wanted {
        let mut partition_results = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let outcome = elect(broker, &image, election_type, &topic, partition).await;
            // Kafka: "When electing leaders for all partitions, we do not return partitions
            // which already have the desired leader."
            if all && matches!(&outcome, Err((ResponseError::ElectionNotNeeded, _))) {
                continue;
            }
            changed |= outcome.is_ok();
            let result = PartitionResult::default().with_partition_id(partition);
            partition_results.push(match outcome {
                Ok(()) => result,
                Err((code, message)) => {
                    result.with_error_code(code.code()).with_error_message(Some(str_bytes(&message)))
                }
            });
        }
        if all && partition_results.is_empty() {
            continue;
        }
        results.push(
            ReplicaElectionResult::default()
                .with_topic(kafka_protocol::messages::TopicName(str_bytes(&topic)))
                .with_partition_result(partition_results),
        );
    }
    if changed {
        broker.reconcile_now().await;
    }
    Some(ElectLeadersResponse::default().with_replica_election_results(results))
}

async fn elect(
    broker: &Broker,
    image: &MetadataImage,
    election_type: i8,
    topic: &str,
    partition: i32,
) -> Result<(), (ResponseError, String)> {
    let unknown = || (ResponseError::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist"));
    let p = u32::try_from(partition).ok().and_then(|i| image.partition(topic, i)).ok_or_else(unknown)?;
    let state = p.election_state();
    let decision = match election_type {
        PREFERRED => elect_preferred(&state, |r| image.is_live(r)).map_err(|e| match e {
            PreferredElection::NotNeeded => {
                (ResponseError::ElectionNotNeeded, "the preferred replica already leads".to_string())
            }
            PreferredElection::NotAvailable => (
                ResponseError::PreferredLeaderNotAvailable,
                format!("preferred replica {:?} is not live and in the ISR {:?}", p.replicas.first(), p.isr),
            ),
        })?,
        UNCLEAN => {
            if p.leader.is_some() {
                return Err((ResponseError::ElectionNotNeeded, "the partition has a leader".to_string()));
            }
            let decision = elect_leader(&state, |r| image.is_live(r), true);
            if decision.leader.is_none() {
                return Err((ResponseError::EligibleLeadersNotAvailable, "no replica is live".to_string()));
            }
            if decision.unclean {
                tracing::warn!(topic, partition, leader = ?decision.leader, "unclean leader election requested by a client");
            }
            decision
        }
        other => return Err((ResponseError::InvalidRequest, format!("unknown election type {other}"))),
    };
    match broker.controller.propose(p.change_record(topic, decision)).await {
        Ok(ApplyOutcome::Applied) => Ok(()),
        Ok(outcome) => Err((ResponseError::NotController, format!("not applied: {outcome:?}; retry"))),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}
