//! The metadata image: the cluster state that results from applying the committed metadata log.
//!
//! Owns: `MetadataImage` and its parts, their lookups, and `MetadataImage::apply`, the one
//! function that turns a record into a change.
//! Invariant: `apply` is deterministic (same image + same record → same image + same outcome on
//! every node) and all-or-nothing (a rejected record leaves the image untouched). Every topic has
//! at least one partition, partitions are numbered `0..n` by their position, names and topic ids are
//! unique. A partition's replicas are distinct, its ISR is a non-empty subset of them, and an
//! ongoing reassignment's adding and removing replicas are disjoint subsets of them (asserted
//! after every change). The image knows nothing of raft, disks or the network.
//!
//! Cost: the image is shared by copy-on-write (the state machine publishes it while subscribers
//! still hold the previous one), so topics live in a persistent map (`imbl::OrdMap`) with each
//! topic behind its own `Arc`: cloning the image copies the broker and transform maps (a few
//! entries) and no topic, and a record copies only the map path to the topics it changes and
//! those topics. Applying a record costs O(what it changes · log topics), except fencing and
//! unfencing, which read every partition (they may change any of them) and copy only the topics
//! they change. `MetadataImage::topics` of two images can be diffed without visiting what they
//! share (`OrdMap::diff`), which is how the node reconciles only what changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::election::{
    check_alter_partition, elect_leader, on_broker_fenced, AlterPartition, PartitionState, Reassignment, ReplicaChange,
};
use super::partition_limits::ReplicaBudget;
use super::record::{
    ApplyOutcome, AssignorImage, AuditEntry, HttpToken, ListenerEndpoint, MetadataRecord, NodeId, ReplicaAssignment,
    TransformImage, ValidatorImage,
};
use crate::security::acl::AclBinding;
use crate::security::scram::{ScramCredential, ScramMechanism};

/// Producer ids per `AllocateProducerIds` (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The cluster metadata as of raft log index `applied_index`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    pub brokers: BTreeMap<NodeId, BrokerInfo>,
    /// By name. Change it only through `apply` or `insert_topic`, which keep `topic_ids` in step.
    pub topics: TopicMap,
    /// Topic id → name of every topic in `topics`.
    pub(super) topic_ids: imbl::OrdMap<[u8; 16], String>,
    /// Deployed WASM transforms by name.
    pub transforms: BTreeMap<String, TransformImage>,
    /// Deployed produce-path validators by name (at most one per topic).
    pub validators: BTreeMap<String, Arc<ValidatorImage>>,
    /// Uploaded consumer group assignors by the name clients select them with.
    pub assignors: BTreeMap<String, Arc<AssignorImage>>,
    /// Every ACL (shared between images until one changes them).
    pub acls: Arc<std::collections::BTreeSet<AclBinding>>,
    /// SCRAM credentials by user and mechanism (SASL PLAIN checks passwords against them too).
    pub scram_credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
    /// Bearer tokens of the HTTP API by id (shared between images until one changes them).
    pub http_tokens: Arc<BTreeMap<String, HttpToken>>,
    /// Changes of deployed code, oldest first, at most `AUDIT_ENTRIES_MAX`.
    pub audit: Arc<std::collections::VecDeque<AuditEntry>>,
    /// The first producer id no broker was given yet (Kafka's `ProducerIdsRecord.nextProducerId`).
    pub next_producer_id: i64,
    /// Raft log index of the last applied entry (0 before anything was applied; the first entry of a
    /// cluster, its initial membership, has index 0 too).
    pub applied_index: u64,
}

/// The topics of an image: a persistent map (clones share structure), each topic copied on write.
pub type TopicMap = imbl::OrdMap<String, Arc<TopicImage>>;

/// A registered broker: its endpoint and the lifecycle the controller tracks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: NodeId,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every Kafka listener (empty for a registration from before listeners had names).
    pub listeners: Vec<ListenerEndpoint>,
    /// The raft index of this incarnation's RegisterBroker record (Kafka's broker epoch: the
    /// offset of the registration). A restarted process is a new incarnation with a new epoch.
    pub broker_epoch: i64,
    /// Fenced brokers lead nothing and are in no ISR (except as the last member of an offline
    /// partition's). A new registration starts fenced; the controller unfences it on a heartbeat
    /// of the same epoch and fences it when its lease expires or it shuts down.
    pub fenced: bool,
}

impl BrokerInfo {
    /// Where a client connected to the listener `name` reaches this broker: its endpoint of
    /// that name (none: Kafka leaves the broker out of what that client is told), or its one
    /// address when it registered no named listeners.
    pub fn endpoint(&self, name: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners.iter().find(|l| l.name == name).map(|l| (l.host.as_str(), l.port))
    }
}

/// One topic: its id, partitions and config overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub topic_id: [u8; 16],
    /// `partitions[p].partition == p`.
    pub partitions: Vec<PartitionImage>,
    /// Overrides only (Kafka config names); defaults are not stored.
    pub configs: BTreeMap<String, String>,
}

/// Leadership state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub partition: u32,
    pub leader: Option<NodeId>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// During a reassignment, the target replicas followed by the ones being removed (what
    /// Metadata shows, as Kafka does).
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
    /// Replicas an ongoing reassignment adds (sorted; empty when none is in progress).
    pub adding_replicas: Vec<NodeId>,
    /// Replicas an ongoing reassignment removes once the targets are in the ISR (sorted).
    pub removing_replicas: Vec<NodeId>,
}

