//! Property test: the log is correct for every topic config a client can set.
//!
//! Each case builds a `LogConfig` only through `LogConfig::set` (so only values Kafka 4's
//! validation accepts: `segment.index.bytes` down to 4, `index.interval.bytes` from 0 to
//! i32::MAX, `segment.ms` of 1, `max.message.bytes` of 0, any `retention.*`, every
//! `cleanup.policy` list, both timestamp types and the timestamp bounds), then runs a random
//! sequence of produce / fetch / roll / retention / clean close + reopen / crash + reopen
//! against the log and a model (the appended batches). Nothing may panic; every produce must
//! succeed or fail exactly as the model predicts (including which records KIP-467 names); a
//! fetch returns exactly the appended bytes; nothing at or above the log start offset is lost.
//!
//! `segment.bytes` is usually set through Kafka's `internal.segment.bytes` (Kafka 4 floors
//! `segment.bytes` at 1 MiB; small segments are what make rolls happen in a short test).
//! `PROPTEST_CASES=2000 cargo test -p runnel-broker --test log_configs` searches longer.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use runnel::log::batch::{patch_header, BatchIter, HEADER_SIZE};
use runnel::log::records::BatchBuilder;
use runnel::log::{AppendOrigin, Clock, Compression, Log, LogConfig, LogContext, LogError, ManualClock, TimestampType};

const T0: i64 = 1_700_000_000_000;
const DEFAULT_CASES: u32 = 128;

fn temp_dir() -> tempfile::TempDir {
    let dir = std::env::var_os("RUNNEL_TEST_TMPDIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new().prefix("runnel-log-configs-").tempdir_in(dir).expect("temp dir")
}

/// Config overrides as (Kafka name, value) text, applied with `LogConfig::set`.
fn topic_configs() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let segment_bytes = prop_oneof![
        4 => (700u32..6_000).prop_map(|v| ("internal.segment.bytes", v.to_string())),
        1 => Just(("segment.bytes", "1048576".to_string())),
    ];
    let segment_index_bytes =
        prop_oneof![3 => 4u32..=40, 1 => 41u32..=400, 1 => Just(10u32 << 20)].prop_map(|v| v.to_string());
    let index_interval_bytes =
        prop_oneof![2 => Just(0u32), 2 => 1u32..600, 1 => Just(4096), 1 => Just(i32::MAX as u32)]
            .prop_map(|v| v.to_string());
    let segment_ms =
        prop_oneof![2 => Just(1i64), 2 => 2i64..50_000, 1 => Just(604_800_000)].prop_map(|v| v.to_string());
    let max_message_bytes =
        prop_oneof![1 => Just(0u32), 1 => 100u32..1_500, 4 => Just(1_048_588)].prop_map(|v| v.to_string());
    let retention_ms = prop_oneof![Just(-1i64), 0i64..100_000, Just(604_800_000)].prop_map(|v| v.to_string());
    let retention_bytes = prop_oneof![Just(-1i64), Just(-7), 0i64..20_000].prop_map(|v| v.to_string());
    let cleanup_policy = prop_oneof![
        3 => Just("delete"),
        1 => Just("compact"),
        1 => Just("compact,delete"),
        1 => Just(""),
    ];
    let timestamp_type = prop_oneof![3 => Just("CreateTime"), 1 => Just("LogAppendTime")];
    let bound = || prop_oneof![2 => Just(i64::MAX), 1 => 0i64..20_000].prop_map(|v| v.to_string());
    (
        segment_bytes,
        segment_index_bytes,
        index_interval_bytes,
        segment_ms,
        max_message_bytes,
        retention_ms,
        retention_bytes,
        cleanup_policy,
        timestamp_type,
        bound(),
        bound(),
    )
        .prop_map(|(sb, sib, iib, sms, mmb, rms, rb, cp, tt, before, after)| {
            vec![
                sb,
                ("segment.index.bytes", sib),
                ("index.interval.bytes", iib),
                ("segment.ms", sms),
                ("max.message.bytes", mmb),
                ("retention.ms", rms),
                ("retention.bytes", rb),
                ("cleanup.policy", cp.to_string()),
                ("message.timestamp.type", tt.to_string()),
                ("message.timestamp.before.max.ms", before),
                ("message.timestamp.after.max.ms", after),
            ]
        })
}

#[derive(Debug, Clone)]
struct RecordSpec {
    keyed: bool,
    value_len: u16,
    /// Record timestamp relative to the clock at append time.
    timestamp_delta: i32,
}

#[derive(Debug, Clone)]
struct BatchSpec {
    compression: u8,
    records: Vec<RecordSpec>,
}

