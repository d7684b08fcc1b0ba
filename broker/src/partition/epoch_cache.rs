//! The leader epoch cache: where each leader epoch's writes start, persisted in Kafka's
//! `leader-epoch-checkpoint` format (`0`, the entry count, then `epoch start_offset` lines).
//!
//! Invariant: entries grow strictly in both epoch and start offset. OffsetForLeaderEpoch and
//! (later) follower truncation read it; lookups follow Kafka's `endOffsetFor` exactly.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const FILE: &str = "leader-epoch-checkpoint";

pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<(i32, i64)>,
    /// The file lags `entries`: a write failed (disk full, out of descriptors) and is done
    /// again by [`LeaderEpochCache::persist_if_behind`].
    behind: bool,
}

impl LeaderEpochCache {
    /// Loads the checkpoint; entries starting past `log_end_offset` (a truncated log) are dropped.
    pub fn open(dir: &Path, log_end_offset: i64) -> io::Result<LeaderEpochCache> {
        let path = dir.join(FILE);
        let mut entries = Vec::new();
        if let Ok(text) = fs::read_to_string(&path) {
            let mut lines = text.lines().skip(2);
            while let Some(line) = lines.next() {
                let mut parts = line.split_whitespace();
                let (Some(epoch), Some(offset)) = (parts.next(), parts.next()) else { break };
                let (Ok(epoch), Ok(offset)) = (epoch.parse::<i32>(), offset.parse::<i64>()) else { break };
                if entries.last().is_some_and(|&(e, o)| epoch <= e || offset < o) {
                    break;
                }
                entries.push((epoch, offset));
            }
        }
        entries.retain(|&(_, offset)| offset <= log_end_offset);
        Ok(LeaderEpochCache { path, entries, behind: false })
    }

    /// The epoch `offset` was written in: the latest one starting at or before it (Kafka's
    /// `epochForOffset`); `None` below every known epoch.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        self.entries.iter().rev().find(|&&(_, start)| start <= offset).map(|&(epoch, _)| epoch)
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|&(e, _)| e)
    }

    /// Records that `leader_epoch` starts at `start_offset`, if it is newer than the latest.
    pub fn assign(&mut self, leader_epoch: i32, start_offset: i64) -> io::Result<()> {
        if self.latest_epoch().is_some_and(|latest| leader_epoch <= latest) {
            return Ok(());
        }
        self.entries.retain(|&(_, offset)| offset < start_offset);
        self.entries.push((leader_epoch, start_offset));
        self.persist()
    }

    /// Drops the epochs that start at or after `offset` (the log was truncated there; Kafka's
    /// `truncateFromEnd`).
    pub fn truncate_from_end(&mut self, offset: i64) -> io::Result<()> {
        let before = self.entries.len();
        self.entries.retain(|&(_, start)| start < offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Forgets every epoch (the log was emptied: Kafka's `clearAndFlush`). Kept entries below
    /// an emptied log's new start would make the follower ask the leader about an epoch whose
    /// end is below the leader's log start, and cut back there, again and again.
    pub fn clear(&mut self) -> io::Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.entries.clear();
        self.persist()
    }

    /// Kafka's `endOffsetFor` (`replication::truncation::kafka_end_offset_for`), with the
    /// current leader epoch counted as known from the log end offset when no record carries it
    /// yet (Kafka writes it into the cache on becoming leader): for the requested epoch, the
    /// largest known epoch at or below it and the offset where the next higher epoch starts (the
    /// log end offset for the latest); `(requested, start of the earliest epoch)` when it is older
    /// than every entry; `(-1, -1)` when it is undefined or newer than anything known.
    pub fn end_offset_for(&self, requested: i32, current_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        if requested < 0 {
            return (-1, -1);
        }
        let mut starts = self.entries.clone();
        if current_epoch >= 0 && starts.last().is_none_or(|&(latest, _)| latest < current_epoch) {
            starts.push((current_epoch, log_end_offset));
        }
        crate::replication::truncation::kafka_end_offset_for(&starts, log_end_offset, requested).unwrap_or((-1, -1))
    }

    /// Writes the file again if an earlier write failed (the partition calls it after each
    /// append that succeeded, so the file catches up once the disk has room again).
    pub fn persist_if_behind(&mut self) -> io::Result<()> {
        if self.behind {
            self.persist()?;
        }
        Ok(())
    }

    fn persist(&mut self) -> io::Result<()> {
        let written = self.write_file();
        self.behind = written.is_err();
        written
    }

    fn write_file(&self) -> io::Result<()> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for (epoch, offset) in &self.entries {
            text.push_str(&format!("{epoch} {offset}\n"));
        }
        // OffsetForLeaderEpoch (and follower truncation) trust this file after a power loss
        // too, so the rename must reach the disk, not only the content.
        crate::log::durable::write_atomically(&self.path, text.as_bytes())
    }
}

/// The follower's view of its own epochs for truncation: its cache as Kafka's
/// `LeaderEpochFileCache` answers (no current epoch added: a follower knows only its batches).
impl crate::replication::truncation::EpochLookup for LeaderEpochCache {
    fn latest_epoch(&self) -> Option<i32> {
        LeaderEpochCache::latest_epoch(self)
    }
    fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
        // The end of the latest epoch is the log end offset, which the caller caps anyway.
        crate::replication::truncation::kafka_end_offset_for(&self.entries, i64::MAX, epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafka_rules() {
        // Proves endOffsetFor semantics: next epoch's start, log end for the latest, -1 before all.
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochCache::open(dir.path(), 0).unwrap();
        cache.assign(1, 0).unwrap();
        cache.assign(3, 10).unwrap();
        cache.assign(2, 20).unwrap(); // older than latest: ignored
        assert_eq!(cache.end_offset_for(0, 3, 30), (0, 0), "older than all: the earliest start");
        assert_eq!(cache.end_offset_for(1, 3, 30), (1, 10));
        assert_eq!(cache.end_offset_for(2, 3, 30), (1, 10));
        assert_eq!(cache.end_offset_for(3, 3, 30), (3, 30));
        assert_eq!(cache.end_offset_for(5, 3, 30), (-1, -1), "newer than anything known");
        assert_eq!(cache.end_offset_for(3, 4, 30), (3, 30), "the current epoch starts at the log end");
        assert_eq!(cache.end_offset_for(4, 4, 30), (4, 30));
        assert_eq!(cache.end_offset_for(-1, 3, 30), (-1, -1));
        let reopened = LeaderEpochCache::open(dir.path(), 30).unwrap();
        assert_eq!(reopened.entries, vec![(1, 0), (3, 10)]);
        let truncated = LeaderEpochCache::open(dir.path(), 5).unwrap();
        assert_eq!(truncated.entries, vec![(1, 0)]);
    }
}
