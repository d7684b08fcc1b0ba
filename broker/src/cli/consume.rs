//! `runnel consume`: a topic's records to stdout, one per line.
//!
//! Without `--group` it reads partitions directly with `GET /v1/topics/{topic}/records`, one
//! task per partition (a long poll on an idle partition must not hold up a busy one), and
//! stops at each partition's high watermark unless `--follow`. With `--group` it is a member of
//! that consumer group through a v2 consumer instance: it commits after printing each batch
//! and deletes the instance on every way out, Ctrl-C included, so the group rebalances at once
//! instead of after a session timeout.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use base64::Engine;
use clap::Args;
use reqwest::Method;
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::api::{Encoding, Group, Record, RecordsPage, Topic, V2Assignments, V2Instance, V2Record};
use super::client::{ApiError, Body, Client, REQUEST_TIMEOUT, V2_JSON};
use super::{Connection, RecordFormat};

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Records per `/v1` page (the endpoint's maximum).
const PAGE_RECORDS: u32 = 1000;
/// Long poll of `--follow` on an idle partition: long enough to cost nothing, short enough that
/// a node restart is noticed.
const FOLLOW_WAIT_MS: u64 = 10_000;
/// Long poll of a group member's fetch.
const GROUP_POLL_MS: u64 = 1_000;
/// Key and value bytes per group poll: the node's default is 64 MiB, more than a terminal needs
/// at once.
const POLL_BYTES_MAX: usize = 8 << 20;
/// Requests in flight while reading partitions up to their high watermarks.
const CATCH_UP_REQUESTS_MAX: usize = 4;
/// Pages buffered between the partition readers and stdout.
const PAGES_BUFFERED: usize = 8;

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Read only this partition.
    #[arg(short, long, conflicts_with = "group")]
    partition: Option<i32>,
    /// Start at each partition's first record (in a group: where the group has no offset).
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Start at this offset in each partition; negative: that many records before the end.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "group")]
    offset: Option<i64>,
    /// Keep waiting for new records instead of stopping at the end (Ctrl-C to stop).
    #[arg(short, long)]
    follow: bool,
    /// Stop after this many records.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// Consume as a member of this consumer group, committing what was printed.
    #[arg(short, long)]
    group: Option<String>,
    /// `lines`: the value of each record; `json`: one object per record with topic,
    /// partition, offset, timestamp, key, value and headers.
    #[arg(long, value_enum, default_value_t = RecordFormat::Lines)]
    format: RecordFormat,
}

pub async fn run(args: ConsumeArgs, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let mut out =
        Printer { out: BufWriter::with_capacity(1 << 16, std::io::stdout()), format: args.format, printed: 0 };
    let result = match &args.group {
        Some(group) => consume_group(&client, &args, group, &mut out).await,
        None => consume_partitions(&client, &args, &mut out).await,
    };
    // What was printed stays printed even when the command ends in an error.
    let flushed = out.out.flush();
    result?;
    flushed?;
    Ok(())
}

/// Writes records in `--format`.
struct Printer {
    out: BufWriter<std::io::Stdout>,
    format: RecordFormat,
    printed: u64,
}

impl Printer {
    fn print(&mut self, record: &Record) -> std::io::Result<()> {
        match self.format {
            RecordFormat::Lines => {
                if let Some(value) = &record.value {
                    self.out.write_all(value.as_bytes())?;
                }
                self.out.write_all(b"\n")?;
            }
            RecordFormat::Json => {
                serde_json::to_writer(&mut self.out, record)?;
                self.out.write_all(b"\n")?;
            }
        }
        self.printed += 1;
        Ok(())
    }
}

/// How many more records `--count` allows.
fn remaining(args: &ConsumeArgs, printed: u64) -> u64 {
    args.count.map_or(u64::MAX, |count| count.saturating_sub(printed))
}

