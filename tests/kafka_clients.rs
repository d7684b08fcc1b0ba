//! A single-node cluster that stock Kafka clients use: librdkafka (through `rdkafka`) against
//! the real `runnel` binary. Produce and fetch with every codec, acks, timestamps, the Java
//! partitioner, the admin APIs, ListOffsets, many topics, durability across SIGTERM and SIGKILL,
//! and long-poll fetches.
//!
//! Consumers use `assign()` with explicit offsets only: the group APIs do not exist yet.
//! librdkafka needs a `group.id` for `assign()`, so one is set, but nothing subscribes or commits.
//! Every test starts its own node; waits are on conditions with deadlines, never fixed sleeps.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Header, Headers, OwnedHeaders, OwnedMessage};
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryFuture, FutureProducer, FutureRecord, Producer, ProducerContext,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, Statistics, Timestamp, TopicPartitionList};
use runnel::log::batch::BatchIter;
use runnel::log::{Compression, RecordBatch};
use support::{block_on, client_config, wait_until, HttpApi, Runnel};

/// Longest wait for any one step (a debug build on a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(30);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn new_producer(node: &Runnel, extra: &[(&str, &str)]) -> FutureProducer {
    let mut config = client_config(node, &[("message.timeout.ms", "30000")]);
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config.create().expect("producer")
}

fn consumer_config(node: &Runnel) -> ClientConfig {
    client_config(
        node,
        &[
            // Required by librdkafka's assign(); never used for a group (none is joined).
            ("group.id", "runnel-tests-assign-only"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            // An offset out of range is an error here, never a silent jump.
            ("auto.offset.reset", "error"),
        ],
    )
}

fn new_consumer(node: &Runnel) -> BaseConsumer {
    consumer_config(node).create().expect("consumer")
}

fn new_admin(node: &Runnel) -> AdminClient<DefaultClientContext> {
    client_config(node, &[]).create().expect("admin client")
}

fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(DEADLINE)).request_timeout(Some(DEADLINE))
}

/// Creates the topics and asserts every one was created.
fn create_topics(admin: &AdminClient<DefaultClientContext>, topics: &[NewTopic<'_>]) {
    let results = block_on(admin.create_topics(topics, &admin_options())).expect("CreateTopics");
    assert_eq!(results.len(), topics.len());
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code:?}"));
    }
}

fn create_topic(node: &Runnel, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (key, value) in configs {
        topic = topic.set(key, value);
    }
    create_topics(&new_admin(node), &[topic]);
}

/// A record as the tests compare it: everything a client can observe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Option<i64>,
}

impl TestRecord {
    fn new(key: Option<&[u8]>, value: Option<&[u8]>) -> TestRecord {
        TestRecord {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    fn header(mut self, key: &str, value: Option<&[u8]>) -> TestRecord {
        self.headers.push((key.to_string(), value.map(<[u8]>::to_vec)));
        self
    }

    fn at(mut self, timestamp: i64) -> TestRecord {
        self.timestamp = Some(timestamp);
        self
    }

    fn of(message: &OwnedMessage) -> TestRecord {
        let headers = message
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        TestRecord {
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: message.timestamp().to_millis(),
        }
    }
}

/// Enqueues one record; the future resolves with its delivery report.
fn send<C: ClientContext + 'static>(
    producer: &FutureProducer<C>,
    topic: &str,
    partition: Option<i32>,
    record: &TestRecord,
) -> DeliveryFuture {
    let mut out = FutureRecord::<[u8], [u8]>::to(topic);
    if let Some(partition) = partition {
        out = out.partition(partition);
    }
    if let Some(timestamp) = record.timestamp {
        out = out.timestamp(timestamp);
    }
    if let Some(key) = &record.key {
        out = out.key(key.as_slice());
    }
    if let Some(value) = &record.value {
        out = out.payload(value.as_slice());
    }
    if !record.headers.is_empty() {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            headers = headers.insert(Header { key, value: value.as_deref() });
        }
        out = out.headers(headers);
    }
    producer.send_result(out).map_err(|(e, _)| e).expect("enqueue a record")
}

/// Waits for every delivery report, in order; panics on the first failure.
fn await_deliveries(futures: Vec<DeliveryFuture>) -> Vec<Delivery> {
    block_on(async move {
        let mut deliveries = Vec::with_capacity(futures.len());
        for (i, future) in futures.into_iter().enumerate() {
            match tokio::time::timeout(DEADLINE, future).await {
                Ok(Ok(Ok(delivery))) => deliveries.push(delivery),
                Ok(Ok(Err((e, _)))) => panic!("record {i} was not delivered: {e}"),
                Ok(Err(_)) => panic!("record {i}: the producer dropped its delivery report"),
                Err(_) => panic!("record {i}: no delivery report within {DEADLINE:?}"),
            }
        }
        deliveries
    })
}

fn produce_all(
    producer: &FutureProducer,
    topic: &str,
    partition: Option<i32>,
    records: &[TestRecord],
) -> Vec<Delivery> {
    let futures = records.iter().map(|r| send(producer, topic, partition, r)).collect();
    await_deliveries(futures)
}

/// Assigns `(topic, partition, offset)` and polls until `count` records arrived.
fn consume<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    assignment: &[(&str, i32, i64)],
    count: usize,
) -> Vec<OwnedMessage> {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition, offset) in assignment {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset)).unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut messages = Vec::with_capacity(count);
    let deadline = Instant::now() + DEADLINE;
    while messages.len() < count {
        assert!(
            Instant::now() < deadline,
            "received {} of {count} records from {assignment:?} within {DEADLINE:?}",
            messages.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => messages.push(message.detach()),
            Some(Err(e)) => panic!("consuming {assignment:?}: {e}"),
        }
    }
    consumer.unassign().expect("unassign");
    messages
}

fn watermarks<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32) -> (i64, i64) {
    consumer.fetch_watermarks(topic, partition, DEADLINE).expect("ListOffsets earliest/latest")
}

