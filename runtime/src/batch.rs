//! Plain-data batches that cross the host/guest boundary (`types` in `sdk/wit/runnel.wit`):
//! one flat byte buffer plus fixed-size descriptors with spans into it.
//!
//! Invariants: an [`InputBatch`] built with [`InputBatch::push`] is always well formed (every span
//! inside `data`, headers encoded as the WIT describes). An [`OutputBatch`] handed to the broker
//! has passed [`validate_output`]: every span is inside `data`, every header list is well formed
//! and every topic index names an output topic, so its accessors never fail on it.
//!
//! The types derive the component-model lowering/lifting traits themselves (instead of using the
//! structs `bindgen!` generates) so that a batch is copied exactly once into guest memory and
//! once out of it; the broker still never names a wasmtime type.

use std::mem::MaybeUninit;

use wasmtime::component::__internal::{InterfaceType, LiftContext, LowerContext};
use wasmtime::component::{ComponentType, Lift, Lower};

/// A byte range of a batch's `data`; `len == -1` is null (a null key or value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ComponentType, Lower, Lift)]
#[component(record)]
pub struct Span {
    pub offset: u32,
    pub len: i32,
}

impl Span {
    /// The null span (a null key or value).
    pub const NULL: Span = Span { offset: 0, len: -1 };

    pub fn is_null(&self) -> bool {
        self.len == -1
    }
}

/// One input record; spans point into [`InputBatch::data`].
///
/// `Lower` is written by hand (the type is checked by the derived `ComponentType`): a batch's
/// records are stored into guest memory in one pass over one bounds-checked slice, where the
/// derived code looked up the memory and the field layout again for every field of every
/// record (a quarter of a validator call's time on 100-byte records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ComponentType)]
#[component(record)]
pub struct InputRecord {
    pub offset: i64,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    pub key: Span,
    pub value: Span,
    pub headers: Span,
}

/// Bytes of an `input-record` in the canonical ABI: two s64, then three `span`s of u32 + s32;
/// 8-aligned, no padding.
const INPUT_RECORD_BYTES: usize = 40;
const _: () = assert!(<InputRecord as ComponentType>::SIZE32 == INPUT_RECORD_BYTES);

impl InputRecord {
    /// The record in the canonical ABI's layout (little-endian).
    #[inline]
    fn store(&self, out: &mut [u8; INPUT_RECORD_BYTES]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..16].copy_from_slice(&self.timestamp.to_le_bytes());
        for (at, span) in [(16, self.key), (24, self.value), (32, self.headers)] {
            out[at..at + 4].copy_from_slice(&span.offset.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&span.len.to_le_bytes());
        }
    }
}

// SAFETY: `store` writes exactly the canonical ABI layout of `input-record` (see
// INPUT_RECORD_BYTES, checked against the derived ABI above), and the derived `typecheck` only
// accepts that WIT record, so the guest reads what the host wrote.
unsafe impl Lower for InputRecord {
    fn linear_lower_to_flat<T>(
        &self,
        _cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        _dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        // The WIT passes input records only inside `input-batch.records`, a list, which is
        // always lowered into memory.
        Err(wasmtime::format_err!("an input record is only passed inside a list"))
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        self.store(cx.get::<INPUT_RECORD_BYTES>(offset));
        Ok(())
    }

    fn linear_store_list_to_memory<T>(
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
        items: &[Self],
    ) -> wasmtime::Result<()> {
        let bytes = items.len() * INPUT_RECORD_BYTES;
        let out = offset
            .checked_add(bytes)
            .and_then(|end| cx.as_slice_mut().get_mut(offset..end))
            .ok_or_else(|| wasmtime::format_err!("the input records do not fit the guest's memory"))?;
        for (out, record) in out.chunks_exact_mut(INPUT_RECORD_BYTES).zip(items) {
            record.store(out.try_into().expect("chunks_exact_mut gives INPUT_RECORD_BYTES"));
        }
        Ok(())
    }
}

