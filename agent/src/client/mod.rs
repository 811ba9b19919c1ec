//! The HTTP/1.1 transport: one client per worker, over a keep-alive pool
//! of its own connections ([`pool`]), with every failure classified into
//! the report's error kinds ([`failure`]).

mod failure;
mod pool;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use loadfleet_proto::vocab::ErrorKind;
use rustls_pki_types::ServerName;
use tokio::net::TcpSocket;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::recorder::Outcome;
use failure::ClientFailure;
use pool::Lease;

/// Keep-alive HTTP/1.1 connections owned by one worker.
///
/// Built on hyper's connection-level client rather than its pooled one: a
/// worker is single-threaded, so its connections sit in a `RefCell` (no
/// lock, no pool-key parsing, no task per checkout). At most `connections`
/// are open at once, as with wrk2 or a browser's pool: a request that finds
/// them all busy waits for the next free one. That wait is not hidden — it
/// counts in the latency, which runs from the intended instant — and it
/// keeps a hiccup on the target from turning into a storm of new
/// connections that the target (and the port space) must absorb.
#[derive(Clone)]
pub struct HttpClient {
    inner: Rc<ClientInner>,
}

type Sender = SendRequest<Full<Bytes>>;

struct ClientInner {
    /// Idle connections per `host:port`; one or two hosts in practice, so a
    /// list beats a map. Each holds one of the `open` slots.
    idle: RefCell<Vec<(String, VecDeque<Sender>)>>,
    /// Requests waiting for a connection, oldest first. Each is handed a
    /// [`Lease`]: a connection to its host, or just a slot to open one.
    waiters: RefCell<VecDeque<(String, oneshot::Sender<Lease>)>>,
    /// Slots in use: connections open, being opened, or leased.
    open: Cell<usize>,
    /// Requests waiting for a slot right now (live ones only: a request
    /// that gave up is no longer counted, even while its stale entry still
    /// sits in `waiters`).
    waiting: Cell<usize>,
    /// Since when requests have been waiting, while some are.
    saturated_since: Cell<Option<Instant>>,
    /// Time with requests waiting, not yet taken by [`HttpClient::take_saturated`].
    saturated: Cell<Duration>,
    max_open: usize,
    timeout: Duration,
    source: Option<IpAddr>,
    tls: Arc<rustls::ClientConfig>,
    /// Resolved names per `host:port`: one lookup per host, shared by
    /// every request that needs it (see [`HttpClient::resolve`]).
    names: RefCell<Vec<(String, Rc<Name>)>>,
}

/// One lookup of a host name: under way until the cell is set.
type Name = tokio::sync::OnceCell<Lookup>;

/// What a lookup found, and when, so a failure can be retried later.
#[derive(Clone)]
struct Lookup {
    addrs: Result<Vec<SocketAddr>, String>,
    at: Instant,
}

/// A failed lookup answers every request for this long before the name is
/// looked up again: a resolver that is down is asked once a second, not
/// once per arrival.
const RETRY_FAILED_LOOKUP: Duration = Duration::from_secs(1);

/// How a worker's client is set up; `Send`, so it can cross to the
/// worker's thread, where the client itself is made.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub timeout: Duration,
    /// Most connections open at once.
    pub connections: usize,
    /// Local address to send from, so agents on one machine can appear as
    /// distinct hosts (127.0.0.2, 127.0.0.3, …).
    pub source: Option<IpAddr>,
    /// Trust and ALPN settings for https:// targets.
    pub tls: Arc<rustls::ClientConfig>,
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

/// One request's way through the client, kept outside its future so that
/// a timeout, which drops the future, can still read where it got to.
struct Progress {
    phase: Cell<Phase>,
    /// When the request went onto a connection.
    on_wire: Cell<Option<Instant>>,
    /// When it first found every connection busy and joined the queue.
    queued_at: Cell<Option<Instant>>,
    /// How long it waited in that queue, once it left it.
    waited: Cell<Option<Duration>>,
}

impl Progress {
    fn new() -> Self {
        Self {
            phase: Cell::new(Phase::Queued),
            on_wire: Cell::new(None),
            queued_at: Cell::new(None),
            waited: Cell::new(None),
        }
    }

