//! Raw Kafka protocol against the real `runnel` binary: requests that stock clients never send
//! (corrupted batches, unsupported versions, oversized frames, garbage, pipelining), encoded
//! with the `kafka-protocol` crate over a plain `TcpStream`, so each answer — an error code in
//! the response, or the connection closed — is checked byte for byte. Also the admin APIs that
//! rdkafka does not expose (IncrementalAlterConfigs).

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource as LegacyAlterConfigsResource, AlterableConfig as LegacyAlterableConfig,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest, ListOffsetsRequest,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use runnel::log::records::BatchBuilder;
use runnel::log::Compression;
use support::Runnel;

/// Longest wait for any single response (a debug build on a loaded 2-core machine).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

// Kafka error codes the tests expect (org.apache.kafka.common.protocol.Errors).
const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const CORRUPT_MESSAGE: i16 = 2;
const MESSAGE_TOO_LARGE: i16 = 10;
const UNSUPPORTED_VERSION: i16 = 35;
const INVALID_CONFIG: i16 = 40;

// Versions used for requests: the newest this broker advertises (server/versions.rs).
const PRODUCE_V: i16 = 9;
const METADATA_V: i16 = 12;
const API_VERSIONS_V: i16 = 3;
const CREATE_TOPICS_V: i16 = 7;
const LIST_OFFSETS_V: i16 = 7;
const DESCRIBE_CONFIGS_V: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_V: i16 = 1;
const ALTER_CONFIGS_V: i16 = 2;

/// ConfigResource type of a topic; config sources and operations of Incremental AlterConfigs.
const RESOURCE_TOPIC: i8 = 2;
const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// One client connection speaking the Kafka protocol synchronously.
struct Conn {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Conn {
    fn open(node: &Runnel) -> Conn {
        let stream = TcpStream::connect(node.kafka_addr).expect("connect to runnel");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn { stream, next_correlation_id: 1 }
    }

    /// `[size][header][body]` of request `R` at `version`; returns the frame and its correlation id.
    fn frame<R: Request>(&mut self, version: i16, request: &R) -> (Bytes, i32) {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let api = ApiKey::try_from(R::KEY).unwrap();
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("runnel-kafka-errors")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, api.request_header_version(version)).unwrap();
        request.encode(&mut buf, version).unwrap();
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        (buf.freeze(), correlation_id)
    }

    fn send<R: Request>(&mut self, version: i16, request: &R) -> i32 {
        let (frame, correlation_id) = self.frame(version, request);
        self.stream.write_all(&frame).unwrap();
        correlation_id
    }

    /// The next response frame (without its size prefix).
    fn read_frame(&mut self) -> std::io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        assert!((0..64 << 20).contains(&size), "response frame of {size} bytes");
        let mut frame = vec![0u8; size as usize];
        self.stream.read_exact(&mut frame)?;
        Ok(Bytes::from(frame))
    }

    /// Reads the response to request `R` sent at `version` with `correlation_id`.
    fn recv<R: Request>(&mut self, version: i16, correlation_id: i32) -> R::Response {
        let mut frame = self.read_frame().expect("a response");
        let api = ApiKey::try_from(R::KEY).unwrap();
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, correlation_id, "responses come back in request order");
        let response = R::Response::decode(&mut frame, version).unwrap();
        assert!(frame.is_empty(), "{api:?} v{version} response has {} trailing bytes", frame.len());
        response
    }

    fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let correlation_id = self.send(version, request);
        self.recv::<R>(version, correlation_id)
    }

    /// Asserts that the broker closes this connection (EOF or reset) rather than answering.
    fn assert_closed_by_broker(&mut self, what: &str) {
        let mut buf = [0u8; 256];
        match self.stream.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("after {what}: expected the connection closed, got {n} bytes: {:?}", &buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("after {what}: the connection is still open after {IO_TIMEOUT:?}")
            }
            Err(e) => panic!("after {what}: unexpected read error {e}"),
        }
    }

    /// Asserts the connection still serves requests: ApiVersions and Metadata both answer.
    fn assert_usable(&mut self) {
        let versions = self.call(API_VERSIONS_V, &api_versions_request());
        assert_eq!(versions.error_code, NONE);
        assert!(!versions.api_keys.is_empty());
        let metadata = self.call(METADATA_V, &MetadataRequest::default().with_topics(None));
        assert!(!metadata.brokers.is_empty(), "metadata lists this broker");
    }
}

fn api_versions_request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("runnel-tests"))
        .with_client_software_version(StrBytes::from_static_str("0.1"))
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Creates a topic through CreateTopics and asserts it was created.
fn create_topic(conn: &mut Conn, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(configs)]);
    let response = conn.call(CREATE_TOPICS_V, &request);
    let result = &response.topics[0];
    assert_eq!(result.error_code, NONE, "creating {name}: {:?}", result.error_message);
    assert_eq!(result.num_partitions, partitions);
}

/// A valid batch of `count` small records.
fn batch(count: usize, value_len: usize) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    for i in 0..count {
        let value: Vec<u8> = (0..value_len).map(|j| (i * 31 + j * 7) as u8).collect();
        builder.push(1_700_000_000_000 + i as i64, Some(format!("key-{i}").as_bytes()), Some(&value), &[]);
    }
    builder.build().unwrap().into_bytes()
}

fn produce_request(acks: i16, partitions: Vec<(&str, i32, Bytes)>) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (topic, index, records) in partitions {
        let data = PartitionProduceData::default().with_index(index).with_records(Some(records));
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partition_data.push(data),
            None => {
                topics.push(TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(vec![data]))
            }
        }
    }
    ProduceRequest::default().with_acks(acks).with_timeout_ms(30_000).with_topic_data(topics)
}

