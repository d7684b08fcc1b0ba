//! The replica manager: every partition this node hosts, by (topic, partition).
//!
//! It creates, opens and deletes partition directories (`<data_dir>/<topic>-<partition>`, as
//! Kafka names them) when told to by the layer that follows the metadata image, wakes long-poll
//! fetches on appends, and runs periodic housekeeping. It knows nothing of metadata records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::{LeaderAndIsr, Partition, PartitionError, DEFAULT_REPLICA_LAG_TIME_MAX_MS, DELETED_DIR_SUFFIX};
use crate::log::{Clock, LogConfig, LogContext, OpenFiles};

/// Kafka's file of every hosted partition's high watermark, in the data dir.
pub const HIGH_WATERMARK_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

/// (topic, partition).
pub type PartitionKey = (Arc<str>, u32);

pub struct ReplicaManager {
    node_id: u64,
    data_dir: PathBuf,
    clock: Arc<dyn Clock>,
    /// The node's cache of open segment files, shared by every hosted log.
    open_files: Arc<OpenFiles>,
    partitions: RwLock<HashMap<PartitionKey, Arc<Partition>>>,
    /// High watermarks read from `replication-offset-checkpoint` at start.
    checkpointed: HashMap<(String, u32), i64>,
    replica_lag_time_max_ms: i64,
    /// `max.producers.per.partition`: the producer ids one partition's state may hold.
    max_producers: usize,
}

impl ReplicaManager {
    pub fn new(node_id: u64, data_dir: &Path, clock: Arc<dyn Clock>) -> ReplicaManager {
        ReplicaManager::with_lag_time(node_id, data_dir, clock, DEFAULT_REPLICA_LAG_TIME_MAX_MS)
    }

    /// With `replica.lag.time.max.ms` for the partitions this node will lead.
    pub fn with_lag_time(
        node_id: u64,
        data_dir: &Path,
        clock: Arc<dyn Clock>,
        replica_lag_time_max_ms: i64,
    ) -> ReplicaManager {
        let checkpointed = read_high_watermarks(&data_dir.join(HIGH_WATERMARK_CHECKPOINT_FILE));
        ReplicaManager {
            node_id,
            data_dir: data_dir.to_path_buf(),
            clock,
            open_files: OpenFiles::new(OpenFiles::auto_capacity()),
            partitions: RwLock::new(HashMap::new()),
            checkpointed,
            replica_lag_time_max_ms,
            max_producers: usize::MAX,
        }
    }

    /// With `max.producers.per.partition` (see `log::producer_state`); before any partition is
    /// opened.
    pub fn with_max_producers(mut self, max_producers: usize) -> ReplicaManager {
        self.max_producers = max_producers;
        self
    }

    /// With the node's cache of open segment files (`log.open.files.max`), replacing the default
    /// one (sized by `OpenFiles::auto_capacity`); before any partition is opened.
    pub fn with_open_files(mut self, open_files: Arc<OpenFiles>) -> ReplicaManager {
        self.open_files = open_files;
        self
    }

    /// The node's cache of open segment files: `open_files().stats()` gives its figures (open,
    /// capacity, hits, misses, evictions, open failures) for `/metrics` and the cluster view.
    pub fn open_files(&self) -> &Arc<OpenFiles> {
        &self.open_files
    }

    /// Writes every hosted partition's high watermark to `replication-offset-checkpoint`
    /// (Kafka's format: version 0, the count, then `topic partition offset` lines), atomically.
    pub fn checkpoint_high_watermarks(&self) -> std::io::Result<()> {
        let mut lines: Vec<String> =
            self.all().iter().map(|p| format!("{} {} {}", p.topic(), p.index(), p.high_watermark())).collect();
        lines.sort();
        let mut text = format!("0\n{}\n", lines.len());
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        crate::log::durable::write_atomically(&self.data_dir.join(HIGH_WATERMARK_CHECKPOINT_FILE), text.as_bytes())
    }

    fn dir_of(&self, topic: &str, partition: u32) -> PathBuf {
        self.data_dir.join(format!("{topic}-{partition}"))
    }

