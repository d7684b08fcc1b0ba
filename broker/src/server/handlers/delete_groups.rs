//! DeleteGroups (v0-2): deletes Empty groups (NON_EMPTY_GROUP otherwise) with their committed
//! offsets and stored metadata, atomically with respect to joins
//! (`GroupCoordinator::delete_group`); GROUP_ID_NOT_FOUND for a group nobody knows.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::join_group::authorize_and_check_coordinator;
use crate::group::GroupDeleteError;
use crate::security::acl::Operation;
use crate::server::{offset_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DeleteGroupsRequest,
) -> Option<DeleteGroupsResponse> {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in &request.groups_names {
        let group = group_id.0.to_string();
        let outcome = match authorize_and_check_coordinator(broker, &group, Operation::Delete) {
            Err(code) => Err(code),
            Ok(()) => delete(broker, group).await,
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id.clone())
                .with_error_code(outcome.err().map_or(0, |e| e.code())),
        );
    }
    Some(DeleteGroupsResponse::default().with_results(results))
}

async fn delete(broker: &Broker, group: String) -> Result<(), ResponseError> {
    let groups = broker.groups.clone();
    // Tombstones are appended to a log: off the async workers.
    let deleted = tokio::task::spawn_blocking(move || groups.delete_group(&group))
        .await
        .map_err(|_| ResponseError::UnknownServerError)?;
    let replicated = match deleted {
        Ok(replicated) => replicated,
        Err(GroupDeleteError::NotEmpty) => return Err(ResponseError::NonEmptyGroup),
        Err(GroupDeleteError::NotFound) => return Err(ResponseError::GroupIdNotFound),
        Err(GroupDeleteError::Store(e)) => return Err(offset_error_code(&e)),
    };
    // Answered once the ISR has the tombstones (a leader lost before would bring the offsets
    // back), as Kafka answers DeleteGroups.
    if let Some(replicated) = replicated {
        replicated.wait(crate::group::Replicated::TIMEOUT).await.map_err(|e| offset_error_code(&e))?;
    }
    Ok(())
}
