//! `bench --mode heartbeats`: how many KIP-848 ConsumerGroupHeartbeats a single-node group
//! coordinator sustains. `--members M` (default 1000) members spread evenly over `--groups G`
//! (default 100) groups, all subscribed to one 12-partition topic, heartbeat back to back (not
//! at the broker's interval: the point is the coordinator's ceiling) over `--connections C`
//! (default 16) raw connections, one thread each, one request in flight per connection. Each
//! member joins (v1, client-generated member id), then heartbeats with its epoch and, after
//! every new assignment, the partitions it now owns, as the Java client does; a member fenced
//! or unknown rejoins. After every member has joined and a 2 s warm-up, heartbeats are counted
//! for `--seconds D`; then every member leaves. Prints heartbeats/s, p50/p99 latency and the
//! error codes seen. The bootstrap node must coordinate every group (one node).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, FindCoordinatorRequest, GroupId,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

const VERSION: i16 = 1;
const WARM_UP: Duration = Duration::from_secs(2);
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;

struct Member {
    group: String,
    id: String,
    epoch: i32,
    owned: Vec<TopicPartitions>,
    /// A new assignment arrived: the next heartbeat reports what the member owns.
    report_owned: bool,
}

impl Member {
    fn request(&self, topic: &str) -> ConsumerGroupHeartbeatRequest {
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_member_id(StrBytes::from_string(self.id.clone()))
            .with_member_epoch(self.epoch);
        if self.epoch == 0 {
            request
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(topic.to_string()))]))
                .with_topic_partitions(Some(Vec::new()))
        } else {
            request.with_rebalance_timeout_ms(-1).with_topic_partitions(self.report_owned.then(|| self.owned.clone()))
        }
    }

    /// Takes an answer in; the error code (0 on success).
    fn answer(&mut self, response: ConsumerGroupHeartbeatResponse) -> i16 {
        match response.error_code {
            0 => {
                self.epoch = response.member_epoch;
                self.report_owned = false;
                if let Some(assignment) = response.assignment {
                    self.owned = assignment
                        .topic_partitions
                        .into_iter()
                        .map(|tp| TopicPartitions::default().with_topic_id(tp.topic_id).with_partitions(tp.partitions))
                        .collect();
                    self.report_owned = true;
                }
            }
            UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => {
                self.epoch = 0;
                self.owned.clear();
            }
            _ => {}
        }
        response.error_code
    }
}

struct Conn {
    stream: TcpStream,
    correlation_id: i32,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect to the bootstrap node");
        stream.set_nodelay(true).expect("nodelay");
        Conn { stream, correlation_id: 0 }
    }

    fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let api = ApiKey::try_from(R::KEY).expect("a known API");
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("bench-heartbeats")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, api.request_header_version(version)).expect("encode header");
        request.encode(&mut buf, version).expect("encode request");
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).expect("send a heartbeat");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("a response");
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame).expect("the whole response");
        let mut frame = Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version)).expect("header");
        assert_eq!(header.correlation_id, self.correlation_id, "responses in order");
        R::Response::decode(&mut frame, version).expect("decode the response")
    }
}

