//! HTTP/1.1 connections driven by the open loop itself: no task, no waker
//! and no timer entry per request.
//!
//! The open loop writes a request onto an idle connection the moment it
//! sends it, and reads the answers itself, from its own epoll set, when it
//! drives the pool ([`DirectPool::drive`]). That set sits in tokio's
//! reactor as one more source ([`loadfleet_sys::WatchedPoll`]), so the
//! loop still waits on it together with its timer, a stop and hand-overs.
//! A request through [`crate::client::Transport`] instead costs a future,
//! a lease, a parked waker and a timer entry, which at high rates is a
//! large share of the agent's work per request.
//!
//! Only the open loop's commonest case comes here: HTTP/1.1 to one host,
//! `http://` or `https://`. The pool reads the sockets itself, so answers
//! carry the kernel's arrival stamps and the loop may read them on its own
//! ticks; over TLS, rustls only encrypts and decrypts what the pool writes
//! and reads. Opening a connection (resolution, `--bind`, the connect
//! phase, the TLS handshake) is still the [`Dialer`]'s, in a task of its
//! own, as it happens rarely.
//!
//! The parts: [`outgoing`] (requests as they wait to go out), [`state`]
//! (the connections by token and the ledger of slots), [`connection`],
//! [`dials`], [`socket`] (plain and TLS reads and writes), [`answer`] (an
//! exchange and its timing), [`deadlines`], and the epoll bridge here.

mod answer;
mod connection;
mod deadlines;
mod dials;
mod outgoing;
mod socket;
mod state;

use std::cell::{Cell, RefCell};
use std::io::ErrorKind as IoKind;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::Uri;
use loadfleet_proto::vocab::HttpProtocol;
use mio::Events;
use tokio::time::Instant;

use crate::client::dial::Dialer;
use crate::client::outcome::Exchanged;
use dials::DialDone;
pub(crate) use outgoing::{Fixed, Outgoing};
use outgoing::{Job, Waiting};
use state::State;

/// Readiness events taken from the kernel per call; more are taken by
/// calling again.
const EVENTS: usize = 256;

/// Most exchanges on the wire that [`DirectPool::read_on_wire`] reads
/// straight from their sockets. A read that finds nothing costs a system
/// call, as one look at the epoll set does: with one or two exchanges out
/// at a tick (a fast target at a moderate rate), their answers are nearly
/// always in, and reading them blind saves the look; with more, the look
/// is cheaper than the reads that would find nothing.
const BLIND_READS: usize = 2;

/// Keep-alive HTTP/1.1 connections to one host, owned by one worker and
/// driven by its open loop (see the module's comment). `T` is what the
/// loop keeps with each request and gets back with its outcome.
pub(crate) struct DirectPool<T> {
    /// The epoll set, which tokio's reactor watches for readiness.
    ready: loadfleet_sys::WatchedPoll,
    /// What one look at the set found, kept apart from the pool's state so
    /// that each event is taken up as it is read.
    events: RefCell<Events>,
    state: RefCell<State<T>>,
    dialer: Dialer,
    uri: Uri,
    /// `host[:port]` as the Host header carries it.
    host: String,
    timeout: Duration,
    /// Dials finished and not yet taken up, and who to wake for them.
    dialed: RefCell<Vec<DialDone<T>>>,
    dial_waker: Cell<Option<Waker>>,
    /// Dials under way: tasks of the worker's, each with a request that
    /// waits for its connection.
    dialing: Cell<usize>,
}

