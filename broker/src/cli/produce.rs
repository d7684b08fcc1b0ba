//! `runnel produce`: records from a file or stdin, one per line, to a topic through the v2
//! produce API (`POST /topics/{topic}`), a batch per request.
//!
//! A reader thread turns lines into request bodies while the previous request is in flight;
//! requests themselves go one at a time. Why not several in flight: the node appends each
//! request as it arrives, so two concurrent requests to one partition could land in either
//! order, and `produce --file` must keep the file's order in a partition.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::api::ProduceResponse;
use super::client::{Body, Client, REQUEST_TIMEOUT};
use super::output::{human_bytes, thousands};
use super::{Connection, RecordFormat};

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const BINARY_V2: &str = "application/vnd.kafka.binary.v2+json";
const JSON_V2: &str = "application/vnd.kafka.json.v2+json";

/// A batch is also cut at this many body bytes, well under the node's default body limit
/// (`socket.request.max.bytes`, 100 MiB), so large lines do not make one request huge.
const BATCH_BYTES_MAX: usize = 4 << 20;

/// Batches read ahead of the one in flight: enough to overlap reading with the request,
/// bounded so a fast reader cannot buffer a whole file.
const BATCHES_AHEAD: usize = 2;

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Topic to write to.
    topic: String,
    /// Read records from this file instead of stdin.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// `lines`: each line is a value (or key<SEP>value); `json`: each line is
    /// {"key":..,"value":..,"partition":..} with any JSON as key and value.
    #[arg(long, value_enum, default_value_t = RecordFormat::Lines)]
    format: RecordFormat,
    /// Split each line into key and value at the first SEP (`lines` format).
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Write every record to this partition (default: by key, keyless records spread per batch).
    #[arg(short, long)]
    partition: Option<i32>,
    /// Records per request.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    batch: u32,
}

/// One request's worth of records, encoded.
struct Batch {
    body: Vec<u8>,
    records: u64,
    /// Input bytes the batch came from (progress and the summary's size).
    input_bytes: u64,
    /// Input line of each record, for error messages (json format skips blank lines).
    lines: Vec<u64>,
}

pub async fn run(args: ProduceArgs, conn: &Connection) -> anyhow::Result<()> {
    if args.format == RecordFormat::Json && args.key_separator.is_some() {
        anyhow::bail!("--key-separator applies to --format lines only (json lines carry their own key)");
    }
    if args.key_separator.as_deref() == Some("") {
        anyhow::bail!("--key-separator must not be empty");
    }
    let client = Client::new(conn)?;
    let (input, input_len): (Box<dyn Read + Send>, Option<u64>) = match &args.file {
        Some(path) => {
            let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
            let len = file.metadata().ok().map(|m| m.len());
            (Box::new(file), len)
        }
        None => (Box::new(std::io::stdin()), None),
    };
    let progress = progress_bar(input_len);
    let encoder = Encoder {
        format: args.format,
        key_separator: args.key_separator.clone().map(String::into_bytes),
        partition: args.partition,
        batch_records: args.batch as usize,
        send_when_idle: args.file.is_none(),
    };
    let (tx, mut rx) = mpsc::channel(BATCHES_AHEAD);
    // std I/O on a thread: stdin may block for as long as the user likes, and the runtime has
    // one thread.
    std::thread::Builder::new()
        .name("produce-reader".into())
        .spawn(move || encoder.read_all(BufReader::with_capacity(1 << 20, input), tx))
        .context("cannot start the reader thread")?;

    let content_type = match args.format {
        RecordFormat::Lines => BINARY_V2,
        RecordFormat::Json => JSON_V2,
    };
    let url = client.url(&["topics", &args.topic]);
    let started = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    while let Some(batch) = rx.recv().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                progress.finish_and_clear();
                return Err(stopped_after(records, e));
            }
        };
        let body = Body::Bytes { content_type, bytes: batch.body };
        let answer: Result<ProduceResponse, _> = client.call(Method::POST, url.clone(), body, REQUEST_TIMEOUT).await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                progress.finish_and_clear();
                return Err(stopped_after(records, e.into()));
            }
        };
        // Each record has its own result (a batch may span partitions, and one partition can
        // fail while others succeed): report the first failure and how many records landed, so
        // a rerun knows what is already in the log.
        if let Some((i, rejected)) = answer.offsets.iter().enumerate().find(|(_, o)| o.error_code.is_some()) {
            progress.finish_and_clear();
            let landed = answer.offsets.iter().filter(|o| o.error_code.is_none()).count() as u64;
            let reason = rejected.error.clone().unwrap_or_else(|| "rejected".into());
            anyhow::bail!(
                "record on line {} was rejected: {reason} ({}); {} records were produced in all",
                batch.lines.get(i).copied().unwrap_or_default(),
                rejected.error_code.unwrap_or_default(),
                records + landed
            );
        }
        records += batch.records;
        bytes += batch.input_bytes;
        progress.inc(batch.input_bytes);
    }
    progress.finish_and_clear();
    let elapsed = started.elapsed();
    eprintln!("{}", summary(records, bytes, elapsed));
    Ok(())
}

