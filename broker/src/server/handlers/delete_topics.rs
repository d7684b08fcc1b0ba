//! DeleteTopics: topics by name (v1-5) or by name or topic id (v6) are deleted through the
//! metadata quorum (all of a request's in one entry, each with its own outcome); reconciling then closes and deletes their partition logs on this node.
//! `__consumer_offsets` may not be deleted (POLICY_VIOLATION): Kafka 4.x brokers accept it and
//! its groups break; Kafka's `kafka-topics.sh` refuses it, and so does Runnel, on the broker.

use std::collections::{BTreeSet, HashMap};

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader, TopicName};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::security::acl::{Operation, ResourceType};

use super::{str_bytes, topic_name, uuid_of};
use crate::controller::{ApplyOutcome, MetadataImage, MetadataRecord};
use crate::server::{controller_error_code, Broker};

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DeleteTopicsRequest,
) -> Option<DeleteTopicsResponse> {
    // v1-5 fill `topic_names`, v6 fills `topics`; the other list is empty.
    let targets: Vec<(Option<TopicName>, Uuid)> = request
        .topic_names
        .iter()
        .map(|name| (Some(name.clone()), Uuid::nil()))
        .chain(request.topics.iter().map(|t| (t.name.clone(), t.topic_id)))
        .collect();
    let image = broker.controller.image();
    // Kafka's order (ControllerApis.deleteTopics): a name or id given twice is refused whether or
    // not it exists; then a topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
    // before its existence is told (an id's name is not told either); then DELETE, on the topic
    // or the cluster.
    let mut raw_names: HashMap<&str, usize> = HashMap::new();
    let mut raw_ids: HashMap<Uuid, usize> = HashMap::new();
    for (name, id) in &targets {
        match name {
            Some(name) => *raw_names.entry(&name.0).or_default() += 1,
            None => *raw_ids.entry(*id).or_default() += 1,
        }
    }
    let describable = |name: &str| broker.authorized(Operation::Describe, ResourceType::Topic, name);
    let delete_any = broker.authorized_cluster(Operation::Delete);
    let denied = || (ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string());
    let resolved: Vec<Resolved> = targets
        .iter()
        .map(|(name, id)| {
            let repeated = match name {
                Some(name) => raw_names.get(&*name.0).is_some_and(|&n| n > 1),
                None => raw_ids.get(id).is_some_and(|&n| n > 1),
            };
            if repeated {
                let what = if name.is_some() { "name" } else { "id" };
                return Err((ResponseError::InvalidRequest, format!("Duplicate topic {what}.")));
            }
            if let Some(name) = name.as_ref().filter(|n| id.is_nil() && !describable(&n.0)) {
                tracing::debug!(topic = %name.0, "delete of a topic the client may not describe");
                return Err(denied());
            }
            resolve(&image, name.as_ref().map(|n| &*n.0), *id)
        })
        .collect();
    let duplicated = duplicates(&resolved);
    let checked: Vec<Resolved> = resolved
        .into_iter()
        .map(|target| match target {
            Ok(topic) if duplicated.contains(&topic.0) => Err((
                ResponseError::InvalidRequest,
                format!("topic '{}' appears more than once in the request", topic.0),
            )),
            // By id: the name stays untold (the response's name is the request's, null).
            Ok(topic) if !describable(&topic.0) => Err(denied()),
            Ok(topic) if !delete_any && !broker.authorized(Operation::Delete, ResourceType::Topic, &topic.0) => {
                Err(denied())
            }
            Ok(topic) if topic.0 == crate::group::OFFSETS_TOPIC => {
                Err((ResponseError::PolicyViolation, crate::group::OFFSETS_TOPIC_DELETE_REFUSED.to_string()))
            }
            other => other,
        })
        .collect();
    // One proposal for every topic to delete, each with its own outcome.
    let records =
        checked.iter().flatten().map(|(topic, _)| MetadataRecord::DeleteTopic { name: topic.clone() }).collect();
    let mut committed = broker.controller.propose_all(records).await.into_iter();
    let mut deleted = false;
    let mut responses = Vec::with_capacity(targets.len());
    for ((name, id), target) in targets.iter().zip(checked) {
        let response = match target {
            Ok((topic, topic_id)) => {
                let result =
                    DeletableTopicResult::default().with_name(Some(topic_name(&topic))).with_topic_id(topic_id);
                let outcome = committed
                    .next()
                    .ok_or_else(|| (ResponseError::UnknownServerError, "no outcome for this topic".to_string()));
                match outcome.and_then(|outcome| deleted_or_error(&topic, outcome)) {
                    Ok(()) => {
                        deleted = true;
                        result
                    }
                    Err((code, message)) => {
                        result.with_error_code(code.code()).with_error_message(Some(str_bytes(&message)))
                    }
                }
            }
            Err((code, message)) => DeletableTopicResult::default()
                .with_name(name.clone())
                .with_topic_id(*id)
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(&message))),
        };
        responses.push(response);
    }
    if deleted {
        broker.reconcile_now().await;
    }
    Some(DeleteTopicsResponse::default().with_responses(responses))
}

