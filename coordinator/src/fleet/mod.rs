//! The fleet: agents join through a thin tonic service ([`ControlService`]),
//! which forwards everything as [`FleetEvent`]s to one actor that owns the
//! run. The actor walks explicit phases — gather agents, probe their clocks,
//! then run the plan (once per repeat) — and hands back one [`RunResult`]
//! per run for the report.
//!
//! The actor's state and loop are in `actor`; `registry` holds the agents,
//! `clock` the offset math, `phases` the run's course, `loss` what happens
//! to a lost agent's share, `progress` the timer's work, and `refusals`
//! the would-be agents the service turned away.

mod actor;
mod clock;
mod intended;
mod late;
mod loss;
mod phases;
mod progress;
mod refusals;
mod registry;
mod service;
mod unreported;
mod validate;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use loadfleet_proto::v1;
use loadfleet_proto::vocab::AgentStatus;
use tokio::sync::mpsc;

use crate::aggregate::Aggregate;
use crate::console::Console;
use crate::plan::{OnAgentLoss, Shares};

pub use service::{AgentTx, ControlService, FleetEvent, LastSeen};

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
    pub max_connections: u32,
    pub interval: Duration,
    pub expect_agents: usize,
    /// With fewer than `expect_agents` at the agent timeout, the run starts
    /// on those that came when at least this many did.
    pub min_agents: usize,
    pub agent_timeout: Duration,
    /// Runs of the plan, one after another, by the same fleet.
    pub repeats: usize,
    /// What the fleet does with a lost agent's share.
    pub on_agent_loss: OnAgentLoss,
    /// The HTTP protocol agents speak to the target.
    pub protocol: loadfleet_proto::vocab::HttpProtocol,
    /// TLS towards the target, when the plan sets any.
    pub tls: Option<v1::TargetTls>,
}

/// Why an agent was given up on. Its text is what the report shows as the
/// agent's `lost_reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loss {
    /// No message for longer than the fleet tolerates.
    Silent(Duration),
    /// Its queue of messages from us stayed full: it stopped reading, and
    /// waiting for it would hold up the whole fleet.
    NotReading,
    /// It never answered a clock probe, so it cannot share a start instant.
    NoClockAnswer,
    /// It refused its assignment (e.g. the target is outside its allow-list).
    Refused(String),
    /// Its stream ended before it finished.
    StreamClosed,
    /// Its stream broke; the transport's message says how.
    StreamFailed(String),
    /// It broke the protocol (fleet::validate says how); dropped.
    Protocol(String),
    /// It lost us and stopped on its own (its dead-man switch, a broken
    /// stream), and came back on a new stream with its last figures.
    StoppedAlone,
}

impl Loss {
    /// Whether the agent may come back with its last figures: it went
    /// silent or its stream ended, rather than being dropped or refusing.
    pub fn may_deliver(&self) -> bool {
        matches!(
            self,
            Loss::Silent(_)
                | Loss::NotReading
                | Loss::StreamClosed
                | Loss::StreamFailed(_)
                | Loss::StoppedAlone
        )
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Silent(d) => write!(f, "silent for more than {d:?}"),
            Loss::NotReading => f.write_str("stopped reading the coordinator's messages"),
            Loss::NoClockAnswer => f.write_str("did not answer clock probes"),
            Loss::Refused(reason) => write!(f, "refused the assignment: {reason}"),
            Loss::StreamClosed => {
                f.write_str("its connection to the coordinator closed before it finished")
            }
            // The transport's words (e.g. an h2 protocol error) follow the
            // plain ones, for whoever debugs the network.
            Loss::StreamFailed(message) => write!(
                f,
                "its connection to the coordinator broke before it finished (the process died, or the network between them failed: {message})"
            ),
            Loss::Protocol(reason) => write!(f, "protocol violation: {reason}"),
            Loss::StoppedAlone => f.write_str(
                "it lost the coordinator and stopped on its own, then delivered its last figures on a new connection",
            ),
        }
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
    /// Why the agent was lost, in the words the report shows.
    pub lost: Option<String>,
    pub share: f64,
    /// When the loss was noticed, from the common start (zero when before it).
    pub lost_at: Option<Duration>,
    /// From when (after the common start) it had certainly stopped sending:
    /// the arrivals of its share it never reported are unreported before,
    /// unsent `agent_lost` after.
    pub unknown_until: Option<Duration>,
    /// What became of its last figures, delivered after its loss.
    pub late: LateFigures,
    /// With `redistribute`: from when (after the common start) the survivors
    /// sent its arrivals.
    pub handed_over_at: Option<Duration>,
    /// Messages it sent after being declared lost (ignored): it came back.
    pub messages_after_loss: u64,
}

impl AgentView {
    /// How the agent's part of the run ended.
    pub fn status(&self) -> AgentStatus {
        match &self.finished {
            _ if self.lost.is_some() => AgentStatus::Lost,
            Some(f) if f.cut_short => AgentStatus::Stopped,
            Some(_) => AgentStatus::Finished,
            None => AgentStatus::Unfinished,
        }
    }
}

/// What became of a lost agent's last figures, which it delivers on a new
/// connection after stopping on its own (`Deliver`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LateFigures {
    /// None came.
    #[default]
    None,
    /// Some came, but not its `Finished`: what it sent is counted as far
    /// as they go.
    Partial { snapshots: u64 },
    /// All came: every request it sent is counted, and what it never
    /// reported was never sent.
    Whole { snapshots: u64 },
    /// Refused (the reason): they broke the protocol or reported more than
    /// its share left.
    Refused(String),
}

