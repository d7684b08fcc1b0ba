//! `runnel topic create|list|describe|delete|config`, over `/v1/topics`.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use super::api::{Topic, TopicConfigs, TopicSummary};
use super::client::{Body, Client, REQUEST_TIMEOUT};
use super::output::{human_bytes, id_list, print_json, write_stdout, Output, Table};
use super::{parse_key_value, Connection};

#[derive(Args, Debug)]
pub struct TopicCommand {
    #[command(subcommand)]
    action: TopicAction,
}

#[derive(Subcommand, Debug)]
enum TopicAction {
    /// Create a topic.
    Create {
        name: String,
        /// Number of partitions (the node's default if omitted).
        #[arg(short, long)]
        partitions: Option<i32>,
        /// Replicas per partition (the node's default if omitted).
        #[arg(short = 'r', long)]
        replication_factor: Option<i16>,
        /// A topic config override, e.g. `-c retention.ms=86400000`; repeatable.
        #[arg(short, long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        config: Vec<(String, String)>,
    },
    /// List topics.
    #[command(visible_alias = "ls")]
    List {
        /// Include internal topics (`__consumer_offsets`).
        #[arg(long)]
        internal: bool,
        /// Only topics whose names start with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Print one page of at most this many topics (1..=5000) and the `--after` of the next
        /// page, instead of every page.
        #[arg(long)]
        limit: Option<usize>,
        /// Start after this topic name (the cursor a previous page printed).
        #[arg(long, value_name = "TOPIC")]
        after: Option<String>,
        /// Topics per request while following every page (the node's default if omitted).
        #[arg(long, hide = true)]
        page_size: Option<usize>,
    },
    /// Show a topic's partitions (leader, replicas, ISR, offsets, size) and config overrides.
    Describe { name: String },
    /// Delete a topic and its data.
    #[command(visible_alias = "rm")]
    Delete { name: String },
    /// Show a topic's effective configs, or change them with --set / --delete.
    Config {
        name: String,
        /// Set an override; repeatable.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// Remove an override (back to the default); repeatable.
        #[arg(long, value_name = "KEY")]
        delete: Vec<String>,
    },
}

pub async fn run(command: TopicCommand, conn: &Connection) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let output = conn.output;
    match command.action {
        TopicAction::Create { name, partitions, replication_factor, config } => {
            let mut body = json!({ "name": name });
            if let Some(partitions) = partitions {
                body["partitions"] = json!(partitions);
            }
            if let Some(replication_factor) = replication_factor {
                body["replication_factor"] = json!(replication_factor);
            }
            if !config.is_empty() {
                body["configs"] = json!(config.into_iter().collect::<BTreeMap<_, _>>());
            }
            let url = client.url(&["v1", "topics"]);
            let raw: serde_json::Value = client.call(Method::POST, url, Body::Json(body), REQUEST_TIMEOUT).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let topic: Topic = serde_json::from_value(raw)?;
            write_stdout(&format!(
                "created topic '{}' ({} partitions, replication factor {})\n",
                topic.name,
                topic.partitions.len(),
                topic.replication_factor
            ))?;
        }
        TopicAction::List { internal, prefix, limit, after, page_size } => {
            // The node answers a page at a time (`next` is the cursor of the one after);
            // without --limit every page is fetched, a server-sized page per request.
            let mut topics: Vec<serde_json::Value> = Vec::new();
            let mut cursor = after;
            let (next, total) = loop {
                let mut url = client.url(&["v1", "topics"]);
                {
                    let mut query = url.query_pairs_mut();
                    query.append_pair("internal", if internal { "true" } else { "false" });
                    if let Some(prefix) = &prefix {
                        query.append_pair("prefix", prefix);
                    }
                    if let Some(limit) = limit.or(page_size) {
                        query.append_pair("limit", &limit.to_string());
                    }
                    if let Some(cursor) = &cursor {
                        query.append_pair("after", cursor);
                    }
                }
                let mut page: serde_json::Value = client.get(url).await?;
                if limit.is_some() && output == Output::Json {
                    return print_json(&page);
                }
                let next = page["next"].as_str().map(str::to_string);
                let total = page["total"].as_u64().unwrap_or(0);
                if let serde_json::Value::Array(page_topics) = page["topics"].take() {
                    topics.extend(page_topics);
                }
                match next {
                    Some(next) if limit.is_none() => cursor = Some(next),
                    next => break (next, total),
                }
            };
            if output == Output::Json {
                // Every page's topics as one answer of the API's shape, with no next page.
                return print_json(&json!({ "topics": topics, "next": null, "total": total }));
            }
            let mut topics: Vec<TopicSummary> =
                topics.into_iter().map(serde_json::from_value).collect::<Result<_, _>>()?;
            topics.sort_by(|a, b| a.name.cmp(&b.name));
            let mut table = Table::new(&["TOPIC", "PARTITIONS", "REPLICAS", "MESSAGES", "SIZE", "MSG/S", "URP"]);
            for t in &topics {
                let name = if t.internal { format!("{} (internal)", t.name) } else { t.name.clone() };
                table.row(vec![
                    name,
                    t.partitions.to_string(),
                    t.replication_factor.to_string(),
                    t.messages.to_string(),
                    human_bytes(t.size_bytes),
                    format!("{:.1}", t.messages_in_per_sec),
                    t.under_replicated_partitions.to_string(),
                ]);
            }
            let mut text = table.render();
            if let Some(next) = &next {
                text.push_str(&format!("{} of {total} topics; next page: --after {next}\n", topics.len()));
            }
            write_stdout(&text)?;
        }
        TopicAction::Describe { name } => {
            let raw: serde_json::Value = client.get(client.url(&["v1", "topics", &name])).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let topic: Topic = serde_json::from_value(raw)?;
            write_stdout(&render_topic(&topic))?;
        }
        TopicAction::Delete { name } => {
            client.send(Method::DELETE, client.url(&["v1", "topics", &name]), Body::None).await?;
            if output == Output::Json {
                return print_json(&json!({ "deleted": name }));
            }
            write_stdout(&format!("deleted topic '{name}'\n"))?;
        }
        TopicAction::Config { name, set, delete } => {
            let url = client.url(&["v1", "topics", &name, "configs"]);
            let changed = !set.is_empty() || !delete.is_empty();
            if changed {
                let body = json!({
                    "set": set.iter().cloned().collect::<BTreeMap<_, _>>(),
                    "delete": delete,
                });
                client.send(Method::PUT, url.clone(), Body::Json(body)).await?;
            }
            let raw: serde_json::Value = client.get(url).await?;
            if output == Output::Json {
                return print_json(&raw);
            }
            let configs: TopicConfigs = serde_json::from_value(raw)?;
            let mut out = String::new();
            if changed {
                out.push_str(&format!("updated topic '{name}'\n\n"));
            }
            let mut table = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
            for c in &configs.configs {
                table.row(vec![c.name.clone(), c.value.clone(), c.source.clone()]);
            }
            out.push_str(&table.render());
            write_stdout(&out)?;
        }
    }
    Ok(())
}

