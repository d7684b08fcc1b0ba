//! Prometheus metrics of a node, under the names Kafka's JMX exporter and `kafka_exporter` give
//! them (`kafka_server_brokertopicmetrics_*`, `kafka_network_requestmetrics_*`,
//! `kafka_consumergroup_lag`), so existing dashboards and alerts need little change.
//!
//! Counters and histograms are updated on the request paths (one atomic add each; label
//! lookups are cached per topic). Gauges that describe state (partition counts, log sizes,
//! group lag) are computed when `/metrics` is scraped, from the same sources the HTTP API
//! reads, so the two always agree. Per-second rates for the dashboard are sampled from the
//! counters by `Rates::sample` once a second, and the ISR shrinks and expands the metadata image
//! shows by `sample_isr_changes` (a bounded history, [`ISR_HISTORY_BUCKETS`] buckets).
//!
//! Must not: hold a lock across I/O, or grow without bound (labels are topics, partitions,
//! groups, API names and route templates: all bounded by what exists).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::controller::{MetadataImage, PartitionImage};
use crate::log::OpenFilesStats;

use prometheus::{
    Counter, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Latency buckets (seconds) shared by Kafka API and HTTP request histograms: 50 µs to 30 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// Per-topic counters, resolved once per topic (a label lookup hashes every label value).
#[derive(Clone)]
pub struct TopicCounters {
    pub bytes_in: IntCounter,
    pub messages_in: IntCounter,
    pub bytes_out: IntCounter,
}

pub struct Metrics {
    registry: Registry,
    bytes_in: IntCounterVec,
    messages_in: IntCounterVec,
    bytes_out: IntCounterVec,
    bytes_in_all: IntCounter,
    messages_in_all: IntCounter,
    bytes_out_all: IntCounter,
    /// Record bytes a leader sent to followers' fetches (Kafka's ReplicationBytesOutPerSec).
    pub replication_bytes_out: IntCounter,
    /// Record bytes this node appended as a follower (Kafka's ReplicationBytesInPerSec).
    pub replication_bytes_in: IntCounter,
    topics: Mutex<HashMap<String, TopicCounters>>,
    kafka_requests: IntCounterVec,
    kafka_request_seconds: HistogramVec,
    kafka_request_errors: IntCounterVec,
    /// Per API key: its request counter and latency histogram, resolved once.
    apis: Mutex<HashMap<i16, (IntCounter, Histogram)>>,
    pub connections: IntGauge,
    pub connections_created: IntCounter,
    /// Connections closed as soon as accepted, per reason (`max_connections_per_ip`).
    pub connections_rejected: IntCounterVec,
    /// Partition leaders' questions to transaction coordinators (KIP-890), per `mode` (`verify`:
    /// part 1's check; `add`: part 2's implicit add) and `result` (`ok`, or the name of the
    /// error the producer is answered with, e.g. `NotEnoughReplicas`).
    pub txn_verifications: IntCounterVec,
    /// Connections closed after `connections.max.idle.ms` without traffic.
    pub connections_idle_expired: IntCounter,
    /// Ended SASL exchanges per listener and `result` (success, failure, reauthentication):
    /// Kafka's successful-authentication, failed-authentication and
    /// successful-reauthentication totals.
    pub authentications: IntCounterVec,
    /// Connections closed because their SASL session ended without re-authentication (KIP-368,
    /// Kafka's expired-connections-killed-count).
    pub expired_connections_killed: IntCounter,
    /// Time the acceptor waited for a free slot at `max.connections`.
    pub acceptor_blocked_seconds: Counter,
    pub acceptor_throttle_seconds: Counter,
    /// Failed `accept`s per listener (`kafka`, `http`): out of descriptors, mostly.
    pub accept_errors: IntCounterVec,
    /// Appends a partition refused with KAFKA_STORAGE_ERROR (disk full, out of descriptors, I/O
    /// error), per topic: Kafka's failed-log-dir signal, per partition's topic here.
    pub log_storage_errors: IntCounterVec,
    /// Metadata store writes retried after running out of descriptors or disk space (set from
    /// the controller at scrape time).
    pub metadata_storage_retries: IntGauge,
    /// The `queued.max.request.bytes` pool: bytes granted to requests being read or handled, and
    /// bytes left.
    pub memory_pool_used_bytes: IntGauge,
    pub memory_pool_available_bytes: IntGauge,
    http_requests: IntCounterVec,
    http_request_seconds: HistogramVec,
    pub isr_shrinks: IntCounter,
    pub isr_expands: IntCounter,
    // State gauges, set at scrape time.
    pub partition_count: IntGauge,
    pub leader_count: IntGauge,
    pub under_replicated_partitions: IntGauge,
    pub under_min_isr_partitions: IntGauge,
    pub at_min_isr_partitions: IntGauge,
    pub offline_partitions: IntGauge,
    /// Over the partitions this node leads: the largest gap between the log end offset and a
    /// follower's (ISR members and not), in records.
    pub replica_max_lag: IntGauge,
    /// How long the oldest open transaction this node coordinates has been open, ms (0: none):
    /// a hanging transaction holds its partitions' last stable offsets back.
    pub transaction_oldest_open_ms: IntGauge,
    pub unclean_leader_elections: IntGauge,
    pub group_members: IntGaugeVec,
    pub scrape_seconds: Histogram,
    pub transform_records_in: IntCounterVec,
    pub transform_records_out: IntCounterVec,
    pub transform_bytes_in: IntCounterVec,
    pub transform_bytes_out: IntCounterVec,
    pub transform_errors: IntCounterVec,
    pub transform_call_seconds: HistogramVec,
    pub transform_lag: IntGaugeVec,
    pub transform_memory_bytes: IntGaugeVec,
    pub transform_state_bytes: IntGaugeVec,
    pub transform_transactions: IntCounterVec,
    pub transform_delivery: IntGaugeVec,
    pub validator_batches: IntCounterVec,
    pub validator_records_rejected: IntCounterVec,
    pub validator_call_seconds: HistogramVec,
    pub assignor_runs: IntCounterVec,
    pub assignor_call_seconds: HistogramVec,
    /// Partitions led here that a reassignment is moving (Kafka's `ReassigningPartitions`).
    pub reassigning_partitions: IntGauge,
    /// 1 on the active controller (the metadata quorum's leader), else 0.
    pub active_controller: IntGauge,
    /// Registered brokers by state, reported by the active controller only (as Kafka does, so
    /// a sum over the cluster is the count).
    pub fenced_brokers: IntGauge,
    pub active_brokers: IntGauge,
    started: Instant,
    rates: Mutex<Rates>,
    isr_history: Mutex<IsrHistory>,
    /// Where the log file cache's figures come from, once the node names it.
    log_file_cache: std::sync::RwLock<Option<OpenFileStatsSource>>,
}

/// Reads the log file cache's figures at scrape time (the node passes it in).
pub type OpenFileStatsSource = Arc<dyn Fn() -> OpenFilesStats + Send + Sync>;

/// The process's descriptors against RLIMIT_NOFILE (None where Linux's `/proc` or
/// `getrlimit` cannot say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessFiles {
    pub open: Option<u64>,
    pub soft_limit: Option<u64>,
    pub hard_limit: Option<u64>,
}

