//! `runnel assignor deploy|list|describe|logs|delete`: consumer group assignors uploaded as
//! WASM over `/v1/assignors`, chosen by consumers with `group.remote.assignor=<name>`. Build one
//! with `runnel transform build` (any guest crate builds the same way); `deploy` sends the
//! module base64-encoded in JSON, as `transform deploy` does.

use anyhow::Context;
use base64::Engine;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::client::{Body, Client, REQUEST_TIMEOUT};
use super::output::{human_bytes, print_json, rfc3339_ms, thousands, write_stdout, Output, Table};
use super::validator::{number, print_logs, text, unreachable_warning};
use super::Connection;

#[derive(Args, Debug)]
pub struct AssignorCommand {
    #[command(subcommand)]
    action: AssignorAction,
}

#[derive(Subcommand, Debug)]
enum AssignorAction {
    /// Upload an assignor, or a new version of it (used from each group's next assignment).
    Deploy(DeployArgs),
    /// List the built-in and the uploaded assignors with what they computed.
    #[command(visible_alias = "ls")]
    List,
    /// Show an assignor's configuration and counters, node by node.
    Describe { name: String },
    /// Print an assignor's recent log lines (guest logs and host events) on the node asked.
    Logs {
        name: String,
        /// Lines to print (the most recent).
        #[arg(short = 'n', long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1000))]
        lines: u32,
    },
    /// Delete an assignor: groups that chose it fall back to the default assignor.
    #[command(visible_alias = "rm")]
    Delete { name: String },
}

#[derive(Args, Debug)]
struct DeployArgs {
    /// What consumers select it by (`group.remote.assignor`).
    name: String,
    /// The component (.wasm), as `runnel transform build` prints it.
    #[arg(short, long, value_name = "FILE")]
    module: std::path::PathBuf,
    /// Linear memory cap per instance, bytes.
    #[arg(long, value_name = "N")]
    memory_bytes: Option<u64>,
    /// Deadline of one assignment, milliseconds (past it the group gets the default's plan).
    #[arg(long, value_name = "N")]
    call_timeout_ms: Option<u64>,
}

pub async fn run(command: AssignorCommand, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let output = conn.output;
    match command.action {
        AssignorAction::Deploy(args) => deploy(&client, args, output).await,
        AssignorAction::List => {
            let raw: Value = client.get(client.url(&["v1", "assignors"])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let mut table = Table::new(&["ASSIGNOR", "KIND", "VERSION", "RUNS", "FAILURES", "LAST ERROR"]);
            for (i, name) in raw["builtin"].as_array().into_iter().flatten().enumerate() {
                let kind = if i == 0 { "built-in (default)" } else { "built-in" };
                table.row(vec![text(name), kind.into(), String::new(), String::new(), String::new(), String::new()]);
            }
            for a in raw["assignors"].as_array().into_iter().flatten() {
                table.row(vec![
                    text(&a["name"]),
                    "wasm".into(),
                    number(&a["version"]),
                    number(&a["runs"]),
                    number(&a["failures"]),
                    a["last_error"].as_str().unwrap_or("").to_string(),
                ]);
            }
            write_stdout(&table.render())?;
            unreachable_warning(&raw);
            Ok(())
        }
        AssignorAction::Describe { name } => {
            let raw: Value = client.get(client.url(&["v1", "assignors", &name])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            write_stdout(&render(&raw))?;
            unreachable_warning(&raw);
            Ok(())
        }
        AssignorAction::Logs { name, lines } => {
            let mut url = client.url(&["v1", "assignors", &name, "logs"]);
            url.query_pairs_mut().append_pair("limit", &lines.to_string());
            let raw: Value = client.get(url).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            print_logs(&raw)
        }
        AssignorAction::Delete { name } => {
            client.send(Method::DELETE, client.url(&["v1", "assignors", &name]), Body::None).await?;
            if output == Output::Json {
                return print_json(&json!({ "deleted": name }));
            }
            write_stdout(&format!("deleted assignor '{name}'\n"))?;
            Ok(())
        }
    }
}

async fn deploy(client: &Client, args: DeployArgs, output: Output) -> anyhow::Result<()> {
    let module =
        std::fs::read(&args.module).with_context(|| format!("reading the module {}", args.module.display()))?;
    let mut body = json!({ "module_base64": base64::engine::general_purpose::STANDARD.encode(&module) });
    if let Some(memory_bytes) = args.memory_bytes {
        body["memory_bytes"] = json!(memory_bytes);
    }
    if let Some(call_timeout_ms) = args.call_timeout_ms {
        body["call_timeout_ms"] = json!(call_timeout_ms);
    }
    let url = client.url(&["v1", "assignors", &args.name]);
    // The node compiles the module before answering.
    let (status, raw): (u16, Value) =
        client.call_with_status(Method::PUT, url, Body::Json(body), REQUEST_TIMEOUT).await?;
    if output == Output::Json {
        return print_json(&raw);
    }
    let verb = if status == 201 { "created" } else { "redeployed" };
    write_stdout(&format!(
        "{verb} assignor '{}': version {}\n  module {}, sha256 {}\n  consumers select it with group.protocol=consumer, group.remote.assignor={}\n",
        text(&raw["name"]),
        number(&raw["version"]),
        human_bytes(raw["module_bytes"].as_u64().unwrap_or(0)),
        text(&raw["sha256"]),
        text(&raw["name"]),
    ))?;
    Ok(())
}

fn render(v: &Value) -> String {
    let deployed = v["deployed_ms"].as_i64().filter(|&ms| ms > 0).map(rfc3339_ms).unwrap_or_default();
    let mut out = format!(
        "assignor {}  version {}  deployed {deployed}\n  limits       {} memory, {} ms per assignment\n  module       {}, sha256 {}\n  runs         {} computed, {} failed (fell back to the default)\n",
        text(&v["name"]),
        number(&v["version"]),
        human_bytes(v["memory_bytes"].as_u64().unwrap_or(0)),
        number(&v["call_timeout_ms"]),
        human_bytes(v["module_bytes"].as_u64().unwrap_or(0)),
        text(&v["sha256"]),
        thousands(v["runs"].as_u64().unwrap_or(0)),
        thousands(v["failures"].as_u64().unwrap_or(0)),
    );
    if let Some(at) = v["last_run_ms"].as_i64() {
        out.push_str(&format!("  last run     {} ({} µs)\n", rfc3339_ms(at), number(&v["last_run_micros"])));
    }
    if let Some(message) = v["last_error"].as_str() {
        let when = v["last_error_ms"].as_i64().map(rfc3339_ms).unwrap_or_default();
        out.push_str(&format!("  last error   {when} {message}\n"));
    }
    let mut table = Table::new(&["NODE", "STATE", "VERSION", "GUEST NAME", "RUNS", "FAILURES", "LOAD ERROR"]);
    for n in v["nodes"].as_array().into_iter().flatten() {
        table.row(vec![
            number(&n["node"]),
            text(&n["state"]),
            number(&n["version"]),
            text(&n["guest_name"]),
            number(&n["runs"]),
            number(&n["failures"]),
            n["load_error"].as_str().unwrap_or("").to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}
