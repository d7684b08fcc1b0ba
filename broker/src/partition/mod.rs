//! A partition replica on this node: its log, its role (leader with the replication state of
//! its followers, or follower of a named leader), leader epoch, high watermark and epoch cache,
//! and the [`ReplicaManager`] that owns every partition of the node.
//!
//! Invariants: `log_start_offset <= high_watermark <= log_end_offset` (asserted after every
//! mutation); readers never see past the high watermark; only the leader of the current leader
//! epoch appends client batches (stamped with that epoch), only a follower appends replicated
//! ones (their offsets and epochs kept) or truncates; the epoch cache (`leader-epoch-checkpoint`,
//! Kafka's format) records where each epoch starts: on a leader from the moment it leads, on a
//! follower only from the batches it appended. On the leader the high watermark is the
//! `replication::leader::LeaderState`'s (minimum log end offset over the ISR); on a follower it
//! is the leader's, capped by its own log end offset.
//! A storage error of an append (disk full, out of descriptors, EIO) fails that append only, with
//! the log cut back (KAFKA_STORAGE_ERROR): logged once per episode, reads go on, and the next
//! append tries the disk again, so a disk that has room again takes writes without a restart.
//! Locks: the log mutex, then the role mutex, never the other way round; neither is held across
//! an `.await`; reads take the log mutex only to find the file slice and read after releasing
//! it.

mod epoch_cache;
mod manager;
pub mod parallel;
pub mod partitioner;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

pub use self::epoch_cache::LeaderEpochCache;
pub use self::manager::{PartitionKey, ReplicaManager};
pub use crate::log::segment::FirstBatch;
use crate::log::{AppendInfo, AppendOrigin, Compression, Log, LogConfig, LogContext, LogError, TxnVerification};
use crate::replication::leader::{AckStatus, FollowerFetch, IsrProposal, LeaderStart, LeaderState};
use crate::replication::truncation::{truncation_for, LeaderEpochEnd, Truncation};

/// Kafka's `replica.lag.time.max.ms` default.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// Ends the name of a deleted partition's directory until it is removed (Kafka's suffix).
pub const DELETED_DIR_SUFFIX: &str = "-delete";

/// Errors of partition operations; the server maps each to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Log(#[from] LogError),
    /// NOT_ENOUGH_REPLICAS: acks=all with an ISR smaller than `min.insync.replicas`.
    #[error("ISR has {isr} replicas, min.insync.replicas is {min_insync_replicas}")]
    NotEnoughReplicas { isr: usize, min_insync_replicas: u32 },
    /// FENCED_LEADER_EPOCH: the request carries an older leader epoch than ours.
    #[error("leader epoch {requested} is older than the current {current}")]
    FencedLeaderEpoch { requested: i32, current: i32 },
    /// UNKNOWN_LEADER_EPOCH: the request carries a newer leader epoch than ours.
    #[error("leader epoch {requested} is newer than the current {current}")]
    UnknownLeaderEpoch { requested: i32, current: i32 },
    /// The directory's `partition.metadata` names another topic id: the files belong to an
    /// older incarnation of the topic (deleted while this node was down or before it could
    /// rename them away) and must never be adopted by this one.
    #[error("{dir} holds topic id {found}, not {expected}")]
    InconsistentTopicId { dir: PathBuf, found: String, expected: String },
    /// KAFKA_STORAGE_ERROR / NOT_LEADER_OR_FOLLOWER during shutdown or deletion.
    #[error("partition {topic}-{partition} is closed")]
    Closed { topic: String, partition: u32 },
    /// NOT_LEADER_OR_FOLLOWER: this replica does not lead (or, for a replicated append, does
    /// not follow); `leader` is the one the metadata names, if any (KIP-951's hint).
    #[error("this replica is not the {expected} (leader: {leader:?})")]
    NotLeaderOrFollower { expected: &'static str, leader: Option<u64> },
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND: appended, but the ISR fell below `min.insync.replicas`
    /// before the high watermark passed the batch.
    #[error("appended, but the ISR shrank to {isr}, below min.insync.replicas {min_insync_replicas}")]
    NotEnoughReplicasAfterAppend { isr: usize, min_insync_replicas: u32 },
    /// REQUEST_TIMED_OUT: acks=all was not satisfied within the request's timeout.
    #[error("replication did not reach offset {required_offset} within {timeout_ms} ms")]
    ReplicationTimeout { required_offset: i64, timeout_ms: u64 },
    /// A follower fetch from a node that is not a replica, or past the leader's log end.
    #[error("{0}")]
    InvalidReplicaFetch(String),
}

/// What the metadata says of one partition's leadership (Kafka's `LeaderAndIsr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: Option<u64>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<u64>,
    pub isr: Vec<u64>,
    /// Replicas fenced in the metadata: not eligible to join the ISR, and the leader's high
    /// watermark does not wait for them.
    pub fenced: Vec<u64>,
}

impl LeaderAndIsr {
    /// `node` alone, leading in `leader_epoch` (single-replica partitions, tests).
    pub fn sole(node: u64, leader_epoch: i32) -> LeaderAndIsr {
        LeaderAndIsr {
            leader: Some(node),
            leader_epoch,
            partition_epoch: 0,
            replicas: vec![node],
            isr: vec![node],
            fenced: vec![],
        }
    }
}

/// This replica's part in the partition.
enum Role {
    Leader(LeaderState),
    /// Following `leader` (`None`: the partition is offline, or this node has not learnt it).
    Follower {
        leader: Option<u64>,
    },
}

struct ReplicaState {
    role: Role,
    /// As last applied from the metadata image.
    assignment: LeaderAndIsr,
}

/// A follower's fetch as the leader sees it (Fetch with a replica id).
#[derive(Debug, Clone, Copy)]
pub struct ReplicaFetch {
    pub replica: u64,
    /// The follower's broker epoch as registered when the fetch arrived (-1 unknown).
    pub broker_epoch: i64,
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    /// Epoch of the last batch in the follower's log (-1: none): the leader answers a
    /// diverging epoch when its log differs there (KIP-320's fetch-based truncation).
    pub last_fetched_epoch: i32,
    /// The follower's log start offset (the low watermark DeleteRecords waits for).
    pub log_start_offset: i64,
    pub max_bytes: usize,
    /// Whether a first batch larger than `max_bytes` is returned whole: only until some
    /// partition of the response has returned data (KIP-74), so a follower catching up on many
    /// partitions gets about the response's limit, not one batch per partition beyond it.
    pub first_batch: FirstBatch,
}

