//! Requests as the open loop hands them to the pool, and as the pool keeps
//! them until they are on the wire.

use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request};
use http_body_util::Full;
use hyper::body::Body;
use tokio::time::Instant;

use super::DirectPool;
use crate::client::http1::wire::render;
use crate::client::saturation::Queued;

/// A request to send. Not boxed: a box would be one more allocation per
/// built request, to save a few bytes' copy of a fixed one.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outgoing {
    /// Built for this arrival ([`Outgoing::built`]); rendered as it goes
    /// onto the wire.
    Built(Parts, Bytes),
    /// The same every time, rendered once ([`DirectPool::fix`]).
    Fixed(Fixed),
}

/// A request's bytes as they go onto the wire, rendered once for every
/// arrival of a kind that never changes
/// ([`crate::request::RequestMix::fixed_kind`]), so that such a request is
/// neither built nor rendered per arrival. Shared, not copied, by the
/// requests that carry it.
#[derive(Clone)]
pub(crate) struct Fixed(Rc<(Method, Vec<u8>)>);

impl Outgoing {
    /// A request built for this arrival.
    pub(crate) fn built(request: Request<Full<Bytes>>) -> Self {
        let (parts, body) = request.into_parts();
        Outgoing::Built(parts, full_bytes(body))
    }

    pub(super) fn method(&self) -> &Method {
        match self {
            Outgoing::Built(parts, _) => &parts.method,
            Outgoing::Fixed(fixed) => &fixed.0 .0,
        }
    }

    /// The request's bytes: rendered into `out` for `host`, or as fixed.
    pub(super) fn wire<'a>(&'a self, host: &str, out: &'a mut Vec<u8>) -> &'a [u8] {
        match self {
            Outgoing::Built(parts, body) => {
                render(parts, host, body, out);
                out.as_slice()
            }
            Outgoing::Fixed(fixed) => fixed.0 .1.as_slice(),
        }
    }
}

impl<T: Copy + 'static> DirectPool<T> {
    /// `request` rendered as this pool puts it on the wire, to be sent as
    /// it is for every arrival of its kind.
    pub(crate) fn fix(&self, request: Request<Full<Bytes>>) -> Fixed {
        let (parts, body) = request.into_parts();
        let mut wire = Vec::new();
        render(&parts, &self.host, &full_bytes(body), &mut wire);
        Fixed(Rc::new((parts.method, wire)))
    }
}

/// One request's way through the pool, with the caller's `tag`.
pub(super) struct Job<T> {
    pub(super) request: Outgoing,
    /// When the loop sent it out: its time (the timeout) runs from here.
    pub(super) sent_at: Instant,
    pub(super) tag: T,
}

impl<T> Job<T> {
    pub(super) fn deadline(&self, timeout: Duration) -> Instant {
        self.sent_at + timeout
    }
}

/// A job that found no connection free and no slot to open one.
pub(super) struct Waiting<T> {
    pub(super) job: Job<T>,
    /// Counts it in the pool's saturation while it waits.
    pub(super) _queued: Queued,
}

/// A `Full` body's bytes: it is one frame, ready at once.
pub(super) fn full_bytes(body: Full<Bytes>) -> Bytes {
    let mut body = std::pin::pin!(body);
    let mut cx = Context::from_waker(Waker::noop());
    match body.as_mut().poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}
