//! The web dashboard in a real browser: Debian's headless Chromium, driven through WebDriver
//! (chromedriver's W3C endpoints over `reqwest`), against the real `runnel` binary with data
//! produced and committed by librdkafka. What the pages show is compared with what the test
//! produced and with the HTTP API's own answers; a WASM transform (the identity example, built
//! by the test) deployed over HTTP is shown and paused from its page.
//!
//! Without /usr/bin/chromium and /usr/bin/chromedriver the test is skipped (scripts/test.sh counts it so), unless
//! RUNNEL_REQUIRE_BROWSER=1 (scripts/test.sh sets it after installing them), where it fails.
//! Waits are on conditions with deadlines (`support::wait_until`), never fixed sleeps.
//! A three-node cluster case kills a node with SIGKILL and watches the pages follow the fencing,
//! the ISR shrinks and, after a restart, the expands.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::cluster::Cluster;
use support::{client_config, create_topic, wait_until, Runnel};

/// Longest wait for any one step (a debug build and a browser on a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(60);
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C name of the key that holds an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const ARTIFACTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/test-artifacts");

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
const RECORDS_PER_PARTITION: i64 = 10;
const GROUP: &str = "billing";
const COMMITTED: i64 = 4;
/// The key of record 1 of partition 0: markup that must be shown as text, never parsed.
const HTML_KEY: &str = r#"<b>bold</b> & "quoted" <img src=x>"#;
/// The value of record 9 of partition 0: not UTF-8, so the API and page show base64.
const BINARY_VALUE: &[u8] = &[0xff, 0x00, 0xfe];

