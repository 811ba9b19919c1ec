//! The fleet's phases, in order: gather the expected agents, probe their
//! clocks, then per repeat deal the plan with one common start, merge until
//! every agent finished or was lost, and file the run's result.

use std::future::Future;
use std::time::{Duration, SystemTime};

use loadfleet_proto::v1::{self, coordinator_message};
use loadfleet_proto::vocab::UnsentReason;
use tokio::time::Instant;

use super::actor::{Fleet, Phase, PumpEnd, Stop};
use super::clock::{self, PINGS, PING_GAP, PONG_WAIT};
use super::registry::Agent;
use super::{Loss, RunResult};
use crate::aggregate::Aggregate;

/// Pause between repeated runs, so one run's drain cannot touch the next.
const BETWEEN_RUNS: Duration = Duration::from_secs(1);
/// How long agents get to report after being told to stop.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long past the schedule and its drain a run may go before agents
/// are told to stop: time for their last reports to come in.
const OVERRUN: Duration = Duration::from_secs(10);

/// Why the phases ended early.
enum Halt {
    /// The run cannot be carried out; the text says why and what to do.
    Failed(String),
    /// The user asked to stop.
    Stopped,
}

impl Fleet {
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
            if matches!(self.phase, Phase::Gathering | Phase::Probing) {
                self.book_unstarted().await;
            }
            self.close_run(failure);
        }
        // Ending every agent's stream tells it the fleet is done.
        self.agents.hang_up_all();
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
                if self.next.is_none() {
                    self.out
                        .console
                        .line(&format!("run {} of {}", run + 1, self.spec.repeats));
                }
            }
            let expect = self.spec.expect_agents;
            if run > 0 && self.agents.promote_standby(expect, &self.out.console) > 0 {
                // The agents that take a lost one's place have no clock
                // sample yet: their pongs count only in the probing phase.
                self.phase = Phase::Probing;
                self.probe_clocks(stop).await?;
                self.phase = Phase::Running(run);
            }
            let (failure, stopped) = self.one_run(stop).await;
            let last = failure.is_some()
                || stopped
                || self.agents.alive() + self.agents.standing() < expect;
            self.close_run(failure);
            if last {
                break;
            }
            if let Some(next) = self.next.as_mut() {
                match self.results.last().and_then(next) {
                    Some(scenarios) if scenarios.len() == self.spec.scenarios.len() => {
                        self.spec.scenarios = scenarios;
                    }
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// Phase one: wait for the expected agents.
    async fn gather(&mut self, stop: &mut Stop<'_, impl Future<Output = ()>>) -> Result<(), Halt> {
        let expect = self.spec.expect_agents;
        tracing::info!("waiting for {expect} agent(s)");
        let deadline = Instant::now() + self.spec.agent_timeout;
        match self
            .pump(deadline, stop, |f| f.agents.alive() >= expect)
            .await
        {
            PumpEnd::Done => {}
            PumpEnd::Deadline => {
                let joined = self.agents.alive();
                let min = self.spec.min_agents;
                // The refusals come first when there were any: the agents
                // that were refused are most likely the ones missing.
                let refused = self
                    .refusals
                    .summary()
                    .map_or_else(String::new, |r| format!("; the coordinator {r}"));
                if joined == 0 || joined < min {
                    return Err(Halt::Failed(format!(
                        "only {joined} of {expect} agent(s) joined within {:?}{refused}; {}start more agents, lower --expect-agents{}",
                        self.spec.agent_timeout,
                        if refused.is_empty() { "" } else { "fix the refused agents, " },
                        if min < expect {
                            format!(" or --min-agents ({min})")
                        } else {
                            " or set --min-agents to start with fewer".to_string()
                        }
                    )));
                }
                self.out.console.notice(&format!(
                    "only {joined} of {expect} agent(s) joined within {:?}{refused}; starting with them (--min-agents {min}): each takes a larger share",
                    self.spec.agent_timeout
                ));
                // From here on the fleet is the agents that came: a repeat
                // goes on with them, and latecomers stand by.
                self.spec.expect_agents = joined;
            }
            PumpEnd::Stopped => return Err(Halt::Stopped),
        }
        self.aggregate = Aggregate::new(self.agents.len(), self.spec.scenarios.len());
        Ok(())
    }

    /// Phase two: clock probes, keeping each agent's best sample. An agent
    /// that never answers is lost: it could not share a start instant.
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
        if self.agents.alive() < expect {
            return Err(Halt::Failed(format!(
                "{} agent(s) lost before the start",
                expect - self.agents.alive()
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
            + OVERRUN;
        // Done when every agent finished or was lost, and no lost agent
        // may still come back with its last figures (`late.rs`).
        let all_done = |f: &Fleet| {
            f.agents
                .iter()
                .all(|a| a.finished.is_some() || (!a.alive() && !f.awaits_figures(a)))
        };
        let ended = match self.pump(end, stop, all_done).await {
            PumpEnd::Done => (None, false),
            PumpEnd::Deadline => {
                self.stop_all("the run overran its deadline");
                self.pump(Instant::now() + STOP_GRACE, stop, all_done).await;
                (Some("agents did not finish in time".into()), false)
            }
            PumpEnd::Stopped => {
                self.out
                    .console
                    .notice("interrupted: stopping agents and collecting what they measured…");
                self.stop_all("interrupted by the user");
                self.pump(Instant::now() + STOP_GRACE, stop, all_done).await;
                (None, true)
            }
        };
        self.book_lost_arrivals(true).await;
        self.close_late();
        ended
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
        let start_ns = self.now_ns() + clock::start_lead(max_rtt).as_nanos() as u64;
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
            // Never 0, which names no run.
            a.run_key = rand::random::<u64>().max(1);
            a.share = f64::from(weights[index]) / total.max(1) as f64;
            let offset = a.clock.map_or(0, |c| c.1);
            let assignment = v1::Assignment {
                weights: weights.clone(),
                agent_index: index as u32,
                start_at_agent_ns: clock::at_agent(start_ns, offset),
                max_in_flight: self.spec.max_in_flight,
                max_lag_ns: self.spec.max_lag.as_nanos() as u64,
                timeout_ns: self.spec.timeout.as_nanos() as u64,
                drain_ns: self.spec.drain.as_nanos() as u64,
                connections: self.spec.connections,
                max_connections: self.spec.max_connections,
                interval_ns: self.spec.interval.as_nanos() as u64,
                scenarios: self.spec.scenarios.clone(),
                protocol: self.spec.protocol.as_str().to_string(),
                tls: self.spec.tls.clone(),
                run_key: a.run_key,
            };
            match a.offer(coordinator_message::Kind::Assignment(assignment)) {
                Ok(()) => self.out.console.line(&format!(
                    "agent {} assigned {:.1}% of the schedule",
                    a.hello.agent_id,
                    a.share * 100.0
                )),
                Err(loss) => deaf.push((i, loss)),
            }
        }
        self.declare_lost(deaf);
        Ok(start_ns)
    }

    /// A run that never started still intended the plan's arrivals: every
    /// one is booked unsent `no_agents`, so `intended` follows the plan
    /// whatever happened to the fleet (closed-model scenarios, whose
    /// requests follow responses, intended none).
    async fn book_unstarted(&mut self) {
        let (scenarios, interval) = (
            self.spec.scenarios.clone(),
            self.spec.interval.as_nanos() as u64,
        );
        let planned = tokio::task::spawn_blocking(move || {
            super::intended::planned(&scenarios, &[1], &[], interval, &[])
        })
        .await;
        let planned = match planned {
            Ok(Ok(planned)) => planned,
            Ok(Err(e)) => return tracing::error!("cannot count the plan's arrivals: {e}"),
            Err(e) => return tracing::error!("counting the plan's arrivals failed: {e}"),
        };
        self.aggregate = Aggregate::new(self.agents.len(), self.spec.scenarios.len());
        for (sc, counts) in planned.iter().enumerate() {
            let Some(row) = counts.as_ref().and_then(|c| c.counts.first()) else {
                continue;
            };
            // Booked to no agent: none had a share.
            for (i, &n) in row.iter().enumerate() {
                self.aggregate
                    .book_unsent(usize::MAX, sc, i as u64, n, UnsentReason::NoAgents);
            }
        }
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
        let keep: Vec<bool> = self.agents.iter().map(|a| !a.unused()).collect();
        aggregate.keep_agents(&keep);
        let joined = self.agents.iter().filter(|a| a.slot.is_some()).count();
        self.results.push(RunResult {
            agents_expected: self.expected,
            agents_joined: if started { joined } else { self.agents.alive() },
            agents: self
                .agents
                .iter()
                .filter(|a| !a.unused())
                .map(Agent::view)
                .collect(),
            late_agents: self.agents.take_late(),
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
        self.agents.new_run();
        self.checks.new_run();
        self.start = None;
        self.handovers.clear();
    }
}