/// The (error code, base offset) of each partition of a produce response, in request order.
fn produce_results(response: &ProduceResponse) -> Vec<(String, i32, i16, i64)> {
    response
        .responses
        .iter()
        .flat_map(|t| {
            t.partition_responses.iter().map(|p| (t.name.0.to_string(), p.index, p.error_code, p.base_offset))
        })
        .collect()
}

fn log_end_offset(conn: &mut Conn, topic: &str, partition: i32) -> i64 {
    let request =
        ListOffsetsRequest::default().with_replica_id(kafka_protocol::messages::BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1),
            ]),
        ]);
    let response = conn.call(LIST_OFFSETS_V, &request);
    let p = &response.topics[0].partitions[0];
    assert_eq!(p.error_code, NONE);
    p.offset
}

#[test]
fn corrupt_crc_gets_corrupt_message_for_that_partition_and_the_connection_stays_usable() {
    // Proves a batch whose CRC does not match is rejected with CORRUPT_MESSAGE for its partition
    // only, nothing of it is appended, and the same connection keeps working.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "crc", 2, &[]);

    let mut corrupt = BytesMut::from(&batch(3, 50)[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff; // inside the records, covered by the CRC
    let request = produce_request(-1, vec![("crc", 0, corrupt.freeze()), ("crc", 1, batch(3, 50))]);
    let results = produce_results(&conn.call(PRODUCE_V, &request));
    assert_eq!(results, vec![("crc".into(), 0, CORRUPT_MESSAGE, -1), ("crc".into(), 1, NONE, 0)]);

    // Same connection: a good batch lands at offset 0 of the partition the corrupt one missed.
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("crc", 0, batch(2, 10))])));
    assert_eq!(results, vec![("crc".into(), 0, NONE, 0)]);
    assert_eq!(log_end_offset(&mut conn, "crc", 0), 2);
    assert_eq!(log_end_offset(&mut conn, "crc", 1), 3);
    conn.assert_usable();
}

#[test]
fn batch_larger_than_max_message_bytes_gets_message_too_large() {
    // Proves the topic's max.message.bytes bounds a batch: one over it gets MESSAGE_TOO_LARGE and
    // is not appended; one under it is accepted.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "small", 1, &[("max.message.bytes", "2048")]);

    let big = batch(1, 4000);
    assert!(big.len() > 2048);
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("small", 0, big)])));
    assert_eq!(results[0].2, MESSAGE_TOO_LARGE, "{results:?}");
    assert_eq!(log_end_offset(&mut conn, "small", 0), 0);

    let fits = batch(1, 1000);
    assert!(fits.len() < 2048);
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("small", 0, fits)])));
    assert_eq!(results, vec![("small".into(), 0, NONE, 0)]);
}

#[test]
fn unknown_topic_without_auto_create_is_unknown_topic_or_partition() {
    // Proves that with auto.create.topics.enable=false neither Metadata (even with
    // allow_auto_topic_creation) nor Produce creates a topic: both answer UNKNOWN_TOPIC_OR_PARTITION.
    let node = Runnel::start(&["--auto-create-topics-enable", "false"]);
    let mut conn = Conn::open(&node);
    let metadata_request = || {
        MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name("nope")))]))
            .with_allow_auto_topic_creation(true)
    };
    let metadata: MetadataResponse = conn.call(METADATA_V, &metadata_request());
    assert_eq!(metadata.topics.len(), 1);
    assert_eq!(metadata.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);

    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("nope", 0, batch(1, 10))])));
    assert_eq!(results, vec![("nope".into(), 0, UNKNOWN_TOPIC_OR_PARTITION, -1)]);

    let metadata: MetadataResponse = conn.call(METADATA_V, &metadata_request());
    assert_eq!(metadata.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION, "still not created");
    let all: MetadataResponse = conn.call(METADATA_V, &MetadataRequest::default().with_topics(None));
    assert!(all.topics.is_empty(), "no topic exists: {:?}", all.topics);
}

#[test]
fn api_versions_with_an_unknown_version_answers_unsupported_version_in_v0() {
    // Proves the ApiVersions rule of the protocol: a version the broker does not know gets
    // UNSUPPORTED_VERSION in a v0 response that still lists the supported ranges, and the
    // connection stays open so the client can retry with a version from that list.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    // Header v1 by hand: the codec has no header version for ApiVersions v99.
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(99);
    frame.put_i32(4242);
    frame.put_i16(5);
    frame.put_slice(b"tests");
    frame.put_slice(&[0, 0, 0]); // what a newer body might start with; never read
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    conn.stream.write_all(&frame).unwrap();

    let mut response = conn.read_frame().expect("an answer, not a closed connection");
    let header = ResponseHeader::decode(&mut response, 0).unwrap();
    assert_eq!(header.correlation_id, 4242);
    let body = ApiVersionsResponse::decode(&mut response, 0).unwrap();
    assert!(response.is_empty(), "a v0 body and nothing more");
    assert_eq!(body.error_code, UNSUPPORTED_VERSION);
    let range =
        |api: ApiKey| body.api_keys.iter().find(|k| k.api_key == api as i16).map(|k| (k.min_version, k.max_version));
    let (min, max) = range(ApiKey::ApiVersions).expect("ApiVersions is listed");
    assert!(min == 0 && max >= 3, "ApiVersions {min}..={max}");
    for api in [ApiKey::Produce, ApiKey::Fetch, ApiKey::ListOffsets, ApiKey::Metadata] {
        assert!(range(api).is_some(), "{api:?} is listed");
    }
    conn.assert_usable();
}

