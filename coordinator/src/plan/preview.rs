//! `plan preview`'s expected load: per bucket of time, what the fleet and
//! its first agents will send (open) or run (closed), as the agents will
//! compute it; for a flow, its steps in order.

use loadfleet_proto::partition::Interleave;

use super::validated::{Model, Scenario, StepPlan};

/// Most rows `plan preview` shows per scenario: a longer scenario is shown
/// in coarser buckets, so the preview of any accepted plan stays small.
pub const PREVIEW_ROWS: u64 = 600;
/// Agents `plan preview` shows one by one (the fleet column counts all).
pub const PREVIEW_AGENTS: usize = 8;

/// Expected load of one scenario, for `plan preview`: one row per bucket of
/// `bucket_secs` (1 s unless the scenario is longer than [`PREVIEW_ROWS`]
/// seconds), with the fleet's figure and the first [`PREVIEW_AGENTS`]
/// agents'.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// What the figures count: "arrivals", "flows" (an open flow's
    /// arrivals each start one) or "clients".
    pub unit: &'static str,
    /// A flow's steps, one line each, in the order each flow runs them.
    pub steps: Vec<String>,
    pub bucket_secs: u64,
    /// Per bucket: the fleet's figure and the shown agents' shares.
    pub rows: Vec<(u64, Vec<u64>)>,
}

/// Open: arrivals of the real schedule in each bucket; closed: clients
/// active at the start of each bucket. Memory is at most [`PREVIEW_ROWS`] ×
/// [`PREVIEW_AGENTS`] counts whatever the plan or `agents`.
pub fn preview(s: &Scenario, agents: usize) -> Preview {
    let seconds = (s.duration.as_secs() + u64::from(s.duration.subsec_nanos() > 0)).max(1);
    let bucket_secs = seconds.div_ceil(PREVIEW_ROWS).max(1);
    let bucket_ns = bucket_secs * 1_000_000_000;
    let rows = seconds.div_ceil(bucket_secs) as usize;
    let agents = agents.max(1);
    let shown = agents.min(PREVIEW_AGENTS);
    let unit = match (&s.model, s.is_flow()) {
        (Model::Open(_), false) => "arrivals",
        (Model::Open(_), true) => "flows",
        (Model::Closed(_), _) => "clients",
    };
    let steps = s.steps.iter().enumerate().map(step_line).collect();
    let Ok(interleave) = Interleave::equal(agents) else {
        return Preview {
            unit,
            steps,
            bucket_secs,
            rows: Vec::new(),
        };
    };
    let mut out = vec![(0u64, vec![0u64; shown]); rows];
    match &s.model {
        Model::Open(schedule) => {
            for (k, t) in schedule.arrivals().enumerate() {
                if let Some(row) = out.get_mut((t / bucket_ns) as usize) {
                    row.0 += 1;
                    if let Some(n) = row.1.get_mut(interleave.owner(k as u64)) {
                        *n += 1;
                    }
                }
            }
        }
        Model::Closed(population) => {
            for (b, row) in out.iter_mut().enumerate() {
                // Client c is active while the count is at least c + 1, so
                // floor(count) clients run; with equal shares each agent
                // owns one client of every `agents` in a row.
                let active = clients_at(&population.stages, b as u64 * bucket_ns);
                row.0 = active;
                let whole = active / agents as u64;
                for n in row.1.iter_mut() {
                    *n = whole;
                }
                for c in whole * agents as u64..active {
                    if let Some(n) = row.1.get_mut(interleave.owner(c)) {
                        *n += 1;
                    }
                }
            }
        }
    }
    Preview {
        unit,
        steps,
        bucket_secs,
        rows: out,
    }
}

/// Step `k` in a line: `2. cart_add: POST /cart, 2 check(s), captures
/// cart, think 200ms`.
fn step_line((k, step): (usize, &StepPlan)) -> String {
    let r = &step.request;
    let mut line = match &r.grpc {
        Some(method) => format!("{}. {}: gRPC {method}", k + 1, r.name),
        None => format!("{}. {}: {} {}", k + 1, r.name, r.method, r.path),
    };
    if !step.checks.is_empty() {
        line.push_str(&format!(", {} check(s)", step.checks.len()));
    }
    if !step.captures.is_empty() {
        let names: Vec<&str> = step.captures.iter().map(|(n, _)| n.as_str()).collect();
        line.push_str(&format!(", captures {}", names.join(", ")));
    }
    let shown = |d| humantime::format_duration(d).to_string();
    match (step.think_min, step.think_max) {
        (_, max) if max.is_zero() => {}
        (min, max) if min == max => line.push_str(&format!(", think {}", shown(min))),
        (min, max) => line.push_str(&format!(", think {}..{}", shown(min), shown(max))),
    }
    if step.continue_on_failure {
        line.push_str(", goes on after a failure");
    }
    line
}

/// Clients a closed profile runs at `t` ns after its start.
fn clients_at(stages: &[loadfleet_proto::schedule::Stage], t: u64) -> u64 {
    let mut start = 0u64;
    for st in stages {
        let end = start.saturating_add(st.duration_ns);
        if t < end {
            let into = (t - start) as f64 / st.duration_ns.max(1) as f64;
            let level = (st.from_rps + (st.to_rps - st.from_rps) * into).max(0.0);
            // As agents cut windows: while rising, a client whose level is
            // reached is on; while falling, one is off once its level is
            // reached.
            return if st.to_rps < st.from_rps {
                (level.ceil() as u64).saturating_sub(1)
            } else {
                level.floor() as u64
            };
        }
        start = end;
    }
    0
}
