//! Per-partition producer state, Kafka's `ProducerStateManager` (KIP-98): for each producer id
//! its epoch, the sequence ranges and offsets of its last five batches, the coordinator epoch of
//! its last transaction marker and the first offset of its open transaction; and the open
//! transactions of the partition by first offset (the last stable offset is the smallest).
//!
//! The leader checks a client's batches against it under the log's write lock (epoch and
//! sequence rules, exact retries answered with their original offsets); followers and recovery
//! rebuild it from the batches they append or replay, with no checks, so every replica holds
//! the same state and a new leader de-duplicates a retry the old one wrote.
//!
//! Snapshots are Kafka's `<offset>.snapshot` files (`ProducerSnapshot` v1: version i16, CRC-32C
//! u32 of everything after it, then the entries as an i32-counted array of 46-byte records):
//! the state of every batch below `<offset>`. Only a producer's last batch is kept in a
//! snapshot, as in Kafka, so after a restart only a retry of the last batch is recognised.
//!
//! Invariants: an entry's batches are of its current epoch, oldest first, at most
//! [`BATCHES_RETAINED`]; a producer with an open transaction is in `ongoing` under its
//! transaction's first offset, and no other key names it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::batch::{self, BatchHeader, RecordBatch, NO_PRODUCER_EPOCH};
use super::durable;
use super::txn_index::AbortedTxn;

/// Suffix of producer snapshot files, `%020d.snapshot` as Kafka names them.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Batches remembered per producer to recognise retries (Kafka's `NUM_BATCHES_TO_RETAIN`: a
/// client has at most five requests in flight per partition when idempotent).
pub const BATCHES_RETAINED: usize = 5;

const SNAPSHOT_VERSION: i16 = 1;
const SNAPSHOT_ENTRIES_AT: usize = 6;
const SNAPSHOT_ENTRY_SIZE: usize = 46;

/// One batch a producer wrote: its sequence range and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp.
    pub timestamp: i64,
}

/// What the partition knows of one producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub epoch: i16,
    batches: [BatchMetadata; BATCHES_RETAINED],
    batch_count: u8,
    /// The coordinator epoch of the last transaction marker, -1 before any.
    pub coordinator_epoch: i32,
    /// The max timestamp of the producer's last batch or marker (what expiry measures).
    pub last_timestamp: i64,
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn new(producer_id: i64) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            epoch: NO_PRODUCER_EPOCH,
            batches: [BatchMetadata::default(); BATCHES_RETAINED],
            batch_count: 0,
            coordinator_epoch: -1,
            last_timestamp: batch::NO_TIMESTAMP,
            current_txn_first_offset: None,
        }
    }

    /// The retained batches, oldest first.
    pub fn batches(&self) -> &[BatchMetadata] {
        &self.batches[..self.batch_count as usize]
    }

    pub fn last_batch(&self) -> Option<&BatchMetadata> {
        self.batches().last()
    }

    /// Sequence of the producer's last batch, -1 when none is retained.
    pub fn last_seq(&self) -> i32 {
        self.last_batch().map_or(batch::NO_SEQUENCE, |b| b.last_seq)
    }

    fn set_epoch(&mut self, epoch: i16) {
        if self.epoch != epoch {
            self.batch_count = 0;
            self.epoch = epoch;
        }
    }

    fn add_batch(&mut self, epoch: i16, metadata: BatchMetadata) {
        self.set_epoch(epoch);
        if self.batch_count as usize == BATCHES_RETAINED {
            self.batches.rotate_left(1);
            self.batches[BATCHES_RETAINED - 1] = metadata;
        } else {
            self.batches[self.batch_count as usize] = metadata;
            self.batch_count += 1;
        }
        self.last_timestamp = metadata.timestamp;
    }

    /// Kafka's `findDuplicateBatch`: a batch of the current epoch with exactly this sequence
    /// range was written already.
    fn find_duplicate(&self, header: &BatchHeader) -> Option<BatchMetadata> {
        if header.producer_epoch != self.epoch {
            return None;
        }
        let last_seq = last_sequence(header);
        self.batches().iter().find(|b| b.first_seq == header.base_sequence && b.last_seq == last_seq).copied()
    }
}

/// How much an append is checked: a client's batches fully, a coordinator's (offset commits,
/// markers) only for the epoch, replicated and recovered ones not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    Client,
    Coordinator,
    None,
}

/// A batch that breaks the producer rules; nothing of its append is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    /// INVALID_PRODUCER_EPOCH (since Kafka 2.7 rather than PRODUCER_FENCED, so that a client can
    /// abort and go on).
    #[error("epoch {epoch} of producer {producer_id} is older than its last epoch {current}")]
    InvalidProducerEpoch { producer_id: i64, epoch: i16, current: i16 },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER.
    #[error(
        "out of order sequence number for producer {producer_id} (epoch {epoch}): {sequence} (incoming), {last} \
         (current end sequence number)"
    )]
    OutOfOrderSequence { producer_id: i64, epoch: i16, sequence: i32, last: i32 },
    /// INVALID_TXN_STATE: a non-transactional batch from a producer with an open transaction.
    #[error("expected a transactional write from producer {producer_id}, which has an open transaction")]
    InvalidTxnState { producer_id: i64 },
    /// INVALID_TXN_STATE: a transactional batch that would open a transaction here without a
    /// verification by the coordinator still in place (KIP-890 part 1).
    #[error("the record of producer {producer_id} was not part of an ongoing transaction")]
    UnverifiedTransaction { producer_id: i64 },
    /// TRANSACTION_COORDINATOR_FENCED: a marker from an older coordinator.
    #[error("coordinator epoch {coordinator_epoch} of a marker for producer {producer_id} is older than {current}")]
    CoordinatorFenced { producer_id: i64, coordinator_epoch: i32, current: i32 },
    /// POLICY_VIOLATION: a new producer where `max.producers.per.partition` producers hold
    /// open transactions (none can be evicted).
    #[error(
        "producer {producer_id} would be one more than max.producers.per.partition ({max}), and every producer \
         here has an open transaction"
    )]
    TooManyProducers { producer_id: i64, max: usize },
}

