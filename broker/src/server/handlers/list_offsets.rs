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
    let mut occurrences: std::collections::HashMap<(&str, i32), usize> = std::collections::HashMap::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            *occurrences.entry((&topic.name.0, p.partition_index)).or_default() += 1;
        }
    }
    for topic in &request.topics {
        let name: &str = &topic.name.0;
        let denied = !broker.authorized(Operation::Describe, ResourceType::Topic, name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let mut response = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1);
            let spec = offset_spec(p.timestamp, header.request_api_version);
            let hosted = if denied {
                Err(ResponseError::TopicAuthorizationFailed)
            } else {
                spec.and_then(|_| hosted_partition(broker, &image, name, p.partition_index))
            };
            let duplicate = occurrences.get(&(name, p.partition_index)).is_some_and(|&n| n > 1);
            let result = hosted.and_then(|partition| {
                if duplicate {
                    // Kafka's ReplicaManager.fetchOffset: a partition named twice is refused.
                    return Err(ResponseError::InvalidRequest);
                }
                partition
                    .check_leader_epoch(p.current_leader_epoch)
                    .and_then(|()| match spec {
                        Ok(Some(spec)) => partition.list_offset(spec, isolation),
                        _ => Ok(None),
                    })
                    .map_err(|e| partition_error_code(&e))
            });
            response = match result {
                Ok(Some((offset, timestamp, leader_epoch))) => response
                    .with_offset(offset)
                    .with_timestamp(timestamp)
                    .with_leader_epoch(if with_epoch { leader_epoch } else { -1 }),
                // No such offset (the latest tiered one): Kafka answers epoch -1 too.
                Ok(None) => response.with_leader_epoch(-1),
                Err(code) => response.with_error_code(code.code()),
            };
            partitions.push(response);
        }
        topics.push(ListOffsetsTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    Some(ListOffsetsResponse::default().with_topics(topics))
}

/// What a partition's `timestamp` asks for: a sentinel (at the versions that have it), or the
/// first offset at or after a timestamp; `None` for the latest tiered offset, which without
/// tiered storage is none. A negative timestamp that is no sentinel of the request's version
/// is UNSUPPORTED_VERSION (Kafka's `isListOffsetsTimestampUnsupported`); -6 (the earliest
/// offset pending upload, KIP-1023) needs v11, which is not served.
fn offset_spec(timestamp: i64, version: i16) -> Result<Option<OffsetSpec>, ResponseError> {
    let (spec, since) = match timestamp {
        ts if ts >= 0 => return Ok(Some(OffsetSpec::Timestamp(ts))),
        -1 => (Some(OffsetSpec::Latest), 0),
        -2 => (Some(OffsetSpec::Earliest), 0),
        -3 => (Some(OffsetSpec::MaxTimestamp), 7),
        -4 => (Some(OffsetSpec::Earliest), 8),
        -5 => (None, 9),
        _ => return Err(ResponseError::UnsupportedVersion),
    };
    if version < since {
        return Err(ResponseError::UnsupportedVersion);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_timestamps_are_sentinels_of_their_versions_or_unsupported() {
        assert_eq!(offset_spec(0, 0), Ok(Some(OffsetSpec::Timestamp(0))));
        assert_eq!(offset_spec(-1, 0), Ok(Some(OffsetSpec::Latest)));
        assert_eq!(offset_spec(-2, 1), Ok(Some(OffsetSpec::Earliest)));
        assert_eq!(offset_spec(-3, 6), Err(ResponseError::UnsupportedVersion));
        assert_eq!(offset_spec(-3, 7), Ok(Some(OffsetSpec::MaxTimestamp)));
        assert_eq!(offset_spec(-4, 7), Err(ResponseError::UnsupportedVersion));
        assert_eq!(offset_spec(-4, 8), Ok(Some(OffsetSpec::Earliest)));
        assert_eq!(offset_spec(-5, 8), Err(ResponseError::UnsupportedVersion));
        assert_eq!(offset_spec(-5, 9), Ok(None));
        for unknown in [-6, -7, -100, i64::MIN] {
            assert_eq!(offset_spec(unknown, 10), Err(ResponseError::UnsupportedVersion), "{unknown}");
        }
    }
}
