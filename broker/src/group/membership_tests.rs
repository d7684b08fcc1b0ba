//! The group state machine driven without networking, on a clock the tests move by hand.

use super::*;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn join_request(group: &str, member_id: &str, protocols: &[(&str, &'static [u8])]) -> JoinRequest {
    JoinRequest {
        group_id: group.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".to_string(),
        protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from_static(m))).collect(),
        require_known_member_id: false,
        supports_skip_assignment: false,
    }
}

fn range(group: &str, member_id: &str) -> JoinRequest {
    join_request(group, member_id, &[("range", b"r")])
}

fn now_result<T>(reply: Reply<T>) -> T {
    match reply {
        Reply::Now(result) => result,
        Reply::Parked(_) => panic!("expected an immediate answer"),
    }
}

fn parked<T>(reply: Reply<T>) -> oneshot::Receiver<T> {
    match reply {
        Reply::Parked(rx) => rx,
        Reply::Now(_) => panic!("expected a parked request"),
    }
}

fn answered<T>(rx: &mut oneshot::Receiver<T>) -> T {
    rx.try_recv().expect("parked request answered")
}

fn still_parked<T: std::fmt::Debug>(rx: &mut oneshot::Receiver<T>) {
    assert!(matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)), "request should still be parked");
}

fn sync_request(
    group: &str,
    member_id: &str,
    generation_id: i32,
    assignments: &[(&str, &'static [u8])],
) -> SyncRequest {
    SyncRequest {
        group_id: group.to_string(),
        generation_id,
        member_id: member_id.to_string(),
        group_instance_id: None,
        protocol_type: None,
        protocol_name: None,
        assignments: assignments.iter().map(|(id, a)| (id.to_string(), Bytes::from_static(a))).collect(),
    }
}

/// One member joins and syncs: returns its member id and the generation.
fn single_member_stable(m: &Membership, group: &str, t: Instant) -> (String, i32) {
    let result = answered(&mut parked(m.join(range(group, ""), t)));
    assert_eq!(result.error, None);
    assert_eq!(result.leader, result.member_id);
    let sync = answered(&mut parked(
        m.sync(sync_request(group, &result.member_id, result.generation_id, &[(&result.member_id, b"a1")]), t),
    ));
    assert_eq!(sync.assignment, Bytes::from_static(b"a1"));
    assert_eq!(m.state(group), Some(GroupState::Stable));
    (result.member_id, result.generation_id)
}

#[test]
fn first_member_becomes_leader_and_gets_its_assignment() {
    // Proves the whole happy path of one member: Empty → PreparingRebalance →
    // CompletingRebalance → Stable, generation 1, leader = the member, protocol selected.
    let m = Membership::new();
    let t = Instant::now();
    let mut rx = parked(m.join(range("g", ""), t));
    let result = answered(&mut rx);
    assert_eq!(result.generation_id, 1);
    assert_eq!(result.protocol_name.as_deref(), Some("range"));
    assert!(result.member_id.starts_with("client-"));
    assert_eq!(result.members.len(), 1);
    assert_eq!(m.state("g"), Some(GroupState::CompletingRebalance));
    let sync = answered(&mut parked(m.sync(sync_request("g", &result.member_id, 1, &[(&result.member_id, b"x")]), t)));
    assert_eq!(sync.assignment, Bytes::from_static(b"x"));
    assert_eq!(m.state("g"), Some(GroupState::Stable));
}

#[test]
fn kip394_member_id_required_then_rejoin() {
    // Proves KIP-394: a v4+ join with no member id gets MEMBER_ID_REQUIRED and an id; the
    // group waits for that pending member before completing the join of others.
    let m = Membership::new();
    let t = Instant::now();
    let mut first = range("g", "");
    first.require_known_member_id = true;
    let a = now_result(m.join(first.clone(), t));
    assert_eq!(a.error, Some(ResponseError::MemberIdRequired));
    let b = now_result(m.join(first, t));
    assert_eq!(b.error, Some(ResponseError::MemberIdRequired));
    let mut rx_a = parked(m.join(range("g", &a.member_id), t));
    still_parked(&mut rx_a); // b is still pending
    let mut rx_b = parked(m.join(range("g", &b.member_id), t));
    let ja = answered(&mut rx_a);
    let jb = answered(&mut rx_b);
    assert_eq!(ja.generation_id, 1);
    assert_eq!(ja.leader, a.member_id);
    assert_eq!(ja.members.len(), 2, "leader gets every member");
    assert!(jb.members.is_empty(), "followers get no member list");
    // An unknown non-empty member id is refused.
    let unknown = now_result(m.join(range("g", "nobody"), t));
    assert_eq!(unknown.error, Some(ResponseError::UnknownMemberId));
}

#[test]
fn followers_wait_for_the_leader_sync() {
    // Proves a follower's SyncGroup is parked until the leader's arrives, then each member
    // gets its own assignment; later syncs of the generation are answered at once.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut rx_b = parked(m.join(range("g", ""), t));
    assert_eq!(m.heartbeat("g", &a, None, 1, t), Err(ResponseError::RebalanceInProgress));
    let mut rx_a = parked(m.join(range("g", &a), t));
    let ja = answered(&mut rx_a);
    let jb = answered(&mut rx_b);
    assert_eq!(ja.generation_id, 2);
    assert_eq!(ja.leader, a);
    let b = jb.member_id.clone();
    let mut sync_b = parked(m.sync(sync_request("g", &b, 2, &[]), t));
    still_parked(&mut sync_b);
    let sync_a = answered(&mut parked(m.sync(sync_request("g", &a, 2, &[(&a, b"A"), (&b, b"B")]), t)));
    assert_eq!(sync_a.assignment, Bytes::from_static(b"A"));
    assert_eq!(answered(&mut sync_b).assignment, Bytes::from_static(b"B"));
    assert_eq!(now_result(m.sync(sync_request("g", &b, 2, &[]), t)).assignment, Bytes::from_static(b"B"));
    assert_eq!(m.heartbeat("g", &b, None, 2, t), Ok(()));
    assert_eq!(m.heartbeat("g", &b, None, 1, t), Err(ResponseError::IllegalGeneration));
    assert_eq!(m.heartbeat("g", "nobody", None, 2, t), Err(ResponseError::UnknownMemberId));
    assert_eq!(now_result(m.sync(sync_request("g", &b, 1, &[]), t)).error, Some(ResponseError::IllegalGeneration));
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    // Proves a rebalance ends at the rebalance timeout without the members that did not
    // rejoin, and that they are then unknown.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut rx_b = parked(m.join(range("g", ""), t));
    // a keeps heartbeating (so its session stays alive) but never rejoins.
    let t1 = t + Duration::from_millis(SESSION_MS as u64 - 1);
    assert_eq!(m.heartbeat("g", &a, None, 1, t1), Err(ResponseError::RebalanceInProgress));
    m.sweep(t1);
    still_parked(&mut rx_b);
    m.sweep(t + Duration::from_millis(REBALANCE_MS as u64));
    let jb = answered(&mut rx_b);
    assert_eq!(jb.generation_id, 2);
    assert_eq!(jb.leader, jb.member_id);
    assert_eq!(jb.members.len(), 1);
    assert_eq!(m.heartbeat("g", &a, None, 1, t1), Err(ResponseError::UnknownMemberId));
}

#[test]
fn session_expiry_removes_a_member_and_rebalances() {
    // Proves a member that stops heartbeating is removed after session.timeout.ms and the
    // others are told to rejoin.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    m.sweep(t + Duration::from_millis(SESSION_MS as u64 - 1));
    assert_eq!(m.state("g"), Some(GroupState::Stable));
    m.sweep(t + Duration::from_millis(SESSION_MS as u64));
    // The only member left: the rebalance completes at once, with nobody.
    assert_eq!(m.state("g"), Some(GroupState::Empty));
    assert_eq!(m.heartbeat("g", &a, None, 1, t), Err(ResponseError::UnknownMemberId));
    assert!(m.describe("g").is_some_and(|d| d.members.is_empty()));
}

#[test]
fn pending_member_ids_expire() {
    // Proves a MEMBER_ID_REQUIRED id that never comes back stops blocking the group.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut kip394 = range("g", "");
    kip394.require_known_member_id = true;
    let pending = now_result(m.join(kip394, t));
    assert_eq!(pending.error, Some(ResponseError::MemberIdRequired));
    let mut rx_a = parked(m.join(range("g", &a), t));
    still_parked(&mut rx_a);
    m.sweep(t + Duration::from_millis(SESSION_MS as u64));
    let ja = answered(&mut rx_a);
    assert_eq!(ja.generation_id, 2);
    assert_eq!(ja.members.len(), 1);
    assert_eq!(now_result(m.join(range("g", &pending.member_id), t)).error, Some(ResponseError::UnknownMemberId));
}

#[test]
fn leave_group_rebalances_and_reports_each_member() {
    // Proves LeaveGroup removes known members, reports unknown ones, and a follower's parked
    // sync is told to rejoin.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut rx_b = parked(m.join(range("g", ""), t));
    let ja = answered(&mut parked(m.join(range("g", &a), t)));
    let b = answered(&mut rx_b).member_id;
    let mut sync_b = parked(m.sync(sync_request("g", &b, ja.generation_id, &[]), t));
    let results = m.leave(
        "g",
        &[
            LeavingMember { member_id: a.clone(), group_instance_id: None },
            LeavingMember { member_id: "nobody".into(), group_instance_id: None },
        ],
        t,
    );
    assert_eq!(results, vec![Ok(()), Err(ResponseError::UnknownMemberId)]);
    assert_eq!(answered(&mut sync_b).error, Some(ResponseError::RebalanceInProgress));
    assert_eq!(m.state("g"), Some(GroupState::PreparingRebalance));
    let jb = answered(&mut parked(m.join(range("g", &b), t)));
    assert_eq!(jb.leader, b, "leadership moves to the remaining member");
    assert_eq!(m.leave("unknown", &[LeavingMember { member_id: b, group_instance_id: None }], t).len(), 1);
}

#[test]
fn protocol_selection_and_inconsistent_protocols() {
    // Proves Kafka's selectProtocol (common protocols, majority preference) and
    // INCONSISTENT_GROUP_PROTOCOL for a member sharing no protocol or another type.
    let m = Membership::new();
    let t = Instant::now();
    let mut rx_a = parked(m.join(join_request("g", "", &[("range", b""), ("roundrobin", b"")]), t));
    let a = answered(&mut rx_a).member_id;
    let mut rx_b = parked(m.join(join_request("g", "", &[("roundrobin", b""), ("range", b"")]), t));
    let mut rx_c = parked(m.join(join_request("g", "", &[("roundrobin", b""), ("sticky", b"")]), t));
    let mut rx_a = parked(m.join(join_request("g", &a, &[("range", b""), ("roundrobin", b"")]), t));
    let ja = answered(&mut rx_a);
    answered(&mut rx_b);
    answered(&mut rx_c);
    assert_eq!(ja.protocol_name.as_deref(), Some("roundrobin"));
    let other = now_result(m.join(join_request("g", "", &[("cooperative-sticky", b"")]), t));
    assert_eq!(other.error, Some(ResponseError::InconsistentGroupProtocol));
    let mut wrong_type = range("g", "");
    wrong_type.protocol_type = "connect".into();
    assert_eq!(now_result(m.join(wrong_type, t)).error, Some(ResponseError::InconsistentGroupProtocol));
    let empty = now_result(m.join(join_request("h", "", &[]), t));
    assert_eq!(empty.error, Some(ResponseError::InconsistentGroupProtocol));
    let mut bad_session = range("h", "");
    bad_session.session_timeout_ms = GROUP_MIN_SESSION_TIMEOUT_MS - 1;
    assert_eq!(now_result(m.join(bad_session, t)).error, Some(ResponseError::InvalidSessionTimeout));
}

#[test]
fn static_member_rejoin_keeps_its_assignment_and_fences_the_old_id() {
    // Proves KIP-345: a static member restarting with the same instance id gets a new member
    // id and its assignment back without a rebalance; the old id is fenced.
    let m = Membership::new();
    let t = Instant::now();
    let mut first = range("g", "");
    first.group_instance_id = Some("instance-1".into());
    let j1 = answered(&mut parked(m.join(first.clone(), t)));
    let old = j1.member_id.clone();
    answered(&mut parked(m.sync(sync_request("g", &old, 1, &[(&old, b"P")]), t)));
    let j2 = now_result(m.join(first.clone(), t));
    assert_eq!(j2.error, None);
    assert_ne!(j2.member_id, old);
    assert_eq!(j2.generation_id, 1, "no rebalance");
    assert_eq!(m.state("g"), Some(GroupState::Stable));
    let mut sync = sync_request("g", &j2.member_id, 1, &[]);
    sync.group_instance_id = Some("instance-1".into());
    assert_eq!(now_result(m.sync(sync, t)).assignment, Bytes::from_static(b"P"));
    assert_eq!(m.heartbeat("g", &old, Some("instance-1"), 1, t), Err(ResponseError::FencedInstanceId));
    assert_eq!(m.validate_commit("g", &old, 1, Some("instance-1")), Err(ResponseError::FencedInstanceId));
    assert_eq!(m.validate_commit("g", &j2.member_id, 1, Some("instance-1")), Ok(()));
    let leave = m.leave("g", &[LeavingMember { member_id: old, group_instance_id: Some("instance-1".into()) }], t);
    assert_eq!(leave, vec![Err(ResponseError::FencedInstanceId)]);
}

#[test]
fn validate_commit_follows_kafka() {
    // Proves OffsetCommit's group checks: simple consumers, unknown members, stale
    // generations, and REBALANCE_IN_PROGRESS while CompletingRebalance.
    let m = Membership::new();
    let t = Instant::now();
    assert_eq!(m.validate_commit("simple", "", -1, None), Ok(()));
    assert_eq!(m.validate_commit("simple", "", 3, None), Err(ResponseError::IllegalGeneration));
    let j = answered(&mut parked(m.join(range("g", ""), t)));
    assert_eq!(m.validate_commit("g", &j.member_id, 1, None), Err(ResponseError::RebalanceInProgress));
    answered(&mut parked(m.sync(sync_request("g", &j.member_id, 1, &[]), t)));
    assert_eq!(m.validate_commit("g", &j.member_id, 1, None), Ok(()));
    assert_eq!(m.validate_commit("g", &j.member_id, 0, None), Err(ResponseError::IllegalGeneration));
    assert_eq!(m.validate_commit("g", "nobody", 1, None), Err(ResponseError::UnknownMemberId));
}

#[test]
fn list_describe_delete() {
    // Proves ListGroups/DescribeGroups views and that only Empty groups can be deleted.
    let m = Membership::new();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let listed = m.list();
    assert_eq!(
        listed,
        vec![GroupListing { group_id: "g".into(), protocol_type: "consumer".into(), state: GroupState::Stable }]
    );
    let described = m.describe("g").expect("known group");
    assert_eq!(described.protocol, "range");
    assert_eq!(described.members[0].assignment, Bytes::from_static(b"a1"));
    assert_eq!(described.members[0].metadata, Bytes::from_static(b"r"));
    assert_eq!(m.delete("g"), Err(ResponseError::NonEmptyGroup));
    assert_eq!(m.leave("g", &[LeavingMember { member_id: a, group_instance_id: None }], t), vec![Ok(())]);
    assert_eq!(m.state("g"), Some(GroupState::Empty));
    assert_eq!(m.delete("g"), Ok(()));
    assert_eq!(m.delete("g"), Err(ResponseError::GroupIdNotFound));
    assert!(m.describe("g").is_none());
}
