//! The transports: what turns one arrival's request into an outcome. The
//! scheduler, the in-flight cap, the unsent accounting and the recorder are
//! the same for every protocol; a transport only sends, waits and
//! classifies. Each opens its connections through the [`dial::Dialer`], so
//! the connect and TLS phases are taken the same way for all of them.

mod dial;
mod failure;
mod h2;
mod http1;

use std::cell::Cell;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use loadfleet_proto::vocab::{ErrorKind, HttpProtocol};
use tokio::time::Instant;

use crate::recorder::Outcome;
pub use dial::{Dialed, Dialer, Io};
pub use failure::ClientFailure;
pub use h2::{Answer, Http2Client};
use http1::Http1Client;
pub use http1::{DirectPool, Fixed, Outgoing};

/// How a worker's transport is set up; `Send`, so it can cross to the
/// worker's thread, where the transport itself is made.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub timeout: Duration,
    /// Most connections open at once.
    pub connections: usize,
    /// Local address to send from, so agents on one machine can appear as
    /// distinct hosts (127.0.0.2, 127.0.0.3, …).
    pub source: Option<IpAddr>,
    /// Addresses to send from, in turn, once `source` has no port left.
    pub more_sources: Vec<IpAddr>,
    /// Trust and ALPN settings for https:// targets.
    pub tls: Arc<rustls::ClientConfig>,
    /// HTTP/1.1, or HTTP/2 (h2 by ALPN on https://, h2c on http://).
    pub protocol: HttpProtocol,
}

/// One worker's transport; cheap to clone, single-threaded.
#[derive(Clone)]
pub struct Transport {
    kind: Kind,
    timeout: Duration,
}

#[derive(Clone)]
enum Kind {
    Http1(Http1Client),
    Http2(Http2Client),
}

/// Where a request was when its time ran out, to name the error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a free connection slot in the agent's own pool.
    Queued,
    /// Resolving, connecting, handshaking.
    Connecting,
    /// On a connection: sent, or being answered.
    OnWire,
}

/// One request's way through a transport, kept outside its future so that
/// a timeout, which drops the future, can still read where it got to.
struct Progress {
    phase: Cell<Phase>,
    /// When the request went onto a connection.
    on_wire: Cell<Option<Instant>>,
    /// When it first found every connection busy and joined the queue.
    queued_at: Cell<Option<Instant>>,
    /// How long it waited in that queue, once it left it.
    waited: Cell<Option<Duration>>,
    /// The connect and TLS times of the connection this request opened.
    connect: Cell<Option<Duration>>,
    tls: Cell<Option<Duration>>,
    /// From going on the wire to the response's headers.
    ttfb: Cell<Option<Duration>>,
    /// From the headers to the end of the body.
    body: Cell<Option<Duration>>,
    /// When the whole answer had arrived, if the transport knows better
    /// than the moment its exchange returns (see [`Exchanged::answered`]).
    answered: Cell<Option<Instant>>,
}

