//! Response framing that keeps fetched record bytes out of the copy: a Fetch response is
//! encoded into a [`ResponseBuf`], which stores the records' `Bytes` (read from the segment
//! files) as references instead of copying them next to the encoded fields; the connection
//! then writes all parts with `writev`. Every other response is one contiguous buffer.

use std::any::Any;
use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::protocol::buf::ByteBufMut;
use tokio::io::AsyncWriteExt;

/// Record sets smaller than this are copied: an extra iovec costs more than the copy.
const PASS_THROUGH_MIN_BYTES: usize = 4096;

/// An encoded response frame: its parts in order.
pub struct Frame(Vec<Bytes>);

impl Frame {
    /// The frame's bytes after its 4-byte size, in one buffer (an Envelope's response data).
    pub fn into_unframed(self) -> Bytes {
        let mut bytes = bytes::BytesMut::with_capacity(self.0.iter().map(Bytes::len).sum());
        for part in &self.0 {
            bytes.extend_from_slice(part);
        }
        bytes.freeze().split_off(4)
    }

    /// Writes every part, with as few `writev` calls as the socket allows, and flushes: on a
    /// TLS connection the last records may still sit in the TLS layer's buffer after a write
    /// returned (the socket was full), and nothing else would send them before the client's
    /// next request, which waits for this answer (on plain TCP the flush costs nothing).
    pub async fn write_to<W: tokio::io::AsyncWrite + Unpin>(self, writer: &mut W) -> std::io::Result<()> {
        self.write_parts(writer).await?;
        writer.flush().await
    }

    async fn write_parts<W: tokio::io::AsyncWrite + Unpin>(mut self, writer: &mut W) -> std::io::Result<()> {
        if self.0.len() == 1 {
            return writer.write_all(&self.0[0]).await;
        }
        let mut first = 0;
        while first < self.0.len() {
            let slices: Vec<IoSlice<'_>> = self.0[first..].iter().map(|b| IoSlice::new(b)).collect();
            let mut written = writer.write_vectored(&slices).await?;
            if written == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "socket closed while writing"));
            }
            while written > 0 {
                let part = &mut self.0[first];
                if written >= part.len() {
                    written -= part.len();
                    first += 1;
                } else {
                    let _ = part.split_to(written);
                    written = 0;
                }
            }
        }
        Ok(())
    }
}

/// The record sets of a response worth passing through without a copy (only Fetch has any).
pub fn pass_through_of<T: Any>(response: &T) -> Vec<Bytes> {
    let Some(fetch) = (response as &dyn Any).downcast_ref::<FetchResponse>() else { return Vec::new() };
    fetch
        .responses
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .filter_map(|partition| partition.records.clone())
        .filter(|records| records.len() >= PASS_THROUGH_MIN_BYTES)
        .collect()
}

/// A `BufMut` for the kafka-protocol encoder. Slices that are exactly one of the expected
/// pass-through `Bytes` (same pointer and length) become a reference to it; everything else
/// is copied into the current contiguous part.
pub struct ResponseBuf {
    parts: Vec<Bytes>,
    current: BytesMut,
    pass_through: Vec<Bytes>,
    before_current: usize,
}

impl ResponseBuf {
    pub fn new(capacity: usize, pass_through: Vec<Bytes>) -> ResponseBuf {
        let copied = capacity.saturating_sub(pass_through.iter().map(Bytes::len).sum());
        ResponseBuf { parts: Vec::new(), current: BytesMut::with_capacity(copied), pass_through, before_current: 0 }
    }

    /// The bytes written so far.
    pub fn len(&self) -> usize {
        self.before_current + self.current.len()
    }
    pub fn into_frame(mut self) -> Frame {
        if !self.current.is_empty() || self.parts.is_empty() {
            self.parts.push(self.current.freeze());
        }
        Frame(self.parts)
    }
}

// SAFETY: every method delegates to the current `BytesMut`, whose own `BufMut` contract holds.
unsafe impl BufMut for ResponseBuf {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }
    unsafe fn advance_mut(&mut self, count: usize) {
        // SAFETY: the caller initialised `count` bytes of `chunk_mut`, which is the current part's.
        unsafe { self.current.advance_mut(count) }
    }
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.current.chunk_mut()
    }
    fn put_slice(&mut self, src: &[u8]) {
        if let Some(i) = self.pass_through.iter().position(|b| b.as_ptr() == src.as_ptr() && b.len() == src.len()) {
            let records = self.pass_through.swap_remove(i);
            let copied = std::mem::take(&mut self.current);
            self.before_current += copied.len() + records.len();
            self.parts.push(copied.freeze());
            self.parts.push(records);
            return;
        }
        self.current.extend_from_slice(src);
    }
}

impl ByteBufMut for ResponseBuf {
    fn offset(&self) -> usize {
        self.len()
    }
    /// Message encoders never seek (only record-batch writers do); forward seeks zero-fill.
    fn seek(&mut self, offset: usize) {
        let target = offset.saturating_sub(self.before_current);
        self.current.resize(target.max(self.current.len()), 0);
    }
    /// Message encoders never read back (only record-batch writers do); ranges are served from
    /// the current part.
    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let start = r.start.saturating_sub(self.before_current).min(self.current.len());
        let end = r.end.saturating_sub(self.before_current).clamp(start, self.current.len());
        &mut self.current[start..end]
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::Encodable;

    use super::*;

    /// A writer that, like a TLS stream, may keep bytes until it is flushed.
    #[derive(Default)]
    struct Buffering {
        sent: Vec<u8>,
        held: Vec<u8>,
    }

    impl tokio::io::AsyncWrite for Buffering {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.held.extend_from_slice(buf);
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let held = std::mem::take(&mut self.held);
            self.sent.extend_from_slice(&held);
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    #[tokio::test]
    async fn a_written_frame_is_flushed_so_a_buffering_stream_sends_all_of_it() {
        // Proves write_to leaves nothing in a buffering writer (a TLS stream whose socket was
        // full): the client waits for the whole answer before it sends anything more.
        for parts in
            [vec![Bytes::from_static(b"one part")], vec![Bytes::from_static(b"ab"), Bytes::from(vec![1u8; 9000])]]
        {
            let expected: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            let mut writer = Buffering::default();
            Frame(parts).write_to(&mut writer).await.expect("write");
            assert_eq!((writer.sent, writer.held.len()), (expected, 0));
        }
    }

    #[test]
    fn fetch_records_pass_through_and_the_frame_equals_the_copied_encoding() {
        // Proves the zero-copy frame is byte-identical to plain encoding and keeps records by reference.
        let big = Bytes::from(vec![7u8; 10_000]);
        let small = Bytes::from(vec![9u8; 100]);
        let partitions = vec![
            PartitionData::default().with_partition_index(0).with_records(Some(big.clone())),
            PartitionData::default().with_partition_index(1).with_records(Some(small)),
        ];
        let response = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default().with_partitions(partitions)]);
        for version in [4i16, 11, 12] {
            let mut plain = BytesMut::new();
            response.encode(&mut plain, version).unwrap();
            let pass = pass_through_of(&response);
            assert_eq!(pass.len(), 1);
            let mut buf = ResponseBuf::new(plain.len(), pass);
            response.encode(&mut buf, version).unwrap();
            assert_eq!(buf.len(), plain.len());
            let frame = buf.into_frame();
            assert!(frame.0.iter().any(|p| p.as_ptr() == big.as_ptr()), "records were copied");
            let joined: Vec<u8> = frame.0.iter().flat_map(|p| p.iter().copied()).collect();
            assert_eq!(joined, plain.to_vec(), "v{version}");
        }
    }
}
