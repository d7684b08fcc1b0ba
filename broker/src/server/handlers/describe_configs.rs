//! DescribeConfigs: a topic's effective configs (override, broker default or Kafka default, with
//! synonyms under Kafka's broker property names), and this broker's static properties. Only the
//! configs Runnel implements are listed; broker configs are all read-only (no dynamic configs).

use crate::security::acl::Operation;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, RequestHeader};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{str_bytes, validate_topic_name};
use crate::log::LogConfig;
use crate::server::{Broker, ServerSettings};

/// Kafka's `ConfigResource.Type` ids.
pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;
pub(crate) const RESOURCE_BROKER_LOGGER: i8 = 8;

/// Kafka's `DescribeConfigsResponse.ConfigSource` ids.
const SOURCE_TOPIC_CONFIG: i8 = 1;
const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
const SOURCE_DEFAULT_CONFIG: i8 = 5;

/// Kafka's `ConfigDef.Type` ids as DescribeConfigs v3+ reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub(crate) enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
}

/// A topic config, its broker-level synonym (Kafka's `ServerTopicConfigSynonyms`), type and doc.
#[derive(Debug)]
pub(crate) struct TopicConfigInfo {
    pub name: &'static str,
    pub broker_name: &'static str,
    pub config_type: ConfigType,
    pub documentation: &'static str,
}

const fn info(
    name: &'static str,
    broker_name: &'static str,
    config_type: ConfigType,
    documentation: &'static str,
) -> TopicConfigInfo {
    TopicConfigInfo { name, broker_name, config_type, documentation }
}

/// Every topic config of [`LogConfig::NAMES`], in the same order.
pub(crate) const TOPIC_CONFIGS: [TopicConfigInfo; 26] = [
    info(
        "cleanup.policy",
        "log.cleanup.policy",
        ConfigType::List,
        "Retention policy of old segments: delete, compact or both.",
    ),
    info(
        "compression.gzip.level",
        "compression.gzip.level",
        ConfigType::Int,
        "Level a gzip topic recompresses at; -1 for the codec's default.",
    ),
    info(
        "compression.lz4.level",
        "compression.lz4.level",
        ConfigType::Int,
        "Level an lz4 topic recompresses at (Runnel has one lz4 level: 9 only).",
    ),
    info(
        "compression.type",
        "compression.type",
        ConfigType::String,
        "Final compression of the topic's batches; 'producer' keeps the producer's codec.",
    ),
    info("compression.zstd.level", "compression.zstd.level", ConfigType::Int, "Level a zstd topic recompresses at."),
    info(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        ConfigType::Long,
        "How long tombstones are kept in a compacted topic.",
    ),
    info(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        ConfigType::Long,
        "Kafka's delay before a deleted segment's files go; Runnel unlinks at once (open readers keep reading).",
    ),
    info(
        "flush.messages",
        "log.flush.interval.messages",
        ConfigType::Long,
        "Records appended between two forced fsyncs.",
    ),
    info("flush.ms", "log.flush.interval.ms", ConfigType::Long, "Longest time between two forced fsyncs."),
    info(
        "index.interval.bytes",
        "log.index.interval.bytes",
        ConfigType::Int,
        "Log bytes between two offset index entries.",
    ),
    info(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        ConfigType::Long,
        "Longest time a record stays uncompacted: a compacted log is cleaned once its oldest dirty record is older.",
    ),
    info("max.message.bytes", "message.max.bytes", ConfigType::Int, "Largest record batch size the topic accepts."),
    info(
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        ConfigType::Long,
        "How far a CreateTime record timestamp may be ahead of the broker's clock.",
    ),
    info(
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        ConfigType::Long,
        "How far a CreateTime record timestamp may be behind the broker's clock.",
    ),
    info(
        "message.timestamp.type",
        "log.message.timestamp.type",
        ConfigType::String,
        "Whether record timestamps are CreateTime or LogAppendTime.",
    ),
    info(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        ConfigType::Double,
        "Fraction of a compacted log written since its last cleaning at which it is cleaned again.",
    ),
    info(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        ConfigType::Long,
        "Minimum time a record stays uncompacted.",
    ),
    info(
        "min.insync.replicas",
        "min.insync.replicas",
        ConfigType::Int,
        "Minimum in-sync replicas for an acks=all produce to succeed.",
    ),
    info(
        "preallocate",
        "log.preallocate",
        ConfigType::Boolean,
        "Whether segment files are preallocated (never in Runnel).",
    ),
    info(
        "retention.bytes",
        "log.retention.bytes",
        ConfigType::Long,
        "Largest size of a partition before old segments are deleted; -1 for no limit.",
    ),
    info(
        "retention.ms",
        "log.retention.ms",
        ConfigType::Long,
        "How long records are kept before old segments are deleted; -1 for no limit.",
    ),
    info("segment.bytes", "log.segment.bytes", ConfigType::Int, "Size of a segment file before a new one is rolled."),
    info(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        ConfigType::Int,
        "Size of a segment's offset and time index files.",
    ),
    info(
        "segment.jitter.ms",
        "log.roll.jitter.ms",
        ConfigType::Long,
        "Up to this much is taken off segment.ms per segment, so partitions do not all roll at once.",
    ),
    info("segment.ms", "log.roll.ms", ConfigType::Long, "Age after which a segment is rolled even if not full."),
    info(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        ConfigType::Boolean,
        "Whether a replica outside the ISR may become leader when no ISR member is live, at the cost of losing \
         records.",
    ),
];

