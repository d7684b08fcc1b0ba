//! Read-only views of an input batch: [`Batch`] and [`Record`] borrow the batch's one `data`
//! buffer and decode a record's spans only when an accessor asks (no copy, no allocation).

use core::str::Utf8Error;

use crate::raw::{self, Headers, InputBatch, InputRecord};

/// One input record, borrowed from its batch.
///
/// ```
/// use runnel_sdk::testing::{Harness, TestRecord};
/// use runnel_sdk::{Config, Error, Output, Record, Transform};
///
/// /// Upper-cases UTF-8 values and tags them with the input offset.
/// struct Upper;
///
/// impl Transform for Upper {
///     fn init(_: &Config) -> Result<Self, Error> {
///         Ok(Upper)
///     }
///
///     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
///         let Some(value) = record.value_str() else { return Ok(()) }; // skip null values
///         let upper = value?.to_uppercase();
///         let source = record.header("source").unwrap_or(b"unknown");
///         out.record()
///             .key(record.key())
///             .value(&upper)
///             .header("source", source)
///             .header("offset", &record.offset().to_string())
///             .send()
///     }
/// }
///
/// let mut harness = Harness::<Upper>::new(&[], &["out"])?;
/// let written = harness.process(&[
///     TestRecord::new().key("k").value("hello").header("source", "web"),
///     TestRecord::new().key("k"),
/// ])?;
/// assert_eq!(written.len(), 1);
/// assert_eq!(written[0].value_str(), Some("HELLO"));
/// assert_eq!(written[0].header("source"), Some(&b"web"[..]));
/// assert_eq!(written[0].header("offset"), Some(&b"0"[..]));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Record<'a> {
    data: &'a [u8],
    raw: &'a InputRecord,
    partition: i32,
}

impl<'a> Record<'a> {
    /// The key; `None` when the key is null.
    #[inline]
    pub fn key(&self) -> Option<&'a [u8]> {
        raw::slice(self.data, self.raw.key)
    }

    /// The value; `None` when the value is null (a tombstone).
    #[inline]
    pub fn value(&self) -> Option<&'a [u8]> {
        raw::slice(self.data, self.raw.value)
    }

    /// The key as UTF-8: `None` when null, `Some(Err(..))` when not valid UTF-8.
    pub fn key_str(&self) -> Option<Result<&'a str, Utf8Error>> {
        self.key().map(core::str::from_utf8)
    }

    /// The value as UTF-8: `None` when null, `Some(Err(..))` when not valid UTF-8.
    pub fn value_str(&self) -> Option<Result<&'a str, Utf8Error>> {
        self.value().map(core::str::from_utf8)
    }

    /// The headers in order, as `(name, value)`; a `None` value is a null header value.
    pub fn headers(&self) -> Headers<'a> {
        Headers::new(raw::slice(self.data, self.raw.headers).unwrap_or(&[]))
    }

    /// The value of the last header with this name (Kafka's `lastHeader`); `None` when there is
    /// no such header or its value is null (use [`Record::headers`] to tell them apart).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers().filter(|(n, _)| *n == name).last().and_then(|(_, v)| v)
    }

    /// Milliseconds since the epoch.
    #[inline]
    pub fn timestamp(&self) -> i64 {
        self.raw.timestamp
    }

    /// The record's offset in its input partition.
    #[inline]
    pub fn offset(&self) -> i64 {
        self.raw.offset
    }

    /// The input partition.
    #[inline]
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The encoded header list as it came from the host (forwarded without decoding).
    pub(crate) fn raw_headers(&self) -> Option<&'a [u8]> {
        raw::slice(self.data, self.raw.headers)
    }
}

impl core::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Record")
            .field("partition", &self.partition)
            .field("offset", &self.offset())
            .field("timestamp", &self.timestamp())
            .field("key", &self.key().map(String::from_utf8_lossy))
            .field("value", &self.value().map(String::from_utf8_lossy))
            .field("headers", &self.headers().collect::<Vec<_>>())
            .finish()
    }
}

/// A batch of consecutive records of one input partition (what [`crate::Transform::process_batch`]
/// receives).
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    raw: &'a InputBatch,
}

impl<'a> Batch<'a> {
    pub(crate) fn new(raw: &'a InputBatch) -> Self {
        Batch { raw }
    }

    /// The input partition.
    pub fn partition(&self) -> i32 {
        self.raw.partition
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.raw.records.len()
    }

    /// Whether the batch has no records.
    pub fn is_empty(&self) -> bool {
        self.raw.records.is_empty()
    }

    /// The size of the batch's shared data buffer (keys, values and headers of all records).
    pub fn data_len(&self) -> usize {
        self.raw.data.len()
    }

    /// The records in offset order.
    pub fn records(&self) -> impl ExactSizeIterator<Item = Record<'a>> + 'a {
        let (data, partition) = (&self.raw.data[..], self.raw.partition);
        self.raw.records.iter().map(move |raw| Record { data, raw, partition })
    }

    /// The record at `index`, if any.
    pub fn get(&self, index: usize) -> Option<Record<'a>> {
        let raw = self.raw.records.get(index)?;
        Some(Record { data: &self.raw.data, raw, partition: self.raw.partition })
    }
}

/// Something that can be written as a key, value or header value: bytes, strings, or an
/// `Option` of them (`None` = null).
///
/// ```
/// use runnel_sdk::Payload;
///
/// assert_eq!("a".payload(), Some(&b"a"[..]));
/// assert_eq!(b"a".payload(), Some(&b"a"[..]));
/// assert_eq!(vec![1u8].payload(), Some(&[1u8][..]));
/// assert_eq!(Some("a").payload(), Some(&b"a"[..]));
/// assert_eq!(None::<&[u8]>.payload(), None);
/// ```
pub trait Payload {
    /// The bytes, or `None` for null.
    fn payload(&self) -> Option<&[u8]>;
}

impl Payload for [u8] {
    fn payload(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl<const N: usize> Payload for [u8; N] {
    fn payload(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl Payload for str {
    fn payload(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }
}

impl Payload for Vec<u8> {
    fn payload(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl Payload for String {
    fn payload(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }
}

impl Payload for std::borrow::Cow<'_, [u8]> {
    fn payload(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl Payload for std::borrow::Cow<'_, str> {
    fn payload(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }
}

impl<T: Payload + ?Sized> Payload for &T {
    fn payload(&self) -> Option<&[u8]> {
        (**self).payload()
    }
}

impl<T: Payload> Payload for Option<T> {
    fn payload(&self) -> Option<&[u8]> {
        self.as_ref().and_then(Payload::payload)
    }
}
