//! Opening a connection to a target, for every transport: the name looked
//! up once per host, TCP from the agent's source address, and TLS with the
//! transport's ALPN offer. The time each step took is kept, because a
//! request that paid for a new connection should say so in its phases.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use rustls_pki_types::ServerName;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use super::failure::ClientFailure;

/// A connection as a transport uses it: plain TCP, or TLS over it. The
/// TLS side is boxed: a rustls session is over a kilobyte, and without the
/// box every plain connection (and every request or held stream that owns
/// one) would carry that much unused room.
pub(crate) type Io = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// One connection just opened, with what it cost.
pub(crate) struct Dialed {
    pub io: Io,
    /// The protocol the server chose by ALPN (`h2`, `http/1.1`), if TLS
    /// negotiated one.
    pub alpn: Option<Vec<u8>>,
    /// From the first `connect()` to an established TCP connection
    /// (including the lookup when this connection waited for it).
    pub connect: Duration,
    /// The TLS handshake, for https:// targets.
    pub tls: Option<Duration>,
}

/// Opens connections for one worker; cheap to clone, single-threaded.
#[derive(Clone)]
pub(crate) struct Dialer {
    inner: Rc<DialerInner>,
}

struct DialerInner {
    source: Option<IpAddr>,
    /// Further source addresses (`--bind A,B,…`), used in turn once the
    /// current one has no port left for a destination.
    more_sources: Vec<IpAddr>,
    /// Which of `source` (0) and `more_sources` (1..) new connections try
    /// first: the last one that had a port.
    current: std::cell::Cell<usize>,
    tls: Arc<rustls::ClientConfig>,
    /// Resolved names per `host:port`: one lookup per host, shared by
    /// every connection that needs it (see [`Dialer::resolve`]).
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

impl Dialer {
    /// `tls` carries the trust and the ALPN offer of the transport using
    /// this dialer; `source` is the local address to send from.
    pub(crate) fn new(source: Option<IpAddr>, tls: Arc<rustls::ClientConfig>) -> Self {
        Self {
            inner: Rc::new(DialerInner {
                source,
                more_sources: Vec::new(),
                current: std::cell::Cell::new(0),
                tls,
                names: RefCell::new(Vec::new()),
            }),
        }
    }

    /// Adds source addresses to fall back on, in order, when `source` (and
    /// then each of these) runs out of ports. Only addresses of `source`'s
    /// family are kept: the others could not reach the same targets.
    pub(crate) fn with_more_sources(self, more: Vec<IpAddr>) -> Self {
        let Some(first) = self.inner.source else {
            return self;
        };
        let more = more
            .into_iter()
            .filter(|ip| ip.is_ipv4() == first.is_ipv4())
            .collect();
        Self {
            inner: Rc::new(DialerInner {
                source: self.inner.source,
                more_sources: more,
                current: std::cell::Cell::new(0),
                tls: self.inner.tls.clone(),
                names: RefCell::new(Vec::new()),
            }),
        }
    }

    /// A new connection to the URI's host and port, TLS for https://.
    ///
    /// Boxed: the lookup, connect and handshake futures (a whole TLS
    /// session inline) are large, and without the box they would be part
    /// of every request's future — which lives as long as the request is in
    /// flight — though only the few requests that open a connection use
    /// them.
    pub(crate) async fn dial(&self, uri: &Uri) -> Result<Dialed, ClientFailure> {
        Box::pin(self.open(uri)).await
    }

