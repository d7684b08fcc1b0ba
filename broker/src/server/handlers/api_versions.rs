//! ApiVersions: the versions of every API this broker implements (`server::versions`), and
//! from v3 the features: `transaction.version` supported 0-2 and finalized at the broker's
//! `--transaction-version` (KIP-584's feature flags; a Java 4.x producer uses transaction
//! version 2 when it is finalized at 2 or more).

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::{versions, Broker};

/// Kafka's feature name.
const TRANSACTION_VERSION: &str = "transaction.version";
/// The highest `transaction.version` this broker implements.
const MAX_TRANSACTION_VERSION: i16 = 2;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    _request: ApiVersionsRequest,
) -> Option<ApiVersionsResponse> {
    Some(with_features(response(), broker.txn.settings.version))
}

/// The feature fields (encoded from v3 only). The finalized features never change while a
/// node runs, so their epoch is a constant; a client compares it only to see a change.
fn with_features(response: ApiVersionsResponse, transaction_version: i16) -> ApiVersionsResponse {
    let name = || kafka_protocol::protocol::StrBytes::from_static_str(TRANSACTION_VERSION);
    response
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(name())
            .with_min_version(0)
            .with_max_version(MAX_TRANSACTION_VERSION)])
        .with_finalized_features_epoch(1)
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(name())
            .with_min_version_level(transaction_version)
            .with_max_version_level(transaction_version)])
}

fn response() -> ApiVersionsResponse {
    let api_keys = versions::SUPPORTED
        .iter()
        .filter(|(api, _, _)| *api != ApiKey::Envelope)
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

    #[test]
    fn produce_is_advertised_from_v0_but_only_v3_and_later_are_accepted() {
        // Proves the KAFKA-18659 exception: librdkafka sees Produce from v0 (so it compresses),
        // while dispatch keeps refusing the removed versions.
        let produce = response().api_keys.into_iter().find(|k| k.api_key == ApiKey::Produce as i16).unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, versions::range(ApiKey::Produce).unwrap().1));
        assert!(!versions::is_supported(ApiKey::Produce, 2));
        assert!(versions::is_supported(ApiKey::Produce, 3));
    }

    #[test]
    fn transaction_version_is_advertised_as_finalized_at_the_setting() {
        // Proves the feature a Java client reads to choose transaction version 2.
        let response = with_features(response(), 2);
        assert!(response.finalized_features_epoch >= 0);
        let finalized = &response.finalized_features[0];
        assert_eq!((&*finalized.name, finalized.max_version_level), (TRANSACTION_VERSION, 2));
        assert_eq!(response.supported_features[0].max_version, MAX_TRANSACTION_VERSION);
        assert_eq!(with_features(response.clone(), 1).finalized_features[0].max_version_level, 1);
    }
}
