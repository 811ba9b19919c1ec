//! The page: its head and style, the run header and the verdicts, then
//! the sections of [`figures`](super::figures), the charts and the
//! [`tables`](super::tables), in the text report's order.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::chart::charts;
use super::figures::{headline, subscriptions};
use super::flows::flows;
use super::tables::{agents, outcomes, repeats, requests, scenarios};
use crate::report::format::{protocol_line, secs, threshold_actual, utc};
use crate::report_model::Report;

/// Writes the page for `r` to `out`.
pub(crate) fn write_html(out: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    out.write_all(render(r)?.as_bytes())
}

/// The page for `r` as a string.
pub(crate) fn render(r: &Report) -> std::io::Result<String> {
    let json = serde_json::to_string(r).map_err(std::io::Error::other)?;
    Ok(page(r, &json).into_string())
}

// Charts are scaled to the page's width (`svg.chart`), one per row, so a
// wide window shows the seconds of a long run apart.
pub(crate) const STYLE: &str = "\
*{box-sizing:border-box}\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:0;padding:24px 32px;color:#1d1d1f;background:#fff;line-height:1.4;max-width:1800px}\
h1{font-size:24px;margin:0 0 4px}\
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e3e3e3;padding-bottom:4px}\
h3{font-size:14px;margin:16px 0 4px;color:#444}\
.run{color:#444;margin:0 0 4px}\
.run code{background:#f3f3f3;padding:1px 4px;border-radius:3px}\
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:700;vertical-align:middle}\
.badge.partial{background:#c62828;color:#fff}\
.verdict{border-left:5px solid;padding:6px 10px;margin:6px 0;border-radius:3px}\
.verdict b{margin-right:6px}\
.verdict.error{border-color:#c62828;background:#fdecea;color:#8a1c16}\
.verdict.warn{border-color:#e09b00;background:#fff6e0;color:#6d4a00}\
.verdict.info{border-color:#3b7dd8;background:#eaf1fc;color:#173f80}\
table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}\
th,td{border:1px solid #dcdcdc;padding:4px 8px;text-align:right;font-variant-numeric:tabular-nums}\
th{background:#f5f5f7;font-weight:600}\
th.l,td.l{text-align:left}\
td.unsent{color:#b3261e;font-weight:700}\
p.lowerbound{color:#b3261e}\
.sub{display:block;font-size:11px;color:#666;font-weight:400}\
.none{color:#888;font-style:italic}\
.nodata{color:#888;font-style:italic;border:1px dashed #ccc;padding:12px;margin:4px 0}\
.pass{color:#1f7a3a;font-weight:700}.fail{color:#b3261e;font-weight:700}\
.lost{color:#b3261e;font-weight:700}\
.barcell{width:260px}\
.bar{height:12px;min-width:1px;border-radius:2px}\
figure{margin:8px 0 16px}\
svg.chart{display:block;width:100%;height:auto}\
figcaption{font-weight:600;font-size:14px;margin-bottom:2px}\
svg text{font-family:system-ui,Helvetica,Arial,sans-serif}\
footer{margin-top:32px;color:#888;font-size:12px}";

fn page(r: &Report, json: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                title { "loadfleet report — " (r.run.target) }
                // A constant of this file: nothing from the run.
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header(r))
                (verdicts(r))
                (repeats(r))
                (headline(r))
                (scenarios(r))
                (requests(r))
                (flows(r))
                (subscriptions(r))
                (charts(r))
                (outcomes(&r.totals))
                (agents(r))
                footer {
                    (r.schema) " · written by loadfleet · the full report is embedded below as JSON ("
                    code { "script#report" } ")"
                }
                // Script content is not HTML-escaped, so the JSON goes in
                // as it is. `<` only ever appears inside JSON strings, where
                // \u003c means the same thing; with none left, nothing in
                // the data can close the script.
                script type="application/json" id="report" {
                    (PreEscaped(json.replace('<', "\\u003c")))
                }
            }
        }
    }
}

fn header(r: &Report) -> Markup {
    let run = &r.run;
    html! {
        h1 {
            "loadfleet report"
            @if r.partial {
                " "
                span class="badge partial" title="the run was cut short: figures cover what was measured" { "PARTIAL" }
            }
        }
        p class="run" {
            "target " code { (run.target) }
            " · " (secs(run.duration_s)) " s run, " (secs(run.window_s)) " s measurement window · "
            (run.agents) " agent(s)"
            @if run.local { " (local fleet)" }
            " · started " (utc(run.started_at_unix)) " · took " (secs(run.elapsed_s)) " s"
        }
        @if let Some(line) = protocol_line(r) {
            p class="run protocol" { (line) }
        }
        @for s in &r.scenarios {
            p class="run" {
                "scenario " b { (s.name) } ": "
                (s.model) " model"
                @if !s.load.is_empty() { ", " (s.load) }
                "; " (secs(s.duration_s)) " s from t=" (secs(s.start_s)) " s, warm-up "
                (secs(s.warmup_s)) " s, window " (secs(s.window.start_s)) "–"
                (secs(s.window.end_s)) " s"
            }
        }
    }
}

fn verdicts(r: &Report) -> Markup {
    html! {
        h2 { "Verdicts" }
        @if r.verdicts.is_empty() {
            p class="none" { "No verdicts: nothing looked wrong." }
        }
        @for v in &r.verdicts {
            div class={ "verdict " (v.level.as_str()) } {
                b { (v.level.as_str().to_uppercase()) " · " (v.code.as_str()) }
                (v.message)
            }
        }
        @if !r.thresholds.is_empty() {
            h3 { "Thresholds" }
            table {
                tr { th class="l" { "threshold" } th { "actual" } th { "result" } }
                @for c in &r.thresholds {
                    tr {
                        td class="l" { code { (c.threshold) } }
                        td { (threshold_actual(c)) }
                        td {
                            @if c.passed {
                                span class="pass" { "pass" }
                            } @else {
                                span class="fail" { "FAIL" }
                            }
                        }
                    }
                }
            }
        }
    }
}
