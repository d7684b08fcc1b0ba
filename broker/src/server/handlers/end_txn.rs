//! EndTxn: commit or abort the producer's transaction on its coordinator. Answered once
//! PrepareCommit / PrepareAbort is replicated; the markers are written after (a read_committed
//! consumer sees the transaction once its marker is below a partition's high watermark).
//! Version 5+ is a client on transaction version 2 (KIP-890): the end bumps the producer's
//! epoch, and the answer carries the producer id and epoch it continues with.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, RequestHeader};

use crate::server::Broker;

/// The first EndTxn version of transaction version 2.
const TRANSACTION_V2_VERSION: i16 = 5;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: EndTxnRequest) -> Option<EndTxnResponse> {
    let client_version = if header.request_api_version >= TRANSACTION_V2_VERSION { 2 } else { 0 };
    let outcome = if broker.authorized(Operation::Write, ResourceType::TransactionalId, &request.transactional_id.0) {
        broker
            .txn
            .end_txn(
                &request.transactional_id.0,
                request.producer_id.0,
                request.producer_epoch,
                request.committed,
                client_version,
            )
            .await
    } else {
        Err(kafka_protocol::ResponseError::TransactionalIdAuthorizationFailed)
    };
    let response = match outcome {
        Ok((producer_id, producer_epoch)) => {
            EndTxnResponse::default().with_producer_id(ProducerId(producer_id)).with_producer_epoch(producer_epoch)
        }
        Err(code) => EndTxnResponse::default()
            .with_error_code(code.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    Some(response)
}
