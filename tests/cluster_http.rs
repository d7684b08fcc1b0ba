//! HTTP and transforms on a three-node cluster (issue 11): a node's HTTP API produces to
//! partitions led by the other nodes, runs v2 consumer instances whose group coordinator and
//! partitions are elsewhere, browses records of partitions led elsewhere and lists every node's
//! transform workers; a transform writes outputs to partitions led by other nodes and
//! checkpoints on a coordinator elsewhere, resuming from it after its leader is killed; killed
//! mid-transaction, an exactly-once transform's outputs are read once each (at-least-once:
//! some twice).
//! Also two request-path rules only a second node shows: a member commit sent to a node that
//! does not coordinate the group, and a follower fetch past its byte limit (KIP-74).
//! Most topics have replication factor 1 with explicit assignments, so the node serving HTTP (or
//! running the transform) hosts no replica of what it reaches: every such call is forwarded.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine;
use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use support::cluster::Cluster;
use support::{block_on, wait_until, HttpApi, RawConn};

const TIMEOUT: Duration = Duration::from_secs(30);
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const V2: Option<&str> = Some("application/vnd.kafka.v2+json");
const V2_BINARY: Option<&str> = Some("application/vnd.kafka.binary.v2+json");

/// Creates `topic` with replication factor 1, partition `p` on node `leaders[p]`, and waits
/// until every node's metadata names those leaders and each leader leads its partitions.
fn create_placed(cluster: &Cluster, topic: &str, leaders: &[i32]) {
    let assignment: Vec<Vec<i32>> = leaders.iter().map(|&l| vec![l]).collect();
    create_assigned(cluster, topic, &assignment);
}

/// Creates `topic` with partition `p` on replicas `assignment[p]` (the first leads) and waits
/// until every node names those leaders.
fn create_assigned(cluster: &Cluster, topic: &str, assignment: &[Vec<i32>]) {
    let admin: AdminClient<DefaultClientContext> =
        support::client_config(cluster.node(1), &[]).create().expect("admin client");
    let leaders: Vec<i32> = assignment.iter().map(|replicas| replicas[0]).collect();
    let assignment: Vec<&[i32]> = assignment.iter().map(Vec::as_slice).collect();
    let new = NewTopic::new(topic, leaders.len() as i32, TopicReplication::Variable(&assignment));
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT)).request_timeout(Some(TIMEOUT));
    for result in block_on(admin.create_topics(&[new], &options)).expect("CreateTopics") {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code:?}"));
    }
    wait_led(cluster, topic, &leaders);
}

/// Waits until every node names `leaders[p]` as the leader of partition `p` and the leader
/// itself leads it (it shows its followers only once it does).
fn wait_led(cluster: &Cluster, topic: &str, leaders: &[i32]) {
    let ready = wait_until(TIMEOUT, || {
        cluster.ids().all(|id| {
            let detail = HttpApi::new(cluster.node(id)).get(&format!("/v1/topics/{topic}"));
            let Some(partitions) = detail.json["partitions"].as_array() else { return false };
            partitions.len() == leaders.len()
                && partitions.iter().enumerate().all(|(p, state)| {
                    state["leader"].as_i64() == Some(leaders[p] as i64)
                        && (leaders[p] as u64 != id || state["followers"].is_array())
                })
        })
    });
    assert!(ready, "{topic}: the nodes never agreed on leaders {leaders:?}");
}

/// Reads every partition of `topic` from the beginning through the whole cluster until `count`
/// records arrived: values per partition, in offset order.
fn read_back(cluster: &Cluster, topic: &str, partitions: i32, count: usize) -> BTreeMap<i32, Vec<Vec<u8>>> {
    let consumer: BaseConsumer =
        support::workload::config(&cluster.bootstrap(), &[("group.id", "cluster-http-reader")])
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).expect("partition");
    }
    consumer.assign(&list).expect("assign");
    let mut read: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
    let mut seen = 0;
    let done = wait_until(TIMEOUT, || {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            read.entry(m.partition()).or_default().push(m.payload().unwrap_or_default().to_vec());
            seen += 1;
        }
        seen >= count
    });
    assert!(done, "{topic}: read {seen} of {count} records: {read:?}");
    read
}

