//! DescribeLogDirs (`kafka-reassign-partitions.sh` maps every current replica to its log dir
//! with it; `kafka-log-dirs.sh`): the node's one log directory (its data dir) with the size of
//! each partition replica it hosts. Only current replicas exist here (no `-future` replicas of an
//! intra-broker move), so every offset lag is 0; total and usable bytes are not measured (-1,
//! Kafka's UNKNOWN_VOLUME_BYTES).

use crate::security::acl::Operation;
use std::collections::BTreeMap;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, RequestHeader};

use super::{str_bytes, topic_name};
use crate::server::Broker;

/// Kafka's `DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES`.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: DescribeLogDirsRequest,
) -> Option<DescribeLogDirsResponse> {
    // Kafka: DESCRIBE on the cluster; v3+ says so, older versions get no directories.
    if !broker.authorized_cluster(Operation::Describe) {
        let response = DescribeLogDirsResponse::default();
        return Some(if header.request_api_version >= 3 {
            response.with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code())
        } else {
            response
        });
    }
    let image = broker.controller.image();
    let wanted = |topic: &str, partition: u32| match &request.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| &*t.topic == topic && t.partitions.iter().any(|&p| i64::from(p) == i64::from(partition))),
    };
    let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for partition in broker.replicas.all() {
        // A stale incarnation of a recreated topic is not this topic's replica.
        let current = image.topic(partition.topic()).is_some_and(|t| t.topic_id == partition.topic_id());
        if !current || !wanted(partition.topic(), partition.index()) {
            continue;
        }
        topics.entry(partition.topic().to_string()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(partition.index() as i32)
                .with_partition_size(i64::try_from(partition.size_bytes()).unwrap_or(i64::MAX))
                .with_offset_lag(0)
                .with_is_future_key(false),
        );
    }
    let topics = topics
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            DescribeLogDirsTopic::default().with_name(topic_name(&name)).with_partitions(partitions)
        })
        .collect();
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&broker.settings.data_dir.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(UNKNOWN_VOLUME_BYTES)
        .with_usable_bytes(UNKNOWN_VOLUME_BYTES);
    Some(DescribeLogDirsResponse::default().with_results(vec![result]))
}
