use super::*;
use crate::controller::{PartitionImage, TopicImage};
use crate::group::embedded;
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

#[derive(Clone)]
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
fn a_member_reporting_nothing_before_it_took_its_first_assignment_releases_nothing() {
    // Regression: librdkafka, until it has taken its first assignment, reports owning nothing
    // in every heartbeat, and then takes that assignment. Read as a release, such a report gave
    // the partitions the new target moves away to another member before this one had even
    // taken them: both consumed them (kafka_consumer_protocol, 3 runs in 56).
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 6);
    let now = Instant::now();
    let mut b = Client::new("b", &["t"]);
    let first = heartbeat(&g, b.request(), &image, now);
    b.epoch = first.member_epoch;
    let first = first.assignment.expect("b's first assignment");
    assert_eq!((b.epoch, flatten(&first).count()), (1, 6));
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    assert_eq!((a.epoch, a.count()), (2, 0));
    // b, not having taken its assignment yet, reports owning nothing: it keeps its epoch and is
    // told what it keeps; a gets nothing yet.
    let answer = heartbeat(&g, b.request(), &image, now);
    assert_eq!(answer.member_epoch, 1);
    let kept = answer.assignment.expect("what b keeps");
    assert_eq!(flatten(&kept).count(), 3);
    a.beat(&g, &image, now);
    assert_eq!(a.count(), 0, "a got partitions b is about to take");
    // b takes its first assignment (all six) and acknowledges it; a still waits.
    b.owned = first;
    assert_disjoint(&[&a, &b]);
    b.beat(&g, &image, now);
    a.beat(&g, &image, now);
    assert_eq!(a.count(), 0, "a got partitions b owns");
    // b revokes the three it was told to give up and reports what it keeps: released.
    b.owned = kept;
    b.beat(&g, &image, now);
    assert_eq!(b.epoch, 2);
    a.beat(&g, &image, now);
    assert_eq!((a.epoch, a.count()), (2, 3));
    assert_disjoint(&[&a, &b]);
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

/// A group of static member `a` (instance `i-1`) and `b` sharing topic `t`'s two partitions,
/// after `a` left with epoch -2; `a`'s partitions as it held them.
fn after_a_static_leave() -> (ConsumerGroups, MetadataImage, Instant, Client, Client, Assignment) {
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
    (g, image, now, a, b, a_owned)
}

