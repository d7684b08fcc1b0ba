//! Produce-path validators against the real binary: the schema example and a hostile guest,
//! built to wasm32-wasip2 and deployed over HTTP, judged by raw Produce requests (the error
//! code, message and KIP-467 record errors a client gets), by librdkafka and by the HTTP v3
//! produce; nothing a validator refuses is ever appended, and a failing guest is contained by
//! its failure policy while the broker keeps serving. On a three-node cluster every partition
//! leader checks its own partitions, from the first produce after the deployment was answered
//! and after a leader is killed.

mod support;

use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use runnel::log::batch::Compression;
use runnel::log::records::BatchBuilder;
use serde_json::{json, Value};
use support::{client_config, create_topic, wait_until, HttpApi, RawConn, Runnel};

const TIMEOUT: Duration = Duration::from_secs(60);
const INVALID_RECORD: i16 = 87;
const PRODUCE_V: i16 = 9;

fn deploy(api: &HttpApi, name: &str, package: &str, config: Value) -> support::HttpAnswer {
    let mut body = config;
    body["module_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(support::guest_component(package)));
    api.send_json("PUT", &format!("/v1/validators/{name}"), None, &body)
}

/// One Produce (acks=all) of one batch of `values` to `topic`-`partition`: the partition's answer.
fn produce_raw(conn: &mut RawConn, topic: &str, partition: i32, values: &[&str]) -> PartitionProduceResponse {
    produce_partitions(conn, topic, &[(partition, values)]).remove(0)
}

/// One Produce (acks=all) with one batch per listed partition of `topic`, in the order given:
/// the partitions' answers in that order.
fn produce_partitions(conn: &mut RawConn, topic: &str, batches: &[(i32, &[&str])]) -> Vec<PartitionProduceResponse> {
    let partition_data = batches
        .iter()
        .map(|(partition, values)| {
            let mut builder = BatchBuilder::new(Compression::None);
            for (i, value) in values.iter().enumerate() {
                builder.push(1_000 + i as i64, Some(format!("k{i}").as_bytes()), Some(value.as_bytes()), &[]);
            }
            let records: Bytes = builder.build().expect("batch").into_bytes();
            PartitionProduceData::default().with_index(*partition).with_records(Some(records))
        })
        .collect();
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(partition_data),
    ]);
    let response = conn.call(PRODUCE_V, &request);
    response.responses[0].partition_responses.clone()
}

/// Every value in `topic`-`partition`, read from the beginning to the log end.
fn values(node: &Runnel, topic: &str, partition: i32) -> Vec<String> {
    let consumer: BaseConsumer = client_config(
        node,
        &[("group.id", "validator-reader"), ("enable.auto.commit", "false"), ("enable.partition.eof", "true")],
    )
    .create()
    .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut values = Vec::new();
    let done = wait_until(TIMEOUT, || match consumer.poll(Duration::from_millis(100)) {
        Some(Ok(m)) => {
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            false
        }
        Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => true,
        _ => false,
    });
    assert!(done, "{topic}-{partition} was never read to its end");
    values
}

const ORDER_OK: &str = r#"{"id":"o-1","amount":12.5}"#;
const ORDER_OK_2: &str = r#"{"id":"o-2","amount":3}"#;
const ORDER_NO_AMOUNT: &str = r#"{"id":"o-3"}"#;
const ORDER_BAD_TYPE: &str = r#"{"id":"o-4","amount":"twelve"}"#;

