//! The task-driven HTTP/1.1 transport: one client per worker, whose
//! requests are futures that each lease a connection from its keep-alive
//! pool and drive it themselves ([`super::conn`]).
//!
//! The pool has at most `connections` slots, each a [`Lease`] that gives
//! itself back when dropped, and a queue of requests waiting for one,
//! oldest first.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use loadfleet_proto::vocab::HttpProtocol;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::conn::Conn;
use super::direct::DirectPool;
use super::ledger::Ledger;
use crate::client::dial::Dialer;
use crate::client::failure::ClientFailure;
use crate::client::kept::Sink;
use crate::client::progress::Progress;
use crate::client::saturation::Queued;

/// Keep-alive HTTP/1.1 connections owned by one worker.
///
/// A worker is single-threaded, so its pool sits in a `RefCell`, borrowed
/// only between awaits (no lock, no task per checkout or per connection).
/// At most `connections` are open at once, as with wrk2 or a browser's
/// pool: a request that finds them all busy waits for the next free one.
/// That wait is not hidden — it counts in the latency, which runs from the
/// intended instant — and it keeps a hiccup on the target from turning
/// into a storm of new connections.
#[derive(Clone)]
pub(crate) struct Http1Client {
    inner: Rc<ClientInner>,
}

/// The pool's ledger: idle connections keyed by `host:port` (one or two
/// hosts in practice, so a list beats a map), and requests waiting for a
/// [`Lease`] to their host: a connection, or just a slot to open one.
type Http1Ledger = Ledger<(Authority, Conn), (Authority, oneshot::Sender<Lease>)>;

struct ClientInner {
    ledger: RefCell<Http1Ledger>,
    dialer: Dialer,
}

impl Http1Client {
    pub(crate) fn new(dialer: Dialer, connections: usize) -> Self {
        Self {
            inner: Rc::new(ClientInner {
                ledger: RefCell::new(Ledger::new(connections)),
                dialer,
            }),
        }
    }

    /// The pool's ledger, for one step that does not await.
    fn ledger(&self) -> std::cell::RefMut<'_, Http1Ledger> {
        self.inner.ledger.borrow_mut()
    }

    /// Counts a request the worker holds back in its own queue as waiting
    /// for one of this pool's connections, until the guard drops.
    pub(in crate::client) fn queue(&self) -> Queued {
        self.ledger().wait()
    }

    /// Idle connections and free slots: requests that could start now.
    pub(in crate::client) fn free_connections(&self) -> usize {
        self.ledger().free()
    }

    /// Time during which requests waited for a connection since the last
    /// call, up to `now`: every connection was busy and load was held back.
    pub(crate) fn take_saturated(&self, now: Instant) -> Duration {
        self.ledger().take_saturated(now)
    }

    /// Answers are under way that may not land whole in their sockets
    /// while the worker sleeps blind ([`Ledger::answers_need_reading`]).
    pub(crate) fn answers_need_reading(&self) -> bool {
        self.ledger().answers_need_reading()
    }

    /// Every slot is taken and no connection is idle: the next request
    /// would queue. Closed connections still in the idle list count as
    /// idle here; taking one frees its slot for a new connection anyway.
    pub(crate) fn pool_full(&self) -> bool {
        self.ledger().full()
    }

    /// Connections established since the last call.
    pub(crate) fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        self.ledger().take_connections()
    }

    /// Sends one request and reads the whole response body; the body is
    /// part of the latency because a user waits for it too. The answer's
    /// bytes go to `sink` on the way, handed back with the status.
    pub(in crate::client) async fn exchange<S: Sink>(
        &self,
        request: Request<Full<Bytes>>,
        progress: &Progress<'_>,
        sink: S,
    ) -> Result<(u16, S), ClientFailure> {
        let (parts, mut body) = request.into_parts();
        let authority = parts.uri.authority().ok_or(ClientFailure::NoHost)?;
        let key = authority.as_str();
        // A `Full` body is one data frame, ready at once.
        let body = match body.frame().await {
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            _ => Bytes::new(),
        };
        let mut lease = self.acquire(authority, &parts.uri, progress).await?;
        if let Some((connect, tls)) = lease.sender()?.take_ahead() {
            progress.connect.set(Some(connect));
            progress.tls.set(tls);
        }
        let on_wire = progress.went_on_wire();
        let saw = |size, whole| self.inner.ledger.borrow().saw_answer(size, whole);
        let answer = lease
            .sender()?
            .exchange(&parts, key, &body, on_wire, progress, saw, sink)
            .await?;
        lease.finished = true;
        Ok(answer)
    }

    /// A pool of this client's kind for `uri`'s host that the open loop
    /// drives itself ([`DirectPool`]), for requests given `timeout`.
    pub(in crate::client) fn direct<T: Copy + 'static>(
        &self,
        uri: &Uri,
        timeout: Duration,
    ) -> std::io::Result<DirectPool<T>> {
        let connections = self.ledger().max_open();
        DirectPool::new(uri, self.inner.dialer.clone(), connections, timeout)
    }

    /// A new connection for `uri`, its connect and TLS times kept in the
    /// phases of the request that opened it.
    async fn connect(&self, uri: &Uri, progress: &Progress<'_>) -> Result<Conn, ClientFailure> {
        progress.connecting();
        let dialed = self.inner.dialer.dial(uri).await?;
        progress.connected(&dialed);
        self.ledger().established();
        Ok(Conn::new(dialed.io))
    }
}

