//! DeleteRecords: moves each partition's log start offset up to the requested offset (-1: the
//! high watermark) and answers with the new low watermark. The leader answers as soon as its
//! own log start offset moved; Kafka also waits for the followers' (replication will add that).

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, RequestHeader};

use super::hosted_partition;
use crate::server::{partition_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DeleteRecordsRequest,
) -> Option<DeleteRecordsResponse> {
    let image = broker.controller.image();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name: &str = &topic.name.0;
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let result = hosted_partition(broker, &image, name, p.partition_index)
                .and_then(|partition| partition.delete_records_before(p.offset).map_err(|e| partition_error_code(&e)));
            let response = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            partitions.push(match result {
                Ok(low_watermark) => response.with_low_watermark(low_watermark),
                Err(code) => response.with_low_watermark(-1).with_error_code(code.code()),
            });
        }
        topics.push(DeleteRecordsTopicResult::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    Some(DeleteRecordsResponse::default().with_topics(topics))
}
