//! Topic and group administration shared by the v1 and v3 routes (and the state gauges of
//! `/metrics`): create/delete topics and alter configs through the Kafka handlers; partition
//! state, group membership and lag read from the node, in one place so every view agrees.

use std::collections::BTreeMap;

use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{DeleteTopicsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::ResponseError;

use super::auth::require;
use super::error::{ApiError, ApiResult};
use super::{kafka, Http};
use crate::controller::{PartitionImage, TopicImage};
use crate::group::OFFSETS_TOPIC;
use crate::security::acl::{Operation, ResourceType};
use crate::server::handlers::{self, create_topics};
use crate::server::Broker;

/// Creates a topic (or, `validate_only`, checks that it could be) for a client allowed CREATE
/// on the cluster or the topic.
pub async fn create_topic(
    http: &Http,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> ApiResult<()> {
    if !create_topics::may_create(&http.broker, name) {
        return Err(ApiError::kafka(
            ResponseError::TopicAuthorizationFailed,
            Some(&format!("may not create '{name}'")),
        ));
    }
    let assignment = create_topics::Assignment::Auto { partitions, replication_factor };
    create_topics::validate_and_create(&http.broker, name, assignment, configs, validate_only)
        .await
        .map_err(|(code, message)| ApiError::kafka(code, Some(&message)))?;
    if !validate_only {
        http.broker.reconcile_now().await;
    }
    Ok(())
}

pub async fn delete_topic(http: &Http, name: &str) -> ApiResult<()> {
    // Refused before the 404, as DeleteTopics does: a client that may not delete the topic
    // does not learn whether it exists.
    require(&http.broker, Operation::Delete, ResourceType::Topic, name)?;
    if !http.broker.controller.image().topics.contains_key(name) {
        return Err(ApiError::unknown_topic(name));
    }
    let request =
        DeleteTopicsRequest::default().with_timeout_ms(30_000).with_topic_names(vec![handlers::topic_name(name)]);
    let response = handlers::delete_topics::handle(&http.broker, &kafka::header(kafka::DELETE_TOPICS), request)
        .await
        .ok_or_else(|| ApiError::internal("DeleteTopics returned no response"))?;
    match response.responses.first() {
        Some(r) if r.error_code != 0 => Err(ApiError::kafka_code(r.error_code, r.error_message.as_deref())),
        Some(_) => {
            http.broker.metrics.forget_topic(name);
            Ok(())
        }
        None => Err(ApiError::internal("DeleteTopics answered nothing")),
    }
}

/// One effective config of a topic.
pub struct ConfigEntry {
    pub name: &'static str,
    pub value: String,
    /// Set on the topic (else the broker default).
    pub is_override: bool,
}

pub fn topic_configs(broker: &Broker, topic: &TopicImage) -> Vec<ConfigEntry> {
    broker
        .topic_log_config(&topic.configs)
        .entries()
        .into_iter()
        .map(|(name, value)| ConfigEntry { name, value, is_override: topic.configs.contains_key(name) })
        .collect()
}

/// Sets and deletes topic config overrides through IncrementalAlterConfigs (validated, then
/// committed through the metadata quorum).
pub async fn alter_topic_configs(
    http: &Http,
    topic: &str,
    set: &[(String, String)],
    delete: &[String],
) -> ApiResult<()> {
    // Refused before the 404, as IncrementalAlterConfigs does.
    require(&http.broker, Operation::AlterConfigs, ResourceType::Topic, topic)?;
    if !http.broker.controller.image().topics.contains_key(topic) {
        return Err(ApiError::unknown_topic(topic));
    }
    let configs = set
        .iter()
        .map(|(name, value)| {
            AlterableConfig::default()
                .with_name(handlers::str_bytes(name))
                .with_config_operation(0)
                .with_value(Some(handlers::str_bytes(value)))
        })
        .chain(delete.iter().map(|name| {
            AlterableConfig::default().with_name(handlers::str_bytes(name)).with_config_operation(1).with_value(None)
        }))
        .collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(handlers::str_bytes(topic))
        .with_configs(configs)]);
    let response = handlers::incremental_alter_configs::handle(
        &http.broker,
        &kafka::header(kafka::INCREMENTAL_ALTER_CONFIGS),
        request,
    )
    .await
    .ok_or_else(|| ApiError::internal("IncrementalAlterConfigs returned no response"))?;
    match response.responses.first() {
        Some(r) if r.error_code != 0 => Err(ApiError::kafka_code(r.error_code, r.error_message.as_deref())),
        _ => {
            http.broker.reconcile_now().await;
            Ok(())
        }
    }
}

