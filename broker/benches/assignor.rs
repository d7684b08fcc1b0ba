//! Server-side assignor cost against group size (issue 14: "built for thousands of members").
//!
//! `cargo bench -p runnel-broker --bench assignor` times the built-in `uniform` assignor on:
//! - `initial/<members>`: a new group, every member subscribed to one topic of 10 partitions
//!   per member, nothing owned yet;
//! - `join/<members>`: the same group balanced, then one more member joins (the sticky path
//!   and the moves that give the newcomer its share);
//! - `mixed/<members>`: 100 topics of 50 partitions, each member subscribed to 10 of them
//!   (seeded), nothing owned: heterogeneous subscriptions, where balancing moves partitions.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use runnel::group::assignor::{uniform, AssignmentSpec, MemberSpec, TopicSpec};

fn member(id: usize, topics: BTreeSet<String>) -> MemberSpec {
    MemberSpec { member_id: format!("member-{id:05}"), rack: None, subscriptions: topics, owned: BTreeMap::new() }
}

fn topic(partitions: u32) -> TopicSpec {
    TopicSpec { partitions, racks: Vec::new() }
}

fn homogeneous(members: usize) -> AssignmentSpec {
    let topics = BTreeMap::from([("events".to_string(), topic(10 * members as u32))]);
    let subscribed = BTreeSet::from(["events".to_string()]);
    AssignmentSpec { members: (0..members).map(|i| member(i, subscribed.clone())).collect(), topics }
}

fn joined(members: usize) -> AssignmentSpec {
    let mut spec = homogeneous(members);
    let plan = uniform(&spec);
    for m in &mut spec.members {
        m.owned = plan.get(&m.member_id).cloned().unwrap_or_default();
    }
    spec.members.push(member(members, BTreeSet::from(["events".to_string()])));
    spec
}

fn mixed(members: usize) -> AssignmentSpec {
    let topics: BTreeMap<String, TopicSpec> = (0..100).map(|t| (format!("topic-{t:03}"), topic(50))).collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let members = (0..members)
        .map(|i| {
            let mut subscribed = BTreeSet::new();
            while subscribed.len() < 10 {
                subscribed.insert(format!("topic-{:03}", next() % 100));
            }
            member(i, subscribed)
        })
        .collect();
    AssignmentSpec { members, topics }
}

fn assign(c: &mut Criterion) {
    let mut group = c.benchmark_group("uniform");
    group.sample_size(10);
    for members in [100usize, 1_000, 3_000] {
        for (name, spec) in [("initial", homogeneous(members)), ("join", joined(members)), ("mixed", mixed(members))] {
            group.bench_with_input(BenchmarkId::new(name, members), &spec, |b, spec| {
                b.iter(|| uniform(black_box(spec)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, assign);
criterion_main!(benches);
