//! The node's bounded cache of open segment `.log` files.
//!
//! Every segment reaches its `.log` through a [`SegmentFile`] handle (a path and an id in the
//! node's [`OpenFiles`]), never through a `File` of its own: a node with 50,000 partitions would
//! otherwise hold a descriptor per partition and more, past `RLIMIT_NOFILE`. A lookup that hits
//! returns the cached `Arc<File>`; a miss opens the file (outside the lock), inserts it and closes
//! the least recently used descriptors beyond the capacity. The cache only drops its own `Arc`:
//! a read in flight (a `FileSlice`, a compaction scan) keeps the descriptor open until it ends,
//! so the bound is soft by the reads in flight. Out of descriptors (EMFILE), a cache at least
//! half full closes its older half and retries the open once; a cache less full keeps its files.
//!
//! Invariant: no partition pins a descriptor. A handle's entry is removed when the handle is
//! dropped (its segment was deleted, replaced by compaction, or its log closed), so a deleted
//! file's inode is never kept alive by the cache.
//!
//! Durability: on Linux `fsync` through any descriptor of an inode writes back all of the file's
//! dirty pages, so flushing a segment whose descriptor was evicted (and reopened for the fsync)
//! covers the appends made through the old one. A writeback error is recorded on the inode
//! (`errseq_t`): since Linux 4.16 a descriptor opened after the error still reports it at its
//! first fsync unless another descriptor's fsync already did — and every fsync of a segment file
//! is ours, whose error fails the flush.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The smallest capacity the node accepts: a log needs its active segment and a segment being
/// read or compacted open at once, and a handful of logs work at the same moment.
pub const OPEN_FILES_MIN: usize = 16;

/// Figures of the cache, for `/metrics` and the cluster view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFilesStats {
    /// Descriptors the cache holds now (reads in flight may hold a few evicted ones besides).
    pub open: usize,
    pub capacity: usize,
    pub hits: u64,
    pub misses: u64,
    /// Descriptors closed to stay within the capacity (or to retry an open that hit EMFILE).
    pub evictions: u64,
    /// Opens that failed (after the EMFILE retry), each answered with a storage error.
    pub open_failures: u64,
}

/// A node-wide LRU of open segment files; see the module docs.
pub struct OpenFiles {
    capacity: usize,
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    open_failures: AtomicU64,
    /// Test hook: the next this many opens fail with EMFILE.
    #[cfg(test)]
    fail_opens: std::sync::atomic::AtomicU32,
}

#[derive(Default)]
struct Inner {
    /// id → (file, tick of its last use).
    files: HashMap<u64, (Arc<File>, u64)>,
    /// tick of last use → id, oldest first: the eviction order.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
}

impl Inner {
    fn touch(&mut self, id: u64) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, used) = self.files.get_mut(&id)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, id);
        Some(file.clone())
    }

    fn remove(&mut self, id: u64) -> Option<Arc<File>> {
        let (file, used) = self.files.remove(&id)?;
        self.by_use.remove(&used);
        Some(file)
    }

    /// Takes the least recently used entries until at most `keep` remain; the caller drops them
    /// (closing the descriptors) after releasing the lock.
    fn evict_to(&mut self, keep: usize) -> Vec<Arc<File>> {
        let mut evicted = Vec::new();
        while self.files.len() > keep {
            let Some((_, id)) = self.by_use.pop_first() else { break };
            evicted.extend(self.files.remove(&id).map(|(file, _)| file));
        }
        evicted
    }
}

