//! The body decoder: content-length, chunked, or read until the close.
//!
//! It works on whatever bytes arrived and always takes all of them (up to
//! the body's end), keeping its place in a chunk-size line or a trailer in
//! its own state, so a caller never has to hold back part of a read. It
//! copies nothing: it says which bytes of its input are body bytes, and a
//! caller that only wants the framing (the request pools) ignores them
//! while one that reads the body (the event-stream subscriber) passes them
//! on as they arrive.

use std::fmt;
use std::ops::Range;

/// Longest chunk extension or trailer line accepted. Real servers send
/// none or a few bytes; a line without end must not hold a connection's
/// reader forever.
pub(super) const MAX_LINE_BYTES: usize = 8 * 1024;

/// How a response's body ends (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// After this many bytes.
    Length(u64),
    /// At the last chunk and its trailers.
    Chunked,
    /// When the server closes the connection.
    UntilClose,
}

/// Why a chunked body cannot be read: the server's fault, named so that a
/// test (and a reader of the logs) can tell which rule it broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkError {
    /// A chunk-size line does not start with a hex digit.
    SizeNotHex,
    /// A chunk size does not fit in 64 bits.
    SizeTooLarge,
    /// A chunk-size line has something other than whitespace or an
    /// extension after the size, or does not end in CRLF.
    SizeLineEnd,
    /// A chunk's data is not followed by CRLF.
    DataEnd,
    /// A trailer line does not end in CRLF.
    TrailerEnd,
    /// A chunk extension or trailer line is longer than [`MAX_LINE_BYTES`].
    LineTooLong,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::SizeNotHex => "a chunk size is not hexadecimal",
            ChunkError::SizeTooLarge => "a chunk size is larger than 64 bits",
            ChunkError::SizeLineEnd => "a chunk-size line does not end in CRLF",
            ChunkError::DataEnd => "a chunk's data does not end in CRLF",
            ChunkError::TrailerEnd => "a trailer line does not end in CRLF",
            ChunkError::LineTooLong => "a chunk extension or trailer line is too long",
        })
    }
}

impl std::error::Error for ChunkError {}

/// Where in the body the decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of a length-framed body still to come; `Length(0)`
    /// is also where every body ends, so that the common case, a length,
    /// ends without a state of its own.
    Length(u64),
    /// Everything until the connection closes is body.
    UntilClose,
    /// The hex digits of a chunk size: the size so far, and whether a
    /// digit has been seen.
    Size(u64, bool),
    /// Spaces or tabs after a chunk size.
    SizeSpace(u64),
    /// A chunk extension, skipped: this many of its bytes seen.
    Extension(u64, usize),
    /// The CR of a chunk-size line seen; its LF next.
    SizeLf(u64),
    /// This many bytes of the current chunk still to come.
    ChunkData(u64),
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// After the last chunk, at the start of a line: a trailer, or the
    /// empty line that ends the body.
    LineStart,
    /// Inside a trailer line: this many bytes seen.
    Trailer(usize),
    /// The CR of a trailer line seen.
    TrailerLf,
    /// The CR of the final empty line seen.
    EndLf,
}

/// The body is over.
const DONE: State = State::Length(0);

/// What one [`BodyDecoder::decode`] took from its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Bytes taken from the front of the input (framing and data).
    pub used: usize,
    /// The body bytes among them, as a range of the input; may be empty.
    pub data: Range<usize>,
    /// The body ended with the bytes taken: what follows belongs to the
    /// next message.
    pub end: bool,
}

/// What [`BodyDecoder::feed`] took from its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Took {
    /// Bytes taken from the front of the input: all of them unless the
    /// body ended before.
    pub used: usize,
    /// The body ended with them.
    pub end: bool,
}

/// Decodes one message body from bytes fed in the order they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size(0, false),
            Framing::UntilClose => State::UntilClose,
        };
        Self { state }
    }

    /// The body's framing has said it is complete.
    pub(crate) fn is_done(&self) -> bool {
        self.state == DONE
    }

    /// The connection's close ends this body (rather than cutting it
    /// short).
    pub(crate) fn ends_at_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// Takes framing bytes from the front of `input` up to the next run of
    /// body bytes, and that run. Unless the body ended, it takes at least
    /// one byte of a non-empty input, so calling it again on the rest goes
    /// through any input.
    #[inline]
    pub(crate) fn decode(&mut self, input: &[u8]) -> Result<Piece, ChunkError> {
        let mut at = 0;
        loop {
            match self.state {
                State::Length(left) => {
                    let take = left.min((input.len() - at) as u64);
                    self.state = State::Length(left - take);
                    return Ok(piece(at, take as usize, take == left));
                }
                State::ChunkData(left) => {
                    let take = left.min((input.len() - at) as u64);
                    self.state = if take == left {
                        State::DataCr
                    } else {
                        State::ChunkData(left - take)
                    };
                    return Ok(piece(at, take as usize, false));
                }
                State::UntilClose => return Ok(piece(at, input.len() - at, false)),
                framing => {
                    let Some(&b) = input.get(at) else {
                        return Ok(piece(at, 0, false));
                    };
                    at += 1;
                    self.state = step(framing, b)?;
                }
            }
        }
    }

    /// Takes all of `input` up to the body's end, handing each run of body
    /// bytes to `on_data` as it goes.
    #[inline]
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<Took, ChunkError> {
        if let State::Length(left) = self.state {
            // The common case in one step, without the loop's pieces.
            let take = left.min(input.len() as u64);
            self.state = State::Length(left - take);
            if take > 0 {
                on_data(&input[..take as usize]);
            }
            return Ok(Took {
                used: take as usize,
                end: take == left,
            });
        }
        let mut used = 0;
        loop {
            let rest = &input[used..];
            let piece = self.decode(rest)?;
            if !piece.data.is_empty() {
                on_data(&rest[piece.data]);
            }
            used += piece.used;
            if piece.end || used == input.len() {
                return Ok(Took {
                    used,
                    end: piece.end,
                });
            }
        }
    }
}

