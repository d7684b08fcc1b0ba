//! Issue 11's "Done when" checks with Apache Kafka's own tools against a real 3-node Runnel
//! cluster: `kafka-topics.sh --describe` shows leaders, replicas and ISRs, an ISR that shrinks
//! when a node stops and grows back when it returns (and `--under-replicated-partitions` agrees);
//! `kafka-consumer-groups.sh --describe` keeps showing a group's committed offsets through a
//! kill -9 of its coordinator, and the group goes on committing on the new one.
//!
//! Kafka's tools are the jars `scripts/kafka-jars.sh` fetched (see `support/kafka_tools.rs`):
//! where they were never fetched each test is skipped (scripts/test.sh counts it so); once they are there a missing
//! `java` fails. Every wait is on a condition with a deadline: librdkafka's metadata (cheap) says
//! when the cluster has moved, then the Kafka tool (one JVM per run) must show it too.

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use kafka_tools::{KafkaTools, ToolOutput};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use support::cluster::Cluster;
use support::workload;

const NODES: u64 = 3;
const PARTITIONS: i32 = 3;
/// Any wait for the cluster to move (a failover, a restarted node catching up).
const DEADLINE: Duration = Duration::from_secs(30);

/// One cluster at a time: two cores, three nodes and a JVM per tool run are enough load.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The Kafka tools, or `None` after printing why the test skips (as `kafka_cli` does).
fn kafka_cli() -> Option<KafkaTools> {
    match kafka_tools::kafka_tools() {
        Ok(tools) => Some(tools),
        Err(reason) => {
            kafka_tools::skip(reason);
            None
        }
    }
}

/// One tool run: the command line and what it printed, for failure messages.
struct Ran {
    command: String,
    output: ToolOutput,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$ kafka-{}\n(exit {})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            if self.output.success { "0" } else { "non-zero" },
            self.output.stdout.trim_end(),
            self.output.stderr.trim_end()
        )
    }
}

fn run(tools: &KafkaTools, tool: &str, args: &[&str]) -> Ran {
    let output = tools.run(tool, args, None);
    Ran { command: format!("{tool}.sh {}", args.join(" ")), output }
}

/// Waits until `cluster` can place replication factor 3: READY means a node caught up with the
/// quorum, not that its peers' registrations reached it.
fn wait_for_brokers(cluster: &Cluster) {
    for id in cluster.ids() {
        let node = cluster.node(id).bootstrap();
        let mut seen = None;
        let ok = support::wait_until(DEADLINE, || {
            seen = workload::broker_count(&node);
            seen == Some(NODES as usize)
        });
        assert!(ok, "node {id} listed {seen:?} brokers, not {NODES}, within {DEADLINE:?}");
    }
}

/// The Kafka addresses of the running nodes (what the tools are pointed at once one is down).
fn live_bootstrap(cluster: &Cluster) -> String {
    cluster
        .ids()
        .filter(|&id| cluster.node(id).is_running())
        .map(|id| cluster.node(id).bootstrap())
        .collect::<Vec<_>>()
        .join(",")
}

/// One partition line of `kafka-topics.sh --describe`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DescribedPartition {
    partition: i32,
    /// `None`: `Leader: none`.
    leader: Option<u64>,
    replicas: Vec<u64>,
    isr: Vec<u64>,
}

fn node_list(text: &str) -> Vec<u64> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.parse().expect("a node id")).collect()
}

