//! The fleet actor: owns every agent's session and the merged state. Its
//! life is three phases, in order — [`Phase::Gathering`] agents,
//! [`Phase::Probing`] their clocks, then [`Phase::Running`] the plan once
//! per repeat — and a stop from the user ends whichever phase it falls in.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use loadfleet_proto::handover::Handover;
use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use loadfleet_proto::vocab::UnsentReason;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use super::validate::{Check, Checks, Rejection};
use super::{
    intended, AgentTx, AgentView, FleetEvent, LastSeen, Loss, OnAgentLoss, Progress, RunResult,
    RunSpec, Settled, Sink,
};
use crate::aggregate::Aggregate;

/// An agent that stays silent this long is lost. It heartbeats twice a
/// second, so a frozen agent or a cut link is noticed within 3 s of its
/// last message (this plus one tick).
const AGENT_SILENCE: Duration = Duration::from_millis(2500);
/// The fleet's own timer: heartbeats out, silence checks, progress. It is
/// served before any queued message, so a flood of snapshots cannot delay it.
const TICK: Duration = Duration::from_millis(250);
/// With `redistribute`, the survivors take over this long (rounded up to
/// the next interval) after the loss is noticed: time for the hand-over to
/// reach them, and for a lost agent that can still hear us to stop.
const HANDOVER_AFTER: Duration = Duration::from_secs(1);
/// Agents stop on their own after this long without hearing from us.
const DEAD_MAN_SECS: u32 = 3;
/// Clock-offset probes per agent; the one with the smallest round trip wins.
const PINGS: u64 = 8;
/// Time between clock-probe rounds, so each round's pongs can come back.
const PING_GAP: Duration = Duration::from_millis(25);
/// How long stragglers get to answer a probe after the last round.
const PONG_WAIT: Duration = Duration::from_secs(2);
/// How long after an interval closes its snapshots are taken as all in.
const SETTLE: Duration = Duration::from_millis(400);
/// Pause between repeated runs, so one run's drain cannot touch the next.
const BETWEEN_RUNS: Duration = Duration::from_secs(1);
/// How long agents get to report after being told to stop.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Where the fleet is in its life; decides, among other things, whether a
/// newcomer may join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the expected number of agents to say hello.
    Gathering,
    /// Estimating each agent's clock offset against ours.
    Probing,
    /// Carrying out run `n` (0-based) of the plan, or pausing before it.
    Running(usize),
}

/// Whether an agent's stream still carries a run.
#[derive(Debug)]
enum Link {
    Up,
    /// The stream ended after the agent finished a run: that run stands,
    /// but the agent cannot take the next one (with --repeat).
    Left,
    Lost(Loss),
    /// Joined after a run began: no share of it; waits for a later run.
    Standby,
    /// Left while standing by, before any run used it.
    Dropped,
}

/// The user's stop request, polled by every wait.
type Stop<'a, F> = Pin<&'a mut F>;

/// Why the phases ended early.
enum Halt {
    /// The run cannot be carried out; the text says why and what to do.
    Failed(String),
    /// The user asked to stop.
    Stopped,
}

/// How a wait on the fleet ended.
enum PumpEnd {
    Done,
    Deadline,
    Stopped,
}

/// One agent as the fleet knows it.
#[derive(Debug)]
struct Agent {
    hello: v1::Hello,
    peer: Option<SocketAddr>,
    tx: AgentTx,
    /// When its last message arrived, stamped by its stream's reader.
    seen: Arc<LastSeen>,
    /// Best clock sample: (round trip, agent clock minus coordinator clock).
    clock: Option<(u64, i64)>,
    finished: Option<v1::Finished>,
    link: Link,
    share: f64,
    /// Its index in the current run's interleave, when it was dealt a share.
    slot: Option<usize>,
    /// When its loss was noticed in the current run, from the common start.
    lost_at: Option<Duration>,
    /// Arrivals of its share booked unsent `agent_lost` in the current run.
    lost_arrivals: u64,
    /// With `redistribute`: when the survivors took over its arrivals.
    handed_over_at: Option<Duration>,
    /// Messages after its loss, ignored: it came back.
    messages_after_loss: u64,
}

impl Agent {
    fn new(
        hello: v1::Hello,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        seen: Arc<LastSeen>,
        link: Link,
    ) -> Self {
        Agent {
            hello,
            peer,
            tx,
            seen,
            clock: None,
            finished: None,
            link,
            share: 0.0,
            slot: None,
            lost_at: None,
            lost_arrivals: 0,
            handed_over_at: None,
            messages_after_loss: 0,
        }
    }

