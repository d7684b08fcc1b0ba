//! Server-side consumer group assignors (KIP-848 `group.remote.assignor`): the [`Assignor`]
//! trait and the [`Group`] it assigns.
//!
//! A group arrives in the compact form of the WIT `group-assignment` interface: every topic and
//! rack name appears once, and members, partitions and replica racks refer to them by index
//! (`u32` into [`Group::topics`], [`Group::racks`] and [`Group::rack_sets`]). An assignor
//! compares integers, not strings, and the group crosses into the guest in a few hundred
//! allocations even for thousands of partitions. [`Group::builder`] makes one from names (for
//! tests), [`Group::plan`] turns a result back into names.

use std::collections::{BTreeMap, HashMap};

use crate::Error;

/// A partition of `Group::topics[topic]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: u32,
    pub partition: i32,
}

/// A group member as the assignor sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    /// The member's `client.rack` (an index into [`Group::racks`]), when it set one.
    pub rack: Option<u32>,
    /// Topics the member subscribes to (indices into [`Group::topics`]).
    pub subscriptions: Vec<u32>,
    /// Partitions the member owns now (empty for a new member).
    pub owned: Vec<TopicPartition>,
}

impl Member {
    /// Whether the member subscribes to topic `topic` (an index into [`Group::topics`]).
    pub fn subscribes_to(&self, topic: u32) -> bool {
        self.subscriptions.contains(&topic)
    }
}

/// What the broker knows of a subscribed topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    /// Size in bytes of each partition (index = partition id; the length is the count).
    pub partition_sizes: Vec<u64>,
    /// For each partition, the index into [`Group::rack_sets`] of its replicas' racks; empty
    /// when unknown.
    pub partition_racks: Vec<u32>,
}

impl Topic {
    /// The number of partitions.
    pub fn partition_count(&self) -> usize {
        self.partition_sizes.len()
    }
}

/// A consumer group to assign: its members, the topics they subscribe to, and the racks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Group {
    pub members: Vec<Member>,
    pub topics: Vec<Topic>,
    /// Every rack a member or a replica is in.
    pub racks: Vec<String>,
    /// The distinct sets of racks partitions' replicas are in (indices into `racks`).
    pub rack_sets: Vec<Vec<u32>>,
}

impl Group {
    /// A group described by names.
    ///
    /// ```
    /// use runnel_sdk::assign::Group;
    ///
    /// let group = Group::builder()
    ///     .topic_in_racks("orders", &[10, 20], &[&["eu-1"], &["eu-2", "eu-1"]])
    ///     .member_in_rack("m1", "eu-2", &["orders"])
    ///     .member("m2", &["orders", "unknown-topic"])
    ///     .owning("orders", &[1])
    ///     .build();
    /// assert_eq!(group.topics[0].partition_count(), 2);
    /// assert_eq!(group.replica_racks(0, 1).iter().map(|&r| group.rack_name(r)).collect::<Vec<_>>(), ["eu-1", "eu-2"]);
    /// assert_eq!(group.members[0].rack.map(|r| group.rack_name(r)), Some("eu-2"));
    /// assert_eq!(group.members[1].subscriptions, [0]); // topics not in the group are left out
    /// assert_eq!(group.members[1].owned.len(), 1);
    /// ```
    pub fn builder() -> GroupBuilder {
        GroupBuilder::default()
    }

    /// The racks (indices into [`Group::racks`]) of the replicas of a partition; empty when
    /// unknown.
    pub fn replica_racks(&self, topic: u32, partition: usize) -> &[u32] {
        self.topics
            .get(topic as usize)
            .and_then(|t| t.partition_racks.get(partition))
            .and_then(|&set| self.rack_sets.get(set as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// The name of rack `rack` (empty for an index out of range).
    pub fn rack_name(&self, rack: u32) -> &str {
        self.racks.get(rack as usize).map_or("", String::as_str)
    }

    /// The indices of the members subscribed to `topic`, in member order.
    pub fn subscribers(&self, topic: u32) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().enumerate().filter(move |(_, m)| m.subscribes_to(topic)).map(|(i, _)| i)
    }

    /// An assignment by names: member id → topic name → its partitions, sorted. Entries for
    /// members or topics out of range are left out.
    pub fn plan(&self, assignment: &[MemberAssignment]) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
        let mut plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for a in assignment {
            let Some(member) = self.members.get(a.member as usize) else { continue };
            let topics = plan.entry(member.member_id.clone()).or_default();
            for tp in &a.partitions {
                if let Some(topic) = self.topics.get(tp.topic as usize) {
                    topics.entry(topic.name.clone()).or_default().push(tp.partition);
                }
            }
        }
        for partitions in plan.values_mut().flat_map(|topics| topics.values_mut()) {
            partitions.sort_unstable();
        }
        plan
    }
}

/// Builds a [`Group`] from names ([`Group::builder`]). Subscriptions and owned partitions of
/// topics not added are left out, as the broker leaves out topics that do not exist.
#[derive(Debug, Default)]
pub struct GroupBuilder {
    topics: Vec<NamedTopic>,
    members: Vec<NamedMember>,
}

#[derive(Debug)]
struct NamedTopic {
    name: String,
    sizes: Vec<u64>,
    replica_racks: Vec<Vec<String>>,
}

#[derive(Debug)]
struct NamedMember {
    member_id: String,
    rack: Option<String>,
    subscriptions: Vec<String>,
    owned: Vec<(String, Vec<i32>)>,
}

impl GroupBuilder {
    /// A topic with these partition sizes and unknown replica racks.
    pub fn topic(mut self, name: &str, partition_sizes: &[u64]) -> Self {
        self.topics.push(NamedTopic {
            name: name.to_string(),
            sizes: partition_sizes.to_vec(),
            replica_racks: Vec::new(),
        });
        self
    }

