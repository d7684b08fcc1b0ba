//! Produce: appends each partition's batches as raw bytes (validated header and CRC, offsets
//! assigned in place) on the partition's leader and answers per partition: acks=1 after the
//! leader's append, acks=all once the high watermark passed the batch (at most the request's
//! `timeout_ms`). acks=0 gets no response, as in Kafka. A topic's validator (`validator.rs`)
//! judges each partition's batches on the leader first; a refusal is INVALID_RECORD with the
//! validator's message and the records at fault, nothing appended.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ProduceRequest, ProduceResponse, ProducerId, RequestHeader, TopicName, TransactionalId,
};
use kafka_protocol::ResponseError;

use super::hosted_partition;
use super::str_bytes;
use crate::controller::MetadataImage;
use crate::log::{AppendOrigin, TxnVerification};
use crate::partition::Acks;
use crate::security::acl::{Operation, ResourceType};
use crate::server::{partition_error_code, record_errors, Broker};
use crate::txn::TRANSACTION_STATE_TOPIC;

/// Upper bound on a produce request's `timeout_ms` (how long acks=all may wait).
const MAX_TIMEOUT_MS: i32 = 300_000;
/// The broker-to-broker AddPartitionsToTxn version of a verification (KIP-890's batch form).
const VERIFY_VERSION: i16 = 4;
/// The first Produce version of transaction version 2: a transaction's first batch on a
/// partition adds the partition to the transaction (KIP-890 part 2).
const IMPLICIT_ADD_VERSION: i16 = 12;
/// How long a produce waits for its transaction's coordinator to verify it.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Clients do not append to the coordinators' own topics (Kafka's "Cannot append to internal
/// topic"): their loaders trust every record, so a forged one would be a commit for any group
/// or a transaction state that writes markers for any producer. Kafka lets a client whose id is
/// `__admin_client` through; Runnel lets no client through.
fn refuse_internal(topic: &str) -> Result<(), (ResponseError, String)> {
    if crate::controller::is_coordinator_topic(topic) {
        return Err((ResponseError::InvalidTopicException, format!("Cannot append to internal topic {topic}")));
    }
    Ok(())
}

/// Kafka's rule from Produce v3 on: exactly one record batch per partition, which is what every
/// client sends. The transaction checks (a transactional batch needs the request's
/// transactional id; the verification of a transaction's first batch) read a partition's first
/// batch only. Records that are empty or whose first batch does not parse are left to the log's
/// checks, which answer them.
/// Also Kafka's: zstd only from Produce v7 (KIP-110), UNSUPPORTED_COMPRESSION_TYPE before.
fn one_batch(version: i16, records: &Bytes) -> Result<(), (ResponseError, String)> {
    match crate::log::BatchHeader::read(records) {
        Ok(header) if version >= 3 && header.size() < records.len() => Err((
            ResponseError::InvalidRecord,
            format!("Produce requests with version {version} are only allowed to contain exactly one record batch per partition"),
        )),
        Ok(header) if version < 7 && header.attributes.compression() == Some(crate::log::Compression::Zstd) => Err((
            ResponseError::UnsupportedCompressionType,
            format!("Produce requests with version {version} are not allowed to use ZStandard compression"),
        )),
        _ => Ok(()),
    }
}

/// Authorizes (Kafka's rules: WRITE on the transactional id of a transactional request, WRITE
/// on each topic), then produces to the topics the client may write.
pub async fn handle(broker: &Broker, header: &RequestHeader, mut request: ProduceRequest) -> Option<ProduceResponse> {
    if let Some(id) = &request.transactional_id {
        if !broker.authorized(Operation::Write, ResourceType::TransactionalId, &id.0) {
            return Some(reject_all(&request, ResponseError::TransactionalIdAuthorizationFailed));
        }
    }
    let denied = super::take_denied_topics(broker, &mut request.topic_data, |t| &t.name.0, Operation::Write);
    let mut response = produce(broker, header, request).await;
    if let Some(response) = &mut response {
        response
            .responses
            .extend(denied.iter().map(|topic| rejected_topic(topic, ResponseError::TopicAuthorizationFailed)));
    }
    response
}

