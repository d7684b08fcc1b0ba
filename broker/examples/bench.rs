//! End-to-end benchmark on librdkafka: produces and consumes against any bootstrap address and
//! prints records/s, MB/s and p50/p99/p999 produce latency.
//!
//! `cargo run --release -p runnel-broker --example bench -- --bootstrap 127.0.0.1:9092`
//! Options: `--records N` (default 1000000), `--sizes 100,1024`, `--acks 1,all`,
//! `--partitions P` (default 6), `--linger-ms L` (default 5), `--batch-size B` (default 65536),
//! `--replication-factor R` (default 1; from 2 on, topics get `min.insync.replicas=2`).
//! Each (size, acks) pair runs on a fresh topic; the consumer then reads that topic back.
//!
//! `--mode groups` benchmarks the group coordinator instead, on 12-partition topics:
//! - commit throughput: `--groups G` (default 8) consumers, one per group, each `assign()`s all
//!   12 partitions and commits them synchronously in a tight loop for `--seconds D` (default 10);
//!   one OffsetCommit of 12 partitions counts as one commit;
//! - rebalance time: `--members M` (default 10) consumers subscribe to one topic in a fresh
//!   group; the time from the first subscribe until every member holds a non-empty assignment
//!   and together they hold all 12 partitions once, repeated `--repeats R` (default 3) times.
//!   `--strategy range|cooperative-sticky` (default range). `--group-protocol consumer` runs the
//!   members on KIP-848 instead (the broker assigns; `--remote-assignor NAME` picks the server
//!   assignor, e.g. `uniform`, `range` or one uploaded to Runnel; the broker's
//!   `group.consumer.heartbeat.interval.ms` paces it).
//!
//! `--mode heartbeats` measures the ConsumerGroupHeartbeats (KIP-848) a single-node coordinator
//! sustains: `--members M` (default 1000) over `--groups G` (default 100), back to back over
//! `--connections C` (default 16) raw connections for `--seconds D` (see
//! `bench_support/heartbeats.rs`).
//!
//! `--mode transactions` benchmarks transactional produce (librdkafka, 100-byte records or
//! `--sizes S`): for each `--txn-records 100,1000,10000` a fresh topic gets `--records N`
//! (default 1000000) records in transactions of that many records (begin, send, commit), with
//! the time each `commit_transaction` takes (p50/p99); a `read_committed` consumer then reads
//! the topic back. It also produces `--records` records acks=all with `enable.idempotence`
//! false and true, to compare idempotent with plain produce.
//!
//! `--mode idempotence` produces `--records` records acks=all `--repeats` times without and
//! with `enable.idempotence`, alternating, and prints the medians and their ratio; with
//! `--broker-pid P` also the broker's CPU time per record in each.
//!
//! `--client-config key=value` (repeatable) adds librdkafka settings to every client, e.g.
//! `--client-config security.protocol=SSL --client-config ssl.ca.location=ca.pem` for a TLS
//! listener.
//!
//! Only loopback addresses are accepted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Records,
    Groups,
    Heartbeats,
    Transactions,
    Idempotence,
}

#[path = "bench_support/flush.rs"]
mod flush;
#[path = "bench_support/heartbeats.rs"]
mod heartbeats;

use flush::flush_now;

struct Options {
    bootstrap: String,
    mode: Mode,
    groups: usize,
    seconds: u64,
    members: usize,
    repeats: usize,
    strategy: String,
    group_protocol: String,
    remote_assignor: Option<String>,
    records: usize,
    sizes: Vec<usize>,
    acks: Vec<String>,
    partitions: i32,
    linger_ms: u32,
    batch_size: u32,
    replication_factor: i32,
    txn_records: Vec<usize>,
    /// `--connections C` (heartbeats mode).
    connections: usize,
    /// Whether `--groups`/`--members` were given (heartbeats mode has its own defaults).
    groups_given: bool,
    members_given: bool,
    /// `--client-config key=value`: more librdkafka settings for every client (e.g.
    /// `security.protocol=SSL`, `ssl.ca.location=ca.pem`).
    client_config: Vec<(String, String)>,
    /// `--broker-pid P`: the broker's CPU time per record is reported (idempotence mode).
    broker_pid: Option<u32>,
}

