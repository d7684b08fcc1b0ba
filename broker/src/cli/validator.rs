//! `runnel validator deploy|list|describe|logs|delete`: produce-path validators over
//! `/v1/validators`. Build one with `runnel transform build` (any guest crate builds the same
//! way); `deploy` sends the module base64-encoded in JSON, as `transform deploy` does.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use base64::Engine;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::client::{Body, Client, REQUEST_TIMEOUT};
use super::output::{human_bytes, print_json, rfc3339_ms, thousands, write_stdout, Output, Table};
use super::{parse_key_value, Connection};

#[derive(Args, Debug)]
pub struct ValidatorCommand {
    #[command(subcommand)]
    action: ValidatorAction,
}

#[derive(Subcommand, Debug)]
enum ValidatorAction {
    /// Attach a validator to a topic, or redeploy it (the next batches meet the new version).
    Deploy(DeployArgs),
    /// List validators with what they accepted and refused.
    #[command(visible_alias = "ls")]
    List,
    /// Show a validator's configuration and counters, node by node.
    Describe { name: String },
    /// Print a validator's recent log lines (guest logs and host events) on the node asked.
    Logs {
        name: String,
        /// Lines to print (the most recent).
        #[arg(short = 'n', long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1000))]
        lines: u32,
    },
    /// Detach a validator: its topic takes batches unchecked from then on.
    #[command(visible_alias = "rm")]
    Delete { name: String },
}

