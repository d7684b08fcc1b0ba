//! Committed offsets with librdkafka (through `rdkafka`) against the real `runnel` binary:
//! consumers without a group membership (`assign()`) commit and fetch offsets, which live in
//! `__consumer_offsets` and survive a clean restart and a SIGKILL. Also every supported
//! version of FindCoordinator, OffsetCommit, OffsetFetch and OffsetDelete, sent raw, and a
//! subscribed group resuming at its committed offset after a broker restart.
//! Every test starts its own node; waits are on conditions with deadlines, never fixed sleeps.

mod support;

use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use support::{client_config, create_topic, group_consumer, RawConn, Runnel};

/// Longest wait for any one step (a debug build on a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(30);

fn new_consumer(node: &Runnel, group: &str) -> BaseConsumer {
    client_config(node, &[("group.id", group), ("enable.auto.commit", "false"), ("enable.auto.offset.store", "false")])
        .create()
        .expect("consumer")
}

fn offsets(topic: &str, offsets: &[(i32, i64)]) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for (partition, offset) in offsets {
        list.add_partition_offset(topic, *partition, Offset::Offset(*offset)).unwrap();
    }
    list
}

fn committed(consumer: &BaseConsumer, topic: &str, partitions: &[i32]) -> Vec<(i32, Offset)> {
    let mut wanted = TopicPartitionList::new();
    for p in partitions {
        wanted.add_partition(topic, *p);
    }
    let list = consumer.committed_offsets(wanted, DEADLINE).expect("committed offsets");
    let mut found: Vec<(i32, Offset)> = list.elements().iter().map(|e| (e.partition(), e.offset())).collect();
    found.sort_by_key(|(p, _)| *p);
    found
}

#[test]
fn assign_only_commits_survive_restart_and_kill9() {
    // Proves commits of a group-less consumer are stored durably and fetched back after a
    // clean restart and after a SIGKILL, per group, with unknown partitions reported as Invalid.
    let mut node = Runnel::start(&[]);
    create_topic(&node, "orders", 3);

    let consumer = new_consumer(&node, "billing");
    consumer.assign(&offsets("orders", &[(0, 0), (1, 0), (2, 0)])).unwrap();
    consumer.commit(&offsets("orders", &[(0, 5), (1, 7)]), CommitMode::Sync).expect("commit");
    consumer.commit(&offsets("orders", &[(0, 6)]), CommitMode::Sync).expect("second commit");
    let other = new_consumer(&node, "audit");
    other.commit(&offsets("orders", &[(2, 42)]), CommitMode::Sync).expect("commit of another group");
    let expected_billing = vec![(0, Offset::Offset(6)), (1, Offset::Offset(7)), (2, Offset::Invalid)];
    assert_eq!(committed(&consumer, "orders", &[0, 1, 2]), expected_billing);
    drop(consumer);
    drop(other);

    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let consumer = new_consumer(&node, "billing");
    assert_eq!(committed(&consumer, "orders", &[0, 1, 2]), expected_billing);
    let other = new_consumer(&node, "audit");
    assert_eq!(
        committed(&other, "orders", &[0, 1, 2]),
        vec![(0, Offset::Invalid), (1, Offset::Invalid), (2, Offset::Offset(42))]
    );
    consumer.commit(&offsets("orders", &[(1, 8)]), CommitMode::Sync).expect("commit after restart");
    drop(consumer);
    drop(other);

    node.kill9();
    node.restart();
    let consumer = new_consumer(&node, "billing");
    assert_eq!(
        committed(&consumer, "orders", &[0, 1, 2]),
        vec![(0, Offset::Offset(6)), (1, Offset::Offset(8)), (2, Offset::Invalid)]
    );
}

#[test]
fn commit_to_an_unknown_topic_fails() {
    // Proves a commit naming a topic the cluster does not know is refused, not stored.
    let node = Runnel::start(&[]);
    let consumer = new_consumer(&node, "billing");
    let error = consumer.commit(&offsets("no-such-topic", &[(0, 1)]), CommitMode::Sync);
    assert!(error.is_err(), "{error:?}");
}

