//! The transports: what turns one arrival's request into an outcome. The
//! scheduler, the in-flight cap, the unsent accounting and the recorder are
//! the same for every protocol; a transport only sends, waits and
//! classifies. Each opens its connections through the [`dial::Dialer`], so
//! the connect and TLS phases are taken the same way for all of them.
//!
//! The modules form a tree with no way back up: [`outcome`] (what an
//! exchange comes to), [`failure`] (every error's kind), [`kept`] (an
//! answer kept for a flow), `progress` and `saturation` are leaves that
//! the transports ([`h2`], `http1`) build on,
//! as are [`tls`] (the target's trust) and [`grpc`] (calls on [`h2`]), and
//! this module only puts them behind one [`Transport`].

mod dial;
mod failure;
pub(crate) mod grpc;
mod h2;
mod http1;
mod kept;
pub(crate) mod outcome;
mod progress;
mod saturation;
pub(crate) mod tls;

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use loadfleet_proto::vocab::{ErrorKind, HttpProtocol, UnsentReason};
use tokio::time::Instant;

pub(crate) use dial::{Dialer, Io};
pub(crate) use failure::stream_io_kind;
pub(crate) use h2::Http2Client;
pub(crate) use http1::wire;
use http1::Http1Client;
pub(crate) use http1::{DirectPool, Fixed, Outgoing};
pub(crate) use kept::Kept;
use kept::{Keeper, Sink};
pub(crate) use outcome::{Exchanged, Outcome, Phases};
use progress::Progress;
pub(crate) use saturation::Queued;

/// How a worker's transport is set up; `Send`, so it can cross to the
/// worker's thread, where the transport itself is made.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    pub timeout: Duration,
    /// Connections opened ahead of the start, at most.
    pub connections: usize,
    /// Most connections open at once: the pool opens more on demand, up to
    /// this, so that the target sees the offered load.
    pub max_connections: usize,
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
pub(crate) struct Transport {
    kind: Kind,
    timeout: Duration,
}

/// An answer that came whole, with the sink its bytes went to.
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per exchange, never held across an await: a box would allocate for \
              every HTTP/2 answer"
)]
enum Reply<S> {
    /// The HTTP/1.1 status (the head's bytes are in the sink).
    Http1(u16, S),
    Http2(h2::Answer, S),
}

/// What [`Transport::run`] gives back for its sink, so that each caller
/// gets its own answer straight from it: wrapping `run`'s future to
/// reshape its output would add to every request in flight.
trait Ending: Sink + Sized {
    type Output;
    fn end(exchanged: Exchanged, reply: Option<Reply<Self>>) -> Self::Output;
}

/// [`Transport::send`]'s: the exchange alone.
impl Ending for () {
    type Output = Exchanged;
    #[inline(always)]
    fn end(exchanged: Exchanged, _: Option<Reply<Self>>) -> Exchanged {
        exchanged
    }
}

/// [`Transport::send_keeping`]'s: the exchange and its answer, with the
/// HTTP/1.1 head's headers read from its bytes, and an HTTP/2 answer's
/// trailers after its headers.
impl Ending for Keeper {
    type Output = (Exchanged, Option<Kept>);
    fn end(exchanged: Exchanged, reply: Option<Reply<Self>>) -> Self::Output {
        let kept = reply.map(|reply| match reply {
            Reply::Http1(status, keeper) => {
                let headers = wire::header_map(keeper.head_bytes());
                keeper.finish(status, headers)
            }
            Reply::Http2(answer, keeper) => {
                let mut headers = answer.head.headers;
                // `None` names repeat the name before them.
                let mut last = None;
                for (name, value) in answer.trailers.into_iter().flatten() {
                    if let Some(name) = name {
                        last = Some(name);
                    }
                    if let Some(name) = &last {
                        headers.append(name.clone(), value);
                    }
                }
                keeper.finish(answer.head.status.as_u16(), headers)
            }
        });
        (exchanged, kept)
    }
}

#[derive(Clone)]
enum Kind {
    Http1(Http1Client),
    Http2(Http2Client),
}

impl Transport {
    pub(crate) fn new(config: ClientConfig) -> Self {
        let dialer = Dialer::new(config.source, config.tls).with_more_sources(config.more_sources);
        let kind = match config.protocol {
            HttpProtocol::Http1 => Kind::Http1(Http1Client::new(dialer, config.max_connections)),
            HttpProtocol::H2 | HttpProtocol::H2c => Kind::Http2(Http2Client::new(
                dialer,
                config.connections,
                config.max_connections,
            )),
        };
        Self {
            kind,
            timeout: config.timeout,
        }
    }

