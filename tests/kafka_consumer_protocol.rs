//! The consumer group protocol (KIP-848, `group.protocol=consumer`) with librdkafka 2.12
//! (through `rdkafka`) against the real `runnel` binary: members added and removed one by one
//! under load never own a partition at the same time (checked from the members' own rebalance
//! callbacks), static members get their partitions back, regex subscriptions follow topic
//! creation, `group.remote.assignor` picks the server assignor, and ConsumerGroupDescribe /
//! ListGroups show the group.
//! Waits are on conditions with deadlines, never fixed sleeps.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ConsumerGroupDescribeRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientContext;
use support::{client_config, create_topic, wait_until, RawConn, Runnel};

const DEADLINE: Duration = Duration::from_secs(90);
/// The broker's `group.consumer.heartbeat.interval.ms` in these tests.
const HEARTBEAT_INTERVAL_MS: u64 = 1_000;

/// Who owns which partition, as the members' rebalance callbacks report it, and every moment a
/// member was handed a partition another member still held.
#[derive(Default)]
struct Ledger {
    /// Assignments and revocations seen, over all members.
    events: usize,
    owners: BTreeMap<(String, i32), String>,
    /// When each partition was last revoked (for the unowned-gap measure).
    released_at: BTreeMap<(String, i32), Instant>,
    violations: Vec<String>,
    longest_gap: Duration,
    /// What librdkafka reported as errors (shown when a test fails).
    errors: Vec<String>,
}

struct Member {
    name: String,
    ledger: Arc<Mutex<Ledger>>,
}

impl ClientContext for Member {
    /// librdkafka's log, with the member's name (debug contexts are set by
    /// `RUNNEL_TEST_CLIENT_DEBUG`, e.g. `cgrp,protocol`, for classic members).
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= (rdkafka::config::RDKafkaLogLevel::Warning as i32)
            || std::env::var_os("RUNNEL_TEST_CLIENT_DEBUG").is_some()
        {
            eprintln!("{} {fac}: {message}", self.name);
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.ledger.lock().unwrap().errors.push(format!("{}: {error}: {reason}", self.name));
    }
}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut ledger = self.ledger.lock().unwrap();
        let now = Instant::now();
        ledger.events += 1;
        match rebalance {
            Rebalance::Assign(list) => {
                for e in list.elements() {
                    let key = (e.topic().to_string(), e.partition());
                    if let Some(other) = ledger.owners.get(&key).filter(|o| **o != self.name) {
                        let violation = format!("{key:?} assigned to {} while {other} owns it", self.name);
                        ledger.violations.push(violation);
                    }
                    if let Some(released) = ledger.released_at.remove(&key) {
                        let gap = now - released;
                        ledger.longest_gap = ledger.longest_gap.max(gap);
                    }
                    ledger.owners.insert(key, self.name.clone());
                }
            }
            Rebalance::Revoke(list) => {
                for e in list.elements() {
                    let key = (e.topic().to_string(), e.partition());
                    if ledger.owners.get(&key) == Some(&self.name) {
                        ledger.owners.remove(&key);
                        ledger.released_at.insert(key, now);
                    }
                }
            }
            Rebalance::Error(e) => ledger.violations.push(format!("{}: rebalance error {e}", self.name)),
        }
    }
}

/// A consumer-protocol member polling on its own thread until stopped; counts what it reads.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<BaseConsumer<Member>>>,
    consumed: Arc<AtomicU64>,
}

impl Running {
    fn start(consumer: BaseConsumer<Member>) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let consumed = Arc::new(AtomicU64::new(0));
        let (stop2, consumed2) = (stop.clone(), consumed.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
                    consumed2.fetch_add(1, Ordering::Relaxed);
                }
            }
            consumer
        });
        Running { stop, thread: Some(thread), consumed }
    }

    /// Stops polling and hands the consumer back (still a member until closed).
    fn stop(mut self) -> BaseConsumer<Member> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().expect("member thread")
    }
}

fn member(node: &Runnel, ledger: &Arc<Mutex<Ledger>>, name: &str, extra: &[(&str, &str)]) -> BaseConsumer<Member> {
    let mut settings = vec![
        ("group.protocol", "consumer"),
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "200"),
        ("auto.offset.reset", "earliest"),
    ];
    settings.extend_from_slice(extra);
    client_config(node, &settings)
        .create_with_context(Member { name: name.to_string(), ledger: ledger.clone() })
        .expect("consumer")
}

fn start_node() -> Runnel {
    Runnel::start(&["--group-consumer-heartbeat-interval-ms", &HEARTBEAT_INTERVAL_MS.to_string()])
}