/// A set of records that exercises every field: keys and null keys, values, tombstones, empty
/// values and keys, binary data, headers with null, empty and repeated keys, a large compressible
/// value, explicit timestamps that also go backwards.
fn sample_records() -> Vec<TestRecord> {
    let t0 = now_ms() - 60_000;
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let big: Vec<u8> = "the quick brown fox jumps over the lazy dog; ".repeat(500).into_bytes();
    let mut records = vec![
        TestRecord::new(Some(b"alpha"), Some(b"first value"))
            .header("trace-id", Some(b"abc123"))
            .header("null-header", None)
            .header("empty-header", Some(b"")),
        TestRecord::new(None, Some(b"no key here")),
        TestRecord::new(Some(b"tombstone-key"), None),
        TestRecord::new(Some(b"empty-value"), Some(b"")),
        TestRecord::new(Some(&[0, 1, 2, 0xff, 0xfe]), Some(&all_bytes)),
        TestRecord::new(Some(b"big"), Some(&big)).header("dup", Some(b"1")).header("dup", Some(b"2")),
        TestRecord::new(None, None).header("only-header", Some(b"x")),
        TestRecord::new(Some("ключ-🔑".as_bytes()), Some("значение ✓".as_bytes())),
    ];
    for i in 0..20 {
        records.push(TestRecord::new(Some(format!("k{i}").as_bytes()), Some(format!("v{i}").as_bytes())));
    }
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            // Every fifth record is earlier than the first: timestamp deltas may be negative.
            let timestamp = if i % 5 == 4 { t0 - 30_000 + i as i64 } else { t0 + i as i64 * 3 };
            r.at(timestamp)
        })
        .collect()
}

#[test]
fn round_trip_with_every_codec_keeps_records_byte_identical() {
    // Proves records produced with none/gzip/snappy/lz4/zstd come back with identical keys,
    // values (null and empty included), headers and CreateTime timestamps at dense offsets.
    let node = Runnel::start(&[]);
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    let names: Vec<String> = codecs.iter().map(|c| format!("codec-{c}")).collect();
    let topics: Vec<NewTopic<'_>> = names.iter().map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1))).collect();
    create_topics(&new_admin(&node), &topics);
    let records = sample_records();
    let consumer = new_consumer(&node);
    for (codec, topic) in codecs.iter().zip(&names) {
        // One batch of all records, so the codec has something to compress (librdkafka sends a
        // batch uncompressed when compressing does not make it smaller): a linger far longer than
        // enqueueing takes, then flush() sends at once.
        let producer = new_producer(&node, &[("compression.type", codec), ("linger.ms", "10000"), ("acks", "all")]);
        let futures: Vec<DeliveryFuture> = records.iter().map(|r| send(&producer, topic, Some(0), r)).collect();
        producer.flush(DEADLINE).expect("flush");
        let deliveries = await_deliveries(futures);
        let offsets: Vec<i64> = deliveries.iter().map(|d| d.offset).collect();
        assert_eq!(offsets, (0..records.len() as i64).collect::<Vec<_>>(), "{codec}: dense offsets from 0");

        let messages = consume(&consumer, &[(topic, 0, 0)], records.len());
        for (i, (message, expected)) in messages.iter().zip(&records).enumerate() {
            assert_eq!(message.offset(), i as i64, "{codec}");
            assert_eq!(message.timestamp(), Timestamp::CreateTime(expected.timestamp.unwrap()), "{codec} record {i}");
            assert_eq!(&TestRecord::of(message), expected, "{codec}: record {i} differs");
        }
        assert_eq!(watermarks(&consumer, topic, 0), (0, records.len() as i64), "{codec}");

        // The broker stored the producer's batches as they came: still in the producer's codec,
        // several records per batch, every CRC intact.
        let segment = node.data_dir.join(format!("{topic}-0")).join("00000000000000000000.log");
        let bytes = std::fs::read(&segment).unwrap_or_else(|e| panic!("{}: {e}", segment.display()));
        let batches: Vec<RecordBatch> =
            BatchIter::new(bytes.into()).collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(batches.len(), 1, "{codec}: one batch");
        let expected_codec = match *codec {
            "none" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            _ => Compression::Zstd,
        };
        for batch in &batches {
            assert_eq!(batch.compression(), expected_codec, "{codec}: batch at offset {}", batch.base_offset());
        }
    }
}

#[test]
fn a_topic_compression_type_is_what_the_broker_stores() {
    // Proves a topic's compression.type applies, as in Kafka: librdkafka sends snappy to a
    // topic configured lz4 and the segment holds lz4 batches, records unchanged (it was stored
    // and described, but every batch kept the producer's codec).
    let node = Runnel::start(&[]);
    let topic = "recompressed";
    create_topic(&node, topic, 1, &[("compression.type", "lz4")]);
    let records = sample_records();
    let producer = new_producer(&node, &[("compression.type", "snappy"), ("linger.ms", "10000"), ("acks", "all")]);
    let futures: Vec<DeliveryFuture> = records.iter().map(|r| send(&producer, topic, Some(0), r)).collect();
    producer.flush(DEADLINE).expect("flush");
    await_deliveries(futures);
    let consumer = new_consumer(&node);
    let messages = consume(&consumer, &[(topic, 0, 0)], records.len());
    for (i, (message, expected)) in messages.iter().zip(&records).enumerate() {
        assert_eq!(&TestRecord::of(message), expected, "record {i} differs");
    }
    let segment = node.data_dir.join(format!("{topic}-0")).join("00000000000000000000.log");
    let bytes = std::fs::read(&segment).unwrap_or_else(|e| panic!("{}: {e}", segment.display()));
    let batches: Vec<RecordBatch> = BatchIter::new(bytes.into()).collect::<Result<_, _>>().expect("valid batches");
    assert!(!batches.is_empty());
    for batch in &batches {
        assert_eq!(batch.compression(), Compression::Lz4, "batch at offset {}", batch.base_offset());
    }
}

