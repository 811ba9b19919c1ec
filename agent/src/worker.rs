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

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::closed::{client_windows, Population};
use loadfleet_proto::handover::{Handover, Owners};
use loadfleet_proto::partition::{AgentSlice, Interleave};
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::schedule::{ArrivalSchedule, Stage};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::UnsentReason;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{
    ClientConfig, DirectPool, Exchanged, Fixed, Outgoing, Phases, Queued, Transport,
};
use crate::recorder::{Completion, Gauge, Recorder};
use crate::request::RequestMix;
use crate::runners::{Runners, Seat};
use crate::sse::hook::Hook;
use crate::sse::SseSpec;
use crate::timer::PreciseTimer;

/// Sleeps longer than this also watch for a stop, so a long pause in the
/// schedule cannot delay stopping; shorter ones just check the flag after.
const WATCHED_SLEEP: Duration = Duration::from_millis(20);
/// A worker that wakes this long after it meant to was frozen (SIGSTOP, a
/// paused VM): by then the coordinator may have declared the agent lost
/// and handed its arrivals to others, so it must not fire another one.
/// Shorter than the coordinator's silence limit, so any freeze that can
/// cost the agent its place stops it first.
const FROZEN: Duration = Duration::from_millis(1500);
/// The least time left before a tick for it to sleep blind (see [`tick`]):
/// about what waking a halted CPU costs on a VM.
const TICK_SLACK: Duration = Duration::from_micros(100);
/// How far into its schedule a worker looks to count the connections to
/// open before its start ([`Transport::open_ahead`]): its arrivals due in
/// the first 10 ms, about as many as would otherwise each open one at once.
const OPEN_AHEAD: Duration = Duration::from_millis(10);
/// How many arrivals in a row the open loop may send without looking at
/// the stop, when it does not wait between them (catching up).
const STOP_CHECK: u32 = 64;
/// How often the worker's thread CPU clock is read, for [`FreezeWatch`]:
/// rarely enough to cost nothing per arrival.
const CPU_SAMPLE: Duration = Duration::from_millis(100);

/// Tells a frozen worker from a busy one when it finds itself late by more
/// than [`FROZEN`]. A frozen thread did not run at all, and must stop
/// firing. A busy one ran the whole time — thousands of subscribers
/// connecting at once, say, kept the schedule's task waiting — and was
/// never silent to the coordinator (the control plane has its own thread):
/// its lateness is lag, which the report shows and judges, not a reason to
/// leave the run.
struct FreezeWatch {
    sampled_at: Instant,
    cpu_at: Option<Duration>,
}

impl FreezeWatch {
    fn new() -> Self {
        Self {
            sampled_at: Instant::now(),
            cpu_at: crate::sys::thread_cpu_time(),
        }
    }

    /// Called on every pass of the loop, before it may sleep; reads the
    /// thread's CPU clock when the last reading is stale.
    fn tick(&mut self, now: Instant) {
        if now.saturating_duration_since(self.sampled_at) >= CPU_SAMPLE {
            self.sampled_at = now;
            self.cpu_at = crate::sys::thread_cpu_time();
        }
    }

    /// Whether being `gap` late at `now` means the thread was stopped.
    fn frozen(&self, gap: Duration, now: Instant) -> bool {
        gap > FROZEN
            && stopped(
                now.saturating_duration_since(self.sampled_at),
                self.cpu_at
                    .zip(crate::sys::thread_cpu_time())
                    .map(|(then, cpu)| cpu.saturating_sub(then)),
            )
    }
}

/// A thread that ran for less than a quarter of `wall` was stopped for the
/// rest: a busy one runs nearly all of it (a quarter still allows for a
/// machine shared with three other busy threads), a stopped one at most the
/// [`CPU_SAMPLE`] before it stopped, a fifteenth of [`FROZEN`]. With no CPU
/// clock, assume stopped, the safe side.
fn stopped(wall: Duration, ran: Option<Duration>) -> bool {
    ran.is_none_or(|ran| ran * 4 < wall)
}

/// The run's hand-overs so far (`--on-agent-loss redistribute`), as the
/// session received them, in order.
pub type Handovers = watch::Receiver<Arc<[Handover]>>;

/// What a worker reports to the session.
pub enum WorkerEvent {
    /// Closed intervals, ready to stream.
    Snapshots(Vec<v1::Snapshot>),
    /// The worker is done; requests it abandoned while draining.
    Done { in_flight_at_end: u64 },
    /// The worker woke up this long after it should have: the process was
    /// frozen. It fired nothing more.
    Frozen(Duration),
}

/// How a scenario's load is generated.
pub enum Model {
    /// Arrivals on a schedule that ignores the server (open model).
    Open {
        schedule: Arc<ArrivalSchedule>,
        interleave: Arc<Interleave>,
    },
    /// A fixed population of clients, each waiting for its previous response
    /// plus the think time (closed model).
    Closed {
        population: Arc<Population>,
        interleave: Arc<Interleave>,
        /// Fleet-wide client count at its largest, for client numbering.
        max_clients: u64,
    },
}

/// One scenario as a worker runs it.
pub struct ScenarioPlan {
    pub index: u32,
    /// The scenario's own start (common start + its offset).
    pub start: Instant,
    pub warmup: Duration,
    pub duration: Duration,
    pub model: Model,
    pub mix: Arc<RequestMix>,
    pub seed: u64,
    /// Set for a subscription scenario: each arrival or client holds an
    /// event stream (see [`crate::sse`]).
    pub sse: Option<Arc<SseSpec>>,
}

