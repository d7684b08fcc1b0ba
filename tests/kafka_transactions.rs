//! Transactions end to end (issue 12, KIP-98) with librdkafka through `rdkafka`: a
//! transactional producer committing and aborting across topics and partitions, read by
//! `read_committed` and `read_uncommitted` consumers; a zombie producer fenced by a new one with
//! the same transactional id; `send_offsets_to_transaction` with a consumer group; a
//! transaction past its timeout aborted by the coordinator.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use support::Runnel;

const TIMEOUT: Duration = Duration::from_secs(30);

fn transactional_producer(node: &Runnel, id: &str, extra: &[(&str, &str)]) -> BaseProducer {
    let mut settings = vec![("transactional.id", id), ("linger.ms", "5")];
    settings.extend_from_slice(extra);
    let producer: BaseProducer = support::client_config(node, &settings).create().expect("producer");
    producer.init_transactions(TIMEOUT).expect("init_transactions");
    producer
}

fn send(producer: &BaseProducer, topic: &str, partition: i32, value: &str) {
    loop {
        match producer.send(BaseRecord::<(), str>::to(topic).partition(partition).payload(value)) {
            Ok(()) => return,
            Err((e, _)) => {
                assert!(matches!(e, KafkaError::MessageProduction(_)), "send: {e}");
                producer.poll(Duration::from_millis(10));
            }
        }
    }
}

/// Every value in `topic`'s partitions up to their end, read with `isolation`.
fn read_all(node: &Runnel, topic: &str, partitions: i32, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = support::client_config(
        node,
        &[("group.id", "txn-reader"), ("enable.auto.commit", "false"), ("isolation.level", isolation)],
    )
    .create()
    .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    // Read until every partition reached the end it had when we started (for read_committed the
    // consumer's end is the last stable offset).
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, TIMEOUT).expect("watermarks");
        ends.insert(p, high);
    }
    let mut values = Vec::new();
    let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        let done = ends.iter().all(|(p, end)| {
            consumer.position().ok().and_then(|tpl| tpl.find_partition(topic, *p).map(|e| e.offset())).is_some_and(
                |o| match o {
                    Offset::Offset(o) => o >= *end,
                    _ => *end == 0,
                },
            )
        });
        if done {
            break;
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            positions.insert(m.partition(), m.offset());
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    values
}

#[test]
fn committed_transactions_are_read_committed_and_aborted_ones_only_read_uncommitted() {
    // Proves the core of KIP-98 with a real client: three transactions over two topics and four
    // partitions, the middle one aborted. read_committed sees every committed record and none
    // of the aborted ones; read_uncommitted sees all of them; each transaction is all or
    // nothing across partitions.
    let node = Runnel::start(&[]);
    support::create_topic(&node, "txn-a", 3);
    support::create_topic(&node, "txn-b", 1);
    let producer = transactional_producer(&node, "txn-mix", &[]);
    let mut committed = BTreeSet::new();
    let mut aborted = BTreeSet::new();
    for (round, commit) in [(0, true), (1, false), (2, true)] {
        producer.begin_transaction().expect("begin");
        for i in 0..30 {
            let value = format!("r{round}-{i}");
            let (topic, partition) = if i % 4 == 3 { ("txn-b", 0) } else { ("txn-a", i % 3) };
            send(&producer, topic, partition, &value);
            if commit {
                committed.insert(value)
            } else {
                aborted.insert(value)
            };
        }
        if commit {
            producer.commit_transaction(TIMEOUT).expect("commit");
        } else {
            producer.flush(TIMEOUT).expect("flush before abort");
            producer.abort_transaction(TIMEOUT).expect("abort");
        }
    }
    let mut seen: BTreeSet<String> = read_all(&node, "txn-a", 3, "read_committed").into_iter().collect();
    seen.extend(read_all(&node, "txn-b", 1, "read_committed"));
    assert_eq!(seen, committed, "read_committed: exactly the committed records");
    let mut all: BTreeSet<String> = read_all(&node, "txn-a", 3, "read_uncommitted").into_iter().collect();
    all.extend(read_all(&node, "txn-b", 1, "read_uncommitted"));
    assert_eq!(all, committed.union(&aborted).cloned().collect(), "read_uncommitted: aborted records too");
}

#[test]
fn a_new_producer_with_the_same_transactional_id_fences_the_old_one_and_aborts_its_transaction() {
    // Proves zombie fencing: producer 1 has an open transaction when producer 2 initialises the
    // same transactional id; producer 1's transaction is aborted (never visible), its commit
    // fails, and producer 2's transaction commits.
    let node = Runnel::start(&[]);
    support::create_topic(&node, "txn-fence", 2);
    let zombie = transactional_producer(&node, "txn-fenced", &[]);
    zombie.begin_transaction().expect("begin");
    for i in 0..10 {
        send(&zombie, "txn-fence", i % 2, &format!("zombie-{i}"));
    }
    zombie.flush(TIMEOUT).expect("zombie's records written");
    let successor = transactional_producer(&node, "txn-fenced", &[]);
    successor.begin_transaction().expect("begin");
    for i in 0..10 {
        send(&successor, "txn-fence", i % 2, &format!("successor-{i}"));
    }
    successor.commit_transaction(TIMEOUT).expect("the successor commits");
    let zombie_commit = zombie.commit_transaction(TIMEOUT);
    assert!(zombie_commit.is_err(), "the fenced producer cannot commit: {zombie_commit:?}");
    let seen = read_all(&node, "txn-fence", 2, "read_committed");
    assert_eq!(seen.len(), 10, "only the successor's records: {seen:?}");
    assert!(seen.iter().all(|v| v.starts_with("successor-")), "{seen:?}");
}

