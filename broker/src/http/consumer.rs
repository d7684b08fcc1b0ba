//! HTTP consumer instances (Confluent REST Proxy v2): each is a real member of its consumer
//! group. A task per subscribed instance runs the classic group protocol through the same
//! JoinGroup / SyncGroup / Heartbeat / LeaveGroup handlers a Kafka client reaches, offers the
//! `range` and `roundrobin` assignors (what librdkafka and the Java client offer by default),
//! computes the assignment when it is elected leader, and so rebalances with Kafka-protocol
//! members of the same group.
//!
//! Invariants: a poll never holds the instance state across its long wait (a rebalance must
//! not wait for a poll); records of a partition are returned only while it is assigned, and
//! positions only move forward by what a response returned (or by an explicit seek); the
//! number of instances is bounded and idle ones expire after `consumer.instance.timeout.ms`.
//!
//! On a cluster an instance lives on the node that created it (its `base_uri` names that node);
//! its group calls go to the group's coordinator and its fetches and offset look-ups to each
//! partition's leader, in process when that is this node, else forwarded to that broker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as HeartbeatTopicPartitions;
use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
use kafka_protocol::messages::{
    fetch_request, join_group_request, leave_group_request, list_offsets_request, offset_commit_request,
    offset_fetch_request, sync_group_request, BrokerId, ConsumerGroupHeartbeatRequest, FetchRequest,
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListOffsetsRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::{watch, Notify};

use super::error::{ApiError, ApiResult};
use super::kafka::Route;
use super::records::{self, ReadRecord};
use super::{kafka, Http, LONG_POLL_MAX_MS};
use crate::group::embedded;
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers::{self, str_bytes, topic_name};

const SESSION_TIMEOUT_MS: i32 = 30_000;
const REBALANCE_TIMEOUT_MS: i32 = 30_000;
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);
/// How long a forwarded JoinGroup/SyncGroup may stay parked on the coordinator: the rebalance
/// timeout, the first rebalance's delay, and room for the answer.
const REBALANCE_CALL_TIMEOUT: Duration = Duration::from_millis(REBALANCE_TIMEOUT_MS as u64 + 15_000);
/// Any other forwarded group or offsets call (an offset commit waits up to 5 s for the ISR).
const GROUP_CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A group request on the group's coordinator (the leader of its `__consumer_offsets`
/// partition): handler `$handler` in process when that is this node (or no coordinator is known
/// yet, so the handler answers what Kafka answers), else the same request forwarded to it.
macro_rules! on_coordinator {
    ($http:expr, $group:expr, $handler:ident, $api:expr, $request:expr, $timeout:expr) => {{
        let http: &Http = $http;
        let request = $request;
        match kafka::coordinator_route(http.broker.settings.node_id, &http.broker.controller.image(), $group) {
            Route::Here => handlers::$handler::handle(&http.broker, &kafka::header($api), request)
                .await
                .ok_or_else(|| ApiError::internal(concat!(stringify!($handler), " returned no response"))),
            Route::Peer(node) => kafka::forward(http, node, $api, &request, $timeout).await,
        }
    }};
}
/// Confluent's `consumer.instance.timeout.ms` default.
pub const INSTANCE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// The longest `consumer.instance.timeout.ms` a client may ask for: a forgotten instance holds
/// one of the node's instance slots (`--http-consumer-instances-max`) for at most this long.
pub const INSTANCE_TIMEOUT_MS_MAX: u64 = 3_600_000;
/// Confluent's `consumer.request.timeout.ms` default: how long a poll waits for records.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// Default and ceiling of `max_bytes` of one poll.
pub const POLL_MAX_BYTES: usize = 64 << 20;
/// Records one poll decodes at most (a fetch of tiny or empty records is not bounded by its
/// bytes' budget, which counts keys and values).
const POLL_MAX_RECORDS: usize = 10_000;
/// Pause before a poll fetches again after partition errors (a leader moving, a topic being
/// deleted): the Java client's `retry.backoff.ms`. Without it the loop spun for the whole
/// timeout.
const POLL_RETRY_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Binary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    None,
}

/// How an instance takes part in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat; the instance computes `range`/`roundrobin` as leader.
    Classic,
    /// ConsumerGroupHeartbeat (KIP-848): the coordinator assigns with the server assignor
    /// `remote_assignor` (the group's default when `None`).
    Consumer { remote_assignor: Option<String> },
}

pub struct Settings {
    pub protocol: GroupProtocol,
    pub format: Format,
    pub offset_reset: OffsetReset,
    pub auto_commit: bool,
    pub instance_timeout: Duration,
    pub request_timeout_ms: u64,
    /// The HTTP client that created the instance: its address is the member's `client_host`,
    /// its principal is who the membership acts as, and only that principal may use the
    /// instance (others are told it does not exist).
    pub client: crate::server::ClientContext,
}

type TopicPartition = (String, i32);

#[derive(Default)]
struct State {
    subscription: Vec<String>,
    /// Partitions assigned by hand (`POST .../assignments`): no group membership.
    manual: bool,
    member_id: String,
    /// The classic generation, or the consumer protocol's member epoch (what OffsetCommit
    /// carries either way).
    generation_id: i32,
    /// Why the membership stopped for good (consumer protocol: UNSUPPORTED_ASSIGNOR,
    /// GROUP_MAX_SIZE_REACHED, ...): a Kafka error code and message, returned by every poll.
    fatal: Option<(i16, String)>,
    assignment: Vec<TopicPartition>,
    /// Next offset to fetch, per assigned partition.
    positions: HashMap<TopicPartition, i64>,
    /// Offset after the last record returned, per partition (what an empty commit commits).
    consumed: HashMap<TopicPartition, i64>,
    /// Changes on every assignment change and seek: a poll that started before drops its result.
    epoch: u64,
}

pub struct Instance {
    pub group: String,
    pub name: String,
    pub settings: Settings,
    state: Mutex<State>,
    last_used: Mutex<Instant>,
    /// Wakes a parked poll when the assignment changes.
    changed: Notify,
    /// Polls of one instance run one at a time.
    poll_lock: tokio::sync::Mutex<()>,
    /// Stops the membership task.
    stop: watch::Sender<bool>,
    member_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Instance {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }

