//! WASM transforms against the real binary: the SDK examples built to wasm32-wasip2, deployed
//! over HTTP, fed by librdkafka, their outputs read back; restarts, redeploys and pauses lose
//! no input; hostile guests are contained per their error policy.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use support::{client_config, wait_until, HttpApi, Runnel};

const TIMEOUT: Duration = Duration::from_secs(90);

use support::guest_component as component;

fn deploy(api: &HttpApi, name: &str, module: &[u8], config: Value) -> support::HttpAnswer {
    let mut body = config;
    body["module_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(module));
    api.send_json("PUT", &format!("/v1/transforms/{name}"), None, &body)
}

fn producer(node: &Runnel) -> ThreadedProducer<DefaultProducerContext> {
    client_config(node, &[("linger.ms", "5"), ("acks", "all")]).create().expect("producer")
}

fn produce(node: &Runnel, topic: &str, records: &[(Option<String>, String)]) {
    let producer = producer(node);
    for (key, value) in records {
        let mut record = BaseRecord::to(topic).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        producer.send(record).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(TIMEOUT).expect("flush");
}

/// Reads `topic` from the beginning until `count` records arrived (or the deadline passed).
struct Reader {
    consumer: BaseConsumer,
    records: Vec<(i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>)>,
}

impl Reader {
    fn new(node: &Runnel, topic: &str, partitions: i32) -> Reader {
        let consumer: BaseConsumer =
            client_config(node, &[("group.id", "transform-test-reader"), ("enable.auto.commit", "false")])
                .create()
                .expect("consumer");
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
        consumer.assign(&list).unwrap();
        Reader { consumer, records: Vec::new() }
    }

    fn until(&mut self, count: usize) -> bool {
        wait_until(TIMEOUT, || {
            if let Some(Ok(m)) = self.consumer.poll(Duration::from_millis(100)) {
                let headers = m
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or(&[]).to_vec())).collect())
                    .unwrap_or_default();
                self.records.push((
                    m.partition(),
                    m.offset(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    headers,
                ));
            }
            self.records.len() >= count
        })
    }

    fn values(&self) -> Vec<String> {
        self.records.iter().map(|r| String::from_utf8_lossy(r.3.as_deref().unwrap_or_default()).into_owned()).collect()
    }
}

fn transform(api: &HttpApi, name: &str) -> Value {
    api.get(&format!("/v1/transforms/{name}")).json
}

#[test]
fn redaction_example_masks_pii_end_to_end() {
    // Proves the redaction example, built to wasm32-wasip2 and deployed over HTTP, turns every
    // librdkafka-produced input record into one output record without the emails, card numbers
    // and phone numbers, and that status, logs and metrics report it.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "signups", 3);
    support::create_topic(&node, "signups-clean", 3);
    let module = component("runnel-example-redact");
    let deployed =
        deploy(&api, "redact", &module, json!({"input_topic": "signups", "output_topics": ["signups-clean"]}));
    assert_eq!(deployed.status, 201, "{}", deployed.text);
    assert_eq!(deployed.json["version"], 1);
    let records: Vec<(Option<String>, String)> = (0..300)
        .map(|i| {
            let value = json!({
                "id": i,
                "email": format!("user.{i}+tag@example-mail.co.uk"),
                "note": format!("card 4111 1111 1111 1111, call +44 20 7946 {:04}", i),
                "nested": {"contact": format!("ops{i}@corp.example.com")},
            });
            (Some(format!("user-{i}")), value.to_string())
        })
        .collect();
    produce(&node, "signups", &records);
    let mut reader = Reader::new(&node, "signups-clean", 3);
    assert!(reader.until(300), "got {} of 300 outputs; transform: {}", reader.records.len(), transform(&api, "redact"));
    let mut ids = BTreeSet::new();
    for value in reader.values() {
        assert!(!value.contains("@example-mail.co.uk") && !value.contains("@corp.example.com"), "email left: {value}");
        assert!(!value.contains("4111 1111 1111 1111"), "card left: {value}");
        assert!(!value.contains("7946"), "phone left: {value}");
        let parsed: Value = serde_json::from_str(&value).expect("output is JSON");
        ids.insert(parsed["id"].as_i64().unwrap());
    }
    assert_eq!(ids.len(), 300, "every input has an output");
    // Keys are kept, so outputs land in the partition of their key.
    assert!(reader.records.iter().all(|r| r.2.as_deref().is_some_and(|k| k.starts_with(b"user-"))));
    assert!(
        wait_until(TIMEOUT, || {
            let t = transform(&api, "redact");
            t["state"] == "running"
                && t["lag"] == 0
                && t["partitions"].as_array().is_some_and(|p| {
                    p.len() == 3 && p.iter().map(|p| p["records_in"].as_u64().unwrap()).sum::<u64>() == 300
                })
        }),
        "{}",
        transform(&api, "redact")
    );
    let listed = api.get("/v1/transforms");
    assert!(listed.json["transforms"].as_array().unwrap().iter().any(|t| t["name"] == "redact"));
    let logs = api.get("/v1/transforms/redact/logs");
    assert!(logs.json["lines"].as_array().unwrap().iter().any(|l| l["message"].as_str().unwrap().contains("starting")));
    let metrics = api.get("/metrics").text;
    assert!(metrics.contains("runnel_transform_records_in_total{transform=\"redact\"} 300"), "metrics");
    for partition in 0..3 {
        let series = format!(
            "runnel_transform_delivery{{delivery=\"exactly_once\",partition=\"{partition}\",transform=\"redact\"}} 1"
        );
        assert!(metrics.contains(&series), "no {series}");
    }
    // Every partition's transaction with its outputs and position committed (300 records in
    // 3 partitions: at least one each), none aborted.
    let committed = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("runnel_transform_transactions_total{outcome=\"committed\",transform=\"redact\"} ")
        })
        .and_then(|n| n.parse::<u64>().ok());
    assert!(committed.is_some_and(|n| n >= 3), "committed transactions: {committed:?}");
    assert!(!metrics.contains("runnel_transform_transactions_total{outcome=\"aborted\""), "a transaction was aborted");
    assert_eq!(transform(&api, "redact")["delivery"], "exactly_once");
}

