//! Accepting connections and serving one: 4-byte size framing, header decoding, dispatch,
//! response framing. Requests of a connection are handled one at a time, in order.
//!
//! Bounds (Kafka's settings, `ConnectionLimits`): at `max.connections` the acceptor stops
//! accepting until a connection closes; a connection beyond `max.connections.per.ip` is closed
//! as soon as it is accepted; past `max.connection.creation.rate` (KIP-612, every listener but
//! the inter-broker one) the acceptor waits before the next accept; `connections.max.idle.ms`
//! without traffic closes a connection.
//! A frame's bytes are taken from the `queued.max.request.bytes` pool after its size is read
//! and before its body is: while the pool is empty the connection reads nothing more (Kafka
//! mutes it) and the bytes wait in the kernel's socket buffer. They go back to the pool when
//! the response is written. The body buffer grows as bytes arrive, never to a size the client
//! declared before sending it.
//! An `accept` that fails because the process is out of descriptors (or the kernel of memory)
//! pauses the acceptor with a backoff (`AcceptErrors`, one log line per episode, counted) while
//! the open connections keep being served; the client waits in the listen backlog meanwhile.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::{ApiKey, EnvelopeRequest, EnvelopeResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::response::{pass_through_of, Frame, ResponseBuf};
use super::session::{as_client, ClientContext, ListenerSecurity, Session};
use super::{handlers, versions, Broker, ConnectionLimits};
use crate::security::acl::Operation;
use crate::security::rate::TokenBucket;
use crate::security::Principal;

/// The smallest allocation step of a frame body. A body buffer is sized by the bytes that have
/// arrived (in the read-ahead buffer and the kernel's), at least this, and doubles as more come:
/// a request sent at once is read with one allocation, one that trickles in costs at most twice
/// its bytes (the allocator makes every allocated byte resident, so allocations must track
/// arrivals).
const FRAME_CHUNK_BYTES: usize = 64 << 10;

/// Read-ahead buffer of a connection: a fixed cost per connection (`max.connections` of them),
/// enough to read a small request's size and body with one syscall. Larger bodies bypass it.
const READ_BUFFER_BYTES: usize = 16 << 10;

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("request of {size} bytes exceeds socket.request.max.bytes {max}")]
    TooLarge { size: i64, max: usize },
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("unknown api key {0}")]
    UnknownApi(i16),
    #[error("unsupported version {version} of {api:?}")]
    UnsupportedVersion { api: ApiKey, version: i16 },
    #[error("no traffic for connections.max.idle.ms {idle_ms}")]
    IdleExpired { idle_ms: u64 },
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("{0}")]
    Sasl(&'static str),
    #[error("SASL authentication failed")]
    AuthenticationFailed,
    /// An acks=0 produce failed on some partition: the client expects no response, so the
    /// connection is closed instead, which makes it refresh its metadata (Kafka's rule).
    #[error("acks=0 produce failed: {0}")]
    UnacknowledgedProduceFailed(String),
}

impl ConnectionError {
    /// The `reason` label of the errors metric.
    fn reason(&self) -> &'static str {
        match self {
            ConnectionError::Io(_) => "io",
            ConnectionError::TooLarge { .. } => "too_large",
            ConnectionError::Malformed(_) => "malformed",
            ConnectionError::UnknownApi(_) => "unknown_api",
            ConnectionError::UnsupportedVersion { .. } => "unsupported_version",
            ConnectionError::IdleExpired { .. } => "idle",
            ConnectionError::Tls(_) => "tls",
            ConnectionError::Sasl(_) => "sasl_state",
            ConnectionError::AuthenticationFailed => "authentication",
            ConnectionError::UnacknowledgedProduceFailed(_) => "acks0_produce_failed",
        }
    }
}

/// The `queued.max.request.bytes` pool, shared by every connection of the listener.
struct MemoryPool {
    bytes: Arc<Semaphore>,
    metrics: Arc<crate::metrics::Metrics>,
}

