//! Server-side partition assignors of consumer groups (KIP-848): what a group's target
//! assignment is computed from (`AssignmentSpec`), the built-in `uniform` and `range` assignors
//! with Kafka's names, and the check every assignor's result passes before a group uses it
//! (`validate`), whoever computed it.
//!
//! Invariant: a plan that passed `validate` assigns every partition of every topic some member
//! subscribes to exactly once, and only to a member subscribed to its topic. Assignors are pure
//! functions of the spec; they run outside every group lock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// Kafka's default server assignor.
pub const UNIFORM: &str = "uniform";
/// Co-partitioning: partition p of every topic goes to the same member when the members
/// subscribe to the same topics with the same partition counts.
pub const RANGE: &str = "range";

/// Partitions by topic name.
pub type TopicPartitions = BTreeMap<String, BTreeSet<i32>>;

/// What an assignor sees of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    pub member_id: String,
    pub rack: Option<String>,
    /// Topics the member subscribes to that exist (names, and regex matches resolved).
    pub subscriptions: BTreeSet<String>,
    /// The member's partitions in the current target assignment (empty for a new member), so an
    /// assignor can be sticky.
    pub owned: TopicPartitions,
}

/// What an assignor sees of one subscribed topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub partitions: u32,
    /// Racks of each partition's replicas (index = partition), empty where unknown.
    pub racks: Vec<Vec<String>>,
}

/// The input of an assignment: members sorted by id, subscribed topics by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentSpec {
    pub members: Vec<MemberSpec>,
    pub topics: BTreeMap<String, TopicSpec>,
}

/// The output: each member's partitions (members without any may be absent).
pub type Plan = BTreeMap<String, TopicPartitions>;

/// A built-in assignor by name.
pub fn builtin(name: &str) -> Option<fn(&AssignmentSpec) -> Plan> {
    match name {
        UNIFORM => Some(uniform),
        RANGE => Some(range),
        _ => None,
    }
}

/// Checks a plan against its spec (the invariant above). The error says what is wrong, for the
/// group's visible assignor error.
pub fn validate(spec: &AssignmentSpec, plan: &Plan) -> Result<(), String> {
    let members: BTreeMap<&str, &MemberSpec> = spec.members.iter().map(|m| (m.member_id.as_str(), m)).collect();
    let mut seen: BTreeMap<(&str, i32), &str> = BTreeMap::new();
    for (member_id, topics) in plan {
        let Some(member) = members.get(member_id.as_str()) else {
            return Err(format!("assigned partitions to {member_id:?}, which is not a member"));
        };
        for (topic, partitions) in topics {
            let Some(spec_topic) = spec.topics.get(topic) else {
                return Err(format!("assigned topic {topic:?}, which no member subscribes to or does not exist"));
            };
            if !member.subscriptions.contains(topic) {
                return Err(format!("assigned {topic:?} to {member_id:?}, which does not subscribe to it"));
            }
            for &p in partitions {
                if p < 0 || p as u32 >= spec_topic.partitions {
                    return Err(format!("assigned {topic}-{p}, which does not exist"));
                }
                if let Some(other) = seen.insert((topic.as_str(), p), member_id.as_str()) {
                    return Err(format!("assigned {topic}-{p} to both {other:?} and {member_id:?}"));
                }
            }
        }
    }
    for (topic, spec_topic) in &spec.topics {
        let subscribed = spec.members.iter().any(|m| m.subscriptions.contains(topic));
        for p in 0..spec_topic.partitions as i32 {
            if subscribed && !seen.contains_key(&(topic.as_str(), p)) {
                return Err(format!("left {topic}-{p} unassigned"));
            }
        }
    }
    Ok(())
}

