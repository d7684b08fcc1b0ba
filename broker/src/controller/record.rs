//! The metadata records that go through the quorum and the outcome of applying one.
//!
//! Owns: the record vocabulary (`MetadataRecord`) and its deterministic result (`ApplyOutcome`).
//! Invariant: records are self-contained facts decided by the proposer (ids, assignments and
//! configs are computed and validated before proposing); applying one depends only on the image
//! it is applied to, never on time, randomness or the local node, so every voter computes the same
//! image and the same outcome from the same log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Identifies a node of the cluster: a raft voter of the metadata quorum and a broker.
pub type NodeId = u64;

/// One change to the cluster metadata, committed through the raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// A broker process starting: a new incarnation whose broker epoch is this record's raft
    /// index. It starts fenced; the previous incarnation (if any) is fenced first.
    /// `host`/`port` is its inter-broker listener; `listeners` every Kafka listener (Kafka's
    /// `BrokerRegistrationRecord.endPoints`; empty in records written before listeners had
    /// names: then `host`/`port` serves every client).
    RegisterBroker {
        node_id: NodeId,
        host: String,
        port: u16,
        rack: Option<String>,
        #[serde(default)]
        listeners: Vec<ListenerEndpoint>,
    },
    /// The controller fences a broker whose lease expired or that shuts down: its leaderships
    /// move, it leaves every ISR. Applies only to the registration with `broker_epoch`.
    FenceBroker { node_id: NodeId, broker_epoch: i64 },
    /// The controller unfences a registered broker that heartbeats: it may lead and join ISRs
    /// again, and offline partitions whose ISR it holds elect it.
    UnfenceBroker { node_id: NodeId, broker_epoch: i64 },
    /// A leader's ISR change (Kafka's AlterPartition): applies only if `proposer` still leads in
    /// `leader_epoch`, the partition epoch is still `partition_epoch`, and every new member is
    /// live with the broker epoch the leader saw it fetch with (KIP-903; -1 skips that check).
    AlterPartition {
        topic: String,
        partition: u32,
        proposer: NodeId,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<NodeId>,
        broker_epochs: Vec<i64>,
    },
    /// Creates a topic. `partitions[p]` lists the replicas of partition `p`; the first replica is the
    /// leader (leader epoch 0) and all replicas start in the ISR.
    CreateTopic {
        name: String,
        topic_id: [u8; 16],
        partitions: Vec<Vec<NodeId>>,
        configs: BTreeMap<String, String>,
        /// The `max.broker.partitions` the proposer checked it against, checked again when the
        /// record applies (`controller::partition_limits`). `None`: unchecked (records
        /// written before the check moved here, the broker's own tests).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_broker_partitions: Option<u64>,
    },
    /// Deletes a topic.
    DeleteTopic { name: String },
    /// Appends partitions to a topic: `new_partitions[i]` are the replicas of partition `current + i`.
    CreatePartitions {
        topic: String,
        new_partitions: Vec<Vec<NodeId>>,
        /// As `CreateTopic`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_broker_partitions: Option<u64>,
    },
    /// Replaces the topic's whole config override map (the caller computed it, validated).
    SetTopicConfigs { topic: String, configs: BTreeMap<String, String> },
    /// Leader / ISR change of one partition, decided from the state whose partition epoch was
    /// `expected_partition_epoch`: it applies only while that is still the current one, so of two
    /// changes computed from one state only the first commits (Kafka's AlterPartition rule, and
    /// what fences a zombie leader's ISR change). Bumps `leader_epoch` when the leader changes
    /// or the replica set does, always bumps `partition_epoch`.
    PartitionChange {
        topic: String,
        partition: u32,
        expected_partition_epoch: i32,
        leader: Option<NodeId>,
        isr: Vec<NodeId>,
        /// A new replica list with its reassignment state (a reassignment started, completed or
        /// cancelled); `None` keeps both (an election or ISR change). Absent in records written
        /// before reassignments existed.
        #[serde(default)]
        assignment: Option<ReplicaAssignment>,
    },
    /// Deploys (or redeploys, replacing) a WASM transform: its module travels in the record so
    /// every node has it. The version is one more than the replaced deployment's.
    DeployTransform {
        name: String,
        spec: TransformSpec,
        module: ModuleBytes,
        sha256: String,
        /// A fresh id per upload; kept by the image across redeploys of an existing transform,
        /// so it names one deployment from its first upload to its delete.
        #[serde(default)]
        deployment: String,
    },
    /// Pauses or resumes a transform.
    SetTransformPaused { name: String, paused: bool },
    /// Removes a transform (its committed positions stay in its group until they expire; a
    /// new deployment of the name ignores them unless it resumes).
    DeleteTransform { name: String },
    /// Deploys (or redeploys, replacing) a produce-path validator on its topic; the module
    /// travels in the record. A topic has at most one validator (`TopicHasValidator`).
    DeployValidator { name: String, spec: ValidatorSpec, module: ModuleBytes, sha256: String },
    /// Removes a validator: its topic's batches are appended unchecked from then on.
    DeleteValidator { name: String },
    /// Deploys (or redeploys, replacing) a consumer group assignor (KIP-848
    /// `group.remote.assignor`); the module travels in the record. A redeploy is used from the
    /// next target assignment a group computes.
    DeployAssignor {
        name: String,
        spec: AssignorSpec,
        module: ModuleBytes,
        sha256: String,
        /// When it was deployed (the proposer's clock, ms since the epoch).
        deployed_ms: i64,
    },
    /// Removes an assignor: groups that chose it fall back to the default from their next
    /// target assignment.
    DeleteAssignor { name: String },
    /// A block of producer ids for a broker's InitProducerId answers (Kafka's
    /// AllocateProducerIds, KIP-730): the next `PRODUCER_ID_BLOCK_SIZE` ids, never handed out
    /// again. Applies only for the registration with `broker_epoch`.
    AllocateProducerIds { node_id: NodeId, broker_epoch: i64 },
    /// Sets or replaces a user's SCRAM credential for one mechanism (Kafka's
    /// `UserScramCredentialRecord`): never the password, only what verifies it.
    UpsertScramCredential {
        user: String,
        /// Kafka's mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
        mechanism: String,
        salt: Vec<u8>,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
        iterations: u32,
    },
    /// Removes a user's credential for one mechanism (Kafka's `RemoveUserScramCredentialRecord`).
    DeleteScramCredential { user: String, mechanism: String },
    /// Adds ACLs (Kafka's `AccessControlEntryRecord`s); one already present is kept once.
    CreateAcls { acls: Vec<AclEntry> },
    /// Removes ACLs (Kafka's `RemoveAccessControlEntryRecord`s); absent ones are skipped.
    DeleteAcls { acls: Vec<AclEntry> },
    /// Issues a bearer token of the HTTP API (`POST /v1/tokens`, a dashboard login, a node's
    /// own token for node-to-node HTTP): the hash of its secret, never the secret.
    IssueHttpToken { token: HttpToken },
    /// Revokes HTTP tokens (absent ones are skipped).
    RevokeHttpTokens { ids: Vec<String> },
    /// A change of deployed code (a transform, validator or assignor deployed, paused, resumed
    /// or deleted) with who made it: applies `record`, and only if that applied, appends `entry`
    /// to the image's audit log. The outcome is `record`'s.
    Audited { record: Box<MetadataRecord>, entry: AuditEntry },
    /// Several records in one raft entry (CreateTopics or DeleteTopics of many topics: one
    /// proposal, one commit), applied in order and each on its own, as Kafka answers each topic
    /// of a request on its own: one rejected record leaves the others applied. The outcome is
    /// `ApplyOutcome::Batch`, one per record.
    Batch(Vec<MetadataRecord>),
}

