//! LeaveGroup (v0-5): removes members (one in v0-2, a batch with instance ids in v3+) and
//! makes the group rebalance.

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, RequestHeader};

use super::join_group::authorize_and_check_coordinator;
use super::str_bytes;
use crate::group::membership::{self, GroupState, LeavingMember};
use crate::security::acl::Operation;
use crate::server::Broker;

/// Bound on the members one request may remove.
const LEAVING_MAX: usize = 1000;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: LeaveGroupRequest) -> Option<LeaveGroupResponse> {
    let version = header.request_api_version;
    let group: &str = &request.group_id.0;
    if let Err(code) = authorize_and_check_coordinator(broker, group, Operation::Read) {
        return Some(LeaveGroupResponse::default().with_error_code(code.code()));
    }
    let leaving: Vec<LeavingMember> = if version >= 3 {
        if request.members.len() > LEAVING_MAX {
            return Some(
                LeaveGroupResponse::default().with_error_code(kafka_protocol::ResponseError::InvalidRequest.code()),
            );
        }
        request
            .members
            .iter()
            .map(|m| LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
            })
            .collect()
    } else {
        vec![LeavingMember { member_id: request.member_id.to_string(), group_instance_id: None }]
    };
    let results = match broker.groups.consumers.classic_leave(group, &leaving) {
        // Classic members of a consumer-protocol group (KIP-848 migration): answered once the
        // removal is stored.
        Some((results, write)) => match super::consumer_group_heartbeat::stored(write).await {
            Ok(()) => results,
            Err((code, _)) => leaving.iter().map(|_| Err(code)).collect(),
        },
        None => broker.groups.membership.leave(group, &leaving, membership::now()),
    };
    if broker.groups.membership.state(group) == Some(GroupState::Empty) {
        // The last member left: store that (Kafka writes the Empty generation too), so a new
        // coordinator does not bring the departed members back from the previous one.
        // A failure is logged there: the group is Empty in memory either way.
        let _ = super::sync_group::persist_group(broker, group).await;
    }
    if version < 3 {
        let code = results.first().and_then(|r| r.err()).map_or(0, |e| e.code());
        return Some(LeaveGroupResponse::default().with_error_code(code));
    }
    let members = leaving
        .iter()
        .zip(results)
        .map(|(m, result)| {
            MemberResponse::default()
                .with_member_id(str_bytes(&m.member_id))
                .with_group_instance_id(m.group_instance_id.as_deref().map(str_bytes))
                .with_error_code(result.err().map_or(0, |e| e.code()))
        })
        .collect();
    Some(LeaveGroupResponse::default().with_members(members))
}
