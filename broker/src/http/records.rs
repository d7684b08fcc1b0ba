//! Records over HTTP: JSON payload formats (Confluent's v2 json/binary and v3 typed
//! STRING/JSON/BINARY), partition choice (Kafka's murmur2 for keyed records, sticky per
//! request for keyless ones), appending through the Produce handler, and turning fetched
//! batches back into records.
//!
//! HTTP records take the same path as a Kafka client's: they become one RecordBatch per
//! partition and go through `handlers::produce` (same validation, same metrics, same acks) on
//! this node for the partitions it leads, and as a Produce request to the leader for the others.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::ResponseError;

use super::error::{ApiError, ApiResult};
use super::kafka::Route;
use super::{kafka, Http};
use crate::log::records::{for_each_committed_record, AbortedFilter, BatchBuilder};
use crate::log::{now_ms, Compression};
use crate::server::handlers;

pub const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One record to append.
#[derive(Debug, Clone, Default)]
pub struct NewRecord {
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; now when absent.
    pub timestamp: Option<i64>,
}

/// Where a record landed.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
}

/// A record read back.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

pub use crate::partition::partitioner::{murmur2, partition_for_key};

/// Records one HTTP produce request may carry: each costs a few hundred bytes of memory
/// decoded, whatever its size in the body (`{}` is a record), so the body limit alone would let
/// one request of `{},{},…` take gigabytes.
pub const MAX_RECORDS_PER_REQUEST: usize = 100_000;

/// Deserializes a JSON array of at most [`MAX_RECORDS_PER_REQUEST`] elements, failing at the
/// first one past it (before it is decoded).
pub fn bounded_records<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Bounded<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Bounded<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "an array of at most {MAX_RECORDS_PER_REQUEST} records")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            while let Some(element) = seq.next_element()? {
                if out.len() == MAX_RECORDS_PER_REQUEST {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_RECORDS_PER_REQUEST} records in one request"
                    )));
                }
                out.push(element);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_seq(Bounded(std::marker::PhantomData))
}

