//! JoinGroup (v0-9): hands the request to the group's membership state machine and, when the
//! join must wait for the rest of the group, awaits the parked answer (no lock held). A join to
//! a consumer-protocol group with members makes a classic member of it (KIP-848 migration:
//! `group::consumer`'s classic half), its target assignment computed like a heartbeat's.
//! Also home of `check_coordinator`, the coordinator check every group API shares.

use crate::security::acl::{Operation, ResourceType};
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{consumer_group_heartbeat, str_bytes};
use crate::group::consumer::ClassicBegin;
use crate::group::embedded;
use crate::group::membership::{self, JoinRequest, JoinResult, Reply};
use crate::group::OFFSETS_TOPIC;
use crate::server::{offset_error_code, Broker};

/// Slack on top of the rebalance timeout before a parked join gives up on the sweep.
const PARKED_SLACK: Duration = Duration::from_secs(5);

/// This node coordinates `group` when it leads the group's `__consumer_offsets` partition.
/// COORDINATOR_NOT_AVAILABLE until FindCoordinator has created the topic; NOT_COORDINATOR
/// when another node leads the partition; COORDINATOR_LOAD_IN_PROGRESS while the partition is
/// read into memory (the load runs on the blocking pool, never on this worker).
/// Kafka's group authorization, checked before anything else: `operation` (READ to take part,
/// DESCRIBE to look, DELETE to remove) on the group, GROUP_AUTHORIZATION_FAILED otherwise.
pub(crate) fn authorize_group(broker: &Broker, group: &str, operation: Operation) -> Result<(), ResponseError> {
    if broker.authorized(operation, ResourceType::Group, group) {
        Ok(())
    } else {
        Err(ResponseError::GroupAuthorizationFailed)
    }
}

/// [`authorize_group`], then [`check_coordinator`].
pub(crate) fn authorize_and_check_coordinator(
    broker: &Broker,
    group: &str,
    operation: Operation,
) -> Result<(), ResponseError> {
    authorize_group(broker, group, operation).and_then(|()| check_coordinator(broker, group))
}

pub(crate) fn check_coordinator(broker: &Broker, group: &str) -> Result<(), ResponseError> {
    let partition = coordinator_partition(broker, group)?;
    let leader = broker
        .controller
        .image()
        .topics
        .get(OFFSETS_TOPIC)
        .and_then(|t| t.partitions.get(partition as usize).and_then(|p| p.leader));
    if leader != Some(broker.settings.node_id) || broker.replicas.get(OFFSETS_TOPIC, partition).is_none() {
        return Err(ResponseError::NotCoordinator);
    }
    broker.groups.offsets.require_loaded(partition).map_err(|e| offset_error_code(&e))
}

/// The `__consumer_offsets` partition of `group`, over the topic's actual partition count (the
/// one source both the coordinator lookup and the offsets store use).
pub(crate) fn coordinator_partition(broker: &Broker, group: &str) -> Result<u32, ResponseError> {
    if group.is_empty() {
        return Err(ResponseError::InvalidGroupId);
    }
    let image = broker.controller.image();
    let topic = image.topics.get(OFFSETS_TOPIC).ok_or(ResponseError::CoordinatorNotAvailable)?;
    broker.groups.offsets.set_partition_count(topic.partitions.len() as u32);
    Ok(broker.groups.offsets.partition_of(group))
}

