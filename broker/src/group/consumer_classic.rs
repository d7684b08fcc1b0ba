//! Classic members inside a consumer-protocol group (KIP-848's migration path, Kafka's
//! `classicGroupJoinToConsumerGroup` and friends): a JoinGroup, SyncGroup, Heartbeat or
//! LeaveGroup for a consumer group with members is served here, so a group can hold consumers
//! of both protocols while it is rolled from one to the other.
//!
//! A classic member is a consumer-group member whose subscription, rack and owned partitions
//! come from its JoinGroup's embedded subscription. Its generation is its member epoch. It
//! reconciles only when it (re)joins: the JoinGroup computes its next assignment from what it
//! says it owns (a cooperative member rejoins without the partitions it gave up); SyncGroup
//! hands it its assigned partitions; a Heartbeat answers REBALANCE_IN_PROGRESS whenever it
//! must rejoin (the group epoch moved, it has partitions to give up, or partitions it waits for
//! are free now). Sessions follow the member's own session timeout; a member that is told to
//! rejoin (or has joined) and does not come back (or sync) within its rebalance timeout is
//! removed (Kafka's join and sync timeouts).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::{
    hand_over, lock, AssignOutcome, Assignment, ClassicMember, ConsumerGroup, ConsumerGroups, Member, MemberState,
    Pending, Write,
};
use crate::controller::MetadataImage;
use crate::group::embedded;
use crate::group::membership::{ClassicMembers, JoinRequest, LeavingMember};

/// What a classic member's JoinGroup is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicJoined {
    pub member_id: String,
    /// The member epoch.
    pub generation: i32,
    /// The first protocol the member listed.
    pub protocol_name: String,
}

/// `classic_join`'s result.
pub enum ClassicBegin {
    /// Not a consumer group with members here: the classic membership takes the join.
    NotHere,
    /// Refused: (error, the member id to answer with, why).
    Refused(ResponseError, String, String),
    Continue(Pending),
}

/// What a classic member's SyncGroup is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSynced {
    pub protocol_name: String,
    /// An embedded ConsumerProtocolAssignment in the member's subscription version.
    pub assignment: Bytes,
}

