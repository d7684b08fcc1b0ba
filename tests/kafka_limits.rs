//! Limits on what clients can make the broker hold (issue 10): `queued.max.request.bytes`,
//! `max.connections`, `max.connections.per.ip`, `connections.max.idle.ms`, and no buffer sized
//! by a frame length a client declared before sending the bytes. Each test pushes past a limit
//! and then shows the broker still serving other clients.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
use support::{wait_until, HttpApi, RawConn, Runnel, START_TIMEOUT};

/// How long a request that must not be answered yet is given to show it is not.
const SILENCE: Duration = Duration::from_millis(500);

/// An ApiVersions v0 request frame (header v1, client id "limits", empty body).
fn api_versions_frame(correlation_id: i32) -> Vec<u8> {
    let mut body = vec![0, 18, 0, 0];
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&6i16.to_be_bytes());
    body.extend_from_slice(b"limits");
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

#[derive(Debug, PartialEq)]
enum Answer {
    /// A response frame with this correlation id.
    Answered(i32),
    /// The broker closed the connection.
    Closed,
    /// Nothing within the timeout.
    Silent,
}

/// Waits up to `timeout` for one response frame on `stream`.
fn read_answer(stream: &mut TcpStream, timeout: Duration) -> Answer {
    stream.set_read_timeout(Some(timeout)).expect("read timeout");
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return Answer::Silent,
        Err(_) => return Answer::Closed,
    }
    stream.set_read_timeout(Some(START_TIMEOUT)).expect("read timeout");
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    match stream.read_exact(&mut frame) {
        Ok(()) => Answer::Answered(i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]])),
        Err(_) => Answer::Closed,
    }
}

/// Sends ApiVersions on `stream` and waits up to `timeout` for its answer.
fn api_versions(stream: &mut TcpStream, correlation_id: i32, timeout: Duration) -> Answer {
    if stream.write_all(&api_versions_frame(correlation_id)).is_err() {
        return Answer::Closed;
    }
    read_answer(stream, timeout)
}

/// A connection to `node` from the loopback address `source` (127.0.0.2, 127.0.0.3, ...).
fn connect_from(node: &Runnel, source: &str) -> TcpStream {
    let source: SocketAddr = format!("{source}:0").parse().expect("source address");
    let target = node.kafka_addr;
    support::block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(source).expect("bind the source address");
        let stream = socket.connect(target).await.expect("connect");
        let stream = stream.into_std().expect("std stream");
        stream.set_nonblocking(false).expect("blocking");
        stream
    })
}

/// A field of `/proc/<pid>/status` in bytes (VmRSS, VmSize).
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in status"));
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of kB");
    kib * 1024
}

const MIB: u64 = 1 << 20;

