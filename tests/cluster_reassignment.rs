//! Partition reassignment on a real 3-node cluster (issue 11, "the data path"): AlterPartition-
//! Reassignments moves a partition's replicas with the data copied before the old replica
//! leaves, ListPartitionReassignments shows it while it runs, a cancel puts the replicas back,
//! and Kafka's own `kafka-reassign-partitions.sh` (`--generate`, `--execute`, `--verify`) drives
//! it. Writes go on through every move (acks=all librdkafka producers feeding the Jepsen-style
//! checker of `support::checker`), and every acknowledged record is read back, at its offset,
//! from the new leader.
//!
//! Kafka's tools are the jars `scripts/kafka-jars.sh` fetched (see `support/kafka_tools.rs`):
//! where they were never fetched the tool test is skipped (scripts/test.sh counts it so).

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::list_partition_reassignments_response::OngoingTopicReassignment;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use support::checker::{Checker, Duplicates};
use support::cluster::Cluster;
use support::workload::{self, ProducerSpec, Producers};
use support::RawConn;

const NODES: u64 = 3;
/// Any wait for the cluster to move (a reassignment completing, a leader elected).
const DEADLINE: Duration = Duration::from_secs(30);

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// One cluster at a time: two cores, three nodes and producers are enough load.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A 3-node cluster whose every node lists all three brokers (READY means caught up with the
/// quorum, not that the peers' registrations arrived).
fn cluster() -> Cluster {
    let cluster = Cluster::start(NODES, &[]);
    for id in cluster.ids() {
        let node = cluster.node(id).bootstrap();
        let mut seen = None;
        let ok = support::wait_until(DEADLINE, || {
            seen = workload::broker_count(&node);
            seen == Some(NODES as usize)
        });
        assert!(ok, "node {id} listed {seen:?} brokers, not {NODES}, within {DEADLINE:?}");
    }
    cluster
}

/// Creates `topic` with the replicas of each partition given (the first leads).
fn create_placed(bootstrap: &str, topic: &str, assignment: &[&[i32]]) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        workload::config(bootstrap, &[]).create().expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(DEADLINE)).request_timeout(Some(DEADLINE));
    let new = NewTopic::new(topic, assignment.len() as i32, TopicReplication::Variable(assignment));
    let results = support::block_on(admin.create_topics(&[new], &options)).expect("CreateTopics");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code:?}"));
    }
    let ok = support::wait_until(DEADLINE, || {
        workload::partition_states(bootstrap, topic)
            .is_some_and(|states| states.len() == assignment.len() && states.iter().all(|s| s.leader.is_some()))
    });
    assert!(ok, "{topic} has no leader for every partition within {DEADLINE:?}");
}

/// `count` acks=all records to `topic` through one producer, all acknowledged.
fn produce(bootstrap: &str, checker: &Arc<Checker>, topic: &str, count: u64) {
    let spec = ProducerSpec { records_per_thread: Some(count), ..ProducerSpec::paced(topic, 1, Duration::ZERO) };
    let before = checker.acked_count();
    Producers::start(bootstrap, checker, &spec).join();
    assert_eq!(checker.acked_count() - before, count as usize, "every record of the first batch acknowledged");
}

fn alter(conn: &mut RawConn, topic: &str, partition: i32, replicas: Option<&[i32]>) -> (i16, Option<String>) {
    let request = AlterPartitionReassignmentsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        ReassignableTopic::default().with_name(TopicName(StrBytes::from_string(topic.to_string()))).with_partitions(
            vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(replicas.map(|r| r.iter().map(|&b| BrokerId(b)).collect()))],
        ),
    ]);
    let response: AlterPartitionReassignmentsResponse = conn.call(1, &request);
    assert_eq!(response.error_code, 0, "top-level error {:?}", response.error_message);
    let p = &response.responses[0].partitions[0];
    (p.error_code, p.error_message.as_ref().map(|m| m.to_string()))
}

fn list(conn: &mut RawConn, topics: Option<&[(&str, &[i32])]>) -> Vec<OngoingTopicReassignment> {
    let topics = topics.map(|topics| {
        topics
            .iter()
            .map(|(name, partitions)| {
                ListPartitionReassignmentsTopics::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_string())))
                    .with_partition_indexes(partitions.to_vec())
            })
            .collect()
    });
    let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000).with_topics(topics);
    let response = conn.call(0, &request);
    assert_eq!(response.error_code, 0, "{:?}", response.error_message);
    response.topics
}

