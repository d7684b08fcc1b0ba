//! Confluent REST Proxy v3 shapes (`kind`, `metadata.self`, `related` links): clusters,
//! topics, partitions, topic configs, records (single and streamed), consumer groups with lag.

use std::collections::BTreeMap;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::admin;
use super::auth::require;
use super::error::{read_body, ApiError, ApiResult, ErrorBody, JsonBody, Path};
use super::records::{self, decode_base64, json_bytes, NewRecord};
use crate::security::acl::{Operation, ResourceType};

#[derive(Serialize, ToSchema)]
pub struct Metadata {
    #[serde(rename = "self")]
    pub self_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ListMetadata {
    #[serde(rename = "self")]
    pub self_: String,
    pub next: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Related {
    pub related: String,
}

/// The scheme and host links are built on: the node's own scheme (HTTPS with `--http-tls`).
fn base_url(http: &super::Http, headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("{}://{host}", if http.tls { "https" } else { "http" })
}

fn check_cluster(http: &super::Http, cluster_id: &str) -> ApiResult<()> {
    if cluster_id == http.broker.settings.cluster_id {
        Ok(())
    } else {
        Err(ApiError::unknown_cluster(cluster_id))
    }
}

fn related(url: String) -> Related {
    Related { related: url }
}

#[derive(Serialize, ToSchema)]
pub struct KafkaCluster {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub controller: Option<Related>,
    pub brokers: Related,
    pub topics: Related,
    pub consumer_groups: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaClusterList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaCluster>,
}

fn cluster_of(http: &super::Http, base: &str) -> KafkaCluster {
    let id = &http.broker.settings.cluster_id;
    let url = format!("{base}/v3/clusters/{id}");
    KafkaCluster {
        kind: "KafkaCluster".into(),
        metadata: Metadata { self_: url.clone(), resource_name: Some(format!("crn:///kafka={id}")) },
        cluster_id: id.clone(),
        controller: http.broker.controller.leader_id().map(|c| related(format!("{url}/brokers/{c}"))),
        brokers: related(format!("{url}/brokers")),
        topics: related(format!("{url}/topics")),
        consumer_groups: related(format!("{url}/consumer-groups")),
    }
}

/// The cluster this node belongs to (a list of one).
#[utoipa::path(get, path = "/v3/clusters", tag = "v3", responses((status = 200, body = KafkaClusterList)))]
pub async fn list_clusters(State(http): State<super::State>, headers: HeaderMap) -> Json<KafkaClusterList> {
    let base = base_url(&http, &headers);
    Json(KafkaClusterList {
        kind: "KafkaClusterList".into(),
        metadata: ListMetadata { self_: format!("{base}/v3/clusters"), next: None },
        data: vec![cluster_of(&http, &base)],
    })
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}", tag = "v3", params(("cluster_id" = String, Path)),
    responses((status = 200, body = KafkaCluster), (status = 404, body = ErrorBody)))]
pub async fn get_cluster(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path(cluster_id): Path<String>,
) -> ApiResult<Json<KafkaCluster>> {
    check_cluster(&http, &cluster_id)?;
    Ok(Json(cluster_of(&http, &base_url(&http, &headers))))
}

#[derive(Serialize, ToSchema)]
pub struct KafkaTopic {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub is_internal: bool,
    pub replication_factor: usize,
    pub partitions_count: usize,
    pub partitions: Related,
    pub configs: Related,
    pub partition_reassignments: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaTopicList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaTopic>,
}

fn topic_of(http: &super::Http, base: &str, topic: &crate::controller::TopicImage) -> KafkaTopic {
    let cluster_id = &http.broker.settings.cluster_id;
    let url = format!("{base}/v3/clusters/{cluster_id}/topics/{}", topic.name);
    KafkaTopic {
        kind: "KafkaTopic".into(),
        metadata: Metadata {
            self_: url.clone(),
            resource_name: Some(format!("crn:///kafka={cluster_id}/topic={}", topic.name)),
        },
        cluster_id: cluster_id.clone(),
        topic_name: topic.name.clone(),
        is_internal: admin::is_internal(&topic.name),
        replication_factor: topic.partitions.first().map_or(0, |p| p.replicas.len()),
        partitions_count: topic.partitions.len(),
        partitions: related(format!("{url}/partitions")),
        configs: related(format!("{url}/configs")),
        partition_reassignments: related(format!("{url}/partitions/-/reassignment")),
    }
}

/// The topics the client may DESCRIBE, as Metadata lists them.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics", tag = "v3", params(("cluster_id" = String, Path)),
    responses((status = 200, body = KafkaTopicList), (status = 404, body = ErrorBody)))]