/// Commit or abort, the type of a control record (Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

/// The one record of a transaction marker batch (Kafka's `EndTransactionMarker`): key
/// `version i16, type i16`, value `version i16, coordinator_epoch i32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub control: ControlType,
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// The marker of a control batch; `None` for one emptied by compaction, another control type
    /// or a malformed one (Kafka ignores unknown control types).
    pub fn of_batch(bytes: &Bytes) -> Option<EndTxnMarker> {
        let batch = RecordBatch::parse(bytes.clone()).ok()?;
        let record = batch.record_iter().ok()?.next()?.ok()?;
        let key = record.key?;
        let value = record.value?;
        if key.len() < 4 || value.len() < 6 {
            return None;
        }
        let control = match i16::from_be_bytes([key[2], key[3]]) {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            _ => return None,
        };
        Some(EndTxnMarker { control, coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]) })
    }

    /// The record's key and value, for writing a marker.
    pub fn encode(&self) -> ([u8; 4], [u8; 6]) {
        let kind: i16 = match self.control {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        };
        let mut key = [0u8; 4];
        key[2..].copy_from_slice(&kind.to_be_bytes());
        let mut value = [0u8; 6];
        value[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        (key, value)
    }
}

/// A transaction a marker closed, with data in this partition (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// What one batch does to the state, computed before the append writes anything.
#[derive(Debug, Clone, Copy)]
pub struct BatchUpdate {
    /// Which batch of the append (counting every batch).
    batch_index: usize,
    /// The producer's entry once the batch is written.
    entry: ProducerEntry,
    /// The batch opened a transaction at this offset.
    started: Option<i64>,
    completed: Option<CompletedTxn>,
    /// The batch is a transaction marker.
    marker: bool,
}

/// The updates of one append, one per producer batch in order, each checked against the state
/// as the batches before it in the same append leave it.
#[derive(Debug, Default)]
pub struct PendingUpdates {
    updates: Vec<BatchUpdate>,
}

impl BatchUpdate {
    pub fn batch_index(&self) -> usize {
        self.batch_index
    }

    /// The update with the max timestamp the batch was written with (the leader stamps it after
    /// the check: LogAppendTime, or the records' max under CreateTime), which is what followers
    /// and a replay read: producer expiry measures from the same time on every replica.
    pub fn written_at(mut self, max_timestamp: i64) -> BatchUpdate {
        self.entry.last_timestamp = max_timestamp;
        if !self.marker && self.entry.batch_count > 0 {
            self.entry.batches[self.entry.batch_count as usize - 1].timestamp = max_timestamp;
        }
        self
    }
}

impl PendingUpdates {
    pub fn iter(&self) -> std::slice::Iter<'_, BatchUpdate> {
        self.updates.iter()
    }

    /// Whether a transactional batch of `header`'s producer would open a transaction here (none
    /// is open, counting the batches before it in the same append): the rule `data_batch` uses.
    pub fn opens_transaction(&self, state: &ProducerState, header: &BatchHeader) -> bool {
        self.current(state, header.producer_id).current_txn_first_offset.is_none()
    }

    fn current(&self, state: &ProducerState, producer_id: i64) -> ProducerEntry {
        self.updates
            .iter()
            .rev()
            .find(|u| u.entry.producer_id == producer_id)
            .map(|u| u.entry)
            .or_else(|| state.producers.get(&producer_id).copied())
            .unwrap_or_else(|| ProducerEntry::new(producer_id))
    }

    /// A data batch of a producer (`producer_id >= 0`) that will be written at `first_offset`
    /// (Kafka's `ProducerAppendInfo.appendDataBatch`).
    pub fn data_batch(
        &mut self,
        state: &ProducerState,
        header: &BatchHeader,
        first_offset: i64,
        batch_index: usize,
        validation: Validation,
    ) -> Result<(), ProducerError> {
        let mut entry = self.current(state, header.producer_id);
        if validation != Validation::None {
            check_epoch(&entry, header.producer_epoch)?;
        }
        if validation == Validation::Client {
            check_sequence(&entry, header)?;
            if let Some(max) = state.refuses_new_producer(header.producer_id) {
                // Unless an earlier batch of this append already brings the producer in.
                if !self.updates.iter().any(|u| u.entry.producer_id == header.producer_id) {
                    return Err(ProducerError::TooManyProducers { producer_id: header.producer_id, max });
                }
            }
        }
        let last_offset = first_offset + header.last_offset_delta as i64;
        entry.add_batch(
            header.producer_epoch,
            BatchMetadata {
                first_seq: header.base_sequence,
                last_seq: last_sequence(header),
                first_offset,
                last_offset,
                timestamp: header.max_timestamp,
            },
        );
        let transactional = header.attributes.is_transactional();
        let mut started = None;
        match entry.current_txn_first_offset {
            Some(_) if !transactional => {
                if validation != Validation::None {
                    return Err(ProducerError::InvalidTxnState { producer_id: header.producer_id });
                }
                // Replicated as the leader wrote it; Kafka's replay throws the same and would
                // stop the partition, which helps no one. Keep the transaction open.
            }
            None if transactional => {
                entry.current_txn_first_offset = Some(first_offset);
                started = Some(first_offset);
            }
            _ => {}
        }
        self.updates.push(BatchUpdate { batch_index, entry, started, completed: None, marker: false });
        Ok(())
    }

    /// A transaction marker of a producer written at `offset` (Kafka's `appendEndTxnMarker`).
    pub fn marker(
        &mut self,
        state: &ProducerState,
        header: &BatchHeader,
        marker: EndTxnMarker,
        offset: i64,
        batch_index: usize,
        validation: Validation,
    ) -> Result<(), ProducerError> {
        let mut entry = self.current(state, header.producer_id);
        if validation != Validation::None {
            check_epoch(&entry, header.producer_epoch)?;
            if entry.coordinator_epoch > marker.coordinator_epoch {
                return Err(ProducerError::CoordinatorFenced {
                    producer_id: header.producer_id,
                    coordinator_epoch: marker.coordinator_epoch,
                    current: entry.coordinator_epoch,
                });
            }
        }
        let completed = entry.current_txn_first_offset.map(|first_offset| CompletedTxn {
            producer_id: header.producer_id,
            first_offset,
            last_offset: offset,
            aborted: marker.control == ControlType::Abort,
        });
        entry.set_epoch(header.producer_epoch);
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = header.max_timestamp;
        entry.current_txn_first_offset = None;
        self.updates.push(BatchUpdate { batch_index, entry, started: None, completed, marker: true });
        Ok(())
    }
}

