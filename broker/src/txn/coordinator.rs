//! The transaction coordinator (KIP-98; transaction versions 1 and 2, KIP-890): the state of each
//! transactional id lives in partition `partition_for(id)` of the compacted, replicated
//! `__transaction_state` topic, and the leader of that partition coordinates it.
//!
//! State machine (Kafka's `TransactionMetadata`): Empty → Ongoing (AddPartitionsToTxn,
//! AddOffsetsToTxn) → PrepareCommit / PrepareAbort (EndTxn, a timeout, or a new producer fencing
//! the old one) → markers written to every partition of the transaction (WriteTxnMarkers,
//! through [`MarkerSink`]) → CompleteCommit / CompleteAbort → Ongoing again on the next add.
//!
//! Invariants: a transition is answered only once its record is replicated (acks=all on the
//! internal topic); memory takes a transition only after that, and only if the leadership it
//! was computed under still holds; while a transition is being written the id is `pending` and
//! every other request for it answers CONCURRENT_TRANSACTIONS. A transaction in a Prepare state
//! is driven to completion by this node while it leads the partition; a new leader resumes it
//! from the loaded state. No mutex is held across an `.await`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::schema::{self, TxnLogValue, TxnState};
use super::ProducerIds;
use crate::controller::Controller;
use crate::group::partition_for;
use crate::log::batch::BatchIter;
use crate::log::now_ms;
use crate::log::records::BatchBuilder;
use crate::log::{AppendOrigin, Compression};
use crate::partition::{Acks, Partition, PartitionError, ReplicaManager};

pub use crate::controller::TRANSACTION_STATE_TOPIC;

/// How long a write to `__transaction_state` may wait for the ISR.
const APPEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between rounds of marker writes that failed (a leader moving, a broker down).
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// Kafka's `Short.MaxValue - 1`: past it a producer gets a new id instead of an epoch bump.
const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;

/// The coordinator's settings, Kafka's names.
#[derive(Debug, Clone)]
pub struct TxnSettings {
    /// `transaction.state.log.num.partitions`.
    pub num_partitions: u32,
    /// `transaction.state.log.replication.factor` (capped to the usable brokers at creation).
    pub replication_factor: u16,
    /// `transaction.max.timeout.ms`: the largest `transaction.timeout.ms` a client may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle, finished transactional id is forgotten.
    pub id_expiration_ms: i64,
    /// `transaction.partition.verification.enable` (KIP-890 part 1): a partition leader asks
    /// the coordinator before a transaction's first batch there is appended.
    pub partition_verification: bool,
    /// The finalized level of the `transaction.version` feature ApiVersions advertises (2:
    /// KIP-890 part 2). The coordinator serves every client's version whatever it is.
    pub version: i16,
}

impl Default for TxnSettings {
    fn default() -> TxnSettings {
        TxnSettings {
            num_partitions: 50,
            replication_factor: 3,
            max_timeout_ms: 900_000,
            id_expiration_ms: 7 * 24 * 60 * 60 * 1000,
            partition_verification: true,
            version: 2,
        }
    }
}

/// What a transactional id is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The producer id before an exhausted epoch moved this id to a new one (-1: none); a
    /// retried EndTxn of the old id is recognised by it (KIP-890).
    pub previous_producer_id: i64,
    /// The producer id a transaction ended at an exhausted epoch moves to once complete.
    pub next_producer_id: i64,
    /// 2 when the producer ends its transactions with EndTxn v5+ (transaction version 2: an
    /// epoch bump on every commit and abort), else 0.
    pub client_version: i16,
    /// The (producer id, epoch) a KIP-360 InitProducerId named when it gave this id its
    /// current epoch: the same request again (its answer lost) is answered the same instead of
    /// PRODUCER_FENCED (Kafka's `lastProducerEpoch`; in memory only, as Kafka's).
    bumped_from: Option<(i64, i16)>,
    /// A transition is being written.
    pending: bool,
}

impl TxnMetadata {
    fn value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: self.partitions.clone(),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            client_version: self.client_version,
        }
    }

    fn from_value(transactional_id: String, v: TxnLogValue) -> TxnMetadata {
        TxnMetadata {
            transactional_id,
            producer_id: v.producer_id,
            producer_epoch: v.producer_epoch,
            timeout_ms: v.timeout_ms,
            state: v.state,
            partitions: v.partitions,
            start_ms: v.start_ms,
            last_update_ms: v.last_update_ms,
            previous_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            client_version: v.client_version,
            bumped_from: None,
            pending: false,
        }
    }
}

/// One round of markers for a transaction, to the partitions one broker leads.
#[derive(Debug, Clone)]
pub struct MarkerRequest {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<(String, i32)>,
}

/// Where markers go: the server writes them in process to the partitions this node leads and
/// sends WriteTxnMarkers to the others. Answers, per partition, Ok or the Kafka error.
pub trait MarkerSink: Send + Sync {
    fn write(
        &self,
        leader: u64,
        request: MarkerRequest,
    ) -> Pin<Box<dyn Future<Output = Vec<((String, i32), Result<(), ResponseError>)>> + Send + '_>>;
}

type Leadership = ([u8; 16], i32);

