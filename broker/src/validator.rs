//! Produce-path validators: a WASM component attached to a topic sees each partition's batches
//! of a Produce request before they are appended, and accepts or refuses them.
//!
//! A validator is a `ValidatorImage` in the metadata image (module bytes included, so every
//! node has it). `Validators::reconcile` keeps one [`Validator`] per deployed image, compiled
//! once per module (the runtime's on-disk cache makes a restart cheap), with a small pool of
//! guest instances reused from batch to batch. The produce handler asks [`Validators::check`]
//! for the partition's records: the batches are decoded (decompressed) into one guest batch on
//! the blocking pool, one guest call decides, and a refusal becomes INVALID_RECORD with the
//! guest's message and the records at fault (KIP-467 `record_errors`), nothing appended.
//!
//! Invariants: guests run only through `runnel_runtime`, never on an async worker thread, at
//! most [`CONCURRENT_CALLS_MAX`] at once per validator; a failing guest (trap, deadline, memory
//! cap, failed init, a module that does not load) never takes the broker down and never lets a
//! batch through unless the validator's failure policy says `accept`; a poisoned instance is
//! dropped, never called again. Bytes that do not decode are not the validator's business: they
//! are passed on so the log's own validation answers them (CORRUPT_MESSAGE and friends).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use runnel_runtime::{
    GuestError, InputBatch, Limits, LogSink, Runtime, ValidatorInstance, ValidatorModule, ValidatorSetup,
};
use tokio::sync::Semaphore;

use crate::controller::{MetadataImage, ValidatorFailure, ValidatorImage};
use crate::log::batch::BatchIter;
use crate::metrics::Metrics;
use crate::transform::LogBuffer;

/// Guest calls of one validator running at once on this node (each holds an instance); more
/// produce requests for its topic wait for a free one.
pub const CONCURRENT_CALLS_MAX: usize = 4;

/// What a produced partition batch gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Refused: INVALID_RECORD with `message`, and `records` as (index in the partition's
    /// records, reason).
    Reject {
        message: String,
        records: Vec<(i32, String)>,
    },
}

/// The validators of this node's image, by the topic each checks.
pub struct Validators {
    runtime: Runtime,
    metrics: Arc<Metrics>,
    by_topic: RwLock<HashMap<String, Arc<Validator>>>,
    /// The `applied_index` of the image last reconciled: an older one is never reconciled over it.
    reconciled_index: AtomicU64,
    /// Serializes reconciles (the image follower and HTTP handlers both call it).
    reconciling: tokio::sync::Mutex<()>,
}

/// One deployed validator on this node: its module (or why it does not load), idle instances and
/// what it has done.
pub struct Validator {
    pub image: Arc<ValidatorImage>,
    module: Result<ValidatorModule, String>,
    /// Instances kept for the next batches, each with the batch buffer it was last given.
    idle: Mutex<Vec<(ValidatorInstance, InputBatch)>>,
    calls: Semaphore,
    pub stats: ValidatorStats,
    pub logs: Arc<LogBuffer>,
}

/// Counters of one validator on this node since it was (re)deployed or the node started.
#[derive(Default)]
pub struct ValidatorStats {
    pub batches_accepted: AtomicU64,
    pub batches_rejected: AtomicU64,
    pub records_rejected: AtomicU64,
    /// Guest failures (each decided by the failure policy).
    pub failures: AtomicU64,
    /// The last failure and when (ms since the epoch).
    pub last_error: Mutex<Option<(String, i64)>>,
    /// The last rejection's message and when.
    pub last_rejection: Mutex<Option<(String, i64)>>,
}

impl Validators {
    pub fn new(runtime: Runtime, metrics: Arc<Metrics>) -> Arc<Validators> {
        Arc::new(Validators {
            runtime,
            metrics,
            by_topic: RwLock::new(HashMap::new()),
            reconciled_index: AtomicU64::new(0),
            reconciling: tokio::sync::Mutex::new(()),
        })
    }

    /// The validator of `topic`, if one is deployed.
    pub fn for_topic(&self, topic: &str) -> Option<Arc<Validator>> {
        let by_topic = self.by_topic.read().unwrap_or_else(|p| p.into_inner());
        if by_topic.is_empty() {
            return None;
        }
        by_topic.get(topic).cloned()
    }

