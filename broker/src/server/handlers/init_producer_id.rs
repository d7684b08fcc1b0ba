//! InitProducerId for idempotent producers (no transactional id): a fresh producer id per
//! call, epoch 0, from this node's block of cluster-wide ids (`txn::ProducerIds`), as Kafka
//! answers a request without a transactional id (a client bumping its epoch after
//! OUT_OF_ORDER_SEQUENCE_NUMBER, KIP-360, gets a new id too). Transactional ids are refused
//! until the transaction coordinator exists.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: InitProducerIdRequest,
) -> Option<InitProducerIdResponse> {
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    if request.transactional_id.is_some() {
        return Some(response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()));
    }
    match broker.producer_ids.next(&broker.controller).await {
        Ok(id) => Some(response.with_producer_id(ProducerId(id)).with_producer_epoch(0)),
        Err(e) => {
            tracing::warn!(error = %e, "InitProducerId");
            Some(response.with_error_code(ResponseError::CoordinatorLoadInProgress.code()))
        }
    }
}
