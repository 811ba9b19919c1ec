//! The HTTP/1.1 transport: a hyper client with a keep-alive pool per worker.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::template::{Text, Values};
use loadfleet_proto::v1;
use rustls_pki_types::ServerName;
use tokio::net::TcpSocket;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::recorder::Outcome;

/// One request of a scenario's mix, parsed once. Parts without
/// placeholders are prebuilt, so a fully static request costs only clones
/// of reference-counted parts.
struct RequestSpec {
    method: Method,
    url: Text,
    uri: Option<Uri>,
    headers: Vec<(HeaderName, Text)>,
    static_headers: Option<HeaderMap>,
    body: Option<Text>,
    static_body: Bytes,
}

/// A scenario's weighted mix of requests and the data they draw from.
pub struct RequestMix {
    specs: Vec<RequestSpec>,
    interleave: Interleave,
    rows: Vec<Vec<String>>,
    random_rows: bool,
    agent: u32,
}

/// Checks that a URL can be sent to: http with a host.
fn check_uri(url: &str) -> anyhow::Result<Uri> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("target url {url:?} is not a valid URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            bail!("target url scheme {other:?} is not supported; use http:// or https://")
        }
        None => bail!("target url {url:?} has no scheme; use http://HOST:PORT/PATH"),
    }
    if uri.host().is_none() {
        bail!("target url {url:?} has no host");
    }
    Ok(uri)
}

impl RequestMix {
    pub fn from_proto(
        requests: &[v1::RequestTemplate],
        data: Option<&v1::DataTable>,
        agent: u32,
    ) -> anyhow::Result<Self> {
        if requests.is_empty() {
            bail!("the scenario has no requests");
        }
        let columns: &[String] = data.map_or(&[], |d| d.columns.as_slice());
        let mut specs = Vec::with_capacity(requests.len());
        for t in requests {
            let method = if t.method.is_empty() {
                Method::GET
            } else {
                Method::from_bytes(t.method.as_bytes())
                    .with_context(|| format!("request method {:?} is not valid", t.method))?
            };
            let url = Text::parse(&t.url, columns).with_context(|| format!("url {:?}", t.url))?;
            let uri = if url.is_static() {
                Some(check_uri(&t.url)?)
            } else {
                None
            };
            let mut headers = Vec::new();
            for h in &t.headers {
                let name = HeaderName::from_bytes(h.name.as_bytes())
                    .with_context(|| format!("header name {:?} is not valid", h.name))?;
                let value = Text::parse(&h.value, columns)
                    .with_context(|| format!("header {:?}", h.name))?;
                headers.push((name, value));
            }
            let static_headers = if headers.iter().all(|(_, v)| v.is_static()) {
                let mut map = HeaderMap::new();
                for h in &t.headers {
                    let value = HeaderValue::from_str(&h.value)
                        .with_context(|| format!("header {:?} has an invalid value", h.name))?;
                    if let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) {
                        map.append(name, value);
                    }
                }
                Some(map)
            } else {
                None
            };
            // A body that is not UTF-8 (a binary file) is sent as it is.
            let body = match std::str::from_utf8(&t.body) {
                Ok(text) => {
                    Some(Text::parse(text, columns).context("body")?).filter(|b| !b.is_static())
                }
                Err(_) => None,
            };
            specs.push(RequestSpec {
                method,
                url,
                uri,
                headers,
                static_headers,
                body,
                static_body: Bytes::from(t.body.clone()),
            });
        }
        let weights: Vec<u32> = requests.iter().map(|r| r.weight.max(1)).collect();
        Ok(Self {
            specs,
            interleave: Interleave::new(&weights)?,
            rows: data.map_or_else(Vec::new, |d| {
                d.rows.iter().map(|r| r.values.clone()).collect()
            }),
            random_rows: data.is_some_and(|d| d.random),
            agent,
        })
    }

    /// Builds the request for fleet-wide arrival `seq`. An error means the
    /// rendered values do not form a valid request (e.g. a data value with a
    /// space in a URL); the arrival is then counted unsent, never sent.
    pub fn build(
        &self,
        seq: u64,
        rng: &mut SplitMix64,
    ) -> Result<Request<Full<Bytes>>, &'static str> {
        let spec = &self.specs[self.interleave.owner(seq)];
        let row = if self.rows.is_empty() {
            None
        } else if self.random_rows {
            Some(self.rows[(rng.next_u64() % self.rows.len() as u64) as usize].as_slice())
        } else {
            Some(self.rows[(seq % self.rows.len() as u64) as usize].as_slice())
        };
        let mut values = Values {
            seq,
            agent: self.agent,
            rng,
            row,
        };
        let body = match &spec.body {
            None => spec.static_body.clone(),
            Some(t) => {
                let mut s = String::new();
                t.render(&mut values, &mut s);
                Bytes::from(s)
            }
        };
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = spec.method.clone();
        *req.uri_mut() = match &spec.uri {
            Some(uri) => uri.clone(),
            None => {
                let mut s = String::new();
                spec.url.render(&mut values, &mut s);
                let uri: Uri = s.parse().map_err(|_| UNSENT_INVALID_REQUEST)?;
                if uri.host().is_none() {
                    return Err(UNSENT_INVALID_REQUEST);
                }
                uri
            }
        };
        match &spec.static_headers {
            Some(map) if !map.is_empty() => *req.headers_mut() = map.clone(),
            Some(_) => {}
            None => {
                for (name, value) in &spec.headers {
                    let mut s = String::new();
                    value.render(&mut values, &mut s);
                    let value = HeaderValue::from_str(&s).map_err(|_| UNSENT_INVALID_REQUEST)?;
                    req.headers_mut().append(name.clone(), value);
                }
            }
        }
        Ok(req)
    }
}

