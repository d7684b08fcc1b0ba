//! The leader side of one partition's replication, as a pure state machine: follower progress,
//! the high watermark, ISR shrink and expand decisions, and when an acks=all produce is done.
//! Kafka's rules (`Partition.scala`: `updateFollowerFetchState`, `maybeIncrementLeaderHW`,
//! `getOutOfSyncReplicas`, `maybeExpandIsr`, `checkEnoughReplicasReachOffset`).
//!
//! Inputs are facts with the time passed in (a follower fetched at offset X at time T, the
//! leader's log grew, a metadata change committed); outputs are decisions (the high watermark
//! moved to Y, propose this ISR). No I/O, no clock, no locks: the partition runtime around it owns
//! those, and `tests/replication_model.rs` drives it through seeded schedules.
//!
//! Invariants (asserted): the high watermark never moves backwards while this node leads with
//! this leader epoch, and never passes the leader's log end offset; the leader is in every ISR it
//! holds or proposes; at most one ISR change is in flight, and while it is, the high watermark is
//! computed over the *maximal* ISR (the committed ISR plus a replica being added), so neither an
//! expansion nor a shrink that the controller may still reject can make it advance too early.

use std::collections::BTreeMap;

/// A replica's node id (the same numbers as `controller::NodeId`).
pub type ReplicaId = u64;

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end offset: the offset of its last fetch; -1 before its first fetch in
    /// this leader epoch.
    pub log_end_offset: i64,
    /// The broker epoch (registration incarnation) of the follower's last fetch; -1 before it.
    pub broker_epoch: i64,
    /// The follower's log start offset as its last fetch reported it; -1 before it.
    pub log_start_offset: i64,
    /// The last time the follower was known to have every record the leader had.
    pub last_caught_up_time_ms: i64,
    /// The leader's log end offset when the follower last fetched, and when that was: a follower
    /// that fetches at (or past) what the leader had at its previous fetch was caught up then.
    last_fetch_leader_log_end_offset: i64,
    last_fetch_time_ms: i64,
}

/// The ISR as the leader sees it: committed, or with one change proposed and not yet committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrState {
    Committed {
        isr: Vec<ReplicaId>,
    },
    /// `adding` was proposed to join `isr`.
    PendingExpand {
        isr: Vec<ReplicaId>,
        adding: ReplicaId,
    },
    /// `removing` were proposed to leave `isr` (they still count until committed).
    PendingShrink {
        isr: Vec<ReplicaId>,
        removing: Vec<ReplicaId>,
    },
}

impl IsrState {
    /// The committed ISR.
    pub fn isr(&self) -> &[ReplicaId] {
        match self {
            IsrState::Committed { isr } | IsrState::PendingExpand { isr, .. } | IsrState::PendingShrink { isr, .. } => {
                isr
            }
        }
    }

    /// The committed ISR plus a replica being added: what the high watermark waits for.
    pub fn maximal_isr(&self) -> Vec<ReplicaId> {
        match self {
            IsrState::PendingExpand { isr, adding } => {
                let mut maximal = isr.clone();
                if !maximal.contains(adding) {
                    maximal.push(*adding);
                }
                maximal
            }
            other => other.isr().to_vec(),
        }
    }

    pub fn is_pending(&self) -> bool {
        !matches!(self, IsrState::Committed { .. })
    }
}

/// An ISR change for the controller (an AlterPartition in Kafka). It carries the leader epoch and
/// partition epoch it was computed against, so the controller can refuse a stale one, and the
/// broker epoch each member fetched with (KIP-903), so a replica that restarted with an empty
/// log after the leader saw it caught up cannot join on the strength of its old incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader: ReplicaId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<ReplicaId>,
    /// `broker_epochs[i]` is `new_isr[i]`'s broker epoch as the leader knows it (-1: unknown).
    pub broker_epochs: Vec<i64>,
}

/// One follower fetch as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetch {
    pub replica: ReplicaId,
    /// The follower's broker epoch (Fetch's `replica_state.replica_epoch`).
    pub broker_epoch: i64,
    /// The fetch offset, which is the follower's log end offset.
    pub fetch_offset: i64,
    /// The follower's log start offset (Fetch's `log_start_offset`; -1 unknown).
    pub log_start_offset: i64,
    /// The leader's log end offset when the fetch was served.
    pub leader_log_end_offset: i64,
    pub now_ms: i64,
}

