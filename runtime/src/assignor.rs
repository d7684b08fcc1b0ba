//! Server-side consumer group assignors (KIP-848 `group.remote.assignor`) written as guests.
//!
//! Invariant: an assignment returned by [`AssignorInstance::assign`] assigns every partition of
//! every subscribed topic (one that is in the metadata and that some member subscribes to)
//! exactly once, to a member subscribed to its topic, and lists every member exactly once.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::bindings::assignor::runnel::transform::assignment as wit;
use crate::guest::Guest;
use crate::host::{self, HostState};
use crate::runtime::{export_func, Loaded, RuntimeInner};
use crate::{GuestError, Limits, LogSink, RuntimeError};
use wasmtime::component::{ComponentExportIndex, Func, InstancePre};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Member {
    pub member_id: String,
    pub rack: Option<String>,
    /// Topics the member subscribes to.
    pub subscriptions: Vec<String>,
    /// Partitions the member owns now (empty for a new member).
    pub owned: Vec<TopicPartitions>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicMetadata {
    pub name: String,
    /// Size in bytes of each partition (index = partition id; the length is the count).
    pub partition_sizes: Vec<u64>,
    /// Racks of each partition's replicas (index = partition id); empty when unknown.
    pub partition_racks: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberAssignment {
    pub member_id: String,
    pub partitions: Vec<TopicPartitions>,
}

/// A compiled assignor. Cheap to clone.
#[derive(Clone)]
pub struct AssignorModule {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    runtime: Arc<RuntimeInner>,
    pre: InstancePre<HostState>,
    name: ComponentExportIndex,
    assign: ComponentExportIndex,
    sha256: String,
    from_cache: bool,
}

impl AssignorModule {
    pub(crate) fn new(runtime: Arc<RuntimeInner>, loaded: Loaded) -> Result<Self, RuntimeError> {
        let instance_pre = runtime.assignor_linker.instantiate_pre(&loaded.component).map_err(|e| {
            RuntimeError::WrongWorld(format!("the assignor's imports do not match what Runnel provides: {e:#}"))
        })?;
        let (name, assign) = (export_func(&loaded, "name")?, export_func(&loaded, "assign")?);
        Ok(AssignorModule {
            inner: Arc::new(ModuleInner {
                runtime,
                pre: instance_pre,
                name,
                assign,
                sha256: loaded.sha256,
                from_cache: loaded.from_cache,
            }),
        })
    }

    /// True when this module was loaded from a precompiled artifact instead of compiled.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }

    /// Hex SHA-256 of the module bytes.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    pub fn instantiate(&self, limits: Limits, log: LogSink) -> Result<AssignorInstance, GuestError> {
        let state = HostState::new(&limits, &[], log, None);
        let store = host::new_store(&self.inner.runtime.engine, state);
        let mut guest = Guest::new(store, limits);
        let inner = &self.inner;
        let (name, assign) = guest.call(|store| {
            let instance = inner.pre.instantiate(&mut *store)?;
            let lacks = |f: &str| wasmtime::format_err!("the instance lacks the assignor's `{f}`");
            let name = instance.get_func(&mut *store, inner.name).ok_or_else(|| lacks("name"))?;
            let assign = instance.get_func(&mut *store, inner.assign).ok_or_else(|| lacks("assign"))?;
            // Checks the types now (any served version: records match structurally).
            name.typed::<(), (String,)>(&*store)?;
            assign.typed::<AssignParams<'_>, AssignResults>(&*store)?;
            Ok((name, assign))
        })?;
        Ok(AssignorInstance { guest, name, assign })
    }
}

impl fmt::Debug for AssignorModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssignorModule")
            .field("sha256", &self.inner.sha256)
            .field("from_cache", &self.inner.from_cache)
            .finish_non_exhaustive()
    }
}

/// A running assignor; reuse it across rebalances.
pub struct AssignorInstance {
    guest: Guest,
    name: Func,
    assign: Func,
}

