//! The parts of the report that several of its sections build alike from
//! merged figures: unsent counts as the report keys them, rates over a
//! window, and one request's (or step's) row.

use loadfleet_proto::figures::{RequestFigures, UnsentCounts};
use loadfleet_proto::histogram::percentiles;
use loadfleet_proto::vocab::UnsentReason;

use crate::report_model::{RequestReport, Unsent};

/// Unsent arrivals as the report keys them: the total, the two reasons
/// every report has, and the others that occurred.
pub(super) fn unsent_of(u: &UnsentCounts) -> Unsent {
    let mut other = u.by_word();
    other.remove(UnsentReason::ConcurrencyLimit.as_str());
    other.remove(UnsentReason::Late.as_str());
    Unsent {
        total: u.total(),
        concurrency_limit: u.get(UnsentReason::ConcurrencyLimit),
        late: u.get(UnsentReason::Late),
        other,
    }
}

/// Completions per second of a window `window_s` long.
pub(super) fn per_second(n: u64, window_s: f64) -> f64 {
    if window_s > 0.0 {
        n as f64 / window_s
    } else {
        0.0
    }
}

/// One request of a mix (or step of a flow), named `name`.
pub(super) fn request_of(name: &str, m: &RequestFigures, window_s: f64) -> RequestReport {
    RequestReport {
        name: name.to_string(),
        completed: m.completed,
        completed_in_window: m.completed_in_window,
        completed_ok_in_window: m.completed_ok_in_window,
        failures: m.failures(),
        throughput_rps: per_second(m.completed_in_window, window_s),
        throughput_ok_rps: per_second(m.completed_ok_in_window, window_s),
        status: m.status.by_word(),
        errors: m.errors.by_word(),
        grpc_status: m.grpc_status.by_word(),
        latency_ms: percentiles(&m.latency),
    }
}
