//! The raft RPC listener of one metadata quorum member (voter or observer).
//!
//! Owns: accepting peer connections on the raft listener and serving their requests in order:
//! raft RPCs go to the local raft node; forwarded proposals, read-index requests, heartbeats and
//! observers' join requests are served only if this node is the leader.
//! Invariant: bounded everywhere: at most `MAX_CONNECTIONS` connections, frames of at most
//! `network::MAX_FRAME_BYTES`, idle connections closed after `IDLE_TIMEOUT`. A malformed frame or
//! request closes that connection only; nothing a peer sends can stop the listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, ChangeMembers};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::lifecycle::Leases;
use super::network::{read_frame, write_frame, Envelope, ForwardError, Proposed, RpcRequest, RpcResponse};
use super::raft_types::Raft;
use super::record::{MetadataRecord, NodeId};
use crate::security::tls::TlsContext;

const MAX_CONNECTIONS: usize = 256;
/// Longer than the client pool's idle limit, so clients close first.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound for the time a forwarded request may hold a connection on the leader.
const MAX_FORWARD_TIMEOUT: Duration = Duration::from_secs(120);
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Who may use the raft listener when the authorizer is on: a TLS peer whose certificate's
/// principal has CLUSTER_ACTION on the cluster (a super user, or an ACL in the image), as
/// every controller RPC needs in Kafka. Every request on the listener can change the cluster's
/// metadata (a forwarded proposal may carry any record: ACLs, credentials, code to run), so a
/// client certificate from the same CA is not enough.
#[derive(Clone)]
pub(crate) struct PeerGate {
    pub(crate) settings: crate::security::acl::AuthorizerSettings,
    pub(crate) image: tokio::sync::watch::Receiver<Arc<super::MetadataImage>>,
}

impl PeerGate {
    fn admits(&self, principal: &crate::security::Principal, peer: SocketAddr) -> bool {
        let image = self.image.borrow().clone();
        let host = peer.ip().to_canonical().to_string();
        self.settings.authorize(
            &image.acls,
            principal,
            &host,
            crate::security::acl::Operation::ClusterAction,
            crate::security::acl::ResourceType::Cluster,
            crate::security::acl::CLUSTER_NAME,
        )
    }
}

/// Starts serving `listener`. Aborting the returned task closes the listener and every connection.
pub(crate) fn spawn(
    listener: TcpListener,
    raft: Raft,
    node_id: NodeId,
    leases: Arc<Leases>,
    tls: Option<Arc<TlsContext>>,
    gate: Option<PeerGate>,
) -> JoinHandle<()> {
    tokio::spawn(accept_loop(listener, raft, node_id, leases, tls, gate))
}

