//! Storage engine benchmarks against the physical limit of the same file system.
//!
//! `cargo bench -p runnel-broker --bench log` runs, in one process and on one file system
//! (a temp dir under `$RUNNEL_BENCH_DIR`, default the system temp dir):
//! - `append/{log,raw_write}/<size>`: appending 1 KiB, 16 KiB and 1 MiB batches with
//!   `Log::append_as_leader` vs plain `write()` of the same bytes to a file;
//! - `read/{log,raw_pread}`: reading the whole log sequentially with `Log::read` (1 MiB per
//!   call) vs `pread()` of the same bytes in 1 MiB chunks;
//! - `lookup/1000_segments`: a read of one small batch at a random offset of a log with 1,000
//!   segments (segment floor lookup + sparse index + header scan + pread).
//!
//! Goal (issue "Storage engine"): append and read at >= 80% of the raw figures.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use runnel::log::records::BatchBuilder;
use runnel::log::{AppendOrigin, Compression, Log, LogConfig, LogContext, SystemClock};

/// Bytes written per measured sample: large enough to leave caches, small enough for the disk.
const SAMPLE_BYTES: usize = 64 << 20;

fn bench_dir() -> PathBuf {
    std::env::var_os("RUNNEL_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir)
}

/// A batch of `size` bytes of 100-byte records, as a producer would send it.
fn batch_of(size: usize) -> Bytes {
    let value = vec![b'x'; 100];
    let mut builder = BatchBuilder::new(Compression::None);
    let per_record = 100 + 8;
    for _ in 0..(size.saturating_sub(61) / per_record).max(1) {
        builder.push(1_700_000_000_000, None, Some(&value), &[]);
    }
    builder.build().expect("valid batch").into_bytes()
}

fn open_log(dir: &std::path::Path, config: LogConfig) -> Log {
    Log::open(dir, config, LogContext::standalone(Arc::new(SystemClock))).expect("open log")
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    for size in [1 << 10, 16 << 10, 1 << 20] {
        let batch = batch_of(size);
        let per_sample = (SAMPLE_BYTES / batch.len()).max(1) as u64;
        group.throughput(Throughput::Bytes(batch.len() as u64 * per_sample));
        group.bench_with_input(BenchmarkId::new("log", size), &batch, |b, batch| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
                    let mut log =
                        open_log(dir.path(), LogConfig { max_message_bytes: 2 << 20, ..LogConfig::default() });
                    // The first append after open durably marks the log dirty (two fsyncs): a
                    // per-open cost, kept out of the steady-state figure.
                    log.append_as_leader(batch, 0, AppendOrigin::Client).expect("append");
                    let start = Instant::now();
                    for _ in 0..per_sample {
                        black_box(log.append_as_leader(batch, 0, AppendOrigin::Client).expect("append"));
                    }
                    total += start.elapsed();
                }
                total
            })
        });
        group.bench_with_input(BenchmarkId::new("raw_write", size), &batch, |b, batch| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
                    let mut file = OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(dir.path().join("raw.log"))
                        .expect("open raw file");
                    let start = Instant::now();
                    for _ in 0..per_sample {
                        file.write_all(batch).expect("write");
                    }
                    total += start.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
    let mut log = open_log(dir.path(), LogConfig::default());
    let batch = batch_of(16 << 10);
    for _ in 0..(SAMPLE_BYTES * 4 / batch.len()) {
        log.append_as_leader(&batch, 0, AppendOrigin::Client).expect("append");
    }
    let total_bytes = log.size_bytes();
    let end = log.log_end_offset();
    let raw = File::open(dir.path().join("00000000000000000000.log")).expect("segment file");
    let mut group = c.benchmark_group("read");
    group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Bytes(total_bytes));
    group.bench_function("log", |b| {
        b.iter(|| {
            let mut next = 0;
            let mut bytes = 0;
            while next < end {
                let chunk = log.read(next, 1 << 20, end).expect("read");
                let (last_base, last_size) = last_batch(&chunk);
                next = last_base + last_delta(&chunk[chunk.len() - last_size..]) + 1;
                bytes += chunk.len();
            }
            assert_eq!(bytes as u64, total_bytes);
        })
    });
    group.bench_function("raw_pread", |b| {
        let mut buf = vec![0u8; 1 << 20];
        b.iter(|| {
            let mut position = 0u64;
            while position < total_bytes {
                let n = raw.read_at(&mut buf, position).expect("pread");
                black_box(&buf[..n]);
                position += n as u64;
            }
        })
    });
    group.finish();
}

/// Base offset and size of the last batch in a chunk of whole batches.
fn last_batch(chunk: &[u8]) -> (i64, usize) {
    let mut at = 0;
    loop {
        let (base, size) = runnel::log::BatchHeader::peek_size(&chunk[at..]).expect("whole batches");
        if at + size == chunk.len() {
            return (base, size);
        }
        at += size;
    }
}

fn last_delta(batch: &[u8]) -> i64 {
    runnel::log::BatchHeader::read(batch).expect("header").last_offset_delta as i64
}

fn lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
    // 1,000 segments of 64 KiB, 1 KiB batches, Kafka's default index interval.
    let config = LogConfig { segment_bytes: 64 << 10, ..LogConfig::default() };
    let mut log = open_log(dir.path(), config);
    let batch = batch_of(1 << 10);
    while log.segment_count() < 1000 {
        log.append_as_leader(&batch, 0, AppendOrigin::Client).expect("append");
    }
    let end = log.log_end_offset();
    let mut group = c.benchmark_group("lookup");
    group.sample_size(50).measurement_time(Duration::from_secs(3));
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    group.bench_function("1000_segments", |b| {
        b.iter(|| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let offset = (state % end as u64) as i64;
            black_box(log.read(offset, 1, end).expect("read"))
        })
    });
    group.finish();
}

criterion_group!(benches, append, read, lookup);
criterion_main!(benches);
