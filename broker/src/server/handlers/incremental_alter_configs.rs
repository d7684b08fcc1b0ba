//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT (the last two on list configs
//! only) applied to a topic's current overrides, validated, and committed as its new override
//! map through the metadata quorum. Broker resources are refused (no dynamic broker configs),
//! except DELETE of the replication throttles, which `kafka-reassign-partitions.sh --verify`
//! and `--cancel` send to every broker: none is ever set, so deleting them is a no-op.

use crate::security::acl::Operation;
use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::alter_configs::{
    check_resource_type, duplicate_resources, set_topic_configs, unknown_topic, validate_overrides,
};
use super::describe_configs::{topic_config_info, ConfigType, RESOURCE_BROKER};
use super::str_bytes;
use crate::server::Broker;

/// Kafka's `AlterConfigOp.OpType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigOp {
    Set,
    Delete,
    Append,
    Subtract,
}

impl ConfigOp {
    fn from_id(id: i8) -> Option<ConfigOp> {
        match id {
            0 => Some(ConfigOp::Set),
            1 => Some(ConfigOp::Delete),
            2 => Some(ConfigOp::Append),
            3 => Some(ConfigOp::Subtract),
            _ => None,
        }
    }
}

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: IncrementalAlterConfigsRequest,
) -> Option<IncrementalAlterConfigsResponse> {
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
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        responses.push(match outcome {
            Ok(_) => response.with_error_message(None),
            Err((code, message)) => response.with_error_code(code.code()).with_error_message(Some(str_bytes(&message))),
        });
    }
    if applied {
        broker.reconcile_now().await;
    }
    Some(IncrementalAlterConfigsResponse::default().with_responses(responses))
}