/// Bytes of the pool held by one request until it is dropped (its response written).
struct PoolGrant {
    _permit: OwnedSemaphorePermit,
    bytes: usize,
    metrics: Arc<crate::metrics::Metrics>,
}

impl MemoryPool {
    fn new(capacity_bytes: usize, metrics: Arc<crate::metrics::Metrics>) -> MemoryPool {
        // The semaphore counts at most usize::MAX >> 3 permits; any real pool is far below.
        let capacity_bytes = capacity_bytes.min(Semaphore::MAX_PERMITS);
        metrics.memory_pool_available_bytes.set(capacity_bytes as i64);
        metrics.memory_pool_used_bytes.set(0);
        MemoryPool { bytes: Arc::new(Semaphore::new(capacity_bytes)), metrics }
    }

    /// Waits until `bytes` are free (first come, first served) and takes them. `bytes` is a
    /// frame size already checked against `socket.request.max.bytes` (an i32, at most the pool).
    async fn acquire(&self, bytes: usize) -> PoolGrant {
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        // The semaphore is never closed, so acquiring only waits.
        let permit = match self.bytes.clone().acquire_many_owned(permits).await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the request memory pool is never closed"),
        };
        self.metrics.memory_pool_used_bytes.add(bytes as i64);
        self.metrics.memory_pool_available_bytes.sub(bytes as i64);
        PoolGrant { _permit: permit, bytes, metrics: self.metrics.clone() }
    }
}

impl Drop for PoolGrant {
    fn drop(&mut self) {
        self.metrics.memory_pool_used_bytes.sub(self.bytes as i64);
        self.metrics.memory_pool_available_bytes.add(self.bytes as i64);
    }
}

/// First and longest pause of an acceptor whose `accept` keeps failing.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// The failed accepts of one listener (the Kafka and the HTTP one). Out of descriptors (EMFILE,
/// ENFILE) or memory, `accept` fails at once for as long as nothing is freed: retrying at once
/// would spin a core and log a line per attempt, so the acceptor waits, doubling the pause up to
/// [`ACCEPT_BACKOFF_MAX`], and logs the first failure of an episode and its end. A client that
/// gave up before being accepted (ECONNABORTED) is no episode. Kafka's acceptor and hyper back
/// off the same way.
pub struct AcceptErrors {
    listener: &'static str,
    counter: prometheus::IntCounter,
    failing_since: Option<Instant>,
    failures: u64,
    backoff: Duration,
}

impl AcceptErrors {
    pub fn new(listener: &'static str, metrics: &crate::metrics::Metrics) -> AcceptErrors {
        let counter = metrics.accept_errors.with_label_values(&[listener]);
        AcceptErrors { listener, counter, failing_since: None, failures: 0, backoff: ACCEPT_BACKOFF_MIN }
    }

    /// After `accept` failed: logs (the first of an episode), counts, and waits for the backoff.
    pub async fn failed(&mut self, error: &std::io::Error) {
        self.counter.inc();
        if matches!(error.raw_os_error(), Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPROTO)) {
            tracing::debug!(listener = self.listener, %error, "a client left before its connection was accepted");
            return;
        }
        self.failures += 1;
        if self.failing_since.is_none() {
            self.failing_since = Some(Instant::now());
            let exhausted =
                matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM));
            tracing::error!(
                listener = self.listener,
                %error,
                out_of_descriptors_or_memory = exhausted,
                "cannot accept connections; open connections are still served, new ones wait in the \
                 listen backlog while accepting is retried with backoff"
            );
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
    }

    /// After `accept` succeeded: ends an episode.
    pub fn accepted(&mut self) {
        if let Some(since) = self.failing_since.take() {
            tracing::warn!(
                listener = self.listener,
                failed_accepts = self.failures,
                failing_ms = since.elapsed().as_millis() as u64,
                "accepting connections again"
            );
            self.failures = 0;
            self.backoff = ACCEPT_BACKOFF_MIN;
        }
    }
}

