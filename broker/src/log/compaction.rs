//! Key-based compaction (`cleanup.policy=compact`): keep the last value per key.
//!
//! A [`CompactionJob`] is planned under the log's lock, run without it (it reads closed
//! segments, which only retention and truncation change, and writes new files into
//! `<partition>/.cleaned/`), and installed under the lock again, where it is thrown away if the
//! segments changed meanwhile. Offsets are preserved (gaps are normal in a compacted log);
//! batches keep their base offset and `last_offset_delta`. Only closed segments older than
//! `min.compaction.lag.ms` are cleaned, so the key map never covers the active segment: a key
//! whose newest value is still in the active segment keeps its older values until that segment
//! closes, as in Kafka.
//!
//! Transactions (KIP-98, as Kafka's cleaner): only segments wholly below the first unstable
//! offset are cleaned (an open transaction may still abort), and records of aborted
//! transactions (the `.txnindex` ranges of their producers) neither enter the key map nor
//! survive the rewrite, so an aborted value never replaces a committed one. A marker whose
//! transaction kept no record here (an abort's data is always gone; a commit's values may all
//! be superseded) goes once its delete horizon (below) has passed, as Kafka's cleaner removes
//! markers of emptied transactions; other markers are kept. An abort marker goes only
//! with its `.txnindex` entry: a consumer told of an aborted transaction skips its producer's
//! batches until it reads the abort marker. So each cleaned segment's `.txnindex` is rewritten
//! into `.cleaned/` and swapped in with the segment, in the same crash-safe commit.
//!
//! Tombstones (null values) and those markers go `delete.retention.ms` after the cleaning that
//! first kept them, giving a consumer reading the log that long to see them (KIP-534, Kafka
//! 3.x's rule): that cleaning rewrites their batch with a delete horizon (attribute bit 6, the
//! base timestamp = now + `delete.retention.ms`); a later cleaning past the horizon drops them.
//! The records' own timestamps play no part, so a backfill with old CreateTimes keeps its
//! tombstones as long as fresh ones.
//!
//! When (Kafka's `LogCleanerManager.grabFilthiestCompactedLog`): the log keeps a cleaner
//! checkpoint, `cleaned_to` (where the last cleaned range ended). Cleanable segments below it
//! are clean, the rest dirty. A job is planned when the dirty bytes are at least
//! `min.cleanable.dirty.ratio` of the cleanable bytes, or the oldest dirty batch is older than
//! `max.compaction.lag.ms`, or, with nothing dirty, when the latest delete horizon the last
//! cleaning wrote has passed (its tombstones and markers can go).
//!
//! How much (Kafka's `log.cleaner.dedupe.buffer.size`): the key map holds 128-bit digests of
//! the keys of the dirty part only, from `cleaned_to` on, batch by batch until the budget
//! allows no more keys; the job rewrites the cleanable segments that start below where the map
//! ended, dropping a record whose key the map holds at a later offset, and `cleaned_to` moves to
//! the map's end. A log with more dirty keys than the budget is cleaned in several passes.
//! Invariant: below `cleaned_to` each key has at most one record (each pass's map covers every
//! key it leaves behind it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::batch::{BatchHeader, RecordBatch, HEADER_SIZE};
use super::files::{OpenFiles, SegmentFile};
use super::log::{cleaned_dir, commit_cleaned, index_settings, Log, LogError};
use super::producer_state::{ControlType, EndTxnMarker};
use super::records::BatchBuilder;
use super::segment::{IndexSettings, Scanner, Segment};
use super::txn_index::{AbortedTxn, TxnIndex};

/// Figures of one compaction, for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    pub segments: usize,
    pub records_read: u64,
    pub records_kept: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

struct Cleanable {
    base_offset: i64,
    /// Where the next segment starts.
    end_offset: i64,
    /// Opened (through the node's cache) only while this segment is scanned: a job over many
    /// segments holds one descriptor at a time.
    file: Arc<SegmentFile>,
    size: u64,
}