#[test]
fn acks_0_1_and_all_each_store_every_record() {
    // Proves acks=0 (no response), acks=1 and acks=all all append every record, the latter two
    // reporting dense offsets.
    let node = Runnel::start(&[]);
    let consumer = new_consumer(&node);
    for acks in ["0", "1", "all"] {
        let topic = format!("acks-{acks}");
        create_topic(&node, &topic, 1, &[]);
        let producer = new_producer(&node, &[("acks", acks)]);
        let records: Vec<TestRecord> = (0..50)
            .map(|i| TestRecord::new(Some(format!("key-{i}").as_bytes()), Some(format!("acks={acks} #{i}").as_bytes())))
            .collect();
        let deliveries = produce_all(&producer, &topic, Some(0), &records);
        if acks != "0" {
            let offsets: Vec<i64> = deliveries.iter().map(|d| d.offset).collect();
            assert_eq!(offsets, (0..50).collect::<Vec<_>>(), "acks={acks}");
        }
        // acks=0 has no response to wait for: wait for the log end instead.
        assert!(
            wait_until(DEADLINE, || watermarks(&consumer, &topic, 0).1 == 50),
            "acks={acks}: log end {:?}",
            watermarks(&consumer, &topic, 0)
        );
        let messages = consume(&consumer, &[(&topic, 0, 0)], 50);
        let values: Vec<TestRecord> =
            messages.iter().map(|m| TestRecord { timestamp: None, ..TestRecord::of(m) }).collect();
        assert_eq!(values, records, "acks={acks}");
    }
}

#[test]
fn log_append_time_topic_stamps_records_with_broker_time() {
    // Proves message.timestamp.type=LogAppendTime replaces the producer's timestamps with the
    // broker's append time, reported both in the produce response and on fetch.
    let node = Runnel::start(&[]);
    create_topic(&node, "append-time", 1, &[("message.timestamp.type", "LogAppendTime")]);
    let producer = new_producer(&node, &[("acks", "all")]);
    let client_timestamp = now_ms() - 3_600_000;
    let records: Vec<TestRecord> =
        (0..5).map(|i| TestRecord::new(None, Some(format!("v{i}").as_bytes())).at(client_timestamp)).collect();
    let before = now_ms();
    let deliveries = produce_all(&producer, "append-time", Some(0), &records);
    let after = now_ms();
    let messages = consume(&new_consumer(&node), &[("append-time", 0, 0)], records.len());
    for (delivery, message) in deliveries.iter().zip(&messages) {
        let Timestamp::LogAppendTime(t) = message.timestamp() else {
            panic!("fetched timestamp {:?} is not LogAppendTime", message.timestamp());
        };
        assert!(before <= t && t <= after, "append time {t} outside [{before}, {after}]");
        assert_eq!(delivery.timestamp, Timestamp::LogAppendTime(t), "produce response carries the append time");
    }
}

/// The partition Kafka's default partitioner picks for a non-null key.
fn java_partition(key: &[u8], partitions: i32) -> i32 {
    runnel::http::records::partition_for_key(key, partitions as u32)
}

#[test]
fn keyed_records_land_in_the_partition_of_kafkas_murmur2_partitioner() {
    // Proves a 12-partition topic's metadata lets librdkafka's Java-compatible partitioner place
    // each key where Kafka's murmur2 says, and the record is stored in that partition.
    let node = Runnel::start(&[]);
    create_topic(&node, "keyed", 12, &[]);
    let producer = new_producer(&node, &[("partitioner", "murmur2_random"), ("acks", "all")]);
    let mut keys: Vec<Vec<u8>> = (0..240).map(|i| format!("customer-{i}").into_bytes()).collect();
    keys.extend((1..=8).map(|len| (0..len as u8).map(|b| b.wrapping_mul(37).wrapping_add(200)).collect()));
    let records: Vec<TestRecord> = keys.iter().map(|k| TestRecord::new(Some(k), Some(b"v"))).collect();
    let deliveries = produce_all(&producer, "keyed", None, &records);
    for (key, delivery) in keys.iter().zip(&deliveries) {
        assert_eq!(delivery.partition, java_partition(key, 12), "key {key:?}");
    }

    let consumer = new_consumer(&node);
    let mut stored: BTreeMap<Vec<u8>, i32> = BTreeMap::new();
    for partition in 0..12 {
        let (low, high) = watermarks(&consumer, "keyed", partition);
        assert_eq!(low, 0);
        for message in consume(&consumer, &[("keyed", partition, 0)], high as usize) {
            stored.insert(message.key().unwrap().to_vec(), message.partition());
        }
    }
    assert_eq!(stored.len(), keys.len(), "every key stored once");
    for key in &keys {
        assert_eq!(stored[key], java_partition(key, 12), "key {key:?} stored in its partition");
    }
}

fn describe_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> HashMap<String, (Option<String>, ConfigSource)> {
    let results = block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &admin_options()))
        .expect("DescribeConfigs");
    let resource = results.into_iter().next().expect("one result").expect("topic described");
    resource.entries.into_iter().map(|e| (e.name, (e.value, e.source))).collect()
}

fn config_value<'a>(configs: &'a HashMap<String, (Option<String>, ConfigSource)>, name: &str) -> &'a str {
    configs.get(name).unwrap_or_else(|| panic!("{name} is described")).0.as_deref().expect("a value")
}

