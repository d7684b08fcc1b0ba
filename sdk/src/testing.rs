//! Native test support: run a [`Transform`], [`Assignor`] or [`Validator`] in plain
//! `cargo test`, no wasm.
//!
//! [`Harness`] drives the same batch code the guest runs and then checks the output the way the
//! host does (topic indices, spans, header encoding), so a transform that passes here produces
//! batches the broker accepts.

use crate::assign::{Assignor, Group, MemberAssignment};
use crate::log::Level;
use crate::raw::{self, Headers, InputBatch, InputRecord, NULL};
use crate::transform::{Instance, Transform};
use crate::validate::{Rejection, Validator, ValidatorInstance};
use crate::{Error, Payload};

/// Runs a transform natively on batches of [`TestRecord`]s.
///
/// ```
/// use runnel_sdk::testing::{Harness, TestRecord};
/// use runnel_sdk::{Config, Error, Output, Record, Transform};
///
/// struct Identity;
///
/// impl Transform for Identity {
///     fn init(_: &Config) -> Result<Self, Error> {
///         Ok(Identity)
///     }
///
///     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
///         out.forward(record);
///         Ok(())
///     }
/// }
///
/// let mut harness = Harness::<Identity>::new(&[("k", "v")], &["out-a", "out-b"])?.partition(3);
/// let written = harness.process(&[TestRecord::new().key("k").value("v").header("h", "x").timestamp(7)])?;
/// assert_eq!(written[0].topic, "out-a");
/// assert_eq!(written[0].key.as_deref(), Some(&b"k"[..]));
/// assert_eq!(written[0].headers, [("h".to_string(), Some(b"x".to_vec()))]);
/// assert_eq!(written[0].timestamp, Some(7));
/// # Ok::<(), Error>(())
/// ```
pub struct Harness<T> {
    instance: Instance<T>,
    output_topics: Vec<String>,
    partition: i32,
    next_offset: i64,
}

impl<T: Transform> Harness<T> {
    /// Initializes the transform with these parameters and output topics (what `init` gets).
    pub fn new(parameters: &[(&str, &str)], output_topics: &[&str]) -> Result<Self, Error> {
        let params = parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let outputs: Vec<String> = output_topics.iter().map(|t| t.to_string()).collect();
        // A fresh harness starts from an empty, unbounded state (one per thread).
        crate::state::imp::with(|s| s.reset());
        let instance = Instance::new(params, outputs.clone())?;
        // As on the broker, state changes made while starting (in `init`) belong to no batch
        // and are dropped.
        crate::state::imp::end_batch(false);
        Ok(Harness { instance, output_topics: outputs, partition: 0, next_offset: 0 })
    }

    /// Bounds the state as the deployment's `state_bytes_max` does (default: unbounded).
    pub fn state_bytes_max(self, limit: usize) -> Self {
        crate::state::imp::with(|s| s.limit_bytes = limit);
        self
    }

