//! A connection's reads and writes, plain or through its TLS session:
//! rustls only encrypts and decrypts, and the socket is read here, so an
//! answer over TLS keeps the kernel's arrival stamp like a plain one.

use std::io::{ErrorKind as IoKind, Write};

use mio::net::TcpStream;

use super::connection::Slot;
use crate::client::failure::ClientFailure;
use crate::client::http1::read::{give_buffer, take_buffer, READ_CHUNK};

/// Full reads of session messages an idle TLS connection may take in one
/// go before it is closed: a server's tickets take one.
const IDLE_READS: usize = 4;

/// What one read of a connection's socket gave its answer.
pub(super) enum Received {
    /// Nothing more for now: the next edge says when it comes.
    Nothing,
    /// The peer's FIN.
    End,
    /// Bytes: whatever of them is answer (all of them, over plain TCP) is
    /// in the slot's `input`.
    Bytes {
        /// They filled the room there was: more is likely waiting.
        filled: bool,
        /// When they reached the machine.
        stamp: Option<loadfleet_sys::Arrival>,
        /// The TLS peer's `close_notify` came with them: the answer ends
        /// where they do.
        closed: bool,
    },
}

impl<T> Slot<T> {
    /// Starts `wire` on its way: what the socket (or the TLS session) does
    /// not take at once is kept for [`Self::push`].
    pub(super) fn send(&mut self, wire: &[u8]) -> std::io::Result<()> {
        let Some(tls) = self.tls.as_mut() else {
            let written = loop {
                match self.stream.write(wire) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == IoKind::WouldBlock => break 0,
                    Err(e) if e.kind() == IoKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            self.unsent.extend_from_slice(&wire[written..]);
            return Ok(());
        };
        let taken = tls.writer().write(wire)?;
        self.unsent.extend_from_slice(&wire[taken..]);
        self.push().map(drop)
    }

    /// Writes out what is still in the process; true once nothing is.
    pub(super) fn push(&mut self) -> std::io::Result<bool> {
        let Some(tls) = self.tls.as_mut() else {
            while !self.unsent.is_empty() {
                match self.stream.write(&self.unsent) {
                    Ok(n) => {
                        self.unsent.drain(..n);
                    }
                    Err(e) if e.kind() == IoKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == IoKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(true);
        };
        loop {
            if !self.unsent.is_empty() {
                let taken = tls.writer().write(&self.unsent)?;
                self.unsent.drain(..taken);
            }
            if !tls.wants_write() {
                if self.unsent.is_empty() {
                    return Ok(true);
                }
                // Room in the session and yet it took nothing: it is
                // closed for writing.
                return Err(std::io::Error::new(
                    IoKind::BrokenPipe,
                    "the TLS session no longer takes data",
                ));
            }
            match tls.write_tls(&mut self.stream) {
                Ok(_) => {}
                Err(e) if e.kind() == IoKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Part of a request is still in the process.
    pub(super) fn pending(&self) -> bool {
        !self.unsent.is_empty() || self.tls.as_ref().is_some_and(|tls| tls.wants_write())
    }

    /// Reads the socket once, asking for about `chunk` bytes; over TLS
    /// through `raw`, the plaintext going to `input`.
    pub(super) fn receive(
        &mut self,
        raw: &mut Vec<u8>,
        chunk: usize,
    ) -> Result<Received, ClientFailure> {
        if self.input.capacity() == 0 {
            self.input = take_buffer();
        }
        let Some(tls) = self.tls.as_mut() else {
            if self.input.capacity() - self.input.len() < chunk / 2 {
                self.input.reserve(chunk);
            }
            return Ok(match read_socket(&self.stream, &mut self.input) {
                Ok(Some((0, _, _))) => Received::End,
                Ok(Some((_, filled, stamp))) => Received::Bytes {
                    filled,
                    stamp,
                    closed: false,
                },
                Ok(None) => Received::Nothing,
                Err(e) => return Err(ClientFailure::Io(e)),
            });
        };
        raw.clear();
        raw.reserve(chunk);
        let (filled, stamp) = match read_socket(&self.stream, raw) {
            // A TLS peer that is done says so first (`close_notify`, below):
            // a bare FIN may be a cut, as the tasks' rustls reader says too.
            Ok(Some((0, _, _))) => {
                return Err(ClientFailure::Io(std::io::Error::from(
                    IoKind::UnexpectedEof,
                )))
            }
            Ok(Some((_, filled, stamp))) => (filled, stamp),
            Ok(None) => return Ok(Received::Nothing),
            Err(e) => return Err(ClientFailure::Io(e)),
        };
        let closed = decrypt(tls, raw, &mut self.input).map_err(ClientFailure::Tls)?;
        // A session may have something to say back (a key update's answer).
        // Whatever the socket does not take waits for its writable edge
        // (see `DirectPool::read`); a write that fails now fails the next
        // one, and does not take the answer just read with it.
        if tls.wants_write() {
            if let Err(e) = self.push() {
                tracing::debug!("answering the TLS session: {e}");
            }
        }
        Ok(Received::Bytes {
            filled,
            stamp,
            closed,
        })
    }

    /// Reads an idle connection's socket: false if the connection is done
    /// (closed, failed, or sent bytes nobody asked for). Over TLS, session
    /// messages of the server's own (a TLS 1.3 ticket after the handshake)
    /// are not an end, unless they fill [`IDLE_READS`] reads: a server
    /// that keeps them coming would hold the worker here.
    pub(super) fn idle_read(&mut self, raw: &mut Vec<u8>) -> bool {
        let keep = self.idle_reads(raw);
        // An idle connection holds no buffer.
        give_buffer(std::mem::take(&mut self.input));
        keep
    }

    fn idle_reads(&mut self, raw: &mut Vec<u8>) -> bool {
        for _ in 0..IDLE_READS {
            match self.receive(raw, READ_CHUNK) {
                Ok(Received::Nothing) => return true,
                Ok(Received::Bytes { closed, filled, .. }) => {
                    if closed || !self.input.is_empty() {
                        return false;
                    }
                    if !filled {
                        return true;
                    }
                }
                Ok(Received::End) | Err(_) => return false,
            }
        }
        false
    }
}

/// One `recv` into `buf`'s spare room: the bytes read (0 at the peer's
/// FIN), whether they filled the room, and their arrival stamp; `None`
/// when the socket has nothing now.
fn read_socket(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(usize, bool, Option<loadfleet_sys::Arrival>)>> {
    let room = buf.capacity() - buf.len();
    loop {
        match loadfleet_sys::recv_stamped(stream, buf) {
            Ok((n, stamp)) => return Ok(Some((n, n == room, stamp))),
            Err(e) if e.kind() == IoKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == IoKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Feeds `raw` ciphertext to `tls` and appends the plaintext it gives to
/// `input`; true if the peer closed the session (`close_notify`).
fn decrypt(
    tls: &mut rustls::ClientConnection,
    raw: &[u8],
    input: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let mut rest = raw;
    loop {
        if !rest.is_empty() {
            tls.read_tls(&mut rest)?;
        }
        tls.process_new_packets()
            .map_err(|e| std::io::Error::new(IoKind::InvalidData, e))?;
        match std::io::Read::read_to_end(&mut tls.reader(), input) {
            // The reader ends only at the peer's close_notify.
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == IoKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if rest.is_empty() {
            return Ok(false);
        }
    }
}
