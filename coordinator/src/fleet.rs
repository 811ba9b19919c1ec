//! The fleet actor: owns every agent's session and the merged state, and
//! walks the run through its phases — wait for agents, estimate clock
//! offsets, assign slices with one common start instant, merge snapshots
//! live, stop everyone on interruption, and notice agents that vanish.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use crate::aggregate::Aggregate;
use crate::plan::Shares;
use crate::service::{AgentTx, FleetEvent};

/// An agent that stays silent this long is lost (it heartbeats twice a second).
const AGENT_SILENCE: Duration = Duration::from_secs(5);
/// Agents stop on their own after this long without hearing from us.
const DEAD_MAN_SECS: u32 = 3;
/// Clock-offset probes per agent; the one with the smallest round trip wins.
const PINGS: u64 = 8;

/// Everything the fleet needs to carry out one run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub scenarios: Vec<v1::ScenarioAssignment>,
    pub shares: Shares,
    /// When the last scenario ends.
    pub duration: Duration,
    pub drain: Duration,
    pub max_in_flight: u32,
    pub max_lag: Duration,
    pub timeout: Duration,
    pub connections: u32,
    pub interval: Duration,
    pub expect_agents: usize,
    pub agent_timeout: Duration,
    /// Runs of the plan, one after another, by the same fleet.
    pub repeats: usize,
}

/// How long after an interval closes its snapshots are taken as all in.
const SETTLE: Duration = Duration::from_millis(400);

/// Pause between repeated runs, so one run's drain cannot touch the next.
const BETWEEN_RUNS: Duration = Duration::from_secs(1);

/// One agent as the fleet knows it.
#[derive(Debug)]
pub struct Agent {
    pub hello: v1::Hello,
    pub peer: Option<SocketAddr>,
    tx: AgentTx,
    last_seen: Instant,
    /// Best clock sample: (round trip, agent clock minus coordinator clock).
    pub clock: Option<(u64, i64)>,
    pub finished: Option<v1::Finished>,
    pub lost: Option<String>,
    pub share: f64,
    /// The stream ended after the agent finished a run: it cannot take the
    /// next one (with --repeat), though the finished run stands.
    left: bool,
}

impl Agent {
    fn alive(&self) -> bool {
        self.lost.is_none() && !self.left
    }
}

/// What the report needs of an agent, once its run is over.
#[derive(Debug, Clone)]
pub struct AgentView {
    pub hello: v1::Hello,
    pub peer: Option<SocketAddr>,
    /// Best clock sample: (round trip, agent clock minus coordinator clock).
    pub clock: Option<(u64, i64)>,
    pub finished: Option<v1::Finished>,
    pub lost: Option<String>,
    pub share: f64,
}

impl From<&Agent> for AgentView {
    fn from(a: &Agent) -> Self {
        Self {
            hello: a.hello.clone(),
            peer: a.peer,
            clock: a.clock,
            finished: a.finished,
            lost: a.lost.clone(),
            share: a.share,
        }
    }
}

/// How one run went, for the report.
#[derive(Debug)]
pub struct RunResult {
    pub agents: Vec<AgentView>,
    pub aggregate: Aggregate,
    /// Set when the run could not be carried out (too few agents, ...).
    pub failure: Option<String>,
    /// Stopped before the schedule ended (interrupt or lost agents).
    pub cut_short: bool,
    /// Whether load was ever scheduled.
    pub started: bool,
    pub started_at: SystemTime,
    /// From the common start to the end of the run.
    pub elapsed: Duration,
    pub corrupt_snapshots: u64,
}

enum PumpEnd {
    Done,
    Deadline,
    Interrupted,
}

struct Fleet {
    spec: RunSpec,
    events: mpsc::Receiver<FleetEvent>,
    epoch: Instant,
    agents: Vec<Agent>,
    accepting: bool,
    aggregate: Aggregate,
    corrupt_snapshots: u64,
    start: Option<Instant>,
    last_progress: Instant,
    progress: Box<dyn FnMut(&Progress) + Send>,
    interrupted: bool,
    /// Where the Prometheus text goes, when --metrics-listen is on.
    metrics: Option<watch::Sender<String>>,
    /// Finished runs, in order.
    results: Vec<RunResult>,
    run_started_at: SystemTime,
}

