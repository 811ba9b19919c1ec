//! Checks on what agents send, before anything of it is allocated or merged.
//!
//! Agents run on shared machines and dial in across networks, so every
//! snapshot is input to check, not a fact to add: it must come in order,
//! its interval must fall within the run plus its drain (each far-off index
//! would be another set of histograms) and its requests within its
//! scenario's mix, all checked before it is decoded; decoding
//! ([`loadfleet_proto::figures`]) refuses unknown words and counts and
//! histograms out of bounds; then its counts must add up, and fit the run's
//! totals so no total wraps. An agent that breaks the protocol is dropped
//! as lost with the reason: what it sent before stays in the figures, the
//! offending message does not. A repeated snapshot is only ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use loadfleet_proto::figures::{Figures, Snapshot};
use loadfleet_proto::v1;

/// Slack after the run and its drain for the last snapshot's interval: the
/// agent's final snapshot is stamped when it has stopped, which can be after
/// the stop grace and a late start.
const INTERVAL_SLACK: Duration = Duration::from_secs(60);

/// Why a message from an agent was refused; `what` is a short stable name
/// (for counting and the report), `detail` says which field and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub what: &'static str,
    pub detail: String,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

impl Rejection {
    /// A refusal named by its short name and the field and value.
    pub fn new(what: &'static str, detail: impl Into<String>) -> Self {
        reject(what, detail)
    }
}

fn reject(what: &'static str, detail: impl Into<String>) -> Rejection {
    Rejection {
        what,
        detail: detail.into(),
    }
}

/// What to do with a snapshot.
#[derive(Debug, PartialEq)]
pub(super) enum Check {
    /// Merge it, as decoded.
    Accept(Box<Snapshot>),
    /// A sequence number already seen: ignore it (counted).
    Duplicate,
    /// The agent broke the protocol: drop it, keep what it sent before.
    Violation(Rejection),
}

/// What one agent sent that was not merged, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Last snapshot sequence number accepted in the current run.
    last_seq: u64,
    /// Arrivals reported intended and not yet sent or unsent: those
    /// waiting for one of the agent's connections. A snapshot may send
    /// what an earlier one intended, never more than was intended.
    held: u64,
    /// Refused messages by [`Rejection::what`].
    pub rejected: BTreeMap<&'static str, u64>,
    /// The first violation, which dropped the agent.
    pub violation: Option<Rejection>,
}

/// The run's bounds on snapshots and every agent's ledger.
#[derive(Debug)]
pub(super) struct Checks {
    scenarios: usize,
    /// Requests in each scenario's mix (or steps in its flow): the indexes
    /// per-request figures may name.
    kinds: Vec<usize>,
    /// Which scenarios are flows: only theirs carry flow figures.
    flows: Vec<bool>,
    /// Highest interval index a snapshot may carry.
    last_interval: u64,
    ledgers: Vec<Ledger>,
}

impl Checks {
    pub(super) fn new(spec: &super::RunSpec) -> Self {
        let interval = spec.interval.as_nanos().max(1);
        let span = (spec.duration + spec.drain + INTERVAL_SLACK).as_nanos();
        Self {
            scenarios: spec.scenarios.len(),
            kinds: spec
                .scenarios
                .iter()
                .map(|s| s.requests.len().max(s.steps.len()))
                .collect(),
            flows: spec.scenarios.iter().map(|s| !s.steps.is_empty()).collect(),
            last_interval: u64::try_from(span / interval).unwrap_or(u64::MAX),
            ledgers: Vec::new(),
        }
    }

    /// Sequence numbers start again at 1 with each run (assignment).
    pub(super) fn new_run(&mut self) {
        for l in &mut self.ledgers {
            *l = Ledger::default();
        }
    }

    /// Every agent's ledger, one per agent (empty for those with none).
    pub(super) fn ledgers(&self, agents: usize) -> Vec<Ledger> {
        (0..agents)
            .map(|i| self.ledgers.get(i).cloned().unwrap_or_default())
            .collect()
    }

    fn ledger_mut(&mut self, agent: usize) -> &mut Ledger {
        if self.ledgers.len() <= agent {
            self.ledgers.resize_with(agent + 1, Ledger::default);
        }
        &mut self.ledgers[agent]
    }

    /// Counts and logs a refused message of `agent_id` (index `agent`).
    pub(super) fn count(&mut self, agent: usize, agent_id: &str, r: &Rejection) {
        tracing::warn!("agent {agent_id}: refused a message: {r}");
        let l = self.ledger_mut(agent);
        *l.rejected.entry(r.what).or_default() += 1;
        if !matches!(r.what, "duplicate" | "pong_out_of_phase") && l.violation.is_none() {
            l.violation = Some(r.clone());
        }
    }

