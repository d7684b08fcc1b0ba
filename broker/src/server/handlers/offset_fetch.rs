//! OffsetFetch: the committed offsets of a group (v1-7) or of several groups (v8+), of the
//! named partitions or, with null topics, of every partition the group committed. A partition
//! without a commit answers offset -1, metadata "" and leader epoch -1. With `require_stable`
//! (v7+, KIP-447) a partition with a transactional commit not yet decided answers
//! UNSTABLE_OFFSET_COMMIT, so the consumer retries instead of starting from a stale offset.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, RequestHeader, TopicName};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name};
use crate::group::offsets::{CommittedOffset, Unstable};
use crate::server::{offset_error_code, Broker};

/// One partition's answer.
/// Each topic's rows.
type TopicRows = Vec<(TopicName, Vec<Row>)>;

struct Row {
    partition: i32,
    committed: Option<CommittedOffset>,
    error: Option<ResponseError>,
}

/// The rows of one group, by topic in request order (or by name for "all"), or a group error.
fn fetch_group(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Vec<(TopicName, Vec<Row>)>, ResponseError> {
    // Kafka: DESCRIBE on the group; of the topics, those the client may not DESCRIBE are left
    // out of an all-topics fetch and TOPIC_AUTHORIZATION_FAILED when named.
    if !broker.authorized(Operation::Describe, ResourceType::Group, group) {
        return Err(ResponseError::GroupAuthorizationFailed);
    }
    let named = wanted.is_some();
    let (mut topics, unstable) = fetch_committed(broker, group, wanted)?;
    let describable = |topic: &TopicName| broker.authorized(Operation::Describe, ResourceType::Topic, &topic.0);
    if named {
        for (name, rows) in topics.iter_mut().filter(|(name, _)| !describable(name)) {
            tracing::debug!(topic = %name.0, "offset fetch of a topic the client may not describe");
            for row in rows.iter_mut() {
                row.committed = None;
                row.error = Some(ResponseError::TopicAuthorizationFailed);
            }
        }
    } else {
        topics.retain(|(name, _)| describable(name));
    }
    if require_stable {
        for (name, rows) in &mut topics {
            for row in rows.iter_mut() {
                if unstable.contains(&(name.0.to_string(), row.partition)) {
                    row.committed = None;
                    row.error = Some(ResponseError::UnstableOffsetCommit);
                }
            }
        }
    }
    Ok(topics)
}

/// The committed offsets of `group` (of the `wanted` partitions, or all), and the partitions
/// whose transactional commit is undecided, as of the same moment.
fn fetch_committed(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(TopicName, Vec<i32>)>>,
) -> Result<(TopicRows, Unstable), ResponseError> {
    if group.is_empty() {
        return Err(ResponseError::InvalidGroupId);
    }
    let keys: Option<Vec<(String, i32)>> = wanted
        .as_ref()
        .map(|topics| topics.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.0.to_string(), *p))).collect());
    let (found, unstable) =
        broker.groups.offsets.fetch_stable(group, keys.as_deref()).map_err(|e| offset_error_code(&e))?;
    let topics = match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(name, partitions)| {
                let rows = partitions
                    .into_iter()
                    .map(|partition| Row {
                        partition,
                        committed: found
                            .iter()
                            .find(|(t, p, _)| *t == *name.0 && *p == partition)
                            .map(|(_, _, c)| c.clone()),
                        error: None,
                    })
                    .collect();
                (name, rows)
            })
            .collect(),
        None => {
            let mut topics: Vec<(TopicName, Vec<Row>)> = Vec::new();
            for (topic, partition, committed) in found {
                let row = Row { partition, committed: Some(committed), error: None };
                match topics.last_mut() {
                    Some((name, rows)) if *name.0 == *topic => rows.push(row),
                    _ => topics.push((topic_name(&topic), vec![row])),
                }
            }
            topics
        }
    };
    Ok((topics, unstable))
}

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: OffsetFetchRequest,
) -> Option<OffsetFetchResponse> {
    let version = header.request_api_version;
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for g in &request.groups {
            let wanted = g
                .topics
                .as_ref()
                .map(|topics| topics.iter().map(|t| (t.name.clone(), t.partition_indexes.clone())).collect());
            let response = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            // v9: a consumer-protocol member names itself and its epoch (Kafka's
            // `validateOffsetFetch`); classic groups and admin fetches are not checked.
            // The group's permission first: the member check would otherwise tell anyone which
            // groups, members and epochs exist.
            let group_denied = !broker.authorized(Operation::Describe, ResourceType::Group, &g.group_id.0);
            let member_checked = match g.member_id.as_deref() {
                _ if group_denied => Err(ResponseError::GroupAuthorizationFailed),
                Some(member) if version >= 9 => broker
                    .groups
                    .consumers
                    .validate_member(&g.group_id.0, member, g.member_epoch, ResponseError::StaleMemberEpoch)
                    .unwrap_or(Ok(())),
                _ => Ok(()),
            };
            let fetched =
                member_checked.and_then(|()| fetch_group(broker, &g.group_id.0, wanted, request.require_stable));
            groups.push(match fetched {
                Ok(topics) => response.with_topics(
                    topics
                        .into_iter()
                        .map(|(name, rows)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(name)
                                .with_partitions(rows.into_iter().map(partition_v8).collect())
                        })
                        .collect(),
                ),
                Err(code) => response.with_error_code(code.code()),
            });
        }
        return Some(OffsetFetchResponse::default().with_groups(groups));
    }

    let wanted: Option<Vec<(TopicName, Vec<i32>)>> = request
        .topics
        .as_ref()
        .map(|topics| topics.iter().map(|t| (t.name.clone(), t.partition_indexes.clone())).collect());
    let topics = match fetch_group(broker, &request.group_id.0, wanted.clone(), version >= 7 && request.require_stable)
    {
        Ok(topics) => topics,
        Err(code) if version >= 2 => return Some(OffsetFetchResponse::default().with_error_code(code.code())),
        // v1 has no top-level error code: every requested partition carries it.
        Err(code) => wanted
            .unwrap_or_default()
            .into_iter()
            .map(|(name, partitions)| {
                let rows = partitions
                    .into_iter()
                    .map(|partition| Row { partition, committed: None, error: Some(code) })
                    .collect();
                (name, rows)
            })
            .collect(),
    };
    let topics = topics
        .into_iter()
        .map(|(name, rows)| {
            OffsetFetchResponseTopic::default()
                .with_name(name)
                .with_partitions(rows.into_iter().map(|row| partition_v1(row, version)).collect())
        })
        .collect();
    Some(OffsetFetchResponse::default().with_topics(topics))
}

fn partition_v1(row: Row, version: i16) -> OffsetFetchResponsePartition {
    let response = OffsetFetchResponsePartition::default()
        .with_partition_index(row.partition)
        .with_error_code(row.error.map_or(0, |e| e.code()));
    match row.committed {
        Some(c) => {
            let response = response.with_committed_offset(c.offset).with_metadata(Some(str_bytes(&c.metadata)));
            if version >= 5 {
                response.with_committed_leader_epoch(c.leader_epoch)
            } else {
                response
            }
        }
        None => response.with_committed_offset(-1).with_metadata(Some(str_bytes(""))),
    }
}

fn partition_v8(row: Row) -> OffsetFetchResponsePartitions {
    let response = OffsetFetchResponsePartitions::default()
        .with_partition_index(row.partition)
        .with_error_code(row.error.map_or(0, |e| e.code()));
    match row.committed {
        Some(c) => response
            .with_committed_offset(c.offset)
            .with_committed_leader_epoch(c.leader_epoch)
            .with_metadata(Some(str_bytes(&c.metadata))),
        None => response.with_committed_offset(-1).with_committed_leader_epoch(-1).with_metadata(Some(str_bytes(""))),
    }
}
