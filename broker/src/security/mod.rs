//! Who a client is and how its connection is protected (issue 15), with Kafka's names so its
//! clients and tools are configured the way they already are:
//! - `listeners`: the Kafka listeners of a node, each a name, an address and a security
//!   protocol (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`: Kafka's `listeners`,
//!   `advertised.listeners`, `listener.security.protocol.map`, `inter.broker.listener.name`);
//! - `tls`: TLS with rustls from PEM files (Kafka's PEM keystore and truststore), optional
//!   client certificates whose subject is the principal, reloaded when the files change;
//! - `scram`: SCRAM-SHA-256/512 (RFC 5802, RFC 7677) credentials and the server side of the
//!   exchange; `sasl`: the SASL state of one connection (KIP-152 SaslHandshake and
//!   SaslAuthenticate, PLAIN and SCRAM, KIP-368 re-authentication).
//!
//! A leaf module: it knows nothing of partitions, groups or the controller; the controller
//! stores SCRAM credentials as [`scram::ScramCredential`]s and the server asks [`sasl`] to
//! authenticate against them.
//!
//! Invariant: a connection on a SASL listener is served nothing but ApiVersions, SaslHandshake
//! and SaslAuthenticate until it has authenticated, and nothing at all once its session expired
//! without re-authenticating (`sasl::SaslSession::admits`).

pub mod acl;
pub mod listeners;
pub mod passwords;
pub mod rate;
pub mod sasl;
pub mod scram;
pub mod tls;

use std::fmt;
use std::sync::Arc;

/// The security settings of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    pub listeners: listeners::Listeners,
    /// The node's TLS settings (`ssl.*`): every TLS listener's but those in `listener_tls`, and
    /// HTTPS's.
    pub tls: Option<tls::TlsSettings>,
    /// The listeners (upper-case names, `CONTROLLER` among them) given settings of their own
    /// with `listener.name.<listener>.ssl.*`, resolved over `tls`.
    pub listener_tls: std::collections::BTreeMap<String, tls::TlsSettings>,
    /// The listeners given `listener.name.<listener>.max.connection.creation.rate`.
    pub listener_creation_rates: std::collections::BTreeMap<String, u32>,
    pub sasl: sasl::SaslSettings,
    pub authorizer: acl::AuthorizerSettings,
    /// `--add-scram`: users created at start unless they exist.
    pub bootstrap_users: Vec<scram::BootstrapUser>,
    /// How this node authenticates to the others when the inter-broker listener uses SASL.
    pub inter_broker_sasl: Option<std::sync::Arc<sasl::InterBrokerSasl>>,
    /// The metadata quorum's raft listener: `CONTROLLER` in `listener.security.protocol.map`
    /// (Kafka's `controller.listener.names`), PLAINTEXT or SSL.
    pub controller_protocol: SecurityProtocol,
    pub http: HttpSecurity,
}

/// How the HTTP API authenticates its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSecurity {
    /// `--http-authentication required`: every request but the dashboard's static files,
    /// `/openapi.json` and the login must authenticate.
    pub authentication: bool,
    /// `--http-tls`: HTTPS with the node's keystore.
    pub tls: bool,
    /// How long a dashboard login lasts.
    pub session_ms: u64,
    /// The longest lifetime an API token may have.
    pub token_max_lifetime_ms: u64,
    /// Unexpired API tokens per principal.
    pub tokens_max_per_principal: usize,
    /// Logins and API tokens one principal may be issued a minute on a node (each is a write to
    /// the metadata quorum); beyond it 429 with Retry-After.
    pub token_issues_per_minute: u32,
    /// How long a wrong password waits for its 401 (`connection.failed.authentication.delay.ms`,
    /// as on the Kafka listeners).
    pub failed_authentication_delay_ms: u64,
    /// Host names (besides IP literals, `localhost` and `*.localhost`) a request's `Host`
    /// header may name when HTTP authentication is off: `--http-allowed-hosts` and the
    /// listeners' advertised hosts. `*` allows any.
    pub allowed_hosts: Vec<String>,
}