/// The partition lines of `topic` in a `--describe` output (tab-separated `Key: value` fields:
/// `Topic: t  Partition: 0  Leader: 1  Replicas: 1,2,3  Isr: 1,2,3  Elr:  LastKnownElr: `),
/// sorted by partition. Panics (with the output) on a line it cannot read.
fn parse_describe(ran: &Ran, topic: &str) -> Vec<DescribedPartition> {
    let mut partitions = Vec::new();
    for line in ran.output.stdout.lines() {
        let fields: BTreeMap<&str, &str> = line
            .split('\t')
            .filter_map(|field| field.split_once(':'))
            .map(|(key, value)| (key.trim(), value.trim()))
            .collect();
        if fields.get("Topic") != Some(&topic) || !fields.contains_key("Partition") {
            continue;
        }
        let field = |name: &str| *fields.get(name).unwrap_or_else(|| panic!("no {name} in line {line:?} of\n{ran}"));
        let leader = match field("Leader") {
            "none" | "-1" => None,
            id => Some(id.parse().unwrap_or_else(|_| panic!("Leader {id:?} in line {line:?} of\n{ran}"))),
        };
        partitions.push(DescribedPartition {
            partition: field("Partition").parse().unwrap_or_else(|_| panic!("partition in {line:?} of\n{ran}")),
            leader,
            replicas: node_list(field("Replicas")),
            isr: node_list(field("Isr")),
        });
    }
    partitions.sort_by_key(|p| p.partition);
    partitions
}

fn set(ids: &[u64]) -> BTreeSet<u64> {
    ids.iter().copied().collect()
}

/// Runs `kafka-topics.sh --describe --topic <topic> [extra]` against `bootstrap` until `accept`
/// takes its partitions (or `DEADLINE` passes); returns the last run and whether it was taken.
fn describe_until(
    tools: &KafkaTools,
    bootstrap: &str,
    topic: &str,
    extra: &[&str],
    mut accept: impl FnMut(&[DescribedPartition]) -> bool,
) -> (Ran, bool) {
    let mut args = vec!["--bootstrap-server", bootstrap, "--describe", "--topic", topic];
    args.extend_from_slice(extra);
    let mut last = None;
    let ok = support::wait_until(DEADLINE, || {
        let ran = run(tools, "topics", &args);
        let taken = ran.output.success && accept(&parse_describe(&ran, topic));
        last = Some(ran);
        taken
    });
    (last.expect("at least one run"), ok)
}

