//! One keep-alive HTTP/1.1 connection, driven by the request that holds it.
//!
//! hyper's client connection runs in a task of its own and talks to the
//! request through channels: per request a dispatch message, a oneshot for
//! the response, a body channel and two more task wake-ups. A request here
//! holds its connection exclusively (through the pool's lease), so it can
//! do the exchange itself: render the request into the connection's buffer
//! and write it with one call, then read and parse the response in place
//! ([`super::wire`]). No task per connection, no channel, no header map.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::request::Parts;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;
use tokio_util::either::Either;

use super::wire::{render, Fed, ResponseReader};
use crate::client::dial::Io;
use crate::client::failure::ClientFailure;
use crate::client::Progress;

/// Room made at the end of the read buffer before each read: a typical
/// response head fits in one read. Kept small, and only held while a
/// response is being read: 10,000 connections at 8 KiB each would be
/// 80 MiB of the agent's memory.
const READ_CHUNK: usize = 2 * 1024;
/// A large body is read in pieces up to this size; the buffer is given
/// back after the exchange.
const READ_MAX: usize = 64 * 1024;

pub(in crate::client) struct Conn {
    io: Io,
    /// The request being sent, rendered in place; kept for its capacity.
    out: Vec<u8>,
    /// Response bytes read but not yet consumed; allocated only while an
    /// answer is arriving (see [`Conn::readable`]).
    input: Vec<u8>,
    /// The connection cannot carry another request: the server said
    /// close, the body ran to the close, an exchange failed or stopped
    /// half-way, or the server sent something unasked.
    spent: bool,
}

impl Conn {
    pub(super) fn new(io: Io) -> Self {
        Self {
            io,
            out: Vec::with_capacity(512),
            input: Vec::new(),
            // Until an exchange completes, the connection is in an
            // unknown state; a lease dropped before then closes it.
            spent: false,
        }
    }

    /// Whether the connection can no longer be used. An idle connection
    /// that became readable has either been closed by the server or sent
    /// something nobody asked for; both end it. The check polls the socket
    /// once without waiting: for plain TCP with no new readiness that is
    /// no system call at all.
    pub(super) fn is_closed(&mut self) -> bool {
        if self.spent {
            return true;
        }
        let mut probe = [0u8; 64];
        let mut buf = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut self.io).poll_read(&mut cx, &mut buf) {
            Poll::Pending => false,
            Poll::Ready(_) => {
                self.spent = true;
                true
            }
        }
    }

    /// Sends one request and reads its whole response, recording the
    /// time to the response head and the body's time in `progress`.
    /// The connection is marked spent unless the exchange completes and
    /// the response allows reuse; a dropped (timed-out) exchange leaves it
    /// marked spent too, since it was set before the first await.
    pub(super) async fn exchange(
        &mut self,
        parts: &Parts,
        host: &str,
        body: &Bytes,
        on_wire: Instant,
        progress: &Progress,
    ) -> Result<u16, ClientFailure> {
        self.spent = true;
        render(parts, host, body, &mut self.out);
        self.io
            .write_all(&self.out)
            .await
            .map_err(ClientFailure::Io)?;
        self.io.flush().await.map_err(ClientFailure::Io)?;
        let mut reader = ResponseReader::new(&parts.method);
        let mut head_at = None;
        self.input.clear();
        let mut chunk = READ_CHUNK;
        loop {
            if self.input.capacity() == 0 {
                self.readable().await.map_err(ClientFailure::Io)?;
            }
            if self.input.capacity() - self.input.len() < chunk / 2 {
                self.input.reserve(chunk);
            }
            let room = self.input.capacity() - self.input.len();
            let n = tokio::io::AsyncReadExt::read_buf(&mut self.io, &mut self.input)
                .await
                .map_err(ClientFailure::Io)?;
            if n == room {
                // More is likely waiting: read it in larger pieces.
                chunk = (chunk * 2).min(READ_MAX);
            }
            if n == 0 {
                let done = reader.closed().map_err(ClientFailure::Wire)?;
                self.finish(progress, on_wire, head_at);
                return Ok(done.status);
            }
            match reader.feed(&self.input).map_err(ClientFailure::Wire)? {
                Fed::More(used) => {
                    self.input.drain(..used);
                    if head_at.is_none() && reader.head_done() {
                        head_at = Some(Instant::now());
                    }
                }
                Fed::Done(used, done) => {
                    // Bytes after the response were never asked for.
                    let unasked = used < self.input.len();
                    // Given back, not kept: see [`Conn::readable`].
                    self.input = Vec::new();
                    self.finish(progress, on_wire, head_at);
                    self.spent = !done.reusable || unasked;
                    return Ok(done.status);
                }
            }
        }
    }

    /// Waits until a plain connection has something to read, so that the
    /// read buffer is only allocated once there is something to put in it:
    /// a request waiting on a slow server then holds no buffer, and 10,000
    /// of them in flight hold 20 MiB less (BENCHMARKS.md, P4). The wait
    /// costs no system call (tokio already knows the socket's readiness). A
    /// TLS connection may hold decrypted bytes already, so it goes straight
    /// to reading.
    async fn readable(&self) -> std::io::Result<()> {
        match &self.io {
            Either::Left(tcp) => tcp.readable().await,
            Either::Right(_) => Ok(()),
        }
    }

    fn finish(&self, progress: &Progress, on_wire: Instant, head_at: Option<Instant>) {
        let end = Instant::now();
        // A response that arrived whole in one read has its head and its
        // end at the same instant.
        let head_at = head_at.unwrap_or(end);
        progress.ttfb.set(Some(head_at - on_wire));
        progress.body.set(Some(end - head_at));
    }
}
