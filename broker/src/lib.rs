//! Runnel broker library: the storage engine, the partition layer, the metadata quorum,
//! consumer groups, the Kafka protocol server, the HTTP API and metrics, the node that composes
//! them, WASM transforms (through `runnel_runtime`), idempotent and transactional producers
//! (`txn`: producer ids and the transaction coordinator), and the `runnel` CLI.
//!
//! Layers are folders and dependencies flow one way:
//! `log ← partition/replication ← controller ← group ← txn ← transform ← server ← http ← node`, with
//! `metrics` written by `server` and `http`, `config` read by `node` and `main`; `cli` talks to a node over HTTP only.
//! `security` (listeners, TLS, SASL, SCRAM) is a leaf every layer may use.
//! `peer` (the Kafka client to the other brokers, addresses from the controller's image) sits
//! under `transform`, `server` and `http`; the replica fetchers frame their requests with it.

pub mod cli;
pub mod config;
pub mod controller;
pub mod group;
pub mod http;
pub mod log;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod peer;
pub mod replication;
pub mod security;
pub mod server;
#[cfg(test)]
mod testing;
pub mod transform;
pub mod txn;
pub mod validator;