impl ConsumerGroups {
    /// First half of a classic member's JoinGroup to a consumer group: checks it, applies the
    /// member's subscription (new members are added, the group epoch moves when a subscription
    /// changes) and says whether a target assignment must be computed; `finish_classic_join`
    /// reconciles and answers.
    pub fn classic_join(&self, request: &JoinRequest, image: &MetadataImage, now: Instant) -> ClassicBegin {
        let Some(group) = self.get(&request.group_id) else { return ClassicBegin::NotHere };
        let mut g = lock(&group);
        if g.gone || g.members.is_empty() {
            return ClassicBegin::NotHere;
        }
        let refuse = |error: ResponseError, member_id: &str, why: String| {
            ClassicBegin::Refused(error, member_id.to_string(), why)
        };
        if !supports_classic_protocols(&g, &request.protocol_type, &request.protocols) {
            return refuse(
                ResponseError::InconsistentGroupProtocol,
                &request.member_id,
                format!("Member {}'s protocols are not supported.", request.member_id),
            );
        }
        let unknown = request.member_id.is_empty();
        let mut member_id = if unknown { uuid::Uuid::new_v4().to_string() } else { request.member_id.clone() };
        let known = g.members.contains_key(&member_id)
            || request.group_instance_id.as_ref().is_some_and(|i| g.instances.contains_key(i));
        if !known && g.members.len() >= self.config.max_size {
            return refuse(
                ResponseError::GroupMaxSizeReached,
                &request.member_id,
                format!("The consumer group has reached its maximum capacity of {} members.", self.config.max_size),
            );
        }
        if unknown && request.group_instance_id.is_none() && request.require_known_member_id {
            return refuse(ResponseError::MemberIdRequired, &member_id, String::new());
        }
        let subscription = match request.protocols.first().map(|(_, m)| embedded::decode_subscription(m)) {
            Some(Ok(subscription)) => subscription,
            Some(Err(why)) => return refuse(ResponseError::InconsistentGroupProtocol, &request.member_id, why),
            None => return refuse(ResponseError::InconsistentGroupProtocol, &request.member_id, String::new()),
        };
        // Who the member is: a static member coming back under a new member id takes over its
        // instance's identity and partitions (the old id is fenced); a known id rejoins.
        let mut replaced = false;
        if let Some(instance) = &request.group_instance_id {
            if let Some(existing) = g.instances.get(instance).cloned() {
                if unknown {
                    // A classic member replacing the last consumer-protocol member takes the
                    // group back to the classic protocol (Kafka's
                    // `validateOnlineDowngradeWithReplacedMemberId`); the classic membership
                    // then answers this join, as a new static member of the classic group.
                    let leaving = [existing.clone()];
                    let can_hand_over = self.downgrader.get().is_some();
                    if let Some(downgrade) = g.take_downgrade(&leaving, &self.config, can_hand_over, true) {
                        drop(g);
                        // The classic join that follows stores the group again (and waits).
                        let stored =
                            hand_over(&self.groups, &request.group_id, &group, Some(downgrade), self.downgrader.get());
                        if let Some(Err(error)) = stored {
                            tracing::warn!(group = %request.group_id, %error, "could not store the downgraded group");
                        }
                        return ClassicBegin::NotHere;
                    }
                    g.replace_static(&existing, &member_id);
                    replaced = true;
                } else if existing != member_id {
                    return refuse(
                        ResponseError::FencedInstanceId,
                        &request.member_id,
                        format!("Static member {member_id} with instance id {instance} is fenced."),
                    );
                }
            }
        }
        let joined = !g.members.contains_key(&member_id);
        if joined {
            // Any member id is taken (the one MEMBER_ID_REQUIRED handed out, or a removed
            // member's coming back), as Kafka's `getOrMaybeSubscribeDynamicConsumerGroupMember`.
            if let Some(instance) = &request.group_instance_id {
                g.instances.insert(instance.clone(), member_id.clone());
            }
            g.members.insert(member_id.clone(), new_classic_member(&member_id, request, now));
        } else if !replaced && g.members.get(&member_id).is_some_and(|m| m.classic.is_none()) {
            return refuse(
                ResponseError::UnknownMemberId,
                &request.member_id,
                format!("Member {member_id} does not use the classic protocol."),
            );
        }
        let session = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
        let Some(member) = g.members.get_mut(&member_id) else {
            return refuse(ResponseError::UnknownMemberId, &request.member_id, format!("Member {member_id} is gone."));
        };
        let topics: BTreeSet<String> = subscription.topics.iter().cloned().collect();
        let changed = joined || member.subscribed_names != topics || member.rack != subscription.rack;
        let stored_changed = changed
            || member.rebalance_timeout_ms != request.rebalance_timeout_ms
            || member.client_id != request.client_id
            || member
                .classic
                .as_ref()
                .is_none_or(|c| c.session_timeout_ms != request.session_timeout_ms || c.protocols != request.protocols);
        member.subscribed_names = topics;
        member.rack = subscription.rack.clone();
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.client_id = request.client_id.clone();
        member.client_host = request.client_host.clone();
        member.session_deadline = now + session;
        member.left_static = false;
        member.classic = Some(ClassicMember {
            session_timeout_ms: request.session_timeout_ms,
            protocols: request.protocols.clone(),
            // The join it owed is here; the sync it owes next is set once it is answered.
            deadline: None,
        });
        member_id = member.member_id.clone();
        if stored_changed {
            g.save_member(&member_id);
        }
        if g.refresh_subscription(image, changed) || changed {
            g.group_epoch += 1;
            g.save_epoch();
        }
        let job = (g.target_epoch < g.group_epoch).then(|| g.assign_job(image, self.config.default_assignor()));
        // What the member says it owns, by topic id (topics it names that are gone own nothing).
        let mut owned = Assignment::new();
        for (topic, partitions) in &subscription.owned {
            if let Some(t) = image.topic(topic) {
                owned.entry(t.topic_id).or_default().extend(partitions.iter().copied());
            }
        }
        drop(g);
        ClassicBegin::Continue(Pending {
            group,
            member_id,
            full_request: true,
            joined: true,
            assigned_before: Assignment::new(),
            owned: Some(owned),
            job,
        })
    }

