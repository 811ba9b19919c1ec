//! Telling a frozen worker from a busy one.
//!
//! A worker that wakes long after it meant to was either frozen (SIGSTOP, a
//! paused VM) or busy. Frozen, it may have been declared lost and its
//! arrivals handed to others, so it must fire nothing more. Busy, it ran the
//! whole time and stayed in touch with the coordinator (the control plane
//! has its own thread): its lateness is lag, which the report judges.

use std::time::Duration;

use tokio::time::Instant;

/// Lateness beyond which a worker asks whether it was frozen. Shorter than
/// the coordinator's silence limit, so any freeze that can cost the agent
/// its place stops it first.
const FROZEN: Duration = Duration::from_millis(1500);
/// How often the thread's CPU clock is read: rarely enough to cost nothing
/// per arrival.
const CPU_SAMPLE: Duration = Duration::from_millis(100);

/// The thread's CPU clock as last sampled, to compare a late wake-up with.
pub(super) struct FreezeWatch {
    sampled_at: Instant,
    cpu_at: Option<Duration>,
}

impl FreezeWatch {
    pub(super) fn new() -> Self {
        Self {
            sampled_at: Instant::now(),
            cpu_at: crate::sys::thread_cpu_time(),
        }
    }

    /// Called on every pass of the loop, before it may sleep; reads the
    /// thread's CPU clock when the last reading is stale.
    pub(super) fn tick(&mut self, now: Instant) {
        if now.saturating_duration_since(self.sampled_at) >= CPU_SAMPLE {
            self.sampled_at = now;
            self.cpu_at = crate::sys::thread_cpu_time();
        }
    }

    /// Whether being `gap` late at `now` means the thread was stopped.
    pub(super) fn frozen(&self, gap: Duration, now: Instant) -> bool {
        gap > FROZEN
            && stopped(
                now.saturating_duration_since(self.sampled_at),
                self.cpu_at
                    .zip(crate::sys::thread_cpu_time())
                    .map(|(then, cpu)| cpu.saturating_sub(then)),
            )
    }
}

/// A thread that ran for less than a quarter of `wall` was stopped for the
/// rest: a busy one runs nearly all of it (a quarter allows for a machine
/// shared with three other busy threads), a stopped one at most the
/// [`CPU_SAMPLE`] before it stopped. With no CPU clock, assume stopped, the
/// safe side.
fn stopped(wall: Duration, ran: Option<Duration>) -> bool {
    ran.is_none_or(|ran| ran * 4 < wall)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_and_idle_is_frozen_late_and_running_is_busy() {
        let gap = Duration::from_millis(1600);
        assert!(stopped(gap, Some(Duration::from_millis(90))), "SIGSTOP");
        assert!(!stopped(gap, Some(Duration::from_millis(1550))), "busy");
        assert!(
            !stopped(gap, Some(Duration::from_millis(500))),
            "busy, shared"
        );
        assert!(stopped(gap, None), "no clock: the safe side");
    }

    /// On the real clocks: a thread that slept through a gap did not run,
    /// so a gap that long is a freeze; one shorter than FROZEN never is.
    #[test]
    fn a_thread_that_did_not_run_is_frozen() {
        let watch = FreezeWatch::new();
        std::thread::sleep(Duration::from_millis(150));
        let now = Instant::now();
        assert!(watch.frozen(FROZEN + Duration::from_millis(1), now));
        assert!(!watch.frozen(FROZEN, now));
    }
}
