//! Consumer groups on the consumer protocol (KIP-848, `group.protocol=consumer`): the group
//! coordinator computes a target assignment per group epoch and reconciles each member toward
//! it through ConsumerGroupHeartbeat, revoking before it assigns.
//!
//! Epochs: the group epoch is bumped by every change an assignment depends on (a member joins
//! or leaves, a subscription, rack or preferred assignor changes, a subscribed topic appears,
//! disappears or gains partitions). The target assignment is computed for a group epoch by the
//! group's assignor, outside the group's lock; it is installed only if the group epoch it was
//! computed for is still current. A member's epoch moves to the target epoch once it holds no
//! partition the target takes away from it.
//!
//! Invariants (asserted by `check_invariants` in tests and debug builds): a partition is owned
//! (assigned or pending revocation) by at most one member, and `owners` is exactly the union
//! of the members' owned partitions; a member never gets a partition another member still
//! owns (it waits in UnreleasedPartitions); member epochs never exceed the target epoch, which
//! never exceeds the group epoch.
//!
//! Locking: one `std::sync::Mutex` per group, never held across an `.await` or an assignor
//! run; the map of groups is behind an `RwLock` taken only to find or create a group. This
//! module does no I/O and knows no wire format beyond Kafka's error codes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::assignor::{self, AssignmentSpec, MemberSpec, Plan, TopicSpec};
use super::membership::{ClassicMemberState, ClassicMembers};
use super::offsets::{OffsetError, StoredConsumerGroup};
use super::schema::{
    ClassicMemberMetadata, ConsumerMemberValue, ConsumerRecord, CurrentAssignmentValue, GroupEpochValue,
    StoredPartitions,
};
use super::Replicated;
use crate::controller::MetadataImage;

/// Appends a group's records to its `__consumer_offsets` partition (the offsets store), one
/// batch per call; the caller waits on the returned [`Replicated`] before answering.
pub type Store = Box<dyn Fn(&str, Vec<ConsumerRecord>) -> Result<Replicated, OffsetError> + Send + Sync>;

/// Takes over the classic members of a downgraded group (the coordinator hands them to the
/// classic membership and stores the classic group).
pub type Downgrader = Box<dyn Fn(&str, ClassicMembers) -> Write + Send + Sync>;

/// The write a heartbeat made, to wait for before answering (none when nothing changed).
pub type Write = Option<Result<Replicated, OffsetError>>;

pub type TopicId = [u8; 16];
/// Partitions by topic id (what the protocol carries).
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// The member epoch of a join.
pub const JOIN_EPOCH: i32 = 0;
/// The member epoch of a leave.
pub const LEAVE_EPOCH: i32 = -1;
/// The member epoch of a static member's temporary leave (KIP-345: its partitions wait for it).
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Kafka's `group.consumer.session.timeout.ms` default.
pub const SESSION_TIMEOUT_MS: i32 = 45_000;
/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const HEARTBEAT_INTERVAL_MS: i32 = 5_000;
/// `group.consumer.reconcile.heartbeat.interval.ms` default (Runnel's own).
pub const RECONCILE_HEARTBEAT_INTERVAL_MS: i32 = 500;
/// How often the background sweep expires sessions and revocations.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Bound on the topic names one member may subscribe to, and on a regex's length.
pub const SUBSCRIBED_TOPICS_MAX: usize = 10_000;
pub const REGEX_MAX_BYTES: usize = 4_096;

/// The broker settings of consumer-protocol groups.
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.reconcile.heartbeat.interval.ms` (Runnel's own, at most
    /// `heartbeat_interval_ms`): the interval answered to a member that has just joined or is on
    /// its way to a newer assignment (see [`ConsumerGroups::finish`]).
    pub reconcile_heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`: members per group.
    pub max_size: usize,
    /// `group.max.count`: consumer groups in memory (groups without members are evicted first).
    pub max_count: usize,
    /// `group.consumer.assignors`: the built-in assignors offered; the first is the default.
    pub assignors: Vec<String>,
    /// `group.consumer.migration.policy`.
    pub migration_policy: MigrationPolicy,
    /// The classic protocol's `group.max.size`: a group larger than this is not downgraded.
    pub classic_max_size: usize,
}

/// `group.consumer.migration.policy` (Kafka 4's default is `bidirectional`): which online
/// conversions a group *with members* may go through. An upgrade turns a classic group into a
/// consumer group when a consumer-protocol member joins it; a downgrade turns a consumer group
/// back into a classic one when its last consumer-protocol member leaves and only classic
/// members remain. An empty group converts whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    pub fn parse(value: &str) -> Result<MigrationPolicy, String> {
        match value.to_ascii_lowercase().as_str() {
            "bidirectional" => Ok(MigrationPolicy::Bidirectional),
            "upgrade" => Ok(MigrationPolicy::Upgrade),
            "downgrade" => Ok(MigrationPolicy::Downgrade),
            "disabled" => Ok(MigrationPolicy::Disabled),
            other => Err(format!(
                "group.consumer.migration.policy must be bidirectional, upgrade, downgrade or disabled, not {other}"
            )),
        }
    }

    pub fn upgrade_enabled(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade)
    }

    pub fn downgrade_enabled(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade)
    }
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: SESSION_TIMEOUT_MS,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            reconcile_heartbeat_interval_ms: RECONCILE_HEARTBEAT_INTERVAL_MS,
            max_size: super::membership::GROUP_MAX_SIZE,
            max_count: super::membership::GROUP_MAX_COUNT,
            assignors: vec![assignor::UNIFORM.to_string(), assignor::RANGE.to_string()],
            migration_policy: MigrationPolicy::Bidirectional,
            classic_max_size: super::membership::GROUP_MAX_SIZE,
        }
    }
}

impl ConsumerGroupConfig {
    pub fn default_assignor(&self) -> &str {
        self.assignors.first().map_or(assignor::UNIFORM, |s| s.as_str())
    }
}

/// Kafka's consumer group states (ConsumerGroupDescribe, ListGroups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// Where a member is on its way to its target assignment (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Holds its whole target at the target epoch.
    Stable,
    /// Must give up `revoking` before it moves on; its epoch stays until it does.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still own.
    UnreleasedPartitions,
}

/// A ConsumerGroupHeartbeat, decoded. `None` fields are the client's "unchanged".
#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    pub version: i16,
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
    /// Which topics the member's principal may describe (`None`: all, no authorizer). A regex
    /// matches only those, as in Kafka 4 (KAFKA-18813).
    pub topic_access: Option<TopicAccess>,
}

/// Whether a member's principal may DESCRIBE a topic, against the ACLs of the moment.
#[derive(Clone)]
pub struct TopicAccess(pub Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for TopicAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicAccess")
    }
}

/// What the coordinator answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: Option<(ResponseError, Option<String>)>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when it must be told (full request or a change).
    pub assignment: Option<Assignment>,
}

impl HeartbeatAnswer {
    /// The answer to a leave (epoch -1 or -2).
    fn left(request: &HeartbeatRequest, heartbeat_interval_ms: i32) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: None,
            member_id: request.member_id.clone(),
            member_epoch: request.member_epoch,
            heartbeat_interval_ms,
            assignment: None,
        }
    }

    fn error(error: ResponseError, message: impl Into<Option<String>>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: Some((error, message.into())),
            member_id: String::new(),
            member_epoch: 0,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }
}

/// An assignment to compute outside the group's lock, for the group epoch it names.
#[derive(Debug, Clone)]
pub struct AssignJob {
    pub assignor: String,
    pub spec: AssignmentSpec,
    group_epoch: i32,
    topic_ids: BTreeMap<String, TopicId>,
}

/// What came of running an `AssignJob`: the plan the group uses and the assignor that made it
/// (the default, with `error`, when the chosen one failed).
#[derive(Debug, Clone)]
pub struct AssignOutcome {
    pub assignor: String,
    /// The version of an uploaded assignor that made the plan (`None`: a built-in one).
    pub version: Option<u64>,
    pub plan: Plan,
    pub error: Option<String>,
}

/// The first half of a heartbeat: the member's changes are applied; what is left is an optional
/// assignment to run and the reconciliation (`ConsumerGroups::finish`).
pub struct Pending {
    group: Arc<Mutex<ConsumerGroup>>,
    member_id: String,
    full_request: bool,
    /// This heartbeat joined the member (epoch 0).
    joined: bool,
    assigned_before: Assignment,
    owned: Option<Assignment>,
    pub job: Option<AssignJob>,
}

/// `begin`'s result.
pub enum Begin {
    /// Refused: nothing changed.
    Answer(HeartbeatAnswer),
    /// A leave: answered once its records are stored.
    Left(HeartbeatAnswer, Write),
    Continue(Pending),
}

/// A member as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target_assignment: Assignment,
    pub state: MemberState,
    /// On the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this consumer group.
    pub classic: bool,
}