/// Error kind: the request timed out while queued for one of the agent's
/// own connections (raise --connections, or the generator is the limit).
pub const ERROR_POOL_TIMEOUT: &str = "pool_timeout";

/// Unsent reason: the rendered template did not form a valid request.
pub const UNSENT_INVALID_REQUEST: &str = "invalid_request";

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
    max_open: usize,
    timeout: Duration,
    source: Option<IpAddr>,
    tls: Arc<rustls::ClientConfig>,
}

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

/// One slot of the pool, with the connection in it once there is one.
///
/// Whatever happens to a request — a timeout dropping it anywhere, an
/// error, a hand-over nobody received — dropping the lease gives the slot
/// back: a finished exchange returns its connection for reuse, anything else
/// closes it. So slots can neither leak nor be counted twice.
struct Lease {
    client: HttpClient,
    key: String,
    sender: Option<Sender>,
    /// The exchange completed, so the connection may be reused.
    finished: bool,
    /// Cleared when the lease's slot has been passed on elsewhere.
    armed: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.sender.take() {
            Some(s) if self.finished && !s.is_closed() => self.client.give_back(&self.key, s),
            _ => self.client.release(),
        }
    }
}

impl Lease {
    fn new(client: &HttpClient, key: &str, sender: Option<Sender>) -> Self {
        Self {
            client: client.clone(),
            key: key.to_string(),
            sender,
            finished: false,
            armed: true,
        }
    }

    /// The connection, once the lease has one.
    fn sender(&mut self) -> Result<&mut Sender, ClientFailure> {
        self.sender.as_mut().ok_or(ClientFailure::NoConnection)
    }

    /// Waits until the connection can take a request; false when it died.
    /// A connection just handed back is not ready until its task has
    /// finished the previous exchange, which takes microseconds.
    async fn ready(&mut self) -> bool {
        match self.sender.as_mut() {
            Some(s) if s.is_ready() => true,
            Some(s) => s.ready().await.is_ok(),
            None => false,
        }
    }
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

impl HttpClient {
    pub fn new(config: ClientConfig) -> Self {
        Self {
            inner: Rc::new(ClientInner {
                idle: RefCell::new(Vec::new()),
                waiters: RefCell::new(VecDeque::new()),
                open: Cell::new(0),
                max_open: config.connections.max(1),
                timeout: config.timeout,
                source: config.source,
                tls: config.tls,
            }),
        }
    }

    /// Sends one request and reads the whole response body; the body is part
    /// of the latency because a user waits for it too. Also returns when the
    /// request went onto a connection (for the service time), if it did.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> (Outcome, Option<Instant>) {
        let phase = Cell::new(Phase::Queued);
        let on_wire = Cell::new(None);
        let outcome = match tokio::time::timeout(
            self.inner.timeout,
            self.exchange(request, &phase, &on_wire),
        )
        .await
        {
            Ok(Ok(status)) => Outcome::Status(status),
            Ok(Err(e)) => Outcome::Error(e.kind()),
            // Time spent queued for the agent's own connections is the
            // generator's limit, not the target's: say so.
            Err(_) if phase.get() == Phase::Queued => Outcome::Error(ERROR_POOL_TIMEOUT),
            Err(_) => Outcome::Error("timeout"),
        };
        (outcome, on_wire.get())
    }

