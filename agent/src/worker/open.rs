//! The open model: arrivals on a schedule that ignores the server, each
//! awaited at its absolute intended instant, so a slow moment never shifts
//! the rest of the schedule.

use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::partition::{AgentSlice, Interleave};
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::vocab::UnsentReason;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::direct::Direct;
use super::driver::{sleep_precisely, Arrival, Driver, Sleep, Waited, WATCHED_SLEEP};
use super::flows::Flows;
use super::freeze::FreezeWatch;
use super::plan::{Handovers, ScenarioPlan, WorkerPlan};
use super::shared::Shared;
use super::sources::{handover_news, Sources};
use super::subscribers::Subscribers;
use super::tasks::Tasks;
use super::ticks::Ticks;
use crate::timer::PreciseTimer;

/// How far into its schedule a worker looks to count the connections to
/// open before its start: its arrivals due in the first 10 ms, about as
/// many as would otherwise each open one at once.
const OPEN_AHEAD: Duration = Duration::from_millis(10);
/// How many arrivals in a row the loop may send without looking at the
/// stop (which takes a lock) when it does not wait between them.
const STOP_CHECK: u32 = 64;

/// Sends this worker's arrivals of an open scenario, through the driver
/// that suits it. Fails with the gap when the worker finds it was frozen;
/// it then fires nothing more.
pub(super) async fn run(
    plan: &WorkerPlan,
    sc: &ScenarioPlan,
    schedule: &ArrivalSchedule,
    interleave: &Arc<Interleave>,
    handovers: Handovers,
    shared: &Shared,
    stop: &CancellationToken,
) -> Result<(), Duration> {
    // Wake-ups may be ticks (blind sleeps, see the drivers) only where
    // every answer's time is its arrival's whenever it is read, and nothing
    // else on the thread needs it awake. The loop's own pool stamps every
    // answer, TLS or not; through the tasks, only plain TCP's are stamped.
    let ticks = shared.alone
        && shared.sse.is_none()
        && shared.flow.is_none()
        && shared.client.stamps_answers()
        && (shared.direct.is_some() || sc.mix.plain_http());
    let args = (plan, sc, schedule, interleave, handovers, shared, stop);
    match (&shared.direct, &shared.sse, &shared.flow) {
        (_, _, Some(hook)) => open_loop(args, Flows::new(shared, hook, stop)).await,
        (Some(pool), _, None) => open_loop(args, Direct::new(pool, shared, stop, ticks)).await,
        (None, Some(hook), None) => open_loop(args, Subscribers::new(shared, hook, stop)).await,
        (None, None, None) => open_loop(args, Tasks::new(shared, stop, ticks)).await,
    }
}

type Args<'a> = (
    &'a WorkerPlan,
    &'a ScenarioPlan,
    &'a ArrivalSchedule,
    &'a Arc<Interleave>,
    Handovers,
    &'a Shared,
    &'a CancellationToken,
);