/// Consecutive records of one input partition, handed to the guest in one call. Reuse one
/// batch across calls ([`InputBatch::clear`]) to keep its buffers.
#[derive(Debug, Clone, PartialEq, Eq, ComponentType, Lower)]
#[component(record)]
pub struct InputBatch {
    pub partition: i32,
    pub data: Vec<u8>,
    pub records: Vec<InputRecord>,
}

impl InputBatch {
    pub fn new(partition: i32) -> Self {
        InputBatch { partition, data: Vec::new(), records: Vec::new() }
    }

    /// Appends a record, copying its bytes into `data`.
    ///
    /// Panics if `data` would exceed `i32::MAX` bytes: spans cannot address more, and the
    /// broker's fetch limits keep batches far below that (a programmer error, not input).
    pub fn push(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let key = self.append(key);
        let value = self.append(value);
        let headers = if headers.is_empty() {
            Span { offset: self.position(), len: 0 }
        } else {
            let start = self.data.len();
            encode_headers(&mut self.data, headers);
            self.span_from(start)
        };
        self.records.push(InputRecord { offset, timestamp, key, value, headers });
    }

    /// Empties the batch, keeping its allocations, and sets its partition.
    pub fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn append(&mut self, bytes: Option<&[u8]>) -> Span {
        match bytes {
            None => Span::NULL,
            Some(bytes) => {
                let start = self.data.len();
                self.data.extend_from_slice(bytes);
                self.span_from(start)
            }
        }
    }

    fn position(&self) -> u32 {
        // i32::MAX bounds every span end (see `span_from`), so this cannot truncate.
        self.data.len() as u32
    }

    fn span_from(&self, start: usize) -> Span {
        let end = self.data.len();
        assert!(end <= i32::MAX as usize, "input batch data exceeds i32::MAX bytes");
        Span { offset: start as u32, len: (end - start) as i32 }
    }
}

/// One output record; spans point into [`OutputBatch::data`]. `topic` indexes the output
/// topics given at instantiation; `partition` and `timestamp` are -1 when the guest left them
/// to the broker.
///
/// `Lift` is written by hand, like [`InputRecord`]'s `Lower`: each record is read from its 40
/// bytes at once instead of field by field through the layout tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ComponentType)]
#[component(record)]
pub struct OutputRecord {
    pub topic: u32,
    pub partition: i32,
    pub timestamp: i64,
    pub key: Span,
    pub value: Span,
    pub headers: Span,
}

/// Bytes of an `output-record` in the canonical ABI: u32, s32, s64, then three `span`s;
/// 8-aligned, no padding.
const OUTPUT_RECORD_BYTES: usize = 40;
const _: () = assert!(<OutputRecord as ComponentType>::SIZE32 == OUTPUT_RECORD_BYTES);

// SAFETY: `linear_lift_from_memory` reads exactly the canonical ABI layout of `output-record`
// (see OUTPUT_RECORD_BYTES, checked against the derived ABI above), and the derived `typecheck`
// only accepts that WIT record. Every bit pattern is a valid value of each field.
unsafe impl Lift for OutputRecord {
    fn linear_lift_from_flat(
        _cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        _src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        // The WIT returns output records only inside `output-batch.records`, a list, which is
        // always lifted from memory.
        Err(wasmtime::format_err!("an output record is only returned inside a list"))
    }

    fn linear_lift_from_memory(_cx: &mut LiftContext<'_>, _ty: InterfaceType, bytes: &[u8]) -> wasmtime::Result<Self> {
        let bytes: &[u8; OUTPUT_RECORD_BYTES] =
            bytes.try_into().map_err(|_| wasmtime::format_err!("an output record is not 40 bytes"))?;
        let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let span_at = |at: usize| Span { offset: u32_at(at), len: u32_at(at + 4) as i32 };
        let mut timestamp = [0u8; 8];
        timestamp.copy_from_slice(&bytes[8..16]);
        Ok(OutputRecord {
            topic: u32_at(0),
            partition: u32_at(4) as i32,
            timestamp: i64::from_le_bytes(timestamp),
            key: span_at(16),
            value: span_at(24),
            headers: span_at(32),
        })
    }
}

