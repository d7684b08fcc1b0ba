//! Unit tests of the partition log (`log.rs`) and compaction, on real files in temp dirs.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::log::batch::{BatchIter, Compression};
use crate::log::compaction::CompactionStats;
use crate::log::config::{CleanupPolicy, DirtyRatio};
use crate::log::producer_state::{ControlType, EndTxnMarker, ProducerError};
use crate::log::records::BatchBuilder;
use crate::log::txn_index::AbortedTxn;

const T0: i64 = 1_700_000_000_000;

fn batch(compression: Compression, records: &[(Option<&str>, Option<&str>)], timestamp: i64) -> Bytes {
    let mut builder = BatchBuilder::new(compression);
    for (key, value) in records {
        builder.push(timestamp, key.map(str::as_bytes), value.map(str::as_bytes), &[]);
    }
    builder.build().unwrap().into_bytes()
}

fn value_batch(n: usize, value_len: usize, timestamp: i64) -> Bytes {
    let value = "v".repeat(value_len);
    let records: Vec<_> = (0..n).map(|_| (None, Some(value.as_str()))).collect();
    batch(Compression::None, &records, timestamp)
}

fn small_config() -> LogConfig {
    LogConfig { segment_bytes: 4096, index_interval_bytes: 256, ..LogConfig::default() }
}

fn open(dir: &std::path::Path, config: LogConfig, clock: &Arc<ManualClock>) -> Log {
    Log::open(dir, config, LogContext::standalone(clock.clone())).unwrap()
}

/// Every (offset, value) readable from `from`, following reads to the end.
fn read_all(log: &Log, from: i64) -> Vec<(i64, Option<Bytes>)> {
    let mut out = Vec::new();
    let mut next = from;
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20, i64::MAX).unwrap();
        if bytes.is_empty() {
            break;
        }
        for batch in BatchIter::new(bytes) {
            let batch = batch.unwrap();
            for record in batch.records().unwrap() {
                if record.offset >= next {
                    out.push((record.offset, record.value.clone()));
                }
            }
            next = batch.last_offset() + 1;
        }
    }
    out
}

#[test]
fn append_assigns_offsets_and_read_returns_the_same_bytes() {
    // Proves offsets are assigned from the log end offset and reads return the appended batch.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let first = log.append_as_leader(&value_batch(3, 10, T0), 5, AppendOrigin::Client).unwrap();
    assert_eq!((first.first_offset, first.last_offset, first.record_count), (0, 2, 3));
    let second = log.append_as_leader(&value_batch(2, 10, T0 + 1), 5, AppendOrigin::Client).unwrap();
    assert_eq!((second.first_offset, second.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);

    let bytes = log.read(3, 1 << 20, i64::MAX).unwrap();
    let batches: Vec<_> = BatchIter::new(bytes).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].base_offset(), 3);
    assert_eq!(batches[0].header().partition_leader_epoch, 5);
    // The read from offset 1 starts at the batch that contains it.
    let bytes = log.read(1, 1 << 20, i64::MAX).unwrap();
    assert_eq!(BatchIter::new(bytes).next().unwrap().unwrap().base_offset(), 0);
    // The upper bound (high watermark) hides the second batch.
    let bytes = log.read(0, 1 << 20, 3).unwrap();
    assert_eq!(BatchIter::new(bytes).count(), 1);
    assert!(log.read(3, 1 << 20, 3).unwrap().is_empty());
    assert!(log.read(5, 1 << 20, i64::MAX).unwrap().is_empty());
    assert!(matches!(log.read(6, 100, i64::MAX), Err(LogError::OffsetOutOfRange { .. })));
}

#[test]
fn read_returns_whole_batches_and_at_least_one() {
    // Proves max_bytes cuts at batch boundaries but never returns nothing when a batch exists.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let b = value_batch(1, 1000, T0);
    for _ in 0..3 {
        log.append_as_leader(&b, 0, AppendOrigin::Client).unwrap();
    }
    let one = log.read(0, 10, i64::MAX).unwrap();
    assert_eq!(one.len(), b.len());
    let two = log.read(0, 2 * b.len() + 10, i64::MAX).unwrap();
    assert_eq!(two.len(), 2 * b.len());
}

#[test]
fn segments_roll_on_size_and_reads_cross_them() {
    // Proves rolling by segment.bytes and that every offset stays readable across segments.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..100 {
        log.append_as_leader(&value_batch(2, 100, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 200);
    assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
    // Every offset can start a read.
    for offset in [0, 1, 57, 58, 199] {
        let bytes = log.read(offset, 1, i64::MAX).unwrap();
        let batch = BatchIter::new(bytes).next().unwrap().unwrap();
        assert!(batch.base_offset() <= offset && offset <= batch.last_offset());
    }
}

#[test]
fn segment_ms_rolls_by_batch_timestamps_as_kafka_does() {
    // Proves segment.ms compares the incoming batch's timestamp with the segment's first batch.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + 1_000_000);
    let config = LogConfig { segment_ms: 1000, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client).unwrap();
    // Exactly segment.ms later does not roll yet: Kafka rolls when the wait is strictly longer.
    log.append_as_leader(&value_batch(1, 10, T0 + 1000), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(&value_batch(1, 10, T0 + 1001), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
}

#[test]
fn segment_jitter_ms_rolls_each_partition_somewhat_earlier() {
    // Proves segment.jitter.ms as Kafka applies it: a segment rolls once its wait is more than
    // segment.ms less its jitter, a jitter in [0, min(segment.jitter.ms, segment.ms)) that
    // differs between partitions (so partitions created together do not roll together).
    // Before, the config was refused as unknown.
    let clock = ManualClock::new(T0 + 1_000_000);
    let config = LogConfig { segment_ms: 1000, segment_jitter_ms: 800, ..LogConfig::default() };
    let mut jitters = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), config.clone(), &clock);
        let jitter = log.roll_jitter_ms(0, 1000);
        assert!((0..800).contains(&jitter), "{jitter}");
        jitters.insert(jitter);
        log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client).unwrap();
        log.append_as_leader(&value_batch(1, 10, T0 + 1000 - jitter), 0, AppendOrigin::Client).unwrap();
        assert_eq!(log.segment_count(), 1, "jitter {jitter}");
        log.append_as_leader(&value_batch(1, 10, T0 + 1000 - jitter + 1), 0, AppendOrigin::Client).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2], "jitter {jitter}");
    }
    assert!(jitters.len() > 1, "every partition would roll at the same moment: {jitters:?}");
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig { segment_ms: 1000, ..LogConfig::default() }, &clock);
    assert_eq!(log.roll_jitter_ms(0, 1000), 0, "no jitter by default");
}