    /// Checks one snapshot of a running agent against the run and against
    /// `totals` (every sum the snapshot joins is at most the total, so a
    /// total that does not overflow means none does), and decodes it.
    pub(super) fn snapshot(&mut self, agent: usize, s: &v1::Snapshot, totals: &Figures) -> Check {
        let last = self.ledger_mut(agent).last_seq;
        if s.seq <= last {
            return Check::Duplicate;
        }
        if s.seq != last + 1 {
            return Check::Violation(reject(
                "sequence_gap",
                format!("snapshot seq {} after {last}: snapshots are missing", s.seq),
            ));
        }
        if let Err(r) = self.placement(s) {
            return Check::Violation(r);
        }
        let decoded = match Snapshot::try_from(s) {
            Ok(d) => d,
            Err(e) => return Check::Violation(reject(e.what(), e.to_string())),
        };
        if let Err(r) = content(&decoded, totals) {
            return Check::Violation(r);
        }
        let f = &decoded.figures;
        let l = self.ledger_mut(agent);
        // `content` checked that these sums do not overflow.
        let resolved = f.sent + f.unsent.total();
        let intended = l.held + f.intended;
        if resolved > intended {
            return Check::Violation(reject(
                "counts_disagree",
                format!(
                    "sent {} + unsent {} is more than the {intended} arrivals intended and not yet sent",
                    f.sent,
                    resolved - f.sent
                ),
            ));
        }
        l.held = intended - resolved;
        l.last_seq = s.seq;
        Check::Accept(Box::new(decoded))
    }

    /// The last snapshot of `agent`'s taken in this run (0 for none), which
    /// heartbeats confirm to it.
    pub(super) fn last_seq(&self, agent: usize) -> u64 {
        self.ledgers.get(agent).map_or(0, |l| l.last_seq)
    }

    /// Checks `Finished.snapshots` against the snapshots that arrived.
    pub(super) fn finished(&self, agent: usize, f: &v1::Finished) -> Result<(), Rejection> {
        let arrived = self.ledgers.get(agent).map_or(0, |l| l.last_seq);
        if f.snapshots != arrived {
            return Err(reject(
                "finished_mismatch",
                format!(
                    "Finished.snapshots = {} but {arrived} snapshot(s) arrived",
                    f.snapshots
                ),
            ));
        }
        Ok(())
    }

    /// Where the snapshot belongs, checked on the wire before anything of
    /// it is decoded: each far-off interval or unknown request would be
    /// more histograms kept for the run.
    fn placement(&self, s: &v1::Snapshot) -> Result<(), Rejection> {
        if s.scenario as usize >= self.scenarios {
            return Err(reject(
                "scenario_out_of_range",
                format!(
                    "scenario {} but the plan has {}",
                    s.scenario, self.scenarios
                ),
            ));
        }
        if s.interval_index > self.last_interval {
            return Err(reject(
                "interval_out_of_range",
                format!(
                    "interval {} is past the run and its drain (last {})",
                    s.interval_index, self.last_interval
                ),
            ));
        }
        let flow = self
            .flows
            .get(s.scenario as usize)
            .copied()
            .unwrap_or(false);
        // A flow scenario's snapshot may come without them (the session's
        // own CPU snapshot), but no other scenario's may carry them.
        if s.flow.is_some() && !flow {
            return Err(reject(
                "flow_mismatch",
                format!(
                    "scenario {} carries flow figures but is not a flow",
                    s.scenario
                ),
            ));
        }
        requests::placement(s, self.kinds.get(s.scenario as usize).copied().unwrap_or(0))
    }
}

/// The decoded snapshot's counts: each fits its total, and they add up.
fn content(s: &Snapshot, totals: &Figures) -> Result<(), Rejection> {
    let f = &s.figures;
    // Every count the figure type declares, so a new one is checked too.
    if let Some(field) = f.overflows(totals) {
        return Err(reject(
            "count_overflow",
            format!("{field} would overflow the run's total"),
        ));
    }
    let outcomes = sum(
        "status + errors + grpc_status",
        [f.status.total(), f.errors.total(), f.grpc_status.total()].iter(),
    )?;
    // A request opens a connection or reuses one, never both, and is
    // counted when it completes (a flow's requests are its steps).
    let requests = match s.flow {
        Some(_) => s
            .requests
            .iter()
            .fold(0u64, |a, (_, r)| a.saturating_add(r.completed)),
        None => f.completed,
    };
    if f.connections_opened.saturating_add(f.connections_reused) > requests {
        return Err(reject(
            "counts_disagree",
            format!(
                "connections_opened {} + connections_reused {} > {requests} requests completed",
                f.connections_opened, f.connections_reused
            ),
        ));
    }
    if outcomes > f.completed {
        return Err(reject(
            "counts_disagree",
            format!(
                "{outcomes} outcomes (status + errors + grpc_status) but {} completed",
                f.completed
            ),
        ));
    }
    requests::check(s)
}

fn sum<'a>(field: &str, mut values: impl Iterator<Item = &'a u64>) -> Result<u64, Rejection> {
    values
        .try_fold(0u64, |acc, &v| acc.checked_add(v))
        .ok_or_else(|| reject("count_overflow", format!("{field} overflow when summed")))
}

mod requests;
#[cfg(test)]
mod tests;
