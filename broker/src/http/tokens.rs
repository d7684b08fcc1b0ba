//! Logging in, bearer tokens and the audit log of deployed code (issue 15):
//! `POST /v1/login` / `POST /v1/logout` (the dashboard's session cookie), `GET /v1/whoami`,
//! `POST|GET /v1/tokens`, `DELETE /v1/tokens/{id}` (tokens for scripts, like Kafka's
//! delegation tokens: only HTTP Basic may create one, so neither a leaked token nor a login
//! cookie can outlive itself), and `GET /v1/audit`.
//!
//! Tokens live in the metadata quorum as the SHA-256 of their secret; the secret is shown once,
//! when the token is created. A principal holds at most `--http-tokens-max-per-principal`
//! unexpired API tokens; its expired ones are removed when it creates a new one, and a login
//! beyond the bound ends its oldest login.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{new_token, now_ms, AuthMethod, Authenticated, PasswordRefused, SESSION_COOKIE};
use super::error::{ApiError, ApiResult, ErrorBody, JsonBody};
use crate::controller::{AuditEntry, HttpToken, HttpTokenKind, MetadataRecord};
use crate::security::acl::{Operation, ResourceType};

#[derive(Deserialize, ToSchema)]
pub struct Login {
    pub username: String,
    pub password: String,
}

#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    /// `User:<name>`.
    pub principal: String,
    /// anonymous, basic, token or session.
    pub method: String,
    /// Whether this node's HTTP API requires authentication.
    pub authentication_required: bool,
    /// Whether the authorizer checks ACLs.
    pub authorizer: bool,
    /// When the login or token ends (ms since the epoch), for token and session methods.
    pub expires_ms: Option<i64>,
}

fn whoami_of(http: &super::Http, who: &Authenticated) -> WhoAmI {
    let expires_ms =
        who.token_id.as_ref().and_then(|id| http.broker.controller.image().http_tokens.get(id).map(|t| t.expires_ms));
    WhoAmI {
        principal: who.principal.to_string(),
        method: who.method.name().to_string(),
        authentication_required: http.auth.settings.authentication,
        authorizer: http.broker.settings.authorizer.enabled,
        expires_ms,
    }
}

/// Who this request authenticated as.
#[utoipa::path(get, path = "/v1/whoami", tag = "v1", responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody)))]
pub async fn whoami(State(http): State<super::State>, Extension(who): Extension<Authenticated>) -> Json<WhoAmI> {
    Json(whoami_of(&http, &who))
}

/// Logs in with a SCRAM user's name and password: sets the `runnel_session` cookie
/// (`HttpOnly`, `SameSite=Strict`, `Secure` on HTTPS) that the dashboard's calls carry.
#[utoipa::path(post, path = "/v1/login", tag = "v1", request_body = Login,
    responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody),
        (status = 429, description = "more logins and tokens than --http-token-issues-per-minute (Retry-After)", body = ErrorBody)))]
pub async fn login(State(http): State<super::State>, JsonBody(login): JsonBody<Login>) -> ApiResult<Response> {
    let image = http.broker.controller.image();
    match http.auth.verify_password(&image, &login.username, &login.password).await {
        Ok(()) => {}
        Err(PasswordRefused::Invalid) => {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, 40101, "invalid user name or password"))
        }
        Err(PasswordRefused::Busy) => return Ok(super::auth::busy()),
    }
    let principal = format!("User:{}", login.username);
    http.auth.count_issue(&principal)?;
    let expires_ms = now_ms().saturating_add(http.auth.settings.session_ms as i64);
    let (token, bearer) = new_token(&principal, HttpTokenKind::Session, expires_ms, "dashboard login");
    let id = token.id.clone();
    // Beyond the bound, the principal's oldest logins end (and its expired tokens go).
    let mut sessions: Vec<&HttpToken> =
        owned_by(&image, &principal).filter(|t| t.kind == HttpTokenKind::Session && t.expires_ms > now_ms()).collect();
    sessions.sort_by_key(|t| t.issued_ms);
    let excess = (sessions.len() + 1).saturating_sub(http.auth.settings.tokens_max_per_principal);
    let mut ended: Vec<String> = sessions.iter().take(excess).map(|t| t.id.clone()).collect();
    ended.extend(expired_of(&image, &principal));
    propose_issue(&http, token, ended).await?;
    let who = Authenticated {
        principal: super::auth::principal_of(&principal),
        method: AuthMethod::Session,
        token_id: Some(id),
    };
    let secure = if http.tls { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={bearer}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        http.auth.settings.session_ms / 1000
    );
    Ok(([(header::SET_COOKIE, cookie)], Json(whoami_of(&http, &who))).into_response())
}