#[test]
fn old_timestamps_do_not_roll_every_append() {
    // Regression: rolling by wall clock against old batch timestamps made one segment per batch.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + 365 * 24 * 3600 * 1000);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    for _ in 0..10 {
        log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn segment_ms_uses_wall_clock_when_batches_have_no_timestamps() {
    // Proves batches without timestamps (-1) roll by the segment's age on the broker clock.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig { segment_ms: 1000, ..LogConfig::default() }, &clock);
    log.append_as_leader(&value_batch(1, 10, -1), 0, AppendOrigin::Client).unwrap();
    clock.advance(1000);
    log.append_as_leader(&value_batch(1, 10, -1), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.segment_count(), 1);
    clock.advance(1);
    log.append_as_leader(&value_batch(1, 10, -1), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn clean_reopen_scans_nothing_and_keeps_everything() {
    // Proves a clean close is detected and the reopened log has the same offsets and data.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..50 {
        log.append_as_leader(&value_batch(3, 50, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    let before = read_all(&log, 0);
    let segments = log.segment_base_offsets();
    log.close().unwrap();
    let mut log = open(dir.path(), small_config(), &clock);
    assert!(log.open_report().clean_shutdown);
    assert_eq!(log.open_report().segments_recovered, 0);
    assert_eq!(log.segment_base_offsets(), segments);
    assert_eq!(log.log_end_offset(), 150);
    assert_eq!(read_all(&log, 0), before);
    // It keeps appending where it left off, and a crash after that is not mistaken for clean.
    log.append_as_leader(&value_batch(1, 50, T0), 0, AppendOrigin::Client).unwrap();
    drop(log);
    let log = open(dir.path(), small_config(), &clock);
    assert!(!log.open_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), 151);
}

#[test]
fn crash_with_a_torn_tail_keeps_every_whole_batch() {
    // Proves recovery cuts a torn final batch and keeps all batches before it.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    for i in 0..10 {
        log.append_as_leader(&value_batch(1, 100, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    let path = dir.path().join("00000000000000000000.log");
    let len = std::fs::metadata(&path).unwrap().len();
    drop(log);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 7).unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert!(!log.open_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), 9);
    assert_eq!(read_all(&log, 0).len(), 9);
}

#[test]
fn open_report_counts_the_bytes_recovery_cut() {
    // Regression: OpenReport measured a torn segment after recovery had already cut it, so
    // bytes_truncated was always 0.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let batch = value_batch(1, 100, T0);
    for _ in 0..3 {
        log.append_as_leader(&batch, 0, AppendOrigin::Client).unwrap();
    }
    drop(log);
    let path = dir.path().join("00000000000000000000.log");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(3 * batch.len() as u64 - 7).unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.open_report().bytes_truncated, batch.len() as u64 - 7, "what was left of the torn batch");
}

#[test]
fn corrupt_crc_is_rejected_and_nothing_is_written() {
    // Proves a bad CRC is a typed error and a request with one bad batch appends nothing.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let good = value_batch(1, 10, T0);
    let mut bad = good.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let mut both = good.to_vec();
    both.extend_from_slice(&bad);
    let err = log.append_as_leader(&Bytes::from(both), 0, AppendOrigin::Client).unwrap_err();
    assert!(matches!(err, LogError::CorruptBatch(BatchError::CrcMismatch { .. })), "{err}");
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn oversized_and_control_batches_from_clients_are_rejected() {
    // Proves max.message.bytes and the client rules (no control batches) are enforced.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { max_message_bytes: 500, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    let err = log.append_as_leader(&value_batch(1, 600, T0), 0, AppendOrigin::Client).unwrap_err();
    assert!(matches!(err, LogError::MessageTooLarge { max: 500, .. }), "{err}");
    let mut builder = BatchBuilder::new(Compression::None).control(true);
    builder.push(T0, Some(&[0, 0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    let control = builder.build().unwrap().into_bytes();
    let err = log.append_as_leader(&control, 0, AppendOrigin::Client).unwrap_err();
    assert!(matches!(err, LogError::InvalidRecord { .. }), "{err}");
    log.append_as_leader(&control, 0, AppendOrigin::Coordinator).unwrap();
    assert!(matches!(
        log.append_as_leader(&Bytes::new(), 0, AppendOrigin::Client),
        Err(LogError::InvalidRecord { .. })
    ));
}

#[test]
fn log_append_time_overwrites_the_batch_timestamp_and_keeps_the_crc_valid() {
    // Proves message.timestamp.type=LogAppendTime stamps the broker clock into a valid batch.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + 5_000);
    let config = LogConfig { message_timestamp_type: TimestampType::LogAppendTime, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    let info = log.append_as_leader(&value_batch(2, 10, T0), 0, AppendOrigin::Client).unwrap();
    assert_eq!(info.log_append_time, T0 + 5_000);
    let bytes = log.read(0, 1 << 20, i64::MAX).unwrap();
    let batch = BatchIter::new(bytes).next().unwrap().unwrap();
    assert_eq!(batch.header().attributes.timestamp_type(), TimestampType::LogAppendTime);
    assert!(batch.records().unwrap().iter().all(|r| r.timestamp == T0 + 5_000));
}

#[test]
fn producer_expiry_measures_from_the_timestamp_the_batch_was_written_with() {
    // Proves the leader's producer entry takes the stamped time (LogAppendTime: the broker's
    // clock), as followers and a replay read it: a producer whose records carry a day-old
    // CreateTime is not expired at once on a LogAppendTime topic (so its retry is still
    // recognised as a duplicate).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { message_timestamp_type: TimestampType::LogAppendTime, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    let mut builder = BatchBuilder::new(Compression::None).producer(9, 0, 0);
    builder.push(T0 - 86_400_000, None, Some(b"v"), &[]);
    let idempotent = builder.build().unwrap().into_bytes();
    log.append_as_leader(&idempotent, 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.expire_producers(3_600_000), 0, "written now: not idle for an hour");
    assert!(log.append_as_leader(&idempotent, 0, AppendOrigin::Client).unwrap().duplicate);
    clock.advance(3_600_001);
    assert_eq!(log.expire_producers(3_600_000), 1);
}

#[test]
fn truncate_removes_the_suffix_and_appends_continue_from_there() {
    // Proves truncate_to cuts whole batches, across segments, and the log continues after it.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..60 {
        log.append_as_leader(&value_batch(2, 100, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    log.truncate_to(51).unwrap();
    assert_eq!(log.log_end_offset(), 50, "51 sits inside the batch [50, 51]");
    assert_eq!(read_all(&log, 0).len(), 50);
    let info = log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client).unwrap();
    assert_eq!(info.first_offset, 50);
    drop(log);
    let log = open(dir.path(), small_config(), &clock);
    assert_eq!(log.log_end_offset(), 51);
    assert_eq!(read_all(&log, 0).len(), 51);
}

#[test]
fn retention_by_time_and_size_deletes_whole_closed_segments() {
    // Proves retention.ms uses each segment's newest timestamp and retention.bytes the total size.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { retention_ms: 10_000, ..small_config() };
    let mut log = open(dir.path(), config, &clock);
    for i in 0..40 {
        log.append_as_leader(&value_batch(1, 500, T0 + i * 1000), 0, AppendOrigin::Client).unwrap();
    }
    clock.set(T0 + 45_000);
    let segments_before = log.segment_count();
    let outcome = log.enforce_retention(log.log_end_offset()).unwrap();
    assert!(outcome.segments_deleted > 0 && outcome.segments_deleted < segments_before);
    // Every remaining closed segment has a timestamp within retention, or it is the active one.
    assert!(log.log_start_offset() > 0);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    assert!(matches!(log.read(0, 100, i64::MAX), Err(LogError::OffsetOutOfRange { .. })));

    let mut config = log.config().clone();
    config.retention_ms = -1;
    config.retention_bytes = 0;
    log.set_config(config);
    log.enforce_retention(log.log_end_offset()).unwrap();
    assert_eq!(log.segment_count(), 1, "only the active segment survives retention.bytes=0");
    // Never past the high watermark.
    let dir2 = tempfile::tempdir().unwrap();
    let mut log2 = open(dir2.path(), LogConfig { retention_bytes: 0, ..small_config() }, &clock);
    for _ in 0..20 {
        log2.append_as_leader(&value_batch(1, 500, T0), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(log2.enforce_retention(0).unwrap().segments_deleted, 0);
}

#[test]
fn an_idle_partitions_expired_active_segment_is_rolled_and_deleted() {
    // Proves retention.ms reaches the active segment (Kafka's UnifiedLog): an idle partition's
    // data older than retention goes once it is all below the high watermark (rolled, then
    // deleted), not before; it stayed readable forever (found by review).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig { retention_ms: 1000, ..LogConfig::default() }, &clock);
    log.append_as_leader(&value_batch(3, 100, T0), 0, AppendOrigin::Client).unwrap();
    clock.advance(2000);
    assert_eq!(log.enforce_retention(2).unwrap().segments_deleted, 0, "not while above the high watermark");
    assert_eq!(log.enforce_retention(3).unwrap().segments_deleted, 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
    assert_eq!(log.segment_base_offsets(), vec![3], "a new, empty active segment");
    log.append_as_leader(&value_batch(1, 100, T0 + 2000), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.enforce_retention(4).unwrap().segments_deleted, 0, "fresh data stays");
}

#[test]
fn delete_records_moves_the_log_start_offset_durably() {
    // Proves DeleteRecords semantics: the start offset moves, old segments go, it survives a reopen.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..40 {
        log.append_as_leader(&value_batch(1, 500, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(log.delete_records_before(25).unwrap(), 25);
    assert!(log.segment_base_offsets()[0] <= 25);
    assert!(log.segment_base_offsets()[0] > 0);
    assert!(matches!(log.read(24, 100, i64::MAX), Err(LogError::OffsetOutOfRange { .. })));
    assert!(matches!(log.delete_records_before(41), Err(LogError::OffsetOutOfRange { .. })));
    drop(log);
    let log = open(dir.path(), small_config(), &clock);
    assert_eq!(log.log_start_offset(), 25);
    assert_eq!(read_all(&log, 25).first().map(|r| r.0), Some(25));
}

#[test]
fn truncate_below_a_mid_batch_log_start_offset_survives_a_crash() {
    // Regression: truncate_to lowered the log start offset (the cut batch held it) only in memory;
    // after a crash the checkpoint's old start hid offsets appended after the truncation.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    log.append_as_leader(&value_batch(10, 10, T0), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.delete_records_before(4).unwrap(), 4);
    log.truncate_to(4).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0), "the batch [0, 9] held offset 4");
    log.append_as_leader(&value_batch(10, 10, T0), 0, AppendOrigin::Client).unwrap();
    drop(log);
    let log = open(dir.path(), small_config(), &clock);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 10));
    assert_eq!(read_all(&log, 0).len(), 10);
}

fn dense_index_config() -> LogConfig {
    LogConfig { index_interval_bytes: 256, ..LogConfig::default() }
}

/// A closed first segment of one-record batches with these timestamps (after `T0`), an offset
/// index entry at every batch but the first, then a second segment. Returns the path of the
/// first segment's `.timeindex`.
fn closed_segment_with_timestamps(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    timestamps: &[i64],
) -> std::path::PathBuf {
    let mut log = open(dir, dense_index_config(), clock);
    for ts in timestamps {
        log.append_as_leader(&value_batch(1, 200, T0 + ts), 0, AppendOrigin::Client).unwrap();
    }
    log.roll().unwrap();
    log.append_as_leader(&value_batch(1, 200, T0), 0, AppendOrigin::Client).unwrap();
    log.close().unwrap();
    dir.join("00000000000000000000.timeindex")
}

#[test]
fn damage_found_rebuilding_a_flushed_segments_index_keeps_the_later_segments() {
    // Proves a damaged batch found while rebuilding the index of a segment below the recovery
    // point (its .index deleted, a byte of its data flipped) cuts that segment only, as Kafka's
    // LogLoader does: the later, flushed segments stay. They were deleted, losing acknowledged
    // data for one bad byte (found by review).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    for _ in 0..3 {
        for _ in 0..4 {
            log.append_as_leader(&value_batch(1, 200, T0), 0, AppendOrigin::Client).unwrap();
        }
        log.roll().unwrap();
    }
    let end = log.log_end_offset();
    log.close().unwrap();
    let first = dir.path().join("00000000000000000000.log");
    let mut bytes = std::fs::read(&first).unwrap();
    let last = bytes.len() - 10;
    bytes[last] ^= 0xff; // inside the last batch of the first segment
    std::fs::write(&first, &bytes).unwrap();
    std::fs::remove_file(dir.path().join("00000000000000000000.index")).unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(log.log_end_offset(), end, "the later segments are kept");
    assert_eq!(read_all(&log, 4).len(), 8, "and read");
    assert_eq!(read_all(&log, 0).first().map(|r| r.0), Some(0), "the first segment's good batches too");
}

#[test]
fn missing_time_index_of_a_closed_segment_is_rebuilt() {
    // Regression: a deleted .timeindex reopened empty and passed the sanity check, so the segment's
    // largest timestamp (here offset 5, before the last offset index entry) was lost.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let time_index = closed_segment_with_timestamps(dir.path(), &clock, &[1, 2, 3, 4, 5, 100, 6, 7, 8, 9]);
    std::fs::remove_file(&time_index).unwrap();
    let log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.offset_for_timestamp(T0 + 50).unwrap(), Some((5, T0 + 100)));
    log.close().unwrap();
    assert_eq!(std::fs::metadata(&time_index).unwrap().len(), 5 * 12, "rebuilt with its five entries");
}

#[test]
fn torn_time_index_of_a_closed_segment_is_rebuilt() {
    // Regression: an index file cut inside an entry was read as its whole entries, silently dropping
    // the last one, which held the segment's largest timestamp.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let time_index = closed_segment_with_timestamps(dir.path(), &clock, &[1, 2, 3, 4, 5, 100, 6, 7, 8, 9]);
    assert_eq!(std::fs::metadata(&time_index).unwrap().len(), 5 * 12);
    std::fs::OpenOptions::new().write(true).open(&time_index).unwrap().set_len(5 * 12 - 6).unwrap();
    let log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.offset_for_timestamp(T0 + 50).unwrap(), Some((5, T0 + 100)));
}

#[test]
fn zeroed_time_index_entry_is_not_trusted() {
    // Regression: a zero-filled one-entry .timeindex, (timestamp 0, base offset), passed the sanity
    // check and became the segment's largest timestamp, hiding the segment from ListOffsets.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let time_index = closed_segment_with_timestamps(dir.path(), &clock, &[100, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(std::fs::metadata(&time_index).unwrap().len(), 12, "one entry: (T0 + 100, 0)");
    std::fs::write(&time_index, [0u8; 12]).unwrap();
    let log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.offset_for_timestamp(T0 + 50).unwrap(), Some((0, T0 + 100)));
}

#[test]
fn offset_for_timestamp_finds_the_first_record_at_or_after() {
    // Proves ListOffsets by timestamp and max timestamp across segments.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..50 {
        let mut builder = BatchBuilder::new(Compression::None);
        builder.push(T0 + i * 10, None, Some(b"a"), &[]);
        builder.push(T0 + i * 10 + 5, None, Some(b"b"), &[]);
        log.append_as_leader(&builder.build().unwrap().into_bytes(), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, T0)));
    assert_eq!(log.offset_for_timestamp(T0 + 3).unwrap(), Some((1, T0 + 5)));
    assert_eq!(log.offset_for_timestamp(T0 + 250).unwrap(), Some((50, T0 + 250)));
    assert_eq!(log.offset_for_timestamp(T0 + 251).unwrap(), Some((51, T0 + 255)));
    assert_eq!(log.offset_for_timestamp(T0 + 10_000).unwrap(), None);
    assert_eq!(log.max_timestamp_offset().unwrap(), Some((99, T0 + 495)));
}

#[test]
fn compaction_keeps_the_latest_value_per_key_and_preserves_offsets() {
    // Proves compaction keeps the newest record per key, keeps offsets, and drops old tombstones.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 1_000,
        segment_bytes: 2048,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config, &clock);
    for round in 0..20 {
        for key in ["a", "b", "c"] {
            let value = format!("{key}{round}");
            let value = if key == "c" && round == 19 { None } else { Some(value) };
            log.append_as_leader(
                &batch(Compression::Lz4, &[(Some(key), value.as_deref())], T0),
                0,
                AppendOrigin::Client,
            )
            .unwrap();
        }
    }
    log.roll().unwrap();
    let keyless = log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client).unwrap_err();
    assert!(matches!(keyless, LogError::InvalidRecords { invalid_timestamp: false, .. }));
    let stats: CompactionStats = log.compact().unwrap().unwrap();
    assert_eq!(stats.records_read, 60);
    assert_eq!(stats.records_kept, 3, "{stats:?}");
    let all = read_all(&log, 0);
    assert_eq!(all.iter().map(|r| r.0).collect::<Vec<_>>(), vec![57, 58, 59]);
    assert_eq!(all[0].1.as_deref(), Some(&b"a19"[..]));
    assert_eq!(all[2].1, None, "a fresh tombstone survives");
    // Once the tombstone is older than delete.retention.ms it goes too.
    clock.advance(10_000);
    let stats = log.compact().unwrap().unwrap();
    assert_eq!(stats.records_kept, 2);
    assert_eq!(log.log_end_offset(), 60);
    drop(log);
    let log = Log::open(
        dir.path(),
        LogConfig { cleanup_policy: CleanupPolicy::COMPACT, ..LogConfig::default() },
        LogContext::standalone(clock.clone()),
    )
    .unwrap();
    assert_eq!(read_all(&log, 0).iter().map(|r| r.0).collect::<Vec<_>>(), vec![57, 58]);
}

#[test]
fn compaction_within_a_small_key_map_cleans_in_passes_to_the_same_result() {
    // Proves log.cleaner.dedupe.buffer.size: with room for 50 keys a pass maps at most 50 keys
    // of the dirty part and cleans up to there only (the map never holds more), later passes
    // go on from there, and the log ends exactly as one unbounded compaction leaves it: the
    // last value of each of 200 keys at its offset. Fails if a pass maps past its budget.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        segment_bytes: 4096,
        min_cleanable_dirty_ratio: DirtyRatio(0.0),
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config, &clock);
    for round in 0..3 {
        for key in 0..200 {
            let (key, value) = (format!("k{key}"), format!("v{round}-{key}"));
            log.append_as_leader(&batch(Compression::None, &[(Some(&key), Some(&value))], T0), 0, AppendOrigin::Client)
                .unwrap();
        }
    }
    log.roll().unwrap();
    let end = log.log_end_offset();
    let mut passes = 0;
    let mut first_pass_read = None;
    while let Some(job) = log.compaction_job(end) {
        let result = job.run(50 * 56).unwrap();
        first_pass_read.get_or_insert(result.stats.records_read);
        assert!(log.install_compaction(result).unwrap());
        passes += 1;
        assert!(passes < 100, "compaction never finished");
        if read_all(&log, 0).len() == 200 && passes >= 12 {
            break;
        }
    }
    assert!(passes >= 12, "600 records of 200 keys need 12 passes of 50 keys, took {passes}");
    assert!(first_pass_read.unwrap() < 600, "the first pass read only the segments below its map's end");
    let all = read_all(&log, 0);
    assert_eq!(all.iter().map(|r| r.0).collect::<Vec<_>>(), (400..600).collect::<Vec<i64>>());
    assert_eq!(all[0].1.as_deref(), Some(&b"v2-0"[..]));
    assert_eq!(all[199].1.as_deref(), Some(&b"v2-199"[..]));
}

#[test]
fn follower_append_keeps_offsets_and_rejects_going_backwards() {
    // Proves replicated batches keep their offsets and must continue the log.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let mut builder = BatchBuilder::new(Compression::None).base_offset(10).partition_leader_epoch(3);
    builder.push(T0, None, Some(b"x"), &[]);
    let replicated = builder.build().unwrap().into_bytes();
    let info = log.append_as_follower(&replicated).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (10, 10));
    assert_eq!(log.log_end_offset(), 11);
    assert!(matches!(log.append_as_follower(&replicated), Err(LogError::NonMonotonicOffsets { .. })));
}

