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
    pub(crate) fn new(mut store: Store<HostState>, limits: Limits) -> Self {
        // What wasmtime copies out of the guest in one lift (a call's results, an import's
        // arguments) is charged to the store's hostcall fuel. Bytes the guest really holds
        // never pass its memory cap; more can only be entries naming the same memory (a list
        // of record errors sharing one large string, an assignment list sharing one member
        // id), which lifting copies once per entry. So the fuel is the memory cap: a lift past
        // it fails the call instead of allocating without bound (wasmtime's default is 128 MiB
        // whatever the cap).
        store.set_hostcall_fuel(limits.memory_bytes);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_call_may_copy_out_of_the_guest_is_bounded_by_its_memory_cap() {
        let limits = Limits { memory_bytes: 3 << 20, ..Limits::default() };
        let state = HostState::new(&limits, &[], std::sync::Arc::new(|_, _| {}), None);
        let guest = Guest::new(host::new_store(&wasmtime::Engine::default(), state), limits);
        assert_eq!(guest.store.hostcall_fuel(), 3 << 20, "wasmtime's default is 128 MiB");
    }
}
