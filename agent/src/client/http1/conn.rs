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
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use tokio::io::{AsyncRead, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::either::Either;

use super::read::{arrived, give_buffer, take_buffer, READ_CHUNK, READ_MAX};
use super::wire::{render, Fed, HeadMemo, ResponseReader};
use crate::client::dial::Io;
use crate::client::failure::ClientFailure;
use crate::client::kept::Sink;
use crate::client::progress::Progress;

/// A connection of the task-driven pool, with what it keeps between
/// exchanges.
pub(super) struct Conn {
    io: Io,
    /// The request being sent, rendered in place; kept for its capacity.
    out: Vec<u8>,
    /// Response bytes read but not yet consumed; allocated only while an
    /// answer is arriving (see [`Conn::readable`]).
    input: Vec<u8>,
    /// The last head this connection's server sent, read once.
    memo: HeadMemo,
    /// The connection cannot carry another request: the server said
    /// close, the body ran to the close, an exchange failed or stopped
    /// half-way, or the server sent something unasked.
    spent: bool,
    /// Opened ahead of the run ([`super::Http1Client::open_ahead`]): its
    /// connect and TLS times, until the first request on it reports them
    /// as its own, as if it had opened the connection itself.
    ahead: Option<(Duration, Option<Duration>)>,
}

impl Conn {
    /// A connection over `io`. A plain one has the kernel stamp its
    /// answers' arrivals (see [`read_stamped`]).
    pub(super) fn new(io: Io) -> Self {
        if let Either::Left(tcp) = &io {
            if let Err(err) = crate::sys::stamp_arrivals(tcp) {
                tracing::debug!("answers are timed when read, not when they arrive: {err}");
            }
        }
        Self {
            io,
            out: Vec::with_capacity(512),
            input: Vec::new(),
            memo: HeadMemo::default(),
            // Until an exchange completes, the connection is in an
            // unknown state; a lease dropped before then closes it.
            spent: false,
            ahead: None,
        }
    }

    /// A connection opened before any request needed it, keeping its
    /// connect and TLS times for the first request that uses it.
    pub(super) fn opened_ahead(io: Io, connect: Duration, tls: Option<Duration>) -> Self {
        Self {
            ahead: Some((connect, tls)),
            ..Self::new(io)
        }
    }

    /// The connect and TLS times of a connection opened ahead, once: for
    /// the first request on it.
    pub(super) fn take_ahead(&mut self) -> Option<(Duration, Option<Duration>)> {
        self.ahead.take()
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

    /// Whether an exchange on this connection has already ended it (see
    /// `spent`), without looking at the socket.
    pub(super) fn is_spent(&self) -> bool {
        self.spent
    }

    /// Sends one request and reads its whole response, recording the
    /// time to the response head and the body's time in `progress`, and
    /// telling `saw` the answer's size so far (and whether it ended) after
    /// every read. The answer's head and body bytes go to `sink` as they
    /// are read (`()` keeps nothing; see [`crate::client::kept`]), which
    /// is handed back with the status. The connection is marked spent
    /// unless the exchange completes and the response allows reuse; a
    /// dropped (timed-out) exchange leaves it spent too, as that is set
    /// before the first await.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn exchange<S: Sink>(
        &mut self,
        parts: &Parts,
        host: &str,
        body: &Bytes,
        on_wire: Instant,
        progress: &Progress<'_>,
        saw: impl Fn(usize, bool),
        mut sink: S,
    ) -> Result<(u16, S), ClientFailure> {
        self.spent = true;
        render(parts, host, body, &mut self.out);
        self.io
            .write_all(&self.out)
            .await
            .map_err(ClientFailure::Io)?;
        self.io.flush().await.map_err(ClientFailure::Io)?;
        let mut reader = ResponseReader::new(&parts.method);
        // When the head, and then the last byte read so far, arrived: by
        // the kernel's stamp on a plain connection, by the clock on the
        // read otherwise.
        let mut head_at = None;
        let mut last_at = None;
        self.input.clear();
        let mut chunk = READ_CHUNK;
        // Answer bytes read so far.
        let mut size = 0;
        loop {
            if self.input.capacity() == 0 {
                self.readable().await.map_err(ClientFailure::Io)?;
                self.input = take_buffer();
            }
            if self.input.capacity() - self.input.len() < chunk / 2 {
                self.input.reserve(chunk);
            }
            let room = self.input.capacity() - self.input.len();
            let (n, stamp) = match &mut self.io {
                Either::Left(tcp) => read_stamped(tcp, &mut self.input).await,
                Either::Right(tls) => tokio::io::AsyncReadExt::read_buf(tls, &mut self.input)
                    .await
                    .map(|n| (n, None)),
            }
            .map_err(ClientFailure::Io)?;
            size += n;
            if n == room {
                // More is likely waiting: read it in larger pieces.
                chunk = (chunk * 2).min(READ_MAX);
            }
            if n == 0 {
                let done = reader.closed().map_err(ClientFailure::Wire)?;
                // The body's last byte came with the last read that had
                // any; the close only confirmed it.
                let end = last_at.unwrap_or_else(Instant::now);
                saw(size, true);
                self.finish(progress, on_wire, head_at, end);
                return Ok((done.status, sink));
            }
            let at = arrived(stamp.and_then(crate::sys::Arrival::instant), on_wire);
            last_at = Some(at);
            let fed = reader.feed_into(&self.input, Some(&mut self.memo), &mut sink);
            match fed.map_err(ClientFailure::Wire)? {
                Fed::More(used) => {
                    saw(size, false);
                    self.input.drain(..used);
                    if head_at.is_none() && reader.head_done() {
                        head_at = Some(at);
                    }
                }
                Fed::Done(used, done) => {
                    // Bytes after the response were never asked for.
                    let unasked = used < self.input.len();
                    // Given back, not kept: see [`Conn::readable`].
                    give_buffer(std::mem::take(&mut self.input));
                    saw(size, true);
                    self.finish(progress, on_wire, head_at, at);
                    self.spent = !done.reusable || unasked;
                    return Ok((done.status, sink));
                }
            }
        }
    }

    /// Waits until a plain connection has something to read, so that the
    /// read buffer is only taken once there is something to put in it: a
    /// request waiting on a slow server then holds no buffer. The wait
    /// costs no system call (tokio already knows the socket's readiness). A
    /// TLS connection may hold decrypted bytes already, so it goes straight
    /// to reading.
    async fn readable(&self) -> std::io::Result<()> {
        match &self.io {
            Either::Left(tcp) => tcp.readable().await,
            Either::Right(_) => Ok(()),
        }
    }

    fn finish(
        &self,
        progress: &Progress<'_>,
        on_wire: Instant,
        head_at: Option<Instant>,
        end: Instant,
    ) {
        // A response that arrived whole in one read has its head and its
        // end at the same instant.
        let head_at = head_at.unwrap_or(end);
        progress
            .ttfb
            .set(Some(head_at.saturating_duration_since(on_wire)));
        progress
            .body
            .set(Some(end.saturating_duration_since(head_at)));
        progress.answered.set(Some(end));
    }
}

/// Reads what a plain connection has into `input`'s spare room, with the
/// kernel's stamp of when it arrived. An answer's time is then the same
/// whether it was read at once or at the worker's next tick.
///
/// Like tokio's own read, a read that leaves room in the buffer took all
/// there was, so the socket's readiness is dropped with it: the next
/// exchange then waits for new data instead of first making a read that
/// can only say EAGAIN.
async fn read_stamped(
    tcp: &TcpStream,
    input: &mut Vec<u8>,
) -> std::io::Result<(usize, Option<crate::sys::Arrival>)> {
    let room = input.capacity() - input.len();
    let mut got = None;
    loop {
        tcp.readable().await?;
        let read = tcp.try_io(Interest::READABLE, || {
            let (n, stamp) = crate::sys::recv_stamped(tcp, input)?;
            if n > 0 && n < room {
                got = Some((n, stamp));
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Ok((n, stamp))
        });
        match read {
            Ok(read) => return Ok(read),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(read) = got.take() {
                    return Ok(read);
                }
            }
            Err(e) => return Err(e),
        }
    }
}