#[test]
fn kafka_topics_describe_shows_the_isr_shrink_when_a_node_stops_and_grow_when_it_returns() {
    // Proves kafka-topics.sh --create (RF 3, min.insync.replicas=2) and --describe on a 3-node
    // cluster: leaders, replicas, full ISRs; after a node stops (SIGTERM, then in a second round
    // kill -9), no ISR holds it and it leads nothing (--under-replicated-partitions lists every
    // partition); after it restarts, every ISR holds all three again and nothing is
    // under-replicated.
    let Some(cli) = kafka_cli() else { return };
    let _serial = serial();
    let mut cluster = Cluster::start(NODES, &[]);
    wait_for_brokers(&cluster);
    let topic = "isr-watch";
    let all: BTreeSet<u64> = cluster.ids().collect();

    let created = run(
        &cli,
        "topics",
        &[
            "--bootstrap-server",
            &cluster.bootstrap(),
            "--create",
            "--topic",
            topic,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            &NODES.to_string(),
            "--config",
            "min.insync.replicas=2",
        ],
    );
    assert!(created.output.success && created.output.stdout.contains(&format!("Created topic {topic}")), "{created}");

    let healthy = |partitions: &[DescribedPartition]| {
        partitions.len() == PARTITIONS as usize
            && partitions.iter().all(|p| {
                p.leader.is_some_and(|l| all.contains(&l))
                    && p.replicas.len() == NODES as usize
                    && set(&p.replicas) == all
                    && p.isr.len() == NODES as usize
                    && set(&p.isr) == all
            })
    };
    let (described, ok) = describe_until(&cli, &cluster.bootstrap(), topic, &[], healthy);
    assert!(
        ok,
        "after --create, --describe did not show {PARTITIONS} partitions each with a leader in {all:?}, \
         Replicas of the 3 nodes and Isr of all 3 within {DEADLINE:?}:\n{described}"
    );
    assert!(
        described.output.stdout.contains("PartitionCount: 3")
            && described.output.stdout.contains("ReplicationFactor: 3")
            && described.output.stdout.contains("min.insync.replicas=2"),
        "the topic line does not show 3 partitions, RF 3 and min.insync.replicas=2:\n{described}"
    );
    let (nothing_under, ok) =
        describe_until(&cli, &cluster.bootstrap(), topic, &["--under-replicated-partitions"], |p| p.is_empty());
    assert!(ok, "a healthy cluster listed under-replicated partitions:\n{nothing_under}");
    let mut leaders = parse_describe(&described, topic);

    // Each round stops the current leader of partition 0, so at least one leadership has to
    // move: first SIGTERM (a controlled shutdown: the node asks to be fenced, which must take it
    // out of every ISR), then kill -9 (its lease expires).
    for stop in [Stop::Terminate, Stop::Kill9] {
        let victim = leaders[0].leader.expect("partition 0 has a leader");
        let others: BTreeSet<u64> = all.iter().copied().filter(|&id| id != victim).collect();
        let what = match stop {
            Stop::Terminate => {
                assert!(cluster.terminate(victim), "node {victim} did not exit 0 on SIGTERM (controlled shutdown)");
                format!("node {victim} stopped (SIGTERM)")
            }
            Stop::Kill9 => {
                cluster.kill9(victim);
                format!("node {victim} killed (kill -9)")
            }
        };
        let live = live_bootstrap(&cluster);

        // librdkafka first (cheap), then the tool must show the same.
        let mut seen = None;
        let moved = support::wait_until(DEADLINE, || {
            seen = workload::partition_states(&live, topic);
            seen.as_ref().is_some_and(|states| {
                states.iter().all(|p| p.leader.is_some_and(|l| l != victim) && !p.isr.contains(&victim))
            })
        });
        assert!(moved, "{what}: librdkafka's metadata still shows it leading or in an ISR: {seen:?}");
        let (described, ok) = describe_until(&cli, &live, topic, &[], |partitions| {
            partitions.len() == PARTITIONS as usize
                && partitions.iter().all(|p| {
                    p.leader.is_some_and(|l| others.contains(&l)) && set(&p.isr) == others && set(&p.replicas) == all
                })
        });
        assert!(
            ok,
            "{what}: --describe against the live nodes did not show every partition led by one of {others:?} \
             with Isr exactly {others:?} (Replicas still all 3) within {DEADLINE:?}:\n{described}"
        );
        let (under, ok) = describe_until(&cli, &live, topic, &["--under-replicated-partitions"], |partitions| {
            partitions.iter().map(|p| p.partition).collect::<Vec<_>>() == (0..PARTITIONS).collect::<Vec<_>>()
        });
        assert!(ok, "{what}: --under-replicated-partitions did not list all {PARTITIONS} partitions:\n{under}");

        cluster.restart(victim);
        let (described, ok) = describe_until(&cli, &cluster.bootstrap(), topic, &[], healthy);
        assert!(
            ok,
            "{what} and restarted: --describe did not show a leader and Isr of all 3 nodes on every partition \
             within {DEADLINE:?}:\n{described}"
        );
        let (under, ok) =
            describe_until(&cli, &cluster.bootstrap(), topic, &["--under-replicated-partitions"], |p| p.is_empty());
        assert!(ok, "{what} and restarted: --under-replicated-partitions still lists partitions:\n{under}");
        leaders = parse_describe(&described, topic);
    }
}

/// How a node is stopped.
#[derive(Clone, Copy)]
enum Stop {
    Terminate,
    Kill9,
}

/// Counts delivery reports of a batch produce.
#[derive(Default)]
struct Deliveries {
    acked: Mutex<u64>,
    failed: Mutex<Vec<String>>,
}

impl rdkafka::client::ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => *self.acked.lock().unwrap() += 1,
            Err((error, message)) => {
                self.failed.lock().unwrap().push(format!("{}-{} {error}", message.topic(), message.partition()))
            }
        }
    }
}

