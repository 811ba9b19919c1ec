//! The metric catalogue: every series the live outputs carry, each with
//! its name, kind, unit, labels and help, and the one way a [`Frame`] is
//! turned into samples of them ([`points`]).
//!
//! The scrape endpoint, Prometheus remote write and OTLP all encode the
//! same points, so a series cannot have one name, type or label set on
//! one of them and another elsewhere; InfluxDB's fields are named here too.
//! Names follow OpenTelemetry (`loadfleet.requests.sent`), and the
//! Prometheus name is derived from it by the OpenTelemetry Collector's
//! rules (dots to `_`, the unit as a suffix, `_total` on a counter), so a
//! Collector turns the OTLP output into the remote-write names.
//! docs/outputs.md's table is [`markdown`], checked by a test.

use hdrhistogram::Histogram;
use loadfleet_proto::vocab::{FlowFailure, UnsentReason};

use super::frame::{Counts, FlowFrame, Frame};
use crate::units;

/// How a series accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The run's total so far; never goes down within a run.
    Counter,
    Gauge,
    /// The run's whole distribution so far (µs in, the unit out).
    Histogram,
}

/// What a series' value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Seconds,
    /// A count of things, as a UCUM annotation (`{request}`).
    Count(&'static str),
}

impl Unit {
    /// As OTLP writes it.
    pub(crate) fn ucum(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Count(what) => what,
        }
    }
}

/// One entry of the catalogue.
#[derive(Debug, PartialEq)]
pub(crate) struct Metric {
    /// The OpenTelemetry name; [`Metric::prometheus`] derives the other.
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    /// The series' own labels, besides the run's (`run_id`, `plan`, …).
    pub labels: &'static [&'static str],
    /// InfluxDB's field (or fields) for it; a field ending in `_` is
    /// followed by the label's value (`status_503`).
    pub influx: &'static str,
    pub help: &'static str,
}

impl Metric {
    /// The Prometheus name: the scrape endpoint's and remote write's.
    pub(crate) fn prometheus(&self) -> String {
        let mut n = self.name.replace('.', "_");
        if self.unit == Unit::Seconds {
            n.push_str("_seconds");
        }
        if self.kind == Kind::Counter {
            n.push_str("_total");
        }
        n
    }
}

const REQUEST: Unit = Unit::Count("{request}");
const FLOW: Unit = Unit::Count("{flow}");
const SCENARIO: &[&str] = &["scenario"];
const STEP: &[&str] = &["scenario", "step"];
const AGENT: &[&str] = &["agent"];

