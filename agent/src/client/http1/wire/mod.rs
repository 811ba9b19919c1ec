//! HTTP/1.1 on the wire, without I/O: a request rendered into one buffer
//! (so it leaves in one write), a response head parser ([`head`]) and a
//! body decoder ([`body`]) fed whatever bytes arrived. Both the request
//! pools and the event-stream subscriber read responses with them, as
//! hyper's own decoder serves its client and server.
//!
//! The agent sends one request at a time on a connection and wants only the
//! status, the framing and whether the connection may be reused, so a
//! general codec (headers into a map, a body channel, a task per
//! connection) is work it does not need on its hottest path. `httparse`
//! parses the head in place; the pools count and drop bodies, never keep
//! them, so a large body costs no memory. A flow's step that wants its
//! answer gives the task path's reader a sink ([`ResponseReader::feed_into`],
//! [`crate::client::kept`]) that keeps the head's bytes and the body's
//! first bytes; the measured path's sink is `()` and compiles to nothing. A held event stream is one task
//! with one small buffer: hyper's client would add a connection task, a
//! body channel and its own 8 KiB+ read buffer per stream, most of the
//! agent's memory at 20,000 streams, so the subscriber decodes its body
//! here in place and hands it to the event parser without a copy.

mod body;
mod head;
#[cfg(test)]
mod tests;

use std::fmt;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::request::Parts;
use http::Method;

use crate::client::kept::Sink;

pub(crate) use body::{BodyDecoder, ChunkError};
pub(crate) use head::{header_map, parse_head, Head, MAX_HEAD_BYTES};

