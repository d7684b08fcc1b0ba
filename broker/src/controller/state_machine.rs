//! The state machine of the metadata quorum: applies committed entries to the `MetadataImage`,
//! publishes every new image, and builds, stores and installs snapshots.
//!
//! Owns: `metadata/snapshot.bin` = frame(JSON `SnapshotMeta`) + frame(snapshot payload), written
//! atomically; the payload (a JSON form of the image, `ImageDto`) is also exactly what a leader
//! streams to a lagging follower.
//! Invariant: the image is never persisted outside a snapshot: after a restart it is the last
//! snapshot plus the committed log re-applied by openraft, so it only ever reflects committed
//! entries. `image.applied_index` equals the index of `last_applied`; the published image is the
//! current one after every `apply` and `install_snapshot`. A stored snapshot is only replaced by a
//! newer one (or by an installed one).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::disk::{self, blocking, DirLock, Durability, StoreError, Transient};
use super::image::{BrokerInfo, MetadataImage, PartitionImage, TopicImage};
use super::raft_types::{Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use super::record::{ApplyOutcome, NodeId};
use crate::security::scram::{ScramCredential, ScramMechanism};

pub(crate) const SNAPSHOT_FILE: &str = "snapshot.bin";
const IMAGE_FORMAT_VERSION: u32 = 1;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing multi-step happens under these locks; a poisoned one still holds consistent data.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---- the persisted / shipped form of the image (core types stay free of serde) ----

#[derive(Serialize, Deserialize)]
struct ImageDto {
    format_version: u32,
    applied_index: u64,
    brokers: Vec<BrokerDto>,
    topics: Vec<TopicDto>,
    /// Absent in snapshots written before transforms existed.
    #[serde(default)]
    transforms: Vec<super::record::TransformImage>,
    /// Absent in snapshots written before validators existed.
    #[serde(default)]
    validators: Vec<super::record::ValidatorImage>,
    /// Absent in snapshots written before assignors could be uploaded.
    #[serde(default)]
    assignors: Vec<super::record::AssignorImage>,
    /// Absent in snapshots written before producer ids were allocated by the quorum.
    #[serde(default)]
    next_producer_id: i64,
    /// Absent in snapshots written before SASL/SCRAM.
    #[serde(default)]
    scram_credentials: Vec<ScramDto>,
    /// Absent in snapshots written before ACLs.
    #[serde(default)]
    acls: Vec<super::record::AclEntry>,
    /// Absent in snapshots written before HTTP authentication.
    #[serde(default)]
    http_tokens: Vec<super::record::HttpToken>,
    #[serde(default)]
    audit: Vec<super::record::AuditEntry>,
}

#[derive(Serialize, Deserialize)]
struct ScramDto {
    user: String,
    mechanism: String,
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
    iterations: u32,
}

#[derive(Serialize, Deserialize)]
struct BrokerDto {
    node_id: NodeId,
    host: String,
    port: u16,
    rack: Option<String>,
    /// Absent in snapshots written before broker lifecycles existed.
    #[serde(default = "no_broker_epoch")]
    broker_epoch: i64,
    #[serde(default)]
    fenced: bool,
    /// Absent in snapshots written before listeners had names.
    #[serde(default)]
    listeners: Vec<super::record::ListenerEndpoint>,
}

fn no_broker_epoch() -> i64 {
    -1
}

#[derive(Serialize, Deserialize)]
struct TopicDto {
    name: String,
    topic_id: [u8; 16],
    partitions: Vec<PartitionDto>,
    configs: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct PartitionDto {
    partition: u32,
    leader: Option<NodeId>,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<NodeId>,
    isr: Vec<NodeId>,
    /// Absent in snapshots written before reassignments existed.
    #[serde(default)]
    adding_replicas: Vec<NodeId>,
    #[serde(default)]
    removing_replicas: Vec<NodeId>,
}

fn encode_image(image: &MetadataImage) -> Result<Vec<u8>, StoreError> {
    let dto = ImageDto {
        format_version: IMAGE_FORMAT_VERSION,
        applied_index: image.applied_index,
        brokers: image
            .brokers
            .values()
            .map(|b| BrokerDto {
                node_id: b.node_id,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
                broker_epoch: b.broker_epoch,
                fenced: b.fenced,
                listeners: b.listeners.clone(),
            })
            .collect(),
        topics: image
            .topics
            .values()
            .map(|t| TopicDto {
                name: t.name.clone(),
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| PartitionDto {
                        partition: p.partition,
                        leader: p.leader,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        adding_replicas: p.adding_replicas.clone(),
                        removing_replicas: p.removing_replicas.clone(),
                    })
                    .collect(),
                configs: t.configs.clone(),
            })
            .collect(),
        transforms: image.transforms.values().cloned().collect(),
        validators: image.validators.values().map(|v| (**v).clone()).collect(),
        assignors: image.assignors.values().map(|a| (**a).clone()).collect(),
        next_producer_id: image.next_producer_id,
        acls: image.acls.iter().map(super::record::AclEntry::of).collect(),
        http_tokens: image.http_tokens.values().cloned().collect(),
        audit: image.audit.iter().cloned().collect(),
        scram_credentials: image
            .scram_credentials
            .iter()
            .map(|((user, _), c)| ScramDto {
                user: user.clone(),
                mechanism: c.mechanism.name().to_string(),
                salt: c.salt.clone(),
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
                iterations: c.iterations,
            })
            .collect(),
    };
    serde_json::to_vec(&dto).map_err(StoreError::Encode)
}

/// Why a snapshot payload could not be decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageDecodeError {
    #[error("snapshot payload is not a metadata image")]
    Json(#[from] serde_json::Error),
    #[error("unsupported metadata image format version {0}")]
    Version(u32),
}

fn decode_image(bytes: &[u8]) -> Result<MetadataImage, ImageDecodeError> {
    let dto: ImageDto = serde_json::from_slice(bytes)?;
    if dto.format_version != IMAGE_FORMAT_VERSION {
        return Err(ImageDecodeError::Version(dto.format_version));
    }
    let mut image = MetadataImage {
        applied_index: dto.applied_index,
        brokers: dto
            .brokers
            .into_iter()
            .map(|b| {
                let info = BrokerInfo {
                    node_id: b.node_id,
                    host: b.host,
                    port: b.port,
                    rack: b.rack,
                    broker_epoch: b.broker_epoch,
                    fenced: b.fenced,
                    listeners: b.listeners,
                };
                (b.node_id, info)
            })
            .collect(),
        transforms: dto.transforms.into_iter().map(|t| (t.name.clone(), t)).collect(),
        validators: dto.validators.into_iter().map(|v| (v.name.clone(), Arc::new(v))).collect(),
        assignors: dto.assignors.into_iter().map(|a| (a.name.clone(), Arc::new(a))).collect(),
        next_producer_id: dto.next_producer_id,
        acls: Arc::new(dto.acls.iter().filter_map(|a| a.binding()).collect()),
        http_tokens: Arc::new(dto.http_tokens.into_iter().map(|t| (t.id.clone(), t)).collect()),
        audit: Arc::new(dto.audit.into_iter().collect()),
        scram_credentials: dto
            .scram_credentials
            .into_iter()
            .filter_map(|c| {
                let mechanism = ScramMechanism::from_name(&c.mechanism)?;
                let credential = ScramCredential {
                    mechanism,
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations: c.iterations,
                };
                Some(((c.user, mechanism), credential))
            })
            .collect(),
        ..MetadataImage::default()
    };
    for t in dto.topics {
        let partitions = t
            .partitions
            .into_iter()
            .map(|p| PartitionImage {
                partition: p.partition,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                replicas: p.replicas,
                isr: p.isr,
                adding_replicas: p.adding_replicas,
                removing_replicas: p.removing_replicas,
            })
            .collect();
        image.insert_topic(TopicImage { name: t.name, topic_id: t.topic_id, partitions, configs: t.configs });
    }
    Ok(image)
}

// ---- the snapshot file ----

#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Arc<Vec<u8>>,
}