async fn open_loop<D: Driver>(args: Args<'_>, mut driver: D) -> Result<(), Duration> {
    let (plan, sc, schedule, interleave, mut handovers, shared, stop) = args;
    let slice = match AgentSlice::new(schedule, interleave, plan.agent_index) {
        Ok(slice) => slice,
        Err(e) => {
            tracing::error!("cannot take my slice: {e}");
            return Ok(());
        }
    };
    let me = (plan.agent_index, plan.worker_index, plan.workers);
    let offset_ns = sc.start.saturating_duration_since(plan.start).as_nanos() as u64;
    let mut sources = Sources::new(schedule, interleave, &slice, me, offset_ns);
    // Hand-overs can come until the schedule ends, even after this
    // worker's own arrivals are done.
    let end = sc.start + Duration::from_nanos(schedule.duration_ns());
    let timer = PreciseTimer::new()
        .map_err(|e| tracing::warn!("no precise timer ({e}); arrivals may lag up to 1 ms"))
        .ok();
    let mut ticks = Ticks::new(Instant::now(), plan.wake_quantum);
    // When the loop should be running again at the latest, had nothing
    // frozen it.
    let mut due = Instant::now();
    let mut watch = FreezeWatch::new();
    if let Some(uri) = sc.mix.sole_origin() {
        if shared.sse.is_none() && sc.start > Instant::now() {
            let horizon = OPEN_AHEAD.as_nanos() as u64;
            let needed = slice
                .indexed_arrivals()
                .take_while(|&(_, offset)| offset < horizon)
                .enumerate()
                .filter(|(n, _)| n % plan.workers == plan.worker_index)
                .take(plan.client.connections)
                .count();
            tokio::select! {
                _ = driver.open_ahead(uri, needed) => {}
                _ = tokio::time::sleep_until(sc.start) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
    let news = handovers.borrow_and_update().clone();
    sources.absorb(&news);
    // Arrivals since the stop was last looked at.
    let mut unchecked = 0u32;
    loop {
        if handovers.has_changed().unwrap_or(false) {
            let news = handovers.borrow_and_update().clone();
            sources.absorb(&news);
        }
        if unchecked.is_multiple_of(STOP_CHECK) && stop.is_cancelled() {
            break;
        }
        unchecked = unchecked.wrapping_add(1);
        let mut now = Instant::now();
        let gap = now.saturating_duration_since(due);
        if watch.frozen(gap, now) {
            return Err(gap);
        }
        watch.tick(now);
        let Some((stream, (seq, offset_ns))) = sources.peek() else {
            if now >= end {
                break;
            }
            due = end;
            tokio::select! {
                _ = tokio::time::sleep_until(end) => {}
                _ = handover_news(&mut handovers) => due = Instant::now(),
                _ = driver.news() => due = Instant::now(),
                _ = stop.cancelled() => break,
            }
            driver.drive();
            continue;
        };
        let intended = sc.start + Duration::from_nanos(offset_ns);
        if intended > now {
            let wake = ticks.wake(intended);
            // An arrival sent at its own instant should leave at it; one
            // held back to the quantum is late by design already.
            let exact = wake == intended;
            if wake > now + WATCHED_SLEEP {
                // A long wait listens for hand-overs, whose arrivals may
                // come first; then the next one is picked afresh.
                due = wake;
                tokio::select! {
                    _ = sleep_precisely(timer.as_ref(), wake, exact) => {}
                    _ = handover_news(&mut handovers) => due = Instant::now(),
                    _ = driver.news() => due = Instant::now(),
                    _ = stop.cancelled() => break,
                }
                driver.drive();
                continue;
            }
            let sleep = Sleep {
                timer: timer.as_ref(),
                wake,
                exact,
            };
            let waited = driver.wait(sleep, ticks.due(intended)).await;
            if waited == Waited::Stopped || stop.is_cancelled() {
                break;
            }
            now = Instant::now();
            if waited == Waited::Cut {
                ticks.cut();
            } else {
                ticks.woke(wake, now);
                let gap = now.saturating_duration_since(wake);
                if watch.frozen(gap, now) {
                    return Err(gap);
                }
            }
            unchecked = 1;
        }
        if driver.catch_up().await {
            now = Instant::now();
        }
        sources.take(stream);
        // `now` is when this arrival goes out: the rest of this pass is not
        // worth another reading of the clock.
        due = now;
        let interval = shared.interval_of(intended);
        let lag = now.saturating_duration_since(intended);
        if lag > plan.max_lag {
            shared
                .recorder
                .borrow_mut()
                .arrival_unsent(interval, UnsentReason::Late);
            continue;
        }
        if shared.worker_in_flight.get() >= plan.max_in_flight {
            shared
                .recorder
                .borrow_mut()
                .arrival_unsent(interval, UnsentReason::ConcurrencyLimit);
            continue;
        }
        let arrival = Arrival {
            seq,
            interval,
            intended,
            now,
            lag,
        };
        driver.submit(arrival).await;
    }
    Ok(())
}
