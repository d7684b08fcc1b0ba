//! `/v1/validators`: deploy a produce-path validator on a topic (module + config), list,
//! describe with what it has accepted and refused, delete, logs.
//!
//! Every node that leads a partition of the topic runs the validator; list and describe add up
//! the counters of every registered broker (each asked for its `?scope=node` view, as the
//! transform views do), and name the nodes that did not answer. A deployment is checked here
//! (names, limits, the module: a component of the validator world that compiles) before its
//! record goes through the metadata quorum.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use utoipa::ToSchema;

use super::auth::require;
use super::error::{ApiError, ApiResult, ErrorBody, Path, Query};
use super::tokens::audited;
use super::transforms::{
    ask_others, ask_others_until, check_module, hex, read_upload, tail_logs, Logs, LogsQuery, ViewQuery,
};
use crate::controller::{ApplyOutcome, MetadataRecord, ModuleBytes, ValidatorFailure, ValidatorImage, ValidatorSpec};
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers::validate_topic_name;

const MEMORY_BYTES_DEFAULT: u64 = 64 << 20;
const MEMORY_BYTES_MAX: u64 = 1 << 30;
/// A validator holds the producer's request: its deadline is shorter than a transform's.
const CALL_TIMEOUT_MS_DEFAULT: u64 = 1_000;
const CALL_TIMEOUT_MS_MAX: u64 = 30_000;

/// A validator's configuration (the `config` part of the upload).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidatorConfig {
    /// The topic whose produced batches it checks (it need not exist yet; at most one
    /// validator per topic).
    pub topic: String,
    /// Parameters handed to the guest's `init` (also its only environment variables).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// What a batch gets when the guest fails (trap, deadline, memory cap, failed init):
    /// "reject" (default: fail closed, INVALID_RECORD) or "accept" (fail open).
    pub on_failure: Option<String>,
    /// Linear memory cap per instance (default 64 MiB, at most 1 GiB).
    pub memory_bytes: Option<u64>,
    /// Deadline of one guest call (one partition's batches), ms (default 1000, at most 30000).
    pub call_timeout_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, ToSchema, Default, Clone)]