/// The schema example refuses a batch with bad records (INVALID_RECORD, its message, each bad
/// record named) and appends nothing of it, while good batches go through; librdkafka and the
/// HTTP API see the same refusal; HTTP shows the counts and /metrics counts them; a second
/// validator on the topic is a conflict, a transform is not a validator, and once deleted the
/// topic takes anything again.
#[test]
fn a_schema_validator_refuses_bad_batches_and_appends_nothing_of_them() {
    let node = Runnel::start(&[]);
    create_topic(&node, "orders", 2);
    let api = HttpApi::new(&node);
    let parameters = json!({"required": "id,amount", "types": "id:string,amount:number"});
    let deployed =
        deploy(&api, "orders-schema", "runnel-example-schema", json!({"topic": "orders", "parameters": parameters}));
    assert_eq!(deployed.status, 201, "{}", deployed.text);
    assert_eq!(deployed.json["on_failure"], "reject");

    let mut conn = RawConn::open(&node, "validator-test");
    let ok = produce_raw(&mut conn, "orders", 0, &[ORDER_OK, ORDER_OK_2]);
    assert_eq!((ok.error_code, ok.base_offset), (0, 0), "{ok:?}");
    let refused = produce_raw(&mut conn, "orders", 0, &[ORDER_OK, ORDER_NO_AMOUNT, ORDER_OK_2, ORDER_BAD_TYPE]);
    assert_eq!(refused.error_code, INVALID_RECORD, "{refused:?}");
    let message = refused.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    assert!(message.contains("orders-schema") && message.contains("missing required field `amount`"), "{message}");
    let named: Vec<(i32, String)> = refused
        .record_errors
        .iter()
        .map(|e| (e.batch_index, e.batch_index_error_message.as_ref().map(|m| m.to_string()).unwrap_or_default()))
        .collect();
    assert_eq!(
        named,
        [
            (1, "missing required field `amount`".to_string()),
            (3, "field `amount` is a string, expected number".to_string())
        ]
    );
    let after = produce_raw(&mut conn, "orders", 0, &[ORDER_OK]);
    assert_eq!((after.error_code, after.base_offset), (0, 2), "the refused batch took no offsets: {after:?}");
    // One request, two partitions judged at once: each gets its own verdict, in its place.
    let both = produce_partitions(&mut conn, "orders", &[(1, &[ORDER_NO_AMOUNT]), (0, &[ORDER_OK_2])]);
    let answers: Vec<(i32, i16, i64)> = both.iter().map(|p| (p.index, p.error_code, p.base_offset)).collect();
    assert_eq!(answers, [(1, INVALID_RECORD, -1), (0, 0, 3)], "{both:?}");
    assert_eq!(values(&node, "orders", 0), [ORDER_OK, ORDER_OK_2, ORDER_OK, ORDER_OK_2]);

    // librdkafka: the refused record's delivery fails with INVALID_RECORD; the good one lands.
    let producer: FutureProducer = client_config(&node, &[("acks", "all"), ("linger.ms", "0")]).create().unwrap();
    let delivered =
        support::block_on(producer.send(FutureRecord::to("orders").partition(1).key("a").payload(ORDER_OK), TIMEOUT));
    assert!(delivered.is_ok(), "{delivered:?}");
    let refused =
        support::block_on(producer.send(FutureRecord::to("orders").partition(1).key("b").payload("not json"), TIMEOUT));
    match refused {
        Err((rdkafka::error::KafkaError::MessageProduction(code), _)) => {
            assert_eq!(code, RDKafkaErrorCode::InvalidRecord)
        }
        other => panic!("expected INVALID_RECORD, got {other:?}"),
    }
    assert_eq!(values(&node, "orders", 1), [ORDER_OK]);

    // HTTP v3 produce goes through the same handler.
    let cluster = api.cluster_id();
    let path = format!("/v3/clusters/{cluster}/topics/orders/records");
    let bad = api.post(&path, &json!({"partition_id": 1, "value": {"type": "JSON", "data": {"id": "h-1"}}}));
    assert!(bad.text.contains("missing required field `amount`"), "{} {}", bad.status, bad.text);
    let good =
        api.post(&path, &json!({"partition_id": 1, "value": {"type": "JSON", "data": {"id": "h-2", "amount": 1}}}));
    assert_eq!(good.status, 200, "{}", good.text);
    assert_eq!(values(&node, "orders", 1).len(), 2);

    let detail = api.get("/v1/validators/orders-schema");
    assert_eq!(detail.status, 200, "{}", detail.text);
    assert!(detail.json["batches_accepted"].as_u64().unwrap() >= 4, "{}", detail.text);
    assert_eq!(detail.json["batches_rejected"].as_u64(), Some(4), "{}", detail.text);
    assert_eq!(detail.json["records_rejected"].as_u64(), Some(7), "{}", detail.text);
    assert!(detail.json["last_rejection"].as_str().unwrap().contains("amount"), "{}", detail.text);
    assert_eq!(detail.json["nodes"][0]["state"], "loaded");
    let list = api.get("/v1/validators");
    assert_eq!(list.json["validators"][0]["name"], "orders-schema", "{}", list.text);
    assert_eq!(api.metric_sum("runnel_validator_records_rejected_total"), 7.0);

    // One validator per topic; a transform is not a validator; limits are checked.
    let second = deploy(&api, "other", "runnel-example-schema", json!({"topic": "orders"}));
    assert_eq!(second.status, 409, "{}", second.text);
    let transform = deploy(&api, "other", "runnel-example-identity", json!({"topic": "elsewhere"}));
    assert_eq!(transform.status, 422, "{}", transform.text);
    assert!(transform.text.contains("not a validator"), "{}", transform.text);
    let limits = deploy(&api, "other", "runnel-example-schema", json!({"topic": "t", "call_timeout_ms": 0}));
    assert_eq!(limits.status, 422, "{}", limits.text);
    let policy = deploy(&api, "other", "runnel-example-schema", json!({"topic": "t", "on_failure": "maybe"}));
    assert_eq!(policy.status, 422, "{}", policy.text);

    assert_eq!(api.delete("/v1/validators/orders-schema").status, 204);
    assert_eq!(api.get("/v1/validators/orders-schema").status, 404);
    let unchecked = produce_raw(&mut conn, "orders", 0, &[ORDER_NO_AMOUNT]);
    assert_eq!((unchecked.error_code, unchecked.base_offset), (0, 4), "{unchecked:?}");
}

