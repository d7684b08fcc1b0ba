//! Model-based property test of the partition log (`runnel::log::Log`).
//!
//! Random sequences of operations run against a real log in a temp dir and against a simple
//! in-memory model: the appended batches (their exact bytes and decoded records) plus the log
//! start and end offsets. After every operation the log must agree with the model.
//!
//! What the model learns from the log instead of predicting: segment boundaries (rolls depend on
//! byte sizes, index fill and timestamps). Deletions are checked to happen only for whole segments
//! below the log start offset; retention is additionally predicted with Kafka's rules and compared.
//!
//! Kafka semantics the model follows: a read returns whole batches from the one holding the offset
//! asked for (so a log start offset inside a batch still returns that whole batch), from one
//! segment per read; `truncate_to(o)` removes the whole batch holding `o`, and below the log start
//! offset it empties the log and restarts it at `o`; LogAppendTime stamps the broker's clock as
//! every record's timestamp.
//!
//! Reproducing a failure: proptest persists failing seeds in `tests/log_model.proptest-regressions`
//! and replays them first; the failure message lists the operations with resolved offsets.
//! `PROPTEST_CASES=1000 cargo test -p runnel-broker --test log_model` runs a longer search, and
//! `LOG_MODEL_TRACE=1 ... -- --nocapture` prints every case's operations.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError};
use runnel::log::batch::BatchIter;
use runnel::log::records::BatchBuilder;
use runnel::log::{
    AppendOrigin, CleanupPolicy, Compression, Log, LogConfig, LogContext, LogError, ManualClock, TimestampType,
};

const T0: i64 = 1_700_000_000_000;
const WEEK_MS: i64 = 7 * 24 * 60 * 60 * 1000;
const DEFAULT_CASES: u32 = 96;