impl ProcessFiles {
    pub fn read() -> ProcessFiles {
        // The directory's own descriptor is listed while it is read.
        let open = std::fs::read_dir("/proc/self/fd").ok().map(|d| (d.count() as u64).saturating_sub(1));
        let limits = crate::log::files::nofile_limits();
        let finite = |v: u64| (v != libc::RLIM_INFINITY as u64).then_some(v);
        ProcessFiles {
            open,
            soft_limit: limits.and_then(|(soft, _)| finite(soft)),
            hard_limit: limits.and_then(|(_, hard)| finite(hard)),
        }
    }
}

/// Descriptors of the process and of the log file cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStats {
    pub process: ProcessFiles,
    pub log_file_cache: Option<OpenFilesStats>,
}

/// Width of one bucket of the ISR change history.
pub const ISR_BUCKET_MS: i64 = 10_000;
/// Buckets kept: the last 10 minutes.
pub const ISR_HISTORY_BUCKETS: usize = 60;

/// ISR changes of every partition of the cluster, as this node's metadata image shows them, in
/// [`ISR_BUCKET_MS`] buckets. The image is compared with the one seen at the previous sample:
/// a partition whose ISR lost a member counts one shrink, one that gained a member one expand
/// (both when a reassignment swaps members), whatever the cause (a leader's AlterPartition, a
/// fenced broker removed by the controller). Unlike the `isr*_total` counters (this node's
/// leaders only, Kafka's meaning) every node shows the same cluster-wide history. Two changes
/// of one partition between samples (one second) that cancel out are not seen.
#[derive(Default)]
pub struct IsrHistory {
    last: Option<Arc<MetadataImage>>,
    /// (bucket start, unix ms; shrinks; expands), oldest first, at most `ISR_HISTORY_BUCKETS`.
    buckets: VecDeque<(i64, u64, u64)>,
}

/// One bucket of [`IsrHistory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsrBucket {
    pub start_ms: i64,
    pub shrinks: u64,
    pub expands: u64,
}

impl IsrHistory {
    /// Counts the ISR changes between the image seen last and `image`, at `now_ms`.
    pub fn sample(&mut self, image: &Arc<MetadataImage>, now_ms: i64) {
        let (shrinks, expands) = match &self.last {
            Some(last) if Arc::ptr_eq(last, image) => (0, 0),
            Some(last) => isr_changes(last, image),
            None => (0, 0),
        };
        self.last = Some(image.clone());
        let start = now_ms - now_ms.rem_euclid(ISR_BUCKET_MS);
        match self.buckets.back_mut() {
            // A clock stepped back lands in the newest bucket rather than reordering the history.
            Some(bucket) if bucket.0 >= start => {
                bucket.1 += shrinks;
                bucket.2 += expands;
            }
            _ => self.buckets.push_back((start, shrinks, expands)),
        }
        while self.buckets.len() > ISR_HISTORY_BUCKETS {
            self.buckets.pop_front();
        }
    }