/// Everything one worker needs; shared parts are behind `Arc`.
pub struct WorkerPlan {
    pub agent_index: usize,
    pub worker_index: usize,
    pub workers: usize,
    /// The common start: intervals count from here for every scenario.
    pub start: Instant,
    pub interval: Duration,
    pub drain: Duration,
    pub max_in_flight: u64,
    pub max_lag: Duration,
    /// Shortest time between two wake-ups of an open-model loop.
    pub wake_quantum: Duration,
    pub client: ClientConfig,
    pub scenarios: Vec<ScenarioPlan>,
}

/// State one scenario's tasks share on a worker thread.
#[derive(Clone)]
struct Shared {
    recorder: Rc<RefCell<Recorder>>,
    /// This scenario's requests in flight (the reported gauge).
    in_flight: Rc<Cell<u64>>,
    /// Every scenario's requests in flight on this worker: the cap applies
    /// to the agent, however many scenarios overlap.
    worker_in_flight: Rc<Cell<u64>>,
    client: Transport,
    mix: Arc<RequestMix>,
    /// A subscription scenario's streams and figures.
    sse: Option<Rc<Hook>>,
    rng: Rc<RefCell<SplitMix64>>,
    common_start: Instant,
    interval_ns: u64,
    scenario_start: Instant,
    warmup: Duration,
    duration: Duration,
    /// The only scenario this worker runs: nothing else on its thread
    /// (another scenario's arrivals, a subscriber's events) would be held
    /// up by a tick's blind sleep.
    alone: bool,
    /// The pool the open loop drives itself, when the scenario can use one
    /// (see [`direct_pool`]); its requests then never reach `client`.
    direct: Option<Rc<DirectPool<Sent>>>,
}

/// What the open loop keeps with a request in a [`DirectPool`]: its
/// intended instant and when it was sent.
type Sent = (Instant, Instant);

/// Where a worker's requests wait for connections, for the figures the
/// flush reports: the transport's pool, or the loop's own.
#[derive(Clone)]
enum PoolFigures {
    Transport(Transport),
    Direct(Rc<DirectPool<Sent>>),
}

impl PoolFigures {
    /// The figures of the pool a scenario's requests go through.
    fn of(direct: Option<&Rc<DirectPool<Sent>>>, client: &Transport) -> Self {
        match direct {
            Some(d) => PoolFigures::Direct(d.clone()),
            None => PoolFigures::Transport(client.clone()),
        }
    }

    fn take_saturated(&self, now: Instant) -> Duration {
        match self {
            PoolFigures::Transport(t) => t.take_saturated(now),
            PoolFigures::Direct(d) => d.take_saturated(now),
        }
    }

    fn take_connections(&self) -> Vec<(loadfleet_proto::vocab::HttpProtocol, u64)> {
        match self {
            PoolFigures::Transport(t) => t.take_connections(),
            PoolFigures::Direct(d) => d.take_connections(),
        }
    }
}

/// A pool the open loop drives itself, with no task per request, for a
/// scenario that can use one: the worker's only scenario, open model, no
/// subscription, every request HTTP/1.1 to one host, over plain TCP or
/// TLS. That is where the agent's cost per request matters most, and the
/// loop reads answers on its own ticks there (see [`tick_direct`]).
fn direct_pool(sc: &ScenarioPlan, client: &Transport, alone: bool) -> Option<Rc<DirectPool<Sent>>> {
    if !alone || sc.sse.is_some() || !matches!(sc.model, Model::Open { .. }) {
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

impl Shared {
    /// An arrival goes out now: one more in flight, counted as sent.
    fn mark_sent(&self, interval: u64, lag: Duration) {
        let in_flight = self.in_flight.get() + 1;
        self.in_flight.set(in_flight);
        self.worker_in_flight.set(self.worker_in_flight.get() + 1);
        self.recorder
            .borrow_mut()
            .arrival_sent(interval, lag.as_micros() as u64, in_flight);
    }
}

/// Runs a worker to completion on the current (single-threaded) runtime.
pub async fn run(
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
    // A sole scenario runs as this future itself, not as a task: see below.
    let mut main: Option<Pin<Box<dyn Future<Output = ()>>>> = None;
    let mut flushers = Vec::new();
    let mut states = Vec::new();
    let worker_in_flight = Rc::new(Cell::new(0u64));
    for sc in scenarios {
        let shared = Shared {
            recorder: Rc::new(RefCell::new(Recorder::new(sc.index))),
            in_flight: Rc::new(Cell::new(0)),
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
                        open_loop(&plan, &sc, schedule, interleave, handovers, &shared, &stop)
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
                    closed_loop(
                        &plan,
                        &population.stages,
                        population.think,
                        interleave,
                        *max_clients,
                        &shared,
                        &stop,
                    )
                    .await
                }
            }
            // Drain: give in-flight requests their chance to complete (and
            // count), unless we were told to stop.
            // Subscribers hold past the last arrival, until the scenario's
            // end (its schedule plus the hold).
            let held = match shared.sse {
                Some(_) => shared.scenario_start + shared.duration,
                None => Instant::now(),
            };
            let deadline = Instant::now().max(held) + plan.drain;
            let mut done = Vec::new();
            while shared.in_flight.get() > 0 && Instant::now() < deadline && !stop.is_cancelled() {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    _ = pool_news(shared.direct.as_deref()) => {}
                    _ = stop.cancelled() => {}
                }
                if let Some(direct) = &shared.direct {
                    drive(direct, &shared, &mut done);
                }
            }
        };
        if alone {
            // The local set polls the future it runs before each batch of
            // at most 61 tasks, but a task only in its turn: an open loop
            // spawned as a task waited behind every request task woken
            // meanwhile, up to two full passes over the busy connections
            // near saturation, and its arrivals left that much later.
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
    let elapsed = Instant::now().saturating_duration_since(plan.start);
    let up_to = elapsed.as_nanos() as u64 / interval_ns + 1;
    let mut in_flight_at_end = 0;
    let figures = PoolFigures::of(states.first().and_then(|s| s.direct.as_ref()), &client);
    let mut pool_saturated = figures.take_saturated(Instant::now()) / plan.workers.max(1) as u32;
    for s in &states {
        let gauge = Gauge::new(s.in_flight.get(), std::mem::take(&mut pool_saturated));
        let mut snaps = s.recorder.borrow_mut().flush(up_to, gauge);
        if let Some(sse) = &s.sse {
            sse.attach(&mut snaps, up_to);
        }
        attach_connections(&mut snaps, &figures);
        let _ = events.send(WorkerEvent::Snapshots(snaps));
        in_flight_at_end += s.in_flight.get();
    }
    let _ = events.send(WorkerEvent::Done { in_flight_at_end });
}

/// One worker's arrivals of one open scenario, in time order: its part of
/// the agent's own slice, and of every hand-over the agent takes part in.
/// Each source is dealt round-robin over the agent's workers by position.
struct Sources<'a> {
    schedule: &'a ArrivalSchedule,
    interleave: &'a Arc<Interleave>,
    agent: usize,
    worker: usize,
    workers: usize,
    /// The scenario's offset from the common start, which hand-over
    /// instants count from.
    offset_ns: u64,
    streams: Vec<Stream<'a>>,
    /// Hand-overs already turned into streams.
    known: usize,
}

