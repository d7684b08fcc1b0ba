//! Runnel's own endpoints: cluster health, topics with per-partition state (leader, replicas,
//! ISR, epochs, offsets, sizes), topic configs, a record browser, and consumer groups with
//! per-partition lag, transactions (every coordinator asked). The dashboard and the CLI use these.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admin;
use super::auth::require;
use super::error::{ApiError, ApiResult, JsonBody, Path, Query};
use super::records::{self, text_or_base64, ReadRecord};
use super::{kafka, LONG_POLL_MAX_MS};
use crate::log::records::AbortedFilter;
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers;

#[derive(Serialize, ToSchema)]
pub struct Node {
    pub node_id: u64,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Kafka's `process.roles` of the node: `broker`, and `controller` for a voter of the
    /// metadata quorum (a broker-only node has `broker` alone).
    pub roles: Vec<&'static str>,
    pub is_controller: bool,
    /// `live`, or `fenced` (its session expired, it shut down, or it has just registered).
    pub state: &'static str,
    /// The incarnation registered now (Kafka's broker epoch).
    pub broker_epoch: i64,
    /// Partitions it leads, and partitions it holds a replica of (led or followed).
    pub leader_partitions: usize,
    pub replica_partitions: usize,
}

/// ISR shrinks and expands over the last 10 minutes, cluster-wide, as the answering node's
/// metadata image showed them (sampled every second; a change of any cause: a leader's
/// AlterPartition, a fenced broker leaving every ISR, a reassignment).
#[derive(Serialize, ToSchema)]
pub struct IsrChanges {
    /// Width of one bucket.
    pub interval_ms: i64,
    /// Oldest first; the last bucket is the current, unfinished interval.
    pub buckets: Vec<IsrChangeBucket>,
    /// Sums over the buckets.
    pub shrinks: u64,
    pub expands: u64,
}

#[derive(Serialize, ToSchema)]
pub struct IsrChangeBucket {
    /// Unix ms.
    pub start_ms: i64,
    /// Partitions whose ISR lost a member / gained a member in this interval.
    pub shrinks: u64,
    pub expands: u64,
}

#[derive(Serialize, ToSchema)]
pub struct Cluster {
    pub cluster_id: String,
    /// The node that answered.
    pub node_id: u64,
    /// Leader of the metadata quorum.
    pub controller_id: Option<u64>,
    /// Voters of the metadata quorum, as the answering node knows its membership.
    pub voters: Vec<u64>,
    pub version: String,
    pub uptime_ms: u64,
    pub nodes: Vec<Node>,
    pub topics: usize,
    pub partitions: usize,
    /// Partitions whose ISR is smaller than their replication factor (Kafka's rule: during a
    /// reassignment the replicas being added do not count).
    pub under_replicated_partitions: usize,
    /// Partitions without a leader.
    pub offline_partitions: usize,
    /// Partitions a reassignment is adding or removing replicas of.
    pub reassigning_partitions: usize,
    pub isr_changes: IsrChanges,
    pub bytes_in_per_sec: f64,
    pub bytes_out_per_sec: f64,
    pub messages_in_per_sec: f64,
    /// Open Kafka protocol connections to this node.
    pub connections: i64,
    /// Deployed WASM transforms.
    pub transforms: usize,
    /// File descriptors of the answering node.
    pub files: Files,
    /// How the answering node's listeners are protected, and what it warns about.
    pub security: Security,
}

/// How a node's listeners are protected.
#[derive(Debug, Serialize, ToSchema)]
pub struct Security {
    /// Whether Kafka requests are authorized with ACLs (`authorizer.class.name`).
    pub authorizer: bool,
    pub listeners: Vec<SecuredListener>,
    /// Whether HTTP requests must authenticate (`--http-authentication required`).
    pub http_authenticated: bool,
    /// Whether the HTTP API serves HTTPS (`--http-tls`).
    pub http_tls: bool,
    /// Listeners (Kafka and HTTP) reachable beyond loopback without authentication.
    pub warnings: Vec<String>,
}

/// One Kafka listener of the answering node.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecuredListener {
    pub name: String,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    pub security_protocol: String,
    pub address: String,
    /// SASL, or TLS with required client certificates.
    pub authenticated: bool,
}

/// The answering node's file descriptors against its limit (RLIMIT_NOFILE), and the log file
/// cache's share of them.
#[derive(Serialize, ToSchema)]
pub struct Files {
    /// Descriptors open now (`/proc/self/fd`); null where that cannot be read.
    pub open: Option<u64>,
    /// RLIMIT_NOFILE: the soft limit (what opening is refused at) and the hard one.
    pub soft_limit: Option<u64>,
    pub hard_limit: Option<u64>,
    /// Null while the node reports no log file cache.
    pub log_file_cache: Option<LogFileCache>,
}

#[derive(Serialize, ToSchema)]
pub struct LogFileCache {
    /// Segment files held open, and the most the cache holds.
    pub open: u64,
    pub capacity: u64,
    /// Since start: reads that found their file open, that had to open it, files closed to
    /// make room, and opens that failed.
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub open_failures: u64,
}

fn files(stats: &crate::metrics::FileStats) -> Files {
    Files {
        open: stats.process.open,
        soft_limit: stats.process.soft_limit,
        hard_limit: stats.process.hard_limit,
        log_file_cache: stats.log_file_cache.map(|c| LogFileCache {
            open: c.open as u64,
            capacity: c.capacity as u64,
            hits: c.hits,
            misses: c.misses,
            evictions: c.evictions,
            open_failures: c.open_failures,
        }),
    }
}

