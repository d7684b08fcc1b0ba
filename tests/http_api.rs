//! The HTTP API against the real binary: records cross between HTTP and librdkafka with
//! identical bytes, lag agrees between /v1, /v3 and /metrics, every route of /openapi.json
//! answers, and bad input gets the documented errors.

mod support;

use std::time::Duration;

use base64::Engine;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use support::{client_config, wait_until, HttpApi, Runnel};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const TIMEOUT: Duration = Duration::from_secs(30);

fn assign_consumer(node: &Runnel, topic: &str, partitions: i32) -> BaseConsumer {
    let consumer: BaseConsumer =
        client_config(node, &[("group.id", "reader"), ("enable.auto.commit", "false")]).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).expect("partition");
    }
    consumer.assign(&list).expect("assign");
    consumer
}

/// (partition, offset, key, value, headers) of every record librdkafka reads, `count` of them.
type Seen = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>);

fn read_all(consumer: &BaseConsumer, count: usize) -> Vec<Seen> {
    let mut seen = Vec::new();
    assert!(
        wait_until(TIMEOUT, || {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let headers = m
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.map(|v| v.to_vec()))).collect())
                    .unwrap_or_default();
                seen.push((
                    m.partition(),
                    m.offset(),
                    m.key().map(|k| k.to_vec()),
                    m.payload().map(|v| v.to_vec()),
                    headers,
                ));
            }
            seen.len() >= count
        }),
        "librdkafka read {} of {count} records",
        seen.len()
    );
    seen.sort_by_key(|s| (s.0, s.1));
    seen
}