/// State shared by the acceptor and every connection task.
struct Listener {
    limits: ConnectionLimits,
    pool: MemoryPool,
    /// One permit per connection allowed by `max.connections`.
    slots: Arc<Semaphore>,
    /// Open connections per client address, for `max.connections.per.ip`.
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    /// `max.connection.creation.rate`, shared by every listener but the inter-broker one.
    creation: Option<Mutex<TokenBucket>>,
}

/// The bucket of `max.connection.creation.rate`: `rate` connections a second, a second's worth
/// of burst.
fn creation_rate(rate: u32) -> TokenBucket {
    let rate = f64::from(rate.max(1));
    TokenBucket::new(rate, rate, std::time::Instant::now())
}

/// A connection's place in the per-address count, given back on drop.
struct IpSlot {
    listener: Arc<Listener>,
    ip: IpAddr,
}

impl Listener {
    /// Counts a connection from `ip`, or refuses it at `max.connections.per.ip`.
    fn take_ip_slot(self: &Arc<Self>, ip: IpAddr) -> Option<IpSlot> {
        let mut per_ip = self.per_ip.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = per_ip.entry(ip).or_insert(0);
        if *count >= self.limits.max_connections_per_ip {
            return None;
        }
        *count += 1;
        Some(IpSlot { listener: self.clone(), ip })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut per_ip = self.listener.per_ip.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = per_ip.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

/// Serves every Kafka listener of the node until `shutdown` turns true: one acceptor per
/// listener, each connection in its own task. The bounds (`max.connections`, the request
/// memory pool) are the broker's, shared by all listeners, as Kafka's are.
pub async fn serve(
    listeners: Vec<(TcpListener, ListenerSecurity)>,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let limits = broker.settings.connection_limits.clone();
    let shared = Arc::new(Listener {
        pool: MemoryPool::new(limits.queued_max_request_bytes, broker.metrics.clone()),
        slots: Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS))),
        per_ip: Mutex::new(HashMap::new()),
        creation: limits.max_connection_creation_rate.map(|rate| Mutex::new(creation_rate(rate))),
        limits,
    });
    // Kafka's ConnectionQuotas: with more than one listener, the inter-broker one is exempt
    // from max.connections (its connections take no slot), so clients filling the node's
    // slots never cut replication off.
    let protected = (listeners.len() > 1).then(|| broker.settings.inter_broker_listener.clone());
    let acceptors: Vec<_> = listeners
        .into_iter()
        .map(|(listener, security)| {
            let exempt = protected.as_deref().is_some_and(|name| *name == *security.name);
            let security = Arc::new(security);
            tokio::spawn(accept_loop(listener, security, exempt, shared.clone(), broker.clone(), shutdown.clone()))
        })
        .collect();
    for acceptor in acceptors {
        let _ = acceptor.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    security: Arc<ListenerSecurity>,
    exempt_from_max_connections: bool,
    shared: Arc<Listener>,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut accept_errors = AcceptErrors::new("kafka", &broker.metrics);
    let mut throttle = Duration::ZERO;
    let mut listener_rate = security.max_connection_creation_rate.map(creation_rate);
    loop {
        if !throttle.is_zero() {
            broker.metrics.acceptor_throttle_seconds.inc_by(throttle.as_secs_f64());
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                _ = tokio::time::sleep(throttle) => {}
            }
            throttle = Duration::ZERO;
        }
        // max.connections: like Kafka's acceptor, wait for a free slot before accepting; the
        // clients that arrive meanwhile wait in the listen backlog.
        let slot = match shared.slots.clone().try_acquire_owned() {
            _ if exempt_from_max_connections => None, // (the permit, if any, goes back at once)
            Ok(slot) => Some(slot),
            Err(_) => {
                tracing::debug!(max_connections = shared.limits.max_connections, "at max.connections: not accepting");
                let blocked = std::time::Instant::now();
                let slot = tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    slot = shared.slots.clone().acquire_owned() => slot,
                };
                broker.metrics.acceptor_blocked_seconds.inc_by(blocked.elapsed().as_secs_f64());
                match slot {
                    Ok(slot) => Some(slot),
                    // Never closed; without slots there is nothing left to accept.
                    Err(_) => return,
                }
            }
        };
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                accept_errors.accepted();
                // max.connection.creation.rate (KIP-612): past the rate, the next accept waits
                // (clients wait in the listen backlog); the inter-broker listener is exempt,
                // as in Kafka, so replication never queues behind a reconnect storm.
                // A listener's own rate applies on top, to the inter-broker listener too.
                let now = std::time::Instant::now();
                let broker_wide = match &shared.creation {
                    Some(rate) if *security.name != *broker.settings.inter_broker_listener => {
                        rate.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).charge(now)
                    }
                    _ => Duration::ZERO,
                };
                let own = listener_rate.as_mut().map_or(Duration::ZERO, |rate| rate.charge(now));
                throttle = broker_wide.max(own);
                let Some(ip_slot) = shared.take_ip_slot(peer.ip().to_canonical()) else {
                    // Kafka closes it at once (TooManyConnectionsException).
                    broker.metrics.connections_rejected.with_label_values(&["max_connections_per_ip"]).inc();
                    tracing::info!(
                        %peer,
                        max_connections_per_ip = shared.limits.max_connections_per_ip,
                        "closing connection: its address has max.connections.per.ip open"
                    );
                    drop(stream);
                    continue;
                };
                let broker = broker.clone();
                let shutdown = shutdown.clone();
                let shared = shared.clone();
                let security = security.clone();
                tokio::spawn(async move {
                    let _slots = (slot, ip_slot);
                    let metrics = broker.metrics.clone();
                    metrics.connections.inc();
                    metrics.connections_created.inc();
                    match open_connection(stream, peer, &security, broker, &shared, shutdown).await {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        Err(ConnectionError::Io(e)) => tracing::debug!(%peer, error = %e, "connection closed"),
                        Err(e @ ConnectionError::IdleExpired { .. }) => {
                            metrics.connections_idle_expired.inc();
                            tracing::debug!(%peer, error = %e, "closing idle connection");
                        }
                        Err(e @ (ConnectionError::Tls(_) | ConnectionError::AuthenticationFailed)) => {
                            metrics.kafka_request_error(e.reason());
                            tracing::info!(%peer, listener = %security.name, error = %e, "closing connection");
                        }
                        Err(e) => {
                            metrics.kafka_request_error(e.reason());
                            tracing::warn!(%peer, listener = %security.name, error = %e, "closing connection");
                        }
                    }
                    metrics.connections.dec();
                });
            }
            // EMFILE and friends: keep serving the connections we have, retry after a pause.
            Err(e) => accept_errors.failed(&e).await,
        }
    }
}

