//! Who an HTTP request comes from (issue 15). Every request runs as a client of the Kafka
//! handlers (`server::as_client`) with the principal its credentials establish, so the ACLs
//! that govern a Kafka connection govern the HTTP API too — in process, and on the broker a
//! request is forwarded to (an Envelope carries the principal, `kafka::forward`):
//! - `Authorization: Basic` with a SCRAM user's name and password (the users SASL knows; a
//!   verified password is remembered until the user's credential changes, with SASL/PLAIN's
//!   (`security::passwords`), so PBKDF2 runs once per password, not per request);
//! - `Authorization: Bearer rnl_<id>_<secret>`, a token from `POST /v1/tokens` (stored in the
//!   metadata quorum as the hash of its secret, so every node accepts it; it ends with its
//!   user's last SCRAM credential);
//! - the dashboard's `runnel_session` cookie (a token from `POST /v1/login`: `HttpOnly`,
//!   `SameSite=Strict`); a request authenticated by it that changes something must also carry
//!   `X-Runnel-UI`, which a cross-site page cannot send (CSRF);
//! - a node's own token (kind `node`, replaced every half hour): the node-to-node `GET
//!   ...?scope=node` views of the HTTP API and nothing else, served as the node's own work.
//!
//! A browser request from another site (`Sec-Fetch-Site`, `Origin`) is refused whatever it
//! carries: the API has no cross-origin callers, so it can only be a forgery.
//!
//! Without credentials a request is `User:ANONYMOUS`, refused with 401 when
//! `--http-authentication required` (except the dashboard's static files, `/openapi.json` and
//! `POST /v1/login`). Credentials that do not verify are always refused, never downgraded.
//!
//! Invariant: no handler runs outside a client scope except for a node token's request, so an
//! HTTP request is never mistaken for the node's own (never refused) work.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::Digest;

use super::error::ApiError;
use crate::controller::{HttpToken, HttpTokenKind, MetadataImage, MetadataRecord};
use crate::security::passwords::PasswordChecks;
use crate::security::rate::TokenBucket;
use crate::security::scram::ScramCredential;
use crate::security::{constant_time_eq, HttpSecurity, Principal};
use crate::server::ClientContext;

/// The dashboard's login cookie.
pub const SESSION_COOKIE: &str = "runnel_session";
/// The header the dashboard sends with every call: required with the session cookie for
/// anything but GET/HEAD (a cross-site form or image cannot set it), and it asks a 401 not to
/// carry `WWW-Authenticate` (no browser password prompt over the login form).
pub const UI_HEADER: &str = "x-runnel-ui";
const TOKEN_PREFIX: &str = "rnl_";
/// Password checks (PBKDF2, thousands of iterations each) running at once: a flood of wrong
/// passwords waits here instead of filling the blocking pool the Kafka side also uses.
const VERIFYING_MAX: usize = 2;
/// How long a password check waits for its turn before the request gets 503.
const VERIFY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// A node token's lifetime; the node replaces it when half of it is gone.
const NODE_TOKEN_LIFETIME_MS: i64 = 3_600_000;
/// Principals whose issue buckets are remembered before full ones are forgotten.
const ISSUE_BUCKETS_PRUNE_AT: usize = 10_000;

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    Anonymous,
    Basic,
    Token,
    Session,
}

impl AuthMethod {
    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::Anonymous => "anonymous",
            AuthMethod::Basic => "basic",
            AuthMethod::Token => "token",
            AuthMethod::Session => "session",
        }
    }
}

/// What the auth layer established, in the request's extensions for the handlers.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub principal: Principal,
    pub method: AuthMethod,
    /// The token it authenticated with (a session's id, for logout).
    pub token_id: Option<String>,
}

impl Authenticated {
    fn anonymous() -> Authenticated {
        Authenticated { principal: Principal::anonymous(), method: AuthMethod::Anonymous, token_id: None }
    }
}

