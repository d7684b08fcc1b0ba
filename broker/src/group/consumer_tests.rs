use super::*;
use crate::controller::{PartitionImage, TopicImage};
use crate::group::offsets::{OffsetError, StoredConsumerGroup};

fn topic(image: &mut MetadataImage, name: &str, id: u8, partitions: u32) {
    image.insert_topic(TopicImage {
        name: name.to_string(),
        topic_id: [id; 16],
        partitions: (0..partitions)
            .map(|p| PartitionImage {
                partition: p,
                leader: Some(1),
                leader_epoch: 0,
                partition_epoch: 0,
                replicas: vec![1],
                isr: vec![1],
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            })
            .collect(),
        configs: Default::default(),
    });
    image.applied_index += 1;
}

fn groups() -> ConsumerGroups {
    ConsumerGroups::new(ConsumerGroupConfig { heartbeat_interval_ms: 100, ..Default::default() })
}

struct Client {
    id: String,
    epoch: i32,
    owned: Assignment,
    topics: Vec<String>,
    instance: Option<String>,
}

impl Client {
    fn new(id: &str, topics: &[&str]) -> Client {
        Client {
            id: id.to_string(),
            epoch: 0,
            owned: Assignment::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            instance: None,
        }
    }

    fn request(&self) -> HeartbeatRequest {
        HeartbeatRequest {
            version: 1,
            group_id: "g".to_string(),
            member_id: self.id.clone(),
            member_epoch: self.epoch,
            instance_id: self.instance.clone(),
            rebalance_timeout_ms: if self.epoch == 0 { 60_000 } else { -1 },
            subscribed_topic_names: (self.epoch == 0).then(|| self.topics.clone()),
            owned: Some(self.owned.clone()),
            ..Default::default()
        }
    }

    /// One heartbeat; the client takes the assignment as what it owns (revoking at once).
    fn beat(&mut self, groups: &ConsumerGroups, image: &MetadataImage, now: Instant) -> HeartbeatAnswer {
        let answer = heartbeat(groups, self.request(), image, now);
        if answer.error.is_none() {
            self.epoch = answer.member_epoch;
            if let Some(assignment) = &answer.assignment {
                self.owned = assignment.clone();
            }
        }
        answer
    }

    fn count(&self) -> usize {
        self.owned.values().map(|p| p.len()).sum()
    }
}

fn heartbeat(
    groups: &ConsumerGroups,
    request: HeartbeatRequest,
    image: &MetadataImage,
    now: Instant,
) -> HeartbeatAnswer {
    match groups.begin(request, image, now) {
        Begin::Answer(answer) | Begin::Left(answer, _) => answer,
        Begin::Continue(pending) => {
            let outcome = pending.job.as_ref().map(|job| groups.run_builtin(job));
            groups.finish(pending, outcome, now).0
        }
    }
}

/// Every partition owned by exactly one client, as the clients see it.
fn assert_disjoint(clients: &[&Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for tp in flatten(&c.owned) {
            assert!(seen.insert(tp), "{tp:?} owned twice");
        }
    }
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 4);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    let answer = a.beat(&g, &image, now);
    assert_eq!(answer.error, None);
    assert_eq!((a.epoch, a.count()), (1, 4));
    let mut b = Client::new("b", &["t"]);
    b.beat(&g, &image, now);
    // The target moved two partitions to b, but a still owns them: b waits at the new epoch.
    assert_eq!((b.epoch, b.count()), (2, 0));
    assert_disjoint(&[&a, &b]);
    assert_eq!(g.describe("g").unwrap().state, ConsumerGroupState::Reconciling);
    // a is told to keep two (it revokes the others) and stays at its epoch until it reports so.
    let answer = a.beat(&g, &image, now);
    assert_eq!((answer.member_epoch, a.count()), (1, 2));
    assert_disjoint(&[&a, &b]);
    // a's next heartbeat reports the smaller set: it moves to epoch 2; b then gets the rest.
    a.beat(&g, &image, now);
    assert_eq!(a.epoch, 2);
    b.beat(&g, &image, now);
    assert_eq!((b.epoch, b.count()), (2, 2));
    assert_disjoint(&[&a, &b]);
    assert_eq!(g.describe("g").unwrap().state, ConsumerGroupState::Stable);
}