/// What the live progress line shows.
pub struct Progress {
    pub elapsed: Duration,
    pub duration: Duration,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub completed: u64,
    pub errors: u64,
    pub in_flight: u64,
    /// p99 (ms) of the last complete interval.
    pub p99_ms: Option<f64>,
    /// Sent and completed in the last complete interval (per second).
    pub sent_rps: u64,
    pub completed_rps: u64,
    pub agents_alive: usize,
}

/// Runs the whole fleet side: every repeat of the plan. `interrupt`
/// resolves when the user asks to stop (Ctrl-C); what was measured until
/// then is still returned. There is always at least one result.
pub async fn run(
    spec: RunSpec,
    events: mpsc::Receiver<FleetEvent>,
    interrupt: impl Future<Output = ()>,
    progress: Box<dyn FnMut(&Progress) + Send>,
    metrics: Option<watch::Sender<String>>,
) -> Vec<RunResult> {
    use futures::FutureExt;
    // Fused: once the user has interrupted, it stays quiet instead of being
    // polled again after completion.
    let interrupt = interrupt.fuse();
    let mut interrupt = std::pin::pin!(interrupt);
    let mut fleet = Fleet {
        aggregate: Aggregate::new(0, 0),
        spec,
        events,
        epoch: Instant::now(),
        agents: Vec::new(),
        accepting: true,
        corrupt_snapshots: 0,
        start: None,
        last_progress: Instant::now(),
        progress,
        interrupted: false,
        metrics,
        results: Vec::new(),
        run_started_at: SystemTime::now(),
    };
    if let Some(failure) = fleet.drive(&mut interrupt).await {
        fleet.close_run(Some(failure));
    }
    // Dropping the senders ends every agent's stream: the fleet is done.
    for a in &mut fleet.agents {
        let (closed, _) = mpsc::channel(1);
        a.tx = closed;
    }
    fleet.results
}

impl Fleet {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn alive(&self) -> usize {
        self.agents.iter().filter(|a| a.alive()).count()
    }

