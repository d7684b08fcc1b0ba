//! Consumer group assignors uploaded as WASM at runtime (`PUT /v1/assignors/{name}`) and chosen
//! by librdkafka 2.12 members with `group.protocol=consumer` + `group.remote.assignor`, against
//! the real `runnel` binary: the partitions each member reports owning (from its own rebalance
//! callbacks) equal the plan the example guest computes natively from the same members,
//! partition sizes and racks; a redeploy changes the next assignment; hostile assignors (trap,
//! spin past the deadline, memory bomb, invalid plan, error) fall back to the default assignor
//! with the reason shown while the group keeps consuming; a deleted assignor is refused
//! UNSUPPORTED_ASSIGNOR. Waits are on conditions with deadlines, never fixed sleeps.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, DescribeLogDirsRequest, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientContext;
use runnel_sdk::assign::Group;
use serde_json::{json, Value};
use support::{client_config, create_topic, wait_until, HttpApi, RawConn, Runnel};

const DEADLINE: Duration = Duration::from_secs(90);
const UNSUPPORTED_ASSIGNOR: i16 = 112;

/// The partitions each member owns, as its rebalance callbacks report them.
type Owned = Arc<Mutex<BTreeMap<String, BTreeSet<(String, i32)>>>>;

/// The ledger, even after a failed assertion elsewhere poisoned it (a panic inside a librdkafka
/// callback could not unwind).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

struct Tracked {
    name: String,
    owned: Owned,
}

impl ClientContext for Tracked {}

impl ConsumerContext for Tracked {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut owned = lock(&self.owned);
        let mine = owned.entry(self.name.clone()).or_default();
        match rebalance {
            Rebalance::Assign(list) => {
                mine.extend(list.elements().iter().map(|e| (e.topic().to_string(), e.partition())))
            }
            Rebalance::Revoke(list) => {
                for e in list.elements() {
                    mine.remove(&(e.topic().to_string(), e.partition()));
                }
            }
            Rebalance::Error(_) => {}
        }
    }
}

/// A member polling on its own thread until dropped; counts what it reads.
struct Polling {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    consumed: Arc<AtomicU64>,
}