/// Cluster health: nodes, controller, partition counts, ISR changes, throughput. Topic and
/// partition counts (per node too) are over the topics the client may DESCRIBE, and transforms
/// over those it may describe, as Metadata lists only those.
#[utoipa::path(get, path = "/v1/cluster", tag = "v1", responses((status = 200, body = Cluster)))]
pub async fn cluster(State(http): State<super::State>) -> Json<Cluster> {
    let broker = &http.broker;
    let image = broker.controller.image();
    let controller_id = broker.controller.leader_id();
    let quorum = broker.controller.quorum();
    let topics: Vec<&std::sync::Arc<crate::controller::TopicImage>> = image
        .topics
        .values()
        .filter(|t| broker.authorized(Operation::Describe, ResourceType::Topic, &t.name))
        .collect();
    let partitions = || topics.iter().flat_map(|t| &t.partitions);
    let health = admin::PartitionHealth::of(partitions());
    let rates = broker.metrics.rates();
    Json(Cluster {
        cluster_id: broker.settings.cluster_id.clone(),
        node_id: broker.settings.node_id,
        controller_id,
        voters: quorum.voters.iter().copied().collect(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_ms: broker.metrics.uptime_ms(),
        nodes: image
            .brokers
            .values()
            .map(|b| Node {
                node_id: b.node_id,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
                roles: if quorum.voters.contains(&b.node_id) { vec!["broker", "controller"] } else { vec!["broker"] },
                is_controller: Some(b.node_id) == controller_id,
                state: if b.fenced { "fenced" } else { "live" },
                broker_epoch: b.broker_epoch,
                leader_partitions: partitions().filter(|p| p.leader == Some(b.node_id)).count(),
                replica_partitions: partitions().filter(|p| p.replicas.contains(&b.node_id)).count(),
            })
            .collect(),
        topics: topics.len(),
        partitions: health.partitions,
        under_replicated_partitions: health.under_replicated,
        offline_partitions: health.offline,
        reassigning_partitions: health.reassigning,
        isr_changes: isr_changes(&broker.metrics.isr_changes()),
        files: files(&broker.metrics.files()),
        bytes_in_per_sec: rates.bytes_in_per_sec,
        bytes_out_per_sec: rates.bytes_out_per_sec,
        messages_in_per_sec: rates.messages_in_per_sec,
        connections: broker.metrics.connections.get(),
        transforms: image
            .transforms
            .keys()
            .filter(|name| broker.authorized(Operation::Describe, ResourceType::Transform, name))
            .count(),
        security: security(&broker.settings.security),
    })
}

fn security(report: &crate::security::SecurityReport) -> Security {
    Security {
        authorizer: report.authorizer,
        listeners: report
            .listeners
            .iter()
            .map(|l| SecuredListener {
                name: l.name.clone(),
                security_protocol: l.protocol.name().to_string(),
                address: l.address.to_string(),
                authenticated: l.authenticated,
            })
            .collect(),
        http_authenticated: report.http_authenticated,
        http_tls: report.http_tls,
        warnings: report.warnings.clone(),
    }
}

fn isr_changes(buckets: &[crate::metrics::IsrBucket]) -> IsrChanges {
    IsrChanges {
        interval_ms: crate::metrics::ISR_BUCKET_MS,
        shrinks: buckets.iter().map(|b| b.shrinks).sum(),
        expands: buckets.iter().map(|b| b.expands).sum(),
        buckets: buckets
            .iter()
            .map(|b| IsrChangeBucket { start_ms: b.start_ms, shrinks: b.shrinks, expands: b.expands })
            .collect(),
    }
}

#[derive(Serialize, ToSchema)]
pub struct TopicSummary {
    pub name: String,
    pub topic_id: String,
    pub internal: bool,
    pub partitions: usize,
    pub replication_factor: usize,
    pub size_bytes: u64,
    /// Sum over partitions of high watermark minus log start offset.
    pub messages: i64,
    pub messages_in_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub under_replicated_partitions: usize,
    pub offline_partitions: usize,
    /// Partitions a reassignment is adding or removing replicas of.
    pub reassigning_partitions: usize,
}

/// One page of topics, ordered by name.
#[derive(Serialize, ToSchema)]
pub struct TopicList {
    pub topics: Vec<TopicSummary>,
    /// The `after` cursor of the next page: the name of this page's last topic when more
    /// topics follow, else null (the listing is complete).
    pub next: Option<String>,
    /// Topics matching `internal`, `prefix` and `search`, over all pages.
    pub total: usize,
}

/// Topics per page when `limit` is not given, and the largest `limit` accepted.
pub const TOPICS_PAGE_DEFAULT: usize = 1000;
pub const TOPICS_PAGE_MAX: usize = 5000;

#[derive(Deserialize, IntoParams)]
pub struct ListTopicsQuery {
    /// Include internal topics (`__consumer_offsets`).
    #[serde(default)]
    pub internal: bool,
    /// Topics per page, 1..=5000 (default 1000).
    pub limit: Option<usize>,
    /// Cursor: list the topics whose names sort after this one (a previous page's `next`).
    pub after: Option<String>,
    /// Only topics whose names start with this.
    pub prefix: Option<String>,
    /// Only topics whose names contain this, ignoring case (the dashboard's filter box).
    pub search: Option<String>,
}

/// Topics with partition counts, sizes, message counts and rates, one page at a time in name
/// order: only the topics of the page are summarised (their hosted partitions read), so a
/// node with many topics answers a page in time proportional to the page. Only the topics the
/// client may DESCRIBE are listed (and counted in `total`), as Metadata lists them.
#[utoipa::path(get, path = "/v1/topics", tag = "v1", params(ListTopicsQuery), responses(
    (status = 200, body = TopicList),
    (status = 400, description = "limit outside 1..=5000", body = super::error::ErrorBody)))]