impl StoredSnapshot {
    fn to_snapshot(&self) -> Snapshot {
        Snapshot { meta: self.meta.clone(), snapshot: Box::new(Cursor::new(self.data.as_ref().clone())) }
    }
}

/// When `SnapshotStore::save` may replace the stored snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    /// Only if the new snapshot covers more of the log (a built snapshot racing another).
    IfNewer,
    /// Always (an installed snapshot is the state machine's new state).
    Always,
}

/// The stored snapshot, shared by the state machine and its snapshot builders.
struct SnapshotStore {
    dir: PathBuf,
    current: Mutex<Option<StoredSnapshot>>,
    /// Serialises file writes between builder tasks and installs. Held only in blocking tasks.
    write: Mutex<()>,
    next_id: AtomicU64,
    /// A snapshot write that runs out of descriptors or disk space waits and retries.
    transient: Arc<Transient>,
    _lock: Arc<DirLock>,
}

impl SnapshotStore {
    /// Blocking.
    fn save(&self, snapshot: StoredSnapshot, replace: Replace) -> Result<(), StoreError> {
        let _write = lock(&self.write);
        if replace == Replace::IfNewer {
            if let Some(current) = lock(&self.current).as_ref() {
                if current.meta.last_log_id >= snapshot.meta.last_log_id {
                    return Ok(());
                }
            }
        }
        let meta = serde_json::to_vec(&snapshot.meta).map_err(StoreError::Encode)?;
        let mut bytes = Vec::with_capacity(meta.len() + snapshot.data.len() + 2 * disk::FRAME_HEADER_BYTES);
        disk::encode_frame(&meta, &mut bytes)?;
        disk::encode_frame(&snapshot.data, &mut bytes)?;
        self.transient.retry("write the metadata snapshot", || {
            disk::write_atomically(&self.dir, SNAPSHOT_FILE, &bytes, Durability::Durable)
        })?;
        *lock(&self.current) = Some(snapshot);
        Ok(())
    }

