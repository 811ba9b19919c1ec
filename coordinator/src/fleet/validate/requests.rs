//! Checks on a snapshot's per-request figures (`Snapshot.requests`): each
//! names a request of its scenario's mix by index, in increasing order
//! (so no request comes twice, checked without allocating), its words come
//! from the vocabulary and its counts stay within bounds and agree with
//! the snapshot's own. Each accepted entry is merged into that request's
//! figures for the whole run, so an unknown index would be a row the plan
//! never had.

use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus};

use super::{fits, reject, sum, words, Rejection};

/// Checks `s.requests` against a scenario of `kinds` requests.
pub(super) fn check(s: &v1::Snapshot, kinds: usize) -> Result<(), Rejection> {
    if s.requests.len() > kinds {
        return Err(reject(
            "request_out_of_range",
            format!(
                "{} per-request entries but the scenario has {kinds} requests",
                s.requests.len()
            ),
        ));
    }
    let mut next = 0u64;
    for r in &s.requests {
        let index = u64::from(r.request);
        if index >= kinds as u64 {
            return Err(reject(
                "request_out_of_range",
                format!(
                    "request {} but the scenario has {kinds} requests",
                    r.request
                ),
            ));
        }
        if index < next {
            return Err(reject(
                "request_out_of_order",
                format!(
                    "request {} after request {}: each request comes once, in order",
                    r.request,
                    next - 1
                ),
            ));
        }
        next = index + 1;
        one(r)?;
    }
    if s.requests.is_empty() {
        return Ok(());
    }
    for (field, parts, whole) in [
        (
            "completed",
            sum(
                "requests.completed",
                s.requests.iter().map(|r| &r.completed),
            )?,
            s.completed,
        ),
        (
            "completed_in_window",
            sum(
                "requests.completed_in_window",
                s.requests.iter().map(|r| &r.completed_in_window),
            )?,
            s.completed_in_window,
        ),
        (
            "completed_ok_in_window",
            sum(
                "requests.completed_ok_in_window",
                s.requests.iter().map(|r| &r.completed_ok_in_window),
            )?,
            s.completed_ok_in_window,
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

/// One request's entry: words known, counts bounded and consistent. Each
/// count is at most the snapshot's `completed` (checked by the caller's
/// sums), which was checked to fit the run's totals, so no request's
/// total can wrap either.
fn one(r: &v1::RequestFigures) -> Result<(), Rejection> {
    let at = |field: &str| format!("requests[{}].{field}", r.request);
    words::<ErrorKind>("unknown_error_kind", &at("errors"), r.errors.keys())?;
    words::<GrpcStatus>(
        "unknown_grpc_status",
        &at("grpc_status"),
        r.grpc_status.keys(),
    )?;
    if let Some(code) = r.status.keys().find(|c| !(100..=999).contains(*c)) {
        return Err(reject(
            "bad_status",
            format!("{} {code} is not a 3-digit HTTP status", at("status")),
        ));
    }
    for (field, v) in [
        ("completed", r.completed),
        ("completed_in_window", r.completed_in_window),
        ("completed_ok_in_window", r.completed_ok_in_window),
    ] {
        fits(&at(field), v, 0)?;
    }
    for &v in r
        .status
        .values()
        .chain(r.errors.values())
        .chain(r.grpc_status.values())
    {
        fits(&at("status"), v, 0)?;
    }
    let outcomes = sum(
        &at("status + errors + grpc_status"),
        r.status
            .values()
            .chain(r.errors.values())
            .chain(r.grpc_status.values()),
    )?;
    if outcomes > r.completed
        || r.completed_in_window > r.completed
        || r.completed_ok_in_window > r.completed_in_window
    {
        return Err(reject(
            "counts_disagree",
            format!(
                "{}: {outcomes} outcomes, {} completed, {} in the window, {} of them ok",
                at("completed"),
                r.completed,
                r.completed_in_window,
                r.completed_ok_in_window
            ),
        ));
    }
    Ok(())
}