pub struct ValidatorCounters {
    pub batches_accepted: u64,
    pub batches_rejected: u64,
    /// Records of the refused batches.
    pub records_rejected: u64,
    /// Guest failures (trap, deadline, memory cap, init, a module that does not load), each
    /// decided by `on_failure`.
    pub failures: u64,
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    pub last_rejection: Option<String>,
    pub last_rejection_ms: Option<i64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ValidatorNode {
    pub node: u64,
    /// loaded, or failed (the module does not load here: `load_error`).
    pub state: String,
    pub load_error: Option<String>,
    /// The version this node runs (behind the deployment's while it catches up).
    pub version: u64,
    pub idle_instances: usize,
    #[serde(flatten)]
    pub counters: ValidatorCounters,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ValidatorDetail {
    pub name: String,
    pub topic: String,
    pub version: u64,
    pub sha256: String,
    pub module_bytes: usize,
    pub parameters: BTreeMap<String, String>,
    /// reject or accept.
    pub on_failure: String,
    pub memory_bytes: u64,
    pub call_timeout_ms: u64,
    /// Whether the topic exists now.
    pub topic_exists: bool,
    /// The sums over `nodes`.
    #[serde(flatten)]
    pub counters: ValidatorCounters,
    /// Each node's view (nodes that have not loaded it are absent).
    pub nodes: Vec<ValidatorNode>,
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ValidatorList {
    pub validators: Vec<ValidatorDetail>,
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

fn unknown(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 40409, format!("validator '{name}' not found"))
}

fn validate(name: &str, config: ValidatorConfig) -> ApiResult<ValidatorSpec> {
    validate_topic_name(name).map_err(|m| ApiError::invalid(format!("validator name: {m}")))?;
    validate_topic_name(&config.topic).map_err(|m| ApiError::invalid(format!("topic: {m}")))?;
    let on_failure = match config.on_failure.as_deref().unwrap_or("reject") {
        "reject" => ValidatorFailure::Reject,
        "accept" => ValidatorFailure::Accept,
        other => return Err(ApiError::invalid(format!("on_failure '{other}': reject or accept"))),
    };
    let memory_bytes = config.memory_bytes.unwrap_or(MEMORY_BYTES_DEFAULT);
    if !(1 << 20..=MEMORY_BYTES_MAX).contains(&memory_bytes) {
        return Err(ApiError::invalid(format!("memory_bytes must be between 1 MiB and {MEMORY_BYTES_MAX}")));
    }
    let call_timeout_ms = config.call_timeout_ms.unwrap_or(CALL_TIMEOUT_MS_DEFAULT);
    if !(1..=CALL_TIMEOUT_MS_MAX).contains(&call_timeout_ms) {
        return Err(ApiError::invalid(format!("call_timeout_ms must be between 1 and {CALL_TIMEOUT_MS_MAX}")));
    }
    Ok(ValidatorSpec { topic: config.topic, parameters: config.parameters, on_failure, memory_bytes, call_timeout_ms })
}

/// Deploys a validator on its topic, or redeploys it (the next batches meet the new version).
/// Answered once every node that answers has loaded this version (at most 10 s; the others are
/// in `nodes_unreachable`), so every leader checks the batches produced after the answer.
/// Body: `multipart/form-data` with a `config` part (JSON) and a `module` part (the
/// wasm32-wasip2 component), or JSON with the config fields and `module_base64`.
#[utoipa::path(put, path = "/v1/validators/{name}", tag = "v1", params(("name" = String, Path)),
    request_body(content = ValidatorConfig, description = "multipart: `config` (this JSON) + `module` (.wasm); or JSON with `module_base64`"),
    responses((status = 201, body = ValidatorDetail), (status = 200, description = "redeployed", body = ValidatorDetail),
        (status = 400, body = ErrorBody), (status = 409, description = "another validator checks the topic", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, description = "invalid config or module", body = ErrorBody)))]
pub async fn deploy(
    State(http): State<super::State>,
    Path(name): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let existed = http.broker.controller.image().validators.contains_key(&name);
    let operation = if existed { Operation::Alter } else { Operation::Create };
    require(&http.broker, operation, ResourceType::Validator, &name)?;
    let (config, module) = read_upload::<ValidatorConfig>(request).await?;
    let spec = validate(&name, config)?;
    // A validator decides what its topic accepts: a change of the topic's behaviour (of the
    // topic it leaves too, when a redeploy moves it).
    require(&http.broker, Operation::AlterConfigs, ResourceType::Topic, &spec.topic)?;
    if let Some(existing) = http.broker.controller.image().validators.get(&name) {
        require(&http.broker, Operation::AlterConfigs, ResourceType::Topic, &existing.spec.topic)?;
    }
    if let Some(other) = http.broker.controller.image().validators.values().find(|v| v.spec.topic == spec.topic) {
        if other.name != name {
            return Err(topic_taken(&spec.topic, &other.name));
        }
    }
    let module = check_module(&http, module, |runtime, bytes| runtime.validator(bytes).map(|_| ())).await?;
    let sha256 = hex(&sha2::Sha256::digest(module.as_slice()));
    let topic = spec.topic.clone();
    let record = MetadataRecord::DeployValidator {
        name: name.clone(),
        spec,
        module: ModuleBytes(module),
        sha256: sha256.clone(),
    };
    let record = audited(record, "deploy", ResourceType::Validator, &name, Some(sha256));
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {}
        Ok(ApplyOutcome::TopicHasValidator { validator }) => return Err(topic_taken(&topic, &validator)),
        Ok(other) => return Err(ApiError::internal(format!("deploy: unexpected outcome {other:?}"))),
        Err(e) => return Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
    let image = http.broker.controller.image();
    http.broker.validators.reconcile(&image).await;
    let validator = image.validators.get(&name).ok_or_else(|| unknown(&name))?;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    let (nodes, nodes_asked, nodes_unreachable) = wait_loaded(&http, validator).await;
    Ok((status, Json(detail(&image, validator, nodes, nodes_asked, nodes_unreachable))).into_response())
}

/// Waits until every node that answers runs `validator`'s version, so that once a deployment
/// is answered every leader checks its topic's batches; returns the nodes' views, the nodes
/// asked and those that did not answer or had not loaded it in time.
async fn wait_loaded(http: &super::Http, validator: &ValidatorImage) -> (Vec<ValidatorNode>, Vec<u64>, Vec<u64>) {
    let path = format!("/v1/validators/{}?scope=node", validator.name);
    let loaded = |d: &ValidatorDetail| d.nodes.first().is_some_and(|n| n.version >= validator.version);
    let (answers, asked, unreachable) = ask_others_until::<ValidatorDetail>(http, &path, loaded).await;
    let mut nodes: Vec<ValidatorNode> = local_node(http, validator).into_iter().collect();
    nodes.extend(answers.into_iter().filter_map(|(_, d)| d.nodes.into_iter().next()));
    (nodes, asked, unreachable)
}

fn topic_taken(topic: &str, other: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, 40909, format!("topic '{topic}' is already checked by validator '{other}'"))
}