/// Says how far a failed run got, so a rerun can skip what is already in the log.
fn stopped_after(records: u64, error: anyhow::Error) -> anyhow::Error {
    if records == 0 {
        error
    } else {
        error.context(format!("stopped after {records} records were produced"))
    }
}

/// `produced 100000 records (12.3 MiB) in 2.1 s: 47,600 records/s`
fn summary(records: u64, bytes: u64, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    format!(
        "produced {records} records ({}) in {seconds:.1} s: {} records/s",
        human_bytes(bytes),
        thousands((records as f64 / seconds) as u64)
    )
}

/// A bar on stderr for a file when a person is watching; nothing for pipes and scripts.
fn progress_bar(input_len: Option<u64>) -> ProgressBar {
    match input_len {
        Some(len) if std::io::stderr().is_terminal() => {
            let style = ProgressStyle::with_template(
                "{bar:40.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(len).with_style(style)
        }
        _ => ProgressBar::hidden(),
    }
}

/// Turns input lines into v2 produce bodies.
struct Encoder {
    format: RecordFormat,
    key_separator: Option<Vec<u8>>,
    partition: Option<i32>,
    batch_records: usize,
    /// Send a partial batch when the input has nothing more buffered.
    send_when_idle: bool,
}

/// A record of the v2 binary format: key and value base64.
#[derive(Serialize)]
struct BinaryRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
}

/// A `--format json` input line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLine {
    #[serde(default)]
    key: Option<serde_json::Value>,
    #[serde(default)]
    value: serde_json::Value,
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    headers: Option<serde_json::Value>,
}

/// A record of the v2 json format: key and value embedded as JSON.
#[derive(Serialize)]
struct JsonRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<serde_json::Value>,
    value: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
}

impl Encoder {
    /// Reads `input` to the end, sending one encoded batch at a time; stops early when the
    /// receiver is gone (a request failed) or on the first bad line.
    fn read_all<R: Read>(self, mut input: BufReader<R>, tx: mpsc::Sender<anyhow::Result<Batch>>) {
        let mut line = Vec::new();
        let mut line_number = 0u64;
        let mut batch = self.new_batch();
        loop {
            line.clear();
            let read = match input.read_until(b'\n', &mut line) {
                Ok(read) => read,
                Err(e) => {
                    let _ = tx.blocking_send(Err(anyhow::Error::new(e).context("reading the input")));
                    return;
                }
            };
            if read == 0 {
                break;
            }
            line_number += 1;
            let input_bytes = read as u64;
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let added = match self.push(&mut batch, &line) {
                Ok(added) => added,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e.context(format!("line {line_number}"))));
                    return;
                }
            };
            batch.input_bytes += input_bytes;
            if added {
                batch.lines.push(line_number);
            }
            let full = batch.records as usize >= self.batch_records || batch.body.len() >= BATCH_BYTES_MAX;
            // On stdin, nothing more buffered means the next read may block (a person typing,
            // `tail -f`): send what there is rather than hold records back until the batch
            // fills. A file never blocks, so its batches stay full.
            let would_block = self.send_when_idle && input.buffer().is_empty();
            if batch.records > 0 && (full || would_block) {
                let full = std::mem::replace(&mut batch, self.new_batch());
                if tx.blocking_send(Ok(self.finish(full))).is_err() {
                    return;
                }
            }
        }
        if batch.records > 0 {
            let _ = tx.blocking_send(Ok(self.finish(batch)));
        }
    }

    fn new_batch(&self) -> Batch {
        let mut body = Vec::with_capacity(64 * 1024);
        body.extend_from_slice(b"{\"records\":[");
        Batch { body, records: 0, input_bytes: 0, lines: Vec::with_capacity(self.batch_records) }
    }

    fn finish(&self, mut batch: Batch) -> Batch {
        batch.body.extend_from_slice(b"]}");
        batch
    }

    /// Appends one line's record to `batch`; false for lines that hold no record (blank lines
    /// in json format).
    fn push(&self, batch: &mut Batch, line: &[u8]) -> anyhow::Result<bool> {
        if self.format == RecordFormat::Json && line.iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        if batch.records > 0 {
            batch.body.push(b',');
        }
        let result = match self.format {
            RecordFormat::Lines => {
                let (key, value) = match &self.key_separator {
                    Some(separator) => {
                        let at = find(line, separator).ok_or_else(|| {
                            anyhow::anyhow!("no key separator '{}' in the line", String::from_utf8_lossy(separator))
                        })?;
                        (Some(&line[..at]), &line[at + separator.len()..])
                    }
                    None => (None, line),
                };
                let record = BinaryRecord {
                    key: key.map(|k| BASE64.encode(k)),
                    value: BASE64.encode(value),
                    partition: self.partition,
                };
                serde_json::to_writer(&mut batch.body, &record)
            }
            RecordFormat::Json => {
                let parsed: JsonLine = serde_json::from_slice(line).context("not a JSON object with key/value")?;
                if parsed.headers.as_ref().is_some_and(has_entries) {
                    anyhow::bail!("headers cannot be produced: the v2 produce API has no record headers");
                }
                let record =
                    JsonRecord { key: parsed.key, value: parsed.value, partition: parsed.partition.or(self.partition) };
                serde_json::to_writer(&mut batch.body, &record)
            }
        };
        result.context("encoding the record")?;
        batch.records += 1;
        Ok(true)
    }
}

