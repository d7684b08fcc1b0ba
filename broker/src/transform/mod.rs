//! Runs deployed WASM transforms on the input partitions this node leads.
//!
//! A transform is a `TransformImage` in the metadata image (module bytes included, so every
//! node has it). `TransformManager::reconcile` keeps one worker per (transform, input
//! partition led here) running the image's version, and stops workers of paused, deleted or
//! replaced deployments. A worker (`worker.rs`) reads committed input from its position, calls
//! the guest once per batch, appends the outputs, and checkpoints the position in the
//! transform's own group `__runnel_transform_<name>`. Exactly-once (the default delivery) the
//! worker is a transactional producer (`txn.rs`) and outputs, dead letters and the position
//! commit in one transaction; at-least-once outputs are appended before the position moves.
//!
//! Invariants: guests run only through `runnel_runtime` (no wasmtime type here); a failing
//! guest affects only its own transform partition (state, logs, metrics, error policy); no
//! input record is skipped unless the error policy says so; compiled modules are shared by
//! all partitions of a deployment and cached on disk by the runtime.

mod checkpoint;
mod state;
mod txn;
pub(crate) use txn::PRODUCE_VERSION;
mod worker;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use runnel_runtime::{Runtime, TransformModule};
use tokio::sync::watch;

use crate::controller::{Controller, MetadataImage, TransformImage};
use crate::group::GroupCoordinator;
use crate::metrics::Metrics;
use crate::partition::ReplicaManager;

/// The prefix of the groups that hold transforms' input positions.
const CHECKPOINT_GROUP_PREFIX: &str = "__runnel_transform_";

/// The group that holds a transform's input positions.
pub fn group_of(transform: &str) -> String {
    format!("{CHECKPOINT_GROUP_PREFIX}{transform}")
}

/// The changelog topic of a stateful transform's keyed state (compacted; partition `p` holds
/// the state of input partition `p`).
pub fn state_topic_of(transform: &str) -> String {
    format!("{CHECKPOINT_GROUP_PREFIX}{transform}_state")
}

/// The transform whose input positions `group` holds, if it is such a group.
pub fn transform_of_group(group: &str) -> Option<&str> {
    group.strip_prefix(CHECKPOINT_GROUP_PREFIX)
}

/// Offsets expiry's gate around another: the checkpoint group of a deployed transform keeps
/// its positions however long the transform has been idle (the group has no members, so
/// `offsets.retention.minutes` would take them and the transform would start over from its
/// start position); every other group is left to `inner`.
pub struct KeepTransformCheckpoints<'a> {
    pub inner: &'a dyn crate::group::offsets::EmptyGroupGate,
    /// Names of the deployed transforms.
    pub deployed: &'a std::collections::BTreeSet<String>,
}

impl crate::group::offsets::EmptyGroupGate for KeepTransformCheckpoints<'_> {
    fn run_if_empty(&self, group: &str, write: &mut dyn FnMut() -> bool) -> bool {
        if transform_of_group(group).is_some_and(|t| self.deployed.contains(t)) {
            return false;
        }
        self.inner.run_if_empty(group, write)
    }
}

/// The group key FindCoordinator is asked about when a worker needs `__consumer_offsets`.
pub const OFFSETS_KEY: &str = "__runnel_transforms";

/// Lines of guest and host log kept per transform.
const LOG_LINES_MAX: usize = 1_000;

/// What workers need from the node.
pub struct Host {
    pub node_id: u64,
    pub replicas: Arc<ReplicaManager>,
    pub groups: Arc<GroupCoordinator>,
    pub metrics: Arc<Metrics>,
    pub controller: Controller,
    /// Reaches the leaders of output partitions led by other brokers.
    pub peers: Arc<crate::peer::Peers>,
    /// The broker's log defaults, under each output topic's overrides (its `max.message.bytes`
    /// bounds the batches a worker writes there).
    pub log_defaults: crate::log::LogConfig,
    /// `transaction.timeout.ms` of exactly-once workers (within `transaction.max.timeout.ms`):
    /// how long a transaction of a worker that vanished stays open before its coordinator
    /// aborts it (a new worker of the partition aborts it at once).
    pub transaction_timeout_ms: i32,
    /// Makes sure `__consumer_offsets` exists (FindCoordinator creates it), so positions can be
    /// committed.
    pub ensure_offsets_topic: Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>,
    /// Makes sure a stateful transform's changelog topic exists: (name, partitions), created
    /// compacted and replicated like `__consumer_offsets`; an error says why it could not be.
    pub ensure_state_topic: EnsureTopic,
    /// The Produce handler of this node, called in process: an exactly-once worker's outputs to
    /// partitions led here skip the socket (encode, loopback, decode), nothing else changes.
    /// `None` once the node is gone.
    pub local_produce: LocalProduce,
    /// This node's verdict on an output batch for (topic, partition) by the topic's validator:
    /// `Some(reason)` when refused. Exactly-once outputs are judged before they enter the
    /// transaction, so a refusal meets the error policy instead of aborting it.
    pub validate_output: ValidateOutput,
}

