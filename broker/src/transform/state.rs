//! Keyed state of stateful transforms, broker side: the changelog records a batch's state
//! changes become, and the restore of a partition's state from its changelog partition.
//!
//! The state itself (`runnel_runtime::KeyedState`) lives in memory, shared by the worker and
//! the guest instance; partition `p` of `__runnel_transform_<name>_state` (compacted) holds the
//! changes of input partition `p`: key = state key, value = new value or null (a deletion),
//! header `runnel.deployment` = the deployment that wrote it.
//!
//! Invariants:
//! - A batch's changes are written in the same delivery as its outputs (exactly-once: the same
//!   transaction as the outputs and the input position), so the committed changelog and the
//!   committed position always describe the same input prefix.
//! - A restore runs after the worker's InitProducerId, which aborted or completed every earlier
//!   transaction of the partition's transactional id (the changelog partition's only
//!   transactional writer). It reads `read_committed` (aborted changes never come back) up to
//!   the changelog leader's log end offset as it stood then, waiting for the last stable
//!   offset to reach it: so the restored state is the state of the committed position read
//!   after it.
//! - A deployment that starts fresh (its position from its `start` setting, not from a
//!   checkpoint) restores nothing and writes a **fresh-start marker** (empty key: state keys
//!   are never empty; value and header: the deployment) before its first checkpoint
//!   (exactly-once: in the same transaction; at-least-once: appended just before it, and only
//!   while its input is led here).
//! - A deployment that does not resume counts only its own changes (a redeploy keeps the
//!   deployment, so a new version continues them; another deployment's markers and changes,
//!   e.g. of a deleted stateful deployment of the name, never count).
//! - A deployment that resumes counts every change after the last marker, whoever wrote it:
//!   the marker's deployment, then those that resumed it (`--resume` continues the state of
//!   the position it continues, not that of every earlier deployment of the name). Before
//!   any marker (a changelog written before markers existed) every change counts.
//!   Compaction keeps the last marker (the latest of its key).

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use runnel_runtime::StateHandle;

use super::Host;
use crate::log::records::{for_each_committed_record, AbortedFilter};
use crate::partition::{FirstBatch, Isolation};

/// The header naming the deployment that wrote a changelog record.
pub(super) const DEPLOYMENT_HEADER: &str = "runnel.deployment";
/// The key of a fresh-start marker (see the module invariants).
pub(super) const FRESH_START_KEY: &[u8] = b"";
/// Bytes read per step of a restore.
const RESTORE_READ_BYTES: usize = 4 << 20;
/// Fetch v12: topics by name (v13 on, by id).
const FETCH_VERSION: i16 = 12;
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Between reads of a changelog whose stable offset has not reached the target yet.
const WAIT_STEP: Duration = Duration::from_millis(20);

/// What a restore found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Restored {
    /// Changelog records applied.
    pub records: u64,
    /// The changelog offset restored to.
    pub end: i64,
}

/// One read_committed read of a changelog partition from its leader.
struct Chunk {
    log_start_offset: i64,
    records: Bytes,
    /// (producer id, first offset) of the aborted transactions overlapping the read.
    aborted: Vec<(i64, i64)>,
}

/// One stateful worker's changelog partition and whose changes count in it.
pub(super) struct Changelog<'a> {
    pub host: &'a Host,
    pub topic: &'a str,
    pub partition: i32,
    /// Changes of other deployments are skipped unless `resume`.
    pub deployment: &'a str,
    pub resume: bool,
}

impl Changelog<'_> {
    /// Replaces the contents of `state` with the committed changes of the partition (see the
    /// module invariants); retries a leader that moved or is not known until `deadline`.
    pub(super) async fn restore(&self, state: &StateHandle, deadline: Instant) -> Result<Restored, String> {
        let mut last_error = String::new();
        while Instant::now() < deadline {
            match self.restore_once(state, deadline).await {
                Ok(restored) => return Ok(restored),
                Err(e) => last_error = e,
            }
            // Backoff before asking a (maybe new) leader again.
            tokio::time::sleep(WAIT_STEP * 10).await;
        }
        Err(format!("restoring the state from '{}' partition {}: {last_error}", self.topic, self.partition))
    }

    async fn restore_once(&self, state: &StateHandle, deadline: Instant) -> Result<Restored, String> {
        let (host, topic, partition) = (self.host, self.topic, self.partition);
        let (deployment, resume) = (self.deployment, self.resume);
        lock(state).clear();
        let target = log_end_offset(host, topic, partition).await?;
        let (mut offset, mut records) = (0i64, 0u64);
        while offset < target {
            let chunk = read(host, topic, partition, offset).await?;
            if offset < chunk.log_start_offset {
                offset = chunk.log_start_offset;
                continue;
            }
            if chunk.records.is_empty() {
                // The stable offset is below the target: the followers have not fetched the last
                // markers yet (the high watermark lags), or a transaction is still open.
                if Instant::now() >= deadline {
                    return Err(format!("the changelog's stable offset stayed below {target} (at {offset})"));
                }
                tokio::time::sleep(WAIT_STEP).await;
                continue;
            }
            let mut filter = AbortedFilter::new(chunk.aborted);
            let mut guard = lock(state);
            let next = for_each_committed_record(chunk.records, offset, usize::MAX, Some(&mut filter), |record| {
                let Some(key) = record.key else { return std::ops::ControlFlow::Continue(()) };
                if key.as_ref() == FRESH_START_KEY {
                    if resume {
                        // A deployment started fresh here: for its lineage nothing before counts.
                        guard.clear();
                        records = 0;
                    }
                    return std::ops::ControlFlow::Continue(());
                }
                let counts = resume
                    || record
                        .headers
                        .iter()
                        .any(|h| h.key == DEPLOYMENT_HEADER && h.value.as_deref() == Some(deployment.as_bytes()));
                if counts {
                    guard.restore(key.to_vec(), record.value.map(|v| v.to_vec()));
                    records += 1;
                }
                std::ops::ControlFlow::Continue(())
            });
            drop(guard);
            if next <= offset {
                return Err(format!("unreadable changelog batch at offset {offset}"));
            }
            offset = next;
        }
        Ok(Restored { records, end: offset })
    }
}

