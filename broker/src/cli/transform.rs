//! `runnel transform build|deploy|list|describe|logs|pause|resume|delete`: WASM transforms over
//! `/v1/transforms`, plus `build`, which compiles a guest crate with the local cargo into the
//! wasm32-wasip2 component that `deploy` uploads.
//!
//! `deploy` sends JSON with the module base64-encoded (`module_base64`), the API's alternative
//! to multipart: the CLI's reqwest has no multipart feature, and modules are small.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use base64::Engine;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use super::api::{Transform, TransformList, TransformLogLine, TransformLogs, TransformPartition};
use super::client::{Body, Client, REQUEST_TIMEOUT};
use super::output::{human_bytes, print_json, rfc3339_ms, thousands, write_stdout, Output, Table};
use super::{parse_key_value, Connection};

/// The guest target: components of the transform world are WASI preview 2.
const WASM_TARGET: &str = "wasm32-wasip2";
/// How often `logs --follow` asks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// Most lines the logs endpoint returns in one answer.
const LOG_LINES_MAX: u32 = 1000;

#[derive(Args, Debug)]
pub struct TransformCommand {
    #[command(subcommand)]
    action: TransformAction,
}

#[derive(Subcommand, Debug)]
enum TransformAction {
    /// Compile a guest crate to a wasm32-wasip2 component and print the .wasm's path.
    Build(BuildArgs),
    /// Deploy a transform, or redeploy it (a new version resumes where the old one stopped).
    Deploy(DeployArgs),
    /// List transforms with their state, lag and throughput.
    #[command(visible_alias = "ls")]
    List,
    /// Show a transform's configuration and the status of each input partition.
    Describe { name: String },
    /// Print a transform's recent log lines (guest logs, stdout, stderr and host events).
    Logs(LogsArgs),
    /// Stop processing; positions are kept.
    Pause { name: String },
    /// Resume from the committed positions.
    Resume { name: String },
    /// Remove a transform (its output topics and their records stay).
    #[command(visible_alias = "rm")]
    Delete { name: String },
}

#[derive(Args, Debug)]
struct BuildArgs {
    /// Crate to build (`cargo build -p`); without it, the crate in --path.
    #[arg(short, long, value_name = "CRATE")]
    package: Option<String>,
    /// Directory cargo runs in (default: the current one).
    #[arg(long, value_name = "DIR")]
    path: Option<PathBuf>,
    /// cargo's --target-dir, relative to the current directory (default: cargo's own, usually
    /// target/ of the workspace).
    #[arg(long, value_name = "DIR")]
    target_dir: Option<PathBuf>,
    /// Cargo profile: Runnel's workspace defines `wasm` (small, fast to instantiate).
    #[arg(long, default_value = "wasm")]
    profile: String,
}

