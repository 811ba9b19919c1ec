//! Lost agents: giving up on one, carrying out `--on-agent-loss` (go on,
//! abort, or hand its arrivals to the survivors), and booking what its
//! share never reported, so `intended` follows the plan whatever happens to
//! the fleet: unreported up to the instant it had certainly stopped,
//! unsent `agent_lost` after (`unreported.rs`).

use std::collections::VecDeque;
use std::time::Duration;

use loadfleet_proto::handover::Handover;
use loadfleet_proto::v1::{self, coordinator_message};
use loadfleet_proto::vocab::UnsentReason;
use tokio::time::Instant;

use super::actor::Fleet;
use super::registry::DEAD_MAN_SECS;
use super::unreported::Booking;
use super::{intended, Loss, OnAgentLoss};

/// With `redistribute`, the survivors take over at least this long
/// (rounded up to the next interval) after the loss is noticed: time for
/// the hand-over to reach them. Never before the lost agent had certainly
/// stopped ([`may_send_for`]), so no arrival it may have sent is sent again.
const HANDOVER_AFTER: Duration = Duration::from_secs(1);

/// How long after its loss was noticed a lost agent may still have sent.
/// One that hears nothing from us (we stopped hearing it, or it stopped
/// reading) goes on until its own dead-man switch fires: the window after
/// the last word it had from us, which was at the latest now, and a second
/// for its half-second check and its workers to stop. One whose stream
/// broke or ended sees that too and stops at once; a second covers the
/// noticing on its side. One that came back to deliver its figures had
/// stopped already.
fn may_send_for(loss: &Loss) -> Duration {
    match loss {
        Loss::Silent(_) | Loss::NotReading => Duration::from_secs(u64::from(DEAD_MAN_SECS) + 1),
        Loss::StoppedAlone => Duration::ZERO,
        Loss::NoClockAnswer
        | Loss::Refused(_)
        | Loss::StreamClosed
        | Loss::StreamFailed(_)
        | Loss::Protocol(_) => Duration::from_secs(1),
    }
}

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
                a.unknown_until = Some(at + may_send_for(&loss));
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
                OnAgentLoss::Redistribute => {
                    let stopped = self.agents[i].unknown_until.unwrap_or(at);
                    queue.extend(self.hand_over(i, at, stopped))
                }
            }
        }
    }

    /// `redistribute`: from the first interval boundary at least
    /// [`HANDOVER_AFTER`] after the loss was noticed and not before the
    /// agent had certainly `stopped`, the running survivors share agent
    /// `i`'s arrivals: those it may have sent stay its own (unreported),
    /// never sent twice. Returns survivors that could not be told.
    fn hand_over(&mut self, i: usize, noticed: Duration, stopped: Duration) -> Vec<(usize, Loss)> {
        let Some(lost) = self.agents[i].slot else {
            return Vec::new();
        };
        let interval = self.spec.interval.as_nanos().max(1) as u64;
        let earliest = (noticed + HANDOVER_AFTER).max(stopped).as_nanos() as u64;
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

    /// Sets what lost agents never reported against the plan, once per
    /// agent and as soon as it is lost (a lost agent sends nothing more, and
    /// its hand-over is already made), so `report.partial.json` carries it:
    /// every arrival its share held (hand-overs applied) that it did not
    /// report is booked per scenario and interval, unreported when due
    /// before it had certainly stopped, unsent `agent_lost` after
    /// ([`Split::of`]); what it reported intended but not yet sent (it
    /// waited for its connections) is unreported too. At the end of an
    /// aborted run (`ended`), every other agent's share left is booked
    /// unsent `aborted`: they were stopped, not lost. The counting walks the
    /// schedule off the control loop. Late figures that came before the
    /// booking are taken in after it.
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
        let mut cuts = vec![None; self.weights.len()];
        for &(i, slot) in &booked {
            if let (Some(cut), Some(c)) = (self.agents[i].unknown_until, cuts.get_mut(slot)) {
                *c = Some(cut.as_nanos() as u64);
            }
        }
        let (scenarios, weights, handovers, interval) = (
            self.spec.scenarios.clone(),
            self.weights.clone(),
            self.handovers.clone(),
            self.spec.interval.as_nanos() as u64,
        );
        let planned = tokio::task::spawn_blocking(move || {
            intended::planned(&scenarios, &weights, &handovers, interval, &cuts)
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
            if self.agents[i].is_lost() {
                self.book_lost_share(i, slot, &planned, interval);
            } else {
                self.book_aborted_share(i, slot, &planned);
            }
            self.agents[i].booked = true;
            for msg in std::mem::take(&mut self.agents[i].pending) {
                self.on_late(i, msg);
            }
        }
    }

    /// Books lost agent `i`'s share (in `slot`) that it never reported:
    /// unreported before its `unknown_until`, unsent `agent_lost` after.
    fn book_lost_share(
        &mut self,
        i: usize,
        slot: usize,
        planned: &[intended::Counts],
        interval_ns: u64,
    ) {
        // Lost before the start: nothing of its share was sent by it.
        let cut = self.agents[i]
            .unknown_until
            .map_or(0, |d| d.as_nanos() as u64);
        let booking = (0..self.spec.scenarios.len())
            .map(|sc| {
                let row = match planned.get(sc) {
                    Some(Some(p)) => p.counts.get(slot).map_or(&[][..], Vec::as_slice),
                    _ => &[],
                };
                let plan = row.iter().enumerate().map(|(interval, &n)| {
                    let p = planned.get(sc).and_then(Option::as_ref);
                    (
                        n,
                        p.map_or(0, |p| p.before(slot, interval, cut, interval_ns)),
                    )
                });
                Booking::book(&mut self.aggregate, i, sc, plan)
            })
            .collect();
        self.agents[i].booking = booking;
    }

    /// Books agent `i`'s share left when the run was aborted: unsent
    /// `aborted`, the arrivals waiting for its connections among them.
    fn book_aborted_share(&mut self, i: usize, slot: usize, planned: &[intended::Counts]) {
        for sc in 0..self.spec.scenarios.len() {
            let held = self.aggregate.held(i, sc);
            let last = self.aggregate.reported(i, sc).len().saturating_sub(1);
            self.aggregate
                .book_held_unsent(i, sc, last as u64, held, UnsentReason::Aborted);
        }
        for (sc, counts) in planned.iter().enumerate() {
            let Some(row) = counts.as_ref().and_then(|c| c.counts.get(slot)) else {
                continue;
            };
            for (interval, &planned) in row.iter().enumerate() {
                let reported = self
                    .aggregate
                    .reported(i, sc)
                    .get(interval)
                    .copied()
                    .unwrap_or(0);
                self.aggregate.book_unsent(
                    i,
                    sc,
                    interval as u64,
                    planned.saturating_sub(reported),
                    UnsentReason::Aborted,
                );
            }
        }
    }
}