#[test]
fn http_produce_on_one_node_reaches_partitions_led_by_every_node() {
    // Proves v2 and v3 produce on one node's HTTP port append to all six partitions although
    // two thirds of them are led by other nodes (forwarded as Produce to each leader), with
    // offsets in the answers and values read back byte-identical through librdkafka.
    let cluster = Cluster::start(3, &[]);
    let leaders = [1, 2, 3, 1, 2, 3];
    create_placed(&cluster, "spread", &leaders);
    let api = HttpApi::new(cluster.node(2));
    let mut expected: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();

    // v2 binary: five records per partition in one request, not UTF-8 on purpose.
    let mut records = Vec::new();
    for p in 0..6 {
        for i in 0..5 {
            let value: Vec<u8> = [format!("v2-{p}-{i}-").into_bytes(), vec![0xff, 0x00, p as u8]].concat();
            records.push(json!({"partition": p, "value": B64.encode(&value)}));
            expected.entry(p).or_default().push(value);
        }
    }
    let answer = api.send_json("POST", "/topics/spread", V2_BINARY, &json!({"records": records}));
    assert_eq!(answer.status, 200, "{}", answer.text);
    let offsets = answer.json["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 30);
    for (n, offset) in offsets.iter().enumerate() {
        let (p, i) = ((n / 5) as i64, (n % 5) as i64);
        assert_eq!(offset["error_code"], Value::Null, "record {n}: {offset}");
        assert_eq!((offset["partition"].as_i64(), offset["offset"].as_i64()), (Some(p), Some(i)), "record {n}");
    }

    // v3: a stream of records, one answer line each, to every partition.
    let cluster_id = api.cluster_id();
    let mut stream = Vec::new();
    for p in 0..6 {
        let value = format!("v3-{p}").into_bytes();
        stream.push(json!({"partition_id": p, "value": {"type": "BINARY", "data": B64.encode(&value)}}).to_string());
        expected.entry(p).or_default().push(value);
    }
    let answer = api.call(
        "POST",
        &format!("/v3/clusters/{cluster_id}/topics/spread/records"),
        Some("application/json"),
        Some(stream.join("\n").into_bytes()),
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    let lines: Vec<Value> = answer.text.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.len(), 6, "{}", answer.text);
    for (p, line) in lines.iter().enumerate() {
        assert_eq!(line["error_code"], 200, "{line}");
        assert_eq!((line["partition_id"].as_i64(), line["offset"].as_i64()), (Some(p as i64), Some(5)), "{line}");
    }

    assert_eq!(read_back(&cluster, "spread", 6, 36), expected);
}

/// A group id whose coordinator (FindCoordinator's answer, asked of node `ask`) is not node
/// `avoid`; creates `__consumer_offsets` on the way.
fn group_coordinated_away_from(cluster: &Cluster, avoid: u64) -> String {
    let mut found = None;
    let answered = wait_until(TIMEOUT, || {
        let mut conn = RawConn::open(cluster.node(avoid), "cluster-http-test");
        for n in 0..50 {
            let group = format!("http-group-{n}");
            let request = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.clone()));
            let response: FindCoordinatorResponse = conn.call(3, &request);
            if response.error_code != 0 {
                return false;
            }
            if response.node_id.0 as u64 != avoid {
                found = Some((group, response.node_id.0));
                return true;
            }
        }
        false
    });
    assert!(answered, "no coordinator found");
    let (group, coordinator) = found.expect("found");
    // The coordinator must be serving the group, not just named by the metadata.
    let ready = wait_until(TIMEOUT, || {
        let mut conn = RawConn::open(cluster.node(coordinator as u64), "cluster-http-test");
        let request = kafka_protocol::messages::OffsetFetchRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(group.clone())))
            .with_topics(None);
        let response: kafka_protocol::messages::OffsetFetchResponse = conn.call(7, &request);
        response.error_code == 0
    });
    assert!(ready, "coordinator {coordinator} of {group} never loaded it");
    group
}