pub async fn list_topics(
    State(http): State<super::State>,
    Query(query): Query<ListTopicsQuery>,
) -> ApiResult<Json<TopicList>> {
    let limit = query.limit.unwrap_or(TOPICS_PAGE_DEFAULT);
    if !(1..=TOPICS_PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_parameter(format!("limit must be between 1 and {TOPICS_PAGE_MAX}")));
    }
    let broker = &http.broker;
    let image = broker.controller.image();
    let rates = broker.metrics.rates();
    let prefix = query.prefix.as_deref().unwrap_or("");
    let search = query.search.as_deref().map(str::to_lowercase).unwrap_or_default();
    let matching = |t: &&std::sync::Arc<crate::controller::TopicImage>| {
        (query.internal || !admin::is_internal(&t.name))
            && t.name.to_lowercase().contains(&search)
            && broker.authorized(Operation::Describe, ResourceType::Topic, &t.name)
    };
    let (page, next, total) = page_of(&image.topics, prefix, query.after.as_deref(), limit, matching);
    let topics = page
        .into_iter()
        .map(|t| {
            let (mut size_bytes, mut messages) = (0u64, 0i64);
            for p in &t.partitions {
                if let Some(hosted) = broker.replicas.get(&t.name, p.partition) {
                    size_bytes += hosted.size_bytes();
                    messages += hosted.high_watermark() - hosted.log_start_offset();
                }
            }
            let (messages_in_per_sec, bytes_in_per_sec) = rates.topics.get(&t.name).copied().unwrap_or((0.0, 0.0));
            let health = admin::PartitionHealth::of(&t.partitions);
            TopicSummary {
                name: t.name.clone(),
                topic_id: uuid::Uuid::from_bytes(t.topic_id).to_string(),
                internal: admin::is_internal(&t.name),
                partitions: t.partitions.len(),
                replication_factor: t.partitions.first().map_or(0, |p| p.replicas.len()),
                size_bytes,
                messages,
                messages_in_per_sec,
                bytes_in_per_sec,
                under_replicated_partitions: health.under_replicated,
                offline_partitions: health.offline,
                reassigning_partitions: health.reassigning,
            }
        })
        .collect();
    Ok(Json(TopicList { topics, next, total }))
}

/// The values of `map` (keyed by name) whose names start with `prefix`, sort after `after` and
/// pass `keep`: at most `limit` of them in name order, the cursor of the next page (the last
/// name returned, when more follow) and how many match in all. Only names are compared past
/// the page: a range from the cursor, not a scan of every value's contents.
fn page_of<'a, V: Clone>(
    map: &'a imbl::OrdMap<String, V>,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    keep: impl Fn(&&'a V) -> bool + Copy,
) -> (Vec<&'a V>, Option<String>, usize) {
    use std::ops::Bound;
    let with_prefix = |from: Bound<&str>| {
        map.range::<_, str>((from, Bound::Unbounded))
            .take_while(move |(name, _)| name.starts_with(prefix))
            .map(|(name, v)| (name, v))
            .filter(move |(_, v)| keep(v))
    };
    let total = with_prefix(Bound::Included(prefix)).count();
    let start = match after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    };
    let mut page: Vec<(&String, &V)> = with_prefix(start).take(limit + 1).collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next = if more { page.last().map(|(name, _)| name.to_string()) } else { None };
    (page.into_iter().map(|(_, v)| v).collect(), next, total)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTopic {
    pub name: String,
    /// Default: the broker's `num.partitions`.
    pub partitions: Option<i32>,
    /// Default: the broker's `default.replication.factor`.
    pub replication_factor: Option<i16>,
    /// Topic config overrides, Kafka names (`retention.ms`, `cleanup.policy`, ...).
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

#[derive(Serialize, ToSchema)]
pub struct TopicDetail {
    pub name: String,
    pub topic_id: String,
    pub internal: bool,
    pub replication_factor: usize,
    /// Overrides only; `GET /v1/topics/{topic}/configs` lists every effective value.
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<admin::PartitionState>,
}

fn topic_detail(http: &super::Http, name: &str) -> ApiResult<TopicDetail> {
    let image = http.broker.controller.image();
    let topic = image.topics.get(name).ok_or_else(|| ApiError::unknown_topic(name))?;
    Ok(TopicDetail {
        name: topic.name.clone(),
        topic_id: uuid::Uuid::from_bytes(topic.topic_id).to_string(),
        internal: admin::is_internal(&topic.name),
        replication_factor: topic.partitions.first().map_or(0, |p| p.replicas.len()),
        configs: topic.configs.clone(),
        partitions: admin::partition_states(&http.broker, topic),
    })
}

/// Creates a topic.
#[utoipa::path(post, path = "/v1/topics", tag = "v1", request_body = NewTopic, responses(
    (status = 201, body = TopicDetail),
    (status = 409, description = "topic exists", body = super::error::ErrorBody),
    (status = 422, description = "invalid name, partition count, replication factor or config", body = super::error::ErrorBody)))]
