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
            let (min, max) = versions::advertised(*api, *min, *max);
            ApiVersion::default().with_api_key(*api as i16).with_min_version(min).with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(api_keys)
}

/// The answer to an ApiVersions request of a version we do not know (sent as v0).
pub fn unsupported_version_response() -> ApiVersionsResponse {
    response().with_error_code(ResponseError::UnsupportedVersion.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiKey;

    #[test]
    fn produce_is_advertised_from_v0_but_only_v3_and_later_are_accepted() {
        // Proves the KAFKA-18659 exception: librdkafka sees Produce from v0 (so it compresses),
        // while dispatch keeps refusing the removed versions.
        let produce = response().api_keys.into_iter().find(|k| k.api_key == ApiKey::Produce as i16).unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, versions::range(ApiKey::Produce).unwrap().1));
        assert!(!versions::is_supported(ApiKey::Produce, 2));
        assert!(versions::is_supported(ApiKey::Produce, 3));
    }
}
