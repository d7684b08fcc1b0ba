//! A cluster of real `runnel` processes on loopback, with a TCP proxy on every directed link
//! between metadata voters so a test can cut a node off (or one link) and heal it again.
//!
//! Node `i` reaches node `j`'s raft listener through `proxy(i → j)`: each node gets its own
//! `--voters` list where its peers' addresses are its outgoing proxies (configured addresses win
//! over the ones stored in the raft membership). Controller ports are chosen before the nodes
//! start, because every node must know its peers before it can become ready.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Runnel;

/// A one-way-initiated TCP link (both directions of its connections are forwarded) that can be
/// cut: a cut closes the live connections and refuses new ones until healed.
pub struct LinkProxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl LinkProxy {
    pub fn start(target: SocketAddr) -> LinkProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Mutex::new(Vec::new()));
        let (cut2, stop2, live2) = (cut.clone(), stop.clone(), live.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop2.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::Acquire) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else { continue };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let mut tracked = live2.lock().unwrap();
                for stream in [&client, &server] {
                    if let Ok(clone) = stream.try_clone() {
                        tracked.push(clone);
                    }
                }
                drop(tracked);
                pipe(client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                pipe(server, client);
            }
        });
        LinkProxy { addr, cut, stop, live }
    }

    /// Closes the link's connections and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for stream in self.live.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.cut();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// An ephemeral loopback port, free when this returns (bound and released: the nodes need their
/// controller ports before any of them starts).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

pub struct Cluster {
    /// `nodes[i]` has node id `i + 1`.
    pub nodes: Vec<Runnel>,
    /// `(from, to)` → the proxy `from` uses to reach `to`'s raft listener.
    links: BTreeMap<(u64, u64), LinkProxy>,
    /// Voter id → its raft listener port (broker-only nodes reach the voters there directly).
    controller_ports: BTreeMap<u64, u16>,
    _temp: tempfile::TempDir,
}

impl Cluster {
    /// Starts `count` voters (node ids 1..=count), each with `extra_args`, and waits until all
    /// are ready (each has caught up with the quorum).
    pub fn start(count: u64, extra_args: &[&str]) -> Cluster {
        Cluster::start_with(count, extra_args, |_| Vec::new())
    }