pub(crate) static INTENDED: Metric = Metric {
    name: "loadfleet.requests.intended",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: SCENARIO,
    influx: "intended",
    help: "Arrivals due so far by the schedule",
};
pub(crate) static SENT: Metric = Metric {
    name: "loadfleet.requests.sent",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: SCENARIO,
    influx: "sent",
    help: "Requests written to the wire",
};
pub(crate) static UNSENT: Metric = Metric {
    name: "loadfleet.requests.unsent",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: &["scenario", "reason"],
    influx: "unsent_",
    help: "Arrivals never sent, by reason (every reason, zeros included)",
};
pub(crate) static UNREPORTED: Metric = Metric {
    name: "loadfleet.requests.unreported",
    kind: Kind::Gauge,
    unit: REQUEST,
    labels: SCENARIO,
    influx: "unreported",
    help: "Lost agents' arrivals whose fate is unknown (due before the agent had certainly stopped, never reported); goes down when its last figures arrive",
};
pub(crate) static COMPLETED: Metric = Metric {
    name: "loadfleet.requests.completed",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: SCENARIO,
    influx: "completed",
    help: "Requests that got a response or an error",
};
pub(crate) static RESPONSES: Metric = Metric {
    name: "loadfleet.responses",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: &["scenario", "code"],
    influx: "status_",
    help: "Responses by HTTP status code",
};
pub(crate) static ERRORS: Metric = Metric {
    name: "loadfleet.errors",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: &["scenario", "kind"],
    influx: "error_",
    help: "Transport errors by kind",
};
pub(crate) static GRPC_RESPONSES: Metric = Metric {
    name: "loadfleet.grpc.responses",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: &["scenario", "grpc_status"],
    influx: "grpc_",
    help: "gRPC calls by grpc-status, apart from HTTP statuses",
};
pub(crate) static FAILURES: Metric = Metric {
    name: "loadfleet.failures",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: SCENARIO,
    influx: "failures",
    help: "Requests that did not succeed: transport errors, 4xx and 5xx answers, gRPC statuses other than OK",
};
pub(crate) static POOL_SATURATED: Metric = Metric {
    name: "loadfleet.pool.saturated",
    kind: Kind::Counter,
    unit: Unit::Seconds,
    labels: SCENARIO,
    influx: "pool_saturated_seconds",
    help: "Time every connection of an agent's own pool was busy with requests waiting (mean over each agent's pools, summed over agents)",
};
pub(crate) static LATENCY: Metric = Metric {
    name: "loadfleet.latency",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    labels: SCENARIO,
    influx: "count, p50_ms, p90_ms, p99_ms, p999_ms, max_ms (the push's seconds)",
    help: "Latency from the intended send time, every outcome, since the start",
};
pub(crate) static SERVICE_TIME: Metric = Metric {
    name: "loadfleet.service_time",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    labels: SCENARIO,
    influx: "",
    help: "Latency from the actual send time, every outcome, since the start",
};
pub(crate) static LATENCY_EXACT: Metric = Metric {
    name: "loadfleet.latency_exact",
    kind: Kind::Gauge,
    unit: Unit::Seconds,
    labels: &["scenario", "quantile"],
    influx: "count_total, p50_ms_total, …, max_ms_total",
    help: "Latency percentiles of the run so far, from the exact merge",
};
pub(crate) static FLOWS_STARTED: Metric = Metric {
    name: "loadfleet.flows.started",
    kind: Kind::Counter,
    unit: FLOW,
    labels: SCENARIO,
    influx: "flows_started",
    help: "Flows whose first step was sent (a flow scenario's only)",
};
pub(crate) static FLOWS_COMPLETED: Metric = Metric {
    name: "loadfleet.flows.completed",
    kind: Kind::Counter,
    unit: FLOW,
    labels: SCENARIO,
    influx: "flows_completed",
    help: "Flows that ended with every step passed",
};
pub(crate) static FLOWS_FAILED: Metric = Metric {
    name: "loadfleet.flows.failed",
    kind: Kind::Counter,
    unit: FLOW,
    labels: &["scenario", "reason"],
    influx: "flows_failed_",
    help: "Flows that ended failed, by reason (every reason, zeros included)",
};
pub(crate) static FLOW_LATENCY: Metric = Metric {
    name: "loadfleet.flow.latency",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    labels: SCENARIO,
    influx: "",
    help: "Flow latency, from a flow's intended start to its last step's end, failed flows included, since the start",
};
pub(crate) static STEP_SENT: Metric = Metric {
    name: "loadfleet.step.requests.sent",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: STEP,
    influx: "sent",
    help: "Requests of one step of a flow written to the wire",
};
pub(crate) static STEP_COMPLETED: Metric = Metric {
    name: "loadfleet.step.requests.completed",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: STEP,
    influx: "completed",
    help: "Requests of one step of a flow that got a response or an error",
};
pub(crate) static STEP_FAILURES: Metric = Metric {
    name: "loadfleet.step.failures",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: STEP,
    influx: "failures",
    help:
        "Requests of one step of a flow that did not succeed, as `loadfleet.failures` counts them",
};
pub(crate) static STEP_LATENCY: Metric = Metric {
    name: "loadfleet.step.latency",
    kind: Kind::Histogram,
    unit: Unit::Seconds,
    labels: STEP,
    influx: "count, p50_ms, …, max_ms",
    help: "Latency of one step of a flow from its ready instant, every outcome, since the start",
};
pub(crate) static IN_FLIGHT: Metric = Metric {
    name: "loadfleet.in_flight",
    kind: Kind::Gauge,
    unit: REQUEST,
    labels: &[],
    influx: "in_flight",
    help: "Requests in flight at the end of the last settled second",
};
pub(crate) static AGENTS_ALIVE: Metric = Metric {
    name: "loadfleet.agents.alive",
    kind: Kind::Gauge,
    unit: Unit::Count("{agent}"),
    labels: &[],
    influx: "agents_alive",
    help: "Agents taking part in the run",
};
pub(crate) static ELAPSED: Metric = Metric {
    name: "loadfleet.run.elapsed",
    kind: Kind::Gauge,
    unit: Unit::Seconds,
    labels: &[],
    influx: "elapsed_seconds",
    help: "Seconds of the run settled so far, from the common start",
};
pub(crate) static VERDICT: Metric = Metric {
    name: "loadfleet.verdict",
    kind: Kind::Gauge,
    unit: Unit::Count("{verdict}"),
    labels: &["code", "level"],
    influx: "message",
    help: "One series (at 1) per verdict of the report, pushed at the end",
};
pub(crate) static AGENT_SENT: Metric = Metric {
    name: "loadfleet.agent.requests.sent",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: AGENT,
    influx: "sent_total",
    help: "Requests one agent wrote to the wire",
};
pub(crate) static AGENT_COMPLETED: Metric = Metric {
    name: "loadfleet.agent.requests.completed",
    kind: Kind::Counter,
    unit: REQUEST,
    labels: AGENT,
    influx: "completed_total",
    help: "Requests one agent saw complete",
};
pub(crate) static AGENT_CPU: Metric = Metric {
    name: "loadfleet.agent.cpu",
    kind: Kind::Counter,
    unit: Unit::Seconds,
    labels: AGENT,
    influx: "cpu_seconds_total",
    help: "CPU time one agent used",
};
pub(crate) static AGENT_MAX_LAG: Metric = Metric {
    name: "loadfleet.agent.max_lag",
    kind: Kind::Gauge,
    unit: Unit::Seconds,
    labels: AGENT,
    influx: "max_lag_ms",
    help: "One agent's largest send lag behind the schedule so far",
};