/// See [`Host::validate_output`].
pub type ValidateOutput =
    Box<dyn Fn(String, i32, bytes::Bytes) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync>;

/// See [`Host::ensure_state_topic`].
pub type EnsureTopic =
    Box<dyn Fn(String, u32) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// See [`Host::local_produce`].
pub type LocalProduce = Box<
    dyn Fn(
            kafka_protocol::messages::ProduceRequest,
        ) -> Pin<Box<dyn Future<Output = Option<kafka_protocol::messages::ProduceResponse>> + Send>>
        + Send
        + Sync,
>;

/// State of one transform partition as HTTP, CLI and UI show it.
#[derive(Debug, Clone, Default)]
pub struct PartitionStatus {
    pub partition: i32,
    /// starting, running, failed, paused, stopped.
    pub state: &'static str,
    /// Next input offset to process (the committed position once checkpointed).
    pub position: i64,
    /// Where the current worker started: the committed position, else the deployment's start.
    pub start_offset: i64,
    pub high_watermark: i64,
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub errors: u64,
    pub skipped: u64,
    pub dead_lettered: u64,
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    pub records_in_per_sec: f64,
    pub records_out_per_sec: f64,
    pub memory_bytes: u64,
    /// Whether the compiled module came from the on-disk cache.
    pub module_from_cache: bool,
    /// Whether the module keeps keyed state.
    pub stateful: bool,
    /// Size of the partition's state (keys plus values plus 64 bytes per entry, committed and
    /// pending), bytes.
    pub state_bytes: u64,
    /// Keys of the partition's committed state.
    pub state_keys: u64,
}

impl PartitionStatus {
    pub fn lag(&self) -> i64 {
        (self.high_watermark - self.position).max(0)
    }
}

#[derive(Debug, Clone)]
pub struct LogLine {
    /// Position in the transform's log on this node (1, 2, ...): a cursor for followers.
    pub seq: u64,
    pub timestamp_ms: i64,
    pub level: &'static str,
    /// The input partition whose worker logged, if any.
    pub partition: Option<i32>,
    pub message: String,
}

/// Recent log lines of one transform (guest `log` calls, guest stdout/stderr, host events).
#[derive(Default)]
pub struct LogBuffer {
    lines: Mutex<(u64, VecDeque<LogLine>)>,
}

impl LogBuffer {
    pub fn push(&self, level: &'static str, partition: Option<i32>, message: String) {
        let mut guard = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let (last, lines) = &mut *guard;
        if lines.len() >= LOG_LINES_MAX {
            lines.pop_front();
        }
        *last += 1;
        lines.push_back(LogLine { seq: *last, timestamp_ms: crate::log::now_ms(), level, partition, message });
    }

    /// The newest `limit` lines after `after` that pass `keep`, oldest first.
    pub fn tail(&self, limit: usize, after: u64, keep: impl Fn(&LogLine) -> bool) -> Vec<LogLine> {
        let guard = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let mut newest: Vec<LogLine> =
            guard.1.iter().rev().take_while(|l| l.seq > after).filter(|l| keep(l)).take(limit).cloned().collect();
        newest.reverse();
        newest
    }
}

/// How often the follower looks for workers that ended on their own (and restarts them).
const WORKER_SWEEP: std::time::Duration = std::time::Duration::from_secs(5);

