//! A Jepsen-style checker for a Kafka log under faults (DESIGN §4, issue 11 "Fault tests").
//!
//! It is fed a history: every write attempted (a unique value, `w-<seed>-<n>`), every write
//! acknowledged with the (topic, partition, offset) of its delivery report, every write that
//! failed or whose outcome is unknown (value only: a failed write may still be in the log, as
//! a non-idempotent producer's retry can fail after an earlier attempt was appended), and every
//! record read, by which consumer. From it [`Checker::report`] counts, in Jepsen's terms:
//! - **lost writes**: acknowledged, never read by the final full read;
//! - **reads lost**: a value a consumer read (committed: below the high watermark), not in the
//!   final full read, acknowledged or not;
//! - **duplicates**: one value read at two offsets (expected from a non-idempotent producer's
//!   retries, so they fail [`Report::assert_clean`] only under [`Duplicates::Forbidden`]);
//! - **inconsistent offsets**: two different values seen at one offset (across reads, or a read
//!   against the acknowledgement), or an acknowledged value read only at another offset;
//! - **non-monotonic polls**: a consumer's offsets within a partition going backwards (or
//!   repeating) without a seek;
//! - **unexpected reads**: a value read that no producer ever attempted.
//!
//! The checker only records and judges; it does no I/O and knows nothing of clients, so its
//! rules are unit-tested with synthetic histories (in `tests/cluster_replication.rs`, the one
//! test binary that uses it, so they do not run again in every binary that includes `support`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Examples of each anomaly shown by [`Report`]'s Display (the counts are always complete).
const EXAMPLES: usize = 5;

/// Where a record sits in the log.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl Position {
    pub fn new(topic: &str, partition: i32, offset: i64) -> Position {
        Position { topic: topic.to_string(), partition, offset }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}@{}", self.topic, self.partition, self.offset)
    }
}

/// Whether a value at two offsets is an anomaly: it is with an idempotent producer, not with
/// `enable.idempotence=false` and retries (a retry after a lost response appends again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duplicates {
    Allowed,
    Forbidden,
}

/// The consumer name [`Checker::final_read`] records under.
pub const FINAL_READER: &str = "final-read";

#[derive(Clone, Debug)]
struct Read {
    consumer: String,
    position: Position,
    value: String,
    is_final: bool,
}

/// What the final reader saw of one partition: `[log_start_offset, high_watermark)` and the
/// offset it had read up to (exclusive) when it stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalBounds {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub next_offset: i64,
}

#[derive(Default)]
struct History {
    attempted: HashSet<String>,
    acked: Vec<(Position, String, Instant)>,
    /// Value → the last error reported for it.
    failed: HashMap<String, String>,
    reads: Vec<Read>,
    /// (consumer, topic, partition) → the last offset that consumer polled there.
    last_polled: HashMap<(String, String, i32), i64>,
    non_monotonic: Vec<NonMonotonic>,
    final_bounds: BTreeMap<(String, i32), FinalBounds>,
}

/// Records a fault run's history; shared by the producer and consumer threads (`Arc<Checker>`).
pub struct Checker {
    seed: u64,
    duplicates: Duplicates,
    next_value: AtomicU64,
    history: Mutex<History>,
}

