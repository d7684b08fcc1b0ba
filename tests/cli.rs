//! The `runnel` CLI subcommands (topic, produce, consume, group, cluster, transform, validator,
//! assignor)
//! against the real binary: a node started by `support::Runnel`, the CLI run as a separate
//! process pointed at its HTTP listener, outputs parsed and exit codes checked.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Runnel;

/// A CLI run that takes longer than this is hung, not slow.
const CLI_TIMEOUT: Duration = Duration::from_secs(180);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout of a run that must have succeeded.
    fn ok(self) -> String {
        assert_eq!(self.code, 0, "runnel exited {}; stderr: {}", self.code, self.stderr);
        self.stdout
    }

    fn json(self) -> Value {
        let stdout = self.ok();
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }
}

/// Runs `runnel <args>` against `node` (through `RUNNEL_URL`, as a user would set it once).
fn cli(node: &Runnel, args: &[&str]) -> Run {
    cli_with(Some(node), args, None)
}

fn cli_with(node: Option<&Runnel>, args: &[&str], stdin: Option<Vec<u8>>) -> Run {
    cli_in(None, node, args, stdin, CLI_TIMEOUT)
}

/// The general form: `dir` is the working directory (ours if None).
fn cli_in(dir: Option<&Path>, node: Option<&Runnel>, args: &[&str], stdin: Option<Vec<u8>>, timeout: Duration) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runnel"));
    command.args(args).env_remove("RUNNEL_URL");
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    if let Some(node) = node {
        command.env("RUNNEL_URL", node.http_url());
    }
    let mut child = command
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runnel");
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take().expect("piped stdin");
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        })
    });
    let stdout = read_in_background(child.stdout.take().expect("piped stdout"));
    let stderr = read_in_background(child.stderr.take().expect("piped stderr"));
    let mut status = None;
    let finished = support::wait_until(timeout, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!("runnel {args:?} did not finish within {timeout:?}");
    }
    if let Some(writer) = writer {
        writer.join().expect("stdin writer");
    }
    let code = status.and_then(|s| s.code()).expect("exited, not killed by a signal");
    Run {
        code,
        stdout: String::from_utf8(stdout.join().expect("stdout reader")).expect("UTF-8 stdout"),
        stderr: String::from_utf8_lossy(&stderr.join().expect("stderr reader")).into_owned(),
    }
}