/// Kafka's `uniform` assignor: balanced (member partition counts differ by at most one where
/// subscriptions allow) and sticky (a member keeps what it owns up to its share).
///
/// Works on any mix of subscriptions: partitions a member keeps are those it owns, still
/// subscribes to, and fit its share; the rest go one at a time, most constrained topic first,
/// to the least-loaded subscriber; then partitions move from a member more than one above
/// another subscriber of the same topic until none does. Ties go to the lower member id.
///
/// Cost: O(P log M) to place P partitions among M members, and per balancing move a look at the
/// heaviest members only (each topic's subscribers are kept ordered by load), so thousands of
/// members and tens of thousands of partitions take milliseconds (`--bench assignor`).
pub fn uniform(spec: &AssignmentSpec) -> Plan {
    // Members by index in id order: index order is the id tie-break everywhere.
    let mut members: Vec<&MemberSpec> = spec.members.iter().collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    members.dedup_by(|a, b| a.member_id == b.member_id);
    let index: BTreeMap<&str, usize> = members.iter().enumerate().map(|(i, m)| (m.member_id.as_str(), i)).collect();
    let subscribers: BTreeMap<&str, Vec<usize>> =
        subscribers(spec).into_iter().map(|(t, subs)| (t, subs.iter().map(|m| index[m]).collect())).collect();
    // The subscribed topics of each member that exist.
    let topics_of: Vec<Vec<&str>> = members
        .iter()
        .map(|m| m.subscriptions.iter().filter_map(|t| spec.topics.get_key_value(t).map(|(n, _)| n.as_str())).collect())
        .collect();
    let mut load = vec![0usize; members.len()];
    let mut plan: Vec<BTreeSet<(&str, i32)>> = vec![BTreeSet::new(); members.len()];
    let mut assigned: BTreeSet<(&str, i32)> = BTreeSet::new();
    // Sticky part: each member keeps what it owns up to its fair share of what it can take
    // (partitions of its topics over the members that share them, rounded up: exact for
    // homogeneous subscriptions).
    for (i, m) in members.iter().enumerate() {
        let share: f64 =
            topics_of[i].iter().map(|t| spec.topics[*t].partitions as f64 / subscribers[t].len() as f64).sum();
        let limit = share.ceil() as usize;
        for (topic, partitions) in &m.owned {
            let Some((name, t)) = spec.topics.get_key_value(topic) else { continue };
            if !m.subscriptions.contains(topic) {
                continue;
            }
            for &p in partitions {
                if plan[i].len() >= limit {
                    break;
                }
                if p >= 0 && (p as u32) < t.partitions && assigned.insert((name.as_str(), p)) {
                    plan[i].insert((name.as_str(), p));
                }
            }
        }
        load[i] = plan[i].len();
    }
    // Unassigned partitions, topics with the fewest subscribers first, each to the least-loaded
    // subscriber (a heap per topic: only this topic's placements change loads meanwhile).
    let mut topics: Vec<(&str, &TopicSpec)> = spec.topics.iter().map(|(n, t)| (n.as_str(), t)).collect();
    topics.sort_by_key(|(name, _)| (subscribers.get(name).map_or(0, Vec::len), *name));
    for (topic, t) in &topics {
        let Some(subs) = subscribers.get(topic) else { continue };
        let mut lightest: BinaryHeap<Reverse<(usize, usize)>> = subs.iter().map(|&m| Reverse((load[m], m))).collect();
        for p in 0..t.partitions as i32 {
            if assigned.contains(&(*topic, p)) {
                continue;
            }
            let Reverse((_, m)) = lightest.pop().expect("a subscribed topic has subscribers");
            plan[m].insert((topic, p));
            load[m] += 1;
            lightest.push(Reverse((load[m], m)));
        }
    }
    // Balance: move a partition from a member to a subscriber of its topic with at least two
    // fewer, until no move exists. Each move lowers the sum of squared loads, so this ends.
    // The heaviest member with a partition whose topic's lightest subscriber is two below it
    // gives that topic's highest partition (its topics in reverse name order) to that
    // subscriber.
    let mut by_load: BTreeMap<&str, BTreeSet<(usize, usize)>> =
        subscribers.iter().map(|(t, subs)| (*t, subs.iter().map(|&m| (load[m], m)).collect())).collect();
    let mut heaviest: BTreeSet<(Reverse<usize>, usize)> = (0..members.len()).map(|m| (Reverse(load[m]), m)).collect();
    loop {
        let lightest_load = heaviest.last().map_or(0, |(Reverse(l), _)| *l);
        let mut chosen = None;
        'search: for &(Reverse(from_load), from) in &heaviest {
            if from_load < lightest_load + 2 {
                // Nobody anywhere is two below this member or any lighter one.
                break;
            }
            let mut seen = None;
            for &(topic, p) in plan[from].iter().rev() {
                if seen.replace(topic) == Some(topic) {
                    continue;
                }
                if let Some(&(to_load, to)) = by_load.get(topic).and_then(BTreeSet::first) {
                    if to_load + 2 <= from_load {
                        chosen = Some((from, to, topic, p));
                        break 'search;
                    }
                }
            }
        }
        let Some((from, to, topic, p)) = chosen else { break };
        plan[from].remove(&(topic, p));
        plan[to].insert((topic, p));
        for (m, new_load) in [(from, load[from] - 1), (to, load[to] + 1)] {
            heaviest.remove(&(Reverse(load[m]), m));
            heaviest.insert((Reverse(new_load), m));
            for t in &topics_of[m] {
                let set = by_load.get_mut(t).expect("a member's topic has subscribers");
                set.remove(&(load[m], m));
                set.insert((new_load, m));
            }
            load[m] = new_load;
        }
    }
    into_plan(members.iter().map(|m| m.member_id.as_str()).zip(plan).collect())
}

