//! Fetch: raw batches from the fetch offset, with Kafka's long poll (`max_wait_ms` /
//! `min_bytes`, woken by the partitions it reads), total and per-partition byte limits (the total capped by the
//! broker's `fetch.max.bytes`), and the "at least one batch" rule for the first partition with
//! data (KIP-74). A consumer (replica id -1) is served by the leader only, up to the high
//! watermark (`read_committed`: up to the last stable offset, with the aborted transactions
//! overlapping the data, KIP-98); a follower (replica id = its node id) is served up to the log end offset, its
//! progress moves the high watermark, and a log that diverges from the leader's gets a
//! `diverging_epoch` instead of records. Fetch sessions: every request is answered as a full
//! fetch with session id 0 ("no session"), which clients accept; an unknown non-zero session id
//! gets FETCH_SESSION_ID_NOT_FOUND.

use std::time::Duration;

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, RequestHeader};
use kafka_protocol::ResponseError;

use crate::security::acl::{Operation, ResourceType};
use tokio::sync::watch;

use super::hosted_partition;
use crate::config::ReplicaSelector;
use crate::partition::{FirstBatch, Isolation, ReplicaFetch};
use crate::server::{partition_error_code, Broker};

/// Upper bound on `max_wait_ms`, so a client cannot park a request for hours.
const MAX_WAIT_MS: i32 = 30_000;

pub async fn handle(broker: &Broker, header: &RequestHeader, request: FetchRequest) -> Option<FetchResponse> {
    let version = header.request_api_version;
    // KIP-227 fetch sessions are not kept (every answer says session 0, so clients send full
    // fetches): a full fetch (epoch 0 or -1, whatever its id) is served, as Kafka's
    // FetchManager serves one after dropping the session it names; an incremental one names a
    // session there is none of.
    if request.session_epoch != 0 && request.session_epoch != -1 {
        return Some(FetchResponse::default().with_error_code(ResponseError::FetchSessionIdNotFound.code()));
    }
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(request.max_wait_ms.clamp(0, MAX_WAIT_MS) as u64);
    let mut progress: Option<Vec<watch::Receiver<u64>>> = None;
    loop {
        if let Some(receivers) = &mut progress {
            for receiver in receivers.iter_mut() {
                receiver.borrow_and_update();
            }
        }
        let (response, bytes, answer_now) = read_once(broker, &request, version);
        if bytes >= request.min_bytes.max(0) as usize || answer_now || tokio::time::Instant::now() >= deadline {
            return Some(count_out(broker, response, request.replica_id.0));
        }
        // Park on the partitions this request reads, subscribed before the re-read below so no
        // change between the read and the wait is missed.
        let receivers = match &mut progress {
            Some(receivers) => receivers,
            None => {
                let subscribed = progress.insert(subscribe(broker, &request));
                if subscribed.is_empty() {
                    // Nothing hosted to wait on: nothing can arrive before the deadline.
                    tokio::time::sleep_until(deadline).await;
                    return Some(count_out(broker, read_once(broker, &request, version).0, request.replica_id.0));
                }
                // Read once more: an append may have landed between the first read and the
                // subscription.
                continue;
            }
        };
        let changed = futures_util::future::select_all(receivers.iter_mut().map(|r| Box::pin(r.changed())));
        match tokio::time::timeout_at(deadline, changed).await {
            Ok((Ok(()), _, _)) => continue,
            // Deadline passed, or a partition was closed: answer with what we have.
            _ => return Some(count_out(broker, read_once(broker, &request, version).0, request.replica_id.0)),
        }
    }
}

/// The progress signals of every requested partition hosted here.
fn subscribe(broker: &Broker, request: &FetchRequest) -> Vec<watch::Receiver<u64>> {
    let mut receivers = Vec::new();
    for topic in &request.topics {
        for fetch in &topic.partitions {
            if let Some(partition) =
                u32::try_from(fetch.partition).ok().and_then(|p| broker.replicas.get(&topic.topic.0, p))
            {
                receivers.push(partition.subscribe_progress());
            }
        }
    }
    receivers
}

/// A follower's fetch (`replica` is its node id): read up to the log end offset with its
/// progress recorded on the leader; an ISR expansion it makes possible is proposed, and a high
/// watermark it moved wakes the long polls.
fn read_as_leader_for(
    broker: &Broker,
    image: &crate::controller::MetadataImage,
    partition: &std::sync::Arc<crate::partition::Partition>,
    fetch: &kafka_protocol::messages::fetch_request::FetchPartition,
    replica: u64,
    max_bytes: usize,
    first_batch: FirstBatch,
) -> Result<(crate::partition::FetchedData, Option<EpochEndOffset>), crate::partition::PartitionError> {
    let read = partition.read_for_follower(ReplicaFetch {
        replica,
        broker_epoch: image.live_broker_epoch(replica).unwrap_or(-1),
        fetch_offset: fetch.fetch_offset,
        current_leader_epoch: fetch.current_leader_epoch,
        last_fetched_epoch: fetch.last_fetched_epoch,
        log_start_offset: fetch.log_start_offset,
        max_bytes,
        first_batch,
    })?;
    if let Some(proposal) = read.proposal {
        crate::replication::isr::propose(&broker.controller, &broker.metrics, partition.clone(), proposal);
    }
    let diverging =
        read.diverging.map(|d| EpochEndOffset::default().with_epoch(d.leader_epoch).with_end_offset(d.end_offset));
    Ok((read.data, diverging))
}