    fn alive(&self) -> bool {
        matches!(self.link, Link::Up)
    }

    fn is_lost(&self) -> bool {
        matches!(self.link, Link::Lost(_))
    }

    /// Took no part in any run so far (standing by, or left while it was):
    /// the report does not list it.
    fn unused(&self) -> bool {
        matches!(self.link, Link::Standby | Link::Dropped)
    }

    fn lose(&mut self, loss: Loss) {
        tracing::warn!("agent {} lost: {loss}", self.hello.agent_id);
        self.link = Link::Lost(loss);
    }

    /// Queues a message without waiting: a full queue means the agent
    /// stopped reading, and the caller must give up on it rather than let
    /// one agent hold up the fleet. A closed queue is fine: its stream's
    /// end reaches the actor as its own event.
    fn offer(&self, kind: coordinator_message::Kind) -> Result<(), Loss> {
        match self.tx.try_send(Ok(msg(kind))) {
            Ok(()) | Err(TrySendError::Closed(_)) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Loss::NotReading),
        }
    }

    /// Ends its stream: the fleet has nothing more to say to it.
    fn hang_up(&mut self) {
        let (closed, _) = mpsc::channel(1);
        self.tx = closed;
    }

    fn view(&self) -> AgentView {
        AgentView {
            hello: self.hello.clone(),
            peer: self.peer,
            clock: self.clock,
            finished: self.finished,
            lost: match &self.link {
                Link::Lost(loss) => Some(loss.to_string()),
                Link::Up | Link::Left | Link::Standby | Link::Dropped => None,
            },
            share: self.share,
            lost_at: self.lost_at,
            lost_arrivals: self.lost_arrivals,
            handed_over_at: self.handed_over_at,
            messages_after_loss: self.messages_after_loss,
        }
    }
}

/// The actor's state. Only [`Fleet::run`] drives it.
pub(super) struct Fleet {
    spec: RunSpec,
    events: mpsc::Receiver<FleetEvent>,
    phase: Phase,
    epoch: Instant,
    agents: Vec<Agent>,
    aggregate: Aggregate,
    corrupt_snapshots: u64,
    /// Bounds on agents' snapshots and what each agent had refused.
    checks: Checks,
    /// The current run's common start instant, once assigned.
    start: Option<Instant>,
    /// The current run's weights, by slot (as in every assignment).
    weights: Vec<u32>,
    /// The current run's hand-overs, in the order they were sent.
    handovers: Vec<Handover>,
    /// Set when the current run is being aborted for a lost agent.
    aborted: Option<String>,
    run_started_at: SystemTime,
    last_progress: Instant,
    progress: Box<dyn FnMut(&Progress) + Send>,
    /// Where the Prometheus text goes, when --metrics-listen is on.
    metrics: Option<watch::Sender<String>>,
    /// Finished runs, in order.
    results: Vec<RunResult>,
    /// Where settled seconds go while the run goes on (the live outputs).
    sink: Option<Box<dyn Sink>>,
}

impl Fleet {
    pub(super) fn new(
        spec: RunSpec,
        events: mpsc::Receiver<FleetEvent>,
        progress: Box<dyn FnMut(&Progress) + Send>,
        metrics: Option<watch::Sender<String>>,
        sink: Option<Box<dyn Sink>>,
    ) -> Self {
        Fleet {
            aggregate: Aggregate::new(0, 0),
            events,
            phase: Phase::Gathering,
            epoch: Instant::now(),
            agents: Vec::new(),
            corrupt_snapshots: 0,
            checks: Checks::new(&spec),
            spec,
            start: None,
            weights: Vec::new(),
            handovers: Vec::new(),
            aborted: None,
            run_started_at: SystemTime::now(),
            last_progress: Instant::now(),
            progress,
            metrics,
            results: Vec::new(),
            sink,
        }
    }

    /// Walks the phases to the end, or until `stop` resolves.
    pub(super) async fn run(mut self, stop: impl Future<Output = ()>) -> Vec<RunResult> {
        use futures::FutureExt;
        // Fused: once the user has asked to stop, it stays quiet instead of
        // being polled again after completion.
        let stop = stop.fuse();
        let mut stop = std::pin::pin!(stop);
        let failure = match self.phases(&mut stop).await {
            Ok(()) => None,
            Err(Halt::Failed(why)) => Some(why),
            Err(Halt::Stopped) => match self.phase {
                Phase::Gathering => Some("interrupted while waiting for agents".into()),
                Phase::Probing => Some("interrupted while probing the agents' clocks".into()),
                // Between repeats: the runs already done stand.
                Phase::Running(_) => None,
            },
        };
        if failure.is_some() {
            self.close_run(failure);
        }
        // Dropping the senders ends every agent's stream: the fleet is done.
        for a in &mut self.agents {
            if matches!(a.link, Link::Standby) {
                let _ = a.offer(coordinator_message::Kind::Stop(v1::Stop {
                    reason: "the test ended before a run had room for this agent".into(),
                }));
            }
            a.hang_up();
        }
        self.results
    }