#[test]
fn produce_with_an_unsupported_version_closes_only_that_connection() {
    // Proves a request at a version the broker does not implement (Produce v2, magic-1 message
    // sets) closes that connection, as Kafka does, while another connection keeps working.
    let node = Runnel::start(&[]);
    let mut bad = Conn::open(&node);
    let mut good = Conn::open(&node);
    bad.assert_usable();
    good.assert_usable();

    // Produce v2 by hand (the codec starts at v3): header v1, acks, timeout, no topics.
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    frame.put_i16(ApiKey::Produce as i16);
    frame.put_i16(2);
    frame.put_i32(77);
    frame.put_i16(-1); // null client id
    frame.put_i16(1); // acks
    frame.put_i32(1000); // timeout
    frame.put_i32(0); // topics
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    bad.stream.write_all(&frame).unwrap();
    bad.assert_closed_by_broker("Produce v2");

    good.assert_usable();
    Conn::open(&node).assert_usable();
}

#[test]
fn a_frame_above_socket_request_max_bytes_closes_only_that_connection() {
    // Proves socket.request.max.bytes bounds a request before it is read: a larger size prefix
    // closes the connection; a request under the limit on another connection is served.
    let max: i32 = 64 * 1024;
    let node = Runnel::start(&["--socket-request-max-bytes", &max.to_string()]);
    let mut bad = Conn::open(&node);
    let mut good = Conn::open(&node);
    bad.assert_usable();

    let mut frame = BytesMut::new();
    frame.put_i32(max + 1);
    frame.put_i16(ApiKey::Metadata as i16);
    frame.put_i16(METADATA_V);
    frame.put_i32(1);
    bad.stream.write_all(&frame).unwrap();
    bad.assert_closed_by_broker("a frame one byte above the limit");

    good.assert_usable();
    create_topic(&mut good, "near-limit", 1, &[]);
    let records = batch(1, 50_000);
    let results = produce_results(&good.call(PRODUCE_V, &produce_request(-1, vec![("near-limit", 0, records)])));
    assert_eq!(results, vec![("near-limit".into(), 0, NONE, 0)], "a 50 KB produce fits under 64 KiB");
}

#[test]
fn garbage_bytes_close_only_that_connection() {
    // Proves bytes that are not a Kafka request (an HTTP request, an unknown API key, a body that
    // does not decode, a negative size) close their connection, and the broker keeps serving
    // other connections.
    let node = Runnel::start(&[]);
    let mut good = Conn::open(&node);
    good.assert_usable();

    let mut unknown_api = BytesMut::new();
    unknown_api.put_i32(12);
    unknown_api.put_i16(0x7abc);
    unknown_api.put_i16(0);
    unknown_api.put_i32(1);
    unknown_api.put_i32(0x0102_0304);

    let mut bad_body = BytesMut::new();
    bad_body.put_i32(0);
    bad_body.put_i16(ApiKey::Metadata as i16);
    bad_body.put_i16(METADATA_V);
    bad_body.put_i32(3);
    bad_body.put_i16(-1); // client id (header v2 has tagged fields next)
    bad_body.put_u8(0);
    bad_body.put_u8(2); // one topic follows...
    bad_body.put_slice(&[0xab; 5]); // ...but its 16-byte topic id is cut short
    let size = (bad_body.len() - 4) as i32;
    bad_body[..4].copy_from_slice(&size.to_be_bytes());

    let mut negative_size = BytesMut::new();
    negative_size.put_i32(-5);
    negative_size.put_slice(&[1, 2, 3, 4, 5]);

    let cases: [(&str, &[u8]); 4] = [
        ("an HTTP request", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        ("an unknown api key", &unknown_api),
        ("a Metadata body that does not decode", &bad_body),
        ("a negative frame size", &negative_size),
    ];
    for (what, bytes) in cases {
        let mut bad = Conn::open(&node);
        bad.stream.write_all(bytes).unwrap();
        bad.assert_closed_by_broker(what);
        good.assert_usable();
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    // Proves a client may write many requests before reading: 10 Metadata/ApiVersions requests
    // sent back to back get 10 responses in request order with matching correlation ids.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "pipelined", 3, &[]);
    let mut all = BytesMut::new();
    let mut sent = Vec::new();
    for i in 0..10 {
        let (frame, correlation_id) = if i % 2 == 0 {
            conn.frame(METADATA_V, &MetadataRequest::default().with_topics(None))
        } else {
            conn.frame(API_VERSIONS_V, &api_versions_request())
        };
        all.put_slice(&frame);
        sent.push(correlation_id);
    }
    conn.stream.write_all(&all).unwrap();
    for (i, correlation_id) in sent.into_iter().enumerate() {
        if i % 2 == 0 {
            let metadata = conn.recv::<MetadataRequest>(METADATA_V, correlation_id);
            assert_eq!(metadata.topics.len(), 1);
            assert_eq!(metadata.topics[0].partitions.len(), 3);
        } else {
            let versions = conn.recv::<ApiVersionsRequest>(API_VERSIONS_V, correlation_id);
            assert_eq!(versions.error_code, NONE);
        }
    }
    conn.assert_usable();
}

fn describe_configs(conn: &mut Conn, topic: &str) -> DescribeConfigsResponse {
    let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(RESOURCE_TOPIC)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configuration_keys(None)]);
    conn.call(DESCRIBE_CONFIGS_V, &request)
}

/// The (value, source) of each named config of a topic, through DescribeConfigs.
fn describe_topic_configs(conn: &mut Conn, topic: &str) -> Vec<(String, Option<String>, i8)> {
    let response = describe_configs(conn, topic);
    assert_eq!(response.results.len(), 1);
    let result = &response.results[0];
    assert_eq!(result.error_code, NONE, "{:?}", result.error_message);
    result
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()), c.config_source))
        .collect()
}

fn config_of<'a>(configs: &'a [(String, Option<String>, i8)], name: &str) -> (&'a str, i8) {
    let (_, value, source) = configs.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("{name} described"));
    (value.as_deref().expect("a value"), *source)
}

