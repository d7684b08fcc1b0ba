//! Exactly-once transforms under crashes (issue 13): the router example, deployed exactly-once
//! on a three-node cluster, routes a continuous stream of JSON orders into two output topics
//! while seeded fault rounds kill -9 and restart nodes (the workers' nodes among them) and
//! pause nodes past their lease (SIGSTOP/SIGCONT), which moves the input partitions' leaders
//! and with them the workers, the transaction coordinators and the checkpoint coordinator; a
//! fourth kind of round moves an input partition's leader with every node up (a reassignment
//! to a new replica order and a preferred election), so the old worker is alive when the new
//! one starts.
//! Afterwards every output is read `read_committed` and checked against the model (each
//! acknowledged order once, in the topic its size routes it to, keyed by its id): lost,
//! duplicated, misrouted and foreign outputs are counted and must all be 0.
//!
//! A second run does the same with a guest that traps every 37 records under the retry policy;
//! a third runs the stateful revenue example (orders keyed by customer) and checks every output
//! total against the model: each step of each customer once, with the count and sum up to it.
//! `RUNNEL_FAULT_SEED` replays a run; `RUNNEL_FAULT_ROUNDS` soaks (the suite runs 4, 2 and 4 rounds):
//! `RUNNEL_FAULT_ROUNDS=50 cargo test -p runnel-broker --test cluster_transforms -- --nocapture`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use support::cluster::{fault_rounds, Cluster, FaultRng};
use support::{wait_until, HttpApi};

const INPUT: &str = "orders";
const OUTPUTS: [&str; 2] = ["orders-big", "orders-small"];
const PARTITIONS: i32 = 2;
const DEADLINE: Duration = Duration::from_secs(120);
/// Orders belong to customers `c0`..`c4` (`id % CUSTOMERS`); an order's amount is `id * 7`.
const CUSTOMERS: u64 = 5;

/// The model: order `id` is big when `id % 3 == 0`, and goes to `orders-big`; else to
/// `orders-small`.
fn route(id: u64) -> &'static str {
    if id % 3 == 0 {
        OUTPUTS[0]
    } else {
        OUTPUTS[1]
    }
}

/// Records the ids of acknowledged orders.
/// Records the ids of acknowledged orders, and librdkafka's idempotence log (`debug=eos`:
/// producer ids, epoch bumps, sequence errors) for a diagnosis.
struct Acks(Arc<Mutex<BTreeSet<u64>>>, Arc<Mutex<Vec<String>>>);

impl ClientContext for Acks {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let line = format!("{} {level:?} {fac}: {message}", now.as_millis());
        self.1.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let Ok(message) = result else { return };
        let id =
            serde_json::from_slice::<Value>(message.payload().unwrap_or_default()).ok().and_then(|v| v["id"].as_u64());
        if let Some(id) = id {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
        }
    }
}

/// How the input records of the orders are keyed.
#[derive(Clone, Copy)]
enum KeyBy {
    /// By order id (the orders spread over the input partitions).
    Id,
    /// By customer: each customer's orders share an input partition (and so its state).
    Customer,
}

/// An idempotent acks=all producer of orders 0, 1, 2, ... every 5 ms until stopped.
struct Orders {
    acked: Arc<Mutex<BTreeSet<u64>>>,
    log: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Orders {
    fn start(bootstrap: &str, key_by: KeyBy) -> Orders {
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let producer: ThreadedProducer<Acks> =
            support::workload::producer_config(bootstrap, &[("enable.idempotence", "true"), ("debug", "eos")])
                .create_with_context(Acks(acked.clone(), log.clone()))
                .expect("producer");
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut id = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let size = if id % 3 == 0 { "big" } else { "small" };
                let customer = format!("c{}", id % CUSTOMERS);
                let value = json!({"id": id, "size": size, "amount": id * 7, "customer": customer}).to_string();
                let key = match key_by {
                    KeyBy::Id => id.to_string(),
                    KeyBy::Customer => customer,
                };
                if producer.send(BaseRecord::to(INPUT).key(&key).payload(&value)).is_ok() {
                    id += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = producer.flush(Duration::from_secs(60));
            id
        });
        Orders { acked, log, stop, thread }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Stops sending, waits for the outstanding deliveries; (orders sent, ids acknowledged,
    /// the producer's idempotence log).
    fn stop(self) -> (u64, BTreeSet<u64>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.thread.join().expect("producer thread");
        let acked = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let log = std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()));
        (sent, acked, log)
    }
}