/// A request entry resolved to `(topic name, topic id)`, or the entry's error.
type Resolved = Result<(String, Uuid), (ResponseError, String)>;

/// The topic a request entry names, with its id; Kafka's rules for v6 entries: exactly one of
/// name and id.
fn resolve(image: &MetadataImage, name: Option<&str>, topic_id: Uuid) -> Resolved {
    match (name, topic_id.is_nil()) {
        (Some(_), false) => {
            Err((ResponseError::InvalidRequest, "You may not specify both topic name and topic id.".to_string()))
        }
        (None, true) => Err((ResponseError::InvalidRequest, "Neither topic name nor id were specified.".to_string())),
        (Some(name), true) => match image.topics.get(name) {
            Some(topic) => Ok((topic.name.clone(), uuid_of(topic.topic_id))),
            None => Err((ResponseError::UnknownTopicOrPartition, format!("topic '{name}' does not exist"))),
        },
        (None, false) => match image.topic_by_id(topic_id.as_bytes()) {
            Some(topic) => Ok((topic.name.clone(), topic_id)),
            None => Err((ResponseError::UnknownTopicId, format!("no topic has id {topic_id}"))),
        },
    }
}

/// Topics that more than one entry resolves to (by name, or by name and id): Kafka refuses
/// every such entry.
fn duplicates(resolved: &[Resolved]) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut duplicated = BTreeSet::new();
    for (name, _) in resolved.iter().flatten() {
        if !seen.insert(name.as_str()) {
            duplicated.insert(name.clone());
        }
    }
    duplicated
}

fn deleted_or_error(
    topic: &str,
    committed: Result<ApplyOutcome, std::sync::Arc<crate::controller::ControllerError>>,
) -> Result<(), (ResponseError, String)> {
    match committed {
        Ok(ApplyOutcome::Applied) => Ok(()),
        Ok(ApplyOutcome::UnknownTopic) => {
            Err((ResponseError::UnknownTopicOrPartition, format!("topic '{topic}' does not exist")))
        }
        Ok(other) => Err((ResponseError::UnknownServerError, format!("unexpected outcome {other:?}"))),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::TopicImage;

    #[test]
    fn entries_resolve_by_name_or_id_but_not_both() {
        // Proves Kafka's v6 rules: exactly one of name and id; unknown name vs unknown id codes.
        let id = Uuid::from_bytes([7; 16]);
        let mut image = MetadataImage::default();
        let topic = TopicImage {
            name: "t".to_string(),
            topic_id: *id.as_bytes(),
            partitions: Vec::new(),
            configs: Default::default(),
        };
        image.insert_topic(topic);
        assert_eq!(resolve(&image, Some("t"), Uuid::nil()).unwrap(), ("t".to_string(), id));
        assert_eq!(resolve(&image, None, id).unwrap(), ("t".to_string(), id));
        assert_eq!(resolve(&image, Some("t"), id).unwrap_err().0, ResponseError::InvalidRequest);
        assert_eq!(resolve(&image, None, Uuid::nil()).unwrap_err().0, ResponseError::InvalidRequest);
        assert_eq!(resolve(&image, Some("u"), Uuid::nil()).unwrap_err().0, ResponseError::UnknownTopicOrPartition);
        assert_eq!(resolve(&image, None, Uuid::from_bytes([8; 16])).unwrap_err().0, ResponseError::UnknownTopicId);
    }

    #[test]
    fn duplicates_are_detected_after_resolution() {
        // Proves two entries naming the same topic (e.g. once by name, once by id) are both
        // flagged, and errors do not count.
        let id = Uuid::from_bytes([1; 16]);
        let resolved = vec![
            Ok(("a".to_string(), id)),
            Ok(("b".to_string(), Uuid::nil())),
            Ok(("a".to_string(), id)),
            Err((ResponseError::UnknownTopicId, String::new())),
            Err((ResponseError::UnknownTopicId, String::new())),
        ];
        assert_eq!(duplicates(&resolved), ["a".to_string()].into());
    }
}
