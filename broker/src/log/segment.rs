//! One segment of a partition log: `<base>.log`, `<base>.index`, `<base>.timeindex`.
//!
//! The `.log` file holds RecordBatch v2 bytes back to back, exactly as the protocol carries
//! them; the indexes are sparse maps into it (see [`super::index`]). A segment knows its size,
//! its next offset and its largest timestamp; everything else is read from the file.
//! Invariant: `size` is the length of the `.log` file and always ends on a batch boundary. A
//! segment holds no descriptor of its own: its `.log` is reached through the node's
//! [`OpenFiles`] (see [`super::files`]), and its indexes hold none either.

use std::fs::{self, File};
use std::io::{self, IoSlice, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::batch::{self, BatchHeader, HEADER_SIZE, LOG_OVERHEAD, NO_TIMESTAMP};
use super::files::{OpenFiles, SegmentFile};
use super::index::{FileMark, OffsetIndex, TimeIndex};

/// Bytes of a batch header needed to know its offsets and size (through `last_offset_delta`).
const OFFSETS_PREFIX: usize = batch::LAST_OFFSET_DELTA_AT + 4;

pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";

/// Kafka's file name for a segment file: the base offset in 20 digits.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// The index settings a segment needs.
#[derive(Debug, Clone, Copy)]
pub struct IndexSettings {
    pub index_interval_bytes: u32,
    pub segment_index_bytes: u32,
}

/// How far a recovery scan got through a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte of the file is part of a valid batch.
    Clean,
    /// A batch at `position` is torn or corrupt; the file was cut there.
    Truncated { position: u64, reason: String },
}

/// What a segment looked like before an append, so that a failed append can be undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendMark {
    size: u64,
    index_entries: usize,
    time_index_entries: usize,
    index_file: FileMark,
    time_index_file: FileMark,
    bytes_since_index_entry: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    first_batch_timestamp: Option<i64>,
}

pub struct Segment {
    base_offset: i64,
    log: Arc<SegmentFile>,
    size: u64,
    index: OffsetIndex,
    time_index: TimeIndex,
    settings: IndexSettings,
    bytes_since_index_entry: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// The first batch's max timestamp: `segment.ms` counts from it, as in Kafka.
    first_batch_timestamp: Option<i64>,
    /// When this process created or opened the segment: `segment.ms` counts from it when the
    /// batches carry no timestamps.
    created_ms: i64,
}