/// A librdkafka config for `options.bootstrap` with the `--client-config` settings.
fn client_config(options: &Options) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &options.bootstrap);
    for (key, value) in &options.client_config {
        config.set(key, value);
    }
    config
}

fn parse_args() -> Options {
    let mut options = Options {
        bootstrap: "127.0.0.1:9092".into(),
        mode: Mode::Records,
        groups: 8,
        seconds: 10,
        members: 10,
        repeats: 3,
        strategy: "range".into(),
        group_protocol: "classic".into(),
        remote_assignor: None,
        records: 1_000_000,
        sizes: vec![100, 1024],
        acks: vec!["1".into(), "all".into()],
        partitions: 6,
        linger_ms: 5,
        batch_size: 65536,
        replication_factor: 1,
        txn_records: vec![100, 1000, 10000],
        connections: 16,
        groups_given: false,
        members_given: false,
        client_config: Vec::new(),
        broker_pid: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--bootstrap" => options.bootstrap = value,
            "--mode" => {
                options.mode = match value.as_str() {
                    "records" => Mode::Records,
                    "groups" => Mode::Groups,
                    "heartbeats" => Mode::Heartbeats,
                    "transactions" => Mode::Transactions,
                    "idempotence" => Mode::Idempotence,
                    other => panic!("--mode records|groups|heartbeats|transactions|idempotence, not {other}"),
                }
            }
            "--groups" => {
                options.groups = value.parse().expect("--groups G");
                options.groups_given = true;
            }
            "--connections" => options.connections = value.parse().expect("--connections C"),
            "--seconds" => options.seconds = value.parse().expect("--seconds D"),
            "--members" => {
                options.members = value.parse().expect("--members M");
                options.members_given = true;
            }
            "--repeats" => options.repeats = value.parse().expect("--repeats R"),
            "--strategy" => options.strategy = value,
            "--group-protocol" => {
                assert!(value == "classic" || value == "consumer", "--group-protocol classic|consumer");
                options.group_protocol = value
            }
            "--remote-assignor" => options.remote_assignor = Some(value),
            "--records" => options.records = value.parse().expect("--records N"),
            "--sizes" => options.sizes = value.split(',').map(|s| s.parse().expect("--sizes a,b")).collect(),
            "--acks" => options.acks = value.split(',').map(str::to_string).collect(),
            "--partitions" => options.partitions = value.parse().expect("--partitions P"),
            "--linger-ms" => options.linger_ms = value.parse().expect("--linger-ms L"),
            "--batch-size" => options.batch_size = value.parse().expect("--batch-size B"),
            "--replication-factor" => options.replication_factor = value.parse().expect("--replication-factor R"),
            "--txn-records" => {
                options.txn_records = value.split(',').map(|s| s.parse().expect("--txn-records a,b")).collect()
            }
            "--broker-pid" => options.broker_pid = Some(value.parse().expect("--broker-pid P")),
            "--client-config" => {
                let (key, value) = value.split_once('=').expect("--client-config key=value");
                options.client_config.push((key.to_string(), value.to_string()))
            }
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

fn create_topic(options: &Options, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = client_config(options).create().expect("admin client");
    // Replicated topics get min.insync.replicas=2, the usual production pairing with acks=all.
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(options.replication_factor));
    if options.replication_factor >= 2 {
        topic = topic.set("min.insync.replicas", "2");
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let results = runtime.block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("create topic");
    for result in results {
        result.expect("topic created");
    }
}

fn produce(options: &Options, topic: &str, size: usize, acks: &str) -> (f64, f64, [f64; 3]) {
    let context =
        LatencyContext { latencies_us: Mutex::new(Vec::with_capacity(options.records)), errors: Mutex::new(0) };
    let producer: ThreadedProducer<LatencyContext> = client_config(options)
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
    flush_now(&producer, Duration::from_secs(120));
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
    consume_with(options, topic, size, "read_uncommitted")
}

fn consume_with(options: &Options, topic: &str, size: usize, isolation: &str) -> (f64, f64) {
    let consumer: BaseConsumer = client_config(options)
        .set("isolation.level", isolation)
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
    match options.mode {
        Mode::Records => records_main(&options),
        Mode::Groups => groups_main(&options),
        Mode::Heartbeats => {
            let topic = format!("bench-heartbeats-{}", std::process::id());
            create_topic(&options, &topic, GROUP_BENCH_PARTITIONS);
            let groups = if options.groups_given { options.groups } else { 100 };
            let members = if options.members_given { options.members } else { 1000 };
            heartbeats::run(&options.bootstrap, &topic, groups, members, options.connections, options.seconds);
        }
        Mode::Transactions => transactions_main(&options),
        Mode::Idempotence => idempotence_main(&options),
    }
}

/// Transactions of `per_txn` records until `options.records` are written: (records/s, MB/s,
/// commit p50 ms, commit p99 ms, transactions).
fn produce_transactions(options: &Options, topic: &str, size: usize, per_txn: usize) -> (f64, f64, f64, f64, usize) {
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = client_config(options)
        .set("transactional.id", format!("{topic}-producer"))
        .set("retry.backoff.ms", std::env::var("BENCH_RETRY_BACKOFF_MS").unwrap_or_else(|_| "100".into()))
        .set("linger.ms", options.linger_ms.to_string())
        .set("batch.size", options.batch_size.to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("transactional producer");
    let timeout = Duration::from_secs(60);
    producer.init_transactions(timeout).expect("init_transactions");
    let payload = vec![b'x'; size];
    let mut commits_us: Vec<u32> = Vec::new();
    let start = Instant::now();
    let mut written = 0usize;
    while written < options.records {
        producer.begin_transaction().expect("begin");
        let n = per_txn.min(options.records - written);
        for i in 0..n {
            let mut record = BaseRecord::<(), [u8]>::to(topic)
                .payload(&payload)
                .partition(((written + i) % options.partitions as usize) as i32);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, returned)) => {
                        producer.poll(Duration::from_millis(1));
                        record = returned;
                    }
                }
            }
        }
        // Delivered first, so the commit's time is EndTxn and its markers, not the flush.
        flush_now(&producer, timeout);
        let commit = Instant::now();
        producer.commit_transaction(timeout).expect("commit");
        commits_us.push(commit.elapsed().as_micros() as u32);
        written += n;
    }
    let elapsed = start.elapsed().as_secs_f64();
    commits_us.sort_unstable();
    let records_per_s = written as f64 / elapsed;
    (
        records_per_s,
        records_per_s * size as f64 / 1e6,
        percentile(&commits_us, 0.5),
        percentile(&commits_us, 0.99),
        commits_us.len(),
    )
}

