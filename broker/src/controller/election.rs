//! The controller's partition decisions, as pure functions over a partition's committed state:
//! which replica leads (Kafka's `PartitionLeaderElectionAlgorithms`), what a broker's fencing does
//! to the partitions it is in, and whether a leader's ISR change (AlterPartition) may commit
//! (Kafka's `ReplicationControlManager.alterPartition` checks).
//!
//! It also decides partition reassignments (Kafka's `PartitionReassignmentReplicas`,
//! `PartitionReassignmentRevert` and the reassignment steps of `PartitionChangeBuilder`): a new
//! target makes the replica list the target followed by the replicas it drops, with the replicas
//! it adds and removes recorded; once the ISR holds every target replica the reassignment
//! completes (replicas = target, ISR = ISR minus the removed ones, a new leader if the old one
//! leaves); a cancel takes the added replicas out again.
//!
//! Invariants: a leader is always in the ISR it is elected with (unless the election is unclean,
//! which resets the ISR to the new leader alone); an ISR is never empty and only holds replicas;
//! an ISR change commits only against the exact leader epoch and partition epoch it was computed
//! from, so a zombie or a stale proposal loses. A reassignment's adding and removing replicas are
//! disjoint, sorted, and both part of the replica list; a replica leaves the list only once every
//! target replica is in the ISR, so the data is copied before the old replica goes.

use super::NodeId;

/// The state of one partition the decisions start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
    pub leader: Option<NodeId>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// A decided change: the new leader and ISR (a `PartitionChange` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDecision {
    pub leader: Option<NodeId>,
    pub isr: Vec<NodeId>,
    /// The leader came from outside the ISR (`unclean.leader.election.enable`): data the old ISR
    /// acknowledged may be lost. Logged and counted by the caller.
    pub unclean: bool,
}

/// Kafka's offline-partition election: the first replica in assignment order that is live and
/// in the ISR; with `unclean` allowed and none such, the first live replica.
pub fn elect_leader(state: &PartitionState, is_live: impl Fn(NodeId) -> bool, unclean: bool) -> PartitionDecision {
    if let Some(&leader) = state.replicas.iter().find(|&&r| is_live(r) && state.isr.contains(&r)) {
        let isr = state.isr.iter().copied().filter(|&r| r == leader || is_live(r)).collect();
        return PartitionDecision { leader: Some(leader), isr, unclean: false };
    }
    if unclean {
        if let Some(&leader) = state.replicas.iter().find(|&&r| is_live(r)) {
            return PartitionDecision { leader: Some(leader), isr: vec![leader], unclean: true };
        }
    }
    // Offline: no leader. The ISR keeps its last member so that replica, which has every
    // committed record, can lead again when it returns.
    let isr = state.isr.iter().copied().find(|&r| is_live(r)).or_else(|| state.isr.last().copied());
    PartitionDecision { leader: None, isr: isr.into_iter().collect(), unclean: false }
}

/// What fencing `fenced` (its session expired, or it shut down) does to one partition: out of
/// the ISR (unless it is the last member), and a new leader if it led. `None`: nothing changes.
pub fn on_broker_fenced(
    state: &PartitionState,
    fenced: NodeId,
    is_live: impl Fn(NodeId) -> bool,
    unclean: bool,
) -> Option<PartitionDecision> {
    if !state.replicas.contains(&fenced) {
        return None;
    }
    let live = |r: NodeId| r != fenced && is_live(r);
    if state.leader == Some(fenced) || state.leader.is_none() {
        let decision = elect_leader(state, live, unclean);
        let changed = decision.leader != state.leader || decision.isr != state.isr;
        return changed.then_some(decision);
    }
    if !state.isr.contains(&fenced) || state.isr.len() == 1 {
        return None;
    }
    let isr = state.isr.iter().copied().filter(|&r| r != fenced).collect();
    Some(PartitionDecision { leader: state.leader, isr, unclean: false })
}

/// Why a preferred leader election does not happen (Kafka's ElectLeaders codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreferredElection {
    /// ELECTION_NOT_NEEDED: the preferred replica (the first assigned) already leads.
    NotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE: it is fenced or not in the ISR.
    NotAvailable,
}

