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
//! The same rounds and checker run with Kafka 4.4's Java client too (`tests/java/TxnDriver.java`,
//! compiled with javac against the jars of `scripts/kafka-jars.sh`): it speaks transaction
//! version 2 (KIP-890), which librdkafka does not, so partitions are added by produce requests
//! and every end bumps the epoch while coordinators and leaders die.
//!
//! A further test aims its faults at one phase of a transaction at a time (ducktape's
//! `transactions_test` kills at random; these rounds make each phase happen): the coordinator
//! killed while it holds PrepareCommit with markers unwritten (and the partition's leader
//! SIGSTOPped with it), killed between AddPartitionsToTxn and EndTxn, and a producer that dies
//! with its transaction open; `GET /v1/transactions/{id}` confirms each phase was reached.
//!
//! Seeded: every run prints `RUNNEL_FAULT_SEED=<seed>`; replay a schedule with
//! `RUNNEL_FAULT_SEED=<seed> cargo test -p runnel-broker --test cluster_transactions`. A soak:
//! `RUNNEL_FAULT_ROUNDS=50 cargo test -p runnel-broker --test cluster_transactions -- --nocapture`.

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
    new_producer_with_timeout(bootstrap, id, Duration::from_secs(10))
}

/// A transactional producer whose transactions (and messages) time out after `timeout`.
fn new_producer_with_timeout(bootstrap: &str, id: &str, timeout: Duration) -> Option<BaseProducer> {
    let timeout_ms = timeout.as_millis().to_string();
    let producer: BaseProducer = workload::config(
        bootstrap,
        &[
            ("transactional.id", id),
            ("transaction.timeout.ms", &timeout_ms),
            ("linger.ms", "5"),
            ("request.timeout.ms", "5000"),
            ("message.timeout.ms", &timeout_ms),
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

/// Every value of every partition of `topic`, read_committed, up to each partition's end (so
/// each partition's last stable offset has reached its high watermark).
fn read_committed(bootstrap: &str, topic: &str, partitions: i32) -> Result<Vec<String>, String> {
    let consumer: BaseConsumer = workload::config(
        bootstrap,
        &[("group.id", "txn-checker"), ("enable.auto.commit", "false"), ("isolation.level", "read_committed")],
    )
    .create()
    .map_err(|e| e.to_string())?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| e.to_string())?;
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        ends.insert(p, high);
    }
    let mut values = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let position = consumer.position().map_err(|e| e.to_string())?;
        let done = ends.iter().all(|(p, end)| {
            position.find_partition(topic, *p).is_some_and(|e| match e.offset() {
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

/// How many transactions of `history` the client saw commit.
fn committed(history: &Mutex<History>) -> usize {
    history.lock().unwrap().txns.values().filter(|(o, _)| *o == Outcome::Committed).count()
}

/// Seeded rounds of kill -9: the coordinator of one of `ids` or a leader of a partition of
/// [`TOPIC`], a restart after a pause, and a wait until the producers commit again.
fn kill_rounds(cluster: &mut Cluster, rng: &mut FaultRng, ids: &[&str], history: &Mutex<History>, rounds: usize) {
    let bootstrap = cluster.bootstrap();
    for round in 0..rounds {
        std::thread::sleep(rng.millis(300, 1500));
        let (topic, partition, what) = if rng.below(2) == 0 {
            let id = rng.pick(ids);
            ("__transaction_state", partition_for(id, 50) as usize, format!("coordinator of {id}"))
        } else {
            let partition = rng.below(PARTITIONS as u64) as usize;
            (TOPIC, partition, format!("leader of {TOPIC}-{partition}"))
        };
        // A round without a victim would pass without any fault: the leader is waited for (an
        // election after the last round's restart may still be on).
        let mut victim = None;
        let found = support::wait_until(DEADLINE, || {
            let states = workload::partition_states(&bootstrap, topic).unwrap_or_default();
            victim = states.get(partition).and_then(|s| s.leader);
            victim.is_some()
        });
        assert!(found, "round {round}: no leader of {topic}-{partition} to kill (seed {})", rng.seed());
        let node = victim.expect("found");
        eprintln!("round {round}: kill -9 node {node}, the {what}");
        cluster.kill9(node);
        std::thread::sleep(rng.millis(500, 3000));
        cluster.restart(node);
        let before = committed(history);
        let resumed = support::wait_until(DEADLINE, || committed(history) > before);
        assert!(resumed, "transactions commit again after round {round} (seed {})", rng.seed());
    }
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
    assert!(support::wait_until(DEADLINE, || committed(&history) >= 3), "transactions commit before faults");
    kill_rounds(&mut cluster, &mut rng, &ids, &history, fault_rounds(2));
    stop.store(true, Ordering::Release);
    for p in producers {
        p.join().expect("producer thread");
    }
    let report = read_and_check(&bootstrap, &history.lock().unwrap(), &rng);
    assert!(report.committed > 0, "some transactions committed");
}

/// The final read_committed read of every partition of [`TOPIC`] (any transaction still open
/// times out, 10 s, before the read reaches every end) and the checker over it; panics on any
/// anomaly, naming the seed.
fn read_and_check(bootstrap: &str, history: &History, rng: &FaultRng) -> Report {
    let read = support::wait_until(DEADLINE, || read_committed(bootstrap, TOPIC, PARTITIONS).is_ok());
    assert!(read, "the final read_committed read completes (seed {})", rng.seed());
    let values = read_committed(bootstrap, TOPIC, PARTITIONS).expect("final read");
    let report = check(history, &values);
    eprintln!(
        "transactions: {} committed, {} aborted, {} unknown; {} records read",
        report.committed,
        report.aborted,
        report.unknown,
        values.len()
    );
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
    report
}

/// A Java transactional producer (`tests/java/TxnDriver.java`, Kafka 4.4's client on
/// transaction version 2) whose reported outcomes a thread records into a [`History`].
struct JavaDriver {
    child: Child,
    /// Joins once the driver's stdout ends: whether it printed DONE.
    reader: std::thread::JoinHandle<bool>,
}

impl JavaDriver {
    /// Kafka's jars and a temp dir with the driver compiled into `classes/`; `None` (after
    /// printing SKIP) where the jars were never fetched.
    fn compiled() -> Option<(kafka_tools::KafkaTools, tempfile::TempDir)> {
        let tools = match kafka_tools::kafka_tools() {
            Ok(tools) => tools,
            Err(reason) => {
                kafka_tools::skip(reason);
                return None;
            }
        };
        let work = tempfile::tempdir().expect("temp dir");
        tools.javac("TxnDriver.java", &work.path().join("classes"));
        Some((tools, work))
    }

    /// Starts a driver for transactional id `id` that runs transactions until stopped, or with
    /// `steps` one per [`JavaDriver::step`]; its stderr (the client's errors) goes to `log`.
    fn start(
        lib: &Path,
        classes: &Path,
        bootstrap: &str,
        id: &str,
        steps: bool,
        log: &Path,
        history: Arc<Mutex<History>>,
    ) -> Self {
        let mut child = Command::new("java")
            .arg("-Xmx128m")
            .arg("-cp")
            .arg(format!("{}/*:{}", lib.display(), classes.display()))
            .arg("TxnDriver")
            .args([bootstrap, id, TOPIC, &PARTITIONS.to_string(), &RECORDS_PER_TXN.to_string()])
            .args(steps.then_some("steps"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("driver log"))
            .spawn()
            .expect("java runs");
        let stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let outcome = match line.split_once(' ') {
                    Some(("COMMITTED", name)) => Some((Outcome::Committed, name)),
                    Some(("ABORTED", name)) => Some((Outcome::Aborted, name)),
                    Some(("UNKNOWN", name)) => Some((Outcome::Unknown, name)),
                    _ if line == "DONE" => return true,
                    _ => None,
                };
                if let Some((outcome, name)) = outcome {
                    let values = (0..RECORDS_PER_TXN).map(|i| format!("{name}-{i}")).collect();
                    history.lock().unwrap().txns.insert(name.to_string(), (outcome, values));
                }
            }
            false
        });
        JavaDriver { child, reader }
    }

    /// Has a driver started with `steps` run one more transaction, committed or aborted.
    fn step(&mut self, commit: bool) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("the driver's stdin");
        writeln!(stdin, "{}", if commit { "commit" } else { "abort" }).expect("write to the driver");
        stdin.flush().expect("flush to the driver");
    }

    /// Closes the driver's stdin (it ends the transaction under way and exits) and waits for it;
    /// whether it finished cleanly (else it is killed).
    fn stop(mut self) -> bool {
        drop(self.child.stdin.take());
        let exited = support::wait_until(DEADLINE, || self.child.try_wait().is_ok_and(|s| s.is_some()));
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let done = self.reader.join().unwrap_or(false);
        exited && done
    }
}

#[test]
fn java_transaction_version_2_producers_through_kill_9_of_coordinators_and_leaders_lose_no_commit() {
    // Proves KIP-890 (transaction version 2, what Kafka 4's Java client speaks) under the same
    // kill -9 rounds and checker as librdkafka's transaction version 1 above: partitions added by
    // produce requests to leaders that come and go, an epoch bump on every end that survives a
    // new coordinator, and still 0 aborted reads, 0 duplicates, 0 lost committed records and
    // every transaction all or nothing. Where the Kafka jars were never fetched it prints SKIP.
    let Some((tools, work)) = JavaDriver::compiled() else { return };
    let classes = work.path().join("classes");
    let mut rng = FaultRng::from_env();
    let mut cluster = Cluster::start(3, &[]);
    let bootstrap = cluster.bootstrap();
    assert!(support::wait_until(DEADLINE, || workload::broker_count(&bootstrap) == Some(3)), "three brokers");
    workload::create_topic(&bootstrap, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]).expect("topic");
    let history = Arc::new(Mutex::new(History::default()));
    let ids = ["java-txn-a", "java-txn-b"];
    let logs: Vec<_> = ids.iter().map(|id| work.path().join(format!("{id}.log"))).collect();
    let drivers: Vec<_> = ids
        .iter()
        .zip(&logs)
        .map(|(id, log)| JavaDriver::start(tools.lib(), &classes, &bootstrap, id, false, log, history.clone()))
        .collect();
    let before_faults = support::wait_until(DEADLINE, || committed(&history) >= 3);
    let tail = || logs.iter().map(|l| std::fs::read_to_string(l).unwrap_or_default()).collect::<Vec<_>>().join("\n");
    assert!(before_faults, "Java transactions commit before faults; the drivers said:\n{}", tail());
    kill_rounds(&mut cluster, &mut rng, &ids, &history, fault_rounds(2));
    for driver in drivers {
        assert!(driver.stop(), "a driver ends its last transaction and exits; the drivers said:\n{}", tail());
    }
    eprintln!("the drivers said:\n{}", tail());
    let history = history.lock().unwrap();
    let report = read_and_check(&bootstrap, &history, &rng);
    assert!(report.committed > 0, "some transactions committed");
    // Transaction version 2, not 1: every commit is an EndTxn that bumped the id's epoch (and
    // each new producer's InitProducerId one more), so the epoch is at least the commit count.
    for id in ids {
        let commits =
            history.txns.iter().filter(|(name, (o, _))| name.starts_with(id) && *o == Outcome::Committed).count();
        let txn = support::HttpApi::new(cluster.node(1)).get(&format!("/v1/transactions/{id}")).json;
        let epoch = txn["producer_epoch"].as_i64().unwrap_or(-1);
        assert!(epoch >= commits as i64, "{id}: epoch {epoch} after {commits} commits: {txn}");
    }
}

/// The outcome `history` has for transaction `name`, if the driver reported it.
fn outcome(history: &Mutex<History>, name: &str) -> Option<Outcome> {
    history.lock().unwrap().txns.get(name).map(|(o, _)| *o)
}

#[test]
fn java_transaction_version_2_end_waits_for_the_previous_ends_markers_instead_of_being_fenced() {
    // Proves KAFKA-18464's rule: under transaction version 2 a client's next EndTxn (at the
    // epoch the previous end bumped to) can reach the coordinator while the previous end's
    // markers are still in flight, e.g. an abort whose records never reached a partition. It
    // must be answered CONCURRENT_TRANSACTIONS, retried, and succeed once the markers pass (it
    // was PRODUCER_FENCED, fatal to the producer). The markers are held by black-holing the
    // coordinator's links to the other nodes, so the race happens every run.
    let Some((tools, work)) = JavaDriver::compiled() else { return };
    let classes = work.path().join("classes");
    let rng = FaultRng::from_env();
    let cluster = Cluster::start(3, &[]);
    let bootstrap = cluster.bootstrap();
    assert!(support::wait_until(DEADLINE, || workload::broker_count(&bootstrap) == Some(3)), "three brokers");
    // Replication factor 1: each node leads a partition, so markers to two of them cross links.
    workload::create_topic(&bootstrap, TOPIC, PARTITIONS, 1, &[]).expect("topic");
    let history = Arc::new(Mutex::new(History::default()));
    let id = "java-steps";
    let log = work.path().join("driver.log");
    let mut driver = JavaDriver::start(tools.lib(), &classes, &bootstrap, id, true, &log, history.clone());
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let reported = |name: &str| support::wait_until(DEADLINE, || outcome(&history, name).is_some());
    driver.step(true);
    assert!(reported("java-steps-1"), "the first transaction ends; the driver said:\n{}", said());
    assert_eq!(outcome(&history, "java-steps-1"), Some(Outcome::Committed), "{}", said());
    let coordinator = workload::partition_states(&bootstrap, "__transaction_state")
        .and_then(|states| states.get(partition_for(id, 50) as usize).and_then(|s| s.leader))
        .expect("the id's coordinator");
    let other = (1..=3).find(|n| *n != coordinator).expect("another node");
    for n in (1..=3).filter(|n| *n != coordinator) {
        cluster.black_hole_data_link(coordinator, n);
    }
    driver.step(true);
    assert!(reported("java-steps-2"), "the commit is answered once PrepareCommit is written: {}", said());
    assert_eq!(outcome(&history, "java-steps-2"), Some(Outcome::Committed), "{}", said());
    assert!(wait_for_state(&cluster, other, id, "PrepareCommit"), "the markers are held");
    let end_txns = || {
        let text = support::HttpApi::new(cluster.node(coordinator)).get("/metrics").text;
        text.lines()
            .find_map(|l| l.strip_prefix(r#"kafka_network_requestmetrics_requests_total{request="EndTxn"} "#))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = end_txns();
    driver.step(false);
    let retried = support::wait_until(DEADLINE, || end_txns() >= before + 2);
    assert!(retried, "the abort's EndTxn is answered retriable and retried; the driver said:\n{}", said());
    assert_eq!(outcome(&history, "java-steps-3"), None, "the abort waits for the markers: {}", said());
    cluster.heal();
    assert!(reported("java-steps-3"), "the abort ends once the markers pass: {}", said());
    assert_eq!(outcome(&history, "java-steps-3"), Some(Outcome::Aborted), "not fenced; the driver said:\n{}", said());
    driver.step(true);
    assert!(reported("java-steps-4"), "the next transaction ends: {}", said());
    assert_eq!(outcome(&history, "java-steps-4"), Some(Outcome::Committed), "{}", said());
    assert!(driver.stop(), "the driver exits: {}", said());
    let report = read_and_check(&bootstrap, &history.lock().unwrap(), &rng);
    assert_eq!((report.committed, report.aborted, report.unknown), (3, 1, 0));
}

/// The topic of the phase-targeted rounds.
const PHASE_TOPIC: &str = "txn-phases";

/// Where in a transaction's life a phase round strikes.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// EndTxn(commit) answered and PrepareCommit written, the markers held back from the
    /// partition's leader (its link from the coordinator black-holed); then kill -9 of the
    /// coordinator, and in half the rounds SIGSTOP of the leader too, so a new coordinator writes
    /// the markers to a new leader.
    PrepareCommit,
    /// Records written and the partition added (Ongoing); kill -9 of the coordinator, a restart,
    /// then the producer commits or aborts through the new coordinator.
    Ongoing,
    /// The producer dies with its transaction open; the coordinator (in half the rounds a new
    /// one, after kill -9 of the first) aborts it when `transaction.timeout.ms` passes.
    Abandoned,
}

/// A transactional id whose coordinator does not lead partition `partition` of the phase topic,
/// so the two can be faulted apart: (id, coordinator, leader, the third node).
fn roles(bootstrap: &str, round: usize, partition: i32) -> Option<(String, u64, u64, u64)> {
    let txn_leaders = workload::partition_states(bootstrap, "__transaction_state")?;
    let leader = workload::partition_states(bootstrap, PHASE_TOPIC)?.get(partition as usize)?.leader?;
    (0..1000).find_map(|k| {
        let id = format!("txn-phase-{round}-{k}");
        let coordinator = txn_leaders.get(partition_for(&id, 50) as usize)?.leader?;
        let third = (1..=3).find(|n| *n != coordinator && *n != leader)?;
        (coordinator != leader).then_some((id, coordinator, leader, third))
    })
}

/// The state of `id` as node `node`'s `GET /v1/transactions/{id}` reports it (the node asks the
/// coordinator), with the partitions in it; `None` while it cannot answer.
fn txn_state(cluster: &Cluster, node: u64, id: &str) -> Option<(String, usize)> {
    let answer = support::HttpApi::new(cluster.node(node)).get(&format!("/v1/transactions/{id}"));
    if answer.status != 200 {
        return None;
    }
    let state = answer.json["state"].as_str()?.to_string();
    let partitions = answer.json["partitions"]
        .as_array()
        .map_or(0, |topics| topics.iter().map(|t| t["partitions"].as_array().map_or(0, Vec::len)).sum());
    Some((state, partitions))
}

fn wait_for_state(cluster: &Cluster, node: u64, id: &str, state: &str) -> bool {
    support::wait_until(DEADLINE, || txn_state(cluster, node, id).is_some_and(|(s, _)| s == state))
}

/// Every broker up and every partition of the phase topic led with its full ISR: the state a
/// phase round starts from.
fn settled(bootstrap: &str) -> bool {
    support::wait_until(DEADLINE, || {
        workload::broker_count(bootstrap) == Some(3)
            && workload::partition_states(bootstrap, PHASE_TOPIC)
                .is_some_and(|states| states.iter().all(|s| s.leader.is_some() && s.isr.len() == 3))
    })
}

/// Begins a transaction and writes `values` to `partition`, waiting for every delivery.
fn write_open(producer: &BaseProducer, partition: i32, values: &[String]) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for value in values {
        let mut record = Some(BaseRecord::<(), str>::to(PHASE_TOPIC).partition(partition).payload(value.as_str()));
        while let Some(r) = record.take() {
            if let Err((e, r)) = producer.send(r) {
                if !matches!(e, KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)) {
                    return Err(e);
                }
                producer.poll(Duration::from_millis(10));
                record = Some(r);
            }
        }
    }
    producer.flush(TXN_TIMEOUT)
}

/// Commits (retrying a retriable error, as librdkafka advises) or aborts; the outcome the
/// client learnt.
fn end(producer: &BaseProducer, commit: bool) -> Outcome {
    if !commit {
        return match producer.abort_transaction(TXN_TIMEOUT) {
            Ok(()) => Outcome::Aborted,
            Err(e) => {
                eprintln!("abort: {e}");
                Outcome::Unknown
            }
        };
    }
    let mut result = producer.commit_transaction(TXN_TIMEOUT);
    for _ in 0..5 {
        match &result {
            Err(KafkaError::Transaction(t)) if t.is_retriable() => result = producer.commit_transaction(TXN_TIMEOUT),
            _ => break,
        }
    }
    match result {
        Ok(()) => Outcome::Committed,
        Err(e) => {
            eprintln!("commit: {e}");
            if requires_abort(&e) && producer.abort_transaction(TXN_TIMEOUT).is_ok() {
                Outcome::Aborted
            } else {
                Outcome::Unknown
            }
        }
    }
}

#[test]
fn faults_at_each_phase_of_a_transaction_resolve_it_all_or_nothing() {
    // Proves, per phase (see `Phase`), that a transaction caught by kill -9 of its coordinator
    // (and SIGSTOP of a leader, or the death of its producer) ends as the client was told or,
    // untold, as the coordinator decides: committed records all visible to read_committed,
    // aborted ones never, the LSO back at the high watermark, the id usable again.
    let mut rng = FaultRng::from_env();
    // Leadership returns to the preferred replicas after each round's faults, so a round finds a
    // partition led away from some transactional id's coordinator.
    let mut cluster = Cluster::start(3, &["--leader-imbalance-check-interval-seconds", "1"]);
    let bootstrap = cluster.bootstrap();
    assert!(support::wait_until(DEADLINE, || workload::broker_count(&bootstrap) == Some(3)), "three brokers");
    workload::create_topic(&bootstrap, PHASE_TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]).expect("topic");
    // The first transactional producer creates __transaction_state.
    let warm = new_producer(&bootstrap, "txn-phase-warm-up").expect("a transactional producer initialises");
    drop(warm);
    let mut history = History::default();
    let phases = [Phase::PrepareCommit, Phase::Ongoing, Phase::Abandoned];
    for round in 0..fault_rounds(phases.len()) {
        let phase = phases[round % phases.len()];
        assert!(settled(&bootstrap), "round {round}: the cluster settles (seed {})", rng.seed());
        let partition = rng.below(PARTITIONS as u64) as i32;
        let mut found = None;
        support::wait_until(DEADLINE, || {
            found = roles(&bootstrap, round, partition);
            found.is_some()
        });
        let (id, coordinator, leader, third) = found.expect("an id coordinated away from the partition's leader");
        let name = format!("{id}-t");
        let values: Vec<String> = (0..RECORDS_PER_TXN).map(|i| format!("{name}-{i}")).collect();
        let timeout = match phase {
            Phase::Abandoned => Duration::from_secs(5),
            _ => Duration::from_secs(20),
        };
        let mut producer = Some(new_producer_with_timeout(&bootstrap, &id, timeout).expect("producer"));
        let open = producer.as_ref().expect("producer");
        write_open(open, partition, &values).expect("the transaction's records are written");
        let faulty = rng.below(2) == 1;
        eprintln!(
            "round {round}: {phase:?} (extra fault: {faulty}), {id} coordinated by node {coordinator}, \
             {PHASE_TOPIC}-{partition} led by node {leader}"
        );
        match phase {
            Phase::PrepareCommit => {
                cluster.black_hole_data_link(coordinator, leader);
                let outcome = end(open, true);
                assert_eq!(
                    outcome,
                    Outcome::Committed,
                    "round {round}: EndTxn is answered once PrepareCommit is written"
                );
                history.txns.insert(name.clone(), (outcome, values.clone()));
                assert!(
                    wait_for_state(&cluster, third, &id, "PrepareCommit"),
                    "round {round}: the coordinator holds PrepareCommit while its markers cannot pass"
                );
                if faulty {
                    cluster.sigstop(leader);
                }
                cluster.kill9(coordinator);
                cluster.heal();
                cluster.restart(coordinator);
                assert!(
                    wait_for_state(&cluster, third, &id, "CompleteCommit"),
                    "round {round}: a new coordinator completes the commit (seed {})",
                    rng.seed()
                );
                if faulty {
                    cluster.sigcont(leader);
                }
            }
            Phase::Ongoing => {
                assert!(
                    support::wait_until(DEADLINE, || txn_state(&cluster, third, &id)
                        .is_some_and(|(s, partitions)| s == "Ongoing" && partitions == 1)),
                    "round {round}: the coordinator has the transaction open with its partition"
                );
                cluster.kill9(coordinator);
                if faulty {
                    std::thread::sleep(rng.millis(500, 3000));
                }
                cluster.restart(coordinator);
                let commit = rng.below(2) == 0;
                let outcome = end(open, commit);
                let intended = if commit { Outcome::Committed } else { Outcome::Aborted };
                assert_eq!(
                    outcome,
                    intended,
                    "round {round}: the new coordinator ends it as asked (seed {})",
                    rng.seed()
                );
                history.txns.insert(name.clone(), (outcome, values.clone()));
            }
            Phase::Abandoned => {
                assert!(wait_for_state(&cluster, third, &id, "Ongoing"), "round {round}: the transaction is open");
                drop(producer.take());
                let (state, _) = txn_state(&cluster, third, &id).expect("state");
                assert_eq!(state, "Ongoing", "round {round}: closing the client does not end its transaction");
                if faulty {
                    cluster.kill9(coordinator);
                    cluster.restart(coordinator);
                }
                assert!(
                    wait_for_state(&cluster, third, &id, "CompleteAbort"),
                    "round {round}: the coordinator aborts the abandoned transaction past its timeout (seed {})",
                    rng.seed()
                );
                history.txns.insert(name.clone(), (Outcome::Aborted, values.clone()));
            }
        }
        // The id goes on: its next transaction commits (from the same producer, or a new one
        // where it died). A node just woken from SIGSTOP still acts on its old view for a moment
        // (a leader of a partition it lost, with a log missing the marker another leader wrote):
        // a batch racing that view can be refused as outside any transaction, an abortable error,
        // as Kafka's leader refuses it. The client aborts and tries again, as librdkafka's
        // transaction loop does; the aborted attempt's records are checked never to be read.
        let producer = producer.unwrap_or_else(|| new_producer(&bootstrap, &id).expect("the id initialises again"));
        let mut committed = false;
        for attempt in 0..3 {
            let next = format!("{id}-next{attempt}");
            let again: Vec<String> = (0..RECORDS_PER_TXN).map(|i| format!("{next}-{i}")).collect();
            write_open(&producer, partition, &again).expect("records of the next transaction");
            let outcome = end(&producer, true);
            assert_ne!(
                outcome,
                Outcome::Unknown,
                "round {round}: the id's next transaction ends as the client knows (seed {})",
                rng.seed()
            );
            history.txns.insert(next, (outcome, again));
            if outcome == Outcome::Committed {
                committed = true;
                break;
            }
        }
        assert!(committed, "round {round}: the id's next transaction commits within 3 attempts (seed {})", rng.seed());
    }
    let read = support::wait_until(DEADLINE, || read_committed(&bootstrap, PHASE_TOPIC, PARTITIONS).is_ok());
    assert!(read, "read_committed reaches every partition's high watermark (seed {})", rng.seed());
    let values = read_committed(&bootstrap, PHASE_TOPIC, PARTITIONS).expect("final read");
    let report = check(&history, &values);
    eprintln!("phases: {} committed, {} aborted; {} records read", report.committed, report.aborted, values.len());
    assert!(
        report.clean() && report.unknown == 0,
        "aborted reads {:?}, lost {:?}, duplicates {:?}, partial {:?}, unknown {} (seed {}; replay with \
         RUNNEL_FAULT_SEED={})",
        report.aborted_reads,
        report.lost,
        report.duplicates,
        report.partial,
        report.unknown,
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