#[test]
fn admin_creates_topics_with_configs_then_describes_and_alters_them() {
    // Proves CreateTopics (with configs, duplicates and bad names), DescribeConfigs (values and
    // sources) and AlterConfigs (which, unlike the incremental form, resets what it omits).
    let node = Runnel::start(&[]);
    let admin = new_admin(&node);
    let configured = NewTopic::new("configured", 1, TopicReplication::Fixed(1))
        .set("retention.ms", "3600000")
        .set("cleanup.policy", "compact")
        .set("max.message.bytes", "2000000");
    create_topics(&admin, &[configured, NewTopic::new("plain", 2, TopicReplication::Fixed(1))]);

    let again = block_on(admin.create_topics(
        &[
            NewTopic::new("configured", 1, TopicReplication::Fixed(1)),
            NewTopic::new("bad name!", 1, TopicReplication::Fixed(1)),
            NewTopic::new("bad-config", 1, TopicReplication::Fixed(1)).set("retention.ms", "soon"),
        ],
        &admin_options(),
    ))
    .unwrap();
    assert_eq!(again[0], Err(("configured".into(), RDKafkaErrorCode::TopicAlreadyExists)));
    assert_eq!(again[1], Err(("bad name!".into(), RDKafkaErrorCode::InvalidTopic)));
    assert_eq!(again[2], Err(("bad-config".into(), RDKafkaErrorCode::InvalidConfig)));

    let metadata = admin.inner().fetch_metadata(None, DEADLINE).unwrap();
    let mut topics: Vec<(String, usize)> =
        metadata.topics().iter().map(|t| (t.name().to_string(), t.partitions().len())).collect();
    topics.sort();
    assert_eq!(topics, vec![("configured".into(), 1), ("plain".into(), 2)]);

    let configs = describe_topic(&admin, "configured");
    assert_eq!(config_value(&configs, "retention.ms"), "3600000");
    assert_eq!(config_value(&configs, "cleanup.policy"), "compact");
    assert_eq!(config_value(&configs, "max.message.bytes"), "2000000");
    assert_eq!(configs["retention.ms"].1, ConfigSource::DynamicTopic);
    assert_eq!(config_value(&configs, "segment.bytes"), "1073741824", "Kafka's default");
    assert_ne!(configs["segment.bytes"].1, ConfigSource::DynamicTopic);

    let alter = AlterConfig::new(ResourceSpecifier::Topic("configured")).set("retention.ms", "7200000");
    let results = block_on(admin.alter_configs(&[alter], &admin_options())).expect("AlterConfigs");
    assert!(results[0].is_ok(), "{results:?}");
    let configs = describe_topic(&admin, "configured");
    assert_eq!(config_value(&configs, "retention.ms"), "7200000");
    assert_eq!(config_value(&configs, "cleanup.policy"), "delete", "AlterConfigs resets omitted keys");
    assert_eq!(config_value(&configs, "max.message.bytes"), "1048588", "AlterConfigs resets omitted keys");

    // rdkafka 0.38 reports every AlterConfigs/DescribeConfigs resource as Ok, whatever its
    // error code: the codes themselves (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION) are checked
    // on the raw protocol in kafka_errors.rs. Here: an invalid value changes nothing.
    let bad = AlterConfig::new(ResourceSpecifier::Topic("configured")).set("retention.ms", "later");
    block_on(admin.alter_configs(&[bad], &admin_options())).expect("AlterConfigs");
    assert_eq!(config_value(&describe_topic(&admin, "configured"), "retention.ms"), "7200000", "unchanged");
}

#[test]
fn admin_creates_partitions_that_clients_then_use() {
    // Proves CreatePartitions grows a topic (and refuses to shrink it), and the new partitions
    // take records.
    let node = Runnel::start(&[]);
    let admin = new_admin(&node);
    create_topics(&admin, &[NewTopic::new("growing", 1, TopicReplication::Fixed(1))]);
    let results = block_on(admin.create_partitions(&[NewPartitions::new("growing", 4)], &admin_options())).unwrap();
    assert_eq!(results, vec![Ok("growing".to_string())]);
    let results = block_on(admin.create_partitions(&[NewPartitions::new("growing", 2)], &admin_options())).unwrap();
    assert_eq!(results, vec![Err(("growing".to_string(), RDKafkaErrorCode::InvalidPartitions))]);

    let metadata = admin.inner().fetch_metadata(Some("growing"), DEADLINE).unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 4);
    let producer = new_producer(&node, &[("acks", "all")]);
    let records = [TestRecord::new(Some(b"k"), Some(b"in a new partition"))];
    for partition in 1..4 {
        let deliveries = produce_all(&producer, "growing", Some(partition), &records);
        assert_eq!((deliveries[0].partition, deliveries[0].offset), (partition, 0));
    }
    let messages = consume(&new_consumer(&node), &[("growing", 3, 0)], 1);
    assert_eq!(messages[0].payload(), Some(&b"in a new partition"[..]));
}

#[test]
fn partitions_past_max_broker_partitions_or_one_request_are_refused_and_create_nothing() {
    // Proves `--max-broker-partitions` bounds the replicas a broker hosts for CreateTopics (the
    // topics of one request count against each other), CreatePartitions and the HTTP API, each
    // refused with POLICY_VIOLATION / 422 naming the bound and creating nothing; Kafka 4's bound
    // of 10,000 partitions per CreateTopics refuses the whole request in Kafka's words; what is
    // under the bound is still created and used, and the internal topics are exempt.
    let node = Runnel::start(&["--max-broker-partitions", "20"]);
    let admin = new_admin(&node);
    let fixed = |name, partitions| NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let refused: Result<String, RDKafkaErrorCode> = Err(RDKafkaErrorCode::PolicyViolation);
    let codes = |results: Vec<Result<String, (String, RDKafkaErrorCode)>>| -> Vec<Result<String, RDKafkaErrorCode>> {
        results.into_iter().map(|r| r.map_err(|(_, code)| code)).collect()
    };

    let results = block_on(admin.create_topics(&[fixed("x", 8), fixed("y", 8), fixed("z", 8)], &admin_options()));
    assert_eq!(codes(results.unwrap()), vec![Ok("x".into()), Ok("y".into()), refused.clone()], "z would make 24 > 20");
    let grown = block_on(admin.create_partitions(&[NewPartitions::new("x", 13)], &admin_options())).unwrap();
    assert_eq!(codes(grown), vec![refused.clone()], "x to 13 would make 21");
    let grown = block_on(admin.create_partitions(&[NewPartitions::new("x", 12)], &admin_options())).unwrap();
    assert_eq!(codes(grown), vec![Ok("x".into())], "x to 12 makes exactly 20");
    let excessive = block_on(admin.create_topics(&[fixed("p", 6000), fixed("q", 6000)], &admin_options()));
    assert_eq!(codes(excessive.unwrap()), vec![refused.clone(), refused], "12,000 partitions in one request");

    let http = HttpApi::new(&node);
    let cluster = http.cluster_id();
    let path = format!("/v3/clusters/{cluster}/topics");
    let over = http.post(&path, &serde_json::json!({"topic_name": "h", "partitions_count": 1}));
    assert_eq!(over.status, 422, "{}", over.text);
    assert!(over.text.contains("above its max.broker.partitions of 20"), "{}", over.text);
    let huge = http.post(&path, &serde_json::json!({"topic_name": "h", "partitions_count": 42_279}));
    assert_eq!(huge.status, 422, "{}", huge.text);
    assert!(huge.text.contains("Excessively large number of partitions per request."), "{}", huge.text);
    let v1 = http.post("/v1/topics", &serde_json::json!({"name": "h", "partitions": 1}));
    assert_eq!(v1.status, 422, "{}", v1.text);

    // Nothing refused exists; what was created has its partitions and takes records; a group's
    // coordinator creates __consumer_offsets past the bound.
    let metadata = admin.inner().fetch_metadata(None, DEADLINE).unwrap();
    let mut topics: Vec<(String, usize)> =
        metadata.topics().iter().map(|t| (t.name().to_string(), t.partitions().len())).collect();
    topics.sort();
    assert_eq!(topics, vec![("x".to_string(), 12), ("y".to_string(), 8)]);
    let producer = new_producer(&node, &[("acks", "all")]);
    let delivered = produce_all(&producer, "x", Some(11), &[TestRecord::new(None, Some(b"last one in"))]);
    assert_eq!((delivered[0].partition, delivered[0].offset), (11, 0));
    let mut consumer_config = consumer_config(&node);
    consumer_config.set("group.id", "past-the-bound");
    let consumer: BaseConsumer = consumer_config.create().expect("consumer");
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("x", 11, Offset::Offset(1)).unwrap();
    consumer.commit(&offsets, rdkafka::consumer::CommitMode::Sync).expect("commit: __consumer_offsets is exempt");
}

