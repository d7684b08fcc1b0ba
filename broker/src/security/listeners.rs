//! Kafka's listener settings: `listeners=NAME://host:port,...`, each name mapped to a security
//! protocol by `listener.security.protocol.map` (by default the four protocol names map to
//! themselves), `advertised.listeners` (what Metadata tells a client that connected to a
//! listener; by default the bound address) and `inter.broker.listener.name` (the listener the
//! other brokers reach this one on; by default the first).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::SecurityProtocol;

/// One Kafka listener of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Upper case, as Kafka normalises listener names.
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// From `advertised.listeners` (`None`: the bound address, its port once bound).
    pub advertised_host: Option<String>,
    pub advertised_port: Option<u16>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenerError {
    #[error("invalid listener {0:?}: expected NAME://host:port (e.g. SASL_SSL://0.0.0.0:9094)")]
    Syntax(String),
    #[error("listener name {0} appears twice in listeners")]
    Duplicate(String),
    #[error(
        "listener {0} has no security protocol: name it in listener.security.protocol.map \
         (NAME:PROTOCOL, protocols PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
    )]
    NoProtocol(String),
    #[error("invalid listener.security.protocol.map entry {0:?}: expected NAME:PROTOCOL with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")]
    MapEntry(String),
    #[error("advertised.listeners names {0}, which is not in listeners")]
    UnknownAdvertised(String),
    #[error("inter.broker.listener.name {0} is not in listeners")]
    UnknownInterBroker(String),
    #[error("listeners is empty")]
    Empty,
}

/// Parses `NAME://host:port`. An empty host binds every interface (Kafka's rule), `localhost`
/// is 127.0.0.1; other hosts must be IP addresses.
fn parse_endpoint(text: &str) -> Result<(String, String, u16), ListenerError> {
    let syntax = || ListenerError::Syntax(text.to_string());
    let (name, address) = text.trim().split_once("://").ok_or_else(syntax)?;
    let (host, port) = address.rsplit_once(':').ok_or_else(syntax)?;
    let port: u16 = port.parse().map_err(|_| syntax())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(syntax());
    }
    Ok((name.to_ascii_uppercase(), host.to_string(), port))
}

fn bind_address(text: &str, host: &str, port: u16) -> Result<SocketAddr, ListenerError> {
    let ip: IpAddr = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        host => host.parse().map_err(|_| ListenerError::Syntax(text.to_string()))?,
    };
    Ok(SocketAddr::new(ip, port))
}

/// Parses `listener.security.protocol.map` (`NAME:PROTOCOL,...`); without one, the four
/// protocol names map to themselves.
pub fn protocol_map(text: Option<&str>) -> Result<BTreeMap<String, SecurityProtocol>, ListenerError> {
    let Some(text) = text else {
        return Ok(SecurityProtocol::ALL.into_iter().map(|p| (p.name().to_string(), p)).collect());
    };
    let mut map = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| ListenerError::MapEntry(entry.into()))?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| ListenerError::MapEntry(entry.into()))?;
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    Ok(map)
}

/// The resolved listeners, in the order `listeners` names them, and the inter-broker one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    pub listeners: Vec<ListenerConfig>,
    /// A name in `listeners`.
    pub inter_broker: String,
}

impl Listeners {
    /// The one listener named PLAINTEXT (the node's `--kafka-listen`, advertised as
    /// `--advertised-host` and `--advertised-port` say): what a node without `listeners` serves.
    /// It speaks PLAINTEXT unless `protocol_map` maps the name to another protocol (Kafka allows
    /// any name to map to any protocol).
    pub fn single(
        bind: SocketAddr,
        advertised_host: Option<String>,
        advertised_port: Option<u16>,
        protocol_map: Option<&str>,
    ) -> Result<Listeners, ListenerError> {
        let protocol = match protocol_map {
            Some(_) => *self::protocol_map(protocol_map)?
                .get("PLAINTEXT")
                .ok_or_else(|| ListenerError::NoProtocol("PLAINTEXT".into()))?,
            None => SecurityProtocol::Plaintext,
        };
        Ok(Listeners {
            listeners: vec![ListenerConfig {
                name: "PLAINTEXT".into(),
                protocol,
                bind,
                advertised_host,
                advertised_port,
            }],
            inter_broker: "PLAINTEXT".into(),
        })
    }

    pub fn parse(
        listeners: &str,
        protocol_map: Option<&str>,
        advertised: Option<&str>,
        inter_broker: Option<&str>,
    ) -> Result<Listeners, ListenerError> {
        let map = self::protocol_map(protocol_map)?;
        let mut parsed: Vec<ListenerConfig> = Vec::new();
        for text in listeners.split(',').map(str::trim).filter(|l| !l.is_empty()) {
            let (name, host, port) = parse_endpoint(text)?;
            if parsed.iter().any(|l| l.name == name) {
                return Err(ListenerError::Duplicate(name));
            }
            let protocol = *map.get(&name).ok_or_else(|| ListenerError::NoProtocol(name.clone()))?;
            let bind = bind_address(text, &host, port)?;
            parsed.push(ListenerConfig { name, protocol, bind, advertised_host: None, advertised_port: None });
        }
        if parsed.is_empty() {
            return Err(ListenerError::Empty);
        }
        for text in advertised.unwrap_or_default().split(',').map(str::trim).filter(|l| !l.is_empty()) {
            let (name, host, port) = parse_endpoint(text)?;
            let listener = parsed.iter_mut().find(|l| l.name == name).ok_or(ListenerError::UnknownAdvertised(name))?;
            listener.advertised_host = (!host.is_empty()).then_some(host);
            listener.advertised_port = Some(port);
        }
        let inter_broker = match inter_broker.map(|n| n.trim().to_ascii_uppercase()) {
            Some(name) if parsed.iter().any(|l| l.name == name) => name,
            Some(name) => return Err(ListenerError::UnknownInterBroker(name)),
            None => parsed[0].name.clone(),
        };
        Ok(Listeners { listeners: parsed, inter_broker })
    }