impl HttpSecurity {
    /// Whether the `Host` header `host` (`name[:port]`) names this node. Without HTTP
    /// authentication anyone who reaches the port may do anything, so a page on another site
    /// must not reach it through DNS rebinding (its name resolving to this node's address,
    /// which makes its requests same-origin): such a request names the attacker's host. An IP
    /// literal cannot be rebound; a name must be one this node is known by.
    pub fn allows_host(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(v6) => return v6.split_once(']').is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok()),
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.allowed_hosts.iter().any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(&name))
    }
}

impl Default for HttpSecurity {
    fn default() -> HttpSecurity {
        HttpSecurity {
            authentication: false,
            tls: false,
            session_ms: 8 * 3_600_000,
            token_max_lifetime_ms: 7 * 24 * 3_600_000,
            tokens_max_per_principal: 100,
            token_issues_per_minute: 30,
            failed_authentication_delay_ms: sasl::FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
            allowed_hosts: Vec::new(),
        }
    }
}

impl SecurityConfig {
    /// The TLS settings listener `name` serves with (`CONTROLLER` for the raft listener).
    pub fn tls_of(&self, name: &str) -> Option<&tls::TlsSettings> {
        self.listener_tls.get(name).or(self.tls.as_ref())
    }
}

/// What a node exposes and how it is protected, as `/v1/cluster` reports it and the start log
/// warns about ("secure by default where it costs nothing").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityReport {
    pub authorizer: bool,
    pub listeners: Vec<ListenerReport>,
    /// Whether HTTP requests must authenticate (`--http-authentication required`).
    pub http_authenticated: bool,
    pub http_tls: bool,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerReport {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub address: std::net::SocketAddr,
    /// SASL, or TLS with required client certificates.
    pub authenticated: bool,
}

impl SecurityReport {
    /// The report of a node serving `listeners` (name, protocol, bound address) and HTTP at
    /// `http`: a warning for each listener reachable beyond loopback without authentication.
    pub fn new(
        config: &SecurityConfig,
        listeners: &[(String, std::net::SocketAddr)],
        http: std::net::SocketAddr,
        http_tls: bool,
        controller: Option<std::net::SocketAddr>,
    ) -> SecurityReport {
        let mut report =
            SecurityReport { authorizer: config.authorizer.enabled, http_tls, ..SecurityReport::default() };
        for (name, address) in listeners {
            let Some(listener) = config.listeners.listeners.iter().find(|l| &l.name == name) else { continue };
            let client_certificates_required =
                config.tls_of(name).is_some_and(|t| t.client_auth == tls::ClientAuth::Required);
            let authenticated = listener.protocol.uses_sasl()
                || (listener.protocol == SecurityProtocol::Ssl && client_certificates_required);
            if !authenticated && !address.ip().is_loopback() {
                report.warnings.push(format!(
                    "Kafka listener {name} ({}) at {address} is reachable beyond loopback and does not authenticate \
                     clients: anyone who can reach it is served{}",
                    listener.protocol,
                    if config.authorizer.enabled { " as User:ANONYMOUS" } else { " everything (no authorizer)" }
                ));
            }
            report.listeners.push(ListenerReport {
                name: name.clone(),
                protocol: listener.protocol,
                address: *address,
                authenticated,
            });
        }
        report.http_authenticated = config.http.authentication;
        if let Some(controller) = controller.filter(|a| !a.ip().is_loopback()) {
            let certificates = config.controller_protocol == SecurityProtocol::Ssl
                && config.tls_of("CONTROLLER").is_some_and(|t| t.client_auth == tls::ClientAuth::Required);
            if !certificates {
                report.warnings.push(format!(
                    "the metadata quorum's listener at {controller} is reachable beyond loopback without client \
                     certificates: anyone who can reach it can change the cluster's metadata (CONTROLLER:SSL with \
                     ssl.client.auth=required and the authorizer, or a private network)"
                ));
            }
        }
        if !http.ip().is_loopback() && !config.http.authentication {
            report.warnings.push(format!(
                "the HTTP API at {http} is reachable beyond loopback and does not authenticate requests: \
                 anyone who can reach it is served{} (--http-authentication required, or bind it to loopback)",
                if config.authorizer.enabled { " as User:ANONYMOUS" } else { " everything (no authorizer)" }
            ));
        }
        report
    }
}