    pub fn subscription(&self) -> Vec<String> {
        self.lock().subscription.clone()
    }

    pub fn assignment(&self) -> Vec<TopicPartition> {
        let mut assignment = self.lock().assignment.clone();
        assignment.sort();
        assignment
    }
}

pub struct Consumers {
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
}

impl Consumers {
    pub fn new() -> Consumers {
        Consumers { instances: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Instance>>> {
        self.instances.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn not_found(group: &str, name: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        40403,
        format!("consumer instance '{name}' of group '{group}' not found"),
    )
}

pub fn create(http: &Http, group: &str, name: &str, settings: Settings) -> ApiResult<Arc<Instance>> {
    if group.is_empty() {
        return Err(ApiError::invalid("group id is empty"));
    }
    let mut instances = http.consumers.lock();
    if instances.contains_key(&(group.to_string(), name.to_string())) {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            40902,
            format!("consumer instance '{name}' already exists in group '{group}'"),
        ));
    }
    // Each instance holds a group membership and a task: bounded per node and per principal.
    let settings_of_node = &http.broker.settings;
    let node_max = settings_of_node.http_consumer_instances_max;
    if instances.len() >= node_max {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            50302,
            format!("too many consumer instances on this node (at most {node_max}: --http-consumer-instances-max)"),
        ));
    }
    let principal_max = settings_of_node.http_consumer_instances_max_per_principal;
    let principal = &settings.client.principal;
    if instances.values().filter(|i| i.settings.client.principal == *principal).count() >= principal_max {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            50302,
            format!(
                "too many consumer instances of {principal} on this node (at most {principal_max}: \
                 --http-consumer-instances-max-per-principal)"
            ),
        ));
    }
    let (stop, _) = watch::channel(false);
    let instance = Arc::new(Instance {
        group: group.to_string(),
        name: name.to_string(),
        settings,
        state: Mutex::new(State::default()),
        last_used: Mutex::new(Instant::now()),
        changed: Notify::new(),
        poll_lock: tokio::sync::Mutex::new(()),
        stop,
        member_task: Mutex::new(None),
    });
    instances.insert((group.to_string(), name.to_string()), instance.clone());
    Ok(instance)
}

pub fn get(http: &Http, group: &str, name: &str) -> ApiResult<Arc<Instance>> {
    let instance = http
        .consumers
        .lock()
        .get(&(group.to_string(), name.to_string()))
        .filter(|i| owned_by_requester(i))
        .cloned()
        .ok_or_else(|| not_found(group, name))?;
    instance.touch();
    Ok(instance)
}

/// Whether the request being served comes from the principal that created `instance` (the
/// node's own calls always do).
fn owned_by_requester(instance: &Instance) -> bool {
    crate::server::current_client().is_none_or(|c| c.principal == instance.settings.client.principal)
}

/// Removes an instance: commits what it returned (with auto commit) and leaves the group.
pub async fn delete(http: &Arc<Http>, group: &str, name: &str) -> ApiResult<()> {
    let instance = {
        let mut instances = http.consumers.lock();
        let key = (group.to_string(), name.to_string());
        instances.get(&key).filter(|i| owned_by_requester(i)).ok_or_else(|| not_found(group, name))?;
        instances.remove(&key).ok_or_else(|| not_found(group, name))?
    };
    close(http, &instance).await;
    Ok(())
}

async fn close(http: &Arc<Http>, instance: &Arc<Instance>) {
    if instance.settings.auto_commit {
        let _ = commit_consumed(http, instance).await;
    }
    stop_membership(instance).await;
    let (member_id, manual) = {
        let state = instance.lock();
        (state.member_id.clone(), state.manual)
    };
    if !member_id.is_empty() && !manual {
        leave(http, instance, &member_id).await;
    }
}

/// Expires instances idle for longer than their instance timeout (checked every second).
pub async fn expire_idle(http: Arc<Http>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticker.tick().await;
        let expired: Vec<Arc<Instance>> = {
            let mut instances = http.consumers.lock();
            let keys: Vec<(String, String)> = instances
                .iter()
                .filter(|(_, i)| i.idle_for() > i.settings.instance_timeout)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| instances.remove(k)).collect()
        };
        for instance in expired {
            tracing::info!(group = %instance.group, instance = %instance.name, "consumer instance expired");
            close(&http, &instance).await;
        }
    }
}

/// Closes every instance (node shutdown).
pub async fn close_all(http: &Arc<Http>) {
    let all: Vec<Arc<Instance>> = http.consumers.lock().drain().map(|(_, i)| i).collect();
    for instance in all {
        close(http, &instance).await;
    }
}

async fn stop_membership(instance: &Instance) {
    // `send_replace`, not `send`: `send` stores nothing while no task listens.
    instance.stop.send_replace(true);
    let task = instance.member_task.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(task) = task {
        let _ = task.await;
    }
}

/// Subscribes to `topics` (replacing any subscription or manual assignment) and starts the
/// group membership.
pub async fn subscribe(http: &Arc<Http>, instance: &Arc<Instance>, topics: Vec<String>) -> ApiResult<()> {
    if topics.is_empty() {
        return Err(ApiError::invalid("subscribe to at least one topic"));
    }
    for topic in &topics {
        super::auth::require(&http.broker, Operation::Describe, ResourceType::Topic, topic)?;
    }
    let image = http.broker.controller.image();
    if let Some(unknown) = topics.iter().find(|t| !image.topics.contains_key(t.as_str())) {
        return Err(ApiError::unknown_topic(unknown));
    }
    unsubscribe(http, instance).await;
    {
        let mut state = instance.lock();
        state.subscription = topics;
        state.manual = false;
    }
    // `send_replace`: with the previous task gone nobody listens, and `send` would leave the
    // flag set, so the new membership would stop at once (a second subscribe never joined).
    instance.stop.send_replace(false);
    // The membership acts as the instance's creator, on every broker it reaches.
    let (client, stop) = (instance.settings.client.clone(), instance.stop.subscribe());
    let task = match instance.settings.protocol {
        GroupProtocol::Classic => {
            tokio::spawn(crate::server::as_client(client, run_membership(http.clone(), instance.clone(), stop)))
        }
        GroupProtocol::Consumer { .. } => tokio::spawn(crate::server::as_client(
            client,
            run_consumer_membership(http.clone(), instance.clone(), stop),
        )),
    };
    *instance.member_task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    Ok(())
}

