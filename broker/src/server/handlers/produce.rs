//! Produce: appends each partition's batches as raw bytes (validated header and CRC, offsets
//! assigned in place) on the partition's leader and answers per partition: acks=1 after the
//! leader's append, acks=all once the high watermark passed the batch (at most the request's
//! `timeout_ms`). acks=0 gets no response, as in Kafka.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::hosted_partition;
use super::str_bytes;
use crate::log::AppendOrigin;
use crate::partition::Acks;
use crate::server::{partition_error_code, record_errors, Broker};

/// Upper bound on a produce request's `timeout_ms` (how long acks=all may wait).
const MAX_TIMEOUT_MS: i32 = 300_000;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: ProduceRequest) -> Option<ProduceResponse> {
    let version = header.request_api_version;
    let acks = match request.acks {
        0 => Acks::None,
        1 => Acks::Leader,
        -1 => Acks::All,
        _ => return Some(reject_all(&request, ResponseError::InvalidRequiredAcks)),
    };
    // Kafka's rule: transactional records need the request's transactional id (checked on
    // each partition's first batch).
    if request.transactional_id.is_none() && has_transactional_records(&request) {
        return Some(reject_all(&request, ResponseError::TransactionalIdAuthorizationFailed));
    }
    let image = broker.controller.image();
    // Appends first, every partition; then acks=all waits for all of them at once (Kafka's
    // delayed produce), each until its high watermark passes the batch or the timeout.
    let mut appends = Vec::with_capacity(request.topic_data.len());
    for topic in &request.topic_data {
        let name: &str = &topic.name.0;
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            let result = hosted_partition(broker, &image, name, data.index)
                .map_err(|code| (code, None, vec![]))
                .and_then(|partition| {
                    let records = data.records.clone().unwrap_or_else(Bytes::new);
                    let (info, log_start_offset, leader_epoch) = partition
                        .append_in_epoch(&records, acks, AppendOrigin::Client)
                        .map_err(|e| (partition_error_code(&e), Some(e.to_string()), batch_record_errors(&e)))?;
                    Ok((info, log_start_offset, leader_epoch, partition))
                });
            match &result {
                Ok((info, ..)) => broker.metrics.record_in(name, info.bytes, info.record_count.max(0) as u64),
                Err((ResponseError::KafkaStorageError, ..)) => {
                    broker.metrics.log_storage_errors.with_label_values(&[name]).inc();
                }
                Err(_) => {}
            }
            partitions.push((data.index, result));
        }
        appends.push((topic.name.clone(), partitions));
    }
    let timeout = Duration::from_millis(request.timeout_ms.clamp(0, MAX_TIMEOUT_MS) as u64);
    let mut responses = Vec::with_capacity(appends.len());
    // KIP-951: brokers named as new leaders in NOT_LEADER_OR_FOLLOWER answers (v10+).
    let mut leaders: Vec<u64> = Vec::new();
    for (name, partitions) in appends {
        let waits = partitions.into_iter().map(|(index, result)| async move {
            let result = match result {
                Ok((info, log_start_offset, leader_epoch, partition)) if acks == Acks::All => partition
                    .wait_replicated(info.last_offset + 1, leader_epoch, timeout)
                    .await
                    .map(|()| (info, log_start_offset))
                    .map_err(|e| (partition_error_code(&e), Some(e.to_string()), vec![])),
                Ok((info, log_start_offset, _, _)) => Ok((info, log_start_offset)),
                Err(e) => Err(e),
            };
            (index, result)
        });
        let mut partition_responses = Vec::new();
        for (index, result) in futures_util::future::join_all(waits).await {
            let mut response = PartitionProduceResponse::default().with_index(index).with_base_offset(-1);
            match result {
                Ok((info, log_start_offset)) => {
                    response = response
                        .with_base_offset(info.first_offset)
                        .with_log_append_time_ms(info.log_append_time)
                        .with_log_start_offset(if version >= 5 { log_start_offset } else { -1 });
                }
                Err((code, message, record_errors)) => {
                    response = response.with_error_code(code.code());
                    if version >= 10 && code == ResponseError::NotLeaderOrFollower {
                        let (leader, epoch) = super::current_leader(&image, &name.0, index);
                        response = response.with_current_leader(
                            LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch),
                        );
                        if let Ok(id) = u64::try_from(leader.0) {
                            if !leaders.contains(&id) {
                                leaders.push(id);
                            }
                        }
                    }
                    if version >= 8 {
                        // KIP-467: clients fail only the named records and resend nothing.
                        response = response
                            .with_error_message(message.as_deref().map(str_bytes))
                            .with_record_errors(record_errors);
                    }
                }
            }
            partition_responses.push(response);
        }
        responses.push(TopicProduceResponse::default().with_name(name).with_partition_responses(partition_responses));
    }
    let node_endpoints = if version >= 10 {
        leaders
            .iter()
            .filter_map(|id| image.brokers.get(id))
            .map(|b| {
                NodeEndpoint::default()
                    .with_node_id(kafka_protocol::messages::BrokerId(b.node_id as i32))
                    .with_host(str_bytes(&b.host))
                    .with_port(b.port as i32)
                    .with_rack(b.rack.as_deref().map(str_bytes))
            })
            .collect()
    } else {
        Vec::new()
    };
    match acks {
        Acks::None => None,
        _ => Some(ProduceResponse::default().with_responses(responses).with_node_endpoints(node_endpoints)),
    }
}

/// The log's per-record errors in the response's shape.
fn batch_record_errors(error: &crate::partition::PartitionError) -> Vec<BatchIndexAndErrorMessage> {
    record_errors(error)
        .iter()
        .map(|e| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(e.batch_index)
                .with_batch_index_error_message(Some(str_bytes(&e.message)))
        })
        .collect()
}

/// Whether any partition's first batch is transactional (Kafka's `hasTransactionalRecords`).
fn has_transactional_records(request: &ProduceRequest) -> bool {
    request.topic_data.iter().flat_map(|t| &t.partition_data).any(|p| {
        p.records
            .as_ref()
            .and_then(|r| crate::log::BatchHeader::read(r).ok())
            .is_some_and(|h| h.attributes.is_transactional())
    })
}

fn reject_all(request: &ProduceRequest, code: ResponseError) -> ProduceResponse {
    let responses = request
        .topic_data
        .iter()
        .map(|topic| {
            let partitions = topic
                .partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                })
                .collect();
            TopicProduceResponse::default().with_name(topic.name.clone()).with_partition_responses(partitions)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}