#[test]
fn offsets_sent_to_a_transaction_are_committed_with_it_and_vanish_when_it_aborts() {
    // Proves send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit): a group's offsets
    // committed in an aborted transaction are not visible, those of a committed one are.
    let node = Runnel::start(&[]);
    support::create_topic(&node, "txn-in", 1);
    support::create_topic(&node, "txn-out", 1);
    let plain: BaseProducer = support::client_config(&node, &[]).create().expect("producer");
    for i in 0..20 {
        send(&plain, "txn-in", 0, &format!("in-{i}"));
    }
    plain.flush(TIMEOUT).expect("flush");
    let consumer: BaseConsumer = support::client_config(
        &node,
        &[
            ("group.id", "txn-group"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .expect("consumer");
    consumer.subscribe(&["txn-in"]).expect("subscribe");
    let mut read = 0;
    let deadline = Instant::now() + TIMEOUT;
    while read < 20 && Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            read += 1;
        }
    }
    assert_eq!(read, 20);
    let producer = transactional_producer(&node, "txn-offsets", &[]);
    let offsets_at = |offset: i64| {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("txn-in", 0, Offset::Offset(offset)).expect("offset");
        tpl
    };
    let group_metadata = consumer.group_metadata().expect("group metadata");
    // Aborted: offset 10 must not become the group's.
    producer.begin_transaction().expect("begin");
    send(&producer, "txn-out", 0, "out-aborted");
    producer.send_offsets_to_transaction(&offsets_at(10), &group_metadata, TIMEOUT).expect("send offsets");
    producer.flush(TIMEOUT).expect("flush before abort");
    producer.abort_transaction(TIMEOUT).expect("abort");
    let committed = |c: &BaseConsumer| {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("txn-in", 0);
        c.committed_offsets(tpl, TIMEOUT).expect("committed").find_partition("txn-in", 0).map(|e| e.offset())
    };
    assert_eq!(committed(&consumer), Some(Offset::Invalid), "an aborted transaction commits no offset");
    // Committed: offset 20 is the group's once the transaction commits.
    producer.begin_transaction().expect("begin");
    send(&producer, "txn-out", 0, "out-committed");
    producer.send_offsets_to_transaction(&offsets_at(20), &group_metadata, TIMEOUT).expect("send offsets");
    producer.commit_transaction(TIMEOUT).expect("commit");
    let mut seen = None;
    let visible = support::wait_until(TIMEOUT, || {
        seen = committed(&consumer);
        seen == Some(Offset::Offset(20))
    });
    assert!(visible, "the committed transaction's offset is the group's: {seen:?}");
    assert_eq!(read_all(&node, "txn-out", 1, "read_committed"), vec!["out-committed".to_string()]);
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_by_the_coordinator() {
    // Proves transaction.timeout.ms: a producer that never ends its transaction does not hold
    // the last stable offset forever; the coordinator aborts it (its records are never
    // read_committed) and records committed after it become readable.
    let node = Runnel::start(&[]);
    support::create_topic(&node, "txn-timeout", 1);
    let stuck = transactional_producer(&node, "txn-stuck", &[("transaction.timeout.ms", "2000")]);
    stuck.begin_transaction().expect("begin");
    send(&stuck, "txn-timeout", 0, "stuck");
    stuck.flush(TIMEOUT).expect("written");
    let other = transactional_producer(&node, "txn-other", &[]);
    other.begin_transaction().expect("begin");
    send(&other, "txn-timeout", 0, "after");
    other.commit_transaction(TIMEOUT).expect("commit");
    let mut seen = Vec::new();
    let readable = support::wait_until(TIMEOUT, || {
        seen = read_all(&node, "txn-timeout", 1, "read_committed");
        seen == vec!["after".to_string()]
    });
    assert!(readable, "the stuck transaction was aborted and the committed record is readable: {seen:?}");
}

#[test]
fn http_and_metrics_show_an_open_transaction_and_its_lso_lag_until_it_commits() {
    // Proves the operator's view of issue 12: `/v1/transactions` lists an open transaction with
    // its producer, age and partitions (`?open=true` too), `/v1/transactions/{id}` describes it
    // (404 for an unknown id), the topic's partition shows its last stable offset below the
    // high watermark, and `/metrics` counts it as Ongoing with an LSO lag; after the commit all
    // of that clears.
    let node = Runnel::start(&[]);
    let http = support::HttpApi::new(&node);
    support::create_topic(&node, "txn-http", 2);
    let producer = transactional_producer(&node, "txn-http-1", &[]);
    producer.begin_transaction().expect("begin");
    for i in 0..3 {
        send(&producer, "txn-http", 1, &format!("v{i}"));
    }
    producer.flush(TIMEOUT).expect("written");

    let listed = http.get("/v1/transactions?open=true");
    assert_eq!(listed.status, 200, "{}", listed.text);
    let txns = listed.json["transactions"].as_array().expect("transactions").clone();
    assert_eq!(txns.len(), 1, "{}", listed.text);
    let t = &txns[0];
    assert_eq!(t["transactional_id"], "txn-http-1");
    assert_eq!(t["state"], "Ongoing");
    assert_eq!(t["open"], true);
    assert!(t["producer_id"].as_i64().unwrap() >= 0);
    assert!(t["age_ms"].as_i64().is_some_and(|a| a >= 0), "{t}");
    assert_eq!(t["partitions"], serde_json::json!([{"topic": "txn-http", "partitions": [1]}]));
    assert_eq!(listed.json["unreachable_brokers"], serde_json::json!([]));
    let one = http.get("/v1/transactions/txn-http-1");
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json["state"], "Ongoing");
    assert_eq!(http.get("/v1/transactions/no-such-id").status, 404);

    let topic = http.get("/v1/topics/txn-http").json;
    let partition = &topic["partitions"][1];
    assert_eq!(partition["high_watermark"], 3, "{topic}");
    assert_eq!(partition["last_stable_offset"], 0, "{topic}");
    let metrics = http.get("/metrics").text;
    assert!(metrics.contains("runnel_transactions{state=\"Ongoing\"} 1"), "{metrics}");
    assert!(metrics.contains("runnel_partition_lso_lag{topic=\"txn-http\",partition=\"1\"} 3"), "{metrics}");
    assert!(http.metric_sum("runnel_transaction_oldest_open_ms") >= 0.0);

    producer.commit_transaction(TIMEOUT).expect("commit");
    let cleared = support::wait_until(TIMEOUT, || {
        http.get("/v1/transactions/txn-http-1").json["state"] == "CompleteCommit"
            && http.get("/v1/transactions?open=true").json["transactions"].as_array().is_some_and(|a| a.is_empty())
            && http.metric_sum("runnel_partition_lso_lag") == 0.0
    });
    assert!(cleared, "the commit clears the open transaction and the LSO lag");
    let all = http.get("/v1/transactions").json;
    assert_eq!(all["transactions"][0]["open"], false, "{all}");
    assert!(all["transactions"][0]["age_ms"].is_null(), "{all}");
    assert_eq!(http.metric_sum("runnel_transaction_oldest_open_ms"), 0.0);
}

#[test]
fn the_record_browser_reads_committed_or_uncommitted_as_asked() {
    // Proves `GET /v1/topics/{t}/records?isolation=`: read_committed leaves out an aborted
    // transaction's records and stops at the last stable offset while a transaction is open;
    // read_uncommitted (the default) shows every record; another value is a 400.
    let node = Runnel::start(&[]);
    let http = support::HttpApi::new(&node);
    support::create_topic(&node, "txn-browse", 1);
    let producer = transactional_producer(&node, "txn-browse-1", &[]);
    producer.begin_transaction().expect("begin");
    send(&producer, "txn-browse", 0, "a0");
    send(&producer, "txn-browse", 0, "a1");
    producer.flush(TIMEOUT).expect("written");
    producer.abort_transaction(TIMEOUT).expect("abort");
    producer.begin_transaction().expect("begin");
    send(&producer, "txn-browse", 0, "c0");
    producer.commit_transaction(TIMEOUT).expect("commit");
    producer.begin_transaction().expect("begin");
    send(&producer, "txn-browse", 0, "open");
    producer.flush(TIMEOUT).expect("written");

    let values = |isolation: &str| {
        let answer = http.get(&format!("/v1/topics/txn-browse/records?partition=0{isolation}"));
        assert_eq!(answer.status, 200, "{}", answer.text);
        let values: Vec<String> = answer.json["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["value"].as_str().unwrap_or_default().to_string())
            .collect();
        (values, answer.json)
    };
    let (committed, body) = values("&isolation=read_committed");
    assert_eq!(committed, vec!["c0"], "{body}");
    assert_eq!(body["isolation"], "read_committed");
    // a0 a1 abort-marker c0 commit-marker: the open transaction starts at 5.
    assert_eq!(body["last_stable_offset"], 5, "{body}");
    assert_eq!(body["high_watermark"], 6, "{body}");
    let (all, body) = values("");
    assert_eq!(all, vec!["a0", "a1", "c0", "open"], "{body}");
    assert_eq!(body["isolation"], "read_uncommitted");
    assert_eq!(http.get("/v1/topics/txn-browse/records?isolation=snapshot").status, 400);
    producer.commit_transaction(TIMEOUT).expect("commit");
    let (committed, body) = values("&isolation=read_committed");
    assert_eq!(committed, vec!["c0", "open"], "{body}");
}

// ---- KIP-890 part 1: the leader verifies a transaction's first batch with its coordinator ----

mod raw {
    use bytes::Bytes;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ListOffsetsRequest,
        ProduceRequest, ProduceResponse, ProducerId, TopicName, TransactionalId,
    };
    use kafka_protocol::protocol::StrBytes;
    use runnel::log::records::BatchBuilder;
    use runnel::log::Compression;

    use super::support::RawConn;
    use super::TIMEOUT;

    fn name(s: &str) -> StrBytes {
        StrBytes::from_string(s.to_string())
    }

    /// FindCoordinator (TRANSACTION) for `id` (which creates `__transaction_state`), then
    /// InitProducerId, each retried while the coordinator is being set up.
    pub fn init(conn: &mut RawConn, id: &str) -> (i64, i16) {
        init_with_timeout(conn, id, 60_000)
    }

    /// [`init`] with `transaction.timeout.ms` = `timeout_ms`.
    pub fn init_with_timeout(conn: &mut RawConn, id: &str, timeout_ms: i32) -> (i64, i16) {
        let find = FindCoordinatorRequest::default().with_key_type(1).with_coordinator_keys(vec![name(id)]);
        let found = super::support::wait_until(TIMEOUT, || conn.call(4, &find).coordinators[0].error_code == 0);
        assert!(found, "FindCoordinator succeeds");
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(name(id))))
            .with_transaction_timeout_ms(timeout_ms);
        let mut answer = None;
        super::support::wait_until(TIMEOUT, || {
            let response = conn.call(4, &request);
            answer = (response.error_code == 0).then_some((response.producer_id.0, response.producer_epoch));
            answer.is_some()
        });
        answer.expect("InitProducerId succeeds")
    }

    pub fn add_partition(conn: &mut RawConn, id: &str, (pid, epoch): (i64, i16), topic: &str) -> i16 {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(name(id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partitions(vec![0])]);
        conn.call(3, &request).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    }

    /// EndTxn v5 (transaction version 2): its error code and the producer id and epoch it
    /// answers.
    pub fn end_v5(conn: &mut RawConn, id: &str, (pid, epoch): (i64, i16), commit: bool) -> (i16, (i64, i16)) {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(name(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit);
        let response = conn.call(5, &request);
        (response.error_code, (response.producer_id.0, response.producer_epoch))
    }

    /// AddOffsetsToTxn v3 of `group`: its code.
    pub fn add_offsets(conn: &mut RawConn, id: &str, (pid, epoch): (i64, i16), group: &str) -> i16 {
        let request = kafka_protocol::messages::AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(name(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(kafka_protocol::messages::GroupId(name(group)));
        conn.call(3, &request).error_code
    }

    /// OffsetFetch v7 with `require_stable` of `topic`-0 in `group`: its code and offset.
    pub fn stable_offset(conn: &mut RawConn, group: &str, topic: &str) -> (i16, i64) {
        use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
        let request = kafka_protocol::messages::OffsetFetchRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(name(group)))
            .with_require_stable(true)
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partition_indexes(vec![0])]));
        let response = conn.call(7, &request);
        let partition = &response.topics[0].partitions[0];
        (partition.error_code, partition.committed_offset)
    }

    /// TxnOffsetCommit `version` of `offset` for `topic`-0 in `group` (no member checks): its
    /// code.
    pub fn txn_offset_commit(
        conn: &mut RawConn,
        version: i16,
        id: &str,
        (pid, epoch): (i64, i16),
        group: &str,
        topic: &str,
        offset: i64,
    ) -> i16 {
        use kafka_protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        let request = kafka_protocol::messages::TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(name(id)))
            .with_group_id(kafka_protocol::messages::GroupId(name(group)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]);
        conn.call(version, &request).topics[0].partitions[0].error_code
    }

    pub fn end(conn: &mut RawConn, id: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(name(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit);
        conn.call(3, &request).error_code
    }

    /// A transactional batch of `values` from sequence `seq`, produced (acks=all) to
    /// `topic`-0 with Produce `version`: its error code.
    /// One Produce (v9) with a transactional batch of `producers[i]` for partition `i` of
    /// `topic`: each partition's error code.
    pub fn produce_each(conn: &mut RawConn, id: &str, topic: &str, producers: &[(i64, i16)]) -> Vec<i16> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
        let partitions = producers
            .iter()
            .enumerate()
            .map(|(i, &(pid, epoch))| {
                let mut builder = BatchBuilder::new(Compression::None).producer(pid, epoch, 0).transactional(true);
                builder.push(now, None, Some(b"v"), &[]);
                PartitionProduceData::default()
                    .with_index(i as i32)
                    .with_records(Some(builder.build().expect("batch").into_bytes()))
            })
            .collect();
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(name(id))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(name(topic)))
                .with_partition_data(partitions)]);
        let response: ProduceResponse = conn.call(9, &request);
        response.responses[0].partition_responses.iter().map(|p| p.error_code).collect()
    }

    pub fn produce(
        conn: &mut RawConn,
        version: i16,
        id: &str,
        (pid, epoch): (i64, i16),
        seq: i32,
        topic: &str,
        values: &[&str],
    ) -> i16 {
        let mut builder = BatchBuilder::new(Compression::None).producer(pid, epoch, seq).transactional(true);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
        for v in values {
            builder.push(now, None, Some(v.as_bytes()), &[]);
        }
        let records: Bytes = builder.build().expect("batch").into_bytes();
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(name(id))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(name(topic)))
                .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records))])]);
        let response: ProduceResponse = conn.call(version, &request);
        response.responses[0].partition_responses[0].error_code
    }

    /// `topic`-0's latest offset as read_committed (the LSO) and read_uncommitted (the HW).
    pub fn lso_and_hw(conn: &mut RawConn, topic: &str) -> (i64, i64) {
        let latest = |conn: &mut RawConn, isolation: i8| {
            let request = ListOffsetsRequest::default()
                .with_replica_id((-1).into())
                .with_isolation_level(isolation)
                .with_topics(vec![ListOffsetsTopic::default().with_name(TopicName(name(topic))).with_partitions(
                    vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)],
                )]);
            conn.call(7, &request).topics[0].partitions[0].offset
        };
        (latest(conn, 1), latest(conn, 0))
    }
}

