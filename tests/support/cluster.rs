//! A cluster of real `runnel` processes on loopback, with a TCP proxy on every directed link
//! between nodes, on both planes, so a test can cut a node off (or one link), black-hole a link
//! (a silent partition), and heal it again.
//!
//! Metadata (raft) plane: node `i` reaches node `j`'s raft listener through `proxy(i → j)`:
//! each node gets its own `--voters` list where its peers' addresses are its outgoing proxies
//! (configured addresses win over the ones stored in the raft membership). Heartbeats to the
//! active controller travel there too.
//!
//! Data (Kafka) plane: node `i` reaches node `j`'s Kafka listener (replica fetches, forwarded
//! requests) through its own `data_proxy(i → j)`, given as `--broker-address-override
//! j=<proxy>`; the registered address, which clients are told, stays `j`'s listener, so the
//! test's clients reach every node directly whatever is cut.
//!
//! Controller and Kafka ports are chosen before the nodes start (every node must know its
//! peers, and the proxies their targets, first) and kept across restarts. Broker-only nodes
//! (`add_broker_only`) are behind no proxy on either plane.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Runnel;

/// What a link does with its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards both ways.
    Open,
    /// Live connections closed, new ones refused: the peer sees a reset at once.
    Cut,
    /// Connections accepted and held, nothing forwarded either way (bytes already read wait in
    /// the proxy, the rest in the kernel's buffers): the peer sees a hang, as on a silent
    /// partition, until a heal delivers what was held or a cut closes them.
    BlackHole,
}

/// State shared by a proxy's accept loop and its forwarding threads.
struct LinkState {
    mode: Mutex<Mode>,
    changed: Condvar,
    stop: AtomicBool,
    /// Every stream of a live or held connection (both ends), so a cut can close them.
    live: Mutex<Vec<TcpStream>>,
}