/// Per input partition: (committed position of the transform, input high watermark), as
/// librdkafka reads them.
fn progress(bootstrap: &str, group: &str) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer =
        support::workload::config(bootstrap, &[("group.id", group)]).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition(INPUT, p);
    }
    let committed = consumer.committed_offsets(list, Duration::from_secs(5)).ok();
    (0..PARTITIONS)
        .map(|p| {
            let position = match committed.as_ref().and_then(|l| l.find_partition(INPUT, p)).map(|e| e.offset()) {
                Some(Offset::Offset(offset)) => offset,
                _ => -1,
            };
            let high = consumer.fetch_watermarks(INPUT, p, Duration::from_secs(5)).map_or(-2, |(_, high)| high);
            (position, high)
        })
        .collect()
}

/// Every output record, read_committed from the beginning to each partition's end:
/// (topic, key, value).
fn read_outputs(bootstrap: &str, outputs: &[&str]) -> Result<Vec<(String, Option<Vec<u8>>, Vec<u8>)>, String> {
    let mut records = Vec::new();
    for &topic in outputs {
        read_committed(bootstrap, topic, |m| {
            records.push((topic.to_string(), m.key().map(<[u8]>::to_vec), m.payload().unwrap_or_default().to_vec()))
        })?;
    }
    Ok(records)
}

/// Reads `topic` read_committed from the beginning to each partition's end, handing every
/// record to `each`. One topic at a time (librdkafka's end-of-partition event names only the
/// partition).
fn read_committed(
    bootstrap: &str,
    topic: &str,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), String> {
    let mut config = support::workload::config(bootstrap, &[("group.id", "crash-reader")]);
    config
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false");
    if let Ok(debug) = std::env::var("RUNNEL_RDKAFKA_DEBUG") {
        config.set("debug", &debug).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let consumer: BaseConsumer<support::workload::LoggedContext> =
        config.create_with_context(support::workload::LoggedContext).expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition_offset(topic, p, Offset::Beginning).expect("partition");
    }
    consumer.assign(&list).expect("assign");
    let mut at_end = BTreeSet::new();
    let mut count = 0usize;
    let read = wait_until(DEADLINE, || {
        // Everything ready is taken at each check (not one record per check).
        while let Some(next) = consumer.poll(Duration::from_millis(100)) {
            match next {
                Ok(m) => {
                    count += 1;
                    each(&m)
                }
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    at_end.insert(p);
                }
                Err(_) => {}
            }
        }
        at_end.len() == PARTITIONS as usize
    });
    if read {
        return Ok(());
    }
    let positions = consumer
        .position()
        .map(|l| format!("{:?}", l.elements().iter().map(|e| (e.partition(), e.offset())).collect::<Vec<_>>()));
    Err(format!(
        "{topic} was never read to its end ({count} records read; at the end: {at_end:?}; positions {positions:?})"
    ))
}

/// Diagnosis of duplicated outputs: where the first few of `ids` sit in the input and in the
/// outputs (topic-partition@offset), and the transform's host events on every node (worker
/// starts, producer epochs, positions read, fencing).
fn diagnose(cluster: &Cluster, name: &str, outputs: &[&str], ids: &[u64]) -> String {
    let ids: BTreeSet<u64> = ids.iter().take(6).copied().collect();
    let mut places: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for topic in std::iter::once(INPUT).chain(outputs.iter().copied()) {
        let read = read_committed(&cluster.bootstrap(), topic, |m| {
            let id =
                serde_json::from_slice::<Value>(m.payload().unwrap_or_default()).ok().and_then(|v| v["id"].as_u64());
            if let Some(id) = id.filter(|id| ids.contains(id)) {
                places.entry(id).or_default().push(format!("{topic}-{}@{}", m.partition(), m.offset()));
            }
        });
        if let Err(e) = read {
            places.entry(u64::MAX).or_default().push(e);
        }
    }
    // The batches holding the ids in the input: whose, at which epoch and sequence.
    for place in places.values_mut().flatten() {
        let input = place.strip_prefix(&format!("{INPUT}-")).and_then(|rest| rest.split_once('@'));
        if let Some((partition, offset)) = input.and_then(|(p, o)| Some((p.parse().ok()?, o.parse().ok()?))) {
            let batch = batch_header_at(cluster, INPUT, partition, offset);
            *place = format!(
                "{place} ({})",
                batch.map_or_else(|e| e, |(h, leader)| format!("{}, from {leader}", describe_batch(&h)))
            );
        }
    }
    let mut events = Vec::new();
    for id in cluster.ids() {
        let answer = HttpApi::new(cluster.node(id)).get(&format!("/v1/transforms/{name}/logs?limit=1000"));
        let lines = serde_json::from_str::<Value>(&answer.text).ok();
        for line in lines.iter().flat_map(|l| l["lines"].as_array().into_iter().flatten()) {
            let message = line["message"].as_str().unwrap_or_default();
            if !message.contains("trapped") {
                events.push(format!("{} node {id} p{}: {message}", line["timestamp_ms"], line["partition"]));
            }
        }
    }
    events.sort();
    format!("where: {places:?}\nhost events:\n{}", events.join("\n"))
}