#[test]
fn filter_and_router_examples_follow_their_parameters() {
    // Proves parameters reach the guest: the filter keeps amount > 100 and projects fields; the
    // router splits by a field into topics (with a default) and re-keys by another field.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    for topic in ["orders", "big-orders", "eu", "us", "elsewhere"] {
        support::create_topic(&node, topic, 2);
    }
    let filter = deploy(
        &api,
        "big",
        &component("runnel-example-filter"),
        json!({"input_topic": "orders", "output_topics": ["big-orders"],
               "parameters": {"field": "amount", "op": "gt", "value": "100", "keep": "id,amount"}}),
    );
    assert_eq!(filter.status, 201, "{}", filter.text);
    let router = deploy(
        &api,
        "by-region",
        &component("runnel-example-router"),
        json!({"input_topic": "orders", "output_topics": ["eu", "us", "elsewhere"],
               "parameters": {"route_field": "region", "key_field": "customer",
                              "route.eu": "eu", "route.us": "us", "default": "elsewhere"}}),
    );
    assert_eq!(router.status, 201, "{}", router.text);
    let regions = ["eu", "us", "apac"];
    let records: Vec<(Option<String>, String)> = (0..60)
        .map(|i| {
            let value = json!({"id": i, "amount": i * 5, "region": regions[i % 3], "customer": format!("c{}", i % 7), "secret": "x"});
            (None, value.to_string())
        })
        .collect();
    produce(&node, "orders", &records);
    let mut big = Reader::new(&node, "big-orders", 2);
    let expected_big = (0..60).filter(|i| i * 5 > 100).count();
    assert!(big.until(expected_big), "{} of {expected_big}: {}", big.records.len(), transform(&api, "big"));
    for value in big.values() {
        let v: Value = serde_json::from_str(&value).unwrap();
        assert!(v["amount"].as_i64().unwrap() > 100);
        assert!(v.get("secret").is_none() && v.get("region").is_none(), "projection keeps only id, amount: {v}");
    }
    for (topic, region) in [("eu", "eu"), ("us", "us"), ("elsewhere", "apac")] {
        let mut reader = Reader::new(&node, topic, 2);
        assert!(reader.until(20), "{topic}: {} of 20", reader.records.len());
        for record in &reader.records {
            let v: Value = serde_json::from_slice(record.3.as_deref().unwrap()).unwrap();
            assert_eq!(v["region"], region);
            assert_eq!(record.2.as_deref(), Some(v["customer"].as_str().unwrap().as_bytes()), "re-keyed by customer");
        }
    }
}

/// Values read from `topic` (all partitions) until `expected` distinct ones arrived; returns
/// (distinct, total) counts.
fn drain_distinct(node: &Runnel, topic: &str, partitions: i32, expected: &BTreeSet<String>) -> (usize, usize) {
    let mut reader = Reader::new(node, topic, partitions);
    let mut seen = BTreeSet::new();
    let ok = wait_until(TIMEOUT, || {
        if let Some(Ok(m)) = reader.consumer.poll(Duration::from_millis(100)) {
            reader.records.push((m.partition(), m.offset(), None, None, Vec::new()));
            seen.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
        expected.is_subset(&seen)
    });
    assert!(ok, "{topic}: {} of {} inputs reached the output", expected.intersection(&seen).count(), expected.len());
    (seen.len(), reader.records.len())
}

#[test]
fn restart_redeploy_and_pause_lose_no_input() {
    // Proves at-least-once across a broker restart (module loaded from the precompiled cache),
    // a redeploy (new version resumes at the committed position) and pause/resume: every input
    // reaches the output; duplicates are counted and printed.
    let mut node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "raw", 2);
    support::create_topic(&node, "copied", 2);
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "raw", "output_topics": ["copied"]});
    assert_eq!(deploy(&api, "copy", &module, config.clone()).status, 201);
    let batch = |from: usize, to: usize| -> Vec<(Option<String>, String)> {
        (from..to).map(|i| (Some(format!("k{}", i % 13)), format!("record-{i}"))).collect()
    };
    let mut expected: BTreeSet<String> = BTreeSet::new();
    produce(&node, "raw", &batch(0, 1000));
    expected.extend(batch(0, 1000).into_iter().map(|r| r.1));
    drain_distinct(&node, "copied", 2, &expected);

    // Restart: the transform comes back from the metadata log, the module from the cache.
    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let api = HttpApi::new(&node);
    let started = Instant::now();
    assert!(wait_until(TIMEOUT, || transform(&api, "copy")["state"] == "running"), "{}", transform(&api, "copy"));
    println!("transform running {:?} after the node answered", started.elapsed());
    let after_restart = transform(&api, "copy");
    assert!(
        after_restart["partitions"].as_array().unwrap().iter().all(|p| p["module_from_cache"] == true),
        "module not loaded from cache: {after_restart}"
    );
    produce(&node, "raw", &batch(1000, 2000));
    expected.extend(batch(1000, 2000).into_iter().map(|r| r.1));
    drain_distinct(&node, "copied", 2, &expected);

    // Redeploy (version 2) resumes from the committed position.
    let redeployed = deploy(&api, "copy", &module, config);
    assert_eq!(redeployed.status, 200, "{}", redeployed.text);
    assert_eq!(redeployed.json["version"], 2);
    produce(&node, "raw", &batch(2000, 2500));
    expected.extend(batch(2000, 2500).into_iter().map(|r| r.1));
    drain_distinct(&node, "copied", 2, &expected);

    // Paused: input waits in the log (lag of the transform's group = what was produced).
    assert_eq!(api.call("POST", "/v1/transforms/copy/pause", None, None).status, 204);
    assert!(wait_until(TIMEOUT, || transform(&api, "copy")["state"] == "paused"));
    let committed_lag = || api.get("/v1/groups/__runnel_transform_copy").json["total_lag"].as_i64().unwrap_or(-1);
    assert!(wait_until(TIMEOUT, || committed_lag() == 0), "positions checkpointed before pausing");
    produce(&node, "raw", &batch(2500, 2600));
    assert!(wait_until(TIMEOUT, || committed_lag() == 100), "paused transform moved: lag {}", committed_lag());
    assert_eq!(api.call("POST", "/v1/transforms/copy/resume", None, None).status, 204);
    expected.extend(batch(2500, 2600).into_iter().map(|r| r.1));
    let (distinct, total) = drain_distinct(&node, "copied", 2, &expected);
    println!("restart + redeploy + pause: {distinct} distinct inputs in the output, {} duplicates", total - distinct);
    assert_eq!(distinct, 2600);

    assert_eq!(api.delete("/v1/transforms/copy").status, 204);
    assert_eq!(api.get("/v1/transforms/copy").status, 404);
}

#[test]
fn outputs_are_split_to_fit_max_message_bytes_and_a_record_too_large_is_named() {
    // Proves a guest batch whose outputs exceed the output topic's max.message.bytes is written
    // as several batches that each fit (it was refused with MESSAGE_TOO_LARGE and retried
    // forever), and that one record no batch of that topic can hold goes through the error
    // policy with a message naming the topic and the bound.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "big-in", 1);
    let created = api
        .post("/v1/topics", &json!({"name": "small-out", "partitions": 1, "configs": {"max.message.bytes": "4096"}}));
    assert_eq!(created.status, 201, "{}", created.text);
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "big-in", "output_topics": ["small-out"], "error_policy": "skip"});
    assert_eq!(deploy(&api, "splitter", &module, config).status, 201);
    // 200 records of 500 bytes in one guest batch: about 100 KB for a topic taking 4 KiB.
    let records: Vec<(Option<String>, String)> = (0..200).map(|i| (None, format!("{i:>500}"))).collect();
    produce(&node, "big-in", &records);
    let mut reader = Reader::new(&node, "small-out", 1);
    assert!(
        reader.until(200),
        "every output arrives: {} of 200; {}",
        reader.records.len(),
        transform(&api, "splitter")
    );
    let expected: Vec<String> = records.iter().map(|r| r.1.clone()).collect();
    assert_eq!(reader.values(), expected, "in order, once each");
    // A record larger than the topic takes: its batch goes through the error policy (skip),
    // with the reason; the transform goes on.
    produce(&node, "big-in", &[(None, "x".repeat(5000))]);
    let skipped = wait_until(TIMEOUT, || transform(&api, "splitter")["partitions"][0]["skipped"] == 1);
    let status = transform(&api, "splitter");
    assert!(skipped, "the oversized record is skipped: {status}");
    let error = status["partitions"][0]["last_error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("'small-out'") && error.contains("max.message.bytes of 4096"), "{status}");
    produce(&node, "big-in", &[(None, "after".into())]);
    assert!(reader.until(201), "the next record arrives");
    assert_eq!(reader.values().last().map(String::as_str), Some("after"));
}