#[test]
fn http_produced_records_reach_librdkafka_byte_for_byte() {
    // Proves v3 (BINARY/STRING/JSON, headers, explicit partition, streamed) and v2 (binary and
    // json) produce store exactly the bytes librdkafka then reads, at the offsets HTTP answered.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let cluster = api.cluster_id();
    assert_eq!(api.post("/v1/topics", &json!({"name": "bytes", "partitions": 3})).status, 201);

    let binary_key: Vec<u8> = vec![0, 159, 146, 150, 255];
    let binary_value: Vec<u8> = (0..=255u8).collect();
    let one = api.post(
        &format!("/v3/clusters/{cluster}/topics/bytes/records"),
        &json!({
            "partition_id": 2,
            "key": {"type": "BINARY", "data": B64.encode(&binary_key)},
            "value": {"type": "BINARY", "data": B64.encode(&binary_value)},
            "headers": [{"name": "trace", "value": B64.encode(b"\x01\x02")}, {"name": "empty", "value": null}],
        }),
    );
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json["partition_id"], 2);
    assert_eq!(one.json["offset"], 0);

    // Streamed: three objects back to back, one result line each.
    let stream = [
        json!({"partition_id": 0, "key": {"type": "STRING", "data": "k1"}, "value": {"type": "JSON", "data": {"n": 1}}}),
        json!({"partition_id": 0, "value": {"type": "STRING", "data": "plain text"}}),
        json!({"partition_id": 0, "key": {"type": "STRING", "data": "k3"}}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect::<Vec<_>>()
    .join("\n");
    let streamed = api.call(
        "POST",
        &format!("/v3/clusters/{cluster}/topics/bytes/records"),
        Some("application/json"),
        Some(stream.into_bytes()),
    );
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    let lines: Vec<Value> = streamed.text.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.iter().map(|l| l["offset"].as_i64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2]);

    let v2_binary = api.send_json(
        "POST",
        "/topics/bytes",
        Some("application/vnd.kafka.binary.v2+json"),
        &json!({"records": [{"partition": 1, "key": B64.encode(b"bk"), "value": B64.encode(&binary_value)}]}),
    );
    assert_eq!(v2_binary.status, 200, "{}", v2_binary.text);
    assert_eq!(v2_binary.json["offsets"][0]["offset"], 0);
    let v2_json = api.send_json(
        "POST",
        "/topics/bytes",
        Some("application/vnd.kafka.json.v2+json"),
        &json!({"records": [{"partition": 1, "value": {"nested": [1, 2, {"x": null}]}}]}),
    );
    assert_eq!(v2_json.json["offsets"][0]["offset"], 1, "{}", v2_json.text);

    let consumer = assign_consumer(&node, "bytes", 3);
    let seen = read_all(&consumer, 6);
    let expected: Vec<Seen> = vec![
        (0, 0, Some(b"k1".to_vec()), Some(br#"{"n":1}"#.to_vec()), vec![]),
        (0, 1, None, Some(b"plain text".to_vec()), vec![]),
        (0, 2, Some(b"k3".to_vec()), None, vec![]),
        (1, 0, Some(b"bk".to_vec()), Some(binary_value.clone()), vec![]),
        (1, 1, None, Some(br#"{"nested":[1,2,{"x":null}]}"#.to_vec()), vec![]),
        (2, 0, Some(binary_key), Some(binary_value), vec![("trace".into(), Some(vec![1, 2])), ("empty".into(), None)]),
    ];
    assert_eq!(seen, expected);
}

#[test]
fn librdkafka_produced_records_read_over_http_byte_for_byte() {
    // Proves records from librdkafka (binary keys, headers, null values) come back identical
    // through the v2 binary consumer and the v1 record browser.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "from-kafka", 2);
    let producer: ThreadedProducer<DefaultProducerContext> =
        client_config(&node, &[("linger.ms", "5")]).create().expect("producer");
    let mut sent = Vec::new();
    for i in 0..40u32 {
        let key = i.to_be_bytes().to_vec();
        let value: Option<Vec<u8>> =
            if i % 10 == 9 { None } else { Some((0..(i * 7 % 300)).map(|b| (b * 31 + i) as u8).collect()) };
        let headers = OwnedHeaders::new().insert(Header { key: "i", value: Some(&key) });
        let mut record = BaseRecord::to("from-kafka").key(&key).partition((i % 2) as i32).headers(headers);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        producer.send(record).map_err(|(e, _)| e).expect("send");
        sent.push(((i % 2) as i32, key, value));
    }
    producer.flush(TIMEOUT).expect("flush");

    let created = api.send_json(
        "POST",
        "/consumers/http-readers",
        Some("application/vnd.kafka.v2+json"),
        &json!({"name": "r1", "format": "binary", "auto.offset.reset": "earliest"}),
    );
    assert_eq!(created.status, 200, "{}", created.text);
    let base = "/consumers/http-readers/instances/r1";
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["from-kafka"]})).status, 204);
    let mut got: Vec<(i32, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    assert!(wait_until(TIMEOUT, || {
        let polled = api.get(&format!("{base}/records?timeout=500"));
        assert_eq!(polled.status, 200, "{}", polled.text);
        for r in polled.json.as_array().expect("array") {
            got.push((
                r["partition"].as_i64().unwrap() as i32,
                B64.decode(r["key"].as_str().unwrap()).unwrap(),
                r["value"].as_str().map(|v| B64.decode(v).unwrap()),
            ));
        }
        got.len() >= sent.len()
    }));
    let mut expected = sent.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);

    let page = api.get("/v1/topics/from-kafka/records?partition=1&offset=0&limit=5");
    assert_eq!(page.status, 200);
    let records = page.json["records"].as_array().unwrap();
    assert_eq!(records.len(), 5);
    assert_eq!(page.json["next_offset"], 5);
    let decode = |text: &Value, encoding: &Value| match encoding.as_str() {
        Some("base64") => B64.decode(text.as_str().unwrap()).unwrap(),
        _ => text.as_str().unwrap().as_bytes().to_vec(),
    };
    for (n, record) in records.iter().enumerate() {
        // Partition 1 holds i = 1, 3, 5, ...
        let i = 2 * n as u32 + 1;
        assert_eq!(decode(&record["key"], &record["key_encoding"]), i.to_be_bytes());
        assert_eq!(record["headers"][0]["key"], "i");
        let (_, _, value) = sent.iter().find(|(_, k, _)| *k == i.to_be_bytes()).unwrap();
        match value {
            Some(value) => assert_eq!(decode(&record["value"], &record["value_encoding"]), *value),
            None => assert!(record["value"].is_null()),
        }
    }
    assert_eq!(api.delete(base).status, 204);
}

fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        if metric != name || !labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))) {
            return None;
        }
        value.parse().ok()
    })
}

