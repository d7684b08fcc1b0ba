//! The [`Validator`] trait: a check that runs on the partition leader before a produced batch is
//! appended (the `validator` world of `sdk/wit/runnel.wit`), and the driver shared by the wasm
//! export and the native [`crate::testing::ValidatorHarness`].

use crate::raw::InputBatch;
use crate::{Batch, Config, Error, Record};

/// Record errors a [`Rejection`] keeps at most (the rest are counted in its message): the
/// producer gets one `record_errors` entry per kept record.
pub const RECORD_ERRORS_MAX: usize = 100;

/// A produce-path validator: built once per instance from its [`Config`] (parameters only; a
/// validator has no output topics), then called for every batch produced to its topic. Register
/// it with [`crate::export_validator!`].
///
/// The broker keeps several instances and calls any of them, so a validator should not rely on
/// state kept between batches.
///
/// ```
/// use runnel_sdk::testing::{TestRecord, ValidatorHarness};
/// use runnel_sdk::{Config, Error, Record, Validator};
///
/// /// Refuses records without a key.
/// struct KeyRequired;
///
/// impl Validator for KeyRequired {
///     fn init(_: &Config) -> Result<Self, Error> {
///         Ok(KeyRequired)
///     }
///
///     fn validate(&mut self, record: &Record<'_>) -> Result<(), Error> {
///         record.key().map(|_| ()).ok_or_else(|| Error::new("a key is required"))
///     }
/// }
///
/// runnel_sdk::export_validator!(KeyRequired);
///
/// let mut harness = ValidatorHarness::<KeyRequired>::new(&[])?;
/// assert!(harness.validate(&[TestRecord::new().key("k").value("v")]).is_ok());
/// let rejection = harness.validate(&[TestRecord::new().key("k"), TestRecord::new().value("v")]).unwrap_err();
/// assert_eq!(rejection.records[0].index, 1);
/// assert!(rejection.message.contains("a key is required"));
/// # Ok::<(), Error>(())
/// ```
pub trait Validator: Sized + 'static {
    /// Builds the validator from its parameters; an error fails the instance (the broker then
    /// applies the validator's failure policy to the batch).
    fn init(config: &Config) -> Result<Self, Error>;

    /// Checks one record; an error rejects it, and with it the whole batch.
    fn validate(&mut self, record: &Record<'_>) -> Result<(), Error>;

    /// Checks a whole batch; the default calls [`Validator::validate`] for every record and
    /// rejects the batch naming each record at fault (at most [`RECORD_ERRORS_MAX`]). Override
    /// it for checks across records (no duplicate keys within a batch, a total).
    fn validate_batch(&mut self, batch: &Batch<'_>) -> Result<(), Rejection> {
        each_record(self, batch)
    }
}

/// The default [`Validator::validate_batch`]: every record through [`Validator::validate`], the
/// batch rejected naming each record at fault (at most [`RECORD_ERRORS_MAX`]). For a validator
/// that overrides `validate_batch` to treat some batches apart and the rest record by record.
pub fn each_record<V: Validator>(validator: &mut V, batch: &Batch<'_>) -> Result<(), Rejection> {
    let mut rejection = Rejection::default();
    let mut failed = 0usize;
    for (index, record) in batch.records().enumerate() {
        if let Err(e) = validator.validate(&record) {
            failed += 1;
            if rejection.records.len() < RECORD_ERRORS_MAX {
                rejection.records.push(RecordError { index: index as u32, message: e.into_message() });
            }
        }
    }
    let Some(first) = rejection.records.first() else { return Ok(()) };
    rejection.message = if failed == 1 {
        format!("record {}: {}", first.index, first.message)
    } else {
        format!("record {}: {} (and {} more records refused)", first.index, first.message, failed - 1)
    };
    Err(rejection)
}

/// Why a batch is refused: the producer's error message, and the records at fault.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rejection {
    pub message: String,
    pub records: Vec<RecordError>,
}

impl Rejection {
    /// A rejection of the batch as a whole.
    pub fn new(message: impl core::fmt::Display) -> Self {
        Rejection { message: message.to_string(), records: Vec::new() }
    }
}

impl From<Error> for Rejection {
    fn from(error: Error) -> Self {
        Rejection::new(error.message())
    }
}

/// One record at fault: its index in the batch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub index: u32,
    pub message: String,
}

/// A validator plus its configuration.
pub(crate) struct ValidatorInstance<V> {
    pub(crate) validator: V,
}

impl<V: Validator> ValidatorInstance<V> {
    pub(crate) fn new(parameters: Vec<(String, String)>) -> Result<Self, Error> {
        let config = Config::new(parameters, Vec::new());
        Ok(ValidatorInstance { validator: V::init(&config)? })
    }

    pub(crate) fn validate(&mut self, batch: &InputBatch) -> Result<(), Rejection> {
        self.validator.validate_batch(&Batch::new(batch))
    }
}
