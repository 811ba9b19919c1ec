//! The driver for a loop that drives its own pool: no task per request, the
//! answers read on the loop's own wake-ups. Used where the agent's cost per
//! request matters most: the worker's only scenario, open model, no
//! subscription, every request HTTP/1.1 to one host, over plain TCP or TLS.

use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::plan::{Model, ScenarioPlan};
use super::shared::{Sent, Shared};
use super::ticks::TICK_SLACK;

/// Longest a ticking loop keeps the worker's tasks waiting: they flush
/// each interval's figures and take hand-overs, neither of which a few
/// milliseconds delay; dials and queued requests are waited for driving
/// the pool, which turns at once.
const TOKIO_TURN: Duration = Duration::from_millis(10);
use crate::client::{DirectPool, Exchanged, Fixed, Outgoing, Transport};

/// The loop's own pool for `sc`, when it can use one (see the module doc).
pub(super) fn direct_pool(
    sc: &ScenarioPlan,
    client: &Transport,
    alone: bool,
) -> Option<Rc<DirectPool<Sent>>> {
    if !alone || sc.sse.is_some() || sc.flow.is_some() || !matches!(sc.model, Model::Open { .. }) {
        return None;
    }
    match client.direct(sc.mix.sole_origin()?)? {
        Ok(pool) => Some(Rc::new(pool)),
        Err(e) => {
            tracing::warn!("requests go through tasks: no epoll set for the open loop ({e})");
            None
        }
    }
}

/// Sends into the loop's own pool and takes up what it finished.
pub(super) struct Direct<'a> {
    pool: &'a Rc<DirectPool<Sent>>,
    shared: &'a Shared,
    stop: &'a CancellationToken,
    /// Whether its short waits are ticks (see [`Self::tick`]).
    ticks: bool,
    /// A tick slept blind and the answers that came meanwhile are not read
    /// yet.
    unread: bool,
    /// Outcomes the pool gave, to record.
    done: Vec<(Sent, Exchanged)>,
    /// When the next tick gives the worker's tasks a turn.
    turn_at: Instant,
    /// When the loop last woke from a sleep (see
    /// [`DirectPool::read_on_wire`]).
    woke: Instant,
    /// The pool's rendering of each request kind that never changes.
    fixed: Vec<Option<Fixed>>,
}

impl<'a> Direct<'a> {
    pub(super) fn new(
        pool: &'a Rc<DirectPool<Sent>>,
        shared: &'a Shared,
        stop: &'a CancellationToken,
        ticks: bool,
    ) -> Self {
        Self {
            pool,
            shared,
            stop,
            ticks,
            unread: false,
            done: Vec::new(),
            turn_at: Instant::now(),
            woke: Instant::now(),
            fixed: Vec::new(),
        }
    }

    /// A tick: reads the answers that came since the last one, and sleeps
    /// blind until the wake-up, exact ones included. An answer's time is
    /// the kernel's stamp of its arrival, deadlines included, so reading
    /// late costs the measurement nothing and saves a wake-up per burst of
    /// answers. The worker's tasks (the flush, hand-overs) get a turn at
    /// most every [`TOKIO_TURN`]: a turn costs a look by tokio's reactor,
    /// and between turns a tick reads the few exchanges on the wire blind
    /// ([`DirectPool::read_on_wire`]) or looks at the pool's own set once.
    ///
    /// It waits driving the pool instead with less than [`TICK_SLACK`]
    /// left, while requests wait for a connection (the answers that free one
    /// must be read as they come), or while an answer too large for its
    /// socket may be under way (its server would stall until the tick).
    /// When `due`, the arrival waited for, fell due while it read, it ends
    /// at once ([`Waited::Cut`]) so that arrival is not nearly a quantum
    /// late; the loop allows that once per tick.
    async fn tick(&mut self, sleep: Sleep<'_>, due: Option<Instant>) -> Waited {
        let now = Instant::now();
        if now >= self.turn_at {
            // Also has tokio's reactor look at the sockets, so that the
            // pool knows without a system call of its own whether any
            // answer came.
            // On a grid, so that turns come as often whatever the rate
            // of ticks; a stall restarts it instead of turning back to back.
            self.turn_at += TOKIO_TURN;
            if self.turn_at <= now {
                self.turn_at = now + TOKIO_TURN;
            }
            tokio::task::yield_now().await;
            if self.pool.has_news() {
                self.drive();
            }
        } else if self.pool.read_on_wire((now, self.woke), &mut self.done) {
            take_up(self.pool, self.shared, &mut self.done);
        } else {
            self.drive();
        }
        let now = Instant::now();
        if due.is_some_and(|at| at <= now) {
            return Waited::Cut;
        }
        if self.pool.queued()
            || self.pool.answers_need_reading()
            || sleep.wake.saturating_duration_since(now) < TICK_SLACK
        {
            return Waited::from_woke(self.wait_driving(sleep).await);
        }
        sleep.blind().await;
        self.woke = Instant::now();
        Waited::Woke
    }