#[test]
fn a_static_member_gets_its_partitions_back_under_a_new_member_id() {
    let (g, image, now, _, mut b, a_owned) = after_a_static_leave();
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
fn a_static_member_back_under_its_own_member_id_gets_its_partitions_back() {
    // Proves a static member that left with epoch -2 and rejoins with the same member id (a
    // Kafka 4 client keeps its id for life) is active again with its partitions, as a new id
    // would be; it was answered UNKNOWN_MEMBER_ID at every rejoin, for good.
    let (g, image, now, mut a, _, a_owned) = after_a_static_leave();
    a.epoch = 0;
    a.owned = Assignment::new();
    let answer = a.beat(&g, &image, now);
    assert_eq!(answer.error, None, "the rejoin is accepted");
    assert!(answer.member_epoch > 0);
    assert_eq!(a.owned, a_owned, "with the partitions it had");
    assert_eq!(a.beat(&g, &image, now).error, None, "and it heartbeats on");
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
    assert_eq!(heartbeat(&g, request.clone(), &image, now).error.unwrap().0, ResponseError::InvalidRegularExpression);
    // A pattern that would close the anchoring group is refused, not widened to every name
    // starting with "x" or ending with "s".
    request.subscribed_topic_regex = Some("x)|(s".into());
    assert_eq!(heartbeat(&g, request, &image, now).error.unwrap().0, ResponseError::InvalidRegularExpression);
}

#[test]
fn a_regex_matches_only_topics_the_member_may_describe() {
    // Kafka 4 (KAFKA-18813): a regex subscription resolves to the topics the member's
    // principal may DESCRIBE; a topic it may not is neither assigned nor revealed.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "orders-eu", 1, 2);
    topic(&mut image, "orders-secret", 2, 3);
    let now = Instant::now();
    let mut request = Client::new("a", &[]).request();
    request.subscribed_topic_names = None;
    request.subscribed_topic_regex = Some("orders-.*".into());
    request.topic_access = Some(TopicAccess(std::sync::Arc::new(|name: &str| name != "orders-secret")));
    let answer = heartbeat(&g, request.clone(), &image, now);
    let assigned = answer.assignment.expect("joined");
    assert_eq!(assigned.keys().copied().collect::<Vec<_>>(), vec![[1; 16]], "only the describable topic");

    // Without an authorizer (no access check) the same pattern takes both.
    request.member_id = "b".into();
    request.topic_access = None;
    heartbeat(&g, request, &image, now);
    let view = g.describe("g").expect("group");
    let target: usize = view.members.iter().map(|m| m.target_assignment.values().map(|p| p.len()).sum::<usize>()).sum();
    assert_eq!(target, 5, "b's regex also matches orders-secret");
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

/// Groups whose records (of group "g") are kept in the returned list instead of written
/// (the store answers NOT_COORDINATOR, so nothing else happens to them).
fn recording_groups() -> (ConsumerGroups, Arc<Mutex<Vec<ConsumerRecord>>>) {
    let written: Arc<Mutex<Vec<ConsumerRecord>>> = Arc::default();
    let g = groups();
    let sink = written.clone();
    g.set_store(Box::new(move |group, records| {
        assert_eq!(group, "g");
        sink.lock().unwrap().extend(records);
        Err(OffsetError::NotCoordinator { partition: 0 })
    }));
    (g, written)
}

/// The group the recorded records rebuild (taking them).
fn stored_from(written: &Mutex<Vec<ConsumerRecord>>) -> Option<StoredConsumerGroup> {
    let mut stored = None;
    for record in written.lock().unwrap().drain(..) {
        StoredConsumerGroup::apply(&mut stored, record);
    }
    stored
}

#[test]
fn a_group_restored_from_its_records_goes_on_without_a_rejoin() {
    // Proves the records written for every change rebuild the group on a new coordinator:
    // members keep their ids, epochs and partitions and go on heartbeating; a member that
    // left is gone; the next join reconciles as before.
    let (g, written) = recording_groups();
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

    let stored = stored_from(&written);
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

#[test]
fn partitions_added_while_no_coordinator_looked_are_assigned_after_a_restore() {
    // Proves the group epoch record carries the subscribed topics' hash (MetadataHash): a
    // coordinator that restores the group and finds the topics changed (partitions added
    // between the old coordinator's last look and its own first) bumps the epoch and assigns
    // them; unchanged topics bump nothing; records without a hash (older ones) cannot tell.
    let (g, written) = recording_groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 4);
    let now = Instant::now();
    let (mut a, mut b) = (Client::new("a", &["t"]), Client::new("b", &["t"]));
    for _ in 0..3 {
        a.beat(&g, &image, now);
        b.beat(&g, &image, now);
    }
    assert_eq!(a.count() + b.count(), 4);
    let stored = stored_from(&written).expect("records written");
    assert_ne!(stored.metadata_hash, 0, "the epoch record carries the hash");
    let epoch = stored.group_epoch;
    let restore = |stored: StoredConsumerGroup, image: &MetadataImage| {
        let restored = groups();
        restored.restore(&|_| true, vec![("g".to_string(), stored)], now);
        let (mut a2, mut b2) = (a.clone(), b.clone());
        for _ in 0..3 {
            a2.beat(&restored, image, now);
            b2.beat(&restored, image, now);
        }
        (restored.describe("g").unwrap().group_epoch, a2.count() + b2.count())
    };
    assert_eq!(restore(stored.clone(), &image), (epoch, 4), "nothing changed: no bump");
    let mut grown = MetadataImage::default();
    topic(&mut grown, "t", 1, 6);
    assert_eq!(restore(stored.clone(), &grown), (epoch + 1, 6), "the two new partitions are assigned");
    let unhashed = StoredConsumerGroup { metadata_hash: 0, ..stored };
    assert_eq!(restore(unhashed, &grown), (epoch, 4), "without a hash the change goes unseen");
}

#[test]
fn a_member_leaving_stores_the_hash_of_the_topics_left_so_neither_a_restore_nor_the_next_look_bumps() {
    // Proves the epoch bump of a removal stores the MetadataHash and keeps the signature of the
    // members left: before, both still covered the leaver's topic, so a coordinator restoring
    // the group right after, and this one at its next look at new metadata, each bumped the
    // epoch once with nothing changed.
    let (g, written) = recording_groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    topic(&mut image, "u", 2, 2);
    let now = Instant::now();
    let (mut a, mut b) = (Client::new("a", &["t"]), Client::new("b", &["u"]));
    for _ in 0..3 {
        a.beat(&g, &image, now);
        b.beat(&g, &image, now);
    }
    assert_eq!((a.count(), b.count()), (2, 2));
    let mut leave = b.request();
    leave.member_epoch = LEAVE_EPOCH;
    heartbeat(&g, leave, &image, now);
    a.beat(&g, &image, now);
    let epoch = g.describe("g").unwrap().group_epoch;

    let stored = stored_from(&written);
    let restored = groups();
    restored.restore(&|_| true, vec![("g".to_string(), stored.expect("records written"))], now);
    let mut a2 = a.clone();
    for _ in 0..3 {
        assert_eq!(a2.beat(&restored, &image, now).error, None);
    }
    assert_eq!(restored.describe("g").unwrap().group_epoch, epoch, "the restore sees nothing changed");

    let mut newer = image.clone();
    topic(&mut newer, "other", 3, 1);
    a.beat(&g, &newer, now);
    assert_eq!(g.describe("g").unwrap().group_epoch, epoch, "metadata that touches no subscription: no bump");
    assert_eq!(a.count(), 2);
}

/// A classic member (JoinGroup/SyncGroup/Heartbeat) as librdkafka's cooperative-sticky runs it.
struct ClassicClient {
    id: String,
    generation: i32,
    owned: BTreeMap<String, BTreeSet<i32>>,
}

impl ClassicClient {
    fn join_request(&self, owned: bool) -> crate::group::membership::JoinRequest {
        let mut subscription = kafka_protocol::messages::ConsumerProtocolSubscription::default()
            .with_topics(vec![kafka_protocol::protocol::StrBytes::from_static_str("t")]);
        if owned {
            subscription = subscription.with_owned_partitions(
                self.owned
                    .iter()
                    .map(|(t, ps)| {
                        kafka_protocol::messages::consumer_protocol_subscription::TopicPartition::default()
                            .with_topic(kafka_protocol::messages::TopicName(
                                kafka_protocol::protocol::StrBytes::from_string(t.clone()),
                            ))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            );
        }
        let mut bytes = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut bytes, 1);
        kafka_protocol::protocol::Encodable::encode(&subscription, &mut bytes, 1).unwrap();
        crate::group::membership::JoinRequest {
            group_id: "g".to_string(),
            member_id: self.id.clone(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".to_string(),
            protocols: vec![("cooperative-sticky".to_string(), bytes.freeze())],
            require_known_member_id: true,
            ..Default::default()
        }
    }

    /// JoinGroup (with MEMBER_ID_REQUIRED handled) then SyncGroup: what the member holds.
    fn rejoin(&mut self, groups: &ConsumerGroups, image: &MetadataImage, now: Instant) {
        loop {
            match groups.classic_join(&self.join_request(true), image, now) {
                ClassicBegin::Refused(ResponseError::MemberIdRequired, id, _) => self.id = id,
                ClassicBegin::Refused(error, _, why) => panic!("join refused: {error:?} {why}"),
                ClassicBegin::NotHere => panic!("not a consumer group"),
                ClassicBegin::Continue(pending) => {
                    let outcome = pending.job.as_ref().map(|job| groups.run_builtin(job));
                    let joined = groups.finish_classic_join(pending, outcome, now).0.expect("joined");
                    assert_eq!(joined.protocol_name, "cooperative-sticky");
                    self.generation = joined.generation;
                    break;
                }
            }
        }
        let synced = groups
            .classic_sync("g", &self.id, None, self.generation, Some("consumer"), None, image, now)
            .expect("a consumer group")
            .expect("synced");
        // The cooperative protocol: what is not in the assignment is given up.
        self.owned = embedded::decode_assignment(&synced.assignment).unwrap();
    }

    fn heartbeat(&self, groups: &ConsumerGroups, now: Instant) -> Result<(), ResponseError> {
        groups.classic_heartbeat("g", &self.id, None, self.generation, now).expect("a consumer group")
    }

    fn as_owned(&self, image: &MetadataImage) -> Assignment {
        let mut owned = Assignment::new();
        for (t, ps) in &self.owned {
            owned.entry(image.topic(t).unwrap().topic_id).or_default().extend(ps.iter().copied());
        }
        owned
    }
}

#[test]
fn a_classic_member_joins_a_consumer_group_and_reconciles_by_rejoining() {
    // Proves Kafka's classicGroupJoinToConsumerGroup flow: the classic member's generation is
    // its member epoch; it gets only partitions nobody else owns; its heartbeat tells it to
    // rejoin once what it waits for is free; no partition is ever held twice.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 4);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    assert_eq!(a.count(), 4);
    let mut c = ClassicClient { id: String::new(), generation: -1, owned: BTreeMap::new() };
    c.rejoin(&g, &image, now);
    assert_eq!(c.generation, 2, "the member epoch is the generation");
    assert!(c.owned.is_empty(), "a still owns everything: nothing yet");
    assert_eq!(c.heartbeat(&g, now), Ok(()), "waiting on a's partitions: no rejoin yet");
    a.beat(&g, &image, now);
    a.beat(&g, &image, now);
    assert_eq!(a.count(), 2);
    assert_eq!(c.heartbeat(&g, now), Err(ResponseError::RebalanceInProgress), "its partitions are free now");
    c.rejoin(&g, &image, now);
    assert_eq!(c.owned.values().map(|p| p.len()).sum::<usize>(), 2);
    assert_eq!(c.heartbeat(&g, now), Ok(()));
    let classic_view = ClientView { owned: c.as_owned(&image) };
    assert_disjoint_views(&[&a.owned, &classic_view.owned]);
    let view = g.describe("g").unwrap();
    assert_eq!(view.state, ConsumerGroupState::Stable);
    assert!(view.members.iter().any(|m| m.classic) && view.members.iter().any(|m| !m.classic));
    // Commits: a classic member commits with its generation at any OffsetCommit version; a
    // stale generation is ILLEGAL_GENERATION (what its client understands).
    assert_eq!(g.validate_member("g", &c.id, c.generation, ResponseError::StaleMemberEpoch), Some(Ok(())));
    assert_eq!(
        g.validate_member("g", &c.id, c.generation - 1, ResponseError::StaleMemberEpoch),
        Some(Err(ResponseError::IllegalGeneration))
    );
    // A wrong generation, protocol or member is refused as the classic protocol does.
    assert_eq!(g.classic_heartbeat("g", &c.id, None, 99, now), Some(Err(ResponseError::IllegalGeneration)));
    assert_eq!(g.classic_heartbeat("g", "nobody", None, 2, now), Some(Err(ResponseError::UnknownMemberId)));
    assert_eq!(
        g.classic_sync("g", &c.id, None, c.generation, Some("consumer"), Some("range"), &image, now),
        Some(Err(ResponseError::InconsistentGroupProtocol))
    );
    let mut other = c.join_request(false);
    other.member_id = String::new();
    other.protocols[0].0 = "range".to_string();
    assert!(matches!(
        g.classic_join(&other, &image, now),
        ClassicBegin::Refused(ResponseError::InconsistentGroupProtocol, _, _)
    ));
}

struct ClientView {
    owned: Assignment,
}

fn assert_disjoint_views(views: &[&Assignment]) {
    let mut seen = BTreeSet::new();
    for owned in views {
        for tp in flatten(owned) {
            assert!(seen.insert(tp), "{tp:?} owned twice");
        }
    }
}

#[test]
fn the_last_consumer_member_leaving_downgrades_and_a_classic_group_upgrades() {
    // Proves the online migration both ways: a consumer group whose last consumer-protocol
    // member leaves goes to the classic membership with its classic members and their
    // assignments; classic members adopted from a classic group keep their generation and
    // partitions, and a consumer-protocol member joining moves the group on without overlap.
    let g = groups();
    let handed: Arc<Mutex<Vec<(String, ClassicMembers)>>> = Arc::default();
    let sink = handed.clone();
    g.set_downgrader(Box::new(move |group, members| {
        sink.lock().unwrap().push((group.to_string(), members));
        None
    }));
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 4);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.beat(&g, &image, now);
    let mut c = ClassicClient { id: String::new(), generation: -1, owned: BTreeMap::new() };
    c.rejoin(&g, &image, now);
    a.beat(&g, &image, now);
    a.beat(&g, &image, now);
    c.rejoin(&g, &image, now);
    let mut leave = a.request();
    leave.member_epoch = LEAVE_EPOCH;
    heartbeat(&g, leave, &image, now);
    assert!(g.describe("g").is_none(), "the consumer group is gone");
    let handed = handed.lock().unwrap();
    let (group, members) = &handed[0];
    assert_eq!(group, "g");
    assert_eq!(members.members.len(), 1);
    assert_eq!(members.members[0].member_id, c.id);
    // What it holds is its last target (the classic rebalance that follows reassigns a's).
    assert_eq!(embedded::decode_assignment(&members.members[0].assignment).unwrap()["t"].len(), 2);

    // The upgrade: the classic group's members come over with what they hold.
    let upgraded = groups();
    let classic = ClassicMembers { generation: 7, protocol_name: None, members: members.members.clone() };
    upgraded.adopt_classic("g", &classic, &image, now).unwrap();
    c.generation = 7;
    c.owned = embedded::decode_assignment(&members.members[0].assignment).unwrap();
    assert_eq!(c.heartbeat(&upgraded, now), Ok(()), "nothing changed yet");
    let mut b = Client::new("b", &["t"]);
    b.beat(&upgraded, &image, now);
    assert_eq!(b.count(), 2, "the two partitions nobody held");
    assert_eq!(c.heartbeat(&upgraded, now), Err(ResponseError::RebalanceInProgress));
    c.rejoin(&upgraded, &image, now);
    assert_eq!(c.owned["t"].len(), 2);
    assert_disjoint_views(&[&b.owned, &c.as_owned(&image)]);
    // A member that was told to rejoin and does not is removed after its rebalance timeout.
    b.beat(&upgraded, &image, now);
    let mut d = Client::new("d", &["t"]);
    d.beat(&upgraded, &image, now);
    assert_eq!(c.heartbeat(&upgraded, now), Err(ResponseError::RebalanceInProgress));
    upgraded.sweep(now + Duration::from_millis(30_001));
    assert!(upgraded.describe("g").unwrap().members.iter().all(|m| m.member_id != c.id));
}

#[test]
fn a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group() {
    // Proves Kafka's `validateOnlineDowngradeWithReplacedMemberId`: a classic member joining
    // with the instance id of the last consumer-protocol (static) member takes the group back to
    // the classic protocol with the classic members that remain; the join itself is then the
    // classic membership's. With only that static member, the group goes over empty. Without
    // downgrade in the policy, the classic member takes over the static identity in the
    // consumer group as before.
    let image = {
        let mut image = MetadataImage::default();
        topic(&mut image, "t", 1, 4);
        image
    };
    let now = Instant::now();
    let setup = |policy: MigrationPolicy, with_classic: bool| {
        let g = ConsumerGroups::new(ConsumerGroupConfig { migration_policy: policy, ..Default::default() });
        let handed: Arc<Mutex<Vec<(String, ClassicMembers)>>> = Arc::default();
        let sink = handed.clone();
        g.set_downgrader(Box::new(move |group, members| {
            sink.lock().unwrap().push((group.to_string(), members));
            None
        }));
        let mut a = Client::new("a", &["t"]);
        a.instance = Some("i-1".into());
        a.beat(&g, &image, now);
        let mut c = ClassicClient { id: String::new(), generation: -1, owned: BTreeMap::new() };
        if with_classic {
            c.rejoin(&g, &image, now);
        }
        (g, handed, c.id)
    };
    let replacement = || {
        let mut join = ClassicClient { id: String::new(), generation: -1, owned: BTreeMap::new() }.join_request(true);
        join.group_instance_id = Some("i-1".into());
        join
    };

    let (g, handed, classic_id) = setup(MigrationPolicy::Bidirectional, true);
    assert!(matches!(g.classic_join(&replacement(), &image, now), ClassicBegin::NotHere));
    assert!(g.describe("g").is_none(), "the consumer group is gone");
    let handed = handed.lock().unwrap();
    let (group, members) = &handed[0];
    assert_eq!(group, "g");
    let ids: Vec<&str> = members.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, vec![classic_id.as_str()], "the classic member goes over, the replaced one does not");

    let (g, handed, _) = setup(MigrationPolicy::Bidirectional, false);
    assert!(matches!(g.classic_join(&replacement(), &image, now), ClassicBegin::NotHere));
    assert!(handed.lock().unwrap()[0].1.members.is_empty(), "over empty: the joiner joins the classic group");

    let (g, handed, _) = setup(MigrationPolicy::Upgrade, true);
    assert!(matches!(g.classic_join(&replacement(), &image, now), ClassicBegin::Continue(_)));
    assert!(handed.lock().unwrap().is_empty(), "no downgrade under the upgrade policy");
    let members = g.describe("g").unwrap().members;
    assert!(members.iter().all(|m| m.member_id != "a"), "a's identity is the classic member's now");
    assert_eq!(members.len(), 2);
}

#[test]
fn migration_policies_parse_with_kafkas_names() {
    assert_eq!(MigrationPolicy::parse("BIDIRECTIONAL"), Ok(MigrationPolicy::Bidirectional));
    let upgrade = MigrationPolicy::parse("upgrade").unwrap();
    assert!(upgrade.upgrade_enabled() && !upgrade.downgrade_enabled());
    let downgrade = MigrationPolicy::parse("downgrade").unwrap();
    assert!(!downgrade.upgrade_enabled() && downgrade.downgrade_enabled());
    let disabled = MigrationPolicy::parse("disabled").unwrap();
    assert!(!disabled.upgrade_enabled() && !disabled.downgrade_enabled());
    assert!(MigrationPolicy::parse("sideways").unwrap_err().contains("bidirectional, upgrade, downgrade or disabled"));
}

/// A member hears back sooner while it has just joined, is reconciling or its group's target
/// changed less than one interval ago, and at the configured interval once the group is quiet.
#[test]
fn joining_and_reconciling_members_get_the_shorter_interval() {
    let config =
        ConsumerGroupConfig { heartbeat_interval_ms: 1_000, reconcile_heartbeat_interval_ms: 50, ..Default::default() };
    let g = ConsumerGroups::new(config);
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 4);
    let start = Instant::now();
    let quiet = Duration::from_millis(1_001);
    let mut a = Client::new("a", &["t"]);
    assert_eq!(a.beat(&g, &image, start).heartbeat_interval_ms, 50, "a join");
    assert_eq!(a.beat(&g, &image, start).heartbeat_interval_ms, 50, "the target is new");
    assert_eq!(a.beat(&g, &image, start + quiet).heartbeat_interval_ms, 1_000, "stable, the group quiet");

    let now = start + 2 * quiet;
    let mut b = Client::new("b", &["t"]);
    assert_eq!(b.beat(&g, &image, now).heartbeat_interval_ms, 50, "a join");
    assert_eq!(b.beat(&g, &image, now + quiet).heartbeat_interval_ms, 50, "waiting for a's partitions");
    assert_eq!(a.beat(&g, &image, now + quiet).heartbeat_interval_ms, 50, "told to revoke two");
    assert_eq!(a.beat(&g, &image, now + quiet).heartbeat_interval_ms, 1_000, "revoked: stable at the new epoch");
    let answer = b.beat(&g, &image, now + quiet);
    assert_eq!((answer.heartbeat_interval_ms, b.count()), (1_000, 2), "released partitions taken");

    // The shorter interval never exceeds the configured one.
    let g = ConsumerGroups::new(ConsumerGroupConfig { heartbeat_interval_ms: 100, ..Default::default() });
    assert_eq!(Client::new("c", &["t"]).beat(&g, &image, now).heartbeat_interval_ms, 100);
}

#[test]
fn a_full_request_by_regex_gets_its_assignment_back() {
    // Proves Kafka's `isFullRequest` counts a regex subscription as a subscription: a member
    // subscribed by regex that resends everything (its answer was lost) gets its assignment;
    // it got none, kept what it had and never consumed the partition it was given.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "orders-1", 1, 2);
    let now = Instant::now();
    let mut join = Client::new("a", &[]).request();
    join.subscribed_topic_names = None;
    join.subscribed_topic_regex = Some("orders-.*".into());
    let answer = heartbeat(&g, join, &image, now);
    assert_eq!(answer.error, None);
    let epoch = answer.member_epoch;
    let mut full = Client::new("a", &[]).request();
    full.member_epoch = epoch;
    full.rebalance_timeout_ms = 60_000;
    full.subscribed_topic_names = None;
    full.subscribed_topic_regex = Some("orders-.*".into());
    full.owned = Some(Assignment::new());
    let answer = heartbeat(&g, full, &image, now);
    assert_eq!(answer.error, None);
    let assigned = answer.assignment.expect("a full request is told its assignment");
    assert_eq!(flatten(&assigned).count(), 2);
}

#[test]
fn a_static_leave_releases_what_the_member_was_revoking() {
    // Proves a static member that leaves (epoch -2) while it owes a revocation releases those
    // partitions at once, as Kafka clears its partitions pending revocation: the member they
    // go to got them only after the static member's session expired.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    let mut a = Client::new("a", &["t"]);
    a.instance = Some("i-1".into());
    a.beat(&g, &image, now);
    assert_eq!(a.count(), 2);
    let mut b = Client::new("b", &["t"]);
    b.beat(&g, &image, now);
    assert_eq!(b.count(), 0, "b waits for a's revocation");
    // a learns of the revocation but leaves before acknowledging it.
    let revoking = a.request();
    assert_eq!(heartbeat(&g, revoking, &image, now).error, None);
    let mut leave = a.request();
    leave.member_epoch = STATIC_LEAVE_EPOCH;
    assert_eq!(heartbeat(&g, leave, &image, now).member_epoch, STATIC_LEAVE_EPOCH);
    b.beat(&g, &image, now);
    assert_eq!(b.count(), 1, "the partition a was giving up goes to b at once");
}

#[test]
fn a_static_join_may_not_take_another_members_id() {
    // Proves a static member replacing its departed instance under the member id of another
    // live member is refused; it overwrote that member and stranded its partitions.
    let (g, image, now, _, b, _) = after_a_static_leave();
    let mut thief = Client::new(&b.id, &["t"]);
    thief.instance = Some("i-1".into());
    assert_eq!(thief.beat(&g, &image, now).error.unwrap().0, ResponseError::InvalidRequest);
    assert_eq!(g.describe("g").unwrap().members.len(), 2);
}

#[test]
fn a_member_the_plan_leaves_out_loses_its_target_in_the_log_too() {
    // Proves a target assignment writes an (empty) target record for a member its plan names
    // not (Kafka's TargetAssignmentBuilder): the range assignor leaves out a member whose
    // topics do not exist; its old target stayed in the log, and a coordinator that loaded the
    // group gave it back.
    let (g, written) = recording_groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 2);
    let now = Instant::now();
    let range = |client: &Client| {
        let mut request = client.request();
        request.server_assignor = Some("range".into());
        request
    };
    let (mut a, mut b) = (Client::new("a", &["t"]), Client::new("b", &["t"]));
    for _ in 0..3 {
        for client in [&mut a, &mut b] {
            let answer = heartbeat(&g, range(client), &image, now);
            client.epoch = answer.member_epoch;
            if let Some(assignment) = answer.assignment {
                client.owned = assignment;
            }
        }
    }
    assert_eq!(b.count(), 1);
    let mut away = range(&b);
    away.subscribed_topic_names = Some(vec!["missing".into()]);
    assert_eq!(heartbeat(&g, away, &image, now).error, None);
    assert!(g.describe("g").unwrap().members.iter().all(|m| m.member_id != "b" || m.target_assignment.is_empty()));
    let restored = groups();
    restored.restore(&|_| true, vec![("g".to_string(), stored_from(&written).expect("records written"))], now);
    let b_after = restored.describe("g").unwrap().members.into_iter().find(|m| m.member_id == "b").unwrap();
    assert!(b_after.target_assignment.is_empty(), "restored target {:?}", b_after.target_assignment);
}

