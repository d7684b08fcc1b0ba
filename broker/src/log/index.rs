//! Sparse indexes of one segment, in Kafka's file formats.
//!
//! `.index`: 8-byte entries (offset relative to the segment base u32, file position u32).
//! `.timeindex`: 12-byte entries (timestamp i64, relative offset u32). Big endian, as Kafka
//! writes them. Both are append-only and strictly increasing in their key, so lookups are a
//! binary search.
//!
//! Where the entries live (see [`Storage`]): the active segment's are in a heap buffer that grows
//! with its entries (an idle partition costs no memory, no descriptor and no map; 50,000
//! partitions with two mapped indexes each would pass `vm.max_map_count`), written to the files
//! when the segment rolls, on flush and on a clean close, so a closed index file is exactly its
//! entries. A closed segment's index is the file, mapped read-only on first lookup (Kafka's
//! LazyIndex, KAFKA-7283) with its descriptor closed right after mapping. A file with a
//! preallocated zero-filled tail (left by a crash of an older version, or by Kafka) fails
//! [`OffsetIndex::sanity_check`], so recovery rebuilds it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::Mmap;

/// Where an index's entries are.
enum Storage {
    /// The active segment's entries. The file holds the first `persisted` of them as they are
    /// and is `file_len` bytes long (`None`: no file yet); `persist` writes the difference.
    Heap { bytes: Vec<u8>, persisted: usize, file_len: Option<u64> },
    /// A closed segment's file, mapped read-only on first use (`load`).
    File { map: OnceLock<Mmap> },
}

/// What an index's file held at some moment (see [`OffsetIndex::file_mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMark {
    /// Leading entries the file held as the index does.
    persisted: usize,
    /// `None`: there was no file.
    file_len: Option<u64>,
}

/// A file of fixed-size entries; `entries` counts the valid ones.
struct IndexFile {
    path: PathBuf,
    storage: Storage,
    entry_size: usize,
    entries: usize,
    /// Entries the index may hold (`segment.index.bytes`), the limit that makes the log roll; a
    /// closed index is full.
    max_entries: usize,
    /// The file did not end on an entry boundary when opened: a torn or cut file, which the
    /// sanity checks report (as Kafka's do) so that the index is rebuilt.
    torn: bool,
}