impl LinkState {
    /// Blocks while the link is black-holed; returns whether traffic may pass (it is open).
    fn wait_passable(&self) -> bool {
        let mut mode = self.mode.lock().unwrap_or_else(|p| p.into_inner());
        while *mode == Mode::BlackHole && !self.stop.load(Ordering::Acquire) {
            mode = self.changed.wait(mode).unwrap_or_else(|p| p.into_inner());
        }
        *mode == Mode::Open && !self.stop.load(Ordering::Acquire)
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
        self.changed.notify_all();
        if mode == Mode::Cut {
            for stream in self.live.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    fn track(&self, streams: &[&TcpStream]) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        for stream in streams {
            if let Ok(clone) = stream.try_clone() {
                live.push(clone);
            }
        }
    }
}

/// A one-way-initiated TCP link (both directions of its connections are forwarded) that can be
/// cut, black-holed and healed.
pub struct LinkProxy {
    pub addr: SocketAddr,
    state: Arc<LinkState>,
}

impl LinkProxy {
    pub fn start(target: SocketAddr) -> LinkProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(LinkState {
            mode: Mutex::new(Mode::Open),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            live: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                match shared.mode() {
                    Mode::Cut => drop(client),
                    // A connection made into a black hole waits (on its own thread, so a heal
                    // or cut of the link is not held up by it) before reaching the target.
                    Mode::BlackHole => {
                        shared.track(&[&client]);
                        let state = shared.clone();
                        std::thread::spawn(move || {
                            if state.wait_passable() {
                                connect_and_pipe(&state, client, target);
                            }
                        });
                    }
                    Mode::Open => connect_and_pipe(&shared, client, target),
                }
            }
        });
        LinkProxy { addr, state }
    }

    /// Closes the link's connections and refuses new ones.
    pub fn cut(&self) {
        self.state.set(Mode::Cut);
    }

    /// Holds the link's connections and accepts new ones, forwarding nothing (a silent
    /// partition: the peers see requests hang, not fail).
    pub fn black_hole(&self) {
        self.state.set(Mode::BlackHole);
    }

    /// Forwards again; connections held by a black hole go on with what they had sent.
    pub fn heal(&self) {
        self.state.set(Mode::Open);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.state.set(Mode::Cut);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Connects `client` to `target` and forwards both ways (a failed connect drops the client: the
/// peer sees the refusal).
fn connect_and_pipe(state: &Arc<LinkState>, client: TcpStream, target: SocketAddr) {
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    state.track(&[&client, &server]);
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else { return };
    pipe(state.clone(), client2, server2);
    pipe(state.clone(), server, client);
}

/// Copies `from` to `to` on a thread until either side closes or the link is cut; while the
/// link is black-holed it holds what it read and reads no more.
fn pipe(state: Arc<LinkState>, mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !state.wait_passable() || to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// A loopback listener on a port below the kernel's ephemeral range: a port the fixture picks
/// now and a node binds later must not be handed out meanwhile as some socket's ephemeral port
/// (a node's `--http-listen 127.0.0.1:0`, or the local end of any outgoing connection), which
/// happened in CI ("Address already in use").
fn reserve_port() -> TcpListener {
    let (low, _) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap_or((32768, 60999));
    let (first, last) = (low.saturating_sub(12000).max(1024), low.saturating_sub(1));
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let span = u32::from(last - first + 1);
    let start = (seed ^ std::process::id().wrapping_mul(2654435761)) % span;
    for i in 0..span {
        let port = first + ((start + i) % span) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return listener;
        }
    }
    panic!("no free loopback port in {first}..={last}")
}

pub struct Cluster {
    /// `nodes[i]` has node id `i + 1`.
    pub nodes: Vec<Runnel>,
    /// `(from, to)` → the proxy `from` uses to reach `to`'s raft listener.
    links: BTreeMap<(u64, u64), LinkProxy>,
    /// `(from, to)` → the proxy `from` uses to reach `to`'s Kafka listener.
    data_links: BTreeMap<(u64, u64), LinkProxy>,
    /// Voter id → its raft listener port (broker-only nodes reach the voters there directly).
    controller_ports: BTreeMap<u64, u16>,
    _temp: tempfile::TempDir,
    /// Held while the cluster lives (dropped last): see [`one_at_a_time`].
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One cluster at a time in a test binary (tests run on parallel threads): ports are chosen
/// before the nodes start (bound, released, then bound by the node), so a node starting
/// meanwhile elsewhere in the process could take one, and two clusters on two cores blur what a
/// fault did. `Cluster::start*` takes it; a test that starts plain nodes next to clusters takes
/// it too.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every directed link between `ids`, each a proxy to `port_of(to)`.
fn proxies(ids: &[u64], port_of: impl Fn(u64) -> u16) -> BTreeMap<(u64, u64), LinkProxy> {
    let mut links = BTreeMap::new();
    for &from in ids {
        for &to in ids.iter().filter(|&&to| to != from) {
            links.insert((from, to), LinkProxy::start(SocketAddr::from(([127, 0, 0, 1], port_of(to)))));
        }
    }
    links
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
        let one_at_a_time = one_at_a_time();
        let temp = tempfile::tempdir().expect("temp dir");
        let ids: Vec<u64> = (1..=count).collect();
        // The nodes' ports stay bound until just before the nodes start, so that the proxies'
        // own ephemeral ports (bound meanwhile) cannot land on one of them.
        let reserve = reserve_port;
        // The HTTP ports too: picked and released one by one, a node's HTTP port could be
        // another node's raft or Kafka port released a moment before (seen once in the suite:
        // "binding the HTTP listener ...: Address already in use").
        let reserved: Vec<(u64, [TcpListener; 3])> =
            ids.iter().map(|&id| (id, [reserve(), reserve(), reserve()])).collect();
        let port = |listener: &TcpListener| listener.local_addr().expect("addr").port();
        let ports: BTreeMap<u64, u16> = reserved.iter().map(|(id, [raft, ..])| (*id, port(raft))).collect();
        let kafka_ports: BTreeMap<u64, u16> = reserved.iter().map(|(id, [_, kafka, _])| (*id, port(kafka))).collect();
        let http_ports: BTreeMap<u64, u16> = reserved.iter().map(|(id, [.., http])| (*id, port(http))).collect();
        let links = proxies(&ids, |to| ports[&to]);
        let data_links = proxies(&ids, |to| kafka_ports[&to]);
        drop(reserved);
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
                    "--kafka-listen".to_string(),
                    format!("127.0.0.1:{}", kafka_ports[&id]),
                ];
                // A restart binds the HTTP port again: one below the ephemeral range, unless
                // the test gives its own.
                if !extra_args.contains(&"--http-listen") {
                    args.extend(["--http-listen".to_string(), format!("127.0.0.1:{}", http_ports[&id])]);
                }
                for &peer in ids.iter().filter(|&&peer| peer != id) {
                    args.push("--broker-address-override".to_string());
                    args.push(format!("{peer}={}", data_links[&(id, peer)].addr));
                }
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
        Cluster { nodes, links, data_links, controller_ports: ports, _temp: temp, _one_at_a_time: one_at_a_time }
    }

    /// Where node `id`'s raft listener is bound (not through a proxy).
    pub fn controller_addr(&self, id: u64) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.controller_ports[&id]))
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

    /// Cuts every raft link from and to `id` (the metadata plane only: its data links stay).
    pub fn isolate(&self, id: u64) {
        for ((from, to), link) in &self.links {
            if *from == id || *to == id {
                link.cut();
            }
        }
    }

    /// Restores every link of both planes (cut or black-holed).
    pub fn heal(&self) {
        for link in self.links.values().chain(self.data_links.values()) {
            link.heal();
        }
    }
}

