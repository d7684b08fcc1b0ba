//! The one place where failures become HTTP statuses and JSON error bodies
//! `{"error_code": ..., "message": ...}` (Confluent REST Proxy's shape and codes: the HTTP status
//! times 100 plus a sub-code, e.g. 40401 unknown topic), and the request extractors that turn
//! malformed input into those errors instead of axum's plain-text rejections.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// HTTP status × 100 + a sub-code: 40001 malformed JSON, 40002 bad query or path parameter,
    /// 40401 unknown topic, 40402 unknown partition, 40403 unknown consumer instance, 40404
    /// unknown group, 40101 authentication required or failed, 40301 not authorized (the ACLs),
    /// 40302 a cookie-authenticated change without X-Runnel-UI, 40303 a cross-site request, 40405 no such route, 40411 unknown token, 40801 consumer request timed out, 40901 topic exists,
    /// 40902 consumer instance exists, 40903 group not empty, 40904 consumer not subscribed,
    /// 41301 body or record too large, 41501 unsupported content type, 42201 body does not match
    /// the schema, 42202 invalid value, 42901 too many tokens, 50001 broker error, 50303 too many password checks at once, 50301 retriable (no leader or
    /// coordinator yet), 50401 broker timeout.
    pub error_code: u32,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub error_code: u32,
    pub message: String,
    /// Seconds for a `Retry-After` header (a 429 or 503 that knows when to come back).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, error_code: u32, message: impl Into<String>) -> ApiError {
        ApiError { status, error_code, message: message.into(), retry_after: None }
    }
    pub fn with_retry_after(self, seconds: u64) -> ApiError {
        ApiError { retry_after: Some(seconds), ..self }
    }
    pub fn unknown_topic(topic: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40401, format!("topic '{topic}' not found"))
    }
    pub fn unknown_partition(topic: &str, partition: i64) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40402, format!("partition {partition} of topic '{topic}' not found"))
    }
    pub fn unknown_group(group: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40404, format!("consumer group '{group}' not found"))
    }
    pub fn unknown_cluster(cluster: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 40406, format!("cluster '{cluster}' not found"))
    }
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42202, message)
    }
    pub fn bad_parameter(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 40002, message)
    }
    /// The principal may not do this (the ACLs refuse it).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, 40301, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, 50001, message)
    }

    /// A Kafka error from a handler, with the topic/partition it concerns for the message.
    pub fn kafka(code: ResponseError, detail: Option<&str>) -> ApiError {
        use ResponseError as E;
        let (status, error_code) = match code {
            E::UnknownTopicOrPartition | E::UnknownTopicId => (StatusCode::NOT_FOUND, 40401),
            E::GroupIdNotFound => (StatusCode::NOT_FOUND, 40404),
            E::TopicAlreadyExists => (StatusCode::CONFLICT, 40901),
            E::NonEmptyGroup => (StatusCode::CONFLICT, 40903),
            E::MessageTooLarge | E::RecordListTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, 41301),
            E::InvalidTopicException
            | E::InvalidPartitions
            | E::InvalidReplicationFactor
            | E::InvalidReplicaAssignment
            | E::InvalidConfig
            | E::InvalidRequest
            | E::InvalidRecord
            | E::CorruptMessage
            | E::InvalidTimestamp
            | E::PolicyViolation
            | E::InvalidGroupId
            | E::OffsetOutOfRange => (StatusCode::UNPROCESSABLE_ENTITY, 42202),
            E::NotLeaderOrFollower
            | E::LeaderNotAvailable
            | E::CoordinatorNotAvailable
            | E::NotCoordinator
            | E::CoordinatorLoadInProgress
            | E::NotEnoughReplicas
            | E::NotEnoughReplicasAfterAppend
            | E::NotController
            | E::KafkaStorageError => (StatusCode::SERVICE_UNAVAILABLE, 50301),
            E::RequestTimedOut => (StatusCode::GATEWAY_TIMEOUT, 50401),
            E::TopicAuthorizationFailed
            | E::GroupAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::TransactionalIdAuthorizationFailed => (StatusCode::FORBIDDEN, 40301),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, 50001),
        };
        let name = format!("{code:?}");
        let message = match detail {
            Some(detail) if !detail.is_empty() => format!("{detail} ({name})"),
            _ => name,
        };
        ApiError::new(status, error_code, message)
    }

    /// A broker this node forwarded a request to (the partition's leader, the group's
    /// coordinator) could not be reached or gave no answer in time: retriable, as Kafka's
    /// NETWORK_EXCEPTION and REQUEST_TIMED_OUT are.
    pub fn peer(error: &crate::peer::PeerError) -> ApiError {
        match error {
            crate::peer::PeerError::Timeout { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, 50401, format!("forwarded request: {error}"))
            }
            _ => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, 50301, format!("forwarded request: {error}")),
        }
    }

    /// A Kafka error code as returned in a response field.
    pub fn kafka_code(code: i16, detail: Option<&str>) -> ApiError {
        match ResponseError::try_from_code(code) {
            Some(error) => ApiError::kafka(error, detail),
            None => ApiError::internal(format!("unknown Kafka error code {code}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, Json(ErrorBody { error_code: self.error_code, message: self.message })).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(seconds));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON request body: rejects with our JSON errors (413 too large, 415 not JSON, 400 not
/// parseable, 422 wrong shape) instead of axum's plain-text rejections.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_json_content_type(request.headers())?;
        let bytes = read_body(request, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Like [`JsonBody`], but an empty body is `None` (Confluent's "commit everything" forms).
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = request.headers().clone();
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(None));
        }
        check_json_content_type(&headers)?;
        parse_json(&bytes).map(|v| OptionalJsonBody(Some(v)))
    }
}

/// The raw body, bounded by the router's body limit (413 beyond it).
pub async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, 41301, "request body is larger than the limit (socket.request.max.bytes)")
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, 40001, format!("cannot read the request body: {rejection}"))
        }
    })
}

/// Accepts `application/json` and the `application/vnd.kafka.*+json` family; a missing
/// content type is taken as JSON (curl's `-d` sends a form type, which we refuse).
pub fn check_json_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let text = value.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence == "application/json" || (essence.starts_with("application/vnd.kafka.") && essence.ends_with("+json")) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            41501,
            format!("unsupported content type '{text}': send application/json"),
        ))
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(json_error)
}

pub fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42201, format!("invalid request body: {e}")),
        _ => ApiError::new(StatusCode::BAD_REQUEST, 40001, format!("malformed JSON: {e}")),
    }
}

/// Query parameters with a JSON 400 on a bad value.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded_from_str(query).map(Query)
    }
}

fn serde_urlencoded_from_str<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{query}").parse().map_err(|_| ApiError::bad_parameter("bad query string"))?,
    )
    .map(|q| q.0)
    .map_err(|e| ApiError::bad_parameter(format!("invalid query parameter: {}", e.body_text())))
}

/// Path parameters with a JSON 400 on a bad value (e.g. a partition id that is not a number).
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::bad_parameter(format!("invalid path parameter: {}", e.body_text())))
    }
}
