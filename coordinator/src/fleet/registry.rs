//! The agents the fleet knows, by the index each joined under: who may join,
//! who stands by for a later run, who is still heard from, and what the
//! report shows of each.

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::v1::{self, coordinator_message};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use super::unreported::Booking;
use super::{AgentTx, AgentView, LastSeen, LateAgent, LateFigures, Loss, RunSpec};
use crate::console::Console;

/// An agent that stays silent this long is lost. Agents heartbeat twice a
/// second, so a frozen agent or a cut link is noticed within one tick of
/// this limit.
pub(super) const AGENT_SILENCE: Duration = Duration::from_millis(2500);
/// Agents stop on their own after this long without hearing from us.
pub(super) const DEAD_MAN_SECS: u32 = 3;

/// Whether an agent's stream still carries a run.
#[derive(Debug)]
pub(super) enum Link {
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

/// One agent as the fleet knows it.
#[derive(Debug)]
pub(super) struct Agent {
    pub(super) hello: v1::Hello,
    peer: Option<SocketAddr>,
    tx: AgentTx,
    /// When its last message arrived, stamped by its stream's reader.
    seen: Arc<LastSeen>,
    /// Best clock sample: (round trip, agent clock minus coordinator clock).
    pub(super) clock: Option<(u64, i64)>,
    pub(super) finished: Option<v1::Finished>,
    pub(super) link: Link,
    pub(super) share: f64,
    /// Its index in the current run's interleave, when it was dealt a share.
    pub(super) slot: Option<usize>,
    /// Names its part of the current run (`Assignment.run_key`), so its
    /// last figures, delivered after its loss, find their run.
    pub(super) run_key: u64,
    /// When its loss was noticed in the current run, from the common start.
    pub(super) lost_at: Option<Duration>,
    /// From when (after the common start) it had certainly stopped
    /// sending: what it never reported before is unknown, after is unsent.
    pub(super) unknown_until: Option<Duration>,
    /// Its lost share is booked: once, as soon as it is lost, so a partial
    /// report written during the run carries it.
    pub(super) booked: bool,
    /// That booking, per scenario, as its late figures revise it.
    pub(super) booking: Vec<Booking>,
    /// What became of its last figures, delivered after its loss.
    pub(super) late: LateFigures,
    /// Late figures that came before its share was booked, taken in once
    /// it is.
    pub(super) pending: Vec<v1::AgentMessage>,
    /// The run key and last snapshot of the last figures it delivered
    /// whole after a loss, kept past its run: delivered again (the answer
    /// to the first was lost), they are confirmed, not refused.
    pub(super) delivered: Option<(u64, u64)>,
    /// With `redistribute`: when the survivors took over its arrivals.
    pub(super) handed_over_at: Option<Duration>,
    /// Messages after its loss, ignored: it came back.
    pub(super) messages_after_loss: u64,
}

impl Agent {
    pub(super) fn new(
        hello: v1::Hello,
        peer: Option<SocketAddr>,
        tx: AgentTx,
        seen: Arc<LastSeen>,
    ) -> Self {
        Agent {
            hello,
            peer,
            tx,
            seen,
            clock: None,
            finished: None,
            link: Link::Up,
            share: 0.0,
            slot: None,
            run_key: 0,
            lost_at: None,
            unknown_until: None,
            booked: false,
            booking: Vec::new(),
            late: LateFigures::None,
            pending: Vec::new(),
            delivered: None,
            handed_over_at: None,
            messages_after_loss: 0,
        }
    }

    pub(super) fn alive(&self) -> bool {
        matches!(self.link, Link::Up)
    }

    pub(super) fn is_lost(&self) -> bool {
        matches!(self.link, Link::Lost(_))
    }

    /// Lost in a way it may come back from with its last figures (it went
    /// silent or its stream ended), rather than dropped for what it said.
    pub(super) fn may_deliver(&self) -> bool {
        matches!(&self.link, Link::Lost(loss) if loss.may_deliver())
    }

    fn standing_by(&self) -> bool {
        matches!(self.link, Link::Standby)
    }

    /// Took no part in any run so far (standing by, or left while it was):
    /// the report does not list it.
    pub(super) fn unused(&self) -> bool {
        matches!(self.link, Link::Standby | Link::Dropped)
    }

    /// Silent past [`AGENT_SILENCE`] while it still owes us a finish.
    pub(super) fn silent(&self) -> bool {
        self.finished.is_none() && self.seen.silence() > AGENT_SILENCE
    }

