//! `/v1/transforms`: deploy (module + config), list, describe with per-partition status, pause,
//! resume, delete, logs.
//!
//! List and describe show the whole cluster: this node's workers plus those every other
//! registered broker reports for itself (`?scope=node`, asked at once over HTTP at the address
//! its DescribeConfigs names as `runnel.http.address`). Each partition row names the node it runs
//! on; the answer says which nodes were asked and which did not answer in time, and a node that
//! does not answer never fails the request. A node answering `scope=node` asks no one (no loops).
//!
//! A deployment is validated here (names, topics, limits, the module: a component of the
//! transform world that compiles) before its record goes through the metadata quorum; the
//! compile also warms the on-disk cache of precompiled modules.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::extract::{Multipart, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use utoipa::{IntoParams, ToSchema};

use super::auth::require;
use super::error::{parse_json, read_body, ApiError, ApiResult, ErrorBody, Path, Query};
use super::tokens::audited;
use crate::controller::{
    ApplyOutcome, DeliveryMode, ErrorPolicy, MetadataRecord, ModuleBytes, StartPosition, TransformSpec,
    COMMIT_INTERVAL_MS_DEFAULT, STATE_BYTES_MAX_DEFAULT,
};
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers::validate_topic_name;

/// How long the views wait for another node (its DescribeConfigs, then its own view): a node
/// slower than this is listed as unreachable rather than holding the answer.
const PEER_VIEW_TIMEOUT: Duration = Duration::from_secs(2);
/// DescribeConfigs v1: broker resources by id, named keys.
const DESCRIBE_CONFIGS_VERSION: i16 = 1;
const HTTP_ADDRESS_CONFIG: &str = "runnel.http.address";

const MEMORY_BYTES_DEFAULT: u64 = 64 << 20;
const MEMORY_BYTES_MAX: u64 = 1 << 30;
const STATE_BYTES_MAX_MAX: u64 = 1 << 30;
const CALL_TIMEOUT_MS_DEFAULT: u64 = 2_000;
const CALL_TIMEOUT_MS_MAX: u64 = 60_000;
const BATCH_RECORDS_DEFAULT: u32 = 1_000;
const BATCH_RECORDS_MAX: u32 = 100_000;
/// Longer would hold a transaction open close to its 60 s timeout.
const COMMIT_INTERVAL_MS_MAX: u64 = 30_000;