    /// The validator named `name`, if deployed (as this node last reconciled).
    pub fn get(&self, name: &str) -> Option<Arc<Validator>> {
        self.all().into_iter().find(|v| v.image.name == name)
    }

    /// Every validator this node runs, by name.
    pub fn all(&self) -> Vec<Arc<Validator>> {
        let mut all: Vec<Arc<Validator>> =
            self.by_topic.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        all.sort_by(|a, b| a.image.name.cmp(&b.image.name));
        all
    }

    /// Matches the image: loads new and redeployed validators (compiling on the blocking pool;
    /// a module that does not load is kept with its error, so its topic's batches meet the
    /// failure policy), keeps unchanged ones with their instances and counters, drops the rest.
    pub async fn reconcile(&self, image: &MetadataImage) {
        let _serial = self.reconciling.lock().await;
        if image.applied_index < self.reconciled_index.load(Ordering::Acquire) {
            return;
        }
        let current: HashMap<String, Arc<Validator>> = self.by_topic.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut next = HashMap::with_capacity(image.validators.len());
        for wanted in image.validators.values() {
            let kept =
                current.get(&wanted.spec.topic).filter(|v| Arc::ptr_eq(&v.image, wanted) || *v.image == **wanted);
            if let Some(kept) = kept {
                next.insert(wanted.spec.topic.clone(), kept.clone());
                continue;
            }
            let runtime = self.runtime.clone();
            let bytes = wanted.module.0.clone();
            let module = tokio::task::spawn_blocking(move || runtime.validator(&bytes))
                .await
                .map_err(|e| format!("compile task failed: {e}"))
                .and_then(|loaded| loaded.map_err(|e| e.to_string()));
            let logs = Arc::new(LogBuffer::default());
            match &module {
                Ok(_) => logs.push("info", None, format!("version {} loaded ({})", wanted.version, wanted.sha256)),
                Err(e) => logs.push("error", None, format!("version {} cannot be loaded: {e}", wanted.version)),
            }
            let validator = Validator {
                image: wanted.clone(),
                module,
                idle: Mutex::new(Vec::new()),
                calls: Semaphore::new(CONCURRENT_CALLS_MAX),
                stats: ValidatorStats::default(),
                logs,
            };
            next.insert(wanted.spec.topic.clone(), Arc::new(validator));
        }
        *self.by_topic.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.reconciled_index.store(image.applied_index, Ordering::Release);
    }

    /// Checks the records a producer sent to `topic`-`partition` against the validator `image`
    /// names for the topic (accepting at once when it names none). A validator the image has
    /// and this node has not loaded yet (the handler's image is newer than the last reconcile)
    /// is loaded first, so a produce answered after a deployment committed is always checked.
    pub async fn check(&self, image: &MetadataImage, topic: &str, partition: i32, records: &Bytes) -> Verdict {
        if image.validators.is_empty() {
            return Verdict::Accept;
        }
        let Some(wanted) = image.validators.values().find(|v| v.spec.topic == topic) else { return Verdict::Accept };
        let same = |v: &Arc<Validator>| {
            v.image.name == wanted.name && v.image.version == wanted.version && v.image.sha256 == wanted.sha256
        };
        let validator = match self.for_topic(topic) {
            Some(validator) if same(&validator) => validator,
            _ => {
                self.reconcile(image).await;
                // As this node now has it (a newer image may have been reconciled meanwhile).
                match self.for_topic(topic) {
                    Some(validator) => validator,
                    None => return Verdict::Accept,
                }
            }
        };
        validator.check(&self.metrics, partition, records).await
    }
}