/// What one `process` call produced (validated: see the module invariant).
#[derive(Debug, Clone, PartialEq, Eq, Default, ComponentType, Lift)]
#[component(record)]
pub struct OutputBatch {
    pub data: Vec<u8>,
    pub records: Vec<OutputRecord>,
}

impl OutputBatch {
    pub fn key(&self, record: &OutputRecord) -> Option<&[u8]> {
        slice(&self.data, record.key).ok().flatten()
    }

    pub fn value(&self, record: &OutputRecord) -> Option<&[u8]> {
        slice(&self.data, record.value).ok().flatten()
    }

    /// The record's headers in order, as (name, value); a null value is `None`.
    pub fn headers(&self, record: &OutputRecord) -> Headers<'_> {
        headers_of(&self.data, record.headers)
    }
}

impl InputBatch {
    pub fn key(&self, record: &InputRecord) -> Option<&[u8]> {
        slice(&self.data, record.key).ok().flatten()
    }

    pub fn value(&self, record: &InputRecord) -> Option<&[u8]> {
        slice(&self.data, record.value).ok().flatten()
    }

    /// The record's headers in order, as (name, value); a null value is `None`.
    pub fn headers(&self, record: &InputRecord) -> Headers<'_> {
        headers_of(&self.data, record.headers)
    }
}

fn headers_of(data: &[u8], span: Span) -> Headers<'_> {
    match slice(data, span) {
        Ok(Some(bytes)) if !bytes.is_empty() => Headers::new(bytes),
        _ => Headers::EMPTY,
    }
}

/// Iterator over an encoded header list (see [`OutputBatch::headers`]). Stops at the first
/// malformed entry, which a validated batch does not have.
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Headers<'a> {
    const EMPTY: Headers<'static> = Headers { rest: &[], remaining: 0 };

    fn new(bytes: &'a [u8]) -> Self {
        match take_u32(&mut &bytes[..]) {
            Some(count) => Headers { rest: &bytes[4..], remaining: count },
            None => Headers::EMPTY,
        }
    }

    fn next_header(&mut self) -> Result<(&'a str, Option<&'a [u8]>), String> {
        let rest = &mut self.rest;
        let key_len = take_u32(rest).ok_or("truncated header key length")? as usize;
        let key = take(rest, key_len).ok_or("header key extends past its span")?;
        let key = std::str::from_utf8(key).map_err(|_| "header key is not UTF-8".to_string())?;
        let value_len = take_u32(rest).ok_or("truncated header value length")? as i32;
        let value = match value_len {
            -1 => None,
            len if len < -1 => return Err(format!("header value length {len} (only -1 means null)")),
            len => Some(take(rest, len as usize).ok_or("header value extends past its span")?),
        };
        Ok((key, value))
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        match self.next_header() {
            Ok(header) => {
                self.remaining -= 1;
                Some(header)
            }
            Err(_) => {
                self.remaining = 0;
                None
            }
        }
    }
}

fn take<'a>(bytes: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    if bytes.len() < len {
        return None;
    }
    let (head, tail) = bytes.split_at(len);
    *bytes = tail;
    Some(head)
}

fn take_u32(bytes: &mut &[u8]) -> Option<u32> {
    let head = take(bytes, 4)?;
    Some(u32::from_le_bytes([head[0], head[1], head[2], head[3]]))
}

/// Appends the WIT header encoding: u32 LE count, then per header u32 LE key length, key, s32
/// LE value length (-1 = null), value.
pub(crate) fn encode_headers(out: &mut Vec<u8>, headers: &[(&str, Option<&[u8]>)]) {
    out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
    for (key, value) in headers {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        match value {
            None => out.extend_from_slice(&(-1i32).to_le_bytes()),
            Some(value) => {
                out.extend_from_slice(&(value.len() as i32).to_le_bytes());
                out.extend_from_slice(value);
            }
        }
    }
}