#[derive(Args, Debug)]
struct DeployArgs {
    name: String,
    /// The component (.wasm), as `runnel transform build` prints it.
    #[arg(short, long, value_name = "FILE")]
    module: PathBuf,
    /// The topic whose produced batches it checks.
    #[arg(short, long, value_name = "TOPIC")]
    topic: String,
    /// A parameter handed to the guest's init; repeatable.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    param: Vec<(String, String)>,
    /// What a batch gets when the guest fails (trap, deadline, memory cap): reject (the
    /// default: fail closed) or accept (fail open).
    #[arg(long, value_enum)]
    on_failure: Option<OnFailure>,
    /// Linear memory cap per instance, bytes.
    #[arg(long, value_name = "N")]
    memory_bytes: Option<u64>,
    /// Deadline of one guest call (one partition's batches), milliseconds.
    #[arg(long, value_name = "N")]
    call_timeout_ms: Option<u64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum OnFailure {
    Reject,
    Accept,
}

pub async fn run(command: ValidatorCommand, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let output = conn.output;
    match command.action {
        ValidatorAction::Deploy(args) => deploy(&client, args, output).await,
        ValidatorAction::List => {
            let raw: Value = client.get(client.url(&["v1", "validators"])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let mut table =
                Table::new(&["VALIDATOR", "TOPIC", "VERSION", "ON FAILURE", "ACCEPTED", "REJECTED", "FAILURES"]);
            for v in raw["validators"].as_array().into_iter().flatten() {
                table.row(vec![
                    text(&v["name"]),
                    text(&v["topic"]),
                    number(&v["version"]),
                    text(&v["on_failure"]),
                    number(&v["batches_accepted"]),
                    number(&v["batches_rejected"]),
                    number(&v["failures"]),
                ]);
            }
            write_stdout(&table.render())?;
            unreachable_warning(&raw);
            Ok(())
        }
        ValidatorAction::Describe { name } => {
            let raw: Value = client.get(client.url(&["v1", "validators", &name])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            write_stdout(&render(&raw))?;
            unreachable_warning(&raw);
            Ok(())
        }
        ValidatorAction::Logs { name, lines } => {
            let mut url = client.url(&["v1", "validators", &name, "logs"]);
            url.query_pairs_mut().append_pair("limit", &lines.to_string());
            let raw: Value = client.get(url).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            print_logs(&raw)
        }
        ValidatorAction::Delete { name } => {
            client.send(Method::DELETE, client.url(&["v1", "validators", &name]), Body::None).await?;
            if output == Output::Json {
                return print_json(&json!({ "deleted": name }));
            }
            write_stdout(&format!("deleted validator '{name}'\n"))?;
            Ok(())
        }
    }
}

async fn deploy(client: &Client, args: DeployArgs, output: Output) -> anyhow::Result<()> {
    let module =
        std::fs::read(&args.module).with_context(|| format!("reading the module {}", args.module.display()))?;
    let mut body = json!({
        "topic": args.topic,
        "parameters": args.param.into_iter().collect::<BTreeMap<_, _>>(),
        "module_base64": base64::engine::general_purpose::STANDARD.encode(&module),
    });
    if let Some(policy) = args.on_failure {
        body["on_failure"] = json!(match policy {
            OnFailure::Reject => "reject",
            OnFailure::Accept => "accept",
        });
    }
    if let Some(memory_bytes) = args.memory_bytes {
        body["memory_bytes"] = json!(memory_bytes);
    }
    if let Some(call_timeout_ms) = args.call_timeout_ms {
        body["call_timeout_ms"] = json!(call_timeout_ms);
    }
    let url = client.url(&["v1", "validators", &args.name]);
    // The node compiles the module before answering.
    let (status, raw): (u16, Value) =
        client.call_with_status(Method::PUT, url, Body::Json(body), REQUEST_TIMEOUT).await?;
    if output == Output::Json {
        return print_json(&raw);
    }
    let verb = if status == 201 { "created" } else { "redeployed" };
    write_stdout(&format!(
        "{verb} validator '{}' on topic '{}': version {}, on failure {}\n  module {}, sha256 {}\n",
        text(&raw["name"]),
        text(&raw["topic"]),
        number(&raw["version"]),
        text(&raw["on_failure"]),
        human_bytes(raw["module_bytes"].as_u64().unwrap_or(0)),
        text(&raw["sha256"]),
    ))?;
    Ok(())
}

fn render(v: &Value) -> String {
    let parameters = match v["parameters"].as_object() {
        Some(p) if !p.is_empty() => p.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(" "),
        _ => "none".to_string(),
    };
    let mut out = format!(
        "validator {}  version {}\n  topic        {}{}\n  on failure   {}\n  parameters   {parameters}\n  limits       {} memory, {} ms per call\n  module       {}, sha256 {}\n  batches      {} accepted, {} rejected ({} records), {} guest failures\n",
        text(&v["name"]),
        number(&v["version"]),
        text(&v["topic"]),
        if v["topic_exists"] == json!(false) { " (does not exist yet)" } else { "" },
        text(&v["on_failure"]),
        human_bytes(v["memory_bytes"].as_u64().unwrap_or(0)),
        number(&v["call_timeout_ms"]),
        human_bytes(v["module_bytes"].as_u64().unwrap_or(0)),
        text(&v["sha256"]),
        thousands(v["batches_accepted"].as_u64().unwrap_or(0)),
        thousands(v["batches_rejected"].as_u64().unwrap_or(0)),
        thousands(v["records_rejected"].as_u64().unwrap_or(0)),
        thousands(v["failures"].as_u64().unwrap_or(0)),
    );
    for (label, field, at) in
        [("last rejection", "last_rejection", "last_rejection_ms"), ("last error", "last_error", "last_error_ms")]
    {
        if let Some(message) = v[field].as_str() {
            let when = v[at].as_i64().map(rfc3339_ms).unwrap_or_default();
            out.push_str(&format!("  {label:<12} {when} {message}\n"));
        }
    }
    let mut table = Table::new(&["NODE", "STATE", "VERSION", "ACCEPTED", "REJECTED", "FAILURES", "LOAD ERROR"]);
    for n in v["nodes"].as_array().into_iter().flatten() {
        table.row(vec![
            number(&n["node"]),
            text(&n["state"]),
            number(&n["version"]),
            number(&n["batches_accepted"]),
            number(&n["batches_rejected"]),
            number(&n["failures"]),
            n["load_error"].as_str().unwrap_or("").to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}

/// Prints the lines of a `GET .../logs` answer: time, level, message.
pub(super) fn print_logs(raw: &Value) -> anyhow::Result<()> {
    let mut out = String::new();
    for line in raw["lines"].as_array().into_iter().flatten() {
        let at = line["timestamp_ms"].as_i64().map(rfc3339_ms).unwrap_or_default();
        out.push_str(&format!("{at} {:5} {}\n", text(&line["level"]), text(&line["message"])));
    }
    write_stdout(&out)?;
    Ok(())
}

pub(super) fn unreachable_warning(raw: &Value) {
    let nodes: Vec<String> = raw["nodes_unreachable"].as_array().into_iter().flatten().map(|n| n.to_string()).collect();
    if !nodes.is_empty() {
        eprintln!("warning: node {} did not answer; its counters are not included", nodes.join(", "));
    }
}

pub(super) fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| if value.is_null() { String::new() } else { value.to_string() }, str::to_string)
}

pub(super) fn number(value: &Value) -> String {
    value.as_u64().map_or_else(|| text(value), |n| n.to_string())
}