/// Completes the TLS handshake on a TLS listener (within `connections.max.idle.ms`), then
/// serves the connection.
async fn open_connection(
    stream: TcpStream,
    peer: SocketAddr,
    security: &ListenerSecurity,
    broker: Arc<Broker>,
    listener: &Listener,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let fd = stream.as_raw_fd();
    match &security.tls {
        None => {
            let session = Session::new(security, Principal::anonymous());
            let (reader, writer) = stream.into_split();
            handle_connection(reader, writer, fd, peer, session, broker, listener, shutdown).await
        }
        Some(tls) => {
            let idle = Duration::from_millis(listener.limits.connections_max_idle_ms);
            let stream = tokio::time::timeout(idle, tls.acceptor().accept(stream))
                .await
                .map_err(|_| ConnectionError::IdleExpired { idle_ms: listener.limits.connections_max_idle_ms })?
                .map_err(ConnectionError::Tls)?;
            let session = Session::new(security, crate::security::tls::principal_of(stream.get_ref().1));
            let (reader, writer) = tokio::io::split(stream);
            handle_connection(reader, writer, fd, peer, session, broker, listener, shutdown).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn handle_connection<R, W>(
    reader: R,
    mut writer: W,
    fd: RawFd,
    peer: SocketAddr,
    mut session: Session,
    broker: Arc<Broker>,
    listener: &Listener,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let max = broker.settings.request_max_bytes;
    let idle_ms = listener.limits.connections_max_idle_ms;
    let idle = Duration::from_millis(idle_ms);
    let mut last_traffic = Instant::now();
    loop {
        let size = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            _ = tokio::time::sleep_until(last_traffic + idle) => return Err(ConnectionError::IdleExpired { idle_ms }),
            size = reader.read_i32() => match size {
                Ok(size) => size,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            },
        };
        let unauthenticated_max = session.unauthenticated_max();
        let max = unauthenticated_max.map_or(max, |bound| bound.min(max));
        if size < 0 || size as usize > max {
            return Err(ConnectionError::TooLarge { size: size as i64, max });
        }
        let size = size as usize;
        // Waiting for the pool is the broker's doing, not the client's: it does not count as
        // idle time. A request before authentication takes nothing from it (its size is
        // bounded above).
        let grant = match unauthenticated_max {
            Some(_) => None,
            None => tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                grant = listener.pool.acquire(size) => Some(grant),
            },
        };
        last_traffic = Instant::now();
        let frame = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            frame = read_body(&mut reader, fd, size, idle_ms, &mut last_traffic) => frame?,
        };
        let started = std::time::Instant::now();
        let api_key = if frame.len() >= 2 { i16::from_be_bytes([frame[0], frame[1]]) } else { -1 };
        if let Some(response) = handle_frame(&broker, frame, &mut session, peer).await? {
            if session.close_after_response {
                // KIP-306: a failed authentication is answered (and closed) only after the
                // delay, so each guess costs a client that long.
                tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                    _ = tokio::time::sleep(session.failed_authentication_delay()) => {}
                }
            }
            // A client that stops reading its responses would hold the connection (and its
            // request's pool bytes) forever: the write too must end within the idle time.
            tokio::time::timeout(idle, response.write_to(&mut writer))
                .await
                .map_err(|_| ConnectionError::IdleExpired { idle_ms })??;
        }
        drop(grant);
        if session.close_after_response {
            return Err(ConnectionError::AuthenticationFailed);
        }
        last_traffic = Instant::now();
        broker.metrics.kafka_request(api_key, started.elapsed().as_secs_f64());
        tracing::trace!(%peer, "request handled");
    }
}