type AssignParams<'a> = (&'a [wit::Member], &'a [wit::TopicMetadata]);
type AssignResults = (Result<Vec<wit::MemberAssignment>, String>,);

impl AssignorInstance {
    /// The name clients select the assignor by (`group.remote.assignor`).
    pub fn name(&mut self) -> Result<String, GuestError> {
        let name = self.name;
        self.guest.call(|store| name.typed::<(), (String,)>(&*store)?.call(store, ()).map(|(name,)| name))
    }

    /// Computes every member's assignment and checks it (see the module invariant). Members the
    /// guest left out get an empty assignment.
    pub fn assign(
        &mut self,
        members: &[Member],
        topics: &[TopicMetadata],
    ) -> Result<Vec<MemberAssignment>, GuestError> {
        let wit_members: Vec<wit::Member> = members
            .iter()
            .map(|m| wit::Member {
                member_id: m.member_id.clone(),
                rack: m.rack.clone(),
                subscriptions: m.subscriptions.clone(),
                owned: m.owned.iter().map(to_wit).collect(),
            })
            .collect();
        let wit_topics: Vec<wit::TopicMetadata> = topics
            .iter()
            .map(|t| wit::TopicMetadata {
                name: t.name.clone(),
                partition_sizes: t.partition_sizes.clone(),
                partition_racks: t.partition_racks.clone(),
            })
            .collect();
        let assign = self.assign;
        let (result,) = self.guest.call(|store| {
            assign.typed::<AssignParams<'_>, AssignResults>(&*store)?.call(store, (&wit_members, &wit_topics))
        })?;
        let result = result.map_err(GuestError::Failed)?;
        let assignment = result
            .into_iter()
            .map(|a| MemberAssignment {
                member_id: a.member_id,
                partitions: a
                    .partitions
                    .into_iter()
                    .map(|p| TopicPartitions { topic: p.topic, partitions: p.partitions })
                    .collect(),
            })
            .collect();
        validate_assignment(members, topics, assignment).map_err(GuestError::InvalidOutput)
    }

    /// Current size of the instance's linear memories, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.guest.memory_bytes()
    }

    /// True after a call that trapped, ran past its deadline or hit the memory cap: the
    /// instance must not be called again.
    pub fn is_poisoned(&self) -> bool {
        self.guest.is_poisoned()
    }
}

impl fmt::Debug for AssignorInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssignorInstance").field("memory_bytes", &self.memory_bytes()).finish_non_exhaustive()
    }
}

fn to_wit(p: &TopicPartitions) -> wit::TopicPartitions {
    wit::TopicPartitions { topic: p.topic.clone(), partitions: p.partitions.clone() }
}