    /// The committed state under `key` (as the broker would restore it).
    pub fn state_get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        crate::state::imp::with(|s| s.committed().get(key.as_ref()).cloned())
    }

    /// The whole committed state, in key order.
    pub fn state(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        crate::state::imp::with(|s| s.committed().iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Sets the committed state under `key` (a state as a restore would find it).
    pub fn set_state(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        crate::state::imp::with(|s| s.set_committed(key.as_ref().to_vec(), value.as_ref().to_vec()));
    }

    /// The input partition of later batches (default 0).
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// The transform, to inspect its state.
    pub fn transform(&self) -> &T {
        &self.instance.transform
    }

    /// Runs one batch and returns what it wrote, in order. Records without an explicit offset
    /// get consecutive offsets continuing from the previous batch. As on the broker, the
    /// batch's state changes are kept only when it succeeds (error and invalid output drop
    /// them).
    pub fn process(&mut self, records: &[TestRecord]) -> Result<Vec<Written>, Error> {
        let batch = input_batch(self.partition, &mut self.next_offset, records);
        let written = self
            .instance
            .process(&batch)
            .and_then(|(data, descriptors)| descriptors.iter().map(|d| self.decode(&data, d)).collect());
        crate::state::imp::end_batch(written.is_ok());
        written
    }

    /// Reads one output record back, rejecting what the host would reject.
    fn decode(&self, data: &[u8], d: &raw::OutputRecord) -> Result<Written, Error> {
        let topic = self.output_topics.get(d.topic as usize).ok_or_else(|| {
            Error::new(format_args!(
                "invalid output: topic index {} but {} output topics",
                d.topic,
                self.output_topics.len()
            ))
        })?;
        let read = |span: raw::Span, what: &str| -> Result<Option<Vec<u8>>, Error> {
            if span.len < -1 || (span.len >= 0 && raw::slice(data, span).is_none()) {
                return Err(Error::new(format_args!("invalid output: {what} span {span:?} outside data")));
            }
            Ok(raw::slice(data, span).map(<[u8]>::to_vec))
        };
        // As the host's output check: -1 is the only negative partition or timestamp.
        if d.partition < -1 {
            return Err(Error::new(format_args!("invalid output: partition {}", d.partition)));
        }
        if d.timestamp < -1 {
            return Err(Error::new(format_args!(
                "invalid output: timestamp {} (use -1 for the append time)",
                d.timestamp
            )));
        }
        let key = read(d.key, "key")?;
        let value = read(d.value, "value")?;
        let encoded = read(d.headers, "headers")?.unwrap_or_default();
        if !raw::headers_well_formed(&encoded) {
            return Err(Error::new("invalid output: malformed header encoding"));
        }
        let headers = Headers::new(&encoded).map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec))).collect();
        Ok(Written {
            topic: topic.clone(),
            key,
            value,
            headers,
            partition: (d.partition >= 0).then_some(d.partition),
            timestamp: (d.timestamp >= 0).then_some(d.timestamp),
        })
    }
}

/// The guest batch of `records`; records without an explicit offset continue from
/// `next_offset`, which moves past the last one.
fn input_batch(partition: i32, next_offset: &mut i64, records: &[TestRecord]) -> InputBatch {
    let mut batch = InputBatch { partition, data: Vec::new(), records: Vec::new() };
    for r in records {
        let offset = r.offset.unwrap_or(*next_offset);
        *next_offset = offset + 1;
        let key = raw::append(&mut batch.data, r.key.as_deref());
        let value = raw::append(&mut batch.data, r.value.as_deref());
        let headers = if r.headers.is_empty() {
            NULL
        } else {
            let mut encoded = (r.headers.len() as u32).to_le_bytes().to_vec();
            for (name, value) in &r.headers {
                raw::encode_header(&mut encoded, name, value.as_deref());
            }
            raw::append(&mut batch.data, Some(&encoded))
        };
        // As the broker hands them over: a stored timestamp below -1 arrives as -1.
        batch.records.push(InputRecord { offset, timestamp: r.timestamp.max(-1), key, value, headers });
    }
    batch
}

/// Runs a validator natively on batches of [`TestRecord`]s, as the broker calls it for a
/// produced batch (see [`Validator`] for an example).
pub struct ValidatorHarness<V> {
    instance: ValidatorInstance<V>,
    partition: i32,
}

impl<V: Validator> ValidatorHarness<V> {
    /// Initializes the validator with these parameters (what `init` gets).
    pub fn new(parameters: &[(&str, &str)]) -> Result<Self, Error> {
        let params = parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Ok(ValidatorHarness { instance: ValidatorInstance::new(params)?, partition: 0 })
    }

    /// The partition of later batches (default 0).
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Checks one batch; its records are offsets 0, 1, ... as a producer sends them.
    pub fn validate(&mut self, records: &[TestRecord]) -> Result<(), Rejection> {
        let batch = input_batch(self.partition, &mut 0, records);
        self.instance.validate(&batch)
    }
}

/// An input record for [`Harness::process`]: null key and value, no headers and timestamp 0
/// unless set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: i64,
    offset: Option<i64>,
}

impl TestRecord {
    /// A record with null key and value.
    pub fn new() -> Self {
        TestRecord::default()
    }

    /// The key (`None` = null).
    pub fn key(mut self, key: impl Payload) -> Self {
        self.key = key.payload().map(<[u8]>::to_vec);
        self
    }

