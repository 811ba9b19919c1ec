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
    /// list beats a map.
    idle: RefCell<Vec<(String, VecDeque<Sender>)>>,
    /// Requests waiting for a connection, oldest first: handed a connection
    /// to their host, or `None` as leave to open one.
    waiters: RefCell<VecDeque<(String, oneshot::Sender<Option<Sender>>)>>,
    /// Connections open or being opened.
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

/// A connection in use; dropping it unfinished (a timeout, an error)
/// closes the connection and frees its slot.
struct Lease<'a> {
    client: &'a HttpClient,
    key: &'a str,
    sender: Option<Sender>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.sender.take().is_some() {
            self.client.release();
        }
    }
}

impl Lease<'_> {
    fn sender(&mut self) -> &mut Sender {
        self.sender
            .as_mut()
            .expect("a lease holds its sender until finished")
    }

    /// The exchange completed: the connection is reusable.
    fn finish(mut self) {
        if let Some(s) = self.sender.take() {
            self.client.give_back(self.key, s);
        }
    }
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
    /// of the latency because a user waits for it too.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Outcome {
        match tokio::time::timeout(self.inner.timeout, self.exchange(request)).await {
            Ok(Ok(status)) => Outcome::Status(status),
            Ok(Err(e)) => Outcome::Error(e.kind()),
            Err(_) => Outcome::Error("timeout"),
        }
    }

    async fn exchange(&self, mut request: Request<Full<Bytes>>) -> Result<u16, ClientFailure> {
        let uri = request.uri().clone();
        let authority = uri.authority().ok_or(ClientFailure::NoHost)?;
        let key = authority.as_str();
        let mut lease = Lease {
            client: self,
            key,
            sender: Some(self.acquire(key, &uri).await?),
        };
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
            .sender()
            .send_request(request)
            .await
            .map_err(ClientFailure::Http)?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(ClientFailure::Http)?;
        }
        lease.finish();
        Ok(status)
    }

    /// A ready connection to `key`: an idle one, a new one while under the
    /// limit, or the next one freed.
    async fn acquire(&self, key: &str, uri: &Uri) -> Result<Sender, ClientFailure> {
        loop {
            if let Some(mut s) = self.take_idle(key) {
                if s.is_ready() {
                    return Ok(s);
                }
                // Just handed back: its connection task has not yet marked
                // it idle, which takes microseconds. A dead one errors.
                if s.ready().await.is_ok() {
                    return Ok(s);
                }
                self.release();
                continue;
            }
            if self.inner.open.get() < self.inner.max_open {
                self.inner.open.set(self.inner.open.get() + 1);
                return match self.connect(uri).await {
                    Ok(s) => Ok(s),
                    Err(e) => {
                        self.release();
                        Err(e)
                    }
                };
            }
            let (tx, rx) = oneshot::channel();
            self.inner
                .waiters
                .borrow_mut()
                .push_back((key.to_string(), tx));
            match rx.await {
                Ok(Some(s)) => return Ok(s),
                // Leave to open one (a slot was freed), or the hand-over
                // was lost: try again from the top.
                Ok(None) | Err(_) => continue,
            }
        }
    }

    fn take_idle(&self, key: &str) -> Option<Sender> {
        let mut idle = self.inner.idle.borrow_mut();
        let (_, list) = idle.iter_mut().find(|(k, _)| k == key)?;
        // Oldest first: the most likely to be ready.
        while let Some(s) = list.pop_front() {
            if !s.is_closed() {
                return Some(s);
            }
            self.inner.open.set(self.inner.open.get().saturating_sub(1));
        }
        None
    }

    /// A reusable connection: to the oldest waiter for its host, else idle.
    fn give_back(&self, key: &str, mut sender: Sender) {
        if sender.is_closed() {
            self.release();
            return;
        }
        {
            let mut waiters = self.inner.waiters.borrow_mut();
            while let Some(pos) = waiters.iter().position(|(k, _)| k == key) {
                let Some((_, tx)) = waiters.remove(pos) else {
                    break;
                };
                match tx.send(Some(sender)) {
                    Ok(()) => return,
                    // That waiter gave up (timed out); try the next.
                    Err(back) => match back {
                        Some(s) => sender = s,
                        None => return,
                    },
                }
            }
        }
        let mut idle = self.inner.idle.borrow_mut();
        match idle.iter_mut().find(|(k, _)| k == key) {
            Some((_, list)) => list.push_back(sender),
            None => idle.push((key.to_string(), VecDeque::from([sender]))),
        }
    }

    /// A connection closed: its slot goes to the oldest waiter, who may open
    /// a new one.
    fn release(&self) {
        self.inner.open.set(self.inner.open.get().saturating_sub(1));
        let mut waiters = self.inner.waiters.borrow_mut();
        while let Some((_, tx)) = waiters.pop_front() {
            if tx.send(None).is_ok() {
                return;
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
enum ClientFailure {
    NoHost,
    Dns,
    NoAddress,
    Connect(std::io::Error),
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
        let mix = RequestMix::from_proto(
            &[v1::RequestTemplate {
                url: format!("http://127.0.0.1:{port}/"),
                ..Default::default()
            }],
            None,
            0,
        )
        .unwrap();
        let client = HttpClient::new(ClientConfig {
            timeout: Duration::from_secs(2),
            connections: 1,
            source: None,
            tls: crate::tls::client_config(None).unwrap(),
        });
        let req = mix.build(0, &mut SplitMix64::new(1)).unwrap();
        assert_eq!(client.send(req).await, Outcome::Error("refused"));
    }
}