/// A partition as the dashboard shows it (`GET /v1/topics/{topic}`).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct PartitionState {
    pub partition: u32,
    pub leader: Option<u64>,
    pub replicas: Vec<u64>,
    pub isr: Vec<u64>,
    pub leader_epoch: i32,
    /// From the local replica; `None` when this node does not host the partition.
    pub log_start_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    /// The last stable offset (KIP-98): `read_committed` consumers read up to it; below the
    /// high watermark while a transaction is open.
    pub last_stable_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub size_bytes: Option<u64>,
    /// Fewer in-sync replicas than the replication factor ([`is_under_replicated`]).
    pub under_replicated: bool,
    /// No leader: nobody can read or write it.
    pub offline: bool,
    /// Replicas not in the ISR (ones a reassignment is adding included).
    pub out_of_sync_replicas: Vec<u64>,
    /// An ongoing reassignment: replicas being added (copying the log) and removed (once the
    /// added ones are in sync). Both empty when none is in progress.
    pub adding_replicas: Vec<u64>,
    pub removing_replicas: Vec<u64>,
    /// Each follower's log end offset and lag (records behind the leader's log end), as the
    /// leader last saw them; only when this node leads the partition (`None` otherwise).
    pub followers: Option<Vec<FollowerLag>>,
}

/// A follower's progress as its leader sees it.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct FollowerLag {
    pub node_id: u64,
    /// -1 before its first fetch in this leader epoch.
    pub log_end_offset: i64,
    pub lag: i64,
}

pub fn partition_states(broker: &Broker, topic: &TopicImage) -> Vec<PartitionState> {
    topic
        .partitions
        .iter()
        .map(|p| {
            let hosted = broker.replicas.get(&topic.name, p.partition);
            PartitionState {
                partition: p.partition,
                leader: p.leader,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                leader_epoch: p.leader_epoch,
                log_start_offset: hosted.as_ref().map(|h| h.log_start_offset()),
                high_watermark: hosted.as_ref().map(|h| h.high_watermark()),
                last_stable_offset: hosted.as_ref().and_then(|h| h.last_stable_offset().ok()),
                log_end_offset: hosted.as_ref().map(|h| h.log_end_offset()),
                size_bytes: hosted.as_ref().map(|h| h.size_bytes()),
                under_replicated: is_under_replicated(p),
                offline: p.leader.is_none(),
                out_of_sync_replicas: p.replicas.iter().copied().filter(|r| !p.isr.contains(r)).collect(),
                adding_replicas: p.adding_replicas.clone(),
                removing_replicas: p.removing_replicas.clone(),
                followers: hosted.as_ref().filter(|h| h.is_leader()).map(|h| {
                    let end = h.log_end_offset();
                    h.follower_log_end_offsets()
                        .into_iter()
                        .map(|(node_id, log_end_offset)| FollowerLag {
                            node_id,
                            log_end_offset,
                            lag: if log_end_offset < 0 { end } else { end - log_end_offset },
                        })
                        .collect()
                }),
            }
        })
        .collect()
}

/// Kafka's rule (`Partition.isUnderReplicated`): the ISR is smaller than the replication
/// factor, which during a reassignment is the replica set without the replicas being added (a
/// replica still copying its log is expected to be out of sync and raises no alarm).
pub fn is_under_replicated(p: &PartitionImage) -> bool {
    p.isr.len() < p.replicas.len().saturating_sub(p.adding_replicas.len())
}