#[test]
fn a_member_that_does_not_report_its_revocation_keeps_its_partitions() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    let mut b = Client::new("b", &["t"]);
    b.beat(&g, &image, now);
    // a hears it must revoke one, but keeps claiming both (a slow callback).
    let mut request = a.request();
    request.owned = Some(a.owned.clone());
    heartbeat(&g, request.clone(), &image, now);
    heartbeat(&g, request, &image, now);
    b.beat(&g, &image, now);
    assert_eq!(b.count(), 0, "b got a partition a has not released");
    // Past a's rebalance timeout (60 s; b heartbeats meanwhile) the sweep removes a; b gets
    // everything.
    b.beat(&g, &image, now + Duration::from_secs(40));
    g.sweep(now + Duration::from_secs(61));
    b.beat(&g, &image, now + Duration::from_secs(61));
    assert_eq!(b.count(), 2);
}

#[test]
fn leaving_releases_partitions_to_the_others() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 3);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    let mut b = Client::new("b", &["t"]);
    a.beat(&g, &image, now);
    b.beat(&g, &image, now);
    for _ in 0..3 {
        a.beat(&g, &image, now);
        b.beat(&g, &image, now);
    }
    assert_eq!(a.count() + b.count(), 3);
    let mut leave = a.request();
    leave.member_epoch = LEAVE_EPOCH;
    assert_eq!(heartbeat(&g, leave, &image, now).member_epoch, LEAVE_EPOCH);
    b.beat(&g, &image, now);
    assert_eq!(b.count(), 3);
}

#[test]
fn epochs_are_fenced_as_kafka_does() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    let mut request = a.request();
    request.member_epoch = 7;
    assert_eq!(heartbeat(&g, request, &image, now).error.unwrap().0, ResponseError::FencedMemberEpoch);
    // The previous epoch with a subset of the assignment is a lost answer: accepted.
    let mut b = Client::new("b", &["t"]);
    b.beat(&g, &image, now);
    a.beat(&g, &image, now);
    a.beat(&g, &image, now);
    assert_eq!(a.epoch, 2);
    let mut request = a.request();
    request.member_epoch = 1;
    assert_eq!(heartbeat(&g, request.clone(), &image, now).error, None);
    request.member_epoch = 0;
    request.member_id = "nobody".into();
    request.subscribed_topic_names = None;
    assert_eq!(heartbeat(&g, request, &image, now).error.unwrap().0, ResponseError::InvalidRequest);
    let mut unknown = a.request();
    unknown.member_id = "ghost".into();
    assert_eq!(heartbeat(&g, unknown, &image, now).error.unwrap().0, ResponseError::UnknownMemberId);
}

#[test]
fn a_static_member_gets_its_partitions_back_under_a_new_member_id() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.instance = Some("i-1".into());
    a.beat(&g, &image, now);
    let mut b = Client::new("b", &["t"]);
    b.beat(&g, &image, now);
    a.beat(&g, &image, now);
    a.beat(&g, &image, now);
    b.beat(&g, &image, now);
    let a_owned = a.owned.clone();
    assert_eq!(a.count(), 1);
    let mut leave = a.request();
    leave.member_epoch = STATIC_LEAVE_EPOCH;
    assert_eq!(heartbeat(&g, leave, &image, now).member_epoch, STATIC_LEAVE_EPOCH);
    // b does not get a's partition while a is away.
    b.beat(&g, &image, now);
    assert_eq!(b.count(), 1);
    // Another process with the same instance id while a is active is refused; after the
    // static leave it takes a's place and partitions.
    let mut a2 = Client::new("a2", &["t"]);
    a2.instance = Some("i-1".into());
    let answer = a2.beat(&g, &image, now);
    assert_eq!(answer.error, None);
    assert_eq!(a2.owned, a_owned);
    let mut a3 = Client::new("a3", &["t"]);
    a3.instance = Some("i-1".into());
    assert_eq!(a3.beat(&g, &image, now).error.unwrap().0, ResponseError::UnreleasedInstanceId);
}

