//! Request tasks that outlive their request: a worker hands each arrival to
//! an idle one instead of spawning a task for it.
//!
//! A task per arrival costs two allocations (the task and its
//! kilobyte-sized future), a place in the runtime's task list and a
//! teardown, every time. A runner is allocated once, when every existing
//! one is busy, and then waits in the idle list between requests, so the
//! worker holds as many as it ever had in flight at once, never more.
//!
//! When every connection is taken, an arrival is not given to a runner at
//! all: it waits in the backlog, oldest first, and the next runner to
//! finish its request takes it up at once, on the connection it just
//! freed. A runner per waiting arrival, parked in the pool's queue, would
//! cost a hand-over and another wake-up per request, so a worker that fell
//! behind would get dearer per request just when it can least afford it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The idle runners of one worker's scenario, each waiting for a job `J`.
pub(crate) struct Runners<J> {
    idle: RefCell<Vec<Rc<Mailbox<J>>>>,
    /// Jobs waiting for a runner to finish, oldest first.
    backlog: RefCell<VecDeque<J>>,
    /// Runners started, busy or idle.
    started: Cell<usize>,
    /// Jobs offered to a runner that has not taken them up yet: each will
    /// take a connection when it does.
    pending: Cell<usize>,
}

/// A new runner's mailbox, holding its first job (see [`Runners::serve`]).
pub(crate) struct Seat<J>(Rc<Mailbox<J>>);

/// Where one runner waits for its next job.
struct Mailbox<J> {
    job: Cell<Option<J>>,
    waker: Cell<Option<Waker>>,
}