    /// As [`Cluster::start`], with `per_node(id)` appended to node `id`'s arguments (e.g. its
    /// own `--rack`).
    pub fn start_with(count: u64, extra_args: &[&str], per_node: impl Fn(u64) -> Vec<String>) -> Cluster {
        let temp = tempfile::tempdir().expect("temp dir");
        let ports: BTreeMap<u64, u16> = (1..=count).map(|id| (id, free_port())).collect();
        let mut links = BTreeMap::new();
        for &from in ports.keys() {
            for (&to, &port) in &ports {
                if from != to {
                    links.insert((from, to), LinkProxy::start(SocketAddr::from(([127, 0, 0, 1], port))));
                }
            }
        }
        let args: Vec<(u64, Vec<String>)> = ports
            .iter()
            .map(|(&id, &port)| {
                let voters: Vec<String> = ports
                    .keys()
                    .map(|&peer| {
                        let addr =
                            if peer == id { format!("127.0.0.1:{port}") } else { links[&(id, peer)].addr.to_string() };
                        format!("{peer}@{addr}")
                    })
                    .collect();
                let mut args = vec![
                    "--node-id".to_string(),
                    id.to_string(),
                    "--controller-listen".to_string(),
                    format!("127.0.0.1:{port}"),
                    "--voters".to_string(),
                    voters.join(","),
                ];
                args.extend(extra_args.iter().map(|s| s.to_string()));
                args.extend(per_node(id));
                (id, args)
            })
            .collect();
        // Every node waits for the quorum before it is ready: start them all at once.
        let handles: Vec<_> = args
            .into_iter()
            .map(|(id, args)| {
                let dir = temp.path().join(format!("node-{id}"));
                std::thread::spawn(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    Runnel::start_in(&dir, &args)
                })
            })
            .collect();
        let nodes = handles.into_iter().map(|h| h.join().expect("node start")).collect();
        Cluster { nodes, links, controller_ports: ports, _temp: temp }
    }

    pub fn node(&self, id: u64) -> &Runnel {
        &self.nodes[(id - 1) as usize]
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Runnel {
        &mut self.nodes[(id - 1) as usize]
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> {
        1..=self.nodes.len() as u64
    }

    /// Cuts every raft link from and to `id`.
    pub fn isolate(&self, id: u64) {
        for ((from, to), link) in &self.links {
            if *from == id || *to == id {
                link.cut();
            }
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        for link in self.links.values() {
            link.heal();
        }
    }
}

/// Broker-only nodes (`--process-roles broker`, issue 11): observers of the metadata quorum that
/// host partitions. They are not behind link proxies (`isolate` does not cut them off).
impl Cluster {
    /// Starts a broker-only node with the next node id (after every node so far), `--voters`
    /// naming the voters' raft listeners, its own fixed controller port (so `restart` keeps it),
    /// and `extra_args`; returns its id once it is ready (caught up with the quorum).
    pub fn add_broker_only(&mut self, extra_args: &[&str]) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let voters: Vec<String> =
            self.controller_ports.iter().map(|(voter, port)| format!("{voter}@127.0.0.1:{port}")).collect();
        let mut args = vec![
            "--node-id".to_string(),
            id.to_string(),
            "--process-roles".to_string(),
            "broker".to_string(),
            "--controller-listen".to_string(),
            format!("127.0.0.1:{}", free_port()),
            "--voters".to_string(),
            voters.join(","),
        ];
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let node = Runnel::start_in(&self._temp.path().join(format!("node-{id}")), &args);
        self.nodes.push(node);
        id
    }

    /// The voters' node ids (the first nodes started; broker-only nodes come after them).
    pub fn voter_ids(&self) -> Vec<u64> {
        self.controller_ports.keys().copied().collect()
    }
}

/// Process faults for the replication fault tests (issue 11): every node keeps its data dir and
/// its Kafka, HTTP and controller ports across restarts, so one bootstrap list serves a whole run.
impl Cluster {
    /// Every node's Kafka address, comma-separated (librdkafka's `bootstrap.servers`).
    pub fn bootstrap(&self) -> String {
        self.nodes.iter().map(|n| n.kafka_addr.to_string()).collect::<Vec<_>>().join(",")
    }

    /// SIGKILL: a crash, nothing flushed.
    pub fn kill9(&mut self, id: u64) {
        self.node_mut(id).kill9();
    }

    /// SIGTERM and wait for the exit; returns whether the node exited with status 0.
    pub fn terminate(&mut self, id: u64) -> bool {
        self.node_mut(id).terminate()
    }

    /// Starts a stopped node again on its data dir and ports; returns once it is ready.
    pub fn restart(&mut self, id: u64) {
        self.node_mut(id).restart_on_same_ports(&[]);
    }

    /// SIGSTOP: the process stays, its sockets stay open, it answers nothing (a long GC pause,
    /// a VM freeze).
    pub fn sigstop(&self, id: u64) {
        signal(self.node(id), libc::SIGSTOP);
    }

    /// SIGCONT: a paused node resumes where it was, unaware time passed.
    pub fn sigcont(&self, id: u64) {
        signal(self.node(id), libc::SIGCONT);
    }

    /// A lost log disk: kills the node (if running), deletes its partitions, checkpoints and
    /// `meta.properties` (everything but the quorum's `metadata/` directory), and starts it again
    /// with the cluster id it had (as an operator formats a replacement disk), same node id and
    /// ports. It rejoins with empty logs.
    pub fn wipe_and_restart(&mut self, id: u64) {
        let node = self.node_mut(id);
        if node.is_running() {
            node.kill9();
        }
        let meta = std::fs::read_to_string(node.data_dir.join("meta.properties")).expect("meta.properties");
        let cluster_id = meta
            .lines()
            .find_map(|line| line.strip_prefix("cluster.id="))
            .expect("cluster.id in meta.properties")
            .trim()
            .to_string();
        // The log dir is lost; the metadata quorum's own log (`metadata/`, Kafka's
        // metadata.log.dir) survives: a voter that forgets its raft log and votes could elect two
        // leaders in one term, and re-adding a voter with a new disk (KIP-853) is not built.
        for entry in std::fs::read_dir(&node.data_dir).expect("data dir") {
            let path = entry.expect("dir entry").path();
            if path.file_name().is_some_and(|n| n == "metadata") {
                continue;
            }
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("remove");
            } else {
                std::fs::remove_file(&path).expect("remove");
            }
        }
        node.restart_on_same_ports(&["--cluster-id", &cluster_id]);
    }
}

fn signal(node: &Runnel, signal: i32) {
    // SAFETY: kill(2) on our own child's pid (still our child: it is not reaped until killed).
    let rc = unsafe { libc::kill(node.pid() as i32, signal) };
    assert_eq!(rc, 0, "kill({}, {signal}): {}", node.pid(), std::io::Error::last_os_error());
}

/// The seed of a fault run: `RUNNEL_FAULT_SEED` when set (a replay), else random. Printed when
/// made, and again if the test panics while it is alive (keep it in the test's scope).
pub struct FaultRng {
    seed: u64,
    state: u64,
}

impl FaultRng {
    pub fn from_env() -> FaultRng {
        let seed = match std::env::var("RUNNEL_FAULT_SEED") {
            Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("RUNNEL_FAULT_SEED={text:?} is not a u64")),
            Err(_) => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                splitmix64(nanos ^ (u64::from(std::process::id()) << 32))
            }
        };
        eprintln!("RUNNEL_FAULT_SEED={seed}");
        FaultRng::with_seed(seed)
    }

    pub fn with_seed(seed: u64) -> FaultRng {
        // xorshift has a fixed point at 0; splitmix spreads close seeds apart.
        let state = splitmix64(seed).max(1);
        FaultRng { seed, state }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// xorshift64*.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }

    /// A duration uniform in `[low_ms, high_ms]`.
    pub fn millis(&mut self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(low_ms + self.below(high_ms - low_ms + 1))
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

impl Drop for FaultRng {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("fault run failed; replay it with RUNNEL_FAULT_SEED={}", self.seed);
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE5_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fault rounds per scenario: `RUNNEL_FAULT_ROUNDS`, else `default` (the suite's short run).
pub fn fault_rounds(default: usize) -> usize {
    std::env::var("RUNNEL_FAULT_ROUNDS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}
