//! One request's way through a transport, kept outside its future so that
//! a timeout, which drops the future, can still read where it got to.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;

use super::dial::Dialed;
use super::outcome::Phases;

/// Where a request got to, and the times it took on the way; set by the
/// transport as it goes, read by [`super::Transport::send`] once it ends.
pub(super) struct Progress<'a> {
    /// When it left the agent's queue: it began opening a connection or
    /// went onto one. Its time on the wire runs from here.
    pub(super) left_queue: Cell<Option<Instant>>,
    /// Told once, as it leaves the queue: from then on it counts as sent.
    out: Cell<Option<&'a dyn Fn()>>,
    /// When the request went onto a connection.
    pub(super) on_wire: Cell<Option<Instant>>,
    /// When it first found every connection busy and joined the queue.
    pub(super) queued_at: Cell<Option<Instant>>,
    /// How long it waited in that queue, once it left it.
    pub(super) waited: Cell<Option<Duration>>,
    /// The connect and TLS times of the connection this request opened.
    pub(super) connect: Cell<Option<Duration>>,
    pub(super) tls: Cell<Option<Duration>>,
    /// From going on the wire to the response's headers.
    pub(super) ttfb: Cell<Option<Duration>>,
    /// From the headers to the end of the body.
    pub(super) body: Cell<Option<Duration>>,
    /// When the whole answer had arrived, if the transport knows better
    /// than the moment its exchange returns (see
    /// [`super::Exchanged::answered`]).
    pub(super) answered: Cell<Option<Instant>>,
}

impl<'a> Progress<'a> {
    pub(super) fn new(out: &'a dyn Fn()) -> Self {
        Self {
            left_queue: Cell::new(None),
            out: Cell::new(Some(out)),
            on_wire: Cell::new(None),
            queued_at: Cell::new(None),
            waited: Cell::new(None),
            connect: Cell::new(None),
            tls: Cell::new(None),
            ttfb: Cell::new(None),
            body: Cell::new(None),
            answered: Cell::new(None),
        }
    }

    /// The request opened a connection: its connect and TLS times are
    /// this request's phases.
    pub(super) fn connected(&self, dialed: &Dialed) {
        self.connect.set(Some(dialed.connect));
        self.tls.set(dialed.tls);
    }

    /// The request goes onto its connection now; returns that instant.
    pub(super) fn went_on_wire(&self) -> Instant {
        let now = Instant::now();
        self.on_wire.set(Some(now));
        self.leave_queue(now);
        now
    }

    /// The request opens a connection of its own now.
    pub(super) fn connecting(&self) {
        self.leave_queue(Instant::now());
    }

    fn leave_queue(&self, now: Instant) {
        if self.left_queue.get().is_none() {
            self.left_queue.set(Some(now));
            if let Some(out) = self.out.take() {
                out();
            }
        }
    }

    /// Time spent waiting for one of the pool's connections, up to now for
    /// a request still waiting; `None` when it never had to wait. Reads
    /// the clock only for a request still waiting, the rare case.
    pub(super) fn pool_wait(&self) -> Option<Duration> {
        self.waited
            .get()
            .or_else(|| self.queued_at.get().map(|at| at.elapsed()))
    }

    pub(super) fn phases(&self) -> Phases {
        let on_wire = self.on_wire.get().is_some();
        Phases {
            connect: self.connect.get(),
            tls: self.tls.get(),
            ttfb: self.ttfb.get(),
            body: self.body.get(),
            new_connection: self.connect.get().is_some(),
            reused: on_wire && self.connect.get().is_none(),
        }
    }
}
