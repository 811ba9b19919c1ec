//! The fleet's timer: heartbeats out, silence judged, and — once the run
//! has begun — settled seconds handed to the live outputs (the scrape
//! endpoint among them) and the progress line brought up to date.

use std::time::Duration;

use loadfleet_proto::v1::{self, coordinator_message};
use tokio::time::Instant;

use super::actor::{Fleet, Phase};
use super::registry::{Agent, AGENT_SILENCE};
use super::{Loss, Progress, RunResult, Settled};

/// How long after an interval closes its snapshots are taken as all in.
const SETTLE: Duration = Duration::from_millis(400);
/// How often the progress line is brought up to date.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl Fleet {
    pub(super) fn on_tick(&mut self) {
        let now = self.now_ns();
        self.agents.beat_standby(now);
        let mut lost = Vec::new();
        for (i, a) in self.agents.iter().enumerate().filter(|(_, a)| a.alive()) {
            if a.silent() {
                lost.push((i, Loss::Silent(AGENT_SILENCE)));
                continue;
            }
            // With what it has sent that is in, so it need keep no more.
            let hb = coordinator_message::Kind::Heartbeat(v1::Heartbeat {
                now_ns: now,
                snapshots_merged: self.checks.last_seq(i),
            });
            if let Err(loss) = a.offer(hb) {
                lost.push((i, loss));
            }
        }
        self.declare_lost(lost);
        if let Some(start) = self.start {
            if Instant::now() > start {
                self.settle(self.settled_below(start));
            }
            if self.last_progress.elapsed() >= PROGRESS_EVERY && Instant::now() > start {
                self.last_progress = Instant::now();
                let p = self.progress_now(start);
                (self.out.progress)(&p);
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
    pub(super) fn settle(&mut self, below: u64) {
        let wall_minus_mono_ns = self.wall_minus_mono_ns();
        let Some(sink) = self.out.sink.as_mut() else {
            return;
        };
        let Phase::Running(run) = self.phase else {
            return;
        };
        let (agents, start) = (&self.agents, self.start);
        let (started_at, corrupt_snapshots) = (self.run_started_at, self.corrupt_snapshots);
        let (on_agent_loss, aborted) = (self.spec.on_agent_loss, self.aborted.clone());
        let protocol = self.checks.ledgers(agents.len());
        let agents_expected = self.expected;
        let agents_joined = agents.iter().filter(|a| a.slot.is_some()).count();
        let so_far = |aggregate| RunResult {
            agents_expected,
            agents_joined,
            agents: agents.iter().map(Agent::view).collect(),
            late_agents: agents.late().to_vec(),
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
        let last = self
            .settled_below(start)
            .checked_sub(1)
            .and_then(|i| self.aggregate.intervals.get(&i));
        let p99_ms = last
            .and_then(|iv| iv.latency_summary().p99_us)
            .map(crate::units::us_to_ms);
        Progress {
            elapsed,
            duration: self.spec.duration,
            intended: t.intended,
            sent: t.sent,
            unsent: t.unsent.total(),
            unreported: self.aggregate.unreported.total,
            completed: t.completed,
            errors: t.errors.total(),
            failures: t.failures(),
            in_flight: last.map_or(0, |iv| iv.in_flight),
            p99_ms,
            sent_rps: last.map_or(0, |iv| iv.sent),
            completed_rps: last.map_or(0, |iv| iv.completed),
            agents_alive: self.agents.alive(),
        }
    }
}
