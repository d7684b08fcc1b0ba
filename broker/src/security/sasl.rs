//! The SASL state of one connection on a `SASL_PLAINTEXT` or `SASL_SSL` listener (KIP-152:
//! SaslHandshake names the mechanism, SaslAuthenticate carries its tokens), with PLAIN and
//! SCRAM-SHA-256/512 checked against one user store (the SCRAM credentials of the metadata
//! image), and KIP-368 re-authentication: with `connections.max.reauth.ms` set, a successful
//! SaslAuthenticate (v1+) tells the client its session's lifetime; the client re-authenticates
//! on the same connection (same mechanism, same principal) before it ends, and a connection
//! whose session ended is closed at its next request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::passwords::PasswordChecks;
use super::scram::{ScramCredential, ScramMechanism, ScramServer, Step};
use super::Principal;

/// A SASL mechanism Runnel serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] =
        [Mechanism::Plain, Mechanism::Scram(ScramMechanism::Sha256), Mechanism::Scram(ScramMechanism::Sha512)];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name.trim())
    }
}

/// How this broker authenticates to the other brokers' SASL inter-broker listener (Kafka's
/// `sasl.mechanism.inter.broker.protocol` and the username and password its JAAS login module
/// would carry).
#[derive(Clone, PartialEq, Eq)]
pub struct InterBrokerSasl {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for InterBrokerSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerSasl")
            .field("mechanism", &self.mechanism.name())
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Kafka's `connection.failed.authentication.delay.ms` default.
pub const FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: u64 = 100;

/// `sasl.enabled.mechanisms`, `connections.max.reauth.ms` and
/// `connection.failed.authentication.delay.ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslSettings {
    pub mechanisms: Vec<Mechanism>,
    /// 0: sessions do not end (Kafka's default).
    pub max_reauth_ms: u64,
    /// How long a failed authentication waits for its answer and its connection's close
    /// (KIP-306), so that guessing passwords costs time.
    pub failed_authentication_delay_ms: u64,
    /// `sasl.server.max.receive.size`: bound on a request before authentication.
    pub max_receive_bytes: usize,
}

/// Kafka's `sasl.server.max.receive.size` default.
pub const MAX_RECEIVE_BYTES_DEFAULT: usize = 524_288;

impl Default for SaslSettings {
    fn default() -> SaslSettings {
        SaslSettings {
            mechanisms: Mechanism::ALL.to_vec(),
            max_reauth_ms: 0,
            failed_authentication_delay_ms: FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
            max_receive_bytes: MAX_RECEIVE_BYTES_DEFAULT,
        }
    }
}

impl SaslSettings {
    /// Parses `sasl.enabled.mechanisms` (comma-separated Kafka names).
    pub fn parse_mechanisms(text: &str) -> Result<Vec<Mechanism>, String> {
        let mut mechanisms = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let mechanism = Mechanism::parse(name).ok_or_else(|| {
                format!("unsupported SASL mechanism {name:?} in sasl.enabled.mechanisms: Runnel serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512")
            })?;
            if !mechanisms.contains(&mechanism) {
                mechanisms.push(mechanism);
            }
        }
        if mechanisms.is_empty() {
            return Err("sasl.enabled.mechanisms is empty".into());
        }
        Ok(mechanisms)
    }
}

/// Looks up the credential of a user for a mechanism (the metadata image's).
pub type Credentials<'a> = &'a dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>;

/// Kafka's error codes SASL answers with.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// The answer to a SaslHandshake.
#[derive(Debug, PartialEq, Eq)]
pub struct HandshakeAnswer {
    pub error_code: i16,
    pub mechanisms: Vec<&'static str>,
}

/// Why a connection whose session ended is closed (`Admission::Close`).
pub const SESSION_EXPIRED: &str = "the SASL session expired (connections.max.reauth.ms) without re-authentication";

/// Where a SaslAuthenticate left the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More tokens to exchange.
    Continue,
    Authenticated,
    /// KIP-368: the same principal authenticated again on its connection.
    Reauthenticated,
    Failed,
}

