//! The HTTP/2 transport: a worker's streams multiplexed on at most
//! `connections` connections, opened through the [`Dialer`] (prior
//! knowledge h2c on http://, ALPN h2 on https://).
//!
//! Built on the `h2` crate (hyper's HTTP/2 engine) rather than hyper's
//! client: hyper queues a request silently when the peer's
//! SETTINGS_MAX_CONCURRENT_STREAMS is reached and does not say what that
//! limit is, so a wait for a stream would count as the target's service
//! time. Here every connection's stream limit is read from h2, and an
//! arrival that finds every stream of every connection busy waits in the
//! agent's own queue, exactly as the HTTP/1.1 pool makes it wait for a
//! connection: the wait counts in its latency (from the intended instant)
//! and as pool wait, and its service time starts when its stream opens.
//! Nothing waits here beyond the worker's in-flight cap, which the
//! scheduler applies before a request reaches the transport.
//!
//! GOAWAY and RST_STREAM are reported as error kinds of their own. A
//! request that has not left the agent when its connection turns out to be
//! going away is not one of them: it takes another connection, as an
//! HTTP/1.1 request takes another when an idle one was closed.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use loadfleet_proto::vocab::HttpProtocol;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::dial::{Dialed, Dialer};
use super::failure::ClientFailure;
use super::kept::Sink;
use super::progress::Progress;
use super::saturation::{Queued, Saturation};

/// Window for each stream's response body: large enough that flow control
/// never paces a response of a load test (h2's default, 64 KiB, would make
/// a 1 MiB body wait for 16 window updates).
const STREAM_WINDOW: u32 = 1 << 20;
/// Window for the whole connection, shared by its streams.
const CONNECTION_WINDOW: u32 = 16 << 20;

/// What an HTTP/2 exchange brought back, for a caller that looks beyond
/// the status (gRPC reads `grpc-status` from the trailers).
#[derive(Debug)]
pub(crate) struct Answer {
    /// The response head: status and headers.
    pub head: http::response::Parts,
    /// The trailers, when the peer sent any.
    pub trailers: Option<HeaderMap>,
}

/// One worker's HTTP/2 connections and the arrivals waiting for a stream.
#[derive(Clone)]
pub(crate) struct Http2Client {
    inner: Rc<Inner>,
}

struct Inner {
    dialer: Dialer,
    /// Open connections, in the order they were opened.
    conns: RefCell<Vec<Rc<Conn>>>,
    /// Connections being opened right now (each for a request that waits).
    opening: Cell<usize>,
    /// Requests waiting for a stream, oldest first.
    waiters: RefCell<VecDeque<Waiter>>,
    saturation: Rc<Saturation>,
    /// Connections established since last taken: over TLS (h2), cleartext
    /// (h2c).
    established: Cell<(u64, u64)>,
    /// Connections the streams are spread over while each has room, as
    /// many clients would open: `--connections`.
    spread: usize,
    /// Most connections: past `spread`, one more opens only when the
    /// streams of every open one run out.
    max_conns: usize,
}

/// One connection: its handle for new streams, and the streams on it.
struct Conn {
    /// `scheme://authority`: a connection serves one origin.
    origin: String,
    sender: h2::client::SendRequest<Bytes>,
    /// Streams this worker has open on it.
    busy: Cell<usize>,
    /// False once it went away (GOAWAY, closed, failed): it takes no more
    /// streams, and leaves the list. Shared with the task that drives the
    /// connection, which must not hold the sender (the connection closes
    /// when the last sender is dropped).
    usable: Rc<Cell<bool>>,
}

impl Conn {
    /// Can it take one more stream? The peer's limit is read each time: a
    /// SETTINGS frame may change it mid-connection.
    fn has_room(&self) -> bool {
        self.usable.get() && self.busy.get() < self.sender.current_max_send_streams()
    }
}

/// A request waiting for a stream on a connection to `origin`.
struct Waiter {
    origin: String,
    tx: oneshot::Sender<Grant>,
}

/// What a waiter is handed: a stream on an open connection, or the right
/// to open a new one.
enum Grant {
    Stream(StreamSlot),
    Open(OpenSlot),
}