/// A group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub group_id: String,
    pub state: ConsumerGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    /// The version of the uploaded assignor that computed the target (`None`: built-in).
    pub assignor_version: Option<u64>,
    /// Why the last assignment fell back to the default assignor, if it did.
    pub assignor_error: Option<String>,
    /// When the target assignment was computed (ms since the epoch; 0: not on this
    /// coordinator, e.g. restored from the log).
    pub assigned_ms: i64,
    pub members: Vec<MemberView>,
}

struct Member {
    member_id: String,
    instance_id: Option<String>,
    rack: Option<String>,
    client_id: String,
    client_host: String,
    subscribed_names: BTreeSet<String>,
    regex: Option<(String, regex::Regex)>,
    /// From the member's last heartbeat; `None` also for a member restored from the log
    /// until it heartbeats here (its regex then matches every topic for at most one
    /// heartbeat interval).
    topic_access: Option<TopicAccess>,
    server_assignor: Option<String>,
    rebalance_timeout_ms: i32,
    state: MemberState,
    epoch: i32,
    previous_epoch: i32,
    assigned: Assignment,
    revoking: Assignment,
    session_deadline: Instant,
    revocation_deadline: Option<Instant>,
    /// A static member that left with epoch -2: its partitions wait for its instance id until
    /// its session expires.
    left_static: bool,
    /// Set for a member on the classic protocol (JoinGroup, SyncGroup, Heartbeat).
    classic: Option<ClassicMember>,
}

/// What a classic member inside a consumer group has besides the consumer-protocol fields
/// (Kafka's `ClassicMemberMetadata`, stored in its member record).
#[derive(Debug, Clone)]
struct ClassicMember {
    session_timeout_ms: i32,
    /// (name, embedded subscription), in the member's order of preference.
    protocols: Vec<(String, Bytes)>,
    /// The JoinGroup or SyncGroup the member owes by then (Kafka's join and sync timeouts).
    deadline: Option<Instant>,
}

impl ClassicMember {
    fn session(&self) -> Duration {
        Duration::from_millis(self.session_timeout_ms.max(0) as u64)
    }

    /// The protocol the member's JoinGroup answer names (its first), and the embedded version
    /// its assignment is written in.
    fn protocol(&self) -> (&str, i16) {
        let (name, metadata) = self.protocols.first().map_or(("", &[][..]), |(n, m)| (n.as_str(), &m[..]));
        let version = if metadata.len() >= 2 { i16::from_be_bytes([metadata[0], metadata[1]]).clamp(0, 3) } else { 0 };
        (name, version)
    }
}

impl Member {
    /// A member that holds nothing yet, at epoch 0.
    fn new(
        member_id: &str,
        instance_id: Option<String>,
        (client_id, client_host): (&str, &str),
        rebalance_timeout_ms: i32,
        session_deadline: Instant,
        classic: Option<ClassicMember>,
    ) -> Member {
        Member {
            member_id: member_id.to_string(),
            instance_id,
            rack: None,
            client_id: client_id.to_string(),
            client_host: client_host.to_string(),
            subscribed_names: BTreeSet::new(),
            regex: None,
            topic_access: None,
            server_assignor: None,
            rebalance_timeout_ms,
            state: MemberState::Stable,
            epoch: 0,
            previous_epoch: 0,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            session_deadline,
            revocation_deadline: None,
            left_static: false,
            classic,
        }
    }

    fn owns(&self) -> impl Iterator<Item = (TopicId, i32)> + '_ {
        flatten(&self.assigned).chain(flatten(&self.revoking))
    }

    /// Topics this member subscribes to that exist, by name (names and regex matches).
    fn resolved(&self, image: &MetadataImage) -> BTreeSet<String> {
        self.resolved_among(image.topics.keys(), |name| image.topics.contains_key(name))
    }

    /// Topics this member subscribes to among the topics `names` (which `exists` tells).
    fn resolved_among<'a>(
        &self,
        names: impl Iterator<Item = &'a String>,
        exists: impl Fn(&str) -> bool,
    ) -> BTreeSet<String> {
        let mut topics: BTreeSet<String> = self.subscribed_names.iter().filter(|name| exists(name)).cloned().collect();
        if let Some((_, regex)) = &self.regex {
            // Internal topics are never matched by a pattern, nor topics the member may not
            // describe, as in Kafka.
            let describable = |name: &str| self.topic_access.as_ref().is_none_or(|access| (access.0)(name));
            topics.extend(
                names.filter(|name| !name.starts_with("__") && regex.is_match(name) && describable(name)).cloned(),
            );
        }
        topics
    }
}

/// One consumer-protocol group.
struct ConsumerGroup {
    group_id: String,
    group_epoch: i32,
    target_epoch: i32,
    target: HashMap<String, Assignment>,
    members: BTreeMap<String, Member>,
    /// Static members: instance id → member id.
    instances: HashMap<String, String>,
    /// Who owns each partition (assigned or pending revocation).
    owners: HashMap<(TopicId, i32), String>,
    /// Hash of every member's resolved subscription with the topics' ids and partition counts,
    /// and the metadata index it was computed at.
    subscription_signature: u64,
    metadata_index: Option<u64>,
    /// The topics the members resolved at that look, with their ids and partition counts:
    /// enough to recompute the signature and hash when a member leaves, without an image.
    looked_at: BTreeMap<String, (TopicId, usize)>,
    /// [`topics_hash`] of the subscribed topics at the last look: stored with every group
    /// epoch (ConsumerGroupMetadata's MetadataHash), so a coordinator that restores the group
    /// sees whether they changed meanwhile.
    topics_hash: i64,
    /// Restored from records, whose member-by-member subscription signature is not stored:
    /// the hash they carried (0: none), compared at the first look, which then records the
    /// signature. `None` once looked at (or for a group made here).
    restored_topics_hash: Option<i64>,
    assignor: String,
    assignor_version: Option<u64>,
    assignor_error: Option<String>,
    assigned_ms: i64,
    /// When this coordinator last installed a new target (none since a restore).
    target_installed_at: Option<Instant>,
    /// Removed from the map (deleted, resigned, converted): a heartbeat holding it must not
    /// bring it back.
    gone: bool,
    /// Records of the changes not stored yet (flushed, under the lock, by every operation).
    unsaved: Vec<ConsumerRecord>,
    /// Names of the topics assignments were computed over (from each assignment job).
    topic_names: HashMap<TopicId, String>,
}