#[test]
fn lag_agrees_across_v1_v3_and_metrics() {
    // Proves the lag of committed offsets is the same in /v1/groups, /v3 lags and lag-summary,
    // and Prometheus' kafka_consumergroup_lag, and equals high watermark − committed.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let cluster = api.cluster_id();
    support::create_topic(&node, "lagged", 3);
    for p in 0..3 {
        let records: Vec<Value> = (0..10).map(|i| json!({"partition": p, "value": i})).collect();
        assert_eq!(api.send_json("POST", "/topics/lagged", None, &json!({"records": records})).status, 200);
    }
    let consumer: BaseConsumer =
        client_config(&node, &[("group.id", "billing"), ("enable.auto.commit", "false")]).create().expect("consumer");
    let mut offsets = TopicPartitionList::new();
    let committed = [4i64, 10, 0];
    for (p, o) in committed.iter().enumerate() {
        offsets.add_partition_offset("lagged", p as i32, Offset::Offset(*o)).unwrap();
    }
    // The group's coordinator may still be loading its new __consumer_offsets partition
    // (COORDINATOR_LOAD_IN_PROGRESS, retriable): commit until it is taken.
    let mut last = None;
    let taken = wait_until(TIMEOUT, || {
        last = consumer.commit(&offsets, CommitMode::Sync).err();
        last.is_none()
    });
    assert!(taken, "commit: {last:?}");
    let expected_lag = [6i64, 0, 10];

    let group = api.get("/v1/groups/billing");
    assert_eq!(group.status, 200, "{}", group.text);
    assert_eq!(group.json["total_lag"], 16);
    for (p, lag) in expected_lag.iter().enumerate() {
        let row = &group.json["offsets"][p];
        assert_eq!((row["partition"].as_i64(), row["lag"].as_i64()), (Some(p as i64), Some(*lag)));
        assert_eq!(row["log_end_offset"], 10);
        assert_eq!(row["committed_offset"], committed[p]);
    }
    let lags = api.get(&format!("/v3/clusters/{cluster}/consumer-groups/billing/lags"));
    assert_eq!(lags.status, 200);
    let v3: Vec<(i64, i64)> = lags.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["partition_id"].as_i64().unwrap(), l["lag"].as_i64().unwrap()))
        .collect();
    assert_eq!(v3, vec![(0, 6), (1, 0), (2, 10)]);
    let summary = api.get(&format!("/v3/clusters/{cluster}/consumer-groups/billing/lag-summary"));
    assert_eq!((summary.json["total_lag"].as_i64(), summary.json["max_lag"].as_i64()), (Some(16), Some(10)));
    assert_eq!(summary.json["max_lag_partition_id"], 2);
    let listed = api.get("/v1/groups");
    assert!(listed.json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["group_id"] == "billing" && g["total_lag"] == 16));

    let metrics = api.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.content_type.starts_with("text/plain"));
    for (p, lag) in expected_lag.iter().enumerate() {
        let labels = [("consumergroup", "billing"), ("topic", "lagged"), ("partition", &p.to_string()[..])];
        assert_eq!(metric(&metrics.text, "kafka_consumergroup_lag", &labels), Some(*lag as f64), "partition {p}");
    }
    assert_eq!(
        metric(&metrics.text, "kafka_server_brokertopicmetrics_messages_in_total", &[("topic", "lagged")]),
        Some(30.0)
    );
    assert!(
        metric(&metrics.text, "kafka_network_requestmetrics_requests_total", &[("request", "OffsetCommit")]).unwrap()
            >= 1.0
    );
    assert!(
        metric(&metrics.text, "runnel_http_requests_total", &[("route", "/topics/{topic}"), ("status", "200")])
            .unwrap()
            >= 3.0
    );
    assert_eq!(
        metric(&metrics.text, "kafka_log_log_log_end_offset", &[("topic", "lagged"), ("partition", "2")]),
        Some(10.0)
    );
    assert_eq!(metric(&metrics.text, "kafka_server_replicamanager_underreplicatedpartitions", &[]), Some(0.0));
}