/// A planned compaction of the closed segments of one log.
pub struct CompactionJob {
    dir: PathBuf,
    settings: IndexSettings,
    open_files: Arc<OpenFiles>,
    segments: Vec<Cleanable>,
    delete_retention_ms: i64,
    now_ms: i64,
    /// The cleaner checkpoint when planned: the key map starts there.
    cleaned_to: i64,
    /// The aborted transactions of the log, from its `.txnindex`, each with the base offset of
    /// the segment holding its marker.
    aborted: Vec<(i64, AbortedTxn)>,
    /// Each producer's last data batch (producer id, its last offset): a batch the cleaning
    /// empties is kept as an empty header (Kafka's `RETAIN_EMPTY`), so a replica that rebuilds
    /// the producer state from this log (a new replica, a replay) still has its sequence and
    /// epoch, and a retry of it is still recognised.
    last_batches: HashMap<i64, i64>,
}

impl CompactionJob {
    /// Whether `header` is its producer's last data batch (kept, emptied, when nothing in it is).
    fn is_last_of_producer(&self, header: &BatchHeader) -> bool {
        header.producer_id >= 0 && self.last_batches.get(&header.producer_id) == Some(&header.last_offset())
    }

    /// A data batch of an aborted transaction.
    fn is_aborted(&self, header: &BatchHeader) -> bool {
        header.attributes.is_transactional()
            && !header.attributes.is_control()
            && self.aborted.iter().any(|(_, t)| {
                t.producer_id == header.producer_id
                    && t.first_offset <= header.base_offset
                    && header.base_offset <= t.last_offset
            })
    }
}

/// A finished compaction whose files wait in `.cleaned/` to be installed.
pub struct CompactionResult {
    dir: PathBuf,
    cleaned: Vec<(i64, u64)>,
    /// Where the key map ended: the new cleaner checkpoint.
    mapped_to: i64,
    /// The latest delete horizon written on a kept tombstone or marker.
    latest_delete_horizon: Option<i64>,
    pub stats: CompactionStats,
}

impl Log {
    /// Plans a compaction, or `None` when the policy has no `compact` or nothing is cleanable.
    /// Only what is below the last stable offset at `high_watermark` is cleanable (Kafka's
    /// cleaner stops there too): a record above the high watermark may still be truncated away
    /// by a leader change, and the older record of its key it superseded must still be here.
    pub fn compaction_job(&self, high_watermark: i64) -> Option<CompactionJob> {
        let config = self.config();
        if !config.cleanup_policy.compact {
            return None;
        }
        let now_ms = self.clock().now_ms();
        let segments = self.segments();
        let active = *segments.keys().next_back()?;
        // Nor what an open (or not yet replicated) transaction may still abort: nothing at or
        // above its first offset is cleaned.
        let first_unstable = self.last_stable_offset(high_watermark);
        let bases: Vec<i64> = segments.keys().copied().collect();
        let cleanable: Vec<Cleanable> = segments
            .range(..active)
            .map(|(_, s)| s)
            .take_while(|s| {
                let next = bases.iter().copied().find(|b| *b > s.base_offset()).unwrap_or(active);
                next <= first_unstable
            })
            .take_while(|s| s.max_timestamp() <= now_ms - config.min_compaction_lag_ms)
            .map(|s| Cleanable {
                base_offset: s.base_offset(),
                end_offset: bases.iter().copied().find(|b| *b > s.base_offset()).unwrap_or(active),
                file: s.file().clone(),
                size: s.size(),
            })
            .collect();
        if cleanable.is_empty() || !self.worth_cleaning(&cleanable, now_ms) {
            return None;
        }
        Some(CompactionJob {
            dir: self.dir().to_path_buf(),
            settings: index_settings(config),
            open_files: self.open_files().clone(),
            segments: cleanable,
            delete_retention_ms: config.delete_retention_ms,
            now_ms,
            cleaned_to: self.cleaned_to,
            aborted: self.txn_index().entries_by_segment().map(|(base, t)| (base, *t)).collect(),
            last_batches: self
                .producer_state()
                .producers()
                .filter_map(|e| e.last_batch().map(|b| (e.producer_id, b.last_offset)))
                .collect(),
        })
    }