/// Produces to `topic` until stopped.
fn background_producer(node: &Runnel, topic: &'static str) -> (Arc<AtomicBool>, JoinHandle<u64>) {
    let producer: BaseProducer = client_config(node, &[("linger.ms", "5")]).create().expect("producer");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut sent = 0u64;
        while !stop2.load(Ordering::Acquire) {
            let key = sent.to_string();
            if producer.send(BaseRecord::to(topic).key(&key).payload("x")).is_ok() {
                sent += 1;
            }
            producer.poll(Duration::from_millis(if sent.is_multiple_of(100) { 5 } else { 0 }));
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        sent
    });
    (stop, thread)
}

/// Waits until the ledger shows every partition of `topic` owned and the `members` balanced.
fn await_balanced(ledger: &Arc<Mutex<Ledger>>, topic: &str, partitions: i32, members: &[&str]) {
    let balanced = wait_until(DEADLINE, || {
        let ledger = ledger.lock().unwrap();
        assert!(ledger.violations.is_empty(), "ownership violated: {:?}", ledger.violations);
        let mut counts: BTreeMap<&str, usize> = members.iter().map(|m| (*m, 0)).collect();
        let mut owned = 0;
        for ((t, _), owner) in &ledger.owners {
            if t == topic {
                owned += 1;
                if let Some(c) = counts.get_mut(owner.as_str()) {
                    *c += 1;
                }
            }
        }
        let (min, max) = (counts.values().min().copied().unwrap_or(0), counts.values().max().copied().unwrap_or(0));
        owned == partitions && counts.values().sum::<usize>() == partitions as usize && max - min <= 1
    });
    assert!(balanced, "not balanced within {DEADLINE:?}: {:?}", ledger.lock().unwrap().owners);
}

#[test]
fn members_added_and_removed_one_by_one_under_load_never_share_a_partition() {
    // Proves KIP-848 reconciliation end to end with librdkafka: revocation before assignment
    // (no partition held by two members at any moment, from the members' own callbacks), a
    // balanced assignment after every join and leave, OffsetCommit v9 with member epochs
    // (auto-commit and a final sync commit), and no partition left unowned for long.
    let node = start_node();
    create_topic(&node, "events", 12);
    let (stop_producing, producer) = background_producer(&node, "events");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let names = ["m1", "m2", "m3", "m4"];
    let mut running: Vec<(&str, Running)> = Vec::new();
    for name in names {
        let consumer = member(&node, &ledger, name, &[("group.id", "reconcile")]);
        consumer.subscribe(&["events"]).expect("subscribe");
        running.push((name, Running::start(consumer)));
        let current: Vec<&str> = running.iter().map(|(n, _)| *n).collect();
        await_balanced(&ledger, "events", 12, &current);
    }
    while running.len() > 1 {
        let (name, member) = running.remove(0);
        let consumer = member.stop();
        // close: leaves the group (epoch -1), revoking its partitions through the callback.
        drop(consumer);
        let current: Vec<&str> = running.iter().map(|(n, _)| *n).collect();
        await_balanced(&ledger, "events", 12, &current);
        eprintln!("{name} left; rebalanced");
    }
    stop_producing.store(true, Ordering::Release);
    let produced = producer.join().expect("producer");
    let (_, last) = running.pop().unwrap();
    let consumed = last.consumed.clone();
    let consumer = last.stop();
    // An explicit commit of the member's positions always reaches the broker (a commit of the
    // stored offsets is a local no-op when auto-commit has already sent them all).
    let mut positions = rdkafka::TopicPartitionList::new();
    for e in consumer.position().expect("positions").elements() {
        if let rdkafka::Offset::Offset(offset) = e.offset() {
            positions.add_partition_offset(e.topic(), e.partition(), rdkafka::Offset::Offset(offset)).expect("add");
        }
    }
    assert!(positions.count() > 0, "the last member has no positions");
    let expected: BTreeMap<(String, i32), i64> = positions
        .elements()
        .iter()
        .filter_map(|e| e.offset().to_raw().map(|o| ((e.topic().to_string(), e.partition()), o)))
        .collect();
    consumer.commit(&positions, CommitMode::Sync).expect("a member's commit with its member epoch");
    let mut conn = coordinator_conn(&node, "reconcile");
    // Partitions without a position yet keep what earlier members committed: compare only these.
    let committed = committed_offsets(&mut conn, "reconcile");
    let of_positions: BTreeMap<(String, i32), i64> =
        expected.keys().filter_map(|k| committed.get(k).map(|o| (k.clone(), *o))).collect();
    assert_eq!(of_positions, expected, "committed offsets are the member's positions");
    let ledger = ledger.lock().unwrap();
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
    assert!(produced > 0 && consumed.load(Ordering::Relaxed) > 0, "produced {produced}, last member consumed nothing");
    eprintln!("longest time a revoked partition waited for its next owner: {:?}", ledger.longest_gap);
    // The next owner learns of a released partition at its next heartbeat; generous slack for
    // a debug build on a loaded machine (a stall would show as tens of seconds).
    assert!(
        ledger.longest_gap < Duration::from_millis(HEARTBEAT_INTERVAL_MS * 5),
        "a revoked partition waited {:?} for its next owner",
        ledger.longest_gap
    );
}

