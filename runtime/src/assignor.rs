//! Server-side consumer group assignors (KIP-848 `group.remote.assignor`) written as guests.
//!
//! Two forms are served: `group-assignor` (what the SDK builds: the group as one `group-spec`
//! with every topic and rack name once, members and partitions by index) and the first form,
//! `partition-assignor` (members and topics by name, 0.1.0 and early 0.2.0 components). The
//! public types here are by name; [`AssignorInstance::assign`] converts for either form.
//!
//! Invariant: an assignment returned by [`AssignorInstance::assign`] assigns every partition of
//! every subscribed topic (one that is in the metadata and that some member subscribes to)
//! exactly once, to a member subscribed to its topic, and lists every member exactly once.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::bindings::assignor::runnel::transform::group_assignment as compact;
use crate::bindings::name_assignor::runnel::transform::assignment as wit;
use crate::guest::Guest;
use crate::host::{self, HostState};
use crate::runtime::{export_func, Loaded, RuntimeInner, NAME_ASSIGNOR_INTERFACE};
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
    form: Form,
    sha256: String,
    from_cache: bool,
}

/// Which assignor interface a component exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `group-assignor`: one `group-spec`, names by index.
    Group,
    /// `partition-assignor`: members and topics by name.
    Names,
}

impl AssignorModule {
    pub(crate) fn new(runtime: Arc<RuntimeInner>, loaded: Loaded) -> Result<Self, RuntimeError> {
        let instance_pre = runtime.assignor_linker.instantiate_pre(&loaded.component).map_err(|e| {
            RuntimeError::WrongWorld(format!("the assignor's imports do not match what Runnel provides: {e:#}"))
        })?;
        let (name, assign) = (export_func(&loaded, "name")?, export_func(&loaded, "assign")?);
        let form =
            if loaded.export.contains(&format!("/{NAME_ASSIGNOR_INTERFACE}@")) { Form::Names } else { Form::Group };
        Ok(AssignorModule {
            inner: Arc::new(ModuleInner {
                runtime,
                pre: instance_pre,
                name,
                assign,
                form,
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
            match inner.form {
                Form::Group => drop(assign.typed::<GroupParams<'_>, GroupResults>(&*store)?),
                Form::Names => drop(assign.typed::<AssignParams<'_>, AssignResults>(&*store)?),
            }
            Ok((name, assign))
        })?;
        Ok(AssignorInstance { guest, name, assign, form: inner.form })
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
    form: Form,
}

type AssignParams<'a> = (&'a [wit::Member], &'a [wit::TopicMetadata]);
type AssignResults = (Result<Vec<wit::MemberAssignment>, String>,);
type GroupParams<'a> = (&'a compact::GroupSpec,);
type GroupResults = (Result<Vec<compact::MemberAssignment>, String>,);

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
        match self.form {
            Form::Group => self.assign_group(members, topics),
            Form::Names => {
                let assignment = self.assign_by_names(members, topics)?;
                validate_assignment(members, topics, assignment).map_err(GuestError::InvalidOutput)
            }
        }
    }

    /// The `group-assignor` form: the plan is checked by index (the module invariant, with the
    /// same messages as `validate_assignment`), then named.
    fn assign_group(
        &mut self,
        members: &[Member],
        topics: &[TopicMetadata],
    ) -> Result<Vec<MemberAssignment>, GuestError> {
        let spec = group_spec(members, topics);
        let assign = self.assign;
        let (result,) =
            self.guest.call(|store| assign.typed::<GroupParams<'_>, GroupResults>(&*store)?.call(store, (&spec,)))?;
        let mut result = result.map_err(GuestError::failed)?;
        check_compact(&spec, &result).map_err(GuestError::InvalidOutput)?;
        let mut listed = vec![false; members.len()];
        let mut assignment = Vec::with_capacity(members.len());
        for a in &mut result {
            listed[a.member as usize] = true;
            a.partitions.sort_unstable_by_key(|tp| (tp.topic, tp.partition));
            let mut partitions: Vec<TopicPartitions> = Vec::new();
            for tp in &a.partitions {
                match partitions.last_mut() {
                    Some(last) if last.topic == topics[tp.topic as usize].name => last.partitions.push(tp.partition),
                    _ => partitions.push(TopicPartitions {
                        topic: topics[tp.topic as usize].name.clone(),
                        partitions: vec![tp.partition],
                    }),
                }
            }
            assignment.push(MemberAssignment { member_id: members[a.member as usize].member_id.clone(), partitions });
        }
        let missing = members.iter().zip(&listed).filter(|(_, &listed)| !listed);
        assignment
            .extend(missing.map(|(m, _)| MemberAssignment { member_id: m.member_id.clone(), partitions: Vec::new() }));
        Ok(assignment)
    }

    fn assign_by_names(
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
        let result = result.map_err(GuestError::failed)?;
        Ok(result
            .into_iter()
            .map(|a| MemberAssignment {
                member_id: a.member_id,
                partitions: a
                    .partitions
                    .into_iter()
                    .map(|p| TopicPartitions { topic: p.topic, partitions: p.partitions })
                    .collect(),
            })
            .collect())
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

/// The compact form of a group: racks and rack sets interned, topics by index. Subscriptions
/// and owned partitions of topics not in `topics` are left out (nothing of them can be assigned).
fn group_spec(members: &[Member], topics: &[TopicMetadata]) -> compact::GroupSpec {
    let topic_index: HashMap<&str, u32> = topics.iter().enumerate().map(|(i, t)| (t.name.as_str(), i as u32)).collect();
    let mut racks: Vec<String> = Vec::new();
    let mut rack_index: HashMap<&str, u32> = HashMap::new();
    let mut rack_sets: Vec<Vec<u32>> = Vec::new();
    let mut set_index: HashMap<Vec<u32>, u32> = HashMap::new();
    fn intern<'a>(name: &'a str, racks: &mut Vec<String>, index: &mut HashMap<&'a str, u32>) -> u32 {
        *index.entry(name).or_insert_with(|| {
            racks.push(name.to_string());
            racks.len() as u32 - 1
        })
    }
    let mut spec_topics = Vec::with_capacity(topics.len());
    let mut set: Vec<u32> = Vec::new();
    for t in topics {
        let mut partition_racks = Vec::new();
        if !t.partition_racks.is_empty() {
            partition_racks.reserve(t.partition_sizes.len());
            for p in 0..t.partition_sizes.len() {
                set.clear();
                let replicas = t.partition_racks.get(p).map_or(&[][..], Vec::as_slice);
                set.extend(replicas.iter().map(|r| intern(r, &mut racks, &mut rack_index)));
                set.sort_unstable();
                set.dedup();
                let index = match set_index.get(set.as_slice()) {
                    Some(&index) => index,
                    None => {
                        rack_sets.push(set.clone());
                        set_index.insert(set.clone(), rack_sets.len() as u32 - 1);
                        rack_sets.len() as u32 - 1
                    }
                };
                partition_racks.push(index);
            }
        }
        spec_topics.push(compact::Topic {
            name: t.name.clone(),
            partition_sizes: t.partition_sizes.clone(),
            partition_racks,
        });
    }
    let spec_members = members
        .iter()
        .map(|m| compact::Member {
            member_id: m.member_id.clone(),
            rack: m.rack.as_deref().map(|r| intern(r, &mut racks, &mut rack_index)),
            subscriptions: m.subscriptions.iter().filter_map(|s| topic_index.get(s.as_str()).copied()).collect(),
            owned: m
                .owned
                .iter()
                .filter_map(|tp| topic_index.get(tp.topic.as_str()).map(|&topic| (topic, &tp.partitions)))
                .flat_map(|(topic, partitions)| {
                    partitions.iter().map(move |&partition| compact::TopicPartition { topic, partition })
                })
                .collect(),
        })
        .collect();
    compact::GroupSpec { members: spec_members, topics: spec_topics, racks, rack_sets }
}

fn to_wit(p: &TopicPartitions) -> wit::TopicPartitions {
    wit::TopicPartitions { topic: p.topic.clone(), partitions: p.partitions.clone() }
}

/// Checks a `group-assignor` plan against the module invariant, by index: members and topics
/// in range, each member listed once, partitions only of topics the member subscribes to, each
/// partition of a subscribed topic exactly once.
fn check_compact(spec: &compact::GroupSpec, result: &[compact::MemberAssignment]) -> Result<(), String> {
    let mut listed = vec![false; spec.members.len()];
    let mut assigned: Vec<Vec<bool>> = spec.topics.iter().map(|t| vec![false; t.partition_sizes.len()]).collect();
    for a in result {
        let Some(member) = spec.members.get(a.member as usize) else {
            return Err(format!("assignment for unknown member index {}", a.member));
        };
        let id = &member.member_id;
        if std::mem::replace(&mut listed[a.member as usize], true) {
            return Err(format!("member `{id}` is listed more than once"));
        }
        for tp in &a.partitions {
            let Some(topic) = spec.topics.get(tp.topic as usize) else {
                return Err(format!("member `{id}` is assigned unknown topic index {}", tp.topic));
            };
            let name = &topic.name;
            if !member.subscriptions.contains(&tp.topic) {
                return Err(format!("member `{id}` is assigned `{name}` but does not subscribe to it"));
            }
            let flags = &mut assigned[tp.topic as usize];
            let count = flags.len();
            let partition = tp.partition;
            let Some(flag) = usize::try_from(partition).ok().and_then(|p| flags.get_mut(p)) else {
                return Err(format!("`{name}` has {count} partitions; partition {partition} does not exist"));
            };
            if std::mem::replace(flag, true) {
                return Err(format!("partition {name}-{partition} is assigned more than once"));
            }
        }
    }
    let mut subscribed = vec![false; spec.topics.len()];
    for member in &spec.members {
        for &t in &member.subscriptions {
            subscribed[t as usize] = true;
        }
    }
    for ((topic, flags), _) in spec.topics.iter().zip(&assigned).zip(&subscribed).filter(|(_, &s)| s) {
        if let Some(partition) = flags.iter().position(|&a| !a) {
            return Err(format!("partition {}-{partition} is not assigned to any member", topic.name));
        }
    }
    Ok(())
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

    /// The compact form interns racks and rack sets, drops unknown topics, and its check finds
    /// each way a plan can break the invariant, naming members and topics.
    #[test]
    fn compact_groups_and_their_checks() {
        let mut members = [member("a", &["t", "gone"]), member("b", &["t"]), member("c", &["u"])];
        members[0].rack = Some("r1".into());
        members[0].owned = vec![TopicPartitions { topic: "t".into(), partitions: vec![1] }];
        let mut topics = [topic("t", 2), topic("u", 1)];
        topics[0].partition_racks = vec![vec!["r2".into(), "r1".into()], vec!["r1".into(), "r2".into(), "r1".into()]];
        let spec = group_spec(&members, &topics);
        assert_eq!(spec.racks, ["r2", "r1"]);
        assert_eq!(spec.rack_sets, [vec![0, 1]], "one set, both partitions");
        assert_eq!(spec.topics[0].partition_racks, [0, 0]);
        assert!(spec.topics[1].partition_racks.is_empty(), "unknown racks stay unknown");
        assert_eq!((spec.members[0].rack, spec.members[0].subscriptions.clone()), (Some(1), vec![0]));
        let owned: Vec<(u32, i32)> = spec.members[0].owned.iter().map(|tp| (tp.topic, tp.partition)).collect();
        assert_eq!(owned, [(0, 1)]);

        let plan = |entries: &[(u32, &[(u32, i32)])]| -> Vec<compact::MemberAssignment> {
            entries
                .iter()
                .map(|(member, parts)| compact::MemberAssignment {
                    member: *member,
                    partitions: parts
                        .iter()
                        .map(|&(topic, partition)| compact::TopicPartition { topic, partition })
                        .collect(),
                })
                .collect()
        };
        assert_eq!(check_compact(&spec, &plan(&[(0, &[(0, 0), (0, 1)]), (2, &[(1, 0)])])), Ok(()));
        type Entries<'a> = &'a [(u32, &'a [(u32, i32)])];
        let cases: [(Entries<'_>, &str); 7] = [
            (&[(7, &[])], "unknown member index 7"),
            (&[(0, &[(0, 0), (0, 1)]), (0, &[])], "`a` is listed more than once"),
            (&[(0, &[(9, 0)])], "unknown topic index 9"),
            (&[(0, &[(1, 0)])], "`a` is assigned `u` but does not subscribe"),
            (&[(0, &[(0, 2)])], "`t` has 2 partitions; partition 2 does not exist"),
            (&[(0, &[(0, 0), (0, 1)]), (1, &[(0, 1)])], "t-1 is assigned more than once"),
            (&[(0, &[(0, 0), (0, 1)])], "u-0 is not assigned"),
        ];
        for (entries, expected) in cases {
            let err = check_compact(&spec, &plan(entries)).unwrap_err();
            assert!(err.contains(expected), "{err:?} should contain {expected:?}");
        }
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