/// A stream reserved on a connection. Dropping it (the exchange ended,
/// failed or timed out) frees the stream for the next waiter.
struct StreamSlot {
    client: Http2Client,
    conn: Rc<Conn>,
    armed: bool,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if self.armed {
            self.conn.busy.set(self.conn.busy.get().saturating_sub(1));
            self.client.serve_waiters();
        }
    }
}

/// The right to open one connection. Dropping it unused (the request gave
/// up, or opening failed) gives the right back.
struct OpenSlot {
    client: Http2Client,
    armed: bool,
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        if self.armed {
            let inner = &self.client.inner;
            inner.opening.set(inner.opening.get().saturating_sub(1));
            self.client.serve_waiters();
        }
    }
}

impl Http2Client {
    pub(crate) fn new(dialer: Dialer, connections: usize, max_connections: usize) -> Self {
        Self {
            inner: Rc::new(Inner {
                dialer,
                conns: RefCell::new(Vec::new()),
                opening: Cell::new(0),
                waiters: RefCell::new(VecDeque::new()),
                saturation: Rc::default(),
                established: Cell::new((0, 0)),
                spread: connections.max(1),
                max_conns: max_connections.max(connections).max(1),
            }),
        }
    }

    /// Counts a request the worker holds back in its own queue as waiting
    /// for one of this client's streams, until the guard drops.
    pub(super) fn queue(&self) -> Queued {
        self.inner.saturation.wait()
    }

    /// Time during which requests waited for a stream since the last call,
    /// up to `now`.
    pub(crate) fn take_saturated(&self, now: Instant) -> Duration {
        self.inner.saturation.take(now)
    }