    /// Sends one request and waits for its whole answer, within the
    /// timeout. Also says when the request went onto a connection (for the
    /// service time), how long it waited for one, and its phases; `out` is
    /// told once, when it leaves the agent's queue (opens a connection or
    /// goes onto one), the moment it counts as sent.
    ///
    /// Its time counts from `sent_at`, when the worker sent it out, while
    /// it waits for a connection: a request the worker held in its queue
    /// brings that wait along as its pool wait, and one whose time runs
    /// out before it leaves the queue is never written: it ends as unsent
    /// `pool_timeout` at that deadline, taking no connection down with it.
    /// Once it has left the queue it has the whole timeout again, from
    /// that moment: a connection freed for a waiter with almost no time
    /// left would otherwise be closed by that waiter's deadline, and under
    /// overload every freed connection would be.
    pub(crate) fn send<'a>(
        &'a self,
        request: Request<Full<Bytes>>,
        sent_at: Instant,
        queued: Option<Queued>,
        out: &'a dyn Fn(),
    ) -> impl Future<Output = Exchanged> + 'a {
        // `run` itself, not a future that awaits it: that would keep its
        // own copy of the request (or of `run`'s future) beside the one
        // it moved on, and every request in flight would carry both.
        self.run(request, sent_at, queued, out, ())
    }

    /// [`Self::send`], keeping the answer for a flow's step to read: its
    /// status, its headers and at most `keep` bytes of its body (of a
    /// gRPC call's, its response message). The exchange, its timings and
    /// its outcome are those `send` gives: the whole answer is still read,
    /// a body past `keep` is drained, and the connection stays fit for the
    /// next request. `None` when no answer came whole (an error, a
    /// timeout, never sent). See [`kept`] for why keeping is opt-in.
    pub(crate) fn send_keeping<'a>(
        &'a self,
        request: Request<Full<Bytes>>,
        sent_at: Instant,
        queued: Option<Queued>,
        out: &'a dyn Fn(),
        keep: usize,
    ) -> impl Future<Output = (Exchanged, Option<Kept>)> + 'a {
        let grpc = request.extensions().get::<grpc::Call>().is_some();
        self.run(request, sent_at, queued, out, Keeper::new(keep, grpc))
    }

    /// [`Self::send`], with the answer's bytes handed to `sink` on the
    /// way: `()` for `send` itself (one body for both, and the measured
    /// path's copy keeps nothing), a [`Keeper`] for `send_keeping`.
    async fn run<S: Ending>(
        &self,
        request: Request<Full<Bytes>>,
        sent_at: Instant,
        queued: Option<Queued>,
        out: &dyn Fn(),
        sink: S,
    ) -> S::Output {
        let grpc = request.extensions().get::<grpc::Call>().is_some();
        let progress = Progress::new(out);
        let queue_deadline = sent_at + self.timeout;
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
            expired = now >= queue_deadline;
        }
        drop(queued);
        let exchange = async {
            match &self.kind {
                Kind::Http1(c) => c
                    .exchange(request, &progress, sink)
                    .await
                    .map(|(status, sink)| (Outcome::Status(status), Reply::Http1(status, sink))),
                // Boxed: the HTTP/2 exchange's future is several times the
                // HTTP/1.1 one's, and without the box every HTTP/1.1 request
                // in flight would carry its room too.
                Kind::Http2(c) => {
                    Box::pin(c.exchange(request, &progress, sink))
                        .await
                        .map(|(answer, sink)| {
                            let status = answer.head.status.as_u16();
                            let outcome = if grpc {
                                grpc::outcome(
                                    status,
                                    &answer.head.headers,
                                    answer.trailers.as_ref(),
                                )
                            } else {
                                Outcome::Status(status)
                            };
                            (outcome, Reply::Http2(answer, sink))
                        })
                }
            }
        };
        let result = if expired {
            None
        } else {
            // Pinned where it is made and raced by hand, not handed to
            // `tokio::time::timeout`: that moves the exchange's future
            // twice per request, a kilobyte-sized copy each time. The
            // timer is set once, at the queue's deadline, and moved only
            // if it fires after the request left the queue.
            let mut exchange = std::pin::pin!(exchange);
            let mut expiry = std::pin::pin!(tokio::time::sleep_until(queue_deadline));
            std::future::poll_fn(|cx| loop {
                if let Poll::Ready(done) = exchange.as_mut().poll(cx) {
                    return Poll::Ready(Some(done));
                }
                if expiry.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                match progress.left_queue.get().map(|at| at + self.timeout) {
                    Some(later) if later > expiry.deadline() => expiry.as_mut().reset(later),
                    _ => return Poll::Ready(None),
                }
            })
            .await
        };
        let pool_wait = progress.pool_wait();
        let (outcome, reply) = match result {
            Some(Ok((outcome, reply))) => (outcome, Some(reply)),
            Some(Err(e)) => (Outcome::Error(e.kind()), None),
            None if progress.left_queue.get().is_none() => {
                progress.answered.set(Some(queue_deadline));
                (Outcome::Unsent(UnsentReason::PoolTimeout), None)
            }
            None => (Outcome::Error(ErrorKind::Timeout), None),
        };
        // A gRPC call's time is its deadline.
        let outcome = if grpc {
            grpc::on_timeout(outcome)
        } else {
            outcome
        };
        let exchanged = Exchanged {
            outcome,
            on_wire: progress.on_wire.get(),
            pool_wait,
            phases: progress.phases(),
            answered: progress.answered.get(),
        };
        S::end(exchanged, reply)
    }

    /// Opens up to `n` connections to `uri`'s host before any request needs
    /// them (HTTP/1.1 only: an HTTP/2 connection carries many requests and
    /// opens with the first). Each stays idle for a request to take, and
    /// the first request on it reports its connect and TLS times as its
    /// own, so the report's phases and counts read as if it had opened it.
    /// Otherwise the first arrivals of a fast run all open connections at
    /// once, and that burst of handshakes holds the rest of the schedule
    /// back.
    pub(crate) async fn open_ahead(&self, uri: &http::Uri, n: usize) {
        if let Kind::Http1(c) = &self.kind {
            c.open_ahead(uri, n).await;
        }
    }

    /// A pool the open loop drives itself ([`DirectPool`]), with this
    /// transport's connections, timeout, source addresses and TLS settings:
    /// for HTTP/1.1 to `uri`'s host only, `None` otherwise.
    pub(crate) fn direct<T: Copy + 'static>(
        &self,
        uri: &http::Uri,
    ) -> Option<std::io::Result<DirectPool<T>>> {
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
    pub(crate) fn stamps_answers(&self) -> bool {
        matches!(self.kind, Kind::Http1(_))
    }

    /// How many more requests could go onto a connection now without
    /// waiting: idle connections and slots free to open one. `None` for
    /// HTTP/2, whose streams a worker does not queue for (see
    /// [`crate::runners`]).
    pub(crate) fn free_connections(&self) -> Option<usize> {
        match &self.kind {
            Kind::Http1(c) => Some(c.free_connections()),
            Kind::Http2(_) => None,
        }
    }

    /// Counts a request the worker holds back as waiting for a connection
    /// (for `GENERATOR_POOL`), until it is sent.
    pub(crate) fn queue(&self) -> Queued {
        match &self.kind {
            Kind::Http1(c) => c.queue(),
            Kind::Http2(c) => c.queue(),
        }
    }

    /// Whether a request sent now would wait for one of the pool's
    /// connections: every one is open and busy, none idle. Only HTTP/1.1
    /// answers wait to be read on the worker's ticks (see
    /// [`Self::stamps_answers`]), so only it can say yes.
    pub(crate) fn pool_full(&self) -> bool {
        match &self.kind {
            Kind::Http1(c) => c.pool_full(),
            Kind::Http2(_) => false,
        }
    }

    /// Whether answers too large to land whole in a socket nobody reads
    /// may be under way ([`DirectPool::answers_need_reading`]), so that a
    /// worker must not sleep blind through them. HTTP/2 never ticks.
    pub(crate) fn answers_need_reading(&self) -> bool {
        match &self.kind {
            Kind::Http1(c) => c.answers_need_reading(),
            Kind::Http2(_) => false,
        }
    }

    /// Time during which requests waited for a connection (or a stream)
    /// since the last call, up to `now`: load was held back by the agent.
    pub(crate) fn take_saturated(&self, now: Instant) -> Duration {
        match &self.kind {
            Kind::Http1(c) => c.take_saturated(now),
            Kind::Http2(c) => c.take_saturated(now),
        }
    }

    /// Connections established since the last call, by the protocol
    /// actually spoken on them: what the report names as negotiated.
    pub(crate) fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        match &self.kind {
            Kind::Http1(c) => c.take_connections(),
            Kind::Http2(c) => c.take_connections(),
        }
    }
}