impl Polling {
    fn start(node: &Runnel, owned: &Owned, name: &str, topic: &str, extra: &[(&str, &str)]) -> Polling {
        let mut settings = vec![
            ("group.protocol", "consumer"),
            ("group.id", "g"),
            ("client.id", name),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ];
        settings.extend_from_slice(extra);
        let consumer: BaseConsumer<Tracked> = client_config(node, &settings)
            .create_with_context(Tracked { name: name.to_string(), owned: owned.clone() })
            .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let consumed = Arc::new(AtomicU64::new(0));
        let (stop2, consumed2) = (stop.clone(), consumed.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
                    consumed2.fetch_add(1, Ordering::Relaxed);
                }
            }
            consumer.close_queue().ok();
        });
        Polling { stop, thread: Some(thread), consumed }
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn deploy(api: &HttpApi, name: &str, package: &str, config: Value) -> support::HttpAnswer {
    let mut body = config;
    body["module_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(support::guest_component(package)));
    api.send_json("PUT", &format!("/v1/assignors/{name}"), None, &body)
}

/// `group`'s view over HTTP (`None` until the coordinator knows it).
fn group_view(api: &HttpApi, group: &str) -> Option<Value> {
    let answer = api.get(&format!("/v1/groups/{group}"));
    (answer.status == 200).then_some(answer.json)
}

/// client.id → member id, from the group's view.
fn member_ids(view: &Value) -> BTreeMap<String, String> {
    view["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| (m["client_id"].as_str().unwrap().to_string(), m["member_id"].as_str().unwrap().to_string()))
        .collect()
}

/// Each partition's size in bytes as the node reports it (DescribeLogDirs).
fn partition_sizes(node: &Runnel, topic: &str, partitions: i32) -> Vec<u64> {
    let mut conn = RawConn::open(node, "assignor-test");
    let request = DescribeLogDirsRequest::default().with_topics(Some(vec![DescribableLogDirTopic::default()
        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions((0..partitions).collect())]));
    let answer = conn.call(4, &request);
    let mut sizes = vec![0; partitions as usize];
    for p in &answer.results[0].topics[0].partitions {
        sizes[p.partition_index as usize] = p.partition_size as u64;
    }
    sizes
}

/// `counts[p]` records of 1 KiB to partition p of `topic`.
fn fill(node: &Runnel, topic: &str, counts: &[usize]) {
    let producer: BaseProducer = client_config(node, &[("linger.ms", "5")]).create().expect("producer");
    let value = vec![b'x'; 1024];
    for (p, &count) in counts.iter().enumerate() {
        for _ in 0..count {
            producer.send(BaseRecord::<(), _>::to(topic).partition(p as i32).payload(&value)).expect("send");
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn snapshot(owned: &Owned) -> String {
    format!("{:?}", *lock(owned))
}

fn owned_by(owned: &Owned, name: &str, topic: &str) -> BTreeSet<i32> {
    lock(owned).get(name).into_iter().flatten().filter(|(t, _)| t == topic).map(|(_, p)| *p).collect()
}

/// The uploaded rack-aware, size-balancing example decides the members' partitions: what they
/// report equals its native result for the same members, sizes and racks. A redeploy (the
/// lopsided test assignor as version 2) decides the next assignment, the one a new member
/// brings.
#[test]
fn an_uploaded_assignor_chosen_by_name_decides_what_members_own_and_a_redeploy_the_next() {
    // Not beside this binary's cluster test: see `support::cluster::one_at_a_time`.
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = Runnel::start(&["--rack", "rack-a", "--group-consumer-heartbeat-interval-ms", "500"]);
    let api = HttpApi::new(&node);
    const TOPIC: &str = "sized";
    create_topic(&node, TOPIC, 6);
    // Sizes out of partition order, so a size-driven plan differs from a positional one.
    fill(&node, TOPIC, &[40, 300, 80, 250, 10, 200]);

    let answer = deploy(&api, "by-size", "runnel-example-assignor", json!({}));
    assert_eq!(answer.status, 201, "{}", answer.text);
    assert_eq!(answer.json["version"], 1);

    let owned: Owned = Arc::default();
    let select = [("group.remote.assignor", "by-size")];
    let a = Polling::start(&node, &owned, "a", TOPIC, &[select[0], ("client.rack", "rack-a")]);
    let b = Polling::start(&node, &owned, "b", TOPIC, &[select[0], ("client.rack", "rack-b")]);
    let mut view = Value::Null;
    let settled = wait_until(DEADLINE, || {
        let Some(v) = group_view(&api, "g") else { return false };
        view = v;
        let ids = member_ids(&view);
        let stable = view["state"] == "Stable" && ids.len() == 2 && view["assignor"]["name"] == "by-size";
        stable && owned_by(&owned, "a", TOPIC).len() + owned_by(&owned, "b", TOPIC).len() == 6
    });
    assert!(settled, "the group never settled on by-size: {view:#}");
    assert_eq!(view["assignor"]["version"], 1, "{view:#}");
    assert!(view["assignor"]["error"].is_null(), "{view:#}");

    let ids = member_ids(&view);
    let sizes = partition_sizes(&node, TOPIC, 6);
    let expected = rack_aware_plan(
        TOPIC,
        &[(ids["a"].as_str(), "rack-a"), (ids["b"].as_str(), "rack-b")],
        &sizes,
        &vec![vec!["rack-a".to_string()]; 6],
    );
    for (client, member_id) in &ids {
        let want = expected.get(member_id).cloned().unwrap_or_default();
        assert_eq!(owned_by(&owned, client, TOPIC), want, "{client} (sizes {sizes:?}): {view:#}");
    }

    // Version 2: every partition to the member whose id sorts last, from the next epoch on.
    let answer = deploy(&api, "by-size", "runnel-guest-badassignor", json!({}));
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["version"], 2);
    let c = Polling::start(&node, &owned, "c", TOPIC, &select);
    let settled = wait_until(DEADLINE, || {
        let Some(v) = group_view(&api, "g") else { return false };
        view = v;
        let ids = member_ids(&view);
        if ids.len() != 3 || view["assignor"]["version"] != 2 {
            return false;
        }
        let last = ids.iter().max_by(|x, y| x.1.cmp(y.1)).map(|(client, _)| client.clone()).unwrap();
        ids.keys().all(|client| owned_by(&owned, client, TOPIC).len() == if *client == last { 6 } else { 0 })
    });
    assert!(settled, "version 2 never decided the assignment: {view:#} owned {}", snapshot(&owned));
    assert_eq!(view["assignor"]["name"], "by-size");

    let described = api.get("/v1/assignors/by-size").json;
    assert_eq!(described["version"], 2);
    assert!(described["runs"].as_u64().unwrap() >= 1, "{described:#}");
    assert_eq!(described["nodes"][0]["guest_name"], "bad-assignor", "{described:#}");
    drop((a, b, c));
}

/// Every way an assignor can fail makes the group fall back to the default assignor, with the
/// reason on the group and the assignor, and the group consumes everything regardless; a
/// deleted assignor is refused to new members.
#[test]
fn hostile_assignors_fall_back_to_the_default_and_the_group_keeps_consuming() {
    // Not beside this binary's cluster test: see `support::cluster::one_at_a_time`.
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let api = HttpApi::new(&node);
    let answer =
        deploy(&api, "bad", "runnel-guest-badassignor", json!({"call_timeout_ms": 200, "memory_bytes": 16 << 20}));
    assert_eq!(answer.status, 201, "{}", answer.text);

    let cases = [
        ("trap", "trapped"),
        ("spin", "deadline"),
        ("membomb", "memory limit"),
        ("invalid", "more than once"),
        ("error", "refused by request"),
    ];
    let owned: Owned = Arc::default();
    for (mode, reason) in cases {
        let topic = format!("{mode}-orders");
        let group = format!("g-{mode}");
        create_topic(&node, &topic, 2);
        fill(&node, &topic, &[5, 5]);
        let member =
            Polling::start(&node, &owned, mode, &topic, &[("group.id", &group), ("group.remote.assignor", "bad")]);
        let mut view = Value::Null;
        let fell_back = wait_until(DEADLINE, || {
            view = group_view(&api, &group).unwrap_or(Value::Null);
            view["assignor"]["name"] == "uniform" && member.consumed.load(Ordering::Relaxed) == 10
        });
        assert!(fell_back, "{mode}: no fallback or not everything consumed: {view:#}");
        let error = view["assignor"]["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("bad: ") && error.contains(reason), "{mode}: {error:?} should name {reason:?}");
    }

    let described = api.get("/v1/assignors/bad").json;
    assert_eq!(described["failures"], cases.len() as u64, "{described:#}");
    assert_eq!(described["runs"], 0, "{described:#}");
    assert!(described["last_error"].as_str().unwrap().contains("refused by request"), "{described:#}");
    let failed = api.metric_sum("runnel_assignor_runs_total");
    assert_eq!(failed, cases.len() as f64);

    // Deleted: a new member asking for it is refused; the built-ins stay listed.
    assert_eq!(api.delete("/v1/assignors/bad").status, 204);
    assert_eq!(api.get("/v1/assignors/bad").status, 404);
    let list = api.get("/v1/assignors").json;
    assert_eq!(list["builtin"], json!(["uniform", "range"]));
    assert_eq!(list["assignors"], json!([]));
    let mut conn = RawConn::open(&node, "assignor-test");
    let refused = conn.call(
        0,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g-deleted")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("trap-orders"))]))
            .with_server_assignor(Some(StrBytes::from_static_str("bad"))),
    );
    assert_eq!(refused.error_code, UNSUPPORTED_ASSIGNOR, "{refused:?}");
}

/// Uploads are checked before they reach the metadata quorum: a built-in's name, a module of
/// another world, limits out of range; a multipart upload needs no config part.
#[test]
fn bad_uploads_are_refused_with_the_reason() {
    // Not beside this binary's cluster test: see `support::cluster::one_at_a_time`.
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = Runnel::start(&[]);
    let api = HttpApi::new(&node);
    let taken = deploy(&api, "uniform", "runnel-guest-badassignor", json!({}));
    assert_eq!(taken.status, 409, "{}", taken.text);
    let transform = deploy(&api, "not-an-assignor", "runnel-example-identity", json!({}));
    assert_eq!(transform.status, 422, "{}", transform.text);
    assert!(transform.text.contains("assignor"), "{}", transform.text);
    let limits = deploy(&api, "slow", "runnel-guest-badassignor", json!({"call_timeout_ms": 60_000}));
    assert_eq!(limits.status, 422, "{}", limits.text);
    let unknown = deploy(&api, "typo", "runnel-guest-badassignor", json!({"memory": 1}));
    assert_eq!(unknown.status, 422, "{}", unknown.text);
    assert_eq!(api.get("/v1/assignors/nope").status, 404);

    let module = support::guest_component("runnel-guest-badassignor");
    let boundary = "assignor-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"module\"; filename=\"a.wasm\"\r\nContent-Type: application/wasm\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&module);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let answer = api.call("PUT", "/v1/assignors/lopsided", Some(&content_type), Some(body));
    assert_eq!(answer.status, 201, "{}", answer.text);
    assert_eq!(answer.json["call_timeout_ms"], 1000);
    assert_eq!(api.get("/v1/assignors").json["assignors"][0]["name"], "lopsided");
}

/// The sticky-range example through real members: ranges first, and a third member takes only
/// its share, each earlier member keeping a subset of what it had.
#[test]
fn the_sticky_range_example_moves_only_the_newcomers_share() {
    // Not beside this binary's cluster test: see `support::cluster::one_at_a_time`.
    let _one_at_a_time = support::cluster::one_at_a_time();
    let node = Runnel::start(&["--group-consumer-heartbeat-interval-ms", "500"]);
    let api = HttpApi::new(&node);
    const TOPIC: &str = "ranges";
    create_topic(&node, TOPIC, 6);
    let answer = deploy(&api, "sticky-range", "runnel-example-sticky-range", json!({}));
    assert_eq!(answer.status, 201, "{}", answer.text);
    let owned: Owned = Arc::default();
    let select = [("group.remote.assignor", "sticky-range")];
    let settle = |clients: &[&str], each: usize| {
        let mut view = Value::Null;
        let settled = wait_until(DEADLINE, || {
            view = group_view(&api, "g").unwrap_or(Value::Null);
            member_ids(&view).len() == clients.len()
                && view["assignor"]["name"] == "sticky-range"
                && clients.iter().all(|c| owned_by(&owned, c, TOPIC).len() == each)
        });
        assert!(settled, "never {each} partitions each: {view:#} owned {}", snapshot(&owned));
    };
    let a = Polling::start(&node, &owned, "a", TOPIC, &select);
    let b = Polling::start(&node, &owned, "b", TOPIC, &select);
    settle(&["a", "b"], 3);
    let before: Vec<BTreeSet<i32>> = ["a", "b"].iter().map(|c| owned_by(&owned, c, TOPIC)).collect();
    for partitions in &before {
        let (first, last) = (partitions.first().unwrap(), partitions.last().unwrap());
        assert_eq!(last - first, 2, "not a contiguous range: {partitions:?}");
    }
    let c = Polling::start(&node, &owned, "c", TOPIC, &select);
    settle(&["a", "b", "c"], 2);
    for (client, had) in ["a", "b"].iter().zip(&before) {
        let now = owned_by(&owned, client, TOPIC);
        assert!(now.is_subset(had), "{client} had {had:?}, now {now:?}: more moved than the newcomer's share");
    }
    drop((a, b, c));
}

/// On a three-node cluster: a deployment through node 1 is answered once every node loaded it;
/// the group's coordinator (wherever it is) runs the guest with each partition's size (its own
/// replicas' and the other leaders' through DescribeLogDirs) and its replica's rack, and the
/// members own what the example computes natively from the same input.
#[test]
fn on_a_cluster_the_coordinator_runs_the_guest_with_every_leaders_partition_sizes() {
    use support::cluster::Cluster;
    let cluster = Cluster::start_with(3, &["--group-consumer-heartbeat-interval-ms", "500"], |id| {
        vec!["--rack".to_string(), format!("rack-{id}")]
    });
    let node = cluster.node(1);
    let api = HttpApi::new(node);
    const TOPIC: &str = "spread";
    create_topic(node, TOPIC, 6);
    fill(node, TOPIC, &[120, 10, 300, 60, 200, 30]);

    let answer = deploy(&api, "by-size", "runnel-example-assignor", json!({}));
    assert_eq!(answer.status, 201, "{}", answer.text);
    assert_eq!(answer.json["nodes"].as_array().map(Vec::len), Some(3), "{:#}", answer.json);
    assert_eq!(answer.json["nodes_unreachable"], json!([]), "{:#}", answer.json);

    // Sizes and racks as the nodes hosting each partition report them (replication factor 1).
    let mut sizes = vec![0u64; 6];
    let mut racks = vec![Vec::new(); 6];
    for id in cluster.ids() {
        let mut conn = RawConn::open(cluster.node(id), "assignor-test");
        let request = DescribeLogDirsRequest::default().with_topics(Some(vec![DescribableLogDirTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions((0..6).collect())]));
        for topic in &conn.call(4, &request).results[0].topics {
            for p in &topic.partitions {
                sizes[p.partition_index as usize] = p.partition_size as u64;
                racks[p.partition_index as usize] = vec![format!("rack-{id}")];
            }
        }
    }
    assert!(racks.iter().all(|r| !r.is_empty()), "a partition has no replica: {racks:?}");

    let owned: Owned = Arc::default();
    let select = ("group.remote.assignor", "by-size");
    let a = Polling::start(node, &owned, "a", TOPIC, &[select, ("client.rack", "rack-1")]);
    let b = Polling::start(node, &owned, "b", TOPIC, &[select, ("client.rack", "rack-2")]);
    let mut view = Value::Null;
    let matched = wait_until(DEADLINE, || {
        // Node 1 answers with the coordinator's view, wherever the coordinator is.
        view = group_view(&api, "g")
            .filter(|v| v["members"].as_array().is_some_and(|m| m.len() == 2))
            .unwrap_or(Value::Null);
        if view.is_null() || view["assignor"]["name"] != "by-size" {
            return false;
        }
        let ids = member_ids(&view);
        let expected =
            rack_aware_plan(TOPIC, &[(ids["a"].as_str(), "rack-1"), (ids["b"].as_str(), "rack-2")], &sizes, &racks);
        ids.iter().all(|(client, member_id)| {
            let want = expected.get(member_id).cloned().unwrap_or_default();
            owned_by(&owned, client, TOPIC) == want
        })
    });
    assert!(
        matched,
        "members never owned the guest's plan (sizes {sizes:?}, racks {racks:?}): {view:#} owned {}",
        snapshot(&owned)
    );
    // Every node lists and describes the group as its coordinator knows it: two members, by-size.
    for id in cluster.ids() {
        let list = HttpApi::new(cluster.node(id)).get("/v1/groups").json;
        assert_eq!(list["nodes_unreachable"], json!([]), "{list:#}");
        let listed = list["groups"].as_array().into_iter().flatten().find(|g| g["group_id"] == "g");
        let listed = listed.unwrap_or_else(|| panic!("node {id} does not list group g: {list:#}"));
        assert_eq!(
            (&listed["members"], &listed["assignor"]["name"]),
            (&json!(2), &json!("by-size")),
            "node {id}: {list:#}"
        );
        let described = HttpApi::new(cluster.node(id)).get("/v1/groups/g").json;
        assert_eq!(described["members"].as_array().map(Vec::len), Some(2), "node {id}: {described:#}");
    }
    drop((a, b));
}

/// What the rack-aware example assigns natively to members (id, rack) subscribed to `topic`
/// with these partition sizes and replica racks: member id → its partitions.
fn rack_aware_plan(
    topic: &str,
    members: &[(&str, &str)],
    sizes: &[u64],
    racks: &[Vec<String>],
) -> BTreeMap<String, BTreeSet<i32>> {
    let racks: Vec<Vec<&str>> = racks.iter().map(|r| r.iter().map(String::as_str).collect()).collect();
    let racks: Vec<&[&str]> = racks.iter().map(Vec::as_slice).collect();
    let mut builder = Group::builder().topic_in_racks(topic, sizes, &racks);
    for (id, rack) in members {
        builder = builder.member_in_rack(id, rack, &[topic]);
    }
    let group = builder.build();
    let result =
        runnel_sdk::testing::assign::<runnel_example_assignor::RackAwareSize>(&group).expect("native assignment");
    let plan = group.plan(&result).into_iter();
    plan.map(|(member, topics)| (member, topics.get(topic).into_iter().flatten().copied().collect())).collect()
}