    /// Connections established since the last call, by the protocol they
    /// speak.
    pub(crate) fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        let (tls, clear) = self.inner.established.replace((0, 0));
        [(HttpProtocol::H2, tls), (HttpProtocol::H2c, clear)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Sends one request on a stream and reads the whole response: the
    /// status and headers, and the
    /// trailers a protocol on top of HTTP/2 (gRPC) reads its own status
    /// from. The body is part of the latency because a user waits for it
    /// too; its bytes go to `sink` on the way, handed back with the answer.
    pub(super) async fn exchange<S: Sink>(
        &self,
        request: Request<Full<Bytes>>,
        progress: &Progress<'_>,
        mut sink: S,
    ) -> Result<(Answer, S), ClientFailure> {
        let (mut parts, body) = request.into_parts();
        // Full never fails; its one frame is the whole body.
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let origin = origin_form(&mut parts)?;
        loop {
            let slot = self.acquire(&origin, &parts.uri, progress).await?;
            let on_wire = progress.went_on_wire();
            let mut sender = slot.conn.sender.clone();
            let mut head = Request::new(());
            *head.method_mut() = parts.method.clone();
            *head.uri_mut() = parts.uri.clone();
            *head.headers_mut() = parts.headers.clone();
            let (response, mut send) = match sender.send_request(head, body.is_empty()) {
                Ok(sent) => sent,
                // The connection is going away and the request never left:
                // it is not the target's answer to it, so it takes another
                // connection.
                Err(e) if e.is_go_away() || e.get_io().is_some() => {
                    slot.conn.usable.set(false);
                    drop(slot);
                    continue;
                }
                Err(e) => return Err(ClientFailure::H2(e)),
            };
            if !body.is_empty() {
                send.send_data(body.clone(), true)
                    .map_err(ClientFailure::H2)?;
            }
            let gone = |e: h2::Error| {
                if e.is_go_away() {
                    slot.conn.usable.set(false);
                }
                ClientFailure::H2(e)
            };
            let response = response.await.map_err(gone)?;
            let headers_at = Instant::now();
            progress.ttfb.set(Some(headers_at - on_wire));
            let (head, mut recv) = response.into_parts();
            while let Some(chunk) = recv.data().await {
                let chunk = chunk.map_err(gone)?;
                sink.data(&chunk);
                // Gives the window back, so the peer may send more.
                let _ = recv.flow_control().release_capacity(chunk.len());
            }
            let trailers = recv.trailers().await.map_err(gone)?;
            progress.body.set(Some(headers_at.elapsed()));
            return Ok((Answer { head, trailers }, sink));
        }
    }

    /// A stream on a connection to `origin`: on one with room, on a new one
    /// while under the connection limit, or the next one freed, oldest
    /// waiter first.
    async fn acquire(
        &self,
        origin: &str,
        uri: &Uri,
        progress: &Progress<'_>,
    ) -> Result<StreamSlot, ClientFailure> {
        let grant = match self.grant(origin) {
            Some(grant) => grant,
            None => {
                let (tx, rx) = oneshot::channel();
                self.inner.waiters.borrow_mut().push_back(Waiter {
                    origin: origin.to_string(),
                    tx,
                });
                let queued_at = Instant::now();
                progress.queued_at.set(Some(queued_at));
                let waiting = self.inner.saturation.wait();
                let handed = rx.await;
                drop(waiting);
                progress.waited.set(Some(queued_at.elapsed()));
                // The sender lives in the waiter list until it is served,
                // and the list lives as long as the client.
                handed.map_err(|_| ClientFailure::NoConnection)?
            }
        };
        match grant {
            Grant::Stream(slot) => Ok(slot),
            Grant::Open(open) => {
                progress.connecting();
                self.open(origin, uri, open, progress).await
            }
        }
    }

    /// Room for one more stream to `origin` right now, reserved: a stream
    /// on a connection, or a connection to open. Streams spread over the
    /// connections, as h2load's do: an idle connection first, then a new
    /// one while under the limit, then the least busy with room. Connections
    /// that went away leave the list on the way; an idle connection to
    /// another origin is closed to make room when the limit is reached.
    fn grant(&self, origin: &str) -> Option<Grant> {
        let inner = &self.inner;
        let mut conns = inner.conns.borrow_mut();
        conns.retain(|c| c.usable.get() || c.busy.get() > 0);
        let least_busy = conns
            .iter()
            .filter(|c| c.origin == origin && c.has_room())
            .min_by_key(|c| c.busy.get());
        let open = conns.len() + inner.opening.get();
        let under_limit = open < inner.max_conns;
        let spreading = open < inner.spread;
        match least_busy {
            Some(conn) if conn.busy.get() == 0 || !spreading => {
                conn.busy.set(conn.busy.get() + 1);
                return Some(Grant::Stream(StreamSlot {
                    client: self.clone(),
                    conn: conn.clone(),
                    armed: true,
                }));
            }
            _ => {}
        }
        // A connection being opened brings streams of its own (servers
        // allow 100 or more): beyond the spread, an arrival waits for it
        // rather than open one connection per arrival while it handshakes.
        if !spreading && inner.opening.get() > 0 {
            return None;
        }
        if !under_limit {
            let idle = conns
                .iter()
                .position(|c| c.origin != origin && c.busy.get() == 0)?;
            // Dropping its handle lets the connection close once idle.
            conns.remove(idle);
        }
        inner.opening.set(inner.opening.get() + 1);
        Some(Grant::Open(OpenSlot {
            client: self.clone(),
            armed: true,
        }))
    }

    /// Hands whatever room there is to the waiters, oldest first; a waiter
    /// that gave up meanwhile has its grant undone.
    fn serve_waiters(&self) {
        loop {
            let waiter = {
                let mut waiters = self.inner.waiters.borrow_mut();
                // Those that gave up leave from the front as they come.
                while waiters.front().is_some_and(|w| w.tx.is_closed()) {
                    waiters.pop_front();
                }
                // One origin (the usual case) is asked once per pass.
                let mut asked: Option<(&str, bool)> = None;
                let pos = waiters.iter().position(|w| {
                    let can = match asked {
                        Some((origin, can)) if origin == w.origin => can,
                        _ => self.could_grant(&w.origin),
                    };
                    asked = Some((&w.origin, can));
                    can && !w.tx.is_closed()
                });
                match pos.and_then(|p| waiters.remove(p)) {
                    Some(w) => w,
                    None => return,
                }
            };
            let Some(grant) = self.grant(&waiter.origin) else {
                return;
            };
            if let Err(grant) = waiter.tx.send(grant) {
                self.undo(grant);
            }
        }
    }

    /// Would [`Self::grant`] succeed for `origin`?
    fn could_grant(&self, origin: &str) -> bool {
        let inner = &self.inner;
        let conns = inner.conns.borrow();
        if conns.iter().any(|c| c.origin == origin && c.has_room()) {
            return true;
        }
        let open = conns
            .iter()
            .filter(|c| c.usable.get() || c.busy.get() > 0)
            .count()
            + inner.opening.get();
        if open >= inner.spread && inner.opening.get() > 0 {
            return false;
        }
        open < inner.max_conns
            || conns
                .iter()
                .any(|c| c.origin != origin && c.busy.get() == 0)
    }

    /// Takes back a grant nobody received, without serving the waiters
    /// again from inside [`Self::serve_waiters`].
    fn undo(&self, grant: Grant) {
        match grant {
            Grant::Stream(mut slot) => {
                slot.armed = false;
                slot.conn.busy.set(slot.conn.busy.get().saturating_sub(1));
            }
            Grant::Open(mut open) => {
                open.armed = false;
                self.inner
                    .opening
                    .set(self.inner.opening.get().saturating_sub(1));
            }
        }
    }

    /// Opens a connection with `open`'s right and takes the first stream on
    /// it. Waits for the peer's SETTINGS (a PING's answer comes after
    /// them), so its stream limit is known before any stream is counted
    /// against it.
    async fn open(
        &self,
        origin: &str,
        uri: &Uri,
        mut open: OpenSlot,
        progress: &Progress<'_>,
    ) -> Result<StreamSlot, ClientFailure> {
        let dialed = self.inner.dialer.dial(uri).await.map_err(no_h2_alert)?;
        progress.connected(&dialed);
        let Dialed { io, alpn, tls, .. } = dialed;
        let protocol = if tls.is_some() {
            if alpn.as_deref() != Some(b"h2") {
                return Err(ClientFailure::NoH2);
            }
            HttpProtocol::H2
        } else {
            HttpProtocol::H2c
        };
        let (sender, mut connection) = h2::client::Builder::new()
            .enable_push(false)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(ClientFailure::H2)?;
        let mut ping = connection.ping_pong();
        let conn = Rc::new(Conn {
            origin: origin.to_string(),
            sender,
            busy: Cell::new(1),
            usable: Rc::new(Cell::new(true)),
        });
        let weak: Weak<Inner> = Rc::downgrade(&self.inner);
        let watched = conn.usable.clone();
        tokio::task::spawn_local(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP/2 connection ended: {e}");
            }
            watched.set(false);
            // The client may be gone at the end of the run.
            if let Some(inner) = weak.upgrade() {
                Http2Client { inner }.serve_waiters();
            }
        });
        if let Some(ping) = ping.as_mut() {
            ping.ping(h2::Ping::opaque())
                .await
                .map_err(ClientFailure::H2)?;
        }
        let (tls_count, clear) = self.inner.established.get();
        self.inner.established.set(match protocol {
            HttpProtocol::H2 => (tls_count + 1, clear),
            _ => (tls_count, clear + 1),
        });
        // The right to open becomes the connection and its first stream.
        open.armed = false;
        self.inner
            .opening
            .set(self.inner.opening.get().saturating_sub(1));
        self.inner.conns.borrow_mut().push(conn.clone());
        let slot = StreamSlot {
            client: self.clone(),
            conn,
            armed: true,
        };
        // The rest of its streams go to whoever waits for them.
        self.serve_waiters();
        Ok(slot)
    }
}