#[test]
fn dashboard_shows_cluster_topics_records_and_group_lag_and_manages_topics() {
    // Proves the dashboard in Chromium shows the cluster id, topics, partition high watermarks,
    // records (escaped, base64 marked) and a group's committed lag as produced and committed
    // through Kafka, polls live (lag chart samples grow), and creates and deletes a topic.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[]);
    let base = node.http_url();
    create_topic(&node, TOPIC, PARTITIONS);
    produce(&node);
    commit_offsets(&node);

    let browser = Browser::start();
    let api = |path: &str| browser.http_json(Method::GET, &format!("{base}{path}"), None);

    // Every partition has all its records before the browser looks.
    let hws_ready = wait_until(DEADLINE, || {
        let (status, topic) = api(&format!("/v1/topics/{TOPIC}"));
        status == StatusCode::OK
            && topic["partitions"].as_array().is_some_and(|parts| {
                parts.len() == PARTITIONS as usize
                    && parts.iter().all(|p| p["high_watermark"].as_i64() == Some(RECORDS_PER_PARTITION))
            })
    });
    assert!(hws_ready, "GET /v1/topics/{TOPIC} never showed {RECORDS_PER_PARTITION} records per partition");
    let (_, cluster) = api("/v1/cluster");
    let cluster_id = cluster["cluster_id"].as_str().expect("cluster_id").to_string();
    let node_id = cluster["node_id"].as_i64().expect("node_id").to_string();

    // Overview.
    browser.navigate(&format!("{base}/"));
    browser.wait_for_text(r#"[data-testid="cluster-id"]"#, &cluster_id);
    browser.wait_for_count(r#"[data-testid="node-row"][data-controller="true"]"#, 1);

    // Topics list: the row, its figures, internal topics hidden until asked for, the filter.
    browser.click(r#"a[data-nav="topics"]"#);
    let orders_row = format!(r#"[data-testid="topic-row"][data-topic="{TOPIC}"]"#);
    browser.wait_for_text(&format!(r#"{orders_row} [data-field="partitions"]"#), &PARTITIONS.to_string());
    let total = (PARTITIONS as i64 * RECORDS_PER_PARTITION).to_string();
    browser.wait_for_text(&format!(r#"{orders_row} [data-field="messages"]"#), &total);
    let offsets_row = r#"[data-testid="topic-row"][data-topic="__consumer_offsets"]"#;
    assert_eq!(browser.count(offsets_row), 0, "internal topics are hidden by default");
    browser.click(r#"[data-testid="show-internal"]"#);
    browser.wait_for_count(offsets_row, 1);
    browser.type_into(r#"[data-testid="topic-filter"]"#, "consumer");
    browser.wait_for_count(&orders_row, 0);
    browser.wait_for_count(offsets_row, 1);
    browser.clear_input(r#"[data-testid="topic-filter"]"#);
    browser.wait_for_count(&orders_row, 1);

    // Topic detail: partition table, then the message browser.
    browser.click(&format!(r#"{orders_row} [data-field="name"] a"#));
    for partition in 0..PARTITIONS {
        let row = format!(r#"[data-testid="partition-row"][data-partition="{partition}"]"#);
        let hw = RECORDS_PER_PARTITION.to_string();
        browser.wait_for_text(&format!(r#"{row} [data-field="high_watermark"]"#), &hw);
        browser.wait_for_text(&format!(r#"{row} [data-field="log_end_offset"]"#), &hw);
        browser.wait_for_text(&format!(r#"{row} [data-field="log_start_offset"]"#), "0");
        browser.wait_for_text(&format!(r#"{row} [data-field="leader"]"#), &node_id);
    }
    // The page opens the first partition holding records (0) from its log start.
    browser.wait_for_count(r#"[data-testid="record-row"]"#, RECORDS_PER_PARTITION as usize);
    let record = |offset: i64, field: &str| {
        format!(r#"[data-testid="record-row"][data-offset="{offset}"] [data-field="{field}"]"#)
    };
    browser.wait_for_text(&format!("{} .text", record(0, "key")), "key-0-0");
    browser.wait_for_text(&format!("{} .text", record(0, "value")), r#"{"partition":0,"n":0}"#);
    browser.wait_for_text(&record(0, "headers"), "source: dashboard-test");
    browser.wait_for_text(&format!("{} .text", record(1, "key")), HTML_KEY);
    assert_eq!(browser.count(&format!("{} b, {} img", record(1, "key"), record(1, "key"))), 0, "keys are escaped");
    let b64 = base64::engine::general_purpose::STANDARD.encode(BINARY_VALUE);
    browser.wait_for_text(&format!("{} .text", record(9, "value")), &b64);
    browser.wait_for_count(&format!(r#"{} [data-encoding="base64"]"#, record(9, "value")), 1);
    assert_eq!(browser.count(&format!(r#"{} [data-encoding="base64"]"#, record(0, "value"))), 0);
    // The last three records of partition 2: a negative offset counts back from the high watermark.
    browser.click(r#"select[name="partition"] option[value="2"]"#);
    browser.type_into(r#"#records-form input[name="offset"]"#, "-3");
    browser.click(r#"[data-testid="records-fetch"]"#);
    browser.wait_for_count(r#"[data-testid="record-row"][data-partition="2"]"#, 3);
    browser.wait_for_text(&format!("{} .text", record(7, "key")), "key-2-7");
    browser.wait_for_count(&record(6, "key"), 0);
    let topic_png = browser.screenshot("dashboard-topic.png");

    // Groups list and group detail: lag as committed, and the lag chart sampling live.
    browser.click(r#"a[data-nav="groups"]"#);
    let lag = (PARTITIONS as i64 * (RECORDS_PER_PARTITION - COMMITTED)).to_string();
    let group_row = format!(r#"[data-testid="group-row"][data-group="{GROUP}"]"#);
    browser.wait_for_text(&format!(r#"{group_row} [data-field="total_lag"]"#), &lag);
    browser.click(&format!(r#"{group_row} [data-field="group_id"] a"#));
    browser.wait_for_text(r#"[data-testid="group-total-lag"]"#, &lag);
    for partition in 0..PARTITIONS {
        let row = format!(r#"[data-testid="offset-row"][data-topic="{TOPIC}"][data-partition="{partition}"]"#);
        browser.wait_for_text(&format!(r#"{row} [data-field="committed_offset"]"#), &COMMITTED.to_string());
        browser
            .wait_for_text(&format!(r#"{row} [data-field="lag"]"#), &(RECORDS_PER_PARTITION - COMMITTED).to_string());
    }
    let sampled = wait_until(DEADLINE, || {
        browser
            .attribute(r#"[data-testid="lag-chart"]"#, "data-samples")
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            >= 3
    });
    assert!(sampled, "the lag chart never collected 3 samples: the page does not poll");
    browser.wait_for_count(r#"[data-testid="lag-chart"] svg polyline"#, 1);
    let group_png = browser.screenshot("dashboard-group.png");

    // Create a topic through the form; the API then has it as requested.
    browser.click(r#"a[data-nav="topics"]"#);
    let form = r#"[data-testid="create-topic-form"]"#;
    let created = "created-in-browser";
    browser.type_into(&format!(r#"{form} input[name="name"]"#), created);
    browser.type_into(&format!(r#"{form} input[name="partitions"]"#), "4");
    browser.type_into(&format!(r#"{form} input[name="replication_factor"]"#), "1");
    browser.type_into(&format!(r#"{form} textarea[name="configs"]"#), "retention.ms=3600000");
    browser.click(r#"[data-testid="create-topic-submit"]"#);
    let exists = wait_until(DEADLINE, || {
        let (status, topic) = api(&format!("/v1/topics/{created}"));
        status == StatusCode::OK
            && topic["partitions"].as_array().map(Vec::len) == Some(4)
            && topic["replication_factor"] == json!(1)
            && topic["configs"]["retention.ms"] == json!("3600000")
    });
    assert!(exists, "GET /v1/topics/{created} never showed 4 partitions and retention.ms=3600000");
    browser.wait_for_count(&format!(r#"[data-testid="topic-row"][data-topic="{created}"]"#), 1);
    // The same name again: the page shows the API's own error message.
    let (status, conflict) = browser.http_json(
        Method::POST,
        &format!("{base}/v1/topics"),
        Some(json!({"name": created, "partitions": 4, "replication_factor": 1, "configs": {}})),
    );
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    let message = conflict["message"].as_str().expect("error message").to_string();
    browser.type_into(&format!(r#"{form} input[name="name"]"#), created);
    browser.click(r#"[data-testid="create-topic-submit"]"#);
    browser.wait_for_text(r#"[data-testid="create-topic-status"].error"#, &message);

    // Delete it from its page, through the confirm dialog; the API then no longer knows it.
    browser.click(&format!(r#"[data-testid="topic-row"][data-topic="{created}"] [data-field="name"] a"#));
    browser.wait_for_text(r#"[data-testid="topic-name"]"#, created);
    browser.click(r#"[data-testid="delete-topic"]"#);
    browser.accept_confirm(&format!(r#"Delete topic "{created}""#));
    let deleted = wait_until(DEADLINE, || api(&format!("/v1/topics/{created}")).0 == StatusCode::NOT_FOUND);
    assert!(deleted, "GET /v1/topics/{created} still answers after the page deleted it");
    browser.wait_for_count(r#"[data-testid="topics-table"]"#, 1);
    browser.wait_for_count(&format!(r#"[data-testid="topic-row"][data-topic="{created}"]"#), 0);

    println!("screenshots: {} {}", topic_png.display(), group_png.display());
}

#[test]
fn dashboard_logs_in_shows_only_what_the_user_may_see_and_reports_a_denied_action() {
    // Proves the dashboard of a node whose HTTP API requires authentication: it opens on a
    // login form (no data, no browser password prompt), a wrong password is reported on the
    // form, a SCRAM user logs in (an HttpOnly cookie, so the page never holds the password),
    // the pages show only the topics the user may describe, an action the ACLs refuse shows
    // the broker's refusal and changes nothing, and logging out returns to the form.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[
        "--http-authentication",
        "required",
        "--authorizer-class-name",
        "standard",
        "--super-users",
        "User:admin",
        "--add-scram",
        "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=alice,password=alice-secret]",
    ]);
    let base = node.http_url();
    let admin = support::HttpApi::new(&node).with_basic("admin", "admin-secret");
    assert_eq!(admin.post("/v1/topics", &json!({"name": TOPIC, "partitions": 1})).status, 201);

    let browser = Browser::start();
    browser.navigate(&format!("{base}/#/topics"));
    browser.wait_for_count(r#"[data-testid="login-form"]"#, 1);
    browser.wait_for_count(r#"[data-testid="topic-row"]"#, 0);
    browser.type_into(r#"[data-testid="login-user"]"#, "alice");
    browser.type_into(r#"[data-testid="login-password"]"#, "wrong");
    browser.click(r#"[data-testid="login-submit"]"#);
    browser.wait_for_text(r#"[data-testid="login-error"]"#, "invalid user name or password");
    browser.type_into(r#"[data-testid="login-password"]"#, "alice-secret");
    browser.click(r#"[data-testid="login-submit"]"#);
    browser.wait_for_text(r#"[data-testid="user-name"]"#, "alice");
    browser.wait_for_count(r#"[data-testid="live-status"][data-state="live"]"#, 1);
    browser.wait_for_count(r#"[data-testid="create-topic-form"]"#, 1);
    assert_eq!(
        browser.count(&format!(r#"[data-testid="topic-row"][data-topic="{TOPIC}"]"#)),
        0,
        "alice may not describe it"
    );

    let form = r#"[data-testid="create-topic-form"]"#;
    browser.type_into(&format!(r#"{form} input[name="name"]"#), "alice-made");
    browser.click(r#"[data-testid="create-topic-submit"]"#);
    let status = r#"[data-testid="create-topic-status"].error"#;
    let mut seen = None;
    let refused = wait_until(DEADLINE, || {
        seen = browser.text(status);
        seen.as_deref().is_some_and(|t| t.contains("TopicAuthorizationFailed"))
    });
    assert!(refused, "the refusal is shown: last saw {seen:?} (page: {})", browser.page_state());
    assert_eq!(admin.get("/v1/topics/alice-made").status, 404, "a refused action changes nothing");

    browser.click(r#"[data-testid="logout"]"#);
    browser.wait_for_count(r#"[data-testid="login-form"]"#, 1);
    browser.navigate(&format!("{base}/#/topics"));
    browser.wait_for_count(r#"[data-testid="login-form"]"#, 1);
}

#[test]
fn dashboard_pages_through_topics_a_page_at_a_time_and_filters_on_the_node() {
    // Proves the Topics page shows one page of 100 topics out of 250 (never all of them),
    // Next and Previous walk the pages in name order, and the filter box is applied by the node
    // across every page (a match on the last page shows without paging to it).
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[]);
    let base = node.http_url();
    let names: Vec<String> = (0..250).map(|i| format!("paged-{i:03}")).collect();
    support::create_topics(&node, &names, 1);
    let browser = Browser::start();
    let row = |name: &str| format!(r#"[data-testid="topic-row"][data-topic="{name}"]"#);
    let rows = r#"[data-testid="topic-row"]"#;
    let range = r#"[data-testid="topics-range"]"#;

    browser.navigate(&format!("{base}/#/topics"));
    browser.wait_for_text(range, "1–100 of 250");
    browser.wait_for_count(rows, 100);
    browser.wait_for_count(&row("paged-000"), 1);
    browser.wait_for_count(&row("paged-099"), 1);
    assert_eq!(browser.count(&row("paged-100")), 0, "the second page is not loaded");
    browser.wait_for_text("#topic-count", "250 topics");

    browser.click(r#"[data-testid="topics-next"]"#);
    browser.wait_for_text(range, "101–200 of 250");
    browser.wait_for_count(&row("paged-100"), 1);
    assert_eq!(browser.count(&row("paged-000")), 0);
    browser.click(r#"[data-testid="topics-next"]"#);
    browser.wait_for_text(range, "201–250 of 250");
    browser.wait_for_count(rows, 50);
    assert_eq!(browser.attribute(r#"[data-testid="topics-next"]"#, "disabled").as_deref(), Some("true"));
    browser.click(r#"[data-testid="topics-prev"]"#);
    browser.wait_for_text(range, "101–200 of 250");
    browser.wait_for_count(&row("paged-150"), 1);

    // From page 2, a filter matching only topics of page 3 starts over at its first page.
    browser.type_into(r#"[data-testid="topic-filter"]"#, "paged-24");
    browser.wait_for_text("#topic-count", "10 topics match the filter");
    browser.wait_for_count(rows, 10);
    browser.wait_for_count(&row("paged-249"), 1);
    browser.clear_input(r#"[data-testid="topic-filter"]"#);
    browser.wait_for_text(range, "1–100 of 250");
}

#[test]
fn dashboard_shows_a_running_transform_and_pauses_it() {
    // Proves the Transforms tab lists a deployed identity transform as running, its page shows
    // the records it read (as the API counts them), its logs and live throughput, and its Pause
    // button pauses it (the API then reports it paused).
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[]);
    let base = node.http_url();
    create_topic(&node, "clicks", 2);
    create_topic(&node, "clicks-copy", 2);
    let module = support::guest_component("runnel-example-identity");

    let browser = Browser::start();
    let api = |path: &str| browser.http_json(Method::GET, &format!("{base}{path}"), None);
    let config = json!({
        "input_topic": "clicks",
        "output_topics": ["clicks-copy"],
        "parameters": {"note": "<i>not markup</i>"},
        "module_base64": base64::engine::general_purpose::STANDARD.encode(&module),
    });
    let (status, deployed) = browser.http_json(Method::PUT, &format!("{base}/v1/transforms/copy"), Some(config));
    assert_eq!(status, StatusCode::CREATED, "{deployed}");

    const CLICKS: u64 = 12;
    let producer: BaseProducer = client_config(&node, &[]).create().expect("producer");
    for n in 0..CLICKS {
        let (key, value) = (format!("user-{n}"), format!("click {n}"));
        let record = BaseRecord::<str, str>::to("clicks").key(key.as_str()).payload(value.as_str());
        producer.send(record).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(DEADLINE).expect("flush");
    let mut transform = Value::Null;
    let caught_up = wait_until(DEADLINE, || {
        transform = api("/v1/transforms/copy").1;
        let records_in: u64 =
            transform["partitions"].as_array().into_iter().flatten().filter_map(|p| p["records_in"].as_u64()).sum();
        transform["state"] == "running" && transform["lag"] == 0 && records_in == CLICKS
    });
    assert!(caught_up, "GET /v1/transforms/copy never showed {CLICKS} records in with lag 0: {transform}");

    // Overview count, then the list.
    browser.navigate(&format!("{base}/"));
    browser.wait_for_text(r#"[data-testid="cluster-transforms"]"#, "1");
    browser.click(r#"a[data-nav="transforms"]"#);
    let row = r#"[data-testid="transform-row"][data-transform="copy"]"#;
    browser.wait_for_text(&format!(r#"{row} [data-field="state"]"#), "running");
    browser.wait_for_count(&format!(r#"{row} .badge.ok[data-state="running"]"#), 1);
    browser.wait_for_text(&format!(r#"{row} [data-field="topics"]"#), "clicks → clicks-copy");
    browser.wait_for_text(&format!(r#"{row} [data-field="lag"]"#), "0");
    browser.wait_for_text(&format!(r#"{row} [data-field="version"]"#), "1");

    // A validator on another topic: the same page lists it with what it refused (escaped).
    create_topic(&node, "orders", 1);
    let schema = support::guest_component("runnel-example-schema");
    let config = json!({
        "topic": "orders",
        "parameters": {"required": "<b>id</b>"},
        "module_base64": base64::engine::general_purpose::STANDARD.encode(&schema),
    });
    let (status, deployed) =
        browser.http_json(Method::PUT, &format!("{base}/v1/validators/orders-schema"), Some(config));
    assert_eq!(status, StatusCode::CREATED, "{deployed}");
    let refused = std::sync::Arc::new(std::sync::Mutex::new(None));
    let producer: BaseProducer<Delivered> =
        client_config(&node, &[]).create_with_context(Delivered(refused.clone())).expect("producer");
    producer.send(BaseRecord::<str, str>::to("orders").payload("{\"amount\":1}")).map_err(|(e, _)| e).expect("send");
    producer.flush(DEADLINE).expect("flush");
    let error = refused.lock().unwrap().take();
    assert!(error.as_deref().is_some_and(|e| e.contains("InvalidRecord")), "delivery: {error:?}");
    let validator = r#"[data-testid="validator-row"][data-validator="orders-schema"]"#;
    browser.wait_for_text(&format!(r#"{validator} [data-field="batches_rejected"]"#), "1");
    browser.wait_for_text(&format!(r#"{validator} [data-field="on_failure"]"#), "fail closed");
    browser
        .wait_for_text(&format!(r#"{validator} [data-field="last"]"#), "record 0: missing required field `<b>id</b>`");
    assert_eq!(browser.count(&format!("{validator} b")), 0, "the guest's message is escaped");
    browser.screenshot("dashboard-validators.png");

    // Its page: counts, partitions, parameters as text, logs, a throughput sparkline that polls.
    browser.click(&format!(r#"{row} [data-field="name"] a"#));
    browser.wait_for_text(r#"[data-testid="transform-name"]"#, "copy");
    browser.wait_for_text(r#"[data-testid="transform-records-in"]"#, &CLICKS.to_string());
    browser.wait_for_text(r#"[data-testid="transform-state"]"#, "running");
    browser.wait_for_count(r#"[data-testid="transform-partition-row"]"#, 2);
    for partition in 0..2 {
        let row = format!(r#"[data-testid="transform-partition-row"][data-partition="{partition}"]"#);
        browser.wait_for_text(&format!(r#"{row} [data-field="lag"]"#), "0");
        browser.wait_for_text(&format!(r#"{row} [data-field="state"]"#), "running");
    }
    assert_eq!(browser.count(r#"#transform-config i"#), 0, "parameters are escaped");
    browser.wait_for_text(r#"#transform-config [data-field="delivery"]"#, "exactly-once");
    // One start line per partition at least.
    let logged = wait_until(DEADLINE, || browser.count(r#"[data-testid="transform-logs"] .log-line"#) >= 2);
    assert!(logged, "the logs panel never showed the workers' start lines (page: {})", browser.page_state());
    let sampled = wait_until(DEADLINE, || {
        browser
            .attribute(r#"[data-testid="transform-throughput"]"#, "data-samples")
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            >= 3
    });
    assert!(sampled, "the throughput sparkline never collected 3 samples: the page does not poll");
    browser.wait_for_count(r#"[data-testid="transform-throughput"] svg polyline"#, 2);
    let png = browser.screenshot("dashboard-transform.png");

    // Pause from the page: the API reports it paused, and the page follows.
    browser.click(r#"[data-testid="transform-pause"]"#);
    let paused = wait_until(DEADLINE, || {
        let (_, t) = api("/v1/transforms/copy");
        t["paused"] == json!(true) && t["state"] == "paused"
    });
    assert!(paused, "GET /v1/transforms/copy never reported paused after the Pause button");
    browser.wait_for_text(r#"[data-testid="transform-state"]"#, "paused");
    browser.wait_for_count(r#"[data-testid="transform-resume"]:not([hidden])"#, 1);

    println!("screenshot: {}", png.display());
}

#[test]
fn dashboard_lists_an_open_transaction_and_clears_it_when_it_commits() {
    // Proves the Transactions tab: an open librdkafka transaction is listed with its state,
    // producer id (as the API reports it) and partitions; after the commit the open-only view
    // is empty and unticking "Open only" shows it as CompleteCommit.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[]);
    let base = node.http_url();
    create_topic(&node, "payments", 2);
    let producer: BaseProducer =
        client_config(&node, &[("transactional.id", "checkout-1"), ("linger.ms", "5")]).create().expect("producer");
    producer.init_transactions(DEADLINE).expect("init_transactions");
    producer.begin_transaction().expect("begin");
    producer
        .send(BaseRecord::<(), str>::to("payments").partition(1).payload("paid"))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(DEADLINE).expect("flush");

    let browser = Browser::start();
    let (_, described) = browser.http_json(Method::GET, &format!("{base}/v1/transactions/checkout-1"), None);
    assert_eq!(described["state"], "Ongoing", "{described}");
    browser.navigate(&format!("{base}/"));
    browser.click(r#"a[data-nav="transactions"]"#);
    let row = r#"[data-testid="txn-row"][data-txn="checkout-1"]"#;
    browser.wait_for_text(&format!(r#"{row} [data-field="state"]"#), "Ongoing");
    browser.wait_for_text(&format!(r#"{row} [data-field="producer_id"]"#), &described["producer_id"].to_string());
    browser.wait_for_text(&format!(r#"{row} [data-field="partitions"]"#), "payments [1]");
    browser.screenshot("transactions-open");

    producer.commit_transaction(DEADLINE).expect("commit");
    browser.wait_for_count(row, 0);
    browser.wait_for_text(r#"[data-testid="txns-empty"]"#, "No open transactions.");
    browser.click(r#"[data-testid="txn-open-only"]"#);
    browser.wait_for_text(&format!(r#"{row} [data-field="state"]"#), "CompleteCommit");
}

#[test]
fn dashboard_on_a_cluster_shows_nodes_fenced_and_partitions_under_replicated_after_a_kill() {
    // Proves on three nodes the overview shows every node live with its roles and the active
    // controller; after kill -9 of a node it shows that node fenced, the topic's partitions
    // under-replicated with the node marked out of sync and the ISR shrinks charted; after a
    // restart every node is live again, nothing is under-replicated and the expands are charted.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    const REPLICATED: &str = "replicated";
    const RF3_PARTITIONS: usize = 3;
    let mut cluster = Cluster::start(3, &[]);
    let base = cluster.node(1).http_url();
    let browser = Browser::start();
    let api = |path: &str| browser.http_json(Method::GET, &format!("{base}{path}"), None);
    let (status, created) = browser.http_json(
        Method::POST,
        &format!("{base}/v1/topics"),
        Some(json!({"name": REPLICATED, "partitions": RF3_PARTITIONS, "replication_factor": 3})),
    );
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let mut cluster_view = Value::Null;
    let settled = wait_until(DEADLINE, || {
        cluster_view = api("/v1/cluster").1;
        let nodes = cluster_view["nodes"].as_array().cloned().unwrap_or_default();
        nodes.len() == 3
            && nodes.iter().all(|n| n["state"] == "live")
            && cluster_view["controller_id"].is_u64()
            && cluster_view["under_replicated_partitions"] == 0
    });
    assert!(settled, "GET /v1/cluster never showed 3 live nodes, a controller, all in sync: {cluster_view}");
    let controller = cluster_view["controller_id"].as_u64().expect("controller_id");
    // Not the node the page talks to, and not the controller (that is a quorum test of its own).
    let victim = (2..=3).find(|&id| id != controller).expect("a follower node");

    browser.navigate(&format!("{base}/"));
    let node_row = |id: u64| format!(r#"[data-testid="node-row"][data-node="{id}"]"#);
    browser.wait_for_count(r#"[data-testid="node-row"][data-state="live"]"#, 3);
    browser.wait_for_count(r#"[data-testid="node-row"][data-roles="broker,controller"]"#, 3);
    browser.wait_for_text(&format!(r#"{} [data-field="roles"]"#, node_row(1)), "broker + controller");
    browser.wait_for_count(r#"[data-testid="node-row"][data-controller="true"]"#, 1);
    browser.wait_for_text(&format!(r#"{} [data-field="controller"]"#, node_row(controller)), "active controller");
    browser.wait_for_text(r#"[data-testid="cluster-controller"]"#, &format!("node {controller}"));
    browser.wait_for_text(r#"[data-testid="cluster-under-replicated"]"#, "0");
    browser.wait_for_text(r#"[data-testid="cluster-offline"]"#, "0");
    let shrinks_before = browser.number_attribute(r#"[data-testid="isr-chart"]"#, "data-shrinks");
    let expands_before = browser.number_attribute(r#"[data-testid="isr-chart"]"#, "data-expands");

    cluster.kill9(victim);
    browser.wait_for_count(&format!(r#"{}[data-state="fenced"]"#, node_row(victim)), 1);
    browser.wait_for_text(r#"[data-testid="cluster-fenced"]"#, "1");
    // Every partition of an RF 3 topic had the victim in its ISR (internal ones may add more).
    browser.wait_for_number(r#"[data-testid="cluster-under-replicated"]"#, |n| n >= RF3_PARTITIONS as u64);
    browser.wait_for_text(r#"[data-testid="cluster-offline"]"#, "0");
    browser.wait_for_number_attribute(r#"[data-testid="isr-chart"]"#, "data-shrinks", |n| {
        n >= shrinks_before + RF3_PARTITIONS as u64
    });
    let drawn = wait_until(DEADLINE, || browser.count(r#"[data-testid="isr-chart"] svg rect.shrink"#) >= 1);
    assert!(drawn, "the ISR chart draws no shrink bar (page: {})", browser.page_state());
    // /metrics agrees: leaders report their under-replicated partitions (summed over the live
    // nodes, the cluster's count), the active controller alone the fenced broker and offline.
    let live: Vec<u64> = (1..=3).filter(|&id| id != victim).collect();
    let mut sums = (0.0, 0.0, 0.0, 0.0);
    let agreed = wait_until(DEADLINE, || {
        sums = (0.0, 0.0, 0.0, 0.0);
        for &id in &live {
            let text = browser.http_text(&format!("{}/metrics", cluster.node(id).http_url()));
            let value = |name: &str| metric_value(&text, name).unwrap_or(f64::NAN);
            sums.0 += value("kafka_server_replicamanager_underreplicatedpartitions");
            sums.1 += value("kafka_controller_kafkacontroller_activecontrollercount");
            sums.2 += value("kafka_controller_kafkacontroller_fencedbrokercount");
            sums.3 += value("kafka_controller_kafkacontroller_offlinepartitionscount");
        }
        let urp = api("/v1/cluster").1["under_replicated_partitions"].as_f64().unwrap_or(-1.0);
        sums == (urp, 1.0, 1.0, 0.0)
    });
    assert!(agreed, "/metrics of nodes {live:?} sum to (URP, active controllers, fenced, offline) = {sums:?}");
    let overview_png = browser.screenshot("dashboard-cluster-fenced.png");

    browser.navigate(&format!("{base}/#/topics/{REPLICATED}"));
    browser.wait_for_text(r#"[data-testid="topic-under-replicated"]"#, &RF3_PARTITIONS.to_string());
    browser.wait_for_count(r#"[data-testid="partition-row"][data-under-replicated="true"]"#, RF3_PARTITIONS);
    let out_of_sync = format!(r#"[data-testid="partition-row"] [data-replica="{victim}"][data-in-sync="false"]"#);
    browser.wait_for_count(&out_of_sync, RF3_PARTITIONS);
    for partition in 0..RF3_PARTITIONS {
        let row = format!(r#"[data-testid="partition-row"][data-partition="{partition}"]"#);
        browser.wait_for_text(&format!(r#"{row} [data-field="status"]"#), "under-replicated");
        let isr = browser.text(&format!(r#"{row} [data-field="isr"]"#)).unwrap_or_default();
        assert!(
            !isr.split(", ").any(|id| id == victim.to_string()),
            "partition {partition}: ISR {isr:?} has the killed node"
        );
    }
    let topic_png = browser.screenshot("dashboard-cluster-under-replicated.png");

    cluster.restart(victim);
    browser.wait_for_count(r#"[data-testid="partition-row"][data-under-replicated="false"]"#, RF3_PARTITIONS);
    browser.wait_for_count(&out_of_sync, 0);
    browser.wait_for_text(r#"[data-testid="topic-under-replicated"]"#, "0");
    browser.navigate(&format!("{base}/"));
    browser.wait_for_count(r#"[data-testid="node-row"][data-state="live"]"#, 3);
    browser.wait_for_text(r#"[data-testid="cluster-fenced"]"#, "0");
    browser.wait_for_text(r#"[data-testid="cluster-under-replicated"]"#, "0");
    browser.wait_for_number_attribute(r#"[data-testid="isr-chart"]"#, "data-expands", |n| {
        n >= expands_before + RF3_PARTITIONS as u64
    });
    let drawn = wait_until(DEADLINE, || browser.count(r#"[data-testid="isr-chart"] svg rect.expand"#) >= 1);
    assert!(drawn, "the ISR chart draws no expand bar (page: {})", browser.page_state());

    println!("screenshots: {} {}", overview_png.display(), topic_png.display());
}

/// One test of this file at a time: each runs a browser and one or three debug nodes, too much
/// at once for a small machine (a failed test poisons nothing: the guard is taken back).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the test can run; SKIP (or, with RUNNEL_REQUIRE_BROWSER=1, fail) when it cannot.
fn browser_available() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER].into_iter().filter(|p| !Path::new(p).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("RUNNEL_REQUIRE_BROWSER").as_deref() == Ok("1") {
        panic!(
            "RUNNEL_REQUIRE_BROWSER=1 but {} missing (apt-get install chromium chromium-driver)",
            missing.join(" and ")
        );
    }
    support::skip("chromium/chromedriver not installed");
    false
}

/// 10 records on each partition, in order: record n of partition p has key `key-p-n` and a
/// JSON value, except record 0 of partition 0 (a header), 1 (markup as key) and 9 (binary value).
fn produce(node: &Runnel) {
    let producer: BaseProducer = client_config(node, &[]).create().expect("producer");
    for partition in 0..PARTITIONS {
        for n in 0..RECORDS_PER_PARTITION {
            let key = if (partition, n) == (0, 1) { HTML_KEY.to_string() } else { format!("key-{partition}-{n}") };
            let json_value = format!(r#"{{"partition":{partition},"n":{n}}}"#);
            let value = if (partition, n) == (0, 9) { BINARY_VALUE } else { json_value.as_bytes() };
            let mut record = BaseRecord::<str, [u8]>::to(TOPIC).partition(partition).key(key.as_str()).payload(value);
            if (partition, n) == (0, 0) {
                record =
                    record.headers(OwnedHeaders::new().insert(Header { key: "source", value: Some("dashboard-test") }));
            }
            producer.send(record).map_err(|(e, _)| e).expect("send");
            // One in flight at a time keeps offsets in send order (librdkafka may retry out of order).
            producer.flush(DEADLINE).expect("flush");
        }
    }
}

/// Group `GROUP` commits offset `COMMITTED` on every partition, without joining (no members).
fn commit_offsets(node: &Runnel) {
    let consumer: BaseConsumer =
        client_config(node, &[("group.id", GROUP), ("enable.auto.commit", "false")]).create().expect("consumer");
    let mut offsets = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        offsets.add_partition_offset(TOPIC, partition, Offset::Offset(COMMITTED)).expect("offset");
    }
    consumer.commit(&offsets, CommitMode::Sync).expect("commit");
}

/// The value of an unlabelled series `name` in Prometheus text.
fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A port nobody listens on right now (the OS picks it; chromedriver binds it next).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// One chromedriver process and one browser session in it; dropping it ends both.
struct Browser {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    driver: Child,
    driver_url: String,
    session: Option<String>,
}

impl Browser {
    fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn chromedriver");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let http = reqwest::Client::builder().timeout(DEADLINE).build().expect("http client");
        let mut browser =
            Browser { runtime, http, driver, driver_url: format!("http://127.0.0.1:{port}"), session: None };
        let ready = wait_until(DEADLINE, || {
            let (status, body) = browser.http_json(Method::GET, &format!("{}/status", browser.driver_url), None);
            status == StatusCode::OK && body["value"]["ready"] == json!(true)
        });
        assert!(ready, "chromedriver on port {port} not ready within {DEADLINE:?}");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        }}});
        let session = browser.command(Method::POST, "/session", Some(capabilities)).expect("new WebDriver session");
        browser.session = Some(session["sessionId"].as_str().expect("sessionId").to_string());
        browser
    }

    /// Any HTTP request with an optional JSON body: (status, JSON body or Null). Transport
    /// errors read as status 599 so that waits keep polling.
    fn http_json(&self, method: Method, url: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.runtime.block_on(async {
            let mut request = self.http.request(method, url);
            if let Some(body) = body {
                request = request.json(&body);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    (status, response.json::<Value>().await.unwrap_or(Value::Null))
                }
                Err(_) => (StatusCode::from_u16(599).expect("status"), Value::Null),
            }
        })
    }

    /// A GET answered with text (empty on a transport error, so waits keep polling).
    fn http_text(&self, url: &str) -> String {
        self.runtime.block_on(async {
            match self.http.get(url).send().await {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        })
    }

    /// A WebDriver command: its `value`, or the WebDriver error as text.
    fn command(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = match &self.session {
            Some(id) if path != "/session" => format!("{}/session/{id}{path}", self.driver_url),
            _ => format!("{}{path}", self.driver_url),
        };
        // chromedriver wants a JSON body on every POST.
        let body = if method == Method::POST { Some(body.unwrap_or_else(|| json!({}))) } else { body };
        let (status, reply) = self.http_json(method, &url, body);
        if status.is_success() {
            Ok(reply["value"].clone())
        } else {
            Err(format!("{status}: {} {}", reply["value"]["error"], reply["value"]["message"]))
        }
    }

    #[track_caller]
    fn navigate(&self, url: &str) {
        if let Err(e) = self.command(Method::POST, "/url", Some(json!({"url": url}))) {
            panic!("navigate to {url}: {e}");
        }
    }

    fn find_all(&self, css: &str) -> Result<Vec<String>, String> {
        let found = self.command(Method::POST, "/elements", Some(json!({"using": "css selector", "value": css})))?;
        Ok(found.as_array().into_iter().flatten().filter_map(|e| e[ELEMENT].as_str().map(String::from)).collect())
    }

    fn find(&self, css: &str) -> Result<String, String> {
        let found = self.command(Method::POST, "/element", Some(json!({"using": "css selector", "value": css})))?;
        found[ELEMENT].as_str().map(String::from).ok_or_else(|| format!("no element reference for {css}"))
    }

    /// How many elements match now (0 while the page is between renders).
    fn count(&self, css: &str) -> usize {
        self.find_all(css).map(|found| found.len()).unwrap_or(0)
    }

    /// The rendered text of the first match, if there is one (and it did not go stale).
    fn text(&self, css: &str) -> Option<String> {
        let element = self.find(css).ok()?;
        let text = self.command(Method::GET, &format!("/element/{element}/text"), None).ok()?;
        text.as_str().map(|t| t.trim().to_string())
    }

    fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let element = self.find(css).ok()?;
        let value = self.command(Method::GET, &format!("/element/{element}/attribute/{name}"), None).ok()?;
        value.as_str().map(String::from)
    }

    #[track_caller]
    fn wait_for_text(&self, css: &str, expected: &str) {
        let mut seen = None;
        let matched = wait_until(DEADLINE, || {
            seen = self.text(css);
            seen.as_deref() == Some(expected)
        });
        assert!(matched, "{css}: expected text {expected:?}, last saw {seen:?} (page: {})", self.page_state());
    }

    #[track_caller]
    fn wait_for_count(&self, css: &str, expected: usize) {
        let mut seen = 0;
        let matched = wait_until(DEADLINE, || {
            seen = self.count(css);
            seen == expected
        });
        assert!(matched, "{css}: expected {expected} matches, last saw {seen} (page: {})", self.page_state());
    }

    /// An attribute of the first match as a number (0 when absent or not a number).
    fn number_attribute(&self, css: &str, name: &str) -> u64 {
        self.attribute(css, name).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    #[track_caller]
    fn wait_for_number_attribute(&self, css: &str, name: &str, accept: impl Fn(u64) -> bool) {
        let mut seen = None;
        let matched = wait_until(DEADLINE, || {
            seen = self.attribute(css, name);
            seen.as_deref().and_then(|v| v.parse().ok()).is_some_and(&accept)
        });
        assert!(matched, "{css} @{name}: last saw {seen:?}, not the expected value (page: {})", self.page_state());
    }

    /// Waits until the text of the first match is a number (thousands separators allowed) that
    /// `accept` takes.
    #[track_caller]
    fn wait_for_number(&self, css: &str, accept: impl Fn(u64) -> bool) {
        let mut seen = None;
        let matched = wait_until(DEADLINE, || {
            seen = self.text(css);
            seen.as_deref().and_then(|t| t.replace(',', "").parse().ok()).is_some_and(&accept)
        });
        assert!(matched, "{css}: last saw {seen:?}, not the expected number (page: {})", self.page_state());
    }

    /// Clicks the first match once it exists (a poll may re-render it between find and click).
    #[track_caller]
    fn click(&self, css: &str) {
        let mut error = String::new();
        let clicked = wait_until(DEADLINE, || {
            let result = self.find(css).and_then(|e| self.command(Method::POST, &format!("/element/{e}/click"), None));
            result.map_err(|e| error = e).is_ok()
        });
        assert!(clicked, "click {css}: {error} (page: {})", self.page_state());
    }

    /// Replaces the contents of an input (Element Clear, then Element Send Keys).
    #[track_caller]
    fn type_into(&self, css: &str, text: &str) {
        let mut error = String::new();
        let typed = wait_until(DEADLINE, || {
            let result = self.find(css).and_then(|e| {
                self.command(Method::POST, &format!("/element/{e}/clear"), None)?;
                self.command(Method::POST, &format!("/element/{e}/value"), Some(json!({"text": text})))
            });
            result.map_err(|e| error = e).is_ok()
        });
        assert!(typed, "type into {css}: {error} (page: {})", self.page_state());
    }

    /// Accepts the open confirm() dialog once it is there, checking it starts with `prefix`.
    #[track_caller]
    fn accept_confirm(&self, prefix: &str) {
        let mut text = None;
        let shown = wait_until(DEADLINE, || {
            text = self.command(Method::GET, "/alert/text", None).ok().and_then(|t| t.as_str().map(String::from));
            text.is_some()
        });
        assert!(shown, "no confirm dialog appeared");
        let text = text.unwrap_or_default();
        assert!(text.starts_with(prefix), "confirm dialog says {text:?}, expected it to start with {prefix:?}");
        self.command(Method::POST, "/alert/accept", None).expect("accept the confirm dialog");
    }

    /// Empties an input the way a user does, firing `input` (Element Clear fires only `change`).
    #[track_caller]
    fn clear_input(&self, css: &str) {
        let script = "const e = document.querySelector(arguments[0]); e.value = ''; \
                      e.dispatchEvent(new Event('input', {bubbles: true}));";
        if let Err(e) = self.command(Method::POST, "/execute/sync", Some(json!({"script": script, "args": [css]}))) {
            panic!("clear {css}: {e}");
        }
    }

    /// Where the page is, for failure messages: its hash and the dashboard's live status.
    fn page_state(&self) -> String {
        let script = "return location.hash + ' · ' + (document.getElementById('live')?.title || '') \
                      + ' · ' + (document.getElementById('banner')?.textContent || 'no error banner');";
        self.command(Method::POST, "/execute/sync", Some(json!({"script": script, "args": []})))
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|e| format!("unknown: {e}"))
    }

    /// Saves a PNG of the viewport to target/test-artifacts/`name` and returns its path.
    fn screenshot(&self, name: &str) -> PathBuf {
        self.try_screenshot(name).unwrap_or_else(|e| panic!("screenshot {name}: {e}"))
    }

    fn try_screenshot(&self, name: &str) -> Result<PathBuf, String> {
        let png = self.command(Method::GET, "/screenshot", None)?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().ok_or("screenshot is not a string")?)
            .map_err(|e| e.to_string())?;
        std::fs::create_dir_all(ARTIFACTS).map_err(|e| e.to_string())?;
        let path = Path::new(ARTIFACTS).join(name);
        std::fs::write(&path, png).map_err(|e| e.to_string())?;
        Ok(path.canonicalize().unwrap_or(path))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A failing test leaves a picture of what the page showed.
        if std::thread::panicking() && self.session.is_some() {
            if let Ok(path) = self.try_screenshot("dashboard-failure.png") {
                eprintln!("screenshot of the failure: {}", path.display());
            }
        }
        // Ending the session closes Chromium; killing only the driver could leave it running.
        if self.session.is_some() {
            let _ = self.command(Method::DELETE, "", None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A producer context that keeps the last delivery error (a validator's refusal).
struct Delivered(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl rdkafka::ClientContext for Delivered {}

impl rdkafka::producer::ProducerContext for Delivered {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            *self.0.lock().unwrap() = Some(format!("{error:?}"));
        }
    }
}

#[test]
fn dashboard_shows_a_stateful_transforms_state_and_changelog() {
    // Proves a stateful transform's page shows its keyed state: the size and key count the API
    // reports, per partition, and the changelog topic it is backed by.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&[]);
    let base = node.http_url();
    create_topic(&node, "orders", 1);
    create_topic(&node, "revenue", 1);
    let module = support::guest_component("runnel-example-revenue");
    let browser = Browser::start();
    let config = json!({
        "input_topic": "orders",
        "output_topics": ["revenue"],
        "state_bytes_max": 1 << 20,
        "module_base64": base64::engine::general_purpose::STANDARD.encode(&module),
    });
    let (status, deployed) = browser.http_json(Method::PUT, &format!("{base}/v1/transforms/rev"), Some(config));
    assert_eq!(status, StatusCode::CREATED, "{deployed}");
    let producer: BaseProducer = client_config(&node, &[]).create().expect("producer");
    for n in 0..9 {
        let value = json!({"customer": format!("c{}", n % 3), "amount": n}).to_string();
        producer.send(BaseRecord::<str, str>::to("orders").payload(value.as_str())).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(DEADLINE).expect("flush");
    let mut transform = Value::Null;
    let counted = wait_until(DEADLINE, || {
        transform = browser.http_json(Method::GET, &format!("{base}/v1/transforms/rev"), None).1;
        transform["partitions"][0]["state_keys"] == 3 && transform["lag"] == 0
    });
    assert!(counted, "the API never showed 3 keys of state: {transform}");
    let bytes = transform["partitions"][0]["state_bytes"].as_u64().unwrap();
    assert_eq!(bytes, 3 * (2 + 16 + 64), "three keys of 2 bytes with 16-byte totals, 64 bytes each beside");
    assert_eq!(transform["partitions"][0]["records_out"], 9, "changelog records are not outputs: {transform}");

    browser.navigate(&format!("{base}/"));
    browser.click(r#"a[data-nav="transforms"]"#);
    browser.click(r#"[data-testid="transform-row"][data-transform="rev"] [data-field="name"] a"#);
    browser.wait_for_text(r#"[data-testid="transform-state-size"]"#, "246 B · 3 keys");
    browser.wait_for_text(r#"#transform-config [data-field="state_topic"]"#, "__runnel_transform_rev_state");
    browser.wait_for_text(r#"#transform-config [data-field="state_bytes_max"]"#, "· at most 1.00 MiB per partition");
    let row = r#"[data-testid="transform-partition-row"][data-partition="0"]"#;
    browser.wait_for_text(&format!(r#"{row} [data-field="state_bytes"]"#), "246 B · 3 keys");
    browser.screenshot("dashboard-stateful-transform.png");
}

#[test]
fn dashboard_lists_assignors_and_shows_which_one_computed_a_groups_assignment() {
    // Proves the Transforms page lists the built-in assignors and an uploaded one with its
    // runs, and a consumer-protocol group's page names the uploaded assignor (and version) that
    // computed its target assignment, as the coordinator reports it.
    if !browser_available() {
        return;
    }
    let _serial = serial();
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let base = node.http_url();
    create_topic(&node, "sized", 3);
    let browser = Browser::start();
    let module = support::guest_component("runnel-guest-badassignor");
    let config = json!({ "module_base64": base64::engine::general_purpose::STANDARD.encode(&module) });
    let (status, deployed) = browser.http_json(Method::PUT, &format!("{base}/v1/assignors/lopsided"), Some(config));
    assert_eq!(status, StatusCode::CREATED, "{deployed}");

    let consumer: BaseConsumer = client_config(
        &node,
        &[("group.id", "kip848"), ("group.protocol", "consumer"), ("group.remote.assignor", "lopsided")],
    )
    .create()
    .expect("consumer");
    consumer.subscribe(&["sized"]).expect("subscribe");
    let assigned = wait_until(DEADLINE, || {
        consumer.poll(Duration::from_millis(100));
        consumer.assignment().is_ok_and(|a| a.count() == 3)
    });
    assert!(assigned, "the member never got the 3 partitions");

    browser.navigate(&format!("{base}/#/transforms"));
    let row = |name: &str| format!(r#"[data-testid="assignor-row"][data-assignor="{name}"]"#);
    browser.wait_for_text(&format!(r#"{} [data-field="kind"]"#, row("uniform")), "built-in (default)");
    browser.wait_for_text(&format!(r#"{} [data-field="kind"]"#, row("lopsided")), "wasm");
    browser.wait_for_text(&format!(r#"{} [data-field="runs"]"#, row("lopsided")), "1");
    browser.wait_for_text(&format!(r#"{} [data-field="version"]"#, row("lopsided")), "1");

    browser.navigate(&format!("{base}/#/groups/kip848"));
    browser
        .wait_for_text(r#"[data-testid="group-assignor"] [data-field="assignor"]"#, "lopsided (uploaded, version 1)");
    let png = browser.screenshot("dashboard-group-assignor.png");
    assert!(browser.count(r#"[data-testid="group-assignor"] [data-field="assignor-error"]"#) == 0);
    println!("screenshot: {}", png.display());
    // Keep polling until the end so the member stays in the group while the pages load.
    consumer.poll(Duration::from_millis(10));
}
