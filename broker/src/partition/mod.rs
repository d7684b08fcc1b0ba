//! A partition replica on this node: its log plus leader epoch, high watermark and ISR, and the
//! [`ReplicaManager`] that owns every partition of the node.
//!
//! Invariants: `log_start_offset <= high_watermark <= log_end_offset` (asserted after every
//! mutation); readers never see past the high watermark; the leader epoch of every batch
//! `append_as_leader` writes is the partition's current leader epoch, and the epoch cache
//! (`leader-epoch-checkpoint`, Kafka's format) records where each epoch started.
//! What is not there yet (replication is the next step): nothing here checks that this node is
//! the leader (a handler appends to whatever partition it hosts), and the high watermark only
//! moves while the ISR is this node alone, to the log end offset at each append; with a larger
//! ISR it stays where it was (opening sets it to the log end offset).
//! Locks: the log mutex is never held across an `.await`; reads take it only to find the file
//! slice and read the bytes after releasing it.

mod epoch_cache;
mod manager;
pub mod partitioner;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

pub use self::epoch_cache::LeaderEpochCache;
pub use self::manager::{PartitionKey, ReplicaManager};
pub use crate::log::segment::FirstBatch;
use crate::log::{AppendInfo, AppendOrigin, Clock, Log, LogConfig, LogError};

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
}

/// What a fetch read from one partition.
#[derive(Debug, Clone)]
pub struct FetchedData {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Raw batches, starting at the batch that contains the fetch offset.
    pub records: Bytes,
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
    isr: Mutex<Vec<u64>>,
}

