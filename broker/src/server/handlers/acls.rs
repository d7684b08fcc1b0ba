//! CreateAcls, DescribeAcls and DeleteAcls (KIP-11, KIP-290), so `kafka-acls.sh` and the admin
//! clients manage the ACLs of the metadata quorum as against Kafka: creating and deleting need
//! ALTER on the cluster, describing DESCRIBE; without an authorizer every call answers
//! SECURITY_DISABLED ("No Authorizer is configured"), as Kafka does.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, RequestHeader,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::controller::{AclEntry, MetadataRecord};
use crate::security::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, ANY, MATCH};
use crate::server::{controller_error_code, Broker};

const NO_AUTHORIZER: &str = "No Authorizer is configured.";

type Refusal = (ResponseError, String);

fn invalid(message: impl Into<String>) -> Refusal {
    (ResponseError::InvalidRequest, message.into())
}

/// Decodes a filter from the request's codes (Kafka's `AclBindingFilter`); UNKNOWN codes are
/// INVALID_REQUEST.
#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, Refusal> {
    Ok(AclFilter {
        resource_type: match resource_type {
            ANY => None,
            code => {
                Some(ResourceType::from_code(code).ok_or_else(|| invalid(format!("unknown resource type {code}")))?)
            }
        },
        resource_name: resource_name.map(|n| n.to_string()),
        pattern: match pattern_type {
            ANY | MATCH => Err(pattern_type),
            code => Ok(PatternType::from_code(code).ok_or_else(|| invalid(format!("unknown pattern type {code}")))?),
        },
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation: match operation {
            ANY => None,
            code => Some(Operation::from_code(code).ok_or_else(|| invalid(format!("unknown operation {code}")))?),
        },
        permission: match permission {
            ANY => None,
            code => {
                Some(Permission::from_code(code).ok_or_else(|| invalid(format!("unknown permission type {code}")))?)
            }
        },
    })
}

pub mod create_acls {
    use super::*;

    pub async fn handle(
        broker: &Broker,
        _header: &RequestHeader,
        request: CreateAclsRequest,
    ) -> Option<CreateAclsResponse> {
        let refuse_all = |code: ResponseError, message: &str| {
            let result =
                AclCreationResult::default().with_error_code(code.code()).with_error_message(Some(str_bytes(message)));
            CreateAclsResponse::default().with_results(vec![result; request.creations.len()])
        };
        if !broker.settings.authorizer.enabled {
            return Some(refuse_all(ResponseError::SecurityDisabled, NO_AUTHORIZER));
        }
        if !broker.authorized_cluster(Operation::Alter) {
            return Some(refuse_all(ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed"));
        }
        let decoded: Vec<Result<AclBinding, Refusal>> = request
            .creations
            .iter()
            .map(|c| {
                let binding = AclBinding {
                    resource_type: ResourceType::from_code(c.resource_type)
                        .ok_or_else(|| invalid(format!("Invalid resource type {}", c.resource_type)))?,
                    resource_name: c.resource_name.to_string(),
                    pattern: PatternType::from_code(c.resource_pattern_type)
                        .ok_or_else(|| invalid(format!("Invalid pattern type {}", c.resource_pattern_type)))?,
                    principal: c.principal.to_string(),
                    host: c.host.to_string(),
                    operation: Operation::from_code(c.operation)
                        .ok_or_else(|| invalid(format!("Invalid operation {}", c.operation)))?,
                    permission: Permission::from_code(c.permission_type)
                        .ok_or_else(|| invalid(format!("Invalid permission type {}", c.permission_type)))?,
                };
                binding.validate().map_err(invalid)?;
                Ok(binding)
            })
            .collect();
        let valid: Vec<AclEntry> = decoded.iter().filter_map(|d| d.as_ref().ok()).map(AclEntry::of).collect();
        let committed: Result<(), Refusal> = if valid.is_empty() {
            Ok(())
        } else {
            broker
                .controller
                .propose(MetadataRecord::CreateAcls { acls: valid })
                .await
                .map(|_| ())
                .map_err(|e| (controller_error_code(&e), e.to_string()))
        };
        let results = decoded
            .into_iter()
            .map(|d| match d.and_then(|_| committed.clone()) {
                Ok(()) => AclCreationResult::default(),
                Err((code, message)) => AclCreationResult::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&message))),
            })
            .collect();
        Some(CreateAclsResponse::default().with_results(results))
    }
}

