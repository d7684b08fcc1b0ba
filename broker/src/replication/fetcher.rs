//! Follower fetchers: for every leader this node follows partitions of, one task with one Kafka
//! connection to that leader and one Fetch request covering all of those partitions (Kafka's
//! `ReplicaFetcherThread`). A fetch names this node as the replica, carries each partition's
//! current leader epoch and last fetched epoch; the leader answers records up to its log end,
//! its high watermark, and a diverging epoch when the follower's log differs, which the
//! follower truncates away before fetching on (KIP-101/KIP-279 rules, KIP-320's fetch-based
//! form that Kafka uses since 2.7).
//!
//! Owns: the fetcher tasks and their connections. Invariant: a partition is fetched only while
//! it is a follower of that task's leader (the set is replaced from the partitions' roles after
//! every metadata change), and only the partition layer writes its log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::truncation::LeaderEpochEnd;
use crate::controller::Controller;
use crate::partition::{Partition, PartitionError, PartitionKey, ReplicaManager};
use crate::peer::{BrokerAddresses, Connection, PeerError};

/// The Fetch version followers use: replica id in the body, topic names, last fetched epoch and
/// diverging epoch (v12).
const FETCH_VERSION: i16 = 12;
/// How long the leader may park a follower's fetch when there is nothing new.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Kafka's `replica.fetch.max.bytes` and `replica.fetch.response.max.bytes` defaults.
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const RESPONSE_MAX_BYTES: i32 = 10 << 20;
/// Largest response frame a fetcher accepts (the response limit plus headroom for fields).
const MAX_RESPONSE_FRAME: usize = 64 << 20;
/// Kafka's `replica.fetch.backoff.ms`.
const BACKOFF: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Every fetcher task of this node, by leader.
pub struct Fetchers {
    node_id: u64,
    replicas: Arc<ReplicaManager>,
    controller: Controller,
    /// Where each leader is reached (its registered address unless overridden).
    addresses: BrokerAddresses,
    runtime: tokio::runtime::Handle,
    tasks: Mutex<HashMap<u64, FetcherTask>>,
    /// Record bytes appended as a follower (`replication_bytes_in`).
    bytes_in: prometheus::IntCounter,
}

struct FetcherTask {
    partitions: Arc<Mutex<BTreeMap<PartitionKey, Arc<Partition>>>>,
    handle: JoinHandle<()>,
}

impl Fetchers {
    /// Must be called inside the tokio runtime the tasks will run on.
    pub fn new(
        node_id: u64,
        replicas: Arc<ReplicaManager>,
        controller: Controller,
        addresses: BrokerAddresses,
        bytes_in: prometheus::IntCounter,
    ) -> Fetchers {
        Fetchers {
            node_id,
            replicas,
            controller,
            addresses,
            runtime: tokio::runtime::Handle::current(),
            tasks: Mutex::new(HashMap::new()),
            bytes_in,
        }
    }

    /// Makes the fetcher tasks match the hosted partitions' roles: each follower partition is
    /// fetched from its leader, nothing else is fetched. Called after every reconciliation.
    pub fn update(&self) {
        let mut wanted: HashMap<u64, BTreeMap<PartitionKey, Arc<Partition>>> = HashMap::new();
        for partition in self.replicas.all() {
            if let Some(leader) = partition.following().filter(|&l| l != self.node_id) {
                wanted.entry(leader).or_default().insert((partition.topic().clone(), partition.index()), partition);
            }
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|leader, task| {
            let keep = wanted.contains_key(leader) && !task.handle.is_finished();
            if !keep {
                task.handle.abort();
            }
            keep
        });
        for (leader, partitions) in wanted {
            // A new set starts a new session at once: a fetch parked on the leader (up to
            // FETCH_MAX_WAIT_MS) must not delay a partition that just started following it,
            // which is on the failover path of every acks=all produce to its new leader.
            let same = tasks.get(&leader).is_some_and(|task| {
                let current = task.partitions.lock().unwrap_or_else(|p| p.into_inner());
                current.len() == partitions.len()
                    && current.iter().zip(&partitions).all(|((a, pa), (b, pb))| a == b && Arc::ptr_eq(pa, pb))
            });
            if !same {
                if let Some(task) = tasks.remove(&leader) {
                    task.handle.abort();
                }
            }
            match tasks.get(&leader) {
                Some(_) => {}
                None => {
                    let shared = Arc::new(Mutex::new(partitions));
                    let fetcher = Fetcher {
                        node_id: self.node_id,
                        leader,
                        partitions: shared.clone(),
                        controller: self.controller.clone(),
                        addresses: self.addresses.clone(),
                        bytes_in: self.bytes_in.clone(),
                    };
                    let handle = self.runtime.spawn(fetcher.run());
                    tasks.insert(leader, FetcherTask { partitions: shared, handle });
                }
            }
        }
    }