#[test]
fn a_group_is_not_created_while_the_deletion_of_its_stored_records_is_written() {
    // Proves the empty-group gate holds an id only the store knows: a joining heartbeat while
    // the write runs is told COORDINATOR_LOAD_IN_PROGRESS (it retries and creates the group
    // after), instead of writing records the deletion would tombstone behind it. A group with
    // a member keeps its write from running.
    let g = groups();
    let mut image = MetadataImage::default();
    topic(&mut image, "t", 1, 1);
    let now = Instant::now();
    let mut member = Client::new("m1", &["t"]);
    let group_id = member.request().group_id.to_string();
    let mut during = None;
    assert!(g.while_empty(&group_id, &mut || {
        during = Some(member.beat(&g, &image, now).error.map(|(code, _)| code));
        Some(true)
    }));
    assert_eq!(during, Some(Some(ResponseError::CoordinatorLoadInProgress)));
    assert!(g.list().is_empty(), "nothing was created meanwhile: {:?}", g.list());
    let answer = member.beat(&g, &image, now);
    assert!(answer.error.is_none(), "after the write it joins: {:?}", answer.error);
    assert_eq!(g.members_of(&group_id), Some(1));
    assert!(!g.while_empty(&group_id, &mut || panic!("a group with a member is not written")));
}
