//! A topic deleted and recreated under the same name while producers append to it: every
//! acknowledged record must be in the incarnation (topic id) that acknowledged it, or that
//! incarnation must be gone entirely. Raw protocol against the real `runnel` binary.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, FetchRequest, MetadataRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use runnel::log::records::{for_each_record, BatchBuilder};
use runnel::log::Compression;
use support::{RawConn, Runnel};
use uuid::Uuid;

/// Topics recreated concurrently, each by its own admin thread: reconciliations then overlap, as
/// with several admin clients, which is what let an older image undo a newer one.
const TOPICS: usize = 6;
const PARTITIONS: i32 = 4;
/// Producer threads per topic.
const PRODUCERS: usize = 2;
/// Incarnations of each topic; enough for the race to show within a few seconds.
const ITERATIONS: usize = 75;
/// Acknowledged records each incarnation must collect before it is checked and deleted.
const ACKS_PER_INCARNATION: usize = 8;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One record acknowledged while the metadata named the same topic id before and after the
/// Produce: the append was acknowledged by that incarnation.
#[derive(Debug, Clone)]
struct Ack {
    topic: String,
    topic_id: Uuid,
    partition: i32,
    offset: i64,
    value: String,
}

/// The topic id the metadata currently gives `topic`, if it exists.
fn current_topic_id(conn: &mut RawConn, topic: &str) -> Option<Uuid> {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]))
        .with_allow_auto_topic_creation(false);
    let response = conn.call(12, &request);
    let topic = &response.topics[0];
    (topic.error_code == 0).then_some(topic.topic_id)
}

fn produce_one(conn: &mut RawConn, topic: &str, partition: i32, value: &str) -> Option<i64> {
    let mut builder = BatchBuilder::new(Compression::None);
    builder.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    let batch = builder.build().unwrap().into_bytes();
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default().with_index(partition).with_records(Some(batch))]),
    ]);
    let response = conn.call(9, &request);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code == 0).then_some(p.base_offset)
}

/// offset -> value of every record in `partition` of the live incarnation, from 0 to its end.
fn read_partition(
    conn: &mut RawConn,
    topic: &str,
    partition: i32,
    until: i64,
) -> Result<BTreeMap<i64, String>, String> {
    let mut records = BTreeMap::new();
    let mut next = 0i64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while next < until {
        if Instant::now() > deadline {
            return Err(format!("partition {partition}: stuck at offset {next} below {until}"));
        }
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(next)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(1 << 20),
            ])]);
        let response = conn.call(12, &request);
        let p = &response.responses[0].partitions[0];
        if p.error_code != 0 {
            return Err(format!("partition {partition}: fetch at {next} got error {}", p.error_code));
        }
        if p.high_watermark < until {
            return Err(format!(
                "partition {partition}: high watermark {} below acknowledged {until}",
                p.high_watermark
            ));
        }
        let bytes = p.records.clone().unwrap_or_default();
        next = for_each_record(bytes, next, usize::MAX, |record| {
            let value = record.value.map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default();
            records.insert(record.offset, value);
        });
    }
    Ok(records)
}

/// Creates and deletes `topic` `ITERATIONS` times; while each incarnation lives, checks that
/// every record acknowledged by it so far is in it. Returns the violations.
fn recreate(node: &Runnel, topic: &str, acks: &Mutex<Vec<Ack>>) -> Vec<String> {
    let mut admin = RawConn::open(node, "admin");
    let mut checker = RawConn::open(node, "checker");
    let mut violations = Vec::new();
    for iteration in 0..ITERATIONS {
        let created = admin.call(
            7,
            &CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(PARTITIONS)
                .with_replication_factor(1)]),
        );
        assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0].error_message);
        let topic_id = created.topics[0].topic_id;
        let of_this = || -> Vec<Ack> {
            acks.lock().unwrap().iter().filter(|a| a.topic == topic && a.topic_id == topic_id).cloned().collect()
        };
        assert!(
            support::wait_until(Duration::from_secs(10), || of_this().len() >= ACKS_PER_INCARNATION),
            "{topic} iteration {iteration}: producers got no acknowledgements from incarnation {topic_id}"
        );
        // Only this thread deletes `topic`, so the incarnation stays live while it is read.
        let acknowledged = of_this();
        assert_eq!(current_topic_id(&mut checker, topic), Some(topic_id));
        for partition in 0..PARTITIONS {
            let mine: Vec<&Ack> = acknowledged.iter().filter(|a| a.partition == partition).collect();
            let until = mine.iter().map(|a| a.offset + 1).max().unwrap_or(0);
            match read_partition(&mut checker, topic, partition, until) {
                Err(e) => violations.push(format!("{topic} iteration {iteration}, {topic_id}: {e}")),
                Ok(records) => {
                    for ack in mine {
                        if records.get(&ack.offset) != Some(&ack.value) {
                            violations.push(format!(
                                "{topic} iteration {iteration}, {topic_id}: acknowledged {ack:?}, partition holds {:?}",
                                records.get(&ack.offset)
                            ));
                        }
                    }
                }
            }
        }
        let deleted =
            admin.call(5, &DeleteTopicsRequest::default().with_topic_names(vec![name(topic)]).with_timeout_ms(30_000));
        assert_eq!(deleted.responses[0].error_code, 0, "{:?}", deleted.responses[0].error_message);
    }
    violations
}

#[test]
fn topic_recreation_never_loses_acknowledged_records() {
    // Proves an append acknowledged while the metadata names incarnation X is readable in X for
    // as long as X exists, across 6 topics x 75 concurrent delete/recreate cycles with acks=all
    // producers running (an older metadata image reconciled after a newer one deleted the new
    // incarnation's directory and reopened it empty).
    let node = Runnel::start(&["--auto-create-topics-enable", "false"]);
    let topics: Vec<String> = (0..TOPICS).map(|t| format!("reborn-{t}")).collect();
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for topic in &topics {
        for w in 0..PRODUCERS {
            let mut conn = RawConn::open(&node, "producer");
            let (acks, stop, topic) = (acks.clone(), stop.clone(), topic.clone());
            producers.push(std::thread::spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let partition = (seq % PARTITIONS as u64) as i32;
                    let value = format!("w{w}-{seq}");
                    let before = current_topic_id(&mut conn, &topic);
                    let offset = produce_one(&mut conn, &topic, partition, &value);
                    let after = current_topic_id(&mut conn, &topic);
                    if let (Some(offset), Some(before), Some(after)) = (offset, before, after) {
                        if before == after {
                            let ack = Ack { topic: topic.clone(), topic_id: before, partition, offset, value };
                            acks.lock().unwrap().push(ack);
                        }
                    }
                }
            }));
        }
    }
    let started = Instant::now();
    let violations: Vec<String> = std::thread::scope(|scope| {
        let admins: Vec<_> = topics.iter().map(|topic| scope.spawn(|| recreate(&node, topic, &acks))).collect();
        admins.into_iter().flat_map(|admin| admin.join().unwrap()).collect()
    });
    stop.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.join().unwrap();
    }
    let total = acks.lock().unwrap().len();
    eprintln!("{TOPICS} topics x {ITERATIONS} incarnations, {total} attributed acks, {:?}", started.elapsed());
    assert!(
        violations.is_empty(),
        "{} violations, first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    // No directory of a deleted incarnation is left behind once deletion has run.
    let data_dir = node.data_dir.clone();
    assert!(support::wait_until(Duration::from_secs(10), || {
        std::fs::read_dir(&data_dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().ends_with("-delete"))
    }));
}
