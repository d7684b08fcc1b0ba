//! Consumer groups: the classic protocol's membership and rebalances (`membership`), the
//! consumer protocol's (KIP-848) server-side reconciliation (`consumer`) with its assignors
//! (`assignor`), committed offsets and group metadata stored as records in the compacted
//! `__consumer_offsets` topic (`offsets`, with Kafka's key/value schemas in `schema`), and the
//! embedded consumer protocol both speak (`embedded`). A group id is of one type at a time: an
//! empty group of either type converts when a member of the other protocol joins; a consumer
//! group with members takes classic members in (`consumer`'s classic half), and a classic group
//! with members is upgraded online by a consumer-protocol join, a consumer group left with only
//! classic members downgraded, as `group.consumer.migration.policy` allows.
//!
//! The coordinator of a group is the leader of partition `partition_for(group)` of
//! `__consumer_offsets`, as in Kafka. Invariant: committed offsets and group metadata are
//! durable only once their record is in that partition's log; the in-memory state is rebuilt
//! from the partition when this node first serves it.

pub mod assignor;
pub mod consumer;
pub mod embedded;
pub mod membership;
pub mod offsets;
pub use self::offsets::Replicated;
pub mod schema;
pub mod wasm_assignor;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::partition::ReplicaManager;

pub use crate::controller::OFFSETS_TOPIC;

/// Kafka's `offsets.topic.num.partitions` default: the partition count `__consumer_offsets`
/// is created with. Once the topic exists its actual count is what groups are mapped over.
pub const OFFSETS_TOPIC_NUM_PARTITIONS_DEFAULT: u32 = 50;

/// Kafka's `offsets.topic.replication.factor` default. Runnel caps it to the usable brokers
/// when it creates the topic (Kafka refuses until that many brokers are up), so a one-node
/// cluster keeps working.
pub const OFFSETS_TOPIC_REPLICATION_FACTOR_DEFAULT: u16 = 3;

/// Why `__consumer_offsets` cannot be deleted: groups would lose their offsets and their
/// coordinator. Kafka 4.x brokers accept the deletion; Kafka's own `kafka-topics.sh` refuses it
/// with these words, and Runnel refuses it on the broker (POLICY_VIOLATION).
pub const OFFSETS_TOPIC_DELETE_REFUSED: &str =
    "Topic __consumer_offsets is a kafka internal topic and is not allowed to be marked for deletion.";
/// Why partitions cannot be added to `__consumer_offsets`: every group would map to another
/// partition and lose its offsets (`kafka-topics.sh --alter` refuses it with these words).
pub const OFFSETS_TOPIC_PARTITIONS_REFUSED: &str = "The number of partitions for the offsets topic cannot be changed.";

/// Whether a `cleanup.policy` keeps `__consumer_offsets` working: compaction only (Kafka
/// creates it with `compact`); `delete` would drop committed offsets by retention.
pub fn offsets_topic_cleanup_error(config: &crate::log::LogConfig) -> Option<String> {
    if config.cleanup_policy.compact && !config.cleanup_policy.delete {
        return None;
    }
    Some(format!("cleanup.policy of internal topic {OFFSETS_TOPIC} must be compact"))
}

/// Kafka's `partitionFor(groupId)`: `Utils.abs(groupId.hashCode()) % partitions`, with Java's
/// `String.hashCode` (UTF-16 code units, wrapping `31 * h + c`) and `Utils.abs` (`i & 0x7fffffff`).
pub fn partition_for(group_id: &str, partitions: u32) -> u32 {
    let mut hash: i32 = 0;
    for unit in group_id.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (hash & 0x7fff_ffff) as u32 % partitions
}

/// Everything group-related a handler can reach.
pub struct GroupCoordinator {
    pub offsets: Arc<offsets::OffsetStore>,
    pub membership: Arc<membership::Membership>,
    /// Groups on the consumer protocol (KIP-848).
    pub consumers: Arc<consumer::ConsumerGroups>,
    /// `offsets.topic.num.partitions`, for creating the topic.
    pub offsets_topic_num_partitions: u32,
    /// `offsets.topic.replication.factor`, for creating the topic (before the cap to the
    /// usable brokers).
    pub offsets_topic_replication_factor: u16,
    replicas: Arc<ReplicaManager>,
}

