//! Fetch size rules against the real `runnel` binary: the response total respects the
//! request's `max_bytes` (KIP-74: only the first batch of the first non-empty partition may
//! exceed it), `partition_max_bytes` holds per partition, the broker's `fetch.max.bytes` caps
//! what a request may ask for, and librdkafka with `fetch.max.bytes` close to its
//! `receive.message.max.bytes` reads large records from many partitions without a disconnect loop.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, FetchRequest, FetchResponse, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use runnel::log::batch::BatchIter;
use runnel::log::records::BatchBuilder;
use runnel::log::Compression;
use support::{client_config, RawConn, Runnel};

const PARTITIONS: i32 = 4;
const BATCHES_PER_PARTITION: usize = 4;
/// One record of this many value bytes per batch: a few hundred KB, as in the bug report.
const VALUE_BYTES: usize = 300_000;
const FETCH_V: i16 = 12;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A batch of one record whose value is `VALUE_BYTES` of `fill`.
fn big_batch(fill: u8) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    builder.push(1_700_000_000_000, Some(b"k"), Some(&vec![fill; VALUE_BYTES]), &[]);
    builder.build().unwrap().into_bytes()
}

/// Creates `topic` with `PARTITIONS` partitions and appends `BATCHES_PER_PARTITION` big
/// batches to each; returns the size of one batch on the wire.
fn fill_topic(conn: &mut RawConn, topic: &str) -> usize {
    let created = conn.call(
        7,
        &CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]),
    );
    assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0].error_message);
    let mut batch_bytes = 0;
    for i in 0..BATCHES_PER_PARTITION {
        let data = (0..PARTITIONS)
            .map(|p| {
                let batch = big_batch((p as usize * 16 + i) as u8);
                batch_bytes = batch.len();
                PartitionProduceData::default().with_index(p).with_records(Some(batch))
            })
            .collect();
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(data)]);
        let response = conn.call(9, &request);
        for p in &response.responses[0].partition_responses {
            assert_eq!(p.error_code, 0, "produce to partition {}", p.index);
        }
    }
    batch_bytes
}

/// Fetch of every partition of `topic` in index order from `offsets[p]`.
fn fetch(conn: &mut RawConn, topic: &str, offsets: &[i64], max_bytes: i32, partition_max_bytes: i32) -> FetchResponse {
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(p as i32)
                .with_fetch_offset(*offset)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(partitions)]);
    let response = conn.call(FETCH_V, &request);
    assert_eq!(response.error_code, 0);
    response
}

/// (bytes, whole batches) returned for each partition, in request order.
fn returned(response: &FetchResponse) -> Vec<(usize, usize)> {
    response.responses[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            let records = p.records.clone().unwrap_or_default();
            let batches = BatchIter::new(records.clone()).map(|b| b.expect("whole, valid batches")).count();
            (records.len(), batches)
        })
        .collect()
}

#[test]
fn full_fetches_are_served_whatever_session_they_name_and_incremental_ones_are_refused() {
    // Proves KIP-227's request kinds as Kafka's FetchManager sees them (Runnel keeps no
    // sessions): epoch 0 or -1 is a full fetch, served even naming a session id (Kafka drops
    // that session and serves it); epoch > 0 is incremental, FETCH_SESSION_ID_NOT_FOUND.
    // A non-zero id was refused whatever its epoch.
    const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
    let node = Runnel::start(&["--auto-create-topics-enable", "false"]);
    let mut conn = RawConn::open(&node, "sessions");
    fill_topic(&mut conn, "sessions");
    let request = |session_id: i32, session_epoch: i32| {
        FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_id(session_id)
            .with_session_epoch(session_epoch)
            .with_topics(vec![FetchTopic::default().with_topic(name("sessions")).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(1 << 20),
            ])])
    };
    for (id, epoch) in [(0, -1), (0, 0), (7, -1), (7, 0)] {
        let response = conn.call(FETCH_V, &request(id, epoch));
        assert_eq!(response.error_code, 0, "session {id} epoch {epoch}");
        assert_eq!(response.session_id, 0, "no session is created");
        assert!(response.responses[0].partitions[0].records.as_ref().is_some_and(|r| !r.is_empty()));
    }
    for (id, epoch) in [(7, 1), (0, 3)] {
        let response = conn.call(FETCH_V, &request(id, epoch));
        assert_eq!(response.error_code, FETCH_SESSION_ID_NOT_FOUND, "session {id} epoch {epoch}");
    }
}

#[test]
fn fetch_total_respects_max_bytes_and_partition_max_bytes_as_kip_74() {
    // Proves Kafka's readFromLog rules: a running limit over partitions, partition_max_bytes per
    // partition, and only the first batch of the first non-empty partition may exceed either.
    let node = Runnel::start(&["--auto-create-topics-enable", "false"]);
    let mut conn = RawConn::open(&node, "kip74");
    let batch = fill_topic(&mut conn, "big");
    let from_start = [0i64; PARTITIONS as usize];
    let mb = 1 << 20;

    // The bug report's shape: 1 MiB in total, 1 MiB per partition. Three batches fit in the first
    // partition; what is left (< one batch) is not enough for any other.
    let sizes = returned(&fetch(&mut conn, "big", &from_start, mb, mb));
    assert_eq!(sizes, vec![(3 * batch, 3), (0, 0), (0, 0), (0, 0)]);
    assert!(sizes.iter().map(|s| s.0).sum::<usize>() <= mb as usize);

    // partition_max_bytes limits each partition on its own.
    let sizes = returned(&fetch(&mut conn, "big", &from_start, 64 * mb, 400_000));
    assert_eq!(sizes, vec![(batch, 1); PARTITIONS as usize]);

    // A batch larger than partition_max_bytes: only the first partition gets it (KIP-74).
    let sizes = returned(&fetch(&mut conn, "big", &from_start, 64 * mb, 100_000));
    assert_eq!(sizes, vec![(batch, 1), (0, 0), (0, 0), (0, 0)]);

    // A batch larger than max_bytes: the first batch alone, nothing more anywhere.
    let sizes = returned(&fetch(&mut conn, "big", &from_start, 100_000, mb));
    assert_eq!(sizes, vec![(batch, 1), (0, 0), (0, 0), (0, 0)]);

    // "First non-empty": a partition with nothing to return does not use up the exception.
    let at_end = [BATCHES_PER_PARTITION as i64, 0, 0, 0];
    let sizes = returned(&fetch(&mut conn, "big", &at_end, 64 * mb, 100_000));
    assert_eq!(sizes, vec![(0, 0), (batch, 1), (0, 0), (0, 0)]);
}