pub async fn create_topic(
    State(http): State<super::State>,
    JsonBody(topic): JsonBody<NewTopic>,
) -> ApiResult<(StatusCode, Json<TopicDetail>)> {
    admin::create_topic(
        &http,
        &topic.name,
        topic.partitions.unwrap_or(-1),
        topic.replication_factor.unwrap_or(-1),
        topic.configs,
        false,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(topic_detail(&http, &topic.name)?)))
}

/// A topic with the state of each partition.
#[utoipa::path(get, path = "/v1/topics/{topic}", tag = "v1", params(("topic" = String, Path)),
    responses((status = 200, body = TopicDetail), (status = 404, body = super::error::ErrorBody)))]
pub async fn describe_topic(
    State(http): State<super::State>,
    Path(topic): Path<String>,
) -> ApiResult<Json<TopicDetail>> {
    // Before the 404: a client that may not describe the topic does not learn it exists.
    require(&http.broker, Operation::Describe, ResourceType::Topic, &topic)?;
    topic_detail(&http, &topic).map(Json)
}

/// Deletes a topic.
#[utoipa::path(delete, path = "/v1/topics/{topic}", tag = "v1", params(("topic" = String, Path)),
    responses((status = 204), (status = 404, body = super::error::ErrorBody)))]
pub async fn delete_topic(State(http): State<super::State>, Path(topic): Path<String>) -> ApiResult<StatusCode> {
    admin::delete_topic(&http, &topic).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct ConfigValue {
    pub name: String,
    pub value: String,
    /// "topic" (an override) or "default" (the broker's default).
    pub source: String,
}

#[derive(Serialize, ToSchema)]
pub struct ConfigList {
    pub configs: Vec<ConfigValue>,
}

/// Every effective config of a topic, with where its value comes from.
#[utoipa::path(get, path = "/v1/topics/{topic}/configs", tag = "v1", params(("topic" = String, Path)),
    responses((status = 200, body = ConfigList), (status = 404, body = super::error::ErrorBody)))]
pub async fn topic_configs(State(http): State<super::State>, Path(topic): Path<String>) -> ApiResult<Json<ConfigList>> {
    // DescribeConfigs' rule, before the 404.
    require(&http.broker, Operation::DescribeConfigs, ResourceType::Topic, &topic)?;
    let image = http.broker.controller.image();
    let known = image.topics.get(&topic).ok_or_else(|| ApiError::unknown_topic(&topic))?;
    let configs = admin::topic_configs(&http.broker, known)
        .into_iter()
        .map(|c| ConfigValue {
            name: c.name.to_string(),
            value: c.value,
            source: if c.is_override { "topic" } else { "default" }.to_string(),
        })
        .collect();
    Ok(Json(ConfigList { configs }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigChanges {
    /// Overrides to set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Overrides to remove (back to the broker default).
    #[serde(default)]
    pub delete: Vec<String>,
}

/// Sets and removes topic config overrides.
#[utoipa::path(put, path = "/v1/topics/{topic}/configs", tag = "v1", params(("topic" = String, Path)),
    request_body = ConfigChanges,
    responses((status = 204), (status = 404, body = super::error::ErrorBody), (status = 422, body = super::error::ErrorBody)))]
pub async fn alter_topic_configs(
    State(http): State<super::State>,
    Path(topic): Path<String>,
    JsonBody(changes): JsonBody<ConfigChanges>,
) -> ApiResult<StatusCode> {
    let set: Vec<(String, String)> = changes.set.into_iter().collect();
    admin::alter_topic_configs(&http, &topic, &set, &changes.delete).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
pub struct BrowseQuery {
    /// Default 0.
    pub partition: Option<i32>,
    /// First offset; default the log start offset. Negative: that many records before the
    /// high watermark.
    pub offset: Option<i64>,
    /// Records to return, 1..=1000 (default 50).
    pub limit: Option<usize>,
    /// Wait up to this many ms (at most 30000) for records when there are none at `offset`.
    pub wait_ms: Option<u64>,
    /// `read_uncommitted` (default: every record up to the high watermark, aborted
    /// transactions' included) or `read_committed` (up to the last stable offset, without
    /// aborted transactions' records), as a Kafka consumer's `isolation.level`.
    pub isolation: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Header {
    pub key: String,
    pub value: Option<String>,
    /// "utf8" or "base64".
    pub encoding: String,
}

#[derive(Serialize, ToSchema)]
pub struct BrowsedRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<String>,
    /// "utf8" or "base64".
    pub key_encoding: String,
    pub value: Option<String>,
    pub value_encoding: String,
    pub headers: Vec<Header>,
}

impl From<ReadRecord> for BrowsedRecord {
    fn from(r: ReadRecord) -> BrowsedRecord {
        let (key, key_encoding) = split(r.key.as_deref().map(text_or_base64));
        let (value, value_encoding) = split(r.value.as_deref().map(text_or_base64));
        BrowsedRecord {
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key,
            key_encoding,
            value,
            value_encoding,
            headers: r
                .headers
                .into_iter()
                .map(|(key, value)| {
                    let (value, encoding) = split(value.as_deref().map(text_or_base64));
                    Header { key, value, encoding }
                })
                .collect(),
        }
    }
}

fn split(text: Option<(String, &'static str)>) -> (Option<String>, String) {
    match text {
        Some((text, encoding)) => (Some(text), encoding.to_string()),
        None => (None, "utf8".to_string()),
    }
}

#[derive(Serialize, ToSchema)]
pub struct BrowsedRecords {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Where read_committed readers stop: below the high watermark while a transaction is open.
    pub last_stable_offset: i64,
    /// `read_uncommitted` or `read_committed`, as asked.
    pub isolation: String,
    /// Where the next page starts.
    pub next_offset: i64,
    pub records: Vec<BrowsedRecord>,
}

/// How long a browse call forwarded to another broker may take beyond its own wait.
const FORWARD_SLACK: Duration = Duration::from_secs(5);

/// The log start offset and high watermark of `topic`-`partition` from its leader `node`
/// (ListOffsets earliest and latest, at once).
async fn leader_offsets(http: &super::Http, node: u64, topic: &str, partition: i32) -> ApiResult<(i64, i64)> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::ListOffsetsRequest;
    let ask = |timestamp: i64| {
        let request = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default().with_name(handlers::topic_name(topic)).with_partitions(
                vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)],
            )]);
        async move {
            let response = kafka::forward(http, node, kafka::LIST_OFFSETS, &request, FORWARD_SLACK).await?;
            let answer = response.topics.into_iter().flat_map(|t| t.partitions).next();
            match answer {
                Some(p) if p.error_code == 0 => Ok(p.offset),
                Some(p) => Err(ApiError::kafka_code(p.error_code, Some(&format!("offsets of {topic}-{partition}")))),
                None => Err(ApiError::internal(format!("broker {node} did not answer for {topic}-{partition}"))),
            }
        }
    };
    // -2: earliest (the log start offset), -1: latest (the high watermark, read_uncommitted).
    futures_util::future::try_join(ask(-2), ask(-1)).await
}