#[test]
fn any_committed_offset_is_stored_and_the_lag_views_stay_up() {
    // Proves a commit of any offset is stored and answered as Kafka does (it accepts what it is
    // given), and the views computing lag from it (/metrics, /v1/groups, a group's detail)
    // still answer: before, i64::MIN and i64::MAX made their arithmetic overflow (a panic in a
    // debug build, every scrape a 500 until the offsets went away).
    let node = Runnel::start(&[]);
    create_topic(&node, "extreme", 3);
    let mut conn = RawConn::open(&node, "extreme-offsets");
    let _ = conn.call(1, &FindCoordinatorRequest::default().with_key(name("extreme")));
    let offsets = [i64::MIN, i64::MAX, -5];
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, o)| OffsetCommitRequestPartition::default().with_partition_index(p as i32).with_committed_offset(*o))
        .collect();
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(name("extreme")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(name("extreme")))
            .with_partitions(partitions)]);
    let committed = support::wait_until(Duration::from_secs(30), || {
        let response = conn.call(9, &commit);
        response.topics[0].partitions.iter().all(|p| p.error_code == 0)
    });
    assert!(committed, "the commit of extreme offsets was refused");
    let http = support::HttpApi::new(&node);
    for path in ["/metrics", "/v1/groups", "/v1/groups/extreme"] {
        let answer = http.get(path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.text);
    }
    let detail = http.get("/v1/groups/extreme");
    assert!(detail.text.contains(&i64::MAX.to_string()), "{}", detail.text);
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;
const INVALID_GROUP_ID: i16 = 24;