/// The length of `path`, `None` if it does not exist.
fn file_len(path: &Path) -> io::Result<Option<u64>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl IndexFile {
    /// A closed segment's index: nothing is read or mapped until `load`. A missing file has no
    /// entries.
    fn closed(path: &Path, entry_size: usize) -> io::Result<Self> {
        let len = file_len(path)?.unwrap_or(0) as usize;
        Ok(IndexFile {
            path: path.to_path_buf(),
            storage: Storage::File { map: OnceLock::new() },
            entry_size,
            entries: len / entry_size,
            max_entries: len / entry_size,
            torn: !len.is_multiple_of(entry_size),
        })
    }

    /// An active segment's index, read into memory; it may grow to `max_bytes`.
    fn active(path: &Path, entry_size: usize, max_bytes: usize) -> io::Result<Self> {
        let mut index = IndexFile::closed(path, entry_size)?;
        index.make_active(max_bytes)?;
        Ok(index)
    }

    /// Maps a closed index's file (a no-op once mapped, or for the active one).
    fn load(&self) -> io::Result<()> {
        let Storage::File { map } = &self.storage else { return Ok(()) };
        if self.entries == 0 || map.get().is_some() {
            return Ok(());
        }
        let file = File::open(&self.path)?;
        // SAFETY: the log module is the only writer of partition files, and a closed index's
        // file is replaced only by a rename (compaction) or rewritten after `make_active`
        // turned it into a heap buffer, which drops the map first.
        let mapped = unsafe { Mmap::map(&file)? };
        if mapped.len() < self.entries * self.entry_size {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "index file shrank since it was opened"));
        }
        // Lookups touch a few pages; without this the first touch reads ahead megabytes.
        mapped.advise(memmap2::Advice::Random)?;
        let _ = map.set(mapped);
        Ok(())
    }

    fn bytes(&self) -> &[u8] {
        let len = self.entries * self.entry_size;
        match &self.storage {
            Storage::Heap { bytes, .. } => &bytes[..len],
            Storage::File { .. } if len == 0 => &[],
            Storage::File { map } => &map.get().expect("a closed index is loaded before it is read")[..len],
        }
    }

    fn entry(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.entries);
        &self.bytes()[i * self.entry_size..(i + 1) * self.entry_size]
    }

    fn push(&mut self, entry: &[u8]) {
        assert_eq!(entry.len(), self.entry_size);
        assert!(!self.is_full(), "caller checks is_full before appending");
        let Storage::Heap { bytes, .. } = &mut self.storage else { panic!("only an active index takes entries") };
        bytes.extend_from_slice(entry);
        self.entries += 1;
    }

    fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    /// Index of the last entry whose key is `<= target` (entries are sorted by key).
    fn floor(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key(self.entry(mid)) <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Drops entries past `entries` (an active index).
    fn truncate_entries(&mut self, entries: usize) {
        let keep = self.entries.min(entries);
        let Storage::Heap { bytes, persisted, .. } = &mut self.storage else {
            panic!("only an active index is truncated")
        };
        bytes.truncate(keep * self.entry_size);
        *persisted = (*persisted).min(keep);
        self.entries = keep;
    }

    /// Makes the file hold exactly the entries, and fsyncs it; writes only what changed since
    /// the last time (nothing, and no syscall, for an idle index). A closed index's file
    /// already does.
    fn persist(&mut self) -> io::Result<()> {
        let len = self.entries * self.entry_size;
        let Storage::Heap { bytes, persisted, file_len } = &mut self.storage else { return Ok(()) };
        if *persisted == self.entries && *file_len == Some(len as u64) {
            return Ok(());
        }
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&self.path)?;
        let from = *persisted * self.entry_size;
        file.write_all_at(&bytes[from..len], from as u64)?;
        if *file_len != Some(len as u64) {
            file.set_len(len as u64)?;
        }
        file.sync_data()?;
        *persisted = self.entries;
        *file_len = Some(len as u64);
        self.torn = false;
        Ok(())
    }

    /// The segment closed: the file gets exactly the entries, the memory is freed, and the
    /// index is mapped again on its next lookup.
    fn close(&mut self) -> io::Result<()> {
        self.persist()?;
        self.storage = Storage::File { map: OnceLock::new() };
        self.max_entries = self.entries;
        Ok(())
    }

    /// Lets the index take entries again, up to `max_bytes` (the segment is, or became again,
    /// the active one): a closed index's entries are read into memory.
    fn make_active(&mut self, max_bytes: usize) -> io::Result<()> {
        if let Storage::File { map } = &self.storage {
            let len = self.entries * self.entry_size;
            let bytes = match map.get() {
                Some(map) => map[..len].to_vec(),
                None if len == 0 => Vec::new(),
                None => {
                    let mut bytes = vec![0u8; len];
                    File::open(&self.path)?.read_exact_at(&mut bytes, 0)?;
                    bytes
                }
            };
            let file_len = file_len(&self.path)?;
            self.storage = Storage::Heap { bytes, persisted: self.entries, file_len };
        }
        self.max_entries = (max_bytes / self.entry_size).max(self.entries);
        Ok(())
    }

    fn file_mark(&self) -> FileMark {
        match &self.storage {
            Storage::Heap { persisted, file_len, .. } => FileMark { persisted: *persisted, file_len: *file_len },
            Storage::File { .. } => {
                FileMark { persisted: self.entries, file_len: Some((self.entries * self.entry_size) as u64) }
            }
        }
    }

    /// Puts the file back as it was at `mark` (an active index cut back to at least the mark's
    /// persisted entries): writes since then only ever started at the persisted entries, so the
    /// prefix is intact and only the length (or the file's existence) changed.
    fn restore_file(&mut self, mark: FileMark) -> io::Result<()> {
        let entry_size = self.entry_size;
        let Storage::Heap { persisted, file_len, .. } = &mut self.storage else {
            panic!("only an active index is cut back")
        };
        assert!(mark.persisted <= self.entries, "the index keeps the mark's persisted entries");
        if (*persisted, *file_len) == (mark.persisted, mark.file_len) {
            return Ok(());
        }
        match mark.file_len {
            None => match fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => *file_len = None,
            },
            Some(_) => {
                let len = (mark.persisted * entry_size) as u64;
                OpenOptions::new().write(true).open(&self.path)?.set_len(len)?;
                *file_len = Some(len);
            }
        }
        *persisted = mark.persisted;
        Ok(())
    }

    /// Forgets every entry (a rebuild follows, which may write as many entries as the index
    /// had, or `max_bytes` allows); the index becomes an active one, without reading the file.
    fn reset(&mut self, max_bytes: usize) -> io::Result<()> {
        let file_len = match &self.storage {
            Storage::Heap { file_len, .. } => *file_len,
            Storage::File { .. } => file_len(&self.path)?,
        };
        self.max_entries = (max_bytes / self.entry_size).max(self.entries);
        self.storage = Storage::Heap { bytes: Vec::new(), persisted: 0, file_len };
        self.entries = 0;
        self.torn = false;
        Ok(())
    }
}