    async fn exchange(
        &self,
        mut request: Request<Full<Bytes>>,
        phase: &Cell<Phase>,
        on_wire: &Cell<Option<Instant>>,
    ) -> Result<u16, ClientFailure> {
        let uri = request.uri().clone();
        let authority = uri.authority().ok_or(ClientFailure::NoHost)?;
        let key = authority.as_str();
        let mut lease = self.acquire(key, &uri, phase).await?;
        phase.set(Phase::OnWire);
        on_wire.set(Some(Instant::now()));
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

    /// A ready connection to `key`: an idle one, a new one while under the
    /// limit, or the next one (or slot) freed, oldest waiter first.
    async fn acquire(
        &self,
        key: &str,
        uri: &Uri,
        phase: &Cell<Phase>,
    ) -> Result<Lease, ClientFailure> {
        loop {
            if let Some(s) = self.take_idle(key) {
                let mut lease = Lease::new(self, key, Some(s));
                if lease.ready().await {
                    return Ok(lease);
                }
                continue; // it died; dropping the lease freed its slot
            }
            let mut lease = if self.inner.open.get() < self.inner.max_open {
                self.inner.open.set(self.inner.open.get() + 1);
                Lease::new(self, key, None)
            } else {
                let (tx, rx) = oneshot::channel();
                self.inner
                    .waiters
                    .borrow_mut()
                    .push_back((key.to_string(), tx));
                match rx.await {
                    Ok(lease) => lease,
                    Err(_) => continue,
                }
            };
            if lease.sender.is_none() {
                phase.set(Phase::Connecting);
                lease.sender = Some(self.connect(uri).await?);
                return Ok(lease);
            }
            if lease.ready().await {
                return Ok(lease);
            }
        }
    }

    /// Takes an idle connection to `key`; closed ones found on the way give
    /// their slots back.
    fn take_idle(&self, key: &str) -> Option<Sender> {
        let mut closed = 0;
        let found = {
            let mut idle = self.inner.idle.borrow_mut();
            let (_, list) = idle.iter_mut().find(|(k, _)| k == key)?;
            // Oldest first: the most likely to be ready.
            loop {
                match list.pop_front() {
                    Some(s) if s.is_closed() => closed += 1,
                    other => break other,
                }
            }
        };
        for _ in 0..closed {
            self.release();
        }
        found
    }

    /// A reusable connection: to the oldest waiter for its host; closed to
    /// make room when only waiters for other hosts are left (so a mix of
    /// hosts cannot starve); else idle.
    fn give_back(&self, key: &str, sender: Sender) {
        let waiter = {
            let mut waiters = self.inner.waiters.borrow_mut();
            waiters
                .iter()
                .position(|(k, _)| k == key)
                .and_then(|pos| waiters.remove(pos))
        };
        if let Some((_, tx)) = waiter {
            if let Err(mut lease) = tx.send(Lease::new(self, key, Some(sender))) {
                // That waiter gave up; its lease goes round again.
                lease.armed = false;
                if let Some(s) = lease.sender.take() {
                    self.give_back(key, s);
                }
            }
            return;
        }
        if !self.inner.waiters.borrow().is_empty() {
            drop(sender);
            self.release();
            return;
        }
        let mut idle = self.inner.idle.borrow_mut();
        match idle.iter_mut().find(|(k, _)| k == key) {
            Some((_, list)) => list.push_back(sender),
            None => idle.push((key.to_string(), VecDeque::from([sender]))),
        }
    }

    /// A slot is free: it goes to the oldest waiter (who opens a connection
    /// with it), else back to the pool.
    fn release(&self) {
        loop {
            let next = self.inner.waiters.borrow_mut().pop_front();
            match next {
                Some((key, tx)) => match tx.send(Lease::new(self, &key, None)) {
                    Ok(()) => return,
                    Err(mut lease) => lease.armed = false,
                },
                None => {
                    self.inner.open.set(self.inner.open.get().saturating_sub(1));
                    return;
                }
            }
        }
    }

    async fn connect(&self, uri: &Uri) -> Result<Sender, ClientFailure> {
        let host = uri.host().ok_or(ClientFailure::NoHost)?;
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| {
                tracing::debug!("cannot resolve {host}: {e}");
                ClientFailure::Dns
            })?;
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
}

impl HttpClient {
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

/// Lets `bind(ip, 0)` leave the port to `connect()`. Otherwise the kernel
/// must pick a port unique for the source address alone, scanning every
/// socket (TIME_WAIT ones too) bound to it: slow, and exhausted after ~28k
/// connections, where `connect()` can reuse a port for another destination.
fn defer_port_choice(socket: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on a socket we own, with a c_int option value.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            "IP_BIND_ADDRESS_NO_PORT unavailable: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The ways a request can fail, kept apart to classify them.
#[derive(Debug)]
enum ClientFailure {
    NoHost,
    Dns,
    NoAddress,
    Connect(std::io::Error),
    /// A handed-over slot had no connection where one was expected.
    NoConnection,
    /// The TLS handshake failed (certificate, protocol, or the peer hung up).
    Tls(std::io::Error),
    Http(hyper::Error),
}

impl ClientFailure {
    /// The report's error kind: what an operator would act on.
    fn kind(&self) -> &'static str {
        match self {
            ClientFailure::NoHost => "invalid_request",
            ClientFailure::Dns | ClientFailure::NoAddress => "dns",
            ClientFailure::NoConnection => "reset",
            ClientFailure::Connect(io) => io_kind(io.kind(), true),
            // rustls reports its own failures as InvalidData; anything else
            // is the transport under it.
            ClientFailure::Tls(io) => match io.kind() {
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::Other => "tls",
                kind => io_kind(kind, true),
            },
            ClientFailure::Http(h) => {
                let mut source: Option<&(dyn std::error::Error + 'static)> = Some(h);
                while let Some(err) = source {
                    if let Some(io) = err.downcast_ref::<std::io::Error>() {
                        return io_kind(io.kind(), false);
                    }
                    source = err.source();
                }
                if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                    "reset"
                } else if h.is_timeout() {
                    "timeout"
                } else if h.is_parse() {
                    "protocol"
                } else {
                    "other"
                }
            }
        }
    }
}

fn io_kind(kind: std::io::ErrorKind, connect: bool) -> &'static str {
    use std::io::ErrorKind::*;
    match kind {
        ConnectionRefused => "refused",
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => "reset",
        TimedOut => "timeout",
        AddrNotAvailable | AddrInUse => "local_address",
        NotFound | InvalidInput if connect => "dns",
        _ if connect => "connect",
        _ => "io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(url: &str, weight: u32) -> v1::RequestTemplate {
        v1::RequestTemplate {
            method: "POST".into(),
            url: url.into(),
            headers: vec![v1::Header {
                name: "x-user".into(),
                value: "{{data.user}}".into(),
            }],
            body: b"seq={{seq}}".to_vec(),
            weight,
        }
    }