pub(crate) fn topic_config_info(name: &str) -> Option<&'static TopicConfigInfo> {
    TOPIC_CONFIGS.iter().find(|i| i.name == name)
}

/// One described config before it becomes protocol types.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Described {
    name: &'static str,
    value: String,
    source: i8,
    read_only: bool,
    /// `(name, value, source)`, highest precedence first, as Kafka lists them.
    synonyms: Vec<(&'static str, String, i8)>,
    config_type: ConfigType,
    documentation: &'static str,
}

/// A topic's configs: the override if there is one, else the broker default (a static broker
/// config when it differs from Kafka's default), else Kafka's default.
fn describe_topic(
    effective: &LogConfig,
    broker_defaults: &LogConfig,
    overridden: impl Fn(&str) -> bool,
) -> Vec<Described> {
    let kafka_defaults = LogConfig::default();
    TOPIC_CONFIGS
        .iter()
        .filter_map(|info| {
            let value = effective.get(info.name)?;
            let broker_value = broker_defaults.get(info.name)?;
            let default_value = kafka_defaults.get(info.name)?;
            let mut synonyms = Vec::with_capacity(3);
            if overridden(info.name) {
                synonyms.push((info.name, value.clone(), SOURCE_TOPIC_CONFIG));
            }
            if broker_value != default_value {
                synonyms.push((info.broker_name, broker_value, SOURCE_STATIC_BROKER_CONFIG));
            }
            synonyms.push((info.broker_name, default_value, SOURCE_DEFAULT_CONFIG));
            Some(Described {
                name: info.name,
                value,
                source: synonyms.first().map_or(SOURCE_DEFAULT_CONFIG, |s| s.2),
                read_only: false,
                synonyms,
                config_type: info.config_type,
                documentation: info.documentation,
            })
        })
        .collect()
}

/// Broker properties that live outside [`ServerSettings`].
#[derive(Debug, Clone, Default)]
struct BrokerProperties {
    /// `offsets.topic.replication.factor` as configured (before the cap to the usable brokers).
    offsets_topic_replication_factor: u16,
    /// `broker.rack`, as this broker registered it.
    rack: Option<String>,
}

