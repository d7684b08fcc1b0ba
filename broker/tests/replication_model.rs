//! Seeded simulation of one partition (RF=3, min.insync.replicas=2, acks=all) driven through the
//! pure replication cores: `replication::leader` on the leader, `replication::truncation` on
//! followers, `controller::election` on the controller. Each schedule interleaves produces,
//! follower fetches, OffsetForLeaderEpoch truncation, ISR proposals delivered late, metadata
//! reaching each node late (zombie leaders), kill -9, SIGSTOP/SIGCONT, session expiry, restarts
//! and lost data dirs, then heals the cluster and checks Jepsen's anomalies: lost writes
//! (acknowledged, not in the final log), inconsistent offsets (two values at one offset, among
//! acknowledgements or reads), reads of records that were later lost, and replicas that differ.
//!
//! `RUNNEL_SIM_SEED=<n>` replays one schedule (the seed is printed on failure);
//! `RUNNEL_SIM_SCHEDULES=<n>` runs more (the default keeps this test at a few seconds).

use std::collections::{BTreeMap, VecDeque};

use runnel::controller::election::{
    check_alter_partition, elect_leader, on_broker_fenced, AlterPartition, PartitionDecision, PartitionState,
};
use runnel::replication::leader::{AckStatus, FollowerFetch, IsrProposal, LeaderStart, LeaderState, LeaderStateError};
use runnel::replication::truncation::{kafka_end_offset_for, truncation_for, EpochLookup, LeaderEpochEnd};

const REPLICAS: [u64; 3] = [1, 2, 3];
const MIN_INSYNC: u32 = 2;
const LAG_MS: i64 = 30_000;
const REQUEST_TIMEOUT_MS: i64 = 30_000;
const STEPS: usize = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    epoch: i32,
    value: u64,
}

/// splitmix64: small, seedable, good enough to pick events.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A node's epoch lookups over its log (plus, on a leader, the epoch it leads, which Kafka puts in
/// the cache at its start offset on becoming leader even before any record).
struct LogEpochs<'a> {
    log: &'a [Entry],
    leading: Option<(i32, i64)>,
}

impl LogEpochs<'_> {
    fn starts(&self) -> Vec<(i32, i64)> {
        let mut starts: Vec<(i32, i64)> = Vec::new();
        for (offset, entry) in self.log.iter().enumerate() {
            if starts.last().is_none_or(|&(e, _)| e != entry.epoch) {
                starts.push((entry.epoch, offset as i64));
            }
        }
        if let Some((epoch, start)) = self.leading {
            if starts.last().is_none_or(|&(e, _)| e < epoch) {
                starts.push((epoch, start));
            }
        }
        starts
    }
}

impl EpochLookup for LogEpochs<'_> {
    fn latest_epoch(&self) -> Option<i32> {
        self.starts().last().map(|&(e, _)| e)
    }
    fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
        kafka_end_offset_for(&self.starts(), self.log.len() as i64, epoch)
    }
}

enum Role {
    Down,
    Leader { state: LeaderState, epoch_start: i64 },
    Follower { leader_epoch: i32, truncated: bool },
}

struct Node {
    id: u64,
    log: Vec<Entry>,
    high_watermark: i64,
    alive: bool,
    paused: bool,
    /// The partition state as this node last learned it from the metadata log.
    view: Option<PartitionState>,
    role: Role,
}

impl Node {
    fn log_end_offset(&self) -> i64 {
        self.log.len() as i64
    }
    fn running(&self) -> bool {
        self.alive && !self.paused
    }
}

struct Pending {
    node: u64,
    leader_epoch: i32,
    required_offset: i64,
    value: u64,
    deadline_ms: i64,
}