    /// The phases; returns why the run could not be carried out, if so.
    async fn drive(
        &mut self,
        interrupt: &mut Pin<&mut impl Future<Output = ()>>,
    ) -> Option<String> {
        let expect = self.spec.expect_agents;
        tracing::info!("waiting for {expect} agent(s)");
        let deadline = Instant::now() + self.spec.agent_timeout;
        match self.pump(deadline, interrupt, |f| f.alive() >= expect).await {
            PumpEnd::Done => {}
            PumpEnd::Deadline => {
                return Some(format!(
                    "only {} of {expect} agent(s) joined within {:?}; start more agents or lower --expect-agents",
                    self.alive(),
                    self.spec.agent_timeout
                ))
            }
            PumpEnd::Interrupted => return Some("interrupted while waiting for agents".into()),
        }
        self.accepting = false;
        self.aggregate = Aggregate::new(self.agents.len(), self.spec.scenarios.len());

        // Clock offsets: NTP-style probes, keeping the minimum-RTT sample.
        for seq in 0..PINGS {
            let now = self.now_ns();
            for a in self.agents.iter().filter(|a| a.alive()) {
                let ping = coordinator_message::Kind::Ping(v1::Ping {
                    seq,
                    coordinator_send_ns: now,
                });
                let _ = a.tx.send(Ok(msg(ping))).await;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            self.pump(Instant::now(), interrupt, |_| false).await;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        self.pump(deadline, interrupt, |f| {
            f.agents.iter().all(|a| a.clock.is_some() || !a.alive())
        })
        .await;
        for a in self
            .agents
            .iter_mut()
            .filter(|a| a.clock.is_none() && a.lost.is_none())
        {
            a.lost = Some("did not answer clock probes".into());
        }
        if self.alive() < expect {
            return Some(format!(
                "{} agent(s) lost before the start",
                expect - self.alive()
            ));
        }

        for run in 0..self.spec.repeats.max(1) {
            if run > 0 {
                tokio::time::sleep(BETWEEN_RUNS).await;
                eprintln!("run {} of {}", run + 1, self.spec.repeats);
            }
            let failure = self.one_run(interrupt).await;
            let stop = failure.is_some() || self.interrupted || self.alive() < expect;
            self.close_run(failure);
            if stop {
                break;
            }
        }
        None
    }

    /// Files the current run's result and resets for the next.
    fn close_run(&mut self, failure: Option<String>) {
        let started = self.start.is_some();
        let cut_short = failure.is_some()
            || self
                .agents
                .iter()
                .any(|a| !a.alive() || a.finished.as_ref().is_some_and(|f| f.cut_short));
        let elapsed = self
            .start
            .map(|s| Instant::now().saturating_duration_since(s))
            .unwrap_or_default();
        let aggregate = std::mem::replace(
            &mut self.aggregate,
            Aggregate::new(self.agents.len(), self.spec.scenarios.len()),
        );
        self.results.push(RunResult {
            agents: self.agents.iter().map(AgentView::from).collect(),
            aggregate,
            failure,
            cut_short: cut_short && started,
            started,
            started_at: self.run_started_at,
            elapsed,
            corrupt_snapshots: std::mem::take(&mut self.corrupt_snapshots),
        });
        for a in &mut self.agents {
            a.finished = None;
        }
        self.start = None;
    }

    /// One run: assign slices with a common start, merge until every agent
    /// finished (or was lost, or the user interrupted).
    async fn one_run(
        &mut self,
        interrupt: &mut Pin<&mut impl Future<Output = ()>>,
    ) -> Option<String> {
        self.run_started_at = SystemTime::now();
        // Assignment: weighted shares, one common start instant.
        let max_rtt = self
            .agents
            .iter()
            .filter_map(|a| a.clock.map(|c| c.0))
            .max()
            .unwrap_or(0);
        let lead = Duration::from_millis(500)
            + Duration::from_nanos(max_rtt.saturating_mul(4).min(10_000_000_000));
        let start_ns = self.now_ns() + lead.as_nanos() as u64;
        // Only live agents share the load: one lost before the start (and
        // perhaps replaced) must not keep a slice nobody sends.
        let weights: Vec<u32> = self
            .agents
            .iter()
            .filter(|a| a.alive())
            .map(|a| self.spec.shares.weight(&a.hello.label, a.hello.cpus))
            .collect();
        if let Err(e) = loadfleet_proto::partition::Interleave::new(&weights) {
            return Some(format!("the agents' shares cannot be dealt: {e}"));
        }
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut slot = 0usize;
        for a in self.agents.iter_mut() {
            if !a.alive() {
                a.share = 0.0;
                continue;
            }
            let index = slot;
            slot += 1;
            a.share = f64::from(weights[index]) / total.max(1) as f64;
            let offset = a.clock.map_or(0, |c| c.1);
            let assignment = v1::Assignment {
                weights: weights.clone(),
                agent_index: index as u32,
                start_at_agent_ns: (start_ns as i128 + offset as i128).max(0) as u64,
                max_in_flight: self.spec.max_in_flight,
                max_lag_ns: self.spec.max_lag.as_nanos() as u64,
                timeout_ns: self.spec.timeout.as_nanos() as u64,
                drain_ns: self.spec.drain.as_nanos() as u64,
                connections: self.spec.connections,
                interval_ns: self.spec.interval.as_nanos() as u64,
                scenarios: self.spec.scenarios.clone(),
            };
            let _ =
                a.tx.send(Ok(msg(coordinator_message::Kind::Assignment(assignment))))
                    .await;
        }
        self.start = Some(self.epoch + Duration::from_nanos(start_ns));

        let end = self.epoch
            + Duration::from_nanos(start_ns)
            + self.spec.duration
            + self.spec.drain
            + Duration::from_secs(10);
        let all_done = |f: &Fleet| f.agents.iter().all(|a| a.finished.is_some() || !a.alive());
        match self.pump(end, interrupt, all_done).await {
            PumpEnd::Done => None,
            PumpEnd::Deadline => {
                self.stop_all("the run overran its deadline").await;
                self.pump(Instant::now() + Duration::from_secs(5), interrupt, all_done)
                    .await;
                Some("agents did not finish in time".into())
            }
            PumpEnd::Interrupted => {
                self.interrupted = true;
                eprintln!("\ninterrupted: stopping agents and collecting what they measured…");
                self.stop_all("interrupted by the user").await;
                let grace = Instant::now() + Duration::from_secs(5);
                self.pump(grace, interrupt, all_done).await;
                None
            }
        }
    }

    async fn stop_all(&mut self, reason: &str) {
        for a in self
            .agents
            .iter()
            .filter(|a| a.alive() && a.finished.is_none())
        {
            let stop = coordinator_message::Kind::Stop(v1::Stop {
                reason: reason.to_string(),
            });
            let _ = a.tx.send(Ok(msg(stop))).await;
        }
    }

    /// Handles events, heartbeats and liveness until `done`, the deadline or
    /// an interrupt.
    async fn pump(
        &mut self,
        deadline: Instant,
        interrupt: &mut Pin<&mut impl Future<Output = ()>>,
        done: impl Fn(&Fleet) -> bool,
    ) -> PumpEnd {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            if done(self) {
                return PumpEnd::Done;
            }
            tokio::select! {
                biased;
                ev = self.events.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    // The service is gone: nothing more can arrive.
                    None => return PumpEnd::Deadline,
                },
                _ = tick.tick() => self.on_tick().await,
                _ = interrupt.as_mut() => return PumpEnd::Interrupted,
                _ = tokio::time::sleep_until(deadline) => {
                    // Let already queued events in before giving up.
                    while let Ok(ev) = self.events.try_recv() {
                        self.handle(ev);
                    }
                    return if done(self) { PumpEnd::Done } else { PumpEnd::Deadline };
                }
            }
        }
    }

