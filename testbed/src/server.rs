//! The accept loop and the request handler.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::{self, Future};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::Service;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::gate::Gate;
use crate::reply::{reply, Answer, TextResponse};
use crate::shop::{self, Route, Shop};
use crate::sse::{self, Hub, SseBody};
use crate::stamped::{AnswerTimes, LastArrival, Stamped};
use crate::Config;

/// Every body the testbed sends: a static text or a held event stream.
type AnyBody = http_body_util::Either<Full<Bytes>, SseBody>;

/// Shortest pause after an accept error that is not about one connection.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// Longest pause after repeated accept errors.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// The largest answer `/bytes/N` gives: enough to outgrow any socket's
/// buffers, which is what large answers are for in a test of a generator.
const MAX_BYTES: usize = 16 << 20;

/// Serves HTTP/1.1 and HTTP/2 (h2c, or h2 over TLS) on `listener` with the behaviour `config` describes until
/// `shutdown` completes.
///
/// One task per connection; keep-alive as hyper does it by default. Accept
/// errors never end the loop: running out of file descriptors under overload
/// is exactly the situation the testbed exists to produce, so it backs off
/// briefly and keeps accepting.
pub async fn serve(
    listener: TcpListener,
    config: Arc<Config>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shared = Shared::new(&config);
    if !config.delay.is_zero() || !config.delay_jitter.is_zero() {
        shared.precise = crate::delay::Delays::start();
    }
    let shared = Arc::new(shared);
    // HTTP/1.1 and h2c on one port (see crate::h2).
    let http = crate::h2::builder(&config);

    tokio::pin!(shutdown);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(err) if is_connection_error(&err) => {
                // The peer gave up before we accepted; nothing to wait for.
                debug!(%err, "accept failed for one connection");
                continue;
            }
            Err(err) => {
                warn!(%err, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        // Small responses must not wait for Nagle's algorithm, or latency
        // measurements would include up to 40ms of delayed-ACK interplay.
        if let Err(err) = stream.set_nodelay(true) {
            debug!(%peer, %err, "could not set TCP_NODELAY");
        }
        let answers = shared.precise.is_some().then_some(&shared.answers);
        let (stream, arrivals) = Stamped::new(stream, answers);
        let service = Testbed {
            counter: shared.counter(peer.ip()),
            peer: peer.ip(),
            shared: Arc::clone(&shared),
            arrivals,
        };
        match &tls {
            None => {
                let connection = http
                    .serve_connection(TokioIo::new(stream), service.clone())
                    .into_owned();
                tokio::spawn(async move {
                    if let Err(err) = connection.await {
                        debug!(%peer, %err, "connection ended with an error");
                    }
                });
            }
            // The handshake runs in the connection's task, so a slow or
            // failing client never holds up the accept loop.
            Some(acceptor) => {
                let (acceptor, http, service) = (acceptor.clone(), http.clone(), service.clone());
                tokio::spawn(async move {
                    let stream = match acceptor.accept(stream).await {
                        Ok(stream) => stream,
                        Err(err) => {
                            debug!(%peer, %err, "TLS handshake failed");
                            return;
                        }
                    };
                    if let Err(err) = http.serve_connection(TokioIo::new(stream), service).await {
                        debug!(%peer, %err, "connection ended with an error");
                    }
                });
            }
        }
    }
}

/// Errors from `accept` that concern one connection only, not the listener.
fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// State shared by all connections: built once, then only read, so the
/// request path takes no locks. The gRPC side (`crate::grpc`) uses the
/// same gates and delay.
pub(crate) struct Shared {
    delay: Duration,
    /// Jitter in nanoseconds, so the random draw is a plain integer range.
    jitter_nanos: u64,
    pub(crate) pool: Option<Gate>,
    pub(crate) admission: Option<Gate>,
    error_rate: f64,
    /// Nothing to do per request: answer without spawning a future.
    trivial: bool,
    /// The delay's microsecond timer; `None` without a delay (or a timerfd).
    precise: Option<crate::delay::Delays>,
    /// Requests answered per source address, for `GET /__stats`: what a
    /// test compares with what the load generator says it sent.
    counts: Mutex<BTreeMap<IpAddr, Arc<AtomicU64>>>,
    /// When, after its request came, each answer was written (with a
    /// delay, where requests are stamped): the `answered_after_us` lines
    /// of `GET /__stats`.
    answers: Arc<AnswerTimes>,
    /// The event streams of `GET /sse` and `POST /broadcast`.
    sse: Arc<Hub>,
    /// The endpoints of `--shop`.
    shop: Option<Arc<Shop>>,
}

impl Shared {
    pub(crate) fn new(config: &Config) -> Self {
        Shared {
            delay: config.delay,
            jitter_nanos: u64::try_from(config.delay_jitter.as_nanos()).unwrap_or(u64::MAX),
            pool: config.pool.as_ref().map(Gate::new),
            admission: config.admission.as_ref().map(Gate::new),
            error_rate: config.error_rate.get(),
            trivial: config.is_trivial(),
            precise: None,
            counts: Mutex::new(BTreeMap::new()),
            answers: Arc::new(AnswerTimes::new()),
            sse: Arc::new(Hub::new(config.sse.clone())),
            shop: config.shop.as_ref().map(|shop| Arc::new(Shop::new(shop))),
        }
    }

    /// The counter of one source address, taken once per connection so the
    /// request path only adds to an atomic.
    fn counter(&self, ip: IpAddr) -> Arc<AtomicU64> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(counts.entry(ip).or_default())
    }

    /// `total N`, `ADDRESS N` per source, then the answers' times (see
    /// [`AnswerTimes::stats`]) and, with `--shop`, the shop's counts, one
    /// `name value` per line.
    fn stats(&self) -> String {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let per: Vec<(IpAddr, u64)> = counts
            .iter()
            .map(|(ip, n)| (*ip, n.load(Ordering::Relaxed)))
            .collect();
        let total: u64 = per.iter().map(|(_, n)| n).sum();
        let mut text = format!("total {total}\n");
        for (ip, n) in per {
            text.push_str(&format!("{ip} {n}\n"));
        }
        text.push_str(&self.answers.stats());
        if let Some(shop) = &self.shop {
            text.push_str(&shop.stats());
        }
        text
    }

    /// This request's service delay: the fixed delay plus its jitter draw.
    pub(crate) fn service_delay(&self) -> Duration {
        if self.jitter_nanos == 0 {
            return self.delay;
        }
        let jitter = rand::random_range(0..=self.jitter_nanos);
        self.delay.saturating_add(Duration::from_nanos(jitter))
    }

    /// Whether this request is one of the injected errors.
    pub(crate) fn inject_error(&self) -> bool {
        // random() is in [0, 1), so a rate of 1 always strikes and 0 never.
        self.error_rate > 0.0 && rand::random::<f64>() < self.error_rate
    }
}