pub async fn list_topics(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path(cluster_id): Path<String>,
) -> ApiResult<Json<KafkaTopicList>> {
    check_cluster(&http, &cluster_id)?;
    let base = base_url(&http, &headers);
    let image = http.broker.controller.image();
    Ok(Json(KafkaTopicList {
        kind: "KafkaTopicList".into(),
        metadata: ListMetadata { self_: format!("{base}/v3/clusters/{cluster_id}/topics"), next: None },
        data: image
            .topics
            .values()
            .filter(|t| http.broker.authorized(Operation::Describe, ResourceType::Topic, &t.name))
            .map(|t| topic_of(&http, &base, t))
            .collect(),
    }))
}

#[derive(Deserialize, ToSchema)]
pub struct ConfigPair {
    pub name: String,
    pub value: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct CreateTopicRequest {
    pub topic_name: String,
    /// Default: the broker's `num.partitions`.
    pub partitions_count: Option<i32>,
    /// Default: the broker's `default.replication.factor`.
    pub replication_factor: Option<i16>,
    #[serde(default)]
    pub configs: Vec<ConfigPair>,
    /// Only validate.
    #[serde(default)]
    pub validate_only: bool,
}

#[utoipa::path(post, path = "/v3/clusters/{cluster_id}/topics", tag = "v3", params(("cluster_id" = String, Path)),
    request_body = CreateTopicRequest,
    responses((status = 201, body = KafkaTopic), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_topic(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path(cluster_id): Path<String>,
    JsonBody(request): JsonBody<CreateTopicRequest>,
) -> ApiResult<(StatusCode, Json<KafkaTopic>)> {
    check_cluster(&http, &cluster_id)?;
    let configs: BTreeMap<String, String> =
        request.configs.into_iter().filter_map(|c| c.value.map(|v| (c.name, v))).collect();
    let partitions = request.partitions_count.unwrap_or(-1);
    let replication_factor = request.replication_factor.unwrap_or(-1);
    if request.validate_only {
        admin::create_topic(&http, &request.topic_name, partitions, replication_factor, configs, true).await?;
        let placeholder = crate::controller::TopicImage {
            name: request.topic_name.clone(),
            topic_id: [0; 16],
            partitions: Vec::new(),
            configs: BTreeMap::new(),
        };
        return Ok((StatusCode::OK, Json(topic_of(&http, &base_url(&http, &headers), &placeholder))));
    }
    admin::create_topic(&http, &request.topic_name, partitions, replication_factor, configs, false).await?;
    let image = http.broker.controller.image();
    let topic = image.topics.get(&request.topic_name).ok_or_else(|| ApiError::unknown_topic(&request.topic_name))?;
    Ok((StatusCode::CREATED, Json(topic_of(&http, &base_url(&http, &headers), topic))))
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics/{topic_name}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)),
    responses((status = 200, body = KafkaTopic), (status = 404, body = ErrorBody)))]
pub async fn get_topic(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, topic_name)): Path<(String, String)>,
) -> ApiResult<Json<KafkaTopic>> {
    check_cluster(&http, &cluster_id)?;
    // Before the 404: a client that may not describe the topic does not learn it exists.
    require(&http.broker, Operation::Describe, ResourceType::Topic, &topic_name)?;
    let image = http.broker.controller.image();
    let topic = image.topics.get(&topic_name).ok_or_else(|| ApiError::unknown_topic(&topic_name))?;
    Ok(Json(topic_of(&http, &base_url(&http, &headers), topic)))
}

#[utoipa::path(delete, path = "/v3/clusters/{cluster_id}/topics/{topic_name}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete_topic(
    State(http): State<super::State>,
    Path((cluster_id, topic_name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    check_cluster(&http, &cluster_id)?;
    admin::delete_topic(&http, &topic_name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct KafkaPartition {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub partition_id: u32,
    pub leader: Option<Related>,
    pub replicas: Related,
    pub reassignment: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaPartitionList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaPartition>,
}

fn partition_of(http: &super::Http, base: &str, topic: &str, p: &crate::controller::PartitionImage) -> KafkaPartition {
    let cluster_id = &http.broker.settings.cluster_id;
    let url = format!("{base}/v3/clusters/{cluster_id}/topics/{topic}/partitions/{}", p.partition);
    KafkaPartition {
        kind: "KafkaPartition".into(),
        metadata: Metadata {
            self_: url.clone(),
            resource_name: Some(format!("crn:///kafka={cluster_id}/topic={topic}/partition={}", p.partition)),
        },
        cluster_id: cluster_id.clone(),
        topic_name: topic.to_string(),
        partition_id: p.partition,
        leader: p.leader.map(|l| related(format!("{url}/replicas/{l}"))),
        replicas: related(format!("{url}/replicas")),
        reassignment: related(format!("{url}/reassignment")),
    }
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)),
    responses((status = 200, body = KafkaPartitionList), (status = 404, body = ErrorBody)))]