impl ConsumerGroup {
    fn new(group_id: &str, default_assignor: &str) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.to_string(),
            group_epoch: 0,
            target_epoch: 0,
            target: HashMap::new(),
            members: BTreeMap::new(),
            instances: HashMap::new(),
            owners: HashMap::new(),
            subscription_signature: 0,
            metadata_index: None,
            looked_at: BTreeMap::new(),
            topics_hash: 0,
            restored_topics_hash: None,
            assignor: default_assignor.to_string(),
            assignor_version: None,
            assignor_error: None,
            assigned_ms: 0,
            target_installed_at: None,
            gone: false,
            unsaved: Vec::new(),
            topic_names: HashMap::new(),
        }
    }

    /// Rebuilds a group from its records (a new coordinator's load). Sessions start now.
    fn restore(
        group_id: &str,
        stored: StoredConsumerGroup,
        default_assignor: &str,
        session: Duration,
        now: Instant,
    ) -> ConsumerGroup {
        let mut group = ConsumerGroup::new(group_id, default_assignor);
        group.group_epoch = stored.group_epoch;
        group.target_epoch = stored.target_epoch.min(stored.group_epoch);
        group.restored_topics_hash = Some(stored.metadata_hash);
        group.topics_hash = stored.metadata_hash;
        for (member_id, value) in stored.members {
            let current = stored.current.get(&member_id).cloned().unwrap_or_default();
            let regex =
                value.subscribed_topic_regex.as_ref().and_then(|r| compile_regex(r).ok().map(|c| (r.clone(), c)));
            let assigned = from_stored(&current.assigned);
            let revoking = from_stored(&current.revoking);
            for (topic, p) in flatten(&assigned).chain(flatten(&revoking)) {
                group.owners.insert((topic, p), member_id.clone());
            }
            if let Some(instance) = &value.instance_id {
                group.instances.insert(instance.clone(), member_id.clone());
            }
            let state = match current.state {
                1 => MemberState::UnrevokedPartitions,
                2 => MemberState::UnreleasedPartitions,
                _ => MemberState::Stable,
            };
            let left_static = current.member_epoch == STATIC_LEAVE_EPOCH;
            group.members.insert(
                member_id.clone(),
                Member {
                    member_id: member_id.clone(),
                    instance_id: value.instance_id,
                    rack: value.rack_id,
                    client_id: value.client_id,
                    client_host: value.client_host,
                    subscribed_names: value.subscribed_topic_names.into_iter().collect(),
                    regex,
                    topic_access: None,
                    server_assignor: value.server_assignor,
                    rebalance_timeout_ms: value.rebalance_timeout_ms,
                    state,
                    epoch: if left_static {
                        current.previous_member_epoch
                    } else {
                        current.member_epoch.min(group.target_epoch)
                    },
                    previous_epoch: current.previous_member_epoch,
                    assigned,
                    revoking,
                    session_deadline: now + session,
                    revocation_deadline: (state == MemberState::UnrevokedPartitions)
                        .then(|| now + Duration::from_millis(value.rebalance_timeout_ms.max(0) as u64)),
                    left_static,
                    classic: value.classic.map(|c| ClassicMember {
                        session_timeout_ms: c.session_timeout_ms,
                        protocols: c.protocols.into_iter().map(|(n, m)| (n, Bytes::from(m))).collect(),
                        deadline: None,
                    }),
                },
            );
        }
        for (member_id, target) in stored.targets {
            if group.members.contains_key(&member_id) {
                group.target.insert(member_id, from_stored(&target));
            }
        }
        // The records do not say which assignor computed the target: the one the members chose
        // (as the next assignment will use), with no version or time (`assigned_ms` 0).
        group.assignor = group.preferred_assignor(default_assignor);
        group
    }

    fn save_epoch(&mut self) {
        let value = GroupEpochValue { epoch: self.group_epoch, metadata_hash: self.topics_hash };
        self.unsaved.push(ConsumerRecord::GroupEpoch(Some(value)));
    }

    fn save_member(&mut self, member_id: &str) {
        let Some(m) = self.members.get(member_id) else { return };
        let value = ConsumerMemberValue {
            instance_id: m.instance_id.clone(),
            rack_id: m.rack.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            subscribed_topic_names: m.subscribed_names.iter().cloned().collect(),
            subscribed_topic_regex: m.regex.as_ref().map(|(s, _)| s.clone()),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            server_assignor: m.server_assignor.clone(),
            classic: m.classic.as_ref().map(|c| ClassicMemberMetadata {
                session_timeout_ms: c.session_timeout_ms,
                protocols: c.protocols.iter().map(|(n, m)| (n.clone(), m.to_vec())).collect(),
            }),
        };
        self.unsaved.push(ConsumerRecord::Member { member_id: member_id.to_string(), value: Some(value) });
    }

    fn save_current(&mut self, member_id: &str) {
        let Some(m) = self.members.get(member_id) else { return };
        let value = CurrentAssignmentValue {
            member_epoch: if m.left_static { STATIC_LEAVE_EPOCH } else { m.epoch },
            previous_member_epoch: if m.left_static { m.epoch } else { m.previous_epoch },
            state: match m.state {
                MemberState::Stable => 0,
                MemberState::UnrevokedPartitions => 1,
                MemberState::UnreleasedPartitions => 2,
            },
            assigned: to_stored(&m.assigned),
            revoking: to_stored(&m.revoking),
        };
        self.unsaved.push(ConsumerRecord::CurrentAssignment { member_id: member_id.to_string(), value: Some(value) });
    }

    fn forget_member(&mut self, member_id: &str) {
        // Kafka's order: current assignment, target, metadata.
        for record in [
            ConsumerRecord::CurrentAssignment { member_id: member_id.to_string(), value: None },
            ConsumerRecord::TargetMember { member_id: member_id.to_string(), value: None },
            ConsumerRecord::Member { member_id: member_id.to_string(), value: None },
        ] {
            self.unsaved.push(record);
        }
    }

    /// Stores what changed (one batch), if anything did and a store is set.
    fn flush(&mut self, store: Option<&Store>) -> Write {
        if self.unsaved.is_empty() {
            return None;
        }
        let records = std::mem::take(&mut self.unsaved);
        store.map(|store| store(&self.group_id, records))
    }

    fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.target_epoch < self.group_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.left_static && (m.epoch != self.target_epoch || m.state != MemberState::Stable))
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// Removes a member, releasing what it owns; the assignment changes with the group epoch.
    fn remove_member(&mut self, member_id: &str) {
        let Some(member) = self.members.remove(member_id) else { return };
        for tp in member.owns() {
            self.owners.remove(&tp);
        }
        if let Some(instance) = &member.instance_id {
            if self.instances.get(instance).is_some_and(|id| id == member_id) {
                self.instances.remove(instance);
            }
        }
        self.target.remove(member_id);
        self.forget_member(member_id);
        // The epoch record's MetadataHash and the signature follow the members that are left
        // (else a coordinator that restores the group, or the next look, would see the topics
        // as changed and bump once for nothing). Before any look (restored) nothing is known
        // to recompute them from: the first look compares.
        if self.metadata_index.is_some() {
            (self.subscription_signature, self.topics_hash) = self.summarize_subscriptions();
        }
        self.group_epoch += 1;
        self.save_epoch();
    }

    /// A member rejoining with epoch 0 has lost its partitions: it owns nothing now.
    fn reset_member(&mut self, member_id: &str) {
        let Some(member) = self.members.get_mut(member_id) else { return };
        for tp in flatten(&member.assigned).chain(flatten(&member.revoking)) {
            self.owners.remove(&tp);
        }
        member.assigned.clear();
        member.revoking.clear();
        member.revocation_deadline = None;
        member.state = MemberState::Stable;
        member.epoch = 0;
        member.previous_epoch = 0;
        self.save_current(member_id);
    }

    /// The topic names of the group's target (for writing classic members' assignments where
    /// no metadata image is at hand).
    fn topic_name(&self, id: &TopicId) -> Option<&str> {
        self.topic_names.get(id).map(String::as_str)
    }

    /// Whether the group goes back to the classic protocol instead of removing `leaving`
    /// (Kafka's `validateOnlineDowngradeWithFencedMember`): a consumer-protocol member leaves,
    /// only classic members remain, the policy allows it and they fit the classic
    /// `group.max.size`. With `replacing`, a classic member joins in place of `leaving`
    /// (`validateOnlineDowngradeWithReplacedMemberId`: a classic static member replacing the
    /// last consumer-protocol one), so none need remain and the joiner must fit too. If so the
    /// group is marked gone (its records are replaced when the
    /// classic group is stored) and the remaining members are returned with the partitions they
    /// hold (their targets, in each member's embedded version) at the group epoch as it is, so
    /// members at that epoch heartbeat on into the classic rebalance (a bumped generation would
    /// answer them ILLEGAL_GENERATION and make their clients drop their partitions as lost).
    fn take_downgrade(
        &mut self,
        leaving: &[String],
        config: &ConsumerGroupConfig,
        can_hand_over: bool,
        replacing: bool,
    ) -> Option<ClassicMembers> {
        let consumer_leaves = leaving.iter().any(|id| self.members.get(id).is_some_and(|m| m.classic.is_none()));
        let remaining: Vec<&Member> = self.members.values().filter(|m| !leaving.contains(&m.member_id)).collect();
        if !can_hand_over
            || !consumer_leaves
            || (remaining.is_empty() && !replacing)
            || remaining.iter().any(|m| m.classic.is_none())
            || !config.migration_policy.downgrade_enabled()
            || remaining.len() + usize::from(replacing) > config.classic_max_size
        {
            return None;
        }
        self.gone = true;
        let members = remaining
            .into_iter()
            .filter_map(|m| {
                let classic = m.classic.as_ref()?;
                let (_, version) = classic.protocol();
                let held = self.target.get(&m.member_id).unwrap_or(&m.assigned);
                let named: Vec<(&str, Vec<i32>)> = held
                    .iter()
                    .filter_map(|(id, ps)| self.topic_name(id).map(|name| (name, ps.iter().copied().collect())))
                    .collect();
                Some(ClassicMemberState {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: classic.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: classic.protocols.clone(),
                    assignment: super::embedded::encode_assignment(named, version),
                })
            })
            .collect();
        Some(ClassicMembers { generation: self.group_epoch, protocol_name: None, members })
    }

    /// Moves a static member's identity, partitions and target to a new member id (the
    /// instance came back with a new id after a temporary leave). No group epoch bump.
    fn replace_static(&mut self, old_id: &str, new_id: &str) {
        let Some(mut member) = self.members.remove(old_id) else { return };
        for tp in member.owns() {
            self.owners.insert(tp, new_id.to_string());
        }
        if let Some(target) = self.target.remove(old_id) {
            self.target.insert(new_id.to_string(), target);
        }
        if let Some(instance) = &member.instance_id {
            self.instances.insert(instance.clone(), new_id.to_string());
        }
        member.member_id = new_id.to_string();
        member.left_static = false;
        self.members.insert(new_id.to_string(), member);
        self.forget_member(old_id);
        self.save_member(new_id);
        if let Some(target) = self.target.get(new_id) {
            let value = Some(to_stored(target));
            self.unsaved.push(ConsumerRecord::TargetMember { member_id: new_id.to_string(), value });
        }
        self.save_current(new_id);
    }

    /// A static member that left temporarily (epoch -2) rejoins under the same member id: it is
    /// active again with its epoch, partitions and target. No group epoch bump.
    fn rejoin_static(&mut self, member_id: &str) {
        let Some(member) = self.members.get_mut(member_id) else { return };
        member.left_static = false;
        self.save_member(member_id);
        self.save_current(member_id);
    }

    /// Whether the members' resolved subscriptions or the subscribed topics' metadata changed
    /// since last looked at (the caller bumps the group epoch).
    fn refresh_subscription(&mut self, image: &MetadataImage, force: bool) -> bool {
        // An older image than the one last looked at (a heartbeat that took it before another
        // heartbeat's newer one got here) would move the group back, then forward again.
        if !force && self.metadata_index.is_some_and(|seen| seen >= image.applied_index) {
            return false;
        }
        self.metadata_index = Some(image.applied_index);
        self.looked_at.clear();
        for member in self.members.values() {
            for name in member.resolved(image) {
                if let Some(topic) = image.topic(&name) {
                    self.looked_at.insert(name, (topic.topic_id, topic.partitions.len()));
                }
            }
        }
        let signature;
        (signature, self.topics_hash) = self.summarize_subscriptions();
        let changed = match self.restored_topics_hash.take() {
            None => signature != self.subscription_signature,
            // Restored: the topics changed while no coordinator looked if the stored hash says
            // so (records without one: nothing to compare, the look only records).
            Some(stored) => stored != 0 && stored != self.topics_hash,
        };
        self.subscription_signature = signature;
        changed
    }

    /// The subscription signature (every member's id and resolved topics with their ids and
    /// partition counts) and the [`topics_hash`] of the subscribed topics, from the last look's
    /// topics.
    fn summarize_subscriptions(&self) -> (u64, i64) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut subscribed = BTreeMap::new();
        for member in self.members.values() {
            member.member_id.hash(&mut hasher);
            for name in member.resolved_among(self.looked_at.keys(), |name| self.looked_at.contains_key(name)) {
                let Some(&(topic_id, partitions)) = self.looked_at.get(&name) else { continue };
                (&name, topic_id, partitions).hash(&mut hasher);
                subscribed.insert(name, (topic_id, partitions));
            }
        }
        (hasher.finish(), topics_hash(&subscribed))
    }

    /// The assignor most members prefer, else the default (Kafka's `computePreferredServerAssignor`).
    fn preferred_assignor(&self, default: &str) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(name) = &member.server_assignor {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .map_or(default.to_string(), |(n, _)| n.to_string())
    }

    /// The input of the next target assignment.
    fn assign_job(&self, image: &MetadataImage, default_assignor: &str) -> AssignJob {
        let mut topics = BTreeMap::new();
        let mut topic_ids = BTreeMap::new();
        let mut members = Vec::with_capacity(self.members.len());
        for member in self.members.values() {
            let subscriptions = member.resolved(image);
            for name in &subscriptions {
                if topics.contains_key(name) {
                    continue;
                }
                let Some(topic) = image.topic(name) else { continue };
                let racks = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        p.replicas.iter().filter_map(|r| image.brokers.get(r).and_then(|b| b.rack.clone())).collect()
                    })
                    .collect();
                topics.insert(name.clone(), TopicSpec { partitions: topic.partitions.len() as u32, racks });
                topic_ids.insert(name.clone(), topic.topic_id);
            }
            let owned = self
                .target
                .get(&member.member_id)
                .map(|target| {
                    target
                        .iter()
                        .filter_map(|(id, partitions)| {
                            image.topic_by_id(id).map(|t| (t.name.clone(), partitions.clone()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            members.push(MemberSpec {
                member_id: member.member_id.clone(),
                rack: member.rack.clone(),
                subscriptions,
                owned,
            });
        }
        AssignJob {
            assignor: self.preferred_assignor(default_assignor),
            spec: AssignmentSpec { members, topics },
            group_epoch: self.group_epoch,
            topic_ids,
        }
    }

    /// Installs a computed target if it is still for the current group epoch.
    fn install(&mut self, job: &AssignJob, outcome: &AssignOutcome) -> bool {
        if job.group_epoch != self.group_epoch || job.group_epoch <= self.target_epoch {
            return false;
        }
        // Every member has a target, empty where the plan names it not (Kafka's
        // TargetAssignmentBuilder): a member the plan leaves out must lose its old target in the
        // log too, or a coordinator that loads the group would bring it back.
        let mut target: HashMap<String, Assignment> =
            self.members.keys().map(|member_id| (member_id.clone(), Assignment::new())).collect();
        for (member_id, topics) in &outcome.plan {
            let Some(assignment) = target.get_mut(member_id) else { continue };
            for (name, partitions) in topics {
                if let Some(id) = job.topic_ids.get(name) {
                    assignment.insert(*id, partitions.clone());
                }
            }
        }
        // Kafka's TargetAssignmentBuilder: a record per member whose target changed, then the
        // assignment epoch.
        for (member_id, assignment) in &target {
            let before = self.target.get(member_id);
            if before != Some(assignment) && !(before.is_none() && assignment.is_empty()) {
                let value = Some(to_stored(assignment));
                self.unsaved.push(ConsumerRecord::TargetMember { member_id: member_id.clone(), value });
            }
        }
        self.target = target;
        self.topic_names.extend(job.topic_ids.iter().map(|(name, id)| (*id, name.clone())));
        self.target_epoch = job.group_epoch;
        self.unsaved.push(ConsumerRecord::TargetEpoch(Some(self.target_epoch)));
        self.assignor = outcome.assignor.clone();
        self.assignor_version = outcome.version;
        self.assignor_error = outcome.error.clone();
        self.assigned_ms = crate::log::now_ms();
        true
    }

    /// Moves a member toward its target (Kafka's `CurrentAssignmentBuilder`): partitions the
    /// target takes away are revoked first (the member keeps its epoch until it reports them
    /// released); then it moves to the target epoch and gets each new partition nobody else owns.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(mut member) = self.members.remove(member_id) else { return };
        let changed = self.reconcile_member(&mut member, owned, now);
        self.members.insert(member_id.to_string(), member);
        if changed {
            self.save_current(member_id);
        }
    }

    /// Whether the member's epoch, state or partitions changed.
    fn reconcile_member(&mut self, member: &mut Member, owned: Option<&Assignment>, now: Instant) -> bool {
        if member.left_static {
            return false;
        }
        let mut changed = false;
        match member.state {
            MemberState::UnrevokedPartitions => {
                if !shows_released(member, owned, &member.revoking, &member.assigned) {
                    return false;
                }
                for tp in flatten(&member.revoking) {
                    self.owners.remove(&tp);
                }
                member.revoking.clear();
                member.revocation_deadline = None;
                changed = true;
            }
            MemberState::Stable if member.epoch == self.target_epoch => return false,
            MemberState::Stable | MemberState::UnreleasedPartitions => {}
        }
        let no_target = Assignment::new();
        let target = self.target.get(&member.member_id).unwrap_or(&no_target);
        let revoke = difference(&member.assigned, target);
        if !revoke.is_empty() {
            member.assigned = intersection(&member.assigned, target);
            if shows_released(member, owned, &revoke, &member.assigned) {
                // The member says it no longer holds them (a classic member rejoining after
                // its revocation): released now.
                for tp in flatten(&revoke) {
                    self.owners.remove(&tp);
                }
                changed = true;
            } else {
                member.revoking = revoke;
                member.state = MemberState::UnrevokedPartitions;
                member.revocation_deadline =
                    Some(now + Duration::from_millis(member.rebalance_timeout_ms.max(0) as u64));
                return true;
            }
        }
        let mut unreleased = false;
        for (topic, p) in flatten(&difference(target, &member.assigned)).collect::<Vec<_>>() {
            match self.owners.get(&(topic, p)) {
                None => {
                    self.owners.insert((topic, p), member.member_id.clone());
                    member.assigned.entry(topic).or_default().insert(p);
                    changed = true;
                }
                Some(owner) if *owner == member.member_id => {}
                Some(_) => unreleased = true,
            }
        }
        if member.epoch != self.target_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = self.target_epoch;
            changed = true;
        }
        let state = if unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
        changed |= member.state != state;
        member.state = state;
        changed
    }

    /// Sessions and revocations past their deadline: those members are removed.
    /// Removes them, unless the group downgrades instead (`take_downgrade`): then they are
    /// left out of the classic group and nothing else changes here.
    fn expire(
        &mut self,
        now: Instant,
        config: &ConsumerGroupConfig,
        can_hand_over: bool,
    ) -> (usize, Option<ClassicMembers>) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline <= now
                    || m.revocation_deadline.is_some_and(|d| d <= now)
                    || m.classic.as_ref().and_then(|c| c.deadline).is_some_and(|d| d <= now)
            })
            .map(|m| m.member_id.clone())
            .collect();
        if expired.is_empty() {
            return (0, None);
        }
        for id in &expired {
            tracing::info!(group = %self.group_id, member = %id, "consumer group member removed: session, revocation, join or sync timed out");
        }
        if let Some(downgrade) = self.take_downgrade(&expired, config, can_hand_over, false) {
            return (expired.len(), Some(downgrade));
        }
        for id in &expired {
            self.remove_member(id);
        }
        (expired.len(), None)
    }

    #[cfg(any(test, debug_assertions))]
    fn check_invariants(&self) {
        let mut owned: HashMap<(TopicId, i32), String> = HashMap::new();
        for member in self.members.values() {
            assert!(member.epoch <= self.target_epoch || member.left_static, "member epoch above the target epoch");
            for tp in member.owns() {
                if let Some(other) = owned.insert(tp, member.member_id.clone()) {
                    panic!("{:?}-{} owned by {other} and {}", tp.0, tp.1, member.member_id);
                }
            }
        }
        assert_eq!(owned, self.owners, "owners out of step with the members");
        assert!(self.target_epoch <= self.group_epoch);
    }

    fn view(&self) -> GroupView {
        GroupView {
            group_id: self.group_id.clone(),
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.target_epoch,
            assignor: self.assignor.clone(),
            assignor_version: self.assignor_version,
            assignor_error: self.assignor_error.clone(),
            assigned_ms: self.assigned_ms,
            members: self
                .members
                .values()
                .map(|m| MemberView {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack.clone(),
                    member_epoch: if m.left_static { STATIC_LEAVE_EPOCH } else { m.epoch },
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_names.iter().cloned().collect(),
                    subscribed_topic_regex: m.regex.as_ref().map(|(s, _)| s.clone()),
                    assignment: m.assigned.clone(),
                    target_assignment: self.target.get(&m.member_id).cloned().unwrap_or_default(),
                    state: m.state,
                    classic: m.classic.is_some(),
                })
                .collect(),
        }
    }
}