#[test]
fn a_member_commit_sent_to_a_node_that_does_not_coordinate_the_group_is_not_coordinator() {
    // Proves OffsetCommit and TxnOffsetCommit check that this node coordinates the group before
    // they check the member: a group-managed commit reaching another node (a coordinator
    // failover, a stale client cache) gets the retriable NOT_COORDINATOR, not
    // ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID (the Java client's CommitFailedException, a lost
    // commit and a rebalance).
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        GroupId, OffsetCommitRequest, OffsetCommitResponse, ProducerId, TopicName, TransactionalId,
        TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    };
    const NOT_COORDINATOR: i16 = 16;
    let cluster = Cluster::start(2, &[]);
    create_placed(&cluster, "commits", &[1]);
    let group = group_coordinated_away_from(&cluster, 2);
    let name = |s: &str| StrBytes::from_string(s.to_string());
    let mut conn = RawConn::open(cluster.node(2), "cluster-http-test");
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(name(&group)))
        .with_generation_id_or_member_epoch(3)
        .with_member_id(name("member-1"))
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(TopicName(name("commits"))).with_partitions(
            vec![OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1)],
        )]);
    let answer: OffsetCommitResponse = conn.call(8, &commit);
    assert_eq!(answer.topics[0].partitions[0].error_code, NOT_COORDINATOR, "{answer:?}");
    let txn_commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(name("t")))
        .with_group_id(GroupId(name(&group)))
        .with_producer_id(ProducerId(1))
        .with_producer_epoch(0)
        .with_generation_id(3)
        .with_member_id(name("member-1"))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(name("commits")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1)])]);
    let answer: TxnOffsetCommitResponse = conn.call(3, &txn_commit);
    assert_eq!(answer.topics[0].partitions[0].error_code, NOT_COORDINATOR, "{answer:?}");
}

#[test]
fn a_follower_fetch_past_its_byte_limit_returns_no_more_batches() {
    // Proves KIP-74 on the replica path: a whole first batch larger than the response's limit
    // is returned only until some partition has returned data. A follower fetch (replica 2) of
    // 8 partitions with max_bytes 1 gets one batch, not one per partition (a follower catching
    // up 1,000 partitions got ~1,000 batches in one response, buffered on both ends).
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
    let cluster = Cluster::start(2, &[]);
    create_assigned(&cluster, "wide", &vec![vec![1, 2]; 8]);
    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    let value = vec![b'x'; 10_000];
    for partition in 0..8 {
        producer
            .send(BaseRecord::<(), [u8]>::to("wide").partition(partition).payload(&value[..]))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(TIMEOUT).expect("flush");
    let partitions = (0..8)
        .map(|p| FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(1 << 20));
    let request = FetchRequest::default()
        .with_replica_id(2.into())
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("wide")))
            .with_partitions(partitions.collect())]);
    let mut conn = RawConn::open(cluster.node(1), "cluster-http-test");
    let response: FetchResponse = conn.call(12, &request);
    let with_records: Vec<i32> = response.responses[0]
        .partitions
        .iter()
        .filter(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))
        .map(|p| p.partition_index)
        .collect();
    assert_eq!(with_records, vec![0], "only the first partition's batch, past the 1-byte limit");
}

