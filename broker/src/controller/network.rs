//! Raft RPCs between metadata quorum members (voters and observers) over TCP: the wire format
//! and the client side.
//!
//! Owns: the framing (`[u32 BE length][JSON]`, at most `MAX_FRAME_BYTES` either way), the request
//! and response vocabulary (`RpcRequest`/`RpcResponse` in an `Envelope` naming sender and
//! receiver), `PeerPool` (connections to peers, reused while healthy) and `PeerClient`, openraft's
//! `RaftNetwork` for one target.
//! Invariant: one request, then exactly one response, per connection at a time; a connection that
//! saw any error or timeout is closed, never reused, so a late response can never be taken for the
//! answer to a later request. Forwarded proposals always use a fresh connection, so a failure
//! before the request was written (connect) is distinguishable from one after (outcome unknown).

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout as RaftTimeout,
    Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, RPCTypes, RaftNetwork, RaftNetworkFactory};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::raft_types::TypeConfig;
use super::record::{ApplyOutcome, MetadataRecord, NodeId};
use crate::security::tls::TlsContext;

/// Largest frame sent or accepted (a snapshot chunk is at most `SNAPSHOT_CHUNK_BYTES` of raw data,
/// about 4x that as JSON).
pub(crate) const MAX_FRAME_BYTES: usize = 64 << 20;
/// Raw bytes per InstallSnapshot chunk.
pub(crate) const SNAPSHOT_CHUNK_BYTES: u64 = 4 << 20;
/// A pooled connection idle longer than this is closed instead of reused (the server closes idle
/// connections after `server::IDLE_TIMEOUT`, which is longer).
const POOL_IDLE_MAX: Duration = Duration::from_secs(30);
const POOL_CONNECTIONS_PER_PEER: usize = 4;

/// Why an RPC to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("cannot connect to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("connecting to {addr} timed out")]
    ConnectTimeout { addr: String },
    #[error("connection to peer failed")]
    Io(#[source] io::Error),
    /// A new connection failed before an answer (the peer, or something in between, accepted
    /// and closed it): as unreachable as a refused connect, so openraft backs off instead of
    /// retrying in a tight loop.
    #[error("{addr} closed a new connection without answering")]
    ClosedUnanswered {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("peer did not answer in time")]
    Timeout,
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("cannot encode or decode an RPC frame")]
    Codec(#[source] serde_json::Error),
    #[error("reached node {actual} where node {expected} was expected")]
    WrongNode { expected: NodeId, actual: NodeId },
    #[error("peer answered with a response of the wrong kind")]
    UnexpectedResponse,
    #[error("peer could not serve the request: {message}")]
    Remote { message: String },
}

impl RpcError {
    /// True if the request was certainly not delivered (safe to retry a non-idempotent request).
    pub(crate) fn not_sent(&self) -> bool {
        matches!(self, RpcError::Connect { .. } | RpcError::ConnectTimeout { .. })
    }
}

/// Addressing of every request frame.
#[derive(Serialize, Deserialize)]
pub(crate) struct Envelope<T> {
    pub(crate) from: NodeId,
    pub(crate) to: NodeId,
    pub(crate) body: T,
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A proposal forwarded by a follower; the receiver proposes it only if it is the leader.
    Propose {
        record: MetadataRecord,
        timeout_ms: u64,
    },
    /// Asks the leader for an index that covers everything committed (a linearizable read point).
    ReadIndex {
        timeout_ms: u64,
    },
    /// A broker renews its lease on the active controller (answered only by the leader).
    BrokerHeartbeat {
        node_id: NodeId,
        broker_epoch: i64,
        want_shutdown: bool,
    },
    /// A broker-only node asks to be added to the membership as an observer (an openraft
    /// learner) at `addr`, its raft listener (answered only by the leader).
    AddObserver {
        node_id: NodeId,
        addr: String,
        timeout_ms: u64,
    },
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Propose(Result<Proposed, ForwardError>),
    ReadIndex(Result<Option<u64>, ForwardError>),
    BrokerHeartbeat(Result<(), ForwardError>),
    AddObserver(Result<(), ForwardError>),
    /// The envelope named another node: addresses are misconfigured.
    WrongNode {
        node_id: NodeId,
    },
}

/// The leader's answer to a forwarded proposal: committed and applied there at `log_index`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Proposed {
    pub(crate) outcome: ApplyOutcome,
    pub(crate) log_index: u64,
}

/// Why the leader did not serve a forwarded request.
#[derive(Debug, Serialize, Deserialize, thiserror::Error)]
pub(crate) enum ForwardError {
    /// Nothing was proposed: the receiver is not the leader.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    #[error("timed out on the leader")]
    Timeout,
    #[error("the leader is shutting down")]
    Shutdown,
    /// An observer asked to join with the id of a voter: the configuration is wrong.
    #[error("node {node_id} is a voter, it cannot join as an observer")]
    IsAVoter { node_id: NodeId },
    /// A RegisterBroker refused: another process of `node_id` has a live session, which ends
    /// at the latest `session_ms` (the leader's `broker.session.timeout.ms`) after its last beat.
    #[error("node {node_id} is registered by another live process")]
    DuplicateBrokerRegistration { node_id: NodeId, session_ms: u64 },
    #[error("{message}")]
    Failed { message: String },
}

