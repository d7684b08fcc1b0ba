//! OffsetForLeaderEpoch: for each partition, after the client's current leader epoch is checked
//! (fencing), the largest leader epoch at or below the requested one and the offset where it
//! ends. Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka), except for
//! Kafka's debugging replica id (-2, sent explicitly from v3): a follower's log may end before what its leader
//! acknowledged, and a consumer validating its position (KIP-320) against it would see a
//! truncation that never happened and reset.

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::security::acl::{Operation, ResourceType};

use super::hosted_partition;
use crate::server::{partition_error_code, Broker};

/// Kafka's `FetchRequest.DEBUGGING_CONSUMER_ID`: a tool that may read any replica.
const DEBUGGING_REPLICA_ID: i32 = -2;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: OffsetForLeaderEpochRequest,
) -> Option<OffsetForLeaderEpochResponse> {
    let image = broker.controller.image();
    let mut topics = Vec::with_capacity(request.topics.len());
    // Kafka: a follower (replica id >= 0, v3+) needs CLUSTER_ACTION, a client DESCRIBE on the topic.
    let follower = header.request_api_version >= 3 && request.replica_id.0 >= 0;
    let cluster_denied = follower && !broker.authorized_cluster(Operation::ClusterAction);
    for topic in &request.topics {
        let name: &str = &topic.topic.0;
        let denied =
            cluster_denied || (!follower && !broker.authorized(Operation::Describe, ResourceType::Topic, name));
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let hosted = if denied {
                Err(if follower {
                    ResponseError::ClusterAuthorizationFailed
                } else {
                    ResponseError::TopicAuthorizationFailed
                })
            } else {
                hosted_partition(broker, &image, name, p.partition)
            };
            let result = hosted.and_then(|partition| {
                // Before v3 there is no replica id (the codec fills in -2): those are clients.
                let debugging = header.request_api_version >= 3 && request.replica_id.0 == DEBUGGING_REPLICA_ID;
                let leader_only = if debugging { Ok(()) } else { partition.check_leader() };
                leader_only
                    .and_then(|()| partition.check_leader_epoch(p.current_leader_epoch))
                    .map(|()| partition.end_offset_for_epoch(p.leader_epoch))
                    .map_err(|e| partition_error_code(&e))
            });
            // Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET (-1) on errors.
            let response =
                EpochEndOffset::default().with_partition(p.partition).with_leader_epoch(-1).with_end_offset(-1);
            tracing::debug!(
                topic = name,
                partition = p.partition,
                replica = request.replica_id.0,
                current_leader_epoch = p.current_leader_epoch,
                leader_epoch = p.leader_epoch,
                answer = ?result,
                "OffsetForLeaderEpoch"
            );
            partitions.push(match result {
                Ok((leader_epoch, end_offset)) => response.with_leader_epoch(leader_epoch).with_end_offset(end_offset),
                Err(code) => response.with_error_code(code.code()),
            });
        }
        topics.push(OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone()).with_partitions(partitions));
    }
    Some(OffsetForLeaderEpochResponse::default().with_topics(topics))
}
