//! Request metrics for every HTTP route, and `/metrics`: the Prometheus text format, with the
//! state gauges (partitions, log sizes, group lag) refreshed from the node at scrape time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::admin;
use super::error::ApiError;
use crate::metrics::StateSeries;
use crate::server::Broker;

pub async fn track(State(http): State<super::State>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let method = request.method().clone();
    let start = Instant::now();
    let response = next.run(request).await;
    if let Some(route) = route {
        http.broker.metrics.http_request(
            method.as_str(),
            &route,
            response.status().as_u16(),
            start.elapsed().as_secs_f64(),
        );
    }
    response
}

/// Prometheus metrics of this node (text format 0.0.4). They name every topic and group, so
/// they need DESCRIBE on the cluster; checked here, on the request's task: the rendering on the
/// blocking pool runs outside the client's scope and sees everything.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain", body = String)))]
pub async fn metrics(State(http): State<super::State>) -> Result<Response, ApiError> {
    super::auth::require(
        &http.broker,
        crate::security::acl::Operation::Describe,
        crate::security::acl::ResourceType::Cluster,
        crate::security::acl::CLUSTER_NAME,
    )?;
    let start = Instant::now();
    // The groups this node coordinates, their lag completed with the high watermarks of the
    // partitions other nodes lead. Outside the client's scope (a task of its own, the blocking
    // pool), as the node: the scrape sees every topic.
    let broker = http.broker.clone();
    let mut views = tokio::task::spawn_blocking(move || coordinated_groups(&broker))
        .await
        .map_err(|e| ApiError::internal(format!("listing groups: {e}")))?;
    let filler = http.clone();
    views = tokio::spawn(async move {
        admin::fill_remote_lag(&filler, &mut views.iter_mut().collect::<Vec<_>>()).await;
        views
    })
    .await
    .map_err(|e| ApiError::internal(format!("asking for high watermarks: {e}")))?;
    let broker = http.broker.clone();
    let text = tokio::task::spawn_blocking(move || {
        // Refreshed and rendered as one step: a concurrent scrape's reset of a family between
        // this one's refresh and render would leave it out of this one's text.
        let _serial = REFRESH.lock().unwrap_or_else(|p| p.into_inner());
        let state = refresh_gauges(&broker, &views);
        let text = broker.metrics.render(&state);
        broker.metrics.scrape_seconds.observe(start.elapsed().as_secs_f64());
        text
    })
    .await
    .map_err(|e| ApiError::internal(format!("rendering metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// The groups this node coordinates (leads their `__consumer_offsets` partition), as
/// `group_loaded` sees them: each group is reported by one node of a cluster, the one that
/// knows its members, not by every node holding a copy of its offsets. Blocks while offsets
/// load: call it on the blocking pool.
fn coordinated_groups(broker: &Arc<Broker>) -> Vec<admin::GroupView> {
    let (node_id, image) = (broker.settings.node_id, broker.controller.image());
    admin::known_group_ids(broker)
        .into_iter()
        .filter(|id| super::kafka::coordinator_route(node_id, &image, id) == super::kafka::Route::Here)
        .filter_map(|id| admin::group_loaded(broker, &id))
        .collect()
}

/// A log's series: topic, partition (None when summed per topic), size, log end, log start.
type LogRow<'a> = (&'a str, Option<String>, i64, i64, i64);

/// A per-partition series' labels; `partition` is `None` when summed per topic.
fn partition_labels<'a>(topic: &'a str, partition: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
    match partition {
        Some(p) => vec![("topic", topic), ("partition", p)],
        None => vec![("topic", topic)],
    }
}

/// Scrapes are serialized: a gauge family is reset, refilled and rendered as one step.
static REFRESH: Mutex<()> = Mutex::new(());

/// Sets the node-wide state gauges and writes the per-partition families: per partition, or
/// summed per topic under `metrics.aggregate` (Redpanda's `aggregate_metrics`), which keeps a
/// scrape of 50,000 partitions to a series per topic.
/// The caller holds `REFRESH` until it has rendered.
fn refresh_gauges(broker: &Arc<Broker>, views: &[admin::GroupView]) -> StateSeries {
    let metrics = &broker.metrics;
    let aggregate = broker.settings.metrics_aggregate;
    let image = broker.controller.image();
    let node_id = broker.settings.node_id;
    let (mut hosted, mut leaders) = (0, 0);
    let (mut under_min_isr, mut at_min_isr) = (0, 0);
    let mut max_lag = 0i64;
    let mut logs: Vec<LogRow> = Vec::new();
    // High watermark minus last stable offset of the partitions this node leads: how far
    // read_committed consumers trail read_uncommitted ones behind open transactions.
    let mut lso_lags: Vec<(&str, Option<String>, i64)> = Vec::new();
    for topic in image.topics.values() {
        let mut sum: Option<(i64, i64, i64)> = None;
        let mut lso_sum: Option<i64> = None;
        for p in &topic.partitions {
            if p.leader == Some(node_id) {
                leaders += 1;
            }
            if let Some(partition) = broker.replicas.get(&topic.name, p.partition) {
                hosted += 1;
                let (size, end, start) =
                    (partition.size_bytes() as i64, partition.log_end_offset(), partition.log_start_offset());
                if aggregate {
                    let s = sum.get_or_insert((0, 0, 0));
                    *s = (s.0 + size, s.1 + end, s.2 + start);
                } else {
                    logs.push((&topic.name, Some(p.partition.to_string()), size, end, start));
                }
                for (_, follower_end) in partition.follower_log_end_offsets() {
                    max_lag = max_lag.max(end - follower_end.max(0));
                }
                if p.leader == Some(node_id) && partition.is_leader() {
                    let isr = partition.isr().len();
                    let min = partition.config().map_or(1, |c| c.min_insync_replicas as usize);
                    under_min_isr += i64::from(isr < min);
                    at_min_isr += i64::from(isr == min);
                }
                if let (true, Ok(lso)) = (partition.is_leader(), partition.last_stable_offset()) {
                    let lag = (partition.high_watermark() - lso).max(0);
                    if aggregate {
                        *lso_sum.get_or_insert(0) += lag;
                    } else {
                        lso_lags.push((&topic.name, Some(p.partition.to_string()), lag));
                    }
                }
            }
        }
        if let Some((size, end, start)) = sum {
            logs.push((&topic.name, None, size, end, start));
        }
        if let Some(lag) = lso_sum {
            lso_lags.push((&topic.name, None, lag));
        }
    }
    metrics.partition_count.set(hosted);
    metrics.leader_count.set(leaders);
    // Kafka's split: a leader reports its own under-replicated and reassigning partitions; the
    // active controller reports the cluster-wide ones (offline partitions, broker counts) and
    // every other node 0, so a sum over the cluster's nodes counts each partition once.
    let led = admin::PartitionHealth::of(
        image.topics.values().flat_map(|t| &t.partitions).filter(|p| p.leader == Some(node_id)),
    );
    metrics.under_replicated_partitions.set(led.under_replicated as i64);
    metrics.under_min_isr_partitions.set(under_min_isr);
    metrics.at_min_isr_partitions.set(at_min_isr);
    metrics.reassigning_partitions.set(led.reassigning as i64);
    let active = broker.controller.leader_id() == Some(node_id);
    let all = admin::PartitionHealth::of(image.topics.values().flat_map(|t| &t.partitions));
    let fenced = image.brokers.values().filter(|b| b.fenced).count();
    metrics.active_controller.set(i64::from(active));
    metrics.offline_partitions.set(if active { all.offline as i64 } else { 0 });
    metrics.fenced_brokers.set(if active { fenced as i64 } else { 0 });
    metrics.active_brokers.set(if active { (image.brokers.len() - fenced) as i64 } else { 0 });
    metrics.replica_max_lag.set(max_lag);
    metrics.unclean_leader_elections.set(broker.controller.unclean_elections() as i64);
    metrics.metadata_storage_retries.set(broker.controller.storage_retries() as i64);

    let mut state = StateSeries::default();
    let summed = if aggregate { ", summed over the topic's partitions on this node" } else { "" };
    fn labels<'a>((topic, partition, ..): &'a LogRow<'a>) -> Vec<(&'static str, &'a str)> {
        partition_labels(topic, partition.as_deref())
    }
    state.gauge(
        "kafka_log_log_size",
        &format!("Bytes on disk of a partition's log{summed}"),
        logs.iter().map(|log| (labels(log), log.2)),
    );
    state.gauge(
        "kafka_log_log_log_end_offset",
        &format!("Log end offset of a partition{summed}"),
        logs.iter().map(|log| (labels(log), log.3)),
    );
    state.gauge(
        "kafka_log_log_log_start_offset",
        &format!("Log start offset of a partition{summed}"),
        logs.iter().map(|log| (labels(log), log.4)),
    );

    state.gauge(
        "runnel_partition_lso_lag",
        &format!("High watermark minus last stable offset of a partition this node leads (records held back from read_committed consumers by open transactions){summed}"),
        lso_lags.iter().map(|(topic, partition, lag)| (partition_labels(topic, partition.as_deref()), *lag)),
    );
    let txns = broker.txn.list();
    let now = crate::log::now_ms();
    let mut by_state: BTreeMap<&'static str, i64> = BTreeMap::new();
    let mut oldest_open_ms = 0i64;
    for t in &txns {
        *by_state.entry(t.state.name()).or_default() += 1;
        if t.state.is_open() && t.start_ms >= 0 {
            oldest_open_ms = oldest_open_ms.max(now - t.start_ms);
        }
    }
    state.gauge(
        "runnel_transactions",
        "Transactional ids this node coordinates, per state (Ongoing, PrepareCommit, ... as kafka-transactions.sh names them)",
        by_state.iter().map(|(name, count)| ([("state", *name)], *count)),
    );
    metrics.transaction_oldest_open_ms.set(oldest_open_ms);

    metrics.group_members.reset();
    // Per partition (group, row, partition label) borrowed from the views, and lag and
    // committed offsets summed per group and topic (kafka_exporter's `_sum` series, always
    // written).
    let mut sums: std::collections::BTreeMap<(&str, &str), (i64, i64)> = std::collections::BTreeMap::new();
    let mut rows: Vec<(&str, &admin::LagRow, String)> = Vec::new();
    for group in views {
        let group_id = &group.group_id;
        metrics.group_members.with_label_values(&[group_id.as_str()]).set(group.members.len() as i64);
        for row in &group.offsets {
            let sum = sums.entry((group_id, &row.topic)).or_default();
            sum.0 = sum.0.saturating_add(row.lag.unwrap_or(0));
            sum.1 = sum.1.saturating_add(row.committed_offset);
            if !aggregate {
                rows.push((group_id, row, row.partition.to_string()));
            }
        }
    }
    fn row_labels<'a>((group, row, partition): &'a (&str, &admin::LagRow, String)) -> [(&'static str, &'a str); 3] {
        [("consumergroup", group), ("topic", row.topic.as_str()), ("partition", partition.as_str())]
    }
    if !aggregate {
        state.gauge(
            "kafka_consumergroup_lag",
            "High watermark minus committed offset, per group and partition",
            rows.iter().filter_map(|r| r.1.lag.map(|lag| (row_labels(r), lag))),
        );
        state.gauge(
            "kafka_consumergroup_current_offset",
            "Committed offset, per group and partition",
            rows.iter().map(|r| (row_labels(r), r.1.committed_offset)),
        );
    }
    fn sum_labels<'a>(&(group, topic): &(&'a str, &'a str)) -> [(&'static str, &'a str); 2] {
        [("consumergroup", group), ("topic", topic)]
    }
    state.gauge(
        "kafka_consumergroup_lag_sum",
        "High watermark minus committed offset, summed over a topic's partitions, per group",
        sums.iter().map(|(k, v)| (sum_labels(k), v.0)),
    );
    state.gauge(
        "kafka_consumergroup_current_offset_sum",
        "Committed offsets summed over a topic's partitions, per group",
        sums.iter().map(|(k, v)| (sum_labels(k), v.1)),
    );
    state
}