    fn current(&self) -> Option<StoredSnapshot> {
        lock(&self.current).clone()
    }

    fn next_id(&self, last_log_id: Option<&LogId>) -> String {
        let seq = self.next_id.fetch_add(1, Ordering::Relaxed);
        match last_log_id {
            Some(l) => format!("{}-{}-{}-{seq}", l.leader_id.term, l.leader_id.node_id, l.index),
            None => format!("none-{seq}"),
        }
    }
}

/// Loads `dir/snapshot.bin` if present. Blocking.
fn load_snapshot(dir: &Path) -> Result<Option<(StoredSnapshot, MetadataImage)>, StoreError> {
    let path = dir.join(SNAPSHOT_FILE);
    let _ = std::fs::remove_file(dir.join(format!("{SNAPSHOT_FILE}.tmp")));
    let Some(bytes) = disk::read_if_exists(&path)? else {
        return Ok(None);
    };
    let corrupt = |position, reason: String| StoreError::Corrupt { path: path.clone(), position, reason };
    let decoded = disk::decode_frames(&path, &bytes)?;
    // The file was fsynced before it was renamed into place: any damage is real corruption.
    let [(_, meta), (data_position, data)] = decoded.frames[..] else {
        return Err(corrupt(decoded.valid_len, "expected exactly two frames".to_string()));
    };
    if decoded.torn_tail.is_some() {
        return Err(corrupt(decoded.valid_len, "damaged tail".to_string()));
    }
    let meta: SnapshotMeta = serde_json::from_slice(meta).map_err(|e| corrupt(0, format!("bad snapshot meta: {e}")))?;
    let mut image = decode_image(data).map_err(|e| corrupt(data_position, e.to_string()))?;
    image.applied_index = meta.last_log_id.map_or(0, |l| l.index);
    Ok(Some((StoredSnapshot { meta, data: Arc::new(data.to_vec()) }, image)))
}