    /// Opens (or creates) the partition if this node does not host it yet, and applies the
    /// leadership and config from the metadata image.
    pub fn ensure(
        &self,
        topic: &str,
        partition: u32,
        topic_id: [u8; 16],
        config: LogConfig,
        leadership: LeaderAndIsr,
    ) -> Result<Arc<Partition>, PartitionError> {
        let existing = self.get(topic, partition);
        let hosted = match existing {
            Some(p) if p.topic_id() == topic_id => {
                p.set_config(config)?;
                p
            }
            stale => {
                if let Some(stale) = stale {
                    // Same name, new topic id: the old topic was deleted and recreated. Its
                    // directory is renamed away before the new one is created under the name.
                    remove_deleted_dirs(stale.delete()?.into_iter().collect());
                }
                let topic: Arc<str> = Arc::from(topic);
                let dir = self.dir_of(&topic, partition);
                let checkpointed = self.checkpointed.get(&(topic.to_string(), partition)).copied();
                let open = |config| {
                    Partition::open(
                        &dir,
                        topic.clone(),
                        partition,
                        topic_id,
                        self.node_id,
                        config,
                        LogContext::new(self.clock.clone(), self.open_files.clone())
                            .with_max_producers(self.max_producers),
                        checkpointed,
                        self.replica_lag_time_max_ms,
                    )
                };
                let opened = match open(config.clone()) {
                    Err(PartitionError::InconsistentTopicId { dir, found, expected }) => {
                        // Files of an older incarnation under the name (deleted while this node
                        // was down): moved away, never adopted.
                        tracing::warn!(dir = %dir.display(), found, expected, "removing an older incarnation's partition directory");
                        remove_deleted_dirs(vec![super::rename_for_deletion(&dir, &topic, partition)?]);
                        open(config)?
                    }
                    other => other?,
                };
                let opened = Arc::new(opened);
                self.partitions.write().unwrap_or_else(|p| p.into_inner()).insert((topic, partition), opened.clone());
                opened
            }
        };
        hosted.apply_leader_and_isr(leadership)?;
        Ok(hosted)
    }

    /// Deletes every partition of `topic` with its files.
    pub fn remove_topic(&self, topic: &str) -> Result<(), PartitionError> {
        let removed: Vec<Arc<Partition>> = {
            let mut partitions = self.partitions.write().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<PartitionKey> = partitions.keys().filter(|(t, _)| &**t == topic).cloned().collect();
            keys.iter().filter_map(|k| partitions.remove(k)).collect()
        };
        let mut renamed = Vec::new();
        let mut result = Ok(());
        for partition in removed {
            match partition.delete() {
                Ok(dir) => renamed.extend(dir),
                Err(e) => result = Err(e),
            }
        }
        remove_deleted_dirs(renamed);
        result
    }

    /// Deletes one partition with its files (a reassignment moved it off this node): the same
    /// durable rename to `-delete` and removal off the caller's thread as a deleted topic's.
    pub fn remove_partition(&self, topic: &str, partition: u32) -> Result<(), PartitionError> {
        let key: PartitionKey = (Arc::from(topic), partition);
        let removed = self.partitions.write().unwrap_or_else(|p| p.into_inner()).remove(&key);
        let Some(removed) = removed else { return Ok(()) };
        let renamed = removed.delete()?;
        remove_deleted_dirs(renamed.into_iter().collect());
        Ok(())
    }