    /// Stops every fetcher (shutdown).
    pub fn stop(&self) {
        for (_, task) in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            task.handle.abort();
        }
    }
}

struct Fetcher {
    node_id: u64,
    leader: u64,
    partitions: Arc<Mutex<BTreeMap<PartitionKey, Arc<Partition>>>>,
    controller: Controller,
    addresses: BrokerAddresses,
    bytes_in: prometheus::IntCounter,
}

/// Why one fetch round failed as a whole (the connection is dropped and made again).
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error("leader {0} has no registered endpoint")]
    NoEndpoint(u64),
    #[error("{0}")]
    Peer(#[from] PeerError),
    #[error("timed out")]
    Timeout,
    #[error("malformed response: {0}")]
    Codec(String),
    #[error(
        "the leader refused this broker's fetches with CLUSTER_AUTHORIZATION_FAILED: this broker's principal on \
         the inter-broker listener needs CLUSTER_ACTION on the cluster (put it in super.users)"
    )]
    Unauthorized,
}

impl Fetcher {
    async fn run(self) {
        let mut conn: Option<Connection> = None;
        // Partitions whose last answer was an error: skipped until the instant passes (or the
        // metadata replaces them).
        let mut delayed: HashMap<PartitionKey, Instant> = HashMap::new();
        // Whether the leader's refusal of this broker was logged (once per episode).
        let mut refused = false;
        // Where each round's request starts: the leader fills the response's byte limit in
        // request order and gives the partitions after that nothing (KIP-74), so the order
        // rotates (Kafka's fetcher moves fetched partitions to the end) and none starves.
        let mut rotation = 0usize;
        loop {
            let now = Instant::now();
            delayed.retain(|_, until| *until > now);
            let set: Vec<Arc<Partition>> = {
                let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
                partitions.iter().filter(|(k, _)| !delayed.contains_key(*k)).map(|(_, p)| p.clone()).collect()
            };
            if set.is_empty() {
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
            let mut set = set;
            let start = rotation % set.len();
            set.rotate_left(start);
            rotation = rotation.wrapping_add(1);
            match self.round(&mut conn, &set, &mut delayed).await {
                Ok(()) => refused = false,
                // A misconfiguration the operator must see (once per episode, not per retry).
                Err(e @ (RoundError::Unauthorized | RoundError::Peer(PeerError::Authentication { .. }))) => {
                    if !refused {
                        tracing::error!(leader = self.leader, error = %e, "replica fetch refused");
                        refused = true;
                    }
                    conn = None;
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(e) => {
                    tracing::debug!(leader = self.leader, error = %e, "replica fetch failed; reconnecting");
                    conn = None;
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    }

    async fn round(
        &self,
        conn: &mut Option<Connection>,
        set: &[Arc<Partition>],
        delayed: &mut HashMap<PartitionKey, Instant>,
    ) -> Result<(), RoundError> {
        if conn.is_none() {
            let addr = self
                .addresses
                .resolve(&self.controller.image(), self.leader)
                .ok_or(RoundError::NoEndpoint(self.leader))?;
            let client_id = StrBytes::from_string(format!("runnel-replica-fetcher-{}", self.node_id));
            let (tls, sasl) = (self.addresses.tls(), self.addresses.sasl());
            *conn = Some(Connection::connect(&addr, client_id, CONNECT_TIMEOUT, tls, sasl).await?);
        }
        let conn = conn.as_mut().expect("connected above");
        // Topics in the order their first partition comes in `set` (rotated by the caller).
        let mut topics: Vec<(Arc<str>, Vec<FetchPartition>)> = Vec::new();
        let mut topic_at: HashMap<Arc<str>, usize> = HashMap::new();
        // What each partition was fetched at: its answer is applied only if the partition is
        // still there (Kafka's `AbstractFetcherThread` checks the fetch offset is unchanged), so
        // an answer of a leader it no longer follows, or one from before a truncation, is
        // dropped. Also the lookup of the answers' partitions.
        let mut sent: HashMap<PartitionKey, (&Arc<Partition>, FetchedAt)> = HashMap::with_capacity(set.len());
        for p in set {
            let at = *topic_at.entry(p.topic().clone()).or_insert_with(|| {
                topics.push((p.topic().clone(), Vec::new()));
                topics.len() - 1
            });
            let fetched_at = FetchedAt::of(p);
            sent.insert((p.topic().clone(), p.index()), (p, fetched_at));
            topics[at].1.push(
                FetchPartition::default()
                    .with_partition(p.index() as i32)
                    .with_current_leader_epoch(fetched_at.leader_epoch)
                    .with_fetch_offset(fetched_at.offset)
                    .with_last_fetched_epoch(p.latest_epoch().unwrap_or(-1))
                    .with_log_start_offset(p.log_start_offset())
                    .with_partition_max_bytes(PARTITION_MAX_BYTES),
            );
        }
        let request = FetchRequest::default()
            .with_replica_id((self.node_id as i32).into())
            .with_max_wait_ms(FETCH_MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(RESPONSE_MAX_BYTES)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        FetchTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let timeout = Duration::from_millis(FETCH_MAX_WAIT_MS as u64) + Duration::from_secs(10);
        let response = tokio::time::timeout(timeout, conn.call(FETCH_VERSION, &request, MAX_RESPONSE_FRAME))
            .await
            .map_err(|_| RoundError::Timeout)??;
        if response.error_code == ResponseError::ClusterAuthorizationFailed.code() {
            return Err(RoundError::Unauthorized);
        }
        if response.error_code != 0 {
            return Err(RoundError::Codec(format!("fetch error code {}", response.error_code)));
        }
        for topic in response.responses {
            for data in topic.partitions {
                let key: PartitionKey = (Arc::from(&*topic.topic.0), data.partition_index.max(0) as u32);
                let Some(&(partition, fetched_at)) = sent.get(&key) else { continue };
                let now = FetchedAt::of(partition);
                if now != fetched_at {
                    tracing::debug!(leader = self.leader, topic = %key.0, partition = key.1, ?fetched_at, ?now, "dropping the answer of a fetch the partition has moved past");
                    continue;
                }
                let outcome = self.apply(partition, data);
                match outcome {
                    Ok(_) => {}
                    Err(reason) => {
                        tracing::debug!(leader = self.leader, topic = %key.0, partition = key.1, %reason, "replica fetch of a partition failed");
                        delayed.insert(key, Instant::now() + BACKOFF);
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies one partition's answer (fetched at what it still is); `Ok(true)` if records were
    /// appended.
    fn apply(
        &self,
        partition: &Partition,
        data: kafka_protocol::messages::fetch_response::PartitionData,
    ) -> Result<bool, String> {
        match ResponseError::try_from_code(data.error_code) {
            None => {}
            Some(ResponseError::OffsetOutOfRange) => {
                return partition
                    .reset_out_of_range(data.log_start_offset, data.high_watermark)
                    .map(|()| false)
                    .map_err(|e| e.to_string());
            }
            Some(code) => return Err(format!("{code:?}")),
        }
        let diverging = data.diverging_epoch;
        if diverging.epoch >= 0 || diverging.end_offset >= 0 {
            let answer = LeaderEpochEnd { leader_epoch: diverging.epoch, end_offset: diverging.end_offset };
            return partition.truncate_on_divergence(answer).map(|_| false).map_err(|e| e.to_string());
        }
        let records = data.records.unwrap_or_else(Bytes::new);
        let appended = !records.is_empty();
        match partition.append_as_follower(&records, data.high_watermark, data.log_start_offset) {
            Ok(()) => {
                self.bytes_in.inc_by(records.len() as u64);
                Ok(appended)
            }
            Err(PartitionError::NotLeaderOrFollower { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A follower partition's position when it was fetched: its log end (the fetch offset) and the
/// leader epoch it followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FetchedAt {
    offset: i64,
    leader_epoch: i32,
}

impl FetchedAt {
    fn of(partition: &Partition) -> FetchedAt {
        FetchedAt { offset: partition.log_end_offset(), leader_epoch: partition.leader_epoch() }
    }
}
