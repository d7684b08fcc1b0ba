//! The metadata quorum: cluster metadata (brokers, topics, partitions, configs) as a replicated log
//! of `MetadataRecord`s, applied on every node to a `MetadataImage` the rest of the broker reacts
//! to. Built on openraft (storage v2); a single node is a quorum of one. A node is a voter
//! (`QuorumRole::Voter`, Kafka's `process.roles=broker,controller`) or an observer
//! (`QuorumRole::Observer`, `process.roles=broker`): an openraft learner that asks the active
//! controller to add it to the membership, then receives every committed entry and snapshot like a
//! voter, but never votes, never stands for election and never counts toward a commit.
//!
//! Owns: everything under `data_dir/metadata/` or the configured `metadata.log.dir` (raft log,
//! vote, committed hint, snapshot, lock file) and the raft RPC listener. Files: `record` (the record vocabulary), `image` (the image and
//! the deterministic apply), `log_store` / `state_machine` (openraft storage), `disk` (frames,
//! atomic writes, the directory lock), `network` / `server` (TCP RPCs), `raft_types`.
//! Invariant: the image only ever reflects committed entries, applied in log order; every
//! acknowledged proposal is durable on a quorum (fsync before acknowledging an append). Running
//! out of descriptors or disk space stalls the quorum's writes until the resource is back, never
//! fails them (`disk::Transient`): openraft stops for good on a storage error. openraft
//! types never cross this module's public API: the broker sees `Controller`, records, images and
//! `ControllerError` only. The voters are the configured ones: an observer joining (or
//! rejoining) never changes them. This module must not touch partition data or client connections.

mod disk;
pub mod election;
mod error;
mod image;
mod lifecycle;
mod log_store;
mod network;
pub mod partition_limits;
mod raft_types;
mod record;
mod server;
mod state_machine;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, InitializeError, RaftError};
use openraft::{BasicNode, RaftMetrics, SnapshotPolicy};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use self::error::{ControllerError, RaftFailure};

/// The internal topic holding committed offsets and group metadata (the group coordinator's).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The internal topic of transaction states (the transaction coordinator's).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Whether `topic` is a coordinator's own topic (Kafka's internal topics): created by the
/// broker, written only by its coordinator, exempt from the per-broker partition bound.
pub fn is_coordinator_topic(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TRANSACTION_STATE_TOPIC
}
pub use self::image::{BrokerInfo, MetadataImage, PartitionImage, TopicImage};
pub use self::network::RpcError;
pub use self::record::{
    AclEntry, ApplyOutcome, AssignorImage, AssignorSpec, AuditEntry, DeliveryMode, ErrorPolicy, HttpToken,
    HttpTokenKind, ListenerEndpoint, MetadataRecord, ModuleBytes, NodeId, ReplicaAssignment, StartPosition,
    TransformImage, TransformSpec, ValidatorFailure, ValidatorImage, ValidatorSpec, COMMIT_INTERVAL_MS_DEFAULT,
    STATE_BYTES_MAX_DEFAULT,
};

use self::disk::{DirLock, StoreError, Transient};
use self::lifecycle::Leases;
use self::log_store::LogStore;
use self::network::{ConnPolicy, ForwardError, NetworkFactory, PeerPool, RpcRequest, RpcResponse};
use self::raft_types::Raft;
use self::state_machine::StateMachine;

/// File name of the raft log inside `data_dir/metadata/` (for crash tests and tooling).
pub const METADATA_LOG_FILE: &str = log_store::LOG_FILE;

/// `broker.session.timeout.ms`. Kafka's default is 9 s; ours is short enough that a leader killed
/// without warning is replaced within about two seconds (the lease, one decision tick, and the
/// client's metadata refresh), and five times the default heartbeat interval, so a busy node is
/// not fenced for one late beat (and a stalled controller forgives every lease, see
/// `lifecycle`).
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: u64 = 1000;
/// `broker.heartbeat.interval.ms` (Kafka: 2 s).
pub const DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS: u64 = 200;

/// Partition assignments (plus one per record) in one `MetadataRecord::Batch`: about 2 MB of
/// JSON at most for three replicas, far below the RPC frame bound, and a commit that followers
/// apply in milliseconds.
const BATCH_WEIGHT_MAX: usize = 100_000;

/// Cuts `records` into consecutive batches of at most `BATCH_WEIGHT_MAX` weight (a record
/// heavier than that goes alone).
fn batches(records: Vec<MetadataRecord>) -> Vec<Vec<MetadataRecord>> {
    let weight = |r: &MetadataRecord| match r {
        MetadataRecord::CreateTopic { partitions, .. } => 1 + partitions.len(),
        MetadataRecord::CreatePartitions { new_partitions, .. } => 1 + new_partitions.len(),
        _ => 1,
    };
    let mut batches: Vec<Vec<MetadataRecord>> = Vec::new();
    let mut current_weight = 0;
    for record in records {
        let w = weight(&record);
        match batches.last_mut() {
            Some(last) if current_weight + w <= BATCH_WEIGHT_MAX => {
                current_weight += w;
                last.push(record);
            }
            _ => {
                current_weight = w;
                batches.push(vec![record]);
            }
        }
    }
    batches
}