impl Progress {
    /// The `result` label of the authentications metric (`None`: not an end of an exchange).
    pub fn label(self) -> Option<&'static str> {
        match self {
            Progress::Continue => None,
            Progress::Authenticated => Some("success"),
            Progress::Reauthenticated => Some("reauthentication"),
            Progress::Failed => Some("failure"),
        }
    }
}

/// The answer to a SaslAuthenticate, and whether the connection closes after it is sent.
#[derive(Debug, PartialEq, Eq)]
pub struct AuthenticateAnswer {
    pub progress: Progress,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub auth_bytes: Vec<u8>,
    /// KIP-368: milliseconds until the session ends (0: it does not).
    pub session_lifetime_ms: i64,
    pub close: bool,
}

impl AuthenticateAnswer {
    fn failed(code: i16, message: String) -> AuthenticateAnswer {
        AuthenticateAnswer {
            progress: Progress::Failed,
            error_code: code,
            error_message: Some(message),
            auth_bytes: Vec::new(),
            session_lifetime_ms: 0,
            close: true,
        }
    }
}

enum State {
    /// Nothing but ApiVersions and SaslHandshake yet.
    Start,
    /// Handshake done, the first SaslAuthenticate is next.
    Handshaken(Mechanism),
    /// A SCRAM exchange between its first and last message.
    Scram(ScramServer),
    Authenticated,
    /// An exchange failed: the connection closes after the answer.
    Failed,
}

/// What a connection has established so far.
pub struct SaslSession {
    settings: Arc<SaslSettings>,
    state: State,
    /// The principal and mechanism of the first authentication (re-authentication must keep
    /// both), and when the session ends.
    authenticated: Option<(Principal, Mechanism, Option<Instant>)>,
}

/// Whether a request may be served on this connection now.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Serve,
    /// Close the connection (Kafka does: "Unexpected Kafka request of type X during SASL
    /// handshake", or an expired session).
    Close(&'static str),
}

impl SaslSession {
    pub fn new(settings: Arc<SaslSettings>) -> SaslSession {
        SaslSession { settings, state: State::Start, authenticated: None }
    }

    pub fn settings(&self) -> &SaslSettings {
        &self.settings
    }

    /// The authenticated principal, once there is one.
    pub fn principal(&self) -> Option<&Principal> {
        self.authenticated.as_ref().map(|(principal, _, _)| principal)
    }

    /// Whether a request of another API than ApiVersions, SaslHandshake and SaslAuthenticate
    /// may be served now (those three always reach their handlers).
    pub fn admits(&self, now: Instant) -> Admission {
        match (&self.state, &self.authenticated) {
            (State::Authenticated, Some((_, _, Some(expires)))) if now >= *expires => Admission::Close(SESSION_EXPIRED),
            (State::Authenticated, Some(_)) => Admission::Serve,
            (_, Some((_, _, expires))) if expires.is_none_or(|e| now < e) => Admission::Serve,
            _ => Admission::Close("request before SASL authentication completed"),
        }
    }

    pub fn handshake(&mut self, mechanism: &str) -> HandshakeAnswer {
        let enabled: Vec<&'static str> = self.settings.mechanisms.iter().map(|m| m.name()).collect();
        if !matches!(self.state, State::Start | State::Authenticated) {
            return HandshakeAnswer { error_code: ILLEGAL_SASL_STATE, mechanisms: enabled };
        }
        // KIP-368: re-authentication only where sessions expire (Kafka's
        // maybeBeginServerReauthentication); otherwise a handshake after authentication is
        // out of place.
        if matches!(self.state, State::Authenticated) && self.settings.max_reauth_ms == 0 {
            return HandshakeAnswer { error_code: ILLEGAL_SASL_STATE, mechanisms: enabled };
        }
        let Some(chosen) = Mechanism::parse(mechanism).filter(|m| self.settings.mechanisms.contains(m)) else {
            return HandshakeAnswer { error_code: UNSUPPORTED_SASL_MECHANISM, mechanisms: enabled };
        };
        if let Some((_, first, _)) = &self.authenticated {
            if *first != chosen {
                // KIP-368: re-authentication keeps the mechanism.
                return HandshakeAnswer { error_code: UNSUPPORTED_SASL_MECHANISM, mechanisms: vec![first.name()] };
            }
        }
        self.state = State::Handshaken(chosen);
        HandshakeAnswer { error_code: 0, mechanisms: enabled }
    }