/// A temp dir on tmpfs when there is one: these tests fsync thousands of times, which only
/// costs time on a real disk and proves nothing more (a process crash keeps the page cache).
/// `RUNNEL_TEST_TMPDIR` picks another place.
fn temp_dir() -> tempfile::TempDir {
    let dir = std::env::var_os("RUNNEL_TEST_TMPDIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new().prefix("runnel-log-").tempdir_in(dir).expect("temp dir")
}

// ---------------------------------------------------------------------------------------------
// Generated input
// ---------------------------------------------------------------------------------------------

/// Per-case log settings: small segments and index intervals so rolls and index lookups happen.
#[derive(Debug, Clone)]
struct CaseConfig {
    segment_bytes: u32,
    index_interval_bytes: u32,
    segment_index_bytes: u32,
    segment_ms: i64,
    retention_ms: i64,
    retention_bytes: i64,
    flush_messages: i64,
    flush_ms: i64,
    /// `message.timestamp.type=LogAppendTime`: the broker stamps its clock into every batch.
    log_append_time: bool,
}

impl CaseConfig {
    fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            index_interval_bytes: self.index_interval_bytes,
            segment_index_bytes: self.segment_index_bytes,
            segment_ms: self.segment_ms,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            flush_messages: self.flush_messages,
            flush_ms: self.flush_ms,
            message_timestamp_type: if self.log_append_time {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            cleanup_policy: CleanupPolicy::DELETE,
            ..LogConfig::default()
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn compression(self) -> Compression {
        match self {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }
}

/// One record to append; values are described by (length, seed) to keep failure output short.
#[derive(Debug, Clone)]
struct RecordSpec {
    /// `None` is a null key; 5 is the empty key; others are `key-<n>`.
    key: Option<u8>,
    /// `None` is a null value (a tombstone).
    value: Option<(u16, u8)>,
    /// Record timestamp relative to the clock at append time.
    timestamp_delta: i32,
    header: bool,
}

#[derive(Debug, Clone)]
struct BatchSpec {
    codec: Codec,
    records: Vec<RecordSpec>,
}

/// An offset chosen relative to the log's state when the operation runs.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// `log_start_offset + delta`.
    Start(i8),
    /// `log_end_offset + delta`.
    End(i8),
    /// `log_start_offset + (log_end_offset - log_start_offset) * permille / 1000`.
    Within(u16),
}

impl Pick {
    fn resolve(self, model: &Model) -> i64 {
        match self {
            Pick::Start(d) => model.start + d as i64,
            Pick::End(d) => model.end + d as i64,
            Pick::Within(p) => model.start + (model.end - model.start) * p as i64 / 1000,
        }
    }
}

/// A timestamp for ListOffsets, chosen relative to the clock or to an existing record.
#[derive(Debug, Clone, Copy)]
enum TimestampPick {
    /// `now + delta`.
    Clock(i32),
    /// The timestamp of the record at `permille` of the model's records, plus `delta`.
    Record(u16, i8),
    /// -1: every record qualifies.
    Minus1,
    /// Larger than every timestamp.
    Max,
}

#[derive(Debug, Clone)]
enum Op {
    Append { batches: Vec<BatchSpec>, partition_leader_epoch: i32 },
    Read { from: Pick, max_bytes: usize, upper: Option<Pick> },
    OffsetForTimestamp(TimestampPick),
    Roll,
    TruncateTo(Pick),
    DeleteRecordsBefore(Pick),
    EnforceRetention { high_watermark: Option<Pick> },
    AdvanceClock(i64),
    Flush { maybe: bool },
    CloseReopen,
    CrashReopen,
}

fn case_config() -> impl Strategy<Value = CaseConfig> {
    (
        1024u32..=8192,
        0u32..=512,
        prop_oneof![2 => Just(10u32 << 20), 1 => 48u32..=400],
        prop_oneof![3 => Just(WEEK_MS), 1 => 5_000i64..=60_000],
        prop_oneof![Just(-1i64), 5_000i64..=120_000],
        prop_oneof![Just(-1i64), 0i64..=20_000],
        prop_oneof![3 => Just(i64::MAX), 1 => 1i64..=20],
        prop_oneof![Just(i64::MAX), 0i64..=30_000],
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                segment_bytes,
                index_interval_bytes,
                segment_index_bytes,
                segment_ms,
                retention_ms,
                retention_bytes,
                flush_messages,
                flush_ms,
                log_append_time,
            )| CaseConfig {
                segment_bytes,
                index_interval_bytes,
                segment_index_bytes,
                segment_ms,
                retention_ms,
                retention_bytes,
                flush_messages,
                flush_ms,
                log_append_time,
            },
        )
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    let key = prop_oneof![1 => Just(None), 3 => (0u8..=5).prop_map(Some)];
    let size = prop_oneof![4 => 0u16..64, 3 => 0u16..400, 1 => 0u16..2000];
    let value = prop_oneof![1 => Just(None), 12 => (size, any::<u8>()).prop_map(Some)];
    (key, value, -30_000i32..=5_000, prop::bool::weighted(0.2))
        .prop_map(|(key, value, timestamp_delta, header)| RecordSpec { key, value, timestamp_delta, header })
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    let codec =
        prop_oneof![Just(Codec::None), Just(Codec::Gzip), Just(Codec::Snappy), Just(Codec::Lz4), Just(Codec::Zstd)];
    (codec, prop::collection::vec(record_spec(), 1..20)).prop_map(|(codec, records)| BatchSpec { codec, records })
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![(-2i8..=3).prop_map(Pick::Start), (-3i8..=1).prop_map(Pick::End), (0u16..=1000).prop_map(Pick::Within),]
}

fn timestamp_pick() -> impl Strategy<Value = TimestampPick> {
    prop_oneof![
        3 => (-40_000i32..=10_000).prop_map(TimestampPick::Clock),
        4 => (0u16..=1000, -1i8..=1).prop_map(|(p, d)| TimestampPick::Record(p, d)),
        1 => Just(TimestampPick::Minus1),
        1 => Just(TimestampPick::Max),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let max_bytes = prop_oneof![Just(0usize), 1usize..200, 200usize..20_000, Just(1usize << 20)];
    prop_oneof![
        10 => (prop::collection::vec(batch_spec(), 1..=3), 0i32..4)
            .prop_map(|(batches, partition_leader_epoch)| Op::Append { batches, partition_leader_epoch }),
        8 => (pick(), max_bytes, prop::option::weighted(0.6, pick()))
            .prop_map(|(from, max_bytes, upper)| Op::Read { from, max_bytes, upper }),
        3 => timestamp_pick().prop_map(Op::OffsetForTimestamp),
        2 => Just(Op::Roll),
        2 => pick().prop_map(Op::TruncateTo),
        2 => pick().prop_map(Op::DeleteRecordsBefore),
        3 => prop::option::weighted(0.5, pick()).prop_map(|high_watermark| Op::EnforceRetention { high_watermark }),
        3 => (0i64..=40_000).prop_map(Op::AdvanceClock),
        2 => any::<bool>().prop_map(|maybe| Op::Flush { maybe }),
        2 => Just(Op::CloseReopen),
        2 => Just(Op::CrashReopen),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelRecord {
    offset: i64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Debug, Clone)]
struct ModelBatch {
    base: i64,
    last: i64,
    max_timestamp: i64,
    /// Exactly the bytes the log must return: the producer's batch with the base offset and the
    /// partition leader epoch written in.
    bytes: Bytes,
    records: Vec<ModelRecord>,
}

/// The log as a list of batches. Batches stay until their segment is deleted (a log start
/// offset inside a batch still returns the whole batch, as in Kafka).
#[derive(Debug, Default)]
struct Model {
    batches: Vec<ModelBatch>,
    start: i64,
    end: i64,
}

impl Model {
    /// ListOffsets by timestamp: the first record at or after the log start offset whose
    /// timestamp is at least `timestamp`.
    fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        self.batches
            .iter()
            .flat_map(|b| &b.records)
            .find(|r| r.offset >= self.start && r.timestamp >= timestamp)
            .map(|r| (r.offset, r.timestamp))
    }

    fn size_bytes(&self) -> u64 {
        self.batches.iter().map(|b| b.bytes.len() as u64).sum()
    }
}

fn key_bytes(key: Option<u8>) -> Option<Vec<u8>> {
    key.map(|k| if k == 5 { Vec::new() } else { format!("key-{k}").into_bytes() })
}

/// Value bytes from (length, seed): even seeds give compressible runs, odd seeds noise.
fn value_bytes(len: u16, seed: u8) -> Vec<u8> {
    if seed.is_multiple_of(2) {
        (0..len as usize).map(|i| seed.wrapping_add((i / 16) as u8)).collect()
    } else {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed as u64 ^ ((len as u64) << 8);
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }
}

/// Builds the producer's batch and the records the model expects from it (at offset 0).
fn build_batch(spec: &BatchSpec, now_ms: i64) -> (Bytes, Vec<ModelRecord>) {
    let mut builder = BatchBuilder::new(spec.codec.compression());
    let mut records = Vec::new();
    for (i, r) in spec.records.iter().enumerate() {
        let key = key_bytes(r.key);
        let value = r.value.map(|(len, seed)| value_bytes(len, seed));
        let timestamp = now_ms + r.timestamp_delta as i64;
        let header_value = format!("h{i}").into_bytes();
        let headers: Vec<(&str, Option<&[u8]>)> =
            if r.header { vec![("trace", Some(&header_value[..]))] } else { Vec::new() };
        builder.push(timestamp, key.as_deref(), value.as_deref(), &headers);
        records.push(ModelRecord {
            offset: i as i64,
            timestamp,
            key: key.map(Bytes::from),
            value: value.map(Bytes::from),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.map(Bytes::copy_from_slice))).collect(),
        });
    }
    (builder.build().expect("the builder encodes every generated record").into_bytes(), records)
}