/// The leader's answer to a follower fetch.
#[derive(Debug, Clone)]
pub struct ReplicaRead {
    pub data: FetchedData,
    /// The follower's log diverges: the largest epoch at or below its last fetched one that the
    /// leader has, and where it ends. No records come with it.
    pub diverging: Option<LeaderEpochEnd>,
    /// An ISR expansion to propose to the controller.
    pub proposal: Option<IsrProposal>,
}

/// What a fetch read from one partition.
#[derive(Debug, Clone)]
pub struct FetchedData {
    pub high_watermark: i64,
    /// `<= high_watermark`: no open transaction starts below it (KIP-98).
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Raw batches, starting at the batch that contains the fetch offset.
    pub records: Bytes,
    /// `read_committed`: the aborted transactions overlapping the range read.
    pub aborted: Vec<crate::log::txn_index::AbortedTxn>,
}

/// What a consumer may read (Fetch and ListOffsets `isolation_level`, KIP-98).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Up to the high watermark, aborted data included.
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions to drop.
    ReadCommitted,
}

/// How many replicas must have a produce before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

/// Which offset ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    MaxTimestamp,
    Timestamp(i64),
}

pub struct Partition {
    topic: Arc<str>,
    index: u32,
    topic_id: [u8; 16],
    log: Mutex<Option<Log>>,
    epochs: Mutex<LeaderEpochCache>,
    leader_epoch: AtomicI32,
    high_watermark: AtomicI64,
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    node_id: u64,
    replica_lag_time_max_ms: i64,
    state: Mutex<ReplicaState>,
    /// Bumped when the high watermark, the ISR or the role changes: what acks=all waits on.
    changed: watch::Sender<u64>,
    /// Bumped when a fetch of this partition could answer differently: the log end, log start
    /// or high watermark moved, or the role changed. Long polls wait on the partitions they
    /// read (Kafka's per-partition delayed fetch keys), not on every append of the node.
    progress: watch::Sender<u64>,
    /// Set while appends fail with a storage error: the episode is logged once, at its start
    /// and at its end.
    storage_failing: AtomicBool,
    /// The topic's recompression ([`LogConfig::recompression`]: codec and level in one word,
    /// so an append never pairs one config's codec with another's level), or
    /// [`KEEP_PRODUCER_CODEC`]: read by producers' appends outside the log lock, where they
    /// recompress.
    recompress_to: AtomicU64,
}

/// `recompress_to` for `compression.type=producer`.
const KEEP_PRODUCER_CODEC: u64 = u64::MAX;

/// `config`'s recompression packed for `recompress_to`: the codec id above the level.
fn packed_recompression(config: &LogConfig) -> u64 {
    config
        .recompression()
        .map_or(KEEP_PRODUCER_CODEC, |(codec, level)| (u64::from(codec.id()) << 32) | u64::from(level as u32))
}