/// Kafka's preferred-replica election: the first assigned replica leads again if it is live
/// and in the ISR; the ISR does not change.
pub fn elect_preferred(
    state: &PartitionState,
    is_live: impl Fn(NodeId) -> bool,
) -> Result<PartitionDecision, PreferredElection> {
    let preferred = *state.replicas.first().ok_or(PreferredElection::NotAvailable)?;
    if state.leader == Some(preferred) {
        return Err(PreferredElection::NotNeeded);
    }
    if !is_live(preferred) || !state.isr.contains(&preferred) {
        return Err(PreferredElection::NotAvailable);
    }
    Ok(PartitionDecision { leader: Some(preferred), isr: state.isr.clone(), unclean: false })
}

/// Why an ISR change from a leader is refused (Kafka's AlterPartition error codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlterPartitionError {
    /// NOT_LEADER_OR_FOLLOWER: the proposer does not lead the partition.
    #[error("node {proposer} is not the leader (leader {leader:?})")]
    NotLeader { proposer: NodeId, leader: Option<NodeId> },
    /// FENCED_LEADER_EPOCH: computed in another leader epoch.
    #[error("leader epoch {proposed} is not the current {current}")]
    FencedLeaderEpoch { proposed: i32, current: i32 },
    /// INVALID_UPDATE_VERSION: computed from an older (or unknown newer) partition state.
    #[error("partition epoch {proposed} is not the current {current}")]
    InvalidUpdateVersion { proposed: i32, current: i32 },
    /// INVALID_REQUEST: the new ISR lacks the leader, has a non-replica or a duplicate.
    #[error("invalid ISR {isr:?} for replicas {replicas:?}")]
    InvalidIsr { isr: Vec<NodeId>, replicas: Vec<NodeId> },
    /// INELIGIBLE_REPLICA: a proposed ISR member is fenced, or the leader saw it caught up in an
    /// earlier incarnation (its broker epoch is not the registered one; KIP-903).
    #[error("replica {replica} (broker epoch {broker_epoch}) may not be in the ISR: fenced or a stale incarnation")]
    IneligibleReplica { replica: NodeId, broker_epoch: i64 },
}

/// A leader's proposed ISR (Kafka's AlterPartition v3 with `NewIsrWithEpochs`).
#[derive(Debug, Clone, Copy)]
pub struct AlterPartition<'a> {
    pub proposer: NodeId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: &'a [NodeId],
    /// `broker_epochs[i]` belongs to `new_isr[i]`; -1 skips the incarnation check for it.
    pub broker_epochs: &'a [i64],
}

/// Checks a leader's proposed ISR against the committed state. `registered_epoch(r)` is the
/// broker epoch of `r`'s current registration, `None` while it is fenced.
pub fn check_alter_partition(
    state: &PartitionState,
    change: AlterPartition<'_>,
    registered_epoch: impl Fn(NodeId) -> Option<i64>,
) -> Result<(), AlterPartitionError> {
    let AlterPartition { proposer, leader_epoch, partition_epoch, new_isr, broker_epochs } = change;
    if state.leader != Some(proposer) {
        return Err(AlterPartitionError::NotLeader { proposer, leader: state.leader });
    }
    if leader_epoch != state.leader_epoch {
        return Err(AlterPartitionError::FencedLeaderEpoch { proposed: leader_epoch, current: state.leader_epoch });
    }
    if partition_epoch != state.partition_epoch {
        return Err(AlterPartitionError::InvalidUpdateVersion {
            proposed: partition_epoch,
            current: state.partition_epoch,
        });
    }
    let duplicate = new_isr.iter().enumerate().any(|(i, r)| new_isr[..i].contains(r));
    let shape_ok = new_isr.contains(&proposer)
        && !duplicate
        && new_isr.iter().all(|r| state.replicas.contains(r))
        && broker_epochs.len() == new_isr.len();
    if !shape_ok {
        return Err(AlterPartitionError::InvalidIsr { isr: new_isr.to_vec(), replicas: state.replicas.clone() });
    }
    for (&replica, &broker_epoch) in new_isr.iter().zip(broker_epochs) {
        let eligible = match registered_epoch(replica) {
            None => false,
            Some(registered) => broker_epoch == -1 || broker_epoch == registered,
        };
        if !eligible {
            return Err(AlterPartitionError::IneligibleReplica { replica, broker_epoch });
        }
    }
    Ok(())
}

/// The replicas an ongoing reassignment adds and removes (Kafka's `addingReplicas` and
/// `removingReplicas`); both empty when none is in progress. Each is sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reassignment {
    pub adding_replicas: Vec<NodeId>,
    pub removing_replicas: Vec<NodeId>,
}