/// One source of arrivals (fleet index, ns from the scenario start), with
/// its next one looked at.
struct Stream<'a> {
    head: Option<(u64, u64)>,
    rest: Box<dyn Iterator<Item = (u64, u64)> + 'a>,
}

impl<'a> Stream<'a> {
    fn new(mut rest: Box<dyn Iterator<Item = (u64, u64)> + 'a>) -> Self {
        Self {
            head: rest.next(),
            rest,
        }
    }
}

impl<'a> Sources<'a> {
    /// Adds a stream per hand-over not seen yet. Hand-over `j` brings the
    /// arrivals that it (and no later one) gave to this agent; the earlier
    /// streams keep theirs, because only a lost agent loses arrivals and the
    /// coordinator sends nothing more to a lost agent.
    fn absorb(&mut self, handovers: &Arc<[Handover]>) {
        while self.known < handovers.len() {
            let level = self.known + 1;
            self.known += 1;
            if !handovers[level - 1].survivors.contains(&self.agent) {
                continue;
            }
            let mut owners = Owners::new(self.interleave.clone(), handovers[..level].into());
            let (agent, offset) = (self.agent, self.offset_ns);
            let (worker, workers) = (self.worker, self.workers);
            let taken = self
                .schedule
                .arrivals()
                .enumerate()
                .map(|(k, t)| (k as u64, t))
                .filter(move |&(k, t)| {
                    owners.owner_and_level(k, offset.saturating_add(t)) == (agent, level)
                })
                .enumerate()
                .filter(move |(n, _)| n % workers == worker)
                .map(|(_, a)| a);
            self.streams.push(Stream::new(Box::new(taken)));
        }
    }

    /// The earliest next arrival over all streams, without taking it.
    fn peek(&self) -> Option<(usize, (u64, u64))> {
        self.streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.head.map(|a| (i, a)))
            .min_by_key(|&(_, (_, t))| t)
    }

    fn take(&mut self, stream: usize) {
        let s = &mut self.streams[stream];
        s.head = s.rest.next();
    }
}