    pub(super) fn lose(&mut self, loss: Loss) {
        tracing::warn!("agent {} lost: {loss}", self.hello.agent_id);
        self.link = Link::Lost(loss);
    }

    /// Queues a message without waiting: a full queue means the agent
    /// stopped reading, and the caller must give up on it rather than let
    /// one agent hold up the fleet. A closed queue is fine: its stream's
    /// end reaches the actor as its own event.
    pub(super) fn offer(&self, kind: coordinator_message::Kind) -> Result<(), Loss> {
        match self.tx.try_send(Ok(msg(kind))) {
            Ok(()) | Err(TrySendError::Closed(_)) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Loss::NotReading),
        }
    }

    /// A new stream from the agent after its loss, to deliver its last
    /// figures: what the fleet says to it now goes there.
    pub(super) fn reconnect(&mut self, tx: AgentTx, seen: Arc<LastSeen>) {
        self.tx = tx;
        self.seen = seen;
    }

    /// Ends its stream with `status`, which says why.
    pub(super) fn refuse(&mut self, status: Status) {
        let _ = self.tx.try_send(Err(status));
        self.hang_up();
    }

    /// Ends its stream: the fleet has nothing more to say to it.
    pub(super) fn hang_up(&mut self) {
        let (closed, _) = mpsc::channel(1);
        self.tx = closed;
    }

    pub(super) fn view(&self) -> AgentView {
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
            unknown_until: self.unknown_until,
            late: self.late.clone(),
            handed_over_at: self.handed_over_at,
            messages_after_loss: self.messages_after_loss,
        }
    }

    /// Forgets what the finished run said of it, for the next one.
    fn new_run(&mut self) {
        self.finished = None;
        self.slot = None;
        self.run_key = 0;
        self.lost_at = None;
        self.unknown_until = None;
        self.booked = false;
        self.booking = Vec::new();
        self.late = LateFigures::None;
        self.pending = Vec::new();
        self.handed_over_at = None;
        self.messages_after_loss = 0;
    }
}

/// Most latecomers one run's report names: an agent that a supervisor
/// restarts in a loop must not grow the report without end.
pub(super) const MAX_LATE: usize = 100;

/// Every agent that ever joined, by index: an index, once given, names
/// the same agent to the end (its stream's events carry it).
#[derive(Debug, Default)]
pub(super) struct Registry {
    agents: Vec<Agent>,
    /// Who came too late for the current run (the fleet complete or the
    /// schedule dealt), for its report.
    late: Vec<LateAgent>,
}

impl Deref for Registry {
    type Target = [Agent];
    fn deref(&self) -> &[Agent] {
        &self.agents
    }
}

impl DerefMut for Registry {
    fn deref_mut(&mut self) -> &mut [Agent] {
        &mut self.agents
    }
}

impl Registry {
    /// Agents that carry runs now.
    pub(super) fn alive(&self) -> usize {
        self.iter().filter(|a| a.alive()).count()
    }

    /// Agents that joined late and wait for a later run.
    pub(super) fn standing(&self) -> usize {
        self.iter().filter(|a| a.standing_by()).count()
    }