#[test]
fn racing_creations_never_put_a_broker_past_max_broker_partitions() {
    // Proves the per-broker bound holds for creations that race: eight clients each create a
    // 4-partition topic at once (each fits alone; together 32 replicas on a broker bounded to
    // 20). Each handler checks the image it sees, and the creation is checked again where its
    // record applies, so exactly five commit and the others are refused with POLICY_VIOLATION.
    let node = Runnel::start(&["--max-broker-partitions", "20"]);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let (admin, barrier) = (new_admin(&node), barrier.clone());
            std::thread::spawn(move || {
                let name = format!("race-{i}");
                let topic = NewTopic::new(&name, 4, TopicReplication::Fixed(1));
                barrier.wait();
                let results = block_on(admin.create_topics(&[topic], &admin_options())).expect("CreateTopics");
                results.into_iter().next().expect("one result").map_err(|(_, code)| code)
            })
        })
        .collect();
    let results: Vec<Result<String, RDKafkaErrorCode>> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    let created = results.iter().filter(|r| r.is_ok()).count();
    let refused = results.iter().filter(|r| **r == Err(RDKafkaErrorCode::PolicyViolation)).count();
    assert_eq!((created, refused), (5, 3), "{results:?}");
    let metadata = new_admin(&node).inner().fetch_metadata(None, DEADLINE).unwrap();
    let hosted: usize = metadata.topics().iter().map(|t| t.partitions().len()).sum();
    assert_eq!(hosted, 20, "{:?}", metadata.topics().iter().map(|t| t.name()).collect::<Vec<_>>());
}

#[test]
fn admin_deletes_records_and_the_log_start_moves() {
    // Proves DeleteRecords moves the log start offset (reported as the new low watermark), the
    // records below it are gone, and deleting to the end empties the partition.
    let node = Runnel::start(&[]);
    let admin = new_admin(&node);
    create_topic(&node, "trimmed", 2, &[]);
    let producer = new_producer(&node, &[("acks", "all")]);
    let records: Vec<TestRecord> = (0..10).map(|i| TestRecord::new(None, Some(format!("r{i}").as_bytes()))).collect();
    produce_all(&producer, "trimmed", Some(0), &records);
    produce_all(&producer, "trimmed", Some(1), &records);

    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("trimmed", 0, Offset::Offset(6)).unwrap();
    offsets.add_partition_offset("trimmed", 1, Offset::End).unwrap();
    let result = block_on(admin.delete_records(&offsets, &admin_options())).expect("DeleteRecords");
    let low: HashMap<(String, i32), Offset> = result.to_topic_map();
    assert_eq!(low[&("trimmed".to_string(), 0)], Offset::Offset(6));
    assert_eq!(low[&("trimmed".to_string(), 1)], Offset::Offset(10));
    for element in result.elements() {
        element.error().expect("no per-partition error");
    }

    let consumer = new_consumer(&node);
    assert_eq!(watermarks(&consumer, "trimmed", 0), (6, 10));
    assert_eq!(watermarks(&consumer, "trimmed", 1), (10, 10));
    let messages = consume(&consumer, &[("trimmed", 0, 6)], 4);
    assert_eq!(messages[0].offset(), 6);
    assert_eq!(messages[0].payload(), Some(&b"r6"[..]));

    // Offsets below the new start are out of range: the consumer reports an error.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("trimmed", 0, Offset::Offset(2)).unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let error = loop {
        assert!(Instant::now() < deadline, "no OFFSET_OUT_OF_RANGE for a deleted offset");
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => panic!("read deleted offset {}", message.offset()),
            Some(Err(e)) => break e,
        }
    };
    assert!(
        matches!(
            error,
            KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        ),
        "{error:?}"
    );
}

