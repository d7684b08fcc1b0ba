//! InitProducerId for idempotent producers (no transactional id): a fresh producer id per
//! call, epoch 0. Ids are unique on this node across restarts (seeded from the clock in
//! microseconds); cluster-wide allocation through the controller and sequence checking come
//! with the idempotence issue. Transactional ids are refused until transactions exist.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader};
use kafka_protocol::ResponseError;

use crate::server::Broker;

fn next_producer_id(node_id: u64) -> i64 {
    static NEXT: OnceLock<AtomicI64> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
        // Node id in the top bits keeps nodes apart; the clock keeps restarts apart.
        AtomicI64::new(((node_id as i64 & 0x3ff) << 52) | (micros & ((1 << 52) - 1)))
    });
    next.fetch_add(1, Ordering::Relaxed)
}

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: InitProducerIdRequest,
) -> Option<InitProducerIdResponse> {
    let response = InitProducerIdResponse::default();
    if request.transactional_id.is_some() {
        return Some(
            response
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        );
    }
    Some(response.with_producer_id(ProducerId(next_producer_id(broker.settings.node_id))).with_producer_epoch(0))
}
