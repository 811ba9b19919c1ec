//! The task-driven HTTP/1.1 transport: one client per worker, whose
//! requests are futures that each lease a connection from its keep-alive
//! pool ([`super::pool`]) and drive it themselves ([`super::conn`]).

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
use super::pool::Lease;
use crate::client::dial::Dialer;
use crate::client::failure::{ClientFailure, Phase};
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
pub struct Http1Client {
    pub(super) inner: Rc<ClientInner>,
}

/// The pool's ledger: idle connections keyed by `host:port` (one or two
/// hosts in practice, so a list beats a map), and requests waiting for a
/// [`Lease`] to their host: a connection, or just a slot to open one.
pub(super) type Http1Ledger = Ledger<(Authority, Conn), (Authority, oneshot::Sender<Lease>)>;

pub(super) struct ClientInner {
    pub(super) ledger: RefCell<Http1Ledger>,
    pub(super) dialer: Dialer,
}

impl Http1Client {
    pub fn new(dialer: Dialer, connections: usize) -> Self {
        Self {
            inner: Rc::new(ClientInner {
                ledger: RefCell::new(Ledger::new(connections)),
                dialer,
            }),
        }
    }

    /// The pool's ledger, for one step that does not await.
    pub(super) fn ledger(&self) -> std::cell::RefMut<'_, Http1Ledger> {
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
    pub fn take_saturated(&self, now: Instant) -> Duration {
        self.ledger().take_saturated(now)
    }

    /// Answers are under way that may not land whole in their sockets
    /// while the worker sleeps blind ([`Ledger::answers_need_reading`]).
    pub fn answers_need_reading(&self) -> bool {
        self.ledger().answers_need_reading()
    }

    /// Every slot is taken and no connection is idle: the next request
    /// would queue. Closed connections still in the idle list count as
    /// idle here; taking one frees its slot for a new connection anyway.
    pub fn pool_full(&self) -> bool {
        self.ledger().full()
    }

    /// Connections established since the last call.
    pub fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        self.ledger().take_connections()
    }

    /// Sends one request and reads the whole response body; the body is
    /// part of the latency because a user waits for it too.
    pub(in crate::client) async fn exchange(
        &self,
        request: Request<Full<Bytes>>,
        progress: &Progress,
    ) -> Result<u16, ClientFailure> {
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
        let status = lease
            .sender()?
            .exchange(&parts, key, &body, on_wire, progress, saw)
            .await?;
        lease.finished = true;
        Ok(status)
    }

    /// A pool of this client's kind for `uri`'s host that the open loop
    /// drives itself ([`DirectPool`]), for requests given `timeout`.
    pub(in crate::client) fn direct<T: 'static>(
        &self,
        uri: &Uri,
        timeout: Duration,
    ) -> std::io::Result<DirectPool<T>> {
        let connections = self.ledger().max_open();
        DirectPool::new(uri, self.inner.dialer.clone(), connections, timeout)
    }

    /// A new connection for `uri`, its connect and TLS times kept in the
    /// phases of the request that opened it.
    pub(super) async fn connect(
        &self,
        uri: &Uri,
        progress: &Progress,
    ) -> Result<Conn, ClientFailure> {
        progress.phase.set(Phase::Connecting);
        let dialed = self.inner.dialer.dial(uri).await?;
        progress.connected(&dialed);
        self.ledger().established();
        Ok(Conn::new(dialed.io))
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