#[derive(Debug, Clone)]
enum Op {
    Produce(Vec<BatchSpec>),
    /// Fetch everything from `log_start + (end - start) * permille / 1000`, `max_bytes` a read.
    Fetch {
        permille: u16,
        max_bytes: usize,
    },
    Roll,
    AdvanceClock(i64),
    EnforceRetention,
    CloseReopen,
    CrashReopen,
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    (prop::bool::weighted(0.85), prop_oneof![4 => 0u16..40, 1 => 0u16..700], -30_000i32..=30_000)
        .prop_map(|(keyed, value_len, timestamp_delta)| RecordSpec { keyed, value_len, timestamp_delta })
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    (0u8..5, prop::collection::vec(record_spec(), 1..8))
        .prop_map(|(compression, records)| BatchSpec { compression, records })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => prop::collection::vec(batch_spec(), 1..=3).prop_map(Op::Produce),
        5 => (0u16..=1000, prop_oneof![Just(1usize), 1usize..3_000, Just(1 << 20)])
            .prop_map(|(permille, max_bytes)| Op::Fetch { permille, max_bytes }),
        1 => Just(Op::Roll),
        2 => (0i64..=40_000).prop_map(Op::AdvanceClock),
        2 => Just(Op::EnforceRetention),
        1 => Just(Op::CloseReopen),
        1 => Just(Op::CrashReopen),
    ]
}

/// A batch as the log stores it.
#[derive(Debug, Clone)]
struct Stored {
    base: i64,
    last: i64,
    /// Exact bytes for CreateTime topics; with LogAppendTime the broker rewrites the header's
    /// timestamp and CRC, so only the records are compared.
    bytes: Option<Bytes>,
    /// (offset, key, value, timestamp) of every record.
    records: Vec<(i64, Option<Bytes>, Option<Bytes>, i64)>,
}

fn compression(code: u8) -> Compression {
    [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][code as usize % 5]
}

/// A produced batch and its records as (key, value, timestamp).
type Built = (Bytes, Vec<(Option<Vec<u8>>, Vec<u8>, i64)>);

fn build(spec: &BatchSpec, now: i64, seed: usize) -> Built {
    let mut builder = BatchBuilder::new(compression(spec.compression));
    let mut records = Vec::new();
    for (i, r) in spec.records.iter().enumerate() {
        let key = r.keyed.then(|| format!("key-{}", (seed + i) % 7).into_bytes());
        let value: Vec<u8> = (0..r.value_len).map(|j| (seed + i + j as usize) as u8).collect();
        let ts = now + r.timestamp_delta as i64;
        builder.push(ts, key.as_deref(), Some(&value), &[]);
        records.push((key, value, ts));
    }
    (builder.build().expect("batch").into_bytes(), records)
}

/// What the model expects of a produce: `Ok`, a whole-batch error, or the record errors
/// (index within its batch, and whether a timestamp was among the reasons).
#[derive(Debug, PartialEq)]
enum Expect {
    Ok,
    TooLarge,
    RecordErrors { indexes: Vec<i32>, invalid_timestamp: bool },
}

fn expect(config: &LogConfig, batches: &[Built], now: i64) -> Expect {
    let mut indexes = Vec::new();
    let mut invalid_timestamp = false;
    let create_time = config.message_timestamp_type == TimestampType::CreateTime;
    for (bytes, records) in batches {
        if bytes.len() > config.max_message_bytes as usize || bytes.len() > config.segment_bytes as usize {
            return Expect::TooLarge;
        }
        for (i, (key, _, ts)) in records.iter().enumerate() {
            let keyless = config.cleanup_policy.compact && key.is_none();
            let before = config.message_timestamp_before_max_ms;
            let after = config.message_timestamp_after_max_ms;
            let bad_ts =
                create_time && ((before != i64::MAX && now - ts > before) || (after != i64::MAX && ts - now > after));
            // One error per record, the missing key first (Kafka's order).
            invalid_timestamp |= bad_ts && !keyless;
            if keyless || bad_ts {
                indexes.push(i as i32);
            }
        }
    }
    if indexes.is_empty() {
        Expect::Ok
    } else {
        Expect::RecordErrors { indexes, invalid_timestamp }
    }
}

struct Case {
    dir: tempfile::TempDir,
    config: LogConfig,
    clock: Arc<ManualClock>,
    log: Option<Log>,
    model: Vec<Stored>,
    end: i64,
    produced: usize,
}

impl Case {
    fn log(&mut self) -> &mut Log {
        self.log.as_mut().expect("open")
    }

    fn reopen(&mut self) -> Result<(), TestCaseError> {
        self.log = Some(
            Log::open(self.dir.path(), self.config.clone(), LogContext::standalone(self.clock.clone()))
                .map_err(fail)?,
        );
        self.check_bounds()
    }

    /// The log's offsets agree with the model; batches wholly below the log start offset are
    /// dropped from the model (retention deletes whole segments only).
    fn check_bounds(&mut self) -> Result<(), TestCaseError> {
        let (start, end) = (self.log().log_start_offset(), self.log().log_end_offset());
        prop_assert_eq!(end, self.end, "log end offset");
        self.model.retain(|b| b.last >= start);
        if let Some(first) = self.model.first() {
            prop_assert!(first.base >= start || start <= first.last, "log start offset inside the model");
        }
        Ok(())
    }