impl PartitionImage {
    fn new(partition: u32, replicas: Vec<NodeId>) -> PartitionImage {
        PartitionImage {
            partition,
            leader: replicas.first().copied(),
            leader_epoch: 0,
            partition_epoch: 0,
            isr: replicas.clone(),
            replicas,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// A reassignment is in progress (Kafka's `isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

impl MetadataImage {
    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name).map(|t| &**t)
    }

    /// The topic whose id is `topic_id`.
    pub fn topic_by_id(&self, topic_id: &[u8; 16]) -> Option<&TopicImage> {
        let name = self.topic_ids.get(topic_id)?;
        self.topics.get(name).map(|t| &**t).filter(|t| &t.topic_id == topic_id)
    }

    /// Adds `topic`, replacing the topic of that name if there is one (snapshots, tests; records
    /// go through `apply`).
    pub fn insert_topic(&mut self, topic: TopicImage) {
        if let Some(old) = self.topics.get(&topic.name) {
            self.topic_ids.remove(&old.topic_id);
        }
        self.topic_ids.insert(topic.topic_id, topic.name.clone());
        self.topics.insert(topic.name.clone(), Arc::new(topic));
    }

    /// Removes the topic called `name`.
    fn remove_topic(&mut self, name: &str) -> Option<Arc<TopicImage>> {
        let removed = self.topics.remove(name)?;
        self.topic_ids.remove(&removed.topic_id);
        Some(removed)
    }

    /// The topic called `name`, copied first if another image shares it.
    fn topic_mut(&mut self, name: &str) -> Option<&mut TopicImage> {
        self.topics.get_mut(name).map(Arc::make_mut)
    }

    /// `user`'s SCRAM credentials (one per mechanism), found by range, not by a scan.
    pub fn credentials_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a ScramCredential> + 'a {
        self.scram_credentials
            .range((user.to_string(), ScramMechanism::Sha256)..)
            .take_while(move |((name, _), _)| name == user)
            .map(|(_, credential)| credential)
    }

    /// Partition `partition` of topic `topic`.
    pub fn partition(&self, topic: &str, partition: u32) -> Option<&PartitionImage> {
        self.topics.get(topic)?.partitions.get(usize::try_from(partition).ok()?)
    }