/// The whole catalogue, in the order outputs write it.
pub(crate) static ALL: &[&Metric] = &[
    &INTENDED,
    &SENT,
    &UNSENT,
    &UNREPORTED,
    &COMPLETED,
    &RESPONSES,
    &ERRORS,
    &GRPC_RESPONSES,
    &FAILURES,
    &POOL_SATURATED,
    &LATENCY,
    &SERVICE_TIME,
    &LATENCY_EXACT,
    &FLOWS_STARTED,
    &FLOWS_COMPLETED,
    &FLOWS_FAILED,
    &FLOW_LATENCY,
    &STEP_SENT,
    &STEP_COMPLETED,
    &STEP_FAILURES,
    &STEP_LATENCY,
    &IN_FLIGHT,
    &AGENTS_ALIVE,
    &ELAPSED,
    &VERDICT,
    &AGENT_SENT,
    &AGENT_COMPLETED,
    &AGENT_CPU,
    &AGENT_MAX_LAG,
];

/// The exact percentiles every output carries: the quantile, its
/// `quantile` label, and InfluxDB's field prefix.
pub(crate) const QUANTILES: [(f64, &str, &str); 4] = [
    (0.5, "0.5", "p50"),
    (0.9, "0.9", "p90"),
    (0.99, "0.99", "p99"),
    (0.999, "0.999", "p999"),
];

/// Classic histogram bucket bounds (seconds): the scrape endpoint's, and
/// remote write's with `histograms = "classic"`.
pub(crate) const CLASSIC_BOUNDS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];

/// A classic histogram's cumulative buckets as (`le`, count), `+Inf`
/// last.
pub(crate) fn classic_buckets(h: &Histogram<u64>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = CLASSIC_BOUNDS
        .iter()
        .map(|&le| (le.to_string(), h.count_between(0, units::s_to_us(le))))
        .collect();
    out.push(("+Inf".into(), h.len()));
    out
}

/// Σ value × count in seconds, each value at the top of its HDR bucket
/// (the value the report's percentiles read).
pub(crate) fn sum_seconds(h: &Histogram<u64>) -> f64 {
    h.iter_recorded()
        .map(|v| units::us_to_s(v.value_iterated_to()) * v.count_at_value() as f64)
        .sum()
}

