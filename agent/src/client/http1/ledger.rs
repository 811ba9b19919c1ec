//! The bookkeeping of an HTTP/1.1 keep-alive pool, kept once for both of a
//! worker's pools: the task-driven [`super::Http1Client`] and the
//! [`super::DirectPool`] the open loop drives. Each keeps its connections
//! its own way; what they hold in common (slots, idle connections, the
//! waiting queue, saturation, what answers' sizes allow) lives here, so
//! their figures mean the same.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use loadfleet_proto::vocab::HttpProtocol;
use tokio::time::Instant;

use crate::client::saturation::{Queued, Saturation};

/// An answer larger than this may not land whole in its socket while
/// nobody reads it: its server is held back at the full receive window
/// (64 KiB on a fresh connection; the kernel grows it as the reader keeps
/// up), so a worker that sleeps blind through its ticks would hold such
/// answers back until it woke (see [`AnswerSizes`]).
pub(super) const WINDOW_FULL: usize = 64 * 1024;

/// Answers a worker reads as they come before it trusts that its answers
/// fit in their sockets: until then nothing is known of their size, and the
/// first large one would be slept through blind.
pub(super) const FITTING_TO_TRUST: u8 = 8;

/// A pool's slots and queues. `C` is an idle connection as the pool keeps
/// it, `W` a request waiting for one.
///
/// Invariants: `open <= max_open` (a slot is taken before a connection is
/// opened and given back when it closes); every idle connection holds one
/// of the `open` slots, so `idle.len() <= open`; a request waits only while
/// every slot is taken and no idle connection suits it, and waiters are
/// served oldest first.
pub(super) struct Ledger<C, W> {
    /// Idle connections, oldest first.
    idle: VecDeque<C>,
    /// Requests waiting for a connection, oldest first.
    waiters: VecDeque<W>,
    /// Slots taken: connections open, being opened, or leased.
    open: usize,
    max_open: usize,
    /// Connections established since last taken.
    established: u64,
    /// Time with requests waiting; shared with the requests the worker
    /// holds in its own queue ([`crate::client::Queued`]).
    saturation: Rc<Saturation>,
    answer_sizes: AnswerSizes,
}

impl<C, W> Ledger<C, W> {
    /// An empty ledger of at most `connections` slots (at least one).
    pub(super) fn new(connections: usize) -> Self {
        Self {
            idle: VecDeque::new(),
            waiters: VecDeque::new(),
            open: 0,
            max_open: connections.max(1),
            established: 0,
            saturation: Rc::default(),
            answer_sizes: AnswerSizes::default(),
        }
    }

    /// Takes a slot for a connection to open, if one is free.
    pub(super) fn take_slot(&mut self) -> bool {
        let free = self.open < self.max_open;
        if free {
            self.open += 1;
        }
        free
    }

    /// Gives back the slot of a connection closed (or never opened).
    pub(super) fn free_slot(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    /// Slots taken, by connections open, being opened or leased.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.open
    }

    /// The most slots there are.
    pub(super) fn max_open(&self) -> usize {
        self.max_open
    }

    /// Slots not yet taken.
    pub(super) fn slots_left(&self) -> usize {
        self.max_open.saturating_sub(self.open)
    }

    /// Idle connections and free slots: requests that could start now.
    pub(super) fn free(&self) -> usize {
        self.idle.len() + self.slots_left()
    }

    /// Every slot is taken and no connection is idle: the next request
    /// would wait.
    pub(super) fn full(&self) -> bool {
        self.open >= self.max_open && self.idle.is_empty()
    }

    /// Some connection is busy with an exchange (or being opened).
    pub(super) fn busy(&self) -> bool {
        self.open > self.idle.len()
    }

    /// Connections busy with an exchange or being opened.
    pub(super) fn out(&self) -> usize {
        self.open - self.idle.len()
    }