    /// Every partition, with its topic's name.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, &PartitionImage)> {
        self.topics.values().flat_map(|t| t.partitions.iter().map(move |p| (t.name.as_str(), p)))
    }

    /// A broker that may lead and be in an ISR: registered and not fenced.
    pub fn is_live(&self, node_id: NodeId) -> bool {
        self.brokers.get(&node_id).is_some_and(|b| !b.fenced)
    }

    /// The broker epoch of `node_id`'s registration while it is unfenced (what AlterPartition
    /// checks an ISR member against, KIP-903).
    pub fn live_broker_epoch(&self, node_id: NodeId) -> Option<i64> {
        self.brokers.get(&node_id).filter(|b| !b.fenced).map(|b| b.broker_epoch)
    }

    /// Applies one record. Deterministic; a rejected record changes nothing. The caller sets
    /// `applied_index` to the record's raft index before applying it (a registration takes it as
    /// its broker epoch) and keeps it after.
    pub(crate) fn apply(&mut self, record: &MetadataRecord) -> ApplyOutcome {
        self.apply_counted(record, &mut None)
    }

    /// [`Self::apply`], with the bound a creation record carries checked first: its replicas
    /// may not put a broker past the `max.broker.partitions` its proposer checked it against
    /// (`controller::partition_limits`), counted on the image as it is now. `counted` keeps
    /// the count across the records of one batch (counted once, then added to), dropped when
    /// another kind of record changes the image.
    fn apply_counted(&mut self, record: &MetadataRecord, counted: &mut Option<ReplicaBudget>) -> ApplyOutcome {
        let created = match record {
            MetadataRecord::CreateTopic { name, partitions, max_broker_partitions, .. } => {
                Some((name, partitions, *max_broker_partitions))
            }
            MetadataRecord::CreatePartitions { topic, new_partitions, max_broker_partitions } => {
                Some((topic, new_partitions, *max_broker_partitions))
            }
            _ => None,
        };
        if let Some((topic, assignment, Some(limit))) = created {
            let budget = counted.get_or_insert_with(|| ReplicaBudget::of(self, limit));
            budget.set_limit(limit);
            if let Err(message) = budget.check(topic, assignment) {
                return ApplyOutcome::ReplicaLimit { message };
            }
        }
        let outcome = self.apply_one(record, counted);
        if outcome == ApplyOutcome::Applied {
            match (created, counted.as_mut()) {
                (Some((_, assignment, _)), Some(budget)) => budget.add(assignment),
                (Some(_), None) => {}
                (None, _) => *counted = None,
            }
        }
        outcome
    }

    fn apply_one(&mut self, record: &MetadataRecord, counted: &mut Option<ReplicaBudget>) -> ApplyOutcome {
        match record {
            MetadataRecord::RegisterBroker { node_id, host, port, rack, listeners } => {
                // The previous incarnation, if any, is gone: fenced first (its leaderships move
                // and it leaves every ISR), so a restarted replica that lost data can neither
                // lead nor count toward a high watermark until it has caught up again.
                if self.brokers.get(node_id).is_some_and(|b| !b.fenced) {
                    self.fence(*node_id);
                }
                let info = BrokerInfo {
                    node_id: *node_id,
                    host: host.clone(),
                    port: *port,
                    rack: rack.clone(),
                    listeners: listeners.clone(),
                    broker_epoch: self.applied_index as i64,
                    fenced: true,
                };
                self.brokers.insert(*node_id, info);
                ApplyOutcome::Applied
            }
            MetadataRecord::FenceBroker { node_id, broker_epoch } => match self.brokers.get(node_id) {
                Some(b) if b.broker_epoch == *broker_epoch && !b.fenced => {
                    self.fence(*node_id);
                    ApplyOutcome::Applied
                }
                _ => ApplyOutcome::StaleBrokerEpoch,
            },
            MetadataRecord::UnfenceBroker { node_id, broker_epoch } => match self.brokers.get_mut(node_id) {
                Some(b) if b.broker_epoch == *broker_epoch && b.fenced => {
                    b.fenced = false;
                    self.elect_offline_leaders();
                    ApplyOutcome::Applied
                }
                _ => ApplyOutcome::StaleBrokerEpoch,
            },
            MetadataRecord::AlterPartition {
                topic,
                partition,
                proposer,
                leader_epoch,
                partition_epoch,
                new_isr,
                broker_epochs,
            } => {
                let Some(p) = self.partition(topic, *partition) else { return ApplyOutcome::UnknownTopic };
                let change = AlterPartition {
                    proposer: *proposer,
                    leader_epoch: *leader_epoch,
                    partition_epoch: *partition_epoch,
                    new_isr,
                    broker_epochs,
                };
                if let Err(e) = check_alter_partition(&p.election_state(), change, |r| self.live_broker_epoch(r)) {
                    return ApplyOutcome::IsrChangeRejected { reason: e.to_string() };
                }
                let p = self.partition_mut(topic, *partition).expect("looked up above");

                p.isr = new_isr.clone();
                p.partition_epoch = p.partition_epoch.saturating_add(1);
                ApplyOutcome::Applied
            }
            MetadataRecord::CreateTopic { name, topic_id, partitions, configs, .. } => {
                if self.topics.contains_key(name) || self.topic_ids.contains_key(topic_id) {
                    return ApplyOutcome::TopicAlreadyExists;
                }
                if partitions.is_empty() {
                    return ApplyOutcome::InvalidPartitionCount { current: 0 };
                }
                if !valid_replica_lists(partitions) {
                    return ApplyOutcome::InvalidReplicaAssignment;
                }
                let Some(mut partitions) = number_partitions(0, partitions) else {
                    return ApplyOutcome::InvalidPartitionCount { current: 0 };
                };
                self.lead_with_live_replicas(&mut partitions);
                let topic =
                    TopicImage { name: name.clone(), topic_id: *topic_id, partitions, configs: configs.clone() };
                self.insert_topic(topic);
                ApplyOutcome::Applied
            }
            MetadataRecord::DeleteTopic { name } => match self.remove_topic(name) {
                Some(_) => ApplyOutcome::Applied,
                None => ApplyOutcome::UnknownTopic,
            },
            MetadataRecord::CreatePartitions { topic, new_partitions, .. } => {
                let Some(image) = self.topics.get(topic) else {
                    return ApplyOutcome::UnknownTopic;
                };
                let current = u32::try_from(image.partitions.len()).unwrap_or(u32::MAX);
                if new_partitions.is_empty() {
                    return ApplyOutcome::InvalidPartitionCount { current };
                }
                if !valid_replica_lists(new_partitions) {
                    return ApplyOutcome::InvalidReplicaAssignment;
                }
                let Some(mut added) = number_partitions(current, new_partitions) else {
                    return ApplyOutcome::InvalidPartitionCount { current };
                };
                self.lead_with_live_replicas(&mut added);
                self.topic_mut(topic).expect("looked up above").partitions.extend(added);
                ApplyOutcome::Applied
            }
            MetadataRecord::SetTopicConfigs { topic, configs } => match self.topic_mut(topic) {
                Some(image) => {
                    image.configs = configs.clone();
                    ApplyOutcome::Applied
                }
                None => ApplyOutcome::UnknownTopic,
            },
            MetadataRecord::DeployTransform { name, spec, module, sha256, deployment } => {
                let version = self.transforms.get(name).map_or(1, |t| t.version + 1);
                let deployment = self.transforms.get(name).map_or_else(|| deployment.clone(), |t| t.deployment.clone());
                let paused = false;
                let transform = TransformImage {
                    name: name.clone(),
                    spec: spec.clone(),
                    module: module.clone(),
                    sha256: sha256.clone(),
                    version,
                    paused,
                    deployment,
                };
                self.transforms.insert(name.clone(), transform);
                ApplyOutcome::Applied
            }
            MetadataRecord::SetTransformPaused { name, paused } => match self.transforms.get_mut(name) {
                Some(t) => {
                    t.paused = *paused;
                    ApplyOutcome::Applied
                }
                None => ApplyOutcome::UnknownTransform,
            },
            MetadataRecord::DeleteTransform { name } => match self.transforms.remove(name) {
                Some(_) => ApplyOutcome::Applied,
                None => ApplyOutcome::UnknownTransform,
            },
            MetadataRecord::DeployValidator { name, spec, module, sha256 } => {
                let taken = self.validators.values().find(|v| v.spec.topic == spec.topic && v.name != *name);
                if let Some(other) = taken {
                    return ApplyOutcome::TopicHasValidator { validator: other.name.clone() };
                }
                let version = self.validators.get(name).map_or(1, |v| v.version + 1);
                let validator = ValidatorImage {
                    name: name.clone(),
                    spec: spec.clone(),
                    module: module.clone(),
                    sha256: sha256.clone(),
                    version,
                };
                self.validators.insert(name.clone(), Arc::new(validator));
                ApplyOutcome::Applied
            }
            MetadataRecord::DeleteValidator { name } => match self.validators.remove(name) {
                Some(_) => ApplyOutcome::Applied,
                None => ApplyOutcome::UnknownValidator,
            },
            MetadataRecord::DeployAssignor { name, spec, module, sha256, deployed_ms } => {
                let version = self.assignors.get(name).map_or(1, |a| a.version + 1);
                let assignor = AssignorImage {
                    name: name.clone(),
                    spec: spec.clone(),
                    module: module.clone(),
                    sha256: sha256.clone(),
                    version,
                    deployed_ms: *deployed_ms,
                };
                self.assignors.insert(name.clone(), Arc::new(assignor));
                ApplyOutcome::Applied
            }
            MetadataRecord::DeleteAssignor { name } => match self.assignors.remove(name) {
                Some(_) => ApplyOutcome::Applied,
                None => ApplyOutcome::UnknownAssignor,
            },
            MetadataRecord::UpsertScramCredential { user, mechanism, salt, stored_key, server_key, iterations } => {
                let Some(mechanism) = ScramMechanism::from_name(mechanism) else {
                    return ApplyOutcome::UnknownScramCredential;
                };
                let credential = ScramCredential {
                    mechanism,
                    salt: salt.clone(),
                    stored_key: stored_key.clone(),
                    server_key: server_key.clone(),
                    iterations: *iterations,
                };
                self.scram_credentials.insert((user.clone(), mechanism), credential);
                ApplyOutcome::Applied
            }
            MetadataRecord::DeleteScramCredential { user, mechanism } => {
                let removed = ScramMechanism::from_name(mechanism)
                    .and_then(|mechanism| self.scram_credentials.remove(&(user.clone(), mechanism)));
                match removed {
                    Some(_) => ApplyOutcome::Applied,
                    None => ApplyOutcome::UnknownScramCredential,
                }
            }
            MetadataRecord::CreateAcls { acls } => {
                let acls_now = Arc::make_mut(&mut self.acls);
                acls_now.extend(acls.iter().filter_map(|a| a.binding()));
                ApplyOutcome::Applied
            }
            MetadataRecord::DeleteAcls { acls } => {
                let acls_now = Arc::make_mut(&mut self.acls);
                for binding in acls.iter().filter_map(|a| a.binding()) {
                    acls_now.remove(&binding);
                }
                ApplyOutcome::Applied
            }
            MetadataRecord::IssueHttpToken { token } => {
                Arc::make_mut(&mut self.http_tokens).insert(token.id.clone(), token.clone());
                ApplyOutcome::Applied
            }
            MetadataRecord::RevokeHttpTokens { ids } => {
                let tokens = Arc::make_mut(&mut self.http_tokens);
                for id in ids {
                    tokens.remove(id);
                }
                ApplyOutcome::Applied
            }
            MetadataRecord::Audited { record, entry } => {
                let outcome = self.apply(record);
                if outcome == ApplyOutcome::Applied {
                    let audit = Arc::make_mut(&mut self.audit);
                    if audit.len() == super::record::AUDIT_ENTRIES_MAX {
                        audit.pop_front();
                    }
                    audit.push_back(entry.clone());
                }
                outcome
            }
            MetadataRecord::Batch(records) => {
                ApplyOutcome::Batch(records.iter().map(|r| self.apply_counted(r, counted)).collect())
            }
            MetadataRecord::AllocateProducerIds { node_id, broker_epoch } => match self.brokers.get(node_id) {
                Some(b) if b.broker_epoch == *broker_epoch => {
                    let first = self.next_producer_id;
                    let count = PRODUCER_ID_BLOCK_SIZE.min(i64::MAX - first);
                    self.next_producer_id = first + count;
                    ApplyOutcome::ProducerIds { first, count }
                }
                _ => ApplyOutcome::StaleBrokerEpoch,
            },
            MetadataRecord::PartitionChange { topic, partition, expected_partition_epoch, leader, isr, assignment } => {
                // Checked on the shared topic; copied only once the change applies.
                let Some(p) = self.partition(topic, *partition) else {
                    return ApplyOutcome::UnknownTopic;
                };
                if *expected_partition_epoch != p.partition_epoch {
                    return ApplyOutcome::StalePartitionEpoch {
                        expected: *expected_partition_epoch,
                        current: p.partition_epoch,
                    };
                }
                // A new leader must be live when the change commits, whatever the proposer's
                // image said: a fenced leader is never moved away by anything (fencing and
                // offline elections only look at live leaders and leaderless partitions).
                if leader.is_some_and(|l| Some(l) != p.leader && !self.is_live(l)) {
                    return ApplyOutcome::InvalidPartitionChange;
                }
                let replicas = assignment.as_ref().map_or(&p.replicas, |a| &a.replicas);
                let valid = !isr.is_empty()
                    && !has_duplicate(isr)
                    && isr.iter().all(|r| replicas.contains(r))
                    && leader.is_none_or(|l| isr.contains(&l))
                    && assignment.as_ref().is_none_or(valid_assignment);
                if !valid {
                    return ApplyOutcome::InvalidPartitionChange;
                }
                let p = self.partition_mut(topic, *partition).expect("looked up above");
                let replica_left = assignment.as_ref().is_some_and(|a| p.apply_assignment(a));
                if replica_left && p.leader == *leader {
                    // Kafka bumps the leader epoch when a replica leaves, which fences the removed
                    // follower's fetches; a replica that joins is taken by the leader within its
                    // epoch (`LeaderState::on_partition_committed`), so producers see no change.
                    p.leader_epoch = p.leader_epoch.saturating_add(1);
                }
                p.apply_decision(*leader, isr.clone());
                p.assert_invariants();
                ApplyOutcome::Applied
            }
        }
    }
}