fn read_in_background(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Sum over partitions of high watermark − log start offset, from `topic describe --output json`.
fn message_count(node: &Runnel, topic: &str) -> i64 {
    let described = cli(node, &["topic", "describe", topic, "--output", "json"]).json();
    described["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["high_watermark"].as_i64().expect("hw") - p["log_start_offset"].as_i64().expect("log start"))
        .sum()
}

#[test]
fn hundred_thousand_records_round_trip_through_produce_and_consume() {
    // Proves a 100,000-line file produced with `runnel produce --file` comes back from
    // `runnel consume --from-beginning` byte for byte and in order (one partition), with the
    // count visible in `topic describe`.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "big", "-p", "1"]).ok();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.txt");
    let mut file = String::with_capacity(100_000 * 80);
    for i in 0..100_000 {
        file.push_str(&format!("record {i:06} {}\n", "x".repeat(i % 97)));
    }
    std::fs::write(&path, &file).expect("write the input file");

    let produced = cli(&node, &["produce", "big", "--file", path.to_str().expect("UTF-8 path")]);
    assert_eq!(produced.code, 0, "produce failed: {}", produced.stderr);
    assert!(produced.stderr.starts_with("produced 100000 records ("), "summary: {}", produced.stderr);
    assert!(produced.stderr.contains(" records/s"), "summary: {}", produced.stderr);
    assert_eq!(message_count(&node, "big"), 100_000);

    // Without -n: stops at the high watermark.
    let consumed = cli(&node, &["consume", "big", "--from-beginning"]).ok();
    assert!(
        consumed == file,
        "consumed output differs from the input file ({} vs {} bytes)",
        consumed.len(),
        file.len()
    );
    // With -n: stops after that many, even mid-page.
    let first = cli(&node, &["consume", "big", "--from-beginning", "-n", "1500"]).ok();
    assert_eq!(first.lines().count(), 1500);
    assert!(file.starts_with(&first));
    // Default start is the end: nothing new, nothing printed, exit 0.
    assert_eq!(cli(&node, &["consume", "big"]).ok(), "");
    // A negative offset counts back from the end.
    let last = cli(&node, &["consume", "big", "--offset=-2"]).ok();
    assert_eq!(last, file.lines().skip(99_998).map(|l| format!("{l}\n")).collect::<String>());
}

#[test]
fn keyed_records_keep_their_order_per_partition() {
    // Proves `--key-separator` sends keys, that keyed lines spread over partitions by key, and
    // that `consume --format json` shows partition, offset, key and value with each partition
    // in input order.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "keyed", "-p", "3"]).ok();
    let mut input = String::new();
    for i in 0..3000 {
        input.push_str(&format!("key-{}|value {i}\n", i % 7));
    }
    let produced = cli_with(
        Some(&node),
        &["produce", "keyed", "--key-separator", "|", "--batch", "100"],
        Some(input.into_bytes()),
    );
    assert_eq!(produced.code, 0, "produce failed: {}", produced.stderr);
    assert_eq!(message_count(&node, "keyed"), 3000);

    let out = cli(&node, &["consume", "keyed", "--from-beginning", "--format", "json"]).ok();
    let records: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(records.len(), 3000);
    let mut partition_of_key = std::collections::HashMap::new();
    let mut last_seen: std::collections::HashMap<i64, (i64, i64)> = std::collections::HashMap::new();
    let mut used_partitions = std::collections::HashSet::new();
    for r in &records {
        assert_eq!(r["topic"], "keyed");
        let partition = r["partition"].as_i64().expect("partition");
        let offset = r["offset"].as_i64().expect("offset");
        let key = r["key"].as_str().expect("key").to_string();
        let value = r["value"].as_str().expect("value");
        let i: i64 = value.strip_prefix("value ").expect("value text").parse().expect("number");
        assert_eq!(key, format!("key-{}", i % 7));
        assert!(r["timestamp"].as_i64().is_some(), "timestamp in {r}");
        assert_eq!(*partition_of_key.entry(key).or_insert(partition), partition, "a key stays in one partition");
        if let Some((last_offset, last_i)) = last_seen.insert(partition, (offset, i)) {
            assert!(offset > last_offset && i > last_i, "partition {partition} out of order at offset {offset}");
        }
        used_partitions.insert(partition);
    }
    assert!(used_partitions.len() > 1, "7 keys over 3 partitions use more than one");

    // One partition only.
    let p0 = cli(&node, &["consume", "keyed", "-p", "0", "--from-beginning", "--format", "json"]).ok();
    assert!(p0.lines().all(|l| l.contains("\"partition\":0")));
    assert_eq!(p0.lines().count(), records.iter().filter(|r| r["partition"] == 0).count());
}

#[test]
fn json_format_produces_embedded_json_values() {
    // Proves `produce --format json` sends each line's value as JSON (objects stay objects)
    // to the partition the line names, and blank lines are skipped.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "events", "-p", "2"]).ok();
    let input = "{\"key\":\"a\",\"value\":{\"n\":1},\"partition\":1}\n\n{\"value\":[1,2,3],\"partition\":1}\n";
    let produced = cli_with(Some(&node), &["produce", "events", "--format", "json"], Some(input.into()));
    assert_eq!(produced.code, 0, "produce failed: {}", produced.stderr);
    let out = cli(&node, &["consume", "events", "-p", "1", "--from-beginning", "--format", "json"]).ok();
    let records: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(records.len(), 2, "{out}");
    let value: Value = serde_json::from_str(records[0]["value"].as_str().expect("value text")).expect("JSON value");
    assert_eq!(value, serde_json::json!({"n": 1}));
    assert_eq!(records[1]["value"], "[1,2,3]");
    assert_eq!(records[1]["key"], Value::Null);

    // A line that is not JSON fails with its line number, exit 1.
    let bad =
        cli_with(Some(&node), &["produce", "events", "--format", "json"], Some(b"{\"value\":1}\nnot json\n".to_vec()));
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("line 2"), "stderr: {}", bad.stderr);
}

#[test]
fn topic_admin_commands_round_trip_as_json() {
    // Proves topic create/list/describe/config/delete through the CLI with `--output json`,
    // and the table output's headers.
    let node = Runnel::start(&[]);
    let created = cli(
        &node,
        &["topic", "create", "orders", "-p", "3", "-r", "1", "-c", "retention.ms=60000", "--output", "json"],
    )
    .json();
    assert_eq!(created["name"], "orders");
    assert_eq!(created["partitions"].as_array().expect("partitions").len(), 3);
    assert_eq!(created["configs"]["retention.ms"], "60000");

    let listed = cli(&node, &["topic", "list", "--output", "json"]).json();
    let names: Vec<&str> =
        listed["topics"].as_array().expect("topics").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["orders"]);
    let table = cli(&node, &["topic", "list"]).ok();
    assert!(table.starts_with("TOPIC "), "{table}");
    assert!(table.lines().any(|l| l.starts_with("orders ") && l.contains(" 3 ")), "{table}");

    let described = cli(&node, &["topic", "describe", "orders", "--output", "json"]).json();
    assert_eq!(described["replication_factor"], 1);
    for (i, p) in described["partitions"].as_array().expect("partitions").iter().enumerate() {
        assert_eq!(p["partition"], i as i64);
        assert_eq!(p["high_watermark"], 0);
    }
    let table = cli(&node, &["topic", "describe", "orders"]).ok();
    assert!(table.contains("HIGH-WATERMARK") && table.contains("retention.ms=60000"), "{table}");

    let configs =
        cli(&node, &["topic", "config", "orders", "--set", "retention.ms=5000", "--set", "cleanup.policy=compact"])
            .ok();
    assert!(configs.contains("retention.ms") && configs.contains("5000"), "{configs}");
    let configs = cli(&node, &["topic", "config", "orders", "--delete", "cleanup.policy", "--output", "json"]).json();
    let config = |name: &str| -> Value {
        configs["configs"].as_array().expect("configs").iter().find(|c| c["name"] == name).cloned().expect(name)
    };
    assert_eq!(config("retention.ms")["value"], "5000");
    assert_eq!(config("retention.ms")["source"], "topic");
    assert_eq!(config("cleanup.policy")["source"], "default");

    let exists = cli(&node, &["topic", "create", "orders"]);
    assert_eq!(exists.code, 1);
    assert!(exists.stderr.starts_with("error: ") && exists.stderr.contains("(40901)"), "{}", exists.stderr);

    assert_eq!(cli(&node, &["topic", "delete", "orders", "--output", "json"]).json()["deleted"], "orders");
    let listed = cli(&node, &["topic", "list", "--output", "json"]).json();
    assert_eq!(listed["topics"], serde_json::json!([]));
}

