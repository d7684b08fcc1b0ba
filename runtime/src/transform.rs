//! Transforms: a loaded module ([`TransformModule`]) and its running instances
//! ([`TransformInstance`]), one per input partition, each called once per batch.
//!
//! Invariant: every `OutputBatch` that `process` returns has passed `batch::validate_output`
//! against this instance's output topics and its size limit; the broker can use it without
//! further checks.

use std::fmt;
use std::sync::Arc;

use wasmtime::component::{ComponentExportIndex, Func, TypedFunc};

use crate::batch::{validate_output, InputBatch, OutputBatch};
use crate::bindings::transform::{Transform, TransformPre};
use crate::guest::Guest;
use crate::host::{self, HostState};
use crate::runtime::{Loaded, RuntimeInner, TRANSFORMER_EXPORT};
use crate::{GuestError, Limits, LogSink, RuntimeError};

type ProcessFunc<'a> = TypedFunc<(&'a InputBatch,), (Result<OutputBatch, String>,)>;

/// A compiled transform. Cheap to clone; instantiate it once per input partition.
#[derive(Clone)]
pub struct TransformModule {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    // Keeps the engine (and so the epoch ticker) alive while instances may run.
    runtime: Arc<RuntimeInner>,
    pre: TransformPre<HostState>,
    process: ComponentExportIndex,
    sha256: String,
    from_cache: bool,
}

/// How to start one instance: the deployment's parameters and output topics, its limits and
/// where its log lines go.
#[derive(Clone)]
pub struct InstanceSetup {
    pub parameters: Vec<(String, String)>,
    pub output_topics: Vec<String>,
    pub limits: Limits,
    pub log: LogSink,
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
        let instance_pre = runtime.transform_linker.instantiate_pre(&loaded.component).map_err(|e| {
            RuntimeError::WrongWorld(format!("the transform's imports do not match what Runnel provides: {e:#}"))
        })?;
        let pre = TransformPre::new(instance_pre)
            .map_err(|e| RuntimeError::WrongWorld(format!("the transform's exports do not match the WIT: {e:#}")))?;
        let process = loaded
            .component
            .get_export_index(None, TRANSFORMER_EXPORT)
            .and_then(|interface| loaded.component.get_export_index(Some(&interface), "process"))
            .ok_or_else(|| RuntimeError::WrongWorld(format!("`{TRANSFORMER_EXPORT}` lacks the function `process`")))?;
        Ok(TransformModule {
            inner: Arc::new(ModuleInner {
                runtime,
                pre,
                process,
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

    /// Creates an instance and runs the guest's `init` with the parameters and output topics.
    /// A guest `init` error is [`GuestError::Init`]; traps, deadlines and memory exhaustion
    /// during instantiation or `init` keep their own variants.
    pub fn instantiate(&self, setup: InstanceSetup) -> Result<TransformInstance, GuestError> {
        let state = HostState::new(&setup.limits, &setup.parameters, setup.log);
        let store = host::new_store(&self.inner.runtime.engine, state);
        let mut guest = Guest::new(store, setup.limits);
        let pre = &self.inner.pre;
        let process_index = &self.inner.process;
        let (bindings, process) = guest.call(|store| {
            let instance = pre.instance_pre().instantiate(&mut *store)?;
            let bindings = Transform::new(&mut *store, &instance)?;
            let process = instance
                .get_func(&mut *store, process_index)
                .ok_or_else(|| wasmtime::format_err!("the instance lacks `{TRANSFORMER_EXPORT}#process`"))?;
            // Checks once that our batch types match the export's WIT signature; calls then
            // skip the check (see `TransformInstance::process`).
            process.typed::<(&InputBatch,), (Result<OutputBatch, String>,)>(&*store)?;
            Ok((bindings, process))
        })?;
        let (parameters, output_topics) = (&setup.parameters, &setup.output_topics);
        guest
            .call(|store| bindings.runnel_transform_transformer().call_init(store, parameters, output_topics))?
            .map_err(GuestError::Init)?;
        Ok(TransformInstance { guest, process, output_topics: setup.output_topics.len() })
    }
}

impl fmt::Debug for TransformModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformModule")
            .field("sha256", &self.inner.sha256)
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
        let output = result.map_err(GuestError::Failed)?;
        let limit = self.guest.limits.output_bytes;
        if output.data.len() > limit {
            return Err(GuestError::OutputTooLarge { size: output.data.len(), limit });
        }
        validate_output(&output, self.output_topics).map_err(GuestError::InvalidOutput)?;
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