/// Reads records of one partition (for browsing; consumers use the v2 consumer API or Kafka).
/// A partition led by another broker is read from that leader (ListOffsets and Fetch forwarded
/// to it), so any node browses every partition.
#[utoipa::path(get, path = "/v1/topics/{topic}/records", tag = "v1", params(("topic" = String, Path), BrowseQuery),
    responses((status = 200, body = BrowsedRecords), (status = 404, body = super::error::ErrorBody)))]
pub async fn browse_records(
    State(http): State<super::State>,
    Path(topic): Path<String>,
    Query(query): Query<BrowseQuery>,
) -> ApiResult<Json<BrowsedRecords>> {
    let partition_index = query.partition.unwrap_or(0);
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_parameter("limit must be between 1 and 1000"));
    }
    let read_committed = match query.isolation.as_deref() {
        None | Some("read_uncommitted") => false,
        Some("read_committed") => true,
        Some(other) => {
            return Err(ApiError::bad_parameter(format!(
                "isolation must be read_uncommitted or read_committed, not '{other}'"
            )))
        }
    };
    // Fetch's rule, checked before the partition here is looked up: its offsets and whether it
    // exists are read directly, not through ListOffsets or Fetch.
    require(&http.broker, Operation::Read, ResourceType::Topic, &topic)?;
    let image = http.broker.controller.image();
    let route = kafka::leader_route(http.broker.settings.node_id, &image, &topic, partition_index);
    let (hosted, mut log_start_offset, mut high_watermark) = match route {
        kafka::Route::Here => {
            let partition =
                handlers::hosted_partition(&http.broker, &image, &topic, partition_index).map_err(|code| {
                    if image.topics.contains_key(&topic) {
                        ApiError::unknown_partition(&topic, partition_index as i64)
                    } else {
                        ApiError::kafka(code, Some(&format!("topic '{topic}'")))
                    }
                })?;
            let (start, end) = (partition.log_start_offset(), partition.high_watermark());
            (Some(partition), start, end)
        }
        kafka::Route::Peer(node) => {
            let (start, end) = leader_offsets(&http, node, &topic, partition_index).await?;
            (None, start, end)
        }
    };
    // Until a fetch says otherwise (an empty partition is never fetched past its end).
    let mut last_stable_offset = high_watermark;
    let offset = match query.offset {
        None => log_start_offset,
        Some(o) if o < 0 => (high_watermark + o).max(log_start_offset),
        Some(o) => o.max(log_start_offset),
    };
    let wait_ms = query.wait_ms.unwrap_or(0).min(LONG_POLL_MAX_MS);
    let mut records = Vec::new();
    let mut next_offset = offset;
    // A fetch returns whole batches of at most ~1 MiB; a page may need a few.
    for _ in 0..16 {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_isolation_level(i8::from(read_committed))
            .with_max_wait_ms(if records.is_empty() { wait_ms as i32 } else { 0 })
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(handlers::topic_name(&topic)).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(partition_index)
                    .with_fetch_offset(next_offset)
                    .with_partition_max_bytes(1 << 20)
                    .with_current_leader_epoch(-1),
            ])]);
        let response = match route {
            kafka::Route::Here => fetch(&http, request).await?,
            kafka::Route::Peer(node) => {
                let timeout = Duration::from_millis(wait_ms) + FORWARD_SLACK;
                kafka::forward(&http, node, kafka::FETCH, &request, timeout).await?
            }
        };
        let Some(data) = response.responses.into_iter().flat_map(|t| t.partitions).next() else { break };
        if data.error_code != 0 {
            return Err(ApiError::kafka_code(data.error_code, Some(&format!("reading {topic}-{partition_index}"))));
        }
        high_watermark = data.high_watermark;
        last_stable_offset = data.last_stable_offset;
        if data.log_start_offset >= 0 {
            log_start_offset = data.log_start_offset;
        }
        let bytes = data.records.unwrap_or_default();
        if bytes.is_empty() {
            break;
        }
        let before = next_offset;
        let mut aborted = read_committed.then(|| {
            AbortedFilter::new(data.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)))
        });
        next_offset = records::decode(partition_index, bytes, next_offset, limit, aborted.as_mut(), &mut records);
        let end = if read_committed { data.last_stable_offset } else { data.high_watermark };
        if records.len() >= limit || next_offset == before || next_offset >= end {
            break;
        }
    }
    Ok(Json(BrowsedRecords {
        topic,
        partition: partition_index,
        // Here: the partition's offsets now; elsewhere: what the leader's last answer said.
        log_start_offset: hosted.as_ref().map_or(log_start_offset, |p| p.log_start_offset()),
        high_watermark: hosted.as_ref().map_or(high_watermark, |p| p.high_watermark()),
        last_stable_offset: hosted.as_ref().and_then(|p| p.last_stable_offset().ok()).unwrap_or(last_stable_offset),
        isolation: if read_committed { "read_committed" } else { "read_uncommitted" }.to_string(),
        next_offset,
        records: records.into_iter().map(BrowsedRecord::from).collect(),
    }))
}

