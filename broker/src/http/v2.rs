//! Confluent REST Proxy v2: produce (`POST /topics/{topic}` with the embedded `json` or
//! `binary` format named by the content type) and consumer instances (create, subscribe or
//! assign, poll records, commit and fetch offsets, seek, delete).

use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::consumer::{self, Format, OffsetReset};
use super::error::{parse_json, read_body, ApiError, ApiResult, ErrorBody, JsonBody, OptionalJsonBody, Path, Query};
use super::records::{self, decode_base64, json_bytes, NewRecord, BASE64};
use crate::security::acl::{Operation, ResourceType};
use base64::Engine;

const V2_JSON: &str = "application/vnd.kafka.v2+json";

fn v2<T: Serialize>(status: StatusCode, body: &T) -> Response {
    (status, [(header::CONTENT_TYPE, V2_JSON)], Json(body)).into_response()
}

/// The embedded format a v2 content type names: `application/vnd.kafka.{json,binary}.v2+json`
/// (plain `application/json` is taken as json).
fn embedded_format(headers: &HeaderMap) -> ApiResult<Format> {
    let text = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/vnd.kafka.json.v2+json" | "application/json" | "application/vnd.kafka.v2+json" => Ok(Format::Json),
        "application/vnd.kafka.binary.v2+json" => Ok(Format::Binary),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            41501,
            format!(
                "unsupported content type '{text}': use application/vnd.kafka.json.v2+json or \
                 application/vnd.kafka.binary.v2+json"
            ),
        )),
    }
}

#[derive(Deserialize, ToSchema)]
pub struct V2Record {
    /// json format: any JSON; binary: base64.
    #[schema(value_type = Object)]
    pub key: Option<Value>,
    #[schema(value_type = Object)]
    pub value: Option<Value>,
    pub partition: Option<i32>,
}

#[derive(Deserialize, ToSchema)]
pub struct V2ProduceRequest {
    #[serde(deserialize_with = "super::records::bounded_records")]
    pub records: Vec<V2Record>,
}

