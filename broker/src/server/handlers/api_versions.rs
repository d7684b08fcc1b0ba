//! ApiVersions: the versions of every API this broker implements (`server::versions`).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::{versions, Broker};

pub async fn handle(
    _broker: &Broker,
    _header: &RequestHeader,
    _request: ApiVersionsRequest,
) -> Option<ApiVersionsResponse> {
    Some(response())
}

fn response() -> ApiVersionsResponse {
    let api_keys = versions::SUPPORTED
        .iter()
        .map(|(api, min, max)| {
            ApiVersion::default().with_api_key(*api as i16).with_min_version(*min).with_max_version(*max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(api_keys)
}

/// The answer to an ApiVersions request of a version we do not know (sent as v0).
pub fn unsupported_version_response() -> ApiVersionsResponse {
    response().with_error_code(ResponseError::UnsupportedVersion.code())
}
