//! HTTP consumer instances (Confluent v2) against the real binary: real group members that
//! share partitions with librdkafka members, commit, resume, seek and expire.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::Message;
use serde_json::{json, Value};
use support::{wait_until, HttpApi, Runnel};

const TIMEOUT: Duration = Duration::from_secs(60);
const V2: Option<&str> = Some("application/vnd.kafka.v2+json");

fn produce(api: &HttpApi, topic: &str, partitions: i32, per_partition: i32) {
    for p in 0..partitions {
        let records: Vec<Value> =
            (0..per_partition).map(|i| json!({"partition": p, "value": {"p": p, "i": i}})).collect();
        let answer = api.send_json("POST", &format!("/topics/{topic}"), None, &json!({"records": records}));
        assert_eq!(answer.status, 200, "{}", answer.text);
    }
}

fn create_instance(api: &HttpApi, group: &str, name: &str, extra: Value) -> String {
    let mut body = json!({"name": name, "format": "json", "auto.offset.reset": "earliest"});
    body.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    let answer = api.send_json("POST", &format!("/consumers/{group}"), V2, &body);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.json["base_uri"].as_str().unwrap().ends_with(&format!("/consumers/{group}/instances/{name}")));
    format!("/consumers/{group}/instances/{name}")
}

fn assigned(api: &HttpApi, base: &str) -> BTreeSet<i64> {
    api.get(&format!("{base}/assignments")).json["partitions"]
        .as_array()
        .map(|ps| ps.iter().map(|p| p["partition"].as_i64().unwrap()).collect())
        .unwrap_or_default()
}

#[test]
fn http_and_librdkafka_members_split_one_group() {
    // Proves an HTTP consumer is a real group member: with a librdkafka member in the same
    // group the 6 partitions are split between them with no overlap and no gap, each reads
    // only its own partitions, and together they read every record once.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "shared", 6);
    produce(&api, "shared", 6, 5);

    let base = create_instance(&api, "mixed", "web", json!({"auto.commit.enable": "false"}));
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["shared"]})).status, 204);
    assert_eq!(api.get(&format!("{base}/subscription")).json["topics"], json!(["shared"]));
    assert!(wait_until(TIMEOUT, || assigned(&api, &base).len() == 6), "HTTP member alone gets all 6 partitions");

    let kafka = support::group_consumer(&node, "mixed", "shared");
    let mut kafka_records: Vec<(i32, i64)> = Vec::new();
    let mut http_records: Vec<(i64, i64)> = Vec::new();
    // Keep both members polling (librdkafka joins during poll; the HTTP member rejoins on its
    // heartbeat) until both hold partitions and together everything was read.
    assert!(
        wait_until(TIMEOUT, || {
            if let Some(Ok(m)) = kafka.poll(Duration::from_millis(100)) {
                kafka_records.push((m.partition(), m.offset()));
            }
            let polled = api.get(&format!("{base}/records?timeout=100"));
            for r in polled.json.as_array().into_iter().flatten() {
                http_records.push((r["partition"].as_i64().unwrap(), r["offset"].as_i64().unwrap()));
            }
            let kafka_assignment = kafka.assignment().map(|a| a.count()).unwrap_or(0);
            let http_assignment = assigned(&api, &base).len();
            kafka_assignment > 0 && http_assignment > 0 && kafka_assignment + http_assignment == 6 && {
                // Everything read since the split: each member's records of its own partitions.
                let mine: BTreeSet<i64> = assigned(&api, &base);
                let theirs: BTreeSet<i64> =
                    kafka.assignment().unwrap().elements().iter().map(|e| e.partition() as i64).collect();
                let covered = |p: i64| {
                    let reader: Vec<i64> = if mine.contains(&p) {
                        http_records.iter().filter(|(q, _)| *q == p).map(|(_, o)| *o).collect()
                    } else {
                        kafka_records.iter().filter(|(q, _)| *q as i64 == p).map(|(_, o)| *o).collect()
                    };
                    (0..5).all(|o| reader.contains(&o))
                };
                mine.is_disjoint(&theirs) && (0..6).all(covered)
            }
        }),
        "members did not split the partitions: http {:?}, kafka {:?}",
        assigned(&api, &base),
        kafka.assignment().ok()
    );
    let group = api.get("/v1/groups/mixed");
    let members = group.json["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{}", group.text);
    assert!(members.iter().any(|m| m["client_id"] == "runnel-http" && m["client_host"] == "/127.0.0.1"));
    let partitions: BTreeSet<i64> = members
        .iter()
        .flat_map(|m| m["assignment"].as_array().unwrap().iter())
        .flat_map(|a| a["partitions"].as_array().unwrap().iter().map(|p| p.as_i64().unwrap()))
        .collect();
    assert_eq!(partitions, (0..6).collect());
    // The same members and assignments through the v3 (Confluent) consumer views.
    let v3 = format!("/v3/clusters/{}/consumer-groups/mixed/consumers", api.cluster_id());
    let consumers = api.get(&v3);
    assert_eq!(consumers.status, 200, "{}", consumers.text);
    let ids: Vec<String> = consumers.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["consumer_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{}", consumers.text);
    let mut v3_partitions = BTreeSet::new();
    for id in &ids {
        let one = api.get(&format!("{v3}/{id}"));
        assert_eq!(one.status, 200, "{}", one.text);
        assert_eq!(one.json["consumer_id"], id.as_str());
        let assignments = api.get(&format!("{v3}/{id}/assignments"));
        assert_eq!(assignments.status, 200, "{}", assignments.text);
        for a in assignments.json["data"].as_array().unwrap() {
            assert_eq!(a["topic_name"], "shared");
            assert!(v3_partitions.insert(a["partition_id"].as_i64().unwrap()), "assigned twice: {a}");
        }
    }
    assert_eq!(v3_partitions, (0..6).collect());
    assert_eq!(api.get(&format!("{v3}/nobody")).status, 404);
    assert_eq!(api.delete(&base).status, 204);
    // The HTTP member left: librdkafka gets all six partitions.
    assert!(wait_until(TIMEOUT, || {
        let _ = kafka.poll(Duration::from_millis(100));
        kafka.assignment().map(|a| a.count()).unwrap_or(0) == 6
    }));
}

