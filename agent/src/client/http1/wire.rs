//! HTTP/1.1 on the wire, without I/O: a request rendered into one buffer
//! (so it leaves in one write) and a response reader fed whatever bytes
//! arrived.
//!
//! The agent sends one request at a time on a connection and wants only the
//! status, the framing and whether the connection may be reused, so a
//! general codec (headers into a map, a body channel, a task per
//! connection) is work it does not need on its hottest path. `httparse`
//! parses the head in place; bodies are counted and dropped, never kept,
//! so a large body costs no memory.

use std::fmt;
use std::mem::MaybeUninit;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::request::Parts;
use http::Method;

/// Most header lines a response may have; hyper's default too.
const MAX_HEADERS: usize = 100;
/// Largest response head (status line and headers) accepted. A head this
/// large is not a real server's answer to a load test; refusing it bounds
/// the connection's buffer.
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest chunk-size line or trailer section accepted, for the same reason.
const MAX_LINE_BYTES: usize = 8 * 1024;

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
pub enum WireError {
    /// The head is not HTTP/1.x.
    Malformed(&'static str),
    /// The head did not end within [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// `content-length` is not a number, or two of them disagree.
    BadLength,
    /// A chunk size line is not hex, or a chunk does not end in CRLF.
    BadChunk,
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
            WireError::BadChunk => write!(f, "invalid chunked body"),
            WireError::Truncated => write!(f, "connection closed before the response ended"),
        }
    }
}

impl std::error::Error for WireError {}

/// A complete response, as far as the agent needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Complete {
    pub status: u16,
    /// The server allows another request on this connection (keep-alive,
    /// and the body's end was known without the connection closing).
    pub reusable: bool,
}

/// What feeding bytes gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// Used this many bytes; the response goes on.
    More(usize),
    /// Used this many bytes, and the response is complete. Bytes after them
    /// belong to something else.
    Done(usize, Complete),
}

/// Where in a response the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Head,
    /// This many body bytes still to come.
    Length(u64),
    /// Expecting a chunk-size line.
    ChunkSize,
    /// This many bytes of the current chunk still to come.
    ChunkData(u64),
    /// The CRLF that ends a chunk's data.
    ChunkEnd,
    /// After the last chunk: trailer lines up to an empty line.
    Trailers,
    /// The body runs until the server closes the connection.
    UntilClose,
}

/// The last final head one connection's server sent, and what it said. A
/// server sends the same head bytes answer after answer (until its `Date`
/// turns, once a second), and comparing them costs a tenth of parsing them
/// again; the same bytes always read the same, so nothing is lost.
#[derive(Debug, Default)]
pub struct HeadMemo {
    /// The head, up to and with its blank line; empty until one is kept.
    bytes: Vec<u8>,
    /// Whether it answered a HEAD request, which frames the body apart.
    head_request: bool,
    status: u16,
    keep_alive: bool,
    state: State,
}

/// Heads longer than this are parsed every time: a memo is kept per
/// connection, and typical heads are 100 to 300 bytes.
const MEMO_MAX: usize = 512;

impl HeadMemo {
    /// The length of the head `buf` starts with, when it is the one kept.
    fn matches(&self, buf: &[u8], head_request: bool) -> Option<usize> {
        let n = self.bytes.len();
        (n > 0 && head_request == self.head_request && buf.get(..n) == Some(&self.bytes[..]))
            .then_some(n)
    }

    fn keep(&mut self, head: &[u8], reader: &ResponseReader) {
        if head.len() > MEMO_MAX {
            self.bytes.clear();
            return;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(head);
        self.head_request = reader.head_request;
        self.status = reader.status;
        self.keep_alive = reader.keep_alive;
        self.state = reader.state;
    }
}

/// Reads one response from bytes fed in the order they arrived.
#[derive(Debug)]
pub struct ResponseReader {
    state: State,
    head_request: bool,
    status: u16,
    keep_alive: bool,
    head_done: bool,
}

impl ResponseReader {
    /// A reader for the response to a request with `method` (a response to
    /// HEAD has no body, whatever its headers say).
    pub fn new(method: &Method) -> Self {
        Self {
            state: State::Head,
            head_request: *method == Method::HEAD,
            status: 0,
            keep_alive: false,
            head_done: false,
        }
    }

