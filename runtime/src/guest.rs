//! One running guest: its store plus the bookkeeping every call shares (deadline, memory
//! refusal, poisoning). Used by both transform and assignor instances.
//!
//! Invariant: after a call ends in `Deadline`, `MemoryLimit` or `Trap` the guest's state may be
//! half-updated (a trap unwinds nothing inside the guest), so the instance is poisoned and
//! never called again.

use wasmtime::Store;

use crate::host::{self, HostState};
use crate::{GuestError, Limits};

pub(crate) struct Guest {
    pub(crate) store: Store<HostState>,
    pub(crate) limits: Limits,
    /// Why the instance may not be called any more.
    poisoned: Option<GuestError>,
}

impl Guest {
    pub(crate) fn new(store: Store<HostState>, limits: Limits) -> Self {
        Guest { store, limits, poisoned: None }
    }

    /// Runs one guest call under the call deadline and translates its failure.
    pub(crate) fn call<R>(
        &mut self,
        call: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, GuestError> {
        if let Some(reason) = &self.poisoned {
            return Err(GuestError::Trap(format!(
                "instance is poisoned by an earlier failure ({reason}); instantiate a new one"
            )));
        }
        host::begin_call(&mut self.store, self.limits.call_timeout);
        call(&mut self.store).map_err(|error| {
            let error = host::classify(&self.store, &self.limits, error);
            self.poisoned = Some(error.clone());
            error
        })
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.store.data().limiter.used
    }
}
