//! What a produce-path validator costs: librdkafka produces the same JSON records to a topic
//! without a validator and to one checked by the schema example, round after round, against a
//! running node (Kafka on `--bootstrap`, HTTP on `--url` to deploy the validator).
//!
//! ```text
//! target/release/runnel serve --data-dir /tmp/vb        # 127.0.0.1:9092 and :8080
//! cargo run --release -p runnel-broker --example validator_bench
//! ```
//!
//! Options: `--bootstrap` (default 127.0.0.1:9092), `--url` (default http://127.0.0.1:8080),
//! `--records N` per run (default 1000000), `--size B` (value bytes, at least 64, default 100),
//! `--batch-records R` (librdkafka's `batch.num.messages`, default 1000: the records one batch
//! holds at most, hence per guest call), `--partitions P` (default 3), `--rounds K` (default 3,
//! alternating which topic goes first), `--wasm-dir DIR` (where `runnel_example_schema.wasm` is;
//! default: build it into target/wasm first).
//!
//! Prints records/s of each run, the best and the median of each topic and their ratios, and
//! from the node's `/metrics` the batches the validator judged, records per batch and the mean
//! time per call. Every record is valid: the cost measured is the check, not refusals. Only
//! loopback.
//!
//! On a small machine the client and the node compete for the same cores, so the loss measured
//! is partly the client's: `taskset -c 1 runnel serve ...` and `taskset -c 0 validator_bench ...`
//! give each its own core, as a client on another machine would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use serde_json::json;

#[path = "bench_support/flush.rs"]
mod flush;

struct Options {
    bootstrap: String,
    url: String,
    records: usize,
    size: usize,
    batch_records: usize,
    partitions: i32,
    rounds: usize,
    wasm_dir: Option<PathBuf>,
}

fn parse_args() -> Options {
    let mut options = Options {
        bootstrap: "127.0.0.1:9092".into(),
        url: "http://127.0.0.1:8080".into(),
        records: 1_000_000,
        size: 100,
        batch_records: 1_000,
        partitions: 3,
        rounds: 3,
        wasm_dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap" => options.bootstrap = value(),
            "--url" => options.url = value().trim_end_matches('/').to_string(),
            "--records" => options.records = value().parse().expect("--records N"),
            "--size" => options.size = value().parse().expect("--size B"),
            "--batch-records" => options.batch_records = value().parse().expect("--batch-records R"),
            "--partitions" => options.partitions = value().parse().expect("--partitions P"),
            "--rounds" => options.rounds = value().parse().expect("--rounds K"),
            "--wasm-dir" => options.wasm_dir = Some(PathBuf::from(value())),
            other => panic!("unknown option {other}"),
        }
    }
    assert!(options.size >= 64, "--size must be at least 64 (the JSON fields)");
    for address in [&options.bootstrap, &options.url] {
        let host = address.trim_start_matches("http://").split(':').next().unwrap_or("");
        assert!(host == "localhost" || host.starts_with("127."), "only loopback addresses: {address}");
    }
    options
}

fn schema_module(options: &Options) -> Vec<u8> {
    let dir = match &options.wasm_dir {
        Some(dir) => dir.clone(),
        None => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("broker/ has a parent").to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            command.current_dir(&root).args(["build", "--profile", "wasm", "--target", "wasm32-wasip2"]);
            command.args(["-p", "runnel-example-schema", "--target-dir"]).arg(root.join("target/wasm"));
            let status = command.status().expect("run cargo build for the schema example");
            assert!(status.success(), "building the schema example failed: {command:?}");
            root.join("target/wasm/wasm32-wasip2/wasm")
        }
    };
    let path = dir.join("runnel_example_schema.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `size` bytes of an order the schema accepts, numbered `n`.
fn order(n: usize, size: usize) -> Vec<u8> {
    let head =
        format!(r#"{{"id":"o-{n:09}","amount":{}.{:02},"customer":"c-{}","pad":""#, n % 10_000, n % 100, n % 997);
    let pad = size.saturating_sub(head.len() + 2);
    let mut value = head.into_bytes();
    value.extend(std::iter::repeat_n(b'x', pad));
    value.extend_from_slice(b"\"}");
    value
}

/// Produces `records` orders to `topic` (acks=all) and returns records/s from the first send to
/// the last acknowledgement; panics on any delivery error.
fn produce(options: &Options, topic: &str) -> f64 {
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.num.messages", options.batch_records.to_string())
        .set("batch.size", "4000000")
        .set("queue.buffering.max.messages", "2000000")
        .set("queue.buffering.max.kbytes", "2000000")
        .set("compression.type", "none")
        .create()
        .expect("producer");
    let values: Vec<Vec<u8>> = (0..options.records.min(100_000)).map(|n| order(n, options.size)).collect();
    let started = Instant::now();
    for i in 0..options.records {
        let mut record = BaseRecord::<(), [u8]>::to(topic)
            .payload(&values[i % values.len()])
            .partition((i % options.partitions as usize) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) => {
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "send: {e}"
                    );
                    record = back;
                    producer.poll(Duration::from_millis(1));
                }
            }
        }
    }
    flush::flush_now(&producer, Duration::from_secs(600));
    options.records as f64 / started.elapsed().as_secs_f64()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn best(rates: &[f64]) -> f64 {
    rates.iter().copied().fold(0.0, f64::max)
}

