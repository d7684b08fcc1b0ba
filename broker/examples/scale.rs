//! Scale benchmark on librdkafka (issue 16): many partitions on one node. The client side of
//! `scripts/scale-bench.sh`, which starts the brokers, passes their PIDs and times the
//! shutdowns and restarts; this tool works against any bootstrap address on its own too.
//!
//! `cargo run --release -p runnel-broker --example scale -- --bootstrap 127.0.0.1:9092`
//! Options (`--bootstrap` is required): `--partitions N` (total, default 5000), `--partitions-per-topic P` (default 10; N/P
//! topics named `--prefix`-00000.., default `scale`), `--records M` per partition (default 10),
//! `--size B` value bytes (default 100), `--create-batch T` topics per CreateTopics request
//! (default 1000), `--pid PID` (the broker: VmRSS, VmHWM, open descriptors and memory maps from
//! `/proc/PID`), `--metrics-url URL` (time a `/metrics` scrape), `--sample S` partitions read by
//! the probe (default 100), `--timeout-s S` deadline of every wait (default 600).
//!
//! `--phase load` (default), on a fresh broker:
//! 0. warm-up, not timed: one OffsetFetch, so that the offsets topic exists (see `warm_up`);
//! 1. create the topics, RF 1, `--create-batch` topics per CreateTopics request one after the
//!    other; the time until Metadata shows every partition with a leader;
//! 2. produce M records to every partition, acks=all; the time until every delivery report,
//!    the errors counted;
//! 3. read every partition back from offset 0 (one consumer, `assign`, no group); every record
//!    must arrive exactly once (its key is its sequence number within the partition);
//! 4. `/proc/PID` figures after create and after produce and fetch;
//! 5. the `/metrics` scrape: the first and the median of three, and its size.
//!
//! `--phase probe`, against a broker (re)starting on the data the load phase left: waits until
//! the port accepts, then until Metadata shows every partition with a leader, then until `--sample`
//! partitions spread over the topics each return their M records; prints the wall-clock time of
//! each of these moments (`*_epoch_ms`) so that the caller can subtract the process start.
//!
//! Output: `SCALE key=value` lines (for the script), a table, and one `RESULT {json}` line. A
//! failed step prints `SCALE error=...` naming the step, the figures gathered so far, and exits 1.
//!
//! `RUNNEL_RDKAFKA_DEBUG=admin,broker,...` turns on librdkafka's debug log (stderr).
//!
//! Only loopback addresses are accepted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde_json::{json, Map, Value};

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Load,
    Probe,
}

struct Options {
    bootstrap: String,
    phase: Phase,
    partitions: usize,
    partitions_per_topic: usize,
    prefix: String,
    records: usize,
    size: usize,
    create_batch: usize,
    pid: Option<u32>,
    metrics_url: Option<String>,
    sample: usize,
    timeout: Duration,
}

impl Options {
    fn topics(&self) -> usize {
        self.partitions / self.partitions_per_topic
    }

    fn topic(&self, index: usize) -> String {
        format!("{}-{index:05}", self.prefix)
    }

    /// The topic index of one of our topic names.
    fn topic_index(&self, name: &str) -> Option<usize> {
        let index: usize = name.strip_prefix(&self.prefix)?.strip_prefix('-')?.parse().ok()?;
        (index < self.topics()).then_some(index)
    }
}