/// Pause between retries while the cluster has no (reachable) leader.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// Upper bound of one attempt of an observer to join through one voter (a paused voter must not
/// hold the join up for the whole start timeout).
const JOIN_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound of one read-index attempt while a starting node catches up: the leader its
/// metrics name may be paused (SIGSTOP: its socket accepts and never answers) while the others
/// elect a new one, which the next attempt then asks.
const READY_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `shutdown` waits for the state machine task to release the metadata directory.
const STATE_MACHINE_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a node is in the metadata quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuorumRole {
    /// Counts toward the quorum and may become the active controller; listed in `voters`.
    #[default]
    Voter,
    /// A broker-only node (Kafka's observer, an openraft learner): not in `voters`; it joins
    /// through them and follows the committed log without ever voting.
    Observer,
}

/// The quorum's membership as this node knows it (the last membership entry it has seen).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumMembers {
    pub voters: BTreeSet<NodeId>,
    pub observers: BTreeSet<NodeId>,
}

/// The quorum member's directory under the node's data dir (Kafka's `metadata.log.dir`).
pub const METADATA_DIR: &str = "metadata";

/// The leader's view of the quorum's replication (see [`Controller::replication_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub leader: NodeId,
    /// The raft term: Kafka's leader epoch of `__cluster_metadata`.
    pub term: u64,
    /// One past the last applied (committed) entry.
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
}

/// One member of the quorum as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumReplica {
    pub node_id: NodeId,
    /// One past the last entry the leader knows it holds; -1 when unknown.
    pub log_end_offset: i64,
    /// Holds every entry the leader has.
    pub caught_up: bool,
    /// Its raft listener, as the membership records it.
    pub address: Option<String>,
}

/// Configuration of the metadata quorum on one node.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_id: NodeId,
    /// Voter, or observer (then `node_id` must not be in `voters`).
    pub role: QuorumRole,
    /// Raft RPC listener (TCP), e.g. 127.0.0.1:9093; port 0 binds an ephemeral port
    /// (`Controller::local_addr` tells which).
    pub listen_addr: SocketAddr,
    /// All voters (including this node if it is one): node id → "host:port" of their raft
    /// listener. An observer advertises its own listener address when it joins.
    pub voters: BTreeMap<NodeId, String>,
    /// The raft log, vote and snapshots live in `data_dir/metadata/` ...
    pub data_dir: PathBuf,
    /// ... or here when set (Kafka's `metadata.log.dir`: e.g. another filesystem than the
    /// partitions', so a full data disk leaves the quorum writing).
    pub metadata_dir: Option<PathBuf>,
    /// Leader heartbeat period; also the timeout of one AppendEntries RPC.
    pub heartbeat_interval_ms: u64,
    /// A follower that hears no leader for a random time in [min, max) starts an election.
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Upper bound of one `propose` (including forwarding and waiting for the local apply).
    pub propose_timeout_ms: u64,
    /// A snapshot is built after this many entries since the last one; the log behind it is purged.
    pub snapshot_interval_entries: u64,
    /// Entries kept in the log behind a snapshot, so slightly lagging followers catch up from the
    /// log instead of receiving a snapshot.
    pub log_entries_kept_after_snapshot: u64,
    /// A broker without a heartbeat for this long is fenced by the active controller
    /// (`broker.session.timeout.ms`).
    pub broker_session_timeout_ms: u64,
    /// `auto.leader.rebalance.enable` with `leader.imbalance.check.interval.seconds` (in ms);
    /// `None` disables it.
    pub leader_imbalance_check_interval_ms: Option<u64>,
    /// TLS on the raft listener and on this node's connections to the other voters (the
    /// `CONTROLLER` listener mapped to SSL); `None`: plain TCP.
    pub tls: Option<Arc<crate::security::tls::TlsContext>>,
    /// With the authorizer on, who may talk to the raft listener over TLS: the client
    /// certificate's principal needs CLUSTER_ACTION on the cluster (a super user, or an ACL),
    /// as Kafka's controller RPCs do. Without TLS the listener cannot tell peers apart.
    pub authorizer: Option<crate::security::acl::AuthorizerSettings>,
}

impl ControllerConfig {
    /// A configuration with default timings.
    pub fn new(
        node_id: NodeId,
        listen_addr: SocketAddr,
        voters: BTreeMap<NodeId, String>,
        data_dir: impl Into<PathBuf>,
    ) -> ControllerConfig {
        ControllerConfig {
            node_id,
            role: QuorumRole::Voter,
            listen_addr,
            voters,
            data_dir: data_dir.into(),
            metadata_dir: None,
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            propose_timeout_ms: 10_000,
            snapshot_interval_entries: 1000,
            log_entries_kept_after_snapshot: 1000,
            broker_session_timeout_ms: DEFAULT_BROKER_SESSION_TIMEOUT_MS,
            tls: None,
            authorizer: None,
            leader_imbalance_check_interval_ms: Some(300_000),
        }
    }