pub async fn list_partitions(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, topic_name)): Path<(String, String)>,
) -> ApiResult<Json<KafkaPartitionList>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Topic, &topic_name)?;
    let base = base_url(&http, &headers);
    let image = http.broker.controller.image();
    let topic = image.topics.get(&topic_name).ok_or_else(|| ApiError::unknown_topic(&topic_name))?;
    Ok(Json(KafkaPartitionList {
        kind: "KafkaPartitionList".into(),
        metadata: ListMetadata {
            self_: format!("{base}/v3/clusters/{cluster_id}/topics/{topic_name}/partitions"),
            next: None,
        },
        data: topic.partitions.iter().map(|p| partition_of(&http, &base, &topic_name, p)).collect(),
    }))
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path), ("partition_id" = i32, Path)),
    responses((status = 200, body = KafkaPartition), (status = 404, body = ErrorBody)))]
pub async fn get_partition(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, topic_name, partition_id)): Path<(String, String, i32)>,
) -> ApiResult<Json<KafkaPartition>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Topic, &topic_name)?;
    let image = http.broker.controller.image();
    let topic = image.topics.get(&topic_name).ok_or_else(|| ApiError::unknown_topic(&topic_name))?;
    let partition = usize::try_from(partition_id)
        .ok()
        .and_then(|p| topic.partitions.get(p))
        .ok_or_else(|| ApiError::unknown_partition(&topic_name, partition_id as i64))?;
    Ok(Json(partition_of(&http, &base_url(&http, &headers), &topic_name, partition)))
}

#[derive(Serialize, ToSchema)]
pub struct KafkaTopicConfig {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub topic_name: String,
    pub name: String,
    pub value: Option<String>,
    pub is_default: bool,
    pub is_read_only: bool,
    pub is_sensitive: bool,
    /// DYNAMIC_TOPIC_CONFIG (set on the topic) or DEFAULT_CONFIG.
    pub source: String,
    pub synonyms: Vec<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaTopicConfigList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaTopicConfig>,
}

/// DescribeConfigs' rule, before the 404.
fn configs_of(http: &super::Http, base: &str, topic_name: &str) -> ApiResult<Vec<KafkaTopicConfig>> {
    require(&http.broker, Operation::DescribeConfigs, ResourceType::Topic, topic_name)?;
    let image = http.broker.controller.image();
    let topic = image.topics.get(topic_name).ok_or_else(|| ApiError::unknown_topic(topic_name))?;
    let cluster_id = &http.broker.settings.cluster_id;
    Ok(admin::topic_configs(&http.broker, topic)
        .into_iter()
        .map(|c| KafkaTopicConfig {
            kind: "KafkaTopicConfig".into(),
            metadata: Metadata {
                self_: format!("{base}/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{}", c.name),
                resource_name: None,
            },
            cluster_id: cluster_id.clone(),
            topic_name: topic_name.to_string(),
            name: c.name.to_string(),
            value: Some(c.value),
            is_default: !c.is_override,
            is_read_only: false,
            is_sensitive: false,
            source: if c.is_override { "DYNAMIC_TOPIC_CONFIG" } else { "DEFAULT_CONFIG" }.into(),
            synonyms: Vec::new(),
        })
        .collect())
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/configs", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)),
    responses((status = 200, body = KafkaTopicConfigList), (status = 404, body = ErrorBody)))]
pub async fn list_topic_configs(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, topic_name)): Path<(String, String)>,
) -> ApiResult<Json<KafkaTopicConfigList>> {
    check_cluster(&http, &cluster_id)?;
    let base = base_url(&http, &headers);
    Ok(Json(KafkaTopicConfigList {
        kind: "KafkaTopicConfigList".into(),
        metadata: ListMetadata {
            self_: format!("{base}/v3/clusters/{cluster_id}/topics/{topic_name}/configs"),
            next: None,
        },
        data: configs_of(&http, &base, &topic_name)?,
    }))
}