/// Writes one frame.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, payload: &[u8]) -> Result<(), RpcError> {
    if payload.len() > MAX_FRAME_BYTES {
        return Err(RpcError::FrameTooLarge { len: payload.len(), max: MAX_FRAME_BYTES });
    }
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame).await.map_err(RpcError::Io)?;
    w.flush().await.map_err(RpcError::Io)
}

/// Reads one frame; `None` if the peer closed the connection between frames.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>, RpcError> {
    let mut header = [0u8; 4];
    let mut filled = 0;
    while filled < header.len() {
        let n = r.read(&mut header[filled..]).await.map_err(RpcError::Io)?;
        if n == 0 {
            return match filled {
                0 => Ok(None),
                _ => Err(RpcError::Io(io::ErrorKind::UnexpectedEof.into())),
            };
        }
        filled += n;
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(RpcError::FrameTooLarge { len, max: MAX_FRAME_BYTES });
    }
    // Grow with the data actually received rather than trusting the length up front.
    let mut payload = Vec::with_capacity(len.min(64 << 10));
    r.take(len as u64).read_to_end(&mut payload).await.map_err(RpcError::Io)?;
    if payload.len() != len {
        return Err(RpcError::Io(io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(Some(payload))
}

/// The bytes of a raft connection: TCP, or TLS over it.
trait RaftStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> RaftStream for T {}

struct Conn {
    stream: BufReader<Box<dyn RaftStream>>,
    idle_since: Instant,
}

/// Whether a call may reuse a pooled connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnPolicy {
    /// Reuse an idle connection (raft RPCs: openraft retries them, a stale connection costs one RPC).
    Pooled,
    /// Always connect anew (non-idempotent requests).
    Fresh,
}

/// Connections from this node to its peers.
pub(crate) struct PeerPool {
    my_id: NodeId,
    /// Configured raft listener addresses; they win over the addresses stored in the membership.
    addrs: BTreeMap<NodeId, String>,
    idle: Mutex<HashMap<NodeId, Vec<Conn>>>,
    /// Present when the raft listeners speak TLS.
    tls: Option<Arc<TlsContext>>,
}

impl PeerPool {
    pub(crate) fn new(my_id: NodeId, addrs: BTreeMap<NodeId, String>, tls: Option<Arc<TlsContext>>) -> PeerPool {
        PeerPool { my_id, addrs, idle: Mutex::new(HashMap::new()), tls }
    }

    pub(crate) fn configured_addr(&self, node_id: NodeId) -> Option<&str> {
        self.addrs.get(&node_id).map(String::as_str)
    }

    /// The node ids with a configured address (the voters).
    pub(crate) fn configured_ids(&self) -> Vec<NodeId> {
        self.addrs.keys().copied().collect()
    }

    fn take_idle(&self, target: NodeId) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.get_mut(&target)?;
        while let Some(conn) = conns.pop() {
            if conn.idle_since.elapsed() < POOL_IDLE_MAX {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, target: NodeId, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.entry(target).or_default();
        if conns.len() < POOL_CONNECTIONS_PER_PEER {
            conns.push(conn);
        }
    }

    /// Sends `body` to `target` at `addr` and returns its response, all within `timeout`.
    pub(crate) async fn call(
        &self,
        target: NodeId,
        addr: &str,
        body: &RpcRequest,
        timeout: Duration,
        policy: ConnPolicy,
    ) -> Result<RpcResponse, RpcError> {
        let deadline = Instant::now() + timeout;
        let envelope = Envelope { from: self.my_id, to: target, body };
        let request = serde_json::to_vec(&envelope).map_err(RpcError::Codec)?;
        if request.len() > MAX_FRAME_BYTES {
            return Err(RpcError::FrameTooLarge { len: request.len(), max: MAX_FRAME_BYTES });
        }
        let pooled = match policy {
            ConnPolicy::Pooled => self.take_idle(target),
            ConnPolicy::Fresh => None,
        };
        let fresh = pooled.is_none();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(source)) => return Err(RpcError::Connect { addr: addr.to_string(), source }),
                    Err(_) => return Err(RpcError::ConnectTimeout { addr: addr.to_string() }),
                };
                // Small request/response frames: do not let Nagle delay them.
                let _ = stream.set_nodelay(true);
                let stream: Box<dyn RaftStream> = match &self.tls {
                    None => Box::new(stream),
                    Some(tls) => {
                        // The voter's certificate must carry the host of its raft address.
                        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host).trim_matches(['[', ']']);
                        match tokio::time::timeout_at(deadline, tls.connect(host, stream)).await {
                            Ok(Some(Ok(stream))) => Box::new(stream),
                            Ok(Some(Err(source))) => return Err(RpcError::Connect { addr: addr.to_string(), source }),
                            Ok(None) => {
                                let source = io::Error::other("no TLS client configuration for the raft listener");
                                return Err(RpcError::Connect { addr: addr.to_string(), source });
                            }
                            Err(_) => return Err(RpcError::ConnectTimeout { addr: addr.to_string() }),
                        }
                    }
                };
                Conn { stream: BufReader::new(stream), idle_since: Instant::now() }
            }
        };
        let exchange = async {
            write_frame(&mut conn.stream, &request).await?;
            match read_frame(&mut conn.stream).await? {
                Some(frame) => serde_json::from_slice::<RpcResponse>(&frame).map_err(RpcError::Codec),
                None => Err(RpcError::Io(io::ErrorKind::UnexpectedEof.into())),
            }
        };
        let response = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(response)) => response,
            Ok(Err(RpcError::Io(source))) if fresh => {
                return Err(RpcError::ClosedUnanswered { addr: addr.to_string(), source });
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(RpcError::Timeout),
        };
        if let RpcResponse::WrongNode { node_id } = response {
            return Err(RpcError::WrongNode { expected: target, actual: node_id });
        }
        if policy == ConnPolicy::Pooled {
            self.put_idle(target, conn);
        }
        Ok(response)
    }
}