#[test]
fn every_supported_version_of_the_offset_apis() {
    // Proves FindCoordinator v0-6, OffsetCommit v2-9, OffsetFetch v1-9 and OffsetDelete v0
    // answer correctly and encode only fields their version has.
    let node = Runnel::start(&[]);
    create_topic(&node, "events", 2);
    let mut conn = RawConn::open(&node, "runnel-kafka-offsets");
    let port = node.kafka_addr.port() as i32;

    for version in 0..=6i16 {
        let request = FindCoordinatorRequest::default();
        let response = if version >= 4 {
            let request = request.with_coordinator_keys(vec![name("g1"), name("")]);
            let response = conn.call(version, &request);
            assert_eq!(response.coordinators.len(), 2);
            assert_eq!(response.coordinators[0].error_code, 0, "v{version}");
            assert_eq!(response.coordinators[0].port, port);
            assert_ne!(response.coordinators[1].error_code, 0, "an empty group id is refused");
            response
        } else {
            let response = conn.call(version, &request.with_key(name("g1")));
            assert_eq!((response.error_code, response.port), (0, port), "v{version}");
            response
        };
        drop(response);
    }
    let transactional =
        conn.call(4, &FindCoordinatorRequest::default().with_key_type(1).with_coordinator_keys(vec![name("tx")]));
    assert_eq!(
        (transactional.coordinators[0].error_code, transactional.coordinators[0].port),
        (0, port),
        "a transactional id's coordinator (key type 1)"
    );
    // As clients do: FindCoordinator loads the group's partition before the group's requests
    // (on a partition not loaded yet they answer COORDINATOR_LOAD_IN_PROGRESS).
    let _ = conn.call(1, &FindCoordinatorRequest::default().with_key(name("raw")));

    for version in 2..=9i16 {
        let partitions = vec![
            OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(version as i64 * 10)
                .with_committed_leader_epoch(if version >= 6 { 0 } else { -1 })
                .with_committed_metadata(Some(name("meta"))),
            OffsetCommitRequestPartition::default()
                .with_partition_index(1)
                .with_committed_offset(1)
                .with_committed_metadata(Some(name(&"x".repeat(5000)))),
            OffsetCommitRequestPartition::default().with_partition_index(7).with_committed_offset(1),
        ];
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(name("raw")))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default().with_name(TopicName(name("events"))).with_partitions(partitions),
                OffsetCommitRequestTopic::default().with_name(TopicName(name("missing"))).with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
                ]),
            ]);
        let response = conn.call(version, &request);
        let codes: Vec<Vec<i16>> =
            response.topics.iter().map(|t| t.partitions.iter().map(|p| p.error_code).collect()).collect();
        assert_eq!(
            codes,
            vec![vec![0, OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION], vec![UNKNOWN_TOPIC_OR_PARTITION]],
            "OffsetCommit v{version}"
        );
    }
    let empty_group = conn.call(
        9,
        &OffsetCommitRequest::default().with_generation_id_or_member_epoch(-1).with_topics(vec![
            OffsetCommitRequestTopic::default().with_name(TopicName(name("events"))).with_partitions(vec![
                OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
            ]),
        ]),
    );
    assert_eq!(empty_group.topics[0].partitions[0].error_code, INVALID_GROUP_ID);

    // Committed by v9 last: offset 90, leader epoch 0, metadata "meta"; partition 1 has none.
    for version in 1..=9i16 {
        let rows: Vec<(i32, i64, i32, Option<String>, i16)> = if version >= 8 {
            let request = OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default().with_group_id(GroupId(name("raw"))).with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(name("events")))
                        .with_partition_indexes(vec![0, 1]),
                ])),
                OffsetFetchRequestGroup::default().with_group_id(GroupId(name("raw"))).with_topics(None),
            ]);
            let response = conn.call(version, &request);
            assert_eq!(response.groups.len(), 2);
            let all = &response.groups[1].topics;
            assert_eq!(all.len(), 1, "null topics lists every committed partition");
            assert_eq!(all[0].partitions.len(), 1);
            response.groups[0].topics[0]
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_ref().map(|m| m.to_string()),
                        p.error_code,
                    )
                })
                .collect()
        } else {
            let request = OffsetFetchRequest::default().with_group_id(GroupId(name("raw"))).with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(name("events")))
                    .with_partition_indexes(vec![0, 1]),
            ]));
            let response = conn.call(version, &request);
            assert_eq!(response.error_code, 0);
            response.topics[0]
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_ref().map(|m| m.to_string()),
                        p.error_code,
                    )
                })
                .collect()
        };
        let epoch = if version >= 5 { 0 } else { -1 };
        assert_eq!(
            rows,
            vec![(0, 90, epoch, Some("meta".to_string()), 0), (1, -1, -1, Some(String::new()), 0)],
            "OffsetFetch v{version}"
        );
    }

    let deleted = conn.call(
        0,
        &OffsetDeleteRequest::default().with_group_id(GroupId(name("raw"))).with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(name("events")))
                .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
        ]),
    );
    assert_eq!(deleted.error_code, 0);
    assert_eq!(deleted.topics[0].partitions[0].error_code, 0);
    let after = conn.call(7, &OffsetFetchRequest::default().with_group_id(GroupId(name("raw"))).with_topics(None));
    assert!(after.topics.is_empty(), "{after:?}");
}

/// Polls until `count` records arrived or the deadline passes; returns their (partition, offset).
fn poll_records(consumer: &BaseConsumer, count: usize) -> Vec<(i32, i64)> {
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while seen.len() < count {
        assert!(Instant::now() < deadline, "only {} of {count} records within {DEADLINE:?}", seen.len());
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            seen.push((message.partition(), message.offset()));
        }
    }
    seen
}

#[test]
fn a_group_resumes_at_its_committed_offset_after_a_broker_restart() {
    // Proves a subscribed (group-managed) consumer's commit survives a broker restart: the
    // group's next consumer starts at the committed offset, not at auto.offset.reset=earliest.
    let mut node = Runnel::start(&[]);
    create_topic(&node, "ledger", 1);
    let producer: BaseProducer = client_config(&node, &[]).create().expect("producer");
    for i in 0..10 {
        producer.send(BaseRecord::<(), _>::to("ledger").payload(&format!("record {i}"))).expect("send");
    }
    producer.flush(DEADLINE).expect("flush");
    drop(producer);

    let consumer = group_consumer(&node, "resume", "ledger");
    let first = poll_records(&consumer, 4);
    assert_eq!(first, (0..4).map(|o| (0, o)).collect::<Vec<_>>());
    // Processed four records: commit the next position, 4, with the member's generation.
    consumer.commit(&offsets("ledger", &[(0, 4)]), CommitMode::Sync).expect("group commit");
    drop(consumer);

    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let consumer = group_consumer(&node, "resume", "ledger");
    let resumed = poll_records(&consumer, 6);
    assert_eq!(resumed, (4..10).map(|o| (0, o)).collect::<Vec<_>>());
}

