//! Uploaded consumer group assignors: WASM components of the `assignor` world that a
//! consumer-protocol member selects by name with `group.remote.assignor` (KIP-848), deployed at
//! runtime over HTTP with no restart.
//!
//! An assignor is an `AssignorImage` in the metadata image (module bytes included, so every
//! node has it). `WasmAssignors::reconcile` keeps one [`WasmAssignor`] per deployed image,
//! compiled once per module (the runtime's on-disk cache makes a restart cheap), with a few
//! guest instances reused from run to run. A group coordinator asks [`WasmAssignors::current`]
//! for the version its image names and runs [`WasmAssignor::assign`] on the blocking pool,
//! outside every group lock; what it returns goes through `ConsumerGroups::outcome_or_default`,
//! which checks the plan and falls back to the cluster's default assignor with the error.
//!
//! Invariants: guests run only through `runnel_runtime`, never on an async worker thread, each
//! call bounded by the deployment's deadline and memory cap; a failing guest (trap, deadline,
//! memory cap, an error, an invalid plan, a module that does not load) yields an `Err` naming
//! the failure, never a plan, and never takes the broker down; a poisoned instance is dropped,
//! never called again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use runnel_runtime::{AssignorInstance, AssignorModule, Limits, LogSink, Runtime};

use super::assignor::{AssignmentSpec, Plan};
use crate::controller::{AssignorImage, MetadataImage};
use crate::metrics::Metrics;
use crate::transform::LogBuffer;

/// Instances of one assignor kept between runs on this node (more run at once when several
/// groups compute an assignment together; the extra ones are dropped afterwards).
const IDLE_INSTANCES_MAX: usize = 2;

/// The uploaded assignors of this node's image, by name.
pub struct WasmAssignors {
    runtime: Runtime,
    metrics: Arc<Metrics>,
    by_name: RwLock<HashMap<String, Arc<WasmAssignor>>>,
    /// The `applied_index` of the image last reconciled: an older one is never reconciled over it.
    reconciled_index: AtomicU64,
    /// Serializes reconciles (the image follower, HTTP handlers and coordinators call it).
    reconciling: tokio::sync::Mutex<()>,
}

/// One deployed assignor on this node: its module (or why it does not load), idle instances and
/// what it has done.
pub struct WasmAssignor {
    pub image: Arc<AssignorImage>,
    module: Result<AssignorModule, String>,
    /// The name the guest reports (its exported `name`), once an instance was made.
    guest_name: OnceLock<String>,
    idle: Mutex<Vec<AssignorInstance>>,
    metrics: Arc<Metrics>,
    pub stats: AssignorStats,
    pub logs: Arc<LogBuffer>,
}

/// Counters of one assignor on this node since it was (re)deployed or the node started.
#[derive(Default)]
pub struct AssignorStats {
    /// Plans the guest returned that passed the check.
    pub runs: AtomicU64,
    /// Runs that failed (each fell back to the default assignor).
    pub failures: AtomicU64,
    /// The last run's wall time, µs.
    pub last_run_micros: AtomicU64,
    /// When the last run ended (ms since the epoch; 0 before the first).
    pub last_run_ms: AtomicU64,
    /// The last failure and when (ms since the epoch).
    pub last_error: Mutex<Option<(String, i64)>>,
}

impl WasmAssignors {
    pub fn new(runtime: Runtime, metrics: Arc<Metrics>) -> Arc<WasmAssignors> {
        Arc::new(WasmAssignors {
            runtime,
            metrics,
            by_name: RwLock::new(HashMap::new()),
            reconciled_index: AtomicU64::new(0),
            reconciling: tokio::sync::Mutex::new(()),
        })
    }