    /// Whether cleaning `cleanable` (the log's cleanable segments, oldest first) is due now:
    /// see the module's "When".
    fn worth_cleaning(&self, cleanable: &[Cleanable], now_ms: i64) -> bool {
        let config = self.config();
        let segments = self.segments();
        // A segment is clean when it ends at or below the checkpoint.
        let ends_by = |base: i64| segments.range(base + 1..).next().map_or(i64::MAX, |(next, _)| *next);
        let split = cleanable.iter().position(|c| ends_by(c.base_offset) > self.cleaned_to).unwrap_or(cleanable.len());
        let (clean, dirty) = cleanable.split_at(split);
        let clean_bytes: u64 = clean.iter().map(|c| c.size).sum();
        let dirty_bytes: u64 = dirty.iter().map(|c| c.size).sum();
        if dirty_bytes > 0 {
            let ratio = dirty_bytes as f64 / (clean_bytes + dirty_bytes) as f64;
            if ratio >= config.min_cleanable_dirty_ratio.0 {
                return true;
            }
            // Kafka's `needCompactionNow`: the first dirty batch is older than the bound.
            let first_dirty = segments.get(&dirty[0].base_offset).and_then(|s| s.first_batch_timestamp());
            if first_dirty.is_some_and(|t| t <= now_ms.saturating_sub(config.max_compaction_lag_ms)) {
                return true;
            }
        }
        self.latest_delete_horizon.is_some_and(|horizon| horizon <= now_ms)
    }

    /// Swaps cleaned segments in. Returns `false` (and discards the files) if any segment
    /// changed since the job was planned.
    pub fn install_compaction(&mut self, result: CompactionResult) -> Result<bool, LogError> {
        let io = |source| LogError::Io { op: "install compaction in", path: result.dir.clone(), source };
        let active = *self.segments().keys().next_back().expect("a log has an active segment");
        let unchanged = result.dir == self.dir()
            && result
                .cleaned
                .iter()
                .all(|(base, size)| *base != active && self.segments().get(base).is_some_and(|s| s.size() == *size));
        if !unchanged {
            std::fs::remove_dir_all(cleaned_dir(&result.dir)).map_err(io)?;
            return Ok(false);
        }
        self.before_mutation()?;
        // From the first rename on, memory and disk disagree until every cleaned segment is
        // open: a failure in between leaves segments whose sizes and indexes describe files
        // that were replaced, so the log goes offline (reads and writes refused) until a
        // reopen recovers it from disk, as Kafka takes the log dir offline.
        let swapped = (|| -> Result<(), LogError> {
            commit_cleaned(&result.dir).map_err(io)?;
            let settings = index_settings(self.config());
            let now = self.clock().now_ms();
            for (base, _) in &result.cleaned {
                let (segment, _) =
                    Segment::open(&result.dir, *base, settings, false, false, now, self.open_files()).map_err(io)?;
                self.segments_mut().insert(*base, segment);
                let dir = self.dir().to_path_buf();
                self.txn_index_mut().reload_segment(&dir, *base).map_err(io)?;
            }
            Ok(())
        })();
        if let Err(e) = swapped {
            self.go_offline(&e);
            return Err(e);
        }
        // Clean up to where the key map ended (every key below it is deduplicated).
        self.cleaned_to = self.cleaned_to.max(result.mapped_to);
        self.latest_delete_horizon = result.latest_delete_horizon;
        Ok(true)
    }

    /// Plans, runs and installs a compaction in one call (tests, or callers without
    /// concurrency needs), the whole log taken as replicated.
    pub fn compact(&mut self) -> Result<Option<CompactionStats>, LogError> {
        self.compact_below(self.log_end_offset())
    }

    /// [`Log::compact`] with the partition's high watermark.
    pub fn compact_below(&mut self, high_watermark: i64) -> Result<Option<CompactionStats>, LogError> {
        let Some(job) = self.compaction_job(high_watermark) else { return Ok(None) };
        let result = job.run(usize::MAX)?;
        let stats = result.stats;
        Ok(self.install_compaction(result)?.then_some(stats))
    }
}