#[test]
fn clean_reopen_leaves_index_files_alone_until_the_first_append() {
    // Regression: opening after a clean shutdown preallocated the active indexes, so a crash
    // before any append left zero-filled indexes that every later open had to rebuild.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), small_config(), &clock);
    for i in 0..30 {
        log.append_as_leader(&value_batch(1, 300, T0 + i), 0, AppendOrigin::Client).unwrap();
    }
    let active = *log.segment_base_offsets().last().unwrap();
    log.close().unwrap();
    let index = dir.path().join(format!("{active:020}.index"));
    let time_index = dir.path().join(format!("{active:020}.timeindex"));
    let sizes = || (std::fs::metadata(&index).unwrap().len(), std::fs::metadata(&time_index).unwrap().len());
    let closed = sizes();
    drop(open(dir.path(), small_config(), &clock)); // a crash right after a clean open
    assert_eq!(sizes(), closed);
    let log = open(dir.path(), small_config(), &clock);
    assert!(log.open_report().clean_shutdown, "nothing was mutated, so the shutdown still counts as clean");
    assert_eq!(read_all(&log, 0).len(), 30);
}

#[test]
fn segment_index_bytes_of_four_rolls_every_batch_instead_of_panicking() {
    // Regression: `segment.index.bytes=4` (accepted by Kafka's validation) gave indexes of 0
    // entries and the first append to a segment asserted; Kafka rolls on a full index, here
    // before every batch but the first of a segment. Reads, reopen and recovery keep it all.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { segment_index_bytes: 4, index_interval_bytes: 0, ..LogConfig::default() };
    let mut log = open(dir.path(), config.clone(), &clock);
    for i in 0..20 {
        let info = log.append_as_leader(&value_batch(2, 30, T0 + i), 0, AppendOrigin::Client).unwrap();
        assert_eq!(info.first_offset, 2 * i);
    }
    assert_eq!(log.segment_count(), 20, "one batch per segment");
    let expected = read_all(&log, 0);
    assert_eq!(expected.len(), 40);
    log.close().unwrap();
    let mut log = open(dir.path(), config.clone(), &clock);
    assert_eq!(read_all(&log, 0), expected);
    assert_eq!(log.offset_for_timestamp(T0 + 7).unwrap(), Some((14, T0 + 7)));
    log.append_as_leader(&value_batch(1, 30, T0 + 20), 0, AppendOrigin::Client).unwrap();
    drop(log); // a crash: no clean close
    let log = open(dir.path(), config, &clock);
    assert_eq!(read_all(&log, 0).len(), 41);
}

#[test]
fn every_index_size_and_interval_keeps_reads_exact() {
    // Proves reads return exactly what was appended for index sizes of 0, 1 and 2 entries and
    // intervals from 0 to i32::MAX, across reopen, and that compaction of such segments works.
    for segment_index_bytes in [4u32, 8, 12, 16, 24, 25, 1 << 20] {
        for index_interval_bytes in [0u32, 1, 100, i32::MAX as u32] {
            let dir = tempfile::tempdir().unwrap();
            let clock = ManualClock::new(T0);
            let config = LogConfig {
                segment_bytes: 2048,
                segment_index_bytes,
                index_interval_bytes,
                cleanup_policy: CleanupPolicy { delete: true, compact: true },
                ..LogConfig::default()
            };
            let mut log = open(dir.path(), config.clone(), &clock);
            for i in 0..30 {
                let key = format!("k{}", i % 4);
                let b = batch(Compression::None, &[(Some(&key), Some("value"))], T0 + i);
                log.append_as_leader(&b, 0, AppendOrigin::Client).unwrap();
            }
            let expected = read_all(&log, 0);
            assert_eq!(expected.len(), 30, "{segment_index_bytes} {index_interval_bytes}");
            for from in 0..30 {
                assert_eq!(read_all(&log, from), expected[from as usize..], "from {from}");
            }
            log.close().unwrap();
            let mut log = open(dir.path(), config.clone(), &clock);
            assert_eq!(read_all(&log, 0), expected);
            clock.advance(1);
            log.compact().unwrap();
            let after = read_all(&log, 0);
            assert!(after.len() <= 30 && after.last() == expected.last());
        }
    }
}

#[test]
fn follower_batches_past_u32_relative_offsets_roll_a_new_segment() {
    // Proves a batch whose offsets would not fit the index's relative offsets starts a segment.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let mut b = BatchBuilder::new(Compression::None).base_offset(0);
    b.push(T0, Some(b"k"), Some(b"v"), &[]);
    log.append_as_follower(&b.build().unwrap().into_bytes()).unwrap();
    let far = 5_000_000_000i64;
    let mut b = BatchBuilder::new(Compression::None).base_offset(far);
    b.push(T0, Some(b"k"), Some(b"v"), &[]);
    log.append_as_follower(&b.build().unwrap().into_bytes()).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, far]);
    assert_eq!(log.log_end_offset(), far + 1);
    log.close().unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(read_all(&log, 1).iter().map(|r| r.0).collect::<Vec<_>>(), vec![far]);
}