/// The HTTP API's authentication state of a node.
pub struct HttpAuth {
    pub settings: HttpSecurity,
    /// Verified passwords (the node's, shared with SASL/PLAIN).
    passwords: Arc<PasswordChecks>,
    /// Password checks allowed to run at once (`VERIFYING_MAX`).
    verifying: tokio::sync::Semaphore,
    /// This node's token for its calls to the other nodes' HTTP APIs, and when it expires
    /// (replaced at half its life, or when a node refuses it).
    node_token: tokio::sync::Mutex<Option<(String, i64)>>,
    /// Logins and tokens issued per principal: `--http-token-issues-per-minute` buckets (only those
    /// not full are kept).
    issues: Mutex<HashMap<String, TokenBucket>>,
}

/// Why a password was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum PasswordRefused {
    /// Wrong user or password (which is not told).
    Invalid,
    /// Too many checks are waiting: try again.
    Busy,
}

impl HttpAuth {
    pub fn new(settings: HttpSecurity, passwords: Arc<PasswordChecks>) -> HttpAuth {
        HttpAuth {
            settings,
            passwords,
            verifying: tokio::sync::Semaphore::new(VERIFYING_MAX),
            node_token: tokio::sync::Mutex::new(None),
            issues: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a login or token issued to `principal`, or refuses it (429 with Retry-After)
    /// past `--http-token-issues-per-minute`.
    pub fn count_issue(&self, principal: &str) -> Result<(), ApiError> {
        let now = std::time::Instant::now();
        let per_minute = f64::from(self.settings.token_issues_per_minute.max(1));
        let mut issues = self.issues.lock().unwrap_or_else(|p| p.into_inner());
        if issues.len() >= ISSUE_BUCKETS_PRUNE_AT {
            issues.retain(|_, bucket| !bucket.is_full(now));
        }
        let bucket =
            issues.entry(principal.to_string()).or_insert_with(|| TokenBucket::new(per_minute / 60.0, per_minute, now));
        bucket.try_take(now).map_err(|wait| {
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                42902,
                format!(
                    "{principal} was issued {} logins or tokens in the last minute, the most \
                     --http-token-issues-per-minute allows: retry in {seconds} s",
                    self.settings.token_issues_per_minute
                ),
            )
            .with_retry_after(seconds)
        })
    }

    /// Whether `password` is `user`'s (one of their SCRAM credentials). PBKDF2 runs on the
    /// blocking pool, at most `VERIFYING_MAX` at once, once per password while the credential
    /// stays the same; an unknown user costs the same as a wrong password, so timing does not
    /// tell which users exist.
    pub async fn verify_password(
        &self,
        image: &MetadataImage,
        user: &str,
        password: &str,
    ) -> Result<(), PasswordRefused> {
        let credentials: Vec<ScramCredential> = image.credentials_of(user).cloned().collect();
        if self.passwords.remembered(user, password, &credentials) {
            return Ok(());
        }
        let _turn = tokio::time::timeout(VERIFY_WAIT, self.verifying.acquire())
            .await
            .map_err(|_| PasswordRefused::Busy)?
            .map_err(|_| PasswordRefused::Busy)?;
        let (passwords, user, password) = (self.passwords.clone(), user.to_string(), password.to_string());
        let matched = tokio::task::spawn_blocking(move || passwords.verify(&user, &password, &credentials))
            .await
            .unwrap_or(false);
        if !matched {
            // As a failed SASL authentication (KIP-306): each guess costs the guesser this long
            // (after the check's turn is given back, so others' checks do not wait for it).
            drop(_turn);
            tokio::time::sleep(std::time::Duration::from_millis(self.settings.failed_authentication_delay_ms)).await;
            return Err(PasswordRefused::Invalid);
        }
        Ok(())
    }

    /// This node's token for node-to-node HTTP (it authenticates only `GET ...?scope=node`
    /// views), issued through the quorum on first use and replaced at half its
    /// `NODE_TOKEN_LIFETIME_MS`, the node's earlier ones revoked with it; `None` while neither
    /// HTTP authentication nor the authorizer is on (an anonymous call is then served
    /// everything) or the quorum cannot take it.
    pub async fn node_token(&self, broker: &crate::server::Broker) -> Option<String> {
        if !self.settings.authentication && !broker.settings.authorizer.enabled {
            return None;
        }
        let mut current = self.node_token.lock().await;
        let now = now_ms();
        if let Some((token, expires_ms)) = current.as_ref() {
            if expires_ms - now > NODE_TOKEN_LIFETIME_MS / 2 {
                return Some(token.clone());
            }
        }
        let principal = format!("User:runnel-node-{}", broker.settings.node_id);
        let earlier: Vec<String> = broker
            .controller
            .image()
            .http_tokens
            .values()
            .filter(|t| t.kind == HttpTokenKind::Node && t.principal == principal)
            .map(|t| t.id.clone())
            .collect();
        let expires_ms = now + NODE_TOKEN_LIFETIME_MS;
        let (token, secret) = new_token(&principal, HttpTokenKind::Node, expires_ms, "node-to-node HTTP");
        let mut records = vec![MetadataRecord::IssueHttpToken { token }];
        if !earlier.is_empty() {
            records.push(MetadataRecord::RevokeHttpTokens { ids: earlier });
        }
        match broker.controller.propose(MetadataRecord::Batch(records)).await {
            Ok(_) => {
                *current = Some((secret.clone(), expires_ms));
                Some(secret)
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not issue this node's HTTP token");
                None
            }
        }
    }

    /// Forgets the node token (another node refused it: revoked), so the next call issues one.
    pub async fn forget_node_token(&self) {
        *self.node_token.lock().await = None;
    }
}

/// A new token for `principal`: the record (hash only) and the bearer string given to its owner.
pub fn new_token(principal: &str, kind: HttpTokenKind, expires_ms: i64, description: &str) -> (HttpToken, String) {
    let id = super::transforms::hex(&crate::security::scram::random_bytes(8));
    let secret = super::transforms::hex(&crate::security::scram::random_bytes(32));
    let token = HttpToken {
        id: id.clone(),
        principal: principal.to_string(),
        secret_sha256: sha2::Sha256::digest(secret.as_bytes()).to_vec(),
        kind,
        issued_ms: now_ms(),
        expires_ms,
        description: description.to_string(),
    };
    (token, format!("{TOKEN_PREFIX}{id}_{secret}"))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The unexpired token `bearer` is, if it is one and its owner still exists (a user's tokens
/// end with the user's last SCRAM credential; node tokens have no user).
pub fn find_token<'a>(image: &'a MetadataImage, bearer: &str) -> Option<&'a HttpToken> {
    let (id, secret) = bearer.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    let token = image.http_tokens.get(id)?;
    let hash = sha2::Sha256::digest(secret.as_bytes());
    let owner = principal_of(&token.principal);
    let owner_exists = token.kind == HttpTokenKind::Node || image.credentials_of(owner.name()).next().is_some();
    (constant_time_eq(&hash, &token.secret_sha256) && token.expires_ms > now_ms() && owner_exists).then_some(token)
}

/// Whether a browser sent the request from another site (`Sec-Fetch-Site`, else `Origin`
/// against `Host`). The API serves no cross-origin callers (it answers no CORS preflight), so
/// such a request can only be a forgery riding on credentials the browser holds (a login
/// cookie, cached Basic credentials): refused, whatever its method.
fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    origin == "null" || origin_host != host
}