    /// Second half of a classic member's JoinGroup: installs the computed target if still
    /// current, reconciles the member with what it owns and answers its member epoch as the
    /// generation. The member then owes a SyncGroup within its rebalance timeout.
    pub fn finish_classic_join(
        &self,
        pending: Pending,
        outcome: Option<AssignOutcome>,
        now: Instant,
    ) -> (Result<ClassicJoined, ResponseError>, Write) {
        let (mut g, present) = self.settle(&pending, outcome.as_ref(), now);
        let joined = g.members.get_mut(&pending.member_id).filter(|_| present).and_then(|m| {
            let rebalance = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
            let classic = m.classic.as_mut()?;
            classic.deadline = Some(now + rebalance);
            Some(ClassicJoined {
                member_id: m.member_id.clone(),
                generation: m.epoch,
                protocol_name: classic.protocol().0.to_string(),
            })
        });
        let write = g.flush(self.store.get());
        let missing = if g.gone { ResponseError::CoordinatorLoadInProgress } else { ResponseError::UnknownMemberId };
        (joined.ok_or(missing), write)
    }

    /// SyncGroup of a classic member in a consumer group; `None` when `group_id` is not a
    /// consumer group here (the classic membership answers).
    #[allow(clippy::too_many_arguments)]
    pub fn classic_sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        image: &MetadataImage,
        now: Instant,
    ) -> Option<Result<ClassicSynced, ResponseError>> {
        let group = self.get(group_id)?;
        let mut g = lock(&group);
        if g.gone {
            return None;
        }
        let group_epoch = g.group_epoch;
        Some(classic_member(&mut g, member_id, instance_id, generation).and_then(|member| {
            let classic = member.classic.as_ref().ok_or(ResponseError::UnknownMemberId)?;
            let (name, version) = classic.protocol();
            if protocol_type.is_some_and(|t| t != embedded::PROTOCOL_TYPE) || protocol_name.is_some_and(|n| n != name) {
                return Err(ResponseError::InconsistentGroupProtocol);
            }
            let name = name.to_string();
            if group_epoch > member.epoch && member.state != MemberState::UnrevokedPartitions {
                // A new rebalance started since it joined: it rejoins to catch up.
                owe_rejoin(member, now);
                return Err(ResponseError::RebalanceInProgress);
            }
            let session = classic.session();
            member.session_deadline = now + session;
            if let Some(classic) = member.classic.as_mut() {
                classic.deadline = None;
            }
            let named: Vec<(&str, Vec<i32>)> = member
                .assigned
                .iter()
                .filter_map(|(id, ps)| image.topic_by_id(id).map(|t| (t.name.as_str(), ps.iter().copied().collect())))
                .collect();
            Ok(ClassicSynced { protocol_name: name, assignment: embedded::encode_assignment(named, version) })
        }))
    }

    /// Heartbeat of a classic member in a consumer group (Kafka's
    /// `classicGroupHeartbeatToConsumerGroup`); `None` when `group_id` is not a consumer group
    /// here. REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch moved past its
    /// epoch, it has partitions to give up, or partitions it waits for are free now.
    pub fn classic_heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Option<Result<(), ResponseError>> {
        let group = self.get(group_id)?;
        let mut g = lock(&group);
        if g.gone {
            return None;
        }
        let group_epoch = g.group_epoch;
        let waiting = g.members.get(member_id).is_some_and(|m| g.waits_on_unreleased(m));
        Some(classic_member(&mut g, member_id, instance_id, generation).and_then(|member| {
            let session = member.classic.as_ref().ok_or(ResponseError::UnknownMemberId)?.session();
            member.session_deadline = now + session;
            let rejoin = member.epoch < group_epoch
                || member.state == MemberState::UnrevokedPartitions
                || (member.state == MemberState::UnreleasedPartitions && !waiting);
            if rejoin {
                owe_rejoin(member, now);
                return Err(ResponseError::RebalanceInProgress);
            }
            Ok(())
        }))
    }

    /// LeaveGroup of classic members of a consumer group (Kafka's
    /// `classicGroupLeaveToConsumerGroup`): one result per leaving member, and the write of
    /// their removal; `None` when `group_id` is not a consumer group here.
    pub fn classic_leave(
        &self,
        group_id: &str,
        leaving: &[LeavingMember],
    ) -> Option<(Vec<Result<(), ResponseError>>, Write)> {
        let group = self.get(group_id)?;
        let mut g = lock(&group);
        if g.gone {
            return None;
        }
        let results = leaving
            .iter()
            .map(|leaver| {
                let member_id = match &leaver.group_instance_id {
                    Some(instance) => {
                        let current = g.instances.get(instance).cloned().ok_or(ResponseError::UnknownMemberId)?;
                        if !leaver.member_id.is_empty() && leaver.member_id != current {
                            return Err(ResponseError::FencedInstanceId);
                        }
                        current
                    }
                    None => leaver.member_id.clone(),
                };
                match g.members.get(&member_id) {
                    Some(m) if m.classic.is_some() => {}
                    _ => return Err(ResponseError::UnknownMemberId),
                }
                tracing::info!(group = %group_id, member = %member_id, "classic member left the consumer group");
                g.remove_member(&member_id);
                Ok(())
            })
            .collect();
        let write = g.flush(self.store.get());
        Some((results, write))
    }

    /// Takes over a classic group with members for an online upgrade (Kafka's
    /// `ConsumerGroup.fromClassicGroup`): every member keeps its id, generation (as member and
    /// group epoch) and the partitions its last SyncGroup gave it, which are also the target; the
    /// joining consumer-protocol member then moves the group epoch and a new target follows.
    /// A partition two classic members claim goes to the first. `Err` when an embedded
    /// subscription or assignment does not decode (Kafka answers GROUP_ID_NOT_FOUND then).
    pub fn adopt_classic(
        &self,
        group_id: &str,
        classic: &ClassicMembers,
        image: &MetadataImage,
        now: Instant,
    ) -> Result<(), String> {
        let mut group = ConsumerGroup::new(group_id, self.config.default_assignor());
        group.group_epoch = classic.generation;
        group.target_epoch = classic.generation;
        for m in &classic.members {
            let metadata = classic
                .protocol_name
                .as_ref()
                .and_then(|name| m.protocols.iter().find(|(n, _)| n == name))
                .or(m.protocols.first())
                .map_or(&[][..], |(_, metadata)| &metadata[..]);
            let subscription = embedded::decode_subscription(metadata)?;
            let mut assigned = Assignment::new();
            for (topic, partitions) in embedded::decode_assignment(&m.assignment)? {
                let Some(t) = image.topic(&topic) else { continue };
                group.topic_names.insert(t.topic_id, topic.clone());
                for p in partitions {
                    if let std::collections::hash_map::Entry::Vacant(owner) = group.owners.entry((t.topic_id, p)) {
                        owner.insert(m.member_id.clone());
                        assigned.entry(t.topic_id).or_default().insert(p);
                    }
                }
            }
            if let Some(instance) = &m.group_instance_id {
                group.instances.insert(instance.clone(), m.member_id.clone());
            }
            group.target.insert(m.member_id.clone(), assigned.clone());
            let classic_member = ClassicMember {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m.protocols.clone(),
                deadline: None,
            };
            let mut member = Member::new(
                &m.member_id,
                m.group_instance_id.clone(),
                (&m.client_id, &m.client_host),
                m.rebalance_timeout_ms,
                now + classic_member.session(),
                Some(classic_member),
            );
            member.subscribed_names = subscription.topics.into_iter().collect();
            member.rack = subscription.rack;
            member.epoch = classic.generation;
            member.previous_epoch = classic.generation;
            member.assigned = assigned;
            group.members.insert(m.member_id.clone(), member);
        }
        // Kafka's `createConsumerGroupRecords`: members, group epoch, targets, target epoch,
        // current assignments.
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in &ids {
            group.save_member(id);
        }
        group.save_epoch();
        for id in &ids {
            let value = group.target.get(id).map(super::to_stored);
            group.unsaved.push(super::ConsumerRecord::TargetMember { member_id: id.clone(), value });
        }
        group.unsaved.push(super::ConsumerRecord::TargetEpoch(Some(group.target_epoch)));
        for id in &ids {
            group.save_current(id);
        }
        group.restored_topics_hash = Some(0);
        #[cfg(any(test, debug_assertions))]
        group.check_invariants();
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = groups.insert(group_id.to_string(), std::sync::Arc::new(std::sync::Mutex::new(group))) {
            lock(&old).gone = true;
        }
        tracing::info!(group = group_id, members = ids.len(), "upgraded a classic group to the consumer protocol");
        Ok(())
    }
}