/// The bytes a span names: `Ok(None)` for null, `Err` when it is out of bounds or its length
/// is below -1.
fn slice(data: &[u8], span: Span) -> Result<Option<&[u8]>, String> {
    if span.len == -1 {
        return Ok(None);
    }
    if span.len < -1 {
        return Err(format!("span length {} (only -1 means null)", span.len));
    }
    let start = span.offset as usize;
    let end = start + span.len as usize;
    data.get(start..end)
        .map(Some)
        .ok_or_else(|| format!("span {}..{end} is outside the {} data bytes", span.offset, data.len()))
}

/// What one output record counts against the output limit besides the bytes its spans name
/// (about a record's framing in a batch): a list of empty records is not free either.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 16;

/// Checks a guest's output against the contract (see the module invariant); the message names
/// the offending record so a user can find the bug in their transform. `bytes_max` bounds the
/// bytes the records name, counted per record (spans may overlap: one value sent to several
/// topics is fine), plus [`RECORD_OVERHEAD_BYTES`] each: the host copies each record's bytes,
/// so `data` alone does not bound its work.
pub(crate) fn validate_output(batch: &OutputBatch, output_topics: usize, bytes_max: usize) -> Result<(), String> {
    let mut named = 0usize;
    for record in &batch.records {
        let len = |span: Span| usize::try_from(span.len).unwrap_or(0);
        named = named
            .saturating_add(RECORD_OVERHEAD_BYTES)
            .saturating_add(len(record.key))
            .saturating_add(len(record.value))
            .saturating_add(len(record.headers));
    }
    if named > bytes_max {
        return Err(format!(
            "{} output records name {named} bytes (keys, values and headers, {RECORD_OVERHEAD_BYTES} more per \
             record), above the output limit of {bytes_max}",
            batch.records.len()
        ));
    }
    for (index, record) in batch.records.iter().enumerate() {
        let context = |what: &str, message: String| format!("output record {index}: {what}: {message}");
        if record.topic as usize >= output_topics {
            return Err(format!(
                "output record {index}: topic index {} but the transform has {output_topics} output topic(s)",
                record.topic
            ));
        }
        if record.partition < -1 {
            return Err(format!(
                "output record {index}: partition {} (use -1 to let the broker choose)",
                record.partition
            ));
        }
        if record.timestamp < -1 {
            return Err(format!("output record {index}: timestamp {} (use -1 for the append time)", record.timestamp));
        }
        slice(&batch.data, record.key).map_err(|m| context("key", m))?;
        slice(&batch.data, record.value).map_err(|m| context("value", m))?;
        if let Some(bytes) = slice(&batch.data, record.headers).map_err(|m| context("headers", m))? {
            validate_headers(bytes).map_err(|m| context("headers", m))?;
        }
    }
    Ok(())
}