    /// Deletes partition directories in the data dir that no topic of `keep` owns (topics
    /// deleted while this node was down), and `-delete` directories whose removal a crash or
    /// shutdown interrupted. `keep` answers "is this (topic, partition) hosted?".
    pub fn remove_strays(&self, keep: impl Fn(&str, u32) -> bool) {
        let Ok(entries) = std::fs::read_dir(&self.data_dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(DELETED_DIR_SUFFIX) && entry.path().is_dir() {
                tracing::info!(dir = %entry.path().display(), "removing the directory of a deleted partition");
                if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                    tracing::warn!(dir = %entry.path().display(), error = %e, "could not delete");
                }
                continue;
            }
            let Some((topic, partition)) = name.rsplit_once('-') else { continue };
            let Ok(partition) = partition.parse::<u32>() else { continue };
            if entry.path().is_dir()
                && entry.path().join(crate::log::CHECKPOINT_FILE).exists()
                && !keep(topic, partition)
            {
                tracing::info!(dir = %entry.path().display(), "deleting the directory of a deleted partition");
                if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                    tracing::warn!(dir = %entry.path().display(), error = %e, "could not delete");
                }
            }
        }
    }

    pub fn get(&self, topic: &str, partition: u32) -> Option<Arc<Partition>> {
        let key: (Arc<str>, u32) = (Arc::from(topic), partition);
        self.partitions.read().unwrap_or_else(|p| p.into_inner()).get(&key).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Retention, compaction, flushing and producer expiry (`producer.id.expiration.ms`) for
    /// every partition.
    pub fn maintain(&self, producer_id_expiration_ms: i64, dedupe_buffer_bytes: usize) {
        for partition in self.all() {
            if let Err(e) = partition.maintain(producer_id_expiration_ms, dedupe_buffer_bytes) {
                tracing::warn!(topic = %partition.topic(), partition = partition.index(), error = %e, "housekeeping failed");
            }
        }
    }

    /// Closes every log cleanly (flush, trim indexes, clean-shutdown checkpoint), in parallel:
    /// each close is a few fsyncs, which the device takes concurrently (`partition::parallel`).
    /// Blocking.
    pub fn shutdown(&self) {
        if let Err(e) = self.checkpoint_high_watermarks() {
            tracing::warn!(error = %e, "could not write the high watermark checkpoint");
        }
        super::parallel::for_each_parallel(self.all(), super::parallel::PARTITION_IO_THREADS, |partition| {
            if let Err(e) = partition.close() {
                tracing::error!(topic = %partition.topic(), partition = partition.index(), error = %e, "unclean close");
            }
        });
    }
}

/// `replication-offset-checkpoint`: `topic partition offset` per line after the version and
/// count lines; missing or unreadable means no high watermark is known (they start at 0).
fn read_high_watermarks(path: &Path) -> HashMap<(String, u32), i64> {
    let Ok(text) = std::fs::read_to_string(path) else { return HashMap::new() };
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("0") {
        tracing::warn!(path = %path.display(), "unknown replication-offset-checkpoint version; ignoring it");
        return HashMap::new();
    }
    let _count = lines.next();
    lines
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (topic, partition, offset) = (parts.next()?, parts.next()?, parts.next()?);
            Some(((topic.to_string(), partition.parse().ok()?), offset.parse().ok()?))
        })
        .collect()
}