fn parse_args() -> Options {
    let mut options = Options {
        bootstrap: String::new(),
        phase: Phase::Load,
        partitions: 5000,
        partitions_per_topic: 10,
        prefix: "scale".into(),
        records: 10,
        size: 100,
        create_batch: 1000,
        pid: None,
        metrics_url: None,
        sample: 100,
        timeout: Duration::from_secs(600),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--bootstrap" => options.bootstrap = value,
            "--phase" => {
                options.phase = match value.as_str() {
                    "load" => Phase::Load,
                    "probe" => Phase::Probe,
                    other => panic!("--phase load|probe, not {other}"),
                }
            }
            "--partitions" => options.partitions = value.parse().expect("--partitions N"),
            "--partitions-per-topic" => options.partitions_per_topic = value.parse().expect("--partitions-per-topic P"),
            "--prefix" => options.prefix = value,
            "--records" => options.records = value.parse().expect("--records M"),
            "--size" => options.size = value.parse().expect("--size B"),
            "--create-batch" => options.create_batch = value.parse().expect("--create-batch T"),
            "--pid" => options.pid = Some(value.parse().expect("--pid PID")),
            "--metrics-url" => options.metrics_url = Some(value),
            "--sample" => options.sample = value.parse().expect("--sample S"),
            "--timeout-s" => options.timeout = Duration::from_secs(value.parse().expect("--timeout-s S")),
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    // No default: a benchmark that creates 50,000 topics must not land on whatever listens on 9092.
    assert!(!options.bootstrap.is_empty(), "--bootstrap HOST:PORT is required");
    assert!(options.partitions_per_topic > 0 && options.create_batch > 0, "sizes must be positive");
    assert!(
        options.partitions > 0 && options.partitions % options.partitions_per_topic == 0,
        "--partitions {} is not a multiple of --partitions-per-topic {}",
        options.partitions,
        options.partitions_per_topic
    );
    assert!(options.records > 0 && options.records <= u32::MAX as usize, "--records M: 1 to 2^32-1");
    let host = options.bootstrap.rsplit_once(':').map_or("", |(h, _)| h);
    assert!(
        host.starts_with("127.") || host == "localhost" || host == "[::1]",
        "refusing non-loopback bootstrap {}",
        options.bootstrap
    );
    if let Some(url) = &options.metrics_url {
        assert!(url.starts_with("http://127.") || url.starts_with("http://localhost"), "only loopback URLs");
    }
    options
}

/// The figures gathered so far, printed as `SCALE` lines and one `RESULT` line at the end.
#[derive(Default)]
struct Report {
    figures: Map<String, Value>,
}

impl Report {
    fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        // One line per figure as it is known, so a run that hangs or is killed still shows them.
        let text = match &value {
            Value::String(s) => s.replace('\n', " "),
            other => other.to_string(),
        };
        println!("SCALE {key}={text}");
        self.figures.insert(key.to_string(), value);
    }

    /// `/proc/PID` figures of the broker, keyed `<key>_rss_kb` etc.; a broker gone is an error.
    fn process(&mut self, options: &Options, key: &str) -> anyhow::Result<()> {
        let Some(pid) = options.pid else { return Ok(()) };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("broker pid {pid} is gone"))?;
        let field = |name: &str| -> Option<u64> {
            status.lines().find_map(|line| line.strip_prefix(name)?.split_whitespace().next()?.parse().ok())
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0);
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|m| m.lines().count()).unwrap_or(0);
        self.set(&format!("{key}_rss_kb"), field("VmRSS:").unwrap_or(0));
        self.set(&format!("{key}_hwm_kb"), field("VmHWM:").unwrap_or(0));
        self.set(&format!("{key}_fds"), fds);
        self.set(&format!("{key}_maps"), maps);
        self.set(&format!("{key}_threads"), field("Threads:").unwrap_or(0));
        Ok(())
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn client_config(options: &Options) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &options.bootstrap)
        // A restarting broker: retry the connection every 10-100 ms, not librdkafka's up to 10 s.
        .set("reconnect.backoff.ms", "10")
        .set("reconnect.backoff.max.ms", "100")
        // Metadata of 50,000 partitions is a few MB.
        .set("receive.message.max.bytes", "200000000");
    if let Ok(debug) = std::env::var("RUNNEL_RDKAFKA_DEBUG") {
        config.set("debug", debug);
    }
    config
}

/// Partitions of our topics that Metadata shows with a leader and no error.
fn led_partitions(options: &Options, client: &rdkafka::client::Client<impl ClientContext>) -> anyhow::Result<usize> {
    let metadata = client.fetch_metadata(None, Duration::from_secs(30)).context("Metadata")?;
    let mut led = 0;
    for topic in metadata.topics() {
        if options.topic_index(topic.name()).is_none() || topic.error().is_some() {
            continue;
        }
        led += topic
            .partitions()
            .iter()
            .filter(|p| p.error().is_none() && p.leader() >= 0 && (p.id() as usize) < options.partitions_per_topic)
            .count();
    }
    Ok(led)
}

