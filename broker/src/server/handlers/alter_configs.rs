//! AlterConfigs (legacy, full replacement): a topic resource's config list becomes its whole
//! override map, validated as CreateTopics does and committed through the metadata quorum.
//! Broker resources are refused: Runnel has no dynamic broker configs.

use crate::security::acl::Operation;
use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, RequestHeader};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC};
use super::{str_bytes, validate_topic_name};
use crate::controller::{ApplyOutcome, MetadataRecord};
use crate::log::LogConfig;
use crate::server::{controller_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: AlterConfigsRequest,
) -> Option<AlterConfigsResponse> {
    let keys: Vec<(i8, &str)> = request.resources.iter().map(|r| (r.resource_type, &*r.resource_name)).collect();
    let duplicates = duplicate_resources(&keys);
    let mut applied = false;
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let outcome = if duplicates.contains(&(resource.resource_type, &*resource.resource_name)) {
            Err((ResponseError::InvalidRequest, "Duplicate resource.".to_string()))
        } else if let Err(refused) = super::authorize_config_resource(
            broker,
            resource.resource_type,
            &resource.resource_name,
            Operation::AlterConfigs,
        ) {
            Err(refused)
        } else {
            alter_one(broker, resource, request.validate_only).await
        };
        applied |= matches!(outcome, Ok(true));
        responses.push(resource_response(resource.resource_type, &resource.resource_name, outcome));
    }
    if applied {
        broker.reconcile_now().await;
    }
    Some(AlterConfigsResponse::default().with_responses(responses))
}

async fn alter_one(
    broker: &Broker,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<bool, (ResponseError, String)> {
    check_resource_type(resource.resource_type)?;
    let name: &str = &resource.resource_name;
    let configs: Vec<(&str, Option<&str>)> = resource.configs.iter().map(|c| (&*c.name, c.value.as_deref())).collect();
    let overrides = replacement_overrides(&configs)?;
    if !broker.controller.image().topics.contains_key(name) {
        return Err(unknown_topic(name));
    }
    set_topic_configs(broker, name, overrides, validate_only).await
}

fn resource_response(
    resource_type: i8,
    resource_name: &StrBytes,
    outcome: Result<bool, (ResponseError, String)>,
) -> AlterConfigsResourceResponse {
    let response = AlterConfigsResourceResponse::default()
        .with_resource_type(resource_type)
        .with_resource_name(resource_name.clone());
    match outcome {
        Ok(_) => response.with_error_message(None),
        Err((code, message)) => response.with_error_code(code.code()).with_error_message(Some(str_bytes(&message))),
    }
}

/// Resources named more than once in one request (Kafka answers each with INVALID_REQUEST).
pub(crate) fn duplicate_resources<'a>(keys: &[(i8, &'a str)]) -> BTreeSet<(i8, &'a str)> {
    let mut seen = BTreeSet::new();
    keys.iter().filter(|key| !seen.insert(**key)).copied().collect()
}

/// Only topic resources can be altered.
pub(crate) fn check_resource_type(resource_type: i8) -> Result<(), (ResponseError, String)> {
    match resource_type {
        RESOURCE_TOPIC => Ok(()),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => Err((
            ResponseError::InvalidRequest,
            "dynamic broker configs are not supported: set broker properties in the node's config file".to_string(),
        )),
        other => {
            Err((ResponseError::InvalidRequest, format!("altering configs of resource type {other} is not supported")))
        }
    }
}

pub(crate) fn unknown_topic(name: &str) -> (ResponseError, String) {
    match validate_topic_name(name) {
        Err(message) => (ResponseError::InvalidTopicException, message.to_string()),
        Ok(()) => (ResponseError::UnknownTopicOrPartition, format!("topic '{name}' does not exist")),
    }
}

/// The new override map of a full replacement; duplicate names and null values are invalid.
fn replacement_overrides(
    configs: &[(&str, Option<&str>)],
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    let mut overrides = BTreeMap::new();
    for (name, value) in configs {
        let Some(value) = value else {
            return Err((ResponseError::InvalidRequest, format!("Null value not supported for : {name}")));
        };
        if overrides.insert(name.to_string(), value.to_string()).is_some() {
            return Err((ResponseError::InvalidRequest, "Error due to duplicate config keys".to_string()));
        }
    }
    Ok(overrides)
}

/// Every override must be a known topic config with a valid value.
pub(crate) fn validate_overrides(
    defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<(), (ResponseError, String)> {
    crate::server::validated_topic_log_config(defaults, overrides)
        .map(drop)
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))
}

/// Validates `overrides` and, unless `validate_only`, makes them the topic's whole override
/// map. `Ok(true)` when a change was committed (the caller reconciles partitions).
pub(crate) async fn set_topic_configs(
    broker: &Broker,
    topic: &str,
    overrides: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<bool, (ResponseError, String)> {
    validate_overrides(&broker.settings.log_defaults, &overrides)?;
    if topic == crate::group::OFFSETS_TOPIC {
        let effective = broker.topic_log_config(&overrides);
        if let Some(message) = crate::group::offsets_topic_cleanup_error(&effective) {
            return Err((ResponseError::PolicyViolation, message));
        }
    }
    if validate_only {
        return Ok(false);
    }
    let record = MetadataRecord::SetTopicConfigs { topic: topic.to_string(), configs: overrides };
    match broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => Ok(true),
        Ok(ApplyOutcome::UnknownTopic) => Err(unknown_topic(topic)),
        Ok(other) => Err((ResponseError::UnknownServerError, format!("unexpected outcome {other:?}"))),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_rejects_nulls_and_duplicate_names() {
        // Proves a full replacement is a clean map: no null values, no name given twice.
        let ok = replacement_overrides(&[("retention.ms", Some("1000")), ("cleanup.policy", Some("compact"))]).unwrap();
        assert_eq!(ok.len(), 2);
        let null = replacement_overrides(&[("retention.ms", None)]).unwrap_err();
        assert_eq!(null.0, ResponseError::InvalidRequest);
        let twice = replacement_overrides(&[("retention.ms", Some("1")), ("retention.ms", Some("2"))]).unwrap_err();
        assert_eq!(twice.0, ResponseError::InvalidRequest);
    }

    #[test]
    fn validation_maps_bad_names_and_values_to_invalid_config() {
        // Proves unknown names and out-of-range values both become INVALID_CONFIG with the reason.
        let defaults = LogConfig::default();
        let bad_value: BTreeMap<String, String> = [("retention.ms".to_string(), "-5".to_string())].into();
        let err = validate_overrides(&defaults, &bad_value).unwrap_err();
        assert_eq!(err.0, ResponseError::InvalidConfig);
        assert!(err.1.contains("retention.ms"), "{}", err.1);
        let unknown: BTreeMap<String, String> = [("no.such.config".to_string(), "1".to_string())].into();
        assert_eq!(validate_overrides(&defaults, &unknown).unwrap_err().0, ResponseError::InvalidConfig);
        assert!(validate_overrides(&defaults, &BTreeMap::new()).is_ok());
    }

    #[test]
    fn duplicates_are_found_per_type_and_name() {
        // Proves the same name under two resource types is not a duplicate.
        let keys = [(2, "a"), (4, "a"), (2, "b"), (2, "a")];
        assert_eq!(duplicate_resources(&keys), [(2, "a")].into());
    }
}
