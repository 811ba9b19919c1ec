//! One of the pool's connections, and the exchange under way on it.

use std::time::Duration;

use mio::net::TcpStream;
use tokio::time::Instant;

use crate::client::http1::wire::{HeadMemo, ResponseReader};

/// One open connection.
pub(super) struct Slot<T> {
    pub(super) stream: TcpStream,
    /// The TLS session over `stream`, for `https://`. The pool reads and
    /// writes the socket itself and has rustls only encrypt and decrypt, so
    /// an answer keeps the kernel's arrival stamp of its ciphertext and is
    /// read on the loop's ticks like a plain one. Boxed, as in
    /// [`crate::client::dial::Io`]: a session is over a kilobyte.
    pub(super) tls: Option<Box<rustls::ClientConnection>>,
    /// The end of a request the socket (or, over TLS, the session) did not
    /// take at once.
    pub(super) unsent: Vec<u8>,
    /// Answer bytes read and not consumed; held only while an answer
    /// arrives.
    pub(super) input: Vec<u8>,
    /// The last head this connection's server sent, read once.
    pub(super) memo: HeadMemo,
    /// Opened and not used yet: its connect and TLS times, for the first
    /// request on it to report as its own.
    pub(super) fresh: Option<(Duration, Option<Duration>)>,
    pub(super) busy: Option<Exchange<T>>,
}

/// An exchange under way on a connection.
pub(super) struct Exchange<T> {
    pub(super) tag: T,
    /// When its time runs out.
    pub(super) deadline: Instant,
    pub(super) reader: ResponseReader,
    pub(super) on_wire: Instant,
    /// When the head, and the last byte read so far, arrived.
    pub(super) head_at: Option<Instant>,
    pub(super) last_at: Option<Instant>,
    pub(super) pool_wait: Option<Duration>,
    /// The connect and TLS times of the connection, when this request is
    /// the first on it.
    pub(super) opened: Option<(Duration, Option<Duration>)>,
    /// Read size to ask for next: doubles while reads fill it.
    pub(super) chunk: usize,
    /// Answer bytes read so far.
    pub(super) size: usize,
}