/// Partition health counts over some partitions of the image, the same in `/v1` and `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PartitionHealth {
    pub partitions: usize,
    pub under_replicated: usize,
    /// Without a leader.
    pub offline: usize,
    /// A reassignment is adding or removing replicas.
    pub reassigning: usize,
}

impl PartitionHealth {
    pub fn of<'a>(partitions: impl IntoIterator<Item = &'a PartitionImage>) -> PartitionHealth {
        let mut health = PartitionHealth::default();
        for p in partitions {
            health.partitions += 1;
            health.under_replicated += usize::from(is_under_replicated(p));
            health.offline += usize::from(p.leader.is_none());
            health.reassigning += usize::from(p.is_reassigning());
        }
        health
    }
}

pub fn is_internal(topic: &str) -> bool {
    topic.starts_with("__")
}

/// One member of a group with its decoded assignment.
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// `classic` or `consumer`: the protocol the member speaks.
    pub protocol: &'static str,
    pub assignment: Vec<(String, Vec<i32>)>,
}

/// A group as HTTP shows it: membership from the coordinator, offsets with lag.
pub struct GroupView {
    pub group_id: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub coordinator: Option<u64>,
    pub members: Vec<Member>,
    pub offsets: Vec<LagRow>,
    /// A consumer-protocol group's server-side assignment (`None` for a classic group).
    pub assignor: Option<GroupAssignor>,
}

/// Which server-side assignor computed a consumer-protocol group's target assignment, and when.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct GroupAssignor {
    /// The assignor that computed the current target (the default when the chosen one failed).
    pub name: String,
    /// The uploaded assignor's version (absent for a built-in one).
    pub version: Option<u64>,
    /// When the target was computed (ms since the epoch; absent when restored from the log).
    pub assigned_ms: Option<i64>,
    /// Why the members' chosen assignor was not used, if it failed.
    pub error: Option<String>,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
}

impl GroupView {
    pub fn total_lag(&self) -> i64 {
        sum_saturating(self.offsets.iter().map(|o| o.lag.unwrap_or(0)))
    }
}

/// A partition's lag: records from a committed offset to `end`, never below 0. A client may
/// commit any offset (Kafka stores what it is given): a negative one has no lag (unknown, as
/// kafka-consumer-groups.sh shows it), and no commit makes the arithmetic overflow.
pub fn lag(end: i64, committed: i64) -> Option<i64> {
    (committed >= 0).then(|| end.saturating_sub(committed).max(0))
}

/// A sum of lags or offsets that saturates instead of overflowing (offsets are what clients
/// committed).
pub fn sum_saturating(values: impl Iterator<Item = i64>) -> i64 {
    values.fold(0i64, i64::saturating_add)
}

pub struct LagRow {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    /// The high watermark (what consumers can reach), as kafka-consumer-groups.sh reports it.
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub metadata: String,
    /// The member the partition is assigned to, if any.
    pub member: Option<usize>,
}

/// Kafka's ConsumerProtocolAssignment; empty for other protocol types or malformed bytes.
pub fn decode_assignment(bytes: &[u8]) -> Vec<(String, Vec<i32>)> {
    crate::group::embedded::decode_assignment(bytes)
        .unwrap_or_default()
        .into_iter()
        .map(|(topic, partitions)| (topic, partitions.into_iter().collect()))
        .collect()
}

/// Loads every `__consumer_offsets` partition this node hosts (a no-op once loaded), so group
/// listings are complete after a restart before any client asked about a group.
async fn load_offsets(http: &Http) {
    let broker = http.broker.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let partitions = broker.controller.image().topics.get(OFFSETS_TOPIC).map_or(0, |t| t.partitions.len() as u32);
        for p in 0..partitions {
            if broker.replicas.get(OFFSETS_TOPIC, p).is_some() {
                let _ = broker.groups.offsets.ensure_loaded(p);
            }
        }
    })
    .await;
}

/// ListGroups' rule: DESCRIBE on the cluster lists every group, else only the groups the client
/// may DESCRIBE.
pub fn describable_groups(broker: &Broker) -> impl Fn(&str) -> bool + '_ {
    let all = broker.authorized_cluster(Operation::Describe);
    move |id| all || broker.authorized(Operation::Describe, ResourceType::Group, id)
}

