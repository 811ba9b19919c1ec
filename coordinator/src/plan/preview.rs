//! `plan preview`'s expected load: per bucket of time, what the fleet and
//! its first agents will send (open) or run (closed), as the agents will
//! compute it.

use loadfleet_proto::partition::Interleave;

use super::validated::{Model, Scenario};

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
    let Ok(interleave) = Interleave::equal(agents) else {
        return Preview {
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
        bucket_secs,
        rows: out,
    }
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