    /// Time spent waiting for one of the pool's connections, up to `now`
    /// for a request still waiting; `None` when it never had to wait.
    fn pool_wait(&self, now: Instant) -> Option<Duration> {
        self.waited.get().or_else(|| {
            self.queued_at
                .get()
                .map(|at| now.saturating_duration_since(at))
        })
    }
}

/// What became of one request in the client.
#[derive(Debug, Clone, Copy)]
pub struct Exchanged {
    pub outcome: Outcome,
    /// When the request went onto a connection (the start of its service
    /// time), if it did.
    pub on_wire: Option<Instant>,
    /// How long it waited for one of the pool's connections, if it had to.
    pub pool_wait: Option<Duration>,
}

impl HttpClient {
    pub fn new(config: ClientConfig) -> Self {
        Self {
            inner: Rc::new(ClientInner {
                idle: RefCell::new(Vec::new()),
                waiters: RefCell::new(VecDeque::new()),
                open: Cell::new(0),
                waiting: Cell::new(0),
                saturated_since: Cell::new(None),
                saturated: Cell::new(Duration::ZERO),
                max_open: config.connections.max(1),
                timeout: config.timeout,
                source: config.source,
                tls: config.tls,
                names: RefCell::new(Vec::new()),
            }),
        }
    }

    /// Sends one request and reads the whole response body; the body is part
    /// of the latency because a user waits for it too. Also says when the
    /// request went onto a connection (for the service time) and how long
    /// it waited for one.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Exchanged {
        let progress = Progress::new();
        let result =
            tokio::time::timeout(self.inner.timeout, self.exchange(request, &progress)).await;
        let pool_wait = progress.pool_wait(Instant::now());
        let outcome = match result {
            Ok(Ok(status)) => Outcome::Status(status),
            Ok(Err(e)) => Outcome::Error(e.kind()),
            Err(_) => Outcome::Error(timeout_kind(
                progress.phase.get(),
                pool_wait,
                self.inner.timeout,
            )),
        };
        Exchanged {
            outcome,
            on_wire: progress.on_wire.get(),
            pool_wait,
        }
    }

    /// Time during which requests waited for a connection since the last
    /// call, up to `now`: every connection was busy and load was held back.
    pub fn take_saturated(&self, now: Instant) -> Duration {
        let mut total = self.inner.saturated.replace(Duration::ZERO);
        if let Some(since) = self.inner.saturated_since.get() {
            total += now.saturating_duration_since(since);
            self.inner.saturated_since.set(Some(now));
        }
        total
    }

    /// One more or one fewer request waiting for a connection; keeps the
    /// time with any waiting.
    fn waiting_changed(&self, waiting: usize) {
        let inner = &self.inner;
        inner.waiting.set(waiting);
        match (waiting > 0, inner.saturated_since.get()) {
            (true, None) => inner.saturated_since.set(Some(Instant::now())),
            (false, Some(since)) => {
                inner.saturated_since.set(None);
                inner.saturated.set(inner.saturated.get() + since.elapsed());
            }
            _ => {}
        }
    }

    async fn exchange(
        &self,
        mut request: Request<Full<Bytes>>,
        progress: &Progress,
    ) -> Result<u16, ClientFailure> {
        let uri = request.uri().clone();
        let authority = uri.authority().ok_or(ClientFailure::NoHost)?;
        let key = authority.as_str();
        let mut lease = self.acquire(key, &uri, progress).await?;
        progress.phase.set(Phase::OnWire);
        progress.on_wire.set(Some(Instant::now()));
        // HTTP/1.1 origin form: the path in the request line, the host in
        // its header.
        if !request.headers().contains_key(http::header::HOST) {
            let host = HeaderValue::from_str(key).map_err(|_| ClientFailure::NoHost)?;
            request.headers_mut().insert(http::header::HOST, host);
        }
        *request.uri_mut() = uri
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone()));
        let response = lease
            .sender()?
            .send_request(request)
            .await
            .map_err(ClientFailure::Http)?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(ClientFailure::Http)?;
        }
        lease.finished = true;
        Ok(status)
    }

    async fn connect(&self, uri: &Uri) -> Result<Sender, ClientFailure> {
        let host = uri.host().ok_or(ClientFailure::NoHost)?;
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs = self
            .resolve(host.trim_matches(['[', ']']), port)
            .await
            .map_err(|e| {
                tracing::debug!("cannot resolve {host}: {e}");
                ClientFailure::Dns
            })?
            .into_iter();
        // Every address in turn (a name like localhost may give ::1 first
        // to a server that only listens on 127.0.0.1); with a source
        // address, only those of its family can be reached from it.
        let mut failure = ClientFailure::NoAddress;
        let mut stream = None;
        for addr in addrs.filter(|a| self.inner.source.is_none_or(|s| s.is_ipv4() == a.is_ipv4())) {
            match self.open_tcp(addr).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => failure = e,
            }
        }
        let stream = stream.ok_or(failure)?;
        let io = if uri.scheme_str() == Some("https") {
            let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|_| ClientFailure::NoHost)?;
            let tls = TlsConnector::from(self.inner.tls.clone())
                .connect(name, stream)
                .await
                .map_err(ClientFailure::Tls)?;
            Either::Right(tls)
        } else {
            Either::Left(stream)
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(ClientFailure::Http)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
        });
        Ok(sender)
    }

    /// The addresses of `host:port`, looked up once and kept for the
    /// worker's life. The system resolver blocks, and may take seconds for
    /// a name that does not exist: it runs on a thread of its own, never on
    /// the worker's single thread (every arrival would stall behind it) nor
    /// on the runtime's blocking pool (whose shutdown would wait for it at
    /// the end of the run). Requests that need a name being looked up wait
    /// for that one lookup, within their own timeout.
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let key = format!("{host}:{port}");
        let name = {
            let mut names = self.inner.names.borrow_mut();
            let stale = |n: &Name| {
                n.get()
                    .is_some_and(|l| l.addrs.is_err() && l.at.elapsed() >= RETRY_FAILED_LOOKUP)
            };
            match names.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) if stale(n) => {
                    *n = Rc::new(Name::new());
                    n.clone()
                }
                Some((_, n)) => n.clone(),
                None => {
                    let n = Rc::new(Name::new());
                    names.push((key, n.clone()));
                    n
                }
            }
        };
        let lookup = name
            .get_or_init(|| async {
                let (tx, rx) = oneshot::channel();
                let (h, p) = (host.to_string(), port);
                let spawned = std::thread::Builder::new()
                    .name("loadfleet-dns".into())
                    .spawn(move || {
                        use std::net::ToSocketAddrs;
                        let found = (h.as_str(), p)
                            .to_socket_addrs()
                            .map(Iterator::collect)
                            .map_err(|e| e.to_string());
                        let _ = tx.send(found);
                    });
                let addrs = match spawned {
                    Ok(_) => rx.await.unwrap_or_else(|_| {
                        Err("the lookup thread ended without an answer".into())
                    }),
                    Err(e) => Err(format!("cannot start a lookup thread: {e}")),
                };
                Lookup {
                    addrs,
                    at: Instant::now(),
                }
            })
            .await;
        lookup.addrs.clone()
    }

    async fn open_tcp(&self, addr: SocketAddr) -> Result<tokio::net::TcpStream, ClientFailure> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(ClientFailure::Connect)?;
        if let Some(ip) = self.inner.source {
            defer_port_choice(&socket);
            socket
                .bind(SocketAddr::new(ip, 0))
                .map_err(ClientFailure::Connect)?;
        }
        socket.set_nodelay(true).map_err(ClientFailure::Connect)?;
        socket.connect(addr).await.map_err(ClientFailure::Connect)
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