/// A consumer's read (replica id -1), up to the high watermark. The leader serves it, or with
/// `replica.selector.class` rack-aware and a client that names its rack (Fetch v11+, KIP-392)
/// names an in-sync replica in that rack as `preferred_read_replica` and returns no records, so
/// the client moves there. A follower serves a client that sent its client metadata (v11+:
/// it was sent here by a leader), up to its own high watermark, as Kafka's `fetchOnlyFromLeader`
/// rule allows; older clients and replicas of no known leader get NOT_LEADER_OR_FOLLOWER.
#[allow(clippy::too_many_arguments)]
fn read_for_consumer(
    broker: &Broker,
    image: &crate::controller::MetadataImage,
    partition: &crate::partition::Partition,
    request: &FetchRequest,
    fetch: &kafka_protocol::messages::fetch_request::FetchPartition,
    version: i16,
    max_bytes: usize,
    first_batch: FirstBatch,
) -> Result<(crate::partition::FetchedData, Option<u64>), crate::partition::PartitionError> {
    let leads = partition.is_leader();
    if !leads && (version < 11 || partition.following().is_none()) {
        partition.check_leader()?;
    }
    partition.check_leader_epoch(fetch.current_leader_epoch)?;
    if leads && version >= 11 && broker.settings.replica_selector == ReplicaSelector::RackAware {
        let client_rack: &str = &request.rack_id;
        if let Some(replica) = preferred_read_replica(broker, image, partition, fetch.fetch_offset, client_rack) {
            let read = crate::partition::FetchedData {
                high_watermark: partition.high_watermark(),
                last_stable_offset: partition.last_stable_offset()?,
                log_start_offset: partition.log_start_offset(),
                log_end_offset: partition.log_end_offset(),
                records: bytes::Bytes::new(),
                aborted: Vec::new(),
            };
            return Ok((read, Some(replica)));
        }
    }
    let isolation = if request.isolation_level == 1 { Isolation::ReadCommitted } else { Isolation::ReadUncommitted };
    partition.read(fetch.fetch_offset, max_bytes, first_batch, isolation).map(|read| (read, None))
}

/// Kafka's `RackAwareReplicaSelector` on the leader: none when the client names no rack or the
/// leader is in it; else the live in-sync follower in the client's rack that holds the fetch
/// offset, the one furthest ahead. `None` means "read here".
fn preferred_read_replica(
    broker: &Broker,
    image: &crate::controller::MetadataImage,
    partition: &crate::partition::Partition,
    fetch_offset: i64,
    client_rack: &str,
) -> Option<u64> {
    let rack_of = |node: u64| image.brokers.get(&node).and_then(|b| b.rack.clone());
    if client_rack.is_empty() || rack_of(broker.settings.node_id).as_deref() == Some(client_rack) {
        return None;
    }
    let isr = partition.isr();
    partition
        .follower_log_end_offsets()
        .into_iter()
        .filter(|&(replica, log_end_offset)| {
            isr.contains(&replica)
                && image.is_live(replica)
                && rack_of(replica).as_deref() == Some(client_rack)
                && log_end_offset > fetch_offset
                && fetch_offset >= partition.log_start_offset()
        })
        .max_by_key(|&(_, log_end_offset)| log_end_offset)
        .map(|(replica, _)| replica)
}

/// Bytes out per topic, for the response that is actually sent to a consumer; a follower's
/// fetch is replication bytes out (Kafka counts it apart).
fn count_out(broker: &Broker, response: FetchResponse, replica_id: i32) -> FetchResponse {
    for topic in &response.responses {
        let bytes: usize = topic.partitions.iter().map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum();
        if replica_id >= 0 {
            broker.metrics.replication_bytes_out.inc_by(bytes as u64);
        } else {
            broker.metrics.record_out(&topic.topic.0, bytes as u64);
        }
    }
    response
}

