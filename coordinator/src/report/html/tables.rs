//! The tables around the headline: the repeated runs' medians and each
//! run (before it), the scenarios side by side, every outcome as a share
//! of what was intended, and the agents.

use maud::{html, Markup};

use loadfleet_proto::vocab::{AgentStatus, GrpcStatus, OutcomeClass, UnsentReason};

use crate::report::format::{count, fin, ms, num, secs, share};
use crate::report::repeats::{Unit, COLUMNS};
use crate::report_model::{Lag, Percentiles, Report, Totals};

/// With --repeat: what the page leads with. The medians of the headline
/// figures over the runs, labelled as such, then every run's figures with
/// their median, min and max; the sections after it are one run's.
pub(super) fn repeats(r: &Report) -> Markup {
    let Some(rep) = &r.repeats else {
        return html! {};
    };
    let m = &rep.median;
    let n = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |x| num(x, 0));
    let counts = [
        ("intended", n(m.intended)),
        ("sent", n(m.sent)),
        ("unsent", n(m.unsent.as_ref().and_then(|u| u.total))),
        ("completed", n(m.completed)),
        ("completed in window", n(m.completed_in_window)),
        ("in flight at end", n(m.in_flight_at_end)),
        ("failures", n(m.failures)),
        (
            "throughput",
            m.throughput_rps
                .map_or_else(|| "–".to_string(), |x| format!("{} req/s", num(x, 1))),
        ),
        (
            "ok throughput",
            m.throughput_ok_rps
                .map_or_else(|| "–".to_string(), |x| format!("{} req/s", num(x, 1))),
        ),
    ];
    let latencies = [
        ("latency", &m.latency_ms),
        ("service time", &m.service_time_ms),
    ];
    html! {
        h2 { "Medians of " (rep.count) " runs" }
        table class="headline medians" {
            tr { @for (name, _) in &counts { th { (name) } } }
            tr { @for (_, value) in &counts { td { (value) } } }
        }
        table class="medians" {
            tr {
                th class="l" {}
                th { "p50" } th { "p90" } th { "p95" } th { "p99" } th { "p99.9" } th { "max" } th { "mean" }
            }
            @for (label, h) in latencies {
                tr {
                    th class="l" { (label) }
                    @match h.as_ref().and_then(|h| h.as_percentiles()) {
                        Some(p) => {
                            @for v in [p.p50, p.p90, p.p95, p.p99, p.p999, p.max, p.mean] {
                                td { (ms(v)) }
                            }
                        }
                        None => { td colspan="7" class="none" { "nothing completed" } }
                    }
                }
            }
        }
        h2 { "Each run" }
        table {
            tr {
                th class="l" { "run" }
                @for (name, _, _) in COLUMNS { th { (name) } }
            }
            @for (label, values) in rep.table() {
                tr {
                    td class="l" { (label) }
                    @for ((_, _, unit), v) in COLUMNS.iter().zip(values) {
                        td {
                            @match (v, unit) {
                                (Some(x), Unit::Millis) => { (ms(x)) }
                                (Some(x), Unit::PerSecond) => { (num(x, 1)) }
                                (Some(x), Unit::Count) => { (num(x, 0)) }
                                (None, _) => { "–" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Several scenarios: their figures side by side (one scenario's are the
/// headline's).
pub(super) fn scenarios(r: &Report) -> Markup {
    if r.scenarios.len() <= 1 {
        return html! {};
    }
    html! {
        h2 { "Scenarios" }
        table {
            tr {
                th class="l" { "scenario" } th class="l" { "model" } th { "window (s)" }
                th { "intended" } th { "sent" } th { "unsent" } th { "completed" }
                th { "in flight at end" } th { "failures" } th { "throughput (req/s)" }
                th { "ok (req/s)" } th { "p50" } th { "p99" }
            }
            @for s in &r.scenarios {
                @let t = &s.totals;
                @let lat = |f: fn(&Percentiles) -> f64| {
                    t.latency_ms.as_ref().map_or("–".into(), |p| ms(f(p)))
                };
                tr {
                    td class="l" { (s.name) }
                    td class="l" { (s.model) }
                    td { (secs(s.window.start_s)) "–" (secs(s.window.end_s)) }
                    td { (count(t.intended)) }
                    td { (count(t.sent)) }
                    td class=[(t.unsent.total > 0).then_some("unsent")] {
                        (count(t.unsent.total)) " ("
                        (num(share(t.unsent.total, t.intended) * 100.0, 1)) "%)"
                    }
                    td { (count(t.completed)) }
                    td { (count(t.in_flight_at_end)) }
                    td { (count(t.failures)) }
                    td { (num(t.throughput_rps, 1)) }
                    td { (num(t.throughput_ok_rps, 1)) }
                    td { (lat(|p| p.p50)) }
                    td { (lat(|p| p.p99)) }
                }
            }
        }
    }
}

/// Each scenario of several requests: one row per request of its mix,
/// with its own outcomes, so a failing request is not averaged away.
pub(super) fn requests(r: &Report) -> Markup {
    let split: Vec<_> = r
        .scenarios
        .iter()
        .filter(|s| s.requests.len() > 1)
        .collect();
    if split.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Requests" }
        table class="requests" {
            tr {
                th class="l" { "scenario" } th class="l" { "request" } th { "completed" }
                th { "failures" } th { "throughput (req/s)" } th { "p50" } th { "p99" }
                th { "max" } th class="l" { "outcomes" }
            }
            @for s in &split {
                @for q in &s.requests {
                    @let lat = |f: fn(&Percentiles) -> f64| {
                        q.latency_ms.as_ref().map_or("–".into(), |p| ms(f(p)))
                    };
                    tr {
                        td class="l" { (s.name) }
                        td class="l" { (q.name) }
                        td { (count(q.completed)) }
                        td { (count(q.failures)) }
                        td { (num(q.throughput_rps, 1)) }
                        td { (lat(|p| p.p50)) }
                        td { (lat(|p| p.p99)) }
                        td { (lat(|p| p.max)) }
                        td class="l" {
                            @for (k, n) in q.status.iter().chain(&q.errors).chain(&q.grpc_status) {
                                (k) ": " (count(*n)) " "
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Requests in, with what each status code, error kind and unsent reason
/// amounts to as a share of what was intended.
pub(super) fn outcomes(t: &Totals) -> Markup {
    let mut rows: Vec<(String, u64, &str)> = Vec::new();
    for (code, n) in &t.status {
        let color = match code.chars().next() {
            Some('2') => "#43a047",
            Some('3') => "#1c8ca8",
            Some('4') => "#f0a30a",
            Some('5') => "#c62828",
            _ => "#757575",
        };
        rows.push((format!("status {code}"), *n, color));
    }
    // gRPC statuses in code order, coloured by their latency class.
    if let Some(g) = &t.grpc {
        for status in GrpcStatus::ALL {
            if let Some(&n) = g.status.get(status.as_str()) {
                let color = match status.class() {
                    OutcomeClass::GrpcOk => "#43a047",
                    OutcomeClass::GrpcClientError => "#f0a30a",
                    _ => "#c62828",
                };
                rows.push((format!("grpc {status}"), n, color));
            }
        }
    }
    for (kind, n) in &t.errors {
        rows.push((format!("error: {kind}"), *n, "#8a1c6e"));
    }
    let known = [
        (
            UnsentReason::ConcurrencyLimit.as_str(),
            t.unsent.concurrency_limit,
        ),
        (UnsentReason::Late.as_str(), t.unsent.late),
    ];
    let other = t.unsent.other.iter().map(|(k, v)| (k.as_str(), *v));
    for (reason, n) in known.into_iter().chain(other) {
        if n > 0 {
            rows.push((format!("unsent: {reason}"), n, "#9e9e9e"));
        }
    }
    if t.in_flight_at_end > 0 {
        rows.push(("in flight at end".into(), t.in_flight_at_end, "#c7c7c7"));
    }
    // Shares of what was intended; of all outcomes when nothing was.
    let base = if t.intended > 0 {
        t.intended
    } else {
        rows.iter().map(|r| r.1).sum()
    };
    html! {
        h2 { "Outcomes: status codes and errors" }
        @if rows.is_empty() {
            p class="nodata" { "no outcomes: nothing was sent" }
        } @else {
            table class="outcomes" {
                tr {
                    th class="l" { "outcome" } th { "count" } th { "share of intended" }
                    th class="l barcell" {}
                }
                @for (label, n, color) in rows {
                    @let pct = share(n, base) * 100.0;
                    tr {
                        td class="l" { (label) }
                        td { (count(n)) }
                        td { (num(pct, 1)) "%" }
                        td class="l barcell" {
                            div class="bar" style=(format!(
                                "width:{:.1}%;background:{color}",
                                fin(pct).clamp(0.0, 100.0)
                            )) {}
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn agents(r: &Report) -> Markup {
    if r.agents.is_empty() {
        return html! {
            h2 { "Agents" }
            p class="nodata" { "no agents took part" }
        };
    }
    // Only after a loss: the arrivals a lost agent left of unknown fate.
    let unknown = r.agents.iter().any(|a| a.unreported > 0);
    html! {
        h2 { "Agents" }
        table class="agents" {
            tr {
                th class="l" { "id" } th class="l" { "host" } th class="l" { "source" }
                th class="l" { "status" } th { "share" } th { "intended" } th { "sent" }
                th { "unsent" }
                @if unknown { th { "unreported" } }
                th { "completed" } th { "cpu" } th { "lag p50" } th { "lag p99" }
                th { "lag max" } th { "pool busy" } th { "in flight at end" }
                th { "clock ± (ms)" } th { "clock rtt (ms)" }
            }
            @for a in &r.agents {
                @let lag = |f: fn(&Lag) -> f64| a.lag_ms.as_ref().map_or("–".into(), |l| ms(f(l)));
                @let opt = |v: Option<f64>| v.map_or("–".into(), |v| num(v, 3));
                tr {
                    td class="l" { (a.id) }
                    td class="l" { (a.host) }
                    td class="l" { (a.source.as_deref().unwrap_or("–")) }
                    td class="l" {
                        @if a.lost_reason.is_some() || a.status == AgentStatus::Lost {
                            span class="lost" { (a.status.as_str()) }
                        } @else {
                            (a.status.as_str())
                        }
                        @if let Some(why) = &a.lost_reason {
                            span class="sub" { (why) }
                        }
                    }
                    td { (num(a.share * 100.0, 1)) "%" }
                    td { (count(a.intended)) }
                    td { (count(a.sent)) }
                    td class=[(a.unsent > 0).then_some("unsent")] { (count(a.unsent)) }
                    @if unknown {
                        td class=[(a.unreported > 0).then_some("unsent")] { (count(a.unreported)) }
                    }
                    td { (count(a.completed)) }
                    td {
                        (num(a.cpu * 100.0, 1)) "%"
                        span class="sub" { (num(a.cpu_cores, 2)) " of " (a.cpus) " CPU(s)" }
                    }
                    td { (lag(|l| l.p50)) }
                    td { (lag(|l| l.p99)) }
                    td { (lag(|l| l.max)) }
                    td { (num(a.pool_saturated_share * 100.0, 1)) "%" }
                    td { (a.in_flight_at_end.map_or("–".into(), count)) }
                    td { (opt(a.clock_uncertainty_ms)) }
                    td { (opt(a.clock_rtt_ms)) }
                }
            }
        }
    }
}