/// A guest that traps, spins past its deadline or bombs its memory fails closed by default (the
/// batch refused, naming the failure, nothing appended) and open with `on_failure=accept`; other
/// topics are served meanwhile, each failure is counted and logged, a failed init fails closed,
/// and the validator survives a restart of the node (it lives in the metadata quorum).
#[test]
fn hostile_validators_are_contained_by_their_failure_policy() {
    let data = tempfile::tempdir().unwrap();
    let mut node = Runnel::start_in(data.path(), &[]);
    create_topic(&node, "guarded", 1);
    create_topic(&node, "free", 1);
    let api = HttpApi::new(&node);
    let config = json!({"topic": "guarded", "call_timeout_ms": 300, "memory_bytes": 16 << 20});
    let deployed = deploy(&api, "hostile", "runnel-guest-badvalidator", config.clone());
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let mut conn = RawConn::open(&node, "validator-hostile");
    let mut expected_offset = 0;
    for (command, reason) in [("trap", "trapped"), ("spin", "deadline"), ("membomb", "memory")] {
        let started = Instant::now();
        let answer = produce_raw(&mut conn, "guarded", 0, &["fine", command]);
        let message = answer.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
        assert_eq!(answer.error_code, INVALID_RECORD, "{command}: {answer:?}");
        assert!(message.contains(reason) && message.contains("on_failure=reject"), "{command}: {message}");
        assert!(started.elapsed() < Duration::from_secs(20), "{command} took {:?}", started.elapsed());
        // Served meanwhile and after: another topic, and this one with a fresh instance.
        assert_eq!(produce_raw(&mut conn, "free", 0, &[command]).error_code, 0);
        let fine = produce_raw(&mut conn, "guarded", 0, &["fine"]);
        assert_eq!((fine.error_code, fine.base_offset), (0, expected_offset), "{command}: {fine:?}");
        expected_offset += 1;
    }
    assert_eq!(values(&node, "guarded", 0), ["fine", "fine", "fine"]);
    let detail = api.get("/v1/validators/hostile");
    assert_eq!(detail.json["failures"].as_u64(), Some(3), "{}", detail.text);
    assert!(detail.json["last_error"].as_str().unwrap().contains("memory"), "{}", detail.text);
    let logs = api.get("/v1/validators/hostile/logs");
    assert!(logs.text.contains("on_failure=reject"), "{}", logs.text);

    // Fail open: the batch goes through unchecked, the failure still counted.
    let mut open = config.clone();
    open["on_failure"] = json!("accept");
    let redeployed = deploy(&api, "hostile", "runnel-guest-badvalidator", open);
    assert_eq!(redeployed.status, 200, "{}", redeployed.text);
    assert_eq!(redeployed.json["version"], 2);
    let accepted = produce_raw(&mut conn, "guarded", 0, &["trap"]);
    assert_eq!((accepted.error_code, accepted.base_offset), (0, 3), "{accepted:?}");
    assert!(api.metric_sum("runnel_validator_batches_total") >= 7.0);

    // A failing init fails closed; the validator comes back after a restart.
    let mut broken = config.clone();
    broken["parameters"] = json!({"fail_init": "true"});
    assert_eq!(deploy(&api, "hostile", "runnel-guest-badvalidator", broken).status, 200);
    let refused = produce_raw(&mut conn, "guarded", 0, &["fine"]);
    assert_eq!(refused.error_code, INVALID_RECORD, "{refused:?}");
    assert!(refused.error_message.as_ref().unwrap().contains("init refused"), "{refused:?}");
    assert_eq!(deploy(&api, "hostile", "runnel-guest-badvalidator", config).status, 200);
    drop(conn);
    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let mut conn = RawConn::open(&node, "validator-hostile");
    let after_restart = produce_raw(&mut conn, "guarded", 0, &["reject"]);
    assert_eq!(after_restart.error_code, INVALID_RECORD, "{after_restart:?}");
    assert_eq!(after_restart.record_errors.len(), 1);
    assert_eq!(HttpApi::new(&node).get("/v1/validators/hostile").json["version"], 4);
}

