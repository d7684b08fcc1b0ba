//! AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the producer's
//! transaction, so the coordinator writes its marker there and the transactional offset
//! commits (TxnOffsetCommit) become visible or vanish with the transaction.

use crate::security::acl::{Operation, ResourceType};
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::find_coordinator::ensure_offsets_topic;
use crate::group::OFFSETS_TOPIC;
use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: AddOffsetsToTxnRequest,
) -> Option<AddOffsetsToTxnResponse> {
    let group: &str = &request.group_id.0;
    let outcome = if group.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else if !broker.authorized(Operation::Write, ResourceType::TransactionalId, &request.transactional_id.0) {
        Err(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !broker.authorized(Operation::Read, ResourceType::Group, group) {
        Err(ResponseError::GroupAuthorizationFailed)
    } else {
        match ensure_offsets_topic(broker).await {
            Ok(()) => {
                let partition = broker.groups.offsets.partition_of(group) as i32;
                broker
                    .txn
                    .add_partitions(
                        &request.transactional_id.0,
                        request.producer_id.0,
                        request.producer_epoch,
                        &[(OFFSETS_TOPIC.to_string(), partition)],
                        0,
                    )
                    .await
            }
            Err(code) => Err(code),
        }
    };
    Some(AddOffsetsToTxnResponse::default().with_error_code(outcome.err().map_or(0, |c| c.code())))
}