/// One slot of the pool, with the connection in it once there is one.
///
/// Whatever happens to a request — a timeout dropping it anywhere, an
/// error, a hand-over nobody received — dropping the lease gives the slot
/// back: a finished exchange returns its connection for reuse, anything else
/// closes it. So slots can neither leak nor be counted twice.
struct Lease {
    client: Http1Client,
    /// The host the connection is to: a clone shares the URI's bytes, so
    /// a lease allocates nothing.
    key: Authority,
    sender: Option<Conn>,
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
        // Only what the exchange itself learned: whether the server closed
        // since is looked at once, when the connection is next taken
        // ([`Http1Client::take_idle`]).
        let reusable = self.finished && self.sender.as_ref().is_some_and(|s| !s.is_spent());
        match self.sender.take() {
            Some(s) if reusable => self.client.give_back(&self.key, s),
            _ => self.client.release(),
        }
    }
}

impl Lease {
    fn new(client: &Http1Client, key: &Authority, sender: Option<Conn>) -> Self {
        Self {
            client: client.clone(),
            key: key.clone(),
            sender,
            finished: false,
            armed: true,
        }
    }

    /// The connection, once the lease has one.
    fn sender(&mut self) -> Result<&mut Conn, ClientFailure> {
        self.sender.as_mut().ok_or(ClientFailure::NoConnection)
    }

    /// Whether the connection can take a request; false when it died.
    fn ready(&mut self) -> bool {
        self.sender.as_mut().is_some_and(|s| !s.is_closed())
    }
}

// Every step below borrows the ledger for one statement only: a lease
// given back, or a waiter's future dropped, borrows it again.
impl Http1Client {
    /// A ready connection to `key`: an idle one, a new one while under the
    /// limit, or the next one (or slot) freed, oldest waiter first.
    async fn acquire(
        &self,
        key: &Authority,
        uri: &Uri,
        progress: &Progress<'_>,
    ) -> Result<Lease, ClientFailure> {
        loop {
            if let Some(s) = self.take_idle(key) {
                // Just found open: no second look at its socket.
                return Ok(Lease::new(self, key, Some(s)));
            }
            let slot = self.ledger().take_slot();
            let mut lease = if slot {
                Lease::new(self, key, None)
            } else {
                let (tx, rx) = oneshot::channel();
                self.ledger().enqueue((key.clone(), tx));
                // The first time in the queue counts from here; a request
                // that queues again (its handed-over connection had died)
                // keeps waiting from the first time.
                let queued_at = progress.queued_at.get().unwrap_or_else(|| {
                    let now = Instant::now();
                    progress.queued_at.set(Some(now));
                    now
                });
                let waiting = self.ledger().wait();
                let handed = rx.await;
                drop(waiting);
                progress.waited.set(Some(queued_at.elapsed()));
                match handed {
                    Ok(lease) => lease,
                    Err(_) => continue,
                }
            };
            if lease.sender.is_none() {
                lease.sender = Some(self.connect(uri, progress).await?);
                return Ok(lease);
            }
            if lease.ready() {
                return Ok(lease);
            }
        }
    }

    /// Opens up to `n` connections to `uri`'s host at once, within the
    /// pool's limit, and leaves them idle (see
    /// [`crate::client::Transport::open_ahead`]). A dial that fails, or is
    /// dropped unfinished, gives its slot back.
    pub(in crate::client) async fn open_ahead(&self, uri: &Uri, n: usize) {
        let Some(key) = uri.authority() else {
            return;
        };
        let mut leases = Vec::new();
        while leases.len() < n && self.ledger().take_slot() {
            leases.push(Lease::new(self, key, None));
        }
        futures::future::join_all(leases.into_iter().map(|mut lease| async move {
            match self.inner.dialer.dial(uri).await {
                Ok(dialed) => {
                    self.ledger().established();
                    lease.sender = Some(Conn::opened_ahead(dialed.io, dialed.connect, dialed.tls));
                    lease.finished = true;
                }
                Err(e) => tracing::debug!("opening a connection ahead of the run: {e:?}"),
            }
            // Given back, the lease leaves its connection idle, or frees
            // its slot.
            drop(lease);
        }))
        .await;
    }

    /// Takes the oldest idle connection to `key`; closed ones found on the
    /// way give their slots back.
    fn take_idle(&self, key: &Authority) -> Option<Conn> {
        loop {
            let found = self.ledger().take_idle_where(|(k, _)| same_host(k, key));
            let (_, mut s) = found?;
            if !s.is_closed() {
                return Some(s);
            }
            drop(s);
            self.release();
        }
    }

    /// A reusable connection: to the oldest waiter for its host; closed to
    /// make room when only waiters for other hosts are left (so a mix of
    /// hosts cannot starve); else idle.
    fn give_back(&self, key: &Authority, sender: Conn) {
        let waiter = self.ledger().take_waiter_where(|(k, _)| same_host(k, key));
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
        let others_wait = self.ledger().has_waiters();
        if others_wait {
            drop(sender);
            self.release();
            return;
        }
        self.ledger().push_idle((key.clone(), sender));
    }

    /// A slot is free: it goes to the oldest waiter (who opens a connection
    /// with it), else back to the pool.
    fn release(&self) {
        loop {
            let next = self.ledger().next_waiter();
            match next {
                Some((key, tx)) => match tx.send(Lease::new(self, &key, None)) {
                    Ok(()) => return,
                    Err(mut lease) => lease.armed = false,
                },
                None => {
                    self.ledger().free_slot();
                    return;
                }
            }
        }
    }
}

/// Whether two authorities name the same host. Nearly always they are the
/// same bytes (a lease's key is a clone of the URI's), which a plain
/// comparison settles at once; `Authority`'s own comparison folds case
/// byte by byte.
fn same_host(a: &Authority, b: &Authority) -> bool {
    a.as_str() == b.as_str() || a == b
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