    /// Waits for the wake-up, taking up the pool's news as they come; false
    /// when stopped meanwhile.
    async fn wait_driving(&mut self, sleep: Sleep<'_>) -> bool {
        let pool = self.pool;
        let mut sleep = std::pin::pin!(sleep.until(self.stop));
        loop {
            tokio::select! {
                biased;
                waited = &mut sleep => {
                    // A wait this short watches no deadline of its own (a
                    // timer entry per wake-up): one that passed is taken up
                    // now.
                    if pool.next_deadline().is_some_and(|at| at <= Instant::now()) {
                        self.drive();
                    }
                    self.woke = Instant::now();
                    return waited;
                }
                _ = pool.news() => self.drive(),
            }
        }
    }
}

impl Driver for Direct<'_> {
    async fn submit(&mut self, arrival: Arrival) -> Submitted {
        let Arrival {
            seq,
            interval,
            intended,
            now,
            lag,
        } = arrival;
        let (shared, pool) = (self.shared, self.pool);
        let request = match shared.mix.fixed_kind(seq) {
            Some(kind) => fixed_request(&mut self.fixed, kind, || {
                shared.build_or_count(seq, interval).map(|r| pool.fix(r))
            })
            .map(Outgoing::Fixed),
            None => shared.build_or_count(seq, interval).map(Outgoing::built),
        };
        let Some(request) = request else {
            return Submitted::Unrendered;
        };
        let kind = shared.mix.kind(seq);
        // Counted before the outcomes it may have ended with at once.
        let out = pool.submit(request, now, (intended, now, kind), &mut self.done);
        shared.hand_over(interval, lag, out);
        take_up(pool, shared, &mut self.done);
        Submitted::Sent
    }

    fn drive(&mut self) {
        drive_pool(self.pool, self.shared, &mut self.done);
    }

    async fn news(&self) {
        pool_news(Some(self.pool)).await
    }

    async fn wait(&mut self, sleep: Sleep<'_>, due: Option<Instant>) -> Waited {
        if self.ticks {
            self.unread = true;
            return self.tick(sleep, due).await;
        }
        Waited::from_woke(self.wait_driving(sleep).await)
    }

    async fn catch_up(&mut self) -> bool {
        if !(self.unread && self.pool.full()) {
            return false;
        }
        self.drive();
        self.unread = false;
        true
    }

    async fn open_ahead(&self, _uri: &http::Uri, needed: usize) {
        self.pool.open_ahead(needed).await
    }
}

/// Waits until the loop's own pool has something to take up: an answer,
/// a finished dial, a request whose time ran out. Never, without a pool.
pub(super) async fn pool_news(direct: Option<&Rc<DirectPool<Sent>>>) {
    let Some(direct) = direct else {
        return std::future::pending().await;
    };
    match direct.next_deadline() {
        Some(at) => {
            tokio::select! {
                _ = direct.news() => {}
                _ = tokio::time::sleep_until(at) => {}
            }
        }
        None => direct.news().await,
    }
}

/// Takes up what the loop's own pool has and records the outcomes.
pub(super) fn drive_pool(
    direct: &Rc<DirectPool<Sent>>,
    shared: &Shared,
    done: &mut Vec<(Sent, Exchanged)>,
) {
    direct.drive(Instant::now(), done);
    take_up(direct, shared, done);
}

/// Counts sent what left the pool's queue, then records the outcomes: in
/// that order, as a request that went out and ended at once did.
fn take_up(direct: &DirectPool<Sent>, shared: &Shared, done: &mut Vec<(Sent, Exchanged)>) {
    direct.take_went_out(|(intended, _, _)| shared.went_out(intended));
    for ((intended, sent_at, kind), exchanged) in done.drain(..) {
        shared.record(&exchanged, kind, intended, sent_at);
    }
}

/// The request of `kind`, rendered by `render` the first time only.
fn fixed_request(
    kept: &mut Vec<Option<Fixed>>,
    kind: usize,
    render: impl FnOnce() -> Option<Fixed>,
) -> Option<Fixed> {
    if kept.len() <= kind {
        kept.resize(kind + 1, None);
    }
    if kept[kind].is_none() {
        kept[kind] = render();
    }
    kept[kind].clone()
}