/// A deployment's configuration (the `config` part of the upload).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployConfig {
    pub input_topic: String,
    /// The guest's output topic index i writes to `output_topics[i]`.
    pub output_topics: Vec<String>,
    /// Parameters handed to the guest's `init` (also its only environment variables).
    #[serde(default, alias = "environment")]
    pub parameters: BTreeMap<String, String>,
    /// "earliest" (default) or "latest": where a partition starts without a committed position.
    pub start: Option<String>,
    /// "retry" (default: stop and retry with backoff), "skip", or "dead_letter" with
    /// `dead_letter_topic`.
    pub error_policy: Option<String>,
    pub dead_letter_topic: Option<String>,
    /// Linear memory cap per instance (default 64 MiB, at most 1 GiB).
    pub memory_bytes: Option<u64>,
    /// Deadline of one guest call, ms (default 2000, at most 60000).
    pub call_timeout_ms: Option<u64>,
    /// Records per guest call at most (default 1000, at most 100000).
    pub batch_records_max: Option<u32>,
    /// Continue from the positions an earlier deployment of this name committed (default
    /// false: a new deployment starts at `start`; a redeploy always continues).
    #[serde(default)]
    pub resume: bool,
    /// "exactly_once" (default: outputs, dead letters and the input position commit in one
    /// transaction, so read_committed consumers of the outputs see each input's outputs once)
    /// or "at_least_once" (lower latency; after a crash recent outputs are written again).
    pub delivery: Option<String>,
    /// How often positions are committed while input keeps coming, ms (default 100, 1 to
    /// 30000); exactly-once, the length of one transaction.
    pub commit_interval_ms: Option<u64>,
    /// Bound of a stateful transform's keyed state per input partition, keys plus values plus
    /// 64 bytes per entry (default 64 MiB, 1 KiB to 1 GiB): a put past it fails the guest's batch.
    pub state_bytes_max: Option<u64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct TransformPartition {
    pub partition: i32,
    /// The node whose worker this is (the input partition's leader while it runs).
    pub node: u64,
    /// starting, running, failed, paused, stopped.
    pub state: String,
    pub position: i64,
    /// The input offset this partition's worker started at (the committed position, else the
    /// deployment's `start`).
    pub start_offset: i64,
    pub high_watermark: i64,
    pub lag: i64,
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub records_in_per_sec: f64,
    pub records_out_per_sec: f64,
    pub errors: u64,
    pub skipped: u64,
    pub dead_lettered: u64,
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    pub memory_bytes: u64,
    pub module_from_cache: bool,
    /// Whether the module keeps keyed state (it imports `state`).
    pub stateful: bool,
    /// Size of the partition's state (keys plus values, committed and pending), bytes.
    pub state_bytes: u64,
    /// Keys of the partition's committed state.
    pub state_keys: u64,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct TransformDetail {
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub module_bytes: usize,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub parameters: BTreeMap<String, String>,
    pub start: String,
    pub error_policy: String,
    pub dead_letter_topic: Option<String>,
    pub memory_bytes: u64,
    pub call_timeout_ms: u64,
    pub batch_records_max: u32,
    /// Whether this deployment took over an earlier one's positions.
    pub resume: bool,
    /// exactly_once or at_least_once.
    pub delivery: String,
    pub commit_interval_ms: u64,
    pub state_bytes_max: u64,
    /// Whether the module keeps keyed state (as its workers report; false before one started),
    /// restored from and written to `state_topic`.
    pub stateful: bool,
    pub state_topic: Option<String>,
    /// The deployment's id, kept across redeploys; the positions it commits carry it.
    pub deployment: String,
    pub paused: bool,
    /// running (every partition), failed (any partition), paused, starting.
    pub state: String,
    pub lag: i64,
    pub records_in_per_sec: f64,
    pub records_out_per_sec: f64,
    pub errors: u64,
    /// Workers of every node that answered, by partition then node. A stopped worker is shown
    /// only when no node runs that partition.
    pub partitions: Vec<TransformPartition>,
    /// The nodes whose workers were asked for (this one included).
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    /// Asked nodes that did not answer: their workers are missing from `partitions`.
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct TransformList {
    pub transforms: Vec<TransformDetail>,
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

#[derive(Deserialize, IntoParams)]
pub struct ViewQuery {
    /// `node`: only this node's workers (what nodes ask each other). Default: the cluster.
    pub scope: Option<String>,
}

impl ViewQuery {
    pub(super) fn node_only(&self) -> ApiResult<bool> {
        match self.scope.as_deref() {
            None | Some("cluster") => Ok(false),
            Some("node") => Ok(true),
            Some(other) => Err(ApiError::invalid(format!("scope '{other}': cluster or node"))),
        }
    }
}

/// The workers this node has run for `transform`.
fn local_partitions(http: &super::Http, transform: &crate::controller::TransformImage) -> Vec<TransformPartition> {
    let node = http.broker.settings.node_id;
    http.broker
        .transforms
        .status(&transform.name)
        .into_iter()
        .map(|s| {
            // The live high watermark: a paused or failed worker no longer refreshes its own.
            let high_watermark = u32::try_from(s.partition)
                .ok()
                .and_then(|p| http.broker.replicas.get(&transform.spec.input_topic, p))
                .map_or(s.high_watermark, |p| p.high_watermark());
            (s, high_watermark)
        })
        .map(|(s, high_watermark)| TransformPartition {
            partition: s.partition,
            node,
            state: s.state.to_string(),
            position: s.position,
            start_offset: s.start_offset,
            high_watermark,
            lag: high_watermark.saturating_sub(s.position).max(0),
            records_in: s.records_in,
            records_out: s.records_out,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
            records_in_per_sec: s.records_in_per_sec,
            records_out_per_sec: s.records_out_per_sec,
            errors: s.errors,
            skipped: s.skipped,
            dead_lettered: s.dead_lettered,
            last_error: s.last_error,
            last_error_ms: s.last_error_ms,
            memory_bytes: s.memory_bytes,
            module_from_cache: s.module_from_cache,
            stateful: s.stateful,
            state_bytes: s.state_bytes,
            state_keys: s.state_keys,
        })
        .collect()
}

/// This node's view of `transform`.
fn detail(http: &super::Http, transform: &crate::controller::TransformImage) -> TransformDetail {
    let node = http.broker.settings.node_id;
    summarize(transform, local_partitions(http, transform), vec![node], Vec::new())
}

/// `transform` with `partitions` (of any nodes) and its aggregate state over them.
fn summarize(
    transform: &crate::controller::TransformImage,
    partitions: Vec<TransformPartition>,
    nodes_asked: Vec<u64>,
    nodes_unreachable: Vec<u64>,
) -> TransformDetail {
    let state = if transform.paused {
        "paused"
    } else if partitions.iter().any(|p| p.state == "failed") {
        "failed"
    } else if !partitions.is_empty() && partitions.iter().all(|p| p.state == "running") {
        "running"
    } else {
        "starting"
    };
    let spec = &transform.spec;
    let (error_policy, dead_letter_topic) = match &spec.error_policy {
        ErrorPolicy::Retry => ("retry", None),
        ErrorPolicy::Skip => ("skip", None),
        ErrorPolicy::DeadLetter { topic } => ("dead_letter", Some(topic.clone())),
    };
    TransformDetail {
        name: transform.name.clone(),
        version: transform.version,
        sha256: transform.sha256.clone(),
        module_bytes: transform.module.0.len(),
        input_topic: spec.input_topic.clone(),
        output_topics: spec.output_topics.clone(),
        parameters: spec.parameters.clone(),
        start: match spec.start {
            StartPosition::Earliest => "earliest",
            StartPosition::Latest => "latest",
        }
        .to_string(),
        error_policy: error_policy.to_string(),
        dead_letter_topic,
        memory_bytes: spec.memory_bytes,
        call_timeout_ms: spec.call_timeout_ms,
        batch_records_max: spec.batch_records_max,
        resume: spec.resume,
        delivery: spec.delivery.name().to_string(),
        commit_interval_ms: spec.commit_interval_ms,
        state_bytes_max: spec.state_bytes_max,
        stateful: partitions.iter().any(|p| p.stateful),
        state_topic: partitions.iter().any(|p| p.stateful).then(|| crate::transform::state_topic_of(&transform.name)),
        deployment: transform.deployment.clone(),
        paused: transform.paused,
        state: state.to_string(),
        lag: super::admin::sum_saturating(partitions.iter().map(|p| p.lag)),
        records_in_per_sec: partitions.iter().map(|p| p.records_in_per_sec).sum(),
        records_out_per_sec: partitions.iter().map(|p| p.records_out_per_sec).sum(),
        errors: partitions.iter().map(|p| p.errors).sum(),
        partitions,
        nodes_asked,
        nodes_unreachable,
    }
}

/// Merges the workers of every node: sorted by (partition, node), and a stopped worker (one
/// that ran where the partition no longer leads) dropped when another node runs the partition.
fn merge(mut partitions: Vec<TransformPartition>) -> Vec<TransformPartition> {
    let live: BTreeSet<i32> = partitions.iter().filter(|p| p.state != "stopped").map(|p| p.partition).collect();
    partitions.retain(|p| p.state != "stopped" || !live.contains(&p.partition));
    partitions.sort_by_key(|p| (p.partition, p.node));
    partitions
}

/// What the other registered brokers answer to `path` (their `scope=node` view), asked at
/// once: (answers by node, the nodes asked, those that did not answer).
pub(super) async fn ask_others<T: serde::de::DeserializeOwned>(
    http: &super::Http,
    path: &str,
) -> (Vec<(u64, Option<T>)>, Vec<u64>, Vec<u64>) {
    let me = http.broker.settings.node_id;
    let others: Vec<u64> = http.broker.controller.image().brokers.keys().copied().filter(|n| *n != me).collect();
    let asks = others.iter().map(|&node| async move {
        let answer = tokio::time::timeout(PEER_VIEW_TIMEOUT, ask_node::<T>(http, node, path)).await;
        match answer {
            Ok(Ok(view)) => Ok((node, view)),
            Ok(Err(reason)) => {
                tracing::debug!(node, %reason, "transform view: node did not answer");
                Err(node)
            }
            Err(_) => Err(node),
        }
    });
    let mut answers = Vec::new();
    let mut unreachable = Vec::new();
    for result in futures_util::future::join_all(asks).await {
        match result {
            Ok(answer) => answers.push(answer),
            Err(node) => unreachable.push(node),
        }
    }
    let mut asked = others;
    asked.push(me);
    asked.sort_unstable();
    (answers, asked, unreachable)
}

/// Checks an uploaded module with `load` (the runtime's loader of the world it must be) off the
/// async workers, since compiling takes up to seconds (the artifact it caches makes every
/// node's later load cheap): 413 for a module over the size limit, 422 with the runtime's
/// reason otherwise. Returns the module, shared, for the metadata record.
pub(super) async fn check_module(
    http: &super::Http,
    module: Vec<u8>,
    load: impl FnOnce(&runnel_runtime::Runtime, &[u8]) -> Result<(), runnel_runtime::RuntimeError> + Send + 'static,
) -> ApiResult<std::sync::Arc<Vec<u8>>> {
    // Busy: answered at once (503, retry later) rather than queued on the blocking pool.
    let _turn = http.uploads.try_acquire().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            50301,
            format!("{UPLOADS_AT_ONCE} uploaded modules are being compiled; try again shortly"),
        )
        .with_retry_after(1)
    })?;
    let runtime = http.broker.transforms.runtime().clone();
    let module = std::sync::Arc::new(module);
    let checked = module.clone();
    tokio::task::spawn_blocking(move || load(&runtime, &checked))
        .await
        .map_err(|e| ApiError::internal(format!("validation task: {e}")))?
        .map_err(|e| match e {
            runnel_runtime::RuntimeError::TooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, 41301, e.to_string())
            }
            other => ApiError::invalid(format!("module: {other}")),
        })?;
    Ok(module)
}