/// Polls Metadata until every partition has a leader; returns the wall-clock ms of that moment.
fn wait_all_led(
    options: &Options,
    client: &rdkafka::client::Client<impl ClientContext>,
    deadline: Instant,
) -> anyhow::Result<u64> {
    loop {
        let last = match led_partitions(options, client) {
            Ok(led) if led == options.partitions => return Ok(epoch_ms()),
            other => other,
        };
        if Instant::now() >= deadline {
            return Err(match last {
                Ok(led) => anyhow!("{led} of {} partitions led after {:?}", options.partitions, options.timeout),
                Err(e) => e.context(format!("no complete Metadata within {:?}", options.timeout)),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn create_topics(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(options).create().context("admin client")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("runtime")?;
    let admin_options = AdminOptions::new()
        .operation_timeout(Some(options.timeout))
        .request_timeout(Some(options.timeout + Duration::from_secs(10)));
    let deadline = Instant::now() + options.timeout;
    let start = Instant::now();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let names: Vec<String> = (0..options.topics()).map(|t| options.topic(t)).collect();
    for chunk in names.chunks(options.create_batch) {
        let topics: Vec<NewTopic<'_>> = chunk
            .iter()
            .map(|name| NewTopic::new(name, options.partitions_per_topic as i32, TopicReplication::Fixed(1)))
            .collect();
        let results = runtime
            .block_on(admin.create_topics(&topics, &admin_options))
            .with_context(|| format!("CreateTopics of {} topics from {}", chunk.len(), chunk[0]))?;
        for result in results {
            if let Err((_, code)) = result {
                *errors.entry(format!("{code:?}")).or_default() += 1;
            }
        }
        if Instant::now() >= deadline {
            bail!("CreateTopics requests not done within {:?}", options.timeout);
        }
    }
    let requests_s = start.elapsed().as_secs_f64();
    report.set("create_requests_s", round3(requests_s));
    report.set("create_errors", errors.values().sum::<usize>());
    if !errors.is_empty() {
        report.set("create_error_kinds", format!("{errors:?}"));
    }
    wait_all_led(options, admin.inner(), deadline).context("waiting for every partition to have a leader")?;
    report.set("create_s", round3(start.elapsed().as_secs_f64()));
    Ok(())
}

/// Counts deliveries; the first few errors are kept for the report.
struct DeliveryCounter {
    delivered: AtomicUsize,
    failed: AtomicUsize,
    errors: Mutex<BTreeMap<String, usize>>,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.errors.lock().expect("lock").entry(error.to_string()).or_default() += 1;
            }
        }
    }
}

fn produce(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let context =
        DeliveryCounter { delivered: AtomicUsize::new(0), failed: AtomicUsize::new(0), errors: Mutex::default() };
    let producer: ThreadedProducer<DeliveryCounter> = client_config(options)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", options.timeout.as_millis().to_string())
        .create_with_context(context)
        .context("producer")?;
    let payload = vec![b'x'; options.size];
    let deadline = Instant::now() + options.timeout;
    let start = Instant::now();
    let mut send_errors = 0usize;
    for t in 0..options.topics() {
        let topic = options.topic(t);
        for partition in 0..options.partitions_per_topic {
            // A partition's records back to back: one batch per partition, as a keyed producer
            // spreading over many partitions sends.
            for seq in 0..options.records {
                let key = (seq as u32).to_be_bytes();
                let mut record = BaseRecord::to(&topic).key(&key[..]).payload(&payload[..]).partition(partition as i32);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                            if Instant::now() >= deadline {
                                bail!("local queue still full after {:?}", options.timeout);
                            }
                            producer.poll(Duration::from_millis(1));
                            record = returned;
                        }
                        Err((error, _)) => {
                            send_errors += 1;
                            *producer.context().errors.lock().expect("lock").entry(error.to_string()).or_default() += 1;
                            break;
                        }
                    }
                }
            }
        }
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let flushed = producer.flush(left);
    let elapsed = start.elapsed().as_secs_f64();
    let context = producer.context();
    let (delivered, failed) = (context.delivered.load(Ordering::Relaxed), context.failed.load(Ordering::Relaxed));
    report.set("produce_s", round3(elapsed));
    report.set("produce_acked", delivered);
    report.set("produce_errors", failed + send_errors);
    let errors = std::mem::take(&mut *context.errors.lock().expect("lock"));
    if !errors.is_empty() {
        report.set("produce_error_kinds", format!("{errors:?}"));
    }
    flushed.map_err(|e| {
        anyhow!("flush: {e} ({} records not delivered within {:?})", producer.in_flight_count(), options.timeout)
    })?;
    Ok(())
}