/// Kafka's `range` assignor: for each topic, its subscribers sorted by member id take
/// consecutive ranges, the first `partitions % members` one partition more. Members with the
/// same subscriptions get the same partition numbers of every topic of equal size.
pub fn range(spec: &AssignmentSpec) -> Plan {
    let subscribers = subscribers(spec);
    let mut plan: BTreeMap<&str, BTreeSet<(&str, i32)>> = BTreeMap::new();
    for (topic, t) in &spec.topics {
        let Some(subs) = subscribers.get(topic.as_str()) else { continue };
        let (n, count) = (subs.len() as u32, t.partitions);
        let (base, extra) = (count / n, count % n);
        let mut next = 0u32;
        for (i, member) in subs.iter().enumerate() {
            let take = base + u32::from((i as u32) < extra);
            let entry = plan.entry(member).or_default();
            for p in next..next + take {
                entry.insert((topic.as_str(), p as i32));
            }
            next += take;
        }
    }
    into_plan(plan)
}

/// Kafka's client-side `roundrobin` (RoundRobinAssignor; HTTP consumer instances lead classic
/// groups with it): every partition, topics in name order, dealt to the next member in id order
/// that subscribes to its topic.
pub fn round_robin(spec: &AssignmentSpec) -> Plan {
    let members: Vec<&MemberSpec> = spec.members.iter().collect();
    let mut plan: BTreeMap<&str, BTreeSet<(&str, i32)>> = BTreeMap::new();
    if members.is_empty() {
        return Plan::new();
    }
    let mut cursor = 0;
    for (topic, t) in &spec.topics {
        for p in 0..t.partitions as i32 {
            for _ in 0..members.len() {
                let member = members[cursor % members.len()];
                cursor += 1;
                if member.subscriptions.contains(topic) {
                    plan.entry(member.member_id.as_str()).or_default().insert((topic.as_str(), p));
                    break;
                }
            }
        }
    }
    into_plan(plan)
}

/// Subscribers of each topic in the spec, sorted by member id.
fn subscribers(spec: &AssignmentSpec) -> BTreeMap<&str, Vec<&str>> {
    let mut subs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in &spec.members {
        for topic in &m.subscriptions {
            if let Some((name, _)) = spec.topics.get_key_value(topic) {
                subs.entry(name.as_str()).or_default().push(m.member_id.as_str());
            }
        }
    }
    for members in subs.values_mut() {
        members.sort_unstable();
    }
    subs
}

