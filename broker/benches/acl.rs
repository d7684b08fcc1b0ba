//! ACL check cost against the number of ACLs.
//!
//! `cargo bench -p runnel-broker --bench acl` measures `AuthorizerSettings::authorize` (what
//! every request's authorization runs) for a principal reading a topic whose name matches one
//! literal and one prefixed ACL, among 10, 1,000 and 10,000 ACLs on other topics, groups and
//! principals. Up to 32 ACLs a check scans them; above, it looks the resource up by name, so
//! its cost should stay about flat from 1,000 to 10,000 ACLs where a scan grows 10×.

use std::collections::BTreeSet;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use runnel::security::acl::{AclBinding, AuthorizerSettings, Operation, PatternType, Permission, ResourceType};
use runnel::security::Principal;

fn acls(count: usize) -> BTreeSet<AclBinding> {
    let binding = |kind, name: String, pattern, principal: &str, operation| AclBinding {
        resource_type: kind,
        resource_name: name,
        pattern,
        principal: principal.to_string(),
        host: "*".to_string(),
        operation,
        permission: Permission::Allow,
    };
    let mut set = BTreeSet::new();
    set.insert(binding(
        ResourceType::Topic,
        "orders-eu-west".into(),
        PatternType::Literal,
        "User:app",
        Operation::Read,
    ));
    set.insert(binding(ResourceType::Topic, "orders-".into(), PatternType::Prefixed, "User:app", Operation::Describe));
    let mut i = 0;
    while set.len() < count {
        let kind = if i % 3 == 0 { ResourceType::Group } else { ResourceType::Topic };
        let pattern = if i % 5 == 0 { PatternType::Prefixed } else { PatternType::Literal };
        set.insert(binding(
            kind,
            format!("team-{}-stream-{i}", i % 97),
            pattern,
            &format!("User:u{i}"),
            Operation::Write,
        ));
        i += 1;
    }
    set
}

fn authorize(c: &mut Criterion) {
    let settings = AuthorizerSettings { enabled: true, ..AuthorizerSettings::default() };
    let principal = Principal::user("app");
    let mut group = c.benchmark_group("authorize");
    for count in [10usize, 1_000, 10_000] {
        let acls = acls(count);
        group.bench_with_input(BenchmarkId::new("read_topic", count), &acls, |b, acls| {
            b.iter(|| {
                let allowed = settings.authorize(
                    black_box(acls),
                    &principal,
                    "127.0.0.1",
                    Operation::Read,
                    ResourceType::Topic,
                    black_box("orders-eu-west"),
                );
                assert!(allowed);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, authorize);
criterion_main!(benches);