fn io_error(
    e: impl std::error::Error + 'static,
    to_storage: impl FnOnce(AnyError) -> StorageIOError<u64>,
) -> StorageError {
    StorageError::IO { source: to_storage(AnyError::new(&e)) }
}

// ---- the state machine ----

/// The state machine handed to openraft.
pub(crate) struct StateMachine {
    image: Arc<MetadataImage>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    image_tx: watch::Sender<Arc<MetadataImage>>,
    snapshots: Arc<SnapshotStore>,
    /// Dropped with the state machine and its builders: lets shutdown wait until none is left.
    alive: mpsc::Sender<()>,
}

impl StateMachine {
    /// Loads the last snapshot from `dir`, if any. Blocking.
    pub(crate) fn open(
        dir: &Path,
        dir_lock: Arc<DirLock>,
        alive: mpsc::Sender<()>,
        transient: Arc<Transient>,
    ) -> Result<(StateMachine, watch::Receiver<Arc<MetadataImage>>), StoreError> {
        let loaded = load_snapshot(dir)?;
        let millis = crate::log::now_ms().max(0) as u64;
        let snapshots = Arc::new(SnapshotStore {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
            write: Mutex::new(()),
            next_id: AtomicU64::new(millis),
            transient,
            _lock: dir_lock,
        });
        let (image, last_applied, membership) = match loaded {
            Some((stored, image)) => {
                let state = (image, stored.meta.last_log_id, stored.meta.last_membership.clone());
                *lock(&snapshots.current) = Some(stored);
                state
            }
            None => (MetadataImage::default(), None, StoredMembership::default()),
        };
        let image = Arc::new(image);
        let (image_tx, image_rx) = watch::channel(image.clone());
        Ok((StateMachine { image, last_applied, membership, image_tx, snapshots, alive }, image_rx))
    }
}

