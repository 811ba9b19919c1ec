//! A lost agent's last figures, delivered after its loss. An agent that
//! loses us mid-run (its dead-man switch, a broken stream, a freeze) stops
//! sending and dials again with `Deliver`, naming itself by its fleet index
//! and its part of the run by the assignment's `run_key`, then sends the
//! snapshots we had not confirmed and `Finished`. They pass every check a
//! snapshot passes (`validate.rs`: order, placement, bounds, counts), and
//! each may report no more arrivals of an interval than its share left
//! unreported there (`unreported.rs`): what it reports comes out of that
//! booking, the unknown first, so a hostile or confused peer cannot add
//! arrivals beyond its assignment. Once its `Finished` is in, what is still
//! unknown was never sent: unsent `agent_lost`. Snapshots it had delivered
//! before are ignored by their sequence numbers, so a delivery may come
//! twice, or partly on its old stream.
//!
//! A run waits for a lost agent's figures a little after the loss
//! ([`RETURN_WAIT`]), and takes none once it is over: they stay unreported.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::bounds::MAX_LATE_SNAPSHOTS;
use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use tokio::sync::oneshot;
use tonic::Status;

use super::actor::Fleet;
use super::registry::Agent;
use super::validate::{Check, Rejection};
use super::{AgentTx, LastSeen, LateFigures, Loss};

/// Most late messages held for an agent whose share is not booked yet (at
/// most a tick): beyond, its figures are refused rather than kept.
const MAX_PENDING: usize = 4096;

/// How long after its loss a run waits for an agent's last figures before
/// it may end without them. An agent whose stream broke noticed at once
/// and dials again within a second if it lives; agents that stopped while
/// the coordinator itself was stalled are already waiting when it runs
/// again. One lost to silence can deliver only once its link works again,
/// which a longer wait would seldom see: its figures stay unreported.
const RETURN_WAIT: Duration = Duration::from_secs(2);

impl Fleet {
    /// Whether the run should still wait for lost agent `a`'s last
    /// figures: it may deliver them, they are not in whole or refused, and
    /// the wait after its loss is not over.
    pub(super) fn awaits_figures(&self, a: &Agent) -> bool {
        let (Some(start), Some(lost_at)) = (self.start, a.lost_at) else {
            return false;
        };
        if !a.may_deliver() || matches!(a.late, LateFigures::Whole { .. } | LateFigures::Refused(_))
        {
            return false;
        }
        tokio::time::Instant::now() < start + lost_at + RETURN_WAIT
    }

    /// Whether `msg` from agent `i` is part of its last figures, to take in.
    pub(super) fn takes_late(&self, i: usize, msg: &v1::AgentMessage) -> bool {
        self.agents.get(i).is_some_and(|a| {
            a.is_lost()
                && a.may_deliver()
                && a.slot.is_some()
                && matches!(a.late, LateFigures::None | LateFigures::Partial { .. })
                && matches!(
                    msg.kind,
                    Some(agent_message::Kind::Snapshot(_) | agent_message::Kind::Finished(_))
                )
        })
    }

    /// A lost agent dials again to deliver its last figures: taken when it
    /// names a run going on and its part in it. An agent still in the run
    /// that comes so has stopped on its own: it is lost now.
    pub(super) fn on_deliver(
        &mut self,
        d: v1::Deliver,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        seen: Arc<LastSeen>,
        reply: oneshot::Sender<Result<u32, Status>>,
    ) {
        let i = d.agent_index as usize;
        if let Some(a) = self.agents.get_mut(i) {
            if let Some((_, merged)) = a.delivered.filter(|&(key, _)| key == d.run_key) {
                // In already, perhaps in a run since over: confirmed again.
                a.reconnect(tx, seen);
                if reply.send(Ok(i as u32)).is_ok() {
                    confirm(a, merged);
                }
                return;
            }
        }
        if let Err(why) = self.deliverable(i, d.run_key) {
            tracing::warn!("refused a delivery from {peer:?} ({}): {why}", d.agent_id);
            let _ = reply.send(Err(Status::failed_precondition(why)));
            return;
        }
        if self.agents[i].alive() {
            self.declare_lost(vec![(i, Loss::StoppedAlone)]);
        }
        let a = &mut self.agents[i];
        a.reconnect(tx, seen);
        if reply.send(Ok(i as u32)).is_err() {
            return;
        }
        self.out.console.line(&format!(
            "agent {} came back with its last figures",
            a.hello.agent_id
        ));
    }

    /// Whether agent `i` may deliver figures for the run `run_key` names:
    /// the run is going on, it has a part in it, and it was not dropped,
    /// finished or refused.
    fn deliverable(&self, i: usize, run_key: u64) -> Result<(), String> {
        let Some(a) = self.agents.get(i) else {
            return Err(format!("this fleet has no agent #{i}"));
        };
        if self.start.is_none() || a.slot.is_none() || a.run_key != run_key {
            return Err("these figures belong to no run this coordinator is carrying out: it is over, or another coordinator's".into());
        }
        if let LateFigures::Refused(why) = &a.late {
            return Err(format!("its last figures were refused: {why}"));
        }
        if a.is_lost() && !a.may_deliver() {
            return Err(format!(
                "agent {} was dropped from the run, and its figures with it",
                a.hello.agent_id
            ));
        }
        if a.alive() && a.finished.is_some() {
            return Err(format!("agent {} finished its run", a.hello.agent_id));
        }
        Ok(())
    }

