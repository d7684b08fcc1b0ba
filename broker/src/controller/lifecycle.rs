//! Broker lifecycles on the active controller: leases kept by heartbeats, and the decision loop
//! that fences a broker whose lease expired (or that asked to shut down) and unfences one that
//! heartbeats with its current broker epoch (Kafka's `BrokerHeartbeatManager` and the fencing
//! half of `ReplicationControlManager`).
//!
//! Owns: the in-memory lease table (only meaningful on the raft leader; a new leader knows no
//! heartbeat, so a broker that sends none within `NEW_LEADER_GRACE` of the takeover, typically
//! the killed old controller, is fenced then) and the loop proposing `FenceBroker` /
//! `UnfenceBroker`, and completing partition reassignments whose target replicas are all in the
//! ISR.
//! Invariant: fencing and unfencing are decided only on the raft leader and only for the broker
//! epoch the image holds, so a late decision about an older incarnation never applies.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::record::{MetadataRecord, NodeId};
use super::Controller;

/// How long a broker whose heartbeat connection closed has to beat again before it is fenced.
pub(crate) const CONNECTION_LOSS_GRACE: Duration = Duration::from_millis(400);

/// How long a new active controller waits for a broker's first heartbeat before fencing it.
pub(crate) const NEW_LEADER_GRACE: Duration = Duration::from_millis(600);

/// How often the decision loop looks at the leases.
const DECISION_INTERVAL: Duration = Duration::from_millis(100);

/// The last heartbeat of each broker, as seen by this node while it leads the quorum.
pub(crate) struct Leases {
    table: Mutex<LeaseTable>,
    /// `broker.session.timeout.ms`.
    session: Duration,
    /// This node's applied metadata: each broker's registered epoch and fencing.
    image: Option<tokio::sync::watch::Receiver<std::sync::Arc<super::MetadataImage>>>,
}

#[derive(Default)]
struct LeaseTable {
    /// When this node last became the raft leader (`None` while it is not).
    leading_since: Option<Instant>,
    beats: HashMap<NodeId, Heartbeat>,
    /// Registrations (epoch, fenced) for a lease table without an image (unit tests).
    #[cfg(test)]
    registered: HashMap<NodeId, (i64, bool)>,
}

#[derive(Debug, Clone, Copy)]
struct Heartbeat {
    broker_epoch: i64,
    at: Instant,
    want_shutdown: bool,
}

impl Leases {
    pub(crate) fn new(session: Duration) -> Leases {
        Leases { table: Mutex::new(LeaseTable::default()), session, image: None }
    }

    /// Leases that read registrations from the node's applied metadata.
    pub(crate) fn with_image(
        session: Duration,
        image: tokio::sync::watch::Receiver<std::sync::Arc<super::MetadataImage>>,
    ) -> Leases {
        Leases { image: Some(image), ..Leases::new(session) }
    }

    /// `node_id`'s registered epoch and whether it is fenced.
    fn registration(&self, _table: &LeaseTable, node_id: NodeId) -> Option<(i64, bool)> {
        if let Some(image) = &self.image {
            return image.borrow().brokers.get(&node_id).map(|b| (b.broker_epoch, b.fenced));
        }
        #[cfg(test)]
        return _table.registered.get(&node_id).copied();
        #[cfg(not(test))]
        None
    }

    pub(crate) fn session(&self) -> Duration {
        self.session
    }

