//! End-to-end benchmark on librdkafka: produces and consumes against any bootstrap address and
//! prints records/s, MB/s and p50/p99/p999 produce latency.
//!
//! `cargo run --release -p runnel-broker --example bench -- --bootstrap 127.0.0.1:9092`
//! Options: `--records N` (default 1000000), `--sizes 100,1024`, `--acks 1,all`,
//! `--partitions P` (default 6), `--linger-ms L` (default 5), `--batch-size B` (default 65536).
//! Each (size, acks) pair runs on a fresh topic; the consumer then reads that topic back.
//! Only loopback addresses are accepted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

struct Options {
    bootstrap: String,
    records: usize,
    sizes: Vec<usize>,
    acks: Vec<String>,
    partitions: i32,
    linger_ms: u32,
    batch_size: u32,
}

fn parse_args() -> Options {
    let mut options = Options {
        bootstrap: "127.0.0.1:9092".into(),
        records: 1_000_000,
        sizes: vec![100, 1024],
        acks: vec!["1".into(), "all".into()],
        partitions: 6,
        linger_ms: 5,
        batch_size: 65536,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--bootstrap" => options.bootstrap = value,
            "--records" => options.records = value.parse().expect("--records N"),
            "--sizes" => options.sizes = value.split(',').map(|s| s.parse().expect("--sizes a,b")).collect(),
            "--acks" => options.acks = value.split(',').map(str::to_string).collect(),
            "--partitions" => options.partitions = value.parse().expect("--partitions P"),
            "--linger-ms" => options.linger_ms = value.parse().expect("--linger-ms L"),
            "--batch-size" => options.batch_size = value.parse().expect("--batch-size B"),
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    let host = options.bootstrap.rsplit_once(':').map_or("", |(h, _)| h);
    assert!(
        host.starts_with("127.") || host == "localhost" || host == "[::1]",
        "refusing non-loopback bootstrap {}",
        options.bootstrap
    );
    options
}

/// Collects the latency of every delivery, keyed by the send instant carried as the opaque.
struct LatencyContext {
    latencies_us: Mutex<Vec<u32>>,
    errors: Mutex<usize>,
}

impl ClientContext for LatencyContext {}

impl ProducerContext for LatencyContext {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Self::DeliveryOpaque) {
        match result {
            Ok(_) => self.latencies_us.lock().expect("lock").push(sent.elapsed().as_micros() as u32),
            Err(_) => *self.errors.lock().expect("lock") += 1,
        }
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn create_topic(options: &Options, name: &str) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &options.bootstrap).create().expect("admin client");
    let topic = NewTopic::new(name, options.partitions, TopicReplication::Fixed(1));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let results = runtime.block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("create topic");
    for result in results {
        result.expect("topic created");
    }
}

fn produce(options: &Options, topic: &str, size: usize, acks: &str) -> (f64, f64, [f64; 3]) {
    let context =
        LatencyContext { latencies_us: Mutex::new(Vec::with_capacity(options.records)), errors: Mutex::new(0) };
    let producer: ThreadedProducer<LatencyContext> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("acks", acks)
        .set("linger.ms", options.linger_ms.to_string())
        .set("batch.size", options.batch_size.to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create_with_context(context)
        .expect("producer");
    let payload = vec![b'x'; size];
    let start = Instant::now();
    for i in 0..options.records {
        let mut record = BaseRecord::<(), [u8], Box<Instant>>::with_opaque_to(topic, Box::new(Instant::now()))
            .payload(&payload)
            .partition((i % options.partitions as usize) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    // Local queue full: let librdkafka drain it.
                    producer.poll(Duration::from_millis(1));
                    record = returned;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    let elapsed = start.elapsed().as_secs_f64();
    let context = producer.context();
    let mut latencies = std::mem::take(&mut *context.latencies_us.lock().expect("lock"));
    let errors = *context.errors.lock().expect("lock");
    assert_eq!(errors, 0, "{errors} deliveries failed");
    latencies.sort_unstable();
    let records_per_s = options.records as f64 / elapsed;
    let mb_per_s = records_per_s * size as f64 / 1e6;
    (
        records_per_s,
        mb_per_s,
        [percentile(&latencies, 0.5), percentile(&latencies, 0.99), percentile(&latencies, 0.999)],
    )
}

fn consume(options: &Options, topic: &str, size: usize) -> (f64, f64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("group.id", "runnel-bench")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "52428800")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..options.partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let start = Instant::now();
    let mut seen = 0usize;
    let deadline = start + Duration::from_secs(300);
    while seen < options.records && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("consume");
            assert_eq!(message.payload().map_or(0, <[u8]>::len), size);
            seen += 1;
        }
    }
    assert_eq!(seen, options.records, "consumer timed out");
    let elapsed = start.elapsed().as_secs_f64();
    let records_per_s = seen as f64 / elapsed;
    (records_per_s, records_per_s * size as f64 / 1e6)
}

fn main() {
    let options = parse_args();
    let run = std::process::id();
    println!("| step | size | acks | records/s | MB/s | p50 ms | p99 ms | p999 ms |");
    println!("|---|---|---|---|---|---|---|---|");
    let results = Arc::new(Mutex::new(Vec::new()));
    for &size in &options.sizes {
        for acks in &options.acks {
            let topic = format!("bench-{run}-{size}-{acks}");
            create_topic(&options, &topic);
            let (rps, mbps, [p50, p99, p999]) = produce(&options, &topic, size, acks);
            println!("| produce | {size} | {acks} | {rps:.0} | {mbps:.1} | {p50:.2} | {p99:.2} | {p999:.2} |");
            let (crps, cmbps) = consume(&options, &topic, size);
            println!("| consume | {size} | {acks} | {crps:.0} | {cmbps:.1} | | | |");
            results.lock().expect("lock").push((size, acks.clone(), rps, mbps, p50, p99, p999, crps, cmbps));
        }
    }
    for (size, acks, rps, mbps, p50, p99, p999, crps, cmbps) in results.lock().expect("lock").iter() {
        println!(
            "RESULT {{\"size\":{size},\"acks\":\"{acks}\",\"produce_records_per_s\":{rps:.0},\"produce_mb_per_s\":{mbps:.2},\"p50_ms\":{p50:.3},\"p99_ms\":{p99:.3},\"p999_ms\":{p999:.3},\"consume_records_per_s\":{crps:.0},\"consume_mb_per_s\":{cmbps:.2}}}"
        );
    }
}
