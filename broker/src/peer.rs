//! The Kafka protocol client one node uses to reach the other brokers of its cluster: request
//! framing over one TCP connection (`Connection`, also what the follower fetchers use) and
//! `Peers`, typed calls to a broker by node id over pooled connections, addresses from the
//! metadata image. HTTP produce and consumer instances, and transform outputs, use it to reach
//! the leader of a partition (or a group's coordinator) that is not this node.
//!
//! Owns: the pooled connections to other brokers. Invariants: a connection carries one request
//! at a time and goes back to the pool only after a whole, well-formed answer (one whose
//! request failed, timed out or was dropped half-way is closed, so no answer can ever be read
//! as another request's); response frames are bounded before they are allocated; no lock is
//! held across an `.await`; requests in flight to one broker are bounded. It knows nothing of
//! what the requests mean: callers map answers and errors. Other brokers are reached at the
//! address they registered unless `--broker-address-override` names another
//! (`BrokerAddresses`); clients are told the registered one either way.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, EnvelopeRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::controller::{Controller, MetadataImage};
use crate::security::sasl::{InterBrokerSasl, Mechanism};
use crate::security::scram::ScramClient;
use crate::security::tls::TlsContext;

/// Largest response frame a peer call accepts: a Fetch answer is bounded by the request's
/// `max_bytes` (at most `fetch.max.bytes`), plus headroom for the fields around the records.
pub const MAX_RESPONSE_FRAME: usize = 64 << 20;
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle connections kept per broker; more are opened on demand and closed after use.
const IDLE_PER_BROKER: usize = 8;
/// Requests in flight to one broker at once (a caller beyond it waits for a slot). Parked
/// requests (JoinGroup, long-poll fetches) each hold one, so this is well above what the
/// consumer instances of a node keep parked in the usual case.
const IN_FLIGHT_PER_BROKER: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("broker {0} is not registered (no endpoint in the metadata)")]
    NoEndpoint(u64),
    #[error("broker {node}: {source}")]
    Io {
        node: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("broker {node}: no answer within {timeout_ms} ms")]
    Timeout { node: u64, timeout_ms: u64 },
    #[error("broker {node}: {reason}")]
    Codec { node: u64, reason: String },
    #[error("broker {node}: SASL authentication to its inter-broker listener failed: {reason}")]
    Authentication { node: u64, reason: String },
}

impl PeerError {
    /// The broker the call went to.
    pub fn node(&self) -> u64 {
        match self {
            PeerError::NoEndpoint(node)
            | PeerError::Io { node, .. }
            | PeerError::Timeout { node, .. }
            | PeerError::Codec { node, .. }
            | PeerError::Authentication { node, .. } => *node,
        }
    }

    fn with_node(self, node: u64) -> PeerError {
        match self {
            PeerError::NoEndpoint(_) => PeerError::NoEndpoint(node),
            PeerError::Io { source, .. } => PeerError::Io { node, source },
            PeerError::Timeout { timeout_ms, .. } => PeerError::Timeout { node, timeout_ms },
            PeerError::Codec { reason, .. } => PeerError::Codec { node, reason },
            PeerError::Authentication { reason, .. } => PeerError::Authentication { node, reason },
        }
    }
}

/// The bytes of a connection to another broker: TCP, or TLS over it when the inter-broker
/// listener uses TLS.
trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerStream for T {}

/// One Kafka protocol connection from this node to another broker: size-prefixed frames,
/// correlation ids checked, one request at a time.
pub struct Connection {
    stream: Box<dyn PeerStream>,
    client_id: StrBytes,
    next_correlation_id: i32,
}