/// The producer's bytes as the log stores them: base offset and partition leader epoch patched
/// in (both sit outside the CRC); with LogAppendTime also the timestamp type bit and the broker's
/// clock as max timestamp, under a new CRC.
fn stored_bytes(bytes: &Bytes, base_offset: i64, partition_leader_epoch: i32, log_append_time: Option<i64>) -> Bytes {
    let mut v = bytes.to_vec();
    v[0..8].copy_from_slice(&base_offset.to_be_bytes());
    v[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
    if let Some(now) = log_append_time {
        v[22] |= 0x08;
        v[35..43].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c(&v[21..]);
        v[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    Bytes::from(v)
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

macro_rules! fail {
    ($($arg:tt)*) => {
        return Err(TestCaseError::fail(format!($($arg)*)))
    };
}

fn ok<T>(result: Result<T, LogError>, what: &str) -> Result<T, TestCaseError> {
    result.map_err(|e| TestCaseError::fail(format!("{what} failed: {e} ({e:?})")))
}

struct Harness {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    config: LogConfig,
    clock: Arc<ManualClock>,
    log: Option<Log>,
    model: Model,
    /// Whether the log was opened after a clean shutdown and nothing changed since: then a
    /// crash leaves the checkpoint saying "clean".
    clean_and_untouched: bool,
    /// Varying read sizes for full scans.
    scan_max_bytes: usize,
}

impl Harness {
    fn new(case: &CaseConfig) -> Result<Harness, TestCaseError> {
        let dir = temp_dir();
        let path = dir.path().join("topic-0");
        let clock = ManualClock::new(T0);
        let config = case.log_config();
        let log = ok(Log::open(&path, config.clone(), LogContext::standalone(clock.clone())), "open")?;
        Ok(Harness {
            _dir: dir,
            path,
            config,
            clock,
            log: Some(log),
            model: Model::default(),
            clean_and_untouched: false,
            scan_max_bytes: 1,
        })
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open between operations")
    }

    fn log_mut(&mut self) -> &mut Log {
        self.log.as_mut().expect("the log is open between operations")
    }

    fn now(&self) -> i64 {
        use runnel::log::Clock;
        self.clock.now_ms()
    }

    /// Runs one operation and checks it; returns a description with resolved arguments.
    fn apply(&mut self, op: &Op) -> Result<String, TestCaseError> {
        let mut full_scan = false;
        let text = match op {
            Op::Append { batches, partition_leader_epoch } => self.append(batches, *partition_leader_epoch)?,
            Op::Read { from, max_bytes, upper } => {
                let from = from.resolve(&self.model);
                let upper = upper.map_or(i64::MAX, |u| u.resolve(&self.model));
                let bases = self.log().segment_base_offsets();
                check_read(self.log(), &self.model, &bases, from, *max_bytes, upper)?;
                format!("read(from {from}, max_bytes {max_bytes}, upper {upper})")
            }
            Op::OffsetForTimestamp(pick) => {
                let timestamp = match *pick {
                    TimestampPick::Clock(d) => self.now() + d as i64,
                    TimestampPick::Record(p, d) => {
                        let records: Vec<&ModelRecord> = self.model.batches.iter().flat_map(|b| &b.records).collect();
                        match records.len() {
                            0 => self.now(),
                            n => records[(n - 1) * p as usize / 1000].timestamp + d as i64,
                        }
                    }
                    TimestampPick::Minus1 => -1,
                    TimestampPick::Max => i64::MAX,
                };
                let got = ok(self.log().offset_for_timestamp(timestamp), "offset_for_timestamp")?;
                let want = self.model.offset_for_timestamp(timestamp);
                if got != want {
                    fail!("offset_for_timestamp({timestamp}): log says {got:?}, model says {want:?}");
                }
                format!("offset_for_timestamp({timestamp}) = {got:?}")
            }
            Op::Roll => {
                let active_empty = self.log().segment_base_offsets().last() == Some(&self.model.end);
                ok(self.log_mut().roll(), "roll")?;
                self.clean_and_untouched &= active_empty;
                full_scan = true;
                format!("roll (active segment empty: {active_empty})")
            }
            Op::TruncateTo(pick) => {
                let offset = pick.resolve(&self.model);
                self.truncate_to(offset)?;
                full_scan = true;
                format!("truncate_to({offset}) -> end {}", self.model.end)
            }
            Op::DeleteRecordsBefore(pick) => {
                let offset = pick.resolve(&self.model);
                let result = self.log_mut().delete_records_before(offset);
                if offset < 0 || offset > self.model.end {
                    if !matches!(result, Err(LogError::OffsetOutOfRange { .. })) {
                        fail!("delete_records_before({offset}) with end {}: {result:?}", self.model.end);
                    }
                } else {
                    let start = ok(result, "delete_records_before")?;
                    let want = self.model.start.max(offset);
                    if start != want {
                        fail!("delete_records_before({offset}) returned {start}, model says {want}");
                    }
                    self.clean_and_untouched &= want == self.model.start;
                    self.model.start = want;
                }
                full_scan = true;
                format!("delete_records_before({offset}) -> start {}", self.model.start)
            }
            Op::EnforceRetention { high_watermark } => {
                let high_watermark = high_watermark.map_or(self.model.end, |p| p.resolve(&self.model));
                self.enforce_retention(high_watermark)?;
                full_scan = true;
                format!("enforce_retention(hw {high_watermark}) -> start {}", self.model.start)
            }
            Op::AdvanceClock(ms) => {
                self.clock.advance(*ms);
                format!("advance clock {ms} ms")
            }
            Op::Flush { maybe } => {
                let flushed = if *maybe {
                    ok(self.log_mut().maybe_flush(), "maybe_flush")?
                } else {
                    ok(self.log_mut().flush(), "flush")?;
                    true
                };
                if flushed && self.log().recovery_point() != self.model.end {
                    fail!("recovery point {} after a flush, log end {}", self.log().recovery_point(), self.model.end);
                }
                format!("flush (maybe: {maybe}, flushed: {flushed})")
            }
            Op::CloseReopen => {
                let bases = self.log().segment_base_offsets();
                ok(self.log.take().expect("open").close(), "close")?;
                self.reopen(bases, true)?;
                full_scan = true;
                "close + reopen".to_string()
            }
            Op::CrashReopen => {
                let bases = self.log().segment_base_offsets();
                drop(self.log.take());
                self.reopen(bases, false)?;
                full_scan = true;
                "crash + reopen".to_string()
            }
        };
        self.check_state()?;
        if full_scan {
            self.scan_all()?;
        }
        Ok(text)
    }

    fn append(&mut self, specs: &[BatchSpec], partition_leader_epoch: i32) -> Result<String, TestCaseError> {
        let now = self.now();
        let built: Vec<(Bytes, Vec<ModelRecord>)> = specs.iter().map(|s| build_batch(s, now)).collect();
        let mut request = Vec::new();
        for (bytes, _) in &built {
            request.extend_from_slice(bytes);
        }
        let sizes: Vec<usize> = built.iter().map(|(b, _)| b.len()).collect();
        let result =
            self.log_mut().append_as_leader(&Bytes::from(request), partition_leader_epoch, AppendOrigin::Client);
        let too_large = sizes.iter().any(|s| *s > self.config.segment_bytes as usize);
        if too_large {
            if !matches!(result, Err(LogError::RecordBatchTooLarge { .. })) {
                fail!("append of batches {sizes:?} over segment.bytes {}: {result:?}", self.config.segment_bytes);
            }
            return Ok(format!("append {sizes:?} bytes: rejected as too large"));
        }
        let info = ok(result, "append_as_leader")?;
        let first = self.model.end;
        let mut max_timestamp = -1;
        let log_append_time = (self.config.message_timestamp_type == TimestampType::LogAppendTime).then_some(now);
        for (bytes, records) in built {
            let base = self.model.end;
            let records: Vec<ModelRecord> = records
                .into_iter()
                .map(|r| ModelRecord {
                    offset: base + r.offset,
                    timestamp: log_append_time.unwrap_or(r.timestamp),
                    ..r
                })
                .collect();
            let last = records.last().expect("at least one record").offset;
            let batch_max = records.iter().map(|r| r.timestamp).max().expect("at least one record");
            max_timestamp = max_timestamp.max(batch_max);
            self.model.batches.push(ModelBatch {
                base,
                last,
                max_timestamp: batch_max,
                bytes: stored_bytes(&bytes, base, partition_leader_epoch, log_append_time),
                records,
            });
            self.model.end = last + 1;
        }
        let record_count = self.model.end - first;
        let got = (info.first_offset, info.last_offset, info.record_count, info.batch_count, info.max_timestamp);
        let want = (first, self.model.end - 1, record_count, specs.len() as u32, max_timestamp);
        if got != want {
            fail!("append info (first, last, records, batches, max timestamp) = {got:?}, model {want:?}");
        }
        if info.log_append_time != log_append_time.unwrap_or(-1) {
            fail!("append reported log_append_time {}, model {log_append_time:?}", info.log_append_time);
        }
        self.clean_and_untouched = false;
        Ok(format!("append {sizes:?} bytes -> offsets {first}..={}", self.model.end - 1))
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), TestCaseError> {
        ok(self.log_mut().truncate_to(offset), "truncate_to")?;
        let model = &mut self.model;
        if offset >= model.end {
            return Ok(());
        }
        self.clean_and_untouched = false;
        if offset < model.start {
            // Kafka: a truncation below the log start offset empties the log and restarts it there.
            let at = offset.max(0);
            model.batches.clear();
            model.start = at;
            model.end = at;
            return Ok(());
        }
        // Whole batches: the one holding `offset` goes, and the log ends at its base offset.
        let cut = model.batches.iter().position(|b| b.last >= offset).expect("offset below the log end");
        let new_end = model.batches[cut].base;
        model.batches.truncate(cut);
        model.end = new_end;
        model.start = model.start.min(new_end);
        Ok(())
    }

    /// Predicts retention with Kafka's rules (whole segments from the oldest, never past the
    /// high watermark, each either older than retention.ms by its newest timestamp or
    /// removable while the log stays at or above retention.bytes; the active one rolled first),
    /// then checks the log did that.
    fn enforce_retention(&mut self, high_watermark: i64) -> Result<(), TestCaseError> {
        let bases = self.log().segment_base_offsets();
        let now = self.now();
        let segments: Vec<(i64, i64, u64, Option<i64>)> = bases
            .iter()
            .enumerate()
            .map(|(i, &base)| {
                let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
                let in_segment = self.model.batches.iter().filter(|b| b.base >= base && b.base < next);
                let (size, max_ts) = in_segment.fold((0u64, None::<i64>), |(s, m), b| {
                    (s + b.bytes.len() as u64, Some(m.map_or(b.max_timestamp, |m| m.max(b.max_timestamp))))
                });
                (base, next, size, max_ts)
            })
            .collect();
        let closed = segments.len() - 1;
        let start = self.model.start;
        // First the segments wholly below the log start offset.
        let below_start = segments[..closed].iter().take_while(|s| s.1 <= start).count();
        let mut predicted_start = start;
        let mut predicted_deleted = below_start;
        let mut predictable = true;
        let remaining = &segments[below_start..];
        let mut excess = if self.config.retention_bytes >= 0 {
            remaining.iter().map(|s| s.2 as i64).sum::<i64>() - self.config.retention_bytes
        } else {
            0
        };
        let due = |size: u64, max_ts: i64, excess: i64| {
            let expired = self.config.retention_ms >= 0 && max_ts < now - self.config.retention_ms;
            expired || excess > 0 && excess - size as i64 >= 0
        };
        let mut every_closed_due = true;
        for &(_, next, size, max_ts) in &remaining[..remaining.len() - 1] {
            if next > high_watermark {
                every_closed_due = false;
                break;
            }
            let Some(max_ts) = max_ts else {
                // An empty closed segment is aged by its file's mtime: not predictable here.
                predictable = false;
                every_closed_due = false;
                break;
            };
            if !due(size, max_ts, excess) {
                every_closed_due = false;
                break;
            }
            excess -= size as i64;
            predicted_start = predicted_start.max(next);
            predicted_deleted += 1;
        }
        // Then the active segment, as Kafka's UnifiedLog: when every older one went, it is not
        // empty, wholly below the high watermark and due itself, it is rolled and deleted (the
        // roll adds a segment: the count of segments that went is one less than deleted).
        let mut rolled = 0;
        if let Some(&(_, _, size, Some(max_ts))) = remaining.last() {
            if every_closed_due && size > 0 && high_watermark >= self.model.end && due(size, max_ts, excess) {
                predicted_start = self.model.end;
                predicted_deleted += 1;
                rolled = 1;
            }
        }

        let outcome = ok(self.log_mut().enforce_retention(high_watermark), "enforce_retention")?;
        let new_start = self.log().log_start_offset();
        let new_bases = self.log().segment_base_offsets();
        if new_start < start {
            fail!("retention moved the log start offset back from {start} to {new_start}");
        }
        if new_start != start {
            if new_start != new_bases[0] {
                fail!("retention moved the log start offset to {new_start}, not a segment boundary ({new_bases:?})");
            }
            if new_start > high_watermark {
                fail!("retention deleted past the high watermark {high_watermark} (start {new_start})");
            }
        }
        if predictable && outcome.segments_deleted != bases.len() + rolled - new_bases.len() {
            fail!(
                "retention reported {} segments deleted, {} went",
                outcome.segments_deleted,
                bases.len() - new_bases.len()
            );
        }
        if predictable && (new_start, outcome.segments_deleted) != (predicted_start, predicted_deleted) {
            fail!(
                "retention (ms {}, bytes {}, now {now}, hw {high_watermark}) over segments \
                 (base, next, size, max ts) {segments:?}: log start {new_start} after deleting {} segments, \
                 model predicts {predicted_start} after {predicted_deleted}",
                self.config.retention_ms,
                self.config.retention_bytes,
                outcome.segments_deleted
            );
        }
        if outcome.segments_deleted > 0 {
            self.clean_and_untouched = false;
        }
        self.model.start = new_start;
        Ok(())
    }

    fn reopen(&mut self, bases_before: Vec<i64>, clean: bool) -> Result<(), TestCaseError> {
        let log = ok(Log::open(&self.path, self.config.clone(), LogContext::standalone(self.clock.clone())), "reopen")?;
        let report = log.open_report().clone();
        let expect_clean = clean || self.clean_and_untouched;
        if report.clean_shutdown != expect_clean {
            fail!(
                "reopen after {} reports clean_shutdown {}",
                if clean { "close" } else { "crash" },
                report.clean_shutdown
            );
        }
        if report.clean_shutdown && report.segments_recovered != 0 {
            fail!("a clean reopen scanned {} segments", report.segments_recovered);
        }
        if report.bytes_truncated != 0 {
            fail!("reopen without damage truncated {} bytes ({report:?})", report.bytes_truncated);
        }
        if log.segment_base_offsets() != bases_before {
            fail!("segments changed across reopen: {bases_before:?} -> {:?}", log.segment_base_offsets());
        }
        if !clean && log.recovery_point() != log.log_end_offset() {
            fail!("recovery point {} after recovery, log end {}", log.recovery_point(), log.log_end_offset());
        }
        self.clean_and_untouched = report.clean_shutdown;
        self.log = Some(log);
        Ok(())
    }

    /// Offsets, sizes and segments agree with the model; batches that went with deleted
    /// segments are dropped from the model, and none of them may hold an offset at or after the
    /// log start offset.
    fn check_state(&mut self) -> Result<(), TestCaseError> {
        let log = self.log.as_ref().expect("open");
        let bases = log.segment_base_offsets();
        if bases.is_empty() || bases.windows(2).any(|w| w[0] >= w[1]) {
            fail!("segment base offsets {bases:?}");
        }
        let first = bases[0];
        let model = &mut self.model;
        if let Some(lost) = model.batches.iter().find(|b| b.base < first && b.last >= model.start) {
            fail!(
                "batch {}..={} is gone with its segment but is at or after log start {}",
                lost.base,
                lost.last,
                model.start
            );
        }
        if let Some(split) = model.batches.iter().find(|b| b.base < first && b.last >= first) {
            fail!("batch {}..={} straddles segment base {first}", split.base, split.last);
        }
        model.batches.retain(|b| b.base >= first);
        let got = (log.log_start_offset(), log.log_end_offset(), log.size_bytes());
        let want = (model.start, model.end, model.size_bytes());
        if got != want {
            fail!("(log start, log end, size bytes) = {got:?}, model {want:?}; segments {bases:?}");
        }
        if first > model.start || *bases.last().expect("non-empty") > model.end {
            fail!("segments {bases:?} do not cover [{}, {}]", model.start, model.end);
        }
        if log.recovery_point() > model.end {
            fail!("recovery point {} past log end {}", log.recovery_point(), model.end);
        }
        Ok(())
    }

    /// Reads everything from the log start offset, batch run by batch run, checking each read.
    fn scan_all(&mut self) -> Result<(), TestCaseError> {
        self.scan_max_bytes = (self.scan_max_bytes * 7 + 1) % 9_000;
        let log = self.log();
        let bases = log.segment_base_offsets();
        let mut from = self.model.start;
        while from < self.model.end {
            match check_read(log, &self.model, &bases, from, self.scan_max_bytes, i64::MAX)? {
                Some(next) => from = next,
                None => fail!("read at {from} below log end {} returned nothing", self.model.end),
            }
        }
        Ok(())
    }
}

/// Checks one read against the model: out-of-range errors, whole batches from the one holding
/// `from`, one segment at a time, never a batch at or past `upper`, at most `max_bytes` unless
/// a single batch, and as much as those rules allow. Returns the offset after the last batch.
fn check_read(
    log: &Log,
    model: &Model,
    bases: &[i64],
    from: i64,
    max_bytes: usize,
    upper: i64,
) -> Result<Option<i64>, TestCaseError> {
    let result = log.read(from, max_bytes, upper);
    if from < model.start || from > model.end {
        if !matches!(result, Err(LogError::OffsetOutOfRange { .. })) {
            fail!("read at {from} outside [{}, {}]: {result:?}", model.start, model.end);
        }
        return Ok(None);
    }
    let bytes = ok(result, "read")?;
    let bound = upper.min(model.end);
    let mut expected: Vec<&ModelBatch> = Vec::new();
    if from < bound {
        let first = model.batches.iter().position(|b| b.last >= from).expect("from is below the log end");
        let base = model.batches[first].base;
        let segment_end = bases.iter().copied().find(|&b| b > base).unwrap_or(i64::MAX);
        let mut total = 0;
        for b in &model.batches[first..] {
            if b.base >= bound || b.base >= segment_end {
                break;
            }
            if !expected.is_empty() && total + b.bytes.len() > max_bytes {
                break;
            }
            total += b.bytes.len();
            expected.push(b);
        }
    }
    let got: Vec<_> = match BatchIter::new(bytes).collect::<Result<Vec<_>, _>>() {
        Ok(got) => got,
        Err(e) => fail!("read(from {from}, max {max_bytes}, upper {upper}) returned an invalid batch: {e}"),
    };
    let describe = |batches: Vec<(i64, i64)>| format!("{batches:?}");
    let got_ranges = describe(got.iter().map(|b| (b.base_offset(), b.last_offset())).collect());
    let want_ranges = describe(expected.iter().map(|b| (b.base, b.last)).collect());
    if got_ranges != want_ranges {
        fail!(
            "read(from {from}, max {max_bytes}, upper {upper}) with segments {bases:?}: \
             got batches {got_ranges}, model {want_ranges}"
        );
    }
    for (batch, want) in got.iter().zip(&expected) {
        if batch.bytes() != &want.bytes {
            fail!("batch {}..={} bytes differ from what was appended", want.base, want.last);
        }
        let records = match batch.records() {
            Ok(records) => records,
            Err(e) => fail!("batch {}..={} does not decode: {e}", want.base, want.last),
        };
        let records: Vec<ModelRecord> = records
            .into_iter()
            .map(|r| ModelRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
            })
            .collect();
        if records != want.records {
            fail!("batch {}..={} decodes to different records", want.base, want.last);
        }
    }
    Ok(expected.last().map(|b| b.last + 1))
}

fn run_case(case: &CaseConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut harness = Harness::new(case)?;
    let mut trace = String::new();
    for (i, op) in ops.iter().enumerate() {
        match harness.apply(op) {
            Ok(text) => {
                let _ = writeln!(trace, "  {i:>2}: {text}");
            }
            Err(e) => {
                let _ = writeln!(trace, "  {i:>2}: {op:?}  <-- FAILED");
                let reason = match e {
                    TestCaseError::Fail(reason) | TestCaseError::Reject(reason) => reason.to_string(),
                };
                fail!("{reason}\nconfig: {case:?}\noperations (resolved):\n{trace}");
            }
        }
    }
    if std::env::var_os("LOG_MODEL_TRACE").is_some() {
        eprintln!("config: {case:?}\n{trace}segments {:?}", harness.log().segment_base_offsets());
    }
    // At the end, everything must survive one more crash and one more clean restart.
    harness.apply(&Op::CrashReopen)?;
    harness.apply(&Op::CloseReopen)?;
    let log = harness.log.take().expect("open");
    ok(log.close(), "final close")
}

fn proptest_config() -> Config {
    // PROPTEST_CASES (read by Config::default) overrides the default number of cases.
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() { Config::default().cases } else { DEFAULT_CASES };
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        max_shrink_time: 120_000,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn log_agrees_with_the_model(case in case_config(), ops in prop::collection::vec(op(), 20..60)) {
        // Proves every log operation (append, read, roll, truncate, delete, retention, flush, reopen, crash) matches the model.
        run_case(&case, &ops)?;
    }
}