#[derive(Serialize, ToSchema)]
pub struct V2Offset {
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub error_code: Option<u32>,
    pub error: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct V2ProduceResponse {
    pub key_schema_id: Option<i32>,
    pub value_schema_id: Option<i32>,
    pub offsets: Vec<V2Offset>,
}

fn payload(format: Format, field: &str, value: Option<Value>) -> ApiResult<Option<bytes::Bytes>> {
    match (format, value) {
        (_, None) | (_, Some(Value::Null)) => Ok(None),
        (Format::Json, Some(value)) => Ok(Some(json_bytes(&value))),
        (Format::Binary, Some(Value::String(text))) => decode_base64(field, &text).map(Some),
        (Format::Binary, Some(_)) => {
            Err(ApiError::invalid(format!("{field} must be a base64 string in binary format")))
        }
    }
}

/// Produces a batch of records (acks=all). Keyed records go to murmur2(key) like the Java
/// client's; keyless ones of one request to one partition.
#[utoipa::path(post, path = "/topics/{topic}", tag = "v2", params(("topic" = String, Path)),
    request_body(content = V2ProduceRequest, content_type = "application/vnd.kafka.json.v2+json"),
    responses((status = 200, body = V2ProduceResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn produce(
    State(http): State<super::State>,
    Path(topic): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let format = embedded_format(request.headers())?;
    let body = read_body(request, &()).await?;
    let produce: V2ProduceRequest = parse_json(&body)?;
    let records = produce
        .records
        .into_iter()
        .map(|r| {
            Ok(NewRecord {
                partition: r.partition,
                key: payload(format, "key", r.key)?,
                value: payload(format, "value", r.value)?,
                ..NewRecord::default()
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    if records.is_empty() {
        return Err(ApiError::invalid("records is empty"));
    }
    let results = records::append(&http, &topic, records).await?;
    let offsets = results
        .into_iter()
        .map(|r| match r {
            Ok(a) => V2Offset { partition: Some(a.partition), offset: Some(a.offset), error_code: None, error: None },
            Err(e) => {
                V2Offset { partition: None, offset: None, error_code: Some(e.error_code), error: Some(e.message) }
            }
        })
        .collect();
    Ok(v2(StatusCode::OK, &V2ProduceResponse { key_schema_id: None, value_schema_id: None, offsets }))
}

#[derive(Deserialize, ToSchema)]
pub struct CreateConsumer {
    /// Instance name; generated when absent.
    pub name: Option<String>,
    /// "json" (default) or "binary".
    pub format: Option<String>,
    /// "earliest", "latest" (default) or "none".
    #[serde(rename = "auto.offset.reset")]
    pub auto_offset_reset: Option<String>,
    /// "true" (default) or "false".
    #[serde(rename = "auto.commit.enable")]
    #[schema(value_type = Option<String>)]
    pub auto_commit_enable: Option<Value>,
    /// Idle time after which the instance is deleted (default 300000, at most 3600000).
    #[serde(rename = "consumer.instance.timeout.ms")]
    #[schema(value_type = Option<String>)]
    pub instance_timeout_ms: Option<Value>,
    /// How long a records request waits when there is nothing to return (default 1000).
    #[serde(rename = "consumer.request.timeout.ms")]
    #[schema(value_type = Option<String>)]
    pub request_timeout_ms: Option<Value>,
    /// "classic" (default: JoinGroup/SyncGroup, the instance assigns as leader) or "consumer"
    /// (KIP-848: the coordinator assigns, with `group.remote.assignor`).
    #[serde(rename = "group.protocol")]
    pub group_protocol: Option<String>,
    /// The server-side assignor (`uniform`, `range` or an uploaded one) of a "consumer"
    /// protocol instance; the group's default when absent.
    #[serde(rename = "group.remote.assignor")]
    pub group_remote_assignor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct CreatedConsumer {
    pub instance_id: String,
    pub base_uri: String,
}

fn number(field: &str, value: Option<Value>, default: u64) -> ApiResult<u64> {
    match value {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => {
            n.as_u64().ok_or_else(|| ApiError::invalid(format!("{field} must be a non-negative integer")))
        }
        Some(Value::String(s)) => {
            s.parse().map_err(|_| ApiError::invalid(format!("{field} must be a non-negative integer")))
        }
        Some(_) => Err(ApiError::invalid(format!("{field} must be a non-negative integer"))),
    }
}

fn boolean(field: &str, value: Option<Value>, default: bool) -> ApiResult<bool> {
    match value {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(_) => Err(ApiError::invalid(format!("{field} must be true or false"))),
    }
}

/// Creates a consumer instance in a group.
#[utoipa::path(post, path = "/consumers/{group}", tag = "v2", params(("group" = String, Path)),
    request_body(content = CreateConsumer, content_type = "application/vnd.kafka.v2+json"),
    responses((status = 200, body = CreatedConsumer), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 503, description = "The node's or the principal's consumer instances are at their bound", body = ErrorBody)))]
pub async fn create_consumer(
    State(http): State<super::State>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Path(group): Path<String>,
    JsonBody(request): JsonBody<CreateConsumer>,
) -> ApiResult<Response> {
    let format = match request.format.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("json") => Format::Json,
        Some("binary") => Format::Binary,
        Some(other) => return Err(ApiError::invalid(format!("format '{other}' is not supported (json or binary)"))),
    };
    let offset_reset = match request.auto_offset_reset.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("latest") => OffsetReset::Latest,
        Some("earliest" | "smallest") => OffsetReset::Earliest,
        Some("none") => OffsetReset::None,
        Some(other) => return Err(ApiError::invalid(format!("auto.offset.reset '{other}': earliest, latest or none"))),
    };
    let name = match request.name {
        Some(name) if name.is_empty() || name.len() > 255 || name.contains('/') => {
            return Err(ApiError::invalid("name must be 1..=255 characters without '/'"))
        }
        Some(name) => name,
        None => format!("rest-consumer-{}", uuid::Uuid::new_v4()),
    };
    let protocol = match request.group_protocol.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("classic") => {
            if request.group_remote_assignor.is_some() {
                return Err(ApiError::invalid("group.remote.assignor needs group.protocol consumer"));
            }
            consumer::GroupProtocol::Classic
        }
        Some("consumer") => match request.group_remote_assignor {
            Some(name) if name.is_empty() => return Err(ApiError::invalid("group.remote.assignor is empty")),
            remote_assignor => consumer::GroupProtocol::Consumer { remote_assignor },
        },
        Some(other) => return Err(ApiError::invalid(format!("group.protocol '{other}': classic or consumer"))),
    };
    let settings = consumer::Settings {
        protocol,
        format,
        offset_reset,
        auto_commit: boolean("auto.commit.enable", request.auto_commit_enable, true)?,
        instance_timeout: Duration::from_millis(
            match number(
                "consumer.instance.timeout.ms",
                request.instance_timeout_ms,
                consumer::INSTANCE_TIMEOUT_MS_DEFAULT,
            )? {
                ms if ms > consumer::INSTANCE_TIMEOUT_MS_MAX => {
                    return Err(ApiError::invalid(format!(
                        "consumer.instance.timeout.ms {ms} is above the maximum {}",
                        consumer::INSTANCE_TIMEOUT_MS_MAX
                    )))
                }
                ms => ms,
            },
        ),
        request_timeout_ms: number(
            "consumer.request.timeout.ms",
            request.request_timeout_ms,
            consumer::REQUEST_TIMEOUT_MS_DEFAULT,
        )?
        .min(super::LONG_POLL_MAX_MS),
        client: crate::server::current_client().unwrap_or(crate::server::ClientContext {
            peer,
            listener: None,
            principal: crate::security::Principal::anonymous(),
        }),
    };
    // JoinGroup's check (READ on the group), before the instance exists.
    super::auth::require(&http.broker, Operation::Read, ResourceType::Group, &group)?;
    consumer::create(&http, &group, &name, settings)?;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    Ok(v2(
        StatusCode::OK,
        &CreatedConsumer {
            base_uri: format!(
                "{}://{host}/consumers/{group}/instances/{name}",
                if http.tls { "https" } else { "http" }
            ),
            instance_id: name,
        },
    ))
}

/// Deletes a consumer instance (it commits, with auto commit, and leaves the group).
#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete_consumer(
    State(http): State<super::State>,
    Path((group, instance)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    consumer::delete(&http, &group, &instance).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Serialize, ToSchema)]
pub struct Subscription {
    pub topics: Vec<String>,
}

/// Subscribes to topics: the instance joins its group and gets partitions assigned.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = Subscription,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn subscribe(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    JsonBody(subscription): JsonBody<Subscription>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    consumer::subscribe(&http, &instance, subscription.topics).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses((status = 200, body = Subscription), (status = 404, body = ErrorBody)))]
pub async fn subscription(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let instance = consumer::get(&http, &group, &name)?;
    Ok(v2(StatusCode::OK, &Subscription { topics: instance.subscription() }))
}

#[utoipa::path(delete, path = "/consumers/{group}/instances/{instance}/subscription", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn unsubscribe(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    consumer::unsubscribe(&http, &instance).await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Serialize, ToSchema, Clone)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

#[derive(Deserialize, Serialize, ToSchema)]
pub struct PartitionList {
    pub partitions: Vec<PartitionRef>,
}

/// Assigns partitions by hand (no group membership).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/assignments", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = PartitionList,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn assign(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    JsonBody(list): JsonBody<PartitionList>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    consumer::assign(&http, &instance, list.partitions.into_iter().map(|p| (p.topic, p.partition)).collect()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The partitions currently assigned to the instance.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/assignments", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses((status = 200, body = PartitionList), (status = 404, body = ErrorBody)))]
pub async fn assignments(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let instance = consumer::get(&http, &group, &name)?;
    let partitions =
        instance.assignment().into_iter().map(|(topic, partition)| PartitionRef { topic, partition }).collect();
    Ok(v2(StatusCode::OK, &PartitionList { partitions }))
}

#[derive(Deserialize, IntoParams)]
pub struct PollQuery {
    /// Wait up to this many ms for records (default: the instance's consumer.request.timeout.ms; at most 30000).
    pub timeout: Option<u64>,
    /// Upper bound on the key and value bytes returned (default and ceiling 64 MiB).
    pub max_bytes: Option<usize>,
}

#[derive(Serialize, ToSchema)]
pub struct V2ConsumedRecord {
    pub topic: String,
    #[schema(value_type = Object)]
    pub key: Value,
    #[schema(value_type = Object)]
    pub value: Value,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
}

fn embed(format: Format, bytes: Option<bytes::Bytes>) -> Value {
    match (format, bytes) {
        (_, None) => Value::Null,
        (Format::Binary, Some(b)) => Value::String(BASE64.encode(&b)),
        // Values that are not JSON (written by another client) come back as JSON strings
        // when they are text, base64 otherwise, rather than failing the whole poll.
        (Format::Json, Some(b)) => serde_json::from_slice(&b).unwrap_or_else(|_| match std::str::from_utf8(&b) {
            Ok(text) => Value::String(text.to_string()),
            Err(_) => Value::String(BASE64.encode(&b)),
        }),
    }
}

/// Returns records from the instance's partitions, long-polling up to `timeout` ms.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/records", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path), PollQuery),
    responses((status = 200, body = Vec<V2ConsumedRecord>), (status = 404, body = ErrorBody),
        (status = 406, body = ErrorBody), (status = 409, description = "not subscribed", body = ErrorBody)))]
