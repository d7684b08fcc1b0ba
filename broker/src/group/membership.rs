//! Group membership and rebalances (classic protocol): the group state machine (Empty,
//! PreparingRebalance, CompletingRebalance, Stable, Dead), generations, protocol selection,
//! KIP-394 member ids, static membership (KIP-345), session timeouts and heartbeats.
//!
//! The state lives under one std `Mutex` that is never held across an `.await`: a JoinGroup or
//! SyncGroup that must wait is parked as a `oneshot::Sender` inside its member and the handler
//! awaits the receiver after the lock is released. Time is passed in (`now`) so the state
//! machine can be driven deterministically in tests; the handlers use [`now`], which follows
//! tokio's clock. A background sweep (spawned lazily on first use, ending when the membership
//! is dropped) expires sessions, drops stale pending member ids and ends rebalances whose
//! rebalance timeout has passed.
//!
//! Invariants: a member has at most one parked join and one parked sync; every parked request
//! is answered exactly once (a dropped sender is answered by the handler as a retriable error);
//! a group is in Empty exactly when it has no members. This module does no I/O and knows no
//! wire format beyond Kafka's error codes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::schema::{GroupMetadataValue, MemberMetadata};

/// Kafka's `group.min.session.timeout.ms` default.
pub const GROUP_MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
/// Kafka's `group.max.session.timeout.ms` default.
pub const GROUP_MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;
/// `group.max.size`: Kafka's default is `Int.MaxValue`, but an unbounded client-driven map is
/// a bug. 1,000 members is above any consumer group seen in practice (one member per
/// partition of a large topic) while bounding what one group id can pin in memory.
pub const GROUP_MAX_SIZE: usize = 1_000;
/// `group.max.count` (Runnel's own; Kafka has no such bound): groups one node holds in memory.
/// Groups without members are evicted to make room (their durable state stays in
/// `__consumer_offsets`); a join that needs a new group beyond it gets GROUP_MAX_SIZE_REACHED.
pub const GROUP_MAX_COUNT: usize = 10_000;
/// Kafka's `group.initial.rebalance.delay.ms` default.
pub const GROUP_INITIAL_REBALANCE_DELAY_MS: u64 = 3_000;
/// Bound on the protocols a member may list and on the bytes of their metadata.
pub const MEMBER_PROTOCOLS_MAX: usize = 64;
pub const MEMBER_METADATA_MAX_BYTES: usize = 1 << 20;
/// Kafka's timer tick: the least wait of a first rebalance (see `GroupConfig::initial_join_tick`).
pub const INITIAL_JOIN_TICK: Duration = Duration::from_millis(1);
/// How often the background sweep runs.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// The clock of the handlers: tokio's (so paused-time tests control it) as a std `Instant`.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Bounds applied to joining members.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// `group.max.size`: members (and member ids handed out with MEMBER_ID_REQUIRED) per group.
    pub max_size: usize,
    /// `group.max.count`: groups in memory.
    pub max_count: usize,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an Empty group waits
    /// for more members (extended by each newcomer, bounded by the rebalance timeout).
    pub initial_rebalance_delay_ms: u64,
    /// The least that wait is, even with a delay of 0: Kafka ends it from its timer (1 ms ticks),
    /// after the requests already queued, so with 0 members starting together still share the
    /// first generation instead of the first getting every partition alone. Zero in the state
    /// machine's own tests, whose joins complete at once.
    pub initial_join_tick: Duration,
}

impl GroupConfig {
    /// The wait of a first rebalance out of Empty (and of each extension).
    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.initial_rebalance_delay_ms).max(self.initial_join_tick)
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: GROUP_MIN_SESSION_TIMEOUT_MS,
            max_session_timeout_ms: GROUP_MAX_SESSION_TIMEOUT_MS,
            max_size: GROUP_MAX_SIZE,
            max_count: GROUP_MAX_COUNT,
            initial_rebalance_delay_ms: GROUP_INITIAL_REBALANCE_DELAY_MS,
            initial_join_tick: INITIAL_JOIN_TICK,
        }
    }
}

/// Kafka's group states, with Kafka's names (as ListGroups and DescribeGroups report them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// An answer now, or one that arrives when the rebalance gets there.
pub enum Reply<T> {
    Now(T),
    Parked(oneshot::Receiver<T>),
}

/// A JoinGroup, already decoded.
#[derive(Debug, Clone, Default)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// KIP-394 (JoinGroup v4+): a new dynamic member first gets MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
    /// JoinGroup v9+: a static leader rejoining a stable group gets the members and is told
    /// not to assign.
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only the leader gets the members (and their metadata for the selected protocol).
    pub members: Vec<JoinedMember>,
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(error: ResponseError, member_id: &str) -> JoinResult {
        JoinResult {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup, already decoded.
#[derive(Debug, Clone, Default)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// (member id, assignment); only the leader's are used.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ResponseError) -> SyncResult {
        SyncResult { error: Some(error), protocol_type: None, protocol_name: None, assignment: Bytes::new() }
    }
}

/// A group's classic members as they cross between the two protocols (KIP-848's online
/// upgrade and downgrade): what each sent in its JoinGroup and the assignment it holds.
#[derive(Debug, Clone, Default)]
pub struct ClassicMembers {
    pub generation: i32,
    /// The protocol the classic group selected (`None`: it never completed a join).
    pub protocol_name: Option<String>,
    pub members: Vec<ClassicMemberState>,
}

#[derive(Debug, Clone, Default)]
pub struct ClassicMemberState {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// (name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// The embedded ConsumerProtocolAssignment the member holds (empty: none yet).
    pub assignment: Bytes,
}

/// One member of a LeaveGroup.
#[derive(Debug, Clone)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    /// The selected protocol while Stable, "" otherwise (as Kafka).
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    /// Order of joining: the leader is the earliest member.
    joined_seq: u64,
    session_deadline: Instant,
    join_waiter: Option<oneshot::Sender<JoinResult>>,
    sync_waiter: Option<oneshot::Sender<SyncResult>>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn awaiting(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }
}

