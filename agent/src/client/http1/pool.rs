//! The task-driven client's keep-alive pool: at most `connections` slots,
//! each a [`Lease`] that gives itself back when dropped, and a queue of
//! requests waiting for one, oldest first.

use http::uri::Authority;
use http::Uri;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::client::Http1Client;
use super::conn::Conn;
use crate::client::failure::ClientFailure;
use crate::client::progress::Progress;

/// One slot of the pool, with the connection in it once there is one.
///
/// Whatever happens to a request — a timeout dropping it anywhere, an
/// error, a hand-over nobody received — dropping the lease gives the slot
/// back: a finished exchange returns its connection for reuse, anything else
/// closes it. So slots can neither leak nor be counted twice.
pub(super) struct Lease {
    client: Http1Client,
    /// The host the connection is to: a clone shares the URI's bytes, so
    /// a lease allocates nothing.
    key: Authority,
    sender: Option<Conn>,
    /// The exchange completed, so the connection may be reused.
    pub(super) finished: bool,
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
    pub(super) fn sender(&mut self) -> Result<&mut Conn, ClientFailure> {
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
    pub(super) async fn acquire(
        &self,
        key: &Authority,
        uri: &Uri,
        progress: &Progress,
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
