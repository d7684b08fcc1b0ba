//! Committed offsets and stored group metadata, kept as records in `__consumer_offsets`.
//!
//! Owns: the in-memory view of every `__consumer_offsets` partition this node has served (one
//! [`Shard`] per partition, behind its own mutex), loading a shard from its partition, and
//! writing commits, deletions (tombstones) and group metadata as record batches.
//! Invariants: memory changes only after the batch carrying the change is in the log; a shard
//! is loaded at most once per partition incarnation (topic id) and loading, appends and memory
//! updates of one shard are serialized by its mutex, so memory follows log order. The shard
//! mutex and the partition's log mutex are never held across an `.await` (all functions here
//! are synchronous). Must not know about membership: callers pass what it needs as arguments.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::schema::{GroupMetadataValue, OffsetValue, OffsetsRecord, SchemaError};
use super::{partition_for, OFFSETS_TOPIC};
use crate::log::batch::BatchIter;
use crate::log::now_ms;
use crate::log::records::BatchBuilder;
use crate::log::{AppendOrigin, BatchError, Compression};
use crate::partition::{Acks, FirstBatch, Partition, PartitionError, ReplicaManager};

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

/// One row of [`OffsetStore::lag`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    /// `None` when the partition is not hosted here.
    pub log_end_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    /// `log_end_offset - committed_offset`, at least 0.
    pub lag: Option<i64>,
}

/// Why an offset operation failed; `server::errors::offset_error_code` maps each to Kafka's code.
#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    /// This node does not host (lead) the group's `__consumer_offsets` partition.
    #[error("partition {partition} of __consumer_offsets is not hosted here")]
    NotCoordinator { partition: u32 },
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

/// What one `__consumer_offsets` partition holds, by group.
#[derive(Default)]
struct Shard {
    /// Topic id of the partition incarnation this state was loaded from.
    loaded_from: Option<[u8; 16]>,
    groups: HashMap<String, GroupOffsets>,
}

#[derive(Default)]
struct GroupOffsets {
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    metadata: Option<GroupMetadataValue>,
}

impl GroupOffsets {
    fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.metadata.is_none()
    }
}

impl Shard {
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
                self.groups.entry(group).or_default().metadata = Some(v);
            }
            OffsetsRecord::Group { group, value: None } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.metadata = None;
                    if g.is_empty() {
                        self.groups.remove(&group);
                    }
                }
            }
        }
    }
}

/// Committed offsets of the groups this node coordinates.
pub struct OffsetStore {
    replicas: Arc<ReplicaManager>,
    partitions: u32,
    shards: Vec<Mutex<Shard>>,
}

impl OffsetStore {
    pub fn new(replicas: Arc<ReplicaManager>, partitions: u32) -> OffsetStore {
        assert!(partitions > 0, "__consumer_offsets needs at least one partition");
        OffsetStore { replicas, partitions, shards: (0..partitions).map(|_| Mutex::new(Shard::default())).collect() }
    }

    /// The `__consumer_offsets` partition of `group`.
    pub fn partition_of(&self, group: &str) -> u32 {
        partition_for(group, self.partitions)
    }

    /// Loads partition `partition` of `__consumer_offsets` into memory if not done yet for its
    /// current incarnation. Idempotent.
    pub fn ensure_loaded(&self, partition: u32) -> Result<(), OffsetError> {
        self.shard(partition).map(|_| ())
    }

    /// Locks the shard of `partition`, (re)loading it first if needed.
    // FIXME: "hosted here" stands for "led here" while every partition has one replica; with
    // replication a follower must answer NOT_COORDINATOR and drop its shard on losing leadership.
    fn shard(&self, partition: u32) -> Result<(MutexGuard<'_, Shard>, Arc<Partition>), OffsetError> {
        let slot = self.shards.get(partition as usize).ok_or(OffsetError::NotCoordinator { partition })?;
        let hosted = self.replicas.get(OFFSETS_TOPIC, partition).ok_or(OffsetError::NotCoordinator { partition })?;
        let mut shard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if shard.loaded_from != Some(hosted.topic_id()) {
            *shard = load(&hosted)?;
        }
        Ok((shard, hosted))
    }

