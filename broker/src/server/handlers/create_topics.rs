//! CreateTopics: validates names, partition counts, replication factors and configs, places
//! replicas over the usable brokers (`server::placement`, Kafka's rack-aware assignment), and
//! commits the CreateTopic records of all the valid topics of a request through the metadata
//! quorum as one entry (`Controller::propose_all`), each topic answered with its own outcome.
//! The partition bounds of `controller::partition_limits` are checked before anything is proposed.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{str_bytes, uuid_of, validate_topic_name};
use crate::controller::partition_limits::{ReplicaBudget, EXCESSIVE_PARTITIONS, MAX_PARTITIONS_PER_REQUEST};
use crate::controller::{ApplyOutcome, MetadataRecord};
use crate::log::LogConfig;
use crate::security::acl::{Operation, ResourceType};
use crate::server::placement::{self, PlacementSpec, Start};
use crate::server::{controller_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: CreateTopicsRequest,
) -> Option<CreateTopicsResponse> {
    // Every topic is validated against one image first; the valid ones are then created with
    // one proposal (`Controller::propose_all`), each with its own outcome, as Kafka's controller
    // answers each topic of a request on its own.
    let image = broker.controller.image();
    if let Some(refused) = refuse_excessive(broker, &request) {
        return Some(refused);
    }
    let mut budget = ReplicaBudget::of(&image, broker.settings.max_broker_partitions);
    let colliding = colliding_names(&image);
    // Kafka: CREATE on the cluster, or on each topic.
    let create_any = broker.authorized_cluster(Operation::Create);
    let mut checked = Vec::with_capacity(request.topics.len());
    // Counted once (a count per topic was quadratic in the request, before authorization).
    let mut occurrences: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for topic in &request.topics {
        *occurrences.entry(&topic.name.0).or_default() += 1;
    }
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let mut configs = BTreeMap::new();
        let mut null_config = None;
        for config in &topic.configs {
            match &config.value {
                Some(value) => {
                    configs.insert(config.name.to_string(), value.to_string());
                }
                None => null_config = Some(config.name.to_string()),
            }
        }
        let duplicate = occurrences.get(name.as_str()).is_some_and(|&n| n > 1);
        let manual_with_counts =
            !topic.assignments.is_empty() && (topic.num_partitions != -1 || topic.replication_factor != -1);
        let outcome = if duplicate {
            Err((ResponseError::InvalidRequest, "topic appears more than once in the request".to_string()))
        } else if !create_any && !broker.authorized(Operation::Create, ResourceType::Topic, &name) {
            Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string()))
        } else if let Some(config) = null_config {
            // Kafka's words (ReplicationControlManager.createTopic).
            Err((ResponseError::InvalidConfig, format!("Null value not supported for topic configs: {config}")))
        } else if manual_with_counts {
            Err((
                ResponseError::InvalidRequest,
                "A manual partition assignment was specified, but numPartitions or replicationFactor was not set \
                 to -1."
                    .to_string(),
            ))
        } else if !topic.assignments.is_empty() {
            let assignments = topic
                .assignments
                .iter()
                .map(|a| (a.partition_index, a.broker_ids.iter().map(|b| b.0).collect()))
                .collect();
            validate(broker, &image, &mut budget, &colliding, &name, Assignment::Manual(assignments), configs.clone())
        } else {
            let assignment =
                Assignment::Auto { partitions: topic.num_partitions, replication_factor: topic.replication_factor };
            validate(broker, &image, &mut budget, &colliding, &name, assignment, configs.clone())
        };
        checked.push((topic.name.clone(), configs, outcome));
    }
    let records: Vec<MetadataRecord> = if request.validate_only {
        Vec::new()
    } else {
        checked.iter().filter_map(|(_, _, outcome)| outcome.as_ref().ok().map(|(_, record)| record.clone())).collect()
    };
    let mut committed = broker.controller.propose_all(records).await.into_iter();
    let mut results = Vec::with_capacity(checked.len());
    for (name, configs, outcome) in checked {
        let outcome = match outcome {
            Ok((created, _)) if request.validate_only => Ok(created),
            Ok((created, _)) => match committed.next() {
                Some(committed) => created_or_error(&name.0, created, committed),
                None => Err((ResponseError::UnknownServerError, "no outcome for this topic".to_string())),
            },
            Err(e) => Err(e),
        };
        let mut result = CreatableTopicResult::default().with_name(name.clone());
        match outcome {
            Ok(created) => {
                result = result
                    .with_topic_id(uuid_of(created.topic_id))
                    .with_num_partitions(created.partitions as i32)
                    .with_replication_factor(created.replication_factor as i16);
                // Kafka returns the configs only to a client that may DESCRIBE_CONFIGS them.
                if broker.authorized(Operation::DescribeConfigs, ResourceType::Topic, &name.0) {
                    let log_config = broker.topic_log_config(&configs);
                    result = result.with_configs(Some(config_entries(&log_config, &configs)));
                } else {
                    result = result.with_topic_config_error_code(ResponseError::TopicAuthorizationFailed.code());
                }
            }
            Err((code, message)) => {
                result = result
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&message)))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1);
            }
        }
        results.push(result);
    }
    broker.reconcile_now().await;
    Some(CreateTopicsResponse::default().with_topics(results))
}