/// A Fetch through the Kafka handler, ended early when the node shuts down.
pub(super) async fn fetch(
    http: &super::Http,
    request: FetchRequest,
) -> ApiResult<kafka_protocol::messages::FetchResponse> {
    let mut stop = http.shutdown.clone();
    let header = kafka::header(kafka::FETCH);
    let call = handlers::fetch::handle(&http.broker, &header, request);
    tokio::select! {
        response = call => response.ok_or_else(|| ApiError::internal("fetch returned no response")),
        _ = stop.wait_for(|s| *s) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, 50301, "node is shutting down")),
        _ = tokio::time::sleep(Duration::from_millis(LONG_POLL_MAX_MS + 5_000)) =>
            Err(ApiError::new(StatusCode::GATEWAY_TIMEOUT, 50401, "fetch timed out")),
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupSummary {
    pub group_id: String,
    /// Kafka's state names: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead.
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: usize,
    /// The sum of `topic_lag`.
    pub total_lag: i64,
    /// Lag per topic, of the topics the client may describe.
    #[serde(default)]
    pub topic_lag: BTreeMap<String, i64>,
    pub coordinator: Option<u64>,
    /// A consumer-protocol group's server-side assignor (absent for a classic group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignor: Option<admin::GroupAssignor>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
    /// Nodes that did not answer: the groups they coordinate are shown from this node's copy of
    /// their committed offsets (no members), or missing.
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

/// Whether this node coordinates `group` (leads its `__consumer_offsets` partition): only the
/// coordinator knows a group's members and state.
fn coordinated_here(http: &super::Http, group: &str) -> bool {
    let image = http.broker.controller.image();
    kafka::coordinator_route(http.broker.settings.node_id, &image, group) == kafka::Route::Here
}

/// Consumer groups with their state and total lag, each as its coordinator knows it (every node
/// is asked for the groups it coordinates, `?scope=node`). ListGroups' rule: DESCRIBE on the
/// cluster lists every group, else only the groups the client may DESCRIBE; the other nodes
/// answer this node, not the client, so their lists are filtered here too.
#[utoipa::path(get, path = "/v1/groups", tag = "v1", params(super::transforms::ViewQuery),
    responses((status = 200, body = GroupList), (status = 422, body = super::error::ErrorBody)))]
