//! Sparse, memory-mapped indexes of one segment, in Kafka's file formats.
//!
//! `.index`: 8-byte entries (offset relative to the segment base u32, file position u32).
//! `.timeindex`: 12-byte entries (timestamp i64, relative offset u32). Big endian, as Kafka
//! writes them. Both are append-only and strictly increasing in their key, so lookups are a
//! binary search over the map. The active segment's files are preallocated to
//! `segment.index.bytes` and trimmed to their entries when the segment is closed, as Kafka does;
//! a file opened with its preallocated length (a crash) reads as "full of garbage" and fails
//! [`OffsetIndex::sanity_check`], so recovery rebuilds it.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// A file of fixed-size entries mapped into memory. `entries` counts the valid ones. A closed
/// (trimmed) index keeps only its map, not a file descriptor: a broker with thousands of
/// segments would otherwise hold three descriptors per segment.
struct MappedFile {
    path: PathBuf,
    file: Option<File>,
    mmap: Option<MmapMut>,
    entry_size: usize,
    entries: usize,
    /// Entries the index may hold (`segment.index.bytes`), the limit that makes the log roll.
    max_entries: usize,
    /// Entries the file and its map cover now. A writable index is extended to `max_entries`
    /// only by `reserve`, right before its first append: opening after a clean shutdown must
    /// leave the files as they were, since the log is only marked dirty on its first mutation.
    mapped_entries: usize,
    /// The file did not end on an entry boundary when opened: a torn or cut file, which the
    /// sanity checks report (as Kafka's do) so that the index is rebuilt.
    torn: bool,
}

impl MappedFile {
    /// Opens or creates the file. An existing file's length decides its entry count; a writable
    /// index may grow to `max_bytes` (see `reserve`).
    fn open(path: &Path, entry_size: usize, max_bytes: usize, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let len = file.metadata()?.len() as usize;
        let entries = len / entry_size;
        let max_entries = if writable { (max_bytes / entry_size).max(entries) } else { entries };
        let torn = !len.is_multiple_of(entry_size);
        let mut index = MappedFile {
            path: path.to_path_buf(),
            file: Some(file),
            mmap: None,
            entry_size,
            entries,
            max_entries,
            mapped_entries: entries,
            torn,
        };
        index.remap()?;
        if !writable {
            index.file = None;
        }
        Ok(index)
    }

    /// The open file, reopened if a trim closed it.
    fn file(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            self.file = Some(OpenOptions::new().read(true).write(true).open(&self.path)?);
        }
        Ok(self.file.as_ref().expect("just opened"))
    }

    fn remap(&mut self) -> io::Result<()> {
        let len = self.mapped_entries * self.entry_size;
        self.mmap = None;
        if len > 0 {
            let file = self.file()?;
            // SAFETY: the log module is the only writer of partition files, and each index file
            // has exactly one `MappedFile` owner; nobody truncates it behind the map's back.
            let map = unsafe { MmapMut::map_mut(file)? };
            // Entries are touched one page at a time; without this the first touch of a fresh,
            // sparse, preallocated file reads ahead (and zero-fills) megabytes of holes.
            map.advise(memmap2::Advice::Random)?;
            self.mmap = Some(map);
        }
        Ok(())
    }

    fn entry(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.entries);
        let map = self.mmap.as_ref().expect("an index with entries is mapped");
        &map[i * self.entry_size..(i + 1) * self.entry_size]
    }

    fn push(&mut self, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.entry_size);
        assert!(!self.is_full(), "caller checks is_full before appending");
        assert!(self.entries < self.mapped_entries, "caller reserves before appending");
        let at = self.entries * self.entry_size;
        let map = self.mmap.as_mut().expect("a non-full index is mapped");
        map[at..at + self.entry_size].copy_from_slice(bytes);
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

    /// Drops entries past `entries`, zeroing their bytes: a cut-back or truncated index must
    /// read as the index that never had them (a crash then finds zeros, which fail the sanity
    /// check, rather than stale entries).
    fn truncate_entries(&mut self, entries: usize) {
        let keep = self.entries.min(entries);
        if keep < self.entries {
            if let Some(map) = self.mmap.as_mut() {
                let end = (self.entries * self.entry_size).min(map.len());
                map[keep * self.entry_size..end].fill(0);
            }
        }
        self.entries = keep;
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(map) = &self.mmap {
            map.flush()?;
        }
        match &self.file {
            Some(file) => file.sync_all(),
            None => Ok(()),
        }
    }

    /// Shrinks the file to its entries (a closed segment), then keeps only the map.
    fn trim(&mut self) -> io::Result<()> {
        self.flush()?;
        self.mmap = None;
        self.max_entries = self.entries;
        self.mapped_entries = self.entries;
        let len = (self.entries * self.entry_size) as u64;
        let file = self.file()?;
        file.set_len(len)?;
        file.sync_all()?;
        self.remap()?;
        self.file = None;
        Ok(())
    }

    /// Lets a trimmed index take entries again (the segment became active again); the file
    /// grows at the next `reserve`.
    fn grow(&mut self, max_bytes: usize) -> io::Result<()> {
        self.max_entries = (max_bytes / self.entry_size).max(self.entries);
        Ok(())
    }

    /// Preallocates the file to `max_entries` (Kafka's `segment.index.bytes`) and maps it, so
    /// appends need no remap; a no-op once done.
    fn reserve(&mut self) -> io::Result<()> {
        if self.mapped_entries >= self.max_entries {
            return Ok(());
        }
        self.mmap = None;
        let len = (self.max_entries * self.entry_size) as u64;
        self.file()?.set_len(len)?;
        self.mapped_entries = self.max_entries;
        self.remap()
    }

    fn reset(&mut self) {
        self.entries = 0;
        self.torn = false;
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
    file: MappedFile,
}

