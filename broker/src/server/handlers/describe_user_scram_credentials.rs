//! DescribeUserScramCredentials (KIP-554): the mechanisms and iterations of users' SCRAM
//! credentials (never salts or keys), from the metadata image. All users with a credential
//! when no list is given; a listed user without one is RESOURCE_NOT_FOUND, a user listed twice
//! DUPLICATE_RESOURCE, as Kafka answers.

use crate::security::acl::Operation;
use std::collections::BTreeMap;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    request: DescribeUserScramCredentialsRequest,
) -> Option<DescribeUserScramCredentialsResponse> {
    if !broker.authorized_cluster(Operation::Describe) {
        return Some(
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                .with_error_message(Some(str_bytes("Cluster authorization failed."))),
        );
    }
    let image = broker.controller.image();
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), credential) in &image.scram_credentials {
        by_user.entry(user).or_default().push(
            CredentialInfo::default().with_mechanism(mechanism.id()).with_iterations(credential.iterations as i32),
        );
    }
    let found = |user: &str, infos: Vec<CredentialInfo>| {
        DescribeUserScramCredentialsResult::default().with_user(str_bytes(user)).with_credential_infos(infos)
    };
    let results = match request.users {
        None => by_user.into_iter().map(|(user, infos)| found(user, infos)).collect(),
        Some(users) => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for user in &users {
                *counts.entry(user.name.as_str()).or_default() += 1;
            }
            let mut results = Vec::new();
            for (user, count) in counts {
                let failed = |code: ResponseError, message: &str| {
                    DescribeUserScramCredentialsResult::default()
                        .with_user(str_bytes(user))
                        .with_error_code(code.code())
                        .with_error_message(Some(str_bytes(message)))
                };
                results.push(if count > 1 {
                    failed(
                        ResponseError::DuplicateResource,
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    )
                } else {
                    match by_user.get(user) {
                        Some(infos) => found(user, infos.clone()),
                        None => failed(
                            ResponseError::ResourceNotFound,
                            "Attempt to describe a user credential that does not exist",
                        ),
                    }
                });
            }
            results
        }
    };
    Some(DescribeUserScramCredentialsResponse::default().with_results(results))
}