fn coordinator_conn(node: &Runnel, group: &str) -> RawConn {
    coordinator_of(node, group).1
}

/// The coordinator's node id of `group` as `node` answers FindCoordinator, and a connection to
/// `node` (the coordinator itself on a single node).
fn coordinator_of(node: &Runnel, group: &str) -> (i32, RawConn) {
    let mut conn = RawConn::open(node, "kip848-test");
    let mut coordinator = None;
    let found = wait_until(DEADLINE, || {
        let found = conn.call(
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]),
        );
        coordinator = found.coordinators.first().filter(|c| c.error_code == 0).map(|c| c.node_id.0);
        coordinator.is_some()
    });
    assert!(found, "no coordinator for {group}");
    (coordinator.expect("found"), conn)
}

/// The sum of `group`'s committed offsets over all its partitions.
fn committed_sum(conn: &mut RawConn, group: &str) -> i64 {
    committed_offsets(conn, group).values().map(|o| (*o).max(0)).sum()
}

/// `group`'s committed offset of every partition (OffsetFetch v8, all topics).
fn committed_offsets(conn: &mut RawConn, group: &str) -> BTreeMap<(String, i32), i64> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::OffsetFetchRequest;
    let group = OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(None);
    let fetched = conn.call(8, &OffsetFetchRequest::default().with_groups(vec![group]));
    fetched.groups[0]
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| ((t.name.to_string(), p.partition_index), p.committed_offset)))
        .collect()
}

fn describe(
    conn: &mut RawConn,
    group: &str,
) -> kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
    let response = conn.call(
        1,
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_string()))]),
    );
    response.groups.into_iter().next().expect("one group")
}

#[test]
fn a_static_member_gets_its_partitions_back_and_the_group_is_described() {
    // Proves static membership (KIP-345 on KIP-848): a member with group.instance.id that
    // closes leaves with epoch -2, its partitions wait for it, and a new process with the same
    // instance id gets exactly them; ConsumerGroupDescribe and ListGroups v5 show the group.
    let node = start_node();
    create_topic(&node, "static-topic", 6);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let a = member(&node, &ledger, "a", &[("group.id", "static"), ("group.instance.id", "instance-a")]);
    let b = member(&node, &ledger, "b", &[("group.id", "static"), ("group.instance.id", "instance-b")]);
    // One at a time (see `members_keep_their_epochs_and_partitions_through_a_coordinator_kill_9`).
    a.subscribe(&["static-topic"]).unwrap();
    let a = Running::start(a);
    await_balanced(&ledger, "static-topic", 6, &["a"]);
    b.subscribe(&["static-topic"]).unwrap();
    let b = Running::start(b);
    await_balanced(&ledger, "static-topic", 6, &["a", "b"]);
    let a_partitions: Vec<i32> = {
        let l = ledger.lock().unwrap();
        l.owners.iter().filter(|(_, o)| *o == "a").map(|((_, p), _)| *p).collect()
    };
    let mut conn = coordinator_conn(&node, "static");
    let described = describe(&mut conn, "static");
    assert_eq!(described.error_code, 0);
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.assignor_name.as_str(), "uniform");
    assert_eq!(described.members.len(), 2);
    let listed = conn.call(5, &ListGroupsRequest::default());
    let group = listed.groups.iter().find(|g| g.group_id.0.as_str() == "static").expect("listed");
    assert_eq!((group.group_type.as_str(), group.group_state.as_str()), ("consumer", "Stable"));
    // The HTTP API (and so the dashboard) shows the group with its members and assignor.
    let detail = support::HttpApi::new(&node).get("/v1/groups/static").json;
    assert_eq!(detail["protocol_type"], "consumer", "{detail}");
    assert_eq!(detail["protocol"], "uniform", "{detail}");
    assert_eq!(detail["members"].as_array().map(|m| m.len()), Some(2), "{detail}");

    drop(a.stop());
    // While instance-a is away its partitions are not reassigned: b keeps its three.
    let left = wait_until(DEADLINE, || describe(&mut conn, "static").members.iter().any(|m| m.member_epoch == -2));
    assert!(left, "instance-a never left statically: {:?}", describe(&mut conn, "static"));
    let a2 = member(&node, &ledger, "a", &[("group.id", "static"), ("group.instance.id", "instance-a")]);
    a2.subscribe(&["static-topic"]).unwrap();
    let a2 = Running::start(a2);
    await_balanced(&ledger, "static-topic", 6, &["a", "b"]);
    let again: Vec<i32> = {
        let l = ledger.lock().unwrap();
        l.owners.iter().filter(|(_, o)| *o == "a").map(|((_, p), _)| *p).collect()
    };
    assert_eq!(again, a_partitions, "the returning instance gets the same partitions");
    drop(a2.stop());
    drop(b.stop());
}