/// Kafka's security protocol of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name (`SecurityProtocol.name`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's id (`SecurityProtocol.id`), as the metadata records carry it.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn parse(text: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(text.trim()))
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who a connection acts as: Kafka's `KafkaPrincipal` of type `User` (the only type Kafka's
/// authenticators produce). `User:ANONYMOUS` on a PLAINTEXT listener and on an SSL listener
/// without a client certificate; the SASL user name after SASL; the certificate's subject
/// (`CN=...,O=...`, RFC 2253 order) with a client certificate, Kafka's default mapping rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    name: Arc<str>,
}

impl Principal {
    pub const TYPE: &'static str = "User";

    pub fn user(name: &str) -> Principal {
        Principal { name: Arc::from(name) }
    }

    /// The principal `User:<name>` spells (as ACLs, tokens and envelopes store principals).
    pub fn parse(text: &str) -> Option<Principal> {
        text.strip_prefix(Principal::TYPE)?.strip_prefix(':').map(Principal::user)
    }

    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `text` (`User:<name>`, as ACLs and `super.users` spell principals) names this
    /// principal; compared without building the string.
    pub fn is(&self, text: &str) -> bool {
        text.strip_prefix(Principal::TYPE).and_then(|rest| rest.strip_prefix(':')) == Some(&*self.name)
    }

    pub fn is_anonymous(&self) -> bool {
        &*self.name == "ANONYMOUS"
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", Principal::TYPE, self.name)
    }
}

/// Compares two byte strings in time that depends only on their lengths (keys, proofs,
/// passwords: an early exit would tell an attacker how many leading bytes were right).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_protocols_parse_by_kafka_name_and_say_what_they_use() {
        for protocol in SecurityProtocol::ALL {
            assert_eq!(SecurityProtocol::parse(&protocol.name().to_lowercase()), Some(protocol));
        }
        assert_eq!(
            SecurityProtocol::parse("SASL_SSL").map(|p| (p.uses_tls(), p.uses_sasl(), p.id())),
            Some((true, true, 3))
        );
        assert_eq!(SecurityProtocol::parse("SSL").map(|p| (p.uses_tls(), p.uses_sasl())), Some((true, false)));
        assert_eq!(SecurityProtocol::parse("TLS"), None);
    }

    #[test]
    fn exposed_unauthenticated_listeners_are_warned_about() {
        let listeners = listeners::Listeners::parse(
            "INTERNAL://127.0.0.1:1,OPEN://0.0.0.0:2,SECURE://0.0.0.0:3",
            Some("INTERNAL:PLAINTEXT,OPEN:PLAINTEXT,SECURE:SASL_SSL"),
            None,
            None,
        )
        .unwrap();
        let config = SecurityConfig {
            listeners,
            tls: None,
            listener_tls: Default::default(),
            listener_creation_rates: Default::default(),
            sasl: sasl::SaslSettings::default(),
            authorizer: acl::AuthorizerSettings::default(),
            bootstrap_users: Vec::new(),
            controller_protocol: SecurityProtocol::Plaintext,
            http: HttpSecurity::default(),
            inter_broker_sasl: None,
        };
        let bound: Vec<(String, std::net::SocketAddr)> =
            [("INTERNAL", "127.0.0.1:1"), ("OPEN", "0.0.0.0:2"), ("SECURE", "0.0.0.0:3")]
                .into_iter()
                .map(|(n, a)| (n.to_string(), a.parse().unwrap()))
                .collect();
        let report = SecurityReport::new(&config, &bound, "127.0.0.1:8080".parse().unwrap(), false, None);
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(report.warnings[0].contains("OPEN"));
        assert_eq!(report.listeners.iter().filter(|l| l.authenticated).count(), 1);
        let exposed_http = SecurityReport::new(&config, &bound, "0.0.0.0:8080".parse().unwrap(), false, None);
        assert_eq!(exposed_http.warnings.len(), 2);
    }

    #[test]
    fn principals_print_as_kafka_principals_and_compare_in_constant_time() {
        assert_eq!(Principal::user("alice").to_string(), "User:alice");
        assert!(Principal::user("alice").is("User:alice"));
        assert!(!Principal::user("alice").is("User:alicia") && !Principal::user("alice").is("Group:alice"));
        assert!(Principal::anonymous().is_anonymous());
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