/// One transaction of `id` aborted on `topic`-0, then a late batch of it sent with Produce
/// `version` without being added again: the late batch's error code, and the LSO and HW after.
fn late_batch_after_an_abort(node: &Runnel, id: &str, topic: &str, version: i16) -> (i16, (i64, i64)) {
    let mut conn = support::RawConn::open(node, "late-batch");
    let producer = raw::init(&mut conn, id);
    assert!(support::wait_until(TIMEOUT, || raw::add_partition(&mut conn, id, producer, topic) == 0), "added");
    assert_eq!(raw::produce(&mut conn, version, id, producer, 0, topic, &["in-txn"]), 0, "the transaction's batch");
    assert_eq!(raw::end(&mut conn, id, producer, false), 0, "abort");
    let api = support::HttpApi::new(node);
    let aborted = support::wait_until(TIMEOUT, || {
        api.get(&format!("/v1/transactions/{id}")).json["state"].as_str() == Some("CompleteAbort")
    });
    assert!(aborted, "the abort's markers are written");
    let code = raw::produce(&mut conn, version, id, producer, 1, topic, &["late"]);
    (code, raw::lso_and_hw(&mut conn, topic))
}

#[test]
fn a_late_batch_of_an_ended_transaction_is_refused_instead_of_hanging_the_partition() {
    // Proves KIP-890 part 1 end to end: with verification on (the default), a transactional
    // batch that arrives after its transaction was aborted (a retry, a zombie) is refused with
    // INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v11), nothing is appended and the
    // LSO stays at the high watermark; with `--transaction-partition-verification-enable false`
    // the same batch is appended and opens a transaction no coordinator knows, so the LSO
    // stays behind the high watermark (the hanging transaction the check prevents).
    const INVALID_TXN_STATE: i16 = 48;
    const TRANSACTION_ABORTABLE: i16 = 120;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "late-v9", 1);
    support::create_topic(&node, "late-v11", 1);
    let (code, (lso, hw)) = late_batch_after_an_abort(&node, "late-a", "late-v9", 9);
    assert_eq!(code, INVALID_TXN_STATE, "Produce v9");
    assert_eq!((lso, hw), (2, 2), "the batch and its abort marker only; nothing open");
    let (code, (lso, hw)) = late_batch_after_an_abort(&node, "late-b", "late-v11", 11);
    assert_eq!(code, TRANSACTION_ABORTABLE, "Produce v11");
    assert_eq!((lso, hw), (2, 2));
    let metrics = support::HttpApi::new(&node).get("/metrics").text;
    for series in [
        r#"runnel_txn_partition_verifications_total{mode="verify",result="ok"} 2"#,
        r#"runnel_txn_partition_verifications_total{mode="verify",result="InvalidTxnState"} 1"#,
        r#"runnel_txn_partition_verifications_total{mode="verify",result="TransactionAbortable"} 1"#,
    ] {
        assert!(
            metrics.contains(series),
            "{series} in {}",
            metrics.lines().filter(|l| l.contains("verifications")).collect::<Vec<_>>().join("\n")
        );
    }
    drop(node);

    let node = Runnel::start(&["--transaction-partition-verification-enable", "false"]);
    support::create_topic(&node, "late-unverified", 1);
    let (code, (lso, hw)) = late_batch_after_an_abort(&node, "late-c", "late-unverified", 9);
    assert_eq!(code, 0, "unverified, the late batch is appended");
    assert_eq!((lso, hw), (2, 3), "and holds the LSO back: a hanging transaction");
}

