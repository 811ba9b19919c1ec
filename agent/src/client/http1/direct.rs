//! HTTP/1.1 connections driven by the open loop itself: no task, no waker
//! and no timer entry per request.
//!
//! Through [`crate::client::Transport`], every request is a future that a
//! task polls: the loop hands it to a runner, the runner takes a lease from
//! the pool, writes, parks its waker on the socket, is woken by tokio's
//! reactor, reads, and races a timer the whole time. Each step is cheap,
//! but together they were a sixth of the agent's user-space instructions
//! per request, and a task and its future per request in flight
//! (BENCHMARKS.md, "The open loop drives its own connections": 1.15 × the
//! requests per CPU-second at 20,000 req/s, 12 MiB instead of 55 with
//! 10,000 in flight). Here the open loop writes a request onto an
//! idle connection the moment it sends it, and reads the answers itself,
//! from its own epoll set, when it drives the pool. The pool's epoll file
//! descriptor sits in tokio's reactor as one more source, so the loop can
//! still wait on it together with its timer, a stop and hand-overs.
//!
//! Only the open loop's commonest case comes here: HTTP/1.1 to one host,
//! `http://` or `https://`. The pool reads the sockets itself, so answers
//! carry the kernel's arrival stamps and the loop may read them on its own
//! ticks; over TLS, rustls only encrypts and decrypts what the pool writes
//! and reads (`https://` at 20,000 req/s: 0.10 context switches per
//! request instead of 0.60, and a quarter less CPU than through tasks,
//! BENCHMARKS.md). Opening a connection (resolution, `--bind`, the connect
//! phase, the TLS handshake) is still the [`Dialer`]'s, in a task of its
//! own, as it happens rarely.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{ErrorKind as IoKind, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::body::Body;
use loadfleet_proto::vocab::HttpProtocol;
use mio::net::TcpStream;
use mio::{Events, Interest, Token};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;
use tokio_util::either::Either;

use super::conn::{arrived, spare, AnswerSizes, READ_CHUNK, READ_MAX};
use super::wire::{render, Fed, ResponseReader};
use crate::client::dial::{Dialed, Dialer};
use crate::client::failure::ClientFailure;
use crate::client::{timeout_kind, Exchanged, Phase, Phases, Queued, Saturation};
use crate::recorder::Outcome;

/// Readiness events taken from the kernel per call; more are taken by
/// calling again.
const EVENTS: usize = 256;

/// Full reads of session messages an idle TLS connection may take in one
/// go before it is closed: a server's tickets take one.
const IDLE_READS: usize = 4;

/// The most answer one look takes from one connection: the rest waits for
/// the next look, so that a server streaming an endless body as fast as
/// loopback goes cannot hold the loop in its reads, away from its
/// arrivals and from that request's deadline. About 0.1 ms of copying.
const LOOK_BUDGET: usize = 4 * READ_MAX;

/// A request as the loop hands it to the pool, and as the pool keeps it
/// until it is on the wire. Not boxed: a box would be one more allocation
/// per built request, to save a few bytes' copy of a fixed one.
#[allow(clippy::large_enum_variant)]
pub enum Outgoing {
    /// Built for this arrival ([`Outgoing::built`]); rendered as it goes
    /// onto the wire.
    Built(Parts, Bytes),
    /// The same every time, rendered once ([`DirectPool::fix`]).
    Fixed(Fixed),
}

/// A request's bytes as they go onto the wire, rendered once for every
/// arrival of a kind that never changes ([`crate::request::RequestMix::fixed_kind`]):
/// building and rendering it anew was some 700 of the agent's user-space
/// instructions per request (BENCHMARKS.md). Shared, not copied, by the
/// requests that carry it.
#[derive(Clone)]
pub struct Fixed(Rc<(Method, Vec<u8>)>);

impl Outgoing {
    /// A request built for this arrival.
    pub fn built(request: Request<Full<Bytes>>) -> Self {
        let (parts, body) = request.into_parts();
        Outgoing::Built(parts, full_bytes(body))
    }

    fn method(&self) -> &Method {
        match self {
            Outgoing::Built(parts, _) => &parts.method,
            Outgoing::Fixed(fixed) => &fixed.0 .0,
        }
    }
}

/// One request's way through the pool, with the caller's `tag`.
struct Job<T> {
    request: Outgoing,
    /// When the loop sent it out: its time (the timeout) runs from here.
    sent_at: Instant,
    tag: T,
}

impl<T> Job<T> {
    fn deadline(&self, timeout: Duration) -> Instant {
        self.sent_at + timeout
    }
}

/// A job that found no connection free and no slot to open one.
struct Waiting<T> {
    job: Job<T>,
    /// Counts it in the pool's saturation while it waits.
    _queued: Queued,
}

/// An exchange under way on a connection.
struct Exchange<T> {
    tag: T,
    /// When its time runs out.
    deadline: Instant,
    reader: ResponseReader,
    on_wire: Instant,
    /// When the head, and the last byte read so far, arrived.
    head_at: Option<Instant>,
    last_at: Option<Instant>,
    pool_wait: Option<Duration>,
    /// The connect and TLS times of the connection, when this request is
    /// the first on it.
    opened: Option<(Duration, Option<Duration>)>,
    /// Read size to ask for next: doubles while reads fill it.
    chunk: usize,
    /// Answer bytes read so far.
    size: usize,
}

/// One open connection.
struct Slot<T> {
    stream: TcpStream,
    /// The TLS session over `stream`, for `https://`. The pool reads and
    /// writes the socket itself and has rustls only encrypt and decrypt, so
    /// an answer keeps the kernel's arrival stamp of its ciphertext and is
    /// read on the loop's ticks like a plain one. Boxed, as in
    /// [`crate::client::dial::Io`]: a session is over a kilobyte.
    tls: Option<Box<rustls::ClientConnection>>,
    /// The end of a request the socket (or, over TLS, the session) did not
    /// take at once.
    unsent: Vec<u8>,
    /// Answer bytes read and not consumed; allocated only while an answer
    /// arrives, as in [`super::conn`].
    input: Vec<u8>,
    /// Opened and not used yet: its connect and TLS times, for the first
    /// request on it to report as its own.
    fresh: Option<(Duration, Option<Duration>)>,
    busy: Option<Exchange<T>>,
}

/// A finished dial and the job that asked for it.
type DialDone<T> = (
    Job<T>,
    Option<Duration>,
    Result<Result<Dialed, ClientFailure>, ()>,
);

struct State<T> {
    /// The epoll set's registry (a descriptor of its own), to add and
    /// drop connections.
    registry: mio::Registry,
    /// Connections by token; `None` where one was closed.
    slots: Vec<Option<Slot<T>>>,
    vacant: Vec<usize>,
    /// Idle connections, by token; the most recently used last.
    idle: Vec<usize>,
    queue: VecDeque<Waiting<T>>,
    /// Slots taken: connections open or being opened.
    open: usize,
    /// No exchange on the wire runs out of time before this: the
    /// connections are looked over only then (see [`DirectPool::expire`]).
    next_check: Instant,
    /// The request being written; shared, as a connection keeps bytes only
    /// when its socket did not take them all.
    out: Vec<u8>,
    /// Ciphertext just read from a TLS connection, until its session has
    /// taken it: shared too, as a session keeps what it has not decrypted.
    raw: Vec<u8>,
    /// Connections established since last taken.
    established: u64,
    /// See [`DirectPool::answers_need_reading`].
    answer_sizes: AnswerSizes,
    /// Connections whose look stopped at [`LOOK_BUDGET`] with more to
    /// read, and whether their peer had ended its side: no new edge may
    /// come for what is already in their sockets, so the next drive reads
    /// them first.
    unfinished: Vec<(usize, bool)>,
}