#[test]
fn regex_subscriptions_follow_topic_creation() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "orders-eu", 1, 2);
    topic(&mut image, "payments", 2, 2);
    let now = Instant::now();
    let mut request = Client::new("a", &[]).request();
    request.subscribed_topic_names = None;
    request.subscribed_topic_regex = Some("orders-.*".into());
    let answer = heartbeat(&g, request.clone(), &image, now);
    assert_eq!(answer.assignment.unwrap().values().map(|p| p.len()).sum::<usize>(), 2);
    topic(&mut image, "orders-us", 3, 3);
    let mut next = request.clone();
    next.member_epoch = answer.member_epoch;
    next.subscribed_topic_regex = None;
    next.rebalance_timeout_ms = -1;
    let answer = heartbeat(&g, next, &image, now);
    let assigned = answer.assignment.expect("the new topic changes the assignment");
    assert_eq!(assigned.values().map(|p| p.len()).sum::<usize>(), 5);
    assert!(!assigned.contains_key(&[2; 16]));

    request.member_id = "b".into();
    request.subscribed_topic_regex = Some("orders-(".into());
    assert_eq!(heartbeat(&g, request, &image, now).error.unwrap().0, ResponseError::InvalidRegularExpression);
}

#[test]
fn an_unknown_assignor_is_refused_and_a_known_one_is_used() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "x", 1, 2);
    topic(&mut image, "y", 2, 2);
    let now = Instant::now();
    let mut request = Client::new("a", &["x", "y"]).request();
    request.server_assignor = Some("sticky-by-magic".into());
    assert_eq!(heartbeat(&g, request.clone(), &image, now).error.unwrap().0, ResponseError::UnsupportedAssignor);
    request.server_assignor = Some(assignor::RANGE.into());
    heartbeat(&g, request.clone(), &image, now);
    request.member_id = "b".into();
    heartbeat(&g, request, &image, now);
    let view = g.describe("g").unwrap();
    assert_eq!(view.assignor, assignor::RANGE);
    // Range co-partitions: each member's target has the same partition numbers of x and y.
    for member in &view.members {
        let target = &member.target_assignment;
        assert_eq!(target[&[1; 16]], target[&[2; 16]]);
    }
}

#[test]
fn sessions_expire_and_the_group_limit_holds() {
    let g = ConsumerGroups::new(ConsumerGroupConfig { max_size: 2, ..Default::default() });
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    Client::new("a", &["t"]).beat(&g, &image, now);
    Client::new("b", &["t"]).beat(&g, &image, now);
    let answer = Client::new("c", &["t"]).beat(&g, &image, now);
    assert_eq!(answer.error.unwrap().0, ResponseError::GroupMaxSizeReached);
    g.sweep(now + Duration::from_millis(SESSION_TIMEOUT_MS as u64 + 1));
    assert_eq!(g.describe("g").unwrap().state, ConsumerGroupState::Empty);
    assert_eq!(Client::new("c", &["t"]).beat(&g, &image, now).error, None);
}

#[test]
fn offset_commits_check_the_member_epoch() {
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 1);
    let now = Instant::now();
    assert_eq!(g.validate_member("g", "", -1, ResponseError::StaleMemberEpoch), None);
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    let stale = ResponseError::StaleMemberEpoch;
    assert_eq!(g.validate_member("g", "a", a.epoch, stale), Some(Ok(())));
    assert_eq!(g.validate_member("g", "a", a.epoch - 1, stale), Some(Err(stale)));
    assert_eq!(g.validate_member("g", "zed", 1, stale), Some(Err(ResponseError::UnknownMemberId)));
    assert_eq!(g.validate_member("g", "", -1, stale), Some(Err(ResponseError::UnknownMemberId)));
}