/// Bytes that reached this connection and are not read yet: the read-ahead buffer's plus the
/// kernel's (FIONREAD). Sizing a buffer by them is sizing it by bytes that arrived.
fn arrived_bytes<R: AsyncRead>(reader: &BufReader<R>, fd: RawFd, wanted: usize) -> usize {
    if reader.buffer().len() >= wanted {
        // A small request read ahead whole: no syscall needed.
        return reader.buffer().len();
    }
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer; `fd` is the connection's socket,
    // open while `reader` lives. On a TLS connection the kernel holds ciphertext: its bytes
    // still arrived, and the body they make is a little smaller.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
    let in_kernel = if rc == 0 { queued.max(0) as usize } else { 0 };
    reader.buffer().len() + in_kernel
}

/// Reads a frame body of `size` bytes, allocating as the bytes arrive: a client that declares a
/// large frame and sends a little of it holds a little memory. Each read must bring bytes
/// within `connections.max.idle.ms` of the previous traffic.
async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    fd: RawFd,
    size: usize,
    idle_ms: u64,
    last_traffic: &mut Instant,
) -> Result<Bytes, ConnectionError> {
    let idle = Duration::from_millis(idle_ms);
    let mut body: Vec<u8> = Vec::new();
    while body.len() < size {
        if body.len() == body.capacity() {
            // What arrived, or double what was read, never past the frame: the capacity stays
            // at most `size`.
            let step = arrived_bytes(reader, fd, size - body.len()).max(body.len()).max(FRAME_CHUNK_BYTES);
            body.reserve_exact((size - body.len()).min(step));
        }
        let room = (body.capacity() - body.len()).min(size - body.len());
        let read = tokio::time::timeout_at(*last_traffic + idle, (&mut *reader).take(room as u64).read_buf(&mut body))
            .await
            .map_err(|_| ConnectionError::IdleExpired { idle_ms })??;
        if read == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        *last_traffic = Instant::now();
    }
    debug_assert_eq!(body.len(), size);
    Ok(Bytes::from(body))
}