    /// Whether the final (non-1xx) head has been read: the body, if any,
    /// comes next.
    pub fn head_done(&self) -> bool {
        self.head_done
    }

    /// Consumes what it can of `buf`, the bytes not yet consumed. `More(n)`
    /// with `n < buf.len()` means it needs more bytes after them (a head or
    /// line cut in two): the caller keeps `buf[n..]` and appends.
    #[cfg(test)]
    pub fn feed(&mut self, buf: &[u8]) -> Result<Fed, WireError> {
        self.feed_remembering(buf, None)
    }

    /// [`Self::feed`], taking a final head equal to the one `memo` kept
    /// as read already, and keeping the head it parses there.
    pub fn feed_remembering(
        &mut self,
        buf: &[u8],
        mut memo: Option<&mut HeadMemo>,
    ) -> Result<Fed, WireError> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            match self.state {
                State::Head => {
                    let known = memo.as_deref().and_then(|m| {
                        m.matches(rest, self.head_request)
                            .map(|n| (n, m.status, m.keep_alive, m.state))
                    });
                    if let Some((n, status, keep_alive, state)) = known {
                        used += n;
                        (self.status, self.keep_alive, self.state) = (status, keep_alive, state);
                        self.head_done = true;
                        if let Some(done) = self.done_if_empty() {
                            return Ok(Fed::Done(used, done));
                        }
                        continue;
                    }
                    // Left uninitialised: filling 100 empty headers before
                    // each parse costs a third as much again as parsing a
                    // typical head.
                    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
                    let mut response = httparse::Response::new(&mut []);
                    let n = match httparse::ParserConfig::default()
                        .parse_response_with_uninit_headers(&mut response, rest, &mut headers)
                    {
                        Ok(httparse::Status::Complete(n)) => n,
                        Ok(httparse::Status::Partial) => {
                            if rest.len() >= MAX_HEAD_BYTES {
                                return Err(WireError::HeadTooLarge);
                            }
                            return Ok(Fed::More(used));
                        }
                        Err(e) => return Err(WireError::Malformed(parse_error(e))),
                    };
                    if n > MAX_HEAD_BYTES {
                        return Err(WireError::HeadTooLarge);
                    }
                    let status = response.code.unwrap_or(0);
                    let version = response.version.unwrap_or(1);
                    used += n;
                    // 1xx other than 101 are interim: the real head follows.
                    if (100..200).contains(&status) && status != 101 {
                        continue;
                    }
                    self.begin_body(status, version, response.headers)?;
                    if let Some(memo) = memo.as_deref_mut() {
                        memo.keep(&rest[..n], self);
                    }
                    if let Some(done) = self.done_if_empty() {
                        return Ok(Fed::Done(used, done));
                    }
                }
                State::Length(left) => {
                    let take = left.min(rest.len() as u64);
                    used += take as usize;
                    if take == left {
                        return Ok(Fed::Done(used, self.complete(self.keep_alive)));
                    }
                    self.state = State::Length(left - take);
                    return Ok(Fed::More(used));
                }
                State::ChunkSize => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        used += n;
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        used += n;
                        self.state = State::ChunkData(size);
                    }
                    Ok(httparse::Status::Partial) => {
                        if rest.len() > MAX_LINE_BYTES {
                            return Err(WireError::BadChunk);
                        }
                        return Ok(Fed::More(used));
                    }
                    Err(_) => return Err(WireError::BadChunk),
                },
                State::ChunkData(left) => {
                    let take = left.min(rest.len() as u64);
                    used += take as usize;
                    if take < left {
                        self.state = State::ChunkData(left - take);
                        return Ok(Fed::More(used));
                    }
                    self.state = State::ChunkEnd;
                }
                State::ChunkEnd => {
                    if rest.len() < 2 {
                        if rest.first().is_some_and(|&b| b != b'\r') {
                            return Err(WireError::BadChunk);
                        }
                        return Ok(Fed::More(used));
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(WireError::BadChunk);
                    }
                    used += 2;
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if rest.len() > MAX_LINE_BYTES {
                            return Err(WireError::BadChunk);
                        }
                        return Ok(Fed::More(used));
                    };
                    used += end + 2;
                    if end == 0 {
                        return Ok(Fed::Done(used, self.complete(self.keep_alive)));
                    }
                }
                State::UntilClose => return Ok(Fed::More(buf.len())),
            }
        }
    }

    /// The connection closed (read returned 0): that ends a body that runs
    /// until the close; anywhere else the response was cut short.
    pub fn closed(&self) -> Result<Complete, WireError> {
        match self.state {
            State::UntilClose => Ok(self.complete(false)),
            _ => Err(WireError::Truncated),
        }
    }

    fn complete(&self, reusable: bool) -> Complete {
        Complete {
            status: self.status,
            reusable,
        }
    }

    /// Sets the body's framing from the final head (RFC 9112 section 6.3).
    fn begin_body(
        &mut self,
        status: u16,
        version: u8,
        headers: &[httparse::Header<'_>],
    ) -> Result<(), WireError> {
        self.status = status;
        self.head_done = true;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut encoded = false;
        let mut close = version == 0;
        for h in headers {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = parse_length(h.value)?;
                if length.is_some_and(|l| l != n) {
                    return Err(WireError::BadLength);
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                encoded = true;
                // Chunked must be the last coding to frame the body.
                chunked = last_token(h.value).is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in tokens(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                        close = false;
                    }
                }
            }
        }
        self.keep_alive = !close && status != 101;
        let bodyless =
            self.head_request || status == 204 || status == 304 || (100..200).contains(&status);
        self.state = if bodyless {
            State::Length(0)
        } else if encoded {
            // With both, transfer-encoding wins and the connection must
            // not be reused (a request smuggling shape).
            if length.is_some() {
                self.keep_alive = false;
            }
            if chunked {
                State::ChunkSize
            } else {
                State::UntilClose
            }
        } else {
            match length {
                Some(n) => State::Length(n),
                None => State::UntilClose,
            }
        };
        Ok(())
    }

    fn done_if_empty(&self) -> Option<Complete> {
        (self.state == State::Length(0)).then(|| self.complete(self.keep_alive))
    }
}