/// Uploads checked at once on a node (one compiles, the other waits its turn in the runtime).
pub(super) const UPLOADS_AT_ONCE: usize = 2;

/// How long a deployment's answer waits for the other nodes to load it.
const LOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const LOAD_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Asks the other brokers for `path` (their `scope=node` view) until every one that answers
/// is `ready` (a deployment is loaded there), at most [`LOAD_WAIT`]: (the ready answers by
/// node, the nodes asked, those that did not answer or were not ready in time).
pub(super) async fn ask_others_until<T: serde::de::DeserializeOwned>(
    http: &super::Http,
    path: &str,
    ready: impl Fn(&T) -> bool,
) -> (Vec<(u64, T)>, Vec<u64>, Vec<u64>) {
    let deadline = tokio::time::Instant::now() + LOAD_WAIT;
    loop {
        let (answers, asked, mut unreachable) = ask_others::<T>(http, path).await;
        let mut done = Vec::new();
        let mut behind = Vec::new();
        for (node, answer) in answers {
            match answer.filter(|a| ready(a)) {
                Some(answer) => done.push((node, answer)),
                None => behind.push(node),
            }
        }
        if behind.is_empty() || tokio::time::Instant::now() >= deadline {
            unreachable.extend(behind);
            unreachable.sort_unstable();
            return (done, asked, unreachable);
        }
        tokio::time::sleep(LOAD_POLL).await;
    }
}