struct Group {
    state: GroupState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until the member joins with them.
    pending: HashMap<String, Instant>,
    /// group.instance.id → current member id.
    static_members: HashMap<String, String>,
    rebalance_deadline: Option<Instant>,
    /// `group.initial.rebalance.delay.ms` of this node.
    initial_rebalance_delay: Duration,
    /// While the first rebalance out of Empty waits for more members (Kafka's
    /// `InitialDelayedJoin`).
    initial_join: Option<InitialJoin>,
    /// A task waits for `initial_join`'s deadline (see `Membership::end_initial_join_on_time`).
    initial_join_timer: bool,
    /// The generation whose leader's assignment is being stored: the members are answered (and
    /// the group is Stable) only once `__consumer_offsets` has it ([`Membership::complete_sync`]).
    storing: Option<i32>,
}

/// Kafka's `InitialDelayedJoin`: the join phase of a rebalance that started from Empty ends at
/// `deadline`, or later by another delay if members joined meanwhile, until the rebalance
/// timeout is used up.
struct InitialJoin {
    deadline: Instant,
    /// Rebalance timeout not used yet.
    remaining: Duration,
    /// A member joined since `deadline` was set.
    newcomers: bool,
}

impl Group {
    fn new() -> Group {
        Group {
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            rebalance_deadline: None,
            initial_rebalance_delay: Duration::ZERO,
            initial_join: None,
            initial_join_timer: false,
            storing: None,
        }
    }

    /// A group as `__consumer_offsets` stored it: Stable with its members, or Empty.
    fn from_stored(
        value: &GroupMetadataValue,
        seq: &mut u64,
        now: Instant,
        initial_rebalance_delay: Duration,
    ) -> Group {
        let mut group = Group::new();
        group.initial_rebalance_delay = initial_rebalance_delay;
        group.generation_id = value.generation;
        group.protocol_type = Some(value.protocol_type.clone()).filter(|t| !t.is_empty());
        group.protocol_name = value.protocol.clone();
        // The leader keeps the earliest join order, so it stays leader of the next rebalance.
        let mut stored: Vec<&MemberMetadata> = value.members.iter().collect();
        stored.sort_by_key(|m| value.leader.as_deref() != Some(m.member_id.as_str()));
        let protocol = value.protocol.clone().unwrap_or_default();
        for m in stored {
            let member = ClassicMemberState {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: vec![(protocol.clone(), Bytes::from(m.subscription.clone()))],
                assignment: Bytes::from(m.assignment.clone()),
            };
            group.admit(member, seq, now);
        }
        if group.members.is_empty() {
            group.state = GroupState::Empty;
            group.protocol_name = None;
        } else {
            group.state = GroupState::Stable;
            group.leader_id = value.leader.clone().filter(|l| group.members.contains_key(l));
            if group.leader_id.is_none() {
                group.leader_id = group.members.values().min_by_key(|m| m.joined_seq).map(|m| m.member_id.clone());
            }
        }
        group
    }

