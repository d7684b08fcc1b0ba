//! The log of one partition: ordered segments, offsets, recovery, retention and flushing.
//!
//! Invariants (asserted where they can break):
//! - `log_start_offset <= log_end_offset`, and `recovery_point <= log_end_offset`.
//! - Segments are keyed by base offset; every batch of a segment has offsets `>= base_offset`
//!   and below the next segment's base; only the last segment (the active one) takes appends.
//! - The active segment's `next_offset` is `<= log_end_offset` (equal unless a truncation
//!   landed inside a gap, where the log end offset is the truncation point).
//! - Everything below `recovery_point` has been fsynced; after a crash only segments that may
//!   hold offsets at or above it are scanned.
//! - A clean shutdown is recorded in the checkpoint file; the first mutation after opening
//!   marks the log dirty again (durably) before it touches a segment.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::batch::{
    self, BatchError, BatchHeader, RecordBatch, TimestampType, ATTRIBUTES_AT, CRC_AT, CRC_START, HEADER_SIZE,
    MAX_TIMESTAMP_AT,
};
use super::config::LogConfig;
use super::durable::{self, sync_dir};
use super::files::OpenFiles;
use super::producer_state::{
    EndTxnMarker, PendingUpdates, ProducerError, ProducerState, Validation, VerificationGuard,
};
use super::segment::{self, FileSlice, IndexSettings, ScanEnd, Segment, LOG_SUFFIX};
use super::txn_index::{AbortedTxn, TxnIndex, TXN_INDEX_SUFFIX};

/// Where wall-clock time comes from; tests drive a [`ManualClock`].
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// Wall-clock milliseconds since the epoch: the node's one reading of the system clock (commit
/// timestamps, group expiry, HTTP record timestamps, [`SystemClock`] for logs), 0 if the clock
/// is before 1970.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A clock that moves only when told to.
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicI64::new(now_ms)))
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a log needs from its node: the clock, and the node's cache of open segment files
/// (every log of a node shares one, which bounds the node's descriptors).
#[derive(Clone)]
pub struct LogContext {
    pub clock: Arc<dyn Clock>,
    pub open_files: Arc<OpenFiles>,
    /// The producer ids the log's producer state may hold (`ProducerState::max_producers`).
    pub max_producers: usize,
}

impl LogContext {
    pub fn new(clock: Arc<dyn Clock>, open_files: Arc<OpenFiles>) -> LogContext {
        LogContext { clock, open_files, max_producers: usize::MAX }
    }

    pub fn with_max_producers(mut self, max_producers: usize) -> LogContext {
        self.max_producers = max_producers.max(1);
        self
    }

    /// A context with a small cache of its own, for tests, benches and tools that open a log
    /// alone; a node passes its shared cache instead.
    pub fn standalone(clock: Arc<dyn Clock>) -> LogContext {
        LogContext { clock, open_files: OpenFiles::new(STANDALONE_OPEN_FILES), max_producers: usize::MAX }
    }
}

/// The capacity of [`LogContext::standalone`]'s cache.
const STANDALONE_OPEN_FILES: usize = 16;

/// Who is appending as leader: clients follow Kafka's producer rules; a coordinator (group,
/// transaction) may write control batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
}

/// Whether a transactional batch that opens a transaction (a client's Produce, a group
/// coordinator's TxnOffsetCommit) must show a verification (KIP-890 part 1,
/// `transaction.partition.verification.enable`): `Required(guard)` carries the
/// guard the partition handed out for it ([`ProducerState::start_verification`]), `None` when
/// it asked for none (a transaction of its epoch was open already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnVerification {
    NotRequired,
    Required(Option<VerificationGuard>),
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    /// The broker time written into LogAppendTime batches, else -1.
    pub log_append_time: i64,
    pub batch_count: u32,
    pub record_count: i64,
    pub bytes: u64,
    /// The batch repeats one its producer already wrote (an exact retry): nothing was
    /// appended, and the offsets are the original batch's.
    pub duplicate: bool,
}

/// Errors of the partition log. The server maps each to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// CORRUPT_MESSAGE (CRC, truncation) or INVALID_RECORD, depending on the batch error.
    #[error("invalid record batch: {0}")]
    CorruptBatch(#[source] BatchError),
    /// INVALID_RECORD: a well-formed batch that breaks the producer rules.
    #[error("invalid record: {reason}")]
    InvalidRecord { reason: &'static str },
    /// INVALID_RECORD, or INVALID_TIMESTAMP when a timestamp is among the reasons: records of
    /// well-formed batches break a topic rule (Kafka's `LogValidator`). `record_errors` name
    /// each record (its index within its batch) for the Produce response's `record_errors`
    /// (KIP-467), so that clients fail only those and retry nothing; nothing was appended.
    #[error("{}", invalid_records_message(*.invalid_timestamp, .record_errors))]
    InvalidRecords { invalid_timestamp: bool, record_errors: Vec<RecordError> },
    /// MESSAGE_TOO_LARGE.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: u32 },
    /// RECORD_LIST_TOO_LARGE: a batch that cannot fit in any segment.
    #[error("batch of {size} bytes exceeds segment.bytes {segment_bytes}")]
    RecordBatchTooLarge { size: usize, segment_bytes: u32 },
    /// OFFSET_OUT_OF_RANGE.
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange { offset: i64, log_start_offset: i64, log_end_offset: i64 },
    /// The next offsets would not fit in an i64.
    #[error("offset overflow appending after {log_end_offset}")]
    OffsetOverflow { log_end_offset: i64 },
    /// A replicated batch does not continue the log.
    #[error("replicated batch at offset {base_offset} does not follow log end offset {log_end_offset}")]
    NonMonotonicOffsets { base_offset: i64, log_end_offset: i64 },
    /// KAFKA_STORAGE_ERROR: the disk failed (full, I/O error).
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A batch breaks the idempotent or transactional producer rules (one Kafka error each).
    #[error("{0}")]
    Producer(#[from] ProducerError),
    /// KAFKA_STORAGE_ERROR: an earlier I/O failure left the log in a state it could not repair;
    /// it refuses writes until it is reopened (which recovers it).
    #[error("log {dir} is offline after an I/O failure")]
    Offline { dir: PathBuf },
}

/// One rejected record: its index within its batch and why, as in Kafka's `RecordError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Kafka's top-level messages for a batch with record errors (`LogValidator.processRecordErrors`).
fn invalid_records_message(invalid_timestamp: bool, errors: &[RecordError]) -> String {
    if invalid_timestamp {
        return "One or more records have been rejected due to invalid timestamp".to_string();
    }
    let shown: Vec<String> = errors
        .iter()
        .take(3)
        .map(|e| format!("RecordError(batchIndex={}, message='{}')", e.batch_index, e.message))
        .collect();
    format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three \
         errors at most: [{}]",
        errors.len(),
        shown.join(", ")
    )
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |source| LogError::Io { op, path: path.to_path_buf(), source }
}

/// Name of the per-partition checkpoint file (log start offset, recovery point, clean shutdown).
pub const CHECKPOINT_FILE: &str = "runnel.checkpoint";
const CLEANED_DIR: &str = ".cleaned";
const CLEANED_COMMIT: &str = "COMMIT";

/// What the checkpoint file records between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checkpoint {
    log_start_offset: i64,
    recovery_point: i64,
    clean_shutdown: bool,
    /// Where the last compaction's cleaned range ended (the first dirty offset), and the
    /// latest delete horizon it wrote; absent in files written before they were recorded, and
    /// ignored by readers that predate them.
    cleaned_to: Option<i64>,
    delete_horizon: Option<i64>,
}