struct Sim {
    rng: Rng,
    nodes: Vec<Node>,
    controller: PartitionState,
    fenced: [bool; 3],
    /// Broker epoch of each node's current registration (bumped by every restart).
    broker_epochs: [i64; 3],
    now_ms: i64,
    next_value: u64,
    pending: Vec<Pending>,
    proposals: VecDeque<(u64, IsrProposal)>,
    acked: BTreeMap<i64, u64>,
    reads: BTreeMap<i64, u64>,
    anomalies: Vec<String>,
    trace: Vec<String>,
    stats: Stats,
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    acked: u64,
    refused: u64,
    timed_out: u64,
    elections: u64,
    truncations: u64,
}

fn idx(id: u64) -> usize {
    (id - 1) as usize
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let controller = PartitionState {
            replicas: REPLICAS.to_vec(),
            isr: REPLICAS.to_vec(),
            leader: Some(1),
            leader_epoch: 0,
            partition_epoch: 0,
        };
        let nodes = REPLICAS
            .iter()
            .map(|&id| Node {
                id,
                log: Vec::new(),
                high_watermark: 0,
                alive: true,
                paused: false,
                view: None,
                role: Role::Down,
            })
            .collect();
        let mut sim = Sim {
            rng: Rng(seed),
            nodes,
            controller,
            fenced: [false; 3],
            broker_epochs: [1, 2, 3],
            now_ms: 0,
            next_value: 1,
            pending: Vec::new(),
            proposals: VecDeque::new(),
            acked: BTreeMap::new(),
            reads: BTreeMap::new(),
            anomalies: Vec::new(),
            trace: Vec::new(),
            stats: Stats::default(),
        };
        for id in REPLICAS {
            sim.sync_image(id);
        }
        sim
    }

    fn live(&self) -> impl Fn(u64) -> bool + '_ {
        |r| !self.fenced[idx(r)]
    }

    fn apply(&mut self, decision: PartitionDecision, why: &str) {
        if decision.leader != self.controller.leader {
            self.controller.leader_epoch += 1;
            self.stats.elections += 1;
        }
        self.controller.leader = decision.leader;
        self.controller.isr = decision.isr;
        self.controller.partition_epoch += 1;
        assert!(!decision.unclean, "unclean election is off");
        self.trace.push(format!(
            "  controller ({why}): leader {:?} epoch {} isr {:?} pe {}",
            self.controller.leader, self.controller.leader_epoch, self.controller.isr, self.controller.partition_epoch
        ));
    }

    /// The node learns the committed partition state and acts on it.
    fn sync_image(&mut self, id: u64) {
        let state = self.controller.clone();
        let now_ms = self.now_ms;
        let node = &mut self.nodes[idx(id)];
        if !node.running() {
            return;
        }
        node.view = Some(state.clone());
        let lost_leadership = match &mut node.role {
            Role::Leader { state: leader, .. }
                if state.leader == Some(id) && leader.leader_epoch() == state.leader_epoch =>
            {
                leader.on_partition_committed(
                    state.leader_epoch,
                    state.partition_epoch,
                    &state.replicas,
                    state.isr.clone(),
                );
                false
            }
            Role::Leader { .. } => true,
            _ => false,
        };
        if state.leader == Some(id) {
            if !matches!(&node.role, Role::Leader { state: l, .. } if l.leader_epoch() == state.leader_epoch) {
                let leader = LeaderState::new(LeaderStart {
                    leader: id,
                    leader_epoch: state.leader_epoch,
                    partition_epoch: state.partition_epoch,
                    replicas: state.replicas.clone(),
                    isr: state.isr.clone(),
                    high_watermark: node.high_watermark,
                    log_end_offset: node.log_end_offset(),
                    replica_lag_time_max_ms: LAG_MS,
                    now_ms,
                });
                node.role = Role::Leader { state: leader, epoch_start: node.log_end_offset() };
            }
        } else {
            let keep = matches!(node.role, Role::Follower { leader_epoch, .. } if leader_epoch == state.leader_epoch);
            if !keep {
                node.role = Role::Follower { leader_epoch: state.leader_epoch, truncated: false };
            }
        }
        if lost_leadership || state.leader != Some(id) {
            self.pending.retain(|p| p.node != id);
        }
        self.advance(id);
    }

    /// Re-evaluates the high watermark of a leader and completes its acks=all produces.
    fn advance(&mut self, id: u64) {
        let now_ms = self.now_ms;
        let node = &mut self.nodes[idx(id)];
        let Role::Leader { state, .. } = &mut node.role else { return };
        let end = node.log.len() as i64;
        state.maybe_advance_high_watermark(end, now_ms);
        node.high_watermark = state.high_watermark();
        let epoch = state.leader_epoch();
        let mut done = Vec::new();
        self.pending.retain(|p| {
            if p.node != id || p.leader_epoch != epoch {
                return true;
            }
            match state.ack_status(p.required_offset, MIN_INSYNC) {
                AckStatus::Waiting => true,
                AckStatus::Done => {
                    done.push((p.required_offset - 1, p.value));
                    false
                }
                AckStatus::NotEnoughReplicasAfterAppend { .. } => false,
            }
        });
        for (offset, value) in done {
            self.stats.acked += 1;
            self.trace.push(format!("  ack offset {offset} = v{value} (node {id})"));
            if let Some(previous) = self.acked.insert(offset, value) {
                self.anomalies.push(format!("inconsistent offset {offset}: acknowledged v{previous} and v{value}"));
            }
        }
    }

    fn produce(&mut self, id: u64) {
        let now_ms = self.now_ms;
        let value = self.next_value;
        let node = &mut self.nodes[idx(id)];
        let Role::Leader { state, .. } = &mut node.role else { return };
        if state.isr().len() < MIN_INSYNC as usize {
            self.stats.refused += 1;
            return;
        }
        self.next_value += 1;
        node.log.push(Entry { epoch: state.leader_epoch(), value });
        let end = node.log.len() as i64;
        state.on_leader_append(end, now_ms);
        self.trace.push(format!("produce v{value} at {} on node {id} (epoch {})", end - 1, state.leader_epoch()));
        self.pending.push(Pending {
            node: id,
            leader_epoch: state.leader_epoch(),
            required_offset: end,
            value,
            deadline_ms: now_ms + REQUEST_TIMEOUT_MS,
        });
        self.advance(id);
    }

    /// One round of follower `id`: truncation if it still owes one, else one fetch.
    fn fetch(&mut self, id: u64, max_records: usize) {
        let now_ms = self.now_ms;
        let Some(view) = self.nodes[idx(id)].view.clone() else { return };
        let Some(leader_id) = view.leader else { return };
        if leader_id == id {
            return;
        }
        let (leader_epoch, truncated) = match self.nodes[idx(id)].role {
            Role::Follower { leader_epoch, truncated } => (leader_epoch, truncated),
            _ => return,
        };
        let (follower, leader) = two(&mut self.nodes, idx(id), idx(leader_id));
        if !follower.running() || !leader.running() {
            return;
        }
        let Role::Leader { state, epoch_start } = &mut leader.role else { return };
        if state.leader_epoch() != leader_epoch {
            return; // FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH: the follower waits for metadata.
        }
        if !truncated {
            let own = LogEpochs { log: &follower.log, leading: None };
            let cut = match own.latest_epoch() {
                None => None,
                Some(asked) => {
                    let leaders = LogEpochs { log: &leader.log, leading: Some((state.leader_epoch(), *epoch_start)) };
                    let answer = match leaders.end_offset_for(asked) {
                        Some((leader_epoch, end_offset)) => LeaderEpochEnd { leader_epoch, end_offset },
                        None => LeaderEpochEnd { leader_epoch: -1, end_offset: -1 },
                    };
                    Some(truncation_for(&own, follower.log_end_offset(), follower.high_watermark, answer))
                }
            };
            let completed = match cut {
                None => true,
                Some(cut) => {
                    if cut.offset < follower.log_end_offset() {
                        self.stats.truncations += 1;
                        self.trace.push(format!(
                            "  node {id} truncates {} -> {}",
                            follower.log_end_offset(),
                            cut.offset
                        ));
                    }
                    follower.log.truncate(cut.offset.max(0) as usize);
                    follower.high_watermark = follower.high_watermark.min(follower.log_end_offset());
                    cut.completed
                }
            };
            follower.role = Role::Follower { leader_epoch, truncated: completed };
            return;
        }
        let fetch_offset = follower.log_end_offset();
        let leader_end = leader.log.len() as i64;
        let broker_epoch = self.broker_epochs[idx(id)];
        let fetch = FollowerFetch {
            replica: id,
            broker_epoch,
            fetch_offset,
            log_start_offset: 0,
            leader_log_end_offset: leader_end,
            now_ms,
        };
        match state.on_follower_fetch(fetch) {
            Ok(decision) => {
                let to = (fetch_offset as usize + max_records).min(leader.log.len());
                follower.log.extend_from_slice(&leader.log[fetch_offset as usize..to]);
                let learned = state.high_watermark().min(follower.log_end_offset());
                follower.high_watermark = follower.high_watermark.max(learned).min(follower.log_end_offset());
                if let Some(proposal) = decision.propose {
                    self.trace.push(format!("  node {leader_id} proposes isr {:?}", proposal.new_isr));
                    self.proposals.push_back((leader_id, proposal));
                }
                self.advance(leader_id);
            }
            Err(LeaderStateError::FetchPastLogEnd { .. }) => {
                follower.role = Role::Follower { leader_epoch, truncated: false };
            }
            Err(e @ LeaderStateError::NotAReplica { .. }) => panic!("{e}"),
        }
    }

    fn deliver_proposal(&mut self) {
        let Some((proposer, proposal)) = self.proposals.pop_front() else { return };
        let change = AlterPartition {
            proposer,
            leader_epoch: proposal.leader_epoch,
            partition_epoch: proposal.partition_epoch,
            new_isr: &proposal.new_isr,
            broker_epochs: &proposal.broker_epochs,
        };
        let checked = check_alter_partition(&self.controller, change, |r| {
            (!self.fenced[idx(r)]).then_some(self.broker_epochs[idx(r)])
        });
        match checked {
            Ok(()) => {
                let leader = self.controller.leader;
                self.apply(
                    PartitionDecision { leader, isr: proposal.new_isr.clone(), unclean: false },
                    "alter partition",
                );
                self.sync_image(proposer);
            }
            Err(e) => {
                self.trace.push(format!("  proposal of node {proposer} refused: {e}"));
                // The answer reaches a paused proposer when it resumes, so only a dead one misses it.
                let node = &mut self.nodes[idx(proposer)];
                if node.alive {
                    if let Role::Leader { state, .. } = &mut node.role {
                        // An answer to another proposal than the outstanding one changes nothing.
                        state.on_proposal_rejected(&proposal);
                    }
                }
            }
        }
    }

    fn tick(&mut self, ms: i64) {
        self.now_ms += ms;
        let now_ms = self.now_ms;
        for node in &mut self.nodes {
            if !node.running() {
                continue;
            }
            let end = node.log_end_offset();
            if let Role::Leader { state, .. } = &mut node.role {
                if let Some(proposal) = state.maybe_shrink_isr(end, now_ms) {
                    self.trace.push(format!("  node {} proposes shrink to {:?}", node.id, proposal.new_isr));
                    self.proposals.push_back((node.id, proposal));
                }
            }
        }
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline_ms >= now_ms);
        self.stats.timed_out += (before - self.pending.len()) as u64;
    }

    fn read(&mut self, id: u64) {
        let node = &self.nodes[idx(id)];
        if !node.running() || !matches!(node.role, Role::Leader { .. }) || node.high_watermark == 0 {
            return;
        }
        let offset = self.rng.below(node.high_watermark as u64) as i64;
        let value = node.log[offset as usize].value;
        if let Some(&previous) = self.reads.get(&offset) {
            if previous != value {
                self.anomalies.push(format!("inconsistent read at {offset}: v{previous} then v{value} (node {id})"));
            }
        }
        self.reads.insert(offset, value);
    }

    /// The controller fences `id` (session expired, or a new incarnation registered).
    fn fence(&mut self, id: u64) {
        if self.fenced[idx(id)] {
            return;
        }
        self.fenced[idx(id)] = true;
        let decision = on_broker_fenced(&self.controller, id, |r| r != id && !self.fenced[idx(r)], false);
        if let Some(decision) = decision {
            self.apply(decision, &format!("node {id} fenced"));
        }
    }

    fn unfence(&mut self, id: u64) {
        self.fenced[idx(id)] = false;
        if self.controller.leader.is_none() {
            let decision = elect_leader(&self.controller, self.live(), false);
            if decision.leader.is_some() {
                self.apply(decision, &format!("node {id} back, offline partition"));
            }
        }
    }

    fn crash(&mut self, id: u64) {
        let node = &mut self.nodes[idx(id)];
        node.alive = false;
        node.paused = false;
        node.role = Role::Down;
        node.view = None;
        self.pending.retain(|p| p.node != id);
        self.proposals.retain(|(p, _)| *p != id);
    }

    fn restart(&mut self, id: u64, lose_data: bool) {
        self.fence(id); // the new incarnation's registration fences the old one
        let node = &mut self.nodes[idx(id)];
        // A node that lost its data may rejoin only while someone else holds the committed records
        // (KIP-966's eligible leader replicas would cover the last-member case; not modelled).
        let sole_isr_member = self.controller.isr == [id];
        if lose_data && !sole_isr_member {
            node.log.clear();
            node.high_watermark = 0;
        }
        node.alive = true;
        node.paused = false;
        node.role = Role::Down;
        self.broker_epochs[idx(id)] += 10; // a new registration
        self.unfence(id);
        self.sync_image(id);
    }

    fn step(&mut self) {
        let id = REPLICAS[self.rng.below(3) as usize];
        let roll = self.rng.below(100);
        let node = &self.nodes[idx(id)];
        let (alive, paused) = (node.alive, node.paused);
        match roll {
            0..=24 => {
                if node.running() {
                    self.produce(id)
                }
            }
            25..=54 => {
                let max = 1 + self.rng.below(4) as usize;
                if self.nodes[idx(id)].running() {
                    self.fetch(id, max)
                }
            }
            55..=62 => self.deliver_proposal(),
            63..=72 => self.sync_image(id),
            73..=80 => {
                let ms = 1 + self.rng.below(12_000) as i64;
                self.tick(ms)
            }
            81..=86 => self.read(id),
            87..=88 if alive => {
                self.trace.push(format!("kill -9 node {id}"));
                self.crash(id)
            }
            89 if alive && !paused => {
                self.trace.push(format!("SIGSTOP node {id}"));
                self.nodes[idx(id)].paused = true
            }
            90..=92 if !alive || paused => {
                // session expiry of an unresponsive node
                self.trace.push(format!("session of node {id} expires"));
                self.fence(id)
            }
            93..=96 if paused => {
                self.trace.push(format!("SIGCONT node {id}"));
                self.nodes[idx(id)].paused = false;
                self.unfence(id);
            }
            93..=97 if !alive => {
                let lose = self.rng.below(4) == 0;
                self.trace.push(format!("restart node {id}{}", if lose { " with an empty data dir" } else { "" }));
                self.restart(id, lose)
            }
            _ => {}
        }
        for node in &self.nodes {
            assert!(node.high_watermark <= node.log_end_offset(), "node {} HW past its log end", node.id);
        }
    }

    /// Every node up, metadata everywhere, replication until the followers have the leader's log.
    fn heal(&mut self) -> bool {
        for id in REPLICAS {
            let node = &self.nodes[idx(id)];
            if !node.alive {
                self.restart(id, false);
            } else if node.paused {
                self.nodes[idx(id)].paused = false;
                self.unfence(id);
            }
        }
        for _ in 0..500 {
            for id in REPLICAS {
                self.sync_image(id);
            }
            while !self.proposals.is_empty() {
                self.deliver_proposal();
            }
            for id in REPLICAS {
                self.fetch(id, 64);
            }
            self.tick(100);
            let Some(leader) = self.controller.leader else { continue };
            let leader = &self.nodes[idx(leader)];
            let end = leader.log_end_offset();
            let in_sync =
                self.nodes.iter().all(|n| n.log_end_offset() == end && n.view.as_ref() == Some(&self.controller));
            if in_sync && leader.high_watermark == end && self.controller.isr.len() == REPLICAS.len() {
                return true;
            }
        }
        false
    }

    fn check(&mut self) {
        let Some(leader) = self.controller.leader else {
            self.anomalies.push("no leader after healing".into());
            return;
        };
        let log = self.nodes[idx(leader)].log.clone();
        for (&offset, &value) in &self.acked {
            match log.get(offset as usize) {
                Some(entry) if entry.value == value => {}
                Some(entry) => {
                    self.anomalies.push(format!("lost write v{value} at {offset}: the log has v{}", entry.value))
                }
                None => self.anomalies.push(format!("lost write v{value} at {offset}: the log ends at {}", log.len())),
            }
        }
        for (&offset, &value) in &self.reads {
            if log.get(offset as usize).is_none_or(|e| e.value != value) {
                self.anomalies.push(format!("read v{value} at {offset} is not in the final log"));
            }
        }
        for node in &self.nodes {
            if node.log != log {
                self.anomalies.push(format!("node {} diverges from the leader's log", node.id));
            }
        }
    }
}