/// Every group known here: with members or with committed offsets.
pub async fn group_ids(http: &Http) -> Vec<String> {
    load_offsets(http).await;
    known_group_ids(&http.broker)
}

/// [`group_ids`] without loading offsets first. Blocks while offsets load: call it off the
/// async workers (the metrics scrape does).
pub fn known_group_ids(broker: &Broker) -> Vec<String> {
    let mut ids: Vec<String> = broker.groups.membership.list().into_iter().map(|g| g.group_id).collect();
    ids.extend(broker.groups.consumers.list().into_iter().map(|(id, _)| id));
    ids.extend(broker.groups.offsets.groups_with_offsets());
    ids.sort();
    ids.dedup();
    ids
}

/// The group as its coordinator knows it (members, state, offsets with lag), asked of the
/// coordinator when it is another node (its `/v1/groups/{group}?scope=node` view, which answers
/// this node: the topics the client may not describe are left out here); this node's own view
/// when the coordinator does not answer, or 404 when nobody knows the group.
pub async fn group_anywhere(http: &Http, group_id: &str) -> ApiResult<GroupView> {
    let image = http.broker.controller.image();
    if let super::kafka::Route::Peer(node) =
        super::kafka::coordinator_route(http.broker.settings.node_id, &image, group_id)
    {
        let path = format!("/v1/groups/{}?scope=node", super::v1::path_segment(group_id));
        match super::transforms::ask_node::<super::v1::GroupDetail>(http, node, &path).await {
            Ok(Some(detail)) => {
                let mut describable = describable_topics(&http.broker);
                let mut view = GroupView::from(detail);
                view.offsets.retain(|row| describable(&row.topic));
                return Ok(view);
            }
            Ok(None) => return Err(ApiError::unknown_group(group_id)),
            Err(reason) => tracing::debug!(group_id, node, %reason, "group view: the coordinator did not answer"),
        }
    }
    group(http, group_id).await
}

/// The group, or 404 when neither membership nor offsets know it.
pub async fn group(http: &Http, group_id: &str) -> ApiResult<GroupView> {
    load_offsets(http).await;
    let mut view = group_loaded(&http.broker, group_id).ok_or_else(|| ApiError::unknown_group(group_id))?;
    fill_remote_lag(http, &mut [&mut view]).await;
    Ok(view)
}

/// The lag of partitions this node does not host (`group_loaded` knows only its own replicas'
/// high watermarks): their high watermarks asked of their leaders (ListOffsets latest, as the
/// client, so only topics it may describe), in one round for all `views`. A leader that does
/// not answer leaves its partitions' lag unknown.
pub async fn fill_remote_lag(http: &Http, views: &mut [&mut GroupView]) {
    let missing: std::collections::BTreeSet<(String, i32)> = views
        .iter()
        .flat_map(|view| view.offsets.iter())
        .filter(|row| row.log_end_offset.is_none())
        .map(|row| (row.topic.clone(), row.partition))
        .collect();
    if missing.is_empty() {
        return;
    }
    let missing: Vec<(String, i32)> = missing.into_iter().collect();
    let ends = super::consumer::reset_positions(http, &missing, super::consumer::OffsetReset::Latest).await;
    for row in views.iter_mut().flat_map(|view| view.offsets.iter_mut()) {
        if row.log_end_offset.is_none() {
            if let Some(&end) = ends.get(&(row.topic.clone(), row.partition)) {
                row.log_end_offset = Some(end);
                row.lag = lag(end, row.committed_offset);
            }
        }
    }
}