/// One transaction of `id` that commits offset 1 of `topic`-0 in `group` (AddOffsetsToTxn, then
/// TxnOffsetCommit v3) and is aborted, then a late commit of offset 2 in it without adding the
/// offsets again: the late commit's error code, and `group`'s stable offset after (OffsetFetch
/// `require_stable`).
fn late_offset_commit_after_an_abort(node: &Runnel, id: &str, group: &str, topic: &str) -> (i16, (i16, i64)) {
    let mut conn = support::RawConn::open(node, "late-offsets");
    let producer = raw::init(&mut conn, id);
    assert!(support::wait_until(TIMEOUT, || raw::add_offsets(&mut conn, id, producer, group) == 0), "added");
    let committed =
        support::wait_until(TIMEOUT, || raw::txn_offset_commit(&mut conn, 3, id, producer, group, topic, 1) == 0);
    assert!(committed, "the transaction's offset commit");
    assert_eq!(raw::end(&mut conn, id, producer, false), 0, "abort");
    let api = support::HttpApi::new(node);
    let aborted = support::wait_until(TIMEOUT, || {
        api.get(&format!("/v1/transactions/{id}")).json["state"].as_str() == Some("CompleteAbort")
    });
    assert!(aborted, "the abort's markers are written");
    let code = raw::txn_offset_commit(&mut conn, 3, id, producer, group, topic, 2);
    (code, raw::stable_offset(&mut conn, group, topic))
}