async fn accept_loop(
    listener: TcpListener,
    raft: Raft,
    node_id: NodeId,
    leases: Arc<Leases>,
    tls: Option<Arc<TlsContext>>,
    gate: Option<PeerGate>,
) {
    // Owned here so that aborting this task aborts every connection task too.
    let mut connections = JoinSet::new();
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (raft, leases, tls, gate) = (raft.clone(), leases.clone(), tls.clone(), gate.clone());
                        connections.spawn(async move {
                            let _ = stream.set_nodelay(true);
                            match tls {
                                None => serve_connection(BufReader::new(stream), peer, raft, node_id, leases, permit).await,
                                // Only holders of a certificate from the truststore's CA get past
                                // the handshake when ssl.client.auth is required.
                                Some(tls) => match tokio::time::timeout(IDLE_TIMEOUT, tls.acceptor().accept(stream)).await {
                                    Ok(Ok(stream)) => {
                                        let principal = crate::security::tls::principal_of(stream.get_ref().1);
                                        if gate.as_ref().is_some_and(|gate| !gate.admits(&principal, peer)) {
                                            tracing::warn!(%peer, %principal, "raft connection refused: the principal lacks CLUSTER_ACTION");
                                            return;
                                        }
                                        serve_connection(BufReader::new(stream), peer, raft, node_id, leases, permit).await
                                    }
                                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "raft TLS handshake failed"),
                                    Err(_) => tracing::info!(%peer, "raft TLS handshake timed out"),
                                },
                            }
                        });
                    }
                    Err(_) => tracing::warn!(%peer, "too many raft connections; refusing one"),
                },
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a raft connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: BufReader<S>,
    peer: SocketAddr,
    raft: Raft,
    node_id: NodeId,
    leases: Arc<Leases>,
    _permit: OwnedSemaphorePermit,
) {
    // The broker whose heartbeats arrive on this connection: its end closing it is a hint that
    // the process is gone.
    let mut heartbeats_of = None;
    loop {
        let frame = match tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut stream)).await {
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => {
                if let Some(node) = heartbeats_of {
                    leases.connection_lost(node);
                }
                return;
            }
            Err(_) => return,
            Ok(Err(e)) => {
                // A killed peer's socket often ends in a reset (it had unread bytes), not a FIN.
                if let Some(node) = heartbeats_of.filter(|_| matches!(e, super::network::RpcError::Io(_))) {
                    leases.connection_lost(node);
                }
                tracing::debug!(%peer, error = %e, "closing a raft connection after a bad frame");
                return;
            }
        };
        let envelope: Envelope<RpcRequest> = match serde_json::from_slice(&frame) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing a raft connection after an undecodable request");
                return;
            }
        };
        if let RpcRequest::BrokerHeartbeat { node_id: broker, .. } = &envelope.body {
            heartbeats_of = Some(*broker);
        }
        let response = if envelope.to == node_id {
            dispatch(&raft, &leases, node_id, envelope.body).await
        } else {
            tracing::warn!(%peer, from = envelope.from, to = envelope.to, "raft request for another node");
            RpcResponse::WrongNode { node_id }
        };
        let bytes = match serde_json::to_vec(&response) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(%peer, error = %e, "cannot encode a raft response");
                return;
            }
        };
        if let Err(e) = write_frame(stream.get_mut(), &bytes).await {
            tracing::debug!(%peer, error = %e, "cannot answer a raft request");
            return;
        }
    }
}

async fn dispatch(raft: &Raft, leases: &Leases, node_id: NodeId, body: RpcRequest) -> RpcResponse {
    match body {
        RpcRequest::BrokerHeartbeat { node_id: broker, broker_epoch, want_shutdown } => {
            let leader = raft.metrics().borrow().current_leader;
            RpcResponse::BrokerHeartbeat(if leader == Some(node_id) {
                leases.record(broker, broker_epoch, want_shutdown);
                Ok(())
            } else {
                Err(ForwardError::NotLeader { leader })
            })
        }
        RpcRequest::AppendEntries(rpc) => RpcResponse::AppendEntries(raft.append_entries(rpc).await),
        RpcRequest::Vote(rpc) => RpcResponse::Vote(raft.vote(rpc).await),
        RpcRequest::InstallSnapshot(rpc) => RpcResponse::InstallSnapshot(raft.install_snapshot(rpc).await),
        RpcRequest::Propose { record, timeout_ms } => {
            RpcResponse::Propose(propose_as_leader(raft, leases, record, forward_timeout(timeout_ms)).await)
        }
        RpcRequest::ReadIndex { timeout_ms } => {
            RpcResponse::ReadIndex(read_index_as_leader(raft, forward_timeout(timeout_ms)).await)
        }
        RpcRequest::AddObserver { node_id: observer, addr, timeout_ms } => RpcResponse::AddObserver(
            add_observer_as_leader(raft, leases, node_id, observer, addr, forward_timeout(timeout_ms)).await,
        ),
    }
}

fn forward_timeout(timeout_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms).min(MAX_FORWARD_TIMEOUT)
}

fn fatal_to_forward(fatal: Fatal<NodeId>) -> ForwardError {
    match fatal {
        Fatal::Stopped => ForwardError::Shutdown,
        other => ForwardError::Failed { message: other.to_string() },
    }
}

/// Proposes a forwarded record if this node is the leader; never forwards again (no loops).
pub(crate) async fn propose_as_leader(
    raft: &Raft,
    leases: &Leases,
    record: MetadataRecord,
    timeout: Duration,
) -> Result<Proposed, ForwardError> {
    if let Err(e) = super::check_record_size(&record) {
        return Err(ForwardError::Failed { message: e.to_string() });
    }
    if let Some(node_id) = leases.duplicate_registration(&record) {
        return Err(ForwardError::DuplicateBrokerRegistration { node_id, session_ms: leases.session_ms() });
    }
    match tokio::time::timeout(timeout, raft.client_write(record)).await {
        Err(_) => Err(ForwardError::Timeout),
        Ok(Ok(resp)) => Ok(Proposed { outcome: resp.data, log_index: resp.log_id.index }),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            Err(ForwardError::NotLeader { leader: f.leader_id })
        }
        Ok(Err(RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_)))) => {
            Err(ForwardError::Failed { message: e.to_string() })
        }
        Ok(Err(RaftError::Fatal(f))) => Err(fatal_to_forward(f)),
    }
}

