//! Host bindings generated from `sdk/wit/runnel.wit` (0.2.0), one module per world (each
//! imports `logging`, so each gets its own generated `Host` trait), and from the frozen
//! `sdk/wit-0.1.0` for the imports of components built against 0.1.0 (wasmtime links 0.1 and
//! 0.2 names separately). Only the imports come from here: exports are called through typed
//! functions found by export index (`runtime::Exports`), whose records match either version's
//! structurally.

pub(crate) mod transform {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "transform" });
}

pub(crate) mod assignor {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "assignor" });
}

/// The first assignor form (members and topics by name), still loaded.
pub(crate) mod name_assignor {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "name-assignor" });
}

pub(crate) mod validator {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "validator" });
}

/// Version 0.1.0 of the worlds: linked so 0.1.0 components keep working.
pub(crate) mod v0_1 {
    pub(crate) mod transform {
        wasmtime::component::bindgen!({ path: "../sdk/wit-0.1.0", world: "transform" });
    }

    pub(crate) mod assignor {
        wasmtime::component::bindgen!({ path: "../sdk/wit-0.1.0", world: "assignor" });
    }

    pub(crate) mod validator {
        wasmtime::component::bindgen!({ path: "../sdk/wit-0.1.0", world: "validator" });
    }
}

use crate::host::HostState;
use crate::Level;

// The `types` and `assignment` interfaces hold only records: nothing to implement.
impl transform::runnel::transform::types::Host for HostState {}
impl assignor::runnel::transform::group_assignment::Host for HostState {}
impl name_assignor::runnel::transform::assignment::Host for HostState {}
impl validator::runnel::transform::types::Host for HostState {}
impl v0_1::transform::runnel::transform::types::Host for HostState {}
impl v0_1::assignor::runnel::transform::assignment::Host for HostState {}
impl v0_1::validator::runnel::transform::types::Host for HostState {}

/// The `logging` import of one world's bindings: the same host function in every world and
/// version.
macro_rules! logging_host {
    ($($seg:ident)::+) => {
        impl $($seg::)+Host for HostState {
            fn log(&mut self, level: $($seg::)+Level, message: String) {
                use $($seg::)+Level as L;
                let level = match level {
                    L::Trace => Level::Trace,
                    L::Debug => Level::Debug,
                    L::Info => Level::Info,
                    L::Warn => Level::Warn,
                    L::Error => Level::Error,
                };
                HostState::log(self, level, &message);
            }
        }
    };
}

logging_host!(transform::runnel::transform::logging);
logging_host!(assignor::runnel::transform::logging);
logging_host!(name_assignor::runnel::transform::logging);
logging_host!(validator::runnel::transform::logging);
logging_host!(v0_1::transform::runnel::transform::logging);
logging_host!(v0_1::assignor::runnel::transform::logging);
logging_host!(v0_1::validator::runnel::transform::logging);

/// The `state` import (transforms, 0.2.0 on): the instance's partition state.
impl transform::runnel::transform::state::Host for HostState {
    fn get(&mut self, key: Vec<u8>) -> Option<Vec<u8>> {
        self.with_state(|state| state.get(&key).map(<[u8]>::to_vec))
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), String> {
        self.with_state(|state| state.put(key, value))
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.with_state(|state| state.delete(&key))
    }
}