#[test]
fn admin_deletes_topics_and_a_recreated_topic_starts_empty() {
    // Proves DeleteTopics removes the topic from metadata and its metric series, a second delete
    // is UNKNOWN_TOPIC_OR_PARTITION, and a topic re-created with the same name has none of the
    // old data.
    let node = Runnel::start(&[]);
    let admin = new_admin(&node);
    create_topic(&node, "doomed", 1, &[]);
    create_topic(&node, "kept", 1, &[]);
    let producer = new_producer(&node, &[("acks", "all")]);
    produce_all(&producer, "doomed", Some(0), &[TestRecord::new(None, Some(b"old"))]);
    drop(producer);

    let http = support::HttpApi::new(&node);
    let series = || http.get("/metrics").text.lines().filter(|l| l.contains("topic=\"doomed\"")).count();
    assert!(series() > 0, "the topic has metric series");
    let results = block_on(admin.delete_topics(&["doomed"], &admin_options())).expect("DeleteTopics");
    assert_eq!(results, vec![Ok("doomed".to_string())]);
    let listed = |name: &str| {
        let metadata = admin.inner().fetch_metadata(None, DEADLINE).unwrap();
        metadata.topics().iter().any(|t| t.name() == name)
    };
    assert!(wait_until(DEADLINE, || !listed("doomed")), "deleted topic still in metadata");
    // A Kafka DeleteTopics (not only the HTTP delete) drops the topic's series.
    assert!(wait_until(DEADLINE, || series() == 0), "{}", http.get("/metrics").text);
    assert!(listed("kept"));
    let results = block_on(admin.delete_topics(&["doomed"], &admin_options())).unwrap();
    assert_eq!(results, vec![Err(("doomed".to_string(), RDKafkaErrorCode::UnknownTopicOrPartition))]);

    create_topic(&node, "doomed", 1, &[]);
    let consumer = new_consumer(&node);
    assert_eq!(watermarks(&consumer, "doomed", 0), (0, 0), "re-created topic starts empty");
    let producer = new_producer(&node, &[("acks", "all")]);
    let deliveries = produce_all(&producer, "doomed", Some(0), &[TestRecord::new(None, Some(b"new"))]);
    assert_eq!(deliveries[0].offset, 0);
    assert_eq!(consume(&consumer, &[("doomed", 0, 0)], 1)[0].payload(), Some(&b"new"[..]));
}

#[test]
fn list_offsets_finds_earliest_latest_and_offsets_for_times() {
    // Proves ListOffsets: earliest and latest (fetch_watermarks) and the first offset whose
    // timestamp is at or after a given time (offsets_for_times), or none past the last.
    let node = Runnel::start(&[]);
    create_topic(&node, "timed", 1, &[]);
    let consumer = new_consumer(&node);
    assert_eq!(watermarks(&consumer, "timed", 0), (0, 0));
    let t0 = now_ms() - 100_000;
    let records: Vec<TestRecord> =
        (0..10).map(|i| TestRecord::new(None, Some(format!("at {i}").as_bytes())).at(t0 + i * 1000)).collect();
    // One record per request, so the time index has one entry per batch.
    let producer = new_producer(&node, &[("acks", "all"), ("linger.ms", "0")]);
    for record in &records {
        produce_all(&producer, "timed", Some(0), std::slice::from_ref(record));
    }
    assert_eq!(watermarks(&consumer, "timed", 0), (0, 10));

    let offset_for = |timestamp: i64| {
        let mut query = TopicPartitionList::new();
        query.add_partition_offset("timed", 0, Offset::Offset(timestamp)).unwrap();
        let found = consumer.offsets_for_times(query, DEADLINE).expect("ListOffsets by time");
        let element = found.find_partition("timed", 0).unwrap();
        element.error().expect("no partition error");
        element.offset()
    };
    assert_eq!(offset_for(t0 - 5_000), Offset::Offset(0));
    assert_eq!(offset_for(t0), Offset::Offset(0));
    assert_eq!(offset_for(t0 + 3_500), Offset::Offset(4));
    assert_eq!(offset_for(t0 + 9_000), Offset::Offset(9));
    assert_eq!(offset_for(t0 + 9_001), Offset::End, "no record at or after the time");
}

#[test]
fn a_thousand_topics_are_created_produced_to_and_listed() {
    // Proves the broker handles 1,000 topics: created in four CreateTopics batches, one record
    // produced to each, all listed by Metadata, and a sample read back.
    let started = Instant::now();
    let node = Runnel::start(&[]);
    let admin = new_admin(&node);
    let names: Vec<String> = (0..1000).map(|i| format!("many-{i:04}")).collect();
    for chunk in names.chunks(250) {
        let topics: Vec<NewTopic<'_>> = chunk.iter().map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1))).collect();
        create_topics(&admin, &topics);
    }
    let created = started.elapsed();

    let producer = new_producer(&node, &[("acks", "all")]);
    let futures: Vec<DeliveryFuture> =
        names.iter().map(|n| send(&producer, n, Some(0), &TestRecord::new(None, Some(n.as_bytes())))).collect();
    for delivery in await_deliveries(futures) {
        assert_eq!(delivery.offset, 0);
    }
    let produced = started.elapsed();

    let metadata = admin.inner().fetch_metadata(None, DEADLINE).unwrap();
    let mut listed: Vec<&str> = metadata.topics().iter().map(|t| t.name()).collect();
    listed.sort_unstable();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    for topic in metadata.topics() {
        assert!(topic.error().is_none(), "{}: {:?}", topic.name(), topic.error());
        assert_eq!(topic.partitions().len(), 1);
        assert_eq!(topic.partitions()[0].leader(), metadata.brokers()[0].id());
    }

    let sample: Vec<(&str, i32, i64)> = names.iter().step_by(50).map(|n| (n.as_str(), 0, 0)).collect();
    let messages = consume(&new_consumer(&node), &sample, sample.len());
    for message in messages {
        assert_eq!(message.payload(), Some(message.topic().as_bytes()));
    }
    // Generous bound for a debug build on 2 cores; it catches accidental O(n²) work per topic.
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "1,000 topics took {:?} (created after {created:?}, produced after {produced:?})",
        started.elapsed()
    );
}

/// Reads every record of `partition` from the log start to the log end.
fn read_partition(consumer: &BaseConsumer, topic: &str, partition: i32) -> BTreeMap<i64, TestRecord> {
    let (low, high) = watermarks(consumer, topic, partition);
    if high == low {
        return BTreeMap::new();
    }
    consume(consumer, &[(topic, partition, low)], (high - low) as usize)
        .iter()
        .map(|m| (m.offset(), TestRecord { timestamp: None, ..TestRecord::of(m) }))
        .collect()
}

/// Delivery callbacks of the background producer: every acknowledged (partition, offset, seq).
#[derive(Default, Clone)]
struct AckLog {
    acked: Arc<Mutex<Vec<(i32, i64, u64)>>>,
}

