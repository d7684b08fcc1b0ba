//! librdkafka clients that feed a [`Checker`] during fault runs: producer threads (acks=all,
//! `enable.idempotence=false`, retries) writing unique values and recording every delivery
//! report, background consumers recording every poll, the final full read of every partition
//! from its log start offset to its high watermark (assigned, no group), plus the metadata and
//! admin calls the scenarios need (replicated topics, the leader and ISR of a partition).
//!
//! Everything waits on a condition with a deadline; the only sleep is the producers' pacing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::checker::{Checker, FinalBounds};
use super::{block_on, wait_until};

/// librdkafka's `message.timeout.ms` for fault producers: a write not acknowledged by then is
/// reported failed (its outcome unknown) instead of retried for librdkafka's default 5 minutes.
pub const MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// How long a producer thread's final flush may wait for outstanding delivery reports.
const FLUSH_DEADLINE: Duration = Duration::from_millis(MESSAGE_TIMEOUT_MS + 10_000);
/// Metadata, watermarks and admin calls against a cluster that may be recovering.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

/// A librdkafka config for the cluster at `bootstrap` (every node's Kafka address).
pub fn config(bootstrap: &str, extra: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("broker.address.family", "v4")
        // Leader moves are learned from errors, but a stale view must not live long either.
        .set("topic.metadata.refresh.interval.ms", "2000");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config
}

/// acks=all without idempotence, retrying until `message.timeout.ms`: the producer the issue's
/// "loses nothing" goal is stated for. `extra` overrides any of it.
pub fn producer_config(bootstrap: &str, extra: &[(&str, &str)]) -> ClientConfig {
    let message_timeout = MESSAGE_TIMEOUT_MS.to_string();
    let mut settings: Vec<(&str, &str)> = vec![
        ("acks", "all"),
        ("enable.idempotence", "false"),
        ("retries", "2147483647"),
        ("retry.backoff.ms", "100"),
        ("retry.backoff.max.ms", "1000"),
        ("message.timeout.ms", &message_timeout),
        // A paused (SIGSTOP) leader must cost a request timeout, not librdkafka's 30 s default.
        ("request.timeout.ms", "5000"),
        ("linger.ms", "5"),
    ];
    settings.extend_from_slice(extra);
    config(bootstrap, &settings)
}

/// Sends every delivery report to the checker.
struct Recording {
    checker: Arc<Checker>,
}

impl ClientContext for Recording {}

impl ProducerContext for Recording {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                self.checker.ack(message.topic(), message.partition(), message.offset(), &value);
            }
            Err((error, message)) => {
                let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                self.checker.fail(&value, &error.to_string());
            }
        }
    }
}

/// What producer threads write.
#[derive(Clone, Debug)]
pub struct ProducerSpec {
    pub topic: String,
    pub threads: usize,
    /// Records per thread; `None`: until [`Producers::stop`].
    pub records_per_thread: Option<u64>,
    /// Pause between two sends of one thread (pacing only; zero: as fast as the queue takes).
    pub pace: Duration,
    /// librdkafka settings over [`producer_config`]'s.
    pub extra: Vec<(String, String)>,
    /// The partition to write to; `None`: librdkafka's partitioner spreads the values.
    pub partition: Option<i32>,
}

impl ProducerSpec {
    /// `threads` producers writing to `topic` until stopped, one record per `pace` each.
    pub fn paced(topic: &str, threads: usize, pace: Duration) -> ProducerSpec {
        ProducerSpec {
            topic: topic.to_string(),
            threads,
            records_per_thread: None,
            pace,
            extra: Vec::new(),
            partition: None,
        }
    }

    pub fn with(mut self, key: &str, value: &str) -> ProducerSpec {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }
}

/// Running producer threads.
pub struct Producers {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Producers {
    pub fn start(bootstrap: &str, checker: &Arc<Checker>, spec: &ProducerSpec) -> Producers {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let threads = (0..spec.threads)
            .map(|i| {
                let (bootstrap, checker, spec, stop, sent) =
                    (bootstrap.to_string(), checker.clone(), spec.clone(), stop.clone(), sent.clone());
                std::thread::Builder::new()
                    .name(format!("producer-{i}"))
                    .spawn(move || produce(&bootstrap, checker, &spec, &stop, &sent))
                    .expect("spawn producer")
            })
            .collect();
        Producers { stop, sent, threads }
    }

