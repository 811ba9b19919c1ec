//! The response head parser: status, whether the connection may carry
//! another request, and how the body is framed (RFC 9112 section 6.3);
//! and, for an answer kept for a flow, its headers as a map.

use std::mem::MaybeUninit;

use super::body::Framing;
use super::WireError;

/// Most header lines a response may have; hyper's default too.
pub(super) const MAX_HEADERS: usize = 100;
/// Largest response head (interim heads, status line and headers)
/// accepted. A head this large is not a real server's answer to a load
/// test; refusing it bounds the connection's buffer.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// What a final response head says, as far as the agent acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub status: u16,
    /// The server allows another request on this connection once the body
    /// has ended (keep-alive, and the body's end is known without a close).
    pub keep_alive: bool,
    pub framing: Framing,
    /// Bytes of the head, interim (1xx) heads before it included.
    pub len: usize,
}

/// Parses the response head at the start of `buf`, skipping interim 1xx
/// heads; `Ok(None)` until it is whole. The answer to a HEAD request
/// (`head_request`) has no body whatever its headers say. Headers that do
/// not frame the body go to `other`, once each, for a caller that wants
/// more than the framing (the event-stream subscriber reads the type).
pub(crate) fn parse_head(
    buf: &[u8],
    head_request: bool,
    mut other: impl FnMut(&httparse::Header<'_>),
) -> Result<Option<Head>, WireError> {
    let mut at = 0;
    loop {
        // Left uninitialised: filling 100 empty headers before each parse
        // costs a third as much again as parsing a typical head.
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let n = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            &buf[at..],
            &mut headers,
        ) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
                return Err(WireError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(WireError::Malformed(parse_error(e))),
        };
        at += n;
        if at > MAX_HEAD_BYTES {
            return Err(WireError::HeadTooLarge);
        }
        let status = response.code.unwrap_or(0);
        // 1xx other than 101 are interim: the real head follows.
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let version = response.version.unwrap_or(1);
        let (keep_alive, framing) =
            frame(status, version, head_request, response.headers, &mut other)?;
        return Ok(Some(Head {
            status,
            keep_alive,
            framing,
            len: at,
        }));
    }
}

/// Whether the connection may be reused, and the body's framing, from a
/// final head's status and headers.
fn frame(
    status: u16,
    version: u8,
    head_request: bool,
    headers: &[httparse::Header<'_>],
    other: &mut impl FnMut(&httparse::Header<'_>),
) -> Result<(bool, Framing), WireError> {
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
            chunked = tokens(h.value)
                .last()
                .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in tokens(h.value) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                    close = false;
                }
            }
        } else {
            other(h);
        }
    }
    let mut keep_alive = !close && status != 101;
    let bodyless = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    let framing = if bodyless {
        Framing::Length(0)
    } else if encoded {
        // With both, transfer-encoding wins and the connection must not be
        // reused (a request smuggling shape).
        if length.is_some() {
            keep_alive = false;
        }
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        length.map_or(Framing::UntilClose, Framing::Length)
    };
    if framing == Framing::UntilClose {
        keep_alive = false;
    }
    Ok((keep_alive, framing))
}

/// The headers of the final head among the whole heads `buf` holds (as
/// [`parse_head`] took them, interim 1xx heads first), as received: for
/// an answer kept for a flow ([`crate::client::Transport::send_keeping`]),
/// not for the measured path, which builds no map. Header values that are
/// not valid for `http` are left out (httparse already refused invalid
/// names and bytes).
pub(crate) fn header_map(buf: &[u8]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    let mut at = 0;
    while at < buf.len() {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(n)) = response.parse(&buf[at..]) else {
            break;
        };
        at += n;
        let status = response.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        map.reserve(response.headers.len());
        for h in response.headers.iter() {
            let name = http::HeaderName::from_bytes(h.name.as_bytes());
            let value = http::HeaderValue::from_bytes(h.value);
            if let (Ok(name), Ok(value)) = (name, value) {
                map.append(name, value);
            }
        }
        break;
    }
    map
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