#[derive(Args, Debug)]
struct DeployArgs {
    name: String,
    /// The component (.wasm), as `runnel transform build` prints it.
    #[arg(short, long, value_name = "FILE")]
    module: PathBuf,
    /// Topic the transform reads.
    #[arg(short, long = "input-topic", visible_alias = "input", value_name = "TOPIC")]
    input_topic: String,
    /// Output topic; repeat for several (the guest's output i writes to the i-th). Not
    /// `--output`: that one picks table or json.
    #[arg(short, long = "output-topic", value_name = "TOPIC", required = true)]
    output_topic: Vec<String>,
    /// A parameter handed to the guest's init; repeatable.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    param: Vec<(String, String)>,
    /// Where partitions without a committed position start (the node's default: earliest).
    #[arg(long, value_enum)]
    start: Option<Start>,
    /// What a failing record does (the node's default: retry). --dead-letter-topic implies
    /// dead_letter.
    #[arg(long, value_enum)]
    error_policy: Option<ErrorPolicy>,
    /// Where failing records go with --error-policy dead_letter.
    #[arg(long, value_name = "TOPIC")]
    dead_letter_topic: Option<String>,
    /// Linear memory cap per instance, bytes.
    #[arg(long, value_name = "N")]
    memory_bytes: Option<u64>,
    /// Deadline of one guest call, milliseconds.
    #[arg(long, value_name = "N")]
    call_timeout_ms: Option<u64>,
    /// Records per guest call at most.
    #[arg(long, value_name = "N")]
    batch_records: Option<u32>,
    /// Continue from the positions an earlier deployment of this name committed (a new
    /// deployment otherwise starts at --start; a redeploy always continues).
    #[arg(long)]
    resume: bool,
    /// exactly_once (the default: outputs, dead letters and the input position commit in one
    /// transaction) or at_least_once (lower latency; after a crash recent outputs repeat).
    #[arg(long, value_enum)]
    delivery: Option<Delivery>,
    /// How often positions are committed while input keeps coming (exactly-once: the length of
    /// one transaction), milliseconds.
    #[arg(long, value_name = "N")]
    commit_interval_ms: Option<u64>,
    /// Bound of a stateful transform's keyed state per input partition (keys plus values),
    /// bytes; a put past it fails the batch.
    #[arg(long, value_name = "BYTES")]
    state_bytes_max: Option<u64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Delivery {
    #[value(name = "exactly_once", alias = "exactly-once")]
    ExactlyOnce,
    #[value(name = "at_least_once", alias = "at-least-once")]
    AtLeastOnce,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Start {
    Earliest,
    Latest,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ErrorPolicy {
    /// Stop the partition and retry with backoff.
    Retry,
    /// Drop the failing record and go on.
    Skip,
    /// Write the failing record to --dead-letter-topic and go on.
    #[value(name = "dead_letter", alias = "dead-letter")]
    DeadLetter,
}

#[derive(Args, Debug)]
struct LogsArgs {
    name: String,
    /// Lines to print (the most recent).
    #[arg(short = 'n', long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1000))]
    lines: u32,
    /// Only lines of this input partition.
    #[arg(short, long)]
    partition: Option<i32>,
    /// Keep printing new lines as they come (polls every second; Ctrl-C to stop).
    #[arg(short, long)]
    follow: bool,
}

pub async fn run(command: TransformCommand, conn: &Connection) -> anyhow::Result<()> {
    let output = conn.output;
    match command.action {
        // Needs no node: a build works with none running.
        TransformAction::Build(args) => build(args, output),
        action => run_remote(&Client::new(conn)?, action, output).await,
    }
}

async fn run_remote(client: &Client, action: TransformAction, output: Output) -> anyhow::Result<()> {
    match action {
        TransformAction::Build(args) => build(args, output)?,
        TransformAction::Deploy(args) => deploy(client, args, output).await?,
        TransformAction::List => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "transforms"])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let mut list: TransformList = serde_json::from_value(raw)?;
            list.transforms.sort_by(|a, b| a.name.cmp(&b.name));
            let mut table =
                Table::new(&["TRANSFORM", "INPUT", "OUTPUTS", "STATE", "VERSION", "LAG", "IN/S", "OUT/S", "ERRORS"]);
            for t in &list.transforms {
                table.row(vec![
                    t.name.clone(),
                    t.input_topic.clone(),
                    t.output_topics.join(","),
                    t.state.clone(),
                    t.version.to_string(),
                    t.lag.to_string(),
                    format!("{:.1}", t.records_in_per_sec),
                    format!("{:.1}", t.records_out_per_sec),
                    t.errors.to_string(),
                ]);
            }
            write_stdout(&table.render())?;
            if !list.nodes_unreachable.is_empty() {
                let nodes: Vec<String> = list.nodes_unreachable.iter().map(u64::to_string).collect();
                eprintln!("warning: node {} did not answer; its workers are not counted", nodes.join(", "));
            }
        }
        TransformAction::Describe { name } => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "transforms", &name])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let transform: Transform = serde_json::from_value(raw)?;
            write_stdout(&render_transform(&transform))?;
        }
        TransformAction::Logs(args) => logs(client, args, output).await?,
        TransformAction::Pause { name } => {
            client.send(Method::POST, client.url(&["v1", "transforms", &name, "pause"]), Body::None).await?;
            done(output, "paused", &name)?;
        }
        TransformAction::Resume { name } => {
            client.send(Method::POST, client.url(&["v1", "transforms", &name, "resume"]), Body::None).await?;
            done(output, "resumed", &name)?;
        }
        TransformAction::Delete { name } => {
            client.send(Method::DELETE, client.url(&["v1", "transforms", &name]), Body::None).await?;
            done(output, "deleted", &name)?;
        }
    }
    Ok(())
}

/// `{"paused": "name"}` or `paused transform 'name'`.
fn done(output: Output, verb: &str, name: &str) -> anyhow::Result<()> {
    if output == Output::Json {
        return print_json(&json!({ verb: name }));
    }
    write_stdout(&format!("{verb} transform '{name}'\n"))?;
    Ok(())
}

