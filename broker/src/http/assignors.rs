//! `/v1/assignors`: upload a consumer group assignor (a WASM component of the `assignor`
//! world) that consumer-protocol members select with `group.remote.assignor=<name>`, with no
//! restart; list, describe with what it has computed, delete, logs.
//!
//! Every node that coordinates a group may run it; list and describe add up the counters of
//! every registered broker (each asked for its `?scope=node` view, as the transform views do),
//! and name the nodes that did not answer. A deployment is checked here (name, limits, the
//! module: a component of the assignor world that compiles) before its record goes through
//! the metadata quorum, and answered once every node that answers has loaded it.

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
use crate::controller::{ApplyOutcome, AssignorImage, AssignorSpec, MetadataRecord, ModuleBytes};
use crate::group::assignor;
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers::validate_topic_name;

const MEMORY_BYTES_DEFAULT: u64 = 64 << 20;
const MEMORY_BYTES_MAX: u64 = 1 << 30;
/// The heartbeat that triggers an assignment waits for it: the deadline is short.
const CALL_TIMEOUT_MS_DEFAULT: u64 = 1_000;
const CALL_TIMEOUT_MS_MAX: u64 = 30_000;

/// An assignor's configuration (the optional `config` part of the upload).
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct AssignorConfig {
    /// Linear memory cap per instance (default 64 MiB, at most 1 GiB).
    pub memory_bytes: Option<u64>,
    /// Deadline of one `assign` call, ms (default 1000, at most 30000); past it the group gets
    /// the default assignor's plan.
    pub call_timeout_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, ToSchema, Default, Clone)]
pub struct AssignorCounters {
    /// Assignments it computed that passed the check.
    pub runs: u64,
    /// Runs that failed (trap, deadline, memory cap, an error, an invalid plan, a module that
    /// does not load); each group fell back to the default assignor.
    pub failures: u64,
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    /// When the last run ended (ms since the epoch).
    pub last_run_ms: Option<i64>,
    /// The last run's wall time, µs.
    pub last_run_micros: Option<u64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct AssignorNode {
    pub node: u64,
    /// loaded, or failed (the module does not load here: `load_error`).
    pub state: String,
    pub load_error: Option<String>,
    /// The version this node runs (behind the deployment's while it catches up).
    pub version: u64,
    /// The name the guest reports for itself (its exported `name`), once it ran here.
    pub guest_name: Option<String>,
    pub idle_instances: usize,
    #[serde(flatten)]
    pub counters: AssignorCounters,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct AssignorDetail {
    /// What members select it by (`group.remote.assignor`).
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub module_bytes: usize,
    pub memory_bytes: u64,
    pub call_timeout_ms: u64,
    /// When this version was deployed (ms since the epoch).
    pub deployed_ms: i64,
    /// The sums over `nodes` (the newest error and run win).
    #[serde(flatten)]
    pub counters: AssignorCounters,
    /// Each node's view (nodes that have not loaded it are absent).
    pub nodes: Vec<AssignorNode>,
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct AssignorList {
    /// The built-in assignors (`group.consumer.assignors`); the first is the default.
    pub builtin: Vec<String>,
    pub assignors: Vec<AssignorDetail>,
    #[serde(default)]
    pub nodes_asked: Vec<u64>,
    #[serde(default)]
    pub nodes_unreachable: Vec<u64>,
}

fn unknown(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 40410, format!("assignor '{name}' not found"))
}

fn validate(http: &super::Http, name: &str, config: AssignorConfig) -> ApiResult<AssignorSpec> {
    validate_topic_name(name).map_err(|m| ApiError::invalid(format!("assignor name: {m}")))?;
    let builtin = &http.broker.groups.consumers.config().assignors;
    if assignor::builtin(name).is_some() || builtin.iter().any(|b| b == name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            40910,
            format!("'{name}' is a built-in assignor; choose another name"),
        ));
    }
    let memory_bytes = config.memory_bytes.unwrap_or(MEMORY_BYTES_DEFAULT);
    if !(1 << 20..=MEMORY_BYTES_MAX).contains(&memory_bytes) {
        return Err(ApiError::invalid(format!("memory_bytes must be between 1 MiB and {MEMORY_BYTES_MAX}")));
    }
    let call_timeout_ms = config.call_timeout_ms.unwrap_or(CALL_TIMEOUT_MS_DEFAULT);
    if !(1..=CALL_TIMEOUT_MS_MAX).contains(&call_timeout_ms) {
        return Err(ApiError::invalid(format!("call_timeout_ms must be between 1 and {CALL_TIMEOUT_MS_MAX}")));
    }
    Ok(AssignorSpec { memory_bytes, call_timeout_ms })
}