    pub fn inter_broker(&self) -> &ListenerConfig {
        self.listeners.iter().find(|l| l.name == self.inter_broker).expect("the inter-broker listener is a listener")
    }

    pub fn any_tls(&self) -> bool {
        self.listeners.iter().any(|l| l.protocol.uses_tls())
    }

    pub fn any_sasl(&self) -> bool {
        self.listeners.iter().any(|l| l.protocol.uses_sasl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_parse_with_kafka_defaults_and_custom_names() {
        let parsed = Listeners::parse("PLAINTEXT://127.0.0.1:9092, sasl_ssl://:9094", None, None, None).expect("valid");
        assert_eq!(parsed.listeners.len(), 2);
        assert_eq!(parsed.listeners[1].name, "SASL_SSL");
        assert_eq!(parsed.listeners[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(parsed.listeners[1].bind, "0.0.0.0:9094".parse().unwrap());
        assert_eq!(parsed.inter_broker, "PLAINTEXT");

        let custom = Listeners::parse(
            "INTERNAL://127.0.0.1:0,EXTERNAL://localhost:0",
            Some("INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT"),
            Some("EXTERNAL://broker.example:19094"),
            Some("internal"),
        )
        .expect("valid");
        assert_eq!(custom.inter_broker().protocol, SecurityProtocol::Ssl);
        let external = &custom.listeners[1];
        assert_eq!(
            (external.advertised_host.as_deref(), external.advertised_port),
            (Some("broker.example"), Some(19094))
        );
        assert!(custom.any_tls() && custom.any_sasl());
    }

    #[test]
    fn bad_listener_settings_are_refused_with_the_setting_named() {
        assert_eq!(
            Listeners::parse("EXTERNAL://:9094", None, None, None),
            Err(ListenerError::NoProtocol("EXTERNAL".into()))
        );
        assert_eq!(
            Listeners::parse("PLAINTEXT://:1,PLAINTEXT://:2", None, None, None),
            Err(ListenerError::Duplicate("PLAINTEXT".into()))
        );
        assert!(matches!(Listeners::parse("127.0.0.1:9092", None, None, None), Err(ListenerError::Syntax(_))));
        assert!(matches!(Listeners::parse("A://:1", Some("A:TLS"), None, None), Err(ListenerError::MapEntry(_))));
        assert_eq!(
            Listeners::parse("PLAINTEXT://:1", None, Some("SSL://h:2"), None),
            Err(ListenerError::UnknownAdvertised("SSL".into()))
        );
        assert_eq!(
            Listeners::parse("PLAINTEXT://:1", None, None, Some("SSL")),
            Err(ListenerError::UnknownInterBroker("SSL".into()))
        );
        assert_eq!(Listeners::parse(" ", None, None, None), Err(ListenerError::Empty));
    }
}

/// What one listener sets for itself with Kafka's listener prefix
/// (`listener.name.<listener>.<property>=<value>`): its own TLS settings, and its own
/// `max.connection.creation.rate` (KIP-612, on top of the broker-wide one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerOverrides {
    /// `Some` once any `ssl.*` property is given.
    pub tls: Option<super::tls::TlsOverrides>,
    pub max_connection_creation_rate: Option<u32>,
}

/// The properties a listener may set with the prefix.
pub const LISTENER_PROPERTIES: [&str; 5] = [
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.client.auth",
    "max.connection.creation.rate",
];

/// Parses `listener.name.<listener>.<property>=<value>` entries into each listener's overrides
/// (upper-case names, as listener names are normalised).
pub fn parse_listener_configs(entries: &[String]) -> Result<BTreeMap<String, ListenerOverrides>, String> {
    let mut all: BTreeMap<String, ListenerOverrides> = BTreeMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let syntax =
            || format!("invalid listener config {entry:?}: expected listener.name.<listener>.<property>=<value>");
        let (key, value) = entry.split_once('=').ok_or_else(syntax)?;
        let (key, value) = (key.trim(), value.trim());
        let (listener, property) =
            key.strip_prefix("listener.name.").and_then(|rest| rest.split_once('.')).ok_or_else(syntax)?;
        if listener.is_empty() {
            return Err(syntax());
        }
        let overrides = all.entry(listener.to_ascii_uppercase()).or_default();
        if property == "max.connection.creation.rate" {
            let rate = value.parse::<u32>().ok().filter(|r| *r > 0);
            overrides.max_connection_creation_rate =
                Some(rate.ok_or_else(|| format!("invalid {key} {value:?}: expected a positive whole number"))?);
            continue;
        }
        if !overrides.tls.get_or_insert_with(Default::default).set(key, property, value)? {
            return Err(format!(
                "listener config {key}: {property} cannot be set per listener (these can: {})",
                LISTENER_PROPERTIES.join(", ")
            ));
        }
    }
    Ok(all)
}