impl Segment {
    /// Creates an empty segment, replacing stale files with the same base offset.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        settings: IndexSettings,
        now_ms: i64,
        files: &Arc<OpenFiles>,
    ) -> io::Result<Segment> {
        #[cfg(test)]
        if fault::create_fails() {
            return Err(io::Error::other("injected segment creation failure"));
        }
        let log = files.handle(dir.join(file_name(base_offset, LOG_SUFFIX)), true)?;
        let index_path = dir.join(file_name(base_offset, INDEX_SUFFIX));
        let time_path = dir.join(file_name(base_offset, TIME_INDEX_SUFFIX));
        for path in [&index_path, &time_path] {
            if path.exists() {
                fs::remove_file(path)?;
            }
        }
        let max = settings.segment_index_bytes as usize;
        // No index files until the segment rolls, flushes or closes: the entries live in memory.
        Ok(Segment {
            base_offset,
            log: Arc::new(log),
            size: 0,
            index: OffsetIndex::open(&index_path, base_offset, max, true)?,
            time_index: TimeIndex::open(&time_path, base_offset, max, true)?,
            settings,
            bytes_since_index_entry: 0,
            next_offset: base_offset,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            first_batch_timestamp: None,
            created_ms: now_ms,
        })
    }

    /// Opens an existing segment. With `recover`, every batch is validated (CRC included), the
    /// indexes are rebuilt and a torn or corrupt tail is dropped from the segment's size; the
    /// caller then cuts the file with [`Segment::cut_to_validated_size`]. Without it, the indexes are
    /// trusted after a sanity check (and rebuilt if they fail it), and only the tail after the
    /// last index entry is read to learn the next offset and largest timestamp.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        base_offset: i64,
        settings: IndexSettings,
        active: bool,
        recover: bool,
        now_ms: i64,
        files: &Arc<OpenFiles>,
    ) -> io::Result<(Segment, ScanEnd)> {
        let log = files.handle(dir.join(file_name(base_offset, LOG_SUFFIX)), false)?;
        let size = log.get()?.metadata()?.len();
        let max = settings.segment_index_bytes as usize;
        let index_path = dir.join(file_name(base_offset, INDEX_SUFFIX));
        let time_index_path = dir.join(file_name(base_offset, TIME_INDEX_SUFFIX));
        // A missing index file (lost, or deleted to force a rebuild as Kafka allows) would open
        // empty and pass every check, yet an empty time index loses the largest timestamp.
        let indexes_missing = !index_path.exists() || !time_index_path.exists();
        // Opened as closed indexes (nothing read yet): a rebuild would not need the files.
        let index = OffsetIndex::open_lazy(&index_path, base_offset, max, false)?;
        let time_index = TimeIndex::open_lazy(&time_index_path, base_offset, max, false)?;
        let mut segment = Segment {
            base_offset,
            log: Arc::new(log),
            size,
            index,
            time_index,
            settings,
            bytes_since_index_entry: 0,
            next_offset: base_offset,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            first_batch_timestamp: None,
            created_ms: now_ms,
        };
        let trusted = !recover && !indexes_missing && {
            segment.index.load()?;
            segment.time_index.load()?;
            segment.index.sanity_check(size).is_ok() && segment.load_tail().is_ok()
        };
        let end = if trusted {
            ScanEnd::Clean
        } else {
            if !recover {
                tracing::warn!(segment = %segment.log_path().display(), "index missing or failed its sanity check; rebuilding");
            }
            segment.rebuild()?
        };
        if active {
            segment.make_active(settings)?;
        } else {
            // A rebuilt index is written out; a trusted one gives its map back until a lookup:
            // a node opening thousands of segments maps none of them.
            segment.index.close()?;
            segment.time_index.close()?;
        }
        Ok((segment, end))
    }

    /// Reads the batches after the last index entry: sets next offset, bytes since the last
    /// entry and the largest timestamp (the time index's last entry covers everything before).
    /// `Err` names what is inconsistent; the caller then rebuilds the indexes.
    fn load_tail(&mut self) -> Result<(), &'static str> {
        if let Some(last) = self.time_index.last() {
            // The entry names the batch that first reached its timestamp; a zeroed or garbage
            // entry that passed the sanity check does not, and would fake the largest timestamp.
            if last.timestamp != NO_TIMESTAMP {
                match self.locate(last.offset) {
                    Ok(Some((_, h))) if h.last_offset() == last.offset && h.max_timestamp == last.timestamp => {}
                    _ => return Err("the last time index entry does not match its batch"),
                }
            }
            self.max_timestamp = last.timestamp;
            self.offset_of_max_timestamp = last.offset;
        }
        let file = self.log.get().map_err(|_| "the segment file cannot be opened")?;
        let last_entry = self.index.last();
        let mut position = last_entry.map_or(0, |e| e.position as u64);
        self.bytes_since_index_entry = 0;
        while position < self.size {
            let header = self.read_header(&file, position).map_err(|_| "unreadable batch header in the tail")?;
            header.validate().map_err(|_| "invalid batch header in the tail")?;
            let end = position + header.size() as u64;
            if end > self.size || header.base_offset < self.next_offset {
                return Err("batches in the tail do not line up");
            }
            if let Some(entry) = last_entry.filter(|e| e.position as u64 == position) {
                if entry.offset != header.last_offset() {
                    return Err("the last index entry does not match its batch");
                }
            }
            // Kafka's rule: the counter restarts at the indexed batch, which it then includes.
            self.bytes_since_index_entry += header.size() as u64;
            self.note_timestamp(&header);
            self.next_offset = header.last_offset() + 1;
            position = end;
        }
        self.time_index.sanity_check(self.next_offset).map_err(|e| e.reason)?;
        if self.size > 0 {
            let first = self.read_header(&file, 0).map_err(|_| "unreadable first batch header")?;
            self.rolling_timestamp_from(&first);
        }
        Ok(())
    }

    /// Validates every batch from the start, rebuilding both indexes; cuts the file at the first
    /// batch that is torn, corrupt, or out of offset order.
    fn rebuild(&mut self) -> io::Result<ScanEnd> {
        // Rebuilt in memory as active indexes, whatever the old files held (a closed segment's
        // may be too short for the entries: a missing or cut file); `open` writes them out.
        self.index.reset(self.settings.segment_index_bytes as usize)?;
        self.time_index.reset(self.settings.segment_index_bytes as usize)?;
        let size = self.size;
        self.size = 0;
        self.bytes_since_index_entry = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = NO_TIMESTAMP;
        self.offset_of_max_timestamp = self.base_offset;
        let mut scanner = Scanner::new(self.log.get()?, 0, size);
        let mut end = ScanEnd::Clean;
        loop {
            let position = scanner.position();
            let header = match scanner.next_batch(true) {
                Ok(Some((header, _))) => header,
                Ok(None) => break,
                Err(ScanError::Io(e)) => return Err(e),
                Err(ScanError::Corrupt(reason)) => {
                    end = ScanEnd::Truncated { position, reason };
                    break;
                }
            };
            let relative = header.last_offset() - self.base_offset;
            if header.base_offset < self.next_offset || !(0..=i32::MAX as i64).contains(&relative) {
                end = ScanEnd::Truncated { position, reason: "offsets out of order".to_string() };
                break;
            }
            if position == 0 {
                self.rolling_timestamp_from(&header);
            }
            self.index_batch(&header, position);
            self.size = position + header.size() as u64;
        }
        if self.max_timestamp != NO_TIMESTAMP {
            // Kafka's `LogSegment.recover`: a recovered segment gets the entry a clean close (or
            // roll) would have written, so a rebuilt time index equals the one Kafka left.
            self.time_index.maybe_append_unchecked(self.max_timestamp, self.offset_of_max_timestamp);
        }
        if let ScanEnd::Truncated { position, reason } = &end {
            tracing::warn!(segment = %self.log_path().display(), position, reason, bytes_removed = size - position, "cutting a torn or corrupt segment tail");
        }
        assert_eq!(self.size, scanner_end(&end, size));
        Ok(end)
    }

    /// Cuts the `.log` file to the size recovery validated (a no-op when nothing was damaged).
    /// `Segment::open` leaves the cut to its caller, so that the log can first delete the
    /// segments after a damaged one: cutting first and crashing before the deletion would let
    /// the next open serve batches from after the damage.
    pub fn cut_to_validated_size(&self) -> io::Result<()> {
        let file = self.log.get()?;
        if file.metadata()?.len() != self.size {
            file.set_len(self.size)?;
            file.sync_all()?;
        }
        Ok(())
    }

    fn rolling_timestamp_from(&mut self, first: &BatchHeader) {
        self.first_batch_timestamp = Some(first.max_timestamp).filter(|t| *t >= 0);
    }

    fn note_timestamp(&mut self, header: &BatchHeader) {
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset();
        }
    }

    /// Updates the indexes and the segment's summary for a batch written at `position`, with
    /// Kafka's rule: an entry once more than `index.interval.bytes` were written since the last.
    fn index_batch(&mut self, header: &BatchHeader, position: u64) {
        self.note_timestamp(header);
        // A full index takes no more entries: the log rolls before appending to a non-empty
        // segment whose index is full (with `segment.index.bytes` below one entry, after every
        // batch), so this skips entries only for the batch that opens a segment (which is never
        // indexed anyway) or when a rebuild or compaction meets a segment written with a larger
        // `segment.index.bytes`. A sparser index is still correct: lookups scan forward from the
        // floor entry. Both indexes skip together, so the tail after the last offset index entry
        // still holds every batch the time index does not cover.
        let index_room = !self.index.is_full() && !self.time_index.is_full();
        if index_room && self.bytes_since_index_entry > self.settings.index_interval_bytes as u64 {
            self.index.append(header.last_offset(), position as u32);
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += header.size() as u64;
        self.next_offset = header.last_offset() + 1;
    }

    /// Appends one batch: `header` is the batch's 61-byte header with offsets already assigned,
    /// `body` the bytes after it. On a failed write the file is cut back to its old size, so the
    /// segment never holds a partial batch.
    pub fn append(&mut self, header_bytes: &[u8; HEADER_SIZE], body: &[u8]) -> io::Result<()> {
        let header = BatchHeader::read(header_bytes).expect("61 bytes");
        debug_assert_eq!(header.size(), HEADER_SIZE + body.len());
        assert!(header.base_offset >= self.next_offset, "offsets grow within a segment");
        assert!(header.last_offset() - self.base_offset <= i32::MAX as i64, "relative offset fits");
        // Before the write: a failure to get the file leaves the segment untouched.
        let file = self.log.get()?;
        let position = self.size;
        if let Err(e) = write_batch(&file, header_bytes, body) {
            if let Err(cut) = file.set_len(position) {
                tracing::error!(segment = %self.log_path().display(), error = %cut, "could not cut a failed append");
                return Err(cut);
            }
            return Err(e);
        }
        if self.size == 0 {
            self.rolling_timestamp_from(&header);
        }
        self.size += header.size() as u64;
        self.index_batch(&header, position);
        Ok(())
    }

    /// Where the segment stands now, for [`Segment::cut_back`].
    pub fn append_mark(&self) -> AppendMark {
        AppendMark {
            size: self.size,
            index_entries: self.index.entries(),
            time_index_entries: self.time_index.entries(),
            index_file: self.index.file_mark(),
            time_index_file: self.time_index.file_mark(),
            bytes_since_index_entry: self.bytes_since_index_entry,
            next_offset: self.next_offset,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
            first_batch_timestamp: self.first_batch_timestamp,
        }
    }

    /// Undoes every append since `mark` (the log's failed multi-batch append): the file is cut
    /// back to its old size and fsynced, index entries added since are dropped (and the index
    /// files put back as they were, should a roll have written them), and the segment takes
    /// appends again even if a roll closed it meanwhile.
    pub fn cut_back(&mut self, mark: &AppendMark, settings: IndexSettings) -> io::Result<()> {
        assert!(mark.size <= self.size && mark.index_entries <= self.index.entries(), "a mark of this segment's past");
        self.make_active(settings)?;
        self.index.truncate_entries(mark.index_entries);
        self.time_index.truncate_entries(mark.time_index_entries);
        self.index.restore_file(mark.index_file)?;
        self.time_index.restore_file(mark.time_index_file)?;
        let file = self.log.get()?;
        file.set_len(mark.size)?;
        file.sync_all()?;
        self.size = mark.size;
        self.bytes_since_index_entry = mark.bytes_since_index_entry;
        self.next_offset = mark.next_offset;
        self.max_timestamp = mark.max_timestamp;
        self.offset_of_max_timestamp = mark.offset_of_max_timestamp;
        self.first_batch_timestamp = mark.first_batch_timestamp;
        Ok(())
    }

    /// Position of the first batch whose last offset is `>= offset`, if the segment has one.
    pub fn locate(&self, offset: i64) -> io::Result<Option<(u64, BatchHeader)>> {
        let mut position = self.index.lookup(offset)?.position as u64;
        if position >= self.size {
            return Ok(None);
        }
        let file = self.log.get()?;
        while position < self.size {
            let header = self.read_header(&file, position)?;
            if header.last_offset() >= offset {
                return Ok(Some((position, header)));
            }
            position += header.size() as u64;
        }
        Ok(None)
    }

    /// Reads the offsets part of the header at `position` (a valid batch boundary).
    fn read_header(&self, file: &File, position: u64) -> io::Result<BatchHeader> {
        let mut buf = [0u8; HEADER_SIZE];
        let len = (self.size - position).min(HEADER_SIZE as u64) as usize;
        if len < OFFSETS_PREFIX {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "batch header past the end of the segment"));
        }
        file.read_exact_at(&mut buf[..len], position)?;
        BatchHeader::read(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// A handle for reading `[start, end)` of the log file outside any lock; it holds the file
    /// open until dropped, even if the cache evicts it meanwhile.
    pub fn slice(&self, start: u64) -> io::Result<FileSlice> {
        Ok(FileSlice { file: self.log.get()?, start, end: self.size })
    }

    /// Cuts every batch whose last offset is `>= offset`; returns the offset the segment now
    /// ends at (`offset`, or the base of the batch that contained it).
    pub fn truncate_to(&mut self, offset: i64, settings: IndexSettings) -> io::Result<i64> {
        let Some((position, header)) = self.locate(offset)? else { return Ok(offset) };
        let new_next = header.base_offset.min(offset);
        self.make_active(settings)?;
        self.log.get()?.set_len(position)?;
        self.size = position;
        self.index.truncate_to_offset(header.base_offset);
        self.time_index.truncate_to_offset(header.base_offset);
        // Recompute the summary from what remains; the tail after the last entry is short.
        self.bytes_since_index_entry = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = NO_TIMESTAMP;
        self.offset_of_max_timestamp = self.base_offset;
        if self.load_tail().is_err() {
            self.rebuild()?;
            self.cut_to_validated_size()?;
        }
        self.next_offset = new_next.max(self.next_offset);
        Ok(self.next_offset)
    }

    /// Lets the segment take appends again (a closed segment's indexes are read into memory).
    pub fn make_active(&mut self, settings: IndexSettings) -> io::Result<()> {
        self.index.make_active(settings.segment_index_bytes as usize)?;
        self.time_index.make_active(settings.segment_index_bytes as usize)
    }

    /// Makes this the last closed segment: final time index entry, fsync of the `.log`, index
    /// files written with exactly their entries and fsynced, their memory freed.
    pub fn close_active(&mut self) -> io::Result<()> {
        if self.max_timestamp != NO_TIMESTAMP {
            // Kafka's rule on roll: the last entry holds the segment's largest timestamp even
            // if it was added since the last interval.
            self.time_index.maybe_append_unchecked(self.max_timestamp, self.offset_of_max_timestamp);
        }
        self.flush()?;
        self.index.close()?;
        self.time_index.close()
    }

    /// fsyncs the `.log` (through the cached descriptor, or one opened for it: Linux writes back
    /// an inode's dirty pages whichever descriptor asks), then writes the index entries added
    /// since the last flush. Both index files are written at the same moment, so they agree as
    /// `load_tail` expects; after a crash the active segment is rebuilt from its `.log` anyway.
    pub fn flush(&mut self) -> io::Result<()> {
        self.log.get()?.sync_data()?;
        self.index.flush()?;
        self.time_index.flush()
    }

    pub fn delete_files(self) -> io::Result<()> {
        let paths =
            [self.log_path().to_path_buf(), self.index.path().to_path_buf(), self.time_index.path().to_path_buf()];
        drop(self);
        for path in paths {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    /// The first batch's max timestamp (Kafka's `firstBatchTimestamp`), if known.
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp
    }
    /// How long this segment has been collecting, for `segment.ms`: Kafka's rule compares the
    /// incoming batch's timestamp with the first batch's (so old timestamps do not roll every
    /// append), and falls back to wall-clock age when batches carry no timestamps.
    pub fn time_waited_for_roll(&self, now_ms: i64, batch_max_timestamp: i64) -> i64 {
        match self.first_batch_timestamp {
            // Saturating: client timestamps are arbitrary i64s, and the difference must not wrap.
            Some(first) => batch_max_timestamp.saturating_sub(first),
            None => now_ms.saturating_sub(self.created_ms),
        }
    }
    pub fn indexes_full(&self) -> bool {
        self.index.is_full() || self.time_index.is_full()
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    pub fn log_path(&self) -> &Path {
        self.log.path()
    }
    /// The `.log` file's handle (compaction reads closed segments through it, without the lock).
    pub fn file(&self) -> &Arc<SegmentFile> {
        &self.log
    }
    pub fn scanner(&self, from: u64) -> io::Result<Scanner> {
        Ok(Scanner::new(self.log.get()?, from, self.size))
    }
}

fn scanner_end(end: &ScanEnd, size: u64) -> u64 {
    match end {
        ScanEnd::Clean => size,
        ScanEnd::Truncated { position, .. } => *position,
    }
}

impl TimeIndex {
    /// Appends the roll-time entry; skips it if the timestamp is not larger (nothing new).
    fn maybe_append_unchecked(&mut self, timestamp: i64, offset: i64) {
        if self.is_full() {
            return;
        }
        self.maybe_append(timestamp, offset);
    }
}

/// What a read does with a first batch larger than its byte limit (Kafka's `minOneMessage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstBatch {
    /// Returned whole, so a consumer always makes progress past a large batch.
    Whole,
    /// Not returned: nothing beyond the limit.
    WithinLimit,
}

/// `[start, end)` of a segment file, readable without holding the log's lock: the file handle
/// is shared. Appends only add bytes after `end`, and a failed append's cut-back removes only
/// the bytes that append added (after every `end` handed out before it). Truncation, retention
/// and compaction can remove or replace bytes before `end`: a read racing them gets a short
/// read (`UnexpectedEof`) or, if the file was cut and appended to again, the batches now at
/// those positions. Readers bound reads by the high watermark, which a leader never truncates
/// below, so on a leader only the first case can happen.
#[derive(Clone)]
pub struct FileSlice {
    file: Arc<File>,
    start: u64,
    end: u64,
}

impl FileSlice {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Reads whole batches from the start of the slice: at most `max_bytes`, stopping before
    /// the first batch whose base offset is `>= upper_bound_offset`, but always the first batch
    /// (when it is below the bound) even if it is larger than `max_bytes`.
    pub fn read_batches(&self, max_bytes: usize, upper_bound_offset: i64) -> io::Result<Bytes> {
        self.read_batches_limited(max_bytes, upper_bound_offset, FirstBatch::Whole)
    }

    /// [`FileSlice::read_batches`] with a choice for a first batch larger than `max_bytes`:
    /// a fetch gives that exception only to the first partition that returns data (KIP-74).
    /// The buffer is sized by the bytes the slice holds, never by `max_bytes` alone.
    pub fn read_batches_limited(
        &self,
        max_bytes: usize,
        upper_bound_offset: i64,
        first_batch: FirstBatch,
    ) -> io::Result<Bytes> {
        if max_bytes == 0 && first_batch == FirstBatch::WithinLimit {
            return Ok(Bytes::new());
        }
        let want = (max_bytes as u64).min(self.len()) as usize;
        let mut buf = read_exact(&self.file, self.start, want.max(LOG_OVERHEAD.min(self.len() as usize)))?;
        let mut end = 0usize;
        while let Some((base_offset, size)) = BatchHeader::peek_size(&buf[end..]) {
            if base_offset >= upper_bound_offset {
                break;
            }
            if end + size > buf.len() {
                if end == 0 && first_batch == FirstBatch::Whole && self.start + size as u64 <= self.end {
                    // The first batch is larger than max_bytes: return it whole, as Kafka does.
                    buf = read_exact(&self.file, self.start, size)?;
                    end = size;
                }
                break;
            }
            end += size;
        }
        buf.truncate(end);
        Ok(buf.freeze())
    }
}

/// `pread` of exactly `len` bytes into a fresh buffer, without zero-filling it first (on the
/// fetch path the memset would cost a fifth of the read).
fn read_exact(file: &File, position: u64, len: usize) -> io::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let filled = buf.len();
        let spare = buf.spare_capacity_mut();
        // SAFETY: `spare` is writable memory of at least `len - filled` bytes; pread writes at
        // most that many and reports how many it wrote.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                len - filled,
                (position + filled as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "segment ended before the slice did"));
        }
        // SAFETY: pread initialised the `n` bytes after `filled`.
        unsafe { buf.set_len(filled + n as usize) };
    }
    Ok(buf)
}

