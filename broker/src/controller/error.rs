//! The controller's error type, as the rest of the broker sees it.
//!
//! Owns: `ControllerError` and the conversions from internal store and openraft errors.
//! Invariant: no openraft type appears in a public error; openraft failures are carried as text in
//! `RaftFailure`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::disk::StoreError;
use super::network::RpcError;
use super::record::NodeId;

/// An error of the metadata quorum.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Another process of this node id holds a live session with the active controller (Kafka's
    /// DUPLICATE_BROKER_REGISTRATION): two processes of one id would fence each other and serve
    /// the same replicas. Refused until that session ends.
    #[error(
        "node {node_id} is registered by another process whose session with the active controller is \
         live (a second process with this node.id, or the previous one not dead yet)"
    )]
    DuplicateBrokerRegistration {
        node_id: NodeId,
        /// The active controller's `broker.session.timeout.ms`: how long the other session may
        /// last without a beat.
        session_ms: u64,
    },
    /// A metadata file could not be read or written.
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The raft RPC listener could not be bound.
    #[error("cannot listen for raft RPCs on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Another controller (this process or another) holds the metadata directory.
    #[error("metadata directory {path} is in use by another controller")]
    DataDirLocked { path: PathBuf },
    /// A metadata file is damaged beyond a torn tail; starting would risk losing committed data.
    #[error("corrupt metadata file {path} at byte {position}: {reason}")]
    Corrupt { path: PathBuf, position: u64, reason: String },
    /// `node_id` is not in `voters`.
    #[error("node {node_id} is not among the configured metadata voters")]
    NotAVoter { node_id: NodeId },
    /// A broker-only node (an observer) was given the id of a voter.
    #[error("node {node_id} is a metadata voter; a broker-only node must not be in the voters")]
    ObserverIsAVoter { node_id: NodeId },
    /// An observer's raft listener is bound to a wildcard address: the leader could not reach
    /// it at the address it would advertise.
    #[error("a broker-only node advertises its controller listener, so it must not be {addr} (a wildcard)")]
    ObserverAddrUnspecified { addr: SocketAddr },
    /// Raft timing or snapshot settings are inconsistent.
    #[error("invalid controller configuration")]
    InvalidConfig(#[source] RaftFailure),
    /// The raft node failed (storage error, panic) or refused an operation.
    #[error("metadata quorum failure")]
    Raft(#[source] RaftFailure),
    /// This node is not the leader and the request was not forwarded.
    #[error("not the metadata leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    /// A proposal forwarded to the leader failed after it was sent: it may or may not be committed.
    #[error("proposal forwarded to metadata leader {leader} failed; its outcome is unknown")]
    Forward {
        leader: NodeId,
        #[source]
        source: RpcError,
    },
    /// The operation did not complete in time (a proposal may still commit later).
    #[error("metadata operation timed out")]
    Timeout,
    /// The controller is shut down.
    #[error("metadata controller is shut down")]
    Shutdown,
    /// A record larger than one metadata log entry may be; nothing was proposed.
    #[error("metadata record of {size} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge { size: usize, max: usize },
}

/// The text of an openraft error (openraft types stay inside `controller/`).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RaftFailure {
    message: String,
}

impl RaftFailure {
    pub(crate) fn new(error: &dyn std::fmt::Display) -> RaftFailure {
        RaftFailure { message: error.to_string() }
    }
}

impl From<StoreError> for ControllerError {
    fn from(e: StoreError) -> ControllerError {
        match e {
            StoreError::Io { action, path, source } => ControllerError::Io { action, path, source },
            StoreError::Corrupt { path, position, reason } => ControllerError::Corrupt { path, position, reason },
            StoreError::Locked { path } => ControllerError::DataDirLocked { path },
            other @ (StoreError::Encode(_)
            | StoreError::FrameTooLarge { .. }
            | StoreError::Poisoned
            | StoreError::TaskFailed) => ControllerError::Raft(RaftFailure::new(&other)),
        }
    }
}