#[test]
fn an_output_its_topic_would_refuse_goes_through_the_error_policy() {
    // Proves an exactly-once output its leader would refuse (a keyless record for a compacted
    // topic: INVALID_RECORD) fails its batch through the error policy (skip here), with the
    // reason, and the transform goes on; it aborted the transaction and reprocessed the same
    // batch forever, skipping nothing (found by review). A dead letter of a keyless record for
    // a compacted dead-letter topic is keyed by its source coordinates.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "mixed-in", 1);
    for name in ["compacted-out", "compacted-dead"] {
        let created =
            api.post("/v1/topics", &json!({"name": name, "partitions": 1, "configs": {"cleanup.policy": "compact"}}));
        assert_eq!(created.status, 201, "{}", created.text);
    }
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "mixed-in", "output_topics": ["compacted-out"], "error_policy": "skip"});
    assert_eq!(deploy(&api, "keyed-only", &module, config).status, 201);
    produce(&node, "mixed-in", &[(None, "keyless".into())]);
    let skipped = wait_until(TIMEOUT, || transform(&api, "keyed-only")["partitions"][0]["skipped"] == 1);
    let status = transform(&api, "keyed-only");
    assert!(skipped, "the keyless output is skipped: {status}");
    let error = status["partitions"][0]["last_error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("'compacted-out'") && error.contains("compacted"), "{status}");
    produce(&node, "mixed-in", &[(Some("k".into()), "keyed".into())]);
    let mut reader = Reader::new(&node, "compacted-out", 1);
    assert!(reader.until(1), "the keyed record arrives: {}", transform(&api, "keyed-only"));
    assert_eq!(reader.values(), ["keyed"]);

    let config = json!({
        "input_topic": "mixed-in",
        "output_topics": ["compacted-out"],
        "error_policy": "dead_letter",
        "dead_letter_topic": "compacted-dead",
        "start": "earliest",
    });
    assert_eq!(deploy(&api, "to-dead-letters", &module, config).status, 201);
    let mut dead = Reader::new(&node, "compacted-dead", 1);
    assert!(dead.until(1), "the keyless record is dead-lettered: {}", transform(&api, "to-dead-letters"));
    assert_eq!(dead.records[0].2.as_deref(), Some(&b"mixed-in/0/0"[..]), "keyed by its source");
}

#[test]
fn a_position_past_a_recreated_inputs_end_is_shown_and_kept_not_reset() {
    // Proves the input position never silently moves: after the input topic is deleted and
    // created again (log end 0, the committed position 50), the partition shows the error and
    // processes nothing (it used to start over from the log start, reprocessing input), then
    // goes on from the position once the input reaches past it.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "pe-in", 1);
    support::create_topic(&node, "pe-out", 1);
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "pe-in", "output_topics": ["pe-out"], "start": "earliest"});
    assert_eq!(deploy(&api, "keeper", &module, config).status, 201);
    let values = |from: usize, to: usize| -> Vec<(Option<String>, String)> {
        (from..to).map(|i| (None, format!("v{i}"))).collect()
    };
    produce(&node, "pe-in", &values(0, 50));
    let mut reader = Reader::new(&node, "pe-out", 1);
    assert!(reader.until(50), "the first 50 are transformed");
    let committed_lag = || api.get("/v1/groups/__runnel_transform_keeper").json["total_lag"].as_i64().unwrap_or(-1);
    assert!(wait_until(TIMEOUT, || committed_lag() == 0), "position 50 committed");
    assert_eq!(api.delete("/v1/topics/pe-in").status, 204);
    support::create_topic(&node, "pe-in", 1);
    let stalled = wait_until(TIMEOUT, || {
        let p = &transform(&api, "keeper")["partitions"][0];
        p["state"] == "failed" && p["last_error"].as_str().is_some_and(|e| e.contains("position 50 is past the end 0"))
    });
    assert!(stalled, "the partition shows its position past the input's end: {}", transform(&api, "keeper"));
    // The new input grows past the position: processing goes on from it (records 50..55 of
    // the new input), nothing before it again.
    produce(&node, "pe-in", &values(100, 155));
    assert!(reader.until(55), "processing resumes at the position: {}", transform(&api, "keeper"));
    assert_eq!(reader.values()[50..], ["v150", "v151", "v152", "v153", "v154"]);
    assert_eq!(transform(&api, "keeper")["partitions"][0]["state"], "running");
}

#[test]
fn a_new_deployment_of_a_deleted_name_starts_fresh_unless_told_to_resume() {
    // Proves positions belong to a deployment: a redeploy keeps its id and positions; after a
    // delete, a new deployment of the same name ignores the old positions and starts at its
    // `start` (it took them over silently before); with `resume` it continues from them.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "fresh-in", 1);
    support::create_topic(&node, "fresh-out", 1);
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "fresh-in", "output_topics": ["fresh-out"]});
    let first = deploy(&api, "again", &module, config.clone());
    assert_eq!(first.status, 201, "{}", first.text);
    let id = first.json["deployment"].as_str().expect("a deployment id").to_string();
    let values = |from: usize, to: usize| -> Vec<(Option<String>, String)> {
        (from..to).map(|i| (None, format!("v{i}"))).collect()
    };
    produce(&node, "fresh-in", &values(0, 10));
    let mut reader = Reader::new(&node, "fresh-out", 1);
    assert!(reader.until(10));
    let committed_lag = || api.get("/v1/groups/__runnel_transform_again").json["total_lag"].as_i64().unwrap_or(-1);
    assert!(wait_until(TIMEOUT, || committed_lag() == 0), "position 10 committed");
    let redeployed = deploy(&api, "again", &module, config.clone());
    assert_eq!((redeployed.status, redeployed.json["deployment"].as_str()), (200, Some(id.as_str())));

    assert_eq!(api.delete("/v1/transforms/again").status, 204);
    let second = deploy(&api, "again", &module, config.clone());
    assert_eq!(second.status, 201, "{}", second.text);
    assert_ne!(second.json["deployment"].as_str(), Some(id.as_str()), "a new deployment");
    assert!(reader.until(20), "the new deployment starts at the start: {}", transform(&api, "again"));
    assert_eq!(reader.values()[10..], reader.values()[..10]);

    assert!(wait_until(TIMEOUT, || committed_lag() == 0), "position 10 committed again");
    assert_eq!(api.delete("/v1/transforms/again").status, 204);
    let mut resumed = config;
    resumed["resume"] = json!(true);
    let third = deploy(&api, "again", &module, resumed);
    assert_eq!((third.status, &third.json["resume"]), (201, &json!(true)), "{}", third.text);
    produce(&node, "fresh-in", &values(10, 15));
    assert!(reader.until(25), "the resumed deployment goes on: {}", transform(&api, "again"));
    assert_eq!(reader.values()[20..], ["v10", "v11", "v12", "v13", "v14"], "from position 10, nothing again");
    assert_eq!(transform(&api, "again")["partitions"][0]["start_offset"], 10);
}

