//! End-to-end transform benchmark against a running node, over the HTTP API only.
//!
//! ```text
//! target/release/runnel serve --data-dir /tmp/tb --kafka-listen 127.0.0.1:0 \
//!     --controller-listen 127.0.0.1:0 --http-listen 127.0.0.1:8080      # prints READY ... http=ADDR
//! cargo run --release -p runnel-broker --example transform_bench -- --url http://127.0.0.1:8080
//! cargo run --release -p runnel-broker --example transform_bench -- --url http://127.0.0.1:8080 --size 1024
//! ```
//!
//! Options: `--records N` (default 1000000), `--size B` (value bytes, default 100), `--batch R`
//! (records per produce request, default 500), `--connections C` (concurrent produce requests,
//! default 8), `--wasm-dir DIR` (built components; default: run `cargo build --profile wasm
//! --target wasm32-wasip2 -p runnel-example-identity -p runnel-example-revenue -p runnel-guest-big --target-dir
//! target/wasm` first), `--timeout S` (deadline of each wait, default 600), `--delivery D`
//! (`exactly_once`, the default, or `at_least_once`: the transforms' delivery), `--keep` (leave
//! the topics and transforms in place), `--transform T` (`identity`, the default, or `revenue`:
//! the stateful example, a running count and sum per customer kept in its keyed state, written
//! to its changelog in each transaction; implies `--json`), `--json` (values are JSON orders of
//! about `--size` bytes, customers `c0`..`c<batch-1>`, instead of `x` bytes: the same input for
//! both transforms).
//!
//! `--restore-keys K` adds section 3, `--latency-seconds S` section 4 (both skipped by default;
//! section 4 also takes `--latency-rate R`, default 10000 records/s, and `--bootstrap ADDR`,
//! the node's Kafka listener, default 127.0.0.1:9092).
//!
//! Runs, on topics named after this process id:
//! 1. throughput: produces N records (v2 binary batches) to `tb-in-<pid>` (1 partition, so one
//!    transform worker, one core), then deploys the identity transform with `start: earliest`
//!    to `tb-out-<pid>` and polls every 10 ms until the transform's committed position is N
//!    (`GET /v1/groups/__runnel_transform_<name>`: exactly-once, the outputs are committed then;
//!    at-least-once, appended) and the output topic holds at least N records (its high
//!    watermark; exactly-once it counts the commit markers too). Prints records/s from the start
//!    of the PUT (deploy included) and from the first output on. Goal: at least 1 M records/s.
//! 2. deploy-to-first-output: a fresh input topic holding 1 record and a fresh output topic; PUT
//!    of the 2 MiB `runnel-guest-big` component (JSON with `module_base64`), timed from the start
//!    of the PUT until the output topic holds the record. Cold: the module's bytes are new to
//!    the node (a custom section with a nonce is appended, so the node compiles it even if an
//!    earlier run cached the plain module); warm: the same bytes again under a new transform
//!    name, on new topics (the node loads its cached artifact). Goal: under 1 s.
//! 3. state restore (`--restore-keys K`): one JSON order for each of K customers into a fresh
//!    topic, the revenue example deployed (`state_bytes_max` 1 GiB) until it committed them all
//!    (K keys of state, K changelog records), then deployed again: the restarted worker
//!    restores its state from the changelog before it reads input, and logs how long that took.
//!    Prints that time (and the wall time from the second PUT to the log line). Goal: 1 M keys
//!    in at most 5 s.
//! 4. latency (`--latency-seconds S`): the identity transform (`--delivery`, default commit
//!    interval) on a fresh topic pair; a librdkafka producer (linger.ms 5) writes R records/s for
//!    S seconds while a `read_committed` librdkafka consumer (default fetch settings) reads the
//!    output. A record's latency is the time from its produce call (its CreateTime, which the
//!    identity transform keeps) to the consumer receiving it: input append, transform, commit
//!    and fetch, plus the client's send. The first 2 s are warm-up (worker start) and not
//!    counted. Prints p50/p99/max. Goal: p99 <= 2x the commit interval (100 ms).
//!
//! The bench process shares the machine with the node (its produce loop and 10 ms polls are
//! light next to the transform): run both on an otherwise quiet machine. Only loopback URLs
//! are accepted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use serde_json::{json, Value};