impl ConsumerGroup {
    /// Kafka's `waitingOnUnreleasedPartition`: some partition of the member's target it does
    /// not hold yet is still owned by another member.
    fn waits_on_unreleased(&self, member: &Member) -> bool {
        let Some(target) = self.target.get(&member.member_id) else { return false };
        super::flatten(&super::difference(target, &member.assigned))
            .any(|tp| self.owners.get(&tp).is_some_and(|owner| *owner != member.member_id))
    }
}

/// Kafka's `supportsClassicProtocols`: the consumer protocol type, and (when the group has
/// classic members) a protocol every classic member supports.
fn supports_classic_protocols(g: &ConsumerGroup, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
    if protocol_type != embedded::PROTOCOL_TYPE || protocols.is_empty() {
        return false;
    }
    let classic: Vec<&ClassicMember> = g.members.values().filter_map(|m| m.classic.as_ref()).collect();
    classic.is_empty()
        || protocols.iter().any(|(name, _)| classic.iter().all(|c| c.protocols.iter().any(|(n, _)| n == name)))
}

/// Kafka's `validateConsumerGroupMember` + the classic checks: the member by instance id
/// (FENCED_INSTANCE_ID if another member id holds it) or by member id, on the classic protocol,
/// at `generation` (ILLEGAL_GENERATION otherwise).
fn classic_member<'a>(
    g: &'a mut ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
) -> Result<&'a mut Member, ResponseError> {
    if let Some(instance) = instance_id {
        let current = g.instances.get(instance).ok_or(ResponseError::UnknownMemberId)?;
        if current != member_id {
            return Err(ResponseError::FencedInstanceId);
        }
    }
    let member = g.members.get_mut(member_id).filter(|m| !m.left_static).ok_or(ResponseError::UnknownMemberId)?;
    if member.classic.is_none() {
        return Err(ResponseError::UnknownMemberId);
    }
    if member.epoch != generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(member)
}

/// The member was told to rejoin: it must within its rebalance timeout (Kafka's
/// `scheduleConsumerGroupJoinTimeoutIfAbsent`).
fn owe_rejoin(member: &mut Member, now: Instant) {
    let rebalance = Duration::from_millis(member.rebalance_timeout_ms.max(0) as u64);
    if let Some(classic) = member.classic.as_mut() {
        classic.deadline.get_or_insert(now + rebalance);
    }
}

fn new_classic_member(member_id: &str, request: &JoinRequest, now: Instant) -> Member {
    let classic = ClassicMember {
        session_timeout_ms: request.session_timeout_ms,
        protocols: request.protocols.clone(),
        deadline: None,
    };
    Member::new(
        member_id,
        request.group_instance_id.clone(),
        (&request.client_id, &request.client_host),
        request.rebalance_timeout_ms,
        now + classic.session(),
        Some(classic),
    )
}