/// Node `node`'s own view of `path`; `None` when it does not know the transform (404: its
/// metadata is behind, or the transform was just deleted).
pub(super) async fn ask_node<T: serde::de::DeserializeOwned>(
    http: &super::Http,
    node: u64,
    path: &str,
) -> Result<Option<T>, String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let resource = DescribeConfigsResource::default()
        .with_resource_type(crate::server::handlers::describe_configs::RESOURCE_BROKER)
        .with_resource_name(crate::server::handlers::str_bytes(&node.to_string()))
        .with_configuration_keys(Some(vec![crate::server::handlers::str_bytes(HTTP_ADDRESS_CONFIG)]));
    let request = DescribeConfigsRequest::default().with_resources(vec![resource]);
    let response = http
        .broker
        .peers
        .call(node, DESCRIBE_CONFIGS_VERSION, &request, PEER_VIEW_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let address = response
        .results
        .iter()
        .flat_map(|r| r.configs.iter())
        .find(|c| c.name.as_str() == HTTP_ADDRESS_CONFIG)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
        .ok_or_else(|| format!("no {HTTP_ADDRESS_CONFIG} in its DescribeConfigs answer"))?;
    let url = format!("{}://{address}{path}", if http.tls { "https" } else { "http" });
    let mut ask = http.peer_client.get(&url);
    // The other node's HTTP API authenticates: this node's own token (`auth`).
    if let Some(token) = http.auth.node_token(&http.broker).await {
        ask = ask.bearer_auth(token);
    }
    let answer = ask.send().await.map_err(|e| format!("{url}: {e}"))?;
    if answer.status() == reqwest::StatusCode::UNAUTHORIZED {
        // Revoked (or rotated while the other node's image lagged): the next call issues anew.
        http.auth.forget_node_token().await;
    }
    if answer.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !answer.status().is_success() {
        return Err(format!("{url}: HTTP {}", answer.status()));
    }
    answer.json::<T>().await.map(Some).map_err(|e| format!("{url}: {e}"))
}