#[test]
fn broker_fetch_max_bytes_caps_what_a_request_asks_for() {
    // Proves the broker's fetch.max.bytes caps a request's max_bytes (Kafka: min of the two).
    let node = Runnel::start(&["--auto-create-topics-enable", "false", "--fetch-max-bytes", "400000"]);
    let mut conn = RawConn::open(&node, "cap");
    let batch = fill_topic(&mut conn, "capped");
    let sizes = returned(&fetch(&mut conn, "capped", &[0i64; PARTITIONS as usize], 64 << 20, 64 << 20));
    assert_eq!(sizes, vec![(batch, 1), (0, 0), (0, 0), (0, 0)]);
    assert!(sizes.iter().map(|s| s.0).sum::<usize>() <= 400_000);
}

#[test]
fn librdkafka_fetch_over_receive_message_max_bytes_disconnect_loop() {
    // Proves a librdkafka consumer with fetch.max.bytes = 1 MiB and receive.message.max.bytes just
    // above it reads ~300 KB records from 4 partitions to the end (a response above its receive
    // limit made it disconnect and refetch forever).
    let node = Runnel::start(&["--auto-create-topics-enable", "false"]);
    let mut conn = RawConn::open(&node, "fill");
    fill_topic(&mut conn, "wide");
    let consumer: BaseConsumer = client_config(
        &node,
        &[
            ("group.id", "fetch-max-bytes"),
            ("enable.auto.commit", "false"),
            ("fetch.max.bytes", "1048576"),
            ("receive.message.max.bytes", "1100000"),
        ],
    )
    .create()
    .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset("wide", p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let expected = PARTITIONS as usize * BATCHES_PER_PARTITION;
    let mut seen = vec![0usize; PARTITIONS as usize];
    let mut errors = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.iter().sum::<usize>() < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                assert_eq!(message.payload().map(<[u8]>::len), Some(VALUE_BYTES));
                assert_eq!(message.offset(), seen[message.partition() as usize] as i64);
                seen[message.partition() as usize] += 1;
            }
            Some(Err(e)) => errors.push(e.to_string()),
            None => {}
        }
    }
    assert_eq!(seen, vec![BATCHES_PER_PARTITION; PARTITIONS as usize], "consumer errors: {errors:?}");
}

#[test]
fn a_long_poll_parked_on_several_partitions_wakes_for_an_append_to_any_of_them() {
    // Proves per-partition long-poll wakeups: a fetch parked (max_wait 20 s, min_bytes 1) at
    // the log end of two partitions returns the record appended to the second one at once, and
    // appends to a partition it does not read leave it parked until its own data comes.
    let node = Runnel::start(&[]);
    let mut conn = RawConn::open(&node, "long-poll");
    let created = conn.call(
        7,
        &CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
            .with_name(name("parked"))
            .with_num_partitions(3)
            .with_replication_factor(1)]),
    );
    assert_eq!(created.topics[0].error_code, 0);
    let produce = |conn: &mut RawConn, partition: i32, value: &[u8]| {
        let mut builder = BatchBuilder::new(Compression::None);
        builder.push(1_700_000_000_000, None, Some(value), &[]);
        let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            TopicProduceData::default().with_name(name("parked")).with_partition_data(vec![
                PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(builder.build().unwrap().into_bytes())),
            ]),
        ]);
        assert_eq!(conn.call(9, &request).responses[0].partition_responses[0].error_code, 0);
    };
    let addr = node.kafka_addr;
    let parked = std::thread::spawn(move || {
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        let mut conn = RawConn::from_stream(stream, "parked-fetch");
        let partitions = [0, 1]
            .into_iter()
            .map(|p| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(20_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(name("parked")).with_partitions(partitions)]);
        let started = Instant::now();
        let response = conn.call(FETCH_V, &request);
        (started.elapsed(), response)
    });
    // Partition 2 is not in the request: its appends must not answer the parked fetch empty.
    for i in 0..20u8 {
        produce(&mut conn, 2, &[i]);
    }
    produce(&mut conn, 1, b"for the parked fetch");
    let (elapsed, response) = parked.join().expect("fetch thread");
    assert!(elapsed < Duration::from_secs(15), "the append to partition 1 woke the fetch ({elapsed:?})");
    let got: Vec<(i32, usize)> = response.responses[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.records.as_ref().map_or(0, |r| r.len())))
        .collect();
    assert_eq!(got[0], (0, 0), "nothing on partition 0");
    assert_eq!(got[1].0, 1);
    assert!(got[1].1 > 0, "partition 1's record returned: {got:?}");
}