    async fn on_tick(&mut self) {
        let now = self.now_ns();
        for a in self.agents.iter_mut().filter(|a| a.alive()) {
            if a.finished.is_none() && a.last_seen.elapsed() > AGENT_SILENCE {
                tracing::warn!("agent {} went silent", a.hello.agent_id);
                a.lost = Some(format!("silent for more than {AGENT_SILENCE:?}"));
                continue;
            }
            let hb = coordinator_message::Kind::Heartbeat(v1::Heartbeat { now_ns: now });
            let _ = a.tx.try_send(Ok(msg(hb)));
        }
        if let Some(start) = self.start {
            if self.last_progress.elapsed() >= Duration::from_secs(1) && Instant::now() > start {
                self.last_progress = Instant::now();
                let p = self.progress_now(start);
                // Metrics first: whoever reads the progress line and then
                // scrapes must see at least the figures it showed.
                if let Some(m) = &self.metrics {
                    let text = crate::metrics::render(
                        &self.aggregate,
                        p.in_flight,
                        p.agents_alive,
                        p.elapsed.as_secs_f64(),
                    );
                    let _ = m.send(text);
                }
                (self.progress)(&p);
            }
        }
    }

    fn progress_now(&self, start: Instant) -> Progress {
        let t = &self.aggregate.totals;
        let elapsed = Instant::now().saturating_duration_since(start);
        // An interval's snapshots reach us a little after it closes; show
        // the last one closed at least SETTLE ago, so the live figures never
        // read a half-merged second as a drop to zero.
        let settled = elapsed.saturating_sub(SETTLE);
        let last_complete = (settled.as_nanos() / self.spec.interval.as_nanos().max(1)) as u64;
        let p99_ms = last_complete
            .checked_sub(1)
            .and_then(|i| self.aggregate.intervals.get(&i))
            .and_then(|iv| iv.latency.as_ref())
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.99) as f64 / 1000.0);
        let last = last_complete
            .checked_sub(1)
            .and_then(|i| self.aggregate.intervals.get(&i));
        let in_flight = last.map_or(0, |iv| iv.in_flight);
        Progress {
            elapsed,
            duration: self.spec.duration,
            intended: t.intended,
            sent: t.sent,
            unsent: t.unsent_total(),
            completed: t.completed,
            errors: t.errors_total(),
            in_flight,
            p99_ms,
            sent_rps: last.map_or(0, |iv| iv.sent),
            completed_rps: last.map_or(0, |iv| iv.completed),
            agents_alive: self.alive(),
        }
    }

    fn handle(&mut self, ev: FleetEvent) {
        match ev {
            FleetEvent::Join {
                hello,
                peer,
                tx,
                reply,
            } => {
                if !self.accepting || self.alive() >= self.spec.expect_agents {
                    let _ = reply.send(Err(Status::resource_exhausted(format!(
                        "the fleet already has its {} agent(s) and the run has begun",
                        self.spec.expect_agents
                    ))));
                    return;
                }
                let index = self.agents.len() as u32;
                tracing::info!(
                    "agent {} joined from {:?} as #{index}",
                    hello.agent_id,
                    peer
                );
                let welcome = coordinator_message::Kind::Welcome(v1::Welcome {
                    agent_index: index,
                    dead_man_secs: DEAD_MAN_SECS,
                });
                if tx.try_send(Ok(msg(welcome))).is_err() || reply.send(Ok(index)).is_err() {
                    return;
                }
                self.agents.push(Agent {
                    hello,
                    peer,
                    tx,
                    last_seen: Instant::now(),
                    clock: None,
                    finished: None,
                    lost: None,
                    share: 0.0,
                    left: false,
                });
            }
            FleetEvent::Message {
                agent,
                msg,
                received,
            } => {
                let now = received.saturating_duration_since(self.epoch).as_nanos() as u64;
                let Some(a) = self.agents.get_mut(agent as usize) else {
                    return;
                };
                a.last_seen = Instant::now();
                match msg.kind {
                    Some(agent_message::Kind::Pong(p)) => {
                        let (t1, t2, t3, t4) = (
                            p.coordinator_send_ns as i128,
                            p.agent_recv_ns as i128,
                            p.agent_send_ns as i128,
                            now as i128,
                        );
                        let rtt = ((t4 - t1) - (t3 - t2)).max(0) as u64;
                        let offset = (((t2 - t1) + (t3 - t4)) / 2) as i64;
                        if a.clock.is_none_or(|(best, _)| rtt < best) {
                            a.clock = Some((rtt, offset));
                        }
                    }
                    Some(agent_message::Kind::Snapshot(s)) => {
                        if let Err(e) = self.aggregate.add(agent as usize, &s) {
                            tracing::error!(
                                "agent {}: dropped a corrupt snapshot: {e}",
                                a.hello.agent_id
                            );
                            self.corrupt_snapshots += 1;
                        }
                    }
                    Some(agent_message::Kind::Finished(f)) => a.finished = Some(f),
                    Some(agent_message::Kind::Refusal(r)) => {
                        tracing::warn!("agent {} refused the run: {}", a.hello.agent_id, r.reason);
                        a.lost = Some(format!("refused the assignment: {}", r.reason));
                        // End its stream: there is nothing more to say.
                        let (closed, _) = mpsc::channel(1);
                        a.tx = closed;
                    }
                    Some(agent_message::Kind::Heartbeat(_))
                    | Some(agent_message::Kind::Hello(_))
                    | None => {}
                }
            }
            FleetEvent::Gone { agent, reason } => {
                if let Some(a) = self.agents.get_mut(agent as usize) {
                    if a.finished.is_some() {
                        a.left = true;
                    } else if a.lost.is_none() {
                        tracing::warn!("agent {} lost: {reason}", a.hello.agent_id);
                        a.lost = Some(reason);
                    }
                }
            }
        }
    }
}

fn msg(kind: coordinator_message::Kind) -> v1::CoordinatorMessage {
    v1::CoordinatorMessage { kind: Some(kind) }
}
