//! AddPartitionsToTxn (client versions 0-3): the partitions join the producer's transaction on
//! its coordinator (`txn::TxnCoordinator::add_partitions`). Partitions the metadata does not
//! know get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka
//! answers; a coordinator error applies to every partition.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: AddPartitionsToTxnRequest,
) -> Option<AddPartitionsToTxnResponse> {
    let image = broker.controller.image();
    let mut wanted = Vec::new();
    let mut unknown = false;
    for topic in &request.v3_and_below_topics {
        let known = image.topic(&topic.name.0);
        for &p in &topic.partitions {
            unknown |= known.is_none_or(|t| p < 0 || p as usize >= t.partitions.len());
            wanted.push((topic.name.0.to_string(), p));
        }
    }
    let outcome = if unknown {
        Err(ResponseError::OperationNotAttempted)
    } else {
        broker
            .txn
            .add_partitions(
                &request.v3_and_below_transactional_id.0,
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
                &wanted,
            )
            .await
    };
    let results = request
        .v3_and_below_topics
        .iter()
        .map(|topic| {
            let known = image.topic(&topic.name.0);
            let partitions = topic
                .partitions
                .iter()
                .map(|&p| {
                    let code = match outcome {
                        Ok(()) => 0,
                        Err(ResponseError::OperationNotAttempted)
                            if known.is_none_or(|t| p < 0 || p as usize >= t.partitions.len()) =>
                        {
                            ResponseError::UnknownTopicOrPartition.code()
                        }
                        Err(code) => code.code(),
                    };
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(topic.name.clone()).with_results_by_partition(partitions)
        })
        .collect();
    Some(AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results))
}