/// Writes `count` records to every partition of `topic` (acks=all, no idempotence) and waits
/// until each is acknowledged.
fn produce(bootstrap: &str, topic: &str, count: u64, tag: &str) {
    let producer: BaseProducer<Deliveries> =
        workload::producer_config(bootstrap, &[]).create_with_context(Deliveries::default()).expect("producer");
    for partition in 0..PARTITIONS {
        for i in 0..count {
            let value = format!("{tag}-{partition}-{i}");
            producer
                .send(BaseRecord::<(), str>::to(topic).payload(&value).partition(partition))
                .unwrap_or_else(|(e, _)| panic!("enqueue {value}: {e}"));
        }
    }
    let flushed = producer.flush(Duration::from_millis(workload::MESSAGE_TIMEOUT_MS + 5_000));
    let context = producer.context();
    let acked = *context.acked.lock().unwrap();
    let failed = context.failed.lock().unwrap().clone();
    assert!(
        flushed.is_ok() && failed.is_empty() && acked == count * PARTITIONS as u64,
        "producing {count} records to each partition of {topic} ({tag}): {acked} acknowledged, flush {flushed:?}, \
         failures: {failed:?}"
    );
}

/// A group member of `group` subscribed to `topic` polls until it has read every partition up
/// to `end` (exclusive), checks that each partition started at `start`, then commits `end` for
/// every partition (sync) and leaves the group.
fn consume_and_commit(bootstrap: &str, group: &str, topic: &str, start: i64, end: i64) {
    let consumer: BaseConsumer = workload::config(
        bootstrap,
        &[
            ("group.id", group),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "300"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("fetch.wait.max.ms", "100"),
        ],
    )
    .create()
    .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    // partition -> (first offset read, next offset to read)
    let mut read: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut errors = Vec::new();
    let done = |read: &BTreeMap<i32, (i64, i64)>| {
        read.len() == PARTITIONS as usize && read.values().all(|&(_, next)| next >= end)
    };
    support::wait_until(DEADLINE, || {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                let entry = read.entry(message.partition()).or_insert((message.offset(), message.offset()));
                entry.1 = entry.1.max(message.offset() + 1);
            }
            // Transient (a coordinator or leader moving): librdkafka retries; kept for the message.
            Some(Err(error)) => errors.push(error.to_string()),
            None => {}
        }
        done(&read)
    });
    assert!(
        done(&read),
        "group {group} did not read every partition of {topic} to offset {end} within {DEADLINE:?}: \
         (first, next) per partition {read:?}; poll errors: {errors:?}"
    );
    for (partition, &(first, _)) in &read {
        assert_eq!(
            first, start,
            "group {group} started {topic}-{partition} at offset {first}, not {start} (its committed offset)"
        );
    }
    let mut offsets = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        offsets.add_partition_offset(topic, partition, Offset::Offset(end)).expect("offset");
    }
    consumer.commit(&offsets, CommitMode::Sync).unwrap_or_else(|e| panic!("group {group} committing {end}: {e}"));
    // Dropping the consumer closes it: it leaves the group, whose offsets stay.
}

/// One row of `kafka-consumer-groups.sh --describe --group`: CURRENT-OFFSET, LOG-END-OFFSET,
/// LAG by partition, read by the header's column names.
fn parse_group_offsets(ran: &Ran, group: &str) -> BTreeMap<i32, (String, String, String)> {
    let lines: Vec<&str> = ran.output.stdout.lines().collect();
    let Some(header_at) = lines.iter().position(|l| l.split_whitespace().next() == Some("GROUP")) else {
        return BTreeMap::new();
    };
    let header: Vec<&str> = lines[header_at].split_whitespace().collect();
    let column = |name: &str| header.iter().position(|&h| h == name).unwrap_or_else(|| panic!("no {name} in\n{ran}"));
    let (partition, current, end, lag) =
        (column("PARTITION"), column("CURRENT-OFFSET"), column("LOG-END-OFFSET"), column("LAG"));
    lines[header_at + 1..]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cols| cols.first() == Some(&group) && cols.len() > lag)
        .filter_map(|cols| {
            let p = cols[partition].parse().ok()?;
            Some((p, (cols[current].to_string(), cols[end].to_string(), cols[lag].to_string())))
        })
        .collect()
}