/// Errors of leader-side replication inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaderStateError {
    /// A fetch from a node that is not a replica of the partition (Kafka answers
    /// NOT_LEADER_OR_FOLLOWER / UNKNOWN_SERVER_ERROR depending on version).
    #[error("node {replica} is not a replica of this partition (replicas {replicas:?})")]
    NotAReplica { replica: ReplicaId, replicas: Vec<ReplicaId> },
    /// A follower fetched at an offset past the leader's log end offset (a diverged follower that
    /// skipped truncation): OFFSET_OUT_OF_RANGE.
    #[error("follower {replica} fetched at {fetch_offset}, past the leader's log end offset {log_end_offset}")]
    FetchPastLogEnd { replica: ReplicaId, fetch_offset: i64, log_end_offset: i64 },
}

/// What a follower fetch changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchDecision {
    /// The new high watermark, if it moved.
    pub high_watermark: Option<i64>,
    /// An ISR expansion to propose (the follower caught up).
    pub propose: Option<IsrProposal>,
    /// The follower reported a new log start offset (DeleteRecords may be waiting for it).
    pub log_start_offset_moved: bool,
}

/// Where an acks=all produce whose last offset is `required_offset - 1` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// The high watermark passed it and the ISR meets `min.insync.replicas`.
    Done,
    /// The high watermark passed it but the ISR shrank below `min.insync.replicas` meanwhile:
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records stay; the client may retry).
    NotEnoughReplicasAfterAppend { isr: usize, min_insync_replicas: u32 },
    /// Not yet replicated far enough.
    Waiting,
}

/// Leader-side replication state of one partition for one leader epoch. A new leader epoch (or
/// losing leadership) means a new `LeaderState` (or none).
#[derive(Debug, Clone)]
pub struct LeaderState {
    leader: ReplicaId,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<ReplicaId>,
    isr: IsrState,
    followers: BTreeMap<ReplicaId, FollowerProgress>,
    high_watermark: i64,
    /// The leader's log end offset when it became leader: a follower joins the ISR only once it
    /// has everything up to here (it has then truncated whatever the old leader wrote past it).
    leader_epoch_start_offset: i64,
    replica_lag_time_max_ms: i64,
    /// Replicas that may not join the ISR now (fenced or shutting down in the metadata; Kafka's
    /// `isReplicaIsrEligible`): the high watermark does not wait for them unless they are in
    /// the ISR, and no expansion adds them.
    ineligible: Vec<ReplicaId>,
}

/// What a new leader starts from (the committed partition state and its own log).
#[derive(Debug, Clone)]
pub struct LeaderStart {
    pub leader: ReplicaId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<ReplicaId>,
    pub isr: Vec<ReplicaId>,
    /// The high watermark the leader had as a follower (or restored from its checkpoint).
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub replica_lag_time_max_ms: i64,
    pub now_ms: i64,
}