/// Appends `records` to `topic` with acks=all; one result per record, in order. Records of one
/// partition keep their order and get consecutive offsets. Refused (403) unless the client may
/// WRITE the topic, before the image says whether it exists (Produce's rule; the Produce
/// handler checks again on the leader).
pub async fn append(http: &Http, topic: &str, records: Vec<NewRecord>) -> ApiResult<Vec<ApiResult<Appended>>> {
    super::auth::require(
        &http.broker,
        crate::security::acl::Operation::Write,
        crate::security::acl::ResourceType::Topic,
        topic,
    )?;
    let image = http.broker.controller.image();
    let known = image.topics.get(topic).ok_or_else(|| ApiError::unknown_topic(topic))?;
    let partitions = known.partitions.len() as u32;
    // A partition's records go in as many batches as `max.message.bytes` needs (the leader
    // refuses a bigger one, MESSAGE_TOO_LARGE), sent one round after another so that each
    // Produce holds one batch per partition and a partition's records keep their order.
    let max_batch_bytes =
        crate::server::topic_log_config(&http.broker.settings.log_defaults, &known.configs).max_message_bytes as usize;
    let sticky = http.next_sticky_partition(partitions);
    let now = now_ms();
    // partition → its batches: (indices of their records, builder)
    let mut batches: BTreeMap<i32, Vec<(Vec<usize>, BatchBuilder)>> = BTreeMap::new();
    let mut results: Vec<Option<ApiResult<Appended>>> = vec![None; records.len()];
    for (i, record) in records.iter().enumerate() {
        let partition = match (record.partition, &record.key) {
            (Some(p), _) if p < 0 || p as u32 >= partitions => {
                results[i] = Some(Err(ApiError::unknown_partition(topic, p as i64)));
                continue;
            }
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => sticky,
        };
        let headers: Vec<(&str, Option<&[u8]>)> =
            record.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
        let (key, value) = (record.key.as_deref(), record.value.as_deref());
        let bound = crate::log::records::record_size_bound(key, value, &headers);
        let partition_batches = batches.entry(partition).or_default();
        let full =
            partition_batches.last().is_none_or(|(_, b)| !b.is_empty() && b.size_bytes() + bound > max_batch_bytes);
        if full {
            partition_batches.push((Vec::new(), BatchBuilder::new(Compression::None)));
        }
        if let Some((indices, builder)) = partition_batches.last_mut() {
            indices.push(i);
            builder.push(record.timestamp.unwrap_or(now), key, value, &headers);
        }
    }
    let mut rounds: Vec<Vec<(i32, Vec<usize>, BatchBuilder)>> = Vec::new();
    for (partition, partition_batches) in batches {
        for (round, (indices, builder)) in partition_batches.into_iter().enumerate() {
            if rounds.len() <= round {
                rounds.push(Vec::new());
            }
            rounds[round].push((partition, indices, builder));
        }
    }
    // A partition whose batch failed sends none of its later ones: they answer the same error
    // (the records after a failed one are not written ahead of it).
    let mut failed: BTreeMap<i32, ApiError> = BTreeMap::new();
    for round in rounds {
        let mut partition_data = Vec::with_capacity(round.len());
        let mut layout = Vec::with_capacity(round.len());
        for (partition, indices, builder) in round {
            if let Some(error) = failed.get(&partition) {
                for &i in &indices {
                    results[i] = Some(Err(error.clone()));
                }
                continue;
            }
            let batch = builder.build().map_err(|e| ApiError::invalid(format!("cannot encode the records: {e}")))?;
            partition_data
                .push(PartitionProduceData::default().with_index(partition).with_records(Some(batch.into_bytes())));
            layout.push((partition, indices));
        }
        if partition_data.is_empty() {
            continue;
        }
        let mut answers = produce_on_leaders(http, topic, partition_data).await.into_iter();
        for (partition, indices) in layout {
            let answer = answers.next().unwrap_or_else(|| Err(ApiError::internal("partition was not answered")));
            let answer = match answer {
                Ok(answer) if answer.error_code != 0 => {
                    Err(ApiError::kafka_code(answer.error_code, answer.error_message.as_deref()))
                }
                other => other,
            };
            if let Err(error) = &answer {
                failed.insert(partition, error.clone());
            }
            for (n, &i) in indices.iter().enumerate() {
                results[i] = Some(match &answer {
                    Err(e) => Err(e.clone()),
                    Ok(answer) => Ok(Appended {
                        partition,
                        offset: answer.base_offset + n as i64,
                        timestamp: if answer.log_append_time_ms >= 0 {
                            answer.log_append_time_ms
                        } else {
                            records[i].timestamp.unwrap_or(now)
                        },
                    }),
                });
            }
        }
    }
    Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(ApiError::internal("record was not answered")))).collect())
}

/// How long a produce may wait for acks=all, here or on the leader it is forwarded to.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// Produces each partition's batch (acks=all) on its leader: partitions led here through the
/// in-process handler, the others as one Produce request per leading broker, all at once. A
/// partition answered NOT_LEADER_OR_FOLLOWER (leadership moved in between) is sent once more,
/// to the leader that answer or the image now names. One answer per partition, in order.
async fn produce_on_leaders(
    http: &Http,
    topic: &str,
    partitions: Vec<PartitionProduceData>,
) -> Vec<ApiResult<PartitionProduceResponse>> {
    let node_id = http.broker.settings.node_id;
    let image = http.broker.controller.image();
    let routes: Vec<Route> = partitions.iter().map(|p| kafka::leader_route(node_id, &image, topic, p.index)).collect();
    let mut answers = produce_routed(http, topic, &partitions, &routes).await;
    let moved: Vec<usize> = (0..partitions.len())
        .filter(|&i| matches!(&answers[i], Ok(a) if a.error_code == ResponseError::NotLeaderOrFollower.code()))
        .collect();
    if moved.is_empty() {
        return answers;
    }
    let image = http.broker.controller.image();
    let retry: Vec<PartitionProduceData> = moved.iter().map(|&i| partitions[i].clone()).collect();
    let retry_routes: Vec<Route> = moved
        .iter()
        .map(|&i| {
            let named = answers[i].as_ref().ok().map_or(-1, |a| a.current_leader.leader_id.0);
            match u64::try_from(named) {
                Ok(leader) if leader == node_id => Route::Here,
                Ok(leader) if image.brokers.contains_key(&leader) => Route::Peer(leader),
                _ => kafka::leader_route(node_id, &image, topic, partitions[i].index),
            }
        })
        .collect();
    let retried = produce_routed(http, topic, &retry, &retry_routes).await;
    for (i, answer) in moved.into_iter().zip(retried) {
        answers[i] = answer;
    }
    answers
}