/// `len` body bytes after `at` framing bytes.
fn piece(at: usize, len: usize, end: bool) -> Piece {
    Piece {
        used: at + len,
        data: at..at + len,
        end,
    }
}

/// One framing byte of a chunked body (RFC 9112 section 7.1): sizes in
/// hex, lines ending in CRLF, extensions and trailers skipped.
fn step(state: State, b: u8) -> Result<State, ChunkError> {
    Ok(match state {
        State::Size(size, seen) => match (char::from(b).to_digit(16), seen) {
            (Some(digit), _) => State::Size(
                size.checked_mul(16)
                    .and_then(|s| s.checked_add(u64::from(digit)))
                    .ok_or(ChunkError::SizeTooLarge)?,
                true,
            ),
            (None, false) => return Err(ChunkError::SizeNotHex),
            (None, true) => match b {
                b'\t' | b' ' => State::SizeSpace(size),
                b';' => State::Extension(size, 0),
                b'\r' => State::SizeLf(size),
                _ => return Err(ChunkError::SizeLineEnd),
            },
        },
        State::SizeSpace(size) => match b {
            b'\t' | b' ' => State::SizeSpace(size),
            b';' => State::Extension(size, 0),
            b'\r' => State::SizeLf(size),
            _ => return Err(ChunkError::SizeLineEnd),
        },
        State::Extension(size, seen) => match b {
            b'\r' => State::SizeLf(size),
            b'\n' => return Err(ChunkError::SizeLineEnd),
            _ if seen >= MAX_LINE_BYTES => return Err(ChunkError::LineTooLong),
            _ => State::Extension(size, seen + 1),
        },
        State::SizeLf(size) => match (b, size) {
            (b'\n', 0) => State::LineStart,
            (b'\n', size) => State::ChunkData(size),
            _ => return Err(ChunkError::SizeLineEnd),
        },
        State::DataCr if b == b'\r' => State::DataLf,
        State::DataLf if b == b'\n' => State::Size(0, false),
        State::DataCr | State::DataLf => return Err(ChunkError::DataEnd),
        State::LineStart if b == b'\r' => State::EndLf,
        State::LineStart => State::Trailer(1),
        State::Trailer(_) if b == b'\r' => State::TrailerLf,
        State::Trailer(seen) if seen >= MAX_LINE_BYTES => return Err(ChunkError::LineTooLong),
        State::Trailer(seen) => State::Trailer(seen + 1),
        State::TrailerLf if b == b'\n' => State::LineStart,
        State::EndLf if b == b'\n' => DONE,
        State::TrailerLf | State::EndLf => return Err(ChunkError::TrailerEnd),
        // Never called for states that hold body bytes (see `decode`).
        State::Length(_) | State::UntilClose | State::ChunkData(_) => state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `reads` in turn as a connection would deliver them: the
    /// body bytes, the bytes taken after the body's end was reached (or
    /// all), and whether it ended.
    fn decode_reads(
        framing: Framing,
        reads: &[&[u8]],
    ) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut decoder = BodyDecoder::new(framing);
        let mut body = Vec::new();
        let mut used = 0;
        for read in reads {
            let took = decoder.feed(read, |d| body.extend_from_slice(d))?;
            used += took.used;
            if took.end {
                return Ok((body, used, true));
            }
            assert_eq!(took.used, read.len(), "a read not taken whole");
        }
        Ok((body, used, decoder.is_done()))
    }

    /// `wire` cut at each of `cuts` (sorted, within its length).
    fn split<'a>(wire: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut reads = Vec::new();
        let mut from = 0;
        for &cut in cuts {
            reads.push(&wire[from..cut]);
            from = cut;
        }
        reads.push(&wire[from..]);
        reads
    }

    #[test]
    fn chunked_with_extensions_and_trailers_in_any_split() {
        let wire: &[u8] =
            b"4;ext=1\r\nwiki\r\n5 \t;a=\"b\"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        let body = b"wikipedia in\r\n\r\nchunks.".to_vec();
        let end = wire.len() - 4;
        for a in 0..wire.len() {
            for b in a..wire.len() {
                let reads = split(wire, &[a, b]);
                assert_eq!(
                    decode_reads(Framing::Chunked, &reads),
                    Ok((body.clone(), end, true)),
                    "cut at {a} and {b}"
                );
            }
        }
    }

    #[test]
    fn length_and_close_framing() {
        assert_eq!(
            decode_reads(Framing::Length(3), &[b"ab", b"cdef"]),
            Ok((b"abc".to_vec(), 3, true))
        );
        assert_eq!(
            decode_reads(Framing::Length(0), &[b"x"]),
            Ok((Vec::new(), 0, true))
        );
        assert_eq!(
            decode_reads(Framing::UntilClose, &[b"ab", b"cd"]),
            Ok((b"abcd".to_vec(), 4, false))
        );
        assert!(BodyDecoder::new(Framing::UntilClose).ends_at_close());
        assert!(!BodyDecoder::new(Framing::Length(1)).ends_at_close());
    }

    #[test]
    fn malformed_chunks_are_named() {
        let long_extension = [&b"1;"[..], &[b'x'; MAX_LINE_BYTES + 1]].concat();
        let long_trailer = [&b"0\r\n"[..], &[b'x'; MAX_LINE_BYTES + 1]].concat();
        let cases: &[(&[u8], ChunkError)] = &[
            (b"zz\r\n", ChunkError::SizeNotHex),
            (b"\r\n", ChunkError::SizeNotHex),
            (b"-1\r\n", ChunkError::SizeNotHex),
            (b" 1\r\n", ChunkError::SizeNotHex),
            (b"1\n", ChunkError::SizeLineEnd),
            (b"1g\r\n", ChunkError::SizeLineEnd),
            (b"10000000000000000\r\n", ChunkError::SizeTooLarge),
            (b"1 x\r\n", ChunkError::SizeLineEnd),
            (b"1;a\nb", ChunkError::SizeLineEnd),
            (b"1\rx", ChunkError::SizeLineEnd),
            (b"2\r\nabXY", ChunkError::DataEnd),
            (b"2\r\nab\rY", ChunkError::DataEnd),
            (b"0\r\nx: 1\rY", ChunkError::TrailerEnd),
            (b"0\r\n\rY", ChunkError::TrailerEnd),
            (&long_extension, ChunkError::LineTooLong),
            (&long_trailer, ChunkError::LineTooLong),
        ];
        for (wire, want) in cases {
            assert_eq!(
                decode_reads(Framing::Chunked, &[wire]).map(|_| ()),
                Err(*want),
                "{}",
                String::from_utf8_lossy(wire)
            );
        }
        // Leading zeros are not a large size.
        assert_eq!(
            decode_reads(
                Framing::Chunked,
                &[b"00000000000000000001\r\nx\r\n0\r\n\r\n"]
            ),
            Ok((b"x".to_vec(), 30, true))
        );
    }

    /// A chunked body as servers write it, with optional extensions and
    /// trailers.
    fn chunked(pieces: &[Vec<u8>], extension: bool, trailer: bool) -> Vec<u8> {
        let mut wire = Vec::new();
        for p in pieces {
            wire.extend_from_slice(format!("{:X}", p.len()).as_bytes());
            if extension {
                wire.extend_from_slice(b";name=value");
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(p);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n");
        if trailer {
            wire.extend_from_slice(b"x-checksum: 1\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire
    }

    proptest! {
        /// However a connection cuts a chunked body into reads, the
        /// decoder gives the same body and ends at the same byte.
        #[test]
        fn chunked_gives_the_same_body_at_any_split(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..8),
            extension in any::<bool>(),
            trailer in any::<bool>(),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let mut wire = chunked(&pieces, extension, trailer);
            let end = wire.len();
            wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let reads = split(&wire, &cuts);
            prop_assert_eq!(
                decode_reads(Framing::Chunked, &reads),
                Ok((pieces.concat(), end, true))
            );
        }

        /// Whatever bytes come where a chunked body should be, the decoder
        /// gives a named error or goes on, and never panics; a size line
        /// with no hex digit is refused as such.
        #[test]
        fn any_bytes_are_decoded_or_refused_by_name(
            wire in proptest::collection::vec(any::<u8>(), 0..200),
            cut in any::<usize>(),
        ) {
            let cut = cut % (wire.len() + 1);
            let _ = decode_reads(Framing::Chunked, &[&wire[..cut], &wire[cut..]]);
            if let Some(&first) = wire.first() {
                if !first.is_ascii_hexdigit() {
                    prop_assert_eq!(
                        decode_reads(Framing::Chunked, &[&wire]).map(|_| ()),
                        Err(ChunkError::SizeNotHex)
                    );
                }
            }
        }
    }
}
