//! AlterUserScramCredentials (KIP-554): upserts and deletes users' SCRAM credentials through
//! the metadata quorum. The client salts and hashes (`salted_password`); the broker derives
//! and stores StoredKey and ServerKey, never a password. Kafka's checks, one result per user:
//! an empty user name or a salt, salted password or iteration count outside Kafka's bounds is
//! UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, a (user,
//! mechanism) altered twice in one request DUPLICATE_RESOURCE, the deletion of a credential
//! that does not exist RESOURCE_NOT_FOUND. A user with any refused alteration has none applied.

use crate::security::acl::Operation;
use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::controller::{ApplyOutcome, MetadataRecord};
use crate::security::scram::{ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use crate::server::{controller_error_code, Broker};

type Refusal = (ResponseError, String);

fn mechanism_of(id: i8) -> Result<ScramMechanism, Refusal> {
    ScramMechanism::from_id(id)
        .ok_or_else(|| (ResponseError::UnsupportedSaslMechanism, format!("Unknown SCRAM mechanism {id}")))
}

fn check_user(user: &str) -> Result<(), Refusal> {
    if user.is_empty() {
        return Err((ResponseError::UnacceptableCredential, "Username must not be empty".into()));
    }
    Ok(())
}

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: AlterUserScramCredentialsRequest,
) -> Option<AlterUserScramCredentialsResponse> {
    // Per user, in request order: the records to apply, or the first refusal.
    let mut per_user: BTreeMap<String, Result<Vec<MetadataRecord>, Refusal>> = BTreeMap::new();
    let mut seen: BTreeMap<(String, i8), usize> = BTreeMap::new();
    let image = broker.controller.image();
    let cluster_denied = !broker.authorized_cluster(Operation::Alter);
    let deletions = request.deletions.iter().map(|d| (d.name.to_string(), d.mechanism, None));
    let upsertions = request.upsertions.iter().map(|u| (u.name.to_string(), u.mechanism, Some(u)));
    for (user, mechanism_id, upsertion) in deletions.chain(upsertions) {
        *seen.entry((user.clone(), mechanism_id)).or_default() += 1;
        let record = (|| {
            if cluster_denied {
                return Err((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.".to_string()));
            }
            check_user(&user)?;
            let mechanism = mechanism_of(mechanism_id)?;
            let Some(u) = upsertion else {
                if !image.scram_credentials.contains_key(&(user.clone(), mechanism)) {
                    return Err((
                        ResponseError::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist".to_string(),
                    ));
                }
                return Ok(MetadataRecord::DeleteScramCredential {
                    user: user.clone(),
                    mechanism: mechanism.name().into(),
                });
            };
            let iterations = u.iterations;
            if iterations < MIN_ITERATIONS as i32 {
                return Err((ResponseError::UnacceptableCredential, format!("Too few iterations: {iterations}")));
            }
            if iterations > MAX_ITERATIONS as i32 {
                return Err((ResponseError::UnacceptableCredential, format!("Too many iterations: {iterations}")));
            }
            if u.salt.is_empty() || u.salted_password.len() != mechanism.output_len() {
                return Err((
                    ResponseError::UnacceptableCredential,
                    format!(
                        "a {} credential needs a salt and a salted password of {} bytes",
                        mechanism.name(),
                        mechanism.output_len()
                    ),
                ));
            }
            let credential = ScramCredential::from_salted_password(
                mechanism,
                u.salt.to_vec(),
                &u.salted_password,
                iterations as u32,
            );
            Ok(MetadataRecord::UpsertScramCredential {
                user: user.clone(),
                mechanism: mechanism.name().into(),
                salt: credential.salt,
                stored_key: credential.stored_key,
                server_key: credential.server_key,
                iterations: credential.iterations,
            })
        })();
        let entry = per_user.entry(user).or_insert_with(|| Ok(Vec::new()));
        match (entry.as_mut(), record) {
            (Ok(records), Ok(record)) => records.push(record),
            (Ok(_), Err(refusal)) => *entry = Err(refusal),
            (Err(_), _) => {}
        }
    }
    for ((user, _), count) in seen {
        if count > 1 {
            per_user.insert(
                user,
                Err((
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request".into(),
                )),
            );
        }
    }
    let mut results = Vec::with_capacity(per_user.len());
    for (user, outcome) in per_user {
        let outcome = match outcome {
            Ok(records) => apply(broker, records).await,
            Err(refusal) => Err(refusal),
        };
        let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
        results.push(match outcome {
            Ok(()) => result,
            Err((code, message)) => result.with_error_code(code.code()).with_error_message(Some(str_bytes(&message))),
        });
    }
    Some(AlterUserScramCredentialsResponse::default().with_results(results))
}

/// Commits one user's alterations in one raft entry.
async fn apply(broker: &Broker, records: Vec<MetadataRecord>) -> Result<(), Refusal> {
    match broker.controller.propose(MetadataRecord::Batch(records)).await {
        Ok(ApplyOutcome::Batch(outcomes)) => match outcomes.iter().find(|o| **o != ApplyOutcome::Applied) {
            None => Ok(()),
            // Deleted meanwhile by another request.
            Some(ApplyOutcome::UnknownScramCredential) => {
                Err((ResponseError::ResourceNotFound, "Attempt to delete a user credential that does not exist".into()))
            }
            Some(other) => Err((ResponseError::UnknownServerError, format!("unexpected outcome {other:?}"))),
        },
        Ok(other) => Err((ResponseError::UnknownServerError, format!("unexpected outcome {other:?}"))),
        Err(e) => Err((controller_error_code(&e), e.to_string())),
    }
}
