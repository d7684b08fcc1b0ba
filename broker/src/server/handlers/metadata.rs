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
use crate::controller::{MetadataImage, TopicImage};
use crate::server::Broker;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: MetadataRequest) -> Option<MetadataResponse> {
    let mut image = broker.controller.image();
    let wanted: Option<Vec<String>> = match &request.topics {
        None => None,
        Some(topics) => Some(
            topics
                .iter()
                .filter_map(|t| match &t.name {
                    Some(name) => Some(name.0.to_string()),
                    None => image.topics.values().find(|i| uuid_of(i.topic_id) == t.topic_id).map(|i| i.name.clone()),
                })
                .collect(),
        ),
    };
    let mut errors = Vec::new();
    // Kafka: a named topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (whether it
    // exists or not); an unnamed request lists only the topics it may describe.
    let describable = |name: &str| broker.authorized(Operation::Describe, ResourceType::Topic, name);
    if let Some(names) = &wanted {
        for name in names.iter().filter(|n| !describable(n)) {
            errors.push((name.clone(), ResponseError::TopicAuthorizationFailed));
        }
        // Version 0 has no allow flag and always auto-creates, like Kafka.
        let allow = request.allow_auto_topic_creation || header.request_api_version < 4;
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !image.topics.contains_key(n.as_str()) && !errors.iter().any(|(e, _)| e == *n))
            .collect();
        if !missing.is_empty() && allow && broker.settings.auto_create_topics {
            let create_any = broker.authorized_cluster(Operation::Create);
            for name in missing {
                if !create_any && !broker.authorized(Operation::Create, ResourceType::Topic, name) {
                    errors.push((name.clone(), ResponseError::TopicAuthorizationFailed));
                    continue;
                }
                if validate_topic_name(name).is_err() {
                    errors.push((name.clone(), ResponseError::InvalidTopicException));
                    continue;
                }
                let partitions = broker.settings.default_partitions;
                let replication = broker.settings.default_replication_factor;
                match create_topics::create(broker, name, partitions as i32, replication as i16, Default::default())
                    .await
                {
                    Ok(_) => {}
                    Err(code) if code == ResponseError::TopicAlreadyExists => {}
                    Err(code) => errors.push((name.clone(), code)),
                }
            }
            image = broker.controller.image();
        }
    }
    let topics = match &wanted {
        None => image.topics.values().filter(|t| describable(&t.name)).map(|t| describe_topic(&image, t)).collect(),
        Some(names) => names
            .iter()
            .map(|name| match errors.iter().find(|(n, _)| n == name) {
                Some((_, code)) => error_topic(name, *code),
                None => match image.topics.get(name.as_str()) {
                    Some(topic) => describe_topic(&image, topic),
                    None => error_topic(name, ResponseError::UnknownTopicOrPartition),
                },
            })
            .collect(),
    };
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
        .with_is_internal(topic.name.starts_with("__"))
        .with_partitions(partitions)
}