/// The principal of a stored `User:<name>`.
pub fn principal_of(text: &str) -> Principal {
    Principal::parse(text).unwrap_or_else(|| Principal::user(text))
}

/// Requests that need no credentials: the dashboard's static files (the login form is one),
/// the API's description, and the login itself.
fn is_open(method: &Method, path: &str) -> bool {
    is_open_route(method.as_str(), path)
}

/// [`is_open`] by method name (any case), for the OpenAPI document too.
pub fn is_open_route(method: &str, path: &str) -> bool {
    matches!(path, "/" | "/ui/app.js" | "/ui/style.css" | "/openapi.json")
        || (method.eq_ignore_ascii_case("POST") && path == "/v1/login")
}

/// The credentials a request carries.
enum Credentials {
    None,
    Basic { user: String, password: String },
    Bearer(String),
    Cookie(String),
    Malformed,
}

fn credentials(headers: &HeaderMap) -> Credentials {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let Ok(value) = value.to_str() else { return Credentials::Malformed };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            use base64::Engine;
            let decoded = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok();
            let text = decoded.and_then(|bytes| String::from_utf8(bytes).ok());
            return match text.as_deref().and_then(|t| t.split_once(':')) {
                Some((user, password)) => Credentials::Basic { user: user.to_string(), password: password.to_string() },
                None => Credentials::Malformed,
            };
        }
        if scheme.eq_ignore_ascii_case("bearer") {
            return Credentials::Bearer(rest.trim().to_string());
        }
        return Credentials::Malformed;
    }
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_string());
    match cookie {
        Some(value) if !value.is_empty() => Credentials::Cookie(value),
        _ => Credentials::None,
    }
}

