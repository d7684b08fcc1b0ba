//! ConsumerGroupDescribe (v0-1, KIP-848): a consumer-protocol group's state, epochs, assignor
//! and members with their current and target assignments. A classic group answers
//! GROUP_ID_NOT_FOUND ("not a consumer group"), which is how Kafka's admin client knows to
//! describe it with DescribeGroups instead.

use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::join_group::authorize_and_check_coordinator;
use super::{str_bytes, topic_name, uuid_of};
use crate::controller::MetadataImage;
use crate::group::consumer;
use crate::security::acl::{Operation, ResourceType};
use crate::server::Broker;

/// Bound on the groups one request may describe.
const GROUPS_MAX: usize = 1000;
/// KIP-1099's member type of a consumer-protocol member.
const MEMBER_TYPE_CONSUMER: i8 = 1;
/// ConsumerGroupDescribe v1's member type of a member on the classic protocol.
const MEMBER_TYPE_CLASSIC: i8 = 0;
/// "Authorized operations not requested" (Kafka's `Integer.MIN_VALUE`).
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: ConsumerGroupDescribeRequest,
) -> Option<ConsumerGroupDescribeResponse> {
    let image = broker.controller.image();
    let groups = request
        .group_ids
        .iter()
        .enumerate()
        .map(|(i, group_id)| {
            let group: &str = &group_id.0;
            let described = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            let error = |code: ResponseError, message: String| {
                described.clone().with_error_code(code.code()).with_error_message(Some(str_bytes(&message)))
            };
            if i >= GROUPS_MAX {
                return error(ResponseError::InvalidRequest, format!("at most {GROUPS_MAX} groups per request"));
            }
            if let Err(code) = authorize_and_check_coordinator(broker, group, Operation::Describe) {
                return described.with_error_code(code.code());
            }
            let Some(view) = broker.groups.consumers.describe(group) else {
                let message = if broker.groups.membership.state(group).is_some() {
                    format!("Group {group} is not a consumer group.")
                } else {
                    format!("Group {group} not found.")
                };
                return error(ResponseError::GroupIdNotFound, message);
            };
            // Kafka 4 (KAFKA-18813): a group whose members subscribe to or hold a topic the
            // client may not describe is not described, lest it leak the topic.
            let topic_names = view.members.iter().flat_map(|m| {
                let held = m.assignment.keys().chain(m.target_assignment.keys());
                let held = held.filter_map(|id| image.topic_by_id(id).map(|t| t.name.as_str()));
                m.subscribed_topic_names.iter().map(String::as_str).chain(held)
            });
            let mut topic_names = topic_names.collect::<Vec<_>>();
            topic_names.sort_unstable();
            topic_names.dedup();
            if topic_names.iter().any(|t| !broker.authorized(Operation::Describe, ResourceType::Topic, t)) {
                let message = "The group has described topic(s) that the client is not authorized to describe.";
                return error(ResponseError::TopicAuthorizationFailed, message.to_string());
            }
            let members = view
                .members
                .iter()
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(&m.member_id))
                        .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                        .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(str_bytes(&m.client_id))
                        .with_client_host(str_bytes(&m.client_host))
                        .with_subscribed_topic_names(m.subscribed_topic_names.iter().map(|t| topic_name(t)).collect())
                        .with_subscribed_topic_regex(m.subscribed_topic_regex.as_deref().map(str_bytes))
                        .with_assignment(assignment(&image, &m.assignment))
                        .with_target_assignment(assignment(&image, &m.target_assignment))
                        .with_member_type(if m.classic { MEMBER_TYPE_CLASSIC } else { MEMBER_TYPE_CONSUMER })
                })
                .collect();
            described
                .with_group_state(str_bytes(view.state.name()))
                .with_group_epoch(view.group_epoch)
                .with_assignment_epoch(view.assignment_epoch)
                .with_assignor_name(str_bytes(&view.assignor))
                .with_members(members)
        })
        .collect();
    Some(ConsumerGroupDescribeResponse::default().with_groups(groups))
}

/// Partitions by topic id, with names where the topic still exists.
fn assignment(image: &MetadataImage, assigned: &consumer::Assignment) -> Assignment {
    Assignment::default().with_topic_partitions(
        assigned
            .iter()
            .map(|(id, partitions)| {
                TopicPartitions::default()
                    .with_topic_id(uuid_of(*id))
                    .with_topic_name(topic_name(image.topic_by_id(id).map_or("", |t| t.name.as_str())))
                    .with_partitions(partitions.iter().copied().collect())
            })
            .collect(),
    )
}
