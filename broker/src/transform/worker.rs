//! One transform partition: read → guest (once per batch) → append outputs → checkpoint.
//!
//! The input is read `read_committed`: up to its last stable offset, without the records of
//! aborted transactions, so a transform of a transactional topic sees committed data only.
//!
//! Order per batch: the outputs are appended (acks=all) before the input position moves, and
//! the position is committed at most every `COMMIT_INTERVAL` or when caught up; after a crash
//! the batch since the last commit is processed again (at-least-once, duplicates possible).
//! Guest calls run on the blocking pool (a call may take up to its deadline); the instance is
//! moved there and back, never shared.
//!
//! An output partition led by this node is appended here; one led by another broker gets the
//! batch as a Produce request (acks=all) over the peer client. Either way the batch counts as
//! written only once the output partition's high watermark passed it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use runnel_runtime::{
    GuestError, InputBatch, InstanceSetup, KeyedState, Level, Limits, OutputBatch, StateHandle, TransformInstance,
    TransformModule,
};
use tokio::sync::watch;

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::checkpoint::Checkpoint;
use super::state::{self as keyed, DEPLOYMENT_HEADER};
use super::txn::{transactional_id, TxnError, TxnProducer};
use super::{group_of, Host, LogBuffer, PartitionStatus};
use crate::controller::{DeliveryMode, ErrorPolicy, StartPosition, TransformImage};
use crate::log::now_ms;
use crate::log::records::{for_each_committed_record, AbortedFilter, BatchBuilder};
use crate::log::Compression;
use crate::partition::partitioner::partition_for_key;
use crate::partition::{FirstBatch, Partition, PartitionError};
use crate::peer::PeerError;
use std::ops::ControlFlow;

/// Bytes read from the input per guest batch: sized from the records seen so far so that one
/// read holds about `batch_records_max` records (a fixed large read would be re-read and mostly
/// thrown away on every batch).
const READ_BYTES_MIN: usize = 64 << 10;
const READ_BYTES_MAX: usize = 4 << 20;
/// Per-record framing of a v2 record batch, roughly (attributes, deltas, lengths, headers count).
const RECORD_OVERHEAD_BYTES: f64 = 16.0;
/// How long an exactly-once worker's InitProducerId, or the end of one of its transactions,
/// retries a coordinator that moved or is loading before the worker logs it and goes on.
const TXN_CALL_RETRY: Duration = Duration::from_secs(10);
/// How long one checkpoint read or write retries a coordinator that moved or is loading (a
/// failover takes about a second or two) before the worker logs it and goes on.
const CHECKPOINT_RETRY: Duration = Duration::from_secs(3);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long an output append waits for acks=all (here, or on the leader it is sent to).
const OUTPUT_TIMEOUT_MS: i32 = 30_000;
/// The Produce version outputs are sent to other leaders with.
const PRODUCE_VERSION: i16 = 10;

/// How a worker makes its outputs and its position durable (the deployment's `delivery`).
enum Delivery {
    /// Outputs appended (acks=all), then the position committed now and then: after a crash
    /// the batches since the last commit are processed again.
    AtLeastOnce,
    /// Outputs, dead letters and the position in one transaction of the worker's own
    /// transactional producer: a read_committed reader sees each input's outputs once.
    ExactlyOnce(TxnProducer),
}

impl Delivery {
    /// Whether an exactly-once transaction is open (outputs or a position not yet committed).
    fn is_open(&self) -> bool {
        matches!(self, Delivery::ExactlyOnce(producer) if producer.is_open())
    }
}

/// What became of a checkpoint.
enum Checkpointed {
    Done,
    /// Not acknowledged; the position stays and the next checkpoint tries again.
    Later,
    /// The transaction was aborted: its outputs are gone and processing goes back to the last
    /// committed position (the one read again after a re-initialisation, when there was one).
    RolledBack(Option<i64>),
}

pub(super) struct Worker {
    pub host: Arc<Host>,
    pub transform: Arc<TransformImage>,
    pub module: TransformModule,
    pub partition: i32,
    pub status: Arc<Mutex<PartitionStatus>>,
    pub logs: Arc<LogBuffer>,
    pub stop: watch::Receiver<bool>,
    /// A stateful transform's partition state (set by `run` once restored), shared with the
    /// guest instance; see `state.rs`.
    pub state: Option<StateHandle>,
}

/// Why a batch could not be completed.
#[derive(Debug, thiserror::Error)]
enum BatchFailure {
    #[error("{0}")]
    Guest(#[from] GuestError),
    #[error(
        "output topic '{topic}' partition {partition}: its leader answered {}{}",
        error_name(*code),
        message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
    )]
    Rejected { topic: String, partition: i32, code: i16, message: Option<String> },
    #[error("this node is shutting down")]
    Stopping,
    #[error("output to another broker: {0}")]
    Peer(#[from] PeerError),
    #[error("output topic '{0}' does not exist or is not hosted here")]
    MissingOutput(String),
    #[error("output record targets partition {partition} of '{topic}', which has {count}")]
    BadPartition { topic: String, partition: i32, count: usize },
    #[error("encoding output records: {0}")]
    Encode(String),
    #[error(
        "an output record for '{topic}' partition {partition} takes a {size}-byte batch, past the topic's \
         max.message.bytes of {max}"
    )]
    RecordTooLarge { topic: String, partition: i32, size: usize, max: usize },
    #[error("an output record for '{topic}' would be refused by its leader: {reason}")]
    Unacceptable { topic: String, reason: String },
    #[error(
        "the position {position} is past the end {end} of input '{topic}' partition {partition} (truncated or \
         recreated?): waiting for the input to reach it; delete the transform to start over"
    )]
    PositionPastEnd { topic: String, partition: i32, position: i64, end: i64 },
    #[error("transaction: {0}")]
    Txn(#[from] TxnError),
    #[error("creating the state topic: {0}")]
    StateTopic(String),
}

impl BatchFailure {
    /// The `kind` label of the errors metric.
    fn kind(&self) -> &'static str {
        match self {
            BatchFailure::Guest(GuestError::Deadline { .. }) => "deadline",
            BatchFailure::Guest(GuestError::MemoryLimit { .. }) => "memory",
            BatchFailure::Guest(GuestError::Trap(_)) => "trap",
            BatchFailure::Guest(GuestError::Failed(_)) => "guest_error",
            BatchFailure::Guest(GuestError::Init(_)) => "init",
            BatchFailure::Guest(_)
            | BatchFailure::BadPartition { .. }
            | BatchFailure::MissingOutput(_)
            | BatchFailure::RecordTooLarge { .. }
            | BatchFailure::Unacceptable { .. } => "invalid_output",
            BatchFailure::Stopping
            | BatchFailure::Rejected { .. }
            | BatchFailure::Peer(_)
            | BatchFailure::Encode(_)
            | BatchFailure::StateTopic(_) => "append",
            BatchFailure::PositionPastEnd { .. } => "position",
            BatchFailure::Txn(_) => "transaction",
        }
    }
}