#[test]
fn a_regex_subscription_picks_up_topics_created_later_and_range_is_selectable() {
    // Proves SubscribedTopicRegex evaluated by the broker (a topic created after the
    // subscription is assigned) and group.remote.assignor selecting `range`; an unknown
    // assignor name is refused (UNSUPPORTED_ASSIGNOR) without disturbing the group.
    let node = start_node();
    create_topic(&node, "orders-eu", 2);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let m = member(&node, &ledger, "m", &[("group.id", "regex"), ("group.remote.assignor", "range")]);
    m.subscribe(&["^orders-.*"]).unwrap();
    let m = Running::start(m);
    await_balanced(&ledger, "orders-eu", 2, &["m"]);
    create_topic(&node, "orders-us", 3);
    create_topic(&node, "payments", 3);
    await_balanced(&ledger, "orders-us", 3, &["m"]);
    let mut conn = coordinator_conn(&node, "regex");
    let d = describe(&mut conn, "regex");
    assert_eq!(d.assignor_name.as_str(), "range");
    // librdkafka sends its patterns joined as one alternation: `(^orders-.*)`.
    let regex = d.members[0].subscribed_topic_regex.as_ref().map(|s| s.to_string()).unwrap_or_default();
    assert!(regex.contains("^orders-.*"), "{regex}");
    assert!(!ledger.lock().unwrap().owners.keys().any(|(t, _)| t == "payments"));

    let refused_errors = Arc::new(Mutex::new(Vec::new()));
    struct Errors(Arc<Mutex<Vec<String>>>);
    impl ClientContext for Errors {
        fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
            self.0.lock().unwrap().push(format!("{error}: {reason}"));
        }
    }
    impl ConsumerContext for Errors {}
    let unknown: BaseConsumer<Errors> = client_config(
        &node,
        &[("group.protocol", "consumer"), ("group.id", "regex"), ("group.remote.assignor", "no-such-assignor")],
    )
    .create_with_context(Errors(refused_errors.clone()))
    .expect("consumer");
    unknown.subscribe(&["orders-eu"]).unwrap();
    let deadline = Instant::now() + DEADLINE;
    while !refused_errors.lock().unwrap().iter().any(|e| e.to_lowercase().contains("assignor")) {
        let _ = unknown.poll(Duration::from_millis(50));
        assert!(Instant::now() < deadline, "no UNSUPPORTED_ASSIGNOR error: {:?}", refused_errors.lock().unwrap());
    }
    assert_eq!(describe(&mut conn, "regex").members.len(), 1, "the refused member never joined");
    drop(m.stop());
}