/// Why an index file cannot be trusted and must be rebuilt from its segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("index {path} is corrupt: {reason}")]
pub struct IndexCorrupt {
    pub path: PathBuf,
    pub reason: &'static str,
}

/// An entry of the offset index: the batch whose last offset is `offset` starts at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// The `.index` file: last offset of a batch → the batch's file position, every
/// `index.interval.bytes` of log.
pub struct OffsetIndex {
    base_offset: i64,
    file: IndexFile,
}

impl OffsetIndex {
    pub const ENTRY_SIZE: usize = 8;

    pub fn entry(&self, i: usize) -> OffsetPosition {
        let bytes = self.file.entry(i);
        let relative = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let position = u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
        OffsetPosition { offset: self.base_offset + relative as i64, position }
    }

    pub fn last(&self) -> Option<OffsetPosition> {
        self.entries().checked_sub(1).map(|i| self.entry(i))
    }

    /// Appends an entry. Offsets and positions must grow strictly.
    pub fn append(&mut self, offset: i64, position: u32) {
        let relative = offset - self.base_offset;
        assert!((0..=u32::MAX as i64).contains(&relative), "relative offset fits in u32");
        if let Some(last) = self.last() {
            assert!(offset > last.offset && position > last.position, "index entries grow");
        }
        let mut entry = [0u8; Self::ENTRY_SIZE];
        entry[0..4].copy_from_slice(&(relative as u32).to_be_bytes());
        entry[4..8].copy_from_slice(&position.to_be_bytes());
        self.file.push(&entry);
    }

    /// The last entry at or below `offset`, or the segment start when there is none. A closed
    /// index is mapped at its first lookup, which is the only way this fails.
    pub fn lookup(&self, offset: i64) -> io::Result<OffsetPosition> {
        self.file.load()?;
        let base = self.base_offset;
        Ok(match self.file.floor(offset, |e| base + u32::from_be_bytes(e[0..4].try_into().expect("4")) as i64) {
            Some(i) => self.entry(i),
            None => OffsetPosition { offset: base, position: 0 },
        })
    }

    /// Drops every entry for offsets `>= offset` (the log was truncated there).
    pub fn truncate_to_offset(&mut self, offset: i64) {
        let keep = match self
            .file
            .floor(offset - 1, |e| self.base_offset + u32::from_be_bytes(e[0..4].try_into().expect("4")) as i64)
        {
            Some(i) => i + 1,
            None => 0,
        };
        self.file.truncate_entries(keep);
    }