/// [`group`] without loading offsets first (the metrics scrape loads them once itself).
///
/// The offsets (and so the lag) are those of the topics the client may DESCRIBE, as Kafka's
/// OffsetFetch of all topics leaves the others out; the caller checks DESCRIBE on the group.
/// The metrics scrape runs outside any client scope and sees every topic.
pub fn group_loaded(broker: &Broker, group_id: &str) -> Option<GroupView> {
    let description = broker.groups.membership.describe(group_id);
    let consumer = broker.groups.consumers.describe(group_id);
    let mut committed = broker.groups.offsets.fetch(group_id, None).unwrap_or_default();
    if description.is_none() && consumer.is_none() && committed.is_empty() {
        return None;
    }
    let mut describable = describable_topics(broker);
    committed.retain(|(topic, ..)| describable(topic));
    let image = broker.controller.image();
    let coordinator = image.topics.get(OFFSETS_TOPIC).and_then(|t| {
        t.partitions.get(crate::group::partition_for(group_id, t.partitions.len() as u32) as usize)?.leader
    });
    // A group id is one type at a time: a consumer-protocol group has no classic membership.
    let assignor = consumer.as_ref().filter(|_| description.is_none()).map(|c| GroupAssignor {
        name: c.assignor.clone(),
        version: c.assignor_version,
        assigned_ms: (c.assigned_ms > 0).then_some(c.assigned_ms),
        error: c.assignor_error.clone(),
        group_epoch: c.group_epoch,
        assignment_epoch: c.assignment_epoch,
    });
    let (state, protocol_type, protocol, members) = match description {
        Some(d) => (
            d.state.name(),
            d.protocol_type,
            d.protocol,
            d.members
                .into_iter()
                .map(|m| Member {
                    assignment: decode_assignment(&m.assignment),
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    protocol: "classic",
                })
                .collect(),
        ),
        // A consumer-protocol group (KIP-848): its assignor stands where a classic group's
        // protocol does; assignments by topic id, named from the image.
        None => match consumer {
            Some(c) => (
                c.state.name(),
                "consumer".to_string(),
                c.assignor,
                c.members
                    .into_iter()
                    .map(|m| Member {
                        assignment: m
                            .assignment
                            .iter()
                            .filter_map(|(id, ps)| {
                                image.topic_by_id(id).map(|t| (t.name.clone(), ps.iter().copied().collect()))
                            })
                            .collect(),
                        member_id: m.member_id,
                        group_instance_id: m.instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        protocol: if m.classic { "classic" } else { "consumer" },
                    })
                    .collect(),
            ),
            None => ("Empty", String::new(), String::new(), Vec::new()),
        },
    };
    let owner = |topic: &str, partition: i32| {
        members.iter().position(|m: &Member| m.assignment.iter().any(|(t, ps)| t == topic && ps.contains(&partition)))
    };
    let mut offsets: Vec<LagRow> = committed
        .into_iter()
        .map(|(topic, partition, c)| {
            // A leader's high watermark, or an in-sync follower's (a fetch behind at most); an
            // out-of-sync follower's is min(the leader's, its own log end), far behind, and
            // would under-report the lag: those partitions are asked of their leaders like the
            // ones not hosted here (`fill_remote_lag`).
            let in_sync_here = |p: &crate::partition::Partition| {
                p.is_leader()
                    || image
                        .topics
                        .get(&topic)
                        .and_then(|t| t.partitions.get(partition as usize))
                        .is_some_and(|state| state.isr.contains(&broker.settings.node_id))
            };
            let high_watermark = u32::try_from(partition)
                .ok()
                .and_then(|p| broker.replicas.get(&topic, p))
                .filter(|p| in_sync_here(p))
                .map(|p| p.high_watermark());
            LagRow {
                member: owner(&topic, partition),
                lag: high_watermark.and_then(|hw| lag(hw, c.offset)),
                log_end_offset: high_watermark,
                committed_offset: c.offset,
                metadata: c.metadata,
                topic,
                partition,
            }
        })
        .collect();
    offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Some(GroupView {
        group_id: group_id.to_string(),
        state,
        protocol_type,
        protocol,
        coordinator,
        members,
        offsets,
        assignor,
    })
}

/// Whether the client may DESCRIBE a topic, the ACLs scanned once per topic (a group's offsets
/// name each topic once per partition).
pub fn describable_topics(broker: &Broker) -> impl FnMut(&str) -> bool + '_ {
    let mut known: BTreeMap<String, bool> = BTreeMap::new();
    move |topic| match known.get(topic) {
        Some(&allowed) => allowed,
        None => {
            let allowed = broker.authorized(Operation::Describe, ResourceType::Topic, topic);
            known.insert(topic.to_string(), allowed);
            allowed
        }
    }
}