async fn consume_partitions(client: &Client, args: &ConsumeArgs, out: &mut Printer) -> anyhow::Result<()> {
    let topic: Topic = client.get(client.url(&["v1", "topics", &args.topic])).await?;
    let partitions: Vec<_> = match args.partition {
        Some(p) => {
            let partition = topic.partitions.iter().find(|d| d.partition == p);
            vec![partition.ok_or_else(|| anyhow::anyhow!("topic '{}' has no partition {p}", args.topic))?]
        }
        None => topic.partitions.iter().collect(),
    };
    if remaining(args, 0) == 0 {
        return Ok(());
    }
    let (tx, mut rx) = mpsc::channel::<anyhow::Result<Vec<Record>>>(PAGES_BUFFERED);
    let mut readers = JoinSet::new();
    // Catching up, a few requests at a time keep the printer busy. Following, each partition
    // holds a long poll while idle, so each needs its own request or an idle partition would
    // delay a busy one by up to FOLLOW_WAIT_MS.
    let requests_max = if args.follow { partitions.len().max(1) } else { CATCH_UP_REQUESTS_MAX };
    let requests = Arc::new(Semaphore::new(requests_max));
    for partition in partitions {
        let start = if args.from_beginning {
            Start::Beginning
        } else if let Some(offset) = args.offset {
            Start::Offset(offset)
        } else {
            // Latest: the high watermark now (the records endpoint has no "end" offset).
            let high_watermark = match partition.high_watermark {
                Some(high_watermark) => high_watermark,
                None => partition_ends(&client, &args.topic, partition.partition).await?.1,
            };
            Start::Offset(high_watermark)
        };
        let reader = PartitionReader {
            client: client.clone(),
            requests: requests.clone(),
            topic: args.topic.clone(),
            partition: partition.partition,
            follow: args.follow,
        };
        // Without --follow, a partition already at its end has nothing to read.
        if !args.follow && matches!(start, Start::Offset(o) if Some(o) == partition.high_watermark) {
            continue;
        }
        let tx = tx.clone();
        readers.spawn(async move {
            if let Err(e) = reader.read(start, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
    }
    drop(tx);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let page = tokio::select! {
            _ = &mut ctrl_c => break,
            page = rx.recv() => page,
        };
        let Some(page) = page else { break };
        for record in page? {
            if remaining(args, out.printed) == 0 {
                break;
            }
            out.print(&record)?;
        }
        out.out.flush()?;
        if remaining(args, out.printed) == 0 {
            break;
        }
    }
    // Dropping the readers cancels their requests, long polls included.
    readers.abort_all();
    Ok(())
}

#[derive(Clone, Copy)]
enum Start {
    /// The log start offset (the endpoint's default).
    Beginning,
    /// An offset; negative counts back from the high watermark.
    Offset(i64),
}

/// A partition's log start offset and high watermark as its leader has them (the node at
/// --url forwards the records call; its topic view has them only for partitions it hosts).
async fn partition_ends(client: &Client, topic: &str, partition: i32) -> anyhow::Result<(i64, i64)> {
    let mut url = client.url(&["v1", "topics", topic, "records"]);
    url.query_pairs_mut()
        .append_pair("partition", &partition.to_string())
        .append_pair("offset", "-1")
        .append_pair("limit", "1");
    let page: RecordsPage = client.get(url).await.with_context(|| format!("reading partition {partition}'s end"))?;
    Ok((page.log_start_offset, page.high_watermark))
}

struct PartitionReader {
    client: Client,
    /// Shared by all readers: bounds the requests in flight.
    requests: Arc<Semaphore>,
    topic: String,
    partition: i32,
    follow: bool,
}

impl PartitionReader {
    async fn read(self, start: Start, tx: &mpsc::Sender<anyhow::Result<Vec<Record>>>) -> anyhow::Result<()> {
        let mut offset = start;
        loop {
            let mut url = self.client.url(&["v1", "topics", &self.topic, "records"]);
            {
                let mut query = url.query_pairs_mut();
                query.append_pair("partition", &self.partition.to_string());
                query.append_pair("limit", &PAGE_RECORDS.to_string());
                if let Start::Offset(offset) = offset {
                    query.append_pair("offset", &offset.to_string());
                }
                if self.follow {
                    query.append_pair("wait_ms", &FOLLOW_WAIT_MS.to_string());
                }
            }
            let timeout = REQUEST_TIMEOUT + Duration::from_millis(FOLLOW_WAIT_MS);
            let permit = self.requests.acquire().await.context("request limiter closed")?;
            let page: RecordsPage = self
                .client
                .call(Method::GET, url, Body::None, timeout)
                .await
                .with_context(|| format!("reading partition {}", self.partition))?;
            // Released before waiting on the printer: a full channel must not stall the others.
            drop(permit);
            let requested = match offset {
                Start::Offset(o) if o >= 0 => Some(o),
                _ => None,
            };
            let at_end = page.next_offset >= page.high_watermark;
            let progressed = !page.records.is_empty() || requested.is_none_or(|o| page.next_offset > o);
            offset = Start::Offset(page.next_offset);
            if !page.records.is_empty() {
                let mut records = page.records;
                for record in &mut records {
                    record.topic.clone_from(&self.topic);
                }
                if tx.send(Ok(records)).await.is_err() {
                    return Ok(());
                }
            }
            if !self.follow && at_end {
                return Ok(());
            }
            // Below the high watermark the node always has a record or a batch to skip; an
            // answer that moves nowhere would make this loop spin.
            if !self.follow && !progressed {
                anyhow::bail!(
                    "reading partition {}: no progress at offset {} (high watermark {})",
                    self.partition,
                    page.next_offset,
                    page.high_watermark
                );
            }
        }
    }
}

async fn consume_group(client: &Client, args: &ConsumeArgs, group: &str, out: &mut Printer) -> anyhow::Result<()> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let name = format!("runnel-cli-{}-{nanos:08x}", std::process::id());
    let body = json!({
        "name": name,
        "format": "binary",
        "auto.offset.reset": if args.from_beginning { "earliest" } else { "latest" },
        // Commits follow printing, so a record is committed only once it reached stdout.
        "auto.commit.enable": "false",
    });
    let created: V2Instance = client
        .call(Method::POST, client.url(&["consumers", group]), v2_body(body), REQUEST_TIMEOUT)
        .await
        .context("creating a consumer instance")?;
    let member = GroupMember { client: client.clone(), group: group.to_string(), instance: created.instance_id };
    let ctrl_c = tokio::signal::ctrl_c();
    let result = tokio::select! {
        result = member.consume(args, out) => result,
        _ = ctrl_c => Ok(()),
    };
    // Leave the group whatever happened; a failure here only delays the rebalance until the
    // instance expires, so it is a warning, not the command's error.
    if let Err(e) = member.close().await {
        eprintln!("warning: could not delete consumer instance '{}': {e}", member.instance);
    }
    result
}

fn v2_body(value: serde_json::Value) -> Body {
    Body::Bytes { content_type: V2_JSON, bytes: value.to_string().into_bytes() }
}

struct GroupMember {
    client: Client,
    group: String,
    instance: String,
}

impl GroupMember {
    fn url(&self, tail: &[&str]) -> reqwest::Url {
        let mut segments = vec!["consumers", &self.group, "instances", &self.instance];
        segments.extend_from_slice(tail);
        self.client.url(&segments)
    }

    async fn close(&self) -> Result<(), ApiError> {
        self.client.send(Method::DELETE, self.url(&[]), Body::None).await
    }

    async fn consume(&self, args: &ConsumeArgs, out: &mut Printer) -> anyhow::Result<()> {
        let subscription = json!({ "topics": [args.topic] });
        self.client
            .send(Method::POST, self.url(&["subscription"]), v2_body(subscription))
            .await
            .context("subscribing")?;
        // Next offset per partition of what this member printed.
        let mut positions: HashMap<i32, i64> = HashMap::new();
        while remaining(args, out.printed) > 0 {
            let mut url = self.url(&["records"]);
            url.query_pairs_mut()
                .append_pair("timeout", &GROUP_POLL_MS.to_string())
                .append_pair("max_bytes", &POLL_BYTES_MAX.to_string());
            let timeout = REQUEST_TIMEOUT + Duration::from_millis(GROUP_POLL_MS);
            let records: Vec<V2Record> = self.client.call(Method::GET, url, Body::None, timeout).await?;
            if records.is_empty() {
                // The node waited the whole poll for records: with partitions assigned and nothing
                // left below their high watermarks, that is the end for a run without --follow.
                if !args.follow && self.caught_up(args, &positions).await? {
                    return Ok(());
                }
                continue;
            }
            // Last printed offset per partition: only what reached stdout is committed, so a
            // -n limit in the middle of a batch leaves the rest to the next run.
            let mut printed: HashMap<i32, i64> = HashMap::new();
            for record in records {
                if remaining(args, out.printed) == 0 {
                    break;
                }
                printed.insert(record.partition, record.offset);
                out.print(&from_v2(record))?;
            }
            out.out.flush()?;
            self.commit(&args.topic, &printed).await.context("committing offsets")?;
            positions.extend(printed.into_iter().map(|(partition, last)| (partition, last + 1)));
        }
        Ok(())
    }

    /// Commits `last` (partition → offset of the last printed record). The v2 API takes the last
    /// processed offset and commits the one after it, as Confluent's proxy does.
    async fn commit(&self, topic: &str, last: &HashMap<i32, i64>) -> anyhow::Result<()> {
        let offsets: Vec<_> = last
            .iter()
            .map(|(partition, offset)| json!({"topic": topic, "partition": partition, "offset": offset}))
            .collect();
        self.client.send(Method::POST, self.url(&["offsets"]), v2_body(json!({ "offsets": offsets }))).await?;
        Ok(())
    }

    /// Whether every partition assigned to this member has been read to its high watermark.
    async fn caught_up(&self, args: &ConsumeArgs, positions: &HashMap<i32, i64>) -> anyhow::Result<bool> {
        let assigned: V2Assignments = self.client.get(self.url(&["assignments"])).await?;
        if assigned.partitions.is_empty() {
            return Ok(false);
        }
        let topic: Topic = self.client.get(self.client.url(&["v1", "topics", &args.topic])).await?;
        let committed = match self.client.get::<Group>(self.client.url(&["v1", "groups", &self.group])).await {
            Ok(group) => group.offsets,
            Err(e) if e.error_code() == Some(40404) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for assigned in assigned.partitions.iter().filter(|a| a.topic == args.topic) {
            let Some(state) = topic.partitions.iter().find(|p| p.partition == assigned.partition) else { continue };
            let (log_start_offset, high_watermark) = match (state.log_start_offset, state.high_watermark) {
                (Some(start), Some(end)) => (start, end),
                // Not hosted by the node at --url: asked of its leader (not taken as read).
                _ => partition_ends(&self.client, &args.topic, assigned.partition).await?,
            };
            let committed = committed
                .iter()
                .find(|o| o.topic == args.topic && o.partition == assigned.partition && o.committed_offset >= 0)
                .map(|o| o.committed_offset);
            let position = positions.get(&assigned.partition).copied().or(committed);
            let done = match position {
                Some(position) => position >= high_watermark,
                // No offset yet: "latest" starts at the end; "earliest" has the whole log to read.
                None => !args.from_beginning || high_watermark <= log_start_offset,
            };
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A v2 binary record in the shape `/v1` records print in.
fn from_v2(record: V2Record) -> Record {
    let (key, key_encoding) = decode_base64(record.key);
    let (value, value_encoding) = decode_base64(record.value);
    Record {
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        key,
        key_encoding,
        value,
        value_encoding,
        headers: Vec::new(),
    }
}

/// UTF-8 text when the bytes are text, else the base64 as it came.
fn decode_base64(data: Option<String>) -> (Option<String>, Encoding) {
    let Some(data) = data else { return (None, Encoding::Utf8) };
    match BASE64.decode(&data).ok().and_then(|bytes| String::from_utf8(bytes).ok()) {
        Some(text) => (Some(text), Encoding::Utf8),
        None => (Some(data), Encoding::Base64),
    }
}