/// Which records of which partitions were read, and how often.
struct Seen {
    counts: Vec<u8>,
    records: usize,
    distinct: usize,
    duplicates: usize,
    unexpected: usize,
}

impl Seen {
    fn new(partitions: usize, records: usize) -> Seen {
        Seen { counts: vec![0; partitions * records], records, distinct: 0, duplicates: 0, unexpected: 0 }
    }

    fn record(&mut self, options: &Options, topic: &str, partition: i32, key: Option<&[u8]>) {
        let slot =
            options.topic_index(topic).zip(key.and_then(|k| <[u8; 4]>::try_from(k).ok())).and_then(|(t, key)| {
                let seq = u32::from_be_bytes(key) as usize;
                let p = partition as usize;
                (p < options.partitions_per_topic && seq < self.records)
                    .then_some(((t * options.partitions_per_topic) + p) * self.records + seq)
            });
        match slot {
            None => self.unexpected += 1,
            Some(slot) => {
                let count = &mut self.counts[slot];
                if *count == 0 {
                    self.distinct += 1;
                } else {
                    self.duplicates += 1;
                }
                *count = count.saturating_add(1);
            }
        }
    }
}

fn consumer(options: &Options) -> anyhow::Result<BaseConsumer> {
    // librdkafka's assign() needs a group.id; nothing is committed.
    client_config(options)
        .set("group.id", format!("{}-bench", options.prefix))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("fetch.max.bytes", "52428800")
        .set("fetch.wait.max.ms", "100")
        .create()
        .context("consumer")
}

/// Reads `partitions` (global indexes) from offset 0 until each gave its M records or the deadline.
fn read_back(options: &Options, partitions: &[usize], deadline: Instant) -> anyhow::Result<Seen> {
    let consumer = consumer(options)?;
    let mut assignment = TopicPartitionList::new();
    for &global in partitions {
        let topic = options.topic(global / options.partitions_per_topic);
        let partition = (global % options.partitions_per_topic) as i32;
        assignment.add_partition_offset(&topic, partition, Offset::Offset(0)).context("assignment")?;
    }
    consumer.assign(&assignment).context("assign")?;
    let mut seen = Seen::new(options.partitions, options.records);
    let expected = partitions.len() * options.records;
    let mut first_error = None;
    while seen.distinct < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => seen.record(options, message.topic(), message.partition(), message.key()),
            Some(Err(e)) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    if seen.distinct < expected {
        let error = first_error.map_or(String::new(), |e| format!(" (first consumer error: {e})"));
        bail!("{} of {expected} records read within {:?}{error}", seen.distinct, options.timeout);
    }
    Ok(seen)
}

fn fetch(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let deadline = Instant::now() + options.timeout;
    let start = Instant::now();
    let all: Vec<usize> = (0..options.partitions).collect();
    let result = read_back(options, &all, deadline);
    report.set("fetch_s", round3(start.elapsed().as_secs_f64()));
    let seen = result?;
    report.set("fetch_records", seen.distinct);
    report.set("fetch_duplicates", seen.duplicates);
    report.set("fetch_unexpected", seen.unexpected);
    if seen.duplicates > 0 || seen.unexpected > 0 {
        bail!("{} duplicate and {} unexpected records", seen.duplicates, seen.unexpected);
    }
    Ok(())
}

fn scrape_metrics(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let Some(url) = &options.metrics_url else { return Ok(()) };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("runtime")?;
    let client = reqwest::Client::builder().timeout(options.timeout).build().context("HTTP client")?;
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let body = runtime.block_on(async {
            let answer = client.get(url).send().await?.error_for_status()?;
            answer.bytes().await
        });
        let body = body.with_context(|| format!("GET {url}"))?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        bytes = body.len();
    }
    report.set("metrics_first_ms", round3(times[0]));
    times.sort_by(f64::total_cmp);
    report.set("metrics_ms", round3(times[1]));
    report.set("metrics_bytes", bytes);
    Ok(())
}