/// The leader of each partition of `topic` as the cluster's metadata names it, once every
/// partition has one.
fn leaders(cluster: &support::cluster::Cluster, topic: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let led = wait_until(TIMEOUT, || {
        let states = support::workload::partition_states(&cluster.bootstrap(), topic).unwrap_or_default();
        found = states.iter().filter_map(|s| s.leader).collect();
        !states.is_empty() && found.len() == states.len()
    });
    assert!(led, "{topic} never had a leader for every partition: {found:?}");
    found
}

/// On three nodes, a validator deployed through one node refuses bad batches on every
/// partition's leader at once (each node loads it from the metadata before judging), keeps doing
/// so on the new leader after the old one is killed with kill -9, and any node's HTTP view adds
/// up the counters of the nodes that answer and names the one that does not.
#[test]
fn every_leader_of_a_cluster_checks_its_partitions_through_a_failover() {
    let mut cluster = support::cluster::Cluster::start(3, &[]);
    let bootstrap = cluster.bootstrap();
    support::workload::create_topic(&bootstrap, "orders", 3, 3, &[("min.insync.replicas", "2")]).expect("create");
    let before = leaders(&cluster, "orders");
    let parameters = json!({"required": "id,amount"});
    let api = HttpApi::new(cluster.node(1));
    let deployed =
        deploy(&api, "orders-schema", "runnel-example-schema", json!({"topic": "orders", "parameters": parameters}));
    assert_eq!(deployed.status, 201, "{}", deployed.text);

    let mut accepted: u64 = 0;
    for (partition, &leader) in before.iter().enumerate() {
        let mut conn = RawConn::open(cluster.node(leader), "validator-cluster");
        let refused = produce_raw(&mut conn, "orders", partition as i32, &[ORDER_OK, ORDER_NO_AMOUNT]);
        assert_eq!(refused.error_code, INVALID_RECORD, "partition {partition} on node {leader}: {refused:?}");
        let ok = produce_raw(&mut conn, "orders", partition as i32, &[ORDER_OK]);
        assert_eq!((ok.error_code, ok.base_offset), (0, 0), "partition {partition} on node {leader}: {ok:?}");
        accepted += 1;
    }

    let victim = before[0];
    cluster.kill9(victim);
    let moved = wait_until(TIMEOUT, || {
        support::workload::partition_states(&cluster.bootstrap(), "orders")
            .and_then(|s| s.into_iter().find(|s| s.partition == 0))
            .and_then(|s| s.leader)
            .is_some_and(|l| l != victim)
    });
    assert!(moved, "partition 0 never moved off node {victim}");
    let successor = leaders(&cluster, "orders")[0];
    let mut conn = RawConn::open(cluster.node(successor), "validator-cluster");
    let mut last = None;
    let refused = wait_until(TIMEOUT, || {
        let answer = produce_raw(&mut conn, "orders", 0, &[ORDER_NO_AMOUNT]);
        let code = answer.error_code;
        last = Some(answer);
        code == INVALID_RECORD
    });
    assert!(refused, "the new leader {successor} of partition 0 never refused a bad batch: {last:?}");
    let ok = produce_raw(&mut conn, "orders", 0, &[ORDER_OK_2]);
    assert_eq!((ok.error_code, ok.base_offset), (0, 1), "{ok:?}");
    accepted += 1;

    let viewer = (1..=3).find(|id| *id != victim).expect("a live node");
    let detail = HttpApi::new(cluster.node(viewer)).get("/v1/validators/orders-schema");
    assert_eq!(detail.status, 200, "{}", detail.text);
    assert_eq!(detail.json["nodes_unreachable"], json!([victim]), "{}", detail.text);
    let live_accepted: u64 =
        detail.json["nodes"].as_array().unwrap().iter().filter_map(|n| n["batches_accepted"].as_u64()).sum();
    assert_eq!(detail.json["batches_accepted"].as_u64(), Some(live_accepted), "{}", detail.text);
    // The victim's counters went with it: it had judged the partitions it led before.
    let victim_batches = before.iter().filter(|l| **l == victim).count() as u64;
    assert_eq!(live_accepted, accepted - victim_batches, "{}", detail.text);
    assert!(detail.json["batches_rejected"].as_u64().unwrap() > 3 - victim_batches, "{}", detail.text);
}

