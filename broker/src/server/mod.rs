//! The Kafka protocol server: TCP accept, framing, per-connection in-order request handling,
//! dispatch by API key to one handler file per Kafka API (`handlers/`).
//!
//! Invariants: a connection handles one request at a time and answers in request order (as
//! Kafka does: a pipelining client's requests wait in the socket buffer); a frame larger than
//! `socket.request.max.bytes`, a malformed header or body, an unknown API key, or an
//! unsupported version (other than ApiVersions, which answers UNSUPPORTED_VERSION as the spec
//! prescribes) closes only that connection. No handler panics on client input.
//! Error codes are mapped from typed errors in exactly one place: `errors.rs`.

mod connection;
mod errors;
pub mod handlers;
mod response;
pub mod versions;

use std::sync::Arc;

pub use self::connection::{as_peer, client_host, serve};
pub use self::errors::{controller_error_code, log_error_code, offset_error_code, partition_error_code};
use crate::controller::{Controller, MetadataImage};
use crate::log::LogConfig;
use crate::partition::ReplicaManager;

/// Settings the protocol handlers need.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub node_id: u64,
    pub cluster_id: String,
    /// `socket.request.max.bytes`.
    pub request_max_bytes: usize,
    /// `num.partitions` for auto-created topics and CreateTopics with -1.
    pub default_partitions: u32,
    /// `default.replication.factor`.
    pub default_replication_factor: u16,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// Broker-level defaults of every topic config.
    pub log_defaults: LogConfig,
}

/// Everything a request handler can reach.
pub struct Broker {
    pub settings: ServerSettings,
    pub controller: Controller,
    pub replicas: Arc<ReplicaManager>,
    /// Consumer groups and committed offsets.
    pub groups: Arc<crate::group::GroupCoordinator>,
    /// Deployed WASM transforms running on this node.
    pub transforms: Arc<crate::transform::TransformManager>,
    /// Prometheus metrics (request latency per API, bytes in/out per topic, ...).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Opens/closes partitions to match the current image; handlers call it after proposing a
    /// change so the response reflects it.
    pub reconcile: Box<dyn Fn(&MetadataImage) + Send + Sync>,
}

impl Broker {
    /// Makes this node's partitions match the latest image now.
    pub fn reconcile_now(&self) {
        (self.reconcile)(&self.controller.image());
    }

    /// The effective log config of a topic: broker defaults plus the topic's overrides.
    pub fn topic_log_config(&self, overrides: &std::collections::BTreeMap<String, String>) -> LogConfig {
        let mut config = self.settings.log_defaults.clone();
        for (name, value) in overrides {
            if let Err(e) = config.set(name, value) {
                tracing::warn!(error = %e, "ignoring an invalid stored topic config");
            }
        }
        config
    }
}