impl CompactionJob {
    /// Builds the key map over the dirty part (from the cleaner checkpoint on), as far as
    /// `dedupe_buffer_bytes` allows (Kafka's `log.cleaner.dedupe.buffer.size`; at least one
    /// batch), then rewrites every cleanable segment that starts below where the map ended,
    /// keeping a keyed record unless the map holds a later offset for its key (and unexpired
    /// tombstones). What the map did not reach stays dirty for the next pass. Does not touch
    /// the live files.
    pub fn run(self, dedupe_buffer_bytes: usize) -> Result<CompactionResult, LogError> {
        let io = |source| LogError::Io { op: "compact", path: self.dir.clone(), source };
        let max_keys = (dedupe_buffer_bytes / KEY_MAP_ENTRY_BYTES).max(1);
        let mut latest: HashMap<u128, i64> = HashMap::new();
        let mut mapped_to = self.cleaned_to;
        'map: for segment in self.segments.iter().filter(|s| s.end_offset > self.cleaned_to) {
            let mut full = false;
            for_each_batch(segment, |header, batch| {
                if full || header.last_offset() < self.cleaned_to {
                    return Ok(());
                }
                // A batch is mapped whole or not at all (the first one always).
                if !latest.is_empty() && latest.len() + header.record_count.max(0) as usize > max_keys {
                    full = true;
                    mapped_to = mapped_to.max(header.base_offset);
                    return Ok(());
                }
                if !header.attributes.is_control() && !self.is_aborted(header) {
                    for record in batch.record_iter().map_err(LogError::CorruptBatch)? {
                        let record = record.map_err(LogError::CorruptBatch)?;
                        if let Some(key) = record.key {
                            latest.insert(key_digest(&key), record.offset);
                        }
                    }
                }
                mapped_to = header.last_offset() + 1;
                Ok(())
            })?;
            if full {
                break 'map;
            }
            mapped_to = mapped_to.max(segment.end_offset);
        }
        let segments: Vec<&Cleanable> = self.segments.iter().filter(|s| s.base_offset < mapped_to).collect();
        let out_dir = cleaned_dir(&self.dir);
        if out_dir.exists() {
            std::fs::remove_dir_all(&out_dir).map_err(io)?;
        }
        std::fs::create_dir_all(&out_dir).map_err(io)?;
        let mut stats = CompactionStats { segments: segments.len(), ..CompactionStats::default() };
        let mut cleaned = Vec::new();
        // The latest horizon still ahead on anything kept (one already passed on a kept batch
        // would make the log look worth cleaning at every look).
        let mut latest_delete_horizon: Option<i64> = None;
        // Producer id → whether its transaction since its last marker kept any record. The job
        // starts at the log's first segment, so it sees every batch before each marker.
        let mut transaction_kept: HashMap<i64, bool> = HashMap::new();
        for segment in segments {
            let horizon_from_now = self.now_ms.saturating_add(self.delete_retention_ms);
            let mut out = Segment::create(&out_dir, segment.base_offset, self.settings, self.now_ms, &self.open_files)
                .map_err(io)?;
            let mut removed_aborts: Vec<(i64, i64)> = Vec::new();
            for_each_batch(segment, |header, batch| {
                // The batch's delete horizon (KIP-534), if a cleaning set one, and whether it passed.
                let horizon = header.attributes.has_delete_horizon().then_some(header.base_timestamp);
                let horizon_passed = horizon.is_some_and(|h| self.now_ms >= h);
                if header.attributes.is_control() {
                    let kept_data = transaction_kept.remove(&header.producer_id).unwrap_or(false);
                    let marker = EndTxnMarker::of_batch(batch.bytes());
                    if marker.is_none() || kept_data || horizon.is_some() && !horizon_passed {
                        latest_delete_horizon = latest_delete_horizon.max(horizon.filter(|_| !horizon_passed));
                        return write_batch(&mut out, batch.bytes()).map_err(io);
                    }
                    if horizon_passed {
                        if marker.is_some_and(|m| m.control == ControlType::Abort) {
                            removed_aborts.push((header.producer_id, header.base_offset));
                        }
                        stats.records_read += 1;
                        return Ok(());
                    }
                    // An emptied transaction's marker, first seen: it stays until its horizon.
                    let rebuilt = rebuild(
                        header,
                        batch,
                        batch.records().map_err(LogError::CorruptBatch)?.iter(),
                        Some(horizon_from_now),
                    )?;
                    latest_delete_horizon = latest_delete_horizon.max(Some(horizon_from_now));
                    return write_batch(&mut out, rebuilt.bytes()).map_err(io);
                }
                let transactional = header.attributes.is_transactional();
                // A transactional batch written out, even emptied (a producer's last, kept for
                // its sequence), keeps its transaction's marker: replayed without it, that
                // batch would open a transaction nothing ends (Kafka's cleaner keeps the
                // marker while any batch of the transaction is kept).
                if self.is_aborted(header) {
                    stats.records_read += header.record_count.max(0) as u64;
                    let written = self.keep_empty_if_last(&mut out, header, batch)?;
                    *transaction_kept.entry(header.producer_id).or_insert(false) |= written;
                    return Ok(());
                }
                let records = batch.records().map_err(LogError::CorruptBatch)?;
                stats.records_read += records.len() as u64;
                let keep = |r: &super::records::Record| {
                    let newest =
                        r.key.as_ref().is_none_or(|k| latest.get(&key_digest(k)).is_none_or(|at| *at <= r.offset));
                    newest && !(r.value.is_none() && horizon_passed)
                };
                let kept: Vec<_> = records.iter().filter(|r| keep(r)).collect();
                stats.records_kept += kept.len() as u64;
                if transactional {
                    *transaction_kept.entry(header.producer_id).or_insert(false) |= !kept.is_empty();
                }
                // Tombstones kept for the first time get the horizon they may be dropped at;
                // kept ones keep theirs.
                let tombstones = kept.iter().any(|r| r.value.is_none());
                let wanted_horizon = if tombstones { horizon.or(Some(horizon_from_now)) } else { None };
                // (A kept tombstone's horizon is never behind now: past it, it is dropped. It is
                // now itself with delete.retention.ms = 0, so the next look cleans it.)
                if !kept.is_empty() {
                    latest_delete_horizon = latest_delete_horizon.max(wanted_horizon);
                }
                if kept.len() == records.len() && wanted_horizon == horizon {
                    return write_batch(&mut out, batch.bytes()).map_err(io);
                }
                if kept.is_empty() {
                    let written = self.keep_empty_if_last(&mut out, header, batch)?;
                    if transactional {
                        *transaction_kept.entry(header.producer_id).or_insert(false) |= written;
                    }
                    return Ok(());
                }
                let rebuilt = rebuild(header, batch, kept.into_iter(), wanted_horizon)?;
                write_batch(&mut out, rebuilt.bytes()).map_err(io)
            })?;
            let indexed: Vec<AbortedTxn> =
                self.aborted.iter().filter(|(base, _)| *base == segment.base_offset).map(|(_, t)| *t).collect();
            if !indexed.is_empty() {
                let kept: Vec<AbortedTxn> =
                    indexed.into_iter().filter(|t| !removed_aborts.contains(&(t.producer_id, t.last_offset))).collect();
                TxnIndex::write_file(&out_dir, segment.base_offset, &kept).map_err(io)?;
            }
            stats.bytes_before += segment.size;
            stats.bytes_after += out.size();
            out.close_active().map_err(io)?;
            // The cleaned file keeps its source's age: time retention dates a segment without
            // timestamps (one the cleaning emptied) by its mtime, which would otherwise be this
            // cleaning's, and on a compact,delete topic cleaned more often than retention.ms
            // nothing would ever expire (Kafka's cleaner sets lastModified the same way).
            if let Ok(modified) = std::fs::metadata(segment.file.path()).and_then(|m| m.modified()) {
                let cleaned = std::fs::File::options().write(true).open(out.log_path());
                if let Err(e) = cleaned.and_then(|file| file.set_modified(modified)) {
                    tracing::warn!(error = %e, path = %out.log_path().display(), "could not date a cleaned segment");
                }
            }
            cleaned.push((segment.base_offset, segment.size));
        }
        Ok(CompactionResult { dir: self.dir, cleaned, mapped_to, latest_delete_horizon, stats })
    }
}

