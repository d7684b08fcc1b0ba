//! ListPartitionReassignments (`kafka-reassign-partitions.sh --verify` / `--list`): the
//! partitions with a reassignment in progress, each with its whole replica list (target first,
//! then the replicas being removed) and the replicas being added and removed. A request naming
//! topics lists only those (unknown topics and partitions, or ones not being reassigned, are left
//! out, as Kafka does); a null list means every topic.

use crate::security::acl::Operation;
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, RequestHeader};

use super::{broker_id, topic_name};
use crate::controller::{PartitionImage, TopicImage};
use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: ListPartitionReassignmentsRequest,
) -> Option<ListPartitionReassignmentsResponse> {
    if !broker.authorized_cluster(Operation::Describe) {
        return Some(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code())
                .with_error_message(Some(super::str_bytes("Cluster authorization failed."))),
        );
    }
    let image = broker.controller.image();
    let wanted: Vec<(&TopicImage, Vec<&PartitionImage>)> = match &request.topics {
        None => image.topics.values().map(|t| (&**t, t.partitions.iter().collect())).collect(),
        Some(topics) => topics
            .iter()
            .filter_map(|wanted| {
                let topic = image.topic(&wanted.name)?;
                let partitions = wanted
                    .partition_indexes
                    .iter()
                    .filter_map(|&i| topic.partitions.get(usize::try_from(i).ok()?))
                    .collect();
                Some((topic, partitions))
            })
            .collect(),
    };
    let ids = |nodes: &[u64]| nodes.iter().map(|&n| broker_id(n)).collect::<Vec<_>>();
    let topics = wanted
        .into_iter()
        .filter_map(|(topic, partitions)| {
            let ongoing: Vec<OngoingPartitionReassignment> = partitions
                .into_iter()
                .filter(|p| p.is_reassigning())
                .map(|p| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p.partition as i32)
                        .with_replicas(ids(&p.replicas))
                        .with_adding_replicas(ids(&p.adding_replicas))
                        .with_removing_replicas(ids(&p.removing_replicas))
                })
                .collect();
            (!ongoing.is_empty()).then(|| {
                OngoingTopicReassignment::default().with_name(topic_name(&topic.name)).with_partitions(ongoing)
            })
        })
        .collect();
    Some(ListPartitionReassignmentsResponse::default().with_error_message(None).with_topics(topics))
}