/// A bearer token of the HTTP API as the quorum stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpToken {
    /// Public part of the token (`rnl_<id>_<secret>`), how it is listed and revoked.
    pub id: String,
    /// Whom it authenticates (`User:<name>`).
    pub principal: String,
    /// SHA-256 of the secret part.
    pub secret_sha256: Vec<u8>,
    pub kind: HttpTokenKind,
    /// The proposer's clock, ms since the epoch.
    pub issued_ms: i64,
    /// After this (ms since the epoch) the token authenticates nothing.
    pub expires_ms: i64,
    /// What its owner said it is for.
    pub description: String,
}

/// How a token came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpTokenKind {
    /// `POST /v1/tokens`, for scripts.
    Api,
    /// A dashboard login (its cookie).
    Session,
    /// A node's credential for its own HTTP calls to the other nodes.
    Node,
}

impl HttpTokenKind {
    pub fn name(self) -> &'static str {
        match self {
            HttpTokenKind::Api => "api",
            HttpTokenKind::Session => "session",
            HttpTokenKind::Node => "node",
        }
    }
}

/// One entry of the audit log of deployed code: who did what to which module, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The proposer's clock, ms since the epoch.
    pub at_ms: i64,
    /// `User:<name>` of the HTTP client.
    pub principal: String,
    /// The client's address.
    pub client_host: String,
    /// `deploy`, `pause`, `resume` or `delete`.
    pub action: String,
    /// `transform`, `validator` or `assignor`.
    pub kind: String,
    pub name: String,
    /// SHA-256 of the deployed module (deployments only).
    pub sha256: Option<String>,
}

/// Entries the audit log keeps (the oldest go first; each entry is also logged).
pub const AUDIT_ENTRIES_MAX: usize = 10_000;

/// One Kafka listener of a registered broker, as clients that connect to the listener of that
/// name are told to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's security protocol id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL).
    pub security_protocol: i16,
}