/// A connection to the leader of `topic`-`partition` (as Metadata names it now), and its id.
fn leader_conn(cluster: &Cluster, topic: &str, partition: i32) -> Result<(support::RawConn, u64), String> {
    let leader = support::workload::partition_states(&cluster.bootstrap(), topic)
        .and_then(|states| states.into_iter().find(|s| s.partition == partition).and_then(|s| s.leader));
    let Some(leader) = leader else { return Err(format!("{topic}-{partition}: no leader")) };
    Ok((support::RawConn::open(cluster.node(leader), "crash-diagnosis"), leader))
}

/// One Fetch v12 of `topic`-`partition` from `offset` as a consumer (isolation 0:
/// read_uncommitted, 1: read_committed): the partition's answer.
fn fetch_once(
    conn: &mut support::RawConn,
    topic: &str,
    partition: i32,
    offset: i64,
    isolation: i8,
) -> Option<kafka_protocol::messages::fetch_response::PartitionData> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(1 << 20)])]);
    conn.call(12, &request).responses.into_iter().next()?.partitions.into_iter().next()
}

/// Diagnosis of a stalled read: Fetch v12 read_committed of `topic`-`partition` from its
/// leader, from offset 0 on, request after request: where each answer starts and ends, how many
/// aborted transactions it lists, and where an answer stops making progress.
fn fetch_from_start(cluster: &Cluster, topic: &str, partition: i32) -> String {
    let (mut conn, leader) = match leader_conn(cluster, topic, partition) {
        Ok(found) => found,
        Err(e) => return e,
    };
    let (mut offset, mut steps) = (0i64, Vec::new());
    for _ in 0..10_000 {
        let Some(p) = fetch_once(&mut conn, topic, partition, offset, 1) else {
            return format!("{topic}-{partition}: empty answer at {offset}");
        };
        let records = p.records.clone().unwrap_or_default();
        let mut next = offset;
        let mut batches = 0;
        let mut at = 0usize;
        while at + 61 <= records.len() {
            let Ok(header) = runnel::log::batch::BatchHeader::read(&records[at..]) else { break };
            next = next.max(header.base_offset + header.last_offset_delta as i64 + 1);
            at += header.batch_length as usize + 12;
            batches += 1;
        }
        let aborted = p.aborted_transactions.as_ref().map_or(0, Vec::len);
        if next == offset {
            steps.push(format!(
                "at {offset}: error {}, hw {}, lso {}, {} bytes, {batches} batches, {aborted} aborted: no progress",
                p.error_code,
                p.high_watermark,
                p.last_stable_offset,
                records.len()
            ));
            break;
        }
        if aborted > 0 || steps.len() < 3 {
            steps.push(format!("{offset}..{next}: {batches} batches, {aborted} aborted"));
        }
        offset = next;
    }
    format!("{topic}-{partition} from leader {leader}: {}", steps.join("; "))
}

