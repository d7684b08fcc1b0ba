//! Connection flood: the broker's memory while many connections each declare a large frame and
//! send a little of it, and after they close (issue 10, `queued.max.request.bytes`).
//!
//! Start a node, then point this at its Kafka listener and its pid:
//! `ulimit -n 4096; cargo run -p runnel-broker --example conn_flood -- --kafka 127.0.0.1:9092 --pid <pid>`
//! Options: `--connections N` (default 1000), `--declare-bytes B` (the frame size each
//! connection declares, default 104857600; the node's `--socket-request-max-bytes` must allow
//! it), `--send-bytes B` (how much of the frame each sends, default 1024), `--settle-ms MS`
//! (how long to let the broker read before measuring, default 3000).
//!
//! Prints VmRSS, VmHWM and VmSize from `/proc/<pid>/status` before, with the connections open,
//! and after they close. Only loopback addresses are accepted.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

struct Options {
    kafka: SocketAddr,
    pid: u32,
    connections: usize,
    declare_bytes: i32,
    send_bytes: usize,
    settle_ms: u64,
}

fn parse_args() -> Options {
    let mut kafka = None;
    let mut pid = None;
    let mut options = (1000, 104_857_600, 1024, 3000);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--kafka" => kafka = Some(value.parse::<SocketAddr>().expect("--kafka host:port")),
            "--pid" => pid = Some(value.parse().expect("--pid N")),
            "--connections" => options.0 = value.parse().expect("--connections N"),
            "--declare-bytes" => options.1 = value.parse().expect("--declare-bytes B"),
            "--send-bytes" => options.2 = value.parse().expect("--send-bytes B"),
            "--settle-ms" => options.3 = value.parse().expect("--settle-ms MS"),
            other => panic!("unknown flag {other}"),
        }
    }
    let kafka = kafka.expect("--kafka host:port");
    assert!(kafka.ip().is_loopback(), "only loopback addresses are accepted");
    Options {
        kafka,
        pid: pid.expect("--pid of the runnel node"),
        connections: options.0,
        declare_bytes: options.1,
        send_bytes: options.2,
        settle_ms: options.3,
    }
}

/// VmRSS, VmHWM and VmSize of `pid`, in MiB.
fn memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    };
    format!("VmRSS {} MiB, VmHWM {} MiB, VmSize {} MiB", field("VmRSS:"), field("VmHWM:"), field("VmSize:"))
}

fn main() {
    let options = parse_args();
    println!("before: {}", memory(options.pid));
    let mut frame = options.declare_bytes.to_be_bytes().to_vec();
    // The start of an ApiVersions v0 header, then filler.
    frame.extend_from_slice(&[0, 18, 0, 0, 0, 0, 0, 1]);
    frame.resize(4 + options.send_bytes.max(8), 0x5a);
    let mut streams = Vec::with_capacity(options.connections);
    for i in 0..options.connections {
        let mut stream = TcpStream::connect(options.kafka).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        // Sends fit in the socket buffers; a broker that does not read leaves them there.
        stream.write_all(&frame).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        streams.push(stream);
    }
    // A measuring tool, not a test: give the broker time to read what it will.
    std::thread::sleep(Duration::from_millis(options.settle_ms));
    println!(
        "{} connections open, each declared {} bytes and sent {}: {}",
        options.connections,
        options.declare_bytes,
        options.send_bytes,
        memory(options.pid)
    );
    drop(streams);
    std::thread::sleep(Duration::from_millis(options.settle_ms));
    println!("after they closed: {}", memory(options.pid));
}