#[test]
fn replication_health_has_kafkas_metric_names_and_agrees_with_v1_cluster() {
    // Proves /metrics has the replication series under the names of Kafka's JMX exporter
    // (under-replicated, offline, ISR shrinks/expands, max lag, controller and broker counts)
    // with the values a healthy one-node cluster must have, and /v1/cluster carries the same
    // partition counts, per-node roles and leaderships, and a 10-minute ISR change history.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    assert_eq!(api.post("/v1/topics", &json!({"name": "health", "partitions": 4})).status, 201);
    let cluster = api.get("/v1/cluster").json;
    assert_eq!(cluster["partitions"], 4, "{cluster}");
    assert_eq!(cluster["under_replicated_partitions"], 0);
    assert_eq!(cluster["offline_partitions"], 0);
    assert_eq!(cluster["reassigning_partitions"], 0);
    let me = &cluster["nodes"][0];
    assert_eq!(me["state"], "live");
    assert_eq!(me["roles"], json!(["broker", "controller"]));
    assert_eq!(me["is_controller"], true);
    assert_eq!(me["leader_partitions"], 4);
    assert_eq!(me["replica_partitions"], 4);
    let isr = &cluster["isr_changes"];
    assert_eq!(isr["interval_ms"], 10_000);
    let buckets = isr["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 60, "10 minutes of 10 s buckets");
    assert!(buckets.windows(2).all(|w| w[1]["start_ms"].as_i64() == w[0]["start_ms"].as_i64().map(|t| t + 10_000)));
    assert_eq!(isr["shrinks"], 0);
    let topic = api.get("/v1/topics/health").json;
    let p0 = &topic["partitions"][0];
    assert_eq!(p0["out_of_sync_replicas"], json!([]), "{topic}");
    assert_eq!(p0["adding_replicas"], json!([]));
    assert_eq!(p0["removing_replicas"], json!([]));
    let listed = api.get("/v1/topics").json;
    let summary = listed["topics"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "health")).cloned();
    let summary = summary.unwrap_or_else(|| panic!("health missing from {listed}"));
    assert_eq!(
        (summary["offline_partitions"].clone(), summary["reassigning_partitions"].clone()),
        (json!(0), json!(0))
    );

    let text = api.get("/metrics").text;
    for (name, value) in [
        ("kafka_server_replicamanager_underreplicatedpartitions", 0.0),
        ("kafka_server_replicamanager_reassigningpartitions", 0.0),
        ("kafka_server_replicamanager_isrshrinks_total", 0.0),
        ("kafka_server_replicamanager_isrexpands_total", 0.0),
        ("kafka_server_replicamanager_leadercount", 4.0),
        ("kafka_server_replicamanager_partitioncount", 4.0),
        ("kafka_server_replicafetchermanager_maxlag", 0.0),
        ("kafka_controller_kafkacontroller_offlinepartitionscount", 0.0),
        ("kafka_controller_kafkacontroller_activecontrollercount", 1.0),
        ("kafka_controller_kafkacontroller_activebrokercount", 1.0),
        ("kafka_controller_kafkacontroller_fencedbrokercount", 0.0),
    ] {
        assert_eq!(metric(&text, name, &[]), Some(value), "{name}");
    }
    for old in
        ["kafka_server_replicamanager_under_replicated_partitions", "kafka_server_replicamanager_isr_shrinks_total"]
    {
        assert!(!text.contains(old), "{old} is still exported");
    }
}

