//! Lost agents: giving up on one, carrying out `--on-agent-loss` (go on,
//! abort, or hand its arrivals to the survivors), and booking what its
//! share never reported, so `intended` follows the plan whatever happens to
//! the fleet.

use std::collections::VecDeque;
use std::time::Duration;

use loadfleet_proto::handover::Handover;
use loadfleet_proto::v1::{self, coordinator_message};
use loadfleet_proto::vocab::UnsentReason;
use tokio::time::Instant;

use super::actor::Fleet;
use super::{intended, Loss, OnAgentLoss};

/// With `redistribute`, the survivors take over this long (rounded up to
/// the next interval) after the loss is noticed: time for the hand-over to
/// reach them, and for a lost agent that can still hear us to stop.
const HANDOVER_AFTER: Duration = Duration::from_secs(1);

impl Fleet {
    /// Tells every agent still running to stop, and gives up on those
    /// that cannot hear it.
    pub(super) fn stop_all(&mut self, reason: &str) {
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
    pub(super) fn declare_lost(&mut self, losses: Vec<(usize, Loss)>) {
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
                self.out.console.notice(&format!(
                    "agent {} lost {:.1}s into the run: {loss}",
                    a.hello.agent_id,
                    at.as_secs_f64()
                ));
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
                        self.out
                            .console
                            .line("aborting the run: --on-agent-loss abort");
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
        self.out.console.line(&format!(
            "the {} surviving agent(s) take over its arrivals from {:.1}s (--on-agent-loss redistribute)",
            survivors.len(),
            from.as_secs_f64()
        ));
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

    /// Sets what lost agents never reported against the plan: every
    /// arrival their share held (hand-overs applied) that they did not
    /// report is booked unsent `agent_lost`, per scenario and interval, once
    /// per agent and as soon as it is lost (a lost agent reports nothing
    /// more, and its hand-over is already made), so `report.partial.json`
    /// carries it. At the end of an aborted run (`ended`), the same holds
    /// for every other agent's share, booked `aborted`: they were stopped,
    /// not lost. The counting walks the schedule off the control loop.
    pub(super) async fn book_lost_arrivals(&mut self, ended: bool) {
        let aborted = ended && self.aborted.is_some();
        let booked: Vec<(usize, usize)> = self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.booked && (aborted || a.is_lost()))
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
            let reason = if self.agents[i].is_lost() {
                UnsentReason::AgentLost
            } else {
                UnsentReason::Aborted
            };
            let mut missing_total = 0;
            // What it reported intended but not yet sent was waiting for
            // its connections when it was lost: never sent either.
            for sc in 0..self.spec.scenarios.len() {
                let held = self.aggregate.held(i, sc);
                let last = self.aggregate.reported(i, sc).len().saturating_sub(1);
                self.aggregate
                    .book_held_unsent(i, sc, last as u64, held, reason);
                missing_total += held;
            }
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
                    self.aggregate
                        .book_unsent(i, sc, interval as u64, missing, reason);
                    missing_total += missing;
                }
            }
            self.agents[i].lost_arrivals = missing_total;
            self.agents[i].booked = true;
        }
    }
}