    /// Kafka's GroupMetadata value of the group as it is.
    fn stored_value(&self, current_state_timestamp: i64) -> GroupMetadataValue {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp,
            members: self
                .members
                .values()
                .map(|m| MemberMetadata {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: millis(m.rebalance_timeout),
                    session_timeout_ms: millis(m.session_timeout),
                    subscription: m.metadata_for(&protocol).to_vec(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
        }
    }

    /// Adds a member as a restore or a downgrade hands it over (no join of its own): the next
    /// in join order, its session starting now.
    fn admit(&mut self, m: ClassicMemberState, seq: &mut u64, now: Instant) {
        *seq += 1;
        let session_timeout = session_timeout_ms(m.session_timeout_ms);
        if let Some(instance) = &m.group_instance_id {
            self.static_members.insert(instance.clone(), m.member_id.clone());
        }
        let member = Member {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id,
            client_id: m.client_id,
            client_host: m.client_host,
            session_timeout,
            rebalance_timeout: session_timeout_ms(m.rebalance_timeout_ms),
            protocols: m.protocols,
            assignment: m.assignment,
            joined_seq: *seq,
            session_deadline: now + session_timeout,
            join_waiter: None,
            sync_waiter: None,
        };
        self.members.insert(m.member_id, member);
    }

    /// This node stops coordinating the group: every parked request learns NOT_COORDINATOR.
    fn resign(mut self) {
        for member in self.members.values_mut() {
            if let Some(tx) = member.join_waiter.take() {
                let _ = tx.send(JoinResult::error(ResponseError::NotCoordinator, &member.member_id));
            }
            if let Some(tx) = member.sync_waiter.take() {
                let _ = tx.send(SyncResult::error(ResponseError::NotCoordinator));
            }
        }
    }

    /// Kafka's `supportsProtocols`.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| self.members.values().all(|m| m.supports(name)))
    }

    /// Kafka's `isStaticMemberFenced`: the instance id is registered to another member id.
    fn is_fenced(&self, member_id: &str, group_instance_id: Option<&str>) -> bool {
        match group_instance_id.and_then(|instance| self.static_members.get(instance)) {
            Some(current) => current != member_id,
            None => false,
        }
    }

    /// Kafka's `selectProtocol`: among the protocols every member supports, the one most
    /// members prefer (each votes for its first supported candidate); ties go to the
    /// leader's preference order.
    fn select_protocol(&self) -> Option<String> {
        let first =
            self.leader_id.as_ref().and_then(|id| self.members.get(id)).or_else(|| self.members.values().next())?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member.protocols.iter().find(|(name, _)| candidates.contains(&name.as_str())) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for candidate in candidates {
            let count = votes.get(candidate).copied().unwrap_or(0);
            if best.is_none_or(|(_, b)| count > b) {
                best = Some((candidate, count));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or(Duration::ZERO)
    }

    fn current_result(&self, member_id: &str, with_members: bool) -> JoinResult {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = if with_members {
            self.members
                .values()
                .map(|m| JoinedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    metadata: m.metadata_for(&protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    /// Starts (or keeps) a rebalance: parked syncs learn of it, the deadline is set.
    fn prepare_rebalance(&mut self, now: Instant) {
        self.storing = None;
        if self.state == GroupState::CompletingRebalance {
            for member in self.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(tx) = member.sync_waiter.take() {
                    let _ = tx.send(SyncResult::error(ResponseError::RebalanceInProgress));
                }
            }
        }
        if self.state != GroupState::PreparingRebalance {
            self.rebalance_deadline = Some(now + self.max_rebalance_timeout());
        }
        if self.state == GroupState::Empty && !self.initial_rebalance_delay.is_zero() {
            // Kafka delays the first rebalance of an Empty group so that members starting
            // together land in one generation: the first one must not get every partition only
            // to have them revoked when the next one joins a moment later.
            let timeout = self.max_rebalance_timeout();
            let delay = self.initial_rebalance_delay.min(timeout);
            self.initial_join = Some(InitialJoin {
                deadline: now + delay,
                remaining: timeout.saturating_sub(self.initial_rebalance_delay),
                newcomers: false,
            });
        }
        self.state = GroupState::PreparingRebalance;
    }

    /// Ends the join phase once every known member has rejoined (and no member id handed out
    /// with MEMBER_ID_REQUIRED is still outstanding) or the rebalance timeout has passed.
    fn maybe_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(initial) = &mut self.initial_join {
            if now < initial.deadline {
                return;
            }
            if initial.newcomers && !initial.remaining.is_zero() {
                let delay = self.initial_rebalance_delay.min(initial.remaining);
                initial.deadline = now + delay;
                initial.remaining = initial.remaining.saturating_sub(self.initial_rebalance_delay);
                initial.newcomers = false;
                return;
            }
            self.initial_join = None;
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some()) && self.pending.is_empty();
        let timed_out = self.rebalance_deadline.is_some_and(|d| now >= d);
        if !all_joined && !timed_out {
            return;
        }
        // Kafka's `completeClassicGroupJoin`: dynamic members that did not rejoin are removed;
        // static ones stay members (their session timeout decides), as a restarting static
        // member must not lose its place or move partitions.
        let stragglers: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in stragglers {
            self.remove_member(&id, ResponseError::UnknownMemberId);
        }
        if timed_out {
            self.pending.clear();
        }
        if !self.members.is_empty() && self.members.values().all(|m| m.join_waiter.is_none()) {
            // Only static members that have not rejoined: wait another rebalance timeout for
            // them (or for their sessions to end), as Kafka does.
            self.rebalance_deadline = Some(now + self.max_rebalance_timeout());
            return;
        }
        self.generation_id += 1;
        self.rebalance_deadline = None;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            return;
        }
        self.state = GroupState::CompletingRebalance;
        // The leader must be a member that rejoined (Kafka's `maybeElectNewJoinedLeader`).
        if self.leader_id.as_ref().and_then(|id| self.members.get(id)).is_none_or(|m| m.join_waiter.is_none()) {
            self.leader_id = self
                .members
                .values()
                .filter(|m| m.join_waiter.is_some())
                .min_by_key(|m| m.joined_seq)
                .map(|m| m.member_id.clone());
        }
        self.protocol_name = self.select_protocol();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = self.leader_id.as_deref() == Some(id.as_str());
            let result = self.current_result(&id, is_leader);
            if let Some(member) = self.members.get_mut(&id) {
                member.session_deadline = now + member.session_timeout;
                if let Some(tx) = member.join_waiter.take() {
                    let _ = tx.send(result);
                }
            }
        }
    }

    /// Removes a member; its parked requests get `error`; the leader moves to the earliest
    /// remaining member.
    fn remove_member(&mut self, member_id: &str, error: ResponseError) {
        let Some(mut member) = self.members.remove(member_id) else { return };
        if let Some(tx) = member.join_waiter.take() {
            let _ = tx.send(JoinResult::error(error, member_id));
        }
        if let Some(tx) = member.sync_waiter.take() {
            let _ = tx.send(SyncResult::error(error));
        }
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.values().min_by_key(|m| m.joined_seq).map(|m| m.member_id.clone());
        }
    }

    /// Holds nothing a client is waiting on: no members, no member id handed out.
    fn is_vacant(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty() && matches!(self.state, GroupState::Empty | GroupState::Dead)
    }

    /// What a membership change does to the group (Kafka's `removeMemberAndUpdateGroup`).
    fn after_departure(&mut self, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now);
                self.maybe_complete_join(now);
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }
}

struct Groups {
    groups: HashMap<String, Group>,
    next_seq: u64,
}

impl Groups {
    /// Drops one group without members or pending member ids to make room (its committed
    /// offsets and stored metadata stay in `__consumer_offsets`). False if there is none.
    fn evict_one_empty(&mut self) -> bool {
        let victim = self.groups.iter().find(|(_, g)| g.is_vacant()).map(|(id, _)| id.clone());
        match victim {
            Some(id) => {
                tracing::debug!(group = %id, "evicting a group without members (group.max.count)");
                self.groups.remove(&id);
                true
            }
            None => false,
        }
    }
}

/// The membership state of every group this node coordinates.
pub struct Membership {
    inner: Arc<Mutex<Groups>>,
    config: GroupConfig,
    sweeper_started: AtomicBool,
}

impl Membership {
    pub fn new() -> Membership {
        Membership::with_config(GroupConfig::default())
    }

