//! OffsetForLeaderEpoch: for each partition, after the client's current leader epoch is checked
//! (fencing), the largest leader epoch at or below the requested one and the offset where it
//! ends. `replica_id` (followers) is ignored for now: every caller is answered by the leader.

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestHeader};

use super::hosted_partition;
use crate::server::{partition_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: OffsetForLeaderEpochRequest,
) -> Option<OffsetForLeaderEpochResponse> {
    let image = broker.controller.image();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name: &str = &topic.topic.0;
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let result = hosted_partition(broker, &image, name, p.partition).and_then(|partition| {
                partition
                    .check_leader_epoch(p.current_leader_epoch)
                    .map(|()| partition.end_offset_for_epoch(p.leader_epoch))
                    .map_err(|e| partition_error_code(&e))
            });
            // Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET (-1) on errors.
            let response =
                EpochEndOffset::default().with_partition(p.partition).with_leader_epoch(-1).with_end_offset(-1);
            partitions.push(match result {
                Ok((leader_epoch, end_offset)) => response.with_leader_epoch(leader_epoch).with_end_offset(end_offset),
                Err(code) => response.with_error_code(code.code()),
            });
        }
        topics.push(OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone()).with_partitions(partitions));
    }
    Some(OffsetForLeaderEpochResponse::default().with_topics(topics))
}