#[test]
fn a_late_transactional_offset_commit_is_refused_instead_of_hanging_the_group() {
    // Proves KIP-890 part 1 for TxnOffsetCommit before v5: with verification on, a commit of a
    // transaction already aborted is refused with INVALID_TXN_STATE and the group's offset stays
    // stable (none committed); so is one whose transaction never had the offsets added. With
    // `--transaction-partition-verification-enable false` the late commit is written and opens a
    // transaction no coordinator knows: the group's offset is UNSTABLE_OFFSET_COMMIT for good.
    const INVALID_TXN_STATE: i16 = 48;
    const UNSTABLE_OFFSET_COMMIT: i16 = 88;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "late-offsets", 1);
    let (code, stable) = late_offset_commit_after_an_abort(&node, "late-o", "late-group", "late-offsets");
    assert_eq!(code, INVALID_TXN_STATE, "the late commit");
    assert_eq!(stable, (0, -1), "nothing committed, nothing pending");
    let mut conn = support::RawConn::open(&node, "never-added");
    let producer = raw::init(&mut conn, "never-added");
    let code = raw::txn_offset_commit(&mut conn, 3, "never-added", producer, "late-group-2", "late-offsets", 5);
    assert_eq!(code, INVALID_TXN_STATE, "a commit without AddOffsetsToTxn");
    assert_eq!(raw::stable_offset(&mut conn, "late-group-2", "late-offsets"), (0, -1));
    drop(node);

    let node = Runnel::start(&["--transaction-partition-verification-enable", "false"]);
    support::create_topic(&node, "late-offsets", 1);
    let (code, (stable_code, _)) = late_offset_commit_after_an_abort(&node, "late-u", "late-group", "late-offsets");
    assert_eq!(code, 0, "unverified, the late commit is written");
    assert_eq!(stable_code, UNSTABLE_OFFSET_COMMIT, "and stays pending: a hanging transaction");
}

