//! The follower side of leader-epoch truncation (KIP-101, KIP-279), as a pure decision: given
//! what the leader answered to OffsetForLeaderEpoch, where does the follower cut its log before
//! fetching, and is it done or must it ask again for an older epoch.
//!
//! Invariant: the follower never truncates below the point both logs agree on as far as the
//! epochs tell, and never keeps an offset written in an epoch the leader ended earlier: after
//! the completed truncation, every record the follower keeps is in the leader's log at the same
//! offset with the same epoch (`tests/replication_model.rs` checks this across schedules).

/// What the follower knows of its own log: Kafka's `LeaderEpochFileCache` lookups.
pub trait EpochLookup {
    /// The largest epoch the follower has records of, if any.
    fn latest_epoch(&self) -> Option<i32>;
    /// Kafka's `LeaderEpochFileCache.endOffsetFor`: for `epoch`, the largest known epoch at or
    /// below it and the offset where the next higher epoch starts (the log end offset when `epoch`
    /// is the latest); `(epoch, start of the earliest epoch)` when `epoch` is older than every
    /// known one; `None` when nothing is known or `epoch` is newer than the latest.
    fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)>;
}

/// The leader's OffsetForLeaderEpoch answer for the epoch the follower asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderEpochEnd {
    /// The largest epoch at or below the requested one that the leader has (-1: none).
    pub leader_epoch: i32,
    /// Where that epoch ends in the leader's log (-1: undefined).
    pub end_offset: i64,
}

/// Where to cut, and whether the follower may start fetching afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Truncate the log to this offset (records at and after it go).
    pub offset: i64,
    /// False: ask the leader again about the follower's latest epoch after truncating (the
    /// follower had an epoch the leader never had; KIP-279's repeated round).
    pub completed: bool,
}

/// Kafka's `AbstractFetcherThread.getOffsetTruncationState`. `high_watermark` is the
/// follower's, used when the leader has no end offset for the epoch asked about (then only what
/// is known committed is kept).
pub fn truncation_for(
    local: &impl EpochLookup,
    log_end_offset: i64,
    high_watermark: i64,
    answer: LeaderEpochEnd,
) -> Truncation {
    if answer.end_offset < 0 {
        // The leader knows nothing as old as this: keep only what was committed.
        return Truncation { offset: high_watermark.min(log_end_offset), completed: true };
    }
    if answer.leader_epoch < 0 {
        return Truncation { offset: answer.end_offset.min(log_end_offset), completed: true };
    }
    match local.end_offset_for(answer.leader_epoch) {
        // We have the leader's epoch (always so when it answered with the epoch we asked about):
        // both logs agree up to where the first of the two copies of that epoch ends.
        Some((local_epoch, local_end)) if local_epoch == answer.leader_epoch => {
            Truncation { offset: answer.end_offset.min(local_end).min(log_end_offset), completed: true }
        }
        // We lack the leader's epoch: cut at the end of our largest epoch below it and ask
        // again with that one (KIP-279's extra round).
        Some((_, local_end)) => Truncation { offset: local_end.min(log_end_offset), completed: false },
        // We know no epochs (or only newer ones than the leader has, which cannot happen): the
        // leader's end is the safe cut.
        None => Truncation { offset: answer.end_offset.min(log_end_offset), completed: true },
    }
}

/// Kafka's `endOffsetFor` over epoch start entries (strictly increasing in epoch and offset) and
/// a log end offset: the reference the partition's epoch cache and tests implement.
pub fn kafka_end_offset_for(starts: &[(i32, i64)], log_end_offset: i64, epoch: i32) -> Option<(i32, i64)> {
    let &(latest, _) = starts.last()?;
    if epoch == latest {
        return Some((epoch, log_end_offset));
    }
    let higher = starts.iter().position(|&(e, _)| e > epoch)?;
    match higher.checked_sub(1) {
        None => Some((epoch, starts[higher].1)),
        Some(floor) => Some((starts[floor].0, starts[higher].1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Epoch starts as a leader-epoch-checkpoint holds them, plus the log end.
    struct Epochs(Vec<(i32, i64)>, i64);

    impl EpochLookup for Epochs {
        fn latest_epoch(&self) -> Option<i32> {
            self.0.last().map(|&(e, _)| e)
        }
        fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
            kafka_end_offset_for(&self.0, self.1, epoch)
        }
    }

    #[test]
    fn a_follower_whose_epochs_all_postdate_the_leaders_cuts_everything() {
        // Proves the older-than-all rule: a follower that only wrote as a zombie in epoch 1 keeps
        // nothing of it when the leader's log is epoch 0 up to 3.
        let local = Epochs(vec![(1, 0)], 3);
        let cut = truncation_for(&local, 3, 0, LeaderEpochEnd { leader_epoch: 0, end_offset: 3 });
        assert_eq!(cut, Truncation { offset: 0, completed: true });
    }

    #[test]
    fn same_epoch_cuts_at_the_leader_end() {
        // Proves KIP-101: same epoch, the follower cuts at the leader's end of it.
        let local = Epochs(vec![(0, 0), (1, 10)], 20);
        let cut = truncation_for(&local, 20, 5, LeaderEpochEnd { leader_epoch: 1, end_offset: 15 });
        assert_eq!(cut, Truncation { offset: 15, completed: true });
        let cut = truncation_for(&local, 20, 5, LeaderEpochEnd { leader_epoch: 1, end_offset: 30 });
        assert_eq!(cut, Truncation { offset: 20, completed: true }, "never past our own end");
    }

    #[test]
    fn an_epoch_the_leader_never_had_is_cut_away() {
        // Proves KIP-279: follower wrote in epoch 2 as a zombie leader; the leader went 1 → 3.
        let local = Epochs(vec![(0, 0), (1, 10), (2, 18)], 25);
        let cut = truncation_for(&local, 25, 12, LeaderEpochEnd { leader_epoch: 1, end_offset: 16 });
        assert_eq!(cut, Truncation { offset: 16, completed: true });
    }

    #[test]
    fn a_missing_intermediate_epoch_needs_another_round() {
        // Proves the multi-epoch case: we lack the leader's epoch, cut to ours below it, ask again.
        let local = Epochs(vec![(0, 0), (3, 10)], 25);
        let cut = truncation_for(&local, 25, 5, LeaderEpochEnd { leader_epoch: 2, end_offset: 14 });
        assert_eq!(cut, Truncation { offset: 10, completed: false });
        // Next round asks about epoch 0: the leader has it and says it ended at 8.
        let local = Epochs(vec![(0, 0)], 10);
        let cut = truncation_for(&local, 10, 5, LeaderEpochEnd { leader_epoch: 0, end_offset: 8 });
        assert_eq!(cut, Truncation { offset: 8, completed: true });
    }

    #[test]
    fn no_epoch_information_keeps_the_committed_prefix() {
        // Proves the fallback: the leader answered undefined, truncate to the high watermark.
        let local = Epochs(vec![(4, 0)], 25);
        let cut = truncation_for(&local, 25, 7, LeaderEpochEnd { leader_epoch: -1, end_offset: -1 });
        assert_eq!(cut, Truncation { offset: 7, completed: true });
    }
}