/// 503: too many password checks are waiting.
pub fn busy() -> Response {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, 50303, "too many password checks in progress: retry").into_response()
}

/// 401; with a Basic challenge unless the dashboard asked (`from_ui`: no browser prompt).
fn unauthorized(from_ui: bool, message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, 40101, message).into_response();
    if !from_ui {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Basic realm=\"runnel\""));
    }
    response
}

/// The auth layer: establishes the request's principal and runs the rest of the request as
/// that client. Requests that present credentials are counted by outcome
/// (`kafka_server_socketserver_authentications_total{listener="http"}`: success, or failure
/// for a 401), so password guessing over HTTP shows as it does on the Kafka listeners.
pub async fn authenticate(
    State(http): State<super::State>,
    connect: ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let presented = !matches!(credentials(request.headers()), Credentials::None);
    let metrics = http.broker.metrics.clone();
    let response = authenticate_request(State(http), connect, request, next).await;
    if presented {
        let result = if response.status() == StatusCode::UNAUTHORIZED { "failure" } else { "success" };
        metrics.authentications.with_label_values(&["http", result]).inc();
    }
    response
}

async fn authenticate_request(
    State(http): State<super::State>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let (from_ui, found) = (headers.contains_key(UI_HEADER), credentials(headers));
    let open = is_open(request.method(), request.uri().path());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).or(request.uri().host());
    // (A request without any names no site: browsers always send one.)
    if !http.auth.settings.authentication && host.is_some_and(|host| !http.auth.settings.allows_host(host)) {
        let message = format!(
            "the Host header {:?} does not name this node (a page rebinding its name to this address?); \
             allow it with --http-allowed-hosts",
            host.unwrap_or_default()
        );
        return ApiError::new(StatusCode::FORBIDDEN, 40303, &message).into_response();
    }
    if cross_site(headers) && !(open && request.method() == Method::GET) {
        return ApiError::new(StatusCode::FORBIDDEN, 40303, "a request from another site (Origin, Sec-Fetch-Site)")
            .into_response();
    }
    let image = http.broker.controller.image();
    let authenticated = match found {
        Credentials::None if http.auth.settings.authentication && !open => {
            return unauthorized(from_ui, "authentication required: HTTP Basic, a bearer token or a dashboard login")
        }
        Credentials::None => Authenticated::anonymous(),
        Credentials::Malformed => return unauthorized(from_ui, "malformed Authorization header"),
        Credentials::Basic { user, password } => match http.auth.verify_password(&image, &user, &password).await {
            Ok(()) => Authenticated { principal: Principal::user(&user), method: AuthMethod::Basic, token_id: None },
            Err(PasswordRefused::Invalid) => return unauthorized(from_ui, "invalid user name or password"),
            Err(PasswordRefused::Busy) => return busy(),
        },
        Credentials::Bearer(bearer) => {
            let Some(token) = find_token(&image, &bearer) else {
                return unauthorized(from_ui, "unknown, revoked or expired token");
            };
            if token.kind == HttpTokenKind::Session {
                return unauthorized(from_ui, "a dashboard login is a cookie, not a bearer token");
            }
            if token.kind == HttpTokenKind::Node {
                // A node token authenticates the other nodes' `scope=node` views only.
                // Only the routes that have such a view: elsewhere `scope=node` is an unknown
                // parameter, and the token would read anything (it runs outside any client scope).
                let path = request.uri().path();
                let view = request.method() == Method::GET
                    && NODE_VIEWS.iter().any(|prefix| is_view_of(path, prefix))
                    && request.uri().query().is_some_and(|q| q.split('&').any(|p| p == "scope=node"));
                if !view {
                    return unauthorized(from_ui, "a node token serves only scope=node views");
                }
                // The node's own work: outside any client scope, like its Kafka-side calls.
                let node = Authenticated {
                    principal: principal_of(&token.principal),
                    method: AuthMethod::Token,
                    token_id: None,
                };
                request.extensions_mut().insert(node);
                return next.run(request).await;
            }
            Authenticated {
                principal: principal_of(&token.principal),
                method: AuthMethod::Token,
                token_id: Some(token.id.clone()),
            }
        }
        Credentials::Cookie(bearer) => {
            let token = find_token(&image, &bearer).filter(|t| t.kind == HttpTokenKind::Session);
            let Some(token) = token else {
                if open {
                    // The login form of a browser whose login expired.
                    return run_as(peer, Authenticated::anonymous(), request, next).await;
                }
                return unauthorized(from_ui, "the dashboard login expired or was ended: log in again");
            };
            let safe = matches!(*request.method(), Method::GET | Method::HEAD);
            if !safe && !from_ui {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    40302,
                    "a change authenticated by the dashboard's cookie must carry the X-Runnel-UI header",
                )
                .into_response();
            }
            Authenticated {
                principal: principal_of(&token.principal),
                method: AuthMethod::Session,
                token_id: Some(token.id.clone()),
            }
        }
    };
    drop(image);
    run_as(peer, authenticated, request, next).await
}