#[test]
fn extreme_timestamps_and_segment_ms_of_one_do_not_overflow() {
    // Regression: `segment.ms` compared `batch_max_timestamp - first` without saturating, so
    // a client batch with an i64::MIN-ish timestamp after a large one overflowed.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { segment_ms: 1, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    for ts in [i64::MAX, i64::MIN + 1, 0, T0, T0 + 1, T0 + 1, i64::MAX - 1] {
        log.append_as_leader(&value_batch(1, 5, ts), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(read_all(&log, 0).len(), 7);
}

/// Every file of the log directory and its bytes.
fn dir_files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

fn concat(batches: &[Bytes]) -> Bytes {
    batches.iter().flat_map(|b| b.iter().copied()).collect::<Vec<u8>>().into()
}

#[test]
fn a_failed_multi_batch_append_leaves_the_log_byte_identical_and_a_retry_appends_once() {
    // Regression: a produce of several batches that failed part-way (a write, or the roll
    // between two batches) left the earlier batches written, so the client's retry duplicated
    // them. Fault injection fails the Nth write or the roll; the directory must be byte for
    // byte as before, and the retry must append each batch exactly once.
    use crate::log::segment::fault;
    enum Failure {
        Write(u32),
        Roll,
    }
    for failure in [Failure::Write(0), Failure::Write(1), Failure::Write(2), Failure::Write(3), Failure::Roll] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        // Batches of ~330 bytes and segments of 1,000: the 4-batch append rolls part-way.
        let config = LogConfig {
            segment_bytes: 1_000,
            segment_index_bytes: 4_096,
            index_interval_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = open(dir.path(), config.clone(), &clock);
        log.append_as_leader(&value_batch(2, 120, T0), 0, AppendOrigin::Client).unwrap();
        let before = dir_files(dir.path());
        let (end_before, segments_before) = (log.log_end_offset(), log.segment_base_offsets());
        let batches: Vec<Bytes> = (0..4).map(|i| value_batch(2, 120, T0 + 1 + i)).collect();
        let records = concat(&batches);
        match failure {
            Failure::Write(n) => fault::fail_write_after(Some(n)),
            Failure::Roll => fault::fail_create_after(Some(0)),
        }
        let err = log.append_as_leader(&records, 0, AppendOrigin::Client).unwrap_err();
        fault::fail_write_after(None);
        fault::fail_create_after(None);
        assert!(matches!(err, LogError::Io { .. }), "{err}");
        assert_eq!(log.log_end_offset(), end_before);
        assert_eq!(log.segment_base_offsets(), segments_before);
        assert_eq!(dir_files(dir.path()), before, "the directory is byte-identical after the failed append");

        let info = log.append_as_leader(&records, 0, AppendOrigin::Client).unwrap();
        assert_eq!((info.first_offset, info.last_offset, info.batch_count), (2, 9, 4));
        let offsets: Vec<i64> = read_all(&log, 0).iter().map(|r| r.0).collect();
        assert_eq!(offsets, (0..10).collect::<Vec<_>>(), "each batch once");
        drop(log); // crash: recovery must agree
        let log = open(dir.path(), config, &clock);
        assert_eq!(read_all(&log, 0).iter().map(|r| r.0).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    }
}

#[test]
fn keyless_records_on_a_compacted_topic_are_named_in_record_errors() {
    // Proves each keyless record of a compacted topic is reported by its index within its
    // batch with Kafka's message, and that nothing of the append is written.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, ..LogConfig::default() };
    let mut log = Log::open(&dir.path().join("orders-3"), config, LogContext::standalone(clock.clone())).unwrap();
    let good = batch(Compression::None, &[(Some("k"), Some("v"))], T0);
    let mixed = batch(
        Compression::Lz4,
        &[(Some("a"), Some("1")), (None, Some("2")), (Some("c"), Some("3")), (None, Some("4"))],
        T0,
    );
    let err = log.append_as_leader(&concat(&[good, mixed]), 0, AppendOrigin::Client).unwrap_err();
    let LogError::InvalidRecords { invalid_timestamp, record_errors } = &err else { panic!("{err:?}") };
    assert!(!invalid_timestamp);
    let indexes: Vec<i32> = record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, vec![1, 3]);
    let message = "Compacted topic cannot accept message without key in topic partition orders-3.";
    assert!(record_errors.iter().all(|e| e.message == message));
    assert_eq!(
        err.to_string(),
        format!(
            "One or more records have been rejected due to 2 record errors in total, and only showing the first \
             three errors at most: [RecordError(batchIndex=1, message='{message}'), RecordError(batchIndex=3, \
             message='{message}')]"
        )
    );
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn timestamps_outside_the_before_and_after_bounds_are_named_in_record_errors() {
    // Proves CreateTime records outside message.timestamp.before/after.max.ms are rejected by
    // index (INVALID_TIMESTAMP), records inside are fine, and LogAppendTime topics skip it.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        message_timestamp_before_max_ms: 1_000,
        message_timestamp_after_max_ms: 500,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone(), &clock);
    let mut builder = BatchBuilder::new(Compression::Zstd);
    for ts in [T0 - 1_000, T0 - 1_001, T0, T0 + 500, T0 + 501] {
        builder.push(ts, Some(b"k"), Some(b"v"), &[]);
    }
    let records = builder.build().unwrap().into_bytes();
    let err = log.append_as_leader(&records, 0, AppendOrigin::Client).unwrap_err();
    let LogError::InvalidRecords { invalid_timestamp, record_errors } = &err else { panic!("{err:?}") };
    assert!(invalid_timestamp);
    assert_eq!(record_errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), vec![1, 4]);
    assert_eq!(
        record_errors[0].message,
        format!(
            "Timestamp {} of message with offset 1 is out of range. The timestamp should be within [{}, {}]",
            T0 - 1_001,
            T0 - 1_000,
            T0 + 500
        )
    );
    assert_eq!(err.to_string(), "One or more records have been rejected due to invalid timestamp");
    assert_eq!(log.log_end_offset(), 0);
    clock.advance(1);
    log.append_as_leader(&value_batch(1, 3, T0 + 1), 0, AppendOrigin::Client).unwrap();

    let mut log_append = open(
        &dir.path().join("log-append"),
        LogConfig { message_timestamp_type: TimestampType::LogAppendTime, ..config },
        &clock,
    );
    log_append.append_as_leader(&records, 0, AppendOrigin::Client).unwrap();
}

/// Every (offset, value) from the log start offset.
fn records_of(log: &Log) -> Vec<(i64, Option<Bytes>)> {
    read_all(log, log.log_start_offset())
}

#[test]
fn fifty_logs_sharing_a_cache_of_four_open_files_keep_every_record() {
    // Proves logs whose `.log` descriptors are evicted and reopened all the time (50 logs, a
    // node cache of 4) keep every record through appends, reads, rolls, truncation, retention,
    // compaction, a clean close and a reopen, and the cache never holds more than 4.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let files = OpenFiles::new(4);
    let context = LogContext::new(clock.clone(), files.clone());
    let config = |i: usize| LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 100,
        cleanup_policy: if i % 2 == 0 { CleanupPolicy::DELETE } else { CleanupPolicy::COMPACT },
        ..LogConfig::default()
    };
    let path = |i: usize| dir.path().join(format!("t-{i}"));
    let mut logs: Vec<Log> = (0..50).map(|i| Log::open(&path(i), config(i), context.clone()).unwrap()).collect();
    let mut models: Vec<Vec<(i64, Option<Bytes>)>> = vec![Vec::new(); logs.len()];
    let append = |logs: &mut Vec<Log>, models: &mut Vec<Vec<(i64, Option<Bytes>)>>, round: i64| {
        for (i, log) in logs.iter_mut().enumerate() {
            let (key, value) = (format!("k{}", round % 3), format!("log {i} round {round}"));
            let records = batch(Compression::None, &[(Some(&key), Some(&value))], T0 + round);
            let info = log.append_as_leader(&records, 0, AppendOrigin::Client).unwrap();
            models[i].push((info.first_offset, Some(Bytes::from(value))));
        }
    };
    let check = |logs: &Vec<Log>, models: &Vec<Vec<(i64, Option<Bytes>)>>, what: &str| {
        for (i, log) in logs.iter().enumerate() {
            assert_eq!(records_of(log), models[i], "{what}: log {i}");
        }
        assert!(files.stats().open <= 4, "{what}: {:?}", files.stats());
    };
    for round in 0..20 {
        append(&mut logs, &mut models, round);
    }
    let segments: Vec<usize> = logs.iter().map(Log::segment_count).collect();
    assert!(segments.iter().all(|n| *n >= 3), "the logs rolled: {segments:?}");
    check(&logs, &models, "after appends");

    for (log, model) in logs.iter_mut().zip(&mut models) {
        log.truncate_to(12).unwrap();
        model.truncate(12);
    }
    check(&logs, &models, "after truncation");
    for round in 20..30 {
        append(&mut logs, &mut models, round);
    }
    check(&logs, &models, "after appends past the truncation");

    clock.advance(1_000); // past every batch timestamp: closed segments become cleanable
    for (i, (log, model)) in logs.iter_mut().zip(&mut models).enumerate() {
        let end = log.log_end_offset();
        if i % 2 == 0 {
            log.set_config(LogConfig { retention_bytes: 1_000, ..config(i) });
            assert!(log.enforce_retention(end).unwrap().segments_deleted > 0, "log {i}");
            model.retain(|(offset, _)| *offset >= log.log_start_offset());
        } else {
            assert!(log.compact().unwrap().is_some(), "log {i}");
            let kept = records_of(log);
            assert!(kept.len() < model.len(), "log {i}: compaction removed older values");
            assert!(kept.iter().all(|r| model.contains(r)), "log {i}: compaction keeps offsets and values");
            let round_of = |value: &Option<Bytes>| -> i64 {
                let text = std::str::from_utf8(value.as_ref().unwrap()).unwrap();
                text.rsplit(' ').next().unwrap().parse().unwrap()
            };
            for key in 0..3 {
                // The newest record of each key (written in a round with round % 3 == key) stays.
                let last = model.iter().rev().find(|(_, value)| round_of(value) % 3 == key).unwrap();
                assert!(kept.contains(last), "log {i}: the newest value of k{key}");
            }
            *model = kept;
        }
        assert_eq!(log.log_end_offset(), end);
    }
    check(&logs, &models, "after retention and compaction");

    for log in logs.drain(..) {
        log.close().unwrap();
    }
    assert_eq!(files.stats().open, 0, "closed logs hold no descriptor");
    let logs: Vec<Log> = (0..50).map(|i| Log::open(&path(i), config(i), context.clone()).unwrap()).collect();
    assert!(logs.iter().all(|l| l.open_report().clean_shutdown && l.open_report().segments_recovered == 0));
    check(&logs, &models, "after a clean reopen");
    let stats = files.stats();
    assert!(stats.evictions > 1_000 && stats.misses > 1_000 && stats.hits > 0, "{stats:?}");
    assert_eq!(stats.open_failures, 0);
}