#[derive(Deserialize, ToSchema)]
pub struct AlterConfig {
    pub name: String,
    pub value: Option<String>,
    /// SET (default) or DELETE.
    pub operation: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct AlterConfigBatch {
    pub data: Vec<AlterConfig>,
}

/// Sets or deletes several configs at once (Confluent's `configs:alter`, as a PUT).
#[utoipa::path(put, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/configs", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)), request_body = AlterConfigBatch,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update_topic_configs(
    State(http): State<super::State>,
    Path((cluster_id, topic_name)): Path<(String, String)>,
    JsonBody(batch): JsonBody<AlterConfigBatch>,
) -> ApiResult<StatusCode> {
    check_cluster(&http, &cluster_id)?;
    let (mut set, mut delete) = (Vec::new(), Vec::new());
    for change in batch.data {
        match change.operation.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("SET") => match change.value {
                Some(value) => set.push((change.name, value)),
                None => return Err(ApiError::invalid(format!("config '{}': SET needs a value", change.name))),
            },
            Some("DELETE") => delete.push(change.name),
            Some(other) => return Err(ApiError::invalid(format!("unknown operation '{other}': SET or DELETE"))),
        }
    }
    admin::alter_topic_configs(&http, &topic_name, &set, &delete).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = KafkaTopicConfig), (status = 404, body = ErrorBody)))]
pub async fn get_topic_config(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, topic_name, name)): Path<(String, String, String)>,
) -> ApiResult<Json<KafkaTopicConfig>> {
    check_cluster(&http, &cluster_id)?;
    configs_of(&http, &base_url(&http, &headers), &topic_name)?
        .into_iter()
        .find(|c| c.name == name)
        .map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, 40407, format!("config '{name}' not found")))
}

#[derive(Deserialize, ToSchema)]
pub struct ConfigUpdate {
    pub value: String,
}

