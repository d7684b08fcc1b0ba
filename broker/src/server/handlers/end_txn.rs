//! EndTxn: commit or abort the producer's transaction on its coordinator. Answered once
//! PrepareCommit / PrepareAbort is replicated; the markers are written after (a read_committed
//! consumer sees the transaction once its marker is below a partition's high watermark).

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, RequestHeader};

use crate::server::Broker;

pub async fn handle(broker: &Broker, _header: &RequestHeader, request: EndTxnRequest) -> Option<EndTxnResponse> {
    let outcome = broker
        .txn
        .end_txn(&request.transactional_id.0, request.producer_id.0, request.producer_epoch, request.committed)
        .await;
    Some(EndTxnResponse::default().with_error_code(outcome.err().map_or(0, |c| c.code())))
}