/// This broker's properties: the log defaults under their broker names plus the server
/// settings. All read-only: Runnel has no dynamic broker configs.
fn describe_broker(settings: &ServerSettings, extra: &BrokerProperties) -> Vec<Described> {
    let kafka_defaults = LogConfig::default();
    // (broker name, value, Kafka's default if it has one, type, documentation)
    let mut properties: Vec<(&'static str, String, Option<String>, ConfigType, &'static str)> = vec![
        (
            "auto.create.topics.enable",
            settings.auto_create_topics.to_string(),
            Some("true".to_string()),
            ConfigType::Boolean,
            "Whether Metadata requests create unknown topics.",
        ),
        (
            "default.replication.factor",
            settings.default_replication_factor.to_string(),
            Some("1".to_string()),
            ConfigType::Int,
            "Replication factor of automatically created topics.",
        ),
        (
            "offsets.topic.replication.factor",
            extra.offsets_topic_replication_factor.to_string(),
            Some(crate::group::OFFSETS_TOPIC_REPLICATION_FACTOR_DEFAULT.to_string()),
            ConfigType::Short,
            "Replication factor of __consumer_offsets, capped to the brokers usable when it is created.",
        ),
        ("node.id", settings.node_id.to_string(), None, ConfigType::Int, "This node's id."),
        (
            "num.partitions",
            settings.default_partitions.to_string(),
            Some("1".to_string()),
            ConfigType::Int,
            "Partition count of automatically created topics.",
        ),
        (
            "socket.request.max.bytes",
            settings.request_max_bytes.to_string(),
            Some("104857600".to_string()),
            ConfigType::Int,
            "Largest request the server accepts.",
        ),
        (
            "fetch.max.bytes",
            settings.fetch_max_bytes.to_string(),
            Some("57671680".to_string()),
            ConfigType::Int,
            "Largest record bytes of one Fetch response; caps the request's max_bytes.",
        ),
        (
            "queued.max.request.bytes",
            settings.connection_limits.queued_max_request_bytes.to_string(),
            Some("-1".to_string()),
            ConfigType::Long,
            "Bytes of requests being read or handled over all connections.",
        ),
        (
            "max.connections",
            settings.connection_limits.max_connections.to_string(),
            Some("2147483647".to_string()),
            ConfigType::Int,
            "Connections the broker accepts; beyond it accepting waits.",
        ),
        (
            "max.connections.per.ip",
            settings.connection_limits.max_connections_per_ip.to_string(),
            Some("2147483647".to_string()),
            ConfigType::Int,
            "Connections allowed from one address.",
        ),
        (
            "max.connection.creation.rate",
            settings.connection_limits.max_connection_creation_rate.map_or(i32::MAX as u32, |r| r).to_string(),
            Some("2147483647".to_string()),
            ConfigType::Int,
            "New connections per second over the listeners but the inter-broker one (KIP-612); beyond it accepting waits.",
        ),
        (
            "connections.max.idle.ms",
            settings.connection_limits.connections_max_idle_ms.to_string(),
            Some("600000".to_string()),
            ConfigType::Long,
            "Idle connections are closed after this many milliseconds.",
        ),
        (
            "max.broker.partitions",
            settings.max_broker_partitions.to_string(),
            None,
            ConfigType::Long,
            "Partition replicas this broker may host before topic and partition creation is refused.",
        ),
    ];
    if let Some(rack) = &extra.rack {
        properties.push(("broker.rack", rack.clone(), None, ConfigType::String, "Rack of this broker."));
    }
    if let Some(address) = &settings.http_address {
        properties.push((
            "runnel.http.address",
            address.clone(),
            None,
            ConfigType::String,
            "Where this broker serves HTTP (host:port); other nodes ask it there for its transforms.",
        ));
    }
    if settings.replica_selector == crate::config::ReplicaSelector::RackAware {
        properties.push((
            "replica.selector.class",
            "org.apache.kafka.common.replica.RackAwareReplicaSelector".to_string(),
            None,
            ConfigType::Class,
            "Consumers naming their rack are sent to an in-sync replica there (KIP-392).",
        ));
    }
    for info in &TOPIC_CONFIGS {
        if let Some(value) = settings.log_defaults.get(info.name) {
            properties.push((
                info.broker_name,
                value,
                kafka_defaults.get(info.name),
                info.config_type,
                info.documentation,
            ));
        }
    }
    properties.sort_by_key(|p| p.0);
    properties.dedup_by_key(|p| p.0);
    properties
        .into_iter()
        .map(|(name, value, default, config_type, documentation)| {
            let mut synonyms = Vec::with_capacity(2);
            if default.as_ref() != Some(&value) {
                synonyms.push((name, value.clone(), SOURCE_STATIC_BROKER_CONFIG));
            }
            if let Some(default) = default {
                synonyms.push((name, default, SOURCE_DEFAULT_CONFIG));
            }
            Described {
                name,
                value,
                source: synonyms.first().map_or(SOURCE_DEFAULT_CONFIG, |s| s.2),
                read_only: true,
                synonyms,
                config_type,
                documentation,
            }
        })
        .collect()
}

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: DescribeConfigsRequest,
) -> Option<DescribeConfigsResponse> {
    let image = broker.controller.image();
    let version = header.request_api_version;
    let mut results = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let name: &str = &resource.resource_name;
        let authorized =
            super::authorize_config_resource(broker, resource.resource_type, name, Operation::DescribeConfigs);
        let described = match resource.resource_type {
            _ if authorized.is_err() => authorized.map(|()| Vec::new()),
            RESOURCE_TOPIC => match validate_topic_name(name) {
                Err(message) => Err((ResponseError::InvalidTopicException, message.to_string())),
                Ok(()) => match image.topics.get(name) {
                    None => Err((ResponseError::UnknownTopicOrPartition, format!("topic '{name}' does not exist"))),
                    Some(topic) => Ok(describe_topic(
                        &broker.topic_log_config(&topic.configs),
                        &broker.settings.log_defaults,
                        |n| topic.configs.contains_key(n),
                    )),
                },
            },
            RESOURCE_BROKER if name.is_empty() => {
                // Cluster-wide dynamic defaults, of which Runnel has none.
                Ok(Vec::new())
            }
            RESOURCE_BROKER => match name.parse::<u64>() {
                Ok(id) if id == broker.settings.node_id => {
                    let extra = BrokerProperties {
                        offsets_topic_replication_factor: broker.groups.offsets_topic_replication_factor,
                        rack: image.brokers.get(&id).and_then(|b| b.rack.clone()),
                    };
                    Ok(describe_broker(&broker.settings, &extra))
                }
                Ok(_) => Err((
                    ResponseError::InvalidRequest,
                    format!(
                        "Unexpected broker id, expected {} or empty string, but received {name}",
                        broker.settings.node_id
                    ),
                )),
                Err(_) => {
                    Err((ResponseError::InvalidRequest, format!("Broker id must be an integer, but it is: {name}")))
                }
            },
            other => Err((
                ResponseError::InvalidRequest,
                format!("describing configs of resource type {other} is not supported"),
            )),
        };
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        results.push(match described {
            Ok(configs) => {
                let wanted = resource.configuration_keys.as_ref().filter(|keys| !keys.is_empty());
                let configs = configs
                    .into_iter()
                    .filter(|c| wanted.is_none_or(|keys| keys.iter().any(|k| &**k == c.name)))
                    .map(|c| to_protocol(c, request.include_synonyms, request.include_documentation && version >= 3))
                    .collect();
                result.with_error_message(None).with_configs(configs)
            }
            Err((code, message)) => result.with_error_code(code.code()).with_error_message(Some(str_bytes(&message))),
        });
    }
    Some(DescribeConfigsResponse::default().with_results(results))
}