#[test]
fn a_transform_of_a_transactional_topic_sees_committed_records_only() {
    // Proves the input is read read_committed: records of an aborted transaction never reach
    // the outputs (they did, read_uncommitted), and those of an open one wait for its commit.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "txn-in", 1);
    support::create_topic(&node, "txn-out", 1);
    let module = component("runnel-example-identity");
    let config = json!({"input_topic": "txn-in", "output_topics": ["txn-out"]});
    assert_eq!(deploy(&api, "committed-only", &module, config).status, 201);
    let producer: rdkafka::producer::BaseProducer =
        client_config(&node, &[("transactional.id", "transform-input"), ("transaction.timeout.ms", "60000")])
            .create()
            .expect("transactional producer");
    producer.init_transactions(TIMEOUT).expect("init");
    let write = |values: &[&str], commit: bool| {
        producer.begin_transaction().expect("begin");
        for v in values {
            producer.send(rdkafka::producer::BaseRecord::<(), str>::to("txn-in").payload(*v)).expect("send");
        }
        producer.flush(TIMEOUT).expect("flush");
        if commit {
            producer.commit_transaction(TIMEOUT).expect("commit");
        } else {
            producer.abort_transaction(TIMEOUT).expect("abort");
        }
    };
    write(&["c1", "c2"], true);
    write(&["a1", "a2"], false);
    write(&["c3"], true);
    let mut reader = Reader::new(&node, "txn-out", 1);
    assert!(reader.until(3), "the committed records arrive: {:?}", reader.values());
    // An open transaction's records wait; its commit lets them through, after c3.
    producer.begin_transaction().expect("begin");
    producer.send(rdkafka::producer::BaseRecord::<(), str>::to("txn-in").payload("late")).expect("send");
    producer.flush(TIMEOUT).expect("flush");
    produce(&node, "txn-in", &[(None, "plain".into())]);
    let lso_held = wait_until(TIMEOUT, || {
        let p = &transform(&api, "committed-only")["partitions"][0];
        p["high_watermark"].as_i64() >= Some(10)
    });
    assert!(lso_held, "the input's high watermark passes the open transaction");
    producer.commit_transaction(TIMEOUT).expect("commit");
    assert!(reader.until(5), "the open transaction's record and the one after it arrive: {:?}", reader.values());
    assert_eq!(reader.values(), ["c1", "c2", "c3", "late", "plain"], "nothing aborted, in log order");
}

#[test]
fn hostile_guests_are_contained() {
    // Proves an infinite loop, a memory bomb, a trap, a panic, a write to an unknown output
    // topic, an oversized output and a failing init each fail only their own transform
    // partition with the error visible over HTTP and in metrics, skip no input (retry), while
    // the node and a healthy transform keep serving; a dead-letter policy moves the failing
    // records aside with the error in headers.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let cases = [
        ("runnel-guest-spin", "spin", vec!["deadline", "time"]),
        ("runnel-guest-membomb", "membomb", vec!["memory"]),
        ("runnel-guest-trap", "trap", vec!["trap", "unreachable"]),
        ("runnel-guest-panic", "panic", vec!["boom", "panic", "trap"]),
        ("runnel-guest-badtopic", "badtopic", vec!["output topic", "topic"]),
        ("runnel-guest-oversized", "oversized", vec!["output", "too large"]),
        ("runnel-guest-failinit", "failinit", vec!["init"]),
    ];
    support::create_topic(&node, "healthy-in", 1);
    support::create_topic(&node, "healthy-out", 1);
    assert_eq!(
        deploy(
            &api,
            "healthy",
            &component("runnel-example-identity"),
            json!({"input_topic": "healthy-in", "output_topics": ["healthy-out"]})
        )
        .status,
        201
    );
    for (package, name, _) in &cases {
        support::create_topic(&node, &format!("{name}-in"), 1);
        support::create_topic(&node, &format!("{name}-out"), 1);
        let answer = deploy(
            &api,
            name,
            &component(package),
            // The memory bomb gets a small cap; the oversized guest a large one, so it reaches
            // the 16 MiB output limit rather than the memory cap (its 17 MiB buffer grows by
            // doubling).
            json!({"input_topic": format!("{name}-in"), "output_topics": [format!("{name}-out")],
                   "call_timeout_ms": 500,
                   "memory_bytes": match *name { "membomb" => 16 << 20, "oversized" => 256 << 20, _ => 64 << 20 }}),
        );
        assert_eq!(answer.status, 201, "{name}: {}", answer.text);
        produce(&node, &format!("{name}-in"), &[(None, "{\"n\":1}".into()), (None, "{\"n\":2}".into())]);
    }
    for (_, name, words) in &cases {
        assert!(
            wait_until(TIMEOUT, || {
                let t = transform(&api, name);
                t["state"] == "failed"
                    && t["partitions"][0]["last_error"]
                        .as_str()
                        .is_some_and(|e| words.iter().any(|w| e.to_lowercase().contains(w)))
            }),
            "{name} did not fail with {words:?}: {}",
            transform(&api, name)
        );
        let t = transform(&api, name);
        assert_eq!(t["partitions"][0]["position"], 0, "{name} skipped input under the retry policy: {t}");
        println!("{name}: {}", t["partitions"][0]["last_error"]);
    }
    // The healthy transform and the node are unaffected.
    produce(&node, "healthy-in", &[(None, "still here".into())]);
    let mut healthy = Reader::new(&node, "healthy-out", 1);
    assert!(healthy.until(1));
    assert_eq!(healthy.values(), vec!["still here".to_string()]);
    let metrics = api.get("/metrics").text;
    for kind in ["deadline", "memory", "trap", "invalid_output", "init"] {
        assert!(metrics.contains(&format!("kind=\"{kind}\"")), "no {kind} error in metrics");
    }
    let logs = api.get("/v1/transforms/trap/logs");
    assert!(logs.json["lines"].as_array().unwrap().iter().any(|l| l["level"] == "error"));

    // Dead-letter policy: the trapping guest's records go aside, with the error in headers.
    support::create_topic(&node, "dlq-in", 1);
    support::create_topic(&node, "dlq-out", 1);
    support::create_topic(&node, "dlq", 1);
    let answer = deploy(
        &api,
        "trap-dlq",
        &component("runnel-guest-trap"),
        json!({"input_topic": "dlq-in", "output_topics": ["dlq-out"], "error_policy": "dead_letter", "dead_letter_topic": "dlq"}),
    );
    assert_eq!(answer.status, 201, "{}", answer.text);
    produce(&node, "dlq-in", &[(Some("a".into()), "one".into()), (Some("b".into()), "two".into())]);
    let mut dead = Reader::new(&node, "dlq", 1);
    assert!(dead.until(2), "{}", transform(&api, "trap-dlq"));
    assert_eq!(dead.values(), vec!["one".to_string(), "two".to_string()]);
    let headers: BTreeMap<String, Vec<u8>> = dead.records[0].4.iter().cloned().collect();
    assert_eq!(headers.get("runnel.transform").map(Vec::as_slice), Some(&b"trap-dlq"[..]));
    assert_eq!(headers.get("runnel.source.offset").map(Vec::as_slice), Some(&b"0"[..]));
    assert!(headers.contains_key("runnel.error"));
    assert!(wait_until(TIMEOUT, || transform(&api, "trap-dlq")["partitions"][0]["position"] == 2));
}

