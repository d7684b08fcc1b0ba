//! `runnel cluster status`: the node's view of the cluster (`GET /v1/cluster`).

use clap::{Args, Subcommand};

use super::api::Cluster;
use super::client::Client;
use super::output::{human_bytes, human_duration_ms, print_json, write_stdout, Output, Table};
use super::Connection;

#[derive(Args, Debug)]
pub struct ClusterCommand {
    #[command(subcommand)]
    action: ClusterAction,
}

#[derive(Subcommand, Debug)]
enum ClusterAction {
    /// Cluster id, controller, nodes, partition health and throughput.
    Status,
}

pub async fn run(command: ClusterCommand, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command.action {
        ClusterAction::Status => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "cluster"])).await?;
            if conn.output == Output::Json {
                return print_json(&raw);
            }
            let cluster: Cluster = serde_json::from_value(raw)?;
            write_stdout(&render(&cluster))?;
            Ok(())
        }
    }
}

fn render(c: &Cluster) -> String {
    let controller = c.controller_id.map_or_else(|| "none".to_string(), |id| id.to_string());
    let mut out = format!(
        "Cluster:     {}\nVersion:     {} (node {}, up {})\nController:  {controller}\n\
         Topics:      {} ({} partitions, {} under-replicated, {} offline)\n\
         Throughput:  {:.1} msg/s in, {}/s in, {}/s out\nConnections: {}\n\n",
        c.cluster_id,
        c.version,
        c.node_id,
        human_duration_ms(c.uptime_ms),
        c.topics,
        c.partitions,
        c.under_replicated_partitions,
        c.offline_partitions,
        c.messages_in_per_sec,
        human_bytes(c.bytes_in_per_sec as u64),
        human_bytes(c.bytes_out_per_sec as u64),
        c.connections,
    );
    let mut nodes = Table::new(&["NODE", "HOST", "PORT", "RACK", "STATE", "ROLES", "CONTROLLER"]);
    for node in &c.nodes {
        nodes.row(vec![
            node.node_id.to_string(),
            node.host.clone(),
            node.port.to_string(),
            node.rack.clone().unwrap_or_else(|| "-".into()),
            node.state.clone().unwrap_or_else(|| "-".into()),
            if node.roles.is_empty() { "-".to_string() } else { node.roles.join(",") },
            if node.is_controller { "yes" } else { "" }.into(),
        ]);
    }
    out.push_str(&nodes.render());
    out
}
