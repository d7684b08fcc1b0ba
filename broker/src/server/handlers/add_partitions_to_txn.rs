//! AddPartitionsToTxn. Client versions 0-3: the partitions join the producer's transaction on
//! its coordinator (`txn::TxnCoordinator::add_partitions`). Partitions the metadata does not
//! know get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka
//! answers; a coordinator error applies to every partition. Versions 4-5 (KIP-890, sent by
//! partition leaders): a batch of transactions, each either verified (`verify_only`: are these
//! partitions in its ongoing transaction? `TxnCoordinator::verify_partitions`) or added.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, RequestHeader, TopicName};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: AddPartitionsToTxnRequest,
) -> Option<AddPartitionsToTxnResponse> {
    if header.request_api_version >= 4 {
        // The batch form comes from partition leaders and coordinators (Kafka: CLUSTER_ACTION).
        if !broker.authorized_cluster(Operation::ClusterAction) {
            return Some(
                AddPartitionsToTxnResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code()),
            );
        }
        return Some(handle_batch(broker, request).await);
    }
    let image = broker.controller.image();
    let mut wanted = Vec::new();
    let mut unknown = false;
    // Kafka: WRITE on the transactional id, then WRITE on each topic (a topic refused fails it;
    // the others are not attempted).
    let txn_denied =
        !broker.authorized(Operation::Write, ResourceType::TransactionalId, &request.v3_and_below_transactional_id.0);
    let denied_topics: Vec<&str> = request
        .v3_and_below_topics
        .iter()
        .map(|t| &*t.name.0)
        .filter(|t| !broker.authorized(Operation::Write, ResourceType::Topic, t))
        .collect();
    for topic in &request.v3_and_below_topics {
        let known = image.topic(&topic.name.0);
        for &p in &topic.partitions {
            unknown |= known.is_none_or(|t| p < 0 || p as usize >= t.partitions.len());
            wanted.push((topic.name.0.to_string(), p));
        }
    }
    let outcome = if txn_denied {
        Err(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !denied_topics.is_empty() || unknown {
        Err(ResponseError::OperationNotAttempted)
    } else {
        broker
            .txn
            .add_partitions(
                &request.v3_and_below_transactional_id.0,
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
                &wanted,
                0,
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
                        Err(ResponseError::OperationNotAttempted) if denied_topics.contains(&&*topic.name.0) => {
                            ResponseError::TopicAuthorizationFailed.code()
                        }
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

/// The broker-to-broker form: every transaction of the batch answered on its own.
async fn handle_batch(broker: &Broker, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let image = broker.controller.image();
    let mut results = Vec::with_capacity(request.transactions.len());
    for txn in &request.transactions {
        let wanted: Vec<(String, i32)> =
            txn.topics.iter().flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p))).collect();
        let known = |(topic, p): &(String, i32)| {
            image.topic(topic).is_some_and(|t| *p >= 0 && (*p as usize) < t.partitions.len())
        };
        let verdicts: Vec<((String, i32), i16)> = if !wanted.iter().all(known) {
            let code = |p: &(String, i32)| {
                if known(p) {
                    ResponseError::OperationNotAttempted.code()
                } else {
                    ResponseError::UnknownTopicOrPartition.code()
                }
            };
            wanted.iter().map(|p| (p.clone(), code(p))).collect()
        } else if txn.verify_only {
            match broker.txn.verify_partitions(&txn.transactional_id.0, txn.producer_id.0, txn.producer_epoch, &wanted)
            {
                Ok(verdicts) => verdicts.into_iter().map(|(p, v)| (p, v.err().map_or(0, |e| e.code()))).collect(),
                Err(e) => wanted.iter().map(|p| (p.clone(), e.code())).collect(),
            }
        } else {
            let outcome = broker
                .txn
                // v4+ comes from a partition leader (or group coordinator) adding for a
                // transaction version 2 client.
                .add_partitions(&txn.transactional_id.0, txn.producer_id.0, txn.producer_epoch, &wanted, 2)
                .await;
            let code = outcome.err().map_or(0, |e| e.code());
            wanted.iter().map(|p| (p.clone(), code)).collect()
        };
        let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
        for ((topic, partition), code) in verdicts {
            let result = AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(partition)
                .with_partition_error_code(code);
            match topics.last_mut() {
                Some(t) if *t.name.0 == *topic => t.results_by_partition.push(result),
                _ => topics.push(
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(TopicName(str_bytes(&topic)))
                        .with_results_by_partition(vec![result]),
                ),
            }
        }
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id.clone())
                .with_topic_results(topics),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}