impl Reassignment {
    pub fn in_progress(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

/// A decided change of a partition's replica list (a reassignment started, completed or
/// cancelled), with the leader and ISR that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaChange {
    pub leader: Option<NodeId>,
    pub isr: Vec<NodeId>,
    pub replicas: Vec<NodeId>,
    pub reassignment: Reassignment,
}

/// Why a reassignment request is refused (Kafka's AlterPartitionReassignments codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassignmentError {
    /// INVALID_REPLICA_ASSIGNMENT: an empty target, a duplicate, an unregistered broker, or a
    /// cancel that would need an unclean election the topic does not allow.
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// INVALID_REPLICATION_FACTOR: the request (v1+) forbade changing the replication factor.
    #[error("the replication factor is changed from {current} to {target} but allowReplicationFactorChange is false")]
    ReplicationFactorChange { current: usize, target: usize },
    /// NO_REASSIGNMENT_IN_PROGRESS: a cancel of a partition that is not being reassigned.
    #[error("no partition reassignment is in progress")]
    NoReassignmentInProgress,
}

/// Kafka's `validateManualPartitionAssignment`: not empty, every broker registered, none twice.
pub fn validate_target(target: &[NodeId], is_registered: impl Fn(NodeId) -> bool) -> Result<(), ReassignmentError> {
    let invalid = |message: String| Err(ReassignmentError::InvalidReplicaAssignment(message));
    if target.is_empty() {
        return invalid("The manual partition assignment includes an empty replica list.".to_string());
    }
    let mut sorted = target.to_vec();
    sorted.sort_unstable();
    for (i, &broker) in sorted.iter().enumerate() {
        if !is_registered(broker) {
            return invalid(format!(
                "The manual partition assignment includes broker {broker}, but no such broker is registered."
            ));
        }
        if i > 0 && sorted[i - 1] == broker {
            return invalid(format!("The manual partition assignment includes the broker {broker} more than once."));
        }
    }
    Ok(())
}

/// The replicas of `state` before its ongoing reassignment (if any) started adding some.
pub fn original_replicas(state: &PartitionState, ongoing: &Reassignment) -> Vec<NodeId> {
    state.replicas.iter().copied().filter(|r| !ongoing.adding_replicas.contains(r)).collect()
}

/// A new reassignment of a partition to `target` (already validated). As in Kafka it starts from
/// the current replica list (an ongoing reassignment's whole list): the list becomes the target
/// followed by the replicas it drops, and if the ISR already holds every target replica it
/// completes in the same step. `None`: nothing would change.
pub fn reassign(
    state: &PartitionState,
    ongoing: &Reassignment,
    target: &[NodeId],
    is_live: impl Fn(NodeId) -> bool,
) -> Option<ReplicaChange> {
    let removing: Vec<NodeId> = sorted_difference(&state.replicas, target);
    let adding: Vec<NodeId> = sorted_difference(target, &state.replicas);
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    let started = Reassignment { adding_replicas: adding, removing_replicas: removing };
    let (replicas, isr, reassignment) = match try_complete(&replicas, &state.isr, &started) {
        Some((replicas, isr)) => (replicas, isr, Reassignment::default()),
        None => (replicas, state.isr.clone(), started),
    };
    let leader = elect_within(state.leader, &replicas, &isr, &is_live);
    let change = ReplicaChange { leader, isr, replicas, reassignment };
    let unchanged = change.replicas == state.replicas
        && change.isr == state.isr
        && change.leader == state.leader
        && change.reassignment == *ongoing;
    (!unchanged).then_some(change)
}

/// Completes an ongoing reassignment once the ISR holds every target replica (Kafka's
/// `maybeCompleteReassignment`): the removed replicas leave the list and the ISR, and if the
/// leader was one of them the first live target replica of the ISR leads. `None`: not yet (or
/// no replica could lead, in which case it waits rather than take the partition offline).
pub fn complete_reassignment(
    state: &PartitionState,
    ongoing: &Reassignment,
    is_live: impl Fn(NodeId) -> bool,
) -> Option<ReplicaChange> {
    let (replicas, isr) = try_complete(&state.replicas, &state.isr, ongoing)?;
    let leader = elect_within(state.leader, &replicas, &isr, &is_live);
    if leader.is_none() && state.leader.is_some() {
        return None;
    }
    Some(ReplicaChange { leader, isr, replicas, reassignment: Reassignment::default() })
}

