//! Runnel broker library: the storage engine, the partition layer, the metadata quorum, the
//! Kafka protocol server and the node that composes them. Groups, transactions, replication,
//! transforms and HTTP come as the roadmap (`shared/DESIGN.md` §7) adds them.
//!
//! Layers are folders and dependencies flow one way:
//! `log ← partition ← controller ← server ← node`, with `config` read by `node` and `main`.

pub mod cli;
pub mod config;
pub mod controller;
pub mod group;
pub mod http;
pub mod log;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod server;
