//! DescribeCluster: cluster id, controller and registered brokers. Only the broker endpoint
//! type (1) is served, as on a Kafka broker; authorized operations are never reported.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{broker_id, client_endpoint, str_bytes};
use crate::server::Broker;

/// Kafka's `EndpointType.BROKER`.
const ENDPOINT_BROKERS: i8 = 1;

pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    request: DescribeClusterRequest,
) -> Option<DescribeClusterResponse> {
    // v0 has no endpoint type: it means brokers, and the response must not carry another.
    let endpoint_type = if header.request_api_version >= 1 { request.endpoint_type } else { ENDPOINT_BROKERS };
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(endpoint_type)
        .with_cluster_id(str_bytes(&broker.settings.cluster_id))
        .with_cluster_authorized_operations(i32::MIN);
    if endpoint_type != ENDPOINT_BROKERS {
        return Some(
            response
                .with_error_code(ResponseError::UnsupportedEndpointType.code())
                .with_error_message(Some(str_bytes(&format!("Unsupported endpoint type {endpoint_type}")))),
        );
    }
    let image = broker.controller.image();
    let brokers = image
        .brokers
        .values()
        .filter_map(|b| {
            let (host, port) = client_endpoint(b)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(broker_id(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(port as i32)
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    let controller = broker.controller.leader_id().unwrap_or(broker.settings.node_id);
    Some(response.with_controller_id(broker_id(controller)).with_brokers(brokers))
}