/// Uploads an assignor, or a new version of it (used from the next target assignment a group
/// computes). Answered once every node that answers has loaded this version (at most 10 s; the
/// others are in `nodes_unreachable`), so a member may select it on any coordinator.
/// Body: `multipart/form-data` with a `module` part (the wasm32-wasip2 component) and an
/// optional `config` part (JSON), or JSON with the config fields and `module_base64`.
#[utoipa::path(put, path = "/v1/assignors/{name}", tag = "v1", params(("name" = String, Path)),
    request_body(content = AssignorConfig, description = "multipart: `module` (.wasm) + optional `config` (this JSON); or JSON with `module_base64`"),
    responses((status = 201, body = AssignorDetail), (status = 200, description = "redeployed", body = AssignorDetail),
        (status = 400, body = ErrorBody), (status = 409, description = "a built-in assignor's name", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, description = "invalid config or module", body = ErrorBody)))]
pub async fn deploy(
    State(http): State<super::State>,
    Path(name): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let existed = http.broker.controller.image().assignors.contains_key(&name);
    let operation = if existed { Operation::Alter } else { Operation::Create };
    require(&http.broker, operation, ResourceType::Assignor, &name)?;
    let (config, module) = read_upload::<AssignorConfig>(request).await?;
    let spec = validate(&http, &name, config)?;
    let module = check_module(&http, module, |runtime, bytes| runtime.assignor(bytes).map(|_| ())).await?;
    let sha256 = hex(&sha2::Sha256::digest(module.as_slice()));
    let record = MetadataRecord::DeployAssignor {
        name: name.clone(),
        spec,
        module: ModuleBytes(module),
        sha256: sha256.clone(),
        deployed_ms: crate::log::now_ms(),
    };
    let record = audited(record, "deploy", ResourceType::Assignor, &name, Some(sha256));
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {}
        Ok(other) => return Err(ApiError::internal(format!("deploy: unexpected outcome {other:?}"))),
        Err(e) => return Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
    let image = http.broker.controller.image();
    http.broker.assignors.reconcile(&image).await;
    let assignor = image.assignors.get(&name).ok_or_else(|| unknown(&name))?;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    let path = format!("/v1/assignors/{name}?scope=node");
    let loaded = |d: &AssignorDetail| d.nodes.first().is_some_and(|n| n.version >= assignor.version);
    let (answers, nodes_asked, nodes_unreachable) = ask_others_until::<AssignorDetail>(&http, &path, loaded).await;
    let mut nodes: Vec<AssignorNode> = local_node(&http, assignor).into_iter().collect();
    nodes.extend(answers.into_iter().filter_map(|(_, d)| d.nodes.into_iter().next()));
    Ok((status, Json(detail(assignor, nodes, nodes_asked, nodes_unreachable))).into_response())
}

/// This node's view of `assignor`, if it runs this deployment (any version of it).
fn local_node(http: &super::Http, assignor: &AssignorImage) -> Option<AssignorNode> {
    let running = http.broker.assignors.get(&assignor.name)?;
    let stats = &running.stats;
    let last_error = stats.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let last_run_ms = stats.last_run_ms.load(Ordering::Relaxed);
    Some(AssignorNode {
        node: http.broker.settings.node_id,
        state: if running.load_error().is_some() { "failed" } else { "loaded" }.to_string(),
        load_error: running.load_error().map(str::to_string),
        version: running.image.version,
        guest_name: running.guest_name(),
        idle_instances: running.idle_instances(),
        counters: AssignorCounters {
            runs: stats.runs.load(Ordering::Relaxed),
            failures: stats.failures.load(Ordering::Relaxed),
            last_error_ms: last_error.as_ref().map(|(_, at)| *at),
            last_error: last_error.map(|(e, _)| e),
            last_run_ms: (last_run_ms > 0).then_some(last_run_ms as i64),
            last_run_micros: (last_run_ms > 0).then(|| stats.last_run_micros.load(Ordering::Relaxed)),
        },
    })
}

/// The deployment with `nodes`' views and their sums (the newest error and run win).
fn detail(
    assignor: &AssignorImage,
    mut nodes: Vec<AssignorNode>,
    nodes_asked: Vec<u64>,
    nodes_unreachable: Vec<u64>,
) -> AssignorDetail {
    nodes.sort_by_key(|n| n.node);
    let mut sum = AssignorCounters::default();
    for n in &nodes {
        let c = &n.counters;
        sum.runs += c.runs;
        sum.failures += c.failures;
        if c.last_error_ms > sum.last_error_ms {
            (sum.last_error, sum.last_error_ms) = (c.last_error.clone(), c.last_error_ms);
        }
        if c.last_run_ms > sum.last_run_ms {
            (sum.last_run_ms, sum.last_run_micros) = (c.last_run_ms, c.last_run_micros);
        }
    }
    AssignorDetail {
        name: assignor.name.clone(),
        version: assignor.version,
        sha256: assignor.sha256.clone(),
        module_bytes: assignor.module.0.len(),
        memory_bytes: assignor.spec.memory_bytes,
        call_timeout_ms: assignor.spec.call_timeout_ms,
        deployed_ms: assignor.deployed_ms,
        counters: sum,
        nodes,
        nodes_asked,
        nodes_unreachable,
    }
}

