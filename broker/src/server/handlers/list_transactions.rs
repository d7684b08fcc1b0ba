//! ListTransactions (v0-2): the transactional ids this node coordinates, filtered by state,
//! producer id, duration (v1: open at least this long) and a regular expression on the id
//! (v2), for `kafka-transactions.sh list` (which asks every broker). Unknown state names are
//! echoed in `unknown_state_filters`.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, RequestHeader, TransactionalId,
};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::log::now_ms;
use crate::server::Broker;
use crate::txn::schema::TxnState;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: ListTransactionsRequest,
) -> Option<ListTransactionsResponse> {
    let response = ListTransactionsResponse::default();
    let pattern = match request.transactional_id_pattern.as_deref().filter(|p| !p.is_empty()) {
        Some(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
            Ok(re) => Some(re),
            Err(_) => return Some(response.with_error_code(ResponseError::InvalidRegularExpression.code())),
        },
        None => None,
    };
    let unknown: Vec<_> = request.state_filters.iter().filter(|f| TxnState::from_name(f).is_none()).cloned().collect();
    let now = now_ms();
    let states = broker
        .txn
        .list()
        .into_iter()
        .filter(|t| t.producer_id >= 0)
        .filter(|t| request.state_filters.is_empty() || request.state_filters.iter().any(|f| &**f == t.state.name()))
        .filter(|t| {
            request.producer_id_filters.is_empty() || request.producer_id_filters.iter().any(|p| p.0 == t.producer_id)
        })
        .filter(|t| request.duration_filter < 0 || (t.start_ms >= 0 && now - t.start_ms >= request.duration_filter))
        .filter(|t| pattern.as_ref().is_none_or(|re| re.is_match(&t.transactional_id)))
        .filter(|t| broker.authorized(Operation::Describe, ResourceType::TransactionalId, &t.transactional_id))
        .map(|t| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(&t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(str_bytes(t.state.name()))
        })
        .collect();
    Some(response.with_unknown_state_filters(unknown).with_transaction_states(states))
}