impl ClientContext for AckLog {}

impl ProducerContext for AckLog {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        if let Ok(message) = result {
            self.acked.lock().unwrap().push((message.partition(), message.offset(), *seq));
        }
    }
}

fn durable_record(seq: u64) -> TestRecord {
    TestRecord::new(
        Some(format!("key-{}", seq % 17).as_bytes()),
        Some(format!("record {seq} {}", "x".repeat((seq % 50) as usize)).as_bytes()),
    )
}

#[test]
fn acknowledged_records_survive_sigterm_and_sigkill() {
    // Proves durability: after SIGTERM (clean exit 0) all acks=all records are readable at their
    // offsets; after SIGKILL in the middle of a stream of produces, every record whose delivery
    // was acknowledged is readable at its acknowledged offset with identical content.
    let mut node = Runnel::start(&[]);
    create_topic(&node, "durable", 2, &[]);

    // Phase 1: clean shutdown.
    let first: Vec<TestRecord> = (0..1000).map(durable_record).collect();
    let producer = new_producer(&node, &[("acks", "all")]);
    let futures: Vec<DeliveryFuture> =
        first.iter().enumerate().map(|(i, r)| send(&producer, "durable", Some((i % 2) as i32), r)).collect();
    let mut expected: BTreeMap<(i32, i64), TestRecord> = BTreeMap::new();
    for (delivery, record) in await_deliveries(futures).into_iter().zip(&first) {
        expected.insert((delivery.partition, delivery.offset), record.clone());
    }
    drop(producer);
    assert!(node.terminate(), "SIGTERM: runnel exits with status 0");
    node.restart();
    let consumer_after_term = new_consumer(&node);
    for partition in 0..2 {
        let stored = read_partition(&consumer_after_term, "durable", partition);
        assert_eq!(stored.len(), 500, "partition {partition} after a clean restart");
        for (offset, record) in stored {
            assert_eq!(Some(&record), expected.get(&(partition, offset)), "partition {partition} offset {offset}");
        }
    }
    drop(consumer_after_term);

    // Phase 2: a producer keeps sending from another thread (it stops only after the kill) while
    // the node is killed.
    let acks = AckLog::default();
    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let config =
            client_config(&node, &[("acks", "all"), ("linger.ms", "2"), ("queue.buffering.max.messages", "20000")]);
        let (acks, stop) = (acks.clone(), stop.clone());
        std::thread::spawn(move || {
            let producer: BaseProducer<AckLog> = config.create_with_context(acks).expect("producer");
            let mut seq = 1_000_000u64;
            while !stop.load(Ordering::Relaxed) && seq < 1_500_000 {
                let record = durable_record(seq);
                let out = BaseRecord::<[u8], [u8], Box<u64>>::with_opaque_to("durable", Box::new(seq))
                    .partition((seq % 2) as i32)
                    .key(record.key.as_deref().unwrap())
                    .payload(record.value.as_deref().unwrap());
                match producer.send(out) {
                    Ok(()) => {
                        seq += 1;
                        producer.poll(Duration::ZERO);
                    }
                    // Queue full: serve delivery reports until there is room (bounded wait).
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => panic!("enqueue: {e}"),
                }
            }
            // Dropping purges what was not acknowledged; purged records count as not delivered.
        })
    };
    let acked_count = || acks.acked.lock().unwrap().len();
    assert!(wait_until(DEADLINE, || acked_count() >= 3000), "only {} records acknowledged", acked_count());
    node.kill9();
    stop.store(true, Ordering::Relaxed);
    background.join().expect("background producer");
    let acked = acks.acked.lock().unwrap().clone();
    for (partition, offset, seq) in &acked {
        expected.insert((*partition, *offset), durable_record(*seq));
    }

    node.restart();
    let consumer = new_consumer(&node);
    let mut log_ends = Vec::new();
    for partition in 0..2 {
        let stored = read_partition(&consumer, "durable", partition);
        let offsets: Vec<i64> = stored.keys().copied().collect();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>(), "partition {partition}: dense offsets");
        for ((p, offset), record) in expected.range((partition, 0)..(partition + 1, 0)) {
            assert_eq!(stored.get(offset), Some(record), "partition {p}: acknowledged offset {offset} lost or changed");
        }
        log_ends.push(offsets.len() as i64);
    }
    // The recovered log takes new records right after what survived.
    let producer = new_producer(&node, &[("acks", "all")]);
    for partition in 0..2 {
        let delivery = &produce_all(&producer, "durable", Some(partition), &[durable_record(7)])[0];
        assert_eq!(delivery.offset, log_ends[partition as usize], "partition {partition}");
    }
}

/// The latest statistics librdkafka emitted for a consumer.
#[derive(Default)]
struct StatsContext {
    latest: Mutex<Option<Statistics>>,
}

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        *self.latest.lock().unwrap() = Some(statistics);
    }
}

impl ConsumerContext for StatsContext {}

#[test]
fn a_waiting_fetch_is_woken_by_an_append() {
    // Proves appends wake long-polling fetches: with fetch.wait.max.ms=10000, a consumer parked
    // at the log end receives a record produced meanwhile in far less than the wait.
    let node = Runnel::start(&[]);
    create_topic(&node, "long-poll", 1, &[]);
    let wait_ms = 10_000;
    let mut config = consumer_config(&node);
    config.set("fetch.wait.max.ms", wait_ms.to_string()).set("statistics.interval.ms", "20");
    let consumer: BaseConsumer<StatsContext> = config.create_with_context(StatsContext::default()).unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("long-poll", 0, Offset::Offset(0)).unwrap();
    consumer.assign(&tpl).unwrap();

    // Wait until the partition is fetching and a request is outstanding at the broker: the
    // fetch is parked there.
    let parked = || {
        let stats = consumer.context().latest.lock().unwrap();
        let Some(stats) = stats.as_ref() else { return false };
        let fetching =
            stats.topics.get("long-poll").and_then(|t| t.partitions.get(&0)).is_some_and(|p| p.fetch_state == "active");
        fetching && stats.brokers.values().any(|b| b.nodeid >= 0 && b.waitresp_cnt > 0)
    };
    let deadline = Instant::now() + DEADLINE;
    while !parked() {
        assert!(Instant::now() < deadline, "the consumer never parked a fetch");
        if let Some(result) = consumer.poll(Duration::from_millis(20)) {
            panic!("nothing to consume yet: {:?}", result.map(|m| m.offset()));
        }
    }

    let producer = new_producer(&node, &[("acks", "all")]);
    let produced_at = Instant::now();
    produce_all(&producer, "long-poll", Some(0), &[TestRecord::new(None, Some(b"wake up"))]);
    let message = loop {
        assert!(produced_at.elapsed() < Duration::from_millis(wait_ms), "no record within fetch.wait.max.ms");
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(message)) => break message.detach(),
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    };
    let latency = produced_at.elapsed();
    assert_eq!(message.payload(), Some(&b"wake up"[..]));
    assert!(
        latency < Duration::from_millis(wait_ms / 2),
        "the parked fetch answered after {latency:?}: appends do not wake fetches"
    );
}