impl OpenFiles {
    /// A cache holding at most `capacity` descriptors (at least one).
    pub fn new(capacity: usize) -> Arc<OpenFiles> {
        Arc::new(OpenFiles {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
            next_id: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            open_failures: AtomicU64::new(0),
            #[cfg(test)]
            fail_opens: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// The capacity `log.open.files.max=auto` means: half of this process's soft
    /// `RLIMIT_NOFILE` (the rest is for sockets, the metadata quorum and transient opens such
    /// as checkpoints and index writes), at least [`OPEN_FILES_MIN`].
    pub fn auto_capacity() -> usize {
        (nofile_soft_limit() / 2).max(OPEN_FILES_MIN as u64).min(usize::MAX as u64) as usize
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> OpenFilesStats {
        OpenFilesStats {
            open: self.lock().files.len(),
            capacity: self.capacity,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            open_failures: self.open_failures.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Inserts a freshly opened file (unless another thread opened the same one meanwhile, whose
    /// descriptor then wins) and evicts beyond the capacity. Returns the file to use.
    fn insert(&self, id: u64, file: File) -> Arc<File> {
        let (file, evicted) = {
            let mut inner = self.lock();
            if let Some(existing) = inner.touch(id) {
                (existing, Vec::new())
            } else {
                let file = Arc::new(file);
                inner.tick += 1;
                let tick = inner.tick;
                inner.files.insert(id, (file.clone(), tick));
                inner.by_use.insert(tick, id);
                let evicted = inner.evict_to(self.capacity);
                (file, evicted)
            }
        };
        self.evictions.fetch_add(evicted.len() as u64, Ordering::Relaxed);
        file
    }

    /// The process ran out of descriptors: closes the least recently used half of the cache if
    /// it holds at least half its capacity, and says whether it did. A cache that full is a
    /// large share of the process's descriptors, and half of them back is likely to let the
    /// open succeed; one holding fewer keeps its files, since the descriptors went elsewhere
    /// (connections) and closing the files of partitions in use would fail those partitions too.
    fn shed_half(&self) -> bool {
        let evicted = {
            let mut inner = self.lock();
            if inner.files.len() < self.capacity.div_ceil(2) {
                return false;
            }
            let keep = inner.files.len() / 2;
            inner.evict_to(keep)
        };
        self.evictions.fetch_add(evicted.len() as u64, Ordering::Relaxed);
        true
    }

    /// Opens `path` with `options`; on EMFILE/ENFILE sheds half the cache (see `shed_half`) and
    /// tries once more.
    fn open_with_retry(&self, path: &Path, options: &OpenOptions) -> io::Result<File> {
        let open = || {
            #[cfg(test)]
            if self.fail_opens.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err(io::Error::from_raw_os_error(libc::EMFILE));
            }
            options.open(path)
        };
        let opened = match open() {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if self.shed_half() {
                    tracing::warn!(path = %path.display(), error = %e, "out of file descriptors; closed half of the cached segment files");
                    open()
                } else {
                    tracing::warn!(path = %path.display(), error = %e, "out of file descriptors, not held by the segment file cache");
                    Err(e)
                }
            }
            other => other,
        };
        if opened.is_err() {
            self.open_failures.fetch_add(1, Ordering::Relaxed);
        }
        opened
    }

    /// A handle for the segment file at `path`, opened (and truncated to empty if `create`)
    /// now so that a missing file or a full disk shows at once.
    pub fn handle(self: &Arc<Self>, path: PathBuf, create: bool) -> io::Result<SegmentFile> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = SegmentFile { files: self.clone(), id, path };
        let mut options = OpenOptions::new();
        options.read(true).append(true).create(create);
        let file = self.open_with_retry(&handle.path, &options)?;
        if create {
            file.set_len(0)?;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.insert(id, file);
        Ok(handle)
    }

    fn get(&self, id: u64, path: &Path) -> io::Result<Arc<File>> {
        if let Some(file) = self.lock().touch(id) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(file);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let file = self.open_with_retry(path, OpenOptions::new().read(true).append(true))?;
        Ok(self.insert(id, file))
    }

    fn forget(&self, id: u64) {
        let removed = self.lock().remove(id);
        drop(removed);
    }

    /// Test hook: the next `n` opens fail with EMFILE.
    #[cfg(test)]
    pub(crate) fn fail_next_opens(&self, n: u32) {
        self.fail_opens.store(n, Ordering::SeqCst);
    }
}

/// A segment's `.log` file, reached through the node's [`OpenFiles`]. Dropping the handle
/// closes the cached descriptor (reads in flight keep theirs).
pub struct SegmentFile {
    files: Arc<OpenFiles>,
    id: u64,
    path: PathBuf,
}

impl SegmentFile {
    /// The open file: cached, or opened (read + append) again.
    pub fn get(&self) -> io::Result<Arc<File>> {
        self.files.get(self.id, &self.path)
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        self.files.forget(self.id);
    }
}

/// This process's soft `RLIMIT_NOFILE` (1024 if it cannot be read).
pub fn nofile_soft_limit() -> u64 {
    nofile_limits().map_or(1024, |(soft, _)| soft)
}

/// The soft and hard `RLIMIT_NOFILE`.
pub fn nofile_limits() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    ok.then_some((limit.rlim_cur as u64, limit.rlim_max as u64))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns (before, after) soft limits and
/// the hard one, or the error of `setrlimit`.
pub fn raise_nofile_limit() -> io::Result<(u64, u64, u64)> {
    let (soft, hard) = nofile_limits().ok_or_else(io::Error::last_os_error)?;
    if soft < hard {
        let limit = libc::rlimit { rlim_cur: hard as libc::rlim_t, rlim_max: hard as libc::rlim_t };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (after, hard) = nofile_limits().ok_or_else(io::Error::last_os_error)?;
    Ok((soft, after, hard))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// What descriptor `fd` of this process is open on, if anything (other tests run on other
    /// threads, so descriptors are checked one by one, never counted).
    fn fd_target(fd: i32) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
    }

    fn files_in(dir: &Path, n: usize, files: &Arc<OpenFiles>) -> Vec<SegmentFile> {
        (0..n).map(|i| files.handle(dir.join(format!("{i}.log")), true).unwrap()).collect()
    }

    #[test]
    fn the_least_recently_used_files_are_evicted_beyond_the_capacity() {
        // Proves the cache holds at most its capacity, evicts the least recently used, and a
        // handle whose descriptor was evicted reopens the same file.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(3);
        let handles = files_in(dir.path(), 5, &files);
        assert_eq!(files.stats().open, 3);
        assert_eq!(files.stats().evictions, 2);
        // 0 and 1 were evicted; 0 comes back (a miss) and evicts 2, the least recently used.
        (&*handles[0].get().unwrap()).write_all(b"zero").unwrap();
        assert_eq!(files.stats().misses, 6);
        handles[3].get().unwrap();
        assert_eq!(files.stats().hits, 1);
        handles[1].get().unwrap();
        assert_eq!(files.stats().misses, 7, "1 comes back and evicts 4");
        let stats = files.stats();
        assert_eq!((stats.open, stats.capacity, stats.evictions, stats.open_failures), (3, 3, 4, 0));
        assert_eq!(std::fs::read(dir.path().join("0.log")).unwrap(), b"zero");
        drop(handles);
        assert_eq!(files.stats().open, 0, "dropping a handle closes its descriptor");
    }

    #[test]
    fn a_read_in_flight_keeps_its_descriptor_after_eviction() {
        // Proves eviction only drops the cache's reference: a holder of the Arc keeps reading,
        // and the descriptor closes when it lets go.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(1);
        let first = files.handle(dir.path().join("a.log"), true).unwrap();
        (&*first.get().unwrap()).write_all(b"kept").unwrap();
        let in_flight = first.get().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*in_flight);
        let a = dir.path().join("a.log").canonicalize().unwrap();
        let _second = files.handle(dir.path().join("b.log"), true).unwrap();
        assert_eq!(files.stats().open, 1, "a.log was evicted");
        assert_eq!(fd_target(fd), Some(a.clone()), "a.log stays open while the read holds it");
        let mut buf = [0u8; 4];
        std::os::unix::fs::FileExt::read_exact_at(&*in_flight, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"kept");
        drop(in_flight);
        assert_ne!(fd_target(fd), Some(a), "the evicted descriptor closed with the last reader");
    }

    #[test]
    fn an_open_that_hits_emfile_sheds_half_the_cache_and_retries_once() {
        // Proves EMFILE makes the cache close half its descriptors and retry; a second EMFILE
        // is returned as the error (and counted), leaving the handle usable later.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(8);
        let handles = files_in(dir.path(), 8, &files);
        files.fail_next_opens(1);
        let more = files.handle(dir.path().join("more.log"), true).unwrap();
        let stats = files.stats();
        assert_eq!((stats.open, stats.evictions, stats.open_failures), (5, 4, 0));
        files.fail_next_opens(2);
        let err = handles[0].get().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EMFILE));
        assert_eq!(files.stats().open_failures, 1);
        assert!(handles[0].get().is_ok(), "the next attempt opens it");
        assert!(more.get().is_ok());
    }

    #[test]
    fn a_cache_under_half_full_keeps_its_files_when_descriptors_run_out_elsewhere() {
        // Proves EMFILE with the cache holding less than half its capacity closes nothing (the
        // files of partitions in use stay open) and fails the open.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(8);
        let _handles = files_in(dir.path(), 3, &files);
        files.fail_next_opens(1);
        let err = files.handle(dir.path().join("more.log"), true).map(|_| ()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EMFILE));
        let stats = files.stats();
        assert_eq!((stats.open, stats.evictions, stats.open_failures), (3, 0, 1));
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_creation() {
        // Proves a miss reopens without O_CREAT: a deleted segment file is reported, not recreated.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(1);
        let a = files.handle(dir.path().join("a.log"), true).unwrap();
        let _b = files.handle(dir.path().join("b.log"), true).unwrap();
        std::fs::remove_file(dir.path().join("a.log")).unwrap();
        assert_eq!(a.get().unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("a.log").exists());
        assert!(files.handle(dir.path().join("c.log"), false).is_err());
    }
}