    /// A snapshot or `Finished` of lost agent `i`'s last figures; held
    /// until its share is booked.
    pub(super) fn on_late(&mut self, i: usize, msg: v1::AgentMessage) {
        let Some(a) = self.agents.get_mut(i) else {
            return;
        };
        if !a.booked {
            if a.pending.len() < MAX_PENDING {
                a.pending.push(msg);
            } else {
                let r = Rejection::new(
                    "late_flood",
                    format!("more than {MAX_PENDING} late messages before its share was booked"),
                );
                self.refuse_late(i, r);
            }
            return;
        }
        if !matches!(a.late, LateFigures::None | LateFigures::Partial { .. }) {
            return;
        }
        match msg.kind {
            Some(agent_message::Kind::Snapshot(s)) => self.late_snapshot(i, &s),
            Some(agent_message::Kind::Finished(f)) => self.late_finished(i, f),
            _ => {}
        }
    }

    /// Takes in one late snapshot: checked as any, then its arrivals come
    /// out of the agent's booking (the unknown first) before it is added,
    /// and arrivals it resolves that were held when it was lost leave the
    /// unknown.
    fn late_snapshot(&mut self, i: usize, s: &v1::Snapshot) {
        let decoded = match self.checks.snapshot(i, s, &self.aggregate.totals) {
            Check::Accept(d) => d,
            // Delivered before the loss, or again: already in.
            Check::Duplicate => return,
            Check::Violation(r) => return self.refuse_late(i, r),
        };
        let taken = match &self.agents[i].late {
            LateFigures::Partial { snapshots } => *snapshots,
            _ => 0,
        };
        if taken >= MAX_LATE_SNAPSHOTS {
            let r = Rejection::new(
                "late_flood",
                format!("more than {MAX_LATE_SNAPSHOTS} snapshots after its loss"),
            );
            return self.refuse_late(i, r);
        }
        let sc = s.scenario as usize;
        let open = matches!(
            self.spec.scenarios.get(sc).and_then(|x| x.model.as_ref()),
            Some(v1::scenario_assignment::Model::Open(_))
        );
        let Some(booking) = self.agents[i].booking.get_mut(sc) else {
            return;
        };
        // A closed-model share has no schedule to book against: its
        // requests follow the answers, as during the run.
        if let Err(beyond) = booking.take_in(&mut self.aggregate, i, &decoded, open) {
            let r = Rejection::new(
                "late_beyond_share",
                format!(
                    "interval {} reports {} arrivals intended after its loss, but its share left {} unreported there",
                    s.interval_index, decoded.figures.intended, beyond.booked
                ),
            );
            return self.refuse_late(i, r);
        }
        self.agents[i].late = LateFigures::Partial {
            snapshots: taken + 1,
        };
    }

    /// The agent's `Finished` closes its last figures: every arrival still
    /// unknown was never sent, and the agent is told its figures are in.
    fn late_finished(&mut self, i: usize, f: v1::Finished) {
        if let Err(r) = self.checks.finished(i, &f) {
            return self.refuse_late(i, r);
        }
        for sc in 0..self.spec.scenarios.len() {
            if let Some(booking) = self.agents[i].booking.get_mut(sc) {
                booking.close(&mut self.aggregate, i, sc);
            }
        }
        let snapshots = match self.agents[i].late {
            LateFigures::Partial { snapshots } => snapshots,
            _ => 0,
        };
        let merged = self.checks.last_seq(i);
        let a = &mut self.agents[i];
        a.finished = Some(f);
        a.late = LateFigures::Whole { snapshots };
        a.delivered = Some((a.run_key, merged));
        self.out.console.line(&format!(
            "agent {} delivered its last figures after its loss ({snapshots} snapshot(s)): every request it sent is counted",
            a.hello.agent_id
        ));
        confirm(a, merged);
    }

    /// Refuses lost agent `i`'s last figures: what came before stays, what
    /// it never reported stays unreported, and the refusal is counted and
    /// named in the report like any other.
    fn refuse_late(&mut self, i: usize, r: Rejection) {
        let Some(a) = self.agents.get_mut(i) else {
            return;
        };
        self.checks.count(i, &a.hello.agent_id, &r);
        self.out.console.notice(&format!(
            "refused agent {}'s last figures ({r}); what it never reported stays unreported",
            a.hello.agent_id
        ));
        a.late = LateFigures::Refused(r.to_string());
        a.pending = Vec::new();
        a.refuse(Status::failed_precondition(format!(
            "its last figures were refused: {r}"
        )));
    }

    /// At the end of a run: lost agents' figures still partial leave what
    /// they reported intended and never resolved unreported, and their
    /// streams are ended.
    pub(super) fn close_late(&mut self) {
        for i in 0..self.agents.len() {
            let a = &self.agents[i];
            if !a.is_lost() || a.slot.is_none() {
                continue;
            }
            if matches!(a.late, LateFigures::Partial { .. }) {
                for sc in 0..self.spec.scenarios.len() {
                    let at = self.aggregate.reported(i, sc).len().saturating_sub(1) as u64;
                    self.aggregate.book_held_unreported(i, sc, at);
                }
            }
            self.agents[i].hang_up();
        }
    }
}

/// Tells a delivering agent every snapshot up to `merged` is in, and ends
/// its stream.
fn confirm(a: &mut Agent, merged: u64) {
    let _ = a.offer(coordinator_message::Kind::Heartbeat(v1::Heartbeat {
        now_ns: 0,
        snapshots_merged: merged,
    }));
    a.hang_up();
}
