//! A precise sleep for arrival instants.
//!
//! tokio's timer wheel rounds every deadline up to the next millisecond, so
//! on its own it would put up to 1 ms of lag on each arrival, and spinning
//! the rest would burn a core while the generator should be idle (and make
//! its CPU figure useless as a health signal). A `timerfd` armed at the
//! absolute `CLOCK_MONOTONIC` instant — the clock `Instant` reads — wakes
//! the worker's event loop within microseconds instead, at no CPU cost.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Waits shorter than this are yielded through instead of armed.
const SPIN_BELOW: Duration = Duration::from_micros(20);

/// One timer per sequential waiter (each open-model loop has its own).
pub struct PreciseTimer {
    fd: AsyncFd<OwnedFd>,
}

impl PreciseTimer {
    pub fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create returns a new descriptor we own (or -1).
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a valid, freshly created descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the OwnedFd keeps the descriptor open, unchanged, for as
        // long as the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
        Ok(Self { fd })
    }

    /// Sleeps until `deadline` (returns at once if it has passed).
    pub async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
        let now = Instant::now();
        if deadline <= now {
            return Ok(());
        }
        // A gap this short costs less to yield through than three syscalls
        // (arm, wake, read), and it only happens at high rates where the
        // worker is busy anyway.
        if deadline - now <= SPIN_BELOW {
            while Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
            return Ok(());
        }
        let target = monotonic_now()? + (deadline - now);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: target.as_secs() as libc::time_t,
                tv_nsec: target.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: arming our own timerfd with a valid itimerspec.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let mut expirations = 0u64;
            // SAFETY: reading 8 bytes into a u64 from our own timerfd.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut expirations as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if n == 8 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                guard.clear_ready();
                continue;
            }
            return Err(err);
        }
    }
}

/// CLOCK_MONOTONIC now, as a duration since its epoch.
fn monotonic_now() -> io::Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Asks the kernel to wake this thread's timers with 1 µs of slack instead
/// of the default 50 µs.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_at_the_instant_not_before() {
        let timer = PreciseTimer::new().unwrap();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(700);
            timer.sleep_until(deadline).await.unwrap();
            assert!(Instant::now() >= deadline);
        }
        // A past deadline returns at once.
        timer
            .sleep_until(Instant::now() - Duration::from_millis(5))
            .await
            .unwrap();
    }
}
