//! Checks on what agents send, before anything of it is allocated or merged.
//!
//! Agents run on shared machines and dial in across networks, so every
//! snapshot is input to check, not a fact to add: its words must come from
//! the typed vocabulary (each unknown key would be a new histogram kept for
//! the whole run), its interval must fall within the run plus its drain
//! (each far-off index would be another), its counts must add up and stay
//! within [`MAX_SNAPSHOT_COUNT`] so no total wraps, and it must come in
//! order. An agent that breaks the protocol is dropped as lost with the
//! reason: what it sent before stays in the figures, the offending message
//! does not. A repeated snapshot is only ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use loadfleet_proto::bounds::{
    MAX_FANOUT_IDS, MAX_FANOUT_ID_BYTES, MAX_IN_FLIGHT, MAX_SNAPSHOT_COUNT, MAX_STREAM_ERROR_KINDS,
};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus, HttpProtocol, OutcomeClass, UnsentReason};

use crate::aggregate::Merged;

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
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Merge it.
    Accept,
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
pub struct Checks {
    scenarios: usize,
    /// Requests in each scenario's mix: the indexes per-request figures
    /// may name.
    kinds: Vec<usize>,
    /// Highest interval index a snapshot may carry.
    last_interval: u64,
    ledgers: Vec<Ledger>,
}

impl Checks {
    pub fn new(spec: &super::RunSpec) -> Self {
        let interval = spec.interval.as_nanos().max(1);
        let span = (spec.duration + spec.drain + INTERVAL_SLACK).as_nanos();
        Self {
            scenarios: spec.scenarios.len(),
            kinds: spec.scenarios.iter().map(|s| s.requests.len()).collect(),
            last_interval: u64::try_from(span / interval).unwrap_or(u64::MAX),
            ledgers: Vec::new(),
        }
    }

    /// Sequence numbers start again at 1 with each run (assignment).
    pub fn new_run(&mut self) {
        for l in &mut self.ledgers {
            *l = Ledger::default();
        }
    }