/// A transform's outputs are produced like anyone's: a validator on the output topic judges
/// them under either delivery (at-least-once outputs to partitions led here used to be
/// appended past it). A refused batch is the transform's error, with the validator's reason,
/// and its error policy decides (here skip); the good outputs land.
#[test]
fn transform_outputs_are_judged_by_the_output_topics_validator() {
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let parameters = json!({"required": "id,amount"});
    for delivery in ["at_least_once", "exactly_once"] {
        let (input, output) = (format!("raw-{delivery}"), format!("clean-{delivery}"));
        create_topic(&node, &input, 1);
        create_topic(&node, &output, 1);
        let config = json!({"topic": output, "parameters": parameters});
        assert_eq!(deploy(&api, &format!("v-{delivery}"), "runnel-example-schema", config).status, 201);
        let module =
            base64::engine::general_purpose::STANDARD.encode(support::guest_component("runnel-example-identity"));
        let transform = json!({
            "input_topic": input,
            "output_topics": [output],
            "delivery": delivery,
            "batch_records_max": 1,
            "error_policy": "skip",
            "module_base64": module,
        });
        let name = format!("t-{delivery}");
        let deployed = api.send_json("PUT", &format!("/v1/transforms/{name}"), None, &transform);
        assert_eq!(deployed.status, 201, "{}", deployed.text);
        let mut conn = RawConn::open(&node, "validator-transform-test");
        for value in [ORDER_OK, ORDER_NO_AMOUNT, ORDER_OK_2] {
            let answer = produce_raw(&mut conn, &input, 0, &[value]);
            assert_eq!(answer.error_code, 0, "{answer:?}");
        }
        let detail = |api: &HttpApi| api.get(&format!("/v1/transforms/{name}")).json;
        let done = wait_until(TIMEOUT, || {
            let d = detail(&api);
            d["partitions"][0]["position"] == 3 && d["partitions"][0]["skipped"] == 1
        });
        assert!(done, "{delivery}: never got through the 3 inputs: {}", detail(&api));
        let partition = &detail(&api)["partitions"][0];
        let error = partition["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains("InvalidRecord") && error.contains("missing required field `amount`"),
            "{delivery}: {partition}"
        );
        assert_eq!(values(&node, &output, 0), [ORDER_OK, ORDER_OK_2], "{delivery}: only the valid outputs");
    }
}