#[test]
fn offsets_of_groups_without_members_expire_after_offsets_retention_minutes() {
    // Proves offsets.retention.minutes end to end: with retention 0 and fast housekeeping, an
    // empty group's commits disappear (and stay gone after a restart), as Kafka expires them.
    let mut node = Runnel::start(&["--offsets-retention-minutes", "0", "--housekeeping-interval-ms", "50"]);
    create_topic(&node, "ephemeral", 1);
    let consumer = new_consumer(&node, "gone-soon");
    consumer.commit(&offsets("ephemeral", &[(0, 3)]), CommitMode::Sync).expect("commit");
    assert!(
        support::wait_until(std::time::Duration::from_secs(30), || committed(&consumer, "ephemeral", &[0])
            == vec![(0, Offset::Invalid)]),
        "the committed offset never expired"
    );
    drop(consumer);
    // The commit was really stored, then expired: in __consumer_offsets the group's key has a
    // value and, after it, a tombstone.
    let reader = new_consumer(&node, "offsets-reader");
    let mut all = TopicPartitionList::new();
    for p in 0..50 {
        all.add_partition_offset("__consumer_offsets", p, Offset::Beginning).unwrap();
    }
    reader.assign(&all).unwrap();
    let mut values: Vec<bool> = Vec::new();
    let found = support::wait_until(std::time::Duration::from_secs(30), || {
        while let Some(Ok(message)) = reader.poll(std::time::Duration::from_millis(50)) {
            let key = message.key().unwrap_or_default();
            if key.windows(b"gone-soon".len()).any(|w| w == b"gone-soon") && key.ends_with(&0i32.to_be_bytes()) {
                values.push(message.payload().is_some());
            }
        }
        values.len() >= 2
    });
    assert!(found && values[0] && !values[values.len() - 1], "commit then tombstone, got {values:?}");
    assert!(node.terminate(), "clean shutdown");
    node.restart();
    let consumer = new_consumer(&node, "gone-soon");
    assert_eq!(committed(&consumer, "ephemeral", &[0]), vec![(0, Offset::Invalid)]);
}

#[test]
fn an_empty_consumer_group_goes_with_its_last_expired_offsets() {
    // Proves a classic group that emptied (its member left) is deleted once its offsets expire
    // (Kafka's cleanupGroupMetadata: an Empty group without offsets is Dead): ListGroups no
    // longer lists it. Before, its offsets went but the Empty group stayed listed forever.
    let node = Runnel::start(&["--offsets-retention-minutes", "0", "--housekeeping-interval-ms", "50"]);
    create_topic(&node, "left-behind", 1);
    let consumer = group_consumer(&node, "leaving", "left-behind");
    let assigned = support::wait_until(DEADLINE, || {
        consumer.poll(Duration::from_millis(100));
        consumer.assignment().is_ok_and(|a| a.count() == 1)
    });
    assert!(assigned, "the member joins and gets the partition");
    consumer.commit(&offsets("left-behind", &[(0, 0)]), CommitMode::Sync).expect("commit");
    drop(consumer); // LeaveGroup: the group is Empty, and stored so
    let lister = new_consumer(&node, "lister");
    let listed = |group: &str| {
        lister
            .fetch_group_list(None, DEADLINE)
            .map(|list| list.groups().iter().any(|g| g.name() == group))
            .unwrap_or(true)
    };
    assert!(support::wait_until(DEADLINE, || !listed("leaving")), "the emptied group is never deleted");
    let asker = new_consumer(&node, "leaving");
    assert_eq!(committed(&asker, "left-behind", &[0]), vec![(0, Offset::Invalid)], "its offsets went with it");
}

fn admin(node: &Runnel) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    client_config(node, &[]).create().expect("admin client")
}

fn admin_options() -> rdkafka::admin::AdminOptions {
    rdkafka::admin::AdminOptions::new().operation_timeout(Some(DEADLINE)).request_timeout(Some(DEADLINE))
}

