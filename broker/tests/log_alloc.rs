//! Proves the hot path allocates per batch, never per record: appending and reading a batch of
//! 1,000 records allocates no more than a batch of 1 record (a compressed batch's append a few
//! more: it is decompressed once to be validated, into a buffer that grows by doubling).
//!
//! A counting global allocator sees every allocation of this test binary, so this file holds a
//! single test (tests in one binary run on parallel threads and would count each other).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use runnel::log::records::BatchBuilder;
use runnel::log::{AppendOrigin, Compression, Log, LogConfig, LogContext, ManualClock};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

fn batch(records: usize, codec: Compression) -> bytes::Bytes {
    let mut builder = BatchBuilder::new(codec);
    for i in 0..records {
        builder.push(1_700_000_000_000 + i as i64, Some(b"key"), Some(&[7u8; 50]), &[("h", Some(b"v"))]);
    }
    builder.build().unwrap().into_bytes()
}

#[test]
fn append_and_read_allocate_per_batch_not_per_record() {
    // Proves zero per-record allocation on append and read, for plain and compressed batches.
    let dir = tempfile::tempdir().unwrap();
    let mut log =
        Log::open(dir.path(), LogConfig::default(), LogContext::standalone(ManualClock::new(1_700_000_000_000)))
            .unwrap();
    // Warm up: the first append writes the checkpoint and may grow internal buffers.
    log.append_as_leader(&batch(1, Compression::None), 0, AppendOrigin::Client).unwrap();
    for codec in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let small = batch(1, codec);
        let large = batch(1000, codec);
        // Warm-up at full size: the per-thread write buffer grows once to the largest batch.
        log.append_as_leader(&large, 0, AppendOrigin::Client).unwrap();
        let small_append = allocations_during(|| {
            log.append_as_leader(&small, 0, AppendOrigin::Client).unwrap();
        });
        let offset = log.log_end_offset();
        let large_append = allocations_during(|| {
            log.append_as_leader(&large, 0, AppendOrigin::Client).unwrap();
        });
        let end = log.log_end_offset();
        // Decompressing a larger batch grows its buffer a few more times (by doubling): never
        // one allocation per record, which would be 1,000 here.
        let growth = if codec == Compression::None { 0 } else { 20 };
        assert!(
            large_append <= small_append + growth,
            "{codec:?}: appending 1000 records allocated {large_append} times, 1 record {small_append}"
        );
        let small_read = allocations_during(|| {
            log.read(offset - 1, 1 << 20, end).unwrap();
        });
        let large_read = allocations_during(|| {
            log.read(offset, 1 << 20, end).unwrap();
        });
        assert!(large_read <= small_read.max(1), "{codec:?}: reading 1000 records allocated {large_read} times");
        assert!(large_read <= 2, "{codec:?}: a read allocates its buffer once, got {large_read}");
    }
}