    /// Checks that entries grow strictly and point inside a log of `log_size` bytes.
    pub fn sanity_check(&self, log_size: u64) -> Result<(), IndexCorrupt> {
        let corrupt = |reason| IndexCorrupt { path: self.path().to_path_buf(), reason };
        if self.file.torn {
            return Err(corrupt("the file length is not a multiple of the entry size"));
        }
        let mut previous: Option<OffsetPosition> = None;
        for i in 0..self.entries() {
            let entry = self.entry(i);
            if entry.position as u64 >= log_size {
                return Err(corrupt("an entry points past the end of the log"));
            }
            if let Some(p) = previous {
                if entry.offset <= p.offset || entry.position <= p.position {
                    return Err(corrupt("entries do not grow strictly"));
                }
            }
            if entry.position == 0 {
                // Entries are added only after `index.interval.bytes` of log, so position 0 is
                // never indexed: this is a zero-filled preallocated file left by a crash.
                return Err(corrupt("zero-filled entries"));
            }
            previous = Some(entry);
        }
        Ok(())
    }
}

/// An entry of the time index: batches up to `offset` hold timestamps up to `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// The `.timeindex` file: the largest timestamp seen so far → the offset of the batch that had it.
pub struct TimeIndex {
    base_offset: i64,
    file: IndexFile,
}

impl TimeIndex {
    pub const ENTRY_SIZE: usize = 12;

    pub fn entry(&self, i: usize) -> TimestampOffset {
        let bytes = self.file.entry(i);
        let timestamp = i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let relative = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
        TimestampOffset { timestamp, offset: self.base_offset + relative as i64 }
    }

    pub fn last(&self) -> Option<TimestampOffset> {
        self.entries().checked_sub(1).map(|i| self.entry(i))
    }

    /// Appends `(timestamp, offset)` if the timestamp is larger than the last entry's, as Kafka
    /// does; returns whether it did. Offsets must not go backwards.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> bool {
        if self.file.is_full() {
            return false;
        }
        if let Some(last) = self.last() {
            if timestamp <= last.timestamp {
                return false;
            }
            assert!(offset >= last.offset, "time index offsets never go backwards");
        }
        let relative = offset - self.base_offset;
        assert!((0..=u32::MAX as i64).contains(&relative), "relative offset fits in u32");
        let mut entry = [0u8; Self::ENTRY_SIZE];
        entry[0..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..12].copy_from_slice(&(relative as u32).to_be_bytes());
        self.file.push(&entry);
        true
    }

    /// The last entry whose timestamp is `<= timestamp`: a scan for the first record at or after
    /// `timestamp` can start at that entry's offset. `None` means "from the segment start".
    pub fn lookup(&self, timestamp: i64) -> io::Result<Option<TimestampOffset>> {
        self.file.load()?;
        Ok(self.file.floor(timestamp, |e| i64::from_be_bytes(e[0..8].try_into().expect("8"))).map(|i| self.entry(i)))
    }

    /// Drops entries for offsets `>= offset`.
    pub fn truncate_to_offset(&mut self, offset: i64) {
        let mut keep = self.entries();
        while keep > 0 && self.entry(keep - 1).offset >= offset {
            keep -= 1;
        }
        self.file.truncate_entries(keep);
    }

    /// Checks that timestamps and offsets grow and offsets stay below `next_offset`.
    pub fn sanity_check(&self, next_offset: i64) -> Result<(), IndexCorrupt> {
        let corrupt = |reason| IndexCorrupt { path: self.path().to_path_buf(), reason };
        if self.file.torn {
            return Err(corrupt("the file length is not a multiple of the entry size"));
        }
        let mut previous: Option<TimestampOffset> = None;
        for i in 0..self.entries() {
            let entry = self.entry(i);
            if entry.offset >= next_offset.max(self.base_offset + 1) {
                return Err(corrupt("an entry points past the end of the segment"));
            }
            if let Some(p) = previous {
                if entry.timestamp <= p.timestamp || entry.offset < p.offset {
                    return Err(corrupt("entries do not grow"));
                }
            }
            previous = Some(entry);
        }
        Ok(())
    }
}

