//! The one error type of the SDK: a message for the host (it becomes the deployment's visible
//! error or the init failure), convertible from any standard error with `?`.

use core::fmt;

/// Shorthand for results whose error is the SDK's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error returned to the host: a message a user can act on.
///
/// Any `std::error::Error` converts with `?` (parse errors, UTF-8 errors, ...); other messages
/// go through [`Error::new`].
///
/// ```
/// use runnel_sdk::Error;
///
/// fn parse_limit(text: &str) -> Result<u32, Error> {
///     let limit: u32 = text.parse()?; // ParseIntError converts into Error
///     if limit == 0 {
///         return Err(Error::new("limit must be positive"));
///     }
///     Ok(limit)
/// }
///
/// assert_eq!(parse_limit("10").unwrap(), 10);
/// assert_eq!(parse_limit("0").unwrap_err().message(), "limit must be positive");
/// assert!(parse_limit("x").unwrap_err().message().contains("invalid digit"));
/// let err = parse_limit("x").unwrap_err().context("parameter `limit`");
/// assert!(err.message().starts_with("parameter `limit`: "));
/// ```
// No `impl std::error::Error`: it would collide with the blanket `From<E: std::error::Error>`
// (the same trade-off as `anyhow::Error`).
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

impl Error {
    /// An error with this message (anything `Display`, including `format_args!`).
    pub fn new(message: impl fmt::Display) -> Self {
        Error { message: message.to_string() }
    }

    /// The message the host shows.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with what was being done: `"{context}: {message}"`.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Error { message: format!("{context}: {}", self.message) }
    }

    /// The message, for the WIT boundary (`result<_, string>`).
    pub fn into_message(self) -> String {
        self.message
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        Error::new(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?})", self.message)
    }
}