/// The HTTP client nodes ask each other with (connections pooled across requests): over
/// HTTPS, trusting the node's truststore, when the HTTP APIs serve HTTPS.
pub(super) fn peer_client(tls: Option<&crate::security::tls::TlsContext>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().connect_timeout(PEER_VIEW_TIMEOUT).timeout(PEER_VIEW_TIMEOUT);
    if let Some(config) = tls.and_then(|tls| tls.client_config()) {
        builder = builder.use_preconfigured_tls((*config).clone());
    }
    builder.build().unwrap_or_else(|_| reqwest::Client::new())
}

fn unknown(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 40408, format!("transform '{name}' not found"))
}

/// Reads the upload: multipart (`config` JSON part + `module` part), or JSON with
/// `module_base64` next to the config fields.
pub(super) async fn read_upload<C: serde::de::DeserializeOwned>(request: Request) -> ApiResult<(C, Vec<u8>)> {
    let content_type =
        request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let mut multipart = <Multipart as axum::extract::FromRequest<()>>::from_request(request, &())
            .await
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, 40001, format!("malformed multipart body: {e}")))?;
        let (mut config, mut module) = (None, None);
        loop {
            let field = multipart.next_field().await.map_err(|e| {
                let status = e.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(status, 41301, "upload is larger than the limit (socket.request.max.bytes)")
                } else {
                    ApiError::new(StatusCode::BAD_REQUEST, 40001, format!("malformed multipart body: {e}"))
                }
            })?;
            let Some(field) = field else { break };
            let name = field.name().unwrap_or("").to_string();
            let bytes = field
                .bytes()
                .await
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, 40001, format!("reading part '{name}': {e}")))?;
            match name.as_str() {
                "config" => config = Some(parse_json::<C>(&bytes)?),
                "module" => module = Some(bytes.to_vec()),
                other => return Err(ApiError::invalid(format!("unexpected part '{other}' (config and module)"))),
            }
        }
        // A config whose fields all have defaults (an assignor's) may be left out.
        let config = match config {
            Some(config) => config,
            None => serde_json::from_slice::<C>(b"{}")
                .map_err(|_| ApiError::invalid("the 'config' part (JSON) is missing"))?,
        };
        let module = module.ok_or_else(|| ApiError::invalid("the 'module' part (the .wasm component) is missing"))?;
        return Ok((config, module));
    }
    super::error::check_json_content_type(request.headers())?;
    let body = read_body(request, &()).await?;
    let mut value: serde_json::Value = parse_json(&body)?;
    let module = value
        .as_object_mut()
        .and_then(|o| o.remove("module_base64"))
        .and_then(|m| m.as_str().map(str::to_string))
        .ok_or_else(|| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42201, "module_base64 (string) is missing"))?;
    let module = super::records::decode_base64("module_base64", &module)?.to_vec();
    let config: C = serde_json::from_value(value).map_err(super::error::json_error)?;
    Ok((config, module))
}