/// The hyper service: a cheap handle to [`Shared`] and the connection's
/// source counter.
#[derive(Clone)]
struct Testbed {
    shared: Arc<Shared>,
    counter: Arc<AtomicU64>,
    peer: IpAddr,
    /// When this connection's last bytes arrived, where the delay needs it.
    arrivals: Option<Arc<LastArrival>>,
}

impl Service<Request<Incoming>> for Testbed {
    type Response = Response<AnyBody>;
    type Error = Infallible;
    type Future = Reply;

    fn call(&self, request: Request<Incoming>) -> Reply {
        // Health checks must answer even while the target is overloaded,
        // which is when the coordinator most needs to know it is alive.
        if request.method() == Method::GET && request.uri().path() == "/health" {
            return Reply::Ready(future::ready(Ok(reply(StatusCode::OK, "ok\n"))));
        }
        // What was asked of it, by source: not itself a request counted.
        if request.method() == Method::GET && request.uri().path() == "/__stats" {
            let mut response = Response::new(Full::new(Bytes::from(self.shared.stats())));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Reply::Ready(future::ready(Ok(response)));
        }
        if request.method() == Method::GET && request.uri().path() == "/__stats/sse" {
            let stats = self.shared.sse.stats();
            let mut response = Response::new(Full::new(Bytes::from(stats)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Reply::Ready(future::ready(Ok(response)));
        }
        self.counter.fetch_add(1, Ordering::Relaxed);
        if let Some(shop) = &self.shared.shop {
            if let Some(route) = Route::of(request.method(), request.uri().path()) {
                return Reply::Work(Box::pin(shop_request(
                    Arc::clone(&self.shared),
                    Arc::clone(shop),
                    route,
                    request,
                    self.arrivals.clone(),
                )));
            }
        }
        let size = match request.uri().path().strip_prefix("/bytes/") {
            None => None,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n <= MAX_BYTES => Some(n),
                _ => {
                    let why = format!("/bytes/N takes N from 0 to {MAX_BYTES}, not {n:?}\n");
                    return Reply::Ready(future::ready(Ok(reply(StatusCode::BAD_REQUEST, why))));
                }
            },
        };
        if request.uri().path() == "/sse" && request.method() == Method::GET {
            let resume = sse::last_event_id(request.headers().get("last-event-id"));
            return Reply::Stream(Box::pin(subscribe(
                Arc::clone(&self.shared),
                self.peer,
                resume,
            )));
        }
        if request.uri().path() == "/broadcast" && request.method() == Method::POST {
            let (id, subscribers) = self.shared.sse.broadcast();
            let text = format!("id {id} subscribers {subscribers}\n");
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Reply::Ready(future::ready(Ok(response)));
        }
        // In benchmarks the testbed must cost as little as possible: with no
        // delay, gates or errors configured, and no body to drain, answer
        // right here without boxing a future or touching the Arc.
        if self.shared.trivial && request.body().is_end_stream() {
            return Reply::Ready(future::ready(Ok(reply(StatusCode::OK, answer(size)))));
        }
        Reply::Work(Box::pin(handle(
            Arc::clone(&self.shared),
            request,
            size,
            self.arrivals.clone(),
        )))
    }
}

/// The future of one request: answered at once, after doing its work, or
/// with a held event stream.
enum Reply {
    Ready(future::Ready<Answer>),
    Work(Pin<Box<dyn Future<Output = Answer> + Send>>),
    Stream(Pin<Box<dyn Future<Output = Response<SseBody>> + Send>>),
}

impl Future for Reply {
    type Output = Result<Response<AnyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let text = |answer: Answer| answer.map(|r| r.map(http_body_util::Either::Left));
        match self.get_mut() {
            Reply::Ready(ready) => Pin::new(ready).poll(cx).map(text),
            Reply::Work(work) => work.as_mut().poll(cx).map(text),
            Reply::Stream(stream) => stream
                .as_mut()
                .poll(cx)
                .map(|r| Ok(r.map(http_body_util::Either::Right))),
        }
    }
}

