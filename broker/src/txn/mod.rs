//! Producer identity and (next) transactions: cluster-wide producer ids allocated in blocks
//! through the metadata quorum (`producer_ids`). The per-partition producer state lives in the
//! log (`log::producer_state`).

pub mod producer_ids;

pub use self::producer_ids::ProducerIds;