    fn produce(&mut self, specs: &[BatchSpec]) -> Result<(), TestCaseError> {
        let now = self.clock.now_ms();
        let built: Vec<_> = specs
            .iter()
            .map(|s| {
                self.produced += 1;
                build(s, now, self.produced)
            })
            .collect();
        let mut records = BytesMut::new();
        for (bytes, _) in &built {
            records.extend_from_slice(bytes);
        }
        let expected = expect(&self.config, &built, now);
        let result = self.log().append_as_leader(&records.freeze(), 7, AppendOrigin::Client);
        match (&expected, &result) {
            (Expect::Ok, Ok(info)) => {
                prop_assert_eq!(info.first_offset, self.end);
                let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
                for (bytes, recs) in built {
                    let base = self.end;
                    let mut stored = bytes.to_vec();
                    let mut header: [u8; HEADER_SIZE] = stored[..HEADER_SIZE].try_into().unwrap();
                    patch_header(&mut header, base, 7);
                    stored[..HEADER_SIZE].copy_from_slice(&header);
                    let records: Vec<_> = recs
                        .into_iter()
                        .enumerate()
                        .map(|(i, (k, v, ts))| {
                            let ts = if log_append { now } else { ts };
                            (base + i as i64, k.map(Bytes::from), Some(Bytes::from(v)), ts)
                        })
                        .collect();
                    let last = base + records.len() as i64 - 1;
                    self.model.push(Stored { base, last, bytes: (!log_append).then(|| stored.into()), records });
                    self.end = last + 1;
                }
            }
            (Expect::TooLarge, Err(LogError::MessageTooLarge { .. } | LogError::RecordBatchTooLarge { .. })) => {}
            (
                Expect::RecordErrors { indexes, invalid_timestamp },
                Err(LogError::InvalidRecords { invalid_timestamp: got_ts, record_errors }),
            ) => {
                let got: Vec<i32> = record_errors.iter().map(|e| e.batch_index).collect();
                prop_assert_eq!(&got, indexes);
                prop_assert_eq!(got_ts, invalid_timestamp);
            }
            _ => return Err(TestCaseError::fail(format!("expected {expected:?}, got {result:?}"))),
        }
        self.check_bounds()
    }

    fn fetch(&mut self, permille: u16, max_bytes: usize) -> Result<(), TestCaseError> {
        let start = self.log().log_start_offset();
        let from = start + (self.end - start) * permille as i64 / 1000;
        let expected: Vec<&Stored> = self.model.iter().filter(|b| b.last >= from).collect();
        let log = self.log.as_ref().expect("open");
        let mut got = Vec::new();
        let mut next = from;
        while next < self.end {
            let bytes = log.read(next, max_bytes, i64::MAX).map_err(fail)?;
            prop_assert!(!bytes.is_empty(), "read at {} below the log end offset {} returned nothing", next, self.end);
            for batch in BatchIter::new(bytes) {
                let batch = batch.map_err(fail)?;
                next = batch.last_offset() + 1;
                got.push(batch);
            }
        }
        prop_assert_eq!(got.len(), expected.len(), "batches fetched from {}", from);
        for (batch, stored) in got.iter().zip(expected) {
            prop_assert_eq!(batch.base_offset(), stored.base);
            if let Some(bytes) = &stored.bytes {
                prop_assert_eq!(batch.bytes(), bytes, "bytes of the batch at {}", stored.base);
            }
            let records: Vec<_> =
                batch.records().map_err(fail)?.into_iter().map(|r| (r.offset, r.key, r.value, r.timestamp)).collect();
            prop_assert_eq!(&records, &stored.records);
        }
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Produce(specs) => self.produce(specs)?,
            Op::Fetch { permille, max_bytes } => self.fetch(*permille, *max_bytes)?,
            Op::Roll => self.log().roll().map_err(fail)?,
            Op::AdvanceClock(ms) => self.clock.advance(*ms),
            Op::EnforceRetention => {
                let end = self.end;
                self.log().enforce_retention(end).map_err(fail)?;
                self.check_bounds()?;
            }
            Op::CloseReopen => {
                self.log.take().expect("open").close().map_err(fail)?;
                self.reopen()?;
            }
            Op::CrashReopen => {
                drop(self.log.take());
                self.reopen()?;
            }
        }
        Ok(())
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(Config { cases: cases(), failure_persistence: None, ..Config::default() })]

    #[test]
    fn every_accepted_topic_config_keeps_the_log_exact(
        overrides in topic_configs(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        // Proves no config that validation accepts makes the log panic, lose a record or return
        // other bytes than were appended, across rolls, retention, clean and crash reopens.
        let mut config = LogConfig::default();
        for (name, value) in &overrides {
            config.set(name, value).map_err(|e| TestCaseError::fail(format!("{name}={value} refused: {e}")))?;
        }
        let dir = temp_dir();
        let clock = ManualClock::new(T0);
        let log = Log::open(dir.path(), config.clone(), LogContext::standalone(clock.clone())).map_err(fail)?;
        let mut case = Case { dir, config, clock, log: Some(log), model: Vec::new(), end: 0, produced: 0 };
        for op in &ops {
            case.run(op)?;
        }
        case.fetch(0, 1 << 20)?;
        case.log.take().expect("open").close().map_err(fail)?;
        case.reopen()?;
        case.fetch(0, 1 << 20)?;
    }
}