fn validate_headers(bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut rest = bytes;
    let count = take_u32(&mut rest).ok_or("truncated header count")?;
    let mut headers = Headers { rest, remaining: count };
    for _ in 0..count {
        headers.next_header()?;
    }
    if !headers.rest.is_empty() {
        return Err(format!("{} bytes after the last of {count} header(s)", headers.rest.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(data: Vec<u8>, record: OutputRecord) -> OutputBatch {
        OutputBatch { data, records: vec![record] }
    }

    fn record(key: Span, value: Span, headers: Span) -> OutputRecord {
        OutputRecord { topic: 0, partition: -1, timestamp: -1, key, value, headers }
    }

    /// A pushed input record's spans and header encoding read back as what was pushed.
    #[test]
    fn input_push_round_trips_through_output_accessors() {
        let mut batch = InputBatch::new(3);
        batch.push(7, 1000, Some(b"k"), None, &[("h", Some(b"x")), ("n", None)]);
        batch.push(8, 1001, None, Some(b""), &[]);
        assert_eq!(batch.len(), 2);
        // The same layout is valid output (the identity transform relies on that).
        let out = OutputBatch {
            data: batch.data.clone(),
            records: batch
                .records
                .iter()
                .map(|r| OutputRecord {
                    topic: 0,
                    partition: -1,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                })
                .collect(),
        };
        validate_output(&out, 1, usize::MAX).unwrap();
        let (a, b) = (&out.records[0], &out.records[1]);
        assert_eq!(out.key(a), Some(&b"k"[..]));
        assert_eq!(out.value(a), None);
        assert_eq!(out.headers(a).collect::<Vec<_>>(), vec![("h", Some(&b"x"[..])), ("n", None)]);
        assert_eq!(out.key(b), None);
        assert_eq!(out.value(b), Some(&b""[..]));
        assert_eq!(out.headers(b).count(), 0);
        batch.clear();
        assert!(batch.is_empty() && batch.data.is_empty());
    }

    /// The bytes records name are bounded, overlaps counted per record: a few bytes of data
    /// named by a million records cannot make the host copy a million times that.
    #[test]
    fn records_naming_the_same_bytes_count_them_each_time() {
        let all = Span { offset: 0, len: 1000 };
        let many = OutputBatch { data: vec![0; 1000], records: vec![record(Span::NULL, all, Span::NULL); 100] };
        let limit = 100 * (1000 + RECORD_OVERHEAD_BYTES);
        validate_output(&many, 1, limit).expect("exactly at the limit");
        let err = validate_output(&many, 1, limit - 1).unwrap_err();
        assert!(err.contains("100 output records name 101600 bytes"), "{err}");
        let empty = OutputBatch { data: Vec::new(), records: vec![record(Span::NULL, Span::NULL, Span::NULL); 10] };
        assert!(validate_output(&empty, 1, 10 * RECORD_OVERHEAD_BYTES - 1).is_err(), "empty records are not free");
    }

    /// Output validation rejects every kind of malformed record with a message naming it.
    #[test]
    fn validate_output_rejects_malformed_records() {
        let ok = Span { offset: 0, len: 2 };
        let cases: Vec<(OutputBatch, &str)> = vec![
            (output(vec![0; 2], OutputRecord { topic: 1, ..record(ok, ok, Span::NULL) }), "topic index 1"),
            (output(vec![0; 2], record(Span { offset: 1, len: 2 }, ok, Span::NULL)), "key: span 1..3"),
            (output(vec![0; 2], record(ok, Span { offset: 0, len: -2 }, Span::NULL)), "value: span length -2"),
            (output(vec![0; 2], record(ok, ok, Span { offset: u32::MAX, len: 1 })), "headers: span"),
            (output(vec![1, 0, 0], record(ok, ok, Span { offset: 0, len: 3 })), "truncated header count"),
            (output(vec![1, 0, 0, 0, 9, 0, 0, 0], record(ok, ok, Span { offset: 0, len: 8 })), "key extends"),
            (output(vec![0, 0, 0, 0, 1], record(ok, ok, Span { offset: 0, len: 5 })), "1 bytes after"),
            (output(vec![0; 2], OutputRecord { partition: -2, ..record(ok, ok, Span::NULL) }), "partition -2"),
            (output(vec![0; 2], OutputRecord { timestamp: -5, ..record(ok, ok, Span::NULL) }), "timestamp -5"),
        ];
        for (batch, expected) in cases {
            let err = validate_output(&batch, 1, usize::MAX).unwrap_err();
            assert!(err.contains(expected), "{err:?} should contain {expected:?}");
        }
        let mut headers = Vec::new();
        encode_headers(&mut headers, &[("\u{e9}", Some(b"v"))]);
        headers[8] = 0xff; // invalid UTF-8 key
        let len = headers.len() as i32;
        let err =
            validate_output(&output(headers, record(Span::NULL, Span::NULL, Span { offset: 0, len })), 1, usize::MAX);
        assert!(err.unwrap_err().contains("not UTF-8"));
    }
}