impl Connection {
    /// Connects to `addr` (`host:port`) within `connect_timeout`, with TLS when `tls` says the
    /// inter-broker listener uses it (the other broker's certificate must carry the address's
    /// IP). Errors name node 0: callers that know the node attach it.
    pub async fn connect(
        addr: &str,
        client_id: StrBytes,
        connect_timeout: Duration,
        tls: Option<&TlsContext>,
        sasl: Option<&InterBrokerSasl>,
    ) -> Result<Connection, PeerError> {
        let io = |source| PeerError::Io { node: 0, source };
        let addr: SocketAddr = match addr.parse() {
            Ok(a) => a,
            Err(_) => tokio::net::lookup_host(addr)
                .await
                .map_err(io)?
                .next()
                .ok_or_else(|| io(std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))?,
        };
        let timed_out = || PeerError::Timeout { node: 0, timeout_ms: connect_timeout.as_millis() as u64 };
        let deadline = tokio::time::Instant::now() + connect_timeout;
        let tcp =
            tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await.map_err(|_| timed_out())?.map_err(io)?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn PeerStream> = match tls {
            Some(tls) => {
                let host = addr.ip().to_string();
                match tokio::time::timeout_at(deadline, tls.connect(&host, tcp)).await.map_err(|_| timed_out())? {
                    Some(stream) => Box::new(stream.map_err(io)?),
                    None => {
                        return Err(io(std::io::Error::other("no TLS client configuration for inter-broker traffic")))
                    }
                }
            }
            None => Box::new(tcp),
        };
        let mut connection = Connection { stream, client_id, next_correlation_id: 1 };
        if let Some(sasl) = sasl {
            tokio::time::timeout_at(deadline, connection.authenticate(sasl)).await.map_err(|_| timed_out())??;
        }
        Ok(connection)
    }

    /// The SASL exchange with the other broker's SASL inter-broker listener (KIP-152:
    /// SaslHandshake v1, then SaslAuthenticate tokens), as Kafka's own inter-broker client does.
    async fn authenticate(&mut self, sasl: &InterBrokerSasl) -> Result<(), PeerError> {
        const AUTH_FRAME_MAX: usize = 1 << 20;
        let failed = |reason: String| PeerError::Authentication { node: 0, reason };
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
        let answer = self.call(1, &handshake, AUTH_FRAME_MAX).await?;
        if answer.error_code != 0 {
            return Err(failed(format!("{} refused (error {})", sasl.mechanism.name(), answer.error_code)));
        }
        let token = |bytes: Vec<u8>| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
        let refused = |answer: &kafka_protocol::messages::SaslAuthenticateResponse| {
            failed(answer.error_message.as_deref().unwrap_or("authentication failed").to_string())
        };
        match sasl.mechanism {
            Mechanism::Plain => {
                let plain = format!("\0{}\0{}", sasl.username, sasl.password).into_bytes();
                let answer = self.call(2, &token(plain), AUTH_FRAME_MAX).await?;
                if answer.error_code != 0 {
                    return Err(refused(&answer));
                }
            }
            Mechanism::Scram(mechanism) => {
                let mut client = ScramClient::new(mechanism, &sasl.username, &sasl.password);
                let first = self.call(2, &token(client.first()), AUTH_FRAME_MAX).await?;
                if first.error_code != 0 {
                    return Err(refused(&first));
                }
                let last = client.last(&first.auth_bytes).map_err(|e| failed(e.to_string()))?;
                let answer = self.call(2, &token(last), AUTH_FRAME_MAX).await?;
                if answer.error_code != 0 {
                    return Err(refused(&answer));
                }
                client.verify(&answer.auth_bytes).map_err(|e| failed(format!("the server's signature: {e}")))?;
            }
        }
        Ok(())
    }

    /// Sends one request and reads its answer (a frame of at most `max_response_frame` bytes).
    /// After an error the connection is in an unknown state and must be dropped.
    pub async fn call<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        max_response_frame: usize,
    ) -> Result<R::Response, PeerError> {
        let codec = |reason: String| PeerError::Codec { node: 0, reason };
        let io = |source| PeerError::Io { node: 0, source };
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let api = ApiKey::try_from(R::KEY).map_err(|_| codec(format!("unknown api key {}", R::KEY)))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, api.request_header_version(version)).map_err(|e| codec(e.to_string()))?;
        request.encode(&mut buf, version).map_err(|e| codec(e.to_string()))?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).await.map_err(io)?;
        // Over TLS the request's last records may still be in the TLS layer after the write.
        self.stream.flush().await.map_err(io)?;
        let size = self.stream.read_i32().await.map_err(io)?;
        if size < 0 || size as usize > max_response_frame {
            return Err(codec(format!("response frame of {size} bytes")));
        }
        let mut frame = vec![0u8; size as usize];
        self.stream.read_exact(&mut frame).await.map_err(io)?;
        let mut frame = Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
            .map_err(|e| codec(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(codec(format!("correlation id {} for {correlation_id}", header.correlation_id)));
        }
        R::Response::decode(&mut frame, version).map_err(|e| codec(e.to_string()))
    }
}

