//! Connections that know when their last bytes reached the machine, so
//! that `--delay` runs from a request's arrival rather than from when the
//! testbed got round to reading it.
//!
//! A reader woken late (a halted CPU, a busy runtime) would otherwise add
//! its lateness to the delay, and every generator measured against the
//! testbed would see it in its tail as if it were its own. The kernel's
//! receive stamp (`SO_TIMESTAMPNS`) says when the request came whatever
//! the reader's wake-up.
//!
//! The same stamp, held against the first write that follows it, is the
//! testbed's own measure of each answer's service time ([`AnswerTimes`]):
//! the ground truth a generator's measured times are checked against.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use hdrhistogram::Histogram;
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

    /// The stamp, cleared: an answer is timed once, by its first write.
    fn take(&self) -> Option<Arrival> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// How long after each request reached the machine the testbed began
/// writing its answer, in microseconds, for `GET /__stats`. Over HTTP/1.1,
/// where a connection carries one request at a time, that is each answer's
/// service time as the testbed saw it: a generator's service time is this
/// plus two trips over loopback (a few microseconds each), whenever the
/// generator got round to reading the answer.
pub(crate) struct AnswerTimes(Mutex<Histogram<u64>>);

impl AnswerTimes {
    /// Up to an hour, to three significant digits.
    pub(crate) fn new() -> Self {
        // Constant bounds that hdrhistogram accepts: the call cannot fail.
        let histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .expect("1 µs to an hour at 3 significant digits is a valid histogram");
        AnswerTimes(Mutex::new(histogram))
    }

    fn record(&self, after: std::time::Duration) {
        let us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX);
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .saturating_record(us.max(1));
    }

    /// `answered_after_us_count N`, then `_p50`, `_p99` and `_max`, one
    /// per line; nothing before the first answer timed.
    pub(crate) fn stats(&self) -> String {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if h.is_empty() {
            return String::new();
        }
        format!(
            "answered_after_us_count {}\nanswered_after_us_p50 {}\nanswered_after_us_p99 {}\nanswered_after_us_max {}\n",
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        )
    }
}

/// A TCP connection that reads with its arrival stamps when `last` is set,
/// and plainly otherwise (the testbed with no delay has no use for them,
/// and a plain read is cheaper).
pub(crate) struct Stamped {
    stream: TcpStream,
    last: Option<Arc<LastArrival>>,
    /// Where each answer's time since its request's stamp goes.
    answers: Option<Arc<AnswerTimes>>,
}

impl Stamped {
    /// `stream`, stamping its arrivals into a fresh [`LastArrival`] when
    /// there are `answers` to time (and the kernel agrees to), returned
    /// alongside.
    pub(crate) fn new(
        stream: TcpStream,
        answers: Option<&Arc<AnswerTimes>>,
    ) -> (Self, Option<Arc<LastArrival>>) {
        let last = answers
            .is_some()
            .then(|| match stamp_arrivals(&stream) {
                Ok(()) => Some(Arc::new(LastArrival::default())),
                Err(err) => {
                    tracing::debug!(%err, "no arrival stamps; the delay runs from the read");
                    None
                }
            })
            .flatten();
        let handle = last.clone();
        let answers = last.as_ref().and(answers.cloned());
        (
            Self {
                stream,
                last,
                answers,
            },
            handle,
        )
    }

    /// Times the answer about to be written against the stamp of the
    /// request it follows, if this is the first write since that request.
    fn answering(&self) {
        let (Some(last), Some(answers)) = (&self.last, &self.answers) else {
            return;
        };
        if let Some(arrived) = last.take().and_then(Arrival::instant) {
            answers.record(Instant::now().saturating_duration_since(arrived));
        }
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
        self.answering();
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.answering();
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