    /// The last [`ISR_HISTORY_BUCKETS`] buckets up to the one holding `now_ms`, oldest first,
    /// with the intervals that saw no sample (or no change) as zeros.
    pub fn buckets(&self, now_ms: i64) -> Vec<IsrBucket> {
        let current = now_ms - now_ms.rem_euclid(ISR_BUCKET_MS);
        let first = current - ISR_BUCKET_MS * (ISR_HISTORY_BUCKETS as i64 - 1);
        (0..ISR_HISTORY_BUCKETS as i64)
            .map(|i| {
                let start_ms = first + i * ISR_BUCKET_MS;
                let (shrinks, expands) = self.buckets.iter().find(|b| b.0 == start_ms).map_or((0, 0), |b| (b.1, b.2));
                IsrBucket { start_ms, shrinks, expands }
            })
            .collect()
    }
}

/// (shrinks, expands) from `before` to `after`: partitions of the same topic incarnation whose
/// ISR lost, gained members. Created and deleted partitions are not ISR changes.
/// Only the topics whose value changed are visited (`OrdMap::diff` skips shared subtrees).
fn isr_changes(before: &MetadataImage, after: &MetadataImage) -> (u64, u64) {
    let (mut shrinks, mut expands) = (0, 0);
    for item in before.topics.diff(&after.topics) {
        let imbl::ordmap::DiffItem::Update { old: (_, old), new: (_, topic) } = item else { continue };
        if old.topic_id != topic.topic_id {
            continue;
        }
        for p in &topic.partitions {
            let Some(q) = old.partitions.get(p.partition as usize).filter(|q| q.partition == p.partition) else {
                continue;
            };
            let (lost, gained) = isr_diff(q, p);
            shrinks += u64::from(lost);
            expands += u64::from(gained);
        }
    }
    (shrinks, expands)
}

fn isr_diff(before: &PartitionImage, after: &PartitionImage) -> (bool, bool) {
    if before.isr == after.isr {
        return (false, false);
    }
    let lost = before.isr.iter().any(|n| !after.isr.contains(n));
    let gained = after.isr.iter().any(|n| !before.isr.contains(n));
    (lost, gained)
}

/// Throughput over the last sampling interval, for the dashboard.
#[derive(Debug, Default, Clone)]
pub struct Rates {
    last: Option<(Instant, Totals)>,
    pub bytes_in_per_sec: f64,
    pub bytes_out_per_sec: f64,
    pub messages_in_per_sec: f64,
    /// topic → (messages/s, bytes/s) in.
    pub topics: HashMap<String, (f64, f64)>,
}

#[derive(Debug, Default, Clone)]
struct Totals {
    bytes_in: u64,
    bytes_out: u64,
    messages_in: u64,
    topics: HashMap<String, (u64, u64)>,
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(metric.clone())).expect("unique metric");
    metric
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let metric = IntCounter::new(name, help).expect("valid metric");
    registry.register(Box::new(metric.clone())).expect("unique metric");
    metric
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let metric = IntGauge::new(name, help).expect("valid metric");
    registry.register(Box::new(metric.clone())).expect("unique metric");
    metric
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let metric = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(metric.clone())).expect("unique metric");
    metric
}

