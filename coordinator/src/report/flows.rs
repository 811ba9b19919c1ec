//! A flow scenario's part of the report: how its flows ended
//! (`scenarios[].flows`) and each step's funnel, checks and times
//! (`scenarios[].steps[]`), from the merged figures.

use loadfleet_proto::figures::{Figures, FlowFigures, RequestFigures};
use loadfleet_proto::histogram::percentiles;

use super::parts::{per_second, request_of, unsent_of};
use super::plan_info::StepInfo;
use crate::report_model::{CheckReport, FlowReport, StepReport};

/// The flows of a scenario whose merged figures are `m` (they count
/// flows), whose flow figures are `f` and of which `unreported` have an
/// unknown fate (lost agents').
pub(super) fn flows_of(m: &Figures, f: &FlowFigures, unreported: u64, window_s: f64) -> FlowReport {
    let failed = f.failed.total();
    let ended = m.completed;
    // Failed flows that ended inside the window are in
    // `completed_in_window` but not in `completed_ok_in_window`.
    FlowReport {
        intended: m.intended,
        started: m.sent,
        unsent: unsent_of(&m.unsent),
        unreported,
        completed: ended.saturating_sub(failed),
        failed,
        failed_by_reason: f.failed.by_word(),
        in_flight_at_end: m.sent.saturating_sub(ended),
        throughput_fps: per_second(m.completed_ok_in_window, window_s),
        latency_ms: percentiles(&m.latency.all()),
        active_ms: percentiles(&f.active),
    }
}

/// Each step named in `steps`, from its merged figures.
pub(super) fn steps_of(
    steps: &[StepInfo],
    merged: &[RequestFigures],
    window_s: f64,
) -> Vec<StepReport> {
    steps
        .iter()
        .enumerate()
        .map(|(k, info)| {
            let m = merged.get(k).cloned().unwrap_or_default();
            StepReport {
                request: request_of(&info.name, &m, window_s),
                reached: m.reached,
                sent: m.sent,
                unsent: m.unsent.by_word(),
                not_reached: m.not_reached.by_word(),
                checks: info
                    .checks
                    .iter()
                    .enumerate()
                    .map(|(i, text)| CheckReport {
                        check: text.clone(),
                        passed: m.checks_passed.get(i),
                        failed: m.checks_failed.get(i),
                    })
                    .collect(),
                service_time_ms: percentiles(&m.service_time),
                start_lag_ms: percentiles(&m.start_lag),
            }
        })
        .collect()
}
