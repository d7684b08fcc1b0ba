//! Request metrics for every HTTP route, and `/metrics`: the Prometheus text format, with the
//! state gauges (partitions, log sizes, group lag) refreshed from the node at scrape time.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::admin;
use super::error::ApiError;
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

/// Prometheus metrics of this node (text format 0.0.4).
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain", body = String)))]
pub async fn metrics(State(http): State<super::State>) -> Result<Response, ApiError> {
    let broker = http.broker.clone();
    let text = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        refresh_gauges(&broker);
        let text = broker.metrics.render();
        broker.metrics.scrape_seconds.observe(start.elapsed().as_secs_f64());
        text
    })
    .await
    .map_err(|e| ApiError::internal(format!("rendering metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// Scrapes are serialized: a gauge family is reset and refilled as one step.
static REFRESH: Mutex<()> = Mutex::new(());

fn refresh_gauges(broker: &Arc<Broker>) {
    let _serial = REFRESH.lock().unwrap_or_else(|p| p.into_inner());
    let metrics = &broker.metrics;
    let image = broker.controller.image();
    let node_id = broker.settings.node_id;
    let (mut hosted, mut leaders) = (0, 0);
    let mut max_lag = 0i64;
    metrics.log_size.reset();
    metrics.log_end_offset.reset();
    metrics.log_start_offset.reset();
    for topic in image.topics.values() {
        for p in &topic.partitions {
            if p.leader == Some(node_id) {
                leaders += 1;
            }
            if let Some(partition) = broker.replicas.get(&topic.name, p.partition) {
                hosted += 1;
                let labels = [topic.name.as_str(), &p.partition.to_string()];
                metrics.log_size.with_label_values(&labels).set(partition.size_bytes() as i64);
                metrics.log_end_offset.with_label_values(&labels).set(partition.log_end_offset());
                metrics.log_start_offset.with_label_values(&labels).set(partition.log_start_offset());
                for (_, follower_end) in partition.follower_log_end_offsets() {
                    max_lag = max_lag.max(partition.log_end_offset() - follower_end.max(0));
                }
            }
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

    metrics.group_lag.reset();
    metrics.group_offset.reset();
    metrics.group_members.reset();
    let mut groups: Vec<String> = broker.groups.membership.list().into_iter().map(|g| g.group_id).collect();
    groups.extend(broker.groups.offsets.groups_with_offsets());
    groups.sort();
    groups.dedup();
    for group_id in groups {
        let Some(group) = admin::group_loaded(broker, &group_id) else { continue };
        metrics.group_members.with_label_values(&[group_id.as_str()]).set(group.members.len() as i64);
        for row in &group.offsets {
            let labels = [group_id.as_str(), row.topic.as_str(), &row.partition.to_string()];
            metrics.group_offset.with_label_values(&labels).set(row.committed_offset);
            if let Some(lag) = row.lag {
                metrics.group_lag.with_label_values(&labels).set(lag);
            }
        }
    }
}