#[test]
fn bad_uploads_get_clear_errors() {
    // Proves uploads that are not a transform component, or name missing or looping topics,
    // are refused with the documented status and a message naming the problem.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "in", 1);
    support::create_topic(&node, "out", 1);
    let config = json!({"input_topic": "in", "output_topics": ["out"]});
    let garbage = deploy(&api, "x", b"definitely not wasm", config.clone());
    assert_eq!(garbage.status, 422, "{}", garbage.text);
    let core_module = deploy(&api, "x", b"\0asm\x01\0\0\0", config.clone());
    assert_eq!(core_module.status, 422, "{}", core_module.text);
    assert!(core_module.json["message"].as_str().unwrap().to_lowercase().contains("component"), "{}", core_module.text);
    let assignor = deploy(&api, "x", &component("runnel-example-assignor"), config.clone());
    assert_eq!(assignor.status, 422, "{}", assignor.text);
    assert!(assignor.json["message"].as_str().unwrap().contains("assignor"), "{}", assignor.text);
    let identity = component("runnel-example-identity");
    let missing = deploy(&api, "x", &identity, json!({"input_topic": "nope", "output_topics": ["out"]}));
    assert_eq!((missing.status, missing.json["error_code"].as_u64()), (404, Some(40401)), "{}", missing.text);
    let looping = deploy(&api, "x", &identity, json!({"input_topic": "in", "output_topics": ["in"]}));
    assert_eq!(looping.status, 422, "{}", looping.text);
    let huge = deploy(&api, "x", &vec![0u8; 17 << 20], config.clone());
    assert_eq!(huge.status, 413, "{}", huge.text);
    let unknown_field = deploy(&api, "x", &identity, json!({"input_topic": "in", "output_topics": ["out"], "typo": 1}));
    assert_eq!(unknown_field.status, 422, "{}", unknown_field.text);
    assert_eq!(api.get("/v1/transforms/x").status, 404);
    assert_eq!(api.get("/v1/transforms").json["transforms"], json!([]));
}

/// The committed offset of `group` for `topic`-0 as librdkafka reads it (-1: none).
fn committed_offset(node: &Runnel, group: &str, topic: &str) -> i64 {
    committed(node, group, topic, 0).unwrap_or(-1)
}

/// `group`'s committed offset of `topic`-`partition`, if any.
fn committed(node: &Runnel, group: &str, topic: &str, partition: i32) -> Option<i64> {
    let consumer: BaseConsumer = client_config(node, &[("group.id", group)]).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    match consumer
        .committed_offsets(list, Duration::from_secs(5))
        .map(|l| l.find_partition(topic, partition).map(|e| e.offset()))
    {
        Ok(Some(Offset::Offset(offset))) => Some(offset),
        _ => None,
    }
}

/// Every record of `topic`'s `partitions` read_committed from the beginning to the end.
fn read_to_end(node: &Runnel, topic: &str, partitions: i32) -> Vec<Vec<u8>> {
    let consumer: BaseConsumer = client_config(
        node,
        &[
            ("group.id", "transform-test-end-reader"),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            ("isolation.level", "read_committed"),
        ],
    )
    .create()
    .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&list).unwrap();
    let (mut values, mut at_end) = (Vec::new(), BTreeSet::new());
    let read = wait_until(TIMEOUT, || {
        // Everything ready is taken at each check (one record per check is 50 a second).
        while let Some(next) = consumer.poll(Duration::from_millis(100)) {
            match next {
                Ok(m) => values.push(m.payload().unwrap_or_default().to_vec()),
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    at_end.insert(p);
                }
                Err(_) => {}
            }
        }
        at_end.len() == partitions as usize
    });
    assert!(read, "{topic} never read to its end ({} records read)", values.len());
    values
}

#[test]
fn a_start_from_latest_is_committed_before_any_input_is_processed() {
    // Proves a fresh deployment commits its start position at once: from `latest`, nothing was
    // committed until some input had been processed and committed, so a record arriving in
    // between, then a crash, restarted from a later `latest` and was never processed (found
    // by review). Both delivery modes.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "late-in", 1);
    support::create_topic(&node, "late-out", 1);
    produce(&node, "late-in", &[(None, "before-1".into()), (None, "before-2".into()), (None, "before-3".into())]);
    for (name, delivery) in [("late-eo", "exactly_once"), ("late-alo", "at_least_once")] {
        let config = json!({
            "input_topic": "late-in",
            "output_topics": ["late-out"],
            "start": "latest",
            "delivery": delivery,
            "commit_interval_ms": 30_000,
        });
        assert_eq!(deploy(&api, name, &component("runnel-example-identity"), config).status, 201);
        let group = format!("__runnel_transform_{name}");
        let committed = wait_until(TIMEOUT, || committed_offset(&node, &group, "late-in") == 3);
        assert!(committed, "{name}: the start position 3 is committed: {}", transform(&api, name));
    }
}