/// A sample's value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'f> {
    /// A count, or seconds already.
    Number(f64),
    /// A duration in µs; each output writes it in its own unit.
    Micros(u64),
    /// A distribution in µs.
    Histogram(&'f Histogram<u64>),
}

/// One sample of one series: the values of its metric's labels, in the
/// order of [`Metric::labels`].
#[derive(Debug, Clone)]
pub(crate) struct Point<'f> {
    pub metric: &'static Metric,
    pub labels: Vec<String>,
    pub value: Value<'f>,
}

impl Point<'_> {
    /// The labels as (name, value) pairs.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.metric
            .labels
            .iter()
            .copied()
            .zip(self.labels.iter().map(String::as_str))
    }
}

fn point<'f>(metric: &'static Metric, labels: Vec<String>, value: Value<'f>) -> Point<'f> {
    debug_assert_eq!(metric.labels.len(), labels.len(), "{}", metric.name);
    Point {
        metric,
        labels,
        value,
    }
}

/// A scenario's counters: the run's totals or one step's, labelled with
/// `scenario` (InfluxDB names its fields from the same points).
pub(crate) fn counts<'f>(scenario: &str, c: &Counts) -> Vec<Point<'f>> {
    let sc = || vec![scenario.to_string()];
    let by = |v: &str| vec![scenario.to_string(), v.to_string()];
    let n = |v: u64| Value::Number(v as f64);
    let mut out = vec![
        point(&INTENDED, sc(), n(c.intended)),
        point(&SENT, sc(), n(c.sent)),
    ];
    // Every reason, zeros included: `rate()` over a series that appears
    // only on its first increment misses that increment.
    for r in UnsentReason::ALL {
        let v = c.unsent.get(r.as_str()).copied().unwrap_or(0);
        out.push(point(&UNSENT, by(r.as_str()), n(v)));
    }
    // A reason this build does not name still counts.
    for (reason, v) in &c.unsent {
        if UnsentReason::ALL.iter().all(|r| r.as_str() != reason) {
            out.push(point(&UNSENT, by(reason), n(*v)));
        }
    }
    out.push(point(&UNREPORTED, sc(), n(c.unreported)));
    out.push(point(&COMPLETED, sc(), n(c.completed)));
    for (code, v) in &c.status {
        out.push(point(&RESPONSES, by(&code.to_string()), n(*v)));
    }
    for (kind, v) in &c.errors {
        out.push(point(&ERRORS, by(kind), n(*v)));
    }
    for (status, v) in &c.grpc_status {
        out.push(point(&GRPC_RESPONSES, by(status), n(*v)));
    }
    out.push(point(&FAILURES, sc(), n(c.failures)));
    let saturated = units::ns_to_s(c.pool_saturated_ns);
    out.push(point(&POOL_SATURATED, sc(), Value::Number(saturated)));
    out
}

/// A flow scenario's flows and steps, labelled with `scenario` (and
/// `step`).
pub(crate) fn flows<'f>(scenario: &str, f: &'f FlowFrame) -> Vec<Point<'f>> {
    let sc = || vec![scenario.to_string()];
    let n = |v: u64| Value::Number(v as f64);
    let mut out = vec![
        point(&FLOWS_STARTED, sc(), n(f.started)),
        point(&FLOWS_COMPLETED, sc(), n(f.completed)),
    ];
    // Every reason, zeros included, as for unsent arrivals.
    for r in FlowFailure::ALL {
        let v = f.failed.get(r.as_str()).copied().unwrap_or(0);
        out.push(point(
            &FLOWS_FAILED,
            vec![scenario.into(), r.to_string()],
            n(v),
        ));
    }
    out.push(point(&FLOW_LATENCY, sc(), Value::Histogram(&f.latency)));
    for q in &f.steps {
        let l = || vec![scenario.to_string(), q.name.clone()];
        out.push(point(&STEP_SENT, l(), n(q.sent)));
        out.push(point(&STEP_COMPLETED, l(), n(q.completed)));
        out.push(point(&STEP_FAILURES, l(), n(q.failures)));
        out.push(point(&STEP_LATENCY, l(), Value::Histogram(&q.latency)));
    }
    out
}

