//! `search.html`: the knee chart. Latency percentiles and throughput
//! against the offered rate, the SLO's latency rules drawn as lines,
//! failing steps marked (and those the target fell behind in, apart),
//! unsent and failures beside; then every step in a
//! table with a link to its report. Drawn with the run report's chart code
//! (`report::html`), so both pages read alike and nothing is fetched.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::record::{SearchRecord, Step};
use crate::cli::Vary;
use crate::figures::Unit;
use crate::report::format::{ms, num};
use crate::report::html::{nice_scale, Chart, Series, XAxis, STYLE};
use crate::thresholds::Threshold;

/// Colours of the SLO lines, one per latency rule.
const SLO_COLOURS: [&str; 3] = ["#c62828", "#ad1457", "#6a1b9a"];

/// The page for a search.
pub(super) fn render(s: &SearchRecord) -> String {
    page(s).into_string()
}

fn page(s: &SearchRecord) -> Markup {
    let mut steps: Vec<&Step> = s.steps.iter().collect();
    steps.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    let end = steps.iter().map(|st| st.offered).fold(0.0, f64::max) * 1.05;
    let x = match s.settings.varies {
        Vary::Rate => XAxis::Rate { end },
        Vary::Clients => XAxis::Clients { end },
    };
    let against = match s.settings.varies {
        Vary::Rate => "offered rate",
        Vary::Clients => "clients",
    };
    // The SLO spans the whole axis, which ends at a round rate past `end`.
    let axis_end = nice_scale(end).0;
    let at = |f: &dyn Fn(&Step) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        steps.iter().map(|st| (st.offered, f(st))).collect()
    };
    let pct = |f: fn(&crate::report_model::Percentiles) -> f64| {
        at(&|st: &Step| st.figures.latency_ms.as_ref().map(f))
    };
    let mut latency = vec![
        Series::line("p50", "#1f77b4", pct(|p| p.p50)),
        Series::line("p90", "#2ca02c", pct(|p| p.p90)),
        Series::line("p99", "#ff7f0e", pct(|p| p.p99)),
    ];
    let rules: Vec<Threshold> = s.slo.iter().filter_map(|t| t.parse().ok()).collect();
    let names: Vec<String> = rules
        .iter()
        .filter(|t| t.figure().unit() == Unit::Ms && t.unit() == "ms")
        .map(|t| format!("SLO {t}"))
        .collect();
    for (i, (rule, name)) in rules
        .iter()
        .filter(|t| t.figure().unit() == Unit::Ms && t.unit() == "ms")
        .zip(&names)
        .enumerate()
    {
        let mut line = Series::line(
            name,
            SLO_COLOURS[i % SLO_COLOURS.len()],
            vec![(0.0, Some(rule.limit())), (axis_end, Some(rule.limit()))],
        );
        line.dashed = true;
        latency.push(line);
    }
    let failing =
        |f: &dyn Fn(&Step) -> Option<f64>| at(&|st: &Step| if st.passed { None } else { f(st) });
    let mut failed = Series::line(
        "failing step",
        "#c62828",
        failing(&|st: &Step| st.figures.latency_ms.as_ref().map(|p| p.p99)),
    );
    failed.width = 0.0;
    failed.markers = true;
    latency.push(failed);
    let window = s.settings.step_s + s.settings.warmup_s;
    let per_s = |n: u64| n as f64 / window.max(1e-9);
    let mut offered = Series::line("offered", "#999999", at(&|st: &Step| Some(st.offered)));
    offered.dashed = true;
    let mut failed_rate = Series::line(
        "failing step",
        "#c62828",
        failing(&|st: &Step| Some(st.figures.throughput_rps)),
    );
    failed_rate.width = 0.0;
    failed_rate.markers = true;
    // A step the target fell behind in: its completed/s stayed below the
    // offered rate while the queue grew, whatever its latency showed.
    let mut behind = Series::line(
        "not steady",
        "#e09b00",
        at(&|st: &Step| (!st.steady).then_some(st.figures.throughput_rps)),
    );
    behind.width = 0.0;
    behind.markers = true;
    let throughput = vec![
        offered,
        Series::line(
            "completed/s",
            "#1f77b4",
            at(&|st: &Step| Some(st.figures.throughput_rps)),
        ),
        Series::line(
            "ok/s",
            "#2ca02c",
            at(&|st: &Step| Some(st.figures.throughput_ok_rps)),
        ),
        Series::line(
            "unsent/s",
            "#9467bd",
            at(&|st: &Step| Some(per_s(st.figures.unsent))),
        ),
        Series::line(
            "failures/s",
            "#d62728",
            at(&|st: &Step| Some(per_s(st.figures.failures))),
        ),
        failed_rate,
        behind,
    ];
    let latency_title = format!("latency against {against} (ms)");
    let throughput_title = format!("throughput against {against} (req/s)");
    let latency_chart = Chart {
        title: &latency_title,
        y_label: "ms",
        x,
        bands: Vec::new(),
        series: latency,
    };
    let throughput_chart = Chart {
        title: &throughput_title,
        y_label: "req/s",
        x,
        bands: Vec::new(),
        series: throughput,
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "loadfleet search: " (s.target) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "capacity search" }
                p class="run" { "target " code { (s.target) } " · SLO " code { (s.slo.join(", ")) } }
                p class="run" {
                    "from " (s.settings.varies.amount(s.settings.from)) " to " (s.settings.varies.amount(s.settings.to))
                    " · resolution " (num(s.settings.resolution * 100.0, 1)) "%"
                    " · steps of " (num(s.settings.step_s, 0)) "s after " (num(s.settings.warmup_s, 0)) "s warm-up"
                    " · repeat " (s.settings.repeat) " · " (s.settings.agents) " agent(s)"
                }
                div class=(format!("verdict {}", if s.result.exit_status == 0 { "info" } else { "error" })) {
                    b { (s.result.status) } (s.result.summary)
                }
                @for v in &s.verdicts {
                    div class="verdict warn" { b { (v.code) } (v.message) }
                }
                h2 { "knee" }
                div id="knee" {
                    (latency_chart.render("no step completed a request"))
                    (throughput_chart.render("no step completed a request"))
                }
                h2 { "steps" }
                table {
                    thead { tr {
                        th { "step" } th { "rate" } th { "purpose" } th { "result" } th { "done/s" }
                        th { "p50" } th { "p99" } th { "failures" } th { "unsent" } th { "why" } th { "report" }
                    } }
                    tbody {
                        @for st in &s.steps {
                            tr {
                                td { (st.index) }
                                td { (s.settings.varies.amount(st.offered)) }
                                td { (format!("{:?}", st.purpose).to_lowercase()) }
                                td {
                                    (st.judged)
                                    @if !st.steady { " · NOT_STEADY" }
                                    @if st.repeats_disagree { " (runs disagree)" }
                                }
                                td { (num(st.figures.throughput_rps, 1)) }
                                td { (st.figures.latency_ms.as_ref().map_or("-".into(), |p| ms(p.p50))) }
                                td { (st.figures.latency_ms.as_ref().map_or("-".into(), |p| ms(p.p99))) }
                                td { (num(st.figures.failure_rate * 100.0, 2)) "%" }
                                td { (st.figures.unsent) }
                                td { (st.why.as_deref().unwrap_or("")) }
                                td { @if let Some(r) = st.reports.last() { a href=(r) { (r) } } }
                            }
                        }
                    }
                }
            }
        }
    }
}