impl MetadataImage {
    /// New partitions are led by their first live replica with the live replicas as the ISR
    /// (Kafka's `createTopic`: the ISR is the active replicas, the leader its first). With no
    /// replica live the partition starts leaderless with every replica in the ISR (all are
    /// empty, so any may lead), and the first to be unfenced is elected; a fenced leader would
    /// never be moved away (fencing and offline elections leave a partition with a leader alone).
    fn lead_with_live_replicas(&self, partitions: &mut [PartitionImage]) {
        for p in partitions {
            let live: Vec<NodeId> = p.replicas.iter().copied().filter(|&r| self.is_live(r)).collect();
            if live.is_empty() {
                p.leader = None;
            } else {
                p.leader = live.first().copied();
                p.isr = live;
            }
        }
    }

    fn partition_mut(&mut self, topic: &str, partition: u32) -> Option<&mut PartitionImage> {
        let index = usize::try_from(partition).ok()?;
        self.topic_mut(topic)?.partitions.get_mut(index)
    }

    /// Applies `decide` to every partition, copying only the topics where it decides a change.
    fn decide_everywhere(
        &mut self,
        mut decide: impl FnMut(&PartitionImage) -> Option<super::election::PartitionDecision>,
    ) {
        let mut changes: Vec<(String, Vec<(usize, super::election::PartitionDecision)>)> = Vec::new();
        for topic in self.topics.values() {
            let decided: Vec<_> =
                topic.partitions.iter().enumerate().filter_map(|(i, p)| decide(p).map(|d| (i, d))).collect();
            if !decided.is_empty() {
                changes.push((topic.name.clone(), decided));
            }
        }
        for (name, decided) in changes {
            let topic = self.topic_mut(&name).expect("collected above");
            for (i, decision) in decided {
                topic.partitions[i].apply_decision(decision.leader, decision.isr);
            }
        }
    }

    /// Fences `node_id`: every partition it led elects a new leader from the live ISR (or goes
    /// offline), and it leaves every ISR it is in unless it is the last member.
    fn fence(&mut self, node_id: NodeId) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            b.fenced = true;
        }
        let live: Vec<NodeId> = self.brokers.values().filter(|b| !b.fenced).map(|b| b.node_id).collect();
        // `on_broker_fenced` changes nothing where the broker is no replica: skip those cheaply.
        self.decide_everywhere(|p| {
            p.replicas
                .contains(&node_id)
                .then(|| on_broker_fenced(&p.election_state(), node_id, |r| live.contains(&r), false))
                .flatten()
        });
    }

    /// Every partition without a leader whose ISR has a live member elects one (clean only).
    fn elect_offline_leaders(&mut self) {
        let live: Vec<NodeId> = self.brokers.values().filter(|b| !b.fenced).map(|b| b.node_id).collect();
        self.decide_everywhere(|p| {
            if p.leader.is_some() {
                return None;
            }
            let decision = elect_leader(&p.election_state(), |r| live.contains(&r), false);
            decision.leader.is_some().then_some(decision)
        });
    }
}

/// A replica list and reassignment state a `PartitionChange` may install: replicas non-empty and
/// distinct, adding and removing replicas distinct, disjoint and among them.
fn valid_assignment(a: &ReplicaAssignment) -> bool {
    let among = |list: &[NodeId]| !has_duplicate(list) && list.iter().all(|r| a.replicas.contains(r));
    !a.replicas.is_empty()
        && !has_duplicate(&a.replicas)
        && among(&a.adding_replicas)
        && among(&a.removing_replicas)
        && !a.adding_replicas.iter().any(|r| a.removing_replicas.contains(r))
}

