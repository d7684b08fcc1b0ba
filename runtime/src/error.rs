//! The two error types of the crate: [`RuntimeError`] for loading a module (an upload or a
//! deployment) and [`GuestError`] for running one (instantiation and every guest call).
//!
//! Invariant: messages are written for the user who uploaded the module (HTTP, CLI and UI show
//! them verbatim), so they say what was wrong and what to do, never just "error".

use std::io;
use std::time::Duration;

/// Loading a module failed: it cannot be deployed as it is.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("module is {size} bytes, more than the maximum of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    #[error("wrong component world: {0}")]
    WrongWorld(String),
    #[error("cannot compile the component: {0}")]
    Compile(String),
    #[error("precompiled module cache: {0}")]
    Cache(#[source] io::Error),
}

/// A guest call failed. After `Deadline`, `MemoryLimit` and `Trap` the instance is poisoned
/// (its state may be half-updated): later calls fail with `Trap("instance is poisoned ...")` and
/// the caller instantiates a new one. The other variants leave the instance usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestError {
    #[error("guest call exceeded its deadline of {timeout:?}")]
    Deadline { timeout: Duration },
    #[error("guest exceeded its memory limit of {limit} bytes")]
    MemoryLimit { limit: usize },
    #[error("guest trapped: {0}")]
    Trap(String),
    #[error("guest returned an error: {0}")]
    Failed(String),
    #[error("guest returned invalid output: {0}")]
    InvalidOutput(String),
    #[error("guest output of {size} bytes exceeds the limit of {limit} bytes")]
    OutputTooLarge { size: usize, limit: usize },
    #[error("guest initialization failed: {0}")]
    Init(String),
}
