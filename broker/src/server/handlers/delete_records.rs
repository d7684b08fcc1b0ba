//! DeleteRecords: moves each partition's log start offset up to the requested offset (-1: the
//! high watermark) on its leader, then answers once every live replica's log start offset got
//! there (Kafka's delayed delete records: the low watermark, the smallest log start offset over
//! the leader and its live followers, reached the new log start), within the request's
//! `timeout_ms` (REQUEST_TIMED_OUT after it; the leader's own deletion stands).

use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, RequestHeader};

use super::hosted_partition;
use crate::security::acl::{Operation, ResourceType};
use crate::server::{partition_error_code, Broker};

/// Upper bound on the request's `timeout_ms`, so a client cannot park a request for hours.
const MAX_TIMEOUT_MS: i32 = 300_000;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DeleteRecordsRequest,
) -> Option<DeleteRecordsResponse> {
    let image = broker.controller.image();
    let timeout = Duration::from_millis(request.timeout_ms.clamp(0, MAX_TIMEOUT_MS) as u64);
    // Every partition is cut on its leader first; the waits for the followers then overlap.
    let mut pending = Vec::new();
    for (t, topic) in request.topics.iter().enumerate() {
        let denied = !broker.authorized(Operation::Delete, ResourceType::Topic, &topic.name.0);
        for p in &topic.partitions {
            let hosted = if denied {
                Err(kafka_protocol::ResponseError::TopicAuthorizationFailed)
            } else if crate::controller::is_coordinator_topic(&topic.name.0) {
                // Kafka's "Cannot delete records of internal topic": the coordinators' loaders
                // would lose every group's offsets or open transaction below the cut.
                Err(kafka_protocol::ResponseError::InvalidTopicException)
            } else {
                hosted_partition(broker, &image, &topic.name.0, p.partition_index)
            };
            let cut = hosted.and_then(|partition| {
                // Kafka's Partition.deleteRecordsOnLeader: only a topic whose cleanup.policy
                // includes delete may lose records this way (a compacted topic keeps every key's
                // latest value).
                let deletable = partition.config().map_err(|e| partition_error_code(&e))?.cleanup_policy.delete;
                if !deletable {
                    return Err(kafka_protocol::ResponseError::PolicyViolation);
                }
                let start = partition.delete_records_before(p.offset).map_err(|e| partition_error_code(&e))?;
                Ok((partition, start))
            });
            pending.push((t, p.partition_index, cut));
        }
    }
    let waits = pending.into_iter().map(|(t, index, cut)| async move {
        let result = match cut {
            Ok((partition, start)) => {
                partition.wait_low_watermark(start, timeout).await.map_err(|e| partition_error_code(&e))
            }
            Err(code) => Err(code),
        };
        (t, index, result)
    });
    let results = futures_util::future::join_all(waits).await;
    let mut topics: Vec<DeleteRecordsTopicResult> =
        request.topics.iter().map(|topic| DeleteRecordsTopicResult::default().with_name(topic.name.clone())).collect();
    for (t, index, result) in results {
        let response = DeleteRecordsPartitionResult::default().with_partition_index(index);
        topics[t].partitions.push(match result {
            Ok(low_watermark) => response.with_low_watermark(low_watermark),
            Err(code) => response.with_low_watermark(-1).with_error_code(code.code()),
        });
    }
    Some(DeleteRecordsResponse::default().with_topics(topics))
}