    /// The value (`None` = null).
    pub fn value(mut self, value: impl Payload) -> Self {
        self.value = value.payload().map(<[u8]>::to_vec);
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl Payload) -> Self {
        self.headers.push((name.to_string(), value.payload().map(<[u8]>::to_vec)));
        self
    }

    /// Milliseconds since the epoch.
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// An explicit offset (later records without one continue from it).
    pub fn offset(mut self, offset: i64) -> Self {
        self.offset = Some(offset);
        self
    }
}

/// A record a transform wrote, as the host would append it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The output topic's name.
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// `None`: the host picks the partition (by key).
    pub partition: Option<i32>,
    /// `None`: the time of the append.
    pub timestamp: Option<i64>,
}

impl Written {
    /// The key as UTF-8 (`None` when null or not UTF-8).
    pub fn key_str(&self) -> Option<&str> {
        self.key.as_deref().and_then(|k| core::str::from_utf8(k).ok())
    }

    /// The value as UTF-8 (`None` when null or not UTF-8).
    pub fn value_str(&self) -> Option<&str> {
        self.value.as_deref().and_then(|v| core::str::from_utf8(v).ok())
    }

    /// The value of the last header with this name (`None` when absent or null).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().rev().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref())
    }
}

/// Runs an assignor natively and checks its result as the host does ([`check_assignment`]).
pub fn assign<A: Assignor>(group: &Group) -> Result<Vec<MemberAssignment>, Error> {
    let result = A::assign(group)?;
    check_assignment(group, &result)?;
    Ok(result)
}

/// The host's check of an assignment: every partition of every topic some member subscribes
/// to is assigned exactly once, to a member subscribed to that topic; nothing else is assigned.
///
/// ```
/// use runnel_sdk::assign::{Group, MemberAssignment, TopicPartition};
/// use runnel_sdk::testing::check_assignment;
///
/// let group = Group::builder().topic("t", &[0, 0]).member("a", &["t"]).build();
/// let half = vec![MemberAssignment { member: 0, partitions: vec![TopicPartition { topic: 0, partition: 0 }] }];
/// assert!(check_assignment(&group, &half).unwrap_err().message().contains("t-1"));
/// ```
pub fn check_assignment(group: &Group, assignments: &[MemberAssignment]) -> Result<(), Error> {
    let mut owner: std::collections::HashMap<(u32, i32), &str> = Default::default();
    let mut listed = vec![false; group.members.len()];
    for a in assignments {
        let member = group
            .members
            .get(a.member as usize)
            .ok_or_else(|| Error::new(format_args!("assignment for unknown member index {}", a.member)))?;
        if std::mem::replace(&mut listed[a.member as usize], true) {
            return Err(Error::new(format_args!("member `{}` is listed more than once", member.member_id)));
        }
        for tp in &a.partitions {
            let topic = group
                .topics
                .get(tp.topic as usize)
                .ok_or_else(|| Error::new(format_args!("assignment of unknown topic index {}", tp.topic)))?;
            if !member.subscribes_to(tp.topic) {
                return Err(Error::new(format_args!("`{}` is not subscribed to `{}`", member.member_id, topic.name)));
            }
            let p = tp.partition;
            if p < 0 || p as usize >= topic.partition_count() {
                return Err(Error::new(format_args!("`{}` has no partition {p}", topic.name)));
            }
            if let Some(prev) = owner.insert((tp.topic, p), &member.member_id) {
                return Err(Error::new(format_args!(
                    "{}-{p} assigned to both `{prev}` and `{}`",
                    topic.name, member.member_id
                )));
            }
        }
    }
    for (t, topic) in group.topics.iter().enumerate() {
        if group.subscribers(t as u32).next().is_none() {
            continue;
        }
        for p in 0..topic.partition_count() as i32 {
            if !owner.contains_key(&(t as u32, p)) {
                return Err(Error::new(format_args!("{}-{p} is not assigned", topic.name)));
            }
        }
    }
    Ok(())
}

/// The lines logged on this thread since the last call (natively, logging also prints them).
pub fn take_logs() -> Vec<(Level, String)> {
    crate::log::imp::CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
}