fn render_topic(topic: &Topic) -> String {
    let messages: i64 = topic.partitions.iter().filter_map(|p| Some(p.high_watermark? - p.log_start_offset?)).sum();
    let size: u64 = topic.partitions.iter().filter_map(|p| p.size_bytes).sum();
    let mut out = format!(
        "Topic:       {}{}\nTopic ID:    {}\nPartitions:  {}\nReplication: {}\n\
         Messages:    {messages}\nSize:        {}\n\n",
        topic.name,
        if topic.internal { " (internal)" } else { "" },
        topic.topic_id,
        topic.partitions.len(),
        topic.replication_factor,
        human_bytes(size),
    );
    let mut table = Table::new(&[
        "PARTITION",
        "LEADER",
        "REPLICAS",
        "ISR",
        "LEADER-EPOCH",
        "LOG-START",
        "HIGH-WATERMARK",
        "LOG-END",
        "SIZE",
        "STATUS",
    ]);
    let mut partitions: Vec<_> = topic.partitions.iter().collect();
    partitions.sort_by_key(|p| p.partition);
    for p in partitions {
        let leader = p.leader.filter(|&l| l >= 0).map_or_else(|| "none".to_string(), |l| l.to_string());
        let status = if p.offline {
            "offline"
        } else if p.under_replicated {
            "under-replicated"
        } else {
            "ok"
        };
        table.row(vec![
            p.partition.to_string(),
            leader,
            id_list(&p.replicas),
            id_list(&p.isr),
            p.leader_epoch.to_string(),
            or_dash(p.log_start_offset),
            or_dash(p.high_watermark),
            or_dash(p.log_end_offset),
            p.size_bytes.map_or_else(|| "-".into(), human_bytes),
            status.into(),
        ]);
    }
    out.push_str(&table.render());
    out.push_str("\nConfig overrides:");
    if topic.configs.is_empty() {
        out.push_str(" none\n");
    } else {
        out.push('\n');
        for (key, value) in &topic.configs {
            out.push_str(&format!("  {key}={value}\n"));
        }
    }
    out
}

/// A value the answering node may not know (a partition it does not host).
fn or_dash(value: Option<i64>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}