#[test]
fn http_consumer_instance_consumes_and_commits_through_other_nodes() {
    // Proves a v2 consumer instance on node 1, whose group coordinator and every partition are
    // on the other nodes, joins, is assigned every partition, consumes everything produced,
    // commits, and the commit is what the group's coordinator returns to librdkafka.
    let cluster = Cluster::start(3, &[]);
    let leaders = [2, 3, 2];
    create_placed(&cluster, "elsewhere", &leaders);
    let group = group_coordinated_away_from(&cluster, 1);

    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    let mut expected = BTreeSet::new();
    for i in 0..30 {
        let value = format!("record-{i}");
        producer
            .send(BaseRecord::<(), _>::to("elsewhere").partition(i % 3).payload(&value))
            .map_err(|(e, _)| e)
            .expect("send");
        expected.insert(value.into_bytes());
    }
    producer.flush(TIMEOUT).expect("flush");

    let node = cluster.node(1);
    let api = HttpApi::new(node);
    let created = api.send_json(
        "POST",
        &format!("/consumers/{group}"),
        V2,
        &json!({"name": "far", "format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}),
    );
    assert_eq!(created.status, 200, "{}", created.text);
    // REST Proxy's base_uri names the node that holds the instance: this one.
    assert_eq!(
        created.json["base_uri"].as_str(),
        Some(format!("http://{}/consumers/{group}/instances/far", node.http_addr).as_str()),
        "{}",
        created.text
    );
    let base = format!("/consumers/{group}/instances/far");
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["elsewhere"]})).status, 204);

    let mut consumed: Vec<(i64, i64, Vec<u8>)> = Vec::new();
    let all = wait_until(TIMEOUT, || {
        let polled = api.call("GET", &format!("{base}/records?timeout=500"), None, None);
        assert_eq!(polled.status, 200, "{}", polled.text);
        for r in polled.json.as_array().into_iter().flatten() {
            let value = B64.decode(r["value"].as_str().unwrap_or_default()).expect("base64");
            consumed.push((r["partition"].as_i64().unwrap(), r["offset"].as_i64().unwrap(), value));
        }
        consumed.len() >= expected.len()
    });
    assert!(all, "consumed {} of {}", consumed.len(), expected.len());
    assert_eq!(consumed.len(), expected.len(), "no duplicates");
    assert_eq!(consumed.iter().map(|(_, _, v)| v.clone()).collect::<BTreeSet<_>>(), expected);
    let assignment = api.get(&format!("{base}/assignments"));
    assert_eq!(assignment.json["partitions"].as_array().map(Vec::len), Some(3), "{}", assignment.text);

    // Commit everything returned (empty body), then read it back over HTTP and from librdkafka.
    let commit = api.call("POST", &format!("{base}/offsets"), V2, None);
    assert_eq!(commit.status, 200, "{}", commit.text);
    let committed: BaseConsumer =
        support::workload::config(&cluster.bootstrap(), &[("group.id", group.as_str())]).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..3 {
        list.add_partition("elsewhere", p);
    }
    let offsets = committed.committed_offsets(list, TIMEOUT).expect("OffsetFetch");
    for p in 0..3 {
        let element = offsets.find_partition("elsewhere", p).expect("partition");
        assert_eq!(element.offset(), Offset::Offset(10), "partition {p}");
    }
    assert_eq!(api.delete(&base).status, 204);
}

use support::guest_component as component;

#[test]
fn a_transform_writes_outputs_to_partitions_led_by_other_nodes() {
    // Proves a transform whose input partition is led by node 2 and whose output partitions are
    // led by nodes 1 and 3 delivers every input record to the output (produced to those
    // leaders, not refused).
    let cluster = Cluster::start(3, &[]);
    create_placed(&cluster, "t-in", &[2]);
    create_placed(&cluster, "t-out", &[1, 3]);
    let module = component("runnel-example-identity");
    let mut body = json!({"input_topic": "t-in", "output_topics": ["t-out"], "start": "earliest"});
    body["module_base64"] = json!(B64.encode(&module));
    let deployed = HttpApi::new(cluster.node(1)).send_json("PUT", "/v1/transforms/copy", None, &body);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    let mut expected = BTreeSet::new();
    for i in 0..40 {
        let (key, value) = (format!("k{i}"), format!("record-{i}"));
        producer.send(BaseRecord::to("t-in").key(&key).payload(&value)).map_err(|(e, _)| e).expect("send");
        expected.insert(value.into_bytes());
    }
    producer.flush(TIMEOUT).expect("flush");

    let read = read_back(&cluster, "t-out", 2, expected.len());
    assert_eq!(read.values().flatten().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(read.len() == 2, "keys spread over both output partitions (nodes 1 and 3): {:?}", read.keys());
}

/// The coordinator of `group` as node `ask` answers FindCoordinator (which creates
/// `__consumer_offsets` on first use), once it answers.
fn coordinator_of(cluster: &Cluster, ask: u64, group: &str) -> u64 {
    let mut coordinator = None;
    let answered = wait_until(TIMEOUT, || {
        let mut conn = RawConn::open(cluster.node(ask), "cluster-http-test");
        let request = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_string()));
        let response: FindCoordinatorResponse = conn.call(3, &request);
        coordinator = (response.error_code == 0).then_some(response.node_id.0 as u64);
        coordinator.is_some()
    });
    assert!(answered, "no coordinator for {group}");
    coordinator.expect("answered")
}

