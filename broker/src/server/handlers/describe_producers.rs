//! DescribeProducers: the producers a partition's leader knows, from the log's producer state
//! (epoch, last sequence and timestamp, coordinator epoch, first offset of the open
//! transaction), for `kafka-transactions.sh describe-producers` and `find-hanging`/`abort`.

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId, RequestHeader};

use super::{hosted_partition, str_bytes};
use crate::security::acl::{Operation, ResourceType};
use crate::server::{partition_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DescribeProducersRequest,
) -> Option<DescribeProducersResponse> {
    let image = broker.controller.image();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    let response = PartitionResponse::default().with_partition_index(index);
                    let producers = if broker.authorized(Operation::Read, ResourceType::Topic, &topic.name.0) {
                        hosted_partition(broker, &image, &topic.name.0, index)
                            .and_then(|p| p.producers().map_err(|e| partition_error_code(&e)))
                    } else {
                        Err(kafka_protocol::ResponseError::TopicAuthorizationFailed)
                    };
                    match producers {
                        Ok(producers) => response.with_active_producers(
                            producers
                                .iter()
                                .map(|e| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(e.producer_id))
                                        .with_producer_epoch(e.epoch as i32)
                                        .with_last_sequence(e.last_seq())
                                        .with_last_timestamp(e.last_timestamp)
                                        .with_coordinator_epoch(e.coordinator_epoch)
                                        .with_current_txn_start_offset(e.current_txn_first_offset.unwrap_or(-1))
                                })
                                .collect(),
                        ),
                        Err(code) => {
                            response.with_error_code(code.code()).with_error_message(Some(str_bytes(&code.to_string())))
                        }
                    }
                })
                .collect();
            TopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions)
        })
        .collect();
    Some(DescribeProducersResponse::default().with_topics(topics))
}