struct Worker {
    version: u64,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

pub struct TransformManager {
    runtime: Runtime,
    host: std::sync::OnceLock<Arc<Host>>,
    /// Compiled modules by sha256 (shared by every partition and version using them).
    modules: Mutex<HashMap<String, TransformModule>>,
    workers: Mutex<HashMap<(String, i32), Worker>>,
    status: Mutex<BTreeMap<(String, i32), Arc<Mutex<PartitionStatus>>>>,
    logs: Mutex<HashMap<String, Arc<LogBuffer>>>,
    /// Workers told to stop whose task has not ended yet (a guest call runs to its end, up to
    /// its deadline): no new worker of the same (transform, partition) starts before it ends.
    stopping: Mutex<HashMap<(String, i32), tokio::task::JoinHandle<()>>>,
    /// Woken when a stopping worker ended, so what waited for it starts (see [`Self::follow`]).
    stopped: tokio::sync::Notify,
    /// The `applied_index` of the image last reconciled: an older one is never reconciled over
    /// it (the follower can wake on a stopped worker while it still holds an image older than
    /// the one an HTTP handler reconciled; it would start what that image stopped).
    reconciled_index: std::sync::atomic::AtomicU64,
    /// Serializes reconciles (the image follower and HTTP handlers both call it).
    reconciling: tokio::sync::Mutex<()>,
}

impl TransformManager {
    pub fn new(runtime: Runtime) -> Arc<TransformManager> {
        Arc::new(TransformManager {
            runtime,
            host: std::sync::OnceLock::new(),
            modules: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            status: Mutex::new(BTreeMap::new()),
            logs: Mutex::new(HashMap::new()),
            stopping: Mutex::new(HashMap::new()),
            stopped: tokio::sync::Notify::new(),
            reconciled_index: std::sync::atomic::AtomicU64::new(0),
            reconciling: tokio::sync::Mutex::new(()),
        })
    }

    /// Connects the manager to the node (once, after the broker exists).
    pub fn attach(&self, host: Arc<Host>) {
        let _ = self.host.set(host);
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The compiled module of `transform` (compiles or loads from the cache on first use).
    pub async fn module(&self, transform: &TransformImage) -> Result<TransformModule, runnel_runtime::RuntimeError> {
        if let Some(module) = self.modules.lock().unwrap_or_else(|p| p.into_inner()).get(&transform.sha256) {
            return Ok(module.clone());
        }
        let runtime = self.runtime.clone();
        let bytes = transform.module.0.clone();
        let module = tokio::task::spawn_blocking(move || runtime.transform(&bytes))
            .await
            .map_err(|e| runnel_runtime::RuntimeError::Compile(format!("compile task failed: {e}")))??;
        self.modules.lock().unwrap_or_else(|p| p.into_inner()).insert(transform.sha256.clone(), module.clone());
        Ok(module)
    }

    pub fn logs(&self, transform: &str) -> Arc<LogBuffer> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).entry(transform.to_string()).or_default().clone()
    }

    /// Status of every partition of `transform` this node has run.
    pub fn status(&self, transform: &str) -> Vec<PartitionStatus> {
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status
            .range((transform.to_string(), i32::MIN)..=(transform.to_string(), i32::MAX))
            .map(|(_, s)| s.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
    }

    fn status_slot(&self, transform: &str, partition: i32) -> Arc<Mutex<PartitionStatus>> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((transform.to_string(), partition))
            .or_insert_with(|| {
                Arc::new(Mutex::new(PartitionStatus { partition, state: "starting", ..Default::default() }))
            })
            .clone()
    }

