//! The [`Transform`] trait and the driver that runs it on a batch, shared by the wasm exports
//! and the native test harness (so tests exercise the code the guest runs).

use crate::raw::{InputBatch, OutputRecord};
use crate::{Batch, Config, Error, Output, Record};

/// A data transform: built once per instance from its [`Config`], then called for every record
/// of every input batch. Register it with [`crate::export_transform!`].
///
/// An error from `process` fails the whole batch; the host applies the transform's error
/// policy (by default the transform partition pauses with the message visible to users).
///
/// ```
/// use runnel_sdk::testing::{Harness, TestRecord};
/// use runnel_sdk::{Config, Error, Output, Record, Transform};
///
/// /// Drops records whose value is shorter than `min_len` bytes.
/// struct MinLength {
///     min_len: usize,
/// }
///
/// impl Transform for MinLength {
///     fn init(config: &Config) -> Result<Self, Error> {
///         Ok(MinLength { min_len: config.parse_or("min_len", 1)? })
///     }
///
///     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
///         if record.value().is_some_and(|v| v.len() >= self.min_len) {
///             out.forward(record);
///         }
///         Ok(())
///     }
/// }
///
/// runnel_sdk::export_transform!(MinLength);
///
/// let mut harness = Harness::<MinLength>::new(&[("min_len", "3")], &["out"])?;
/// let written = harness.process(&[TestRecord::new().value("ab"), TestRecord::new().value("abc")])?;
/// assert_eq!(written.len(), 1);
/// assert_eq!(written[0].value_str(), Some("abc"));
/// assert!(Harness::<MinLength>::new(&[("min_len", "x")], &["out"]).is_err());
/// # Ok::<(), Error>(())
/// ```
pub trait Transform: Sized + 'static {
    /// Builds the transform from its parameters; an error fails the deployment's partition with
    /// its message.
    fn init(config: &Config) -> Result<Self, Error>;

    /// Handles one input record, writing zero or more records to `out`.
    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error>;

    /// Handles a whole batch; the default calls [`Transform::process`] for each record after
    /// setting the output's default timestamp to the record's. Override it for per-batch work
    /// (aggregating a batch, one lookup for many records).
    fn process_batch(&mut self, batch: &Batch<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        for record in batch.records() {
            out.set_default_timestamp(record.timestamp());
            self.process(&record, out)?;
        }
        Ok(())
    }
}

/// A transform plus what it keeps between batches.
pub(crate) struct Instance<T> {
    pub(crate) transform: T,
    config: Config,
    scratch: Vec<u8>,
}

impl<T: Transform> Instance<T> {
    pub(crate) fn new(parameters: Vec<(String, String)>, output_topics: Vec<String>) -> Result<Self, Error> {
        let config = Config::new(parameters, output_topics);
        let transform = T::init(&config)?;
        Ok(Instance { transform, config, scratch: Vec::new() })
    }

    pub(crate) fn process(&mut self, batch: &InputBatch) -> Result<(Vec<u8>, Vec<OutputRecord>), Error> {
        // Most transforms write about as much as they read (copy, re-key, redact): reserving
        // the input size avoids regrowing the buffer; the excess of a filter is short-lived.
        let mut out =
            Output::new(self.config.output_topics(), &mut self.scratch, batch.data.len(), batch.records.len());
        self.transform.process_batch(&Batch::new(batch), &mut out)?;
        Ok(out.finish())
    }
}
