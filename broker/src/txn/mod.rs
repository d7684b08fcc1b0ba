//! Producer identity and transactions (KIP-98): cluster-wide producer ids allocated in blocks
//! through the metadata quorum (`producer_ids`), and the transaction coordinator over the
//! `__transaction_state` topic (`coordinator`, with Kafka's record schemas in `schema`). The
//! per-partition producer state, last stable offset and aborted-transaction index live in the
//! log (`log::producer_state`, `log::txn_index`).

pub mod coordinator;
pub mod producer_ids;
pub mod schema;

pub use self::coordinator::{MarkerRequest, MarkerSink, TxnCoordinator, TxnSettings, TRANSACTION_STATE_TOPIC};
pub use self::producer_ids::ProducerIds;