/// (replicas, adding, removing) of each ongoing reassignment: `(topic, partition, ...)`.
fn ongoing(topics: &[OngoingTopicReassignment]) -> Vec<(String, i32, Vec<i32>, Vec<i32>, Vec<i32>)> {
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    ids(&p.replicas),
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas),
                )
            })
        })
        .collect()
}

/// Waits until no reassignment is listed and `topic`-`partition` has exactly `replicas` (in
/// order), an ISR of the same members and `leader`.
fn wait_until_moved(cluster: &Cluster, topic: &str, partition: i32, replicas: &[u64], leader: u64) {
    let mut conn = RawConn::open(cluster.node(2), "reassignment-test");
    let mut last = None;
    let ok = support::wait_until(DEADLINE, || {
        let listed = ongoing(&list(&mut conn, None));
        last = Some((listed.clone(), workload::partition_states(&cluster.bootstrap(), topic)));
        let Some(Some(states)) = last.as_ref().map(|(_, s)| s.clone()) else { return false };
        let Some(state) = states.into_iter().find(|s| s.partition == partition) else { return false };
        let mut isr = state.isr.clone();
        isr.sort_unstable();
        let mut wanted = replicas.to_vec();
        wanted.sort_unstable();
        listed.is_empty() && state.replicas == replicas && isr == wanted && state.leader == Some(leader)
    });
    assert!(ok, "{topic}-{partition} not moved to {replicas:?} led by {leader} within {DEADLINE:?}: {last:?}");
}