/// Checks an assignment against the module invariant and completes it with the members the
/// guest left out.
pub(crate) fn validate_assignment(
    members: &[Member],
    topics: &[TopicMetadata],
    mut assignment: Vec<MemberAssignment>,
) -> Result<Vec<MemberAssignment>, String> {
    // Names are looked up once per member and per (member, topic) entry; partitions are checked
    // against flat per-topic flags, not hashed one by one (an assignment of 100 members x 1,000
    // partitions is checked in tens of microseconds).
    let topic_index: HashMap<&str, usize> = topics.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let member_index: HashMap<&str, usize> =
        members.iter().enumerate().map(|(i, m)| (m.member_id.as_str(), i)).collect();
    let subscribed: Vec<HashSet<&str>> =
        members.iter().map(|m| m.subscriptions.iter().map(String::as_str).collect()).collect();
    let mut listed = vec![false; members.len()];
    let mut assigned: Vec<Vec<bool>> = topics.iter().map(|t| vec![false; t.partition_sizes.len()]).collect();
    for member in &assignment {
        let id = member.member_id.as_str();
        let Some(&m) = member_index.get(id) else {
            return Err(format!("assignment for unknown member `{id}`"));
        };
        if std::mem::replace(&mut listed[m], true) {
            return Err(format!("member `{id}` is listed more than once"));
        }
        for tp in &member.partitions {
            let topic = tp.topic.as_str();
            let Some(&t) = topic_index.get(topic) else {
                return Err(format!("member `{id}` is assigned unknown topic `{topic}`"));
            };
            if !subscribed[m].contains(topic) {
                return Err(format!("member `{id}` is assigned `{topic}` but does not subscribe to it"));
            }
            let flags = &mut assigned[t];
            let count = flags.len();
            for &partition in &tp.partitions {
                let Some(flag) = usize::try_from(partition).ok().and_then(|p| flags.get_mut(p)) else {
                    return Err(format!("`{topic}` has {count} partitions; partition {partition} does not exist"));
                };
                if std::mem::replace(flag, true) {
                    return Err(format!("partition {topic}-{partition} is assigned more than once"));
                }
            }
        }
    }

    let subscribed_topics: HashSet<&str> = subscribed.iter().flatten().copied().collect();
    for (topic, flags) in topics.iter().zip(&assigned) {
        let name = topic.name.as_str();
        if !subscribed_topics.contains(name) {
            continue;
        }
        if let Some(partition) = flags.iter().position(|&a| !a) {
            return Err(format!("partition {name}-{partition} is not assigned to any member"));
        }
    }

    let missing: Vec<MemberAssignment> = members
        .iter()
        .zip(&listed)
        .filter(|(_, &listed)| !listed)
        .map(|(m, _)| MemberAssignment { member_id: m.member_id.clone(), partitions: Vec::new() })
        .collect();
    assignment.extend(missing);
    Ok(assignment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str]) -> Member {
        Member {
            member_id: id.into(),
            subscriptions: topics.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        }
    }

    fn topic(name: &str, partitions: usize) -> TopicMetadata {
        TopicMetadata { name: name.into(), partition_sizes: vec![0; partitions], partition_racks: Vec::new() }
    }

    fn assign(id: &str, parts: &[(&str, &[i32])]) -> MemberAssignment {
        MemberAssignment {
            member_id: id.into(),
            partitions: parts
                .iter()
                .map(|(t, p)| TopicPartitions { topic: t.to_string(), partitions: p.to_vec() })
                .collect(),
        }
    }

    /// A complete assignment passes, and members the guest left out are added empty.
    #[test]
    fn valid_assignment_is_completed_with_missing_members() {
        let members = [member("a", &["t"]), member("b", &["t", "u"]), member("c", &["u"])];
        let topics = [topic("t", 2), topic("u", 1), topic("unsubscribed", 3)];
        let result =
            validate_assignment(&members, &topics, vec![assign("a", &[("t", &[0, 1])]), assign("b", &[("u", &[0])])]);
        let result = result.unwrap();
        assert_eq!(result.len(), 3);
        assert_eq!(result[2], assign("c", &[]));
    }

    /// Each way an assignment can break the invariant is reported with what is wrong.
    #[test]
    fn invalid_assignments_are_rejected() {
        let members = [member("a", &["t"]), member("b", &["t"]), member("c", &["u"])];
        let topics = [topic("t", 2), topic("u", 1)];
        let cases = [
            (vec![assign("x", &[])], "unknown member `x`"),
            (vec![assign("a", &[("t", &[0, 1])]), assign("a", &[])], "listed more than once"),
            (vec![assign("a", &[("v", &[0])])], "unknown topic `v`"),
            (vec![assign("a", &[("u", &[0])])], "does not subscribe"),
            (vec![assign("a", &[("t", &[2])])], "partition 2 does not exist"),
            (vec![assign("a", &[("t", &[-1])])], "partition -1 does not exist"),
            (vec![assign("a", &[("t", &[0, 1])]), assign("b", &[("t", &[1])])], "t-1 is assigned more than once"),
            (vec![assign("a", &[("t", &[0, 1])])], "u-0 is not assigned"),
        ];
        for (assignment, expected) in cases {
            let err = validate_assignment(&members, &topics, assignment).unwrap_err();
            assert!(err.contains(expected), "{err:?} should contain {expected:?}");
        }
    }
}
