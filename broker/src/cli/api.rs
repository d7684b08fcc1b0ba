//! The parts of the HTTP API's JSON (see the contract in `http/`) that the CLI reads to render
//! tables or to drive produce and consume. `--output json` prints the node's answer as it came,
//! so these types only need the fields a table shows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
pub struct Cluster {
    pub cluster_id: String,
    pub node_id: i32,
    pub controller_id: Option<i32>,
    pub version: String,
    pub uptime_ms: u64,
    pub nodes: Vec<ClusterNode>,
    pub topics: u64,
    pub partitions: u64,
    pub under_replicated_partitions: u64,
    pub offline_partitions: u64,
    pub bytes_in_per_sec: f64,
    pub bytes_out_per_sec: f64,
    pub messages_in_per_sec: f64,
    pub connections: u64,
}

#[derive(Deserialize)]
pub struct ClusterNode {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    pub is_controller: bool,
    /// Absent from nodes older than replication.
    #[serde(default)]
    pub state: Option<String>,
    /// `broker`, `controller`; absent from nodes older than broker-only nodes.
    #[serde(default)]
    pub roles: Vec<String>,
}

#[derive(Deserialize)]
pub struct TopicSummary {
    pub name: String,
    pub internal: bool,
    pub partitions: u64,
    pub replication_factor: i64,
    pub size_bytes: u64,
    pub messages: u64,
    pub messages_in_per_sec: f64,
    pub under_replicated_partitions: u64,
}

#[derive(Deserialize)]
pub struct Topic {
    pub name: String,
    pub topic_id: String,
    pub internal: bool,
    pub replication_factor: i64,
    /// Overrides only.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<Partition>,
}

#[derive(Deserialize)]
pub struct Partition {
    pub partition: i32,
    /// None (or -1) while the partition has no leader.
    pub leader: Option<i32>,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader_epoch: i32,
    /// The offsets and size are None when the answering node does not host the partition.
    pub log_start_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub size_bytes: Option<u64>,
    #[serde(default)]
    pub under_replicated: bool,
    #[serde(default)]
    pub offline: bool,
}

#[derive(Deserialize)]
pub struct TopicConfigs {
    pub configs: Vec<TopicConfig>,
}

#[derive(Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub value: String,
    pub source: String,
}

/// One page of `GET /v1/topics/{topic}/records`.
#[derive(Deserialize)]
pub struct RecordsPage {
    #[serde(default)]
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub next_offset: i64,
    pub records: Vec<Record>,
}

/// A record as `/v1` returns it; also what `consume --format json` prints, one per line.
#[derive(Deserialize, Serialize)]
pub struct Record {
    #[serde(default)]
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<String>,
    pub key_encoding: Encoding,
    pub value: Option<String>,
    pub value_encoding: Encoding,
    #[serde(default)]
    pub headers: Vec<Header>,
}

#[derive(Deserialize, Serialize)]
pub struct Header {
    pub key: String,
    pub value: Option<String>,
    pub encoding: Encoding,
}

#[derive(Deserialize, Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Utf8,
    Base64,
}

/// Answer of the v2 produce API.
#[derive(Deserialize)]
pub struct ProduceResponse {
    pub offsets: Vec<ProducedOffset>,
}

#[derive(Deserialize)]
pub struct ProducedOffset {
    pub error_code: Option<i64>,
    pub error: Option<String>,
}

/// A record from the v2 consumer API in `binary` format (key and value base64).
#[derive(Deserialize)]
pub struct V2Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<String>,
    /// Runnel adds it to Confluent's v2 shape.
    #[serde(default)]
    pub timestamp: Option<i64>,
}

#[derive(Deserialize)]
pub struct V2Instance {
    pub instance_id: String,
}

#[derive(Deserialize)]
pub struct V2Assignments {
    pub partitions: Vec<V2TopicPartition>,
}

#[derive(Deserialize, Serialize, Clone)]
pub struct V2TopicPartition {
    pub topic: String,
    pub partition: i32,
}

#[derive(Deserialize)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
}

#[derive(Deserialize)]
pub struct GroupSummary {
    pub group_id: String,
    pub state: String,
    #[serde(default)]
    pub protocol_type: String,
    #[serde(default)]
    pub protocol: String,
    pub members: u64,
    pub total_lag: i64,
    pub coordinator: Option<i32>,
}

#[derive(Deserialize)]
pub struct Group {
    pub group_id: String,
    pub state: String,
    #[serde(default)]
    pub protocol_type: String,
    #[serde(default)]
    pub protocol: String,
    pub coordinator: Option<i32>,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<GroupOffset>,
    pub total_lag: i64,
}

#[derive(Deserialize)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Vec<GroupAssignment>,
}

#[derive(Deserialize)]
pub struct GroupAssignment {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Deserialize)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    /// None when the answering node does not host the partition.
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub member_id: Option<String>,
}

#[derive(Deserialize)]
pub struct TransformList {
    pub transforms: Vec<Transform>,
    /// Nodes that did not answer: their workers are not counted in the states and rates.
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

/// `GET /v1/transforms/{name}`: a deployment, its aggregate state and its input partitions.
#[derive(Deserialize)]
pub struct Transform {
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub module_bytes: u64,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    pub start: String,
    pub error_policy: String,
    pub dead_letter_topic: Option<String>,
    pub memory_bytes: u64,
    pub call_timeout_ms: u64,
    pub batch_records_max: u32,
    /// exactly_once or at_least_once (older nodes send none).
    #[serde(default)]
    pub delivery: String,
    #[serde(default)]
    pub commit_interval_ms: u64,
    /// Whether the module keeps keyed state, its changelog topic and bound (older nodes send
    /// none).
    #[serde(default)]
    pub stateful: bool,
    #[serde(default)]
    pub state_topic: Option<String>,
    #[serde(default)]
    pub state_bytes_max: u64,
    /// running, failed, paused or starting.
    pub state: String,
    pub lag: i64,
    pub records_in_per_sec: f64,
    pub records_out_per_sec: f64,
    pub errors: u64,
    #[serde(default)]
    pub partitions: Vec<TransformPartition>,
    /// Nodes asked for their workers that did not answer (older nodes send none).
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

#[derive(Deserialize)]
pub struct TransformPartition {
    pub partition: i32,
    /// The node running this worker.
    #[serde(default)]
    pub node: Option<u64>,
    pub state: String,
    pub position: i64,
    pub high_watermark: i64,
    pub lag: i64,
    pub records_in: u64,
    pub records_out: u64,
    pub records_in_per_sec: f64,
    pub records_out_per_sec: f64,
    pub errors: u64,
    pub skipped: u64,
    pub dead_lettered: u64,
    pub last_error: Option<String>,
    #[serde(default)]
    pub state_bytes: u64,
    #[serde(default)]
    pub state_keys: u64,
}

#[derive(Deserialize)]
pub struct TransformLogs {
    pub lines: Vec<TransformLogLine>,
}

/// A guest log line or host event; also what `transform logs --follow --output json` prints.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct TransformLogLine {
    /// The node's cursor for this line (`after=` asks for the lines past it).
    #[serde(default)]
    pub seq: u64,
    pub timestamp_ms: i64,
    pub level: String,
    pub partition: Option<i32>,
    pub message: String,
}