/// `kafka-consumer-groups.sh --describe --group` against `bootstrap` until every partition shows
/// CURRENT-OFFSET = LOG-END-OFFSET = `offset` and LAG 0; returns the last run and whether it did.
fn group_offsets_until(tools: &KafkaTools, bootstrap: &str, group: &str, offset: i64) -> (Ran, bool) {
    let expected: BTreeMap<i32, (String, String, String)> =
        (0..PARTITIONS).map(|p| (p, (offset.to_string(), offset.to_string(), "0".to_string()))).collect();
    let mut last = None;
    let ok = support::wait_until(DEADLINE, || {
        let ran = run(tools, "consumer-groups", &["--bootstrap-server", bootstrap, "--describe", "--group", group]);
        let taken = ran.output.success && parse_group_offsets(&ran, group) == expected;
        last = Some(ran);
        taken
    });
    (last.expect("at least one run"), ok)
}

/// The coordinator's node id in `kafka-consumer-groups.sh --describe --group G --state`
/// (`GROUP  COORDINATOR (ID)  ASSIGNMENT-STRATEGY  STATE  #MEMBERS`, the coordinator as
/// `host:port (id)`).
fn parse_coordinator(ran: &Ran, group: &str) -> Option<u64> {
    let row = ran.output.stdout.lines().find(|l| l.split_whitespace().next() == Some(group))?;
    let open = row.find('(')?;
    let close = row[open..].find(')')? + open;
    row[open + 1..close].trim().parse().ok()
}

/// Kafka's `partitionFor(groupId)`: `Utils.abs(groupId.hashCode()) % partitions`.
fn offsets_partition_for(group: &str, partitions: usize) -> i32 {
    let mut hash: i32 = 0;
    for unit in group.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    ((hash & 0x7fff_ffff) as usize % partitions) as i32
}