/// The broker settings of the group coordinator.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// `offsets.topic.num.partitions`: partitions `__consumer_offsets` is created with.
    pub offsets_topic_num_partitions: u32,
    /// `offsets.topic.replication.factor`: replicas `__consumer_offsets` is created with,
    /// capped to the usable brokers.
    pub offsets_topic_replication_factor: u16,
    pub membership: membership::GroupConfig,
    pub consumer: consumer::ConsumerGroupConfig,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            offsets_topic_num_partitions: OFFSETS_TOPIC_NUM_PARTITIONS_DEFAULT,
            offsets_topic_replication_factor: OFFSETS_TOPIC_REPLICATION_FACTOR_DEFAULT,
            membership: membership::GroupConfig::default(),
            consumer: consumer::ConsumerGroupConfig::default(),
        }
    }
}

impl GroupCoordinator {
    pub fn new(replicas: Arc<ReplicaManager>, settings: GroupSettings) -> GroupCoordinator {
        let offsets =
            Arc::new(offsets::OffsetStore::new(replicas.clone(), settings.offsets_topic_num_partitions.max(1)));
        let membership = Arc::new(membership::Membership::with_config(settings.membership));
        let consumers = Arc::new(consumer::ConsumerGroups::new(settings.consumer));
        // Consumer groups store their records in the group's `__consumer_offsets` partition.
        // A write that does not reach the log leaves the change in the group's memory (it is
        // answered as an error): the partition is then read again, its groups restored from the
        // log (`reload_after_failed_write`).
        let reloads = Reloads {
            offsets: Arc::downgrade(&offsets),
            membership: Arc::downgrade(&membership),
            consumers: Arc::downgrade(&consumers),
            scheduled: Arc::default(),
        };
        let downgrade_reloads = reloads.clone();
        consumers.set_store(Box::new(move |group, records| {
            let Some(offsets) = reloads.offsets.upgrade() else {
                return Err(offsets::OffsetError::NotCoordinator { partition: 0 });
            };
            let stored = offsets.store_consumer_records(group, records);
            if let Err(error) = &stored {
                reloads.reload_after_failed_write(offsets.partition_of(group), error);
            }
            stored
        }));
        // A downgraded consumer group's classic members go to the classic membership, and its
        // classic metadata is stored at once (replacing its consumer-group records).
        let (weak_membership, weak_offsets) = (Arc::downgrade(&membership), Arc::downgrade(&offsets));
        consumers.set_downgrader(Box::new(move |group, members| {
            let (Some(membership), Some(offsets)) = (weak_membership.upgrade(), weak_offsets.upgrade()) else {
                return None;
            };
            let value = membership.adopt(group, members, membership::now());
            let stored = offsets.store_group_metadata(group, value);
            if let Err(error) = &stored {
                // The classic group lives in memory only: read the partition's groups again.
                downgrade_reloads.reload_after_failed_write(offsets.partition_of(group), error);
            }
            Some(stored)
        }));
        // A loaded partition brings its groups' members back (the store knows nothing of
        // membership; it only reports what it read).
        let (weak, weak_consumers) = (Arc::downgrade(&membership), Arc::downgrade(&consumers));
        offsets.set_load_listener(Box::new(move |loaded| {
            if let Some(membership) = weak.upgrade() {
                membership.restore(loaded.maps_here, loaded.groups, membership::now());
            }
            if let Some(consumers) = weak_consumers.upgrade() {
                consumers.restore(loaded.maps_here, loaded.consumer_groups, membership::now());
            }
        }));
        GroupCoordinator {
            offsets,
            membership,
            consumers,
            replicas,
            offsets_topic_num_partitions: settings.offsets_topic_num_partitions.max(1),
            offsets_topic_replication_factor: settings.offsets_topic_replication_factor.max(1),
        }
    }