/// Runs cargo for the guest target and prints the components it produced. Cargo's progress
/// and diagnostics go to stderr as usual; its JSON messages on stdout name the artifacts, so
/// the path is cargo's answer rather than a guess at its layout.
fn build(args: BuildArgs, output: Output) -> anyhow::Result<()> {
    let dir = match &args.path {
        Some(path) => path.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    ensure_wasm_target(&dir)?;
    // `CARGO` is how cargo tells subprocesses which cargo runs them; otherwise the one on PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .current_dir(&dir)
        .args(["build", "--profile", &args.profile, "--target", WASM_TARGET])
        .arg("--message-format=json-render-diagnostics");
    if let Some(package) = &args.package {
        command.args(["-p", package]);
    }
    if let Some(target_dir) = &args.target_dir {
        // Relative to where the user typed it, not to --path where cargo runs.
        let target_dir = std::path::absolute(target_dir).context("resolving --target-dir")?;
        command.arg("--target-dir").arg(target_dir);
    }
    let ran = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {} in {}", cargo.to_string_lossy(), dir.display()))?;
    if !ran.status.success() {
        bail!("cargo build for {WASM_TARGET} failed ({}); its errors are above", ran.status);
    }
    let modules = built_modules(&String::from_utf8_lossy(&ran.stdout), args.package.as_deref());
    if modules.is_empty() {
        bail!("cargo built no .wasm: a transform crate needs `[lib] crate-type = [\"cdylib\"]`");
    }
    if output == Output::Json {
        return print_json(&json!({ "modules": modules }));
    }
    let mut text = String::new();
    for module in &modules {
        text.push_str(&format!("{}\n", module.display()));
    }
    write_stdout(&text)?;
    Ok(())
}

/// Installs the guest target with rustup when it is missing. Without rustup (a distribution's
/// Rust) the target is the toolchain's business and cargo's error says what is wrong.
fn ensure_wasm_target(dir: &Path) -> anyhow::Result<()> {
    let listed = match Command::new("rustup")
        .current_dir(dir)
        .args(["target", "list", "--installed"])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(listed) if listed.status.success() => listed,
        Ok(_) | Err(_) => return Ok(()),
    };
    if String::from_utf8_lossy(&listed.stdout).lines().any(|l| l.trim() == WASM_TARGET) {
        return Ok(());
    }
    eprintln!("installing the {WASM_TARGET} target: rustup target add {WASM_TARGET}");
    let status = Command::new("rustup")
        .current_dir(dir)
        .args(["target", "add", WASM_TARGET])
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .context("running rustup target add")?;
    if !status.success() {
        bail!("rustup target add {WASM_TARGET} failed ({status})");
    }
    Ok(())
}

/// The `.wasm` files of cdylib artifacts in cargo's JSON messages; with `package`, only that
/// crate's (dependencies are rlibs anyway, but a workspace build may hold several guests).
fn built_modules(messages: &str, package: Option<&str>) -> Vec<PathBuf> {
    let crate_name = package.map(|p| p.replace('-', "_"));
    let mut modules = Vec::new();
    for line in messages.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some(name) = &crate_name {
            if message["target"]["name"].as_str() != Some(name.as_str()) {
                continue;
            }
        }
        let files = message["filenames"].as_array().into_iter().flatten().filter_map(|f| f.as_str());
        for file in files.filter(|f| f.ends_with(".wasm")) {
            let file = PathBuf::from(file);
            if !modules.contains(&file) {
                modules.push(file);
            }
        }
    }
    modules
}

