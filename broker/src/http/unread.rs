//! Request bodies answered before they are read. A 401 from authentication, a 403 on a
//! transform's name before its module is read, a 413: the answer leaves the rest of the body
//! in the connection. hyper then closes the connection, but the client has its answer and may
//! already have put the connection back in its pool: its next request on it fails with a
//! broken pipe or a reset, though nothing was wrong with it.
//!
//! As Go's `net/http` does, the rest of such a body is read and dropped after the answer is
//! made (up to [`DRAIN_MAX_BYTES`] within [`DRAIN_MAX_TIME`]), so the connection stays usable;
//! a body with more left than that gets `Connection: close` on its answer, so no client reuses
//! a connection the server is about to close.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use http_body::Frame;

/// The most of an unread body the server reads to keep its connection.
pub const DRAIN_MAX_BYTES: u64 = 4 << 20;
/// The longest the server waits for the rest of an unread body.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(5);

/// Middleware (outermost): hands the handlers a body that, dropped before its end, gives what
/// is left back here, then drains it or marks the answer `Connection: close`.
pub async fn drain_unread(request: Request, next: Next) -> Response {
    let left = Arc::new(Mutex::new(None));
    let (parts, body) = request.into_parts();
    let body = Body::new(Returning { inner: Some(body), ended: false, left: left.clone() });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    let unread = left.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    if let Some(unread) = unread {
        if !drain(unread).await {
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    response
}

/// Reads `body` to its end within the bounds; whether it got there.
async fn drain(mut body: Body) -> bool {
    let reading = async {
        let mut read = 0u64;
        loop {
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                None => return true,
                Some(Err(_)) => return false,
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |data| data.len() as u64);
                    if read > DRAIN_MAX_BYTES {
                        return false;
                    }
                }
            }
        }
    };
    tokio::time::timeout(DRAIN_MAX_TIME, reading).await.unwrap_or(false)
}

/// The request body as handlers see it. Dropped before its end, it puts the inner body in
/// `left`.
struct Returning {
    inner: Option<Body>,
    ended: bool,
    left: Arc<Mutex<Option<Body>>>,
}

impl HttpBody for Returning {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.as_ref().is_none_or(|inner| inner.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.as_ref().map(|inner| inner.size_hint()).unwrap_or_else(|| http_body::SizeHint::with_exact(0))
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if self.is_end_stream() {
            return;
        }
        if let Some(inner) = self.inner.take() {
            *self.left.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(inner);
        }
    }
}