#[derive(Default)]
struct Shard {
    loaded_from: Option<Leadership>,
    loading: Option<Leadership>,
    txns: HashMap<String, TxnMetadata>,
}

pub struct TxnCoordinator {
    pub settings: TxnSettings,
    pub producer_ids: ProducerIds,
    replicas: Arc<ReplicaManager>,
    controller: Controller,
    partitions: AtomicU32,
    shards: RwLock<Vec<Arc<Mutex<Shard>>>>,
    markers: RwLock<Option<Arc<dyn MarkerSink>>>,
    /// Woken whenever a transaction completes (its markers written and CompleteCommit /
    /// CompleteAbort stored), so an add that found it still completing retries at once.
    completed: tokio::sync::Notify,
}

/// How long AddPartitionsToTxn waits for the producer's previous transaction to finish
/// completing before it answers CONCURRENT_TRANSACTIONS: a client that begins its next
/// transaction right after a commit would otherwise back off (librdkafka: `retry.backoff.ms`,
/// 100 ms) on every transaction.
const ADD_WAITS_FOR_COMPLETION: Duration = Duration::from_secs(2);
/// The longest sleep between two tries while waiting (a wakeup can be missed).
const COMPLETION_POLL: Duration = Duration::from_millis(20);

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kafka's mapping of a failed `__transaction_state` append (`TransactionStateManager`).
fn append_error_code(e: &PartitionError) -> ResponseError {
    match e {
        PartitionError::NotEnoughReplicas { .. }
        | PartitionError::NotEnoughReplicasAfterAppend { .. }
        | PartitionError::ReplicationTimeout { .. } => ResponseError::CoordinatorNotAvailable,
        _ => ResponseError::NotCoordinator,
    }
}

impl TxnCoordinator {
    pub fn new(
        settings: TxnSettings,
        node_id: u64,
        replicas: Arc<ReplicaManager>,
        controller: Controller,
    ) -> TxnCoordinator {
        TxnCoordinator {
            partitions: AtomicU32::new(settings.num_partitions.max(1)),
            settings,
            producer_ids: ProducerIds::new(node_id),
            replicas,
            controller,
            shards: RwLock::new(Vec::new()),
            markers: RwLock::new(None),
            completed: tokio::sync::Notify::new(),
        }
    }

    /// The one sink markers are written through (set by the node once the server exists).
    pub fn set_marker_sink(&self, sink: Arc<dyn MarkerSink>) {
        *self.markers.write().unwrap_or_else(|p| p.into_inner()) = Some(sink);
    }

    /// Follows the topic's actual partition count once it exists.
    pub fn set_partition_count(&self, partitions: u32) {
        if partitions > 0 {
            self.partitions.store(partitions, Ordering::Release);
        }
    }

    /// The `__transaction_state` partition of `transactional_id` (Kafka's `partitionFor`).
    pub fn partition_of(&self, transactional_id: &str) -> u32 {
        partition_for(transactional_id, self.partitions.load(Ordering::Acquire))
    }

    fn shard(&self, partition: u32) -> Arc<Mutex<Shard>> {
        if let Some(shard) = self.shards.read().unwrap_or_else(|p| p.into_inner()).get(partition as usize) {
            return shard.clone();
        }
        let mut shards = self.shards.write().unwrap_or_else(|p| p.into_inner());
        while shards.len() <= partition as usize {
            shards.push(Arc::new(Mutex::new(Shard::default())));
        }
        shards[partition as usize].clone()
    }

    /// The shard of `transactional_id` if this node coordinates it and has loaded it (else
    /// NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while a load it started runs).
    fn coordinating(
        self: &Arc<Self>,
        transactional_id: &str,
    ) -> Result<(u32, Arc<Mutex<Shard>>, Arc<Partition>, Leadership), ResponseError> {
        let partition = self.partition_of(transactional_id);
        let hosted = self
            .replicas
            .get(TRANSACTION_STATE_TOPIC, partition)
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        let leadership = (hosted.topic_id(), hosted.leader_epoch());
        let shard = self.shard(partition);
        let mut guard = lock(&shard);
        if guard.loaded_from == Some(leadership) {
            drop(guard);
            return Ok((partition, shard, hosted, leadership));
        }
        if guard.loading != Some(leadership) {
            guard.loading = Some(leadership);
            drop(guard);
            self.start_load(partition, hosted, leadership);
        }
        Err(ResponseError::CoordinatorLoadInProgress)
    }