#[test]
fn incremental_alter_configs_sets_and_deletes_single_keys() {
    // Proves IncrementalAlterConfigs (which rdkafka 0.38 does not expose) changes only the keys
    // it names: SET overrides one, DELETE returns one to its default, others keep their
    // overrides; an invalid value is INVALID_CONFIG and changes nothing.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "incremental", 1, &[("retention.ms", "1000"), ("cleanup.policy", "compact")]);
    let alter = |ops: &[(&str, i8, Option<&str>)]| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_static_str("incremental"))
            .with_configs(
                ops.iter()
                    .map(|(name, op, value)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(name.to_string()))
                            .with_config_operation(*op)
                            .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )])
    };

    let response = conn.call(
        INCREMENTAL_ALTER_CONFIGS_V,
        &alter(&[("max.message.bytes", OP_SET, Some("4096")), ("cleanup.policy", OP_DELETE, None)]),
    );
    assert_eq!(response.responses.len(), 1);
    assert_eq!(response.responses[0].error_code, NONE, "{:?}", response.responses[0].error_message);
    let configs = describe_topic_configs(&mut conn, "incremental");
    assert_eq!(config_of(&configs, "max.message.bytes"), ("4096", SOURCE_DYNAMIC_TOPIC_CONFIG));
    assert_eq!(config_of(&configs, "retention.ms"), ("1000", SOURCE_DYNAMIC_TOPIC_CONFIG), "untouched key kept");
    let (policy, source) = config_of(&configs, "cleanup.policy");
    assert_eq!(policy, "delete", "deleted key is back to the default");
    assert_ne!(source, SOURCE_DYNAMIC_TOPIC_CONFIG);

    let response = conn.call(INCREMENTAL_ALTER_CONFIGS_V, &alter(&[("retention.ms", OP_SET, Some("not-a-number"))]));
    assert_eq!(response.responses[0].error_code, INVALID_CONFIG);
    let configs = describe_topic_configs(&mut conn, "incremental");
    assert_eq!(config_of(&configs, "retention.ms"), ("1000", SOURCE_DYNAMIC_TOPIC_CONFIG), "unchanged");

    // The new max.message.bytes is enforced on produce.
    let results =
        produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("incremental", 0, batch(1, 6000))])));
    assert_eq!(results[0].2, MESSAGE_TOO_LARGE);
}

/// A request frame `[size][api key][version][correlation id][body]` with header v1 and a null
/// client id (header v2 adds an empty tagged-field section).
fn raw_frame(api: ApiKey, version: i16, header_version: i16, body: &[u8]) -> BytesMut {
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    frame.put_i16(api as i16);
    frame.put_i16(version);
    frame.put_i32(9);
    frame.put_i16(-1);
    if header_version >= 2 {
        frame.put_u8(0);
    }
    frame.put_slice(body);
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

#[test]
fn a_small_request_declaring_a_huge_array_closes_its_connection_and_the_broker_lives() {
    // Proves array lengths are not trusted: a few-byte request whose topic array claims about
    // 2^31 entries is a malformed request (connection closed), not a multi-GiB allocation that
    // aborts the broker. Both array encodings: Metadata v0 (i32 count) and v12 (varint count).
    let node = Runnel::start(&[]);
    let mut good = Conn::open(&node);
    good.assert_usable();
    let cases = [
        ("Metadata v0 with an i32 array count of 2^31-1", raw_frame(ApiKey::Metadata, 0, 1, &[0x7f, 0xff, 0xff, 0xff])),
        (
            "Metadata v12 with a varint array count of 2^31-1",
            raw_frame(ApiKey::Metadata, 12, 2, &[0xff, 0xff, 0xff, 0xff, 0x07]),
        ),
    ];
    for (what, frame) in cases {
        let mut bad = Conn::open(&node);
        bad.stream.write_all(&frame).unwrap();
        bad.assert_closed_by_broker(what);
        good.assert_usable();
    }
}

#[test]
fn config_errors_are_reported_per_resource() {
    // Proves the error codes that rdkafka 0.38 does not surface: AlterConfigs with an invalid
    // value is INVALID_CONFIG and changes nothing; DescribeConfigs and AlterConfigs of an unknown
    // topic are UNKNOWN_TOPIC_OR_PARTITION.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "legacy", 1, &[("retention.ms", "1000")]);
    let alter = |topic: &str, value: &str| {
        AlterConfigsRequest::default().with_resources(vec![LegacyAlterConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(vec![LegacyAlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_string(value.to_string())))])])
    };
    let response = conn.call(ALTER_CONFIGS_V, &alter("legacy", "later"));
    assert_eq!(response.responses[0].error_code, INVALID_CONFIG);
    let configs = describe_topic_configs(&mut conn, "legacy");
    assert_eq!(config_of(&configs, "retention.ms"), ("1000", SOURCE_DYNAMIC_TOPIC_CONFIG), "unchanged");

    let response = conn.call(ALTER_CONFIGS_V, &alter("missing", "2000"));
    assert_eq!(response.responses[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let response = describe_configs(&mut conn, "missing");
    assert_eq!(response.results[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
}

const INVALID_RECORD: i16 = 87;
const INVALID_TIMESTAMP: i16 = 32;
const FETCH_V: i16 = 12;

/// Every record (offset, value) of `topic`-0 from offset 0, fetched with raw Fetch requests.
fn fetch_all(conn: &mut Conn, topic: &str) -> Vec<(i64, Vec<u8>)> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    let mut out = Vec::new();
    let mut next = 0i64;
    loop {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(next)
                    .with_partition_max_bytes(1 << 20)
                    .with_current_leader_epoch(-1),
            ])]);
        let response = conn.call(FETCH_V, &request);
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, NONE, "fetch at {next}");
        let records = partition.records.clone().unwrap_or_default();
        if records.is_empty() {
            return out;
        }
        for batch in runnel::log::batch::BatchIter::new(records) {
            let batch = batch.expect("a whole batch");
            for record in batch.records().expect("records") {
                if record.offset >= next {
                    out.push((record.offset, record.value.map(|v| v.to_vec()).unwrap_or_default()));
                }
            }
            next = batch.last_offset() + 1;
        }
    }
}