/// `--records` records acks=all with `enable.idempotence` as given: records/s.
fn produce_plain(options: &Options, topic: &str, size: usize, idempotence: bool) -> f64 {
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = client_config(options)
        .set("acks", "all")
        .set("enable.idempotence", idempotence.to_string())
        .set("linger.ms", options.linger_ms.to_string())
        .set("batch.size", options.batch_size.to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let payload = vec![b'x'; size];
    let start = Instant::now();
    for i in 0..options.records {
        let mut record =
            BaseRecord::<(), [u8]>::to(topic).payload(&payload).partition((i % options.partitions as usize) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    producer.poll(Duration::from_millis(1));
                    record = returned;
                }
            }
        }
    }
    flush_now(&producer, Duration::from_secs(120));
    options.records as f64 / start.elapsed().as_secs_f64()
}

fn transactions_main(options: &Options) {
    let run = std::process::id();
    let size = options.sizes.first().copied().unwrap_or(100);
    println!("| step | records/txn | records/s | MB/s | commit p50 ms | commit p99 ms | transactions |");
    println!("|---|---|---|---|---|---|---|");
    for &per_txn in &options.txn_records {
        let topic = format!("bench-txn-{run}-{per_txn}");
        create_topic(options, &topic, options.partitions);
        let (rps, mbps, p50, p99, txns) = produce_transactions(options, &topic, size, per_txn);
        println!("| transactional produce | {per_txn} | {rps:.0} | {mbps:.1} | {p50:.2} | {p99:.2} | {txns} |");
        let (crps, cmbps) = consume_with(options, &topic, size, "read_committed");
        println!("| read_committed consume | {per_txn} | {crps:.0} | {cmbps:.1} | | | |");
        let (urps, umbps) = consume_with(options, &topic, size, "read_uncommitted");
        println!("| read_uncommitted consume | {per_txn} | {urps:.0} | {umbps:.1} | | | |");
        println!(
            "RESULT {{\"mode\":\"transactions\",\"records_per_txn\":{per_txn},\"produce_records_per_s\":{rps:.0},\"commit_p50_ms\":{p50:.3},\"commit_p99_ms\":{p99:.3},\"read_committed_records_per_s\":{crps:.0}}}"
        );
    }
    for idempotence in [false, true] {
        let topic = format!("bench-idem-{run}-{idempotence}");
        create_topic(options, &topic, options.partitions);
        let rps = produce_plain(options, &topic, size, idempotence);
        println!(
            "| produce acks=all enable.idempotence={idempotence} | | {rps:.0} | {:.1} | | | |",
            rps * size as f64 / 1e6
        );
        println!("RESULT {{\"mode\":\"idempotence\",\"enable_idempotence\":{idempotence},\"produce_records_per_s\":{rps:.0}}}");
    }
}