#[test]
fn kafka_consumer_groups_describe_keeps_the_committed_offsets_through_a_coordinator_kill_9() {
    // Proves kafka-consumer-groups.sh --describe through a coordinator failover: a librdkafka
    // group commits N on every partition (CURRENT-OFFSET N, LAG 0); --state names the coordinator
    // (the leader of the group's __consumer_offsets partition); after kill -9 of it, --describe
    // against the live nodes still shows N and a new coordinator; the same group resumes at N,
    // commits N + M, and --describe shows N + M, before and after the killed node returns.
    let Some(cli) = kafka_cli() else { return };
    let _serial = serial();
    // No initial rebalance delay: each consume below is one member joining an empty group.
    let mut cluster = Cluster::start(NODES, &["--group-initial-rebalance-delay-ms", "0"]);
    wait_for_brokers(&cluster);
    let (topic, group) = ("ledger", "billing-failover");
    const N: i64 = 20;
    const M: i64 = 15;
    workload::create_topic(&cluster.bootstrap(), topic, PARTITIONS, NODES as i32, &[("min.insync.replicas", "2")])
        .unwrap_or_else(|e| panic!("CreateTopics {topic} (RF 3, min.insync.replicas=2): {e}"));

    produce(&cluster.bootstrap(), topic, N as u64, "first");
    consume_and_commit(&cluster.bootstrap(), group, topic, 0, N);
    let (described, ok) = group_offsets_until(&cli, &cluster.bootstrap(), group, N);
    assert!(
        ok,
        "after group {group} committed {N} on every partition of {topic}, --describe did not show \
         CURRENT-OFFSET {N}, LOG-END-OFFSET {N}, LAG 0 on each within {DEADLINE:?}:\n{described}"
    );

    let state = run(
        &cli,
        "consumer-groups",
        &["--bootstrap-server", &cluster.bootstrap(), "--describe", "--group", group, "--state"],
    );
    let coordinator = parse_coordinator(&state, group)
        .unwrap_or_else(|| panic!("no coordinator `host:port (id)` in the --state output:\n{state}"));
    // The coordinator is the leader of the group's __consumer_offsets partition (created RF 3).
    let offsets = workload::partition_states(&cluster.bootstrap(), "__consumer_offsets")
        .unwrap_or_else(|| panic!("no metadata for __consumer_offsets"));
    let offsets_partition = offsets_partition_for(group, offsets.len());
    let offsets_state = &offsets[offsets_partition as usize];
    assert_eq!(
        offsets_state.leader,
        Some(coordinator),
        "--state names node {coordinator} as coordinator of {group}, but __consumer_offsets-{offsets_partition} \
         is {offsets_state:?}:\n{state}"
    );
    assert_eq!(
        offsets_state.replicas.len(),
        NODES as usize,
        "__consumer_offsets-{offsets_partition} is not replicated to all {NODES} nodes: {offsets_state:?}"
    );

    cluster.kill9(coordinator);
    let live = live_bootstrap(&cluster);
    let mut seen = None;
    let moved = support::wait_until(DEADLINE, || {
        seen = workload::partition_states(&live, "__consumer_offsets")
            .and_then(|states| states.into_iter().nth(offsets_partition as usize));
        seen.as_ref().is_some_and(|p| p.leader.is_some_and(|l| l != coordinator) && !p.isr.contains(&coordinator))
    });
    assert!(
        moved,
        "coordinator {coordinator} killed: __consumer_offsets-{offsets_partition} has no new leader within \
         {DEADLINE:?}: {seen:?}"
    );
    let (described, ok) = group_offsets_until(&cli, &live, group, N);
    assert!(
        ok,
        "coordinator {coordinator} killed: --describe against the live nodes did not show CURRENT-OFFSET {N}, \
         LAG 0 on every partition within {DEADLINE:?}:\n{described}"
    );
    let state = run(&cli, "consumer-groups", &["--bootstrap-server", &live, "--describe", "--group", group, "--state"]);
    let new_coordinator = parse_coordinator(&state, group)
        .unwrap_or_else(|| panic!("after the kill, no coordinator `host:port (id)` in the --state output:\n{state}"));
    assert_ne!(new_coordinator, coordinator, "--state still names the killed node as coordinator:\n{state}");

    produce(&live, topic, M as u64, "second");
    consume_and_commit(&live, group, topic, N, N + M);
    let (described, ok) = group_offsets_until(&cli, &live, group, N + M);
    assert!(
        ok,
        "coordinator {coordinator} killed, group {group} committed {} on the new coordinator {new_coordinator}: \
         --describe did not show CURRENT-OFFSET {0}, LAG 0 on every partition within {DEADLINE:?}:\n{described}",
        N + M
    );

    cluster.restart(coordinator);
    let mut seen = None;
    let back = support::wait_until(DEADLINE, || {
        seen = workload::partition_states(&cluster.bootstrap(), "__consumer_offsets")
            .and_then(|states| states.into_iter().nth(offsets_partition as usize));
        seen.as_ref().is_some_and(|p| p.isr.contains(&coordinator))
    });
    assert!(
        back,
        "node {coordinator} restarted: it did not rejoin the ISR of __consumer_offsets-{offsets_partition} \
         within {DEADLINE:?}: {seen:?}"
    );
    let (described, ok) = group_offsets_until(&cli, &cluster.bootstrap(), group, N + M);
    assert!(
        ok,
        "node {coordinator} restarted: --describe did not show CURRENT-OFFSET {}, LAG 0 on every partition \
         within {DEADLINE:?}:\n{described}",
        N + M
    );
}