impl LeaderState {
    /// Becomes leader. ISR members get `now` as their last caught-up time, so none is removed
    /// before it had `replica.lag.time.max.ms` to fetch from the new leader (Kafka resets the
    /// followers' state the same way in `makeLeader`).
    pub fn new(start: LeaderStart) -> LeaderState {
        assert!(start.isr.contains(&start.leader), "a leader is always in its ISR: {start:?}");
        assert!(start.high_watermark <= start.log_end_offset, "high watermark past log end: {start:?}");
        let followers = start
            .replicas
            .iter()
            .filter(|&&r| r != start.leader)
            .map(|&r| {
                let in_isr = start.isr.contains(&r);
                let caught_up = if in_isr { start.now_ms } else { i64::MIN };
                (
                    r,
                    FollowerProgress {
                        log_end_offset: -1,
                        broker_epoch: -1,
                        log_start_offset: -1,
                        last_caught_up_time_ms: caught_up,
                        last_fetch_leader_log_end_offset: -1,
                        last_fetch_time_ms: i64::MIN,
                    },
                )
            })
            .collect();
        LeaderState {
            leader: start.leader,
            leader_epoch: start.leader_epoch,
            partition_epoch: start.partition_epoch,
            replicas: start.replicas,
            isr: IsrState::Committed { isr: start.isr },
            followers,
            high_watermark: start.high_watermark.max(0),
            leader_epoch_start_offset: start.log_end_offset,
            replica_lag_time_max_ms: start.replica_lag_time_max_ms,
            ineligible: Vec::new(),
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn isr_state(&self) -> &IsrState {
        &self.isr
    }
    pub fn isr(&self) -> &[ReplicaId] {
        self.isr.isr()
    }
    pub fn follower(&self, replica: ReplicaId) -> Option<&FollowerProgress> {
        self.followers.get(&replica)
    }

    /// A follower fetched (Kafka's `updateFollowerFetchState`, then ISR expansion and the high
    /// watermark).
    pub fn on_follower_fetch(&mut self, fetch: FollowerFetch) -> Result<FetchDecision, LeaderStateError> {
        let FollowerFetch { replica, broker_epoch, fetch_offset, log_start_offset, leader_log_end_offset, now_ms } =
            fetch;
        if fetch_offset > leader_log_end_offset {
            return Err(LeaderStateError::FetchPastLogEnd {
                replica,
                fetch_offset,
                log_end_offset: leader_log_end_offset,
            });
        }
        let Some(progress) = self.followers.get_mut(&replica) else {
            return Err(LeaderStateError::NotAReplica { replica, replicas: self.replicas.clone() });
        };
        if fetch_offset >= leader_log_end_offset {
            progress.last_caught_up_time_ms = progress.last_caught_up_time_ms.max(now_ms);
        } else if fetch_offset >= progress.last_fetch_leader_log_end_offset {
            progress.last_caught_up_time_ms = progress.last_caught_up_time_ms.max(progress.last_fetch_time_ms);
        }
        progress.last_fetch_leader_log_end_offset = leader_log_end_offset;
        progress.last_fetch_time_ms = now_ms;
        progress.log_end_offset = fetch_offset;
        progress.broker_epoch = broker_epoch;
        let log_start_offset_moved = progress.log_start_offset != log_start_offset;
        progress.log_start_offset = log_start_offset;

        let propose = self.maybe_expand_isr(replica);
        let high_watermark = self.maybe_advance_high_watermark(leader_log_end_offset, now_ms);
        Ok(FetchDecision { high_watermark, propose, log_start_offset_moved })
    }

    /// Kafka's `lowWatermarkIfLeader`: the smallest log start offset over the leader and every
    /// follower not fenced (one that has not fetched in this leader epoch counts as -1), what
    /// DeleteRecords waits for.
    pub fn low_watermark(&self, leader_log_start_offset: i64) -> i64 {
        self.followers
            .iter()
            .filter(|(r, _)| !self.ineligible.contains(r))
            .map(|(_, p)| p.log_start_offset)
            .fold(leader_log_start_offset, i64::min)
    }

    /// The leader appended; with an ISR of one the high watermark follows at once.
    pub fn on_leader_append(&mut self, leader_log_end_offset: i64, now_ms: i64) -> Option<i64> {
        self.maybe_advance_high_watermark(leader_log_end_offset, now_ms)
    }

    /// Kafka's `maybeIncrementLeaderHW`: the smallest log end offset over the maximal ISR and the
    /// caught-up replicas about to join it. Only ever moves forward.
    pub fn maybe_advance_high_watermark(&mut self, leader_log_end_offset: i64, now_ms: i64) -> Option<i64> {
        let maximal = self.isr.maximal_isr();
        let mut candidate = leader_log_end_offset;
        for (&replica, progress) in &self.followers {
            let waits = maximal.contains(&replica)
                || (!self.ineligible.contains(&replica)
                    && self.is_caught_up(progress, leader_log_end_offset, now_ms)
                    && progress.log_end_offset >= self.leader_epoch_start_offset);
            if waits {
                candidate = candidate.min(progress.log_end_offset);
            }
        }
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            assert!(self.high_watermark <= leader_log_end_offset, "high watermark past the leader's log end");
            Some(candidate)
        } else {
            None
        }
    }

    fn is_caught_up(&self, progress: &FollowerProgress, leader_log_end_offset: i64, now_ms: i64) -> bool {
        progress.log_end_offset == leader_log_end_offset
            || now_ms.saturating_sub(progress.last_caught_up_time_ms) <= self.replica_lag_time_max_ms
    }

    /// Kafka's `maybeExpandIsr`: a follower outside the ISR that has reached the high watermark
    /// and the start of this leader epoch joins (proposed; never applied locally first).
    fn maybe_expand_isr(&mut self, replica: ReplicaId) -> Option<IsrProposal> {
        if self.isr.is_pending() || self.isr.isr().contains(&replica) || self.ineligible.contains(&replica) {
            return None;
        }
        let progress = self.followers.get(&replica)?;
        let in_sync =
            progress.log_end_offset >= self.high_watermark && progress.log_end_offset >= self.leader_epoch_start_offset;
        if !in_sync {
            return None;
        }
        let isr = self.isr.isr().to_vec();
        let mut new_isr = isr.clone();
        new_isr.push(replica);
        self.isr = IsrState::PendingExpand { isr, adding: replica };
        Some(self.proposal(new_isr))
    }

    /// Kafka's `maybeShrinkIsr`: ISR followers that have not caught up for longer than
    /// `replica.lag.time.max.ms` leave (proposed). Called from the partition's timer.
    pub fn maybe_shrink_isr(&mut self, leader_log_end_offset: i64, now_ms: i64) -> Option<IsrProposal> {
        if self.isr.is_pending() {
            return None;
        }
        let isr = self.isr.isr().to_vec();
        let out: Vec<ReplicaId> = isr
            .iter()
            .copied()
            .filter(|&r| r != self.leader)
            .filter(|r| self.followers.get(r).is_some_and(|p| !self.is_caught_up(p, leader_log_end_offset, now_ms)))
            .collect();
        if out.is_empty() {
            return None;
        }
        let new_isr: Vec<ReplicaId> = isr.iter().copied().filter(|r| !out.contains(r)).collect();
        self.isr = IsrState::PendingShrink { isr, removing: out };
        Some(self.proposal(new_isr))
    }

    fn proposal(&self, new_isr: Vec<ReplicaId>) -> IsrProposal {
        assert!(new_isr.contains(&self.leader), "an ISR proposal must keep its leader: {new_isr:?}");
        let broker_epochs = new_isr
            .iter()
            .map(|r| if *r == self.leader { -1 } else { self.followers.get(r).map_or(-1, |p| p.broker_epoch) })
            .collect();
        IsrProposal {
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr,
            broker_epochs,
        }
    }

    /// The controller committed a partition state with this node still leader in the same leader
    /// epoch (an ISR change, ours or the controller's own, e.g. a fenced follower removed; or
    /// replicas added by a reassignment, which start out of sync and join once caught up).
    /// A state for another leader or epoch is not for this `LeaderState`: the caller replaces it.
    pub fn on_partition_committed(
        &mut self,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: &[ReplicaId],
        isr: Vec<ReplicaId>,
    ) {
        if leader_epoch != self.leader_epoch || partition_epoch <= self.partition_epoch {
            return;
        }
        assert!(isr.contains(&self.leader), "a committed ISR of this leader epoch lacks its leader: {isr:?}");
        // Within one leader epoch replicas only join (a leaving replica bumps the epoch).
        debug_assert!(
            self.replicas.iter().all(|r| replicas.contains(r)),
            "a replica left within leader epoch {leader_epoch}"
        );
        for &replica in replicas.iter().filter(|&&r| r != self.leader) {
            self.followers.entry(replica).or_insert(FollowerProgress {
                log_end_offset: -1,
                broker_epoch: -1,
                log_start_offset: -1,
                last_caught_up_time_ms: i64::MIN,
                last_fetch_leader_log_end_offset: -1,
                last_fetch_time_ms: i64::MIN,
            });
        }
        self.followers.retain(|r, _| replicas.contains(r));
        self.replicas = replicas.to_vec();
        self.partition_epoch = partition_epoch;
        self.isr = IsrState::Committed { isr };
    }

    /// The controller refused our proposal (stale partition epoch, ineligible replica): back to
    /// the committed ISR; the next fetch or timer tick decides again.
    /// The replicas that are fenced (or shutting down) as of the latest metadata.
    pub fn set_ineligible(&mut self, ineligible: Vec<ReplicaId>) {
        self.ineligible = ineligible;
    }

    pub fn on_proposal_rejected(&mut self, proposal: &IsrProposal) {
        if self.is_outstanding(proposal) {
            let isr = self.isr.isr().to_vec();
            self.isr = IsrState::Committed { isr };
        }
    }

    /// Whether `proposal` is the change this leader still waits for: same leader epoch, same
    /// partition epoch (nothing committed since) and the pending ISR it would make. An answer to
    /// any other (late, or one a commit has already overtaken) must not touch the state.
    pub fn is_outstanding(&self, proposal: &IsrProposal) -> bool {
        if proposal.leader_epoch != self.leader_epoch || proposal.partition_epoch != self.partition_epoch {
            return false;
        }
        let pending: Vec<ReplicaId> = match &self.isr {
            IsrState::Committed { .. } => return false,
            IsrState::PendingExpand { isr, adding } => isr.iter().copied().chain([*adding]).collect(),
            IsrState::PendingShrink { isr, removing } => {
                isr.iter().copied().filter(|r| !removing.contains(r)).collect()
            }
        };
        let (mut a, mut b) = (pending, proposal.new_isr.clone());
        a.sort_unstable();
        b.sort_unstable();
        a == b
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for an acks=all produce.
    pub fn ack_status(&self, required_offset: i64, min_insync_replicas: u32) -> AckStatus {
        if self.high_watermark < required_offset {
            return AckStatus::Waiting;
        }
        let isr = self.isr.isr().len();
        if isr < min_insync_replicas as usize {
            AckStatus::NotEnoughReplicasAfterAppend { isr, min_insync_replicas }
        } else {
            AckStatus::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: i64 = 30_000;

    fn fetch(replica: ReplicaId, fetch_offset: i64, leader_log_end_offset: i64, now_ms: i64) -> FollowerFetch {
        FollowerFetch {
            replica,
            broker_epoch: 100 + replica as i64,
            fetch_offset,
            log_start_offset: 0,
            leader_log_end_offset,
            now_ms,
        }
    }

    fn leader(isr: Vec<ReplicaId>, log_end_offset: i64, now_ms: i64) -> LeaderState {
        LeaderState::new(LeaderStart {
            leader: 1,
            leader_epoch: 5,
            partition_epoch: 7,
            replicas: vec![1, 2, 3],
            isr,
            high_watermark: 0,
            log_end_offset,
            replica_lag_time_max_ms: LAG,
            now_ms,
        })
    }

    #[test]
    fn a_fenced_replica_out_of_the_isr_holds_back_nothing() {
        // Proves the high watermark waits for a recently caught-up replica about to join only
        // while it is eligible: once fenced (killed), the ISR alone decides (it stalled before).
        let mut state = leader(vec![1, 2, 3], 0, 0);
        state.on_leader_append(10, 0);
        state.on_follower_fetch(fetch(2, 10, 10, 1)).unwrap();
        state.on_follower_fetch(fetch(3, 10, 10, 1)).unwrap();
        state.on_partition_committed(5, 8, &[1, 2, 3], vec![1, 2]);
        state.on_leader_append(20, 2);
        state.on_follower_fetch(fetch(2, 20, 20, 3)).unwrap();
        assert_eq!(state.high_watermark(), 10, "3 caught up 2 ms ago: about to join, waited for");
        state.set_ineligible(vec![3]);
        assert_eq!(state.maybe_advance_high_watermark(20, 4), Some(20));
        assert_eq!(state.on_follower_fetch(fetch(3, 20, 20, 5)).unwrap().propose, None, "no expansion while fenced");
    }

    #[test]
    fn a_replica_added_within_the_leader_epoch_fetches_and_joins_the_isr() {
        // Proves a reassignment's new replica is taken without a new leader epoch: its fetches
        // are accepted, it does not hold the high watermark back, and once caught up it is
        // proposed for the ISR; a replica no longer listed is forgotten.
        let mut state = LeaderState::new(LeaderStart {
            leader: 1,
            leader_epoch: 5,
            partition_epoch: 7,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            high_watermark: 0,
            log_end_offset: 0,
            replica_lag_time_max_ms: LAG,
            now_ms: 0,
        });
        state.on_leader_append(10, 1);
        assert!(state.on_follower_fetch(fetch(4, 0, 10, 1)).is_err(), "4 is not a replica yet");
        state.on_partition_committed(5, 8, &[1, 2, 4], vec![1, 2]);
        assert_eq!(state.on_follower_fetch(fetch(2, 10, 10, 2)).unwrap().high_watermark, Some(10));
        assert_eq!(state.on_follower_fetch(fetch(4, 0, 10, 3)).unwrap().propose, None, "not caught up");
        let decision = state.on_follower_fetch(fetch(4, 10, 10, 4)).unwrap();
        assert_eq!(decision.propose.map(|p| p.new_isr), Some(vec![1, 2, 4]));
        assert!(state.follower(4).is_some());
    }

    #[test]
    fn the_low_watermark_is_the_smallest_log_start_over_live_replicas() {
        // Proves Kafka's low watermark: the minimum log start offset over the leader and the
        // followers not fenced, -1 while a follower has not fetched, and a follower's new log
        // start offset is reported so DeleteRecords waiters wake.
        let mut state = leader(vec![1, 2, 3], 20, 0);
        assert_eq!(state.low_watermark(10), -1, "2 and 3 have not fetched");
        let at = |replica, log_start_offset| FollowerFetch { log_start_offset, ..fetch(replica, 20, 20, 1) };
        assert!(state.on_follower_fetch(at(2, 10)).unwrap().log_start_offset_moved);
        assert!(state.on_follower_fetch(at(3, 4)).unwrap().log_start_offset_moved);
        assert_eq!(state.low_watermark(10), 4);
        assert!(!state.on_follower_fetch(at(3, 4)).unwrap().log_start_offset_moved);
        assert!(state.on_follower_fetch(at(3, 10)).unwrap().log_start_offset_moved);
        assert_eq!(state.low_watermark(10), 10);
        state.on_follower_fetch(at(2, 7)).unwrap();
        state.set_ineligible(vec![2]);
        assert_eq!(state.low_watermark(10), 10, "a fenced replica is not waited for");
    }

    #[test]
    fn high_watermark_is_the_minimum_over_the_isr() {
        // Proves HW = min LEO over ISR members, moving only when the slowest one fetches.
        let mut state = leader(vec![1, 2, 3], 0, 0);
        assert_eq!(state.on_leader_append(10, 1), None);
        assert_eq!(state.on_follower_fetch(fetch(2, 10, 10, 2)).unwrap().high_watermark, None);
        assert_eq!(state.on_follower_fetch(fetch(3, 4, 10, 3)).unwrap().high_watermark, Some(4));
        assert_eq!(state.on_follower_fetch(fetch(3, 10, 10, 4)).unwrap().high_watermark, Some(10));
        assert_eq!(state.ack_status(10, 2), AckStatus::Done);
        assert_eq!(state.ack_status(11, 2), AckStatus::Waiting);
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_after_the_lag_time() {
        // Proves the shrink rule: not caught up for longer than replica.lag.time.max.ms.
        let mut state = leader(vec![1, 2, 3], 0, 0);
        state.on_leader_append(10, 0);
        state.on_follower_fetch(fetch(2, 10, 10, 100)).unwrap();
        assert_eq!(state.maybe_shrink_isr(10, LAG), None, "3 still within the lag time");
        let proposal = state.maybe_shrink_isr(10, LAG + 1).expect("3 is out");
        let expected = IsrProposal {
            leader: 1,
            leader_epoch: 5,
            partition_epoch: 7,
            new_isr: vec![1, 2],
            broker_epochs: vec![-1, 102],
        };
        assert_eq!(proposal, expected);
        // While the shrink is pending, 3 still holds the high watermark back.
        assert_eq!(state.maybe_advance_high_watermark(10, LAG + 2), None);
        state.on_partition_committed(5, 8, &[1, 2, 3], vec![1, 2]);
        assert_eq!(state.maybe_advance_high_watermark(10, LAG + 3), Some(10));
    }

    #[test]
    fn a_follower_that_keeps_fetching_behind_a_growing_leader_stays() {
        // Proves Kafka's caught-up rule: reaching what the leader had at the previous fetch counts.
        let mut state = leader(vec![1, 2], 0, 0);
        for step in 1..100 {
            let now = step * 1_000;
            let leader_end = step * 10;
            state.on_leader_append(leader_end, now);
            state.on_follower_fetch(fetch(2, leader_end - 10, leader_end, now)).unwrap();
            assert_eq!(state.maybe_shrink_isr(leader_end, now), None, "step {step}");
        }
    }

    #[test]
    fn expansion_waits_for_the_leader_epoch_start_and_is_proposed_once() {
        // Proves a follower joins only past HW and the epoch start, with one change in flight.
        let mut state = leader(vec![1], 20, 0);
        assert_eq!(state.on_leader_append(20, 0), Some(20));
        assert_eq!(state.on_follower_fetch(fetch(2, 15, 20, 1)).unwrap().propose, None, "below the epoch start");
        let decision = state.on_follower_fetch(fetch(2, 20, 20, 2)).unwrap();
        let proposal = decision.propose.expect("2 joins");
        assert_eq!(proposal.new_isr, vec![1, 2]);
        assert_eq!(state.on_follower_fetch(fetch(3, 20, 20, 3)).unwrap().propose, None, "one change at a time");
        // The replica being added holds the high watermark back already.
        assert_eq!(state.on_leader_append(25, 4), None);
        state.on_proposal_rejected(&proposal);
        assert_eq!(state.on_follower_fetch(fetch(3, 20, 25, 5)).unwrap().propose.map(|p| p.new_isr), Some(vec![1, 3]));
    }

    #[test]
    fn a_late_refusal_of_an_older_proposal_leaves_the_outstanding_one_pending() {
        // Proves an answer is tied to its proposal: P1 (add 2) is overtaken by a commit of the
        // controller's own (partition epoch 8), P2 (add 3) is proposed, and then P1's refusal
        // arrives: P2 stays pending (reverting it would let a third change be proposed while P2
        // may still commit). P2's own refusal reverts it.
        let mut state = leader(vec![1], 0, 0);
        state.on_leader_append(10, 0);
        let p1 = state.on_follower_fetch(fetch(2, 10, 10, 1)).unwrap().propose.expect("P1");
        state.on_partition_committed(5, 8, &[1, 2, 3], vec![1]);
        let p2 = state.on_follower_fetch(fetch(3, 10, 10, 2)).unwrap().propose.expect("P2");
        assert!(!state.is_outstanding(&p1) && state.is_outstanding(&p2));
        state.on_proposal_rejected(&p1);
        assert!(state.is_outstanding(&p2), "a late answer to P1 changed nothing");
        assert_eq!(state.on_follower_fetch(fetch(2, 10, 10, 3)).unwrap().propose, None, "one change at a time");
        state.on_proposal_rejected(&p2);
        assert!(!state.is_outstanding(&p2));
        assert!(state.on_follower_fetch(fetch(2, 10, 10, 4)).unwrap().propose.is_some(), "free to propose again");
    }

    #[test]
    fn acks_after_a_shrink_below_min_insync_fail_after_append() {
        // Proves NOT_ENOUGH_REPLICAS_AFTER_APPEND once the ISR is below min.insync.replicas.
        let mut state = leader(vec![1, 2], 0, 0);
        state.on_leader_append(5, 0);
        state.maybe_shrink_isr(5, LAG + 1).unwrap();
        state.on_partition_committed(5, 8, &[1, 2, 3], vec![1]);
        assert_eq!(state.maybe_advance_high_watermark(5, LAG + 2), Some(5));
        assert_eq!(state.ack_status(5, 2), AckStatus::NotEnoughReplicasAfterAppend { isr: 1, min_insync_replicas: 2 });
    }

    #[test]
    fn fetches_from_strangers_and_past_the_end_are_refused() {
        // Proves the two input errors.
        let mut state = leader(vec![1, 2], 10, 0);
        assert!(matches!(state.on_follower_fetch(fetch(9, 0, 10, 0)), Err(LeaderStateError::NotAReplica { .. })));
        assert!(matches!(state.on_follower_fetch(fetch(2, 11, 10, 0)), Err(LeaderStateError::FetchPastLogEnd { .. })));
    }
}