/// One ACL as the quorum stores it: Kafka's codes for the resource type, pattern type,
/// operation and permission (`security::acl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclEntry {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl AclEntry {
    pub fn of(acl: &crate::security::acl::AclBinding) -> AclEntry {
        AclEntry {
            resource_type: acl.resource_type.code(),
            resource_name: acl.resource_name.clone(),
            pattern_type: acl.pattern.code(),
            principal: acl.principal.clone(),
            host: acl.host.clone(),
            operation: acl.operation.code(),
            permission: acl.permission.code(),
        }
    }

    /// The binding, if every code is known (records are validated before they are proposed).
    pub fn binding(&self) -> Option<crate::security::acl::AclBinding> {
        use crate::security::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
        Some(AclBinding {
            resource_type: ResourceType::from_code(self.resource_type)?,
            resource_name: self.resource_name.clone(),
            pattern: PatternType::from_code(self.pattern_type)?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: Operation::from_code(self.operation)?,
            permission: Permission::from_code(self.permission)?,
        })
    }
}

/// A partition's replica list and the replicas an ongoing reassignment adds to it and removes
/// from it (both empty when none is in progress; Kafka's `replicas`, `addingReplicas`,
/// `removingReplicas` of a `PartitionChangeRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAssignment {
    pub replicas: Vec<NodeId>,
    #[serde(default)]
    pub adding_replicas: Vec<NodeId>,
    #[serde(default)]
    pub removing_replicas: Vec<NodeId>,
}

/// What a transform does, as deployed (validated by the proposer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformSpec {
    pub input_topic: String,
    /// Index = the `topic` index a guest writes to.
    pub output_topics: Vec<String>,
    pub parameters: BTreeMap<String, String>,
    /// Where a partition starts when the transform has no committed position for it.
    pub start: StartPosition,
    pub error_policy: ErrorPolicy,
    /// Linear memory cap per instance.
    pub memory_bytes: u64,
    /// Deadline of one guest call (one batch).
    pub call_timeout_ms: u64,
    /// Records per guest call at most.
    pub batch_records_max: u32,
    /// Continue from positions an earlier deployment of this name committed (else a new
    /// deployment ignores them and starts at `start`).
    #[serde(default)]
    pub resume: bool,
    /// How outputs and positions are made durable.
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// How often a position is committed (exactly-once: how long one transaction gathers
    /// batches) while input keeps coming; a caught-up worker commits at once.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Bound of a stateful transform's keyed state per input partition (keys plus values).
    #[serde(default = "default_state_bytes_max")]
    pub state_bytes_max: u64,
}

pub const STATE_BYTES_MAX_DEFAULT: u64 = 64 << 20;

fn default_state_bytes_max() -> u64 {
    STATE_BYTES_MAX_DEFAULT
}

/// Kafka Streams' `commit.interval.ms` under exactly-once.
pub const COMMIT_INTERVAL_MS_DEFAULT: u64 = 100;

fn default_commit_interval_ms() -> u64 {
    COMMIT_INTERVAL_MS_DEFAULT
}

/// A transform's delivery guarantee.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Outputs, dead letters and the input position commit in one transaction: a
    /// read_committed consumer of the outputs sees each input's outputs exactly once.
    #[default]
    ExactlyOnce,
    /// Outputs appended, then the position committed: after a crash, outputs since the last
    /// commit are written again (lower latency, duplicates possible).
    AtLeastOnce,
}

impl DeliveryMode {
    pub fn name(self) -> &'static str {
        match self {
            DeliveryMode::ExactlyOnce => "exactly_once",
            DeliveryMode::AtLeastOnce => "at_least_once",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPosition {
    Earliest,
    Latest,
}

/// What happens to a batch the guest fails on (trap, deadline, memory cap, error, bad output).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ErrorPolicy {
    /// The partition stops at the failing batch and retries it with backoff (nothing skipped).
    Retry,
    /// The failing batch's input records go to `topic` with the error in headers; processing
    /// goes on after them.
    DeadLetter { topic: String },
    /// The failing batch is skipped (counted, logged).
    Skip,
}

/// What a validator checks and how, as deployed (validated by the proposer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorSpec {
    /// The topic whose produced batches it checks (need not exist yet).
    pub topic: String,
    pub parameters: BTreeMap<String, String>,
    /// What a batch gets when the guest fails on it (trap, deadline, memory cap, failed init).
    pub on_failure: ValidatorFailure,
    /// Linear memory cap per instance.
    pub memory_bytes: u64,
    /// Deadline of one guest call (one partition's batch).
    pub call_timeout_ms: u64,
}

/// A validator's failure policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValidatorFailure {
    /// Fail closed: the batch is refused (INVALID_RECORD naming the failure).
    #[default]
    Reject,
    /// Fail open: the batch is appended unchecked (the failure is counted and shown).
    Accept,
}

