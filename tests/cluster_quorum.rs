//! The metadata quorum of a three-node cluster of real `runnel` processes (`support::cluster`):
//! it survives kill -9 of the active controller and the isolation of a node (raft links cut by
//! the fixture's proxies), an isolated node cannot change metadata, and every node converges on
//! the same topics once healed and restarted; a node's directories are its own (a second
//! process on them refuses to start). Partition replication is tested in `cluster_replication`.

mod support;

use std::time::Duration;

use serde_json::json;
use support::cluster::Cluster;
use support::HttpApi;

const DEADLINE: Duration = Duration::from_secs(60);

fn api(cluster: &Cluster, id: u64) -> HttpApi {
    HttpApi::new(cluster.node(id))
}

/// The active controller as `id` sees it.
fn controller_seen_by(cluster: &Cluster, id: u64) -> Option<u64> {
    api(cluster, id).get("/v1/cluster").json["controller_id"].as_u64()
}

fn topic_names(cluster: &Cluster, id: u64) -> Vec<String> {
    let answer = api(cluster, id).get("/v1/topics");
    let mut names: Vec<String> = answer.json["topics"]
        .as_array()
        .map_or_else(Vec::new, |topics| topics.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect());
    names.sort();
    names
}

fn wait_for_topic(cluster: &Cluster, id: u64, topic: &str) {
    let seen = support::wait_until(DEADLINE, || api(cluster, id).get(&format!("/v1/topics/{topic}")).status == 200);
    assert!(seen, "node {id} never saw topic {topic}");
}

fn create(cluster: &Cluster, id: u64, topic: &str) -> u16 {
    api(cluster, id).post("/v1/topics", &json!({"name": topic, "partitions": 1, "replication_factor": 1})).status
}

#[test]
fn metadata_survives_kill_9_of_the_active_controller() {
    // Proves a 3-voter quorum keeps accepting and replicating metadata after its leader dies.
    let mut cluster = Cluster::start(3, &[]);
    assert_eq!(create(&cluster, 1, "before"), 201);
    for id in cluster.ids() {
        wait_for_topic(&cluster, id, "before");
    }
    let leader = controller_seen_by(&cluster, 1).expect("a controller");
    cluster.node_mut(leader).kill9();
    let survivors: Vec<u64> = cluster.ids().filter(|&id| id != leader).collect();
    let new_leader =
        support::wait_until(DEADLINE, || controller_seen_by(&cluster, survivors[0]).is_some_and(|c| c != leader));
    assert!(new_leader, "no new controller after kill -9 of {leader}");
    assert_eq!(create(&cluster, survivors[0], "after"), 201);
    wait_for_topic(&cluster, survivors[1], "after");
    cluster.node_mut(leader).restart();
    wait_for_topic(&cluster, leader, "after");
    let expected = topic_names(&cluster, survivors[0]);
    for id in cluster.ids() {
        assert_eq!(topic_names(&cluster, id), expected, "node {id}");
    }
}

#[test]
fn a_node_restarting_while_the_active_controller_is_paused_becomes_ready() {
    // Proves a restarting voter whose stored vote names a controller that is SIGSTOPped (its
    // socket accepts and never answers) still catches up, with the controller the other two
    // elect, within the start timeout, and can change metadata through it.
    let mut cluster = Cluster::start(3, &[]);
    let controller = controller_seen_by(&cluster, 1).expect("a controller");
    let restarting = cluster.ids().find(|&id| id != controller).expect("another node");
    cluster.kill9(restarting);
    cluster.sigstop(controller);
    // Panics unless the node prints READY within the fixture's start timeout.
    cluster.restart(restarting);
    let moved =
        support::wait_until(DEADLINE, || controller_seen_by(&cluster, restarting).is_some_and(|c| c != controller));
    assert!(moved, "the restarted node follows a new controller");
    assert_eq!(create(&cluster, restarting, "while-paused"), 201);
    cluster.sigcont(controller);
    wait_for_topic(&cluster, controller, "while-paused");
}