pub async fn poll_records(
    State(http): State<super::State>,
    headers: HeaderMap,
    Path((group, name)): Path<(String, String)>,
    Query(query): Query<PollQuery>,
) -> ApiResult<Response> {
    let instance = consumer::get(&http, &group, &name)?;
    let format = instance.settings.format;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    // The embedded formats the Accept header names (`application/vnd.kafka.<format>.v2+json`):
    // if it names any, one must be the instance's (Confluent: 406 for avro, protobuf,
    // jsonschema or the other one of json/binary).
    let named: Vec<&str> = accept
        .split(',')
        .filter_map(|part| part.split(';').next())
        .filter_map(|media| media.trim().strip_prefix("application/vnd.kafka.")?.strip_suffix(".v2+json"))
        .collect();
    let own = match format {
        Format::Json => "json",
        Format::Binary => "binary",
    };
    let wrong = !named.is_empty() && !named.contains(&own);
    if wrong {
        return Err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            40601,
            "the Accept header names another format than the consumer instance was created with",
        ));
    }
    let timeout = query.timeout.unwrap_or(instance.settings.request_timeout_ms);
    let max_bytes = query.max_bytes.unwrap_or(consumer::POLL_MAX_BYTES).clamp(1, consumer::POLL_MAX_BYTES);
    let polled = consumer::poll(&http, &instance, timeout, max_bytes).await?;
    let records: Vec<V2ConsumedRecord> = polled
        .into_iter()
        .map(|p| V2ConsumedRecord {
            topic: p.topic,
            key: embed(format, p.record.key),
            value: embed(format, p.record.value),
            partition: p.record.partition,
            offset: p.record.offset,
            timestamp: p.record.timestamp,
        })
        .collect();
    let content_type = match format {
        Format::Json => "application/vnd.kafka.json.v2+json",
        Format::Binary => "application/vnd.kafka.binary.v2+json",
    };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], Json(records)).into_response())
}