const IDENTITY: &str = "runnel-example-identity";
const REVENUE: &str = "runnel-example-revenue";
const BIG: &str = "runnel-guest-big";
const POLL: Duration = Duration::from_millis(10);

/// Section 4: paced produce and a read_committed consumer, with librdkafka.
mod latency {
    use std::time::{Duration, Instant, SystemTime};

    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Message, Timestamp};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    use rdkafka::{Offset, TopicPartitionList};

    /// Not counted: the worker starts meanwhile.
    const WARM_UP: Duration = Duration::from_secs(2);

    fn now_ms() -> i64 {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }

    /// Produces `rate` records/s to `input` for `seconds` (after the warm-up) and returns the
    /// latency in ms of every counted record read from `output`.
    pub fn measure(bootstrap: &str, input: &str, output: &str, rate: u64, seconds: u64) -> Vec<i64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", format!("{output}-reader"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(output, 0, Offset::Beginning).expect("assignment");
        consumer.assign(&assignment).expect("assign");
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            // The default of librdkafka and Kafka 4: with 0, every record is its own acks=all
            // request, and a connection's requests are served one after another (as Kafka
            // does), so on a replicated cluster the producer falls seconds behind at 10k/s
            // (Kafka 4.4 on 3 nodes too: p50 7 s).
            .set("linger.ms", "5")
            .set("acks", "all")
            .create()
            .expect("producer");
        let input = input.to_string();
        let total = rate * (seconds + WARM_UP.as_secs());
        let counted_from = now_ms() + WARM_UP.as_millis() as i64;
        let pacer = std::thread::spawn(move || {
            let start = Instant::now();
            let payload = [b'x'; 100];
            for i in 0..total {
                // Record i is due at i / rate seconds.
                let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait); // pacing the load, not synchronising
                }
                let mut record = BaseRecord::<(), [u8]>::to(&input).payload(&payload[..]).timestamp(now_ms());
                while let Err((_, back)) = producer.send(record) {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
        });
        let mut latencies = Vec::new();
        let mut seen = 0u64;
        let deadline = Instant::now() + Duration::from_secs(seconds + WARM_UP.as_secs() + 60);
        while seen < total {
            assert!(Instant::now() < deadline, "read {seen} of {total} outputs by the deadline");
            let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
            let message = message.expect("consume");
            let received = now_ms();
            seen += 1;
            if let Timestamp::CreateTime(created) = message.timestamp() {
                if created >= counted_from {
                    latencies.push(received - created);
                }
            }
        }
        pacer.join().expect("producer thread");
        assert!(!latencies.is_empty(), "no record counted");
        latencies
    }
}

struct Options {
    url: String,
    records: usize,
    size: usize,
    batch: usize,
    connections: usize,
    /// `identity` or `revenue`.
    transform: String,
    json: bool,
    wasm_dir: Option<PathBuf>,
    timeout: Duration,
    delivery: String,
    keep: bool,
    /// Keys of the state restore measure (section 3); 0 skips it.
    restore_keys: usize,
    /// Seconds of the latency measure (section 4); 0 skips it.
    latency_seconds: u64,
    /// Records per second produced during the latency measure.
    latency_rate: u64,
    /// The node's Kafka listener (section 4).
    bootstrap: String,
}