    /// Loads a partition's states on the blocking pool, then resumes the transactions it left
    /// in a Prepare state.
    fn start_load(self: &Arc<Self>, partition: u32, hosted: Arc<Partition>, leadership: Leadership) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let coordinator = self.clone();
        runtime.spawn(async move {
            let reader = hosted.clone();
            let loaded = tokio::task::spawn_blocking(move || load(&reader)).await;
            let shard = coordinator.shard(partition);
            let resume: Vec<String> = {
                let mut guard = lock(&shard);
                if guard.loading != Some(leadership) {
                    // Superseded: a load of a newer leadership runs, or the partition moved.
                    return;
                }
                guard.loading = None;
                match loaded {
                    Ok(Ok(txns)) => {
                        guard.txns = txns;
                        guard.loaded_from = Some(leadership);
                        tracing::debug!(
                            partition,
                            transactions = guard.txns.len(),
                            "loaded __transaction_state partition"
                        );
                        guard
                            .txns
                            .values()
                            .filter(|t| matches!(t.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
                            .map(|t| t.transactional_id.clone())
                            .collect()
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(partition, error = %e, "could not load __transaction_state partition");
                        Vec::new()
                    }
                    Err(e) => {
                        tracing::warn!(partition, error = %e, "load of __transaction_state partition failed");
                        Vec::new()
                    }
                }
            };
            for id in resume {
                coordinator.spawn_completion(id);
            }
        });
    }

    /// Drops the shards of partitions this node no longer leads, and starts loading the ones it
    /// now leads (called with every metadata image).
    pub fn follow_leadership(self: &Arc<Self>) {
        let count = self.partitions.load(Ordering::Acquire);
        for partition in 0..count {
            let hosted = self.replicas.get(TRANSACTION_STATE_TOPIC, partition).filter(|p| p.is_leader());
            match hosted {
                Some(hosted) => {
                    let leadership = (hosted.topic_id(), hosted.leader_epoch());
                    let shard = self.shard(partition);
                    let mut guard = lock(&shard);
                    if guard.loaded_from != Some(leadership) && guard.loading != Some(leadership) {
                        guard.loading = Some(leadership);
                        drop(guard);
                        self.start_load(partition, hosted, leadership);
                    }
                }
                None => {
                    let exists = (partition as usize) < self.shards.read().unwrap_or_else(|p| p.into_inner()).len();
                    if exists {
                        let shard = self.shard(partition);
                        let mut guard = lock(&shard);
                        if guard.loaded_from.is_some() {
                            guard.loaded_from = None;
                            guard.txns.clear();
                        }
                    }
                }
            }
        }
    }

    /// Writes `value` (a tombstone when `None`) for `transactional_id` and waits for the ISR.
    async fn persist(
        &self,
        hosted: &Arc<Partition>,
        leadership: Leadership,
        transactional_id: &str,
        value: Option<&TxnLogValue>,
    ) -> Result<(), ResponseError> {
        let key = schema::encode_key(transactional_id).map_err(|_| ResponseError::InvalidRequest)?;
        let value = value.map(schema::encode_value).transpose().map_err(|_| ResponseError::InvalidRequest)?;
        let mut builder = BatchBuilder::new(Compression::None);
        builder.push(now_ms(), Some(&key), value.as_deref(), &[]);
        let batch = builder.build().map_err(|_| ResponseError::UnknownServerError)?.into_bytes();
        let (info, _, leader_epoch) =
            hosted.append_in_epoch(&batch, Acks::All, AppendOrigin::Coordinator).map_err(|e| append_error_code(&e))?;
        if leader_epoch != leadership.1 {
            // Written under a newer leadership than the state it was decided on: that
            // leadership's load reads it from the log; this one's answer is no longer good.
            return Err(ResponseError::NotCoordinator);
        }
        hosted
            .wait_replicated(info.last_offset + 1, leader_epoch, APPEND_TIMEOUT)
            .await
            .map_err(|e| append_error_code(&e))
    }

    /// Moves `transactional_id` to `target` (computed under the shard lock by `decide`, which
    /// also answers the request's error if it refuses): marks it pending, writes the record,
    /// then applies it if the leadership held. `decide` gets the current state (`None`: unknown
    /// id) and returns the new one.
    async fn transition(
        self: &Arc<Self>,
        transactional_id: &str,
        decide: impl FnOnce(Option<&TxnMetadata>) -> Result<TxnMetadata, ResponseError>,
    ) -> Result<TxnMetadata, ResponseError> {
        let (_, shard, hosted, leadership) = self.coordinating(transactional_id)?;
        let (target, was_new) = {
            let mut guard = lock(&shard);
            if guard.loaded_from != Some(leadership) {
                return Err(ResponseError::NotCoordinator);
            }
            let current = guard.txns.get(transactional_id);
            let was_new = current.is_none();
            if current.is_some_and(|t| t.pending) {
                return Err(ResponseError::ConcurrentTransactions);
            }
            let target = decide(current)?;
            if current == Some(&target) {
                return Ok(target);
            }
            let placeholder = current.cloned().unwrap_or_else(|| TxnMetadata { pending: true, ..target.clone() });
            guard.txns.insert(transactional_id.to_string(), TxnMetadata { pending: true, ..placeholder });
            (target, was_new)
        };
        let written = self.persist(&hosted, leadership, transactional_id, Some(&target.value())).await;
        let mut guard = lock(&shard);
        let still_leading = guard.loaded_from == Some(leadership);
        match (&written, still_leading) {
            (Ok(()), true) => {
                guard.txns.insert(transactional_id.to_string(), target.clone());
                Ok(target)
            }
            // The map of another leadership's load is not this transition's to undo.
            (_, false) => Err(written.err().unwrap_or(ResponseError::NotCoordinator)),
            (Err(code), true) => {
                if was_new {
                    guard.txns.remove(transactional_id);
                } else if let Some(t) = guard.txns.get_mut(transactional_id) {
                    t.pending = false;
                }
                Err(*code)
            }
        }
    }

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId`): a new id gets a
    /// producer id at epoch 0; a known one has its epoch bumped, which fences the previous
    /// producer; an open transaction of the previous producer is aborted first (the client is
    /// answered CONCURRENT_TRANSACTIONS and retries). `expected` is the (id, epoch) a KIP-360
    /// client sends to bump its own epoch.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > self.settings.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let fresh =
            self.fresh_id_if(transactional_id, |t| t.is_none_or(|t| t.producer_epoch >= EPOCH_EXHAUSTED)).await?;
        let now = now_ms();
        let mut fence = false;
        let id = transactional_id.to_string();
        let decided = self
            .transition(transactional_id, |current| {
                let Some(current) = current else {
                    let producer_id = fresh.ok_or(ResponseError::ConcurrentTransactions)?;
                    return Ok(TxnMetadata {
                        transactional_id: id.clone(),
                        producer_id,
                        producer_epoch: 0,
                        timeout_ms,
                        state: TxnState::Empty,
                        partitions: BTreeSet::new(),
                        start_ms: -1,
                        last_update_ms: now,
                        previous_producer_id: -1,
                        next_producer_id: -1,
                        client_version: 0,
                        bumped_from: None,
                        pending: false,
                    });
                };
                if let Some((pid, epoch)) = expected {
                    if current.state == TxnState::Empty && current.bumped_from == expected {
                        return Ok(current.clone());
                    }
                    if pid != current.producer_id || epoch != current.producer_epoch {
                        return Err(ResponseError::ProducerFenced);
                    }
                }
                match current.state {
                    TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                        Err(ResponseError::ConcurrentTransactions)
                    }
                    TxnState::Ongoing => {
                        // Fence the previous producer: its transaction aborts under a new epoch.
                        fence = true;
                        Ok(TxnMetadata {
                            producer_epoch: bump(current.producer_epoch),
                            state: TxnState::PrepareAbort,
                            last_update_ms: now,
                            ..current.clone()
                        })
                    }
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead => {
                        let (producer_id, producer_epoch) = match fresh {
                            Some(pid) if current.producer_epoch >= EPOCH_EXHAUSTED => (pid, 0),
                            _ => (current.producer_id, bump(current.producer_epoch)),
                        };
                        Ok(TxnMetadata {
                            producer_id,
                            producer_epoch,
                            timeout_ms,
                            state: TxnState::Empty,
                            partitions: BTreeSet::new(),
                            start_ms: -1,
                            last_update_ms: now,
                            // A new producer session says its version with its first EndTxn.
                            previous_producer_id: -1,
                            next_producer_id: -1,
                            client_version: 0,
                            bumped_from: expected,
                            ..current.clone()
                        })
                    }
                }
            })
            .await?;
        if fence {
            self.spawn_completion(transactional_id.to_string());
            return Err(ResponseError::ConcurrentTransactions);
        }
        Ok((decided.producer_id, decided.producer_epoch))
    }

    /// A fresh producer id if `needed` says the id's current state calls for one, taken from the
    /// quorum before the shard is locked for the transition (no lock is held across the await).
    async fn fresh_id_if(
        self: &Arc<Self>,
        transactional_id: &str,
        needed: impl FnOnce(Option<&TxnMetadata>) -> bool,
    ) -> Result<Option<i64>, ResponseError> {
        let needed = {
            let (_, shard, _, _) = self.coordinating(transactional_id)?;
            let guard = lock(&shard);
            needed(guard.txns.get(transactional_id))
        };
        if !needed {
            return Ok(None);
        }
        let id =
            self.producer_ids.next(&self.controller).await.map_err(|_| ResponseError::CoordinatorLoadInProgress)?;
        Ok(Some(id))
    }

    /// Kafka's producer id / epoch checks of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn.
    fn check_producer(
        current: Option<&TxnMetadata>,
        producer_id: i64,
        epoch: i16,
    ) -> Result<&TxnMetadata, ResponseError> {
        let current = current.ok_or(ResponseError::InvalidProducerIdMapping)?;
        if current.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if current.producer_epoch != epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(current)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the partitions join the transaction (it starts
    /// now if none was open). `client_version` is the transaction version of the client: 2 for
    /// the implicit adds of Produce v12 and TxnOffsetCommit v5, 0 for the client's own requests;
    /// the transaction remembers it, so a timeout abort and the late end after it are judged
    /// by the right version's rules (Kafka's `prepareAddPartitions`).
    pub async fn add_partitions(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        client_version: i16,
    ) -> Result<(), ResponseError> {
        let deadline = tokio::time::Instant::now() + ADD_WAITS_FOR_COMPLETION;
        loop {
            let completed = self.completed.notified();
            match self
                .add_partitions_once(transactional_id, producer_id, producer_epoch, partitions, client_version)
                .await
            {
                Err(ResponseError::ConcurrentTransactions) if tokio::time::Instant::now() < deadline => {
                    let _ = tokio::time::timeout(COMPLETION_POLL, completed).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn add_partitions_once(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        client_version: i16,
    ) -> Result<(), ResponseError> {
        let now = now_ms();
        self.transition(transactional_id, |current| {
            let current = Self::check_producer(current, producer_id, producer_epoch)?;
            match current.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                    return Err(ResponseError::ConcurrentTransactions)
                }
                TxnState::Dead => return Err(ResponseError::InvalidTxnState),
                _ => {}
            }
            if current.state == TxnState::Ongoing && partitions.iter().all(|p| current.partitions.contains(p)) {
                return Ok(current.clone());
            }
            let starting = current.state != TxnState::Ongoing;
            let mut all = if starting { BTreeSet::new() } else { current.partitions.clone() };
            all.extend(partitions.iter().cloned());
            Ok(TxnMetadata {
                state: TxnState::Ongoing,
                partitions: all,
                start_ms: if starting { now } else { current.start_ms },
                last_update_ms: now,
                client_version,
                ..current.clone()
            })
        })
        .await
        .map(|_| ())
    }

    /// AddPartitionsToTxn v4+ with `verify_only` (KIP-890 part 1, Kafka's
    /// `handleVerifyPartitionsInTransaction`): whether each partition is in the producer's
    /// ongoing transaction, asked by a partition leader before the transaction's first batch
    /// there is appended. Nothing is written. The whole answer fails with the producer checks'
    /// error, CONCURRENT_TRANSACTIONS while the transaction is changing or ending; a partition
    /// outside it gets TRANSACTION_ABORTABLE.
    pub fn verify_partitions(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<((String, i32), Result<(), ResponseError>)>, ResponseError> {
        let (_, shard, _, _) = self.coordinating(transactional_id)?;
        let guard = lock(&shard);
        let current = guard.txns.get(transactional_id);
        let current = Self::check_producer(current, producer_id, producer_epoch)?;
        if current.pending || matches!(current.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let ongoing = current.state == TxnState::Ongoing;
        Ok(partitions
            .iter()
            .map(|p| {
                let verdict = if ongoing && current.partitions.contains(p) {
                    Ok(())
                } else {
                    Err(ResponseError::TransactionAbortable)
                };
                (p.clone(), verdict)
            })
            .collect())
    }

    /// EndTxn: PrepareCommit / PrepareAbort is written and answered; the markers follow in the
    /// background. A retry of a finished end with the same result succeeds. Answers the
    /// producer id and epoch the producer continues with.
    ///
    /// Transaction version 2 (`client_version` 2, EndTxn v5+; KIP-890 part 2, Kafka's
    /// `TransactionCoordinator.endTransaction`): every end bumps the epoch; the Prepare state and
    /// the markers carry the bumped epoch, so a late produce of the ended transaction is fenced
    /// at every partition; an end at `EPOCH_EXHAUSTED` bumps to `i16::MAX` for its markers and
    /// moves the id to a fresh producer id at epoch 0 once complete. A retry carries the epoch before the bump (or the
    /// old producer id at the exhausted epoch) and is answered with what the first end
    /// answered. An abort with nothing in the transaction (the client sent records the
    /// partitions never added) only bumps the epoch. While the previous end's markers are in
    /// flight every end is CONCURRENT_TRANSACTIONS (the client retries).
    pub async fn end_txn(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        client_version: i16,
    ) -> Result<(i64, i16), ResponseError> {
        let bumps = client_version >= 2;
        // The bump of an exhausted epoch moves to a fresh producer id.
        let fresh = self
            .fresh_id_if(transactional_id, |t| bumps && t.is_some_and(|t| t.producer_epoch >= EPOCH_EXHAUSTED))
            .await?;
        let now = now_ms();
        let mut started = false;
        let mut answer = (producer_id, producer_epoch);
        self.transition(transactional_id, |current| {
            let current = current.ok_or(ResponseError::InvalidProducerIdMapping)?;
            let stored_bumps = current.client_version >= 2;
            let retry_on_bump = stored_bumps && i32::from(current.producer_epoch) == i32::from(producer_epoch) + 1;
            let retry_on_overflow = stored_bumps
                && current.previous_producer_id == producer_id
                && current.producer_epoch == 0
                && producer_epoch == EPOCH_EXHAUSTED;
            if current.producer_id != producer_id && !retry_on_overflow {
                return Err(ResponseError::InvalidProducerIdMapping);
            }
            // Markers still in flight: whatever this end is (a retry, or under transaction
            // version 2 already the next transaction's end at the bumped epoch, e.g. an abort
            // whose records never reached a partition), it waits for them. Checked before the
            // epoch, or that next end would be fenced (KAFKA-18464).
            if matches!(current.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
                return Err(ResponseError::ConcurrentTransactions);
            }
            let same_epoch = producer_epoch == current.producer_epoch;
            let valid_epoch = match current.state {
                TxnState::CompleteCommit | TxnState::CompleteAbort if stored_bumps => {
                    retry_on_bump || retry_on_overflow || (bumps && same_epoch)
                }
                _ => same_epoch,
            };
            if !valid_epoch {
                return Err(ResponseError::ProducerFenced);
            }
            // The epoch (and id) this end moves to: bumped under transaction version 2.
            let (epoch, next_producer_id) = if !bumps {
                (current.producer_epoch, -1)
            } else if current.producer_epoch >= EPOCH_EXHAUSTED {
                (bump(current.producer_epoch), fresh.ok_or(ResponseError::ConcurrentTransactions)?)
            } else {
                (bump(current.producer_epoch), -1)
            };
            let continues_with =
                if next_producer_id >= 0 { (next_producer_id, 0) } else { (current.producer_id, epoch) };
            match (current.state, commit) {
                (TxnState::Ongoing, _) => {
                    started = true;
                    answer = continues_with;
                    Ok(TxnMetadata {
                        state: if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort },
                        producer_epoch: epoch,
                        next_producer_id,
                        client_version: if bumps { 2 } else { 0 },
                        last_update_ms: now,
                        ..current.clone()
                    })
                }
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if !(bumps && same_epoch) => {
                    answer = (current.producer_id, current.producer_epoch);
                    Ok(current.clone())
                }
                (TxnState::CompleteAbort, true) if stored_bumps && !same_epoch => {
                    // A commit at the epoch before the bump into an abort the client never asked
                    // for (the coordinator's, past the timeout): the producer was fenced, which
                    // a client recovers from; INVALID_TXN_STATE would be fatal (KAFKA-20785).
                    Err(ResponseError::ProducerFenced)
                }
                (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
                    if bumps && same_epoch =>
                {
                    // Nothing was added: no markers, only the bump that fences what is in flight.
                    answer = continues_with;
                    let (producer_id, producer_epoch) = continues_with;
                    Ok(TxnMetadata {
                        producer_id,
                        producer_epoch,
                        state: TxnState::CompleteAbort,
                        partitions: BTreeSet::new(),
                        previous_producer_id: if next_producer_id >= 0 { current.producer_id } else { -1 },
                        next_producer_id: -1,
                        client_version: 2,
                        last_update_ms: now,
                        ..current.clone()
                    })
                }
                _ => Err(ResponseError::InvalidTxnState),
            }
        })
        .await?;
        if started {
            self.spawn_completion(transactional_id.to_string());
        }
        Ok(answer)
    }

    /// The state of a transactional id this node coordinates (DescribeTransactions).
    pub fn describe(self: &Arc<Self>, transactional_id: &str) -> Result<Option<TxnMetadata>, ResponseError> {
        let (_, shard, _, _) = self.coordinating(transactional_id)?;
        let guard = lock(&shard);
        Ok(guard.txns.get(transactional_id).filter(|t| t.producer_id >= 0).cloned())
    }

    /// Every transactional id of the partitions this node coordinates (ListTransactions).
    pub fn list(&self) -> Vec<TxnMetadata> {
        let shards: Vec<Arc<Mutex<Shard>>> = self.shards.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut all: Vec<TxnMetadata> = shards
            .iter()
            .flat_map(|s| {
                let guard = lock(s);
                if guard.loaded_from.is_none() {
                    return Vec::new();
                }
                guard.txns.values().cloned().collect::<Vec<_>>()
            })
            .collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all
    }

    /// Aborts transactions open longer than their timeout, under a bumped epoch so the
    /// producer is fenced (Kafka's `abortTimedOutTransactions`), and forgets finished ids idle
    /// for `transactional.id.expiration.ms`. Called periodically.
    pub async fn expire(self: &Arc<Self>) {
        let now = now_ms();
        let mut timed_out = Vec::new();
        let mut expired = Vec::new();
        for shard in self.shards.read().unwrap_or_else(|p| p.into_inner()).clone() {
            let guard = lock(&shard);
            if guard.loaded_from.is_none() {
                continue;
            }
            for t in guard.txns.values().filter(|t| !t.pending) {
                match t.state {
                    TxnState::Ongoing if t.start_ms.saturating_add(t.timeout_ms as i64) < now => {
                        timed_out.push((t.transactional_id.clone(), t.producer_id, t.producer_epoch, t.start_ms))
                    }
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                        if t.last_update_ms.saturating_add(self.settings.id_expiration_ms) < now =>
                    {
                        expired.push(t.transactional_id.clone())
                    }
                    _ => {}
                }
            }
        }
        for (id, producer_id, epoch, start_ms) in timed_out {
            let aborted = self
                .transition(&id, |current| {
                    let current = Self::check_producer(current, producer_id, epoch)?;
                    // The same transaction as listed: the aborts before this one took time, in
                    // which it may have ended and a new one (same epoch before KIP-890) begun.
                    if current.state != TxnState::Ongoing || current.start_ms != start_ms {
                        return Err(ResponseError::InvalidTxnState);
                    }
                    tracing::info!(transactional_id = %id, producer_id, "aborting a transaction past its timeout");
                    Ok(TxnMetadata {
                        producer_epoch: bump(current.producer_epoch),
                        state: TxnState::PrepareAbort,
                        last_update_ms: now,
                        ..current.clone()
                    })
                })
                .await;
            if aborted.is_ok() {
                self.spawn_completion(id);
            }
        }
        for id in expired {
            let Ok((_, shard, hosted, leadership)) = self.coordinating(&id) else { continue };
            let still_idle = {
                let mut guard = lock(&shard);
                if guard.loaded_from != Some(leadership) {
                    continue;
                }
                match guard.txns.get_mut(&id) {
                    Some(t) if !t.pending && t.last_update_ms.saturating_add(self.settings.id_expiration_ms) < now => {
                        t.pending = true;
                        true
                    }
                    _ => false,
                }
            };
            if !still_idle {
                continue;
            }
            let written = self.persist(&hosted, leadership, &id, None).await;
            let mut guard = lock(&shard);
            if guard.loaded_from != Some(leadership) {
                continue;
            }
            if written.is_ok() {
                guard.txns.remove(&id);
            } else if let Some(t) = guard.txns.get_mut(&id) {
                t.pending = false;
            }
        }
    }

    /// Drives a transaction in a Prepare state to completion in the background.
    fn spawn_completion(self: &Arc<Self>, transactional_id: String) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let coordinator = self.clone();
        runtime.spawn(async move { coordinator.complete(&transactional_id).await });
    }

    /// Writes the markers of a prepared transaction to every partition in it (retrying each
    /// failed one until it succeeds or this node stops coordinating; giving up when a partition
    /// answers that this coordinator is fenced), then CompleteCommit / CompleteAbort.
    async fn complete(self: &Arc<Self>, transactional_id: &str) {
        let sink = loop {
            // A load can resume a transaction before the node has set the sink (its first
            // reconcile runs before the server exists).
            if let Some(sink) = self.markers.read().unwrap_or_else(|p| p.into_inner()).clone() {
                break sink;
            }
            if self.coordinating(transactional_id).is_err() {
                return;
            }
            tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
        };
        let Ok((_, shard, hosted, leadership)) = self.coordinating(transactional_id) else { return };
        let Some(txn) = lock(&shard).txns.get(transactional_id).cloned() else { return };
        let commit = match txn.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return,
        };
        let coordinator_epoch = leadership.1;
        let mut remaining: BTreeSet<(String, i32)> = txn.partitions.clone();
        while !remaining.is_empty() {
            if lock(&shard).loaded_from != Some(leadership) {
                return;
            }
            let image = self.controller.image();
            let mut by_leader: BTreeMap<u64, Vec<(String, i32)>> = BTreeMap::new();
            for (topic, partition) in &remaining {
                match image.topic(topic).and_then(|t| t.partitions.get(*partition as usize)) {
                    // A deleted partition takes no marker (Kafka drops it too).
                    None => {}
                    Some(p) => {
                        if let Some(leader) = p.leader {
                            by_leader.entry(leader).or_default().push((topic.clone(), *partition));
                        }
                    }
                }
            }
            remaining.retain(|(t, p)| image.topic(t).is_some_and(|topic| (*p as usize) < topic.partitions.len()));
            let rounds = by_leader.into_iter().map(|(leader, partitions)| {
                let request = MarkerRequest {
                    producer_id: txn.producer_id,
                    producer_epoch: txn.producer_epoch,
                    commit,
                    coordinator_epoch,
                    partitions,
                };
                sink.write(leader, request)
            });
            for results in futures_util::future::join_all(rounds).await {
                for (partition, result) in results {
                    match marker_outcome(result) {
                        MarkerOutcome::Written => {
                            remaining.remove(&partition);
                        }
                        MarkerOutcome::Retry(code) => {
                            tracing::debug!(transactional_id, ?partition, ?code, "transaction marker not written yet")
                        }
                        MarkerOutcome::Fenced(code) => {
                            // A newer coordinator or producer epoch owns this transaction now;
                            // it completes it (Kafka's `TransactionMarkerRequestCompletionHandler`
                            // stops sending on these too).
                            tracing::warn!(
                                transactional_id,
                                ?partition,
                                ?code,
                                "transaction markers abandoned: this coordinator is fenced"
                            );
                            return;
                        }
                    }
                }
            }
            if !remaining.is_empty() {
                tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
            }
        }
        let now = now_ms();
        // An end that exhausted the epoch moves the id to its next producer id (KIP-890).
        let (producer_id, producer_epoch, previous_producer_id) = if txn.next_producer_id >= 0 {
            (txn.next_producer_id, 0, txn.producer_id)
        } else {
            (txn.producer_id, txn.producer_epoch, txn.previous_producer_id)
        };
        let done = TxnMetadata {
            state: if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort },
            partitions: BTreeSet::new(),
            last_update_ms: now,
            producer_id,
            producer_epoch,
            previous_producer_id,
            next_producer_id: -1,
            ..txn.clone()
        };
        {
            let mut guard = lock(&shard);
            // A completion of an earlier leadership must not take over an equal entry a newer
            // load installed (that load resumes it itself).
            if guard.loaded_from != Some(leadership) {
                return;
            }
            match guard.txns.get_mut(transactional_id) {
                Some(t) if *t == txn => t.pending = true,
                _ => return,
            }
        }
        let written = self.persist(&hosted, leadership, transactional_id, Some(&done.value())).await;
        let retry = {
            let mut guard = lock(&shard);
            if guard.loaded_from != Some(leadership) {
                return;
            }
            match written {
                Ok(()) => {
                    guard.txns.insert(transactional_id.to_string(), done);
                    self.completed.notify_waiters();
                    None
                }
                Err(code) => {
                    if let Some(t) = guard.txns.get_mut(transactional_id) {
                        t.pending = false;
                    }
                    Some(code)
                }
            }
        };
        if let Some(code) = retry {
            tracing::warn!(transactional_id, ?code, "could not complete a transaction; retrying");
            tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
            self.spawn_completion(transactional_id.to_string());
        }
    }
}

/// What the coordinator does with one partition's answer to a marker.
#[derive(Debug, PartialEq, Eq)]
enum MarkerOutcome {
    Written,
    /// Not written yet (a leader moving, an ISR short, a broker down): the next round retries.
    Retry(ResponseError),
    /// The partition has seen a newer producer epoch or a newer coordinator epoch: whoever
    /// holds it completes the transaction, and this coordinator's markers could never land.
    Fenced(ResponseError),
}

fn marker_outcome(result: Result<(), ResponseError>) -> MarkerOutcome {
    match result {
        Ok(()) => MarkerOutcome::Written,
        Err(code @ (ResponseError::InvalidProducerEpoch | ResponseError::TransactionCoordinatorFenced)) => {
            MarkerOutcome::Fenced(code)
        }
        Err(code) => MarkerOutcome::Retry(code),
    }
}

fn bump(epoch: i16) -> i16 {
    epoch.saturating_add(1).min(i16::MAX)
}

/// Reads a `__transaction_state` partition to its log end offset (not its high watermark: see
/// [`Partition::read_to_log_end`]): the last record of each id wins, a tombstone forgets it.
fn load(hosted: &Partition) -> Result<HashMap<String, TxnMetadata>, String> {
    let mut txns = HashMap::new();
    let mut next = hosted.log_start_offset();
    let end = hosted.log_end_offset();
    loop {
        if next >= end {
            break;
        }
        let records = hosted.read_to_log_end(next, 1 << 20).map_err(|e| e.to_string())?;
        if records.is_empty() {
            break;
        }
        let before = next;
        // What cannot be read fails the load (as Kafka's does), never a partial one: an id
        // whose latest state were skipped would be handed a fresh producer id (its zombie
        // unfenced), and a prepared transaction left unresumed would hold its partitions' last
        // stable offsets forever.
        for batch in BatchIter::new(records) {
            let batch = batch.map_err(|e| unreadable(format!("a batch at offset {next}: {e}")))?;
            if batch.last_offset() < next {
                continue;
            }
            let at = batch.base_offset();
            next = batch.last_offset() + 1;
            if batch.header().attributes.is_control() {
                continue;
            }
            let records = batch.record_iter().map_err(|e| unreadable(format!("the batch at {at}: {e}")))?;
            for record in records {
                let record = record.map_err(|e| unreadable(format!("a record of the batch at {at}: {e}")))?;
                let Some(key) = record.key.as_deref() else { continue };
                // Another key version than a transaction's (Kafka's loader skips those too).
                let Ok(id) = schema::decode_key(key) else { continue };
                match record.value.as_deref().map(schema::decode_value) {
                    None => {
                        txns.remove(&id);
                    }
                    Some(Ok(value)) => {
                        txns.insert(id.clone(), TxnMetadata::from_value(id, value));
                    }
                    Some(Err(e)) => {
                        return Err(unreadable(format!("the state of {id:?} in the batch at {at}: {e}")));
                    }
                }
            }
        }
        if next == before {
            break;
        }
    }
    Ok(txns)
}

fn unreadable(what: String) -> String {
    format!("cannot read {what}")
}

/// The marker batch of a transaction for one partition: a control batch of the producer with
/// one record (Kafka's `EndTransactionMarker`).
pub fn marker_batch(producer_id: i64, producer_epoch: i16, commit: bool, coordinator_epoch: i32) -> Bytes {
    use crate::log::producer_state::{ControlType, EndTxnMarker};
    let control = if commit { ControlType::Commit } else { ControlType::Abort };
    let (key, value) = EndTxnMarker { control, coordinator_epoch }.encode();
    let mut builder = BatchBuilder::new(Compression::None)
        .producer(producer_id, producer_epoch, crate::log::batch::NO_SEQUENCE)
        .transactional(true)
        .control(true);
    builder.push(now_ms(), Some(&key), Some(&value), &[]);
    builder.build().expect("a one-record control batch always builds").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_marker_stops_the_completion_and_a_moving_leader_is_retried() {
        assert_eq!(marker_outcome(Ok(())), MarkerOutcome::Written);
        for code in [ResponseError::InvalidProducerEpoch, ResponseError::TransactionCoordinatorFenced] {
            assert_eq!(marker_outcome(Err(code)), MarkerOutcome::Fenced(code));
        }
        for code in [
            ResponseError::NotLeaderOrFollower,
            ResponseError::UnknownTopicOrPartition,
            ResponseError::NotEnoughReplicas,
            ResponseError::NotEnoughReplicasAfterAppend,
            ResponseError::RequestTimedOut,
            ResponseError::KafkaStorageError,
        ] {
            assert_eq!(marker_outcome(Err(code)), MarkerOutcome::Retry(code));
        }
    }
}
