//! A precise sleep for arrival instants.
//!
//! tokio's timer wheel rounds every deadline up to the next millisecond, so
//! on its own it would put up to 1 ms of lag on each arrival, and spinning
//! the rest would burn a core while the generator should be idle (and make
//! its CPU figure useless as a health signal). A `timerfd` armed at the
//! absolute `CLOCK_MONOTONIC` instant — the clock `Instant` reads — wakes
//! the worker's event loop within microseconds instead, at no CPU cost.
//!
//! This is on the agent's hot path: a wake-up costs one `timerfd_settime`,
//! the event loop's own wait, and no allocation (`clock_gettime` is served
//! by the vDSO).
//!
//! "Within microseconds" is the kernel's part. Waking an idle CPU takes
//! longer — about 0.1 ms on a virtual machine, where the halted virtual CPU
//! must be brought back — and every microsecond of it would be send lag, and
//! latency, on an arrival that was meant to leave on time. So an exact
//! sleep arms the timer early by the median lateness of its recent
//! wake-ups from sleeps of about its length, and yields (or, with the
//! thread blocked, spins) through the rest: the CPU it costs is the
//! wake-up's jitter, not its delay.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::time::{clock_gettime, ClockId as Clock};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

use crate::Error;

/// Waits shorter than this are yielded through instead of armed.
const SPIN_BELOW: Duration = Duration::from_micros(20);
/// Most an exact sleep arms the timer ahead of its instant. A wake-up later
/// than this is not the CPU waking but the CPU busy elsewhere, which
/// spinning cannot help and would only pay for.
const MAX_LEAD: Duration = Duration::from_micros(250);
/// The share of an exact sleep's wake-ups meant to come by its instant, in
/// percent: the lead tracks this quantile of the timer's lateness, its
/// median. Half the arrivals then leave a few µs after their instants, for
/// far less spinning than a mean would cost: a mean follows the tail, so each
/// late wake-up would make the next dozen sleeps spin longer
/// (docs/design/pacing.md has the figures).
const ON_TIME_PERCENT: u64 = 50;
/// How far one wake-up moves the tracked quantile: up by `STEP` ×
/// [`ON_TIME_PERCENT`] when it came later than the estimate, down by the
/// rest of `STEP` when it came sooner, so the estimate settles where that
/// share of wake-ups come sooner. From nothing it reaches a lateness of
/// 0.1 ms in 50 sleeps, and a wake-up in the tail moves it by 2 µs.
const STEP: Duration = Duration::from_micros(4);
/// Sleeps up to these lengths (and a last class for longer ones) each learn
/// their own lateness: the longer a vCPU has been halted, the later it
/// wakes (several times later after 20 ms than after 0.5 ms), so one
/// estimate for all would spin short sleeps too long and leave long ones
/// late.
const SPANS: [Duration; 3] = [
    Duration::from_millis(1),
    Duration::from_millis(4),
    Duration::from_millis(16),
];

/// One timer per sequential waiter (each open-model loop has its own).
pub struct PreciseTimer {
    fd: AsyncFd<Registered>,
    /// How late after its armed instant this timer's recent wake-ups have
    /// come at the median ([`ON_TIME_PERCENT`]), in ns, per class of sleep
    /// length ([`SPANS`]): what an exact sleep arms it early by. Atomic only so
    /// the timer stays `Sync` for the testbed's multi-threaded runtime; one
    /// task at a time uses a timer.
    late_ns: [AtomicU64; SPANS.len() + 1],
}

/// The timerfd as tokio's reactor wants it: `AsyncFd` needs `AsRawFd`,
/// which nix's `TimerFd` does not implement (it offers `AsFd`).
struct Registered(TimerFd);

impl AsRawFd for Registered {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl PreciseTimer {
    /// A disarmed timer, registered with the current tokio runtime (which
    /// must have I/O enabled).
    pub fn new() -> Result<Self, Error> {
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(Error::os("timerfd_create"))?;
        // SAFETY: tokio 1.54 has no safe way to register a descriptor (its
        // safe constructors are deprecated as unsound), and no crate wraps
        // a timerfd in tokio's reactor. The contract holds: `Registered`
        // owns the descriptor, returns that same one from every
        // `as_raw_fd`, and keeps it open until the `AsyncFd` drops it.
        let fd = unsafe { AsyncFd::register_with_interest(Registered(timer), Interest::READABLE) }
            .map_err(|err| Error::Reactor(err.into()))?;
        Ok(Self {
            fd,
            late_ns: Default::default(),
        })
    }

    /// Sleeps until `deadline` (returns at once if it has passed). An
    /// `exact` sleep also spends the timer's usual wake-up delay spinning
    /// instead, so it ends at the instant rather than that much after it;
    /// one whose instant is already a compromise (coalesced arrivals) need
    /// not pay for that.
    pub async fn sleep_until(&self, deadline: Instant, exact: bool) -> Result<(), Error> {
        let now = Instant::now();
        if deadline <= now {
            return Ok(());
        }
        let (span, armed) = self.arm(now, deadline, exact);
        // A gap this short costs less to yield through than two syscalls
        // (arm, wake), and it only happens at high rates where the
        // worker is busy anyway.
        if armed > now + SPIN_BELOW {
            self.wait_for(armed - now).await?;
            self.learn(span, armed);
        }
        spin_until(deadline).await;
        Ok(())
    }

