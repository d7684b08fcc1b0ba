//! Who the client of a Kafka connection is: the listener it came in on (its name and security
//! protocol), the principal its TLS certificate or SASL exchange established, and the SASL
//! state (`security::sasl`) that decides what it may be served. Handlers read the client of
//! the request they serve through [`client_host`], [`listener_name`] and [`principal`]
//! (a task-local set around each request).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::Broker;
use crate::security::sasl::{Admission, SaslSession, SaslSettings, ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM};
use crate::security::tls::TlsContext;
use crate::security::{Principal, SecurityProtocol};

/// How one Kafka listener protects its connections.
#[derive(Clone)]
pub struct ListenerSecurity {
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    /// Present exactly when the protocol uses TLS.
    pub tls: Option<Arc<TlsContext>>,
    pub sasl: Arc<SaslSettings>,
    /// `listener.name.<listener>.max.connection.creation.rate` (KIP-612).
    pub max_connection_creation_rate: Option<u32>,
}

impl ListenerSecurity {
    pub fn plaintext(name: &str) -> ListenerSecurity {
        ListenerSecurity {
            name: Arc::from(name),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: Arc::new(SaslSettings::default()),
            max_connection_creation_rate: None,
        }
    }
}

/// The client of the request being handled.
#[derive(Debug, Clone)]
pub struct ClientContext {
    pub peer: SocketAddr,
    /// `None` for requests that do not come from a Kafka listener (HTTP).
    pub listener: Option<Arc<str>>,
    pub principal: Principal,
}

tokio::task_local! {
    static CLIENT: ClientContext;
}

/// The address of the client whose request is being handled, in Kafka's `/<ip>` form.
pub fn client_host() -> String {
    CLIENT.try_with(|client| format!("/{}", client.peer.ip())).unwrap_or_default()
}

/// The listener the request being handled came in on (Metadata, FindCoordinator and
/// DescribeCluster answer with each broker's endpoint on that listener). `None` outside a
/// Kafka connection.
pub fn listener_name() -> Option<Arc<str>> {
    CLIENT.try_with(|client| client.listener.clone()).ok().flatten()
}

/// The principal of the request being handled (`User:ANONYMOUS` when nothing established one).
pub fn principal() -> Principal {
    CLIENT.try_with(|client| client.principal.clone()).unwrap_or_else(|_| Principal::anonymous())
}

/// The client of the request being handled; `None` for the node's own calls of a handler
/// (transforms, markers, the group and transaction coordinators), which are never refused.
pub fn current_client() -> Option<ClientContext> {
    CLIENT.try_with(|client| client.clone()).ok()
}

/// Runs `future` as the request of `client`.
pub async fn as_client<F: std::future::Future>(client: ClientContext, future: F) -> F::Output {
    CLIENT.scope(client, future).await
}

/// The security state of one connection.
pub(super) struct Session {
    listener: Arc<str>,
    /// From the client certificate (TLS listeners), else anonymous.
    transport_principal: Principal,
    /// On SASL listeners.
    sasl: Option<SaslSession>,
    /// Set by a failed SaslAuthenticate: the connection closes once its answer is written.
    pub close_after_response: bool,
}

impl Session {
    pub fn new(security: &ListenerSecurity, transport_principal: Principal) -> Session {
        Session {
            listener: security.name.clone(),
            transport_principal,
            sasl: security.protocol.uses_sasl().then(|| SaslSession::new(security.sasl.clone())),
            close_after_response: false,
        }
    }

    /// How long a failed authentication's answer and close wait (KIP-306).
    pub fn failed_authentication_delay(&self) -> Duration {
        Duration::from_millis(self.sasl.as_ref().map_or(0, |sasl| sasl.settings().failed_authentication_delay_ms))
    }

    /// The bound on the next request before authentication (`sasl.server.max.receive.size`);
    /// `None` once authenticated, or on a listener without SASL. Such requests are read
    /// outside the `queued.max.request.bytes` pool, as Kafka's SaslServerAuthenticator reads
    /// them, so clients without credentials cannot hold its bytes.
    pub fn unauthenticated_max(&self) -> Option<usize> {
        let sasl = self.sasl.as_ref()?;
        sasl.principal().is_none().then(|| sasl.settings().max_receive_bytes)
    }

    pub fn principal(&self) -> Principal {
        match &self.sasl {
            Some(sasl) => sasl.principal().cloned().unwrap_or_else(Principal::anonymous),
            None => self.transport_principal.clone(),
        }
    }

    pub fn context(&self, peer: SocketAddr) -> ClientContext {
        ClientContext { peer, listener: Some(self.listener.clone()), principal: self.principal() }
    }

    /// Whether a request of `api` may be served now; `Err` names why the connection closes.
    pub fn admit(&self, api: ApiKey) -> Result<(), &'static str> {
        match (&self.sasl, api) {
            (None, _) | (_, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) => Ok(()),
            (Some(sasl), _) => match sasl.admits(Instant::now()) {
                Admission::Serve => Ok(()),
                Admission::Close(reason) => Err(reason),
            },
        }
    }

    pub fn handshake(&mut self, request: &SaslHandshakeRequest) -> SaslHandshakeResponse {
        let Some(sasl) = &mut self.sasl else {
            // Kafka: a listener without SASL is past authentication before the first request.
            return SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE);
        };
        let answer = sasl.handshake(request.mechanism.as_str());
        // Kafka answers an unsupported mechanism, then closes the connection (after the
        // failed-authentication delay).
        self.close_after_response |= answer.error_code == UNSUPPORTED_SASL_MECHANISM;
        SaslHandshakeResponse::default()
            .with_error_code(answer.error_code)
            .with_mechanisms(answer.mechanisms.into_iter().map(StrBytes::from_static_str).collect())
    }

    pub fn authenticate(&mut self, broker: &Broker, request: &SaslAuthenticateRequest) -> SaslAuthenticateResponse {
        let Some(sasl) = &mut self.sasl else {
            return SaslAuthenticateResponse::default().with_error_code(ILLEGAL_SASL_STATE).with_error_message(Some(
                StrBytes::from_static_str(
                    "SaslAuthenticate on a listener without SASL (its security protocol is not SASL_*)",
                ),
            ));
        };
        let image = broker.controller.image();
        let credentials = |user: &str, mechanism| image.scram_credentials.get(&(user.to_string(), mechanism)).cloned();
        let answer = sasl.authenticate(&request.auth_bytes, &credentials, &broker.passwords, Instant::now());
        self.close_after_response |= answer.close;
        if let Some(result) = answer.progress.label() {
            broker.metrics.authentications.with_label_values(&[&self.listener, result]).inc();
        }
        SaslAuthenticateResponse::default()
            .with_error_code(answer.error_code)
            .with_error_message(answer.error_message.map(StrBytes::from_string))
            .with_auth_bytes(Bytes::from(answer.auth_bytes))
            .with_session_lifetime_ms(answer.session_lifetime_ms)
    }
}