/// An agent that joined once the fleet was complete or its schedule
/// dealt: it got no share of it. The report names it, since under an
/// orchestrator that restarts agents (swarm, Kubernetes) the replacement
/// of a lost agent comes back as one of these, and a reader must see
/// where it went.
#[derive(Debug, Clone)]
pub struct LateAgent {
    pub id: String,
    pub host: String,
    pub peer: Option<SocketAddr>,
    /// It waits for a later run (`--repeat`); otherwise it was refused.
    pub stood_by: bool,
    /// What it was told.
    pub reason: String,
}

/// How one run went, for the report.
#[derive(Debug)]
pub struct RunResult {
    pub agents: Vec<AgentView>,
    /// Agents that came too late for this run's schedule (the first
    /// [`registry::MAX_LATE`]).
    pub late_agents: Vec<LateAgent>,
    pub aggregate: Aggregate,
    /// Set when the run could not be carried out (too few agents, ...).
    pub failure: Option<String>,
    /// Stopped before the schedule ended: the user stopped it, it overran,
    /// or an agent was lost with `--on-agent-loss abort`. A lost agent alone
    /// does not cut the run short: the others run the schedule to its end.
    pub cut_short: bool,
    /// What the fleet did with lost agents' shares.
    pub on_agent_loss: OnAgentLoss,
    /// Set when the run was aborted because an agent was lost; says which.
    pub aborted: Option<String>,
    /// Whether load was ever scheduled.
    pub started: bool,
    /// Agents the run waited for, and how many had joined when it started
    /// (fewer only under `--min-agents`).
    pub agents_expected: usize,
    pub agents_joined: usize,
    pub started_at: SystemTime,
    /// The coordinator's wall clock (ns since the Unix epoch) minus its
    /// monotonic clock, so agents' wall clocks can be set against it
    /// (`report::sse::wall_offsets`).
    pub wall_minus_mono_ns: i64,
    /// From the common start to the end of the run.
    pub elapsed: Duration,
    pub corrupt_snapshots: u64,
    /// Per agent (as in `agents`): the messages refused and the violation
    /// that dropped it, if any.
    pub protocol: Vec<validate::Ledger>,
}

/// Where a run's seconds go as they settle: `run::folder::live` writes them to
/// disk, so a coordinator that dies leaves what it measured behind.
pub trait Sink: Send {
    /// Called on every tick of a run, and once more when it ends.
    fn settled(&mut self, settled: Settled<'_>);
}

/// What the fleet hands a [`Sink`].
pub struct Settled<'a> {
    /// Which run of the plan (0-based; more than one with --repeat).
    pub run: usize,
    pub started_at: SystemTime,
    /// Seconds below this index get no more snapshots in the normal
    /// course; `u64::MAX` once the run is over.
    pub below: u64,
    /// The merged state: the sink folds the settled seconds out of it.
    pub aggregate: &'a mut Aggregate,
    /// The run so far as a result cut short now (for a partial report),
    /// made around an aggregate taken out of `aggregate` and put back.
    pub so_far: &'a dyn Fn(Aggregate) -> RunResult,
}

/// What the live progress line shows.
pub struct Progress {
    pub elapsed: Duration,
    pub duration: Duration,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    /// Lost agents' arrivals whose fate is unknown.
    pub unreported: u64,
    pub completed: u64,
    pub errors: u64,
    /// Errors, 4xx and 5xx (and gRPC statuses other than OK): a target
    /// that answers 503 has no transport errors.
    pub failures: u64,
    pub in_flight: u64,
    /// p99 (ms) of the last complete interval.
    pub p99_ms: Option<f64>,
    /// Sent and completed in the last complete interval (per second).
    pub sent_rps: u64,
    pub completed_rps: u64,
    pub agents_alive: usize,
}

/// Where the fleet's outputs go while it runs.
pub struct Outputs {
    /// Called with the live figures about once a second during a run.
    pub progress: Box<dyn FnMut(&Progress) + Send>,
    /// Where settled seconds go while the run goes on (the live outputs).
    pub sink: Option<Box<dyn Sink>>,
    /// Lines for the user.
    pub console: Console,
}

/// Runs the whole fleet side: every repeat of the plan. `stop` resolves
/// when the user asks to stop (Ctrl-C, SIGTERM) — in any phase, clock
/// probes included; what was measured until then is still returned. There
/// is always at least one result.
pub async fn run_with(
    spec: RunSpec,
    events: mpsc::Receiver<FleetEvent>,
    stop: impl Future<Output = ()>,
    out: Outputs,
) -> Vec<RunResult> {
    actor::Fleet::new(spec, events, out).run(stop).await
}

/// After each run, the scenarios of the next one, or `None` to end: how a
/// caller that decides as it goes (`search`) runs schedules of its own
/// choosing on one fleet. The scenarios must be the spec's, in the same
/// order (their rates may differ).
pub type NextSchedule = Box<dyn FnMut(&RunResult) -> Option<Vec<v1::ScenarioAssignment>> + Send>;

/// Like [`run_with`], but after every run `next` picks the next run's
/// scenarios, up to `spec.repeats` runs: the agents stay joined and their
/// clocks probed between runs, and each run has fresh connections.
pub async fn run_sequence(
    spec: RunSpec,
    events: mpsc::Receiver<FleetEvent>,
    stop: impl Future<Output = ()>,
    out: Outputs,
    next: NextSchedule,
) -> Vec<RunResult> {
    let mut fleet = actor::Fleet::new(spec, events, out);
    fleet.next = Some(next);
    fleet.run(stop).await
}
