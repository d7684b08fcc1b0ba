//! The HTTP API (axum), in the same process as the Kafka listener: Confluent REST Proxy shapes
//! (`v3`: clusters, topics, partitions, configs, records, consumer-group lag; `v2`: produce and
//! consumer instances), Runnel's own `/v1` (cluster health, partition detail, groups with lag,
//! a record browser), `/metrics` (Prometheus), `/openapi.json` (generated from the handlers by
//! utoipa, so it cannot drift from the routes) and the dashboard (`/`, assets embedded from
//! `ui/`).
//!
//! Invariants: the only module of the node that speaks JSON to clients (the types it sends
//! are its own; no type of `log/`, `partition/`, `group/`, `server/` or `transform/` derives
//! `Serialize`, see the test below); every failure leaves through
//! `error::ApiError` (one status/code mapping); request bodies are bounded by
//! `socket.request.max.bytes` and long polls by `LONG_POLL_MAX_MS`; everything that touches
//! partitions or groups goes through the Kafka handlers (`kafka.rs`: in process for what this
//! node leads, forwarded to the leader or coordinator otherwise), so HTTP clients get Kafka's
//! semantics on any node of a cluster, not a second implementation of them.

mod admin;
mod assignors;
mod auth;
mod consumer;
pub mod error;
mod kafka;
mod observe;
pub mod records;
mod tokens;
mod transforms;
mod ui;
mod unread;
mod v1;
mod v2;
mod v3;
mod validators;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::error::ApiError;
pub use self::v3::format_rfc3339_ms;
use crate::security::tls::TlsContext;
use crate::server::Broker;

/// Upper bound of any long poll (`timeout`, `wait_ms`), as Kafka bounds `max_wait_ms`.
pub const LONG_POLL_MAX_MS: u64 = 30_000;

/// What every HTTP handler can reach.
pub struct Http {
    pub broker: Arc<Broker>,
    consumers: consumer::Consumers,
    /// Keyless records of one request go to one partition; the next request moves on (the
    /// Java client's sticky partitioner, per request).
    sticky: AtomicU32,
    shutdown: watch::Receiver<bool>,
    /// Who requests come from (`auth`).
    auth: auth::HttpAuth,
    /// Whether this listener serves HTTPS.
    tls: bool,
    /// How this node calls the other nodes' HTTP APIs (`transforms::ask_others`).
    peer_client: reqwest::Client,
    /// Uploaded modules being checked (compiled) now, at most [`transforms::UPLOADS_AT_ONCE`]:
    /// each waiting upload would hold a blocking-pool thread (the runtime compiles one module
    /// at a time), and the pool also runs every guest call.
    uploads: tokio::sync::Semaphore,
}

impl Http {
    fn next_sticky_partition(&self, partitions: u32) -> i32 {
        (self.sticky.fetch_add(1, Ordering::Relaxed) % partitions.max(1)) as i32
    }
}

type State = Arc<Http>;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Runnel HTTP API",
        description = "Topics, records, consumer groups and cluster health of a Runnel node. \
            v3 and v2 follow the Confluent REST Proxy; v1 is Runnel's own. Errors are \
            {\"error_code\": int, \"message\": string}."
    ),
    tags(
        (name = "v1", description = "Runnel's own: cluster health, partitions, groups with lag, transactions, record browser"),
        (name = "v3", description = "Confluent REST Proxy v3: clusters, topics, configs, records, consumer-group lag"),
        (name = "v2", description = "Confluent REST Proxy v2: produce and consumer instances"),
        (name = "ops", description = "Metrics"),
    )
)]
struct ApiDoc;