    /// Idle connections.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.len()
    }

    /// Puts a connection, which holds its slot, among the idle ones.
    pub(super) fn push_idle(&mut self, connection: C) {
        self.idle.push_back(connection);
    }

    /// Takes the idle connection used last.
    pub(super) fn take_newest_idle(&mut self) -> Option<C> {
        self.idle.pop_back()
    }

    /// Takes the oldest idle connection that `wanted` picks; it keeps its
    /// slot.
    pub(super) fn take_idle_where(&mut self, wanted: impl FnMut(&C) -> bool) -> Option<C> {
        let at = self.idle.iter().position(wanted)?;
        self.idle.remove(at)
    }

    /// Queues a request for the next connection freed.
    pub(super) fn enqueue(&mut self, waiter: W) {
        self.waiters.push_back(waiter);
    }

    /// Some request waits for a connection.
    pub(super) fn has_waiters(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// The oldest waiting request.
    pub(super) fn first_waiter(&self) -> Option<&W> {
        self.waiters.front()
    }

    /// Takes the oldest waiting request.
    pub(super) fn next_waiter(&mut self) -> Option<W> {
        self.waiters.pop_front()
    }

    /// Takes the oldest waiting request that `wanted` picks.
    pub(super) fn take_waiter_where(&mut self, wanted: impl FnMut(&W) -> bool) -> Option<W> {
        let at = self.waiters.iter().position(wanted)?;
        self.waiters.remove(at)
    }

    /// Counts a request as waiting while the guard lives.
    pub(super) fn wait(&self) -> Queued {
        self.saturation.wait()
    }

    /// Requests counted as waiting now.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.saturation.waiting()
    }

    /// Time during which requests waited for a connection since the last
    /// call, up to `now`: load was held back by the agent.
    pub(super) fn take_saturated(&self, now: Instant) -> Duration {
        self.saturation.take(now)
    }

    /// A new connection was established.
    pub(super) fn established(&mut self) {
        self.established += 1;
    }

    /// Connections established since the last call: all HTTP/1.1, the
    /// only protocol these pools offer by ALPN.
    pub(super) fn take_connections(&mut self) -> Vec<(HttpProtocol, u64)> {
        match std::mem::take(&mut self.established) {
            0 => Vec::new(),
            n => vec![(HttpProtocol::Http1, n)],
        }
    }

    /// Takes in an answer `size` bytes long so far, `whole` once it ended.
    pub(super) fn saw_answer(&self, size: usize, whole: bool) {
        self.answer_sizes.saw(size, whole);
    }

    /// Answers are under way that may not land whole in their sockets
    /// before the worker's next tick ([`AnswerSizes`]). A tick that slept
    /// through them would hold their servers back until it woke, and time
    /// the answers' ends by its own wake-up.
    pub(super) fn answers_need_reading(&self) -> bool {
        self.answer_sizes.may_not_fit() && self.busy()
    }
}

/// What a worker has learnt of its answers' sizes, which says whether it
/// may sleep blind while one is under way: not until
/// [`FITTING_TO_TRUST`] answers have ended whole within [`WINDOW_FULL`],
/// and never again once one has outgrown it.
#[derive(Default)]
struct AnswerSizes {
    fitting: Cell<u8>,
    large: Cell<bool>,
}

impl AnswerSizes {
    fn saw(&self, size: usize, whole: bool) {
        if size > WINDOW_FULL {
            self.large.set(true);
        } else if whole {
            self.fitting
                .set(self.fitting.get().saturating_add(1).min(FITTING_TO_TRUST));
        }
    }

    fn may_not_fit(&self) -> bool {
        self.large.get() || self.fitting.get() < FITTING_TO_TRUST
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blind sleeps wait until enough answers have ended within a fresh
    /// socket's window, and end for good with one that outgrows it, even
    /// while it is still under way.
    #[test]
    fn answer_sizes_are_trusted_only_once_learnt() {
        let sizes = AnswerSizes::default();
        for _ in 1..FITTING_TO_TRUST {
            sizes.saw(WINDOW_FULL, false);
            sizes.saw(WINDOW_FULL, true);
            assert!(sizes.may_not_fit(), "too few seen to tell");
        }
        sizes.saw(100, true);
        assert!(!sizes.may_not_fit(), "all fitted");
        sizes.saw(WINDOW_FULL + 1, false);
        assert!(sizes.may_not_fit(), "one outgrew the window");
        for _ in 0..2 * FITTING_TO_TRUST {
            sizes.saw(100, true);
        }
        assert!(sizes.may_not_fit(), "learnt for the run");
    }

    /// Slots are taken up to the limit and given back; idle connections
    /// count as free, busy ones do not.
    #[test]
    fn slots_and_idle_connections_add_up() {
        let mut ledger: Ledger<u32, ()> = Ledger::new(2);
        assert_eq!((ledger.free(), ledger.full()), (2, false));
        assert!(ledger.take_slot() && ledger.take_slot());
        assert!(!ledger.take_slot(), "no third slot");
        assert!(ledger.full() && ledger.busy());
        ledger.push_idle(7);
        assert_eq!((ledger.free(), ledger.full()), (1, false));
        assert_eq!(ledger.take_idle_where(|&c| c == 7), Some(7));
        ledger.free_slot();
        assert_eq!(ledger.slots_left(), 1);
    }
}