/// Whether a `headers` field holds any header (null, `[]` and `{}` hold none).
fn has_entries(headers: &serde_json::Value) -> bool {
    match headers {
        serde_json::Value::Null => false,
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(encoder: Encoder, input: &str) -> Vec<serde_json::Value> {
        encode_buffered(encoder, input, 8192)
    }

    /// Encodes `input` read through a buffer of `capacity` bytes.
    fn encode_buffered(encoder: Encoder, input: &str, capacity: usize) -> Vec<serde_json::Value> {
        let (tx, mut rx) = mpsc::channel(100);
        let input = BufReader::with_capacity(capacity, std::io::Cursor::new(input.as_bytes().to_vec()));
        std::thread::spawn(move || encoder.read_all(input, tx)).join().expect("reader");
        let mut bodies = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            let batch = batch.expect("a batch");
            bodies.push(serde_json::from_slice(&batch.body).expect("valid JSON body"));
        }
        bodies
    }

    #[test]
    fn lines_become_base64_records_in_batches() {
        // Proves lines become base64 values, an empty line an empty value, cut every --batch records.
        let encoder = Encoder {
            format: RecordFormat::Lines,
            key_separator: None,
            partition: None,
            batch_records: 2,
            send_when_idle: false,
        };
        let bodies = encode(encoder, "a\n\nc");
        assert_eq!(bodies.len(), 2);
        assert_eq!(bodies[0], serde_json::json!({"records":[{"value":"YQ=="},{"value":""}]}));
        assert_eq!(bodies[1], serde_json::json!({"records":[{"value":"Yw=="}]}));
    }

    #[test]
    fn key_separator_splits_at_the_first_occurrence() {
        // Proves --key-separator splits at its first occurrence only and -p names the partition.
        let encoder = Encoder {
            format: RecordFormat::Lines,
            key_separator: Some(b"::".to_vec()),
            partition: Some(1),
            batch_records: 10,
            send_when_idle: false,
        };
        let bodies = encode(encoder, "k::v::w\n");
        assert_eq!(bodies[0], serde_json::json!({"records":[{"key":"aw==","value":"djo6dw==","partition":1}]}));
    }

    #[test]
    fn json_lines_keep_their_json_and_skip_blank_lines() {
        // Proves json lines are sent as embedded JSON, their own partition wins over -p, blank lines skip.
        let encoder = Encoder {
            format: RecordFormat::Json,
            key_separator: None,
            partition: Some(0),
            batch_records: 10,
            send_when_idle: false,
        };
        let bodies = encode(encoder, "{\"key\":\"k\",\"value\":{\"a\":1}}\n\n{\"value\":2,\"partition\":3}\n");
        assert_eq!(
            bodies[0],
            serde_json::json!({"records":[{"key":"k","value":{"a":1},"partition":0},{"value":2,"partition":3}]})
        );
    }

    #[test]
    fn stdin_batches_are_sent_when_nothing_more_is_buffered() {
        // Proves stdin input does not wait for a full batch when the next read would block.
        let encoder = |send_when_idle| Encoder {
            format: RecordFormat::Lines,
            key_separator: None,
            partition: None,
            batch_records: 500,
            send_when_idle,
        };
        // A 4-byte buffer holds two lines at a time: stdin sends each pair, a file waits for
        // the batch to fill (here: the end of the input).
        assert_eq!(encode_buffered(encoder(true), "a\nb\nc\nd\n", 4).len(), 2);
        assert_eq!(encode_buffered(encoder(false), "a\nb\nc\nd\n", 4).len(), 1);
    }
}