/// Every consumer-protocol group this node coordinates.
pub struct ConsumerGroups {
    groups: Arc<RwLock<HashMap<String, Arc<Mutex<ConsumerGroup>>>>>,
    config: ConsumerGroupConfig,
    sweeper_started: AtomicBool,
    /// Where groups' records go (set once by the coordinator; unit tests run without).
    store: Arc<std::sync::OnceLock<Store>>,
    /// Where downgraded groups go (set once by the coordinator; unit tests run without).
    downgrader: Arc<std::sync::OnceLock<Downgrader>>,
    /// Ids of groups not in memory whose store write ([`ConsumerGroups::while_empty`]) is
    /// running: none is created meanwhile (a heartbeat is told to retry).
    writing: Mutex<std::collections::HashSet<String>>,
}

fn lock(group: &Mutex<ConsumerGroup>) -> MutexGuard<'_, ConsumerGroup> {
    group.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ConsumerGroups {
    pub fn new(config: ConsumerGroupConfig) -> ConsumerGroups {
        ConsumerGroups {
            groups: Arc::default(),
            config,
            sweeper_started: AtomicBool::new(false),
            store: Arc::default(),
            downgrader: Arc::default(),
            writing: Mutex::default(),
        }
    }

    /// Where groups' records are stored from now on.
    pub fn set_store(&self, store: Store) {
        let _ = self.store.set(store);
    }

    /// Brings back the groups of a loaded `__consumer_offsets` partition: members keep their
    /// ids, epochs and partitions and heartbeat on; sessions start now.
    pub fn restore(&self, maps_here: &dyn Fn(&str) -> bool, stored: Vec<(String, StoredConsumerGroup)>, now: Instant) {
        let session = Duration::from_millis(self.config.session_timeout_ms.max(0) as u64);
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        let mut members = 0;
        for (group_id, value) in stored {
            if !maps_here(&group_id) {
                continue;
            }
            let group = ConsumerGroup::restore(&group_id, value, self.config.default_assignor(), session, now);
            members += group.members.len();
            if let Some(old) = groups.insert(group_id, Arc::new(Mutex::new(group))) {
                lock(&old).gone = true;
            }
        }
        tracing::debug!(members, "restored consumer-protocol groups of a loaded __consumer_offsets partition");
    }

    pub fn config(&self) -> &ConsumerGroupConfig {
        &self.config
    }

    fn get(&self, group_id: &str) -> Option<Arc<Mutex<ConsumerGroup>>> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).get(group_id).cloned()
    }

    /// The group, created if `create`; GROUP_MAX_SIZE_REACHED when `group.max.count` groups
    /// with members exist already.
    fn get_or_create(
        &self,
        group_id: &str,
        create: bool,
    ) -> Result<Option<Arc<Mutex<ConsumerGroup>>>, (ResponseError, Option<String>)> {
        if let Some(group) = self.get(group_id) {
            return Ok(Some(group));
        }
        if !create {
            return Ok(None);
        }
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        if let Some(group) = groups.get(group_id) {
            return Ok(Some(group.clone()));
        }
        if self.writing.lock().unwrap_or_else(|p| p.into_inner()).contains(group_id) {
            // Its deletion (or expiry) is being written: created after it, not before.
            return Err((ResponseError::CoordinatorLoadInProgress, None));
        }
        if groups.len() >= self.config.max_count {
            let vacant = groups.iter().find(|(_, g)| lock(g).members.is_empty()).map(|(id, _)| id.clone());
            match vacant {
                Some(id) => {
                    if let Some(g) = groups.remove(&id) {
                        lock(&g).gone = true;
                    }
                }
                None => {
                    let message = "The coordinator holds group.max.count groups".to_string();
                    return Err((ResponseError::GroupMaxSizeReached, Some(message)));
                }
            }
        }
        let group = Arc::new(Mutex::new(ConsumerGroup::new(group_id, self.config.default_assignor())));
        groups.insert(group_id.to_string(), group.clone());
        Ok(Some(group))
    }

    /// Starts the session sweep the first time a group is used.
    fn ensure_sweeper(&self) {
        let (store, downgrader, config) = (self.store.clone(), self.downgrader.clone(), self.config.clone());
        super::start_sweep(&self.sweeper_started, &self.groups, SWEEP_INTERVAL, move |groups| {
            let (store, downgrader, config) = (store.clone(), downgrader.clone(), config.clone());
            async move {
                // Removals append records: off the async workers.
                let _ = tokio::task::spawn_blocking(move || {
                    sweep(&groups, store.get(), &config, downgrader.get(), super::membership::now())
                })
                .await;
            }
        });
    }

    /// Where downgraded groups go from now on.
    pub fn set_downgrader(&self, downgrader: Downgrader) {
        let _ = self.downgrader.set(downgrader);
    }

    /// Expires sessions and revocations (the background sweep calls this; tests call it with
    /// their own clock).
    pub fn sweep(&self, now: Instant) {
        sweep(&self.groups, self.store.get(), &self.config, self.downgrader.get(), now);
    }

    /// First half of a ConsumerGroupHeartbeat: checks the request, applies the member's
    /// changes and says whether a new target assignment must be computed. A server assignor
    /// must be one of `group.consumer.assignors` or uploaded (in `image`).
    pub fn begin(&self, request: HeartbeatRequest, image: &MetadataImage, now: Instant) -> Begin {
        self.ensure_sweeper();
        if let Err((error, message)) = check_request(&request) {
            return Begin::Answer(HeartbeatAnswer::error(error, message));
        }
        if let Some(name) = &request.server_assignor {
            if !self.config.assignors.contains(name) && !image.assignors.contains_key(name) {
                let offered: Vec<&str> = self
                    .config
                    .assignors
                    .iter()
                    .map(String::as_str)
                    .chain(image.assignors.keys().map(String::as_str))
                    .collect();
                return Begin::Answer(HeartbeatAnswer::error(
                    ResponseError::UnsupportedAssignor,
                    format!("ServerAssignor {name} is not supported. Supported assignors: {}.", offered.join(", ")),
                ));
            }
        }
        let regex = match &request.subscribed_topic_regex {
            Some(pattern) if !pattern.is_empty() => match compile_regex(pattern) {
                Ok(regex) => Some(Some((pattern.clone(), regex))),
                Err(message) => {
                    return Begin::Answer(HeartbeatAnswer::error(ResponseError::InvalidRegularExpression, message))
                }
            },
            Some(_) => Some(None),
            None => None,
        };
        let group = match self.get_or_create(&request.group_id, request.member_epoch == JOIN_EPOCH) {
            Ok(Some(group)) => group,
            Ok(None) => {
                // Unknown group (never created here, or lost with a coordinator move): the
                // member rejoins with epoch 0.
                return Begin::Answer(HeartbeatAnswer::error(
                    ResponseError::UnknownMemberId,
                    format!("Member {} is not a member of group {}.", request.member_id, request.group_id),
                ));
            }
            Err((error, message)) => return Begin::Answer(HeartbeatAnswer::error(error, message)),
        };
        let mut g = lock(&group);
        if g.gone {
            return Begin::Answer(HeartbeatAnswer::error(ResponseError::CoordinatorLoadInProgress, None));
        }
        let interval = self.config.heartbeat_interval_ms;
        let session = Duration::from_millis(self.config.session_timeout_ms.max(0) as u64);
        let mut joined = false;
        let member_id = match request.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => {
                let Some(member) = g.members.get_mut(&request.member_id) else {
                    return Begin::Answer(HeartbeatAnswer::error(
                        ResponseError::UnknownMemberId,
                        format!("Member {} is not a member of group {}.", request.member_id, request.group_id),
                    ));
                };
                if request.member_epoch == STATIC_LEAVE_EPOCH && member.instance_id.is_some() {
                    if member.instance_id != request.instance_id {
                        return Begin::Answer(HeartbeatAnswer::error(
                            ResponseError::FencedInstanceId,
                            format!(
                                "Static member {} does not have instance id {:?}.",
                                request.member_id, request.instance_id
                            ),
                        ));
                    }
                    member.left_static = true;
                    member.session_deadline = now + session;
                    member.revocation_deadline = None;
                    // What it was giving up is released now (Kafka clears the partitions
                    // pending revocation on a static leave): no one waits for the static
                    // session to end for them. It keeps what it is assigned.
                    let released = std::mem::take(&mut member.revoking);
                    if member.state == MemberState::UnrevokedPartitions {
                        member.state = MemberState::Stable;
                    }
                    for tp in flatten(&released) {
                        if g.owners.get(&tp).is_some_and(|owner| *owner == request.member_id) {
                            g.owners.remove(&tp);
                        }
                    }
                    g.save_current(&request.member_id);
                    tracing::debug!(group = %request.group_id, member = %request.member_id, "static member left for now");
                    let write = g.flush(self.store.get());
                    return Begin::Left(HeartbeatAnswer::left(&request, interval), write);
                }
                let leaving = [request.member_id.clone()];
                let downgrade = g.take_downgrade(&leaving, &self.config, self.downgrader.get().is_some(), false);
                if downgrade.is_none() {
                    g.remove_member(&request.member_id);
                }
                let write = g.flush(self.store.get());
                drop(g);
                // A downgrade's classic record (it tombstones the consumer-group records, the
                // leaver's included) is what the leave waits for: the later write of the
                // partition, so the flush before it is replicated too once it is.
                let downgraded = hand_over(&self.groups, &request.group_id, &group, downgrade, self.downgrader.get());
                return Begin::Left(HeartbeatAnswer::left(&request, interval), downgraded.or(write));
            }
            JOIN_EPOCH => match self.join(&mut g, &request, now) {
                Ok((id, new)) => {
                    joined = new;
                    id
                }
                Err((error, message)) => return Begin::Answer(HeartbeatAnswer::error(error, message)),
            },
            epoch => {
                let Some(member) = g.members.get(&request.member_id).filter(|m| !m.left_static) else {
                    return Begin::Answer(HeartbeatAnswer::error(
                        ResponseError::UnknownMemberId,
                        format!("Member {} is not a member of group {}.", request.member_id, request.group_id),
                    ));
                };
                if let Some(instance) = &request.instance_id {
                    if member.instance_id.as_ref() != Some(instance) {
                        return Begin::Answer(HeartbeatAnswer::error(
                            ResponseError::FencedInstanceId,
                            format!("Static member {} with instance id {instance} is fenced.", request.member_id),
                        ));
                    }
                }
                if epoch > member.epoch {
                    return Begin::Answer(HeartbeatAnswer::error(
                        ResponseError::FencedMemberEpoch,
                        format!("The member has a greater member epoch ({epoch}) than the one known by the group coordinator ({}).", member.epoch),
                    ));
                }
                if epoch < member.epoch {
                    // The member missed the answer that moved it on: it may go on if what it
                    // owns is still its own.
                    let consistent = epoch == member.previous_epoch
                        && request.owned.as_ref().is_none_or(|owned| is_subset(owned, &member.assigned));
                    if !consistent {
                        return Begin::Answer(HeartbeatAnswer::error(
                            ResponseError::FencedMemberEpoch,
                            format!("The member has a smaller member epoch ({epoch}) than the one known by the group coordinator ({}).", member.epoch),
                        ));
                    }
                }
                request.member_id.clone()
            }
        };
        let member = g.members.get_mut(&member_id).expect("joined or validated above");
        let assigned_before = member.assigned.clone();
        member.session_deadline = now + session;
        let mut changed = false;
        let mut stored_fields_changed = false;
        if request.rebalance_timeout_ms >= 0 {
            stored_fields_changed |= member.rebalance_timeout_ms != request.rebalance_timeout_ms;
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if !request.client_id.is_empty() {
            stored_fields_changed |= member.client_id != request.client_id;
            member.client_id = request.client_id.clone();
        }
        stored_fields_changed |= member.client_host != request.client_host;
        member.client_host = request.client_host.clone();
        if let Some(rack) = &request.rack_id {
            let rack = Some(rack.clone()).filter(|r| !r.is_empty());
            changed |= member.rack != rack;
            member.rack = rack;
        }
        if let Some(names) = &request.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            changed |= member.subscribed_names != names;
            member.subscribed_names = names;
        }
        if let Some(regex) = regex {
            changed |= member.regex.as_ref().map(|(s, _)| s) != regex.as_ref().map(|(s, _)| s);
            member.regex = regex;
        }
        member.topic_access = request.topic_access.clone();
        if let Some(name) = &request.server_assignor {
            let name = Some(name.clone()).filter(|n| !n.is_empty());
            changed |= member.server_assignor != name;
            member.server_assignor = name;
        }
        if changed || joined || stored_fields_changed {
            g.save_member(&member_id);
        }
        // One bump per heartbeat, whatever changed.
        let bump = changed || joined;
        if g.refresh_subscription(image, bump) || bump {
            g.group_epoch += 1;
            g.save_epoch();
        }
        let job = (g.target_epoch < g.group_epoch).then(|| g.assign_job(image, self.config.default_assignor()));
        // Kafka's `isFullRequest`: a member that resends everything (after a lost answer, say)
        // gets its assignment back, whether it subscribes by names or by a regex (KIP-848).
        let full_request = request.member_epoch == JOIN_EPOCH
            || (request.rebalance_timeout_ms != -1
                && (request.subscribed_topic_names.is_some() || request.subscribed_topic_regex.is_some())
                && request.owned.is_some());
        drop(g);
        let joined = request.member_epoch == JOIN_EPOCH;
        Begin::Continue(Pending { group, member_id, full_request, joined, assigned_before, owned: request.owned, job })
    }

    /// A join (epoch 0): a new member, a static member's return, or a member that lost its
    /// partitions rejoining. Returns the member id and whether it is a new member (the caller
    /// bumps the group epoch).
    fn join(
        &self,
        g: &mut ConsumerGroup,
        request: &HeartbeatRequest,
        now: Instant,
    ) -> Result<(String, bool), (ResponseError, Option<String>)> {
        let member_id = if request.member_id.is_empty() {
            // v0: the coordinator names the member.
            uuid::Uuid::new_v4().simple().to_string()
        } else {
            request.member_id.clone()
        };
        if let Some(instance) = &request.instance_id {
            if let Some(existing) = g.instances.get(instance).cloned() {
                if existing == member_id && g.members.get(&existing).is_some_and(|m| m.left_static) {
                    // The same process back after its static leave (Kafka 4 clients keep their
                    // member id for life): it replaces itself, keeping its partitions, as a new
                    // member id would (Kafka replaces any member at epoch -2).
                    g.rejoin_static(&member_id);
                    return Ok((member_id, false));
                }
                if existing != member_id {
                    if g.members.contains_key(&member_id) {
                        // Replacing would overwrite another live member (and strand what it owns).
                        return Err((
                            ResponseError::InvalidRequest,
                            Some(format!("Member id {member_id} belongs to another member of the group.")),
                        ));
                    }
                    if g.members.get(&existing).is_some_and(|m| m.left_static) {
                        g.replace_static(&existing, &member_id);
                        return Ok((member_id, false));
                    }
                    return Err((
                        ResponseError::UnreleasedInstanceId,
                        Some(format!("Static member {existing} with instance id {instance} is still in use.")),
                    ));
                }
            }
        }
        if g.members.contains_key(&member_id) {
            g.reset_member(&member_id);
            return Ok((member_id, false));
        }
        if g.members.len() >= self.config.max_size {
            return Err((
                ResponseError::GroupMaxSizeReached,
                Some(format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    self.config.max_size
                )),
            ));
        }
        if let Some(instance) = &request.instance_id {
            g.instances.insert(instance.clone(), member_id.clone());
        }
        let member = Member::new(
            &member_id,
            request.instance_id.clone(),
            (&request.client_id, &request.client_host),
            request.rebalance_timeout_ms,
            now,
            None,
        );
        g.members.insert(member_id.clone(), member);
        Ok((member_id, true))
    }

    /// Second half of a heartbeat: installs the computed target (if its group epoch is still
    /// current), reconciles the member and answers it.
    pub fn finish(&self, pending: Pending, outcome: Option<AssignOutcome>, now: Instant) -> (HeartbeatAnswer, Write) {
        let (mut g, present) = self.settle(&pending, outcome.as_ref(), now);
        let write = g.flush(self.store.get());
        if g.gone {
            return (HeartbeatAnswer::error(ResponseError::CoordinatorLoadInProgress, None), write);
        }
        if !present {
            let answer = HeartbeatAnswer::error(
                ResponseError::UnknownMemberId,
                format!("Member {} left group {} meanwhile.", pending.member_id, g.group_id),
            );
            return (answer, write);
        }
        let member = &g.members[&pending.member_id];
        // A member comes back sooner while it has just joined, has partitions to give up or to
        // wait for, is behind the group epoch, or the group's target changed less than one
        // configured interval ago: members usually join in bursts (a deployment starts them
        // together), and each step of a reconciliation would otherwise wait one full interval
        // (KIP-848 clients take the interval from every answer). Once the group has been
        // quiet for an interval, members get the configured one.
        let full = Duration::from_millis(self.config.heartbeat_interval_ms.max(0) as u64);
        let settling = pending.joined
            || member.state != MemberState::Stable
            || member.epoch < g.group_epoch
            || g.target_installed_at.is_some_and(|at| now < at + full);
        let heartbeat_interval_ms = if settling {
            self.config.reconcile_heartbeat_interval_ms.min(self.config.heartbeat_interval_ms)
        } else {
            self.config.heartbeat_interval_ms
        };
        let answer = HeartbeatAnswer {
            error: None,
            member_id: member.member_id.clone(),
            member_epoch: member.epoch,
            heartbeat_interval_ms,
            assignment: (pending.full_request || member.assigned != pending.assigned_before)
                .then(|| member.assigned.clone()),
        };
        (answer, write)
    }

    /// Installs the computed target (if its group epoch is still current) and reconciles the
    /// member, if it is still there (false otherwise). The caller flushes.
    fn settle<'a>(
        &self,
        pending: &'a Pending,
        outcome: Option<&AssignOutcome>,
        now: Instant,
    ) -> (MutexGuard<'a, ConsumerGroup>, bool) {
        let mut g = lock(&pending.group);
        if g.gone {
            // Dropped while the assignor ran (a reload, a resignation, a deletion): the group
            // that replaced it (if any) is another object; nothing of this one may reach the log.
            g.unsaved.clear();
            return (g, false);
        }
        if let (Some(job), Some(outcome)) = (&pending.job, outcome) {
            if g.install(job, outcome) {
                g.target_installed_at = Some(now);
                tracing::debug!(group = %g.group_id, epoch = g.target_epoch, assignor = %outcome.assignor, "new target assignment");
            }
        }
        if g.members.get(&pending.member_id).is_none_or(|m| m.left_static) {
            return (g, false);
        }
        g.reconcile(&pending.member_id, pending.owned.as_ref(), now);
        #[cfg(any(test, debug_assertions))]
        g.check_invariants();
        (g, true)
    }

    /// Runs a job with a built-in assignor, falling back to the default one (with the reason)
    /// when the chosen one is unknown or its plan does not pass `assignor::validate`.
    pub fn run_builtin(&self, job: &AssignJob) -> AssignOutcome {
        let plan = assignor::builtin(&job.assignor)
            .ok_or_else(|| format!("assignor {} is not available", job.assignor))
            .map(|assign| assign(&job.spec));
        self.outcome_or_default(job, plan, None)
    }

    /// `plan` if it is a valid result of `job.assignor` (at `version` when uploaded), else the
    /// default assignor's plan with the error recorded (a broken assignor never stalls a group).
    pub fn outcome_or_default(
        &self,
        job: &AssignJob,
        plan: Result<Plan, String>,
        version: Option<u64>,
    ) -> AssignOutcome {
        match plan.and_then(|plan| assignor::validate(&job.spec, &plan).map(|()| plan)) {
            Ok(plan) => AssignOutcome { assignor: job.assignor.clone(), version, plan, error: None },
            Err(error) => {
                let default = self.config.default_assignor();
                tracing::warn!(assignor = %job.assignor, %error, "assignor failed; using the default {default}");
                let plan = assignor::builtin(default).map_or_else(|| assignor::uniform(&job.spec), |f| f(&job.spec));
                let error = Some(format!("{}: {error}", job.assignor));
                AssignOutcome { assignor: default.to_string(), version: None, plan, error }
            }
        }
    }

    /// ConsumerGroupDescribe.
    pub fn describe(&self, group_id: &str) -> Option<GroupView> {
        self.get(group_id).map(|g| lock(&g).view())
    }

    /// Every group with its state (ListGroups).
    pub fn list(&self) -> Vec<(String, ConsumerGroupState)> {
        let groups: Vec<(String, Arc<Mutex<ConsumerGroup>>)> =
            self.groups.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        groups.into_iter().map(|(id, g)| (id, lock(&g).state())).collect()
    }

    /// Whether `group_id` is a consumer-protocol group here, and whether it has members.
    pub fn members_of(&self, group_id: &str) -> Option<usize> {
        self.get(group_id).map(|g| lock(&g).members.len())
    }

    /// Runs `then` while `group_id` has no consumer-protocol members (holding the group's lock,
    /// so no member joins meanwhile); false without running it otherwise. `then` answers `None`
    /// if it did not run its write, or whether the write deleted the group: a deleted group is
    /// marked gone under its lock (a racing heartbeat is told to retry) and then dropped, so
    /// the next heartbeat of its id starts a new group. For a group not in memory (only in the
    /// store, or nowhere), its id is held against creation while `then` runs: a heartbeat that
    /// would create the group meanwhile is told to retry, instead of having its records
    /// tombstoned behind it.
    pub fn while_empty(&self, group_id: &str, then: &mut dyn FnMut() -> Option<bool>) -> bool {
        let Some(group) = self.get_or_hold(group_id) else {
            let outcome = then();
            self.writing.lock().unwrap_or_else(|p| p.into_inner()).remove(group_id);
            return outcome.is_some();
        };
        let mut g = lock(&group);
        if !g.members.is_empty() {
            return false;
        }
        let outcome = then();
        let deleted = outcome == Some(true);
        g.gone |= deleted;
        drop(g);
        if deleted {
            // Lock order: the map, then a group; the group's lock is released by now.
            let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
            if groups.get(group_id).is_some_and(|current| Arc::ptr_eq(current, &group)) {
                groups.remove(group_id);
            }
        }
        outcome.is_some()
    }

    /// The group, or `None` with its id held in `writing` against creation (the caller
    /// releases it). Lock order: the map, then `writing`, as `get_or_create` takes them.
    fn get_or_hold(&self, group_id: &str) -> Option<Arc<Mutex<ConsumerGroup>>> {
        if let Some(group) = self.get(group_id) {
            return Some(group);
        }
        let groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        if let Some(group) = groups.get(group_id) {
            return Some(group.clone());
        }
        self.writing.lock().unwrap_or_else(|p| p.into_inner()).insert(group_id.to_string());
        None
    }

    /// Drops a group without members (DeleteGroups, or a classic join converting it). False if
    /// it has members.
    pub fn remove_if_empty(&self, group_id: &str) -> bool {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        let Some(group) = groups.get(group_id).cloned() else { return true };
        let mut g = lock(&group);
        if !g.members.is_empty() {
            return false;
        }
        g.gone = true;
        groups.remove(group_id);
        true
    }

    /// Drops every group `lost` says this node no longer coordinates.
    pub fn resign(&self, lost: &dyn Fn(&str) -> bool) -> usize {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<String> = groups.keys().filter(|id| lost(id)).cloned().collect();
        for id in &gone {
            if let Some(g) = groups.remove(id) {
                lock(&g).gone = true;
            }
        }
        gone.len()
    }

    /// The OffsetCommit / TxnOffsetCommit / OffsetFetch member check of a consumer-protocol
    /// group (Kafka's `ConsumerGroup.validateOffsetCommit` / `validateOffsetFetch`). `None`
    /// when `group_id` is not a consumer-protocol group here. A commit without a member (epoch
    /// -1 and no member id) is allowed while the group has no members.
    pub fn validate_member(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
        stale: ResponseError,
    ) -> Option<Result<(), ResponseError>> {
        self.validate_committer(group_id, member_id, member_epoch, stale, false)
    }

    /// `validate_member` for a commit: with `old_offset_commit` (OffsetCommit below v9) a
    /// consumer-protocol member is UNSUPPORTED_VERSION, while a classic member inside the group
    /// commits with its generation at any version. A classic member's stale epoch is
    /// ILLEGAL_GENERATION, as its client expects.
    pub fn validate_committer(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
        stale: ResponseError,
        old_offset_commit: bool,
    ) -> Option<Result<(), ResponseError>> {
        let group = self.get(group_id)?;
        let g = lock(&group);
        if member_epoch < 0 && member_id.is_empty() {
            return Some(if g.members.is_empty() { Ok(()) } else { Err(ResponseError::UnknownMemberId) });
        }
        let Some(member) = g.members.get(member_id) else { return Some(Err(ResponseError::UnknownMemberId)) };
        let classic = member.classic.is_some();
        let stale = if classic { ResponseError::IllegalGeneration } else { stale };
        Some(if member.epoch != member_epoch {
            Err(stale)
        } else if old_offset_commit && !classic {
            Err(ResponseError::UnsupportedVersion)
        } else {
            Ok(())
        })
    }
}