/// Decodes one request frame, runs its handler as the connection's client and returns the
/// framed response (or none, for acks=0 produce).
async fn handle_frame(
    broker: &Broker,
    mut frame: Bytes,
    session: &mut Session,
    peer: SocketAddr,
) -> Result<Option<Frame>, ConnectionError> {
    if frame.len() < 8 {
        return Err(ConnectionError::Malformed(format!("frame of {} bytes has no request header", frame.len())));
    }
    let api_key_raw = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api = ApiKey::try_from(api_key_raw).map_err(|_| ConnectionError::UnknownApi(api_key_raw))?;
    if api == ApiKey::ApiVersions && !versions::is_supported(api, version) {
        // The spec: answer an unknown ApiVersions version with UNSUPPORTED_VERSION in a v0
        // response that lists what we support, so the client can pick.
        let body = handlers::api_versions::unsupported_version_response();
        return Ok(Some(frame_response(correlation_id, 0, &body, 0)?));
    }
    if !versions::is_supported(api, version) {
        return Err(ConnectionError::UnsupportedVersion { api, version });
    }
    if let Err(reason) = session.admit(api) {
        if reason == crate::security::sasl::SESSION_EXPIRED {
            broker.metrics.expired_connections_killed.inc();
        }
        return Err(ConnectionError::Sasl(reason));
    }
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| ConnectionError::Malformed(format!("{api:?} v{version} header: {e}")))?;
    let response_header_version = api.response_header_version(version);
    let decode_error = |e: anyhow::Error| ConnectionError::Malformed(format!("{api:?} v{version} body: {e}"));
    // The SASL exchange changes the connection's state: served here, not by a handler.
    match api {
        ApiKey::SaslHandshake => {
            let request = Decodable::decode(&mut frame, version).map_err(decode_error)?;
            let response = session.handshake(&request);
            return Ok(Some(frame_response(correlation_id, response_header_version, &response, version)?));
        }
        ApiKey::SaslAuthenticate => {
            let request = Decodable::decode(&mut frame, version).map_err(decode_error)?;
            // PLAIN derives a key from the password (thousands of HMACs, milliseconds): the
            // worker hands its other connections to another thread meanwhile.
            let response = match tokio::runtime::Handle::current().runtime_flavor() {
                tokio::runtime::RuntimeFlavor::MultiThread => {
                    tokio::task::block_in_place(|| session.authenticate(broker, &request))
                }
                _ => session.authenticate(broker, &request),
            };
            return Ok(Some(frame_response(correlation_id, response_header_version, &response, version)?));
        }
        ApiKey::Envelope => {
            let request = Decodable::decode(&mut frame, version).map_err(decode_error)?;
            let response = envelope(broker, request, session.context(peer)).await;
            return Ok(Some(frame_response(correlation_id, response_header_version, &response, version)?));
        }
        _ => {}
    }
    serve_request(broker, api, &header, frame, session.context(peer)).await
}