#[utoipa::path(put, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path), ("name" = String, Path)),
    request_body = ConfigUpdate,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_topic_config(
    State(http): State<super::State>,
    Path((cluster_id, topic_name, name)): Path<(String, String, String)>,
    JsonBody(update): JsonBody<ConfigUpdate>,
) -> ApiResult<StatusCode> {
    check_cluster(&http, &cluster_id)?;
    admin::alter_topic_configs(&http, &topic_name, &[(name, update.value)], &[]).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn reset_topic_config(
    State(http): State<super::State>,
    Path((cluster_id, topic_name, name)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    check_cluster(&http, &cluster_id)?;
    admin::alter_topic_configs(&http, &topic_name, &[], &[name]).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A key or value: `type` STRING (text), JSON (any JSON, stored as compact JSON text) or
/// BINARY (base64); JSON when `type` is absent. A null/absent `data` is a null key or value.
#[derive(Deserialize, ToSchema)]
pub struct RecordData {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[schema(value_type = Object)]
    pub data: Option<Value>,
}

#[derive(Deserialize, ToSchema)]
pub struct RecordHeader {
    pub name: String,
    /// base64.
    pub value: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct ProduceRecord {
    pub partition_id: Option<i32>,
    #[serde(default)]
    pub headers: Vec<RecordHeader>,
    pub key: Option<RecordData>,
    pub value: Option<RecordData>,
    /// RFC 3339 time; now when absent.
    pub timestamp: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct DataSize {
    #[serde(rename = "type")]
    pub type_: String,
    pub size: usize,
}

#[derive(Serialize, ToSchema)]
pub struct ProduceResult {
    pub error_code: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<DataSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<DataSize>,
}

fn record_data(field: &str, data: Option<RecordData>) -> ApiResult<(Option<bytes::Bytes>, Option<DataSize>)> {
    let Some(data) = data else { return Ok((None, None)) };
    let kind = data.type_.as_deref().unwrap_or("JSON").to_ascii_uppercase();
    let bytes = match (kind.as_str(), data.data) {
        (_, None) | (_, Some(Value::Null)) => None,
        ("JSON", Some(value)) => Some(json_bytes(&value)),
        ("STRING", Some(Value::String(s))) => Some(bytes::Bytes::from(s)),
        ("STRING", Some(_)) => return Err(ApiError::invalid(format!("{field}: STRING data must be a string"))),
        ("BINARY", Some(Value::String(s))) => Some(decode_base64(field, &s)?),
        ("BINARY", Some(_)) => return Err(ApiError::invalid(format!("{field}: BINARY data must be a base64 string"))),
        (other, _) => {
            return Err(ApiError::invalid(format!("{field}: unsupported type '{other}' (STRING, JSON or BINARY)")))
        }
    };
    let size = bytes.as_ref().map_or(0, |b| b.len());
    Ok((bytes, Some(DataSize { type_: kind, size })))
}

fn parse_timestamp(text: &str) -> ApiResult<i64> {
    parse_rfc3339_ms(text).ok_or_else(|| ApiError::invalid(format!("timestamp '{text}' is not an RFC 3339 time")))
}

/// Milliseconds since the epoch of an RFC 3339 UTC time (`2024-01-02T03:04:05.678Z` or with
/// a `+hh:mm` offset).
fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-');
    let (y, m, day): (i64, i64, i64) = (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    let (clock, offset_minutes) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else {
        let split = time.rfind(['+', '-'])?;
        let (c, off) = time.split_at(split);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        let (oh, om) = (hour(oh)?, minute(om)?);
        (c, sign * (oh * 60 + om))
    };
    let mut t = clock.splitn(3, ':');
    let (hh, mm) = (hour(t.next()?)?, minute(t.next()?)?);
    let seconds: f64 = t.next()?.parse().ok()?;
    if !(0..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&day) || !(0.0..61.0).contains(&seconds)
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 86_400 + hh * 3600 + mm * 60) as f64 + seconds) * 1000.0;
    Some(ms.round() as i64 - offset_minutes * 60_000)
}

/// An hour of a time or of an offset from UTC, 0 to 23.
fn hour(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|h| (0..=23).contains(h))
}

/// A minute, 0 to 59.
fn minute(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|m| (0..=59).contains(m))
}

/// RFC 3339 UTC text of milliseconds since the epoch.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Produces records. One JSON object → one result object. Several JSON objects one after the
/// other in the body (Confluent's streaming mode) → one result per line
/// (`application/x-ndjson`), each with its own `error_code`, in order.
#[utoipa::path(post, path = "/v3/clusters/{cluster_id}/topics/{topic_name}/records", tag = "v3",
    params(("cluster_id" = String, Path), ("topic_name" = String, Path)), request_body = ProduceRecord,
    responses((status = 200, body = ProduceResult), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn produce_records(
    State(http): State<super::State>,
    Path((cluster_id, topic_name)): Path<(String, String)>,
    request: Request,
) -> ApiResult<Response> {
    check_cluster(&http, &cluster_id)?;
    super::error::check_json_content_type(request.headers())?;
    let body = read_body(request, &()).await?;
    let mut parsed: Vec<ProduceRecord> = Vec::new();
    for value in serde_json::Deserializer::from_slice(&body).into_iter::<Value>() {
        if parsed.len() == records::MAX_RECORDS_PER_REQUEST {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                41301,
                format!("more than {} records in one request", records::MAX_RECORDS_PER_REQUEST),
            ));
        }
        let value = value.map_err(super::error::json_error)?;
        parsed.push(serde_json::from_value(value).map_err(super::error::json_error)?);
    }
    if parsed.is_empty() {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, 40001, "empty body: send a record object"));
    }
    // Produce's rule, before the 404 says whether the topic exists.
    require(&http.broker, Operation::Write, ResourceType::Topic, &topic_name)?;
    if !http.broker.controller.image().topics.contains_key(&topic_name) {
        return Err(ApiError::unknown_topic(&topic_name));
    }
    let streamed = parsed.len() > 1;
    // Per-record validation failures answer that record only (as Confluent's stream does).
    let mut sizes = Vec::with_capacity(parsed.len());
    let mut records = Vec::with_capacity(parsed.len());
    let mut invalid: Vec<Option<ApiError>> = Vec::with_capacity(parsed.len());
    for record in parsed {
        let converted = (|| -> ApiResult<(NewRecord, (Option<DataSize>, Option<DataSize>))> {
            let (key, key_size) = record_data("key", record.key)?;
            let (value, value_size) = record_data("value", record.value)?;
            let headers = record
                .headers
                .into_iter()
                .map(|h| Ok((h.name, h.value.map(|v| decode_base64("header value", &v)).transpose()?)))
                .collect::<ApiResult<Vec<_>>>()?;
            let timestamp = record.timestamp.as_deref().map(parse_timestamp).transpose()?;
            Ok((NewRecord { partition: record.partition_id, key, value, headers, timestamp }, (key_size, value_size)))
        })();
        match converted {
            Ok((record, size)) => {
                records.push(record);
                sizes.push(Some(size));
                invalid.push(None);
            }
            Err(e) => {
                sizes.push(None);
                invalid.push(Some(e));
            }
        }
    }
    let mut appended = records::append(&http, &topic_name, records).await?.into_iter();
    let results: Vec<ApiResult<ProduceResult>> = invalid
        .into_iter()
        .zip(sizes)
        .map(|(invalid, size)| {
            let appended = match invalid {
                Some(e) => Err(e),
                None => appended.next().unwrap_or_else(|| Err(ApiError::internal("record was not answered"))),
            }?;
            let (key, value) = size.unwrap_or((None, None));
            Ok(ProduceResult {
                error_code: 200,
                message: None,
                cluster_id: Some(cluster_id.clone()),
                topic_name: Some(topic_name.clone()),
                partition_id: Some(appended.partition),
                offset: Some(appended.offset),
                timestamp: Some(format_rfc3339_ms(appended.timestamp)),
                key,
                value,
            })
        })
        .collect();
    if !streamed {
        let result = results.into_iter().next().ok_or_else(|| ApiError::internal("no result"))??;
        return Ok(Json(result).into_response());
    }
    let mut text = String::new();
    for result in results {
        let result = result.unwrap_or_else(|e| ProduceResult {
            error_code: e.status.as_u16(),
            message: Some(e.message),
            cluster_id: None,
            topic_name: None,
            partition_id: None,
            offset: None,
            timestamp: None,
            key: None,
            value: None,
        });
        text.push_str(&serde_json::to_string(&result).unwrap_or_default());
        text.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response())
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerGroup {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub is_simple: bool,
    pub partition_assignor: String,
    /// STABLE, EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, DEAD.
    pub state: String,
    pub coordinator: Option<Related>,
    pub consumers: Related,
    pub lag_summary: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerGroupList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaConsumerGroup>,
}