impl Progress {
    fn new() -> Self {
        Self {
            phase: Cell::new(Phase::Queued),
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
    fn connected(&self, dialed: &Dialed) {
        self.connect.set(Some(dialed.connect));
        self.tls.set(dialed.tls);
    }

    /// The request goes onto its connection now; returns that instant.
    fn went_on_wire(&self) -> Instant {
        let now = Instant::now();
        self.phase.set(Phase::OnWire);
        self.on_wire.set(Some(now));
        now
    }

    /// Time spent waiting for one of the pool's connections, up to now for
    /// a request still waiting; `None` when it never had to wait. Reads
    /// the clock only for a request still waiting, the rare case.
    fn pool_wait(&self) -> Option<Duration> {
        self.waited
            .get()
            .or_else(|| self.queued_at.get().map(|at| at.elapsed()))
    }

    fn phases(&self) -> Phases {
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

/// Where one request's time went on the wire, as k6 splits it
/// (`http_req_connecting`, `…_tls_handshaking`, `…_waiting`,
/// `…_receiving`). A wait for the agent's own pool is not among them: it is
/// kept apart as the pool wait, so a busy agent is not read as a slow
/// network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phases {
    /// TCP connect, when this request opened its connection.
    pub connect: Option<Duration>,
    /// TLS handshake, when this request opened a TLS connection.
    pub tls: Option<Duration>,
    /// From going on the wire to the response's headers.
    pub ttfb: Option<Duration>,
    /// From the headers to the end of the body.
    pub body: Option<Duration>,
    /// The request opened a new connection (even if the exchange failed).
    pub new_connection: bool,
    /// The request went out on a connection an earlier request had used.
    pub reused: bool,
}

/// What became of one request in the transport.
#[derive(Debug, Clone, Copy)]
pub struct Exchanged {
    pub outcome: Outcome,
    /// When the request went onto a connection (the start of its service
    /// time), if it did.
    pub on_wire: Option<Instant>,
    /// How long it waited for one of the pool's connections, if it had to.
    pub pool_wait: Option<Duration>,
    pub phases: Phases,
    /// When the answer's last byte arrived, for HTTP/1.1: by the kernel's
    /// stamp over plain TCP (the end of the request's latency even if the
    /// answer was read later), by the read over TLS; for a request whose
    /// time ran out in the worker's queue, its deadline. `None` from
    /// HTTP/2, whose answers end when the exchange returns.
    pub answered: Option<Instant>,
}

impl Transport {
    pub fn new(config: ClientConfig) -> Self {
        let dialer = Dialer::new(config.source, config.tls).with_more_sources(config.more_sources);
        let kind = match config.protocol {
            HttpProtocol::Http1 => Kind::Http1(Http1Client::new(dialer, config.connections)),
            HttpProtocol::H2 | HttpProtocol::H2c => {
                Kind::Http2(Http2Client::new(dialer, config.connections))
            }
        };
        Self {
            kind,
            timeout: config.timeout,
        }
    }

    /// Sends one request and waits for its whole answer, within the
    /// timeout. Also says when the request went onto a connection (for the
    /// service time), how long it waited for one, and its phases.
    ///
    /// Its time counts from `sent_at`, when the worker sent it out. A
    /// request the worker then held in its queue brings that wait along as
    /// its pool wait; one whose time ran out there is not sent at all: it
    /// is a `pool_timeout` that ended at its deadline.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        sent_at: Instant,
        queued: Option<Queued>,
    ) -> Exchanged {
        let grpc = request.extensions().get::<crate::grpc::Call>().is_some();
        let progress = Progress::new();
        let deadline = sent_at + self.timeout;
        let mut expired = false;
        if queued.is_some() {
            // The wait in the worker's queue ends now: it is taken up on
            // the connection just freed, or on a new one (the dial is not
            // a wait for the pool). If it must queue in the pool after all,
            // that wait counts from the same instant.
            let now = Instant::now();
            progress.queued_at.set(Some(sent_at));
            progress
                .waited
                .set(Some(now.saturating_duration_since(sent_at)));
            expired = now >= deadline;
        }
        drop(queued);
        let exchange = async {
            match &self.kind {
                Kind::Http1(c) => c.exchange(request, &progress).await.map(Outcome::Status),
                // Boxed: the HTTP/2 exchange's future is several times the
                // HTTP/1.1 one's, and without the box every HTTP/1.1 request
                // in flight would carry its room too.
                Kind::Http2(c) => {
                    Box::pin(c.exchange(request, false, &progress))
                        .await
                        .map(|answer| {
                            let status = answer.head.status.as_u16();
                            if grpc {
                                crate::grpc::outcome(
                                    status,
                                    &answer.head.headers,
                                    answer.trailers.as_ref(),
                                )
                            } else {
                                Outcome::Status(status)
                            }
                        })
                }
            }
        };
        let result = if expired {
            progress.answered.set(Some(deadline));
            None
        } else {
            // Pinned where it is made and raced by hand, not handed to
            // `tokio::time::timeout`: that moves the exchange's future
            // twice per request, a kilobyte-sized copy each time (1.2% of
            // the agent's CPU at 100,000 req/s, BENCHMARKS.md).
            let mut exchange = std::pin::pin!(exchange);
            let mut expiry = std::pin::pin!(tokio::time::sleep_until(deadline));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(done) = exchange.as_mut().poll(cx) {
                    return Poll::Ready(Some(done));
                }
                expiry.as_mut().poll(cx).map(|()| None)
            })
            .await
        };
        let pool_wait = progress.pool_wait();
        let outcome = match result {
            Some(Ok(outcome)) => outcome,
            Some(Err(e)) => Outcome::Error(e.kind()),
            None => Outcome::Error(timeout_kind(progress.phase.get(), pool_wait, self.timeout)),
        };
        // A gRPC call's time is its deadline.
        let outcome = if grpc {
            crate::grpc::on_timeout(outcome)
        } else {
            outcome
        };
        Exchanged {
            outcome,
            on_wire: progress.on_wire.get(),
            pool_wait,
            phases: progress.phases(),
            answered: progress.answered.get(),
        }
    }