/// The request's origin (`scheme://authority`), after moving a `Host`
/// header into the authority (HTTP/2 carries it as `:authority`) and
/// dropping the headers HTTP/2 forbids (RFC 9113, 8.2.2), which a plan
/// written for HTTP/1.1 may set.
fn origin_form(parts: &mut http::request::Parts) -> Result<String, ClientFailure> {
    if let Some(host) = parts.headers.remove(HOST) {
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.authority = Some(
            host.to_str()
                .ok()
                .and_then(|h| h.parse().ok())
                .ok_or(ClientFailure::NoHost)?,
        );
        parts.uri = Uri::from_parts(uri).map_err(|_| ClientFailure::NoHost)?;
    }
    for name in [CONNECTION, TRANSFER_ENCODING, UPGRADE] {
        parts.headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        parts.headers.remove(name);
    }
    if parts.headers.get(TE).is_some_and(|te| te != "trailers") {
        parts.headers.remove(TE);
    }
    parts.version = http::Version::HTTP_2;
    let scheme = parts.uri.scheme_str().ok_or(ClientFailure::NoHost)?;
    let authority = parts.uri.authority().ok_or(ClientFailure::NoHost)?;
    Ok(format!("{scheme}://{authority}"))
}

/// A TLS server that speaks none of the protocols offered by ALPN (only
/// h2 is) ends the handshake with a `no_application_protocol` alert: it
/// will not speak HTTP/2, which is `no_h2`, not a certificate problem.
fn no_h2_alert(failure: ClientFailure) -> ClientFailure {
    let refused = match &failure {
        ClientFailure::Tls(io) => io
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
            .is_some_and(|e| {
                matches!(
                    e,
                    rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)
                )
            }),
        _ => false,
    };
    if refused {
        ClientFailure::NoH2
    } else {
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientConfig, Outcome, Transport};
    use loadfleet_proto::vocab::{ErrorKind, UnsentReason};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An HTTP/2 server (the h2 crate's, cleartext) that allows
    /// `max_streams` concurrent streams and answers each request with 200
    /// after `delay`, or resets it with `reset`; returns its port and the
    /// most streams it ever had open at once.
    async fn h2_server(
        max_streams: u32,
        delay: Duration,
        reset: Option<h2::Reason>,
    ) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let peak = Arc::new(AtomicUsize::new(0));
        let seen = peak.clone();
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                let peak = seen.clone();
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max_streams)
                        .handshake::<_, Bytes>(io)
                        .await
                        .unwrap();
                    let open = Arc::new(AtomicUsize::new(0));
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        if let Some(reason) = reset {
                            respond.send_reset(reason);
                            continue;
                        }
                        let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        let open = open.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            open.fetch_sub(1, Ordering::SeqCst);
                            let response = http::Response::builder().status(200).body(()).unwrap();
                            if let Ok(mut body) = respond.send_response(response, false) {
                                let _ = body.send_data(Bytes::from_static(b"ok"), true);
                            }
                        });
                    }
                });
            }
        });
        (port, peak)
    }

    fn transport(
        tls: Arc<rustls::ClientConfig>,
        connections: usize,
        timeout: Duration,
    ) -> Transport {
        Transport::new(ClientConfig {
            timeout,
            connections,
            max_connections: connections,
            source: None,
            more_sources: Vec::new(),
            tls,
            protocol: HttpProtocol::H2,
        })
    }

    fn client(connections: usize, timeout: Duration) -> Transport {
        let roots = rustls::RootCertStore::empty();
        let tls = crate::client::tls::target_config(&roots, None, &[b"h2"]).unwrap();
        transport(tls, connections, timeout)
    }

    fn get(port: u16) -> Request<Full<Bytes>> {
        Request::get(format!("http://127.0.0.1:{port}/"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    /// One connection whose peer allows 2 streams: 6 requests at once go
    /// 2 by 2, and the peer never sees more. The 4 that wait for a stream
    /// show it as pool wait, not as service time.
    #[tokio::test]
    async fn streams_beyond_the_peers_limit_wait_in_the_agent() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let delay = Duration::from_millis(100);
                let (port, peak) = h2_server(2, delay, None).await;
                let c = client(1, Duration::from_secs(5));
                let start = Instant::now();
                let results = futures::future::join_all(
                    (0..6).map(|_| c.send(get(port), Instant::now(), None, &|| ())),
                )
                .await;
                let done = Instant::now();
                assert!(results.iter().all(|r| r.outcome == Outcome::Status(200)));
                assert_eq!(peak.load(Ordering::SeqCst), 2);
                // The first opens the connection; the others wait for it,
                // and 4 of them for a stream freed after the delay.
                let waited = |at_least: Duration| {
                    results
                        .iter()
                        .filter(|r| r.pool_wait.is_some_and(|w| w >= at_least))
                        .count()
                };
                assert_eq!(waited(Duration::ZERO), 5);
                assert_eq!(waited(delay - Duration::from_millis(10)), 4);
                for r in &results {
                    let service = done.saturating_duration_since(r.on_wire.unwrap());
                    assert!(service < done - start, "service time excludes the wait");
                }
                assert!(done - start >= delay * 3);
                assert_eq!(c.take_connections(), vec![(HttpProtocol::H2c, 1)]);
                assert!(c.take_saturated(Instant::now()) >= delay * 2 - Duration::from_millis(20));
            })
            .await;
    }

    /// Arrivals that come while the spread's connections handshake wait
    /// for their streams instead of opening a connection each: 30 at once
    /// with room for 20 connections open only the spread's 2.
    #[tokio::test]
    async fn arrivals_during_the_handshake_wait_for_its_streams() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (port, peak) = h2_server(100, Duration::from_millis(50), None).await;
                let roots = rustls::RootCertStore::empty();
                let tls = crate::client::tls::target_config(&roots, None, &[b"h2"]).unwrap();
                let c = Transport::new(ClientConfig {
                    timeout: Duration::from_secs(5),
                    connections: 2,
                    max_connections: 20,
                    source: None,
                    more_sources: Vec::new(),
                    tls,
                    protocol: HttpProtocol::H2,
                });
                let results = futures::future::join_all(
                    (0..30).map(|_| c.send(get(port), Instant::now(), None, &|| ())),
                )
                .await;
                assert!(results.iter().all(|r| r.outcome == Outcome::Status(200)));
                assert!(peak.load(Ordering::SeqCst) >= 15, "the streams overlapped");
                assert_eq!(c.take_connections(), vec![(HttpProtocol::H2c, 2)]);
            })
            .await;
    }

    /// A TLS server for `localhost` offering `alpn`, serving HTTP/2 (200 at
    /// once) when h2 was agreed; returns its port and a client that trusts
    /// its certificate through the plan's `ca_cert`.
    async fn tls_server(alpn: &[&[u8]]) -> (u16, Transport) {
        let (mut config, tls) = crate::client::tls::testing::localhost(&[b"h2"]);
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(io).await else {
                        return;
                    };
                    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                        return;
                    }
                    let mut conn = h2::server::handshake(tls).await.unwrap();
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        let response = http::Response::builder().status(200).body(()).unwrap();
                        let _ = respond.send_response(response, true);
                    }
                });
            }
        });
        (port, transport(tls, 1, Duration::from_secs(5)))
    }

    fn get_tls(port: u16) -> Request<Full<Bytes>> {
        Request::get(format!("https://localhost:{port}/"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    #[tokio::test]
    async fn h2_over_tls_is_negotiated_by_alpn() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (port, c) = tls_server(&[b"h2", b"http/1.1"]).await;
                assert_eq!(
                    c.send(get_tls(port), Instant::now(), None, &|| ())
                        .await
                        .outcome,
                    Outcome::Status(200)
                );
                assert_eq!(c.take_connections(), vec![(HttpProtocol::H2, 1)]);
            })
            .await;
    }

    /// A server that speaks only HTTP/1.1: the agent does not fall back to
    /// it (that would measure another protocol than the plan's).
    #[tokio::test]
    async fn a_tls_peer_without_h2_is_no_h2() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (port, c) = tls_server(&[b"http/1.1"]).await;
                assert_eq!(
                    c.send(get_tls(port), Instant::now(), None, &|| ())
                        .await
                        .outcome,
                    Outcome::Error(ErrorKind::NoH2)
                );
                assert!(c.take_connections().is_empty());
            })
            .await;
    }

    #[tokio::test]
    async fn a_reset_stream_is_its_own_error_kind() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (port, _) =
                    h2_server(10, Duration::ZERO, Some(h2::Reason::REFUSED_STREAM)).await;
                let c = client(1, Duration::from_secs(2));
                assert_eq!(
                    c.send(get(port), Instant::now(), None, &|| ())
                        .await
                        .outcome,
                    Outcome::Error(ErrorKind::StreamReset)
                );
            })
            .await;
    }

    /// A server that answers nothing, one stream at a time: the request on
    /// the stream runs out of time on the wire; the oldest waiter is handed
    /// the stream it frees and has its whole timeout there; the one still
    /// waiting when its time runs out is unsent `pool_timeout`.
    #[tokio::test]
    async fn waiting_for_a_stream_until_the_timeout_is_a_pool_timeout() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (port, _) = h2_server(1, Duration::from_secs(60), None).await;
                let c = client(1, Duration::from_millis(300));
                let later = |i: u64| {
                    let c = c.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(if i == 0 { 0 } else { 50 }))
                            .await;
                        c.send(get(port), Instant::now(), None, &|| ()).await
                    }
                };
                let results = futures::future::join_all((0..3).map(later)).await;
                let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
                assert_eq!(count(Outcome::Error(ErrorKind::Timeout)), 2);
                assert_eq!(count(Outcome::Unsent(UnsentReason::PoolTimeout)), 1);
            })
            .await;
    }
}
