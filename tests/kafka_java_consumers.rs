//! The consumer group protocol (KIP-848) with Apache Kafka's Java 4.x client, through Kafka's
//! own `VerifiableConsumer` (the tool Kafka's ducktape consumer tests drive; jars from Maven
//! Central via `scripts/kafka-jars.sh`), against a three-node `runnel` cluster: members with
//! `group.protocol=consumer` and an uploaded WASM assignor (`group.remote.assignor`) join one by
//! one under load, the group's coordinator is killed with SIGKILL, members leave one by one.
//! From the members' own events (partitions assigned and revoked, records consumed with their
//! offset ranges): no partition is ever owned by two members, every partition is owned after
//! each step, and every produced record is consumed (no gap in any partition's consumed
//! offsets). An empty classic group moves to the consumer protocol and resumes from its
//! committed offsets. Where the jars were never fetched the tests are skipped (scripts/test.sh counts them so).

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_tools::KafkaTools;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};
use support::cluster::Cluster;
use support::{wait_until, HttpApi, RawConn};

const DEADLINE: Duration = Duration::from_secs(120);
const TOPIC: &str = "java-848";
const PARTITIONS: i32 = 6;
const GROUP: &str = "java-churn";

fn tools() -> Option<KafkaTools> {
    match kafka_tools::kafka_tools() {
        Ok(tools) => Some(tools),
        Err(reason) => {
            kafka_tools::skip(reason);
            None
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the members reported, over all of them.
#[derive(Default)]
struct Ledger {
    owners: BTreeMap<i32, String>,
    violations: Vec<String>,
    /// Consumed offset ranges per partition (inclusive), as `records_consumed` reports them.
    consumed: BTreeMap<i32, Vec<(i64, i64)>>,
    /// Every event line, for failure messages.
    log: Vec<String>,
}

impl Ledger {
    fn owned_by(&self, member: &str) -> BTreeSet<i32> {
        self.owners.iter().filter(|(_, m)| m.as_str() == member).map(|(p, _)| *p).collect()
    }

    /// The highest offset below which every offset of `partition` was consumed (-1: none).
    fn contiguous_until(&self, partition: i32) -> i64 {
        let mut ranges = self.consumed.get(&partition).cloned().unwrap_or_default();
        ranges.sort_unstable();
        let mut next = 0;
        for (min, max) in ranges {
            if min > next {
                break;
            }
            next = next.max(max + 1);
        }
        next
    }
}

/// One `VerifiableConsumer` process and the thread reading its JSON events into the ledger.
struct JavaMember {
    child: Child,
    reader: Option<JoinHandle<()>>,
}

impl JavaMember {
    /// A consumer-protocol member choosing the uploaded `sticky-range` assignor.
    fn start(tools: &KafkaTools, bootstrap: &str, name: &str, ledger: &Arc<Mutex<Ledger>>) -> JavaMember {
        let protocol = ["--group-protocol", "consumer", "--group-remote-assignor", "sticky-range"];
        JavaMember::start_with(tools, bootstrap, name, ledger, GROUP, &protocol)
    }

    /// A member of `group` with the given protocol arguments.
    fn start_with(
        tools: &KafkaTools,
        bootstrap: &str,
        name: &str,
        ledger: &Arc<Mutex<Ledger>>,
        group: &str,
        protocol: &[&str],
    ) -> JavaMember {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut child = Command::new("bash")
            .arg(root.join("scripts/kafka-tool.sh"))
            .args(["org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap])
            .args(["--topic", TOPIC, "--group-id", group])
            .args(protocol)
            .args(["--enable-autocommit", "--reset-policy", "earliest"])
            .env("RUNNEL_KAFKA_LIB", tools.lib())
            .env("KAFKA_HEAP_OPTS", "-Xmx192M")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn VerifiableConsumer");
        let stdout = child.stdout.take().expect("piped");
        let (ledger, name) = (ledger.clone(), name.to_string());
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let Ok(event) = serde_json::from_str::<Value>(&line) else { continue };
                record(&mut lock(&ledger), &name, &event, &line);
            }
        });
        JavaMember { child, reader: Some(reader) }
    }

    /// SIGTERM: the tool closes its consumer, which leaves the group (epoch -1).
    fn leave(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for JavaMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record(ledger: &mut Ledger, member: &str, event: &Value, line: &str) {
    let partitions = |event: &Value| -> Vec<i32> {
        event["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["partition"].as_i64())
            .map(|p| p as i32)
            .collect()
    };
    match event["name"].as_str() {
        Some("partitions_assigned") => {
            ledger.log.push(format!("{member}: {line}"));
            for p in partitions(event) {
                if let Some(other) = ledger.owners.get(&p).filter(|o| o.as_str() != member) {
                    let violation = format!("partition {p} assigned to {member} while {other} owns it");
                    ledger.violations.push(violation);
                }
                ledger.owners.insert(p, member.to_string());
            }
        }
        Some("partitions_revoked") | Some("partitions_lost") => {
            ledger.log.push(format!("{member}: {line}"));
            for p in partitions(event) {
                if ledger.owners.get(&p).is_some_and(|o| o == member) {
                    ledger.owners.remove(&p);
                }
            }
        }
        Some("records_consumed") => {
            for p in event["partitions"].as_array().into_iter().flatten() {
                let (Some(partition), Some(min), Some(max)) =
                    (p["partition"].as_i64(), p["minOffset"].as_i64(), p["maxOffset"].as_i64())
                else {
                    continue;
                };
                ledger.consumed.entry(partition as i32).or_default().push((min, max));
            }
        }
        _ => {}
    }
}

/// Produces to every partition until stopped; returns how many records went to each.
fn background_producer(bootstrap: &str) -> (Arc<AtomicBool>, Arc<AtomicU64>, JoinHandle<Vec<i64>>) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("broker.address.family", "v4")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let (stop2, sent2) = (stop.clone(), sent.clone());
    let thread = std::thread::spawn(move || {
        let mut counts = vec![0i64; PARTITIONS as usize];
        let mut i = 0u64;
        while !stop2.load(Ordering::Acquire) {
            let partition = (i % PARTITIONS as u64) as i32;
            let payload = format!("record-{i}");
            match producer.send(BaseRecord::<(), _>::to(TOPIC).partition(partition).payload(&payload)) {
                Ok(()) => {
                    counts[partition as usize] += 1;
                    i += 1;
                    sent2.fetch_add(1, Ordering::Relaxed);
                    if i.is_multiple_of(50) {
                        producer.poll(Duration::from_millis(20));
                    }
                }
                Err(_) => {
                    producer.poll(Duration::from_millis(50));
                }
            }
        }
        producer.flush(Duration::from_secs(60)).expect("every record delivered");
        counts
    });
    (stop, sent, thread)
}

/// The group's coordinator as node `node` answers FindCoordinator.
fn coordinator(cluster: &Cluster, node: u64) -> Option<u64> {
    let mut conn = RawConn::open(cluster.node(node), "java-848-test");
    let found = conn.call(
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_static_str(GROUP)]),
    );
    found.coordinators.first().filter(|c| c.error_code == 0).map(|c| c.node_id.0 as u64)
}

/// Waits until `members` together own every partition, each its fair share (sticky-range).
/// Stops the producer and waits until every partition was consumed without gaps up to what it
/// produced, and no partition ever had two owners.
fn assert_all_consumed(ledger: &Arc<Mutex<Ledger>>, stop: &AtomicBool, producer: JoinHandle<Vec<i64>>) {
    stop.store(true, Ordering::Release);
    let counts = producer.join().expect("producer thread");
    let complete = wait_until(DEADLINE, || {
        let ledger = lock(ledger);
        (0..PARTITIONS).all(|p| ledger.contiguous_until(p) >= counts[p as usize])
    });
    let ledger = lock(ledger);
    assert!(
        complete,
        "records lost: produced {counts:?}, consumed without gaps up to {:?}",
        (0..PARTITIONS).map(|p| ledger.contiguous_until(p)).collect::<Vec<_>>()
    );
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
}

fn await_balanced(ledger: &Arc<Mutex<Ledger>>, members: &[&str], step: &str) {
    let balanced = wait_until(DEADLINE, || {
        let ledger = lock(ledger);
        let shares: Vec<usize> = members.iter().map(|m| ledger.owned_by(m).len()).collect();
        let (low, high) = (PARTITIONS as usize / members.len(), (PARTITIONS as usize).div_ceil(members.len()));
        ledger.owners.len() == PARTITIONS as usize && shares.iter().all(|&n| n >= low && n <= high)
    });
    let ledger = lock(ledger);
    assert!(
        balanced,
        "{step}: {members:?} never owned every partition in fair shares; owners {:?}; events:\n{}",
        ledger.owners,
        ledger.log.join("\n")
    );
    assert!(ledger.violations.is_empty(), "{step}: {:?}", ledger.violations);
}

#[test]
fn java_members_join_leave_and_survive_a_coordinator_kill_9_with_an_uploaded_assignor() {
    let Some(tools) = tools() else { return };
    let mut cluster = Cluster::start(3, &["--group-consumer-heartbeat-interval-ms", "500"]);
    let bootstrap = cluster.bootstrap();
    {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("broker.address.family", "v4")
            .create()
            .expect("admin");
        let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(3));
        for result in support::block_on(admin.create_topics(&[topic], &AdminOptions::new())).expect("create") {
            result.expect("topic created");
        }
    }
    let api = HttpApi::new(cluster.node(1));
    let module = support::guest_component("runnel-example-sticky-range");
    let body = json!({ "module_base64": base64::engine::general_purpose::STANDARD.encode(&module) });
    let answer = api.send_json("PUT", "/v1/assignors/sticky-range", None, &body);
    assert_eq!(answer.status, 201, "{}", answer.text);

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (stop, sent, producer) = background_producer(&bootstrap);
    let mut members = Vec::new();
    let names = ["j1", "j2", "j3"];
    for (i, name) in names.iter().enumerate() {
        members.push(JavaMember::start(&tools, &bootstrap, name, &ledger));
        await_balanced(&ledger, &names[..=i], &format!("{name} joined"));
    }

    // The coordinator computed the members' partitions with the uploaded assignor.
    let coordinator_id = coordinator(&cluster, 1).expect("a coordinator");
    let view = HttpApi::new(cluster.node(coordinator_id)).get(&format!("/v1/groups/{GROUP}")).json;
    assert_eq!(view["assignor"]["name"], "sticky-range", "{view:#}");
    assert!(view["assignor"]["error"].is_null(), "{view:#}");

    // SIGKILL the coordinator; the members go on (the group is restored from its records) and
    // records produced afterwards are consumed.
    cluster.kill9(coordinator_id);
    let survivor = cluster.ids().find(|&id| id != coordinator_id).expect("a survivor");
    let moved = wait_until(DEADLINE, || coordinator(&cluster, survivor).is_some_and(|c| c != coordinator_id));
    assert!(moved, "the group never got a new coordinator after node {coordinator_id} was killed");
    let sent_at_kill = sent.load(Ordering::Relaxed) as i64;
    let caught_up = wait_until(DEADLINE, || {
        let ledger = lock(&ledger);
        (0..PARTITIONS).map(|p| ledger.contiguous_until(p)).sum::<i64>() > sent_at_kill
    });
    assert!(caught_up, "consumption did not go on past the {sent_at_kill} records sent before the kill");

    // Members leave one by one (SIGTERM: the consumer's close leaves the group).
    let mut remaining: Vec<&str> = names.to_vec();
    while members.len() > 1 {
        let member = members.remove(0);
        let gone = remaining.remove(0);
        member.leave();
        await_balanced(&ledger, &remaining, &format!("{gone} left"));
    }

    assert_all_consumed(&ledger, &stop, producer);
    drop(members);
}

#[test]
fn an_empty_classic_group_moves_to_the_consumer_protocol_and_resumes_from_its_offsets() {
    let Some(tools) = tools() else { return };
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = support::Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let b = node.bootstrap();
    let run = |args: &[&str], stdin: Option<&str>| {
        let out = tools.run(args[0], &args[1..], stdin);
        (out.success, out.text())
    };
    let (ok, out) =
        run(&["topics", "--bootstrap-server", &b, "--create", "--topic", "migrate", "--partitions", "2"], None);
    assert!(ok, "{out}");
    let produce = |range: std::ops::Range<i32>| {
        let records: String = range.map(|i| format!("record-{i}\n")).collect();
        let (ok, out) = run(&["console-producer", "--bootstrap-server", &b, "--topic", "migrate"], Some(&records));
        assert!(ok, "{out}");
    };
    let consume = |protocol: &str, count: &str| {
        run(
            &[
                "console-consumer",
                "--bootstrap-server",
                &b,
                "--topic",
                "migrate",
                "--group",
                "migrating",
                "--consumer-property",
                &format!("group.protocol={protocol}"),
                "--consumer-property",
                "auto.offset.reset=earliest",
                "--max-messages",
                count,
                "--timeout-ms",
                "30000",
            ],
            None,
        )
    };
    let seen = |out: &str| -> BTreeSet<String> {
        out.lines().filter(|l| l.starts_with("record-")).map(str::to_string).collect()
    };
    // Classic first: everything there is, committed when the console consumer closes.
    produce(0..120);
    let (ok, first) = consume("classic", "120");
    assert!(ok && first.contains("Processed a total of 120 messages"), "{first}");
    assert_eq!(seen(&first).len(), 120, "{first}");
    // The group is empty now; a consumer-protocol member converts it and starts from the
    // committed offsets: only what was produced since.
    produce(120..200);
    let (ok, second) = consume("consumer", "80");
    assert!(ok && second.contains("Processed a total of 80 messages"), "{second}");
    let expected: BTreeSet<String> = (120..200).map(|i| format!("record-{i}")).collect();
    assert_eq!(seen(&second), expected, "{second}");
    let (ok, out) = run(&["consumer-groups", "--bootstrap-server", &b, "--list", "--type", "consumer"], None);
    assert!(ok && out.lines().any(|l| l.split_whitespace().next() == Some("migrating")), "{out}");
}

#[test]
fn java_classic_members_ride_an_online_upgrade_and_rollback() {
    // Proves KIP-848's online migration with Kafka's own Java 4.x client, as a rolling upgrade
    // runs it: two classic members (CooperativeStickyAssignor) consume; a consumer-protocol member
    // joins (the group is upgraded in place: the classic members stay and reconcile by
    // rejoining) and later leaves (the group goes back to classic). Under load, never two owners
    // of a partition, fair shares after every step, and no gap in any partition's consumed
    // offsets up to what was produced.
    let Some(tools) = tools() else { return };
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = support::Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let bootstrap = node.bootstrap();
    support::create_topic(&node, TOPIC, PARTITIONS);
    let group = "java-rolling";
    let classic = [
        "--group-protocol",
        "classic",
        "--assignment-strategy",
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    ];
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (stop, _sent, producer) = background_producer(&bootstrap);
    let c1 = JavaMember::start_with(&tools, &bootstrap, "c1", &ledger, group, &classic);
    await_balanced(&ledger, &["c1"], "c1 joined");
    let c2 = JavaMember::start_with(&tools, &bootstrap, "c2", &ledger, group, &classic);
    await_balanced(&ledger, &["c1", "c2"], "c2 joined");
    let listed_type = || {
        let mut conn = RawConn::open(&node, "java-rolling-test");
        let listed = conn.call(5, &kafka_protocol::messages::ListGroupsRequest::default());
        listed.groups.iter().find(|g| g.group_id.0.as_str() == group).map(|g| g.group_type.to_string())
    };
    assert_eq!(listed_type().as_deref(), Some("classic"));

    let k1 = JavaMember::start_with(&tools, &bootstrap, "k1", &ledger, group, &["--group-protocol", "consumer"]);
    await_balanced(&ledger, &["c1", "c2", "k1"], "k1 joined (upgrade)");
    assert_eq!(listed_type().as_deref(), Some("consumer"));
    // Kafka's own tool describes the mixed group: three members, one assignor.
    let described = tools.run(
        "consumer-groups",
        &["--bootstrap-server", &bootstrap, "--describe", "--group", group, "--members"],
        None,
    );
    let text = described.text();
    assert!(described.success, "{text}");
    let rows = text.lines().filter(|l| l.split_whitespace().next() == Some(group)).count();
    assert_eq!(rows, 3, "{text}");

    k1.leave();
    let downgraded = wait_until(DEADLINE, || listed_type().as_deref() == Some("classic"));
    assert!(downgraded, "the group never went back to classic: {:?}", listed_type());
    await_balanced(&ledger, &["c1", "c2"], "k1 left (downgrade)");

    assert_all_consumed(&ledger, &stop, producer);
    c2.leave();
    c1.leave();
}