#[test]
fn kafka_leader_election_gives_leadership_back_to_the_preferred_replicas() {
    // Proves ElectLeaders through Kafka's LeaderElectionCommand (kafka-leader-election.sh): with
    // auto.leader.rebalance.enable=false, a restarted node rejoins every ISR but leads nothing;
    // a PREFERRED election over all partitions makes every partition's first replica lead again;
    // a second one has nothing to report, and one naming a partition answers that no election
    // was needed.
    let Some(cli) = kafka_cli() else { return };
    let _serial = serial();
    let mut cluster = Cluster::start(NODES, &["--auto-leader-rebalance-enable", "false"]);
    wait_for_brokers(&cluster);
    let topic = "preferred";
    let bootstrap = cluster.bootstrap();
    let created = run(
        &cli,
        "topics",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            &NODES.to_string(),
        ],
    );
    assert!(created.output.success, "{created}");
    let all: BTreeSet<u64> = cluster.ids().collect();
    let (ran, ok) = describe_until(&cli, &bootstrap, topic, &[], |ps| {
        ps.len() == PARTITIONS as usize && ps.iter().all(|p| p.leader == p.replicas.first().copied())
    });
    assert!(ok, "every partition should start led by its first replica:\n{ran}");
    let preferred_of_0 = parse_describe(&ran, topic)[0].replicas[0];

    cluster.terminate(preferred_of_0);
    let live = live_bootstrap(&cluster);
    let (ran, ok) =
        describe_until(&cli, &live, topic, &[], |ps| ps.iter().all(|p| p.leader.is_some_and(|l| l != preferred_of_0)));
    assert!(ok, "node {preferred_of_0} stopped: its partitions should move:\n{ran}");
    cluster.restart(preferred_of_0);
    let (ran, ok) = describe_until(&cli, &bootstrap, topic, &[], |ps| {
        ps.iter().all(|p| set(&p.isr) == all) && ps.iter().all(|p| p.leader != Some(preferred_of_0))
    });
    assert!(ok, "node {preferred_of_0} back in every ISR, leading nothing (no auto rebalance):\n{ran}");

    let election = ["--bootstrap-server", bootstrap.as_str(), "--election-type", "PREFERRED", "--all-topic-partitions"];
    let elected = run(&cli, "org.apache.kafka.tools.LeaderElectionCommand", &election);
    assert!(
        elected.output.success && elected.output.stdout.contains("Successfully completed leader election"),
        "{elected}"
    );
    let (ran, ok) =
        describe_until(&cli, &bootstrap, topic, &[], |ps| ps.iter().all(|p| p.leader == p.replicas.first().copied()));
    assert!(ok, "after the election every partition is led by its first replica:\n{ran}");
    // Over all partitions, those already led by their preferred replica are left out of the
    // answer (Kafka's ReplicationControlManager.electLeaders), so the tool reports nothing.
    let again = run(&cli, "org.apache.kafka.tools.LeaderElectionCommand", &election);
    assert!(again.output.success && !again.output.text().contains("Error"), "{again}");
    assert!(!again.output.text().contains("Successfully completed leader election"), "{again}");
    let one = [
        "--bootstrap-server",
        bootstrap.as_str(),
        "--election-type",
        "PREFERRED",
        "--topic",
        topic,
        "--partition",
        "0",
    ];
    let named = run(&cli, "org.apache.kafka.tools.LeaderElectionCommand", &one);
    assert!(named.output.text().contains("Valid replica already elected"), "{named}");
}

#[test]
fn kafka_metadata_quorum_describes_the_leader_and_every_voter() {
    // Proves DescribeQuorum through Kafka's kafka-metadata-quorum.sh on a 3-node cluster, asked
    // of a node that is not the active controller (it forwards): --status names the active
    // controller as LeaderId, three CurrentVoters and a high watermark; --replication lists the
    // three voters with their log end offsets, the leader first; after kill -9 of the active
    // controller, --status against the survivors names a new leader in a higher epoch.
    let Some(cli) = kafka_cli() else { return };
    let _serial = serial();
    let mut cluster = Cluster::start(NODES, &[]);
    wait_for_brokers(&cluster);
    let field = |ran: &Ran, name: &str| -> Option<String> {
        ran.output
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim_start_matches(':').trim().to_string()))
    };
    let status_of =
        |bootstrap: &str| run(&cli, "metadata-quorum", &["--bootstrap-server", bootstrap, "describe", "--status"]);
    let first = status_of(&cluster.bootstrap());
    assert!(first.output.success, "{first}");
    let leader: u64 = field(&first, "LeaderId").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    let epoch: i64 = field(&first, "LeaderEpoch").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    let high_watermark: i64 =
        field(&first, "HighWatermark").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    assert!(high_watermark > 0, "{first}");
    let voters = field(&first, "CurrentVoters").unwrap_or_else(|| panic!("{first}"));
    for id in cluster.ids() {
        assert!(
            voters.contains(&format!("\"id\": {id}")) || voters.contains(&format!("{id}")),
            "voter {id} in {first}"
        );
    }
    // Asked of a node that is not the active controller: forwarded, same answer.
    let other = cluster.ids().find(|&id| id != leader).expect("a non-leader");
    let forwarded = status_of(&cluster.node(other).bootstrap());
    assert_eq!(field(&forwarded, "LeaderId"), Some(leader.to_string()), "{forwarded}");

    let replication =
        run(&cli, "metadata-quorum", &["--bootstrap-server", &cluster.bootstrap(), "describe", "--replication"]);
    assert!(replication.output.success, "{replication}");
    let rows: Vec<&str> = replication.output.stdout.lines().skip(1).filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(rows.len(), NODES as usize, "one row per voter: {replication}");
    assert!(rows[0].split_whitespace().next() == Some(&leader.to_string()), "the leader first: {replication}");
    assert!(rows.iter().all(|r| r.contains("Leader") || r.contains("Follower")), "{replication}");

    cluster.kill9(leader);
    let survivors = cluster.ids().filter(|&id| id != leader).map(|id| cluster.node(id).bootstrap()).collect::<Vec<_>>();
    let mut last = None;
    let moved = support::wait_until(Duration::from_secs(60), || {
        let ran = status_of(&survivors.join(","));
        let ok = ran.output.success
            && field(&ran, "LeaderId").and_then(|v| v.parse::<u64>().ok()).is_some_and(|l| l != leader)
            && field(&ran, "LeaderEpoch").and_then(|v| v.parse::<i64>().ok()).is_some_and(|e| e > epoch);
        last = Some(ran);
        ok
    });
    assert!(moved, "no new leader in a higher epoch: {}", last.expect("a run"));
}