#[test]
fn segment_index_bytes_of_four_does_not_kill_produce_connections() {
    // Regression: a topic with segment.index.bytes=4 (accepted by validation, as in Kafka) made
    // every produce to it panic in the log and close the connection. Now many batches append
    // (one segment each), fetch back exactly, and survive a restart.
    let mut node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    // retention.ms=-1: `batch` stamps 2023 timestamps, which time retention would delete.
    let configs = [("segment.index.bytes", "4"), ("index.interval.bytes", "0"), ("retention.ms", "-1")];
    create_topic(&mut conn, "tiny-index", 1, &configs);
    let mut expected = Vec::new();
    for i in 0..60usize {
        let b = batch(1 + i % 3, 20 + i);
        let count = 1 + i % 3;
        let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("tiny-index", 0, b.clone())])));
        assert_eq!(results[0].2, NONE, "batch {i}: {results:?}");
        let base = results[0].3;
        for (j, record) in runnel::log::RecordBatch::parse(b).unwrap().records().unwrap().into_iter().enumerate() {
            expected.push((base + j as i64, record.value.unwrap().to_vec()));
        }
        assert_eq!(expected.len(), expected.last().unwrap().0 as usize + 1, "{count} records at {base}");
    }
    assert_eq!(fetch_all(&mut conn, "tiny-index"), expected);
    conn.assert_usable();
    drop(conn);
    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let mut conn = Conn::open(&node);
    assert_eq!(fetch_all(&mut conn, "tiny-index"), expected, "after a restart");
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("tiny-index", 0, batch(2, 5))])));
    assert_eq!(results[0].2, NONE);
    assert_eq!(results[0].3, expected.len() as i64);
}

#[test]
fn two_batches_for_one_partition_in_a_produce_are_invalid_record_and_the_other_partitions_append() {
    // Proves Kafka's rule from Produce v3 on: exactly one record batch per partition (the
    // transaction checks read a partition's first batch only). Two batches for one partition
    // are refused with INVALID_RECORD and Kafka's message, neither appended; the request's
    // other partition appends; one batch to the refused partition appends afterwards.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "one-batch", 2, &[]);
    let two = Bytes::from([batch(2, 10), batch(3, 10)].concat());
    let request = produce_request(-1, vec![("one-batch", 0, two), ("one-batch", 1, batch(1, 10))]);
    let response = conn.call(PRODUCE_V, &request);
    let results = produce_results(&response);
    assert_eq!(results.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(), [(0, INVALID_RECORD), (1, NONE)]);
    let message = response.responses[0].partition_responses[0].error_message.as_deref().unwrap_or_default();
    assert!(message.contains("exactly one record batch per partition"), "{message}");
    assert_eq!(log_end_offset(&mut conn, "one-batch", 0), 0, "neither batch appended");
    assert_eq!(log_end_offset(&mut conn, "one-batch", 1), 1);
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("one-batch", 0, batch(2, 10))])));
    assert_eq!((results[0].2, results[0].3), (NONE, 0));
    conn.assert_usable();
}

#[test]
fn keyless_records_on_a_compacted_topic_are_named_in_record_errors() {
    // Proves KIP-467 record_errors: a batch with keyless records on a compacted topic gets
    // INVALID_RECORD with one entry per keyless record (its index in the batch), Kafka's
    // messages, and nothing appended; timestamps out of bounds get INVALID_TIMESTAMP.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "compacted", 1, &[("cleanup.policy", "compact")]);
    let mut builder = BatchBuilder::new(Compression::None);
    for (i, key) in [Some("a"), None, Some("c"), None, None].into_iter().enumerate() {
        builder.push(1_700_000_000_000 + i as i64, key.map(str::as_bytes), Some(b"v"), &[]);
    }
    let response =
        conn.call(PRODUCE_V, &produce_request(-1, vec![("compacted", 0, builder.build().unwrap().into_bytes())]));
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, INVALID_RECORD);
    let indexes: Vec<i32> = partition.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, vec![1, 3, 4]);
    let message = "Compacted topic cannot accept message without key in topic partition compacted-0.";
    for e in &partition.record_errors {
        assert_eq!(e.batch_index_error_message.as_deref(), Some(message));
    }
    let top = partition.error_message.as_deref().unwrap_or_default();
    assert!(top.starts_with("One or more records have been rejected due to 3 record errors in total"), "{top}");
    assert_eq!(log_end_offset(&mut conn, "compacted", 0), 0, "nothing appended");

    create_topic(&mut conn, "bounded", 1, &[("message.timestamp.before.max.ms", "60000")]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut builder = BatchBuilder::new(Compression::Lz4);
    for ts in [now, now - 3_600_000, now] {
        builder.push(ts, Some(b"k"), Some(b"v"), &[]);
    }
    let response =
        conn.call(PRODUCE_V, &produce_request(-1, vec![("bounded", 0, builder.build().unwrap().into_bytes())]));
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, INVALID_TIMESTAMP);
    assert_eq!(partition.record_errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        partition.error_message.as_deref(),
        Some("One or more records have been rejected due to invalid timestamp")
    );
}

