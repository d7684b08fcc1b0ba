//! The position of one transform partition in its group `__runnel_transform_<name>`, read and
//! written on that group's coordinator wherever it runs: the leader of the group's
//! `__consumer_offsets` partition. When that is this node the offsets store is used in process;
//! otherwise OffsetFetch / OffsetCommit go to the coordinator over the peer client, as a Kafka
//! consumer without a group (`assign()`, generation -1) would send them.
//!
//! Owns: the routing and retrying of checkpoint reads and writes. Invariant: a commit counts as
//! done only once the coordinator acknowledged it, which it does once the internal topic's ISR
//! has it, so a position reported committed survives a coordinator failover. Retriable answers
//! (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT,
//! an unreachable coordinator, no coordinator yet) are retried against the coordinator a fresh
//! metadata image names, until the caller's deadline; anything else is returned at once.

use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::Host;
use crate::group::offsets::{CommittedOffset, OffsetError};
use crate::group::{partition_for, Replicated, OFFSETS_TOPIC};
use crate::log::now_ms;
use crate::partition::PartitionError;
use crate::peer::PeerError;

/// OffsetCommit v8 and OffsetFetch v7: the newest versions that name topics, not topic ids, and
/// that the broker's handlers speak (what HTTP consumer instances send too).
const OFFSET_COMMIT_VERSION: i16 = 8;
const OFFSET_FETCH_VERSION: i16 = 7;
/// How long one call to the coordinator may take: a commit waits up to
/// `offsets.commit.timeout.ms` (5 s) for the internal topic's ISR, plus room for the answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(8);
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub(super) enum CheckpointError {
    /// `__consumer_offsets` does not exist yet, or the group's partition has no leader.
    #[error("the group has no coordinator yet")]
    NoCoordinator,
    #[error("coordinator (this node): {0}")]
    Local(#[from] OffsetError),
    #[error("coordinator: {0}")]
    Peer(#[from] PeerError),
    #[error("coordinator {node} answered {}", super::worker::error_name(*code))]
    Refused { node: u64, code: i16 },
}

impl CheckpointError {
    /// Whether the same call may work against the coordinator a newer image names (Kafka's
    /// consumer marks the coordinator unknown and retries on these).
    fn retriable(&self) -> bool {
        match self {
            CheckpointError::NoCoordinator | CheckpointError::Peer(_) => true,
            CheckpointError::Local(e) => matches!(
                e,
                OffsetError::NotCoordinator { .. }
                    | OffsetError::LoadInProgress { .. }
                    | OffsetError::Partition(
                        PartitionError::NotLeaderOrFollower { .. }
                            | PartitionError::Closed { .. }
                            | PartitionError::NotEnoughReplicas { .. }
                            | PartitionError::NotEnoughReplicasAfterAppend { .. }
                            | PartitionError::ReplicationTimeout { .. }
                    )
            ),
            CheckpointError::Refused { code, .. } => [
                ResponseError::NotCoordinator,
                ResponseError::CoordinatorLoadInProgress,
                ResponseError::CoordinatorNotAvailable,
                ResponseError::RequestTimedOut,
                // An exactly-once worker's last transaction is still being completed.
                ResponseError::UnstableOffsetCommit,
            ]
            .iter()
            .any(|e| e.code() == *code),
        }
    }
}

/// Where the group's coordinator is.
enum Coordinator {
    Here,
    Peer(u64),
}

/// The checkpoint of one (transform, input partition).
pub(super) struct Checkpoint<'a> {
    pub host: &'a Host,
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

impl Checkpoint<'_> {
    /// The committed position and its metadata (the id of the deployment that committed it),
    /// `None` when nothing was committed; retried until `deadline`. Stable only: while a
    /// transaction that commits the position is undecided the coordinator is asked again.
    pub async fn fetch(&self, deadline: Instant) -> Result<Option<(i64, String)>, CheckpointError> {
        self.retrying(deadline, || self.fetch_once()).await
    }

    /// Commits `position` with `metadata` (the committing deployment's id).
    pub async fn commit(&self, position: i64, metadata: &str, deadline: Instant) -> Result<(), CheckpointError> {
        self.retrying(deadline, || self.commit_once(position, metadata)).await
    }

    async fn retrying<T, F: std::future::Future<Output = Result<T, CheckpointError>>>(
        &self,
        deadline: Instant,
        mut call: impl FnMut() -> F,
    ) -> Result<T, CheckpointError> {
        let mut backoff = RETRY_BACKOFF_MIN;
        loop {
            // Subscribed before the call, so an image applied while it ran is not missed.
            let mut images = self.host.controller.subscribe();
            let error = match call().await {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            if !error.retriable() || Instant::now() + backoff > deadline {
                return Err(error);
            }
            if matches!(error, CheckpointError::NoCoordinator) {
                // FindCoordinator creates `__consumer_offsets` when it is missing.
                (self.host.ensure_offsets_topic)().await;
            }
            // A leadership change shows in the image; a coordinator still loading does not, so
            // the backoff bounds the wait either way.
            tokio::select! {
                _ = images.changed() => {}
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    fn coordinator(&self) -> Result<Coordinator, CheckpointError> {
        let image = self.host.controller.image();
        let offsets = image.topics.get(OFFSETS_TOPIC).ok_or(CheckpointError::NoCoordinator)?;
        let count = offsets.partitions.len() as u32;
        if count == 0 {
            return Err(CheckpointError::NoCoordinator);
        }
        // The store maps groups over the same count (it follows every image; this image may be
        // newer than the last it saw).
        self.host.groups.offsets.set_partition_count(count);
        let leader = offsets
            .partitions
            .get(partition_for(&self.group, count) as usize)
            .and_then(|p| p.leader)
            .ok_or(CheckpointError::NoCoordinator)?;
        if leader == self.host.node_id || !image.brokers.contains_key(&leader) {
            // Here, or a leader with no registration: the store answers NOT_COORDINATOR then.
            Ok(Coordinator::Here)
        } else {
            Ok(Coordinator::Peer(leader))
        }
    }

    async fn fetch_once(&self) -> Result<Option<(i64, String)>, CheckpointError> {
        let node = match self.coordinator()? {
            Coordinator::Here => {
                let wanted = [(self.topic.clone(), self.partition)];
                // require_stable: a position of a transaction not yet ended is not an answer.
                let (committed, unstable) = self.host.groups.offsets.fetch_stable(&self.group, Some(&wanted))?;
                if unstable.contains(&wanted[0]) {
                    let code = ResponseError::UnstableOffsetCommit.code();
                    return Err(CheckpointError::Refused { node: self.host.node_id, code });
                }
                return Ok(committed.into_iter().next().map(|(_, _, c)| (c.offset, c.metadata)));
            }
            Coordinator::Peer(node) => node,
        };
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(str_bytes(&self.topic)))
                .with_partition_indexes(vec![self.partition])]))
            .with_require_stable(true);
        let response = self.host.peers.call(node, OFFSET_FETCH_VERSION, &request, CALL_TIMEOUT).await?;
        if response.error_code != 0 {
            return Err(CheckpointError::Refused { node, code: response.error_code });
        }
        let answer = response
            .topics
            .iter()
            .filter(|t| t.name.0.as_str() == self.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == self.partition);
        match answer {
            Some(p) if p.error_code != 0 => Err(CheckpointError::Refused { node, code: p.error_code }),
            // -1: nothing committed.
            Some(p) => Ok((p.committed_offset >= 0)
                .then(|| (p.committed_offset, p.metadata.as_ref().map_or_else(String::new, |m| m.to_string())))),
            None => Ok(None),
        }
    }

    async fn commit_once(&self, position: i64, metadata: &str) -> Result<(), CheckpointError> {
        let node = match self.coordinator()? {
            Coordinator::Here => {
                let committed = CommittedOffset {
                    offset: position,
                    leader_epoch: -1,
                    metadata: metadata.to_string(),
                    commit_timestamp: now_ms(),
                };
                let replicated = self
                    .host
                    .groups
                    .offsets
                    .commit(&self.group, vec![(self.topic.clone(), self.partition, committed)])?;
                if let Some(replicated) = replicated {
                    replicated.wait(Replicated::TIMEOUT).await?;
                }
                return Ok(());
            }
            Coordinator::Peer(node) => node,
        };
        // Generation -1 and no member: a commit outside any group membership, which the
        // coordinator accepts while the group has no members (it never has: it only holds
        // positions).
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(str_bytes(&self.topic)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(self.partition)
                    .with_committed_offset(position)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(str_bytes(metadata)))])]);
        let response = self.host.peers.call(node, OFFSET_COMMIT_VERSION, &request, CALL_TIMEOUT).await?;
        let code = response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == self.partition)
            .map_or(ResponseError::UnknownServerError.code(), |p| p.error_code);
        if code != 0 {
            return Err(CheckpointError::Refused { node, code });
        }
        Ok(())
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