#[test]
fn the_active_index_kept_in_memory_survives_crashes_clean_closes_and_flushes() {
    // Proves the active segment's in-memory indexes: no index file exists before a flush, a
    // crash then is recovered from the `.log`; a clean close writes files that the next open
    // trusts without scanning; a flush writes what it has, and a crash after more appends is
    // recovered again. Reads and lookups by timestamp agree with the appends in every case.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let index = dir.path().join("00000000000000000000.index");
    let time_index = dir.path().join("00000000000000000000.timeindex");
    let mut next_ts = 0;
    let mut append = |log: &mut Log, n: usize| {
        for _ in 0..n {
            log.append_as_leader(&value_batch(1, 200, T0 + next_ts), 0, AppendOrigin::Client).unwrap();
            next_ts += 10;
        }
    };
    let check = |log: &Log, records: i64, what: &str| {
        assert_eq!(log.log_end_offset(), records, "{what}");
        let offsets: Vec<i64> = read_all(log, 0).iter().map(|r| r.0).collect();
        assert_eq!(offsets, (0..records).collect::<Vec<_>>(), "{what}");
        for offset in [0, records / 2, records - 1] {
            // Offset n has timestamp T0 + 10n: the first record at or after T0 + 10n - 5 is n.
            let found = log.offset_for_timestamp(T0 + 10 * offset - 5).unwrap();
            assert_eq!(found, Some((offset, T0 + 10 * offset)), "{what}: timestamp lookup of {offset}");
        }
        assert_eq!(log.max_timestamp_offset().unwrap(), Some((records - 1, T0 + 10 * (records - 1))), "{what}");
    };

    let mut log = open(dir.path(), dense_index_config(), &clock);
    append(&mut log, 30);
    // The open (of a log without a checkpoint, as after a crash) flushed: empty index files.
    let empty = |path: &std::path::Path| fs::metadata(path).unwrap().len() == 0;
    assert!(empty(&index) && empty(&time_index), "the active indexes live in memory");
    check(&log, 30, "before the crash");
    drop(log); // a crash: nothing was flushed
    let mut log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.open_report().segments_recovered, 1);
    check(&log, 30, "recovered after a crash before any flush");

    append(&mut log, 10);
    log.close().unwrap();
    let (index_bytes, time_index_bytes) = (fs::read(&index).unwrap(), fs::read(&time_index).unwrap());
    assert_eq!(index_bytes.len() % 8, 0);
    assert!(index_bytes.len() >= 8 * 30, "an entry per batch but the first: {}", index_bytes.len());
    let mut log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.open_report().segments_recovered, 0, "a clean close's index files are trusted");
    check(&log, 40, "after a clean close");
    assert_eq!(fs::read(&index).unwrap(), index_bytes, "opening leaves the files alone");
    assert_eq!(fs::read(&time_index).unwrap(), time_index_bytes);

    append(&mut log, 10);
    log.flush().unwrap();
    let flushed = fs::read(&index).unwrap();
    assert!(flushed.len() > index_bytes.len() && flushed.starts_with(&index_bytes), "a flush writes the new entries");
    assert_eq!(fs::read(&time_index).unwrap().len() % 12, 0);
    append(&mut log, 10);
    assert_eq!(fs::read(&index).unwrap(), flushed, "appends do not write index files");
    check(&log, 60, "before the second crash");
    drop(log); // a crash after a flush and more appends
    let log = open(dir.path(), dense_index_config(), &clock);
    assert_eq!(log.open_report().segments_recovered, 1);
    check(&log, 60, "recovered after a flush and a crash");
    let rebuilt = fs::read(&index).unwrap();
    assert!(
        rebuilt.starts_with(&flushed) && rebuilt.len() > flushed.len(),
        "the rebuilt index extends the flushed one"
    );
}

// ---- idempotent producers (KIP-98): the producer state in the log ----

fn producer_batch(pid: i64, epoch: i16, seq: i32, n: usize, timestamp: i64) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None).producer(pid, epoch, seq);
    for i in 0..n {
        builder.push(timestamp, None, Some(format!("p{pid}-e{epoch}-s{}", seq as usize + i).as_bytes()), &[]);
    }
    builder.build().unwrap().into_bytes()
}

fn producer_error(result: Result<AppendInfo, LogError>) -> ProducerError {
    match result {
        Err(LogError::Producer(e)) => e,
        other => panic!("expected a producer error, got {other:?}"),
    }
}

#[test]
fn an_exact_retry_of_any_of_the_last_five_batches_gets_its_original_offsets_and_appends_nothing() {
    // Proves Kafka's de-duplication: a retried batch is answered with the offsets it was written
    // at and the log does not grow; gaps, stale epochs and a new epoch not at 0 are refused.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let mut written = Vec::new();
    for i in 0..6 {
        let info = log.append_as_leader(&producer_batch(7, 0, i * 2, 2, T0), 0, AppendOrigin::Client).unwrap();
        assert!(!info.duplicate);
        written.push((info.first_offset, info.last_offset));
    }
    let end = log.log_end_offset();
    for i in 1..6 {
        let retry = log.append_as_leader(&producer_batch(7, 0, i * 2, 2, T0), 0, AppendOrigin::Client).unwrap();
        assert!(retry.duplicate, "batch {i} is a retry");
        assert_eq!((retry.first_offset, retry.last_offset), written[i as usize]);
    }
    assert_eq!(log.log_end_offset(), end, "retries append nothing");
    // The oldest batch fell out of the five retained: a retry of it is out of order.
    let e = producer_error(log.append_as_leader(&producer_batch(7, 0, 0, 2, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::OutOfOrderSequence { sequence: 0, last: 11, .. }), "{e:?}");
    let e = producer_error(log.append_as_leader(&producer_batch(7, 0, 13, 1, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::OutOfOrderSequence { .. }), "a gap: {e:?}");
    let e = producer_error(log.append_as_leader(&producer_batch(7, 1, 5, 1, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::OutOfOrderSequence { .. }), "a new epoch starts at 0: {e:?}");
    log.append_as_leader(&producer_batch(7, 1, 0, 1, T0), 0, AppendOrigin::Client).unwrap();
    let e = producer_error(log.append_as_leader(&producer_batch(7, 0, 12, 1, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::InvalidProducerEpoch { epoch: 0, current: 1, .. }), "{e:?}");
    assert_eq!(log.log_end_offset(), end + 1, "refused batches append nothing");
}

#[test]
fn producer_state_survives_a_clean_restart_a_crash_rolls_and_truncation() {
    // Proves snapshots (`<offset>.snapshot` on roll and clean close) and replay after them:
    // after a clean close, after a crash (no close) and after a truncation the last batch of
    // each producer is still recognised as a retry and its sequence continues.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { segment_bytes: 300, ..small_config() };
    let mut log = open(dir.path(), config.clone(), &clock);
    let mut last = AppendInfo {
        first_offset: 0,
        last_offset: 0,
        max_timestamp: 0,
        offset_of_max_timestamp: 0,
        log_append_time: 0,
        batch_count: 0,
        record_count: 0,
        bytes: 0,
        duplicate: false,
    };
    for i in 0..20 {
        last = log.append_as_leader(&producer_batch(3, 0, i, 1, T0), 0, AppendOrigin::Client).unwrap();
    }
    assert!(log.segment_count() > 3, "rolled");
    let snapshots: Vec<i64> = log.producer_state().snapshot_offsets().collect();
    assert_eq!(&snapshots[..], &log.segment_base_offsets()[1..], "a snapshot at every rolled segment's base");
    log.close().unwrap();
    assert!(dir.path().join(format!("{:020}.snapshot", last.last_offset + 1)).exists(), "clean close snapshots");

    let mut log = open(dir.path(), config.clone(), &clock);
    let retry = log.append_as_leader(&producer_batch(3, 0, 19, 1, T0), 0, AppendOrigin::Client).unwrap();
    assert!(retry.duplicate && retry.first_offset == last.first_offset, "after a clean restart");
    log.append_as_leader(&producer_batch(3, 0, 20, 1, T0), 0, AppendOrigin::Client).unwrap();
    log.append_as_leader(&producer_batch(4, 2, 0, 3, T0), 0, AppendOrigin::Client).unwrap();
    drop(log); // a crash: no clean close, the state after the last snapshot is replayed

    let mut log = open(dir.path(), config.clone(), &clock);
    assert!(log.append_as_leader(&producer_batch(3, 0, 20, 1, T0), 0, AppendOrigin::Client).unwrap().duplicate);
    assert!(log.append_as_leader(&producer_batch(4, 2, 0, 3, T0), 0, AppendOrigin::Client).unwrap().duplicate);
    let e = producer_error(log.append_as_leader(&producer_batch(3, 0, 22, 1, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::OutOfOrderSequence { last: 20, .. }), "{e:?}");

    // Truncating producer 4's batch away (a follower after a leader change) forgets it, and
    // the snapshots above the cut are gone.
    let cut = log.log_end_offset() - 3;
    log.truncate_to(cut).unwrap();
    assert!(log.producer_state().entry(4).is_none());
    assert!(log.producer_state().snapshot_offsets().all(|o| o <= cut));
    assert!(!log.append_as_leader(&producer_batch(4, 2, 0, 3, T0), 0, AppendOrigin::Client).unwrap().duplicate);
}

#[test]
fn a_follower_builds_the_leaders_producer_state_so_it_deduplicates_after_it_takes_over() {
    // Proves the failover case: a batch the old leader wrote reaches the follower by
    // replication; when the follower leads and the client retries it, the retry is answered
    // with the original offsets.
    let clock = ManualClock::new(T0);
    let (leader_dir, follower_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = open(leader_dir.path(), LogConfig::default(), &clock);
    let mut follower = open(follower_dir.path(), LogConfig::default(), &clock);
    for seq in 0..3 {
        leader.append_as_leader(&producer_batch(9, 0, seq * 4, 4, T0), 0, AppendOrigin::Client).unwrap();
    }
    let replicated = leader.read(0, 1 << 20, i64::MAX).unwrap();
    follower.append_as_follower(&replicated).unwrap();
    let retry = follower.append_as_leader(&producer_batch(9, 0, 8, 4, T0), 1, AppendOrigin::Client).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (8, 11));
    let next = follower.append_as_leader(&producer_batch(9, 0, 12, 1, T0), 1, AppendOrigin::Client).unwrap();
    assert_eq!(next.first_offset, 12);
}

#[test]
fn producers_expire_after_the_expiration_time_and_their_snapshots_go_with_their_segments() {
    // Proves producer.id.expiration.ms (measured from the producer's last batch timestamp) and
    // that retention deletes the snapshots of the segments it deletes.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { segment_bytes: 300, ..small_config() };
    let mut log = open(dir.path(), config, &clock);
    for i in 0..20 {
        log.append_as_leader(&producer_batch(5, 0, i, 1, T0), 0, AppendOrigin::Client).unwrap();
    }
    assert_eq!(log.expire_producers(60_000), 0);
    clock.advance(60_000);
    assert_eq!(log.expire_producers(60_000), 1);
    assert!(log.producer_state().is_empty());
    // An expired producer is unknown: any sequence is accepted again (KIP-360).
    log.append_as_leader(&producer_batch(5, 0, 100, 1, T0 + 60_000), 0, AppendOrigin::Client).unwrap();
    let bases = log.segment_base_offsets();
    log.delete_records_before(bases[bases.len() - 1]).unwrap();
    let snapshots: Vec<i64> = log.producer_state().snapshot_offsets().collect();
    assert_eq!(snapshots, vec![*bases.last().unwrap()], "only the newest snapshot is left");
    let on_disk = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".snapshot"))
        .count();
    assert_eq!(on_disk, 1);
}

// ---- transactions in the log: last stable offset and the aborted-transaction index ----

fn txn_batch(pid: i64, seq: i32, n: usize) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None).producer(pid, 0, seq).transactional(true);
    for i in 0..n {
        builder.push(T0, None, Some(format!("t{pid}-{}", seq as usize + i).as_bytes()), &[]);
    }
    builder.build().unwrap().into_bytes()
}

fn marker(pid: i64, control: ControlType, coordinator_epoch: i32) -> Bytes {
    let (key, value) = EndTxnMarker { control, coordinator_epoch }.encode();
    let mut builder = BatchBuilder::new(Compression::None)
        .producer(pid, 0, crate::log::batch::NO_SEQUENCE)
        .transactional(true)
        .control(true);
    builder.push(T0, Some(&key), Some(&value), &[]);
    builder.build().unwrap().into_bytes()
}

#[test]
fn open_transactions_hold_the_last_stable_offset_and_aborts_are_indexed_across_restarts() {
    // Proves KIP-98 in the log: the LSO is the first offset of the oldest open transaction
    // (and of one whose marker the high watermark has not passed), commit and abort markers
    // close transactions, an abort gets a `.txnindex` entry with Kafka's last stable offset,
    // a read_committed fetch range finds the aborts overlapping it, a stale coordinator epoch is
    // refused, and the index is rebuilt after a crash and reloaded after a clean close.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    log.append_as_leader(&value_batch(2, 5, T0), 0, AppendOrigin::Client).unwrap(); // 0..1
    log.append_as_leader(&txn_batch(1, 0, 3), 0, AppendOrigin::Client).unwrap(); // 2..4
    log.append_as_leader(&txn_batch(2, 0, 2), 0, AppendOrigin::Client).unwrap(); // 5..6
    assert_eq!(log.last_stable_offset(7), 2);
    assert_eq!(log.last_stable_offset(1), 1, "never above the high watermark");
    // A non-transactional write of a producer inside a transaction is refused.
    let e = producer_error(log.append_as_leader(&producer_batch(1, 0, 3, 1, T0), 0, AppendOrigin::Client));
    assert!(matches!(e, ProducerError::InvalidTxnState { producer_id: 1 }), "{e:?}");
    let commit = log.append_as_leader(&marker(1, ControlType::Commit, 3), 0, AppendOrigin::Coordinator).unwrap();
    assert_eq!(commit.first_offset, 7);
    assert_eq!(log.last_stable_offset(7), 2, "the commit marker is not below the high watermark yet");
    assert_eq!(log.last_stable_offset(8), 5, "producer 2's transaction is still open");
    log.append_as_leader(&marker(2, ControlType::Abort, 3), 0, AppendOrigin::Coordinator).unwrap(); // 8
    assert_eq!(log.last_stable_offset(9), 9);
    let aborted = AbortedTxn { producer_id: 2, first_offset: 5, last_offset: 8, last_stable_offset: 9 };
    assert_eq!(log.aborted_transactions(0, 9), vec![aborted]);
    assert_eq!(log.aborted_transactions(9, 20), vec![]);
    assert_eq!(log.aborted_transactions(0, 5), vec![], "the abort starts at the range's end");
    let index = dir.path().join("00000000000000000000.txnindex");
    assert_eq!(std::fs::read(&index).unwrap(), aborted.encode().to_vec());
    // An older coordinator's marker is fenced.
    log.append_as_leader(&txn_batch(2, 2, 1), 0, AppendOrigin::Client).unwrap(); // 9
    let e = producer_error(log.append_as_leader(&marker(2, ControlType::Abort, 1), 0, AppendOrigin::Coordinator));
    assert!(matches!(e, ProducerError::CoordinatorFenced { coordinator_epoch: 1, current: 3, .. }), "{e:?}");
    assert_eq!(log.last_stable_offset(10), 9);

    drop(log); // crash: the state and the index are rebuilt from the log
    std::fs::remove_file(&index).unwrap();
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(log.last_stable_offset(10), 9, "producer 2's second transaction is open again");
    assert_eq!(log.aborted_transactions(0, 10), vec![aborted]);
    assert_eq!(std::fs::read(&index).unwrap(), aborted.encode().to_vec(), "the index file is rebuilt");
    log.append_as_leader(&marker(2, ControlType::Abort, 3), 0, AppendOrigin::Coordinator).unwrap(); // 10
    log.close().unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(log.aborted_transactions(0, 11).len(), 2);
    assert_eq!(log.last_stable_offset(11), 11);
}

fn keyed_txn_batch(pid: i64, seq: i32, key: &str, value: &str) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None).producer(pid, 0, seq).transactional(true);
    builder.push(T0, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
    builder.build().unwrap().into_bytes()
}