    /// Commits offsets of `group` in one batch; memory changes only once it is appended.
    pub fn commit(&self, group: &str, offsets: Vec<(String, i32, CommittedOffset)>) -> Result<(), OffsetError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let partition = self.partition_of(group);
        let (mut shard, hosted) = self.shard(partition)?;
        let records: Vec<OffsetsRecord> = offsets
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
            .collect();
        append(&hosted, partition, &records)?;
        for record in records {
            shard.apply(record);
        }
        Ok(())
    }

    /// Committed offsets of `group`: of the given partitions (those with a commit), or all.
    pub fn fetch(
        &self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<(String, i32, CommittedOffset)>, OffsetError> {
        let (shard, _) = self.shard(self.partition_of(group))?;
        let Some(g) = shard.groups.get(group) else {
            return Ok(Vec::new());
        };
        Ok(match partitions {
            None => g.offsets.iter().map(|((t, p), c)| (t.clone(), *p, c.clone())).collect(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|(t, p)| g.offsets.get(&(t.clone(), *p)).map(|c| (t.clone(), *p, c.clone())))
                .collect(),
        })
    }

    /// Deletes the committed offsets of the given partitions (tombstones).
    pub fn delete_offsets(&self, group: &str, partitions: &[(String, i32)]) -> Result<(), OffsetError> {
        let partition = self.partition_of(group);
        let (mut shard, hosted) = self.shard(partition)?;
        let Some(g) = shard.groups.get(group) else {
            return Ok(());
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
        write_all(&mut shard, &hosted, partition, records)
    }

    /// Deletes a group: tombstones for all its offsets and its metadata. Returns whether the
    /// store knew anything of it.
    pub fn delete_group(&self, group: &str) -> Result<bool, OffsetError> {
        let partition = self.partition_of(group);
        let (mut shard, hosted) = self.shard(partition)?;
        let Some(g) = shard.groups.get(group) else {
            return Ok(false);
        };
        let mut records: Vec<OffsetsRecord> = g
            .offsets
            .keys()
            .map(|(t, p)| OffsetsRecord::Commit {
                group: group.to_string(),
                topic: t.clone(),
                partition: *p,
                value: None,
            })
            .collect();
        records.push(OffsetsRecord::Group { group: group.to_string(), value: None });
        write_all(&mut shard, &hosted, partition, records)?;
        Ok(true)
    }

    /// Stores a group's metadata after a rebalance (the membership layer calls it).
    pub fn store_group_metadata(&self, group: &str, value: GroupMetadataValue) -> Result<(), OffsetError> {
        let partition = self.partition_of(group);
        let (mut shard, hosted) = self.shard(partition)?;
        let records = vec![OffsetsRecord::Group { group: group.to_string(), value: Some(value) }];
        write_all(&mut shard, &hosted, partition, records)
    }

    /// The stored metadata of `group`, if any (and if its partition is hosted here).
    pub fn group_metadata(&self, group: &str) -> Option<GroupMetadataValue> {
        let (shard, _) = self.shard(self.partition_of(group)).ok()?;
        shard.groups.get(group).and_then(|g| g.metadata.clone())
    }

    /// Every group with committed offsets or stored metadata in the hosted partitions,
    /// loading them first.
    pub fn groups_with_offsets(&self) -> Vec<String> {
        let mut groups = Vec::new();
        for partition in 0..self.partitions {
            if let Ok((shard, _)) = self.shard(partition) {
                groups.extend(shard.groups.keys().cloned());
            }
        }
        groups.sort();
        groups
    }

    /// Lag of every committed partition of `group`: log end offset minus committed offset,
    /// with the high watermark, from the partitions hosted here.
    pub fn lag(&self, group: &str) -> Result<Vec<PartitionLag>, OffsetError> {
        Ok(self
            .fetch(group, None)?
            .into_iter()
            .map(|(topic, partition, committed)| {
                let hosted = u32::try_from(partition).ok().and_then(|p| self.replicas.get(&topic, p));
                let log_end_offset = hosted.as_ref().map(|p| p.log_end_offset());
                PartitionLag {
                    log_end_offset,
                    high_watermark: hosted.as_ref().map(|p| p.high_watermark()),
                    lag: log_end_offset.map(|end| (end - committed.offset).max(0)),
                    committed_offset: committed.offset,
                    topic,
                    partition,
                }
            })
            .collect())
    }

    /// Expires offsets older than `retention_ms` of groups that have no members, and the
    /// metadata of such groups once no offset is left. `is_empty_group` is asked without any
    /// lock of this store held. Returns how many offsets expired.
    pub fn expire(&self, now_ms: i64, retention_ms: i64, is_empty_group: impl Fn(&str) -> bool) -> usize {
        let mut expired = 0;
        for partition in 0..self.partitions {
            if self.replicas.get(OFFSETS_TOPIC, partition).is_none() {
                continue;
            }
            let candidates: Vec<String> = match self.shard(partition) {
                Ok((shard, _)) => shard
                    .groups
                    .iter()
                    .filter(|(_, g)| {
                        g.offsets.values().any(|c| c.commit_timestamp.saturating_add(retention_ms) < now_ms)
                    })
                    .map(|(name, _)| name.clone())
                    .collect(),
                Err(_) => continue,
            };
            let candidates: Vec<String> = candidates.into_iter().filter(|g| is_empty_group(g)).collect();
            if candidates.is_empty() {
                continue;
            }
            let Ok((mut shard, hosted)) = self.shard(partition) else { continue };
            let mut records = Vec::new();
            for group in &candidates {
                let Some(g) = shard.groups.get(group) else { continue };
                let old: Vec<&(String, i32)> = g
                    .offsets
                    .iter()
                    .filter(|(_, c)| c.commit_timestamp.saturating_add(retention_ms) < now_ms)
                    .map(|(k, _)| k)
                    .collect();
                let all_gone = old.len() == g.offsets.len();
                for (t, p) in old {
                    records.push(OffsetsRecord::Commit {
                        group: group.clone(),
                        topic: t.clone(),
                        partition: *p,
                        value: None,
                    });
                }
                if all_gone && g.metadata.is_some() {
                    records.push(OffsetsRecord::Group { group: group.clone(), value: None });
                }
            }
            let count = records.iter().filter(|r| matches!(r, OffsetsRecord::Commit { .. })).count();
            match write_all(&mut shard, &hosted, partition, records) {
                Ok(()) => expired += count,
                Err(e) => tracing::warn!(partition, error = %e, "could not expire offsets"),
            }
        }
        expired
    }
}

/// Appends `records` in batches of at most [`TOMBSTONES_PER_BATCH`], applying each batch to
/// memory once it is in the log.
fn write_all(
    shard: &mut Shard,
    hosted: &Partition,
    partition: u32,
    mut records: Vec<OffsetsRecord>,
) -> Result<(), OffsetError> {
    while !records.is_empty() {
        let rest = records.split_off(records.len().min(TOMBSTONES_PER_BATCH));
        append(hosted, partition, &records)?;
        for record in records {
            shard.apply(record);
        }
        records = rest;
    }
    Ok(())
}

/// Appends `records` as one uncompressed batch with acks=all.
fn append(hosted: &Partition, partition: u32, records: &[OffsetsRecord]) -> Result<(), OffsetError> {
    let timestamp = now_ms();
    let mut builder = BatchBuilder::new(Compression::None);
    for record in records {
        let (key, value) = record.encode().map_err(OffsetError::Encode)?;
        builder.push(timestamp, Some(&key), value.as_deref(), &[]);
    }
    let batch = builder.build().map_err(|source| OffsetError::Batch { partition, source })?;
    let bytes: Bytes = batch.into_bytes();
    hosted.append_as_leader(&bytes, Acks::All, AppendOrigin::Coordinator)?;
    Ok(())
}

/// Reads a `__consumer_offsets` partition from its log start to its high watermark; later
/// records win, tombstones delete. Records that do not decode (a future schema) are skipped.
fn load(hosted: &Partition) -> Result<Shard, OffsetError> {
    let partition = hosted.index();
    let mut shard = Shard { loaded_from: Some(hosted.topic_id()), groups: HashMap::new() };
    let mut next = hosted.log_start_offset();
    let mut skipped = 0usize;
    loop {
        let high_watermark = hosted.high_watermark();
        if next >= high_watermark {
            break;
        }
        let data = hosted.read(next, LOAD_READ_BYTES, FirstBatch::Whole)?;
        if data.records.is_empty() {
            break;
        }
        let before = next;
        for batch in BatchIter::new(data.records) {
            let batch = batch.map_err(|source| OffsetError::Batch { partition, source })?;
            if batch.last_offset() < next {
                continue;
            }
            if !batch.header().attributes.is_control() {
                let records = batch.record_iter().map_err(|source| OffsetError::Batch { partition, source })?;
                for record in records {
                    let record = record.map_err(|source| OffsetError::Batch { partition, source })?;
                    if record.offset < next {
                        continue;
                    }
                    match OffsetsRecord::decode(record.key.as_deref(), record.value.as_deref()) {
                        Ok(decoded) => shard.apply(decoded),
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
    tracing::debug!(partition, groups = shard.groups.len(), "loaded __consumer_offsets partition");
    Ok(shard)
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
            replicas.ensure(OFFSETS_TOPIC, p, TOPIC_ID, config(), 0, vec![1]).unwrap();
        }
        let store = OffsetStore::new(replicas.clone(), 4);
        (replicas, store)
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
            assert!(store.delete_group("b").unwrap());
            assert!(!store.delete_group("nobody").unwrap());
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
    fn expire_removes_old_offsets_of_empty_groups_only() {
        // Proves retention applies to groups without members and only to offsets older than it.
        let dir = tempfile::tempdir().unwrap();
        let (replicas, store) = open(dir.path());
        store.commit("empty", vec![("t".into(), 0, committed(1, 100)), ("t".into(), 1, committed(1, 900))]).unwrap();
        store.commit("active", vec![("t".into(), 0, committed(1, 100))]).unwrap();
        assert_eq!(store.expire(1000, 500, |g| g == "empty"), 1);
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
            replicas.ensure(OFFSETS_TOPIC, p, TOPIC_ID, small.clone(), 0, vec![1]).unwrap();
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
        replicas.maintain();
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
        let data = hosted.read(0, 1 << 20, FirstBatch::Whole).unwrap();
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
}
