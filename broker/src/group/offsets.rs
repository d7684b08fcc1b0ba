//! Committed offsets in `__consumer_offsets`. Placeholder until the group issue lands.

use std::sync::Arc;

use crate::partition::ReplicaManager;

/// Committed offsets of the groups this node coordinates.
pub struct OffsetStore {
    #[allow(dead_code)]
    replicas: Arc<ReplicaManager>,
    #[allow(dead_code)]
    partitions: u32,
}

impl OffsetStore {
    pub fn new(replicas: Arc<ReplicaManager>, partitions: u32) -> OffsetStore {
        OffsetStore { replicas, partitions }
    }
}
