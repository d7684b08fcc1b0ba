//! Kafka's own CLI tools (Java; the jars `scripts/kafka-jars.sh` fetches from Maven Central, run
//! through `scripts/kafka-tool.sh`) and kcat against the real `runnel` binary. Where the jars were
//! never fetched each Kafka tool test is skipped (scripts/test.sh counts it so); once they are there (always under
//! `scripts/test.sh`) the tests are required.

#[path = "support/kafka_tools.rs"]
mod kafka_tools;
mod support;

use std::process::{Command, Stdio};

use kafka_tools::KafkaTools;
use support::Runnel;

/// The Kafka tools, or `None` after printing why the test skips.
fn kafka_cli() -> Option<KafkaTools> {
    match kafka_tools::kafka_tools() {
        Ok(tools) => Some(tools),
        Err(reason) => {
            kafka_tools::skip(reason);
            None
        }
    }
}

/// Runs the tool `args[0]` with the rest as its arguments; returns (success, stdout + stderr).
fn run(tools: &KafkaTools, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let output = tools.run(args[0], &args[1..], stdin);
    (output.success, output.text())
}

#[test]
fn kafka_topics_tool_creates_describes_lists_and_deletes() {
    // Proves kafka-topics.sh works unchanged: the README's create command, describe, list, delete.
    let Some(cli) = kafka_cli() else { return };
    let node = Runnel::start(&[]);
    let b = node.bootstrap();
    let (ok, out) = run(
        &cli,
        &[
            "topics",
            "--bootstrap-server",
            &b,
            "--create",
            "--topic",
            "orders",
            "--partitions",
            "12",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=604800000",
        ],
        None,
    );
    assert!(ok && out.contains("Created topic orders"), "{out}");
    let (ok, out) = run(&cli, &["topics", "--bootstrap-server", &b, "--describe", "--topic", "orders"], None);
    assert!(ok, "{out}");
    assert!(out.contains("PartitionCount: 12"), "{out}");
    assert!(out.contains("retention.ms=604800000"), "{out}");
    assert_eq!(out.matches("Leader: 1").count(), 12, "{out}");
    let (ok, out) = run(&cli, &["topics", "--bootstrap-server", &b, "--list"], None);
    assert!(ok && out.lines().any(|l| l.trim() == "orders"), "{out}");
    let (ok, out) = run(&cli, &["topics", "--bootstrap-server", &b, "--delete", "--topic", "orders"], None);
    assert!(ok, "{out}");
    let (ok, out) = run(&cli, &["topics", "--bootstrap-server", &b, "--list"], None);
    assert!(ok && !out.lines().any(|l| l.trim() == "orders"), "{out}");
}

#[test]
fn console_producer_and_consumer_round_trip() {
    // Proves the Java console producer (idempotent by default) and console consumer work.
    let Some(cli) = kafka_cli() else { return };
    let node = Runnel::start(&[]);
    let b = node.bootstrap();
    let (ok, out) =
        run(&cli, &["topics", "--bootstrap-server", &b, "--create", "--topic", "lines", "--partitions", "1"], None);
    assert!(ok, "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "console-producer",
            "--bootstrap-server",
            &b,
            "--topic",
            "lines",
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=:",
        ],
        Some("k1:v1\nk2:v2\nk3:v3\n"),
    );
    assert!(ok, "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "console-consumer",
            "--bootstrap-server",
            &b,
            "--topic",
            "lines",
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            "3",
            "--timeout-ms",
            "30000",
            "--formatter-property",
            "print.key=true",
        ],
        None,
    );
    assert!(ok && out.contains("Processed a total of 3 messages"), "{out}");
    for line in ["k1\tv1", "k2\tv2", "k3\tv3"] {
        assert!(out.contains(line), "missing {line:?} in {out}");
    }
}

