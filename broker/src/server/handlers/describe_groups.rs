//! DescribeGroups (v0-5): state, protocol type, selected protocol (while Stable) and members
//! with their metadata and assignment. A group this node does not know is described as
//! "Dead" with no error, as Kafka does before v6.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, RequestHeader};

use super::join_group::authorize_and_check_coordinator;
use super::str_bytes;
use crate::group::membership::GroupState;
use crate::security::acl::Operation;
use crate::server::Broker;

/// Bound on the groups one request may describe.
const GROUPS_MAX: usize = 1000;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: DescribeGroupsRequest,
) -> Option<DescribeGroupsResponse> {
    let version = header.request_api_version;
    let described = request
        .groups
        .iter()
        .enumerate()
        .map(|(i, group_id)| {
            let group: &str = &group_id.0;
            let described = DescribedGroup::default().with_group_id(group_id.clone());
            if i >= GROUPS_MAX {
                return described.with_error_code(kafka_protocol::ResponseError::InvalidRequest.code());
            }
            if let Err(code) = authorize_and_check_coordinator(broker, group, Operation::Describe) {
                return described.with_error_code(code.code()).with_group_state(str_bytes(GroupState::Dead.name()));
            }
            let Some(description) = broker.groups.membership.describe(group) else {
                // A consumer-protocol group is Dead to this classic API (Kafka before v6;
                // the admin client describes it with ConsumerGroupDescribe).
                let consumer = broker.groups.consumers.members_of(group).is_some();
                let state = if !consumer && broker.groups.offsets.group_metadata(group).is_some() {
                    GroupState::Empty
                } else {
                    GroupState::Dead
                };
                return described.with_group_state(str_bytes(state.name()));
            };
            let members = description
                .members
                .into_iter()
                .map(|m| {
                    DescribedGroupMember::default()
                        .with_member_id(str_bytes(&m.member_id))
                        .with_group_instance_id(if version >= 4 {
                            m.group_instance_id.as_deref().map(str_bytes)
                        } else {
                            None
                        })
                        .with_client_id(str_bytes(&m.client_id))
                        .with_client_host(str_bytes(&m.client_host))
                        .with_member_metadata(m.metadata)
                        .with_member_assignment(m.assignment)
                })
                .collect();
            described
                .with_group_state(str_bytes(description.state.name()))
                .with_protocol_type(str_bytes(&description.protocol_type))
                .with_protocol_data(str_bytes(&description.protocol))
                .with_members(members)
        })
        .collect();
    Some(DescribeGroupsResponse::default().with_groups(described))
}
