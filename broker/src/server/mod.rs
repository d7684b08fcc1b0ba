//! The Kafka protocol server: TCP accept, framing, per-connection in-order request handling,
//! dispatch by API key to one handler file per Kafka API (`handlers/`), and the replica
//! placement of the partitions handlers create (`placement`).
//!
//! Invariants: a connection handles one request at a time and answers in request order (as
//! Kafka does: a pipelining client's requests wait in the socket buffer); a frame larger than
//! `socket.request.max.bytes`, a malformed header or body, an unknown API key, or an
//! unsupported version (other than ApiVersions, which answers UNSUPPORTED_VERSION as the spec
//! prescribes) closes only that connection. No handler panics on client input.
//! What clients can make the listener hold is bounded (`ConnectionLimits`): connections in all
//! and per address, idle time, and the bytes of requests being read or handled, which are taken
//! from one pool before a frame's body is read (no buffer is sized by a length the client
//! declared before its bytes arrive).
//! Error codes are mapped from typed errors in exactly one place: `errors.rs`.

mod connection;
mod errors;
pub mod handlers;
pub mod listeners;
pub mod placement;
mod response;
mod session;
pub mod versions;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use self::connection::{serve, AcceptErrors};
pub use self::errors::{
    controller_error_code, log_error_code, offset_error_code, partition_error_code, reassignment_error_code,
    record_errors,
};
pub use self::session::{
    as_client, client_host, current_client, listener_name, principal, ClientContext, ListenerSecurity,
};
use crate::controller::{Controller, MetadataImage};
use crate::log::{ConfigError, LogConfig};
use crate::partition::ReplicaManager;
use crate::security::acl::{Operation, ResourceType};

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
    /// Bounds on connections and on the request bytes they hold.
    pub connection_limits: ConnectionLimits,
    /// `fetch.max.bytes`: caps a Fetch request's `max_bytes`.
    pub fetch_max_bytes: usize,
    /// The node's one log directory (Kafka's `log.dirs`), as DescribeLogDirs names it.
    pub data_dir: std::path::PathBuf,
    /// `replica.selector.class`: whether a leader sends consumers to a replica in their rack.
    pub replica_selector: crate::config::ReplicaSelector,
    /// Where this node serves HTTP (`host:port`), as other nodes reach it: DescribeConfigs shows
    /// it as `runnel.http.address`, so a node's HTTP API can ask the others (transforms
    /// cluster-wide). `None` when the node serves no HTTP.
    pub http_address: Option<String>,
    /// `metrics.aggregate` (Redpanda's `aggregate_metrics`): `/metrics` sums the per-partition
    /// series per topic instead of writing one per partition.
    pub metrics_aggregate: bool,
    /// `max.broker.partitions` (KIP-578): partition replicas one broker may host before
    /// CreateTopics and CreatePartitions refuse more (`controller::partition_limits`).
    pub max_broker_partitions: u64,
    /// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
    pub authorizer: crate::security::acl::AuthorizerSettings,
    /// What the node exposes and how it is protected (`/v1/cluster`).
    pub security: crate::security::SecurityReport,
    /// `inter.broker.listener.name`: the only listener an Envelope (a request another broker
    /// forwards for its client) is accepted on.
    pub inter_broker_listener: std::sync::Arc<str>,
    /// REST Proxy consumer instances this node holds at once, and per principal.
    pub http_consumer_instances_max: usize,
    pub http_consumer_instances_max_per_principal: usize,
}

/// Kafka's bounds on what clients can make a broker hold. Where Kafka's default is unbounded,
/// Runnel's is a bound no ordinary client reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `queued.max.request.bytes`: bytes of requests being read or handled, over all
    /// connections (Kafka's memory pool; Kafka's default -1 is unbounded).
    pub queued_max_request_bytes: usize,
    /// `max.connections`: at the limit, accepting waits until a connection closes.
    pub max_connections: usize,
    /// `max.connections.per.ip`: a connection beyond it is closed at once.
    pub max_connections_per_ip: usize,
    /// `connections.max.idle.ms`: a connection that reads and writes nothing this long is closed.
    pub connections_max_idle_ms: u64,
    /// `max.connection.creation.rate` (KIP-612): new connections per second over the
    /// listeners other than the inter-broker one; beyond it accepting waits (`None`: unbounded,
    /// Kafka's default).
    pub max_connection_creation_rate: Option<u32>,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            // Five requests of the largest default size (socket.request.max.bytes, 100 MiB), or
            // hundreds of ordinary ones of about 1 MB.
            queued_max_request_bytes: 512 << 20,
            // Kafka: unbounded (2147483647). Far above what clients of one node open, below the
            // file descriptors a server is usually given.
            max_connections: 10_000,
            max_connections_per_ip: 10_000,
            connections_max_idle_ms: 600_000,
            max_connection_creation_rate: None,
        }
    }
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
    pub validators: Arc<crate::validator::Validators>,
    /// Uploaded consumer group assignors (`group.remote.assignor`), loaded on this node.
    pub assignors: Arc<crate::group::wasm_assignor::WasmAssignors>,
    /// Prometheus metrics (request latency per API, bytes in/out per topic, ...).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The follower fetchers of this node's follower partitions.
    pub fetchers: Arc<crate::replication::fetcher::Fetchers>,
    /// Kafka connections to the other brokers (HTTP and transforms reach leaders elsewhere).
    pub peers: Arc<crate::peer::Peers>,
    /// The transaction coordinator (and this node's block of cluster-wide producer ids).
    pub txn: Arc<crate::txn::TxnCoordinator>,
    /// Passwords verified against the SCRAM users (SASL/PLAIN and HTTP Basic share them).
    pub passwords: Arc<crate::security::passwords::PasswordChecks>,
    /// Opens/closes partitions to match the current image; handlers call it after proposing a
    /// change so the response reflects it. Blocking (it opens files): call it on a blocking
    /// thread, as `reconcile_now` does.
    pub reconcile: Arc<dyn Fn(&MetadataImage) + Send + Sync>,
}