/// The committed offset of `group` for `topic`-0 as librdkafka reads it (-1: none).
fn committed(cluster: &Cluster, group: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer =
        support::workload::config(&cluster.bootstrap(), &[("group.id", group)]).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, 0);
    match consumer.committed_offsets(list, Duration::from_secs(5)) {
        Ok(offsets) => match offsets.find_partition(topic, 0).map(|e| e.offset()) {
            Some(Offset::Offset(offset)) => offset,
            _ => -1,
        },
        Err(_) => -1,
    }
}

fn produce_numbered(cluster: &Cluster, topic: &str, range: std::ops::Range<usize>) -> BTreeSet<Vec<u8>> {
    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    let mut values = BTreeSet::new();
    for i in range {
        let value = format!("record-{i}");
        producer.send(BaseRecord::<(), _>::to(topic).payload(&value)).map_err(|(e, _)| e).expect("send");
        values.insert(value.into_bytes());
    }
    producer.flush(TIMEOUT).expect("flush");
    values
}

#[test]
fn a_transform_checkpoints_on_a_coordinator_elsewhere_and_resumes_from_it_after_its_leader_dies() {
    // Proves a transform worker whose checkpoint coordinator is another node commits its
    // position there (librdkafka reads it), and after kill -9 of the input's leader the worker
    // on the new leader resumes from that position: every input reaches the output, none twice.
    let mut cluster = Cluster::start(3, &[]);
    create_assigned(&cluster, "ck-in", &[vec![2, 1, 3]]);
    create_assigned(&cluster, "ck-out", &[vec![3, 1, 2]]);
    // A transform name whose group is coordinated away from the input's leader (node 2).
    let name = (0..50)
        .map(|n| format!("ck{n}"))
        .find(|name| coordinator_of(&cluster, 1, &format!("__runnel_transform_{name}")) != 2)
        .expect("a group coordinated by node 1 or 3");
    let group = format!("__runnel_transform_{name}");
    let mut body = json!({"input_topic": "ck-in", "output_topics": ["ck-out"], "start": "earliest"});
    body["module_base64"] = json!(B64.encode(component("runnel-example-identity")));
    let deployed = HttpApi::new(cluster.node(1)).send_json("PUT", &format!("/v1/transforms/{name}"), None, &body);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let mut expected = produce_numbered(&cluster, "ck-in", 0..40);
    let checkpointed = wait_until(TIMEOUT, || committed(&cluster, &group, "ck-in") == 40);
    let logs = HttpApi::new(cluster.node(2)).get(&format!("/v1/transforms/{name}/logs"));
    assert!(checkpointed, "position 40 never committed on the coordinator; worker log: {}", logs.text);

    cluster.kill9(2);
    expected.extend(produce_numbered(&cluster, "ck-in", 40..60));
    // The new leader's worker: started at the committed position, caught up with the input.
    let mut resumed = None;
    let caught_up = wait_until(TIMEOUT, || {
        resumed = [1, 3].into_iter().find_map(|id| {
            let detail = HttpApi::new(cluster.node(id)).get(&format!("/v1/transforms/{name}"));
            let partitions = detail.json["partitions"].as_array()?.clone();
            partitions.into_iter().find(|p| p["state"] == "running" && p["position"].as_i64() == Some(60))
        });
        resumed.is_some()
    });
    assert!(caught_up, "no worker on nodes 1 or 3 processed the input to offset 60");
    let start = resumed.as_ref().and_then(|p| p["start_offset"].as_i64()).expect("start_offset");
    assert!(start >= 40, "resumed at {start}, before the committed position 40: {resumed:?}");

    // Outputs and the position commit in one transaction (exactly-once, the default): a
    // read_committed reader sees the 60 outputs in input order, each once. The outputs of a
    // re-processed input would come before those of later inputs, so a duplicate among the
    // first 60 read would push one of the 60 expected values out.
    let read = read_back(&cluster, "ck-out", 1, expected.len());
    let outputs: Vec<Vec<u8>> = read.values().flatten().cloned().collect();
    assert_eq!(outputs.len(), expected.len(), "{outputs:?}");
    assert_eq!(outputs.iter().cloned().collect::<BTreeSet<_>>(), expected, "outputs written twice or lost");
}