impl Validator {
    async fn check(self: &Arc<Self>, metrics: &Metrics, partition: i32, records: &Bytes) -> Verdict {
        let started = Instant::now();
        // The semaphore is never closed: an error cannot happen, and would only mean no bound.
        let _permit = self.calls.acquire().await.ok();
        let (validator, records) = (self.clone(), records.clone());
        let outcome = tokio::task::spawn_blocking(move || validator.call(partition, records))
            .await
            .unwrap_or_else(|e| Outcome::Failed(format!("the validation task failed: {e}")));
        let name = &self.image.name;
        metrics.validator_call_seconds.with_label_values(&[name]).observe(started.elapsed().as_secs_f64());
        let topic = &self.image.spec.topic;
        let now = crate::log::now_ms();
        let (verdict, result) = match outcome {
            Outcome::Accepted => {
                self.stats.batches_accepted.fetch_add(1, Ordering::Relaxed);
                (Verdict::Accept, "accepted")
            }
            Outcome::Rejected { message, records, record_count } => {
                self.stats.batches_rejected.fetch_add(1, Ordering::Relaxed);
                self.stats.records_rejected.fetch_add(record_count, Ordering::Relaxed);
                metrics.validator_records_rejected.with_label_values(&[name, topic]).inc_by(record_count);
                *lock(&self.stats.last_rejection) = Some((message.clone(), now));
                let message = format!("refused by validator `{name}`: {message}");
                (Verdict::Reject { message, records }, "rejected")
            }
            Outcome::Failed(error) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                let policy = self.image.spec.on_failure;
                self.logs.push("error", Some(partition), format!("{error} (on_failure={})", policy.name()));
                *lock(&self.stats.last_error) = Some((error.clone(), now));
                match policy {
                    ValidatorFailure::Reject => {
                        let message =
                            format!("validator `{name}` failed: {error}; the batch is refused (on_failure=reject)");
                        (Verdict::Reject { message, records: Vec::new() }, "failed_rejected")
                    }
                    ValidatorFailure::Accept => (Verdict::Accept, "failed_accepted"),
                }
            }
        };
        metrics.validator_batches.with_label_values(&[name, topic, result]).inc();
        verdict
    }

    /// The blocking part: take an idle instance and its batch buffer (or a new buffer), decode
    /// into the buffer, make an instance if none was idle, call it, give both back.
    fn call(&self, partition: i32, records: Bytes) -> Outcome {
        let module = match &self.module {
            Ok(module) => module,
            Err(e) => return Outcome::Failed(format!("the module cannot be loaded: {e}")),
        };
        let (instance, mut batch) = match lock(&self.idle).pop() {
            Some((instance, batch)) => (Some(instance), batch),
            None => (None, InputBatch::new(partition)),
        };
        // Bytes that do not decode are accepted here: the log refuses them with the proper
        // error, whatever the validator's state. Records that would not fit the guest's memory
        // are refused: judged, they would fail the guest, and a failure the validator accepts
        // (`on_failure: accept`) would let any producer pass it at will.
        let limit = usize::try_from(self.image.spec.memory_bytes).unwrap_or(usize::MAX);
        let decoded = decode_into(&mut batch, partition, &records, limit);
        if decoded != Decoded::Records || batch.is_empty() {
            if let Some(instance) = instance {
                self.keep(instance, batch);
            }
            return match decoded {
                Decoded::TooLarge => Outcome::Rejected {
                    message: format!("the records decode to more than the validator's memory_bytes ({limit})"),
                    records: Vec::new(),
                    record_count: 0,
                },
                _ => Outcome::Accepted,
            };
        }
        let mut instance = match instance {
            Some(instance) => instance,
            None => match module.instantiate(self.setup()) {
                Ok(instance) => instance,
                Err(e) => return Outcome::Failed(describe(&e)),
            },
        };
        let outcome = match instance.validate(&batch) {
            Ok(Ok(())) => Outcome::Accepted,
            Ok(Err(rejection)) => Outcome::Rejected {
                message: rejection.message,
                records: rejection.records.into_iter().map(|e| (e.index as i32, e.message)).collect(),
                record_count: batch.len() as u64,
            },
            Err(e) => Outcome::Failed(describe(&e)),
        };
        if !instance.is_poisoned() {
            self.keep(instance, batch);
        }
        outcome
    }

    /// Keeps an instance for the next call, with its batch buffer unless the buffer grew past
    /// [`KEPT_BATCH_BYTES_MAX`] (one large produce must not pin its size for every idle
    /// instance).
    fn keep(&self, instance: ValidatorInstance, mut batch: InputBatch) {
        let records = batch.records.capacity() * std::mem::size_of::<runnel_runtime::InputRecord>();
        if batch.data.capacity() + records > KEPT_BATCH_BYTES_MAX {
            batch = InputBatch::new(batch.partition);
        }
        lock(&self.idle).push((instance, batch));
    }

    fn setup(&self) -> ValidatorSetup {
        let spec = &self.image.spec;
        let logs = self.logs.clone();
        let log: LogSink = Arc::new(move |level, line: &str| logs.push(level.name(), None, line.to_string()));
        ValidatorSetup {
            parameters: spec.parameters.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            limits: Limits {
                memory_bytes: usize::try_from(spec.memory_bytes).unwrap_or(usize::MAX),
                call_timeout: Duration::from_millis(spec.call_timeout_ms),
                ..Limits::default()
            },
            log,
        }
    }

    /// Whether the module loaded, and if not why.
    pub fn load_error(&self) -> Option<&str> {
        self.module.as_ref().err().map(String::as_str)
    }

    /// Instances kept for the next batches.
    pub fn idle_instances(&self) -> usize {
        lock(&self.idle).len()
    }
}