    /// Takes a newcomer. `next_run` is `None` while the fleet gathers;
    /// once the schedule is dealt, it is the run a newcomer could join
    /// first. A newcomer gets no share of a dealt schedule: it is told so
    /// and stands by for the next run if there is one (`--repeat`),
    /// otherwise it is refused with the reason.
    pub(super) fn admit(
        &mut self,
        mut agent: Agent,
        reply: oneshot::Sender<Result<u32, Status>>,
        next_run: Option<usize>,
        spec: &RunSpec,
        console: &Console,
    ) {
        let index = self.len() as u32;
        let late = next_run.is_some() || self.alive() >= spec.expect_agents;
        if late {
            let repeats = spec.repeats.max(1);
            let next = next_run.unwrap_or(1);
            let standing = self.standing();
            let why = if next >= repeats {
                Some(format!(
                    "the fleet already has its {} agent(s) and the run has begun; no later run is planned (--repeat {repeats}), so this agent gets no share",
                    spec.expect_agents
                ))
            } else if standing >= spec.expect_agents {
                Some(format!(
                    "the run has begun and {standing} agent(s) already stand by for the next one"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                console.notice(&format!(
                    "refused agent {} from {:?}: {why}",
                    agent.hello.agent_id, agent.peer
                ));
                self.note_late(&agent, false, &why);
                let _ = reply.send(Err(Status::resource_exhausted(why)));
                return;
            }
            let why = format!(
                "the run has begun: this agent gets no share of the running schedule and stands by for run {} of {repeats}",
                next + 1
            );
            console.notice(&format!(
                "agent {} joined late: {why}",
                agent.hello.agent_id
            ));
            self.note_late(&agent, true, &why);
            let standby = coordinator_message::Kind::Standby(v1::Standby { reason: why });
            if agent.tx.try_send(Ok(msg(standby))).is_err() || reply.send(Ok(index)).is_err() {
                return;
            }
            agent.link = Link::Standby;
            self.agents.push(agent);
            return;
        }
        console.line(&format!(
            "agent {} joined from {} ({} of {})",
            agent.hello.agent_id,
            agent
                .peer
                .map_or_else(|| "a local socket".to_string(), |p| p.to_string()),
            self.alive() + 1,
            spec.expect_agents
        ));
        let welcome = coordinator_message::Kind::Welcome(v1::Welcome {
            agent_index: index,
            dead_man_secs: DEAD_MAN_SECS,
        });
        if agent.tx.try_send(Ok(msg(welcome))).is_err() || reply.send(Ok(index)).is_err() {
            return;
        }
        self.agents.push(agent);
    }

    fn note_late(&mut self, agent: &Agent, stood_by: bool, reason: &str) {
        if self.late.len() < MAX_LATE {
            self.late.push(LateAgent {
                id: agent.hello.agent_id.clone(),
                host: agent.hello.host.clone(),
                peer: agent.peer,
                stood_by,
                reason: reason.to_string(),
            });
        }
    }

    /// The latecomers of the running run so far, for a partial report.
    pub(super) fn late(&self) -> &[LateAgent] {
        &self.late
    }

    /// The latecomers of the run that ends, for its report.
    pub(super) fn take_late(&mut self) -> Vec<LateAgent> {
        std::mem::take(&mut self.late)
    }

    /// Agent `i`'s stream ended. Returns the loss when that loses it: an
    /// agent that had finished its run has only left, and one standing by
    /// is simply dropped.
    pub(super) fn gone(&mut self, i: usize, loss: Loss) -> Option<Loss> {
        let a = self.agents.get_mut(i)?;
        if a.alive() && a.finished.is_some() {
            a.link = Link::Left;
        } else if a.standing_by() {
            a.link = Link::Dropped;
        } else {
            return Some(loss);
        }
        None
    }

    /// Before a repeat: agents that stood by fill the places of those
    /// lost, in the order they came, up to `expect` alive. Returns how
    /// many joined.
    pub(super) fn promote_standby(&mut self, expect: usize, console: &Console) -> usize {
        let mut needed = expect.saturating_sub(self.alive());
        let mut promoted = 0;
        for (i, a) in self.agents.iter_mut().enumerate() {
            if needed == 0 {
                break;
            }
            if !a.standing_by() {
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
            console.line(&format!(
                "agent {}, which stood by, takes part from this run on",
                a.hello.agent_id
            ));
            a.link = Link::Up;
            needed -= 1;
            promoted += 1;
        }
        promoted
    }

    /// Keeps agents that stand by alive with heartbeats, and lets go of
    /// those that went silent or stopped reading.
    pub(super) fn beat_standby(&mut self, now_ns: u64) {
        for a in self.agents.iter_mut().filter(|a| a.standing_by()) {
            let hb = coordinator_message::Kind::Heartbeat(v1::Heartbeat {
                now_ns,
                snapshots_merged: 0,
            });
            if a.seen.silence() > AGENT_SILENCE || a.offer(hb).is_err() {
                a.link = Link::Dropped;
                a.hang_up();
            }
        }
    }

    /// At the end of the fleet: every stream is ended, and those that
    /// stood by are told no run had room for them.
    pub(super) fn hang_up_all(&mut self) {
        for a in &mut self.agents {
            if a.standing_by() {
                let _ = a.offer(coordinator_message::Kind::Stop(v1::Stop {
                    reason: "the test ended before a run had room for this agent".into(),
                }));
            }
            a.hang_up();
        }
    }

    /// Forgets what the finished run said of every agent.
    pub(super) fn new_run(&mut self) {
        for a in &mut self.agents {
            a.new_run();
        }
    }
}

pub(super) fn msg(kind: coordinator_message::Kind) -> v1::CoordinatorMessage {
    v1::CoordinatorMessage { kind: Some(kind) }
}
