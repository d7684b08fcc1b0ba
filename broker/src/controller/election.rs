//! The controller's partition decisions, as pure functions over a partition's committed state:
//! which replica leads (Kafka's `PartitionLeaderElectionAlgorithms`), what a broker's fencing does
//! to the partitions it is in, and whether a leader's ISR change (AlterPartition) may commit
//! (Kafka's `ReplicationControlManager.alterPartition` checks).
//!
//! Invariants: a leader is always in the ISR it is elected with (unless the election is unclean,
//! which resets the ISR to the new leader alone); an ISR is never empty and only holds replicas;
//! an ISR change commits only against the exact leader epoch and partition epoch it was computed
//! from, so a zombie or a stale proposal loses.

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
}