pub async fn list_groups(
    State(http): State<super::State>,
    Query(query): Query<super::transforms::ViewQuery>,
) -> ApiResult<Json<GroupList>> {
    let node_only = query.node_only()?;
    let describable = admin::describable_groups(&http.broker);
    let mut groups: BTreeMap<String, GroupSummary> = BTreeMap::new();
    let mut nodes_unreachable = Vec::new();
    if !node_only {
        let (answers, _, unreachable) =
            super::transforms::ask_others::<GroupList>(&http, "/v1/groups?scope=node").await;
        nodes_unreachable = unreachable;
        // Each coordinator's view. It answered this node, not the client: the lag of topics the
        // client may not describe is left out here.
        for list in answers.into_iter().filter_map(|(_, list)| list) {
            for mut summary in list.groups.into_iter().filter(|s| describable(&s.group_id)) {
                summary
                    .topic_lag
                    .retain(|topic, _| http.broker.authorized(Operation::Describe, ResourceType::Topic, topic));
                summary.total_lag = admin::sum_saturating(summary.topic_lag.values().copied());
                groups.insert(summary.group_id.clone(), summary);
            }
        }
    }
    // This node's groups, and its copy of the offsets of groups whose coordinator did not answer.
    let mut views = Vec::new();
    for id in admin::group_ids(&http).await {
        if (node_only && !coordinated_here(&http, &id)) || !describable(&id) || groups.contains_key(&id) {
            continue;
        }
        views.extend(admin::group_loaded(&http.broker, &id));
    }
    admin::fill_remote_lag(&http, &mut views.iter_mut().collect::<Vec<_>>()).await;
    for g in views {
        let mut topic_lag = BTreeMap::new();
        for row in &g.offsets {
            let topic = topic_lag.entry(row.topic.clone()).or_insert(0i64);
            *topic = topic.saturating_add(row.lag.unwrap_or(0));
        }
        let summary = GroupSummary {
            total_lag: admin::sum_saturating(topic_lag.values().copied()),
            topic_lag,
            group_id: g.group_id.clone(),
            state: g.state.to_string(),
            protocol_type: g.protocol_type,
            protocol: g.protocol,
            members: g.members.len(),
            coordinator: g.coordinator,
            assignor: g.assignor,
        };
        groups.insert(g.group_id, summary);
    }
    Ok(Json(GroupList { groups: groups.into_values().collect(), nodes_unreachable }))
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct Assignment {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The group protocol this member speaks: `classic` (JoinGroup/SyncGroup) or `consumer`
    /// (KIP-848). A consumer-protocol group holds classic members while it migrates.
    #[serde(default)]
    pub protocol: String,
    pub assignment: Vec<Assignment>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    /// The partition's high watermark.
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub member_id: Option<String>,
    pub metadata: String,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupDetail {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub coordinator: Option<u64>,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<GroupOffset>,
    pub total_lag: i64,
    /// A consumer-protocol group's server-side assignor (absent for a classic group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignor: Option<admin::GroupAssignor>,
}

/// The coordinator's answer back into the view this node builds (for the `/v3` group views;
/// the inverse of `describe_group`'s).
impl From<GroupDetail> for admin::GroupView {
    fn from(detail: GroupDetail) -> admin::GroupView {
        let members: Vec<admin::Member> = detail
            .members
            .into_iter()
            .map(|m| admin::Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                protocol: if m.protocol == "consumer" { "consumer" } else { "classic" },
                assignment: m.assignment.into_iter().map(|a| (a.topic, a.partitions)).collect(),
            })
            .collect();
        let offsets = detail
            .offsets
            .into_iter()
            .map(|o| admin::LagRow {
                member: o.member_id.and_then(|id| members.iter().position(|m| m.member_id == id)),
                topic: o.topic,
                partition: o.partition,
                committed_offset: o.committed_offset,
                log_end_offset: o.log_end_offset,
                lag: o.lag,
                metadata: o.metadata,
            })
            .collect();
        admin::GroupView {
            group_id: detail.group_id,
            state: state_name(&detail.state),
            protocol_type: detail.protocol_type,
            protocol: detail.protocol,
            coordinator: detail.coordinator,
            members,
            offsets,
            assignor: detail.assignor,
        }
    }
}

/// A group as another node's `/v1/groups?scope=node` summary shows it: no members or offsets,
/// enough for a listing.
impl From<GroupSummary> for admin::GroupView {
    fn from(summary: GroupSummary) -> admin::GroupView {
        admin::GroupView {
            group_id: summary.group_id,
            state: state_name(&summary.state),
            protocol_type: summary.protocol_type,
            protocol: summary.protocol,
            coordinator: summary.coordinator,
            members: Vec::new(),
            offsets: Vec::new(),
            assignor: summary.assignor,
        }
    }
}

/// The state names both group protocols use (Kafka's), as the static strings a view holds.
fn state_name(state: &str) -> &'static str {
    const NAMES: [&str; 7] =
        ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Assigning", "Reconciling"];
    NAMES.into_iter().find(|name| *name == state).unwrap_or("Unknown")
}

/// `segment` percent-encoded for a URL path (every byte but RFC 3986's unreserved ones).
pub(super) fn path_segment(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A group's members, assignments, committed offsets and lag per partition: DescribeGroups'
/// rule (DESCRIBE on the group, before anything says whether it exists), and OffsetFetch's
/// (only the offsets of topics the client may DESCRIBE).
#[utoipa::path(get, path = "/v1/groups/{group}", tag = "v1", params(("group" = String, Path), super::transforms::ViewQuery),
    responses((status = 200, body = GroupDetail), (status = 404, body = super::error::ErrorBody)))]
pub async fn describe_group(
    State(http): State<super::State>,
    Path(group): Path<String>,
    Query(query): Query<super::transforms::ViewQuery>,
) -> ApiResult<Json<GroupDetail>> {
    require(&http.broker, Operation::Describe, ResourceType::Group, &group)?;
    // The coordinator's view: only it knows the members and state (this node's copy of the
    // offsets answers if the coordinator does not).
    let image = http.broker.controller.image();
    if let kafka::Route::Peer(node) = kafka::coordinator_route(http.broker.settings.node_id, &image, &group) {
        if !query.node_only()? {
            let path = format!("/v1/groups/{}?scope=node", path_segment(&group));
            match super::transforms::ask_node::<GroupDetail>(&http, node, &path).await {
                Ok(Some(detail)) => return Ok(Json(describable_offsets(&http, detail))),
                Ok(None) => return Err(ApiError::unknown_group(&group)),
                Err(reason) => tracing::debug!(group, node, %reason, "group view: the coordinator did not answer"),
            }
        }
    }
    let g = admin::group(&http, &group).await?;
    let total_lag = g.total_lag();
    let member_ids: Vec<String> = g.members.iter().map(|m| m.member_id.clone()).collect();
    Ok(Json(GroupDetail {
        group_id: g.group_id,
        state: g.state.to_string(),
        protocol_type: g.protocol_type,
        protocol: g.protocol,
        coordinator: g.coordinator,
        assignor: g.assignor,
        members: g
            .members
            .into_iter()
            .map(|m| GroupMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                protocol: m.protocol.to_string(),
                assignment: m
                    .assignment
                    .into_iter()
                    .map(|(topic, partitions)| Assignment { topic, partitions })
                    .collect(),
            })
            .collect(),
        offsets: g
            .offsets
            .into_iter()
            .map(|o| GroupOffset {
                member_id: o.member.map(|i| member_ids[i].clone()),
                topic: o.topic,
                partition: o.partition,
                committed_offset: o.committed_offset,
                log_end_offset: o.log_end_offset,
                lag: o.lag,
                metadata: o.metadata,
            })
            .collect(),
        total_lag,
    }))
}