#[test]
fn topic_list_pages_follows_every_page_or_prints_one_with_its_cursor() {
    // Proves `topic list` without --limit follows the node's pages to the end (every topic
    // once, in order), --limit prints one page and the --after that continues it, and
    // --prefix narrows the listing on the node.
    let node = Runnel::start(&[]);
    let names: Vec<String> = (0..7).map(|i| format!("t{i}")).chain(["other".to_string()]).collect();
    support::create_topics(&node, &names, 1);
    let listed = cli(&node, &["topic", "list", "--page-size", "3", "--output", "json"]).json();
    let got: Vec<&str> =
        listed["topics"].as_array().expect("topics").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(got, ["other", "t0", "t1", "t2", "t3", "t4", "t5", "t6"], "{listed}");
    assert_eq!((listed["total"].as_i64(), listed["next"].is_null()), (Some(8), true));

    let page = cli(&node, &["topic", "list", "--prefix", "t", "--limit", "3"]).ok();
    let rows: Vec<&str> = page.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(&rows[..3], ["t0", "t1", "t2"], "{page}");
    assert!(page.contains("3 of 7 topics; next page: --after t2"), "{page}");
    let page =
        cli(&node, &["topic", "list", "--prefix", "t", "--limit", "3", "--after", "t5", "--output", "json"]).json();
    assert_eq!(page["topics"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!((page["topics"][0]["name"].as_str(), page["next"].is_null()), (Some("t6"), true));
    let refused = cli(&node, &["topic", "list", "--limit", "0"]);
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("(40002)"), "{}", refused.stderr);
}

#[test]
fn connection_flags_before_the_subcommand_are_accepted() {
    // Proves --url and --output work before the subcommand (`runnel --url U topic list`) as well
    // as after it, and mixed, with no RUNNEL_URL to fall back on.
    let node = Runnel::start(&[]);
    let url = node.http_url();
    cli(&node, &["topic", "create", "early", "--partitions", "2"]).ok();
    for args in [
        vec!["--url", &url, "--output", "json", "topic", "list"],
        vec!["topic", "list", "--url", &url, "--output", "json"],
        vec!["--url", &url, "topic", "--output", "json", "list"],
        vec!["--output", "json", "topic", "list", "--url", &url],
    ] {
        let listed = cli_with(None, &args, None).json();
        assert_eq!(listed["topics"][0]["name"], "early", "runnel {args:?}: {listed}");
    }
    let status = cli_with(None, &["--url", &url, "cluster", "status"], None).ok();
    assert!(status.contains("NODE"), "{status}");
}

#[test]
fn errors_have_messages_and_distinct_exit_codes() {
    // Proves the error contract: an API error exits 1 with `error: <message> (<code>)` on
    // stderr, a closed port exits 3 with the connect message, a usage error exits 2.
    let node = Runnel::start(&[]);
    let unknown = cli(&node, &["topic", "describe", "nope"]);
    assert_eq!(unknown.code, 1);
    assert_eq!(unknown.stdout, "");
    assert!(unknown.stderr.starts_with("error: "), "{}", unknown.stderr);
    assert!(unknown.stderr.contains("nope") && unknown.stderr.trim_end().ends_with("(40401)"), "{}", unknown.stderr);
    let consume_unknown = cli(&node, &["consume", "nope"]);
    assert_eq!(consume_unknown.code, 1, "{}", consume_unknown.stderr);

    // A port nobody listens on: bind one, then close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let url = format!("http://{closed}");
    let unreachable = cli_with(None, &["cluster", "status", "--url", &url], None);
    assert_eq!(unreachable.code, 3, "stderr: {}", unreachable.stderr);
    assert_eq!(unreachable.stderr, format!("error: cannot reach runnel at {url}: is it running?\n"));

    let usage = cli(&node, &["topic", "create"]);
    assert_eq!(usage.code, 2, "stderr: {}", usage.stderr);

    let status = cli(&node, &["cluster", "status", "--output", "json"]).json();
    assert_eq!(status["nodes"].as_array().expect("nodes").len(), 1);
    let table = cli(&node, &["cluster", "status"]).ok();
    assert!(table.contains("NODE") && table.contains(&node.kafka_addr.port().to_string()), "{table}");
}

#[test]
fn group_describe_shows_the_lag_of_a_consumer() {
    // Proves `group list` and `group describe` show a group's committed offset, log end offset
    // and lag per partition after a librdkafka member consumed and committed part of a topic.
    use rdkafka::consumer::{CommitMode, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};

    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "billing-in", "-p", "2"]).ok();
    let input: String = (0..10).map(|i| format!("r{i}\n")).collect();
    let produced = cli_with(Some(&node), &["produce", "billing-in", "-p", "0"], Some(input.into_bytes()));
    assert_eq!(produced.code, 0, "{}", produced.stderr);

    let consumer = support::group_consumer(&node, "billing", "billing-in");
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen < 4 && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a message");
            assert_eq!(message.partition(), 0);
            seen += 1;
        }
    }
    assert_eq!(seen, 4, "the member read 4 records");
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("billing-in", 0, Offset::Offset(4)).expect("tpl");
    consumer.commit(&offsets, CommitMode::Sync).expect("commit");

    let mut described = Value::Null;
    let stable = support::wait_until(Duration::from_secs(30), || {
        // Keeps the member's session alive; commits stay manual, so the committed offset stays 4.
        if let Some(message) = consumer.poll(Duration::from_millis(10)) {
            message.expect("a message");
        }
        described = cli(&node, &["group", "describe", "billing", "--output", "json"]).json();
        described["state"] == "Stable" && described["members"].as_array().is_some_and(|m| m.len() == 1)
    });
    assert!(stable, "group never showed one stable member: {described}");
    let partition0 = described["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .find(|o| o["topic"] == "billing-in" && o["partition"] == 0)
        .cloned()
        .expect("partition 0 offsets");
    assert_eq!(partition0["committed_offset"], 4);
    assert_eq!(partition0["log_end_offset"], 10);
    assert_eq!(partition0["lag"], 6);
    assert_eq!(described["total_lag"], 6);

    let table = cli(&node, &["group", "describe", "billing"]).ok();
    let row = table.lines().find(|l| l.starts_with("billing-in ") && l.split_whitespace().nth(1) == Some("0"));
    let cells: Vec<&str> =
        row.unwrap_or_else(|| panic!("no partition 0 row in:\n{table}")).split_whitespace().collect();
    assert_eq!(cells[2..5], ["4", "10", "6"], "CURRENT-OFFSET LOG-END-OFFSET LAG in:\n{table}");
    assert!(table.contains("Total lag:   6"), "{table}");

    let listed = cli(&node, &["group", "list", "--output", "json"]).json();
    let billing = listed["groups"].as_array().expect("groups").iter().find(|g| g["group_id"] == "billing").cloned();
    assert_eq!(billing.expect("billing listed")["total_lag"], 6);
    assert!(cli(&node, &["group", "list"]).ok().lines().any(|l| l.starts_with("billing ")));

    // A group with a member cannot be deleted; the API's reason reaches stderr.
    let refused = cli(&node, &["group", "delete", "billing"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.starts_with("error: "), "{}", refused.stderr);
    drop(consumer);
    let unknown = cli(&node, &["group", "describe", "no-such-group"]);
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("(40404)"), "{}", unknown.stderr);
}