    /// Records enqueued so far by every thread.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops sending, then waits for each thread's flush (bounded by `message.timeout.ms`):
    /// every attempted write has a delivery report (ack or failure) when this returns.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.join();
    }

    /// Waits for threads with a `records_per_thread` limit to send everything and flush.
    pub fn join(self) {
        for thread in self.threads {
            thread.join().expect("producer thread panicked");
        }
    }
}

fn produce(bootstrap: &str, checker: Arc<Checker>, spec: &ProducerSpec, stop: &AtomicBool, sent: &AtomicU64) {
    let extra: Vec<(&str, &str)> = spec.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let producer: BaseProducer<Recording> = producer_config(bootstrap, &extra)
        .create_with_context(Recording { checker: checker.clone() })
        .expect("producer");
    let mut count = 0u64;
    while !stop.load(Ordering::Acquire) && spec.records_per_thread.is_none_or(|limit| count < limit) {
        let value = checker.next_value();
        let mut record = BaseRecord::<(), String>::to(&spec.topic).payload(&value);
        if let Some(partition) = spec.partition {
            record = record.partition(partition);
        }
        let deadline = Instant::now() + CLIENT_DEADLINE;
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    // Serve delivery reports to make room, then retry the same record.
                    record = back;
                    producer.poll(Duration::from_millis(50));
                }
                Err((error, _)) => {
                    checker.fail(&value, &format!("enqueue: {error}"));
                    break;
                }
            }
        }
        count += 1;
        sent.fetch_add(1, Ordering::Relaxed);
        producer.poll(Duration::ZERO);
        if !spec.pace.is_zero() {
            // Pacing only: nothing waits on this sleep to happen.
            std::thread::sleep(spec.pace);
        }
    }
    // Outstanding writes end acknowledged or failed (librdkafka's message.timeout.ms); the
    // drop purges anything left after the deadline and reports it failed.
    let _ = producer.flush(FLUSH_DEADLINE);
}