fn parse_args() -> Options {
    let mut options = Options {
        url: "http://127.0.0.1:8080".into(),
        records: 1_000_000,
        size: 100,
        batch: 500,
        connections: 8,
        transform: "identity".into(),
        json: false,
        wasm_dir: None,
        timeout: Duration::from_secs(600),
        delivery: "exactly_once".into(),
        keep: false,
        restore_keys: 0,
        latency_seconds: 0,
        latency_rate: 10_000,
        bootstrap: "127.0.0.1:9092".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--keep" {
            options.keep = true;
            continue;
        }
        if flag == "--json" {
            options.json = true;
            continue;
        }
        let value = args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => options.url = value.trim_end_matches('/').to_string(),
            "--records" => options.records = value.parse().expect("--records N"),
            "--size" => options.size = value.parse().expect("--size B"),
            "--batch" => options.batch = value.parse().expect("--batch R"),
            "--connections" => options.connections = value.parse().expect("--connections C"),
            "--wasm-dir" => options.wasm_dir = Some(PathBuf::from(value)),
            "--timeout" => options.timeout = Duration::from_secs(value.parse().expect("--timeout S")),
            "--delivery" => options.delivery = value,
            "--restore-keys" => options.restore_keys = value.parse().expect("--restore-keys K"),
            "--latency-seconds" => options.latency_seconds = value.parse().expect("--latency-seconds S"),
            "--latency-rate" => options.latency_rate = value.parse().expect("--latency-rate R"),
            "--bootstrap" => options.bootstrap = value,
            "--transform" => {
                assert!(["identity", "revenue"].contains(&value.as_str()), "--transform identity|revenue");
                options.json |= value == "revenue";
                options.transform = value;
            }
            other => panic!("unknown flag {other} (see the header of broker/examples/transform_bench.rs)"),
        }
    }
    assert!(
        options.url.starts_with("http://127.") || options.url.starts_with("http://localhost"),
        "only loopback URLs"
    );
    assert!(options.records > 0 && options.batch > 0 && options.connections > 0);
    options
}

/// The components' bytes (the transform, the big guest, the revenue and identity examples), built first
/// unless `--wasm-dir` names where they are.
fn components(options: &Options) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let dir = match &options.wasm_dir {
        Some(dir) => dir.clone(),
        None => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("broker/ has a parent").to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            command.current_dir(&root).args(["build", "--profile", "wasm", "--target", "wasm32-wasip2"]);
            command.args(["-p", IDENTITY, "-p", REVENUE, "-p", BIG, "--target-dir"]).arg(root.join("target/wasm"));
            let status = command.status().expect("run cargo build for the guests");
            assert!(status.success(), "building the guests failed: {command:?}");
            root.join("target/wasm/wasm32-wasip2/wasm")
        }
    };
    let read = |name: &str| {
        let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
        std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    let transform = if options.transform == "revenue" { REVENUE } else { IDENTITY };
    (read(transform), read(BIG), read(REVENUE), read(IDENTITY))
}