/// Waits until a new hand-over arrives; never, once the session is gone.
async fn handover_news(rx: &mut Handovers) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Sends this worker's arrivals of an open scenario. Fails with the gap when
/// the worker finds it was frozen; it then fires nothing more.
async fn open_loop(
    plan: &WorkerPlan,
    sc: &ScenarioPlan,
    schedule: &ArrivalSchedule,
    interleave: &Arc<Interleave>,
    mut handovers: Handovers,
    shared: &Shared,
    stop: &CancellationToken,
) -> Result<(), Duration> {
    let slice = match AgentSlice::new(schedule, interleave, plan.agent_index) {
        Ok(slice) => slice,
        Err(e) => {
            tracing::error!("cannot take my slice: {e}");
            return Ok(());
        }
    };
    let own = slice
        .indexed_arrivals()
        .enumerate()
        .filter(|(n, _)| n % plan.workers == plan.worker_index)
        .map(|(_, a)| a);
    let mut sources = Sources {
        schedule,
        interleave,
        agent: plan.agent_index,
        worker: plan.worker_index,
        workers: plan.workers,
        offset_ns: sc.start.saturating_duration_since(plan.start).as_nanos() as u64,
        streams: vec![Stream::new(Box::new(own))],
        known: 0,
    };
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
    // Whether a wake-up may be a tick (see [`tick`], [`tick_direct`]):
    // only where every answer's time is its arrival's, whenever it is
    // read, and nothing else on the thread needs it awake. The loop's own
    // pool stamps every answer, TLS or not; through the tasks, only plain
    // TCP's reads are stamped.
    let may_tick = shared.alone
        && shared.sse.is_none()
        && shared.client.stamps_answers()
        && (shared.direct.is_some() || sc.mix.plain_http());
    let runners = Runners::new();
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
            // Whatever is not open by the start opens as requests need it.
            let ahead = async {
                match &shared.direct {
                    Some(direct) => direct.open_ahead(needed).await,
                    None => shared.client.open_ahead(uri, needed).await,
                }
            };
            tokio::select! {
                _ = ahead => {}
                _ = tokio::time::sleep_until(sc.start) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
    let news = handovers.borrow_and_update().clone();
    sources.absorb(&news);
    // Arrivals since the stop was last looked at: looking takes a lock, so
    // it is done after every wait and every STOP_CHECK arrivals otherwise.
    let mut unchecked = 0u32;
    // A tick slept blind and the answers that came meanwhile are not read
    // yet.
    let mut unread = false;
    let direct = shared.direct.as_ref();
    // Outcomes the direct pool gave, to record.
    let mut done = Vec::new();
    // The direct pool's rendering of each request kind that never changes.
    let mut fixed = Vec::new();
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
                _ = pool_news(direct.map(|d| &**d)) => due = Instant::now(),
                _ = stop.cancelled() => break,
            }
            if let Some(direct) = direct {
                drive(direct, shared, &mut done);
            }
            continue;
        };
        let intended = sc.start + Duration::from_nanos(offset_ns);
        if intended > now {
            // Coalesce wake-ups: at most one per wake quantum. Each sleep is
            // a context switch (several µs); at high rates they would cost
            // more than the requests. Arrivals then leave up to one quantum
            // late, which the lag histogram and the latency (taken from the
            // intended instant) both show.
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
                    _ = pool_news(direct.map(|d| &**d)) => due = Instant::now(),
                    _ = stop.cancelled() => break,
                }
                if let Some(direct) = direct {
                    drive(direct, shared, &mut done);
                }
                continue;
            }
            let mut cut = false;
            let waited = match direct {
                Some(direct) if may_tick => {
                    unread = true;
                    let due = ticks.due(intended);
                    let sleep = Sleep {
                        timer: timer.as_ref(),
                        wake,
                        exact,
                    };
                    match tick_direct(sleep, due, direct, shared, &mut done, stop).await {
                        TickEnd::Stopped => false,
                        TickEnd::Woke => true,
                        TickEnd::Cut => {
                            cut = true;
                            true
                        }
                    }
                }
                Some(direct) => {
                    wait_driving(timer.as_ref(), wake, exact, direct, shared, &mut done, stop).await
                }
                None if may_tick && !exact => {
                    unread = true;
                    tick(timer.as_ref(), wake, &runners, &shared.client, stop).await
                }
                None => wait_until(timer.as_ref(), wake, exact, stop).await,
            };
            if !waited || stop.is_cancelled() {
                break;
            }
            now = Instant::now();
            if cut {
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
        if let Some(direct) = direct.filter(|d| unread && d.full()) {
            // As below, with the loop reading the answers itself.
            drive(direct, shared, &mut done);
            unread = false;
            now = Instant::now();
        } else if unread && shared.client.pool_full() {
            // The tick sends before it reads (see [`tick`]), but every
            // connection is busy: this arrival would queue for one that
            // an answer already waiting in its socket has in fact freed.
            // Reading those answers first gives it that connection now,
            // instead of a wait in the worker's queue (see
            // [`crate::runners`]) that would count as pool wait and, at
            // high rates, used to be what filled the queue first.
            settle(&runners, true).await;
            unread = false;
            now = Instant::now();
        }
        sources.take(stream);
        // `now` is when this arrival goes out: the rest of this pass (a
        // few branches, the request's rendering) is not worth another
        // reading of the clock.
        due = now;
        let interval = interval_of(shared, intended);
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
        if let Some(direct) = direct {
            let request = match shared.mix.fixed_kind(seq) {
                Some(kind) => fixed_request(&mut fixed, kind, || {
                    build_or_count(shared, seq, interval).map(|r| direct.fix(r))
                })
                .map(Outgoing::Fixed),
                None => build_or_count(shared, seq, interval).map(Outgoing::built),
            };
            let Some(request) = request else {
                continue;
            };
            shared.mark_sent(interval, lag);
            direct.submit(request, now, (intended, now), &mut done);
            for ((intended, sent_at), exchanged) in done.drain(..) {
                record(shared, &exchanged, intended, sent_at);
            }
            continue;
        }
        let Some(request) = build_or_count(shared, seq, interval) else {
            continue;
        };
        shared.mark_sent(interval, lag);
        if let Some(hook) = shared.sse.clone() {
            let task_shared = shared.clone();
            let until = hook.until(intended, shared.scenario_start + shared.duration);
            let stop = stop.clone();
            tokio::task::spawn_local(async move {
                one_subscriber(&task_shared, &hook, request, intended, until, &stop).await;
            });
            continue;
        }
        if runners.must_hold(|| shared.client.free_connections()) {
            runners.hold((request, intended, now, Some(shared.client.queue())));
        } else if let Some(seat) = runners.offer((request, intended, now, None)) {
            tokio::task::spawn_local(runner(shared.clone(), runners.clone(), seat));
        }
    }
    Ok(())
}

/// The open loop's coalesced wake-ups: where the next one's quantum
/// counts from, and whether the coming tick may still end early.
struct Ticks {
    anchor: Instant,
    quantum: Duration,
    /// Whether the coming tick may end before its instant to send an
    /// arrival that fell due while it read (see [`tick_direct`]): once per
    /// tick, so that a worker whose reads keep finding arrivals due still
    /// sleeps between its ticks.
    may_cut: bool,
}

impl Ticks {
    fn new(now: Instant, quantum: Duration) -> Self {
        Self {
            anchor: now,
            quantum,
            may_cut: true,
        }
    }

    /// When to wake for an arrival intended at `intended`: at it, or a
    /// quantum after the last wake-up if that is later.
    fn wake(&self, intended: Instant) -> Instant {
        intended.max(self.anchor + self.quantum)
    }

    /// The arrival a tick waiting for one at `intended` may end early for.
    fn due(&self, intended: Instant) -> Option<Instant> {
        self.may_cut.then_some(intended)
    }