#[test]
fn commits_resume_and_seeks() {
    // Proves committed offsets (explicit and "everything returned") survive the instance,
    // a new instance resumes after them, and seeks move positions as asked.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "log", 1);
    produce(&api, "log", 1, 10);
    let base = create_instance(&api, "resumers", "first", json!({"auto.commit.enable": "false"}));
    api.post(&format!("{base}/subscription"), &json!({"topics": ["log"]}));
    let mut offsets = Vec::new();
    assert!(wait_until(TIMEOUT, || {
        let polled = api.get(&format!("{base}/records?timeout=200&max_bytes=30"));
        offsets.extend(polled.json.as_array().into_iter().flatten().map(|r| r["offset"].as_i64().unwrap()));
        !offsets.is_empty()
    }));
    assert!(offsets.len() < 10, "max_bytes bounds a poll: got {}", offsets.len());
    // Explicit commit of the record at offset 3 → committed offset 4.
    let commit =
        api.post(&format!("{base}/offsets"), &json!({"offsets": [{"topic": "log", "partition": 0, "offset": 3}]}));
    assert_eq!(commit.status, 200, "{}", commit.text);
    let committed = api.call(
        "GET",
        &format!("{base}/offsets"),
        Some("application/json"),
        Some(br#"{"partitions":[{"topic":"log","partition":0}]}"#.to_vec()),
    );
    assert_eq!(committed.json["offsets"][0]["offset"], 4, "{}", committed.text);
    assert_eq!(api.delete(&base).status, 204);

    let second = create_instance(&api, "resumers", "second", json!({}));
    api.post(&format!("{second}/subscription"), &json!({"topics": ["log"]}));
    let mut seen = Vec::new();
    assert!(wait_until(TIMEOUT, || {
        let polled = api.get(&format!("{second}/records?timeout=200"));
        seen.extend(polled.json.as_array().into_iter().flatten().map(|r| r["offset"].as_i64().unwrap()));
        seen.len() >= 6
    }));
    assert_eq!(seen, (4..10).collect::<Vec<_>>(), "resumes at the committed offset");
    // Seek back to offset 8, then to the beginning.
    let seek =
        api.post(&format!("{second}/positions"), &json!({"offsets": [{"topic": "log", "partition": 0, "offset": 8}]}));
    assert_eq!(seek.status, 204, "{}", seek.text);
    let again = api.get(&format!("{second}/records?timeout=2000"));
    assert_eq!(
        again.json.as_array().unwrap().iter().map(|r| r["offset"].as_i64().unwrap()).collect::<Vec<_>>(),
        vec![8, 9]
    );
    api.post(&format!("{second}/positions/beginning"), &json!({"partitions": [{"topic": "log", "partition": 0}]}));
    let from_start = api.get(&format!("{second}/records?timeout=2000"));
    assert_eq!(from_start.json[0]["offset"], 0);
    assert_eq!(from_start.json[0]["value"], json!({"p": 0, "i": 0}));
    api.post(&format!("{second}/positions/end"), &json!({"partitions": [{"topic": "log", "partition": 0}]}));
    assert_eq!(api.get(&format!("{second}/records?timeout=100")).json, json!([]));
    // Seeking a partition the instance does not own is a conflict.
    let foreign =
        api.post(&format!("{second}/positions"), &json!({"offsets": [{"topic": "log", "partition": 5, "offset": 0}]}));
    assert_eq!(foreign.status, 409);
    // Auto commit (the default) committed everything returned once the instance is deleted.
    assert_eq!(api.delete(&second).status, 204);
    let group = api.get("/v1/groups/resumers");
    assert_eq!(group.json["offsets"][0]["committed_offset"], 10, "{}", group.text);
    assert_eq!(group.json["total_lag"], 0);
}

#[test]
fn idle_instances_expire_and_leave_their_group() {
    // Proves an instance unused for consumer.instance.timeout.ms is deleted and leaves the
    // group, while a used one stays.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "quiet", 1);
    let idle = create_instance(&api, "expiring", "idle", json!({"consumer.instance.timeout.ms": 1500}));
    api.post(&format!("{idle}/subscription"), &json!({"topics": ["quiet"]}));
    assert!(wait_until(TIMEOUT, || api.get("/v1/groups/expiring").json["members"]
        .as_array()
        .is_some_and(|m| m.len() == 1)));
    // Watch the group, not the instance: any request to the instance keeps it alive.
    assert!(
        wait_until(TIMEOUT, || api.get("/v1/groups/expiring").json["state"] == "Empty"),
        "idle instance did not leave its group"
    );
    assert_eq!(api.get(&format!("{idle}/subscription")).status, 404);
    // An instance can not ask to outlive the bound (it would hold one of the node's instance
    // slots for ever once forgotten).
    let body = json!({"name": "forever", "consumer.instance.timeout.ms": 3_600_001});
    let refused = api.send_json("POST", "/consumers/expiring", V2, &body);
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("above the maximum 3600000"), "{}", refused.text);
}