impl CompactionJob {
    /// A batch whose records all go: nothing is written, unless it is its producer's last batch,
    /// which stays as an empty header (same offsets, producer id, epoch, sequences and max
    /// timestamp).
    fn keep_empty_if_last(
        &self,
        out: &mut Segment,
        header: &BatchHeader,
        batch: &RecordBatch,
    ) -> Result<bool, LogError> {
        if !self.is_last_of_producer(header) {
            return Ok(false);
        }
        let empty = rebuild(header, batch, std::iter::empty(), None)?;
        write_batch(out, empty.bytes()).map_err(|source| LogError::Io {
            op: "write a compacted segment in",
            path: self.dir.clone(),
            source,
        })?;
        Ok(true)
    }
}

/// `batch` with only `records` (at their offsets and timestamps), and a delete horizon if given.
fn rebuild<'a>(
    header: &BatchHeader,
    batch: &RecordBatch,
    records: impl Iterator<Item = &'a super::records::Record>,
    delete_horizon: Option<i64>,
) -> Result<RecordBatch, LogError> {
    let mut builder = BatchBuilder::new(batch.compression())
        .base_offset(header.base_offset)
        .producer(header.producer_id, header.producer_epoch, header.base_sequence)
        .transactional(header.attributes.is_transactional())
        .control(header.attributes.is_control())
        .timestamp_type(header.attributes.timestamp_type())
        .partition_leader_epoch(header.partition_leader_epoch)
        .last_offset_delta(header.last_offset_delta)
        .empty_timestamp(header.max_timestamp);
    if let Some(horizon) = delete_horizon {
        builder = builder.delete_horizon(horizon);
    }
    for record in records {
        let headers: Vec<(&str, Option<&[u8]>)> =
            record.headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        builder.push_at(
            (record.offset - header.base_offset) as i32,
            record.timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &headers,
        );
    }
    builder.build().map_err(LogError::CorruptBatch)
}

