//! Accepting connections and serving one: 4-byte size framing, header decoding, dispatch,
//! response framing. Requests of a connection are handled one at a time, in order.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::response::{pass_through_of, Frame, ResponseBuf};
use super::{handlers, versions, Broker};

tokio::task_local! {
    /// The client address of the request being handled (Kafka reports it as a group member's
    /// `client_host`).
    static PEER: SocketAddr;
}

/// The address of the client whose request is being handled, in Kafka's `/<ip>` form.
pub fn client_host() -> String {
    PEER.try_with(|peer| format!("/{}", peer.ip())).unwrap_or_default()
}

/// Runs `future` as if for a client at `peer` (what `client_host` reports), for requests that
/// reach the handlers without a Kafka connection (HTTP consumer instances).
pub async fn as_peer<F: std::future::Future>(peer: SocketAddr, future: F) -> F::Output {
    PEER.scope(peer, future).await
}

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("request of {size} bytes exceeds socket.request.max.bytes {max}")]
    TooLarge { size: i64, max: usize },
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("unknown api key {0}")]
    UnknownApi(i16),
    #[error("unsupported version {version} of {api:?}")]
    UnsupportedVersion { api: ApiKey, version: i16 },
}

impl ConnectionError {
    /// The `reason` label of the errors metric.
    fn reason(&self) -> &'static str {
        match self {
            ConnectionError::Io(_) => "io",
            ConnectionError::TooLarge { .. } => "too_large",
            ConnectionError::Malformed(_) => "malformed",
            ConnectionError::UnknownApi(_) => "unknown_api",
            ConnectionError::UnsupportedVersion { .. } => "unsupported_version",
        }
    }
}

/// Accepts connections until `shutdown` turns true; each connection runs in its own task.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let broker = broker.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let metrics = broker.metrics.clone();
                    metrics.connections.inc();
                    metrics.connections_created.inc();
                    match handle_connection(stream, peer, broker, shutdown).await {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        Err(ConnectionError::Io(e)) => tracing::debug!(%peer, error = %e, "connection closed"),
                        Err(e) => {
                            metrics.kafka_request_error(e.reason());
                            tracing::warn!(%peer, error = %e, "closing connection");
                        }
                    }
                    metrics.connections.dec();
                });
            }
            Err(e) => {
                // EMFILE and friends: keep serving the connections we have.
                tracing::warn!(error = %e, "accept failed");
                tokio::task::yield_now().await;
            }
        }
    }
}

async fn handle_connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let max = broker.settings.request_max_bytes;
    loop {
        let size = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            size = reader.read_i32() => match size {
                Ok(size) => size,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            },
        };
        if size < 0 || size as usize > max {
            return Err(ConnectionError::TooLarge { size: size as i64, max });
        }
        let mut frame = BytesMut::zeroed(size as usize);
        reader.read_exact(&mut frame).await?;
        let frame = frame.freeze();
        let started = std::time::Instant::now();
        let api_key = if frame.len() >= 2 { i16::from_be_bytes([frame[0], frame[1]]) } else { -1 };
        if let Some(response) = PEER.scope(peer, handle_frame(&broker, frame)).await? {
            response.write_to(&mut writer).await?;
        }
        broker.metrics.kafka_request(api_key, started.elapsed().as_secs_f64());
        tracing::trace!(%peer, "request handled");
    }
}

/// Decodes one request frame, runs its handler and returns the framed response (or none, for
/// acks=0 produce).
async fn handle_frame(broker: &Broker, mut frame: Bytes) -> Result<Option<Frame>, ConnectionError> {
    if frame.len() < 8 {
        return Err(ConnectionError::Malformed(format!("frame of {} bytes has no request header", frame.len())));
    }
    let api_key_raw = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api = ApiKey::try_from(api_key_raw).map_err(|_| ConnectionError::UnknownApi(api_key_raw))?;
    if api == ApiKey::ApiVersions && !versions::is_supported(api, version) {
        // The spec: answer an unknown ApiVersions version with UNSUPPORTED_VERSION in a v0
        // response that lists what we support, so the client can pick.
        let body = handlers::api_versions::unsupported_version_response();
        return Ok(Some(frame_response(correlation_id, 0, &body, 0)?));
    }
    if !versions::is_supported(api, version) {
        return Err(ConnectionError::UnsupportedVersion { api, version });
    }
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| ConnectionError::Malformed(format!("{api:?} v{version} header: {e}")))?;
    let response_header_version = api.response_header_version(version);
    macro_rules! dispatch {
        ($( $key:ident => $module:ident ),* $(,)?) => {
            match api {
                $(
                    ApiKey::$key => {
                        let request = Decodable::decode(&mut frame, version)
                            .map_err(|e| ConnectionError::Malformed(format!("{api:?} v{version} body: {e}")))?;
                        match handlers::$module::handle(broker, &header, request).await {
                            Some(response) => {
                                Some(frame_response(correlation_id, response_header_version, &response, version)?)
                            }
                            None => None,
                        }
                    }
                )*
                _ => return Err(ConnectionError::UnsupportedVersion { api, version }),
            }
        };
    }
    let response = dispatch! {
        ApiVersions => api_versions,
        Metadata => metadata,
        Produce => produce,
        Fetch => fetch,
        ListOffsets => list_offsets,
        CreateTopics => create_topics,
        DeleteTopics => delete_topics,
        CreatePartitions => create_partitions,
        DeleteRecords => delete_records,
        InitProducerId => init_producer_id,
        OffsetForLeaderEpoch => offset_for_leader_epoch,
        DescribeConfigs => describe_configs,
        AlterConfigs => alter_configs,
        IncrementalAlterConfigs => incremental_alter_configs,
        DescribeCluster => describe_cluster,
        FindCoordinator => find_coordinator,
        OffsetCommit => offset_commit,
        OffsetFetch => offset_fetch,
        OffsetDelete => offset_delete,
        JoinGroup => join_group,
        SyncGroup => sync_group,
        Heartbeat => heartbeat,
        LeaveGroup => leave_group,
        ListGroups => list_groups,
        DescribeGroups => describe_groups,
        DeleteGroups => delete_groups,
    };
    Ok(response)
}

/// `[size][response header][body]` in one buffer.
fn frame_response<T: Encodable + 'static>(
    correlation_id: i32,
    header_version: i16,
    body: &T,
    version: i16,
) -> Result<Frame, ConnectionError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let encode_error = |e: anyhow::Error| ConnectionError::Malformed(format!("response: {e}"));
    // Sized up front: the copied part is allocated once; fetched records are not copied at all.
    let size = header.compute_size(header_version).map_err(encode_error)?
        + body.compute_size(version).map_err(encode_error)?;
    let mut buf = ResponseBuf::new(4 + size, pass_through_of(body));
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version).map_err(encode_error)?;
    body.encode(&mut buf, version).map_err(encode_error)?;
    debug_assert_eq!(buf.len(), 4 + size);
    Ok(buf.into_frame())
}