/// How to put the state back after a failed append: the entries it replaced.
#[derive(Debug, Default)]
pub struct UndoUpdates {
    replaced: Vec<(i64, Option<ProducerEntry>)>,
    started: Vec<i64>,
    completed: Vec<CompletedTxn>,
    map_end_offset: i64,
    /// The aborted transactions the append completed, for the `.txnindex`.
    aborted: Vec<AbortedTxn>,
}

impl UndoUpdates {
    /// The aborts the applied updates completed, each with the LSO once it completed.
    pub fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }
}

/// The producer state of one partition.
#[derive(Debug, Default)]
pub struct ProducerState {
    producers: BTreeMap<i64, ProducerEntry>,
    /// Open transactions: first offset → producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Transactions whose marker is written but maybe not yet below the high watermark: first
    /// offset → marker offset (Kafka's `unreplicatedTxns`). They hold the LSO back until the
    /// high watermark passes the marker, so a marker lost in a failover never exposes data a
    /// new leader may still abort.
    unreplicated: BTreeMap<i64, i64>,
    /// Every batch below this offset is reflected in the state.
    map_end_offset: i64,
    /// Offsets of the snapshot files in the directory.
    snapshots: BTreeSet<i64>,
    /// Transaction verifications in flight (KIP-890 part 1), leader-only and in memory: the
    /// producers whose first transactional batch here waits for the coordinator's word.
    verifications: BTreeMap<i64, Verification>,
    next_guard: u64,
    /// `max.producers.per.partition` (`None`: unbounded). A new producer past it evicts the
    /// idle producer (no open transaction) with the oldest last write, as Redpanda's
    /// `max_concurrent_producer_ids` does; a later retry of the evicted producer's batch is
    /// then not recognised as a duplicate. With every producer in a transaction, a client's
    /// new producer is refused.
    max_producers: Option<usize>,
}

/// A verification of one producer's transaction (Kafka's `VerificationStateEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verification {
    guard: VerificationGuard,
    epoch: i16,
    started_ms: i64,
}

/// What a transactional batch that opens a transaction must present to be appended: the guard
/// of a verification still in place. A marker of the producer removes it (unless it is for a
/// later epoch than the data the marker ends), so a verification answered before an abort
/// cannot let a late batch open a transaction the coordinator no longer knows (a hanging
/// transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

/// A verification that never reached its append is forgotten after this long.
const VERIFICATION_EXPIRY_MS: i64 = 60_000;

impl ProducerState {
    /// An empty state bounded to `max_producers` producer ids (`usize::MAX`: unbounded).
    pub fn with_max_producers(max_producers: usize) -> ProducerState {
        ProducerState { max_producers: (max_producers != usize::MAX).then_some(max_producers), ..Default::default() }
    }

    /// The producer a new one would evict: idle (no open transaction), oldest last write.
    fn eviction_candidate(&self, except: i64) -> Option<i64> {
        self.producers
            .values()
            .filter(|e| e.current_txn_first_offset.is_none() && e.producer_id != except)
            .min_by_key(|e| e.last_timestamp)
            .map(|e| e.producer_id)
    }