/// One Produce request per route, run concurrently; answers in the order of `partitions`.
async fn produce_routed(
    http: &Http,
    topic: &str,
    partitions: &[PartitionProduceData],
    routes: &[Route],
) -> Vec<ApiResult<PartitionProduceResponse>> {
    let mut legs: BTreeMap<Route, Vec<usize>> = BTreeMap::new();
    for (i, route) in routes.iter().enumerate() {
        legs.entry(*route).or_default().push(i);
    }
    let calls = legs.into_iter().map(|(route, members)| async move {
        let request =
            ProduceRequest::default().with_acks(-1).with_timeout_ms(PRODUCE_TIMEOUT_MS).with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(handlers::topic_name(topic))
                    .with_partition_data(members.iter().map(|&i| partitions[i].clone()).collect()),
            ]);
        let response = match route {
            Route::Here => handlers::produce::handle(&http.broker, &kafka::header(kafka::PRODUCE), request)
                .await
                .ok_or_else(|| ApiError::internal("produce returned no response")),
            Route::Peer(node) => {
                // The leader waits up to the request's timeout for acks=all; give the answer
                // time to arrive after that.
                let timeout = Duration::from_millis(PRODUCE_TIMEOUT_MS as u64) + Duration::from_secs(5);
                kafka::forward(http, node, kafka::PRODUCE, &request, timeout).await
            }
        };
        (members, response)
    });
    let mut answers: Vec<Option<ApiResult<PartitionProduceResponse>>> = vec![None; partitions.len()];
    for (members, response) in futures_util::future::join_all(calls).await {
        match response {
            Ok(response) => {
                let mut by_index: BTreeMap<i32, PartitionProduceResponse> =
                    response.responses.into_iter().flat_map(|t| t.partition_responses).map(|p| (p.index, p)).collect();
                for i in members {
                    answers[i] = by_index.remove(&partitions[i].index).map(Ok);
                }
            }
            Err(e) => {
                for i in members {
                    answers[i] = Some(Err(e.clone()));
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(ApiError::internal("the leader did not answer for the partition"))))
        .collect()
}

/// Decodes the records of fetched batches at or after `from_offset`, at most `limit` of them
/// (see [`for_each_committed_record`]); returns the offset to read next.
/// With `aborted` (a read_committed fetch's aborted transactions) their records are left out.
pub fn decode(
    partition: i32,
    bytes: Bytes,
    from_offset: i64,
    limit: usize,
    aborted: Option<&mut AbortedFilter>,
    out: &mut Vec<ReadRecord>,
) -> i64 {
    let limit = limit.saturating_sub(out.len());
    for_each_committed_record(bytes, from_offset, limit, aborted, |record| {
        out.push(ReadRecord {
            partition,
            offset: record.offset,
            timestamp: record.timestamp,
            key: record.key,
            value: record.value,
            headers: record.headers.into_iter().map(|h| (h.key, h.value)).collect(),
        });
        std::ops::ControlFlow::Continue(())
    })
}

/// Bytes as JSON text: a UTF-8 string, else base64. Returns (text, "utf8" | "base64").
pub fn text_or_base64(bytes: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), "utf8"),
        Err(_) => (BASE64.encode(bytes), "base64"),
    }
}

pub fn decode_base64(field: &str, text: &str) -> ApiResult<Bytes> {
    BASE64.decode(text).map(Bytes::from).map_err(|e| ApiError::invalid(format!("{field} is not valid base64: {e}")))
}

/// A JSON value as record bytes (compact JSON).
pub fn json_bytes(value: &serde_json::Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}