/// Creates `PeerClient`s for openraft.
pub(crate) struct NetworkFactory {
    pool: Arc<PeerPool>,
}

impl NetworkFactory {
    pub(crate) fn new(pool: Arc<PeerPool>) -> NetworkFactory {
        NetworkFactory { pool }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let addr = self.pool.configured_addr(target).unwrap_or(&node.addr).to_string();
        PeerClient { pool: self.pool.clone(), target, addr }
    }
}

/// openraft's view of one peer.
pub(crate) struct PeerClient {
    pool: Arc<PeerPool>,
    target: NodeId,
    addr: String,
}

impl PeerClient {
    async fn call(&self, body: &RpcRequest, option: &RPCOption) -> Result<RpcResponse, RpcError> {
        self.pool.call(self.target, &self.addr, body, option.hard_ttl(), ConnPolicy::Pooled).await
    }

    fn transport_error<E: Error>(
        &self,
        e: RpcError,
        action: RPCTypes,
        option: &RPCOption,
    ) -> RPCError<NodeId, BasicNode, E> {
        tracing::debug!(target = self.target, addr = %self.addr, ?action, error = %e, "raft RPC failed");
        match e {
            RpcError::Connect { .. } | RpcError::ConnectTimeout { .. } | RpcError::ClosedUnanswered { .. } => {
                RPCError::Unreachable(Unreachable::new(&e))
            }
            RpcError::Timeout => RPCError::Timeout(RaftTimeout {
                action,
                id: self.pool.my_id,
                target: self.target,
                timeout: option.hard_ttl(),
            }),
            other => RPCError::Network(NetworkError::new(&other)),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let entries = rpc.entries.len() as u64;
        match self.call(&RpcRequest::AppendEntries(rpc), &option).await {
            Ok(RpcResponse::AppendEntries(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::AppendEntries(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(_) => Err(self.transport_error(RpcError::UnexpectedResponse, RPCTypes::AppendEntries, &option)),
            // Let openraft retry with fewer entries per request.
            Err(RpcError::FrameTooLarge { .. }) if entries > 1 => {
                Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2)))
            }
            Err(e) => Err(self.transport_error(e, RPCTypes::AppendEntries, &option)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        match self.call(&RpcRequest::InstallSnapshot(rpc), &option).await {
            Ok(RpcResponse::InstallSnapshot(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::InstallSnapshot(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(_) => Err(self.transport_error(RpcError::UnexpectedResponse, RPCTypes::InstallSnapshot, &option)),
            Err(e) => Err(self.transport_error(e, RPCTypes::InstallSnapshot, &option)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(&RpcRequest::Vote(rpc), &option).await {
            Ok(RpcResponse::Vote(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::Vote(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(_) => Err(self.transport_error(RpcError::UnexpectedResponse, RPCTypes::Vote, &option)),
            Err(e) => Err(self.transport_error(e, RPCTypes::Vote, &option)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves frames round-trip, a clean close between frames is `None`, and an oversized length
    // is refused before anything is allocated for it.
    #[tokio::test]
    async fn frame_codec() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").await.expect("write");
        write_frame(&mut buf, b"").await.expect("write");
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).await.expect("read"), Some(b"hello".to_vec()));
        assert_eq!(read_frame(&mut r).await.expect("read"), Some(Vec::new()));
        assert_eq!(read_frame(&mut r).await.expect("read"), None);

        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
        let mut r = &huge[..];
        assert!(matches!(read_frame(&mut r).await, Err(RpcError::FrameTooLarge { .. })));

        let short = [0u8, 0, 0, 9, b'x'];
        let mut r = &short[..];
        assert!(matches!(read_frame(&mut r).await, Err(RpcError::Io(_))));
    }
}
