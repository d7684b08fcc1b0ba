//! SyncGroup (v0-5): the leader hands in the assignments, every member gets its own. A
//! follower's request is parked until the leader's arrives (or the rebalance restarts), and
//! every member is answered once the generation's metadata is stored in `__consumer_offsets`.

use std::time::Duration;

use kafka_protocol::messages::{RequestHeader, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::ResponseError;

use super::join_group::authorize_and_check_coordinator;
use super::str_bytes;
use crate::group::membership::{self, Reply, SyncRequest, SyncResult};
use crate::group::offsets::Replicated;
use crate::group::schema::GroupMetadataValue;
use crate::log::now_ms;
use crate::security::acl::Operation;
use crate::server::errors::offset_error_code;
use crate::server::Broker;

/// How long a follower waits for the leader's assignments. Kafka bounds it by the rebalance
/// timeout; the member's session (which the leader also has) ends it earlier in practice.
const PARKED_MAX: Duration = Duration::from_secs(300);

pub async fn handle(broker: &Broker, header: &RequestHeader, request: SyncGroupRequest) -> Option<SyncGroupResponse> {
    let version = header.request_api_version;
    let group = request.group_id.0.to_string();
    if let Err(code) = authorize_and_check_coordinator(broker, &group, Operation::Read) {
        return Some(response(SyncResult::error(code), version));
    }
    // A classic member of a consumer-protocol group gets its assigned partitions.
    let image = broker.controller.image();
    let synced = broker.groups.consumers.classic_sync(
        &group,
        &request.member_id,
        request.group_instance_id.as_deref(),
        request.generation_id,
        request.protocol_type.as_deref(),
        request.protocol_name.as_deref(),
        &image,
        membership::now(),
    );
    if let Some(synced) = synced {
        let result = match synced {
            Ok(synced) => SyncResult {
                error: None,
                protocol_type: Some(crate::group::embedded::PROTOCOL_TYPE.to_string()),
                protocol_name: Some(synced.protocol_name),
                assignment: synced.assignment,
            },
            Err(error) => SyncResult::error(error),
        };
        return Some(response(result, version));
    }
    let sync = SyncRequest {
        group_id: group.clone(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        protocol_type: request.protocol_type.as_ref().map(|s| s.to_string()),
        protocol_name: request.protocol_name.as_ref().map(|s| s.to_string()),
        assignments: request.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect(),
    };
    let membership = &broker.groups.membership;
    let reply = membership.sync(sync, membership::now());
    // The leader's assignment is stored (and the ISR has it) before any member learns it, as
    // Kafka's SyncGroup does: a coordinator that fails over afterwards restores exactly this
    // generation. Not stored, the members get the error and rejoin.
    if let Some(value) = membership.assignment_to_store(&group, &request.member_id, request.generation_id) {
        let stored = store_group(broker, &group, value).await;
        membership.complete_sync(&group, request.generation_id, stored, membership::now());
    }
    let result = match reply {
        Reply::Now(result) => result,
        Reply::Parked(rx) => match tokio::time::timeout(PARKED_MAX, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) | Err(_) => SyncResult::error(ResponseError::RebalanceInProgress),
        },
    };
    Some(response(result, version))
}

/// Writes the group's current generation (or that it is Empty now) to `__consumer_offsets` and
/// waits until the ISR has it. A failure is logged: the group works on from memory, and after a
/// failover its members rejoin.
pub(crate) async fn persist_group(broker: &Broker, group: &str) -> Result<(), ResponseError> {
    let Some(value) = broker.groups.membership.metadata_value(group, now_ms()) else { return Ok(()) };
    store_group(broker, group, value).await
}

/// Stores `value` as the group's metadata (the append off the async workers) and waits until
/// the ISR has it; a failure is Kafka's error for a failed group store (`GroupMetadataManager`:
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, or UNKNOWN_SERVER_ERROR for a record too large).
async fn store_group(broker: &Broker, group: &str, value: GroupMetadataValue) -> Result<(), ResponseError> {
    let groups = broker.groups.clone();
    let name = group.to_string();
    let stored = tokio::task::spawn_blocking(move || groups.offsets.store_group_metadata(&name, value)).await;
    let replicated = match stored {
        Ok(Ok(replicated)) => replicated.wait(Replicated::TIMEOUT).await,
        Ok(Err(e)) => Err(e),
        Err(_) => return Err(ResponseError::CoordinatorNotAvailable),
    };
    replicated.map_err(|e| {
        tracing::debug!(group, error = %e, "could not store group metadata");
        match offset_error_code(&e) {
            ResponseError::InvalidCommitOffsetSize => ResponseError::UnknownServerError,
            code => code,
        }
    })
}

fn response(result: SyncResult, version: i16) -> SyncGroupResponse {
    let v5 = version >= 5;
    SyncGroupResponse::default()
        .with_error_code(result.error.map_or(0, |e| e.code()))
        .with_protocol_type(if v5 { result.protocol_type.as_deref().map(str_bytes) } else { None })
        .with_protocol_name(if v5 { result.protocol_name.as_deref().map(str_bytes) } else { None })
        .with_assignment(result.assignment)
}