/// Appends a custom section (ignored by every tool) holding `nonce`: other bytes, so another
/// SHA-256 and a cache miss on the node, same behaviour.
fn with_nonce(module: &[u8], nonce: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"runnel-bench-nonce";
    let mut payload = Vec::new();
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(nonce.as_bytes());
    let mut out = module.to_vec();
    out.push(0); // custom section id
    leb128(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

struct Api {
    client: reqwest::Client,
    url: String,
    delivery: String,
}

impl Api {
    async fn create_topic(&self, name: &str, partitions: u32) {
        let answer = self
            .client
            .post(format!("{}/v1/topics", self.url))
            .json(&json!({"name": name, "partitions": partitions}))
            .send()
            .await
            .expect("create topic");
        let status = answer.status();
        assert!(status.is_success(), "create {name}: {status} {}", answer.text().await.unwrap_or_default());
    }

    /// The leader of partition 0 of `topic` (-1: none).
    async fn leader(&self, topic: &str) -> i64 {
        let Ok(answer) = self.client.get(format!("{}/v1/topics/{topic}", self.url)).send().await else { return -1 };
        let detail: Value = answer.json().await.unwrap_or_default();
        detail["partitions"][0]["leader"].as_i64().unwrap_or(-1)
    }

    /// Sum over partitions of high watermark minus log start offset.
    async fn messages(&self, topic: &str) -> i64 {
        let detail: Value = self
            .client
            .get(format!("{}/v1/topics/{topic}", self.url))
            .send()
            .await
            .expect("describe topic")
            .json()
            .await
            .expect("topic JSON");
        let partitions = detail["partitions"].as_array().unwrap_or_else(|| panic!("no partitions in {detail}"));
        partitions
            .iter()
            .map(|p| p["high_watermark"].as_i64().unwrap_or(0) - p["log_start_offset"].as_i64().unwrap_or(0))
            .sum()
    }

    /// Produces `records` values of `size` bytes with `connections` concurrent v2 requests:
    /// `x` bytes, or (`json`) JSON orders padded to about `size` bytes, the i-th record of a
    /// request for customer `c<i>`. The two bodies are encoded once.
    async fn produce(
        &self,
        topic: &str,
        records: usize,
        (size, json): (usize, bool),
        batch: usize,
        connections: usize,
    ) -> f64 {
        let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let value = |i: usize| -> String {
            if !json {
                return encode(&vec![b'x'; size]);
            }
            let order = json!({"customer": format!("c{i}"), "amount": 1, "pad": ""}).to_string();
            let pad = "p".repeat(size.saturating_sub(order.len()));
            encode(json!({"customer": format!("c{i}"), "amount": 1, "pad": pad}).to_string().as_bytes())
        };
        let body = |count: usize| -> bytes::Bytes {
            let records: Vec<Value> = (0..count).map(|i| json!({"value": value(i)})).collect();
            serde_json::to_vec(&json!({"records": records})).expect("json").into()
        };
        let (full, tail) = (body(batch), body(records % batch));
        let requests = records.div_ceil(batch);
        let start = Instant::now();
        self.post_records(topic, requests, connections, move |i| {
            if i + 1 == requests && records % batch != 0 {
                tail.clone()
            } else {
                full.clone()
            }
        })
        .await;
        records as f64 / start.elapsed().as_secs_f64()
    }

    /// Produces one JSON order for each of `keys` customers (`c0`, `c1`, ...), `batch` per
    /// request over `connections` concurrent requests.
    async fn produce_keys(&self, topic: &str, keys: usize, batch: usize, connections: usize) {
        self.post_records(topic, keys.div_ceil(batch), connections, move |i| {
            let records: Vec<Value> = (i * batch..((i + 1) * batch).min(keys))
                .map(|k| {
                    let order = json!({"customer": format!("c{k}"), "amount": 1}).to_string();
                    json!({"value": base64::engine::general_purpose::STANDARD.encode(order)})
                })
                .collect();
            serde_json::to_vec(&json!({"records": records})).expect("json").into()
        })
        .await;
    }

    /// POSTs `requests` v2 binary produce requests to `topic`, `connections` at a time; request
    /// `i`'s body is `body(i)`. Panics on any refusal.
    async fn post_records(
        &self,
        topic: &str,
        requests: usize,
        connections: usize,
        body: impl Fn(usize) -> bytes::Bytes + Send + Sync + 'static,
    ) {
        let path = format!("{}/topics/{topic}", self.url);
        let (next, body) = (Arc::new(AtomicUsize::new(0)), Arc::new(body));
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let (client, path, next, body) = (self.client.clone(), path.clone(), next.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break;
                    }
                    let answer = client
                        .post(&path)
                        .header("content-type", "application/vnd.kafka.binary.v2+json")
                        .body(body(i))
                        .send()
                        .await
                        .expect("produce");
                    let status = answer.status();
                    assert!(status.is_success(), "produce: {status} {}", answer.text().await.unwrap_or_default());
                    let _ = answer.bytes().await;
                }
            }));
        }
        for task in tasks {
            task.await.expect("produce task");
        }
    }

    /// The messages of `transform`'s log lines on this node after line `after`, with their seq.
    async fn log_lines(&self, transform: &str, after: u64) -> Vec<(u64, String)> {
        let url = format!("{}/v1/transforms/{transform}/logs?after={after}&limit=1000", self.url);
        let Ok(answer) = self.client.get(url).send().await else { return Vec::new() };
        let logs: Value = answer.json().await.unwrap_or_default();
        logs["lines"]
            .as_array()
            .map(|lines| {
                lines
                    .iter()
                    .map(|l| (l["seq"].as_u64().unwrap_or(0), l["message"].as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Polls `transform`'s log after line `after` until a "state restored" line appears; its
    /// seq and the milliseconds the worker reported.
    async fn wait_restored(&self, transform: &str, after: u64, deadline: Instant) -> (u64, u64) {
        loop {
            for (seq, message) in self.log_lines(transform, after).await {
                if let Some(rest) = message.strip_prefix("state restored") {
                    let ms = rest
                        .rsplit_once(" in ")
                        .and_then(|(_, t)| t.trim_end_matches(" ms").parse().ok())
                        .unwrap_or_else(|| panic!("no time in '{message}'"));
                    return (seq, ms);
                }
            }
            assert!(Instant::now() < deadline, "{transform}: no 'state restored' line after line {after}");
            tokio::time::sleep(POLL).await;
        }
    }

    async fn deploy(&self, name: &str, module: &[u8], input: &str, output: &str) {
        self.deploy_with(name, module, input, output, json!({})).await
    }

    /// [`Api::deploy`] with more deploy settings (`extra`'s fields).
    async fn deploy_with(&self, name: &str, module: &[u8], input: &str, output: &str, extra: Value) {
        let mut body = json!({
            "input_topic": input,
            "output_topics": [output],
            "start": "earliest",
            "delivery": self.delivery,
            "module_base64": base64::engine::general_purpose::STANDARD.encode(module),
        });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let answer =
            self.client.put(format!("{}/v1/transforms/{name}", self.url)).json(&body).send().await.expect("deploy");
        let status = answer.status();
        assert!(status.is_success(), "deploy {name}: {status} {}", answer.text().await.unwrap_or_default());
    }

    async fn transform_state(&self, name: &str) -> String {
        match self.client.get(format!("{}/v1/transforms/{name}", self.url)).send().await {
            Ok(answer) => answer.text().await.unwrap_or_default(),
            Err(e) => format!("(GET failed: {e})"),
        }
    }

    /// The committed position of `transform` in its input's partition 0 (-1: none).
    async fn committed(&self, transform: &str) -> i64 {
        let url = format!("{}/v1/groups/__runnel_transform_{transform}", self.url);
        let Ok(answer) = self.client.get(url).send().await else { return -1 };
        let detail: Value = answer.json().await.unwrap_or_default();
        let offsets = detail["offsets"].as_array().cloned().unwrap_or_default();
        offsets.iter().find(|o| o["partition"] == 0).and_then(|o| o["committed_offset"].as_i64()).unwrap_or(-1)
    }

    /// Polls every [`POLL`] until `transform` committed position `count` and `topic` holds at
    /// least `count` records; returns when the topic first held a record and when both held.
    async fn wait_for(&self, topic: &str, count: i64, transform: &str, deadline: Instant) -> (Instant, Instant) {
        let mut first = None;
        loop {
            let messages = self.messages(topic).await;
            let now = Instant::now();
            if messages > 0 && first.is_none() {
                first = Some(now);
            }
            if messages >= count && self.committed(transform).await == count {
                if self.delivery == "at_least_once" {
                    assert_eq!(messages, count, "{topic} holds more records than were produced");
                }
                return (first.unwrap_or(now), Instant::now());
            }
            assert!(
                now < deadline,
                "{topic} holds {messages} of {count} records at the deadline; transform: {}",
                self.transform_state(transform).await
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn delete(&self, path: &str) {
        let _ = self.client.delete(format!("{}{path}", self.url)).send().await;
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// Deploys `module` on a fresh topic pair whose input holds one record; seconds from the start
/// of the PUT to the PUT's answer and to the record in the output.
async fn first_output(api: &Api, name: &str, module: &[u8], deadline: Duration) -> (f64, f64) {
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    api.create_topic(&input, 1).await;
    api.create_topic(&output, 1).await;
    api.produce(&input, 1, (100, false), 1, 1).await;
    let started = Instant::now();
    api.deploy(name, module, &input, &output).await;
    let answered = started.elapsed().as_secs_f64();
    let (_, done) = api.wait_for(&output, 1, name, started + deadline).await;
    (answered, (done - started).as_secs_f64())
}

#[tokio::main]
async fn main() {
    let options = parse_args();
    let (module, big, revenue, identity) = components(&options);
    let api = Api {
        client: reqwest::Client::builder().build().expect("client"),
        url: options.url.clone(),
        delivery: options.delivery.clone(),
    };
    let pid = std::process::id();
    let n = options.records;

    let (input, output, name) =
        (format!("tb-in-{pid}"), format!("tb-out-{pid}"), format!("tb-{}-{pid}", options.transform));
    api.create_topic(&input, 1).await;
    api.create_topic(&output, 1).await;
    let produce_rate = api.produce(&input, n, (options.size, options.json), options.batch, options.connections).await;
    // On a cluster the high watermark follows the followers' fetches.
    let deadline = Instant::now() + options.timeout;
    loop {
        let messages = api.messages(&input).await;
        if messages == n as i64 {
            break;
        }
        assert!(messages < n as i64 && Instant::now() < deadline, "{input} holds {messages} of {n} produced");
        tokio::time::sleep(POLL).await;
    }
    println!(
        "produced {n} records of {} B to {input} (1 partition): {:.0} records/s over HTTP; leaders: input node {}, output node {}",
        options.size,
        produce_rate,
        api.leader(&input).await,
        api.leader(&output).await
    );

    let shape = if options.json { "JSON orders" } else { "bytes" };
    println!("\n1. {} transform end to end, {}, {shape} (goal: >= 1 M records/s)", options.transform, options.delivery);
    let started = Instant::now();
    api.deploy(&name, &module, &input, &output).await;
    let deployed = started.elapsed();
    let (first, done) = api.wait_for(&output, n as i64, &name, started + options.timeout).await;
    let total = (done - started).as_secs_f64();
    let steady = (done - first).as_secs_f64();
    let rate = n as f64 / total;
    println!(
        "   {n} x {} B: {:.2} s from the start of the PUT (answered in {:.0} ms, first output after {:.0} ms) \
         = {:.3} M records/s; {:.3} M records/s from the first output on; {:.2}x goal: {}",
        options.size,
        total,
        deployed.as_secs_f64() * 1000.0,
        (first - started).as_secs_f64() * 1000.0,
        rate / 1e6,
        if steady > 0.0 { n as f64 / steady / 1e6 } else { f64::INFINITY },
        rate / 1e6,
        verdict(rate >= 1e6)
    );

    println!("\n2. deploy-to-first-output, {} KiB component (goal: < 1 s)", big.len() / 1024);
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    let fresh = with_nonce(&big, &format!("{pid}-{nanos}"));
    let deadline = Duration::from_secs(60).min(options.timeout);
    let cold_name = format!("tb-big-cold-{pid}");
    let warm_name = format!("tb-big-warm-{pid}");
    for (label, name) in [("cold (compile)", &cold_name), ("warm (cached)", &warm_name)] {
        let (answered, total) = first_output(&api, name, &fresh, deadline).await;
        println!(
            "   {label:<15} PUT answered in {:>6.1} ms, first output after {:>6.1} ms; {:.3}x of 1 s: {}",
            answered * 1000.0,
            total * 1000.0,
            total,
            verdict(total < 1.0)
        );
    }

    let restore_name = format!("tb-restore-{pid}");
    let restore_topics = [format!("{restore_name}-in"), format!("{restore_name}-out")];
    if options.restore_keys > 0 {
        let keys = options.restore_keys;
        println!("\n3. state restore of the revenue example, {keys} keys (goal: 1 M keys in <= 5 s)");
        let [input, output] = &restore_topics;
        api.create_topic(input, 1).await;
        api.create_topic(output, 1).await;
        api.produce_keys(input, keys, options.batch, options.connections).await;
        let settings = json!({"state_bytes_max": 1u64 << 30});
        let started = Instant::now();
        api.deploy_with(&restore_name, &revenue, input, output, settings.clone()).await;
        let (first_seq, _) = api.wait_restored(&restore_name, 0, started + options.timeout).await;
        api.wait_for(output, keys as i64, &restore_name, started + options.timeout).await;
        println!("   {keys} orders of distinct customers processed in {:.2} s", started.elapsed().as_secs_f64());
        // A redeploy restarts the worker, which restores the state before it reads input.
        let redeployed = Instant::now();
        api.deploy_with(&restore_name, &revenue, input, output, settings).await;
        let (_, ms) = api.wait_restored(&restore_name, first_seq, redeployed + options.timeout).await;
        let wall = redeployed.elapsed().as_secs_f64();
        let line =
            api.log_lines(&restore_name, first_seq).await.into_iter().find(|(_, m)| m.starts_with("state restored"));
        println!("   {}", line.map(|(_, m)| m).unwrap_or_default());
        let per_million = ms as f64 / 1000.0 * 1e6 / keys as f64;
        println!(
            "   restore {:.2} s as the worker reports it ({:.2} s from the redeploy's PUT); {:.2} s per million keys; {:.2}x of 5 s: {}",
            ms as f64 / 1000.0,
            wall,
            per_million,
            per_million / 5.0,
            verdict(per_million <= 5.0)
        );
    }

    let latency_name = format!("tb-latency-{pid}");
    let latency_topics = [format!("{latency_name}-in"), format!("{latency_name}-out")];
    if options.latency_seconds > 0 {
        let [input, output] = &latency_topics;
        println!(
            "\n4. latency from produce to read_committed output, identity, {}, {} records/s for {} s (goal: p99 <= 200 ms)",
            options.delivery, options.latency_rate, options.latency_seconds
        );
        api.create_topic(input, 1).await;
        api.create_topic(output, 1).await;
        api.deploy(&latency_name, &identity, input, output).await;
        let (bootstrap, input, output) = (options.bootstrap.clone(), input.clone(), output.clone());
        let (rate, seconds) = (options.latency_rate, options.latency_seconds);
        let mut latencies =
            tokio::task::spawn_blocking(move || latency::measure(&bootstrap, &input, &output, rate, seconds))
                .await
                .expect("latency run");
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        let p99 = at(0.99);
        println!(
            "   {} records counted: p50 {} ms, p99 {} ms, max {} ms; {:.2}x of 200 ms: {}",
            latencies.len(),
            at(0.5),
            p99,
            latencies.last().copied().unwrap_or_default(),
            p99 as f64 / 200.0,
            verdict(p99 <= 200)
        );
    }

    if !options.keep {
        api.delete(&format!("/v1/transforms/{latency_name}")).await;
        for topic in &latency_topics {
            api.delete(&format!("/v1/topics/{topic}")).await;
        }
        api.delete(&format!("/v1/transforms/{restore_name}")).await;
        for topic in &restore_topics {
            api.delete(&format!("/v1/topics/{topic}")).await;
        }
        for transform in [&name, &cold_name, &warm_name] {
            api.delete(&format!("/v1/transforms/{transform}")).await;
        }
        let mut topics = vec![input, output];
        for transform in [&cold_name, &warm_name] {
            topics.extend([format!("{transform}-in"), format!("{transform}-out")]);
        }
        for topic in topics {
            api.delete(&format!("/v1/topics/{topic}")).await;
        }
    }
}