#[test]
fn a_fenced_exactly_once_worker_commits_nothing_and_a_zombie_cannot_commit() {
    // Proves the fencing of exactly-once workers: a second producer of a worker's transactional
    // id (as a second worker would start) aborts the worker's open transaction, whose outputs
    // never become visible; the worker, still the input's leader, takes its id back (a newer
    // epoch), after which the second one can commit neither a position nor a transaction; a
    // read_committed reader sees every input's output exactly once.
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::{
        EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ProducerId, TransactionalId,
        TxnOffsetCommitRequest,
    };
    use kafka_protocol::protocol::StrBytes;
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "fin", 1);
    support::create_topic(&node, "fout", 1);
    let config = json!({
        "input_topic": "fin",
        "output_topics": ["fout"],
        "batch_records_max": 1,
        "commit_interval_ms": 30_000,
    });
    let batch = |from: usize, to: usize| -> Vec<(Option<String>, String)> {
        (from..to).map(|i| (None, format!("record-{i}"))).collect()
    };
    // The backlog is there before the worker starts, and long enough (one record per
    // transaction batch) that it is still mid-backlog when fenced: a worker that catches up
    // commits at once, and there would be no open transaction to abort.
    const BACKLOG: usize = 15_000;
    produce(&node, "fin", &batch(0, BACKLOG));
    assert_eq!(deploy(&api, "fence", &component("runnel-example-identity"), config).status, 201);
    let position = || transform(&api, "fence")["partitions"][0]["position"].as_i64().unwrap_or(-1);
    assert!(wait_until(TIMEOUT, || position() >= 100), "never processed 100 records: {}", transform(&api, "fence"));
    // Only the start position (committed before any input is processed) is committed.
    assert!(committed_offset(&node, "__runnel_transform_fence", "fin") <= 0, "committed mid-backlog: cannot tell");

    // The second producer: its InitProducerId fences the worker and aborts its transaction.
    let id = "__runnel_transform_fence-0";
    let name = |s: &str| StrBytes::from_string(s.to_string());
    let mut conn = support::RawConn::open(&node, "fencing-test");
    let find = FindCoordinatorRequest::default().with_key_type(1).with_coordinator_keys(vec![name(id)]);
    assert!(wait_until(TIMEOUT, || conn.call(4, &find).coordinators[0].error_code == 0), "FindCoordinator");
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(name(id))))
        .with_transaction_timeout_ms(60_000);
    let mut zombie = None;
    wait_until(TIMEOUT, || {
        let answer = conn.call(4, &init);
        zombie = (answer.error_code == 0).then_some((answer.producer_id.0, answer.producer_epoch));
        zombie.is_some()
    });
    let (pid, epoch) = zombie.expect("InitProducerId for the worker's transactional id");

    // The worker notices, and takes its id back at a newer epoch.
    let logs = || api.get("/v1/transforms/fence/logs").json["lines"].as_array().cloned().unwrap_or_default();
    let retaken = wait_until(TIMEOUT, || {
        let lines = logs();
        let fenced = lines.iter().position(|l| l["message"].as_str().is_some_and(|m| m.contains("fenced by a newer")));
        fenced.is_some_and(|at| {
            lines[at..].iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("transactional producer")))
        })
    });
    assert!(retaken, "the worker never took its transactional id back: {:?}", logs());

    // The second producer is now the zombie: neither a position nor a commit gets through.
    let offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(name(id)))
        .with_group_id(kafka_protocol::messages::GroupId(name("__runnel_transform_fence")))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(name("fin")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default().with_committed_offset(999_999)])]);
    let code = conn.call(5, &offsets).topics[0].partitions[0].error_code;
    assert!([47, 90].contains(&code), "the zombie's TxnOffsetCommit: error {code}, not fenced");
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(name(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(true);
    let code = conn.call(5, &end).error_code;
    assert!([47, 90].contains(&code), "the zombie's EndTxn: error {code}, not fenced");

    let end = BACKLOG as i64 + 100;
    produce(&node, "fin", &batch(BACKLOG, BACKLOG + 100));
    let done = wait_until(TIMEOUT, || committed_offset(&node, "__runnel_transform_fence", "fin") == end);
    assert!(done, "position {end} never committed: {}", transform(&api, "fence"));
    let outputs = read_to_end(&node, "fout", 1);
    let distinct: BTreeSet<Vec<u8>> = outputs.iter().cloned().collect();
    let expected: BTreeSet<Vec<u8>> = batch(0, BACKLOG + 100).into_iter().map(|r| r.1.into_bytes()).collect();
    assert_eq!(distinct, expected, "outputs lost or foreign");
    assert_eq!(outputs.len(), distinct.len(), "{} duplicates", outputs.len() - distinct.len());
    let metrics = api.get("/metrics").text;
    assert!(
        metrics.contains("runnel_transform_transactions_total{outcome=\"aborted\",transform=\"fence\"}"),
        "no abort counted"
    );
}

/// Orders keyed by customer (so each customer's orders share an input partition, whose state
/// holds the customer's totals): `(customer, amount)` for order `i`.
fn order(i: usize) -> (String, u64) {
    (format!("c{}", i % 7), (i as u64 * 13) % 101)
}

fn produce_orders(node: &Runnel, topic: &str, range: std::ops::Range<usize>) {
    let records: Vec<(Option<String>, String)> = range
        .map(|i| {
            let (customer, amount) = order(i);
            (Some(customer.clone()), json!({"customer": customer, "amount": amount, "id": i}).to_string())
        })
        .collect();
    produce(node, topic, &records);
}

/// Every output of the revenue example, by customer in output order: (count, sum).
fn totals_by_customer(node: &Runnel, topic: &str, partitions: i32) -> BTreeMap<String, Vec<(u64, f64)>> {
    let mut by_customer: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for value in read_to_end(node, topic, partitions) {
        let totals: Value = serde_json::from_slice(&value).expect("JSON totals");
        let customer = totals["key"].as_str().expect("key").to_string();
        by_customer
            .entry(customer)
            .or_default()
            .push((totals["count"].as_u64().unwrap(), totals["sum"].as_f64().unwrap()));
    }
    by_customer
}

/// The model of the revenue example over orders `0..n`: per customer, the totals after each of
/// its orders.
fn revenue_model(n: usize) -> BTreeMap<String, Vec<(u64, f64)>> {
    let mut model: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for i in 0..n {
        let (customer, amount) = order(i);
        let steps = model.entry(customer).or_default();
        let (count, sum) = steps.last().copied().unwrap_or((0, 0.0));
        steps.push((count + 1, sum + amount as f64));
    }
    model
}

#[test]
fn a_stateful_transform_keeps_exact_totals_across_a_kill_and_a_new_version() {
    // Proves keyed state end to end on one node: the revenue example (running count and sum per
    // customer, exactly-once) restores its state from the changelog topic after kill -9 and
    // after a redeploy, so every output is the model's totals, each once; the detail shows the
    // state and its topic; the changelog is compacted and holds one record per change; a new
    // deployment of the name (no resume) starts from an empty state.
    let mut node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "sales", 2);
    support::create_topic(&node, "revenue", 2);
    let config = json!({"input_topic": "sales", "output_topics": ["revenue"], "batch_records_max": 50});
    let module = component("runnel-example-revenue");
    assert_eq!(deploy(&api, "rev", &module, config.clone()).status, 201);
    produce_orders(&node, "sales", 0..600);
    let caught_up = |node: &Runnel, end: i64| {
        let group = "__runnel_transform_rev";
        wait_until(TIMEOUT, || {
            committed_offset_of(node, group, "sales", 0) + committed_offset_of(node, group, "sales", 1) == end
        })
    };
    assert!(caught_up(&node, 600), "600 orders never processed: {}", transform(&api, "rev"));
    let detail = transform(&api, "rev");
    assert_eq!(detail["stateful"], true, "{detail}");
    assert_eq!(detail["state_topic"], "__runnel_transform_rev_state");
    let keys: u64 = detail["partitions"].as_array().unwrap().iter().map(|p| p["state_keys"].as_u64().unwrap()).sum();
    assert_eq!(keys, 7, "one key per customer: {detail}");
    let configs = api.get("/v1/topics/__runnel_transform_rev_state/configs").text;
    assert!(configs.contains("\"cleanup.policy\"") && configs.contains("compact"), "{configs}");

    // kill -9 mid-stream, restart: the state comes back from the changelog.
    produce_orders(&node, "sales", 600..900);
    node.kill9();
    node.restart();
    let api = HttpApi::new(&node);
    produce_orders(&node, "sales", 900..1000);
    assert!(caught_up(&node, 1000), "1000 orders never processed after the restart: {}", transform(&api, "rev"));
    let logs = api.get("/v1/transforms/rev/logs").text;
    assert!(logs.contains("state restored from '__runnel_transform_rev_state'"), "{logs}");

    // A new version (same deployment) continues with the state.
    assert_eq!(deploy(&api, "rev", &module, config.clone()).status, 200);
    produce_orders(&node, "sales", 1000..1100);
    assert!(caught_up(&node, 1100), "1100 orders never processed after the redeploy: {}", transform(&api, "rev"));
    let outputs = totals_by_customer(&node, "revenue", 2);
    let model = revenue_model(1100);
    for (customer, expected) in &model {
        let got = outputs.get(customer).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(got.len(), expected.len(), "{customer}: {} outputs, the model has {}", got.len(), expected.len());
        assert_eq!(got, expected.as_slice(), "{customer}: totals differ from the model");
    }

    // Deleted and deployed again without resume: an empty state (counts start at 1 again).
    assert_eq!(api.send_json("DELETE", "/v1/transforms/rev", None, &json!({})).status, 204);
    support::create_topic(&node, "revenue-2", 1);
    let fresh = json!({"input_topic": "sales", "output_topics": ["revenue-2"], "batch_records_max": 50});
    assert_eq!(deploy(&api, "rev", &module, fresh).status, 201);
    let outputs = totals_by_customer(&node, "revenue-2", 1);
    let expected = revenue_model(1100);
    assert_eq!(outputs, expected, "a new deployment starts from an empty state");

    // A fresh start at `latest` that sees only customers c0..c2, then a deployment resuming it:
    // the resumed state is the one its position goes with (c3..c6 from nothing), not every
    // earlier deployment's (c3 at 157 orders before). Fails when resume restores all changes.
    let running = |api: &HttpApi| {
        wait_until(TIMEOUT, || {
            let detail = transform(api, "rev");
            detail["partitions"]
                .as_array()
                .is_some_and(|ps| ps.len() == 2 && ps.iter().all(|p| p["state"] == "running"))
        })
    };
    assert_eq!(api.send_json("DELETE", "/v1/transforms/rev", None, &json!({})).status, 204);
    support::create_topic(&node, "revenue-3", 1);
    let latest = json!({"input_topic": "sales", "output_topics": ["revenue-3"], "start": "latest"});
    assert_eq!(deploy(&api, "rev", &module, latest).status, 201);
    assert!(running(&api), "the third deployment starts: {}", transform(&api, "rev"));
    let seen_by_third: Vec<usize> = (1100..1121).filter(|i| i % 7 < 3).collect();
    let orders = |indices: &[usize]| -> Vec<(Option<String>, String)> {
        indices
            .iter()
            .map(|&i| {
                let (customer, amount) = order(i);
                (Some(customer.clone()), json!({"customer": customer, "amount": amount, "id": i}).to_string())
            })
            .collect()
    };
    produce(&node, "sales", &orders(&seen_by_third));
    assert!(caught_up(&node, 1109), "the third deployment's orders never processed: {}", transform(&api, "rev"));
    assert_eq!(api.send_json("DELETE", "/v1/transforms/rev", None, &json!({})).status, 204);
    support::create_topic(&node, "revenue-4", 1);
    let resumed = json!({"input_topic": "sales", "output_topics": ["revenue-4"], "resume": true});
    assert_eq!(deploy(&api, "rev", &module, resumed).status, 201);
    let seen_by_fourth: Vec<usize> = (1121..1128).collect();
    produce(&node, "sales", &orders(&seen_by_fourth));
    assert!(caught_up(&node, 1116), "the fourth deployment's orders never processed: {}", transform(&api, "rev"));
    let mut lineage: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for &i in seen_by_third.iter().chain(&seen_by_fourth) {
        let (customer, amount) = order(i);
        let steps = lineage.entry(customer).or_default();
        let (count, sum) = steps.last().copied().unwrap_or((0, 0.0));
        steps.push((count + 1, sum + amount as f64));
    }
    let resumed_outputs: BTreeMap<String, (u64, f64)> = totals_by_customer(&node, "revenue-4", 1)
        .into_iter()
        .map(|(customer, steps)| (customer, *steps.last().expect("an output")))
        .collect();
    let expected: BTreeMap<String, (u64, f64)> =
        lineage.into_iter().map(|(customer, steps)| (customer, *steps.last().expect("a step"))).collect();
    assert_eq!(resumed_outputs, expected, "the resumed deployment continues the third one's state only");
}