/// The API routes with their OpenAPI document.
fn api(state: State) -> (Router, utoipa::openapi::OpenApi) {
    let (router, doc) = OpenApiRouter::<State>::with_openapi(ApiDoc::openapi())
        .routes(routes!(v1::cluster))
        .routes(routes!(tokens::whoami))
        .routes(routes!(tokens::login))
        .routes(routes!(tokens::logout))
        .routes(routes!(tokens::create_token, tokens::list_tokens))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(tokens::audit))
        .routes(routes!(v1::list_topics, v1::create_topic))
        .routes(routes!(v1::describe_topic, v1::delete_topic))
        .routes(routes!(v1::topic_configs, v1::alter_topic_configs))
        .routes(routes!(v1::browse_records))
        .routes(routes!(v1::list_groups))
        .routes(routes!(v1::describe_group, v1::delete_group))
        .routes(routes!(v1::list_transactions))
        .routes(routes!(v1::describe_transaction))
        .routes(routes!(v3::list_clusters))
        .routes(routes!(v3::get_cluster))
        .routes(routes!(v3::list_topics, v3::create_topic))
        .routes(routes!(v3::get_topic, v3::delete_topic))
        .routes(routes!(v3::list_partitions))
        .routes(routes!(v3::get_partition))
        .routes(routes!(v3::list_topic_configs, v3::update_topic_configs))
        .routes(routes!(v3::get_topic_config, v3::set_topic_config, v3::reset_topic_config))
        .routes(routes!(v3::produce_records))
        .routes(routes!(v3::list_groups))
        .routes(routes!(v3::get_group))
        .routes(routes!(v3::group_lags))
        .routes(routes!(v3::get_group_lag))
        .routes(routes!(v3::group_lag_summary))
        .routes(routes!(v3::list_consumers))
        .routes(routes!(v3::get_consumer))
        .routes(routes!(v3::list_consumer_assignments))
        .routes(routes!(v2::produce))
        .routes(routes!(v2::create_consumer))
        .routes(routes!(v2::delete_consumer))
        .routes(routes!(v2::subscribe, v2::subscription, v2::unsubscribe))
        .routes(routes!(v2::assign, v2::assignments))
        .routes(routes!(v2::poll_records))
        .routes(routes!(v2::commit_offsets, v2::committed_offsets))
        .routes(routes!(v2::seek))
        .routes(routes!(v2::seek_to_beginning))
        .routes(routes!(v2::seek_to_end))
        .routes(routes!(transforms::list))
        .routes(routes!(transforms::deploy, transforms::describe, transforms::delete))
        .routes(routes!(transforms::pause))
        .routes(routes!(transforms::resume))
        .routes(routes!(transforms::logs))
        .routes(routes!(validators::list))
        .routes(routes!(validators::deploy, validators::describe, validators::delete))
        .routes(routes!(validators::logs))
        .routes(routes!(assignors::list))
        .routes(routes!(assignors::deploy, assignors::describe, assignors::delete))
        .routes(routes!(assignors::logs))
        .routes(routes!(observe::metrics))
        .with_state(state.clone())
        .split_for_parts();
    (router, doc)
}

/// Documents authentication on every route: the schemes (HTTP Basic against the SCRAM users, a
/// bearer token from `POST /v1/tokens`, the dashboard's session cookie), anonymous allowed too
/// (`{}`: a node without `--http-authentication required` serves it), and the 401 and 403
/// answers every operation but the login can give, with the error body.
fn document_security(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme("basic", SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)));
    components.add_security_scheme("token", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    components
        .add_security_scheme("session", SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(auth::SESSION_COOKIE))));
    let none: [&str; 0] = [];
    doc.security = Some(vec![
        SecurityRequirement::new("basic", none),
        SecurityRequirement::new("token", none),
        SecurityRequirement::new("session", none),
        SecurityRequirement::default(),
    ]);
    let error = |description: &str| -> RefOr<Response> {
        let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
        ResponseBuilder::new().description(description).content("application/json", content).build().into()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let operations = [
            ("get", &mut item.get),
            ("put", &mut item.put),
            ("post", &mut item.post),
            ("delete", &mut item.delete),
            ("patch", &mut item.patch),
            ("head", &mut item.head),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation else { continue };
            if auth::is_open_route(method, path) {
                continue;
            }
            let responses = &mut operation.responses.responses;
            responses.entry("401".into()).or_insert_with(|| {
                error("No credentials (with --http-authentication required) or wrong ones (error_code 40101)")
            });
            responses.entry("403".into()).or_insert_with(|| {
                error("Not allowed by the ACLs (40301), a cookie-authenticated change without X-Runnel-UI (40302), a cross-site request (40303)")
            });
        }
    }
}

/// The whole router: API, OpenAPI document, dashboard, JSON 404/405, metrics per route,
/// authentication (every request, `auth`), the body limit and the draining of bodies answered
/// unread (`unread`).
pub fn router(state: State) -> Router {
    let body_max = state.broker.settings.request_max_bytes;
    let (api, mut doc) = api(state.clone());
    document_security(&mut doc);
    let doc = Arc::new(doc);
    api.route("/openapi.json", get(move || async move { Json(doc.as_ref().clone()) }))
        .merge(ui::routes())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), observe::track))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(DefaultBodyLimit::max(body_max))
        .layer(axum::middleware::from_fn(unread::drain_unread))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, 40405, "no such route (see /openapi.json)")
}

async fn method_not_allowed() -> impl IntoResponse {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, 40501, "method not allowed on this route (see /openapi.json)")
}

/// The HTTP listener with the Kafka listener's handling of failed accepts (out of descriptors:
/// back off, one log line per episode, counted) instead of axum's (an error line per failure,
/// each followed by a fixed 1 s pause).
struct BackoffListener {
    listener: TcpListener,
    errors: crate::server::AcceptErrors,
}