    fn data() -> v1::DataTable {
        v1::DataTable {
            columns: vec!["user".into()],
            rows: vec![
                v1::DataRow {
                    values: vec!["ann".into()],
                },
                v1::DataRow {
                    values: vec!["bob".into()],
                },
            ],
            random: false,
        }
    }

    #[test]
    fn bad_urls_name_the_problem() {
        let mix = |url: &str| RequestMix::from_proto(&[template(url, 1)], Some(&data()), 0);
        let e = mix("ftp://x/").err().unwrap().to_string();
        assert!(e.contains("scheme"), "{e}");
        let e = mix("/just/a/path").err().unwrap().to_string();
        assert!(e.contains("no scheme") || e.contains("no host"), "{e}");
        assert!(mix("http://127.0.0.1:1/x").is_ok());
        let e = format!("{:#}", mix("http://h/{{nope}}").err().unwrap());
        assert!(e.contains("nope"), "{e}");
    }

    #[tokio::test]
    async fn mix_follows_weights_and_renders_values() {
        let mix = RequestMix::from_proto(
            &[template("http://h/a/{{seq}}", 3), template("http://h/b", 1)],
            Some(&data()),
            5,
        )
        .unwrap();
        let mut rng = SplitMix64::new(1);
        let mut a = 0;
        for seq in 0..400 {
            let req = mix.build(seq, &mut rng).unwrap();
            if req.uri().path().starts_with("/a/") {
                a += 1;
                assert_eq!(req.uri().path(), format!("/a/{seq}"));
            }
            let user = req.headers()["x-user"].to_str().unwrap().to_string();
            assert_eq!(user, if seq % 2 == 0 { "ann" } else { "bob" });
            let body = req.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, format!("seq={seq}").as_bytes());
        }
        assert_eq!(a, 300, "weights 3:1 give exactly three quarters");
    }

    #[tokio::test]
    async fn closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let c = client(1, Duration::from_secs(2));
        assert_eq!(c.send(get(port)).await.0, Outcome::Error("refused"));
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
        let mix = RequestMix::from_proto(
            &[v1::RequestTemplate {
                url: format!("http://127.0.0.1:{port}/"),
                ..Default::default()
            }],
            None,
            0,
        )
        .unwrap();
        mix.build(0, &mut SplitMix64::new(1)).unwrap()
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
        for (outcome, on_wire) in &results {
            assert_eq!(*outcome, Outcome::Status(200));
            assert!(on_wire.is_some());
        }
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
        let held = c
            .acquire(&key, &uri, &Cell::new(Phase::Queued))
            .await
            .unwrap();
        let (outcome, on_wire) = c.send(get(port)).await;
        assert_eq!(outcome, Outcome::Error(ERROR_POOL_TIMEOUT));
        assert!(on_wire.is_none(), "never reached a connection");
        assert_eq!(c.inner.open.get(), 1);
        drop(held); // unfinished: its connection closes, the slot frees
        assert_eq!(c.inner.open.get(), 0);
        assert_eq!(c.send(get(port)).await.0, Outcome::Status(200));
        assert_eq!(c.send(get(port)).await.0, Outcome::Status(200));
        assert_eq!(c.inner.open.get(), 1, "one connection, reused");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