#[test]
fn a_transform_stuck_in_a_guest_call_holds_back_nothing_else_on_its_node() {
    // Proves a node goes on following the metadata image while one of its transform workers
    // is inside a guest call that lasts until its 60 s deadline and has been told to stop (the
    // transform is paused; the worker can end only when the call does): a transform deployed
    // next on that node delivers its outputs, and a topic created next and led by that node is
    // served, each within 30 s. Before, the node's image follower waited for the stopping
    // worker, so the second transform started only after the call's deadline (and partitions
    // waited for the node's 5 s reconcile tick).
    let cluster = Cluster::start(3, &[]);
    create_placed(&cluster, "spin-in", &[2]);
    create_placed(&cluster, "spin-out", &[2]);
    let api = HttpApi::new(cluster.node(1));
    let deploy = |name: &str, package: &str, mut body: Value| {
        body["module_base64"] = json!(B64.encode(component(package)));
        let deployed = api.send_json("PUT", &format!("/v1/transforms/{name}"), None, &body);
        assert_eq!(deployed.status, 201, "{}", deployed.text);
        let running = wait_until(TIMEOUT, || {
            api.get(&format!("/v1/transforms/{name}")).json["partitions"][0]["state"] == "running"
        });
        assert!(running, "{}", api.get(&format!("/v1/transforms/{name}")).text);
    };
    let spin = json!({
        "input_topic": "spin-in",
        "output_topics": ["spin-out"],
        "start": "earliest",
        "call_timeout_ms": 60_000,
    });
    deploy("spin", "runnel-guest-spin", spin);
    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    producer.send(BaseRecord::to("spin-in").key("k").payload("spin")).map_err(|(e, _)| e).expect("send");
    producer.flush(TIMEOUT).expect("flush");
    // The worker, woken by the append, is in the guest's endless loop: it stops in ~60 s.
    assert_eq!(api.call("POST", "/v1/transforms/spin/pause", None, None).status, 204);
    let started = std::time::Instant::now();

    create_placed(&cluster, "copy-in", &[2]);
    create_placed(&cluster, "copy-out", &[2]);
    deploy("copy", "runnel-example-identity", json!({"input_topic": "copy-in", "output_topics": ["copy-out"]}));
    producer.send(BaseRecord::to("copy-in").key("k").payload("copied")).map_err(|(e, _)| e).expect("send");
    producer.flush(TIMEOUT).expect("flush to the new topic's leader, node 2");
    let read = read_back(&cluster, "copy-out", 1, 1);
    assert_eq!(read[&0], [b"copied".to_vec()]);
    println!("node 2 ran a new transform {:?} after pausing its stuck one", started.elapsed());
    let spin = api.get("/v1/transforms/spin");
    assert_eq!(spin.json["partitions"][0]["state"], "running", "still in its call: {}", spin.text);
}

#[test]
fn transforms_are_listed_cluster_wide_with_the_node_of_each_worker() {
    // Proves /v1/transforms/{name} and /v1/transforms on one node list the workers of every node
    // (a 3-partition input led by nodes 1, 2 and 3: three workers on three nodes), and that a
    // node that does not answer (SIGSTOP) is listed as unreachable without failing the request.
    let cluster = Cluster::start(3, &[]);
    create_placed(&cluster, "wide-in", &[1, 2, 3]);
    create_placed(&cluster, "wide-out", &[1]);
    let mut body = json!({"input_topic": "wide-in", "output_topics": ["wide-out"], "start": "earliest"});
    body["module_base64"] = json!(B64.encode(component("runnel-example-identity")));
    let api = HttpApi::new(cluster.node(1));
    let deployed = api.send_json("PUT", "/v1/transforms/wide", None, &body);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let workers = |detail: &Value| -> Vec<(i64, i64, String)> {
        detail["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (p["partition"].as_i64().unwrap(), p["node"].as_i64().unwrap(), p["state"].to_string()))
            .collect()
    };
    let running = |p: i64, node: i64| (p, node, "\"running\"".to_string());
    let mut detail = Value::Null;
    let listed = wait_until(TIMEOUT, || {
        detail = api.get("/v1/transforms/wide").json;
        workers(&detail) == [running(0, 1), running(1, 2), running(2, 3)]
    });
    assert!(listed, "node 1 never listed the three workers on their nodes: {detail}");
    assert_eq!(detail["state"], "running", "{detail}");
    assert_eq!(detail["nodes_asked"], json!([1, 2, 3]), "{detail}");
    assert_eq!(detail["nodes_unreachable"], json!([]), "{detail}");
    let list = HttpApi::new(cluster.node(2)).get("/v1/transforms");
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(workers(&list.json["transforms"][0]), [running(0, 1), running(1, 2), running(2, 3)], "{}", list.text);
    // Each node alone knows only its own worker.
    let own = HttpApi::new(cluster.node(3)).get("/v1/transforms/wide?scope=node");
    assert_eq!(workers(&own.json), [running(2, 3)], "{}", own.text);

    cluster.sigstop(3);
    let answer = api.get("/v1/transforms/wide");
    cluster.sigcont(3);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["nodes_unreachable"], json!([3]), "{}", answer.text);
    assert_eq!(workers(&answer.json), [running(0, 1), running(1, 2)], "{}", answer.text);
}

