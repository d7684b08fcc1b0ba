//! The `runnel` CLI subcommands other than `serve`: they talk to a node over its HTTP API — `/v1`
//! for administration and reads, the Confluent v2 API for produce and for consuming in a group
//! (`transform build` alone runs the local cargo instead).
//!
//! Owns: the clap types of these subcommands, dispatch, exit codes, rendering. Invariant: it
//! never reaches into broker internals, only HTTP through [`client::Client`], so every command
//! works the same against a remote node. Exit codes: 0 ok, 1 API or input error, 2 usage error
//! (clap's), 3 node unreachable — scripts can tell "retry later" from "wrong request".

mod api;
mod assignor;
mod client;
mod cluster;
mod consume;
mod group;
mod output;
mod produce;
mod topic;
mod transform;
mod validator;

use clap::{Args, Subcommand};

pub use output::Output;

/// Exit code when nothing answers at `--url`.
pub const EXIT_UNREACHABLE: i32 = 3;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, describe, configure and delete topics.
    Topic(topic::TopicCommand),
    /// Write records from a file or stdin to a topic (one per line).
    Produce(produce::ProduceArgs),
    /// Print a topic's records to stdout, one per line.
    Consume(consume::ConsumeArgs),
    /// List, describe (with lag) and delete consumer groups.
    Group(group::GroupCommand),
    /// Show the cluster's nodes and health.
    Cluster(cluster::ClusterCommand),
    /// Build, deploy, inspect, pause, resume and delete WASM transforms.
    Transform(transform::TransformCommand),
    /// Attach WASM validators to topics' produce path; list, describe and delete them.
    Validator(validator::ValidatorCommand),
    /// Upload WASM consumer group assignors (`group.remote.assignor`); list, describe and
    /// delete them.
    Assignor(assignor::AssignorCommand),
}

/// Where the node is and how to print its answers. Flattened into the top-level command with
/// `global = true`, so the flags go before the subcommand or anywhere after it
/// (`runnel --url U topic list`, `runnel topic list --url U`), as one parsed value for all.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Base URL of a node's HTTP API (the client subcommands; `serve` ignores it).
    #[arg(long, env = "RUNNEL_URL", default_value = "http://127.0.0.1:8080", global = true)]
    pub url: String,
    /// Output format of admin commands (`serve` ignores it).
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// A SCRAM user to authenticate as (HTTP Basic), for a node started with
    /// `--http-authentication required`.
    #[arg(long, env = "RUNNEL_USER", global = true)]
    pub user: Option<String>,
    /// Its password (prefer the environment variable to the command line).
    #[arg(long, env = "RUNNEL_PASSWORD", hide_env_values = true, global = true)]
    pub password: Option<String>,
    /// A bearer token from `POST /v1/tokens`, instead of a user and password.
    #[arg(long, env = "RUNNEL_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// PEM CA certificates to trust for an `https://` --url (a node started with --http-tls).
    #[arg(long, env = "RUNNEL_CA_CERT", global = true)]
    pub ca_cert: Option<std::path::PathBuf>,
}

/// `--format` of produce and consume: how records map to lines.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordFormat {
    /// One record value per line (`key<SEP>value` with --key-separator when producing).
    #[default]
    Lines,
    /// One JSON object per line.
    Json,
}

/// Runs `command` against the node at `conn.url` and returns the process exit code; errors are
/// printed on stderr.
pub fn run(command: Command, conn: &Connection) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(dispatch(command, conn));
    // Partition readers may still be parked in long polls; they hold nothing worth waiting for.
    runtime.shutdown_background();
    match result {
        Ok(()) => 0,
        Err(error) => report(&error),
    }
}

async fn dispatch(command: Command, conn: &Connection) -> anyhow::Result<()> {
    match command {
        Command::Topic(command) => topic::run(command, conn).await,
        Command::Produce(args) => produce::run(args, conn).await,
        Command::Consume(args) => consume::run(args, conn).await,
        Command::Group(command) => group::run(command, conn).await,
        Command::Cluster(command) => cluster::run(command, conn).await,
        Command::Transform(command) => transform::run(command, conn).await,
        Command::Validator(command) => validator::run(command, conn).await,
        Command::Assignor(command) => assignor::run(command, conn).await,
    }
}

/// Prints `error` and picks the exit code.
fn report(error: &anyhow::Error) -> i32 {
    // The reader went away (`| head`): what it read was all it wanted.
    let broken_pipe = error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return 0;
    }
    let unreachable = error.chain().find_map(|cause| match cause.downcast_ref::<client::ApiError>() {
        Some(e @ client::ApiError::Unreachable { .. }) => Some(e),
        _ => None,
    });
    if let Some(unreachable) = unreachable {
        // reqwest's cause chain ("error sending request…: tcp connect error…") adds noise, not
        // information, to this one.
        eprintln!("error: {unreachable}");
        return EXIT_UNREACHABLE;
    }
    eprintln!("error: {error:#}");
    1
}

/// `key=value` as `--config`, `--set` and `--param` take it; the value may itself contain `=`.
fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got '{text}'")),
    }
}
