//! The aborted-transaction index, Kafka's `.txnindex` (KIP-98): one file per segment, the
//! transactions whose abort marker lies in that segment, as 34-byte entries (version i16 = 0,
//! producer id i64, first offset i64, last offset i64 = the marker's, last stable offset i64 =
//! the LSO once the abort completed). A `read_committed` fetch answers the aborted
//! transactions overlapping what it returns, so the client drops their records.
//!
//! The entries are also kept in memory (they are few: one per aborted transaction). A file is
//! appended to when an abort marker is written (not fsynced: a crash replays the active segment
//! and rebuilds its entries), fsynced when its segment is rolled or the log closed, rewritten
//! whole (atomically) when a truncation or recovery cuts entries away, and deleted with its
//! segment. Invariant: every entry sits under the segment whose range holds its last offset.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::durable;
use super::segment;

pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
const ENTRY_SIZE: usize = 34;
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the abort marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        out[..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        (bytes.len() == ENTRY_SIZE && i16::from_be_bytes([bytes[0], bytes[1]]) == ENTRY_VERSION).then(|| AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

pub fn path(dir: &Path, segment_base: i64) -> PathBuf {
    dir.join(segment::file_name(segment_base, TXN_INDEX_SUFFIX))
}

/// The aborted transactions of one log, by the base offset of the segment of each marker.
#[derive(Debug, Default)]
pub struct TxnIndex {
    by_segment: BTreeMap<i64, Vec<AbortedTxn>>,
}

impl TxnIndex {
    /// Reads the `.txnindex` files of the segments at `bases`; a torn last entry (a crash
    /// mid-append) is ignored, as is an entry of an unknown version.
    pub fn load(dir: &Path, bases: impl Iterator<Item = i64>) -> io::Result<TxnIndex> {
        let mut by_segment = BTreeMap::new();
        for base in bases {
            let bytes = match fs::read(path(dir, base)) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let entries: Vec<AbortedTxn> = bytes.chunks_exact(ENTRY_SIZE).filter_map(AbortedTxn::decode).collect();
            if !entries.is_empty() {
                by_segment.insert(base, entries);
            }
        }
        Ok(TxnIndex { by_segment })
    }

    pub fn is_empty(&self) -> bool {
        self.by_segment.is_empty()
    }

    /// Every entry, oldest marker first.
    pub fn entries(&self) -> impl Iterator<Item = &AbortedTxn> {
        self.by_segment.values().flatten()
    }

    /// Every entry with the base offset of the segment holding its marker, oldest first.
    pub fn entries_by_segment(&self) -> impl Iterator<Item = (i64, &AbortedTxn)> {
        self.by_segment.iter().flat_map(|(base, entries)| entries.iter().map(move |t| (*base, t)))
    }

    /// Writes `entries` as a complete `.txnindex` file of the segment at `segment_base` in `dir`
    /// (compaction writes it into its `.cleaned/` directory, to be swapped in with the segment).
    pub fn write_file(dir: &Path, segment_base: i64, entries: &[AbortedTxn]) -> io::Result<()> {
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        let mut file = fs::File::create(path(dir, segment_base))?;
        file.write_all(&bytes)?;
        file.sync_all()
    }

    /// Re-reads the file of the segment at `segment_base` (after compaction swapped it in).
    pub fn reload_segment(&mut self, dir: &Path, segment_base: i64) -> io::Result<()> {
        let reloaded = TxnIndex::load(dir, std::iter::once(segment_base))?;
        match reloaded.by_segment.into_iter().next() {
            Some((_, entries)) => self.by_segment.insert(segment_base, entries),
            None => self.by_segment.remove(&segment_base),
        };
        Ok(())
    }

    /// Records an abort whose marker is in the segment at `segment_base`.
    pub fn append(&mut self, dir: &Path, segment_base: i64, txn: AbortedTxn) -> io::Result<()> {
        let mut file = fs::OpenOptions::new().create(true).append(true).open(path(dir, segment_base))?;
        file.write_all(&txn.encode())?;
        self.by_segment.entry(segment_base).or_default().push(txn);
        Ok(())
    }

    /// fsyncs the file of the segment at `segment_base`, if it has one (a roll, a clean close).
    pub fn sync(&self, dir: &Path, segment_base: i64) -> io::Result<()> {
        if self.by_segment.contains_key(&segment_base) {
            fs::File::open(path(dir, segment_base))?.sync_all()?;
        }
        Ok(())
    }

    /// Forgets the segment at `segment_base` and deletes its file.
    pub fn remove_segment(&mut self, dir: &Path, segment_base: i64) -> io::Result<()> {
        self.by_segment.remove(&segment_base);
        match fs::remove_file(path(dir, segment_base)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Drops the entries whose marker is at or after `offset` (a truncation, or the part of the
    /// log a recovery replays), rewriting the files that lose entries.
    pub fn truncate_from(&mut self, dir: &Path, offset: i64) -> io::Result<()> {
        let touched: Vec<i64> = self
            .by_segment
            .iter()
            .filter(|(_, entries)| entries.iter().any(|e| e.last_offset >= offset))
            .map(|(base, _)| *base)
            .collect();
        for base in touched {
            let entries = self.by_segment.get_mut(&base).expect("listed above");
            entries.retain(|e| e.last_offset < offset);
            if entries.is_empty() {
                self.remove_segment(dir, base)?;
            } else {
                let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
                durable::write_atomically(&path(dir, base), &bytes)?;
            }
        }
        Ok(())
    }

    /// Kafka's `collectAbortedTransactions`: the aborted transactions that overlap
    /// `[fetch_offset, upper_bound_offset)`, in marker order. It reads from the segment that
    /// holds `fetch_offset` (an entry's marker is at or after `fetch_offset`, so its segment is
    /// that one or a later one) and stops after the first entry whose last stable offset
    /// reaches `upper_bound_offset` (Kafka's `TxnIndexSearchResult.isComplete`): every later
    /// abort's transaction was still open then, so it began at or after that LSO. A fetch of
    /// the log's tail reads a few entries, not every abort the partition ever had.
    pub fn overlapping(&self, fetch_offset: i64, upper_bound_offset: i64) -> Vec<AbortedTxn> {
        let start = self.by_segment.range(..=fetch_offset).next_back().map_or(i64::MIN, |(base, _)| *base);
        let mut found = Vec::new();
        for entry in self.by_segment.range(start..).flat_map(|(_, entries)| entries) {
            if entry.last_offset >= fetch_offset && entry.first_offset < upper_bound_offset {
                found.push(*entry);
            }
            if entry.last_stable_offset >= upper_bound_offset {
                break;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn { producer_id: pid, first_offset: first, last_offset: last, last_stable_offset: last + 1 }
    }

    #[test]
    fn entries_survive_a_reload_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TxnIndex::default();
        index.append(dir.path(), 0, txn(1, 0, 5)).unwrap();
        index.append(dir.path(), 10, txn(2, 8, 12)).unwrap();
        index.append(dir.path(), 10, txn(3, 11, 14)).unwrap();
        let mut file = fs::OpenOptions::new().append(true).open(path(dir.path(), 10)).unwrap();
        file.write_all(&[0, 0, 1, 2]).unwrap();
        let loaded = TxnIndex::load(dir.path(), [0, 10].into_iter()).unwrap();
        assert_eq!(loaded.entries().copied().collect::<Vec<_>>(), vec![txn(1, 0, 5), txn(2, 8, 12), txn(3, 11, 14)]);
        assert_eq!(loaded.overlapping(6, 100), vec![txn(2, 8, 12), txn(3, 11, 14)]);
        assert_eq!(loaded.overlapping(0, 8), vec![txn(1, 0, 5)]);
    }

    #[test]
    fn the_bounded_search_finds_what_a_scan_of_every_entry_finds() {
        // Proves the shortcuts of `overlapping` (start at the fetch offset's segment, stop at
        // the first entry whose LSO reaches the bound) lose nothing: over logs of interleaved
        // transactions of 4 producers, with segments rolled every 16 offsets and LSOs computed
        // as the producer state does, every (fetch, bound) pair answers as a full scan.
        let dir = tempfile::tempdir().unwrap();
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..20 {
            let mut index = TxnIndex::default();
            let mut open: BTreeMap<i64, i64> = BTreeMap::new(); // first offset -> producer
            let mut offset = 0i64;
            while offset < 400 {
                let producer = next(4) as i64;
                let first = open.iter().find(|(_, p)| **p == producer).map(|(f, _)| *f);
                match (first, next(3)) {
                    (Some(first), 0) => {
                        // The marker: an abort (a commit adds no entry, only ends it).
                        open.remove(&first);
                        if next(2) == 0 {
                            let lso = open.keys().next().copied().unwrap_or(offset + 1);
                            let txn = AbortedTxn {
                                producer_id: producer,
                                first_offset: first,
                                last_offset: offset,
                                last_stable_offset: lso,
                            };
                            index.append(dir.path(), offset / 16 * 16, txn).unwrap();
                        }
                    }
                    (None, _) => {
                        open.insert(offset, producer);
                    }
                    _ => {}
                }
                offset += 1;
            }
            let all: Vec<AbortedTxn> = index.entries().copied().collect();
            for fetch in 0..offset {
                for bound in fetch + 1..=offset {
                    let scanned: Vec<AbortedTxn> =
                        all.iter().filter(|e| e.last_offset >= fetch && e.first_offset < bound).copied().collect();
                    assert_eq!(index.overlapping(fetch, bound), scanned, "fetch {fetch}, bound {bound}");
                }
            }
        }
    }

    #[test]
    fn truncation_drops_later_markers_and_rewrites_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TxnIndex::default();
        index.append(dir.path(), 0, txn(1, 0, 5)).unwrap();
        index.append(dir.path(), 0, txn(2, 3, 8)).unwrap();
        index.append(dir.path(), 10, txn(3, 11, 14)).unwrap();
        index.truncate_from(dir.path(), 6).unwrap();
        assert!(!path(dir.path(), 10).exists());
        assert_eq!(fs::read(path(dir.path(), 0)).unwrap(), txn(1, 0, 5).encode().to_vec());
        assert_eq!(index.entries().count(), 1);
    }
}
