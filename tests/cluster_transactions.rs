//! Transactions under faults (issue 12, DESIGN §4, modelled on Kafka's ducktape
//! `transactions_test`): a 3-node cluster of real `runnel` processes, a topic with replication
//! factor 3, librdkafka transactional producers committing (and every fourth time aborting)
//! transactions of 12 records over 3 partitions while the transaction coordinator or a
//! partition leader is killed with kill -9 and restarted. Then a `read_committed` read of every
//! partition, and a checker in Jepsen's vocabulary: **aborted reads** (a record of an aborted
//! transaction read), **lost committed records** (a record of a transaction whose commit was
//! acknowledged not read), **duplicates** (a record read twice), and **partial transactions** (a
//! transaction whose outcome the client could not learn read in part). All must be zero.
//!
//! Seeded: every run prints `RUNNEL_FAULT_SEED=<seed>`; replay a schedule with
//! `RUNNEL_FAULT_SEED=<seed> cargo test -p runnel-broker --test cluster_transactions`. A soak:
//! `RUNNEL_FAULT_ROUNDS=50 cargo test -p runnel-broker --test cluster_transactions -- --nocapture`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use support::cluster::{fault_rounds, Cluster, FaultRng};
use support::workload;

const TOPIC: &str = "txn-faults";
const PARTITIONS: i32 = 3;
const RECORDS_PER_TXN: usize = 12;
const DEADLINE: Duration = Duration::from_secs(60);
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
    /// The client could not learn it (a commit that failed without telling).
    Unknown,
}

#[derive(Default)]
struct History {
    txns: BTreeMap<String, (Outcome, Vec<String>)>,
}

/// Java's `String.hashCode` partitioning of Kafka, for the coordinator's partition.
fn partition_for(id: &str, partitions: u32) -> u32 {
    let mut hash: i32 = 0;
    for unit in id.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (hash & 0x7fff_ffff) as u32 % partitions
}

fn new_producer(bootstrap: &str, id: &str) -> Option<BaseProducer> {
    let producer: BaseProducer = workload::config(
        bootstrap,
        &[
            ("transactional.id", id),
            ("transaction.timeout.ms", "10000"),
            ("linger.ms", "5"),
            ("request.timeout.ms", "5000"),
            ("message.timeout.ms", "10000"),
        ],
    )
    .create()
    .map_err(|e| eprintln!("transactional producer {id}: {e}"))
    .ok()?;
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        match producer.init_transactions(TXN_TIMEOUT) {
            Ok(()) => return Some(producer),
            Err(e) => {
                eprintln!("init_transactions({id}): {e}; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    None
}

fn requires_abort(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.txn_requires_abort())
}

fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.is_fatal())
}

/// One producer's loop: transactions until `stop`, each recorded with its outcome.
fn produce(bootstrap: String, id: String, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut producer = new_producer(&bootstrap, &id);
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        let Some(p) = producer.as_ref() else {
            std::thread::sleep(Duration::from_millis(200));
            producer = new_producer(&bootstrap, &id);
            continue;
        };
        n += 1;
        let name = format!("{id}-{n}");
        let values: Vec<String> = (0..RECORDS_PER_TXN).map(|i| format!("{name}-{i}")).collect();
        if let Err(e) = p.begin_transaction() {
            eprintln!("{name}: begin: {e}");
            producer = None;
            continue;
        }
        let mut outcome = Outcome::Unknown;
        let mut sent_all = true;
        for (i, value) in values.iter().enumerate() {
            let record = BaseRecord::<(), str>::to(TOPIC).partition(i as i32 % PARTITIONS).payload(value);
            let mut record = Some(record);
            let deadline = Instant::now() + TXN_TIMEOUT;
            while let Some(r) = record.take() {
                if let Err((e, r)) = p.send(r) {
                    if Instant::now() > deadline {
                        eprintln!("{name}: send: {e}");
                        sent_all = false;
                        break;
                    }
                    p.poll(Duration::from_millis(10));
                    record = Some(r);
                }
            }
        }
        let abort = !sent_all || n % 4 == 0;
        let ended = if abort {
            let _ = p.flush(TXN_TIMEOUT);
            p.abort_transaction(TXN_TIMEOUT).map(|()| Outcome::Aborted)
        } else {
            let mut result = p.commit_transaction(TXN_TIMEOUT).map(|()| Outcome::Committed);
            // A retriable commit error: the commit is retried (librdkafka's advice).
            for _ in 0..3 {
                match &result {
                    Err(KafkaError::Transaction(t)) if t.is_retriable() => {
                        result = p.commit_transaction(TXN_TIMEOUT).map(|()| Outcome::Committed)
                    }
                    _ => break,
                }
            }
            result
        };
        match ended {
            Ok(o) => outcome = o,
            Err(e) if requires_abort(&e) => {
                eprintln!("{name}: {e}; aborting");
                if p.abort_transaction(TXN_TIMEOUT).is_ok() {
                    outcome = Outcome::Aborted;
                }
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                if is_fatal(&e) {
                    producer = None;
                }
            }
        }
        history.lock().unwrap().txns.insert(name, (outcome, values));
    }
}