    /// A quorum of one: this node is the only voter.
    pub fn single_node(node_id: NodeId, listen_addr: SocketAddr, data_dir: impl Into<PathBuf>) -> ControllerConfig {
        let voters = BTreeMap::from([(node_id, listen_addr.to_string())]);
        ControllerConfig::new(node_id, listen_addr, voters, data_dir)
    }

    /// Where the quorum's files live: `metadata_dir`, else `data_dir/metadata/`.
    pub fn metadata_dir(&self) -> PathBuf {
        self.metadata_dir.clone().unwrap_or_else(|| self.data_dir.join(METADATA_DIR))
    }

    fn raft_config(&self) -> Result<openraft::Config, ControllerError> {
        let config = openraft::Config {
            cluster_name: "runnel-metadata".to_string(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.election_timeout_max_ms.max(1000) * 5,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_interval_entries.max(1)),
            max_in_snapshot_log_to_keep: self.log_entries_kept_after_snapshot,
            snapshot_max_chunk_size: network::SNAPSHOT_CHUNK_BYTES,
            ..openraft::Config::default()
        };
        config.validate().map_err(|e| ControllerError::InvalidConfig(RaftFailure::new(&e)))
    }
}

impl Default for ControllerConfig {
    /// Single node 1 on 127.0.0.1:9093 with data in `./runnel-data`.
    fn default() -> ControllerConfig {
        ControllerConfig::single_node(1, SocketAddr::from(([127, 0, 0, 1], 9093)), "runnel-data")
    }
}

/// Handle of the metadata quorum on this node. Cheap to clone; the node stops when `shutdown` is
/// called or the last handle is dropped.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    role: QuorumRole,
    raft: Raft,
    local_addr: SocketAddr,
    image_rx: watch::Receiver<Arc<MetadataImage>>,
    metrics: watch::Receiver<RaftMetrics<NodeId, BasicNode>>,
    pool: Arc<PeerPool>,
    propose_timeout: Duration,
    leases: Arc<Leases>,
    stopped: std::sync::atomic::AtomicBool,
    unclean_policy: std::sync::OnceLock<lifecycle::UncleanPolicy>,
    /// Unclean leader elections this node committed as the active controller.
    unclean_elections: std::sync::atomic::AtomicU64,
    server: Mutex<Option<JoinHandle<()>>>,
    /// Closed once the state machine and its snapshot builders are gone.
    state_machine_alive: Mutex<Option<mpsc::Receiver<()>>>,
    /// The store's waits on exhausted resources.
    transient: Arc<Transient>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the last raft handle stops the raft core; the server task holds one more.
        if let Some(server) = self.server.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            server.abort();
        }
    }
}

fn raft_failure(e: &dyn std::fmt::Display) -> ControllerError {
    ControllerError::Raft(RaftFailure::new(e))
}

fn fatal_error(fatal: Fatal<NodeId>) -> ControllerError {
    match fatal {
        Fatal::Stopped => ControllerError::Shutdown,
        other => raft_failure(&other),
    }
}

/// What to do after a forwarding attempt that did not produce an outcome.
enum ForwardFailed {
    /// Nothing was proposed (no leader there, or not reachable): try again.
    Retry,
    Fail(ControllerError),
}