/// The methods both index types have alike: opening, and the file's life cycle, all the
/// `IndexFile`'s. `$name` must have `base_offset` and `file: IndexFile` and an `ENTRY_SIZE`.
macro_rules! index_file_methods {
    ($name:ident) => {
        impl $name {
            /// Opens the index file at `path` (missing: no entries): `writable`, as an active
            /// index of up to `max_bytes` held in memory; else as a closed one, mapped now.
            pub fn open(path: &Path, base_offset: i64, max_bytes: usize, writable: bool) -> io::Result<Self> {
                let index = Self::open_lazy(path, base_offset, max_bytes, writable)?;
                index.file.load()?;
                Ok(index)
            }

            /// [`Self::open`] that maps a closed index only at its first lookup (or `load`).
            pub fn open_lazy(path: &Path, base_offset: i64, max_bytes: usize, writable: bool) -> io::Result<Self> {
                let file = if writable {
                    IndexFile::active(path, Self::ENTRY_SIZE, max_bytes)?
                } else {
                    IndexFile::closed(path, Self::ENTRY_SIZE)?
                };
                Ok($name { base_offset, file })
            }

            pub fn entries(&self) -> usize {
                self.file.entries
            }
            pub fn is_full(&self) -> bool {
                self.file.is_full()
            }
            pub fn path(&self) -> &Path {
                &self.file.path
            }
            /// Forgets every entry, to rebuild the index (as an active one, up to `max_bytes`).
            pub fn reset(&mut self, max_bytes: usize) -> io::Result<()> {
                self.file.reset(max_bytes)
            }
            /// Keeps only the first `entries` entries (an active index).
            pub fn truncate_entries(&mut self, entries: usize) {
                self.file.truncate_entries(entries);
            }
            /// Writes the entries added (or dropped) since the last time to the file, and fsyncs it.
            pub fn flush(&mut self) -> io::Result<()> {
                self.file.persist()
            }
            /// Writes the file as [`Self::flush`] does and keeps no copy in memory: the segment closed.
            pub fn close(&mut self) -> io::Result<()> {
                self.file.close()
            }
            /// Takes entries again, up to `max_bytes` (the segment became the active one).
            pub fn make_active(&mut self, max_bytes: usize) -> io::Result<()> {
                self.file.make_active(max_bytes)
            }
            /// What the file holds now, to put it back with [`Self::restore_file`].
            pub fn file_mark(&self) -> FileMark {
                self.file.file_mark()
            }
            /// Puts the file back as it was at `mark`, after the index was cut back to the
            /// entries it had then (a failed append is undone, files included).
            pub fn restore_file(&mut self, mark: FileMark) -> io::Result<()> {
                self.file.restore_file(mark)
            }
            /// Maps a closed index now (lookups do it on their own).
            pub fn load(&self) -> io::Result<()> {
                self.file.load()
            }
        }
    };
}

