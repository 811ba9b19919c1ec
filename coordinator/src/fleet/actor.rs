//! The fleet actor: owns every agent's session and the merged state, and is
//! the only place either changes. Its life is three phases, in order —
//! [`Phase::Gathering`] agents, [`Phase::Probing`] their clocks, then
//! [`Phase::Running`] the plan once per repeat (`phases.rs`) — and a stop
//! from the user ends whichever phase it falls in. This file holds its
//! state and its one loop, [`Fleet::pump`]; losses are handled in
//! `loss.rs`, the timer's work in `progress.rs`.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use loadfleet_proto::handover::Handover;
use loadfleet_proto::v1::{self, agent_message};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::clock;
use super::refusals::Refusals;
use super::registry::{Agent, Registry};
use super::validate::{Check, Checks, Rejection};
use super::{FleetEvent, Loss, Outputs, RunResult, RunSpec};
use crate::aggregate::Aggregate;

/// The fleet's own timer: heartbeats out, silence checks, progress. It is
/// served before any queued message, so a flood of snapshots cannot delay it.
const TICK: Duration = Duration::from_millis(250);

/// Where the fleet is in its life; decides, among other things, whether a
/// newcomer may join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for the expected number of agents to say hello.
    Gathering,
    /// Estimating each agent's clock offset against ours.
    Probing,
    /// Carrying out run `n` (0-based) of the plan, or pausing before it.
    Running(usize),
}

/// The user's stop request, polled by every wait.
pub(super) type Stop<'a, F> = Pin<&'a mut F>;

/// How a wait on the fleet ended.
pub(super) enum PumpEnd {
    Done,
    Deadline,
    Stopped,
}

/// The actor's state. Only [`Fleet::run`] drives it.
pub(super) struct Fleet {
    pub(super) spec: RunSpec,
    /// The agents the run waited for, as asked: `spec.expect_agents` drops
    /// to those that came when `--min-agents` lets the run start short.
    pub(super) expected: usize,
    events: mpsc::Receiver<FleetEvent>,
    pub(super) phase: Phase,
    /// Zero of the fleet's clock, against which agents' clocks are set.
    pub(super) epoch: Instant,
    pub(super) agents: Registry,
    /// Would-be agents the service turned away.
    pub(super) refusals: Refusals,
    pub(super) aggregate: Aggregate,
    pub(super) corrupt_snapshots: u64,
    /// Bounds on agents' snapshots and what each agent had refused.
    pub(super) checks: Checks,
    /// The current run's common start instant, once assigned.
    pub(super) start: Option<Instant>,
    /// The current run's weights, by slot (as in every assignment).
    pub(super) weights: Vec<u32>,
    /// The current run's hand-overs, in the order they were sent.
    pub(super) handovers: Vec<Handover>,
    /// Set when the current run is being aborted for a lost agent.
    pub(super) aborted: Option<String>,
    pub(super) run_started_at: SystemTime,
    pub(super) last_progress: Instant,
    pub(super) out: Outputs,
    /// Finished runs, in order.
    pub(super) results: Vec<RunResult>,
    /// Picks each next run's scenarios ([`super::run_sequence`]).
    pub(super) next: Option<super::NextSchedule>,
}

impl Fleet {
    pub(super) fn new(spec: RunSpec, events: mpsc::Receiver<FleetEvent>, out: Outputs) -> Self {
        Fleet {
            aggregate: Aggregate::new(0, 0),
            events,
            phase: Phase::Gathering,
            epoch: Instant::now(),
            agents: Registry::default(),
            refusals: Refusals::default(),
            corrupt_snapshots: 0,
            checks: Checks::new(&spec),
            expected: spec.expect_agents,
            spec,
            start: None,
            weights: Vec::new(),
            handovers: Vec::new(),
            aborted: None,
            run_started_at: SystemTime::now(),
            last_progress: Instant::now(),
            out,
            results: Vec::new(),
            next: None,
        }
    }

    /// Now on the fleet's clock.
    pub(super) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(super) fn wall_minus_mono_ns(&self) -> i64 {
        clock::wall_minus_mono_ns(self.epoch)
    }

