//! ConsumerGroupHeartbeat (v0-1, KIP-848): joins, leaves and heartbeats of consumer-protocol
//! members. The group's state machine is `group::consumer`; this handler checks the
//! coordinator and the group's type, runs a needed target assignment on the blocking pool
//! (outside every group lock) and answers.
//!
//! Group types: an empty classic group is converted (its committed offsets stay, they are
//! keyed by group id); a classic group with members is upgraded online when
//! `group.consumer.migration.policy` allows it and its members speak the embedded consumer
//! protocol (they go on as classic members of the consumer group, `group::consumer`'s classic
//! half), else refused with GROUP_ID_NOT_FOUND, Kafka's answer when it cannot convert.

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DescribeLogDirsRequest, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::join_group::authorize_and_check_coordinator;
use super::{str_bytes, topic_name, uuid_of};
use crate::controller::MetadataImage;
use crate::group::assignor::{self, TopicSpec};
use crate::group::consumer::{self, AssignJob, AssignOutcome, Begin, HeartbeatAnswer, HeartbeatRequest};
use crate::group::membership::{self, GroupState};
use crate::group::Replicated;
use crate::security::acl::{Operation, ResourceType};
use crate::server::{offset_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: ConsumerGroupHeartbeatRequest,
) -> Option<ConsumerGroupHeartbeatResponse> {
    let group: &str = &request.group_id.0;
    if let Err(code) = authorize_and_check_coordinator(broker, group, Operation::Read) {
        return Some(response(HeartbeatAnswer { error: Some((code, None)), ..answer_without_member() }));
    }
    // Kafka's KafkaApis: every subscribed topic name must be one the member may describe.
    let subscribed = request.subscribed_topic_names.iter().flatten();
    if subscribed.into_iter().any(|t| !broker.authorized(Operation::Describe, ResourceType::Topic, &t.0)) {
        let error = Some((ResponseError::TopicAuthorizationFailed, None));
        return Some(response(HeartbeatAnswer { error, ..answer_without_member() }));
    }
    let image = broker.controller.image();
    if request.member_epoch == consumer::JOIN_EPOCH && broker.groups.consumers.members_of(group).is_none() {
        if let Err(message) = convert_classic(broker, group, &image) {
            return Some(response(HeartbeatAnswer {
                error: Some((ResponseError::GroupIdNotFound, Some(message))),
                ..answer_without_member()
            }));
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
        topic_access: broker.topic_access(),
    };
    let consumers = &broker.groups.consumers;
    let (answer, write) = match consumers.begin(decoded, &image, membership::now()) {
        Begin::Answer(answer) => (answer, None),
        Begin::Left(answer, write) => (answer, write),
        Begin::Continue(pending) => {
            let outcome = match pending.job.clone() {
                None => None,
                Some(job) => assign(broker, &image, job).await,
            };
            consumers.finish(pending, outcome, membership::now())
        }
    };
    // Answered once the group's records are in the ISR (Kafka answers after the write).
    match stored(write).await {
        Ok(()) => Some(response(answer)),
        Err((code, message)) => {
            Some(response(HeartbeatAnswer { error: Some((code, Some(message))), ..answer_without_member() }))
        }
    }
}

/// Makes way for the first consumer-protocol member of a group the classic membership holds:
/// an empty classic group is dropped (converted); one with members is upgraded online (its
/// members become classic members of the new consumer group) if the migration policy allows
/// and its members speak the consumer protocol. `Err` says why it cannot be.
fn convert_classic(broker: &Broker, group: &str, image: &MetadataImage) -> Result<(), String> {
    let membership = &broker.groups.membership;
    match membership.state(group) {
        None | Some(GroupState::Dead) => return Ok(()),
        Some(GroupState::Empty) => {
            if membership.delete(group).is_ok() {
                tracing::info!(group, "converted an empty classic group to the consumer protocol");
            }
            return Ok(());
        }
        Some(_) => {}
    }
    let consumers = &broker.groups.consumers;
    let config = consumers.config();
    if !config.migration_policy.upgrade_enabled() {
        return Err(format!(
            "Group {group} is a classic group with members and group.consumer.migration.policy does not allow upgrades."
        ));
    }
    match membership.take_for_upgrade(group, config.max_size) {
        Ok(None) => Ok(()),
        Ok(Some(classic)) => {
            consumers.adopt_classic(group, &classic, image, membership::now()).map_err(|why| {
                // The classic group stays what it was: its members rejoin it.
                membership.adopt(group, classic, membership::now());
                format!("Cannot upgrade classic group {group} to a consumer group: {why}.")
            })?;
            Ok(())
        }
        Err(why) => Err(format!("Cannot upgrade classic group {group} to a consumer group: {why}.")),
    }
}

/// Waits until a group write is in the ISR: the error code and message a client gets if not.
pub(super) async fn stored(write: consumer::Write) -> Result<(), (ResponseError, String)> {
    let stored = match write {
        None => Ok(()),
        Some(Ok(replicated)) => replicated.wait(Replicated::TIMEOUT).await,
        Some(Err(error)) => Err(error),
    };
    stored.map_err(|error| (offset_error_code(&error), format!("storing the group's state: {error}")))
}

/// Computes a target assignment outside every group lock, on the blocking pool: with the
/// built-in assignor of that name, else the uploaded one the image names (given the subscribed
/// partitions' sizes). `None` only if the task itself died (no new target this time).
pub(super) async fn assign(broker: &Broker, image: &MetadataImage, job: AssignJob) -> Option<AssignOutcome> {
    let groups = broker.groups.clone();
    let uploaded = match assignor::builtin(&job.assignor) {
        Some(_) => None,
        None => broker.assignors.current(image, &job.assignor).await,
    };
    let Some(uploaded) = uploaded else {
        return tokio::task::spawn_blocking(move || groups.consumers.run_builtin(&job)).await.ok();
    };
    let sizes = partition_sizes(broker, image, &job.spec.topics).await;
    let version = uploaded.image.version;
    tokio::task::spawn_blocking(move || {
        let plan = uploaded.assign(&job.spec, &sizes);
        groups.consumers.outcome_or_default(&job, plan, Some(version))
    })
    .await
    .ok()
}

/// How long the coordinator waits for another leader's partition sizes before it gives the
/// assignor 0 ("unknown") for them: an assignment must not wait on a slow broker.
const SIZES_TIMEOUT: Duration = Duration::from_millis(500);
const DESCRIBE_LOG_DIRS_VERSION: i16 = 4;

/// The size in bytes of every partition of `topics` (index = partition): this node's replica
/// where it has one, else the leader's answer to DescribeLogDirs (one request per leader, all
/// at once, bounded by [`SIZES_TIMEOUT`]); 0 where neither is known.
async fn partition_sizes(
    broker: &Broker,
    image: &MetadataImage,
    topics: &BTreeMap<String, TopicSpec>,
) -> BTreeMap<String, Vec<u64>> {
    let mut sizes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut remote: BTreeMap<u64, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (name, spec) in topics {
        let Some(topic) = image.topic(name) else { continue };
        let mut known = vec![0u64; spec.partitions as usize];
        for (p, size) in known.iter_mut().enumerate() {
            let local = broker.replicas.get(name, p as u32).filter(|r| r.topic_id() == topic.topic_id);
            match (local, topic.partitions.get(p).and_then(|p| p.leader)) {
                (Some(replica), _) => *size = replica.size_bytes(),
                (None, Some(leader)) => {
                    remote.entry(leader).or_default().entry(name.clone()).or_default().push(p as i32)
                }
                (None, None) => {}
            }
        }
        sizes.insert(name.clone(), known);
    }
    let calls = remote.into_iter().map(|(leader, wanted)| async move {
        let request = DescribeLogDirsRequest::default().with_topics(Some(
            wanted
                .into_iter()
                .map(|(name, partitions)| {
                    DescribableLogDirTopic::default().with_topic(topic_name(&name)).with_partitions(partitions)
                })
                .collect(),
        ));
        broker.peers.call(leader, DESCRIBE_LOG_DIRS_VERSION, &request, SIZES_TIMEOUT).await
    });
    for answer in futures_util::future::join_all(calls).await {
        let Ok(answer) = answer else { continue };
        for dir in answer.results {
            for topic in dir.topics {
                let Some(known) = sizes.get_mut(topic.name.0.as_str()) else { continue };
                for p in topic.partitions {
                    if let Some(size) = usize::try_from(p.partition_index).ok().and_then(|i| known.get_mut(i)) {
                        *size = u64::try_from(p.partition_size).unwrap_or(0);
                    }
                }
            }
        }
    }
    sizes
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
