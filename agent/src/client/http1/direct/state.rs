//! The pool's state: its connections in a slab by epoll token, and the
//! [`Ledger`] of slots, idle connections and waiting requests.

use mio::net::TcpStream;
use mio::{Interest, Token};
use tokio::time::Instant;
use tokio_util::either::Either;

use super::connection::Slot;
use super::outgoing::Waiting;
use crate::client::dial::Io;
use crate::client::http1::ledger::Ledger;

/// Everything of the pool's that one drive changes.
///
/// Invariants: a token names the same connection from `adopt` to `close`;
/// the ledger's idle tokens are exactly the open slots with no exchange
/// busy on them (each once); `next_check` is no later than the earliest
/// deadline of an exchange on the wire.
pub(super) struct State<T> {
    /// The epoll set's registry (a descriptor of its own), to add and
    /// drop connections.
    pub(super) registry: mio::Registry,
    /// Connections by token; `None` where one was closed.
    pub(super) slots: Vec<Option<Slot<T>>>,
    vacant: Vec<usize>,
    /// Slots, idle tokens (the most recently used last) and the requests
    /// waiting for a connection.
    pub(super) ledger: Ledger<usize, Waiting<T>>,
    /// No exchange on the wire runs out of time before this: the
    /// connections are looked over only then (see `expire`).
    pub(super) next_check: Instant,
    /// The request being written; shared, as a connection keeps bytes only
    /// when its socket did not take them all.
    pub(super) out: Vec<u8>,
    /// Ciphertext just read from a TLS connection, until its session has
    /// taken it: shared too, as a session keeps what it has not decrypted.
    pub(super) raw: Vec<u8>,
    /// Connections whose look stopped at its budget with more to read, and
    /// whether their peer had ended its side: no new edge may come for
    /// what is already in their sockets, so the next drive reads them
    /// first.
    pub(super) unfinished: Vec<(usize, bool)>,
    /// Requests that waited and then left the queue (went onto a
    /// connection, or began opening one) since the caller last took them:
    /// from then on they count as sent.
    pub(super) went_out: Vec<T>,
}

impl<T> State<T> {
    pub(super) fn new(registry: mio::Registry, connections: usize, next_check: Instant) -> Self {
        Self {
            registry,
            slots: Vec::new(),
            vacant: Vec::new(),
            ledger: Ledger::new(connections),
            next_check,
            out: Vec::with_capacity(512),
            raw: Vec::new(),
            unfinished: Vec::new(),
            went_out: Vec::new(),
        }
    }

    /// Takes a newly opened connection into the epoll set; returns its
    /// token. Its slot must already be taken in the ledger.
    pub(super) fn adopt(&mut self, io: Io) -> std::io::Result<usize> {
        let (tcp, tls) = match io {
            Either::Left(tcp) => (tcp, None),
            Either::Right(tls) => {
                let (tcp, session) = (*tls).into_inner();
                (tcp, Some(Box::new(session)))
            }
        };
        let mut stream = TcpStream::from_std(tcp.into_std()?);
        if let Err(err) = loadfleet_sys::stamp_arrivals(&stream) {
            tracing::debug!("answers are timed when read, not when they arrive: {err}");
        }
        let token = self.vacant.pop().unwrap_or(self.slots.len());
        self.registry
            .register(&mut stream, Token(token), Interest::READABLE)?;
        let slot = Slot {
            stream,
            tls,
            unsent: Vec::new(),
            input: Vec::new(),
            memo: Default::default(),
            fresh: None,
            busy: None,
        };
        if token == self.slots.len() {
            self.slots.push(Some(slot));
        } else {
            self.slots[token] = Some(slot);
        }
        self.ledger.established();
        Ok(token)
    }

    /// Closes the connection at `token`, giving its slot back.
    pub(super) fn close(&mut self, token: usize) {
        let Some(mut slot) = self.slots.get_mut(token).and_then(Option::take) else {
            return;
        };
        let _ = self.registry.deregister(&mut slot.stream);
        if slot.busy.is_none() {
            self.ledger.take_idle_where(|&t| t == token);
        }
        // Its token may go to the next connection opened.
        self.unfinished.retain(|&(t, _)| t != token);
        self.vacant.push(token);
        self.ledger.free_slot();
    }

    /// The open slot at `token`, if there is one.
    pub(super) fn slot(&mut self, token: usize) -> Option<&mut Slot<T>> {
        self.slots.get_mut(token).and_then(Option::as_mut)
    }
}