fn parse_length(value: &[u8]) -> Result<u64, WireError> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(WireError::BadLength);
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(WireError::BadLength)
}

/// The comma-separated tokens of a header value, trimmed.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

fn last_token(value: &[u8]) -> Option<&[u8]> {
    tokens(value).last()
}

fn parse_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "not HTTP/1.x",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` in pieces of `step` as a connection would deliver them
    /// (keeping what the reader did not use), until the response is done.
    fn read_in_steps(method: &Method, bytes: &[u8], step: usize) -> (Complete, usize) {
        let mut reader = ResponseReader::new(method);
        let mut pending: Vec<u8> = Vec::new();
        let mut offset = 0; // of pending[0] in bytes
        let mut at = 0;
        loop {
            let end = (at + step).min(bytes.len());
            pending.extend_from_slice(&bytes[at..end]);
            at = end;
            match reader.feed(&pending).expect("valid response") {
                Fed::Done(n, done) => return (done, offset + n),
                Fed::More(n) => {
                    pending.drain(..n);
                    offset += n;
                }
            }
            if at == bytes.len() {
                let done = reader.closed().expect("complete at close");
                return (done, bytes.len());
            }
        }
    }

    fn every_step(method: &Method, bytes: &[u8]) -> (Complete, usize) {
        let whole = read_in_steps(method, bytes, bytes.len().max(1));
        for step in 1..bytes.len().min(40) {
            assert_eq!(read_in_steps(method, bytes, step), whole, "step {step}");
        }
        whole
    }

    #[test]
    fn content_length_body_in_any_split() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        let (done, used) = every_step(&Method::GET, r);
        assert_eq!(
            done,
            Complete {
                status: 200,
                reusable: true
            }
        );
        assert_eq!(used, r.len());
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let r = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n\
                  4;ext=1\r\nwiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nx-trailer: 1\r\n\r\n";
        let (done, used) = every_step(&Method::GET, r);
        assert_eq!(
            done,
            Complete {
                status: 201,
                reusable: true
            }
        );
        assert_eq!(used, r.len());
    }

    #[test]
    fn connection_close_and_http10_are_not_reusable() {
        let r = b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 2\r\n\r\nok";
        assert!(!every_step(&Method::GET, r).0.reusable);
        let r = b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok";
        assert!(!every_step(&Method::GET, r).0.reusable);
        let r = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok";
        assert!(every_step(&Method::GET, r).0.reusable);
        let r = b"HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\ncontent-length: 0\r\n\r\n";
        assert!(!every_step(&Method::GET, r).0.reusable);
    }

    #[test]
    fn body_until_close() {
        let r = b"HTTP/1.1 200 OK\r\n\r\nall of this until the end";
        let (done, used) = every_step(&Method::GET, r);
        assert_eq!(
            done,
            Complete {
                status: 200,
                reusable: false
            }
        );
        assert_eq!(used, r.len());
        // Closed in the middle of a framed body: truncated.
        let mut reader = ResponseReader::new(&Method::GET);
        let cut = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
        assert_eq!(reader.feed(cut), Ok(Fed::More(cut.len())));
        assert_eq!(reader.closed(), Err(WireError::Truncated));
        // Closed before any head.
        assert_eq!(
            ResponseReader::new(&Method::GET).closed(),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn bodyless_responses() {
        for r in [
            &b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\n\r\n",
        ] {
            assert_eq!(
                every_step(&Method::GET, r),
                (
                    Complete {
                        status: r[9..12].iter().fold(0, |a, d| a * 10 + u16::from(d - b'0')),
                        reusable: true
                    },
                    r.len()
                )
            );
        }
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(
            every_step(&Method::HEAD, r),
            (
                Complete {
                    status: 200,
                    reusable: true
                },
                r.len()
            )
        );
    }

    #[test]
    fn interim_responses_are_skipped() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
                  HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        assert_eq!(
            every_step(&Method::POST, r),
            (
                Complete {
                    status: 200,
                    reusable: true
                },
                r.len()
            )
        );
    }

    /// Two responses back to back in one read: the reader takes exactly the
    /// first, and a fresh reader the second from where it stopped.
    #[test]
    fn pipelined_responses_are_taken_one_at_a_time() {
        let first = &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none"[..];
        let second =
            &b"HTTP/1.1 503 Busy\r\ntransfer-encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n"[..];
        let both = [first, second].concat();
        let mut reader = ResponseReader::new(&Method::GET);
        let Ok(Fed::Done(n, done)) = reader.feed(&both) else {
            panic!("first response not read whole");
        };
        assert_eq!((n, done.status), (first.len(), 200));
        let mut reader = ResponseReader::new(&Method::GET);
        assert_eq!(
            reader.feed(&both[n..]),
            Ok(Fed::Done(
                second.len(),
                Complete {
                    status: 503,
                    reusable: true
                }
            ))
        );
    }

    #[test]
    fn malformed_heads_and_framing_are_errors() {
        let bad: &[(&[u8], WireError)] = &[
            (
                b"HTTP/2 200 OK\r\n\r\n",
                WireError::Malformed("not HTTP/1.x"),
            ),
            (
                b"SSH-2.0-OpenSSH\r\n\r\n",
                WireError::Malformed("not HTTP/1.x"),
            ),
            (
                b"HTTP/1.1 abc OK\r\n\r\n",
                WireError::Malformed("invalid status"),
            ),
            (
                b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
                WireError::Malformed("invalid header name"),
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n",
                WireError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
                WireError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
                WireError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                WireError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                WireError::BadChunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY",
                WireError::BadChunk,
            ),
        ];
        for (bytes, want) in bad {
            let got = ResponseReader::new(&Method::GET).feed(bytes);
            assert_eq!(
                got.as_ref().err(),
                Some(want),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("x-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(
            ResponseReader::new(&Method::GET).feed(&many),
            Err(WireError::Malformed("too many headers"))
        );
    }

    #[test]
    fn a_head_that_never_ends_is_refused_at_the_bound() {
        let mut head = b"HTTP/1.1 200 OK\r\nx-long: ".to_vec();
        head.resize(MAX_HEAD_BYTES + 10, b'a');
        let mut reader = ResponseReader::new(&Method::GET);
        assert_eq!(reader.feed(&head), Err(WireError::HeadTooLarge));
        let mut reader = ResponseReader::new(&Method::GET);
        assert_eq!(reader.feed(&head[..100]), Ok(Fed::More(0)));
    }

    #[test]
    fn both_lengths_frame_by_chunks_and_forbid_reuse() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        assert_eq!(
            every_step(&Method::GET, r),
            (
                Complete {
                    status: 200,
                    reusable: false
                },
                r.len()
            )
        );
    }

    fn parts(request: http::request::Builder) -> Parts {
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn requests_render_in_origin_form() {
        let mut out = Vec::new();
        let request =
            parts(http::Request::get("http://example.test:8080/a/b?c=1").header("x-one", "1"));
        render(&request, "example.test:8080", &Bytes::new(), &mut out);
        assert_eq!(
            out,
            b"GET /a/b?c=1 HTTP/1.1\r\nhost: example.test:8080\r\nx-one: 1\r\n\r\n"
        );
        let request = parts(http::Request::post("http://h/").header("host", "other"));
        render(&request, "h", &Bytes::from_static(b"{}"), &mut out);
        assert_eq!(
            out,
            b"POST / HTTP/1.1\r\nhost: other\r\ncontent-length: 2\r\n\r\n{}"
        );
        let request = parts(http::Request::post("http://h"));
        render(&request, "h", &Bytes::new(), &mut out);
        assert_eq!(
            out,
            b"POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n"
        );
    }

    /// A connection's answers read with its head memo read exactly as
    /// without: the same head again is taken from the memo, a changed one
    /// (another length, a close, chunked, a HEAD request) parsed afresh.
    #[test]
    fn a_remembered_head_reads_as_a_parsed_one() {
        let heads: [&[u8]; 5] = [
            b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 3\r\n\r\nxyz",
            b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 503 No\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        ];
        let mut memo = HeadMemo::default();
        for (i, &answer) in [0, 0, 1, 2, 2, 0, 3, 4, 4, 0]
            .map(|k| heads[k])
            .iter()
            .enumerate()
        {
            for method in [Method::GET, Method::HEAD] {
                let plain = ResponseReader::new(&method).feed(answer);
                let remembered =
                    ResponseReader::new(&method).feed_remembering(answer, Some(&mut memo));
                assert_eq!(plain, remembered, "answer {i} to {method}");
            }
        }
        let mut reader = ResponseReader::new(&Method::GET);
        reader.feed_remembering(heads[0], Some(&mut memo)).ok();
        assert_eq!(memo.matches(heads[1], false), Some(heads[1].len() - 3));
        assert_eq!(memo.matches(heads[2], false), None);
        assert_eq!(
            memo.matches(heads[1], true),
            None,
            "a HEAD answer frames apart"
        );
    }

    proptest::proptest! {
        /// Whatever answers a connection gets, in whatever pieces, the memo
        /// changes nothing a reader says.
        #[test]
        fn the_head_memo_never_changes_a_reading(
            answers in proptest::collection::vec((0usize..4, 0usize..40, proptest::bool::ANY), 1..12),
        ) {
            let mut memo = HeadMemo::default();
            for (kind, len, close) in answers {
                let head = match kind {
                    0 => format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n"),
                    1 => "HTTP/1.1 204 No Content\r\n".to_string(),
                    2 => format!("HTTP/1.0 200 OK\r\nContent-Length: {len}\r\n"),
                    _ => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n".to_string(),
                };
                let close = if close { "Connection: close\r\n" } else { "" };
                let body = "b".repeat(len);
                let bytes = format!("{head}{close}\r\n{body}");
                let plain = ResponseReader::new(&Method::GET).feed(bytes.as_bytes());
                let remembered = ResponseReader::new(&Method::GET)
                    .feed_remembering(bytes.as_bytes(), Some(&mut memo));
                proptest::prop_assert_eq!(plain, remembered);
            }
        }
    }
}
