//! Tests of the metadata quorum (`runnel::controller`): a real openraft node (or three, over
//! loopback TCP) with its real on-disk store in a temporary directory.
//!
//! No test sleeps to synchronise: every wait is on a condition (the image watch channel, a
//! controller call) under a deadline. The only polling loop is `start_when_unlocked`, which waits
//! for a "crashed" controller to release its metadata directory.
//! Two tests run on tokio's default current-thread runtime, the others on a multi-thread one, so
//! both kinds of callers are covered.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runnel::controller::{
    ApplyOutcome, Controller, ControllerConfig, ControllerError, MetadataImage, MetadataRecord, NodeId,
    METADATA_LOG_FILE,
};
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(30);

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=runnel=debug,openraft=info`).
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn loopback_any() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn create_topic(name: &str, seed: u32, partitions: Vec<Vec<NodeId>>) -> MetadataRecord {
    let mut topic_id = [0u8; 16];
    topic_id[..4].copy_from_slice(&seed.to_be_bytes());
    topic_id[15] = 1;
    MetadataRecord::CreateTopic {
        name: name.to_string(),
        topic_id,
        partitions,
        configs: BTreeMap::new(),
        max_broker_partitions: None,
    }
}

fn register_broker(node_id: NodeId) -> MetadataRecord {
    MetadataRecord::RegisterBroker { node_id, host: "localhost".to_string(), port: 9092, rack: None, listeners: vec![] }
}

/// Waits until `controller`'s image satisfies `ready`, and returns that image.
async fn wait_image(controller: &Controller, ready: impl Fn(&MetadataImage) -> bool) -> Arc<MetadataImage> {
    let mut rx = controller.subscribe();
    let wait = async {
        loop {
            let image = rx.borrow_and_update().clone();
            if ready(&image) {
                return image;
            }
            rx.changed().await.expect("controller stopped while waiting for its image");
        }
    };
    tokio::time::timeout(DEADLINE, wait).await.expect("image condition not reached in time")
}

/// Starts a controller on a directory whose previous owner was dropped without `shutdown`: its
/// raft tasks wind down on their own and release the directory lock shortly after.
async fn start_when_unlocked(config: ControllerConfig) -> Controller {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match Controller::start(config.clone()).await {
            Ok(controller) => return controller,
            Err(ControllerError::DataDirLocked { .. }) if Instant::now() < deadline => {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("restart failed: {e:?}"),
        }
    }
}

/// The frames of the metadata log: `(offset, length)` of each `[u32 len][u32 crc][payload]`.
fn log_frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        if pos + 8 + len > bytes.len() {
            break;
        }
        frames.push((pos, 8 + len));
        pos += 8 + len;
    }
    frames
}

/// Appends a damaged copy of the last log frame, as a crash in the middle of writing one more
/// append (never acknowledged, since acknowledgement follows fsync) would leave it.
fn append_torn_frame(log: &Path, damage: impl FnOnce(&mut Vec<u8>)) {
    let bytes = std::fs::read(log).expect("read log");
    let (offset, len) = *log_frames(&bytes).last().expect("log has frames");
    let mut torn = bytes[offset..offset + len].to_vec();
    damage(&mut torn);
    let mut file = std::fs::OpenOptions::new().append(true).open(log).expect("open log");
    file.write_all(&torn).expect("append torn frame");
}

fn voters_on(listeners: &[TcpListener]) -> BTreeMap<NodeId, String> {
    listeners.iter().zip(1..).map(|(l, id)| (id, l.local_addr().expect("local addr").to_string())).collect()
}

/// Starts voters 1..=n on pre-bound listeners (so every voter knows every address up front).
async fn start_cluster(
    dirs: &[tempfile::TempDir],
    tune: impl Fn(&mut ControllerConfig),
) -> (Vec<Controller>, Vec<ControllerConfig>) {
    let listeners: Vec<TcpListener> = dirs.iter().map(|_| TcpListener::bind(loopback_any()).expect("bind")).collect();
    let voters = voters_on(&listeners);
    let mut controllers = Vec::new();
    let mut configs = Vec::new();
    for ((listener, dir), id) in listeners.into_iter().zip(dirs).zip(1..) {
        let addr = listener.local_addr().expect("local addr");
        let mut config = ControllerConfig::new(id, addr, voters.clone(), dir.path());
        tune(&mut config);
        controllers.push(Controller::start_with_listener(config.clone(), listener).await.expect("start voter"));
        configs.push(config);
    }
    for c in &controllers {
        c.wait_ready(DEADLINE).await.expect("voter ready");
    }
    (controllers, configs)
}

// Proves a single node commits and applies records, and a restart from the same directory
// rebuilds the same image from disk alone, before any new leader term.
#[tokio::test]
async fn single_node_restart_keeps_topics() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ControllerConfig::single_node(1, loopback_any(), dir.path());
    let controller = Controller::start(config.clone()).await.expect("start");
    controller.wait_ready(DEADLINE).await.expect("ready");
    assert_eq!(controller.leader_id(), Some(1));

    assert_eq!(controller.propose(register_broker(1)).await.expect("register"), ApplyOutcome::Applied);
    // Live (unfenced), so it leads the partitions it is the replica of.
    let broker_epoch = controller.image().brokers[&1].broker_epoch;
    let unfence = MetadataRecord::UnfenceBroker { node_id: 1, broker_epoch };
    assert_eq!(controller.propose(unfence).await.expect("unfence"), ApplyOutcome::Applied);
    let create = create_topic("orders", 1, vec![vec![1], vec![1], vec![1]]);
    assert_eq!(controller.propose(create.clone()).await.expect("create"), ApplyOutcome::Applied);
    assert_eq!(controller.propose(create).await.expect("create again"), ApplyOutcome::TopicAlreadyExists);

    let before = controller.image();
    let orders = before.topic("orders").expect("topic in image");
    assert_eq!(orders.partitions.len(), 3);
    assert_eq!(before.partition("orders", 2).and_then(|p| p.leader), Some(1));
    assert_eq!(before.brokers.get(&1).map(|b| b.port), Some(9092));
    controller.shutdown().await.expect("shutdown");

    let mut config = config;
    config.listen_addr = loopback_any();
    let restarted = Controller::start(config).await.expect("restart");
    // Re-applied from the committed log during start, so visible before wait_ready. A node that was
    // the leader of its committed term resumes that term without a new blank entry: same index.
    assert_eq!(*restarted.image(), *before);
    restarted.wait_ready(DEADLINE).await.expect("ready after restart");
    assert_eq!(*restarted.image(), *before);
    let outcome = restarted.propose(MetadataRecord::DeleteTopic { name: "orders".into() }).await.expect("delete");
    assert_eq!(outcome, ApplyOutcome::Applied);
    assert!(restarted.image().topic("orders").is_none());
    restarted.shutdown().await.expect("shutdown");
}

// Proves snapshots are built and the log behind them purged, and a restart from snapshot + log
// tail gives the same image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_restart_from_snapshot() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = ControllerConfig::single_node(1, loopback_any(), dir.path());
    config.snapshot_interval_entries = 5;
    config.log_entries_kept_after_snapshot = 2;
    let controller = Controller::start(config.clone()).await.expect("start");
    controller.wait_ready(DEADLINE).await.expect("ready");
    for i in 0..23u32 {
        let outcome = controller.propose(create_topic(&format!("t{i}"), i, vec![vec![1]])).await.expect("create");
        assert_eq!(outcome, ApplyOutcome::Applied);
    }
    let before = controller.image();
    controller.shutdown().await.expect("shutdown");

    let metadata = dir.path().join("metadata");
    assert!(metadata.join("snapshot.bin").exists(), "a snapshot was written");
    let log = std::fs::read(metadata.join(METADATA_LOG_FILE)).expect("read log");
    let entries = log_frames(&log).len() - 1; // minus the header frame; one frame per append
    assert!(entries < 23, "the log was purged behind the snapshot ({entries} append frames left)");

    config.listen_addr = loopback_any();
    let restarted = Controller::start(config).await.expect("restart");
    assert_eq!(*restarted.image(), *before);
    restarted.shutdown().await.expect("shutdown");
}

// Proves every acknowledged proposal survives a crash (no shutdown) followed by a torn write at
// the end of the log: a short last frame, then a last frame with a bad CRC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_crash_keeps_acknowledged_records() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ControllerConfig::single_node(1, loopback_any(), dir.path());
    let log = dir.path().join("metadata").join(METADATA_LOG_FILE);
    let mut acknowledged: Vec<String> = Vec::new();
    let mut next = 0u32;
    let damages: [fn(&mut Vec<u8>); 2] = [
        |frame| frame.truncate(frame.len() - 3),
        |frame| {
            let last = frame.len() - 1;
            frame[last] ^= 0x5a;
        },
    ];
    let restart_config = || ControllerConfig { listen_addr: loopback_any(), ..config.clone() };
    let mut controller = Controller::start(restart_config()).await.expect("start");
    for damage in damages {
        controller.wait_ready(DEADLINE).await.expect("ready");
        for name in &acknowledged {
            assert!(controller.image().topic(name).is_some(), "acknowledged topic {name} lost");
        }
        for _ in 0..40 {
            let name = format!("t{next}");
            let record = create_topic(&name, next, vec![vec![1]]);
            next += 1;
            if let Ok(ApplyOutcome::Applied) = controller.propose(record).await {
                acknowledged.push(name);
            }
        }
        assert_eq!(acknowledged.len() as u32, next, "a single healthy node acknowledges every proposal");
        // Crash: no shutdown. Dropping the last handle stops the raft tasks; nothing is written
        // beyond what was fsynced before each acknowledgement (an idle single node writes nothing).
        drop(controller);
        append_torn_frame(&log, damage);
        controller = start_when_unlocked(restart_config()).await;
    }
    controller.wait_ready(DEADLINE).await.expect("ready");
    let image = controller.image();
    for name in &acknowledged {
        assert!(image.topic(name).is_some(), "acknowledged topic {name} lost");
    }
    assert_eq!(image.topics.len(), acknowledged.len());
    controller.shutdown().await.expect("shutdown");
}

// Proves three voters over loopback TCP converge (proposals through the leader and forwarded from
// followers), keep committing with one voter stopped, and the stopped voter catches up on restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_converge_and_survive_one_down() {
    init_tracing();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let (mut controllers, configs) = start_cluster(&dirs, |_| {}).await;
    let leader = controllers[0].leader_id().expect("leader known");
    let leader_pos = controllers.iter().position(|c| c.node_id() == leader).expect("leader is a voter");
    let follower_pos = (leader_pos + 1) % 3;

    let outcome = controllers[leader_pos].propose(create_topic("via-leader", 1, vec![vec![1, 2, 3]])).await;
    assert_eq!(outcome.expect("propose on leader"), ApplyOutcome::Applied);
    let outcome = controllers[follower_pos].propose(create_topic("via-follower", 2, vec![vec![2, 3, 1]])).await;
    assert_eq!(outcome.expect("forwarded propose"), ApplyOutcome::Applied);
    // The forwarding node has applied the record by the time propose returns.
    assert!(controllers[follower_pos].image().topic("via-follower").is_some());
    let outcome = controllers[follower_pos].propose(create_topic("via-leader", 3, vec![vec![1]])).await;
    assert_eq!(outcome.expect("forwarded duplicate"), ApplyOutcome::TopicAlreadyExists);

    let reference = controllers[leader_pos].image();
    for c in &controllers {
        let image = wait_image(c, |i| i.applied_index >= reference.applied_index).await;
        assert_eq!(image.topics, reference.topics, "node {} diverged", c.node_id());
    }

    // Stop the leader: the two others elect a new one and still commit (a majority of three).
    let stopped = controllers.remove(leader_pos);
    let stopped_id = stopped.node_id();
    stopped.shutdown().await.expect("shutdown leader");
    for (i, c) in controllers.iter().enumerate() {
        let outcome = c.propose(create_topic(&format!("after-stop-{i}"), 10 + i as u32, vec![vec![1]])).await;
        assert_eq!(outcome.expect("propose with one voter down"), ApplyOutcome::Applied);
    }
    let new_leader = controllers[0].leader_id().expect("new leader");
    assert_ne!(new_leader, stopped_id);
    for c in &controllers {
        let image = wait_image(c, |i| i.topic("after-stop-0").is_some() && i.topic("after-stop-1").is_some()).await;
        assert_eq!(image.topics.len(), 4);
    }

    // The stopped voter restarts on its old address and catches up.
    let config = configs.into_iter().find(|c| c.node_id == stopped_id).expect("config");
    let restarted = Controller::start(config).await.expect("restart stopped voter");
    restarted.wait_ready(DEADLINE).await.expect("ready after restart");
    let image = wait_image(&restarted, |i| i.topics.len() == 4).await;
    assert_eq!(image.topics, controllers[0].image().topics);

    restarted.shutdown().await.expect("shutdown");
    for c in controllers {
        c.shutdown().await.expect("shutdown");
    }
}

// Proves a voter that missed entries already purged behind a snapshot catches up (InstallSnapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_voter_catches_up_from_snapshot() {
    init_tracing();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let (mut controllers, configs) = start_cluster(&dirs, |c| {
        c.snapshot_interval_entries = 4;
        c.log_entries_kept_after_snapshot = 0;
    })
    .await;
    let leader = controllers[0].leader_id().expect("leader known");
    let lagging_pos = controllers.iter().position(|c| c.node_id() != leader).expect("a follower");
    let lagging = controllers.remove(lagging_pos);
    let lagging_id = lagging.node_id();
    lagging.shutdown().await.expect("shutdown follower");

    for i in 0..30u32 {
        let outcome = controllers[0].propose(create_topic(&format!("t{i}"), i, vec![vec![1]])).await;
        assert_eq!(outcome.expect("propose"), ApplyOutcome::Applied);
    }
    let reference = controllers[0].image();

    let config = configs.into_iter().find(|c| c.node_id == lagging_id).expect("config");
    let restarted = Controller::start(config).await.expect("restart lagging voter");
    let image = wait_image(&restarted, |i| i.applied_index >= reference.applied_index).await;
    assert_eq!(image.topics, reference.topics);
    assert!(dirs[lagging_pos].path().join("metadata").join("snapshot.bin").exists());

    restarted.shutdown().await.expect("shutdown");
    for c in controllers {
        c.shutdown().await.expect("shutdown");
    }
}

// Proves a malformed or oversized frame closes only that connection; the node keeps serving.
#[tokio::test]
async fn malformed_rpc_frames_close_only_their_connection() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let controller =
        Controller::start(ControllerConfig::single_node(1, loopback_any(), dir.path())).await.expect("start");
    controller.wait_ready(DEADLINE).await.expect("ready");
    let addr = controller.local_addr();

    let garbage: [&[u8]; 2] = [
        &[0xff, 0xff, 0xff, 0xff, 1, 2, 3],          // length far above the frame limit
        &[0, 0, 0, 5, b'n', b'o', b'p', b'e', b'!'], // not a request
    ];
    for bytes in garbage {
        let addr_clone = addr;
        let bytes = bytes.to_vec();
        let closed = tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(addr_clone).expect("connect");
            stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
            stream.write_all(&bytes).expect("write");
            let mut buf = [0u8; 16];
            stream.read(&mut buf).map(|n| n == 0).unwrap_or(true)
        })
        .await
        .expect("join");
        assert!(closed, "the server closed the malformed connection without answering");
    }
    let outcome = controller.propose(register_broker(1)).await.expect("still serving");
    assert_eq!(outcome, ApplyOutcome::Applied);
    controller.shutdown().await.expect("shutdown");
}