#[test]
fn compaction_never_lets_an_aborted_or_open_transaction_replace_a_committed_value() {
    // Proves Kafka's cleaner rules for transactions: an aborted transaction's value for a key
    // neither wins the key map nor survives (the committed value stays), and nothing at or
    // above an open transaction's first offset is cleaned (it may still abort).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, segment_bytes: 2048, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    log.append_as_leader(&batch(Compression::None, &[(Some("k"), Some("committed"))], T0), 0, AppendOrigin::Client)
        .unwrap(); // 0
    log.append_as_leader(&keyed_txn_batch(1, 0, "k", "aborted"), 0, AppendOrigin::Client).unwrap(); // 1
    log.append_as_leader(&marker(1, ControlType::Abort, 0), 0, AppendOrigin::Coordinator).unwrap(); // 2
    log.roll().unwrap();
    log.append_as_leader(&batch(Compression::None, &[(Some("x"), Some("pad"))], T0), 0, AppendOrigin::Client).unwrap(); // 3
    log.on_high_watermark(log.log_end_offset());
    log.compact().unwrap().expect("the first segment is cleanable");
    // (read_all also returns the marker's control record, at offset 2.)
    let all = read_all(&log, 0);
    let data: Vec<(i64, Option<Bytes>)> = all.into_iter().filter(|r| r.0 != 2).collect();
    assert_eq!(
        data,
        vec![(0, Some(Bytes::from_static(b"committed"))), (3, Some(Bytes::from_static(b"pad")))],
        "the aborted value is gone and the committed one kept"
    );
    // An open transaction: the segment holding it is not cleaned.
    log.append_as_leader(&keyed_txn_batch(2, 0, "k", "open"), 0, AppendOrigin::Client).unwrap(); // 4
    log.roll().unwrap();
    log.append_as_leader(&batch(Compression::None, &[(Some("y"), Some("pad"))], T0), 0, AppendOrigin::Client).unwrap();
    log.on_high_watermark(log.log_end_offset());
    let before = read_all(&log, 0);
    let _ = log.compact().unwrap();
    let after = read_all(&log, 0);
    assert!(after.iter().any(|r| r.0 == 0), "the committed value survives while a later transaction is open");
    assert_eq!(before.iter().filter(|r| r.0 >= 4).count(), after.iter().filter(|r| r.0 >= 4).count());
}

#[test]
fn a_clean_shutdown_whose_snapshots_are_all_corrupt_still_replays_open_transactions() {
    // Proves the replay after a clean shutdown is skipped only when the log had no producer
    // snapshot at all: with every snapshot corrupt, the open transaction at offset 1 is found
    // again by the replay and holds the last stable offset (it was forgotten: LSO = end).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    log.append_as_leader(&batch(Compression::None, &[(Some("a"), Some("plain"))], T0), 0, AppendOrigin::Client)
        .unwrap(); // 0
    log.append_as_leader(&keyed_txn_batch(7, 0, "k", "open"), 0, AppendOrigin::Client).unwrap(); // 1
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 1);
    log.close().unwrap();
    let mut corrupted = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::write(&path, b"\x00\x01garbage").unwrap();
            corrupted += 1;
        }
    }
    assert!(corrupted > 0, "a clean close writes a producer snapshot");
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert_eq!(log.last_stable_offset(log.log_end_offset()), 1, "the open transaction is still open");
}

#[test]
fn the_last_stable_offset_is_never_below_the_log_start() {
    // Proves an open transaction whose start was deleted (DeleteRecords past it) holds the
    // last stable offset at the log start, not below it (Kafka's maybeIncrementFirstUnstableOffset).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    log.append_as_leader(&keyed_txn_batch(7, 0, "k", "open"), 0, AppendOrigin::Client).unwrap(); // 0
    log.append_as_leader(&batch(Compression::None, &[(Some("a"), Some("plain"))], T0), 0, AppendOrigin::Client)
        .unwrap(); // 1
    log.append_as_leader(&batch(Compression::None, &[(Some("b"), Some("plain"))], T0), 0, AppendOrigin::Client)
        .unwrap(); // 2
    log.delete_records_before(2).unwrap();
    assert_eq!(log.log_start_offset(), 2);
    assert_eq!(log.last_stable_offset(3), 2);
}