type GroupMap = RwLock<HashMap<String, Arc<Mutex<ConsumerGroup>>>>;

fn sweep(
    groups: &GroupMap,
    store: Option<&Store>,
    config: &ConsumerGroupConfig,
    downgrader: Option<&Downgrader>,
    now: Instant,
) {
    let all: Vec<Arc<Mutex<ConsumerGroup>>> =
        groups.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
    for group in all {
        let mut g = lock(&group);
        if g.gone {
            // Dropped since the snapshot above: its members are another object's now.
            continue;
        }
        let (expired, downgrade) = g.expire(now, config, downgrader.is_some());
        if expired > 0 {
            if let Some(Err(error)) = g.flush(store) {
                tracing::warn!(group = %g.group_id, %error, "could not store the removal of expired members");
            }
            let group_id = g.group_id.clone();
            drop(g);
            if let Some(Err(error)) = hand_over(groups, &group_id, &group, downgrade, downgrader) {
                tracing::warn!(group = %group_id, %error, "could not store the downgraded group");
            }
        }
    }
}

/// A stable hash (FNV-1a, 64 bits) of the subscribed topics' names, ids and partition counts,
/// in name order: the same on every node and release, as it is stored. Never 0 (0 stands for
/// "not known" in the record).
fn topics_hash(subscribed: &BTreeMap<String, (TopicId, usize)>) -> i64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET_BASIS;
    let mut eat = |bytes: &[u8]| {
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(PRIME);
        }
    };
    for (name, (id, partitions)) in subscribed {
        eat(&(name.len() as u32).to_be_bytes());
        eat(name.as_bytes());
        eat(id);
        eat(&(*partitions as u32).to_be_bytes());
    }
    match hash as i64 {
        0 => 1,
        hash => hash,
    }
}