#[test]
fn the_record_browser_on_one_node_reads_a_partition_led_by_another() {
    // Proves /v1/topics/{t}/records on node 1 pages through a partition whose only replica is on
    // node 2 (offsets from the leader's ListOffsets, records from a Fetch forwarded to it).
    let cluster = Cluster::start(3, &[]);
    create_placed(&cluster, "browsed", &[2]);
    let expected: Vec<String> = (0..12).map(|i| format!("record-{i:02}")).collect();
    let producer: ThreadedProducer<DefaultProducerContext> =
        support::workload::producer_config(&cluster.bootstrap(), &[]).create().expect("producer");
    for value in &expected {
        producer
            .send(BaseRecord::<(), _>::to("browsed").partition(0).payload(value))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(TIMEOUT).expect("flush");

    let api = HttpApi::new(cluster.node(1));
    let values = |page: &Value| -> Vec<String> {
        page["records"].as_array().into_iter().flatten().map(|r| r["value"].as_str().unwrap().to_string()).collect()
    };
    let first = api.get("/v1/topics/browsed/records?partition=0&limit=5");
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(values(&first.json), expected[..5], "{}", first.text);
    assert_eq!((first.json["log_start_offset"].as_i64(), first.json["high_watermark"].as_i64()), (Some(0), Some(12)));
    assert_eq!(first.json["next_offset"], 5);
    let rest = api.get("/v1/topics/browsed/records?partition=0&offset=5&limit=100");
    assert_eq!(values(&rest.json), expected[5..], "{}", rest.text);
    let last = api.get("/v1/topics/browsed/records?partition=0&offset=-2");
    assert_eq!(values(&last.json), expected[10..], "{}", last.text);
    assert_eq!(last.json["records"][0]["offset"], 10, "{}", last.text);

    // `runnel consume` against node 1 starts a partition it does not host at its leader's
    // high watermark (it failed: "not hosted by the node at --url"), and reads it from the start.
    let consume = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
            .arg("consume")
            .args(args)
            .env("RUNNEL_URL", cluster.node(1).http_url())
            .output()
            .expect("run runnel consume");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "runnel consume {args:?}: {stderr}");
        String::from_utf8_lossy(&output.stdout).lines().count()
    };
    assert_eq!(consume(&["browsed"]), 0, "latest: nothing new");
    assert_eq!(consume(&["browsed", "--from-beginning"]), 12);
}

