//! ListGroups (v0-5): the groups this node coordinates, with protocol type and state (v4+,
//! filterable by state) and group type (v5+, filterable: "classic" or "consumer", KIP-848).
//! Groups known only from committed offsets are listed as Empty, as Kafka does.

use crate::security::acl::{Operation, ResourceType};
use std::collections::BTreeMap;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse, RequestHeader};

use super::str_bytes;
use crate::group::membership::GroupState;
use crate::server::Broker;

const GROUP_TYPE_CLASSIC: &str = "classic";
const GROUP_TYPE_CONSUMER: &str = "consumer";

pub async fn handle(broker: &Broker, header: &RequestHeader, request: ListGroupsRequest) -> Option<ListGroupsResponse> {
    let version = header.request_api_version;
    // group id → (protocol type, state, group type)
    let mut groups: BTreeMap<String, (String, &'static str, &'static str)> = BTreeMap::new();
    let coordinator = broker.groups.clone();
    // Loading the offsets partitions reads logs: off the async workers.
    let stored = tokio::task::spawn_blocking(move || {
        coordinator
            .offsets
            .groups_with_offsets()
            .into_iter()
            .map(|g| {
                let protocol_type = coordinator.offsets.group_metadata(&g).map(|m| m.protocol_type).unwrap_or_default();
                (g, protocol_type)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (group, protocol_type) in stored {
        groups.insert(group, (protocol_type, GroupState::Empty.name(), GROUP_TYPE_CLASSIC));
    }
    for listing in broker.groups.membership.list() {
        groups.insert(listing.group_id, (listing.protocol_type, listing.state.name(), GROUP_TYPE_CLASSIC));
    }
    for (group, state) in broker.groups.consumers.list() {
        groups.insert(group, ("consumer".to_string(), state.name(), GROUP_TYPE_CONSUMER));
    }
    let states: Vec<&str> =
        if version >= 4 { request.states_filter.iter().map(|s| &**s).collect() } else { Vec::new() };
    let types: Vec<&str> = if version >= 5 { request.types_filter.iter().map(|s| &**s).collect() } else { Vec::new() };
    // Kafka: DESCRIBE on the cluster lists every group, else the groups the client may describe.
    let all = broker.authorized_cluster(Operation::Describe);
    let listed = groups
        .into_iter()
        .filter(|(group, _)| all || broker.authorized(Operation::Describe, ResourceType::Group, group))
        .filter(|(_, (_, state, _))| states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(state)))
        .filter(|(_, (_, _, kind))| types.is_empty() || types.iter().any(|t| t.eq_ignore_ascii_case(kind)))
        .map(|(group, (protocol_type, state, kind))| {
            let mut listed = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&group)))
                .with_protocol_type(str_bytes(&protocol_type));
            if version >= 4 {
                listed = listed.with_group_state(str_bytes(state));
            }
            if version >= 5 {
                listed = listed.with_group_type(str_bytes(kind));
            }
            listed
        })
        .collect();
    Some(ListGroupsResponse::default().with_groups(listed))
}