#[test]
fn keyless_records_to_a_compacted_topic_fail_alone_with_librdkafka() {
    // Regression (KIP-467): a batch mixing keyed and keyless records on a compacted topic
    // failed every record with INVALID_RECORD. With record_errors in the Produce response,
    // librdkafka fails the keyless ones with INVALID_RECORD and the others of the batch with
    // its "invalid different record" error, so the application knows which records to fix.
    let node = Runnel::start(&[]);
    create_topic(&node, "compacted-mixed", 1, &[("cleanup.policy", "compact")]);
    // One batch for all six: a long linger, and a flush after enqueueing them.
    let producer = new_producer(&node, &[("linger.ms", "1000"), ("enable.idempotence", "false")]);
    // Learn the leader first: records enqueued while it is unknown wait in librdkafka's
    // unassigned queue and can leave it in more than one batch.
    producer.client().fetch_metadata(Some("compacted-mixed"), DEADLINE).expect("metadata");
    let keys = [Some("a"), None, Some("b"), Some("c"), None, Some("d")];
    let futures: Vec<DeliveryFuture> = keys
        .iter()
        .map(|key| {
            let mut record = FutureRecord::<str, str>::to("compacted-mixed").partition(0).payload("value");
            if let Some(key) = key {
                record = record.key(*key);
            }
            producer.send_result(record).map_err(|(e, _)| e).expect("enqueue a record")
        })
        .collect();
    producer.flush(DEADLINE).expect("flush");
    let errors: Vec<Option<RDKafkaErrorCode>> = block_on(async move {
        let mut out = Vec::new();
        for future in futures {
            match tokio::time::timeout(DEADLINE, future).await.expect("a delivery report").expect("not dropped") {
                Ok(_) => out.push(None),
                Err((KafkaError::MessageProduction(code), _)) => out.push(Some(code)),
                Err((other, _)) => panic!("unexpected delivery error {other}"),
            }
        }
        out
    });
    let different = Some(RDKafkaErrorCode::InvalidDifferentRecord);
    let invalid = Some(RDKafkaErrorCode::InvalidRecord);
    assert_eq!(errors, vec![different, invalid, different, different, invalid, different]);
}

#[test]
fn a_compacted_topic_with_max_compaction_lag_rolls_and_drops_superseded_values() {
    // Proves the cleaner settings a Kafka user sets end to end with librdkafka's AdminClient
    // and producer: `min.cleanable.dirty.ratio` and `max.compaction.lag.ms` are accepted at
    // creation and described; with the lag at 500 ms the active segment (1 GiB, 7 days by
    // default: it would never close here) rolls on an append once older than that, and the
    // housekeeping then cleans it, so the superseded values of a key go and its last one stays.
    let node = Runnel::start(&["--housekeeping-interval-ms", "100"]);
    let configs =
        [("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.25"), ("max.compaction.lag.ms", "500")];
    create_topic(&node, "lagged", 1, &configs);
    let described = describe_topic(&new_admin(&node), "lagged");
    assert_eq!(config_value(&described, "min.cleanable.dirty.ratio"), "0.25");
    assert_eq!(config_value(&described, "max.compaction.lag.ms"), "500");

    let producer = new_producer(&node, &[("acks", "all")]);
    let values: Vec<TestRecord> =
        (0..10).map(|i| TestRecord::new(Some(b"k"), Some(format!("v{i}").as_bytes()))).collect();
    produce_all(&producer, "lagged", Some(0), &values);
    let consumer = new_consumer(&node);
    // Every record from the log start, however sparse the offsets are after compaction.
    let read = |consumer: &BaseConsumer| -> Vec<(Option<Vec<u8>>, Option<Vec<u8>>)> {
        let (low, high) = watermarks(consumer, "lagged", 0);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("lagged", 0, Offset::Offset(low)).unwrap();
        consumer.assign(&tpl).expect("assign");
        let mut records = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        while records.last().map(|(offset, _, _)| offset + 1) != Some(high) {
            assert!(Instant::now() < deadline, "never read up to {high}");
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => records.push((m.offset(), m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec))),
                Some(Err(e)) => panic!("{e}"),
                None => {}
            }
        }
        records.into_iter().map(|(_, k, v)| (k, v)).collect()
    };
    // Each look appends one more record: the append that finds the active segment past the lag
    // rolls it, and the next housekeeping cleans the closed one.
    let compacted = wait_until(DEADLINE, || {
        produce_all(&producer, "lagged", Some(0), &[TestRecord::new(Some(b"pad"), Some(b"p"))]);
        let values_of_k = read(&consumer).into_iter().filter(|(k, _)| k.as_deref() == Some(b"k")).count();
        values_of_k == 1
    });
    let records = read(&consumer);
    assert!(compacted, "the superseded values of k never went: {records:?}");
    let last_of_k = records.iter().find(|(k, _)| k.as_deref() == Some(b"k")).map(|(_, v)| v.clone());
    assert_eq!(last_of_k, Some(Some(b"v9".to_vec())), "the last value stays");
}