impl Checker {
    pub fn new(seed: u64, duplicates: Duplicates) -> Checker {
        Checker { seed, duplicates, next_value: AtomicU64::new(0), history: Mutex::new(History::default()) }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        // A producer thread that panicked must not hide the history from the report.
        self.history.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A fresh unique value `w-<seed>-<n>`, recorded as attempted.
    pub fn next_value(&self) -> String {
        let n = self.next_value.fetch_add(1, Ordering::Relaxed);
        let value = format!("w-{}-{n}", self.seed);
        self.attempt(&value);
        value
    }

    /// `value` is about to be sent.
    pub fn attempt(&self, value: &str) {
        self.history().attempted.insert(value.to_string());
    }

    /// `value`'s delivery report said it is at `topic`-`partition`@`offset`.
    pub fn ack(&self, topic: &str, partition: i32, offset: i64, value: &str) {
        let mut history = self.history();
        history.attempted.insert(value.to_string());
        history.acked.push((Position::new(topic, partition, offset), value.to_string(), Instant::now()));
    }

    /// `value` failed or its outcome is unknown (`reason`: the client's error).
    pub fn fail(&self, value: &str, reason: &str) {
        let mut history = self.history();
        history.attempted.insert(value.to_string());
        history.failed.insert(value.to_string(), reason.to_string());
    }

    /// `consumer` polled `value` at `topic`-`partition`@`offset`.
    pub fn poll(&self, consumer: &str, topic: &str, partition: i32, offset: i64, value: &str) {
        self.record_read(consumer, topic, partition, offset, value, false);
    }

    /// `consumer` moved its position in `topic`-`partition` itself: the next offset it polls
    /// there may be anywhere.
    pub fn seek(&self, consumer: &str, topic: &str, partition: i32) {
        self.history().last_polled.remove(&(consumer.to_string(), topic.to_string(), partition));
    }

    /// The final full read (after every fault healed) found `value` at `topic`-`partition`@`offset`.
    pub fn final_read(&self, topic: &str, partition: i32, offset: i64, value: &str) {
        self.record_read(FINAL_READER, topic, partition, offset, value, true);
    }

    /// The final read of `topic`-`partition` is over (see [`FinalBounds`]).
    pub fn final_bounds(&self, topic: &str, partition: i32, bounds: FinalBounds) {
        self.history().final_bounds.insert((topic.to_string(), partition), bounds);
    }

    fn record_read(&self, consumer: &str, topic: &str, partition: i32, offset: i64, value: &str, is_final: bool) {
        let mut history = self.history();
        let key = (consumer.to_string(), topic.to_string(), partition);
        if let Some(&previous) = history.last_polled.get(&key) {
            if offset <= previous {
                history.non_monotonic.push(NonMonotonic {
                    consumer: consumer.to_string(),
                    topic: topic.to_string(),
                    partition,
                    previous,
                    offset,
                });
            }
        }
        history.last_polled.insert(key, offset);
        history.reads.push(Read {
            consumer: consumer.to_string(),
            position: Position::new(topic, partition, offset),
            value: value.to_string(),
            is_final,
        });
    }

    /// Acknowledgements so far.
    pub fn acked_count(&self) -> usize {
        self.history().acked.len()
    }

    /// Acknowledgements received at or after `since`.
    pub fn acked_since(&self, since: Instant) -> usize {
        self.history().acked.iter().filter(|(_, _, at)| *at >= since).count()
    }

    /// Acknowledgements of writes to `topic`-`partition` received at or after `since`.
    pub fn acked_since_in(&self, since: Instant, topic: &str, partition: i32) -> usize {
        self.history()
            .acked
            .iter()
            .filter(|(p, _, at)| *at >= since && p.partition == partition && p.topic == topic)
            .count()
    }

    /// One past the highest acknowledged offset of `topic`-`partition` (0 when none).
    pub fn acked_end(&self, topic: &str, partition: i32) -> i64 {
        self.history()
            .acked
            .iter()
            .filter(|(p, _, _)| p.partition == partition && p.topic == topic)
            .map(|(p, _, _)| p.offset + 1)
            .max()
            .unwrap_or(0)
    }

    /// Acknowledgements received in `[from, to)`, with their positions.
    pub fn acks_between(&self, from: Instant, to: Instant) -> Vec<(Position, String)> {
        self.history()
            .acked
            .iter()
            .filter(|(_, _, at)| *at >= from && *at < to)
            .map(|(position, value, _)| (position.clone(), value.clone()))
            .collect()
    }

    /// Failures so far.
    pub fn failed_count(&self) -> usize {
        self.history().failed.len()
    }

    pub fn report(&self) -> Report {
        let history = self.history();
        let mut report = Report {
            seed: self.seed,
            duplicates_policy: self.duplicates,
            attempted: history.attempted.len(),
            acked: history.acked.len(),
            failed: history.failed.len(),
            ..Report::default()
        };
        for reason in history.failed.values() {
            *report.failure_reasons.entry(reason.clone()).or_default() += 1;
        }

        // Every value seen at each position, and every position each value was read at.
        let mut at_position: BTreeMap<&Position, BTreeMap<&str, BTreeSet<String>>> = BTreeMap::new();
        let mut read_at: HashMap<&str, BTreeSet<&Position>> = HashMap::new();
        let mut final_values: HashSet<&str> = HashSet::new();
        for read in &history.reads {
            at_position
                .entry(&read.position)
                .or_default()
                .entry(read.value.as_str())
                .or_default()
                .insert(format!("read by {}", read.consumer));
            read_at.entry(read.value.as_str()).or_default().insert(&read.position);
            if read.is_final {
                final_values.insert(read.value.as_str());
            }
            if !history.attempted.contains(&read.value) {
                report.unexpected.push(Unexpected {
                    consumer: read.consumer.clone(),
                    position: read.position.clone(),
                    value: read.value.clone(),
                });
            }
        }
        for (position, value, _) in &history.acked {
            at_position.entry(position).or_default().entry(value.as_str()).or_default().insert("ack".to_string());
        }
        report.read_values = read_at.len();
        report.final_read_values = final_values.len();
        report.failed_but_read = history.failed.keys().filter(|v| read_at.contains_key(v.as_str())).count();

        for (position, values) in &at_position {
            if values.len() > 1 {
                report.inconsistent.push(Inconsistent {
                    position: (*position).clone(),
                    seen: values
                        .iter()
                        .map(|(v, sources)| (v.to_string(), sources.iter().cloned().collect()))
                        .collect(),
                });
            }
        }
        for (value, positions) in &read_at {
            if positions.len() > 1 {
                report.duplicates.push(Duplicate {
                    value: value.to_string(),
                    positions: positions.iter().map(|p| (*p).clone()).collect(),
                });
            }
        }
        report.duplicates.sort_by(|a, b| a.positions.cmp(&b.positions));
        for (position, value, _) in &history.acked {
            match read_at.get(value.as_str()) {
                Some(positions) if !positions.contains(position) => report.misplaced.push(Misplaced {
                    value: value.clone(),
                    acked: position.clone(),
                    read: positions.iter().map(|p| (*p).clone()).collect(),
                }),
                _ => {}
            }
            if !final_values.contains(value.as_str()) {
                let bounds = history.final_bounds.get(&(position.topic.clone(), position.partition)).cloned();
                report.lost.push(Lost { value: value.clone(), acked: position.clone(), final_bounds: bounds });
            }
        }
        report.lost.sort_by(|a, b| a.acked.cmp(&b.acked));
        // A consumer reads only committed records (below the high watermark): every value read
        // must still be there at the end, acknowledged or not (a final read that never saw the
        // partition is reported as incomplete, not here).
        let finally_read: BTreeSet<(String, i32)> = history.final_bounds.keys().cloned().collect();
        let mut read_then_lost: BTreeMap<&str, &Position> = BTreeMap::new();
        for read in history.reads.iter().filter(|r| !r.is_final) {
            let partition = (read.position.topic.clone(), read.position.partition);
            if !final_values.contains(read.value.as_str()) && finally_read.contains(&partition) {
                read_then_lost.entry(read.value.as_str()).or_insert(&read.position);
            }
        }
        report.read_then_lost = read_then_lost.into_iter().map(|(v, p)| (v.to_string(), p.clone())).collect();
        report.misplaced.sort_by(|a, b| a.acked.cmp(&b.acked));
        report.non_monotonic = history.non_monotonic.clone();

        // The final read must cover every partition that acknowledged something, to the end.
        let acked_partitions: BTreeSet<(String, i32)> =
            history.acked.iter().map(|(p, _, _)| (p.topic.clone(), p.partition)).collect();
        for key in &acked_partitions {
            match history.final_bounds.get(key) {
                None => {
                    report.incomplete_final_reads.push(format!("{}-{}: never read by the final read", key.0, key.1))
                }
                Some(b) if b.next_offset < b.high_watermark => report.incomplete_final_reads.push(format!(
                    "{}-{}: final read stopped at offset {} below the high watermark {}",
                    key.0, key.1, b.next_offset, b.high_watermark
                )),
                Some(_) => {}
            }
        }
        report.final_bounds = history.final_bounds.clone();
        report
    }

    /// Panics with the report (and the seed) unless the history has no anomaly.
    pub fn assert_clean(&self) {
        self.report().assert_clean();
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub value: String,
    pub acked: Position,
    /// What the final read saw of the acknowledged partition (`None`: it never read it).
    pub final_bounds: Option<FinalBounds>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub value: String,
    pub positions: Vec<Position>,
}

/// Two or more values at one position, each with where it was seen ("ack", "read by <consumer>").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistent {
    pub position: Position,
    pub seen: Vec<(String, Vec<String>)>,
}

/// An acknowledged value read, but never at the offset its acknowledgement named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misplaced {
    pub value: String,
    pub acked: Position,
    pub read: Vec<Position>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonMonotonic {
    pub consumer: String,
    pub topic: String,
    pub partition: i32,
    pub previous: i64,
    pub offset: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexpected {
    pub consumer: String,
    pub position: Position,
    pub value: String,
}

/// The anomalies of one history, with totals to judge them by.
#[derive(Clone, Debug)]
pub struct Report {
    pub seed: u64,
    pub duplicates_policy: Duplicates,
    pub attempted: usize,
    pub acked: usize,
    /// Failed or unknown outcome (indeterminate: such a value may be read).
    pub failed: usize,
    /// Failed writes that turned out to be in the log (not an anomaly).
    pub failed_but_read: usize,
    /// Distinct values read by anyone / by the final read.
    pub read_values: usize,
    pub final_read_values: usize,
    /// The client's error → how many writes ended with it.
    pub failure_reasons: BTreeMap<String, usize>,
    pub lost: Vec<Lost>,
    /// (value, where a consumer read it) of values read, then missing from the final read.
    pub read_then_lost: Vec<(String, Position)>,
    pub duplicates: Vec<Duplicate>,
    pub inconsistent: Vec<Inconsistent>,
    pub misplaced: Vec<Misplaced>,
    pub non_monotonic: Vec<NonMonotonic>,
    pub unexpected: Vec<Unexpected>,
    /// Partitions with acknowledgements the final read did not cover to their high watermark.
    pub incomplete_final_reads: Vec<String>,
    pub final_bounds: BTreeMap<(String, i32), FinalBounds>,
}

impl Default for Report {
    fn default() -> Report {
        Report {
            seed: 0,
            duplicates_policy: Duplicates::Forbidden,
            attempted: 0,
            acked: 0,
            failed: 0,
            failed_but_read: 0,
            read_values: 0,
            final_read_values: 0,
            failure_reasons: BTreeMap::new(),
            lost: Vec::new(),
            read_then_lost: Vec::new(),
            duplicates: Vec::new(),
            inconsistent: Vec::new(),
            misplaced: Vec::new(),
            non_monotonic: Vec::new(),
            unexpected: Vec::new(),
            incomplete_final_reads: Vec::new(),
            final_bounds: BTreeMap::new(),
        }
    }
}

impl Report {
    /// Inconsistent offsets: positions with two values plus acknowledged values read elsewhere.
    pub fn inconsistent_count(&self) -> usize {
        self.inconsistent.len() + self.misplaced.len()
    }

    pub fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.read_then_lost.is_empty()
            && self.inconsistent_count() == 0
            && self.non_monotonic.is_empty()
            && self.unexpected.is_empty()
            && self.incomplete_final_reads.is_empty()
            && (self.duplicates_policy == Duplicates::Allowed || self.duplicates.is_empty())
    }

    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "the checker found anomalies (replay with RUNNEL_FAULT_SEED={}):\n{self}", self.seed);
    }
}

