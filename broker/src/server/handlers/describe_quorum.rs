//! DescribeQuorum (v0-2): the metadata quorum as its leader sees it, for
//! `kafka-metadata-quorum.sh describe --status / --replication`: the active controller, its
//! term (the leader epoch of `__cluster_metadata`), the high watermark, and each voter's and
//! observer's log end offset. The active controller answers from its own raft state; any other
//! node forwards the request to it, as a Kafka broker forwards it to the controller quorum.
//! Runnel keeps no per-member fetch times: a member that holds every entry reports the time of
//! the answer as its last fetch and caught-up time, one that lags reports -1.

use crate::security::acl::Operation;
use std::time::Duration;

use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{broker_id, str_bytes};
use crate::controller::{QuorumReplica, QuorumStatus};
use crate::log::now_ms;
use crate::server::Broker;

/// The metadata log's name in Kafka (KRaft's `__cluster_metadata-0`).
const METADATA_TOPIC: &str = "__cluster_metadata";
/// How long a forwarded request may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: DescribeQuorumRequest,
) -> Option<DescribeQuorumResponse> {
    let version = header.request_api_version;
    if !broker.authorized_cluster(Operation::Describe) {
        return Some(error(ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed."));
    }
    let wants_metadata_log = request.topics.len() == 1
        && &*request.topics[0].topic_name == METADATA_TOPIC
        && request.topics[0].partitions.len() == 1
        && request.topics[0].partitions[0].partition_index == 0;
    if !wants_metadata_log {
        return Some(error(ResponseError::InvalidRequest, "only __cluster_metadata-0 has a quorum"));
    }
    if let Some(status) = broker.controller.replication_status() {
        return Some(describe(&status, version));
    }
    let Some(leader) = broker.controller.leader_id().filter(|&l| l != broker.settings.node_id) else {
        return Some(error(ResponseError::NotLeaderOrFollower, "the metadata quorum has no leader now"));
    };
    match broker.peers.call(leader, version, &request, FORWARD_TIMEOUT).await {
        Ok(response) => Some(response),
        Err(e) => Some(error(ResponseError::RequestTimedOut, &format!("the active controller did not answer: {e}"))),
    }
}

fn error(code: ResponseError, message: &str) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default().with_error_code(code.code()).with_error_message(Some(str_bytes(message)))
}

fn describe(status: &QuorumStatus, version: i16) -> DescribeQuorumResponse {
    let now = now_ms();
    let replica = |r: &QuorumReplica| {
        let seen = if r.caught_up { now } else { -1 };
        ReplicaState::default()
            .with_replica_id(broker_id(r.node_id))
            .with_log_end_offset(r.log_end_offset)
            .with_last_fetch_timestamp(seen)
            .with_last_caught_up_timestamp(seen)
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(broker_id(status.leader))
        .with_leader_epoch(status.term.min(i32::MAX as u64) as i32)
        .with_high_watermark(status.high_watermark)
        .with_current_voters(status.voters.iter().map(replica).collect())
        .with_observers(status.observers.iter().map(replica).collect());
    let mut response = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(kafka_protocol::messages::TopicName(str_bytes(METADATA_TOPIC)))
        .with_partitions(vec![partition])]);
    if version >= 2 {
        // v2 names each voter's controller listener (Kafka's `nodes`).
        let nodes = status
            .voters
            .iter()
            .filter_map(|r| {
                let address = r.address.as_deref()?;
                let (host, port) = address.rsplit_once(':')?;
                let port: u16 = port.parse().ok()?;
                Some(Node::default().with_node_id(broker_id(r.node_id)).with_listeners(vec![
                    Listener::default().with_name(str_bytes("CONTROLLER")).with_host(str_bytes(host)).with_port(port),
                ]))
            })
            .collect();
        response = response.with_nodes(nodes);
    }
    response
}
