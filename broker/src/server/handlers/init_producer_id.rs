//! InitProducerId. Without a transactional id (an idempotent producer): a fresh producer id,
//! epoch 0, from this node's block of cluster-wide ids (`txn::ProducerIds`), as Kafka answers
//! (a client bumping its epoch after OUT_OF_ORDER_SEQUENCE_NUMBER, KIP-360, gets a new id too).
//! With one: the transaction coordinator of that id answers (`TxnCoordinator::init_producer_id`:
//! a new id, or the id's producer with its epoch bumped, fencing the previous producer).

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: InitProducerIdRequest,
) -> Option<InitProducerIdResponse> {
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    // Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
    // cluster or WRITE on some topic.
    let outcome = match &request.transactional_id {
        Some(id) if !broker.authorized(Operation::Write, ResourceType::TransactionalId, &id.0) => {
            Err(ResponseError::TransactionalIdAuthorizationFailed)
        }
        None if !broker.authorized_cluster(Operation::IdempotentWrite)
            && !broker.authorized_any(Operation::Write, ResourceType::Topic) =>
        {
            Err(ResponseError::ClusterAuthorizationFailed)
        }
        Some(id) => {
            let expected = (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
            broker.txn.init_producer_id(&id.0, request.transaction_timeout_ms, expected).await
        }
        None => broker.txn.producer_ids.next(&broker.controller).await.map(|id| (id, 0)).map_err(|e| {
            tracing::warn!(error = %e, "InitProducerId");
            ResponseError::CoordinatorLoadInProgress
        }),
    };
    Some(match outcome {
        Ok((id, epoch)) => response.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        Err(code) => response.with_error_code(code.code()),
    })
}
