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
    _temp: tempfile::TempDir,
}

impl Cluster {
    /// Starts `count` voters (node ids 1..=count), each with `extra_args`, and waits until all
    /// are ready (each has caught up with the quorum).
    pub fn start(count: u64, extra_args: &[&str]) -> Cluster {
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
        Cluster { nodes, links, _temp: temp }
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