#[test]
fn kcat_with_an_old_librdkafka_negotiates_and_round_trips() {
    // Proves Debian's kcat (librdkafka 2.0) negotiates versions and produces/consumes every codec.
    let kcat_ok = Command::new("kcat").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !kcat_ok.is_ok_and(|s| s.success()) {
        support::skip("kcat is not installed");
        return;
    }
    let node = Runnel::start(&[]);
    let b = node.bootstrap();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let mut child = Command::new("kcat")
            .args(["-b", &b, "-P", "-t", "kcat", "-z", codec, "-K", ":"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kcat");
        use std::io::Write;
        child.stdin.take().expect("piped").write_all(format!("{codec}:value-{codec}\n").as_bytes()).expect("stdin");
        let out = child.wait_with_output().expect("kcat producer");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new("kcat")
        .args(["-b", &b, "-C", "-t", "kcat", "-o", "beginning", "-e", "-f", "%o %k %s\n"])
        .output()
        .expect("kcat consumer");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected: Vec<String> = ["none", "gzip", "snappy", "lz4", "zstd"]
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{i} {c} value-{c}"))
        .collect();
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn kafka_consumer_groups_tool_lists_describes_resets_and_deletes() {
    // Proves kafka-consumer-groups.sh: --list, --describe (offsets, log end, lag match what was
    // produced and committed), --reset-offsets --to-earliest --execute, --delete.
    let Some(cli) = kafka_cli() else { return };
    let node = Runnel::start(&[]);
    let b = node.bootstrap();
    let (ok, out) =
        run(&cli, &["topics", "--bootstrap-server", &b, "--create", "--topic", "ledger", "--partitions", "1"], None);
    assert!(ok, "{out}");
    let (ok, out) =
        run(&cli, &["console-producer", "--bootstrap-server", &b, "--topic", "ledger"], Some("r1\nr2\nr3\nr4\nr5\n"));
    assert!(ok, "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "console-consumer",
            "--bootstrap-server",
            &b,
            "--topic",
            "ledger",
            "--group",
            "billing",
            "--from-beginning",
            "--max-messages",
            "3",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert!(ok && out.contains("Processed a total of 3 messages"), "{out}");
    let (ok, out) = run(&cli, &["consumer-groups", "--bootstrap-server", &b, "--list"], None);
    assert!(ok && out.lines().any(|l| l.trim() == "billing"), "{out}");
    // The console consumer commits what it consumed: 3 of 5 (it may have fetched more, but it
    // commits the position after the records it processed).
    let describe = |cli: &KafkaTools| {
        let (ok, out) =
            run(cli, &["consumer-groups", "--bootstrap-server", &b, "--describe", "--group", "billing"], None);
        assert!(ok, "{out}");
        let row =
            out.lines().find(|l| l.starts_with("billing ")).unwrap_or_else(|| panic!("no row in {out}")).to_string();
        let cols: Vec<String> = row.split_whitespace().map(str::to_string).collect();
        // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
        (cols[3].clone(), cols[4].clone(), cols[5].clone())
    };
    let (current, end, lag) = describe(&cli);
    assert_eq!(end, "5");
    let current: i64 = current.parse().expect("a committed offset");
    assert!((3..=5).contains(&current), "committed {current}");
    assert_eq!(lag.parse::<i64>().unwrap(), 5 - current);
    let (ok, out) = run(
        &cli,
        &[
            "consumer-groups",
            "--bootstrap-server",
            &b,
            "--group",
            "billing",
            "--reset-offsets",
            "--to-earliest",
            "--topic",
            "ledger",
            "--execute",
        ],
        None,
    );
    assert!(ok, "{out}");
    assert_eq!(describe(&cli), ("0".to_string(), "5".to_string(), "5".to_string()));
    let (ok, out) = run(&cli, &["consumer-groups", "--bootstrap-server", &b, "--delete", "--group", "billing"], None);
    assert!(ok && out.contains("successful"), "{out}");
    let (ok, out) = run(&cli, &["consumer-groups", "--bootstrap-server", &b, "--list"], None);
    assert!(ok && !out.lines().any(|l| l.trim() == "billing"), "{out}");
}

#[test]
fn java_transactional_producer_read_committed_consumer_and_kafka_transactions_tool() {
    // Proves transactions with Kafka's Java client and tools (issue 12): ProducerPerformance's
    // transactional producer commits every 100 ms on transaction version 2 (KIP-890: epoch
    // bumped by its commits) and a read_committed console consumer reads every record; `kafka-transactions.sh` lists and describes a librdkafka transaction left
    // open, describes the partition's producers, and aborts it, after which a read_committed
    // reader gets past it and never sees its records.
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let Some(cli) = kafka_cli() else { return };
    let node = Runnel::start(&[]);
    let b = node.bootstrap();
    for topic in ["java-txn", "java-txn-hang"] {
        let (ok, out) =
            run(&cli, &["topics", "--bootstrap-server", &b, "--create", "--topic", topic, "--partitions", "1"], None);
        assert!(ok, "{out}");
    }
    let props = format!("bootstrap.servers={b}");
    let (ok, out) = run(
        &cli,
        &[
            "producer-perf-test",
            "--topic",
            "java-txn",
            "--num-records",
            "2000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--transactional-id",
            "java-perf",
            "--transaction-duration-ms",
            "100",
            "--producer-props",
            &props,
        ],
        None,
    );
    assert!(ok && out.contains("2000 records sent"), "{out}");
    let read_committed = |topic: &str, max: &str| {
        run(
            &cli,
            &[
                "console-consumer",
                "--bootstrap-server",
                &b,
                "--topic",
                topic,
                "--partition",
                "0",
                "--offset",
                "earliest",
                "--isolation-level",
                "read_committed",
                "--max-messages",
                max,
                "--timeout-ms",
                "15000",
            ],
            None,
        )
    };
    let (_, out) = read_committed("java-txn", "2000");
    assert!(out.contains("Processed a total of 2000 messages"), "{out}");
    // The Java 4.x client took transaction version 2 from ApiVersions: each of its commits
    // bumped the epoch (with version 1 it would still be 0).
    let perf = support::HttpApi::new(&node).get("/v1/transactions/java-perf").json;
    assert!(perf["producer_epoch"].as_i64().is_some_and(|e| e >= 1), "{perf}");

    // A transaction left open by librdkafka.
    let hanging: BaseProducer =
        support::client_config(&node, &[("transactional.id", "hanging-txn"), ("transaction.timeout.ms", "300000")])
            .create()
            .expect("producer");
    let timeout = std::time::Duration::from_secs(30);
    hanging.init_transactions(timeout).expect("init");
    hanging.begin_transaction().expect("begin");
    for i in 0..5 {
        hanging
            .send(BaseRecord::<(), str>::to("java-txn-hang").partition(0).payload(&format!("hang-{i}")))
            .expect("send");
    }
    hanging.flush(timeout).expect("flush");
    let (ok, out) = run(&cli, &["transactions", "--bootstrap-server", &b, "list"], None);
    assert!(ok && out.contains("hanging-txn") && out.contains("Ongoing") && out.contains("java-perf"), "{out}");
    let (ok, out) =
        run(&cli, &["transactions", "--bootstrap-server", &b, "describe", "--transactional-id", "hanging-txn"], None);
    assert!(ok && out.contains("Ongoing") && out.contains("java-txn-hang-0"), "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "transactions",
            "--bootstrap-server",
            &b,
            "describe-producers",
            "--topic",
            "java-txn-hang",
            "--partition",
            "0",
        ],
        None,
    );
    assert!(ok && out.contains("ProducerId"), "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "transactions",
            "--bootstrap-server",
            &b,
            "abort",
            "--topic",
            "java-txn-hang",
            "--partition",
            "0",
            "--start-offset",
            "0",
        ],
        None,
    );
    assert!(ok, "abort: {out}");
    // Past the aborted transaction: a plain record after it is read_committed, the aborted ones
    // never are.
    let plain: BaseProducer = support::client_config(&node, &[]).create().expect("producer");
    plain.send(BaseRecord::<(), str>::to("java-txn-hang").partition(0).payload("after")).expect("send");
    plain.flush(timeout).expect("flush");
    let (_, out) = read_committed("java-txn-hang", "1");
    assert!(out.contains("after") && !out.contains("hang-"), "{out}");
}

#[test]
fn java_consumer_on_the_consumer_group_protocol_and_kafka_consumer_groups_tool() {
    // Proves KIP-848 with Kafka's Java 4.x client: the console consumer with
    // group.protocol=consumer joins through ConsumerGroupHeartbeat, gets all three partitions
    // from the server assignor, reads every record and commits (OffsetCommit v9 with its member
    // epoch); `kafka-consumer-groups.sh` lists the group as a consumer-type group and describes
    // its committed offsets (ConsumerGroupDescribe, then OffsetFetch).
    let Some(cli) = kafka_cli() else { return };
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let b = node.bootstrap();
    let (ok, out) =
        run(&cli, &["topics", "--bootstrap-server", &b, "--create", "--topic", "kip848", "--partitions", "3"], None);
    assert!(ok, "{out}");
    let records: String = (0..300).map(|i| format!("record-{i}\n")).collect();
    let (ok, out) = run(&cli, &["console-producer", "--bootstrap-server", &b, "--topic", "kip848"], Some(&records));
    assert!(ok, "{out}");
    let (ok, out) = run(
        &cli,
        &[
            "console-consumer",
            "--bootstrap-server",
            &b,
            "--topic",
            "kip848",
            "--group",
            "java-848",
            "--consumer-property",
            "group.protocol=consumer",
            "--from-beginning",
            "--max-messages",
            "300",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert!(ok && out.contains("Processed a total of 300 messages"), "{out}");
    let (ok, out) = run(&cli, &["consumer-groups", "--bootstrap-server", &b, "--list", "--type", "consumer"], None);
    assert!(ok && out.lines().any(|l| l.split_whitespace().next() == Some("java-848")), "{out}");
    assert!(out.contains("Consumer") || out.contains("consumer"), "{out}");
    let (ok, out) =
        run(&cli, &["consumer-groups", "--bootstrap-server", &b, "--describe", "--group", "java-848"], None);
    assert!(ok, "{out}");
    // One row per partition: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    let committed: i64 = out
        .lines()
        .filter(|l| l.starts_with("java-848"))
        .filter_map(|l| l.split_whitespace().nth(3).and_then(|o| o.parse::<i64>().ok()))
        .sum();
    assert_eq!(committed, 300, "{out}");
}