#[test]
fn http_instances_on_the_consumer_protocol_share_a_group_with_librdkafka_and_choose_the_assignor() {
    // Proves an HTTP consumer instance created with "group.protocol": "consumer" is a KIP-848
    // member: the coordinator assigns it with the "group.remote.assignor" it named (range
    // here), it shares the group's partitions with a librdkafka consumer-protocol member (no
    // overlap, every record read), its commits carry its member epoch
    // (OffsetCommit v9), and when it is deleted (a heartbeat with epoch -1) librdkafka gets
    // everything. An unknown assignor is refused: its polls answer UNSUPPORTED_ASSIGNOR.
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "kip848", 4);
    produce(&api, "kip848", 4, 5);

    let base = create_instance(
        &api,
        "modern",
        "web",
        json!({"group.protocol": "consumer", "group.remote.assignor": "range", "auto.commit.enable": "true"}),
    );
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["kip848"]})).status, 204);
    assert!(wait_until(TIMEOUT, || assigned(&api, &base).len() == 4), "the HTTP member alone gets all 4 partitions");
    let view = api.get("/v1/groups/modern").json;
    assert_eq!(view["protocol_type"], "consumer", "{view:#}");
    assert_eq!(view["assignor"]["name"], "range", "{view:#}");

    let kafka: rdkafka::consumer::BaseConsumer = support::client_config(
        &node,
        &[("group.id", "modern"), ("group.protocol", "consumer"), ("auto.offset.reset", "earliest")],
    )
    .create()
    .expect("consumer");
    kafka.subscribe(&["kip848"]).expect("subscribe");
    let mut kafka_records: Vec<(i64, i64)> = Vec::new();
    let mut http_records: Vec<(i64, i64)> = Vec::new();
    let split = wait_until(TIMEOUT, || {
        if let Some(Ok(m)) = kafka.poll(Duration::from_millis(100)) {
            kafka_records.push((m.partition() as i64, m.offset()));
        }
        let polled = api.get(&format!("{base}/records?timeout=100"));
        for r in polled.json.as_array().into_iter().flatten() {
            http_records.push((r["partition"].as_i64().unwrap(), r["offset"].as_i64().unwrap()));
        }
        let mine = assigned(&api, &base);
        let theirs: BTreeSet<i64> =
            kafka.assignment().map(|a| a.elements().iter().map(|e| e.partition() as i64).collect()).unwrap_or_default();
        // Read by someone: the HTTP member alone reads (and auto-commits) before the split.
        let covered = |p: i64| (0..5).all(|o| http_records.contains(&(p, o)) || kafka_records.contains(&(p, o)));
        mine.len() == 2 && theirs.len() == 2 && mine.is_disjoint(&theirs) && (0..4).all(covered)
    });
    assert!(
        split,
        "no 2/2 split read to the end: http {:?}, kafka {:?}",
        assigned(&api, &base),
        kafka.assignment().ok()
    );
    // The HTTP member's commits (auto commit at its next poll) land with its member epoch.
    let _ = api.get(&format!("{base}/records?timeout=100"));
    let mine = assigned(&api, &base);
    let committed = wait_until(TIMEOUT, || {
        let _ = kafka.poll(Duration::from_millis(50));
        let offsets = api.get("/v1/groups/modern").json["offsets"].clone();
        mine.iter().all(|p| {
            offsets.as_array().into_iter().flatten().any(|o| o["partition"] == *p && o["committed_offset"] == 5)
        })
    });
    assert!(committed, "the HTTP member's commits never landed: {}", api.get("/v1/groups/modern").text);

    assert_eq!(api.delete(&base).status, 204);
    let took_over = wait_until(TIMEOUT, || {
        let _ = kafka.poll(Duration::from_millis(100));
        kafka.assignment().map(|a| a.count()).unwrap_or(0) == 4
    });
    assert!(took_over, "librdkafka never got the partitions the deleted HTTP member left");

    let bad =
        create_instance(&api, "refused", "web", json!({"group.protocol": "consumer", "group.remote.assignor": "nope"}));
    assert_eq!(api.post(&format!("{bad}/subscription"), &json!({"topics": ["kip848"]})).status, 204);
    let mut answer = None;
    let refused = wait_until(TIMEOUT, || {
        let polled = api.get(&format!("{bad}/records?timeout=100"));
        let done = polled.status != 200;
        answer = Some(polled);
        done
    });
    let answer = answer.unwrap();
    assert!(refused, "polls of a member with an unknown assignor kept succeeding: {}", answer.text);
    assert!(answer.text.contains("nope is not supported"), "{} {}", answer.status, answer.text);
    let invalid = api.send_json("POST", "/consumers/x", V2, &json!({"group.remote.assignor": "range"}));
    assert_eq!(invalid.status, 422, "{}", invalid.text);
}