/// Cancels an ongoing reassignment (Kafka's `PartitionReassignmentRevert`): the replicas it was
/// adding leave the list and the ISR, the ones it was removing stay. If the ISR held only added
/// replicas, the first remaining replica is the ISR alone, an unclean election that only a topic
/// with `unclean.leader.election.enable` allows.
pub fn cancel_reassignment(
    state: &PartitionState,
    ongoing: &Reassignment,
    unclean_allowed: bool,
    is_live: impl Fn(NodeId) -> bool,
) -> Result<ReplicaChange, ReassignmentError> {
    if !ongoing.in_progress() {
        return Err(ReassignmentError::NoReassignmentInProgress);
    }
    let replicas = original_replicas(state, ongoing);
    let mut isr: Vec<NodeId> = state.isr.iter().copied().filter(|r| !ongoing.adding_replicas.contains(r)).collect();
    if isr.is_empty() {
        let Some(&first) = replicas.first() else {
            return Err(ReassignmentError::InvalidReplicaAssignment(
                "Invalid replica assignment: addingReplicas contains all replicas.".to_string(),
            ));
        };
        if !unclean_allowed {
            return Err(ReassignmentError::InvalidReplicaAssignment(
                "Unable to revert partition assignment because it would require an unclean leader election."
                    .to_string(),
            ));
        }
        isr.push(first);
    }
    let leader = elect_within(state.leader, &replicas, &isr, &is_live);
    Ok(ReplicaChange { leader, isr, replicas, reassignment: Reassignment::default() })
}

/// The replica list and ISR of a completed reassignment, if the ISR holds every target replica
/// and keeps at least one member once the removed replicas leave.
fn try_complete(replicas: &[NodeId], isr: &[NodeId], ongoing: &Reassignment) -> Option<(Vec<NodeId>, Vec<NodeId>)> {
    if !ongoing.in_progress() {
        return None;
    }
    let keep = |r: &&NodeId| !ongoing.removing_replicas.contains(r);
    let new_isr: Vec<NodeId> = isr.iter().filter(keep).copied().collect();
    let new_replicas: Vec<NodeId> = replicas.iter().filter(keep).copied().collect();
    if new_isr.is_empty() || new_replicas.is_empty() || !new_replicas.iter().all(|r| new_isr.contains(r)) {
        return None;
    }
    Some((new_replicas, new_isr))
}

/// Kafka's `electAnyLeader` over a changed replica list: the current leader stays if it is
/// still a live ISR member, else the first replica that is.
fn elect_within(
    current: Option<NodeId>,
    replicas: &[NodeId],
    isr: &[NodeId],
    is_live: &impl Fn(NodeId) -> bool,
) -> Option<NodeId> {
    let valid = |r: NodeId| replicas.contains(&r) && isr.contains(&r) && is_live(r);
    current.filter(|&l| valid(l)).or_else(|| replicas.iter().copied().find(|&r| valid(r)))
}