#[test]
fn topics_page_by_name_and_the_descriptor_budget_is_reported() {
    // Proves GET /v1/topics answers a page at a time in name order (`next` cursor, `total`
    // over all pages, `prefix` and `search` applied before paging), refuses a limit outside
    // 1..=5000, and the node reports its descriptors and log file cache in /metrics and
    // /v1/cluster with figures that agree with each other and with the kernel's limit.
    let node = Runnel::start(&["--log-open-files-max", "40"]);
    let api = HttpApi::new(&node);
    let names: Vec<String> = (0..12).map(|i| format!("page-{i:02}")).chain(["zeta".to_string()]).collect();
    support::create_topics(&node, &names, 2);
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = after.as_ref().map(|a| format!("&after={a}")).unwrap_or_default();
        let page = api.get(&format!("/v1/topics?limit=5{query}")).json;
        assert_eq!(page["total"], 13, "{page}");
        let topics = page["topics"].as_array().expect("topics");
        assert!(topics.len() <= 5);
        seen.extend(topics.iter().map(|t| t["name"].as_str().expect("name").to_string()));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, names, "every topic once, in name order");
    let page = api.get("/v1/topics?prefix=page-1&limit=2").json;
    assert_eq!((page["total"].clone(), page["next"].clone()), (json!(2), json!(null)), "{page}");
    let page = api.get("/v1/topics?search=ET").json;
    assert_eq!(page["topics"][0]["name"], "zeta", "search ignores case: {page}");
    assert_eq!(page["total"], 1);
    for bad in ["0", "5001"] {
        let refused = api.get(&format!("/v1/topics?limit={bad}"));
        assert_eq!((refused.status, refused.json["error_code"].clone()), (400, json!(40002)), "{}", refused.json);
    }

    // Produce to every partition so the cache has opened files, then read its figures.
    let producer: ThreadedProducer<DefaultProducerContext> =
        client_config(&node, &[("linger.ms", "0")]).create().expect("producer");
    for name in &names {
        for partition in 0..2 {
            producer.send(BaseRecord::<(), str>::to(name).partition(partition).payload("x")).expect("enqueue");
        }
    }
    producer.flush(TIMEOUT).expect("flush");
    let files = api.get("/v1/cluster").json["files"].clone();
    let cache = &files["log_file_cache"];
    assert_eq!(cache["capacity"], 40, "{files}");
    let open = cache["open"].as_u64().expect("cache open");
    assert!((1..=40).contains(&open), "{files}");
    let soft = files["soft_limit"].as_u64().expect("soft limit");
    assert!(files["open"].as_u64().is_some_and(|o| o > open && o < soft), "{files}");
    assert!(files["hard_limit"].as_u64().is_some_and(|h| h >= soft), "raised to at most the hard limit: {files}");
    // The same figures in /metrics.
    let text = api.get("/metrics").text;
    assert_eq!(metric(&text, "runnel_log_file_cache_capacity", &[]), Some(40.0));
    assert_eq!(metric(&text, "process_max_fds", &[]), Some(soft as f64));
    assert!(metric(&text, "process_open_fds", &[]).is_some_and(|v| v > 0.0));
    assert!(metric(&text, "runnel_log_file_cache_open", &[]).is_some_and(|v| v >= 1.0), "{text}");
    assert_eq!(metric(&text, "runnel_log_file_cache_open_failures_total", &[]), Some(0.0));
}

#[test]
fn aggregated_metrics_write_a_series_per_topic_not_per_partition() {
    // Proves --metrics-aggregate true sums the log and group series per topic (no partition
    // label, values the sums of the partitions'), and the per-topic group sums are written in
    // both modes.
    for aggregate in [false, true] {
        let flag = aggregate.to_string();
        let node = Runnel::start(&["--metrics-aggregate", &flag]);
        let api = HttpApi::new(&node);
        assert_eq!(api.post("/v1/topics", &json!({"name": "summed", "partitions": 3})).status, 201);
        let producer: ThreadedProducer<DefaultProducerContext> =
            client_config(&node, &[("linger.ms", "0")]).create().expect("producer");
        for (partition, records) in [(0, 1), (1, 2), (2, 4)] {
            for _ in 0..records {
                producer.send(BaseRecord::<(), str>::to("summed").partition(partition).payload("x")).expect("enqueue");
            }
        }
        producer.flush(TIMEOUT).expect("flush");
        let consumer = assign_consumer(&node, "summed", 3);
        let mut offsets = TopicPartitionList::new();
        for partition in 0..3 {
            offsets.add_partition_offset("summed", partition, Offset::Offset(1)).expect("offset");
        }
        consumer.commit(&offsets, CommitMode::Sync).expect("commit");
        let text = api.get("/metrics").text;
        let per_partition =
            |name: &str| text.lines().any(|l| l.starts_with(&format!("{name}{{")) && l.contains("partition=\""));
        for name in ["kafka_log_log_log_end_offset", "kafka_log_log_size", "kafka_consumergroup_lag"] {
            assert_eq!(per_partition(name), !aggregate, "{name} with --metrics-aggregate {aggregate}:\n{text}");
        }
        if aggregate {
            assert_eq!(metric(&text, "kafka_log_log_log_end_offset", &[("topic", "summed")]), Some(7.0), "{text}");
            assert!(!text.contains("\nkafka_consumergroup_lag{"), "{text}");
        } else {
            assert_eq!(
                metric(&text, "kafka_log_log_log_end_offset", &[("topic", "summed"), ("partition", "2")]),
                Some(4.0)
            );
        }
        let group = [("consumergroup", "reader"), ("topic", "summed")];
        assert_eq!(metric(&text, "kafka_consumergroup_lag_sum", &group), Some(4.0), "(1-1)+(2-1)+(4-1):\n{text}");
        assert_eq!(metric(&text, "kafka_consumergroup_current_offset_sum", &group), Some(3.0));
    }
}