/// Removes renamed (`-delete`) directories on a thread of their own: deleting a large partition
/// must not hold up the reconciliation that renamed it. If the thread cannot start, removes them
/// here; anything left (a crash) goes at the next start ([`ReplicaManager::remove_strays`]).
fn remove_deleted_dirs(dirs: Vec<PathBuf>) {
    if dirs.is_empty() {
        return;
    }
    let remove = |dirs: Vec<PathBuf>| {
        for dir in dirs {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not delete a deleted partition's directory");
            }
        }
    };
    let spawned = std::thread::Builder::new().name("runnel-delete-dirs".into()).spawn({
        let dirs = dirs.clone();
        move || remove(dirs)
    });
    if spawned.is_err() {
        remove(dirs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::records::BatchBuilder;
    use crate::log::{AppendOrigin, Compression, SystemClock};
    use crate::partition::{Acks, LeaderAndIsr};

    #[test]
    fn a_directory_of_an_older_incarnation_is_never_adopted() {
        // Proves a partition directory left by a deleted incarnation (the node was down while
        // the topic was deleted and recreated) is moved away, not opened as the new one.
        let dir = tempfile::tempdir().unwrap();
        let old = ReplicaManager::new(1, dir.path(), Arc::new(SystemClock));
        let hosted = old.ensure("t", 0, [1; 16], LogConfig::default(), LeaderAndIsr::sole(1, 0)).unwrap();
        let mut builder = BatchBuilder::new(Compression::None);
        builder.push(1_700_000_000_000, None, Some(b"old incarnation"), &[]);
        hosted.append_as_leader(&builder.build().unwrap().into_bytes(), Acks::All, AppendOrigin::Client).unwrap();
        old.shutdown();

        let restarted = ReplicaManager::new(1, dir.path(), Arc::new(SystemClock));
        let same = restarted.ensure("t", 0, [1; 16], LogConfig::default(), LeaderAndIsr::sole(1, 0)).unwrap();
        assert_eq!(same.log_end_offset(), 1, "the same incarnation keeps its records");
        restarted.shutdown();

        let recreated = ReplicaManager::new(1, dir.path(), Arc::new(SystemClock));
        let new = recreated.ensure("t", 0, [2; 16], LogConfig::default(), LeaderAndIsr::sole(1, 0)).unwrap();
        assert_eq!(new.topic_id(), [2; 16]);
        assert_eq!(new.log_end_offset(), 0, "the new incarnation starts empty");
    }

    #[test]
    fn a_read_committed_fetch_lists_only_the_aborted_transactions_its_records_overlap() {
        // Proves the aborted list is bounded by the returned data, as Kafka's: two aborted
        // transactions (at 0 and 2), a read from 0 that returns only the first batch names only
        // the first; it named both (every abort up to the last stable offset, each response).
        use crate::partition::{FirstBatch, Isolation};
        let dir = tempfile::tempdir().unwrap();
        let replicas = ReplicaManager::new(1, dir.path(), Arc::new(SystemClock));
        let hosted = replicas.ensure("t", 0, [1; 16], LogConfig::default(), LeaderAndIsr::sole(1, 0)).unwrap();
        for producer in [1, 2] {
            let mut builder = BatchBuilder::new(Compression::None).producer(producer, 0, 0).transactional(true);
            // Now, as the markers are: one segment (an old timestamp would roll by segment.ms).
            builder.push(crate::log::now_ms(), None, Some(b"aborted"), &[]);
            hosted.append_as_leader(&builder.build().unwrap().into_bytes(), Acks::All, AppendOrigin::Client).unwrap();
            let abort = crate::txn::coordinator::marker_batch(producer, 0, false, 0);
            hosted.append_as_leader(&abort, Acks::All, AppendOrigin::Coordinator).unwrap();
        }
        let all = hosted.read(0, 1 << 20, FirstBatch::Whole, Isolation::ReadCommitted).unwrap();
        assert_eq!(all.aborted.iter().map(|t| t.first_offset).collect::<Vec<_>>(), vec![0, 2]);
        let first = hosted.read(0, 1, FirstBatch::Whole, Isolation::ReadCommitted).unwrap();
        assert_eq!(first.aborted.iter().map(|t| t.first_offset).collect::<Vec<_>>(), vec![0], "only what it returned");
        replicas.shutdown();
    }

    #[test]
    fn a_topic_compression_type_recompresses_what_producers_send() {
        // Proves `compression.type` applies to appends, as Kafka's LogValidator does: it was
        // stored and described but every batch kept the producer's codec. An uncompressed
        // idempotent batch lands as zstd with the same records, producer fields and offsets, and
        // its exact retry is still a duplicate; back at `producer` a gzip batch stays gzip.
        use crate::log::batch::BatchIter;
        use crate::log::config::TopicCompression;
        use crate::partition::{FirstBatch, Isolation};
        let dir = tempfile::tempdir().unwrap();
        let replicas = ReplicaManager::new(1, dir.path(), Arc::new(SystemClock));
        let zstd = LogConfig { compression_type: TopicCompression::Codec(Compression::Zstd), ..LogConfig::default() };
        let hosted = replicas.ensure("t", 0, [1; 16], zstd, LeaderAndIsr::sole(1, 0)).unwrap();
        let batch = |codec: Compression, sequence: i32| {
            let mut builder = BatchBuilder::new(codec).producer(7, 0, sequence);
            builder.push(crate::log::now_ms(), Some(b"k1"), Some(b"v1"), &[("h", Some(b"x"))]);
            builder.push(crate::log::now_ms(), None, None, &[]);
            builder.build().unwrap()
        };
        let sent = batch(Compression::None, 0);
        hosted.append_as_leader(sent.bytes(), Acks::All, AppendOrigin::Client).unwrap();
        let (retry, ..) = hosted.append_as_leader(sent.bytes(), Acks::All, AppendOrigin::Client).unwrap();
        assert!(retry.duplicate, "the retry of a recompressed batch is still recognised");
        let mut read = hosted.read(0, 1 << 20, FirstBatch::Whole, Isolation::ReadUncommitted).unwrap();
        let stored: Vec<_> = BatchIter::new(read.records.clone()).map(Result::unwrap).collect();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].compression(), Compression::Zstd);
        let (header, original) = (stored[0].header(), sent.header());
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.record_count,
                header.last_offset_delta
            ),
            (
                original.producer_id,
                original.producer_epoch,
                original.base_sequence,
                original.record_count,
                original.last_offset_delta
            )
        );
        let values = |batch: &crate::log::RecordBatch| {
            batch
                .records()
                .unwrap()
                .into_iter()
                .map(|r| (r.offset, r.timestamp, r.key, r.value, r.headers))
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&stored[0]), values(&sent));

        hosted.set_config(LogConfig::default()).unwrap();
        hosted.append_as_leader(batch(Compression::Gzip, 2).bytes(), Acks::All, AppendOrigin::Client).unwrap();
        read = hosted.read(2, 1 << 20, FirstBatch::Whole, Isolation::ReadUncommitted).unwrap();
        let kept = BatchIter::new(read.records).next().unwrap().unwrap();
        assert_eq!(kept.compression(), Compression::Gzip, "compression.type=producer keeps the producer's codec");
        replicas.shutdown();
    }

    fn follower_of_1(dir: &std::path::Path) -> (ReplicaManager, Arc<crate::partition::Partition>) {
        let replicas = ReplicaManager::new(2, dir, Arc::new(SystemClock));
        let state = LeaderAndIsr {
            leader: Some(1),
            leader_epoch: 3,
            partition_epoch: 0,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            fenced: vec![],
        };
        let hosted = replicas.ensure("t", 0, [1; 16], LogConfig::default(), state).unwrap();
        (replicas, hosted)
    }

    /// Three records at `base` written by the leader in epoch 3.
    fn leader_batch(base: i64) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(Compression::None).base_offset(base).partition_leader_epoch(3);
        for value in [b"a", b"b", b"c"] {
            builder.push(1_700_000_000_000, None, Some(value), &[]);
        }
        builder.build().unwrap().into_bytes()
    }

    #[test]
    fn an_empty_follower_takes_a_batch_across_the_leaders_log_start() {
        // Proves a follower restarted at the leader's log start 1, which DeleteRecords put
        // inside the leader's batch [0, 2], takes that batch when the leader serves it whole
        // (it refused it, NonMonotonicOffsets, and fetched it again forever), and keeps the
        // leader's log start.
        let dir = tempfile::tempdir().unwrap();
        let (replicas, follower) = follower_of_1(dir.path());
        follower.reset_out_of_range(1, 3).unwrap();
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (1, 1));
        follower.append_as_follower(&leader_batch(0), 3, 1).unwrap();
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (1, 3));
        assert_eq!(follower.high_watermark(), 3);
        replicas.shutdown();
    }

    #[test]
    fn a_follower_emptied_at_the_leaders_log_start_forgets_its_epochs() {
        // Proves the epoch cache is cleared when the log is emptied: an epoch kept below the new
        // start would be sent as the last fetched epoch, the leader would answer with that
        // epoch's end (below its log start), and the follower would cut back there and start
        // over again, forever.
        let dir = tempfile::tempdir().unwrap();
        let (replicas, follower) = follower_of_1(dir.path());
        follower.append_as_follower(&leader_batch(0), 3, 0).unwrap();
        assert_eq!(follower.epochs.lock().unwrap().latest_epoch(), Some(3));
        follower.reset_out_of_range(10, 12).unwrap();
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (10, 10));
        assert_eq!(follower.epochs.lock().unwrap().latest_epoch(), None, "an emptied log keeps no epoch");
        replicas.shutdown();
    }
}