    pub(crate) fn session_ms(&self) -> u64 {
        self.session.as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a heartbeat received while this node leads.
    pub(crate) fn record(&self, node_id: NodeId, broker_epoch: i64, want_shutdown: bool) {
        let beat = Heartbeat { broker_epoch, at: Instant::now(), want_shutdown };
        self.lock().beats.insert(node_id, beat);
    }

    /// The connection `node_id` heartbeats on was closed by its end. A live broker reconnects and
    /// beats again at once; a killed one (the kernel closes its sockets) never does, so its lease
    /// is cut to [`CONNECTION_LOSS_GRACE`] from now instead of running a whole session.
    pub(crate) fn connection_lost(&self, node_id: NodeId) {
        let now = Instant::now();
        if let Some(beat) = self.lock().beats.get_mut(&node_id) {
            let cut = (now + CONNECTION_LOSS_GRACE).checked_sub(self.session).unwrap_or(beat.at);
            beat.at = beat.at.min(cut);
        }
    }

    /// Whether `record` registers a broker whose node id has a live session here (a fresh
    /// heartbeat not asking to shut down): a process registers once, when it starts, before it
    /// can beat, so that session is another process's (Kafka's DUPLICATE_BROKER_REGISTRATION).
    /// A killed process's session ends [`CONNECTION_LOSS_GRACE`] after its connection closes, so
    /// a restart waits that long at most; a clean shutdown's ends at once. Only meaningful on
    /// the leader (a new leader knows no session: it accepts).
    pub(crate) fn duplicate_registration(&self, record: &MetadataRecord) -> Option<NodeId> {
        let MetadataRecord::RegisterBroker { node_id, .. } = record else { return None };
        self.has_live_session(*node_id).then_some(*node_id)
    }

    /// Whether `node_id`'s registration is unfenced and heartbeats here (this node leads) with
    /// its registered epoch, within its session and not shutting down (Kafka's
    /// `hasValidSession(id, epoch)`): a fenced registration, or beats of an older epoch (a
    /// process woken after it was replaced), hold no session.
    pub(crate) fn has_live_session(&self, node_id: NodeId) -> bool {
        let table = self.lock();
        if table.leading_since.is_none() {
            return false;
        }
        let Some((epoch, fenced)) = self.registration(&table, node_id) else { return false };
        !fenced
            && table.beats.get(&node_id).is_some_and(|b| {
                b.broker_epoch == epoch
                    && Instant::now().saturating_duration_since(b.at) <= self.session
                    && !b.want_shutdown
            })
    }

    /// Registrations for a lease table without an image (unit tests).
    #[cfg(test)]
    fn set_registrations(&self, brokers: impl Iterator<Item = (NodeId, i64, bool)>) {
        self.lock().registered = brokers.map(|(id, epoch, fenced)| (id, (epoch, fenced))).collect();
    }

    /// The decision loop itself was held up for `gap` (this process stalled: a SIGSTOP, a
    /// starved runtime): heartbeats could not have been received meanwhile, so every lease is
    /// extended by the stall instead of expiring because of it.
    fn forgive_stall(&self, gap: Duration) {
        let mut table = self.lock();
        if let Some(since) = table.leading_since.as_mut() {
            *since += gap;
        }
        for beat in table.beats.values_mut() {
            beat.at += gap;
        }
    }

    /// Tracks raft leadership: leases start over whenever this node becomes the leader.
    fn set_leading(&self, leading: bool, now: Instant) {
        let mut table = self.lock();
        match (leading, table.leading_since) {
            (true, None) => {
                table.leading_since = Some(now);
                table.beats.clear();
            }
            (false, Some(_)) => {
                table.leading_since = None;
                table.beats.clear();
            }
            _ => {}
        }
    }

    /// What the leader should propose now for a broker with `broker_epoch`, `fenced` in the image.
    fn decide(&self, node_id: NodeId, broker_epoch: i64, fenced: bool, now: Instant) -> Decision {
        let session = self.session;
        let table = self.lock();
        let Some(leading_since) = table.leading_since else { return Decision::Nothing };
        let beat = table.beats.get(&node_id).filter(|b| b.broker_epoch == broker_epoch);
        let fresh = beat.is_some_and(|b| now.saturating_duration_since(b.at) <= session);
        let wants_shutdown = beat.is_some_and(|b| b.want_shutdown);
        if fenced {
            if fresh && !wants_shutdown {
                return Decision::Unfence;
            }
            return Decision::Nothing;
        }
        // Unfenced without a heartbeat since this node took over: live brokers learn the new
        // leader with the election and beat within an interval or two, so the grace is
        // [`NEW_LEADER_GRACE`] (at most a session); one that stays silent is most likely the old
        // controller itself, killed.
        let expired = match beat {
            Some(b) => now.saturating_duration_since(b.at) > session,
            None => now.saturating_duration_since(leading_since) > session.min(NEW_LEADER_GRACE),
        };
        if expired || wants_shutdown {
            Decision::Fence
        } else {
            Decision::Nothing
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Nothing,
    Fence,
    Unfence,
}

/// Runs until the controller stops: on the raft leader, proposes fencing for expired leases and
/// unfencing for brokers that heartbeat.
pub(crate) async fn decision_loop(inner: std::sync::Weak<super::Inner>, rebalance_every: Option<Duration>) {
    let mut last_rebalance = Instant::now();
    let mut ticker = tokio::time::interval(DECISION_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Measured across the wait only: time spent proposing below is not a stall.
        let waiting_since = Instant::now();
        ticker.tick().await;
        let gap = waiting_since.elapsed();
        let Some(inner) = inner.upgrade() else { return };
        let controller = Controller { inner };
        if controller.is_stopped() {
            return;
        }
        if gap > DECISION_INTERVAL * 3 {
            controller.leases().forgive_stall(gap - DECISION_INTERVAL);
        }
        let now = Instant::now();
        let leading = controller.leader_id() == Some(controller.node_id());
        controller.leases().set_leading(leading, now);
        if !leading {
            continue;
        }
        let image = controller.image();
        complete_reassignments(&controller, &image).await;
        elect_uncleanly_where_allowed(&controller, &image).await;
        if let Some(interval) = rebalance_every {
            if last_rebalance.elapsed() >= interval {
                last_rebalance = Instant::now();
                rebalance_leaders(&controller, &image).await;
            }
        }
        for broker in image.brokers.values() {
            let decision = controller.leases().decide(broker.node_id, broker.broker_epoch, broker.fenced, now);
            let record = match decision {
                Decision::Nothing => continue,
                Decision::Fence => {
                    tracing::info!(
                        node_id = broker.node_id,
                        broker_epoch = broker.broker_epoch,
                        "fencing a broker: its session expired or it is shutting down"
                    );
                    MetadataRecord::FenceBroker { node_id: broker.node_id, broker_epoch: broker.broker_epoch }
                }
                Decision::Unfence => {
                    tracing::info!(node_id = broker.node_id, broker_epoch = broker.broker_epoch, "unfencing a broker");
                    MetadataRecord::UnfenceBroker { node_id: broker.node_id, broker_epoch: broker.broker_epoch }
                }
            };
            if let Err(e) = controller.propose(record).await {
                tracing::debug!(node_id = broker.node_id, error = %e, "broker lifecycle change not committed; retrying");
            }
        }
    }
}

/// Kafka's `leader.imbalance.per.broker.percentage` default: a broker whose preferred partitions
/// are led elsewhere beyond this share gets them back.
const LEADER_IMBALANCE_PER_BROKER_PERCENTAGE: usize = 10;

/// `auto.leader.rebalance.enable`: for every broker whose share of preferred partitions (it is
/// their first replica) led by others exceeds 10 %, those whose preferred replica is live and in
/// the ISR elect it again (a restarted node takes its leaderships back once it has caught up).
async fn rebalance_leaders(controller: &Controller, image: &super::MetadataImage) {
    let mut preferred: HashMap<NodeId, (usize, usize)> = HashMap::new();
    for p in image.topics.values().flat_map(|t| t.partitions.iter()) {
        if let Some(&first) = p.replicas.first() {
            let entry = preferred.entry(first).or_default();
            entry.0 += 1;
            if p.leader != Some(first) {
                entry.1 += 1;
            }
        }
    }
    for topic in image.topics.values() {
        for p in &topic.partitions {
            let Some(&first) = p.replicas.first() else { continue };
            let (total, elsewhere) = preferred.get(&first).copied().unwrap_or_default();
            if elsewhere * 100 <= total * LEADER_IMBALANCE_PER_BROKER_PERCENTAGE {
                continue;
            }
            let Ok(decision) = super::election::elect_preferred(&p.election_state(), |r| image.is_live(r)) else {
                continue;
            };
            match controller.propose(p.change_record(&topic.name, decision)).await {
                Ok(super::ApplyOutcome::Applied) => {
                    tracing::info!(topic = %topic.name, partition = p.partition, leader = first, "preferred leader elected")
                }
                Ok(outcome) => tracing::debug!(?outcome, "preferred leader election not applied"),
                Err(e) => tracing::debug!(error = %e, "preferred leader election not committed"),
            }
        }
    }
}

/// Every reassignment whose target replicas have all joined the ISR completes (Kafka does it in
/// the ISR change that makes it possible; here the next tick does, from the partition epoch it
/// saw): the removed replicas leave the replica list and the ISR, a removed leader hands over to
/// the first live target replica of the ISR, and the removed brokers then delete their copies.
async fn complete_reassignments(controller: &Controller, image: &super::MetadataImage) {
    for topic in image.topics.values() {
        for p in topic.partitions.iter().filter(|p| p.is_reassigning()) {
            let Some(change) =
                super::election::complete_reassignment(&p.election_state(), &p.reassignment(), |r| image.is_live(r))
            else {
                continue;
            };
            let (replicas, leader) = (change.replicas.clone(), change.leader);
            match controller.propose(p.reassignment_record(&topic.name, change)).await {
                Ok(super::ApplyOutcome::Applied) => {
                    tracing::info!(topic = %topic.name, partition = p.partition, ?replicas, ?leader, "partition reassignment completed")
                }
                Ok(outcome) => tracing::debug!(?outcome, "reassignment completion not applied"),
                Err(e) => tracing::debug!(error = %e, "reassignment completion not committed"),
            }
        }
    }
}

/// Which topics allow an out-of-sync replica to lead (`unclean.leader.election.enable`, the
/// topic's effective value): set by the node, which knows the broker defaults.
pub type UncleanPolicy = Box<dyn Fn(&super::TopicImage) -> bool + Send + Sync>;

/// Offline partitions (no live ISR member) of topics that allow it get the first live replica as
/// leader with an ISR of itself alone: records the old ISR acknowledged and it lacks are lost,
/// which is why Kafka (and Runnel) default to waiting for an ISR member instead.
async fn elect_uncleanly_where_allowed(controller: &Controller, image: &super::MetadataImage) {
    let Some(allowed) = controller.inner.unclean_policy.get() else { return };
    for topic in image.topics.values() {
        if !topic.partitions.iter().any(|p| p.leader.is_none()) || !allowed(topic) {
            continue;
        }
        for p in topic.partitions.iter().filter(|p| p.leader.is_none()) {
            let decision = super::election::elect_leader(&p.election_state(), |r| image.is_live(r), true);
            let Some(leader) = decision.leader.filter(|_| decision.unclean) else { continue };
            tracing::warn!(topic = %topic.name, partition = p.partition, leader, old_isr = ?p.isr,
                "unclean leader election: an out-of-sync replica leads; records only the old ISR had are lost");
            match controller.propose(p.change_record(&topic.name, decision)).await {
                Ok(super::ApplyOutcome::Applied) => {
                    controller.inner.unclean_elections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(outcome) => tracing::debug!(?outcome, "unclean election not applied"),
                Err(e) => tracing::debug!(error = %e, "unclean election not committed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_fence_the_silent_and_unfence_the_current_incarnation() {
        // Proves the lease rules: a new leader grants one session, a stale epoch's heartbeat
        // counts for nothing, a shutdown request fences, a fresh heartbeat unfences.
        let session = Duration::from_millis(1000);
        let leases = Leases::new(session);
        let t0 = Instant::now();
        assert_eq!(leases.decide(1, 5, false, t0), Decision::Nothing, "not leading");
        leases.set_leading(true, t0);
        assert_eq!(leases.decide(1, 5, false, t0 + Duration::from_millis(500)), Decision::Nothing);
        assert_eq!(leases.decide(1, 5, false, t0 + Duration::from_millis(700)), Decision::Fence, "no first beat");
        leases.record(1, 4, false);
        let now = Instant::now();
        assert_eq!(leases.decide(1, 5, true, now), Decision::Nothing, "an older incarnation's beat");
        leases.record(1, 5, false);
        assert_eq!(leases.decide(1, 5, true, now), Decision::Unfence);
        assert_eq!(leases.decide(1, 5, false, now), Decision::Nothing);
        assert_eq!(leases.decide(1, 5, false, now + Duration::from_millis(1500)), Decision::Fence);
        leases.record(1, 5, true);
        assert_eq!(leases.decide(1, 5, false, Instant::now()), Decision::Fence, "shutting down");
        assert_eq!(leases.decide(1, 5, true, Instant::now()), Decision::Nothing, "stays fenced");
        leases.set_leading(false, Instant::now());
        assert_eq!(leases.decide(1, 5, false, Instant::now()), Decision::Nothing);
    }

    #[test]
    fn a_closed_heartbeat_connection_cuts_the_lease_to_the_grace() {
        // Proves a killed broker (its connection closed, no new beat) is fenced after the grace,
        // not the session, and one that beats again keeps its whole session.
        let session = Duration::from_millis(1000);
        let leases = Leases::new(session);
        let t0 = Instant::now();
        leases.set_leading(true, t0);
        leases.record(1, 5, false);
        leases.connection_lost(1);
        let after_grace = Instant::now() + CONNECTION_LOSS_GRACE + Duration::from_millis(10);
        assert_eq!(leases.decide(1, 5, false, after_grace), Decision::Fence);
        leases.record(1, 5, false);
        assert_eq!(leases.decide(1, 5, false, after_grace), Decision::Nothing, "it beat again");
    }

    #[test]
    fn only_a_live_session_of_the_registered_unfenced_epoch_refuses_a_new_registration() {
        // Proves the duplicate-registration rule (Kafka's hasValidSession(id, epoch)): beats of
        // an older epoch (a process woken after it was replaced), a fenced registration, a
        // shutdown and a node that does not lead refuse nothing; a live beat of the registered
        // epoch does.
        let leases = Leases::new(Duration::from_millis(1000));
        let register =
            MetadataRecord::RegisterBroker { node_id: 1, host: "h".into(), port: 1, rack: None, listeners: vec![] };
        leases.set_registrations([(1, 5, false)].into_iter());
        leases.record(1, 5, false);
        assert_eq!(leases.duplicate_registration(&register), None, "not leading");
        leases.set_leading(true, Instant::now());
        leases.record(1, 4, false);
        assert_eq!(leases.duplicate_registration(&register), None, "an older epoch's beat");
        leases.record(1, 5, false);
        assert_eq!(leases.duplicate_registration(&register), Some(1), "the registered epoch is alive");
        leases.set_registrations([(1, 5, true)].into_iter());
        assert_eq!(leases.duplicate_registration(&register), None, "fenced");
        leases.set_registrations([(1, 5, false)].into_iter());
        leases.record(1, 5, true);
        assert_eq!(leases.duplicate_registration(&register), None, "shutting down");
    }
}