/// This node's view of `validator`, if it runs this deployment (any version of it).
fn local_node(http: &super::Http, validator: &ValidatorImage) -> Option<ValidatorNode> {
    let running = http.broker.validators.get(&validator.name)?;
    let stats = &running.stats;
    let last_error = stats.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let last_rejection = stats.last_rejection.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Some(ValidatorNode {
        node: http.broker.settings.node_id,
        state: if running.load_error().is_some() { "failed" } else { "loaded" }.to_string(),
        load_error: running.load_error().map(str::to_string),
        version: running.image.version,
        idle_instances: running.idle_instances(),
        counters: ValidatorCounters {
            batches_accepted: stats.batches_accepted.load(Ordering::Relaxed),
            batches_rejected: stats.batches_rejected.load(Ordering::Relaxed),
            records_rejected: stats.records_rejected.load(Ordering::Relaxed),
            failures: stats.failures.load(Ordering::Relaxed),
            last_error_ms: last_error.as_ref().map(|(_, at)| *at),
            last_error: last_error.map(|(e, _)| e),
            last_rejection_ms: last_rejection.as_ref().map(|(_, at)| *at),
            last_rejection: last_rejection.map(|(m, _)| m),
        },
    })
}

/// The deployment with `nodes`' views and their sums (the newest error and rejection win).
fn detail(
    image: &crate::controller::MetadataImage,
    validator: &ValidatorImage,
    mut nodes: Vec<ValidatorNode>,
    nodes_asked: Vec<u64>,
    nodes_unreachable: Vec<u64>,
) -> ValidatorDetail {
    nodes.sort_by_key(|n| n.node);
    let mut sum = ValidatorCounters::default();
    for n in &nodes {
        let c = &n.counters;
        sum.batches_accepted += c.batches_accepted;
        sum.batches_rejected += c.batches_rejected;
        sum.records_rejected += c.records_rejected;
        sum.failures += c.failures;
        if c.last_error_ms > sum.last_error_ms {
            (sum.last_error, sum.last_error_ms) = (c.last_error.clone(), c.last_error_ms);
        }
        if c.last_rejection_ms > sum.last_rejection_ms {
            (sum.last_rejection, sum.last_rejection_ms) = (c.last_rejection.clone(), c.last_rejection_ms);
        }
    }
    let spec = &validator.spec;
    ValidatorDetail {
        name: validator.name.clone(),
        topic: spec.topic.clone(),
        version: validator.version,
        sha256: validator.sha256.clone(),
        module_bytes: validator.module.0.len(),
        parameters: spec.parameters.clone(),
        on_failure: spec.on_failure.name().to_string(),
        memory_bytes: spec.memory_bytes,
        call_timeout_ms: spec.call_timeout_ms,
        topic_exists: image.topics.contains_key(&spec.topic),
        counters: sum,
        nodes,
        nodes_asked,
        nodes_unreachable,
    }
}

/// Every validator, with the counters of every node that answered.
#[utoipa::path(get, path = "/v1/validators", tag = "v1", params(ViewQuery),
    responses((status = 200, body = ValidatorList), (status = 422, body = ErrorBody)))]
