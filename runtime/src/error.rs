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
    #[error(
        "an instance of this component would need about {estimate} bytes of host memory outside its \
         memories and tables, more than the {max} allowed ({detail}): declare fewer globals and \
         functions, or instantiate its modules fewer times"
    )]
    InstanceTooLarge { estimate: u64, max: u64, detail: String },
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

/// Longest guest-written message kept (an error a guest returns, its init failure): longer ones
/// are cut, so a guest cannot make the host log, store or copy into every dead letter a
/// message as large as its memory.
pub const GUEST_MESSAGE_BYTES_MAX: usize = 1024;

impl GuestError {
    /// [`GuestError::Failed`] with the guest's message cut to [`GUEST_MESSAGE_BYTES_MAX`].
    pub fn failed(message: String) -> GuestError {
        GuestError::Failed(bounded(message))
    }

    /// [`GuestError::Init`] with the guest's message cut to [`GUEST_MESSAGE_BYTES_MAX`].
    pub fn init(message: String) -> GuestError {
        GuestError::Init(bounded(message))
    }
}

/// `message` cut at a character boundary to [`GUEST_MESSAGE_BYTES_MAX`] bytes, saying how long
/// it was.
pub fn bounded(mut message: String) -> String {
    let total = message.len();
    if cut_at_char_boundary(&mut message, GUEST_MESSAGE_BYTES_MAX) {
        message.push_str(&format!("… ({total} bytes, cut)"));
    }
    message
}

/// Cuts `message` to at most `max` bytes without splitting a character; whether it was cut.
pub(crate) fn cut_at_char_boundary(message: &mut String, max: usize) -> bool {
    if message.len() <= max {
        return false;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_message_is_cut_at_a_character_boundary() {
        assert_eq!(bounded("short".into()), "short");
        let long = "é".repeat(GUEST_MESSAGE_BYTES_MAX);
        let cut = bounded(long);
        assert!(cut.starts_with(&"é".repeat(GUEST_MESSAGE_BYTES_MAX / 2)), "{cut}");
        assert!(cut.ends_with(&format!("… ({} bytes, cut)", 2 * GUEST_MESSAGE_BYTES_MAX)), "{cut}");
        assert!(cut.len() < GUEST_MESSAGE_BYTES_MAX + 40);
    }
}
