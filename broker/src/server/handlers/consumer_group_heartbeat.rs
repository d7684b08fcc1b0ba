//! ConsumerGroupHeartbeat (v0-1, KIP-848): joins, leaves and heartbeats of consumer-protocol
//! members. The group's state machine is `group::consumer`; this handler checks the
//! coordinator and the group's type, runs a needed target assignment on the blocking pool
//! (outside every group lock) and answers.
//!
//! Group types: a classic group with members refuses the consumer protocol
//! (GROUP_ID_NOT_FOUND, Kafka's answer when it cannot convert it); an empty one is converted
//! (its committed offsets stay, they are keyed by group id).

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::join_group::check_coordinator;
use super::{str_bytes, uuid_of};
use crate::group::consumer::{self, Begin, HeartbeatAnswer, HeartbeatRequest};
use crate::group::membership::{self, GroupState};
use crate::group::Replicated;
use crate::server::{offset_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: ConsumerGroupHeartbeatRequest,
) -> Option<ConsumerGroupHeartbeatResponse> {
    let group: &str = &request.group_id.0;
    if let Err(code) = check_coordinator(broker, group) {
        return Some(response(HeartbeatAnswer { error: Some((code, None)), ..answer_without_member() }));
    }
    if request.member_epoch == consumer::JOIN_EPOCH && broker.groups.consumers.members_of(group).is_none() {
        match broker.groups.membership.state(group) {
            None | Some(GroupState::Dead) => {}
            Some(GroupState::Empty) => {
                if broker.groups.membership.delete(group).is_ok() {
                    tracing::info!(group, "converted an empty classic group to the consumer protocol");
                }
            }
            Some(_) => {
                let message = format!("Group {group} is not a consumer group.");
                return Some(response(HeartbeatAnswer {
                    error: Some((ResponseError::GroupIdNotFound, Some(message))),
                    ..answer_without_member()
                }));
            }
        }
    }
    let owned = request.topic_partitions.as_ref().map(|topics| {
        let mut owned = consumer::Assignment::new();
        for t in topics {
            owned.entry(*t.topic_id.as_bytes()).or_default().extend(t.partitions.iter().copied());
        }
        owned
    });
    let decoded = HeartbeatRequest {
        version: header.request_api_version,
        group_id: group.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .as_ref()
            .map(|n| n.iter().map(|t| t.0.to_string()).collect()),
        subscribed_topic_regex: request.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        server_assignor: request.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default(),
        client_host: crate::server::client_host(),
    };
    let image = broker.controller.image();
    let consumers = &broker.groups.consumers;
    let known = |name: &str| consumers.config().assignors.iter().any(|a| a == name);
    let (answer, write) = match consumers.begin(decoded, &image, &known, membership::now()) {
        Begin::Answer(answer) => (answer, None),
        Begin::Left(answer, write) => (answer, write),
        Begin::Continue(pending) => {
            let outcome = match pending.job.clone() {
                None => None,
                Some(job) => {
                    let groups = broker.groups.clone();
                    tokio::task::spawn_blocking(move || groups.consumers.run_builtin(&job)).await.ok()
                }
            };
            consumers.finish(pending, outcome, membership::now())
        }
    };
    // Answered once the group's records are in the ISR (Kafka answers after the write).
    let stored = match write {
        None => Ok(()),
        Some(Ok(replicated)) => replicated.wait(Replicated::TIMEOUT).await,
        Some(Err(error)) => Err(error),
    };
    match stored {
        Ok(()) => Some(response(answer)),
        Err(error) => Some(response(HeartbeatAnswer {
            error: Some((offset_error_code(&error), Some(format!("storing the group's state: {error}")))),
            ..answer_without_member()
        })),
    }
}

fn answer_without_member() -> HeartbeatAnswer {
    HeartbeatAnswer {
        error: None,
        member_id: String::new(),
        member_epoch: 0,
        heartbeat_interval_ms: 0,
        assignment: None,
    }
}

fn response(answer: HeartbeatAnswer) -> ConsumerGroupHeartbeatResponse {
    let (error_code, error_message) = match &answer.error {
        Some((code, message)) => (code.code(), message.as_deref().map(str_bytes)),
        None => (0, None),
    };
    let assignment = answer.assignment.map(|assigned| {
        Assignment::default().with_topic_partitions(
            assigned
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(uuid_of(topic))
                        .with_partitions(partitions.into_iter().collect())
                })
                .collect(),
        )
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(error_code)
        .with_error_message(error_message)
        .with_member_id((!answer.member_id.is_empty()).then(|| str_bytes(&answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(assignment)
}