fn state_name(state: &str) -> String {
    match state {
        "PreparingRebalance" => "PREPARING_REBALANCE".into(),
        "CompletingRebalance" => "COMPLETING_REBALANCE".into(),
        other => other.to_ascii_uppercase(),
    }
}

fn group_of(http: &super::Http, base: &str, g: &admin::GroupView) -> KafkaConsumerGroup {
    let cluster_id = &http.broker.settings.cluster_id;
    let url = format!("{base}/v3/clusters/{cluster_id}/consumer-groups/{}", g.group_id);
    KafkaConsumerGroup {
        kind: "KafkaConsumerGroup".into(),
        metadata: Metadata {
            self_: url.clone(),
            resource_name: Some(format!("crn:///kafka={cluster_id}/consumer-group={}", g.group_id)),
        },
        cluster_id: cluster_id.clone(),
        consumer_group_id: g.group_id.clone(),
        is_simple: g.protocol_type.is_empty(),
        partition_assignor: g.protocol.clone(),
        state: state_name(g.state),
        coordinator: g.coordinator.map(|c| related(format!("{base}/v3/clusters/{cluster_id}/brokers/{c}"))),
        consumers: related(format!("{url}/consumers")),
        lag_summary: related(format!("{url}/lag-summary")),
    }
}

/// ListGroups' rule: DESCRIBE on the cluster lists every group, else only the groups the client
/// may DESCRIBE.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups", tag = "v3", params(("cluster_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerGroupList), (status = 404, body = ErrorBody)))]
pub async fn list_groups(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path(cluster_id): Path<String>,
) -> ApiResult<Json<KafkaConsumerGroupList>> {
    check_cluster(&http, &cluster_id)?;
    let base = base_url(&http, &headers);
    let describable = admin::describable_groups(&http.broker);
    let mut views = std::collections::BTreeMap::new();
    for id in admin::group_ids(&http).await {
        if !describable(&id) {
            continue;
        }
        views.extend(admin::group_loaded(&http.broker, &id).map(|g| (g.group_id.clone(), g)));
    }
    // The groups the other nodes coordinate, as they know them (their view replaces this node's
    // copy of the offsets, as in /v1/groups).
    let (answers, _, _) = super::transforms::ask_others::<super::v1::GroupList>(&http, "/v1/groups?scope=node").await;
    for list in answers.into_iter().filter_map(|(_, list)| list) {
        for summary in list.groups.into_iter().filter(|s| describable(&s.group_id)) {
            views.insert(summary.group_id.clone(), admin::GroupView::from(summary));
        }
    }
    let data = views.values().map(|g| group_of(&http, &base, g)).collect::<Vec<_>>();
    Ok(Json(KafkaConsumerGroupList {
        kind: "KafkaConsumerGroupList".into(),
        metadata: ListMetadata { self_: format!("{base}/v3/clusters/{cluster_id}/consumer-groups"), next: None },
        data,
    }))
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerGroup), (status = 404, body = ErrorBody)))]
pub async fn get_group(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id)): Path<(String, String)>,
) -> ApiResult<Json<KafkaConsumerGroup>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    Ok(Json(group_of(&http, &base_url(&http, &headers), &g)))
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerLag {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub topic_name: String,
    pub partition_id: i32,
    pub current_offset: i64,
    pub log_end_offset: i64,
    pub lag: i64,
    pub consumer_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerLagList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaConsumerLag>,
}

/// Lag per partition the group has committed offsets for, of the topics the client may
/// DESCRIBE (DESCRIBE on the group first, as for the group itself).
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerLagList), (status = 404, body = ErrorBody)))]
pub async fn group_lags(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id)): Path<(String, String)>,
) -> ApiResult<Json<KafkaConsumerLagList>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let base = base_url(&http, &headers);
    let url = format!("{base}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/lags");
    let data = g.offsets.iter().map(|o| lag_of(&g, o, &url, &cluster_id, &group_id)).collect();
    Ok(Json(KafkaConsumerLagList {
        kind: "KafkaConsumerLagList".into(),
        metadata: ListMetadata { self_: url, next: None },
        data,
    }))
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerGroupLagSummary {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub max_lag_consumer_id: String,
    pub max_lag_instance_id: Option<String>,
    pub max_lag_client_id: String,
    pub max_lag_topic_name: String,
    pub max_lag_partition_id: i32,
    pub max_lag: i64,
    pub total_lag: i64,
}

