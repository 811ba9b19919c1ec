//! An epoll set of the caller's own that tokio's reactor watches, so a
//! single-threaded loop can wait on it together with its timers and
//! channels, and then take its events itself without a task per socket.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, RawFd};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use mio::Events;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A `mio::Poll` registered with the current tokio runtime as one more
/// readable source: it is readable while any of its own sources has news.
pub struct WatchedPoll {
    fd: AsyncFd<Owned>,
}

/// The poll and its descriptor, read once, so that the reactor never needs
/// the poll while it is being polled.
struct Owned {
    poll: RefCell<mio::Poll>,
    fd: RawFd,
}

impl AsRawFd for Owned {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl WatchedPoll {
    /// Registers `poll` with the current tokio runtime, which must have
    /// I/O enabled.
    pub fn new(poll: mio::Poll) -> std::io::Result<Self> {
        let fd = poll.as_raw_fd();
        let owned = Owned {
            poll: RefCell::new(poll),
            fd,
        };
        // SAFETY: tokio has no safe way to register a descriptor (its safe
        // constructors are deprecated as unsound). The contract holds:
        // `Owned` owns the descriptor (through its `mio::Poll`, which
        // nothing outside this type can reach to close or replace),
        // returns that same one from every `as_raw_fd`, and keeps it open
        // until the `AsyncFd` drops it.
        let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Self { fd })
    }

    /// Ready once the set has news as far as the reactor has looked; a
    /// pending poll wakes `cx` when it comes. Costs no system call.
    #[inline]
    pub fn poll_news(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.fd.poll_read_ready(cx).map(drop)
    }

    /// Forgets what the reactor knows: news arriving after this sets it
    /// again. Called before taking the events, so none is missed.
    #[inline]
    pub fn clear_news(&self) {
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(Ok(mut seen)) = self.fd.poll_read_ready(&mut cx) {
            seen.clear_ready();
        }
    }

    /// Takes the set's events into `events`, waiting at most `timeout`.
    #[inline]
    pub fn events(&self, events: &mut Events, timeout: Option<Duration>) -> std::io::Result<()> {
        self.fd.get_ref().poll.borrow_mut().poll(events, timeout)
    }
}