    async fn phases(&mut self, stop: &mut Stop<'_, impl Future<Output = ()>>) -> Result<(), Halt> {
        self.gather(stop).await?;
        self.phase = Phase::Probing;
        self.probe_clocks(stop).await?;
        for run in 0..self.spec.repeats.max(1) {
            self.phase = Phase::Running(run);
            if run > 0 {
                if let PumpEnd::Stopped = self
                    .pump(Instant::now() + BETWEEN_RUNS, stop, |_| false)
                    .await
                {
                    return Err(Halt::Stopped);
                }
                eprintln!("run {} of {}", run + 1, self.spec.repeats);
            }
            if run > 0 && self.promote_standby() > 0 {
                self.probe_clocks(stop).await?;
            }
            let (failure, stopped) = self.one_run(stop).await;
            let standing = self
                .agents
                .iter()
                .filter(|a| matches!(a.link, Link::Standby));
            let last = failure.is_some()
                || stopped
                || self.alive() + standing.count() < self.spec.expect_agents;
            self.close_run(failure);
            if last {
                break;
            }
        }
        Ok(())
    }

    /// Before a repeat: agents that joined late and stood by fill the
    /// places of those lost, in the order they came. Returns how many.
    fn promote_standby(&mut self) -> usize {
        let mut needed = self.spec.expect_agents.saturating_sub(self.alive());
        let mut promoted = 0;
        for (i, a) in self.agents.iter_mut().enumerate() {
            if needed == 0 {
                break;
            }
            if !matches!(a.link, Link::Standby) {
                continue;
            }
            let welcome = coordinator_message::Kind::Welcome(v1::Welcome {
                agent_index: i as u32,
                dead_man_secs: DEAD_MAN_SECS,
            });
            if a.offer(welcome).is_err() {
                a.link = Link::Dropped;
                a.hang_up();
                continue;
            }
            eprintln!(
                "agent {}, which stood by, takes part from this run on",
                a.hello.agent_id
            );
            a.link = Link::Up;
            needed -= 1;
            promoted += 1;
        }
        promoted
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Our wall clock minus [`Self::now_ns`], read together.
    fn wall_minus_mono_ns(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        i64::try_from(wall - i128::from(self.now_ns())).unwrap_or(0)
    }

    fn alive(&self) -> usize {
        self.agents.iter().filter(|a| a.alive()).count()
    }

    /// Phase one: wait for the expected agents.
    async fn gather(&mut self, stop: &mut Stop<'_, impl Future<Output = ()>>) -> Result<(), Halt> {
        let expect = self.spec.expect_agents;
        tracing::info!("waiting for {expect} agent(s)");
        let deadline = Instant::now() + self.spec.agent_timeout;
        match self.pump(deadline, stop, |f| f.alive() >= expect).await {
            PumpEnd::Done => {}
            PumpEnd::Deadline => {
                return Err(Halt::Failed(format!(
                    "only {} of {expect} agent(s) joined within {:?}; start more agents or lower --expect-agents",
                    self.alive(),
                    self.spec.agent_timeout
                )))
            }
            PumpEnd::Stopped => return Err(Halt::Stopped),
        }
        self.aggregate = Aggregate::new(self.agents.len(), self.spec.scenarios.len());
        Ok(())
    }

    /// Phase two: NTP-style clock probes, keeping each agent's minimum
    /// round-trip sample. An agent that never answers is lost.
    async fn probe_clocks(
        &mut self,
        stop: &mut Stop<'_, impl Future<Output = ()>>,
    ) -> Result<(), Halt> {
        for seq in 0..PINGS {
            let now = self.now_ns();
            let mut deaf = Vec::new();
            for (i, a) in self.agents.iter().enumerate().filter(|(_, a)| a.alive()) {
                let ping = coordinator_message::Kind::Ping(v1::Ping {
                    seq,
                    coordinator_send_ns: now,
                });
                if let Err(loss) = a.offer(ping) {
                    deaf.push((i, loss));
                }
            }
            self.declare_lost(deaf);
            if let PumpEnd::Stopped = self.pump(Instant::now() + PING_GAP, stop, |_| false).await {
                return Err(Halt::Stopped);
            }
        }
        let answered = |f: &Fleet| f.agents.iter().all(|a| a.clock.is_some() || !a.alive());
        if let PumpEnd::Stopped = self.pump(Instant::now() + PONG_WAIT, stop, answered).await {
            return Err(Halt::Stopped);
        }
        let mute: Vec<(usize, Loss)> = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| a.clock.is_none() && !a.is_lost())
            .map(|(i, _)| (i, Loss::NoClockAnswer))
            .collect();
        self.declare_lost(mute);
        let expect = self.spec.expect_agents;
        if self.alive() < expect {
            return Err(Halt::Failed(format!(
                "{} agent(s) lost before the start",
                expect - self.alive()
            )));
        }
        Ok(())
    }