pub mod describe_acls {
    use super::*;

    pub async fn handle(
        broker: &Broker,
        _header: &RequestHeader,
        request: DescribeAclsRequest,
    ) -> Option<DescribeAclsResponse> {
        let refuse = |code: ResponseError, message: &str| {
            DescribeAclsResponse::default().with_error_code(code.code()).with_error_message(Some(str_bytes(message)))
        };
        if !broker.settings.authorizer.enabled {
            return Some(refuse(ResponseError::SecurityDisabled, NO_AUTHORIZER));
        }
        if !broker.authorized_cluster(Operation::Describe) {
            return Some(refuse(ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed"));
        }
        let filter = match filter(
            request.resource_type_filter,
            request.resource_name_filter.as_ref(),
            request.pattern_type_filter,
            request.principal_filter.as_ref(),
            request.host_filter.as_ref(),
            request.operation,
            request.permission_type,
        ) {
            Ok(filter) => filter,
            Err((code, message)) => return Some(refuse(code, &message)),
        };
        let image = broker.controller.image();
        // Grouped by resource pattern, as Kafka answers.
        let mut resources: BTreeMap<(ResourceType, String, PatternType), Vec<AclDescription>> = BTreeMap::new();
        for acl in image.acls.iter().filter(|a| filter.matches(a)) {
            resources.entry((acl.resource_type, acl.resource_name.clone(), acl.pattern)).or_default().push(
                AclDescription::default()
                    .with_principal(str_bytes(&acl.principal))
                    .with_host(str_bytes(&acl.host))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
        }
        let resources = resources
            .into_iter()
            .map(|((kind, name, pattern), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(kind.code())
                    .with_resource_name(str_bytes(&name))
                    .with_pattern_type(pattern.code())
                    .with_acls(acls)
            })
            .collect();
        Some(DescribeAclsResponse::default().with_resources(resources))
    }
}

pub mod delete_acls {
    use super::*;

    pub async fn handle(
        broker: &Broker,
        _header: &RequestHeader,
        request: DeleteAclsRequest,
    ) -> Option<DeleteAclsResponse> {
        let refuse_all = |code: ResponseError, message: &str| {
            let result = DeleteAclsFilterResult::default()
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(message)));
            DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()])
        };
        if !broker.settings.authorizer.enabled {
            return Some(refuse_all(ResponseError::SecurityDisabled, NO_AUTHORIZER));
        }
        if !broker.authorized_cluster(Operation::Alter) {
            return Some(refuse_all(ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed"));
        }
        let image = broker.controller.image();
        let mut doomed: Vec<AclEntry> = Vec::new();
        let mut results = Vec::with_capacity(request.filters.len());
        for f in &request.filters {
            let decoded = filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            );
            results.push(match decoded {
                Err((code, message)) => Err(DeleteAclsFilterResult::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&message)))),
                Ok(filter) => {
                    let matching: Vec<&AclBinding> = image.acls.iter().filter(|a| filter.matches(a)).collect();
                    doomed.extend(matching.iter().map(|a| AclEntry::of(a)));
                    Ok(matching
                        .into_iter()
                        .map(|acl| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(acl.resource_type.code())
                                .with_resource_name(str_bytes(&acl.resource_name))
                                .with_pattern_type(acl.pattern.code())
                                .with_principal(str_bytes(&acl.principal))
                                .with_host(str_bytes(&acl.host))
                                .with_operation(acl.operation.code())
                                .with_permission_type(acl.permission.code())
                        })
                        .collect::<Vec<_>>())
                }
            });
        }
        let committed = if doomed.is_empty() {
            Ok(())
        } else {
            broker.controller.propose(MetadataRecord::DeleteAcls { acls: doomed }).await.map(|_| ())
        };
        let filter_results = results
            .into_iter()
            .map(|result| match (result, &committed) {
                (Err(refused), _) => refused,
                (Ok(_), Err(e)) => DeleteAclsFilterResult::default()
                    .with_error_code(controller_error_code(e).code())
                    .with_error_message(Some(str_bytes(&e.to_string()))),
                (Ok(matching), Ok(())) => DeleteAclsFilterResult::default().with_matching_acls(matching),
            })
            .collect();
        Some(DeleteAclsResponse::default().with_filter_results(filter_results))
    }
}
