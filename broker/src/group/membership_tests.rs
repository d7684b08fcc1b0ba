//! The group state machine driven without networking, on a clock the tests move by hand.

use super::*;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

/// A membership without `group.initial.rebalance.delay.ms`, so joins complete as soon as every
/// member is in (the delay has its own test).
fn no_delay() -> Membership {
    Membership::with_config(GroupConfig {
        initial_rebalance_delay_ms: 0,
        initial_join_tick: Duration::ZERO,
        ..GroupConfig::default()
    })
}

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

/// `Membership::sync` as the SyncGroup handler drives it: a leader's assignment is stored (here:
/// at once, successfully) before anyone is answered.
fn stored_sync(m: &Membership, request: SyncRequest, t: Instant) -> Reply<SyncResult> {
    let (group, member, generation) = (request.group_id.clone(), request.member_id.clone(), request.generation_id);
    let reply = m.sync(request, t);
    if m.assignment_to_store(&group, &member, generation).is_some() {
        m.complete_sync(&group, generation, Ok(()), t);
    }
    reply
}

/// One member joins and syncs: returns its member id and the generation.
fn single_member_stable(m: &Membership, group: &str, t: Instant) -> (String, i32) {
    let result = answered(&mut parked(m.join(range(group, ""), t)));
    assert_eq!(result.error, None);
    assert_eq!(result.leader, result.member_id);
    let sync = answered(&mut parked(stored_sync(
        &m,
        sync_request(group, &result.member_id, result.generation_id, &[(&result.member_id, b"a1")]),
        t,
    )));
    assert_eq!(sync.assignment, Bytes::from_static(b"a1"));
    assert_eq!(m.state(group), Some(GroupState::Stable));
    (result.member_id, result.generation_id)
}

#[test]
fn first_member_becomes_leader_and_gets_its_assignment() {
    // Proves the whole happy path of one member: Empty → PreparingRebalance →
    // CompletingRebalance → Stable, generation 1, leader = the member, protocol selected.
    let m = no_delay();
    let t = Instant::now();
    let mut rx = parked(m.join(range("g", ""), t));
    let result = answered(&mut rx);
    assert_eq!(result.generation_id, 1);
    assert_eq!(result.protocol_name.as_deref(), Some("range"));
    assert!(result.member_id.starts_with("client-"));
    assert_eq!(result.members.len(), 1);
    assert_eq!(m.state("g"), Some(GroupState::CompletingRebalance));
    let sync = answered(&mut parked(stored_sync(
        &m,
        sync_request("g", &result.member_id, 1, &[(&result.member_id, b"x")]),
        t,
    )));
    assert_eq!(sync.assignment, Bytes::from_static(b"x"));
    assert_eq!(m.state("g"), Some(GroupState::Stable));
}

