//! Bounded parallelism for the node-wide partition work that is bound by the disk, not the CPU:
//! opening or creating thousands of logs (a CreateTopics of many partitions, a start), closing
//! them at shutdown. Each item costs a few fsyncs and directory operations; the device (and the
//! file system's journal, which commits concurrent fsyncs together) takes many of them at once,
//! so more threads than cores pay off.
//!
//! Invariant: runs on the calling (blocking) thread and scoped threads it joins before returning;
//! never on an async worker. A thread that cannot be started leaves its share to the others (the
//! caller is one of them), so the work always completes.

use std::sync::Mutex;

/// Threads for disk-bound partition work: enough for the device to overlap fsyncs. Not tuned
/// by measurement; on this project's 2-core machine the cost of creating partitions on ext4 was
/// the kernel's inode allocation, on-CPU, which more threads do not speed up.
pub const PARTITION_IO_THREADS: usize = 16;

/// Calls `work` on every item, on up to `threads` threads (the caller's included), and returns
/// once all are done. Items are taken in order; they may finish in any order.
pub fn for_each_parallel<T: Send, F: Fn(T) + Sync>(items: Vec<T>, threads: usize, work: F) {
    let threads = threads.min(items.len());
    if threads <= 1 {
        items.into_iter().for_each(work);
        return;
    }
    let queue = Mutex::new(items.into_iter());
    let next = || queue.lock().unwrap_or_else(|p| p.into_inner()).next();
    let drain = || {
        while let Some(item) = next() {
            work(item);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            let spawned = std::thread::Builder::new().name("runnel-partition-io".into()).spawn_scoped(scope, drain);
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "could not start a partition I/O thread; the others take its share");
                break;
            }
        }
        drain();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_worked_on_once_whatever_the_thread_count() {
        // Proves each item is handed to exactly one call, for no, one and many threads.
        for threads in [0, 1, 3, 64] {
            let seen: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            for_each_parallel((0..100).collect(), threads, |i: usize| {
                seen[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1), "threads {threads}");
        }
    }
}
