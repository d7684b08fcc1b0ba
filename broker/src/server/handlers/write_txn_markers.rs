//! WriteTxnMarkers (v1, coordinator → partition leaders): writes each transaction's commit or
//! abort marker to the partitions this node leads, acks=all, as Kafka's `ReplicaManager` does
//! with origin COORDINATOR (epoch and coordinator-epoch checks in the log's producer state). A
//! marker that reaches a `__consumer_offsets` partition also decides the transactional offset
//! commits held there. `ServerMarkers` is how the transaction coordinator sends markers: in
//! process for partitions led here, WriteTxnMarkers through `peer` to the other leaders.

use crate::security::acl::Operation;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ProducerId, RequestHeader, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::group::OFFSETS_TOPIC;
use crate::log::AppendOrigin;
use crate::partition::Acks;
use crate::server::{partition_error_code, Broker};
use crate::txn::coordinator::marker_batch;
use crate::txn::{MarkerRequest, MarkerSink};

/// How long a marker may wait for its partition's ISR.
const MARKER_TIMEOUT: Duration = Duration::from_secs(30);
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// Writes one marker to a partition this node leads and waits until the ISR has it.
pub async fn write_local_marker(
    broker: &Broker,
    topic: &str,
    partition: i32,
    request: &MarkerRequest,
) -> Result<(), ResponseError> {
    let index = u32::try_from(partition).map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    let hosted = broker.replicas.get(topic, index).ok_or(ResponseError::UnknownTopicOrPartition)?;
    let batch = marker_batch(request.producer_id, request.producer_epoch, request.commit, request.coordinator_epoch);
    let (info, _, leader_epoch) =
        hosted.append_in_epoch(&batch, Acks::All, AppendOrigin::Coordinator).map_err(|e| partition_error_code(&e))?;
    hosted
        .wait_replicated(info.last_offset + 1, leader_epoch, MARKER_TIMEOUT)
        .await
        .map_err(|e| partition_error_code(&e))?;
    if topic == OFFSETS_TOPIC {
        let (groups, producer_id, commit) = (broker.groups.clone(), request.producer_id, request.commit);
        let decided =
            tokio::task::spawn_blocking(move || groups.offsets.complete_txn(index, producer_id, commit)).await;
        if let Ok(Err(e)) = decided {
            tracing::warn!(partition, error = %e, "transaction marker written but the offsets shard is not loaded");
        }
    }
    Ok(())
}

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: WriteTxnMarkersRequest,
) -> Option<WriteTxnMarkersResponse> {
    // Coordinators' traffic (Kafka: CLUSTER_ACTION on the cluster).
    let allowed = broker.authorized_cluster(Operation::ClusterAction);
    let mut markers = Vec::with_capacity(request.markers.len());
    for marker in &request.markers {
        let spec = MarkerRequest {
            producer_id: marker.producer_id.0,
            producer_epoch: marker.producer_epoch,
            commit: marker.transaction_result,
            coordinator_epoch: marker.coordinator_epoch,
            partitions: Vec::new(),
        };
        let mut topics = Vec::with_capacity(marker.topics.len());
        for topic in &marker.topics {
            let writes = topic.partition_indexes.iter().map(|&p| {
                let spec = &spec;
                async move {
                    if !allowed {
                        return (p, Err(kafka_protocol::ResponseError::ClusterAuthorizationFailed));
                    }
                    (p, write_local_marker(broker, &topic.name.0, p, spec).await)
                }
            });
            let partitions = futures_util::future::join_all(writes)
                .await
                .into_iter()
                .map(|(p, result)| {
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(result.err().map_or(0, |code| code.code()))
                })
                .collect();
            topics.push(
                WritableTxnMarkerTopicResult::default().with_name(topic.name.clone()).with_partitions(partitions),
            );
        }
        markers.push(WritableTxnMarkerResult::default().with_producer_id(marker.producer_id).with_topics(topics));
    }
    Some(WriteTxnMarkersResponse::default().with_markers(markers))
}

/// The transaction coordinator's way to its markers' partitions.
pub struct ServerMarkers {
    broker: Weak<Broker>,
}

impl ServerMarkers {
    pub fn new(broker: &Arc<Broker>) -> ServerMarkers {
        ServerMarkers { broker: Arc::downgrade(broker) }
    }
}

impl MarkerSink for ServerMarkers {
    fn write(
        &self,
        leader: u64,
        request: MarkerRequest,
    ) -> Pin<Box<dyn Future<Output = Vec<((String, i32), Result<(), ResponseError>)>> + Send + '_>> {
        Box::pin(async move {
            let failed = |request: &MarkerRequest, code: ResponseError| {
                request.partitions.iter().map(|p| (p.clone(), Err(code))).collect::<Vec<_>>()
            };
            let Some(broker) = self.broker.upgrade() else { return failed(&request, ResponseError::NotCoordinator) };
            if leader == broker.settings.node_id {
                let writes = request.partitions.iter().map(|(topic, partition)| {
                    let (broker, request) = (&broker, &request);
                    async move {
                        ((topic.clone(), *partition), write_local_marker(broker, topic, *partition, request).await)
                    }
                });
                return futures_util::future::join_all(writes).await;
            }
            let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
            for (topic, partition) in &request.partitions {
                match topics.last_mut() {
                    Some(t) if *t.name.0 == **topic => t.partition_indexes.push(*partition),
                    _ => topics.push(
                        WritableTxnMarkerTopic::default()
                            .with_name(TopicName(str_bytes(topic)))
                            .with_partition_indexes(vec![*partition]),
                    ),
                }
            }
            let marker = WritableTxnMarker::default()
                .with_producer_id(ProducerId(request.producer_id))
                .with_producer_epoch(request.producer_epoch)
                .with_transaction_result(request.commit)
                .with_coordinator_epoch(request.coordinator_epoch)
                .with_topics(topics);
            let call = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
            match broker
                .peers
                .call(leader, WRITE_TXN_MARKERS_VERSION, &call, MARKER_TIMEOUT + Duration::from_secs(5))
                .await
            {
                Ok(response) => {
                    let mut results = Vec::new();
                    for marker in response.markers {
                        for topic in marker.topics {
                            for p in topic.partitions {
                                let result =
                                    match p.error_code {
                                        0 => Ok(()),
                                        code => Err(ResponseError::try_from_code(code)
                                            .unwrap_or(ResponseError::UnknownServerError)),
                                    };
                                results.push(((topic.name.0.to_string(), p.partition_index), result));
                            }
                        }
                    }
                    results
                }
                Err(e) => {
                    tracing::debug!(leader, error = %e, "WriteTxnMarkers to a peer failed");
                    failed(&request, ResponseError::NotLeaderOrFollower)
                }
            }
        })
    }
}
