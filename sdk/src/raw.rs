//! The batch layout of the WIT contract (`types` in `sdk/wit/runnel.wit`): one flat `data`
//! buffer plus fixed-size descriptors with spans into it.
//!
//! On wasm32 these are the wit-bindgen types themselves (no conversion per batch); natively
//! they are field-for-field mirrors, so the rest of the SDK is the same code on both.
//! Decoding never panics on a malformed span or header list: it yields `None`/stops instead
//! (the host validates what it sends; a bug there must not become a guest trap).

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::transform::runnel::transform::types::{
    InputBatch, InputRecord, OutputBatch, OutputRecord, Span,
};

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    /// A byte range of a batch's `data`; `len == -1` is null.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Span {
        pub offset: u32,
        pub len: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct InputRecord {
        pub offset: i64,
        pub timestamp: i64,
        pub key: Span,
        pub value: Span,
        pub headers: Span,
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct InputBatch {
        pub partition: i32,
        pub data: Vec<u8>,
        pub records: Vec<InputRecord>,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct OutputRecord {
        pub topic: u32,
        pub partition: i32,
        pub timestamp: i64,
        pub key: Span,
        pub value: Span,
        pub headers: Span,
    }
}

pub const NULL: Span = Span { offset: 0, len: -1 };

/// The bytes of a span: `None` for null (and for a span outside `data`).
#[inline]
pub fn slice(data: &[u8], span: Span) -> Option<&[u8]> {
    let len = usize::try_from(span.len).ok()?;
    let start = span.offset as usize;
    data.get(start..start.checked_add(len)?)
}

/// Appends `bytes` (or nothing for null) to `data` and returns its span.
///
/// Callers keep `data` under 2 GiB (the host's output limit is far below it); past that the
/// offset would not fit the WIT `u32`/`s32` fields, so it saturates and the host rejects the
/// span instead of reading the wrong bytes.
#[inline]
pub fn append(data: &mut Vec<u8>, bytes: Option<&[u8]>) -> Span {
    match bytes {
        None => NULL,
        Some(bytes) => {
            let offset = u32::try_from(data.len()).unwrap_or(u32::MAX);
            data.extend_from_slice(bytes);
            Span { offset, len: i32::try_from(bytes.len()).unwrap_or(i32::MAX) }
        }
    }
}

/// Appends one encoded header (`u32` key length, key, `s32` value length or -1, value).
pub fn encode_header(buf: &mut Vec<u8>, key: &str, value: Option<&[u8]>) {
    buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buf.extend_from_slice(key.as_bytes());
    match value {
        None => buf.extend_from_slice(&(-1i32).to_le_bytes()),
        Some(v) => {
            buf.extend_from_slice(&(v.len() as i32).to_le_bytes());
            buf.extend_from_slice(v);
        }
    }
}

/// Iterator over an encoded header list (see [`crate::Record::headers`]).
#[derive(Clone, Debug)]
pub struct Headers<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Headers<'a> {
    /// Headers of an encoded list (`u32` count, then the headers); empty for an empty or short
    /// buffer.
    pub fn new(encoded: &'a [u8]) -> Self {
        match encoded.split_first_chunk::<4>() {
            Some((count, rest)) => Headers { rest, remaining: u32::from_le_bytes(*count) },
            None => Headers { rest: &[], remaining: 0 },
        }
    }

    fn next_raw(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let (key_len, rest) = self.rest.split_first_chunk::<4>()?;
        let key_len = u32::from_le_bytes(*key_len) as usize;
        let key = rest.get(..key_len)?;
        let (value_len, rest) = rest.get(key_len..)?.split_first_chunk::<4>()?;
        let value_len = i32::from_le_bytes(*value_len);
        let (value, rest) = if value_len < 0 {
            (None, rest)
        } else {
            let n = value_len as usize;
            (Some(rest.get(..n)?), rest.get(n..)?)
        };
        self.rest = rest;
        Some((key, value))
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        while self.remaining > 0 {
            self.remaining -= 1;
            match self.next_raw() {
                // Kafka header keys are strings; a key that is not UTF-8 is skipped rather than
                // failing the whole record.
                Some((key, value)) => match core::str::from_utf8(key) {
                    Ok(key) => return Some((key, value)),
                    Err(_) => continue,
                },
                None => {
                    self.remaining = 0;
                    return None;
                }
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize))
    }
}

/// Whether an encoded header list is well formed (what the host checks of outputs).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub fn headers_well_formed(encoded: &[u8]) -> bool {
    if encoded.is_empty() {
        return true;
    }
    let mut headers = Headers::new(encoded);
    if encoded.len() < 4 {
        return false;
    }
    let mut count = headers.remaining;
    while count > 0 {
        match headers.next_raw() {
            Some((key, _)) if core::str::from_utf8(key).is_ok() => count -= 1,
            _ => return false,
        }
    }
    headers.rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encoding then decoding headers is lossless, including null values and empty keys.
    #[test]
    fn header_round_trip() {
        let mut buf = 3u32.to_le_bytes().to_vec();
        encode_header(&mut buf, "a", Some(b"1"));
        encode_header(&mut buf, "", None);
        encode_header(&mut buf, "c", Some(b""));
        assert!(headers_well_formed(&buf));
        let got: Vec<_> = Headers::new(&buf).collect();
        assert_eq!(got, [("a", Some(&b"1"[..])), ("", None), ("c", Some(&b""[..]))]);
    }

    /// A truncated or lying header list stops iteration instead of panicking.
    #[test]
    fn malformed_headers_stop() {
        let mut buf = 5u32.to_le_bytes().to_vec();
        encode_header(&mut buf, "a", Some(b"1"));
        assert_eq!(Headers::new(&buf).count(), 1);
        assert!(!headers_well_formed(&buf));
        assert_eq!(Headers::new(&[1, 0]).count(), 0);
        let mut buf = 1u32.to_le_bytes().to_vec();
        buf.extend_from_slice(&100u32.to_le_bytes());
        assert_eq!(Headers::new(&buf).count(), 0);
    }

    /// Out-of-range spans read as null, not as a panic.
    #[test]
    fn bad_spans_are_none() {
        let data = b"abc";
        assert_eq!(slice(data, Span { offset: 1, len: 2 }), Some(&b"bc"[..]));
        assert_eq!(slice(data, Span { offset: 2, len: 2 }), None);
        assert_eq!(slice(data, Span { offset: u32::MAX, len: i32::MAX }), None);
        assert_eq!(slice(data, NULL), None);
        assert_eq!(slice(data, Span { offset: 3, len: 0 }), Some(&b""[..]));
    }
}