impl<T: Copy + 'static> DirectPool<T> {
    /// A pool for `uri`'s host, `http://` or `https://`; at most `connections`
    /// open at once, each request given `timeout` to wait for one (from when
    /// it was sent) and `timeout` again on it. Must be made on the worker's
    /// runtime.
    pub(crate) fn new(
        uri: &Uri,
        dialer: Dialer,
        connections: usize,
        timeout: Duration,
    ) -> std::io::Result<Self> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let ready = loadfleet_sys::WatchedPoll::new(poll)?;
        let host = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| std::io::Error::new(IoKind::InvalidInput, "the URL has no host"))?;
        Ok(Self {
            ready,
            events: RefCell::new(Events::with_capacity(EVENTS)),
            state: RefCell::new(State::new(registry, connections, Instant::now() + timeout)),
            dialer,
            uri: uri.clone(),
            host,
            timeout,
            dialed: RefCell::new(Vec::new()),
            dial_waker: Cell::new(None),
            dialing: Cell::new(0),
        })
    }

    /// Sends a request now: onto an idle connection, or a new one if a slot
    /// is free; otherwise it waits, oldest first, for the next connection
    /// freed. Its outcome comes out of a later [`Self::drive`]. True when it
    /// left at once; one that waits is handed out by
    /// [`Self::take_went_out`] when it leaves.
    pub(crate) fn submit(
        self: &Rc<Self>,
        request: Outgoing,
        sent_at: Instant,
        tag: T,
        done: &mut Vec<(T, Exchanged)>,
    ) -> bool {
        let job = Job {
            request,
            sent_at,
            tag,
        };
        let mut state = self.state.borrow_mut();
        if state.ledger.has_waiters() {
            let queued = state.ledger.wait();
            state.ledger.enqueue(Waiting {
                job,
                _queued: queued,
            });
            return false;
        }
        if let Some(token) = state.ledger.take_newest_idle() {
            self.put_on_wire(&mut state, token, job, sent_at, None, done);
        } else if state.ledger.take_slot() {
            drop(state);
            self.dial(job, None);
        } else {
            let queued = state.ledger.wait();
            state.ledger.enqueue(Waiting {
                job,
                _queued: queued,
            });
            return false;
        }
        true
    }

    /// Takes up everything that happened since the last call, up to `now`:
    /// answers read, connections closed, dials finished, time run out,
    /// waiting requests sent on the connections freed. Outcomes go to `done`.
    pub(crate) fn drive(self: &Rc<Self>, now: Instant, done: &mut Vec<(T, Exchanged)>) {
        // What the reactor knows is taken up now; anything arriving after
        // the look below sets it again (see [`Self::has_news`]).
        self.ready.clear_news();
        let finished = std::mem::take(&mut *self.dialed.borrow_mut());
        let mut state = self.state.borrow_mut();
        for (job, pool_wait, result) in finished {
            self.dial_finished(&mut state, job, pool_wait, result, done);
        }
        let mut events = self.events.borrow_mut();
        // Every answer read below converts its stamp against this one
        // reading of the clocks.
        let clocks = loadfleet_sys::Clocks::now();
        for (token, ended) in std::mem::take(&mut state.unfinished) {
            self.read(&mut state, token, ended, clocks.as_ref(), done);
        }
        loop {
            if let Err(e) = self.ready.events(&mut events, Some(Duration::ZERO)) {
                if e.kind() != IoKind::Interrupted {
                    tracing::warn!("polling the worker's connections: {e}");
                }
                break;
            }
            let mut seen = 0;
            for event in events.iter() {
                seen += 1;
                let token = event.token().0;
                if event.is_writable() {
                    self.flush(&mut state, token, done);
                }
                let ended = event.is_read_closed() || event.is_error();
                self.read(&mut state, token, ended, clocks.as_ref(), done);
            }
            if seen < EVENTS {
                break;
            }
        }
        self.expire(&mut state, now, done);
    }

    /// [`Self::drive`] for a tick, reading the sockets of the (at most
    /// [`BLIND_READS`]) exchanges on the wire without looking at the epoll
    /// set first; false, having done nothing, where the set must be looked
    /// at: more exchanges out, a request's end waiting to be written, or
    /// dials finished. Exchanges put on the wire since `woke`, the loop's
    /// last wake-up, are left to the next tick: sent a moment ago, their
    /// answers are almost never in yet, and a read finding nothing is a
    /// system call for nothing (their stamps keep their times exact). What
    /// the set still holds for the sockets read here is taken up,
    /// harmlessly, by the next drive.
    pub(crate) fn read_on_wire(
        self: &Rc<Self>,
        (now, woke): (Instant, Instant),
        done: &mut Vec<(T, Exchanged)>,
    ) -> bool {
        if !self.dialed.borrow().is_empty() {
            return false;
        }
        let mut state = self.state.borrow_mut();
        let out = state.ledger.out();
        if out > BLIND_READS || !state.unfinished.is_empty() {
            return false;
        }
        let mut busy = [(0usize, false); BLIND_READS];
        let mut found = 0;
        for (token, slot) in state.slots.iter().enumerate() {
            if found == out {
                break;
            }
            let Some((slot, ex)) = slot.as_ref().and_then(|s| Some((s, s.busy.as_ref()?))) else {
                continue;
            };
            if !slot.unsent.is_empty() {
                return false;
            }
            busy[found] = (token, ex.on_wire < woke);
            found += 1;
        }
        let clocks = loadfleet_sys::Clocks::now();
        for &(token, _) in busy[..found].iter().filter(|(_, old)| *old) {
            self.read(&mut state, token, false, clocks.as_ref(), done);
        }
        self.expire(&mut state, now, done);
        true
    }

    /// Whether [`Self::drive`] has something to take up, as far as the
    /// reactor has looked: costs no system call.
    pub(crate) fn has_news(&self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.poll_news(&mut cx).is_ready()
    }

    /// Waits until [`Self::drive`] has something to take up: an answer, a
    /// closed connection, a finished dial. The drive clears it.
    pub(crate) async fn news(&self) {
        std::future::poll_fn(|cx| self.poll_news(cx)).await
    }

    /// A poll rather than tokio's `readable()` and a `Notify`: the loop
    /// waits for news on every wake-up, and those register a waiter in a
    /// list under a lock each time.
    fn poll_news(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.dialed.borrow().is_empty() || !self.state.borrow().unfinished.is_empty() {
            return Poll::Ready(());
        }
        match self.ready.poll_news(cx) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => {
                self.dial_waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }

    /// Hands `each` the requests that left the queue since the last call:
    /// the ones to count as sent.
    pub(crate) fn take_went_out(&self, mut each: impl FnMut(T)) {
        let mut state = self.state.borrow_mut();
        for tag in state.went_out.drain(..) {
            each(tag);
        }
    }

    /// Every slot is taken and no connection is idle: the next request
    /// would wait.
    pub(crate) fn full(&self) -> bool {
        self.state.borrow().ledger.full()
    }

    /// Answers are under way that may not land whole in their sockets
    /// before the loop's next tick, so it must read them as they come: an
    /// earlier one outgrew its socket's window, or too few have ended yet
    /// to tell.
    pub(crate) fn answers_need_reading(&self) -> bool {
        self.state.borrow().ledger.answers_need_reading()
    }

    /// Requests wait for a connection: the answers that free one should be
    /// read as they come, not at the next tick; and the dials that open
    /// one are tasks of the worker's, which must run to finish them.
    pub(crate) fn queued(&self) -> bool {
        self.state.borrow().ledger.has_waiters() || self.dialing.get() > 0
    }

    /// Time during which requests waited for a connection since the last
    /// call, up to `now`.
    pub(crate) fn take_saturated(&self, now: Instant) -> Duration {
        self.state.borrow().ledger.take_saturated(now)
    }

    /// Connections established since the last call.
    pub(crate) fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        self.state.borrow_mut().ledger.take_connections()
    }
}

#[cfg(test)]
mod tests;
