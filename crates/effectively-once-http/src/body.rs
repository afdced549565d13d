//! [`ResponseBody`]: an answer's body the layer can hand on after reading the start of it, so
//! an answer too large to store streams to the client instead of being buffered whole.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

/// A response body of the handler behind the layer. The layer reads an answer to store up to
/// the store's largest answer (`Config::max_response_bytes`) and one byte more, never further;
/// an answer larger than that goes to the client as the bytes read ([`prepend`](Self::prepend)ed)
/// followed by the rest, streamed.
///
/// Implemented for `Full<Bytes>`, `lambda_http::Body` (feature `lambda`) and axum's body
/// (feature `axum`). Another body type implements it by wrapping [`Prefixed`], or (one held in
/// memory anyway) by concatenating.
pub trait ResponseBody: Body + From<String> + From<Vec<u8>> + Unpin + Sized {
    /// `prefix`, the bytes already read from `rest`, then what `rest` still holds.
    fn prepend(prefix: Bytes, rest: Self) -> Self;
}

/// A body's first bytes, already read, then the rest of it: what [`ResponseBody::prepend`]
/// makes of a streamed body.
#[derive(Debug)]
pub struct Prefixed<B> {
    prefix: Option<Bytes>,
    rest: B,
}

impl<B> Prefixed<B> {
    /// `prefix` then `rest`.
    pub fn new(prefix: Bytes, rest: B) -> Self {
        Prefixed { prefix: (!prefix.is_empty()).then_some(prefix), rest }
    }
}

impl<B> Body for Prefixed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        let extra = self.prefix.as_ref().map_or(0, |prefix| prefix.len() as u64);
        hint.set_lower(hint.lower().saturating_add(extra));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(extra));
        }
        hint
    }
}

impl ResponseBody for Full<Bytes> {
    fn prepend(prefix: Bytes, _rest: Self) -> Self {
        // A `Full` is one frame, read whole: nothing is left of it.
        Full::new(prefix)
    }
}

#[cfg(feature = "lambda")]
impl ResponseBody for lambda_http::Body {
    fn prepend(prefix: Bytes, rest: Self) -> Self {
        // In memory, one frame: once read, nothing is left of it.
        let mut all = Vec::with_capacity(prefix.len() + rest.len());
        all.extend_from_slice(&prefix);
        all.extend_from_slice(&rest);
        match String::from_utf8(all) {
            Ok(text) => lambda_http::Body::Text(text),
            Err(e) => lambda_http::Body::Binary(e.into_bytes()),
        }
    }
}

#[cfg(feature = "axum")]
impl ResponseBody for axum_core::body::Body {
    fn prepend(prefix: Bytes, rest: Self) -> Self {
        axum_core::body::Body::new(Prefixed::new(prefix, rest))
    }
}
