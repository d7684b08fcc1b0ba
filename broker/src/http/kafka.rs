//! The HTTP API is a Kafka client: it calls the same `server::handlers` a Kafka connection does
//! (in process, without the socket) for what this node leads, and sends the same request to the
//! leader (the group's coordinator) over the peer client when another broker leads it, so
//! produce, fetch, topic admin and group membership behave, validate and fail exactly as they do
//! for librdkafka or the Java client, on any node of a cluster.

use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Request, StrBytes};

use super::error::{ApiError, ApiResult};
use super::Http;
use crate::controller::MetadataImage;

/// The API and version an in-process call speaks (the newest the handler supports that needs
/// no topic ids).
pub type Api = (ApiKey, i16);

/// v10: a NOT_LEADER_OR_FOLLOWER answer names the new leader (KIP-951), which a forwarded
/// produce retries against.
pub const PRODUCE: Api = (ApiKey::Produce, 10);
pub const LIST_OFFSETS: Api = (ApiKey::ListOffsets, 7);
pub const FETCH: Api = (ApiKey::Fetch, 12);
pub const DELETE_TOPICS: Api = (ApiKey::DeleteTopics, 5);
pub const INCREMENTAL_ALTER_CONFIGS: Api = (ApiKey::IncrementalAlterConfigs, 1);
pub const FIND_COORDINATOR: Api = (ApiKey::FindCoordinator, 3);
pub const JOIN_GROUP: Api = (ApiKey::JoinGroup, 9);
pub const SYNC_GROUP: Api = (ApiKey::SyncGroup, 5);
pub const HEARTBEAT: Api = (ApiKey::Heartbeat, 4);
pub const LEAVE_GROUP: Api = (ApiKey::LeaveGroup, 5);
/// v9: a consumer-protocol member's commit carries its member epoch (KIP-848).
pub const OFFSET_COMMIT: Api = (ApiKey::OffsetCommit, 9);
pub const OFFSET_FETCH: Api = (ApiKey::OffsetFetch, 7);
pub const CONSUMER_GROUP_HEARTBEAT: Api = (ApiKey::ConsumerGroupHeartbeat, 1);
pub const DELETE_GROUPS: Api = (ApiKey::DeleteGroups, 2);
pub const LIST_TRANSACTIONS: Api = (ApiKey::ListTransactions, 0);
pub const DESCRIBE_TRANSACTIONS: Api = (ApiKey::DescribeTransactions, 0);

/// The client id HTTP requests carry (what DescribeGroups shows for HTTP consumers).
pub const CLIENT_ID: &str = "runnel-http";

pub fn header((api, version): Api) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)))
}

/// Where a request about one partition or one group goes: this node's handlers, or the broker
/// that leads the partition (coordinates the group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    Here,
    Peer(u64),
}

/// The leader of `topic`-`partition` as the image names it. This node, no leader (an offline
/// partition) and a leader with no registration all route `Here`: the handler then answers what
/// Kafka answers (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...).
pub fn leader_route(node_id: u64, image: &MetadataImage, topic: &str, partition: i32) -> Route {
    let leader = u32::try_from(partition).ok().and_then(|p| image.partition(topic, p)).and_then(|p| p.leader);
    route_to(node_id, image, leader)
}

/// The coordinator of `group`: the leader of its `__consumer_offsets` partition (Kafka's
/// `partitionFor` over the topic's partition count). Before the topic exists: `Here`, whose
/// FindCoordinator creates it.
pub fn coordinator_route(node_id: u64, image: &MetadataImage, group: &str) -> Route {
    let Some(offsets) = image.topics.get(crate::group::OFFSETS_TOPIC) else { return Route::Here };
    let partition = crate::group::partition_for(group, offsets.partitions.len() as u32);
    leader_route(node_id, image, crate::group::OFFSETS_TOPIC, partition as i32)
}

fn route_to(node_id: u64, image: &MetadataImage, node: Option<u64>) -> Route {
    match node {
        Some(node) if node != node_id && image.brokers.contains_key(&node) => Route::Peer(node),
        _ => Route::Here,
    }
}

/// Sends `request` to broker `node` in the version `api` names, answered within `timeout`. For
/// an HTTP client (a request the auth layer scoped), the request travels in an Envelope
/// (KIP-590) naming the client's principal and address, so the other broker authorizes it as
/// that client; the node's own calls (consumer-instance upkeep outside a request) go as the
/// node.
pub async fn forward<R: Request>(
    http: &Http,
    node: u64,
    (api, version): Api,
    request: &R,
    timeout: Duration,
) -> ApiResult<R::Response> {
    debug_assert_eq!(api as i16, R::KEY);
    let peers = &http.broker.peers;
    let answer = match crate::server::current_client() {
        Some(client) => {
            let principal = client.principal.to_string();
            peers.call_for(node, version, request, timeout, &principal, client.peer.ip()).await
        }
        None => peers.call(node, version, request, timeout).await,
    };
    answer.map_err(|e| ApiError::peer(&e))
}