/// Opens an event stream after the service delay (so `--delay` shows in the
/// agent's time to subscribe). A held stream takes no pool or admission
/// permit: it would hold one for its whole life.
async fn subscribe(shared: Arc<Shared>, peer: IpAddr, resume: Option<u64>) -> Response<SseBody> {
    let delay = shared.service_delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut response = Response::new(shared.sse.subscribe(peer, resume));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    response
}

/// One request that has work to do: drain the body, pass admission and the
/// pool, wait out the service delay, then answer (with `size` bytes, for
/// `/bytes/N`). The delay runs from when the request's last bytes reached
/// the machine, as its connection's `arrivals` say, plus any wait at the
/// gates (see [`crate::stamped`]), and never from before that.
async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
    size: Option<usize>,
    arrivals: Option<Arc<LastArrival>>,
) -> Answer {
    // Read the whole body so the connection stays reusable (keep-alive).
    let mut body = request.into_body();
    while let Some(frame) = body.frame().await {
        if let Err(err) = frame {
            debug!(%err, "reading the request body failed");
            return Ok(reply(StatusCode::BAD_REQUEST, "bad request body\n"));
        }
    }

    let arrived = arrivals.and_then(|a| a.instant());
    if let Some(refusal) = work(&shared, shared.pool.as_ref(), arrived).await {
        return Ok(refusal);
    }

    if shared.inject_error() {
        return Ok(reply(StatusCode::INTERNAL_SERVER_ERROR, "injected error\n"));
    }
    Ok(reply(StatusCode::OK, answer(size)))
}

