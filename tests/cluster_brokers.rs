//! Broker-only nodes (issue 11, `--process-roles broker`): a node that is not a voter of the
//! metadata quorum but an observer of it (an openraft learner) still registers, hosts replicas,
//! serves clients, is fenced and rejoins like any broker, and follows the quorum through a change
//! of active controller, while the quorum stays the configured voters.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::checker::{Checker, Duplicates};
use support::cluster::Cluster;
use support::workload::{self, PartitionState};
use support::{wait_until, HttpApi, Runnel};

const VOTERS: u64 = 3;
/// Any wait for the cluster (a registration, an election, a restart catching up).
const DEADLINE: Duration = Duration::from_secs(30);
const TOPIC: &str = "observed";
const PARTITIONS: i32 = 4;

fn cluster_view(node: &Runnel) -> Value {
    HttpApi::new(node).get("/v1/cluster").json
}

/// The `/v1/cluster` entry of node `id` as `view` lists it.
fn node_entry(view: &Value, id: u64) -> Option<&Value> {
    view["nodes"].as_array()?.iter().find(|n| n["node_id"].as_u64() == Some(id))
}

fn voters_of(view: &Value) -> Vec<u64> {
    view["voters"].as_array().map(|v| v.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
}

fn states(bootstrap: &str) -> Vec<PartitionState> {
    workload::partition_states(bootstrap, TOPIC).unwrap_or_default()
}

/// Waits until `topic`'s metadata as `bootstrap` answers it satisfies `ok`; panics with `what`.
fn wait_for_states(bootstrap: &str, what: &str, ok: impl Fn(&[PartitionState]) -> bool) -> Vec<PartitionState> {
    let mut seen = Vec::new();
    let held = wait_until(DEADLINE, || {
        seen = states(bootstrap);
        seen.len() == PARTITIONS as usize && ok(&seen)
    });
    assert!(held, "{what} within {DEADLINE:?}; last metadata: {seen:?}");
    seen
}

/// One acks=all record to every partition of `TOPIC`, each acknowledged within the deadline.
fn write_every_partition(bootstrap: &str, checker: &Arc<Checker>) {
    let producer = workload::probe_producer(bootstrap, checker);
    for partition in 0..PARTITIONS {
        let value = checker.next_value();
        if let Err(e) = workload::produce_one(&producer, TOPIC, partition, &value, DEADLINE) {
            panic!("acks=all write to {TOPIC}-{partition} through {bootstrap} failed: {e}");
        }
    }
}

// Proves a broker-only node joins 3 voters as an observer, registers and is unfenced, hosts
// replicas and leaderships of an RF 3 topic, takes acks=all writes and reads through librdkafka,
// is fenced on kill -9 (its leaderships move, writes continue) and rejoins every ISR on restart,
// follows a new active controller after kill -9 of the old one, and never becomes a voter.
#[test]
fn a_broker_only_node_hosts_replicas_and_follows_the_quorum_without_voting() {
    let started = Instant::now();
    let mut cluster = Cluster::start(VOTERS, &[]);
    let observer = cluster.add_broker_only(&[]);
    assert_eq!(observer, VOTERS + 1);
    let voters: Vec<u64> = cluster.voter_ids();
    let observer_bootstrap = cluster.node(observer).bootstrap();

    // Registered and unfenced, seen as a broker alone, the quorum unchanged: as every node sees it.
    for id in cluster.ids() {
        let node = cluster.node(id);
        let mut view = Value::Null;
        let held = wait_until(DEADLINE, || {
            view = cluster_view(node);
            node_entry(&view, observer).is_some_and(|n| n["state"] == "live")
                && view["nodes"].as_array().is_some_and(|n| n.len() == cluster.nodes.len())
        });
        assert!(held, "node {id} did not list the broker-only node as live: {view}");
        assert_eq!(voters_of(&view), voters, "node {id}: the quorum's voters changed: {view}");
        assert_eq!(node_entry(&view, observer).unwrap()["roles"], serde_json::json!(["broker"]), "{view}");
        for &voter in &voters {
            assert_eq!(node_entry(&view, voter).unwrap()["roles"], serde_json::json!(["broker", "controller"]));
        }
        assert_ne!(view["controller_id"].as_u64(), Some(observer), "an observer became controller: {view}");
    }
    let mut brokers = None;
    assert!(
        wait_until(DEADLINE, || {
            brokers = workload::broker_count(&observer_bootstrap);
            brokers == Some(cluster.nodes.len())
        }),
        "Metadata through the broker-only node lists {brokers:?} brokers"
    );

    // Created through the observer (the proposal is forwarded to the active controller), placed
    // over all four brokers: each hosts three replicas and leads one partition.
    workload::create_topic(&observer_bootstrap, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")])
        .expect("create topic through the broker-only node");
    let placed = wait_for_states(&observer_bootstrap, "full ISRs with leaders", |states| {
        states.iter().all(|s| s.leader.is_some() && s.isr.len() == 3)
    });
    let hosted = placed.iter().filter(|s| s.replicas.contains(&observer)).count();
    let led = placed.iter().filter(|s| s.leader == Some(observer)).count();
    assert!(hosted >= 2 && led >= 1, "the broker-only node hosts {hosted} and leads {led}: {placed:?}");

    let checker = Arc::new(Checker::new(0, Duplicates::Allowed));
    write_every_partition(&observer_bootstrap, &checker);

    // kill -9 of the broker-only node: fenced, out of every ISR, no leaderships; writes go on.
    cluster.kill9(observer);
    let voter_bootstrap = voters.iter().map(|&v| cluster.node(v).bootstrap()).collect::<Vec<_>>().join(",");
    let mut view = Value::Null;
    let fenced = wait_until(DEADLINE, || {
        view = cluster_view(cluster.node(voters[0]));
        node_entry(&view, observer).is_some_and(|n| n["state"] == "fenced")
    });
    assert!(fenced, "the killed broker-only node was not fenced: {view}");
    wait_for_states(&voter_bootstrap, "leaderships and ISRs without the killed node", |states| {
        states.iter().all(|s| s.leader.is_some_and(|l| l != observer) && !s.isr.contains(&observer))
    });
    write_every_partition(&voter_bootstrap, &checker);
    assert_eq!(voters_of(&cluster_view(cluster.node(voters[0]))), voters);

    // Restarted: it catches up (its metadata copy survived in metadata/) and rejoins every ISR.
    cluster.restart(observer);
    wait_for_states(&observer_bootstrap, "full ISRs after the restart", |states| {
        states.iter().all(|s| s.isr.len() == 3)
    });

    // kill -9 of the active controller while the broker-only node stays: it follows the new one.
    let controller = cluster_view(cluster.node(observer))["controller_id"].as_u64().expect("a controller");
    assert!(voters.contains(&controller), "controller {controller} is not a voter");
    cluster.kill9(controller);
    let mut view = Value::Null;
    let moved = wait_until(DEADLINE, || {
        view = cluster_view(cluster.node(observer));
        view["controller_id"].as_u64().is_some_and(|c| c != controller)
    });
    assert!(moved, "the broker-only node did not learn a new controller: {view}");
    assert_eq!(voters_of(&view), voters, "a controller change altered the voters: {view}");
    // Placement uses live brokers only: create once the killed controller is fenced.
    let fenced = wait_until(DEADLINE, || {
        view = cluster_view(cluster.node(observer));
        node_entry(&view, controller).is_some_and(|n| n["state"] == "fenced")
    });
    assert!(fenced, "the killed controller {controller} was not fenced: {view}");
    let later = "created-after-failover";
    workload::create_topic(&observer_bootstrap, later, 2, 2, &[]).expect("create a topic after the failover");
    let mut seen = None;
    assert!(
        wait_until(DEADLINE, || {
            seen = workload::partition_states(&observer_bootstrap, later);
            seen.as_ref().is_some_and(|s| s.len() == 2 && s.iter().all(|p| p.leader.is_some()))
        }),
        "the broker-only node's Metadata does not show {later}: {seen:?}"
    );
    let survivors: BTreeSet<u64> = cluster.ids().filter(|&id| id != controller).collect();
    for &id in &survivors {
        let view = cluster_view(cluster.node(id));
        assert_eq!(voters_of(&view), voters, "node {id}: {view}");
        assert!(view["controller_id"].as_u64().is_some_and(|c| c != observer), "node {id}: {view}");
    }

    // Every acknowledged write is still there (a librdkafka read from the log start).
    let alive = survivors.iter().map(|&id| cluster.node(id).bootstrap()).collect::<Vec<_>>().join(",");
    let problems = workload::final_read(&alive, TOPIC, &checker, DEADLINE);
    assert!(problems.is_empty(), "{problems:?}");
    checker.assert_clean();
    eprintln!("broker-only node scenario took {:?}", started.elapsed());
}

// Proves a broker-only node that loses its whole data dir (its copy of the metadata log
// included: an observer holds no vote, so losing its log is safe) comes back with only the
// cluster id, catches up the metadata from the quorum, re-replicates its partitions and rejoins
// every ISR, and no acknowledged write is lost.
#[test]
fn a_broker_only_node_that_loses_its_whole_data_dir_rejoins() {
    let mut cluster = Cluster::start(VOTERS, &[]);
    let observer = cluster.add_broker_only(&[]);
    let voters: Vec<u64> = cluster.voter_ids();
    let voter_bootstrap = voters.iter().map(|&v| cluster.node(v).bootstrap()).collect::<Vec<_>>().join(",");
    assert!(wait_until(DEADLINE, || workload::broker_count(&voter_bootstrap) == Some(cluster.nodes.len())));
    workload::create_topic(&voter_bootstrap, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]).expect("create");
    let placed =
        wait_for_states(&voter_bootstrap, "full ISRs", |s| s.iter().all(|p| p.leader.is_some() && p.isr.len() == 3));
    assert!(placed.iter().any(|p| p.replicas.contains(&observer)), "the observer hosts replicas: {placed:?}");
    let checker = Arc::new(Checker::new(0, Duplicates::Allowed));
    for _ in 0..5 {
        write_every_partition(&voter_bootstrap, &checker);
    }

    cluster.kill9(observer);
    let data_dir = cluster.node(observer).data_dir.clone();
    let meta = std::fs::read_to_string(data_dir.join("meta.properties")).expect("meta.properties");
    let cluster_id = meta.lines().find_map(|l| l.strip_prefix("cluster.id=")).expect("cluster.id").trim().to_string();
    for entry in std::fs::read_dir(&data_dir).expect("data dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("remove");
        } else {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    assert!(!data_dir.join("metadata").exists());
    write_every_partition(&voter_bootstrap, &checker);
    cluster.node_mut(observer).restart_on_same_ports(&["--cluster-id", &cluster_id]);

    let observer_bootstrap = cluster.node(observer).bootstrap();
    wait_for_states(&observer_bootstrap, "full ISRs after the wiped observer rejoined", |states| {
        states.iter().all(|s| s.leader.is_some() && s.isr.len() == 3)
    });
    assert_eq!(voters_of(&cluster_view(cluster.node(observer))), voters, "still an observer, the quorum unchanged");
    write_every_partition(&observer_bootstrap, &checker);
    // Read everything through the observer alone where it leads, and through all nodes.
    let problems = workload::final_read(&cluster.bootstrap(), TOPIC, &checker, DEADLINE);
    assert!(problems.is_empty(), "{problems:?}");
    checker.assert_clean();
}

// Proves a second process started with a live broker's node id (its own data dir and ports) is
// refused, as Kafka refuses it (DUPLICATE_BROKER_REGISTRATION): it exits with the reason, and the
// first keeps its registration, its endpoint and its metadata stream (it still sees a topic
// created afterwards). Before, the second took the id's membership address and registration.
#[test]
fn a_second_process_with_a_live_brokers_node_id_is_refused_and_the_first_serves_on() {
    let mut cluster = Cluster::start(VOTERS, &[]);
    let observer = cluster.add_broker_only(&[]);
    let voter = cluster.node(1);
    let live_entry = |view: &Value| node_entry(view, observer).filter(|n| n["state"] == "live").cloned();
    let mut before = None;
    assert!(
        wait_until(DEADLINE, || {
            before = live_entry(&cluster_view(voter));
            before.is_some()
        }),
        "the broker-only node registers"
    );
    let temp = tempfile::tempdir().expect("temp dir");
    let binary = std::env::var_os("RUNNEL_TEST_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_runnel").into());
    let mut duplicate = std::process::Command::new(binary);
    duplicate
        .args(["serve", "--node-id", &observer.to_string(), "--process-roles", "broker"])
        .args(["--voters", &cluster.voters_flag()])
        .args(["--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--controller-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(temp.path().join("data"));
    let (status, stderr) = support::run_until_exit(duplicate, Duration::from_secs(60));
    let status = status.unwrap_or_else(|| panic!("a second process with node id {observer} kept running: {stderr}"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("registered by another process"), "a clear reason: {stderr}");

    let after = live_entry(&cluster_view(voter));
    assert_eq!(after, before, "the first process keeps its registration and endpoint");
    workload::create_topic(&cluster.node(1).bootstrap(), "after-duplicate", 1, 3, &[]).expect("create topic");
    let observer_node = cluster.node(observer);
    assert!(
        wait_until(DEADLINE, || HttpApi::new(observer_node).get("/v1/topics/after-duplicate").status == 200),
        "the first process still follows the metadata quorum"
    );
}