/// `--repeats` rounds, each producing `--records` acks=all without and then with idempotence
/// (alternating, so drift of a noisy machine falls on both), to fresh topics: the median of
/// each and their ratio.
fn idempotence_main(options: &Options) {
    let run = std::process::id();
    let size = options.sizes.first().copied().unwrap_or(100);
    let mut rates = [Vec::new(), Vec::new()];
    let mut cpu_ns = [Vec::new(), Vec::new()];
    println!("| round | enable.idempotence=false rec/s | enable.idempotence=true rec/s | broker CPU ns/record false / true |");
    println!("|---|---|---|---|");
    for round in 0..options.repeats {
        for (i, idempotence) in [false, true].into_iter().enumerate() {
            let topic = format!("bench-idem-{run}-{round}-{idempotence}");
            create_topic(options, &topic, options.partitions);
            let before = options.broker_pid.map(process_cpu_ns);
            rates[i].push(produce_plain(options, &topic, size, idempotence));
            if let (Some(pid), Some(before)) = (options.broker_pid, before) {
                cpu_ns[i].push((process_cpu_ns(pid) - before) as f64 / options.records as f64);
            }
        }
        let cpu = if cpu_ns[0].is_empty() {
            String::new()
        } else {
            format!("{:.0} / {:.0}", cpu_ns[0][round], cpu_ns[1][round])
        };
        println!("| {round} | {:.0} | {:.0} | {cpu} |", rates[0][round], rates[1][round]);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (plain, idempotent) = (median(&mut rates[0]), median(&mut rates[1]));
    let (plain_cpu, idempotent_cpu) = (median(&mut cpu_ns[0]), median(&mut cpu_ns[1]));
    println!("| median | {plain:.0} | {idempotent:.0} | {plain_cpu:.0} / {idempotent_cpu:.0} |");
    println!(
        "RESULT {{\"mode\":\"idempotence\",\"plain_records_per_s\":{plain:.0},\"idempotent_records_per_s\":{idempotent:.0},\"ratio\":{:.3},\"broker_cpu_ns_per_record\":[{plain_cpu:.0},{idempotent_cpu:.0}]}}",
        idempotent / plain
    );
}

/// User + system CPU time of process `pid` so far, in nanoseconds (Linux `/proc`).
fn process_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("--broker-pid: no such process");
    // Fields after the command name (which may hold spaces) closed by ')'; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').expect("stat") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks * 10_000_000
}

/// Partitions of the topics of `--mode groups`, as the benchmark asks.
const GROUP_BENCH_PARTITIONS: i32 = 12;

fn group_consumer_config(options: &Options, group: &str) -> ClientConfig {
    let mut config = client_config(options);
    config.set("group.id", group).set("enable.auto.commit", "false").set("auto.offset.reset", "earliest");
    if options.group_protocol == "consumer" {
        // KIP-848: the broker owns the session, heartbeat interval and assignment.
        config.set("group.protocol", "consumer");
        if let Some(assignor) = &options.remote_assignor {
            config.set("group.remote.assignor", assignor);
        }
    } else {
        config
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            .set("partition.assignment.strategy", &options.strategy);
    }
    config
}

struct CommitResult {
    commits: usize,
    errors: usize,
    latencies_us: Vec<u32>,
}