/// Asks for every group's coordinator until each has one (the first request creates
/// `__consumer_offsets`); each must be the bootstrap node.
fn find_coordinators(addr: &str, groups: &[String]) {
    let mut conn = Conn::open(addr);
    let port: i32 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("host:port");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(groups.iter().map(|g| StrBytes::from_string(g.clone())).collect());
        let response = conn.call(4, &request);
        if response.coordinators.iter().all(|c| c.error_code == 0) {
            assert!(response.coordinators.iter().all(|c| c.port == port), "every group's coordinator must be {addr}");
            return;
        }
        assert!(Instant::now() < deadline, "no coordinator within 60 s: {response:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct ThreadResult {
    heartbeats: usize,
    latencies_us: Vec<u32>,
    errors: BTreeMap<i16, usize>,
}

/// Runs the benchmark against `bootstrap` (its first address) with members subscribed to
/// `topic`; prints a table and a RESULT line.
pub fn run(bootstrap: &str, topic: &str, groups: usize, members: usize, connections: usize, seconds: u64) {
    let addr = bootstrap.split(',').next().expect("a bootstrap address").to_string();
    let connections = connections.clamp(1, members.max(1));
    let run = std::process::id();
    let group_id = move |g: usize| format!("bench-{run}-hb-{}", g % groups.max(1));
    find_coordinators(&addr, &(0..groups.max(1)).map(group_id).collect::<Vec<_>>());
    let joined = Arc::new(Barrier::new(connections + 1));
    let start = Arc::new(Barrier::new(connections + 1));
    let measuring = Arc::new(std::sync::OnceLock::<(Instant, Instant)>::new());
    let threads: Vec<_> = (0..connections)
        .map(|c| {
            let (addr, topic) = (addr.clone(), topic.to_string());
            let (joined, start, measuring) = (joined.clone(), start.clone(), measuring.clone());
            let mut mine: Vec<Member> = (c..members)
                .step_by(connections)
                .map(|m| Member {
                    group: group_id(m),
                    id: format!("bench-{run}-member-{m:05}"),
                    epoch: 0,
                    owned: Vec::new(),
                    report_owned: false,
                })
                .collect();
            std::thread::spawn(move || {
                let mut conn = Conn::open(&addr);
                let deadline = Instant::now() + Duration::from_secs(60);
                while mine.iter().any(|m| m.epoch == 0) {
                    assert!(Instant::now() < deadline, "members could not join within 60 s");
                    for member in mine.iter_mut().filter(|m| m.epoch == 0) {
                        // Errors here (a coordinator still loading answers NOT_COORDINATOR or
                        // COORDINATOR_LOAD_IN_PROGRESS) are retried until the deadline.
                        member.answer(conn.call(VERSION, &member.request(&topic)));
                    }
                }
                joined.wait();
                start.wait();
                let (from, until) = *measuring.get().expect("set before the start");
                let mut result = ThreadResult { heartbeats: 0, latencies_us: Vec::new(), errors: BTreeMap::new() };
                'beat: loop {
                    for member in mine.iter_mut() {
                        let sent = Instant::now();
                        if sent >= until {
                            break 'beat;
                        }
                        let code = member.answer(conn.call(VERSION, &member.request(&topic)));
                        if sent >= from {
                            result.heartbeats += 1;
                            result.latencies_us.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                            if code != 0 {
                                *result.errors.entry(code).or_default() += 1;
                            }
                        }
                    }
                }
                for member in mine.iter_mut().filter(|m| m.epoch > 0) {
                    member.epoch = -1;
                    conn.call(VERSION, &member.request(&topic));
                }
                result
            })
        })
        .collect();
    let joining = Instant::now();
    joined.wait();
    let joined_after = joining.elapsed();
    let from = Instant::now() + WARM_UP;
    measuring.set((from, from + Duration::from_secs(seconds))).expect("set once");
    start.wait();
    let results: Vec<ThreadResult> = threads.into_iter().map(|t| t.join().expect("a heartbeat thread")).collect();
    let heartbeats: usize = results.iter().map(|r| r.heartbeats).sum();
    let mut latencies: Vec<u32> = results.iter().flat_map(|r| r.latencies_us.iter().copied()).collect();
    latencies.sort_unstable();
    let percentile =
        |q: f64| latencies.get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)));
    let ms = |us: Option<&u32>| us.map_or(f64::NAN, |&us| us as f64 / 1000.0);
    let mut errors: BTreeMap<i16, usize> = BTreeMap::new();
    for (code, n) in results.iter().flat_map(|r| &r.errors) {
        *errors.entry(*code).or_default() += n;
    }
    let per_second = heartbeats as f64 / seconds as f64;
    let errors_text: Vec<String> = errors.iter().map(|(code, n)| format!("{code}: {n}")).collect();
    println!("| benchmark | groups | members | connections | seconds | heartbeats/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| heartbeats | {groups} | {members} | {connections} | {seconds} | {per_second:.0} | {:.2} | {:.2} | {} |",
        ms(percentile(0.5)),
        ms(percentile(0.99)),
        if errors.is_empty() { "none".to_string() } else { errors_text.join(", ") }
    );
    println!("(all {members} members joined in {:.2} s)", joined_after.as_secs_f64());
    println!(
        "RESULT {{\"benchmark\":\"heartbeats\",\"groups\":{groups},\"members\":{members},\"connections\":{connections},\"seconds\":{seconds},\"heartbeats_per_s\":{per_second:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"errors\":{}}}",
        ms(percentile(0.5)),
        ms(percentile(0.99)),
        errors.values().sum::<usize>()
    );
}