impl OffsetIndex {
    pub const ENTRY_SIZE: usize = 8;

    pub fn open(path: &Path, base_offset: i64, max_bytes: usize, writable: bool) -> io::Result<Self> {
        Ok(OffsetIndex { base_offset, file: MappedFile::open(path, Self::ENTRY_SIZE, max_bytes, writable)? })
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

    /// The last entry at or below `offset`, or the segment start when there is none.
    pub fn lookup(&self, offset: i64) -> OffsetPosition {
        let base = self.base_offset;
        match self.file.floor(offset, |e| base + u32::from_be_bytes(e[0..4].try_into().expect("4")) as i64) {
            Some(i) => self.entry(i),
            None => OffsetPosition { offset: base, position: 0 },
        }
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

    pub fn reset(&mut self) {
        self.file.reset();
    }
    /// Keeps only the first `entries` entries.
    pub fn truncate_entries(&mut self, entries: usize) {
        self.file.truncate_entries(entries);
    }
    pub fn flush(&self) -> io::Result<()> {
        self.file.flush()
    }
    pub fn trim(&mut self) -> io::Result<()> {
        self.file.trim()
    }
    pub fn grow(&mut self, max_bytes: usize) -> io::Result<()> {
        self.file.grow(max_bytes)
    }
    pub fn reserve(&mut self) -> io::Result<()> {
        self.file.reserve()
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
    file: MappedFile,
}

impl TimeIndex {
    pub const ENTRY_SIZE: usize = 12;

    pub fn open(path: &Path, base_offset: i64, max_bytes: usize, writable: bool) -> io::Result<Self> {
        Ok(TimeIndex { base_offset, file: MappedFile::open(path, Self::ENTRY_SIZE, max_bytes, writable)? })
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
    pub fn lookup(&self, timestamp: i64) -> Option<TimestampOffset> {
        self.file.floor(timestamp, |e| i64::from_be_bytes(e[0..8].try_into().expect("8"))).map(|i| self.entry(i))
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

    /// Keeps only the first `entries` entries.
    pub fn truncate_entries(&mut self, entries: usize) {
        self.file.truncate_entries(entries);
    }
    pub fn reset(&mut self) {
        self.file.reset();
    }
    pub fn flush(&self) -> io::Result<()> {
        self.file.flush()
    }
    pub fn trim(&mut self) -> io::Result<()> {
        self.file.trim()
    }
    pub fn grow(&mut self, max_bytes: usize) -> io::Result<()> {
        self.file.grow(max_bytes)
    }
    pub fn reserve(&mut self) -> io::Result<()> {
        self.file.reserve()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_is_a_floor_search() {
        // Proves lookup returns the last entry at or below the target, or the segment start.
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("a.index"), 100, 1024, true).unwrap();
        index.reserve().unwrap();
        assert_eq!(index.lookup(150), OffsetPosition { offset: 100, position: 0 });
        index.append(109, 4096);
        index.append(130, 9000);
        assert_eq!(index.lookup(105), OffsetPosition { offset: 100, position: 0 });
        assert_eq!(index.lookup(109), OffsetPosition { offset: 109, position: 4096 });
        assert_eq!(index.lookup(129), OffsetPosition { offset: 109, position: 4096 });
        assert_eq!(index.lookup(1_000), OffsetPosition { offset: 130, position: 9000 });
        index.truncate_to_offset(130);
        assert_eq!(index.entries(), 1);
    }

    #[test]
    fn trimmed_index_reopens_with_its_entries_and_preallocated_one_fails_sanity() {
        // Proves a clean close keeps entries exactly, and a crash-length file is detected.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.index");
        {
            let mut index = OffsetIndex::open(&path, 0, 800, true).unwrap();
            index.reserve().unwrap();
            index.append(3, 100);
            index.append(7, 200);
            index.trim().unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16);
        let index = OffsetIndex::open(&path, 0, 800, false).unwrap();
        assert_eq!(index.entries(), 2);
        assert!(index.sanity_check(1_000).is_ok());
        assert!(index.sanity_check(150).is_err());
        drop(index);
        // An untrimmed (preallocated) file as left by a crash: zero-filled entries.
        let untrimmed = dir.path().join("c.index");
        std::fs::write(&untrimmed, vec![0u8; 80]).unwrap();
        let index = OffsetIndex::open(&untrimmed, 0, 80, false).unwrap();
        assert!(index.sanity_check(1_000).is_err());
    }

    #[test]
    fn time_index_only_grows() {
        // Proves entries are added only for larger timestamps and lookup floors by timestamp.
        let dir = tempfile::tempdir().unwrap();
        let mut index = TimeIndex::open(&dir.path().join("a.timeindex"), 10, 120, true).unwrap();
        index.reserve().unwrap();
        assert!(index.maybe_append(1_000, 12));
        assert!(!index.maybe_append(900, 13));
        assert!(index.maybe_append(2_000, 20));
        assert_eq!(index.lookup(999), None);
        assert_eq!(index.lookup(1_500), Some(TimestampOffset { timestamp: 1_000, offset: 12 }));
        assert_eq!(index.lookup(5_000), Some(TimestampOffset { timestamp: 2_000, offset: 20 }));
        assert!(index.sanity_check(21).is_ok());
        assert!(index.sanity_check(15).is_err());
        index.truncate_to_offset(20);
        assert_eq!(index.entries(), 1);
    }
}