/// Kafka 4 refuses a request whose topics add up to more than
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions as a whole, every topic POLICY_VIOLATION, before
/// checking any of them (`ReplicationControlManager.validateTotalNumberOfPartitions`).
fn refuse_excessive(broker: &Broker, request: &CreateTopicsRequest) -> Option<CreateTopicsResponse> {
    let total: u64 = request
        .topics
        .iter()
        .map(|topic| match (topic.assignments.len(), topic.num_partitions) {
            (0, -1) => u64::from(broker.settings.default_partitions),
            (0, count) => u64::try_from(count).unwrap_or(0),
            (assigned, _) => assigned as u64,
        })
        .sum();
    if total <= MAX_PARTITIONS_PER_REQUEST {
        return None;
    }
    let results = request
        .topics
        .iter()
        .map(|topic| {
            CreatableTopicResult::default()
                .with_name(topic.name.clone())
                .with_error_code(ResponseError::PolicyViolation.code())
                .with_error_message(Some(str_bytes(EXCESSIVE_PARTITIONS)))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
        })
        .collect();
    Some(CreateTopicsResponse::default().with_topics(results))
}

/// The answer for a topic whose CreateTopic record was proposed.
fn created_or_error(
    name: &str,
    created: Created,
    committed: Result<ApplyOutcome, std::sync::Arc<crate::controller::ControllerError>>,
) -> Result<Created, (ResponseError, String)> {
    match committed {
        Ok(ApplyOutcome::Applied) => Ok(created),
        Ok(ApplyOutcome::TopicAlreadyExists) => {
            Err((ResponseError::TopicAlreadyExists, format!("topic '{name}' already exists")))
        }
        Ok(other) => Err(super::create_partitions::refused_creation(other)),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}

fn config_entries(config: &LogConfig, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    config
        .entries()
        .into_iter()
        .map(|(name, value)| {
            // ConfigSource: 1 = TOPIC_CONFIG, 5 = DEFAULT_CONFIG.
            let source = if overrides.contains_key(name) { 1 } else { 5 };
            CreatableTopicConfigs::default()
                .with_name(str_bytes(name))
                .with_value(Some(str_bytes(&value)))
                .with_config_source(source)
        })
        .collect()
}

pub(crate) enum Assignment {
    Auto {
        partitions: i32,
        replication_factor: i16,
    },
    /// The request's replica assignment: (partition index, broker ids) as the client sent them.
    Manual(Vec<(i32, Vec<i32>)>),
}

pub(crate) struct Created {
    pub topic_id: [u8; 16],
    pub partitions: u32,
    pub replication_factor: u16,
}

/// Whether the client may create topic `name`: Kafka's CREATE on the cluster or on the topic.
pub(crate) fn may_create(broker: &Broker, name: &str) -> bool {
    broker.authorized_cluster(Operation::Create) || broker.authorized(Operation::Create, ResourceType::Topic, name)
}

/// Validates and (unless `validate_only`) creates a topic through the quorum. Unchecked: the
/// caller authorized the client ([`may_create`]) or creates an internal topic on its own.
pub(crate) async fn validate_and_create(
    broker: &Broker,
    name: &str,
    assignment: Assignment,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<Created, (ResponseError, String)> {
    let image = broker.controller.image();
    let mut budget = ReplicaBudget::of(&image, broker.settings.max_broker_partitions);
    let (created, record) = validate(broker, &image, &mut budget, &colliding_names(&image), name, assignment, configs)?;
    if validate_only {
        return Ok(created);
    }
    created_or_error(name, created, broker.controller.propose(record).await.map_err(std::sync::Arc::new))
}

/// Existing topics with '.' or '_' in their names, by their name with '.' as '_' (built once per
/// request: a look-up per created topic).
type Colliding = std::collections::HashMap<String, String>;

fn colliding_names(image: &crate::controller::MetadataImage) -> Colliding {
    image.topics.keys().filter(|t| t.contains(['.', '_'])).map(|t| (t.replace('.', "_"), t.clone())).collect()
}

/// Checks a topic creation against `image` (Kafka's checks and words) and places its replicas:
/// what to answer and the record that creates it.
fn validate(
    broker: &Broker,
    image: &crate::controller::MetadataImage,
    budget: &mut ReplicaBudget,
    colliding: &Colliding,
    name: &str,
    assignment: Assignment,
    configs: BTreeMap<String, String>,
) -> Result<(Created, MetadataRecord), (ResponseError, String)> {
    validate_topic_name(name).map_err(|m| (ResponseError::InvalidTopicException, m.to_string()))?;
    if image.topics.contains_key(name) {
        return Err((ResponseError::TopicAlreadyExists, format!("topic '{name}' already exists")));
    }
    // Kafka refuses names that differ from an existing one only by '.' against '_': metric
    // names replace '.' with '_', so both topics would report as one.
    if let Some(existing) = colliding.get(&name.replace('.', "_")) {
        return Err((
            ResponseError::InvalidTopicException,
            format!("Topic '{name}' collides with existing topic: {existing}"),
        ));
    }
    let mut configs = configs;
    if name == crate::group::OFFSETS_TOPIC {
        // A client may create it first (as with Kafka), with its own partition count, which
        // groups then map over; its configs start from the ones it needs.
        let mut internal = super::find_coordinator::offsets_topic_configs();
        internal.append(&mut configs);
        configs = internal;
    }
    let log_config = crate::server::validated_topic_log_config(&broker.settings.log_defaults, &configs)
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    if name == crate::group::OFFSETS_TOPIC {
        if let Some(message) = crate::group::offsets_topic_cleanup_error(&log_config) {
            return Err((ResponseError::PolicyViolation, message));
        }
    }
    let replicas = match assignment {
        Assignment::Manual(mut assignments) => {
            if assignments.len() as u64 > MAX_PARTITIONS_PER_REQUEST {
                return Err((ResponseError::PolicyViolation, EXCESSIVE_PARTITIONS.to_string()));
            }
            // Kafka's ReplicationControlManager: each partition once, numbered 0..n, each with
            // distinct registered brokers and the same replication factor.
            assignments.sort_by_key(|(partition, _)| *partition);
            let invalid = |message: String| Err((ResponseError::InvalidReplicaAssignment, message));
            for (expected, (partition, _)) in assignments.iter().enumerate() {
                if *partition != expected as i32 {
                    return if assignments.iter().filter(|(p, _)| p == partition).count() > 1 {
                        invalid(format!("Found multiple manual partition assignments for partition {partition}"))
                    } else {
                        invalid("partitions should be a consecutive 0-based integer sequence".to_string())
                    };
                }
            }
            let replicas: Vec<Vec<i32>> = assignments.into_iter().map(|(_, replicas)| replicas).collect();
            let replication_factor = replicas.first().map_or(0, Vec::len);
            let checked = super::create_partitions::check_assignments(
                &replicas,
                replicas.len() as u32,
                replication_factor,
                |id| image.brokers.contains_key(&id),
            )?;
            super::create_partitions::check_some_live(&checked, 0, |id| image.is_live(id))?;
            checked
        }
        Assignment::Auto { partitions, replication_factor } => {
            // Kafka's checks and words (ReplicationControlManager.createTopic).
            if replication_factor == 0 || replication_factor < -1 {
                return Err((
                    ResponseError::InvalidReplicationFactor,
                    "Replication factor must be larger than 0, or -1 to use the default value.".to_string(),
                ));
            }
            if partitions == 0 || partitions < -1 {
                return Err((
                    ResponseError::InvalidPartitions,
                    "Number of partitions was set to an invalid non-positive value.".to_string(),
                ));
            }
            let partitions = if partitions == -1 { broker.settings.default_partitions as i32 } else { partitions };
            let replication_factor = if replication_factor == -1 {
                broker.settings.default_replication_factor as i32
            } else {
                replication_factor as i32
            };
            if partitions as u64 > MAX_PARTITIONS_PER_REQUEST {
                return Err((ResponseError::PolicyViolation, EXCESSIVE_PARTITIONS.to_string()));
            }
            let spec = PlacementSpec { first_partition: 0, partitions: partitions as u32, replication_factor };
            placement::assign_replicas(&placement::usable_brokers(image), spec, Start::random()).map_err(|e| {
                (
                    ResponseError::InvalidReplicationFactor,
                    format!("Unable to replicate the partition {replication_factor} time(s): {e}"),
                )
            })?
        }
    };
    budget.take(name, &replicas).map_err(|message| (ResponseError::PolicyViolation, message))?;
    let created = Created {
        topic_id: *uuid::Uuid::new_v4().as_bytes(),
        partitions: replicas.len() as u32,
        replication_factor: replicas.first().map_or(0, |r| r.len() as u16),
    };
    let record = MetadataRecord::CreateTopic {
        name: name.to_string(),
        topic_id: created.topic_id,
        partitions: replicas,
        configs,
        max_broker_partitions: Some(broker.settings.max_broker_partitions),
    };
    Ok((created, record))
}

/// Auto-creation with broker defaults (Metadata with allow_auto_topic_creation).
pub(crate) async fn create(
    broker: &Broker,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
) -> Result<Created, ResponseError> {
    let created =
        validate_and_create(broker, name, Assignment::Auto { partitions, replication_factor }, configs, false)
            .await
            .map_err(|(code, message)| {
                tracing::debug!(topic = name, %message, "auto-create failed");
                code
            })?;
    broker.reconcile_now().await;
    Ok(created)
}
