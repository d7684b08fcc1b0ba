//! The transactional producer of one exactly-once transform partition: the worker is a Kafka
//! client of the cluster (itself included), speaking transaction version 2 (KIP-890) the way
//! the Java 4.x producer does, so the coordinator, the partition leaders' verification and the
//! group coordinator treat it exactly as they treat any client.
//!
//! One transaction: outputs (and dead letters) as Produce v12 transactional batches to their
//! leaders (the first batch of a transaction in a partition adds it implicitly), the input
//! position as TxnOffsetCommit v5 on the checkpoint group (adds the group's offsets partition),
//! then EndTxn v5, which answers the next epoch (transaction version 2 bumps it on every end).
//!
//! Owns: the transactional id `__runnel_transform_<name>-<partition>`, the producer id and
//! epoch, and the sequence of every output partition in the open transaction. Invariants:
//! `init` (InitProducerId) runs before the worker reads its position, so an earlier worker of
//! the same partition (a deposed leader's, a crashed node's) is fenced and its open transaction
//! aborted before this one reads what was committed; a batch is sent only after every earlier
//! batch of its partition in the transaction was acknowledged (sequences never have gaps), and
//! a retry resends the same bytes (the leader answers an exact retry with the original
//! offsets); any failure that may have left part of a batch in the transaction ends in `abort`,
//! never in a retry inside the same transaction.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    EndTxnRequest, FindCoordinatorRequest, GroupId, InitProducerIdRequest, ProduceRequest, ProducerId, TopicName,
    TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::worker::{error_name, Output};
use super::Host;
use crate::log::records::BatchBuilder;
use crate::peer::PeerError;

/// Transaction version 2's request versions (KIP-890 part 2).
pub(crate) const PRODUCE_VERSION: i16 = 12;
const TXN_OFFSET_COMMIT_VERSION: i16 = 5;
const END_TXN_VERSION: i16 = 5;
const INIT_PRODUCER_ID_VERSION: i16 = 5;
const FIND_COORDINATOR_VERSION: i16 = 4;
/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// The leader waits up to this for acks=all; the call gets room for the answer on top.
pub(super) const PRODUCE_TIMEOUT_MS: i32 = 30_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(35);
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(10);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// The transactional id of a transform partition's worker.
pub fn transactional_id(transform: &str, partition: i32) -> String {
    format!("{}{transform}-{partition}", super::CHECKPOINT_GROUP_PREFIX)
}