    /// One SaslAuthenticate. `version` decides whether the session lifetime is told (v1+).
    pub fn authenticate(
        &mut self,
        token: &[u8],
        credentials: Credentials<'_>,
        passwords: &PasswordChecks,
        now: Instant,
    ) -> AuthenticateAnswer {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (mechanism, outcome) = match state {
            State::Handshaken(Mechanism::Plain) => (Mechanism::Plain, plain(token, credentials, passwords)),
            State::Handshaken(Mechanism::Scram(m)) => {
                let mut server = ScramServer::new(m);
                let step = server.step(token, |user| credentials(user, m));
                self.continue_scram(server, step)
            }
            State::Scram(mut server) => {
                let step = server.step(token, |_| None);
                self.continue_scram(server, step)
            }
            State::Start | State::Authenticated => {
                self.state = state;
                // Answered, then closed, as Kafka closes on a request out of the SASL order
                // ("Unexpected Kafka request ... during SASL handshake").
                return AuthenticateAnswer {
                    progress: Progress::Continue,
                    ..AuthenticateAnswer::failed(
                        ILLEGAL_SASL_STATE,
                        "SaslAuthenticate without a SaslHandshake before it".into(),
                    )
                };
            }
            State::Failed => {
                return AuthenticateAnswer::failed(ILLEGAL_SASL_STATE, "the SASL exchange already failed".into())
            }
        };
        match outcome {
            Outcome::Continue(challenge) => AuthenticateAnswer {
                progress: Progress::Continue,
                error_code: 0,
                error_message: None,
                auth_bytes: challenge,
                session_lifetime_ms: 0,
                close: false,
            },
            Outcome::Failed(reason) => {
                tracing::info!(mechanism = mechanism.name(), %reason, "SASL authentication failed");
                AuthenticateAnswer::failed(
                    SASL_AUTHENTICATION_FAILED,
                    format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                        mechanism.name()
                    ),
                )
            }
            Outcome::Done { user, response } => {
                let principal = Principal::user(&user);
                if let Some((previous, _, _)) = &self.authenticated {
                    if *previous != principal {
                        return AuthenticateAnswer::failed(
                            SASL_AUTHENTICATION_FAILED,
                            format!("Cannot change principals during re-authentication from {previous}: {principal}"),
                        );
                    }
                }
                let lifetime = self.settings.max_reauth_ms;
                let expires = (lifetime > 0).then(|| now + Duration::from_millis(lifetime));
                let progress =
                    if self.authenticated.is_some() { Progress::Reauthenticated } else { Progress::Authenticated };
                self.authenticated = Some((principal, mechanism, expires));
                self.state = State::Authenticated;
                AuthenticateAnswer {
                    progress,
                    error_code: 0,
                    error_message: None,
                    auth_bytes: response,
                    session_lifetime_ms: lifetime.min(i64::MAX as u64) as i64,
                    close: false,
                }
            }
        }
    }

    fn continue_scram(
        &mut self,
        server: ScramServer,
        step: Result<Step, super::scram::ScramError>,
    ) -> (Mechanism, Outcome) {
        let mechanism = Mechanism::Scram(server.mechanism());
        match step {
            Ok(Step::Continue(challenge)) => {
                self.state = State::Scram(server);
                (mechanism, Outcome::Continue(challenge))
            }
            Ok(Step::Done { user, response }) => (mechanism, Outcome::Done { user, response }),
            Err(e) => (mechanism, Outcome::Failed(e.to_string())),
        }
    }
}

enum Outcome {
    Continue(Vec<u8>),
    Done { user: String, response: Vec<u8> },
    Failed(String),
}