/// A consumer assigned every partition of `topic` from the beginning (no group), polling in the
/// background and recording each record under `name`.
pub struct BackgroundConsumer {
    stop: Arc<AtomicBool>,
    polled: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl BackgroundConsumer {
    pub fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        checker: &Arc<Checker>,
        name: &str,
    ) -> BackgroundConsumer {
        let stop = Arc::new(AtomicBool::new(false));
        let polled = Arc::new(AtomicU64::new(0));
        // Offset 0, not Offset::Beginning: the topics here start at 0 and are never trimmed, and a
        // logical start makes librdkafka (2.10) send ListOffsets, which it keeps retrying (opv 2)
        // through leader changes even after the partition is fetching; a late success then moves
        // the live consumer back to offset 0 (seen as a non-monotonic poll in a rolling restart,
        // librdkafka debug `consumer,fetch`: "ListOffsetsRequest (v7, opv 2)" long after "start
        // fetching at offset 0"). RUNNEL_RDKAFKA_DEBUG=consumer,fetch,topic shows its account.
        let consumer =
            assigned_consumer(bootstrap, topic, &(0..partitions).map(|p| (p, Offset::Offset(0))).collect::<Vec<_>>());
        let (checker, stop2, polled2, name) = (checker.clone(), stop.clone(), polled.clone(), name.to_string());
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                while !stop2.load(Ordering::Acquire) {
                    // Errors (a leader gone, a timeout) are retried by librdkafka itself.
                    if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                        let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                        checker.poll(&name, message.topic(), message.partition(), message.offset(), &value);
                        polled2.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .expect("spawn consumer");
        BackgroundConsumer { stop, polled, thread }
    }

    pub fn polled(&self) -> u64 {
        self.polled.load(Ordering::Relaxed)
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("consumer thread panicked");
    }
}

/// A consumer with no group subscription, assigned `(partition, start)` of `topic`.
fn assigned_consumer(bootstrap: &str, topic: &str, start: &[(i32, Offset)]) -> BaseConsumer<LoggedContext> {
    let mut config = config(
        bootstrap,
        &[
            ("group.id", "runnel-fault-reader"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("fetch.wait.max.ms", "100"),
        ],
    )
    .clone();
    if let Ok(debug) = std::env::var("RUNNEL_RDKAFKA_DEBUG") {
        // librdkafka's own account (e.g. `consumer,fetch,topic`) on stderr, to explain a poll.
        config.set("debug", &debug).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let consumer: BaseConsumer<LoggedContext> = config.create_with_context(LoggedContext).expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for &(partition, offset) in start {
        assignment.add_partition_offset(topic, partition, offset).expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    consumer
}

/// The final full read: every partition of `topic`, from its log start offset to the high
/// watermark its leader reports now, each record recorded with [`Checker::final_read`] and each
/// partition's bounds with [`Checker::final_bounds`]. Run it after every fault healed and the
/// producers stopped. Gives up at `deadline`; returns what it could not do (a partition left
/// unread makes the report unclean, so nothing passes for lack of reading).
pub fn final_read(bootstrap: &str, topic: &str, checker: &Checker, deadline: Duration) -> Vec<String> {
    let until = Instant::now() + deadline;
    let Some(partitions) = partition_count(bootstrap, topic) else {
        return vec![format!("final read: no metadata for {topic} within {CLIENT_DEADLINE:?}")];
    };
    let mut problems = Vec::new();
    let probe: BaseConsumer = config(bootstrap, &[]).create().expect("consumer");
    // partition -> (log start offset, high watermark, next offset to read)
    let mut progress: BTreeMap<i32, (i64, i64, i64)> = BTreeMap::new();
    for partition in 0..partitions {
        let mut watermarks = None;
        // The leader may still be moving: ask until one answers, and until its high watermark
        // covers every acknowledged write (a leader elected a moment ago starts at the high
        // watermark it had as a follower and moves it with its followers' next fetches); one
        // still below by the deadline is read as it is, and the checker reports what is missing.
        let acked_end = checker.acked_end(topic, partition);
        let mut answered = None;
        wait_until(until.saturating_duration_since(Instant::now()), || {
            watermarks = probe.fetch_watermarks(topic, partition, Duration::from_secs(5)).ok();
            answered = watermarks.or(answered);
            watermarks.is_some_and(|(_, high)| high >= acked_end)
        });
        let watermarks = watermarks.or(answered);
        match watermarks {
            Some((low, high)) => {
                progress.insert(partition, (low, high, low));
            }
            None => problems.push(format!("final read: no watermarks for {topic}-{partition} within {deadline:?}")),
        }
    }
    let start: Vec<(i32, Offset)> = progress.iter().map(|(&p, &(low, _, _))| (p, Offset::Offset(low))).collect();
    let consumer = assigned_consumer(bootstrap, topic, &start);
    let done = |progress: &BTreeMap<i32, (i64, i64, i64)>| progress.values().all(|&(_, high, next)| next >= high);
    while !done(&progress) && Instant::now() < until {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                checker.final_read(message.topic(), message.partition(), message.offset(), &value);
                if let Some((_, _, next)) = progress.get_mut(&message.partition()) {
                    *next = (*next).max(message.offset() + 1);
                }
            }
            // Transient (a leader moving); librdkafka retries the fetch.
            Some(Err(_)) | None => {}
        }
    }
    for (partition, (low, high, next)) in progress {
        if next < high {
            problems
                .push(format!("final read: {topic}-{partition} read to {next} of [{low}, {high}) within {deadline:?}"));
        }
        checker.final_bounds(
            topic,
            partition,
            FinalBounds { log_start_offset: low, high_watermark: high, next_offset: next },
        );
    }
    problems
}

/// One partition as the cluster's metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// `None`: no leader (offline, or an election under way).
    pub leader: Option<u64>,
    pub replicas: Vec<u64>,
    pub isr: Vec<u64>,
}

/// `topic`'s partitions as one node of `bootstrap` answers Metadata now (`None`: no answer, or
/// the topic is unknown or has an error).
pub fn partition_states(bootstrap: &str, topic: &str) -> Option<Vec<PartitionState>> {
    let client: BaseConsumer = config(bootstrap, &[]).create().ok()?;
    let metadata = client.fetch_metadata(Some(topic), Duration::from_secs(5)).ok()?;
    let topic = metadata.topics().iter().find(|t| t.name() == topic)?;
    if topic.error().is_some() || topic.partitions().is_empty() {
        return None;
    }
    let mut states: Vec<PartitionState> = topic
        .partitions()
        .iter()
        .map(|p| PartitionState {
            partition: p.id(),
            leader: u64::try_from(p.leader()).ok(),
            replicas: p.replicas().iter().map(|&r| r as u64).collect(),
            isr: p.isr().iter().map(|&r| r as u64).collect(),
        })
        .collect();
    states.sort_by_key(|s| s.partition);
    Some(states)
}

/// How many brokers a node of `bootstrap` lists in Metadata now (`None`: no answer).
pub fn broker_count(bootstrap: &str) -> Option<usize> {
    let client: BaseConsumer = config(bootstrap, &[]).create().ok()?;
    let metadata = client.fetch_metadata(None, Duration::from_secs(5)).ok()?;
    Some(metadata.brokers().len())
}

pub fn partition_count(bootstrap: &str, topic: &str) -> Option<i32> {
    let mut count = None;
    wait_until(CLIENT_DEADLINE, || {
        count = partition_states(bootstrap, topic).map(|s| s.len() as i32);
        count.is_some()
    });
    count
}

/// Waits until partition `partition` of `topic` has a leader that `accept` takes; returns it.
pub fn wait_for_leader(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    timeout: Duration,
    mut accept: impl FnMut(u64) -> bool,
) -> Option<u64> {
    let mut found = None;
    wait_until(timeout, || {
        found = partition_states(bootstrap, topic)
            .and_then(|states| states.into_iter().find(|s| s.partition == partition))
            .and_then(|s| s.leader)
            .filter(|&leader| accept(leader));
        found.is_some()
    });
    found
}

/// Creates `topic` through librdkafka's AdminClient with `replication_factor` and `configs`
/// (e.g. `min.insync.replicas`), waiting for the cluster to answer.
pub fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
    configs: &[(&str, &str)],
) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        config(bootstrap, &[]).create().map_err(|e| e.to_string())?;
    let options = AdminOptions::new().operation_timeout(Some(CLIENT_DEADLINE)).request_timeout(Some(CLIENT_DEADLINE));
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication_factor));
    for (key, value) in configs {
        new_topic = new_topic.set(key, value);
    }
    let results = block_on(admin.create_topics(&[new_topic], &options)).map_err(|e| e.to_string())?;
    for result in results {
        result.map_err(|(name, code)| format!("creating {name}: {code:?}"))?;
    }
    Ok(())
}

