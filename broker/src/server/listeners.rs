//! Binding the node's Kafka listeners (`security::listeners`): one socket per listener, its
//! TLS and SASL settings, and the endpoints the broker registers (advertised host and port
//! per listener name; the inter-broker one is also the registration's own address).

use std::collections::BTreeMap;
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
}

/// The node's TLS configurations: its own (`ssl.*`: HTTPS and every TLS listener without
/// settings of its own) and each listener's with `listener.name.<listener>.ssl.*`.
#[derive(Debug, Default)]
pub struct NodeTls {
    pub node: Option<Arc<TlsContext>>,
    by_listener: BTreeMap<String, Arc<TlsContext>>,
}

impl NodeTls {
    /// What listener `name` (`CONTROLLER`: the raft listener) serves and connects with.
    pub fn of(&self, name: &str) -> Option<Arc<TlsContext>> {
        self.by_listener.get(name).or(self.node.as_ref()).cloned()
    }

    /// Every configuration, each once (each reloads its own files).
    pub fn all(&self) -> impl Iterator<Item = &Arc<TlsContext>> {
        self.node.iter().chain(self.by_listener.values())
    }
}

/// Loads the node's TLS configurations (an error stops the node from starting). A
/// configuration also connects (as a client) when this node reaches others with it: the
/// inter-broker listener's and the raft listener's when they use TLS, the node's for HTTPS
/// between nodes.
pub fn load_tls(security: &SecurityConfig) -> Result<NodeTls, TlsError> {
    let inter_broker = security.listeners.inter_broker();
    let connects = |name: &str| {
        (name == inter_broker.name && inter_broker.protocol.uses_tls())
            || (name == "CONTROLLER" && security.controller_protocol.uses_tls())
    };
    let mut tls = NodeTls::default();
    for (name, settings) in &security.listener_tls {
        tls.by_listener.insert(name.clone(), TlsContext::load(settings.clone(), connects(name))?);
    }
    if let Some(settings) = &security.tls {
        let connects = security.http.tls
            || [inter_broker.name.as_str(), "CONTROLLER"]
                .into_iter()
                .any(|name| connects(name) && !security.listener_tls.contains_key(name));
        tls.node = Some(TlsContext::load(settings.clone(), connects)?);
    }
    Ok(tls)
}

/// Binds every Kafka listener of `security` with its TLS configuration from `tls`.
pub async fn bind(security: &SecurityConfig, tls: &NodeTls) -> Result<KafkaListeners, ListenerBindError> {
    let sasl = Arc::new(security.sasl.clone());
    let mut bound = KafkaListeners {
        sockets: Vec::new(),
        addresses: Vec::new(),
        endpoints: Vec::new(),
        inter_broker: ListenerEndpoint { name: String::new(), host: String::new(), port: 0, security_protocol: 0 },
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
            tls: if config.protocol.uses_tls() { tls.of(&config.name) } else { None },
            sasl: sasl.clone(),
            max_connection_creation_rate: security.listener_creation_rates.get(&config.name).copied(),
        };
        bound.sockets.push((socket, listener_security));
        bound.addresses.push((config.name.clone(), addr));
        bound.endpoints.push(endpoint);
    }
    Ok(bound)
}