impl<J> Runners<J> {
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(Self {
            idle: RefCell::new(Vec::new()),
            backlog: RefCell::new(VecDeque::new()),
            started: Cell::new(0),
            pending: Cell::new(0),
        })
    }

    /// Whether the next job must wait in the backlog ([`Self::hold`]):
    /// when others already wait there (oldest first), or when the jobs
    /// offered and not yet taken up will use every connection free now
    /// (`free`, asked only then; `None` when the transport has none to
    /// wait for). Only ever while a runner is busy, as only a runner
    /// finishing empties the backlog.
    pub(crate) fn must_hold(&self, free: impl FnOnce() -> Option<usize>) -> bool {
        if !self.backlog.borrow().is_empty() {
            return true;
        }
        let busy = self.started.get() - self.idle.borrow().len();
        busy > 0 && free().is_some_and(|free| free <= self.pending.get())
    }

    /// Jobs wait in the backlog for a connection to free up.
    pub(crate) fn backlogged(&self) -> bool {
        !self.backlog.borrow().is_empty()
    }

    /// Jobs offered to runners that have not taken them up yet.
    pub(crate) fn pending(&self) -> usize {
        self.pending.get()
    }

    /// Puts `job` at the back of the backlog; call only when
    /// [`Self::must_hold`] says so.
    pub(crate) fn hold(&self, job: J) {
        self.backlog.borrow_mut().push_back(job);
    }

    /// Gives `job` to an idle runner and wakes it. When every runner is
    /// busy, it returns the job seated for a new runner, which the caller
    /// starts with [`Self::serve`].
    pub(crate) fn offer(&self, job: J) -> Option<Seat<J>> {
        self.pending.set(self.pending.get() + 1);
        let Some(mailbox) = self.idle.borrow_mut().pop() else {
            self.started.set(self.started.get() + 1);
            return Some(Seat(Rc::new(Mailbox {
                job: Cell::new(Some(job)),
                waker: Cell::new(None),
            })));
        };
        mailbox.job.set(Some(job));
        if let Some(waker) = mailbox.waker.take() {
            waker.wake();
        }
        None
    }

    /// Runs `work` on the job waiting at `seat` and then on every job
    /// offered to this runner, or waiting in the backlog when it finishes
    /// one, for as long as the task lives: it ends when the worker's
    /// runtime drops it. Between jobs the runner is idle, last in first
    /// out, so the runners in use stay warm in the cache.
    ///
    /// The first job comes through the seat, not as an argument: an async
    /// function keeps its arguments' room for its whole life, so a job
    /// passed in would be kept twice over by every runner.
    pub(crate) async fn serve<F, Fut>(self: Rc<Self>, seat: Seat<J>, mut work: F)
    where
        F: FnMut(J) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mailbox = seat.0;
        loop {
            let mut job = poll_fn(|cx| match mailbox.job.take() {
                Some(job) => Poll::Ready(job),
                None => {
                    mailbox.waker.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            })
            .await;
            self.pending.set(self.pending.get() - 1);
            loop {
                work(job).await;
                let next = self.backlog.borrow_mut().pop_front();
                match next {
                    Some(next) => job = next,
                    None => break,
                }
            }
            self.idle.borrow_mut().push(mailbox.clone());
        }
    }

    /// Runners waiting for a job.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type Jobs = Rc<RefCell<Vec<u32>>>;

    /// Starts a runner at `seat` whose jobs `(n, ms)` note `n` in `taken`
    /// when they are taken up, then take `ms`.
    fn start(runners: &Rc<Runners<(u32, u64)>>, seat: Seat<(u32, u64)>, taken: &Jobs) {
        let taken = taken.clone();
        tokio::task::spawn_local(runners.clone().serve(seat, move |(n, ms)| {
            taken.borrow_mut().push(n);
            async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }));
    }

    /// Jobs that overlap get a runner each; once they are done, later
    /// jobs reuse those runners, and no job is lost or run twice.
    #[tokio::test]
    async fn busy_runners_are_added_and_idle_ones_reused() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let runners = Runners::new();
                let done = Rc::new(RefCell::new(Vec::new()));
                let started = Rc::new(Cell::new(0));
                let offer = |job: (u32, u64)| {
                    if let Some(seat) = runners.offer(job) {
                        started.set(started.get() + 1);
                        start(&runners, seat, &done);
                    }
                };
                // Three at once: three runners.
                for n in 0..3 {
                    offer((n, 20));
                }
                tokio::time::sleep(Duration::from_millis(60)).await;
                assert_eq!(started.get(), 3);
                assert_eq!(runners.idle(), 3);
                // Ten one after another: the same runners, none added.
                for n in 3..13 {
                    offer((n, 1));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert_eq!(started.get(), 3);
                assert_eq!(runners.idle(), 3);
                let mut seen = done.borrow().clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..13).collect::<Vec<_>>());
            })
            .await;
    }

    /// A held job goes to the next runner to finish, oldest first, with no
    /// runner started for it; once the backlog is empty, runners go idle
    /// again. Jobs are held only while one is busy, so none is stranded.
    #[tokio::test]
    async fn held_jobs_go_to_the_next_runner_to_finish_in_order() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let runners = Runners::new();
                let done = Rc::new(RefCell::new(Vec::new()));
                let mut started = 0;
                // Nothing busy: never held, whatever the connections say.
                assert!(!runners.must_hold(|| Some(0)));
                for n in 0..2 {
                    if let Some(seat) = runners.offer((n, 30)) {
                        started += 1;
                        start(&runners, seat, &done);
                    }
                }
                // Two offered and not yet taken up, two connections free:
                // the next one would wait, so it is held.
                assert!(runners.must_hold(|| Some(2)));
                assert!(!runners.must_hold(|| Some(3)));
                assert!(!runners.must_hold(|| None), "nothing to wait for");
                for n in 2..7 {
                    assert!(runners.must_hold(|| Some(0)));
                    runners.hold((n, 1));
                }
                assert!(runners.must_hold(|| Some(5)), "others wait already");
                tokio::time::sleep(Duration::from_millis(80)).await;
                assert_eq!(started, 2, "no runner started for held jobs");
                assert_eq!(runners.idle(), 2);
                assert!(!runners.must_hold(|| Some(0)), "all idle again");
                // Noted as taken up, before any wait: the held ones in order.
                assert_eq!(*done.borrow(), (0..7).collect::<Vec<_>>(), "oldest first");
            })
            .await;
    }
}