impl Partition {
    /// Opens (recovering if needed) the log of `topic-index` in `dir`; the ISR starts as
    /// `node_id` alone.
    pub(crate) fn open(
        dir: &Path,
        topic: Arc<str>,
        index: u32,
        topic_id: [u8; 16],
        node_id: u64,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Partition, PartitionError> {
        check_partition_metadata(dir, topic_id)?;
        let log = Log::open(dir, config, clock)?;
        write_partition_metadata(dir, topic_id)?;
        let epochs = LeaderEpochCache::open(dir, log.log_end_offset()).map_err(|source| LogError::Io {
            op: "open leader-epoch-checkpoint in",
            path: dir.to_path_buf(),
            source,
        })?;
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        Ok(Partition {
            topic,
            index,
            topic_id,
            log: Mutex::new(Some(log)),
            epochs: Mutex::new(epochs),
            leader_epoch: AtomicI32::new(0),
            // Everything in the log counts as committed, which holds for a single replica only:
            // there is no high watermark checkpoint yet.
            high_watermark: AtomicI64::new(end),
            log_start_offset: AtomicI64::new(start),
            log_end_offset: AtomicI64::new(end),
            isr: Mutex::new(vec![node_id]),
        })
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
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    pub fn isr(&self) -> Vec<u64> {
        self.isr.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Bytes of the partition's segment files.
    pub fn size_bytes(&self) -> u64 {
        self.log().ok().and_then(|log| log.as_ref().map(Log::size_bytes)).unwrap_or(0)
    }

    /// Applies leadership from the metadata image.
    pub(crate) fn become_leader(&self, leader_epoch: i32, isr: Vec<u64>) {
        self.leader_epoch.store(leader_epoch, Ordering::Release);
        *self.isr.lock().unwrap_or_else(|p| p.into_inner()) = isr;
    }

    pub(crate) fn set_config(&self, config: LogConfig) -> Result<(), PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        if log.config() != &config {
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

    /// Appends a producer's batches as leader. With `acks=all` the ISR must meet
    /// `min.insync.replicas` first. With an ISR of one (this node) the high watermark moves to
    /// the new log end offset at once; with a larger ISR it does not move at all until
    /// replication advances it (not implemented yet), so those records stay invisible to readers
    /// while the produce, even with `acks=all`, is acknowledged.
    pub fn append_as_leader(
        &self,
        records: &Bytes,
        acks: Acks,
        origin: AppendOrigin,
    ) -> Result<(AppendInfo, i64), PartitionError> {
        let mut guard = self.log()?;
        let log = guard.as_mut().expect("checked by log()");
        let isr_len = self.isr.lock().unwrap_or_else(|p| p.into_inner()).len();
        let min_insync_replicas = log.config().min_insync_replicas;
        if acks == Acks::All && isr_len < min_insync_replicas as usize {
            return Err(PartitionError::NotEnoughReplicas { isr: isr_len, min_insync_replicas });
        }
        let leader_epoch = self.leader_epoch();
        let info = log.append_as_leader(records, leader_epoch, origin)?;
        {
            let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = epochs.assign(leader_epoch, info.first_offset) {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not persist leader epoch");
            }
        }
        let end = log.log_end_offset();
        self.log_end_offset.store(end, Ordering::Release);
        if isr_len <= 1 {
            self.high_watermark.store(end, Ordering::Release);
        }
        self.assert_offsets();
        Ok((info, log.log_start_offset()))
    }

    /// Reads up to `max_bytes` from `fetch_offset`, never past the high watermark; a first batch
    /// larger than `max_bytes` is returned whole only with [`FirstBatch::Whole`] (a fetch grants
    /// that to its first partition with data, KIP-74).
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        first_batch: FirstBatch,
    ) -> Result<FetchedData, PartitionError> {
        let high_watermark = self.high_watermark();
        let (slice, log_start_offset, log_end_offset) = {
            let guard = self.log()?;
            let log = guard.as_ref().expect("checked by log()");
            (log.slice(fetch_offset, high_watermark)?, log.log_start_offset(), log.log_end_offset())
        };
        let records = match slice {
            Some(slice) => slice.read_batches_limited(max_bytes, high_watermark, first_batch).map_err(|source| {
                LogError::Io { op: "read", path: format!("{}-{}", self.topic, self.index).into(), source }
            })?,
            None => Bytes::new(),
        };
        Ok(FetchedData { high_watermark, log_start_offset, log_end_offset, records })
    }

    /// ListOffsets: `(offset, timestamp)`; timestamp -1 where Kafka answers none.
    pub fn list_offset(&self, spec: OffsetSpec) -> Result<Option<(i64, i64)>, PartitionError> {
        let guard = self.log()?;
        let log = guard.as_ref().expect("checked by log()");
        let high_watermark = self.high_watermark();
        Ok(match spec {
            OffsetSpec::Earliest => Some((log.log_start_offset(), -1)),
            OffsetSpec::Latest => Some((high_watermark, -1)),
            OffsetSpec::MaxTimestamp => log.max_timestamp_offset()?.filter(|(o, _)| *o < high_watermark),
            OffsetSpec::Timestamp(ts) => log.offset_for_timestamp(ts)?.filter(|(o, _)| *o < high_watermark),
        })
    }

    /// OffsetForLeaderEpoch: the end offset of `leader_epoch` as this replica knows it, and the
    /// largest epoch at or below it. `None` if the epoch is older than anything we have.
    pub fn end_offset_for_epoch(&self, leader_epoch: i32) -> (i32, i64) {
        let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        epochs.end_offset_for(leader_epoch, self.leader_epoch(), self.log_end_offset())
    }

    /// DeleteRecords: moves the log start offset, at most to the high watermark.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
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
        Ok(start)
    }

    /// Periodic housekeeping: retention, compaction, time-based flush.
    pub fn maintain(&self) -> Result<(), PartitionError> {
        let job = {
            let mut guard = self.log()?;
            let log = guard.as_mut().expect("checked by log()");
            log.enforce_retention(self.high_watermark())?;
            log.maybe_flush()?;
            self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
            self.assert_offsets();
            log.compaction_job()
        };
        if let Some(job) = job {
            // The heavy part runs without the lock; appends go on meanwhile.
            let result = job.run()?;
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