fn two<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b);
    if a < b {
        let (left, right) = items.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = items.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

fn run(seed: u64) -> Result<Stats, String> {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS {
        sim.step();
    }
    if !sim.heal() {
        sim.anomalies.push(format!("did not converge after healing: controller {:?}", sim.controller));
    }
    sim.check();
    if sim.anomalies.is_empty() {
        return Ok(sim.stats);
    }
    let tail: Vec<&String> = sim.trace.iter().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect();
    Err(format!(
        "seed {seed} (replay: RUNNEL_SIM_SEED={seed}): {:?}\nlast events:\n{}",
        sim.anomalies,
        tail.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    ))
}

#[test]
fn no_acknowledged_write_is_lost_across_seeded_fault_schedules() {
    // Proves the cores keep every acknowledged write and one value per offset under faults.
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let replay = env("RUNNEL_SIM_SEED");
    let seeds: Vec<u64> = match replay {
        Some(seed) => vec![seed],
        None => {
            let base = env("RUNNEL_SIM_BASE").unwrap_or(0x5eed);
            (0..env("RUNNEL_SIM_SCHEDULES").unwrap_or(400)).map(|i| base.wrapping_add(i)).collect()
        }
    };
    let mut total = Stats::default();
    for seed in seeds {
        match run(seed) {
            Ok(stats) => {
                total.acked += stats.acked;
                total.refused += stats.refused;
                total.timed_out += stats.timed_out;
                total.elections += stats.elections;
                total.truncations += stats.truncations;
            }
            Err(report) => panic!("{report}"),
        }
    }
    println!("{total:?}");
    // The schedules must exercise what they claim to.
    assert!(replay.is_some() || total.acked > 1_000 && total.elections > 100 && total.truncations > 10, "{total:?}");
}