index_file_methods!(OffsetIndex);
index_file_methods!(TimeIndex);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_is_a_floor_search() {
        // Proves lookup returns the last entry at or below the target, or the segment start.
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("a.index"), 100, 1024, true).unwrap();
        assert_eq!(index.lookup(150).unwrap(), OffsetPosition { offset: 100, position: 0 });
        index.append(109, 4096);
        index.append(130, 9000);
        assert_eq!(index.lookup(105).unwrap(), OffsetPosition { offset: 100, position: 0 });
        assert_eq!(index.lookup(109).unwrap(), OffsetPosition { offset: 109, position: 4096 });
        assert_eq!(index.lookup(129).unwrap(), OffsetPosition { offset: 109, position: 4096 });
        assert_eq!(index.lookup(1_000).unwrap(), OffsetPosition { offset: 130, position: 9000 });
        index.truncate_to_offset(130);
        assert_eq!(index.entries(), 1);
    }

    #[test]
    fn an_active_index_lives_in_memory_and_its_file_holds_exactly_the_entries() {
        // Proves an active index creates no file until flushed, a flush writes exactly the
        // entries (and only the new ones: a truncation then shortens the file), and a closed
        // index reopens lazily with the same entries.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.index");
        let mut index = OffsetIndex::open(&path, 0, 800, true).unwrap();
        index.append(3, 100);
        assert!(!path.exists(), "no file, no descriptor, no map while active");
        index.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 8);
        index.append(7, 200);
        index.append(9, 300);
        index.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 24);
        index.truncate_to_offset(9);
        index.close().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 16);
        assert!(index.is_full(), "a closed index takes no entries");
        assert_eq!(index.lookup(8).unwrap(), OffsetPosition { offset: 7, position: 200 });

        let lazy = OffsetIndex::open_lazy(&path, 0, 800, false).unwrap();
        assert_eq!(lazy.entries(), 2);
        assert_eq!(lazy.lookup(5).unwrap(), OffsetPosition { offset: 3, position: 100 });
        assert!(lazy.sanity_check(1_000).is_ok());
        assert!(lazy.sanity_check(150).is_err());

        // Reopened as the active one (a truncation made it last again): entries come back.
        let mut active = OffsetIndex::open_lazy(&path, 0, 800, false).unwrap();
        active.make_active(800).unwrap();
        active.append(12, 400);
        assert_eq!(active.entries(), 3);
        active.flush().unwrap();
        let reread = OffsetIndex::open(&path, 0, 0, false).unwrap();
        assert_eq!(reread.last(), Some(OffsetPosition { offset: 12, position: 400 }));
    }

    #[test]
    fn preallocated_and_torn_files_fail_the_sanity_check() {
        // Proves a crash-length (zero-filled) file and a torn file are detected, so recovery
        // rebuilds them, and that a rebuild's flush rewrites the file from scratch.
        let dir = tempfile::tempdir().unwrap();
        let untrimmed = dir.path().join("c.index");
        fs::write(&untrimmed, vec![0u8; 80]).unwrap();
        let index = OffsetIndex::open(&untrimmed, 0, 80, false).unwrap();
        assert!(index.sanity_check(1_000).is_err());
        let torn = dir.path().join("d.index");
        fs::write(&torn, [0, 0, 0, 3, 0, 0, 0, 100, 0, 0]).unwrap();
        let mut index = OffsetIndex::open(&torn, 0, 80, true).unwrap();
        assert_eq!(index.entries(), 1);
        assert!(index.sanity_check(1_000).is_err());
        index.reset(80).unwrap();
        index.append(5, 50);
        index.flush().unwrap();
        assert_eq!(fs::read(&torn).unwrap(), [0, 0, 0, 5, 0, 0, 0, 50]);
    }

    #[test]
    fn time_index_only_grows() {
        // Proves entries are added only for larger timestamps and lookup floors by timestamp.
        let dir = tempfile::tempdir().unwrap();
        let mut index = TimeIndex::open(&dir.path().join("a.timeindex"), 10, 120, true).unwrap();
        assert!(index.maybe_append(1_000, 12));
        assert!(!index.maybe_append(900, 13));
        assert!(index.maybe_append(2_000, 20));
        assert_eq!(index.lookup(999).unwrap(), None);
        assert_eq!(index.lookup(1_500).unwrap(), Some(TimestampOffset { timestamp: 1_000, offset: 12 }));
        assert_eq!(index.lookup(5_000).unwrap(), Some(TimestampOffset { timestamp: 2_000, offset: 20 }));
        assert!(index.sanity_check(21).is_ok());
        assert!(index.sanity_check(15).is_err());
        index.truncate_to_offset(20);
        assert_eq!(index.entries(), 1);
    }
}
