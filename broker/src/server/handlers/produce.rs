//! Produce: appends each partition's batches as raw bytes (validated header and CRC, offsets
//! assigned in place) and answers per partition. acks=0 gets no response, as in Kafka.

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::hosted_partition;
use super::str_bytes;
use crate::log::AppendOrigin;
use crate::partition::Acks;
use crate::server::{partition_error_code, record_errors, Broker};

pub async fn handle(broker: &Broker, header: &RequestHeader, request: ProduceRequest) -> Option<ProduceResponse> {
    let version = header.request_api_version;
    let acks = match request.acks {
        0 => Acks::None,
        1 => Acks::Leader,
        -1 => Acks::All,
        _ => return Some(reject_all(&request, ResponseError::InvalidRequiredAcks)),
    };
    if request.transactional_id.is_some() {
        return Some(reject_all(&request, ResponseError::TransactionalIdAuthorizationFailed));
    }
    let image = broker.controller.image();
    let mut responses = Vec::with_capacity(request.topic_data.len());
    let mut appended = false;
    for topic in &request.topic_data {
        let name: &str = &topic.name.0;
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            let mut response = PartitionProduceResponse::default().with_index(data.index).with_base_offset(-1);
            let result = hosted_partition(broker, &image, name, data.index)
                .map_err(|code| (code, None, vec![]))
                .and_then(|partition| {
                    let records = data.records.clone().unwrap_or_else(Bytes::new);
                    partition
                        .append_as_leader(&records, acks, AppendOrigin::Client)
                        .map_err(|e| (partition_error_code(&e), Some(e.to_string()), batch_record_errors(&e)))
                });
            match result {
                Ok((info, log_start_offset)) => {
                    appended = true;
                    broker.metrics.record_in(name, info.bytes, info.record_count.max(0) as u64);
                    response = response
                        .with_base_offset(info.first_offset)
                        .with_log_append_time_ms(info.log_append_time)
                        .with_log_start_offset(if version >= 5 { log_start_offset } else { -1 });
                }
                Err((code, message, record_errors)) => {
                    response = response.with_error_code(code.code());
                    if version >= 8 {
                        // KIP-467: clients fail only the named records and resend nothing.
                        response = response
                            .with_error_message(message.as_deref().map(str_bytes))
                            .with_record_errors(record_errors);
                    }
                }
            }
            partitions.push(response);
        }
        responses
            .push(TopicProduceResponse::default().with_name(topic.name.clone()).with_partition_responses(partitions));
    }
    if appended {
        broker.replicas.notify_append();
    }
    match acks {
        Acks::None => None,
        _ => Some(ProduceResponse::default().with_responses(responses)),
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
