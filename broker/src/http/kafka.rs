//! The HTTP API is an in-process Kafka client: it calls the same `server::handlers` a Kafka
//! connection does (without the socket), so produce, fetch, topic admin and group membership
//! behave, validate and fail exactly as they do for librdkafka or the Java client.

use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::StrBytes;

/// The API and version an in-process call speaks (the newest the handler supports that needs
/// no topic ids).
pub type Api = (ApiKey, i16);

pub const PRODUCE: Api = (ApiKey::Produce, 9);
pub const FETCH: Api = (ApiKey::Fetch, 12);
pub const DELETE_TOPICS: Api = (ApiKey::DeleteTopics, 5);
pub const INCREMENTAL_ALTER_CONFIGS: Api = (ApiKey::IncrementalAlterConfigs, 1);
pub const FIND_COORDINATOR: Api = (ApiKey::FindCoordinator, 3);
pub const JOIN_GROUP: Api = (ApiKey::JoinGroup, 9);
pub const SYNC_GROUP: Api = (ApiKey::SyncGroup, 5);
pub const HEARTBEAT: Api = (ApiKey::Heartbeat, 4);
pub const LEAVE_GROUP: Api = (ApiKey::LeaveGroup, 5);
pub const OFFSET_COMMIT: Api = (ApiKey::OffsetCommit, 8);
pub const OFFSET_FETCH: Api = (ApiKey::OffsetFetch, 7);
pub const DELETE_GROUPS: Api = (ApiKey::DeleteGroups, 2);

/// The client id HTTP requests carry (what DescribeGroups shows for HTTP consumers).
pub const CLIENT_ID: &str = "runnel-http";

pub fn header((api, version): Api) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)))
}
