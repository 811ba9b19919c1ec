//! The flow scenarios' tables: how each scenario's flows ended, with their
//! latency and active time, then its funnel, one row per step, and each
//! check by its text, in the text report's order. A flow's steps are not
//! a mix, so they get this table and not the "Requests" one.

use maud::{html, Markup};

use crate::report::format::{count, ms, num, share};
use crate::report_model::{Percentiles, Report};

/// A cell for one percentile of a distribution that may be empty.
fn at(p: &Option<Percentiles>, f: fn(&Percentiles) -> f64) -> String {
    p.as_ref().map_or("–".into(), |p| ms(f(p)))
}

/// Every flow scenario's flows, funnel and checks; nothing for a run
/// without one.
pub(super) fn flows(r: &Report) -> Markup {
    let flow_scenarios: Vec<_> = r
        .scenarios
        .iter()
        .filter_map(|s| s.flows.as_ref().map(|f| (s, f)))
        .collect();
    if flow_scenarios.is_empty() {
        return html! {};
    }
    // Only after a loss: lost agents' flows of unknown fate.
    let unknown = flow_scenarios.iter().any(|(_, f)| f.unreported > 0);
    html! {
        h2 { "Flows" }
        table class="flows" {
            tr {
                th class="l" { "scenario" } th { "intended" } th { "started" } th { "unsent" }
                @if unknown { th { "unreported" } }
                th { "completed" } th { "failed" } th class="l" { "failed by reason" }
                th { "in flight at end" } th { "completed (flows/s)" }
                th { "p50" } th { "p95" } th { "p99" } th { "p99.9" }
                th { "active p50" } th { "active p95" } th { "active p99" }
            }
            @for (s, f) in &flow_scenarios {
                tr {
                    td class="l" { (s.name) }
                    td { (count(f.intended)) }
                    td { (count(f.started)) }
                    td class=[(f.unsent.total > 0).then_some("unsent")] {
                        (count(f.unsent.total)) " ("
                        (num(share(f.unsent.total, f.intended) * 100.0, 1)) "%)"
                    }
                    @if unknown {
                        td class=[(f.unreported > 0).then_some("unsent")] { (count(f.unreported)) }
                    }
                    td { (count(f.completed)) }
                    td class=[(f.failed > 0).then_some("fail")] { (count(f.failed)) }
                    td class="l" {
                        @for (reason, n) in &f.failed_by_reason {
                            (reason) ": " (count(*n)) " "
                        }
                    }
                    td { (count(f.in_flight_at_end)) }
                    td { (num(f.throughput_fps, 1)) }
                    td { (at(&f.latency_ms, |p| p.p50)) }
                    td { (at(&f.latency_ms, |p| p.p95)) }
                    td { (at(&f.latency_ms, |p| p.p99)) }
                    td { (at(&f.latency_ms, |p| p.p999)) }
                    td { (at(&f.active_ms, |p| p.p50)) }
                    td { (at(&f.active_ms, |p| p.p95)) }
                    td { (at(&f.active_ms, |p| p.p99)) }
                }
            }
        }
        p class="sub" {
            "Flow latency runs from a flow's intended start to its last step's end, failed flows "
            "included; active time is that less the think time the flow slept."
        }
        @for (s, _) in &flow_scenarios {
            h3 { "Funnel of " (s.name) }
            table class="funnel" {
                tr {
                    th class="l" { "step" } th { "reached" } th { "sent" } th { "unsent" }
                    th { "not reached" } th { "completed" } th { "failures" }
                    th { "p50" } th { "p95" } th { "p99" } th { "start lag p99" }
                }
                @for q in &s.steps {
                    @let unsent: u64 = q.unsent.values().sum();
                    tr {
                        td class="l" { (q.request.name) }
                        td { (count(q.reached)) }
                        td { (count(q.sent)) }
                        td class=[(unsent > 0).then_some("unsent")] { (count(unsent)) }
                        td { (count(q.not_reached.values().sum::<u64>())) }
                        td { (count(q.request.completed)) }
                        td { (count(q.request.failures)) }
                        td { (at(&q.request.latency_ms, |p| p.p50)) }
                        td { (at(&q.request.latency_ms, |p| p.p95)) }
                        td { (at(&q.request.latency_ms, |p| p.p99)) }
                        td { (at(&q.start_lag_ms, |p| p.p99)) }
                    }
                }
            }
            @let checked: Vec<_> = s.steps.iter().filter(|q| !q.checks.is_empty()).collect();
            @if !checked.is_empty() {
                table class="checks" {
                    tr {
                        th class="l" { "step" } th class="l" { "check" } th { "passed" }
                        th { "failed" }
                    }
                    @for q in &checked {
                        @for c in &q.checks {
                            tr {
                                td class="l" { (q.request.name) }
                                td class="l" { code { (c.check) } }
                                td { (count(c.passed)) }
                                td class=[(c.failed > 0).then_some("fail")] { (count(c.failed)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