async fn produce(broker: &Broker, header: &RequestHeader, request: ProduceRequest) -> Option<ProduceResponse> {
    let version = header.request_api_version;
    let acks = match request.acks {
        0 => Acks::None,
        1 => Acks::Leader,
        -1 => Acks::All,
        _ => return Some(reject_all(&request, ResponseError::InvalidRequiredAcks)),
    };
    // Kafka's rule: transactional records need the request's transactional id (checked on
    // each partition's first batch, its only one: `one_batch`).
    if request.transactional_id.is_none() && has_transactional_records(&request) {
        return Some(reject_all(&request, ResponseError::TransactionalIdAuthorizationFailed));
    }
    let image = broker.controller.image();
    // Transaction version 2 clients add partitions by producing, so v12 asks the coordinator
    // whatever the verification setting says.
    let verifying = broker.txn.settings.partition_verification || version >= IMPLICIT_ADD_VERSION;
    let verified = match &request.transactional_id {
        Some(id) if verifying => verify_transaction(broker, &image, &id.0, version, &request).await,
        _ => HashMap::new(),
    };
    // A partition verify_transaction gave no verdict (not transactional, not led here) still
    // needs a guard to open a transaction, should it reach the log.
    let unverified = if verifying { TxnVerification::Required(None) } else { TxnVerification::NotRequired };
    // The topics' validators (if any) judge the batches this leader is about to append, every
    // partition's at once (each is a guest call on the blocking pool: judged one after another
    // they would add up in the request's latency, and a connection's requests are served in
    // turn). Elsewhere the append answers NOT_LEADER_OR_FOLLOWER and the client goes on to the
    // leader, so a validator's verdict must not hide that.
    let mut verdicts = validate(broker, &image, &request).await.into_iter();
    // Appends first, every partition; then acks=all waits for all of them at once (Kafka's
    // delayed produce), each until its high watermark passes the batch or the timeout.
    let mut appends = Vec::with_capacity(request.topic_data.len());
    for topic in &request.topic_data {
        let name: &str = &topic.name.0;
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            let verification = if verified.is_empty() {
                Ok(unverified)
            } else {
                verified.get(&(name.to_string(), data.index)).cloned().unwrap_or(Ok(unverified))
            };
            let records = data.records.clone().unwrap_or_else(Bytes::new);
            let validated = verdicts.next().unwrap_or(crate::validator::Verdict::Accept);
            let result = refuse_internal(name)
                .and(one_batch(version, &records))
                .and(verification)
                .map_err(|(code, message)| (code, Some(message), vec![]))
                .and_then(|verification| match validated {
                    crate::validator::Verdict::Accept => Ok(verification),
                    crate::validator::Verdict::Reject { message, records } => {
                        Err((ResponseError::InvalidRecord, Some(message), validator_record_errors(records)))
                    }
                })
                .and_then(|verification| {
                    hosted_partition(broker, &image, name, data.index)
                        .map_err(|code| (code, None, vec![]))
                        .map(|partition| (partition, verification))
                })
                .and_then(|(partition, verification)| {
                    let (info, log_start_offset, leader_epoch) = partition
                        .append_verified(&records, acks, AppendOrigin::Client, verification)
                        .map_err(|e| (partition_error_code(&e), Some(e.to_string()), batch_record_errors(&e)))?;
                    Ok((info, log_start_offset, leader_epoch, partition))
                });
            match &result {
                Ok((info, ..)) => broker.metrics.record_in(name, info.bytes, info.record_count.max(0) as u64),
                Err((ResponseError::KafkaStorageError, ..)) => {
                    broker.metrics.log_storage_errors.with_label_values(&[name]).inc();
                }
                Err(_) => {}
            }
            partitions.push((data.index, result));
        }
        appends.push((topic.name.clone(), partitions));
    }
    let timeout = Duration::from_millis(request.timeout_ms.clamp(0, MAX_TIMEOUT_MS) as u64);
    let mut responses = Vec::with_capacity(appends.len());
    // KIP-951: brokers named as new leaders in NOT_LEADER_OR_FOLLOWER answers (v10+).
    let mut leaders: Vec<u64> = Vec::new();
    for (name, partitions) in appends {
        let waits = partitions.into_iter().map(|(index, result)| async move {
            let result = match result {
                Ok((info, log_start_offset, leader_epoch, partition)) if acks == Acks::All => partition
                    .wait_replicated(info.last_offset + 1, leader_epoch, timeout)
                    .await
                    .map(|()| (info, log_start_offset))
                    .map_err(|e| (partition_error_code(&e), Some(e.to_string()), vec![])),
                Ok((info, log_start_offset, _, _)) => Ok((info, log_start_offset)),
                Err(e) => Err(e),
            };
            (index, result)
        });
        let mut partition_responses = Vec::new();
        for (index, result) in futures_util::future::join_all(waits).await {
            let mut response = PartitionProduceResponse::default().with_index(index).with_base_offset(-1);
            match result {
                Ok((info, log_start_offset)) => {
                    response = response
                        .with_base_offset(info.first_offset)
                        .with_log_append_time_ms(info.log_append_time)
                        .with_log_start_offset(if version >= 5 { log_start_offset } else { -1 });
                }
                Err((code, message, record_errors)) => {
                    response = response.with_error_code(code.code());
                    if version >= 10 && code == ResponseError::NotLeaderOrFollower {
                        let (leader, epoch) = super::current_leader(&image, &name.0, index);
                        response = response.with_current_leader(
                            LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch),
                        );
                        if let Ok(id) = u64::try_from(leader.0) {
                            if !leaders.contains(&id) {
                                leaders.push(id);
                            }
                        }
                    }
                    if version >= 8 {
                        // KIP-467: clients fail only the named records and resend nothing.
                        response = response
                            .with_error_message(message.as_deref().map(str_bytes))
                            .with_record_errors(record_errors);
                    }
                }
            }
            partition_responses.push(response);
        }
        responses.push(TopicProduceResponse::default().with_name(name).with_partition_responses(partition_responses));
    }
    let node_endpoints = if version >= 10 {
        leaders
            .iter()
            .filter_map(|id| image.brokers.get(id))
            .filter_map(|b| {
                let (host, port) = super::client_endpoint(b)?;
                Some(
                    NodeEndpoint::default()
                        .with_node_id(kafka_protocol::messages::BrokerId(b.node_id as i32))
                        .with_host(str_bytes(host))
                        .with_port(port as i32)
                        .with_rack(b.rack.as_deref().map(str_bytes)),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    // Answered whatever acks says: for acks=0 the connection layer sends nothing, or closes the
    // connection when a partition failed (`first_error`).
    Some(ProduceResponse::default().with_responses(responses).with_node_endpoints(node_endpoints))
}

/// The first partition error of a produce response, named for the log (`None`: all appended).
pub fn first_error(response: &ProduceResponse) -> Option<String> {
    response.responses.iter().find_map(|topic| {
        topic.partition_responses.iter().find(|p| p.error_code != 0).map(|p| {
            let code =
                ResponseError::try_from_code(p.error_code).map_or(p.error_code.to_string(), |e| format!("{e:?}"));
            format!("{}-{}: {code}", topic.name.0, p.index)
        })
    })
}

/// The verdict of each partition's batches, in the request's order (topic by topic): of the
/// topic's validator where this node leads the partition, else Accept. Empty when no topic has
/// a validator.
async fn validate(broker: &Broker, image: &MetadataImage, request: &ProduceRequest) -> Vec<crate::validator::Verdict> {
    if image.validators.is_empty() {
        return Vec::new();
    }
    let checks = request.topic_data.iter().flat_map(|topic| {
        topic.partition_data.iter().map(move |data| async move {
            let name: &str = &topic.name.0;
            match &data.records {
                Some(records) if !records.is_empty() => match hosted_partition(broker, image, name, data.index) {
                    Ok(partition) if partition.is_leader() => {
                        broker.validators.check(image, name, data.index, records).await
                    }
                    _ => crate::validator::Verdict::Accept,
                },
                _ => crate::validator::Verdict::Accept,
            }
        })
    });
    futures_util::future::join_all(checks).await
}

/// The log's per-record errors in the response's shape.
fn batch_record_errors(error: &crate::partition::PartitionError) -> Vec<BatchIndexAndErrorMessage> {
    record_errors(error)
        .iter()
        .map(|e| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(e.batch_index)
                .with_batch_index_error_message(Some(str_bytes(&e.message)))
        })
        .collect()
}

/// A validator's refusal as KIP-467 `record_errors`.
fn validator_record_errors(records: Vec<(i32, String)>) -> Vec<BatchIndexAndErrorMessage> {
    records
        .into_iter()
        .map(|(index, message)| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(index)
                .with_batch_index_error_message(Some(str_bytes(&message)))
        })
        .collect()
}

/// A partition's verdict before its append: the verification to present, or the error to
/// answer with.
type Verdict = Result<TxnVerification, (ResponseError, String)>;

/// KIP-890 part 1 (`transaction.partition.verification.enable`): for each partition whose
/// first batch is transactional and would open a transaction there, the partition hands out a
/// verification guard and the transaction's coordinator (this node or another, asked with
/// AddPartitionsToTxn v4 `verify_only`) confirms the partition is in the producer's ongoing
/// transaction. From Produce v12 (part 2) the coordinator is asked to add the partition
/// instead (`verify_only` false), which is how a transaction version 2 client adds it. A late batch of a transaction already ended (a retry after a timeout abort, a
/// zombie) is refused instead of opening a transaction nobody will ever end, which would hold
/// the last stable offset back forever. Errors are mapped as Kafka maps them for the produce
/// version: coordinator trouble is NOT_ENOUGH_REPLICAS (retriable), a partition outside the
/// transaction INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11), a fenced producer
/// INVALID_PRODUCER_EPOCH.
async fn verify_transaction(
    broker: &Broker,
    image: &MetadataImage,
    transactional_id: &str,
    version: i16,
    request: &ProduceRequest,
) -> HashMap<(String, i32), Verdict> {
    let mut verdicts = HashMap::new();
    // One transactional producer per request (Kafka's ReplicaManager): the coordinator is asked
    // about one producer id, and a batch of another would open a transaction nobody ends.
    let producers: HashSet<(i64, i16)> = request
        .topic_data
        .iter()
        .flat_map(|topic| &topic.partition_data)
        .filter_map(|data| data.records.as_ref().and_then(|r| crate::log::BatchHeader::read(r).ok()))
        .filter(|h| h.attributes.is_transactional() && !h.attributes.is_control())
        .map(|h| (h.producer_id, h.producer_epoch))
        .collect();
    if producers.len() > 1 {
        let refusal = (
            ResponseError::InvalidProducerIdMapping,
            "Transactional records contained more than one producer ID".to_string(),
        );
        for topic in &request.topic_data {
            for data in &topic.partition_data {
                verdicts.insert((topic.name.0.to_string(), data.index), Err(refusal.clone()));
            }
        }
        return verdicts;
    }
    let mut asking = Vec::new();
    let mut producer = (-1i64, -1i16);
    for topic in &request.topic_data {
        for data in &topic.partition_data {
            let Some(header) = data.records.as_ref().and_then(|r| crate::log::BatchHeader::read(r).ok()) else {
                continue;
            };
            if !header.attributes.is_transactional() || header.attributes.is_control() {
                continue;
            }
            let key = (topic.name.0.to_string(), data.index);
            let Ok(partition) = hosted_partition(broker, image, &key.0, key.1) else { continue };
            match partition.start_txn_verification(header.producer_id, header.producer_epoch) {
                Ok(None) => {
                    verdicts.insert(key, Ok(TxnVerification::Required(None)));
                }
                Ok(Some(guard)) => {
                    producer = (header.producer_id, header.producer_epoch);
                    asking.push((key, partition, guard));
                }
                Err(e) => {
                    verdicts.insert(key, Err((partition_error_code(&e), e.to_string())));
                }
            }
        }
    }
    if asking.is_empty() {
        return verdicts;
    }
    let wanted: Vec<(String, i32)> = asking.iter().map(|(k, _, _)| k.clone()).collect();
    let mode = if version >= IMPLICIT_ADD_VERSION { TxnAsk::Add } else { TxnAsk::Verify };
    let answers = ask_coordinator(broker, image, transactional_id, producer, &wanted, mode).await;
    let mode_label = if mode == TxnAsk::Add { "add" } else { "verify" };
    for (key, partition, guard) in asking {
        let answer = match &answers {
            Ok(per_partition) => per_partition.get(&key).copied().unwrap_or(ResponseError::UnknownServerError.code()),
            Err(code) => code.code(),
        };
        let verdict = if answer == 0 {
            broker.metrics.txn_verifications.with_label_values(&[mode_label, "ok"]).inc();
            Ok(TxnVerification::Required(Some(guard)))
        } else {
            partition.end_txn_verification(producer.0, guard);
            let code = ResponseError::try_from_code(answer).unwrap_or(ResponseError::UnknownServerError);
            let mapped = match code {
                ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                ResponseError::TransactionAbortable if version < 11 => ResponseError::InvalidTxnState,
                code if coordinator_busy(code) => ResponseError::NotEnoughReplicas,
                other => other,
            };
            let result = format!("{mapped:?}");
            broker.metrics.txn_verifications.with_label_values(&[mode_label, &result]).inc();
            let message = format!(
                "transaction verification of producer {} (epoch {}) with its coordinator failed: {code:?}",
                producer.0, producer.1
            );
            Err((mapped, message))
        };
        verdicts.insert(key, verdict);
    }
    verdicts
}

/// What a partition leader (or a group coordinator) asks a transaction's coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnAsk {
    /// Are these partitions in the ongoing transaction (KIP-890 part 1)?
    Verify,
    /// Add them to it, starting one if none is open (part 2's implicit add).
    Add,
}