impl Controller {
    /// Opens or creates the persisted raft state, starts the raft node and its RPC listener on
    /// `config.listen_addr`. On the very first start of a cluster the voter with the lowest node id
    /// initializes the membership with all voters. A restart (also after kill -9) resumes from disk.
    pub async fn start(config: ControllerConfig) -> Result<Controller, ControllerError> {
        let listener = tokio::net::TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| ControllerError::Bind { addr: config.listen_addr, source })?;
        Controller::launch(config, listener).await
    }

    /// Like `start`, on a listener the caller already bound (`config.listen_addr` is ignored).
    /// Lets several voters learn each other's ephemeral ports before any of them starts.
    pub async fn start_with_listener(
        config: ControllerConfig,
        listener: std::net::TcpListener,
    ) -> Result<Controller, ControllerError> {
        let addr = listener.local_addr().unwrap_or(config.listen_addr);
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
            .map_err(|source| ControllerError::Bind { addr, source })?;
        Controller::launch(config, listener).await
    }

    async fn launch(
        config: ControllerConfig,
        listener: tokio::net::TcpListener,
    ) -> Result<Controller, ControllerError> {
        let node_id = config.node_id;
        match (config.role, config.voters.contains_key(&node_id)) {
            (QuorumRole::Voter, false) => return Err(ControllerError::NotAVoter { node_id }),
            (QuorumRole::Observer, true) => return Err(ControllerError::ObserverIsAVoter { node_id }),
            _ => {}
        }
        let raft_config = Arc::new(config.raft_config()?);
        let local_addr =
            listener.local_addr().map_err(|source| ControllerError::Bind { addr: config.listen_addr, source })?;
        if config.role == QuorumRole::Observer && local_addr.ip().is_unspecified() {
            return Err(ControllerError::ObserverAddrUnspecified { addr: local_addr });
        }

        let dir = config.metadata_dir();
        let (alive_tx, alive_rx) = mpsc::channel(1);
        let transient = Arc::new(disk::blocking(|| Ok(Transient::new())).await?);
        let store_transient = transient.clone();
        let (log_store, state_machine, image_rx) = disk::blocking(move || {
            if !dir.exists() {
                std::fs::create_dir_all(&dir).map_err(StoreError::io("create", &dir))?;
                if let Some(parent) = dir.parent() {
                    disk::sync_dir(parent)?;
                }
            }
            let lock = Arc::new(DirLock::acquire(&dir)?);
            let (log_store, report) = LogStore::open(&dir, lock.clone(), store_transient.clone())?;
            let (state_machine, image_rx) = StateMachine::open(&dir, lock, alive_tx, store_transient)?;
            tracing::info!(dir = %dir.display(), entries = report.entries, torn_tail_bytes = report.torn_tail_bytes,
                applied_index = image_rx.borrow().applied_index, "opened the metadata store");
            Ok((log_store, state_machine, image_rx))
        })
        .await?;

        let pool = Arc::new(PeerPool::new(node_id, config.voters.clone(), config.tls.clone()));
        let raft = Raft::new(node_id, raft_config, NetworkFactory::new(pool.clone()), log_store, state_machine)
            .await
            .map_err(fatal_error)?;
        let leases = Arc::new(Leases::with_image(
            Duration::from_millis(config.broker_session_timeout_ms.max(1)),
            image_rx.clone(),
        ));
        let gate = config
            .authorizer
            .clone()
            .filter(|a| a.enabled)
            .map(|settings| server::PeerGate { settings, image: image_rx.clone() });
        let server = server::spawn(listener, raft.clone(), node_id, leases.clone(), config.tls.clone(), gate);
        let controller = Controller {
            inner: Arc::new(Inner {
                node_id,
                role: config.role,
                metrics: raft.metrics(),
                raft,
                local_addr,
                image_rx,
                pool,
                propose_timeout: Duration::from_millis(config.propose_timeout_ms),
                leases,
                stopped: std::sync::atomic::AtomicBool::new(false),
                unclean_policy: std::sync::OnceLock::new(),
                unclean_elections: std::sync::atomic::AtomicU64::new(0),
                server: Mutex::new(Some(server)),
                state_machine_alive: Mutex::new(Some(alive_rx)),
                transient,
            }),
        };
        if let Err(e) = controller.initialize_if_first(&config).await {
            let _ = controller.clone().shutdown().await;
            return Err(e);
        }
        // The loop holds the controller weakly: dropping the last handle still stops the node.
        let weak = Arc::downgrade(&controller.inner);
        let rebalance = config.leader_imbalance_check_interval_ms.map(|ms| Duration::from_millis(ms.max(100)));
        tokio::spawn(async move {
            let Some(inner) = weak.upgrade() else { return };
            let alive = Arc::downgrade(&inner);
            drop(inner);
            lifecycle::decision_loop(alive, rebalance).await;
        });
        let (role, voters) = (config.role, &config.voters);
        tracing::info!(node_id, ?role, %local_addr, ?voters, "metadata controller started");
        Ok(controller)
    }

    /// The lowest voter initializes a pristine cluster; everyone else waits to be contacted (an
    /// observer joins in `wait_ready`).
    async fn initialize_if_first(&self, config: &ControllerConfig) -> Result<(), ControllerError> {
        let lowest = config.voters.keys().next().copied();
        if config.role == QuorumRole::Observer || lowest != Some(self.inner.node_id) {
            return Ok(());
        }
        let raft = &self.inner.raft;
        if raft.is_initialized().await.map_err(fatal_error)? {
            return Ok(());
        }
        let members: BTreeMap<NodeId, BasicNode> =
            config.voters.iter().map(|(id, addr)| (*id, BasicNode::new(addr))).collect();
        tracing::info!(?members, "initializing the metadata quorum");
        match raft.initialize(members).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(e @ InitializeError::NotInMembers(_))) => Err(raft_failure(&e)),
            Err(RaftError::Fatal(f)) => Err(fatal_error(f)),
        }
    }

    /// Proposes many records (the topics of one CreateTopics or DeleteTopics request) as few raft
    /// entries as possible: `MetadataRecord::Batch`es of at most `BATCH_WEIGHT_MAX` partition
    /// assignments each (an entry stays far below the RPC frame bound), one outcome per record in
    /// order. Each record applies on its own; a batch that fails to commit fails its records
    /// only (with the same caveat as `propose`: they may still be committed).
    pub async fn propose_all(&self, records: Vec<MetadataRecord>) -> Vec<Result<ApplyOutcome, Arc<ControllerError>>> {
        let mut outcomes = Vec::with_capacity(records.len());
        for chunk in batches(records) {
            let count = chunk.len();
            let proposed = match <[MetadataRecord; 1]>::try_from(chunk) {
                Ok([record]) => self.propose(record).await.map(|outcome| vec![outcome]),
                Err(chunk) => match self.propose(MetadataRecord::Batch(chunk)).await {
                    Ok(ApplyOutcome::Batch(each)) if each.len() == count => Ok(each),
                    Ok(other) => Err(ControllerError::Raft(RaftFailure::new(&format!("unexpected outcome {other:?}")))),
                    Err(e) => Err(e),
                },
            };
            match proposed {
                Ok(each) => outcomes.extend(each.into_iter().map(Ok)),
                Err(e) => {
                    let e = Arc::new(e);
                    outcomes.extend((0..count).map(|_| Err(e.clone())));
                }
            }
        }
        outcomes
    }

    /// Proposes `record` through the quorum, forwarding it to the leader if this node is not the
    /// leader. Resolves once the record is committed and applied to this node's image, with the
    /// outcome of applying it. On `Timeout` or `Forward` errors the record may still be committed.
    pub async fn propose(&self, record: MetadataRecord) -> Result<ApplyOutcome, ControllerError> {
        let deadline = Instant::now() + self.inner.propose_timeout;
        tokio::time::timeout_at(deadline, self.propose_until(record, deadline))
            .await
            .map_err(|_| ControllerError::Timeout)?
    }

    async fn propose_until(&self, record: MetadataRecord, deadline: Instant) -> Result<ApplyOutcome, ControllerError> {
        check_record_size(&record)?;
        let mut metrics = self.inner.raft.metrics();
        loop {
            // On the leader (elsewhere the leader checks the forwarded record).
            if let Some(node_id) = self.inner.leases.duplicate_registration(&record) {
                return Err(ControllerError::DuplicateBrokerRegistration {
                    node_id,
                    session_ms: self.inner.leases.session_ms(),
                });
            }
            match self.inner.raft.client_write(record.clone()).await {
                // The response is sent after the local state machine applied (and published) it.
                Ok(resp) => return Ok(resp.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    if let Some(leader) = f.leader_id.filter(|l| *l != self.inner.node_id) {
                        match self.forward_propose(leader, &record, deadline).await {
                            Ok(outcome) => return Ok(outcome),
                            Err(ForwardFailed::Retry) => {}
                            Err(ForwardFailed::Fail(e)) => return Err(e),
                        }
                    }
                    self.wait_for_change(&mut metrics).await?;
                }
                Err(RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_))) => {
                    return Err(raft_failure(&e));
                }
                Err(RaftError::Fatal(f)) => return Err(fatal_error(f)),
            }
        }
    }

    async fn forward_propose(
        &self,
        leader: NodeId,
        record: &MetadataRecord,
        deadline: Instant,
    ) -> Result<ApplyOutcome, ForwardFailed> {
        let Some(addr) = self.peer_addr(leader) else {
            return Err(ForwardFailed::Retry);
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let request = RpcRequest::Propose { record: record.clone(), timeout_ms: remaining.as_millis() as u64 };
        let fail = |source| ForwardFailed::Fail(ControllerError::Forward { leader, source });
        match self.inner.pool.call(leader, &addr, &request, remaining, ConnPolicy::Fresh).await {
            Ok(RpcResponse::Propose(Ok(proposed))) => {
                self.wait_applied(proposed.log_index).await.map_err(ForwardFailed::Fail)?;
                Ok(proposed.outcome)
            }
            Ok(RpcResponse::Propose(Err(ForwardError::NotLeader { .. }))) => Err(ForwardFailed::Retry),
            Ok(RpcResponse::Propose(Err(ForwardError::Timeout))) => Err(ForwardFailed::Fail(ControllerError::Timeout)),
            Ok(RpcResponse::Propose(Err(ForwardError::DuplicateBrokerRegistration { node_id, session_ms }))) => {
                Err(ForwardFailed::Fail(ControllerError::DuplicateBrokerRegistration { node_id, session_ms }))
            }
            Ok(RpcResponse::Propose(Err(e))) => Err(fail(RpcError::Remote { message: e.to_string() })),
            Ok(_) => Err(fail(RpcError::UnexpectedResponse)),
            Err(e) if e.not_sent() => {
                tracing::debug!(leader, error = %e, "metadata leader unreachable; retrying");
                Err(ForwardFailed::Retry)
            }
            Err(e) => Err(fail(e)),
        }
    }

    /// The raft listener address of `node_id`: configured, else from the membership.
    fn peer_addr(&self, node_id: NodeId) -> Option<String> {
        if let Some(addr) = self.inner.pool.configured_addr(node_id) {
            return Some(addr.to_string());
        }
        self.inner.metrics.borrow().membership_config.membership().get_node(&node_id).map(|n| n.addr.clone())
    }

    /// Waits for a raft metrics change (e.g. a new leader), at most `RETRY_BACKOFF`.
    async fn wait_for_change(
        &self,
        metrics: &mut watch::Receiver<RaftMetrics<NodeId, BasicNode>>,
    ) -> Result<(), ControllerError> {
        if metrics.borrow().running_state.is_err() {
            return Err(ControllerError::Shutdown);
        }
        match tokio::time::timeout(RETRY_BACKOFF, metrics.changed()).await {
            Ok(Err(_)) => Err(ControllerError::Shutdown),
            Ok(Ok(())) | Err(_) => Ok(()),
        }
    }

    /// Waits until the local image has applied `index`.
    async fn wait_applied(&self, index: u64) -> Result<(), ControllerError> {
        let mut rx = self.inner.image_rx.clone();
        loop {
            if rx.borrow_and_update().applied_index >= index {
                return Ok(());
            }
            rx.changed().await.map_err(|_| ControllerError::Shutdown)?;
        }
    }

    /// A broker heartbeat (Kafka's BrokerHeartbeat): renews the lease of `broker_epoch` on the
    /// active controller, forwarded there if this node does not lead. `want_shutdown` asks to be
    /// fenced (controlled shutdown: leaderships move away before the process stops).
    pub async fn heartbeat(&self, broker_epoch: i64, want_shutdown: bool) -> Result<(), ControllerError> {
        let node_id = self.inner.node_id;
        let Some(leader) = self.leader_id() else { return Err(ControllerError::Timeout) };
        if leader == node_id {
            self.inner.leases.record(node_id, broker_epoch, want_shutdown);
            return Ok(());
        }
        let addr = self.peer_addr(leader).ok_or(ControllerError::Timeout)?;
        let request = RpcRequest::BrokerHeartbeat { node_id, broker_epoch, want_shutdown };
        // A beat older than a session is worth nothing: give up on this one by then.
        let timeout = self.inner.leases.session();
        match self.inner.pool.call(leader, &addr, &request, timeout, ConnPolicy::Pooled).await {
            Ok(RpcResponse::BrokerHeartbeat(Ok(()))) => Ok(()),
            Ok(RpcResponse::BrokerHeartbeat(Err(e))) => {
                Err(ControllerError::Forward { leader, source: RpcError::Remote { message: e.to_string() } })
            }
            Ok(_) => Err(ControllerError::Forward { leader, source: RpcError::UnexpectedResponse }),
            Err(source) => Err(ControllerError::Forward { leader, source }),
        }
    }

    /// Tells the decision loop which topics allow unclean leader elections (set once).
    pub fn set_unclean_policy(&self, policy: impl Fn(&TopicImage) -> bool + Send + Sync + 'static) {
        let _ = self.inner.unclean_policy.set(Box::new(policy));
    }

    /// Unclean leader elections committed by this node while it was the active controller.
    pub fn unclean_elections(&self) -> u64 {
        self.inner.unclean_elections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Writes of the metadata store that ran out of descriptors, disk space or memory and were
    /// retried (instead of failing the quorum), since start.
    pub fn storage_retries(&self) -> u64 {
        self.inner.transient.retries()
    }

    pub(crate) fn leases(&self) -> &Leases {
        &self.inner.leases
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.inner.stopped.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The latest applied image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.inner.image_rx.borrow().clone()
    }

    /// Notified on every applied change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.inner.image_rx.clone()
    }

    /// Waits until there is a leader and this node has applied everything the leader had committed
    /// when asked (a linearizable read point), so a restarted broker sees its topics before it
    /// answers clients. An observer first joins the membership (on every start: a rejoin at the
    /// same address changes nothing). Gives up with `Timeout` after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), ControllerError> {
        let deadline = Instant::now() + timeout;
        tokio::time::timeout_at(deadline, self.ready_until(deadline)).await.map_err(|_| ControllerError::Timeout)?
    }

    async fn ready_until(&self, deadline: Instant) -> Result<(), ControllerError> {
        if self.inner.role == QuorumRole::Observer {
            self.join_as_observer(deadline).await?;
        }
        let mut metrics = self.inner.raft.metrics();
        loop {
            let leader = metrics.borrow_and_update().current_leader;
            let attempt = deadline.min(Instant::now() + READY_ATTEMPT_TIMEOUT);
            match leader {
                Some(leader) if leader == self.inner.node_id => {
                    let remaining = attempt.saturating_duration_since(Instant::now());
                    match server::read_index_as_leader(&self.inner.raft, remaining).await {
                        // ensure_linearizable returns after the local state machine caught up.
                        Ok(_) => return Ok(()),
                        Err(ForwardError::Shutdown) => return Err(ControllerError::Shutdown),
                        Err(e) => tracing::debug!(error = %e, "not ready yet"),
                    }
                }
                Some(leader) => {
                    if let Some(index) = self.read_index_from(leader, attempt).await {
                        return self.wait_applied(index).await;
                    }
                }
                None => {}
            }
            self.wait_for_change(&mut metrics).await?;
        }
    }

    /// Asks the active controller to add this node to the membership as an observer at its raft
    /// listener address, trying the configured voters in turn and following a `NotLeader` hint.
    /// Until it is a member no leader replicates to it, so it could never catch up. Returns once
    /// the leader has committed the membership that holds it (or found it already there).
    async fn join_as_observer(&self, deadline: Instant) -> Result<(), ControllerError> {
        let node_id = self.inner.node_id;
        let addr = self.inner.local_addr.to_string();
        let voters = self.inner.pool.configured_ids();
        let mut next_voter = voters.iter().cycle();
        let mut hint = None;
        // When the first refusal came, and the leader's session length it named.
        let mut refused: Option<(Instant, u64)> = None;
        loop {
            let Some(target) = hint.take().or_else(|| next_voter.next().copied()) else {
                return Err(ControllerError::NotAVoter { node_id });
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            // A previous process of this id ends its session within one (a killed one sooner);
            // refusals past two are another live process's. (Also reported before the caller's
            // own timeout ends the wait.)
            if let Some((since, session_ms)) = refused {
                if since.elapsed() > Duration::from_millis(session_ms) * 2 || remaining <= RETRY_BACKOFF {
                    return Err(ControllerError::DuplicateBrokerRegistration { node_id, session_ms });
                }
            }
            if remaining.is_zero() {
                return Err(ControllerError::Timeout);
            }
            let attempt = remaining.min(JOIN_ATTEMPT_TIMEOUT);
            let Some(target_addr) = self.peer_addr(target) else { continue };
            let request =
                RpcRequest::AddObserver { node_id, addr: addr.clone(), timeout_ms: attempt.as_millis() as u64 };
            match self.inner.pool.call(target, &target_addr, &request, attempt, ConnPolicy::Pooled).await {
                Ok(RpcResponse::AddObserver(Ok(()))) => {
                    tracing::info!(node_id, leader = target, %addr, "joined the metadata quorum as an observer");
                    return Ok(());
                }
                Ok(RpcResponse::AddObserver(Err(ForwardError::NotLeader { leader: Some(leader) })))
                    if leader != target =>
                {
                    hint = Some(leader);
                    continue;
                }
                Ok(RpcResponse::AddObserver(Err(ForwardError::IsAVoter { .. }))) => {
                    return Err(ControllerError::ObserverIsAVoter { node_id });
                }
                Ok(RpcResponse::AddObserver(Err(e @ ForwardError::DuplicateBrokerRegistration { session_ms, .. }))) => {
                    // The previous process of this id may be dying still; asked again.
                    refused.get_or_insert((Instant::now(), session_ms));
                    tracing::warn!(target, error = %e, "the active controller refused this observer's new address");
                }
                Ok(RpcResponse::AddObserver(Err(e))) => {
                    tracing::debug!(target, error = %e, "voter could not add this observer yet")
                }
                Ok(_) => tracing::debug!(target, "unexpected answer to a join request"),
                Err(e) => tracing::debug!(target, error = %e, "join request failed"),
            }
            // No leader known there (an election, or it is down): do not spin through the voters.
            tokio::time::sleep(RETRY_BACKOFF.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// The quorum's voters and observers as this node knows them.
    pub fn quorum(&self) -> QuorumMembers {
        let metrics = self.inner.metrics.borrow();
        let membership = metrics.membership_config.membership();
        QuorumMembers { voters: membership.voter_ids().collect(), observers: membership.learner_ids().collect() }
    }

    /// The active controller's view of the quorum's replication (Kafka's DescribeQuorum):
    /// `None` unless this node is the raft leader. Offsets are Kafka-style, one past the last
    /// entry (the entry at raft index `i` is offset `i`).
    pub fn replication_status(&self) -> Option<QuorumStatus> {
        let metrics = self.inner.metrics.borrow();
        if metrics.current_leader != Some(metrics.id) {
            return None;
        }
        let replication = metrics.replication.as_ref()?;
        let membership = metrics.membership_config.membership();
        let leader_end = metrics.last_log_index.unwrap_or(0);
        let member = |id: NodeId| {
            let matched = if id == metrics.id {
                Some(leader_end)
            } else {
                replication.get(&id).and_then(|m| m.map(|log_id| log_id.index))
            };
            QuorumReplica {
                node_id: id,
                log_end_offset: matched.map_or(-1, |index| index as i64 + 1),
                caught_up: matched == Some(leader_end),
                address: membership.get_node(&id).map(|n| n.addr.clone()),
            }
        };
        Some(QuorumStatus {
            leader: metrics.id,
            term: metrics.current_term,
            high_watermark: metrics.last_applied.map_or(0, |log_id| log_id.index as i64 + 1),
            voters: membership.voter_ids().map(member).collect(),
            observers: membership.learner_ids().map(member).collect(),
        })
    }

    /// Voter or observer.
    pub fn role(&self) -> QuorumRole {
        self.inner.role
    }

    /// Asks `leader` for a read index; `None` if it could not answer (retry later).
    async fn read_index_from(&self, leader: NodeId, deadline: Instant) -> Option<u64> {
        let addr = self.peer_addr(leader)?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let request = RpcRequest::ReadIndex { timeout_ms: remaining.as_millis() as u64 };
        match self.inner.pool.call(leader, &addr, &request, remaining, ConnPolicy::Pooled).await {
            Ok(RpcResponse::ReadIndex(Ok(index))) => Some(index.unwrap_or(0)),
            Ok(RpcResponse::ReadIndex(Err(e))) => {
                tracing::debug!(leader, error = %e, "leader could not serve a read index");
                None
            }
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(leader, error = %e, "read index request failed");
                None
            }
        }
    }

    /// The address the raft RPC listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.inner.node_id
    }

    /// The current raft leader as known by this node.
    pub fn leader_id(&self) -> Option<NodeId> {
        self.inner.metrics.borrow().current_leader
    }

    /// Stops the listener and the raft node and waits until the metadata directory is released, so
    /// the same directory can be opened again right away.
    pub async fn shutdown(self) -> Result<(), ControllerError> {
        self.inner.stopped.store(true, std::sync::atomic::Ordering::Release);
        let server = self.inner.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
        let stopped = self.inner.raft.shutdown().await;
        let alive = self.inner.state_machine_alive.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut alive) = alive {
            // `recv` returns `None` once every sender (state machine, snapshot builders) is dropped.
            if tokio::time::timeout(STATE_MACHINE_STOP_TIMEOUT, alive.recv()).await.is_err() {
                tracing::warn!("the metadata state machine did not stop in time");
            }
        }
        stopped.map_err(|e| raft_failure(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves `propose_all` cuts records into consecutive batches bounded by partition count,
    // keeping their order, with a record heavier than the bound alone.
    #[test]
    fn batches_keep_order_and_bound_partitions() {
        let create = |name: &str, partitions: usize| MetadataRecord::CreateTopic {
            name: name.into(),
            topic_id: [0; 16],
            partitions: vec![vec![1]; partitions],
            configs: BTreeMap::new(),
            max_broker_partitions: None,
        };
        let names = |batch: &Vec<MetadataRecord>| -> Vec<String> {
            batch
                .iter()
                .map(|r| match r {
                    MetadataRecord::CreateTopic { name, .. } | MetadataRecord::DeleteTopic { name } => name.clone(),
                    _ => unreachable!(),
                })
                .collect()
        };
        let half = BATCH_WEIGHT_MAX / 2;
        let records = vec![
            create("a", 10),
            MetadataRecord::DeleteTopic { name: "b".into() },
            create("c", half),
            create("d", half),
            create("e", BATCH_WEIGHT_MAX * 2),
            create("f", 1),
        ];
        let batches: Vec<Vec<String>> = batches(records).iter().map(names).collect();
        assert_eq!(batches, vec![vec!["a", "b", "c"], vec!["d"], vec!["e"], vec!["f"]]);
        assert!(super::batches(Vec::new()).is_empty());
    }
}

/// The largest encoded metadata record: one log entry must fit in one raft frame
/// (`network::MAX_FRAME_BYTES`) with room for the envelope. A bigger one would be appended by
/// the leader and then never replicate (a frame of one entry cannot be split), stopping every
/// later commit.
pub(crate) const MAX_RECORD_BYTES: usize = network::MAX_FRAME_BYTES / 2;

/// Refuses a record over [`MAX_RECORD_BYTES`] before it reaches the log.
pub(crate) fn check_record_size(record: &MetadataRecord) -> Result<(), ControllerError> {
    let size = serde_json::to_vec(record).map(|encoded| encoded.len()).unwrap_or(usize::MAX);
    if size > MAX_RECORD_BYTES {
        return Err(ControllerError::RecordTooLarge { size, max: MAX_RECORD_BYTES });
    }
    Ok(())
}

#[cfg(test)]
mod record_size_tests {
    use super::*;

    #[test]
    fn a_record_too_big_for_one_log_entry_is_refused_before_the_log() {
        // Proves a record that could never replicate (one entry larger than a raft frame) is
        // refused up front: it was appended by the leader and stopped every later commit.
        let configs = |value: String| MetadataRecord::SetTopicConfigs {
            topic: "t".into(),
            configs: std::collections::BTreeMap::from([("k".to_string(), value)]),
        };
        assert!(check_record_size(&configs("v".into())).is_ok());
        let huge = configs("x".repeat(MAX_RECORD_BYTES));
        assert!(matches!(check_record_size(&huge), Err(ControllerError::RecordTooLarge { .. })));
    }
}
