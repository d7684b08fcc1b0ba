//! TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction
//! (`send_offsets_to_transaction`). They are written to the group's `__consumer_offsets`
//! partition as a transactional batch of the producer and become visible only when the
//! transaction's commit marker arrives there. KIP-447: a member id, generation or instance id
//! the client sends is checked against the group like an OffsetCommit (a zombie of an older
//! generation is refused); without them (generation -1) the commit is not checked.
//! KIP-890: before the commit opens the producer's transaction on the group's
//! `__consumer_offsets` partition, the transaction's coordinator is asked about that partition,
//! as a partition leader asks for a Produce. Version 5+ (part 2, a client on transaction
//! version 2, which sends no AddOffsetsToTxn) asks it to add the partition; older versions (part
//! 1, with `transaction.partition.verification.enable`) ask whether AddOffsetsToTxn added it, so
//! a commit of a transaction already ended (a retry after a timeout abort, a zombie) is refused
//! instead of opening a transaction no coordinator will end, which would hold the partition's
//! last stable offset back and the commit pending forever.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{RequestHeader, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::find_coordinator::ensure_offsets_topic;
use super::offset_commit::{check_commits, CommitAsked};
use super::produce::{ask_coordinator, coordinator_busy, TxnAsk};
use crate::group::{Replicated, OFFSETS_TOPIC};
use crate::log::TxnVerification;
use crate::security::acl::{Operation, ResourceType};
use crate::server::{offset_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: TxnOffsetCommitRequest,
) -> Option<TxnOffsetCommitResponse> {
    let version = header.request_api_version;
    let group: &str = &request.group_id.0;
    let checked = !request.member_id.is_empty() || request.generation_id >= 0 || request.group_instance_id.is_some();
    // Kafka: WRITE on the transactional id, READ on the group, READ on each topic.
    let group_error = if group.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else if !broker.authorized(Operation::Write, ResourceType::TransactionalId, &request.transactional_id.0) {
        Err(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !broker.authorized(Operation::Read, ResourceType::Group, group) {
        Err(ResponseError::GroupAuthorizationFailed)
    } else {
        // The coordinator first (see OffsetCommit).
        match ensure_offsets_topic(broker).await.and_then(|()| super::join_group::check_coordinator(broker, group)) {
            Ok(()) if checked => broker.groups.validate_commit(
                group,
                &request.member_id,
                request.generation_id,
                request.group_instance_id.as_deref(),
                crate::group::CommitApi::TxnOffsetCommit,
            ),
            other => other,
        }
    };
    let image = broker.controller.image();
    let (group_error, verification) = match group_error {
        Ok(()) => match verify_offsets_partition(broker, &image, &request, version).await {
            Ok(verification) => (Ok(()), verification),
            Err(code) => (Err(code), TxnVerification::NotRequired),
        },
        Err(code) => (Err(code), TxnVerification::NotRequired),
    };
    let asked = request.topics.iter().map(|topic| {
        let partitions = topic.partitions.iter().map(|p| CommitAsked {
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: if version >= 2 { p.committed_leader_epoch } else { -1 },
            metadata: p.committed_metadata.as_deref().unwrap_or(""),
        });
        (&*topic.name.0, partitions.collect())
    });
    let readable = |topic: &str| broker.authorized(Operation::Read, ResourceType::Topic, topic);
    let (results, commits) = check_commits(&image, group_error, asked, readable);
    let written = match broker.groups.offsets.commit_transactional(
        group,
        (request.producer_id.0, request.producer_epoch),
        commits,
        verification,
    ) {
        Ok(None) => Ok(()),
        Ok(Some(replicated)) => replicated.wait(Replicated::TIMEOUT).await,
        Err(e) => Err(e),
    }
    .map_err(|e| {
        tracing::debug!(group, error = %e, "transactional offset commit failed");
        offset_error_code(&e)
    });
    let mut topics: Vec<TxnOffsetCommitResponseTopic> =
        request.topics.iter().map(|t| TxnOffsetCommitResponseTopic::default().with_name(t.name.clone())).collect();
    for (t, partition_index, result) in results {
        let code = result.and(written).err().map_or(0, |c| c.code());
        topics[t].partitions.push(
            TxnOffsetCommitResponsePartition::default().with_partition_index(partition_index).with_error_code(code),
        );
    }
    Some(TxnOffsetCommitResponse::default().with_topics(topics))
}

/// The first TxnOffsetCommit version that adds the offsets partition itself.
const IMPLICIT_ADD_VERSION: i16 = 5;

/// Asks the transaction's coordinator about the group's offsets partition (to add it from
/// version 5, to confirm AddOffsetsToTxn added it before) with a verification guard of the
/// partition in place: the verification the commit's append presents. Nothing is asked when a
/// transaction of the producer's epoch is open on the partition already, nor before version 5
/// with verification off. A coordinator this node cannot reach is COORDINATOR_NOT_AVAILABLE,
/// which the client retries.
async fn verify_offsets_partition(
    broker: &Broker,
    image: &crate::controller::MetadataImage,
    request: &TxnOffsetCommitRequest,
    version: i16,
) -> Result<TxnVerification, ResponseError> {
    let adding = version >= IMPLICIT_ADD_VERSION;
    if !adding && !broker.txn.settings.partition_verification {
        return Ok(TxnVerification::NotRequired);
    }
    let group: &str = &request.group_id.0;
    let producer = (request.producer_id.0, request.producer_epoch);
    let guard = match broker.groups.offsets.start_txn_verification(group, producer) {
        Ok(None) => return Ok(TxnVerification::Required(None)),
        Ok(Some(guard)) => guard,
        Err(e) => return Err(offset_error_code(&e)),
    };
    let partition = (OFFSETS_TOPIC.to_string(), broker.groups.offsets.partition_of(group) as i32);
    let mode = if adding { TxnAsk::Add } else { TxnAsk::Verify };
    let answer = ask_coordinator(broker, image, &request.transactional_id.0, producer, &[partition.clone()], mode)
        .await
        .and_then(|codes| match codes.get(&partition).copied().unwrap_or(0) {
            0 => Ok(()),
            code => Err(ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)),
        });
    let Err(code) = answer else { return Ok(TxnVerification::Required(Some(guard))) };
    broker.groups.offsets.end_txn_verification(group, producer.0, guard);
    Err(match code {
        code if coordinator_busy(code) => ResponseError::CoordinatorNotAvailable,
        // TRANSACTION_ABORTABLE exists from version 5 on.
        ResponseError::TransactionAbortable if !adding => ResponseError::InvalidTxnState,
        other => other,
    })
}