impl Checkpoint {
    fn read(dir: &Path) -> Option<Checkpoint> {
        let text = fs::read_to_string(dir.join(CHECKPOINT_FILE)).ok()?;
        let mut lines = text.lines();
        if lines.next()? != "runnel-log-checkpoint 1" {
            return None;
        }
        let mut field = |name: &str| -> Option<i64> { lines.next()?.strip_prefix(name)?.trim().parse().ok() };
        let log_start_offset = field("log_start_offset")?;
        let recovery_point = field("recovery_point")?;
        let clean_shutdown = field("clean_shutdown")? == 1;
        let cleaned_to = field("cleaned_to");
        let delete_horizon = field("delete_horizon");
        Some(Checkpoint { log_start_offset, recovery_point, clean_shutdown, cleaned_to, delete_horizon })
    }

    /// Writes atomically (see [`durable::write_atomically`]).
    fn write(&self, dir: &Path) -> io::Result<()> {
        let mut text = format!(
            "runnel-log-checkpoint 1\nlog_start_offset {}\nrecovery_point {}\nclean_shutdown {}\n",
            self.log_start_offset, self.recovery_point, self.clean_shutdown as u8
        );
        if let Some(cleaned_to) = self.cleaned_to {
            text.push_str(&format!("cleaned_to {cleaned_to}\n"));
            if let Some(horizon) = self.delete_horizon {
                text.push_str(&format!("delete_horizon {horizon}\n"));
            }
        }
        durable::write_atomically(&dir.join(CHECKPOINT_FILE), text.as_bytes())
    }
}

/// Deletes the files of the segments at `bases`, newest first, then fsyncs the directory;
/// returns the bytes of `.log` data removed. Recovery uses it for everything after damage.
fn delete_segment_files(dir: &Path, bases: &[i64]) -> Result<u64, LogError> {
    let mut removed = 0;
    for &base in bases.iter().rev() {
        let path = dir.join(segment::file_name(base, LOG_SUFFIX));
        removed += fs::metadata(&path).map_or(0, |m| m.len());
        tracing::warn!(segment = %path.display(), "deleting a segment that follows damaged data");
        for suffix in [segment::LOG_SUFFIX, segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            match fs::remove_file(dir.join(segment::file_name(base, suffix))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(LogError::Io { op: "delete segment in", path: dir.to_path_buf(), source: e })
                }
                _ => {}
            }
        }
    }
    sync_dir(dir).map_err(io_err("sync", dir))?;
    Ok(removed)
}

/// The state an append started from (see [`Log::undo_append`]).
struct AppendStart {
    active_base: i64,
    active: segment::AppendMark,
    log_end_offset: i64,
    recovery_point: i64,
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
}

/// How an open went: whether a crash was detected and what recovery cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    pub clean_shutdown: bool,
    pub segments_recovered: usize,
    /// Bytes cut from torn or corrupt tails, including whole segments after the damage.
    pub bytes_truncated: u64,
}

pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    clock: Arc<dyn Clock>,
    open_files: Arc<OpenFiles>,
    segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    unflushed_messages: i64,
    last_flush_ms: i64,
    marked_dirty: bool,
    offline: bool,
    open_report: OpenReport,
    /// The producers of the batches below the log end offset (see `producer_state`).
    producers: ProducerState,
    /// The aborted transactions, per segment (`.txnindex`).
    txn_index: TxnIndex,
    /// Compaction's cleaner checkpoint (Kafka's first dirty offset): the segments below it were
    /// cleaned and nothing was appended to them since. A scheduling hint only (every compaction
    /// reads and rewrites all cleanable segments), so a stale value costs work, never data.
    pub(super) cleaned_to: i64,
    /// The latest delete horizon the last compaction gave a tombstone or marker it kept, if
    /// any: once it has passed, the log is worth cleaning again even with nothing dirty (Kafka's
    /// `latestDeleteHorizon`; kept in the checkpoint, so across clean shutdowns too).
    pub(super) latest_delete_horizon: Option<i64>,
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering after a crash: segments that may hold
    /// offsets at or after the recovery point are validated batch by batch and cut at the first
    /// damage; segments after a damaged one are deleted; indexes that fail their sanity check
    /// are rebuilt (a damaged batch found then cuts only that segment). After a clean shutdown
    /// nothing is scanned.
    pub fn open(dir: &Path, config: LogConfig, context: LogContext) -> Result<Log, LogError> {
        let LogContext { clock, open_files, max_producers } = context;
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let checkpoint = Checkpoint::read(dir);
        let clean = checkpoint.is_some_and(|c| c.clean_shutdown);
        finish_or_discard_cleaning(dir).map_err(io_err("finish compaction in", dir))?;
        let bases = list_segments(dir).map_err(io_err("list", dir))?;
        let now = clock.now_ms();
        let settings = index_settings(&config);
        let recovery_point = checkpoint.map_or(0, |c| c.recovery_point);
        let mut report = OpenReport { clean_shutdown: clean, ..OpenReport::default() };
        let mut segments = BTreeMap::new();
        let mut damaged = false;
        for (i, &base) in bases.iter().enumerate() {
            if damaged {
                // Deleted above, when the damage was found.
                continue;
            }
            let last = i + 1 == bases.len();
            let recover = !clean && (last || bases[i + 1] > recovery_point);
            // Measured before opening: recovery cuts the file before it reports where.
            let size_before = fs::metadata(dir.join(segment::file_name(base, LOG_SUFFIX))).map_or(0, |m| m.len());
            let (segment, end) = Segment::open(dir, base, settings, last, recover, now, &open_files)
                .map_err(io_err("open segment in", dir))?;
            if recover {
                report.segments_recovered += 1;
            }
            let previous_next = segments.values().next_back().map_or(i64::MIN, |s: &Segment| s.next_offset());
            if let ScanEnd::Truncated { position, .. } = end {
                report.bytes_truncated += size_before.saturating_sub(position);
                // Damage at or after the recovery point is a torn write: what follows it was
                // never flushed, and goes. Below it (a segment rebuilt because its index was
                // damaged) the data was flushed, and the segments after it are kept, as in
                // Kafka's LogLoader: only that segment is cut.
                if recover {
                    damaged = !last;
                    // Before the cut: a crash in between must not leave a valid-looking shorter
                    // segment followed by batches from after the damage.
                    report.bytes_truncated += delete_segment_files(dir, &bases[i + 1..])?;
                } else {
                    tracing::warn!(
                        segment = %dir.join(segment::file_name(base, LOG_SUFFIX)).display(),
                        position,
                        "damaged batch below the recovery point: the segment is cut there, later segments are kept"
                    );
                }
            }
            if base < previous_next {
                // Overlapping segments: only possible from damage; keep what came first.
                tracing::warn!(segment = %segment.log_path().display(), "segment overlaps its predecessor");
                drop(segment);
                report.bytes_truncated += delete_segment_files(dir, &bases[i..])?;
                damaged = true;
                continue;
            }
            segment.cut_to_validated_size().map_err(io_err("cut segment in", dir))?;
            segments.insert(base, segment);
        }
        let start_from_checkpoint = checkpoint.map_or(0, |c| c.log_start_offset);
        if segments.is_empty() {
            let segment = Segment::create(dir, start_from_checkpoint.max(0), settings, now, &open_files)
                .map_err(io_err("create segment in", dir))?;
            segments.insert(segment.base_offset(), segment);
        }
        // A segment that lost its successors to damage becomes the active one again.
        let active = segments.values_mut().next_back().expect("at least one segment");
        active.make_active(settings).map_err(io_err("reopen segment in", dir))?;
        let log_end_offset = active.next_offset();
        let first_base = *segments.keys().next().expect("at least one segment");
        let log_start_offset = start_from_checkpoint.max(first_base).min(log_end_offset);
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            clock,
            open_files,
            segments,
            log_start_offset,
            log_end_offset,
            recovery_point: if clean { log_end_offset } else { recovery_point.min(log_end_offset) },
            unflushed_messages: 0,
            last_flush_ms: now,
            marked_dirty: false,
            offline: false,
            open_report: report,
            producers: ProducerState::with_max_producers(max_producers),
            txn_index: TxnIndex::default(),
            cleaned_to: checkpoint
                .and_then(|c| c.cleaned_to)
                .unwrap_or(log_start_offset)
                .clamp(log_start_offset, log_end_offset),
            latest_delete_horizon: checkpoint.and_then(|c| c.delete_horizon),
        };
        log.txn_index = TxnIndex::load(dir, log.segments.keys().copied()).map_err(io_err("read txn index in", dir))?;
        log.producers.scan_snapshots(dir).map_err(io_err("list producer snapshots in", dir))?;
        log.rebuild_producer_state(clean)?;
        if !clean {
            // Everything is validated now; make it durable so the next crash starts from here.
            log.flush()?;
        }
        log.check_invariants();
        Ok(log)
    }

    fn check_invariants(&self) {
        assert!(self.log_start_offset <= self.log_end_offset, "log start offset <= log end offset");
        assert!(self.recovery_point <= self.log_end_offset, "recovery point <= log end offset");
        assert!(self.cleaned_to <= self.log_end_offset, "cleaned range <= log end offset");
        let active = self.active();
        assert!(active.next_offset() <= self.log_end_offset, "active segment ends at the log end offset");
    }

    fn active(&self) -> &Segment {
        self.segments.values().next_back().expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments.values_mut().next_back().expect("a log always has an active segment")
    }

    /// Takes the log offline after a failure that left memory and disk apart: every read and
    /// mutation is refused (KAFKA_STORAGE_ERROR) until the log is reopened from disk.
    pub(super) fn go_offline(&mut self, cause: &LogError) {
        tracing::error!(dir = %self.dir.display(), error = %cause, "the log is offline until reopened");
        self.offline = true;
    }

    /// Writes the checkpoint once with `clean_shutdown 0` before the first mutation, so a crash
    /// after it is never mistaken for a clean shutdown.
    fn mark_dirty(&mut self) -> Result<(), LogError> {
        if self.offline {
            return Err(LogError::Offline { dir: self.dir.clone() });
        }
        if !self.marked_dirty {
            self.write_checkpoint(false)?;
            self.marked_dirty = true;
        }
        Ok(())
    }

    fn write_checkpoint(&self, clean_shutdown: bool) -> Result<(), LogError> {
        Checkpoint {
            log_start_offset: self.log_start_offset,
            recovery_point: self.recovery_point,
            clean_shutdown,
            cleaned_to: Some(self.cleaned_to),
            delete_horizon: self.latest_delete_horizon,
        }
        .write(&self.dir)
        .map_err(io_err("write checkpoint in", &self.dir))
    }

    /// Appends batches from a producer (or a coordinator) as the leader: validates every batch
    /// first (header, CRC, producer rules, size, per-record topic rules), then assigns
    /// consecutive offsets from the log end offset and stamps `partition_leader_epoch`, writing
    /// the bytes as they came. All or nothing: a validation error writes nothing, and an I/O
    /// failure part-way (a write, a roll, the flush) cuts every touched segment back to where
    /// the append started (see [`Log::undo_append`]).
    pub fn append_as_leader(
        &mut self,
        records: &Bytes,
        partition_leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<AppendInfo, LogError> {
        self.append_as_leader_verified(records, partition_leader_epoch, origin, TxnVerification::NotRequired)
    }

    /// [`Log::append_as_leader`], where a client's transactional batch that opens a transaction
    /// is refused (INVALID_TXN_STATE) unless `verification` holds the producer's verification
    /// guard still in place.
    pub fn append_as_leader_verified(
        &mut self,
        records: &Bytes,
        partition_leader_epoch: i32,
        origin: AppendOrigin,
        verification: TxnVerification,
    ) -> Result<AppendInfo, LogError> {
        let now = self.clock.now_ms();
        let mut record_count = 0i64;
        let mut offsets_needed = 0i64;
        let mut record_errors = Vec::new();
        let mut invalid_timestamp = false;
        let mut producer_updates = PendingUpdates::default();
        let validation = match origin {
            AppendOrigin::Client => Validation::Client,
            AppendOrigin::Coordinator => Validation::Coordinator,
        };
        let mut rest = &records[..];
        let mut batch_index = 0;
        // (batch index, the max timestamp its records have) where its header says another:
        // empty, so never allocated, for clients that set it right.
        let mut max_timestamps: Vec<(usize, i64)> = Vec::new();
        while !rest.is_empty() {
            let header = batch::validate_first(rest).map_err(LogError::CorruptBatch)?;
            self.check_batch(&header, origin)?;
            let start = records.len() - rest.len();
            let batch_bytes = records.slice(start..start + header.size());
            let records_max =
                self.check_records(&header, &batch_bytes, origin, now, &mut record_errors, &mut invalid_timestamp)?;
            if let Some(max) = records_max.filter(|max| *max != header.max_timestamp) {
                max_timestamps.push((batch_index, max));
            }
            if header.producer_id >= 0 {
                if origin == AppendOrigin::Client {
                    if let Some(original) = self.producers.find_duplicate(&header) {
                        // Kafka answers the whole append with the retried batch's offsets.
                        return Ok(AppendInfo {
                            first_offset: original.first_offset,
                            last_offset: original.last_offset,
                            max_timestamp: original.timestamp,
                            offset_of_max_timestamp: original.last_offset,
                            log_append_time: batch::NO_TIMESTAMP,
                            batch_count: 0,
                            record_count: 0,
                            bytes: 0,
                            duplicate: true,
                        });
                    }
                }
                // Clients' batches, and the group coordinator's TxnOffsetCommit batches (the
                // only transactional data a coordinator appends).
                if let TxnVerification::Required(guard) = verification {
                    if header.attributes.is_transactional()
                        && !header.attributes.is_control()
                        && producer_updates.opens_transaction(&self.producers, &header)
                        && (guard.is_none() || self.producers.verification(header.producer_id) != guard)
                    {
                        // Kafka's "Record was not part of an ongoing transaction".
                        return Err(LogError::Producer(ProducerError::UnverifiedTransaction {
                            producer_id: header.producer_id,
                        }));
                    }
                }
                let first_offset = self.log_end_offset.saturating_add(offsets_needed);
                self.prepare_producer_update(
                    &mut producer_updates,
                    &header,
                    &batch_bytes,
                    batch_index,
                    first_offset,
                    validation,
                )?;
            }
            batch_index += 1;
            record_count += header.record_count as i64;
            offsets_needed += header.last_offset_delta as i64 + 1;
            rest = &rest[header.size()..];
        }
        if !record_errors.is_empty() {
            return Err(LogError::InvalidRecords { invalid_timestamp, record_errors });
        }
        if offsets_needed == 0 {
            return Err(LogError::InvalidRecord { reason: "no record batches" });
        }
        if self.log_end_offset.checked_add(offsets_needed).is_none_or(|end| end == i64::MAX) {
            return Err(LogError::OffsetOverflow { log_end_offset: self.log_end_offset });
        }
        self.mark_dirty()?;
        let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        let mut info = AppendInfo {
            first_offset: self.log_end_offset,
            last_offset: self.log_end_offset,
            max_timestamp: batch::NO_TIMESTAMP,
            offset_of_max_timestamp: self.log_end_offset,
            log_append_time: if log_append { now } else { batch::NO_TIMESTAMP },
            batch_count: 0,
            record_count,
            bytes: records.len() as u64,
            duplicate: false,
        };
        let mut stamped = 0;
        self.write_validated(records, now, &mut info, &producer_updates, |header, body, base_offset| {
            batch::patch_header(header, base_offset, partition_leader_epoch);
            if log_append {
                stamp_log_append_time(header, body, now);
            } else if let Some((_, max)) = max_timestamps.iter().find(|(index, _)| *index == stamped) {
                // Kafka's LogValidator: a CreateTime batch's max timestamp is its records'.
                stamp_max_timestamp(header, body, *max);
            }
            stamped += 1;
        })?;
        Ok(info)
    }

    /// Checks a producer's batch against the producer state as the batches before it in the
    /// same append leave it, and notes what it will change (applied once it is written).
    fn prepare_producer_update(
        &self,
        updates: &mut PendingUpdates,
        header: &BatchHeader,
        batch_bytes: &Bytes,
        batch_index: usize,
        first_offset: i64,
        validation: Validation,
    ) -> Result<(), LogError> {
        if header.attributes.is_control() {
            if let Some(marker) = EndTxnMarker::of_batch(batch_bytes) {
                updates.marker(&self.producers, header, marker, first_offset, batch_index, validation)?;
            }
            return Ok(());
        }
        updates.data_batch(&self.producers, header, first_offset, batch_index, validation)?;
        Ok(())
    }

    /// Writes batches that passed validation, one by one, after `stamp` has rewritten each header
    /// (given the offset the batch starts at), and notes each in `info`. On any failure the log
    /// is cut back to where it was: a partition's append is all or nothing.
    /// The producer state takes each batch's update as the batch is written, so a snapshot taken
    /// by a roll between two batches is the state of everything before the new segment.
    fn write_validated(
        &mut self,
        records: &[u8],
        now: i64,
        info: &mut AppendInfo,
        producer_updates: &PendingUpdates,
        mut stamp: impl FnMut(&mut [u8; HEADER_SIZE], &[u8], i64),
    ) -> Result<(), LogError> {
        let start = self.append_start();
        let mut undo_producers = self.producers.begin();
        let mut updates = producer_updates.iter().peekable();
        let written = (|| {
            let mut rest = records;
            let mut batch_index = 0;
            while !rest.is_empty() {
                let (_, size) = BatchHeader::peek_size(rest).expect("validated above");
                let (batch, tail) = rest.split_at(size);
                rest = tail;
                let mut header: [u8; HEADER_SIZE] = batch[..HEADER_SIZE].try_into().expect("validated size");
                let body = &batch[HEADER_SIZE..];
                stamp(&mut header, body, self.log_end_offset);
                let parsed = BatchHeader::read(&header).expect("61 bytes");
                self.append_batch(&header, body, &parsed, now)?;
                let aborted_before = undo_producers.aborted().len();
                while let Some(update) = updates.next_if(|u| u.batch_index() == batch_index) {
                    self.producers.apply(&update.written_at(parsed.max_timestamp), &mut undo_producers);
                }
                for &txn in &undo_producers.aborted()[aborted_before..] {
                    let base = self.active().base_offset();
                    self.txn_index.append(&self.dir, base, txn).map_err(io_err("append to txn index in", &self.dir))?;
                }
                self.producers.set_map_end_offset(self.log_end_offset);
                batch_index += 1;
                info.first_offset = info.first_offset.min(parsed.base_offset);
                info.last_offset = parsed.last_offset();
                if parsed.max_timestamp > info.max_timestamp {
                    info.max_timestamp = parsed.max_timestamp;
                    info.offset_of_max_timestamp = parsed.last_offset();
                }
                info.batch_count += 1;
            }
            self.after_append(info.record_count)
        })();
        if let Err(e) = written {
            let wrote_aborts = !undo_producers.aborted().is_empty();
            self.producers.undo(undo_producers);
            if wrote_aborts {
                if let Err(undo) = self.txn_index.truncate_from(&self.dir, start.log_end_offset) {
                    tracing::error!(dir = %self.dir.display(), error = %undo, "could not undo a txn index append; the log is offline");
                    self.offline = true;
                }
            }
            self.undo_append(&start);
            return Err(e);
        }
        Ok(())
    }

    /// Kafka's per-record rules (`LogValidator.validateRecord`): compacted topics need a key on
    /// every client record; with CreateTime, timestamps must lie within
    /// `message.timestamp.before.max.ms` / `after.max.ms` of the broker's clock. Every client
    /// batch is decoded whole (decompressed if it is compressed), as Kafka's `LogValidator`
    /// does: a batch whose CRC holds but whose records do not decode (a wrong record count,
    /// a length past the end, trailing bytes, a stream that does not decompress) is refused
    /// with CORRUPT_MESSAGE instead of stored for every consumer to trip on. The other origins
    /// are decoded only when a timestamp bound applies: their batches were checked where they
    /// came from.
    fn check_records(
        &self,
        header: &BatchHeader,
        batch_bytes: &Bytes,
        origin: AppendOrigin,
        now: i64,
        errors: &mut Vec<RecordError>,
        invalid_timestamp: &mut bool,
    ) -> Result<Option<i64>, LogError> {
        let need_key = self.config.cleanup_policy.compact && origin == AppendOrigin::Client;
        let create_time = self.config.message_timestamp_type == TimestampType::CreateTime;
        let before_max = self.config.message_timestamp_before_max_ms;
        let after_max = self.config.message_timestamp_after_max_ms;
        let bounded = create_time && (before_max != i64::MAX || after_max != i64::MAX);
        if origin != AppendOrigin::Client && !bounded {
            return Ok(None);
        }
        let batch = RecordBatch::validated(batch_bytes.clone(), *header);
        let mut max_timestamp = batch::NO_TIMESTAMP;
        let mut batch_index = 0i32;
        // Borrowed records: nothing is allocated per record on the append path.
        let records = batch.record_iter().map_err(LogError::CorruptBatch)?;
        records
            .try_for_each_borrowed(|record| {
                max_timestamp = max_timestamp.max(record.timestamp);
                // One error per record, the key first, as Kafka's `validateRecord` returns.
                if need_key && record.key.is_none() {
                    errors.push(RecordError {
                        batch_index,
                        message: format!(
                            "Compacted topic cannot accept message without key in topic partition {}.",
                            self.topic_partition()
                        ),
                    });
                } else {
                    // i128: a client timestamp and the bounds are arbitrary i64s.
                    let (ts, now_wide) = (record.timestamp as i128, now as i128);
                    let too_old = before_max != i64::MAX && now_wide - ts > before_max as i128;
                    let too_new = after_max != i64::MAX && ts - now_wide > after_max as i128;
                    if bounded && record.timestamp != batch::NO_TIMESTAMP && (too_old || too_new) {
                        *invalid_timestamp = true;
                        errors.push(RecordError {
                            batch_index,
                            message: format!(
                                "Timestamp {} of message with offset {} is out of range. The timestamp should be \
                                 within [{}, {}]",
                                record.timestamp,
                                record.offset,
                                now.saturating_sub(before_max),
                                now.saturating_add(after_max)
                            ),
                        });
                    }
                }
                batch_index += 1;
            })
            .map_err(LogError::CorruptBatch)?;
        // The records' max timestamp, for a client's CreateTime batch (its header's is checked
        // against it); control batches and LogAppendTime ones keep theirs.
        let create_time_batch = batch.header().attributes.timestamp_type() == TimestampType::CreateTime;
        let judged = origin == AppendOrigin::Client && create_time_batch && !batch.header().attributes.is_control();
        Ok(judged.then_some(max_timestamp))
    }

    /// `<topic>-<partition>`, the directory's name, for Kafka's messages.
    fn topic_partition(&self) -> String {
        self.dir.file_name().map_or_else(|| self.dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// Where an append starts, for [`Log::undo_append`].
    fn append_start(&self) -> AppendStart {
        let (&active_base, active) = self.segments.iter().next_back().expect("a log always has an active segment");
        AppendStart {
            active_base,
            active: active.append_mark(),
            log_end_offset: self.log_end_offset,
            recovery_point: self.recovery_point,
        }
    }

    /// Puts the log back where `start` found it after a write, roll or flush failed part-way:
    /// segments rolled since are deleted, the segment that was active is cut back to its size
    /// and index entries and becomes active again, and the log end offset and recovery point
    /// are restored; the cut is fsynced so that a crash cannot bring the batches back. Nothing
    /// of the append stays, so a client's retry appends each batch once. If the undo itself
    /// fails the log goes offline (a reopen recovers it).
    fn undo_append(&mut self, start: &AppendStart) {
        let settings = index_settings(&self.config);
        let dir = self.dir.clone();
        let undone = (|| -> io::Result<()> {
            let rolled: Vec<i64> = self.segments.range(start.active_base + 1..).map(|(base, _)| *base).collect();
            for base in rolled.into_iter().rev() {
                let segment = self.segments.remove(&base).expect("listed above");
                segment.delete_files()?;
                self.producers.delete_snapshot(&dir, base)?;
                self.txn_index.remove_segment(&dir, base)?;
            }
            let active = self.segments.get_mut(&start.active_base).expect("the segment the append started in");
            active.cut_back(&start.active, settings)?;
            sync_dir(&dir)
        })();
        // Only a roll or flush during the append moved the recovery point the checkpoint names;
        // otherwise the checkpoint on disk is still right, and rewriting it would fail on the
        // full disk that failed the append and take the log offline for nothing.
        let checkpoint_moved = self.recovery_point != start.recovery_point;
        self.log_end_offset = start.log_end_offset;
        self.recovery_point = start.recovery_point;
        let undone = undone.map_err(io_err("undo a failed append in", &dir)).and_then(|()| {
            if checkpoint_moved {
                self.write_checkpoint(false)
            } else {
                Ok(())
            }
        });
        match undone {
            Ok(()) => self.check_invariants(),
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "could not undo a failed append; the log is offline");
                self.offline = true;
            }
        }
    }

    /// Appends batches replicated from the leader: offsets and epochs are kept as they are;
    /// they must continue the log.
    pub fn append_as_follower(&mut self, records: &Bytes) -> Result<AppendInfo, LogError> {
        let mut rest = &records[..];
        let mut expected = self.log_end_offset;
        let mut record_count = 0;
        let mut producer_updates = PendingUpdates::default();
        let mut batch_index = 0;
        while !rest.is_empty() {
            let header = batch::validate_first(rest).map_err(LogError::CorruptBatch)?;
            if header.producer_id >= 0 {
                // The leader checked it; a follower builds the same state, unchecked.
                let start = records.len() - rest.len();
                let batch_bytes = records.slice(start..start + header.size());
                self.prepare_producer_update(
                    &mut producer_updates,
                    &header,
                    &batch_bytes,
                    batch_index,
                    header.base_offset,
                    Validation::None,
                )?;
            }
            batch_index += 1;
            if header.base_offset < expected {
                return Err(LogError::NonMonotonicOffsets {
                    base_offset: header.base_offset,
                    log_end_offset: self.log_end_offset,
                });
            }
            if header.size() > self.config.segment_bytes as usize {
                return Err(LogError::RecordBatchTooLarge {
                    size: header.size(),
                    segment_bytes: self.config.segment_bytes,
                });
            }
            if header.last_offset() == i64::MAX {
                return Err(LogError::OffsetOverflow { log_end_offset: self.log_end_offset });
            }
            expected = header.last_offset() + 1;
            record_count += header.record_count as i64;
            rest = &rest[header.size()..];
        }
        if records.is_empty() {
            return Err(LogError::InvalidRecord { reason: "no record batches" });
        }
        self.mark_dirty()?;
        let now = self.clock.now_ms();
        let mut info = AppendInfo {
            first_offset: i64::MAX,
            last_offset: self.log_end_offset,
            max_timestamp: batch::NO_TIMESTAMP,
            offset_of_max_timestamp: self.log_end_offset,
            log_append_time: batch::NO_TIMESTAMP,
            batch_count: 0,
            record_count,
            bytes: records.len() as u64,
            duplicate: false,
        };
        // A follower keeps the leader's offsets and epochs: nothing to stamp.
        self.write_validated(records, now, &mut info, &producer_updates, |_, _, _| {})?;
        Ok(info)
    }

    fn check_batch(&self, header: &BatchHeader, origin: AppendOrigin) -> Result<(), LogError> {
        if origin == AppendOrigin::Client {
            if header.attributes.is_control() {
                return Err(LogError::InvalidRecord { reason: "clients may not write control batches" });
            }
            if header.record_count <= 0 || header.record_count != header.last_offset_delta + 1 {
                return Err(LogError::InvalidRecord { reason: "record count does not match the offset range" });
            }
            if header.producer_id >= 0 && header.base_sequence < 0 {
                return Err(LogError::InvalidRecord { reason: "idempotent batch without a sequence number" });
            }
        }
        if header.size() > self.config.max_message_bytes as usize {
            return Err(LogError::MessageTooLarge { size: header.size(), max: self.config.max_message_bytes });
        }
        if header.size() > self.config.segment_bytes as usize {
            return Err(LogError::RecordBatchTooLarge {
                size: header.size(),
                segment_bytes: self.config.segment_bytes,
            });
        }
        Ok(())
    }

    /// Writes one batch into the active segment, rolling first when it is due.
    fn append_batch(
        &mut self,
        header_bytes: &[u8; HEADER_SIZE],
        body: &[u8],
        header: &BatchHeader,
        now: i64,
    ) -> Result<(), LogError> {
        if self.should_roll(header, now) {
            self.roll_at(header.base_offset)?;
        }
        if let Err(source) = self.active_mut().append(header_bytes, body) {
            // The segment cut the partial batch (or could not: the caller's `undo_append` cuts
            // again, and takes the log offline if that fails too).
            return Err(LogError::Io { op: "append to", path: self.dir.clone(), source });
        }
        self.log_end_offset = header.last_offset() + 1;
        Ok(())
    }

    fn should_roll(&self, header: &BatchHeader, now: i64) -> bool {
        let active = self.active();
        if header.last_offset() - active.base_offset() > i32::MAX as i64 {
            return true;
        }
        if active.is_empty() {
            return false;
        }
        // A compacted log's active segment is never cleaned: it rolls by max.compaction.lag.ms
        // too, as in Kafka, so no record waits longer than that to become cleanable.
        let segment_ms = if self.config.cleanup_policy.compact {
            self.config.segment_ms.min(self.config.max_compaction_lag_ms)
        } else {
            self.config.segment_ms
        };
        active.size() + header.size() as u64 > self.config.segment_bytes as u64
            // Strictly more than segment.ms less the segment's jitter, as Kafka's
            // `LogSegment.shouldRoll`.
            || active.time_waited_for_roll(now, header.max_timestamp)
                > segment_ms - self.roll_jitter_ms(active.base_offset(), segment_ms)
            || active.indexes_full()
    }

    /// What `segment.jitter.ms` takes off the roll age `segment_ms` (`segment.ms`, or less on a
    /// compacted log) for the segment at `base_offset`: in `[0, min(segment.jitter.ms,
    /// segment_ms))`, drawn from the log's directory and the base offset (Kafka draws at random
    /// when it creates the segment), so partitions created together roll at different times,
    /// and the same segment keeps its jitter across restarts. Bounded by the age actually used,
    /// so the threshold stays positive (Kafka bounds it by `segment.ms` alone).
    fn roll_jitter_ms(&self, base_offset: i64, segment_ms: i64) -> i64 {
        let bound = self.config.segment_jitter_ms.min(segment_ms);
        if bound <= 0 {
            return 0;
        }
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.dir, base_offset).hash(&mut hasher);
        (hasher.finish() % bound as u64) as i64
    }

    fn after_append(&mut self, record_count: i64) -> Result<(), LogError> {
        self.unflushed_messages += record_count;
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    /// Closes the active segment and starts a new one at the log end offset.
    pub fn roll(&mut self) -> Result<(), LogError> {
        if self.active().is_empty() {
            return Ok(());
        }
        self.mark_dirty()?;
        self.roll_at(self.log_end_offset)
    }

    fn roll_at(&mut self, base_offset: i64) -> Result<(), LogError> {
        let base_offset = base_offset.max(self.log_end_offset);
        let now = self.clock.now_ms();
        let dir = self.dir.clone();
        let settings = index_settings(&self.config);
        self.active_mut().close_active().map_err(io_err("close segment in", &dir))?;
        let closed = self.active().base_offset();
        self.txn_index.sync(&dir, closed).map_err(io_err("sync txn index in", &dir))?;
        let segment = Segment::create(&dir, base_offset, settings, now, &self.open_files)
            .map_err(io_err("create segment in", &dir))?;
        self.segments.insert(base_offset, segment);
        // Kafka takes a producer snapshot at every new segment's base offset, so recovery
        // replays at most the active segment. Nothing lies between the log end and the base.
        // After the segment exists, so that a failed append's undo removes both.
        self.producers.set_map_end_offset(base_offset);
        self.producers.write_snapshot(&dir).map_err(io_err("write producer snapshot in", &dir))?;
        // The closed segment was fsynced: nothing before the new one needs recovery.
        self.recovery_point = self.recovery_point.max(base_offset.min(self.log_end_offset));
        self.write_checkpoint(false)
    }

    /// Reads raw batches starting at the batch that contains `from_offset`: whole batches,
    /// at most `max_bytes` but always at least one, none at or past `upper_bound_offset` (the
    /// high watermark). Reads come from one segment, as in Kafka; an empty result means no
    /// data yet at `from_offset`.
    pub fn read(&self, from_offset: i64, max_bytes: usize, upper_bound_offset: i64) -> Result<Bytes, LogError> {
        match self.slice(from_offset, upper_bound_offset)? {
            Some(slice) => slice.read_batches(max_bytes, upper_bound_offset).map_err(io_err("read", &self.dir)),
            None => Ok(Bytes::new()),
        }
    }

    /// Finds where a read at `from_offset` starts, without reading: the returned slice can be
    /// read after the caller releases its lock on the log.
    pub fn slice(&self, from_offset: i64, upper_bound_offset: i64) -> Result<Option<FileSlice>, LogError> {
        if self.offline {
            return Err(LogError::Offline { dir: self.dir.clone() });
        }
        if from_offset < self.log_start_offset || from_offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset: from_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let upper = upper_bound_offset.min(self.log_end_offset);
        if from_offset >= upper {
            return Ok(None);
        }
        let start = self.segments.range(..=from_offset).next_back().map_or(i64::MIN, |(base, _)| *base);
        for segment in self.segments.range(start..).map(|(_, s)| s) {
            if segment.base_offset() >= upper {
                break;
            }
            if let Some((position, header)) = segment.locate(from_offset).map_err(io_err("read", &self.dir))? {
                if header.base_offset >= upper {
                    return Ok(None);
                }
                return Ok(Some(segment.slice(position).map_err(io_err("read", &self.dir))?));
            }
        }
        Ok(None)
    }

    /// Removes every batch that holds an offset `>= offset` (replication truncates divergent
    /// suffixes this way). The log end offset becomes `offset`, or the base offset of the batch
    /// that contained it.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.log_end_offset {
            return Ok(());
        }
        if offset < self.log_start_offset {
            return self.truncate_fully_and_start_at(offset.max(0));
        }
        self.mark_dirty()?;
        let dir = self.dir.clone();
        let settings = index_settings(&self.config);
        // Newest first: a crash part-way leaves a shorter log, never a hole in the offsets.
        let doomed: Vec<i64> = self.segments.range(offset + 1..).rev().map(|(base, _)| *base).collect();
        for base in doomed {
            if self.segments.len() == 1 {
                break;
            }
            let segment = self.segments.remove(&base).expect("listed above");
            segment.delete_files().map_err(io_err("delete segment in", &dir))?;
            self.txn_index.remove_segment(&dir, base).map_err(io_err("delete txn index in", &dir))?;
        }
        let active = self.active_mut();
        let new_end = active.truncate_to(offset, settings).map_err(io_err("truncate", &dir))?;
        active.make_active(settings).map_err(io_err("truncate", &dir))?;
        self.log_end_offset = new_end;
        self.log_start_offset = self.log_start_offset.min(self.log_end_offset);
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        self.cleaned_to = self.cleaned_to.clamp(self.log_start_offset, self.log_end_offset);
        self.check_invariants();
        // The log start offset may have moved down (the cut batch held it); a crash must not
        // bring back the old one, which would hide the offsets appended after it.
        self.write_checkpoint(false)?;
        // Kafka's `truncateAndReload`: the newest snapshot at or below the new end, then the
        // batches after it.
        self.rebuild_producer_state(false)
    }

    /// Deletes everything and starts empty at `offset` (a follower far behind the leader).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.mark_dirty()?;
        let dir = self.dir.clone();
        for (base, segment) in std::mem::take(&mut self.segments) {
            segment.delete_files().map_err(io_err("delete segment in", &dir))?;
            self.txn_index.remove_segment(&dir, base).map_err(io_err("delete txn index in", &dir))?;
        }
        let segment =
            Segment::create(&dir, offset, index_settings(&self.config), self.clock.now_ms(), &self.open_files)
                .map_err(io_err("create segment in", &dir))?;
        self.segments.insert(offset, segment);
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.recovery_point = offset;
        self.cleaned_to = offset;
        let snapshots: Vec<i64> = self.producers.snapshot_offsets().collect();
        for snapshot in snapshots {
            self.producers.delete_snapshot(&dir, snapshot).map_err(io_err("delete producer snapshot in", &dir))?;
        }
        self.producers.clear(offset);
        self.write_checkpoint(false)
    }

    /// DeleteRecords: moves the log start offset up to `offset` (at most the log end offset)
    /// and deletes the segments that lie wholly below it. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, LogError> {
        if offset > self.log_end_offset || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if offset > self.log_start_offset {
            self.mark_dirty()?;
            self.log_start_offset = offset;
            self.write_checkpoint(false)?;
            self.delete_segments_below_start()?;
        }
        Ok(self.log_start_offset)
    }

    /// Applies `retention.ms` and `retention.bytes` (with `cleanup.policy` delete) and the log
    /// start offset, deleting whole segments from the oldest, never past `high_watermark`.
    /// The active segment goes too when it is due and wholly below the high watermark (it is
    /// rolled first, so an idle partition's old data expires, as in Kafka's UnifiedLog).
    pub fn enforce_retention(&mut self, high_watermark: i64) -> Result<RetentionOutcome, LogError> {
        let mut outcome = self.delete_segments_below_start()?;
        if !self.config.cleanup_policy.delete {
            return Ok(outcome);
        }
        let now = self.clock.now_ms();
        let mut excess =
            if self.config.retention_bytes >= 0 { self.size_bytes() as i64 - self.config.retention_bytes } else { 0 };
        let due = |segment: &Segment, excess: i64| {
            let expired = self.config.retention_ms >= 0 && largest_time(segment) < now - self.config.retention_ms;
            expired || excess > 0 && excess - segment.size() as i64 >= 0
        };
        let mut doomed = Vec::new();
        let closed: Vec<(i64, i64)> = self.closed_segments_with_next().collect();
        let mut every_closed_due = true;
        for (base, next_base) in closed {
            let segment = &self.segments[&base];
            if next_base > high_watermark || !due(segment, excess) {
                every_closed_due = false;
                break;
            }
            excess -= segment.size() as i64;
            doomed.push(base);
        }
        let active = self.active();
        if every_closed_due && !active.is_empty() && high_watermark >= self.log_end_offset && due(active, excess) {
            let base = active.base_offset();
            self.roll()?;
            doomed.push(base);
        }
        if let Some(&last) = doomed.last() {
            let new_start = *self.segments.range(last + 1..).next().expect("the active segment remains").0;
            self.mark_dirty()?;
            self.log_start_offset = self.log_start_offset.max(new_start);
            self.write_checkpoint(false)?;
            let more = self.delete_segments_below_start()?;
            outcome.segments_deleted += more.segments_deleted;
            outcome.bytes_deleted += more.bytes_deleted;
        }
        Ok(outcome)
    }

    /// Closed segments as (base offset, next segment's base offset), oldest first.
    fn closed_segments_with_next(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        bases.windows(2).map(|w| (w[0], w[1])).collect::<Vec<_>>().into_iter()
    }

    fn delete_segments_below_start(&mut self) -> Result<RetentionOutcome, LogError> {
        let mut outcome = RetentionOutcome::default();
        let doomed: Vec<i64> = self
            .closed_segments_with_next()
            .take_while(|(_, next_base)| *next_base <= self.log_start_offset)
            .map(|(base, _)| base)
            .collect();
        if doomed.is_empty() {
            return Ok(outcome);
        }
        self.mark_dirty()?;
        for base in doomed {
            let segment = self.segments.remove(&base).expect("listed above");
            outcome.segments_deleted += 1;
            outcome.bytes_deleted += segment.size();
            tracing::debug!(segment = %segment.log_path().display(), "deleting segment by retention");
            segment.delete_files().map_err(io_err("delete segment in", &self.dir))?;
            self.txn_index.remove_segment(&self.dir, base).map_err(io_err("delete txn index in", &self.dir))?;
        }
        // The snapshots of deleted segments go with them (the newest always stays).
        let first_base = *self.segments.keys().next().expect("the active segment remains");
        self.producers
            .delete_snapshots_below(&self.dir, first_base)
            .map_err(io_err("delete producer snapshot in", &self.dir))?;
        Ok(outcome)
    }

    /// ListOffsets by timestamp: the first record at or after `timestamp` (at or after the log
    /// start offset), as `(offset, timestamp)`.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        for segment in self.segments.values() {
            if segment.max_timestamp() < timestamp || segment.next_offset() <= self.log_start_offset {
                continue;
            }
            let entry = segment.time_index().lookup(timestamp).map_err(io_err("read", &self.dir))?;
            let from = entry.map_or(segment.base_offset(), |e| e.offset);
            let from = from.max(self.log_start_offset);
            let Some((position, _)) = segment.locate(from).map_err(io_err("read", &self.dir))? else { continue };
            let mut scanner = segment.scanner(position).map_err(io_err("read", &self.dir))?;
            while let Some((header, bytes)) = scanner.next_batch(false).map_err(|e| scan_error(e, &self.dir))? {
                if header.max_timestamp < timestamp || header.attributes.is_control() {
                    continue;
                }
                let batch = RecordBatch::parse(Bytes::copy_from_slice(bytes)).map_err(LogError::CorruptBatch)?;
                for record in batch.record_iter().map_err(LogError::CorruptBatch)? {
                    let record = record.map_err(LogError::CorruptBatch)?;
                    if record.timestamp >= timestamp && record.offset >= self.log_start_offset {
                        return Ok(Some((record.offset, record.timestamp)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record with the largest timestamp, as `(offset, timestamp)`.
    pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>, LogError> {
        let Some(segment) = self
            .segments
            .values()
            .filter(|s| !s.is_empty() && s.max_timestamp() != batch::NO_TIMESTAMP)
            .max_by_key(|s| (s.max_timestamp(), std::cmp::Reverse(s.base_offset())))
        else {
            return Ok(None);
        };
        let max = segment.max_timestamp();
        let Some((position, _)) =
            segment.locate(segment.offset_of_max_timestamp()).map_err(io_err("read", &self.dir))?
        else {
            return Ok(None);
        };
        let mut scanner = segment.scanner(position).map_err(io_err("read", &self.dir))?;
        if let Some((_, bytes)) = scanner.next_batch(false).map_err(|e| scan_error(e, &self.dir))? {
            let batch = RecordBatch::parse(Bytes::copy_from_slice(bytes)).map_err(LogError::CorruptBatch)?;
            for record in batch.record_iter().map_err(LogError::CorruptBatch)? {
                let record = record.map_err(LogError::CorruptBatch)?;
                if record.timestamp == max {
                    return Ok(Some((record.offset, max)));
                }
            }
            return Ok(Some((batch.last_offset(), max)));
        }
        Ok(None)
    }

    /// fsyncs the active segment and moves the recovery point to the log end offset.
    pub fn flush(&mut self) -> Result<(), LogError> {
        let dir = self.dir.clone();
        self.active_mut().flush().map_err(io_err("flush", &dir))?;
        self.recovery_point = self.log_end_offset;
        self.unflushed_messages = 0;
        self.last_flush_ms = self.clock.now_ms();
        let clean = !self.marked_dirty && self.open_report.clean_shutdown;
        self.write_checkpoint(clean)?;
        self.marked_dirty |= !clean;
        Ok(())
    }

    /// Flushes if `flush.ms` has passed since the last flush and there is something to flush.
    pub fn maybe_flush(&mut self) -> Result<bool, LogError> {
        let due = self.clock.now_ms() - self.last_flush_ms >= self.config.flush_ms;
        if due && self.recovery_point < self.log_end_offset {
            self.flush()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Clean shutdown: flush, write the active segment's indexes, record it in the checkpoint.
    pub fn close(mut self) -> Result<(), LogError> {
        if self.offline {
            return Err(LogError::Offline { dir: self.dir.clone() });
        }
        let dir = self.dir.clone();
        self.active_mut().close_active().map_err(io_err("close", &dir))?;
        self.txn_index.sync(&dir, self.active().base_offset()).map_err(io_err("sync txn index in", &dir))?;
        // A log that never had a producer and has no snapshot needs none: a clean open without
        // one starts with no producers.
        if !self.producers.is_empty() || self.producers.snapshot_offsets().next().is_some() {
            self.producers.set_map_end_offset(self.log_end_offset);
            self.producers.write_snapshot(&dir).map_err(io_err("write producer snapshot in", &dir))?;
        }
        self.recovery_point = self.log_end_offset;
        self.write_checkpoint(true)
    }

    /// Rebuilds the producer state from the newest snapshot at or below the log end offset and
    /// the batches after it (from the first segment when there is none, unless the log was shut
    /// down cleanly without one: then it never had producers since snapshots existed).
    fn rebuild_producer_state(&mut self, clean_shutdown: bool) -> Result<(), LogError> {
        let dir = self.dir.clone();
        // Decided from the files there before loading (Kafka's rule): when every snapshot is
        // corrupt or past the end, the log did have producers, and a clean shutdown does not
        // spare the replay.
        let had_snapshots = self.producers.snapshot_offsets().next().is_some();
        let loaded = self
            .producers
            .load_latest_snapshot(&dir, self.log_end_offset)
            .map_err(io_err("load producer snapshot in", &dir))?;
        let first_base = *self.segments.keys().next().expect("at least one segment");
        let from = match loaded {
            Some(offset) => offset,
            None if clean_shutdown && !had_snapshots => self.log_end_offset,
            None => first_base,
        };
        let from = from.max(first_base);
        self.producers.set_map_end_offset(from);
        // The replay writes the aborts after `from` again.
        self.txn_index.truncate_from(&dir, from).map_err(io_err("truncate txn index in", &dir))?;
        let mut aborted: Vec<(i64, AbortedTxn)> = Vec::new();
        let segments: Vec<i64> = self.segments.range(..=from).next_back().map(|(b, _)| *b).into_iter().collect();
        let start_base = segments.first().copied().unwrap_or(first_base);
        for segment in self.segments.range(start_base..).map(|(_, s)| s) {
            if segment.next_offset() <= from {
                continue;
            }
            let position = match segment.locate(from).map_err(io_err("read", &dir))? {
                Some((position, _)) => position,
                None => continue,
            };
            let mut scanner = segment.scanner(position).map_err(io_err("read", &dir))?;
            while let Some((header, bytes)) = scanner.next_batch(false).map_err(|e| scan_error(e, &dir))? {
                if header.last_offset() >= from {
                    if let Some(txn) = self.producers.replay(&header, bytes) {
                        aborted.push((segment.base_offset(), txn));
                    }
                }
            }
        }
        for (base, txn) in aborted {
            self.txn_index.append(&dir, base, txn).map_err(io_err("append to txn index in", &dir))?;
        }
        self.producers.set_map_end_offset(self.log_end_offset);
        Ok(())
    }

    /// The last stable offset for a high watermark: no transaction open (or completed above the
    /// high watermark) starts below it, and it is never above the high watermark (KIP-98).
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        // Never below the log start either: retention or DeleteRecords can remove the start of
        // an open transaction (Kafka's `maybeIncrementFirstUnstableOffset`).
        let first_unstable = self.producers.first_unstable_offset(high_watermark).map(|o| o.max(self.log_start_offset));
        first_unstable.map_or(high_watermark, |o| o.min(high_watermark))
    }

    /// Forgets the completed transactions whose markers are below the high watermark.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        self.producers.on_high_watermark(high_watermark);
    }

    /// The aborted transactions overlapping `[fetch_offset, upper_bound_offset)`, for a
    /// `read_committed` fetch.
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_bound_offset: i64) -> Vec<AbortedTxn> {
        if self.txn_index.is_empty() {
            return Vec::new();
        }
        self.txn_index.overlapping(fetch_offset, upper_bound_offset)
    }

    /// The aborted-transaction index (tests, tools).
    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }
    pub(super) fn txn_index_mut(&mut self) -> &mut TxnIndex {
        &mut self.txn_index
    }

    /// Removes producers idle for `producer.id.expiration.ms` (Kafka's expiry, every
    /// `producer.id.expiration.check.interval.ms`); returns how many went.
    pub fn expire_producers(&mut self, expiration_ms: i64) -> usize {
        let now = self.clock.now_ms();
        self.producers.expire(now, expiration_ms)
    }

    /// The producers of this partition.
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// See [`ProducerState::start_verification`].
    pub fn start_txn_verification(
        &mut self,
        producer_id: i64,
        epoch: i16,
    ) -> Result<Option<VerificationGuard>, ProducerError> {
        let now = self.clock.now_ms();
        self.producers.start_verification(producer_id, epoch, now)
    }

    /// See [`ProducerState::end_verification`].
    pub fn end_txn_verification(&mut self, producer_id: i64, guard: VerificationGuard) {
        self.producers.end_verification(producer_id, guard);
    }

    /// Replaces the config (AlterConfigs). Index sizes apply to segments created afterwards.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }
    /// Bytes of all segment `.log` files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
    /// The cache of open segment files this log shares with the other logs of its node.
    pub fn open_files(&self) -> &Arc<OpenFiles> {
        &self.open_files
    }

    pub(super) fn segments(&self) -> &BTreeMap<i64, Segment> {
        &self.segments
    }
    pub(super) fn segments_mut(&mut self) -> &mut BTreeMap<i64, Segment> {
        &mut self.segments
    }
    pub(super) fn before_mutation(&mut self) -> Result<(), LogError> {
        self.mark_dirty()
    }
}

fn scan_error(e: segment::ScanError, dir: &Path) -> LogError {
    match e {
        segment::ScanError::Io(source) => LogError::Io { op: "read", path: dir.to_path_buf(), source },
        segment::ScanError::Corrupt(_) => {
            LogError::CorruptBatch(BatchError::MalformedRecords { reason: "segment holds a corrupt batch" })
        }
    }
}

/// The newest timestamp of a segment for time retention; its file's mtime if it has none.
fn largest_time(segment: &Segment) -> i64 {
    if segment.max_timestamp() != batch::NO_TIMESTAMP {
        return segment.max_timestamp();
    }
    fs::metadata(segment.log_path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(i64::MAX, |d| d.as_millis() as i64)
}

/// CreateTime: the max timestamp the batch's records have replaces the one its header claimed
/// (a client's header is not trusted: retention, rolling and the time index go by it); the CRC
/// covers it.
fn stamp_max_timestamp(header: &mut [u8; HEADER_SIZE], body: &[u8], max: i64) {
    header[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max.to_be_bytes());
    let crc = batch::crc32c(&[&header[CRC_START..], body]);
    header[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

/// LogAppendTime: the broker's clock becomes the batch's max timestamp; the CRC covers it.
fn stamp_log_append_time(header: &mut [u8; HEADER_SIZE], body: &[u8], now: i64) {
    let attributes = batch::Attributes(i16::from_be_bytes([header[ATTRIBUTES_AT], header[ATTRIBUTES_AT + 1]]))
        .with_timestamp_type(TimestampType::LogAppendTime);
    header[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.0.to_be_bytes());
    header[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now.to_be_bytes());
    let crc = batch::crc32c(&[&header[CRC_START..], body]);
    header[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

pub(super) fn index_settings(config: &LogConfig) -> IndexSettings {
    IndexSettings { index_interval_bytes: config.index_interval_bytes, segment_index_bytes: config.segment_index_bytes }
}

/// Base offsets of the `.log` files in `dir`, ascending. Index files without a log and leftover
/// temporary files are removed.
fn list_segments(dir: &Path) -> io::Result<Vec<i64>> {
    let mut bases = Vec::new();
    let mut orphans = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(LOG_SUFFIX) {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        } else if let Some(stem) = name
            .strip_suffix(segment::INDEX_SUFFIX)
            .or_else(|| name.strip_suffix(segment::TIME_INDEX_SUFFIX))
            .or_else(|| name.strip_suffix(TXN_INDEX_SUFFIX))
        {
            if stem.parse::<i64>().is_ok() {
                orphans.push((stem.to_string(), entry.path()));
            }
        }
    }
    bases.sort_unstable();
    for (stem, path) in orphans {
        if stem.parse::<i64>().is_ok_and(|b| bases.binary_search(&b).is_err()) {
            fs::remove_file(path)?;
        }
    }
    Ok(bases)
}

/// A compaction whose files are complete (`COMMIT` present) is finished by moving the rest of
/// its files into place; an incomplete one is thrown away.
fn finish_or_discard_cleaning(dir: &Path) -> io::Result<()> {
    let cleaned = dir.join(CLEANED_DIR);
    if !cleaned.exists() {
        return Ok(());
    }
    if cleaned.join(CLEANED_COMMIT).exists() {
        for entry in fs::read_dir(&cleaned)? {
            let entry = entry?;
            if entry.file_name() != CLEANED_COMMIT {
                fs::rename(entry.path(), dir.join(entry.file_name()))?;
            }
        }
        sync_dir(dir)?;
    }
    fs::remove_dir_all(&cleaned)?;
    sync_dir(dir)
}

pub(super) fn cleaned_dir(dir: &Path) -> PathBuf {
    dir.join(CLEANED_DIR)
}

/// Moves a complete set of cleaned segment files into `dir`, crash-safely: the `COMMIT` marker
/// makes a crash mid-way finish on the next open.
pub(super) fn commit_cleaned(dir: &Path) -> io::Result<()> {
    let cleaned = dir.join(CLEANED_DIR);
    // The cleaned files' directory entries, then the marker, then `.cleaned` itself in the
    // partition directory: the marker must never be durable before what it vouches for, and a
    // crash during the renames below must find `.cleaned/COMMIT` to finish them.
    sync_dir(&cleaned)?;
    durable::write_atomically(&cleaned.join(CLEANED_COMMIT), b"")?;
    sync_dir(dir)?;
    finish_or_discard_cleaning(dir)
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