#[test]
fn a_second_subscription_joins_and_a_duplicated_assignment_reads_once() {
    // Proves an instance subscribed twice consumes its new subscription (the membership of the
    // second subscribe stopped at once: every poll answered [] for good), and a partition named
    // twice in an assignment is read once (every record came back twice).
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "first", 1);
    support::create_topic(&node, "second", 1);
    produce(&api, "second", 1, 3);
    let base = create_instance(&api, "resubscribers", "web", json!({}));
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["first"]})).status, 204);
    assert_eq!(api.post(&format!("{base}/subscription"), &json!({"topics": ["second"]})).status, 204);
    let mut values = Vec::new();
    assert!(
        wait_until(TIMEOUT, || {
            let polled = api.get(&format!("{base}/records?timeout=200"));
            values.extend(polled.json.as_array().into_iter().flatten().map(|r| r["value"]["i"].as_i64().unwrap()));
            values.len() >= 3
        }),
        "the second subscription never consumed"
    );
    assert_eq!(values, vec![0, 1, 2]);

    let manual = create_instance(&api, "assigners", "twice", json!({}));
    let partition = json!({"topic": "second", "partition": 0});
    let assign = api.post(&format!("{manual}/assignments"), &json!({"partitions": [partition, partition]}));
    assert_eq!(assign.status, 204, "{}", assign.text);
    let polled = api.get(&format!("{manual}/records?timeout=2000"));
    let offsets: Vec<i64> = polled.json.as_array().unwrap().iter().map(|r| r["offset"].as_i64().unwrap()).collect();
    assert_eq!(offsets, vec![0, 1, 2], "{}", polled.text);
}

#[test]
fn a_produce_request_larger_than_one_batch_is_written_whole_and_record_counts_are_bounded() {
    // Proves an HTTP produce whose records for one partition exceed max.message.bytes is split
    // into several batches (it was one batch, refused 413 for every record), in order; and a
    // request of more records than a request may carry is refused before it is decoded.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "big", 1);
    let value = "x".repeat(1000);
    let records: Vec<Value> = (0..2000).map(|i| json!({"value": {"i": i, "v": value}})).collect();
    let answer = api.send_json("POST", "/topics/big", None, &json!({"records": records}));
    assert_eq!(answer.status, 200, "{}", &answer.text[..answer.text.len().min(500)]);
    let offsets: Vec<i64> =
        answer.json["offsets"].as_array().unwrap().iter().map(|o| o["offset"].as_i64().unwrap()).collect();
    assert_eq!(offsets, (0..2000).collect::<Vec<_>>());

    let too_many: Vec<Value> = (0..100_001).map(|_| json!({})).collect();
    let refused = api.send_json("POST", "/topics/big", None, &json!({"records": too_many}));
    assert!(refused.status == 422 || refused.status == 400, "{} {}", refused.status, refused.text);
    assert!(refused.text.contains("more than 100000 records"), "{}", refused.text);
}