/// Where this node reaches another broker: the `host:port` it registered (what clients are
/// told in Metadata), unless an override names another for it. An override serves a test's
/// link proxy or a NAT between brokers, where the address clients use is not the one brokers
/// can (or should) use between themselves.
#[derive(Clone, Default)]
pub struct BrokerAddresses {
    overrides: Arc<BTreeMap<u64, String>>,
    /// Present when the inter-broker listener uses TLS: how to connect to it.
    tls: Option<Arc<TlsContext>>,
    /// Present when it uses SASL: how to authenticate to it.
    sasl: Option<Arc<InterBrokerSasl>>,
}

impl BrokerAddresses {
    pub fn new(
        overrides: BTreeMap<u64, String>,
        tls: Option<Arc<TlsContext>>,
        sasl: Option<Arc<InterBrokerSasl>>,
    ) -> BrokerAddresses {
        BrokerAddresses { overrides: Arc::new(overrides), tls, sasl }
    }

    /// How connections to other brokers are protected (`None`: plain TCP).
    pub fn tls(&self) -> Option<&TlsContext> {
        self.tls.as_deref()
    }

    /// How connections to other brokers authenticate (`None`: they do not).
    pub fn sasl(&self) -> Option<&InterBrokerSasl> {
        self.sasl.as_deref()
    }

    /// The address of broker `node` for node-to-node traffic, `None` when it is not registered
    /// (an override alone does not make a broker: it must be in the metadata).
    pub fn resolve(&self, image: &MetadataImage, node: u64) -> Option<String> {
        let broker = image.brokers.get(&node)?;
        Some(self.overrides.get(&node).cloned().unwrap_or_else(|| format!("{}:{}", broker.host, broker.port)))
    }
}

/// Pooled connections to the other brokers, by node id.
pub struct Peers {
    controller: Controller,
    addresses: BrokerAddresses,
    client_id: StrBytes,
    pools: Mutex<HashMap<u64, Pool>>,
}

struct Pool {
    /// The address the idle connections were made to; a re-registration elsewhere drops them.
    addr: String,
    idle: Vec<Connection>,
    in_flight: Arc<Semaphore>,
}

