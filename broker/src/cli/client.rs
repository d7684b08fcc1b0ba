//! The HTTP client every subcommand goes through: builds URLs under `--url`, sends requests and
//! turns every failure into an [`ApiError`] whose text is what the user sees after `error: `.
//!
//! Invariant: no subcommand calls reqwest directly, so "node unreachable" (exit code 3) and the
//! API's `{"error_code","message"}` body are recognised in one place.

use std::time::Duration;

use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Requests that do not long-poll get this long: an admin call slower than this means the node
/// is stuck, and a CLI that hangs forever is worse than one that says so.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Connecting is separate from the request timeout: a closed port fails at once, but a
/// blackholed address would otherwise wait for the whole request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Content type of the Confluent v2 consumer and produce APIs' JSON bodies.
pub const V2_JSON: &str = "application/vnd.kafka.v2+json";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Nothing listens at `--url` (or the connection could not be set up).
    #[error("cannot reach runnel at {url}: is it running?")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The API answered with its error body.
    #[error("{message} ({error_code})")]
    Api { status: u16, error_code: i64, message: String },
    /// A non-2xx answer without the API's error body (a proxy, or a route the node lacks).
    #[error("{method} {path}: HTTP {status}: {body}")]
    Unexpected { method: Method, path: String, status: u16, body: String },
    /// The connection broke or timed out after it was established.
    #[error("{method} {path} failed")]
    Transport {
        method: Method,
        path: String,
        #[source]
        source: reqwest::Error,
    },
    /// A 2xx answer whose body is not the JSON the contract describes.
    #[error("{method} {path}: unexpected response body")]
    Decode {
        method: Method,
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ApiError {
    /// The API's Confluent-style error code, if the node answered with one.
    pub fn error_code(&self) -> Option<i64> {
        match self {
            ApiError::Api { error_code, .. } => Some(*error_code),
            _ => None,
        }
    }
}

/// The API's error body.
#[derive(Deserialize)]
struct ErrorBody {
    error_code: i64,
    message: String,
}

/// A request body and its content type.
pub enum Body {
    None,
    Json(serde_json::Value),
    Bytes { content_type: &'static str, bytes: Vec<u8> },
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
}

impl Client {
    /// A client of the node at `conn.url`, authenticating with `--user`/`--password` (HTTP
    /// Basic) or `--token` (bearer), trusting `--ca-cert` for HTTPS.
    pub fn new(conn: &super::Connection) -> anyhow::Result<Client> {
        let url = &conn.url;
        let base = Url::parse(url).map_err(|e| anyhow::anyhow!("invalid --url '{url}': {e}"))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("invalid --url '{url}': expected http://host:port or https://host:port");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        let authorization = match (&conn.token, &conn.user, &conn.password) {
            (Some(token), _, _) => Some(format!("Bearer {token}")),
            (None, Some(user), password) => {
                use base64::Engine;
                let pair = format!("{user}:{}", password.as_deref().unwrap_or_default());
                Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
            }
            (None, None, Some(_)) => anyhow::bail!("--password without --user"),
            (None, None, None) => None,
        };
        if let Some(value) = authorization {
            let mut value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| anyhow::anyhow!("--user, --password or --token holds characters a header cannot"))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .user_agent(concat!("runnel-cli/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers);
        if let Some(path) = &conn.ca_cert {
            let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("--ca-cert {}: {e}", path.display()))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| anyhow::anyhow!("--ca-cert {}: {e}", path.display()))?;
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {e}"))?;
        Ok(Client { http, base })
    }

    /// `--url` followed by `segments`, each percent-encoded: group ids may hold any character.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    pub async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T, ApiError> {
        self.call(Method::GET, url, Body::None, REQUEST_TIMEOUT).await
    }

    /// Sends a request and decodes the JSON answer as `T` (`serde_json::Value` keeps it raw,
    /// `()` is not JSON: use [`Client::send`] for 204 answers).
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Body,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        self.call_with_status(method, url, body, timeout).await.map(|(_, value)| value)
    }

    /// [`Client::call`] that also returns the success status, for endpoints whose 2xx code
    /// carries meaning (201 created vs 200 replaced).
    pub async fn call_with_status<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Body,
        timeout: Duration,
    ) -> Result<(u16, T), ApiError> {
        let path = url.path().to_string();
        let (status, bytes) = self.execute(method.clone(), url, body, timeout).await?;
        let value = serde_json::from_slice(&bytes).map_err(|source| ApiError::Decode { method, path, source })?;
        Ok((status, value))
    }

    /// Sends a request whose answer has no body worth reading (204, or one the caller ignores).
    pub async fn send(&self, method: Method, url: Url, body: Body) -> Result<(), ApiError> {
        self.execute(method, url, body, REQUEST_TIMEOUT).await.map(|_| ())
    }

    async fn execute(
        &self,
        method: Method,
        url: Url,
        body: Body,
        timeout: Duration,
    ) -> Result<(u16, bytes::Bytes), ApiError> {
        let path = url.path().to_string();
        let mut request = self.http.request(method.clone(), url).timeout(timeout);
        request = match body {
            Body::None => request,
            Body::Json(value) => request.json(&value),
            Body::Bytes { content_type, bytes } => {
                request.header(reqwest::header::CONTENT_TYPE, content_type).body(bytes)
            }
        };
        let response = request.send().await.map_err(|source| self.transport_error(&method, &path, source))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|source| self.transport_error(&method, &path, source))?;
        if status.is_success() {
            return Ok((status.as_u16(), bytes));
        }
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(error) => {
                ApiError::Api { status: status.as_u16(), error_code: error.error_code, message: error.message }
            }
            Err(_) => {
                let mut body = String::from_utf8_lossy(&bytes).trim().to_string();
                if body.len() > 200 {
                    let cut = (0..=200).rev().find(|&i| body.is_char_boundary(i)).unwrap_or(0);
                    body.truncate(cut);
                    body.push('…');
                }
                ApiError::Unexpected { method, path, status: status.as_u16(), body }
            }
        })
    }

    fn transport_error(&self, method: &Method, path: &str, source: reqwest::Error) -> ApiError {
        if source.is_connect() {
            let url = self.base.as_str().trim_end_matches('/').to_string();
            ApiError::Unreachable { url, source }
        } else {
            ApiError::Transport { method: method.clone(), path: path.to_string(), source }
        }
    }
}