    /// A wake-up meant for `wake` came at `now`.
    fn woke(&mut self, wake: Instant, now: Instant) {
        self.anchor = tick_anchor(wake, now, self.quantum);
        self.may_cut = true;
    }

    /// The coming tick ended early: it has not come yet, so its instant is
    /// still the next wake-up's, and the wait after this arrival's send is
    /// the rest of it.
    fn cut(&mut self) {
        self.may_cut = false;
    }
}

/// Where the next wake-up's quantum counts from, after one meant for
/// `wake` came at `now`: from `wake`, so that the wake-ups keep one
/// quantum apart on average. Counted from `now`, each wake-up's own
/// lateness (tens of µs on a VM) would stretch every spacing, and a tick's
/// spacing is the send lag of the arrivals it just missed: at the same
/// send-lag p99 the quantum can then be longer, for fewer wake-ups (0.45
/// ms at 20,000 req/s with 500 µs, BENCHMARKS.md). A wake-up later than a
/// whole quantum (a stall) starts the count afresh, so the loop does not
/// then tick back to back to catch up.
fn tick_anchor(wake: Instant, now: Instant, quantum: Duration) -> Instant {
    if now < wake + quantum {
        wake
    } else {
        now
    }
}

/// One arrival's request, as a runner takes it, with its intended instant,
/// when it was sent, and its place in the worker's queue if it waited
/// there for a connection.
type Job = (
    http::Request<http_body_util::Full<bytes::Bytes>>,
    Instant,
    Instant,
    Option<Queued>,
);

/// A request task that stays for the next arrival (see [`crate::runners`]).
async fn runner(shared: Shared, runners: Rc<Runners<Job>>, seat: Seat<Job>) {
    runners
        .serve(seat, |(request, intended, sent_at, queued)| {
            one_request(&shared, request, intended, sent_at, queued)
        })
        .await;
}

/// Waits for the open loop's next coalesced wake-up as a tick: the thread
/// sleeps until `wake` without listening to its sockets. The arrivals due
/// then go out first; every answer that arrived meanwhile is read in one
/// pass at the next tick's start, with the writes — or before the sends,
/// when every connection is busy (see [`open_loop`]).
///
/// Otherwise each burst of answers would wake the worker on its own — at
/// 20,000 req/s about as many wake-ups again as the quantum's, each a
/// context switch that costs more than a request (BENCHMARKS.md). Reading
/// late costs the measurement nothing, because an answer's time is the
/// kernel's stamp of its arrival, not the read ([`Transport::stamps_answers`];
/// ticks are used only where that holds). Only coalesced wake-ups tick: they
/// come at most one quantum apart, so the thread never sleeps blind for
/// long, and a stop or a hand-over waits at most that. Reading the answers
/// after the sends, not before, takes their reading out of every arrival's
/// lag (0.02 ms off send-lag p99 at 20,000 req/s, BENCHMARKS.md) and saves
/// one poll of the reactor per tick.
///
/// And only while the worker has slack: once the requests just fired are
/// written and the answers already in are read, at least [`TICK_SLACK`]
/// must be left before `wake`; otherwise it waits the usual way (false when
/// stopped meanwhile, as [`wait_until`]). A blind sleep lets the CPU halt,
/// and waking a halted CPU takes about 0.1 ms on a VM; a worker with less
/// slack than that is nearly saturated, answers arrive often enough to keep
/// it awake anyway, and the tick's late start would add to every arrival's
/// lag (measured without this rule, in a build that also read the answers
/// before sending: send-lag p99 0.4–0.7 ms became 0.9–2.8 ms at
/// 50,000–60,000 req/s on one core, BENCHMARKS.md).
///
/// Nor while requests wait for a connection: the answers that free one
/// must be read as they come. Slept through, each connection carried one
/// request a tick, so a tick's arrivals beyond the pool (more than 64 at
/// 500 µs and 130,000 req/s) waited for the next, the queue grew to the
/// in-flight cap and arrivals went unsent, where the connections could
/// carry several times that (BENCHMARKS.md, "Wake-ups a quantum apart").
///
/// Nor while answers too large to land whole in their sockets may be
/// under way ([`Transport::answers_need_reading`]): their servers would
/// wait at the full window until the tick, and the answers' ends would be
/// its wake-up.
async fn tick(
    timer: Option<&PreciseTimer>,
    wake: Instant,
    runners: &Runners<Job>,
    client: &Transport,
    stop: &CancellationToken,
) -> bool {
    // The requests just fired write themselves out.
    settle(runners, false).await;
    if runners.backlogged()
        || client.answers_need_reading()
        || wake.saturating_duration_since(Instant::now()) < TICK_SLACK
    {
        return wait_until(timer, wake, false, stop).await;
    }
    Sleep {
        timer,
        wake,
        exact: false,
    }
    .blind()
    .await;
    true
}

/// A wait of the open loop's for its next wake-up, as
/// [`PreciseTimer::sleep_until`] takes it.
#[derive(Clone, Copy)]
struct Sleep<'a> {
    timer: Option<&'a PreciseTimer>,
    wake: Instant,
    exact: bool,
}

impl Sleep<'_> {
    /// A tick's sleep: the thread blocks until `wake`, listening to
    /// nothing.
    async fn blind(self) {
        let blocked = match self.timer {
            Some(timer) => timer.block(self.wake, self.exact),
            None => crate::timer::block_until(self.wake),
        };
        if let Err(err) = blocked {
            tracing::debug!("cannot sleep until the tick ({err}); waiting on tokio's timer");
            tokio::time::sleep_until(self.wake).await;
        }
    }
}

/// How [`tick_direct`] ended.
enum TickEnd {
    /// Stopped meanwhile.
    Stopped,
    /// At the tick's instant, or later.
    Woke,
    /// Before it, with the next arrival due.
    Cut,
}