/// Ends the dashboard login this request carries (its token is revoked on every node) and
/// clears the cookie.
#[utoipa::path(post, path = "/v1/logout", tag = "v1", responses((status = 204), (status = 401, body = ErrorBody)))]
pub async fn logout(State(http): State<super::State>, Extension(who): Extension<Authenticated>) -> ApiResult<Response> {
    // The cookie is cleared whatever happens to the revocation: a browser on a shared machine
    // must not keep a login its user asked to end (the error says the token may outlive it).
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    if let (AuthMethod::Session, Some(id)) = (who.method, who.token_id) {
        if let Err(e) = propose(&http, MetadataRecord::RevokeHttpTokens { ids: vec![id] }).await {
            return Ok(([(header::SET_COOKIE, cookie)], e).into_response());
        }
    }
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response())
}

#[derive(Deserialize, ToSchema)]
pub struct NewToken {
    /// What it is for (shown in listings).
    #[serde(default)]
    pub description: String,
    /// How long it lasts (default and maximum: `--http-token-max-lifetime-ms`).
    pub lifetime_ms: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct IssuedToken {
    /// Send as `Authorization: Bearer <token>`; shown only now.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

#[derive(Serialize, ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub principal: String,
    /// api, session (a dashboard login) or node.
    pub kind: String,
    pub description: String,
    pub issued_ms: i64,
    pub expires_ms: i64,
    pub expired: bool,
}

fn info(token: &HttpToken) -> TokenInfo {
    TokenInfo {
        id: token.id.clone(),
        principal: token.principal.clone(),
        kind: token.kind.name().to_string(),
        description: token.description.clone(),
        issued_ms: token.issued_ms,
        expires_ms: token.expires_ms,
        expired: token.expires_ms <= now_ms(),
    }
}

#[derive(Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

fn owned_by<'a>(
    image: &'a crate::controller::MetadataImage,
    principal: &'a str,
) -> impl Iterator<Item = &'a HttpToken> {
    image.http_tokens.values().filter(move |t| t.principal == principal)
}

fn expired_of(image: &crate::controller::MetadataImage, principal: &str) -> Vec<String> {
    owned_by(image, principal).filter(|t| t.expires_ms <= now_ms()).map(|t| t.id.clone()).collect()
}

async fn propose(http: &super::Http, record: MetadataRecord) -> ApiResult<()> {
    http.broker
        .controller
        .propose(record)
        .await
        .map(|_| ())
        .map_err(|e| ApiError::kafka(crate::server::controller_error_code(&e), Some(&e.to_string())))
}

async fn propose_issue(http: &super::Http, token: HttpToken, revoke: Vec<String>) -> ApiResult<()> {
    let mut records = vec![MetadataRecord::IssueHttpToken { token }];
    if !revoke.is_empty() {
        records.push(MetadataRecord::RevokeHttpTokens { ids: revoke });
    }
    propose(http, MetadataRecord::Batch(records)).await
}

/// Creates a bearer token for the requesting principal. Only a client that authenticated with
/// its password (HTTP Basic) may: neither a token nor a login cookie can make tokens, so a
/// stolen one cannot outlive itself.
#[utoipa::path(post, path = "/v1/tokens", tag = "v1", request_body = NewToken,
    responses((status = 201, body = IssuedToken), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn create_token(
    State(http): State<super::State>,
    Extension(who): Extension<Authenticated>,
    JsonBody(request): JsonBody<NewToken>,
) -> ApiResult<Response> {
    match who.method {
        AuthMethod::Basic => {}
        AuthMethod::Anonymous => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                40101,
                "authenticate with HTTP Basic to create a token",
            ))
        }
        AuthMethod::Token | AuthMethod::Session => {
            return Err(ApiError::forbidden(
                "only a password (HTTP Basic) can create a token, not a token or a dashboard login",
            ))
        }
    }
    let max = http.auth.settings.token_max_lifetime_ms;
    let lifetime = request.lifetime_ms.unwrap_or(max);
    if lifetime == 0 || lifetime > max {
        return Err(ApiError::invalid(format!(
            "lifetime_ms must be between 1 and {max} (--http-token-max-lifetime-ms)"
        )));
    }
    if request.description.len() > 256 {
        return Err(ApiError::invalid("description: at most 256 bytes"));
    }
    let principal = who.principal.to_string();
    let image = http.broker.controller.image();
    let live = owned_by(&image, &principal).filter(|t| t.kind == HttpTokenKind::Api && t.expires_ms > now_ms()).count();
    let bound = http.auth.settings.tokens_max_per_principal;
    if live >= bound {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            42901,
            format!("{principal} holds {live} tokens, the most --http-tokens-max-per-principal allows: revoke one"),
        ));
    }
    http.auth.count_issue(&principal)?;
    let expires_ms = now_ms().saturating_add(lifetime as i64);
    let (token, bearer) = new_token(&principal, HttpTokenKind::Api, expires_ms, &request.description);
    let issued = IssuedToken { token: bearer, info: info(&token) };
    propose_issue(&http, token, expired_of(&image, &principal)).await?;
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