impl Worker {
    fn update(&self, f: impl FnOnce(&mut PartitionStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn name(&self) -> &str {
        &self.transform.name
    }

    /// Sleeps `duration` unless stopped first; returns whether to go on.
    async fn pause(&mut self, duration: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.stop.wait_for(|s| *s) => return false,
        }
        !*self.stop.borrow()
    }

    fn instantiate_setup(&self) -> InstanceSetup {
        let logs = self.logs.clone();
        let partition = self.partition;
        let spec = &self.transform.spec;
        InstanceSetup {
            parameters: spec.parameters.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            output_topics: spec.output_topics.clone(),
            limits: Limits {
                memory_bytes: spec.memory_bytes as usize,
                call_timeout: Duration::from_millis(spec.call_timeout_ms),
                ..Limits::default()
            },
            log: Arc::new(move |level: Level, line: &str| logs.push(level.name(), Some(partition), line.to_string())),
            state: self.state.clone(),
        }
    }

    /// Runs `f` on the partition state, if the transform keeps one.
    fn with_state(&self, f: impl FnOnce(&mut KeyedState)) {
        if let Some(state) = &self.state {
            f(&mut state.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Creates the changelog topic if it does not exist yet (one partition per input partition).
    async fn ensure_state_topic(&self) -> Result<(), String> {
        let input_partitions = self
            .host
            .controller
            .image()
            .topics
            .get(&self.transform.spec.input_topic)
            .map_or(0, |t| t.partitions.len() as u32);
        (self.host.ensure_state_topic)(super::state_topic_of(self.name()), input_partitions.max(1)).await
    }

    /// Reports the state's size in the status and metrics; (bytes, committed keys).
    fn report_state(&self) -> (u64, u64) {
        let Some(state) = &self.state else { return (0, 0) };
        let (bytes, keys) = {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            (state.size_bytes() as u64, state.committed_keys() as u64)
        };
        self.update(|s| {
            s.state_bytes = bytes;
            s.state_keys = keys;
        });
        let labels = [self.transform.name.as_str(), &self.partition.to_string()];
        self.host.metrics.transform_state_bytes.with_label_values(&labels).set(bytes as i64);
        (bytes, keys)
    }

    /// A stateful transform: makes sure its changelog topic exists and restores the partition's
    /// state from it (asked until it works: processing without the state would be wrong);
    /// `false` if stopped first. Call after InitProducerId (see `state.rs`).
    async fn restore_state(&mut self) -> bool {
        let Some(state) = self.state.clone() else { return true };
        let topic = super::state_topic_of(self.name());
        self.update(|s| s.state = "restoring");
        loop {
            let started = Instant::now();
            let restored = match self.ensure_state_topic().await {
                Ok(()) => {
                    let deadline = Instant::now() + TXN_CALL_RETRY;
                    let changelog = keyed::Changelog {
                        host: &self.host,
                        topic: &topic,
                        partition: self.partition,
                        deployment: &self.transform.deployment,
                        resume: self.transform.spec.resume,
                    };
                    changelog.restore(&state, deadline).await
                }
                Err(e) => Err(e),
            };
            match restored {
                Ok(restored) => {
                    let (bytes, keys) = self.report_state();
                    self.logs.push(
                        "info",
                        Some(self.partition),
                        format!(
                            "state restored from '{topic}' up to offset {}: {} changes, {keys} keys, {bytes} bytes \
                             in {} ms",
                            restored.end,
                            restored.records,
                            started.elapsed().as_millis()
                        ),
                    );
                    return true;
                }
                Err(e) => {
                    self.logs.push("warn", Some(self.partition), format!("{e}; retrying"));
                    if !self.pause(BACKOFF_MIN).await {
                        return false;
                    }
                }
            }
        }
    }

    fn checkpoint(&self) -> Checkpoint<'_> {
        Checkpoint {
            host: &self.host,
            group: group_of(self.name()),
            topic: self.transform.spec.input_topic.clone(),
            partition: self.partition,
        }
    }

    /// The committed position, else the start position of the deployment; `None` if stopped
    /// first. Asks until the group's coordinator answers: starting anywhere else would skip
    /// input (`latest`) or process it all again (`earliest`). A position committed by an
    /// earlier deployment of this name (another deployment id) is ignored unless the
    /// deployment asked to `resume`.
    async fn start_position(&mut self, input: &Partition) -> Option<i64> {
        self.start_position_and_origin(input).await.map(|(position, _)| position)
    }

    /// [`Worker::start_position`], and whether it is a position this deployment (or the one
    /// it resumes) committed, rather than its `start` setting.
    async fn start_position_and_origin(&mut self, input: &Partition) -> Option<(i64, bool)> {
        let committed = loop {
            match self.checkpoint().fetch(Instant::now() + CHECKPOINT_RETRY).await {
                Ok(committed) => break committed,
                Err(e) => {
                    self.logs.push("warn", Some(self.partition), format!("reading the checkpoint: {e}; retrying"));
                    if !self.pause(BACKOFF_MIN).await {
                        return None;
                    }
                }
            }
        };
        let deployment = &self.transform.deployment;
        let committed = match committed {
            Some((offset, by)) if by != *deployment && !self.transform.spec.resume => {
                self.logs.push(
                    "info",
                    Some(self.partition),
                    format!(
                        "ignoring position {offset}, committed by an earlier deployment of this name \
                         (deploy with resume to continue from it)"
                    ),
                );
                None
            }
            other => other.map(|(offset, _)| offset),
        };
        Some(match committed {
            Some(offset) => (offset.max(input.log_start_offset()), true),
            None => match self.transform.spec.start {
                StartPosition::Earliest => (input.log_start_offset(), false),
                StartPosition::Latest => (input.high_watermark(), false),
            },
        })
    }

    /// Exactly-once: InitProducerId for the worker's transactional id, asked until it is
    /// answered; `false` if the worker was stopped first.
    async fn init_producer(&mut self, producer: &mut TxnProducer) -> bool {
        loop {
            match producer.init(&self.host, Instant::now() + TXN_CALL_RETRY).await {
                Ok(()) => {
                    let (id, epoch) = producer.producer();
                    self.logs.push(
                        "info",
                        Some(self.partition),
                        format!("transactional producer {id} at epoch {epoch} (earlier workers fenced)"),
                    );
                    return true;
                }
                Err(e) => {
                    self.logs.push(
                        "warn",
                        Some(self.partition),
                        format!("initialising the transactional producer: {e}; retrying"),
                    );
                    if !self.pause(BACKOFF_MIN).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Makes `position` the committed one: at-least-once an offset commit; exactly-once the
    /// open transaction's TxnOffsetCommit and commit (aborted on failure).
    async fn checkpoint_at(&mut self, delivery: &mut Delivery, input: &Partition, position: i64) -> Checkpointed {
        let producer = match delivery {
            Delivery::AtLeastOnce => {
                return if self.commit(position).await { Checkpointed::Done } else { Checkpointed::Later };
            }
            Delivery::ExactlyOnce(producer) => producer,
        };
        let group = group_of(self.name());
        let input_topic = self.transform.spec.input_topic.clone();
        let deadline = Instant::now() + TXN_CALL_RETRY;
        let committed = producer
            .commit(&self.host, &group, (&input_topic, self.partition), position, &self.transform.deployment, deadline)
            .await;
        match committed {
            Ok(()) => {
                self.host.metrics.transform_transactions.with_label_values(&[self.name(), "committed"]).inc();
                self.with_state(KeyedState::commit);
                self.report_state();
                Checkpointed::Done
            }
            Err(e) => {
                let fenced = e.fenced();
                fail(self, &BatchFailure::Txn(e));
                Checkpointed::RolledBack(self.abandon(delivery, input, fenced).await)
            }
        }
    }

    /// Exactly-once, after a failure that may have left part of a batch in the open
    /// transaction: aborts it. When the abort cannot be had (fenced, or the coordinator does
    /// not answer) a new InitProducerId aborts it instead, only while the input is still led
    /// here (a worker left on a deposed leader waits to be stopped rather than fence the new
    /// leader's). After a new
    /// InitProducerId the committed position is read again and returned: the worker that had
    /// fenced this one may have committed past it, and going on from this worker's own last
    /// commit would write that worker's outputs a second time.
    async fn abandon(&mut self, delivery: &mut Delivery, input: &Partition, fenced: bool) -> Option<i64> {
        let Delivery::ExactlyOnce(producer) = delivery else { return None };
        self.host.metrics.transform_transactions.with_label_values(&[self.name(), "aborted"]).inc();
        // The transaction's state changes go with it.
        self.with_state(KeyedState::abort);
        if !fenced {
            match producer.abort(&self.host, Instant::now() + TXN_CALL_RETRY).await {
                Ok(()) => return None,
                Err(e) if e.fenced() => {}
                Err(e) => {
                    self.logs.push(
                        "warn",
                        Some(self.partition),
                        format!("aborting the transaction: {e}; re-initialising"),
                    );
                    // Only while the input is led here: a worker left on a deposed leader
                    // (its coordinator unreachable across a partition) must not fence the
                    // new leader's worker.
                    if input.is_leader() {
                        return self.reinit(producer, input).await;
                    }
                }
            }
        } else {
            self.logs.push("warn", Some(self.partition), "fenced by a newer worker of this partition".to_string());
        }
        producer.discard();
        let mut progress = input.subscribe_progress();
        loop {
            if !self.pause(BACKOFF_MIN).await {
                return None;
            }
            if input.is_leader() {
                return self.reinit(producer, input).await;
            }
            tokio::select! {
                _ = progress.changed() => {}
                _ = self.stop.wait_for(|s| *s) => return None,
            }
        }
    }

    /// A new InitProducerId (fencing every other worker of the partition and aborting its open
    /// transaction), then the committed position as it stands after it; `None` if stopped.
    async fn reinit(&mut self, producer: &mut TxnProducer, input: &Partition) -> Option<i64> {
        if !self.init_producer(producer).await {
            return None;
        }
        // The worker that fenced this one may have committed state past this one's.
        if !self.restore_state().await {
            return None;
        }
        let position = self.start_position(input).await?;
        self.logs.push("info", Some(self.partition), format!("continuing at the committed position {position}"));
        Some(position)
    }

    /// Commits `position` on the group's coordinator; whether it was acknowledged (a failure is
    /// logged, and the next checkpoint tries again).
    async fn commit(&self, position: i64) -> bool {
        match self.checkpoint().commit(position, &self.transform.deployment, Instant::now() + CHECKPOINT_RETRY).await {
            Ok(()) => true,
            Err(e) => {
                self.logs.push("warn", Some(self.partition), format!("checkpoint at {position} failed: {e}"));
                false
            }
        }
    }
}

pub(super) async fn run(mut w: Worker) {
    let spec = w.transform.spec.clone();
    let metrics = w.host.metrics.clone();
    let labels = [w.transform.name.clone(), w.partition.to_string()];
    (w.host.ensure_offsets_topic)().await;
    let Some(input) = w.host.replicas.get(&spec.input_topic, w.partition as u32) else {
        w.update(|s| s.state = "stopped");
        return;
    };
    let mut delivery = match spec.delivery {
        DeliveryMode::AtLeastOnce => Delivery::AtLeastOnce,
        DeliveryMode::ExactlyOnce => {
            let id = transactional_id(w.name(), w.partition);
            let mut producer = TxnProducer::new(id, w.host.transaction_timeout_ms);
            // Before the position is read: fences every earlier worker of this partition and
            // aborts its open transaction, so what is read is what was committed.
            if !w.init_producer(&mut producer).await {
                w.update(|s| s.state = "stopped");
                return;
            }
            Delivery::ExactlyOnce(producer)
        }
    };
    if w.module.is_stateful() {
        let state = KeyedState::shared(spec.state_bytes_max as usize);
        // One entry's changelog record must fit the changelog topic's max.message.bytes: the
        // batch header, the record's framing (at most 64 bytes of varints and attributes) and
        // its deployment header come off it.
        if let Ok(shape) = topic_shape(&w, &super::state_topic_of(w.name())) {
            let framing = crate::log::batch::HEADER_SIZE + 64 + DEPLOYMENT_HEADER.len() + w.transform.deployment.len();
            state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .set_entry_max_bytes(shape.max_bytes.saturating_sub(framing));
        }
        w.state = Some(state);
        w.update(|s| s.stateful = true);
    }
    let Some((mut position, from_checkpoint)) = w.start_position_and_origin(&input).await else {
        w.update(|s| s.state = "stopped");
        return;
    };
    // A fresh start has no state to restore (see `state.rs`); a continued one restores the
    // state its position goes with.
    if from_checkpoint && !w.restore_state().await {
        w.update(|s| s.state = "stopped");
        return;
    }
    if !from_checkpoint {
        // A start from the `start` setting is committed before any input is processed: else
        // records arriving before the first commit, then a crash, would restart from a later
        // `latest` and never be processed. A stateful transform's fresh-start marker goes in
        // the same transaction.
        let mut committed = position;
        loop {
            // Only while the input is led here: a worker left on a deposed leader (at-least-once
            // nothing fences it) must not put a marker after the new leader's worker's changes.
            if !input.is_leader() {
                if !w.pause(BACKOFF_MIN).await {
                    w.update(|s| s.state = "stopped");
                    return;
                }
                continue;
            }
            let outcome = match write_fresh_start(&w, &mut delivery).await {
                Ok(()) => w.checkpoint_at(&mut delivery, &input, position).await,
                Err(e) => {
                    fail(&w, &e);
                    let fenced = matches!(&e, BatchFailure::Txn(t) if t.fenced());
                    Checkpointed::RolledBack(w.abandon(&mut delivery, &input, fenced).await)
                }
            };
            if let Checkpointed::Done = outcome {
                break;
            }
            settle(outcome, &mut position, &mut committed);
            if !w.pause(BACKOFF_MIN).await {
                w.update(|s| s.state = "stopped");
                return;
            }
            // A worker that fenced this one may have made the first checkpoint meanwhile:
            // then this one continues from it, with the state it restored (a re-initialisation
            // restores it); else it starts fresh still, with no state.
            match w.start_position_and_origin(&input).await {
                None => {
                    w.update(|s| s.state = "stopped");
                    return;
                }
                Some((continued, true)) => {
                    if !w.restore_state().await {
                        w.update(|s| s.state = "stopped");
                        return;
                    }
                    position = continued;
                    break;
                }
                Some((_, false)) => w.with_state(KeyedState::clear),
            }
        }
    }
    let delivery_labels = [labels[0].as_str(), labels[1].as_str(), spec.delivery.name()];
    metrics.transform_delivery.with_label_values(&delivery_labels).set(1);
    w.update(|s| {
        s.position = position;
        s.start_offset = position;
        s.high_watermark = input.high_watermark();
    });
    w.logs.push(
        "info",
        Some(w.partition),
        format!(
            "version {} starting at offset {position} of {}-{} ({})",
            w.transform.version,
            spec.input_topic,
            w.partition,
            spec.delivery.name()
        ),
    );
    let mut instance: Option<TransformInstance> = None;
    let mut backoff = BACKOFF_MIN;
    let mut committed = position;
    let mut last_commit = Instant::now();
    let commit_interval = match spec.delivery {
        DeliveryMode::AtLeastOnce => Duration::from_millis(spec.commit_interval_ms),
        DeliveryMode::ExactlyOnce => commit_interval_within_timeout(
            Duration::from_millis(spec.commit_interval_ms),
            Duration::from_millis(spec.call_timeout_ms),
            w.host.transaction_timeout_ms,
        ),
    };
    // Woken when the input's log end, log start or high watermark moves, or its role changes.
    let mut progress = input.subscribe_progress();
    let mut window = (Instant::now(), 0u64, 0u64);
    let mut bytes_per_record = 256.0f64;
    // The position the worker reported past the input's end (reported once, not per append).
    let mut stalled_past_end = None;
    loop {
        if *w.stop.borrow() {
            break;
        }
        if instance.is_none() {
            let module = w.module.clone();
            let setup = w.instantiate_setup();
            let instantiated = tokio::task::spawn_blocking(move || module.instantiate(setup)).await;
            // State changes a guest makes while it starts (its start function, `init`) belong to
            // no batch: they are dropped, never committed with the next batch's (nor left under
            // a restore, whose sizes they would corrupt), whether or not it started.
            w.with_state(KeyedState::discard_batch);
            match instantiated {
                Ok(Ok(created)) => {
                    instance = Some(created);
                    w.update(|s| s.state = "running");
                }
                Ok(Err(e)) => {
                    let failure = BatchFailure::Guest(e);
                    fail(&w, &failure);
                    if !w.pause(backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
                Err(_) => break,
            }
        }
        progress.borrow_and_update();
        let read_bytes = (spec.batch_records_max as f64 * bytes_per_record * 1.1) as usize;
        let read = match input.read(
            position,
            read_bytes.clamp(READ_BYTES_MIN, READ_BYTES_MAX),
            FirstBatch::Whole,
            // A transactional input's open and aborted transactions are never processed.
            crate::partition::Isolation::ReadCommitted,
        ) {
            Ok(read) => {
                stalled_past_end = None;
                read
            }
            Err(PartitionError::Log(crate::log::LogError::OffsetOutOfRange {
                log_start_offset,
                log_end_offset,
                ..
            })) if position < log_start_offset => {
                // Retention deleted input the transform had not reached: what is left is read.
                w.logs.push(
                    "warn",
                    Some(w.partition),
                    format!("offset {position} is gone (retention); resuming at {log_start_offset}"),
                );
                position = log_start_offset.min(log_end_offset);
                continue;
            }
            Err(PartitionError::Log(crate::log::LogError::OffsetOutOfRange { log_end_offset, .. })) => {
                // Past the log end: the input was truncated or recreated. Starting over would
                // process input again and skipping ahead would lose some, so the position stays
                // and the partition shows the error until the input reaches it or the
                // transform is deleted.
                if stalled_past_end != Some(position) {
                    let failure = BatchFailure::PositionPastEnd {
                        topic: spec.input_topic.clone(),
                        partition: w.partition,
                        position,
                        end: log_end_offset,
                    };
                    fail(&w, &failure);
                    stalled_past_end = Some(position);
                }
                tokio::select! {
                    _ = progress.changed() => {}
                    _ = w.stop.wait_for(|s| *s) => break,
                    _ = tokio::time::sleep(BACKOFF_MAX) => {}
                }
                continue;
            }
            Err(e) => {
                w.logs.push("error", Some(w.partition), format!("reading input: {e}"));
                if !w.pause(backoff).await {
                    break;
                }
                continue;
            }
        };
        w.update(|s| s.high_watermark = read.high_watermark);
        metrics.transform_lag.with_label_values(&labels).set(read.high_watermark.saturating_sub(position).max(0));
        if read.records.is_empty() {
            if committed != position || delivery.is_open() {
                let outcome = w.checkpoint_at(&mut delivery, &input, position).await;
                if settle(outcome, &mut position, &mut committed) {
                    w.update(|s| s.position = position);
                    continue;
                }
            }
            last_commit = Instant::now();
            let checkpoint_failed = committed != position;
            tokio::select! {
                _ = progress.changed() => {}
                _ = w.stop.wait_for(|s| *s) => break,
                // A checkpoint that failed is tried again even if no input arrives.
                _ = tokio::time::sleep(BACKOFF_MIN), if checkpoint_failed => {}
            }
            continue;
        }
        let data_max = usize::try_from(spec.memory_bytes / 2).unwrap_or(usize::MAX);
        let (batch, next) =
            decode(w.partition, read.records, &read.aborted, position, spec.batch_records_max as usize, data_max);
        if batch.records.is_empty() {
            position = next.max(position);
            continue;
        }
        let records_in = batch.records.len() as u64;
        let bytes_in = batch.data.len() as u64;
        bytes_per_record = bytes_in as f64 / records_in as f64 + RECORD_OVERHEAD_BYTES;
        let Some(mut current) = instance.take() else { continue };
        let started = Instant::now();
        let joined = tokio::task::spawn_blocking(move || {
            let result = current.process(&batch);
            (current, batch, result)
        })
        .await;
        let Ok((current, batch, result)) = joined else { break };
        metrics.transform_call_seconds.with_label_values(&[w.name()]).observe(started.elapsed().as_secs_f64());
        w.update(|s| s.memory_bytes = current.memory_bytes() as u64);
        metrics.transform_memory_bytes.with_label_values(&labels).set(current.memory_bytes() as i64);
        let outcome = match result {
            Ok(output) => {
                append_outputs(&w, &mut delivery, &output).await.map(|written| (written, output.data.len() as u64))
            }
            Err(e) => Err(BatchFailure::Guest(e)),
        };
        // The batch's state changes are kept exactly when its outputs are (written with them).
        match (&outcome, &delivery) {
            (Ok(_), Delivery::ExactlyOnce(_)) => w.with_state(KeyedState::keep_batch),
            (Ok(_), Delivery::AtLeastOnce) => {
                w.with_state(|s| {
                    s.keep_batch();
                    s.commit();
                });
                w.report_state();
            }
            (Err(_), _) => w.with_state(KeyedState::discard_batch),
        }
        match outcome {
            Ok((written, bytes_out)) => {
                instance = Some(current);
                backoff = BACKOFF_MIN;
                position = next;
                metrics.transform_records_in.with_label_values(&[w.name()]).inc_by(records_in);
                metrics.transform_records_out.with_label_values(&[w.name()]).inc_by(written);
                metrics.transform_bytes_in.with_label_values(&[w.name()]).inc_by(bytes_in);
                metrics.transform_bytes_out.with_label_values(&[w.name()]).inc_by(bytes_out);
                window.1 += records_in;
                window.2 += written;
                w.update(|s| {
                    s.state = "running";
                    s.position = position;
                    s.records_in += records_in;
                    s.records_out += written;
                    s.bytes_in += bytes_in;
                    s.bytes_out += bytes_out;
                });
            }
            Err(BatchFailure::Txn(e)) if matches!(delivery, Delivery::ExactlyOnce(_)) => {
                // Some outputs of this batch may be in the transaction: it is aborted whatever
                // the error policy (which is for the guest's failures), and the batches since
                // the last commit are processed again.
                instance = Some(current);
                let fenced = e.fenced();
                fail(&w, &BatchFailure::Txn(e));
                if let Some(reread) = w.abandon(&mut delivery, &input, fenced).await {
                    committed = reread;
                }
                position = committed;
                w.update(|s| s.position = position);
                if !w.pause(backoff).await {
                    break;
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
            Err(failure) => {
                // A guest that trapped, ran out of time or memory is poisoned: start afresh.
                // One that returned an error or bad output can go on.
                if matches!(
                    failure,
                    BatchFailure::Guest(GuestError::Failed(_)) | BatchFailure::Guest(GuestError::InvalidOutput(_))
                ) {
                    instance = Some(current);
                }
                fail(&w, &failure);
                match &spec.error_policy {
                    ErrorPolicy::Retry => {
                        instance = None;
                        // The batches before the failing one are committed first (a backoff
                        // may outlast the transaction's timeout).
                        if delivery.is_open() {
                            let outcome = w.checkpoint_at(&mut delivery, &input, position).await;
                            settle(outcome, &mut position, &mut committed);
                            w.update(|s| s.position = position);
                        }
                        if !w.pause(backoff).await {
                            break;
                        }
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                    ErrorPolicy::Skip => {
                        w.logs.push(
                            "warn",
                            Some(w.partition),
                            format!("skipped offsets {position}..{next} (error policy skip)"),
                        );
                        w.update(|s| s.skipped += records_in);
                        position = next;
                    }
                    ErrorPolicy::DeadLetter { topic } => {
                        match dead_letter(&w, &mut delivery, topic, &batch, &failure).await {
                            Ok(()) => {
                                w.update(|s| s.dead_lettered += records_in);
                                position = next;
                            }
                            Err(e) => {
                                w.logs.push(
                                    "error",
                                    Some(w.partition),
                                    format!("dead letter topic '{topic}': {e}; retrying"),
                                );
                                if let BatchFailure::Txn(e) = &e {
                                    // Some dead letters may be in the transaction: it is aborted.
                                    if let Some(reread) = w.abandon(&mut delivery, &input, e.fenced()).await {
                                        committed = reread;
                                    }
                                    position = committed;
                                    w.update(|s| s.position = position);
                                }
                                if !w.pause(backoff).await {
                                    break;
                                }
                                backoff = (backoff * 2).min(BACKOFF_MAX);
                                continue;
                            }
                        }
                    }
                }
                w.update(|s| s.position = position);
            }
        }
        if window.0.elapsed() >= Duration::from_secs(1) {
            let seconds = window.0.elapsed().as_secs_f64();
            let (records_in, records_out) = (window.1, window.2);
            w.update(|s| {
                s.records_in_per_sec = records_in as f64 / seconds;
                s.records_out_per_sec = records_out as f64 / seconds;
            });
            window = (Instant::now(), 0, 0);
        }
        if last_commit.elapsed() >= commit_interval {
            let outcome = w.checkpoint_at(&mut delivery, &input, position).await;
            settle(outcome, &mut position, &mut committed);
            w.update(|s| s.position = position);
            last_commit = Instant::now();
        }
    }
    if committed != position || delivery.is_open() {
        w.checkpoint_at(&mut delivery, &input, position).await;
    }
    w.update(|s| {
        if s.state == "running" || s.state == "starting" {
            s.state = "stopped";
        }
        s.records_in_per_sec = 0.0;
        s.records_out_per_sec = 0.0;
    });
    let _ = metrics.transform_lag.remove_label_values(&[&labels[0], &labels[1]]);
    let _ = metrics.transform_memory_bytes.remove_label_values(&[&labels[0], &labels[1]]);
    let _ = metrics.transform_state_bytes.remove_label_values(&[&labels[0], &labels[1]]);
    let _ = metrics.transform_delivery.remove_label_values(&delivery_labels);
}

/// Applies a checkpoint's outcome to the worker's positions; whether processing went back to
/// the committed position (an exactly-once transaction was aborted).
fn settle(outcome: Checkpointed, position: &mut i64, committed: &mut i64) -> bool {
    match outcome {
        Checkpointed::Done => {
            *committed = *position;
            false
        }
        Checkpointed::Later => false,
        Checkpointed::RolledBack(reread) => {
            if let Some(reread) = reread {
                *committed = reread;
            }
            *position = *committed;
            true
        }
    }
}

fn fail(w: &Worker, failure: &BatchFailure) {
    let message = failure.to_string();
    tracing::warn!(transform = %w.transform.name, partition = w.partition, error = %message, "transform batch failed");
    w.logs.push("error", Some(w.partition), message.clone());
    w.host.metrics.transform_errors.with_label_values(&[w.transform.name.as_str(), failure.kind()]).inc();
    w.update(|s| {
        s.state = "failed";
        s.errors += 1;
        s.last_error = Some(message);
        s.last_error_ms = Some(now_ms());
    });
}

/// Decodes fetched batches from `position` into one guest batch of at most `max_records`
/// records and about `data_max` bytes of record data (the first record always goes in; the
/// guest's copy of the batch must fit its memory, and a batch of decompressed records could
/// otherwise pass `InputBatch`'s i32 spans), leaving out the records of the `aborted`
/// transactions (read_committed); returns it with the offset to read next (see
/// [`for_each_committed_record`]).
fn decode(
    partition: i32,
    bytes: Bytes,
    aborted: &[crate::log::txn_index::AbortedTxn],
    position: i64,
    max_records: usize,
    data_max: usize,
) -> (InputBatch, i64) {
    let data_max = data_max.min(i32::MAX as usize / 2);
    let mut batch = InputBatch::new(partition);
    let mut filter = AbortedFilter::new(aborted.iter().map(|a| (a.producer_id, a.first_offset)));
    let next = for_each_committed_record(bytes, position, max_records.max(1), Some(&mut filter), |record| {
        let headers: Vec<(&str, Option<&[u8]>)> =
            record.headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        let size = crate::log::records::record_size_bound(record.key.as_deref(), record.value.as_deref(), &headers);
        if !batch.is_empty() && batch.data.len() + size > data_max {
            return ControlFlow::Break(());
        }
        // A stored timestamp below -1 (the log takes any CreateTime) reaches the guest as -1,
        // "none": forwarded as it came it would be an invalid output (-1 is the only negative
        // timestamp an output may have) and stop the partition at that record.
        let timestamp = record.timestamp.max(-1);
        batch.push(record.offset, timestamp, record.key.as_deref(), record.value.as_deref(), &headers);
        ControlFlow::Continue(())
    });
    (batch, next)
}

/// The commit interval an exactly-once worker keeps to: a transaction opens with a batch's
/// first output and is committed once the interval has passed after a batch, so it may stay
/// open for the interval, then one more guest call and its produce. Past the transaction
/// timeout the coordinator aborts it, the commit is fenced, and the same batches are processed
/// again, forever: the interval shrinks (to committing every batch) to keep inside it.
fn commit_interval_within_timeout(interval: Duration, call_timeout: Duration, transaction_timeout_ms: i32) -> Duration {
    let timeout = Duration::from_millis(transaction_timeout_ms.max(0) as u64);
    let one_batch = call_timeout + Duration::from_millis(super::txn::PRODUCE_TIMEOUT_MS as u64) + TXN_MARGIN;
    interval.min(timeout.saturating_sub(one_batch))
}

/// Slack kept below the transaction timeout for the commit itself.
const TXN_MARGIN: Duration = Duration::from_secs(5);

/// Appends the guest's output records, one batch per (topic, partition), and the batch's state
/// changes to the changelog; returns the number of output records written.
async fn append_outputs(w: &Worker, delivery: &mut Delivery, output: &OutputBatch) -> Result<u64, BatchFailure> {
    let spec = &w.transform.spec;
    let now = now_ms();
    let mut targets: BTreeMap<(u32, i32), PartitionBatches> = BTreeMap::new();
    // Per output topic: what it takes, looked up once.
    let mut shapes: Vec<Option<OutputShape>> = vec![None; spec.output_topics.len()];
    for record in &output.records {
        // The runtime checked the index against the output topics it was given.
        let Some(topic) = spec.output_topics.get(record.topic as usize) else {
            return Err(BatchFailure::Guest(GuestError::InvalidOutput(format!("output topic index {}", record.topic))));
        };
        let shape = match shapes[record.topic as usize] {
            Some(shape) => shape,
            None => {
                let shape = topic_shape(w, topic)?;
                shapes[record.topic as usize] = Some(shape);
                shape
            }
        };
        let (count, max_bytes) = (shape.partitions, shape.max_bytes);
        let key = output.key(record);
        let partition = match (record.partition, key) {
            (p, _) if p >= 0 => {
                if p as usize >= count {
                    return Err(BatchFailure::BadPartition { topic: topic.clone(), partition: p, count });
                }
                p
            }
            (_, Some(key)) => partition_for_key(key, count as u32),
            (_, None) => w.partition.rem_euclid(count as i32),
        };
        let borrowed: Vec<(&str, Option<&[u8]>)> = output.headers(record).collect();
        let timestamp = if record.timestamp >= 0 { record.timestamp } else { now };
        // A record its leader would refuse (INVALID_RECORD, INVALID_TIMESTAMP) fails here, so
        // the error policy decides: produced, the refusal would abort the transaction and the
        // same output would meet it again at every retry.
        if let Some(reason) = shape.refusal(key, timestamp, now) {
            return Err(BatchFailure::Unacceptable { topic: topic.clone(), reason });
        }
        targets.entry((record.topic, partition)).or_insert_with(|| PartitionBatches::new(max_bytes)).push(
            timestamp,
            key,
            output.value(record),
            &borrowed,
        );
    }
    let (state_topic, changelog, changes) = match state_changes(w, now)? {
        Some((topic, builders, changes)) => (topic, Some(builders), changes),
        None => (String::new(), None, 0),
    };
    let targets = targets
        .into_iter()
        .map(|((topic, partition), builders)| (spec.output_topics[topic as usize].as_str(), partition, builders))
        .chain(changelog.map(|builders| (state_topic.as_str(), w.partition, builders)));
    // The changelog records are not outputs.
    deliver(w, delivery, targets).await.map(|written| written - changes)
}

/// A stateful transform's fresh-start marker (see `state.rs`), written to its changelog
/// partition the delivery's way (exactly-once: in the open transaction the first checkpoint
/// commits; at-least-once: appended before it, not atomically: a crash between leaves a
/// marker with no checkpoint of its deployment, and a later `--resume` of the previous
/// deployment's position restores nothing before it). Nothing for a stateless transform.
async fn write_fresh_start(w: &Worker, delivery: &mut Delivery) -> Result<(), BatchFailure> {
    if w.state.is_none() {
        return Ok(());
    }
    w.ensure_state_topic().await.map_err(BatchFailure::StateTopic)?;
    let topic = super::state_topic_of(w.name());
    let mut builders = PartitionBatches::new(topic_shape(w, &topic)?.max_bytes);
    let deployment = w.transform.deployment.as_bytes();
    builders.push(now_ms(), Some(keyed::FRESH_START_KEY), Some(deployment), &[(DEPLOYMENT_HEADER, Some(deployment))]);
    deliver(w, delivery, std::iter::once((topic.as_str(), w.partition, builders))).await.map(|_| ())
}

/// The changelog records of the current batch's state changes (key, value or null, the
/// deployment header), for the state topic's partition of this input partition; `None` when
/// the transform keeps no state or the batch changed none.
fn state_changes(w: &Worker, now: i64) -> Result<Option<(String, PartitionBatches, u64)>, BatchFailure> {
    let Some(state) = &w.state else { return Ok(None) };
    let state = state.lock().unwrap_or_else(|p| p.into_inner());
    if state.batch_is_empty() {
        return Ok(None);
    }
    let topic = super::state_topic_of(w.name());
    let max_bytes = topic_shape(w, &topic)?.max_bytes;
    let mut builders = PartitionBatches::new(max_bytes);
    let headers = [(DEPLOYMENT_HEADER, Some(w.transform.deployment.as_bytes()))];
    let mut changes = 0;
    for (key, value) in state.batch_changes() {
        builders.push(now, Some(key), value, &headers);
        changes += 1;
    }
    Ok(Some((topic, builders, changes)))
}

/// Builds the batches of every output partition and writes them the delivery's way; the
/// records written. Nothing is written when a batch cannot be built (a record too large), and
/// exactly-once no sequence is spent on it.
async fn deliver<'t>(
    w: &Worker,
    delivery: &mut Delivery,
    targets: impl Iterator<Item = (&'t str, i32, PartitionBatches)>,
) -> Result<u64, BatchFailure> {
    let mut written = 0u64;
    let mut batches = Vec::new();
    match delivery {
        Delivery::AtLeastOnce => {
            for (topic, partition, builders) in targets {
                written += builders.build(topic, partition, None, &mut batches)?;
            }
            append(w, batches).await?;
        }
        Delivery::ExactlyOnce(producer) => {
            let savepoint = producer.savepoint();
            for (topic, partition, builders) in targets {
                match builders.build(topic, partition, Some(producer), &mut batches) {
                    Ok(records) => written += records,
                    Err(e) => {
                        producer.rollback_to(savepoint);
                        return Err(e);
                    }
                }
            }
            // A validator's refusal inside the transaction would abort it, and the batch would
            // be refused again after every retry, whatever the error policy: judged first.
            if let Some(refusal) = refused_by_validators(w, &batches).await {
                producer.rollback_to(savepoint);
                return Err(refusal);
            }
            let deadline = Instant::now() + Duration::from_millis(OUTPUT_TIMEOUT_MS as u64);
            producer.produce(&w.host, batches, deadline).await.map_err(BatchFailure::Txn)?;
        }
    }
    Ok(written)
}

/// The first refusal of `batches` by their topics' validators (the leader would answer the
/// same: every node runs the deployed version).
async fn refused_by_validators(w: &Worker, batches: &[Output]) -> Option<BatchFailure> {
    let image = w.host.controller.image();
    if image.validators.is_empty() {
        return None;
    }
    for batch in batches {
        if !image.validators.values().any(|v| v.spec.topic == batch.topic) {
            continue;
        }
        let verdict = (w.host.validate_output)(batch.topic.clone(), batch.partition, batch.bytes.clone()).await;
        if let Some(message) = verdict {
            return Some(BatchFailure::Rejected {
                topic: batch.topic.clone(),
                partition: batch.partition,
                code: ResponseError::InvalidRecord.code(),
                message: Some(message),
            });
        }
    }
    None
}

/// What an output topic takes, from its effective config in the image.
#[derive(Debug, Clone, Copy)]
struct OutputShape {
    partitions: usize,
    /// `max.message.bytes`.
    max_bytes: usize,
    /// Compacted: every record needs a key.
    needs_key: bool,
    /// With CreateTime, `message.timestamp.before.max.ms` and `.after.max.ms`.
    timestamp_bounds: Option<(i64, i64)>,
}

impl OutputShape {
    /// Why the topic's leader would refuse a record with `key` and `timestamp` (as
    /// `Log::check_records` does), if it would.
    fn refusal(&self, key: Option<&[u8]>, timestamp: i64, now: i64) -> Option<String> {
        if self.needs_key && key.is_none() {
            return Some("the topic is compacted and the record has no key".to_string());
        }
        let (before, after) = self.timestamp_bounds?;
        let (timestamp_, now_) = (i128::from(timestamp), i128::from(now));
        if now_ - timestamp_ > i128::from(before) || timestamp_ - now_ > i128::from(after) {
            return Some(format!(
                "timestamp {timestamp} is outside the topic's message.timestamp.before.max.ms ({before}) / \
                 after.max.ms ({after}) of now ({now})"
            ));
        }
        None
    }
}

fn topic_shape(w: &Worker, topic: &str) -> Result<OutputShape, BatchFailure> {
    let image = w.host.controller.image();
    let t = image.topics.get(topic).ok_or_else(|| BatchFailure::MissingOutput(topic.to_string()))?;
    let config = crate::server::topic_log_config(&w.host.log_defaults, &t.configs);
    let create_time = config.message_timestamp_type == crate::log::TimestampType::CreateTime;
    Ok(OutputShape {
        partitions: t.partitions.len(),
        max_bytes: config.max_message_bytes as usize,
        needs_key: config.cleanup_policy.compact,
        timestamp_bounds: create_time
            .then_some((config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)),
    })
}

/// The record batches of one output partition: the next record starts a new batch whenever
/// it could take the current one past the topic's `max.message.bytes`, which the leader
/// would refuse with MESSAGE_TOO_LARGE (and a retry would meet again).
struct PartitionBatches {
    max_bytes: usize,
    builders: Vec<BatchBuilder>,
}

impl PartitionBatches {
    fn new(max_bytes: usize) -> Self {
        PartitionBatches { max_bytes, builders: Vec::new() }
    }

    fn push(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&str, Option<&[u8]>)]) {
        let bound = crate::log::records::record_size_bound(key, value, headers);
        let full = self.builders.last().is_none_or(|b| !b.is_empty() && b.size_bytes() + bound > self.max_bytes);
        if full {
            self.builders.push(BatchBuilder::new(Compression::None));
        }
        if let Some(builder) = self.builders.last_mut() {
            builder.push(timestamp, key, value, headers);
        }
    }

    /// Builds the batches into `outputs` for `topic`-`partition`, in order; the records
    /// written. A batch still past the bound holds a single record the topic cannot take.
    /// Exactly-once, each batch is `producer`'s next transactional batch of the partition.
    fn build(
        self,
        topic: &str,
        partition: i32,
        mut producer: Option<&mut TxnProducer>,
        outputs: &mut Vec<Output>,
    ) -> Result<u64, BatchFailure> {
        let mut written = 0;
        for mut builder in self.builders {
            let records = builder.len() as u64;
            if let Some(producer) = producer.as_deref_mut() {
                builder = producer.stamp(topic, partition, builder.len(), builder);
            }
            let bytes = builder.build().map_err(|e| BatchFailure::Encode(e.to_string()))?.into_bytes();
            if bytes.len() > self.max_bytes {
                let (topic, size, max) = (topic.to_string(), bytes.len(), self.max_bytes);
                return Err(BatchFailure::RecordTooLarge { topic, partition, size, max });
            }
            outputs.push(Output { topic: topic.to_string(), partition, bytes });
            written += records;
        }
        Ok(written)
    }
}

/// One batch for one output partition.
pub(super) struct Output {
    pub topic: String,
    pub partition: i32,
    pub bytes: Bytes,
}

/// Appends every batch on its partition's leader with acks=all, all at once: the partitions
/// led here through the partition itself, the others as one Produce request per leading
/// broker. `Ok` once every batch is below its partition's high watermark.
async fn append(w: &Worker, outputs: Vec<Output>) -> Result<(), BatchFailure> {
    let image = w.host.controller.image();
    let mut by_leader: BTreeMap<u64, Vec<Output>> = BTreeMap::new();
    for output in outputs {
        let leader = u32::try_from(output.partition)
            .ok()
            .and_then(|p| image.partition(&output.topic, p))
            .and_then(|p| p.leader)
            .filter(|leader| *leader == w.host.node_id || image.brokers.contains_key(leader));
        // Led by no one: this node's handler refuses it (NOT_LEADER_OR_FOLLOWER).
        by_leader.entry(leader.unwrap_or(w.host.node_id)).or_default().push(output);
    }
    futures_util::future::try_join_all(by_leader.into_iter().map(|(leader, outputs)| send(w, leader, outputs)))
        .await
        .map(|_| ())
}

/// Sends `outputs` to their leader `leader` (acks=all): one Produce request per round, the
/// first batch of every partition, then the second of those that have one, ...; a Produce
/// request carries one batch per partition (Kafka refuses more since v3). Through the Produce
/// handler either way (this node's in process), so what it checks (a topic's validator, the
/// leader, `min.insync.replicas`) applies to transform outputs as to any producer's.
async fn send(w: &Worker, leader: u64, outputs: Vec<Output>) -> Result<(), BatchFailure> {
    let mut rounds: Vec<Vec<Output>> = Vec::new();
    let mut taken: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for output in outputs {
        let round = taken.entry((output.topic.clone(), output.partition)).or_default();
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(output);
        *round += 1;
    }
    for round in rounds {
        send_round(w, leader, round).await?;
    }
    Ok(())
}

/// Sends `outputs`, at most one per partition, to `leader` as one Produce request.
async fn send_round(w: &Worker, leader: u64, outputs: Vec<Output>) -> Result<(), BatchFailure> {
    let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
    for output in &outputs {
        topics.entry(output.topic.as_str()).or_default().push(
            PartitionProduceData::default().with_index(output.partition).with_records(Some(output.bytes.clone())),
        );
    }
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(OUTPUT_TIMEOUT_MS).with_topic_data(
        topics
            .into_iter()
            .map(|(topic, partitions)| {
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partition_data(partitions)
            })
            .collect(),
    );
    let response = if leader == w.host.node_id {
        (w.host.local_produce)(request).await.ok_or(BatchFailure::Stopping)?
    } else {
        // The leader waits up to the request's timeout; leave room for its answer.
        let timeout = Duration::from_millis(OUTPUT_TIMEOUT_MS as u64) + Duration::from_secs(5);
        w.host.peers.call(leader, PRODUCE_VERSION, &request, timeout).await?
    };
    let mut answered = 0;
    for topic in response.responses {
        for p in topic.partition_responses {
            answered += 1;
            if p.error_code != 0 {
                return Err(BatchFailure::Rejected {
                    topic: topic.name.0.to_string(),
                    partition: p.index,
                    code: p.error_code,
                    message: p.error_message.map(|m| m.to_string()).filter(|m| !m.is_empty()),
                });
            }
        }
    }
    if answered != outputs.len() {
        let first = &outputs[0];
        return Err(BatchFailure::Rejected {
            topic: first.topic.clone(),
            partition: first.partition,
            code: ResponseError::UnknownServerError.code(),
            message: Some(format!("{answered} answers to {} batches", outputs.len())),
        });
    }
    Ok(())
}

/// Kafka's name of an error code (`NotLeaderOrFollower`), for messages.
pub(super) fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(error) => format!("{error:?}"),
        None => format!("error code {code}"),
    }
}

/// Sends the failed batch's input records to the dead-letter topic with the error in headers
/// (`runnel.error`, `runnel.transform`, `runnel.source.topic`, `runnel.source.partition`,
/// `runnel.source.offset`), keyed and timestamped as they came, save what the topic would
/// refuse: a keyless record for a compacted topic is keyed `<topic>/<partition>/<offset>`, a
/// timestamp outside its bounds becomes now.
async fn dead_letter(
    w: &Worker,
    delivery: &mut Delivery,
    topic: &str,
    batch: &InputBatch,
    failure: &BatchFailure,
) -> Result<(), BatchFailure> {
    let shape = topic_shape(w, topic)?;
    let (count, max_bytes) = (shape.partitions, shape.max_bytes);
    let error = failure.to_string();
    let source_partition = w.partition.to_string();
    let now = now_ms();
    let mut builders: BTreeMap<i32, PartitionBatches> = BTreeMap::new();
    for record in &batch.records {
        let coordinates;
        let key = match batch.key(record) {
            None if shape.needs_key => {
                coordinates = format!("{}/{}/{}", w.transform.spec.input_topic, w.partition, record.offset);
                Some(coordinates.as_bytes())
            }
            key => key,
        };
        let timestamp = if shape.refusal(key, record.timestamp, now).is_some() { now } else { record.timestamp };
        let partition = match key {
            Some(key) => partition_for_key(key, count as u32),
            None => w.partition.rem_euclid(count as i32),
        };
        let offset = record.offset.to_string();
        let mut headers: Vec<(&str, Option<&[u8]>)> = batch.headers(record).collect();
        headers.push(("runnel.error", Some(error.as_bytes())));
        headers.push(("runnel.transform", Some(w.transform.name.as_bytes())));
        headers.push(("runnel.source.topic", Some(w.transform.spec.input_topic.as_bytes())));
        headers.push(("runnel.source.partition", Some(source_partition.as_bytes())));
        headers.push(("runnel.source.offset", Some(offset.as_bytes())));
        builders.entry(partition).or_insert_with(|| PartitionBatches::new(max_bytes)).push(
            timestamp,
            key,
            batch.value(record),
            &headers,
        );
    }
    deliver(w, delivery, builders.into_iter().map(|(partition, builders)| (topic, partition, builders))).await?;
    w.logs.push(
        "warn",
        Some(w.partition),
        format!("{} records sent to dead-letter topic '{topic}'", batch.records.len()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_interval_keeps_a_transaction_inside_its_timeout() {
        let ms = Duration::from_millis;
        // Defaults (60 s timeout, 2 s calls): the deployment's interval stands.
        assert_eq!(commit_interval_within_timeout(ms(1_000), ms(2_000), 60_000), ms(1_000));
        // A 30 s interval with 60 s calls would outlive a 60 s transaction: every batch commits.
        assert_eq!(commit_interval_within_timeout(ms(30_000), ms(60_000), 60_000), ms(0));
        // transaction.max.timeout.ms 50 s, 10 s calls: 50 - 10 - 30 - 5 s.
        assert_eq!(commit_interval_within_timeout(ms(20_000), ms(10_000), 50_000), ms(5_000));
    }

    #[test]
    fn a_guest_batch_stops_at_its_data_bound_and_reads_on_from_the_first_record_left_out() {
        // Proves decoding is bounded by bytes, not only by records: fetched batches of large
        // (decompressed) records filled one guest batch without bound, past the guest's memory
        // and up to InputBatch's i32 spans (a panic of the worker). The first record always
        // goes in; the next read starts at the first left out.
        let mut builder = BatchBuilder::new(crate::log::Compression::Zstd);
        let value = vec![b'v'; 100];
        for _ in 0..3 {
            builder.push(1, None, Some(&value), &[]);
        }
        let bytes = builder.build().unwrap().into_bytes();
        let (batch, next) = decode(0, bytes.clone(), &[], 0, 1000, 250);
        assert_eq!((batch.len(), next), (2, 2));
        let (batch, next) = decode(0, bytes.clone(), &[], 2, 1000, 250);
        assert_eq!((batch.len(), next), (1, 3));
        let (batch, next) = decode(0, bytes, &[], 0, 1000, 1);
        assert_eq!((batch.len(), next), (1, 1), "one record even past the bound");
    }

    #[test]
    fn partition_batches_fill_up_to_max_message_bytes_and_name_a_record_that_cannot_fit() {
        // Proves outputs are cut into batches that each fit the bound, keep every record in
        // order, and are not cut needlessly small; a lone record past the bound is an error.
        let mut batches = PartitionBatches::new(4096);
        let value = vec![b'v'; 300];
        for _ in 0..100 {
            batches.push(1, Some(b"key"), Some(&value), &[("h", Some(b"x"))]);
        }
        let mut outputs = Vec::new();
        assert_eq!(batches.build("t", 0, None, &mut outputs).expect("built"), 100);
        assert!(outputs.len() > 1);
        assert!(outputs.iter().all(|o| o.bytes.len() <= 4096));
        let bound = crate::log::records::record_size_bound(Some(b"key"), Some(&value), &[("h", Some(b"x"))]);
        assert!(
            outputs[..outputs.len() - 1].iter().all(|o| o.bytes.len() + bound > 4096),
            "each batch as full as allowed"
        );
        let records = |o: &Output| crate::log::batch::BatchHeader::read(&o.bytes).map_or(0, |h| h.record_count as u64);
        assert_eq!(outputs.iter().map(records).sum::<u64>(), 100);

        let mut batches = PartitionBatches::new(4096);
        batches.push(1, None, Some(&[0u8; 5000]), &[]);
        let failure = batches.build("t", 3, None, &mut Vec::new()).expect_err("too large");
        assert!(matches!(failure, BatchFailure::RecordTooLarge { partition: 3, max: 4096, .. }), "{failure}");
    }
}