    pub fn with_config(config: GroupConfig) -> Membership {
        Membership {
            inner: Arc::new(Mutex::new(Groups { groups: HashMap::new(), next_seq: 0 })),
            config,
            sweeper_started: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Groups> {
        // A panic while holding the lock is a bug elsewhere; the state is still usable.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the sweep the first time a group is used.
    fn ensure_sweeper(&self) {
        super::start_sweep(&self.sweeper_started, &self.inner, SWEEP_INTERVAL, |inner| async move {
            let mut groups = inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            sweep_groups(&mut groups, now());
        });
    }

    /// Expires sessions and pending member ids and ends timed-out rebalances (the background
    /// sweep calls this; tests call it with their own clock).
    pub fn sweep(&self, now: Instant) {
        sweep_groups(&mut self.lock(), now);
    }

    /// The checks of a JoinGroup before the group is looked at (whichever type it is): the
    /// session timeout within `group.min/max.session.timeout.ms`, bounded protocols.
    pub fn check_join(&self, request: &JoinRequest) -> Result<(), ResponseError> {
        if request.session_timeout_ms < self.config.min_session_timeout_ms
            || request.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        if request.protocols.len() > MEMBER_PROTOCOLS_MAX
            || request.protocols.iter().map(|(_, m)| m.len()).sum::<usize>() > MEMBER_METADATA_MAX_BYTES
        {
            return Err(ResponseError::InvalidRequest);
        }
        Ok(())
    }

    /// JoinGroup.
    pub fn join(&self, request: JoinRequest, now: Instant) -> Reply<JoinResult> {
        let group_id = request.group_id.clone();
        let reply = self.join_group(request, now);
        self.end_initial_join_on_time(&group_id);
        reply
    }

    /// Ends `group_id`'s first rebalance at its deadline (and each extension's) from a task,
    /// rather than at the next sweep up to 100 ms later: one task per waiting group. Without a
    /// runtime (the state machine's tests) the sweep alone ends it.
    fn end_initial_join_on_time(&self, group_id: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        {
            let mut groups = self.lock();
            match groups.groups.get_mut(group_id) {
                Some(group) if group.initial_join.is_some() && !group.initial_join_timer => {
                    group.initial_join_timer = true
                }
                _ => return,
            }
        }
        let (inner, group_id) = (self.inner.clone(), group_id.to_string());
        runtime.spawn(async move {
            loop {
                let deadline = {
                    let mut groups = inner.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(group) = groups.groups.get_mut(&group_id) else { return };
                    group.maybe_complete_join(now());
                    match &group.initial_join {
                        Some(initial) => initial.deadline,
                        None => {
                            group.initial_join_timer = false;
                            return;
                        }
                    }
                };
                tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
            }
        });
    }

    fn join_group(&self, request: JoinRequest, now: Instant) -> Reply<JoinResult> {
        self.ensure_sweeper();
        let error = |e| Reply::Now(JoinResult::error(e, &request.member_id));
        if let Err(e) = self.check_join(&request) {
            return error(e);
        }
        let mut guard = self.lock();
        let groups = &mut *guard;
        if !groups.groups.contains_key(&request.group_id) {
            // A group exists only once a join succeeds: a refused join leaves no state behind.
            if !request.member_id.is_empty() {
                return error(ResponseError::UnknownMemberId);
            }
            if !Group::new().supports_protocols(&request.protocol_type, &request.protocols) {
                return error(ResponseError::InconsistentGroupProtocol);
            }
            if groups.groups.len() >= self.config.max_count && !groups.evict_one_empty() {
                tracing::warn!(
                    group = %request.group_id,
                    max_count = self.config.max_count,
                    "group.max.count reached: every group in memory has members; refusing a new group"
                );
                return error(ResponseError::GroupMaxSizeReached);
            }
            groups.groups.insert(request.group_id.clone(), Group::new());
        }
        let Some(group) = groups.groups.get_mut(&request.group_id) else {
            return error(ResponseError::CoordinatorNotAvailable);
        };
        group.initial_rebalance_delay = self.config.initial_delay();
        if group.state == GroupState::Dead {
            return error(ResponseError::CoordinatorNotAvailable);
        }
        if !group.supports_protocols(&request.protocol_type, &request.protocols) {
            return error(ResponseError::InconsistentGroupProtocol);
        }
        let seq = &mut groups.next_seq;
        // Members plus member ids handed out and not yet used: both are client-driven state.
        let full = group.members.len() + group.pending.len() >= self.config.max_size;
        if request.member_id.is_empty() {
            if let Some(instance) = request.group_instance_id.clone() {
                if let Some(old_id) = group.static_members.get(&instance).cloned() {
                    return rejoin_static(group, old_id, request, now);
                }
            } else if request.require_known_member_id {
                if full {
                    return error(ResponseError::GroupMaxSizeReached);
                }
                let member_id = new_member_id(&request.client_id);
                group.pending.insert(member_id.clone(), now + session_timeout_ms(request.session_timeout_ms));
                return Reply::Now(JoinResult::error(ResponseError::MemberIdRequired, &member_id));
            }
            if full {
                return error(ResponseError::GroupMaxSizeReached);
            }
            let member_id = new_member_id(&request.client_id);
            return add_member(group, member_id, request, seq, now);
        }
        if group.is_fenced(&request.member_id, request.group_instance_id.as_deref()) {
            return error(ResponseError::FencedInstanceId);
        }
        if group.pending.remove(&request.member_id).is_some() {
            if group.members.len() >= self.config.max_size {
                return error(ResponseError::GroupMaxSizeReached);
            }
            let member_id = request.member_id.clone();
            return add_member(group, member_id, request, seq, now);
        }
        if !group.members.contains_key(&request.member_id) {
            return error(ResponseError::UnknownMemberId);
        }
        rejoin_existing(group, request, now)
    }

    /// SyncGroup.
    pub fn sync(&self, request: SyncRequest, now: Instant) -> Reply<SyncResult> {
        self.ensure_sweeper();
        let mut groups = self.lock();
        let Some(group) = groups.groups.get_mut(&request.group_id) else {
            return Reply::Now(SyncResult::error(ResponseError::UnknownMemberId));
        };
        if group.state == GroupState::Dead {
            return Reply::Now(SyncResult::error(ResponseError::CoordinatorNotAvailable));
        }
        if group.is_fenced(&request.member_id, request.group_instance_id.as_deref()) {
            return Reply::Now(SyncResult::error(ResponseError::FencedInstanceId));
        }
        if !group.members.contains_key(&request.member_id) {
            return Reply::Now(SyncResult::error(ResponseError::UnknownMemberId));
        }
        if request.generation_id != group.generation_id {
            return Reply::Now(SyncResult::error(ResponseError::IllegalGeneration));
        }
        let type_mismatch = request.protocol_type.as_ref().is_some_and(|t| group.protocol_type.as_ref() != Some(t));
        let name_mismatch = request.protocol_name.as_ref().is_some_and(|n| group.protocol_name.as_ref() != Some(n));
        if type_mismatch || name_mismatch {
            return Reply::Now(SyncResult::error(ResponseError::InconsistentGroupProtocol));
        }
        let ok = |assignment: Bytes, group: &Group| SyncResult {
            error: None,
            protocol_type: group.protocol_type.clone(),
            protocol_name: group.protocol_name.clone(),
            assignment,
        };
        match group.state {
            GroupState::Empty | GroupState::Dead => Reply::Now(SyncResult::error(ResponseError::UnknownMemberId)),
            GroupState::PreparingRebalance => Reply::Now(SyncResult::error(ResponseError::RebalanceInProgress)),
            GroupState::Stable => {
                let Some(member) = group.members.get_mut(&request.member_id) else {
                    return Reply::Now(SyncResult::error(ResponseError::UnknownMemberId));
                };
                member.session_deadline = now + member.session_timeout;
                let assignment = member.assignment.clone();
                Reply::Now(ok(assignment, group))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(member) = group.members.get_mut(&request.member_id) {
                    member.session_deadline = now + member.session_timeout;
                    member.sync_waiter = Some(tx);
                }
                // The leader's assignment is taken, but nobody learns it (and the group stays
                // CompletingRebalance) until it is stored: the caller stores
                // `assignment_to_store` and calls `complete_sync`, as Kafka answers SyncGroup
                // once the group's record is written.
                if group.leader_id.as_deref() == Some(request.member_id.as_str()) && group.storing.is_none() {
                    let assignments: HashMap<&str, &Bytes> =
                        request.assignments.iter().map(|(id, a)| (id.as_str(), a)).collect();
                    for member in group.members.values_mut() {
                        member.assignment =
                            assignments.get(member.member_id.as_str()).map(|a| (*a).clone()).unwrap_or_default();
                    }
                    group.storing = Some(group.generation_id);
                }
                Reply::Parked(rx)
            }
        }
    }

    /// The group's metadata with the leader's assignment of `generation`, while it waits to be
    /// stored (see [`Membership::sync`]); `None` once it is answered or a rebalance replaced it.
    /// Only the leader's sync gets it (the one that handed the assignment in).
    pub fn assignment_to_store(&self, group_id: &str, leader: &str, generation: i32) -> Option<GroupMetadataValue> {
        let groups = self.lock();
        let group = groups.groups.get(group_id)?;
        let waiting = group.state == GroupState::CompletingRebalance
            && group.storing == Some(generation)
            && group.leader_id.as_deref() == Some(leader);
        waiting.then(|| group.stored_value(crate::log::now_ms()))
    }

    /// Ends the sync of `generation` once its assignment's store is done (Kafka's
    /// `classicGroupSyncGroup` completion): stored, the group is Stable and every parked member
    /// gets its assignment; not stored, every parked member gets `error` and the group
    /// rebalances (Kafka's `resetAndPropagateAssignmentWithError`). Nothing happens if a rebalance
    /// or a later generation came first.
    pub fn complete_sync(&self, group_id: &str, generation: i32, stored: Result<(), ResponseError>, now: Instant) {
        let mut groups = self.lock();
        let Some(group) = groups.groups.get_mut(group_id) else { return };
        if group.state != GroupState::CompletingRebalance || group.storing != Some(generation) {
            return;
        }
        group.storing = None;
        match stored {
            Ok(()) => {
                group.state = GroupState::Stable;
                let protocol_type = group.protocol_type.clone();
                let protocol_name = group.protocol_name.clone();
                for member in group.members.values_mut() {
                    if let Some(tx) = member.sync_waiter.take() {
                        let _ = tx.send(SyncResult {
                            error: None,
                            protocol_type: protocol_type.clone(),
                            protocol_name: protocol_name.clone(),
                            assignment: member.assignment.clone(),
                        });
                    }
                }
            }
            Err(error) => {
                for member in group.members.values_mut() {
                    member.assignment = Bytes::new();
                    if let Some(tx) = member.sync_waiter.take() {
                        let _ = tx.send(SyncResult::error(error));
                    }
                }
                group.prepare_rebalance(now);
                group.maybe_complete_join(now);
            }
        }
    }

    /// Heartbeat: keeps the session alive; REBALANCE_IN_PROGRESS tells the member to rejoin.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.ensure_sweeper();
        let mut groups = self.lock();
        let group = groups.groups.get_mut(group_id).ok_or(ResponseError::UnknownMemberId)?;
        match group.state {
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            _ => {}
        }
        if group.is_fenced(member_id, group_instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        let member = group.members.get_mut(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        member.session_deadline = now + member.session_timeout;
        match group.state {
            GroupState::PreparingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// LeaveGroup: one result per leaving member, in request order.
    pub fn leave(&self, group_id: &str, leaving: &[LeavingMember], now: Instant) -> Vec<Result<(), ResponseError>> {
        let mut groups = self.lock();
        let Some(group) = groups.groups.get_mut(group_id) else {
            return leaving.iter().map(|_| Err(ResponseError::UnknownMemberId)).collect();
        };
        if group.state == GroupState::Dead {
            return leaving.iter().map(|_| Err(ResponseError::CoordinatorNotAvailable)).collect();
        }
        let mut departed = false;
        let results = leaving
            .iter()
            .map(|leaver| {
                let member_id = match &leaver.group_instance_id {
                    Some(instance) => {
                        let current =
                            group.static_members.get(instance).cloned().ok_or(ResponseError::UnknownMemberId)?;
                        if !leaver.member_id.is_empty() && leaver.member_id != current {
                            return Err(ResponseError::FencedInstanceId);
                        }
                        current
                    }
                    None => leaver.member_id.clone(),
                };
                if group.pending.remove(&member_id).is_some() {
                    departed = true;
                    return Ok(());
                }
                if !group.members.contains_key(&member_id) {
                    return Err(ResponseError::UnknownMemberId);
                }
                group.remove_member(&member_id, ResponseError::UnknownMemberId);
                departed = true;
                Ok(())
            })
            .collect();
        if departed {
            group.after_departure(now);
        }
        results
    }

    /// The checks OffsetCommit applies to a group-managed commit (Kafka's
    /// `handleCommitOffsets`/`doCommitOffsets`). Kafka accepts commits from current members
    /// while PreparingRebalance (eager clients commit in their revoke callback, before
    /// rejoining) and refuses them with REBALANCE_IN_PROGRESS while CompletingRebalance.
    pub fn validate_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        let groups = self.lock();
        let Some(group) = groups.groups.get(group_id) else {
            // Not group-managed (assign() consumers) when the generation is -1.
            return if generation_id < 0 { Ok(()) } else { Err(ResponseError::IllegalGeneration) };
        };
        if group.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if group.is_fenced(member_id, group_instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        if generation_id < 0 && group.state == GroupState::Empty {
            return Ok(());
        }
        if !group.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        match group.state {
            GroupState::CompletingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Every group with its protocol type and state (ListGroups).
    pub fn list(&self) -> Vec<GroupListing> {
        let groups = self.lock();
        let mut listed: Vec<GroupListing> = groups
            .groups
            .iter()
            .filter(|(_, g)| g.state != GroupState::Dead)
            .map(|(id, g)| GroupListing {
                group_id: id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state,
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listed
    }

    /// DescribeGroups; `None` for a group this node does not know.
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.lock();
        let group = groups.groups.get(group_id)?;
        let stable = group.state == GroupState::Stable;
        let protocol = if stable { group.protocol_name.clone().unwrap_or_default() } else { String::new() };
        let members = group
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable { m.metadata_for(&protocol) } else { Bytes::new() },
                assignment: if stable { m.assignment.clone() } else { Bytes::new() },
            })
            .collect();
        Some(GroupDescription {
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol,
            members,
        })
    }

    /// Drops an Empty classic group from memory (a consumer-protocol member converting it);
    /// GROUP_ID_NOT_FOUND for one this node does not know, NON_EMPTY_GROUP for one with
    /// members. DeleteGroups goes through `GroupCoordinator::delete_group` instead (it also
    /// writes the tombstones under the lock).
    pub fn delete(&self, group_id: &str) -> Result<(), ResponseError> {
        let mut groups = self.lock();
        let group = groups.groups.get_mut(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        match group.state {
            GroupState::Empty => {
                groups.groups.remove(group_id);
                Ok(())
            }
            GroupState::Dead => Err(ResponseError::GroupIdNotFound),
            _ => Err(ResponseError::NonEmptyGroup),
        }
    }

    /// Takes a classic group with members out of this membership for an online upgrade to the
    /// consumer protocol (Kafka's `validateOnlineUpgrade` + `convertToConsumerGroup`): `Ok(None)`
    /// when there is no such group (none, Empty or Dead: the caller converts as before); `Err`
    /// with the reason when it cannot be upgraded (it stays). Parked joins and syncs are answered
    /// REBALANCE_IN_PROGRESS: their members rejoin the consumer group.
    pub fn take_for_upgrade(&self, group_id: &str, max_size: usize) -> Result<Option<ClassicMembers>, String> {
        let mut groups = self.lock();
        let Some(group) = groups.groups.get(group_id) else { return Ok(None) };
        if matches!(group.state, GroupState::Empty | GroupState::Dead) {
            return Ok(None);
        }
        if group.protocol_type.as_deref() != Some(super::embedded::PROTOCOL_TYPE) {
            return Err(format!(
                "group {group_id} uses protocol type {:?}, not the consumer protocol",
                group.protocol_type.as_deref().unwrap_or("")
            ));
        }
        if group.members.len() > max_size {
            return Err(format!(
                "group {group_id} has {} members, above group.consumer.max.size {max_size}",
                group.members.len()
            ));
        }
        let Some(mut group) = groups.groups.remove(group_id) else { return Ok(None) };
        let taken = ClassicMembers {
            generation: group.generation_id,
            protocol_name: group.protocol_name.clone(),
            members: group
                .members
                .values()
                .map(|m| ClassicMemberState {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: millis(m.session_timeout),
                    rebalance_timeout_ms: millis(m.rebalance_timeout),
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        for member in group.members.values_mut() {
            if let Some(tx) = member.join_waiter.take() {
                let _ = tx.send(JoinResult::error(ResponseError::RebalanceInProgress, &member.member_id));
            }
            if let Some(tx) = member.sync_waiter.take() {
                let _ = tx.send(SyncResult::error(ResponseError::RebalanceInProgress));
            }
        }
        Ok(Some(taken))
    }

    /// Takes over the classic members of a downgraded consumer group (Kafka's
    /// `convertToClassicGroup`): a Stable group at `generation` with their assignments, which
    /// starts a rebalance at once so every member rejoins through the classic protocol.
    /// Replaces whatever this membership held under that id. Returns the group's metadata as
    /// converted (Stable at `generation`), for `__consumer_offsets`.
    pub fn adopt(&self, group_id: &str, adopted: ClassicMembers, now: Instant) -> GroupMetadataValue {
        let mut guard = self.lock();
        let groups = &mut *guard;
        let mut group = Group::new();
        group.initial_rebalance_delay = self.config.initial_delay();
        group.generation_id = adopted.generation;
        group.protocol_type = Some(super::embedded::PROTOCOL_TYPE.to_string());
        for m in adopted.members {
            group.admit(m, &mut groups.next_seq, now);
        }
        if group.members.is_empty() {
            group.state = GroupState::Empty;
        } else {
            group.state = GroupState::Stable;
            group.leader_id = group.members.values().min_by_key(|m| m.joined_seq).map(|m| m.member_id.clone());
            group.protocol_name = adopted.protocol_name.or_else(|| group.select_protocol());
        }
        let value = group.stored_value(crate::log::now_ms());
        if !group.members.is_empty() {
            group.prepare_rebalance(now);
        }
        if let Some(old) = groups.groups.insert(group_id.to_string(), group) {
            old.resign();
        }
        value
    }

    /// What `__consumer_offsets` stores for a Stable group, or an Empty one that had a
    /// generation (Kafka's GroupMetadata value: no protocol, leader or members then); `None` in
    /// any other state.
    pub fn metadata_value(&self, group_id: &str, current_state_timestamp: i64) -> Option<GroupMetadataValue> {
        let groups = self.lock();
        let group = groups.groups.get(group_id)?;
        let stored = match group.state {
            GroupState::Stable => true,
            GroupState::Empty => group.generation_id > 0,
            _ => false,
        };
        if !stored {
            return None;
        }
        Some(group.stored_value(current_state_timestamp))
    }

    /// Takes over the groups of one `__consumer_offsets` partition as they were stored (Kafka's
    /// `loadGroupsForPartition`): members with their ids, generation, leader, selected protocol
    /// and assignments, so they go on heartbeating to the new coordinator without a rebalance.
    /// Every member's session starts now. Whatever this node held for groups of that partition
    /// (an earlier leadership) is replaced: the log is the truth. Respects `group.max.count`
    /// (evicting vacant groups first; a group beyond it stays only in the log).
    pub fn restore(&self, maps_here: &dyn Fn(&str) -> bool, stored: Vec<(String, GroupMetadataValue)>, now: Instant) {
        let mut guard = self.lock();
        let groups = &mut *guard;
        let stale: Vec<String> = groups.groups.keys().filter(|id| maps_here(id)).cloned().collect();
        for id in stale {
            if let Some(group) = groups.groups.remove(&id) {
                group.resign();
            }
        }
        let delay = self.config.initial_delay();
        let mut restored = 0usize;
        for (id, value) in stored {
            if groups.groups.len() >= self.config.max_count && !groups.evict_one_empty() {
                tracing::warn!(group = %id, max_count = self.config.max_count, "group.max.count reached: not restoring group");
                continue;
            }
            let group = Group::from_stored(&value, &mut groups.next_seq, now, delay);
            restored += group.members.len();
            groups.groups.insert(id, group);
        }
        tracing::debug!(members = restored, "restored groups of a loaded __consumer_offsets partition");
    }

    /// Drops every group `lost` says this node no longer coordinates (its `__consumer_offsets`
    /// partition is led elsewhere now, Kafka's `removeGroupsForPartition`): parked joins and
    /// syncs are answered NOT_COORDINATOR, so their members find the new coordinator.
    pub fn resign(&self, lost: &dyn Fn(&str) -> bool) -> usize {
        let mut groups = self.lock();
        let gone: Vec<String> = groups.groups.keys().filter(|id| lost(id)).cloned().collect();
        for id in &gone {
            if let Some(group) = groups.groups.remove(id) {
                group.resign();
            }
        }
        gone.len()
    }

    /// How many groups this node holds in memory.
    pub fn group_count(&self) -> usize {
        self.lock().groups.len()
    }

    /// The group's state, if known (for tests and the offsets store).
    pub fn state(&self, group_id: &str) -> Option<GroupState> {
        self.lock().groups.get(group_id).map(|g| g.state)
    }
}

/// Offsets expiry runs its tombstone write under the membership lock, after checking that the
/// group still has no members: a join waits for the write instead of racing it.
impl super::offsets::EmptyGroupGate for Membership {
    fn run_if_empty(&self, group_id: &str, write: &mut dyn FnMut() -> bool) -> bool {
        let mut groups = self.lock();
        let empty = groups.groups.get(group_id).is_none_or(|g| g.members.is_empty() && g.pending.is_empty());
        if empty && write() {
            // Its metadata is tombstoned: the group is Dead (Kafka drops it from the cache).
            groups.groups.remove(group_id);
        }
        drop(groups);
        empty
    }
}

impl Default for Membership {
    fn default() -> Self {
        Membership::new()
    }
}

/// A timeout as the protocol's int32 milliseconds.
fn millis(timeout: Duration) -> i32 {
    timeout.as_millis().min(i32::MAX as u128) as i32
}

/// Kafka's member ids: `<client_id>-<uuid>`.
fn new_member_id(client_id: &str) -> String {
    format!("{client_id}-{}", uuid::Uuid::new_v4())
}

fn sweep_groups(groups: &mut Groups, now: Instant) {
    // A group that never completed a join and has nobody left (pending member ids that never
    // came back, joins that failed) holds nothing worth keeping.
    groups.groups.retain(|_, g| !(g.is_vacant() && g.generation_id == 0));
    for group in groups.groups.values_mut() {
        group.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = group
            .members
            .values()
            .filter(|m| !m.awaiting() && m.session_deadline <= now)
            .map(|m| m.member_id.clone())
            .collect();
        let departed = !expired.is_empty();
        for id in expired {
            tracing::debug!(member = %id, "member session expired");
            group.remove_member(&id, ResponseError::UnknownMemberId);
        }
        if departed {
            group.after_departure(now);
        } else {
            group.maybe_complete_join(now);
        }
    }
}

fn add_member(
    group: &mut Group,
    member_id: String,
    request: JoinRequest,
    seq: &mut u64,
    now: Instant,
) -> Reply<JoinResult> {
    let (tx, rx) = oneshot::channel();
    *seq += 1;
    if group.members.is_empty() {
        group.protocol_type = Some(request.protocol_type.clone());
    }
    if let Some(instance) = &request.group_instance_id {
        group.static_members.insert(instance.clone(), member_id.clone());
    }
    if group.leader_id.is_none() {
        group.leader_id = Some(member_id.clone());
    }
    let member = Member {
        member_id: member_id.clone(),
        group_instance_id: request.group_instance_id.clone(),
        client_id: request.client_id,
        client_host: request.client_host,
        session_timeout: session_timeout_ms(request.session_timeout_ms),
        rebalance_timeout: session_timeout_ms(request.rebalance_timeout_ms),
        protocols: request.protocols,
        assignment: Bytes::new(),
        joined_seq: *seq,
        session_deadline: now + session_timeout_ms(request.session_timeout_ms),
        join_waiter: Some(tx),
        sync_waiter: None,
    };
    group.members.insert(member_id, member);
    if let Some(initial) = &mut group.initial_join {
        initial.newcomers = true;
    }
    group.prepare_rebalance(now);
    group.maybe_complete_join(now);
    Reply::Parked(rx)
}

fn session_timeout_ms(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// Parks `member_id`'s join with updated protocols and makes the group rebalance.
fn park_and_rebalance(group: &mut Group, member_id: &str, request: JoinRequest, now: Instant) -> Reply<JoinResult> {
    let (tx, rx) = oneshot::channel();
    if let Some(member) = group.members.get_mut(member_id) {
        member.protocols = request.protocols;
        member.session_timeout = session_timeout_ms(request.session_timeout_ms);
        member.rebalance_timeout = session_timeout_ms(request.rebalance_timeout_ms);
        member.session_deadline = now + member.session_timeout;
        // A repeated join replaces the earlier one; the earlier handler sees a closed channel.
        member.join_waiter = Some(tx);
    }
    group.prepare_rebalance(now);
    group.maybe_complete_join(now);
    Reply::Parked(rx)
}

fn rejoin_existing(group: &mut Group, request: JoinRequest, now: Instant) -> Reply<JoinResult> {
    let member_id = request.member_id.clone();
    let Some(member) = group.members.get_mut(&member_id) else {
        return Reply::Now(JoinResult::error(ResponseError::UnknownMemberId, &member_id));
    };
    let unchanged = member.protocols == request.protocols;
    let is_leader = group.leader_id.as_deref() == Some(member_id.as_str());
    match group.state {
        GroupState::CompletingRebalance if unchanged => {
            // The member lost our response: send it again.
            member.session_deadline = now + member.session_timeout;
            Reply::Now(group.current_result(&member_id, is_leader))
        }
        GroupState::Stable if unchanged && !is_leader => {
            member.session_deadline = now + member.session_timeout;
            Reply::Now(group.current_result(&member_id, false))
        }
        GroupState::Empty | GroupState::Dead => {
            Reply::Now(JoinResult::error(ResponseError::UnknownMemberId, &member_id))
        }
        _ => park_and_rebalance(group, &member_id, request, now),
    }
}

/// A static member rejoining with an empty member id (Kafka's
/// `updateStaticMemberThenRebalanceOrCompleteJoin`): it gets a new id, the old one is fenced, its
/// protocols are updated, and in a Stable group whose selected protocol would not change it gets
/// its previous assignment back without a rebalance. A client without KIP-814 (JoinGroup < v9)
/// is answered with the leader as it was before the replacement, so a restarted leader acts as
/// a follower and syncs; naming it leader with no members would make it assign (or rejoin) and
/// revoke the other members' partitions, which Kafka never does here.
fn rejoin_static(group: &mut Group, old_id: String, request: JoinRequest, now: Instant) -> Reply<JoinResult> {
    let Some(mut member) = group.members.remove(&old_id) else {
        return Reply::Now(JoinResult::error(ResponseError::UnknownMemberId, &request.member_id));
    };
    let new_id = new_member_id(&request.client_id);
    if let Some(tx) = member.join_waiter.take() {
        let _ = tx.send(JoinResult::error(ResponseError::FencedInstanceId, &old_id));
    }
    if let Some(tx) = member.sync_waiter.take() {
        let _ = tx.send(SyncResult::error(ResponseError::FencedInstanceId));
    }
    let leader_before = group.leader_id.clone();
    member.member_id = new_id.clone();
    member.protocols = request.protocols.clone();
    member.client_id = request.client_id.clone();
    member.client_host = request.client_host.clone();
    member.session_timeout = session_timeout_ms(request.session_timeout_ms);
    member.rebalance_timeout = session_timeout_ms(request.rebalance_timeout_ms);
    member.session_deadline = now + member.session_timeout;
    group.members.insert(new_id.clone(), member);
    if let Some(instance) = &request.group_instance_id {
        group.static_members.insert(instance.clone(), new_id.clone());
    }
    if group.leader_id.as_deref() == Some(old_id.as_str()) {
        group.leader_id = Some(new_id.clone());
    }
    if group.state == GroupState::Stable && group.select_protocol() == group.protocol_name {
        let is_leader = group.leader_id.as_deref() == Some(new_id.as_str());
        let skip = is_leader && request.supports_skip_assignment;
        let mut result = group.current_result(&new_id, skip);
        result.skip_assignment = skip;
        if !request.supports_skip_assignment {
            result.leader = leader_before.unwrap_or_default();
        }
        return Reply::Now(result);
    }
    park_and_rebalance(group, &new_id, request, now)
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