fn for_each_batch(
    segment: &Cleanable,
    mut f: impl FnMut(&BatchHeader, &RecordBatch) -> Result<(), LogError>,
) -> Result<(), LogError> {
    let file = segment.file.get().map_err(|source| LogError::Io {
        op: "open for compaction",
        path: segment.file.path().to_path_buf(),
        source,
    })?;
    let mut scanner = Scanner::new(file, 0, segment.size);
    loop {
        let next = scanner.next_batch(true).map_err(|e| match e {
            super::segment::ScanError::Io(source) => {
                LogError::Io { op: "read for compaction", path: PathBuf::new(), source }
            }
            super::segment::ScanError::Corrupt(_) => {
                LogError::CorruptBatch(super::batch::BatchError::MalformedRecords {
                    reason: "a closed segment holds a corrupt batch",
                })
            }
        })?;
        let Some((header, bytes)) = next else { return Ok(()) };
        let batch = RecordBatch::parse(Bytes::copy_from_slice(bytes)).map_err(LogError::CorruptBatch)?;
        f(&header, &batch)?;
    }
}

/// What one key of the map costs at most: a 16-byte digest and an offset, with the hash
/// table's control byte, load factor and doubling slack.
const KEY_MAP_ENTRY_BYTES: usize = 56;

/// A 128-bit digest of a key (two independent SipHash runs): the map holds digests, not keys,
/// so its size does not grow with key length (Kafka's map holds MD5s). Two keys sharing a
/// digest (odds about 2^-128 per pair) would lose the older one's value.
fn key_digest(key: &[u8]) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut first = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut first);
    let mut second = std::collections::hash_map::DefaultHasher::new();
    0x9e37_79b9_7f4a_7c15u64.hash(&mut second);
    key.hash(&mut second);
    (u128::from(first.finish()) << 64) | u128::from(second.finish())
}

fn write_batch(out: &mut Segment, bytes: &Bytes) -> std::io::Result<()> {
    let header: [u8; HEADER_SIZE] = bytes[..HEADER_SIZE].try_into().expect("a parsed batch has a header");
    out.append(&header, &bytes[HEADER_SIZE..])
}