/// Makes the group coordinator exist before anything is measured: librdkafka's consumer looks it
/// up even for assign() (it needs a group.id), and the first lookup creates the offsets topic
/// (50 partitions on both brokers), which a running cluster has anyway.
fn warm_up(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let start = Instant::now();
    let deadline = start + options.timeout;
    let consumer = consumer(options)?;
    let mut list = TopicPartitionList::new();
    list.add_partition(&format!("{}-warm-up", options.prefix), 0);
    // Kafka answers NOT_COORDINATOR while it loads the new offsets partition; librdkafka gives up.
    while let Err(e) = consumer.committed_offsets(list.clone(), deadline.saturating_duration_since(Instant::now())) {
        if Instant::now() >= deadline {
            return Err(e).context("OffsetFetch (finding the group coordinator)");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    report.set("warm_up_s", round3(start.elapsed().as_secs_f64()));
    Ok(())
}

fn load(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    warm_up(options, report).context("step warm-up")?;
    report.process(options, "idle").context("step warm-up")?;
    create_topics(options, report).context("step create")?;
    report.process(options, "created").context("step create")?;
    produce(options, report).context("step produce")?;
    fetch(options, report).context("step fetch")?;
    report.process(options, "loaded").context("step fetch")?;
    scrape_metrics(options, report).context("step metrics")?;
    Ok(())
}

/// `--sample` partitions spread evenly over all of them (the first and the last included).
fn sample(options: &Options) -> Vec<usize> {
    let n = options.sample.clamp(1, options.partitions);
    if n == 1 {
        return vec![0];
    }
    let mut picked: Vec<usize> = (0..n).map(|i| i * (options.partitions - 1) / (n - 1)).collect();
    picked.dedup();
    picked
}

fn probe(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let deadline = Instant::now() + options.timeout;
    let address = options.bootstrap.replace("localhost", "127.0.0.1");
    loop {
        if std::net::TcpStream::connect_timeout(&address.parse().context("bootstrap address")?, Duration::from_secs(1))
            .is_ok()
        {
            break;
        }
        if Instant::now() >= deadline {
            bail!("step listening: {address} refused connections for {:?}", options.timeout);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    report.set("listening_epoch_ms", epoch_ms());
    let consumer = consumer(options)?;
    let led = wait_all_led(options, consumer.client(), deadline).context("step metadata")?;
    report.set("metadata_epoch_ms", led);
    let picked = sample(options);
    read_back(options, &picked, deadline).context("step sample fetch")?;
    report.set("serving_epoch_ms", epoch_ms());
    report.set("sampled_partitions", picked.len());
    report.process(options, "restarted").context("step sample fetch")?;
    Ok(())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn main() {
    let options = parse_args();
    let mut report = Report::default();
    report.set("partitions", options.partitions);
    report.set("topics", options.topics());
    report.set("records_per_partition", options.records);
    let outcome = match options.phase {
        Phase::Load => load(&options, &mut report),
        Phase::Probe => probe(&options, &mut report),
    };
    if let Err(e) = &outcome {
        report.set("error", format!("{e:#}"));
    }
    let f = |key: &str| report.figures.get(key).map_or("-".to_string(), Value::to_string);
    match options.phase {
        Phase::Load => {
            println!("| partitions | create s | produce s | fetch s | RSS MB after create / after fetch | fds after create / after fetch | /metrics ms |");
            println!("|---|---|---|---|---|---|---|");
            println!(
                "| {} | {} | {} | {} | {} / {} | {} / {} | {} |",
                options.partitions,
                f("create_s"),
                f("produce_s"),
                f("fetch_s"),
                kb_to_mb(report.figures.get("created_rss_kb")),
                kb_to_mb(report.figures.get("loaded_rss_kb")),
                f("created_fds"),
                f("loaded_fds"),
                f("metrics_ms"),
            );
        }
        Phase::Probe => {}
    }
    println!(
        "RESULT {}",
        json!({"phase": if options.phase == Phase::Load { "load" } else { "probe" }, "figures": report.figures})
    );
    if outcome.is_err() {
        std::process::exit(1);
    }
}

fn kb_to_mb(kb: Option<&Value>) -> String {
    kb.and_then(Value::as_u64).map_or("-".to_string(), |kb| format!("{:.0}", kb as f64 / 1024.0))
}
