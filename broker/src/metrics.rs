//! Prometheus metrics of a node, under the names Kafka's JMX exporter and `kafka_exporter` give
//! them (`kafka_server_brokertopicmetrics_*`, `kafka_network_requestmetrics_*`,
//! `kafka_consumergroup_lag`), so existing dashboards and alerts need little change.
//!
//! Counters and histograms are updated on the request paths (one atomic add each; label
//! lookups are cached per topic). Gauges that describe state (partition counts, log sizes,
//! group lag) are computed when `/metrics` is scraped, from the same sources the HTTP API
//! reads, so the two always agree. Per-second rates for the dashboard are sampled from the
//! counters by `Rates::sample` once a second.
//!
//! Must not: hold a lock across I/O, or grow without bound (labels are topics, partitions,
//! groups, API names and route templates: all bounded by what exists).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// Connections closed after `connections.max.idle.ms` without traffic.
    pub connections_idle_expired: IntCounter,
    /// Time the acceptor waited for a free slot at `max.connections`.
    pub acceptor_blocked_seconds: Counter,
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
    pub offline_partitions: IntGauge,
    /// Over the partitions this node leads: the largest gap between the log end offset and a
    /// follower's (ISR members and not), in records.
    pub replica_max_lag: IntGauge,
    pub unclean_leader_elections: IntGauge,
    pub log_size: IntGaugeVec,
    pub log_end_offset: IntGaugeVec,
    pub log_start_offset: IntGaugeVec,
    pub group_lag: IntGaugeVec,
    pub group_offset: IntGaugeVec,
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
    started: Instant,
    rates: Mutex<Rates>,
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
            acceptor_blocked_seconds: {
                let metric = Counter::new(
                    "kafka_network_acceptor_blocked_seconds_total",
                    "Time the Kafka listener stopped accepting because max.connections were open",
                )
                .expect("valid metric");
                r.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
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
            isr_shrinks: counter(&r, "kafka_server_replicamanager_isr_shrinks_total", "ISR shrinks"),
            isr_expands: counter(&r, "kafka_server_replicamanager_isr_expands_total", "ISR expands"),
            partition_count: gauge(&r, "kafka_server_replicamanager_partition_count", "Partitions hosted by this node"),
            leader_count: gauge(&r, "kafka_server_replicamanager_leader_count", "Partitions this node leads"),
            under_replicated_partitions: gauge(
                &r,
                "kafka_server_replicamanager_under_replicated_partitions",
                "Partitions whose ISR is smaller than their replica set",
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
            offline_partitions: gauge(
                &r,
                "kafka_controller_kafkacontroller_offline_partitions_count",
                "Partitions without a leader",
            ),
            log_size: gauge_vec(
                &r,
                "kafka_log_log_size",
                "Bytes on disk of a partition's log",
                &["topic", "partition"],
            ),
            log_end_offset: gauge_vec(
                &r,
                "kafka_log_log_log_end_offset",
                "Log end offset of a partition",
                &["topic", "partition"],
            ),
            log_start_offset: gauge_vec(
                &r,
                "kafka_log_log_log_start_offset",
                "Log start offset of a partition",
                &["topic", "partition"],
            ),
            group_lag: gauge_vec(
                &r,
                "kafka_consumergroup_lag",
                "High watermark minus committed offset, per group and partition",
                &["consumergroup", "topic", "partition"],
            ),
            group_offset: gauge_vec(
                &r,
                "kafka_consumergroup_current_offset",
                "Committed offset, per group and partition",
                &["consumergroup", "topic", "partition"],
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
                "Failed batches by kind (deadline, memory, trap, guest_error, invalid_output, init, append)",
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
            registry: r,
            started: Instant::now(),
            rates: Mutex::new(Rates::default()),
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

    /// Renders every registered metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::with_capacity(64 << 10);
        let families = self.registry.gather();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&families, &mut out);
        String::from_utf8(out).unwrap_or_default()
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
}
