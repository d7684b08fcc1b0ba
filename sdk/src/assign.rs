//! Server-side consumer group assignors (KIP-848 `group.remote.assignor`): the [`Assignor`]
//! trait and the plain data it works on (owned copies of the WIT `assignment` records; an
//! assignment runs rarely, so clarity beats zero-copy here).

use crate::Error;

/// Partitions of one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A group member as the assignor sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    /// The member's `client.rack`, when it set one.
    pub rack: Option<String>,
    /// Topics the member subscribes to.
    pub subscriptions: Vec<String>,
    /// Partitions the member owns now (empty for a new member).
    pub owned: Vec<TopicPartitions>,
}

impl Member {
    /// A member without rack or owned partitions.
    ///
    /// ```
    /// use runnel_sdk::assign::Member;
    ///
    /// let member = Member::new("m1", &["orders"]).with_rack("eu-1");
    /// assert_eq!(member.rack.as_deref(), Some("eu-1"));
    /// ```
    pub fn new(member_id: &str, subscriptions: &[&str]) -> Self {
        Member {
            member_id: member_id.to_string(),
            rack: None,
            subscriptions: subscriptions.iter().map(|s| s.to_string()).collect(),
            owned: Vec::new(),
        }
    }

    /// The same member in `rack`.
    pub fn with_rack(mut self, rack: &str) -> Self {
        self.rack = Some(rack.to_string());
        self
    }

    /// Whether the member subscribes to `topic`.
    pub fn subscribes_to(&self, topic: &str) -> bool {
        self.subscriptions.iter().any(|s| s == topic)
    }
}

/// What the broker knows of a subscribed topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// Size in bytes of each partition (index = partition id; the length is the count).
    pub partition_sizes: Vec<u64>,
    /// Racks of each partition's replicas (index = partition id); empty when unknown.
    pub partition_racks: Vec<Vec<String>>,
}

impl TopicMetadata {
    /// A topic with these partition sizes and unknown racks.
    ///
    /// ```
    /// use runnel_sdk::assign::TopicMetadata;
    ///
    /// let topic = TopicMetadata::new("orders", &[10, 20]).with_racks(&[&["eu-1"], &["eu-2"]]);
    /// assert_eq!(topic.partition_count(), 2);
    /// assert_eq!(topic.racks(1), ["eu-2"]);
    /// assert!(topic.racks(7).is_empty());
    /// ```
    pub fn new(name: &str, partition_sizes: &[u64]) -> Self {
        TopicMetadata { name: name.to_string(), partition_sizes: partition_sizes.to_vec(), partition_racks: Vec::new() }
    }

    /// The same topic with the replica racks of each partition.
    pub fn with_racks(mut self, racks: &[&[&str]]) -> Self {
        self.partition_racks = racks.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect();
        self
    }

    /// The number of partitions.
    pub fn partition_count(&self) -> usize {
        self.partition_sizes.len()
    }

    /// The replica racks of a partition (empty when unknown).
    pub fn racks(&self, partition: usize) -> &[String] {
        self.partition_racks.get(partition).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// The partitions assigned to one member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberAssignment {
    pub member_id: String,
    pub partitions: Vec<TopicPartitions>,
}

/// A consumer group assignor. Register it with [`crate::export_assignor!`].
///
/// The host checks the result: every partition of every subscribed topic assigned to exactly
/// one member subscribed to that topic ([`crate::testing::check_assignment`] runs the same
/// check natively).
///
/// ```
/// use runnel_sdk::assign::{Assignor, Member, MemberAssignment, TopicMetadata, TopicPartitions};
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
///     fn assign(members: &[Member], topics: &[TopicMetadata]) -> Result<Vec<MemberAssignment>, Error> {
///         let mut out: Vec<MemberAssignment> = members
///             .iter()
///             .map(|m| MemberAssignment { member_id: m.member_id.clone(), partitions: vec![] })
///             .collect();
///         for topic in topics {
///             let first = (0..members.len())
///                 .filter(|&i| members[i].subscribes_to(&topic.name))
///                 .min_by_key(|&i| &members[i].member_id);
///             if let Some(i) = first {
///                 let partitions = (0..topic.partition_count() as i32).collect();
///                 out[i].partitions.push(TopicPartitions { topic: topic.name.clone(), partitions });
///             }
///         }
///         Ok(out)
///     }
/// }
///
/// runnel_sdk::export_assignor!(First);
///
/// let members = [Member::new("b", &["t"]), Member::new("a", &["t"])];
/// let topics = [TopicMetadata::new("t", &[1, 1, 1])];
/// let result = runnel_sdk::testing::assign::<First>(&members, &topics)?;
/// assert_eq!(result[1].partitions[0].partitions, [0, 1, 2]);
/// # Ok::<(), Error>(())
/// ```
pub trait Assignor {
    /// The name clients select it by (`group.remote.assignor`).
    fn name() -> &'static str;

    /// The assignment of every member.
    fn assign(members: &[Member], topics: &[TopicMetadata]) -> Result<Vec<MemberAssignment>, Error>;
}