fn examples<T>(f: &mut fmt::Formatter<'_>, items: &[T], show: impl Fn(&T) -> String) -> fmt::Result {
    for item in items.iter().take(EXAMPLES) {
        writeln!(f, "    {}", show(item))?;
    }
    if items.len() > EXAMPLES {
        writeln!(f, "    ... and {} more", items.len() - EXAMPLES)?;
    }
    Ok(())
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} attempted, {} acknowledged, {} failed or unknown ({} of them read anyway), \
             {} distinct values read ({} by the final read)",
            self.seed,
            self.attempted,
            self.acked,
            self.failed,
            self.failed_but_read,
            self.read_values,
            self.final_read_values
        )?;
        if !self.failure_reasons.is_empty() {
            let reasons: Vec<String> = self.failure_reasons.iter().map(|(r, n)| format!("{n} x {r}")).collect();
            writeln!(f, "  failures: {}", reasons.join("; "))?;
        }
        if !self.final_bounds.is_empty() {
            let bounds: Vec<String> = self
                .final_bounds
                .iter()
                .map(|((t, p), b)| {
                    format!("{t}-{p} [{}, {}) read to {}", b.log_start_offset, b.high_watermark, b.next_offset)
                })
                .collect();
            writeln!(f, "  final read: {}", bounds.join("; "))?;
        }
        writeln!(f, "  lost writes: {}", self.lost.len())?;
        examples(f, &self.lost, |l| match &l.final_bounds {
            Some(b) => format!(
                "{} acknowledged at {}, not read (final read of the partition: [{}, {}) read to {})",
                l.value, l.acked, b.log_start_offset, b.high_watermark, b.next_offset
            ),
            None => format!("{} acknowledged at {}, partition never read by the final read", l.value, l.acked),
        })?;
        writeln!(f, "  reads lost (read by a consumer, missing from the final read): {}", self.read_then_lost.len())?;
        examples(f, &self.read_then_lost, |(value, at)| format!("{value} read at {at}"))?;
        let policy = match self.duplicates_policy {
            Duplicates::Allowed => " (allowed: non-idempotent producer)",
            Duplicates::Forbidden => "",
        };
        writeln!(f, "  duplicates: {}{policy}", self.duplicates.len())?;
        examples(f, &self.duplicates, |d| {
            let positions: Vec<String> = d.positions.iter().map(Position::to_string).collect();
            format!("{} at {}", d.value, positions.join(", "))
        })?;
        writeln!(
            f,
            "  inconsistent offsets: {} ({} offsets with two values, {} acknowledged values read at another offset)",
            self.inconsistent_count(),
            self.inconsistent.len(),
            self.misplaced.len()
        )?;
        examples(f, &self.inconsistent, |i| {
            let seen: Vec<String> = i.seen.iter().map(|(v, s)| format!("{v} ({})", s.join(", "))).collect();
            format!("{}: {}", i.position, seen.join(" vs "))
        })?;
        examples(f, &self.misplaced, |m| {
            let read: Vec<String> = m.read.iter().map(Position::to_string).collect();
            format!("{} acknowledged at {}, read at {}", m.value, m.acked, read.join(", "))
        })?;
        writeln!(f, "  non-monotonic polls: {}", self.non_monotonic.len())?;
        examples(f, &self.non_monotonic, |n| {
            format!("{} in {}-{}: offset {} after {}", n.consumer, n.topic, n.partition, n.offset, n.previous)
        })?;
        writeln!(f, "  reads of values never attempted: {}", self.unexpected.len())?;
        examples(f, &self.unexpected, |u| format!("{} read {:?} at {}", u.consumer, u.value, u.position))?;
        if !self.incomplete_final_reads.is_empty() {
            writeln!(f, "  incomplete final read: {}", self.incomplete_final_reads.len())?;
            examples(f, &self.incomplete_final_reads, String::clone)?;
        }
        Ok(())
    }
}
