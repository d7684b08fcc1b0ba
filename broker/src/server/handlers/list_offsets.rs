//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4, the same as
//! earliest without tiered storage), latest tiered (-5, none without it), or the first offset
//! at or after a timestamp.

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use crate::security::acl::{Operation, ResourceType};

use super::hosted_partition;
use crate::partition::{Isolation, OffsetSpec};
use crate::server::{partition_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: ListOffsetsRequest,
) -> Option<ListOffsetsResponse> {
    // leader_epoch exists from v4 on; the codec refuses fields a version does not have.
    let with_epoch = header.request_api_version >= 4;
    let image = broker.controller.image();
    // KIP-98: read_committed (v2+) lists the last stable offset as the latest.
    let isolation = if request.isolation_level == 1 { Isolation::ReadCommitted } else { Isolation::ReadUncommitted };
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name: &str = &topic.name.0;
        let denied = !broker.authorized(Operation::Describe, ResourceType::Topic, name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let mut response = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1);
            let spec = match p.timestamp {
                -2 | -4 => Some(OffsetSpec::Earliest),
                -1 => Some(OffsetSpec::Latest),
                -3 => Some(OffsetSpec::MaxTimestamp),
                -5 => None,
                ts if ts >= 0 => Some(OffsetSpec::Timestamp(ts)),
                _ => None,
            };
            let hosted = if denied {
                Err(ResponseError::TopicAuthorizationFailed)
            } else {
                hosted_partition(broker, &image, name, p.partition_index)
            };
            let result = hosted.and_then(|partition| {
                partition
                    .check_leader_epoch(p.current_leader_epoch)
                    .and_then(|()| match spec {
                        Some(spec) => partition.list_offset(spec, isolation),
                        None => Ok(None),
                    })
                    .map(|found| (found, partition.leader_epoch()))
                    .map_err(|e| partition_error_code(&e))
            });
            response = match result {
                Ok((Some((offset, timestamp)), leader_epoch)) => response
                    .with_offset(offset)
                    .with_timestamp(timestamp)
                    .with_leader_epoch(if with_epoch { leader_epoch } else { -1 }),
                Ok((None, leader_epoch)) => response.with_leader_epoch(if with_epoch { leader_epoch } else { -1 }),
                Err(code) => response.with_error_code(code.code()),
            };
            partitions.push(response);
        }
        topics.push(ListOffsetsTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    Some(ListOffsetsResponse::default().with_topics(topics))
}
