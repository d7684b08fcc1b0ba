//! Produce-path validators: a loaded module ([`ValidatorModule`]) and its instances
//! ([`ValidatorInstance`]), each called once per produced partition batch before it is appended.
//!
//! Invariant: a [`Rejection`] returned by [`ValidatorInstance::validate`] names only records of
//! the batch it was given (indexes below its length), at most [`RECORD_ERRORS_MAX`] of them, and
//! its messages are bounded ([`MESSAGE_BYTES_MAX`]): the broker can put it in a produce response
//! as it is.

use std::fmt;
use std::sync::Arc;

use wasmtime::component::{ComponentExportIndex, ComponentType, Func, InstancePre, Lift, TypedFunc};

use crate::batch::InputBatch;
use crate::guest::Guest;
use crate::host::{self, HostState};
use crate::runtime::{export_func, Loaded, RuntimeInner};
use crate::{GuestError, Limits, LogSink, RuntimeError};

/// Record errors kept from one rejection (KIP-467 `record_errors` of one partition).
pub const RECORD_ERRORS_MAX: usize = 100;
/// Bytes kept of a guest's message (the batch's and each record's).
pub const MESSAGE_BYTES_MAX: usize = 1024;

/// Why a validator refused a batch (the WIT `rejection`).
#[derive(Debug, Clone, PartialEq, Eq, ComponentType, Lift)]
#[component(record)]
pub struct Rejection {
    pub message: String,
    pub records: Vec<RecordError>,
}

/// One record at fault: its index in the batch, and why (the WIT `record-error`).
#[derive(Debug, Clone, PartialEq, Eq, ComponentType, Lift)]
#[component(record)]
pub struct RecordError {
    pub index: u32,
    pub message: String,
}

type ValidateFunc<'a> = TypedFunc<(&'a InputBatch,), (Result<(), Rejection>,)>;

/// A compiled validator. Cheap to clone; instantiate it as often as batches are checked at once.
#[derive(Clone)]
pub struct ValidatorModule {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    // Keeps the engine (and so the epoch ticker) alive while instances may run.
    runtime: Arc<RuntimeInner>,
    pre: InstancePre<HostState>,
    init: ComponentExportIndex,
    validate: ComponentExportIndex,
    sha256: String,
    from_cache: bool,
}

/// How to start one instance: the deployment's parameters, its limits and where its log lines go.
#[derive(Clone)]
pub struct ValidatorSetup {
    pub parameters: Vec<(String, String)>,
    pub limits: Limits,
    pub log: LogSink,
}