fn validate(http: &super::Http, name: &str, config: DeployConfig) -> ApiResult<TransformSpec> {
    validate_topic_name(name).map_err(|m| ApiError::invalid(format!("transform name: {m}")))?;
    let image = http.broker.controller.image();
    let topic_exists = |topic: &str| -> ApiResult<()> {
        if image.topics.contains_key(topic) {
            Ok(())
        } else {
            Err(ApiError::unknown_topic(topic))
        }
    };
    topic_exists(&config.input_topic)?;
    if config.output_topics.is_empty() {
        return Err(ApiError::invalid("output_topics is empty"));
    }
    for (i, topic) in config.output_topics.iter().enumerate() {
        topic_exists(topic)?;
        if topic == &config.input_topic {
            return Err(ApiError::invalid(format!("output topic '{topic}' is the input topic (a loop)")));
        }
        if config.output_topics[..i].contains(topic) {
            return Err(ApiError::invalid(format!("output topic '{topic}' is listed twice")));
        }
    }
    let start = match config.start.as_deref().unwrap_or("earliest") {
        "earliest" => StartPosition::Earliest,
        "latest" => StartPosition::Latest,
        other => return Err(ApiError::invalid(format!("start '{other}': earliest or latest"))),
    };
    let error_policy = match (config.error_policy.as_deref().unwrap_or("retry"), config.dead_letter_topic) {
        ("retry", None) => ErrorPolicy::Retry,
        ("skip", None) => ErrorPolicy::Skip,
        ("dead_letter", Some(topic)) => {
            topic_exists(&topic)?;
            if topic == config.input_topic {
                return Err(ApiError::invalid("the dead-letter topic cannot be the input topic"));
            }
            ErrorPolicy::DeadLetter { topic }
        }
        ("dead_letter", None) => return Err(ApiError::invalid("error_policy dead_letter needs dead_letter_topic")),
        ("retry" | "skip", Some(_)) => {
            return Err(ApiError::invalid("dead_letter_topic is only for error_policy dead_letter"))
        }
        (other, _) => return Err(ApiError::invalid(format!("error_policy '{other}': retry, skip or dead_letter"))),
    };
    let memory_bytes = config.memory_bytes.unwrap_or(MEMORY_BYTES_DEFAULT);
    if !(1 << 20..=MEMORY_BYTES_MAX).contains(&memory_bytes) {
        return Err(ApiError::invalid(format!("memory_bytes must be between 1 MiB and {MEMORY_BYTES_MAX}")));
    }
    let call_timeout_ms = config.call_timeout_ms.unwrap_or(CALL_TIMEOUT_MS_DEFAULT);
    if !(1..=CALL_TIMEOUT_MS_MAX).contains(&call_timeout_ms) {
        return Err(ApiError::invalid(format!("call_timeout_ms must be between 1 and {CALL_TIMEOUT_MS_MAX}")));
    }
    let batch_records_max = config.batch_records_max.unwrap_or(BATCH_RECORDS_DEFAULT);
    if !(1..=BATCH_RECORDS_MAX).contains(&batch_records_max) {
        return Err(ApiError::invalid(format!("batch_records_max must be between 1 and {BATCH_RECORDS_MAX}")));
    }
    let delivery = match config.delivery.as_deref().unwrap_or("exactly_once") {
        "exactly_once" => DeliveryMode::ExactlyOnce,
        "at_least_once" => DeliveryMode::AtLeastOnce,
        other => return Err(ApiError::invalid(format!("delivery '{other}': exactly_once or at_least_once"))),
    };
    let commit_interval_ms = config.commit_interval_ms.unwrap_or(COMMIT_INTERVAL_MS_DEFAULT);
    if !(1..=COMMIT_INTERVAL_MS_MAX).contains(&commit_interval_ms) {
        return Err(ApiError::invalid(format!("commit_interval_ms must be between 1 and {COMMIT_INTERVAL_MS_MAX}")));
    }
    let state_bytes_max = config.state_bytes_max.unwrap_or(STATE_BYTES_MAX_DEFAULT);
    if !(1 << 10..=STATE_BYTES_MAX_MAX).contains(&state_bytes_max) {
        return Err(ApiError::invalid(format!("state_bytes_max must be between 1 KiB and {STATE_BYTES_MAX_MAX}")));
    }
    Ok(TransformSpec {
        input_topic: config.input_topic,
        output_topics: config.output_topics,
        parameters: config.parameters,
        start,
        error_policy,
        memory_bytes,
        call_timeout_ms,
        batch_records_max,
        resume: config.resume,
        delivery,
        commit_interval_ms,
        state_bytes_max,
    })
}

