//! Connections that know when their last bytes reached the machine, so
//! that `--delay` runs from a request's arrival rather than from when the
//! testbed got round to reading it.
//!
//! A reader woken late (a halted CPU, a busy runtime) would otherwise add
//! its lateness to the delay, and every generator measured against the
//! testbed would see it in its tail as if it were its own. The kernel's
//! receive stamp (`SO_TIMESTAMPNS`) says when the request came whatever
//! the reader's wake-up.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use loadfleet_sys::{recv_stamped_buf, stamp_arrivals, Arrival};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// When the last bytes read from a connection reached the machine; shared
/// by the connection and the requests it carries.
#[derive(Default)]
pub(crate) struct LastArrival(Mutex<Option<Arrival>>);

impl LastArrival {
    /// On the monotonic clock; `None` when the last read carried no stamp
    /// (the kernel turns stamping on in deferred work, so a connection's
    /// first segments may come without) or its stamp cannot be placed.
    pub(crate) fn instant(&self) -> Option<Instant> {
        (*self.0.lock().unwrap_or_else(|e| e.into_inner()))?.instant()
    }

    fn set(&self, stamp: Option<Arrival>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
    }
}

/// A TCP connection that reads with its arrival stamps when `last` is set,
/// and plainly otherwise (the testbed with no delay has no use for them,
/// and a plain read is cheaper).
pub(crate) struct Stamped {
    stream: TcpStream,
    last: Option<Arc<LastArrival>>,
}

impl Stamped {
    /// `stream`, stamping its arrivals into a fresh [`LastArrival`] when
    /// `stamp` (and the kernel agrees to), returned alongside.
    pub(crate) fn new(stream: TcpStream, stamp: bool) -> (Self, Option<Arc<LastArrival>>) {
        let last = stamp
            .then(|| match stamp_arrivals(&stream) {
                Ok(()) => Some(Arc::new(LastArrival::default())),
                Err(err) => {
                    tracing::debug!(%err, "no arrival stamps; the delay runs from the read");
                    None
                }
            })
            .flatten();
        let handle = last.clone();
        (Self { stream, last }, handle)
    }
}

impl AsyncRead for Stamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(last) = &this.last else {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        };
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.stream.poll_read_ready(cx))?;
            match this
                .stream
                .try_io(Interest::READABLE, || recv_stamped_buf(&this.stream, buf))
            {
                Ok((n, stamp)) => {
                    if n > 0 {
                        // A read without a stamp clears the last one: an
                        // older stamp would start the delay too early.
                        last.set(stamp);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