#[test]
fn kip394_member_id_required_then_rejoin() {
    // Proves KIP-394: a v4+ join with no member id gets MEMBER_ID_REQUIRED and an id; the
    // group waits for that pending member before completing the join of others.
    let m = no_delay();
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
    let m = no_delay();
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
    let mut sync_b = parked(stored_sync(&m, sync_request("g", &b, 2, &[]), t));
    still_parked(&mut sync_b);
    let sync_a = answered(&mut parked(stored_sync(&m, sync_request("g", &a, 2, &[(&a, b"A"), (&b, b"B")]), t)));
    assert_eq!(sync_a.assignment, Bytes::from_static(b"A"));
    assert_eq!(answered(&mut sync_b).assignment, Bytes::from_static(b"B"));
    assert_eq!(now_result(stored_sync(&m, sync_request("g", &b, 2, &[]), t)).assignment, Bytes::from_static(b"B"));
    assert_eq!(m.heartbeat("g", &b, None, 2, t), Ok(()));
    assert_eq!(m.heartbeat("g", &b, None, 1, t), Err(ResponseError::IllegalGeneration));
    assert_eq!(m.heartbeat("g", "nobody", None, 2, t), Err(ResponseError::UnknownMemberId));
    assert_eq!(
        now_result(stored_sync(&m, sync_request("g", &b, 1, &[]), t)).error,
        Some(ResponseError::IllegalGeneration)
    );
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    // Proves a rebalance ends at the rebalance timeout without the members that did not
    // rejoin, and that they are then unknown.
    let m = no_delay();
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
    let m = no_delay();
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
    let m = no_delay();
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
    let m = no_delay();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut rx_b = parked(m.join(range("g", ""), t));
    let ja = answered(&mut parked(m.join(range("g", &a), t)));
    let b = answered(&mut rx_b).member_id;
    let mut sync_b = parked(stored_sync(&m, sync_request("g", &b, ja.generation_id, &[]), t));
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
    let m = no_delay();
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
    let m = no_delay();
    let t = Instant::now();
    let mut first = range("g", "");
    first.group_instance_id = Some("instance-1".into());
    let j1 = answered(&mut parked(m.join(first.clone(), t)));
    let old = j1.member_id.clone();
    answered(&mut parked(stored_sync(&m, sync_request("g", &old, 1, &[(&old, b"P")]), t)));
    let j2 = now_result(m.join(first.clone(), t));
    assert_eq!(j2.error, None);
    assert_ne!(j2.member_id, old);
    assert_eq!(j2.generation_id, 1, "no rebalance");
    assert_eq!(m.state("g"), Some(GroupState::Stable));
    let mut sync = sync_request("g", &j2.member_id, 1, &[]);
    sync.group_instance_id = Some("instance-1".into());
    assert_eq!(now_result(stored_sync(&m, sync, t)).assignment, Bytes::from_static(b"P"));
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
    let m = no_delay();
    let t = Instant::now();
    assert_eq!(m.validate_commit("simple", "", -1, None), Ok(()));
    assert_eq!(m.validate_commit("simple", "", 3, None), Err(ResponseError::IllegalGeneration));
    let j = answered(&mut parked(m.join(range("g", ""), t)));
    assert_eq!(m.validate_commit("g", &j.member_id, 1, None), Err(ResponseError::RebalanceInProgress));
    answered(&mut parked(stored_sync(&m, sync_request("g", &j.member_id, 1, &[]), t)));
    assert_eq!(m.validate_commit("g", &j.member_id, 1, None), Ok(()));
    assert_eq!(m.validate_commit("g", &j.member_id, 0, None), Err(ResponseError::IllegalGeneration));
    assert_eq!(m.validate_commit("g", "nobody", 1, None), Err(ResponseError::UnknownMemberId));
}

#[test]
fn list_describe_delete() {
    // Proves ListGroups/DescribeGroups views and that only Empty groups can be deleted.
    let m = no_delay();
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
    // DeleteGroups' gate: its write runs only once the group has no members; a deleting write
    // drops the group.
    use crate::group::offsets::EmptyGroupGate;
    assert!(!m.run_if_empty("g", &mut || panic!("a group with members is not written")));
    assert_eq!(m.delete("g"), Err(ResponseError::NonEmptyGroup), "a consumer-protocol conversion's drop too");
    assert_eq!(m.leave("g", &[LeavingMember { member_id: a, group_instance_id: None }], t), vec![Ok(())]);
    assert_eq!(m.state("g"), Some(GroupState::Empty));
    assert!(m.run_if_empty("g", &mut || true));
    assert_eq!(m.state("g"), None);
    assert!(m.describe("g").is_none());
    assert_eq!(m.delete("g"), Err(ResponseError::GroupIdNotFound));
}

fn with_config(edit: impl FnOnce(&mut GroupConfig)) -> Membership {
    let mut config =
        GroupConfig { initial_rebalance_delay_ms: 0, initial_join_tick: Duration::ZERO, ..GroupConfig::default() };
    edit(&mut config);
    Membership::with_config(config)
}