    /// The assignor named `name` as this node last reconciled it.
    pub fn get(&self, name: &str) -> Option<Arc<WasmAssignor>> {
        self.by_name.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// The assignor `image` names `name` at the image's version: loaded first when this node
    /// is behind the image (a member may choose an assignor whose deployment this node has not
    /// reconciled yet). `None` when the image has no such assignor.
    pub async fn current(&self, image: &MetadataImage, name: &str) -> Option<Arc<WasmAssignor>> {
        let wanted = image.assignors.get(name)?;
        let same = |a: &Arc<WasmAssignor>| a.image.version == wanted.version && a.image.sha256 == wanted.sha256;
        if let Some(loaded) = self.get(name).filter(same) {
            return Some(loaded);
        }
        self.reconcile(image).await;
        self.get(name)
    }

    /// Matches the image: loads new and redeployed assignors (compiling on the blocking pool; a
    /// module that does not load is kept with its error, so groups that choose it fall back to
    /// the default with that error), keeps unchanged ones with their instances and counters,
    /// drops the rest.
    pub async fn reconcile(&self, image: &MetadataImage) {
        let _serial = self.reconciling.lock().await;
        if image.applied_index < self.reconciled_index.load(Ordering::Acquire) {
            return;
        }
        let current: HashMap<String, Arc<WasmAssignor>> =
            self.by_name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut next = HashMap::with_capacity(image.assignors.len());
        for wanted in image.assignors.values() {
            let kept = current.get(&wanted.name).filter(|a| Arc::ptr_eq(&a.image, wanted) || *a.image == **wanted);
            if let Some(kept) = kept {
                next.insert(wanted.name.clone(), kept.clone());
                continue;
            }
            let runtime = self.runtime.clone();
            let bytes = wanted.module.0.clone();
            let module = tokio::task::spawn_blocking(move || runtime.assignor(&bytes))
                .await
                .map_err(|e| format!("compile task failed: {e}"))
                .and_then(|loaded| loaded.map_err(|e| e.to_string()));
            let logs = Arc::new(LogBuffer::default());
            match &module {
                Ok(_) => logs.push("info", None, format!("version {} loaded ({})", wanted.version, wanted.sha256)),
                Err(e) => logs.push("error", None, format!("version {} cannot be loaded: {e}", wanted.version)),
            }
            let assignor = WasmAssignor {
                image: wanted.clone(),
                module,
                guest_name: OnceLock::new(),
                idle: Mutex::new(Vec::new()),
                metrics: self.metrics.clone(),
                stats: AssignorStats::default(),
                logs,
            };
            next.insert(wanted.name.clone(), Arc::new(assignor));
        }
        *self.by_name.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.reconciled_index.store(image.applied_index, Ordering::Release);
    }
}

impl WasmAssignor {
    /// Runs the guest on `spec` (blocking: call it on the blocking pool) with each subscribed
    /// topic's partition sizes from `sizes` (0 where unknown). The error names what failed; the
    /// caller falls back to the default assignor.
    pub fn assign(&self, spec: &AssignmentSpec, sizes: &BTreeMap<String, Vec<u64>>) -> Result<Plan, String> {
        let started = Instant::now();
        let result = self.call(spec, sizes);
        let elapsed = started.elapsed();
        let name = self.image.name.as_str();
        self.metrics.assignor_call_seconds.with_label_values(&[name]).observe(elapsed.as_secs_f64());
        let now = crate::log::now_ms();
        self.stats.last_run_micros.store(elapsed.as_micros() as u64, Ordering::Relaxed);
        self.stats.last_run_ms.store(now.max(0) as u64, Ordering::Relaxed);
        let members = spec.members.len();
        match &result {
            Ok(_) => {
                self.stats.runs.fetch_add(1, Ordering::Relaxed);
                self.metrics.assignor_runs.with_label_values(&[name, "ok"]).inc();
                let line = format!("assigned {} topics to {members} members in {elapsed:?}", spec.topics.len());
                self.logs.push("debug", None, line);
            }
            Err(error) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.metrics.assignor_runs.with_label_values(&[name, "failed"]).inc();
                self.logs.push("error", None, format!("{error} ({members} members)"));
                *lock(&self.stats.last_error) = Some((error.clone(), now));
            }
        }
        result
    }

