//! `runnel`: the broker binary. `runnel serve` runs a node; the other subcommands (topic,
//! produce, consume, group, cluster, transform) talk to a node over its HTTP API (`runnel::cli`).

use anyhow::Context;
use clap::{Parser, Subcommand};
use runnel::config::{NodeConfig, ServeArgs};
use runnel::node::Node;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "runnel", version, about = "A Kafka-compatible streaming log broker")]
struct Cli {
    /// The client subcommands' --url and --output, global so they may precede the subcommand
    /// (`serve` ignores them).
    #[command(flatten)]
    connection: runnel::cli::Connection,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (a single-node cluster with no flags).
    Serve(ServeArgs),
    #[command(flatten)]
    Client(runnel::cli::Command),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUNNEL_LOG_LEVEL")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve(args) => {
            let config = NodeConfig::resolve(&args).context("invalid configuration")?;
            raise_fd_limit();
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(serve(config))
        }
        // They print their own errors and choose the exit code (1 API error, 3 unreachable).
        Command::Client(command) => std::process::exit(runnel::cli::run(command, &cli.connection)),
    }
}

async fn serve(config: NodeConfig) -> anyhow::Result<()> {
    let node = Node::start(config).await.context("starting the node")?;
    // One machine-readable line on stdout, for scripts and tests that start us on port 0.
    // `kafka=` is the first listener; `listener.<NAME>=` names each.
    let listeners: String =
        node.listener_addrs().iter().map(|(name, addr)| format!(" listener.{name}={addr}")).collect();
    println!(
        "READY kafka={} controller={} http={}{listeners}",
        node.kafka_addr(),
        node.controller_addr(),
        node.http_addr()
    );
    wait_for_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await.context("shutting down")?;
    tracing::info!("stopped cleanly");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the node");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Sockets, the metadata quorum and the node's cache of open segment files (whose default size
/// is derived from the soft limit, `log.open.files.max=auto`) all take descriptors: lift the soft
/// limit to the hard one before anything opens files, as Kafka's start scripts expect the
/// operator to.
fn raise_fd_limit() {
    match runnel::log::files::raise_nofile_limit() {
        Ok((before, soft, hard)) => {
            tracing::info!(soft_before = before, soft, hard, "RLIMIT_NOFILE soft limit raised to the hard limit")
        }
        Err(e) => tracing::warn!(error = %e, "could not raise the RLIMIT_NOFILE soft limit"),
    }
}