    async fn open(&self, uri: &Uri) -> Result<Dialed, ClientFailure> {
        let host = uri.host().ok_or(ClientFailure::NoHost)?;
        let bare = host.trim_matches(['[', ']']);
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let started = Instant::now();
        let addrs = self.resolve(bare, port).await.map_err(|e| {
            tracing::debug!("cannot resolve {host}: {e}");
            ClientFailure::Dns
        })?;
        // Every address in turn (a name like localhost may give ::1 first
        // to a server that only listens on 127.0.0.1); with a source
        // address, only those of its family can be reached from it.
        let mut failure = ClientFailure::NoAddress;
        let mut stream = None;
        let source = self.inner.source;
        for addr in addrs
            .into_iter()
            .filter(|a| source.is_none_or(|s| s.is_ipv4() == a.is_ipv4()))
        {
            match self.open_tcp(addr).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => failure = e,
            }
        }
        let stream = stream.ok_or(failure)?;
        let connected = Instant::now();
        let connect = connected - started;
        if !https {
            return Ok(Dialed {
                io: Either::Left(stream),
                alpn: None,
                connect,
                tls: None,
            });
        }
        let name = ServerName::try_from(bare.to_string()).map_err(|_| ClientFailure::NoHost)?;
        let tls = TlsConnector::from(self.inner.tls.clone())
            .connect(name, stream)
            .await
            .map_err(ClientFailure::Tls)?;
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Ok(Dialed {
            io: Either::Right(Box::new(tls)),
            alpn,
            connect,
            tls: Some(connected.elapsed()),
        })
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

    /// A TCP connection from the current source address; when that one has
    /// no port left (or cannot be used at all), from the next, round the
    /// list once. The address that worked stays current.
    async fn open_tcp(&self, addr: SocketAddr) -> Result<TcpStream, ClientFailure> {
        let inner = &self.inner;
        let Some(first) = inner.source else {
            return self.open_tcp_from(None, addr).await;
        };
        let count = 1 + inner.more_sources.len();
        let start = inner.current.get();
        let mut failure = None;
        for k in 0..count {
            let i = (start + k) % count;
            let ip = if i == 0 {
                first
            } else {
                inner.more_sources[i - 1]
            };
            match self.open_tcp_from(Some(ip), addr).await {
                Ok(stream) => {
                    inner.current.set(i);
                    return Ok(stream);
                }
                Err(ClientFailure::Connect(e)) if out_of_addresses(&e) && count > 1 => {
                    failure = Some(ClientFailure::Connect(e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(failure.unwrap_or(ClientFailure::NoAddress))
    }

    async fn open_tcp_from(
        &self,
        source: Option<IpAddr>,
        addr: SocketAddr,
    ) -> Result<TcpStream, ClientFailure> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(ClientFailure::Connect)?;
        if let Some(ip) = source {
            defer_port_choice(&socket);
            socket
                .bind(SocketAddr::new(ip, 0))
                .map_err(ClientFailure::Connect)?;
        }
        socket.set_nodelay(true).map_err(ClientFailure::Connect)?;
        socket.connect(addr).await.map_err(ClientFailure::Connect)
    }
}

/// The source address has no port left for this destination, or cannot be
/// used at all: another source address may do.
fn out_of_addresses(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::AddrInUse
    )
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

    /// A source address that cannot be used (not this host's) is passed
    /// over for the next one, which then stays current.
    #[tokio::test(flavor = "current_thread")]
    async fn an_unusable_source_falls_back_to_the_next() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tls = crate::client::tls::target_config(
            &rustls::RootCertStore::empty(),
            None,
            &[b"http/1.1"],
        )
        .unwrap();
        // 192.0.2.1 (TEST-NET-1) is nobody's address: bind() refuses it.
        let dialer = Dialer::new(Some("192.0.2.1".parse().unwrap()), tls)
            .with_more_sources(vec!["127.0.0.1".parse().unwrap()]);
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let Ok(dialed) = dialer.dial(&uri).await else {
            panic!("no connection from the fallback address")
        };
        let Either::Left(stream) = dialed.io else {
            panic!("plain TCP expected")
        };
        assert_eq!(stream.local_addr().unwrap().ip().to_string(), "127.0.0.1");
        assert_eq!(dialer.inner.current.get(), 1);
        // Without a fallback, the same failure is the connection's.
        let alone = Dialer::new(
            Some("192.0.2.1".parse().unwrap()),
            crate::client::tls::target_config(
                &rustls::RootCertStore::empty(),
                None,
                &[b"http/1.1"],
            )
            .unwrap(),
        );
        assert!(matches!(
            alone.dial(&uri).await,
            Err(ClientFailure::Connect(_))
        ));
    }
}