async fn deploy(client: &Client, args: DeployArgs, output: Output) -> anyhow::Result<()> {
    let module =
        std::fs::read(&args.module).with_context(|| format!("reading the module {}", args.module.display()))?;
    let mut body = json!({
        "input_topic": args.input_topic,
        "output_topics": args.output_topic,
        "parameters": args.param.into_iter().collect::<BTreeMap<_, _>>(),
    });
    if let Some(start) = args.start {
        body["start"] = json!(match start {
            Start::Earliest => "earliest",
            Start::Latest => "latest",
        });
    }
    let error_policy = match (args.error_policy, &args.dead_letter_topic) {
        (None, Some(_)) => Some(ErrorPolicy::DeadLetter),
        (policy, _) => policy,
    };
    if let Some(policy) = error_policy {
        body["error_policy"] = json!(match policy {
            ErrorPolicy::Retry => "retry",
            ErrorPolicy::Skip => "skip",
            ErrorPolicy::DeadLetter => "dead_letter",
        });
    }
    if let Some(topic) = args.dead_letter_topic {
        body["dead_letter_topic"] = json!(topic);
    }
    if let Some(memory_bytes) = args.memory_bytes {
        body["memory_bytes"] = json!(memory_bytes);
    }
    if let Some(call_timeout_ms) = args.call_timeout_ms {
        body["call_timeout_ms"] = json!(call_timeout_ms);
    }
    if let Some(batch_records) = args.batch_records {
        body["batch_records_max"] = json!(batch_records);
    }
    if args.resume {
        body["resume"] = json!(true);
    }
    if let Some(delivery) = args.delivery {
        body["delivery"] = json!(match delivery {
            Delivery::ExactlyOnce => "exactly_once",
            Delivery::AtLeastOnce => "at_least_once",
        });
    }
    if let Some(commit_interval_ms) = args.commit_interval_ms {
        body["commit_interval_ms"] = json!(commit_interval_ms);
    }
    if let Some(state_bytes_max) = args.state_bytes_max {
        body["state_bytes_max"] = json!(state_bytes_max);
    }
    body["module_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&module));
    let url = client.url(&["v1", "transforms", &args.name]);
    // The node compiles the module before answering: seconds for a big one, within the timeout.
    let (status, raw): (u16, serde_json::Value) =
        client.call_with_status(Method::PUT, url, Body::Json(body), REQUEST_TIMEOUT).await?;
    if output == Output::Json {
        return print_json(&raw);
    }
    let t: Transform = serde_json::from_value(raw)?;
    let verb = if status == 201 { "created" } else { "redeployed" };
    write_stdout(&format!(
        "{verb} transform '{}': version {}, {}\n  {} → {}\n  module {}, sha256 {}\n",
        t.name,
        t.version,
        t.state,
        t.input_topic,
        t.output_topics.join(", "),
        human_bytes(t.module_bytes),
        t.sha256,
    ))?;
    Ok(())
}

fn render_transform(t: &Transform) -> String {
    let parameters = if t.parameters.is_empty() {
        "none".to_string()
    } else {
        t.parameters.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    };
    let error_policy = match &t.dead_letter_topic {
        Some(topic) => format!("{} → {topic}", t.error_policy),
        None => t.error_policy.clone(),
    };
    let sum = |field: fn(&TransformPartition) -> u64| t.partitions.iter().map(field).sum::<u64>();
    let mut out = format!(
        "Transform:   {}\nState:       {}\nVersion:     {} (sha256 {}, {})\nInput:       {}\nOutputs:     {}\n\
         Parameters:  {parameters}\nStart:       {}\nDelivery:    {}, commit every {} ms\nOn error:    {error_policy}\n\
         Limits:      {} memory, {} ms per call, {} records per call\n{}\
         Lag:         {}\nThroughput:  {:.1} records/s in, {:.1} records/s out\n\
         Records:     {} in, {} out, {} errors, {} skipped, {} dead-lettered\n\n",
        t.name,
        t.state,
        t.version,
        t.sha256,
        human_bytes(t.module_bytes),
        t.input_topic,
        t.output_topics.join(", "),
        t.start,
        t.delivery,
        t.commit_interval_ms,
        human_bytes(t.memory_bytes),
        t.call_timeout_ms,
        t.batch_records_max,
        match &t.state_topic {
            Some(topic) if t.stateful => format!(
                "State:       {} in {} keys (at most {} per partition), changelog {topic}\n",
                human_bytes(sum(|p| p.state_bytes)),
                thousands(sum(|p| p.state_keys)),
                human_bytes(t.state_bytes_max),
            ),
            _ => String::new(),
        },
        t.lag,
        t.records_in_per_sec,
        t.records_out_per_sec,
        thousands(sum(|p| p.records_in)),
        thousands(sum(|p| p.records_out)),
        thousands(t.errors),
        thousands(sum(|p| p.skipped)),
        thousands(sum(|p| p.dead_lettered)),
    );
    let mut table = Table::new(&[
        "PARTITION",
        "NODE",
        "STATE",
        "POSITION",
        "HIGH-WATERMARK",
        "LAG",
        "IN/S",
        "OUT/S",
        "ERRORS",
        "LAST-ERROR",
    ]);
    let mut partitions: Vec<_> = t.partitions.iter().collect();
    partitions.sort_by_key(|p| (p.partition, p.node));
    for p in partitions {
        table.row(vec![
            p.partition.to_string(),
            p.node.map_or_else(|| "-".into(), |n| n.to_string()),
            p.state.clone(),
            p.position.to_string(),
            p.high_watermark.to_string(),
            p.lag.to_string(),
            format!("{:.1}", p.records_in_per_sec),
            format!("{:.1}", p.records_out_per_sec),
            p.errors.to_string(),
            // One line per partition: a guest's error text may hold newlines.
            p.last_error.as_deref().map_or_else(|| "-".into(), |e| e.split_whitespace().collect::<Vec<_>>().join(" ")),
        ]);
    }
    if t.partitions.is_empty() {
        out.push_str("No partition is running yet.\n");
    } else {
        out.push_str(&table.render());
    }
    if !t.nodes_unreachable.is_empty() {
        let nodes: Vec<String> = t.nodes_unreachable.iter().map(u64::to_string).collect();
        out.push_str(&format!("Not answering (their workers are missing above): node {}\n", nodes.join(", ")));
    }
    out
}

async fn logs(client: &Client, args: LogsArgs, output: Output) -> anyhow::Result<()> {
    let fetch = |limit: u32, after: u64| {
        let mut url = client.url(&["v1", "transforms", &args.name, "logs"]);
        url.query_pairs_mut().append_pair("limit", &limit.to_string()).append_pair("after", &after.to_string());
        if let Some(partition) = args.partition {
            url.query_pairs_mut().append_pair("partition", &partition.to_string());
        }
        url
    };
    if !args.follow {
        let raw: serde_json::Value = client.get(fetch(args.lines, 0)).await?;
        if output == Output::Json {
            return print_json(&raw);
        }
        let logs: TransformLogs = serde_json::from_value(raw)?;
        return print_log_lines(&logs.lines, output);
    }
    // Following: each poll asks for the lines after the last `seq` printed (the node keeps
    // the newest 1,000; a follower slower than that misses the ones that scrolled out).
    let first: TransformLogs = client.get(fetch(args.lines, 0)).await?;
    print_log_lines(&first.lines, output)?;
    let mut last = first.lines.last().map_or(0, |l| l.seq);
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        let latest: TransformLogs = client.get(fetch(LOG_LINES_MAX, last)).await?;
        print_log_lines(&latest.lines, output)?;
        last = latest.lines.last().map_or(last, |l| l.seq);
    }
}