/// Batches up to this size are copied behind their header into one buffer and written with one
/// `write()`: for small batches the kernel's iovec path costs more than the copy.
const COALESCE_MAX_BYTES: usize = 64 << 10;

thread_local! {
    /// Per-thread scratch for coalesced writes; it keeps its capacity, so appends do not allocate.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn write_batch(mut file: &File, header: &[u8; HEADER_SIZE], body: &[u8]) -> io::Result<()> {
    #[cfg(test)]
    if fault::write_fails() {
        // A torn write: half the batch reaches the file before the error, as a full disk does.
        let half = (HEADER_SIZE + body.len()) / 2;
        file.write_all(&header[..half.min(HEADER_SIZE)])?;
        return Err(io::Error::other("injected write failure"));
    }
    if body.len() > COALESCE_MAX_BYTES {
        return write_all_vectored(file, &mut [IoSlice::new(header), IoSlice::new(body)]);
    }
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        scratch.clear();
        scratch.extend_from_slice(header);
        scratch.extend_from_slice(body);
        file.write_all(&scratch)
    })
}

fn write_all_vectored(mut file: &File, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "failed to write whole batch")),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Test-only failure points: the Nth batch write or segment creation on this thread fails.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::Cell;

    thread_local! {
        static WRITES_LEFT: Cell<Option<u32>> = const { Cell::new(None) };
        static CREATES_LEFT: Cell<Option<u32>> = const { Cell::new(None) };
    }

    /// The write after `ok_writes` more successful ones fails (`None`: never).
    pub fn fail_write_after(ok_writes: Option<u32>) {
        WRITES_LEFT.with(|w| w.set(ok_writes));
    }
    /// The segment creation after `ok_creates` more successful ones fails (`None`: never).
    pub fn fail_create_after(ok_creates: Option<u32>) {
        CREATES_LEFT.with(|c| c.set(ok_creates));
    }

    fn take(cell: &'static std::thread::LocalKey<Cell<Option<u32>>>) -> bool {
        cell.with(|c| match c.get() {
            Some(0) => {
                c.set(None);
                true
            }
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        })
    }
    pub(super) fn write_fails() -> bool {
        take(&WRITES_LEFT)
    }
    pub(super) fn create_fails() -> bool {
        take(&CREATES_LEFT)
    }
}