/// KIP-590's Envelope: a request another broker forwards on behalf of its own client (the HTTP
/// API's calls for an authenticated user), run with that client's principal and address. Only
/// a sender on the inter-broker listener allowed CLUSTER_ACTION on the cluster (a broker, as
/// Kafka accepts envelopes only from its privileged listener), and authenticated unless
/// User:ANONYMOUS is a super user, may act for someone else; the
/// inner request is authorized as its client, exactly as if it had come on its own.
/// Principals travel as `User:<name>` text, the client address as its 4 or 16 address bytes.
async fn envelope(broker: &Broker, request: EnvelopeRequest, sender: ClientContext) -> EnvelopeResponse {
    let refused = |error: ResponseError| EnvelopeResponse::default().with_error_code(error.code());
    let on_inter_broker_listener = sender.listener.as_deref() == Some(&*broker.settings.inter_broker_listener);
    let sender_may = as_client(sender.clone(), async { broker.authorized_cluster(Operation::ClusterAction) }).await;
    // An unauthenticated sender (a PLAINTEXT inter-broker listener) cannot be told from any
    // client there: granting User:ANONYMOUS CLUSTER_ACTION for replication must not let every
    // anonymous client act as any principal. Unless ANONYMOUS is a super user (it can do
    // anything anyway), it may not envelope.
    let settings = &broker.settings.authorizer;
    let anonymous_sender = settings.enabled && sender.principal.is_anonymous();
    if anonymous_sender && !settings.is_super_user(&sender.principal) {
        return refused(ResponseError::ClusterAuthorizationFailed);
    }
    if !on_inter_broker_listener || !sender_may {
        return refused(ResponseError::ClusterAuthorizationFailed);
    }
    let Some(client) = enveloped_client(&request, &sender) else {
        return refused(ResponseError::InvalidRequest);
    };
    let mut frame = request.request_data;
    if frame.len() < 4 {
        return refused(ResponseError::InvalidRequest);
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = match ApiKey::try_from(api_key) {
        // The exchange and Envelope itself belong to a connection, never inside an envelope.
        Ok(ApiKey::Envelope | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) | Err(_) => {
            return refused(ResponseError::InvalidRequest)
        }
        Ok(api) if !versions::is_supported(api, version) => return refused(ResponseError::UnsupportedVersion),
        Ok(api) => api,
    };
    let Ok(header) = RequestHeader::decode(&mut frame, api.request_header_version(version)) else {
        return refused(ResponseError::InvalidRequest);
    };
    match serve_request(broker, api, &header, frame, client).await {
        Ok(Some(response)) => EnvelopeResponse::default().with_response_data(Some(response.into_unframed())),
        Ok(None) => EnvelopeResponse::default(),
        Err(e) => {
            tracing::debug!(error = %e, ?api, "enveloped request refused");
            refused(ResponseError::InvalidRequest)
        }
    }
}

/// The client an envelope names; `None` when its principal or address does not parse.
fn enveloped_client(request: &EnvelopeRequest, sender: &ClientContext) -> Option<ClientContext> {
    let principal = Principal::parse(std::str::from_utf8(request.request_principal.as_deref()?).ok()?)?;
    let address = request.client_host_address.as_ref();
    let ip = match address.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(address).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(address).ok()?),
        _ => return None,
    };
    Some(ClientContext { peer: SocketAddr::new(ip, 0), listener: sender.listener.clone(), principal })
}