#[test]
fn java_transactions_on_transaction_version_2_commit_across_partitions_led_by_other_nodes() {
    // Proves KIP-890 part 2 across nodes: a Java 4.4 transactional producer (ProducerPerformance,
    // a commit every 100 ms) on a 3-node cluster adds partitions by producing, so the leaders of
    // partitions its coordinator does not lead add them over the network (AddPartitionsToTxn v4,
    // not verify-only); every commit bumps the epoch; a read_committed console consumer then
    // reads every record exactly once.
    let Some(cli) = kafka_cli() else { return };
    let _serial = serial();
    let cluster = Cluster::start(NODES, &[]);
    wait_for_brokers(&cluster);
    let bootstrap = cluster.bootstrap();
    let topic = "java-tv2";
    // Replication factor 1: each node leads one partition, so every partition but (at most)
    // one is led by a node that is not the transaction's coordinator.
    let partitions = PARTITIONS.to_string();
    let created = run(
        &cli,
        "topics",
        &["--bootstrap-server", &bootstrap, "--create", "--topic", topic, "--partitions", &partitions],
    );
    assert!(created.output.success, "{created}");
    const RECORDS: usize = 3000;
    let props = format!("bootstrap.servers={bootstrap}");
    let perf = run(
        &cli,
        "producer-perf-test",
        &[
            "--topic",
            topic,
            "--num-records",
            &RECORDS.to_string(),
            "--record-size",
            "100",
            "--throughput",
            "10000",
            "--transactional-id",
            "java-tv2",
            "--transaction-duration-ms",
            "100",
            "--producer-props",
            &props,
            "batch.size=2000",
        ],
    );
    assert!(perf.output.success && perf.output.text().contains(&format!("{RECORDS} records sent")), "{perf}");
    let txn = support::HttpApi::at(&cluster.node(1).http_url()).get("/v1/transactions/java-tv2").json;
    assert!(txn["producer_epoch"].as_i64().is_some_and(|e| e >= 1), "an epoch bump per commit: {txn}");
    let read = run(
        &cli,
        "console-consumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            &(RECORDS + 1).to_string(),
            "--timeout-ms",
            "15000",
            "--property",
            "print.partition=true",
        ],
    );
    let text = read.output.text();
    assert!(text.contains(&format!("Processed a total of {RECORDS} messages")), "{read}");
    let used: BTreeSet<&str> = read.output.stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(used.len() >= 2, "records in at least two partitions, so one led away from the coordinator: {used:?}");
}