/// One shop request: read its body, do the work every request does (with
/// the shop's pool, if it has one), then take the step. Refusals at the
/// gates, injected errors and unreadable bodies change nothing and count
/// in no `shop_` line.
async fn shop_request(
    shared: Arc<Shared>,
    shop: Arc<Shop>,
    route: Route,
    request: Request<Incoming>,
    arrivals: Option<Arc<LastArrival>>,
) -> Answer {
    let (parts, body) = request.into_parts();
    let body = match shop::read_body(body).await {
        Ok(body) => body,
        Err(refusal) => return Ok(refusal),
    };
    let arrived = arrivals.and_then(|a| a.instant());
    let pool = shop.pool().or(shared.pool.as_ref());
    if let Some(refusal) = work(&shared, pool, arrived).await {
        return Ok(refusal);
    }
    if shared.inject_error() {
        return Ok(reply(StatusCode::INTERNAL_SERVER_ERROR, "injected error\n"));
    }
    Ok(shop.answer(&route, &parts.headers, &body))
}

/// The work every request but health checks and event streams does: pass
/// admission and `pool`, then wait out the service delay, counted from
/// `arrived` (the request's arrival stamp) plus the wait at the gates.
/// `None` once done; otherwise the refusal to answer instead.
pub(crate) async fn work(
    shared: &Shared,
    pool: Option<&Gate>,
    arrived: Option<Instant>,
) -> Option<TextResponse> {
    let gated = Instant::now();

    // Admission is held while waiting for the pool and while working, so it
    // bounds everything in the server, and it is checked first so that
    // rejections are fast (429) rather than slow (503 after the pool wait).
    let _admitted = match &shared.admission {
        Some(gate) => match gate.enter().await {
            Some(permit) => Some(permit),
            None => return Some(reply(StatusCode::TOO_MANY_REQUESTS, "not admitted\n")),
        },
        None => None,
    };
    let _slot = match pool {
        Some(gate) => match gate.enter().await {
            Some(permit) => Some(permit),
            None => return Some(reply(StatusCode::SERVICE_UNAVAILABLE, "pool timeout\n")),
        },
        None => None,
    };

    // A sleep, not a spin: the delay stands for waiting on a backend while
    // holding a pooled connection, which costs time but no CPU.
    let delay = shared.service_delay();
    if !delay.is_zero() {
        let now = Instant::now();
        let start = arrived.map_or(now, |at| (at + (now - gated)).min(now));
        match &shared.precise {
            Some(precise) => precise.sleep_until(start + delay).await,
            None => tokio::time::sleep(delay).await,
        }
    }
    None
}

/// A success's body: `ok`, or `size` bytes of `x` for `/bytes/N`, cut from
/// one buffer made on first use, so that no answer costs a copy.
fn answer(size: Option<usize>) -> Bytes {
    static BUFFER: OnceLock<Bytes> = OnceLock::new();
    match size {
        None => Bytes::from_static(b"ok\n"),
        Some(n) => BUFFER
            .get_or_init(|| Bytes::from(vec![b'x'; MAX_BYTES]))
            .slice(..n),
    }
}
