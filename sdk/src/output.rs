//! Where a transform writes: records append their bytes to the batch's one output `data`
//! buffer and push a fixed-size descriptor; nothing is allocated per record.

use crate::raw::{self, OutputRecord, Span, NULL};
use crate::{Error, Payload, Record};

/// The output of one batch (see [`crate::Transform::process`]).
///
/// Records go to output topic 0 unless a topic is named; a topic name must be one of the
/// deployment's output topics ([`Output::topics`]). By default a written record keeps the
/// timestamp of the input record being processed and is partitioned by key by the host.
///
/// ```
/// use runnel_sdk::testing::{Harness, TestRecord};
/// use runnel_sdk::{Config, Error, Output, Record, Transform};
///
/// /// Copies every record to `all`, and records with an `alert` header to `alerts` too.
/// struct Fanout;
///
/// impl Transform for Fanout {
///     fn init(_: &Config) -> Result<Self, Error> {
///         Ok(Fanout)
///     }
///
///     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
///         out.write(record.key(), record.value());
///         if record.header("alert").is_some() {
///             out.record().topic("alerts").key(record.key()).value(record.value()).partition(0).send()?;
///         }
///         Ok(())
///     }
/// }
///
/// let mut harness = Harness::<Fanout>::new(&[], &["all", "alerts"])?;
/// let written = harness.process(&[TestRecord::new().value("v").header("alert", "1").timestamp(42)])?;
/// assert_eq!(written.len(), 2);
/// assert_eq!((written[0].topic.as_str(), written[0].partition), ("all", None));
/// assert_eq!((written[1].topic.as_str(), written[1].partition), ("alerts", Some(0)));
/// assert_eq!(written[1].timestamp, Some(42));
///
/// // Naming a topic that is not an output of the deployment is an error.
/// let mut harness = Harness::<Fanout>::new(&[], &["all"])?;
/// let err = harness.process(&[TestRecord::new().value("v").header("alert", "1")]).unwrap_err();
/// assert!(err.message().contains("alerts"));
/// # Ok::<(), Error>(())
/// ```
pub struct Output<'a> {
    topics: &'a [String],
    data: Vec<u8>,
    records: Vec<OutputRecord>,
    /// Header encoding of the record being built (reused, so no allocation per record).
    scratch: &'a mut Vec<u8>,
    default_timestamp: i64,
}

impl<'a> Output<'a> {
    pub(crate) fn new(topics: &'a [String], scratch: &'a mut Vec<u8>, data_capacity: usize, records: usize) -> Self {
        Output {
            topics,
            data: Vec::with_capacity(data_capacity),
            records: Vec::with_capacity(records),
            scratch,
            default_timestamp: -1,
        }
    }

    pub(crate) fn finish(self) -> (Vec<u8>, Vec<OutputRecord>) {
        (self.data, self.records)
    }

    /// Writes a record with this key and value to output topic 0.
    pub fn write(&mut self, key: impl Payload, value: impl Payload) {
        self.push(0, key.payload(), value.payload());
    }

    /// Writes a record with this key and value to the named output topic; an error when the
    /// deployment has no such output topic.
    pub fn write_to(&mut self, topic: &str, key: impl Payload, value: impl Payload) -> Result<(), Error> {
        let index = self.topic_index(topic).ok_or_else(|| unknown_topic(topic, self.topics))?;
        self.push(index, key.payload(), value.payload());
        Ok(())
    }

    /// Copies a record unchanged (key, value, headers, timestamp) to output topic 0.
    pub fn forward(&mut self, record: &Record<'_>) {
        self.forward_index(0, record);
    }

    /// Copies a record unchanged (key, value, headers, timestamp) to the named output topic.
    pub fn forward_to(&mut self, topic: &str, record: &Record<'_>) -> Result<(), Error> {
        let index = self.topic_index(topic).ok_or_else(|| unknown_topic(topic, self.topics))?;
        self.forward_index(index, record);
        Ok(())
    }

    fn forward_index(&mut self, topic: u32, record: &Record<'_>) {
        let key = raw::append(&mut self.data, record.key());
        let value = raw::append(&mut self.data, record.value());
        // The encoding is the same on both sides, so headers are copied without decoding.
        let headers = match record.raw_headers() {
            Some(h) if !h.is_empty() => raw::append(&mut self.data, Some(h)),
            _ => NULL,
        };
        self.records.push(OutputRecord { topic, partition: -1, timestamp: record.timestamp(), key, value, headers });
    }

    /// Starts a record with headers, an explicit partition or timestamp; see [`RecordBuilder`].
    pub fn record(&mut self) -> RecordBuilder<'_, 'a> {
        let start = self.data.len();
        let timestamp = self.default_timestamp;
        RecordBuilder {
            out: self,
            start,
            topic: Ok(0),
            partition: -1,
            timestamp,
            key: NULL,
            value: NULL,
            header_count: 0,
            sent: false,
        }
    }

    /// The output topic names (index = position).
    pub fn topics(&self) -> &[String] {
        self.topics
    }

    /// The index of an output topic by name.
    pub fn topic_index(&self, name: &str) -> Option<u32> {
        self.topics.iter().position(|t| t == name).and_then(|i| u32::try_from(i).ok())
    }

    /// The number of records written so far in this batch.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was written yet in this batch.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of keys, values and headers written so far in this batch (the host caps a batch's
    /// output size, 16 MiB by default).
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// The timestamp records get when none is set: the input record's when called from
    /// [`crate::Transform::process`]. Implementations of `process_batch` set it per record;
    /// -1 means the time of the append.
    pub fn set_default_timestamp(&mut self, timestamp: i64) {
        self.default_timestamp = timestamp;
    }