/// Whether the requester may see and revoke the tokens of other principals: ALTER on the
/// cluster, with the authorizer on (without it nobody administers anyone else's tokens).
fn manages_every_token(http: &super::Http) -> bool {
    http.broker.settings.authorizer.enabled && http.broker.authorized_cluster(Operation::Alter)
}

/// The requester's tokens (every principal's, with ALTER on the cluster); never their secrets.
#[utoipa::path(get, path = "/v1/tokens", tag = "v1", responses((status = 200, body = TokenList), (status = 401, body = ErrorBody)))]
pub async fn list_tokens(
    State(http): State<super::State>,
    Extension(who): Extension<Authenticated>,
) -> Json<TokenList> {
    let image = http.broker.controller.image();
    let principal = who.principal.to_string();
    let every = manages_every_token(&http) && who.method != AuthMethod::Anonymous;
    let tokens = image.http_tokens.values().filter(|t| every || t.principal == principal).map(info).collect();
    Json(TokenList { tokens })
}

/// Revokes a token (its owner's, or any with ALTER on the cluster).
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "v1", params(("id" = String, Path)),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    State(http): State<super::State>,
    Extension(who): Extension<Authenticated>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let image = http.broker.controller.image();
    let not_found = || ApiError::new(StatusCode::NOT_FOUND, 40411, format!("token '{id}' not found"));
    let token = image.http_tokens.get(&id).ok_or_else(not_found)?;
    let own = who.method != AuthMethod::Anonymous && who.principal.is(&token.principal);
    if !own {
        if !manages_every_token(&http) || who.method == AuthMethod::Anonymous {
            // Whether someone else's token exists is not told.
            return Err(not_found());
        }
    }
    propose(&http, MetadataRecord::RevokeHttpTokens { ids: vec![id] }).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub struct AuditLine {
    pub at_ms: i64,
    pub principal: String,
    pub client_host: String,
    /// deploy, pause, resume or delete.
    pub action: String,
    /// transform, validator or assignor.
    pub kind: String,
    pub name: String,
    /// SHA-256 of the deployed module.
    pub sha256: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct AuditLog {
    /// Oldest first; the last 10,000 changes of deployed code.
    pub entries: Vec<AuditLine>,
}

/// Who deployed, paused, resumed or deleted which transform, validator or assignor, with which
/// module, when: the entries whose resource the requester may describe.
#[utoipa::path(get, path = "/v1/audit", tag = "v1", responses((status = 200, body = AuditLog), (status = 401, body = ErrorBody)))]
pub async fn audit(State(http): State<super::State>) -> Json<AuditLog> {
    let image = http.broker.controller.image();
    let entries = image
        .audit
        .iter()
        .filter(|e| code_kind(&e.kind).is_some_and(|kind| http.broker.authorized(Operation::Describe, kind, &e.name)))
        .map(|e| AuditLine {
            at_ms: e.at_ms,
            principal: e.principal.clone(),
            client_host: e.client_host.clone(),
            action: e.action.clone(),
            kind: e.kind.clone(),
            name: e.name.clone(),
            sha256: e.sha256.clone(),
        })
        .collect();
    Json(AuditLog { entries })
}

fn code_kind(kind: &str) -> Option<ResourceType> {
    match kind {
        "transform" => Some(ResourceType::Transform),
        "validator" => Some(ResourceType::Validator),
        "assignor" => Some(ResourceType::Assignor),
        _ => None,
    }
}

/// `record` (a change of deployed code) with its audit entry: who (the request's principal and
/// address), what, when.
pub fn audited(
    record: MetadataRecord,
    action: &str,
    kind: ResourceType,
    name: &str,
    sha256: Option<String>,
) -> MetadataRecord {
    let client = crate::server::current_client();
    let entry = AuditEntry {
        at_ms: now_ms(),
        principal: client.as_ref().map_or_else(|| "User:ANONYMOUS".to_string(), |c| c.principal.to_string()),
        client_host: client.as_ref().map_or_else(String::new, |c| c.peer.ip().to_canonical().to_string()),
        action: action.to_string(),
        kind: audit_kind(kind).to_string(),
        name: name.to_string(),
        sha256,
    };
    tracing::info!(target: "runnel::audit", principal = %entry.principal, client = %entry.client_host, action, kind = entry.kind, name, sha256 = ?entry.sha256, "deployed code changed");
    MetadataRecord::Audited { record: Box::new(record), entry }
}

fn audit_kind(kind: ResourceType) -> &'static str {
    match kind {
        ResourceType::Transform => "transform",
        ResourceType::Validator => "validator",
        ResourceType::Assignor => "assignor",
        _ => "other",
    }
}