#[test]
fn a_transactional_produce_with_two_producer_ids_is_refused_whole() {
    // Proves Kafka's one-producer rule: a Produce whose transactional batches carry two
    // producer ids answers INVALID_PRODUCER_ID_MAPPING for every partition and appends
    // nothing (the coordinator was asked about the last id only, and a batch of the other
    // opened a transaction nobody would end, holding that partition's last stable offset).
    const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "mixed", 2);
    let mut conn = support::RawConn::open(&node, "mixed");
    let producer = raw::init(&mut conn, "mixed");
    assert_eq!(raw::add_partition(&mut conn, "mixed", producer, "mixed"), 0);
    let codes = raw::produce_each(&mut conn, "mixed", "mixed", &[(producer.0 + 1000, 0), producer]);
    assert_eq!(codes, vec![INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_ID_MAPPING]);
    assert_eq!(read_all(&node, "mixed", 2, "read_uncommitted"), Vec::<String>::new(), "nothing appended");
}

#[test]
fn a_kip_360_init_producer_id_repeated_after_a_lost_answer_gets_the_same_answer() {
    // Proves the retry of InitProducerId with an expected (producer id, epoch) (KIP-360: a
    // producer bumping its own epoch) is answered the same epoch again, as Kafka's
    // lastProducerEpoch check does, not PRODUCER_FENCED (fatal for the client); an older epoch
    // is still fenced.
    use kafka_protocol::messages::{InitProducerIdRequest, ProducerId, TransactionalId};
    const PRODUCER_FENCED: i16 = 90;
    let node = Runnel::start(&[]);
    let mut conn = support::RawConn::open(&node, "kip-360");
    let (pid, epoch) = raw::init(&mut conn, "kip-360");
    let bump = |conn: &mut support::RawConn, expected: (i64, i16)| {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(kafka_protocol::protocol::StrBytes::from_static_str(
                "kip-360",
            ))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(expected.0))
            .with_producer_epoch(expected.1);
        let response = conn.call(4, &request);
        (response.error_code, response.producer_id.0, response.producer_epoch)
    };
    assert_eq!(bump(&mut conn, (pid, epoch)), (0, pid, epoch + 1));
    assert_eq!(bump(&mut conn, (pid, epoch)), (0, pid, epoch + 1), "the same request again: the same answer");
    assert_eq!(bump(&mut conn, (pid, epoch + 1)), (0, pid, epoch + 2), "the next bump");
    assert_eq!(bump(&mut conn, (pid, epoch)).0, PRODUCER_FENCED, "an older session is fenced");
}