#[test]
fn members_keep_their_epochs_and_partitions_through_a_coordinator_kill_9() {
    // Proves the group's state is durable (KIP-848 records in __consumer_offsets, replicated):
    // after kill -9 of the coordinator the new one loads the group, the members heartbeat on
    // at their epochs without a rejoin (no assignment or revocation callback fires) and their
    // auto-commits (OffsetCommit v9, member epochs checked) land on the new coordinator.
    use support::cluster::Cluster;
    let mut cluster = Cluster::start(3, &["--group-consumer-heartbeat-interval-ms", "1000"]);
    let bootstrap = cluster.bootstrap();
    let config = |extra: &[(&str, &str)]| {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &bootstrap).set("broker.address.family", "v4");
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
    };
    {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = config(&[]).create().expect("admin");
        let topic = NewTopic::new("durable", 6, TopicReplication::Fixed(3));
        let done = support::block_on(admin.create_topics(&[topic], &AdminOptions::new())).expect("create");
        done.into_iter().for_each(|r| {
            r.expect("topic created");
        });
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let start_member = |name: &str| {
        let mut config = config(&[
            ("group.protocol", "consumer"),
            ("group.id", "durable"),
            ("enable.auto.commit", "true"),
            ("auto.commit.interval.ms", "200"),
            ("auto.offset.reset", "earliest"),
        ]);
        if let Ok(contexts) = std::env::var("RUNNEL_TEST_CLIENT_DEBUG") {
            config.set("debug", contexts).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
        }
        let consumer: BaseConsumer<Member> =
            config.create_with_context(Member { name: name.to_string(), ledger: ledger.clone() }).expect("consumer");
        consumer.subscribe(&["durable"]).unwrap();
        Running::start(consumer)
    };
    // One member at a time: a member joining while the other is still taking its first
    // assignment is another subject (librdkafka then reports owning nothing before it takes
    // that assignment; `group::consumer`'s `shows_released` and its unit test), this one is
    // failover.
    let a = start_member("a");
    await_balanced(&ledger, "durable", 6, &["a"]);
    let b = start_member("b");
    await_balanced(&ledger, "durable", 6, &["a", "b"]);
    let (coordinator, mut conn) = coordinator_of(cluster.node(1), "durable");
    let coordinator = coordinator as u64;
    if coordinator != 1 {
        conn = coordinator_of(cluster.node(coordinator), "durable").1;
    }
    let epochs = |d: &kafka_protocol::messages::consumer_group_describe_response::DescribedGroup| {
        let mut e: Vec<(String, i32)> = d.members.iter().map(|m| (m.member_id.to_string(), m.member_epoch)).collect();
        e.sort();
        e
    };
    let before = describe(&mut conn, "durable");
    assert_eq!(before.group_state.as_str(), "Stable", "{before:?}");
    let events_before = ledger.lock().unwrap().events;

    cluster.kill9(coordinator);
    let survivor = if coordinator == 1 { 2 } else { 1 };
    // The new coordinator has the group, members and epochs as they were.
    let mut restored = None;
    let moved = wait_until(DEADLINE, || {
        let (id, _) = coordinator_of(cluster.node(survivor), "durable");
        if id as u64 == coordinator {
            return false;
        }
        let mut conn = coordinator_of(cluster.node(id as u64), "durable").1;
        let d = describe(&mut conn, "durable");
        if d.error_code != 0 {
            return false;
        }
        assert_eq!(epochs(&d), epochs(&before), "restored members: {d:?}");
        restored = Some((id as u64, conn));
        true
    });
    assert!(moved, "no new coordinator with the group");
    let (new_coordinator, mut conn) = restored.expect("restored");
    // Records produced now are consumed and committed through the new coordinator, which
    // checks the members' epochs.
    let producer: BaseProducer = config(&[("acks", "all")]).create().expect("producer");
    for i in 0..600 {
        let key = i.to_string();
        producer.send(BaseRecord::to("durable").key(&key).payload("after")).expect("queued");
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let committed = wait_until(DEADLINE, || committed_sum(&mut conn, "durable") >= 600);
    if !committed {
        let d = describe(&mut conn, "durable");
        panic!(
            "commits on node {new_coordinator} reached only {}; consumed {} + {}; client errors {:?}; group {d:?}",
            committed_sum(&mut conn, "durable"),
            a.consumed.load(Ordering::Relaxed),
            b.consumed.load(Ordering::Relaxed),
            ledger.lock().unwrap().errors,
        );
    }
    let after = describe(&mut conn, "durable");
    assert_eq!(epochs(&after), epochs(&before), "{after:?}");
    let ledger_now = ledger.lock().unwrap();
    assert_eq!(ledger_now.events, events_before, "a member rejoined: its partitions were revoked or reassigned");
    assert!(ledger_now.violations.is_empty(), "{:?}", ledger_now.violations);
    drop(ledger_now);
    drop(a.stop());
    drop(b.stop());
}

/// A classic-protocol member (librdkafka's cooperative-sticky, as a rolling upgrade starts).
fn classic_member(node: &Runnel, ledger: &Arc<Mutex<Ledger>>, name: &str, group: &str) -> BaseConsumer<Member> {
    classic_member_with(node, ledger, name, &[("group.id", group)])
}

fn classic_member_with(
    node: &Runnel,
    ledger: &Arc<Mutex<Ledger>>,
    name: &str,
    extra: &[(&str, &str)],
) -> BaseConsumer<Member> {
    let mut settings = vec![
        ("group.protocol", "classic"),
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "300"),
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "200"),
        ("auto.offset.reset", "earliest"),
    ];
    settings.extend_from_slice(extra);
    let mut config = client_config(node, &settings);
    if let Ok(contexts) = std::env::var("RUNNEL_TEST_CLIENT_DEBUG") {
        config.set("debug", contexts).set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    config.create_with_context(Member { name: name.to_string(), ledger: ledger.clone() }).expect("classic consumer")
}

/// Takes a classic member out of the group: it unsubscribes (revoking through its callback,
/// served by polling) and leaves. The client itself is not destroyed: librdkafka 2.12's
/// `rd_kafka_destroy` of a classic member that went through an online downgrade waits forever
/// on its own main thread after the group sub-system terminated (every request it sent was
/// answered; seen with cooperative-sticky and range alike, not with members that never
/// migrated), so it is leaked until the test process ends.
fn leave_classic(consumer: BaseConsumer<Member>, ledger: &Arc<Mutex<Ledger>>, name: &str) {
    consumer.unsubscribe();
    let released = wait_until(DEADLINE, || {
        let _ = consumer.poll(Duration::from_millis(50));
        !ledger.lock().unwrap().owners.values().any(|owner| owner == name)
    });
    assert!(released, "{name} never revoked its partitions");
    std::mem::forget(consumer);
}

