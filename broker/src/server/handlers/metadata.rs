//! Metadata: brokers, the controller, and topics with partitions (leader, leader epoch,
//! replicas, ISR). Unknown topics are auto-created when both the broker
//! (`auto.create.topics.enable`) and the request allow it.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::security::acl::{Operation, ResourceType};

use super::{broker_id, client_endpoint, create_topics, str_bytes, topic_name, uuid_of, validate_topic_name};
use std::collections::HashMap;

use super::find_coordinator;
use crate::controller::{is_coordinator_topic, MetadataImage, TopicImage, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use crate::server::Broker;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: MetadataRequest) -> Option<MetadataResponse> {
    let version = header.request_api_version;
    let mut image = broker.controller.image();
    // Kafka: a named topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (whether it
    // exists or not); an unnamed request lists only the topics it may describe.
    let describable = |name: &str| broker.authorized(Operation::Describe, ResourceType::Topic, name);
    // Topics asked for by id (v10+ with a null name): unknown is UNKNOWN_TOPIC_ID and an
    // undescribable one TOPIC_AUTHORIZATION_FAILED, both with a null name (the name would say
    // what the id is), as Kafka answers.
    let mut by_id_errors = Vec::new();
    let wanted: Option<Vec<String>> = match &request.topics {
        None => None,
        // Version 0 has no null list: an empty one means every topic.
        Some(topics) if topics.is_empty() && version == 0 => None,
        Some(topics) => Some(
            topics
                .iter()
                .filter_map(|t| match &t.name {
                    Some(name) => Some(name.0.to_string()),
                    None => match image.topic_by_id(t.topic_id.as_bytes()) {
                        Some(topic) if describable(&topic.name) => Some(topic.name.clone()),
                        found => {
                            let code = if found.is_some() {
                                ResponseError::TopicAuthorizationFailed
                            } else {
                                ResponseError::UnknownTopicId
                            };
                            by_id_errors.push(
                                MetadataResponseTopic::default()
                                    .with_name(None)
                                    .with_topic_id(t.topic_id)
                                    .with_error_code(code.code()),
                            );
                            None
                        }
                    },
                })
                .collect(),
        ),
    };
    let mut errors: HashMap<String, ResponseError> = HashMap::new();
    if let Some(names) = &wanted {
        for name in names.iter().filter(|n| !describable(n)) {
            errors.insert(name.clone(), ResponseError::TopicAuthorizationFailed);
        }
        // Version 0 has no allow flag and always auto-creates, like Kafka.
        let allow = request.allow_auto_topic_creation || version < 4;
        let mut missing: Vec<&String> =
            names.iter().filter(|n| !image.topics.contains_key(n.as_str()) && !errors.contains_key(*n)).collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() && allow && broker.settings.auto_create_topics {
            let create_any = broker.authorized_cluster(Operation::Create);
            for name in missing {
                if !create_any && !broker.authorized(Operation::Create, ResourceType::Topic, name) {
                    errors.insert(name.clone(), ResponseError::TopicAuthorizationFailed);
                    continue;
                }
                if validate_topic_name(name).is_err() {
                    errors.insert(name.clone(), ResponseError::InvalidTopicException);
                    continue;
                }
                // The coordinators' topics are created as their coordinators create them
                // (partitions, replication, compaction), never as ordinary topics (Kafka's
                // AutoTopicCreationManager): a __transaction_state made here with delete
                // retention would lose transaction states.
                let created = match name.as_str() {
                    OFFSETS_TOPIC => find_coordinator::ensure_offsets_topic(broker).await,
                    TRANSACTION_STATE_TOPIC => find_coordinator::ensure_transaction_topic(broker).await,
                    _ => {
                        let partitions = broker.settings.default_partitions as i32;
                        let replication = broker.settings.default_replication_factor as i16;
                        create_topics::create(broker, name, partitions, replication, Default::default())
                            .await
                            .map(|_| ())
                    }
                };
                match created {
                    Ok(()) => {}
                    Err(code) if code == ResponseError::TopicAlreadyExists => {}
                    Err(code) => {
                        errors.insert(name.clone(), code);
                    }
                }
            }
            image = broker.controller.image();
        }
    }
    let mut topics: Vec<MetadataResponseTopic> = match &wanted {
        None => image.topics.values().filter(|t| describable(&t.name)).map(|t| describe_topic(&image, t)).collect(),
        Some(names) => names
            .iter()
            .map(|name| match errors.get(name) {
                Some(code) => error_topic(name, *code),
                None => match image.topics.get(name.as_str()) {
                    Some(topic) => describe_topic(&image, topic),
                    None => error_topic(name, ResponseError::UnknownTopicOrPartition),
                },
            })
            .collect(),
    };
    topics.extend(by_id_errors);
    let brokers = image
        .brokers
        .values()
        .filter_map(|b| {
            let (host, port) = client_endpoint(b)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(broker_id(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(port as i32)
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    let controller = broker.controller.leader_id().unwrap_or(broker.settings.node_id);
    Some(
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(str_bytes(&broker.settings.cluster_id)))
            .with_controller_id(broker_id(controller))
            .with_topics(topics),
    )
}

fn error_topic(name: &str, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(Some(topic_name(name))).with_error_code(code.code())
}

fn describe_topic(image: &MetadataImage, topic: &TopicImage) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let live = |id: &u64| image.is_live(*id);
            let error = match p.leader {
                Some(leader) if live(&leader) => 0,
                _ => ResponseError::LeaderNotAvailable.code(),
            };
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p.partition as i32)
                .with_leader_id(kafka_protocol::messages::BrokerId(p.leader.map_or(-1, |l| l as i32)))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas.iter().copied().map(broker_id).collect())
                .with_isr_nodes(p.isr.iter().copied().map(broker_id).collect())
                .with_offline_replicas(p.replicas.iter().filter(|r| !live(r)).copied().map(broker_id).collect())
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(uuid_of(topic.topic_id))
        // Kafka's internal topics are the coordinators' (a user's `__orders` is not one: Java
        // clients would hide it from listTopics and pattern subscriptions).
        .with_is_internal(is_coordinator_topic(&topic.name))
        .with_partitions(partitions)
}