#[test]
fn many_members_joining_and_leaving_never_share_a_partition() {
    // A deterministic schedule of joins, leaves and heartbeats in varying order.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 12);
    topic(&mut image, "u", 2, 5);
    let now = Instant::now();
    let mut clients: Vec<Client> = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for step in 0..400 {
        match next() % 10 {
            0 if clients.len() < 6 => clients.push(Client::new(&format!("m{step}"), &["t", "u"])),
            1 if clients.len() > 1 => {
                let c = clients.remove(next() as usize % clients.len());
                let mut leave = c.request();
                leave.member_epoch = LEAVE_EPOCH;
                heartbeat(&g, leave, &image, now);
            }
            _ if !clients.is_empty() => {
                let i = next() as usize % clients.len();
                let answer = clients[i].beat(&g, &image, now);
                assert_eq!(answer.error, None, "step {step}");
            }
            _ => {}
        }
        let refs: Vec<&Client> = clients.iter().collect();
        assert_disjoint(&refs);
    }
    // Everyone heartbeats until stable: every partition owned, balanced.
    for _ in 0..4 {
        for c in clients.iter_mut() {
            c.beat(&g, &image, now);
        }
    }
    assert_eq!(g.describe("g").unwrap().state, ConsumerGroupState::Stable);
    let total: usize = clients.iter().map(|c| c.count()).sum();
    assert_eq!(total, 17);
    let (min, max) =
        (clients.iter().map(|c| c.count()).min().unwrap(), clients.iter().map(|c| c.count()).max().unwrap());
    assert!(max - min <= 1, "unbalanced: {min}..{max}");
}

#[test]
fn a_group_restored_from_its_records_goes_on_without_a_rejoin() {
    // Proves the records written for every change rebuild the group on a new coordinator:
    // members keep their ids, epochs and partitions and go on heartbeating; a member that
    // left is gone; the next join reconciles as before.
    let written: Arc<Mutex<Vec<ConsumerRecord>>> = Arc::default();
    let g = groups();
    let sink = written.clone();
    g.set_store(Box::new(move |group, records| {
        assert_eq!(group, "g");
        sink.lock().unwrap().extend(records);
        Err(OffsetError::NotCoordinator { partition: 0 })
    }));
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 6);
    let now = Instant::now();
    let (mut a, mut b, mut c) = (Client::new("a", &["t"]), Client::new("b", &["t"]), Client::new("c", &["t"]));
    for _ in 0..3 {
        a.beat(&g, &image, now);
        b.beat(&g, &image, now);
        c.beat(&g, &image, now);
    }
    let mut leave = c.request();
    leave.member_epoch = LEAVE_EPOCH;
    heartbeat(&g, leave, &image, now);
    for _ in 0..3 {
        a.beat(&g, &image, now);
        b.beat(&g, &image, now);
    }
    assert_eq!(a.count() + b.count(), 6);
    let before = g.describe("g").unwrap();

    let mut stored = None;
    for record in written.lock().unwrap().drain(..) {
        StoredConsumerGroup::apply(&mut stored, record);
    }
    let restored = groups();
    restored.restore(&|_| true, vec![("g".to_string(), stored.expect("records written"))], now);
    let after = restored.describe("g").unwrap();
    assert_eq!((after.group_epoch, after.assignment_epoch), (before.group_epoch, before.assignment_epoch));
    assert_eq!(after.members.len(), 2);
    for (x, y) in before.members.iter().zip(&after.members) {
        assert_eq!((&x.member_id, x.member_epoch, &x.assignment), (&y.member_id, y.member_epoch, &y.assignment));
        assert_eq!(x.target_assignment, y.target_assignment);
    }
    // The members heartbeat on at their epochs: no error, no change, no epoch bump.
    let (ea, eb) = (a.epoch, b.epoch);
    assert_eq!(a.beat(&restored, &image, now).error, None);
    assert_eq!(b.beat(&restored, &image, now).error, None);
    assert_eq!((a.epoch, b.epoch), (ea, eb));
    assert_eq!(restored.describe("g").unwrap().group_epoch, before.group_epoch);
    assert_eq!(restored.describe("g").unwrap().state, ConsumerGroupState::Stable);
}
