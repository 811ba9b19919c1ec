//! The open loop's coalesced wake-ups: at most one per wake quantum.
//!
//! Each wake-up is a context switch, dearer than a request at high rates,
//! so arrivals closer together than the quantum leave together, up to one
//! quantum late; the lag histogram and the latency (taken from the intended
//! instant) both show it.

use std::time::Duration;

use tokio::time::Instant;

/// The least time left before a wake-up for a tick to sleep blind: about
/// what waking a halted CPU costs. A worker with less slack is nearly
/// saturated, and a late start would add to every arrival's lag.
pub(super) const TICK_SLACK: Duration = Duration::from_micros(100);

/// Where the next wake-up's quantum counts from, and whether the coming
/// tick may still end early.
pub(super) struct Ticks {
    anchor: Instant,
    quantum: Duration,
    /// Whether the coming tick may end before its instant to send an
    /// arrival that fell due while it read: once per tick, so that a worker
    /// whose reads keep finding arrivals due still sleeps between ticks.
    may_cut: bool,
}

impl Ticks {
    pub(super) fn new(now: Instant, quantum: Duration) -> Self {
        Self {
            anchor: now,
            quantum,
            may_cut: true,
        }
    }

    /// When to wake for an arrival intended at `intended`: at it, or a
    /// quantum after the last wake-up if that is later.
    pub(super) fn wake(&self, intended: Instant) -> Instant {
        intended.max(self.anchor + self.quantum)
    }

    /// The arrival a tick waiting for one at `intended` may end early for.
    pub(super) fn due(&self, intended: Instant) -> Option<Instant> {
        self.may_cut.then_some(intended)
    }

    /// A wake-up meant for `wake` came at `now`.
    pub(super) fn woke(&mut self, wake: Instant, now: Instant) {
        self.anchor = tick_anchor(wake, now, self.quantum);
        self.may_cut = true;
    }

    /// The coming tick ended early: it has not come yet, so its instant is
    /// still the next wake-up's, and the wait after this arrival's send is
    /// the rest of it.
    pub(super) fn cut(&mut self) {
        self.may_cut = false;
    }
}

/// Counts the next quantum from the intended `wake`, not from the actual
/// `now`, so that wake-ups keep one quantum apart on average however late
/// each one is; a wake-up more than a quantum late (a stall) restarts the
/// count, so the loop does not tick back to back to catch up.
fn tick_anchor(wake: Instant, now: Instant, quantum: Duration) -> Instant {
    if now < wake + quantum {
        wake
    } else {
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tick that ended early to send an arrival its reads found due
    /// still comes at its instant, and the loop's pace stays one quantum.
    #[test]
    fn a_cut_tick_still_comes_at_its_instant_and_is_cut_once() {
        let quantum = Duration::from_micros(500);
        let start = Instant::now();
        let us = |n| start + Duration::from_micros(n);
        let mut ticks = Ticks::new(start, quantum);
        let tick = ticks.wake(us(100));
        assert_eq!(tick, us(500), "arrivals closer than a quantum wait for it");
        assert_eq!(ticks.due(us(100)), Some(us(100)));
        // Its reads found the arrival at 100 µs due: it went out, and the
        // next one waits for the same tick, which is not cut again.
        ticks.cut();
        assert_eq!(ticks.wake(us(300)), tick);
        assert_eq!(ticks.due(us(300)), None);
        ticks.woke(tick, us(530));
        assert_eq!(ticks.wake(us(600)), us(1000), "one quantum after the tick");
        assert_eq!(ticks.due(us(600)), Some(us(600)));
        assert_eq!(
            ticks.wake(us(2000)),
            us(2000),
            "a far arrival at its instant"
        );
    }

    /// Every wake-up 60 µs late: a hundred ticks of 500 µs still take
    /// 50 ms, not 56; a stall of three quanta restarts the count at the
    /// stall's end instead of ticking back to back after it.
    #[test]
    fn ticks_keep_their_quantum_apart_whatever_each_wake_up_is_late() {
        let quantum = Duration::from_micros(500);
        let late = Duration::from_micros(60);
        let start = Instant::now();
        let mut last = start;
        let mut woke = start;
        for _ in 0..100 {
            let wake = last + quantum;
            woke = wake + late;
            last = tick_anchor(wake, woke, quantum);
        }
        assert_eq!(woke - start, 100 * quantum + late);
        let wake = last + quantum;
        let stalled = wake + 3 * quantum;
        assert_eq!(tick_anchor(wake, stalled, quantum), stalled);
    }
}