pub async fn delete_group(http: &Http, group_id: &str) -> ApiResult<()> {
    use kafka_protocol::messages::{DeleteGroupsRequest, GroupId};
    // Refused before the 404, as DeleteGroups does: a client that may not delete the group
    // does not learn whether it exists.
    require(&http.broker, Operation::Delete, ResourceType::Group, group_id)?;
    // 404 for a group nobody knows, even before `__consumer_offsets` exists.
    group(http, group_id).await?;
    let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(handlers::str_bytes(group_id))]);
    let response = handlers::delete_groups::handle(&http.broker, &kafka::header(kafka::DELETE_GROUPS), request)
        .await
        .ok_or_else(|| ApiError::internal("DeleteGroups returned no response"))?;
    match response.results.first() {
        Some(r) if r.error_code != 0 => Err(ApiError::kafka_code(r.error_code, Some(&format!("group '{group_id}'")))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(
        leader: Option<u64>,
        replicas: &[u64],
        isr: &[u64],
        adding: &[u64],
        removing: &[u64],
    ) -> PartitionImage {
        PartitionImage {
            partition: 0,
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            adding_replicas: adding.to_vec(),
            removing_replicas: removing.to_vec(),
        }
    }

    #[test]
    fn health_counts_under_replicated_offline_and_reassigning_partitions_as_kafka_does() {
        // Proves the counts /v1 and /metrics share: ISR short of the replicas is
        // under-replicated, no leader is offline, and a replica being added by a reassignment
        // does not make a fully in-sync partition under-replicated until it is the only gap.
        let partitions = [
            partition(Some(1), &[1, 2, 3], &[1, 2, 3], &[], &[]),
            partition(Some(1), &[1, 2, 3], &[1, 2], &[], &[]),
            partition(None, &[1, 2, 3], &[3], &[], &[]),
            // Moving 3 → 4: replicas are the targets then the removed one; 4 is still copying.
            partition(Some(1), &[1, 2, 4, 3], &[1, 2, 3], &[4], &[3]),
            // The same move with 2 also out of the ISR: under-replicated after all.
            partition(Some(1), &[1, 2, 4, 3], &[1, 3], &[4], &[3]),
        ];
        let health = PartitionHealth::of(&partitions);
        assert_eq!(health, PartitionHealth { partitions: 5, under_replicated: 3, offline: 1, reassigning: 2 });
        assert!(!is_under_replicated(&partitions[3]));
        assert!(is_under_replicated(&partitions[4]));
    }
}

/// A transaction as the HTTP API shows it (DescribeTransactions' view, from its coordinator).
pub struct TxnView {
    pub transactional_id: String,
    pub coordinator: u64,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// -1 when no transaction has started.
    pub start_ms: i64,
    pub partitions: Vec<(String, Vec<i32>)>,
}

impl TxnView {
    /// Ongoing or being ended (markers not yet all written): it holds partitions' last
    /// stable offsets back.
    pub fn is_open(&self) -> bool {
        crate::txn::schema::TxnState::from_name(&self.state).is_some_and(|s| s.is_open())
    }
}

const TXN_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Every transactional id of the cluster, asked of every broker as `kafka-transactions.sh list`
/// and `describe` do (ListTransactions, then DescribeTransactions with the ids it named), through
/// the Kafka handlers here and the peer client elsewhere. Also returns the brokers that did not
/// answer, so a view can say it is partial.
pub async fn transactions(http: &Http) -> (Vec<TxnView>, Vec<u64>) {
    let image = http.broker.controller.image();
    let me = http.broker.settings.node_id;
    let asks = image.brokers.keys().map(|&node| async move {
        let route = if node == me { kafka::Route::Here } else { kafka::Route::Peer(node) };
        (node, coordinator_transactions(http, node, route, None).await)
    });
    let mut all = Vec::new();
    let mut unreachable = Vec::new();
    for (node, answer) in futures_util::future::join_all(asks).await {
        match answer {
            Ok(views) => all.extend(views),
            Err(e) => {
                tracing::debug!(node, error = %e.message, "transactions: broker did not answer");
                unreachable.push(node);
            }
        }
    }
    all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    (all, unreachable)
}

/// One transactional id, from its coordinator (the leader of its `__transaction_state`
/// partition); 404 when it is unknown.
pub async fn transaction(http: &Http, transactional_id: &str) -> ApiResult<TxnView> {
    // Refused before the 404s, as DescribeTransactions does.
    require(&http.broker, Operation::Describe, ResourceType::TransactionalId, transactional_id)?;
    let image = http.broker.controller.image();
    let me = http.broker.settings.node_id;
    let not_found = || {
        ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            40403,
            format!("transactional id '{transactional_id}' not found"),
        )
    };
    let topic = crate::txn::coordinator::TRANSACTION_STATE_TOPIC;
    if !image.topics.contains_key(topic) {
        return Err(not_found());
    }
    let partition = http.broker.txn.partition_of(transactional_id);
    let route = kafka::leader_route(me, &image, topic, partition as i32);
    let coordinator = match route {
        kafka::Route::Here => me,
        kafka::Route::Peer(node) => node,
    };
    let views = coordinator_transactions(http, coordinator, route, Some(transactional_id)).await?;
    views.into_iter().next().ok_or_else(not_found)
}