#[test]
fn consume_in_a_group_commits_what_it_printed_and_resumes_there() {
    // Proves `consume --group` prints records, commits exactly what it printed (a -n limit
    // mid-batch included), leaves the group on exit, and a second run resumes at the commit.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "jobs", "-p", "1"]).ok();
    let input: String = (0..20).map(|i| format!("job {i}\n")).collect();
    let produced = cli_with(Some(&node), &["produce", "jobs"], Some(input.clone().into_bytes()));
    assert_eq!(produced.code, 0, "{}", produced.stderr);

    let first = cli(&node, &["consume", "jobs", "-g", "workers", "--from-beginning", "-n", "5"]).ok();
    assert_eq!(first, input.lines().take(5).map(|l| format!("{l}\n")).collect::<String>());
    let described = cli(&node, &["group", "describe", "workers", "--output", "json"]).json();
    assert_eq!(described["offsets"][0]["committed_offset"], 5, "{described}");
    assert_eq!(described["members"], serde_json::json!([]), "the instance left the group");

    let rest = cli(&node, &["consume", "jobs", "--group", "workers"]).ok();
    assert_eq!(rest, input.lines().skip(5).map(|l| format!("{l}\n")).collect::<String>());
    let described = cli(&node, &["group", "describe", "workers", "--output", "json"]).json();
    assert_eq!(described["total_lag"], 0, "{described}");
}