    /// Opens up to `n` connections to `uri`'s host before any request needs
    /// them (HTTP/1.1 only: an HTTP/2 connection carries many requests and
    /// opens with the first). Each stays idle for a request to take, and
    /// the first request on it reports its connect and TLS times as its
    /// own, so the report's phases and counts read as if it had opened it.
    /// Otherwise the first arrivals of a fast run all open connections at
    /// once, and on one core that burst of handshakes held the rest of the
    /// schedule back: the first second's send lag reached 7–23 ms at
    /// 20,000–80,000 req/s on one core with 64 connections, against 3 ms
    /// with 16 (BENCHMARKS.md).
    pub async fn open_ahead(&self, uri: &http::Uri, n: usize) {
        if let Kind::Http1(c) = &self.kind {
            c.open_ahead(uri, n).await;
        }
    }

    /// A pool the open loop drives itself ([`DirectPool`]), with this
    /// transport's connections, timeout, source addresses and TLS settings:
    /// for HTTP/1.1 to `uri`'s host only, `None` otherwise.
    pub fn direct<T: 'static>(&self, uri: &http::Uri) -> Option<std::io::Result<DirectPool<T>>> {
        let web = [http::uri::Scheme::HTTP, http::uri::Scheme::HTTPS];
        match &self.kind {
            Kind::Http1(c) if uri.scheme().is_some_and(|s| web.contains(s)) => {
                Some(c.direct(uri, self.timeout))
            }
            _ => None,
        }
    }

    /// Whether an answer's time is when it reached the machine, not when it
    /// was read ([`Exchanged::answered`]), for requests over plain TCP:
    /// true for HTTP/1.1, whose reads take the kernel's stamp.
    pub fn stamps_answers(&self) -> bool {
        matches!(self.kind, Kind::Http1(_))
    }

    /// How many more requests could go onto a connection now without
    /// waiting: idle connections and slots free to open one. `None` for
    /// HTTP/2, whose streams a worker does not queue for (see
    /// [`crate::runners`]).
    pub fn free_connections(&self) -> Option<usize> {
        match &self.kind {
            Kind::Http1(c) => Some(c.free_connections()),
            Kind::Http2(_) => None,
        }
    }

    /// Counts a request the worker holds back as waiting for a connection
    /// (for `GENERATOR_POOL`), until it is sent.
    pub fn queue(&self) -> Queued {
        match &self.kind {
            Kind::Http1(c) => c.saturation().wait(),
            Kind::Http2(c) => c.saturation().wait(),
        }
    }

    /// Whether a request sent now would wait for one of the pool's
    /// connections: every one is open and busy, none idle. Only HTTP/1.1
    /// answers wait to be read on the worker's ticks (see
    /// [`Self::stamps_answers`]), so only it can say yes.
    pub fn pool_full(&self) -> bool {
        match &self.kind {
            Kind::Http1(c) => c.pool_full(),
            Kind::Http2(_) => false,
        }
    }

    /// Whether answers too large to land whole in a socket nobody reads
    /// may be under way ([`DirectPool::answers_need_reading`]), so that a
    /// worker must not sleep blind through them. HTTP/2 never ticks.
    pub fn answers_need_reading(&self) -> bool {
        match &self.kind {
            Kind::Http1(c) => c.answers_need_reading(),
            Kind::Http2(_) => false,
        }
    }

    /// Time during which requests waited for a connection (or a stream)
    /// since the last call, up to `now`: load was held back by the agent.
    pub fn take_saturated(&self, now: Instant) -> Duration {
        match &self.kind {
            Kind::Http1(c) => c.take_saturated(now),
            Kind::Http2(c) => c.take_saturated(now),
        }
    }

    /// Connections established since the last call, by the protocol
    /// actually spoken on them: what the report names as negotiated.
    pub fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        match &self.kind {
            Kind::Http1(c) => c.take_connections(),
            Kind::Http2(c) => c.take_connections(),
        }
    }
}