/// `Ok(true)` when a change was committed.
async fn alter_one(
    broker: &Broker,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<bool, (ResponseError, String)> {
    if resource.resource_type == RESOURCE_BROKER && deletes_only_throttles(resource) {
        return Ok(false);
    }
    check_resource_type(resource.resource_type)?;
    let name: &str = &resource.resource_name;
    let Some(current) = broker.controller.image().topics.get(name).map(|t| t.configs.clone()) else {
        return Err(unknown_topic(name));
    };
    let ops: Vec<(&str, i8, Option<&str>)> =
        resource.configs.iter().map(|c| (&*c.name, c.config_operation, c.value.as_deref())).collect();
    let defaults = &broker.settings.log_defaults;
    let overrides = apply_ops(&current, &ops, |config| defaults.get(config))?;
    if overrides == current {
        // Nothing changes: validate, but spare the quorum a record.
        validate_overrides(defaults, &overrides)?;
        return Ok(false);
    }
    set_topic_configs(broker, name, overrides, validate_only).await
}

/// Kafka's broker-level replication throttles (`ReassignPartitionsCommand.BROKER_LEVEL_THROTTLES`).
/// Runnel does not throttle replication, so they can never have been set.
const BROKER_THROTTLE_CONFIGS: [&str; 3] = [
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// A broker resource whose every operation deletes a replication throttle.
fn deletes_only_throttles(resource: &AlterConfigsResource) -> bool {
    resource.configs.iter().all(|c| {
        ConfigOp::from_id(c.config_operation) == Some(ConfigOp::Delete) && BROKER_THROTTLE_CONFIGS.contains(&&*c.name)
    })
}

/// Applies `(name, op, value)` operations to a topic's overrides. A list operation on a config
/// without an override starts from `default_of(name)`, the broker default, as Kafka does.
/// Values are validated later, on the whole resulting map.
fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[(&str, i8, Option<&str>)],
    default_of: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    let mut overrides = current.clone();
    let mut seen = BTreeSet::new();
    if !ops.iter().all(|(name, _, _)| seen.insert(*name)) {
        return Err((ResponseError::InvalidRequest, "Error due to duplicate config keys".to_string()));
    }
    for &(name, op_id, value) in ops {
        let op = ConfigOp::from_id(op_id)
            .ok_or_else(|| (ResponseError::InvalidRequest, format!("Unknown config operation {op_id} for {name}")))?;
        if op == ConfigOp::Delete {
            overrides.remove(name);
            continue;
        }
        let value =
            value.ok_or_else(|| (ResponseError::InvalidRequest, format!("Null value not supported for : {name}")))?;
        if op == ConfigOp::Set {
            overrides.insert(name.to_string(), value.to_string());
            continue;
        }
        // APPEND or SUBTRACT.
        if topic_config_info(name).is_none_or(|info| info.config_type != ConfigType::List) {
            let verb = if op == ConfigOp::Append { "APPEND" } else { "SUBTRACT" };
            return Err((
                ResponseError::InvalidConfig,
                format!("Can't {verb} to key {name} because its type is not LIST."),
            ));
        }
        let old = overrides.get(name).cloned().or_else(|| default_of(name)).unwrap_or_default();
        let mut items: Vec<&str> = list_items(&old).collect();
        for item in list_items(value) {
            if op == ConfigOp::Append {
                if !items.contains(&item) {
                    items.push(item);
                }
            } else {
                items.retain(|existing| *existing != item);
            }
        }
        overrides.insert(name.to_string(), items.join(","));
    }
    Ok(overrides)
}

fn list_items(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|item| !item.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn broker_default(name: &str) -> Option<String> {
        (name == "cleanup.policy").then(|| "delete".to_string())
    }

    #[test]
    fn set_and_delete_edit_the_override_map() {
        // Proves SET adds or replaces an override and DELETE removes one (absent is fine).
        let current = map(&[("retention.ms", "1000"), ("segment.bytes", "1048576")]);
        let ops = [("retention.ms", 0, Some("2000")), ("segment.bytes", 1, None), ("flush.ms", 1, None)];
        let result = apply_ops(&current, &ops, broker_default).unwrap();
        assert_eq!(result, map(&[("retention.ms", "2000")]));
    }

    #[test]
    fn append_and_subtract_work_on_lists_from_the_default() {
        // Proves list ops start from the broker default when there is no override, skip
        // duplicates on APPEND and remove every match on SUBTRACT.
        let appended = apply_ops(&BTreeMap::new(), &[("cleanup.policy", 2, Some("compact,delete"))], broker_default);
        assert_eq!(appended.unwrap(), map(&[("cleanup.policy", "delete,compact")]));
        let current = map(&[("cleanup.policy", "delete,compact")]);
        let subtracted = apply_ops(&current, &[("cleanup.policy", 3, Some("delete"))], broker_default);
        assert_eq!(subtracted.unwrap(), map(&[("cleanup.policy", "compact")]));
        let emptied = apply_ops(
            &map(&[("cleanup.policy", "compact")]),
            &[("cleanup.policy", 3, Some("compact"))],
            broker_default,
        );
        assert_eq!(emptied.unwrap(), map(&[("cleanup.policy", "")]), "validation rejects it later");
    }

    #[test]
    fn invalid_operations_are_refused() {
        // Proves list ops on scalar configs, unknown ops, null values and repeated keys fail.
        let empty = BTreeMap::new();
        let scalar = apply_ops(&empty, &[("retention.ms", 2, Some("1"))], broker_default).unwrap_err();
        assert_eq!(scalar.0, ResponseError::InvalidConfig);
        assert!(scalar.1.contains("not LIST"), "{}", scalar.1);
        let unknown_config = apply_ops(&empty, &[("no.such", 3, Some("1"))], broker_default).unwrap_err();
        assert_eq!(unknown_config.0, ResponseError::InvalidConfig);
        let unknown_op = apply_ops(&empty, &[("retention.ms", 9, Some("1"))], broker_default).unwrap_err();
        assert_eq!(unknown_op.0, ResponseError::InvalidRequest);
        let null = apply_ops(&empty, &[("retention.ms", 0, None)], broker_default).unwrap_err();
        assert_eq!(null.0, ResponseError::InvalidRequest);
        let twice = apply_ops(&empty, &[("retention.ms", 0, Some("1")), ("retention.ms", 1, None)], broker_default);
        assert_eq!(twice.unwrap_err().0, ResponseError::InvalidRequest);
    }
}