    /// Phase three, once per repeat: assign slices with a common start,
    /// merge until every agent finished (or was lost, or the user stopped
    /// the run). Returns why the run failed, if it did, and whether the
    /// user stopped it.
    async fn one_run(
        &mut self,
        stop: &mut Stop<'_, impl Future<Output = ()>>,
    ) -> (Option<String>, bool) {
        self.run_started_at = SystemTime::now();
        let start_ns = match self.assign() {
            Ok(start_ns) => start_ns,
            Err(why) => return (Some(why), false),
        };

        let end = self.epoch
            + Duration::from_nanos(start_ns)
            + self.spec.duration
            + self.spec.drain
            + Duration::from_secs(10);
        let all_done = |f: &Fleet| f.agents.iter().all(|a| a.finished.is_some() || !a.alive());
        let ended = match self.pump(end, stop, all_done).await {
            PumpEnd::Done => (None, false),
            PumpEnd::Deadline => {
                self.stop_all("the run overran its deadline");
                self.pump(Instant::now() + STOP_GRACE, stop, all_done).await;
                (Some("agents did not finish in time".into()), false)
            }
            PumpEnd::Stopped => {
                eprintln!("\ninterrupted: stopping agents and collecting what they measured…");
                self.stop_all("interrupted by the user");
                self.pump(Instant::now() + STOP_GRACE, stop, all_done).await;
                (None, true)
            }
        };
        self.book_lost_arrivals().await;
        ended
    }