/// Runs an identity transform with `delivery` whose worker is kill -9'd mid-backlog (one record
/// per guest call, positions committed every 30 s while input keeps coming, so outputs of
/// uncommitted input exist when it dies), then reads its outputs read_committed once the new
/// leader's worker has processed and committed all input: (distinct outputs, outputs read).
/// Input led by node 2 (the killed node), outputs led by nodes 1 and 3.
fn outputs_after_the_workers_node_is_killed(delivery: &str) -> (usize, usize) {
    let mut cluster = Cluster::start(3, &[]);
    create_assigned(&cluster, "kill-in", &[vec![2, 1, 3]]);
    create_assigned(&cluster, "kill-out", &[vec![1, 2, 3], vec![3, 1, 2]]);
    let mut body = json!({
        "input_topic": "kill-in",
        "output_topics": ["kill-out"],
        "start": "earliest",
        "delivery": delivery,
        "batch_records_max": 1,
        "commit_interval_ms": 30_000,
    });
    body["module_base64"] = json!(B64.encode(component("runnel-example-identity")));
    let deployed = HttpApi::new(cluster.node(1)).send_json("PUT", "/v1/transforms/killed", None, &body);
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let mut expected = produce_numbered(&cluster, "kill-in", 0..1200);
    let position = |id: u64| {
        let detail = HttpApi::new(cluster.node(id)).get("/v1/transforms/killed");
        let partitions = detail.json["partitions"].as_array().cloned().unwrap_or_default();
        partitions.iter().find(|p| p["node"] == id && p["state"] == "running").and_then(|p| p["position"].as_i64())
    };
    let mut reached = None;
    let midway = wait_until(TIMEOUT * 2, || {
        reached = position(2);
        reached.is_some_and(|p| p >= 200)
    });
    assert!(midway, "the worker on node 2 never processed 200 records: position {reached:?}");
    let uncommitted = committed(&cluster, "__runnel_transform_killed", "kill-in");
    assert!(uncommitted <= 0, "a position was committed before the kill ({uncommitted}): the test cannot tell");
    cluster.kill9(2);
    let killed_at = reached.expect("position");
    assert!(killed_at < 1200, "the backlog was done before the kill: the test cannot tell");
    expected.extend(produce_numbered(&cluster, "kill-in", 1200..1300));

    let done = wait_until(TIMEOUT * 4, || committed(&cluster, "__runnel_transform_killed", "kill-in") == 1300);
    let logs = HttpApi::new(cluster.node(1)).get("/v1/transforms/killed/logs");
    assert!(done, "no worker on nodes 1 or 3 committed position 1300; logs: {}", logs.text);

    // Every output partition read to its end (read_committed: its last stable offset).
    let consumer: BaseConsumer = support::workload::config(&cluster.bootstrap(), &[("group.id", "kill-reader")])
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..2 {
        list.add_partition_offset("kill-out", p, Offset::Beginning).expect("partition");
    }
    consumer.assign(&list).expect("assign");
    let (mut outputs, mut at_end) = (Vec::new(), BTreeSet::new());
    let read = wait_until(TIMEOUT * 2, || {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => outputs.push(m.payload().unwrap_or_default().to_vec()),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
        at_end.len() == 2
    });
    assert!(read, "the outputs were never read to their end: {} read", outputs.len());
    let distinct: BTreeSet<Vec<u8>> = outputs.iter().cloned().collect();
    let lost: Vec<_> = expected.difference(&distinct).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
    assert!(lost.is_empty(), "{delivery}: {} inputs lost: {:?}", lost.len(), &lost[..lost.len().min(10)]);
    assert_eq!(distinct, expected, "{delivery}: outputs that are no input's");
    println!(
        "{delivery}: killed at position {killed_at}; {} outputs read, {} distinct, {} duplicates",
        outputs.len(),
        distinct.len(),
        outputs.len() - distinct.len()
    );
    (distinct.len(), outputs.len())
}

#[test]
fn an_exactly_once_transform_whose_node_is_killed_mid_transaction_delivers_each_output_once() {
    // Proves exactly-once across kill -9 of the worker's node with outputs of uncommitted
    // input already appended to partitions led by the other nodes: the new leader's worker
    // fences the old one, its open transaction is aborted, and a read_committed reader sees
    // every input's output exactly once (0 lost, 0 duplicates).
    let (distinct, read) = outputs_after_the_workers_node_is_killed("exactly_once");
    assert_eq!(read, distinct, "exactly_once: {} duplicates", read - distinct);
}

#[test]
fn an_at_least_once_transform_whose_node_is_killed_writes_outputs_again() {
    // Proves the test above can tell: the same kill under at_least_once loses nothing but
    // writes the outputs of the uncommitted input again (duplicates the reader sees).
    let (distinct, read) = outputs_after_the_workers_node_is_killed("at_least_once");
    assert!(read > distinct, "at_least_once: no duplicates after a kill with no committed position");
}