/// One pass over the requested partitions: the response, its record bytes, and whether any
/// partition answered with an error or a diverging epoch (either ends a long poll at once, as
/// in Kafka).
///
/// Sizes follow Kafka's `ReplicaManager.readFromLog`: a running limit starts at the request's
/// `max_bytes` capped by the broker's `fetch.max.bytes`; each partition reads at most
/// `min(partition_max_bytes, what is left)`; only until some partition has returned data may a
/// first batch larger than that limit be returned whole (KIP-74), so the response exceeds
/// `max_bytes` by at most that one batch.
fn read_once(broker: &Broker, request: &FetchRequest, version: i16) -> (FetchResponse, usize, bool) {
    let image = broker.controller.image();
    let mut limit_bytes = (request.max_bytes.max(0) as usize).min(broker.settings.fetch_max_bytes);
    let mut first_batch = FirstBatch::Whole;
    let mut total = 0usize;
    // An error or a diverging epoch: the response is answered without waiting for bytes.
    let mut answer_now = false;
    let read_committed = request.isolation_level == 1;
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name: &str = &topic.topic.0;
        // Consumers need READ on the topic; a follower's fetch is the cluster's own traffic,
        // CLUSTER_ACTION on the cluster (refused per partition, as Kafka's KafkaApis does).
        let denied = match request.replica_id.0 {
            0.. => !broker.authorized_cluster(Operation::ClusterAction),
            _ => !broker.authorized(Operation::Read, ResourceType::Topic, name),
        };
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for fetch in &topic.partitions {
            let mut data = PartitionData::default().with_partition_index(fetch.partition).with_high_watermark(-1);
            if read_committed {
                data = data.with_aborted_transactions(Some(Vec::new()));
            } else {
                data = data.with_aborted_transactions(None);
            }
            let code = match (denied, hosted_partition(broker, &image, name, fetch.partition)) {
                (true, _) => Some(ResponseError::TopicAuthorizationFailed),
                (false, Err(code)) => Some(code),
                (false, Ok(partition)) => {
                    let max_bytes = (fetch.partition_max_bytes.max(0) as usize).min(limit_bytes);
                    let read = match u64::try_from(request.replica_id.0) {
                        Ok(replica) => {
                            read_as_leader_for(broker, &image, &partition, fetch, replica, max_bytes, first_batch)
                        }
                        Err(_) => read_for_consumer(
                            broker,
                            &image,
                            &partition,
                            request,
                            fetch,
                            version,
                            max_bytes,
                            first_batch,
                        )
                        .map(|(read, preferred)| {
                            if let Some(replica) = preferred {
                                // The client moves to that replica: told at once, not after
                                // max.wait.ms (Kafka answers a redirect immediately).
                                answer_now = true;
                                data = std::mem::take(&mut data).with_preferred_read_replica(BrokerId(replica as i32));
                            }
                            (read, None)
                        }),
                    };
                    match read {
                        Ok((read, diverging)) => {
                            data = data
                                .with_high_watermark(read.high_watermark)
                                .with_last_stable_offset(read.last_stable_offset)
                                .with_log_start_offset(read.log_start_offset);
                            if read_committed {
                                let aborted = read
                                    .aborted
                                    .iter()
                                    .map(|t| {
                                        AbortedTransaction::default()
                                            .with_producer_id(ProducerId(t.producer_id))
                                            .with_first_offset(t.first_offset)
                                    })
                                    .collect();
                                data = data.with_aborted_transactions(Some(aborted));
                            }
                            if let Some(diverging) = diverging {
                                data = data.with_diverging_epoch(diverging);
                                // The follower must truncate before anything can arrive for it:
                                // answered at once, as Kafka does, not after max.wait.ms.
                                answer_now = true;
                            }
                            if !read.records.is_empty() {
                                first_batch = FirstBatch::WithinLimit;
                                total += read.records.len();
                                limit_bytes = limit_bytes.saturating_sub(read.records.len());
                                data = data.with_records(Some(read.records));
                            }
                            None
                        }
                        Err(e) => {
                            tracing::debug!(
                                topic = name,
                                partition = fetch.partition,
                                replica = request.replica_id.0,
                                fetch_offset = fetch.fetch_offset,
                                current_leader_epoch = fetch.current_leader_epoch,
                                leader = partition.is_leader(),
                                leader_epoch = partition.leader_epoch(),
                                log_end_offset = partition.log_end_offset(),
                                high_watermark = partition.high_watermark(),
                                error = %e,
                                "fetch refused"
                            );
                            data = data
                                .with_high_watermark(partition.high_watermark())
                                .with_log_start_offset(partition.log_start_offset());
                            Some(partition_error_code(&e))
                        }
                    }
                }
            };
            if let Some(code) = code {
                answer_now = true;
                data = data.with_error_code(code.code());
                if version >= 12
                    && matches!(code, ResponseError::NotLeaderOrFollower | ResponseError::FencedLeaderEpoch)
                {
                    // KIP-951 (a tagged field from v12): where the client should go instead.
                    let (leader, epoch) = super::current_leader(&image, name, fetch.partition);
                    data = data.with_current_leader(
                        LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch),
                    );
                }
            }
            partitions.push(data);
        }
        topics.push(FetchableTopicResponse::default().with_topic(topic.topic.clone()).with_partitions(partitions));
    }
    (FetchResponse::default().with_responses(topics).with_session_id(0), total, answer_now)
}