fn median(rates: &[f64]) -> f64 {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn main() {
    let options = parse_args();
    let module = schema_module(&options);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let http = reqwest::Client::new();
    let id = std::process::id();
    let (plain, checked, name) = (format!("vb-plain-{id}"), format!("vb-checked-{id}"), format!("vb-{id}"));

    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &options.bootstrap).create().expect("admin");
    let topics = [&plain, &checked].map(|t| NewTopic::new(t, options.partitions, TopicReplication::Fixed(1)));
    for result in runtime.block_on(admin.create_topics(&topics, &AdminOptions::new())).expect("create topics") {
        result.expect("create topic");
    }
    let config = json!({
        "topic": checked,
        "parameters": {"required": "id,amount,customer", "types": "id:string,amount:number,customer:string"},
        "module_base64": base64::engine::general_purpose::STANDARD.encode(&module),
    });
    let deployed = runtime.block_on(async {
        let answer = http.put(format!("{}/v1/validators/{name}", options.url)).json(&config).send().await?;
        let status = answer.status();
        Ok::<_, reqwest::Error>((status, answer.text().await?))
    });
    let (status, text) = deployed.expect("deploy the validator");
    assert!(status.is_success(), "deploy: {status} {text}");

    println!(
        "{} records of {} B per run, batches of up to {} records, {} partitions, acks=all",
        options.records, options.size, options.batch_records, options.partitions
    );
    // The node's counters may hold earlier runs: the figures below are this run's differences.
    let scrape = || {
        runtime
            .block_on(async { http.get(format!("{}/metrics", options.url)).send().await?.text().await })
            .expect("metrics")
    };
    let counters = |text: &str| {
        [
            metric(text, "runnel_validator_batches_total"),
            metric(text, "runnel_validator_call_seconds_count"),
            metric(text, "runnel_validator_call_seconds_sum"),
        ]
    };
    let before = counters(&scrape());
    let (mut plain_rates, mut checked_rates) = (Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let order: [(&str, bool); 2] =
            if round % 2 == 0 { [(&plain, false), (&checked, true)] } else { [(&checked, true), (&plain, false)] };
        for (topic, is_checked) in order {
            let rate = produce(&options, topic);
            println!(
                "round {}: {:<9} {:>12.0} records/s",
                round + 1,
                if is_checked { "validated" } else { "plain" },
                rate
            );
            if is_checked { &mut checked_rates } else { &mut plain_rates }.push(rate);
        }
    }
    let after = counters(&scrape());
    let [batches, calls, seconds] = [0, 1, 2].map(|i| after[i] - before[i]);
    let judged = (options.records * options.rounds) as f64;
    // Medians as well as bests: on a shared machine one slow run says little.
    for (label, pick) in [("best", best as fn(&[f64]) -> f64), ("median", median)] {
        let (plain, checked) = (pick(&plain_rates), pick(&checked_rates));
        println!(
            "{label}: plain {plain:.0} records/s, validated {checked:.0} records/s: {:.3}x ({:.1} % lost)",
            checked / plain,
            100.0 * (1.0 - checked / plain)
        );
    }
    println!(
        "validator: {batches:.0} batches judged, {:.0} records per batch, {:.1} µs per call (decode + guest), {:.2} µs per record",
        judged / batches.max(1.0),
        1e6 * seconds / calls.max(1.0),
        1e6 * seconds / judged
    );
    let _ = runtime.block_on(http.delete(format!("{}/v1/validators/{name}", options.url)).send());
    let _ = runtime.block_on(admin.delete_topics(&[&plain, &checked], &AdminOptions::new()));
}