/// Sends one acks=all record to `topic`-`partition` through `producer` and waits for its
/// delivery report; returns when it was acknowledged (or the error). Used to time failover.
pub fn produce_one(
    producer: &BaseProducer<ProbeContext>,
    topic: &str,
    partition: i32,
    value: &str,
    timeout: Duration,
) -> Result<Instant, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let record = BaseRecord::<(), str, _>::with_opaque_to(topic, Box::new(tx)).payload(value).partition(partition);
    producer.send(record).map_err(|(e, _)| format!("enqueue: {e}"))?;
    let until = Instant::now() + timeout;
    loop {
        producer.poll(Duration::from_millis(10));
        match rx.try_recv() {
            Ok(result) => return result,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err("delivery report dropped".to_string()),
            Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() >= until => {
                return Err(format!("no delivery report within {timeout:?}"));
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
        }
    }
}

/// A producer context that hands each delivery report (with the time it was served) to the
/// channel sent along with the record, and to the checker.
pub struct ProbeContext {
    pub checker: Arc<Checker>,
}

impl ClientContext for ProbeContext {}

impl ProducerContext for ProbeContext {
    type DeliveryOpaque = Box<std::sync::mpsc::Sender<Result<Instant, String>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, tx: Self::DeliveryOpaque) {
        let at = Instant::now();
        let outcome = match result {
            Ok(message) => {
                let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                self.checker.ack(message.topic(), message.partition(), message.offset(), &value);
                Ok(at)
            }
            Err((error, message)) => {
                let value = String::from_utf8_lossy(message.payload().unwrap_or_default());
                self.checker.fail(&value, &error.to_string());
                Err(error.to_string())
            }
        };
        let _ = tx.send(outcome);
    }
}

/// A probe producer (acks=all, no idempotence) for [`produce_one`].
pub fn probe_producer(bootstrap: &str, checker: &Arc<Checker>) -> BaseProducer<ProbeContext> {
    producer_config(bootstrap, &[("linger.ms", "0")])
        .create_with_context(ProbeContext { checker: checker.clone() })
        .expect("probe producer")
}

/// Prints librdkafka's log lines to stderr (only `RUNNEL_RDKAFKA_DEBUG` turns debug lines on).
pub struct LoggedContext;

impl rdkafka::client::ClientContext for LoggedContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("librdkafka {level:?} {fac}: {log_message}");
    }
}

impl rdkafka::consumer::ConsumerContext for LoggedContext {}