/// The time a transport held requests waiting for a connection, kept as
/// it happens so the flush can take it per interval.
#[derive(Default)]
struct Saturation {
    /// Requests waiting right now (live ones only: one that gave up is no
    /// longer counted, even while its stale entry still sits in a queue).
    waiting: Cell<usize>,
    /// Since when requests have been waiting, while some are.
    since: Cell<Option<Instant>>,
    /// Time with requests waiting, not yet taken.
    total: Cell<Duration>,
}

impl Saturation {
    /// Counts a request as waiting while the guard lives: dropped when it
    /// gets a connection (or stream) or when its time runs out, so the
    /// count, and the time with any waiting, never includes one that gave
    /// up.
    fn wait(self: &Rc<Self>) -> Queued {
        self.changed(self.waiting.get() + 1);
        Queued {
            saturation: self.clone(),
        }
    }

    fn changed(&self, waiting: usize) {
        self.waiting.set(waiting);
        match (waiting > 0, self.since.get()) {
            (true, None) => self.since.set(Some(Instant::now())),
            (false, Some(since)) => {
                self.since.set(None);
                self.total.set(self.total.get() + since.elapsed());
            }
            _ => {}
        }
    }

    fn take(&self, now: Instant) -> Duration {
        let mut total = self.total.replace(Duration::ZERO);
        if let Some(since) = self.since.get() {
            total += now.saturating_duration_since(since);
            self.since.set(Some(now));
        }
        total
    }
}

/// A request counted as waiting for a connection (see [`Saturation::wait`]):
/// one in a pool's queue, or one the worker holds in its own queue while
/// every connection is busy ([`Transport::queue`]), with no task parked
/// for it.
pub struct Queued {
    saturation: Rc<Saturation>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let s = &self.saturation;
        s.changed(s.waiting.get().saturating_sub(1));
    }
}

/// The error kind of a request whose time ran out. One that spent at least
/// half its time waiting for the agent's own connections is `pool_timeout`,
/// even when the rest ran out on the wire: under overload a freed
/// connection goes to the oldest waiter, which then has almost no time
/// left, so nearly every request would otherwise reach the wire just before
/// its deadline and be blamed on the target.
fn timeout_kind(phase: Phase, pool_wait: Option<Duration>, timeout: Duration) -> ErrorKind {
    match pool_wait {
        Some(wait) if phase == Phase::Queued || wait * 2 >= timeout => ErrorKind::PoolTimeout,
        _ => ErrorKind::Timeout,
    }
}