    /// Starts and stops workers to match `image`: one per (running transform, input partition
    /// this node leads), at the image's version.
    pub async fn reconcile(self: &Arc<Self>, image: &MetadataImage) {
        let Some(host) = self.host.get().cloned() else { return };
        let _serial = self.reconciling.lock().await;
        let index = image.applied_index;
        if index < self.reconciled_index.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        self.reconciled_index.store(index, std::sync::atomic::Ordering::Release);
        let mut wanted: HashMap<(String, i32), &TransformImage> = HashMap::new();
        for transform in image.transforms.values() {
            let Some(topic) = image.topics.get(&transform.spec.input_topic) else { continue };
            for p in &topic.partitions {
                if p.leader == Some(host.node_id) && host.replicas.get(&topic.name, p.partition).is_some() {
                    wanted.insert((transform.name.clone(), p.partition as i32), transform);
                }
            }
        }
        // Stop what is no longer wanted as it runs.
        let stale: Vec<((String, i32), Worker)> = {
            let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<(String, i32)> = workers
                .iter()
                .filter(|(key, worker)| match wanted.get(*key) {
                    // A worker that ended on its own (its input replica gone as it started, a
                    // panic) is replaced, as one of an older version is.
                    Some(t) => t.paused || t.version != worker.version || worker.task.is_finished(),
                    None => true,
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.into_iter().filter_map(|k| workers.remove(&k).map(|w| (k, w))).collect()
        };
        // Stopping never waits here: a worker in a guest call ends when the call does (up to
        // its deadline), and nothing else this node runs waits for it. Its replacement (a new
        // version, a resumed deployment) starts once it has ended.
        for ((name, partition), worker) in stale {
            let _ = worker.stop.send(true);
            let manager = self.clone();
            let state = match image.transforms.get(&name) {
                Some(t) if t.paused => "paused",
                _ => "stopped",
            };
            let key = (name, partition);
            let mut stopping = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
            let waiter = tokio::spawn({
                let key = key.clone();
                async move {
                    let _ = worker.task.await;
                    // Only a slot still there (a deleted transform's status is forgotten).
                    let slot = manager.status.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
                    if let Some(slot) = slot {
                        slot.lock().unwrap_or_else(|p| p.into_inner()).state = state;
                    }
                    manager.stopping.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                    manager.stopped.notify_one();
                }
            });
            stopping.insert(key, waiter);
        }
        // Forget the status and logs of deleted transforms.
        {
            let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
            status.retain(|(name, _), _| image.transforms.contains_key(name));
            self.logs.lock().unwrap_or_else(|p| p.into_inner()).retain(|name, _| image.transforms.contains_key(name));
        }
        for ((name, partition), transform) in wanted {
            let key = (name.clone(), partition);
            // A worker still stopping keeps its state until it has ended (its waiter sets it).
            if self.stopping.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&key) {
                continue;
            }
            if transform.paused {
                self.status_slot(&name, partition).lock().unwrap_or_else(|p| p.into_inner()).state = "paused";
                continue;
            }
            if self.workers.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&key) {
                continue;
            }
            let logs = self.logs(&name);
            let module = match self.module(transform).await {
                Ok(module) => module,
                Err(e) => {
                    let slot = self.status_slot(&name, partition);
                    let mut status = slot.lock().unwrap_or_else(|p| p.into_inner());
                    status.state = "failed";
                    status.last_error = Some(format!("module: {e}"));
                    logs.push("error", Some(partition), format!("cannot load the module: {e}"));
                    continue;
                }
            };
            let (stop, stop_rx) = watch::channel(false);
            let status = self.status_slot(&name, partition);
            {
                let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
                s.state = "starting";
                s.module_from_cache = module.from_cache();
            }
            let task = tokio::spawn(worker::run(worker::Worker {
                host: host.clone(),
                transform: Arc::new(transform.clone()),
                module,
                partition,
                status,
                logs,
                stop: stop_rx,
                state: None,
            }));
            self.workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((name, partition), Worker { version: transform.version, stop, task });
        }
    }

    /// Reconciles to the latest of `images` whenever it changes or a stopping worker has ended,
    /// until `stop` turns true (the node's transform follower).
    pub async fn follow(
        self: Arc<Self>,
        mut images: watch::Receiver<Arc<MetadataImage>>,
        mut stop: watch::Receiver<bool>,
    ) {
        // Also every few seconds, to replace workers that ended on their own.
        let mut sweep = tokio::time::interval(WORKER_SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                changed = images.changed() => if changed.is_err() { return },
                _ = self.stopped.notified() => {}
                _ = sweep.tick() => {}
            }
            let image = images.borrow_and_update().clone();
            self.reconcile(&image).await;
        }
    }

    /// Stops every worker (node shutdown), and waits for those already stopping.
    pub async fn shutdown(&self) {
        let workers: Vec<Worker> =
            self.workers.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, w)| w).collect();
        for worker in &workers {
            let _ = worker.stop.send(true);
        }
        for worker in workers {
            let _ = worker.task.await;
        }
        let stopping: Vec<_> =
            self.stopping.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, w)| w).collect();
        for waiter in stopping {
            let _ = waiter.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::offsets::EmptyGroupGate;
    use std::collections::BTreeSet;

    /// A membership in which every group is empty.
    struct NoMembers;

    impl EmptyGroupGate for NoMembers {
        fn run_if_empty(&self, _group: &str, write: &mut dyn FnMut() -> bool) -> bool {
            write();
            true
        }
    }

    #[test]
    fn a_deployed_transforms_checkpoints_never_expire_and_other_groups_follow_the_inner_gate() {
        // Proves the expiry gate keeps the positions of a deployed transform only: those of a
        // deleted transform and of ordinary groups expire as the membership allows.
        let deployed = BTreeSet::from(["live".to_string()]);
        let gate = KeepTransformCheckpoints { inner: &NoMembers, deployed: &deployed };
        let mut expired = Vec::new();
        for group in [group_of("live"), group_of("deleted"), "app".to_string()] {
            let mut wrote = false;
            if gate.run_if_empty(&group, &mut || {
                wrote = true;
                false
            }) && wrote
            {
                expired.push(group);
            }
        }
        assert_eq!(expired, vec![group_of("deleted"), "app".to_string()]);
        assert_eq!(transform_of_group(&group_of("a_b")), Some("a_b"));
        assert_eq!(transform_of_group(OFFSETS_KEY), None);
    }
}