/// One group's tight commit loop: every partition of `topic` at offset `i` for the i-th commit.
fn commit_loop(options: &Options, topic: &str, group: &str, start: &Barrier) -> CommitResult {
    let consumer: BaseConsumer = group_consumer_config(options, group).create().expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..GROUP_BENCH_PARTITIONS {
        assignment.add_partition(topic, p);
    }
    consumer.assign(&assignment).expect("assign");
    let offsets = |i: i64| {
        let mut list = TopicPartitionList::new();
        for p in 0..GROUP_BENCH_PARTITIONS {
            list.add_partition_offset(topic, p, Offset::Offset(i)).expect("offset");
        }
        list
    };
    // Warm up until the coordinator answers (the offsets topic may be created on first use).
    let warm_deadline = Instant::now() + Duration::from_secs(60);
    while consumer.commit(&offsets(0), CommitMode::Sync).is_err() {
        assert!(Instant::now() < warm_deadline, "group {group}: no successful commit within 60 s");
        let _ = consumer.poll(Duration::from_millis(100));
    }
    start.wait();
    let end = Instant::now() + Duration::from_secs(options.seconds);
    let mut result = CommitResult { commits: 0, errors: 0, latencies_us: Vec::with_capacity(1 << 16) };
    let mut i = 1i64;
    while Instant::now() < end {
        let list = offsets(i);
        let sent = Instant::now();
        match consumer.commit(&list, CommitMode::Sync) {
            Ok(()) => {
                result.latencies_us.push(sent.elapsed().as_micros() as u32);
                result.commits += 1;
            }
            Err(_) => result.errors += 1,
        }
        i += 1;
    }
    result
}

/// Commits/s of `options.groups` groups committing at once; returns (total, per group, p50, p99).
fn commit_throughput(options: &Options, run: u32) -> (f64, Vec<f64>, usize, f64, f64) {
    let topic = format!("bench-groups-{run}-commits");
    create_topic(options, &topic, GROUP_BENCH_PARTITIONS);
    let start = Barrier::new(options.groups + 1);
    let results: Vec<CommitResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..options.groups)
            .map(|g| {
                let (topic, start) = (&topic, &start);
                scope.spawn(move || commit_loop(options, topic, &format!("bench-{run}-commit-{g}"), start))
            })
            .collect();
        start.wait();
        handles.into_iter().map(|h| h.join().expect("commit thread")).collect()
    });
    let seconds = options.seconds as f64;
    let per_group: Vec<f64> = results.iter().map(|r| r.commits as f64 / seconds).collect();
    let errors = results.iter().map(|r| r.errors).sum();
    let mut latencies: Vec<u32> = results.into_iter().flat_map(|r| r.latencies_us).collect();
    latencies.sort_unstable();
    (per_group.iter().sum(), per_group, errors, percentile(&latencies, 0.5), percentile(&latencies, 0.99))
}

/// Whether the members' assignments are each non-empty, disjoint and together all partitions.
fn balanced(assignments: &[Vec<i32>]) -> bool {
    let total: usize = assignments.iter().map(Vec::len).sum();
    let union: std::collections::BTreeSet<i32> = assignments.iter().flatten().copied().collect();
    assignments.iter().all(|a| !a.is_empty())
        && total == GROUP_BENCH_PARTITIONS as usize
        && union.len() == GROUP_BENCH_PARTITIONS as usize
        && union.iter().all(|p| (0..GROUP_BENCH_PARTITIONS).contains(p))
}