/// The group's type and state as ListGroups v5 reports them.
fn listed(conn: &mut RawConn, group: &str) -> Option<(String, String)> {
    let listed = conn.call(5, &ListGroupsRequest::default());
    listed
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == group)
        .map(|g| (g.group_type.to_string(), g.group_state.to_string()))
}

#[test]
fn a_rolling_upgrade_and_rollback_mixes_both_protocols_in_one_group() {
    // Proves KIP-848's online migration with librdkafka: two classic (cooperative-sticky)
    // members form a classic group; a consumer-protocol member joining upgrades it in place
    // (the classic members stay, as classic members of the consumer group, and reconcile by
    // rejoining); when the consumer-protocol member leaves, the group goes back to a classic
    // group and rebalances. Under load, no partition is ever held by two members (the members'
    // own callbacks), every phase ends balanced, and the classic members' commits are accepted.
    let node = start_node();
    create_topic(&node, "rolling", 8);
    let (stop_producing, producer) = background_producer(&node, "rolling");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut classic = Vec::new();
    for name in ["c1", "c2"] {
        let consumer = classic_member(&node, &ledger, name, "rolling-group");
        consumer.subscribe(&["rolling"]).expect("subscribe");
        classic.push(Running::start(consumer));
    }
    await_balanced(&ledger, "rolling", 8, &["c1", "c2"]);
    let mut conn = coordinator_conn(&node, "rolling-group");
    assert_eq!(listed(&mut conn, "rolling-group").map(|(t, _)| t), Some("classic".to_string()));

    // The upgrade: the first consumer-protocol member turns the group into a consumer group.
    let k1 = member(&node, &ledger, "k1", &[("group.id", "rolling-group")]);
    k1.subscribe(&["rolling"]).expect("subscribe");
    let k1 = Running::start(k1);
    await_balanced(&ledger, "rolling", 8, &["c1", "c2", "k1"]);
    let described = describe(&mut conn, "rolling-group");
    assert_eq!(described.error_code, 0, "{described:?}");
    let mut types: Vec<i8> = described.members.iter().map(|m| m.member_type).collect();
    types.sort();
    assert_eq!(types, vec![0, 0, 1], "two classic members and one consumer-protocol member: {described:?}");
    // The HTTP API (and the dashboard) says which members are still on the classic protocol.
    let detail = support::HttpApi::new(&node).get("/v1/groups/rolling-group").json;
    let mut protocols: Vec<&str> =
        detail["members"].as_array().expect("members").iter().filter_map(|m| m["protocol"].as_str()).collect();
    protocols.sort();
    assert_eq!(protocols, ["classic", "classic", "consumer"], "{detail}");
    assert_eq!(listed(&mut conn, "rolling-group").map(|(t, _)| t), Some("consumer".to_string()));

    // The rollback: the consumer-protocol member leaves; only classic members remain.
    drop(k1.stop());
    let downgraded = wait_until(DEADLINE, || listed(&mut conn, "rolling-group").is_some_and(|(t, _)| t == "classic"));
    assert!(downgraded, "the group never went back to classic: {:?}", listed(&mut conn, "rolling-group"));
    await_balanced(&ledger, "rolling", 8, &["c1", "c2"]);
    let c2 = classic.pop().unwrap().stop();
    let positions = c2.position().expect("positions");
    let mut committed = rdkafka::TopicPartitionList::new();
    for e in positions.elements() {
        if let rdkafka::Offset::Offset(offset) = e.offset() {
            committed.add_partition_offset(e.topic(), e.partition(), rdkafka::Offset::Offset(offset)).expect("add");
        }
    }
    if committed.count() > 0 {
        c2.commit(&committed, CommitMode::Sync).expect("a classic member's commit after the rollback");
    }
    leave_classic(c2, &ledger, "c2");
    await_balanced(&ledger, "rolling", 8, &["c1"]);
    for running in classic {
        leave_classic(running.stop(), &ledger, "c1");
    }
    let empty = wait_until(DEADLINE, || listed(&mut conn, "rolling-group").is_some_and(|(_, state)| state == "Empty"));
    assert!(empty, "the members never left: {:?}", listed(&mut conn, "rolling-group"));
    stop_producing.store(true, Ordering::Release);
    assert!(producer.join().expect("producer") > 0);
    let ledger = ledger.lock().unwrap();
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
}