/// Every sample of a frame, in catalogue order within each scenario; the
/// per-agent ones only when asked. A frame of verdicts carries only those.
pub(crate) fn points(frame: &Frame, per_agent: bool) -> Vec<Point<'_>> {
    let mut out = Vec::new();
    if !frame.verdicts.is_empty() {
        for (code, level, _) in &frame.verdicts {
            let labels = vec![code.clone(), level.clone()];
            out.push(point(&VERDICT, labels, Value::Number(1.0)));
        }
        return out;
    }
    for s in &frame.scenarios {
        out.extend(counts(&s.name, &s.totals));
        out.push(point(
            &LATENCY,
            vec![s.name.clone()],
            Value::Histogram(&s.latency),
        ));
        out.push(point(
            &SERVICE_TIME,
            vec![s.name.clone()],
            Value::Histogram(&s.service_time),
        ));
        if !s.latency.is_empty() {
            for (q, label, _) in QUANTILES {
                let v = Value::Micros(s.latency.value_at_quantile(q));
                out.push(point(&LATENCY_EXACT, vec![s.name.clone(), label.into()], v));
            }
        }
        if let Some(f) = &s.flow {
            out.extend(flows(&s.name, f));
        }
    }
    let n = |v: u64| Value::Number(v as f64);
    out.push(point(&IN_FLIGHT, vec![], n(frame.in_flight)));
    out.push(point(&AGENTS_ALIVE, vec![], n(frame.agents_alive)));
    // The run's seconds are whole seconds from the common start.
    out.push(point(&ELAPSED, vec![], n(frame.seconds.end)));
    if per_agent {
        for a in &frame.agents {
            let l = || vec![a.name.clone()];
            out.push(point(&AGENT_SENT, l(), n(a.sent)));
            out.push(point(&AGENT_COMPLETED, l(), n(a.completed)));
            out.push(point(&AGENT_CPU, l(), Value::Number(a.cpu_seconds)));
            out.push(point(&AGENT_MAX_LAG, l(), Value::Micros(a.max_lag_us)));
        }
    }
    out
}

/// InfluxDB's field as the docs name it: a prefix followed by its label
/// in capitals (`status_CODE`).
#[cfg(test)]
fn influx_field(m: &Metric) -> String {
    match (m.influx.strip_suffix('_'), m.labels.get(1)) {
        (Some(prefix), Some(label)) => format!("{prefix}_{}", label.to_uppercase()),
        _ => m.influx.to_string(),
    }
}

/// docs/outputs.md's table of the catalogue, which a test holds the docs to.
#[cfg(test)]
fn markdown() -> String {
    let mut out = String::from(
        "| Prometheus | OTLP | kind | unit | labels | InfluxDB field | what |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for m in ALL {
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let code = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("`{s}`")
            }
        };
        out.push_str(&format!(
            "| {} | {} | {kind} | {} | {} | {} | {} |\n",
            code(&m.prometheus()),
            code(m.name),
            code(m.unit.ucum()),
            m.labels.join(", "),
            code(&influx_field(m)),
            m.help
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_follow_the_collectors_rules() {
        assert_eq!(SENT.prometheus(), "loadfleet_requests_sent_total");
        assert_eq!(LATENCY.prometheus(), "loadfleet_latency_seconds");
        assert_eq!(
            POOL_SATURATED.prometheus(),
            "loadfleet_pool_saturated_seconds_total"
        );
        assert_eq!(AGENT_CPU.prometheus(), "loadfleet_agent_cpu_seconds_total");
        assert_eq!(AGENTS_ALIVE.prometheus(), "loadfleet_agents_alive");
        let names: HashSet<String> = ALL.iter().map(|m| m.prometheus()).collect();
        assert_eq!(names.len(), ALL.len(), "two entries share a name");
    }

    /// The table in docs/outputs.md is the catalogue's, word for word.
    #[test]
    fn the_docs_table_is_the_catalogue() {
        let docs = include_str!("../../../docs/outputs.md");
        let table = markdown();
        assert!(
            docs.contains(&table),
            "docs/outputs.md must hold the catalogue's table:\n{table}"
        );
    }
}