    /// Every agent's ledger, one per agent (empty for those with none).
    pub fn ledgers(&self, agents: usize) -> Vec<Ledger> {
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
    pub fn count(&mut self, agent: usize, agent_id: &str, r: &Rejection) {
        tracing::warn!("agent {agent_id}: refused a message: {r}");
        let l = self.ledger_mut(agent);
        *l.rejected.entry(r.what).or_default() += 1;
        if !matches!(r.what, "duplicate" | "pong_out_of_phase") && l.violation.is_none() {
            l.violation = Some(r.clone());
        }
    }

    /// Checks one snapshot of a running agent against the run and against
    /// `totals` (every sum the snapshot joins is at most the total, so a
    /// total that does not overflow means none does).
    pub fn snapshot(&mut self, agent: usize, s: &v1::Snapshot, totals: &Merged) -> Check {
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
        if let Err(r) = self.content(s, totals) {
            return Check::Violation(r);
        }
        let l = self.ledger_mut(agent);
        // `content` checked that these sums do not overflow.
        let resolved = s.sent + s.unsent.values().sum::<u64>();
        let intended = l.held + s.intended;
        if resolved > intended {
            return Check::Violation(reject(
                "counts_disagree",
                format!(
                    "sent {} + unsent {} is more than the {intended} arrivals intended and not yet sent",
                    s.sent,
                    resolved - s.sent
                ),
            ));
        }
        l.held = intended - resolved;
        l.last_seq = s.seq;
        Check::Accept
    }

    /// Checks `Finished.snapshots` against the snapshots that arrived.
    pub fn finished(&self, agent: usize, f: &v1::Finished) -> Result<(), Rejection> {
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

    fn content(&self, s: &v1::Snapshot, totals: &Merged) -> Result<(), Rejection> {
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
        words::<OutcomeClass>("unknown_class", "latency", s.latency.keys())?;
        words::<UnsentReason>("unknown_reason", "unsent", s.unsent.keys())?;
        words::<ErrorKind>("unknown_error_kind", "errors", s.errors.keys())?;
        words::<GrpcStatus>("unknown_grpc_status", "grpc_status", s.grpc_status.keys())?;
        words::<HttpProtocol>("unknown_protocol", "connections", s.connections.keys())?;
        if let Some(code) = s.status.keys().find(|c| !(100..=999).contains(*c)) {
            return Err(reject(
                "bad_status",
                format!("status {code} is not a 3-digit HTTP status"),
            ));
        }
        let unsent = sum("unsent", s.unsent.values())?;
        let singles = [
            ("intended", s.intended, totals.intended),
            ("sent", s.sent, totals.sent),
            ("completed", s.completed, totals.completed),
            (
                "completed_in_window",
                s.completed_in_window,
                totals.completed_in_window,
            ),
            (
                "completed_ok_in_window",
                s.completed_ok_in_window,
                totals.completed_ok_in_window,
            ),
            ("unsent", unsent, totals.unsent_total()),
            (
                "connections_opened",
                s.connections_opened,
                totals.connections_opened,
            ),
            (
                "connections_reused",
                s.connections_reused,
                totals.connections_reused,
            ),
        ];
        for (field, v, total) in singles {
            fits(field, v, total)?;
        }
        for (k, &v) in &s.unsent {
            fits("unsent", v, totals.unsent.get(k).copied().unwrap_or(0))?;
        }
        for (k, &v) in &s.status {
            fits("status", v, totals.status.get(k).copied().unwrap_or(0))?;
        }
        for (k, &v) in &s.errors {
            fits("errors", v, totals.errors.get(k).copied().unwrap_or(0))?;
        }
        for (k, &v) in &s.grpc_status {
            fits(
                "grpc_status",
                v,
                totals.grpc_status.get(k).copied().unwrap_or(0),
            )?;
        }
        for (k, &v) in &s.connections {
            fits(
                "connections",
                v,
                totals.connections.get(k).copied().unwrap_or(0),
            )?;
        }
        let outcomes = sum(
            "status + errors + grpc_status",
            s.status
                .values()
                .chain(s.errors.values())
                .chain(s.grpc_status.values()),
        )?;
        // A request opens a connection or reuses one, never both, and is
        // counted when it completes.
        if s.connections_opened.saturating_add(s.connections_reused) > s.completed {
            return Err(reject(
                "counts_disagree",
                format!(
                    "connections_opened {} + connections_reused {} > completed {}",
                    s.connections_opened, s.connections_reused, s.completed
                ),
            ));
        }
        if outcomes > s.completed {
            return Err(reject(
                "counts_disagree",
                format!(
                    "{outcomes} outcomes (status + errors + grpc_status) but {} completed",
                    s.completed
                ),
            ));
        }
        for (field, v) in [
            ("in_flight", s.in_flight),
            ("max_in_flight", s.max_in_flight),
        ] {
            if v > u64::from(MAX_IN_FLIGHT) {
                return Err(reject(
                    "count_out_of_range",
                    format!("{field} = {v} is more than {MAX_IN_FLIGHT}"),
                ));
            }
        }
        if let Some(f) = &s.sse {
            sse(f)?;
        }
        requests::check(s, self.kinds.get(s.scenario as usize).copied().unwrap_or(0))?;
        for (field, v) in [("cpu_seconds", s.cpu_seconds), ("host_cpu", s.host_cpu)] {
            if !(0.0..=1e9).contains(&v) {
                return Err(reject(
                    "count_out_of_range",
                    format!("{field} = {v} is not a plausible figure"),
                ));
            }
        }
        Ok(())
    }
}

/// A subscription snapshot part: counts bounded, words from the vocabulary,
/// lists within their bounds, fan-out receipts in order.
fn sse(f: &v1::SseFigures) -> Result<(), Rejection> {
    for (field, v) in [
        ("sse.opened", f.opened),
        ("sse.events", f.events),
        ("sse.ended_by_server", f.ended_by_server),
        ("sse.reconnects", f.reconnects),
        ("sse.resumed", f.resumed),
        ("sse.negative", f.negative),
        ("sse.no_send_time", f.no_send_time),
        ("sse.duplicates", f.duplicates),
        ("sse.comments", f.comments),
        ("sse.fanout_untracked", f.fanout_untracked),
    ] {
        fits(field, v, 0)?;
    }
    for (field, v) in [
        ("sse.open_streams", f.open_streams),
        ("sse.max_open_streams", f.max_open_streams),
    ] {
        if v > u64::from(MAX_IN_FLIGHT) {
            return Err(reject(
                "count_out_of_range",
                format!("{field} = {v} is more than {MAX_IN_FLIGHT}"),
            ));
        }
    }
    if f.stream_errors.len() + f.refused.len() > MAX_STREAM_ERROR_KINDS {
        return Err(reject(
            "count_out_of_range",
            format!(
                "sse.stream_errors and sse.refused have more than {MAX_STREAM_ERROR_KINDS} keys"
            ),
        ));
    }
    words::<ErrorKind>(
        "unknown_error_kind",
        "sse.stream_errors",
        f.stream_errors.keys(),
    )?;
    for &v in f.stream_errors.values().chain(f.refused.values()) {
        fits("sse.stream_errors", v, 0)?;
    }
    if let Some(code) = f.refused.keys().find(|c| !(100..=999).contains(*c)) {
        return Err(reject(
            "bad_status",
            format!("sse.refused status {code} is not a 3-digit HTTP status"),
        ));
    }
    if f.fanout.len() > MAX_FANOUT_IDS {
        return Err(reject(
            "count_out_of_range",
            format!(
                "sse.fanout has {} ids, more than {MAX_FANOUT_IDS}",
                f.fanout.len()
            ),
        ));
    }
    for r in &f.fanout {
        if r.id.len() > MAX_FANOUT_ID_BYTES || r.first_ns > r.last_ns || r.subscribers == 0 {
            return Err(reject(
                "bad_fanout",
                format!(
                    "sse.fanout id of {} bytes (at most {MAX_FANOUT_ID_BYTES}), {} subscribers, first {} last {}",
                    r.id.len(),
                    r.subscribers,
                    r.first_ns,
                    r.last_ns
                ),
            ));
        }
        fits("sse.fanout.subscribers", r.subscribers, 0)?;
    }
    Ok(())
}

/// Every key must be a word of `T`'s vocabulary.
fn words<'a, T: FromStr>(
    what: &'static str,
    field: &str,
    mut keys: impl Iterator<Item = &'a String>,
) -> Result<(), Rejection> {
    match keys.find(|k| T::from_str(k).is_err()) {
        Some(k) => {
            let shown: String = k.chars().take(64).collect();
            Err(reject(
                what,
                format!("{field} key {shown:?} is not in the vocabulary"),
            ))
        }
        None => Ok(()),
    }
}

/// One count: within [`MAX_SNAPSHOT_COUNT`], and addable to its total.
fn fits(field: &str, v: u64, total: u64) -> Result<(), Rejection> {
    if v > MAX_SNAPSHOT_COUNT {
        return Err(reject(
            "count_out_of_range",
            format!("{field} = {v} is more than {MAX_SNAPSHOT_COUNT} in one snapshot"),
        ));
    }
    if total.checked_add(v).is_none() {
        return Err(reject(
            "count_overflow",
            format!("{field} = {v} would overflow the run's total {total}"),
        ));
    }
    Ok(())
}

fn sum<'a>(field: &str, mut values: impl Iterator<Item = &'a u64>) -> Result<u64, Rejection> {
    values
        .try_fold(0u64, |acc, &v| acc.checked_add(v))
        .ok_or_else(|| reject("count_overflow", format!("{field} overflow when summed")))
}

mod requests;
#[cfg(test)]
mod tests;