#[test]
fn topic_configs_are_validated_with_kafka_4_ranges() {
    // Proves CreateTopics refuses values outside Kafka 4's ranges with INVALID_CONFIG and
    // Kafka's message, and accepts the floor values themselves (and Kafka 4's jitter, delete
    // delay, codec levels and preallocate=false, refused as unknown before).
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    for (name, value, message) in [
        ("segment.index.bytes", "3", "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4"),
        (
            "segment.bytes",
            "65536",
            "Invalid value 65536 for configuration segment.bytes: Value must be at least 1048576",
        ),
        ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
        (
            "message.timestamp.after.max.ms",
            "-1",
            "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0",
        ),
        (
            "compression.gzip.level",
            "10",
            "Invalid value 10 for configuration compression.gzip.level: Value must be -1 or between 1 and 9",
        ),
        (
            "preallocate",
            "true",
            "Invalid value true for configuration preallocate: Runnel does not preallocate segment files; only false is accepted",
        ),
    ] {
        let request =
            CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
                .with_name(topic_name("refused"))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(vec![CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(name.to_string()))
                    .with_value(Some(StrBytes::from_string(value.to_string())))])]);
        let result = &conn.call(CREATE_TOPICS_V, &request).topics[0];
        assert_eq!(result.error_code, INVALID_CONFIG, "{name}={value}");
        assert_eq!(result.error_message.as_deref(), Some(message));
    }
    create_topic(
        &mut conn,
        "floors",
        1,
        &[
            ("segment.bytes", "1048576"),
            ("segment.index.bytes", "4"),
            ("segment.ms", "1"),
            ("cleanup.policy", ""),
            // Kafka 4's other topic configs (a copy of a Kafka topic's configs carries them).
            ("segment.jitter.ms", "0"),
            ("file.delete.delay.ms", "0"),
            ("compression.gzip.level", "1"),
            ("compression.zstd.level", "-131072"),
            ("compression.lz4.level", "9"),
            ("preallocate", "false"),
        ],
    );
}

#[test]
fn manual_replica_assignments_are_checked_as_kafka_checks_them() {
    // Proves CreateTopics refuses a manual assignment naming a broker twice, a negative broker
    // id, a partition twice or partitions not numbered 0..n, with INVALID_REPLICA_ASSIGNMENT and
    // Kafka's words, and creates nothing. Before, a duplicate broker entered the image (to
    // fail the partition's invariants in the controller's apply at its next change) and -1
    // became broker 0.
    const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    let node_id = 1;
    let assign = |partition: i32, brokers: &[i32]| {
        CreatableReplicaAssignment::default()
            .with_partition_index(partition)
            .with_broker_ids(brokers.iter().map(|b| BrokerId(*b)).collect())
    };
    for (assignments, message) in [
        (vec![assign(0, &[node_id, node_id])], "The manual partition assignment includes the broker 1 more than once."),
        (
            vec![assign(0, &[-1])],
            "The manual partition assignment includes broker -1, but no such broker is registered.",
        ),
        (
            vec![assign(0, &[node_id]), assign(0, &[node_id])],
            "Found multiple manual partition assignments for partition 0",
        ),
        (
            vec![assign(0, &[node_id]), assign(2, &[node_id])],
            "partitions should be a consecutive 0-based integer sequence",
        ),
    ] {
        let request =
            CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
                .with_name(topic_name("manual"))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(assignments)]);
        let result = &conn.call(CREATE_TOPICS_V, &request).topics[0];
        assert_eq!(result.error_code, INVALID_REPLICA_ASSIGNMENT, "{message}");
        assert_eq!(result.error_message.as_deref(), Some(message));
    }
    let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
        .with_name(topic_name("manual"))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(vec![assign(1, &[node_id]), assign(0, &[node_id])])]);
    let result = &conn.call(CREATE_TOPICS_V, &request).topics[0];
    assert_eq!((result.error_code, result.num_partitions), (NONE, 2), "{:?}", result.error_message);
}

#[test]
fn clients_cannot_append_to_the_coordinators_topics() {
    // Proves Produce to __consumer_offsets or __transaction_state is refused with
    // INVALID_TOPIC_EXCEPTION and appends nothing (their loaders trust every record: a forged
    // commit or transaction state), while the same request's other partitions are written.
    const INVALID_TOPIC_EXCEPTION: i16 = 17;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "__consumer_offsets", 1, &[]);
    create_topic(&mut conn, "plain", 1, &[]);
    let request = produce_request(
        -1,
        vec![
            ("__consumer_offsets", 0, batch(1, 10)),
            ("__transaction_state", 0, batch(1, 10)),
            ("plain", 0, batch(1, 10)),
        ],
    );
    let mut results = produce_results(&conn.call(PRODUCE_V, &request));
    results.sort();
    assert_eq!(
        results,
        vec![
            ("__consumer_offsets".into(), 0, INVALID_TOPIC_EXCEPTION, -1),
            ("__transaction_state".into(), 0, INVALID_TOPIC_EXCEPTION, -1),
            ("plain".into(), 0, NONE, 0),
        ]
    );
    assert_eq!(log_end_offset(&mut conn, "__consumer_offsets", 0), 0);
}

/// Rewrites a v2 batch's CRC-32C (over the bytes from its attributes on) after an edit.
fn reseal(batch: &mut BytesMut) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn a_batch_whose_crc_holds_but_whose_records_do_not_decode_is_refused() {
    // Proves every client batch is decoded before it is stored, as Kafka's LogValidator does:
    // a valid CRC over records that do not decode is refused and appends nothing (a record
    // count below the records sent: INVALID_RECORD, Kafka's InvalidRecordException; a
    // compressed stream that is not one: CORRUPT_MESSAGE); a good batch in the same request is
    // written. Before, both were stored for every consumer to trip on.
    const INVALID_RECORD: i16 = 87;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "sealed", 3, &[]);

    let mut short_count = BytesMut::from(&batch(3, 50)[..]);
    short_count[57..61].copy_from_slice(&2i32.to_be_bytes()); // 3 records follow
    reseal(&mut short_count);
    let mut not_zstd = BytesMut::from(&batch(3, 50)[..]);
    not_zstd[22] = (not_zstd[22] & !0x07) | 4; // attributes: zstd, over uncompressed records
    reseal(&mut not_zstd);
    let request = produce_request(
        -1,
        vec![("sealed", 0, short_count.freeze()), ("sealed", 1, not_zstd.freeze()), ("sealed", 2, batch(3, 50))],
    );
    let results = produce_results(&conn.call(PRODUCE_V, &request));
    assert_eq!(
        results,
        vec![
            ("sealed".into(), 0, INVALID_RECORD, -1),
            ("sealed".into(), 1, CORRUPT_MESSAGE, -1),
            ("sealed".into(), 2, NONE, 0)
        ]
    );
    assert_eq!(log_end_offset(&mut conn, "sealed", 0), 0);
    assert_eq!(log_end_offset(&mut conn, "sealed", 1), 0);
    conn.assert_usable();
}

