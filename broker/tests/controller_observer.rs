//! Tests of observers of the metadata quorum (`QuorumRole::Observer`, a broker-only node's
//! controller): three real voters and an observer in process, over loopback TCP, each with its
//! real on-disk store. Every wait is on a condition under a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use runnel::controller::{
    ApplyOutcome, Controller, ControllerConfig, ControllerError, MetadataImage, MetadataRecord, NodeId, QuorumMembers,
    QuorumRole,
};

const DEADLINE: Duration = Duration::from_secs(30);
const OBSERVER: NodeId = 4;

fn loopback_any() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn create_topic(name: &str, seed: u32) -> MetadataRecord {
    let mut topic_id = [0u8; 16];
    topic_id[..4].copy_from_slice(&seed.to_be_bytes());
    topic_id[15] = 1;
    MetadataRecord::CreateTopic {
        name: name.to_string(),
        topic_id,
        partitions: vec![vec![1]],
        configs: BTreeMap::new(),
        max_broker_partitions: None,
    }
}

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

/// Three voters with snapshots every 4 entries and no log kept behind them, so a late observer
/// can only catch up through InstallSnapshot.
async fn start_voters(dirs: &[tempfile::TempDir]) -> (Vec<Controller>, BTreeMap<NodeId, String>) {
    let listeners: Vec<TcpListener> = dirs.iter().map(|_| TcpListener::bind(loopback_any()).expect("bind")).collect();
    let voters: BTreeMap<NodeId, String> =
        listeners.iter().zip(1..).map(|(l, id)| (id, l.local_addr().expect("addr").to_string())).collect();
    let mut controllers = Vec::new();
    for ((listener, dir), id) in listeners.into_iter().zip(dirs).zip(1..) {
        let addr = listener.local_addr().expect("addr");
        let mut config = ControllerConfig::new(id, addr, voters.clone(), dir.path());
        config.snapshot_interval_entries = 4;
        config.log_entries_kept_after_snapshot = 0;
        controllers.push(Controller::start_with_listener(config, listener).await.expect("start voter"));
    }
    for c in &controllers {
        c.wait_ready(DEADLINE).await.expect("voter ready");
    }
    (controllers, voters)
}

fn observer_config(voters: &BTreeMap<NodeId, String>, dir: &tempfile::TempDir) -> ControllerConfig {
    let mut config = ControllerConfig::new(OBSERVER, loopback_any(), voters.clone(), dir.path());
    config.role = QuorumRole::Observer;
    config
}

fn quorum_of_three_and_observer() -> QuorumMembers {
    QuorumMembers { voters: BTreeSet::from([1, 2, 3]), observers: BTreeSet::from([OBSERVER]) }
}

// Proves an observer that starts after the log was purged behind a snapshot catches up (its
// wait_ready means it applied the leader's committed index), appears only as an observer in
// every member's membership, rejoins after a restart without a new membership entry, forwards
// proposals, and follows a new leader after the old one stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_catches_up_from_a_snapshot_and_never_joins_the_voters() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let (mut voters, addrs) = start_voters(&dirs).await;
    for i in 0..30u32 {
        let outcome = voters[0].propose(create_topic(&format!("t{i}"), i)).await.expect("propose");
        assert_eq!(outcome, ApplyOutcome::Applied);
    }

    let observer_dir = tempfile::tempdir().expect("tempdir");
    let observer = Controller::start(observer_config(&addrs, &observer_dir)).await.expect("start observer");
    observer.wait_ready(DEADLINE).await.expect("observer ready");
    let leader = voters[0].leader_id().expect("a leader");
    let leader_image = voters.iter().find(|c| c.node_id() == leader).expect("leader").image();
    let image = observer.image();
    assert!(image.applied_index >= leader_image.applied_index, "ready before catching up: {image:?}");
    assert_eq!(image.topics, leader_image.topics);
    assert!(observer_dir.path().join("metadata").join("snapshot.bin").exists(), "caught up without a snapshot");
    assert_eq!(observer.leader_id(), Some(leader));
    for c in voters.iter().chain([&observer]) {
        wait_image(c, |i| i.applied_index >= image.applied_index).await;
        assert_eq!(c.quorum(), quorum_of_three_and_observer(), "membership on node {}", c.node_id());
    }

    // A restart on the same directory and address rejoins without writing a membership entry.
    let applied_before = observer.image().applied_index;
    let restart_config =
        ControllerConfig { listen_addr: observer.local_addr(), ..observer_config(&addrs, &observer_dir) };
    observer.shutdown().await.expect("shutdown observer");
    let observer = Controller::start(restart_config).await.expect("restart observer");
    observer.wait_ready(DEADLINE).await.expect("restarted observer ready");
    for c in &voters {
        assert_eq!(c.image().applied_index, applied_before, "the rejoin wrote an entry on node {}", c.node_id());
    }

    // Proposals through the observer reach the leader and come back applied.
    let outcome = observer.propose(create_topic("through-observer", 100)).await.expect("forwarded propose");
    assert_eq!(outcome, ApplyOutcome::Applied);
    assert!(observer.image().topics.contains_key("through-observer"));

    // The leader stops: the two remaining voters elect one, the observer follows it.
    let position = voters.iter().position(|c| c.node_id() == leader).expect("leader");
    voters.remove(position).shutdown().await.expect("shutdown leader");
    let outcome = observer.propose(create_topic("after-leader-change", 101)).await.expect("propose after failover");
    assert_eq!(outcome, ApplyOutcome::Applied);
    let new_leader = observer.leader_id().expect("a new leader");
    assert_ne!(new_leader, leader);
    assert_ne!(new_leader, OBSERVER);
    assert_eq!(observer.quorum(), quorum_of_three_and_observer());

    observer.shutdown().await.expect("shutdown");
    for c in voters {
        c.shutdown().await.expect("shutdown");
    }
}

// Proves a misconfigured observer is refused: one listed among the voters at start, one whose
// id the quorum already has as a voter when it asks to join, one on a wildcard address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_observers_are_refused() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let (voters, addrs) = start_voters(&dirs).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let mut listed = observer_config(&addrs, &dir);
    listed.node_id = 2;
    assert!(matches!(Controller::start(listed).await, Err(ControllerError::ObserverIsAVoter { node_id: 2 })));

    // Only voters 1 and 3 configured: node 2 is an observer in its own eyes, a voter in the quorum's.
    let mut unlisted = observer_config(&addrs, &dir);
    unlisted.node_id = 2;
    unlisted.voters.remove(&2);
    let impostor = Controller::start(unlisted).await.expect("start");
    assert!(matches!(impostor.wait_ready(DEADLINE).await, Err(ControllerError::ObserverIsAVoter { node_id: 2 })));
    impostor.shutdown().await.expect("shutdown");

    let wildcard =
        ControllerConfig { listen_addr: SocketAddr::from(([0, 0, 0, 0], 0)), ..observer_config(&addrs, &dir) };
    assert!(matches!(Controller::start(wildcard).await, Err(ControllerError::ObserverAddrUnspecified { .. })));
    for c in voters {
        assert_eq!(c.quorum().voters, BTreeSet::from([1, 2, 3]));
        c.shutdown().await.expect("shutdown");
    }
}