    /// Evicts the idle producers written longest ago (never `except`, the one being applied)
    /// down to 1 % below `max`, in one pass: a stream of new producer ids on a full partition
    /// then costs one scan of the state per hundredth of `max` of them, not one each. Fewer go
    /// when fewer are idle.
    fn evict_idle(&mut self, max: usize, except: i64) {
        let target = max - max / 100;
        let excess = self.producers.len().saturating_sub(target);
        let mut idle: Vec<(i64, i64)> = self
            .producers
            .values()
            .filter(|e| e.current_txn_first_offset.is_none() && e.producer_id != except)
            .map(|e| (e.last_timestamp, e.producer_id))
            .collect();
        if idle.len() > excess {
            idle.select_nth_unstable(excess);
            idle.truncate(excess);
        }
        for (_, evicted) in idle {
            self.producers.remove(&evicted);
            self.verifications.remove(&evicted);
        }
        tracing::debug!(max, left = self.producers.len(), "evicted idle producers (max.producers.per.partition)");
    }

    /// Whether a client's batch from `producer_id` is refused by `max.producers.per.partition`:
    /// it is new here, the state is full and nothing can be evicted.
    fn refuses_new_producer(&self, producer_id: i64) -> Option<usize> {
        let max = self.max_producers?;
        let full = !self.producers.contains_key(&producer_id) && self.producers.len() >= max;
        (full && self.eviction_candidate(producer_id).is_none()).then_some(max)
    }

    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn producers(&self) -> impl Iterator<Item = &ProducerEntry> {
        self.producers.values()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Starts verifying that producer `producer_id` at `epoch` has this partition in an ongoing
    /// transaction (Kafka's `maybeStartTransactionVerification`): `None` when a transaction of
    /// that epoch is open here already (nothing to verify), else the guard its first batch must
    /// present. An epoch older than the producer's is INVALID_PRODUCER_EPOCH.
    pub fn start_verification(
        &mut self,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) -> Result<Option<VerificationGuard>, ProducerError> {
        if let Some(entry) = self.producers.get(&producer_id) {
            if entry.epoch != NO_PRODUCER_EPOCH && epoch < entry.epoch {
                return Err(ProducerError::InvalidProducerEpoch { producer_id, epoch, current: entry.epoch });
            }
            if entry.current_txn_first_offset.is_some() && entry.epoch == epoch {
                return Ok(None);
            }
        }
        if let Some(v) = self.verifications.get_mut(&producer_id) {
            if v.epoch == epoch {
                v.started_ms = now_ms;
                return Ok(Some(v.guard));
            }
        }
        self.next_guard += 1;
        let guard = VerificationGuard(self.next_guard);
        self.verifications.insert(producer_id, Verification { guard, epoch, started_ms: now_ms });
        Ok(Some(guard))
    }

    /// The guard of `producer_id`'s verification in place, if any.
    pub fn verification(&self, producer_id: i64) -> Option<VerificationGuard> {
        self.verifications.get(&producer_id).map(|v| v.guard)
    }

    /// Drops `producer_id`'s verification if it is still `guard` (the coordinator refused it).
    pub fn end_verification(&mut self, producer_id: i64, guard: VerificationGuard) {
        if self.verifications.get(&producer_id).is_some_and(|v| v.guard == guard) {
            self.verifications.remove(&producer_id);
        }
    }

    /// The first offset of the oldest transaction that is open, or completed by a marker at or
    /// above `high_watermark` (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let ongoing = self.ongoing.keys().next().copied();
        let unreplicated =
            self.unreplicated.iter().filter(|(_, marker)| **marker >= high_watermark).map(|(f, _)| *f).min();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets completed transactions whose marker is below the high watermark.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        if !self.unreplicated.is_empty() {
            self.unreplicated.retain(|_, marker| *marker >= high_watermark);
        }
    }

    /// A client batch that repeats one of its producer's retained batches exactly: the append
    /// answers with the original offsets and writes nothing (Kafka's duplicate check).
    pub fn find_duplicate(&self, header: &BatchHeader) -> Option<BatchMetadata> {
        self.producers.get(&header.producer_id)?.find_duplicate(header)
    }

    /// Applies one update of an append (after its batch was written), recording in `undo` what
    /// it replaced.
    pub fn apply(&mut self, update: &BatchUpdate, undo: &mut UndoUpdates) {
        let pid = update.entry.producer_id;
        if update.started.is_some() {
            // A started transaction needs no verification.
            self.verifications.remove(&pid);
        } else if update.marker {
            // A marker ends what verifications of its transaction's epoch vouched for. Under
            // transaction version 2 (KIP-890 part 2) the marker carries the bumped epoch, and a
            // verification above the epoch of the data it ends is already the next
            // transaction's (started while this one was completing): that one stays.
            let data_epoch = self.producers.get(&pid).map(|e| e.epoch);
            let next_transactions =
                self.verifications.get(&pid).is_some_and(|v| data_epoch.is_some_and(|e| v.epoch > e));
            if !next_transactions {
                self.verifications.remove(&pid);
            }
        }
        let previous = self.producers.insert(pid, update.entry);
        if !undo.replaced.iter().any(|(p, _)| *p == pid) {
            undo.replaced.push((pid, previous));
        }
        if let Some(max) = self.max_producers {
            if self.producers.len() > max {
                // Evicted producers are not put back by `undo`: eviction forgets, by design.
                self.evict_idle(max, pid);
            }
        }
        if let Some(first) = update.started {
            self.ongoing.insert(first, pid);
            undo.started.push(first);
        }
        if let Some(txn) = update.completed {
            self.ongoing.remove(&txn.first_offset);
            self.unreplicated.insert(txn.first_offset, txn.last_offset);
            undo.completed.push(txn);
            if txn.aborted {
                // Kafka's `lastStableOffset(completedTxn)`: the oldest other open transaction,
                // else just past the marker.
                let last_stable_offset = self.ongoing.keys().next().copied().unwrap_or(txn.last_offset + 1);
                undo.aborted.push(AbortedTxn {
                    producer_id: txn.producer_id,
                    first_offset: txn.first_offset,
                    last_offset: txn.last_offset,
                    last_stable_offset,
                });
            }
        }
    }