/// The members of `a` not in `b`, sorted (Kafka computes them through a `TreeSet`).
fn sorted_difference(a: &[NodeId], b: &[NodeId]) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(leader: Option<NodeId>, isr: Vec<NodeId>) -> PartitionState {
        PartitionState { replicas: vec![1, 2, 3], isr, leader, leader_epoch: 4, partition_epoch: 9 }
    }

    #[test]
    fn election_prefers_assignment_order_within_the_live_isr() {
        // Proves Kafka's order: first replica that is live and in the ISR.
        let s = state(Some(1), vec![3, 2, 1]);
        assert_eq!(
            elect_leader(&s, |r| r != 1, false),
            PartitionDecision { leader: Some(2), isr: vec![3, 2], unclean: false }
        );
        let s = state(Some(1), vec![1]);
        assert_eq!(
            elect_leader(&s, |r| r != 1, false),
            PartitionDecision { leader: None, isr: vec![1], unclean: false }
        );
        assert_eq!(
            elect_leader(&s, |r| r != 1, true),
            PartitionDecision { leader: Some(2), isr: vec![2], unclean: true }
        );
    }

    #[test]
    fn fencing_moves_leadership_and_never_empties_the_isr() {
        // Proves the fenced broker leaves the ISR unless it is the last member.
        let s = state(Some(1), vec![1, 2]);
        assert_eq!(
            on_broker_fenced(&s, 1, |_| true, false).unwrap(),
            PartitionDecision { leader: Some(2), isr: vec![2], unclean: false }
        );
        assert_eq!(
            on_broker_fenced(&s, 2, |_| true, false).unwrap(),
            PartitionDecision { leader: Some(1), isr: vec![1], unclean: false }
        );
        assert_eq!(on_broker_fenced(&s, 3, |_| true, false), None, "not in the ISR");
        let last = state(Some(2), vec![2]);
        assert_eq!(
            on_broker_fenced(&last, 2, |_| true, false).unwrap(),
            PartitionDecision { leader: None, isr: vec![2], unclean: false }
        );
        // It comes back (live again) while the partition is offline: it leads again.
        let offline = state(None, vec![2]);
        assert_eq!(elect_leader(&offline, |_| true, false).leader, Some(2));
    }

    #[test]
    fn the_preferred_replica_leads_again_only_when_live_and_in_sync() {
        // Proves Kafka's preferred election rules: first replica, live, in the ISR.
        let s = state(Some(2), vec![2, 1]);
        assert_eq!(
            elect_preferred(&s, |_| true),
            Ok(PartitionDecision { leader: Some(1), isr: vec![2, 1], unclean: false })
        );
        assert_eq!(elect_preferred(&s, |r| r != 1), Err(PreferredElection::NotAvailable));
        assert_eq!(elect_preferred(&state(Some(2), vec![2, 3]), |_| true), Err(PreferredElection::NotAvailable));
        assert_eq!(elect_preferred(&state(Some(1), vec![1]), |_| true), Err(PreferredElection::NotNeeded));
    }

    #[test]
    fn stale_or_malformed_isr_changes_lose() {
        // Proves AlterPartition's checks: leader, both epochs, ISR shape, fencing, incarnation.
        let s = state(Some(1), vec![1, 2]);
        let registered = |r: NodeId| Some(10 + r as i64);
        let change =
            |proposer, leader_epoch, partition_epoch, new_isr: &'static [NodeId], broker_epochs: &'static [i64]| {
                AlterPartition { proposer, leader_epoch, partition_epoch, new_isr, broker_epochs }
            };
        assert_eq!(check_alter_partition(&s, change(1, 4, 9, &[1, 2, 3], &[-1, 12, 13]), registered), Ok(()));
        let refused = |c| check_alter_partition(&s, c, registered).unwrap_err();
        assert!(matches!(refused(change(2, 4, 9, &[2], &[-1])), AlterPartitionError::NotLeader { .. }));
        assert!(matches!(refused(change(1, 3, 9, &[1], &[-1])), AlterPartitionError::FencedLeaderEpoch { .. }));
        assert!(matches!(refused(change(1, 4, 8, &[1], &[-1])), AlterPartitionError::InvalidUpdateVersion { .. }));
        assert!(matches!(refused(change(1, 4, 9, &[2], &[-1])), AlterPartitionError::InvalidIsr { .. }));
        assert!(matches!(refused(change(1, 4, 9, &[1, 1], &[-1, -1])), AlterPartitionError::InvalidIsr { .. }));
        assert!(matches!(refused(change(1, 4, 9, &[1, 7], &[-1, -1])), AlterPartitionError::InvalidIsr { .. }));
        // Replica 3 restarted (broker epoch 13 -> 14) after the leader saw it caught up.
        assert_eq!(
            check_alter_partition(&s, change(1, 4, 9, &[1, 3], &[-1, 13]), |r| Some(if r == 3 { 14 } else { 10 })),
            Err(AlterPartitionError::IneligibleReplica { replica: 3, broker_epoch: 13 })
        );
        let fenced_3 = |r: NodeId| (r != 3).then_some(10);
        assert!(matches!(
            check_alter_partition(&s, change(1, 4, 9, &[1, 3], &[-1, 13]), fenced_3),
            Err(AlterPartitionError::IneligibleReplica { replica: 3, .. })
        ));
    }

    fn reassigning(replicas: Vec<NodeId>, isr: Vec<NodeId>, leader: NodeId) -> PartitionState {
        PartitionState { replicas, isr, leader: Some(leader), leader_epoch: 4, partition_epoch: 9 }
    }

    #[test]
    fn a_reassignment_lists_the_target_then_the_removed_and_completes_once_the_targets_are_in_sync() {
        // Proves Kafka's ordering (target, then removed), sorted adding/removing, no completion
        // before every target replica is in the ISR, and a new leader when the old one leaves.
        let s = reassigning(vec![1, 2], vec![1, 2], 1);
        let started = reassign(&s, &Reassignment::default(), &[3, 2], |_| true).expect("a change");
        let ongoing = Reassignment { adding_replicas: vec![3], removing_replicas: vec![1] };
        assert_eq!(
            started,
            ReplicaChange { leader: Some(1), isr: vec![1, 2], replicas: vec![3, 2, 1], reassignment: ongoing.clone() }
        );
        let union = reassigning(vec![3, 2, 1], vec![1, 2], 1);
        assert_eq!(complete_reassignment(&union, &ongoing, |_| true), None, "3 is not in the ISR yet");
        let caught_up = reassigning(vec![3, 2, 1], vec![1, 2, 3], 1);
        assert_eq!(
            complete_reassignment(&caught_up, &ongoing, |_| true),
            Some(ReplicaChange {
                leader: Some(3),
                isr: vec![2, 3],
                replicas: vec![3, 2],
                reassignment: Reassignment::default()
            }),
            "the removed leader hands over to the first target replica that is live and in sync"
        );
        // 3 fenced: 2 leads.
        assert_eq!(complete_reassignment(&caught_up, &ongoing, |r| r != 3).and_then(|c| c.leader), Some(2));
    }

    #[test]
    fn a_reassignment_the_isr_already_covers_completes_at_once_and_a_repeat_changes_nothing() {
        // Proves a pure removal or reorder completes in the same change (Kafka's builder), and
        // resubmitting the current state is a no-op.
        let s = reassigning(vec![1, 2, 3], vec![1, 2, 3], 2);
        let shrunk = reassign(&s, &Reassignment::default(), &[2, 3], |_| true).expect("a change");
        assert_eq!(
            shrunk,
            ReplicaChange {
                leader: Some(2),
                isr: vec![2, 3],
                replicas: vec![2, 3],
                reassignment: Reassignment::default()
            }
        );
        let reordered = reassign(&s, &Reassignment::default(), &[3, 1, 2], |_| true).expect("a change");
        assert_eq!((reordered.replicas, reordered.leader), (vec![3, 1, 2], Some(2)));
        assert_eq!(reassign(&s, &Reassignment::default(), &[1, 2, 3], |_| true), None);
        let union = reassigning(vec![3, 2, 1], vec![1, 2], 1);
        let ongoing = Reassignment { adding_replicas: vec![3], removing_replicas: vec![1] };
        // The same target again is computed against the whole current list, as Kafka does: 3 is
        // already a replica, so it is no longer "adding", yet completion still waits for it.
        let again = reassign(&union, &ongoing, &[3, 2], |_| true).expect("a change");
        let only_removing = Reassignment { adding_replicas: vec![], removing_replicas: vec![1] };
        assert_eq!((again.replicas.clone(), again.reassignment.clone()), (vec![3, 2, 1], only_removing.clone()));
        assert_eq!(complete_reassignment(&union, &only_removing, |_| true), None);
    }

    #[test]
    fn cancelling_takes_the_added_replicas_out() {
        // Proves Kafka's revert: adding replicas leave the list and the ISR, removing ones stay;
        // an ISR of added replicas only needs an unclean election; nothing to cancel is an error.
        let ongoing = Reassignment { adding_replicas: vec![3], removing_replicas: vec![1] };
        let union = reassigning(vec![3, 2, 1], vec![1, 2, 3], 1);
        assert_eq!(
            cancel_reassignment(&union, &ongoing, false, |_| true),
            Ok(ReplicaChange {
                leader: Some(1),
                isr: vec![1, 2],
                replicas: vec![2, 1],
                reassignment: Reassignment::default()
            })
        );
        let only_added_in_sync = reassigning(vec![3, 2, 1], vec![3], 3);
        assert!(matches!(
            cancel_reassignment(&only_added_in_sync, &ongoing, false, |_| true),
            Err(ReassignmentError::InvalidReplicaAssignment(_))
        ));
        let unclean = cancel_reassignment(&only_added_in_sync, &ongoing, true, |_| true).expect("allowed");
        assert_eq!((unclean.leader, unclean.isr), (Some(2), vec![2]));
        assert_eq!(
            cancel_reassignment(&union, &Reassignment::default(), false, |_| true),
            Err(ReassignmentError::NoReassignmentInProgress)
        );
    }

    #[test]
    fn a_target_must_be_non_empty_registered_and_distinct() {
        // Proves Kafka's validateManualPartitionAssignment checks.
        let registered = |b: NodeId| b <= 3;
        assert_eq!(validate_target(&[3, 1], registered), Ok(()));
        for bad in [&[][..], &[1, 9][..], &[2, 2][..]] {
            assert!(matches!(validate_target(bad, registered), Err(ReassignmentError::InvalidReplicaAssignment(_))));
        }
    }
}