fn to_protocol(
    config: Described,
    include_synonyms: bool,
    include_documentation: bool,
) -> DescribeConfigsResourceResult {
    let synonyms = if include_synonyms {
        config
            .synonyms
            .into_iter()
            .map(|(name, value, source)| {
                DescribeConfigsSynonym::default()
                    .with_name(StrBytes::from_static_str(name))
                    .with_value(Some(str_bytes(&value)))
                    .with_source(source)
            })
            .collect()
    } else {
        Vec::new()
    };
    let documentation = include_documentation.then(|| StrBytes::from_static_str(config.documentation));
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(config.name))
        .with_value(Some(str_bytes(&config.value)))
        .with_read_only(config.read_only)
        .with_config_source(config.source)
        .with_is_sensitive(false)
        .with_synonyms(synonyms)
        .with_config_type(config.config_type as i8)
        .with_documentation(documentation)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_table_covers_every_log_config_in_order() {
        // Proves adding a LogConfig name without describing it here fails a test.
        let names: Vec<&str> = TOPIC_CONFIGS.iter().map(|i| i.name).collect();
        assert_eq!(names, LogConfig::NAMES);
        assert_eq!(topic_config_info("retention.ms").map(|i| i.broker_name), Some("log.retention.ms"));
        assert_eq!(topic_config_info("max.message.bytes").map(|i| i.broker_name), Some("message.max.bytes"));
        assert_eq!(topic_config_info("cleanup.policy").map(|i| i.config_type), Some(ConfigType::List));
    }

    #[test]
    fn topic_sources_and_synonyms_follow_kafka_precedence() {
        // Proves override > static broker config > Kafka default, with synonyms in that order.
        let broker_defaults = LogConfig { retention_ms: 1000, ..LogConfig::default() };
        let overrides: BTreeMap<String, String> = [("segment.bytes".to_string(), "1048576".to_string())].into();
        let effective = broker_defaults.clone().with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let described = describe_topic(&effective.unwrap(), &broker_defaults, |n| overrides.contains_key(n));
        let find = |name: &str| described.iter().find(|d| d.name == name).unwrap().clone();

        let segment = find("segment.bytes");
        assert_eq!((segment.value.as_str(), segment.source), ("1048576", SOURCE_TOPIC_CONFIG));
        assert_eq!(
            segment.synonyms,
            vec![
                ("segment.bytes", "1048576".to_string(), SOURCE_TOPIC_CONFIG),
                ("log.segment.bytes", (1u32 << 30).to_string(), SOURCE_DEFAULT_CONFIG),
            ]
        );
        let retention = find("retention.ms");
        assert_eq!((retention.value.as_str(), retention.source), ("1000", SOURCE_STATIC_BROKER_CONFIG));
        assert_eq!(retention.synonyms[0], ("log.retention.ms", "1000".to_string(), SOURCE_STATIC_BROKER_CONFIG));
        assert_eq!(retention.synonyms[1], ("log.retention.ms", "604800000".to_string(), SOURCE_DEFAULT_CONFIG));
        let policy = find("cleanup.policy");
        assert_eq!((policy.value.as_str(), policy.source), ("delete", SOURCE_DEFAULT_CONFIG));
        assert_eq!(policy.config_type, ConfigType::List);
        assert_eq!(described.len(), LogConfig::NAMES.len());
    }

    #[test]
    fn responses_encode_and_decode_at_every_supported_version() {
        // Proves the fields we fill (synonyms, v3+ type and documentation) survive the codec.
        use bytes::BytesMut;
        use kafka_protocol::protocol::{Decodable, Encodable};

        let defaults = LogConfig::default();
        for version in 1..=4 {
            let configs: Vec<_> = describe_topic(&defaults, &defaults, |_| false)
                .into_iter()
                .map(|c| to_protocol(c, true, version >= 3))
                .collect();
            let response = DescribeConfigsResponse::default().with_results(vec![DescribeConfigsResult::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(str_bytes("t"))
                .with_error_message(None)
                .with_configs(configs)]);
            let mut buf = BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let decoded = DescribeConfigsResponse::decode(&mut buf.freeze(), version).unwrap();
            let retention = decoded.results[0].configs.iter().find(|c| &*c.name == "retention.ms").unwrap();
            assert_eq!(retention.value.as_deref(), Some("604800000"));
            assert_eq!(retention.config_source, SOURCE_DEFAULT_CONFIG);
            assert_eq!(&*retention.synonyms[0].name, "log.retention.ms");
            if version >= 3 {
                assert_eq!(retention.config_type, ConfigType::Long as i8);
                assert!(retention.documentation.is_some());
            }
        }
    }

    #[test]
    fn broker_properties_use_broker_names_and_are_read_only() {
        // Proves the broker view lists server settings and log defaults under broker names.
        let settings = ServerSettings {
            node_id: 3,
            cluster_id: "c".to_string(),
            request_max_bytes: 104_857_600,
            default_partitions: 6,
            default_replication_factor: 1,
            auto_create_topics: true,
            log_defaults: LogConfig { segment_bytes: 1 << 20, ..LogConfig::default() },
            connection_limits: crate::server::ConnectionLimits::default(),
            fetch_max_bytes: 57_671_680,
            data_dir: std::path::PathBuf::from("/data"),
            replica_selector: crate::config::ReplicaSelector::LeaderOnly,
            http_address: Some("127.0.0.1:8080".to_string()),
            metrics_aggregate: false,
            max_broker_partitions: 20_000,
            authorizer: Default::default(),
            security: Default::default(),
            inter_broker_listener: std::sync::Arc::from("PLAINTEXT"),
            http_consumer_instances_max: 1_000,
            http_consumer_instances_max_per_principal: 1_000,
        };
        let extra = BrokerProperties { offsets_topic_replication_factor: 3, rack: Some("r1".to_string()) };
        let described = describe_broker(&settings, &extra);
        let find = |name: &str| described.iter().find(|d| d.name == name).unwrap().clone();
        assert_eq!(
            (find("num.partitions").value.as_str(), find("num.partitions").source),
            ("6", SOURCE_STATIC_BROKER_CONFIG)
        );
        assert_eq!(find("auto.create.topics.enable").source, SOURCE_DEFAULT_CONFIG);
        assert_eq!(find("log.segment.bytes").value, "1048576");
        assert_eq!(find("message.max.bytes").config_type, ConfigType::Int);
        assert!(described.iter().all(|d| d.read_only));
        assert!(described.windows(2).all(|w| w[0].name < w[1].name), "sorted, no duplicates");
        assert_eq!(find("node.id").synonyms, vec![("node.id", "3".to_string(), SOURCE_STATIC_BROKER_CONFIG)]);
        let offsets_rf = find("offsets.topic.replication.factor");
        assert_eq!((offsets_rf.value.as_str(), offsets_rf.source), ("3", SOURCE_DEFAULT_CONFIG));
        assert_eq!(offsets_rf.config_type, ConfigType::Short);
        assert_eq!(
            (find("broker.rack").value.as_str(), find("broker.rack").source),
            ("r1", SOURCE_STATIC_BROKER_CONFIG)
        );
        assert_eq!(find("min.insync.replicas").value, "1");
        assert_eq!(find("runnel.http.address").value, "127.0.0.1:8080");
        let unclean = find("unclean.leader.election.enable");
        assert_eq!((unclean.value.as_str(), unclean.config_type), ("false", ConfigType::Boolean));
        let without_rack = describe_broker(&settings, &BrokerProperties { rack: None, ..extra });
        assert!(without_rack.iter().all(|d| d.name != "broker.rack"), "broker.rack only when set");
    }
}
