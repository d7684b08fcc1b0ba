//! `runnel group list|describe|delete`, over `/v1/groups`. `describe` prints the per-partition
//! committed offset / log end offset / lag table of `kafka-consumer-groups.sh --describe`.

use std::collections::HashMap;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use super::api::{Group, GroupList};
use super::client::{Body, Client};
use super::output::{print_json, write_stdout, Output, Table};
use super::Connection;

#[derive(Args, Debug)]
pub struct GroupCommand {
    #[command(subcommand)]
    action: GroupAction,
}

#[derive(Subcommand, Debug)]
enum GroupAction {
    /// List consumer groups with their state, members and total lag.
    #[command(visible_alias = "ls")]
    List,
    /// Show a group's state, members and per-partition lag.
    Describe { group: String },
    /// Delete a group and its committed offsets (refused while it has members).
    #[command(visible_alias = "rm")]
    Delete { group: String },
}

pub async fn run(command: GroupCommand, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let output = conn.output;
    match command.action {
        GroupAction::List => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "groups"])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let mut list: GroupList = serde_json::from_value(raw)?;
            list.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
            let mut table = Table::new(&["GROUP", "STATE", "MEMBERS", "PROTOCOL", "TOTAL-LAG", "COORDINATOR"]);
            for g in &list.groups {
                table.row(vec![
                    g.group_id.clone(),
                    g.state.clone(),
                    g.members.to_string(),
                    protocol(&g.protocol_type, &g.protocol),
                    g.total_lag.to_string(),
                    g.coordinator.map_or_else(|| "-".into(), |c| c.to_string()),
                ]);
            }
            write_stdout(&table.render())?;
        }
        GroupAction::Describe { group } => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "groups", &group])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let group: Group = serde_json::from_value(raw)?;
            write_stdout(&render_group(&group))?;
        }
        GroupAction::Delete { group } => {
            client.send(Method::DELETE, client.url(&["v1", "groups", &group]), Body::None).await?;
            if output == Output::Json {
                return print_json(&json!({ "deleted": group }));
            }
            write_stdout(&format!("deleted group '{group}'\n"))?;
        }
    }
    Ok(())
}

fn protocol(protocol_type: &str, protocol: &str) -> String {
    match (protocol_type.is_empty(), protocol.is_empty()) {
        (true, true) => "-".into(),
        (false, true) => protocol_type.into(),
        (true, false) => protocol.into(),
        (false, false) => format!("{protocol_type}/{protocol}"),
    }
}

fn render_group(g: &Group) -> String {
    let mut out = format!(
        "Group:       {}\nState:       {}\nProtocol:    {}\nCoordinator: {}\nMembers:     {}\nTotal lag:   {}\n\n",
        g.group_id,
        g.state,
        protocol(&g.protocol_type, &g.protocol),
        g.coordinator.map_or_else(|| "-".into(), |c| c.to_string()),
        g.members.len(),
        g.total_lag,
    );
    if !g.members.is_empty() {
        let mut members = Table::new(&["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]);
        for m in &g.members {
            let assignment: Vec<String> = m
                .assignment
                .iter()
                .map(|a| {
                    let partitions: Vec<String> = a.partitions.iter().map(|p| p.to_string()).collect();
                    format!("{}:{}", a.topic, partitions.join(","))
                })
                .collect();
            members.row(vec![
                m.member_id.clone(),
                m.group_instance_id.clone().unwrap_or_else(|| "-".into()),
                m.client_id.clone(),
                m.client_host.clone(),
                if assignment.is_empty() { "-".into() } else { assignment.join(" ") },
            ]);
        }
        out.push_str(&members.render());
        out.push('\n');
    }
    // Consumer and host columns as kafka-consumer-groups.sh shows them: who owns the partition.
    let members: HashMap<&str, _> = g.members.iter().map(|m| (m.member_id.as_str(), m)).collect();
    let mut offsets: Vec<_> = g.offsets.iter().collect();
    offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let mut table = Table::new(&[
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for o in offsets {
        let member = o.member_id.as_deref().and_then(|id| members.get(id));
        table.row(vec![
            o.topic.clone(),
            o.partition.to_string(),
            if o.committed_offset < 0 { "-".into() } else { o.committed_offset.to_string() },
            o.log_end_offset.map_or_else(|| "-".into(), |v| v.to_string()),
            o.lag.map_or_else(|| "-".into(), |v| v.to_string()),
            o.member_id.clone().unwrap_or_else(|| "-".into()),
            member.map_or_else(|| "-".into(), |m| m.client_host.clone()),
            member.map_or_else(|| "-".into(), |m| m.client_id.clone()),
        ]);
    }
    out.push_str(&table.render());
    out
}
