//! Just enough HTTP/1.1 for one held event stream: the response head, then
//! the body framed by chunked encoding, a length, or the end of the
//! connection.
//!
//! A held stream is one task with one small buffer. hyper's client would
//! add a connection task, a body channel and its own 8 KiB+ read buffer per
//! stream, which at 20,000 streams is most of the agent's memory; the body
//! of an event stream needs none of that, so it is decoded here in place
//! and handed to the event parser without a copy.

/// Longest response head accepted (status line and headers).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most response headers looked at.
const MAX_HEADERS: usize = 48;

/// The parts of a response head a subscriber acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// `Content-Type` is `text/event-stream` (parameters aside).
    pub event_stream: bool,
    pub framing: Framing,
    /// Bytes of the head, so the caller can drop them from its buffer.
    pub len: usize,
}

/// How the body's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

/// A response head that is not HTTP/1.1 as we can read it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the response head is not valid HTTP: {0}")]
    Invalid(httparse::Error),
    #[error("the response head is longer than {MAX_HEAD_BYTES} bytes")]
    TooLong,
    #[error("the Content-Length is not a number")]
    BadLength,
}

/// Parses the head from the start of `buf`; `Ok(None)` when more bytes are
/// needed.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLong)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Invalid(e)),
    };
    let status = response.code.unwrap_or(0);
    let mut event_stream = false;
    let mut framing = Framing::Close;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-type") {
            let value = h.value.split(|&b| b == b';').next().unwrap_or_default();
            event_stream = value
                .trim_ascii()
                .eq_ignore_ascii_case(b"text/event-stream");
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is always last when present (RFC 9112 §6.1).
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                framing = Framing::Chunked;
            }
        } else if h.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or(HeadError::BadLength)?;
            framing = Framing::Length(n);
        }
    }
    Ok(Some(Head {
        status,
        event_stream,
        framing,
        len,
    }))
}

/// Chunked or length framing, decoded in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line: the size so far.
    Size(u64),
    /// Skipping a chunk extension up to the LF of the size line.
    Extension(u64),
    /// Bytes of the current chunk still to come.
    ChunkData(u64),
    /// Bytes of a length-framed body still to come.
    Data(u64),
    /// The CRLF after a chunk's data: still to see the LF.
    DataEnd,
    /// After the last chunk: the trailer section, at the start of a line
    /// (`true`) or inside one.
    Trailer(bool),
    /// The body is over.
    Done,
    /// Everything until the connection closes is body.
    Raw,
}

/// The body decoder of one response.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    state: State,
}

/// The body's framing is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the chunked body is malformed")]
pub struct BadChunk;

impl Body {
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Chunked => State::Size(0),
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Data(n),
            Framing::Close => State::Raw,
        };
        Body { state }
    }

    /// True once the framing says the body is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, passing every run of body bytes to `data`.
    pub fn decode(
        &mut self,
        mut input: &[u8],
        mut data: impl FnMut(&[u8]),
    ) -> Result<(), BadChunk> {
        while !input.is_empty() {
            match self.state {
                State::Raw => {
                    data(input);
                    return Ok(());
                }
                State::Done => return Ok(()),
                State::Data(left) | State::ChunkData(left) => {
                    let take = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    data(&input[..take]);
                    input = &input[take..];
                    let left = left - take as u64;
                    self.state = match (self.state, left) {
                        (State::ChunkData(_), 0) => State::DataEnd,
                        (State::ChunkData(_), left) => State::ChunkData(left),
                        (_, 0) => State::Done,
                        (_, left) => State::Data(left),
                    };
                }
                State::Size(size) => {
                    let b = input[0];
                    input = &input[1..];
                    self.state = match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            let digit = u64::from((b as char).to_digit(16).unwrap_or(0));
                            State::Size(size.checked_mul(16).ok_or(BadChunk)? | digit)
                        }
                        b';' | b' ' | b'\t' | b'\r' => State::Extension(size),
                        b'\n' => Self::after_size(size),
                        _ => return Err(BadChunk),
                    };
                }
                State::Extension(size) => match memchr::memchr(b'\n', input) {
                    Some(lf) => {
                        input = &input[lf + 1..];
                        self.state = Self::after_size(size);
                    }
                    None => return Ok(()),
                },
                State::DataEnd => {
                    let b = input[0];
                    input = &input[1..];
                    match b {
                        b'\r' => {}
                        b'\n' => self.state = State::Size(0),
                        _ => return Err(BadChunk),
                    }
                }
                State::Trailer(line_start) => {
                    let b = input[0];
                    input = &input[1..];
                    self.state = match (b, line_start) {
                        (b'\n', true) => State::Done,
                        (b'\n', false) => State::Trailer(true),
                        (b'\r', start) => State::Trailer(start),
                        _ => State::Trailer(false),
                    };
                }
            }
        }
        Ok(())
    }

    fn after_size(size: u64) -> State {
        if size == 0 {
            State::Trailer(true)
        } else {
            State::ChunkData(size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(framing: Framing, chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut body = Body::new(framing);
        let mut out = Vec::new();
        for c in chunks {
            body.decode(c, |d| out.extend_from_slice(d)).unwrap();
        }
        (out, body.is_done())
    }

    #[test]
    fn head_says_status_type_and_framing() {
        let wire: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
              Transfer-Encoding: chunked\r\n\r\nrest";
        let head = parse_head(wire).unwrap().unwrap();
        assert_eq!(head.status, 200);
        assert!(head.event_stream);
        assert_eq!(head.framing, Framing::Chunked);
        assert_eq!(head.len, wire.len() - 4);
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nConte").unwrap(), None);
        let plain = parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((plain.status, plain.event_stream), (404, false));
        assert_eq!(plain.framing, Framing::Length(3));
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let wire: &[u8] = b"5;x=y\r\nhello\r\n1\r\n!\r\n0\r\nTrailer: t\r\n\r\n";
        assert_eq!(
            decode_all(Framing::Chunked, &[wire]),
            (b"hello!".to_vec(), true)
        );
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(
            decode_all(Framing::Chunked, &bytewise),
            (b"hello!".to_vec(), true)
        );
        let mut body = Body::new(Framing::Chunked);
        assert_eq!(body.decode(b"zz\r\n", |_| {}), Err(BadChunk));
    }

    #[test]
    fn length_and_close_framing() {
        assert_eq!(
            decode_all(Framing::Length(3), &[b"ab", b"cdef"]),
            (b"abc".to_vec(), true)
        );
        assert_eq!(
            decode_all(Framing::Close, &[b"ab", b"cd"]),
            (b"abcd".to_vec(), false)
        );
    }

    proptest! {
        #[test]
        fn chunked_round_trips_at_any_split(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..8),
            cut in any::<usize>(),
        ) {
            let mut wire = Vec::new();
            for p in &pieces {
                wire.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
                wire.extend_from_slice(p);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let cut = cut % (wire.len() + 1);
            let (out, done) = decode_all(Framing::Chunked, &[&wire[..cut], &wire[cut..]]);
            prop_assert_eq!(out, pieces.concat());
            prop_assert!(done);
        }
    }
}