/// Why a scan stopped early.
#[derive(Debug)]
pub enum ScanError {
    Io(io::Error),
    /// The bytes at the scan position are not a whole valid batch.
    Corrupt(String),
}

/// Sequential reader of whole batches from a segment file, reading in large windows.
pub struct Scanner {
    file: Arc<File>,
    position: u64,
    end: u64,
    window: Vec<u8>,
    window_start: u64,
}

impl Scanner {
    const WINDOW: usize = 1 << 20;

    pub fn new(file: Arc<File>, position: u64, end: u64) -> Scanner {
        Scanner { file, position, end, window: Vec::new(), window_start: position }
    }

    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next batch and its bytes, or `None` at the end. With `verify_crc`, the CRC is
    /// checked too.
    pub fn next_batch(&mut self, verify_crc: bool) -> Result<Option<(BatchHeader, &[u8])>, ScanError> {
        if self.position >= self.end {
            return Ok(None);
        }
        let remaining = self.end - self.position;
        let prefix = self.ensure(HEADER_SIZE.min(remaining as usize))?;
        if prefix.len() < HEADER_SIZE {
            return Err(ScanError::Corrupt(format!("{} trailing bytes are not a batch header", prefix.len())));
        }
        let header = BatchHeader::read(prefix).map_err(|e| ScanError::Corrupt(e.to_string()))?;
        header.validate().map_err(|e| ScanError::Corrupt(e.to_string()))?;
        let size = header.size();
        if size as u64 > remaining {
            return Err(ScanError::Corrupt(format!("batch of {size} bytes runs past the end ({remaining} left)")));
        }
        self.ensure(size)?;
        let at = (self.position - self.window_start) as usize;
        let bytes = &self.window[at..at + size];
        if verify_crc {
            batch::validate_first(bytes).map_err(|e| ScanError::Corrupt(e.to_string()))?;
        }
        self.position += size as u64;
        Ok(Some((header, bytes)))
    }

