//! Transforms: a loaded module ([`TransformModule`]) and its running instances
//! ([`TransformInstance`]), one per input partition, each called once per batch.
//!
//! Invariant: every `OutputBatch` that `process` returns has passed `batch::validate_output`
//! against this instance's output topics and its size limit; the broker can use it without
//! further checks.

use std::fmt;
use std::sync::Arc;

use wasmtime::component::{ComponentExportIndex, Func, InstancePre, TypedFunc};

use crate::batch::{validate_output, InputBatch, OutputBatch};
use crate::guest::Guest;
use crate::host::{self, HostState};
use crate::runtime::{export_func, Loaded, RuntimeInner, STATE_IMPORT};
use crate::state::StateHandle;
use crate::{GuestError, Limits, LogSink, RuntimeError};

type ProcessFunc<'a> = TypedFunc<(&'a InputBatch,), (Result<OutputBatch, String>,)>;
type InitFunc<'a> = TypedFunc<(&'a [(String, String)], &'a [String]), (Result<(), String>,)>;

/// A compiled transform. Cheap to clone; instantiate it once per input partition.
#[derive(Clone)]
pub struct TransformModule {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    // Keeps the engine (and so the epoch ticker) alive while instances may run.
    runtime: Arc<RuntimeInner>,
    pre: InstancePre<HostState>,
    init: ComponentExportIndex,
    process: ComponentExportIndex,
    /// Whether the component imports `state` (0.2.0 on).
    stateful: bool,
    /// The transformer export it has (its contract version).
    export: String,
    sha256: String,
    from_cache: bool,
}

/// How to start one instance: the deployment's parameters and output topics, its limits,
/// where its log lines go, and the partition state its `state` import reaches (`None`: an
/// empty state that takes nothing).
#[derive(Clone)]
pub struct InstanceSetup {
    pub parameters: Vec<(String, String)>,
    pub output_topics: Vec<String>,
    pub limits: Limits,
    pub log: LogSink,
    pub state: Option<StateHandle>,
}

impl fmt::Debug for InstanceSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceSetup")
            .field("parameters", &self.parameters)
            .field("output_topics", &self.output_topics)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl TransformModule {
    pub(crate) fn new(runtime: Arc<RuntimeInner>, loaded: Loaded) -> Result<Self, RuntimeError> {
        let pre = runtime.transform_linker.instantiate_pre(&loaded.component).map_err(|e| {
            RuntimeError::WrongWorld(format!("the transform's imports do not match what Runnel provides: {e:#}"))
        })?;
        let (init, process) = (export_func(&loaded, "init")?, export_func(&loaded, "process")?);
        let engine = &runtime.engine;
        let stateful = loaded.component.component_type().imports(engine).any(|(name, _)| name == STATE_IMPORT);
        Ok(TransformModule {
            inner: Arc::new(ModuleInner {
                runtime,
                pre,
                init,
                process,
                stateful,
                export: loaded.export,
                sha256: loaded.sha256,
                from_cache: loaded.from_cache,
            }),
        })
    }

    /// Whether the transform keeps keyed state (its component imports `state`).
    pub fn is_stateful(&self) -> bool {
        self.inner.stateful
    }

    /// The transformer export the component has, naming the contract version it was built
    /// against (`runnel:transform/transformer@0.1.0`).
    pub fn export(&self) -> &str {
        &self.inner.export
    }

    /// True when this module was loaded from a precompiled artifact instead of compiled.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }

    /// Hex SHA-256 of the module bytes.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// Creates an instance and runs the guest's `init` with the parameters and output topics.
    /// A guest `init` error is [`GuestError::Init`]; traps, deadlines and memory exhaustion
    /// during instantiation or `init` keep their own variants.
    pub fn instantiate(&self, setup: InstanceSetup) -> Result<TransformInstance, GuestError> {
        let state = HostState::new(&setup.limits, &setup.parameters, setup.log, setup.state);
        let store = host::new_store(&self.inner.runtime.engine, state);
        let mut guest = Guest::new(store, setup.limits);
        // A transform's results pass `output_bytes` of data at most, and its records (40
        // bytes each) are bounded by its memory: what one call may copy out is the output limit
        // with room for records and messages, not the whole memory cap (up to 1 GiB), which
        // the host would copy before refusing the output as too large.
        let fuel = setup.limits.output_bytes.saturating_mul(4).saturating_add(1 << 20);
        guest.store.set_hostcall_fuel(fuel.min(setup.limits.memory_bytes));
        let inner = &self.inner;
        let (init, process) = guest.call(|store| {
            let instance = inner.pre.instantiate(&mut *store)?;
            let lacks = |f: &str| wasmtime::format_err!("the instance lacks `{}#{f}`", inner.export);
            let init = instance.get_func(&mut *store, inner.init).ok_or_else(|| lacks("init"))?;
            let process = instance.get_func(&mut *store, inner.process).ok_or_else(|| lacks("process"))?;
            // Checks once that our types match the exports' WIT signatures (any served
            // version: records match structurally); calls then skip the check.
            process.typed::<(&InputBatch,), (Result<OutputBatch, String>,)>(&*store)?;
            Ok((init, process))
        })?;
        let (parameters, output_topics) = (setup.parameters.as_slice(), setup.output_topics.as_slice());
        let (result,) = guest.call(|store| {
            let init: InitFunc<'_> = init.typed(&*store)?;
            init.call(store, (parameters, output_topics))
        })?;
        result.map_err(GuestError::init)?;
        Ok(TransformInstance { guest, process, output_topics: setup.output_topics.len() })
    }
}

impl fmt::Debug for TransformModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformModule")
            .field("sha256", &self.inner.sha256)
            .field("export", &self.inner.export)
            .field("from_cache", &self.inner.from_cache)
            .finish_non_exhaustive()
    }
}

/// A running transform: one store, reused for every batch of one input partition.
pub struct TransformInstance {
    guest: Guest,
    process: Func,
    output_topics: usize,
}

impl TransformInstance {
    /// Calls the guest once for the whole batch and validates what it returned.
    pub fn process(&mut self, batch: &InputBatch) -> Result<OutputBatch, GuestError> {
        // SAFETY: `instantiate` checked this function's type against exactly these parameter
        // and result types (`Func::typed`); the function and its type never change afterwards.
        let process: ProcessFunc<'_> = unsafe { TypedFunc::new_unchecked(self.process) };
        let (result,) = self.guest.call(|store| process.call(store, (batch,)))?;
        let output = result.map_err(GuestError::failed)?;
        let limit = self.guest.limits.output_bytes;
        if output.data.len() > limit {
            return Err(GuestError::OutputTooLarge { size: output.data.len(), limit });
        }
        validate_output(&output, self.output_topics, limit).map_err(GuestError::InvalidOutput)?;
        Ok(output)
    }

    /// Current size of the instance's linear memories, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.guest.memory_bytes()
    }
}

impl fmt::Debug for TransformInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformInstance")
            .field("memory_bytes", &self.memory_bytes())
            .field("output_topics", &self.output_topics)
            .finish_non_exhaustive()
    }
}
