//! ISR changes a leader proposes: an expansion when a follower catches up (from the fetch path)
//! and a shrink when one falls behind for `replica.lag.time.max.ms` (from the expiration loop),
//! both sent to the controller as `AlterPartition` and applied only once committed: the
//! partition learns the new ISR from the metadata image, never from its own proposal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::leader::IsrProposal;
use crate::controller::{ApplyOutcome, Controller, MetadataRecord};
use crate::metrics::Metrics;
use crate::partition::{Partition, ReplicaManager};

/// First pause before an ISR change whose proposal timed out or could not be forwarded is sent
/// again; each further failure doubles it up to [`MAX_RESEND_BACKOFF`] (Kafka's
/// AlterPartitionManager backs off exponentially too), so a metadata quorum without a leader
/// is not asked five times a second per partition.
const RESEND_BACKOFF: Duration = Duration::from_millis(200);
const MAX_RESEND_BACKOFF: Duration = Duration::from_secs(5);

/// Proposes `proposal` for `partition` in the background. Refused, the partition may propose
/// again; not answered (a timeout, a forwarding failure: it may still commit), it is sent again
/// while it is still the partition's outstanding change, as Kafka's AlterPartitionManager
/// retries: dropping it would let the leader propose another change while this one can still
/// commit (e.g. a follower added to the ISR after it fell behind again). On success the image
/// reconciliation hands the partition the committed ISR.
pub fn propose(controller: &Controller, metrics: &Arc<Metrics>, partition: Arc<Partition>, proposal: IsrProposal) {
    let controller = controller.clone();
    let metrics = metrics.clone();
    let shrinks = proposal.new_isr.len() < partition.isr().len();
    tokio::spawn(async move {
        let record = MetadataRecord::AlterPartition {
            topic: partition.topic().to_string(),
            partition: partition.index(),
            proposer: proposal.leader,
            leader_epoch: proposal.leader_epoch,
            partition_epoch: proposal.partition_epoch,
            new_isr: proposal.new_isr.clone(),
            broker_epochs: proposal.broker_epochs.clone(),
        };
        let mut backoff = RESEND_BACKOFF;
        let mut failures = 0u32;
        loop {
            match controller.propose(record.clone()).await {
                Ok(ApplyOutcome::Applied) => {
                    if shrinks {
                        metrics.isr_shrinks.inc();
                    } else {
                        metrics.isr_expands.inc();
                    }
                    tracing::info!(topic = %partition.topic(), partition = partition.index(), isr = ?proposal.new_isr, "ISR change committed");
                }
                Ok(outcome) => {
                    tracing::info!(topic = %partition.topic(), partition = partition.index(), ?outcome, isr = ?proposal.new_isr, "ISR change refused");
                    partition.on_isr_change_failed(&proposal);
                }
                Err(e) => {
                    // One warning per episode; the retries after it are debug lines.
                    if failures == 0 {
                        tracing::warn!(topic = %partition.topic(), partition = partition.index(), error = %e, "ISR change not answered; sending it again with backoff");
                    } else {
                        tracing::debug!(topic = %partition.topic(), partition = partition.index(), error = %e, failures, "ISR change still not answered");
                    }
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RESEND_BACKOFF);
                    if partition.isr_change_outstanding(&proposal) {
                        continue;
                    }
                }
            }
            return;
        }
    });
}

/// Kafka's `isr-expiration` task: every half `replica.lag.time.max.ms`, each partition this node
/// leads drops the followers that have not caught up within it.
pub async fn expiration_loop(
    replicas: Arc<ReplicaManager>,
    controller: Controller,
    metrics: Arc<Metrics>,
    replica_lag_time_max_ms: i64,
    mut stop: watch::Receiver<bool>,
) {
    let period = Duration::from_millis((replica_lag_time_max_ms / 2).max(50) as u64);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = ticker.tick() => {}
        }
        for partition in replicas.all() {
            if let Some(proposal) = partition.maybe_shrink_isr() {
                tracing::info!(topic = %partition.topic(), partition = partition.index(), isr = ?proposal.new_isr, "shrinking the ISR");
                propose(&controller, &metrics, partition, proposal);
            }
        }
    }
}