fn into_plan(plan: BTreeMap<&str, BTreeSet<(&str, i32)>>) -> Plan {
    plan.into_iter()
        .map(|(member, partitions)| {
            let mut topics = TopicPartitions::new();
            for (topic, p) in partitions {
                topics.entry(topic.to_string()).or_default().insert(p);
            }
            (member.to_string(), topics)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str], owned: &[(&str, &[i32])]) -> MemberSpec {
        MemberSpec {
            member_id: id.to_string(),
            rack: None,
            subscriptions: topics.iter().map(|t| t.to_string()).collect(),
            owned: owned.iter().map(|(t, ps)| (t.to_string(), ps.iter().copied().collect())).collect(),
        }
    }

    fn spec(members: Vec<MemberSpec>, topics: &[(&str, u32)]) -> AssignmentSpec {
        AssignmentSpec {
            members,
            topics: topics
                .iter()
                .map(|(n, p)| (n.to_string(), TopicSpec { partitions: *p, racks: Vec::new() }))
                .collect(),
        }
    }

    fn counts(plan: &Plan) -> Vec<usize> {
        let mut c: Vec<usize> = plan.values().map(|t| t.values().map(|p| p.len()).sum()).collect();
        c.sort_unstable();
        c
    }

    #[test]
    fn uniform_balances_homogeneous_members() {
        let s = spec(vec![member("a", &["t"], &[]), member("b", &["t"], &[]), member("c", &["t"], &[])], &[("t", 10)]);
        let plan = uniform(&s);
        validate(&s, &plan).unwrap();
        assert_eq!(counts(&plan), vec![3, 3, 4]);
    }

    #[test]
    fn uniform_is_sticky_when_a_member_joins() {
        let before = spec(vec![member("a", &["t"], &[]), member("b", &["t"], &[])], &[("t", 6)]);
        let first = uniform(&before);
        let mut after =
            spec(vec![member("a", &["t"], &[]), member("b", &["t"], &[]), member("c", &["t"], &[])], &[("t", 6)]);
        after.members[0].owned = first["a"].clone();
        after.members[1].owned = first["b"].clone();
        let second = uniform(&after);
        validate(&after, &second).unwrap();
        assert_eq!(counts(&second), vec![2, 2, 2]);
        // Only what c needed moved: a and b kept two of their three each.
        for m in ["a", "b"] {
            let kept = second[m]["t"].intersection(&first[m]["t"]).count();
            assert_eq!(kept, 2, "{m} kept {kept}");
        }
    }

    #[test]
    fn uniform_respects_heterogeneous_subscriptions() {
        let s = spec(
            vec![member("a", &["x", "y"], &[]), member("b", &["y"], &[]), member("c", &["x"], &[])],
            &[("x", 4), ("y", 4)],
        );
        let plan = uniform(&s);
        validate(&s, &plan).unwrap();
        assert_eq!(counts(&plan), vec![2, 3, 3]);
    }

    #[test]
    fn uniform_leaves_no_improving_move_on_random_groups() {
        // Seeded random groups (mixed subscriptions, owned partitions that may be stale, out of
        // range or contested): every plan is valid, and balanced as far as subscriptions allow:
        // no member holds a partition whose topic has a subscriber two or more below it.
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..300 {
            let topics: Vec<(String, u32)> = (0..1 + next(8)).map(|t| (format!("t{t}"), next(60) as u32)).collect();
            let count = 1 + next(40);
            let mut members: Vec<MemberSpec> = (0..count)
                .map(|m| {
                    let mut owned = TopicPartitions::new();
                    for (t, n) in &topics {
                        for p in (0..*n as i32 + 2).filter(|_| next(count) == 0) {
                            owned.entry(t.clone()).or_default().insert(p);
                        }
                    }
                    MemberSpec {
                        member_id: format!("m{}", next(1000) * 100 + m),
                        rack: None,
                        subscriptions: topics.iter().filter(|_| next(3) > 0).map(|(t, _)| t.clone()).collect(),
                        owned,
                    }
                })
                .collect();
            members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
            let topics = topics.iter().map(|(n, p)| (n.as_str(), *p)).collect::<Vec<_>>();
            let s = spec(members, &topics);
            let plan = uniform(&s);
            validate(&s, &plan).unwrap_or_else(|e| panic!("round {round}: {e}"));
            let load = |m: &str| plan.get(m).map_or(0, |t| t.values().map(BTreeSet::len).sum::<usize>());
            for (from, owned) in &plan {
                for topic in owned.keys().filter(|t| !owned[*t].is_empty()) {
                    for m in s.members.iter().filter(|m| m.subscriptions.contains(topic)) {
                        assert!(
                            load(&m.member_id) + 2 > load(from),
                            "round {round}: {from} ({}) could give {topic} to {} ({})",
                            load(from),
                            m.member_id,
                            load(&m.member_id)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn range_co_partitions() {
        let s = spec(vec![member("b", &["x", "y"], &[]), member("a", &["x", "y"], &[])], &[("x", 3), ("y", 3)]);
        let plan = range(&s);
        validate(&s, &plan).unwrap();
        assert_eq!(plan["a"]["x"], plan["a"]["y"]);
        assert_eq!(plan["a"]["x"], [0, 1].into_iter().collect());
        assert_eq!(plan["b"]["x"], [2].into_iter().collect());
    }

    #[test]
    fn validate_names_what_is_wrong() {
        let s = spec(vec![member("a", &["t"], &[]), member("b", &["u"], &[])], &[("t", 2), ("u", 1)]);
        let plan = |entries: &[(&str, &str, &[i32])]| -> Plan {
            let mut plan = Plan::new();
            for (m, t, ps) in entries {
                plan.entry(m.to_string()).or_default().insert(t.to_string(), ps.iter().copied().collect());
            }
            plan
        };
        assert!(validate(&s, &plan(&[("a", "t", &[0, 1]), ("b", "u", &[0])])).is_ok());
        assert!(validate(&s, &plan(&[("a", "t", &[0]), ("b", "u", &[0])])).unwrap_err().contains("t-1 unassigned"));
        assert!(validate(&s, &plan(&[("a", "t", &[0, 1]), ("b", "t", &[1]), ("b", "u", &[0])]))
            .unwrap_err()
            .contains("does not subscribe"));
        assert!(validate(&s, &plan(&[("a", "t", &[0, 1, 2]), ("b", "u", &[0])])).unwrap_err().contains("t-2"));
        assert!(validate(&s, &plan(&[("a", "t", &[0, 1]), ("z", "u", &[0])])).unwrap_err().contains("not a member"));
    }
}