/// How long an accepted HTTPS connection may take to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Handshakes in progress at once; a connection accepted beyond them is closed at once.
const TLS_HANDSHAKES_MAX: usize = 256;

/// The HTTPS listener: each accepted connection completes its TLS handshake on its own task
/// (a slow or silent client holds up no other), within [`TLS_HANDSHAKE_TIMEOUT`], with the
/// node's current certificates (reloaded when their files change); axum gets only
/// established streams.
struct TlsListener {
    established: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    local: std::io::Result<SocketAddr>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn start(mut plain: BackoffListener, tls: Arc<TlsContext>) -> TlsListener {
        let local = axum::serve::Listener::local_addr(&plain);
        let (ready, established) = tokio::sync::mpsc::channel(64);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(TLS_HANDSHAKES_MAX));
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, peer) = axum::serve::Listener::accept(&mut plain).await;
                let Ok(turn) = handshakes.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "HTTPS handshakes at their bound: connection closed");
                    continue;
                };
                let (handshake, ready) = (tls.acceptor(), ready.clone());
                tokio::spawn(async move {
                    let _turn = turn;
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = ready.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { established, local, acceptor }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.established.recv().await {
            Some(established) => established,
            // The acceptor ended (it never does while the listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local.as_ref().map(|a| *a).map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
    }
}

impl axum::serve::Listener for BackoffListener {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok(accepted) => {
                    self.errors.accepted();
                    return accepted;
                }
                Err(e) => self.errors.failed(&e).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// Serves HTTP (HTTPS with `tls`) until `shutdown` turns true; in-flight long polls end early
/// then.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    security: crate::security::HttpSecurity,
    tls: Option<Arc<TlsContext>>,
    shutdown: watch::Receiver<bool>,
) {
    let state = Arc::new(Http {
        consumers: consumer::Consumers::new(),
        auth: auth::HttpAuth::new(security, broker.passwords.clone()),
        broker,
        sticky: AtomicU32::new(0),
        shutdown: shutdown.clone(),
        tls: tls.is_some(),
        peer_client: transforms::peer_client(tls.as_deref()),
        uploads: tokio::sync::Semaphore::new(transforms::UPLOADS_AT_ONCE),
    });
    if state.auth.settings.authentication || state.broker.settings.authorizer.enabled {
        // Issued now, so the other nodes know it before this node first asks them anything.
        let state = state.clone();
        tokio::spawn(async move { state.auth.node_token(&state.broker).await });
    }
    let reaper = tokio::spawn(consumer::expire_idle(state.clone()));
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let mut stop = shutdown.clone();
    let errors = crate::server::AcceptErrors::new("http", &state.broker.metrics);
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let plain = BackoffListener { listener, errors };
    // `tap_io` gives the wrappers axum's `ConnectInfo<SocketAddr>`.
    let result = match tls {
        Some(tls) => {
            let listener = axum::serve::ListenerExt::tap_io(TlsListener::start(plain, tls), |_| {});
            axum::serve(listener, app).with_graceful_shutdown(stopped).await
        }
        None => {
            let listener = axum::serve::ListenerExt::tap_io(plain, |_| {});
            axum::serve(listener, app).with_graceful_shutdown(stopped).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "HTTP server stopped");
    }
    reaper.abort();
    consumer::close_all(&state).await;
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every source file under `dir` (recursively) that names serde.
    fn files_naming_serde(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read the source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                files_naming_serde(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                // A derive or impl of Serialize, or a use of serde / serde_json (not the verb
                // "serializes" in a comment).
                let names_serde = ["serde", "Serialize)", "Serialize,", "Serialize for"];
                if names_serde.iter().any(|needle| text.contains(needle)) {
                    found.push(path.display().to_string());
                }
            }
        }
    }

    #[test]
    fn serde_is_used_only_by_http_cli_the_controller_encoding_and_the_config_file() {
        // Proves ARCHITECTURE.md's JSON invariant: outside http/, serde appears only in cli/ (an
        // HTTP client), controller/ (its raft log, snapshot and RPC encoding) and config.rs (TOML).
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        files_naming_serde(&src, &mut found);
        let allowed = |path: &str| {
            let relative = path.strip_prefix(&*src.display().to_string()).unwrap_or(path).trim_start_matches('/');
            ["http/", "cli/", "controller/"].iter().any(|dir| relative.starts_with(dir)) || relative == "config.rs"
        };
        let stray: Vec<&String> = found.iter().filter(|path| !allowed(path)).collect();
        assert!(stray.is_empty(), "serde outside http/, cli/, controller/ and config.rs: {stray:?}");
    }
}