impl Partition {
    /// Opens (recovering if needed) the log of `topic-index` in `dir`, as a follower of no one
    /// until the metadata names its role. The high watermark starts at the checkpointed one
    /// (`replication-offset-checkpoint`), within the log's bounds.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        dir: &Path,
        topic: Arc<str>,
        index: u32,
        topic_id: [u8; 16],
        node_id: u64,
        config: LogConfig,
        context: LogContext,
        checkpointed_high_watermark: Option<i64>,
        replica_lag_time_max_ms: i64,
    ) -> Result<Partition, PartitionError> {
        check_partition_metadata(dir, topic_id)?;
        let recompress_to = AtomicU64::new(packed_recompression(&config));
        let log = Log::open(dir, config, context)?;
        write_partition_metadata(dir, topic_id)?;
        let epochs = LeaderEpochCache::open(dir, log.log_end_offset()).map_err(|source| LogError::Io {
            op: "open leader-epoch-checkpoint in",
            path: dir.to_path_buf(),
            source,
        })?;
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let high_watermark = checkpointed_high_watermark.unwrap_or(0).clamp(start, end);
        Ok(Partition {
            topic,
            index,
            topic_id,
            log: Mutex::new(Some(log)),
            epochs: Mutex::new(epochs),
            leader_epoch: AtomicI32::new(-1),
            high_watermark: AtomicI64::new(high_watermark),
            log_start_offset: AtomicI64::new(start),
            log_end_offset: AtomicI64::new(end),
            node_id,
            replica_lag_time_max_ms,
            state: Mutex::new(ReplicaState {
                role: Role::Follower { leader: None },
                assignment: LeaderAndIsr {
                    leader: None,
                    leader_epoch: -1,
                    partition_epoch: -1,
                    replicas: vec![node_id],
                    isr: vec![],
                    fenced: vec![],
                },
            }),
            changed: watch::channel(0).0,
            progress: watch::channel(0).0,
            storage_failing: AtomicBool::new(false),
            recompress_to,
        })
    }

    /// Notes an append that failed: a storage error (disk full, out of descriptors, I/O error)
    /// starts an episode with one clear log line; the other errors are the client's.
    fn storage_failed(&self, error: &LogError, refused: &'static str) {
        let errno = match error {
            LogError::Io { source, .. } => source.raw_os_error(),
            LogError::Offline { .. } => None,
            _ => return,
        };
        if !self.storage_failing.swap(true, Ordering::AcqRel) {
            tracing::error!(
                topic = %self.topic,
                partition = self.index,
                errno = errno.unwrap_or(0),
                %error,
                "partition storage failed: {refused} answer KAFKA_STORAGE_ERROR (each cut back, nothing \
                 kept) until the disk takes writes again; reads and other partitions are unaffected"
            );
        }
    }

    /// Notes an append that succeeded: ends a storage episode (one load on the hot path
    /// otherwise), and writes the epoch cache again if its file fell behind during one.
    fn storage_ok(&self) {
        if !self.storage_failing.load(Ordering::Acquire) || !self.storage_failing.swap(false, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(topic = %self.topic, partition = self.index, "partition storage recovered: appends succeed again");
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = epochs.persist_if_behind() {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not persist leader epoch");
            self.storage_failing.store(true, Ordering::Release);
        }
    }

    /// A `leader-epoch-checkpoint` write failed: the cache holds the epoch, its file is written
    /// again after the next successful append (the storage episode's end).
    fn epoch_checkpoint_failed(&self, error: &std::io::Error) {
        tracing::warn!(topic = %self.topic, partition = self.index, %error, "could not persist leader epoch; retried after the next successful append");
        self.storage_failing.store(true, Ordering::Release);
    }

    /// Whether the last append failed with a storage error (an episode is going on).
    pub fn storage_failing(&self) -> bool {
        self.storage_failing.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, ReplicaState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn signal(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        self.progressed();
    }

    /// Wakes the fetches parked on this partition.
    fn progressed(&self) {
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What a long-poll fetch of this partition waits on (see `progress`).
    pub fn subscribe_progress(&self) -> watch::Receiver<u64> {
        self.progress.subscribe()
    }

    fn now_ms(&self, log: &Log) -> i64 {
        log.clock().now_ms()
    }

    /// Publishes the high watermark the role decided (the leader's `LeaderState`, the leader's
    /// answer on a follower, a truncation's clamp); the invariant is checked by `assert_offsets`.
    fn store_high_watermark(&self, high_watermark: i64) {
        if self.high_watermark.swap(high_watermark, Ordering::AcqRel) != high_watermark {
            self.progressed();
        }
    }

    /// `log_start_offset <= high_watermark <= log_end_offset`. Called with the log mutex held
    /// after each mutation (every store of these offsets happens under it, so the three loads
    /// see one state); three atomic loads, cheap enough to check always.
    fn assert_offsets(&self) {
        let (start, high_watermark, end) = (self.log_start_offset(), self.high_watermark(), self.log_end_offset());
        assert!(
            start <= high_watermark && high_watermark <= end,
            "{}-{}: log_start_offset {start} <= high_watermark {high_watermark} <= log_end_offset {end} broken",
            self.topic,
            self.index
        );
    }

    fn log(&self) -> Result<MutexGuard<'_, Option<Log>>, PartitionError> {
        let guard = self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            return Err(PartitionError::Closed { topic: self.topic.to_string(), partition: self.index });
        }
        Ok(guard)
    }

    pub fn topic(&self) -> &Arc<str> {
        &self.topic
    }
    pub fn index(&self) -> u32 {
        self.index
    }
    pub fn topic_id(&self) -> [u8; 16] {
        self.topic_id
    }
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }
    /// The producers this leader knows (DescribeProducers): each one's state in the log.
    pub fn producers(&self) -> Result<Vec<crate::log::producer_state::ProducerEntry>, PartitionError> {
        self.check_leader()?;
        let guard = self.log()?;
        Ok(guard.as_ref().expect("checked by log()").producer_state().producers().copied().collect())
    }
    /// Starts verifying a transactional producer's first batch here with its coordinator
    /// (KIP-890 part 1; see [`crate::log::producer_state::ProducerState::start_verification`]).
    /// Leader only.
    pub fn start_txn_verification(
        &self,
        producer_id: i64,
        epoch: i16,
    ) -> Result<Option<crate::log::producer_state::VerificationGuard>, PartitionError> {
        self.check_leader()?;
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        Ok(log.start_txn_verification(producer_id, epoch).map_err(crate::log::LogError::Producer)?)
    }
    /// Drops a verification the coordinator refused.
    pub fn end_txn_verification(&self, producer_id: i64, verification: crate::log::producer_state::VerificationGuard) {
        if let Ok(mut guard) = self.log() {
            if let Some(log) = guard.as_mut() {
                log.end_txn_verification(producer_id, verification);
            }
        }
    }
    /// The last stable offset (KIP-98): the high watermark, or the first offset of the oldest
    /// transaction still open below it.
    pub fn last_stable_offset(&self) -> Result<i64, PartitionError> {
        let guard = self.log()?;
        Ok(guard.as_ref().expect("checked by log()").last_stable_offset(self.high_watermark()))
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    /// The ISR as committed in the metadata.
    pub fn isr(&self) -> Vec<u64> {
        self.state().assignment.isr.clone()
    }
    pub fn replicas(&self) -> Vec<u64> {
        self.state().assignment.replicas.clone()
    }
    pub fn is_leader(&self) -> bool {
        matches!(self.state().role, Role::Leader(_))
    }
    /// The leader this replica follows, if it is a follower of a known leader.
    pub fn following(&self) -> Option<u64> {
        match self.state().role {
            Role::Follower { leader } => leader,
            Role::Leader(_) => None,
        }
    }
    /// The leadership last applied from the metadata image.
    pub fn leader_and_isr(&self) -> LeaderAndIsr {
        self.state().assignment.clone()
    }
    /// The leader as the metadata names it.
    pub fn leader(&self) -> Option<u64> {
        self.state().assignment.leader
    }
    /// Each follower's log end offset as the leader last saw it (leaders only).
    pub fn follower_log_end_offsets(&self) -> Vec<(u64, i64)> {
        let state = self.state();
        match &state.role {
            Role::Leader(ls) => state
                .assignment
                .replicas
                .iter()
                .filter(|&&r| r != self.node_id)
                .filter_map(|&r| ls.follower(r).map(|f| (r, f.log_end_offset)))
                .collect(),
            Role::Follower { .. } => Vec::new(),
        }
    }
    /// The epoch of the last batch this replica knows of (the follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner()).latest_epoch()
    }
    /// Bytes of the partition's segment files.
    pub fn size_bytes(&self) -> u64 {
        self.log().ok().and_then(|log| log.as_ref().map(Log::size_bytes)).unwrap_or(0)
    }

    /// Applies the partition's leadership from the metadata image: becomes leader (a new
    /// `LeaderState` starting at the current high watermark, the epoch cache marking where the
    /// new epoch starts), takes a committed ISR change of its own epoch, or becomes a follower.
    pub(crate) fn apply_leader_and_isr(&self, state: LeaderAndIsr) -> Result<(), PartitionError> {
        let guard = self.log()?;
        let log = guard.as_ref().expect("checked by log()");
        let now_ms = self.now_ms(log);
        let log_end_offset = log.log_end_offset();
        let mut current = self.state();
        if current.assignment == state {
            return Ok(());
        }
        let me = self.node_id;
        let leads = state.leader == Some(me) && state.isr.contains(&me);
        match &mut current.role {
            Role::Leader(ls) if leads && ls.leader_epoch() == state.leader_epoch => {
                ls.on_partition_committed(
                    state.leader_epoch,
                    state.partition_epoch,
                    &state.replicas,
                    state.isr.clone(),
                );
            }
            _ if leads => {
                {
                    let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = epochs.assign(state.leader_epoch, log_end_offset) {
                        self.epoch_checkpoint_failed(&e);
                    }
                }
                current.role = Role::Leader(LeaderState::new(LeaderStart {
                    leader: me,
                    leader_epoch: state.leader_epoch,
                    partition_epoch: state.partition_epoch,
                    replicas: state.replicas.clone(),
                    isr: state.isr.clone(),
                    high_watermark: self.high_watermark(),
                    log_end_offset,
                    replica_lag_time_max_ms: self.replica_lag_time_max_ms,
                    now_ms,
                }));
                tracing::info!(topic = %self.topic, partition = self.index, leader_epoch = state.leader_epoch, isr = ?state.isr, log_end_offset, "became leader");
            }
            role => {
                let same = matches!(role, Role::Follower { leader } if *leader == state.leader)
                    && current.assignment.leader_epoch == state.leader_epoch;
                current.role = Role::Follower { leader: state.leader };
                if !same {
                    tracing::info!(topic = %self.topic, partition = self.index, leader = ?state.leader, leader_epoch = state.leader_epoch, "became follower");
                }
            }
        }
        // A new or changed ISR, or fewer eligible replicas, may let the high watermark move.
        if let Role::Leader(ls) = &mut current.role {
            ls.set_ineligible(state.fenced.clone());
            if let Some(hw) = ls.maybe_advance_high_watermark(log_end_offset, now_ms) {
                self.store_high_watermark(hw);
            }
        }
        self.leader_epoch.store(state.leader_epoch, Ordering::Release);
        current.assignment = state;
        drop(current);
        self.assert_offsets();
        drop(guard);
        self.signal();
        Ok(())
    }

    /// The controller refused the ISR change `proposal`: if it is still the outstanding one, this
    /// leader may propose again (an answer to an older proposal changes nothing).
    pub fn on_isr_change_failed(&self, proposal: &IsrProposal) {
        if let Role::Leader(ls) = &mut self.state().role {
            ls.on_proposal_rejected(proposal);
        }
    }

    /// Whether `proposal` is still this leader's outstanding ISR change (sent again after a
    /// timeout while it is).
    pub fn isr_change_outstanding(&self, proposal: &IsrProposal) -> bool {
        match &self.state().role {
            Role::Leader(ls) => ls.is_outstanding(proposal),
            Role::Follower { .. } => false,
        }
    }

    /// ISR shrink check (leaders only): followers that have not caught up within
    /// `replica.lag.time.max.ms` leave, through the returned proposal.
    pub fn maybe_shrink_isr(&self) -> Option<IsrProposal> {
        let guard = self.log().ok()?;
        let log = guard.as_ref()?;
        let (now_ms, log_end_offset) = (self.now_ms(log), log.log_end_offset());
        match &mut self.state().role {
            Role::Leader(ls) => ls.maybe_shrink_isr(log_end_offset, now_ms),
            Role::Follower { .. } => None,
        }
    }

    pub(crate) fn set_config(&self, config: LogConfig) -> Result<(), PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        if log.config() != &config {
            self.recompress_to.store(packed_recompression(&config), Ordering::Relaxed);
            log.set_config(config);
        }
        Ok(())
    }

    pub fn config(&self) -> Result<LogConfig, PartitionError> {
        Ok(self.log()?.as_ref().expect("checked by log()").config().clone())
    }

    /// Checks a client's view of the leader epoch (-1 means "no check", as in Kafka).
    pub fn check_leader_epoch(&self, requested: i32) -> Result<(), PartitionError> {
        let current = self.leader_epoch();
        match requested {
            r if r < 0 || r == current => Ok(()),
            r if r < current => Err(PartitionError::FencedLeaderEpoch { requested: r, current }),
            r => Err(PartitionError::UnknownLeaderEpoch { requested: r, current }),
        }
    }

    /// Appends a producer's batches as leader, stamped with the current leader epoch. With
    /// `acks=all` the ISR must meet `min.insync.replicas` first (NOT_ENOUGH_REPLICAS); the
    /// caller then waits with [`Partition::wait_replicated`] for the high watermark to pass the
    /// batch. With no follower in the ISR the high watermark moves at once.
    pub fn append_as_leader(
        &self,
        records: &Bytes,
        acks: Acks,
        origin: AppendOrigin,
    ) -> Result<(AppendInfo, i64), PartitionError> {
        self.append_in_epoch(records, acks, origin).map(|(info, log_start_offset, _)| (info, log_start_offset))
    }

    /// [`Partition::append_as_leader`], also answering the leader epoch the batches were written
    /// in (what [`Partition::wait_replicated`] must be asked about).
    pub fn append_in_epoch(
        &self,
        records: &Bytes,
        acks: Acks,
        origin: AppendOrigin,
    ) -> Result<(AppendInfo, i64, i32), PartitionError> {
        self.append_verified(records, acks, origin, TxnVerification::NotRequired)
    }

    /// [`Partition::append_in_epoch`] with a transaction verification (see
    /// [`crate::log::Log::append_as_leader_verified`]).
    pub fn append_verified(
        &self,
        records: &Bytes,
        acks: Acks,
        origin: AppendOrigin,
        verification: TxnVerification,
    ) -> Result<(AppendInfo, i64, i32), PartitionError> {
        // Outside the log lock: recompressing a batch is the costliest thing an append can do.
        let recompressed = self.recompressed(records, origin)?;
        let records = recompressed.as_ref().unwrap_or(records);
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        let now_ms = self.now_ms(log);
        let mut state = self.state();
        let leader = state.assignment.leader;
        let Role::Leader(ls) = &mut state.role else {
            return Err(PartitionError::NotLeaderOrFollower { expected: "leader", leader });
        };
        let isr_len = ls.isr().len();
        let min_insync_replicas = log.config().min_insync_replicas;
        if acks == Acks::All && isr_len < min_insync_replicas as usize {
            return Err(PartitionError::NotEnoughReplicas { isr: isr_len, min_insync_replicas });
        }
        let leader_epoch = ls.leader_epoch();
        let info = log
            .append_as_leader_verified(records, leader_epoch, origin, verification)
            .inspect_err(|e| self.storage_failed(e, "appends"))?;
        let end = log.log_end_offset();
        self.log_end_offset.store(end, Ordering::Release);
        self.progressed();
        let moved = ls.on_leader_append(end, now_ms);
        if let Some(hw) = moved {
            self.store_high_watermark(hw);
        }
        log.on_high_watermark(self.high_watermark());
        drop(state);
        self.assert_offsets();
        let log_start_offset = log.log_start_offset();
        drop(guard);
        if moved.is_some() {
            self.signal();
        }
        self.storage_ok();
        Ok((info, log_start_offset, leader_epoch))
    }

    /// A client's batches in the topic's `compression.type` when it names a codec and a batch
    /// has another (Kafka's `LogValidator` recompresses the same way); `None` when they are
    /// kept as sent. Coordinators write their own topics, whose codec is the producer's.
    fn recompressed(&self, records: &Bytes, origin: AppendOrigin) -> Result<Option<Bytes>, PartitionError> {
        let packed = self.recompress_to.load(Ordering::Relaxed);
        let target = Compression::from_id((packed >> 32) as u8);
        let Some(target) = target.filter(|_| packed != KEEP_PRODUCER_CODEC && origin == AppendOrigin::Client) else {
            return Ok(None);
        };
        crate::log::records::recompress(records, target, Some(packed as u32 as i32))
            .map_err(|e| PartitionError::Log(LogError::CorruptBatch(e)))
    }

    /// acks=all: waits until the high watermark reaches `required_offset` (one past the
    /// appended batch) in `leader_epoch`, at most `timeout`. Fails with
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below `min.insync.replicas` by then,
    /// NOT_LEADER_OR_FOLLOWER when leadership moved (the batch may be truncated away), and a
    /// timeout otherwise (Kafka's delayed produce).
    pub async fn wait_replicated(
        &self,
        required_offset: i64,
        leader_epoch: i32,
        timeout: Duration,
    ) -> Result<(), PartitionError> {
        let min_insync_replicas = self.config()?.min_insync_replicas;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            {
                let state = self.state();
                match &state.role {
                    Role::Leader(ls) if ls.leader_epoch() == leader_epoch => {
                        match ls.ack_status(required_offset, min_insync_replicas) {
                            AckStatus::Done => return Ok(()),
                            AckStatus::NotEnoughReplicasAfterAppend { isr, min_insync_replicas } => {
                                return Err(PartitionError::NotEnoughReplicasAfterAppend { isr, min_insync_replicas })
                            }
                            AckStatus::Waiting => {}
                        }
                    }
                    _ => {
                        return Err(PartitionError::NotLeaderOrFollower {
                            expected: "leader",
                            leader: state.assignment.leader,
                        })
                    }
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(PartitionError::ReplicationTimeout {
                        required_offset,
                        timeout_ms: timeout.as_millis() as u64,
                    })
                }
            }
        }
    }

    /// Serves a follower's fetch on the leader: checks the epochs (FENCED/UNKNOWN_LEADER_EPOCH,
    /// a diverging epoch), reads up to the log end offset (not the high watermark), and records
    /// the follower's progress, which may move the high watermark and propose an ISR expansion.
    pub fn read_for_follower(&self, fetch: ReplicaFetch) -> Result<ReplicaRead, PartitionError> {
        self.check_leader_epoch(fetch.current_leader_epoch)?;
        let (slice, data, proposal, moved) = {
            let guard = self.log()?;
            let log = guard.as_ref().expect("checked by log()");
            let now_ms = self.now_ms(log);
            let (log_start_offset, log_end_offset) = (log.log_start_offset(), log.log_end_offset());
            let mut state = self.state();
            let leader = state.assignment.leader;
            let Role::Leader(ls) = &mut state.role else {
                return Err(PartitionError::NotLeaderOrFollower { expected: "leader", leader });
            };
            if fetch.last_fetched_epoch >= 0 {
                let (epoch, end_offset) = {
                    let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
                    epochs.end_offset_for(fetch.last_fetched_epoch, ls.leader_epoch(), log_end_offset)
                };
                if end_offset < fetch.fetch_offset || epoch < fetch.last_fetched_epoch {
                    let data = FetchedData {
                        high_watermark: ls.high_watermark(),
                        last_stable_offset: log.last_stable_offset(ls.high_watermark()),
                        log_start_offset,
                        log_end_offset,
                        records: Bytes::new(),
                        aborted: Vec::new(),
                    };
                    let diverging = Some(LeaderEpochEnd { leader_epoch: epoch, end_offset });
                    return Ok(ReplicaRead { data, diverging, proposal: None });
                }
            }
            if fetch.fetch_offset < log_start_offset || fetch.fetch_offset > log_end_offset {
                return Err(PartitionError::Log(LogError::OffsetOutOfRange {
                    offset: fetch.fetch_offset,
                    log_start_offset,
                    log_end_offset,
                }));
            }
            let slice = log.slice(fetch.fetch_offset, log_end_offset)?;
            let decision = ls
                .on_follower_fetch(FollowerFetch {
                    replica: fetch.replica,
                    broker_epoch: fetch.broker_epoch,
                    fetch_offset: fetch.fetch_offset,
                    log_start_offset: fetch.log_start_offset,
                    leader_log_end_offset: log_end_offset,
                    now_ms,
                })
                .map_err(|e| PartitionError::InvalidReplicaFetch(e.to_string()))?;
            if let Some(hw) = decision.high_watermark {
                self.store_high_watermark(hw);
            }
            let data = FetchedData {
                high_watermark: ls.high_watermark(),
                last_stable_offset: log.last_stable_offset(ls.high_watermark()),
                log_start_offset,
                log_end_offset,
                records: Bytes::new(),
                aborted: Vec::new(),
            };
            drop(state);
            self.assert_offsets();
            let moved = decision.high_watermark.is_some() || decision.log_start_offset_moved;
            (slice, data, decision.propose, moved)
        };
        if moved {
            self.signal();
        }
        let records = match slice {
            Some(slice) => {
                slice.read_batches_limited(fetch.max_bytes, data.log_end_offset, fetch.first_batch).map_err(
                    |source| LogError::Io { op: "read", path: format!("{}-{}", self.topic, self.index).into(), source },
                )?
            }
            None => Bytes::new(),
        };
        Ok(ReplicaRead { data: FetchedData { records, ..data }, diverging: None, proposal })
    }

    /// Appends batches fetched from the leader (their offsets and epochs kept; the epoch cache
    /// learns each new epoch from the batch that starts it), then takes the leader's high
    /// watermark (capped by this log's end) and log start offset.
    pub fn append_as_follower(
        &self,
        records: &Bytes,
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) -> Result<(), PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        {
            let state = self.state();
            if !matches!(state.role, Role::Follower { .. }) {
                return Err(PartitionError::NotLeaderOrFollower {
                    expected: "follower",
                    leader: state.assignment.leader,
                });
            }
        }
        if !records.is_empty() {
            let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
            self.restart_at_a_batch_across_the_start(log, &mut epochs, records)?;
            let info = log.append_as_follower(records).inspect_err(|e| self.storage_failed(e, "replicated appends"))?;
            self.storage_ok();
            let mut rest = &records[..];
            while rest.len() >= crate::log::batch::HEADER_SIZE {
                let Ok(header) = crate::log::batch::BatchHeader::read(rest) else { break };
                if epochs.latest_epoch().is_none_or(|latest| header.partition_leader_epoch > latest) {
                    if let Err(e) = epochs.assign(header.partition_leader_epoch, header.base_offset) {
                        self.epoch_checkpoint_failed(&e);
                    }
                }
                rest = &rest[header.size().min(rest.len())..];
            }
            debug_assert!(info.last_offset < log.log_end_offset());
        }
        if leader_log_start_offset > log.log_start_offset() && leader_log_start_offset <= log.log_end_offset() {
            log.delete_records_before(leader_log_start_offset)?;
        }
        let end = log.log_end_offset();
        self.log_end_offset.store(end, Ordering::Release);
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        self.progressed();
        let high_watermark = leader_high_watermark.min(end).max(log.log_start_offset());
        if high_watermark != self.high_watermark() {
            self.store_high_watermark(high_watermark);
        }
        log.on_high_watermark(high_watermark);
        self.assert_offsets();
        Ok(())
    }

    /// Where this follower cuts its log given the leader's end of an epoch (KIP-101/KIP-279),
    /// and the cut itself: the log, the epoch cache and the high watermark follow it.
    pub fn truncate_on_divergence(&self, leader: LeaderEpochEnd) -> Result<Truncation, PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        let truncation = truncation_for(&*epochs, log.log_end_offset(), self.high_watermark(), leader);
        if truncation.offset < log.log_end_offset() {
            tracing::info!(topic = %self.topic, partition = self.index, from = log.log_end_offset(), to = truncation.offset, ?leader, "truncating a divergent suffix");
            log.truncate_to(truncation.offset)?;
        }
        self.after_truncation(log, &mut epochs)?;
        Ok(truncation)
    }

    /// An empty follower log starts at the leader's log start S; DeleteRecords can put S inside
    /// a batch [B, L], which the leader serves whole from B. The log then restarts at B and
    /// takes the batch (the leader's log start applies after it), as Kafka's `Partition` does
    /// on `UnexpectedAppendOffsetException`; refused, the follower would fetch it forever.
    fn restart_at_a_batch_across_the_start(
        &self,
        log: &mut Log,
        epochs: &mut LeaderEpochCache,
        records: &Bytes,
    ) -> Result<(), PartitionError> {
        let end = log.log_end_offset();
        if log.log_start_offset() != end {
            return Ok(());
        }
        let Ok(first) = crate::log::batch::BatchHeader::read(records) else { return Ok(()) };
        if first.base_offset < end && first.last_offset() >= end {
            tracing::info!(topic = %self.topic, partition = self.index, from = end, to = first.base_offset, "the leader's log start is inside a batch: restarting the empty log at the batch");
            log.truncate_fully_and_start_at(first.base_offset)?;
            self.after_truncation(log, epochs)?;
        }
        Ok(())
    }

    /// A follower whose fetch offset fell out of the leader's log: below its start (the leader
    /// deleted what we lack: start over there) or past its end (keep only what is committed).
    pub fn reset_out_of_range(
        &self,
        leader_log_start_offset: i64,
        leader_high_watermark: i64,
    ) -> Result<(), PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        if log.log_end_offset() < leader_log_start_offset {
            tracing::info!(topic = %self.topic, partition = self.index, leader_log_start_offset, "behind the leader's log start: starting over there");
            log.truncate_fully_and_start_at(leader_log_start_offset)?;
            self.store_high_watermark(leader_log_start_offset);
        } else if leader_high_watermark >= 0 && leader_high_watermark < log.log_end_offset() {
            log.truncate_to(leader_high_watermark)?;
        }
        self.after_truncation(log, &mut epochs)
    }

    /// After a follower cut its log: the epoch cache drops the epochs that started past the new
    /// end, and the published offsets follow the log, the high watermark clamped into it.
    fn after_truncation(&self, log: &Log, epochs: &mut LeaderEpochCache) -> Result<(), PartitionError> {
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        // An emptied log keeps no epoch (Kafka's `truncateFullyAndStartAt` clears the cache).
        let cut = if start == end { epochs.clear() } else { epochs.truncate_from_end(end) };
        cut.map_err(|source| LogError::Io {
            op: "truncate leader-epoch-checkpoint in",
            path: log.dir().to_path_buf(),
            source,
        })?;
        self.log_end_offset.store(end, Ordering::Release);
        self.log_start_offset.store(start, Ordering::Release);
        self.progressed();
        self.store_high_watermark(self.high_watermark().clamp(start, end));
        self.assert_offsets();
        Ok(())
    }

    /// Reads up to `max_bytes` from `fetch_offset`, never past the high watermark; a first batch
    /// larger than `max_bytes` is returned whole only with [`FirstBatch::Whole`] (a fetch grants
    /// that to its first partition with data, KIP-74).
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        first_batch: FirstBatch,
        isolation: Isolation,
    ) -> Result<FetchedData, PartitionError> {
        let high_watermark = self.high_watermark();
        let (slice, log_start_offset, log_end_offset, last_stable_offset, aborted) = {
            let guard = self.log()?;
            let log = guard.as_ref().expect("checked by log()");
            let last_stable_offset = log.last_stable_offset(high_watermark);
            let (upper, aborted) = match isolation {
                Isolation::ReadUncommitted => (high_watermark, Vec::new()),
                Isolation::ReadCommitted => {
                    (last_stable_offset, log.aborted_transactions(fetch_offset, last_stable_offset))
                }
            };
            (log.slice(fetch_offset, upper)?, log.log_start_offset(), log.log_end_offset(), last_stable_offset, aborted)
        };
        let upper = match isolation {
            Isolation::ReadUncommitted => high_watermark,
            Isolation::ReadCommitted => last_stable_offset,
        };
        let records = match slice {
            Some(slice) => slice.read_batches_limited(max_bytes, upper, first_batch).map_err(|source| {
                LogError::Io { op: "read", path: format!("{}-{}", self.topic, self.index).into(), source }
            })?,
            None => Bytes::new(),
        };
        // Only the aborted transactions the returned records overlap (Kafka bounds the list by
        // the fetched data's end): a consumer far behind on a partition with many aborts got
        // every one up to the last stable offset in each response.
        let mut aborted = aborted;
        if !aborted.is_empty() {
            // The headers only: the batches' bytes are the log's, checked when written.
            let (mut rest, mut data_end) = (&records[..], fetch_offset);
            while let Some((_, size)) =
                crate::log::batch::BatchHeader::peek_size(rest).filter(|(_, n)| *n <= rest.len())
            {
                if let Ok(header) = crate::log::batch::BatchHeader::read(rest) {
                    data_end = header.last_offset() + 1;
                }
                rest = &rest[size..];
            }
            aborted.retain(|t| t.first_offset < data_end);
        }
        Ok(FetchedData { high_watermark, last_stable_offset, log_start_offset, log_end_offset, records, aborted })
    }

    /// Reads up to `max_bytes` (a larger first batch whole) from `fetch_offset` to the log end
    /// offset, past the high watermark: a coordinator loading its internal partition as the new
    /// leader (Kafka loads to the log end too). What the previous leader acknowledged is in this
    /// log, maybe still above its high watermark until the followers fetch again; a load to the
    /// high watermark would miss it (a PrepareCommit the client was answered for, read as
    /// Ongoing, would later be aborted on timeout). The leader's own log is never cut back
    /// while it leads, and a coordinator unloads when it stops leading.
    pub fn read_to_log_end(&self, fetch_offset: i64, max_bytes: usize) -> Result<Bytes, PartitionError> {
        let (slice, log_end_offset) = {
            let guard = self.log()?;
            let log = guard.as_ref().expect("checked by log()");
            let log_end_offset = log.log_end_offset();
            (log.slice(fetch_offset, log_end_offset)?, log_end_offset)
        };
        match slice {
            Some(slice) => slice.read_batches_limited(max_bytes, log_end_offset, FirstBatch::Whole).map_err(|source| {
                PartitionError::from(LogError::Io {
                    op: "read",
                    path: format!("{}-{}", self.topic, self.index).into(),
                    source,
                })
            }),
            None => Ok(Bytes::new()),
        }
    }

    /// NOT_LEADER_OR_FOLLOWER unless this replica leads.
    pub fn check_leader(&self) -> Result<(), PartitionError> {
        let state = self.state();
        match state.role {
            Role::Leader(_) => Ok(()),
            Role::Follower { leader } => Err(PartitionError::NotLeaderOrFollower { expected: "leader", leader }),
        }
    }

    /// ListOffsets: `(offset, timestamp)`; timestamp -1 where Kafka answers none.
    /// ListOffsets: (offset, timestamp, leader epoch). The epoch is the one the offset was
    /// written in (Kafka's `fetchOffsetByTimestamp`: the epoch cache's for the log start, the
    /// found batch's for a timestamp), the current one for the latest offset; -1 when unknown.
    /// A client validates its position with it (KIP-320), so the current epoch for an old
    /// offset would hide a truncation.
    pub fn list_offset(
        &self,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<Option<(i64, i64, i32)>, PartitionError> {
        self.check_leader()?;
        let guard = self.log()?;
        let log = guard.as_ref().expect("checked by log()");
        // read_committed: the latest offset is the last stable offset (KIP-98).
        let high_watermark = match isolation {
            Isolation::ReadUncommitted => self.high_watermark(),
            Isolation::ReadCommitted => log.last_stable_offset(self.high_watermark()),
        };
        let found = match spec {
            OffsetSpec::Earliest => Some((log.log_start_offset(), -1)),
            OffsetSpec::Latest => return Ok(Some((high_watermark, -1, self.leader_epoch()))),
            OffsetSpec::MaxTimestamp => log.max_timestamp_offset()?.filter(|(o, _)| *o < high_watermark),
            OffsetSpec::Timestamp(ts) => log.offset_for_timestamp(ts)?.filter(|(o, _)| *o < high_watermark),
        };
        drop(guard);
        let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        Ok(found.map(|(offset, timestamp)| (offset, timestamp, epochs.epoch_at(offset).unwrap_or(-1))))
    }

    /// OffsetForLeaderEpoch: the end offset of `leader_epoch` as this replica knows it, and the
    /// largest epoch at or below it. `None` if the epoch is older than anything we have.
    pub fn end_offset_for_epoch(&self, leader_epoch: i32) -> (i32, i64) {
        let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        epochs.end_offset_for(leader_epoch, self.leader_epoch(), self.log_end_offset())
    }

    /// DeleteRecords: moves the log start offset, at most to the high watermark.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
        self.check_leader()?;
        let high_watermark = self.high_watermark();
        let target = if offset == -1 { high_watermark } else { offset };
        if target > high_watermark || target < 0 {
            return Err(PartitionError::Log(LogError::OffsetOutOfRange {
                offset: target,
                log_start_offset: self.log_start_offset(),
                log_end_offset: high_watermark,
            }));
        }
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        let start = log.delete_records_before(target)?;
        self.log_start_offset.store(start, Ordering::Release);
        self.assert_offsets();
        drop(guard);
        // Parked follower fetches answer now, carrying the new log start offset.
        self.progressed();
        Ok(start)
    }

    /// DeleteRecords on a replicated partition (Kafka's delayed delete records): waits until
    /// every live replica's log start offset reached `target`, at most `timeout`, and answers
    /// the low watermark then. NOT_LEADER_OR_FOLLOWER if leadership moves meanwhile,
    /// REQUEST_TIMED_OUT when the followers do not get there in time.
    pub async fn wait_low_watermark(&self, target: i64, timeout: Duration) -> Result<i64, PartitionError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            {
                let state = self.state();
                let Role::Leader(ls) = &state.role else {
                    return Err(PartitionError::NotLeaderOrFollower {
                        expected: "leader",
                        leader: state.assignment.leader,
                    });
                };
                let low_watermark = ls.low_watermark(self.log_start_offset());
                if low_watermark >= target {
                    return Ok(low_watermark);
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(PartitionError::ReplicationTimeout {
                        required_offset: target,
                        timeout_ms: timeout.as_millis() as u64,
                    })
                }
            }
        }
    }

    /// Periodic housekeeping: retention, compaction (its key map within `dedupe_buffer_bytes`),
    /// time-based flush, producer expiry.
    pub fn maintain(&self, producer_id_expiration_ms: i64, dedupe_buffer_bytes: usize) -> Result<(), PartitionError> {
        let job = {
            let mut guard = self.log()?;
            let log = guard.as_mut().expect("checked by log()");
            log.enforce_retention(self.high_watermark())?;
            log.expire_producers(producer_id_expiration_ms);
            // Completed transactions below the high watermark no longer hold compaction back.
            log.on_high_watermark(self.high_watermark());
            log.maybe_flush()?;
            self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
            self.assert_offsets();
            log.compaction_job(self.high_watermark())
        };
        if let Some(job) = job {
            // The heavy part runs without the lock; appends go on meanwhile.
            let result = job.run(dedupe_buffer_bytes)?;
            let mut guard = self.log()?;
            let log = guard.as_mut().expect("checked by log()");
            let stats = result.stats;
            if log.install_compaction(result)? {
                tracing::info!(topic = %self.topic, partition = self.index, ?stats, "compacted");
            }
        }
        Ok(())
    }

    /// Clean shutdown of the log; later operations fail with `Closed`.
    pub fn close(&self) -> Result<(), PartitionError> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner()).take();
        match log {
            Some(log) => Ok(log.close()?),
            None => Ok(()),
        }
    }

    /// Closes the log and renames its directory to `<topic>-<partition>.<uuid>-delete`, as
    /// Kafka does, durably (the data dir is fsynced), so the name is free for a new incarnation
    /// before anything is removed and a crash cannot bring the old files back under it. Returns
    /// the renamed directory for the caller to remove (off the reconcile path), `None` if the
    /// log was already closed.
    pub(crate) fn delete(&self) -> Result<Option<PathBuf>, PartitionError> {
        let Some(log) = self.log.lock().unwrap_or_else(|p| p.into_inner()).take() else { return Ok(None) };
        let dir = log.dir().to_path_buf();
        drop(log);
        rename_for_deletion(&dir, &self.topic, self.index).map(Some)
    }
}