/// The coordinator's `detail` (it answered this node, which may see every topic) with only
/// the offsets of topics the client may DESCRIBE, and the lag they add up to, as
/// [`admin::group_loaded`] keeps them here.
fn describable_offsets(http: &super::Http, mut detail: GroupDetail) -> GroupDetail {
    let mut describable = admin::describable_topics(&http.broker);
    detail.offsets.retain(|o| describable(&o.topic));
    detail.total_lag = admin::sum_saturating(detail.offsets.iter().map(|o| o.lag.unwrap_or(0)));
    detail
}

/// Deletes an empty group and its committed offsets.
#[utoipa::path(delete, path = "/v1/groups/{group}", tag = "v1", params(("group" = String, Path)),
    responses((status = 204), (status = 404, body = super::error::ErrorBody), (status = 409, description = "the group has members", body = super::error::ErrorBody)))]
pub async fn delete_group(State(http): State<super::State>, Path(group): Path<String>) -> ApiResult<StatusCode> {
    admin::delete_group(&http, &group).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct TransactionPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Serialize, ToSchema)]
pub struct Transaction {
    pub transactional_id: String,
    /// The broker coordinating it (leader of its `__transaction_state` partition).
    pub coordinator: u64,
    /// Kafka's state names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    /// CompleteAbort, PrepareEpochFence, Dead.
    pub state: String,
    /// Ongoing or being ended: it holds its partitions' last stable offsets back.
    pub open: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the current (or last) transaction started, ms since the epoch; `None` before the
    /// first one.
    pub start_time_ms: Option<i64>,
    /// How long an open transaction has been open; `None` when it is not open.
    pub age_ms: Option<i64>,
    pub partitions: Vec<TransactionPartitions>,
}

impl From<admin::TxnView> for Transaction {
    fn from(t: admin::TxnView) -> Transaction {
        let open = t.is_open();
        let start_time_ms = (t.start_ms >= 0).then_some(t.start_ms);
        Transaction {
            age_ms: start_time_ms.filter(|_| open).map(|start| (crate::log::now_ms() - start).max(0)),
            start_time_ms,
            open,
            transactional_id: t.transactional_id,
            coordinator: t.coordinator,
            state: t.state,
            producer_id: t.producer_id,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.timeout_ms,
            partitions: t
                .partitions
                .into_iter()
                .map(|(topic, partitions)| TransactionPartitions { topic, partitions })
                .collect(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct TransactionList {
    pub transactions: Vec<Transaction>,
    /// Brokers that did not answer: their transactions are missing from the list.
    pub unreachable_brokers: Vec<u64>,
}

#[derive(Deserialize, IntoParams)]
pub struct TransactionsQuery {
    /// Only open transactions (Ongoing or being committed/aborted); default false.
    pub open: Option<bool>,
}

/// Every transactional id of the cluster with its state, producer, age and partitions (what
/// `kafka-transactions.sh list` and `describe` show), asked of every broker.
#[utoipa::path(get, path = "/v1/transactions", tag = "v1", params(TransactionsQuery),
    responses((status = 200, body = TransactionList)))]
pub async fn list_transactions(
    State(http): State<super::State>,
    Query(query): Query<TransactionsQuery>,
) -> Json<TransactionList> {
    let (all, unreachable_brokers) = admin::transactions(&http).await;
    let only_open = query.open.unwrap_or(false);
    let transactions = all.into_iter().filter(|t| !only_open || t.is_open()).map(Transaction::from).collect();
    Json(TransactionList { transactions, unreachable_brokers })
}

/// One transactional id, from its coordinator.
#[utoipa::path(get, path = "/v1/transactions/{transactional_id}", tag = "v1",
    params(("transactional_id" = String, Path)),
    responses((status = 200, body = Transaction), (status = 404, body = super::error::ErrorBody)))]
pub async fn describe_transaction(
    State(http): State<super::State>,
    Path(transactional_id): Path<String>,
) -> ApiResult<Json<Transaction>> {
    Ok(Json(admin::transaction(&http, &transactional_id).await?.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_pages_follow_the_cursor_in_name_order_with_prefix_and_filter() {
        // Proves paging returns every matching name once, in order, with `next` only while
        // more follow, `total` over all pages, and the prefix and filter applied.
        let map: imbl::OrdMap<String, u32> = ["a", "b1", "b2", "b3", "b4", "c", "__x"]
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), i as u32))
            .collect();
        let all = |_: &&u32| true;
        let mut seen: Vec<&u32> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next, total) = page_of(&map, "", after.as_deref(), 3, all);
            assert_eq!(total, 7);
            assert!(page.len() <= 3);
            seen.extend(page);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, vec![&6, &0, &1, &2, &3, &4, &5], "__x sorts first");
        let (page, next, total) = page_of(&map, "b", None, 2, all);
        assert_eq!((page, next.as_deref(), total), (vec![&1, &2], Some("b2"), 4));
        let (page, next, _) = page_of(&map, "b", Some("b2"), 2, all);
        assert_eq!((page, next), (vec![&3, &4], None));
        let (page, next, _) = page_of(&map, "b", Some("a"), 10, all);
        assert_eq!((page.len(), next), (4, None), "a cursor before the prefix starts at the prefix");
        let (page, _, total) = page_of(&map, "", None, 10, |v: &&u32| **v != 6);
        assert_eq!((page.len(), total), (6, 6));
        let (page, next, total) = page_of(&map, "zz", None, 10, all);
        assert_eq!((page.len(), next, total), (0, None, 0));
    }
}