#[test]
fn initial_rebalance_delay_puts_members_starting_together_in_one_generation() {
    // Regression (issue 10, the static-membership revocation): Kafka's
    // group.initial.rebalance.delay.ms. The first rebalance of an Empty group waits the delay,
    // and another one if a member joined meanwhile (bounded by the rebalance timeout), so two
    // members starting together share generation 1 and the first never gets every partition
    // only to have them revoked. A rebalance of a Stable group is not delayed.
    let m = with_config(|c| c.initial_rebalance_delay_ms = 3_000);
    let t = Instant::now();
    let ms = |n: u64| t + Duration::from_millis(n);
    let mut a = range("g", "");
    a.group_instance_id = Some("a".into());
    let mut b = range("g", "");
    b.group_instance_id = Some("b".into());
    let mut ja = parked(m.join(a, t));
    m.sweep(ms(1_000));
    still_parked(&mut ja);
    let mut jb = parked(m.join(b, ms(1_000)));
    m.sweep(ms(3_000)); // a newcomer arrived during the delay: one more delay
    still_parked(&mut ja);
    still_parked(&mut jb);
    m.sweep(ms(6_000));
    let (ra, rb) = (answered(&mut ja), answered(&mut jb));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1), "one generation for both");
    assert_eq!(ra.leader, ra.member_id);
    assert_eq!(ra.members.len(), 2);
    stored_sync(&m, sync_request("g", &ra.member_id, 1, &[(&ra.member_id, b"A"), (&rb.member_id, b"B")]), ms(6_000));
    assert_eq!(m.state("g"), Some(GroupState::Stable));

    // A third member joining the Stable group: completes as soon as everyone rejoined.
    let mut jc = parked(m.join(range("g", ""), ms(7_000)));
    let mut rejoin_a = range("g", &ra.member_id);
    rejoin_a.group_instance_id = Some("a".into());
    let mut rejoin_b = range("g", &rb.member_id);
    rejoin_b.group_instance_id = Some("b".into());
    let _ra2 = parked(m.join(rejoin_a, ms(7_000)));
    let _rb2 = parked(m.join(rejoin_b, ms(7_000)));
    assert_eq!(answered(&mut jc).generation_id, 2, "no initial delay outside Empty");

    // The delay is bounded by the rebalance timeout even if members keep coming.
    let m = with_config(|c| c.initial_rebalance_delay_ms = 3_000);
    let mut first = range("h", "");
    first.rebalance_timeout_ms = 5_000;
    let mut j1 = parked(m.join(first.clone(), t));
    let _j2 = parked(m.join(first.clone(), ms(2_000)));
    m.sweep(ms(3_000)); // extended by min(3 s, 5 s - 3 s) = 2 s
    still_parked(&mut j1);
    let _j3 = parked(m.join(first, ms(4_000)));
    m.sweep(ms(5_000));
    assert_eq!(answered(&mut j1).generation_id, 1, "no extension past the rebalance timeout");
}

/// With `group.initial.rebalance.delay.ms=0` the first rebalance still waits one timer tick,
/// as Kafka's does: members whose joins arrive together share generation 1 (a join answered at
/// once would give the first member everything, and the others a second rebalance that waits
/// for its next heartbeat).
#[test]
fn a_zero_initial_delay_still_waits_one_tick_for_members_joining_together() {
    let m = with_config(|c| c.initial_join_tick = INITIAL_JOIN_TICK);
    let t = Instant::now();
    let at = |micros: u64| t + Duration::from_micros(micros);
    let mut ja = parked(m.join(range("g", ""), t));
    let mut jb = parked(m.join(range("g", ""), at(500)));
    m.sweep(at(1_000)); // b joined within the tick: one more tick
    still_parked(&mut ja);
    m.sweep(at(2_000));
    let (ra, rb) = (answered(&mut ja), answered(&mut jb));
    assert_eq!((ra.generation_id, rb.generation_id, ra.members.len()), (1, 1, 2));
}

/// In a runtime the tick ends by itself (a task waits for the deadline), long before the
/// 100 ms sweep would. Virtual time: the wait below is a deadline, not a pause.
#[tokio::test(start_paused = true)]
async fn the_first_rebalance_ends_at_its_deadline_without_waiting_for_the_sweep() {
    let m = with_config(|c| c.initial_join_tick = INITIAL_JOIN_TICK);
    let ja = parked(m.join(range("g", ""), now()));
    let jb = parked(m.join(range("g", ""), now()));
    let answers = tokio::time::timeout(Duration::from_millis(50), async { (ja.await, jb.await) }).await;
    let (ra, rb) = answers.expect("answered within 50 ms (virtual)");
    assert_eq!((ra.unwrap().generation_id, rb.unwrap().generation_id), (1, 1));
}

