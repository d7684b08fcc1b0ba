//! Runnel broker library: the storage engine today; the Kafka protocol server, replication,
//! groups, transactions and transforms as the roadmap (`shared/DESIGN.md` §7) adds them.
//!
//! Layers are folders and dependencies flow one way:
//! `protocol ← log ← partition/replication ← {group, txn, controller, transform} ← server/http/cli`.

pub mod log;