    /// Handles events, heartbeats and liveness until `done`, the deadline or
    /// a stop from the user.
    pub(super) async fn pump(
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
                _ = tick.tick() => {
                    // Losses are booked before the tick writes the
                    // partial report, so it shows them as they happen.
                    if self.start.is_some() {
                        self.book_lost_arrivals(false).await;
                    }
                    self.on_tick()
                }
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

    fn handle(&mut self, ev: FleetEvent) {
        match ev {
            FleetEvent::Join {
                hello,
                peer,
                tx,
                seen,
                reply,
            } => {
                // The first run a newcomer could take part in, once the
                // schedule is dealt.
                let next_run = match self.phase {
                    Phase::Gathering => None,
                    Phase::Probing => Some(1),
                    Phase::Running(n) => Some(n + 1),
                };
                let agent = Agent::new(hello, peer, tx, seen);
                self.agents
                    .admit(agent, reply, next_run, &self.spec, &self.out.console);
            }
            FleetEvent::Deliver {
                deliver,
                peer,
                tx,
                seen,
                reply,
            } => self.on_deliver(deliver, peer, tx, seen, reply),
            FleetEvent::Message {
                agent,
                msg,
                received,
            } => self.on_message(agent as usize, *msg, received),
            FleetEvent::Gone { agent, loss } => {
                if let Some(loss) = self.agents.gone(agent as usize, loss) {
                    self.declare_lost(vec![(agent as usize, loss)]);
                }
            }
            FleetEvent::Refused { peer, why } => {
                if let Some(line) = self.refusals.note(peer, &why) {
                    self.out.console.notice(&line);
                }
            }
        }
    }

    fn on_message(&mut self, agent: usize, msg: v1::AgentMessage, received: Instant) {
        let now = received.saturating_duration_since(self.epoch).as_nanos() as u64;
        // Lost stays lost for the run: it sends nothing more. Its last
        // figures, delivered after the loss, are taken in (`late.rs`);
        // whatever else it says now (it was frozen, or its link came back)
        // is ignored, and the report says it came back.
        if self.takes_late(agent, &msg) {
            return self.on_late(agent, msg);
        }
        let Some(a) = self.agents.get_mut(agent) else {
            return;
        };
        if a.is_lost() {
            if a.messages_after_loss == 0 {
                self.out.console.notice(&format!(
                    "agent {} came back after being declared lost; it takes no further part in this run",
                    a.hello.agent_id
                ));
            }
            a.messages_after_loss += 1;
            return;
        }
        let running = matches!(self.phase, Phase::Running(_));
        match msg.kind {
            Some(agent_message::Kind::Pong(_)) if self.phase != Phase::Probing => {
                // A late answer to the last probe is harmless: ignored.
                let r = Rejection::new("pong_out_of_phase", "a pong outside the clock probes");
                self.checks.count(agent, &a.hello.agent_id, &r);
            }
            Some(agent_message::Kind::Snapshot(_) | agent_message::Kind::Finished(_))
                if !running =>
            {
                let r = Rejection::new("out_of_phase", "a snapshot or Finished before the run");
                self.violation(agent, r);
            }
            Some(agent_message::Kind::Pong(p)) => {
                clock::keep_best(&mut a.clock, clock::sample(&p, now))
            }
            Some(agent_message::Kind::Snapshot(s)) => {
                match self.checks.snapshot(agent, &s, &self.aggregate.totals) {
                    Check::Accept(decoded) => self.aggregate.add(agent, &decoded),
                    Check::Duplicate => {
                        let r = Rejection::new(
                            "duplicate",
                            format!("snapshot seq {} again (ignored)", s.seq),
                        );
                        self.checks.count(agent, &a.hello.agent_id, &r);
                    }
                    Check::Violation(r) => {
                        if r.what == "corrupt_histogram" {
                            tracing::error!(
                                "agent {}: dropped a corrupt snapshot: {}",
                                a.hello.agent_id,
                                r.detail
                            );
                            self.corrupt_snapshots += 1;
                        }
                        self.violation(agent, r)
                    }
                }
            }
            Some(agent_message::Kind::Finished(f)) => match self.checks.finished(agent, &f) {
                Ok(()) => {
                    self.out.console.line(&format!(
                        "agent {} finished{}: {} still in flight",
                        a.hello.agent_id,
                        if f.cut_short { " (stopped early)" } else { "" },
                        f.in_flight_at_end
                    ));
                    a.finished = Some(f);
                }
                Err(r) => self.violation(agent, r),
            },
            Some(agent_message::Kind::Refusal(r)) => {
                self.declare_lost(vec![(agent, Loss::Refused(r.reason))]);
            }
            Some(agent_message::Kind::Heartbeat(_))
            | Some(agent_message::Kind::Hello(_))
            | Some(agent_message::Kind::Deliver(_))
            | None => {}
        }
    }

    /// An agent broke the protocol: counted, logged, and dropped as lost
    /// with the reason (what it sent before stays in the figures).
    fn violation(&mut self, agent: usize, r: Rejection) {
        let Some(a) = self.agents.get(agent) else {
            return;
        };
        self.checks.count(agent, &a.hello.agent_id, &r);
        self.out.console.notice(&format!(
            "agent {} broke the protocol ({r}); it is dropped",
            a.hello.agent_id
        ));
        self.declare_lost(vec![(agent, Loss::Protocol(r.to_string()))]);
    }
}