/// Kafka's file naming the topic id a partition directory belongs to.
const PARTITION_METADATA_FILE: &str = "partition.metadata";

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PartitionError {
    let path = path.to_path_buf();
    move |source| PartitionError::Log(LogError::Io { op, path, source })
}

/// Kafka's text form of a topic id: URL-safe base64 of the 16 bytes, no padding.
fn topic_id_text(topic_id: [u8; 16]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(topic_id)
}

/// Refuses a directory whose `partition.metadata` names another topic id. A directory without
/// the file (new, or written before Runnel kept it) is accepted.
fn check_partition_metadata(dir: &Path, topic_id: [u8; 16]) -> Result<(), PartitionError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("read", &path)(e)),
    };
    let expected = topic_id_text(topic_id);
    let found = text.lines().find_map(|l| l.strip_prefix("topic_id:")).map(str::trim).unwrap_or("");
    if found != expected {
        return Err(PartitionError::InconsistentTopicId { dir: dir.to_path_buf(), found: found.to_string(), expected });
    }
    Ok(())
}

/// Writes `partition.metadata` (Kafka's format) if it is missing: temp file, fsync, rename,
/// fsync of the directory, so a directory never names a topic id it does not hold.
fn write_partition_metadata(dir: &Path, topic_id: [u8; 16]) -> Result<(), PartitionError> {
    use std::io::Write;
    let path = dir.join(PARTITION_METADATA_FILE);
    if path.exists() {
        return Ok(());
    }
    let tmp = dir.join(format!("{PARTITION_METADATA_FILE}.tmp"));
    let text = format!("version: 0\ntopic_id: {}\n", topic_id_text(topic_id));
    let mut file = std::fs::File::create(&tmp).map_err(io_error("create", &tmp))?;
    file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(io_error("write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_error("rename", &tmp))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_error("fsync", dir))
}

/// Renames a partition directory to `<topic>-<partition>.<uuid>-delete` durably (the parent is
/// fsynced), so the name is free before anything is removed and a crash cannot bring the old
/// files back under it. Returns the new path.
pub(crate) fn rename_for_deletion(dir: &Path, topic: &str, index: u32) -> Result<PathBuf, PartitionError> {
    let deleted = dir.with_file_name(format!("{topic}-{index}.{}{DELETED_DIR_SUFFIX}", uuid::Uuid::new_v4().simple()));
    std::fs::rename(dir, &deleted).map_err(io_error("rename for deletion", dir))?;
    if let Some(parent) = deleted.parent() {
        std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(io_error("fsync", parent))?;
    }
    Ok(deleted)
}