#[derive(Deserialize, Serialize, ToSchema)]
pub struct OffsetRef {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

#[derive(Deserialize, Serialize, ToSchema)]
pub struct OffsetList {
    pub offsets: Vec<OffsetRef>,
}

/// Commits offsets. With a body, each `offset` is the last record processed (the committed
/// offset is `offset + 1`, as Confluent's proxy does); with an empty body, everything this
/// instance returned is committed.
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = OffsetList,
    responses((status = 200), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn commit_offsets(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    OptionalJsonBody(list): OptionalJsonBody<OffsetList>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    match list {
        None => consumer::commit_consumed(&http, &instance).await?,
        Some(list) => {
            let offsets = list
                .offsets
                .into_iter()
                .map(|o| {
                    let next = o
                        .offset
                        .checked_add(1)
                        .filter(|_| o.offset >= 0)
                        .ok_or_else(|| ApiError::invalid("offset must be between 0 and 2^63 - 2"))?;
                    Ok(((o.topic, o.partition), next, o.metadata.unwrap_or_default()))
                })
                .collect::<ApiResult<Vec<_>>>()?;
            consumer::commit(&http, &instance, offsets).await?;
        }
    }
    Ok(StatusCode::OK)
}

/// The group's committed offsets for the given partitions (a GET with a body, as Confluent's);
/// without a body, for the instance's assigned partitions.
#[utoipa::path(get, path = "/consumers/{group}/instances/{instance}/offsets", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)),
    responses((status = 200, body = OffsetList), (status = 404, body = ErrorBody)))]
