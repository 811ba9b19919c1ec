//! Checks on a snapshot's per-request figures (`Snapshot.requests`): each
//! names a request of its scenario's mix by index (checked on the wire,
//! before decoding; decoding checks that they come in increasing order, so
//! no request comes twice), and its counts agree with the snapshot's own.
//! Each accepted entry is merged into that request's figures for the whole
//! run, so an unknown index would be a row the plan never had.

use loadfleet_proto::bounds::MAX_CHECKS_PER_STEP;
use loadfleet_proto::figures::{FlowFigures, RequestFigures, Snapshot};
use loadfleet_proto::v1;

use super::{reject, Rejection};

/// Checks that `s.requests` names requests of a scenario of `kinds`.
pub(super) fn placement(s: &v1::Snapshot, kinds: usize) -> Result<(), Rejection> {
    if s.requests.len() > kinds {
        return Err(reject(
            "request_out_of_range",
            format!(
                "{} per-request entries but the scenario has {kinds} requests",
                s.requests.len()
            ),
        ));
    }
    if let Some(r) = s.requests.iter().find(|r| r.request as usize >= kinds) {
        return Err(reject(
            "request_out_of_range",
            format!(
                "request {} but the scenario has {kinds} requests",
                r.request
            ),
        ));
    }
    Ok(())
}

/// Checks the decoded entries against each other and the snapshot. Each
/// count is at most the snapshot's `completed` (checked by the sums), which
/// was checked to fit the run's totals, so no request's total can wrap.
pub(super) fn check(s: &Snapshot) -> Result<(), Rejection> {
    for (request, r) in &s.requests {
        one(*request, r)?;
    }
    if let Some(flow) = &s.flow {
        return steps(s, flow);
    }
    if s.requests.is_empty() {
        return Ok(());
    }
    let f = &s.figures;
    let total = |part: fn(&RequestFigures) -> u64| {
        s.requests
            .iter()
            .fold(0u64, |a, (_, r)| a.saturating_add(part(r)))
    };
    for (field, parts, whole) in [
        ("completed", total(|r| r.completed), f.completed),
        (
            "completed_in_window",
            total(|r| r.completed_in_window),
            f.completed_in_window,
        ),
        (
            "completed_ok_in_window",
            total(|r| r.completed_ok_in_window),
            f.completed_ok_in_window,
        ),
    ] {
        if parts != whole {
            return Err(reject(
                "counts_disagree",
                format!("requests' {field} add up to {parts} but the snapshot has {whole}"),
            ));
        }
    }
    Ok(())
}

/// A flow scenario's snapshot: its entries are steps, which a flow may
/// run many of, so they do not add up to its flows. Each step's sent and
/// unsent are booked with its reaching, so they are at most what it
/// reached; each check is judged on a completed answer, and each failed
/// flow ended.
fn steps(s: &Snapshot, flow: &FlowFigures) -> Result<(), Rejection> {
    for (step, r) in &s.requests {
        let resolved = r.sent.saturating_add(r.unsent.total());
        let checks = r
            .checks_passed
            .total()
            .saturating_add(r.checks_failed.total());
        if resolved > r.reached || checks > r.completed.saturating_mul(MAX_CHECKS_PER_STEP as u64) {
            return Err(reject(
                "counts_disagree",
                format!(
                    "steps[{step}]: sent {} + unsent {} of {} reached, {} checks on {} completed",
                    r.sent,
                    r.unsent.total(),
                    r.reached,
                    checks,
                    r.completed
                ),
            ));
        }
    }
    if flow.failed.total() > s.figures.completed {
        return Err(reject(
            "counts_disagree",
            format!(
                "{} flows failed but {} ended",
                flow.failed.total(),
                s.figures.completed
            ),
        ));
    }
    Ok(())
}

/// One request's entry: its outcomes and window counts within its
/// completions.
fn one(request: u32, r: &RequestFigures) -> Result<(), Rejection> {
    let outcomes = r
        .status
        .total()
        .saturating_add(r.errors.total())
        .saturating_add(r.grpc_status.total());
    if outcomes > r.completed
        || r.completed_in_window > r.completed
        || r.completed_ok_in_window > r.completed_in_window
    {
        return Err(reject(
            "counts_disagree",
            format!(
                "requests[{request}].completed: {outcomes} outcomes, {} completed, {} in the window, {} of them ok",
                r.completed, r.completed_in_window, r.completed_ok_in_window
            ),
        ));
    }
    Ok(())
}
