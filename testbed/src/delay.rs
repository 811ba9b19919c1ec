//! The service delay, kept to microseconds.
//!
//! tokio's timer rounds every deadline up to the next millisecond and the
//! reactor parks in whole milliseconds, so a 10 ms `tokio::time::sleep`
//! ends 10.5–11.5 ms later. The testbed is the ground truth latency is
//! checked against, so its delay must be as exact as the agent's arrival
//! timer: the same `timerfd` ([`PreciseTimer`]), armed at the absolute
//! instant.
//!
//! One timer serves every delayed request: a task keeps the waiting
//! requests' deadlines in a heap and arms the timer for the earliest, so a
//! request costs a channel send and a heap entry, not a descriptor or a
//! thread, and requests due at the same instant are released by one
//! wake-up. Long delays first wait on tokio's cheap coarse timer and join
//! the heap only for their last stretch, so ten thousand requests held for
//! seconds do not re-sort a large heap on every release.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

use loadfleet_sys::timer::PreciseTimer;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::warn;

/// Delays longer than this first sleep on tokio's timer until this much is
/// left; more than tokio's worst rounding (1 ms) plus a busy reactor's late
/// wake-up.
const COARSE_MARGIN: Duration = Duration::from_millis(3);

/// A handle to the shared precise timer; cheap to clone into every request.
#[derive(Clone)]
pub(crate) struct Delays {
    waiting: mpsc::UnboundedSender<Waiter>,
}

impl Delays {
    /// Starts the timer task on the current runtime. Without a timerfd (an
    /// exotic kernel) delays fall back to tokio's millisecond timer, with a
    /// warning, rather than not serving at all.
    pub(crate) fn start() -> Option<Self> {
        let timer = match PreciseTimer::new() {
            Ok(timer) => timer,
            Err(err) => {
                warn!(%err, "no precise timer; --delay will run up to 1.5 ms long");
                return None;
            }
        };
        let (waiting, queue) = mpsc::unbounded_channel();
        tokio::spawn(release(timer, queue));
        Some(Delays { waiting })
    }

    /// Waits until `deadline`, never returning before it.
    pub(crate) async fn sleep_until(&self, deadline: Instant) {
        if let Some(coarse) = deadline.checked_sub(COARSE_MARGIN) {
            if coarse > Instant::now() {
                tokio::time::sleep_until(coarse).await;
            }
        }
        let (wake, woken) = oneshot::channel();
        if self.waiting.send(Waiter { deadline, wake }).is_err() || woken.await.is_err() {
            // The timer task is gone (runtime shutting down): still honour
            // the delay's lower bound.
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One request waiting for its deadline.
struct Waiter {
    deadline: Instant,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> Ordering {
        self.deadline.cmp(&other.deadline)
    }
}

/// The timer task: takes new waiters, releases every waiter whose deadline
/// has come, sleeps until the next. Ends when every [`Delays`] handle is gone.
async fn release(timer: PreciseTimer, mut queue: mpsc::UnboundedReceiver<Waiter>) {
    let mut heap: BinaryHeap<Reverse<Waiter>> = BinaryHeap::new();
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|next| next.0.deadline <= now) {
            if let Some(Reverse(due)) = heap.pop() {
                // The request may have gone (client hung up): nothing to do.
                let _ = due.wake.send(());
            }
        }
        let next = heap.peek().map(|next| next.0.deadline);
        tokio::select! {
            biased;
            waiter = queue.recv() => match waiter {
                Some(waiter) => {
                    heap.push(Reverse(waiter));
                    // Take everything already queued before re-arming once.
                    while let Ok(waiter) = queue.try_recv() {
                        heap.push(Reverse(waiter));
                    }
                }
                None => return,
            },
            slept = sleep_or_pend(&timer, next) => {
                if let Err(err) = slept {
                    // Keep serving on tokio's timer rather than stall every
                    // delayed request.
                    warn!(%err, "precise timer failed; falling back to tokio's");
                    if let Some(next) = next {
                        tokio::time::sleep_until(next).await;
                    }
                }
            }
        }
    }
}

/// Sleeps until `next`, or forever when nothing waits. Exact: the testbed's
/// delay is the ground truth the agent's figures are checked against, so
/// it must not end late by its own wake-up either.
async fn sleep_or_pend(
    timer: &PreciseTimer,
    next: Option<Instant>,
) -> Result<(), loadfleet_sys::Error> {
    match next {
        Some(next) => timer.sleep_until(next, true).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many waiters with deadlines in mixed order, some equal: every one
    /// is released, none before its deadline. (How exact the release is
    /// is measured by bench/peers.sh, not asserted on a shared machine.)
    #[tokio::test]
    async fn releases_each_waiter_not_before_its_deadline() {
        let delays = Delays::start().expect("timerfd");
        let start = Instant::now();
        let offsets_us = [4_000u64, 700, 2_500, 700, 5_300, 1_200, 3_900, 150];
        let mut tasks = Vec::new();
        for offset in offsets_us {
            let delays = delays.clone();
            let deadline = start + Duration::from_micros(offset);
            tasks.push(tokio::spawn(async move {
                delays.sleep_until(deadline).await;
                Instant::now() >= deadline
            }));
        }
        for task in tasks {
            assert!(task.await.expect("task"), "released before its deadline");
        }
    }

    /// A long delay goes through the coarse timer first and still ends on
    /// time; a past deadline returns at once.
    #[tokio::test]
    async fn long_and_past_deadlines() {
        let delays = Delays::start().expect("timerfd");
        let deadline = Instant::now() + Duration::from_millis(12);
        delays.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
        let before = Instant::now();
        delays.sleep_until(before - Duration::from_millis(1)).await;
        assert!(Instant::now() - before < Duration::from_millis(50));
    }
}