/// Network partitions on the data plane (issue 11): the Kafka links between voters.
impl Cluster {
    fn data_link(&self, from: u64, to: u64) -> &LinkProxy {
        self.data_links
            .get(&(from, to))
            .unwrap_or_else(|| panic!("no data link {from} → {to} (broker-only nodes have none)"))
    }

    /// Cuts the data link `from → to`: `from`'s fetches from `to` (and requests it forwards
    /// there) fail at once; `to` still reaches `from`, and the metadata plane is untouched.
    pub fn cut_data_link(&self, from: u64, to: u64) {
        self.data_link(from, to).cut();
    }

    /// Black-holes the data link `from → to`: `from`'s connections to `to` are accepted and
    /// hang (nothing passes either way) instead of failing.
    pub fn black_hole_data_link(&self, from: u64, to: u64) {
        self.data_link(from, to).black_hole();
    }

    /// Cuts both planes between `a` and `b`, both directions.
    pub fn cut_all_links(&self, a: u64, b: u64) {
        for (from, to) in [(a, b), (b, a)] {
            for links in [&self.links, &self.data_links] {
                if let Some(link) = links.get(&(from, to)) {
                    link.cut();
                }
            }
        }
    }

    /// Cuts every link of both planes from and to `id`: it can reach no other node and none
    /// reaches it, while the test's clients still reach it directly.
    pub fn isolate_fully(&self, id: u64) {
        self.isolate(id);
        for ((from, to), link) in &self.data_links {
            if *from == id || *to == id {
                link.cut();
            }
        }
    }
}