#[test]
fn offsets_topic_created_early_with_another_count_keeps_groups_working() {
    // Regression (issue 10): the offsets store mapped groups over a constant 50 partitions and
    // the coordinator lookup over the topic's actual count, so a `__consumer_offsets` a client
    // created first with 3 partitions left group "early-group" (50 → 43, 3 → 1) with
    // NOT_COORDINATOR forever. Also proves the changes that would break the topic are refused
    // with POLICY_VIOLATION (deletion, more partitions, cleanup.policy=delete, creating it with
    // cleanup.policy=delete) and the group keeps working after each.
    use rdkafka::admin::{NewPartitions, NewTopic, TopicReplication};
    use rdkafka::types::RDKafkaErrorCode;
    let node = Runnel::start(&[]);
    let admin = admin(&node);
    let options = admin_options();
    let delete_policy =
        NewTopic::new("__consumer_offsets", 3, TopicReplication::Fixed(1)).set("cleanup.policy", "delete");
    let created = support::block_on(admin.create_topics(&[delete_policy], &options)).expect("CreateTopics");
    assert_eq!(created[0].as_ref().unwrap_err().1, RDKafkaErrorCode::PolicyViolation);
    create_topic(&node, "__consumer_offsets", 3);
    create_topic(&node, "data", 2);

    let consumer = new_consumer(&node, "early-group");
    let commit_and_check = |value: i64| {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match consumer.commit(&offsets("data", &[(0, value), (1, value + 1)]), CommitMode::Sync) {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "commit never succeeded: {e}"),
            }
        }
        assert_eq!(
            committed(&consumer, "data", &[0, 1]),
            vec![(0, Offset::Offset(value)), (1, Offset::Offset(value + 1))]
        );
    };
    commit_and_check(5);

    let deleted = support::block_on(admin.delete_topics(&["__consumer_offsets"], &options)).expect("DeleteTopics");
    assert_eq!(deleted[0].as_ref().unwrap_err().1, RDKafkaErrorCode::PolicyViolation);
    commit_and_check(6);

    let grown = NewPartitions::new("__consumer_offsets", 6);
    let grown = support::block_on(admin.create_partitions(&[grown], &options)).expect("CreatePartitions");
    assert_eq!(grown[0].as_ref().unwrap_err().1, RDKafkaErrorCode::PolicyViolation);
    commit_and_check(7);

    // rdkafka 0.38 does not surface AlterConfigs errors: raw requests, legacy and incremental.
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::incremental_alter_configs_request as incremental;
    use kafka_protocol::messages::{AlterConfigsRequest, IncrementalAlterConfigsRequest};
    const POLICY_VIOLATION: i16 = 44;
    let mut conn = RawConn::open(&node, "configs");
    let legacy = |configs: &[(&str, &str)]| {
        AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name("__consumer_offsets"))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| AlterableConfig::default().with_name(name(k)).with_value(Some(name(v))))
                    .collect(),
            )])
    };
    // A full replacement without cleanup.policy would fall back to the broker default, delete.
    for configs in [&[("cleanup.policy", "delete")][..], &[("retention.ms", "1000")][..]] {
        let response = conn.call(1, &legacy(configs));
        assert_eq!(response.responses[0].error_code, POLICY_VIOLATION, "{configs:?}");
    }
    let set_delete =
        IncrementalAlterConfigsRequest::default().with_resources(vec![incremental::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name("__consumer_offsets"))
            .with_configs(vec![incremental::AlterableConfig::default()
                .with_name(name("cleanup.policy"))
                .with_config_operation(0)
                .with_value(Some(name("compact,delete")))])]);
    assert_eq!(conn.call(1, &set_delete).responses[0].error_code, POLICY_VIOLATION);
    // A change that keeps it compacted is fine.
    let response = conn.call(1, &legacy(&[("cleanup.policy", "compact"), ("segment.bytes", "104857600")]));
    assert_eq!(response.responses[0].error_code, 0);
    commit_and_check(8);

    let metadata = consumer.fetch_metadata(Some("__consumer_offsets"), DEADLINE).expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 3, "still the count groups map over");
}