/// SASL/PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, the password checked against the
/// user's SCRAM credentials (either mechanism; PBKDF2 once per password while they stay, see
/// [`PasswordChecks`]).
fn plain(token: &[u8], credentials: Credentials<'_>, passwords: &PasswordChecks) -> Outcome {
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Outcome::Failed("malformed PLAIN token".into());
    };
    let (Ok(authzid), Ok(user), Ok(password)) =
        (std::str::from_utf8(authzid), std::str::from_utf8(user), std::str::from_utf8(password))
    else {
        return Outcome::Failed("PLAIN token is not UTF-8".into());
    };
    if user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return Outcome::Failed("PLAIN authorization id differs from the user".into());
    }
    let user_credentials: Vec<ScramCredential> =
        ScramMechanism::ALL.into_iter().filter_map(|m| credentials(user, m)).collect();
    // An unknown user takes as long as a wrong password: the refusal's timing does not tell
    // whether the user exists.
    match passwords.verify(user, password, &user_credentials) {
        true => Outcome::Done { user: user.to_string(), response: Vec::new() },
        false if user_credentials.is_empty() => Outcome::Failed("unknown user".into()),
        false => Outcome::Failed("wrong password".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::tests::TestClient;
    use crate::security::scram::MIN_ITERATIONS;

    fn store() -> impl Fn(&str, ScramMechanism) -> Option<ScramCredential> {
        let alice =
            ScramCredential::from_password(ScramMechanism::Sha512, "alice-secret", b"salt".to_vec(), MIN_ITERATIONS);
        let bob =
            ScramCredential::from_password(ScramMechanism::Sha512, "bob-secret", b"pepper".to_vec(), MIN_ITERATIONS);
        move |user, mechanism| match (user, mechanism) {
            ("alice", ScramMechanism::Sha512) => Some(alice.clone()),
            ("bob", ScramMechanism::Sha512) => Some(bob.clone()),
            _ => None,
        }
    }

    fn scram(session: &mut SaslSession, user: &str, password: &str, now: Instant) -> AuthenticateAnswer {
        let credentials = store();
        let client = TestClient {
            mechanism: ScramMechanism::Sha512,
            user: user.into(),
            password: password.into(),
            nonce: "n0nce".into(),
        };
        assert_eq!(session.handshake("SCRAM-SHA-512").error_code, 0);
        let first = session.authenticate(&client.first(), &credentials, &PasswordChecks::new(), now);
        if first.error_code != 0 {
            return first;
        }
        let (last, _) = client.last(&first.auth_bytes);
        session.authenticate(&last, &credentials, &PasswordChecks::new(), now)
    }

    #[test]
    fn nothing_is_served_before_authentication_and_everything_after() {
        let now = Instant::now();
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        assert!(matches!(session.admits(now), Admission::Close(_)));
        let answer = scram(&mut session, "alice", "alice-secret", now);
        assert_eq!((answer.error_code, answer.session_lifetime_ms, answer.close), (0, 0, false));
        assert!(answer.auth_bytes.starts_with(b"v="));
        assert_eq!(session.principal(), Some(&Principal::user("alice")));
        assert_eq!(session.admits(now + Duration::from_secs(86_400)), Admission::Serve);
    }

    #[test]
    fn a_wrong_password_fails_with_kafkas_error_and_closes() {
        let now = Instant::now();
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        let answer = scram(&mut session, "alice", "wrong", now);
        assert_eq!((answer.error_code, answer.close), (SASL_AUTHENTICATION_FAILED, true));
        assert!(answer.error_message.unwrap().contains("invalid credentials with SASL mechanism SCRAM-SHA-512"));
        assert!(matches!(session.admits(now), Admission::Close(_)));

        let passwords = PasswordChecks::new();
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        assert_eq!(session.handshake("PLAIN").error_code, 0);
        let answer = session.authenticate(b"\0alice\0nope", &store(), &passwords, now);
        assert_eq!(answer.error_code, SASL_AUTHENTICATION_FAILED);
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        assert_eq!(session.handshake("PLAIN").error_code, 0);
        assert_eq!(session.authenticate(b"\0alice\0alice-secret", &store(), &passwords, now).error_code, 0);
        assert_eq!(session.principal(), Some(&Principal::user("alice")));
        // The next PLAIN login of that password (a reconnect, or HTTP Basic) skips PBKDF2.
        let alice = store()("alice", ScramMechanism::Sha512).expect("alice");
        assert!(passwords.remembered("alice", "alice-secret", &[alice.clone()]));
        assert!(!passwords.remembered("alice", "nope", &[alice]));
    }

    #[test]
    fn out_of_order_requests_follow_kafka() {
        // SaslAuthenticate before any handshake: answered ILLEGAL_SASL_STATE and closed. A
        // handshake after authentication where sessions never expire (no re-authentication):
        // ILLEGAL_SASL_STATE, the session kept.
        let now = Instant::now();
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        let early = session.authenticate(b"\0alice\0alice-secret", &store(), &PasswordChecks::new(), now);
        assert_eq!((early.error_code, early.close), (ILLEGAL_SASL_STATE, true));
        let mut session = SaslSession::new(Arc::new(SaslSettings::default()));
        assert_eq!(scram(&mut session, "alice", "alice-secret", now).error_code, 0);
        assert_eq!(session.handshake("SCRAM-SHA-512").error_code, ILLEGAL_SASL_STATE);
        assert_eq!(session.admits(now), Admission::Serve);
        let reauth = SaslSettings { max_reauth_ms: 60_000, ..SaslSettings::default() };
        let mut session = SaslSession::new(Arc::new(reauth));
        assert_eq!(scram(&mut session, "alice", "alice-secret", now).error_code, 0);
        assert_eq!(scram(&mut session, "alice", "alice-secret", now).error_code, 0, "re-authenticates");
    }

    #[test]
    fn handshakes_name_the_enabled_mechanisms() {
        let settings =
            SaslSettings { mechanisms: vec![Mechanism::Scram(ScramMechanism::Sha512)], ..SaslSettings::default() };
        let mut session = SaslSession::new(Arc::new(settings));
        let answer = session.handshake("PLAIN");
        assert_eq!(
            answer,
            HandshakeAnswer { error_code: UNSUPPORTED_SASL_MECHANISM, mechanisms: vec!["SCRAM-SHA-512"] }
        );
        assert_eq!(
            session.authenticate(b"x", &store(), &PasswordChecks::new(), Instant::now()).error_code,
            ILLEGAL_SASL_STATE
        );
        assert_eq!(SaslSettings::parse_mechanisms("PLAIN, SCRAM-SHA-256").unwrap().len(), 2);
        assert!(SaslSettings::parse_mechanisms("GSSAPI").unwrap_err().contains("GSSAPI"));
    }

    #[test]
    fn sessions_end_after_max_reauth_ms_unless_the_same_principal_reauthenticates() {
        let now = Instant::now();
        let settings = Arc::new(SaslSettings { max_reauth_ms: 1_000, ..SaslSettings::default() });
        let mut session = SaslSession::new(settings.clone());
        assert_eq!(scram(&mut session, "alice", "alice-secret", now).session_lifetime_ms, 1_000);
        assert_eq!(session.admits(now + Duration::from_millis(999)), Admission::Serve);
        assert!(matches!(session.admits(now + Duration::from_millis(1_000)), Admission::Close(_)));
        // Re-authentication on the same connection renews it.
        let later = now + Duration::from_millis(900);
        assert_eq!(scram(&mut session, "alice", "alice-secret", later).error_code, 0);
        assert_eq!(session.admits(now + Duration::from_millis(1_500)), Admission::Serve);
        // Another mechanism or another principal is refused.
        assert_eq!(session.handshake("PLAIN").error_code, UNSUPPORTED_SASL_MECHANISM);
        let answer = scram(&mut session, "bob", "bob-secret", later);
        assert_eq!((answer.error_code, answer.close), (SASL_AUTHENTICATION_FAILED, true));
        assert!(answer.error_message.unwrap().contains("Cannot change principals"));
    }
}