    fn call(&self, spec: &AssignmentSpec, sizes: &BTreeMap<String, Vec<u64>>) -> Result<Plan, String> {
        let module = self.module.as_ref().map_err(|e| format!("the module cannot be loaded: {e}"))?;
        let idle = lock(&self.idle).pop();
        let mut instance = match idle {
            Some(instance) => instance,
            None => {
                let mut instance = module.instantiate(self.limits(), self.log_sink()).map_err(|e| e.to_string())?;
                if self.guest_name.get().is_none() {
                    if let Ok(name) = instance.name() {
                        let _ = self.guest_name.set(name);
                    }
                }
                instance
            }
        };
        let (members, topics) = to_guest(spec, sizes);
        let result = instance.assign(&members, &topics);
        if !instance.is_poisoned() {
            let mut idle = lock(&self.idle);
            if idle.len() < IDLE_INSTANCES_MAX {
                idle.push(instance);
            }
        }
        let assignment = result.map_err(|e| e.to_string())?;
        let mut plan = Plan::new();
        for member in assignment {
            let topics = plan.entry(member.member_id).or_default();
            for tp in member.partitions {
                topics.entry(tp.topic).or_default().extend(tp.partitions);
            }
        }
        Ok(plan)
    }

    fn limits(&self) -> Limits {
        let spec = &self.image.spec;
        Limits {
            memory_bytes: usize::try_from(spec.memory_bytes).unwrap_or(usize::MAX),
            call_timeout: Duration::from_millis(spec.call_timeout_ms),
            ..Limits::default()
        }
    }

    fn log_sink(&self) -> LogSink {
        let logs = self.logs.clone();
        Arc::new(move |level, line: &str| logs.push(level.name(), None, line.to_string()))
    }

    /// Whether the module loaded, and if not why.
    pub fn load_error(&self) -> Option<&str> {
        self.module.as_ref().err().map(String::as_str)
    }

    /// The name the guest reports for itself, once it ran on this node.
    pub fn guest_name(&self) -> Option<String> {
        self.guest_name.get().cloned()
    }

    /// Instances kept for the next runs.
    pub fn idle_instances(&self) -> usize {
        lock(&self.idle).len()
    }
}

/// The runtime's view of a spec: members in id order, topics in name order, sizes per
/// partition (0 where `sizes` has none).
fn to_guest(
    spec: &AssignmentSpec,
    sizes: &BTreeMap<String, Vec<u64>>,
) -> (Vec<runnel_runtime::Member>, Vec<runnel_runtime::TopicMetadata>) {
    let members = spec
        .members
        .iter()
        .map(|m| runnel_runtime::Member {
            member_id: m.member_id.clone(),
            rack: m.rack.clone(),
            subscriptions: m.subscriptions.iter().cloned().collect(),
            owned: m
                .owned
                .iter()
                .map(|(topic, partitions)| runnel_runtime::TopicPartitions {
                    topic: topic.clone(),
                    partitions: partitions.iter().copied().collect(),
                })
                .collect(),
        })
        .collect();
    let topics = spec
        .topics
        .iter()
        .map(|(name, topic)| {
            let known = sizes.get(name);
            let partition_sizes =
                (0..topic.partitions as usize).map(|p| known.and_then(|s| s.get(p)).copied().unwrap_or(0)).collect();
            runnel_runtime::TopicMetadata { name: name.clone(), partition_sizes, partition_racks: topic.racks.clone() }
        })
        .collect();
    (members, topics)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::assignor::{MemberSpec, TopicSpec};

    /// The guest sees every member and subscribed topic, each topic with one size per
    /// partition (0 where the coordinator could not learn it) and its replicas' racks.
    #[test]
    fn the_guest_sees_sizes_for_every_partition() {
        let spec = AssignmentSpec {
            members: vec![MemberSpec {
                member_id: "m".into(),
                rack: Some("r1".into()),
                subscriptions: ["t".to_string()].into(),
                owned: [("t".to_string(), [1].into())].into(),
            }],
            topics: [("t".to_string(), TopicSpec { partitions: 3, racks: vec![vec!["r1".into()]; 3] })].into(),
        };
        let sizes = [("t".to_string(), vec![10, 20])].into();
        let (members, topics) = to_guest(&spec, &sizes);
        assert_eq!(members[0].owned[0].partitions, [1]);
        assert_eq!(members[0].subscriptions, ["t"]);
        assert_eq!(topics[0].partition_sizes, [10, 20, 0]);
        assert_eq!(topics[0].partition_racks.len(), 3);
    }
}