#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerGroupLagSummary), (status = 404, body = ErrorBody)))]
pub async fn group_lag_summary(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id)): Path<(String, String)>,
) -> ApiResult<Json<KafkaConsumerGroupLagSummary>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let max = g.offsets.iter().max_by_key(|o| o.lag.unwrap_or(0));
    let member = max.and_then(|o| o.member).and_then(|i| g.members.get(i));
    Ok(Json(KafkaConsumerGroupLagSummary {
        kind: "KafkaConsumerGroupLagSummary".into(),
        metadata: Metadata {
            self_: format!(
                "{}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/lag-summary",
                base_url(&http, &headers)
            ),
            resource_name: None,
        },
        cluster_id: cluster_id.clone(),
        consumer_group_id: group_id.clone(),
        max_lag_consumer_id: member.map(|m| m.member_id.clone()).unwrap_or_default(),
        max_lag_instance_id: member.and_then(|m| m.group_instance_id.clone()),
        max_lag_client_id: member.map(|m| m.client_id.clone()).unwrap_or_default(),
        max_lag_topic_name: max.map(|o| o.topic.clone()).unwrap_or_default(),
        max_lag_partition_id: max.map_or(0, |o| o.partition),
        max_lag: max.and_then(|o| o.lag).unwrap_or(0),
        total_lag: g.total_lag(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        // Proves timestamps parse and format as RFC 3339 UTC, offsets included.
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("2024-02-29T12:34:56.789Z"), Some(1_709_210_096_789));
        assert_eq!(parse_rfc3339_ms("2024-02-29T14:34:56.789+02:00"), Some(1_709_210_096_789));
        assert_eq!(format_rfc3339_ms(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert_eq!(parse_rfc3339_ms("2024-13-01T00:00:00Z"), None);
    }

    #[test]
    fn out_of_range_clock_fields_are_refused_not_overflowed() {
        // Regression: hours, minutes and UTC offsets were bounded above only, so a negative or
        // huge one overflowed the arithmetic (a panic in a debug build) instead of a 400.
        for text in [
            "2024-01-01T00:00:00+99999999999999:00",
            "2024-01-01T00:00:00+00:9223372036854775807",
            "2024-01-01T-9223372036854775808:00:00Z",
            "2024-01-01T00:-1:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00+24:00",
        ] {
            assert_eq!(parse_rfc3339_ms(text), None, "{text}");
        }
        // 23:59 at UTC-23:59 is 23:58 the next day in UTC.
        assert_eq!(parse_rfc3339_ms("2024-01-01T23:59:00-23:59"), Some(1_704_239_880_000));
    }
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumer {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub consumer_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub assignments: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaConsumer>,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerAssignment {
    pub kind: String,
    pub metadata: Metadata,
    pub cluster_id: String,
    pub consumer_group_id: String,
    pub consumer_id: String,
    pub topic_name: String,
    pub partition_id: i32,
    pub partition: Related,
    pub lag: Related,
}

#[derive(Serialize, ToSchema)]
pub struct KafkaConsumerAssignmentList {
    pub kind: String,
    pub metadata: ListMetadata,
    pub data: Vec<KafkaConsumerAssignment>,
}

fn consumer_of(base: &str, cluster_id: &str, group_id: &str, member: &admin::Member) -> KafkaConsumer {
    let url = format!("{base}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/consumers/{}", member.member_id);
    KafkaConsumer {
        kind: "KafkaConsumer".into(),
        metadata: Metadata {
            self_: url.clone(),
            resource_name: Some(format!(
                "crn:///kafka={cluster_id}/consumer-group={group_id}/consumer={}",
                member.member_id
            )),
        },
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group_id.to_string(),
        consumer_id: member.member_id.clone(),
        instance_id: member.group_instance_id.clone(),
        client_id: member.client_id.clone(),
        assignments: related(format!("{url}/assignments")),
    }
}

/// The group's members, as its coordinator knows them.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerList), (status = 404, body = ErrorBody)))]
pub async fn list_consumers(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id)): Path<(String, String)>,
) -> ApiResult<Json<KafkaConsumerList>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let base = base_url(&http, &headers);
    Ok(Json(KafkaConsumerList {
        kind: "KafkaConsumerList".into(),
        metadata: ListMetadata {
            self_: format!("{base}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/consumers"),
            next: None,
        },
        data: g.members.iter().map(|m| consumer_of(&base, &cluster_id, &group_id, m)).collect(),
    }))
}

/// One member of the group, or 404.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path), ("consumer_id" = String, Path)),
    responses((status = 200, body = KafkaConsumer), (status = 404, body = ErrorBody)))]
