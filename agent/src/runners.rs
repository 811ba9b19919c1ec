//! Request tasks that outlive their request: a worker hands each arrival to
//! an idle one instead of spawning a task for it.
//!
//! A task per arrival costs, every time, an aligned allocation for the task,
//! one for its (boxed, kilobyte-sized) future, its place in the runtime's
//! task list and its teardown; at 20,000 arrivals a second that was several
//! per cent of the agent's CPU, and the large allocations made glibc
//! consolidate its free lists on every request (BENCHMARKS.md). A runner is
//! allocated once, when every existing one is busy, and then waits in the
//! idle list between requests, so the worker holds as many as it ever had
//! in flight at once, never more.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The idle runners of one worker's scenario, each waiting for a job `J`.
pub struct Runners<J> {
    idle: RefCell<Vec<Rc<Mailbox<J>>>>,
}

/// A new runner's mailbox, holding its first job (see [`Runners::serve`]).
pub struct Seat<J>(Rc<Mailbox<J>>);

/// Where one runner waits for its next job.
struct Mailbox<J> {
    job: Cell<Option<J>>,
    waker: Cell<Option<Waker>>,
}

impl<J> Runners<J> {
    pub fn new() -> Rc<Self> {
        Rc::new(Self {
            idle: RefCell::new(Vec::new()),
        })
    }

    /// Gives `job` to an idle runner and wakes it. When every runner is
    /// busy, it returns the job seated for a new runner, which the caller
    /// starts with [`Self::serve`].
    pub fn offer(&self, job: J) -> Option<Seat<J>> {
        let Some(mailbox) = self.idle.borrow_mut().pop() else {
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
    /// offered to this runner, for as long as the task lives: it ends when
    /// the worker's runtime drops it. Between jobs the runner is idle, last
    /// in first out, so the runners in use stay warm in the cache.
    ///
    /// The first job comes through the seat, not as an argument: an async
    /// function keeps its arguments' room for its whole life, and a job
    /// (a request) kept twice over that way cost each runner about 500
    /// bytes, 5 MB at 10,000 in flight.
    pub async fn serve<F, Fut>(self: Rc<Self>, seat: Seat<J>, mut work: F)
    where
        F: FnMut(J) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mailbox = seat.0;
        loop {
            let job = poll_fn(|cx| match mailbox.job.take() {
                Some(job) => Poll::Ready(job),
                None => {
                    mailbox.waker.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            })
            .await;
            work(job).await;
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
                        let done = done.clone();
                        tokio::task::spawn_local(runners.clone().serve(seat, move |(n, ms)| {
                            let done = done.clone();
                            async move {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                                done.borrow_mut().push(n);
                            }
                        }));
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
}