/// The largest batch buffers an idle instance keeps (bytes of keys, values, headers and record
/// descriptors).
const KEPT_BATCH_BYTES_MAX: usize = 4 << 20;

enum Outcome {
    Accepted,
    Rejected { message: String, records: Vec<(i32, String)>, record_count: u64 },
    Failed(String),
}

/// What [`decode_into`] made of a partition's produced bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoded {
    Records,
    /// The bytes do not decode (the log then refuses them with the proper error).
    Undecodable,
    /// The records pass `limit` bytes (checked after each produced batch, each at most
    /// `MAX_DECOMPRESSED_BYTES`: the guest batch stays far below `InputBatch`'s i32 spans).
    TooLarge,
}

/// Fills `batch` (emptied first) with the records of a partition's produced batches, as one
/// guest batch (offsets as the producer numbered them), up to `limit` bytes of record data.
fn decode_into(batch: &mut InputBatch, partition: i32, records: &Bytes, limit: usize) -> Decoded {
    batch.clear();
    batch.partition = partition;
    let limit = limit.min(i32::MAX as usize / 2);
    for parsed in BatchIter::new(records.clone()) {
        if batch.data.len() > limit {
            return Decoded::TooLarge;
        }
        let Ok(parsed) = parsed else { return Decoded::Undecodable };
        if parsed.header().attributes.is_control() {
            continue;
        }
        let Ok(iter) = parsed.record_iter() else { return Decoded::Undecodable };
        let pushed = iter.try_for_each_borrowed(|record| {
            batch.push(record.offset, record.timestamp, record.key, record.value, record.headers)
        });
        if pushed.is_err() {
            return Decoded::Undecodable;
        }
    }
    if batch.data.len() > limit {
        return Decoded::TooLarge;
    }
    Decoded::Records
}

fn describe(error: &GuestError) -> String {
    error.to_string()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::records::BatchBuilder;

    /// Every batch of a partition's records becomes one guest batch in order, with the
    /// producer's offsets, keys, values and headers; bytes that do not decode are not judged.
    #[test]
    fn decode_joins_the_batches_of_a_partition() {
        let mut first = BatchBuilder::new(crate::log::batch::Compression::None);
        first.push(10, Some(b"k1"), Some(b"v1"), &[("h", Some(b"x"))]);
        first.push(11, None, Some(b"v2"), &[]);
        let mut second = BatchBuilder::new(crate::log::batch::Compression::Zstd).base_offset(2);
        second.push(12, Some(b"k3"), None, &[]);
        let mut bytes = first.build().unwrap().bytes().to_vec();
        bytes.extend_from_slice(second.build().unwrap().bytes());
        let mut batch = InputBatch::new(0);
        batch.push(99, 0, None, Some(b"left from the last call"), &[]);
        assert_eq!(decode_into(&mut batch, 7, &Bytes::from(bytes.clone()), 1 << 20), Decoded::Records);
        assert_eq!(batch.partition, 7);
        let offsets: Vec<i64> = batch.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 2]);
        assert_eq!(batch.records[2].timestamp, 12);
        assert!(batch.records[2].value.is_null());
        assert_eq!(batch.key(&batch.records[0]), Some(&b"k1"[..]));
        assert_eq!(batch.value(&batch.records[1]), Some(&b"v2"[..]));
        let headers: Vec<_> = batch.headers(&batch.records[0]).collect();
        assert_eq!(headers, [("h", Some(&b"x"[..]))]);
        assert_eq!(decode_into(&mut batch, 7, &Bytes::from(bytes.clone()), 4), Decoded::TooLarge, "past the limit");
        bytes.truncate(bytes.len() - 3);
        assert_eq!(decode_into(&mut batch, 7, &Bytes::from(bytes), 1 << 20), Decoded::Undecodable);
    }
}
