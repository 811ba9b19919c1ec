//! An answer kept for a flow's captures and checks ([`Kept`]), and the
//! [`Sink`] the transports hand an answer's head and body bytes to as they
//! read them.
//!
//! Keeping is opt-in ([`super::Transport::send_keeping`]): the measured
//! hot path, [`super::Transport::send`], reads nothing it need not. Its
//! HTTP/1.1 reader takes only the status and the framing from a head (or
//! none at all, when the head is the same bytes as the last one) and
//! counts body bytes without copying them, and a load test's bodies are
//! read by the thousand per second: copying them, or building a header
//! map, would be work and memory that only a flow's step wants, and
//! would be charged to every request in flight. So the transports are
//! generic over the sink: `send` gives them `()`, whose calls compile to
//! nothing, and only a step that asks for its answer gives them a
//! [`Keeper`]. Either way the exchange reads the whole answer off the
//! connection, so its timings, phases and outcome are the same, and a
//! body longer than the keep is drained past it, which leaves the
//! connection fit for the next request.
//!
//! A leaf, like `progress`: the HTTP/1.1 reader ([`super::wire`]) and the
//! HTTP/2 exchange feed it, and it needs neither.

use bytes::Bytes;
use http::HeaderMap;

/// One answer as a flow's step reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The HTTP status; 200 for any gRPC answer that reached gRPC.
    pub status: u16,
    /// The headers as received (HTTP/1.1: the final head's, interim 1xx
    /// heads left out; HTTP/2: the head's, then the trailers', so a gRPC
    /// call's `grpc-status` and `grpc-message` are among them).
    pub headers: HeaderMap,
    /// The body's first bytes, at most the keep asked for; for a gRPC
    /// call the response message, without its 5-byte frame header.
    pub body: Bytes,
    /// The body was longer than the keep (or, for gRPC, more than one
    /// message came): the rest was read and dropped.
    pub truncated: bool,
}

/// What a transport hands an answer's bytes to as it reads them.
pub(crate) trait Sink {
    /// The bytes of an HTTP/1.1 answer's head, once whole: the final head,
    /// any interim heads before it included.
    fn head(&mut self, head: &[u8]);
    /// The next run of body bytes, decoded from its framing.
    fn data(&mut self, data: &[u8]);
}

/// The measured path's sink: keeps nothing, costs nothing.
impl Sink for () {
    #[inline(always)]
    fn head(&mut self, _: &[u8]) {}
    #[inline(always)]
    fn data(&mut self, _: &[u8]) {}
}

/// Bytes of a gRPC message's frame header: a compression flag and a
/// 4-byte big-endian length.
const GRPC_FRAME_HEADER: usize = 5;

/// Keeps the head and the first bytes of a body, and counts the rest.
#[derive(Debug)]
pub(crate) struct Keeper {
    /// Body bytes kept at most: the keep, plus a gRPC frame header.
    limit: usize,
    /// The gRPC message is kept, not its frame.
    grpc: bool,
    /// The HTTP/1.1 head's bytes (already bounded by the head parser).
    head: Vec<u8>,
    body: Vec<u8>,
    /// Body bytes seen, kept or not.
    seen: usize,
}

impl Keeper {
    /// A keeper of at most `keep` body bytes; of a gRPC call's (`grpc`)
    /// answer, of at most `keep` bytes of its message.
    pub(crate) fn new(keep: usize, grpc: bool) -> Self {
        let limit = if grpc {
            keep.saturating_add(GRPC_FRAME_HEADER)
        } else {
            keep
        };
        Self {
            limit,
            grpc,
            head: Vec::new(),
            body: Vec::new(),
            seen: 0,
        }
    }

    /// The HTTP/1.1 head's bytes, as received.
    pub(crate) fn head_bytes(&self) -> &[u8] {
        &self.head
    }

    /// The answer kept, for `status` and `headers`. A gRPC call answered
    /// with 200 has its message taken out of its frame; any other answer
    /// never reached gRPC, and its body is kept as it came.
    pub(crate) fn finish(self, status: u16, headers: HeaderMap) -> Kept {
        let raw_truncated = self.seen > self.body.len();
        let (body, truncated) = if self.grpc && status == 200 {
            unframe(self.body, self.seen)
        } else {
            (Bytes::from(self.body), raw_truncated)
        };
        Kept {
            status,
            headers,
            body,
            truncated,
        }
    }
}

impl Sink for Keeper {
    fn head(&mut self, head: &[u8]) {
        self.head.clear();
        self.head.extend_from_slice(head);
    }

    fn data(&mut self, data: &[u8]) {
        self.seen = self.seen.saturating_add(data.len());
        let room = self.limit.saturating_sub(self.body.len());
        self.body.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// The message of a unary gRPC answer's first frame, from the `kept`
/// leading bytes of a body of `seen` bytes, and whether it was cut: by the
/// keep, or by more frames after it (a unary call answers with one). A
/// compressed message (flag 1) is kept as it came: the agent offers no
/// `grpc-accept-encoding`, so a server should not send one, and its
/// `grpc-encoding` header says so if it does.
fn unframe(kept: Vec<u8>, seen: usize) -> (Bytes, bool) {
    let Some(header) = kept.get(..GRPC_FRAME_HEADER) else {
        // No whole frame header: an empty (trailers-only) answer, or a
        // broken one, kept as it came.
        return (Bytes::from(kept), false);
    };
    let mut len = [0u8; 4];
    len.copy_from_slice(&header[1..]);
    let len = u32::from_be_bytes(len) as usize;
    let whole = GRPC_FRAME_HEADER.saturating_add(len);
    let end = whole.min(kept.len());
    let message = Bytes::from(kept).slice(GRPC_FRAME_HEADER..end);
    (message, end < whole || seen > whole)
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