#[test]
fn a_classic_pod_replacing_the_last_consumer_protocol_static_member_rolls_the_group_back() {
    // Proves Kafka's downgrade on a static member's replacement
    // (`validateOnlineDowngradeWithReplacedMemberId`): a rollback restarts the one
    // consumer-protocol static member (`group.instance.id` pod-0) on the classic protocol; its
    // classic join takes the group back to a classic group, where it and the classic member
    // that was there share the partitions. No partition is ever held by two members.
    let node = start_node();
    create_topic(&node, "static-rollback", 8);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let group = ("group.id", "static-rollback-group");
    let c1 = classic_member_with(&node, &ledger, "c1", &[group]);
    c1.subscribe(&["static-rollback"]).expect("subscribe");
    let c1 = Running::start(c1);
    await_balanced(&ledger, "static-rollback", 8, &["c1"]);
    let k1 = member(&node, &ledger, "k1", &[group, ("group.instance.id", "pod-0")]);
    k1.subscribe(&["static-rollback"]).expect("subscribe");
    let k1 = Running::start(k1);
    await_balanced(&ledger, "static-rollback", 8, &["c1", "k1"]);
    let mut conn = coordinator_conn(&node, "static-rollback-group");
    assert_eq!(listed(&mut conn, "static-rollback-group").map(|(t, _)| t), Some("consumer".to_string()));

    // The pod goes down (a static member's close leaves with epoch -2: it stays a member, its
    // partitions kept for it) and comes back on the classic protocol under the same instance.
    drop(k1.stop());
    let c2 = classic_member_with(&node, &ledger, "c2", &[group, ("group.instance.id", "pod-0")]);
    c2.subscribe(&["static-rollback"]).expect("subscribe");
    let c2 = Running::start(c2);
    let downgraded =
        wait_until(DEADLINE, || listed(&mut conn, "static-rollback-group").is_some_and(|(t, _)| t == "classic"));
    assert!(downgraded, "the group stayed: {:?}", listed(&mut conn, "static-rollback-group"));
    await_balanced(&ledger, "static-rollback", 8, &["c1", "c2"]);
    leave_classic(c2.stop(), &ledger, "c2");
    leave_classic(c1.stop(), &ledger, "c1");
    let ledger = ledger.lock().unwrap();
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
}

/// Sets `__consumer_offsets`' `min.insync.replicas` (IncrementalAlterConfigs SET).
fn set_offsets_min_isr(conn: &mut RawConn, value: &str) {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let config = AlterableConfig::default()
        .with_name(StrBytes::from_static_str("min.insync.replicas"))
        .with_config_operation(0)
        .with_value(Some(StrBytes::from_string(value.to_string())));
    let resource = AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("__consumer_offsets"))
        .with_configs(vec![config]);
    let altered = conn.call(1, &IncrementalAlterConfigsRequest::default().with_resources(vec![resource]));
    assert!(altered.responses.iter().all(|r| r.error_code == 0), "{altered:?}");
}

/// A ConsumerGroupHeartbeat v1 join (member epoch 0) of `member` to `group` for `topic`.
fn join_heartbeat(
    conn: &mut RawConn,
    group: &str,
    member: &str,
    topic: &str,
) -> kafka_protocol::messages::ConsumerGroupHeartbeatResponse {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, TopicName};
    conn.call(
        1,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(topic.to_string()))]))
            .with_topic_partitions(Some(Vec::new())),
    )
}

#[test]
fn a_group_change_that_does_not_reach_the_log_is_not_kept_in_memory() {
    // Proves the coordinator's memory is never ahead of __consumer_offsets past a failed
    // write: with the offsets topic's min.insync.replicas above its replicas, a second member's
    // join cannot be stored (answered as an error); the coordinator then reads the group again
    // from the log, so the group is described as the log has it (one member, epoch 1), not
    // with the member whose join was never stored, and goes on from there once writes work.
    let node = start_node();
    create_topic(&node, "unstored", 4);
    let mut conn = coordinator_conn(&node, "unstored-group");
    let first = join_heartbeat(&mut conn, "unstored-group", "member-a", "unstored");
    assert_eq!((first.error_code, first.member_epoch), (0, 1), "{first:?}");

    set_offsets_min_isr(&mut conn, "2");
    let refused = join_heartbeat(&mut conn, "unstored-group", "member-b", "unstored");
    assert_ne!(refused.error_code, 0, "a join that could not be stored was answered as joined: {refused:?}");
    set_offsets_min_isr(&mut conn, "1");

    let mut described = None;
    let settled = wait_until(DEADLINE, || {
        let group = describe(&mut conn, "unstored-group");
        let done = group.error_code == 0;
        described = Some(group);
        done
    });
    let described = described.expect("described");
    assert!(settled, "never described: {described:?}");
    let members: Vec<&str> = described.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(members, vec!["member-a"], "memory kept the unstored join: {described:?}");
    assert_eq!(described.group_epoch, 1, "{described:?}");

    let again =
        wait_until(DEADLINE, || join_heartbeat(&mut conn, "unstored-group", "member-b", "unstored").error_code == 0);
    assert!(again, "member-b cannot join once writes work");
    let described = describe(&mut conn, "unstored-group");
    assert_eq!(described.members.len(), 2, "{described:?}");
    assert_eq!(described.group_epoch, 2, "{described:?}");
}