/// Lets `bind(ip, 0)` leave the port to `connect()`. Otherwise the kernel
/// must pick a port unique for the source address alone, scanning every
/// socket (TIME_WAIT ones too) bound to it: slow, and exhausted after ~28k
/// connections, where `connect()` can reuse a port for another destination.
fn defer_port_choice(socket: &TcpSocket) {
    if let Err(err) = crate::sys::bind_address_no_port(socket) {
        tracing::debug!("port choice not deferred to connect(): {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let c = client(1, Duration::from_secs(2));
        assert_eq!(
            c.send(get(port)).await.outcome,
            Outcome::Error(ErrorKind::Refused)
        );
    }

    /// A bare HTTP/1.1 server that answers every request with 200 after
    /// `delay`, over keep-alive connections; returns its port and a counter
    /// of the connections it accepted.
    async fn slow_server(delay: Duration) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut pending = Vec::new();
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        pending.extend_from_slice(&buf[..n]);
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            pending.drain(..end + 4);
                            tokio::time::sleep(delay).await;
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if stream.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    fn get(port: u16) -> Request<Full<Bytes>> {
        let mix = crate::request::RequestMix::from_proto(
            &[loadfleet_proto::v1::RequestTemplate {
                url: format!("http://127.0.0.1:{port}/"),
                ..Default::default()
            }],
            None,
            0,
            &crate::allow::AllowList::default(),
        )
        .unwrap();
        mix.build(0, &mut loadfleet_proto::rng::SplitMix64::new(1))
            .unwrap()
    }

    fn client(connections: usize, timeout: Duration) -> HttpClient {
        HttpClient::new(ClientConfig {
            timeout,
            connections,
            source: None,
            tls: crate::tls::client_config(None).unwrap(),
        })
    }

    /// With one connection, concurrent requests queue for it and reuse it:
    /// all succeed over a single connection, and the slot count returns to
    /// one open, idle connection.
    #[tokio::test]
    async fn requests_beyond_the_pool_wait_and_reuse_the_connection() {
        let (port, accepted) = slow_server(Duration::from_millis(20)).await;
        let c = client(1, Duration::from_secs(5));
        let results = futures::future::join_all((0..5).map(|_| c.send(get(port)))).await;
        for r in &results {
            assert_eq!(r.outcome, Outcome::Status(200));
            assert!(r.on_wire.is_some());
        }
        // Four of them found the connection busy and waited for it.
        assert_eq!(results.iter().filter(|r| r.pool_wait.is_some()).count(), 4);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(c.inner.open.get(), 1);
        assert!(c.inner.waiters.borrow().is_empty());
    }

    /// A request that times out while queued for the agent's own pool is
    /// `pool_timeout`, not a target timeout — and no slot is lost: once the
    /// busy connection is free, the pool serves again with one connection.
    #[tokio::test]
    async fn queued_timeouts_are_named_and_leak_nothing() {
        let (port, accepted) = slow_server(Duration::from_millis(1)).await;
        let c = client(1, Duration::from_millis(100));
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let key = uri.authority().unwrap().as_str().to_string();
        // Hold the only slot, as a long request would.
        let held = c.acquire(&key, &uri, &Progress::new()).await.unwrap();
        let r = c.send(get(port)).await;
        assert_eq!(r.outcome, Outcome::Error(ErrorKind::PoolTimeout));
        assert!(r.on_wire.is_none(), "never reached a connection");
        assert!(r.pool_wait.is_some_and(|w| w >= Duration::from_millis(100)));
        assert!(c.take_saturated(Instant::now()) >= Duration::from_millis(100));
        assert_eq!(
            c.inner.waiting.get(),
            0,
            "the one that gave up is not waiting"
        );
        assert_eq!(c.inner.open.get(), 1);
        drop(held); // unfinished: its connection closes, the slot frees
        assert_eq!(c.inner.open.get(), 0);
        assert_eq!(c.send(get(port)).await.outcome, Outcome::Status(200));
        assert_eq!(c.send(get(port)).await.outcome, Outcome::Status(200));
        assert_eq!(c.inner.open.get(), 1, "one connection, reused");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// The overload the issue saw: one connection, a 100 ms service and a
    /// 300 ms timeout, with far more requests than the connection can
    /// carry. A freed connection goes to the oldest waiter, which reaches
    /// the wire with almost no time left: such requests are `pool_timeout`
    /// (most of their time went to the agent's own queue), never `timeout`.
    #[tokio::test]
    async fn requests_that_mostly_waited_for_the_pool_are_pool_timeouts() {
        let (port, _) = slow_server(Duration::from_millis(100)).await;
        let c = client(1, Duration::from_millis(300));
        let results = futures::future::join_all((0..12).map(|i| {
            let c = c.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20 * i)).await;
                c.send(get(port)).await
            }
        }))
        .await;
        let count = |kind: Outcome| results.iter().filter(|r| r.outcome == kind).count();
        assert_eq!(count(Outcome::Error(ErrorKind::Timeout)), 0);
        assert!(count(Outcome::Error(ErrorKind::PoolTimeout)) >= 6);
        assert!(count(Outcome::Status(200)) >= 1);
        assert!(c.take_saturated(Instant::now()) >= Duration::from_millis(300));
    }
}