#[test]
fn transaction_version_2_adds_partitions_by_producing_and_bumps_the_epoch_on_every_end() {
    // Proves KIP-890 part 2 on the wire: ApiVersions finalizes transaction.version at 2; a
    // Produce v12 batch adds its partition and TxnOffsetCommit v5 the group's offsets partition
    // (no AddPartitionsToTxn, no AddOffsetsToTxn); EndTxn v5 commits and answers epoch + 1, and
    // its retry at the old epoch gets the same answer; a late batch at the old epoch is fenced;
    // the next transaction starts at sequence 0 of the new epoch and its abort answers
    // epoch + 2; an abort with nothing added only bumps; read_committed sees exactly the
    // committed records and the group exactly the committed offset; with
    // `--transaction-version 1` the feature is finalized at 1.
    const PRODUCER_FENCED: i16 = 90;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "tv2", 1);
    let mut conn = support::RawConn::open(&node, "tv2");
    let finalized = |conn: &mut support::RawConn| {
        let response = conn.call(3, &kafka_protocol::messages::ApiVersionsRequest::default());
        assert!(response.finalized_features_epoch >= 0);
        let feature = response.finalized_features.iter().find(|f| &*f.name == "transaction.version");
        feature.map(|f| f.max_version_level)
    };
    assert_eq!(finalized(&mut conn), Some(2));
    let api = support::HttpApi::new(&node);
    let state = |id: &str| api.get(&format!("/v1/transactions/{id}")).json;
    let id = "tv2-id";
    let (pid, e0) = raw::init(&mut conn, id);

    assert_eq!(raw::produce(&mut conn, 12, id, (pid, e0), 0, "tv2", &["a", "b"]), 0, "implicit add");
    assert_eq!(raw::txn_offset_commit(&mut conn, 5, id, (pid, e0), "tv2-group", "tv2", 2), 0);
    let txn = state(id);
    assert_eq!(txn["state"], "Ongoing", "{txn}");
    let partitions = txn["partitions"].to_string();
    assert!(partitions.contains("\"tv2\"") && partitions.contains("__consumer_offsets"), "{txn}");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e0), true), (0, (pid, e0 + 1)), "commit bumps the epoch");
    assert!(support::wait_until(TIMEOUT, || state(id)["state"] == "CompleteCommit"), "markers written");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e0), true), (0, (pid, e0 + 1)), "a retry of the commit");
    assert_ne!(raw::produce(&mut conn, 12, id, (pid, e0), 2, "tv2", &["late"]), 0, "the old epoch is fenced");

    let e1 = e0 + 1;
    assert_eq!(raw::produce(&mut conn, 12, id, (pid, e1), 0, "tv2", &["aborted"]), 0, "sequence 0 of the new epoch");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e1), false), (0, (pid, e1 + 1)), "abort bumps the epoch");
    assert!(support::wait_until(TIMEOUT, || state(id)["state"] == "CompleteAbort"));
    let e2 = e1 + 1;
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e2), false), (0, (pid, e2 + 1)), "an empty abort bumps");
    assert_eq!(state(id)["producer_epoch"], e2 + 1);
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e2 + 5), true).0, PRODUCER_FENCED, "an epoch never handed out");

    let metrics = api.get("/metrics").text;
    let adds = r#"runnel_txn_partition_verifications_total{mode="add",result="ok"} 2"#;
    assert!(
        metrics.contains(adds),
        "two implicit adds counted: {}",
        metrics.lines().filter(|l| l.contains("verifications")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(read_all(&node, "tv2", 1, "read_committed"), ["a", "b"]);
    assert_eq!(read_all(&node, "tv2", 1, "read_uncommitted"), ["a", "b", "aborted"]);
    let (lso, hw) = raw::lso_and_hw(&mut conn, "tv2");
    assert_eq!(lso, hw, "nothing left open");
    let group: BaseConsumer =
        support::client_config(&node, &[("group.id", "tv2-group")]).create().expect("group consumer");
    let mut wanted = TopicPartitionList::new();
    wanted.add_partition("tv2", 0);
    let committed = group.committed_offsets(wanted, TIMEOUT).expect("committed offsets");
    assert_eq!(committed.find_partition("tv2", 0).map(|p| p.offset()), Some(Offset::Offset(2)));
    drop(node);

    let node = Runnel::start(&["--transaction-version", "1"]);
    assert_eq!(finalized(&mut support::RawConn::open(&node, "tv1")), Some(1));
}

#[test]
fn a_transaction_version_2_commit_after_the_coordinator_aborted_it_on_timeout_is_fenced() {
    // Proves what a TV2 producer is told when the coordinator aborted its transaction past
    // `transaction.timeout.ms` (under a bumped epoch) before the producer's own end arrived, as
    // Kafka answers since KAFKA-20785: its commit at the epoch before the bump is PRODUCER_FENCED
    // (recoverable: the client re-initialises), not INVALID_TXN_STATE (fatal); its abort there
    // is answered as the retry of an abort; nothing of the transaction is readable committed.
    const PRODUCER_FENCED: i16 = 90;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "tv2-timeout", 1);
    let mut conn = support::RawConn::open(&node, "tv2-timeout");
    let api = support::HttpApi::new(&node);
    let id = "tv2-timeout-id";
    let (pid, e0) = raw::init_with_timeout(&mut conn, id, 1_000);
    assert_eq!(raw::produce(&mut conn, 12, id, (pid, e0), 0, "tv2-timeout", &["late"]), 0, "implicit add");
    let aborted =
        support::wait_until(TIMEOUT, || api.get(&format!("/v1/transactions/{id}")).json["state"] == "CompleteAbort");
    assert!(aborted, "the coordinator aborts the transaction past its timeout");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e0), true).0, PRODUCER_FENCED, "the commit comes too late");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, e0), false), (0, (pid, e0 + 1)), "an abort is what happened");
    assert_eq!(read_all(&node, "tv2-timeout", 1, "read_committed"), Vec::<String>::new());
    let (lso, hw) = raw::lso_and_hw(&mut conn, "tv2-timeout");
    assert_eq!(lso, hw, "nothing left open");
}

#[test]
fn transaction_version_2_moves_an_exhausted_epoch_to_a_new_producer_id() {
    // Proves KIP-890's epoch overflow end to end: with every end bumping the epoch, the end at
    // epoch 32766 (Kafka's exhausted epoch) answers a fresh producer id at epoch 0, a retry of
    // that end (the old id at 32766) gets the same answer, the old id is fenced, and the new
    // one produces and commits from sequence 0. The ends up to 32766 are empty aborts (each
    // bumps the epoch), the cheapest transition there is; the one at 32766 commits records.
    const EXHAUSTED: i16 = i16::MAX - 1;
    let node = Runnel::start(&[]);
    support::create_topic(&node, "tv2-overflow", 1);
    let mut conn = support::RawConn::open(&node, "tv2-overflow");
    let id = "tv2-overflow-id";
    let (pid, mut epoch) = raw::init(&mut conn, id);
    let started = Instant::now();
    while epoch < EXHAUSTED {
        let (code, answer) = raw::end_v5(&mut conn, id, (pid, epoch), false);
        assert_eq!((code, answer), (0, (pid, epoch + 1)), "empty abort at epoch {epoch}");
        epoch += 1;
    }
    eprintln!("{EXHAUSTED} empty aborts in {:?}", started.elapsed());
    // A real transaction at the exhausted epoch: its markers go out at i16::MAX.
    assert_eq!(raw::produce(&mut conn, 12, id, (pid, EXHAUSTED), 0, "tv2-overflow", &["last"]), 0);
    let (code, (next_pid, next_epoch)) = raw::end_v5(&mut conn, id, (pid, EXHAUSTED), true);
    assert_eq!(code, 0);
    assert!(next_pid != pid && next_pid >= 0 && next_epoch == 0, "a fresh producer id at 0: {next_pid}/{next_epoch}");
    let api = support::HttpApi::new(&node);
    let completed = support::wait_until(TIMEOUT, || {
        let txn = api.get(&format!("/v1/transactions/{id}")).json;
        txn["state"] == "CompleteCommit" && txn["producer_id"] == next_pid
    });
    assert!(completed, "the commit completes on the new id");
    assert_eq!(raw::end_v5(&mut conn, id, (pid, EXHAUSTED), true), (0, (next_pid, 0)), "the retry's answer");
    assert_ne!(raw::produce(&mut conn, 12, id, (pid, EXHAUSTED), 1, "tv2-overflow", &["old"]), 0, "the old id");
    assert_eq!(raw::produce(&mut conn, 12, id, (next_pid, 0), 0, "tv2-overflow", &["new"]), 0, "the new id");
    assert_eq!(raw::end_v5(&mut conn, id, (next_pid, 0), true), (0, (next_pid, 1)), "commit on the new id");
    assert_eq!(read_all(&node, "tv2-overflow", 1, "read_committed"), ["last", "new"]);
    let (lso, hw) = raw::lso_and_hw(&mut conn, "tv2-overflow");
    assert_eq!(lso, hw, "nothing left open");
}