/// The built-in assignors and every uploaded one, with the counters of every node that answered.
#[utoipa::path(get, path = "/v1/assignors", tag = "v1", params(ViewQuery),
    responses((status = 200, body = AssignorList), (status = 422, body = ErrorBody)))]
pub async fn list(State(http): State<super::State>, Query(query): Query<ViewQuery>) -> ApiResult<Json<AssignorList>> {
    let me = http.broker.settings.node_id;
    let (answers, nodes_asked, nodes_unreachable) = if query.node_only()? {
        (Vec::new(), vec![me], Vec::new())
    } else {
        ask_others::<AssignorList>(&http, "/v1/assignors?scope=node").await
    };
    let mut remote: BTreeMap<String, Vec<AssignorNode>> = BTreeMap::new();
    for list in answers.into_iter().filter_map(|(_, list)| list) {
        for assignor in list.assignors {
            remote.entry(assignor.name).or_default().extend(assignor.nodes);
        }
    }
    let image = http.broker.controller.image();
    let assignors = image
        .assignors
        .values()
        .filter(|a| http.broker.authorized(Operation::Describe, ResourceType::Assignor, &a.name))
        .map(|a| {
            let mut nodes: Vec<AssignorNode> = local_node(&http, a).into_iter().collect();
            nodes.extend(remote.remove(&a.name).unwrap_or_default());
            detail(a, nodes, nodes_asked.clone(), nodes_unreachable.clone())
        })
        .collect();
    let builtin = http.broker.groups.consumers.config().assignors.clone();
    Ok(Json(AssignorList { builtin, assignors, nodes_asked, nodes_unreachable }))
}

/// An uploaded assignor with what it has computed, node by node.
#[utoipa::path(get, path = "/v1/assignors/{name}", tag = "v1", params(("name" = String, Path), ViewQuery),
    responses((status = 200, body = AssignorDetail), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn describe(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<ViewQuery>,
) -> ApiResult<Json<AssignorDetail>> {
    let node_only = query.node_only()?;
    require(&http.broker, Operation::Describe, ResourceType::Assignor, &name)?;
    let image = http.broker.controller.image();
    let assignor = image.assignors.get(&name).ok_or_else(|| unknown(&name))?;
    let me = http.broker.settings.node_id;
    let mut nodes: Vec<AssignorNode> = local_node(&http, assignor).into_iter().collect();
    if node_only {
        return Ok(Json(detail(assignor, nodes, vec![me], Vec::new())));
    }
    let path = format!("/v1/assignors/{name}?scope=node");
    let (answers, nodes_asked, nodes_unreachable) = ask_others::<AssignorDetail>(&http, &path).await;
    for answer in answers.into_iter().filter_map(|(_, detail)| detail) {
        nodes.extend(answer.nodes);
    }
    Ok(Json(detail(assignor, nodes, nodes_asked, nodes_unreachable)))
}

/// Removes an assignor: groups that chose it get the default assignor from their next target
/// assignment (with the reason shown on the group), and new members that ask for it are
/// refused UNSUPPORTED_ASSIGNOR.
#[utoipa::path(delete, path = "/v1/assignors/{name}", tag = "v1", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(State(http): State<super::State>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    require(&http.broker, Operation::Delete, ResourceType::Assignor, &name)?;
    let record =
        audited(MetadataRecord::DeleteAssignor { name: name.clone() }, "delete", ResourceType::Assignor, &name, None);
    match http.broker.controller.propose(record).await {
        Ok(ApplyOutcome::Applied) => {
            http.broker.assignors.reconcile(&http.broker.controller.image()).await;
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(ApplyOutcome::UnknownAssignor) => Err(unknown(&name)),
        Ok(other) => Err(ApiError::internal(format!("unexpected outcome {other:?}"))),
        Err(e) => Err(ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string()))),
    }
}

/// Recent guest log lines and host events (loads, runs, failures) of an assignor on this node.
#[utoipa::path(get, path = "/v1/assignors/{name}/logs", tag = "v1", params(("name" = String, Path), LogsQuery),
    responses((status = 200, body = Logs), (status = 404, body = ErrorBody)))]
pub async fn logs(
    State(http): State<super::State>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> ApiResult<Json<Logs>> {
    require(&http.broker, Operation::Describe, ResourceType::Assignor, &name)?;
    if !http.broker.controller.image().assignors.contains_key(&name) {
        return Err(unknown(&name));
    }
    let running = http.broker.assignors.get(&name);
    Ok(Json(tail_logs(running.as_ref().map(|r| &*r.logs), &query)))
}
