//! How long a transport held requests back waiting for a connection (or an
//! HTTP/2 stream): the time the report's `GENERATOR_POOL` verdict reads.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

/// The time a transport held requests waiting for a connection, kept as
/// it happens so the flush can take it per interval.
#[derive(Default)]
pub(super) struct Saturation {
    /// Requests waiting right now (live ones only: one that gave up is no
    /// longer counted, even while its stale entry still sits in a queue).
    waiting: Cell<usize>,
    /// Since when requests have been waiting, while some are.
    since: Cell<Option<Instant>>,
    /// Time with requests waiting, not yet taken.
    total: Cell<Duration>,
}

impl Saturation {
    /// Counts a request as waiting while the guard lives: dropped when it
    /// gets a connection (or stream) or when its time runs out, so the
    /// count, and the time with any waiting, never includes one that gave
    /// up.
    pub(super) fn wait(self: &Rc<Self>) -> Queued {
        self.changed(self.waiting.get() + 1);
        Queued {
            saturation: self.clone(),
        }
    }

    /// Requests counted as waiting now.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.get()
    }

    fn changed(&self, waiting: usize) {
        self.waiting.set(waiting);
        match (waiting > 0, self.since.get()) {
            (true, None) => self.since.set(Some(Instant::now())),
            (false, Some(since)) => {
                self.since.set(None);
                self.total.set(self.total.get() + since.elapsed());
            }
            _ => {}
        }
    }

    /// Time with requests waiting since the last call, up to `now`.
    pub(super) fn take(&self, now: Instant) -> Duration {
        let mut total = self.total.replace(Duration::ZERO);
        if let Some(since) = self.since.get() {
            total += now.saturating_duration_since(since);
            self.since.set(Some(now));
        }
        total
    }
}

/// A request counted as waiting for a connection (see [`Saturation::wait`]):
/// one in a pool's queue, or one the worker holds in its own queue while
/// every connection is busy ([`crate::client::Transport::queue`]), with no
/// task parked for it.
pub(crate) struct Queued {
    saturation: Rc<Saturation>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let s = &self.saturation;
        s.changed(s.waiting.get().saturating_sub(1));
    }
}