    fn push(&mut self, topic: u32, key: Option<&[u8]>, value: Option<&[u8]>) {
        let key = raw::append(&mut self.data, key);
        let value = raw::append(&mut self.data, value);
        let timestamp = self.default_timestamp;
        self.records.push(OutputRecord { topic, partition: -1, timestamp, key, value, headers: NULL });
    }

    /// Appends a descriptor as is, unchecked: for containment tests of the host only.
    #[doc(hidden)]
    pub fn __write_raw(&mut self, topic: u32, partition: i32, key: Option<&[u8]>, value: Option<&[u8]>) {
        let key = raw::append(&mut self.data, key);
        let value = raw::append(&mut self.data, value);
        self.records.push(OutputRecord { topic, partition, timestamp: -1, key, value, headers: NULL });
    }
}

fn unknown_topic(name: &str, topics: &[String]) -> Error {
    Error::new(format_args!("`{name}` is not an output topic of this transform (outputs: {})", topics.join(", ")))
}

/// A record being written: set what differs from the defaults, then [`send`](Self::send).
///
/// Defaults: output topic 0, null key and value, no headers, partition chosen by the host (by
/// key), the input record's timestamp. A builder dropped without `send` writes nothing.
#[must_use = "a record is written only by `send()`"]
pub struct RecordBuilder<'o, 'a> {
    out: &'o mut Output<'a>,
    /// `data` length before this record: everything after it is dropped if the record is not sent.
    start: usize,
    topic: Result<u32, Error>,
    partition: i32,
    timestamp: i64,
    key: Span,
    value: Span,
    header_count: u32,
    sent: bool,
}

impl RecordBuilder<'_, '_> {
    /// The output topic by name (an unknown name makes `send` fail).
    pub fn topic(mut self, name: &str) -> Self {
        self.topic = self.out.topic_index(name).ok_or_else(|| unknown_topic(name, self.out.topics));
        self
    }

    /// The output topic by index (an index past the last output topic makes `send` fail).
    pub fn topic_index(mut self, index: u32) -> Self {
        self.topic = if (index as usize) < self.out.topics.len() {
            Ok(index)
        } else {
            Err(Error::new(format_args!(
                "output topic index {index} out of range ({} output topics)",
                self.out.topics.len()
            )))
        };
        self
    }

    /// Sets the topic index without checking it: for containment tests of the host only.
    #[doc(hidden)]
    pub fn __topic_index_unchecked(mut self, index: u32) -> Self {
        self.topic = Ok(index);
        self
    }

    /// The key (`None` = null).
    pub fn key(mut self, key: impl Payload) -> Self {
        self.key = raw::append(&mut self.out.data, key.payload());
        self
    }

    /// The value (`None` = null, a tombstone on compacted topics).
    pub fn value(mut self, value: impl Payload) -> Self {
        self.value = raw::append(&mut self.out.data, value.payload());
        self
    }

    /// Adds a header (`None` value = null); headers keep their order and names may repeat.
    pub fn header(mut self, name: &str, value: impl Payload) -> Self {
        if self.header_count == 0 {
            self.out.scratch.clear();
        }
        raw::encode_header(self.out.scratch, name, value.payload());
        self.header_count += 1;
        self
    }

    /// Copies all headers of `record` (as encoded, without decoding them); combine with
    /// [`header`](Self::header) to add more.
    ///
    /// ```
    /// # use runnel_sdk::testing::{Harness, TestRecord};
    /// # use runnel_sdk::{Config, Error, Output, Record, Transform};
    /// struct Tag;
    /// impl Transform for Tag {
    ///     fn init(_: &Config) -> Result<Self, Error> { Ok(Tag) }
    ///     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
    ///         out.record().value(record.value()).headers_from(record).header("seen", "1").send()
    ///     }
    /// }
    /// let mut harness = Harness::<Tag>::new(&[], &["out"])?;
    /// let written = harness.process(&[TestRecord::new().value("v").header("a", "x")])?;
    /// assert_eq!(written[0].headers, [("a".into(), Some(b"x".to_vec())), ("seen".into(), Some(b"1".to_vec()))]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn headers_from(mut self, record: &Record<'_>) -> Self {
        let Some(encoded) = record.raw_headers() else { return self };
        let Some((count, body)) = encoded.split_first_chunk::<4>() else { return self };
        let count = u32::from_le_bytes(*count);
        if count == 0 {
            return self;
        }
        if self.header_count == 0 {
            self.out.scratch.clear();
        }
        self.out.scratch.extend_from_slice(body);
        self.header_count += count;
        self
    }

    /// An explicit output partition (the host rejects one the topic does not have).
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Milliseconds since the epoch; -1 = the time of the append.
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Writes the record; an error (and nothing written) when the topic is not an output topic.
    pub fn send(mut self) -> Result<(), Error> {
        let topic = core::mem::replace(&mut self.topic, Ok(0))?;
        let headers = if self.header_count == 0 {
            NULL
        } else {
            let out = &mut *self.out;
            let offset = u32::try_from(out.data.len()).unwrap_or(u32::MAX);
            out.data.extend_from_slice(&self.header_count.to_le_bytes());
            out.data.extend_from_slice(out.scratch);
            Span { offset, len: i32::try_from(out.scratch.len() + 4).unwrap_or(i32::MAX) }
        };
        self.out.records.push(OutputRecord {
            topic,
            partition: self.partition,
            timestamp: self.timestamp,
            key: self.key,
            value: self.value,
            headers,
        });
        self.sent = true;
        Ok(())
    }
}

impl Drop for RecordBuilder<'_, '_> {
    fn drop(&mut self) {
        if !self.sent {
            self.out.data.truncate(self.start);
        }
    }
}
