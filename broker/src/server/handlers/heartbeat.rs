//! Heartbeat (v0-4): keeps a member's session alive; REBALANCE_IN_PROGRESS is how members
//! learn that they must rejoin.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, RequestHeader};

use super::join_group::authorize_and_check_coordinator;
use crate::group::membership;
use crate::security::acl::Operation;
use crate::server::Broker;

pub async fn handle(broker: &Broker, _header: &RequestHeader, request: HeartbeatRequest) -> Option<HeartbeatResponse> {
    let group: &str = &request.group_id.0;
    let outcome = authorize_and_check_coordinator(broker, group, Operation::Read).and_then(|()| {
        // A classic member of a consumer-protocol group (KIP-848 migration).
        let now = membership::now();
        let consumers = &broker.groups.consumers;
        let generation = request.generation_id;
        let instance = request.group_instance_id.as_deref();
        if let Some(answer) = consumers.classic_heartbeat(group, &request.member_id, instance, generation, now) {
            return answer;
        }
        broker.groups.membership.heartbeat(
            group,
            &request.member_id,
            request.group_instance_id.as_deref(),
            request.generation_id,
            membership::now(),
        )
    });
    Some(HeartbeatResponse::default().with_error_code(outcome.err().map_or(0, |e| e.code())))
}