/// `(key, value, timestamp)` records to `topic`, acks=all, with their own timestamps.
fn produce_at(node: &Runnel, topic: &str, records: &[(String, String, i64)]) {
    let producer = producer(node);
    for (key, value, timestamp) in records {
        producer
            .send(BaseRecord::to(topic).key(key).payload(value).timestamp(*timestamp))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(TIMEOUT).expect("flush");
}

#[test]
fn the_dedup_example_drops_repeats_across_a_kill_and_forgets_keys_a_window_later() {
    // Proves the windowed de-duplicator end to end (exactly-once, one node): repeats within the
    // window are dropped, also after kill -9 (the keys come back from the changelog), and keys
    // are forgotten once time (record timestamps) is three windows on: the state shrinks to the
    // newest bucket's instead of growing with every key ever seen.
    let mut node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "events", 1);
    support::create_topic(&node, "unique", 1);
    let config = json!({
        "input_topic": "events", "output_topics": ["unique"], "parameters": {"window_ms": "1000"},
    });
    assert_eq!(deploy(&api, "dedup", &component("runnel-example-dedup"), config).status, 201);
    // Times near now (older records would fall to the output's retention), on a window's start.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let t0 = now / 1000 * 1000 - 10_000;
    let at = |key: &str, t: i64| (key.to_string(), format!("{key}@{}", t - t0), t);
    let processed = |node: &Runnel, end: i64| {
        wait_until(TIMEOUT, || committed_offset_of(node, "__runnel_transform_dedup", "events", 0) == end)
    };
    let state_keys = |api: &HttpApi| transform(api, "dedup")["partitions"][0]["state_keys"].as_u64();

    // 100 keys, then each again 500 ms later: dropped.
    let first: Vec<_> = (0..100).map(|i| at(&format!("k{i}"), t0 + i)).collect();
    let repeats: Vec<_> = (0..100).map(|i| at(&format!("k{i}"), t0 + 500 + i)).collect();
    produce_at(&node, "events", &first);
    produce_at(&node, "events", &repeats);
    assert!(processed(&node, 200), "200 events never processed: {}", transform(&api, "dedup"));
    // Per key its last time; per bucket an index (2 chunks of keys, a count); the bucket list.
    assert_eq!(state_keys(&api), Some(104), "{}", transform(&api, "dedup"));

    // kill -9: the keys come back from the changelog and repeats stay dropped.
    node.kill9();
    node.restart();
    let api = HttpApi::new(&node);
    let more: Vec<_> = (0..50)
        .map(|i| at(&format!("k{i}"), t0 + 900))
        .chain((0..10).map(|i| at(&format!("n{i}"), t0 + 900)))
        .collect();
    produce_at(&node, "events", &more);
    assert!(processed(&node, 260), "260 events never processed after the restart: {}", transform(&api, "dedup"));
    assert_eq!(state_keys(&api), Some(114), "{}", transform(&api, "dedup"));

    // Three windows on: the first bucket's keys are forgotten; k0 is new again.
    produce_at(&node, "events", &[at("tick", t0 + 3_000), at("k0", t0 + 3_100)]);
    assert!(processed(&node, 262), "262 events never processed: {}", transform(&api, "dedup"));
    assert_eq!(state_keys(&api), Some(5), "tick and k0, their bucket's chunk and count, the list");

    let expected: Vec<String> = first
        .iter()
        .chain(&more[50..])
        .chain(&[at("tick", t0 + 3_000), at("k0", t0 + 3_100)])
        .map(|(_, value, _)| value.clone())
        .collect();
    let read: Vec<String> =
        read_to_end(&node, "unique", 1).into_iter().map(|v| String::from_utf8_lossy(&v).into_owned()).collect();
    assert_eq!(read, expected, "each key once per window, in input order");
}