/// Seconds from the first subscribe of `options.members` consumers of a fresh `group` until the
/// group is balanced.
fn rebalance_time(options: &Options, topic: &str, group: &str) -> f64 {
    struct State {
        assignments: Vec<Vec<i32>>,
        first_subscribe: Option<Instant>,
        balanced_at: Option<Instant>,
    }
    let state =
        Mutex::new(State { assignments: vec![Vec::new(); options.members], first_subscribe: None, balanced_at: None });
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(options.members);
    let deadline = Duration::from_secs(120);
    std::thread::scope(|scope| {
        for member in 0..options.members {
            let (state, stop, ready) = (&state, &stop, &ready);
            scope.spawn(move || {
                let consumer: BaseConsumer = group_consumer_config(options, group).create().expect("consumer");
                ready.wait();
                let subscribed = Instant::now();
                consumer.subscribe(&[topic]).expect("subscribe");
                {
                    let mut state = state.lock().expect("lock");
                    state.first_subscribe = Some(state.first_subscribe.map_or(subscribed, |t| t.min(subscribed)));
                }
                while !stop.load(Ordering::Relaxed) {
                    let _ = consumer.poll(Duration::from_millis(10));
                    let assigned: Vec<i32> = consumer
                        .assignment()
                        .map(|list| list.elements().iter().map(|e| e.partition()).collect())
                        .unwrap_or_default();
                    let now = Instant::now();
                    let mut state = state.lock().expect("lock");
                    state.assignments[member] = assigned;
                    if state.balanced_at.is_none() && balanced(&state.assignments) {
                        state.balanced_at = Some(now);
                        stop.store(true, Ordering::Relaxed);
                    }
                    if now.duration_since(subscribed) > deadline {
                        stop.store(true, Ordering::Relaxed);
                        panic!("group {group} not balanced within {deadline:?}: {:?}", state.assignments);
                    }
                }
            });
        }
    });
    let state = state.into_inner().expect("lock");
    let first = state.first_subscribe.expect("subscribed");
    state.balanced_at.expect("balanced").duration_since(first).as_secs_f64()
}

fn groups_main(options: &Options) {
    let run = std::process::id();
    let (total, per_group, errors, p50, p99) = commit_throughput(options, run);
    let per_group_text: Vec<String> = per_group.iter().map(|c| format!("{c:.0}")).collect();
    println!("| benchmark | groups | seconds | commits/s total | commits/s per group | errors | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| commit (12 partitions) | {} | {} | {total:.0} | {} | {errors} | {p50:.2} | {p99:.2} |",
        options.groups,
        options.seconds,
        per_group_text.join(" / ")
    );
    println!();

    // What assigns: the client strategy (classic) or the broker's assignor (consumer protocol).
    let strategy = if options.group_protocol == "consumer" {
        format!("consumer/{}", options.remote_assignor.as_deref().unwrap_or("default"))
    } else {
        options.strategy.clone()
    };
    let topic = format!("bench-groups-{run}-rebalance");
    create_topic(options, &topic, GROUP_BENCH_PARTITIONS);
    let mut times = Vec::with_capacity(options.repeats);
    println!("| benchmark | members | strategy | repeat | seconds |");
    println!("|---|---|---|---|---|");
    for repeat in 0..options.repeats {
        let seconds = rebalance_time(options, &topic, &format!("bench-{run}-rebalance-{repeat}"));
        println!("| rebalance | {} | {strategy} | {} | {seconds:.3} |", options.members, repeat + 1);
        times.push(seconds);
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    println!("| rebalance | {} | {strategy} | median | {median:.3} |", options.members);

    let per_group_json: Vec<String> = per_group.iter().map(|c| format!("{c:.1}")).collect();
    println!(
        "RESULT {{\"benchmark\":\"commit\",\"groups\":{},\"partitions\":{GROUP_BENCH_PARTITIONS},\"seconds\":{},\"commits_per_s\":{total:.1},\"commits_per_s_per_group\":[{}],\"errors\":{errors},\"p50_ms\":{p50:.3},\"p99_ms\":{p99:.3}}}",
        options.groups,
        options.seconds,
        per_group_json.join(",")
    );
    let times_json: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
    println!(
        "RESULT {{\"benchmark\":\"rebalance\",\"members\":{},\"partitions\":{GROUP_BENCH_PARTITIONS},\"strategy\":\"{}\",\"seconds\":[{}],\"median_s\":{median:.3}}}",
        options.members,
        strategy,
        times_json.join(",")
    );
}

fn records_main(options: &Options) {
    let run = std::process::id();
    println!("| step | size | acks | records/s | MB/s | p50 ms | p99 ms | p999 ms |");
    println!("|---|---|---|---|---|---|---|---|");
    let results = Arc::new(Mutex::new(Vec::new()));
    for &size in &options.sizes {
        for acks in &options.acks {
            let topic = format!("bench-{run}-{size}-{acks}");
            create_topic(options, &topic, options.partitions);
            let (rps, mbps, [p50, p99, p999]) = produce(options, &topic, size, acks);
            println!("| produce | {size} | {acks} | {rps:.0} | {mbps:.1} | {p50:.2} | {p99:.2} | {p999:.2} |");
            let (crps, cmbps) = consume(options, &topic, size);
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