fn lock(state: &StateHandle) -> std::sync::MutexGuard<'_, runnel_runtime::KeyedState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The leader of the changelog partition, from the image.
fn leader(host: &Host, topic: &str, partition: i32) -> Result<(u64, i32), String> {
    let image = host.controller.image();
    let p = u32::try_from(partition)
        .ok()
        .and_then(|p| image.partition(topic, p))
        .ok_or_else(|| format!("the state topic '{topic}' has no partition {partition}"))?;
    let leader = p.leader.ok_or_else(|| format!("'{topic}' partition {partition} has no leader"))?;
    Ok((leader, p.leader_epoch))
}

/// The changelog leader's log end offset: everything acknowledged is below it (its high
/// watermark may still lag just after an election).
async fn log_end_offset(host: &Host, topic: &str, partition: i32) -> Result<i64, String> {
    let (leader, leader_epoch) = leader(host, topic, partition)?;
    if leader == host.node_id {
        let local = host.replicas.get(topic, partition as u32).filter(|p| p.is_leader());
        let local = local.ok_or_else(|| format!("'{topic}' partition {partition} is not led here yet"))?;
        return Ok(local.log_end_offset());
    }
    let request = OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(leader_epoch)
                .with_leader_epoch(leader_epoch)]),
    ]);
    let response = host
        .peers
        .call(leader, OFFSET_FOR_LEADER_EPOCH_VERSION, &request, PEER_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let answer = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| format!("node {leader} did not answer for '{topic}' partition {partition}"))?;
    if answer.error_code != 0 || answer.end_offset < 0 {
        return Err(format!(
            "node {leader}'s end offset of '{topic}' partition {partition}: {}",
            super::worker::error_name(answer.error_code)
        ));
    }
    Ok(answer.end_offset)
}

/// Reads committed changelog data from `offset` on the partition's leader.
async fn read(host: &Host, topic: &str, partition: i32, offset: i64) -> Result<Chunk, String> {
    let (leader, _) = leader(host, topic, partition)?;
    if leader == host.node_id {
        let local = host.replicas.get(topic, partition as u32).filter(|p| p.is_leader());
        let local = local.ok_or_else(|| format!("'{topic}' partition {partition} is not led here yet"))?;
        let data = local
            .read(offset.max(local.log_start_offset()), RESTORE_READ_BYTES, FirstBatch::Whole, Isolation::ReadCommitted)
            .map_err(|e| e.to_string())?;
        return Ok(Chunk {
            log_start_offset: data.log_start_offset,
            records: data.records,
            aborted: data.aborted.iter().map(|a| (a.producer_id, a.first_offset)).collect(),
        });
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(RESTORE_READ_BYTES as i32)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(RESTORE_READ_BYTES as i32)])]);
    let response = host.peers.call(leader, FETCH_VERSION, &request, PEER_TIMEOUT).await.map_err(|e| e.to_string())?;
    let answer = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| format!("node {leader} did not answer for '{topic}' partition {partition}"))?;
    const OFFSET_OUT_OF_RANGE: i16 = 1;
    if answer.error_code == OFFSET_OUT_OF_RANGE && answer.log_start_offset > offset {
        return Ok(Chunk { log_start_offset: answer.log_start_offset, records: Bytes::new(), aborted: Vec::new() });
    }
    if answer.error_code != 0 {
        return Err(format!(
            "node {leader} read of '{topic}' partition {partition} at {offset}: {}",
            super::worker::error_name(answer.error_code)
        ));
    }
    Ok(Chunk {
        log_start_offset: answer.log_start_offset,
        records: answer.records.clone().unwrap_or_default(),
        aborted: answer.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect(),
    })
}
