//! Logging from a transform or assignor. In a guest, lines go to the host, which keeps recent
//! lines per transform (HTTP, CLI, UI); natively (tests) they go to stderr and to a buffer that
//! [`crate::testing::take_logs`] reads.
//!
//! ```
//! use runnel_sdk::log;
//!
//! log::info("starting");
//! let skipped = 3;
//! log::warn!("skipped {skipped} records without a value");
//! # #[cfg(not(target_arch = "wasm32"))]
//! assert_eq!(
//!     runnel_sdk::testing::take_logs(),
//!     [(log::Level::Info, "starting".to_string()), (log::Level::Warn, "skipped 3 records without a value".to_string())]
//! );
//! ```

use core::fmt;

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        })
    }
}

/// Logs one line at `level`.
pub fn log(level: Level, message: &str) {
    imp::log(level, message);
}

/// Logs at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Logs at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}

#[doc(hidden)]
pub fn __log_fmt(level: Level, args: fmt::Arguments<'_>) {
    match args.as_str() {
        Some(s) => log(level, s),
        None => log(level, &args.to_string()),
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::__log_fmt($crate::log::Level::$level, ::core::format_args!($($arg)+))
    };
}

/// Logs a formatted line at trace level: `log::trace!("x = {x}")`.
#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log_trace { ($($arg:tt)+) => { $crate::__runnel_log!(Trace, $($arg)+) }; }
/// Logs a formatted line at debug level.
#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log_debug { ($($arg:tt)+) => { $crate::__runnel_log!(Debug, $($arg)+) }; }
/// Logs a formatted line at info level.
#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log_info { ($($arg:tt)+) => { $crate::__runnel_log!(Info, $($arg)+) }; }
/// Logs a formatted line at warn level.
#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log_warn { ($($arg:tt)+) => { $crate::__runnel_log!(Warn, $($arg)+) }; }
/// Logs a formatted line at error level.
#[doc(hidden)]
#[macro_export]
macro_rules! __runnel_log_error { ($($arg:tt)+) => { $crate::__runnel_log!(Error, $($arg)+) }; }

// The macros share the functions' names (`log::info!` and `log::info`): macros and functions
// live in different namespaces.
pub use crate::{
    __runnel_log_debug as debug, __runnel_log_error as error, __runnel_log_info as info, __runnel_log_trace as trace,
    __runnel_log_warn as warn,
};

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::Level;
    use crate::bindings::transform::runnel::transform::logging as wit;

    pub(super) fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => wit::Level::Trace,
            Level::Debug => wit::Level::Debug,
            Level::Info => wit::Level::Info,
            Level::Warn => wit::Level::Warn,
            Level::Error => wit::Level::Error,
        };
        wit::log(level, message);
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod imp {
    use std::cell::RefCell;

    use super::Level;

    /// Lines kept for `testing::take_logs`; bounded so a chatty test cannot grow it forever.
    const CAPTURED_MAX: usize = 10_000;

    thread_local! {
        pub(crate) static CAPTURED: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn log(level: Level, message: &str) {
        eprintln!("[runnel guest {level}] {message}");
        CAPTURED.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() < CAPTURED_MAX {
                c.push((level, message.to_string()));
            }
        });
    }
}