#[test]
fn a_batch_header_claiming_another_max_timestamp_is_stored_with_its_records_max() {
    // Proves a CreateTime batch's max timestamp is taken from its records, as Kafka's
    // LogValidator does, not from the client's header: a header claiming i64::MAX (which would
    // keep its segment past retention.ms and segment.ms) is stored with the records' max, and
    // ListOffsets MAX_TIMESTAMP (v7) answers the record that has it.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "stamped", 1, &[]);
    let mut claimed = BytesMut::from(&batch(3, 10)[..]);
    claimed[35..43].copy_from_slice(&i64::MAX.to_be_bytes()); // max timestamp
    reseal(&mut claimed);
    let results = produce_results(&conn.call(PRODUCE_V, &produce_request(-1, vec![("stamped", 0, claimed.freeze())])));
    assert_eq!(results, vec![("stamped".into(), 0, NONE, 0)]);
    let request =
        ListOffsetsRequest::default().with_replica_id(kafka_protocol::messages::BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(topic_name("stamped")).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-3),
            ]),
        ]);
    let response = conn.call(LIST_OFFSETS_V, &request);
    let p = &response.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.timestamp), (NONE, 2, 1_700_000_000_002));
    // A negative timestamp that is no sentinel is UNSUPPORTED_VERSION, as Kafka answers it.
    let mut unknown = request.clone();
    unknown.topics[0].partitions[0].timestamp = -7;
    let response = conn.call(LIST_OFFSETS_V, &unknown);
    assert_eq!(response.topics[0].partitions[0].error_code, UNSUPPORTED_VERSION);
    conn.assert_usable();
}

#[test]
fn delete_records_refuses_coordinator_topics_and_topics_without_the_delete_policy() {
    // Proves Kafka's DeleteRecords rules: the coordinators' internal topics answer
    // INVALID_TOPIC_EXCEPTION ("Cannot delete records of internal topic": a cut would lose the
    // groups' offsets or open transactions at the next load) and a topic whose cleanup.policy
    // lacks delete POLICY_VIOLATION; a delete-policy topic is cut as asked.
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, FindCoordinatorRequest};
    const INVALID_TOPIC_EXCEPTION: i16 = 17;
    const POLICY_VIOLATION: i16 = 44;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    // FindCoordinator creates __consumer_offsets.
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g"));
    let created = support::wait_until(IO_TIMEOUT, || conn.call(3, &find).error_code == NONE);
    assert!(created, "__consumer_offsets exists");
    create_topic(&mut conn, "compacted", 1, &[("cleanup.policy", "compact")]);
    create_topic(&mut conn, "plain", 1, &[]);
    let delete = |conn: &mut Conn, topic: &str| {
        let request =
            DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![DeleteRecordsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(-1)])]);
        conn.call(2, &request).topics[0].partitions[0].error_code
    };
    assert_eq!(delete(&mut conn, "__consumer_offsets"), INVALID_TOPIC_EXCEPTION);
    assert_eq!(delete(&mut conn, "compacted"), POLICY_VIOLATION);
    assert_eq!(delete(&mut conn, "plain"), NONE);
}

#[test]
fn an_acks_0_produce_gets_no_response_and_a_failed_one_closes_the_connection() {
    // Proves Kafka's acks=0 rules: a produce that appends is not answered (the next request's
    // response is the next frame, in order); one that fails on any partition (a partition the
    // topic lacks, a transactional batch without a transactional id) closes the connection, so
    // the producer notices and refreshes its metadata, and is never answered with a response it
    // did not ask for.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "fire-and-forget", 1, &[]);
    conn.send(PRODUCE_V, &produce_request(0, vec![("fire-and-forget", 0, batch(3, 10))]));
    conn.assert_usable();
    let ends = conn.call(
        LIST_OFFSETS_V,
        &ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name("fire-and-forget"))
            .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)])]),
    );
    assert_eq!(ends.topics[0].partitions[0].offset, 3, "the unanswered produce appended");

    conn.send(PRODUCE_V, &produce_request(0, vec![("fire-and-forget", 7, batch(1, 10))]));
    conn.assert_closed_by_broker("an acks=0 produce to a partition the topic lacks");

    let mut conn = Conn::open(&node);
    let mut builder = BatchBuilder::new(Compression::None).producer(5, 0, 0).transactional(true);
    builder.push(1_700_000_000_000, None, Some(b"t"), &[]);
    let transactional = builder.build().unwrap().into_bytes();
    conn.send(PRODUCE_V, &produce_request(0, vec![("fire-and-forget", 0, transactional)]));
    conn.assert_closed_by_broker("an acks=0 transactional produce without a transactional id");
}

#[test]
fn a_batch_of_another_magic_than_2_is_an_invalid_record() {
    // Proves Kafka's answer to a Produce v3+ batch whose magic is not 2 (an old-format message
    // set sent at a new version): INVALID_RECORD ("only allowed to contain record batches with
    // magic version 2"), for that partition only.
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "magic", 2, &[]);
    let mut old_format = BytesMut::from(&batch(1, 10)[..]);
    old_format[16] = 1; // the magic byte (not covered by the CRC)
    let request = produce_request(-1, vec![("magic", 0, old_format.freeze()), ("magic", 1, batch(1, 10))]);
    let results = produce_results(&conn.call(PRODUCE_V, &request));
    assert_eq!(results, vec![("magic".into(), 0, INVALID_RECORD, -1), ("magic".into(), 1, NONE, 0)]);
}