#[test]
fn every_openapi_route_answers() {
    // Proves /openapi.json lists the routes the server has: each path and method, with its
    // parameters filled in, answers without 5xx, 405 or "no such route".
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let cluster = api.cluster_id();
    assert_eq!(api.post("/v1/topics", &json!({"name": "doc", "partitions": 2})).status, 201);
    api.send_json("POST", "/topics/doc", None, &json!({"records": [{"value": 1}, {"value": 2}]}));
    let created = api.post("/consumers/docs", &json!({"name": "c", "auto.offset.reset": "earliest"}));
    assert_eq!(created.status, 200);
    let doc = api.get("/openapi.json").json;
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 30, "only {} paths", paths.len());
    let fill = |path: &str| {
        path.replace("{cluster_id}", &cluster)
            .replace("{topic_name}", "doc")
            .replace("{topic}", "doc")
            .replace("{group}", "docs")
            .replace("{consumer_group_id}", "docs")
            .replace("{instance}", "c")
            .replace("{partition_id}", "0")
            .replace("{name}", "retention.ms")
    };
    let body_for = |path: &str, method: &str| -> Option<Value> {
        Some(match (method, path) {
            ("POST", "/v1/topics") => json!({"name": "doc-created", "partitions": 1}),
            ("POST", "/v3/clusters/{cluster_id}/topics") => json!({"topic_name": "doc-v3", "partitions_count": 1}),
            (_, p) if p.ends_with("/configs/{name}") => json!({"value": "3600000"}),
            ("PUT", "/v1/topics/{topic}/configs") => json!({"set": {"retention.ms": "7200000"}}),
            ("PUT", _) if path.ends_with("/configs") => json!({"data": [{"name": "retention.ms", "value": "60000"}]}),
            (_, p) if p.ends_with("/records") => json!({"value": {"type": "JSON", "data": 1}}),
            ("POST", "/topics/{topic}") => json!({"records": [{"value": 3}]}),
            ("POST", "/consumers/{group}") => json!({"name": "c2"}),
            (_, p) if p.ends_with("/subscription") => json!({"topics": ["doc"]}),
            (_, p) if p.ends_with("/assignments") => json!({"partitions": [{"topic": "doc", "partition": 0}]}),
            (_, p) if p.ends_with("/positions") => json!({"offsets": [{"topic": "doc", "partition": 0, "offset": 0}]}),
            (_, p) if p.contains("/positions/") => json!({"partitions": [{"topic": "doc", "partition": 0}]}),
            (_, p) if p.ends_with("/offsets") && method == "POST" => {
                json!({"offsets": [{"topic": "doc", "partition": 0, "offset": 0}]})
            }
            _ => return None,
        })
    };
    let mut calls: Vec<(String, String)> = Vec::new();
    for (path, item) in paths {
        for method in ["get", "post", "put", "delete"] {
            if item.get(method).is_some() {
                calls.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    // Deletions last, instance and topic deletions at the very end.
    calls.sort_by_key(|(m, p)| {
        (m == "DELETE", p.contains("/instances/{instance}") && m == "DELETE" && !p.contains("/subscription"), p.clone())
    });
    let mut answered = 0;
    for (method, path) in &calls {
        let body = body_for(path, method);
        let answer = match &body {
            Some(body) => api.send_json(method, &fill(path), None, body),
            None => api.call(method, &fill(path), None, None),
        };
        assert!(
            answer.status < 500 && answer.status != 405 && answer.json["error_code"] != 40405,
            "{method} {path} answered {}: {}",
            answer.status,
            answer.text
        );
        answered += 1;
    }
    assert_eq!(answered, calls.len());
    println!("{answered} routes from /openapi.json answered");
}

#[test]
fn bad_input_gets_the_documented_errors() {
    // Proves malformed, wrongly typed, oversized and misdirected requests get the documented
    // status and error_code, and the node keeps serving.
    let node = Runnel::start(&["--socket-request-max-bytes", "1048576"]);
    let api = HttpApi::new(&node);
    let cluster = api.cluster_id();
    let expect = |answer: support::HttpAnswer, status: u16, code: u64| {
        assert_eq!(answer.status, status, "{}", answer.text);
        assert_eq!(answer.json["error_code"], code, "{}", answer.text);
        assert!(answer.json["message"].as_str().is_some_and(|m| !m.is_empty()));
    };
    expect(api.call("POST", "/v1/topics", Some("application/json"), Some(b"{not json".to_vec())), 400, 40001);
    expect(api.post("/v1/topics", &json!({"name": 5})), 422, 42201);
    expect(api.call("POST", "/v1/topics", Some("text/plain"), Some(b"{}".to_vec())), 415, 41501);
    expect(api.post("/v1/topics", &json!({"name": "bad name!"})), 422, 42202);
    expect(api.post("/v1/topics", &json!({"name": "zero", "partitions": 0})), 422, 42202);
    expect(api.post("/v1/topics", &json!({"name": "cfg", "configs": {"retention.ms": "soon"}})), 422, 42202);
    assert_eq!(api.post("/v1/topics", &json!({"name": "small", "configs": {"max.message.bytes": "1000"}})).status, 201);
    expect(api.post("/v1/topics", &json!({"name": "small"})), 409, 40901);
    expect(api.get("/v1/topics/missing"), 404, 40401);
    expect(api.get(&format!("/v3/clusters/{cluster}/topics/missing")), 404, 40401);
    expect(api.get("/v3/clusters/not-this-one/topics"), 404, 40406);
    expect(api.send_json("POST", "/topics/missing", None, &json!({"records": [{"value": 1}]})), 404, 40401);
    expect(api.get("/v1/topics/small/records?partition=7"), 404, 40402);
    expect(api.get("/v1/topics/small/records?limit=abc"), 400, 40002);
    expect(api.get("/v1/groups/nobody"), 404, 40404);
    expect(api.get("/consumers/g/instances/none/records"), 404, 40403);
    expect(api.get("/no/such/route"), 404, 40405);
    expect(api.call("PATCH", "/v1/topics", None, None), 405, 40501);
    // A record larger than the topic's max.message.bytes.
    let big = "x".repeat(5_000);
    expect(
        api.post(
            &format!("/v3/clusters/{cluster}/topics/small/records"),
            &json!({"value": {"type": "STRING", "data": big}}),
        ),
        413,
        41301,
    );
    // A body larger than socket.request.max.bytes (1 MiB here) is refused once the limit is
    // read, without reading the rest (raw socket: an HTTP client would fail writing the body
    // the server stops reading).
    {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(node.http_addr).expect("connect");
        write!(
            stream,
            "POST /topics/small HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            2 << 20
        )
        .unwrap();
        stream.write_all(&vec![b'y'; (1 << 20) + (64 << 10)]).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut response = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&response).contains("error_code") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&chunk[..n]),
            }
        }
        let response = String::from_utf8_lossy(&response);
        assert!(response.starts_with("HTTP/1.1 413"), "{response}");
        assert!(response.contains("\"error_code\":41301"), "{response}");
    }
    // Binary format values must be base64.
    expect(
        api.send_json(
            "POST",
            "/topics/small",
            Some("application/vnd.kafka.binary.v2+json"),
            &json!({"records": [{"value": "***"}]}),
        ),
        422,
        42202,
    );
    expect(
        api.send_json("POST", "/topics/small", Some("application/vnd.kafka.avro.v2+json"), &json!({"records": []})),
        415,
        41501,
    );
    // A consumer that is not subscribed cannot poll; a duplicate instance is a conflict.
    assert_eq!(api.post("/consumers/g", &json!({"name": "i"})).status, 200);
    expect(api.post("/consumers/g", &json!({"name": "i"})), 409, 40902);
    expect(api.get("/consumers/g/instances/i/records"), 409, 40904);
    // A poll accepting only another embedded format than the instance's (avro here; it was
    // served JSON) is not acceptable, as Confluent answers; one that also accepts json is.
    for (accept, status) in [
        ("application/vnd.kafka.avro.v2+json", "406"),
        ("application/vnd.kafka.avro.v2+json, application/vnd.kafka.json.v2+json", "409"),
    ] {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(node.http_addr).expect("connect");
        write!(
            stream,
            "GET /consumers/g/instances/i/records HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        assert!(response.starts_with(&format!("HTTP/1.1 {status}")), "{accept}: {response}");
    }
    expect(api.post("/consumers/g/instances/i/subscription", &json!({"topics": ["missing"]})), 404, 40401);
    // Still serving.
    assert_eq!(api.get("/v1/cluster").status, 200);
}