/// [`tick`] for a loop that drives its own pool: its requests are
/// written already, so it lets the worker's tasks (the flush, dials) run
/// once, reads the answers that came in since the last tick, and sleeps
/// blind until `wake` if there is slack for it, nothing waits for a
/// connection, queued or dialled, and no answer too large for its socket
/// may be under way ([`DirectPool::answers_need_reading`]). A request
/// whose time runs out meanwhile is still a timeout at its deadline: the
/// pool judges an answer by when it came, not when it was read.
///
/// Here an arrival's own wake-up (`exact`, at rates below one a quantum)
/// is a tick as well, up to [`WATCHED_SLEEP`] away, which a stop already
/// waits for: each answer then waits in its socket for the next arrival's
/// wake-up instead of waking the worker itself, which was a second
/// wake-up per arrival (at 1,000 req/s, 1.0 context switches per arrival
/// instead of 2.0, and 69–81 µs of CPU instead of 116–155,
/// BENCHMARKS.md). The exact sleep keeps its lead, spun through blind.
///
/// Unless the arrival the tick waits for, `due`, fell due while it read:
/// then it ends at once, and that arrival goes out now rather than nearly
/// a whole quantum after its instant (send-lag p50 0.21 → 0.16 ms at
/// 20,000 req/s, BENCHMARKS.md). The loop gives a `due` once per tick, so
/// this costs at most one more look at the sockets per tick (0.1 more
/// system calls per request there), and no wake-up.
async fn tick_direct(
    sleep: Sleep<'_>,
    due: Option<Instant>,
    direct: &Rc<DirectPool<Sent>>,
    shared: &Shared,
    done: &mut Vec<(Sent, Exchanged)>,
    stop: &CancellationToken,
) -> TickEnd {
    // Also has tokio's reactor look at the sockets, so that the pool knows
    // without a system call of its own whether any answer came.
    tokio::task::yield_now().await;
    if direct.has_news() {
        drive(direct, shared, done);
    }
    let now = Instant::now();
    if due.is_some_and(|at| at <= now) {
        return TickEnd::Cut;
    }
    let Sleep { timer, wake, exact } = sleep;
    if direct.queued()
        || direct.answers_need_reading()
        || wake.saturating_duration_since(now) < TICK_SLACK
    {
        let waited = wait_driving(timer, wake, exact, direct, shared, done, stop).await;
        return if waited {
            TickEnd::Woke
        } else {
            TickEnd::Stopped
        };
    }
    sleep.blind().await;
    TickEnd::Woke
}

/// [`wait_until`] for a loop that drives its own pool: it takes up the
/// pool's news as they come while it waits.
async fn wait_driving(
    timer: Option<&PreciseTimer>,
    wake: Instant,
    exact: bool,
    direct: &Rc<DirectPool<Sent>>,
    shared: &Shared,
    done: &mut Vec<(Sent, Exchanged)>,
    stop: &CancellationToken,
) -> bool {
    let mut sleep = std::pin::pin!(wait_until(timer, wake, exact, stop));
    loop {
        tokio::select! {
            biased;
            waited = &mut sleep => {
                // Waits this short watch no deadline of their own (a timer
                // entry per wake-up): one that passed is taken up now.
                if direct.next_deadline().is_some_and(|at| at <= Instant::now()) {
                    drive(direct, shared, done);
                }
                return waited;
            }
            _ = direct.news() => drive(direct, shared, done),
        }
    }
}

