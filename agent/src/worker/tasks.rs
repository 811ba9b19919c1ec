//! The driver that hands each request to a task (a runner) that sends it
//! through the worker's transport and records its own outcome: any
//! protocol, any number of scenarios on the thread.

use std::rc::Rc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::shared::{Request, Shared};
use super::ticks::TICK_SLACK;
use crate::client::Queued;
use crate::runners::{Runners, Seat};

/// One arrival's request, as a runner takes it, with its kind (its index
/// in the mix), its intended instant, when it was sent, and its place in
/// the worker's queue if it waited there for a connection.
type Job = (Request, usize, Instant, Instant, Option<Queued>);

/// Sends through request tasks that stay for the next arrival (see
/// [`crate::runners`]).
pub(super) struct Tasks<'a> {
    shared: &'a Shared,
    stop: &'a CancellationToken,
    runners: Rc<Runners<Job>>,
    /// Whether its coalesced wake-ups are ticks (see [`Self::tick`]).
    ticks: bool,
    /// A tick slept blind and the answers that came meanwhile are not read
    /// yet.
    unread: bool,
}

impl<'a> Tasks<'a> {
    pub(super) fn new(shared: &'a Shared, stop: &'a CancellationToken, ticks: bool) -> Self {
        Self {
            shared,
            stop,
            runners: Runners::new(),
            ticks,
            unread: false,
        }
    }

    /// A tick: once the requests just fired are written, the thread sleeps
    /// until the wake-up without listening to its sockets, and the answers
    /// that came meanwhile are read in one pass after the next sends. An
    /// answer's time is the kernel's stamp of its arrival
    /// ([`crate::client::Transport::stamps_answers`]), so reading late costs
    /// the measurement nothing and saves a wake-up per burst of answers;
    /// reading after the sends keeps the reads out of their lag.
    ///
    /// It waits the usual way instead while arrivals wait for a connection
    /// (the answers that free one must be read as they come), while an
    /// answer too large for its socket may be under way, or with less than
    /// [`TICK_SLACK`] left. False when stopped meanwhile.
    async fn tick(&self, sleep: Sleep<'_>) -> bool {
        settle(&self.runners, false).await;
        if self.runners.backlogged()
            || self.shared.client.answers_need_reading()
            || sleep.wake.saturating_duration_since(Instant::now()) < TICK_SLACK
        {
            return sleep.until(self.stop).await;
        }
        sleep.blind().await;
        true
    }
}

impl Driver for Tasks<'_> {
    async fn submit(&mut self, arrival: Arrival) -> Submitted {
        let shared = self.shared;
        let Some(request) = shared.take(&arrival) else {
            return Submitted::Unrendered;
        };
        let (intended, now) = (arrival.intended, arrival.now);
        let kind = shared.mix.kind(arrival.seq);
        let runners = &self.runners;
        if runners.must_hold(|| shared.client.free_connections()) {
            runners.hold((request, kind, intended, now, Some(shared.client.queue())));
        } else if let Some(seat) = runners.offer((request, kind, intended, now, None)) {
            tokio::task::spawn_local(runner(shared.clone(), runners.clone(), seat));
        }
        Submitted::Sent
    }

    async fn wait(&mut self, sleep: Sleep<'_>, _due: Option<Instant>) -> Waited {
        // Only coalesced wake-ups tick: they come at most a quantum apart,
        // so the thread never sleeps blind for long.
        let woke = if self.ticks && !sleep.exact {
            self.unread = true;
            self.tick(sleep).await
        } else {
            sleep.until(self.stop).await
        };
        Waited::from_woke(woke)
    }

    async fn catch_up(&mut self) -> bool {
        if !(self.unread && self.shared.client.pool_full()) {
            return false;
        }
        settle(&self.runners, true).await;
        self.unread = false;
        true
    }

    async fn open_ahead(&self, uri: &http::Uri, needed: usize) {
        self.shared.client.open_ahead(uri, needed).await
    }
}

/// A request task that stays for the next arrival (see [`crate::runners`]).
async fn runner(shared: Shared, runners: Rc<Runners<Job>>, seat: Seat<Job>) {
    runners
        .serve(seat, |(request, kind, intended, sent_at, queued)| {
            shared.exchange(request, kind, intended, sent_at, queued)
        })
        .await;
}

/// Lets the worker's tasks run before the loop goes on: the runners it gave
/// a request to, and with `answers` those whose answers have come in.
///
/// The loop is the worker's main future, which the local set polls before
/// its tasks, and the sockets are polled after those: so it yields until
/// every runner given a request has taken it up (or a blind sleep would
/// hold the rest back a whole tick), then, for the answers, once more for
/// the runners the sockets woke. Only a full pool waits for its answers:
/// the runners woken meanwhile would otherwise go before the loop's next
/// arrivals on every tick.
async fn settle(runners: &Runners<Job>, answers: bool) {
    loop {
        tokio::task::yield_now().await;
        if runners.pending() == 0 {
            break;
        }
    }
    if answers {
        tokio::task::yield_now().await;
    }
}
