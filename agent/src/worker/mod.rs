//! The scheduler: one thread per worker, each with its own single-threaded
//! runtime, HTTP pool and recorders, sending its share of the agent's slice
//! of every scenario.
//!
//! Thread-per-core keeps the request path free of locks and atomics: a
//! request task records into its worker's recorder through a `RefCell`, and
//! workers only meet at the snapshot channel once per interval. Each open
//! arrival is awaited at its *absolute* intended instant (`start + offset`),
//! so a slow moment never shifts the rest of the schedule, and latency is
//! taken from that intended instant, so queueing anywhere shows up in it.
//!
//! The parts: `plan` (what a worker is given), `open` and `closed` (the
//! two models), `driver` (the send seam they use, with `direct`, `tasks`
//! `subscribers` and `flows` behind it), `ticks` (coalesced wake-ups), `freeze` (a
//! frozen worker stops), `sources` (its arrivals, hand-overs included),
//! `shared` (what a scenario's tasks share, and where outcomes are
//! recorded) and `flush` (closing intervals).

mod closed;
mod direct;
mod driver;
mod flows;
mod flush;
mod freeze;
mod open;
mod plan;
mod shared;
mod sources;
mod subscribers;
mod tasks;
mod ticks;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use loadfleet_proto::rng::SplitMix64;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Transport;
use crate::recorder::Recorder;
use crate::sse::hook::Hook;

pub(crate) use plan::{Handovers, Model, ScenarioPlan, WorkerEvent, WorkerPlan};

use direct::{direct_pool, drive_pool, pool_news};
use flush::{flush_last, flush_loop, PoolFigures};
use shared::Shared;

/// Runs a worker to completion on the current (single-threaded) runtime.
pub(crate) async fn run(
    plan: WorkerPlan,
    events: UnboundedSender<WorkerEvent>,
    stop: CancellationToken,
    handovers: Handovers,
) {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(run_scenarios(plan, events, stop, handovers))
        .await;
}

async fn run_scenarios(
    mut plan: WorkerPlan,
    events: UnboundedSender<WorkerEvent>,
    stop: CancellationToken,
    handovers: Handovers,
) {
    let interval_ns = plan.interval.as_nanos().max(1) as u64;
    let scenarios = std::mem::take(&mut plan.scenarios);
    let alone = scenarios.len() == 1;
    let client = Transport::new(plan.client.clone());
    let plan = Rc::new(plan);
    let mut tasks = Vec::new();
    // A sole scenario runs as this future itself, not as a task: the local
    // set polls it before each batch of tasks, where a task would wait its
    // turn behind every request task woken meanwhile, and its arrivals
    // would leave that much later.
    let mut main: Option<Pin<Box<dyn Future<Output = ()>>>> = None;
    let mut flushers = Vec::new();
    let mut states = Vec::new();
    let worker_in_flight = Rc::new(Cell::new(0u64));
    for sc in scenarios {
        let shared = Shared {
            recorder: Rc::new(RefCell::new(
                Recorder::new(sc.index)
                    .split_by_request(sc.mix.kinds() > 1 || sc.flow.is_some())
                    .flows(sc.flow.is_some()),
            )),
            in_flight: Rc::new(Cell::new(0)),
            held: Rc::new(Cell::new(0)),
            worker_in_flight: worker_in_flight.clone(),
            client: client.clone(),
            mix: sc.mix.clone(),
            sse: sc.sse.as_ref().map(|spec| {
                Rc::new(Hook::new(
                    spec.clone(),
                    &plan.client,
                    plan.start,
                    interval_ns,
                ))
            }),
            flow: sc
                .flow
                .as_ref()
                .map(|spec| Rc::new(crate::flow::hook::FlowHook::new(spec.clone()))),
            rng: Rc::new(RefCell::new(SplitMix64::new(
                sc.seed ^ ((plan.agent_index as u64) << 32) ^ plan.worker_index as u64,
            ))),
            common_start: plan.start,
            interval_ns,
            scenario_start: sc.start,
            warmup: sc.warmup,
            duration: sc.duration,
            alone,
            direct: direct_pool(&sc, &client, alone),
        };
        // The pool is the worker's: its saturated time goes with the first
        // scenario's snapshots only, so adding snapshots up counts it once.
        let figures = PoolFigures::of(shared.direct.as_ref(), &client);
        let pool = states.is_empty().then(|| (figures, plan.workers));
        flushers.push(tokio::task::spawn_local(flush_loop(
            shared.recorder.clone(),
            shared.in_flight.clone(),
            pool,
            shared.sse.clone(),
            plan.start,
            plan.interval,
            events.clone(),
        )));
        states.push(shared.clone());
        let (plan, stop, events) = (plan.clone(), stop.clone(), events.clone());
        let handovers = handovers.clone();
        let work = async move {
            match &sc.model {
                Model::Open {
                    schedule,
                    interleave,
                } => {
                    let frozen =
                        open::run(&plan, &sc, schedule, interleave, handovers, &shared, &stop)
                            .await;
                    if let Err(gap) = frozen {
                        let _ = events.send(WorkerEvent::Frozen(gap));
                        return;
                    }
                }
                Model::Closed {
                    population,
                    interleave,
                    max_clients,
                } => {
                    let clients = (interleave, *max_clients);
                    closed::run(&plan, population, clients, handovers, &shared, &stop).await
                }
            }
            drain(&shared, plan.drain, &stop).await;
        };
        if alone {
            main = Some(Box::pin(work));
        } else {
            tasks.push(tokio::task::spawn_local(work));
        }
    }
    if let Some(main) = main {
        main.await;
    }
    for t in tasks {
        if let Err(e) = t.await {
            tracing::error!("a scenario task failed: {e}");
        }
    }
    for f in flushers {
        f.abort();
    }
    flush_last(
        &states,
        &client,
        plan.start,
        interval_ns,
        plan.workers,
        &events,
    );
}

/// Gives the requests in flight their chance to complete (and count) for
/// up to `drain`, unless stopped. Subscribers hold past the last arrival,
/// until the scenario's end (its schedule plus the hold), and the drain
/// counts from there.
async fn drain(shared: &Shared, drain: Duration, stop: &CancellationToken) {
    let held = match shared.sse {
        Some(_) => shared.scenario_start + shared.duration,
        None => Instant::now(),
    };
    let deadline = Instant::now().max(held) + drain;
    let mut done = Vec::new();
    while shared.in_flight.get() > 0 && Instant::now() < deadline && !stop.is_cancelled() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = pool_news(shared.direct.as_ref()) => {}
            _ = stop.cancelled() => {}
        }
        if let Some(direct) = &shared.direct {
            drive_pool(direct, shared, &mut done);
        }
    }
}