    /// Follows the leadership of `__consumer_offsets` after a metadata change (Kafka's
    /// `onElection` / `onResignation`): groups of partitions led elsewhere now are dropped from
    /// memory, and partitions led here start loading at once (not on the first request), so a
    /// failed-over group is back before its members' next heartbeat.
    pub fn follow_leadership(&self) {
        let led = |partition: u32| self.replicas.get(OFFSETS_TOPIC, partition).is_some_and(|p| p.is_leader());
        let lost = |group: &str| !led(self.offsets.partition_of(group));
        let dropped = self.membership.resign(&lost) + self.consumers.resign(&lost);
        if dropped > 0 {
            tracing::info!(
                groups = dropped,
                "no longer coordinating groups: their __consumer_offsets partitions moved"
            );
        }
        for partition in 0..self.offsets.partition_count() {
            if led(partition) {
                // Starts the load in the background if the shard is cold; errors surface on use.
                let _ = self.offsets.require_loaded(partition);
            }
        }
    }
}

/// What reloads a `__consumer_offsets` partition whose consumer-group write failed.
#[derive(Clone)]
struct Reloads {
    offsets: std::sync::Weak<offsets::OffsetStore>,
    membership: std::sync::Weak<membership::Membership>,
    consumers: std::sync::Weak<consumer::ConsumerGroups>,
    /// Partitions with a reload scheduled or running (one at a time per partition).
    scheduled: Arc<std::sync::Mutex<std::collections::HashSet<u32>>>,
}

impl Reloads {
    /// Schedules the reload of `partition` after a write of its group records failed with
    /// `error` (called under a group's lock: the reload runs on another thread, as it takes
    /// every group's). **Invariant:** the coordinator's memory is never ahead of the log past
    /// a failed write; between the write and the reload new requests for the partition's groups
    /// are answered COORDINATOR_LOAD_IN_PROGRESS once `OffsetStore::reload` marks the shard.
    fn reload_after_failed_write(&self, partition: u32, error: &offsets::OffsetError) {
        if matches!(error, offsets::OffsetError::NotCoordinator { .. }) {
            // Not the leader: the resignation drops the groups.
            return;
        }
        if !self.scheduled.lock().unwrap_or_else(|p| p.into_inner()).insert(partition) {
            return;
        }
        // Held off from now, not from when the reload's thread gets to run: a later write of
        // another group of the partition that succeeded meanwhile could build on the change
        // that failed (e.g. take a partition whose revocation never reached the log).
        if let Some(offsets) = self.offsets.upgrade() {
            offsets.hold_off_until_reloaded(partition);
        }
        tracing::warn!(
            partition,
            %error,
            "a consumer group's records did not reach __consumer_offsets; reading the partition's groups again from the log"
        );
        let reloads = self.clone();
        let run = move || reloads.reload(partition);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(run)),
            Err(_) => drop(std::thread::spawn(run)),
        }
    }

    fn reload(&self, partition: u32) {
        if let (Some(offsets), Some(membership), Some(consumers)) =
            (self.offsets.upgrade(), self.membership.upgrade(), self.consumers.upgrade())
        {
            let result = offsets.reload(partition, || {
                let here = |group: &str| offsets.partition_of(group) == partition;
                membership.resign(&here);
                consumers.resign(&here);
            });
            if let Err(error) = result {
                tracing::warn!(partition, %error, "could not read __consumer_offsets again");
            }
        }
        self.scheduled.lock().unwrap_or_else(|p| p.into_inner()).remove(&partition);
    }
}

/// Starts `tick` every `every` on the current tokio runtime the first time it is called
/// (`started` guards it), until `target` is dropped: the background sweep of the classic and
/// the consumer-protocol memberships. Without a runtime (plain unit tests) nothing starts.
pub(crate) fn start_sweep<T, F, Fut>(started: &AtomicBool, target: &Arc<T>, every: Duration, tick: F)
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    if started.load(Ordering::Relaxed) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    if started.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(target);
    runtime.spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Some(target) = weak.upgrade() else { return };
            tick(target).await;
        }
    });
}

/// Which API commits, for the member checks of `GroupCoordinator::validate_commit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitApi {
    OffsetCommit { version: i16 },
    TxnOffsetCommit,
}