pub async fn committed_offsets(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    OptionalJsonBody(list): OptionalJsonBody<PartitionList>,
) -> ApiResult<Response> {
    let instance = consumer::get(&http, &group, &name)?;
    let partitions: Vec<(String, i32)> = match list {
        Some(list) => list.partitions.into_iter().map(|p| (p.topic, p.partition)).collect(),
        None => instance.assignment(),
    };
    let committed = consumer::fetch_committed(&http, &group, &partitions).await?;
    let offsets = partitions
        .into_iter()
        .filter_map(|tp| {
            committed.get(&tp).filter(|(o, _)| *o >= 0).map(|(offset, metadata)| OffsetRef {
                topic: tp.0.clone(),
                partition: tp.1,
                offset: *offset,
                metadata: Some(metadata.clone()),
            })
        })
        .collect();
    Ok(v2(StatusCode::OK, &OffsetList { offsets }))
}

/// Moves the positions of assigned partitions to the given offsets (the next record read).
#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = OffsetList,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn seek(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    JsonBody(list): JsonBody<OffsetList>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    consumer::seek(&instance, list.offsets.into_iter().map(|o| ((o.topic, o.partition), o.offset)).collect())?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/beginning", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = PartitionList,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn seek_to_beginning(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    JsonBody(list): JsonBody<PartitionList>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    let partitions = list.partitions.into_iter().map(|p| (p.topic, p.partition)).collect();
    consumer::seek_to(&http, &instance, partitions, OffsetReset::Earliest).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/consumers/{group}/instances/{instance}/positions/end", tag = "v2",
    params(("group" = String, Path), ("instance" = String, Path)), request_body = PartitionList,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn seek_to_end(
    State(http): State<super::State>,
    Path((group, name)): Path<(String, String)>,
    JsonBody(list): JsonBody<PartitionList>,
) -> ApiResult<StatusCode> {
    let instance = consumer::get(&http, &group, &name)?;
    let partitions = list.partitions.into_iter().map(|p| (p.topic, p.partition)).collect();
    consumer::seek_to(&http, &instance, partitions, OffsetReset::Latest).await?;
    Ok(StatusCode::NO_CONTENT)
}
