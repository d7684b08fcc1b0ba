//! Binding the node's Kafka listeners (`security::listeners`): one socket per listener, its
//! TLS and SASL settings, and the endpoints the broker registers (advertised host and port
//! per listener name; the inter-broker one is also the registration's own address).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::session::ListenerSecurity;
use crate::controller::ListenerEndpoint;
use crate::security::tls::{TlsContext, TlsError};
use crate::security::SecurityConfig;

#[derive(Debug, thiserror::Error)]
pub enum ListenerBindError {
    #[error("binding the Kafka listener {name} at {addr}: {source}")]
    Bind {
        name: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
}

/// The bound listeners of a node.
pub struct KafkaListeners {
    /// What `server::serve` accepts on.
    pub sockets: Vec<(TcpListener, ListenerSecurity)>,
    /// Name → bound address, in `listeners` order (the first is the node's `kafka_addr`).
    pub addresses: Vec<(String, SocketAddr)>,
    /// What the broker registers: every listener as clients are told to reach it.
    pub endpoints: Vec<ListenerEndpoint>,
    /// The endpoint of `inter.broker.listener.name`.
    pub inter_broker: ListenerEndpoint,
    /// The node's TLS configuration, when a listener uses TLS or the settings are given.
    pub tls: Option<Arc<TlsContext>>,
}

/// Loads the node's TLS configuration, when it has one (an error stops the node from starting).
pub fn load_tls(security: &SecurityConfig) -> Result<Option<Arc<TlsContext>>, TlsError> {
    match &security.tls {
        // Whether this node also connects with TLS: its inter-broker or raft listener uses it.
        Some(settings) => Ok(Some(TlsContext::load(settings.clone(), security.connects_with_tls())?)),
        None => Ok(None),
    }
}

/// Binds every Kafka listener of `security`; `tls` is the node's (from [`load_tls`]).
pub async fn bind(
    security: &SecurityConfig,
    tls: Option<Arc<TlsContext>>,
) -> Result<KafkaListeners, ListenerBindError> {
    let sasl = Arc::new(security.sasl.clone());
    let mut bound = KafkaListeners {
        sockets: Vec::new(),
        addresses: Vec::new(),
        endpoints: Vec::new(),
        inter_broker: ListenerEndpoint { name: String::new(), host: String::new(), port: 0, security_protocol: 0 },
        tls: tls.clone(),
    };
    for config in &security.listeners.listeners {
        let bind_error = |source| ListenerBindError::Bind { name: config.name.clone(), addr: config.bind, source };
        let socket = TcpListener::bind(config.bind).await.map_err(bind_error)?;
        let addr = socket.local_addr().map_err(bind_error)?;
        let endpoint = ListenerEndpoint {
            name: config.name.clone(),
            host: config.advertised_host.clone().unwrap_or_else(|| addr.ip().to_string()),
            port: config.advertised_port.unwrap_or(addr.port()),
            security_protocol: config.protocol.id(),
        };
        if config.name == security.listeners.inter_broker {
            bound.inter_broker = endpoint.clone();
        }
        let listener_security = ListenerSecurity {
            name: Arc::from(config.name.as_str()),
            protocol: config.protocol,
            tls: if config.protocol.uses_tls() { tls.clone() } else { None },
            sasl: sasl.clone(),
        };
        bound.sockets.push((socket, listener_security));
        bound.addresses.push((config.name.clone(), addr));
        bound.endpoints.push(endpoint);
    }
    Ok(bound)
}
