//! The openraft type configuration of the metadata quorum.
//!
//! Owns: `TypeConfig` and short aliases for the openraft types the controller uses.
//! Invariant: openraft types stay inside `controller/`; nothing here is re-exported from the
//! controller's public API.

use std::io::Cursor;

use openraft::BasicNode;

use super::record::{ApplyOutcome, MetadataRecord, NodeId};

openraft::declare_raft_types!(
    /// Raft types of the metadata quorum: log entries carry `MetadataRecord`s, applying one yields an
    /// `ApplyOutcome`, nodes are addressed by their raft listener (`BasicNode::addr`), snapshots are
    /// the serialized image in memory.
    pub(crate) TypeConfig:
        D = MetadataRecord,
        R = ApplyOutcome,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type LogId = openraft::LogId<NodeId>;
pub(crate) type Vote = openraft::Vote<NodeId>;
pub(crate) type StorageError = openraft::StorageError<NodeId>;
pub(crate) type StoredMembership = openraft::StoredMembership<NodeId, BasicNode>;
pub(crate) type SnapshotMeta = openraft::SnapshotMeta<NodeId, BasicNode>;
pub(crate) type Snapshot = openraft::Snapshot<TypeConfig>;
pub(crate) type Raft = openraft::Raft<TypeConfig>;