    /// Makes `len` bytes from the current position available in the window.
    fn ensure(&mut self, len: usize) -> Result<&[u8], ScanError> {
        let at = (self.position - self.window_start) as usize;
        if at + len > self.window.len() {
            let want = len.max(Self::WINDOW).min((self.end - self.position) as usize).max(len);
            self.window.resize(want, 0);
            self.file.read_exact_at(&mut self.window, self.position).map_err(ScanError::Io)?;
            self.window_start = self.position;
        }
        let at = (self.position - self.window_start) as usize;
        Ok(&self.window[at..at + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::Compression;
    use crate::log::records::BatchBuilder;

    const SETTINGS: IndexSettings = IndexSettings { index_interval_bytes: 300, segment_index_bytes: 1024 };

    /// A closed segment of nine one-record batches of about 135 bytes (offsets 0..9, timestamps
    /// 1000..1009), written and closed as the log does: an index entry every third batch (3, 6),
    /// so the last batch, which holds the largest timestamp, is not indexed.
    fn closed_segment(dir: &Path) {
        let mut segment = Segment::create(dir, 0, SETTINGS, 0, &OpenFiles::new(4)).unwrap();
        for offset in 0..9i64 {
            let mut builder = BatchBuilder::new(Compression::None).base_offset(offset);
            builder.push(1_000 + offset, Some(b"key"), Some(&[b'v'; 60]), &[]);
            let batch = builder.build().unwrap();
            let header: [u8; HEADER_SIZE] = batch.bytes()[..HEADER_SIZE].try_into().unwrap();
            segment.append(&header, &batch.bytes()[HEADER_SIZE..]).unwrap();
        }
        segment.close_active().unwrap();
    }

    fn time_entries(segment: &Segment) -> Vec<(i64, i64)> {
        let index = segment.time_index();
        index.load().unwrap();
        (0..index.entries()).map(|i| index.entry(i)).map(|e| (e.timestamp, e.offset)).collect()
    }

    #[test]
    fn recovering_a_closed_segment_with_missing_index_files_does_not_panic() {
        // Regression: rebuilding a closed segment's indexes into files opened at their old (here
        // empty) length panicked with "caller checks is_full before appending".
        let dir = tempfile::tempdir().unwrap();
        closed_segment(dir.path());
        let before = fs::read(dir.path().join(file_name(0, INDEX_SUFFIX))).unwrap();
        assert!(!before.is_empty(), "the interval is small enough for offset index entries");
        fs::remove_file(dir.path().join(file_name(0, INDEX_SUFFIX))).unwrap();
        fs::remove_file(dir.path().join(file_name(0, TIME_INDEX_SUFFIX))).unwrap();
        let (segment, end) = Segment::open(dir.path(), 0, SETTINGS, false, true, 0, &OpenFiles::new(4)).unwrap();
        assert_eq!(end, ScanEnd::Clean);
        assert_eq!(segment.next_offset(), 9);
        drop(segment);
        // Rebuilt and trimmed to exactly the entries the appends wrote.
        assert_eq!(fs::read(dir.path().join(file_name(0, INDEX_SUFFIX))).unwrap(), before);
    }

    #[test]
    fn recovery_keeps_the_time_index_entry_written_at_roll() {
        // Regression: a recovered segment lost the last time index entry that closing it adds
        // (Kafka's LogSegment.recover appends it too), so rebuilt .timeindex files differed.
        let dir = tempfile::tempdir().unwrap();
        closed_segment(dir.path());
        let (segment, _) = Segment::open(dir.path(), 0, SETTINGS, false, false, 0, &OpenFiles::new(4)).unwrap();
        let written = time_entries(&segment);
        assert_eq!(written, vec![(1_003, 3), (1_006, 6), (1_008, 8)], "closing adds the largest timestamp");
        drop(segment);
        let (segment, _) = Segment::open(dir.path(), 0, SETTINGS, false, true, 0, &OpenFiles::new(4)).unwrap();
        assert_eq!(time_entries(&segment), written);
    }

    fn append_batches(segment: &mut Segment, offsets: std::ops::Range<i64>) {
        for offset in offsets {
            let mut builder = BatchBuilder::new(Compression::None).base_offset(offset);
            builder.push(1_000 + offset, Some(b"key"), Some(&[b'v'; 60]), &[]);
            let batch = builder.build().unwrap();
            let header: [u8; HEADER_SIZE] = batch.bytes()[..HEADER_SIZE].try_into().unwrap();
            segment.append(&header, &batch.bytes()[HEADER_SIZE..]).unwrap();
        }
    }

    #[test]
    fn an_active_segment_trusts_index_files_from_its_last_flush_or_rebuilds_missing_ones() {
        // Proves index files written by a flush, with more batches appended after it, are a
        // valid sparser index: an open that trusts them (no recovery) reads the longer tail and
        // learns the right next offset and largest timestamp, and every offset is found; with
        // the files missing the indexes are rebuilt.
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(2);
        let mut segment = Segment::create(dir.path(), 0, SETTINGS, 0, &files).unwrap();
        append_batches(&mut segment, 0..9);
        segment.flush().unwrap();
        let flushed_entries = segment.time_index().entries();
        append_batches(&mut segment, 9..14);
        let full = time_entries(&segment);
        assert!(full.len() > flushed_entries, "entries were added after the flush");
        drop(segment);
        for missing in [false, true] {
            if missing {
                fs::remove_file(dir.path().join(file_name(0, INDEX_SUFFIX))).unwrap();
                fs::remove_file(dir.path().join(file_name(0, TIME_INDEX_SUFFIX))).unwrap();
            }
            let (segment, end) = Segment::open(dir.path(), 0, SETTINGS, true, false, 0, &files).unwrap();
            assert_eq!(end, ScanEnd::Clean);
            assert_eq!(segment.next_offset(), 14, "missing: {missing}");
            assert_eq!((segment.max_timestamp(), segment.offset_of_max_timestamp()), (1_013, 13));
            let expected = if missing { full.len() + 1 } else { flushed_entries };
            assert_eq!(time_entries(&segment).len(), expected, "rebuilt ones add the closing entry");
            for offset in 0..14 {
                let (_, header) = segment.locate(offset).unwrap().unwrap();
                assert_eq!(header.base_offset, offset);
            }
        }
    }
}