fn has_duplicate(list: &[NodeId]) -> bool {
    list.iter().enumerate().any(|(i, r)| list[..i].contains(r))
}

impl PartitionImage {
    /// Installs a new replica list and reassignment state; true if the replica *set* changed
    /// (not merely its order).
    /// Takes the assignment; answers whether a replica left the replica set.
    fn apply_assignment(&mut self, assignment: &ReplicaAssignment) -> bool {
        let replica_left = self.replicas.iter().any(|r| !assignment.replicas.contains(r));
        self.replicas = assignment.replicas.clone();
        self.adding_replicas = assignment.adding_replicas.clone();
        self.removing_replicas = assignment.removing_replicas.clone();
        replica_left
    }

    /// The image invariant of one partition, after every change of it.
    fn assert_invariants(&self) {
        assert!(!self.replicas.is_empty() && !has_duplicate(&self.replicas), "bad replicas: {self:?}");
        assert!(self.isr.iter().all(|r| self.replicas.contains(r)), "ISR outside the replicas: {self:?}");
        assert!(self.leader.is_none_or(|l| self.isr.contains(&l)), "leader outside the ISR: {self:?}");
        assert!(
            self.adding_replicas.iter().chain(&self.removing_replicas).all(|r| self.replicas.contains(r))
                && !self.adding_replicas.iter().any(|r| self.removing_replicas.contains(r)),
            "bad reassignment state: {self:?}"
        );
    }

    /// A new leader and ISR: the leader epoch moves with the leader, the partition epoch always.
    fn apply_decision(&mut self, leader: Option<NodeId>, isr: Vec<NodeId>) {
        if self.leader != leader {
            self.leader = leader;
            self.leader_epoch = self.leader_epoch.saturating_add(1);
        }
        self.isr = isr;
        self.partition_epoch = self.partition_epoch.saturating_add(1);
    }
}

impl PartitionImage {
    /// The `PartitionChange` that carries out `decision` for this partition, valid only while
    /// its partition epoch is still this one.
    pub fn change_record(&self, topic: &str, decision: super::election::PartitionDecision) -> MetadataRecord {
        MetadataRecord::PartitionChange {
            topic: topic.to_string(),
            partition: self.partition,
            expected_partition_epoch: self.partition_epoch,
            leader: decision.leader,
            isr: decision.isr,
            assignment: None,
        }
    }

    /// The `PartitionChange` that carries out a reassignment step (`election.rs`: started,
    /// completed or cancelled) for this partition, valid only while its partition epoch is still
    /// this one.
    pub fn reassignment_record(&self, topic: &str, change: ReplicaChange) -> MetadataRecord {
        MetadataRecord::PartitionChange {
            topic: topic.to_string(),
            partition: self.partition,
            expected_partition_epoch: self.partition_epoch,
            leader: change.leader,
            isr: change.isr,
            assignment: Some(ReplicaAssignment {
                replicas: change.replicas,
                adding_replicas: change.reassignment.adding_replicas,
                removing_replicas: change.reassignment.removing_replicas,
            }),
        }
    }

    /// The ongoing reassignment, as the reassignment rules (`election.rs`) take it.
    pub fn reassignment(&self) -> Reassignment {
        Reassignment {
            adding_replicas: self.adding_replicas.clone(),
            removing_replicas: self.removing_replicas.clone(),
        }
    }

    /// What the election rules (`election.rs`) decide from.
    pub fn election_state(&self) -> PartitionState {
        let p = self;
        PartitionState {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
        }
    }
}

/// Numbers `assignments` as partitions `first..`; `None` if the count would overflow `u32`.
/// Whether every replica list is non-empty and names each broker once: a partition's
/// invariants (`assert_invariants`) hold from its creation. The handlers refuse such requests
/// first; this keeps a record that slipped past them out of the image.
fn valid_replica_lists(assignments: &[Vec<NodeId>]) -> bool {
    assignments.iter().all(|replicas| !replicas.is_empty() && !has_duplicate(replicas))
}