/// Ends a downgraded group here (if the map still holds this very group) and hands its
/// classic members to the downgrader. Called without the group's lock (the map's lock is taken
/// first elsewhere).
fn hand_over(
    groups: &GroupMap,
    group_id: &str,
    group: &Arc<Mutex<ConsumerGroup>>,
    downgrade: Option<ClassicMembers>,
    downgrader: Option<&Downgrader>,
) -> Write {
    let (Some(members), Some(downgrader)) = (downgrade, downgrader) else { return None };
    {
        let mut map = groups.write().unwrap_or_else(|p| p.into_inner());
        if map.get(group_id).is_some_and(|g| Arc::ptr_eq(g, group)) {
            map.remove(group_id);
        }
    }
    tracing::info!(
        group = group_id,
        members = members.members.len(),
        "downgraded a consumer group to the classic protocol: only classic members remain"
    );
    downgrader(group_id, members)
}

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
fn check_request(request: &HeartbeatRequest) -> Result<(), (ResponseError, Option<String>)> {
    let invalid = |message: &str| Err((ResponseError::InvalidRequest, Some(message.to_string())));
    if request.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if request.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if request.rack_id.as_ref().is_some_and(|r| r.len() > 1024) {
        return invalid("RackId is too long.");
    }
    if request.version >= 1 && request.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if request.subscribed_topic_names.as_ref().is_some_and(|n| n.len() > SUBSCRIBED_TOPICS_MAX) {
        return invalid("SubscribedTopicNames has too many topics.");
    }
    if request.subscribed_topic_regex.as_ref().is_some_and(|r| r.len() > REGEX_MAX_BYTES) {
        return invalid("SubscribedTopicRegex is too long.");
    }
    match request.member_epoch {
        JOIN_EPOCH => {
            if request.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if request.owned.as_ref().is_some_and(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if request.subscribed_topic_names.is_none() && request.subscribed_topic_regex.is_none() {
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.");
            }
        }
        STATIC_LEAVE_EPOCH if request.instance_id.is_none() => {
            return invalid("InstanceId can't be null when MemberEpoch is -2.");
        }
        epoch if epoch < STATIC_LEAVE_EPOCH => return invalid("MemberEpoch is invalid."),
        _ => {}
    }
    if request.member_epoch != JOIN_EPOCH && request.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    Ok(())
}

/// A subscription pattern, matched against whole topic names (Kafka uses RE2/J, whose syntax
/// the `regex` crate shares; both run in linear time).
/// A subscription's regular expression, matching whole topic names (Kafka's `matches()`). The
/// pattern must compile on its own before it is anchored: `a)|(b` would otherwise close the
/// anchoring group and match any name starting with `a`.
fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    let build = |pattern: &str| regex::RegexBuilder::new(pattern).size_limit(1 << 20).build();
    let invalid = |e: regex::Error| format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}");
    build(pattern).map_err(invalid)?;
    build(&format!("^(?:{pattern})$")).map_err(invalid)
}