    /// A topic with these partition sizes and the racks of each partition's replicas.
    pub fn topic_in_racks(mut self, name: &str, partition_sizes: &[u64], replica_racks: &[&[&str]]) -> Self {
        let replica_racks = replica_racks.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect();
        self.topics.push(NamedTopic { name: name.to_string(), sizes: partition_sizes.to_vec(), replica_racks });
        self
    }

    /// A member without a rack.
    pub fn member(mut self, member_id: &str, subscriptions: &[&str]) -> Self {
        let subscriptions = subscriptions.iter().map(|s| s.to_string()).collect();
        self.members.push(NamedMember {
            member_id: member_id.to_string(),
            rack: None,
            subscriptions,
            owned: Vec::new(),
        });
        self
    }

    /// A member in `rack`.
    pub fn member_in_rack(self, member_id: &str, rack: &str, subscriptions: &[&str]) -> Self {
        let mut builder = self.member(member_id, subscriptions);
        if let Some(member) = builder.members.last_mut() {
            member.rack = Some(rack.to_string());
        }
        builder
    }

    /// The last member added owns these partitions of `topic` now.
    pub fn owning(mut self, topic: &str, partitions: &[i32]) -> Self {
        if let Some(member) = self.members.last_mut() {
            member.owned.push((topic.to_string(), partitions.to_vec()));
        }
        self
    }

    pub fn build(self) -> Group {
        let mut group = Group::default();
        let mut rack_index: HashMap<String, u32> = HashMap::new();
        let mut set_index: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut rack = |name: &str, racks: &mut Vec<String>| -> u32 {
            *rack_index.entry(name.to_string()).or_insert_with(|| {
                racks.push(name.to_string());
                racks.len() as u32 - 1
            })
        };
        let topic_index: HashMap<&str, u32> =
            self.topics.iter().enumerate().map(|(i, t)| (t.name.as_str(), i as u32)).collect();
        for NamedTopic { name, sizes, replica_racks } in &self.topics {
            let mut partition_racks = Vec::new();
            if !replica_racks.is_empty() {
                for p in 0..sizes.len() {
                    let mut set: Vec<u32> = replica_racks
                        .get(p)
                        .map_or(&[][..], Vec::as_slice)
                        .iter()
                        .map(|r| rack(r, &mut group.racks))
                        .collect();
                    set.sort_unstable();
                    set.dedup();
                    let next = group.rack_sets.len() as u32;
                    let index = *set_index.entry(set.clone()).or_insert(next);
                    if index == next {
                        group.rack_sets.push(set);
                    }
                    partition_racks.push(index);
                }
            }
            group.topics.push(Topic { name: name.clone(), partition_sizes: sizes.clone(), partition_racks });
        }
        for NamedMember { member_id, rack: member_rack, subscriptions, owned } in &self.members {
            let owned = owned
                .iter()
                .filter_map(|(topic, partitions)| topic_index.get(topic.as_str()).map(|&t| (t, partitions)))
                .flat_map(|(topic, partitions)| {
                    partitions.iter().map(move |&partition| TopicPartition { topic, partition })
                })
                .collect();
            group.members.push(Member {
                member_id: member_id.clone(),
                rack: member_rack.as_deref().map(|r| rack(r, &mut group.racks)),
                subscriptions: subscriptions.iter().filter_map(|s| topic_index.get(s.as_str()).copied()).collect(),
                owned,
            });
        }
        group
    }
}

/// The partitions assigned to one member (`Group::members[member]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberAssignment {
    pub member: u32,
    pub partitions: Vec<TopicPartition>,
}

/// A consumer group assignor. Register it with [`crate::export_assignor!`].
///
/// The host checks the result: every partition of every subscribed topic assigned to exactly
/// one member subscribed to that topic ([`crate::testing::check_assignment`] runs the same
/// check natively). Members left out get nothing.
///
/// ```
/// use runnel_sdk::assign::{Assignor, Group, MemberAssignment, TopicPartition};
/// use runnel_sdk::Error;
///
/// /// Everything to the subscriber with the smallest member id.
/// struct First;
///
/// impl Assignor for First {
///     fn name() -> &'static str {
///         "first"
///     }
///
///     fn assign(group: &Group) -> Result<Vec<MemberAssignment>, Error> {
///         let mut out: Vec<MemberAssignment> =
///             (0..group.members.len() as u32).map(|member| MemberAssignment { member, partitions: vec![] }).collect();
///         for (t, topic) in group.topics.iter().enumerate() {
///             let first = group.subscribers(t as u32).min_by_key(|&m| &group.members[m].member_id);
///             if let Some(m) = first {
///                 let partitions = (0..topic.partition_count() as i32).map(|partition| TopicPartition { topic: t as u32, partition });
///                 out[m].partitions.extend(partitions);
///             }
///         }
///         Ok(out)
///     }
/// }
///
/// runnel_sdk::export_assignor!(First);
///
/// let group = Group::builder().topic("t", &[1, 1, 1]).member("b", &["t"]).member("a", &["t"]).build();
/// let result = runnel_sdk::testing::assign::<First>(&group)?;
/// assert_eq!(group.plan(&result)["a"]["t"], [0, 1, 2]);
/// # Ok::<(), Error>(())
/// ```
pub trait Assignor {
    /// A display name (shown beside the deployment); clients select the assignor by its
    /// deployment name (`group.remote.assignor`).
    fn name() -> &'static str;

    /// The assignment of every member.
    fn assign(group: &Group) -> Result<Vec<MemberAssignment>, Error>;
}