    /// Starts an undo record for an append starting at the current map end.
    pub fn begin(&self) -> UndoUpdates {
        UndoUpdates { map_end_offset: self.map_end_offset, ..UndoUpdates::default() }
    }

    /// Puts back what the applied updates replaced (a failed append was cut back).
    pub fn undo(&mut self, undo: UndoUpdates) {
        // Completions first, then starts: a transaction the append both started and ended is
        // put back as open by the first loop and gone after the second (the other order left
        // it open, holding the last stable offset until a restart).
        for txn in undo.completed {
            self.unreplicated.remove(&txn.first_offset);
            self.ongoing.insert(txn.first_offset, txn.producer_id);
        }
        for first in undo.started {
            self.ongoing.remove(&first);
        }
        for (pid, previous) in undo.replaced.into_iter().rev() {
            match previous {
                Some(entry) => self.producers.insert(pid, entry),
                None => self.producers.remove(&pid),
            };
        }
        self.map_end_offset = undo.map_end_offset;
    }

    pub fn set_map_end_offset(&mut self, offset: i64) {
        self.map_end_offset = offset;
    }

    /// Replays one batch read back from the log (recovery, truncation): no checks. Returns the
    /// transaction it aborted, if it is such a marker.
    pub fn replay(&mut self, header: &BatchHeader, bytes: &[u8]) -> Option<AbortedTxn> {
        let mut aborted = None;
        if header.producer_id >= 0 {
            let mut pending = PendingUpdates::default();
            let replayed = if header.attributes.is_control() {
                match EndTxnMarker::of_batch(&Bytes::copy_from_slice(bytes)) {
                    Some(marker) => pending.marker(self, header, marker, header.base_offset, 0, Validation::None),
                    None => Ok(()),
                }
            } else {
                pending.data_batch(self, header, header.base_offset, 0, Validation::None)
            };
            debug_assert!(replayed.is_ok(), "replay checks nothing");
            let mut undo = self.begin();
            for update in &pending.updates {
                self.apply(update, &mut undo);
            }
            aborted = undo.aborted.first().copied();
        }
        self.map_end_offset = header.last_offset() + 1;
        aborted
    }

    /// Removes producers idle for `expiration_ms` (`producer.id.expiration.ms`) with no open
    /// transaction, as Kafka's `removeExpiredProducers`. Returns how many went.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        self.verifications.retain(|_, v| now_ms.saturating_sub(v.started_ms) < VERIFICATION_EXPIRY_MS);
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Forgets everything (a log truncated fully).
    pub fn clear(&mut self, map_end_offset: i64) {
        self.producers.clear();
        self.ongoing.clear();
        self.unreplicated.clear();
        self.verifications.clear();
        self.map_end_offset = map_end_offset;
    }

    // ---- snapshots ----