/// A Stable group of two static members, `l` (the leader) and `f`: their member ids.
fn static_pair(m: &Membership, t: Instant) -> (String, String) {
    let mut l = range("s", "");
    l.group_instance_id = Some("l".into());
    let mut f = range("s", "");
    f.group_instance_id = Some("f".into());
    let mut jl = parked(m.join(l, t));
    let mut jf = parked(m.join(f, t));
    // Both in one generation: past the initial delay and its one extension.
    m.sweep(t + Duration::from_millis(3_000));
    m.sweep(t + Duration::from_millis(6_000));
    let (rl, rf) = (answered(&mut jl), answered(&mut jf));
    assert_eq!(rl.leader, rl.member_id);
    stored_sync(&m, sync_request("s", &rl.member_id, 1, &[(&rl.member_id, b"L"), (&rf.member_id, b"F")]), t);
    assert_eq!(m.state("s"), Some(GroupState::Stable));
    (rl.member_id, rf.member_id)
}

#[test]
fn restarted_static_leader_is_answered_as_kafka_does() {
    // Proves Kafka's updateStaticMemberThenRebalanceOrCompleteJoin for a Stable group: the
    // restarted static leader gets a new id and no rebalance; before JoinGroup v9 the answer
    // names the leader as it was before the replacement (so the client syncs as a follower
    // instead of assigning to an empty member list); v9 names it leader with the members and
    // skip_assignment. Changed metadata that keeps the selected protocol rebalances nothing.
    let m = with_config(|c| c.initial_rebalance_delay_ms = 3_000);
    let t = Instant::now();
    let (leader, _follower) = static_pair(&m, t);
    let mut again = join_request("s", "", &[("range", b"changed user data")]);
    again.group_instance_id = Some("l".into());
    let old_client = now_result(m.join(again.clone(), t));
    assert_eq!(old_client.error, None);
    assert_ne!(old_client.member_id, leader);
    assert_eq!(old_client.leader, leader, "the leader as it was before the replacement");
    assert!(old_client.members.is_empty());
    assert_eq!((old_client.generation_id, m.state("s")), (1, Some(GroupState::Stable)));
    let mut sync = sync_request("s", &old_client.member_id, 1, &[]);
    sync.group_instance_id = Some("l".into());
    assert_eq!(now_result(stored_sync(&m, sync, t)).assignment, Bytes::from_static(b"L"));

    again.supports_skip_assignment = true;
    let v9 = now_result(m.join(again, t));
    assert_eq!(v9.leader, v9.member_id);
    assert!(v9.skip_assignment);
    assert_eq!(v9.members.len(), 2);
    assert_eq!(m.state("s"), Some(GroupState::Stable));

    // A changed protocol choice does rebalance.
    let mut other = join_request("s", "", &[("roundrobin", b"x"), ("range", b"x")]);
    other.group_instance_id = Some("f".into());
    let _parked = m.join(other, t);
    assert_eq!(m.state("s"), Some(GroupState::Stable), "range stays the only common protocol");
}

#[test]
fn static_members_that_miss_the_rebalance_timeout_stay_members() {
    // Proves Kafka's completeClassicGroupJoin: when the rebalance timeout ends the join phase,
    // dynamic members that did not rejoin are removed, static ones stay (with the leader moved
    // to a member that did rejoin); only their session timeout removes them.
    let m = with_config(|c| c.initial_rebalance_delay_ms = 3_000);
    let t = Instant::now();
    let (leader, follower) = static_pair(&m, t);
    let dynamic = parked(m.join(range("s", ""), t)); // a third member starts a rebalance
    let mut rejoin = range("s", &follower);
    rejoin.group_instance_id = Some("f".into());
    let mut jf = parked(m.join(rejoin, t));
    drop(dynamic);
    let timeout = Duration::from_millis(REBALANCE_MS as u64);
    // The leader's session stays alive (a Java client's heartbeat thread) but it does not rejoin.
    for s in (5..30).step_by(5) {
        let at = t + Duration::from_secs(s);
        assert_eq!(m.heartbeat("s", &leader, Some("l"), 1, at), Err(ResponseError::RebalanceInProgress));
        m.sweep(at);
    }
    m.sweep(t + timeout);
    let rf = answered(&mut jf);
    assert_eq!(rf.generation_id, 2);
    assert_ne!(rf.leader, leader, "the leader is a member that rejoined");
    let described = m.describe("s").unwrap();
    assert!(described.members.iter().any(|d| d.member_id == leader), "the static straggler is still a member");
    m.sweep(t + timeout + Duration::from_millis(SESSION_MS as u64 + 1));
    let described = m.describe("s").unwrap();
    assert!(described.members.iter().all(|d| d.member_id != leader), "its session ended");
}

