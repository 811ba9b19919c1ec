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

/// A connection as a transport uses it: plain TCP, or TLS over it.
pub type Io = Either<TcpStream, TlsStream<TcpStream>>;

/// One connection just opened, with what it cost.
pub struct Dialed {
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
pub struct Dialer {
    inner: Rc<DialerInner>,
}

struct DialerInner {
    source: Option<IpAddr>,
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
    pub fn new(source: Option<IpAddr>, tls: Arc<rustls::ClientConfig>) -> Self {
        Self {
            inner: Rc::new(DialerInner {
                source,
                tls,
                names: RefCell::new(Vec::new()),
            }),
        }
    }

    /// A new connection to the URI's host and port, TLS for https://.
    pub async fn dial(&self, uri: &Uri) -> Result<Dialed, ClientFailure> {
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
            io: Either::Right(tls),
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

    async fn open_tcp(&self, addr: SocketAddr) -> Result<TcpStream, ClientFailure> {
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
    if let Err(err) = crate::sys::bind_address_no_port(socket) {
        tracing::debug!("port choice not deferred to connect(): {err}");
    }
}