fn number_partitions(first: u32, assignments: &[Vec<NodeId>]) -> Option<Vec<PartitionImage>> {
    let count = u32::try_from(assignments.len()).ok()?;
    first.checked_add(count)?;
    Some(
        assignments
            .iter()
            .zip(first..)
            .map(|(replicas, partition)| PartitionImage::new(partition, replicas.clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, id: u8, partitions: Vec<Vec<NodeId>>) -> MetadataRecord {
        MetadataRecord::CreateTopic {
            name: name.to_string(),
            topic_id: [id; 16],
            partitions,
            configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            max_broker_partitions: None,
        }
    }

    /// An image where brokers 1 to 5 are registered and unfenced (broker epoch = node id).
    fn with_live_brokers() -> MetadataImage {
        let mut image = MetadataImage::default();
        for node_id in 1..=5 {
            let info = BrokerInfo {
                node_id,
                host: "h".into(),
                port: node_id as u16,
                rack: None,
                broker_epoch: node_id as i64,
                fenced: false,
                listeners: vec![],
            };
            image.brokers.insert(node_id, info);
        }
        image
    }

    #[test]
    fn new_partitions_are_led_by_live_replicas_and_changes_never_name_a_fenced_leader() {
        // Proves a fenced broker never becomes a leader, as in Kafka's createTopic and
        // PartitionChange handling: a new partition whose first replica is fenced was led by it
        // (offline for good: nothing moves a fenced leader), and a PartitionChange computed on a
        // stale image could name a fenced leader.
        let mut image = with_live_brokers();
        image.brokers.get_mut(&3).unwrap().fenced = true;
        image.brokers.get_mut(&4).unwrap().fenced = true;
        assert_eq!(image.apply(&create("a", 1, vec![vec![3, 1], vec![3, 4]])), ApplyOutcome::Applied);
        let p0 = image.partition("a", 0).unwrap().clone();
        assert_eq!((p0.leader, p0.isr.clone()), (Some(1), vec![1]), "the live replica leads");
        let p1 = image.partition("a", 1).unwrap().clone();
        assert_eq!((p1.leader, p1.isr.clone()), (None, vec![3, 4]), "no live replica: leaderless");
        let to_fenced = MetadataRecord::PartitionChange {
            topic: "a".into(),
            partition: 0,
            expected_partition_epoch: p0.partition_epoch,
            leader: Some(3),
            isr: vec![3],
            assignment: None,
        };
        assert_eq!(image.apply(&to_fenced), ApplyOutcome::InvalidPartitionChange);
        // The first of them unfenced is elected.
        assert_eq!(image.apply(&MetadataRecord::UnfenceBroker { node_id: 4, broker_epoch: 4 }), ApplyOutcome::Applied);
        assert_eq!(image.partition("a", 1).unwrap().leader, Some(4));
    }

    // Proves CreateTopic builds partitions with leader = first replica, epoch 0, isr = replicas.
    #[test]
    fn create_topic_initialises_partitions() {
        let mut image = with_live_brokers();
        assert_eq!(image.apply(&create("a", 1, vec![vec![2, 1], vec![1, 2]])), ApplyOutcome::Applied);
        let p1 = image.partition("a", 1).expect("partition 1");
        assert_eq!(
            *p1,
            PartitionImage {
                partition: 1,
                leader: Some(1),
                leader_epoch: 0,
                partition_epoch: 0,
                replicas: vec![1, 2],
                isr: vec![1, 2],
                adding_replicas: vec![],
                removing_replicas: vec![],
            }
        );
        assert_eq!(image.topic_by_id(&[1; 16]).map(|t| t.name.as_str()), Some("a"));
        assert_eq!(image.topic("a").map(|t| t.configs.len()), Some(1));
        assert!(image.partition("a", 2).is_none());
    }

    // Proves max.broker.partitions is checked where the record applies, against the image of
    // that point of the log: two creations checked by their handlers against one image (each
    // fits alone) do not both commit past the bound, alone or in one batch; a rejected record
    // counts nothing, a deletion in the batch frees room, and the internal topics are exempt.
    #[test]
    fn creations_past_the_replica_bound_they_carry_are_rejected_when_they_apply() {
        let bounded = |name: &str, id: u8, partitions: Vec<Vec<NodeId>>| match create(name, id, partitions) {
            MetadataRecord::CreateTopic { name, topic_id, partitions, configs, .. } => {
                MetadataRecord::CreateTopic { name, topic_id, partitions, configs, max_broker_partitions: Some(4) }
            }
            _ => unreachable!("create makes a CreateTopic"),
        };
        let mut image = MetadataImage::default();
        assert_eq!(image.apply(&bounded("a", 1, vec![vec![1, 2], vec![2, 1]])), ApplyOutcome::Applied);
        assert_eq!(image.apply(&bounded("b", 2, vec![vec![1], vec![2]])), ApplyOutcome::Applied);
        // Brokers 1 and 2 host 3 each: 2 more on broker 1 is past 4.
        let refused = image.apply(&bounded("c", 3, vec![vec![1], vec![1]]));
        assert!(
            matches!(&refused, ApplyOutcome::ReplicaLimit { message }
                if message.contains("broker 1, which hosts 3: above its max.broker.partitions of 4")),
            "{refused:?}"
        );
        assert!(image.topic("c").is_none());
        let grow = |partitions: Vec<Vec<NodeId>>| MetadataRecord::CreatePartitions {
            topic: "b".into(),
            new_partitions: partitions,
            max_broker_partitions: Some(4),
        };
        assert!(matches!(image.apply(&grow(vec![vec![2, 1], vec![1]])), ApplyOutcome::ReplicaLimit { .. }));
        assert_eq!(image.topic("b").map(|t| t.partitions.len()), Some(2));
        assert_eq!(image.apply(&grow(vec![vec![2, 1]])), ApplyOutcome::Applied, "exactly 4 each");

        let mut image = MetadataImage::default();
        let outcome = image.apply(&MetadataRecord::Batch(vec![
            bounded("a", 1, vec![vec![1]; 3]),
            bounded("a", 9, vec![vec![1]]),
            bounded("b", 2, vec![vec![1]]),
            bounded("c", 3, vec![vec![1]]),
            MetadataRecord::DeleteTopic { name: "a".into() },
            bounded("d", 4, vec![vec![1]; 3]),
            bounded(crate::group::OFFSETS_TOPIC, 5, vec![vec![1]; 50]),
        ]));
        let ApplyOutcome::Batch(outcomes) = outcome else { panic!("{outcome:?}") };
        let kinds: Vec<&str> = outcomes
            .iter()
            .map(|o| match o {
                ApplyOutcome::Applied => "applied",
                ApplyOutcome::TopicAlreadyExists => "exists",
                ApplyOutcome::ReplicaLimit { .. } => "limit",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["applied", "exists", "applied", "limit", "applied", "applied", "applied"]);
        assert_eq!(image.topic("d").map(|t| t.partitions.len()), Some(3));
    }

    // Proves a replica list that is empty or names a broker twice never enters the image (its
    // partition invariants would fail at the next change of the partition, inside the apply).
    #[test]
    fn replica_lists_with_a_broker_twice_or_none_are_rejected() {
        let mut image = MetadataImage::default();
        assert_eq!(image.apply(&create("a", 1, vec![vec![1, 2, 2]])), ApplyOutcome::InvalidReplicaAssignment);
        assert_eq!(image.apply(&create("a", 1, vec![vec![1], vec![]])), ApplyOutcome::InvalidReplicaAssignment);
        assert!(image.topic("a").is_none());
        assert_eq!(image.apply(&create("a", 1, vec![vec![1, 2]])), ApplyOutcome::Applied);
        let grow = MetadataRecord::CreatePartitions {
            topic: "a".into(),
            new_partitions: vec![vec![2, 2]],
            max_broker_partitions: None,
        };
        assert_eq!(image.apply(&grow), ApplyOutcome::InvalidReplicaAssignment);
        assert_eq!(image.topic("a").map(|t| t.partitions.len()), Some(1));
    }

    // Proves a duplicate name or topic id is rejected with TopicAlreadyExists and changes nothing.
    #[test]
    fn create_existing_topic_is_rejected_without_change() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, vec![vec![1]]));
        let before = image.clone();
        assert_eq!(image.apply(&create("a", 2, vec![vec![1], vec![1]])), ApplyOutcome::TopicAlreadyExists);
        assert_eq!(image.apply(&create("b", 1, vec![vec![1]])), ApplyOutcome::TopicAlreadyExists);
        assert_eq!(image, before);
    }

    // Proves a topic must have at least one partition.
    #[test]
    fn create_topic_without_partitions_is_rejected() {
        let mut image = MetadataImage::default();
        assert_eq!(image.apply(&create("a", 1, vec![])), ApplyOutcome::InvalidPartitionCount { current: 0 });
        assert!(image.topics.is_empty());
    }

    // Proves DeleteTopic removes a known topic and reports UnknownTopic otherwise.
    #[test]
    fn delete_topic_outcomes() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, vec![vec![1]]));
        assert_eq!(image.apply(&MetadataRecord::DeleteTopic { name: "b".into() }), ApplyOutcome::UnknownTopic);
        assert_eq!(image.apply(&MetadataRecord::DeleteTopic { name: "a".into() }), ApplyOutcome::Applied);
        assert_eq!(image.apply(&MetadataRecord::DeleteTopic { name: "a".into() }), ApplyOutcome::UnknownTopic);
        assert!(image.topics.is_empty());
        // The name and the id can be reused after deletion.
        assert_eq!(image.apply(&create("a", 1, vec![vec![1]])), ApplyOutcome::Applied);
    }

    // Proves CreatePartitions appends numbered partitions and rejects a non-increase or unknown topic.
    #[test]
    fn create_partitions_outcomes() {
        let mut image = with_live_brokers();
        image.apply(&create("a", 1, vec![vec![1], vec![2]]));
        let grow = |new_partitions| MetadataRecord::CreatePartitions {
            topic: "a".into(),
            new_partitions,
            max_broker_partitions: None,
        };
        assert_eq!(image.apply(&grow(vec![])), ApplyOutcome::InvalidPartitionCount { current: 2 });
        assert_eq!(
            image.apply(&MetadataRecord::CreatePartitions {
                topic: "x".into(),
                new_partitions: vec![vec![1]],
                max_broker_partitions: None
            }),
            ApplyOutcome::UnknownTopic
        );
        assert_eq!(image.topic("a").map(|t| t.partitions.len()), Some(2));
        assert_eq!(image.apply(&grow(vec![vec![3, 1]])), ApplyOutcome::Applied);
        let p2 = image.partition("a", 2).expect("new partition");
        assert_eq!((p2.partition, p2.leader, p2.isr.clone()), (2, Some(3), vec![3, 1]));
    }

    // Proves SetTopicConfigs replaces the whole override map.
    #[test]
    fn set_topic_configs_replaces_map() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, vec![vec![1]]));
        let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
        let set = MetadataRecord::SetTopicConfigs { topic: "a".into(), configs: configs.clone() };
        assert_eq!(image.apply(&set), ApplyOutcome::Applied);
        assert_eq!(image.topic("a").map(|t| &t.configs), Some(&configs));
        let unknown = MetadataRecord::SetTopicConfigs { topic: "b".into(), configs };
        assert_eq!(image.apply(&unknown), ApplyOutcome::UnknownTopic);
    }

    // Proves PartitionChange bumps leader_epoch only on a leader change and partition_epoch always,
    // applies only against the current partition epoch, and refuses malformed ISRs.
    #[test]
    fn partition_change_epochs() {
        let mut image = with_live_brokers();
        image.apply(&create("a", 1, vec![vec![1, 2, 3]]));
        let change = |expected_partition_epoch, leader, isr| MetadataRecord::PartitionChange {
            topic: "a".into(),
            partition: 0,
            expected_partition_epoch,
            leader,
            isr,
            assignment: None,
        };
        assert_eq!(image.apply(&change(0, Some(1), vec![1, 2])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.leader_epoch, p.partition_epoch, p.isr), (0, 1, vec![1, 2]));
        assert_eq!(image.apply(&change(1, Some(2), vec![2])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (Some(2), 1, 2));
        assert_eq!(image.apply(&change(2, None, vec![2])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (None, 2, 3));
        let before = image.clone();
        // A change computed from an older state (a zombie leader's) loses.
        assert_eq!(
            image.apply(&change(2, Some(1), vec![1])),
            ApplyOutcome::StalePartitionEpoch { expected: 2, current: 3 }
        );
        for (leader, isr) in [(None, vec![]), (Some(1), vec![2]), (Some(1), vec![1, 1]), (Some(1), vec![1, 9])] {
            assert_eq!(image.apply(&change(3, leader, isr)), ApplyOutcome::InvalidPartitionChange);
        }
        let unknown = |topic: &str, partition| MetadataRecord::PartitionChange {
            topic: topic.into(),
            partition,
            expected_partition_epoch: 0,
            leader: None,
            isr: vec![1],
            assignment: None,
        };
        assert_eq!(image.apply(&unknown("a", 1)), ApplyOutcome::UnknownTopic);
        assert_eq!(image.apply(&unknown("b", 0)), ApplyOutcome::UnknownTopic);
        assert_eq!(image, before);
    }

    // Proves a record copies only the topics it changes: the others stay shared with the image
    // it was applied to (what keeps applying O(what changed) and lets the node diff images).
    #[test]
    fn a_record_copies_only_the_topics_it_changes() {
        let mut image = with_live_brokers();
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            image.apply(&create(name, i as u8 + 1, vec![vec![1, 2], vec![2, 1]]));
        }
        let before = image.clone();
        let change = MetadataRecord::PartitionChange {
            topic: "b".into(),
            partition: 1,
            expected_partition_epoch: 0,
            leader: Some(2),
            isr: vec![2],
            assignment: None,
        };
        assert_eq!(image.apply(&change), ApplyOutcome::Applied);
        let shared = |name: &str| Arc::ptr_eq(&image.topics[name], &before.topics[name]);
        assert!(shared("a") && shared("c") && !shared("b"));
        let changed: Vec<String> = before
            .topics
            .diff(&image.topics)
            .map(|d| match d {
                imbl::ordmap::DiffItem::Update { new, .. } => new.0.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(changed, vec!["b".to_string()]);
        // A rejected record copies nothing.
        let again = image.clone();
        assert!(matches!(image.apply(&change), ApplyOutcome::StalePartitionEpoch { .. }));
        assert!(image.topics.iter().all(|(name, t)| Arc::ptr_eq(t, &again.topics[name])));
        // Fencing broker 1 copies the topics it is a replica of (all), not others.
        image.apply(&create("d", 9, vec![vec![2]]));
        let before_fence = image.clone();
        image.brokers.insert(
            1,
            BrokerInfo {
                node_id: 1,
                host: "h".into(),
                port: 1,
                rack: None,
                broker_epoch: 1,
                fenced: false,
                listeners: vec![],
            },
        );
        image.brokers.insert(
            2,
            BrokerInfo {
                node_id: 2,
                host: "h".into(),
                port: 2,
                rack: None,
                broker_epoch: 2,
                fenced: false,
                listeners: vec![],
            },
        );
        image.apply(&MetadataRecord::FenceBroker { node_id: 1, broker_epoch: 1 });
        assert!(Arc::ptr_eq(&image.topics["d"], &before_fence.topics["d"]));
        assert_eq!(image.partition("a", 0).and_then(|p| p.leader), Some(2));
    }

    // Proves a Batch applies each record on its own, in order, with one outcome each, and keeps
    // the id index in step with the names (a deleted id can be reused, a live one cannot).
    #[test]
    fn a_batch_applies_each_record_with_its_own_outcome() {
        let mut image = MetadataImage::default();
        let batch = MetadataRecord::Batch(vec![
            create("a", 1, vec![vec![1]]),
            create("b", 1, vec![vec![1]]),
            create("c", 3, vec![]),
            create("d", 4, vec![vec![1], vec![1]]),
            MetadataRecord::DeleteTopic { name: "a".into() },
            create("e", 1, vec![vec![1]]),
        ]);
        assert_eq!(
            image.apply(&batch),
            ApplyOutcome::Batch(vec![
                ApplyOutcome::Applied,
                ApplyOutcome::TopicAlreadyExists,
                ApplyOutcome::InvalidPartitionCount { current: 0 },
                ApplyOutcome::Applied,
                ApplyOutcome::Applied,
                ApplyOutcome::Applied,
            ])
        );
        assert_eq!(image.topics.keys().cloned().collect::<Vec<_>>(), vec!["d".to_string(), "e".to_string()]);
        assert_eq!(image.topic_by_id(&[1; 16]).map(|t| t.name.as_str()), Some("e"));
        assert_eq!(image.topic_by_id(&[4; 16]).map(|t| t.partitions.len()), Some(2));
        assert!(image.topic_by_id(&[3; 16]).is_none());
    }

    // Proves RegisterBroker adds and then replaces a broker's endpoint.
    #[test]
    fn register_broker_replaces_endpoint() {
        let mut image = MetadataImage::default();
        let reg =
            |port| MetadataRecord::RegisterBroker { node_id: 7, host: "h".into(), port, rack: None, listeners: vec![] };
        assert_eq!(image.apply(&reg(1)), ApplyOutcome::Applied);
        assert_eq!(image.apply(&reg(2)), ApplyOutcome::Applied);
        assert_eq!(image.brokers.len(), 1);
        assert_eq!(image.brokers.get(&7).map(|b| b.port), Some(2));
    }

    // Proves two images fed the same records end identical, outcomes included (determinism).
    #[test]
    fn same_records_same_image() {
        let records = [
            create("a", 1, vec![vec![1]]),
            create("a", 2, vec![vec![1]]),
            MetadataRecord::CreatePartitions {
                topic: "a".into(),
                new_partitions: vec![vec![2]],
                max_broker_partitions: None,
            },
            MetadataRecord::DeleteTopic { name: "zz".into() },
            MetadataRecord::PartitionChange {
                topic: "a".into(),
                partition: 1,
                expected_partition_epoch: 0,
                leader: Some(1),
                isr: vec![1],
                assignment: None,
            },
        ];
        let (mut x, mut y) = (MetadataImage::default(), MetadataImage::default());
        let ox: Vec<_> = records.iter().map(|r| x.apply(r)).collect();
        let oy: Vec<_> = records.iter().map(|r| y.apply(r)).collect();
        assert_eq!(ox, oy);
        assert_eq!(x, y);
    }

    // Proves a PartitionChange with an assignment installs the union and reassignment state,
    // bumps the leader epoch on a replica-set change even with the same leader (not on a
    // reorder), survives a snapshot-shaped round trip of fields, and refuses malformed ones.
    #[test]
    fn partition_change_with_an_assignment() {
        let mut image = with_live_brokers();
        image.apply(&create("a", 1, vec![vec![1, 2]]));
        let change = |expected_partition_epoch, leader, isr: Vec<NodeId>, replicas: Vec<NodeId>, adding, removing| {
            MetadataRecord::PartitionChange {
                topic: "a".into(),
                partition: 0,
                expected_partition_epoch,
                leader,
                isr,
                assignment: Some(ReplicaAssignment { replicas, adding_replicas: adding, removing_replicas: removing }),
            }
        };
        let before = image.clone();
        for bad in [
            change(0, Some(1), vec![1, 2], vec![], vec![], vec![]),
            change(0, Some(1), vec![1, 2], vec![1, 2, 2], vec![], vec![]),
            change(0, Some(1), vec![1, 2], vec![2, 3, 1], vec![4], vec![1]),
            change(0, Some(1), vec![1, 2], vec![2, 3, 1], vec![3], vec![3]),
            change(0, Some(1), vec![1, 2], vec![2, 3], vec![3], vec![]),
        ] {
            assert_eq!(image.apply(&bad), ApplyOutcome::InvalidPartitionChange, "{bad:?}");
        }
        assert_eq!(image, before);
        assert_eq!(
            image.apply(&change(0, Some(1), vec![1, 2], vec![2, 3, 1], vec![3], vec![1])),
            ApplyOutcome::Applied
        );
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!(
            (p.replicas.clone(), p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![2, 3, 1], vec![3], vec![1])
        );
        // A replica joining keeps the leader epoch (the leader takes it within its epoch).
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (Some(1), 0, 1));
        assert!(p.is_reassigning());
        // Completion: 1 leaves and leads no more; one leader epoch bump for both.
        assert_eq!(image.apply(&change(1, Some(2), vec![2, 3], vec![2, 3], vec![], vec![])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch, p.is_reassigning()), (Some(2), 1, 2, false));
        // A reorder keeps the leader epoch.
        assert_eq!(image.apply(&change(2, Some(2), vec![2, 3], vec![3, 2], vec![], vec![])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.replicas, p.leader_epoch, p.partition_epoch), (vec![3, 2], 1, 3));
        // A replica leaving while the leader stays bumps the leader epoch (fences its fetches).
        assert_eq!(image.apply(&change(3, Some(2), vec![2], vec![2], vec![], vec![])), ApplyOutcome::Applied);
        let p = image.partition("a", 0).cloned().expect("partition");
        assert_eq!((p.replicas, p.leader_epoch, p.partition_epoch), (vec![2], 2, 4));
    }
}