#[test]
fn group_max_size_counts_pending_member_ids_and_keeps_the_members() {
    // Proves group.max.size: joins past it get GROUP_MAX_SIZE_REACHED, KIP-394 member ids that
    // never come back count toward it (and expire), and the members stay.
    let m = with_config(|c| c.max_size = 2);
    let t = Instant::now();
    let (member, _) = single_member_stable(&m, "g", t);
    let mut kip394 = range("g", "");
    kip394.require_known_member_id = true;
    assert_eq!(now_result(m.join(kip394.clone(), t)).error, Some(ResponseError::MemberIdRequired));
    assert_eq!(now_result(m.join(kip394.clone(), t)).error, Some(ResponseError::GroupMaxSizeReached));
    assert_eq!(now_result(m.join(range("g", ""), t)).error, Some(ResponseError::GroupMaxSizeReached));
    assert_eq!(m.heartbeat("g", &member, None, 1, t), Ok(()));
    assert_eq!(m.state("g"), Some(GroupState::Stable));
    m.sweep(t + Duration::from_millis(SESSION_MS as u64 + 1));
    let _ = m.heartbeat("g", &member, None, 1, t + Duration::from_millis(SESSION_MS as u64));
    // The pending id expired: room for one again.
    let later = t + Duration::from_millis(SESSION_MS as u64 + 2);
    assert_eq!(now_result(m.join(kip394, later)).error, Some(ResponseError::MemberIdRequired));
}

#[test]
fn refused_and_abandoned_joins_leave_no_group_behind() {
    // Proves that a group exists in memory only once a join is accepted: refused joins,
    // describes of unknown groups and KIP-394 member ids that never come back leave nothing.
    let m = no_delay();
    let t = Instant::now();
    assert_eq!(
        now_result(m.join(join_request("bad", "", &[]), t)).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(now_result(m.join(range("unknown-member", "nobody"), t)).error, Some(ResponseError::UnknownMemberId));
    assert!(m.describe("never").is_none());
    let mut kip394 = range("abandoned", "");
    kip394.require_known_member_id = true;
    for _ in 0..3 {
        assert_eq!(now_result(m.join(kip394.clone(), t)).error, Some(ResponseError::MemberIdRequired));
    }
    assert_eq!(m.state("abandoned"), Some(GroupState::Empty));
    m.sweep(t + Duration::from_millis(SESSION_MS as u64 + 1));
    m.sweep(t + Duration::from_millis(SESSION_MS as u64 + 2));
    assert!(m.list().is_empty(), "{:?}", m.list());
    assert_eq!(m.group_count(), 0);
}

#[test]
fn group_max_count_evicts_groups_without_members_then_refuses() {
    // Proves group.max.count: at the bound a new group evicts one without members; when
    // every group has members, a join that needs a new group gets GROUP_MAX_SIZE_REACHED while
    // the existing groups keep working.
    let m = with_config(|c| c.max_count = 2);
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "a", t);
    let (b, generation) = single_member_stable(&m, "b", t);
    assert_eq!(m.leave("b", &[LeavingMember { member_id: b, group_instance_id: None }], t), vec![Ok(())]);
    assert_eq!(m.state("b"), Some(GroupState::Empty));
    assert_eq!(generation, 1);
    let (_c, _) = single_member_stable(&m, "c", t);
    assert_eq!(m.state("b"), None, "the empty group made room");
    assert_eq!(now_result(m.join(range("d", ""), t)).error, Some(ResponseError::GroupMaxSizeReached));
    assert_eq!(m.state("d"), None);
    assert_eq!(m.heartbeat("a", &a, None, 1, t), Ok(()));
    assert_eq!(m.group_count(), 2);
}

