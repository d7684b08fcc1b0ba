//! Committed offsets and stored group metadata, kept as records in `__consumer_offsets`.
//!
//! Owns: the in-memory view of every `__consumer_offsets` partition this node has served (one
//! [`Shard`] per partition, behind its own mutex), loading a shard from its partition, and
//! writing commits, deletions (tombstones) and group metadata as record batches.
//! Invariants: memory changes only once the batch carrying the change is replicated (the
//! partition's high watermark passed it: Kafka's pending commits, so an acknowledged commit is
//! what every later coordinator loads and nothing a failover may lose is ever served); a shard
//! is loaded at most once per partition incarnation (topic id); while it loads (without its
//! mutex held, on the blocking pool) every operation on it waits or answers
//! [`OffsetError::LoadInProgress`], so nothing is appended meanwhile and memory follows log
//! order. Request paths never load inline: they start the load and answer
//! COORDINATOR_LOAD_IN_PROGRESS, as Kafka does, so a cold shard does not stall an async worker.
//! The shard mutex and the partition's log mutex are never held across an `.await` (all
//! functions here are synchronous). The partition count is `offsets.topic.num.partitions` until
//! the topic exists, then the topic's actual count (set from the metadata image). Must not know
//! about membership: callers pass what it needs as arguments.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};

use bytes::Bytes;

use super::schema::{
    ConsumerMemberValue, ConsumerRecord, CurrentAssignmentValue, GroupMetadataValue, OffsetValue, OffsetsRecord,
    SchemaError, StoredPartitions,
};
use super::{partition_for, OFFSETS_TOPIC};
use crate::log::batch::BatchIter;
use crate::log::now_ms;
use crate::log::producer_state::VerificationGuard;
use crate::log::records::BatchBuilder;
use crate::log::{AppendOrigin, BatchError, Compression, TxnVerification};
use crate::partition::{Acks, Partition, PartitionError, ReplicaManager};

/// Kafka's `offsets.retention.minutes` default: 7 days.
pub const DEFAULT_OFFSETS_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// Kafka's `offset.metadata.max.bytes` default.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// Records per batch when writing many tombstones at once, to stay far below
/// `max.message.bytes`.
const TOMBSTONES_PER_BATCH: usize = 1000;

/// Bytes read per step while loading a partition.
const LOAD_READ_BYTES: usize = 1 << 20;

/// A committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when the client did not send one.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// Why an offset operation failed; `server::errors::offset_error_code` maps each to Kafka's code.
#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    /// This node does not host (lead) the group's `__consumer_offsets` partition.
    #[error("partition {partition} of __consumer_offsets is not hosted here")]
    NotCoordinator { partition: u32 },
    /// The partition is being read into memory; the client retries (COORDINATOR_LOAD_IN_PROGRESS).
    #[error("partition {partition} of __consumer_offsets is loading")]
    LoadInProgress { partition: u32 },
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// A batch of `__consumer_offsets` could not be built or read back.
    #[error("__consumer_offsets partition {partition}: {source}")]
    Batch {
        partition: u32,
        #[source]
        source: BatchError,
    },
    /// A group id, topic or metadata string longer than Kafka's STRING allows.
    #[error("cannot encode a record: {0}")]
    Encode(#[source] SchemaError),
}

/// Which leadership of which partition incarnation a shard was loaded for: the topic id and the
/// leader epoch. A new leader epoch here (this node led, lost and regained the partition, and
/// records were appended meanwhile by others) means the shard is stale and loads again.
type Leadership = ([u8; 16], i32);

fn leadership_of(hosted: &Partition) -> Leadership {
    (hosted.topic_id(), hosted.leader_epoch())
}

/// What one `__consumer_offsets` partition holds, by group.
#[derive(Default)]
struct Shard {
    /// The leadership this state was loaded for.
    loaded_from: Option<Leadership>,
    /// The leadership a load is reading for right now (the mutex is not held by it).
    loading: Option<Leadership>,
    /// A reload is about to drop the partition's groups ([`OffsetStore::reload`]): new
    /// requests are held off (`Cold::Start` answers `LoadInProgress`).
    reload_pending: bool,
    groups: HashMap<String, GroupOffsets>,
    /// Writes in the leader's log not yet below its high watermark, in log order: (the offset
    /// after the batch, its records, the producer id of a transactional commit). Applied by
    /// [`Shard::settle`] once replicated; dropped with the shard when the leadership changes
    /// (the next leader loads whatever survived).
    pending: VecDeque<(i64, Vec<OffsetsRecord>, Option<i64>)>,
    /// Transactional commits (TxnOffsetCommit, KIP-98) replicated but not yet decided, by
    /// producer id: applied when the commit marker arrives, dropped on an abort marker.
    open_txns: HashMap<i64, Vec<OffsetsRecord>>,
}

/// A shard and the condition its waiters wait on until a load ends.
#[derive(Default)]
struct Slot {
    shard: Mutex<Shard>,
    load_ended: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Shard> {
        self.shard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shard, once no load is reading into it.
    fn lock_between_loads(&self) -> MutexGuard<'_, Shard> {
        let mut shard = self.lock();
        while shard.loading.is_some() {
            shard = self.load_ended.wait(shard).unwrap_or_else(|p| p.into_inner());
        }
        shard
    }
}

/// The partitions of a group whose transactional commit is still undecided.
pub type Unstable = std::collections::BTreeSet<(String, i32)>;

/// Committed offsets: (topic, partition, offset).
pub type Committed = Vec<(String, i32, CommittedOffset)>;

/// What an operation on a shard that is not in memory does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cold {
    /// Load it (or wait for the load in flight) on this thread: for callers already off the
    /// async workers (the blocking pool, housekeeping).
    Wait,
    /// Start the load on the blocking pool and answer `LoadInProgress` at once: for request
    /// paths running on an async worker.
    Start,
}

#[derive(Default)]
struct GroupOffsets {
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    metadata: Option<GroupMetadataValue>,
    consumer: Option<StoredConsumerGroup>,
}

impl GroupOffsets {
    fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.metadata.is_none() && self.consumer.is_none()
    }
}

/// A consumer-protocol group as its records left it (what a new coordinator restores).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredConsumerGroup {
    pub group_epoch: i32,
    /// The hash of the subscribed topics' metadata stored with the epoch (0: not known).
    pub metadata_hash: i64,
    pub members: BTreeMap<String, ConsumerMemberValue>,
    pub target_epoch: i32,
    pub targets: BTreeMap<String, StoredPartitions>,
    pub current: BTreeMap<String, CurrentAssignmentValue>,
}

impl StoredConsumerGroup {
    /// Applies one record (Kafka's replay): a group-epoch tombstone deletes the group.
    pub(crate) fn apply(stored: &mut Option<StoredConsumerGroup>, record: ConsumerRecord) {
        if let ConsumerRecord::GroupEpoch(None) = record {
            *stored = None;
            return;
        }
        let group = stored.get_or_insert_with(StoredConsumerGroup::default);
        match record {
            ConsumerRecord::GroupEpoch(Some(value)) => {
                group.group_epoch = value.epoch;
                group.metadata_hash = value.metadata_hash;
            }
            ConsumerRecord::GroupEpoch(None) => {}
            ConsumerRecord::TargetEpoch(epoch) => group.target_epoch = epoch.unwrap_or(0),
            ConsumerRecord::Member { member_id, value: Some(v) } => {
                group.members.insert(member_id, v);
            }
            ConsumerRecord::Member { member_id, value: None } => {
                group.members.remove(&member_id);
            }
            ConsumerRecord::TargetMember { member_id, value: Some(v) } => {
                group.targets.insert(member_id, v);
            }
            ConsumerRecord::TargetMember { member_id, value: None } => {
                group.targets.remove(&member_id);
            }
            ConsumerRecord::CurrentAssignment { member_id, value: Some(v) } => {
                group.current.insert(member_id, v);
            }
            ConsumerRecord::CurrentAssignment { member_id, value: None } => {
                group.current.remove(&member_id);
            }
        }
    }

    /// [`Self::tombstones`] as records of `group` in `__consumer_offsets`.
    fn tombstone_records<'a>(&self, group: &'a str) -> impl Iterator<Item = OffsetsRecord> + 'a {
        self.tombstones().into_iter().map(move |record| OffsetsRecord::Consumer { group: group.to_string(), record })
    }

    /// Tombstones of every record of the group, in Kafka's deletion order.
    fn tombstones(&self) -> Vec<ConsumerRecord> {
        let mut records: Vec<ConsumerRecord> = Vec::new();
        records.extend(
            self.current.keys().map(|m| ConsumerRecord::CurrentAssignment { member_id: m.clone(), value: None }),
        );
        records.extend(self.targets.keys().map(|m| ConsumerRecord::TargetMember { member_id: m.clone(), value: None }));
        records.push(ConsumerRecord::TargetEpoch(None));
        records.extend(self.members.keys().map(|m| ConsumerRecord::Member { member_id: m.clone(), value: None }));
        records.push(ConsumerRecord::GroupEpoch(None));
        records
    }
}

impl Shard {
    /// Applies, in log order, every pending write the high watermark has passed.
    fn settle(&mut self, high_watermark: i64) {
        while self.pending.front().is_some_and(|(end_offset, _, _)| *end_offset <= high_watermark) {
            match self.pending.pop_front() {
                Some((_, records, None)) => {
                    for record in records {
                        self.apply_plain(record);
                    }
                }
                Some((_, records, Some(producer_id))) => self.open_txns.entry(producer_id).or_default().extend(records),
                None => {}
            }
        }
    }

    /// Records a write the leader appended; memory takes it once it is replicated.
    fn appended(&mut self, hosted: &Partition, end_offset: i64, records: Vec<OffsetsRecord>, txn: Option<i64>) {
        debug_assert!(self.pending.back().is_none_or(|(last, _, _)| *last < end_offset), "pending writes in log order");
        self.pending.push_back((end_offset, records, txn));
        self.settle(hosted.high_watermark());
    }