pub async fn handle(broker: &Broker, header: &RequestHeader, request: JoinGroupRequest) -> Option<JoinGroupResponse> {
    let version = header.request_api_version;
    let group: &str = &request.group_id.0;
    let member_id = request.member_id.to_string();
    if let Err(code) = authorize_and_check_coordinator(broker, group, Operation::Read) {
        return Some(response(JoinResult::error(code, &member_id), version));
    }
    // v0 has no rebalance timeout: Kafka uses the session timeout.
    let rebalance_timeout_ms = if version >= 1 { request.rebalance_timeout_ms } else { request.session_timeout_ms };
    let join = JoinRequest {
        group_id: group.to_string(),
        member_id: member_id.clone(),
        group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default(),
        client_host: crate::server::client_host(),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
    };
    if let Err(code) = broker.groups.membership.check_join(&join) {
        return Some(response(JoinResult::error(code, &member_id), version));
    }
    if let Some(result) = join_consumer_group(broker, &join).await {
        return Some(response(result, version));
    }
    // An empty consumer-protocol group converts to a classic one.
    if !broker.groups.consumers.remove_if_empty(group) {
        return Some(response(JoinResult::error(ResponseError::InconsistentGroupProtocol, &member_id), version));
    }
    let is_static = join.group_instance_id.is_some();
    let result = match broker.groups.membership.join(join, membership::now()) {
        // A static member that replaced its old id in a Stable group (no rebalance) is answered
        // once the group with its new id is stored, as Kafka's
        // `updateStaticMemberThenRebalanceOrCompleteJoin` does: else a new coordinator would
        // restore the old id, unfencing the instance it replaced.
        Reply::Now(result) if is_static && result.error.is_none() => {
            match super::sync_group::persist_group(broker, group).await {
                Ok(()) => result,
                Err(code) => JoinResult::error(code, &result.member_id),
            }
        }
        Reply::Now(result) => result,
        Reply::Parked(rx) => {
            let wait = Duration::from_millis(rebalance_timeout_ms.max(0) as u64) + PARKED_SLACK;
            match tokio::time::timeout(wait, rx).await {
                Ok(Ok(result)) => result,
                // Replaced by a newer join of the same member, or the rebalance did not end in
                // time: the client retries the join.
                Ok(Err(_)) | Err(_) => JoinResult::error(ResponseError::RebalanceInProgress, &member_id),
            }
        }
    };
    Some(response(result, version))
}

/// A classic member's join to a consumer-protocol group with members (Kafka's
/// `classicGroupJoinToConsumerGroup`); `None` when the group is not one here. Answered at once
/// (no waiting for other members): generation = the member's epoch, no leader, the member's
/// first protocol.
async fn join_consumer_group(broker: &Broker, join: &JoinRequest) -> Option<JoinResult> {
    let consumers = &broker.groups.consumers;
    let image = broker.controller.image();
    let pending = match consumers.classic_join(join, &image, membership::now()) {
        ClassicBegin::NotHere => return None,
        ClassicBegin::Refused(error, member_id, why) => {
            if !why.is_empty() {
                tracing::debug!(group = %join.group_id, member = %member_id, %why, "classic join to a consumer group refused");
            }
            return Some(JoinResult::error(error, &member_id));
        }
        ClassicBegin::Continue(pending) => pending,
    };
    let outcome = match pending.job.clone() {
        Some(job) => consumer_group_heartbeat::assign(broker, &image, job).await,
        None => None,
    };
    let (joined, write) = consumers.finish_classic_join(pending, outcome, membership::now());
    let joined = match (joined, consumer_group_heartbeat::stored(write).await) {
        (Ok(joined), Ok(())) => joined,
        (Err(error), _) | (_, Err((error, _))) => return Some(JoinResult::error(error, &join.member_id)),
    };
    Some(JoinResult {
        error: None,
        generation_id: joined.generation,
        protocol_type: Some(embedded::PROTOCOL_TYPE.to_string()),
        protocol_name: Some(joined.protocol_name),
        leader: String::new(),
        member_id: joined.member_id,
        members: Vec::new(),
        skip_assignment: false,
    })
}

fn response(result: JoinResult, version: i16) -> JoinGroupResponse {
    let members = result
        .members
        .into_iter()
        .map(|m| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(&m.member_id))
                .with_group_instance_id(if version >= 5 { m.group_instance_id.as_deref().map(str_bytes) } else { None })
                .with_metadata(m.metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_error_code(result.error.map_or(0, |e| e.code()))
        .with_generation_id(result.generation_id)
        .with_protocol_type(if version >= 7 { result.protocol_type.as_deref().map(str_bytes) } else { None })
        .with_protocol_name(match (version >= 7, result.protocol_name) {
            (true, name) => name.as_deref().map(str_bytes),
            // Before v7 the name is a non-nullable string.
            (false, name) => Some(str_bytes(name.as_deref().unwrap_or(""))),
        })
        .with_leader(str_bytes(&result.leader))
        .with_skip_assignment(version >= 9 && result.skip_assignment)
        .with_member_id(str_bytes(&result.member_id))
        .with_members(members)
}