fn histogram_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let metric = HistogramVec::new(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()), labels)
        .expect("valid metric");
    registry.register(Box::new(metric.clone())).expect("unique metric");
    metric
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let r = Registry::new();
        let scrape_seconds =
            Histogram::with_opts(HistogramOpts::new("runnel_metrics_scrape_seconds", "Time to render /metrics"))
                .expect("valid metric");
        r.register(Box::new(scrape_seconds.clone())).expect("unique metric");
        Arc::new(Metrics {
            bytes_in: counter_vec(
                &r,
                "kafka_server_brokertopicmetrics_bytes_in_total",
                "Bytes appended by producers, per topic",
                &["topic"],
            ),
            messages_in: counter_vec(
                &r,
                "kafka_server_brokertopicmetrics_messages_in_total",
                "Records appended by producers, per topic",
                &["topic"],
            ),
            bytes_out: counter_vec(
                &r,
                "kafka_server_brokertopicmetrics_bytes_out_total",
                "Record bytes returned to consumers, per topic",
                &["topic"],
            ),
            bytes_in_all: counter(&r, "kafka_server_brokertopicmetrics_all_bytes_in_total", "Bytes in, all topics"),
            messages_in_all: counter(
                &r,
                "kafka_server_brokertopicmetrics_all_messages_in_total",
                "Records in, all topics",
            ),
            bytes_out_all: counter(&r, "kafka_server_brokertopicmetrics_all_bytes_out_total", "Bytes out, all topics"),
            replication_bytes_out: counter(
                &r,
                "kafka_server_brokertopicmetrics_replication_bytes_out_total",
                "Record bytes sent to followers' fetches, all topics",
            ),
            replication_bytes_in: counter(
                &r,
                "kafka_server_brokertopicmetrics_replication_bytes_in_total",
                "Record bytes appended as a follower, all topics",
            ),
            topics: Mutex::new(HashMap::new()),
            kafka_requests: counter_vec(
                &r,
                "kafka_network_requestmetrics_requests_total",
                "Kafka protocol requests handled, per API",
                &["request"],
            ),
            kafka_request_seconds: histogram_vec(
                &r,
                "kafka_network_requestmetrics_total_time_seconds",
                "Time from a Kafka request read to its response written, per API",
                &["request"],
            ),
            kafka_request_errors: counter_vec(
                &r,
                "kafka_network_requestmetrics_errors_total",
                "Connections closed on a malformed, oversized or unsupported request, per reason",
                &["reason"],
            ),
            apis: Mutex::new(HashMap::new()),
            connections: gauge(&r, "kafka_server_socketserver_connection_count", "Open Kafka protocol connections"),
            connections_created: counter(
                &r,
                "kafka_server_socketserver_connection_creation_total",
                "Kafka protocol connections accepted",
            ),
            txn_verifications: counter_vec(
                &r,
                "runnel_txn_partition_verifications_total",
                "Transactional first batches a partition leader checked with the transaction's coordinator",
                &["mode", "result"],
            ),
            connections_rejected: counter_vec(
                &r,
                "kafka_server_socketserver_connection_rejected_total",
                "Kafka protocol connections closed as soon as accepted, per reason",
                &["reason"],
            ),
            connections_idle_expired: counter(
                &r,
                "kafka_server_socketserver_connection_idle_expired_total",
                "Kafka protocol connections closed after connections.max.idle.ms without traffic",
            ),
            authentications: counter_vec(
                &r,
                "kafka_server_socketserver_authentications_total",
                "SASL exchanges that ended, per listener and result (success, failure, reauthentication)",
                &["listener", "result"],
            ),
            expired_connections_killed: counter(
                &r,
                "kafka_server_socketserver_expired_connections_killed_total",
                "Connections closed because their SASL session ended without re-authentication (connections.max.reauth.ms)",
            ),
            acceptor_blocked_seconds: {
                let metric = Counter::new(
                    "kafka_network_acceptor_blocked_seconds_total",
                    "Time the Kafka listener stopped accepting because max.connections were open",
                )
                .expect("valid metric");
                r.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            acceptor_throttle_seconds: {
                let metric = Counter::new(
                    "kafka_network_acceptor_throttle_seconds_total",
                    "Time the Kafka listeners waited before accepting to keep to max.connection.creation.rate (KIP-612)",
                )
                .expect("valid metric");
                r.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            accept_errors: counter_vec(
                &r,
                "kafka_network_acceptor_accept_errors_total",
                "Failed accepts of a listener (out of file descriptors, mostly), per listener",
                &["listener"],
            ),
            log_storage_errors: counter_vec(
                &r,
                "kafka_log_storage_errors_total",
                "Appends refused with KAFKA_STORAGE_ERROR (disk full, out of file descriptors, I/O error), per topic",
                &["topic"],
            ),
            metadata_storage_retries: gauge(
                &r,
                "runnel_metadata_storage_retries",
                "Metadata quorum writes retried after running out of file descriptors or disk space, since start",
            ),
            memory_pool_used_bytes: gauge(
                &r,
                "kafka_network_socketserver_memory_pool_used_bytes",
                "Bytes of queued.max.request.bytes held by requests being read or handled",
            ),
            memory_pool_available_bytes: gauge(
                &r,
                "kafka_network_socketserver_memory_pool_available_bytes",
                "Bytes of queued.max.request.bytes free for the next requests",
            ),
            http_requests: counter_vec(
                &r,
                "runnel_http_requests_total",
                "HTTP requests, per method, route template and status",
                &["method", "route", "status"],
            ),
            http_request_seconds: histogram_vec(
                &r,
                "runnel_http_request_duration_seconds",
                "HTTP request latency, per method and route template",
                &["method", "route"],
            ),
            isr_shrinks: counter(
                &r,
                "kafka_server_replicamanager_isrshrinks_total",
                "ISR shrinks proposed by this node's leaders and committed",
            ),
            isr_expands: counter(
                &r,
                "kafka_server_replicamanager_isrexpands_total",
                "ISR expands proposed by this node's leaders and committed",
            ),
            partition_count: gauge(&r, "kafka_server_replicamanager_partitioncount", "Partitions hosted by this node"),
            leader_count: gauge(&r, "kafka_server_replicamanager_leadercount", "Partitions this node leads"),
            under_replicated_partitions: gauge(
                &r,
                "kafka_server_replicamanager_underreplicatedpartitions",
                "Partitions led by this node whose ISR is smaller than their replication factor",
            ),
            under_min_isr_partitions: gauge(
                &r,
                "kafka_server_replicamanager_underminisrpartitioncount",
                "Partitions led by this node whose ISR is below min.insync.replicas (acks=all writes refused)",
            ),
            at_min_isr_partitions: gauge(
                &r,
                "kafka_server_replicamanager_atminisrpartitioncount",
                "Partitions led by this node whose ISR is exactly min.insync.replicas (one more loss refuses acks=all)",
            ),
            reassigning_partitions: gauge(
                &r,
                "kafka_server_replicamanager_reassigningpartitions",
                "Partitions led by this node that a reassignment is moving",
            ),
            active_controller: gauge(
                &r,
                "kafka_controller_kafkacontroller_activecontrollercount",
                "1 on the active controller (leader of the metadata quorum), else 0",
            ),
            fenced_brokers: gauge(
                &r,
                "kafka_controller_kafkacontroller_fencedbrokercount",
                "Fenced brokers (on the active controller; 0 elsewhere)",
            ),
            active_brokers: gauge(
                &r,
                "kafka_controller_kafkacontroller_activebrokercount",
                "Live (unfenced) brokers (on the active controller; 0 elsewhere)",
            ),
            unclean_leader_elections: gauge(
                &r,
                "kafka_controller_controllerstats_unclean_leader_elections_total",
                "Unclean leader elections this node committed as the active controller",
            ),
            replica_max_lag: gauge(
                &r,
                "kafka_server_replicafetchermanager_maxlag",
                "Largest follower lag (records) over the partitions this node leads",
            ),
            transaction_oldest_open_ms: gauge(
                &r,
                "runnel_transaction_oldest_open_ms",
                "Age (ms) of the oldest open transaction this node coordinates; 0 when none is open",
            ),
            offline_partitions: gauge(
                &r,
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "Partitions without a leader (on the active controller; 0 elsewhere)",
            ),
            group_members: gauge_vec(&r, "kafka_consumergroup_members", "Members of a group", &["consumergroup"]),
            scrape_seconds,
            transform_records_in: counter_vec(
                &r,
                "runnel_transform_records_in_total",
                "Input records processed",
                &["transform"],
            ),
            transform_records_out: counter_vec(
                &r,
                "runnel_transform_records_out_total",
                "Output records written",
                &["transform"],
            ),
            transform_bytes_in: counter_vec(
                &r,
                "runnel_transform_bytes_in_total",
                "Input bytes handed to the guest",
                &["transform"],
            ),
            transform_bytes_out: counter_vec(
                &r,
                "runnel_transform_bytes_out_total",
                "Output bytes returned by the guest",
                &["transform"],
            ),
            transform_errors: counter_vec(
                &r,
                "runnel_transform_errors_total",
                "Failed batches by kind (deadline, memory, trap, guest_error, invalid_output, init, append, position, transaction)",
                &["transform", "kind"],
            ),
            transform_call_seconds: histogram_vec(
                &r,
                "runnel_transform_call_seconds",
                "Duration of one guest call (one batch)",
                &["transform"],
            ),
            transform_lag: gauge_vec(
                &r,
                "runnel_transform_lag",
                "Input high watermark minus the transform's position",
                &["transform", "partition"],
            ),
            transform_memory_bytes: gauge_vec(
                &r,
                "runnel_transform_memory_bytes",
                "Linear memory of the guest instance",
                &["transform", "partition"],
            ),
            transform_state_bytes: gauge_vec(
                &r,
                "runnel_transform_state_bytes",
                "Keyed state of a stateful transform's partition (keys plus values)",
                &["transform", "partition"],
            ),
            transform_transactions: counter_vec(
                &r,
                "runnel_transform_transactions_total",
                "Exactly-once transactions of transform workers, by outcome (committed, aborted)",
                &["transform", "outcome"],
            ),
            transform_delivery: gauge_vec(
                &r,
                "runnel_transform_delivery",
                "1 per worker on this node, labelled with its delivery mode (exactly_once, at_least_once)",
                &["transform", "partition", "delivery"],
            ),
            validator_batches: counter_vec(
                &r,
                "runnel_validator_batches_total",
                "Produced partition batches a validator checked, by result (accepted, rejected, failed_rejected, failed_accepted: the guest failed and the failure policy decided)",
                &["validator", "topic", "result"],
            ),
            validator_records_rejected: counter_vec(
                &r,
                "runnel_validator_records_rejected_total",
                "Records of rejected batches (every record of a refused batch is refused)",
                &["validator", "topic"],
            ),
            validator_call_seconds: histogram_vec(
                &r,
                "runnel_validator_call_seconds",
                "Duration of one validation (decoding the batch and the guest call)",
                &["validator"],
            ),
            assignor_runs: counter_vec(
                &r,
                "runnel_assignor_runs_total",
                "Target assignments an uploaded (WASM) assignor computed on this node, by result (ok, failed: the group fell back to the default assignor)",
                &["assignor", "result"],
            ),
            assignor_call_seconds: histogram_vec(
                &r,
                "runnel_assignor_call_seconds",
                "Duration of one run of an uploaded assignor (instantiation when needed and the guest call)",
                &["assignor"],
            ),
            registry: r,
            started: Instant::now(),
            rates: Mutex::new(Rates::default()),
            isr_history: Mutex::new(IsrHistory::default()),
            log_file_cache: std::sync::RwLock::new(None),
        })
    }

    /// The counters of one topic (created on first use).
    pub fn topic(&self, topic: &str) -> TopicCounters {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(counters) = topics.get(topic) {
            return counters.clone();
        }
        let counters = TopicCounters {
            bytes_in: self.bytes_in.with_label_values(&[topic]),
            messages_in: self.messages_in.with_label_values(&[topic]),
            bytes_out: self.bytes_out.with_label_values(&[topic]),
        };
        topics.insert(topic.to_string(), counters.clone());
        counters
    }

    /// Records an append of `records` records in `bytes` bytes to `topic`.
    pub fn record_in(&self, topic: &str, bytes: u64, records: u64) {
        let counters = self.topic(topic);
        counters.bytes_in.inc_by(bytes);
        counters.messages_in.inc_by(records);
        self.bytes_in_all.inc_by(bytes);
        self.messages_in_all.inc_by(records);
    }

    /// Records `bytes` of record batches returned from `topic`.
    pub fn record_out(&self, topic: &str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.topic(topic).bytes_out.inc_by(bytes);
        self.bytes_out_all.inc_by(bytes);
    }

    /// Forgets a deleted topic's series.
    pub fn forget_topic(&self, topic: &str) {
        self.topics.lock().unwrap_or_else(|p| p.into_inner()).remove(topic);
        let _ = self.bytes_in.remove_label_values(&[topic]);
        let _ = self.messages_in.remove_label_values(&[topic]);
        let _ = self.bytes_out.remove_label_values(&[topic]);
        let _ = self.log_storage_errors.remove_label_values(&[topic]);
    }

    /// Records one Kafka request of API key `api_key` that took `seconds` to answer.
    pub fn kafka_request(&self, api_key: i16, seconds: f64) {
        let mut apis = self.apis.lock().unwrap_or_else(|p| p.into_inner());
        let (count, latency) = apis.entry(api_key).or_insert_with(|| {
            let name = match kafka_protocol::messages::ApiKey::try_from(api_key) {
                Ok(api) => format!("{api:?}"),
                Err(_) => format!("Unknown{api_key}"),
            };
            (self.kafka_requests.with_label_values(&[&name]), self.kafka_request_seconds.with_label_values(&[&name]))
        });
        count.inc();
        latency.observe(seconds);
    }

    pub fn kafka_request_error(&self, reason: &str) {
        self.kafka_request_errors.with_label_values(&[reason]).inc();
    }

    pub fn http_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.http_requests.with_label_values(&[method, route, &status.to_string()]).inc();
        self.http_request_seconds.with_label_values(&[method, route]).observe(seconds);
    }

    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Names where the log file cache's figures come from; `/metrics` and `/v1/cluster` read
    /// it on every scrape.
    pub fn set_log_file_cache_stats(&self, source: OpenFileStatsSource) {
        *self.log_file_cache.write().unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// The process's descriptors now, and the log file cache's figures if a source is set.
    pub fn files(&self) -> FileStats {
        let source = self.log_file_cache.read().unwrap_or_else(|p| p.into_inner()).clone();
        FileStats { process: ProcessFiles::read(), log_file_cache: source.map(|f| f()) }
    }

    /// Renders every registered metric in the Prometheus text format, then the descriptor
    /// figures (read now, not registered: they come from the kernel and the cache), then
    /// `state`: the per-partition series the scrape wrote itself ([`StateSeries`]).
    pub fn render(&self, state: &StateSeries) -> String {
        let mut out = Vec::with_capacity((64 << 10) + state.text.len());
        let families = self.registry.gather();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&families, &mut out);
        let mut text = String::from_utf8(out).unwrap_or_default();
        write_files(&mut text, &self.files());
        text.push_str(&state.text);
        text
    }

    /// Updates the per-second rates from the counters (call about once a second).
    pub fn sample_rates(&self) {
        let now = Instant::now();
        let totals = Totals {
            bytes_in: self.bytes_in_all.get(),
            bytes_out: self.bytes_out_all.get(),
            messages_in: self.messages_in_all.get(),
            topics: self
                .topics
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(t, c)| (t.clone(), (c.messages_in.get(), c.bytes_in.get())))
                .collect(),
        };
        let mut guard = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        let rates = &mut *guard;
        if let Some((then, before)) = &rates.last {
            let seconds = now.duration_since(*then).as_secs_f64().max(1e-3);
            let per_sec = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
            rates.bytes_in_per_sec = per_sec(totals.bytes_in, before.bytes_in);
            rates.bytes_out_per_sec = per_sec(totals.bytes_out, before.bytes_out);
            rates.messages_in_per_sec = per_sec(totals.messages_in, before.messages_in);
            rates.topics = totals
                .topics
                .iter()
                .map(|(topic, &(messages, bytes))| {
                    let (m0, b0) = before.topics.get(topic).copied().unwrap_or((0, 0));
                    (topic.clone(), (per_sec(messages, m0), per_sec(bytes, b0)))
                })
                .collect();
        }
        rates.last = Some((now, totals));
    }

    pub fn rates(&self) -> Rates {
        self.rates.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Counts the ISR changes the image shows since the last call (call about once a second,
    /// next to [`Metrics::sample_rates`]).
    pub fn sample_isr_changes(&self, image: &Arc<MetadataImage>) {
        let now_ms = crate::log::now_ms();
        self.isr_history.lock().unwrap_or_else(|p| p.into_inner()).sample(image, now_ms);
    }

    /// The ISR change history up to now, oldest bucket first.
    pub fn isr_changes(&self) -> Vec<IsrBucket> {
        let now_ms = crate::log::now_ms();
        self.isr_history.lock().unwrap_or_else(|p| p.into_inner()).buckets(now_ms)
    }
}

/// Gauge families with a series per partition (or per group and partition), in the Prometheus
/// text format, written by the scrape straight from the partitions and groups: with 50,000
/// partitions a registry's label hashing, per-series allocation and sort cost more than the
/// scrape's reading of the partitions, and they would be reset and refilled on every scrape.
/// A family is written whole (its samples must be contiguous).
#[derive(Debug, Default)]
pub struct StateSeries {
    text: String,
}

impl StateSeries {
    /// One gauge family: `samples` are label sets and values.
    pub fn gauge<'a, L>(&mut self, name: &str, help: &str, samples: impl IntoIterator<Item = (L, i64)>)
    where
        L: AsRef<[(&'a str, &'a str)]>,
    {
        use std::fmt::Write;
        let _ = write!(self.text, "# HELP {name} {help}\n# TYPE {name} gauge\n");
        for (labels, value) in samples {
            self.text.push_str(name);
            self.text.push('{');
            for (i, (key, label)) in labels.as_ref().iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(key);
                self.text.push_str("=\"");
                escape_label_value(&mut self.text, label);
                self.text.push('"');
            }
            let _ = writeln!(self.text, "}} {value}");
        }
    }
}