impl ValidatorModule {
    pub(crate) fn new(runtime: Arc<RuntimeInner>, loaded: Loaded) -> Result<Self, RuntimeError> {
        let instance_pre = runtime.validator_linker.instantiate_pre(&loaded.component).map_err(|e| {
            RuntimeError::WrongWorld(format!("the validator's imports do not match what Runnel provides: {e:#}"))
        })?;
        let (init, validate) = (export_func(&loaded, "init")?, export_func(&loaded, "validate")?);
        Ok(ValidatorModule {
            inner: Arc::new(ModuleInner {
                runtime,
                pre: instance_pre,
                init,
                validate,
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

    /// Creates an instance and runs the guest's `init` with the parameters. A guest `init` error
    /// is [`GuestError::Init`]; traps, deadlines and memory exhaustion keep their own variants.
    pub fn instantiate(&self, setup: ValidatorSetup) -> Result<ValidatorInstance, GuestError> {
        let state = HostState::new(&setup.limits, &setup.parameters, setup.log, None);
        let store = host::new_store(&self.inner.runtime.engine, state);
        let mut guest = Guest::new(store, setup.limits);
        let inner = &self.inner;
        let (init, validate) = guest.call(|store| {
            let instance = inner.pre.instantiate(&mut *store)?;
            let lacks = |f: &str| wasmtime::format_err!("the instance lacks the validator's `{f}`");
            let init = instance.get_func(&mut *store, inner.init).ok_or_else(|| lacks("init"))?;
            let validate = instance.get_func(&mut *store, inner.validate).ok_or_else(|| lacks("validate"))?;
            // Checks once that our types match the export's WIT signature; calls then skip it.
            validate.typed::<(&InputBatch,), (Result<(), Rejection>,)>(&*store)?;
            Ok((init, validate))
        })?;
        let parameters = setup.parameters.as_slice();
        let (result,) = guest.call(|store| {
            let init = init.typed::<(&[(String, String)],), (Result<(), String>,)>(&*store)?;
            init.call(store, (parameters,))
        })?;
        result.map_err(GuestError::init)?;
        Ok(ValidatorInstance { guest, validate })
    }
}

impl fmt::Debug for ValidatorModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatorModule")
            .field("sha256", &self.inner.sha256)
            .field("from_cache", &self.inner.from_cache)
            .finish_non_exhaustive()
    }
}

/// A running validator: one store, reused for batch after batch (one at a time).
pub struct ValidatorInstance {
    guest: Guest,
    validate: Func,
}

impl ValidatorInstance {
    /// Calls the guest once for the whole batch: `Ok(Ok(()))` accepts it, `Ok(Err(rejection))`
    /// refuses it, `Err` is the guest failing (the instance is then poisoned if it trapped, ran
    /// out of time or memory).
    pub fn validate(&mut self, batch: &InputBatch) -> Result<Result<(), Rejection>, GuestError> {
        // SAFETY: `instantiate` checked this function's type against exactly these parameter
        // and result types (`Func::typed`); the function and its type never change afterwards.
        let validate: ValidateFunc<'_> = unsafe { TypedFunc::new_unchecked(self.validate) };
        let (result,) = self.guest.call(|store| validate.call(store, (batch,)))?;
        Ok(result.map_err(|rejection| bounded(rejection, batch.len())))
    }

    /// Whether an earlier call left the instance unusable (trap, deadline, memory cap).
    pub fn is_poisoned(&self) -> bool {
        self.guest.is_poisoned()
    }

    /// Current size of the instance's linear memories, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.guest.memory_bytes()
    }
}

impl fmt::Debug for ValidatorInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatorInstance").field("memory_bytes", &self.memory_bytes()).finish_non_exhaustive()
    }
}

/// The rejection with out-of-range record indexes dropped, at most [`RECORD_ERRORS_MAX`]
/// records, and messages cut to [`MESSAGE_BYTES_MAX`]; an empty message says so.
fn bounded(mut rejection: Rejection, records: usize) -> Rejection {
    rejection.records.retain(|e| (e.index as usize) < records);
    rejection.records.truncate(RECORD_ERRORS_MAX);
    for error in &mut rejection.records {
        truncate(&mut error.message);
    }
    truncate(&mut rejection.message);
    if rejection.message.is_empty() {
        rejection.message = "refused by the validator (no reason given)".to_string();
    }
    rejection
}

fn truncate(message: &mut String) {
    crate::error::cut_at_char_boundary(message, MESSAGE_BYTES_MAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Indexes past the batch are dropped, lists and messages bounded, an empty message named.
    #[test]
    fn rejections_are_bounded_to_the_batch() {
        let long = "é".repeat(MESSAGE_BYTES_MAX);
        let records = (0..300).map(|index| RecordError { index, message: long.clone() }).collect();
        let r = bounded(Rejection { message: String::new(), records }, 150);
        assert_eq!(r.records.len(), RECORD_ERRORS_MAX);
        assert!(r.records.iter().all(|e| e.index < 150 && e.message.len() <= MESSAGE_BYTES_MAX));
        assert!(r.message.contains("no reason"));
        let r =
            bounded(Rejection { message: "x".into(), records: vec![RecordError { index: 5, message: "y".into() }] }, 5);
        assert!(r.records.is_empty());
    }
}