#[derive(Debug, thiserror::Error)]
pub(super) enum TxnError {
    /// Another worker of this partition initialised the id after this one: this worker's
    /// transactions can never commit again until it initialises anew.
    #[error("fenced by a newer worker of this partition ({0})")]
    Fenced(String),
    #[error("{call} on broker {node}: {}", error_name(*code))]
    Refused { call: &'static str, node: u64, code: i16 },
    #[error("{call}: {source}")]
    Peer {
        call: &'static str,
        #[source]
        source: PeerError,
    },
    #[error("{call}: no answer before the deadline ({last})")]
    Deadline { call: &'static str, last: String },
    #[error("{0}: the coordinator is not known yet")]
    NoCoordinator(&'static str),
}

impl TxnError {
    pub fn fenced(&self) -> bool {
        matches!(self, TxnError::Fenced(_))
    }
}

/// Answers that the same call may get past later (or against a newer leader or coordinator).
fn retriable(code: i16) -> bool {
    [
        ResponseError::NotCoordinator,
        ResponseError::CoordinatorLoadInProgress,
        ResponseError::CoordinatorNotAvailable,
        ResponseError::ConcurrentTransactions,
        ResponseError::NotLeaderOrFollower,
        ResponseError::LeaderNotAvailable,
        ResponseError::UnknownTopicOrPartition,
        ResponseError::NotEnoughReplicas,
        ResponseError::NotEnoughReplicasAfterAppend,
        ResponseError::RequestTimedOut,
        ResponseError::KafkaStorageError,
        ResponseError::NetworkException,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// Answers that mean this producer id and epoch are no longer this worker's.
fn fencing(code: i16) -> bool {
    [
        ResponseError::ProducerFenced,
        ResponseError::InvalidProducerEpoch,
        ResponseError::TransactionalIdAuthorizationFailed,
    ]
    .iter()
    .any(|e| e.code() == code)
}

pub(super) struct Savepoint {
    sequences: BTreeMap<(String, i32), i32>,
    open: bool,
}

pub(super) struct TxnProducer {
    transactional_id: String,
    timeout_ms: i32,
    producer_id: i64,
    epoch: i16,
    /// Next sequence of each output partition the open transaction wrote to.
    sequences: BTreeMap<(String, i32), i32>,
    /// Whether a transaction is open (something was produced or is about to be).
    open: bool,
}

impl TxnProducer {
    pub fn new(transactional_id: String, timeout_ms: i32) -> TxnProducer {
        TxnProducer {
            transactional_id,
            timeout_ms,
            producer_id: -1,
            epoch: -1,
            sequences: BTreeMap::new(),
            open: false,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// (producer id, epoch), for logs.
    pub fn producer(&self) -> (i64, i16) {
        (self.producer_id, self.epoch)
    }

    /// InitProducerId on the id's coordinator: a new epoch that fences every earlier worker of
    /// this partition, whose open transaction the coordinator aborts (it answers
    /// CONCURRENT_TRANSACTIONS until that abort is complete, and this retries).
    pub async fn init(&mut self, host: &Host, deadline: Instant) -> Result<(), TxnError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(str_bytes(&self.transactional_id))))
            .with_transaction_timeout_ms(self.timeout_ms)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let response = self
            .on_coordinator(host, "InitProducerId", KEY_TYPE_TRANSACTION, deadline, |node| {
                let request = request.clone();
                async move {
                    let r = host.peers.call(node, INIT_PRODUCER_ID_VERSION, &request, CALL_TIMEOUT).await?;
                    Ok((r.error_code, r))
                }
            })
            .await?;
        self.producer_id = response.producer_id.0;
        self.epoch = response.producer_epoch;
        self.sequences.clear();
        self.open = false;
        Ok(())
    }

    /// The sequences as they are, to go back to when batches stamped since are not sent (a
    /// later batch of the same outputs failed to build): a sequence never skips numbers.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint { sequences: self.sequences.clone(), open: self.open }
    }

    pub fn rollback_to(&mut self, savepoint: Savepoint) {
        self.sequences = savepoint.sequences;
        self.open = savepoint.open;
    }

    /// Forgets the open transaction without ending it (this producer was fenced: the worker
    /// that fenced it, or the coordinator's timeout, ends it).
    pub fn discard(&mut self) {
        self.sequences.clear();
        self.open = false;
    }

    /// Makes `builder` this producer's next transactional batch of `topic`-`partition`
    /// (`records` records): producer id, epoch, the partition's next sequence.
    pub fn stamp(&mut self, topic: &str, partition: i32, records: usize, builder: BatchBuilder) -> BatchBuilder {
        self.open = true;
        let sequence = self.sequences.entry((topic.to_string(), partition)).or_insert(0);
        let base = *sequence;
        *sequence = sequence.wrapping_add(records as i32) & i32::MAX;
        builder.producer(self.producer_id, self.epoch, base).transactional(true)
    }

    /// Sends `outputs` (stamped by this producer) to their partitions' leaders, in order per
    /// partition, retrying retriable answers (a leader that moved, the previous transaction's
    /// markers still on their way, a timeout) with the same bytes until `deadline`.
    pub async fn produce(&mut self, host: &Host, outputs: Vec<Output>, deadline: Instant) -> Result<(), TxnError> {
        // Per partition, the batches not yet acknowledged, in sequence order.
        let mut pending: BTreeMap<(String, i32), std::collections::VecDeque<Output>> = BTreeMap::new();
        for output in outputs {
            pending.entry((output.topic.clone(), output.partition)).or_default().push_back(output);
        }
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut last = String::new();
        while !pending.is_empty() {
            if Instant::now() >= deadline {
                return Err(TxnError::Deadline { call: "Produce", last });
            }
            // One round: the first pending batch of every partition, one request per leader.
            let image = host.controller.image();
            let mut rounds: BTreeMap<u64, Vec<(String, i32)>> = BTreeMap::new();
            for key in pending.keys() {
                let leader = u32::try_from(key.1).ok().and_then(|p| image.partition(&key.0, p)).and_then(|p| p.leader);
                match leader {
                    Some(leader) => rounds.entry(leader).or_default().push(key.clone()),
                    None => last = format!("'{}' partition {} has no leader", key.0, key.1),
                }
            }
            let calls = rounds.into_iter().map(|(leader, keys)| {
                let batches: Vec<&Output> =
                    keys.iter().filter_map(|k| pending.get(k).and_then(|q| q.front())).collect();
                let request = self.produce_request(&batches);
                async move {
                    let answer = if leader == host.node_id {
                        // This node leads them: its own handler, without the socket.
                        (host.local_produce)(request).await.ok_or_else(|| "this node is shutting down".to_string())
                    } else {
                        host.peers
                            .call(leader, PRODUCE_VERSION, &request, CALL_TIMEOUT)
                            .await
                            .map_err(|e| e.to_string())
                    };
                    (leader, keys, answer)
                }
            });
            let answers = futures_util::future::join_all(calls).await;
            let mut progressed = false;
            for (leader, keys, answer) in answers {
                let response = match answer {
                    Ok(response) => response,
                    Err(e) => {
                        last = format!("broker {leader}: {e}");
                        continue;
                    }
                };
                let mut codes: BTreeMap<(String, i32), i16> = BTreeMap::new();
                for topic in &response.responses {
                    for p in &topic.partition_responses {
                        codes.insert((topic.name.0.to_string(), p.index), p.error_code);
                    }
                }
                for key in keys {
                    let code = codes.get(&key).copied().unwrap_or(ResponseError::UnknownServerError.code());
                    if code == 0 {
                        if let Some(queue) = pending.get_mut(&key) {
                            queue.pop_front();
                            if queue.is_empty() {
                                pending.remove(&key);
                            }
                        }
                        progressed = true;
                    } else if fencing(code) {
                        return Err(TxnError::Fenced(format!(
                            "Produce to '{}' partition {}: {}",
                            key.0,
                            key.1,
                            error_name(code)
                        )));
                    } else if retriable(code) {
                        last = format!("'{}' partition {}: {}", key.0, key.1, error_name(code));
                    } else {
                        return Err(TxnError::Refused { call: "Produce", node: leader, code });
                    }
                }
            }
            if !pending.is_empty() {
                if progressed {
                    backoff = RETRY_BACKOFF_MIN;
                } else {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
                }
            }
        }
        Ok(())
    }

    fn produce_request(&self, batches: &[&Output]) -> ProduceRequest {
        let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
        for output in batches {
            topics.entry(output.topic.as_str()).or_default().push(
                PartitionProduceData::default().with_index(output.partition).with_records(Some(output.bytes.clone())),
            );
        }
        ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(str_bytes(&self.transactional_id))))
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TopicProduceData::default()
                            .with_name(TopicName(str_bytes(topic)))
                            .with_partition_data(partitions)
                    })
                    .collect(),
            )
    }

    /// Commits the open transaction with the input position: TxnOffsetCommit of `position`
    /// (metadata: the deployment id) in `group`, then EndTxn(commit). `Ok` once the
    /// coordinator has decided the commit (it writes the markers after answering; the next
    /// transaction's first batches wait for them).
    pub async fn commit(
        &mut self,
        host: &Host,
        group: &str,
        input: (&str, i32),
        position: i64,
        metadata: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        self.open = true;
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(str_bytes(&self.transactional_id)))
            .with_group_id(GroupId(str_bytes(group)))
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_generation_id(-1)
            .with_member_id(StrBytes::default())
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(str_bytes(input.0)))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(input.1)
                    .with_committed_offset(position)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(str_bytes(metadata)))])]);
        let group_key = group.to_string();
        self.on_coordinator_of(host, "TxnOffsetCommit", KEY_TYPE_GROUP, &group_key, deadline, |node| {
            let request = request.clone();
            async move {
                let r = host.peers.call(node, TXN_OFFSET_COMMIT_VERSION, &request, CALL_TIMEOUT).await?;
                let code = r
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(if r.topics.is_empty() { ResponseError::UnknownServerError.code() } else { 0 });
                Ok((code, ()))
            }
        })
        .await?;
        self.end(host, true, deadline).await
    }

    /// Aborts the open transaction (its outputs never become visible to read_committed).
    pub async fn abort(&mut self, host: &Host, deadline: Instant) -> Result<(), TxnError> {
        self.end(host, false, deadline).await
    }

    async fn end(&mut self, host: &Host, commit: bool, deadline: Instant) -> Result<(), TxnError> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(str_bytes(&self.transactional_id)))
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_committed(commit);
        let call = if commit { "EndTxn(commit)" } else { "EndTxn(abort)" };
        let response = self
            .on_coordinator(host, call, KEY_TYPE_TRANSACTION, deadline, |node| {
                let request = request.clone();
                async move {
                    let r = host.peers.call(node, END_TXN_VERSION, &request, CALL_TIMEOUT).await?;
                    Ok((r.error_code, r))
                }
            })
            .await?;
        // Transaction version 2: the next transaction runs at the epoch (or, once the epoch is
        // exhausted, the producer id) the coordinator answered.
        if response.producer_id.0 >= 0 {
            self.producer_id = response.producer_id.0;
            self.epoch = response.producer_epoch;
        }
        self.sequences.clear();
        self.open = false;
        Ok(())
    }

    async fn on_coordinator<T, F>(
        &self,
        host: &Host,
        call: &'static str,
        key_type: i8,
        deadline: Instant,
        send: impl FnMut(u64) -> F,
    ) -> Result<T, TxnError>
    where
        F: std::future::Future<Output = Result<(i16, T), PeerError>>,
    {
        let key = self.transactional_id.clone();
        self.on_coordinator_of(host, call, key_type, &key, deadline, send).await
    }

    /// Finds the coordinator of `key` (asking this node, which creates the internal topic when
    /// missing) and sends the call there, again on a retriable answer (against a fresh
    /// coordinator after NOT_COORDINATOR) until `deadline`. A fencing answer is `Fenced`.
    async fn on_coordinator_of<T, F>(
        &self,
        host: &Host,
        call: &'static str,
        key_type: i8,
        key: &str,
        deadline: Instant,
        mut send: impl FnMut(u64) -> F,
    ) -> Result<T, TxnError>
    where
        F: std::future::Future<Output = Result<(i16, T), PeerError>>,
    {
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut last;
        loop {
            let error = match find_coordinator(host, key_type, key).await {
                Ok(node) => match send(node).await {
                    Ok((0, answer)) => return Ok(answer),
                    Ok((code, _)) if fencing(code) => {
                        return Err(TxnError::Fenced(format!("{call}: {}", error_name(code))))
                    }
                    Ok((code, _)) if retriable(code) => TxnError::Refused { call, node, code },
                    Ok((code, _)) => return Err(TxnError::Refused { call, node, code }),
                    Err(source) => TxnError::Peer { call, source },
                },
                Err(e) => e,
            };
            last = error.to_string();
            if Instant::now() + backoff >= deadline {
                return Err(TxnError::Deadline { call, last });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }
}

/// The coordinator of `key` as this node's FindCoordinator answers it (creating
/// `__transaction_state` or `__consumer_offsets` when missing, as it does for any client).
async fn find_coordinator(host: &Host, key_type: i8, key: &str) -> Result<u64, TxnError> {
    let call = if key_type == KEY_TYPE_TRANSACTION { "FindCoordinator(transaction)" } else { "FindCoordinator(group)" };
    let request = FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![str_bytes(key)]);
    let response = host
        .peers
        .call(host.node_id, FIND_COORDINATOR_VERSION, &request, CALL_TIMEOUT)
        .await
        .map_err(|source| TxnError::Peer { call, source })?;
    match response.coordinators.first() {
        Some(c) if c.error_code == 0 && c.node_id.0 >= 0 => Ok(c.node_id.0 as u64),
        Some(c) if c.error_code != 0 => Err(TxnError::Refused { call, node: host.node_id, code: c.error_code }),
        _ => Err(TxnError::NoCoordinator(call)),
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