/// Drops the subscription or manual assignment (leaving the group).
pub async fn unsubscribe(http: &Arc<Http>, instance: &Arc<Instance>) {
    if instance.settings.auto_commit {
        let _ = commit_consumed(http, instance).await;
    }
    stop_membership(instance).await;
    let member_id = {
        let mut state = instance.lock();
        let member_id = std::mem::take(&mut state.member_id);
        let manual = state.manual;
        *state = State { epoch: state.epoch + 1, ..State::default() };
        if manual {
            String::new()
        } else {
            member_id
        }
    };
    instance.changed.notify_waiters();
    if !member_id.is_empty() {
        leave(http, instance, &member_id).await;
    }
}

/// Assigns partitions by hand (no group membership; offsets still commit to the group).
pub async fn assign(http: &Arc<Http>, instance: &Arc<Instance>, partitions: Vec<TopicPartition>) -> ApiResult<()> {
    // Refused before anything about the topics is told (whether they exist, their partitions).
    for (topic, _) in &partitions {
        super::auth::require(&http.broker, Operation::Describe, ResourceType::Topic, topic)?;
    }
    let image = http.broker.controller.image();
    for (topic, partition) in &partitions {
        let known = image.topics.get(topic).ok_or_else(|| ApiError::unknown_topic(topic))?;
        if *partition < 0 || *partition as usize >= known.partitions.len() {
            return Err(ApiError::unknown_partition(topic, *partition as i64));
        }
    }
    // A partition named twice is assigned once (Kafka's assign takes a set): else every poll
    // fetched it twice and returned each record twice.
    let mut partitions = partitions;
    partitions.sort();
    partitions.dedup();
    unsubscribe(http, instance).await;
    let positions = initial_positions(http, instance, &partitions).await?;
    let mut state = instance.lock();
    state.manual = true;
    state.assignment = partitions;
    state.positions = positions;
    state.epoch += 1;
    Ok(())
}

/// Where each newly assigned partition starts: the group's committed offset, else the reset
/// policy (earliest = log start offset, latest = high watermark; none leaves it unset and a
/// poll fails).
async fn initial_positions(
    http: &Http,
    instance: &Instance,
    partitions: &[TopicPartition],
) -> ApiResult<HashMap<TopicPartition, i64>> {
    let committed = fetch_committed(http, &instance.group, partitions).await?;
    let mut positions = HashMap::new();
    let mut uncommitted = Vec::new();
    for tp in partitions {
        match committed.get(tp) {
            Some((offset, _)) if *offset >= 0 => {
                positions.insert(tp.clone(), *offset);
            }
            _ => uncommitted.push(tp.clone()),
        }
    }
    positions.extend(reset_positions(http, &uncommitted, instance.settings.offset_reset).await);
    Ok(positions)
}

/// Where `partitions` start under `reset`, asked of each partition's leader with ListOffsets:
/// its log start offset (earliest) or high watermark (latest). Partitions whose leader did not
/// answer (moving, unreachable) and every partition under reset none are left out.
pub(super) async fn reset_positions(
    http: &Http,
    partitions: &[TopicPartition],
    reset: OffsetReset,
) -> HashMap<TopicPartition, i64> {
    let timestamp = match reset {
        OffsetReset::Earliest => -2,
        OffsetReset::Latest => -1,
        OffsetReset::None => return HashMap::new(),
    };
    let node_id = http.broker.settings.node_id;
    let image = http.broker.controller.image();
    let mut legs: BTreeMap<Route, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in partitions {
        let route = kafka::leader_route(node_id, &image, topic, *partition);
        legs.entry(route).or_default().entry(topic.as_str()).or_default().push(*partition);
    }
    let calls = legs.into_iter().map(|(route, topics)| async move {
        let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(
            topics
                .into_iter()
                .map(|(topic, ps)| {
                    list_offsets_request::ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(
                        ps.into_iter()
                            .map(|p| {
                                list_offsets_request::ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    )
                })
                .collect(),
        );
        match route {
            Route::Here => handlers::list_offsets::handle(&http.broker, &kafka::header(kafka::LIST_OFFSETS), request)
                .await
                .ok_or_else(|| ApiError::internal("ListOffsets returned no response")),
            Route::Peer(node) => kafka::forward(http, node, kafka::LIST_OFFSETS, &request, GROUP_CALL_TIMEOUT).await,
        }
    });
    let mut positions = HashMap::new();
    for answer in futures_util::future::join_all(calls).await {
        let response = match answer {
            Ok(response) => response,
            Err(e) => {
                tracing::debug!(error = %e.message, "HTTP consumer offset look-up failed");
                continue;
            }
        };
        for topic in response.topics {
            for p in topic.partitions {
                if p.error_code == 0 && p.offset >= 0 {
                    positions.insert((topic.name.0.to_string(), p.partition_index), p.offset);
                }
            }
        }
    }
    positions
}

/// Moves positions (assigned partitions only).
pub fn seek(instance: &Instance, offsets: Vec<(TopicPartition, i64)>) -> ApiResult<()> {
    let mut state = instance.lock();
    for (tp, _) in &offsets {
        if !state.assignment.contains(tp) {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                40905,
                format!("partition {}-{} is not assigned to this consumer", tp.0, tp.1),
            ));
        }
    }
    for (tp, offset) in offsets {
        // The next commit of consumed offsets commits the new position, as Kafka's auto commit
        // commits positions: else it committed where the consumer had been, skipping what the
        // seek asked to read again should the instance die.
        state.consumed.insert(tp.clone(), offset.max(0));
        state.positions.insert(tp, offset.max(0));
    }
    state.epoch += 1;
    drop(state);
    instance.changed.notify_waiters();
    Ok(())
}

