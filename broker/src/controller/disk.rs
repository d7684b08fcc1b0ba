//! File primitives of the metadata store: CRC-32C frames, atomic file replacement, the directory
//! lock, the store's error type, and the wait-and-retry of writes that failed because a resource
//! ran out (`Transient`).
//!
//! Owns: the on-disk frame format `[u32 BE payload length][u32 BE CRC-32C of payload][payload]`
//! shared by the raft log and the snapshot file, and the rules for reading a damaged tail.
//! Invariant: a file written with `write_atomically` is either the old or the new content after a
//! crash, never a mix; `decode_frames` accepts damage only at the very end of a file (a torn last
//! write) and reports anything else as corruption. A write that fails with EMFILE, ENFILE,
//! ENOSPC, EDQUOT or ENOMEM is retried (with backoff, for as long as it takes) instead of failing
//! the quorum: those pass once the resource is freed, while openraft stops for good on the first
//! storage error. Every other error (EIO, corruption) stays fatal.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes before each frame's payload: length and CRC-32C.
pub(crate) const FRAME_HEADER_BYTES: usize = 8;

/// An error of the metadata store (log, vote, committed, snapshot files).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("corrupt metadata file {path} at byte {position}: {reason}")]
    Corrupt { path: PathBuf, position: u64, reason: String },
    #[error("cannot encode metadata to JSON")]
    Encode(#[source] serde_json::Error),
    #[error("a metadata frame of {len} bytes does not fit the 4 GiB frame limit")]
    FrameTooLarge { len: usize },
    #[error("metadata directory {path} is locked by another controller")]
    Locked { path: PathBuf },
    #[error("the metadata log is unusable after an earlier write failure")]
    Poisoned,
    #[error("a blocking metadata I/O task did not complete")]
    TaskFailed,
}

impl StoreError {
    /// Whether this is a resource running out (see [`is_transient`]), which passes on its own.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if is_transient(source))
    }

    pub(crate) fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
        move |source| StoreError::Io { action, path: path.to_path_buf(), source }
    }
}

/// Whether `error` is a resource running out rather than a failing disk: descriptors (EMFILE for
/// the process, ENFILE for the system), disk space or quota (ENOSPC, EDQUOT), kernel memory
/// (ENOMEM). Each passes once something is freed, and none of them leaves data half-written that
/// the store cannot cut back.
pub(crate) fn is_transient(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOSPC | libc::EDQUOT | libc::ENOMEM))
}

/// First and longest pause between two attempts of a write that ran out of a resource.
const TRANSIENT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const TRANSIENT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Descriptors (of `/dev/null`) the store holds from its start, closed one at a time when it
/// runs out of descriptors, so the open it needs can take the slot.
const RESERVED_DESCRIPTORS: usize = 4;

/// Waits out resource exhaustion for the metadata store: each write of the store runs in
/// [`Transient::retry`], which repeats it (with backoff, logged once per episode) while it fails
/// with a transient error, and first hands the write one of the descriptors reserved at start
/// when the process is out of them. Shared by the log store and the snapshot store.
#[derive(Debug)]
pub(crate) struct Transient {
    /// Attempts that failed with a transient error, over the store's life (a metric).
    retries: AtomicU64,
    /// Opened at start; refilled after each episode.
    reserve: Mutex<Vec<File>>,
}

impl Transient {
    /// Opens the descriptor reserve. Blocking.
    pub(crate) fn new() -> Transient {
        let reserve = (0..RESERVED_DESCRIPTORS).filter_map(|_| File::open("/dev/null").ok()).collect();
        Transient { retries: AtomicU64::new(0), reserve: Mutex::new(reserve) }
    }