#[test]
fn queued_max_request_bytes_bounds_the_memory_of_half_sent_frames_and_a_small_client_is_served_after() {
    // Proves 64 connections each sending 3 MiB of a declared 4 MiB frame make the broker hold
    // at most the 16 MiB pool (the rest are not read: their bytes wait in the kernel), that a
    // small ApiVersions waits while the pool is empty and is answered once those close.
    const FRAME_BYTES: usize = 4 << 20;
    const SENT_BYTES: usize = 3 << 20;
    const POOL_BYTES: usize = 16 << 20;
    const CONNECTIONS: usize = 64;
    let node = Runnel::start(&[
        "--socket-request-max-bytes",
        &FRAME_BYTES.to_string(),
        "--queued-max-request-bytes",
        &POOL_BYTES.to_string(),
    ]);
    let http = HttpApi::new(&node);
    assert_eq!(http.metric_sum("kafka_network_socketserver_memory_pool_available_bytes"), POOL_BYTES as f64);
    let rss_before = proc_status_bytes(node.pid(), "VmRSS");

    let sent_all = Arc::new(AtomicUsize::new(0));
    let mut closers = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(node.kafka_addr).expect("connect");
        closers.push(stream.try_clone().expect("clone"));
        let sent_all = sent_all.clone();
        writers.push(std::thread::spawn(move || {
            let mut bytes = (FRAME_BYTES as i32).to_be_bytes().to_vec();
            bytes.resize(4 + SENT_BYTES, 0x5a);
            // Blocks for as long as the broker does not read this connection.
            if stream.write_all(&bytes).is_ok() {
                sent_all.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let grants = POOL_BYTES / FRAME_BYTES;
    assert!(
        wait_until(START_TIMEOUT, || {
            sent_all.load(Ordering::SeqCst) >= grants
                && http.metric_sum("kafka_network_socketserver_memory_pool_used_bytes") == POOL_BYTES as f64
        }),
        "the pool was never exhausted: {} writers done",
        sent_all.load(Ordering::SeqCst)
    );
    // Whatever the broker reads, it reads soon after the writers finish: watch a while.
    let mut rss_max = 0;
    let watch_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < watch_until {
        rss_max = rss_max.max(proc_status_bytes(node.pid(), "VmRSS"));
        std::thread::park_timeout(Duration::from_millis(50));
    }
    let growth = rss_max.saturating_sub(rss_before);
    eprintln!(
        "RSS before {} MiB, max with {CONNECTIONS} half-sent frames {} MiB (+{} MiB, {} writers done)",
        rss_before / MIB,
        rss_max / MIB,
        growth / MIB,
        sent_all.load(Ordering::SeqCst)
    );
    // Unbounded, the broker would hold 64 x 3 MiB = 192 MiB of these frames.
    assert!(growth < 64 * MIB, "RSS grew by {} MiB with a {} MiB pool", growth / MIB, POOL_BYTES as u64 / MIB);

    // Kafka mutes every channel while the pool is empty: a small request waits too.
    let mut small = TcpStream::connect(node.kafka_addr).expect("connect");
    assert_eq!(api_versions(&mut small, 7, SILENCE), Answer::Silent);

    for closer in &closers {
        let _ = closer.shutdown(std::net::Shutdown::Both);
    }
    for writer in writers {
        writer.join().expect("writer thread");
    }
    assert_eq!(read_answer(&mut small, START_TIMEOUT), Answer::Answered(7));
    let mut conn = RawConn::open(&node, "after-flood");
    let metadata = conn.call(12, &MetadataRequest::default());
    assert_eq!(metadata.brokers.len(), 1);
    assert!(wait_until(START_TIMEOUT, || http.metric_sum("kafka_network_socketserver_memory_pool_used_bytes") == 0.0));
    eprintln!("RSS after the connections closed {} MiB", proc_status_bytes(node.pid(), "VmRSS") / MIB);
}

#[test]
fn a_declared_100_mib_frame_with_10_bytes_sent_allocates_only_what_arrived() {
    // Proves reading a frame allocates as its bytes arrive: 200 connections declaring 100 MiB
    // (with a pool large enough to grant them all) and sending 10 bytes each grow neither the
    // broker's RSS nor its address space by anything like 200 x 100 MiB.
    const CONNECTIONS: usize = 200;
    const FRAME_BYTES: usize = 100 << 20;
    let node = Runnel::start(&[
        "--socket-request-max-bytes",
        &FRAME_BYTES.to_string(),
        "--queued-max-request-bytes",
        // One more MiB for the ApiVersions beside them.
        &(CONNECTIONS * FRAME_BYTES + (1 << 20)).to_string(),
    ]);
    let http = HttpApi::new(&node);
    let rss_before = proc_status_bytes(node.pid(), "VmRSS");
    let size_before = proc_status_bytes(node.pid(), "VmSize");
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(node.kafka_addr).expect("connect");
        let mut bytes = (FRAME_BYTES as i32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0, 18, 0, 0, 0, 0, 0, 1, 0, 0]);
        stream.write_all(&bytes).expect("send");
        streams.push(stream);
    }
    // Every frame is granted its bytes from the pool before its body is read.
    assert!(
        wait_until(START_TIMEOUT, || {
            http.metric_sum("kafka_network_socketserver_memory_pool_used_bytes") == (CONNECTIONS * FRAME_BYTES) as f64
        }),
        "not every frame was granted"
    );
    let rss = proc_status_bytes(node.pid(), "VmRSS");
    let size = proc_status_bytes(node.pid(), "VmSize");
    eprintln!(
        "{CONNECTIONS} x 100 MiB declared: RSS {} -> {} MiB, VmSize {} -> {} MiB",
        rss_before / MIB,
        rss / MIB,
        size_before / MIB,
        size / MIB
    );
    assert!(rss.saturating_sub(rss_before) < 64 * MIB, "RSS grew by {} MiB", (rss - rss_before) / MIB);
    // A buffer of each declared size would add 20,000 MiB of address space.
    assert!(size.saturating_sub(size_before) < 4096 * MIB, "VmSize grew by {} MiB", (size - size_before) / MIB);
    let mut conn = RawConn::open(&node, "beside-the-flood");
    assert_eq!(conn.call(3, &ApiVersionsRequest::default()).error_code, 0);
}

#[test]
fn max_connections_blocks_accepting_until_a_connection_closes() {
    // Proves that at max.connections the next client is not served (Kafka's acceptor waits)
    // until an open connection closes, and then it is.
    let node = Runnel::start(&["--max-connections", "3"]);
    let http = HttpApi::new(&node);
    let mut open: Vec<RawConn> = (0..3).map(|_| RawConn::open(&node, "holder")).collect();
    for conn in &mut open {
        assert_eq!(conn.call(3, &ApiVersionsRequest::default()).error_code, 0);
    }
    let mut fourth = TcpStream::connect(node.kafka_addr).expect("the kernel's backlog takes the connection");
    assert_eq!(api_versions(&mut fourth, 4, SILENCE), Answer::Silent);
    drop(open.pop());
    assert_eq!(read_answer(&mut fourth, START_TIMEOUT), Answer::Answered(4));
    assert!(http.metric_sum("kafka_network_acceptor_blocked_seconds_total") > 0.0);
    for conn in &mut open {
        assert_eq!(conn.call(3, &ApiVersionsRequest::default()).error_code, 0);
    }
}

#[test]
fn max_connections_never_blocks_the_inter_broker_listener() {
    // Proves clients filling max.connections on one listener do not stop the node accepting
    // on its inter-broker listener (Kafka's ConnectionQuotas exempts it when there are
    // several), so replication reconnects while clients wait.
    let node = Runnel::start(&[
        "--listeners",
        "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "--listener-security-protocol-map",
        "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
        "--inter-broker-listener-name",
        "PLAINTEXT",
        "--max-connections",
        "3",
    ]);
    let client = node.listener("CLIENT");
    let mut open: Vec<RawConn> =
        (0..3).map(|_| RawConn::from_stream(TcpStream::connect(client).expect("connect"), "holder")).collect();
    for conn in &mut open {
        assert_eq!(conn.call(3, &ApiVersionsRequest::default()).error_code, 0);
    }
    let mut fourth = TcpStream::connect(client).expect("the kernel's backlog takes the connection");
    assert_eq!(api_versions(&mut fourth, 4, SILENCE), Answer::Silent, "a fourth client waits");
    for _ in 0..2 {
        let mut replica = TcpStream::connect(node.listener("PLAINTEXT")).expect("connect");
        assert_eq!(
            api_versions(&mut replica, 5, START_TIMEOUT),
            Answer::Answered(5),
            "the inter-broker listener serves"
        );
    }
}

#[test]
fn max_connections_per_ip_closes_the_extra_connection_at_once() {
    // Proves a third connection from 127.0.0.2 with max.connections.per.ip=2 is closed at once
    // and counted, while 127.0.0.3 is served, and 127.0.0.2 is served again once one closes.
    let node = Runnel::start(&["--max-connections-per-ip", "2"]);
    let http = HttpApi::new(&node);
    let mut first = RawConn::from_stream(connect_from(&node, "127.0.0.2"), "first");
    let mut second = RawConn::from_stream(connect_from(&node, "127.0.0.2"), "second");
    assert_eq!(first.call(3, &ApiVersionsRequest::default()).error_code, 0);
    assert_eq!(second.call(3, &ApiVersionsRequest::default()).error_code, 0);

    let mut third = connect_from(&node, "127.0.0.2");
    assert_eq!(api_versions(&mut third, 3, START_TIMEOUT), Answer::Closed);
    assert_eq!(http.metric_sum("kafka_server_socketserver_connection_rejected_total"), 1.0);

    let mut other_host = RawConn::from_stream(connect_from(&node, "127.0.0.3"), "other-host");
    assert_eq!(other_host.call(3, &ApiVersionsRequest::default()).error_code, 0);

    drop(first);
    // The broker frees the slot when it sees the close; until then a new one is refused.
    assert!(wait_until(START_TIMEOUT, || {
        let mut again = connect_from(&node, "127.0.0.2");
        api_versions(&mut again, 5, START_TIMEOUT) == Answer::Answered(5)
    }));
    assert_eq!(second.call(3, &ApiVersionsRequest::default()).error_code, 0);
}

#[test]
fn connections_max_idle_ms_closes_idle_connections_and_half_sent_frames() {
    // Proves connections.max.idle.ms closes a connection idle between requests and one stalled
    // inside a frame (giving its pool bytes back), but not one that keeps sending requests.
    const IDLE_MS: u64 = 1000;
    let node = Runnel::start(&["--connections-max-idle-ms", &IDLE_MS.to_string()]);
    let http = HttpApi::new(&node);

    let mut between = TcpStream::connect(node.kafka_addr).expect("connect");
    assert_eq!(api_versions(&mut between, 1, START_TIMEOUT), Answer::Answered(1));
    let mut stalled = TcpStream::connect(node.kafka_addr).expect("connect");
    stalled.write_all(&[0, 0x10, 0, 0, 0, 18, 0, 0, 0, 0]).expect("a 1 MiB frame's first bytes");
    assert!(wait_until(START_TIMEOUT, || {
        http.metric_sum("kafka_network_socketserver_memory_pool_used_bytes") == (1 << 20) as f64
    }));
    let started = Instant::now();

    // A client sending a request every 100 ms is never idle for 1 s.
    let mut active = RawConn::open(&node, "active");
    while started.elapsed() < Duration::from_millis(3 * IDLE_MS) {
        assert_eq!(active.call(3, &ApiVersionsRequest::default()).error_code, 0);
        std::thread::park_timeout(Duration::from_millis(100));
    }
    assert_eq!(read_answer(&mut between, START_TIMEOUT), Answer::Closed);
    assert_eq!(read_answer(&mut stalled, START_TIMEOUT), Answer::Closed);
    assert!(wait_until(START_TIMEOUT, || {
        http.metric_sum("kafka_server_socketserver_connection_idle_expired_total") == 2.0
            && http.metric_sum("kafka_network_socketserver_memory_pool_used_bytes") == 0.0
    }));
    assert_eq!(active.call(3, &ApiVersionsRequest::default()).error_code, 0);
    let mut fresh = TcpStream::connect(node.kafka_addr).expect("connect");
    assert_eq!(api_versions(&mut fresh, 9, START_TIMEOUT), Answer::Answered(9));
}

#[test]
fn max_connection_creation_rate_spaces_out_new_connections_broker_wide_and_per_listener() {
    // Proves KIP-612's broker-wide connection creation rate: with 5 a second, 20 clients
    // connecting at once to a client listener are all served, the last no sooner than three
    // seconds after the first (a one-second burst of 5, then one every 200 ms), and the
    // acceptor's waiting shows in its metric; the inter-broker listener is not throttled by
    // the broker-wide rate, but is by a rate of its own.
    const RATE: usize = 5;
    const CLIENTS: usize = 20;
    let node = Runnel::start(&[
        "--listeners",
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--listener-security-protocol-map",
        "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "--inter-broker-listener-name",
        "INTERNAL",
        "--max-connection-creation-rate",
        &RATE.to_string(),
    ]);
    let http = HttpApi::new(&node);
    let burst = |addr: SocketAddr| {
        let started = Instant::now();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                std::thread::spawn(move || {
                    let mut stream = TcpStream::connect(addr).expect("connect");
                    api_versions(&mut stream, i as i32, START_TIMEOUT)
                })
            })
            .collect();
        for (i, client) in clients.into_iter().enumerate() {
            assert_eq!(client.join().expect("client"), Answer::Answered(i as i32), "client {i}");
        }
        started.elapsed()
    };
    let throttled = "kafka_network_acceptor_throttle_seconds_total";
    burst(node.listener("INTERNAL"));
    assert_eq!(http.metric_sum(throttled), 0.0, "the inter-broker listener is not throttled");
    let elapsed = burst(node.listener("EXTERNAL"));
    let least = Duration::from_millis(((CLIENTS - RATE) * 1000 / RATE) as u64) - Duration::from_millis(200);
    assert!(elapsed >= least, "{CLIENTS} connections at {RATE}/s took only {elapsed:?}");
    assert!(http.metric_sum(throttled) > 2.0, "{}", http.metric_sum(throttled));

    // A listener's own rate (Kafka's listener prefix) applies to it, the inter-broker one too.
    let own =
        Runnel::start(&["--listener-config", &format!("listener.name.plaintext.max.connection.creation.rate={RATE}")]);
    let elapsed = burst(own.kafka_addr);
    assert!(elapsed >= least, "{CLIENTS} connections at the listener's {RATE}/s took only {elapsed:?}");
    assert!(HttpApi::new(&own).metric_sum(throttled) > 2.0);
}
