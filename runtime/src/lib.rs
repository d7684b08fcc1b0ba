//! `runnel-runtime`: the WebAssembly host for Runnel transforms, assignors and validators.
//!
//! Owns everything wasmtime: engine configuration, validation and precompilation of uploaded
//! components, the host side of the WIT contract (`sdk/wit/runnel.wit`), per-call deadlines
//! (epoch interruption), memory caps, and capturing guest logs.
//!
//! Invariants:
//! - No wasmtime type appears in the public API: the broker sees plain data, [`RuntimeError`]
//!   for loading and [`GuestError`] for running, and nothing a guest does can panic or abort
//!   the host process.
//! - A guest gets no files, sockets, arguments or host environment; its environment variables
//!   are its deployment parameters, and its stdout/stderr become log lines.
//! - Every guest call runs under a deadline and a memory cap ([`Limits`]); a guest that blows
//!   either (or traps) poisons its instance, which the caller then replaces.
//!
//! Guest calls block the calling thread (the synchronous wasmtime API): call them from worker
//! threads or `spawn_blocking`, never on an async executor thread.

mod assignor;
mod batch;
mod bindings;
mod error;
mod footprint;
mod guest;
mod host;
mod runtime;
mod state;
mod transform;
mod validator;

use std::sync::Arc;
use std::time::Duration;

pub use assignor::{AssignorInstance, AssignorModule, Member, MemberAssignment, TopicMetadata, TopicPartitions};
pub use batch::{Headers, InputBatch, InputRecord, OutputBatch, OutputRecord, Span};
pub use error::{GuestError, RuntimeError};
pub use footprint::MAX_INSTANCE_FOOTPRINT_BYTES;
pub use runtime::{ModuleInfo, ModuleKind, Runtime, RuntimeConfig};
pub use state::{KeyedState, StateHandle};
pub use transform::{InstanceSetup, TransformInstance, TransformModule};
pub use validator::{
    RecordError, Rejection, ValidatorInstance, ValidatorModule, ValidatorSetup, MESSAGE_BYTES_MAX, RECORD_ERRORS_MAX,
};

/// Receives guest log lines: the `log` import, and stdout (Info) / stderr (Warn) line by line.
/// Called on the thread running the guest; it must not block for long.
pub type LogSink = Arc<dyn Fn(Level, &str) + Send + Sync>;

/// A [`LogSink`] that drops everything.
pub fn discard_logs() -> LogSink {
    Arc::new(|_, _| {})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    /// The lower-case name logs and the HTTP API show.
    pub fn name(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// Per-instance resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Cap on the instance's linear memories together.
    pub memory_bytes: usize,
    /// Wall-clock budget of one guest call (`init`, one `process`, one `assign`), enforced with
    /// a granularity of about 10 ms.
    pub call_timeout: Duration,
    /// Cap on the `data` of one output batch.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_bytes: 64 * 1024 * 1024, call_timeout: Duration::from_secs(2), output_bytes: 16 * 1024 * 1024 }
    }
}