impl Peers {
    pub fn new(node_id: u64, controller: Controller, addresses: BrokerAddresses) -> Peers {
        Peers {
            controller,
            addresses,
            client_id: StrBytes::from_string(format!("runnel-broker-{node_id}")),
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to broker `node` and waits at most `timeout` for its answer (connecting
    /// included). A pooled connection the peer closed meanwhile (an idle timeout, a restart) is
    /// replaced once by a new one; any other failure is the caller's to handle.
    pub async fn call<R: Request>(
        &self,
        node: u64,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        let timeout_error = PeerError::Timeout { node, timeout_ms: timeout.as_millis() as u64 };
        tokio::time::timeout(timeout, self.call_untimed(node, version, request)).await.map_err(|_| timeout_error)?
    }

    /// [`Peers::call`] on behalf of a client of this node (KIP-590's Envelope): broker `node`
    /// runs the request as `principal` (`User:<name>`) at `client_ip`, and authorizes it as
    /// that client, not as this broker.
    pub async fn call_for<R: Request>(
        &self,
        node: u64,
        version: i16,
        request: &R,
        timeout: Duration,
        principal: &str,
        client_ip: std::net::IpAddr,
    ) -> Result<R::Response, PeerError> {
        let codec = |reason: String| PeerError::Codec { node, reason };
        let api = ApiKey::try_from(R::KEY).map_err(|_| codec(format!("unknown api key {}", R::KEY)))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_client_id(Some(self.client_id.clone()));
        let mut inner = BytesMut::new();
        header.encode(&mut inner, api.request_header_version(version)).map_err(|e| codec(e.to_string()))?;
        request.encode(&mut inner, version).map_err(|e| codec(e.to_string()))?;
        let address = match client_ip {
            std::net::IpAddr::V4(ip) => Bytes::copy_from_slice(&ip.octets()),
            std::net::IpAddr::V6(ip) => Bytes::copy_from_slice(&ip.octets()),
        };
        let envelope = EnvelopeRequest::default()
            .with_request_data(inner.freeze())
            .with_request_principal(Some(Bytes::copy_from_slice(principal.as_bytes())))
            .with_client_host_address(address);
        let answer = self.call(node, 0, &envelope, timeout).await?;
        if answer.error_code != 0 {
            return Err(codec(format!("forwarded request refused (Envelope error {})", answer.error_code)));
        }
        let mut data = answer.response_data.ok_or_else(|| codec("Envelope answer without a response".into()))?;
        ResponseHeader::decode(&mut data, api.response_header_version(version)).map_err(|e| codec(e.to_string()))?;
        R::Response::decode(&mut data, version).map_err(|e| codec(e.to_string()))
    }

    async fn call_untimed<R: Request>(&self, node: u64, version: i16, request: &R) -> Result<R::Response, PeerError> {
        let addr = self.addresses.resolve(&self.controller.image(), node).ok_or(PeerError::NoEndpoint(node))?;
        let in_flight = self.pool(node, &addr, |pool| pool.in_flight.clone());
        let _permit = in_flight.acquire_owned().await.map_err(|_| PeerError::NoEndpoint(node))?;
        if let Some(mut conn) = self.pool(node, &addr, |pool| pool.idle.pop()) {
            match conn.call(version, request, MAX_RESPONSE_FRAME).await {
                Ok(response) => {
                    self.put_back(node, &addr, conn);
                    return Ok(response);
                }
                // The peer may have closed this idle connection: the request did not reach a
                // live handler, so it is sent again on a new one.
                Err(PeerError::Io { .. }) => {}
                Err(e) => return Err(e.with_node(node)),
            }
        }
        let (tls, sasl) = (self.addresses.tls(), self.addresses.sasl());
        let mut conn = Connection::connect(&addr, self.client_id.clone(), CONNECT_TIMEOUT, tls, sasl)
            .await
            .map_err(|e| e.with_node(node))?;
        let response = conn.call(version, request, MAX_RESPONSE_FRAME).await.map_err(|e| e.with_node(node))?;
        self.put_back(node, &addr, conn);
        Ok(response)
    }

    /// Runs `f` on the pool of `node`, made (or emptied of idle connections to an old
    /// address) first.
    fn pool<T>(&self, node: u64, addr: &str, f: impl FnOnce(&mut Pool) -> T) -> T {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let pool = pools.entry(node).or_insert_with(|| Pool {
            addr: addr.to_string(),
            idle: Vec::new(),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT_PER_BROKER)),
        });
        if pool.addr != addr {
            pool.addr = addr.to_string();
            pool.idle.clear();
        }
        f(pool)
    }

    fn put_back(&self, node: u64, addr: &str, conn: Connection) {
        self.pool(node, addr, |pool| {
            if pool.idle.len() < IDLE_PER_BROKER {
                pool.idle.push(conn);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    use tokio::net::TcpListener;

    /// A one-shot server: reads one request frame and answers `answer(correlation_id)` bytes.
    async fn serve_once(answer: impl FnOnce(i32) -> Vec<u8> + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let size = socket.read_i32().await.expect("size");
            let mut frame = vec![0u8; size as usize];
            socket.read_exact(&mut frame).await.expect("frame");
            let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            socket.write_all(&answer(correlation_id)).await.expect("answer");
        });
        addr
    }

    fn response_frame(correlation_id: i32, response: &ApiVersionsResponse) -> Vec<u8> {
        let mut body = BytesMut::new();
        ResponseHeader::default().with_correlation_id(correlation_id).encode(&mut body, 0).expect("header");
        response.encode(&mut body, 3).expect("body");
        [(body.len() as i32).to_be_bytes().to_vec(), body.to_vec()].concat()
    }

    async fn call_once(addr: &str, max_frame: usize) -> Result<ApiVersionsResponse, PeerError> {
        let mut conn = Connection::connect(addr, StrBytes::from_static_str("test"), CONNECT_TIMEOUT, None, None)
            .await
            .expect("connect");
        conn.call(3, &ApiVersionsRequest::default(), max_frame).await
    }

    #[tokio::test]
    async fn a_call_decodes_its_answer_and_refuses_oversized_or_mismatched_frames() {
        // Proves the framing: a well-formed answer decodes; a frame above the bound is refused
        // before it is read; an answer carrying another request's correlation id is refused.
        let good = ApiVersionsResponse::default().with_throttle_time_ms(7);
        let answer = good.clone();
        let addr = serve_once(move |id| response_frame(id, &answer)).await;
        assert_eq!(call_once(&addr, 1 << 20).await.expect("answer").throttle_time_ms, 7);

        let addr = serve_once(|_| (64i32 << 20).to_be_bytes().to_vec()).await;
        assert!(matches!(call_once(&addr, 1 << 20).await, Err(PeerError::Codec { .. })));

        let answer = good.clone();
        let addr = serve_once(move |id| response_frame(id + 1, &answer)).await;
        assert!(matches!(call_once(&addr, 1 << 20).await, Err(PeerError::Codec { .. })));
    }
}