/// One line each: table mode `time LEVEL partition message`, json mode one object per line.
fn print_log_lines(lines: &[TransformLogLine], output: Output) -> anyhow::Result<()> {
    let mut text = String::new();
    for line in lines {
        if output == Output::Json {
            text.push_str(&serde_json::to_string(line)?);
        } else {
            let partition = line.partition.map_or_else(|| "-".to_string(), |p| format!("p{p}"));
            text.push_str(&format!(
                "{} {:<5} {partition:<3} {}",
                rfc3339_ms(line.timestamp_ms),
                line.level.to_uppercase(),
                line.message.trim_end()
            ));
        }
        text.push('\n');
    }
    if !text.is_empty() {
        write_stdout(&text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_reads_the_component_path_from_cargo_messages() {
        // Proves `transform build` takes the .wasm from cargo's artifact messages, only the
        // asked-for crate's, ignoring rlibs, build scripts and non-JSON lines.
        let messages = concat!(
            r#"{"reason":"compiler-artifact","target":{"name":"runnel_sdk","kind":["lib"]},"filenames":["/t/librunnel_sdk.rlib"]}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"name":"other_guest","kind":["cdylib"]},"filenames":["/t/other_guest.wasm"]}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"name":"runnel_example_identity","kind":["cdylib","rlib"]},"#,
            r#""filenames":["/t/wasm32-wasip2/wasm/runnel_example_identity.wasm","/t/librunnel_example_identity.rlib"]}"#,
            "\nnot json\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(
            built_modules(messages, Some("runnel-example-identity")),
            [PathBuf::from("/t/wasm32-wasip2/wasm/runnel_example_identity.wasm")]
        );
        assert_eq!(built_modules(messages, None).len(), 2);
    }
}