#[test]
fn an_isolated_node_cannot_change_metadata_and_catches_up_when_healed() {
    // Proves a minority of one refuses metadata changes, the majority goes on, and a heal converges.
    let cluster = Cluster::start(3, &[]);
    let leader = controller_seen_by(&cluster, 1).expect("a controller");
    // Isolate a follower voter, so the majority keeps its leader.
    let isolated = cluster.ids().find(|&id| id != leader).expect("a follower");
    let majority = cluster.ids().find(|&id| id != isolated && id != leader).expect("another node");
    cluster.isolate(isolated);
    assert_eq!(create(&cluster, majority, "majority"), 201);
    wait_for_topic(&cluster, leader, "majority");
    let refused = create(&cluster, isolated, "minority");
    assert!(refused >= 500, "an isolated node answered {refused} to a metadata change");
    assert_eq!(
        api(&cluster, isolated).get("/v1/topics/majority").status,
        404,
        "the minority saw an uncommitted change"
    );
    cluster.heal();
    wait_for_topic(&cluster, isolated, "majority");
    let expected = topic_names(&cluster, leader);
    let converged = support::wait_until(DEADLINE, || cluster.ids().all(|id| topic_names(&cluster, id) == expected));
    assert!(converged, "nodes disagree on topics after healing");
}

#[test]
fn a_voter_whose_metadata_log_is_gone_refuses_to_start_and_keeps_its_partitions() {
    // Proves a node that ran before (meta.properties) but lost metadata/ does not start as a
    // voter: it would have forgotten its votes, and its empty image would delete every
    // partition as unknown. The partition directory survives the refused start.
    let _one_at_a_time = support::cluster::one_at_a_time();
    let mut node = support::Runnel::start(&[]);
    support::create_topic(&node, "kept", 1);
    assert!(node.terminate(), "clean stop");
    let partition_dir = node.data_dir.join("kept-0");
    assert!(partition_dir.is_dir());
    std::fs::remove_dir_all(node.data_dir.join("metadata")).expect("remove metadata/");
    let binary = std::env::var_os("RUNNEL_TEST_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_runnel").into());
    let output = std::process::Command::new(binary)
        .args(["serve", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--controller-listen", "127.0.0.1:0", "--data-dir"])
        .arg(&node.data_dir)
        .output()
        .expect("run runnel serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started without its metadata log: {stderr}");
    assert!(stderr.contains("metadata") && stderr.contains("meta.properties"), "a clear reason: {stderr}");
    assert!(partition_dir.is_dir(), "the partition was left alone");
}

#[test]
fn a_second_process_on_a_running_nodes_data_dir_refuses_to_start_and_the_first_keeps_serving() {
    // Proves the data directory's lock: a second `runnel serve` on the same directory (other
    // ports) exits with a clear reason before it reads a log, and the first node's records are
    // still all there and it still takes writes. Fails without the lock (the second one starts).
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = support::Runnel::start(&[]);
    support::create_topic(&node, "locked", 1);
    produce(&node, "locked", &["a", "b", "c"]);
    let binary = std::env::var_os("RUNNEL_TEST_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_runnel").into());
    let mut second = std::process::Command::new(binary);
    second
        .args(["serve", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--controller-listen", "127.0.0.1:0", "--data-dir"])
        .arg(&node.data_dir);
    let (status, stderr) = support::run_until_exit(second, DEADLINE);
    let status =
        status.unwrap_or_else(|| panic!("a second process on a running node's data directory started: {stderr}"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("in use by another process"), "a clear reason: {stderr}");
    produce(&node, "locked", &["d"]);
    assert_eq!(read_partition_0(&node, "locked", 4), ["a", "b", "c", "d"], "the first node serves on");
}

fn produce(node: &support::Runnel, topic: &str, values: &[&str]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = support::client_config(node, &[("acks", "all")]).create().expect("producer");
    for value in values {
        producer.send(BaseRecord::<(), str>::to(topic).partition(0).payload(*value)).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(DEADLINE).expect("every record acknowledged");
}

/// The first `n` values of partition 0 of `topic` (fewer if they do not come in time).
fn read_partition_0(node: &support::Runnel, topic: &str, n: usize) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer =
        support::client_config(node, &[("group.id", "lock-reader"), ("enable.auto.commit", "false")])
            .create()
            .expect("consumer");
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition_offset(topic, 0, rdkafka::Offset::Beginning).expect("partition");
    consumer.assign(&list).expect("assign");
    let mut values = Vec::new();
    support::wait_until(DEADLINE, || {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            values.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned());
        }
        values.len() >= n
    });
    values
}