/// The header of the batch holding `offset` of `topic`-`partition` as its leader serves it,
/// and that leader.
fn batch_header_at(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<(runnel::log::batch::BatchHeader, u64), String> {
    let (mut conn, leader) = leader_conn(cluster, topic, partition)?;
    let records = fetch_once(&mut conn, topic, partition, offset, 0).and_then(|p| p.records).unwrap_or_default();
    let mut at = 0usize;
    while at + 61 <= records.len() {
        let Ok(header) = runnel::log::batch::BatchHeader::read(&records[at..]) else { break };
        if header.base_offset + header.last_offset_delta as i64 >= offset {
            return Ok((header, leader));
        }
        at += header.batch_length as usize + 12;
    }
    Err(format!("no batch at {topic}-{partition}@{offset} from leader {leader}"))
}

fn describe_batch(header: &runnel::log::batch::BatchHeader) -> String {
    format!(
        "batch {}..={} of producer {} epoch {} from sequence {}, leader epoch {}",
        header.base_offset,
        header.base_offset + header.last_offset_delta as i64,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.partition_leader_epoch
    )
}

/// What the outputs are judged against: the orders sent and acknowledged, and the input as
/// read back read_committed, each partition in offset order: (partition, offset, id).
struct Model {
    sent: u64,
    acked: BTreeSet<u64>,
    input: Vec<(i32, i64, u64)>,
}

impl Model {
    fn input_counts(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for (_, _, id) in &self.input {
            *counts.entry(*id).or_default() += 1;
        }
        counts
    }
}

/// The input orders with their places, read_committed from the beginning.
fn read_input(bootstrap: &str) -> Result<Vec<(i32, i64, u64)>, String> {
    let mut input = Vec::new();
    read_committed(bootstrap, INPUT, |m| {
        if let Some(id) =
            serde_json::from_slice::<Value>(m.payload().unwrap_or_default()).ok().and_then(|v| v["id"].as_u64())
        {
            input.push((m.partition(), m.offset(), id));
        }
    })?;
    input.sort_unstable();
    Ok(input)
}

/// The input against what the producer was told: every acknowledged order is in it, and an
/// order in it twice was sent twice by the producer. librdkafka's idempotent producer re-sends
/// the unacknowledged messages of a partition under a bumped epoch when a later request of its
/// fails with OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier one failed (librdkafka#4953), and
/// an earlier one that had been written then is in the log twice, each copy at its own epoch.
/// That is the client's documented limit, reported; two copies at one producer epoch would
/// be the log failing to de-duplicate a retry, and fail the run. Ok: a summary.
fn check_input(cluster: &Cluster, model: &Model) -> Result<String, String> {
    let counts = model.input_counts();
    let missing: Vec<u64> = model.acked.iter().filter(|id| !counts.contains_key(id)).copied().collect();
    if !missing.is_empty() {
        return Err(format!("acknowledged orders missing from the input: {missing:?}"));
    }
    let twice: Vec<u64> = counts.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    let mut resent = Vec::new();
    for id in &twice {
        let copies: Vec<String> = model
            .input
            .iter()
            .filter(|(_, _, i)| i == id)
            .map(|(p, o, _)| match batch_header_at(cluster, INPUT, *p, *o) {
                Ok((h, _)) => {
                    Ok(((h.producer_id, h.producer_epoch), format!("{INPUT}-{p}@{o} in {}", describe_batch(&h))))
                }
                Err(e) => Err(e),
            })
            .collect::<Result<Vec<_>, String>>()
            .and_then(|copies| {
                let epochs: BTreeSet<_> = copies.iter().map(|(e, _)| *e).collect();
                let described: Vec<String> = copies.into_iter().map(|(_, d)| d).collect();
                if epochs.len() == described.len() {
                    Ok(described)
                } else {
                    Err(format!("order {id} is in the log twice at one producer epoch: {described:?}"))
                }
            })?;
        resent.push(format!("order {id}: {}", copies.join("; ")));
    }
    Ok(if resent.is_empty() {
        format!("{} input orders, each once", model.input.len())
    } else {
        format!(
            "{} input orders; re-sent by the producer after an epoch bump (librdkafka#4953), each copy judged as an order: {}",
            model.input.len(),
            resent.join(" | ")
        )
    })
}

#[derive(Default, Debug)]
struct Verdict {
    lost: Vec<u64>,
    duplicated: Vec<u64>,
    misrouted: Vec<u64>,
    foreign: usize,
    /// Outputs of orders whose acknowledgement the producer never saw (written, then the ack
    /// lost): allowed, once.
    unacknowledged: usize,
}

impl Verdict {
    fn clean(&self) -> bool {
        self.lost.is_empty() && self.duplicated.is_empty() && self.misrouted.is_empty() && self.foreign == 0
    }
}

fn judge(
    model: &Model,
    outputs: &[(String, Option<Vec<u8>>, Vec<u8>)],
    route: impl Fn(u64) -> &'static str,
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for (topic, key, value) in outputs {
        let id = serde_json::from_slice::<Value>(value).ok().and_then(|v| v["id"].as_u64());
        let Some(id) = id.filter(|id| *id < model.sent) else {
            verdict.foreign += 1;
            continue;
        };
        *seen.entry(id).or_default() += 1;
        if topic != route(id) || key.as_deref() != Some(id.to_string().as_bytes()) {
            verdict.misrouted.push(id);
        }
        if !model.acked.contains(&id) {
            verdict.unacknowledged += 1;
        }
    }
    // Each input record's outputs once: as many outputs of an id as the input holds it.
    let input = model.input_counts();
    let outputs_of = |id: &u64| seen.get(id).copied().unwrap_or(0);
    verdict.duplicated =
        seen.iter().filter(|(id, n)| **n > input.get(id).copied().unwrap_or(1)).map(|(id, _)| *id).collect();
    verdict.lost = input.iter().filter(|(id, n)| outputs_of(id) < **n).map(|(id, _)| *id).collect();
    verdict
}

/// One crash run: `guest` deployed exactly-once as transform `name` from `orders` to
/// `outputs` with `parameters`, orders flowing while `rounds` seeded faults hit the cluster,
/// then the outputs judged against `route`.
/// How a crash run's outputs are judged against the model: a summary when clean, else what
/// is wrong.
type Judge = fn(&Model, &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Result<String, String>;

fn crash_run(
    name: &str,
    guest: &str,
    parameters: Value,
    outputs: &[&'static str],
    key_by: KeyBy,
    judge: Judge,
    rounds: usize,
) {
    let mut rng = FaultRng::from_env();
    let mut cluster = Cluster::start(3, &["--leader-imbalance-check-interval-seconds", "1"]);
    let bootstrap = cluster.bootstrap();
    support::workload::create_topic(&bootstrap, INPUT, PARTITIONS, 3, &[]).expect("create the input");
    for topic in outputs {
        support::workload::create_topic(&bootstrap, topic, PARTITIONS, 3, &[]).expect("create an output");
    }
    let mut config = json!({
        "input_topic": INPUT,
        "output_topics": outputs,
        "start": "earliest",
        "parameters": parameters,
        "batch_records_max": 20,
    });
    config["module_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(support::guest_component(guest)));
    let deployed = HttpApi::new(cluster.node(1)).send_json("PUT", &format!("/v1/transforms/{name}"), None, &config);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let orders = Orders::start(&bootstrap, key_by);
    assert!(wait_until(DEADLINE, || orders.acked() >= 100), "no orders acknowledged (seed {})", rng.seed());
    let ids: Vec<u64> = cluster.ids().collect();
    // The four kinds of round in turn from a seeded start: a run of 4 rounds has each once.
    let first = rng.below(4);
    for round in 0..rounds {
        let node = rng.pick(&ids);
        let fault = (first + round as u64) % 4;
        let before = orders.acked();
        match fault {
            0 => {
                eprintln!("round {round}: kill -9 node {node}, restart");
                cluster.kill9(node);
                std::thread::sleep(rng.millis(500, 2_000));
                cluster.restart(node);
            }
            1 => {
                eprintln!("round {round}: SIGSTOP node {node} past its lease, SIGCONT");
                cluster.sigstop(node);
                std::thread::sleep(rng.millis(1_500, 3_000));
                cluster.sigcont(node);
            }
            2 => {
                // A planned move, every node up: the worker on the old leader is still running
                // (maybe mid-transaction) when the new leader's worker starts and bumps the
                // epoch; the old one must stop or be fenced.
                let partition = rng.below(PARTITIONS as u64) as i32;
                let leader = support::workload::partition_states(&bootstrap, INPUT)
                    .and_then(|states| states.into_iter().find(|s| s.partition == partition)?.leader);
                let others: Vec<u64> = ids.iter().copied().filter(|&id| Some(id) != leader).collect();
                let to = rng.pick(&others);
                eprintln!("round {round}: move the leader of {INPUT}-{partition} from {leader:?} to node {to}");
                if let Err(e) = cluster.move_leader(INPUT, partition, to, DEADLINE) {
                    panic!("{e} (seed {})", rng.seed());
                }
            }
            _ => {
                // The leader of an input partition: its worker dies mid-transaction.
                let leader = support::workload::partition_states(&bootstrap, INPUT)
                    .and_then(|states| states.into_iter().find_map(|s| s.leader))
                    .filter(|l| ids.contains(l))
                    .unwrap_or(node);
                eprintln!("round {round}: kill -9 node {leader} (leads an input partition), restart");
                cluster.kill9(leader);
                std::thread::sleep(rng.millis(500, 2_000));
                cluster.restart(leader);
            }
        }
        // The next round only once orders flow again.
        let flowing = wait_until(DEADLINE, || orders.acked() >= before + 50);
        assert!(flowing, "orders stopped being acknowledged after round {round} (seed {})", rng.seed());
    }

    let (sent, acked, producer_log) = orders.stop();
    let group = format!("__runnel_transform_{name}");
    let mut last = Vec::new();
    let caught_up = wait_until(DEADLINE, || {
        last = progress(&bootstrap, &group);
        last.iter().all(|(position, high)| *high >= 0 && position == high)
    });
    let detail = HttpApi::new(cluster.node(1)).get(&format!("/v1/transforms/{name}")).text;
    assert!(caught_up, "the transform never committed the input's end: {last:?} (seed {}); {detail}", rng.seed());
    let read = read_outputs(&bootstrap, outputs).unwrap_or_else(|e| {
        let api = HttpApi::new(cluster.node(1));
        let topics: Vec<String> = outputs.iter().map(|t| api.get(&format!("/v1/topics/{t}")).text).collect();
        let transactions = api.get("/v1/transactions").text;
        let fetched: Vec<String> = outputs
            .iter()
            .flat_map(|t| (0..PARTITIONS).map(move |p| (*t, p)))
            .map(|(t, p)| fetch_from_start(&cluster, t, p))
            .collect();
        panic!(
            "{e} (seed {}); outputs: {topics:?}; transactions: {transactions}; read_committed fetches: {fetched:#?}",
            rng.seed()
        )
    });
    let input = read_input(&bootstrap).unwrap_or_else(|e| panic!("{e} (seed {})", rng.seed()));
    let model = Model { sent, acked, input };
    let input_verdict = check_input(&cluster, &model);
    let verdict = input_verdict.and_then(|input| judge(&model, &read).map(|verdict| format!("{verdict}; {input}")));
    let acked = &model.acked;
    let summary = format!(
        "{name}, {rounds} rounds: {sent} orders sent, {} acknowledged, {} outputs read (seed {})",
        acked.len(),
        read.len(),
        rng.seed()
    );
    match verdict {
        Ok(verdict) => eprintln!("{summary}; {verdict}"),
        Err(wrong) => {
            // Ids read more than once (outputs that carry the order's id).
            let mut seen = BTreeMap::<u64, usize>::new();
            for (_, _, value) in &read {
                if let Some(id) = serde_json::from_slice::<Value>(value).ok().and_then(|v| v["id"].as_u64()) {
                    *seen.entry(id).or_default() += 1;
                }
            }
            let ids: Vec<u64> = seen.into_iter().filter(|(_, n)| *n > 1).map(|(id, _)| id).collect();
            // What the orders' producer did about its id, epochs and sequences.
            let eos: Vec<&String> = producer_log
                .iter()
                .filter(|l| ["epoch", "pid", "seq", "drain", "bump"].iter().any(|w| l.to_lowercase().contains(w)))
                .take(300)
                .collect();
            panic!(
                "{summary}; {wrong}\n{}\nproducer (debug=eos):\n{}",
                diagnose(&cluster, name, outputs, &ids),
                eos.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n")
            )
        }
    }
}

/// Each acknowledged order once, in the topic `route` names, keyed by its id.
fn routed_once(
    route: fn(u64) -> &'static str,
) -> impl Fn(&Model, &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Result<String, String> {
    move |model, read| {
        let verdict = judge(model, read, route);
        let counts = format!(
            "lost {}, duplicated {}, misrouted {}, foreign {}, unacknowledged {}",
            verdict.lost.len(),
            verdict.duplicated.len(),
            verdict.misrouted.len(),
            verdict.foreign,
            verdict.unacknowledged
        );
        if verdict.clean() {
            Ok(counts)
        } else {
            Err(format!("{counts}: {verdict:?}"))
        }
    }
}

fn routed_big_small(model: &Model, read: &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Result<String, String> {
    routed_once(route)(model, read)
}

fn copied(model: &Model, read: &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Result<String, String> {
    routed_once(|_| "orders-copy")(model, read)
}

/// The revenue example's outputs against the model: per customer, one output per order of
/// the customer in the input, in input order (a customer's orders share a partition), each
/// with the count and sum of the orders up to it (a duplicated, lost or twice-counted order,
/// or a state restored wrong, shows as a step that differs).
fn exact_totals(model: &Model, read: &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Result<String, String> {
    let mut outputs: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for (_, _, value) in read {
        let totals: Value = serde_json::from_slice(value).map_err(|e| format!("an output is not JSON: {e}"))?;
        let (Some(customer), Some(count), Some(sum)) =
            (totals["key"].as_str(), totals["count"].as_u64(), totals["sum"].as_f64())
        else {
            return Err(format!("a foreign output: {totals}"));
        };
        outputs.entry(customer.to_string()).or_default().push((count, sum));
    }
    let mut steps = 0;
    for c in 0..CUSTOMERS {
        let customer = format!("c{c}");
        let got = outputs.remove(&customer).unwrap_or_default();
        let ids: Vec<u64> = model.input.iter().map(|(_, _, id)| *id).filter(|id| id % CUSTOMERS == c).collect();
        let mut sum = 0.0;
        for (k, (&id, &(count, got_sum))) in ids.iter().zip(&got).enumerate() {
            sum += (id * 7) as f64;
            if count != k as u64 + 1 || got_sum != sum {
                return Err(format!(
                    "{customer}: output {k} is (count {count}, sum {got_sum}), the model's ({}, {sum}); outputs {:?}",
                    k + 1,
                    &got[k.saturating_sub(3)..(k + 3).min(got.len())]
                ));
            }
        }
        if got.len() != ids.len() {
            return Err(format!("{customer}: {} outputs for {} orders", got.len(), ids.len()));
        }
        steps += got.len();
    }
    if !outputs.is_empty() {
        return Err(format!("outputs of unknown customers: {:?}", outputs.keys().collect::<Vec<_>>()));
    }
    Ok(format!("{steps} totals equal to the model's (0 lost, 0 duplicated, 0 wrong)"))
}

#[test]
fn an_exactly_once_router_through_kills_and_pauses_writes_each_order_once() {
    let parameters =
        json!({"route_field": "size", "route.big": OUTPUTS[0], "route.small": OUTPUTS[1], "key_field": "id"});
    crash_run("crash", "runnel-example-router", parameters, &OUTPUTS, KeyBy::Id, routed_big_small, fault_rounds(4));
}

#[test]
fn an_exactly_once_transform_whose_guest_traps_every_37_records_writes_each_order_once() {
    // The guest forwards records and traps at every 37th an instance processes (batches of up
    // to 20): under the retry policy each trap fails a batch whose predecessors may be in the
    // open transaction, and the batch is retried on a fresh instance; node faults on top.
    crash_run(
        "trapping",
        "runnel-guest-trap",
        json!({"every": "37"}),
        &["orders-copy"],
        KeyBy::Id,
        copied,
        fault_rounds(2),
    );
}

#[test]
fn a_stateful_exactly_once_transform_through_kills_and_pauses_keeps_exact_totals() {
    // The revenue example keeps a running count and sum per customer in its keyed state, backed
    // by its changelog topic: every kill or pause moves workers, which restore the state from
    // the changelog (from another node when its leader is elsewhere) before going on.
    crash_run(
        "totals",
        "runnel-example-revenue",
        json!({}),
        &["revenue"],
        KeyBy::Customer,
        exact_totals,
        fault_rounds(4),
    );
}