/// Writes `request` as HTTP/1.1 in origin form into `out` (cleared first):
/// request line, `host` unless the request has one, its headers, a
/// `content-length` when there is a body (or the method implies one), an
/// empty line and the body.
pub(super) fn render(request: &Parts, host: &str, body: &Bytes, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(request.method.as_str().as_bytes());
    out.push(b' ');
    let path = request.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(if path.is_empty() {
        b"/"
    } else {
        path.as_bytes()
    });
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let headers = &request.headers;
    if !headers.contains_key(HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let framed = headers.contains_key(CONTENT_LENGTH) || headers.contains_key(TRANSFER_ENCODING);
    let wants_length = matches!(request.method, Method::POST | Method::PUT | Method::PATCH);
    if !framed && (!body.is_empty() || wants_length) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Why a response could not be read. Each is the target's fault (or the
/// network's), never the agent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The head is not HTTP/1.x.
    Malformed(&'static str),
    /// The head did not end within [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// `content-length` is not a number, or two of them disagree.
    BadLength,
    /// The chunked body broke the rule named.
    BadChunk(ChunkError),
    /// The connection closed before the response was complete.
    Truncated,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Malformed(what) => write!(f, "malformed response head: {what}"),
            WireError::HeadTooLarge => {
                write!(f, "response head larger than {MAX_HEAD_BYTES} bytes")
            }
            WireError::BadLength => write!(f, "invalid content-length"),
            WireError::BadChunk(e) => write!(f, "invalid chunked body: {e}"),
            WireError::Truncated => write!(f, "connection closed before the response ended"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<ChunkError> for WireError {
    fn from(e: ChunkError) -> Self {
        WireError::BadChunk(e)
    }
}

/// A complete response, as far as the agent needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Complete {
    pub status: u16,
    /// The server allows another request on this connection (keep-alive,
    /// and the body's end was known without the connection closing).
    pub reusable: bool,
}

/// What feeding bytes gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Used this many bytes; the response goes on.
    More(usize),
    /// Used this many bytes, and the response is complete. Bytes after them
    /// belong to something else.
    Done(usize, Complete),
}

/// The last final head one connection's server sent, and what it said. A
/// server sends the same head bytes answer after answer (until its `Date`
/// turns, once a second), and comparing them costs a tenth of parsing them
/// again; the same bytes always read the same, so nothing is lost.
#[derive(Debug, Default)]
pub(crate) struct HeadMemo {
    /// The head, up to and with its blank line; empty until one is kept.
    bytes: Vec<u8>,
    /// Whether it answered a HEAD request, which frames the body apart.
    head_request: bool,
    head: Option<Head>,
}

/// Heads longer than this are parsed every time: a memo is kept per
/// connection, and typical heads are 100 to 300 bytes.
const MEMO_MAX: usize = 512;

impl HeadMemo {
    /// What the head `buf` starts with says, when it is the one kept.
    fn matches(&self, buf: &[u8], head_request: bool) -> Option<Head> {
        let head = self.head?;
        (head_request == self.head_request && buf.get(..self.bytes.len()) == Some(&self.bytes[..]))
            .then_some(head)
    }

    fn keep(&mut self, buf: &[u8], head: Head, head_request: bool) {
        self.bytes.clear();
        if head.len > MEMO_MAX {
            self.head = None;
            return;
        }
        self.bytes.extend_from_slice(&buf[..head.len]);
        self.head_request = head_request;
        self.head = Some(head);
    }
}

/// Reads one response from bytes fed in the order they arrived.
#[derive(Debug)]
pub(crate) struct ResponseReader {
    head_request: bool,
    status: u16,
    keep_alive: bool,
    /// Set once the final head has been read.
    body: Option<BodyDecoder>,
}

impl ResponseReader {
    /// A reader for the response to a request with `method` (a response to
    /// HEAD has no body, whatever its headers say).
    pub(crate) fn new(method: &Method) -> Self {
        Self {
            head_request: *method == Method::HEAD,
            status: 0,
            keep_alive: false,
            body: None,
        }
    }

    /// Whether the final (non-1xx) head has been read: the body, if any,
    /// comes next.
    pub(crate) fn head_done(&self) -> bool {
        self.body.is_some()
    }

    /// Consumes what it can of `buf`, the bytes not yet consumed. `More(n)`
    /// with `n < buf.len()` means it needs more bytes after them (a head
    /// cut in two): the caller keeps `buf[n..]` and appends.
    #[cfg(test)]
    pub(crate) fn feed(&mut self, buf: &[u8]) -> Result<Fed, WireError> {
        self.feed_remembering(buf, None)
    }

    /// [`Self::feed`], taking a final head equal to the one `memo` kept
    /// as read already, and keeping the head it parses there.
    pub(crate) fn feed_remembering(
        &mut self,
        buf: &[u8],
        memo: Option<&mut HeadMemo>,
    ) -> Result<Fed, WireError> {
        self.feed_into(buf, memo, &mut ())
    }

    /// [`Self::feed_remembering`], handing the whole head's bytes and
    /// then the body's bytes to `sink` as they come: `()` for an answer
    /// only measured, where this is the same code as before.
    #[inline]
    pub(crate) fn feed_into(
        &mut self,
        buf: &[u8],
        memo: Option<&mut HeadMemo>,
        sink: &mut impl Sink,
    ) -> Result<Fed, WireError> {
        let mut used = 0;
        let body = match &mut self.body {
            Some(body) => body,
            None => {
                let known = memo
                    .as_deref()
                    .and_then(|m| m.matches(buf, self.head_request));
                let head = match known {
                    Some(head) => head,
                    None => {
                        let Some(head) = parse_head(buf, self.head_request, |_| {})? else {
                            return Ok(Fed::More(0));
                        };
                        if let Some(memo) = memo {
                            memo.keep(buf, head, self.head_request);
                        }
                        head
                    }
                };
                used = head.len;
                sink.head(&buf[..used]);
                (self.status, self.keep_alive) = (head.status, head.keep_alive);
                self.body.insert(BodyDecoder::new(head.framing))
            }
        };
        let took = body.feed(&buf[used..], |data| sink.data(data))?;
        used += took.used;
        Ok(if took.end {
            Fed::Done(
                used,
                Complete {
                    status: self.status,
                    reusable: self.keep_alive,
                },
            )
        } else {
            Fed::More(used)
        })
    }

    /// The connection closed (read returned 0): that ends a body that runs
    /// until the close; anywhere else the response was cut short.
    pub(crate) fn closed(&self) -> Result<Complete, WireError> {
        match &self.body {
            Some(body) if body.ends_at_close() => Ok(Complete {
                status: self.status,
                reusable: false,
            }),
            _ => Err(WireError::Truncated),
        }
    }
}
