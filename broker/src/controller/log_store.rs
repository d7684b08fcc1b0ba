//! The durable raft log of the metadata quorum, with the vote and the committed log id.
//!
//! Owns: `metadata/raft.log`, `metadata/vote.json`, `metadata/committed.json`.
//! `raft.log` is a sequence of CRC-32C frames (see `disk`), each a JSON `LogFrame`: first a
//! `Header` (format version, last purged log id), then `Entries` frames, one per append, so a torn
//! write can only damage the last, never-acknowledged frame. Truncation and purging rewrite the
//! whole file atomically (metadata is small and both are rare: purges follow snapshots).
//! Invariant: an append is fsynced before openraft is told it is flushed; a vote is fsynced before
//! `save_vote` returns; entries in memory are exactly the entries in the file, contiguous, starting
//! right after the last purged log id. `committed.json` is a hint (openraft recomputes commitment
//! from the quorum); a damaged or inconsistent hint is ignored.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, OptionalSend, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};

use super::disk::{self, DirLock, Durability, StoreError, blocking};
use super::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

pub(crate) const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const COMMITTED_FILE: &str = "committed.json";
const LOG_FORMAT_VERSION: u32 = 1;
/// Entries per frame when the log is rewritten, to keep frames small.
const ENTRIES_PER_REWRITE_FRAME: usize = 256;