impl GroupCoordinator {
    /// The member checks of a commit, for either group type. A consumer-protocol group checks
    /// the member epoch (Kafka's `ConsumerGroup.validateOffsetCommit`): STALE_MEMBER_EPOCH for
    /// OffsetCommit (ILLEGAL_GENERATION for TxnOffsetCommit, whose clients know only that), and
    /// its members must use OffsetCommit v9+ (UNSUPPORTED_VERSION below). Otherwise the
    /// classic membership's checks apply.
    pub fn validate_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation_or_epoch: i32,
        group_instance_id: Option<&str>,
        api: CommitApi,
    ) -> Result<(), kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        let stale = match api {
            CommitApi::OffsetCommit { .. } => ResponseError::StaleMemberEpoch,
            CommitApi::TxnOffsetCommit => ResponseError::IllegalGeneration,
        };
        let old_api = matches!(api, CommitApi::OffsetCommit { version } if version < 9);
        if let Some(checked) =
            self.consumers.validate_committer(group_id, member_id, generation_or_epoch, stale, old_api)
        {
            return checked;
        }
        self.membership.validate_commit(group_id, member_id, generation_or_epoch, group_instance_id)
    }
}

/// Why DeleteGroups did not delete a group.
#[derive(Debug)]
pub enum GroupDeleteError {
    /// It has members (NON_EMPTY_GROUP).
    NotEmpty,
    /// Neither the memory nor the store knows it (GROUP_ID_NOT_FOUND).
    NotFound,
    /// The tombstones could not be written.
    Store(offsets::OffsetError),
}

impl GroupCoordinator {
    /// DeleteGroups of `group_id` (either protocol): refused while it has members; otherwise
    /// its offsets, metadata and consumer-group records are tombstoned and its memory dropped
    /// **inside the empty-group gate** (its locks held, as offsets expiry writes), so a member
    /// that joins meanwhile waits and then starts a new group, instead of having the new
    /// group's metadata and commits tombstoned behind it (Kafka's `deleteGroups` runs under the
    /// coordinator shard's lock). Returns what to wait on for the ISR to have the tombstones.
    /// Blocking (log appends): call it off the async workers.
    pub fn delete_group(&self, group_id: &str) -> Result<Option<Replicated>, GroupDeleteError> {
        let known_in_memory = self.consumers.members_of(group_id).is_some()
            || self.membership.state(group_id).is_some_and(|s| s != membership::GroupState::Dead);
        let mut written = None;
        let empty = offsets::EmptyGroupGate::run_if_empty(self, group_id, &mut || {
            let result = self.offsets.delete_group(group_id);
            let deleted = result.is_ok();
            written = Some(result);
            deleted
        });
        // The gate runs the write exactly when the group is empty.
        let Some(written) = written.filter(|_| empty) else { return Err(GroupDeleteError::NotEmpty) };
        match written {
            Err(e) => Err(GroupDeleteError::Store(e)),
            Ok((false, _)) if !known_in_memory => Err(GroupDeleteError::NotFound),
            Ok((_, replicated)) => Ok(replicated),
        }
    }
}

/// Offsets expiry's gate over both group types: a consumer-protocol group with members keeps
/// its offsets; otherwise the classic membership decides (and holds its lock over the write).
/// A deleted group is dropped from both.
/// Lock order: a consumer group's lock, then the membership's.
impl offsets::EmptyGroupGate for GroupCoordinator {
    fn run_if_empty(&self, group_id: &str, write: &mut dyn FnMut() -> bool) -> bool {
        self.consumers.while_empty(group_id, &mut || {
            let mut deleted = false;
            let ran = self.membership.run_if_empty(group_id, &mut || {
                deleted = write();
                deleted
            });
            ran.then_some(deleted)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_kafka() {
        // Proves Java's String.hashCode and Utils.abs; expected values printed by a JVM
        // (`"billing".hashCode() == -109829509`, `(h & 0x7fffffff) % 50`).
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("billing", 50), 39);
        assert_eq!(partition_for("console-consumer-12345", 50), 6);
        assert_eq!(partition_for("grüße", 50), 23);
    }
}