fn to_stored(assignment: &Assignment) -> StoredPartitions {
    assignment.iter().map(|(topic, partitions)| (*topic, partitions.iter().copied().collect())).collect()
}

fn from_stored(stored: &StoredPartitions) -> Assignment {
    let mut assignment = Assignment::new();
    for (topic, partitions) in stored {
        assignment.entry(*topic).or_default().extend(partitions.iter().copied());
    }
    assignment
}

fn flatten(assignment: &Assignment) -> impl Iterator<Item = (TopicId, i32)> + '_ {
    assignment.iter().flat_map(|(topic, partitions)| partitions.iter().map(move |p| (*topic, *p)))
}

/// Whether the member's report of what it owns shows it released `revoked`, keeping `kept`.
/// A report that lacks them shows it (Kafka's `ownsRevokedPartitions`), with one exception
/// where Runnel waits for more: a consumer-protocol member that keeps partitions and reports
/// owning none of them. librdkafka, until it has taken its first assignment, reports owning
/// nothing in every heartbeat, and then takes the assignment it received; read as released,
/// such a report hands partitions to another member that this one is about to take (two
/// members consuming them at once). The member shows the release in a later report (its
/// acknowledgement of what it keeps). A classic member's report is taken as it is (an eager
/// member revokes everything before it rejoins).
fn shows_released(member: &Member, owned: Option<&Assignment>, revoked: &Assignment, kept: &Assignment) -> bool {
    let Some(owned) = owned else { return false };
    if intersects(owned, revoked) {
        return false;
    }
    member.classic.is_some() || kept.is_empty() || intersects(owned, kept)
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(topic, partitions)| b.get(topic).is_some_and(|other| !partitions.is_disjoint(other)))
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter().all(|(topic, partitions)| {
        partitions.is_empty() || b.get(topic).is_some_and(|other| partitions.is_subset(other))
    })
}

fn difference(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (topic, partitions) in a {
        let rest: BTreeSet<i32> = match b.get(topic) {
            Some(other) => partitions.difference(other).copied().collect(),
            None => partitions.clone(),
        };
        if !rest.is_empty() {
            out.insert(*topic, rest);
        }
    }
    out
}

fn intersection(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (topic, partitions) in a {
        if let Some(other) = b.get(topic) {
            let both: BTreeSet<i32> = partitions.intersection(other).copied().collect();
            if !both.is_empty() {
                out.insert(*topic, both);
            }
        }
    }
    out
}

#[path = "consumer_classic.rs"]
mod classic;
pub use classic::{ClassicBegin, ClassicJoined, ClassicSynced};

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