/// Captures the state at `get_snapshot_builder` time and serializes it off the apply path.
pub(crate) struct SnapshotBuilder {
    image: Arc<MetadataImage>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
    _alive: mpsc::Sender<()>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Encoding reads every partition: off the async workers, like the write.
        let image = self.image.clone();
        let data = blocking(move || encode_image(&image))
            .await
            .map_err(|e| io_error(e, StorageIOError::read_state_machine))?;
        let snapshot_id = self.snapshots.next_id(self.last_applied.as_ref());
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        let signature = meta.signature();
        let stored = StoredSnapshot { meta, data: Arc::new(data) };
        let snapshots = self.snapshots.clone();
        let to_save = stored.clone();
        blocking(move || snapshots.save(to_save, Replace::IfNewer))
            .await
            .map_err(|e| io_error(e, |e| StorageIOError::write_snapshot(Some(signature), e)))?;
        tracing::info!(snapshot = %stored.meta, bytes = stored.data.len(), "built a metadata snapshot");
        Ok(stored.to_snapshot())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyOutcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut outcomes = Vec::new();
        // Copy-on-write: subscribers keep the previous image.
        let image = Arc::make_mut(&mut self.image);
        for entry in entries {
            // Set first: a registration takes its own index as the broker epoch.
            image.applied_index = entry.log_id.index;
            let outcome = match &entry.payload {
                EntryPayload::Blank => ApplyOutcome::Applied,
                EntryPayload::Normal(record) => image.apply(record),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                    ApplyOutcome::Applied
                }
            };
            self.last_applied = Some(entry.log_id);
            outcomes.push(outcome);
        }
        self.image_tx.send_replace(self.image.clone());
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            image: self.image.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.clone(),
            _alive: self.alive.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut image = decode_image(&data)
            .map_err(|e| io_error(e, |e| StorageIOError::read_snapshot(Some(meta.signature()), e)))?;
        image.applied_index = meta.last_log_id.map_or(0, |l| l.index);
        let stored = StoredSnapshot { meta: meta.clone(), data: Arc::new(data) };
        let snapshots = self.snapshots.clone();
        let signature = meta.signature();
        blocking(move || snapshots.save(stored, Replace::Always))
            .await
            .map_err(|e| io_error(e, |e| StorageIOError::write_snapshot(Some(signature), e)))?;
        tracing::info!(snapshot = %meta, "installed a metadata snapshot from the leader");
        self.image = Arc::new(image);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.image_tx.send_replace(self.image.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.snapshots.current().map(|s| s.to_snapshot()))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Membership};

    use super::*;
    use crate::controller::record::MetadataRecord;

    fn open(dir: &Path) -> (StateMachine, watch::Receiver<Arc<MetadataImage>>) {
        let lock = Arc::new(DirLock::acquire(dir).expect("lock"));
        let (alive, _) = mpsc::channel(1);
        StateMachine::open(dir, lock, alive, Arc::new(Transient::new())).expect("open")
    }

    fn entry(index: u64, payload: EntryPayload<TypeConfig>) -> Entry {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload }
    }

    // Proves apply returns one outcome per entry (membership and blank included), publishes the
    // image, and a snapshot written to disk restores the same image and membership.
    #[tokio::test]
    async fn apply_publish_snapshot_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let membership = Membership::new(vec![[1u64].into()], None);
        let create = MetadataRecord::CreateTopic {
            name: "a".into(),
            topic_id: [3; 16],
            partitions: vec![vec![1]],
            configs: BTreeMap::new(),
            max_broker_partitions: None,
        };
        let expected_image;
        {
            let (mut sm, mut rx) = open(dir.path());
            let outcomes = sm
                .apply(vec![
                    entry(0, EntryPayload::Membership(membership.clone())),
                    entry(1, EntryPayload::Blank),
                    entry(2, EntryPayload::Normal(create.clone())),
                    entry(3, EntryPayload::Normal(create)),
                ])
                .await
                .expect("apply");
            assert_eq!(
                outcomes,
                vec![
                    ApplyOutcome::Applied,
                    ApplyOutcome::Applied,
                    ApplyOutcome::Applied,
                    ApplyOutcome::TopicAlreadyExists
                ]
            );
            assert!(rx.has_changed().expect("sender alive"));
            let published = rx.borrow_and_update().clone();
            assert_eq!(published.applied_index, 3);
            assert!(published.topic("a").is_some());
            let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot");
            assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(3));
            expected_image = published;
        }
        let (mut sm, rx) = open(dir.path());
        assert_eq!(*rx.borrow().as_ref(), *expected_image);
        let (applied, stored_membership) = sm.applied_state().await.expect("state");
        assert_eq!(applied.map(|l| l.index), Some(3));
        assert_eq!(stored_membership.membership(), &membership);
        assert!(sm.get_current_snapshot().await.expect("current").is_some());
    }

    // Proves an installed snapshot replaces the image and is what the next open loads.
    #[tokio::test]
    async fn install_snapshot_replaces_image() {
        let source = tempfile::tempdir().expect("tempdir");
        let (mut leader, _) = open(source.path());
        let record =
            MetadataRecord::RegisterBroker { node_id: 2, host: "h".into(), port: 9, rack: None, listeners: vec![] };
        leader.apply(vec![entry(0, EntryPayload::Normal(record))]).await.expect("apply");
        let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("snapshot");

        let target = tempfile::tempdir().expect("tempdir");
        {
            let (mut follower, rx) = open(target.path());
            follower.install_snapshot(&snapshot.meta, snapshot.snapshot).await.expect("install");
            assert_eq!(rx.borrow().brokers.get(&2).map(|b| b.port), Some(9));
        }
        let (_, rx) = open(target.path());
        assert_eq!(rx.borrow().brokers.len(), 1);
        assert_eq!(rx.borrow().applied_index, 0);
    }
}