#[test]
fn follow_waits_for_records_produced_later() {
    // Proves `consume --follow` long-polls: it prints a record produced while it runs, keeps
    // waiting at the end instead of exiting, prints later ones too and exits once -n arrived.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "live", "-p", "2"]).ok();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["consume", "live", "--from-beginning", "-f", "-n", "3", "--url", &node.http_url()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the follower");
    let stdout = follower.stdout.take().expect("piped stdout");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let produce = |input: &[u8]| {
        let produced = cli_with(Some(&node), &["produce", "live"], Some(input.to_vec()));
        assert_eq!(produced.code, 0, "{}", produced.stderr);
    };
    produce(b"a\n");
    assert_eq!(lines.recv_timeout(Duration::from_secs(60)).expect("the first record"), "a");
    // It printed everything there was and is still running: it waits at the end.
    assert!(follower.try_wait().expect("try_wait").is_none(), "a follower does not stop at the end");
    produce(b"b\nc\n");
    let mut rest = vec![
        lines.recv_timeout(Duration::from_secs(60)).expect("a later record"),
        lines.recv_timeout(Duration::from_secs(60)).expect("a later record"),
    ];
    rest.sort();
    assert_eq!(rest, ["b", "c"]);
    let mut status = None;
    let exited = support::wait_until(Duration::from_secs(60), || {
        status = follower.try_wait().expect("try_wait");
        status.is_some()
    });
    if !exited {
        let _ = follower.kill();
        panic!("the follower did not exit after 3 records");
    }
    assert!(status.expect("status").success());
}

/// Building a guest from scratch (the SDK, wit-bindgen, LTO) on a loaded 2-core machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