/// Waits until `dir` is gone and no `-delete` leftover of it remains beside it.
fn wait_until_deleted(data_dir: &Path, topic: &str, partition: i32) {
    let name = format!("{topic}-{partition}");
    let leftovers = || -> Vec<String> {
        std::fs::read_dir(data_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|n| *n == name || n.starts_with(&format!("{name}.")))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ok = support::wait_until(DEADLINE, || leftovers().is_empty());
    assert!(ok, "{} still holds {:?} after {DEADLINE:?}", data_dir.display(), leftovers());
}

/// Waits until at least `count` writes were acknowledged since `since`.
fn wait_for_acks(checker: &Checker, since: Instant, count: usize, what: &str) {
    let ok = support::wait_until(DEADLINE, || checker.acked_since(since) >= count);
    assert!(ok, "{what}: only {} writes acknowledged within {DEADLINE:?}", checker.acked_since(since));
}

/// Stops the producers, reads every partition of `topic` back from its leaders and asserts the
/// checker's report is clean (nothing acknowledged lost, one value per offset).
fn read_back_and_judge(bootstrap: &str, topic: &str, checker: &Checker, producers: Producers) {
    producers.stop();
    let problems = workload::final_read(bootstrap, topic, checker, DEADLINE);
    let report = checker.report();
    assert!(problems.is_empty(), "{}\n{report}", problems.join("\n"));
    report.assert_clean();
    eprintln!("{report}");
}

#[test]
fn a_reassigned_partition_is_copied_to_the_new_replica_before_the_old_one_is_deleted() {
    // Proves {1,2} -> {3,2} under acks=all writes: the reassignment completes (replicas, ISR,
    // leader 3), node 1 deletes its copy, and node 3, now the leader, serves every acknowledged
    // record at its offset with its value, none lost, writes going on throughout.
    let _serial = serial();
    let cluster = cluster();
    let (bootstrap, topic) = (cluster.bootstrap(), "moved");
    create_placed(&bootstrap, topic, &[&[1, 2]]);
    let checker = Arc::new(Checker::new(0, Duplicates::Allowed));
    produce(&bootstrap, &checker, topic, 2_000);
    let producers = Producers::start(&bootstrap, &checker, &ProducerSpec::paced(topic, 1, Duration::from_millis(5)));
    wait_for_acks(&checker, Instant::now(), 20, "before the move");

    let mut conn = RawConn::open(cluster.node(1), "reassignment-test");
    assert_eq!(alter(&mut conn, topic, 0, Some(&[3, 2])), (0, None));
    // It may already have completed; while it runs it shows Kafka's union and sets.
    for listed in ongoing(&list(&mut conn, Some(&[(topic, &[0])]))) {
        assert_eq!(listed, (topic.to_string(), 0, vec![3, 2, 1], vec![3], vec![1]));
    }
    wait_until_moved(&cluster, topic, 0, &[3, 2], 3);
    let moved_at = Instant::now();
    wait_until_deleted(&cluster.node(1).data_dir, topic, 0);
    assert!(cluster.node(3).data_dir.join("moved-0").is_dir(), "node 3 holds the partition");
    wait_for_acks(&checker, moved_at, 50, "after the move");

    read_back_and_judge(&bootstrap, topic, &checker, producers);
    let leader = workload::partition_states(&bootstrap, topic).and_then(|s| s[0].leader);
    assert_eq!(leader, Some(3), "the final read was served by node 3");
}

#[test]
fn a_cancelled_reassignment_reverts_to_the_original_replicas() {
    // Proves a reassignment that cannot complete (its new replica's broker is down) shows the
    // union in Metadata and ListPartitionReassignments, a cancel reverts it (Kafka's order: the
    // target's kept replicas first), a second cancel is NO_REASSIGNMENT_IN_PROGRESS, invalid
    // requests get Kafka's codes, and writes go on with nothing lost.
    let _serial = serial();
    let mut cluster = cluster();
    let (bootstrap, topic) = (cluster.bootstrap(), "cancelled");
    create_placed(&bootstrap, topic, &[&[1, 2]]);
    let checker = Arc::new(Checker::new(0, Duplicates::Allowed));
    produce(&bootstrap, &checker, topic, 500);
    cluster.kill9(3);
    let bootstrap = format!("{},{}", cluster.node(1).bootstrap(), cluster.node(2).bootstrap());
    let producers = Producers::start(&bootstrap, &checker, &ProducerSpec::paced(topic, 1, Duration::from_millis(5)));

    let mut conn = RawConn::open(cluster.node(2), "reassignment-test");
    assert_eq!(alter(&mut conn, topic, 0, Some(&[2, 3])), (0, None), "node 3 is registered, if down");
    let expected = vec![(topic.to_string(), 0, vec![2, 3, 1], vec![3], vec![1])];
    assert_eq!(ongoing(&list(&mut conn, None)), expected);
    assert_eq!(ongoing(&list(&mut conn, Some(&[(topic, &[0, 7]), ("no-such-topic", &[0])]))), expected);
    assert!(ongoing(&list(&mut conn, Some(&[(topic, &[1])]))).is_empty());
    let ok = support::wait_until(DEADLINE, || {
        workload::partition_states(&bootstrap, topic).is_some_and(|s| s[0].replicas == [2, 3, 1])
    });
    assert!(ok, "Metadata shows the union: {:?}", workload::partition_states(&bootstrap, topic));

    for (target, code) in [
        (&[2, 2][..], INVALID_REPLICA_ASSIGNMENT),
        (&[2, 9][..], INVALID_REPLICA_ASSIGNMENT),
        (&[][..], INVALID_REPLICA_ASSIGNMENT),
        (&[-1][..], INVALID_REPLICA_ASSIGNMENT),
    ] {
        let (error, message) = alter(&mut conn, topic, 0, Some(target));
        assert_eq!(error, code, "target {target:?}: {message:?}");
    }
    assert_eq!(alter(&mut conn, "no-such-topic", 0, Some(&[1])).0, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(alter(&mut conn, topic, 5, Some(&[1])).0, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(ongoing(&list(&mut conn, None)), expected, "refused requests changed nothing");

    assert_eq!(alter(&mut conn, topic, 0, None), (0, None));
    assert!(ongoing(&list(&mut conn, None)).is_empty());
    let ok = support::wait_until(DEADLINE, || {
        workload::partition_states(&bootstrap, topic).is_some_and(|s| s[0].replicas == [2, 1] && s[0].leader == Some(1))
    });
    assert!(ok, "reverted: {:?}", workload::partition_states(&bootstrap, topic));
    assert_eq!(alter(&mut conn, topic, 0, None).0, NO_REASSIGNMENT_IN_PROGRESS);
    wait_for_acks(&checker, Instant::now(), 50, "after the cancel");

    cluster.restart(3);
    read_back_and_judge(&bootstrap, topic, &checker, producers);
    assert!(!cluster.node(3).data_dir.join("cancelled-0").exists(), "node 3 never became a replica");
}

#[test]
fn kafka_reassign_partitions_generates_executes_and_verifies() {
    // Proves Kafka's kafka-reassign-partitions.sh against Runnel: --generate proposes replicas on
    // the given brokers only, --execute starts the moves of a reassignment JSON file, and
    // --verify reports them completed (clearing the throttles it would have set) once the
    // replicas moved; the moved partitions keep every acknowledged record.
    let Some(tools) = kafka_tools::kafka_tools().map_err(kafka_tools::skip).ok() else { return };
    let _serial = serial();
    let cluster = cluster();
    let (bootstrap, topic) = (cluster.bootstrap(), "tooled");
    create_placed(&bootstrap, topic, &[&[1, 2], &[2, 3]]);
    let checker = Arc::new(Checker::new(0, Duplicates::Allowed));
    produce(&bootstrap, &checker, topic, 1_000);
    let producers = Producers::start(&bootstrap, &checker, &ProducerSpec::paced(topic, 1, Duration::from_millis(10)));

    let files = tempfile::tempdir().expect("temp dir");
    let topics_file = files.path().join("topics.json");
    std::fs::write(&topics_file, format!(r#"{{"version":1,"topics":[{{"topic":"{topic}"}}]}}"#)).expect("write");
    let reassignment_file = files.path().join("reassignment.json");
    std::fs::write(
        &reassignment_file,
        format!(
            r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,"replicas":[2,3]}},{{"topic":"{topic}","partition":1,"replicas":[3,1]}}]}}"#
        ),
    )
    .expect("write");
    let tool = |args: &[&str]| {
        let mut all =
            vec!["org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server", &bootstrap];
        all.extend_from_slice(args);
        let output = tools.run(all[0], &all[1..], None);
        let text = format!("$ kafka-reassign-partitions.sh {}\n{}", args.join(" "), output.text());
        (output.success, output.stdout, text)
    };

    let topics_arg = topics_file.to_str().expect("utf-8 path");
    let (ok, stdout, text) = tool(&["--generate", "--topics-to-move-json-file", topics_arg, "--broker-list", "1,3"]);
    assert!(ok, "{text}");
    let proposed =
        stdout.split("Proposed partition reassignment configuration").nth(1).unwrap_or_else(|| panic!("{text}"));
    let proposed: serde_json::Value = serde_json::from_str(proposed.trim().lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    let partitions = proposed["partitions"].as_array().unwrap_or_else(|| panic!("{text}"));
    assert_eq!(partitions.len(), 2, "{text}");
    for p in partitions {
        let replicas: Vec<u64> =
            p["replicas"].as_array().expect("replicas").iter().filter_map(|r| r.as_u64()).collect();
        assert!(replicas.len() == 2 && replicas.iter().all(|r| [1, 3].contains(r)), "{p} in\n{text}");
    }

    let reassignment_arg = reassignment_file.to_str().expect("utf-8 path");
    let (ok, _, text) = tool(&["--execute", "--reassignment-json-file", reassignment_arg]);
    assert!(ok && text.contains("Successfully started partition reassignments for tooled-0,tooled-1"), "{text}");
    wait_until_moved(&cluster, topic, 0, &[2, 3], 2);
    wait_until_moved(&cluster, topic, 1, &[3, 1], 3);
    let (ok, _, text) = tool(&["--verify", "--reassignment-json-file", reassignment_arg]);
    assert!(ok, "{text}");
    for expected in [
        "Reassignment of partition tooled-0 is completed.",
        "Reassignment of partition tooled-1 is completed.",
        "Clearing broker-level throttles",
        "Clearing topic-level throttles on topic tooled",
    ] {
        assert!(text.contains(expected), "no {expected:?} in\n{text}");
    }
    // Node 1 still hosts tooled-1 and node 2 tooled-0: only the moved replica of each goes.
    for (id, partition) in [(1, 0), (2, 1)] {
        wait_until_deleted(&cluster.node(id).data_dir, topic, partition);
    }
    assert!(cluster.node(1).data_dir.join("tooled-1").is_dir() && cluster.node(2).data_dir.join("tooled-0").is_dir());

    read_back_and_judge(&bootstrap, topic, &checker, producers);
}