#[test]
fn a_disabled_migration_policy_keeps_a_classic_group_with_members_classic() {
    // Proves group.consumer.migration.policy=disabled: a consumer-protocol join to a classic
    // group with members is refused with GROUP_ID_NOT_FOUND and the reason (Kafka's answer when
    // it cannot convert), and the classic members keep their partitions.
    let node = Runnel::start(&["--group-consumer-migration-policy", "disabled"]);
    create_topic(&node, "no-migration", 4);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let consumer = classic_member(&node, &ledger, "c1", "kept-classic");
    consumer.subscribe(&["no-migration"]).expect("subscribe");
    let c1 = Running::start(consumer);
    await_balanced(&ledger, "no-migration", 4, &["c1"]);
    let mut conn = coordinator_conn(&node, "kept-classic");
    let refused = conn.call(
        0,
        &kafka_protocol::messages::ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("kept-classic")))
            .with_member_id(StrBytes::from_static_str("k1-member"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![kafka_protocol::messages::TopicName(StrBytes::from_static_str(
                "no-migration",
            ))])),
    );
    assert_eq!(refused.error_code, kafka_protocol::ResponseError::GroupIdNotFound.code(), "{refused:?}");
    let message = refused.error_message.as_deref().map(|m| m.to_string()).unwrap_or_default();
    assert!(message.contains("group.consumer.migration.policy"), "{message}");
    assert_eq!(listed(&mut conn, "kept-classic").map(|(t, _)| t), Some("classic".to_string()));
    assert_eq!(ledger.lock().unwrap().owners.len(), 4, "the classic member kept its partitions");
    drop(c1.stop());
}

#[test]
fn an_empty_consumer_group_goes_with_its_last_expired_offset_and_its_id_starts_afresh() {
    // Proves Kafka's cleanupGroupMetadata for consumer-protocol groups: once the last member
    // left and the group's offsets expired (offsets.retention.minutes after their commit), the
    // group itself is deleted: ListGroups no longer lists it, ConsumerGroupDescribe does not
    // know it, and a member that joins the id later starts a new group at epoch 1. Before,
    // the Empty group and its records stayed forever.
    let node = Runnel::start(&[
        "--group-consumer-heartbeat-interval-ms",
        &HEARTBEAT_INTERVAL_MS.to_string(),
        "--offsets-retention-minutes",
        "0",
        "--housekeeping-interval-ms",
        "50",
    ]);
    create_topic(&node, "short-lived", 2);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let first = member(&node, &ledger, "first", &[("group.id", "fleeting"), ("enable.auto.commit", "false")]);
    first.subscribe(&["short-lived"]).expect("subscribe");
    let first = Running::start(first);
    await_balanced(&ledger, "short-lived", 2, &["first"]);
    let mut conn = coordinator_conn(&node, "fleeting");
    assert_eq!(listed(&mut conn, "fleeting").map(|(kind, _)| kind).as_deref(), Some("consumer"));
    assert_eq!(delete_group(&mut conn, "fleeting"), 68, "NON_EMPTY_GROUP while it has a member");
    let first = first.stop();
    let mut position = rdkafka::TopicPartitionList::new();
    position.add_partition_offset("short-lived", 0, rdkafka::Offset::Offset(0)).expect("add");
    first.commit(&position, CommitMode::Sync).expect("the member's commit");
    let left_at = describe(&mut conn, "fleeting").group_epoch;
    drop(first); // leaves (epoch -1): the group is Empty
    let gone = wait_until(DEADLINE, || listed(&mut conn, "fleeting").is_none());
    assert!(gone, "the Empty consumer group is never deleted: {:?}", listed(&mut conn, "fleeting"));
    assert!(committed_offsets(&mut conn, "fleeting").is_empty(), "its offsets went with it");
    assert_eq!(describe(&mut conn, "fleeting").error_code, 69, "GROUP_ID_NOT_FOUND once deleted");
    assert_eq!(delete_group(&mut conn, "fleeting"), 69, "DeleteGroups: GROUP_ID_NOT_FOUND too");

    let again = member(&node, &ledger, "again", &[("group.id", "fleeting")]);
    again.subscribe(&["short-lived"]).expect("subscribe");
    let again = Running::start(again);
    await_balanced(&ledger, "short-lived", 2, &["again"]);
    let epoch = describe(&mut conn, "fleeting").group_epoch;
    assert!(epoch == 1 && left_at >= 1, "a new group starts at epoch 1 (the old one was at {left_at}): {epoch}");
    drop(again.stop());
}

/// DeleteGroups v2 of one group: its error code.
fn delete_group(conn: &mut RawConn, group: &str) -> i16 {
    let response = conn.call(
        2,
        &kafka_protocol::messages::DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(StrBytes::from_string(group.to_string()))]),
    );
    response.results[0].error_code
}