#[test]
fn transform_commands_build_deploy_run_pause_and_delete_the_identity_example() {
    // Proves `transform build` compiles runnel-example-identity from the workspace root and
    // prints its .wasm, `transform deploy` runs it (records produced with `runnel produce` come
    // out on the output topic), describe/list show it running with lag 0, logs (also --follow)
    // show its lines, pause/resume lose nothing, delete removes it, and a missing topic is a
    // 404 with exit 1.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "clicks", "-p", "2"]).ok();
    cli(&node, &["topic", "create", "clicks-copy", "-p", "2"]).ok();

    // Its own target dir: the workspace's target/ is locked by the build running this test.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let build_args = ["transform", "build", "--package", "runnel-example-identity", "--target-dir", "target/wasm"];
    let built = cli_in(Some(&root), None, &build_args, None, BUILD_TIMEOUT).ok();
    let module = built.trim_end().to_string();
    assert_eq!(built.lines().count(), 1, "one path: {built}");
    assert!(module.ends_with("wasm32-wasip2/wasm/runnel_example_identity.wasm"), "{module}");
    assert!(Path::new(&module).is_file(), "{module} does not exist");

    let missing = cli(&node, &["transform", "deploy", "copy", "-m", &module, "--input", "nope", "-o", "clicks-copy"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert_eq!(missing.stderr, "error: topic 'nope' not found (40401)\n");

    let deploy =
        ["transform", "deploy", "copy", "--module", &module, "--input", "clicks", "--output-topic", "clicks-copy"];
    let deployed = cli(&node, &[&deploy[..], &["--param", "mode=copy", "--batch-records", "50"]].concat()).ok();
    assert!(deployed.starts_with("created transform 'copy': version 1, "), "{deployed}");
    assert!(deployed.contains("clicks → clicks-copy"), "{deployed}");

    let input: String = (0..20).map(|i| format!("click {i}\n")).collect();
    let produced = cli_with(Some(&node), &["produce", "clicks"], Some(input.clone().into_bytes()));
    assert_eq!(produced.code, 0, "{}", produced.stderr);
    let copied = |count: usize| {
        let mut out = String::new();
        let arrived = support::wait_until(Duration::from_secs(90), || {
            out = cli(&node, &["consume", "clicks-copy", "--from-beginning"]).ok();
            out.lines().count() >= count
        });
        assert!(arrived, "clicks-copy never held {count} records: {out}");
        let mut lines: Vec<String> = out.lines().map(String::from).collect();
        lines.sort();
        lines
    };
    let mut expected: Vec<String> = input.lines().map(String::from).collect();
    expected.sort();
    assert_eq!(copied(20), expected);

    let mut described = Value::Null;
    let caught_up = support::wait_until(Duration::from_secs(60), || {
        described = cli(&node, &["transform", "describe", "copy", "--output", "json"]).json();
        described["state"] == "running" && described["lag"] == 0
    });
    assert!(caught_up, "never running with lag 0: {described}");
    assert_eq!(described["parameters"], serde_json::json!({"mode": "copy"}));
    assert_eq!(described["batch_records_max"], 50);
    assert_eq!(
        (&described["delivery"], &described["commit_interval_ms"]),
        (&serde_json::json!("exactly_once"), &serde_json::json!(100))
    );
    let partitions = described["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 2);
    assert_eq!(partitions.iter().map(|p| p["records_in"].as_u64().expect("records_in")).sum::<u64>(), 20);
    let table = cli(&node, &["transform", "describe", "copy"]).ok();
    assert!(table.contains("PARTITION") && table.contains("LAST-ERROR"), "{table}");
    assert!(table.contains("\nDelivery:    exactly_once, commit every 100 ms\n"), "{table}");
    for partition in ["0", "1"] {
        let row = table.lines().find(|l| l.split_whitespace().next() == Some(partition) && l.contains(" running "));
        assert!(row.is_some(), "no running row for partition {partition}:\n{table}");
    }
    let listed = cli(&node, &["transform", "list", "--output", "json"]).json();
    assert_eq!(listed["transforms"][0]["name"], "copy");
    assert_eq!(listed["transforms"][0]["output_topics"], serde_json::json!(["clicks-copy"]));
    let table = cli(&node, &["transform", "list"]).ok();
    assert!(table.starts_with("TRANSFORM ") && table.lines().any(|l| l.starts_with("copy ")), "{table}");

    let logs = cli(&node, &["transform", "logs", "copy"]).ok();
    assert!(logs.contains("version 1 starting at offset"), "{logs}");
    let logs = cli(&node, &["transform", "logs", "copy", "-p", "1", "--output", "json"]).json();
    let lines = logs["lines"].as_array().expect("lines");
    assert!(!lines.is_empty() && lines.iter().all(|l| l["partition"] == 1), "{logs}");

    // A follower of partition 0 sees the line of the worker that resume starts.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["transform", "logs", "copy", "-f", "-p", "0", "--url", &node.http_url()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the log follower");
    let stdout = follower.stdout.take().expect("piped stdout");
    let (lines_tx, followed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    // The existing lines come first: the worker's producer init, then its start line.
    let first = followed.recv_timeout(Duration::from_secs(60)).expect("the follower prints the existing lines");
    assert!(first.contains(" p0 "), "{first}");
    let started = first.contains("starting at offset")
        || support::wait_until(Duration::from_secs(60), || {
            followed
                .recv_timeout(Duration::from_millis(500))
                .is_ok_and(|l| l.contains(" p0 ") && l.contains("starting at offset"))
        });
    assert!(started, "the follower never printed the existing start line");

    assert_eq!(cli(&node, &["transform", "pause", "copy"]).ok(), "paused transform 'copy'\n");
    let described = cli(&node, &["transform", "describe", "copy", "--output", "json"]).json();
    assert_eq!(described["state"], "paused", "{described}");
    let more: String = (20..30).map(|i| format!("click {i}\n")).collect();
    let produced = cli_with(Some(&node), &["produce", "clicks"], Some(more.clone().into_bytes()));
    assert_eq!(produced.code, 0, "{}", produced.stderr);
    assert_eq!(cli(&node, &["transform", "resume", "copy", "--output", "json"]).json()["resumed"], "copy");
    expected.extend(more.lines().map(String::from));
    expected.sort();
    assert_eq!(copied(30), expected, "records produced while paused are copied after resume");

    let restarted = support::wait_until(Duration::from_secs(60), || {
        followed.recv_timeout(Duration::from_millis(500)).is_ok_and(|l| l.contains("starting at offset"))
    });
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(restarted, "the follower never printed the resumed worker's start line");

    let at_least_once = ["--delivery", "at_least_once", "--commit-interval-ms", "250"];
    let redeployed = cli(&node, &[&deploy[..], &at_least_once].concat()).ok();
    assert!(redeployed.starts_with("redeployed transform 'copy': version 2, "), "{redeployed}");
    let described = cli(&node, &["transform", "describe", "copy", "--output", "json"]).json();
    assert_eq!(
        (&described["delivery"], &described["commit_interval_ms"]),
        (&serde_json::json!("at_least_once"), &serde_json::json!(250))
    );
    let refused = cli(&node, &[&deploy[..], &["--commit-interval-ms", "0"]].concat());
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("commit_interval_ms must be between 1 and 30000"), "{}", refused.stderr);

    assert_eq!(cli(&node, &["transform", "delete", "copy"]).ok(), "deleted transform 'copy'\n");
    let gone = cli(&node, &["transform", "describe", "copy"]);
    assert_eq!(gone.code, 1);
    assert!(gone.stderr.starts_with("error: ") && gone.stderr.contains("(40408)"), "{}", gone.stderr);
    assert_eq!(cli(&node, &["transform", "list", "--output", "json"]).json()["transforms"], serde_json::json!([]));
}

#[test]
fn validator_commands_deploy_the_schema_example_which_refuses_bad_lines() {
    // Proves `validator deploy` attaches the schema example (built with `transform build`) to a
    // topic, `runnel produce` then gets bad lines refused with the validator's reason while good
    // ones land, describe/list/logs show it, and delete detaches it; an unknown one is a 404.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "orders", "-p", "1"]).ok();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let build_args = ["transform", "build", "--package", "runnel-example-schema", "--target-dir", "target/wasm"];
    let module = cli_in(Some(&root), None, &build_args, None, BUILD_TIMEOUT).ok().trim_end().to_string();
    let deploy = ["validator", "deploy", "orders-schema", "--module", &module, "--topic", "orders"];
    let deployed = cli(&node, &[&deploy[..], &["--param", "required=id", "--on-failure", "reject"]].concat()).ok();
    assert!(deployed.starts_with("created validator 'orders-schema' on topic 'orders': version 1"), "{deployed}");

    let good = cli_with(Some(&node), &["produce", "orders"], Some(b"{\"id\":1}\n".to_vec()));
    assert_eq!(good.code, 0, "{}", good.stderr);
    let bad = cli_with(Some(&node), &["produce", "orders"], Some(b"{\"name\":\"x\"}\n".to_vec()));
    assert_eq!(bad.code, 1, "stdout {} stderr {}", bad.stdout, bad.stderr);
    assert!(bad.stderr.contains("missing required field `id`"), "{}", bad.stderr);
    assert_eq!(message_count(&node, "orders"), 1);

    let described = cli(&node, &["validator", "describe", "orders-schema", "--output", "json"]).json();
    assert_eq!(described["batches_rejected"], 1, "{described}");
    assert_eq!(described["parameters"]["required"], "id");
    let table = cli(&node, &["validator", "describe", "orders-schema"]).ok();
    assert!(table.contains("last rejection") && table.contains("missing required field"), "{table}");
    let listed = cli(&node, &["validator", "list"]).ok();
    assert!(listed.lines().nth(1).is_some_and(|l| l.starts_with("orders-schema") && l.contains("reject")), "{listed}");
    let logs = cli(&node, &["validator", "logs", "orders-schema"]).ok();
    assert!(logs.contains("version 1 loaded"), "{logs}");

    assert_eq!(cli(&node, &["validator", "delete", "orders-schema"]).ok(), "deleted validator 'orders-schema'\n");
    let unknown = cli(&node, &["validator", "describe", "orders-schema"]);
    assert_eq!(unknown.code, 1);
    assert_eq!(unknown.stderr, "error: validator 'orders-schema' not found (40409)\n");
    let unchecked = cli_with(Some(&node), &["produce", "orders"], Some(b"{\"name\":\"x\"}\n".to_vec()));
    assert_eq!(unchecked.code, 0, "{}", unchecked.stderr);
}

#[test]
fn assignor_commands_upload_the_sticky_range_example_which_a_consumer_selects() {
    // Proves `assignor deploy` uploads the sticky-range example (built with `transform build`),
    // a librdkafka member with group.remote.assignor=sticky-range is assigned by it, and
    // list/describe/logs show it next to the built-ins; delete removes it; unknown is a 404.
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    cli(&node, &["topic", "create", "ranges", "-p", "4"]).ok();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let build_args = ["transform", "build", "--package", "runnel-example-sticky-range", "--target-dir", "target/wasm"];
    let module = cli_in(Some(&root), None, &build_args, None, BUILD_TIMEOUT).ok().trim_end().to_string();
    let deployed =
        cli(&node, &["assignor", "deploy", "sticky-range", "--module", &module, "--call-timeout-ms", "500"]).ok();
    assert!(deployed.starts_with("created assignor 'sticky-range': version 1"), "{deployed}");

    let consumer: BaseConsumer = support::client_config(
        &node,
        &[("group.id", "ranged"), ("group.protocol", "consumer"), ("group.remote.assignor", "sticky-range")],
    )
    .create()
    .expect("consumer");
    consumer.subscribe(&["ranges"]).expect("subscribe");
    let assigned = support::wait_until(Duration::from_secs(60), || {
        consumer.poll(Duration::from_millis(100));
        consumer.assignment().is_ok_and(|a| a.count() == 4)
    });
    assert!(assigned, "the member was never assigned the 4 partitions");

    let described = cli(&node, &["assignor", "describe", "sticky-range", "--output", "json"]).json();
    assert_eq!(described["runs"], 1, "{described}");
    assert_eq!(described["call_timeout_ms"], 500, "{described}");
    let table = cli(&node, &["assignor", "describe", "sticky-range"]).ok();
    assert!(table.contains("1 computed, 0 failed") && table.contains("sticky-range"), "{table}");
    let listed = cli(&node, &["assignor", "list"]).ok();
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[1].starts_with("uniform") && lines[1].contains("built-in (default)"), "{listed}");
    assert!(lines.iter().any(|l| l.starts_with("sticky-range") && l.contains("wasm")), "{listed}");
    let logs = cli(&node, &["assignor", "logs", "sticky-range"]).ok();
    assert!(logs.contains("version 1 loaded"), "{logs}");
    let group = cli(&node, &["group", "describe", "ranged", "--output", "json"]).json();
    assert_eq!(group["assignor"]["name"], "sticky-range", "{group}");

    assert_eq!(cli(&node, &["assignor", "delete", "sticky-range"]).ok(), "deleted assignor 'sticky-range'\n");
    let unknown = cli(&node, &["assignor", "describe", "sticky-range"]);
    assert_eq!(unknown.code, 1);
    assert_eq!(unknown.stderr, "error: assignor 'sticky-range' not found (40410)\n");
}

#[test]
fn the_readme_walkthrough_of_a_stateful_transform_keeps_totals_per_customer() {
    // Proves the README's stateful walkthrough: the revenue example deployed with
    // --state-bytes-max, keyed orders from `runnel produce --key-separator`, running totals per
    // customer out, and `transform describe` naming the state and its changelog.
    let node = Runnel::start(&[]);
    cli(&node, &["topic", "create", "orders", "-p", "3"]).ok();
    cli(&node, &["topic", "create", "revenue", "-p", "3"]).ok();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let build_args = ["transform", "build", "--package", "runnel-example-revenue", "--target-dir", "target/wasm"];
    let module = cli_in(Some(&root), None, &build_args, None, BUILD_TIMEOUT).ok().trim_end().to_string();
    let deploy =
        ["transform", "deploy", "revenue", "--module", &module, "--input", "orders", "--output-topic", "revenue"];
    cli(&node, &[&deploy[..], &["--state-bytes-max", "65536"]].concat()).ok();
    for line in ["ann:{\"customer\":\"ann\",\"amount\":12.5}", "ann:{\"customer\":\"ann\",\"amount\":30}"] {
        let produced = cli_with(
            Some(&node),
            &["produce", "orders", "--key-separator", ":"],
            Some(format!("{line}\n").into_bytes()),
        );
        assert_eq!(produced.code, 0, "{}", produced.stderr);
    }
    let mut out = String::new();
    let arrived = support::wait_until(Duration::from_secs(90), || {
        out = cli(&node, &["consume", "revenue", "--from-beginning", "-n", "2"]).ok();
        out.lines().count() >= 2
    });
    assert!(arrived, "revenue never held 2 records: {out}");
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).expect("JSON totals");
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).expect("JSON totals");
    let mut totals = [first, last];
    totals.sort_by_key(|t| t["count"].as_u64());
    assert_eq!(totals[1], serde_json::json!({"key": "ann", "count": 2, "sum": 42.5}), "{out}");

    let mut described = String::new();
    let shown = support::wait_until(Duration::from_secs(60), || {
        described = cli(&node, &["transform", "describe", "revenue"]).ok();
        described.contains("in 1 keys")
    });
    assert!(shown, "describe never showed the state: {described}");
    assert!(
        described.contains("(at most 64.0 KiB per partition), changelog __runnel_transform_revenue_state"),
        "{described}"
    );
}