#[test]
fn a_restored_group_keeps_its_members_generation_and_assignment() {
    // Proves a coordinator that loads a group's stored metadata takes over its members: they
    // heartbeat and sync in the same generation with the same assignment, no rebalance.
    let t = Instant::now();
    let old = no_delay();
    let (member, generation) = single_member_stable(&old, "g", t);
    let stored = old.metadata_value("g", 1).expect("a Stable group is stored");

    let new = no_delay();
    new.restore(&|group| group == "g", vec![("g".to_string(), stored)], t);
    assert_eq!(new.state("g"), Some(GroupState::Stable));
    assert_eq!(new.heartbeat("g", &member, None, generation, t), Ok(()));
    let sync = now_result(stored_sync(&new, sync_request("g", &member, generation, &[]), t));
    assert_eq!(sync.error, None);
    assert_eq!(&sync.assignment[..], b"a1");
    let description = new.describe("g").expect("described");
    assert_eq!(description.protocol, "range");
    assert_eq!(description.members.len(), 1);
    // Sessions restart at the load: a member that never comes back expires then.
    new.sweep(t + Duration::from_millis(SESSION_MS as u64 + 1));
    assert_eq!(new.state("g"), Some(GroupState::Empty));
}

#[test]
fn restoring_a_partition_replaces_groups_of_an_earlier_leadership() {
    // Proves restore drops what the node held for groups of that partition (parked requests
    // learn NOT_COORDINATOR) and resign drops groups whose partition moved away.
    let t = Instant::now();
    let m = no_delay();
    let mut waiting = parked(m.join(range("g", ""), t));
    let _ = answered(&mut waiting);
    let first = m.join(range("h", ""), t);
    m.restore(&|group| group == "g", Vec::new(), t);
    assert_eq!(m.state("g"), None);
    assert_eq!(m.state("h"), Some(GroupState::CompletingRebalance));
    assert_eq!(m.resign(&|group| group == "h"), 1);
    assert_eq!(m.state("h"), None);
    drop(first);
    // An Empty group with a generation is stored as such and restores Empty.
    let (member, _) = single_member_stable(&m, "e", t);
    let _ = m.leave("e", &[LeavingMember { member_id: member, group_instance_id: None }], t);
    assert_eq!(m.state("e"), Some(GroupState::Empty));
    let stored = m.metadata_value("e", 1).expect("an Empty group with a generation is stored");
    assert!(stored.members.is_empty() && stored.protocol.is_none() && stored.leader.is_none());
    let restored = no_delay();
    restored.restore(&|group| group == "e", vec![("e".to_string(), stored)], t);
    assert_eq!(restored.state("e"), Some(GroupState::Empty));
}

#[test]
fn a_leader_sync_is_answered_only_once_stored_and_a_failed_store_rebalances() {
    // Proves Kafka's order: the leader's assignment reaches no member (and the group is not
    // Stable) until it is stored; a failed store answers every parked member with the error and
    // starts a rebalance, where it answered the followers first and only logged the failure.
    let m = no_delay();
    let t = Instant::now();
    let (a, _) = single_member_stable(&m, "g", t);
    let mut join_b = parked(m.join(range("g", ""), t));
    let ja = answered(&mut parked(m.join(range("g", &a), t)));
    let b = answered(&mut join_b).member_id;
    let generation = ja.generation_id;
    let mut sync_b = parked(m.sync(sync_request("g", &b, generation, &[]), t));
    let mut sync_a = parked(m.sync(sync_request("g", &a, generation, &[(&a, b"A"), (&b, b"B")]), t));
    still_parked(&mut sync_b);
    still_parked(&mut sync_a);
    assert_eq!(m.state("g"), Some(GroupState::CompletingRebalance), "not Stable before it is stored");
    assert!(m.assignment_to_store("g", &b, generation).is_none(), "a follower does not store");
    let value = m.assignment_to_store("g", &a, generation).expect("the leader's assignment waits to be stored");
    assert_eq!(value.generation, generation);
    m.complete_sync("g", generation, Err(ResponseError::CoordinatorNotAvailable), t);
    assert_eq!(answered(&mut sync_a).error, Some(ResponseError::CoordinatorNotAvailable));
    assert_eq!(answered(&mut sync_b).error, Some(ResponseError::CoordinatorNotAvailable));
    assert_eq!(m.state("g"), Some(GroupState::PreparingRebalance));
}
