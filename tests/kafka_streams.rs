//! A Kafka Streams application with `processing.guarantee=exactly_once_v2` against Runnel
//! (issue 12's "done when"): `tests/java/StreamsEos.java`, compiled with javac against the
//! Kafka 4.4 jars of `scripts/kafka-jars.sh` (kafka-streams included), sums values per key
//! from `streams-in` to `streams-out`. It is killed with kill -9 half way and started again;
//! the sums a `read_committed` reader sees must never count an input twice and must end exact.
//! Where the jars were never fetched the test is skipped (scripts/test.sh counts it so) (under `scripts/test.sh`
//! they always are, and the test is required).

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use support::Runnel;

const KEYS: usize = 10;
const PER_KEY_EACH_HALF: usize = 50;
const DEADLINE: Duration = Duration::from_secs(120);

/// Starts the application and waits for its RUNNING line.
fn start(lib: &Path, classes: &Path, bootstrap: &str, state_dir: &Path) -> Child {
    let mut child = Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(format!("{}/*:{}", lib.display(), classes.display()))
        .arg("StreamsEos")
        .arg(bootstrap)
        .arg(state_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("java runs");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line == "RUNNING" => return child,
            Ok(line) if line.starts_with("STOPPED") => panic!("the Streams application stopped: {line}"),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("the Streams application did not reach RUNNING within {DEADLINE:?}");
            }
        }
    }
}

fn produce_half(node: &Runnel) {
    let producer: BaseProducer = support::client_config(node, &[("acks", "all")]).create().expect("producer");
    for i in 0..KEYS * PER_KEY_EACH_HALF {
        let key = format!("k{}", i % KEYS);
        let value = 1i64.to_be_bytes();
        loop {
            match producer.send(BaseRecord::to("streams-in").key(&key).payload(&value[..])) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Every (key, sum) the application emitted so far, read_committed, and the largest per key.
fn outputs(node: &Runnel) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
    let consumer: BaseConsumer = support::client_config(
        node,
        &[("group.id", "streams-check"), ("enable.auto.commit", "false"), ("isolation.level", "read_committed")],
    )
    .create()
    .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset("streams-out", p, Offset::Beginning).expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    let (mut last, mut max) = (BTreeMap::new(), BTreeMap::new());
    let mut idle = 0;
    while idle < 10 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = 0;
                let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
                let bytes: [u8; 8] = m.payload().unwrap_or_default().try_into().expect("a long");
                let sum = i64::from_be_bytes(bytes);
                last.insert(key.clone(), sum);
                let entry = max.entry(key).or_insert(sum);
                *entry = (*entry).max(sum);
            }
            _ => idle += 1,
        }
    }
    (last, max)
}

#[test]
fn kafka_streams_exactly_once_v2_sums_every_input_once_across_a_kill_9() {
    // Proves a Kafka Streams exactly_once_v2 application (transactions, read_committed,
    // send_offsets_to_transaction, its internal changelog and repartition topics) runs against
    // Runnel, and that after kill -9 of the application mid-way and a restart every key's sum
    // counts each input exactly once.
    let tools = match kafka_tools::kafka_tools() {
        Ok(tools) => tools,
        Err(reason) => {
            kafka_tools::skip(reason);
            return;
        }
    };
    let lib = tools.lib().to_path_buf();
    if !std::fs::read_dir(&lib)
        .expect("lib")
        .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("kafka-streams-")))
    {
        panic!("{} has no kafka-streams jar: run FORCE=1 scripts/kafka-jars.sh", lib.display());
    }
    let work = tempfile::tempdir().expect("temp dir");
    let classes = work.path().join("classes");
    tools.javac("StreamsEos.java", &classes);
    let node = Runnel::start(&[]);
    support::create_topic(&node, "streams-in", 2);
    support::create_topic(&node, "streams-out", 2);
    produce_half(&node);
    let state = work.path().join("state");
    let mut app = start(&lib, &classes, &node.bootstrap(), &state);
    let some = support::wait_until(DEADLINE, || !outputs(&node).0.is_empty());
    assert!(some, "the application emits sums");
    // The second half arrives while the application runs; it is killed while it processes it
    // (a transaction open, outputs and offsets written but not committed).
    produce_half(&node);
    // Killed while a transaction of it is open (Streams commits every 100 ms while it has
    // input), or at the latest when every output is in (then the run proves less).
    let api = support::HttpApi::new(&node);
    let expected = (2 * PER_KEY_EACH_HALF) as i64;
    support::wait_until(DEADLINE, || {
        let open = api.get("/v1/transactions?open=true").json["transactions"].as_array().is_some_and(|t| !t.is_empty());
        open || outputs(&node).0.values().filter(|v| **v == expected).count() == KEYS
    });
    app.kill().expect("kill -9 the application");
    let _ = app.wait();
    let mut app = start(&lib, &classes, &node.bootstrap(), &state);
    let mut seen = (BTreeMap::new(), BTreeMap::new());
    let done = support::wait_until(DEADLINE, || {
        seen = outputs(&node);
        seen.0.len() == KEYS && seen.0.values().all(|v| *v == expected)
    });
    let _ = app.kill();
    let _ = app.wait();
    assert!(done, "every key sums to {expected}: {:?}", seen.0);
    assert!(seen.1.values().all(|v| *v <= expected), "no input counted twice: largest sums {:?}", seen.1);
}