#[test]
fn a_partition_keeps_at_most_max_producers_evicting_idle_ones_and_refusing_past_open_transactions() {
    // Proves `--max-producers-per-partition` (pushed past by a client): a fourth producer on a
    // partition bounded to three evicts the idle one written longest ago, whose retry is then
    // appended again (no longer recognised), while the others' retries are still answered with
    // their offsets; producers with open transactions are never evicted, so with three of them
    // a new producer's batch is refused with POLICY_VIOLATION and appends nothing, until a
    // commit leaves one idle.
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    const POLICY_VIOLATION: i16 = 44;
    let node = Runnel::start(&["--max-producers-per-partition", "3"]);
    support::create_topic(&node, "bounded", 1);
    let mut conn = support::RawConn::open(&node, "bounded");
    let new_producer = |conn: &mut support::RawConn| {
        let request = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
        let response = conn.call(4, &request);
        assert_eq!(response.error_code, 0, "InitProducerId");
        response.producer_id.0
    };
    let idempotent = |conn: &mut support::RawConn, pid: i64, value: &str| {
        let mut builder = runnel::log::records::BatchBuilder::new(runnel::log::Compression::None).producer(pid, 0, 0);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
        builder.push(now as i64, None, Some(value.as_bytes()), &[]);
        let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            TopicProduceData::default().with_name(TopicName(StrBytes::from_static_str("bounded"))).with_partition_data(
                vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(builder.build().expect("batch").into_bytes()))],
            ),
        ]);
        let response = conn.call(9, &request);
        let partition = &response.responses[0].partition_responses[0];
        (partition.error_code, partition.base_offset)
    };

    let pids: Vec<i64> = (0..4).map(|_| new_producer(&mut conn)).collect();
    for (i, pid) in pids.iter().enumerate() {
        assert_eq!(idempotent(&mut conn, *pid, "v"), (0, i as i64), "producer {i}");
    }
    assert_eq!(idempotent(&mut conn, pids[3], "v"), (0, 3), "a retry of a kept producer");
    assert_eq!(idempotent(&mut conn, pids[1], "v"), (0, 1), "a retry of a kept producer");
    assert_eq!(idempotent(&mut conn, pids[0], "v"), (0, 4), "the evicted producer's retry is appended again");

    let mut open = Vec::new();
    for id in ["bounded-t0", "bounded-t1", "bounded-t2"] {
        let producer = raw::init(&mut conn, id);
        assert!(support::wait_until(TIMEOUT, || raw::add_partition(&mut conn, id, producer, "bounded") == 0));
        assert_eq!(raw::produce(&mut conn, 9, id, producer, 0, "bounded", &["in-txn"]), 0, "{id}");
        open.push((id, producer));
    }
    let (lso, end) = raw::lso_and_hw(&mut conn, "bounded");
    let late = new_producer(&mut conn);
    assert_eq!(idempotent(&mut conn, late, "refused").0, POLICY_VIOLATION, "three open transactions");
    assert_eq!(raw::lso_and_hw(&mut conn, "bounded"), (lso, end), "nothing appended");

    let (id, producer) = open[0];
    assert_eq!(raw::end(&mut conn, id, producer, true), 0, "commit");
    let api = support::HttpApi::new(&node);
    let completed = support::wait_until(TIMEOUT, || {
        api.get(&format!("/v1/transactions/{id}")).json["state"].as_str() == Some("CompleteCommit")
    });
    assert!(completed, "the commit's marker is written");
    assert_eq!(idempotent(&mut conn, late, "admitted").0, 0, "the committed producer is idle and evicted");
}

#[test]
fn transaction_state_log_settings_size_the_topic_and_idle_ids_expire() {
    // Proves `--transaction-state-log-num-partitions` sizes `__transaction_state` and
    // `--transactional-id-expiration-ms` makes the coordinator forget an idle id (its state is
    // tombstoned: describing it is then 404, and a new InitProducerId starts it over at epoch 0
    // with a new producer id).
    let node =
        Runnel::start(&["--transaction-state-log-num-partitions", "3", "--transactional-id-expiration-ms", "1000"]);
    let mut conn = support::RawConn::open(&node, "expiring");
    let (first, epoch) = raw::init(&mut conn, "expiring-id");
    assert_eq!(epoch, 0);
    let client: BaseConsumer = support::client_config(&node, &[]).create().expect("client");
    let metadata = client.fetch_metadata(Some("__transaction_state"), TIMEOUT).expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 3, "transaction.state.log.num.partitions");
    let api = support::HttpApi::new(&node);
    let forgotten = support::wait_until(TIMEOUT, || api.get("/v1/transactions/expiring-id").status == 404);
    assert!(forgotten, "an id idle past transactional.id.expiration.ms is forgotten");
    let (again, epoch) = raw::init(&mut conn, "expiring-id");
    assert_eq!(epoch, 0, "a forgotten id starts over");
    assert_ne!(again, first, "with a new producer id");
}