fn committed_offset_of(node: &Runnel, group: &str, topic: &str, partition: i32) -> i64 {
    committed(node, group, topic, partition).map_or(0, |offset| offset.max(0))
}

#[test]
fn a_stateful_transform_past_state_bytes_max_fails_with_the_reason_and_keeps_its_outputs_consistent() {
    // Proves the state bound is a setting a deployment can push past: state_bytes_max is
    // checked at deploy (range) and at run time, where the batch whose put would pass it fails
    // with the reason (status, logs, errors metric) and, under the skip policy, contributes
    // neither outputs nor state; smaller customers go on being counted.
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "big-sales", 1);
    support::create_topic(&node, "big-revenue", 1);
    let module = component("runnel-example-revenue");
    let too_small = json!({"input_topic": "big-sales", "output_topics": ["big-revenue"], "state_bytes_max": 100});
    let refused = deploy(&api, "bounded", &module, too_small);
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("state_bytes_max must be between 1 KiB"), "{}", refused.text);

    let config = json!({
        "input_topic": "big-sales",
        "output_topics": ["big-revenue"],
        "state_bytes_max": 1024,
        "batch_records_max": 1,
        "error_policy": "skip",
    });
    assert_eq!(deploy(&api, "bounded", &module, config).status, 201);
    // 16-byte totals under 24-byte customer names, and 64 bytes an entry beside them: 104
    // bytes a key, 9 keys fit in 1 KiB.
    let orders: Vec<(Option<String>, String)> =
        (0..40).map(|i| (None, json!({"customer": format!("customer-{i:0>15}"), "amount": 1}).to_string())).collect();
    produce(&node, "big-sales", &orders);
    let done = wait_until(TIMEOUT, || committed_offset(&node, "__runnel_transform_bounded", "big-sales") == 40);
    assert!(done, "never got through the 40 orders: {}", transform(&api, "bounded"));
    let detail = transform(&api, "bounded");
    let partition = &detail["partitions"][0];
    assert_eq!(partition["state_keys"], 9, "{detail}");
    assert_eq!(partition["skipped"], 31, "{detail}");
    assert!(partition["state_bytes"].as_u64().unwrap() <= 1024, "{detail}");
    let error = partition["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("would pass the transform's state_bytes_max of 1024"), "{detail}");
    assert_eq!(read_to_end(&node, "big-revenue", 1).len(), 9, "only the counted orders have outputs");
}

#[test]
fn a_stateful_transform_whose_input_gains_partitions_grows_its_changelog_and_counts_there() {
    // Proves a partition added to a stateful transform's input gets its own changelog
    // partition (the changelog grows to the input's count; partition p keeps partition p's
    // state) and is counted from an empty state, while the first partition's totals go on.
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    support::create_topic(&node, "grow-sales", 1);
    support::create_topic(&node, "grow-revenue", 1);
    let module = component("runnel-example-revenue");
    let config = json!({"input_topic": "grow-sales", "output_topics": ["grow-revenue"], "batch_records_max": 50});
    assert_eq!(deploy(&api, "grow", &module, config).status, 201);
    let group = "__runnel_transform_grow";
    let order = |customer: &str, amount: u64| json!({"customer": customer, "amount": amount}).to_string();
    let first: Vec<(Option<String>, String)> = (0..30).map(|i| (None, order("old", i))).collect();
    produce(&node, "grow-sales", &first);
    assert!(
        wait_until(TIMEOUT, || committed_offset_of(&node, group, "grow-sales", 0) == 30),
        "partition 0 never processed: {}",
        transform(&api, "grow")
    );

    let admin: AdminClient<rdkafka::client::DefaultClientContext> = client_config(&node, &[]).create().unwrap();
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT)).request_timeout(Some(TIMEOUT));
    let grown = support::block_on(admin.create_partitions(&[NewPartitions::new("grow-sales", 2)], &options)).unwrap();
    assert_eq!(grown, vec![Ok("grow-sales".to_string())]);
    // Partition 1 gets its own customer; partition 0 one more order of the old one.
    let producer = producer(&node);
    for i in 0..20 {
        producer.send(BaseRecord::<(), String>::to("grow-sales").partition(1).payload(&order("new", i))).unwrap();
    }
    producer.send(BaseRecord::<(), String>::to("grow-sales").partition(0).payload(&order("old", 100))).unwrap();
    producer.flush(TIMEOUT).unwrap();
    let done = wait_until(TIMEOUT, || {
        committed_offset_of(&node, group, "grow-sales", 1) == 20
            && committed_offset_of(&node, group, "grow-sales", 0) == 31
    });
    assert!(done, "the grown input was not processed: {}", transform(&api, "grow"));
    let state = api.get("/v1/topics/__runnel_transform_grow_state");
    assert_eq!(state.json["partitions"].as_array().map(Vec::len), Some(2), "{}", state.text);
    let totals = totals_by_customer(&node, "grow-revenue", 1);
    assert_eq!(totals["old"].last(), Some(&(31, (0..30).sum::<u64>() as f64 + 100.0)), "{totals:?}");
    assert_eq!(totals["new"].len(), 20);
    assert_eq!(totals["new"].last(), Some(&(20, (0..20).sum::<u64>() as f64)), "counted from an empty state");
}