    /// A transaction marker for `producer_id`: its commits become visible, or vanish.
    fn complete_txn(&mut self, producer_id: i64, commit: bool) {
        if let Some(records) = self.open_txns.remove(&producer_id) {
            if commit {
                for record in records {
                    self.apply(record);
                }
            }
        }
    }

    /// Committed offsets of `group`: of the given partitions (those with a commit), or all.
    fn committed(&self, group: &str, partitions: Option<&[(String, i32)]>) -> Vec<(String, i32, CommittedOffset)> {
        let Some(g) = self.groups.get(group) else {
            return Vec::new();
        };
        match partitions {
            None => g.offsets.iter().map(|((t, p), c)| (t.clone(), *p, c.clone())).collect(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|(t, p)| g.offsets.get(&(t.clone(), *p)).map(|c| (t.clone(), *p, c.clone())))
                .collect(),
        }
    }

    /// The partitions of `group` with a transactional commit not decided yet.
    fn open_txn_commits(&self, group: &str) -> std::collections::BTreeSet<(String, i32)> {
        let pending = self.pending.iter().filter(|(_, _, txn)| txn.is_some()).flat_map(|(_, r, _)| r);
        self.open_txns
            .values()
            .flatten()
            .chain(pending)
            .filter_map(|record| match record {
                OffsetsRecord::Commit { group: g, topic, partition, .. } if g == group => {
                    Some((topic.clone(), *partition))
                }
                _ => None,
            })
            .collect()
    }

    /// Applies a record written outside any transaction. A commit or deletion of a group's
    /// offset is newer than every transactional commit of that partition still undecided (they
    /// were all written before it): those are dropped, so their markers cannot bring an older
    /// offset back over it. Kafka keeps the commit with the later record offset
    /// (`OffsetMetadataManager.replayEndTransactionMarker`).
    fn apply_plain(&mut self, record: OffsetsRecord) {
        if let OffsetsRecord::Commit { group, topic, partition, .. } = &record {
            for records in self.open_txns.values_mut() {
                records.retain(|open| {
                    !matches!(open, OffsetsRecord::Commit { group: g, topic: t, partition: p, .. }
                        if g == group && t == topic && p == partition)
                });
            }
        }
        self.apply(record);
    }

    fn apply(&mut self, record: OffsetsRecord) {
        match record {
            OffsetsRecord::Commit { group, topic, partition, value: Some(v) } => {
                let committed = CommittedOffset {
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: v.metadata,
                    commit_timestamp: v.commit_timestamp,
                };
                self.groups.entry(group).or_default().offsets.insert((topic, partition), committed);
            }
            OffsetsRecord::Commit { group, topic, partition, value: None } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.offsets.remove(&(topic, partition));
                    if g.is_empty() {
                        self.groups.remove(&group);
                    }
                }
            }
            OffsetsRecord::Group { group, value: Some(v) } => {
                // A group id has one type: classic metadata ends any consumer-group state.
                let g = self.groups.entry(group).or_default();
                g.metadata = Some(v);
                g.consumer = None;
            }
            OffsetsRecord::Group { group, value: None } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.metadata = None;
                    if g.is_empty() {
                        self.groups.remove(&group);
                    }
                }
            }
            OffsetsRecord::Consumer { group, record } => {
                let g = self.groups.entry(group.clone()).or_default();
                if !record.is_tombstone() {
                    g.metadata = None;
                }
                StoredConsumerGroup::apply(&mut g.consumer, record);
                if g.is_empty() {
                    self.groups.remove(&group);
                }
            }
        }
    }
}

/// Committed offsets of the groups this node coordinates.
pub struct OffsetStore {
    replicas: Arc<ReplicaManager>,
    /// `offsets.topic.num.partitions` until the topic exists, then its actual partition count.
    partitions: AtomicU32,
    /// One slot per partition; grows with the partition count, never shrinks.
    slots: RwLock<Vec<Arc<Slot>>>,
    /// Loads finished (for tests and logs: concurrent requests share one load).
    loads: Arc<AtomicUsize>,
    /// Told about every load (the membership layer restores the partition's groups from it).
    on_load: Arc<OnceLock<LoadListener>>,
}

/// What a finished load hands to the listener: the partition, a test of whether a group maps to
/// it, and the stored metadata of its groups.
pub struct Loaded<'a> {
    pub partition: u32,
    pub maps_here: &'a dyn Fn(&str) -> bool,
    pub groups: Vec<(String, GroupMetadataValue)>,
    /// Consumer-protocol groups (KIP-848) as their records left them.
    pub consumer_groups: Vec<(String, StoredConsumerGroup)>,
}