pub async fn get_consumer(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id, consumer_id)): Path<(String, String, String)>,
) -> ApiResult<Json<KafkaConsumer>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let member = g.members.iter().find(|m| m.member_id == consumer_id).ok_or_else(|| unknown_consumer(&consumer_id))?;
    Ok(Json(consumer_of(&base_url(&http, &headers), &cluster_id, &group_id, member)))
}

/// The partitions assigned to one member (of the topics the client may describe), or 404.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path), ("consumer_id" = String, Path)),
    responses((status = 200, body = KafkaConsumerAssignmentList), (status = 404, body = ErrorBody)))]
pub async fn list_consumer_assignments(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id, consumer_id)): Path<(String, String, String)>,
) -> ApiResult<Json<KafkaConsumerAssignmentList>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let member = g.members.iter().find(|m| m.member_id == consumer_id).ok_or_else(|| unknown_consumer(&consumer_id))?;
    let base = base_url(&http, &headers);
    let url = format!("{base}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/consumers/{consumer_id}/assignments");
    let mut describable = admin::describable_topics(&http.broker);
    let data = member
        .assignment
        .iter()
        .filter(|(topic, _)| describable(topic))
        .flat_map(|(topic, partitions)| partitions.iter().map(move |&p| (topic, p)))
        .map(|(topic, partition)| KafkaConsumerAssignment {
            kind: "KafkaConsumerAssignment".into(),
            metadata: Metadata { self_: format!("{url}/{topic}/partitions/{partition}"), resource_name: None },
            cluster_id: cluster_id.clone(),
            consumer_group_id: group_id.clone(),
            consumer_id: consumer_id.clone(),
            topic_name: topic.clone(),
            partition_id: partition,
            partition: related(format!("{base}/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}")),
            lag: related(format!(
                "{base}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/lags/{topic}/partitions/{partition}"
            )),
        })
        .collect();
    Ok(Json(KafkaConsumerAssignmentList {
        kind: "KafkaConsumerAssignmentList".into(),
        metadata: ListMetadata { self_: url, next: None },
        data,
    }))
}

fn unknown_consumer(consumer_id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 40403, format!("consumer '{consumer_id}' is not a member of the group"))
}

/// One partition's lag of `g`; `url` is the group's `/lags`.
fn lag_of(g: &admin::GroupView, o: &admin::LagRow, url: &str, cluster_id: &str, group_id: &str) -> KafkaConsumerLag {
    let member = o.member.and_then(|i| g.members.get(i));
    KafkaConsumerLag {
        kind: "KafkaConsumerLag".into(),
        metadata: Metadata { self_: format!("{url}/{}/partitions/{}", o.topic, o.partition), resource_name: None },
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group_id.to_string(),
        topic_name: o.topic.clone(),
        partition_id: o.partition,
        current_offset: o.committed_offset,
        log_end_offset: o.log_end_offset.unwrap_or(-1),
        lag: o.lag.unwrap_or(0),
        consumer_id: member.map(|m| m.member_id.clone()).unwrap_or_default(),
        instance_id: member.and_then(|m| m.group_instance_id.clone()),
        client_id: member.map(|m| m.client_id.clone()).unwrap_or_default(),
    }
}

/// One partition's lag (of a topic the client may describe), or 404.
#[utoipa::path(get, path = "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}", tag = "v3",
    params(("cluster_id" = String, Path), ("consumer_group_id" = String, Path), ("topic_name" = String, Path), ("partition_id" = i32, Path)),
    responses((status = 200, body = KafkaConsumerLag), (status = 404, body = ErrorBody)))]
pub async fn get_group_lag(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((cluster_id, group_id, topic, partition)): Path<(String, String, String, i32)>,
) -> ApiResult<Json<KafkaConsumerLag>> {
    check_cluster(&http, &cluster_id)?;
    require(&http.broker, Operation::Describe, ResourceType::Group, &group_id)?;
    let g = admin::group_anywhere(&http, &group_id).await?;
    let url = format!("{}/v3/clusters/{cluster_id}/consumer-groups/{group_id}/lags", base_url(&http, &headers));
    let row = g
        .offsets
        .iter()
        .find(|o| o.topic == topic && o.partition == partition)
        .ok_or_else(|| ApiError::unknown_partition(&topic, i64::from(partition)))?;
    Ok(Json(lag_of(&g, row, &url, &cluster_id, &group_id)))
}