    /// Sets what lost agents never reported against the plan: every
    /// arrival their share held (hand-overs applied) that they did not
    /// report is booked unsent `agent_lost`, per scenario and interval. After
    /// an abort, the same holds for every agent's share. The counting walks
    /// the schedule off the control loop.
    async fn book_lost_arrivals(&mut self) {
        let aborted = self.aborted.is_some();
        let booked: Vec<(usize, usize)> = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| aborted || a.is_lost())
            .filter_map(|(i, a)| a.slot.map(|slot| (i, slot)))
            .collect();
        if booked.is_empty() {
            return;
        }
        let (scenarios, weights, handovers, interval) = (
            self.spec.scenarios.clone(),
            self.weights.clone(),
            self.handovers.clone(),
            self.spec.interval.as_nanos() as u64,
        );
        let planned = tokio::task::spawn_blocking(move || {
            intended::planned(&scenarios, &weights, &handovers, interval)
        })
        .await;
        let planned = match planned {
            Ok(Ok(planned)) => planned,
            Ok(Err(e)) => {
                tracing::error!("cannot count the plan's arrivals: {e}");
                return;
            }
            Err(e) => {
                tracing::error!("counting the plan's arrivals failed: {e}");
                return;
            }
        };
        for (i, slot) in booked {
            let mut missing_total = 0;
            for (sc, counts) in planned.iter().enumerate() {
                let Some(row) = counts.as_ref().and_then(|c| c.get(slot)) else {
                    continue;
                };
                for (interval, &planned) in row.iter().enumerate() {
                    let reported = self
                        .aggregate
                        .reported(i, sc)
                        .get(interval)
                        .copied()
                        .unwrap_or(0);
                    let missing = planned.saturating_sub(reported);
                    self.aggregate.book_unsent(
                        i,
                        sc,
                        interval as u64,
                        missing,
                        UnsentReason::AgentLost,
                    );
                    missing_total += missing;
                }
            }
            self.agents[i].lost_arrivals = missing_total;
        }
    }

    /// Deals the plan to the live agents by weight, with one common start
    /// instant far enough ahead for every assignment to arrive; returns
    /// that instant on the fleet's clock.
    fn assign(&mut self) -> Result<u64, String> {
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
            return Err(format!("the agents' shares cannot be dealt: {e}"));
        }
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        self.weights = weights.clone();
        self.handovers.clear();
        self.aborted = None;
        // Set before the assignments go out: an agent lost from here on
        // held a share, whose arrivals must be accounted for.
        self.start = Some(self.epoch + Duration::from_nanos(start_ns));
        let mut slot = 0usize;
        let mut deaf = Vec::new();
        for (i, a) in self.agents.iter_mut().enumerate() {
            if !a.alive() {
                a.share = 0.0;
                a.slot = None;
                continue;
            }
            let index = slot;
            slot += 1;
            a.slot = Some(index);
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
                protocol: self.spec.protocol.as_str().to_string(),
                tls: self.spec.tls.clone(),
            };
            if let Err(loss) = a.offer(coordinator_message::Kind::Assignment(assignment)) {
                deaf.push((i, loss));
            }
        }
        self.declare_lost(deaf);
        Ok(start_ns)
    }

    /// Files the current run's result and resets for the next.
    fn close_run(&mut self, failure: Option<String>) {
        let started = self.start.is_some();
        if started {
            // The run is over: every second it has is settled.
            self.settle(u64::MAX);
        }
        // A lost agent does not cut the run short: the others ran the
        // schedule to its end, and its share is accounted for. Only a stop
        // (by the user, an overrun or an abort) does.
        let cut_short = failure.is_some()
            || self.aborted.is_some()
            || self
                .agents
                .iter()
                .any(|a| !a.is_lost() && a.finished.as_ref().is_some_and(|f| f.cut_short));
        let elapsed = self
            .start
            .map(|s| Instant::now().saturating_duration_since(s))
            .unwrap_or_default();
        let mut aggregate = std::mem::replace(
            &mut self.aggregate,
            Aggregate::new(self.agents.len(), self.spec.scenarios.len()),
        );
        // The report lists agents by position: drop those it leaves out.
        let mut position = 0;
        let unused: Vec<bool> = self.agents.iter().map(Agent::unused).collect();
        aggregate.agents.retain(|_| {
            position += 1;
            !unused.get(position - 1).copied().unwrap_or(false)
        });
        self.results.push(RunResult {
            agents: self
                .agents
                .iter()
                .filter(|a| !a.unused())
                .map(Agent::view)
                .collect(),
            aggregate,
            failure,
            cut_short: cut_short && started,
            started,
            started_at: self.run_started_at,
            wall_minus_mono_ns: self.wall_minus_mono_ns(),
            elapsed,
            corrupt_snapshots: std::mem::take(&mut self.corrupt_snapshots),
            protocol: self.checks.ledgers(self.agents.len()),
            on_agent_loss: self.spec.on_agent_loss,
            aborted: self.aborted.take(),
        });
        for a in &mut self.agents {
            a.finished = None;
            a.slot = None;
            a.lost_at = None;
            a.lost_arrivals = 0;
            a.handed_over_at = None;
            a.messages_after_loss = 0;
        }
        self.checks.new_run();
        self.start = None;
        self.handovers.clear();
    }

    fn stop_all(&mut self, reason: &str) {
        let deaf = self.stop_running(reason);
        self.declare_lost(deaf);
    }

    /// Tells every agent still running to stop; returns those whose queue
    /// was full.
    fn stop_running(&self, reason: &str) -> Vec<(usize, Loss)> {
        let mut deaf = Vec::new();
        for (i, a) in self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| a.alive() && a.finished.is_none())
        {
            let stop = coordinator_message::Kind::Stop(v1::Stop {
                reason: reason.to_string(),
            });
            if let Err(loss) = a.offer(stop) {
                deaf.push((i, loss));
            }
        }
        deaf
    }

    /// Gives up on agents: each is told why (if it can still hear), its
    /// stream is ended, and it takes no further part in the run — later
    /// messages from it are ignored. During a run, the fleet then carries
    /// out `--on-agent-loss`. Losses caused on the way (a survivor that
    /// cannot take a hand-over) are handled in turn.
    fn declare_lost(&mut self, losses: Vec<(usize, Loss)>) {
        let mut queue: VecDeque<(usize, Loss)> = losses.into();
        while let Some((i, loss)) = queue.pop_front() {
            let since_start = self
                .start
                .map(|s| Instant::now().saturating_duration_since(s));
            let Some(a) = self.agents.get_mut(i) else {
                continue;
            };
            if !a.alive() {
                continue;
            }
            let stop = coordinator_message::Kind::Stop(v1::Stop {
                reason: format!(
                    "the coordinator declared this agent lost ({loss}); the run goes on without it"
                ),
            });
            let _ = a.offer(stop);
            let in_run = since_start.is_some() && a.slot.is_some() && a.finished.is_none();
            if let (true, Some(at)) = (in_run, since_start) {
                eprintln!(
                    "\nagent {} lost {:.1}s into the run: {loss}",
                    a.hello.agent_id,
                    at.as_secs_f64()
                );
                a.lost_at = Some(at);
            }
            let id = a.hello.agent_id.clone();
            a.lose(loss);
            a.hang_up();
            let (true, Some(at)) = (in_run, since_start) else {
                continue;
            };
            match self.spec.on_agent_loss {
                OnAgentLoss::Continue => {}
                OnAgentLoss::Abort => {
                    if self.aborted.is_none() {
                        self.aborted = Some(id.clone());
                        eprintln!("aborting the run: --on-agent-loss abort");
                        let reason = format!("agent {id} was lost and --on-agent-loss is abort");
                        queue.extend(self.stop_running(&reason));
                    }
                }
                OnAgentLoss::Redistribute => queue.extend(self.hand_over(i, at)),
            }
        }
    }

    /// `redistribute`: from the first interval boundary at least
    /// [`HANDOVER_AFTER`] after the loss was noticed, the running survivors
    /// share agent `i`'s arrivals. Returns survivors that could not be told.
    fn hand_over(&mut self, i: usize, noticed: Duration) -> Vec<(usize, Loss)> {
        let Some(lost) = self.agents[i].slot else {
            return Vec::new();
        };
        let interval = self.spec.interval.as_nanos().max(1) as u64;
        let earliest = (noticed + HANDOVER_AFTER).as_nanos() as u64;
        let from_ns = earliest.div_ceil(interval) * interval;
        if from_ns >= self.spec.duration.as_nanos() as u64 {
            // The schedule ends before the hand-over: nothing to take over.
            return Vec::new();
        }
        let survivors: Vec<(usize, usize)> = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| a.alive() && a.finished.is_none())
            .filter_map(|(j, a)| a.slot.map(|slot| (j, slot)))
            .collect();
        if survivors.is_empty() {
            return Vec::new();
        }
        let slots: Vec<usize> = survivors.iter().map(|&(_, s)| s).collect();
        let handover = match Handover::new(lost, from_ns, slots.clone(), &self.weights) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("cannot hand over agent {lost}'s share: {e}");
                return Vec::new();
            }
        };
        self.handovers.push(handover);
        let from = Duration::from_nanos(from_ns);
        self.agents[i].handed_over_at = Some(from);
        eprintln!(
            "the {} surviving agent(s) take over its arrivals from {:.1}s (--on-agent-loss redistribute)",
            survivors.len(),
            from.as_secs_f64()
        );
        let mut deaf = Vec::new();
        for (j, _) in survivors {
            let takeover = coordinator_message::Kind::Takeover(v1::Takeover {
                lost_agent_index: lost as u32,
                from_ns_after_start: from_ns,
                survivors: slots.iter().map(|&s| s as u32).collect(),
            });
            if let Err(loss) = self.agents[j].offer(takeover) {
                deaf.push((j, loss));
            }
        }
        deaf
    }

    /// Handles events, heartbeats and liveness until `done`, the deadline or
    /// a stop from the user.
    async fn pump(
        &mut self,
        deadline: Instant,
        stop: &mut Stop<'_, impl Future<Output = ()>>,
        done: impl Fn(&Fleet) -> bool,
    ) -> PumpEnd {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if done(self) {
                return PumpEnd::Done;
            }
            // The timer, the user's stop and the deadline come before any
            // queued message: however many snapshots wait, heartbeats leave
            // on time and silence is judged on time.
            tokio::select! {
                biased;
                _ = tick.tick() => self.on_tick(),
                _ = stop.as_mut() => return PumpEnd::Stopped,
                _ = tokio::time::sleep_until(deadline) => {
                    // Let already queued events in before giving up.
                    while let Ok(ev) = self.events.try_recv() {
                        self.handle(ev);
                    }
                    return if done(self) { PumpEnd::Done } else { PumpEnd::Deadline };
                }
                ev = self.events.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    // The service is gone: nothing more can arrive.
                    None => return PumpEnd::Deadline,
                },
            }
        }
    }

    fn on_tick(&mut self) {
        let now = self.now_ns();
        let mut lost = Vec::new();
        for a in self
            .agents
            .iter_mut()
            .filter(|a| matches!(a.link, Link::Standby))
        {
            // Standing by: kept alive with heartbeats, let go when silent.
            let hb = coordinator_message::Kind::Heartbeat(v1::Heartbeat { now_ns: now });
            if a.seen.silence() > AGENT_SILENCE || a.offer(hb).is_err() {
                a.link = Link::Dropped;
                a.hang_up();
            }
        }
        for (i, a) in self.agents.iter().enumerate().filter(|(_, a)| a.alive()) {
            if a.finished.is_none() && a.seen.silence() > AGENT_SILENCE {
                lost.push((i, Loss::Silent(AGENT_SILENCE)));
                continue;
            }
            let hb = coordinator_message::Kind::Heartbeat(v1::Heartbeat { now_ns: now });
            if let Err(loss) = a.offer(hb) {
                lost.push((i, loss));
            }
        }
        self.declare_lost(lost);
        if let Some(start) = self.start {
            if Instant::now() > start {
                self.settle(self.settled_below(start));
            }
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

    /// The intervals below this index closed at least SETTLE ago: their
    /// snapshots are taken as all in.
    fn settled_below(&self, start: Instant) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(start);
        let settled = elapsed.saturating_sub(SETTLE);
        (settled.as_nanos() / self.spec.interval.as_nanos().max(1)) as u64
    }

    /// Hands the settled seconds to the sink (the live outputs), with the
    /// run so far for a partial report.
    fn settle(&mut self, below: u64) {
        let wall_minus_mono_ns = self.wall_minus_mono_ns();
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        let Phase::Running(run) = self.phase else {
            return;
        };
        let (agents, start) = (&self.agents, self.start);
        let (started_at, corrupt_snapshots) = (self.run_started_at, self.corrupt_snapshots);
        let (on_agent_loss, aborted) = (self.spec.on_agent_loss, self.aborted.clone());
        let protocol = self.checks.ledgers(agents.len());
        let so_far = |aggregate| RunResult {
            agents: agents.iter().map(Agent::view).collect(),
            aggregate,
            failure: None,
            // As if cut short here: windows end now, figures are partial.
            cut_short: true,
            started: true,
            started_at,
            wall_minus_mono_ns,
            elapsed: start
                .map(|s| Instant::now().saturating_duration_since(s))
                .unwrap_or_default(),
            corrupt_snapshots,
            protocol: protocol.clone(),
            on_agent_loss,
            aborted: aborted.clone(),
        };
        sink.settled(Settled {
            run,
            started_at,
            below,
            aggregate: &mut self.aggregate,
            so_far: &so_far,
        });
    }

    fn progress_now(&self, start: Instant) -> Progress {
        let t = &self.aggregate.totals;
        let elapsed = Instant::now().saturating_duration_since(start);
        // An interval's snapshots reach us a little after it closes; show
        // the last one closed at least SETTLE ago, so the live figures never
        // read a half-merged second as a drop to zero.
        let last_complete = self.settled_below(start);
        let p99_ms = last_complete
            .checked_sub(1)
            .and_then(|i| self.aggregate.intervals.get(&i))
            .and_then(|iv| iv.latency_summary().p99_us)
            .map(|us| us as f64 / 1000.0);
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
                seen,
                reply,
            } => self.join(hello, peer, tx, seen, reply),
            FleetEvent::Message {
                agent,
                msg,
                received,
            } => self.on_message(agent, *msg, received),
            FleetEvent::Gone { agent, loss } => {
                let Some(a) = self.agents.get_mut(agent as usize) else {
                    return;
                };
                if a.alive() && a.finished.is_some() {
                    a.link = Link::Left;
                } else if matches!(a.link, Link::Standby) {
                    a.link = Link::Dropped;
                } else {
                    self.declare_lost(vec![(agent as usize, loss)]);
                }
            }
        }
    }

    /// Takes a newcomer while gathering. After that the schedule is dealt:
    /// a newcomer gets no share of the running one. It is told so, and
    /// stands by for the next run if there is one (`--repeat`); otherwise
    /// it is refused with the reason.
    fn join(
        &mut self,
        hello: v1::Hello,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        seen: Arc<LastSeen>,
        reply: tokio::sync::oneshot::Sender<Result<u32, Status>>,
    ) {
        let index = self.agents.len() as u32;
        let late = self.phase != Phase::Gathering || self.alive() >= self.spec.expect_agents;
        if late {
            let repeats = self.spec.repeats.max(1);
            let next = match self.phase {
                Phase::Running(n) => n + 1,
                Phase::Gathering | Phase::Probing => 1,
            };
            let standing = self
                .agents
                .iter()
                .filter(|a| matches!(a.link, Link::Standby))
                .count();
            let why = if next >= repeats {
                Some(format!(
                    "the fleet already has its {} agent(s) and the run has begun; no later run is planned (--repeat {repeats}), so this agent gets no share",
                    self.spec.expect_agents
                ))
            } else if standing >= self.spec.expect_agents {
                Some(format!(
                    "the run has begun and {standing} agent(s) already stand by for the next one"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                eprintln!("\nrefused agent {} from {peer:?}: {why}", hello.agent_id);
                let _ = reply.send(Err(Status::resource_exhausted(why)));
                return;
            }
            let why = format!(
                "the run has begun: this agent gets no share of the running schedule and stands by for run {} of {repeats}",
                next + 1
            );
            eprintln!("\nagent {} joined late: {why}", hello.agent_id);
            let standby = coordinator_message::Kind::Standby(v1::Standby { reason: why });
            if tx.try_send(Ok(msg(standby))).is_err() || reply.send(Ok(index)).is_err() {
                return;
            }
            self.agents
                .push(Agent::new(hello, peer, tx, seen, Link::Standby));
            return;
        }
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
        self.agents
            .push(Agent::new(hello, peer, tx, seen, Link::Up));
    }

    fn on_message(&mut self, agent: u32, msg: v1::AgentMessage, received: Instant) {
        let now = received.saturating_duration_since(self.epoch).as_nanos() as u64;
        let Some(a) = self.agents.get_mut(agent as usize) else {
            return;
        };
        if a.is_lost() {
            // Lost stays lost for the run: whatever it says now (it was
            // frozen, or its link came back) is ignored, and the report
            // says it came back.
            if a.messages_after_loss == 0 {
                eprintln!(
                    "\nagent {} came back after being declared lost; it takes no further part in this run",
                    a.hello.agent_id
                );
            }
            a.messages_after_loss += 1;
            return;
        }
        let running = matches!(self.phase, Phase::Running(_));
        match msg.kind {
            Some(agent_message::Kind::Pong(_)) if self.phase != Phase::Probing => {
                // A late answer to the last probe is harmless: ignored.
                let r = Rejection::new("pong_out_of_phase", "a pong outside the clock probes");
                self.checks.count(agent as usize, &a.hello.agent_id, &r);
            }
            Some(agent_message::Kind::Snapshot(_) | agent_message::Kind::Finished(_))
                if !running =>
            {
                let r = Rejection::new("out_of_phase", "a snapshot or Finished before the run");
                self.violation(agent as usize, r);
            }
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
                match self
                    .checks
                    .snapshot(agent as usize, &s, &self.aggregate.totals)
                {
                    Check::Accept => {}
                    Check::Duplicate => {
                        let r = Rejection::new(
                            "duplicate",
                            format!("snapshot seq {} again (ignored)", s.seq),
                        );
                        self.checks.count(agent as usize, &a.hello.agent_id, &r);
                        return;
                    }
                    Check::Violation(r) => return self.violation(agent as usize, r),
                }
                if let Err(e) = self.aggregate.add(agent as usize, &s) {
                    tracing::error!(
                        "agent {}: dropped a corrupt snapshot: {e}",
                        a.hello.agent_id
                    );
                    self.corrupt_snapshots += 1;
                    let r = Rejection::new("corrupt_histogram", e.to_string());
                    self.violation(agent as usize, r);
                }
            }
            Some(agent_message::Kind::Finished(f)) => {
                match self.checks.finished(agent as usize, &f) {
                    Ok(()) => a.finished = Some(f),
                    Err(r) => self.violation(agent as usize, r),
                }
            }
            Some(agent_message::Kind::Refusal(r)) => {
                self.declare_lost(vec![(agent as usize, Loss::Refused(r.reason))]);
            }
            Some(agent_message::Kind::Heartbeat(_))
            | Some(agent_message::Kind::Hello(_))
            | None => {}
        }
    }
}

impl Fleet {
    /// An agent broke the protocol: counted, logged, and dropped as lost
    /// with the reason (what it sent before stays in the figures).
    fn violation(&mut self, agent: usize, r: Rejection) {
        let Some(a) = self.agents.get(agent) else {
            return;
        };
        self.checks.count(agent, &a.hello.agent_id, &r);
        eprintln!(
            "\nagent {} broke the protocol ({r}); it is dropped",
            a.hello.agent_id
        );
        self.declare_lost(vec![(agent, Loss::Protocol(r.to_string()))]);
    }
}

fn msg(kind: coordinator_message::Kind) -> v1::CoordinatorMessage {
    v1::CoordinatorMessage { kind: Some(kind) }
}
