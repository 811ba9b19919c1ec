//! The send seam: how a worker's requests go out, how their outcomes come
//! back, and how it waits for its next instant.
//!
//! A [`Driver`] is chosen once per scenario (see `open::run` and
//! `closed::run`), tick strategy included, and the loops are generic over
//! it, so the request path carries no choice of its own:
//!
//! | driver                     | requests go                      | waits                      |
//! |----------------------------|----------------------------------|----------------------------|
//! | `direct::Direct`           | into the loop's own pool         | ticks, or driving the pool |
//! | `tasks::Tasks`             | to request tasks (the transport) | ticks, or the timer        |
//! | `subscribers::Subscribers` | to a task per held stream        | the timer                  |
//! | `closed::Client`           | out and back, one at a time      | the timer                  |

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::timer::PreciseTimer;

/// Sleeps longer than this also watch for a stop, so a long pause in the
/// schedule cannot delay stopping; shorter ones just check the flag after.
pub(super) const WATCHED_SLEEP: Duration = Duration::from_millis(20);

/// One arrival handed to a driver.
#[derive(Clone, Copy)]
pub(super) struct Arrival {
    /// Its index in the fleet's schedule (or a closed client's sequence).
    pub(super) seq: u64,
    /// The interval of its intended instant.
    pub(super) interval: u64,
    /// When it was meant to go out: latency counts from here.
    pub(super) intended: Instant,
    /// When it goes out.
    pub(super) now: Instant,
    /// How late it goes out (`now - intended`).
    pub(super) lag: Duration,
}

/// What [`Driver::submit`] made of an arrival.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Submitted {
    /// The template did not render into a request: counted unsent.
    Unrendered,
    /// Sent; its outcome is recorded, now or when it comes.
    Sent,
    /// A subscriber held its stream to the end of its window.
    Held,
    /// Left unanswered at a stop or the end of the drain: it stays in
    /// flight at the end.
    Abandoned,
}

/// How a [`Driver::wait`] ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Waited {
    /// Stopped meanwhile.
    Stopped,
    /// At the wake-up's instant, or later.
    Woke,
    /// Before it, with the arrival it waited for already due.
    Cut,
}

impl Waited {
    /// [`Waited::Woke`], or [`Waited::Stopped`] for a wait that was stopped.
    pub(super) fn from_woke(woke: bool) -> Self {
        if woke {
            Waited::Woke
        } else {
            Waited::Stopped
        }
    }
}

/// How one scenario's requests go out and its loop waits between them.
pub(super) trait Driver {
    /// Renders `arrival`'s request (or counts it unsent), counts it sent
    /// and sends it. Open drivers hand it on and return at once.
    async fn submit(&mut self, arrival: Arrival) -> Submitted;

    /// Records the outcomes that only the driver sees come back.
    fn drive(&mut self) {}

    /// Resolves when [`Self::drive`] has something to take up; never, for
    /// a driver whose requests record themselves.
    async fn news(&self) {
        std::future::pending::<()>().await
    }

    /// Waits for a wake-up at most [`WATCHED_SLEEP`] away (or a closed
    /// client's window), as this driver waits; `due` is the arrival it
    /// waits for when the wait may end early for it.
    async fn wait(&mut self, sleep: Sleep<'_>, due: Option<Instant>) -> Waited;

    /// Before an arrival goes out: takes up answers a tick left unread
    /// when every connection is busy, so the arrival gets the connection
    /// one of them freed. True when it did (the clock moved).
    async fn catch_up(&mut self) -> bool {
        false
    }

    /// Opens up to `needed` connections to `uri` before the start; what is
    /// not open by then opens as requests need it.
    async fn open_ahead(&self, _uri: &http::Uri, _needed: usize) {}
}

/// A wait for a wake-up, as [`PreciseTimer::sleep_until`] takes it.
#[derive(Clone, Copy)]
pub(super) struct Sleep<'a> {
    pub(super) timer: Option<&'a PreciseTimer>,
    pub(super) wake: Instant,
    /// An arrival's own instant, not one held back to the quantum: it
    /// should leave at it (see [`PreciseTimer::sleep_until`]).
    pub(super) exact: bool,
}

impl Sleep<'_> {
    /// Waits for the wake-up; false when stopped meanwhile.
    pub(super) async fn until(self, stop: &CancellationToken) -> bool {
        wait_until(self.timer, self.wake, self.exact, stop).await
    }

    /// [`Self::until`], as a [`Driver::wait`] that never ends early.
    pub(super) async fn waited(self, stop: &CancellationToken) -> Waited {
        Waited::from_woke(self.until(stop).await)
    }

    /// A tick's sleep: the thread blocks until `wake`, listening to
    /// nothing.
    pub(super) async fn blind(self) {
        let blocked = match self.timer {
            Some(timer) => timer.block(self.wake, self.exact),
            None => crate::timer::block_until(self.wake),
        };
        if let Err(err) = blocked {
            tracing::debug!("cannot sleep until the tick ({err}); waiting on tokio's timer");
            tokio::time::sleep_until(self.wake).await;
        }
    }
}

/// Waits for an instant; false when stopped meanwhile. Long waits (pauses in
/// the schedule) also listen for a stop.
pub(super) async fn wait_until(
    timer: Option<&PreciseTimer>,
    intended: Instant,
    exact: bool,
    stop: &CancellationToken,
) -> bool {
    if intended > Instant::now() + WATCHED_SLEEP {
        tokio::select! {
            _ = sleep_precisely(timer, intended, exact) => true,
            _ = stop.cancelled() => false,
        }
    } else {
        sleep_precisely(timer, intended, exact).await;
        true
    }
}

/// Sleeps until `at` on the precise timer, `exact` as
/// [`PreciseTimer::sleep_until`] says; on tokio's, with its 1 ms slots,
/// without one. The whole wait, however long, is one sleep: one wake-up
/// per arrival at low rates.
pub(super) async fn sleep_precisely(timer: Option<&PreciseTimer>, at: Instant, exact: bool) {
    match timer {
        Some(t) => {
            if let Err(e) = t.sleep_until(at, exact).await {
                tracing::debug!("precise timer failed ({e}); falling back to tokio's");
                tokio::time::sleep_until(at).await;
            }
        }
        None => tokio::time::sleep_until(at).await,
    }
}
