//! OffsetCommit: stores a group's offsets as one batch in its `__consumer_offsets` partition.
//! Partitions the metadata does not know get UNKNOWN_TOPIC_OR_PARTITION, metadata above
//! `offset.metadata.max.bytes` OFFSET_METADATA_TOO_LARGE; the rest are committed together or
//! fail together. Member and generation checks are the membership layer's
//! (`GroupCoordinator::validate_commit`): generation -1 is a consumer without a group
//! (`assign()`); a consumer-protocol group checks the member epoch.
//! `retention_time_ms` (v2-4) is ignored, as Kafka does since 2.1.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::find_coordinator::ensure_offsets_topic;
use crate::group::offsets::{CommittedOffset, OFFSET_METADATA_MAX_BYTES};
use crate::group::{CommitApi, Replicated};
use crate::log::now_ms;
use crate::server::{offset_error_code, Broker};

/// One partition an OffsetCommit or TxnOffsetCommit asks to commit.
pub(super) struct CommitAsked<'a> {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: &'a str,
}

/// Per partition of a commit request, `(topic index, partition, decision)`, and the offsets to
/// commit: partitions the metadata does not know get UNKNOWN_TOPIC_OR_PARTITION, metadata above
/// `offset.metadata.max.bytes` OFFSET_METADATA_TOO_LARGE, topics the client may not `readable`
/// TOPIC_AUTHORIZATION_FAILED, and a group error applies to all.
#[allow(clippy::type_complexity)]
pub(super) fn check_commits<'a>(
    image: &crate::controller::MetadataImage,
    group_error: Result<(), ResponseError>,
    topics: impl Iterator<Item = (&'a str, Vec<CommitAsked<'a>>)>,
    readable: impl Fn(&str) -> bool,
) -> (Vec<(usize, i32, Result<(), ResponseError>)>, Vec<(String, i32, CommittedOffset)>) {
    let now = now_ms();
    let mut results = Vec::new();
    let mut commits = Vec::new();
    for (t, (name, partitions)) in topics.enumerate() {
        let known = image.topics.get(name);
        let denied = group_error.is_ok() && !readable(name);
        for p in partitions {
            let result = if let Err(code) = group_error {
                Err(code)
            } else if denied {
                Err(ResponseError::TopicAuthorizationFailed)
            } else if known.is_none_or(|k| p.partition < 0 || p.partition as usize >= k.partitions.len()) {
                Err(ResponseError::UnknownTopicOrPartition)
            } else if p.metadata.len() > OFFSET_METADATA_MAX_BYTES {
                Err(ResponseError::OffsetMetadataTooLarge)
            } else {
                let committed = CommittedOffset {
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata: p.metadata.to_string(),
                    commit_timestamp: now,
                };
                commits.push((name.to_string(), p.partition, committed));
                Ok(())
            };
            results.push((t, p.partition, result));
        }
    }
    (results, commits)
}

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: OffsetCommitRequest,
) -> Option<OffsetCommitResponse> {
    let version = header.request_api_version;
    let group: &str = &request.group_id.0;
    let group_error = if group.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else if !broker.authorized(Operation::Read, ResourceType::Group, group) {
        Err(ResponseError::GroupAuthorizationFailed)
    } else {
        // The coordinator first: during a failover the group is not here (yet), and a member
        // check would answer ILLEGAL_GENERATION (a lost commit and a rebalance) where Kafka's
        // retriable NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS is due.
        match ensure_offsets_topic(broker).await.and_then(|()| super::join_group::check_coordinator(broker, group)) {
            Ok(()) => broker.groups.validate_commit(
                group,
                &request.member_id,
                request.generation_id_or_member_epoch,
                request.group_instance_id.as_deref(),
                CommitApi::OffsetCommit { version },
            ),
            Err(code) => Err(code),
        }
    };

    let image = broker.controller.image();
    let asked = request.topics.iter().map(|topic| {
        let partitions = topic.partitions.iter().map(|p| CommitAsked {
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: if version >= 6 { p.committed_leader_epoch } else { -1 },
            metadata: p.committed_metadata.as_deref().unwrap_or(""),
        });
        (&*topic.name.0, partitions.collect())
    });
    let readable = |topic: &str| broker.authorized(Operation::Read, ResourceType::Topic, topic);
    let (results, commits) = check_commits(&image, group_error, asked, readable);
    let commit_result = match broker.groups.offsets.commit(group, commits) {
        Ok(None) => Ok(()),
        // Acknowledged once the internal topic's ISR has it, as Kafka's coordinator does.
        Ok(Some(replicated)) => replicated.wait(Replicated::TIMEOUT).await,
        Err(e) => Err(e),
    }
    .map_err(|e| {
        tracing::debug!(group, error = %e, "offset commit failed");
        offset_error_code(&e)
    });

    let mut topics: Vec<OffsetCommitResponseTopic> =
        request.topics.iter().map(|topic| OffsetCommitResponseTopic::default().with_name(topic.name.clone())).collect();
    for (t, partition_index, result) in results {
        let code = match result.and(commit_result) {
            Ok(()) => 0,
            Err(code) => code.code(),
        };
        topics[t]
            .partitions
            .push(OffsetCommitResponsePartition::default().with_partition_index(partition_index).with_error_code(code));
    }
    Some(OffsetCommitResponse::default().with_topics(topics))
}