/// Keep-alive HTTP/1.1 connections to one host, owned by one worker and
/// driven by its open loop (see the module's comment). `T` is what the
/// loop keeps with each request and gets back with its outcome.
pub struct DirectPool<T> {
    /// The epoll set, which tokio's reactor watches for readiness.
    ready: AsyncFd<Epoll>,
    state: RefCell<State<T>>,
    dialer: Dialer,
    uri: Uri,
    /// `host[:port]` as the Host header carries it.
    host: String,
    timeout: Duration,
    max_open: usize,
    saturation: Rc<Saturation>,
    /// Dials finished and not yet taken up, and who to wake for them.
    dialed: RefCell<Vec<DialDone<T>>>,
    dial_waker: Cell<Option<Waker>>,
    /// Dials under way: tasks of the worker's, each with a request that
    /// waits for its connection.
    dialing: Cell<usize>,
}

/// The pool's epoll set, and its descriptor for tokio's reactor, read once
/// so that the reactor never needs the set while it is being polled.
struct Epoll {
    poll: RefCell<mio::Poll>,
    /// What one look at the set found, kept apart from the pool's state so
    /// that each event is taken up as it is read.
    events: RefCell<Events>,
    fd: RawFd,
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl<T: 'static> DirectPool<T> {
    /// A pool for `uri`'s host, `http://` or `https://`; at most `connections`
    /// open at once, each request given `timeout` from when it was sent.
    /// Must be made on the worker's runtime.
    pub fn new(
        uri: &Uri,
        dialer: Dialer,
        connections: usize,
        timeout: Duration,
    ) -> std::io::Result<Self> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let fd = poll.as_raw_fd();
        let epoll = Epoll {
            poll: RefCell::new(poll),
            events: RefCell::new(Events::with_capacity(EVENTS)),
            fd,
        };
        // SAFETY: `Epoll` owns the descriptor (through its `mio::Poll`),
        // returns that same one from every `as_raw_fd`, and keeps it open
        // until the `AsyncFd` drops it: the contract of a registration
        // (tokio's safe constructors are deprecated as unsound).
        let ready =
            unsafe { AsyncFd::register_with_interest(epoll, tokio::io::Interest::READABLE) }?;
        let host = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or_else(|| std::io::Error::new(IoKind::InvalidInput, "the URL has no host"))?;
        Ok(Self {
            ready,
            state: RefCell::new(State {
                registry,
                slots: Vec::new(),
                vacant: Vec::new(),
                idle: Vec::new(),
                queue: VecDeque::new(),
                open: 0,
                next_check: Instant::now() + timeout,
                out: Vec::with_capacity(512),
                raw: Vec::new(),
                established: 0,
                answer_sizes: AnswerSizes::default(),
                unfinished: Vec::new(),
            }),
            dialer,
            uri: uri.clone(),
            host,
            timeout,
            max_open: connections.max(1),
            saturation: Rc::default(),
            dialed: RefCell::new(Vec::new()),
            dial_waker: Cell::new(None),
            dialing: Cell::new(0),
        })
    }

    /// Opens up to `n` connections before any request needs them, as
    /// [`crate::client::Transport::open_ahead`] does for the task-driven
    /// pool: the first request on each reports its connect time as its own.
    /// A connection takes its slot only once it is open, so dials dropped
    /// unfinished (the run started first) hold none.
    pub async fn open_ahead(&self, n: usize) {
        let n = n.min(self.max_open.saturating_sub(self.state.borrow().open));
        let dials = (0..n).map(|_| self.dialer.dial(&self.uri));
        for dialed in futures::future::join_all(dials).await {
            let mut state = self.state.borrow_mut();
            match dialed.map_err(|e| format!("{e:?}")).and_then(|d| {
                state
                    .adopt(d.io)
                    .map(|token| (token, d.connect, d.tls))
                    .map_err(|e| e.to_string())
            }) {
                Ok((token, connect, tls)) => {
                    if let Some(slot) = state.slots[token].as_mut() {
                        slot.fresh = Some((connect, tls));
                    }
                    state.open += 1;
                    state.idle.push(token);
                }
                Err(e) => tracing::debug!("opening a connection ahead of the run: {e}"),
            }
        }
    }

    /// `request` rendered as this pool puts it on the wire, to be sent as
    /// it is for every arrival of its kind.
    pub fn fix(&self, request: Request<Full<Bytes>>) -> Fixed {
        let (parts, body) = request.into_parts();
        let mut wire = Vec::new();
        render(&parts, &self.host, &full_bytes(body), &mut wire);
        Fixed(Rc::new((parts.method, wire)))
    }

    /// Sends a request now: onto an idle connection, or a new one if a slot
    /// is free; otherwise it waits, oldest first, for the next connection
    /// freed. Its outcome comes out of a later [`Self::drive`].
    pub fn submit(
        self: &Rc<Self>,
        request: Outgoing,
        sent_at: Instant,
        tag: T,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let job = Job {
            request,
            sent_at,
            tag,
        };
        let mut state = self.state.borrow_mut();
        if !state.queue.is_empty() {
            state.queue.push_back(Waiting {
                job,
                _queued: self.saturation.wait(),
            });
            return;
        }
        if let Some(token) = state.idle.pop() {
            self.put_on_wire(&mut state, token, job, sent_at, None, done);
        } else if state.open < self.max_open {
            state.open += 1;
            drop(state);
            self.dial(job, None);
        } else {
            state.queue.push_back(Waiting {
                job,
                _queued: self.saturation.wait(),
            });
        }
    }

    /// Takes up everything that happened since the last call, up to `now`:
    /// answers read, connections closed, dials finished, time run out,
    /// waiting requests sent on the connections freed. Outcomes go to `done`.
    pub fn drive(self: &Rc<Self>, now: Instant, done: &mut Vec<(T, Exchanged)>) {
        // What the reactor knows is taken up now; anything arriving after
        // the look below sets it again (see [`Self::has_news`]).
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(Ok(mut seen)) = self.ready.poll_read_ready(&mut cx) {
            seen.clear_ready();
        }
        let finished = std::mem::take(&mut *self.dialed.borrow_mut());
        let mut state = self.state.borrow_mut();
        for (job, pool_wait, result) in finished {
            self.dial_finished(&mut state, job, pool_wait, result, done);
        }
        let epoll = self.ready.get_ref();
        let mut events = epoll.events.borrow_mut();
        // Every answer read below converts its stamp against this one
        // reading of the clocks.
        let clocks = loadfleet_sys::Clocks::now();
        for (token, ended) in std::mem::take(&mut state.unfinished) {
            self.read(&mut state, token, ended, clocks.as_ref(), done);
        }
        loop {
            let polled = epoll
                .poll
                .borrow_mut()
                .poll(&mut events, Some(Duration::ZERO));
            if let Err(e) = polled {
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

    /// Whether [`Self::drive`] has something to take up, as far as the
    /// reactor has looked: costs no system call.
    pub fn has_news(&self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.poll_news(&mut cx).is_ready()
    }

    /// Waits until [`Self::drive`] has something to take up: an answer, a
    /// closed connection, a finished dial. The drive clears it.
    pub async fn news(&self) {
        std::future::poll_fn(|cx| self.poll_news(cx)).await
    }

    /// A poll rather than tokio's `readable()` and a `Notify`: the loop
    /// waits for news on every wake-up, and those register a waiter in a
    /// list under a lock each time.
    fn poll_news(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.dialed.borrow().is_empty() || !self.state.borrow().unfinished.is_empty() {
            return Poll::Ready(());
        }
        match self.ready.poll_read_ready(cx) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending => {
                self.dial_waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }

    /// When the pool must be driven again at the latest, for a request
    /// whose time runs out then.
    pub fn next_deadline(&self) -> Option<Instant> {
        let state = self.state.borrow();
        let busy = state.open > state.idle.len();
        let queued = state.queue.front().map(|w| w.job.deadline(self.timeout));
        busy.then_some(state.next_check)
            .into_iter()
            .chain(queued)
            .min()
    }

    /// Every slot is taken and no connection is idle: the next request
    /// would wait.
    pub fn full(&self) -> bool {
        let state = self.state.borrow();
        state.open >= self.max_open && state.idle.is_empty()
    }

    /// Answers are under way that may not land whole in their sockets
    /// before the loop's next tick: an earlier one outgrew its socket's
    /// window, or too few have ended yet to tell ([`AnswerSizes`]). A tick
    /// that slept through them would hold their servers back until it
    /// woke, and time the answers' ends by its own wake-up (4 MiB answers
    /// from nginx at 50 req/s: latency p50 23 ms that way, 1.3–2.3 ms read
    /// as they come; oha 1.6–3.5).
    pub fn answers_need_reading(&self) -> bool {
        let state = self.state.borrow();
        state.answer_sizes.may_not_fit() && state.open > state.idle.len()
    }

    /// Requests wait for a connection: the answers that free one should be
    /// read as they come, not at the next tick; and the dials that open
    /// one are tasks of the worker's, which must run to finish them.
    pub fn queued(&self) -> bool {
        !self.state.borrow().queue.is_empty() || self.dialing.get() > 0
    }

    /// Time during which requests waited for a connection since the last
    /// call, up to `now`.
    pub fn take_saturated(&self, now: Instant) -> Duration {
        self.saturation.take(now)
    }

    /// Connections established since the last call.
    pub fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        match std::mem::take(&mut self.state.borrow_mut().established) {
            0 => Vec::new(),
            n => vec![(HttpProtocol::Http1, n)],
        }
    }

    /// Opens a connection for `job` in a task of its own; the job goes on
    /// it when [`Self::drive`] takes the dial up. Its slot is taken.
    fn dial(self: &Rc<Self>, job: Job<T>, pool_wait: Option<Duration>) {
        let pool = self.clone();
        self.dialing.set(self.dialing.get() + 1);
        tokio::task::spawn_local(async move {
            let deadline = job.deadline(pool.timeout);
            let result = tokio::time::timeout_at(deadline, pool.dialer.dial(&pool.uri))
                .await
                .map_err(|_| ());
            pool.dialing.set(pool.dialing.get().saturating_sub(1));
            pool.dialed.borrow_mut().push((job, pool_wait, result));
            if let Some(waker) = pool.dial_waker.take() {
                waker.wake();
            }
        });
    }

    fn dial_finished(
        self: &Rc<Self>,
        state: &mut State<T>,
        job: Job<T>,
        pool_wait: Option<Duration>,
        result: Result<Result<Dialed, ClientFailure>, ()>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let outcome = match result {
            Ok(Ok(dialed)) => {
                let opened = (dialed.connect, dialed.tls);
                match state.adopt(dialed.io) {
                    Ok(token) => {
                        if let Some(slot) = state.slots[token].as_mut() {
                            slot.fresh = Some(opened);
                        }
                        self.put_on_wire(state, token, job, Instant::now(), pool_wait, done);
                        return;
                    }
                    Err(e) => Outcome::Error(ClientFailure::Connect(e).kind()),
                }
            }
            Ok(Err(failure)) => Outcome::Error(failure.kind()),
            Err(()) => Outcome::Error(timeout_kind(Phase::Connecting, pool_wait, self.timeout)),
        };
        state.open -= 1;
        done.push((
            job.tag,
            Exchanged {
                outcome,
                on_wire: None,
                pool_wait,
                phases: Phases::default(),
                answered: None,
            },
        ));
    }

    /// Writes `job` onto the connection at `token`, which must be open and
    /// not busy. A connection that cannot take it is closed and the job
    /// fails.
    fn put_on_wire(
        &self,
        state: &mut State<T>,
        token: usize,
        job: Job<T>,
        on_wire: Instant,
        pool_wait: Option<Duration>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let State {
            registry,
            slots,
            out,
            next_check,
            ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        let wire = match &job.request {
            Outgoing::Built(parts, body) => {
                render(parts, &self.host, body, out);
                out.as_slice()
            }
            Outgoing::Fixed(fixed) => fixed.0 .1.as_slice(),
        };
        let opened = slot.fresh.take();
        let written = slot.send(wire).and_then(|()| {
            if slot.pending() {
                registry.reregister(
                    &mut slot.stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
            }
            Ok(())
        });
        if let Err(e) = written {
            done.push((
                job.tag,
                Exchanged {
                    outcome: Outcome::Error(ClientFailure::Io(e).kind()),
                    on_wire: Some(on_wire),
                    pool_wait,
                    phases: phases(opened, None),
                    answered: None,
                },
            ));
            state.close(token);
            return;
        }
        let deadline = job.deadline(self.timeout);
        *next_check = (*next_check).min(deadline);
        slot.busy = Some(Exchange {
            tag: job.tag,
            deadline,
            reader: ResponseReader::new(job.request.method()),
            on_wire,
            head_at: None,
            last_at: None,
            pool_wait,
            opened,
            chunk: READ_CHUNK,
            size: 0,
        });
    }

    /// Writes what the socket at `token` did not take before.
    fn flush(&self, state: &mut State<T>, token: usize, done: &mut Vec<(T, Exchanged)>) {
        let State {
            registry, slots, ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        match slot.push() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.finish(state, token, Err(ClientFailure::Io(e)), done),
        }
        if let Err(e) = registry.reregister(&mut slot.stream, Token(token), Interest::READABLE) {
            self.finish(state, token, Err(ClientFailure::Io(e)), done);
        }
    }

    /// Reads what the connection at `token` has: its answer, or, on an
    /// idle connection, the server's close (or bytes nobody asked for,
    /// which end it too). A read that leaves room in the buffer took all
    /// there was, so the next edge will say when more comes, unless the
    /// peer has `ended` its side: that edge is this one, and only the read
    /// after the data sees the end.
    fn read(
        &self,
        state: &mut State<T>,
        token: usize,
        ended: bool,
        clocks: Option<&loadfleet_sys::Clocks>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let State {
            slots,
            raw,
            answer_sizes,
            unfinished,
            ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        if slot.busy.is_none() {
            // A FIN that came with a session's ticket is this edge's too:
            // the read that takes the ticket may not reach it.
            if ended || !slot.idle_read(raw) {
                state.close(token);
            }
            return;
        }
        // Answer bytes this look found in the socket.
        let mut taken = 0;
        let result = loop {
            let chunk = slot.busy.as_ref().map_or(READ_CHUNK, |ex| ex.chunk);
            let before = slot.input.len();
            let received = slot.receive(raw, chunk);
            let Some(ex) = slot.busy.as_mut() else {
                break None;
            };
            match received {
                Ok(Received::Nothing) => break None,
                Ok(Received::End) => {
                    // The body's last byte came with the last read that
                    // had any; the close only confirmed it.
                    let end = ex.last_at.unwrap_or_else(Instant::now);
                    break Some(
                        ex.reader
                            .closed()
                            .map(|c| (c.status, false, end))
                            .map_err(ClientFailure::Wire),
                    );
                }
                Ok(Received::Bytes {
                    filled,
                    stamp,
                    closed,
                }) => {
                    // Over TLS a read may hold only the session's own
                    // messages (a ticket, the close_notify): the answer's
                    // times are those of its own bytes.
                    taken += slot.input.len() - before;
                    ex.size += slot.input.len() - before;
                    answer_sizes.saw(ex.size, false);
                    if slot.input.len() > before || ex.last_at.is_none() {
                        ex.last_at =
                            Some(arrived(stamp.and_then(|s| clocks?.instant(s)), ex.on_wire));
                    }
                    let at = ex.last_at.unwrap_or(ex.on_wire);
                    if filled {
                        // More is likely waiting: read it in larger pieces.
                        ex.chunk = (ex.chunk * 2).min(READ_MAX);
                    }
                    let spent = taken >= LOOK_BUDGET;
                    match ex.reader.feed(&slot.input) {
                        Ok(Fed::More(used)) => {
                            slot.input.drain(..used);
                            if ex.head_at.is_none() && ex.reader.head_done() {
                                ex.head_at = Some(at);
                            }
                            if closed {
                                // The TLS peer said it is done: as a FIN
                                // after these bytes.
                                break Some(
                                    ex.reader
                                        .closed()
                                        .map(|c| (c.status, false, at))
                                        .map_err(ClientFailure::Wire),
                                );
                            }
                            if !filled && !ended {
                                break None;
                            }
                            if spent {
                                unfinished.push((token, ended));
                                break None;
                            }
                        }
                        Ok(Fed::Done(used, complete)) => {
                            // Bytes after the answer, a request not yet all
                            // written, or the peer's end (whose edge this
                            // is) end the connection.
                            let clean =
                                used == slot.input.len() && !slot.pending() && !ended && !closed;
                            spare::give(std::mem::take(&mut slot.input));
                            break Some(Ok((complete.status, complete.reusable && clean, at)));
                        }
                        Err(e) => break Some(Err(ClientFailure::Wire(e))),
                    }
                }
                Err(failure) => break Some(Err(failure)),
            }
        };
        if let Some(slot) = state.slots.get_mut(token).and_then(Option::as_mut) {
            if let (Some(Ok(_)), Some(ex)) = (&result, &slot.busy) {
                state.answer_sizes.saw(ex.size, true);
            }
            // The session had something to say back that the socket did
            // not take (see [`Slot::receive`]).
            if slot.pending() {
                let _ = state.registry.reregister(
                    &mut slot.stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                );
            }
        }
        if let Some(result) = result {
            self.finish(state, token, result, done);
        }
    }

    /// Ends the exchange at `token` with `result` (status, whether the
    /// connection may carry another, when the answer ended): the
    /// connection goes idle, or closes.
    fn finish(
        &self,
        state: &mut State<T>,
        token: usize,
        result: Result<(u16, bool, Instant), ClientFailure>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let Some(ex) = state
            .slots
            .get_mut(token)
            .and_then(Option::as_mut)
            .and_then(|slot| slot.busy.take())
        else {
            return;
        };
        let exchanged = match result {
            // Read after its deadline (the worker slept through it, see
            // `worker::tick_direct`), an answer that came too late is the
            // timeout it was, as expiring it at its deadline would have
            // said; it came whole, so its connection can carry another.
            Ok((_, reusable, end)) if end > ex.deadline => {
                if reusable {
                    state.idle.push(token);
                } else {
                    state.close(token);
                }
                self.out_of_time(&ex)
            }
            Ok((status, reusable, end)) => {
                // An answer that arrived whole in one read has its head
                // and its end at the same instant.
                let head_at = ex.head_at.unwrap_or(end);
                if reusable {
                    state.idle.push(token);
                } else {
                    state.close(token);
                }
                Exchanged {
                    outcome: Outcome::Status(status),
                    on_wire: Some(ex.on_wire),
                    pool_wait: ex.pool_wait,
                    phases: phases(
                        ex.opened,
                        Some((
                            head_at.saturating_duration_since(ex.on_wire),
                            end.saturating_duration_since(head_at),
                        )),
                    ),
                    answered: Some(end),
                }
            }
            Err(failure) => {
                state.close(token);
                Exchanged {
                    outcome: Outcome::Error(failure.kind()),
                    on_wire: Some(ex.on_wire),
                    pool_wait: ex.pool_wait,
                    phases: phases(ex.opened, None),
                    answered: None,
                }
            }
        };
        done.push((ex.tag, exchanged));
    }

    /// What a request on the wire whose time ran out comes to: a timeout,
    /// at its deadline.
    fn out_of_time(&self, ex: &Exchange<T>) -> Exchanged {
        Exchanged {
            outcome: Outcome::Error(timeout_kind(Phase::OnWire, ex.pool_wait, self.timeout)),
            on_wire: Some(ex.on_wire),
            pool_wait: ex.pool_wait,
            phases: phases(ex.opened, None),
            answered: Some(ex.deadline),
        }
    }

    /// Ends, at their deadlines, the requests whose time ran out by `now`:
    /// waiting ones as `pool_timeout`, never sent; those on the wire by
    /// where they spent it, their connections closed. Then sends waiting
    /// requests on whatever connections are free.
    fn expire(self: &Rc<Self>, state: &mut State<T>, now: Instant, done: &mut Vec<(T, Exchanged)>) {
        if now >= state.next_check {
            // Deadlines only come later than the earliest one kept, except
            // for a waiting request going onto the wire, which lowers it
            // (see `put_on_wire`): so nothing is looked at per request.
            let mut next = now + self.timeout;
            for token in 0..state.slots.len() {
                let Some(deadline) = state.slots[token]
                    .as_ref()
                    .and_then(|slot| slot.busy.as_ref())
                    .map(|ex| ex.deadline)
                else {
                    continue;
                };
                if deadline > now {
                    next = next.min(deadline);
                    continue;
                }
                let Some(ex) = state.slots[token].as_mut().and_then(|s| s.busy.take()) else {
                    continue;
                };
                state.close(token);
                let exchanged = self.out_of_time(&ex);
                done.push((ex.tag, exchanged));
            }
            // At least a millisecond apart: when requests time out one after
            // another, a scan per request over thousands of connections
            // would cost more than the requests.
            state.next_check = next.max(now + Duration::from_millis(1));
        }
        while let Some(front) = state.queue.front() {
            let now = Instant::now();
            let deadline = front.job.deadline(self.timeout);
            let waited = now.saturating_duration_since(front.job.sent_at);
            if now >= deadline {
                if let Some(w) = state.queue.pop_front() {
                    done.push((
                        w.job.tag,
                        Exchanged {
                            outcome: Outcome::Error(timeout_kind(
                                Phase::Queued,
                                Some(waited),
                                self.timeout,
                            )),
                            on_wire: None,
                            pool_wait: Some(deadline.saturating_duration_since(w.job.sent_at)),
                            phases: Phases::default(),
                            answered: Some(deadline),
                        },
                    ));
                }
                continue;
            }
            if let Some(token) = state.idle.pop() {
                if let Some(w) = state.queue.pop_front() {
                    self.put_on_wire(state, token, w.job, now, Some(waited), done);
                }
            } else if state.open < self.max_open {
                // The dial is not a wait for the pool: the wait ends here.
                if let Some(w) = state.queue.pop_front() {
                    state.open += 1;
                    self.dial(w.job, Some(waited));
                }
            } else {
                break;
            }
        }
    }
}

/// What one read of a connection's socket gave its answer.
enum Received {
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
    fn send(&mut self, wire: &[u8]) -> std::io::Result<()> {
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
    fn push(&mut self) -> std::io::Result<bool> {
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
    fn pending(&self) -> bool {
        !self.unsent.is_empty() || self.tls.as_ref().is_some_and(|tls| tls.wants_write())
    }

    /// Reads the socket once, asking for about `chunk` bytes; over TLS
    /// through `raw`, the plaintext going to `input`.
    fn receive(&mut self, raw: &mut Vec<u8>, chunk: usize) -> Result<Received, ClientFailure> {
        if self.input.capacity() == 0 {
            self.input = spare::take();
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
        // (see [`DirectPool::read`]); a write that fails now fails the next
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
    fn idle_read(&mut self, raw: &mut Vec<u8>) -> bool {
        let keep = self.idle_reads(raw);
        // An idle connection holds no buffer.
        spare::give(std::mem::take(&mut self.input));
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

impl<T> State<T> {
    /// Takes a newly opened connection into the epoll set; returns its token.
    fn adopt(&mut self, io: crate::client::dial::Io) -> std::io::Result<usize> {
        let (tcp, tls) = match io {
            Either::Left(tcp) => (tcp, None),
            Either::Right(tls) => {
                let (tcp, session) = (*tls).into_inner();
                (tcp, Some(Box::new(session)))
            }
        };
        let mut stream = TcpStream::from_std(tcp.into_std()?);
        if let Err(err) = loadfleet_sys::stamp_arrivals(&stream) {
            tracing::debug!("answers are timed when read, not when they arrive: {err}");
        }
        let token = self.vacant.pop().unwrap_or(self.slots.len());
        self.registry
            .register(&mut stream, Token(token), Interest::READABLE)?;
        let slot = Slot {
            stream,
            tls,
            unsent: Vec::new(),
            input: Vec::new(),
            fresh: None,
            busy: None,
        };
        if token == self.slots.len() {
            self.slots.push(Some(slot));
        } else {
            self.slots[token] = Some(slot);
        }
        self.established += 1;
        Ok(token)
    }

    /// Closes the connection at `token`, giving its slot back.
    fn close(&mut self, token: usize) {
        let Some(mut slot) = self.slots.get_mut(token).and_then(Option::take) else {
            return;
        };
        let _ = self.registry.deregister(&mut slot.stream);
        if slot.busy.is_none() {
            self.idle.retain(|&t| t != token);
        }
        // Its token may go to the next connection opened.
        self.unfinished.retain(|&(t, _)| t != token);
        self.vacant.push(token);
        self.open -= 1;
    }
}

/// A request's phases: its connection's opening when it was the first on
/// it, and its time to first byte and body when it was answered.
fn phases(
    opened: Option<(Duration, Option<Duration>)>,
    answer: Option<(Duration, Duration)>,
) -> Phases {
    Phases {
        connect: opened.map(|(connect, _)| connect),
        tls: opened.and_then(|(_, tls)| tls),
        ttfb: answer.map(|(ttfb, _)| ttfb),
        body: answer.map(|(_, body)| body),
        new_connection: opened.is_some(),
        reused: opened.is_none(),
    }
}

/// A `Full` body's bytes: it is one frame, ready at once.
fn full_bytes(body: Full<Bytes>) -> Bytes {
    let mut body = std::pin::pin!(body);
    let mut cx = Context::from_waker(Waker::noop());
    match body.as_mut().poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use loadfleet_proto::vocab::{ErrorKind, HttpProtocol};
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::client::{ClientConfig, Transport};

    /// What the test server does with one request: write these pieces, a
    /// few milliseconds apart (so an answer arrives cut in several reads),
    /// then close the connection at once, or not.
    #[derive(Clone)]
    struct Reply {
        pieces: Vec<&'static [u8]>,
        close: bool,
    }

    fn reply(pieces: &[&'static [u8]]) -> Reply {
        Reply {
            pieces: pieces.to_vec(),
            close: false,
        }
    }

    /// A server on loopback that answers requests, on whatever connection
    /// they come, with the replies in order (none: it never answers).
    /// Returns its URL and a count of the connections it accepted.
    async fn server(replies: Vec<Reply>) -> (Uri, Arc<AtomicUsize>) {
        let (port, accepted) = serve(replies, None).await;
        (
            format!("http://127.0.0.1:{port}/").parse().unwrap(),
            accepted,
        )
    }

    /// [`server`] over TLS, with a certificate for `localhost`: its URL, the
    /// count, and a pool (of `connections`) that trusts the certificate.
    async fn tls_server(
        replies: Vec<Reply>,
        connections: usize,
    ) -> (Uri, Arc<AtomicUsize>, Rc<DirectPool<u32>>) {
        let (acceptor, trust) = tls_pair();
        let (port, accepted) = serve(replies, Some(acceptor)).await;
        let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
        let pool = pool_with(&uri, connections, Duration::from_secs(5), trust);
        (uri, accepted, pool)
    }

    /// A server's TLS side for `localhost`, and a client's that trusts it.
    fn tls_pair() -> (tokio_rustls::TlsAcceptor, Arc<rustls::ClientConfig>) {
        tls_pair_sending(2)
    }

    /// [`tls_pair`] whose server sends `tickets` session tickets after each
    /// handshake (rustls sends 2).
    fn tls_pair_sending(tickets: usize) -> (tokio_rustls::TlsAcceptor, Arc<rustls::ClientConfig>) {
        let (mut config, trust) = crate::tls::testing::localhost(&[b"http/1.1"]);
        config.send_tls13_tickets = tickets;
        (tokio_rustls::TlsAcceptor::from(Arc::new(config)), trust)
    }

    /// One request to a TLS server of its own, whose request head is read
    /// and the rest left to `answer`: the request's outcome.
    async fn one_tls_exchange<F, A>(answer: F) -> Outcome
    where
        F: FnOnce(tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> A + Send + 'static,
        A: std::future::Future<Output = ()> + Send,
    {
        let (acceptor, trust) = tls_pair();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(stream).await.unwrap();
            let mut pending = Vec::new();
            if super::super::next_request_head(&mut tls, &mut pending).await {
                answer(tls).await;
            }
        });
        let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
        let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
        let mut done = Vec::new();
        pool.submit(get(&uri), Instant::now(), 1, &mut done);
        let got = outcomes(&pool, 1).await;
        assert_eq!(got.len(), 1);
        got[0].1.outcome
    }

    /// The servers' loop: plain TCP, or TLS through `tls`; the port and the
    /// count of connections accepted. A reply that closes ends the session
    /// as a TLS server does (`close_notify`, then the FIN).
    async fn serve(
        replies: Vec<Reply>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let replies = replies.clone();
                match &tls {
                    None => {
                        tokio::spawn(answer(stream, replies));
                    }
                    Some(acceptor) => {
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                answer(stream, replies).await;
                            }
                        });
                    }
                }
            }
        });
        (port, accepted)
    }

    /// One connection of [`serve`]'s.
    async fn answer(
        mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        replies: Arc<Mutex<VecDeque<Reply>>>,
    ) {
        let mut pending = Vec::new();
        while super::super::next_request_head(&mut stream, &mut pending).await {
            let Some(r) = replies.lock().unwrap().pop_front() else {
                continue;
            };
            for (i, piece) in r.pieces.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                if stream.write_all(piece).await.is_err() {
                    return;
                }
            }
            if r.close {
                let _ = stream.shutdown().await;
                return;
            }
        }
    }

    fn pool(uri: &Uri, connections: usize, timeout: Duration) -> Rc<DirectPool<u32>> {
        let tls = crate::tls::target_config(&rustls::RootCertStore::empty(), None, &[b"http/1.1"])
            .unwrap();
        pool_with(uri, connections, timeout, tls)
    }

    fn pool_with(
        uri: &Uri,
        connections: usize,
        timeout: Duration,
        tls: Arc<rustls::ClientConfig>,
    ) -> Rc<DirectPool<u32>> {
        let transport = Transport::new(ClientConfig {
            timeout,
            connections,
            source: None,
            more_sources: Vec::new(),
            tls,
            protocol: HttpProtocol::Http1,
        });
        Rc::new(transport.direct(uri).expect("HTTP/1.1").unwrap())
    }

    fn get(uri: &Uri) -> Outgoing {
        Outgoing::built(
            Request::get(uri.clone())
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
    }

    /// A request of a kind that never changes goes out, every time, as the
    /// same request built and rendered afresh would, and keeps its method:
    /// the answer to a HEAD has no body, whatever its length says.
    #[tokio::test]
    async fn a_fixed_request_goes_out_as_rendered_every_time() {
        local(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let uri: Uri = format!("http://127.0.0.1:{port}/a/b?c=d").parse().unwrap();
            let server = tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut seen = Vec::new();
                let mut answered = 0;
                while answered < 3 {
                    let mut buf = [0u8; 1024];
                    let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
                        .await
                        .unwrap();
                    assert!(n > 0, "the client closed early");
                    seen.extend_from_slice(&buf[..n]);
                    let heads = seen.windows(4).filter(|w| w == b"\r\n\r\n").count();
                    while answered < heads {
                        let answer: &[u8] = if answered == 2 {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
                        } else {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                        };
                        stream.write_all(answer).await.unwrap();
                        answered += 1;
                    }
                }
                seen
            });
            let pool = pool(&uri, 1, Duration::from_secs(5));
            let request = || {
                Request::post(uri.clone())
                    .header("x-kind", "fixed")
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap()
            };
            let fixed = pool.fix(request());
            let head = pool.fix(
                Request::head(uri.clone())
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            );
            for (n, out) in [fixed.clone(), fixed, head].into_iter().enumerate() {
                let mut done = Vec::new();
                pool.submit(Outgoing::Fixed(out), Instant::now(), n as u32, &mut done);
                assert!(done.is_empty(), "nothing fails at once");
                let got = outcomes(&pool, 1).await;
                assert_eq!(got.len(), 1, "answer {n}");
                assert_eq!(
                    got[0].1.outcome,
                    Outcome::Status(200),
                    "{n}: {:?}",
                    got[0].1
                );
            }
            let (parts, body) = request().into_parts();
            let mut one = Vec::new();
            render(
                &parts,
                &format!("127.0.0.1:{port}"),
                &full_bytes(body),
                &mut one,
            );
            let expected = one.repeat(2);
            let seen = server.await.unwrap();
            assert!(
                seen.starts_with(&expected),
                "{:?}",
                String::from_utf8_lossy(&seen)
            );
            assert_eq!(
                &seen[expected.len()..],
                format!("HEAD /a/b?c=d HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n").as_bytes()
            );
        })
        .await;
    }

    /// Drives the pool as the open loop does until `n` outcomes are in
    /// (within 5 s), in the order they came.
    async fn outcomes(pool: &Rc<DirectPool<u32>>, n: usize) -> Vec<(u32, Exchanged)> {
        let mut done = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while done.len() < n && Instant::now() < end {
            tokio::select! {
                _ = pool.news() => {}
                _ = tokio::time::sleep_until(pool.next_deadline().unwrap_or(end)) => {}
            }
            pool.drive(Instant::now(), &mut done);
        }
        done
    }

    async fn local<F: std::future::Future>(f: F) -> F::Output {
        tokio::task::LocalSet::new().run_until(f).await
    }

    /// Answers framed every way HTTP/1.1 allows, arriving in pieces, are
    /// read whole; one whose body runs to the close ends its connection,
    /// the others leave it for the next request.
    #[tokio::test]
    async fn answers_of_every_framing_are_read_in_pieces() {
        local(async {
            let (uri, accepted) = server(every_framing()).await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            reads_every_framing(&uri, &accepted, &pool).await;
        })
        .await;
    }

    /// The same over TLS, where the pool reads the socket and rustls only
    /// decrypts: records cut across reads, and a body that runs to the
    /// close ended by the server's `close_notify`.
    #[tokio::test]
    async fn answers_over_tls_are_read_in_pieces() {
        local(async {
            let (uri, accepted, pool) = tls_server(every_framing(), 1).await;
            reads_every_framing(&uri, &accepted, &pool).await;
        })
        .await;
    }

    fn every_framing() -> Vec<Reply> {
        vec![
            reply(&[
                b"HTTP/1.1 200 OK\r\ncontent-len",
                b"gth: 5\r\n\r\nhel",
                b"lo",
            ]),
            reply(&[
                b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n",
                b"3\r\nabc\r\n",
                b"2;ext=1\r\nde\r\n0\r\ntrailer: x\r\n\r\n",
            ]),
            reply(&[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"]),
            Reply {
                pieces: vec![b"HTTP/1.1 202 Accepted\r\n\r\nuntil", b" the close"],
                close: true,
            },
            reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]),
        ]
    }

    /// Sends [`every_framing`]'s five requests one after another and checks
    /// their outcomes.
    async fn reads_every_framing(uri: &Uri, accepted: &AtomicUsize, pool: &Rc<DirectPool<u32>>) {
        let mut statuses = Vec::new();
        for n in 0..5 {
            let mut done = Vec::new();
            pool.submit(get(uri), Instant::now(), n, &mut done);
            assert!(done.is_empty(), "nothing fails at once");
            let got = outcomes(pool, 1).await;
            assert_eq!(got.len(), 1, "answer {n}");
            let (tag, ex) = got[0];
            assert_eq!(tag, n);
            assert!(ex.on_wire.is_some() && ex.pool_wait.is_none());
            assert!(ex.answered.is_some_and(|at| at >= ex.on_wire.unwrap()));
            assert!(
                ex.phases.ttfb.is_some() && ex.phases.body.is_some(),
                "{n}: {ex:?}"
            );
            assert_eq!(ex.phases.new_connection, n == 0 || n == 4, "{n}");
            statuses.push(ex.outcome);
        }
        let status = |s| Outcome::Status(s);
        assert_eq!(
            statuses,
            vec![
                status(200),
                status(201),
                status(204),
                status(202),
                status(200)
            ]
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "one close, one reopen");
        assert_eq!(pool.take_connections(), vec![(HttpProtocol::Http1, 2)]);
    }

    /// A TLS 1.3 server sends its session tickets after the handshake,
    /// which reach a connection opened ahead while it is idle: they are
    /// the session's, not bytes nobody asked for, and the connection stays
    /// for the requests. Bytes that are not TLS at all are a `tls` error.
    #[tokio::test]
    async fn a_tls_connection_outlives_its_tickets_and_fails_on_garbage() {
        local(async {
            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let (uri, accepted, pool) = tls_server(vec![reply(&[ok]); 3], 1).await;
            pool.open_ahead(1).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut done = Vec::new();
            pool.drive(Instant::now(), &mut done);
            assert!(done.is_empty());
            for n in 0..3 {
                pool.submit(get(&uri), Instant::now(), n, &mut done);
                let got = outcomes(&pool, 1).await;
                assert_eq!(got.len(), 1, "answer {n}");
                assert_eq!(got[0].1.outcome, Outcome::Status(200), "{n}");
                assert_eq!(got[0].1.phases.new_connection, n == 0, "{n}");
            }
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                1,
                "the tickets closed nothing"
            );

            // A server that answers in plain text under the session.
            let outcome = one_tls_exchange(move |mut tls| async move {
                let _ = tls.get_mut().0.write_all(ok).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            })
            .await;
            assert_eq!(outcome, Outcome::Error(ErrorKind::Tls));
        })
        .await;
    }

    /// A body that runs to the close, over TLS, ends with the server's
    /// `close_notify` (see [`answers_over_tls_are_read_in_pieces`]); a bare
    /// FIN instead may be a cut, and is a `reset` as through the tasks.
    #[tokio::test]
    async fn a_tls_body_cut_by_a_bare_fin_is_a_reset() {
        local(async {
            let outcome = one_tls_exchange(|mut tls| async move {
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil").await;
                let _ = tls.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                // The TCP side alone: no close_notify.
                let _ = tls.get_mut().0.shutdown().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            })
            .await;
            assert_eq!(outcome, Outcome::Error(ErrorKind::Reset));
        })
        .await;
    }

    /// A server that keeps sending session messages to an idle connection
    /// (here 200 tickets, over 10 KiB) would hold the worker in its reads:
    /// the connection is closed after a few full ones, and the next request
    /// opens another. (rustls itself refuses a flight of over 64 KiB.)
    #[tokio::test]
    async fn an_idle_tls_connection_flooded_by_the_server_is_closed() {
        local(async {
            let (acceptor, trust) = tls_pair_sending(200);
            let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let (port, accepted) = serve(vec![reply(&[ok])], Some(acceptor)).await;
            let uri: Uri = format!("https://localhost:{port}/").parse().unwrap();
            let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
            pool.open_ahead(1).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut done = Vec::new();
            pool.drive(Instant::now(), &mut done);
            assert!(!pool.full(), "the flooded connection gave its slot back");
            pool.submit(get(&uri), Instant::now(), 1, &mut done);
            let got = outcomes(&pool, 1).await;
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].1.outcome, Outcome::Status(200));
            assert!(got[0].1.phases.new_connection);
            assert_eq!(accepted.load(Ordering::SeqCst), 2);
        })
        .await;
    }

    /// Answers are read as they come while the pool has yet to see
    /// enough of them end within a socket's window, and again for the
    /// rest of the run once one outgrows it; answers that fit may wait
    /// for the loop's tick.
    #[tokio::test]
    async fn an_answer_held_back_at_the_window_asks_to_be_read_as_it_comes() {
        local(async {
            let body: &'static [u8] = Box::leak(vec![b'x'; 4 << 20].into_boxed_slice());
            let head: &'static [u8] = Box::leak(
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                    .into_bytes()
                    .into_boxed_slice(),
            );
            let small = reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]);
            let large = Reply {
                pieces: vec![head, body],
                close: false,
            };
            let learning = usize::from(super::super::conn::FITTING_TO_TRUST);
            let mut replies = vec![small.clone(); learning];
            replies.extend([large, small]);
            let (uri, _) = server(replies).await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            let mut done = Vec::new();
            for tag in 0..learning {
                pool.submit(get(&uri), Instant::now(), tag as u32, &mut done);
                assert!(
                    pool.answers_need_reading(),
                    "answer {tag}: too early to tell"
                );
                assert_eq!(outcomes(&pool, 1).await[0].1.outcome, Outcome::Status(200));
            }
            pool.submit(get(&uri), Instant::now(), 1, &mut done);
            assert!(!pool.answers_need_reading(), "answers that fit");
            // Slept through, as a tick would: the server fills the window
            // and waits.
            tokio::time::sleep(Duration::from_millis(30)).await;
            pool.drive(Instant::now(), &mut done);
            assert!(done.is_empty(), "4 MiB in one look");
            assert!(pool.answers_need_reading());
            let got = outcomes(&pool, 1).await;
            assert_eq!(got[0].1.outcome, Outcome::Status(200));
            assert!(!pool.answers_need_reading(), "nothing under way");
            pool.submit(get(&uri), Instant::now(), 2, &mut done);
            assert!(pool.answers_need_reading(), "learnt for the run");
            assert_eq!(outcomes(&pool, 1).await[0].1.outcome, Outcome::Status(200));
        })
        .await;
    }

    /// A request larger than the socket (and, over TLS, the session's
    /// buffer) takes at once goes out whole over later writes, plain or
    /// TLS, and its answer is read after it.
    #[tokio::test]
    async fn a_request_larger_than_the_socket_takes_goes_out_whole() {
        local(async {
            for tls in [false, true] {
                let (acceptor, trust) = tls_pair();
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let port = listener.local_addr().unwrap().port();
                tokio::spawn(async move {
                    let (stream, _) = listener.accept().await.unwrap();
                    if tls {
                        let stream = acceptor.accept(stream).await.unwrap();
                        count_body(stream).await;
                    } else {
                        count_body(stream).await;
                    }
                });
                let scheme = if tls { "https" } else { "http" };
                let uri: Uri = format!("{scheme}://localhost:{port}/").parse().unwrap();
                let pool = pool_with(&uri, 1, Duration::from_secs(5), trust);
                let body = Bytes::from(vec![b'x'; BIG_BODY]);
                let request = Request::post(uri.clone()).body(Full::new(body)).unwrap();
                let mut done = Vec::new();
                pool.submit(Outgoing::built(request), Instant::now(), 1, &mut done);
                let got = outcomes(&pool, 1).await;
                assert_eq!(got.len(), 1, "tls {tls}");
                assert_eq!(got[0].1.outcome, Outcome::Status(200), "tls {tls}");
            }
        })
        .await;
    }

    /// Larger than a loopback socket's send buffer takes at once, and than
    /// rustls buffers unsent.
    const BIG_BODY: usize = 8 << 20;

    /// Reads one request's head and its `content-length` body after a
    /// pause (so the client's socket fills), then answers 200 if the body
    /// came whole, 400 otherwise.
    async fn count_body(mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin) {
        use tokio::io::AsyncReadExt;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let head_end = loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        };
        let mut body = seen.len() - head_end;
        while body < BIG_BODY {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body += n,
            }
        }
        let status: &[u8] = if body == BIG_BODY {
            b"200 OK"
        } else {
            b"400 Bad"
        };
        let answer = [b"HTTP/1.1 ", status, b"\r\ncontent-length: 0\r\n\r\n"].concat();
        let _ = stream.write_all(&answer).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// A malformed answer is a protocol error, an answer cut short by the
    /// close is a reset, and bytes after an answer (nobody asked for them)
    /// end its connection: each time the next request opens a new one.
    #[tokio::test]
    async fn bad_answers_fail_and_close_their_connection() {
        local(async {
            let (uri, accepted) = server(vec![
                reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"]),
                Reply {
                    pieces: vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"],
                    close: true,
                },
                reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n"]),
                reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]),
            ])
            .await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            let mut got = Vec::new();
            for n in 0..4 {
                pool.submit(get(&uri), Instant::now(), n, &mut Vec::new());
                got.extend(outcomes(&pool, 1).await);
            }
            let kinds: Vec<_> = got.iter().map(|(_, ex)| ex.outcome).collect();
            assert_eq!(
                kinds,
                vec![
                    Outcome::Error(ErrorKind::Protocol),
                    Outcome::Error(ErrorKind::Reset),
                    Outcome::Status(200),
                    Outcome::Status(200),
                ]
            );
            assert!(
                got[0].1.phases.ttfb.is_none(),
                "no answer, no time to first byte"
            );
            assert_eq!(accepted.load(Ordering::SeqCst), 4);
        })
        .await;
    }

    /// A hostile server whose head never ends: the loop reads it only up
    /// to the reader's bound, then fails the request as a protocol error
    /// and drops the connection, instead of buffering without end.
    #[tokio::test]
    async fn a_head_that_never_ends_is_cut_at_the_bound() {
        local(async {
            let endless: &'static [u8] = Box::leak(
                [
                    b"HTTP/1.1 200 OK\r\n".as_slice(),
                    &b"x-pad: y\r\n".repeat(10_000),
                ]
                .concat()
                .into_boxed_slice(),
            );
            assert!(endless.len() > super::super::wire::MAX_HEAD_BYTES);
            let (uri, _) = server(vec![reply(&[endless])]).await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            pool.submit(get(&uri), Instant::now(), 0, &mut Vec::new());
            let got = outcomes(&pool, 1).await;
            assert_eq!(got[0].1.outcome, Outcome::Error(ErrorKind::Protocol));
            assert_eq!(pool.state.borrow().open, 0, "the connection is dropped");
        })
        .await;
    }

    /// With one connection, requests beyond it wait, oldest first, and
    /// keep that wait as their pool wait; all go over the one connection.
    #[tokio::test]
    async fn requests_beyond_the_pool_wait_their_turn() {
        local(async {
            let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let (uri, accepted) = server(vec![reply(&[ok]); 4]).await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            let mut done = Vec::new();
            for n in 0..4 {
                pool.submit(get(&uri), Instant::now(), n, &mut done);
            }
            assert!(pool.full());
            let got = outcomes(&pool, 4).await;
            assert_eq!(
                got.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                [0, 1, 2, 3]
            );
            assert!(got.iter().all(|(_, ex)| ex.outcome == Outcome::Status(200)));
            assert!(got[0].1.pool_wait.is_none());
            assert!(got[1..].iter().all(|(_, ex)| ex.pool_wait.is_some()));
            assert_eq!(accepted.load(Ordering::SeqCst), 1);
            assert!(pool.take_saturated(Instant::now()) > Duration::ZERO);
            assert!(!pool.full(), "the connection is idle again");
        })
        .await;
    }

    /// A server that never answers: the request on the wire times out at
    /// its deadline, the one waiting behind it is a `pool_timeout`, never
    /// sent; the stuck connection is closed and its slot serves again.
    #[tokio::test]
    async fn requests_out_of_time_end_at_their_deadlines() {
        local(async {
            let (uri, accepted) = server(Vec::new()).await;
            let timeout = Duration::from_millis(150);
            let pool = pool(&uri, 1, timeout);
            let sent = Instant::now();
            pool.submit(get(&uri), sent, 0, &mut Vec::new());
            pool.submit(get(&uri), sent, 1, &mut Vec::new());
            let got = outcomes(&pool, 2).await;
            assert_eq!(got.len(), 2);
            for (n, ex) in &got {
                assert_eq!(ex.answered, Some(sent + timeout), "request {n}");
            }
            let wire = got.iter().find(|(n, _)| *n == 0).unwrap().1;
            assert_eq!(wire.outcome, Outcome::Error(ErrorKind::Timeout));
            assert!(wire.on_wire.is_some());
            let queued = got.iter().find(|(n, _)| *n == 1).unwrap().1;
            assert_eq!(queued.outcome, Outcome::Error(ErrorKind::PoolTimeout));
            assert!(queued.on_wire.is_none());
            assert_eq!(queued.pool_wait, Some(timeout));
            assert!(!pool.full(), "the stuck connection gave its slot back");
            assert_eq!(accepted.load(Ordering::SeqCst), 1);
        })
        .await;
    }

    /// A look takes a bounded part of what a socket holds, and the next
    /// drive reads on without waiting for an edge (none comes for bytes
    /// already there): a server streaming an endless body as fast as
    /// loopback goes cannot hold the loop in its reads, away from its
    /// arrivals and that request's deadline. The socket's buffer is made
    /// large enough to hold the whole 2 MiB answer unread.
    #[tokio::test]
    async fn a_look_reads_a_bounded_part_and_the_next_goes_on() {
        local(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let written = Rc::new(Cell::new(false));
            let flag = written.clone();
            tokio::task::spawn_local(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut pending = Vec::new();
                let body = vec![b'x'; 2 << 20];
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                while super::super::next_request_head(&mut stream, &mut pending).await {
                    stream.write_all(head.as_bytes()).await.unwrap();
                    stream.write_all(&body).await.unwrap();
                    flag.set(true);
                }
            });
            let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
            let pool = pool(&uri, 1, Duration::from_secs(5));
            let mut done = Vec::new();
            pool.open_ahead(1).await;
            for slot in pool.state.borrow().slots.iter().flatten() {
                nix::sys::socket::setsockopt(
                    &slot.stream,
                    nix::sys::socket::sockopt::RcvBuf,
                    &(8 << 20),
                )
                .unwrap();
            }
            pool.submit(get(&uri), Instant::now(), 0, &mut done);
            let end = Instant::now() + Duration::from_secs(5);
            while !written.get() && Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(written.get(), "the answer fits in the socket");
            let mut looks = 0;
            while done.is_empty() && looks < 100 {
                assert!(
                    looks == 0 || pool.has_news(),
                    "look {looks} left the rest unread"
                );
                pool.drive(Instant::now(), &mut done);
                looks += 1;
            }
            assert_eq!(done.len(), 1);
            assert_eq!(done[0].1.outcome, Outcome::Status(200));
            assert!(
                looks >= (2 << 20) / (LOOK_BUDGET + READ_MAX),
                "{looks} looks"
            );
        })
        .await;
    }

    /// An answer that ends after its request's deadline is a timeout, even
    /// when the pool is driven only later (a worker asleep until its next
    /// arrival) and reads it whole before it looks at the deadlines.
    #[tokio::test]
    async fn an_answer_read_after_its_deadline_is_a_timeout() {
        local(async {
            let (uri, _) = server(vec![reply(&[
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n",
                b"ok",
            ])])
            .await;
            let timeout = Duration::from_millis(1);
            let pool = pool(&uri, 1, timeout);
            pool.open_ahead(1).await;
            let sent = Instant::now();
            pool.submit(get(&uri), sent, 0, &mut Vec::new());
            // The body comes 3 ms after the head: well after the deadline,
            // and all of it before this look.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut done = Vec::new();
            pool.drive(Instant::now(), &mut done);
            assert_eq!(done.len(), 1);
            let ex = &done[0].1;
            assert_eq!(ex.outcome, Outcome::Error(ErrorKind::Timeout));
            assert_eq!(ex.answered, Some(sent + timeout));
            assert!(
                !pool.full(),
                "the connection, its answer whole, serves again"
            );
        })
        .await;
    }

    /// A keep-alive connection the server closes right after its answer
    /// (its end comes with the answer's bytes, in the same edge) is not
    /// kept for the next request, which opens a new one instead of failing
    /// on it.
    #[tokio::test]
    async fn a_connection_closed_while_idle_is_not_reused() {
        local(async {
            let (uri, accepted) = server(vec![Reply {
                pieces: vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"],
                close: true,
            }])
            .await;
            let pool = pool(&uri, 1, Duration::from_secs(5));
            pool.submit(get(&uri), Instant::now(), 0, &mut Vec::new());
            let got = outcomes(&pool, 1).await;
            assert_eq!(got[0].1.outcome, Outcome::Status(200));
            // The answer said nothing of closing, so the connection is idle
            // until its close is read.
            tokio::time::sleep(Duration::from_millis(20)).await;
            pool.drive(Instant::now(), &mut Vec::new());
            assert!(!pool.full());
            assert_eq!(pool.state.borrow().open, 0, "the closed one is gone");
            pool.submit(get(&uri), Instant::now(), 1, &mut Vec::new());
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(accepted.load(Ordering::SeqCst), 2, "a new connection");
        })
        .await;
    }

    /// A port nobody listens on: the request that dialled fails as
    /// refused, with no connection and its slot given back.
    #[tokio::test]
    async fn a_refused_dial_fails_its_request_and_frees_the_slot() {
        local(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            drop(listener);
            let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
            let pool = pool(&uri, 1, Duration::from_secs(2));
            pool.submit(get(&uri), Instant::now(), 7, &mut Vec::new());
            let got = outcomes(&pool, 1).await;
            assert_eq!(got[0].0, 7);
            assert_eq!(got[0].1.outcome, Outcome::Error(ErrorKind::Refused));
            assert!(got[0].1.on_wire.is_none());
            assert_eq!(pool.state.borrow().open, 0);
        })
        .await;
    }

    /// Connections opened ahead wait idle; the first request on each
    /// reports its connect time as its own, and nothing more is opened.
    #[tokio::test]
    async fn connections_opened_ahead_serve_the_first_requests() {
        local(async {
            let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
            let (uri, accepted) = server(vec![reply(&[ok]); 4]).await;
            let pool = pool(&uri, 2, Duration::from_secs(5));
            pool.open_ahead(5).await;
            assert_eq!(pool.state.borrow().idle.len(), 2, "no more than the pool");
            for n in 0..4 {
                pool.submit(get(&uri), Instant::now(), n, &mut Vec::new());
            }
            let got = outcomes(&pool, 4).await;
            assert!(got.iter().all(|(_, ex)| ex.outcome == Outcome::Status(200)));
            let opened = got
                .iter()
                .filter(|(_, ex)| ex.phases.new_connection)
                .count();
            assert_eq!(opened, 2);
            assert!(got
                .iter()
                .all(|(_, ex)| ex.phases.new_connection == ex.phases.connect.is_some()));
            assert_eq!(accepted.load(Ordering::SeqCst), 2);
        })
        .await;
    }

    /// Opening ahead is cut short when the run starts first: the dials
    /// still under way take no slot, so the pool can open all of its own.
    #[tokio::test]
    async fn dials_ahead_cut_short_take_no_slot() {
        local(async {
            // A server that never accepts, its queue of one full: the
            // kernel drops further handshakes, so a dial to it hangs.
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let listener = socket.listen(1).unwrap();
            let addr = listener.local_addr().unwrap();
            let mut queued = Vec::new();
            while let Ok(s) =
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
            {
                queued.push(s);
                assert!(queued.len() < 16, "the queue never filled");
            }
            let uri: Uri = format!("http://{addr}/").parse().unwrap();
            let pool = pool(&uri, 2, Duration::from_secs(5));
            let cut = tokio::time::timeout(Duration::from_millis(50), pool.open_ahead(2)).await;
            assert!(cut.is_err(), "the dials were still under way");
            assert_eq!(pool.state.borrow().open, 0);
            assert!(!pool.full(), "both slots free");
        })
        .await;
    }
}