/// Deploys a transform, or redeploys it (a new version resumes from the committed positions).
/// Body: `multipart/form-data` with a `config` part (JSON) and a `module` part (the
/// wasm32-wasip2 component), or JSON with the config fields and `module_base64`.
#[utoipa::path(put, path = "/v1/transforms/{name}", tag = "v1", params(("name" = String, Path)),
    request_body(content = DeployConfig, description = "multipart: `config` (this JSON) + `module` (.wasm); or JSON with `module_base64`"),
    responses((status = 201, body = TransformDetail), (status = 200, description = "redeployed", body = TransformDetail),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, description = "invalid config or module", body = ErrorBody)))]
pub async fn deploy(
    State(http): State<super::State>,
    Path(name): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let existed = http.broker.controller.image().transforms.contains_key(&name);
    let operation = if existed { Operation::Alter } else { Operation::Create };
    require(&http.broker, operation, ResourceType::Transform, &name)?;
    let (config, module) = read_upload::<DeployConfig>(request).await?;
    // The module runs as the node: whoever deploys it must be allowed what it will do (checked
    // before the topics are looked up, so a denied client learns nothing of them).
    require(&http.broker, Operation::Read, ResourceType::Topic, &config.input_topic)?;
    for output in config.output_topics.iter().chain(config.dead_letter_topic.as_ref()) {
        require(&http.broker, Operation::Write, ResourceType::Topic, output)?;
    }
    let spec = validate(&http, &name, config)?;
    // The runtime refuses another world's component, naming what it is.
    let module = check_module(&http, module, |runtime, bytes| runtime.transform(bytes).map(|_| ())).await?;
    let sha256 = hex(&sha2::Sha256::digest(module.as_slice()));
    let record = MetadataRecord::DeployTransform {
        name: name.clone(),
        spec,
        module: ModuleBytes(module),
        sha256: sha256.clone(),
        deployment: uuid::Uuid::new_v4().to_string(),
    };
    let record = audited(record, "deploy", ResourceType::Transform, &name, Some(sha256));
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {}
        Ok(other) => return Err(ApiError::internal(format!("deploy: unexpected outcome {other:?}"))),
        Err(e) => return Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
    let image = http.broker.controller.image();
    http.broker.transforms.reconcile(&image).await;
    let transform = image.transforms.get(&name).ok_or_else(|| unknown(&name))?;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(detail(&http, transform))).into_response())
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every transform with its aggregate state over the workers of every node.
#[utoipa::path(get, path = "/v1/transforms", tag = "v1", params(ViewQuery),
    responses((status = 200, body = TransformList), (status = 422, body = ErrorBody)))]
pub async fn list(State(http): State<super::State>, Query(query): Query<ViewQuery>) -> ApiResult<Json<TransformList>> {
    let may_describe = |name: &str| http.broker.authorized(Operation::Describe, ResourceType::Transform, name);
    let node_only = query.node_only()?;
    let me = http.broker.settings.node_id;
    let (answers, nodes_asked, nodes_unreachable) = if node_only {
        (Vec::new(), vec![me], Vec::new())
    } else {
        ask_others::<TransformList>(&http, "/v1/transforms?scope=node").await
    };
    let mut remote: BTreeMap<String, Vec<TransformPartition>> = BTreeMap::new();
    for list in answers.into_iter().filter_map(|(_, list)| list) {
        for transform in list.transforms {
            remote.entry(transform.name).or_default().extend(transform.partitions);
        }
    }
    let image = http.broker.controller.image();
    let transforms = image
        .transforms
        .values()
        .filter(|t| may_describe(&t.name))
        .map(|t| {
            let mut partitions = local_partitions(&http, t);
            partitions.extend(remote.remove(&t.name).unwrap_or_default());
            summarize(t, merge(partitions), nodes_asked.clone(), nodes_unreachable.clone())
        })
        .collect();
    Ok(Json(TransformList { transforms, nodes_asked, nodes_unreachable }))
}