    /// Attempts that failed with a transient error and were retried.
    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Runs `attempt` until it succeeds or fails with a non-transient error. Blocking: only in
    /// the store's blocking tasks (the pause is the backoff of a blocked write, not a wait for
    /// another task). `what` names the write in the log lines.
    pub(crate) fn retry<T>(
        &self,
        what: &'static str,
        mut attempt: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut backoff = TRANSIENT_BACKOFF_MIN;
        let mut failed_since: Option<Instant> = None;
        let mut attempts = 0u64;
        loop {
            match attempt() {
                Ok(value) => {
                    if let Some(since) = failed_since {
                        tracing::warn!(
                            write = what,
                            attempts,
                            waited_ms = since.elapsed().as_millis() as u64,
                            "metadata store: the write succeeded after the resource was freed"
                        );
                        self.refill();
                    }
                    return Ok(value);
                }
                Err(e) if e.is_transient() => {
                    attempts += 1;
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    if failed_since.is_none() {
                        failed_since = Some(Instant::now());
                        tracing::error!(
                            write = what,
                            error = %e,
                            cause = %std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default(),
                            "metadata store: out of a resource (descriptors, disk space or memory); \
                             the quorum waits and retries this write until it succeeds"
                        );
                    }
                    // Out of descriptors: give one of ours back for the next attempt.
                    let emfile = matches!(&e, StoreError::Io { source, .. }
                        if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)));
                    if emfile && self.reserve.lock().unwrap_or_else(|p| p.into_inner()).pop().is_some() {
                        continue;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(TRANSIENT_BACKOFF_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reopens the reserved descriptors used up in an episode (best effort: the next episode
    /// finds fewer if the process is still short of them).
    fn refill(&self) {
        let mut reserve = self.reserve.lock().unwrap_or_else(|p| p.into_inner());
        while reserve.len() < RESERVED_DESCRIPTORS {
            match File::open("/dev/null") {
                Ok(file) => reserve.push(file),
                Err(_) => break,
            }
        }
    }
}

/// Runs blocking file work off the async runtime's worker threads.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|_| StoreError::TaskFailed)?
}

/// Appends one frame holding `payload` to `out`.
pub(crate) fn encode_frame(payload: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
    let len = u32::try_from(payload.len()).map_err(|_| StoreError::FrameTooLarge { len: payload.len() })?;
    out.reserve(FRAME_HEADER_BYTES + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// The frames of a file, in order.
#[derive(Debug)]
pub(crate) struct DecodedFrames<'a> {
    /// `(position of the frame in the file, payload)`.
    pub(crate) frames: Vec<(u64, &'a [u8])>,
    /// Length of the valid prefix: everything after it is a torn tail.
    pub(crate) valid_len: u64,
    /// Why the tail after `valid_len` was dropped, if there is one.
    pub(crate) torn_tail: Option<&'static str>,
}

/// Splits `buf` into frames. Damage confined to the last frame (a short header, a payload cut by
/// the end of the file, or a CRC mismatch in a frame that ends exactly at the end of the file) is a
/// torn write and is reported in `torn_tail`; a bad frame followed by more bytes is corruption.
pub(crate) fn decode_frames<'a>(path: &Path, buf: &'a [u8]) -> Result<DecodedFrames<'a>, StoreError> {
    let mut frames = Vec::new();
    let mut pos = 0usize;
    let torn_tail = loop {
        let rest = &buf[pos..];
        if rest.is_empty() {
            break None;
        }
        if rest.len() < FRAME_HEADER_BYTES {
            break Some("short frame header");
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len == 0 && rest.len() > FRAME_HEADER_BYTES && rest.iter().all(|&b| b == 0) {
            // A zero header's CRC checks out (the CRC of nothing is 0), so zeros to the end
            // would read as empty frames: they are a tail the file system extended without the
            // data (a crash), not entries.
            break Some("zeroed tail");
        }
        let Some(payload) = rest.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
            // A torn write leaves nothing whole after it; a valid frame further on means the
            // length itself is damaged, and truncating here would drop acknowledged entries.
            if has_frame_after(rest) {
                return Err(corrupt(path, pos, "a frame runs past the end of the file, but whole frames follow it"));
            }
            break Some("frame cut by the end of the file");
        };
        if crc32c::crc32c(payload) != crc {
            if FRAME_HEADER_BYTES + len == rest.len() {
                break Some("CRC mismatch in the last frame");
            }
            return Err(corrupt(path, pos, "CRC mismatch in a frame followed by more data"));
        }
        frames.push((pos as u64, payload));
        pos += FRAME_HEADER_BYTES + len;
    };
    Ok(DecodedFrames { frames, valid_len: pos as u64, torn_tail })
}

fn corrupt(path: &Path, position: usize, reason: &str) -> StoreError {
    StoreError::Corrupt { path: path.to_path_buf(), position: position as u64, reason: reason.to_string() }
}

/// Whether a whole, non-empty frame with a matching CRC starts anywhere in `rest` after its
/// first byte (a recovery-time scan of a damaged tail, never on the write path).
fn has_frame_after(rest: &[u8]) -> bool {
    (1..rest.len()).any(|at| {
        let candidate = &rest[at..];
        if candidate.len() <= FRAME_HEADER_BYTES {
            return false;
        }
        let len = u32::from_be_bytes([candidate[0], candidate[1], candidate[2], candidate[3]]) as usize;
        let crc = u32::from_be_bytes([candidate[4], candidate[5], candidate[6], candidate[7]]);
        len > 0
            && candidate
                .get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len)
                .is_some_and(|payload| crc32c::crc32c(payload) == crc)
    })
}

/// Whether `write_atomically` makes the new content durable before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// fsync the file and the directory: the new content survives a power loss.
    Durable,
    /// Rename only: atomic against a process crash; after a power loss the old content, the new one
    /// or an empty file may be found. For hints that may be lost.
    ProcessCrashSafe,
}

/// Replaces `dir/name` with `bytes` through `dir/name.tmp` and a rename.
pub(crate) fn write_atomically(dir: &Path, name: &str, bytes: &[u8], durability: Durability) -> Result<(), StoreError> {
    let path = dir.join(name);
    if durability == Durability::Durable {
        // The one write-fsync-rename-fsync sequence of the node.
        return crate::log::durable::write_atomically(&path, bytes).map_err(StoreError::io("write atomically", &path));
    }
    let tmp = dir.join(format!("{name}.tmp"));
    let written = File::create(&tmp).map_err(StoreError::io("create", &tmp)).and_then(|mut file| {
        file.write_all(bytes).map_err(StoreError::io("write", &tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(StoreError::io("rename into place", &path))
    });
    if written.is_err() {
        // A full disk keeps no half-written temp file.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Replaces `dir/name` with `bytes` durably (temp file, fsync, rename, fsync the directory) and
/// returns the new file open for appending: the store keeps writing to the file it just put in
/// place, with no second open that could fail (out of descriptors) after the rename and leave
/// it holding the replaced file.
pub(crate) fn replace_and_open_append(dir: &Path, name: &str, bytes: &[u8]) -> Result<File, StoreError> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut file =
            OpenOptions::new().append(true).create_new(true).open(&tmp).map_err(StoreError::io("create", &tmp))?;
        file.write_all(bytes).map_err(StoreError::io("write", &tmp))?;
        file.sync_all().map_err(StoreError::io("fsync", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(StoreError::io("rename into place", &path))?;
        Ok(file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let file = written?;
    sync_dir(dir)?;
    Ok(file)
}

/// fsyncs a directory so that creations and renames in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(StoreError::io("fsync directory", dir))
}

/// Reads `path`, or `None` if it does not exist.
pub(crate) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Io { action: "read", path: path.to_path_buf(), source: e }),
    }
}

/// An exclusive `flock` on `dir/LOCK`, held while any part of the store is alive, so two
/// controllers (two processes, or a restarted one while the old one still winds down) never write
/// the same metadata directory.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, StoreError> {
        let path = dir.join("LOCK");
        match crate::log::durable::lock_exclusive(&path) {
            Ok(Some(file)) => Ok(DirLock { _file: file }),
            Ok(None) => Err(StoreError::Locked { path: dir.to_path_buf() }),
            Err(source) => Err(StoreError::Io { action: "lock", path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode_frame(p, &mut out).expect("encode");
        }
        out
    }

    // Proves frames round-trip and a clean file has no torn tail.
    #[test]
    fn frames_round_trip() {
        let buf = frames(&[b"a", b"", b"hello"]);
        let d = decode_frames(Path::new("x"), &buf).expect("decode");
        let payloads: Vec<&[u8]> = d.frames.iter().map(|(_, p)| *p).collect();
        assert_eq!(payloads, vec![&b"a"[..], &b""[..], &b"hello"[..]]);
        assert_eq!(d.frames[1].0, 9);
        assert_eq!(d.valid_len, buf.len() as u64);
        assert!(d.torn_tail.is_none());
    }

    // Proves every kind of damage in the last frame is a torn tail that keeps the prefix.
    #[test]
    fn torn_last_frame_is_dropped() {
        let good = frames(&[b"first"]);
        let full = frames(&[b"first", b"second frame"]);
        for cut in good.len() + 1..full.len() {
            let d = decode_frames(Path::new("x"), &full[..cut]).expect("decode");
            assert_eq!(d.frames, vec![(0, &b"first"[..])], "cut at {cut}");
            assert_eq!(d.valid_len, good.len() as u64);
            assert!(d.torn_tail.is_some());
        }
        let mut flipped = full.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let d = decode_frames(Path::new("x"), &flipped).expect("decode");
        assert_eq!(d.frames.len(), 1);
        assert_eq!(d.torn_tail, Some("CRC mismatch in the last frame"));
    }

    // Proves a tail of zeros (a file extended without its data by a crash) is a torn tail, not
    // empty frames (whose payload no reader could decode: the store refused to start), and a
    // length damaged in a middle frame is corruption: it was read as a frame cut by the end of
    // the file, and every acknowledged entry after it was truncated away.
    #[test]
    fn a_zeroed_tail_is_torn_and_a_damaged_length_is_corruption() {
        let mut buf = frames(&[b"first", b"second"]);
        let whole = buf.len() as u64;
        buf.extend_from_slice(&[0; 64]);
        let d = decode_frames(Path::new("x"), &buf).expect("decode");
        assert_eq!((d.frames.len(), d.valid_len, d.torn_tail), (2, whole, Some("zeroed tail")));

        let mut buf = frames(&[b"first", b"second", b"third"]);
        buf[0] = 0x7f;
        assert!(matches!(decode_frames(Path::new("x"), &buf), Err(StoreError::Corrupt { position: 0, .. })));
    }

    // Proves a bad frame followed by more data is corruption, not a torn tail.
    #[test]
    fn damage_before_the_end_is_corruption() {
        let mut buf = frames(&[b"first", b"second", b"third"]);
        buf[FRAME_HEADER_BYTES + 1] ^= 0xff;
        assert!(matches!(decode_frames(Path::new("x"), &buf), Err(StoreError::Corrupt { position: 0, .. })));
    }

    fn os_error(errno: i32) -> StoreError {
        StoreError::Io { action: "write", path: PathBuf::from("x"), source: io::Error::from_raw_os_error(errno) }
    }

    // Proves a write that runs out of descriptors or space is retried until it succeeds (handing
    // it the reserved descriptors first), and that EIO fails at once.
    #[test]
    fn transient_errors_are_retried_and_others_are_not() {
        let transient = Transient::new();
        let mut failures = vec![libc::ENOSPC, libc::EMFILE, libc::EDQUOT, libc::ENFILE];
        let written = transient.retry("test", || match failures.pop() {
            Some(errno) => Err(os_error(errno)),
            None => Ok(7),
        });
        assert_eq!(written.expect("retried until it succeeded"), 7);
        assert_eq!(transient.retries(), 4);
        assert_eq!(transient.reserve.lock().unwrap().len(), RESERVED_DESCRIPTORS, "the reserve is refilled");
        let mut calls = 0;
        let failed = transient.retry("test", || -> Result<(), StoreError> {
            calls += 1;
            Err(os_error(libc::EIO))
        });
        assert!(matches!(failed, Err(StoreError::Io { .. })));
        assert_eq!(calls, 1);
        assert_eq!(transient.retries(), 4);
    }

    // Proves the replacement is in place and appends through the returned handle reach it.
    #[test]
    fn replace_and_open_append_keeps_writing_the_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), b"old content").expect("write");
        let mut file = replace_and_open_append(dir.path(), "f", b"new").expect("replace");
        file.write_all(b"+more").expect("append");
        assert_eq!(std::fs::read(dir.path().join("f")).expect("read"), b"new+more");
        assert!(!dir.path().join("f.tmp").exists());
    }

    // Proves the directory lock excludes a second holder until the first is dropped.
    #[test]
    fn dir_lock_is_exclusive() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DirLock::acquire(dir.path()).expect("first lock");
        assert!(matches!(DirLock::acquire(dir.path()), Err(StoreError::Locked { .. })));
        drop(first);
        DirLock::acquire(dir.path()).expect("lock after release");
    }
}