impl ValidatorFailure {
    pub fn name(self) -> &'static str {
        match self {
            ValidatorFailure::Reject => "reject",
            ValidatorFailure::Accept => "accept",
        }
    }
}

/// A deployed validator in the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorImage {
    pub name: String,
    pub spec: ValidatorSpec,
    pub module: ModuleBytes,
    pub sha256: String,
    /// 1 for the first deployment, +1 per redeploy.
    pub version: u64,
}

/// How an uploaded assignor runs, as deployed (validated by the proposer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignorSpec {
    /// Linear memory cap per instance.
    pub memory_bytes: u64,
    /// Deadline of one `assign` call.
    pub call_timeout_ms: u64,
}

/// A deployed assignor in the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignorImage {
    pub name: String,
    pub spec: AssignorSpec,
    pub module: ModuleBytes,
    pub sha256: String,
    /// 1 for the first deployment, +1 per redeploy.
    pub version: u64,
    /// When the version was deployed (ms since the epoch, the proposer's clock).
    #[serde(default)]
    pub deployed_ms: i64,
}

/// Module bytes, shared (the image is cloned on every change) and base64 in JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleBytes(pub std::sync::Arc<Vec<u8>>);

impl Serialize for ModuleBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.0.as_slice()))
    }
}

impl<'de> Deserialize<'de> for ModuleBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use base64::Engine;
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|bytes| ModuleBytes(std::sync::Arc::new(bytes)))
            .map_err(serde::de::Error::custom)
    }
}

/// A deployed transform in the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformImage {
    pub name: String,
    pub spec: TransformSpec,
    pub module: ModuleBytes,
    pub sha256: String,
    /// 1 for the first deployment, +1 per redeploy.
    pub version: u64,
    pub paused: bool,
    /// The deployment's id (see `DeployTransform`): positions committed under another id
    /// belong to an earlier deployment of this name. Empty for one deployed before ids existed.
    #[serde(default)]
    pub deployment: String,
}

/// The deterministic result of applying one record to the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApplyOutcome {
    /// The record changed the image.
    Applied,
    /// `CreateTopic` with a name (or topic id) that already exists; the image is unchanged.
    TopicAlreadyExists,
    /// The record names a topic (or a partition of it) that does not exist; the image is unchanged.
    /// Kafka reports both as UNKNOWN_TOPIC_OR_PARTITION.
    UnknownTopic,
    /// `CreatePartitions` that would not increase the partition count; the image is unchanged.
    InvalidPartitionCount { current: u32 },
    /// `CreateTopic` / `CreatePartitions` with an empty replica list or a broker twice in one
    /// (Kafka's INVALID_REPLICA_ASSIGNMENT); the image is unchanged.
    InvalidReplicaAssignment,
    /// `CreateTopic` / `CreatePartitions` that would put a broker past the
    /// `max.broker.partitions` the record carries (the message names it: Kafka's
    /// POLICY_VIOLATION); the image is unchanged.
    ReplicaLimit { message: String },
    /// A transform record names a transform that does not exist; the image is unchanged.
    UnknownTransform,
    /// `DeleteValidator` names a validator that does not exist; the image is unchanged.
    UnknownValidator,
    /// `DeployValidator` on a topic another validator checks; the image is unchanged.
    TopicHasValidator { validator: String },
    /// `DeleteAssignor` names an assignor that does not exist; the image is unchanged.
    UnknownAssignor,
    /// A SCRAM record with an unknown mechanism, or `DeleteScramCredential` of a credential
    /// that does not exist (Kafka's RESOURCE_NOT_FOUND); the image is unchanged.
    UnknownScramCredential,
    /// `PartitionChange` computed from another partition epoch than the current one (Kafka's
    /// INVALID_UPDATE_VERSION); the image is unchanged.
    StalePartitionEpoch { expected: i32, current: i32 },
    /// `PartitionChange` with an empty ISR, a non-replica or duplicate in it, or a leader outside
    /// it, or a replica list that is empty, has a duplicate, or lacks an adding or removing
    /// replica (or has one that is both) (INVALID_REQUEST); the image is unchanged.
    InvalidPartitionChange,
    /// `FenceBroker` / `UnfenceBroker` for a registration that is not current (or already in that
    /// state); the image is unchanged.
    StaleBrokerEpoch,
    /// `AlterPartition` refused by the controller's checks (the reason names Kafka's error); the
    /// image is unchanged.
    IsrChangeRejected { reason: String },
    /// The outcomes of a `MetadataRecord::Batch`, in its order.
    Batch(Vec<ApplyOutcome>),
    /// `AllocateProducerIds`: the ids `first .. first + count` are the broker's.
    ProducerIds { first: i64, count: i64 },
}