pub async fn seek_to(
    http: &Http,
    instance: &Instance,
    partitions: Vec<TopicPartition>,
    reset: OffsetReset,
) -> ApiResult<()> {
    let mut found = reset_positions(http, &partitions, reset).await;
    let image = http.broker.controller.image();
    let offsets = partitions
        .into_iter()
        .map(|tp| {
            let offset = found.remove(&tp).ok_or_else(|| {
                // A partition that exists but whose leader did not answer is retriable (503),
                // not missing (404).
                let exists = u32::try_from(tp.1).ok().is_some_and(|p| image.partition(&tp.0, p).is_some());
                if exists {
                    ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        50301,
                        format!("the leader of {}-{} did not answer; try again", tp.0, tp.1),
                    )
                } else {
                    ApiError::unknown_partition(&tp.0, tp.1 as i64)
                }
            })?;
            Ok((tp, offset))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    seek(instance, offsets)
}

/// One polled record.
pub struct Polled {
    pub topic: String,
    pub record: ReadRecord,
}

/// Returns records from the assigned partitions, waiting up to `timeout_ms` for some.
pub async fn poll(
    http: &Arc<Http>,
    instance: &Arc<Instance>,
    timeout_ms: u64,
    max_bytes: usize,
) -> ApiResult<Vec<Polled>> {
    let _serial = instance.poll_lock.lock().await;
    {
        let state = instance.lock();
        if state.subscription.is_empty() && !state.manual {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                40904,
                "consumer is neither subscribed nor assigned partitions",
            ));
        }
        if let Some((code, message)) = &state.fatal {
            return Err(ApiError::kafka_code(*code, Some(&format!("the group refused this member: {message}"))));
        }
    }
    if instance.settings.auto_commit {
        // Commit what earlier polls returned (the Java client's auto commit on poll). A failed
        // auto commit is logged, not the poll's answer (the Java client's is asynchronous):
        // a rebalance or a moving coordinator must not fail reads.
        if let Err(e) = commit_consumed(http, instance).await {
            tracing::debug!(group = %instance.group, instance = %instance.name, error = ?e, "auto commit failed");
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms.min(LONG_POLL_MAX_MS));
    position_unpositioned(http, instance).await;
    loop {
        let changed = instance.changed.notified();
        let (epoch, positions) = {
            let state = instance.lock();
            // Partitions without a position (reset policy none) fail the poll, as Kafka's
            // NoOffsetForPartitionException does.
            if let Some(tp) = state.assignment.iter().find(|tp| !state.positions.contains_key(*tp)) {
                if instance.settings.offset_reset == OffsetReset::None {
                    return Err(ApiError::new(
                        axum::http::StatusCode::CONFLICT,
                        40906,
                        format!("no committed offset for {}-{} and auto.offset.reset is none", tp.0, tp.1),
                    ));
                }
            }
            let positions: Vec<(TopicPartition, i64)> =
                state.assignment.iter().filter_map(|tp| state.positions.get(tp).map(|p| (tp.clone(), *p))).collect();
            (state.epoch, positions)
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if positions.is_empty() {
            // Nothing assigned yet (joining) or revoked: wait for an assignment or the deadline.
            tokio::select! {
                _ = changed => continue,
                _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            }
        }
        let responses = tokio::select! {
            responses = fetch_from_leaders(http, &positions, remaining.as_millis() as i32, max_bytes) => responses?,
            _ = changed => continue,
        };
        let mut polled = Vec::new();
        let mut advanced: Vec<(TopicPartition, i64)> = Vec::new();
        let mut out_of_range: Vec<TopicPartition> = Vec::new();
        let mut budget = max_bytes;
        let mut partition_errors = false;
        for topic in responses {
            let name = topic.topic.0.to_string();
            for data in topic.partitions {
                let tp = (name.clone(), data.partition_index);
                let Some(&(_, position)) = positions.iter().find(|(p, _)| *p == tp) else { continue };
                if data.error_code == ResponseError::OffsetOutOfRange.code() {
                    out_of_range.push(tp);
                    continue;
                }
                if data.error_code == ResponseError::TopicAuthorizationFailed.code() {
                    // Not retriable: the Java client throws TopicAuthorizationException.
                    return Err(ApiError::kafka_code(data.error_code, Some(&format!("reading topic {name}"))));
                }
                partition_errors |= data.error_code != 0;
                let bytes = data.records.unwrap_or_default();
                let records_left = POLL_MAX_RECORDS.saturating_sub(polled.len());
                if data.error_code != 0 || bytes.is_empty() || budget == 0 || records_left == 0 {
                    continue;
                }
                let mut read = Vec::new();
                let next = records::decode(data.partition_index, bytes, position, records_left, None, &mut read);
                let mut taken = 0;
                let mut next_position = position;
                for record in read {
                    let size =
                        record.key.as_ref().map_or(0, |k| k.len()) + record.value.as_ref().map_or(0, |v| v.len());
                    if taken > 0 && size > budget {
                        break;
                    }
                    budget = budget.saturating_sub(size);
                    taken += 1;
                    next_position = record.offset + 1;
                    polled.push(Polled { topic: name.clone(), record });
                }
                if taken == 0 && next > position {
                    // Only control batches or compacted gaps: skip past them.
                    next_position = next;
                }
                if next_position > position {
                    advanced.push((tp, next_position));
                }
            }
        }
        let mut resets = reset_positions(http, &out_of_range, instance.settings.offset_reset).await;
        {
            let mut state = instance.lock();
            if state.epoch != epoch {
                // Reassigned or sought meanwhile: what we read may belong to someone else now.
                continue;
            }
            for (tp, next) in &advanced {
                state.positions.insert(tp.clone(), *next);
                state.consumed.insert(tp.clone(), *next);
            }
            for tp in &out_of_range {
                match resets.remove(tp) {
                    Some(position) => {
                        state.positions.insert(tp.clone(), position);
                    }
                    None => {
                        return Err(ApiError::new(
                            axum::http::StatusCode::CONFLICT,
                            40907,
                            format!("offset of {}-{} is out of range and auto.offset.reset is none", tp.0, tp.1),
                        ));
                    }
                }
            }
        }
        // Nothing yet (only control batches, or positions were reset): wait on until the deadline.
        if !polled.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(polled);
        }
        if partition_errors {
            // The fetch answered at once with errors: back off before asking again.
            let until = deadline.min(tokio::time::Instant::now() + POLL_RETRY_BACKOFF);
            tokio::select! {
                _ = instance.changed.notified() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

/// Gives assigned partitions that have no position yet (their leader could not be asked when
/// they were assigned) one: the committed offset, else the reset policy. Skipped under reset
/// none, where a missing position fails the poll.
async fn position_unpositioned(http: &Http, instance: &Instance) {
    if instance.settings.offset_reset == OffsetReset::None {
        return;
    }
    let (epoch, missing) = {
        let state = instance.lock();
        let missing: Vec<TopicPartition> =
            state.assignment.iter().filter(|tp| !state.positions.contains_key(*tp)).cloned().collect();
        (state.epoch, missing)
    };
    if missing.is_empty() {
        return;
    }
    let Ok(found) = initial_positions(http, instance, &missing).await else { return };
    let mut state = instance.lock();
    if state.epoch == epoch {
        for (tp, position) in found {
            state.positions.entry(tp).or_insert(position);
        }
    }
}

/// Fetches `positions` from their leaders: one Fetch per leading broker (in process for this
/// node), all at once, each parked up to `max_wait_ms`. Returns as soon as one answers with
/// records or errors, with whatever the others have answered by then (the rest are dropped:
/// nothing was returned from them, so no position moves for them). A broker that cannot be
/// reached is left out unless every one fails.
async fn fetch_from_leaders(
    http: &Http,
    positions: &[(TopicPartition, i64)],
    max_wait_ms: i32,
    max_bytes: usize,
) -> ApiResult<Vec<FetchableTopicResponse>> {
    let node_id = http.broker.settings.node_id;
    let image = http.broker.controller.image();
    let mut legs: BTreeMap<Route, Vec<(TopicPartition, i64)>> = BTreeMap::new();
    for (tp, offset) in positions {
        legs.entry(kafka::leader_route(node_id, &image, &tp.0, tp.1)).or_default().push((tp.clone(), *offset));
    }
    let mut pending: FuturesUnordered<_> = legs
        .into_iter()
        .map(|(route, positions)| async move {
            let request = fetch_request(&positions, max_wait_ms, max_bytes);
            match route {
                Route::Here => super::v1::fetch(http, request).await,
                Route::Peer(node) => {
                    let timeout = Duration::from_millis(max_wait_ms.max(0) as u64) + Duration::from_secs(5);
                    kafka::forward(http, node, kafka::FETCH, &request, timeout).await
                }
            }
        })
        .collect();
    let mut topics = Vec::new();
    let mut first_error = None;
    let mut answered = false;
    while let Some(answer) = pending.next().await {
        match answer {
            Ok(response) => {
                answered = true;
                let ready = response
                    .responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .any(|p| p.error_code != 0 || p.records.as_ref().is_some_and(|r| !r.is_empty()));
                topics.extend(response.responses);
                if ready {
                    while let Some(Some(answer)) = pending.next().now_or_never() {
                        if let Ok(response) = answer {
                            topics.extend(response.responses);
                        }
                    }
                    break;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e.message, "HTTP consumer fetch from a leader failed");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !answered => Err(e),
        _ => Ok(topics),
    }
}

fn fetch_request(positions: &[(TopicPartition, i64)], max_wait_ms: i32, max_bytes: usize) -> FetchRequest {
    let mut topics: BTreeMap<&str, Vec<fetch_request::FetchPartition>> = BTreeMap::new();
    let per_partition = (max_bytes / positions.len().max(1)).clamp(64 << 10, 8 << 20) as i32;
    for ((topic, partition), offset) in positions {
        topics.entry(topic).or_default().push(
            fetch_request::FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(per_partition)
                .with_current_leader_epoch(-1),
        );
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms.max(0))
        .with_min_bytes(1)
        .with_max_bytes(max_bytes.min(i32::MAX as usize) as i32)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| fetch_request::FetchTopic::default().with_topic(topic_name(t)).with_partitions(ps))
                .collect(),
        )
}

/// Commits the given offsets (as they are: the next offset to read).
pub async fn commit(http: &Http, instance: &Instance, offsets: Vec<(TopicPartition, i64, String)>) -> ApiResult<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let (generation, member_id) = {
        let state = instance.lock();
        if state.manual || state.member_id.is_empty() {
            (-1, String::new())
        } else {
            (state.generation_id, state.member_id.clone())
        }
    };
    let mut topics: BTreeMap<String, Vec<offset_commit_request::OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset, metadata) in offsets {
        topics.entry(topic).or_default().push(
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(str_bytes(&metadata))),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(&instance.group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(str_bytes(&member_id))
        .with_retention_time_ms(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic_name(&t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    ensure_coordinator(http, &instance.group).await;
    let response =
        on_coordinator!(http, &instance.group, offset_commit, kafka::OFFSET_COMMIT, request, GROUP_CALL_TIMEOUT)?;
    for topic in response.topics {
        for p in topic.partitions {
            if p.error_code != 0 {
                let detail = format!("committing {}-{}", topic.name.0, p.partition_index);
                return Err(match ResponseError::try_from_code(p.error_code) {
                    // The group moved on without this member: its assignment is stale.
                    Some(
                        ResponseError::RebalanceInProgress
                        | ResponseError::IllegalGeneration
                        | ResponseError::UnknownMemberId
                        | ResponseError::StaleMemberEpoch
                        | ResponseError::FencedMemberEpoch,
                    ) => ApiError::new(
                        axum::http::StatusCode::CONFLICT,
                        40908,
                        format!("{detail}: the group is rebalancing; poll again"),
                    ),
                    _ => ApiError::kafka_code(p.error_code, Some(&detail)),
                });
            }
        }
    }
    Ok(())
}

/// Commits the offsets after the records returned so far.
pub async fn commit_consumed(http: &Http, instance: &Instance) -> ApiResult<()> {
    let offsets: Vec<(TopicPartition, i64, String)> = {
        let state = instance.lock();
        state
            .consumed
            .iter()
            .filter(|(tp, _)| state.assignment.contains(tp))
            .map(|(tp, o)| (tp.clone(), *o, String::new()))
            .collect()
    };
    commit(http, instance, offsets).await
}

/// Committed offsets (offset, metadata) of the group for `partitions`.
pub async fn fetch_committed(
    http: &Http,
    group: &str,
    partitions: &[TopicPartition],
) -> ApiResult<HashMap<TopicPartition, (i64, String)>> {
    if partitions.is_empty() {
        return Ok(HashMap::new());
    }
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        topics.entry(t).or_default().push(*p);
    }
    let request = OffsetFetchRequest::default().with_group_id(GroupId(str_bytes(group))).with_topics(Some(
        topics
            .into_iter()
            .map(|(t, ps)| {
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_partition_indexes(ps)
            })
            .collect(),
    ));
    ensure_coordinator(http, group).await;
    let response = on_coordinator!(http, group, offset_fetch, kafka::OFFSET_FETCH, request, GROUP_CALL_TIMEOUT)?;
    if response.error_code != 0 {
        return Err(ApiError::kafka_code(response.error_code, Some(&format!("offsets of group '{group}'"))));
    }
    let mut committed = HashMap::new();
    for topic in response.topics {
        for p in topic.partitions {
            if p.error_code == 0 {
                committed.insert(
                    (topic.name.0.to_string(), p.partition_index),
                    (p.committed_offset, p.metadata.map(|m| m.to_string()).unwrap_or_default()),
                );
            }
        }
    }
    Ok(committed)
}

/// FindCoordinator creates `__consumer_offsets` on first use; group calls need it.
async fn ensure_coordinator(http: &Http, group: &str) {
    let request = FindCoordinatorRequest::default().with_key(str_bytes(group)).with_key_type(0);
    let _ = handlers::find_coordinator::handle(&http.broker, &kafka::header(kafka::FIND_COORDINATOR), request).await;
}

/// Leaves the group: LeaveGroup for a classic member, a heartbeat with epoch -1 for a
/// consumer-protocol one.
async fn leave(http: &Http, instance: &Instance, member_id: &str) {
    let group = instance.group.as_str();
    if let GroupProtocol::Consumer { .. } = instance.settings.protocol {
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_member_id(str_bytes(member_id))
            .with_member_epoch(LEAVE_EPOCH);
        let _ = on_coordinator!(
            http,
            group,
            consumer_group_heartbeat,
            kafka::CONSUMER_GROUP_HEARTBEAT,
            request,
            GROUP_CALL_TIMEOUT
        );
        return;
    }
    let request = LeaveGroupRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_members(vec![leave_group_request::MemberIdentity::default().with_member_id(str_bytes(member_id))]);
    let _ = on_coordinator!(http, group, leave_group, kafka::LEAVE_GROUP, request, GROUP_CALL_TIMEOUT);
}

/// The plan of a client-side assignor (`range`, `roundrobin`) this instance computes as the
/// group's leader: the same implementations as the broker's server-side assignors
/// (`group::assignor`), each member listed (empty when it gets nothing).
fn leader_plan(
    protocol: &str,
    subscriptions: &BTreeMap<String, Vec<String>>,
    partitions: &BTreeMap<String, u32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    use crate::group::assignor::{self, AssignmentSpec, MemberSpec, TopicSpec};
    let spec = AssignmentSpec {
        members: subscriptions
            .iter()
            .map(|(member, topics)| MemberSpec {
                member_id: member.clone(),
                rack: None,
                subscriptions: topics.iter().filter(|t| partitions.contains_key(*t)).cloned().collect(),
                owned: Default::default(),
            })
            .collect(),
        topics: partitions.iter().map(|(t, n)| (t.clone(), TopicSpec { partitions: *n, racks: Vec::new() })).collect(),
    };
    let plan = if protocol == "roundrobin" { assignor::round_robin(&spec) } else { assignor::range(&spec) };
    let mut result: BTreeMap<String, Vec<TopicPartition>> =
        subscriptions.keys().map(|m| (m.clone(), Vec::new())).collect();
    for (member, topics) in plan {
        let owned = result.entry(member).or_default();
        for (topic, ps) in topics {
            owned.extend(ps.into_iter().map(|p| (topic.clone(), p)));
        }
    }
    result
}

fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    embedded::encode_assignment(partitions.iter().map(|(t, p)| (t.as_str(), vec![*p])), 0)
}

/// The topics of a member's embedded subscription (none when malformed).
fn decode_subscription(bytes: &Bytes) -> Vec<String> {
    embedded::decode_subscription(bytes).map(|s| s.topics).unwrap_or_default()
}

enum Step {
    Rejoin,
    Stop,
}

/// The group membership of a subscribed instance: join, sync, heartbeat; rejoin on rebalance.
async fn run_membership(http: Arc<Http>, instance: Arc<Instance>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return;
        }
        let step = tokio::select! {
            step = join_and_sync(&http, &instance) => step,
            _ = stop.wait_for(|s| *s) => return,
        };
        match step {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(error) => {
                tracing::debug!(group = %instance.group, instance = %instance.name, %error, "HTTP consumer join failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        match heartbeat_until_rebalance(&http, &instance, &mut stop).await {
            Step::Rejoin => {
                if instance.settings.auto_commit {
                    let _ = commit_consumed(&http, &instance).await;
                }
                revoke(&instance);
            }
            Step::Stop => return,
        }
    }
}

/// Eager protocol: a rejoining member gives up its partitions first.
fn revoke(instance: &Instance) {
    let mut state = instance.lock();
    state.assignment.clear();
    state.positions.clear();
    state.consumed.clear();
    state.epoch += 1;
    drop(state);
    instance.changed.notify_waiters();
}

async fn join_and_sync(http: &Http, instance: &Instance) -> Result<(), String> {
    ensure_coordinator(http, &instance.group).await;
    let (topics, mut member_id) = {
        let state = instance.lock();
        (state.subscription.clone(), state.member_id.clone())
    };
    let subscription = embedded::encode_subscription(&topics, 0);
    let protocols: Vec<join_group_request::JoinGroupRequestProtocol> = ["range", "roundrobin"]
        .iter()
        .map(|name| {
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str(name))
                .with_metadata(subscription.clone())
        })
        .collect();
    let joined = loop {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&instance.group)))
            .with_session_timeout_ms(SESSION_TIMEOUT_MS)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_member_id(str_bytes(&member_id))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(protocols.clone());
        let response =
            on_coordinator!(http, &instance.group, join_group, kafka::JOIN_GROUP, request, REBALANCE_CALL_TIMEOUT)
                .map_err(|e| format!("JoinGroup: {}", e.message))?;
        match ResponseError::try_from_code(response.error_code) {
            None => break response,
            Some(ResponseError::MemberIdRequired) => member_id = response.member_id.to_string(),
            Some(ResponseError::UnknownMemberId) => member_id.clear(),
            Some(e) => return Err(format!("JoinGroup: {e:?}")),
        }
    };
    let member_id = joined.member_id.to_string();
    let protocol = joined.protocol_name.as_ref().map(|p| p.to_string()).unwrap_or_default();
    let assignments = if joined.leader == joined.member_id {
        let subscriptions: BTreeMap<String, Vec<String>> =
            joined.members.iter().map(|m| (m.member_id.to_string(), decode_subscription(&m.metadata))).collect();
        let image = http.broker.controller.image();
        let partitions: BTreeMap<String, u32> = subscriptions
            .values()
            .flatten()
            .filter_map(|t| image.topics.get(t).map(|ti| (t.clone(), ti.partitions.len() as u32)))
            .collect();
        let plan = leader_plan(&protocol, &subscriptions, &partitions);
        plan.into_iter()
            .map(|(member, owned)| {
                sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(str_bytes(&member))
                    .with_assignment(encode_assignment(&owned))
            })
            .collect()
    } else {
        Vec::new()
    };
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(str_bytes(&instance.group)))
        .with_generation_id(joined.generation_id)
        .with_member_id(str_bytes(&member_id))
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(str_bytes(&protocol)))
        .with_assignments(assignments);
    let synced = on_coordinator!(http, &instance.group, sync_group, kafka::SYNC_GROUP, request, REBALANCE_CALL_TIMEOUT)
        .map_err(|e| format!("SyncGroup: {}", e.message))?;
    if synced.error_code != 0 {
        // Keep the member id: the next join is a rejoin of the same member.
        instance.lock().member_id = member_id;
        return Err(format!("SyncGroup: {:?}", ResponseError::try_from_code(synced.error_code)));
    }
    let assignment: Vec<TopicPartition> = embedded::decode_assignment(&synced.assignment)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
        .collect();
    {
        let mut state = instance.lock();
        state.member_id = member_id;
        state.generation_id = joined.generation_id;
    }
    let positions = initial_positions(http, instance, &assignment).await.map_err(|e| e.message)?;
    let mut state = instance.lock();
    state.assignment = assignment;
    state.positions = positions;
    state.consumed.clear();
    state.epoch += 1;
    drop(state);
    instance.changed.notify_waiters();
    Ok(())
}

