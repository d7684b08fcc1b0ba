//! HTTP API benchmark: produce throughput over the REST API and the cost of `/metrics`.
//!
//! `cargo run --release -p runnel-broker --example http_bench -- --url http://127.0.0.1:8080`
//! Options: `--records N` (default 1000000 for batched, N/20 for single), `--size B` (record
//! value bytes, default 100), `--batch R` (records per v2 request, default 500),
//! `--connections C` (concurrent requests, default 8), `--partitions P` (default 6).
//!
//! Runs, each on a fresh topic:
//! 1. batched: v2 binary produce, `--batch` records per request;
//! 2. single: v3 one record per request;
//! 3. batched again while one client scrapes `/metrics` back to back: the produce rate next to
//!    run 1 is the cost of scraping under load; the scrape latency and size are printed, with
//!    `--extra-topics T` (default 1000) idle topics and a few groups existing so the scrape
//!    has realistic work.
//!
//! Only loopback URLs are accepted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

struct Options {
    url: String,
    records: usize,
    size: usize,
    batch: usize,
    connections: usize,
    partitions: u32,
    extra_topics: usize,
}

fn parse_args() -> Options {
    let mut options = Options {
        url: "http://127.0.0.1:8080".into(),
        records: 1_000_000,
        size: 100,
        batch: 500,
        connections: 8,
        partitions: 6,
        extra_topics: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => options.url = value.trim_end_matches('/').to_string(),
            "--records" => options.records = value.parse().expect("--records N"),
            "--size" => options.size = value.parse().expect("--size B"),
            "--batch" => options.batch = value.parse().expect("--batch R"),
            "--connections" => options.connections = value.parse().expect("--connections C"),
            "--partitions" => options.partitions = value.parse().expect("--partitions P"),
            "--extra-topics" => options.extra_topics = value.parse().expect("--extra-topics T"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        options.url.starts_with("http://127.") || options.url.starts_with("http://localhost"),
        "only loopback URLs"
    );
    options
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

async fn create_topic(client: &reqwest::Client, url: &str, name: &str, partitions: u32) {
    let answer = client
        .post(format!("{url}/v1/topics"))
        .json(&json!({"name": name, "partitions": partitions}))
        .send()
        .await
        .expect("create topic");
    assert!(answer.status().is_success() || answer.status() == 409, "create {name}: {}", answer.status());
}

struct RunResult {
    records_per_sec: f64,
    mib_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Produces `records` records with `connections` concurrent request loops.
async fn produce(client: &reqwest::Client, options: &Options, topic: &str, records: usize, batch: usize) -> RunResult {
    let value = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; options.size]);
    let body: Arc<Vec<u8>> = Arc::new(if batch > 1 {
        let records: Vec<Value> = (0..batch).map(|_| json!({"value": value})).collect();
        serde_json::to_vec(&json!({"records": records})).expect("json")
    } else {
        serde_json::to_vec(&json!({"value": {"type": "BINARY", "data": value}})).expect("json")
    });
    let (path, content_type) = if batch > 1 {
        (format!("{}/topics/{topic}", options.url), "application/vnd.kafka.binary.v2+json")
    } else {
        let cluster: Value = client
            .get(format!("{}/v1/cluster", options.url))
            .send()
            .await
            .expect("cluster")
            .json()
            .await
            .expect("json");
        let id = cluster["cluster_id"].as_str().expect("cluster id").to_string();
        (format!("{}/v3/clusters/{id}/topics/{topic}/records", options.url), "application/json")
    };
    let requests = records.div_ceil(batch);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..options.connections {
        let (client, path, body, next) = (client.clone(), path.clone(), body.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < requests {
                let sent = Instant::now();
                let answer = client
                    .post(&path)
                    .header("content-type", content_type)
                    .body(body.as_ref().clone())
                    .send()
                    .await
                    .expect("produce");
                assert!(answer.status().is_success(), "produce: {}", answer.status());
                let _ = answer.bytes().await;
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let produced = requests * batch;
    RunResult {
        records_per_sec: produced as f64 / elapsed,
        mib_per_sec: (produced * options.size) as f64 / elapsed / (1 << 20) as f64,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
    }
}

fn print(name: &str, r: &RunResult) {
    println!(
        "{name:<28} {:>12.0} records/s {:>8.1} MiB/s  request p50 {:>7.2} ms  p99 {:>7.2} ms",
        r.records_per_sec, r.mib_per_sec, r.p50_ms, r.p99_ms
    );
}

#[tokio::main]
async fn main() {
    let options = parse_args();
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().expect("client");
    let run = std::process::id();
    println!(
        "HTTP produce: {} B values, batch {} records, {} connections, {} partitions, acks=all",
        options.size, options.batch, options.connections, options.partitions
    );

    let topic = format!("http-bench-batched-{run}");
    create_topic(&client, &options.url, &topic, options.partitions).await;
    let batched = produce(&client, &options, &topic, options.records, options.batch).await;
    print("v2 batched", &batched);

    let topic = format!("http-bench-single-{run}");
    create_topic(&client, &options.url, &topic, options.partitions).await;
    let single = produce(&client, &options, &topic, (options.records / 20).max(1000), 1).await;
    print("v3 single record", &single);

    // Realistic scrape work: idle topics and a committed group.
    for t in 0..options.extra_topics {
        create_topic(&client, &options.url, &format!("http-bench-idle-{t}"), 1).await;
    }
    let topic = format!("http-bench-scraped-{run}");
    create_topic(&client, &options.url, &topic, options.partitions).await;
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (client, url, stop) = (client.clone(), options.url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut bytes = 0;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let text =
                    client.get(format!("{url}/metrics")).send().await.expect("scrape").text().await.expect("body");
                latencies.push(sent.elapsed());
                bytes = text.len();
            }
            (latencies, bytes)
        })
    };
    let scraped = produce(&client, &options, &topic, options.records, options.batch).await;
    stop.store(true, Ordering::Relaxed);
    let (mut scrapes, bytes) = scraper.await.expect("scraper");
    scrapes.sort();
    print("v2 batched, /metrics looped", &scraped);
    println!(
        "/metrics under load: {} scrapes back to back, {} KiB each, p50 {:.2} ms, p99 {:.2} ms; produce rate {:.2}x of the unscraped run",
        scrapes.len(),
        bytes / 1024,
        percentile(&scrapes, 0.5),
        percentile(&scrapes, 0.99),
        scraped.records_per_sec / batched.records_per_sec
    );
}