    /// Lists the snapshot files of `dir` (removing leftover temporary ones).
    pub fn scan_snapshots(&mut self, dir: &Path) -> io::Result<()> {
        self.snapshots.clear();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(offset) = name.strip_suffix(SNAPSHOT_SUFFIX).and_then(|s| s.parse::<i64>().ok()) {
                self.snapshots.insert(offset);
            }
        }
        Ok(())
    }

    pub fn snapshot_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.snapshots.iter().copied()
    }

    /// Writes the snapshot of the current state at the map end offset (durably).
    pub fn write_snapshot(&mut self, dir: &Path) -> io::Result<()> {
        let offset = self.map_end_offset;
        durable::write_atomically(&snapshot_path(dir, offset), &self.encode_snapshot())?;
        self.snapshots.insert(offset);
        Ok(())
    }

    /// Kafka's `ProducerSnapshot` v1 bytes of the current state.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SNAPSHOT_ENTRIES_AT + 4 + self.producers.len() * SNAPSHOT_ENTRY_SIZE);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(self.producers.len() as i32).to_be_bytes());
        for e in self.producers.values() {
            let last = e.last_batch();
            out.extend_from_slice(&e.producer_id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_seq().to_be_bytes());
            out.extend_from_slice(&last.map_or(-1i64, |b| b.last_offset).to_be_bytes());
            out.extend_from_slice(&last.map_or(0i32, |b| (b.last_offset - b.first_offset) as i32).to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = batch::crc32c(&[&out[SNAPSHOT_ENTRIES_AT..]]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Loads the newest snapshot at or below `upper` (a log's end offset), deleting newer ones
    /// and any that fail their CRC; the state is then the snapshot's, at its offset. `None`
    /// when none is usable: the state is empty at offset 0 and must be replayed from the start.
    pub fn load_latest_snapshot(&mut self, dir: &Path, upper: i64) -> io::Result<Option<i64>> {
        self.clear(0);
        let newer: Vec<i64> = self.snapshots.range(upper + 1..).copied().collect();
        for offset in newer {
            self.delete_snapshot(dir, offset)?;
        }
        while let Some(&offset) = self.snapshots.iter().next_back() {
            let bytes = fs::read(snapshot_path(dir, offset))?;
            match decode_snapshot(&bytes) {
                Some(entries) => {
                    for entry in entries {
                        if let Some(first) = entry.current_txn_first_offset {
                            self.ongoing.insert(first, entry.producer_id);
                        }
                        self.producers.insert(entry.producer_id, entry);
                    }
                    self.map_end_offset = offset;
                    return Ok(Some(offset));
                }
                None => {
                    tracing::warn!(snapshot = %snapshot_path(dir, offset).display(), "deleting a corrupt producer snapshot");
                    self.delete_snapshot(dir, offset)?;
                }
            }
        }
        Ok(None)
    }

    /// Deletes the snapshot at `offset` if there is one.
    pub fn delete_snapshot(&mut self, dir: &Path, offset: i64) -> io::Result<()> {
        if self.snapshots.remove(&offset) {
            match fs::remove_file(snapshot_path(dir, offset)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Deletes snapshots below `offset` (their segments are gone), keeping the newest one.
    pub fn delete_snapshots_below(&mut self, dir: &Path, offset: i64) -> io::Result<()> {
        let newest = self.snapshots.iter().next_back().copied();
        let doomed: Vec<i64> = self.snapshots.range(..offset).copied().filter(|o| Some(*o) != newest).collect();
        for o in doomed {
            self.delete_snapshot(dir, o)?;
        }
        Ok(())
    }
}

pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// The entries of a `ProducerSnapshot` v1, or `None` if it is not one (version, length, CRC).
pub fn decode_snapshot(bytes: &[u8]) -> Option<Vec<ProducerEntry>> {
    if bytes.len() < SNAPSHOT_ENTRIES_AT + 4 || i16::from_be_bytes([bytes[0], bytes[1]]) != SNAPSHOT_VERSION {
        return None;
    }
    let crc = u32::from_be_bytes(bytes[2..6].try_into().ok()?);
    if batch::crc32c(&[&bytes[SNAPSHOT_ENTRIES_AT..]]) != crc {
        return None;
    }
    let count = i32::from_be_bytes(bytes[6..10].try_into().ok()?);
    let body = &bytes[10..];
    if count < 0 || body.len() != count as usize * SNAPSHOT_ENTRY_SIZE {
        return None;
    }
    let entries = body
        .chunks_exact(SNAPSHOT_ENTRY_SIZE)
        .map(|c| {
            let i64_at = |at: usize| i64::from_be_bytes(c[at..at + 8].try_into().expect("8 bytes"));
            let i32_at = |at: usize| i32::from_be_bytes(c[at..at + 4].try_into().expect("4 bytes"));
            let producer_id = i64_at(0);
            let epoch = i16::from_be_bytes([c[8], c[9]]);
            let last_seq = i32_at(10);
            let last_offset = i64_at(14);
            let offset_delta = i32_at(22);
            let timestamp = i64_at(26);
            let mut entry = ProducerEntry::new(producer_id);
            entry.epoch = epoch;
            if last_offset >= 0 {
                entry.add_batch(
                    epoch,
                    BatchMetadata {
                        first_seq: decrement_sequence(last_seq, offset_delta),
                        last_seq,
                        first_offset: last_offset - offset_delta as i64,
                        last_offset,
                        timestamp,
                    },
                );
            }
            entry.last_timestamp = timestamp;
            entry.coordinator_epoch = i32_at(34);
            let txn = i64_at(38);
            entry.current_txn_first_offset = (txn >= 0).then_some(txn);
            entry
        })
        .collect();
    Some(entries)
}

/// The sequence of a batch's last record; sequences wrap from `i32::MAX` to 0 (Kafka's
/// `DefaultRecordBatch.incrementSequence`).
pub fn last_sequence(header: &BatchHeader) -> i32 {
    increment_sequence(header.base_sequence, header.last_offset_delta)
}

fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

fn check_epoch(entry: &ProducerEntry, epoch: i16) -> Result<(), ProducerError> {
    if epoch < entry.epoch {
        return Err(ProducerError::InvalidProducerEpoch {
            producer_id: entry.producer_id,
            epoch,
            current: entry.epoch,
        });
    }
    Ok(())
}

/// Kafka's `checkSequence`: a new epoch starts at sequence 0 (any sequence for a producer this
/// partition does not know, KIP-360); within an epoch the batch continues the last one.
fn check_sequence(entry: &ProducerEntry, header: &BatchHeader) -> Result<(), ProducerError> {
    let sequence = header.base_sequence;
    let out_of_order = |last| ProducerError::OutOfOrderSequence {
        producer_id: entry.producer_id,
        epoch: header.producer_epoch,
        sequence,
        last,
    };
    if header.producer_epoch != entry.epoch {
        if sequence != 0 && entry.epoch != NO_PRODUCER_EPOCH {
            return Err(out_of_order(entry.last_seq()));
        }
        return Ok(());
    }
    // No retained batch of this epoch (a marker bumped it): the next must be sequence 0.
    let last = entry.last_seq();
    let in_sequence = sequence as i64 == last as i64 + 1 || (sequence == 0 && last == i32::MAX);
    if !in_sequence {
        return Err(out_of_order(last));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::records::BatchBuilder;
    use crate::log::Compression;

    fn header(pid: i64, epoch: i16, seq: i32, records: i32) -> BatchHeader {
        let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, seq);
        for i in 0..records {
            b.push(i as i64, None, Some(b"v"), &[]);
        }
        *b.build().expect("batch").header()
    }

    fn append(state: &mut ProducerState, h: &BatchHeader, at: i64) -> Result<(), ProducerError> {
        let mut pending = PendingUpdates::default();
        pending.data_batch(state, h, at, 0, Validation::Client)?;
        let mut undo = state.begin();
        for u in &pending.updates {
            state.apply(u, &mut undo);
        }
        state.set_map_end_offset(at + h.last_offset_delta as i64 + 1);
        Ok(())
    }

    #[test]
    fn sequences_epochs_and_duplicates() {
        let mut s = ProducerState::default();
        append(&mut s, &header(7, 0, 0, 3), 0).unwrap();
        append(&mut s, &header(7, 0, 3, 2), 3).unwrap();
        // A gap.
        assert!(matches!(append(&mut s, &header(7, 0, 6, 1), 5), Err(ProducerError::OutOfOrderSequence { .. })));
        // An exact retry of either retained batch.
        assert_eq!(s.find_duplicate(&header(7, 0, 0, 3)).map(|b| (b.first_offset, b.last_offset)), Some((0, 2)));
        assert_eq!(s.find_duplicate(&header(7, 0, 3, 2)).map(|b| b.first_offset), Some(3));
        assert_eq!(s.find_duplicate(&header(7, 0, 3, 1)), None);
        // A new epoch must start at 0; an older one is refused.
        assert!(matches!(append(&mut s, &header(7, 1, 5, 1), 5), Err(ProducerError::OutOfOrderSequence { .. })));
        append(&mut s, &header(7, 1, 0, 1), 5).unwrap();
        assert!(matches!(append(&mut s, &header(7, 0, 5, 1), 6), Err(ProducerError::InvalidProducerEpoch { .. })));
        // An unknown producer may start anywhere (KIP-360).
        append(&mut s, &header(8, 3, 42, 1), 6).unwrap();
        // Only five batches are retained.
        for i in 0..6 {
            append(&mut s, &header(9, 0, i, 1), 10 + i as i64).unwrap();
        }
        assert_eq!(s.entry(9).unwrap().batches().len(), BATCHES_RETAINED);
        assert_eq!(s.find_duplicate(&header(9, 0, 0, 1)), None);
        assert!(s.find_duplicate(&header(9, 0, 1, 1)).is_some());
    }

    /// A commit marker of `pid` at `epoch` applied at offset `at`.
    fn commit_marker(state: &mut ProducerState, pid: i64, epoch: i16, at: i64) {
        let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, -1).transactional(true).control(true);
        b.push(at, None, Some(b"m"), &[]);
        let header = *b.build().expect("marker").header();
        let marker = EndTxnMarker { control: ControlType::Commit, coordinator_epoch: 0 };
        let mut pending = PendingUpdates::default();
        pending.marker(state, &header, marker, at, 0, Validation::Coordinator).expect("marker");
        let mut undo = state.begin();
        for u in &pending.updates {
            state.apply(u, &mut undo);
        }
        state.set_map_end_offset(at + 1);
    }

    #[test]
    fn a_marker_ends_verifications_of_its_transaction_but_not_of_the_next_epoch() {
        // Proves KIP-890's two cases: with transaction version 1 the marker has the data's
        // epoch and removes a verification at that epoch (a late batch cannot open a
        // transaction); with version 2 it has the bumped epoch, and a verification at the
        // bumped epoch, taken by the next transaction while this one completed, stays.
        let transactional = |pid, epoch, seq| {
            let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, seq).transactional(true);
            b.push(0, None, Some(b"v"), &[]);
            *b.build().expect("batch").header()
        };
        let mut s = ProducerState::default();
        append(&mut s, &transactional(7, 0, 0), 0).unwrap();
        let same_epoch = s.start_verification(7, 0, 0).unwrap();
        assert_eq!(same_epoch, None, "an open transaction of this epoch needs no verification");
        let next = s.start_verification(7, 1, 0).unwrap().expect("the next epoch's transaction is verified");
        commit_marker(&mut s, 7, 1, 1);
        assert_eq!(s.verification(7), Some(next), "version 2: the next transaction's verification stays");

        // Version 1: producer 8's verification at the epoch of its data is ended by a marker
        // of that epoch.
        append(&mut s, &transactional(8, 0, 0), 2).unwrap();
        commit_marker(&mut s, 8, 0, 3);
        s.start_verification(8, 0, 0).unwrap().expect("no open transaction: verified");
        commit_marker(&mut s, 8, 0, 4);
        assert_eq!(s.verification(8), None, "version 1: the marker of the same epoch ends it");
    }

    #[test]
    fn sequence_wraps() {
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        let mut s = ProducerState::default();
        append(&mut s, &header(1, 0, i32::MAX - 1, 2), 0).unwrap();
        append(&mut s, &header(1, 0, 0, 1), 2).unwrap();
    }

    #[test]
    fn undo_restores_entries_and_transactions() {
        let mut s = ProducerState::default();
        append(&mut s, &header(1, 0, 0, 1), 0).unwrap();
        let before = *s.entry(1).unwrap();
        let mut pending = PendingUpdates::default();
        let mut txn = header(2, 0, 0, 1);
        txn.attributes = txn.attributes.with_transactional(true);
        pending.data_batch(&s, &header(1, 0, 1, 1), 1, 0, Validation::Client).unwrap();
        pending.data_batch(&s, &txn, 2, 1, Validation::Client).unwrap();
        let mut undo = s.begin();
        for u in &pending.updates {
            s.apply(u, &mut undo);
        }
        assert_eq!(s.first_unstable_offset(0), Some(2));
        s.undo(undo);
        assert_eq!(*s.entry(1).unwrap(), before);
        assert!(s.entry(2).is_none());
        assert_eq!(s.first_unstable_offset(0), None);
    }

    #[test]
    fn undo_of_an_append_that_started_and_ended_a_transaction_leaves_none_open() {
        // Proves a failed follower append of [transactional data at 7, its commit marker at 8]
        // puts nothing back as open (the undo re-opened offset 7 after removing it).
        let mut s = ProducerState::default();
        let mut data = header(3, 0, 0, 1);
        data.attributes = data.attributes.with_transactional(true);
        let mut marker = header(3, 0, -1, 1);
        marker.attributes = marker.attributes.with_transactional(true);
        let commit = EndTxnMarker { control: ControlType::Commit, coordinator_epoch: 0 };
        let mut pending = PendingUpdates::default();
        pending.data_batch(&s, &data, 7, 0, Validation::None).unwrap();
        pending.marker(&s, &marker, commit, 8, 1, Validation::None).unwrap();
        let mut undo = s.begin();
        for u in &pending.updates {
            s.apply(u, &mut undo);
        }
        assert_eq!(s.first_unstable_offset(i64::MAX), None, "committed: nothing open");
        s.undo(undo);
        assert_eq!(s.first_unstable_offset(0), None, "the undone append left no transaction open");
        assert!(s.entry(3).is_none());
    }

    #[test]
    fn snapshot_round_trip_keeps_the_last_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ProducerState::default();
        append(&mut s, &header(5, 2, 0, 4), 100).unwrap();
        append(&mut s, &header(5, 2, 4, 2), 104).unwrap();
        s.write_snapshot(dir.path()).unwrap();
        let bytes = fs::read(snapshot_path(dir.path(), 106)).unwrap();
        assert_eq!(bytes.len(), 10 + SNAPSHOT_ENTRY_SIZE);
        let mut loaded = ProducerState::default();
        loaded.scan_snapshots(dir.path()).unwrap();
        assert_eq!(loaded.load_latest_snapshot(dir.path(), 200).unwrap(), Some(106));
        let e = loaded.entry(5).unwrap();
        assert_eq!((e.epoch, e.last_seq(), e.batches().len()), (2, 5, 1));
        assert_eq!(loaded.find_duplicate(&header(5, 2, 4, 2)).map(|b| b.first_offset), Some(104));
        // A corrupt snapshot is deleted, not trusted; one above the log end is stale.
        fs::write(snapshot_path(dir.path(), 50), b"\x00\x01garbage").unwrap();
        loaded.scan_snapshots(dir.path()).unwrap();
        assert_eq!(loaded.load_latest_snapshot(dir.path(), 100).unwrap(), None);
        assert!(!snapshot_path(dir.path(), 50).exists() && !snapshot_path(dir.path(), 106).exists());
    }

    #[test]
    fn a_full_state_evicts_the_oldest_idle_hundredth_at_once() {
        // Proves bulk eviction past max.producers.per.partition: the producer past 200 evicts
        // the 3 idle ones written longest ago (down to 198), the next two new ones evict
        // nothing, and a producer in a transaction is never evicted however old.
        let mut s = ProducerState::with_max_producers(200);
        let at = |pid: i64, ts: i64| {
            let mut h = header(pid, 0, 0, 1);
            h.max_timestamp = ts;
            h
        };
        let mut txn = at(1, 0);
        txn.attributes = txn.attributes.with_transactional(true);
        append(&mut s, &txn, 0).unwrap();
        for pid in 2..=200 {
            append(&mut s, &at(pid, pid), pid).unwrap();
        }
        assert_eq!(s.len(), 200);
        append(&mut s, &at(201, 201), 201).unwrap();
        assert_eq!(s.len(), 198);
        assert!(s.entry(1).is_some(), "in a transaction: kept");
        assert!([2, 3, 4].iter().all(|p| s.entry(*p).is_none()), "the oldest idle ones went");
        assert!(s.entry(5).is_some() && s.entry(201).is_some());
        append(&mut s, &at(202, 202), 202).unwrap();
        append(&mut s, &at(203, 203), 203).unwrap();
        assert_eq!(s.len(), 200, "room was left for these");
        assert!(s.entry(5).is_some());
        append(&mut s, &at(204, 204), 204).unwrap();
        assert_eq!(s.len(), 198);
        assert!([5, 6, 7].iter().all(|p| s.entry(*p).is_none()));
    }

    #[test]
    fn expiry_spares_open_transactions() {
        let mut s = ProducerState::default();
        let mut txn = header(2, 0, 0, 1);
        txn.attributes = txn.attributes.with_transactional(true);
        append(&mut s, &header(1, 0, 0, 1), 0).unwrap();
        append(&mut s, &txn, 1).unwrap();
        assert_eq!(s.expire(i64::MAX, 1000), 1);
        assert!(s.entry(1).is_none() && s.entry(2).is_some());
    }
}