/// Confirms leadership with a quorum and returns the index a linearizable reader must wait for.
pub(crate) async fn read_index_as_leader(raft: &Raft, timeout: Duration) -> Result<Option<u64>, ForwardError> {
    match tokio::time::timeout(timeout, raft.ensure_linearizable()).await {
        Err(_) => Err(ForwardError::Timeout),
        Ok(Ok(log_id)) => Ok(log_id.map(|l| l.index)),
        Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
            Err(ForwardError::NotLeader { leader: f.leader_id })
        }
        Ok(Err(RaftError::APIError(e @ CheckIsLeaderError::QuorumNotEnough(_)))) => {
            Err(ForwardError::Failed { message: e.to_string() })
        }
        Ok(Err(RaftError::Fatal(f))) => Err(fatal_to_forward(f)),
    }
}

/// Adds `observer` to the membership as a learner at `addr` if this node is the leader. Rejoining
/// at the address already stored writes nothing; a new address replaces the stored one, unless
/// the broker of that id has a live session (a duplicate process: refused). The
/// voters are never touched: a learner is only a node of the membership, outside every voter set.
async fn add_observer_as_leader(
    raft: &Raft,
    leases: &Leases,
    my_id: NodeId,
    observer: NodeId,
    addr: String,
    timeout: Duration,
) -> Result<(), ForwardError> {
    let (leader, is_voter, stored_addr, membership_applied) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        let is_voter = membership.voter_ids().any(|id| id == observer);
        let stored_addr = membership.get_node(&observer).map(|n| n.addr.clone());
        // The effective membership may not be committed yet (e.g. the observer was killed while
        // it joined, and a new leader may still drop that entry).
        let applied = metrics.membership_config.log_id().map(|l| l.index) <= metrics.last_applied.map(|l| l.index);
        (metrics.current_leader, is_voter, stored_addr, applied)
    };
    if leader != Some(my_id) {
        return Err(ForwardError::NotLeader { leader });
    }
    if is_voter {
        return Err(ForwardError::IsAVoter { node_id: observer });
    }
    let change = match stored_addr {
        Some(stored) if stored == addr && membership_applied => return Ok(()),
        Some(stored) if stored == addr => {
            return Err(ForwardError::Failed { message: "the membership holding it is not committed yet".into() });
        }
        // Another address while the broker of this id is alive: a second process with its id,
        // which would take the metadata stream from the first.
        Some(_) if leases.has_live_session(observer) => {
            return Err(ForwardError::DuplicateBrokerRegistration {
                node_id: observer,
                session_ms: leases.session_ms(),
            });
        }
        Some(_) => raft.change_membership(ChangeMembers::SetNodes([(observer, BasicNode::new(addr))].into()), true),
        None => {
            tracing::info!(observer, %addr, "adding an observer to the metadata quorum");
            // Not blocking: the observer's own `wait_ready` waits until it caught up.
            return membership_result(
                tokio::time::timeout(timeout, raft.add_learner(observer, BasicNode::new(addr), false)).await,
            );
        }
    };
    membership_result(tokio::time::timeout(timeout, change).await)
}

type MembershipWrite = Result<
    openraft::raft::ClientWriteResponse<super::raft_types::TypeConfig>,
    RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
>;

fn membership_result(result: Result<MembershipWrite, tokio::time::error::Elapsed>) -> Result<(), ForwardError> {
    match result {
        Err(_) => Err(ForwardError::Timeout),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            Err(ForwardError::NotLeader { leader: f.leader_id })
        }
        // E.g. another membership change still in flight: the observer retries.
        Ok(Err(RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_)))) => {
            Err(ForwardError::Failed { message: e.to_string() })
        }
        Ok(Err(RaftError::Fatal(f))) => Err(fatal_to_forward(f)),
    }
}
