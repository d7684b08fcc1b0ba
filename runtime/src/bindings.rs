//! Host bindings generated from `sdk/wit/runnel.wit`, one module per world (each imports
//! `logging`, so each gets its own generated `Host` trait and its own linker).

pub(crate) mod transform {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "transform" });
}

pub(crate) mod assignor {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "assignor" });
}

pub(crate) mod validator {
    wasmtime::component::bindgen!({ path: "../sdk/wit", world: "validator" });
}

use crate::host::HostState;
use crate::Level;

// The `types` and `assignment` interfaces hold only records: nothing to implement.
impl transform::runnel::transform::types::Host for HostState {}
impl assignor::runnel::transform::assignment::Host for HostState {}
impl validator::runnel::transform::types::Host for HostState {}

impl transform::runnel::transform::logging::Host for HostState {
    fn log(&mut self, level: transform::runnel::transform::logging::Level, message: String) {
        use transform::runnel::transform::logging::Level as L;
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

impl validator::runnel::transform::logging::Host for HostState {
    fn log(&mut self, level: validator::runnel::transform::logging::Level, message: String) {
        use validator::runnel::transform::logging::Level as L;
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

impl assignor::runnel::transform::logging::Host for HostState {
    fn log(&mut self, level: assignor::runnel::transform::logging::Level, message: String) {
        use assignor::runnel::transform::logging::Level as L;
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