/// Whether the transaction's coordinator answered (or failed to answer) something that passes
/// with a retry: unreachable, moving, loading, or still ending the previous transaction. Each
/// caller maps it to the retriable code of its own API.
pub(crate) fn coordinator_busy(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::NetworkException
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::ConcurrentTransactions
            | ResponseError::RequestTimedOut
    )
}

/// AddPartitionsToTxn v4 (`verify_only` for [`TxnAsk::Verify`]) to the coordinator of
/// `transactional_id` (a direct call when it is this node): each partition's error code, or
/// one error for all.
pub(crate) async fn ask_coordinator(
    broker: &Broker,
    image: &MetadataImage,
    transactional_id: &str,
    (producer_id, producer_epoch): (i64, i16),
    partitions: &[(String, i32)],
    mode: TxnAsk,
) -> Result<HashMap<(String, i32), i16>, ResponseError> {
    let state = broker.txn.partition_of(transactional_id);
    let coordinator = image
        .topic(TRANSACTION_STATE_TOPIC)
        .and_then(|t| t.partitions.get(state as usize))
        .and_then(|p| p.leader)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    if coordinator == broker.settings.node_id {
        if mode == TxnAsk::Add {
            broker.txn.add_partitions(transactional_id, producer_id, producer_epoch, partitions, 2).await?;
            return Ok(partitions.iter().map(|p| (p.clone(), 0)).collect());
        }
        let verdicts = broker.txn.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)?;
        return Ok(verdicts.into_iter().map(|(p, v)| (p, v.err().map_or(0, |e| e.code()))).collect());
    }
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (topic, partition) in partitions {
        match topics.last_mut() {
            Some(t) if *t.name.0 == **topic => t.partitions.push(*partition),
            _ => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes(topic)))
                    .with_partitions(vec![*partition]),
            ),
        }
    }
    let call = AddPartitionsToTxnRequest::default().with_transactions(vec![AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_verify_only(mode == TxnAsk::Verify)
        .with_topics(topics)]);
    let response = broker.peers.call(coordinator, VERIFY_VERSION, &call, VERIFY_TIMEOUT).await.map_err(|e| {
        tracing::debug!(coordinator, error = %e, "transaction verification with a peer failed");
        ResponseError::NetworkException
    })?;
    if response.error_code != 0 {
        return Err(ResponseError::try_from_code(response.error_code).unwrap_or(ResponseError::UnknownServerError));
    }
    let mut codes = HashMap::new();
    for txn in response.results_by_transaction {
        for topic in txn.topic_results {
            for p in topic.results_by_partition {
                codes.insert((topic.name.0.to_string(), p.partition_index), p.partition_error_code);
            }
        }
    }
    Ok(codes)
}

/// Whether any partition's first batch is transactional (Kafka's `hasTransactionalRecords`).
fn has_transactional_records(request: &ProduceRequest) -> bool {
    request.topic_data.iter().flat_map(|t| &t.partition_data).any(|p| {
        p.records
            .as_ref()
            .and_then(|r| crate::log::BatchHeader::read(r).ok())
            .is_some_and(|h| h.attributes.is_transactional())
    })
}

fn reject_all(request: &ProduceRequest, code: ResponseError) -> ProduceResponse {
    ProduceResponse::default().with_responses(request.topic_data.iter().map(|t| rejected_topic(t, code)).collect())
}

/// Every partition of `topic` answered with `code`, nothing appended.
fn rejected_topic(
    topic: &kafka_protocol::messages::produce_request::TopicProduceData,
    code: ResponseError,
) -> TopicProduceResponse {
    let partitions = topic
        .partition_data
        .iter()
        .map(|p| {
            PartitionProduceResponse::default().with_index(p.index).with_error_code(code.code()).with_base_offset(-1)
        })
        .collect();
    TopicProduceResponse::default().with_name(topic.name.clone()).with_partition_responses(partitions)
}