/// Broker-only nodes (`--process-roles broker`, issue 11): observers of the metadata quorum that
/// host partitions. They are not behind link proxies on either plane (`isolate` and `isolate_fully`
/// do not cut them off).
impl Cluster {
    /// Starts a broker-only node with the next node id (after every node so far), `--voters`
    /// naming the voters' raft listeners, its own fixed controller port (so `restart` keeps it),
    /// and `extra_args`; returns its id once it is ready (caught up with the quorum).
    pub fn add_broker_only(&mut self, extra_args: &[&str]) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        // Ports a restart binds again: below the ephemeral range, all held until the node starts
        // (picked and released one by one, two could be the same).
        let reserved = [reserve_port(), reserve_port(), reserve_port()];
        let [controller, kafka, http] = reserved.each_ref().map(|l| l.local_addr().expect("addr").port());
        let mut args = vec![
            "--node-id".to_string(),
            id.to_string(),
            "--process-roles".to_string(),
            "broker".to_string(),
            "--controller-listen".to_string(),
            format!("127.0.0.1:{controller}"),
            "--voters".to_string(),
            self.voters_flag(),
        ];
        for (flag, port) in [("--kafka-listen", kafka), ("--http-listen", http)] {
            if !extra_args.contains(&flag) {
                args.extend([flag.to_string(), format!("127.0.0.1:{port}")]);
            }
        }
        args.extend(extra_args.iter().map(|s| s.to_string()));
        drop(reserved);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let node = Runnel::start_in(&self._temp.path().join(format!("node-{id}")), &args);
        self.nodes.push(node);
        id
    }

    /// The `--voters` value naming the voters' raft listeners (`id@host:port,...`).
    pub fn voters_flag(&self) -> String {
        let voters: Vec<String> =
            self.controller_ports.iter().map(|(voter, port)| format!("{voter}@127.0.0.1:{port}")).collect();
        voters.join(",")
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

/// A planned leader move (issue 13's "leader moves"), every node up: no crash, the old leader
/// stays alive, and whatever it ran for the partition must stop or be fenced.
impl Cluster {
    /// Makes `to` the leader of `topic`-`partition`: the partition's replicas are reordered with
    /// `to` first (an AlterPartitionReassignments over the same replica set, complete at once),
    /// then a preferred ElectLeaders moves the leadership there. Both are asked of `to` itself and
    /// retried until `deadline`; Ok once Metadata names `to` the leader, else what was seen.
    pub fn move_leader(&self, topic: &str, partition: i32, to: u64, deadline: Duration) -> Result<(), String> {
        use kafka_protocol::messages::alter_partition_reassignments_request::{
            ReassignablePartition, ReassignableTopic,
        };
        use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
        use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest, TopicName};
        use kafka_protocol::protocol::StrBytes;

        let name = || TopicName(StrBytes::from_string(topic.to_string()));
        let mut last = String::new();
        let moved = super::wait_until(deadline, || {
            let Some(states) = super::workload::partition_states(&self.bootstrap(), topic) else {
                last = "no metadata".to_string();
                return false;
            };
            let Some(state) = states.into_iter().find(|s| s.partition == partition) else {
                last = format!("{topic} has no partition {partition}");
                return false;
            };
            if state.leader == Some(to) {
                return true;
            }
            if !state.isr.contains(&to) {
                last = format!("{to} is not in the ISR {:?}", state.isr);
                return false;
            }
            let mut conn = super::RawConn::open(self.node(to), "move-leader");
            if state.replicas.first() != Some(&to) {
                let mut replicas = vec![to];
                replicas.extend(state.replicas.iter().filter(|&&r| r != to));
                let partitions = vec![ReassignablePartition::default()
                    .with_partition_index(partition)
                    .with_replicas(Some(replicas.iter().map(|&r| BrokerId(r as i32)).collect()))];
                let request = AlterPartitionReassignmentsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![ReassignableTopic::default().with_name(name()).with_partitions(partitions)]);
                let response = conn.call(0, &request);
                let code = response.responses.first().and_then(|t| t.partitions.first()).map(|p| p.error_code);
                if response.error_code != 0 || code != Some(0) {
                    last = format!("reorder to {replicas:?}: error {} / {code:?}", response.error_code);
                    return false;
                }
            }
            let request =
                ElectLeadersRequest::default().with_election_type(0).with_timeout_ms(10_000).with_topic_partitions(
                    Some(vec![TopicPartitions::default().with_topic(name()).with_partitions(vec![partition])]),
                );
            let response = conn.call(1, &request);
            last = format!("preferred election: {:?}", response.replica_election_results);
            // The election's effect reaches Metadata through the quorum: give it a moment
            // before asking again.
            super::wait_until(Duration::from_secs(2), || leader_of(self, topic, partition) == Some(to))
        });
        if moved {
            Ok(())
        } else {
            Err(format!("{topic}-{partition} not led by {to} within {deadline:?}: {last}"))
        }
    }
}

/// The leader of `topic`-`partition` as a node answers Metadata now.
fn leader_of(cluster: &Cluster, topic: &str, partition: i32) -> Option<u64> {
    let states = super::workload::partition_states(&cluster.bootstrap(), topic)?;
    states.into_iter().find(|s| s.partition == partition)?.leader
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
