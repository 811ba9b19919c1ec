//! The scheduler: one thread per worker, each with its own single-threaded
//! runtime, HTTP pool and recorder, sending its share of the agent's slice.
//!
//! Thread-per-core keeps the request path free of locks and atomics: a
//! request task records into its worker's recorder through a `RefCell`, and
//! workers only meet at the snapshot channel once per interval. Each arrival
//! is awaited at its *absolute* intended instant (`start + offset`), so a
//! slow moment never shifts the rest of the schedule, and latency is taken
//! from that intended instant, so queueing anywhere shows up in it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::partition::{AgentSlice, Interleave};
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::v1;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::http::HttpClient;
use crate::recorder::Recorder;

/// Sleeps longer than this also watch for a stop, so a long pause in the
/// schedule cannot delay stopping; shorter ones just check the flag after.
const WATCHED_SLEEP: Duration = Duration::from_millis(20);
/// How early the coarse sleep ends: tokio's timer wheel has 1 ms slots and
/// the wake-up itself can come a little after the slot.
const TIMER_GRANULARITY: Duration = Duration::from_millis(2);

/// What a worker reports to the session.
pub enum WorkerEvent {
    /// Closed intervals, ready to stream.
    Snapshots(Vec<v1::Snapshot>),
    /// The worker is done; requests it abandoned while draining.
    Done { in_flight_at_end: u64 },
}

/// Everything one worker needs; shared parts are behind `Arc`.
#[derive(Clone)]
pub struct WorkerPlan {
    pub schedule: Arc<ArrivalSchedule>,
    pub interleave: Arc<Interleave>,
    pub agent_index: usize,
    pub worker_index: usize,
    pub workers: usize,
    pub start: Instant,
    pub interval: Duration,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain: Duration,
    pub max_in_flight: u64,
    pub max_lag: Duration,
    pub client: HttpClient,
}

/// Runs a worker to completion on the current (single-threaded) runtime.
pub async fn run(plan: WorkerPlan, events: UnboundedSender<WorkerEvent>, stop: CancellationToken) {
    let local = tokio::task::LocalSet::new();
    local.run_until(schedule_loop(plan, events, stop)).await;
}

async fn schedule_loop(
    plan: WorkerPlan,
    events: UnboundedSender<WorkerEvent>,
    stop: CancellationToken,
) {
    let recorder = Rc::new(RefCell::new(Recorder::new()));
    let in_flight = Rc::new(Cell::new(0u64));
    let interval_ns = plan.interval.as_nanos().max(1) as u64;

    let flusher = tokio::task::spawn_local(flush_loop(
        recorder.clone(),
        in_flight.clone(),
        plan.start,
        plan.interval,
        events.clone(),
    ));

    let slice = match AgentSlice::new(&plan.schedule, &plan.interleave, plan.agent_index) {
        Ok(slice) => slice,
        Err(e) => {
            tracing::error!("cannot take my slice: {e}");
            let _ = events.send(WorkerEvent::Done {
                in_flight_at_end: 0,
            });
            return;
        }
    };
    let mine = slice
        .arrivals()
        .enumerate()
        .filter(|(n, _)| n % plan.workers == plan.worker_index)
        .map(|(_, t)| t);

    for offset_ns in mine {
        let intended = plan.start + Duration::from_nanos(offset_ns);
        if !wait_until(intended, &stop).await {
            break;
        }
        if stop.is_cancelled() {
            break;
        }
        let interval = offset_ns / interval_ns;
        let lag = Instant::now().saturating_duration_since(intended);
        if lag > plan.max_lag {
            recorder.borrow_mut().arrival_unsent_late(interval);
            continue;
        }
        if in_flight.get() >= plan.max_in_flight {
            recorder.borrow_mut().arrival_unsent_concurrency(interval);
            continue;
        }
        recorder
            .borrow_mut()
            .arrival_sent(interval, lag.as_micros() as u64);
        in_flight.set(in_flight.get() + 1);
        tokio::task::spawn_local(one_request(
            plan.client.clone(),
            recorder.clone(),
            in_flight.clone(),
            Timing {
                start: plan.start,
                intended,
                warmup: Duration::from_nanos(offset_ns) < plan.warmup,
                window: (plan.warmup, plan.duration),
                interval_ns,
            },
        ));
    }

    // Drain: give in-flight requests their chance to complete (and count),
    // unless we were told to stop.
    let drain_deadline = Instant::now() + plan.drain;
    while in_flight.get() > 0 && Instant::now() < drain_deadline && !stop.is_cancelled() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = stop.cancelled() => {}
        }
    }
    flusher.abort();
    let elapsed = Instant::now().saturating_duration_since(plan.start);
    let up_to = elapsed.as_nanos() as u64 / interval_ns + 1;
    let snaps = recorder.borrow_mut().flush(up_to, in_flight.get());
    let _ = events.send(WorkerEvent::Snapshots(snaps));
    let _ = events.send(WorkerEvent::Done {
        in_flight_at_end: in_flight.get(),
    });
}

/// Waits for an arrival's instant; false when stopped meanwhile.
///
/// tokio's timer rounds deadlines up to whole milliseconds, which alone
/// would put up to 1 ms of lag on every arrival. So the coarse sleep ends a
/// couple of milliseconds early and the rest is a yielding spin: other tasks (responses
/// being read) still run, and only an otherwise idle worker pays CPU for the
/// precision.
async fn wait_until(intended: Instant, stop: &CancellationToken) -> bool {
    let early = intended.checked_sub(TIMER_GRANULARITY).unwrap_or(intended);
    let now = Instant::now();
    if now < early {
        if early - now > WATCHED_SLEEP {
            tokio::select! {
                _ = tokio::time::sleep_until(early) => {}
                _ = stop.cancelled() => return false,
            }
        } else {
            tokio::time::sleep_until(early).await;
        }
    }
    while Instant::now() < intended {
        tokio::task::yield_now().await;
    }
    true
}

/// Timing facts of one request, fixed when it is sent.
struct Timing {
    start: Instant,
    intended: Instant,
    warmup: bool,
    /// Measurement window as offsets from start: [warm-up end, schedule end).
    window: (Duration, Duration),
    interval_ns: u64,
}

async fn one_request(
    client: HttpClient,
    recorder: Rc<RefCell<Recorder>>,
    in_flight: Rc<Cell<u64>>,
    timing: Timing,
) {
    let sent_at = Instant::now();
    let outcome = client.send().await;
    let done = Instant::now();
    let since_start = done.saturating_duration_since(timing.start);
    let in_window = since_start >= timing.window.0 && since_start < timing.window.1;
    recorder.borrow_mut().completed(
        since_start.as_nanos() as u64 / timing.interval_ns,
        outcome,
        done.saturating_duration_since(timing.intended).as_micros() as u64,
        done.saturating_duration_since(sent_at).as_micros() as u64,
        timing.warmup,
        in_window,
    );
    in_flight.set(in_flight.get() - 1);
}

/// Closes each interval at its boundary on the common clock and hands its
/// snapshots to the session.
async fn flush_loop(
    recorder: Rc<RefCell<Recorder>>,
    in_flight: Rc<Cell<u64>>,
    start: Instant,
    interval: Duration,
    events: UnboundedSender<WorkerEvent>,
) {
    let mut closed = 0u64;
    loop {
        closed += 1;
        let boundary = start + interval * closed as u32;
        tokio::time::sleep_until(boundary).await;
        let snaps = recorder.borrow_mut().flush(closed, in_flight.get());
        if events.send(WorkerEvent::Snapshots(snaps)).is_err() {
            return;
        }
    }
}