#[test]
fn zstd_before_produce_v7_is_an_unsupported_compression_type() {
    // Proves Kafka's KIP-110 rule: a zstd batch in a Produce below v7 answers
    // UNSUPPORTED_COMPRESSION_TYPE for its partition (a client that old cannot read it back);
    // the same batch at v7+ is appended.
    const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    create_topic(&mut conn, "zstd", 1, &[]);
    let mut builder = BatchBuilder::new(Compression::Zstd);
    builder.push(1_700_000_000_000, None, Some(b"compressed"), &[]);
    let zstd = builder.build().unwrap().into_bytes();
    let request = produce_request(-1, vec![("zstd", 0, zstd)]);
    assert_eq!(produce_results(&conn.call(6, &request)), vec![("zstd".into(), 0, UNSUPPORTED_COMPRESSION_TYPE, -1)]);
    assert_eq!(produce_results(&conn.call(7, &request)), vec![("zstd".into(), 0, NONE, 0)]);
}

#[test]
fn admin_requests_are_answered_as_kafka_answers_them() {
    // Proves, each against the binary before: Metadata auto-creates __transaction_state as the
    // transaction coordinator creates it (compacted; it was an ordinary topic with delete
    // retention, losing transaction states), marks only the coordinators' topics internal (a
    // user's __orders was hidden from Java clients), and answers an unknown topic id with
    // UNKNOWN_TOPIC_ID (it was dropped); CreateTopics refuses a name colliding with an existing
    // one by '.' against '_', a null config value, and a manual assignment with counts; and
    // ListOffsets refuses a partition named twice; DeleteTopics a name given twice.
    const INVALID_TOPIC_EXCEPTION: i16 = 17;
    const INVALID_REQUEST: i16 = 42;
    const INVALID_CONFIG: i16 = 40;
    const UNKNOWN_TOPIC_ID: i16 = 100;
    let node = Runnel::start(&[]);
    let mut conn = Conn::open(&node);
    let metadata = |conn: &mut Conn, topics: Vec<MetadataRequestTopic>| {
        conn.call(
            METADATA_V,
            &MetadataRequest::default().with_topics(Some(topics)).with_allow_auto_topic_creation(true),
        )
    };
    let by_name = |name: &str| MetadataRequestTopic::default().with_name(Some(topic_name(name)));
    let created = metadata(&mut conn, vec![by_name("__transaction_state"), by_name("__orders")]);
    assert!(created.topics.iter().all(|t| t.error_code == NONE), "{:?}", created.topics);
    let configs = describe_topic_configs(&mut conn, "__transaction_state");
    assert_eq!(config_of(&configs, "cleanup.policy").0, "compact", "created as its coordinator creates it");
    let described = metadata(&mut conn, vec![by_name("__transaction_state"), by_name("__orders")]);
    let internal: Vec<(String, bool)> =
        described.topics.iter().map(|t| (t.name.as_ref().unwrap().to_string(), t.is_internal)).collect();
    assert_eq!(internal, vec![("__transaction_state".to_string(), true), ("__orders".to_string(), false)]);
    let unknown_id = uuid::Uuid::from_u128(42);
    let by_id = metadata(&mut conn, vec![MetadataRequestTopic::default().with_name(None).with_topic_id(unknown_id)]);
    assert_eq!(by_id.topics.len(), 1, "an unknown id is answered, not dropped");
    assert_eq!((by_id.topics[0].error_code, by_id.topics[0].name.is_none()), (UNKNOWN_TOPIC_ID, true));

    create_topic(&mut conn, "orders_eu", 1, &[]);
    let create = |conn: &mut Conn, topic: CreatableTopic| {
        let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![topic]);
        let result = conn.call(CREATE_TOPICS_V, &request).topics[0].clone();
        (result.error_code, result.error_message.map(|m| m.to_string()).unwrap_or_default())
    };
    let plain = |name: &str| {
        CreatableTopic::default().with_name(topic_name(name)).with_num_partitions(1).with_replication_factor(1)
    };
    let (code, message) = create(&mut conn, plain("orders.eu"));
    assert_eq!(
        (code, message.as_str()),
        (INVALID_TOPIC_EXCEPTION, "Topic 'orders.eu' collides with existing topic: orders_eu")
    );
    let null_config = plain("nulls").with_configs(vec![CreatableTopicConfig::default()
        .with_name(StrBytes::from_static_str("retention.ms"))
        .with_value(None)]);
    assert_eq!(create(&mut conn, null_config).0, INVALID_CONFIG);
    let manual_with_counts = plain("manual").with_assignments(vec![CreatableReplicaAssignment::default()
        .with_partition_index(0)
        .with_broker_ids(vec![BrokerId(1)])]);
    assert_eq!(create(&mut conn, manual_with_counts).0, INVALID_REQUEST);

    let partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
    let request =
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name("orders_eu"))
            .with_partitions(vec![partition.clone(), partition])]);
    let response = conn.call(LIST_OFFSETS_V, &request);
    let codes: Vec<i16> = response.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, vec![INVALID_REQUEST, INVALID_REQUEST]);

    // A name given twice is refused whether or not the topic exists (Kafka checks the raw
    // request first; an unknown one answered UNKNOWN_TOPIC_OR_PARTITION).
    let ghost = topic_name("ghost");
    let request = kafka_protocol::messages::DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topic_names(vec![ghost.clone(), ghost]);
    let response = conn.call(5, &request);
    let codes: Vec<i16> = response.responses.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![INVALID_REQUEST, INVALID_REQUEST]);
}