/// The transactions broker `coordinator` (reached by `route`) knows: `only` one id, else every
/// id it lists.
async fn coordinator_transactions(
    http: &Http,
    coordinator: u64,
    route: kafka::Route,
    only: Option<&str>,
) -> ApiResult<Vec<TxnView>> {
    use kafka_protocol::messages::{DescribeTransactionsRequest, ListTransactionsRequest, TransactionalId};
    use kafka_protocol::ResponseError;
    let ids: Vec<TransactionalId> = match only {
        Some(id) => vec![TransactionalId(handlers::str_bytes(id))],
        None => {
            let request = ListTransactionsRequest::default();
            let response = match route {
                kafka::Route::Here => {
                    handlers::list_transactions::handle(&http.broker, &kafka::header(kafka::LIST_TRANSACTIONS), request)
                        .await
                        .ok_or_else(|| ApiError::internal("ListTransactions returned no response"))?
                }
                kafka::Route::Peer(node) => {
                    kafka::forward(http, node, kafka::LIST_TRANSACTIONS, &request, TXN_CALL_TIMEOUT).await?
                }
            };
            if response.error_code != 0 {
                return Err(ApiError::kafka_code(response.error_code, Some("ListTransactions")));
            }
            response.transaction_states.into_iter().map(|t| t.transactional_id).collect()
        }
    };
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let request = DescribeTransactionsRequest::default().with_transactional_ids(ids);
    let response = match route {
        kafka::Route::Here => {
            handlers::describe_transactions::handle(&http.broker, &kafka::header(kafka::DESCRIBE_TRANSACTIONS), request)
                .await
                .ok_or_else(|| ApiError::internal("DescribeTransactions returned no response"))?
        }
        kafka::Route::Peer(node) => {
            kafka::forward(http, node, kafka::DESCRIBE_TRANSACTIONS, &request, TXN_CALL_TIMEOUT).await?
        }
    };
    let mut views = Vec::new();
    for t in response.transaction_states {
        // An id that expired or moved between the two calls is simply not shown.
        if t.error_code == ResponseError::TransactionalIdNotFound.code() {
            continue;
        }
        if t.error_code != 0 {
            return Err(ApiError::kafka_code(
                t.error_code,
                Some(&format!("transactional id '{}'", &*t.transactional_id)),
            ));
        }
        views.push(TxnView {
            transactional_id: t.transactional_id.to_string(),
            coordinator,
            state: t.transaction_state.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.transaction_timeout_ms,
            start_ms: t.transaction_start_time_ms,
            partitions: t.topics.into_iter().map(|d| (d.topic.0.to_string(), d.partitions)).collect(),
        });
    }
    Ok(views)
}