/// A transform with the status of each input partition's worker, on whichever node it runs.
#[utoipa::path(get, path = "/v1/transforms/{name}", tag = "v1", params(("name" = String, Path), ViewQuery),
    responses((status = 200, body = TransformDetail), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn describe(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<ViewQuery>,
) -> ApiResult<Json<TransformDetail>> {
    let node_only = query.node_only()?;
    require(&http.broker, Operation::Describe, ResourceType::Transform, &name)?;
    let image = http.broker.controller.image();
    let transform = image.transforms.get(&name).ok_or_else(|| unknown(&name))?;
    if node_only {
        return Ok(Json(detail(&http, transform)));
    }
    let path = format!("/v1/transforms/{name}?scope=node");
    let (answers, nodes_asked, nodes_unreachable) = ask_others::<TransformDetail>(&http, &path).await;
    let mut partitions = local_partitions(&http, transform);
    for detail in answers.into_iter().filter_map(|(_, detail)| detail) {
        partitions.extend(detail.partitions);
    }
    Ok(Json(summarize(transform, merge(partitions), nodes_asked, nodes_unreachable)))
}

async fn set_paused(http: &super::Http, name: &str, paused: bool) -> ApiResult<StatusCode> {
    require(&http.broker, Operation::Alter, ResourceType::Transform, name)?;
    let record = MetadataRecord::SetTransformPaused { name: name.to_string(), paused };
    let action = if paused { "pause" } else { "resume" };
    propose_known(http, name, audited(record, action, ResourceType::Transform, name, None)).await
}

async fn propose_known(http: &super::Http, name: &str, record: MetadataRecord) -> ApiResult<StatusCode> {
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {
            http.broker.transforms.reconcile(&http.broker.controller.image()).await;
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(ApplyOutcome::UnknownTransform) => Err(unknown(name)),
        Ok(other) => Err(ApiError::internal(format!("unexpected outcome {other:?}"))),
        Err(e) => Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
}

/// Stops processing (positions are kept).
#[utoipa::path(post, path = "/v1/transforms/{name}/pause", tag = "v1", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn pause(State(http): State<super::State>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    set_paused(&http, &name, true).await
}

/// Resumes from the committed positions.
#[utoipa::path(post, path = "/v1/transforms/{name}/resume", tag = "v1", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn resume(State(http): State<super::State>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    set_paused(&http, &name, false).await
}

/// Removes a transform.
#[utoipa::path(delete, path = "/v1/transforms/{name}", tag = "v1", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(State(http): State<super::State>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    require(&http.broker, Operation::Delete, ResourceType::Transform, &name)?;
    let record =
        audited(MetadataRecord::DeleteTransform { name: name.clone() }, "delete", ResourceType::Transform, &name, None);
    propose_known(&http, &name, record).await
}

#[derive(Deserialize, IntoParams)]
pub struct LogsQuery {
    /// Lines to return, newest last (default 200, at most 1000).
    pub limit: Option<usize>,
    /// Only lines of this input partition.
    pub partition: Option<i32>,
    /// Only lines after this `seq` (a follower passes the last `seq` it printed).
    pub after: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct LogLine {
    /// Increases by one per line of this transform on this node.
    pub seq: u64,
    pub timestamp_ms: i64,
    pub level: String,
    pub partition: Option<i32>,
    pub message: String,
}

#[derive(Serialize, ToSchema)]
pub struct Logs {
    pub lines: Vec<LogLine>,
}

/// Recent guest log lines (log calls, stdout, stderr) and host events of a transform.
#[utoipa::path(get, path = "/v1/transforms/{name}/logs", tag = "v1", params(("name" = String, Path), LogsQuery),
    responses((status = 200, body = Logs), (status = 404, body = ErrorBody)))]
pub async fn logs(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> ApiResult<Json<Logs>> {
    require(&http.broker, Operation::Describe, ResourceType::Transform, &name)?;
    if !http.broker.controller.image().transforms.contains_key(&name) {
        return Err(unknown(&name));
    }
    Ok(Json(tail_logs(Some(&http.broker.transforms.logs(&name)), &query)))
}

/// The lines of `buffer` `query` asks for (none when this node has no buffer for it).
pub(super) fn tail_logs(buffer: Option<&crate::transform::LogBuffer>, query: &LogsQuery) -> Logs {
    let limit = query.limit.unwrap_or(200).clamp(1, 1000);
    let lines = buffer.map_or_else(Vec::new, |buffer| {
        buffer.tail(limit, query.after.unwrap_or(0), |l| query.partition.is_none_or(|p| l.partition == Some(p)))
    });
    Logs { lines: lines.into_iter().map(log_line).collect() }
}

fn log_line(l: crate::transform::LogLine) -> LogLine {
    LogLine {
        seq: l.seq,
        timestamp_ms: l.timestamp_ms,
        level: l.level.to_string(),
        partition: l.partition,
        message: l.message,
    }
}