pub async fn list(State(http): State<super::State>, Query(query): Query<ViewQuery>) -> ApiResult<Json<ValidatorList>> {
    let me = http.broker.settings.node_id;
    let (answers, nodes_asked, nodes_unreachable) = if query.node_only()? {
        (Vec::new(), vec![me], Vec::new())
    } else {
        ask_others::<ValidatorList>(&http, "/v1/validators?scope=node").await
    };
    let mut remote: BTreeMap<String, Vec<ValidatorNode>> = BTreeMap::new();
    for list in answers.into_iter().filter_map(|(_, list)| list) {
        for validator in list.validators {
            remote.entry(validator.name).or_default().extend(validator.nodes);
        }
    }
    let image = http.broker.controller.image();
    let validators = image
        .validators
        .values()
        .filter(|v| http.broker.authorized(Operation::Describe, ResourceType::Validator, &v.name))
        .map(|v| {
            let mut nodes: Vec<ValidatorNode> = local_node(&http, v).into_iter().collect();
            nodes.extend(remote.remove(&v.name).unwrap_or_default());
            detail(&image, v, nodes, nodes_asked.clone(), nodes_unreachable.clone())
        })
        .collect();
    Ok(Json(ValidatorList { validators, nodes_asked, nodes_unreachable }))
}

/// A validator with what it has accepted and refused, node by node.
#[utoipa::path(get, path = "/v1/validators/{name}", tag = "v1", params(("name" = String, Path), ViewQuery),
    responses((status = 200, body = ValidatorDetail), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn describe(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<ViewQuery>,
) -> ApiResult<Json<ValidatorDetail>> {
    let node_only = query.node_only()?;
    require(&http.broker, Operation::Describe, ResourceType::Validator, &name)?;
    let image = http.broker.controller.image();
    let validator = image.validators.get(&name).ok_or_else(|| unknown(&name))?;
    let me = http.broker.settings.node_id;
    let mut nodes: Vec<ValidatorNode> = local_node(&http, validator).into_iter().collect();
    if node_only {
        return Ok(Json(detail(&image, validator, nodes, vec![me], Vec::new())));
    }
    let path = format!("/v1/validators/{name}?scope=node");
    let (answers, nodes_asked, nodes_unreachable) = ask_others::<ValidatorDetail>(&http, &path).await;
    for answer in answers.into_iter().filter_map(|(_, detail)| detail) {
        nodes.extend(answer.nodes);
    }
    Ok(Json(detail(&image, validator, nodes, nodes_asked, nodes_unreachable)))
}

/// Removes a validator: its topic's batches are appended unchecked from then on.
#[utoipa::path(delete, path = "/v1/validators/{name}", tag = "v1", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(State(http): State<super::State>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    require(&http.broker, Operation::Delete, ResourceType::Validator, &name)?;
    // Removing a validator changes what its topic accepts, as deploying one does.
    if let Some(existing) = http.broker.controller.image().validators.get(&name) {
        require(&http.broker, Operation::AlterConfigs, ResourceType::Topic, &existing.spec.topic)?;
    }
    let record =
        audited(MetadataRecord::DeleteValidator { name: name.clone() }, "delete", ResourceType::Validator, &name, None);
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {
            http.broker.validators.reconcile(&http.broker.controller.image()).await;
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(ApplyOutcome::UnknownValidator) => Err(unknown(&name)),
        Ok(other) => Err(ApiError::internal(format!("unexpected outcome {other:?}"))),
        Err(e) => Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
}

/// Recent guest log lines and host events (loads, failures) of a validator on this node.
#[utoipa::path(get, path = "/v1/validators/{name}/logs", tag = "v1", params(("name" = String, Path), LogsQuery),
    responses((status = 200, body = Logs), (status = 404, body = ErrorBody)))]
pub async fn logs(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> ApiResult<Json<Logs>> {
    require(&http.broker, Operation::Describe, ResourceType::Validator, &name)?;
    if !http.broker.controller.image().validators.contains_key(&name) {
        return Err(unknown(&name));
    }
    let running = http.broker.validators.get(&name);
    Ok(Json(tail_logs(running.as_ref().map(|r| &*r.logs), &query)))
}
