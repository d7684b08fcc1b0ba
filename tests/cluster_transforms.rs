//! Exactly-once transforms under crashes (issue 13): the router example, deployed exactly-once
//! on a three-node cluster, routes a continuous stream of JSON orders into two output topics
//! while seeded fault rounds kill -9 and restart nodes (the workers' nodes among them) and
//! pause nodes past their lease (SIGSTOP/SIGCONT), which moves the input partitions' leaders
//! and with them the workers, the transaction coordinators and the checkpoint coordinator.
//! Afterwards every output is read `read_committed` and checked against the model (each
//! acknowledged order once, in the topic its size routes it to, keyed by its id): lost,
//! duplicated, misrouted and foreign outputs are counted and must all be 0.
//!
//! `RUNNEL_FAULT_SEED` replays a run; `RUNNEL_FAULT_ROUNDS` soaks (the suite runs 3 rounds):
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
struct Acks(Arc<Mutex<BTreeSet<u64>>>);

impl ClientContext for Acks {}

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

/// An idempotent acks=all producer of orders 0, 1, 2, ... every 5 ms until stopped.
struct Orders {
    acked: Arc<Mutex<BTreeSet<u64>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Orders {
    fn start(bootstrap: &str) -> Orders {
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let producer: ThreadedProducer<Acks> =
            support::workload::producer_config(bootstrap, &[("enable.idempotence", "true")])
                .create_with_context(Acks(acked.clone()))
                .expect("producer");
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut id = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let size = if id % 3 == 0 { "big" } else { "small" };
                let value = json!({"id": id, "size": size, "amount": id * 7}).to_string();
                let key = id.to_string();
                if producer.send(BaseRecord::to(INPUT).key(&key).payload(&value)).is_ok() {
                    id += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = producer.flush(Duration::from_secs(60));
            id
        });
        Orders { acked, stop, thread }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Stops sending, waits for the outstanding deliveries; (orders sent, ids acknowledged).
    fn stop(self) -> (u64, BTreeSet<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.thread.join().expect("producer thread");
        let acked = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (sent, acked)
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
/// (topic, key, value). One topic at a time (librdkafka's end-of-partition event names only the
/// partition).
fn read_outputs(bootstrap: &str) -> Vec<(String, Option<Vec<u8>>, Vec<u8>)> {
    let mut records = Vec::new();
    for topic in OUTPUTS {
        let consumer: BaseConsumer = support::workload::config(bootstrap, &[("group.id", "crash-reader")])
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut list = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            list.add_partition_offset(topic, p, Offset::Beginning).expect("partition");
        }
        consumer.assign(&list).expect("assign");
        let mut at_end = BTreeSet::new();
        let read = wait_until(DEADLINE, || {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => records.push((
                    topic.to_string(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().unwrap_or_default().to_vec(),
                )),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    at_end.insert(p);
                }
                _ => {}
            }
            at_end.len() == PARTITIONS as usize
        });
        assert!(read, "{topic} was never read to its end ({} records read)", records.len());
    }
    records
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

fn judge(acked: &BTreeSet<u64>, sent: u64, outputs: &[(String, Option<Vec<u8>>, Vec<u8>)]) -> Verdict {
    let mut verdict = Verdict::default();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for (topic, key, value) in outputs {
        let id = serde_json::from_slice::<Value>(value).ok().and_then(|v| v["id"].as_u64());
        let Some(id) = id.filter(|id| *id < sent) else {
            verdict.foreign += 1;
            continue;
        };
        *seen.entry(id).or_default() += 1;
        if topic != route(id) || key.as_deref() != Some(id.to_string().as_bytes()) {
            verdict.misrouted.push(id);
        }
        if !acked.contains(&id) {
            verdict.unacknowledged += 1;
        }
    }
    verdict.duplicated = seen.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    verdict.lost = acked.iter().filter(|id| !seen.contains_key(id)).copied().collect();
    verdict
}

#[test]
fn an_exactly_once_router_through_kills_and_pauses_writes_each_order_once() {
    let mut rng = FaultRng::from_env();
    let rounds = fault_rounds(3);
    let mut cluster = Cluster::start(3, &["--leader-imbalance-check-interval-seconds", "1"]);
    let bootstrap = cluster.bootstrap();
    support::workload::create_topic(&bootstrap, INPUT, PARTITIONS, 3, &[]).expect("create the input");
    for topic in OUTPUTS {
        support::workload::create_topic(&bootstrap, topic, PARTITIONS, 3, &[]).expect("create an output");
    }
    let mut config = json!({
        "input_topic": INPUT,
        "output_topics": OUTPUTS,
        "start": "earliest",
        "parameters": {"route_field": "size", "route.big": OUTPUTS[0], "route.small": OUTPUTS[1], "key_field": "id"},
        "batch_records_max": 20,
    });
    config["module_base64"] =
        json!(base64::engine::general_purpose::STANDARD.encode(support::guest_component("runnel-example-router")));
    let deployed = HttpApi::new(cluster.node(1)).send_json("PUT", "/v1/transforms/crash", None, &config);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let orders = Orders::start(&bootstrap);
    assert!(wait_until(DEADLINE, || orders.acked() >= 100), "no orders acknowledged (seed {})", rng.seed());
    let ids: Vec<u64> = cluster.ids().collect();
    for round in 0..rounds {
        let node = rng.pick(&ids);
        let fault = rng.below(3);
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

    let (sent, acked) = orders.stop();
    let group = "__runnel_transform_crash";
    let mut last = Vec::new();
    let caught_up = wait_until(DEADLINE, || {
        last = progress(&bootstrap, group);
        last.iter().all(|(position, high)| *high >= 0 && position == high)
    });
    let logs = HttpApi::new(cluster.node(1)).get("/v1/transforms/crash").text;
    assert!(caught_up, "the transform never committed the input's end: {last:?} (seed {}); {logs}", rng.seed());
    let outputs = read_outputs(&bootstrap);
    let verdict = judge(&acked, sent, &outputs);
    eprintln!(
        "{rounds} rounds: {sent} orders sent, {} acknowledged, {} outputs read; lost {}, duplicated {}, misrouted {}, \
         foreign {}, unacknowledged {} (seed {})",
        acked.len(),
        outputs.len(),
        verdict.lost.len(),
        verdict.duplicated.len(),
        verdict.misrouted.len(),
        verdict.foreign,
        verdict.unacknowledged,
        rng.seed()
    );
    assert!(verdict.clean(), "{verdict:?} (seed {})", rng.seed());
}
