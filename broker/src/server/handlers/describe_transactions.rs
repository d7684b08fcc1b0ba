//! DescribeTransactions: the state of transactional ids this node coordinates
//! (`kafka-transactions.sh describe`). An id coordinated elsewhere answers NOT_COORDINATOR, an
//! unknown one TRANSACTIONAL_ID_NOT_FOUND, as Kafka does; the partitions of topics the client
//! may not describe are left out, as Kafka leaves them out.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, RequestHeader, TopicName,
};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DescribeTransactionsRequest,
) -> Option<DescribeTransactionsResponse> {
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let entry = TransactionState::default().with_transactional_id(id.clone()).with_producer_id(ProducerId(-1));
            if !broker.authorized(Operation::Describe, ResourceType::TransactionalId, &id.0) {
                return entry.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            match broker.txn.describe(&id.0) {
                Ok(Some(t)) => {
                    let mut topics: Vec<TopicData> = Vec::new();
                    // Kafka leaves out the partitions of topics the client may not describe.
                    let mut describable: Option<(&str, bool)> = None;
                    for (topic, partition) in &t.partitions {
                        let may = match describable {
                            Some((last, may)) if last == topic.as_str() => may,
                            _ => broker.authorized(Operation::Describe, ResourceType::Topic, topic),
                        };
                        describable = Some((topic.as_str(), may));
                        if !may {
                            continue;
                        }
                        match topics.last_mut() {
                            Some(d) if *d.topic.0 == **topic => d.partitions.push(*partition),
                            _ => topics.push(
                                TopicData::default()
                                    .with_topic(TopicName(str_bytes(topic)))
                                    .with_partitions(vec![*partition]),
                            ),
                        }
                    }
                    entry
                        .with_transaction_state(str_bytes(t.state.name()))
                        .with_transaction_timeout_ms(t.timeout_ms)
                        .with_transaction_start_time_ms(t.start_ms)
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_producer_epoch(t.producer_epoch)
                        .with_topics(topics)
                }
                Ok(None) => entry.with_error_code(ResponseError::TransactionalIdNotFound.code()),
                Err(code) => entry.with_error_code(code.code()),
            }
        })
        .collect();
    Some(DescribeTransactionsResponse::default().with_transaction_states(states))
}