/// One frame of `raft.log`, as written (borrowing) ...
#[derive(Serialize)]
enum LogFrameOut<'a> {
    Header { format_version: u32, last_purged: Option<&'a LogId> },
    Entries(&'a [Entry]),
}

/// ... and as read (the same JSON shape, owned).
#[derive(Deserialize)]
enum LogFrameIn {
    Header { format_version: u32, last_purged: Option<LogId> },
    Entries(Vec<Entry>),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data behind (no multi-step
    // updates happen under them), so poisoning is ignored.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

type SharedEntries = Arc<Mutex<BTreeMap<u64, Entry>>>;

/// The append handle of `raft.log`. Only touched inside blocking tasks.
struct LogFile {
    path: PathBuf,
    file: File,
    /// Set after a failed write or fsync: the file's state is unknown, refuse further writes.
    poisoned: bool,
}

impl LogFile {
    fn open_append(path: PathBuf) -> Result<LogFile, StoreError> {
        let file = OpenOptions::new().append(true).open(&path).map_err(StoreError::io("open", &path))?;
        Ok(LogFile { path, file, poisoned: false })
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let res = self.file.write_all(bytes).and_then(|()| self.file.sync_data());
        res.map_err(|source| {
            // A partial write is cut at the next open (torn tail); after a failed fsync the page
            // cache cannot be trusted either way.
            self.poisoned = true;
            StoreError::Io { action: "append to", path: self.path.clone(), source }
        })
    }

    /// Atomically replaces the whole file with a header and `entries`.
    fn rewrite(&mut self, last_purged: Option<&LogId>, entries: &[Entry]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let bytes = encode_log(last_purged, entries)?;
        let dir = self.path.parent().map(Path::to_path_buf).unwrap_or_default();
        disk::write_atomically(&dir, LOG_FILE, &bytes, Durability::Durable)?;
        *self = LogFile::open_append(self.path.clone())?;
        Ok(())
    }
}

fn encode_frame_json<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), StoreError> {
    let payload = serde_json::to_vec(value).map_err(StoreError::Encode)?;
    disk::encode_frame(&payload, out)
}

fn encode_log(last_purged: Option<&LogId>, entries: &[Entry]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    encode_frame_json(&LogFrameOut::Header { format_version: LOG_FORMAT_VERSION, last_purged }, &mut out)?;
    for chunk in entries.chunks(ENTRIES_PER_REWRITE_FRAME) {
        encode_frame_json(&LogFrameOut::Entries(chunk), &mut out)?;
    }
    Ok(out)
}

/// What `open` found, for the startup log line.
#[derive(Debug)]
pub(crate) struct LogOpenReport {
    pub(crate) entries: usize,
    pub(crate) torn_tail_bytes: u64,
}

/// The raft log storage handed to openraft.
pub(crate) struct LogStore {
    dir: PathBuf,
    entries: SharedEntries,
    file: Arc<Mutex<LogFile>>,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    _lock: Arc<DirLock>,
}

impl LogStore {
    /// Loads (or creates) the log in `dir`, cutting a torn tail. Blocking.
    pub(crate) fn open(dir: &Path, dir_lock: Arc<DirLock>) -> Result<(LogStore, LogOpenReport), StoreError> {
        let path = dir.join(LOG_FILE);
        let _ = std::fs::remove_file(dir.join(format!("{LOG_FILE}.tmp")));
        let bytes = match disk::read_if_exists(&path)? {
            Some(bytes) => bytes,
            None => {
                let bytes = encode_log(None, &[])?;
                disk::write_atomically(dir, LOG_FILE, &bytes, Durability::Durable)?;
                bytes
            }
        };
        let decoded = disk::decode_frames(&path, &bytes)?;
        let torn_tail_bytes = bytes.len() as u64 - decoded.valid_len;
        if let Some(reason) = decoded.torn_tail {
            tracing::warn!(path = %path.display(), reason, torn_tail_bytes, "cutting the torn tail of the metadata log");
            let file = OpenOptions::new().write(true).open(&path).map_err(StoreError::io("open", &path))?;
            file.set_len(decoded.valid_len).map_err(StoreError::io("truncate", &path))?;
            file.sync_all().map_err(StoreError::io("fsync", &path))?;
        }

        let corrupt = |position: u64, reason: String| StoreError::Corrupt { path: path.clone(), position, reason };
        let mut frames = decoded.frames.iter();
        let last_purged = match frames.next().map(|(_, f)| serde_json::from_slice::<LogFrameIn>(f)) {
            Some(Ok(LogFrameIn::Header { format_version: LOG_FORMAT_VERSION, last_purged })) => last_purged,
            Some(Ok(LogFrameIn::Header { format_version, .. })) => {
                return Err(corrupt(0, format!("unsupported log format version {format_version}")));
            }
            Some(Ok(LogFrameIn::Entries(_))) | None => return Err(corrupt(0, "missing log header".to_string())),
            Some(Err(e)) => return Err(corrupt(0, format!("bad log header: {e}"))),
        };
        let mut entries = BTreeMap::new();
        let mut next_index = last_purged.as_ref().map_or(0, |l| l.index + 1);
        for &(position, frame) in frames {
            let batch = match serde_json::from_slice::<LogFrameIn>(frame) {
                Ok(LogFrameIn::Entries(batch)) => batch,
                Ok(LogFrameIn::Header { .. }) => return Err(corrupt(position, "second log header".to_string())),
                Err(e) => return Err(corrupt(position, format!("bad entries frame: {e}"))),
            };
            for entry in batch {
                if entry.log_id.index != next_index {
                    let reason = format!("entry index {} where {next_index} was expected", entry.log_id.index);
                    return Err(corrupt(position, reason));
                }
                next_index += 1;
                entries.insert(entry.log_id.index, entry);
            }
        }

        let vote_path = dir.join(VOTE_FILE);
        let vote = match disk::read_if_exists(&vote_path)? {
            Some(bytes) => Some(serde_json::from_slice::<Vote>(&bytes).map_err(|e| StoreError::Corrupt {
                path: vote_path.clone(),
                position: 0,
                reason: format!("bad vote: {e}"),
            })?),
            None => None,
        };
        let committed_path = dir.join(COMMITTED_FILE);
        let committed = match disk::read_if_exists(&committed_path)? {
            Some(bytes) => match serde_json::from_slice::<Option<LogId>>(&bytes) {
                Ok(committed) => committed,
                Err(e) => {
                    tracing::warn!(path = %committed_path.display(), error = %e, "ignoring a damaged committed hint");
                    None
                }
            },
            None => None,
        };
        let committed = sanitize_committed(committed, last_purged.as_ref(), &entries);

        let report = LogOpenReport { entries: entries.len(), torn_tail_bytes };
        let store = LogStore {
            dir: dir.to_path_buf(),
            entries: Arc::new(Mutex::new(entries)),
            file: Arc::new(Mutex::new(LogFile::open_append(path)?)),
            last_purged,
            vote,
            committed,
            _lock: dir_lock,
        };
        Ok((store, report))
    }

    fn last_log_id(&self) -> Option<LogId> {
        lock(&self.entries).values().next_back().map(|e| e.log_id).or(self.last_purged)
    }

    /// Rewrites the file with `retained` and then installs `retained` in memory.
    async fn rewrite(&mut self, retained: Vec<Entry>) -> Result<(), StoreError> {
        let file = self.file.clone();
        let last_purged = self.last_purged;
        let retained = blocking(move || {
            lock(&file).rewrite(last_purged.as_ref(), &retained)?;
            Ok(retained)
        })
        .await?;
        *lock(&self.entries) = retained.into_iter().map(|e| (e.log_id.index, e)).collect();
        Ok(())
    }
}

/// Keeps the committed hint only if it is provably consistent with this log: covered by the purged
/// prefix (then the snapshot covers it too) or naming exactly an entry we hold.
fn sanitize_committed(
    committed: Option<LogId>,
    last_purged: Option<&LogId>,
    entries: &BTreeMap<u64, Entry>,
) -> Option<LogId> {
    let committed = committed?;
    if last_purged.is_some_and(|p| committed.index <= p.index) {
        return Some(committed);
    }
    match entries.get(&committed.index) {
        Some(e) if e.log_id == committed => Some(committed),
        _ => {
            tracing::warn!(%committed, "committed hint does not match the log; ignoring it");
            None
        }
    }
}

fn read_entries<RB: RangeBounds<u64>>(entries: &SharedEntries, range: RB) -> Vec<Entry> {
    lock(entries).range(range).map(|(_, e)| e.clone()).collect()
}

fn io_error(e: StoreError, to_storage: fn(AnyError) -> StorageIOError<u64>) -> StorageError {
    StorageError::IO { source: to_storage(AnyError::new(&e)) }
}

/// A read-only view of the log for replication tasks (memory only).
pub(crate) struct LogReader {
    entries: SharedEntries,
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_entries(&self.entries, range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_entries(&self.entries, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState { last_purged_log_id: self.last_purged, last_log_id: self.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader { entries: self.entries.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes =
            serde_json::to_vec(vote).map_err(|e| io_error(StoreError::Encode(e), StorageIOError::write_vote))?;
        let dir = self.dir.clone();
        blocking(move || disk::write_atomically(&dir, VOTE_FILE, &bytes, Durability::Durable))
            .await
            .map_err(|e| io_error(e, StorageIOError::write_vote))?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes =
            serde_json::to_vec(&committed).map_err(|e| io_error(StoreError::Encode(e), StorageIOError::write))?;
        let dir = self.dir.clone();
        blocking(move || disk::write_atomically(&dir, COMMITTED_FILE, &bytes, Durability::ProcessCrashSafe))
            .await
            .map_err(|e| io_error(e, StorageIOError::write))?;
        self.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let Some(first) = entries.first() else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let expected = self.last_log_id().map_or(0, |l| l.index + 1);
        assert_eq!(first.log_id.index, expected, "openraft appended a non-contiguous log entry");

        let mut bytes = Vec::new();
        let encoded = encode_frame_json(&LogFrameOut::Entries(&entries), &mut bytes);
        let file = self.file.clone();
        let written = match encoded {
            Ok(()) => blocking(move || lock(&file).append(&bytes)).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                lock(&self.entries).extend(entries.into_iter().map(|e| (e.log_id.index, e)));
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(io_error(e, StorageIOError::write_logs))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::info!(%log_id, "truncating the metadata log");
        let retained = read_entries(&self.entries, ..log_id.index);
        self.rewrite(retained).await.map_err(|e| io_error(e, StorageIOError::write_logs))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if self.last_purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        tracing::debug!(%log_id, "purging the metadata log");
        let retained = read_entries(&self.entries, log_id.index + 1..);
        let previous = self.last_purged.replace(log_id);
        let res = self.rewrite(retained).await;
        if res.is_err() {
            self.last_purged = previous;
        }
        res.map_err(|e| io_error(e, StorageIOError::write_logs))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::controller::record::MetadataRecord;

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(MetadataRecord::DeleteTopic { name: format!("t{index}") }),
        }
    }

    fn open(dir: &Path) -> (LogStore, LogOpenReport) {
        let lock = Arc::new(DirLock::acquire(dir).expect("lock"));
        LogStore::open(dir, lock).expect("open")
    }

    /// Appends without going through openraft's callback (which needs a running core).
    async fn append_raw(store: &mut LogStore, entries: Vec<Entry>) {
        let mut bytes = Vec::new();
        encode_frame_json(&LogFrameOut::Entries(&entries), &mut bytes).expect("encode");
        let file = store.file.clone();
        blocking(move || lock(&file).append(&bytes)).await.expect("append");
        lock(&store.entries).extend(entries.into_iter().map(|e| (e.log_id.index, e)));
    }

    // Proves entries, purge and truncate survive a reopen, and a torn tail is cut.
    #[tokio::test]
    async fn log_survives_reopen_purge_truncate_and_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut store, report) = open(dir.path());
            assert_eq!(report.entries, 0);
            append_raw(&mut store, (0..5).map(|i| entry(1, i)).collect()).await;
            append_raw(&mut store, (5..8).map(|i| entry(2, i)).collect()).await;
            store.purge(entry(1, 2).log_id).await.expect("purge");
            store.truncate(entry(2, 6).log_id).await.expect("truncate");
            let vote = Vote::new(3, 1);
            store.save_vote(&vote).await.expect("vote");
            store.save_committed(Some(entry(2, 5).log_id)).await.expect("committed");
        }
        let path = dir.path().join(LOG_FILE);
        let mut torn = std::fs::read(&path).expect("read");
        let clean_len = torn.len();
        torn.extend_from_slice(&[0, 0, 1, 0, 9, 9]);
        std::fs::write(&path, &torn).expect("write");

        let (mut store, report) = open(dir.path());
        assert_eq!(report.torn_tail_bytes, 6);
        assert_eq!(std::fs::metadata(&path).expect("stat").len(), clean_len as u64);
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(entry(1, 2).log_id));
        assert_eq!(state.last_log_id, Some(entry(2, 5).log_id));
        let got: Vec<u64> = store.try_get_log_entries(..).await.expect("read").iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, vec![3, 4, 5]);
        assert_eq!(store.read_vote().await.expect("vote"), Some(Vote::new(3, 1)));
        assert_eq!(store.read_committed().await.expect("committed"), Some(entry(2, 5).log_id));
    }

    // Proves a committed hint that names an entry we do not hold is dropped.
    #[tokio::test]
    async fn inconsistent_committed_hint_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut store, _) = open(dir.path());
            append_raw(&mut store, (0..3).map(|i| entry(1, i)).collect()).await;
            store.save_committed(Some(entry(2, 2).log_id)).await.expect("committed");
        }
        let (mut store, _) = open(dir.path());
        assert_eq!(store.read_committed().await.expect("committed"), None);
    }

    // Proves purging past the last entry leaves an empty log whose last log id is the purged one.
    #[tokio::test]
    async fn purge_past_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut store, _) = open(dir.path());
            append_raw(&mut store, (0..3).map(|i| entry(1, i)).collect()).await;
            store.purge(entry(1, 9).log_id).await.expect("purge");
        }
        let (mut store, report) = open(dir.path());
        assert_eq!(report.entries, 0);
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(entry(1, 9).log_id));
    }
}