/// Decodes the body of one request (its header already read), runs its handler as `client`
/// and frames the answer (none for acks=0 produce).
async fn serve_request(
    broker: &Broker,
    api: ApiKey,
    header: &RequestHeader,
    mut frame: Bytes,
    client: ClientContext,
) -> Result<Option<Frame>, ConnectionError> {
    let (version, correlation_id) = (header.request_api_version, header.correlation_id);
    let response_header_version = api.response_header_version(version);
    let decode_error = |e: anyhow::Error| ConnectionError::Malformed(format!("{api:?} v{version} body: {e}"));
    if api == ApiKey::Produce {
        let request: kafka_protocol::messages::ProduceRequest =
            Decodable::decode(&mut frame, version).map_err(decode_error)?;
        let unacknowledged = request.acks == 0;
        let response = as_client(client, handlers::produce::handle(broker, header, request)).await;
        return match response {
            // acks=0: no response, or, when a partition failed, a closed connection (Kafka's
            // KafkaApis: the producer notices and refreshes its metadata; a response it did not
            // ask for would desynchronize its correlation ids).
            Some(response) if unacknowledged => match handlers::produce::first_error(&response) {
                Some(error) => Err(ConnectionError::UnacknowledgedProduceFailed(error)),
                None => Ok(None),
            },
            Some(response) => Ok(Some(frame_response(correlation_id, response_header_version, &response, version)?)),
            None => Ok(None),
        };
    }
    macro_rules! dispatch {
        ($( $key:ident => $module:ident ),* $(,)?) => {
            match api {
                $(
                    ApiKey::$key => {
                        let request = Decodable::decode(&mut frame, version).map_err(decode_error)?;
                        match as_client(client, handlers::$module::handle(broker, header, request)).await {
                            Some(response) => {
                                Some(frame_response(correlation_id, response_header_version, &response, version)?)
                            }
                            None => None,
                        }
                    }
                )*
                _ => return Err(ConnectionError::UnsupportedVersion { api, version }),
            }
        };
    }
    let response = dispatch! {
        ApiVersions => api_versions,
        Metadata => metadata,
        Fetch => fetch,
        ListOffsets => list_offsets,
        CreateTopics => create_topics,
        DeleteTopics => delete_topics,
        CreatePartitions => create_partitions,
        DeleteRecords => delete_records,
        InitProducerId => init_producer_id,
        OffsetForLeaderEpoch => offset_for_leader_epoch,
        DescribeConfigs => describe_configs,
        AlterConfigs => alter_configs,
        IncrementalAlterConfigs => incremental_alter_configs,
        DescribeCluster => describe_cluster,
        FindCoordinator => find_coordinator,
        OffsetCommit => offset_commit,
        OffsetFetch => offset_fetch,
        OffsetDelete => offset_delete,
        JoinGroup => join_group,
        SyncGroup => sync_group,
        Heartbeat => heartbeat,
        LeaveGroup => leave_group,
        ListGroups => list_groups,
        DescribeGroups => describe_groups,
        DeleteGroups => delete_groups,
        ConsumerGroupHeartbeat => consumer_group_heartbeat,
        ConsumerGroupDescribe => consumer_group_describe,
        ElectLeaders => elect_leaders,
        AlterPartitionReassignments => alter_partition_reassignments,
        ListPartitionReassignments => list_partition_reassignments,
        DescribeLogDirs => describe_log_dirs,
        DescribeQuorum => describe_quorum,
        AddPartitionsToTxn => add_partitions_to_txn,
        AddOffsetsToTxn => add_offsets_to_txn,
        EndTxn => end_txn,
        TxnOffsetCommit => txn_offset_commit,
        WriteTxnMarkers => write_txn_markers,
        DescribeTransactions => describe_transactions,
        ListTransactions => list_transactions,
        DescribeProducers => describe_producers,
        DescribeUserScramCredentials => describe_user_scram_credentials,
        DescribeClientQuotas => describe_client_quotas,
        CreateAcls => create_acls,
        DescribeAcls => describe_acls,
        DeleteAcls => delete_acls,
        AlterUserScramCredentials => alter_user_scram_credentials,
    };
    Ok(response)
}

/// `[size][response header][body]` in one buffer.
fn frame_response<T: Encodable + 'static>(
    correlation_id: i32,
    header_version: i16,
    body: &T,
    version: i16,
) -> Result<Frame, ConnectionError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let encode_error = |e: anyhow::Error| ConnectionError::Malformed(format!("response: {e}"));
    // Sized up front: the copied part is allocated once; fetched records are not copied at all.
    let size = header.compute_size(header_version).map_err(encode_error)?
        + body.compute_size(version).map_err(encode_error)?;
    let mut buf = ResponseBuf::new(4 + size, pass_through_of(body));
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version).map_err(encode_error)?;
    body.encode(&mut buf, version).map_err(encode_error)?;
    debug_assert_eq!(buf.len(), 4 + size);
    Ok(buf.into_frame())
}
