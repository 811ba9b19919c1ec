//! Why a request got no HTTP status, in the report's words: what an
//! operator would act on, not the library's error type.
//!
//! Every mapping of a failure to an [`ErrorKind`] lives here — I/O, TLS,
//! h2, the HTTP/1.1 codec and running out of time — so the transports agree
//! on what each kind means.

use loadfleet_proto::vocab::ErrorKind;

use super::http1::wire::WireError;

/// The ways a request can fail, kept apart to classify them.
#[derive(Debug)]
pub(crate) enum ClientFailure {
    /// The URL has no host to connect to (or one a header cannot carry).
    NoHost,
    /// The host name did not resolve.
    Dns,
    /// The name resolved, but to no address reachable from the source
    /// address's family.
    NoAddress,
    /// The TCP connection could not be opened.
    Connect(std::io::Error),
    /// A handed-over slot had no connection where one was expected.
    NoConnection,
    /// The TLS handshake failed (certificate, protocol, or the peer hung up).
    Tls(std::io::Error),
    /// HTTP/2 failed: a GOAWAY, a reset stream, a protocol error, or the
    /// connection under it.
    H2(h2::Error),
    /// The TLS peer did not agree to h2 by ALPN.
    NoH2,
    /// Writing the request or reading the answer failed on an open
    /// connection.
    Io(std::io::Error),
    /// The answer was not valid HTTP/1.x, or the connection closed before
    /// it was whole.
    Wire(WireError),
}

impl ClientFailure {
    /// The report's error kind: what an operator would act on.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ClientFailure::NoHost => ErrorKind::InvalidRequest,
            ClientFailure::Dns | ClientFailure::NoAddress => ErrorKind::Dns,
            ClientFailure::NoConnection => ErrorKind::Reset,
            ClientFailure::NoH2 => ErrorKind::NoH2,
            ClientFailure::H2(e) => h2_kind(e),
            ClientFailure::Connect(io) => io_kind(io.kind(), true),
            // rustls reports its own failures as InvalidData; anything else
            // is the transport under it.
            ClientFailure::Tls(io) => match io.kind() {
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::Other => ErrorKind::Tls,
                kind => io_kind(kind, true),
            },
            ClientFailure::Io(io) => io_kind(io.kind(), false),
            ClientFailure::Wire(WireError::Truncated) => ErrorKind::Reset,
            ClientFailure::Wire(_) => ErrorKind::Protocol,
        }
    }
}

/// The error kind of an I/O failure, while opening a connection
/// (`connect`) or on one already open.
/// The kind of an I/O error on a connection already open (a held stream).
pub(crate) fn stream_io_kind(e: &std::io::Error) -> ErrorKind {
    io_kind(e.kind(), false)
}

fn io_kind(kind: std::io::ErrorKind, connect: bool) -> ErrorKind {
    use std::io::ErrorKind::*;
    match kind {
        ConnectionRefused => ErrorKind::Refused,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => ErrorKind::Reset,
        TimedOut => ErrorKind::Timeout,
        AddrNotAvailable | AddrInUse => ErrorKind::LocalAddress,
        NotFound | InvalidInput if connect => ErrorKind::Dns,
        _ if connect => ErrorKind::Connect,
        _ => ErrorKind::Io,
    }
}

/// The error kind of an h2 failure: the peer's GOAWAY or reset, h2 finding
/// the peer at fault, or a request h2 would not send.
fn h2_kind(e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        return io_kind(io.kind(), false);
    }
    if e.is_go_away() && e.is_remote() {
        ErrorKind::Goaway
    } else if e.is_reset() && e.is_remote() {
        ErrorKind::StreamReset
    } else if e.reason().is_some() {
        ErrorKind::Protocol
    } else {
        // E.g. a header h2 forbids.
        ErrorKind::InvalidRequest
    }
}
