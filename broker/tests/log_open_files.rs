//! No log pins a file descriptor or a memory map: 2,000 logs open at once in this process, each
//! appended to, rolled and read, hold descriptors only through their node's cache of open
//! segment files, so the process's descriptor count stays within the cache's capacity plus a
//! small constant, and its map count does not grow with the logs.
//!
//! A test binary of its own: it counts `/proc/self/fd`, which other tests running on other
//! threads of the same process would disturb.

use runnel::log::batch::BatchIter;
use runnel::log::records::BatchBuilder;
use runnel::log::{AppendOrigin, Compression, Log, LogConfig, LogContext, ManualClock, OpenFiles};

const T0: i64 = 1_700_000_000_000;
const LOGS: usize = 2_000;
const CAPACITY: usize = 64;
/// Descriptors a log operation may hold beyond the cache for a moment: none between calls
/// (checkpoint and index writes close theirs); slack for the test harness and the allocator.
const SLACK: usize = 16;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps").lines().count()
}

fn record(i: usize, n: i64) -> bytes::Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    builder.push(T0 + n, None, Some(format!("log {i} record {n}").as_bytes()), &[]);
    builder.build().expect("batch").into_bytes()
}

/// Every value, following reads across segments (and so through every segment's index).
fn values(log: &Log) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20, i64::MAX).expect("read");
        for batch in BatchIter::new(bytes) {
            let batch = batch.expect("batch");
            for record in batch.records().expect("records") {
                out.push(String::from_utf8(record.value.expect("value").to_vec()).expect("utf-8"));
            }
            next = batch.last_offset() + 1;
        }
    }
    out
}

#[test]
fn two_thousand_logs_hold_descriptors_only_through_the_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = OpenFiles::new(CAPACITY);
    let context = LogContext::new(ManualClock::new(T0), files.clone());
    let config = LogConfig { index_interval_bytes: 0, ..LogConfig::default() };
    let (fds_before, maps_before) = (open_fds(), maps());
    let path = |i: usize| dir.path().join(format!("topic-{i}"));
    let mut logs: Vec<Log> =
        (0..LOGS).map(|i| Log::open(&path(i), config.clone(), context.clone()).expect("open")).collect();
    for (i, log) in logs.iter_mut().enumerate() {
        log.append_as_leader(&record(i, 0), 0, AppendOrigin::Client).expect("append");
        log.roll().expect("roll");
        log.append_as_leader(&record(i, 1), 0, AppendOrigin::Client).expect("append");
        log.append_as_leader(&record(i, 2), 0, AppendOrigin::Client).expect("append");
    }
    for (i, log) in logs.iter().enumerate() {
        let expected: Vec<String> = (0..3).map(|n| format!("log {i} record {n}")).collect();
        assert_eq!(values(log), expected);
        assert_eq!(log.segment_count(), 2);
    }
    let (fds, map_count) = (open_fds(), maps());
    assert!(fds <= fds_before + CAPACITY + SLACK, "{fds} descriptors with {LOGS} logs (before: {fds_before})");
    // Every active segment has an offset index entry (its second batch), held in memory: two
    // maps per log would be 4,000 more. (The closed segments' offset indexes are empty: one batch.)
    assert!(map_count < maps_before + 100, "{map_count} maps with {LOGS} logs (before: {maps_before})");
    let stats = files.stats();
    assert_eq!((stats.open, stats.capacity, stats.open_failures), (CAPACITY, CAPACITY, 0), "{stats:?}");

    for log in logs.drain(..) {
        log.close().expect("close");
    }
    assert!(open_fds() <= fds_before + SLACK, "closed logs hold no descriptor");
    let logs: Vec<Log> =
        (0..LOGS).map(|i| Log::open(&path(i), config.clone(), context.clone()).expect("reopen")).collect();
    let (fds, map_count) = (open_fds(), maps());
    assert!(fds <= fds_before + CAPACITY + SLACK, "{fds} descriptors after reopening {LOGS} logs");
    assert!(map_count < maps_before + 100, "opening maps no index: {map_count} maps (before: {maps_before})");
    for (i, log) in logs.iter().enumerate() {
        assert!(log.open_report().clean_shutdown);
        assert_eq!(values(log).len(), 3, "log {i}");
    }
}
