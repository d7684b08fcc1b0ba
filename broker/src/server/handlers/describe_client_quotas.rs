//! DescribeClientQuotas (KIP-546): Runnel enforces no client quotas, so every filter matches
//! nothing and the answer is an empty list, which is what Kafka answers where none are set.
//! Served because `kafka-configs.sh --describe --entity-type users` asks for quotas next to
//! the users' SCRAM credentials. (AlterClientQuotas is not served: a quota set there would be
//! silently unenforced.)

use crate::security::acl::Operation;
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse, RequestHeader};

use crate::server::Broker;

pub async fn handle(
    broker: &Broker,
    _header: &RequestHeader,
    _request: DescribeClientQuotasRequest,
) -> Option<DescribeClientQuotasResponse> {
    if !broker.authorized_cluster(Operation::DescribeConfigs) {
        return Some(
            DescribeClientQuotasResponse::default()
                .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code()),
        );
    }
    Some(DescribeClientQuotasResponse::default().with_entries(Some(Vec::new())))
}