/// Waits until the loop's own pool has something to take up: an answer,
/// a finished dial, a request whose time ran out. Never, without a pool.
async fn pool_news(direct: Option<&DirectPool<Sent>>) {
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
fn drive(direct: &Rc<DirectPool<Sent>>, shared: &Shared, done: &mut Vec<(Sent, Exchanged)>) {
    direct.drive(Instant::now(), done);
    for ((intended, sent_at), exchanged) in done.drain(..) {
        record(shared, &exchanged, intended, sent_at);
    }
}

/// Lets the worker's tasks run before the open loop goes on: the runners it
/// gave a request to, and with `answers` those whose answers have come in.
///
/// The loop runs as the worker's main future (see [`run_scenarios`]),
/// which the local set polls first, before at most 61 of its tasks, and
/// the sockets are polled only after those: so it yields until every
/// runner it gave a request to has taken it up (or a blind sleep would
/// hold the rest back a whole tick), then, for the answers, once more for
/// the runners the sockets woke. Only a full pool waits for its answers
/// (see [`open_loop`]): yielding to them on every tick lets the runners
/// woken meanwhile go first, and the loop's next arrivals leave that much
/// later (send-lag p99 1.15 ms against 0.90 at 140,000–180,000 req/s on
/// one core, BENCHMARKS.md).
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

/// Closed model: each owned client runs its loop inside its active windows.
async fn closed_loop(
    plan: &WorkerPlan,
    stages: &[Stage],
    think: Duration,
    interleave: &Interleave,
    max_clients: u64,
    shared: &Shared,
    stop: &CancellationToken,
) {
    let mine: Vec<u64> = (0..max_clients)
        .filter(|&c| interleave.owner(c) == plan.agent_index)
        .enumerate()
        .filter(|(n, _)| n % plan.workers == plan.worker_index)
        .map(|(_, c)| c)
        .collect();
    let clients: Vec<_> = mine
        .into_iter()
        .map(|c| {
            let windows = client_windows(stages, c);
            let (shared, stop, drain) = (shared.clone(), stop.clone(), plan.drain);
            tokio::task::spawn_local(async move {
                let mut n = 0u64;
                for (lo, hi) in windows {
                    let end = shared.scenario_start + Duration::from_nanos(hi);
                    if !wait_until(
                        None,
                        shared.scenario_start + Duration::from_nanos(lo),
                        false,
                        &stop,
                    )
                    .await
                    {
                        return;
                    }
                    while Instant::now() < end && !stop.is_cancelled() {
                        // In a closed model the client is ready now: that is
                        // the intended instant, so latency equals service time.
                        let intended = Instant::now();
                        let seq = n * max_clients + c;
                        n += 1;
                        let interval = interval_of(&shared, intended);
                        let Some(request) = build_or_count(&shared, seq, interval) else {
                            // A bad rendering must not spin the client.
                            tokio::time::sleep(think.max(Duration::from_millis(1))).await;
                            continue;
                        };
                        shared.mark_sent(interval, Duration::ZERO);
                        if let Some(hook) = &shared.sse {
                            // A subscriber holds until its window ends,
                            // reconnecting as the standard says.
                            one_subscriber(&shared, hook, request, intended, end, &stop).await;
                            break;
                        }
                        // A request still out at the end of the drain, or at
                        // a stop, is abandoned (counted as in flight at end).
                        tokio::select! {
                            _ = one_request(&shared, request, intended, intended, None) => {}
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep_until(end + drain) => return,
                        }
                        if think.is_zero() {
                            // A request that fails without ever waiting (no
                            // ports left, say) must not hog the worker.
                            tokio::task::yield_now().await;
                        } else {
                            tokio::select! {
                                _ = tokio::time::sleep(think) => {}
                                _ = stop.cancelled() => return,
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
}

/// Builds arrival `seq`'s request, or counts it unsent when the rendered
/// template is not a valid request. Not async: the RefCell borrows end here.
fn build_or_count(
    shared: &Shared,
    seq: u64,
    interval: u64,
) -> Option<http::Request<http_body_util::Full<bytes::Bytes>>> {
    let built = shared.mix.build(seq, &mut shared.rng.borrow_mut());
    match built {
        Ok(r) => Some(r),
        Err(reason) => {
            shared
                .recorder
                .borrow_mut()
                .arrival_unsent(interval, reason);
            None
        }
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

fn interval_of(shared: &Shared, at: Instant) -> u64 {
    at.saturating_duration_since(shared.common_start).as_nanos() as u64 / shared.interval_ns
}

/// Waits for an instant; false when stopped meanwhile. Long waits (pauses in
/// the schedule) also listen for a stop.
async fn wait_until(
    timer: Option<&PreciseTimer>,
    intended: Instant,
    exact: bool,
    stop: &CancellationToken,
) -> bool {
    if intended > Instant::now() + WATCHED_SLEEP {
        tokio::select! {
            _ = sleep_precisely(timer, intended, exact) => true,
            _ = stop.cancelled() => false,
        }
    } else {
        sleep_precisely(timer, intended, exact).await;
        true
    }
}

/// Sleeps until `at` on the precise timer, `exact` as
/// [`PreciseTimer::sleep_until`] says; on tokio's, with its 1 ms slots,
/// without one. The whole wait, however long, is one sleep: tokio's wheel
/// for the long part, then the precise timer for the last few ms, was two
/// or three wake-ups per arrival at low rates, where one will do.
async fn sleep_precisely(timer: Option<&PreciseTimer>, at: Instant, exact: bool) {
    match timer {
        Some(t) => {
            if let Err(e) = t.sleep_until(at, exact).await {
                tracing::debug!("precise timer failed ({e}); falling back to tokio's");
                tokio::time::sleep_until(at).await;
            }
        }
        None => tokio::time::sleep_until(at).await,
    }
}

async fn one_request(
    shared: &Shared,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
    intended: Instant,
    sent_at: Instant,
    queued: Option<Queued>,
) {
    let exchanged = shared.client.send(request, sent_at, queued).await;
    record(shared, &exchanged, intended, sent_at);
}

/// Records one request's outcome and takes it out of the in-flight counts.
fn record(shared: &Shared, exchanged: &Exchanged, intended: Instant, sent_at: Instant) {
    let done = exchanged.answered.unwrap_or_else(Instant::now);
    let in_scenario = done.saturating_duration_since(shared.scenario_start);
    let in_window = in_scenario >= shared.warmup && in_scenario < shared.duration;
    let warmup = intended.saturating_duration_since(shared.scenario_start) < shared.warmup;
    shared.recorder.borrow_mut().completed(
        interval_of(shared, done),
        Completion {
            outcome: exchanged.outcome,
            latency_micros: done.saturating_duration_since(intended).as_micros() as u64,
            // Service time runs from when the request went onto a
            // connection: a wait for one of the agent's own connections is
            // not the target's.
            service_micros: done
                .saturating_duration_since(exchanged.on_wire.unwrap_or(sent_at))
                .as_micros() as u64,
            pool_wait_micros: exchanged.pool_wait.map(|w| w.as_micros() as u64),
            warmup,
            in_window,
            phases: exchanged.phases,
        },
    );
    shared.in_flight.set(shared.in_flight.get() - 1);
    shared
        .worker_in_flight
        .set(shared.worker_in_flight.get() - 1);
}

/// One subscriber of a subscription scenario: it holds a stream until
/// `until`. Its first answer is its outcome, recorded like a request's
/// (latency = time to subscribe, from the intended instant to the response
/// headers); it stays in flight while it holds on.
async fn one_subscriber(
    shared: &Shared,
    hook: &Hook,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
    intended: Instant,
    until: Instant,
    stop: &CancellationToken,
) {
    let sent_at = Instant::now();
    let answered = Cell::new(false);
    hook.subscribe(&request, intended, until, stop, |outcome, at, opening| {
        answered.set(true);
        let in_scenario = at.saturating_duration_since(shared.scenario_start);
        shared.recorder.borrow_mut().completed(
            interval_of(shared, at),
            Completion {
                outcome,
                latency_micros: at.saturating_duration_since(intended).as_micros() as u64,
                service_micros: at.saturating_duration_since(sent_at).as_micros() as u64,
                pool_wait_micros: None,
                warmup: intended.saturating_duration_since(shared.scenario_start) < shared.warmup,
                in_window: in_scenario >= shared.warmup && in_scenario < shared.duration,
                phases: Phases {
                    connect: opening.connect,
                    tls: opening.tls,
                    ttfb: opening.ttfb,
                    body: None,
                    new_connection: opening.connect.is_some(),
                    reused: false,
                },
            },
        );
    })
    .await;
    // One never answered (stopped first) is abandoned, as a request would
    // be: it stays in flight at the end.
    if answered.get() {
        shared.in_flight.set(shared.in_flight.get() - 1);
        shared
            .worker_in_flight
            .set(shared.worker_in_flight.get() - 1);
    }
}

/// Closes each interval at its boundary on the common clock and hands its
/// snapshots to the session; with the worker's `pool` (and the agent's
/// number of workers), also the time it held requests waiting.
async fn flush_loop(
    recorder: Rc<RefCell<Recorder>>,
    in_flight: Rc<Cell<u64>>,
    pool: Option<(PoolFigures, usize)>,
    sse: Option<Rc<Hook>>,
    start: Instant,
    interval: Duration,
    events: UnboundedSender<WorkerEvent>,
) {
    let mut closed = 0u64;
    loop {
        closed += 1;
        let boundary = start + interval * closed as u32;
        tokio::time::sleep_until(boundary).await;
        let saturated = pool.as_ref().map_or(Duration::ZERO, |(p, workers)| {
            p.take_saturated(Instant::now()) / (*workers).max(1) as u32
        });
        let mut snaps = recorder
            .borrow_mut()
            .flush(closed, Gauge::new(in_flight.get(), saturated));
        if let Some(sse) = &sse {
            sse.attach(&mut snaps, closed);
        }
        if let Some((transport, _)) = &pool {
            attach_connections(&mut snaps, transport);
        }
        if events.send(WorkerEvent::Snapshots(snaps)).is_err() {
            return;
        }
    }
}

/// Puts the connections the worker's transport established since the last
/// flush on the newest snapshot, by the protocol spoken on them; with no
/// snapshot to carry them they wait for the next flush.
fn attach_connections(snaps: &mut [v1::Snapshot], transport: &PoolFigures) {
    if let Some(last) = snaps.last_mut() {
        for (protocol, n) in transport.take_connections() {
            *last
                .connections
                .entry(protocol.as_str().to_string())
                .or_default() += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_and_idle_is_frozen_late_and_running_is_busy() {
        let gap = Duration::from_millis(1600);
        assert!(stopped(gap, Some(Duration::from_millis(90))), "SIGSTOP");
        assert!(!stopped(gap, Some(Duration::from_millis(1550))), "busy");
        assert!(
            !stopped(gap, Some(Duration::from_millis(500))),
            "busy, shared"
        );
        assert!(stopped(gap, None), "no clock: the safe side");
    }

    /// A tick that ended early to send an arrival its reads found due
    /// still comes at its instant, and the loop's pace stays one quantum.
    #[test]
    fn a_cut_tick_still_comes_at_its_instant_and_is_cut_once() {
        let quantum = Duration::from_micros(500);
        let start = Instant::now();
        let us = |n| start + Duration::from_micros(n);
        let mut ticks = Ticks::new(start, quantum);
        let tick = ticks.wake(us(100));
        assert_eq!(tick, us(500), "arrivals closer than a quantum wait for it");
        assert_eq!(ticks.due(us(100)), Some(us(100)));
        // Its reads found the arrival at 100 µs due: it went out, and the
        // next one waits for the same tick, which is not cut again.
        ticks.cut();
        assert_eq!(ticks.wake(us(300)), tick);
        assert_eq!(ticks.due(us(300)), None);
        ticks.woke(tick, us(530));
        assert_eq!(ticks.wake(us(600)), us(1000), "one quantum after the tick");
        assert_eq!(ticks.due(us(600)), Some(us(600)));
        assert_eq!(
            ticks.wake(us(2000)),
            us(2000),
            "a far arrival at its instant"
        );
    }

    /// Every wake-up 60 µs late, as on a VM: a hundred ticks of 500 µs
    /// still take 50 ms, not 56; a stall of three quanta restarts the count
    /// at the stall's end instead of ticking back to back after it.
    #[test]
    fn ticks_keep_their_quantum_apart_whatever_each_wake_up_is_late() {
        let quantum = Duration::from_micros(500);
        let late = Duration::from_micros(60);
        let start = Instant::now();
        let mut last = start;
        let mut woke = start;
        for _ in 0..100 {
            let wake = last + quantum;
            woke = wake + late;
            last = tick_anchor(wake, woke, quantum);
        }
        assert_eq!(woke - start, 100 * quantum + late);
        let wake = last + quantum;
        let stalled = wake + 3 * quantum;
        assert_eq!(tick_anchor(wake, stalled, quantum), stalled);
    }

    /// On the real clocks: a thread that slept through a gap did not run,
    /// so a gap that long is a freeze; one shorter than FROZEN never is.
    #[test]
    fn a_thread_that_did_not_run_is_frozen() {
        let watch = FreezeWatch::new();
        std::thread::sleep(Duration::from_millis(150));
        let now = Instant::now();
        assert!(watch.frozen(FROZEN + Duration::from_millis(1), now));
        assert!(!watch.frozen(FROZEN, now));
    }
}
