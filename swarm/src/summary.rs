//! The swarm's own account of a run, written as JSON for the test and the
//! bench to hold against the coordinator's report.json.

use std::time::Duration;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::payload::Sent;
use crate::session::Outcome;

/// Percentiles read by the same function as the report's, so equal
/// histograms give equal numbers; null when empty, as in the report.
fn percentiles(h: &Histogram<u64>) -> Value {
    serde_json::to_value(histogram::percentiles(h)).unwrap_or(Value::Null)
}

fn seconds(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_secs_f64()))
}

/// The summary: what was sent, and how the coordinator treated the swarm.
pub fn summary(agents: &[Outcome], sent: &Sent) -> Value {
    let last_hello = agents.iter().filter_map(|a| a.hello_sent).max();
    let max = |f: fn(&Outcome) -> Option<Instant>| agents.iter().filter_map(f).max();
    let min = |f: fn(&Outcome) -> Option<Instant>| agents.iter().filter_map(f).min();
    let since_hello = |t: Option<Instant>| match (last_hello, t) {
        (Some(h), Some(t)) => Some(t.saturating_duration_since(h)),
        _ => None,
    };
    let errors: Vec<String> = agents
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.error.as_ref().map(|e| format!("swarm-{i}: {e}")))
        .take(20)
        .collect();
    let f = &sent.figures;
    let gap = |f: fn(&Outcome) -> Duration| {
        agents.iter().map(f).max().unwrap_or_default().as_secs_f64() * 1000.0
    };
    json!({
        "agents": agents.len(),
        "welcomed": agents.iter().filter(|a| a.welcomed.is_some()).count(),
        "assigned": agents.iter().filter(|a| a.assigned.is_some()).count(),
        "finished": agents.iter().filter(|a| a.finished.is_some()).count(),
        "closed_cleanly": agents.iter().filter(|a| a.closed_cleanly).count(),
        "failed": agents.iter().filter(|a| a.error.is_some()).count(),
        "errors": errors,
        "timing": {
            "last_hello_to_last_assignment_s": seconds(since_hello(max(|a| a.assigned))),
            "last_hello_to_start_s": seconds(since_hello(max(|a| a.start))),
            // Every agent shares the swarm's clock, so the spread of the
            // start instants they were given is the clock estimate's error.
            "start_spread_ms": match (min(|a| a.start), max(|a| a.start)) {
                (Some(a), Some(b)) => json!((b - a).as_secs_f64() * 1000.0),
                _ => Value::Null,
            },
            "heartbeat_gap_max_ms": gap(|a| a.heartbeat_gap),
            "heartbeat_gap_before_run_max_ms": gap(|a| a.heartbeat_gap_before_run),
            "heartbeat_gap_in_run_max_ms": gap(|a| a.heartbeat_gap_in_run),
            "heartbeat_gap_after_run_max_ms": gap(|a| a.heartbeat_gap_after_run),
            "heartbeats_min": agents.iter().map(|a| a.heartbeats).min().unwrap_or(0),
        },
        "sent": {
            "snapshots": sent.snapshots,
            "distinct_values_per_snapshot": sent.distinct_per_snapshot,
            "intended": f.intended,
            "sent": f.sent,
            "completed": f.completed,
            "completed_in_window": f.completed_in_window,
            "status": f.status.by_word(),
            "errors": f.errors.by_word(),
            "latency_ms": percentiles(&f.latency.all()),
            "latency_by_class_ms": f.latency.iter().map(|(k, h)| (k.to_string(), percentiles(h))).collect::<serde_json::Map<_, _>>(),
        },
    })
}