#[test]
fn compaction_keeps_a_producers_emptied_last_batch_as_an_empty_header() {
    // Proves Kafka's RETAIN_EMPTY: producer 9's only batch (key k, offset 0) is superseded by a
    // later plain write of k; the cleaning removes its record but keeps the batch as an empty
    // header (offset 0, producer 9, sequence 0, its max timestamp), so a replica that builds
    // its producer state from the compacted log still knows producer 9 and answers its retry
    // as a duplicate. A superseded batch that is not a producer's last goes entirely.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, min_compaction_lag_ms: 0, ..LogConfig::default() };
    let mut log = open(dir.path(), config.clone(), &clock);
    let idempotent = |seq: i32, value: &str| {
        let mut builder = BatchBuilder::new(Compression::None).producer(9, 0, seq);
        builder.push(T0, Some(b"k"), Some(value.as_bytes()), &[]);
        builder.build().unwrap().into_bytes()
    };
    let plain = |key: &str| batch(Compression::None, &[(Some(key), Some("plain"))], T0);
    log.append_as_leader(&idempotent(0, "first"), 0, AppendOrigin::Client).unwrap(); // 0
    log.append_as_leader(&plain("j"), 0, AppendOrigin::Client).unwrap(); // 1
    log.append_as_leader(&idempotent(1, "second"), 0, AppendOrigin::Client).unwrap(); // 2
    log.append_as_leader(&plain("k"), 0, AppendOrigin::Client).unwrap(); // 3: supersedes 0 and 2
    log.roll().unwrap();
    log.append_as_leader(&plain("pad"), 0, AppendOrigin::Client).unwrap(); // 4
    log.compact().unwrap().expect("cleanable");
    let fetched = log.read(0, 1 << 20, i64::MAX).unwrap();
    let headers: Vec<_> = BatchIter::new(fetched).map(|b| *b.unwrap().header()).collect();
    let shape: Vec<(i64, i32, i64)> = headers.iter().map(|h| (h.base_offset, h.record_count, h.producer_id)).collect();
    assert_eq!(shape, vec![(1, 1, -1), (2, 0, 9), (3, 1, -1)], "the cleaned segment: 0 gone, 2 kept empty");
    assert_eq!((headers[1].base_sequence, headers[1].max_timestamp), (1, T0));

    let replica_dir = tempfile::tempdir().unwrap();
    let mut replica = open(replica_dir.path(), config, &clock);
    replica.truncate_fully_and_start_at(1).unwrap();
    replica.append_as_follower(&log.read(1, 1 << 20, i64::MAX).unwrap()).unwrap();
    assert_eq!(replica.producer_state().entry(9).map(|e| e.last_seq()), Some(1), "the replica knows producer 9");
    assert!(replica.append_as_leader(&idempotent(1, "second"), 0, AppendOrigin::Client).unwrap().duplicate);
}

#[test]
fn compaction_cleans_nothing_above_the_high_watermark() {
    // Proves the cleaner stops at the high watermark, as Kafka's stops at the last stable
    // offset: key k at 0 (replicated) and again at 1 (a closed segment, not replicated yet). A
    // leader change may truncate offset 1 away, so cleaning with the high watermark at 1 keeps
    // k@0; once the high watermark passes 1, k@0 goes.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, min_compaction_lag_ms: 0, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    let append = |log: &mut Log, key: &str, value: &str| {
        log.append_as_leader(&batch(Compression::None, &[(Some(key), Some(value))], T0), 0, AppendOrigin::Client)
            .unwrap();
        log.roll().unwrap();
    };
    append(&mut log, "k", "old"); // 0
    append(&mut log, "k", "new"); // 1
    append(&mut log, "pad", "pad"); // 2, then the active segment
    let _ = log.compact_below(1).unwrap();
    let offsets: Vec<i64> = read_all(&log, 0).into_iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![0, 1, 2], "nothing above the high watermark replaced k@0");
    log.compact_below(3).unwrap().expect("all replicated: cleanable");
    let offsets: Vec<i64> = read_all(&log, 0).into_iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![1, 2]);
}

#[test]
fn a_tombstone_lives_delete_retention_ms_after_the_cleaning_that_first_kept_it() {
    // Proves KIP-534's delete horizon: a tombstone whose CreateTime is a day old (a backfill)
    // survives the first cleaning, which rewrites its batch with a horizon of now +
    // delete.retention.ms (attribute bit 6, base timestamp = the horizon; the records'
    // timestamps read back unchanged), also across a reopen; before the horizon nothing is
    // cleaned (nothing is dirty), and once it passes the log is cleaned again (the horizon is
    // in the checkpoint) and the tombstone goes. Under the old rule (segment timestamps) the
    // first cleaning dropped it.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 1_000,
        min_compaction_lag_ms: 0,
        ..LogConfig::default()
    };
    let day_old = T0 - 86_400_000;
    let mut log = open(dir.path(), config.clone(), &clock);
    let append = |log: &mut Log, key: &str, value: Option<&str>| {
        log.append_as_leader(&batch(Compression::None, &[(Some(key), value)], day_old), 0, AppendOrigin::Client)
            .unwrap();
    };
    append(&mut log, "k", Some("v"));
    append(&mut log, "k", None); // 1: the tombstone
    append(&mut log, "other", Some("x"));
    log.roll().unwrap();
    append(&mut log, "pad", Some("pad"));
    let tombstone_batch = |log: &Log| {
        let fetched = log.read(0, 1 << 20, i64::MAX).unwrap();
        BatchIter::new(fetched).map(|b| b.unwrap()).find(|b| b.header().base_offset == 1)
    };

    log.compact().unwrap().expect("cleanable");
    let kept = tombstone_batch(&log).expect("the tombstone survives its first cleaning");
    assert!(kept.header().attributes.has_delete_horizon());
    assert_eq!(kept.header().base_timestamp, T0 + 1_000, "the horizon: now + delete.retention.ms");
    let records = kept.records().unwrap();
    assert_eq!((records[0].value.is_none(), records[0].timestamp), (true, day_old), "its timestamp unchanged");
    log.close().unwrap();
    let mut log = open(dir.path(), config, &clock);
    clock.advance(999);
    assert!(log.compact().unwrap().is_none(), "nothing dirty and the horizon ahead: no cleaning");
    assert!(tombstone_batch(&log).is_some(), "before the horizon it stays");
    assert_eq!(tombstone_batch(&log).unwrap().header().base_timestamp, T0 + 1_000, "the horizon is kept");
    clock.advance(1);
    log.compact().unwrap().expect("the horizon passed (known across the reopen): a cleaning");
    assert!(tombstone_batch(&log).is_none(), "past the horizon it goes");
    let left: Vec<i64> = read_all(&log, 0).into_iter().map(|r| r.0).collect();
    assert_eq!(left, vec![2, 3]);
}

#[test]
fn a_compacted_log_is_cleaned_when_its_dirty_ratio_or_max_compaction_lag_says_so() {
    // Proves Kafka's cleaner scheduling: the first look cleans (everything is dirty), the next
    // finds nothing to do (it used to rewrite every closed segment at every look); a little new
    // data (dirty ratio under min.cleanable.dirty.ratio) waits, also across a reopen (the
    // cleaner checkpoint is kept), until the ratio is reached, or until its first batch is
    // older than max.compaction.lag.ms.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, segment_bytes: 4096, ..LogConfig::default() };
    let mut log = open(dir.path(), config.clone(), &clock);
    let fill = |log: &mut Log, keys: std::ops::Range<u32>, at: i64| {
        for k in keys {
            let key = format!("key-{k:04}");
            log.append_as_leader(&batch(Compression::None, &[(Some(&key), Some("v"))], at), 0, AppendOrigin::Client)
                .unwrap();
        }
        log.roll().unwrap();
    };
    fill(&mut log, 0..200, T0);
    let first = log.compact().unwrap().expect("everything is dirty");
    assert_eq!((first.records_read, first.records_kept), (200, 200));
    assert!(log.compact().unwrap().is_none(), "nothing written since: nothing to clean");

    fill(&mut log, 0..20, T0); // about a tenth of the log
    assert!(log.compact().unwrap().is_none(), "dirty ratio ~0.1 < 0.5");
    log.close().unwrap();
    let mut log = open(dir.path(), config.clone(), &clock);
    assert!(log.compact().unwrap().is_none(), "the cleaner checkpoint survives a reopen");

    let lagging = LogConfig { max_compaction_lag_ms: 60_000, ..config.clone() };
    log.set_config(lagging.clone());
    assert!(log.compact().unwrap().is_none(), "the dirty batches are younger than max.compaction.lag.ms");
    clock.advance(60_000);
    let lagged = log.compact().unwrap().expect("the oldest dirty batch is past max.compaction.lag.ms");
    assert_eq!(lagged.records_kept, 200, "the 20 rewritten keys' old values are gone");

    log.set_config(config);
    fill(&mut log, 0..100, T0 + 60_000); // as much dirty as a third of the log: not yet
    assert!(log.compact().unwrap().is_none());
    fill(&mut log, 100..200, T0 + 60_000); // now half of it
    let ratio = log.compact().unwrap().expect("dirty ratio reached 0.5");
    assert_eq!((ratio.records_read, ratio.records_kept), (400, 200));
}

#[test]
fn with_delete_retention_0_a_tombstone_goes_at_the_next_look_with_nothing_dirty() {
    // Proves the delete horizon of a tombstone kept with delete.retention.ms = 0 (the horizon
    // is the cleaning's own time) makes the log worth cleaning at the next look: it used to be
    // left out, so the tombstone stayed until something else made the log dirty.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, delete_retention_ms: 0, ..LogConfig::default() };
    let mut log = open(dir.path(), config, &clock);
    for (key, value) in [("k", Some("v")), ("k", None), ("other", Some("x"))] {
        log.append_as_leader(&batch(Compression::None, &[(Some(key), value)], T0), 0, AppendOrigin::Client).unwrap();
    }
    log.roll().unwrap();
    log.compact().unwrap().expect("everything is dirty");
    assert_eq!(
        read_all(&log, 0).iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2],
        "the tombstone's first cleaning keeps it"
    );
    clock.advance(1);
    log.compact().unwrap().expect("its horizon passed: a cleaning with nothing dirty");
    assert_eq!(read_all(&log, 0).iter().map(|r| r.0).collect::<Vec<_>>(), [2]);
    assert!(log.compact().unwrap().is_none(), "then nothing is left to do");
}