impl Broker {
    /// Whether the client of the request being handled may do `operation` on resource `name`
    /// of `kind` (the ACLs of the current image; always, without an authorizer or for the
    /// node's own calls).
    pub fn authorized(&self, operation: Operation, kind: ResourceType, name: &str) -> bool {
        let settings = &self.settings.authorizer;
        if !settings.enabled {
            return true;
        }
        let Some(client) = current_client() else { return true };
        // Canonical: a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d, which an ACL
        // naming a.b.c.d (as Java's getHostAddress gives it) would never match.
        let host = client.peer.ip().to_canonical().to_string();
        let allowed =
            settings.authorize(&self.controller.image().acls, &client.principal, &host, operation, kind, name);
        if !allowed {
            tracing::debug!(principal = %client.principal, %host, %operation, %kind, name, "denied");
        }
        allowed
    }

    /// Which topics the client of the request being handled may DESCRIBE, as a check that
    /// reads the ACLs of the moment it is asked (a regex subscription re-resolved later, when
    /// topics or ACLs change, asks again). `None`: every topic (no authorizer, a node's call).
    pub fn topic_access(&self) -> Option<crate::group::consumer::TopicAccess> {
        if !self.settings.authorizer.enabled {
            return None;
        }
        let client = current_client()?;
        let (controller, settings) = (self.controller.clone(), self.settings.authorizer.clone());
        let host = client.peer.ip().to_canonical().to_string();
        Some(crate::group::consumer::TopicAccess(std::sync::Arc::new(move |name: &str| {
            let acls = controller.image().acls.clone();
            settings.authorize(&acls, &client.principal, &host, Operation::Describe, ResourceType::Topic, name)
        })))
    }

    /// [`Broker::authorized`] on the cluster resource.
    pub fn authorized_cluster(&self, operation: Operation) -> bool {
        self.authorized(operation, ResourceType::Cluster, crate::security::acl::CLUSTER_NAME)
    }

    /// Whether the client may do `operation` on some resource of `kind` (idempotent producers:
    /// WRITE on any topic).
    pub fn authorized_any(&self, operation: Operation, kind: ResourceType) -> bool {
        let settings = &self.settings.authorizer;
        if !settings.enabled {
            return true;
        }
        let Some(client) = current_client() else { return true };
        // Canonical: a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d, which an ACL
        // naming a.b.c.d (as Java's getHostAddress gives it) would never match.
        let host = client.peer.ip().to_canonical().to_string();
        settings.authorize_any(&self.controller.image().acls, &client.principal, &host, operation, kind)
    }

    /// Makes this node's partitions match the latest image now (on the blocking pool: opening
    /// thousands of new partitions must not hold up an async worker), and returns once they do.
    pub async fn reconcile_now(&self) {
        let (reconcile, image) = (self.reconcile.clone(), self.controller.image());
        if let Err(e) = tokio::task::spawn_blocking(move || reconcile(&image)).await {
            tracing::error!(error = %e, "reconcile failed");
        }
    }

    /// The effective log config of a topic: broker defaults plus the topic's overrides.
    pub fn topic_log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        topic_log_config(&self.settings.log_defaults, overrides)
    }
}

/// The one builder of a topic's effective [`LogConfig`] from the broker defaults and the
/// topic's overrides in the image (partitions are opened with it, DescribeConfigs and HTTP
/// show it). Overrides were validated before they were committed; one that no longer parses
/// (a stored value from another version) is skipped with a warning rather than keeping the
/// topic's partitions closed.
pub fn topic_log_config(defaults: &LogConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let mut config = defaults.clone();
    for (name, value) in overrides {
        if let Err(e) = config.set(name, value) {
            tracing::warn!(error = %e, "ignoring an invalid stored topic config");
        }
    }
    config
}

/// [`topic_log_config`] for overrides a client asks for (CreateTopics, AlterConfigs): the first
/// invalid one is an error, nothing is skipped.
pub fn validated_topic_log_config(
    defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<LogConfig, ConfigError> {
    defaults.clone().with_overrides(overrides.iter().map(|(name, value)| (name.as_str(), value.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_log_config_applies_overrides_over_defaults_and_skips_an_invalid_stored_one() {
        // Proves the one builder of a topic's config: overrides win over broker defaults, and a
        // stored override that no longer parses is skipped instead of failing the topic.
        let defaults = LogConfig { retention_ms: 1_000, segment_bytes: 1 << 20, ..LogConfig::default() };
        let overrides: BTreeMap<String, String> = [("retention.ms", "5000"), ("segment.ms", "not a number")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = topic_log_config(&defaults, &overrides);
        assert_eq!(config.retention_ms, 5_000);
        assert_eq!(config.segment_bytes, 1 << 20);
        assert_eq!(config.segment_ms, defaults.segment_ms);
        assert!(validated_topic_log_config(&defaults, &overrides).is_err(), "a client's invalid override is an error");
        let valid: BTreeMap<String, String> = [("retention.ms".to_string(), "5000".to_string())].into();
        assert_eq!(validated_topic_log_config(&defaults, &valid).expect("valid"), topic_log_config(&defaults, &valid));
    }
}