/// The routes with a `scope=node` view (what one node asks the others): a collection and its
/// items (`/v1/groups`, `/v1/groups/{group}`). Nothing deeper: `/v1/groups/{group}/offsets` is
/// not a view.
const NODE_VIEWS: [&str; 4] = ["/v1/groups", "/v1/transforms", "/v1/assignors", "/v1/validators"];

/// Whether `path` is `prefix` or one item under it (`prefix/{name}`).
fn is_view_of(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => rest.strip_prefix('/').is_some_and(|item| !item.is_empty() && !item.contains('/')),
        None => false,
    }
}

async fn run_as(peer: SocketAddr, authenticated: Authenticated, mut request: Request, next: Next) -> Response {
    let client = ClientContext { peer, listener: None, principal: authenticated.principal.clone() };
    request.extensions_mut().insert(authenticated);
    crate::server::as_client(client, next.run(request)).await
}

/// 403 unless the request's client may do `operation` on the `kind` resource `name` (the
/// node's own requests always may).
pub fn require(
    broker: &crate::server::Broker,
    operation: crate::security::acl::Operation,
    kind: crate::security::acl::ResourceType,
    name: &str,
) -> Result<(), ApiError> {
    if broker.authorized(operation, kind, name) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!("{} is not allowed {operation} on {kind} '{name}'", crate::server::principal())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_token_reaches_only_the_scope_node_views() {
        // Proves the node token's routes are the views nodes ask each other for: any GET with
        // `scope=node` in its query ran as the node, outside any client scope (e.g. reading any
        // topic's records).
        let allowed = |path: &str| NODE_VIEWS.iter().any(|prefix| is_view_of(path, prefix));
        assert!(allowed("/v1/groups") && allowed("/v1/groups/g") && allowed("/v1/transforms/t"));
        assert!(!allowed("/v1/groups/g/offsets"));
        assert!(!allowed("/v1/topics/secret/records"));
        assert!(!allowed("/v1/groupsx") && !allowed("/v1/groups/"));
    }
}