/// A label value in the text format: backslash, double quote and line feed escaped (group
/// ids may hold any of them).
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `process_open_fds`/`process_max_fds` (the Prometheus process collector's names), the hard
/// limit, and the log file cache's `runnel_log_file_cache_*` series.
fn write_files(out: &mut String, files: &FileStats) {
    use std::fmt::Write;
    let mut family = |name: &str, help: &str, kind: &str, value: Option<u64>| {
        if let Some(value) = value {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n");
        }
    };
    let p = &files.process;
    family("process_open_fds", "Number of open file descriptors", "gauge", p.open);
    family("process_max_fds", "Maximum number of open file descriptors (soft RLIMIT_NOFILE)", "gauge", p.soft_limit);
    family("runnel_process_max_fds_hard", "Hard RLIMIT_NOFILE", "gauge", p.hard_limit);
    if let Some(c) = &files.log_file_cache {
        family(
            "runnel_log_file_cache_open",
            "Segment files the log file cache holds open",
            "gauge",
            Some(c.open as u64),
        );
        family(
            "runnel_log_file_cache_capacity",
            "Segment files the log file cache may hold open",
            "gauge",
            Some(c.capacity as u64),
        );
        family("runnel_log_file_cache_hits_total", "Reads that found their file open", "counter", Some(c.hits));
        family("runnel_log_file_cache_misses_total", "Reads that had to open their file", "counter", Some(c.misses));
        family("runnel_log_file_cache_evictions_total", "Files closed to make room", "counter", Some(c.evictions));
        family("runnel_log_file_cache_open_failures_total", "Opens that failed", "counter", Some(c.open_failures));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::TopicImage;

    fn image(isrs: &[&[u64]]) -> Arc<MetadataImage> {
        let partitions = isrs
            .iter()
            .enumerate()
            .map(|(i, isr)| PartitionImage {
                partition: i as u32,
                leader: isr.first().copied(),
                leader_epoch: 0,
                partition_epoch: 0,
                replicas: vec![1, 2, 3],
                isr: isr.to_vec(),
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            })
            .collect();
        let topic = TopicImage { name: "t".into(), topic_id: [7; 16], partitions, configs: Default::default() };
        let mut image = MetadataImage::default();
        image.insert_topic(topic);
        Arc::new(image)
    }

    #[test]
    fn isr_history_counts_shrinks_and_expands_per_bucket_and_stays_bounded() {
        // Proves an ISR change is counted once per partition in the bucket it was seen in, a
        // swap counts both ways, quiet intervals read as zeros, and old buckets are dropped.
        let mut history = IsrHistory::default();
        let t0 = 1_000 * ISR_BUCKET_MS;
        history.sample(&image(&[&[1, 2, 3], &[2, 3, 1]]), t0);
        history.sample(&image(&[&[1, 2], &[2, 1]]), t0 + 1_000);
        history.sample(&image(&[&[1, 2], &[2, 1]]), t0 + 2_000);
        history.sample(&image(&[&[1, 2, 3], &[2, 3]]), t0 + ISR_BUCKET_MS + 500);
        let buckets = history.buckets(t0 + ISR_BUCKET_MS * 2);
        assert_eq!(buckets.len(), ISR_HISTORY_BUCKETS);
        let last3: Vec<(i64, u64, u64)> =
            buckets[ISR_HISTORY_BUCKETS - 3..].iter().map(|b| (b.start_ms, b.shrinks, b.expands)).collect();
        assert_eq!(
            last3,
            vec![(t0, 2, 0), (t0 + ISR_BUCKET_MS, 1, 2), (t0 + 2 * ISR_BUCKET_MS, 0, 0)],
            "partition 1 went from [2,1] to [2,3]: one shrink and one expand"
        );
        // An hour later everything above has left the window.
        let later = t0 + 360 * ISR_BUCKET_MS;
        history.sample(&image(&[&[1], &[2]]), later);
        let buckets = history.buckets(later);
        assert_eq!(buckets.iter().map(|b| b.shrinks).sum::<u64>(), 2);
        assert_eq!(buckets.iter().map(|b| b.expands).sum::<u64>(), 0);
        assert!(history.buckets.len() <= ISR_HISTORY_BUCKETS);
    }

    #[test]
    fn descriptor_figures_are_rendered_and_the_cache_source_is_read_at_scrape_time() {
        // Proves /metrics carries the process's descriptors and limit, and the log file cache's
        // series once a source is set, with the source's figures.
        let metrics = Metrics::new();
        let text = metrics.render(&StateSeries::default());
        assert!(text.contains("\nprocess_open_fds "), "{text}");
        assert!(text.contains("\nprocess_max_fds "));
        assert!(!text.contains("runnel_log_file_cache_open"));
        let stats = OpenFilesStats { open: 3, capacity: 10, hits: 7, misses: 4, evictions: 1, open_failures: 2 };
        metrics.set_log_file_cache_stats(Arc::new(move || stats));
        let text = metrics.render(&StateSeries::default());
        for line in [
            "runnel_log_file_cache_open 3",
            "runnel_log_file_cache_capacity 10",
            "runnel_log_file_cache_hits_total 7",
            "runnel_log_file_cache_misses_total 4",
            "runnel_log_file_cache_evictions_total 1",
            "runnel_log_file_cache_open_failures_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing");
        }
        assert_eq!(metrics.files().log_file_cache, Some(stats));
        let open = metrics.files().process.open.expect("Linux /proc");
        assert!(open >= 3, "stdin, stdout, stderr at least: {open}");
    }

    #[test]
    fn state_series_are_written_whole_with_label_values_escaped() {
        // Proves a family written by the scrape is valid text format: HELP and TYPE once, one
        // line per sample, a group id's backslash, quote and line feed escaped.
        let mut state = StateSeries::default();
        state.gauge(
            "kafka_consumergroup_lag",
            "Lag",
            [([("consumergroup", "a\\b\"c\nd"), ("topic", "t")], 7), ([("consumergroup", "g"), ("topic", "t")], -1)],
        );
        assert_eq!(
            state.text,
            "# HELP kafka_consumergroup_lag Lag\n# TYPE kafka_consumergroup_lag gauge\n\
             kafka_consumergroup_lag{consumergroup=\"a\\\\b\\\"c\\nd\",topic=\"t\"} 7\n\
             kafka_consumergroup_lag{consumergroup=\"g\",topic=\"t\"} -1\n"
        );
        let text = Metrics::new().render(&state);
        assert!(text.ends_with(&state.text), "state series come last, whole");
    }

    #[test]
    fn a_recreated_topic_is_not_an_isr_change() {
        // Proves partitions of another incarnation of a topic name are not compared.
        let mut history = IsrHistory::default();
        history.sample(&image(&[&[1, 2, 3]]), 0);
        let mut recreated = (*image(&[&[1]])).clone();
        if let Some(t) = recreated.topic("t") {
            recreated.insert_topic(TopicImage { topic_id: [8; 16], ..t.clone() });
        }
        history.sample(&Arc::new(recreated), 1);
        assert!(history.buckets(1).iter().all(|b| b.shrinks == 0 && b.expands == 0));
    }
}
