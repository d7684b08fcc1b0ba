//! OffsetDelete: removes committed offsets of a group (tombstones in `__consumer_offsets`),
//! as Kafka's `handleDeleteOffsets`: a group with no members loses the offsets; a consumer
//! group with members keeps those of topics a member subscribes to
//! (GROUP_SUBSCRIBED_TO_TOPIC); a non-consumer group with members is NON_EMPTY_GROUP. A group
//! this node knows nothing of is GROUP_ID_NOT_FOUND; partitions the metadata does not know are
//! UNKNOWN_TOPIC_OR_PARTITION.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::group::membership::GroupState;
use crate::server::{offset_error_code, Broker};

/// Topics the live members subscribe to. While the group
/// rebalances the subscriptions are unknown and every topic counts as subscribed.
enum Subscribed {
    NoMembers,
    Topics(Vec<String>),
    Unknown,
}

impl Subscribed {
    fn contains(&self, topic: &str) -> bool {
        match self {
            Subscribed::NoMembers => false,
            Subscribed::Topics(topics) => topics.iter().any(|t| t == topic),
            Subscribed::Unknown => true,
        }
    }
}

/// The topics of a ConsumerProtocolSubscription (`[i16 version][i32 count][STRING topic]...`,
/// the same prefix in every version); `None` if it does not parse.
fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let count = i32::from_be_bytes(metadata.get(2..6)?.try_into().ok()?);
    let mut rest = metadata.get(6..)?;
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        let len = i16::from_be_bytes(rest.get(..2)?.try_into().ok()?);
        let bytes = rest.get(2..2 + usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(bytes.to_vec()).ok()?);
        rest = &rest[2 + bytes.len()..];
    }
    Some(topics)
}

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: OffsetDeleteRequest,
) -> Option<OffsetDeleteResponse> {
    let group: &str = &request.group_id.0;
    let error = |code: ResponseError| Some(OffsetDeleteResponse::default().with_error_code(code.code()));
    if group.is_empty() {
        return error(ResponseError::InvalidGroupId);
    }
    // Kafka: DELETE on the group (READ on each topic is checked with the partitions below).
    if !broker.authorized(Operation::Delete, ResourceType::Group, group) {
        return error(ResponseError::GroupAuthorizationFailed);
    }
    let offsets = &broker.groups.offsets;
    let state = broker.groups.membership.state(group);
    let consumer = broker.groups.consumers.describe(group).filter(|c| !c.members.is_empty());
    let subscribed = match state {
        // A consumer-protocol group with members: what its members subscribe to by name or
        // hold (a regex subscription shows through its assignment).
        _ if consumer.is_some() => {
            let image = broker.controller.image();
            let members = consumer.map(|c| c.members).unwrap_or_default();
            let mut topics: Vec<String> =
                members.iter().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect();
            topics.extend(members.iter().flat_map(|m| {
                m.assignment
                    .keys()
                    .chain(m.target_assignment.keys())
                    .filter_map(|id| image.topic_by_id(id).map(|t| t.name.clone()))
                    .collect::<Vec<_>>()
            }));
            Subscribed::Topics(topics)
        }
        None | Some(GroupState::Empty) | Some(GroupState::Dead) => Subscribed::NoMembers,
        Some(_) => match broker.groups.membership.describe(group) {
            None => Subscribed::NoMembers,
            Some(d) if d.protocol_type != "consumer" => return error(ResponseError::NonEmptyGroup),
            Some(d) => {
                let parsed: Option<Vec<Vec<String>>> =
                    d.members.iter().map(|m| subscription_topics(&m.metadata)).collect();
                match parsed {
                    Some(topics) if d.state == GroupState::Stable => {
                        Subscribed::Topics(topics.into_iter().flatten().collect())
                    }
                    _ => Subscribed::Unknown,
                }
            }
        },
    };
    match offsets.fetch(group, None) {
        Ok(found)
            if found.is_empty()
                && offsets.group_metadata(group).is_none()
                && matches!(state, None | Some(GroupState::Dead)) =>
        {
            return error(ResponseError::GroupIdNotFound);
        }
        Ok(_) => {}
        Err(e) => return error(offset_error_code(&e)),
    }
    let image = broker.controller.image();
    let mut to_delete = Vec::new();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name: &str = &topic.name.0;
        let known = image.topics.get(name);
        let readable = broker.authorized(Operation::Read, ResourceType::Topic, name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let index = p.partition_index;
            let code = if !readable {
                ResponseError::TopicAuthorizationFailed.code()
            } else if known.is_none_or(|k| index < 0 || index as usize >= k.partitions.len()) {
                ResponseError::UnknownTopicOrPartition.code()
            } else if subscribed.contains(name) {
                ResponseError::GroupSubscribedToTopic.code()
            } else {
                to_delete.push((name.to_string(), index));
                0
            };
            partitions.push(OffsetDeleteResponsePartition::default().with_partition_index(index).with_error_code(code));
        }
        topics.push(OffsetDeleteResponseTopic::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    // Answered once the ISR has the tombstones, as Kafka answers OffsetDelete.
    let written = match offsets.delete_offsets(group, &to_delete) {
        Ok(written) => written,
        Err(e) => return error(offset_error_code(&e)),
    };
    if let Some(replicated) = written {
        if let Err(e) = replicated.wait(crate::group::offsets::Replicated::TIMEOUT).await {
            return error(offset_error_code(&e));
        }
    }
    Some(OffsetDeleteResponse::default().with_topics(topics))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_topics_parse() {
        // Proves the topic list is read from a ConsumerProtocolSubscription and garbage is None.
        let mut v1 = vec![0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        assert_eq!(subscription_topics(&v1), Some(vec!["a".to_string(), "bc".to_string()]));
        v1.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // user data, null
        assert_eq!(subscription_topics(&v1).map(|t| t.len()), Some(2));
        assert_eq!(subscription_topics(&[0, 1, 0, 0, 0, 9, 0, 1]), None);
        assert_eq!(subscription_topics(&[]), None);
    }
}