async fn heartbeat_until_rebalance(http: &Http, instance: &Instance, stop: &mut watch::Receiver<bool>) -> Step {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HEARTBEAT_INTERVAL) => {}
            _ = stop.wait_for(|s| *s) => return Step::Stop,
        }
        let (generation, member_id) = {
            let state = instance.lock();
            (state.generation_id, state.member_id.clone())
        };
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(&instance.group)))
            .with_generation_id(generation)
            .with_member_id(str_bytes(&member_id));
        let response =
            match on_coordinator!(http, &instance.group, heartbeat, kafka::HEARTBEAT, request, GROUP_CALL_TIMEOUT) {
                Ok(response) => response,
                // The coordinator is unreachable or moving: rejoin, which finds the new one.
                Err(_) => return Step::Rejoin,
            };
        match ResponseError::try_from_code(response.error_code) {
            None => {}
            Some(ResponseError::RebalanceInProgress) => return Step::Rejoin,
            Some(
                ResponseError::UnknownMemberId | ResponseError::IllegalGeneration | ResponseError::FencedInstanceId,
            ) => {
                instance.lock().member_id.clear();
                return Step::Rejoin;
            }
            Some(_) => return Step::Rejoin,
        }
    }
}

/// The member epoch a consumer-protocol member leaves with (KIP-848).
const LEAVE_EPOCH: i32 = -1;
/// How often a consumer-protocol member heartbeats until the coordinator names its interval.
const FIRST_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// The group membership of a subscribed instance on the consumer protocol (KIP-848): it
/// heartbeats with its subscription, chosen assignor and owned partitions; the coordinator
/// answers its epoch and, when it changed, its assignment, which the instance takes on at once
/// (revoked partitions first: committed under auto commit, then dropped, so the coordinator can
/// hand them on after the next heartbeat, sent right away). Fenced or unknown: it gives up its
/// partitions and joins again at epoch 0 with the same member id. An error no retry can cure
/// (an unknown assignor, a full group, a classic group with members) stops it and is what every
/// poll answers.
async fn run_consumer_membership(http: Arc<Http>, instance: Arc<Instance>, mut stop: watch::Receiver<bool>) {
    let remote_assignor = match &instance.settings.protocol {
        GroupProtocol::Consumer { remote_assignor } => remote_assignor.clone(),
        GroupProtocol::Classic => None,
    };
    {
        let mut state = instance.lock();
        if state.member_id.is_empty() {
            // KIP-1082: the client makes its member id.
            state.member_id = uuid::Uuid::new_v4().to_string();
        }
        state.generation_id = 0;
        state.fatal = None;
    }
    let mut interval = FIRST_HEARTBEAT_INTERVAL;
    let mut backoff = Duration::from_millis(100);
    // FindCoordinator creates `__consumer_offsets`: before the first heartbeat and after a
    // failed one, not at every heartbeat.
    let mut find_coordinator = true;
    loop {
        if *stop.borrow() {
            return;
        }
        let request = {
            let state = instance.lock();
            let image = http.broker.controller.image();
            let mut owned: BTreeMap<[u8; 16], Vec<i32>> = BTreeMap::new();
            for (topic, partition) in &state.assignment {
                if let Some(t) = image.topics.get(topic) {
                    owned.entry(t.topic_id).or_default().push(*partition);
                }
            }
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(str_bytes(&instance.group)))
                .with_member_id(str_bytes(&state.member_id))
                .with_member_epoch(state.generation_id)
                .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
                .with_subscribed_topic_names(Some(state.subscription.iter().map(|t| topic_name(t)).collect()))
                .with_server_assignor(remote_assignor.as_deref().map(str_bytes))
                .with_topic_partitions(Some(
                    owned
                        .into_iter()
                        .map(|(id, partitions)| {
                            HeartbeatTopicPartitions::default()
                                .with_topic_id(handlers::uuid_of(id))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ))
        };
        if std::mem::take(&mut find_coordinator) {
            ensure_coordinator(&http, &instance.group).await;
        }
        let answer = tokio::select! {
            answer = async {
                on_coordinator!(
                    &http,
                    &instance.group,
                    consumer_group_heartbeat,
                    kafka::CONSUMER_GROUP_HEARTBEAT,
                    request,
                    GROUP_CALL_TIMEOUT
                )
            } => answer,
            _ = stop.wait_for(|s| *s) => return,
        };
        let mut wait = interval;
        let mut retry = |backoff: &mut Duration| {
            find_coordinator = true;
            let wait = *backoff;
            *backoff = (*backoff * 2).min(Duration::from_secs(5));
            wait
        };
        match answer {
            Err(error) => {
                tracing::debug!(group = %instance.group, error = %error.message, "HTTP consumer heartbeat failed; retrying");
                wait = retry(&mut backoff);
            }
            Ok(response) => match ResponseError::try_from_code(response.error_code) {
                None => {
                    backoff = Duration::from_millis(100);
                    if response.heartbeat_interval_ms > 0 {
                        interval = Duration::from_millis(response.heartbeat_interval_ms as u64);
                    }
                    {
                        let mut state = instance.lock();
                        if let Some(member_id) = response.member_id.as_ref().filter(|m| !m.is_empty()) {
                            state.member_id = member_id.to_string();
                        }
                        state.generation_id = response.member_epoch;
                    }
                    if let Some(assignment) = response.assignment {
                        let image = http.broker.controller.image();
                        let mut target: Vec<TopicPartition> = assignment
                            .topic_partitions
                            .iter()
                            .filter_map(|t| {
                                image.topic_by_id(t.topic_id.as_bytes()).map(|topic| (topic.name.clone(), t))
                            })
                            .flat_map(|(name, t)| t.partitions.iter().map(move |p| (name.clone(), *p)))
                            .collect();
                        target.sort();
                        if take_assignment(&http, &instance, target).await {
                            // Acknowledge at once: the coordinator hands revoked partitions on
                            // only after this member reports them gone.
                            wait = Duration::ZERO;
                        }
                    }
                }
                Some(ResponseError::FencedMemberEpoch | ResponseError::UnknownMemberId) => {
                    if instance.settings.auto_commit {
                        let _ = commit_consumed(&http, &instance).await;
                    }
                    revoke(&instance);
                    instance.lock().generation_id = 0;
                    wait = Duration::ZERO;
                }
                Some(
                    ResponseError::NotCoordinator
                    | ResponseError::CoordinatorNotAvailable
                    | ResponseError::CoordinatorLoadInProgress
                    | ResponseError::RequestTimedOut
                    | ResponseError::NotEnoughReplicas
                    | ResponseError::NotEnoughReplicasAfterAppend,
                ) => wait = retry(&mut backoff),
                Some(_) => {
                    let message = response.error_message.map(|m| m.to_string()).unwrap_or_default();
                    tracing::info!(group = %instance.group, instance = %instance.name, code = response.error_code, %message, "HTTP consumer refused by its group");
                    revoke(&instance);
                    let mut state = instance.lock();
                    state.fatal = Some((response.error_code, message));
                    state.member_id.clear();
                    return;
                }
            },
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Moves the instance to the coordinator's `target` assignment: partitions it loses are
/// committed (auto commit) and dropped, new ones positioned (committed offset, else the reset
/// policy). Returns whether anything changed.
async fn take_assignment(http: &Http, instance: &Instance, target: Vec<TopicPartition>) -> bool {
    let (revoked, added) = {
        let state = instance.lock();
        let revoked: Vec<TopicPartition> = state.assignment.iter().filter(|tp| !target.contains(tp)).cloned().collect();
        let added: Vec<TopicPartition> = target.iter().filter(|tp| !state.assignment.contains(tp)).cloned().collect();
        (revoked, added)
    };
    if revoked.is_empty() && added.is_empty() {
        return false;
    }
    if !revoked.is_empty() && instance.settings.auto_commit {
        let _ = commit_consumed(http, instance).await;
    }
    let positions = if added.is_empty() {
        HashMap::new()
    } else {
        // A partition whose position cannot be learned now gets one at the next poll.
        initial_positions(http, instance, &added).await.unwrap_or_default()
    };
    let mut state = instance.lock();
    state.assignment = target;
    for tp in &revoked {
        state.positions.remove(tp);
        state.consumed.remove(tp);
    }
    state.positions.extend(positions);
    state.epoch += 1;
    drop(state);
    instance.changed.notify_waiters();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        entries.iter().map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect())).collect()
    }

    #[test]
    fn range_gives_consecutive_ranges_extra_to_the_first() {
        // Proves Kafka's RangeAssignor layout: 7 partitions over 3 members → 3/2/2.
        let plan = leader_plan(
            "range",
            &subs(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]),
            &BTreeMap::from([("t".into(), 7)]),
        );
        let ps = |m: &str| plan[m].iter().map(|(_, p)| *p).collect::<Vec<_>>();
        assert_eq!(ps("a"), vec![0, 1, 2]);
        assert_eq!(ps("b"), vec![3, 4]);
        assert_eq!(ps("c"), vec![5, 6]);
    }

    #[test]
    fn round_robin_deals_only_to_subscribers() {
        // Proves round robin skips members not subscribed to a topic and covers every partition once.
        let plan = leader_plan(
            "roundrobin",
            &subs(&[("a", &["t", "u"]), ("b", &["t"])]),
            &BTreeMap::from([("t".into(), 4), ("u".into(), 2)]),
        );
        let mut all: Vec<TopicPartition> = plan.values().flatten().cloned().collect();
        all.sort();
        assert_eq!(all.len(), 6);
        assert!(plan["b"].iter().all(|(t, _)| t == "t"));
        assert_eq!(plan["a"].iter().filter(|(t, _)| t == "u").count(), 2);
    }
}