/// Called once per finished load, with the shard's mutex released but the load still claimed:
/// nothing else runs on the shard meanwhile (requests wait for the load or are answered
/// COORDINATOR_LOAD_IN_PROGRESS), so the listener sees exactly the loaded state, and it may take
/// groups' locks (see [`load_into`]).
pub type LoadListener = Box<dyn Fn(Loaded<'_>) + Send + Sync>;

impl OffsetStore {
    /// `partitions` is `offsets.topic.num.partitions`, used until the topic exists.
    pub fn new(replicas: Arc<ReplicaManager>, partitions: u32) -> OffsetStore {
        assert!(partitions > 0, "__consumer_offsets needs at least one partition");
        OffsetStore {
            replicas,
            partitions: AtomicU32::new(partitions),
            slots: RwLock::new(Vec::new()),
            loads: Arc::new(AtomicUsize::new(0)),
            on_load: Arc::new(OnceLock::new()),
        }
    }

    /// Sets the one listener told about every finished load; later calls are ignored.
    pub fn set_load_listener(&self, listener: LoadListener) {
        let _ = self.on_load.set(listener);
    }

    /// Follows the actual partition count of `__consumer_offsets` (Kafka's `partitionFor` uses
    /// the topic's count once it exists). Called with every metadata image.
    pub fn set_partition_count(&self, partitions: u32) {
        if partitions > 0 && self.partitions.swap(partitions, Ordering::AcqRel) != partitions {
            tracing::info!(partitions, "__consumer_offsets partition count");
        }
    }

    /// The partition count groups are mapped over.
    pub fn partition_count(&self) -> u32 {
        self.partitions.load(Ordering::Acquire)
    }

    /// The `__consumer_offsets` partition of `group`.
    pub fn partition_of(&self, group: &str) -> u32 {
        partition_for(group, self.partition_count())
    }

    /// How many shard loads have completed.
    pub fn loads(&self) -> usize {
        self.loads.load(Ordering::Acquire)
    }

    fn slot(&self, partition: u32) -> Option<Arc<Slot>> {
        if partition >= self.partition_count() {
            return None;
        }
        if let Some(slot) = self.slots.read().unwrap_or_else(|p| p.into_inner()).get(partition as usize) {
            return Some(slot.clone());
        }
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        while slots.len() <= partition as usize {
            slots.push(Arc::new(Slot::default()));
        }
        Some(slots[partition as usize].clone())
    }

    /// Loads partition `partition` of `__consumer_offsets` into memory if not done yet for its
    /// current incarnation, on this thread (or waits for the load in flight). Idempotent.
    /// Blocks: call it off the async workers.
    pub fn ensure_loaded(&self, partition: u32) -> Result<(), OffsetError> {
        self.with_shard(partition, Cold::Wait, |_, _| Ok(()))
    }

    /// Whether `partition` is in memory; if not, starts loading it on the blocking pool and
    /// answers `LoadInProgress`. Never blocks on the log.
    pub fn require_loaded(&self, partition: u32) -> Result<(), OffsetError> {
        self.with_shard(partition, Cold::Start, |_, _| Ok(()))
    }

    /// The shard slot of `partition` and the partition, if this node leads it (else
    /// NOT_COORDINATOR).
    fn led_slot(&self, partition: u32) -> Result<(Arc<Slot>, Arc<Partition>), OffsetError> {
        let led = self.replicas.get(OFFSETS_TOPIC, partition).filter(|p| p.is_leader());
        match (self.slot(partition), led) {
            (Some(slot), Some(hosted)) => Ok((slot, hosted)),
            _ => Err(OffsetError::NotCoordinator { partition }),
        }
    }

    /// Reads `partition` again from its log, because a group coordinator's memory may be ahead
    /// of it: a write of group records that did not reach the log (answered as an error) left
    /// its change in memory. First the shard is marked `reload_pending`: new requests that
    /// check the partition ([`OffsetStore::require_loaded`], every `Cold::Start` use, the
    /// consumer-group writes made under a group's lock among them) are answered
    /// COORDINATOR_LOAD_IN_PROGRESS, so nothing holding a group's lock waits here (`drop_groups`
    /// takes group locks). Then `drop_groups` takes the partition's groups out of memory, and a
    /// load restores them from the log (through the load listener), whatever reached it meanwhile
    /// included. Blocks: call it off the async workers.
    pub fn reload(&self, partition: u32, drop_groups: impl FnOnce()) -> Result<(), OffsetError> {
        let (slot, hosted) = self.led_slot(partition)?;
        slot.lock_between_loads().reload_pending = true;
        drop_groups();
        {
            let mut shard = slot.lock_between_loads();
            shard.reload_pending = false;
            shard.loaded_from = None;
            shard.loading = Some(leadership_of(&hosted));
        }
        load_into(&slot, &hosted, &self.loads, self.on_load.get(), self.partition_count())
    }

    /// Marks `partition` `reload_pending` at once, ahead of a [`OffsetStore::reload`] scheduled
    /// on another thread: consumer groups' writes to it are answered
    /// COORDINATOR_LOAD_IN_PROGRESS until the reload has run. Never waits for a load (the
    /// caller holds a group's lock, which a load may need).
    pub fn hold_off_until_reloaded(&self, partition: u32) {
        if let Some(slot) = self.slot(partition) {
            slot.lock().reload_pending = true;
        }
    }

    /// Runs `f` on the shard of `partition` under its mutex, once the shard is in memory for
    /// the partition's current incarnation; `cold` says what to do if it is not.
    /// Only the partition's leader coordinates its groups: a follower answers NOT_COORDINATOR,
    /// and a shard loaded under an older leadership is loaded again.
    fn with_shard<R>(
        &self,
        partition: u32,
        cold: Cold,
        f: impl FnOnce(&mut Shard, &Arc<Partition>) -> Result<R, OffsetError>,
    ) -> Result<R, OffsetError> {
        let (slot, hosted) = self.led_slot(partition)?;
        let leadership = leadership_of(&hosted);
        let mut shard = slot.lock();
        loop {
            if shard.loaded_from == Some(leadership) {
                if shard.reload_pending && cold == Cold::Start {
                    return Err(OffsetError::LoadInProgress { partition });
                }
                shard.settle(hosted.high_watermark());
                return f(&mut shard, &hosted);
            }
            if shard.loading == Some(leadership) {
                if cold == Cold::Start {
                    return Err(OffsetError::LoadInProgress { partition });
                }
                shard = slot.load_ended.wait(shard).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            shard.loading = Some(leadership);
            drop(shard);
            let background = match cold {
                Cold::Start => tokio::runtime::Handle::try_current().ok(),
                Cold::Wait => None,
            };
            match background {
                Some(runtime) => {
                    let (slot, hosted, loads) = (slot.clone(), hosted.clone(), self.loads.clone());
                    let (on_load, partitions) = (self.on_load.clone(), self.partition_count());
                    runtime.spawn_blocking(move || {
                        if let Err(e) = load_into(&slot, &hosted, &loads, on_load.get(), partitions) {
                            tracing::warn!(partition, error = %e, "could not load __consumer_offsets partition");
                        }
                    });
                    return Err(OffsetError::LoadInProgress { partition });
                }
                // No runtime (a plain thread): loading here blocks nothing else.
                None => load_into(&slot, &hosted, &self.loads, self.on_load.get(), self.partition_count())?,
            }
            shard = slot.lock();
        }
    }

    /// Commits offsets of `group` in one batch. The commit is acknowledged only once the
    /// returned [`Replicated`] resolves (acks=all on the internal topic); memory shows it from
    /// then on, never before (a commit the ISR does not have yet is not served by OffsetFetch).
    pub fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> Result<Option<Replicated>, OffsetError> {
        self.commit_as(group, offsets, None, TxnVerification::NotRequired)
    }

    /// TxnOffsetCommit: the offsets go into the log as a transactional batch of the producer
    /// `(id, epoch)`; they become visible only when the transaction's commit marker reaches this
    /// partition ([`OffsetStore::complete_txn`]) and vanish on an abort. A batch that opens the
    /// producer's transaction here is refused (INVALID_TXN_STATE) unless `verification` holds
    /// the guard of [`OffsetStore::start_txn_verification`] still in place (KIP-890 part 1).
    pub fn commit_transactional(
        &self,
        group: &str,
        producer: (i64, i16),
        offsets: Vec<(String, i32, CommittedOffset)>,
        verification: TxnVerification,
    ) -> Result<Option<Replicated>, OffsetError> {
        self.commit_as(group, offsets, Some(producer), verification)
    }

    /// Starts verifying, on `group`'s partition, that `producer` has it in an ongoing
    /// transaction ([`Partition::start_txn_verification`]): `None` when a transaction of that
    /// epoch is open there already.
    pub fn start_txn_verification(
        &self,
        group: &str,
        (producer_id, epoch): (i64, i16),
    ) -> Result<Option<VerificationGuard>, OffsetError> {
        self.with_shard(self.partition_of(group), Cold::Start, |_, hosted| {
            Ok(hosted.start_txn_verification(producer_id, epoch)?)
        })
    }

    /// Drops a verification the transaction's coordinator refused.
    pub fn end_txn_verification(&self, group: &str, producer_id: i64, guard: VerificationGuard) {
        if let Ok((_, hosted)) = self.led_slot(self.partition_of(group)) {
            hosted.end_txn_verification(producer_id, guard);
        }
    }

    fn commit_as(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
        producer: Option<(i64, i16)>,
        verification: TxnVerification,
    ) -> Result<Option<Replicated>, OffsetError> {
        if offsets.is_empty() {
            return Ok(None);
        }
        let partition = self.partition_of(group);
        let records = commit_records(group, offsets);
        self.with_shard(partition, Cold::Start, |shard, hosted| {
            let replicated = append_verified(hosted, partition, &records, producer, verification)?;
            shard.appended(hosted, replicated.required_offset, records, producer.map(|(id, _)| id));
            Ok(Some(replicated))
        })
    }

    /// A transaction marker for `producer_id` was written (and replicated) to `partition`.
    pub fn complete_txn(&self, partition: u32, producer_id: i64, commit: bool) -> Result<(), OffsetError> {
        self.with_shard(partition, Cold::Wait, |shard, _| {
            shard.complete_txn(producer_id, commit);
            Ok(())
        })
    }

    /// Committed offsets of `group`: of the given partitions (those with a commit), or all.
    pub fn fetch(
        &self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<(String, i32, CommittedOffset)>, OffsetError> {
        self.with_shard(self.partition_of(group), Cold::Start, |shard, _| Ok(shard.committed(group, partitions)))
    }

    /// As [`Self::fetch`], with the partitions of `group` whose transactional commit is still
    /// undecided (OffsetFetch `require_stable`: UNSTABLE_OFFSET_COMMIT), both from one look at
    /// the shard: with two looks, a commit decided between them would show the offset before
    /// it as stable.
    pub fn fetch_stable(
        &self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<(Committed, Unstable), OffsetError> {
        self.with_shard(self.partition_of(group), Cold::Start, |shard, _| {
            Ok((shard.committed(group, partitions), shard.open_txn_commits(group)))
        })
    }

    /// Deletes the committed offsets of the given partitions (tombstones); the returned
    /// [`Replicated`] (if anything was written) resolves once the ISR has them.
    pub fn delete_offsets(&self, group: &str, partitions: &[(String, i32)]) -> Result<Option<Replicated>, OffsetError> {
        let partition = self.partition_of(group);
        self.with_shard(partition, Cold::Start, |shard, hosted| {
            let Some(g) = shard.groups.get(group) else {
                return Ok(None);
            };
            let records: Vec<OffsetsRecord> = partitions
                .iter()
                .filter(|(t, p)| g.offsets.contains_key(&(t.clone(), *p)))
                .map(|(t, p)| OffsetsRecord::Commit {
                    group: group.to_string(),
                    topic: t.clone(),
                    partition: *p,
                    value: None,
                })
                .collect();
            write_all(shard, hosted, partition, records)
        })
    }

    /// Deletes a group: tombstones for all its offsets and its metadata. Returns whether the
    /// store knew anything of it, and what to wait on for the ISR to have the tombstones.
    /// Runs under the group's locks (`GroupCoordinator::delete_group`), so it never waits for a
    /// load: a shard still loading answers `LoadInProgress`.
    pub fn delete_group(&self, group: &str) -> Result<(bool, Option<Replicated>), OffsetError> {
        let partition = self.partition_of(group);
        self.with_shard(partition, Cold::Start, |shard, hosted| {
            let Some(records) = group_tombstones(shard, group) else {
                return Ok((false, None));
            };
            let replicated = write_all(shard, hosted, partition, records)?;
            Ok((true, replicated))
        })
    }

    /// Stores a group's metadata after a rebalance (the membership layer calls it); the
    /// returned [`Replicated`] resolves once the ISR has it. Blocks while the shard loads: call it
    /// off the async workers.
    pub fn store_group_metadata(&self, group: &str, value: GroupMetadataValue) -> Result<Replicated, OffsetError> {
        let partition = self.partition_of(group);
        self.with_shard(partition, Cold::Wait, |shard, hosted| {
            // A group id has one type: the classic metadata replaces any consumer-group records.
            let mut records = other_type_tombstones(shard, group, GroupType::Classic);
            records.push(OffsetsRecord::Group { group: group.to_string(), value: Some(value) });
            let replicated = append(hosted, partition, &records, None)?;
            shard.appended(hosted, replicated.required_offset, records, None);
            Ok(replicated)
        })
    }

    /// Appends a consumer-protocol group's records as one batch (the consumer group state
    /// machine calls it, under the group's lock, so batches follow the order of its changes);
    /// the returned [`Replicated`] resolves once the ISR has them. While the shard loads it
    /// answers `LoadInProgress` at once instead of waiting: a load may need the group's lock
    /// (a reload drops the partition's groups first, and a load replaces them).
    pub fn store_consumer_records(&self, group: &str, records: Vec<ConsumerRecord>) -> Result<Replicated, OffsetError> {
        let partition = self.partition_of(group);
        self.with_shard(partition, Cold::Start, |shard, hosted| {
            // A group id has one type: consumer-group records replace any classic metadata.
            let converts = records.iter().any(|r| !r.is_tombstone());
            let mut batch =
                if converts { other_type_tombstones(shard, group, GroupType::Consumer) } else { Vec::new() };
            batch
                .extend(records.into_iter().map(|record| OffsetsRecord::Consumer { group: group.to_string(), record }));
            let records = batch;
            let replicated = append(hosted, partition, &records, None)?;
            shard.appended(hosted, replicated.required_offset, records, None);
            Ok(replicated)
        })
    }

    /// The stored metadata of `group`, if any (and if its partition is hosted and loaded here;
    /// a cold partition starts loading).
    pub fn group_metadata(&self, group: &str) -> Option<GroupMetadataValue> {
        self.with_shard(self.partition_of(group), Cold::Start, |shard, _| {
            Ok(shard.groups.get(group).and_then(|g| g.metadata.clone()))
        })
        .ok()
        .flatten()
    }

    /// Every group with committed offsets or stored metadata in the hosted partitions,
    /// loading them first. Blocks while they load: call it off the async workers.
    pub fn groups_with_offsets(&self) -> Vec<String> {
        let mut groups = Vec::new();
        for partition in 0..self.partition_count() {
            let _ = self.with_shard(partition, Cold::Wait, |shard, _| {
                groups.extend(shard.groups.keys().cloned());
                Ok(())
            });
        }
        groups.sort();
        groups
    }

    /// Expires the offsets of groups that have no members, and the groups themselves once
    /// nothing is left (Kafka's `cleanupGroupMetadata`, with KIP-211's rule). Returns how many
    /// offsets expired.
    ///
    /// - A classic group (stored metadata with a protocol type) that is Empty keeps every
    ///   offset until `retention_ms` after it **became Empty** (the stored
    ///   `current_state_timestamp`), however old its commits: a quiet group restarted after a
    ///   week keeps its positions. One that emptied without storing it (its members' sessions
    ///   expired) is stored as Empty first, stamped now; its offsets expire a retention later.
    /// - Groups without classic metadata (standalone commits, transform checkpoints) and
    ///   consumer-protocol groups expire each offset `retention_ms` after its commit.
    /// - An Empty classic or consumer-protocol group without offsets left is deleted (its
    ///   metadata or consumer-group records tombstoned, its memory dropped by the gate).
    /// - A partition with an undecided transactional commit keeps its offset and its group.
    ///
    /// A group's records are written inside `gate.run_if_empty(group, ..)`, which runs the
    /// write only if the group still has no members and keeps members out until it is done
    /// (Kafka's `cleanupGroupMetadata` holds the group lock): a member that joins after the
    /// candidates were picked keeps its group's offsets.
    pub fn expire(&self, now_ms: i64, retention_ms: i64, gate: &dyn EmptyGroupGate) -> usize {
        let mut expired = 0;
        for partition in 0..self.partition_count() {
            if self.replicas.get(OFFSETS_TOPIC, partition).is_none_or(|p| !p.is_leader()) {
                continue;
            }
            let candidates = self.with_shard(partition, Cold::Wait, |shard, _| {
                Ok(shard.groups.iter().filter(|(_, g)| !g.is_empty()).map(|(name, _)| name.clone()).collect::<Vec<_>>())
            });
            // Each group's records are computed and written inside its gate (the group's lock,
            // then the shard's: the lock order of every group write), without waiting for a
            // load (a load restores groups under their locks): a loading shard waits for the
            // next sweep.
            for group in candidates.unwrap_or_default() {
                // (offset tombstones, whether the group was deleted)
                let mut written = Ok((0, false));
                let ran = gate.run_if_empty(&group, &mut || {
                    written = self.with_shard(partition, Cold::Start, |shard, hosted| {
                        let Expiry { records, offsets, group_deleted } =
                            expiry_records(shard, &group, now_ms, retention_ms);
                        write_all(shard, hosted, partition, records)?;
                        Ok((offsets, group_deleted))
                    });
                    written.as_ref().is_ok_and(|(_, deleted)| *deleted)
                });
                match (ran, written) {
                    (true, Ok((offsets, _))) => expired += offsets,
                    (true, Err(e)) => tracing::warn!(partition, %group, error = %e, "could not expire offsets"),
                    (false, _) => {}
                }
            }
        }
        expired
    }
}

/// Runs an offsets expiry write for a group only while it has no members, keeping members
/// from joining until the write is done (the membership layer implements it).
pub trait EmptyGroupGate {
    /// Runs `write` and answers true if `group` has no members now; false (without running it)
    /// otherwise. `write` answers whether it deleted the group: the gate then forgets it too.
    fn run_if_empty(&self, group: &str, write: &mut dyn FnMut() -> bool) -> bool;
}

/// What one group's expiry writes.
#[derive(Debug, Default)]
struct Expiry {
    records: Vec<OffsetsRecord>,
    /// Offset tombstones among `records`.
    offsets: usize,
    /// The group's metadata is tombstoned: it is gone.
    group_deleted: bool,
}

/// The expiry of one group without members (see [`OffsetStore::expire`]).
fn expiry_records(shard: &Shard, group: &str, now_ms: i64, retention_ms: i64) -> Expiry {
    let Some(g) = shard.groups.get(group) else { return Expiry::default() };
    let expired_since = |base: i64| base.saturating_add(retention_ms) < now_ms;
    let classic = g.metadata.as_ref().filter(|m| !m.protocol_type.is_empty() && g.consumer.is_none());
    if let Some(meta) = classic.filter(|m| !m.members.is_empty()) {
        // Empty now (the gate says so), stored with members: store the Empty state first.
        let value = GroupMetadataValue {
            protocol: None,
            leader: None,
            members: Vec::new(),
            current_state_timestamp: now_ms,
            ..meta.clone()
        };
        return Expiry {
            records: vec![OffsetsRecord::Group { group: group.to_string(), value: Some(value) }],
            ..Expiry::default()
        };
    }
    let empty_since = classic.map(|m| m.current_state_timestamp).filter(|t| *t > 0);
    // A partition with a transactional commit still undecided keeps its offset, and its group
    // stays (Kafka's `hasPendingTransactionalOffsets`): a plain tombstone would also drop the
    // open commit (see `Shard::apply_plain`).
    let undecided = shard.open_txn_commits(group);
    let mut records: Vec<OffsetsRecord> = g
        .offsets
        .iter()
        .filter(|(key, c)| !undecided.contains(*key) && expired_since(empty_since.unwrap_or(c.commit_timestamp)))
        .map(|((t, p), _)| OffsetsRecord::Commit {
            group: group.to_string(),
            topic: t.clone(),
            partition: *p,
            value: None,
        })
        .collect();
    let offsets = records.len();
    // A group (classic, or consumer-protocol: Kafka's `maybeDeleteGroup` on an Empty group)
    // without offsets left is deleted, as DeleteGroups deletes it. Standalone offsets have no
    // group to delete.
    let group_deleted =
        (classic.is_some() || g.consumer.is_some()) && offsets == g.offsets.len() && undecided.is_empty();
    if group_deleted {
        records = group_tombstones(shard, group).unwrap_or_default();
    }
    Expiry { records, offsets, group_deleted }
}

fn commit_records(group: &str, offsets: Vec<(String, i32, CommittedOffset)>) -> Vec<OffsetsRecord> {
    offsets
        .into_iter()
        .map(|(topic, p, c)| OffsetsRecord::Commit {
            group: group.to_string(),
            topic,
            partition: p,
            value: Some(OffsetValue {
                offset: c.offset,
                leader_epoch: c.leader_epoch,
                metadata: c.metadata,
                commit_timestamp: c.commit_timestamp,
            }),
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupType {
    Classic,
    Consumer,
}

/// Tombstones of what `group` stores as the type other than `writing` (the classic metadata,
/// or every consumer-group record), as the log will read once the pending writes are in: the
/// records a conversion between the protocols writes first (Kafka's
/// `createGroupTombstoneRecords`), so a reload never finds the group as both types.
fn other_type_tombstones(shard: &Shard, group: &str, writing: GroupType) -> Vec<OffsetsRecord> {
    let stored = shard.groups.get(group);
    let pending = shard
        .pending
        .iter()
        .filter(|(_, _, txn)| txn.is_none())
        .flat_map(|(_, records, _)| records)
        .filter(|record| record.group() == group);
    match writing {
        GroupType::Consumer => {
            let mut classic = stored.is_some_and(|g| g.metadata.is_some());
            for record in pending {
                match record {
                    OffsetsRecord::Group { value, .. } => classic = value.is_some(),
                    OffsetsRecord::Consumer { record, .. } if !record.is_tombstone() => classic = false,
                    _ => {}
                }
            }
            if classic {
                vec![OffsetsRecord::Group { group: group.to_string(), value: None }]
            } else {
                Vec::new()
            }
        }
        GroupType::Classic => {
            let mut consumer = stored.and_then(|g| g.consumer.clone());
            for record in pending {
                match record {
                    OffsetsRecord::Consumer { record, .. } => StoredConsumerGroup::apply(&mut consumer, record.clone()),
                    OffsetsRecord::Group { value: Some(_), .. } => consumer = None,
                    _ => {}
                }
            }
            consumer
                .map(|c| c.tombstones())
                .unwrap_or_default()
                .into_iter()
                .map(|record| OffsetsRecord::Consumer { group: group.to_string(), record })
                .collect()
        }
    }
}

/// Tombstones of every offset and the metadata of `group`; `None` if the shard has nothing.
fn group_tombstones(shard: &Shard, group: &str) -> Option<Vec<OffsetsRecord>> {
    let g = shard.groups.get(group)?;
    let mut records: Vec<OffsetsRecord> = g
        .offsets
        .keys()
        .map(|(t, p)| OffsetsRecord::Commit { group: group.to_string(), topic: t.clone(), partition: *p, value: None })
        .collect();
    records.push(OffsetsRecord::Group { group: group.to_string(), value: None });
    if let Some(consumer) = &g.consumer {
        records.extend(consumer.tombstone_records(group));
    }
    Some(records)
}

/// Tombstones of the expired offsets of `group`, and of its metadata once none is left.
/// Appends `records` in batches of at most [`TOMBSTONES_PER_BATCH`], each applied to memory
/// once replicated. Returns the last batch's [`Replicated`] (`None` when nothing was written):
/// a caller that answers a client waits on it, as Kafka answers deletes once the ISR has them.
fn write_all(
    shard: &mut Shard,
    hosted: &Arc<Partition>,
    partition: u32,
    mut records: Vec<OffsetsRecord>,
) -> Result<Option<Replicated>, OffsetError> {
    let mut last = None;
    while !records.is_empty() {
        let rest = records.split_off(records.len().min(TOMBSTONES_PER_BATCH));
        let replicated = append(hosted, partition, &records, None)?;
        shard.appended(hosted, replicated.required_offset, records, None);
        last = Some(replicated);
        records = rest;
    }
    Ok(last)
}

/// An append to `__consumer_offsets` waiting to be replicated to the ISR.
pub struct Replicated {
    partition: Arc<Partition>,
    required_offset: i64,
    leader_epoch: i32,
}

impl Replicated {
    /// Kafka's `offsets.commit.timeout.ms` default.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

    /// Resolves once the high watermark passed the append (see `Partition::wait_replicated`).
    pub async fn wait(self, timeout: std::time::Duration) -> Result<(), OffsetError> {
        Ok(self.partition.wait_replicated(self.required_offset, self.leader_epoch, timeout).await?)
    }
}

/// Appends `records` as one uncompressed batch on the leader (acks=all: the caller waits); a
/// transactional one carries its producer's id and epoch (no sequence, as Kafka's coordinator
/// writes them).
fn append(
    hosted: &Arc<Partition>,
    partition: u32,
    records: &[OffsetsRecord],
    producer: Option<(i64, i16)>,
) -> Result<Replicated, OffsetError> {
    append_verified(hosted, partition, records, producer, TxnVerification::NotRequired)
}

fn append_verified(
    hosted: &Arc<Partition>,
    partition: u32,
    records: &[OffsetsRecord],
    producer: Option<(i64, i16)>,
    verification: TxnVerification,
) -> Result<Replicated, OffsetError> {
    let timestamp = now_ms();
    let mut builder = BatchBuilder::new(Compression::None);
    if let Some((producer_id, producer_epoch)) = producer {
        builder = builder.producer(producer_id, producer_epoch, crate::log::batch::NO_SEQUENCE).transactional(true);
    }
    for record in records {
        let (key, value) = record.encode().map_err(OffsetError::Encode)?;
        builder.push(timestamp, Some(&key), value.as_deref(), &[]);
    }
    let batch = builder.build().map_err(|source| OffsetError::Batch { partition, source })?;
    let bytes: Bytes = batch.into_bytes();
    let (info, _, leader_epoch) = hosted.append_verified(&bytes, Acks::All, AppendOrigin::Coordinator, verification)?;
    Ok(Replicated { partition: hosted.clone(), required_offset: info.last_offset + 1, leader_epoch })
}

/// Loads `hosted` into `slot`, ends the slot's load and wakes its waiters, whether the read
/// worked or not. The load listener (which restores the groups of the memberships, taking their
/// locks) runs with the slot's mutex released but the load still claimed, so requests wait for
/// it or are answered COORDINATOR_LOAD_IN_PROGRESS. **Lock order:** a group's lock, then the
/// slot's mutex, never the reverse (a heartbeat stores its records under its group's lock).
fn load_into(
    slot: &Slot,
    hosted: &Partition,
    loads: &AtomicUsize,
    on_load: Option<&LoadListener>,
    partitions: u32,
) -> Result<(), OffsetError> {
    let leadership = leadership_of(hosted);
    let started = std::time::Instant::now();
    let loaded = load(hosted);
    let mut shard = slot.lock();
    let result = match loaded {
        Ok((groups, open_txns)) => {
            shard.groups = groups;
            shard.open_txns = open_txns;
            shard.pending.clear();
            let group_count = shard.groups.len();
            let restored = on_load.map(|_| {
                let stored: Vec<_> =
                    shard.groups.iter().filter_map(|(name, g)| g.metadata.clone().map(|m| (name.clone(), m))).collect();
                let consumer_groups: Vec<_> =
                    shard.groups.iter().filter_map(|(name, g)| g.consumer.clone().map(|c| (name.clone(), c))).collect();
                (stored, consumer_groups)
            });
            drop(shard);
            if let (Some(listener), Some((stored, consumer_groups))) = (on_load, restored) {
                let partition = hosted.index();
                listener(Loaded {
                    partition,
                    maps_here: &|group| partition_for(group, partitions) == partition,
                    groups: stored,
                    consumer_groups,
                });
            }
            shard = slot.lock();
            if shard.loading == Some(leadership) {
                shard.loaded_from = Some(leadership);
            }
            loads.fetch_add(1, Ordering::AcqRel);
            tracing::debug!(
                partition = hosted.index(),
                groups = group_count,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "loaded __consumer_offsets partition"
            );
            Ok(())
        }
        Err(error) => Err(error),
    };
    if shard.loading == Some(leadership) {
        shard.loading = None;
    }
    drop(shard);
    slot.load_ended.notify_all();
    result
}

/// Reads a `__consumer_offsets` partition from its log start to its log end offset (a new
/// leader's high watermark may still be below commits the previous leader acknowledged: see
/// [`Partition::read_to_log_end`]); later
/// records win, tombstones delete. Records that do not decode (a future schema) are skipped.
/// Transactional commits are held per producer until their marker: applied on commit, dropped
/// on abort; those still open at the end are returned with the groups.
type LoadedShard = (HashMap<String, GroupOffsets>, HashMap<i64, Vec<OffsetsRecord>>);

fn load(hosted: &Partition) -> Result<LoadedShard, OffsetError> {
    let partition = hosted.index();
    let mut shard = Shard { loaded_from: Some(leadership_of(hosted)), ..Shard::default() };
    let mut next = hosted.log_start_offset();
    let mut skipped = 0usize;
    let end = hosted.log_end_offset();
    loop {
        if next >= end {
            break;
        }
        // A batch above the read size comes whole: it must not stop the load.
        let records = hosted.read_to_log_end(next, LOAD_READ_BYTES)?;
        if records.is_empty() {
            break;
        }
        let before = next;
        for batch in BatchIter::new(records) {
            let batch = batch.map_err(|source| OffsetError::Batch { partition, source })?;
            if batch.last_offset() < next {
                continue;
            }
            let header = *batch.header();
            if header.attributes.is_control() {
                if let Some(marker) = crate::log::producer_state::EndTxnMarker::of_batch(batch.bytes()) {
                    let commit = marker.control == crate::log::producer_state::ControlType::Commit;
                    shard.complete_txn(header.producer_id, commit);
                }
            } else {
                let transactional = header.attributes.is_transactional() && header.producer_id >= 0;
                let records = batch.record_iter().map_err(|source| OffsetError::Batch { partition, source })?;
                for record in records {
                    let record = record.map_err(|source| OffsetError::Batch { partition, source })?;
                    if record.offset < next {
                        continue;
                    }
                    match OffsetsRecord::decode(record.key.as_deref(), record.value.as_deref()) {
                        Ok(decoded) if transactional => {
                            shard.open_txns.entry(header.producer_id).or_default().push(decoded)
                        }
                        Ok(decoded) => shard.apply_plain(decoded),
                        Err(_) => skipped += 1,
                    }
                }
            }
            next = batch.last_offset() + 1;
        }
        if next == before {
            // No progress (should not happen): stop rather than spin.
            break;
        }
    }
    if skipped > 0 {
        tracing::warn!(partition, skipped, "skipped undecodable __consumer_offsets records");
    }
    Ok((shard.groups, shard.open_txns))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::group::schema::MemberMetadata;
    use crate::log::{CleanupPolicy, LogConfig, SystemClock};

    const TOPIC_ID: [u8; 16] = [7; 16];

    fn config() -> LogConfig {
        LogConfig { cleanup_policy: CleanupPolicy::COMPACT, ..LogConfig::default() }
    }

    /// A replica manager hosting every partition of a 4-partition `__consumer_offsets`.
    fn open(dir: &std::path::Path) -> (Arc<ReplicaManager>, OffsetStore) {
        let replicas = Arc::new(ReplicaManager::new(1, dir, Arc::new(SystemClock)));
        for p in 0..4 {
            replicas.ensure(OFFSETS_TOPIC, p, TOPIC_ID, config(), crate::partition::LeaderAndIsr::sole(1, 0)).unwrap();
        }
        let store = OffsetStore::new(replicas.clone(), 4);
        (replicas, store)
    }

    /// A gate for which the named groups have members.
    struct WithMembers<'a>(&'a [&'a str]);

    impl EmptyGroupGate for WithMembers<'_> {
        fn run_if_empty(&self, group: &str, write: &mut dyn FnMut() -> bool) -> bool {
            if self.0.contains(&group) {
                return false;
            }
            write();
            true
        }
    }

    fn committed(offset: i64, ts: i64) -> CommittedOffset {
        CommittedOffset { offset, leader_epoch: 3, metadata: format!("m{offset}"), commit_timestamp: ts }
    }

    fn as_map(rows: Vec<(String, i32, CommittedOffset)>) -> BTreeMap<(String, i32), i64> {
        rows.into_iter().map(|(t, p, c)| ((t, p), c.offset)).collect()
    }

    #[test]
    fn commit_survives_restart() {
        // Proves commits are durable records: a new store over the same directory fetches them back.
        let dir = tempfile::tempdir().unwrap();
        {
            let (replicas, store) = open(dir.path());
            store.commit("g1", vec![("t".into(), 0, committed(10, 1)), ("t".into(), 1, committed(20, 1))]).unwrap();
            store.commit("g1", vec![("t".into(), 0, committed(11, 2))]).unwrap();
            store.commit("g2", vec![("u".into(), 0, committed(5, 1))]).unwrap();
            assert_eq!(as_map(store.fetch("g1", None).unwrap()).get(&("t".into(), 0)), Some(&11));
            replicas.shutdown();
        }
        let (_replicas, store) = open(dir.path());
        let g1 = store.fetch("g1", None).unwrap();
        assert_eq!(as_map(g1.clone()), BTreeMap::from([(("t".into(), 0), 11), (("t".into(), 1), 20)]));
        assert_eq!(g1[0].2, committed(11, 2));
        assert_eq!(as_map(store.fetch("g2", None).unwrap()), BTreeMap::from([(("u".into(), 0), 5)]));
        let some = store.fetch("g1", Some(&[("t".into(), 1), ("t".into(), 9)])).unwrap();
        assert_eq!(as_map(some), BTreeMap::from([(("t".into(), 1), 20)]));
        assert_eq!(store.groups_with_offsets(), vec!["g1".to_string(), "g2".to_string()]);
    }

    #[test]
    fn a_pending_transactional_commit_is_unstable_with_the_offset_before_it_until_its_marker() {
        // Proves fetch_stable answers the committed offset and the undecided partitions from the
        // same view: the offset before a pending transactional commit is flagged unstable
        // (require_stable must not serve it), and once the marker is in, the new offset is
        // committed and nothing is unstable.
        let dir = tempfile::tempdir().unwrap();
        let (_replicas, store) = open(dir.path());
        let wanted = [("t".to_string(), 0)];
        store.commit("g", vec![("t".into(), 0, committed(10, 1))]).unwrap();
        store
            .commit_transactional("g", (7, 0), vec![("t".into(), 0, committed(20, 2))], TxnVerification::NotRequired)
            .unwrap();
        let (offsets, unstable) = store.fetch_stable("g", Some(&wanted)).unwrap();
        assert_eq!(as_map(offsets), BTreeMap::from([(("t".into(), 0), 10)]));
        assert!(unstable.contains(&wanted[0]), "the commit of producer 7 is undecided");
        store.complete_txn(store.partition_of("g"), 7, true).unwrap();
        let (offsets, unstable) = store.fetch_stable("g", Some(&wanted)).unwrap();
        assert_eq!(as_map(offsets), BTreeMap::from([(("t".into(), 0), 20)]));
        assert!(unstable.is_empty());
    }

    #[test]
    fn a_plain_commit_after_an_undecided_transactional_one_wins_at_its_marker_and_after_a_load() {
        // Proves the later write wins, as Kafka keeps the commit with the later record offset:
        // a transactional commit (20) still undecided when a plain commit (30) of the same
        // partition is written must not replace it when its commit marker arrives (it did: the
        // group went back to 20), neither in memory nor when the partition is loaded again.
        let dir = tempfile::tempdir().unwrap();
        let wanted = [("t".to_string(), 0)];
        {
            let (replicas, store) = open(dir.path());
            store
                .commit_transactional(
                    "g",
                    (7, 0),
                    vec![("t".into(), 0, committed(20, 2))],
                    TxnVerification::NotRequired,
                )
                .unwrap();
            store.commit("g", vec![("t".into(), 0, committed(30, 3))]).unwrap();
            let partition = store.partition_of("g");
            let marker = crate::txn::coordinator::marker_batch(7, 0, true, 0);
            replicas
                .get(OFFSETS_TOPIC, partition)
                .unwrap()
                .append_as_leader(&marker, crate::partition::Acks::All, crate::log::AppendOrigin::Coordinator)
                .unwrap();
            store.complete_txn(partition, 7, true).unwrap();
            let (offsets, _) = store.fetch_stable("g", Some(&wanted)).unwrap();
            assert_eq!(as_map(offsets), BTreeMap::from([(("t".into(), 0), 30)]), "the later plain commit stays");
            replicas.shutdown();
        }
        let (_replicas, reopened) = open(dir.path());
        let (offsets, unstable) = reopened.fetch_stable("g", Some(&wanted)).unwrap();
        assert_eq!(as_map(offsets), BTreeMap::from([(("t".into(), 0), 30)]), "and after a load");
        assert!(unstable.is_empty());
    }

    #[test]
    fn deletions_survive_restart() {
        // Proves delete_offsets and delete_group write tombstones that a reload honours.
        let dir = tempfile::tempdir().unwrap();
        let metadata = GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 2,
            protocol: Some("range".into()),
            leader: Some("m".into()),
            current_state_timestamp: 5,
            members: vec![MemberMetadata {
                member_id: "m".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 1000,
                session_timeout_ms: 1000,
                subscription: vec![1],
                assignment: vec![2],
            }],
        };
        {
            let (replicas, store) = open(dir.path());
            store.commit("a", vec![("t".into(), 0, committed(1, 1)), ("t".into(), 1, committed(2, 1))]).unwrap();
            store.commit("b", vec![("t".into(), 0, committed(3, 1))]).unwrap();
            store.store_group_metadata("b", metadata.clone()).unwrap();
            store.store_group_metadata("c", metadata.clone()).unwrap();
            store.delete_offsets("a", &[("t".into(), 1)]).unwrap();
            assert!(store.delete_group("b").unwrap().0);
            assert!(!store.delete_group("nobody").unwrap().0);
            replicas.shutdown();
        }
        let (_replicas, store) = open(dir.path());
        assert_eq!(as_map(store.fetch("a", None).unwrap()), BTreeMap::from([(("t".into(), 0), 1)]));
        assert!(store.fetch("b", None).unwrap().is_empty());
        assert_eq!(store.group_metadata("b"), None);
        assert_eq!(store.group_metadata("c"), Some(metadata));
        assert_eq!(store.groups_with_offsets(), vec!["a".to_string(), "c".to_string()]);
    }

    #[test]
    fn a_group_id_is_one_type_in_the_log_through_conversions() {
        // Proves the conversion invariant: consumer-group records tombstone the classic
        // metadata of their group, a classic metadata write tombstones every consumer-group
        // record, and a reload finds the group as exactly the type written last.
        use crate::group::schema::{ConsumerMemberValue, ConsumerRecord};
        let dir = tempfile::tempdir().unwrap();
        let classic = GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: None,
            current_state_timestamp: 1,
            members: Vec::new(),
        };
        let consumer_records = vec![
            ConsumerRecord::Member {
                member_id: "m1".into(),
                value: Some(ConsumerMemberValue { client_id: "c".into(), ..Default::default() }),
            },
            ConsumerRecord::GroupEpoch(Some(crate::group::schema::GroupEpochValue { epoch: 5, metadata_hash: 0 })),
        ];
        let reload = |dir: &std::path::Path| {
            let (replicas, store) = open(dir);
            let seen: Arc<std::sync::Mutex<(Vec<String>, Vec<String>)>> = Arc::default();
            let sink = seen.clone();
            store.set_load_listener(Box::new(move |loaded| {
                let mut seen = sink.lock().unwrap();
                seen.0.extend(loaded.groups.iter().map(|(g, _)| g.clone()));
                seen.1.extend(loaded.consumer_groups.iter().map(|(g, _)| g.clone()));
            }));
            for p in 0..4 {
                store.with_shard(p, Cold::Wait, |_, _| Ok(())).unwrap();
            }
            let seen = seen.lock().unwrap().clone();
            (replicas, store, seen)
        };
        {
            let (replicas, store) = open(dir.path());
            store.store_group_metadata("g", classic.clone()).unwrap();
            store.store_consumer_records("g", consumer_records.clone()).unwrap();
            let partition = store.partition_of("g");
            store
                .with_shard(partition, Cold::Wait, |shard, _| {
                    // Written as a consumer group: nothing classic left to tombstone.
                    assert!(other_type_tombstones(shard, "g", GroupType::Consumer).is_empty());
                    assert_eq!(other_type_tombstones(shard, "g", GroupType::Classic).len(), 3);
                    Ok(())
                })
                .unwrap();
            replicas.shutdown();
        }
        let (replicas, store, (classic_groups, consumer_groups)) = reload(dir.path());
        assert_eq!((classic_groups, consumer_groups), (vec![], vec!["g".to_string()]));
        // Back to classic (a downgrade): the consumer records go.
        store.store_group_metadata("g", classic.clone()).unwrap();
        replicas.shutdown();
        drop(store);
        let (_replicas, store, (classic_groups, consumer_groups)) = reload(dir.path());
        assert_eq!((classic_groups, consumer_groups), (vec!["g".to_string()], vec![]));
        assert_eq!(store.group_metadata("g"), Some(classic));
    }

    #[test]
    fn expire_removes_old_offsets_of_empty_groups_only() {
        // Proves retention applies to groups without members and only to offsets older than it.
        let dir = tempfile::tempdir().unwrap();
        let (replicas, store) = open(dir.path());
        store.commit("empty", vec![("t".into(), 0, committed(1, 100)), ("t".into(), 1, committed(1, 900))]).unwrap();
        store.commit("active", vec![("t".into(), 0, committed(1, 100))]).unwrap();
        assert_eq!(store.expire(1000, 500, &WithMembers(&["active"])), 1);
        assert_eq!(as_map(store.fetch("empty", None).unwrap()), BTreeMap::from([(("t".into(), 1), 1)]));
        assert_eq!(store.fetch("active", None).unwrap().len(), 1);
        replicas.shutdown();
        let (_replicas, store) = open(dir.path());
        assert_eq!(as_map(store.fetch("empty", None).unwrap()), BTreeMap::from([(("t".into(), 1), 1)]));
    }

    #[test]
    fn compaction_keeps_the_partition_bounded_and_loadable() {
        // Proves constant commits compact down to one record per key, and a store loaded from
        // the compacted log sees the latest offsets and no deleted one.
        let dir = tempfile::tempdir().unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, dir.path(), Arc::new(SystemClock)));
        let mut small = config();
        small.segment_bytes = 4096;
        small.delete_retention_ms = 0;
        for p in 0..4 {
            replicas
                .ensure(OFFSETS_TOPIC, p, TOPIC_ID, small.clone(), crate::partition::LeaderAndIsr::sole(1, 0))
                .unwrap();
        }
        let store = OffsetStore::new(replicas.clone(), 4);
        for i in 0..500 {
            store.commit("g", vec![("t".into(), 0, committed(i, 1)), ("t".into(), 1, committed(i, 1))]).unwrap();
            if i == 100 {
                store.commit("g", vec![("gone".into(), 0, committed(1, 1))]).unwrap();
                store.delete_offsets("g", &[("gone".into(), 0)]).unwrap();
            }
        }
        let hosted = replicas.get(OFFSETS_TOPIC, store.partition_of("g")).unwrap();
        let before = hosted.size_bytes();
        replicas.maintain(i64::MAX, usize::MAX);
        let after = hosted.size_bytes();
        assert!(after * 4 < before, "compaction shrank {before} bytes only to {after}");

        let reloaded = OffsetStore::new(replicas.clone(), 4);
        assert_eq!(
            as_map(reloaded.fetch("g", None).unwrap()),
            BTreeMap::from([(("t".into(), 0), 499), (("t".into(), 1), 499)])
        );
    }

    #[test]
    fn unhosted_partition_is_not_coordinator() {
        // Proves a group whose partition is not hosted here gets NotCoordinator.
        let dir = tempfile::tempdir().unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, dir.path(), Arc::new(SystemClock)));
        let store = OffsetStore::new(replicas, 4);
        assert!(matches!(store.fetch("g", None), Err(OffsetError::NotCoordinator { .. })));
        assert!(matches!(
            store.commit("g", vec![("t".into(), 0, committed(1, 1))]),
            Err(OffsetError::NotCoordinator { .. })
        ));
    }

    #[test]
    fn records_are_in_kafka_schema() {
        // Proves what lands in the log is a key/value pair Kafka's schema decodes.
        let dir = tempfile::tempdir().unwrap();
        let (replicas, store) = open(dir.path());
        store.commit("g", vec![("t".into(), 3, committed(42, 7))]).unwrap();
        let hosted = replicas.get(OFFSETS_TOPIC, store.partition_of("g")).unwrap();
        let data = hosted
            .read(0, 1 << 20, crate::partition::FirstBatch::Whole, crate::partition::Isolation::ReadUncommitted)
            .unwrap();
        let batch = BatchIter::new(data.records).next().unwrap().unwrap();
        let records = batch.records().unwrap();
        assert_eq!(records.len(), 1);
        let decoded = OffsetsRecord::decode(records[0].key.as_deref(), records[0].value.as_deref()).unwrap();
        assert_eq!(
            decoded,
            OffsetsRecord::Commit {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                value: Some(OffsetValue { offset: 42, leader_epoch: 3, metadata: "m42".into(), commit_timestamp: 7 }),
            }
        );
    }

    #[test]
    fn expiry_race_a_member_joining_before_the_tombstones_keeps_the_offsets() {
        // Regression (issue 10): a member that joins after expiry picked its group as empty,
        // but before the tombstones are written, must keep the group's offsets. The gate below
        // makes the join land exactly there; the membership re-checks under its lock.
        use crate::group::membership::{JoinRequest, Membership, Reply};
        let dir = tempfile::tempdir().unwrap();
        let (_replicas, store) = open(dir.path());
        store.commit("g", vec![("t".into(), 0, committed(5, 100))]).unwrap();
        let membership = Membership::new();

        struct JoinFirst<'a>(&'a Membership);
        impl EmptyGroupGate for JoinFirst<'_> {
            fn run_if_empty(&self, group: &str, write: &mut dyn FnMut() -> bool) -> bool {
                let join = JoinRequest {
                    group_id: group.to_string(),
                    client_id: "late".into(),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 10_000,
                    protocol_type: "consumer".into(),
                    protocols: vec![("range".into(), Bytes::from_static(b"m"))],
                    ..JoinRequest::default()
                };
                let joined = self.0.join(join, std::time::Instant::now());
                assert!(matches!(joined, Reply::Parked(_) | Reply::Now(_)));
                self.0.run_if_empty(group, write)
            }
        }
        assert_eq!(store.expire(1000, 500, &JoinFirst(&membership)), 0);
        assert_eq!(as_map(store.fetch("g", None).unwrap()), BTreeMap::from([(("t".into(), 0), 5)]));
        // Without the late member the same expiry runs.
        assert_eq!(store.expire(1000, 500, &membership_without_members()), 1);
        assert!(store.fetch("g", None).unwrap().is_empty());
    }

    #[test]
    fn expiry_waits_for_a_group_lock_without_holding_the_shard() {
        // Proves the lock order (a group's lock, then a shard's mutex, never the reverse): the
        // expiry sweep waits in its gate for a group's lock that a heartbeat holds while it
        // writes to the same shard. Expiry calling its gate under the shard's mutex (as it once
        // did) deadlocks here: the write never gets the mutex.
        use std::sync::mpsc;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let (_replicas, store) = open(dir.path());
        let store = Arc::new(store);
        store.commit("idle", vec![("t".into(), 0, committed(1, 100))]).unwrap();
        let neighbour = (0..1000)
            .map(|i| format!("busy-{i}"))
            .find(|g| store.partition_of(g) == store.partition_of("idle"))
            .expect("a group on the same partition");

        struct Locking {
            group_lock: Arc<Mutex<()>>,
            entered: Mutex<mpsc::Sender<()>>,
        }
        impl EmptyGroupGate for Locking {
            fn run_if_empty(&self, _group: &str, write: &mut dyn FnMut() -> bool) -> bool {
                let _ = self.entered.lock().unwrap().send(());
                let _held = self.group_lock.lock().unwrap();
                write();
                true
            }
        }
        let group_lock = Arc::new(Mutex::new(()));
        let held = group_lock.lock().unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (expired_tx, expired) = mpsc::channel();
        let gate = Locking { group_lock: group_lock.clone(), entered: Mutex::new(entered_tx) };
        let sweeping = store.clone();
        std::thread::spawn(move || {
            let _ = expired_tx.send(sweeping.expire(1000, 500, &gate));
        });
        entered.recv_timeout(Duration::from_secs(30)).expect("the sweep reached its gate");
        // The "heartbeat": holding the group's lock, it writes to the shard the sweep is on.
        let (written_tx, written) = mpsc::channel();
        let writing = store.clone();
        std::thread::spawn(move || {
            let _ = written_tx.send(writing.commit(&neighbour, vec![("t".into(), 0, committed(2, 900))]).is_ok());
        });
        let wrote = written.recv_timeout(Duration::from_secs(30));
        drop(held);
        assert_eq!(wrote, Ok(true), "a write under a group's lock waited for the expiry sweep: lock order inverted");
        assert_eq!(expired.recv_timeout(Duration::from_secs(30)), Ok(1));
    }

    #[test]
    fn a_load_listener_waiting_for_a_group_lock_does_not_hold_the_shard() {
        // Proves the load half of the lock order (a group's lock, then a shard's mutex, never
        // the reverse): the load listener, which restores groups and takes their locks, runs
        // with the shard's mutex released, and a heartbeat storing its records under its
        // group's lock meanwhile is told COORDINATOR_LOAD_IN_PROGRESS at once. A listener
        // called under the mutex (as it once was) deadlocks here: the store never returns.
        use std::sync::mpsc;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let replicas = {
            let (replicas, store) = open(dir.path());
            store.commit("g", vec![("t".into(), 0, committed(1, 100))]).unwrap();
            replicas
        };
        let store = Arc::new(OffsetStore::new(replicas, 4));
        let group_lock = Arc::new(Mutex::new(()));
        let held = group_lock.lock().unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (listener_lock, entered_tx) = (group_lock.clone(), Mutex::new(entered_tx));
        store.set_load_listener(Box::new(move |_| {
            let _ = entered_tx.lock().unwrap().send(());
            let _restoring = listener_lock.lock().unwrap();
        }));
        let partition = store.partition_of("g");
        let (loaded_tx, loaded) = mpsc::channel();
        let loading = store.clone();
        std::thread::spawn(move || {
            let _ = loaded_tx.send(loading.ensure_loaded(partition).is_ok());
        });
        entered.recv_timeout(Duration::from_secs(30)).expect("the load reached its listener");
        // The "heartbeat": holding the group's lock, it stores the group's records.
        let (stored_tx, stored) = mpsc::channel();
        let storing = store.clone();
        std::thread::spawn(move || {
            let epoch =
                ConsumerRecord::GroupEpoch(Some(crate::group::schema::GroupEpochValue { epoch: 1, metadata_hash: 0 }));
            let _ = stored_tx.send(storing.store_consumer_records("g", vec![epoch]).map(|_| ()));
        });
        let answer = stored.recv_timeout(Duration::from_secs(30));
        drop(held);
        assert!(
            matches!(answer, Ok(Err(OffsetError::LoadInProgress { .. }))),
            "a store under a group's lock waited for the load listener: lock order inverted ({answer:?})"
        );
        assert_eq!(loaded.recv_timeout(Duration::from_secs(30)), Ok(true));
        assert_eq!(store.fetch("g", None).unwrap().len(), 1, "the load finished");
    }

    #[test]
    fn an_empty_classic_groups_offsets_expire_a_retention_after_it_emptied_not_after_their_commits() {
        // Proves KIP-211 as Kafka applies it to classic groups: offsets committed long ago (100)
        // by a group that emptied at 900 live until 900 + retention, then go with the group's
        // metadata (Dead); a group stored with members that emptied without storing it is
        // stamped Empty at the sweep first. A standalone group's offsets go by commit time.
        // Fails on per-commit expiry: both groups lost their offsets at the first sweep.
        let dir = tempfile::tempdir().unwrap();
        let (_replicas, store) = open(dir.path());
        let member = MemberMetadata {
            member_id: "m".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 1000,
            session_timeout_ms: 1000,
            subscription: vec![],
            assignment: vec![],
        };
        let classic = |members: Vec<MemberMetadata>, since: i64| GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: members.first().map(|_| "range".to_string()),
            leader: members.first().map(|m| m.member_id.clone()),
            current_state_timestamp: since,
            members,
        };
        store.store_group_metadata("emptied", classic(vec![], 900)).unwrap();
        store.commit("emptied", vec![("t".into(), 0, committed(5, 100))]).unwrap();
        store.store_group_metadata("stale", classic(vec![member], 50)).unwrap();
        store.commit("stale", vec![("t".into(), 0, committed(6, 100))]).unwrap();
        store.commit("standalone", vec![("t".into(), 0, committed(7, 100))]).unwrap();
        let gate = membership_without_members();

        assert_eq!(store.expire(1000, 500, &gate), 1, "only the standalone offset, 900 ms after its commit");
        assert!(store.fetch("standalone", None).unwrap().is_empty());
        assert_eq!(as_map(store.fetch("emptied", None).unwrap()).len(), 1, "emptied at 900: kept");
        assert_eq!(as_map(store.fetch("stale", None).unwrap()).len(), 1, "stamped Empty now: kept");
        let stamped = store.group_metadata("stale").expect("still stored");
        assert_eq!((stamped.members.len(), stamped.current_state_timestamp), (0, 1000), "{stamped:?}");

        assert_eq!(store.expire(1401, 500, &gate), 1, "900 + 500 passed: the emptied group's offset");
        assert!(store.fetch("emptied", None).unwrap().is_empty());
        assert_eq!(store.group_metadata("emptied"), None, "an Empty group without offsets is deleted");
        assert_eq!(as_map(store.fetch("stale", None).unwrap()).len(), 1);
        assert_eq!(store.expire(1501, 500, &gate), 1);
        assert_eq!(store.group_metadata("stale"), None);
    }

    #[test]
    fn an_empty_consumer_protocol_group_is_deleted_with_its_last_offset_unless_a_txn_commit_is_open() {
        // Proves Kafka's `maybeDeleteGroup` for consumer-protocol groups: once an Empty group's
        // last offset expires (by commit time), every consumer-group record is tombstoned and a
        // reload finds no group; a partition with an undecided transactional commit keeps its
        // offset and its group (a plain tombstone would drop the open commit). Fails on the old
        // expiry: the consumer group's records stayed forever.
        use crate::group::schema::{ConsumerMemberValue, ConsumerRecord, GroupEpochValue};
        let dir = tempfile::tempdir().unwrap();
        let records = |member: &str| {
            vec![
                ConsumerRecord::Member {
                    member_id: member.into(),
                    value: Some(ConsumerMemberValue { client_id: "c".into(), ..Default::default() }),
                },
                ConsumerRecord::GroupEpoch(Some(GroupEpochValue { epoch: 3, metadata_hash: 0 })),
                ConsumerRecord::TargetEpoch(Some(3)),
                // The member left: its record goes, the group stays Empty at epoch 3.
                ConsumerRecord::Member { member_id: member.into(), value: None },
            ]
        };
        let gate = membership_without_members();
        {
            let (replicas, store) = open(dir.path());
            store.store_consumer_records("modern", records("m1")).unwrap();
            store.commit("modern", vec![("t".into(), 0, committed(5, 100))]).unwrap();
            store.store_consumer_records("in-txn", records("m2")).unwrap();
            store
                .commit("in-txn", vec![("t".into(), 0, committed(5, 100)), ("t".into(), 1, committed(5, 100))])
                .unwrap();
            store
                .commit_transactional(
                    "in-txn",
                    (9, 0),
                    vec![("t".into(), 1, committed(6, 100))],
                    TxnVerification::NotRequired,
                )
                .unwrap();
            assert_eq!(store.expire(400, 500, &gate), 0, "nothing old enough yet");
            assert_eq!(store.expire(1000, 500, &gate), 2, "modern's, and in-txn's t-0: t-1 has an open commit");
            let stored = |group: &str| {
                store
                    .with_shard(store.partition_of(group), Cold::Wait, |shard, _| {
                        Ok(shard.groups.get(group).map(|g| (g.offsets.len(), g.consumer.is_some())))
                    })
                    .unwrap()
            };
            assert_eq!(stored("modern"), None, "an Empty consumer group without offsets is deleted");
            assert_eq!(stored("in-txn"), Some((1, true)), "t-1 and the group stay");
            replicas.shutdown();
        }
        let (_replicas, store) = open(dir.path());
        let consumer_groups: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let sink = consumer_groups.clone();
        store.set_load_listener(Box::new(move |loaded| {
            sink.lock().unwrap().extend(loaded.consumer_groups.iter().map(|(g, _)| g.clone()))
        }));
        for p in 0..store.partition_count() {
            store.with_shard(p, Cold::Wait, |_, _| Ok(())).unwrap();
        }
        assert_eq!(*consumer_groups.lock().unwrap(), vec!["in-txn".to_string()], "the deletion is in the log");
    }

    fn membership_without_members() -> crate::group::membership::Membership {
        crate::group::membership::Membership::new()
    }

    /// Writes `records` commit records of group `g` (1,000 per batch) and returns a replica
    /// manager over them; a new store over it starts cold.
    fn many_commits(dir: &std::path::Path, records: usize) -> Arc<ReplicaManager> {
        let (replicas, store) = open(dir);
        store.ensure_loaded(store.partition_of("g")).unwrap();
        for batch in 0..records.div_ceil(1000) {
            let commits = (0..1000).map(|p| (format!("topic-{batch}"), p, committed(p as i64, 1))).collect();
            store.commit("g", commits).unwrap();
        }
        replicas
    }

    /// Longest gap between 1 ms ticks of a task on the same single-worker runtime while `work`
    /// runs on it: how long another connection's request would wait behind it.
    async fn longest_stall(work: impl FnOnce() + Send + 'static) -> std::time::Duration {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ticker = {
            let done = done.clone();
            tokio::spawn(async move {
                let mut longest = std::time::Duration::ZERO;
                let mut last = std::time::Instant::now();
                while !done.load(Ordering::Acquire) {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    longest = longest.max(last.elapsed());
                    last = std::time::Instant::now();
                }
                longest
            })
        };
        tokio::task::yield_now().await;
        let done_after = done.clone();
        tokio::spawn(async move {
            work();
            done_after.store(true, Ordering::Release);
        })
        .await
        .unwrap();
        ticker.await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn cold_shard_load_runs_off_the_async_worker_once_for_concurrent_requests() {
        // Regression (issue 10): an OffsetCommit on a cold shard read the whole partition on the
        // async worker, stalling every other connection on it. Now the request path starts one
        // load on the blocking pool, answers LoadInProgress (COORDINATOR_LOAD_IN_PROGRESS) at
        // once, and concurrent requests share that load. Prints the figures of both paths.
        const RECORDS: usize = 100_000;
        let dir = tempfile::tempdir().unwrap();
        let replicas = many_commits(dir.path(), RECORDS);
        let partition = partition_for("g", 4);

        // The old path: the load inline on the async worker.
        let inline = Arc::new(OffsetStore::new(replicas.clone(), 4));
        let started = std::time::Instant::now();
        let loading = inline.clone();
        let inline_stall = longest_stall(move || loading.ensure_loaded(partition).unwrap()).await;
        let load_time = started.elapsed();

        // The request path now.
        let store = Arc::new(OffsetStore::new(replicas.clone(), 4));
        let requests = store.clone();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let seen = answers.clone();
        let request_stall = longest_stall(move || {
            let commit = requests.commit("g", vec![("t".into(), 0, committed(1, 1))]);
            let fetch = requests.fetch("g", None).map(|rows| rows.len());
            let commit = commit.map(|_| ()).map_err(|e| e.to_string());
            seen.lock().unwrap().push((commit, fetch.map_err(|e| e.to_string())));
        })
        .await;
        let (commit, fetch) = answers.lock().unwrap().pop().unwrap();
        assert_eq!(commit, Err(OffsetError::LoadInProgress { partition }.to_string()));
        assert_eq!(fetch, Err(OffsetError::LoadInProgress { partition }.to_string()));
        let waiting = store.clone();
        tokio::task::spawn_blocking(move || waiting.ensure_loaded(partition)).await.unwrap().unwrap();
        assert_eq!(store.loads(), 1, "the requests and the waiter shared one load");
        assert_eq!(store.fetch("g", None).unwrap().len(), RECORDS);
        eprintln!(
            "load of {RECORDS} commit records: {load_time:?}; longest stall of another task on the \
             worker: inline load {inline_stall:?}, request path now {request_stall:?}"
        );
    }

    #[test]
    fn partition_count_follows_the_topic() {
        // Proves the store maps groups over the count it is told (the topic's actual one), not
        // over a constant: with 4 partitions hosted and the count set to 4, a group's commits
        // land in partition_for(group, 4), and a count beyond the slots grows them.
        let dir = tempfile::tempdir().unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, dir.path(), Arc::new(SystemClock)));
        for p in 0..4 {
            replicas.ensure(OFFSETS_TOPIC, p, TOPIC_ID, config(), crate::partition::LeaderAndIsr::sole(1, 0)).unwrap();
        }
        let store = OffsetStore::new(replicas, 50);
        assert_eq!(store.partition_of("billing"), 39);
        assert!(matches!(
            store.commit("billing", vec![("t".into(), 0, committed(1, 1))]),
            Err(OffsetError::NotCoordinator { partition: 39 })
        ));
        store.set_partition_count(4);
        assert_eq!(store.partition_of("billing"), partition_for("billing", 4));
        store.commit("billing", vec![("t".into(), 0, committed(1, 1))]).unwrap();
        assert_eq!(store.fetch("billing", None).unwrap().len(), 1);
    }
}