    /// [`Self::sleep_until`] with the whole thread blocked, as
    /// [`block_until`]: the same lead, learnt from the same wake-ups, is
    /// spun through without yielding, since nothing else may run on the
    /// thread meanwhile anyway.
    pub fn block(&self, deadline: Instant, exact: bool) -> Result<(), Error> {
        let now = Instant::now();
        if deadline <= now {
            return Ok(());
        }
        let (span, armed) = self.arm(now, deadline, exact);
        if armed > now + SPIN_BELOW {
            block_until(armed)?;
            self.learn(span, armed);
        }
        while Instant::now() < deadline {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The class of a sleep from `now` to `deadline`, and when its timer
    /// should fire: early by the lead, for an exact one.
    fn arm(&self, now: Instant, deadline: Instant, exact: bool) -> (usize, Instant) {
        let span = span_of(deadline - now);
        let lead = if exact {
            self.late(span).min(MAX_LEAD)
        } else {
            Duration::ZERO
        };
        (span, deadline - lead)
    }

    /// Takes in a wake-up from a sleep of class `span` armed for `armed`.
    /// The kernel never fires a timer early: everything past `armed` is
    /// the wake-up's delay.
    fn learn(&self, span: usize, armed: Instant) {
        let late = Instant::now().saturating_duration_since(armed);
        let learnt = track_quantile(self.late(span), late);
        self.late_ns[span].store(learnt.as_nanos() as u64, Ordering::Relaxed);
    }

    fn late(&self, span: usize) -> Duration {
        Duration::from_nanos(self.late_ns[span].load(Ordering::Relaxed))
    }

    /// Arms the timer `after` from now and waits for it.
    ///
    /// The expiry is never read: re-arming a timerfd zeroes its count of
    /// expiries, and tokio's registration is edge-triggered, so each expiry
    /// is one wake-up whatever was left unread, and a read would be a
    /// system call per sleep for nothing. A readiness left over from a
    /// timer that fired after its sleep was given up (a dropped future) is
    /// told apart by the clock instead: the kernel never fires early.
    async fn wait_for(&self, after: Duration) -> Result<(), Error> {
        // Read first, so that `fires` is never after the timer's instant.
        let fires = Instant::now() + after;
        let monotonic_now =
            clock_gettime(Clock::CLOCK_MONOTONIC).map_err(Error::os("clock_gettime"))?;
        let target = monotonic_now + TimeSpec::from_duration(after);
        self.fd
            .get_ref()
            .0
            .set(
                Expiration::OneShot(target),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            )
            .map_err(Error::os("timerfd_settime"))?;
        loop {
            let mut guard = self.fd.readable().await.map_err(Error::Reactor)?;
            guard.clear_ready();
            if Instant::now() >= fires {
                return Ok(());
            }
        }
    }
}

/// The lateness estimate after a wake-up `late`: one [`STEP`] towards the
/// [`ON_TIME_PERCENT`] quantile, never above [`MAX_LEAD`], which is all a
/// lead can use.
fn track_quantile(estimate: Duration, late: Duration) -> Duration {
    let next = if late > estimate {
        estimate + STEP * ON_TIME_PERCENT as u32 / 100
    } else {
        estimate.saturating_sub(STEP * (100 - ON_TIME_PERCENT) as u32 / 100)
    };
    next.min(MAX_LEAD)
}

/// The class of a sleep `long` ([`SPANS`]).
fn span_of(long: Duration) -> usize {
    SPANS.iter().take_while(|&&up_to| long > up_to).count()
}

/// Yields to the worker's other tasks until `deadline`: each turn also polls
/// the reactor, so answers that arrive meanwhile are served.
async fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

/// Blocks the whole thread until `deadline` (`clock_nanosleep` at the
/// absolute instant): nothing else runs on it meanwhile, and — the point —
/// nothing wakes it early. A loop that reads its sockets on its own ticks
/// uses it, so that answers arriving between ticks cost no wake-up; it
/// must only sleep this way for short, bounded times. Interrupted by a
/// signal, it ends early, which its caller sees as an early tick.
pub fn block_until(deadline: Instant) -> Result<(), Error> {
    let now = Instant::now();
    if deadline <= now {
        return Ok(());
    }
    let monotonic_now =
        clock_gettime(Clock::CLOCK_MONOTONIC).map_err(Error::os("clock_gettime"))?;
    let target = monotonic_now + TimeSpec::from_duration(deadline - now);
    match nix::time::clock_nanosleep(
        Clock::CLOCK_MONOTONIC,
        nix::time::ClockNanosleepFlags::TIMER_ABSTIME,
        &target,
    ) {
        Ok(_) | Err(Errno::EINTR) => Ok(()),
        Err(source) => Err(Error::Os {
            call: "clock_nanosleep",
            source,
        }),
    }
}

/// Asks the kernel to wake this thread's timers with 1 µs of slack instead
/// of the default 50 µs. Best effort: without it, wake-ups are merely later.
pub fn tighten_timer_slack() {
    let _ = nix::sys::prctl::set_timerslack(1000);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_at_the_instant_not_before() {
        let timer = PreciseTimer::new().unwrap();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(700);
            timer.sleep_until(deadline, true).await.unwrap();
            assert!(Instant::now() >= deadline);
        }
        // A past deadline returns at once.
        timer
            .sleep_until(Instant::now() - Duration::from_millis(5), true)
            .await
            .unwrap();
    }

    /// An exact sleep learns how late the timer wakes and arms it that much
    /// early, yet still never ends before its instant; a coalesced one
    /// (not exact) arms it at the instant itself.
    #[tokio::test]
    async fn exact_sleeps_learn_the_wake_up_delay_and_never_end_early() {
        let timer = PreciseTimer::new().unwrap();
        for exact in [false, true] {
            for _ in 0..20 {
                let deadline = Instant::now() + Duration::from_micros(500);
                timer.sleep_until(deadline, exact).await.unwrap();
                assert!(Instant::now() >= deadline, "woke before the instant");
            }
        }
        let late = timer.late(0);
        assert!(late > Duration::ZERO && late <= MAX_LEAD, "{late:?}");
        assert_eq!(
            timer.late(2),
            Duration::ZERO,
            "sleeps of 0.5 ms teach nothing to sleeps of 10 ms"
        );
    }

    /// Wake-ups 10–29 µs late, and every hundredth 1 ms late (a host's tail):
    /// the lead settles by their median, and the tail lifts it by no more
    /// than one step at a time.
    #[test]
    fn the_lead_follows_the_usual_wake_ups_not_the_tail() {
        let us = Duration::from_micros;
        let mut estimate = Duration::ZERO;
        let mut settled = Vec::new();
        for n in 0..5_000u64 {
            let late = if n % 100 == 99 {
                us(1_000)
            } else {
                us(10 + n * 7 % 20)
            };
            let before = estimate;
            estimate = track_quantile(estimate, late);
            assert!(
                estimate <= before + STEP,
                "one wake-up moved it by {:?}",
                estimate - before
            );
            if n >= 1_000 {
                settled.push(estimate);
            }
        }
        let mean = settled.iter().sum::<Duration>() / settled.len() as u32;
        assert!(
            (us(18)..=us(22)).contains(&mean),
            "settled about {mean:?}, not by the median (20 µs)"
        );
        let highest = settled.iter().max().copied().unwrap_or_default();
        assert!(highest <= us(26), "the tail lifted it to {highest:?}");
        assert_eq!(
            track_quantile(MAX_LEAD, us(5_000)),
            MAX_LEAD,
            "capped at what a lead can use"
        );
    }

    #[test]
    fn sleeps_are_classed_by_length() {
        let ms = Duration::from_millis;
        assert_eq!(span_of(Duration::from_micros(500)), 0);
        assert_eq!(span_of(ms(1)), 0);
        assert_eq!(span_of(ms(3)), 1);
        assert_eq!(span_of(ms(10)), 2);
        assert_eq!(span_of(ms(16)), 2);
        assert_eq!(span_of(ms(100)), 3);
    }

    /// The blocking sleep learns the same lead as the yielding one, and
    /// spins through it without ever ending before its instant.
    #[tokio::test]
    async fn a_blocking_exact_sleep_learns_the_lead_and_never_ends_early() {
        let timer = PreciseTimer::new().unwrap();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(500);
            timer.block(deadline, true).unwrap();
            assert!(Instant::now() >= deadline, "woke before the instant");
        }
        assert!(timer.late(0) > Duration::ZERO, "it learnt no lead");
        timer
            .block(Instant::now() - Duration::from_millis(1), true)
            .unwrap();
    }

    #[test]
    fn a_blocking_sleep_ends_at_its_instant_not_before() {
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(300);
            block_until(deadline).unwrap();
            assert!(Instant::now() >= deadline);
        }
        block_until(Instant::now() - Duration::from_millis(1)).unwrap();
    }

    #[tokio::test]
    async fn a_sleep_given_up_does_not_cut_the_next_one_short() {
        let timer = PreciseTimer::new().unwrap();
        let early = Instant::now() + Duration::from_millis(30);
        let given_up =
            tokio::time::timeout(Duration::from_millis(5), timer.sleep_until(early, false)).await;
        assert!(given_up.is_err(), "the first sleep should have been cut");
        // Let the abandoned deadline pass, so the timer is readable when the
        // next sleep starts.
        std::thread::sleep(Duration::from_millis(40));
        let deadline = Instant::now() + Duration::from_millis(2);
        timer.sleep_until(deadline, true).await.unwrap();
        assert!(Instant::now() >= deadline);
    }
}