#[test]
fn compaction_removes_markers_of_emptied_transactions_once_delete_retention_passed() {
    // Proves the cleaner's marker rule: the commit marker of a transaction whose only value was
    // superseded, and an abort marker (its data always goes), go once their segment is older
    // than delete.retention.ms (not before), the abort's `.txnindex` entry with it, also after a
    // reopen; the commit marker of a transaction that kept a value stays.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 1000,
        min_compaction_lag_ms: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config, &clock);
    let append = |log: &mut Log, bytes: &Bytes, origin| log.append_as_leader(bytes, 0, origin).unwrap();
    append(&mut log, &keyed_txn_batch(1, 0, "k", "superseded"), AppendOrigin::Client); // 0
    append(&mut log, &marker(1, ControlType::Commit, 0), AppendOrigin::Coordinator); // 1: goes
    append(&mut log, &keyed_txn_batch(2, 0, "kept", "stays"), AppendOrigin::Client); // 2
    append(&mut log, &marker(2, ControlType::Commit, 0), AppendOrigin::Coordinator); // 3: stays
    append(&mut log, &keyed_txn_batch(3, 0, "k", "aborted"), AppendOrigin::Client); // 4
    append(&mut log, &marker(3, ControlType::Abort, 0), AppendOrigin::Coordinator); // 5: goes
    append(&mut log, &batch(Compression::None, &[(Some("k"), Some("newest"))], T0), AppendOrigin::Client); // 6
                                                                                                           // Producers 1 and 3 write on, so their emptied batches above are not their last (a
                                                                                                           // producer's last batch is kept, and with it its transaction's marker).
    append(&mut log, &keyed_txn_batch(1, 1, "k1", "later"), AppendOrigin::Client); // 7
    append(&mut log, &marker(1, ControlType::Commit, 0), AppendOrigin::Coordinator); // 8
    append(&mut log, &keyed_txn_batch(3, 1, "k3", "later"), AppendOrigin::Client); // 9
    append(&mut log, &marker(3, ControlType::Commit, 0), AppendOrigin::Coordinator); // 10
    log.roll().unwrap();
    append(&mut log, &batch(Compression::None, &[(Some("pad"), Some("pad"))], T0), AppendOrigin::Client); // 11
    log.on_high_watermark(log.log_end_offset());
    let offsets = |log: &Log| read_all(log, 0).into_iter().map(|r| r.0).collect::<Vec<i64>>();

    log.compact().unwrap().expect("cleanable");
    assert_eq!(offsets(&log), vec![1, 2, 3, 5, 6, 7, 8, 9, 10, 11], "within delete.retention.ms every marker stays");
    assert_eq!(log.aborted_transactions(0, 12).len(), 1);
    clock.advance(2000);
    log.compact().unwrap().expect("cleanable");
    assert_eq!(offsets(&log), vec![2, 3, 6, 7, 8, 9, 10, 11], "the emptied transactions' markers are gone");
    assert!(log.aborted_transactions(0, 12).is_empty(), "the abort's index entry went with its marker");
    log.close().unwrap();
    let log = open(dir.path(), LogConfig::default(), &clock);
    assert!(log.aborted_transactions(0, 12).is_empty(), "and stays gone after a reopen");
    assert_eq!(log.last_stable_offset(12), 12, "nothing is open after the markers are gone");
}

#[test]
fn a_segment_emptied_by_compaction_keeps_its_age_for_time_retention() {
    // Proves a compact,delete segment the cleaning emptied (no timestamp left: retention dates
    // it by its file's mtime) keeps its source's age: it took the cleaning's, so a topic
    // cleaned more often than retention.ms never expired anything behind it (found by review).
    const DAY: i64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let clock = ManualClock::new(now);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy { delete: true, compact: true },
        retention_ms: 7 * DAY,
        min_compaction_lag_ms: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config, &clock);
    let old = now - 10 * DAY;
    log.append_as_leader(&batch(Compression::None, &[(Some("a"), Some("old"))], old), 0, AppendOrigin::Client).unwrap();
    log.roll().unwrap();
    log.append_as_leader(&batch(Compression::None, &[(Some("a"), Some("new"))], old), 0, AppendOrigin::Client).unwrap();
    log.roll().unwrap();
    log.append_as_leader(&batch(Compression::None, &[(Some("pad"), Some("pad"))], now), 0, AppendOrigin::Client)
        .unwrap();
    let end = log.log_end_offset();
    log.on_high_watermark(end);
    // The first segment was written ten days ago.
    let ten_days_ago = std::time::UNIX_EPOCH + std::time::Duration::from_millis(old as u64);
    let first = std::fs::File::options().write(true).open(dir.path().join("00000000000000000000.log")).unwrap();
    first.set_modified(ten_days_ago).unwrap();
    log.compact_below(end).unwrap().expect("cleanable");
    assert_eq!(read_all(&log, 0).first().map(|r| r.0), Some(1), "the first segment was emptied");
    let outcome = log.enforce_retention(end).unwrap();
    assert_eq!(outcome.segments_deleted, 2, "both ten-day-old segments expire");
}

#[test]
fn a_compaction_that_fails_while_swapping_in_takes_the_log_offline() {
    // Proves a failure after the cleaned files started replacing the old ones (here: opening a
    // cleaned segment, EMFILE) takes the log offline: reads and appends are refused instead of
    // using sizes and indexes of replaced files (found by review); a reopen recovers from disk.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig { cleanup_policy: CleanupPolicy::COMPACT, min_compaction_lag_ms: 0, ..LogConfig::default() };
    let mut log = open(dir.path(), config.clone(), &clock);
    for value in ["old", "new"] {
        log.append_as_leader(&batch(Compression::None, &[(Some("k"), Some(value))], T0), 0, AppendOrigin::Client)
            .unwrap();
    }
    log.roll().unwrap();
    log.append_as_leader(&batch(Compression::None, &[(Some("pad"), Some("pad"))], T0), 0, AppendOrigin::Client)
        .unwrap();
    let end = log.log_end_offset();
    log.on_high_watermark(end);
    let result = log.compaction_job(end).expect("cleanable").run(usize::MAX).unwrap();
    log.open_files().fail_next_opens(1);
    assert!(log.install_compaction(result).is_err());
    assert!(matches!(log.read(0, 1 << 20, i64::MAX), Err(LogError::Offline { .. })));
    let append = log.append_as_leader(&value_batch(1, 10, T0), 0, AppendOrigin::Client);
    assert!(append.is_err(), "appends refused too");
    drop(log);
    let log = open(dir.path(), config, &clock);
    assert_eq!(read_all(&log, 0).into_iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2], "the cleaned log");
}

#[test]
fn a_producers_last_emptied_transactional_batch_keeps_its_marker() {
    // Proves the cleaner keeps the marker of a transaction whose batch it keeps emptied (a
    // producer's last batch stays for its sequence): dropping the marker past the delete
    // horizon left a replica rebuilding from the log with a transaction nothing ends, its last
    // stable offset stuck at that batch for good (found by review).
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 0,
        min_compaction_lag_ms: 0,
        ..LogConfig::default()
    };
    let mut log = open(dir.path(), config.clone(), &clock);
    let append = |log: &mut Log, bytes: &Bytes, origin| log.append_as_leader(bytes, 0, origin).unwrap();
    append(&mut log, &keyed_txn_batch(1, 0, "k", "aborted"), AppendOrigin::Client); // 0
    append(&mut log, &marker(1, ControlType::Abort, 0), AppendOrigin::Coordinator); // 1
    append(&mut log, &keyed_txn_batch(2, 0, "k", "superseded"), AppendOrigin::Client); // 2
    append(&mut log, &marker(2, ControlType::Commit, 0), AppendOrigin::Coordinator); // 3
    append(&mut log, &batch(Compression::None, &[(Some("k"), Some("newest"))], T0), AppendOrigin::Client); // 4
    log.roll().unwrap();
    append(&mut log, &batch(Compression::None, &[(Some("pad"), Some("pad"))], T0), AppendOrigin::Client); // 5
    log.on_high_watermark(log.log_end_offset());
    for _ in 0..3 {
        clock.advance(1000);
        log.compact().unwrap();
    }
    let end = log.log_end_offset();
    assert_eq!(log.last_stable_offset(end), end);

    let replica_dir = tempfile::tempdir().unwrap();
    let mut replica = open(replica_dir.path(), config, &clock);
    let mut next = 0;
    while next < end {
        let bytes = log.read(next, 1 << 20, i64::MAX).unwrap();
        assert!(!bytes.is_empty(), "the leader serves from {next}");
        next = replica.append_as_follower(&bytes).unwrap().last_offset + 1;
    }
    assert_eq!(replica.last_stable_offset(end), end, "the replica has no transaction left open");
}

#[test]
fn a_transaction_opens_only_with_a_verification_still_in_place() {
    // Proves KIP-890 part 1 in the log: with verification required, a transactional batch that
    // opens a transaction needs the guard the partition handed out; a marker between the
    // verification and the append voids it (the late batch of an ended transaction is refused,
    // nothing written, no transaction left open); batches of a transaction already open need
    // none; another producer's guard does not serve; without verification nothing changes.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let mut log = open(dir.path(), LogConfig::default(), &clock);
    let verified = |g| TxnVerification::Required(g);
    // No guard at all: refused.
    let e = producer_error(log.append_as_leader_verified(&txn_batch(1, 0, 2), 0, AppendOrigin::Client, verified(None)));
    assert!(matches!(e, ProducerError::UnverifiedTransaction { producer_id: 1 }), "{e:?}");
    assert_eq!(log.log_end_offset(), 0);
    // A guard in place: the transaction opens; its next batch needs none.
    let guard = log.start_txn_verification(1, 0).unwrap();
    assert!(guard.is_some());
    log.append_as_leader_verified(&txn_batch(1, 0, 2), 0, AppendOrigin::Client, verified(guard)).unwrap();
    assert_eq!(log.start_txn_verification(1, 0).unwrap(), None, "a transaction of this epoch is open");
    log.append_as_leader_verified(&txn_batch(1, 2, 2), 0, AppendOrigin::Client, verified(None)).unwrap();
    log.append_as_leader(&marker(1, ControlType::Abort, 0), 0, AppendOrigin::Coordinator).unwrap(); // 4
                                                                                                    // Verified, then the transaction ends before the batch arrives: the guard is void.
    let guard = log.start_txn_verification(1, 0).unwrap();
    assert!(guard.is_some());
    log.append_as_leader(&marker(1, ControlType::Abort, 0), 0, AppendOrigin::Coordinator).unwrap(); // 5
    let end = log.log_end_offset();
    let e =
        producer_error(log.append_as_leader_verified(&txn_batch(1, 4, 1), 0, AppendOrigin::Client, verified(guard)));
    assert!(matches!(e, ProducerError::UnverifiedTransaction { .. }), "{e:?}");
    assert_eq!(log.log_end_offset(), end, "nothing of the late batch was written");
    assert_eq!(log.last_stable_offset(end), end, "no transaction was left open");
    // Another producer's guard does not serve.
    let other = log.start_txn_verification(2, 0).unwrap();
    let e =
        producer_error(log.append_as_leader_verified(&txn_batch(1, 4, 1), 0, AppendOrigin::Client, verified(other)));
    assert!(matches!(e, ProducerError::UnverifiedTransaction { .. }), "{e:?}");
    // Without verification the same batch opens a transaction as before.
    log.append_as_leader(&txn_batch(1, 4, 1), 0, AppendOrigin::Client).unwrap();
    assert_eq!(log.last_stable_offset(log.log_end_offset()), end);
}