/// Every value of every partition, read_committed, up to each partition's end.
fn read_committed(bootstrap: &str) -> Result<Vec<String>, String> {
    let consumer: BaseConsumer = workload::config(
        bootstrap,
        &[("group.id", "txn-checker"), ("enable.auto.commit", "false"), ("isolation.level", "read_committed")],
    )
    .create()
    .map_err(|e| e.to_string())?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(TOPIC, p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| e.to_string())?;
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (_, high) = consumer.fetch_watermarks(TOPIC, p, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        ends.insert(p, high);
    }
    let mut values = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let position = consumer.position().map_err(|e| e.to_string())?;
        let done = ends.iter().all(|(p, end)| {
            position.find_partition(TOPIC, *p).is_some_and(|e| match e.offset() {
                Offset::Offset(o) => o >= *end,
                _ => *end == 0,
            })
        });
        if done {
            return Ok(values);
        }
        if Instant::now() > deadline {
            return Err(format!("read_committed did not reach the ends {ends:?} within {DEADLINE:?}: at {position:?}"));
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
}

/// The checker's counts.
#[derive(Debug, Default)]
struct Report {
    committed: usize,
    aborted: usize,
    unknown: usize,
    aborted_reads: Vec<String>,
    lost: Vec<String>,
    duplicates: Vec<String>,
    partial: Vec<String>,
}

impl Report {
    fn clean(&self) -> bool {
        self.aborted_reads.is_empty() && self.lost.is_empty() && self.duplicates.is_empty() && self.partial.is_empty()
    }
}

fn check(history: &History, read: &[String]) -> Report {
    let mut report = Report::default();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in read {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    report.duplicates = counts.iter().filter(|(_, c)| **c > 1).map(|(v, _)| v.to_string()).collect();
    for (name, (outcome, values)) in &history.txns {
        let seen = values.iter().filter(|v| counts.contains_key(v.as_str())).count();
        match outcome {
            Outcome::Committed => {
                report.committed += 1;
                report.lost.extend(values.iter().filter(|v| !counts.contains_key(v.as_str())).cloned());
            }
            Outcome::Aborted => {
                report.aborted += 1;
                report.aborted_reads.extend(values.iter().filter(|v| counts.contains_key(v.as_str())).cloned());
            }
            Outcome::Unknown => {
                report.unknown += 1;
                if seen != 0 && seen != values.len() {
                    report.partial.push(format!("{name}: {seen} of {}", values.len()));
                }
            }
        }
    }
    let written: BTreeSet<&str> = history.txns.values().flat_map(|(_, v)| v.iter().map(String::as_str)).collect();
    report
        .aborted_reads
        .extend(read.iter().filter(|v| !written.contains(v.as_str())).map(|v| format!("unexpected {v}")));
    report
}

#[test]
fn kill_9_of_coordinators_and_leaders_mid_transaction_loses_no_commit_and_exposes_no_abort() {
    // Proves, over seeded rounds, that kill -9 of the transaction coordinator (between adds and
    // the end, or while markers are in flight) or of a partition leader leaves 0 aborted reads,
    // 0 duplicates, 0 lost committed records and every transaction all or nothing.
    let mut rng = FaultRng::from_env();
    let mut cluster = Cluster::start(3, &[]);
    let bootstrap = cluster.bootstrap();
    assert!(support::wait_until(DEADLINE, || workload::broker_count(&bootstrap) == Some(3)), "three brokers");
    workload::create_topic(&bootstrap, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]).expect("topic");
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let ids = ["txn-faults-a", "txn-faults-b"];
    let producers: Vec<_> = ids
        .iter()
        .map(|id| {
            let (b, id, stop, history) = (bootstrap.clone(), id.to_string(), stop.clone(), history.clone());
            std::thread::spawn(move || produce(b, id, stop, history))
        })
        .collect();
    let committed_count =
        |h: &Arc<Mutex<History>>| h.lock().unwrap().txns.values().filter(|(o, _)| *o == Outcome::Committed).count();
    assert!(support::wait_until(DEADLINE, || committed_count(&history) >= 3), "transactions commit before faults");
    for round in 0..fault_rounds(2) {
        std::thread::sleep(rng.millis(300, 1500));
        let victim = if rng.below(2) == 0 {
            // The coordinator of one of the producers' transactional ids.
            let id = rng.pick(&ids);
            let partition = partition_for(id, 50) as usize;
            let states = workload::partition_states(&bootstrap, "__transaction_state").unwrap_or_default();
            states.get(partition).and_then(|s| s.leader).map(|l| (l, format!("coordinator of {id}")))
        } else {
            let partition = rng.below(PARTITIONS as u64) as usize;
            let states = workload::partition_states(&bootstrap, TOPIC).unwrap_or_default();
            states.get(partition).and_then(|s| s.leader).map(|l| (l, format!("leader of {TOPIC}-{partition}")))
        };
        let Some((node, what)) = victim else { continue };
        eprintln!("round {round}: kill -9 node {node}, the {what}");
        cluster.kill9(node);
        std::thread::sleep(rng.millis(500, 3000));
        cluster.restart(node);
        let before = committed_count(&history);
        let resumed = support::wait_until(DEADLINE, || committed_count(&history) > before);
        assert!(resumed, "transactions commit again after round {round} (seed {})", rng.seed());
    }
    stop.store(true, Ordering::Release);
    for p in producers {
        p.join().expect("producer thread");
    }
    // Any transaction still open times out (10 s) before the read reaches every end.
    let read = support::wait_until(DEADLINE, || read_committed(&bootstrap).is_ok());
    assert!(read, "the final read_committed read completes (seed {})", rng.seed());
    let values = read_committed(&bootstrap).expect("final read");
    let history = history.lock().unwrap();
    let report = check(&history, &values);
    eprintln!(
        "transactions: {} committed, {} aborted, {} unknown; {} records read",
        report.committed,
        report.aborted,
        report.unknown,
        values.len()
    );
    assert!(report.committed > 0, "some transactions committed");
    assert!(
        report.clean(),
        "aborted reads {:?}, lost {:?}, duplicates {:?}, partial {:?} (seed {}; replay with RUNNEL_FAULT_SEED={})",
        report.aborted_reads,
        report.lost,
        report.duplicates,
        report.partial,
        rng.seed(),
        rng.seed()
    );
}

#[test]
fn the_checker_counts_aborted_reads_lost_commits_duplicates_and_partial_transactions() {
    // Proves the checker itself on synthetic histories (no broker).
    let mut history = History::default();
    let values = |name: &str| (0..3).map(|i| format!("{name}-{i}")).collect::<Vec<_>>();
    history.txns.insert("c".into(), (Outcome::Committed, values("c")));
    history.txns.insert("a".into(), (Outcome::Aborted, values("a")));
    history.txns.insert("u".into(), (Outcome::Unknown, values("u")));
    let mut read: Vec<String> = values("c");
    assert!(check(&history, &read).clean());
    read.extend(values("u"));
    assert!(check(&history, &read).clean(), "an unknown transaction read whole is fine");
    let report = check(&history, &[values("c"), vec!["u-0".into(), "a-1".into(), "c-0".into()]].concat());
    assert_eq!(report.aborted_reads, vec!["a-1".to_string()]);
    assert_eq!(report.duplicates, vec!["c-0".to_string()]);
    assert_eq!(report.partial.len(), 1);
    let report = check(&history, &["c-0".to_string()]);
    assert_eq!(report.lost, vec!["c-1".to_string(), "c-2".to_string()]);
}
