//! The comparison's rows: which figures of the registry are shown, in the
//! run report's order, what each report says about them (the median and
//! range when repeated), their ratios to the first report, and the notes
//! on loads that differ.

use std::collections::BTreeSet;
use std::path::PathBuf;

use loadfleet_proto::vocab::{GrpcStatus, VerdictLevel};

use super::line::{Line, Read};
use super::load::{Compared, Input};
use crate::figures::{median, Figure, Phase, Quantile, SseFigure, Unit, HEADLINE};
use crate::report_model::Totals;
use crate::report_model::{Headline, Repeats};

/// Every report's totals, and its repeat runs'.
fn all_totals(inputs: &[Input]) -> impl Iterator<Item = &Totals> {
    inputs
        .iter()
        .flat_map(|i| std::iter::once(&i.report.totals).chain(&i.report.runs))
}

/// Status codes in numeric order where they are numbers ("200" < "1000").
fn sorted_codes(codes: BTreeSet<String>) -> Vec<String> {
    let mut v: Vec<String> = codes.into_iter().collect();
    v.sort_by_key(|c| (c.parse::<u64>().unwrap_or(u64::MAX), c.clone()));
    v
}

/// The rows, in the run report's order: intended / sent / unsent /
/// unreported first (a table without them can make the worse
/// configuration look better), then
/// outcomes, latency and its phases, then subscription scenarios. Keyed
/// figures (a status code, an error kind, a gRPC status, a scenario) get a
/// row when any report has them.
fn lines(inputs: &[Input]) -> Vec<Line> {
    let mut f = vec![
        Line::totals(Figure::Intended),
        Line::totals(Figure::Sent),
        Line::totals(Figure::Unsent),
        Line::share(Figure::Unsent),
        Line::totals(Figure::Unreported),
        Line::totals(Figure::Completed),
        Line::totals(Figure::CompletedInWindow),
        Line::totals(Figure::InFlightAtEnd),
        Line::totals(Figure::Throughput),
        Line::totals(Figure::ThroughputOk),
        Line::share(Figure::Errors),
        Line::share(Figure::Failures),
    ];
    let codes: BTreeSet<String> = all_totals(inputs)
        .flat_map(|t| t.status.keys().cloned())
        .collect();
    f.extend(
        sorted_codes(codes)
            .into_iter()
            .map(|code| Line::totals(Figure::Status(code))),
    );
    let kinds: BTreeSet<String> = all_totals(inputs)
        .flat_map(|t| t.errors.keys().cloned())
        .collect();
    f.extend(
        kinds
            .into_iter()
            .map(|k| Line::totals(Figure::ErrorKind(k))),
    );
    let grpc: BTreeSet<&str> = all_totals(inputs)
        .filter_map(|t| t.grpc.as_ref())
        .flat_map(|g| g.status.keys().map(String::as_str))
        .collect();
    // In the vocabulary's order (OK first), as the report lists them.
    for &status in GrpcStatus::ALL.iter().filter(|s| grpc.contains(s.as_str())) {
        f.push(Line::totals(Figure::Grpc(status)));
        f.push(Line::share(Figure::Grpc(status)));
    }
    let shown = [Quantile::P50, Quantile::P99];
    f.extend(
        Quantile::ALL
            .into_iter()
            .filter(|q| *q != Quantile::Mean)
            .map(|q| Line::totals(Figure::Latency(q))),
    );
    f.extend(shown.map(|q| Line::totals(Figure::ServiceTime(q))));
    // The phases (k6's connecting / tls_handshaking / waiting) say where a
    // latency change comes from.
    for phase in Phase::ALL {
        f.extend(shown.map(|q| Line::totals(Figure::Phase(phase, q))));
    }
    f.push(Line::totals(Figure::ConnectionsOpened));
    let sse: BTreeSet<&str> = inputs
        .iter()
        .flat_map(|i| &i.report.scenarios)
        .filter(|s| s.sse.is_some())
        .map(|s| s.name.as_str())
        .collect();
    for name in sse {
        f.extend(SseFigure::ALL.map(|figure| Line {
            name: format!("{name} sse {}", figure.label()),
            unit: figure.unit(),
            read: Read::Sse(name.to_string(), figure),
        }));
    }
    f.extend(request_lines(inputs));
    f.extend(super::flows::lines(inputs));
    f
}

/// Rows per request (`SCENARIO.REQUEST figure`) of the scenarios that mix
/// several, in the first report's order, then any only later reports have.
fn request_lines(inputs: &[Input]) -> Vec<Line> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for s in inputs
        .iter()
        .flat_map(|i| &i.report.scenarios)
        .filter(|s| s.requests.len() > 1)
    {
        for q in &s.requests {
            let key = (s.name.clone(), q.name.clone());
            if !seen.contains(&key) {
                seen.push(key);
            }
        }
    }
    let figures = [
        (Figure::Completed, false),
        (Figure::Throughput, false),
        (Figure::Failures, true),
        (Figure::Latency(Quantile::P50), false),
        (Figure::Latency(Quantile::P99), false),
        (Figure::Latency(Quantile::Max), false),
    ];
    let mut out = Vec::new();
    for (scenario, request) in seen {
        for (figure, share) in &figures {
            let (label, unit) = if *share {
                (figure.share_label(), Unit::Percent)
            } else {
                (figure.label(), figure.unit())
            };
            out.push(Line {
                name: format!("{scenario}.{request} {label}"),
                unit,
                read: Read::Request(scenario.clone(), request.clone(), figure.clone(), *share),
            });
        }
    }
    out
}

/// What a report says about one figure: the value shown, and the
/// run-to-run range when it was repeated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reading {
    pub(super) value: Option<f64>,
    pub(super) range: Option<(f64, f64)>,
}

fn read(report: &Compared, read: &Read) -> Reading {
    match read {
        Read::Totals(figure) => {
            let key = HEADLINE.contains(figure).then(|| figure.key());
            spread(report, |t| figure.of(t), key.as_deref())
        }
        Read::Share(figure) => spread(report, |t| figure.share(t), None),
        Read::Request(scenario, request, figure, share) => Reading {
            value: report
                .scenarios
                .iter()
                .find(|s| s.name == *scenario)
                .and_then(|s| s.requests.iter().find(|q| q.name == *request))
                .and_then(|q| {
                    if *share {
                        figure.share(q)
                    } else {
                        figure.of_request(q)
                    }
                }),
            range: None,
        },
        Read::Flow(name, figure) => Reading {
            value: report
                .scenarios
                .iter()
                .find(|s| s.name == *name)
                .and_then(|s| figure.of(s)),
            range: None,
        },
        Read::Step(scenario, step, figure) => Reading {
            value: report
                .scenarios
                .iter()
                .find(|s| s.name == *scenario)
                .and_then(|s| s.steps.iter().find(|st| st.request.name == *step))
                .and_then(|st| figure.of(st)),
            range: None,
        },
        Read::Sse(name, figure) => Reading {
            value: report
                .scenarios
                .iter()
                .find(|s| s.name == *name)
                .and_then(|s| figure.of(s)),
            range: None,
        },
    }
}

/// A figure of the totals: the repeats' median and range when the report
/// has them (from `repeats.median`/`.min`/`.max` for a headline figure,
/// else from the runs), the totals' value otherwise.
fn spread(
    report: &Compared,
    of: impl Fn(&Totals) -> Option<f64>,
    headline: Option<&str>,
) -> Reading {
    let from = |pick: fn(&Repeats) -> &Headline| pick(report.repeats.as_ref()?).get(headline?);
    let per_run: Vec<f64> = report.runs.iter().filter_map(&of).collect();
    let value = from(|r| &r.median)
        .or_else(|| median(per_run.clone()))
        .or_else(|| of(&report.totals));
    let range = match (from(|r| &r.min), from(|r| &r.max)) {
        (Some(lo), Some(hi)) => Some((lo.min(hi), lo.max(hi))),
        _ if per_run.len() >= 2 => {
            let lo = per_run.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = per_run.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Some((lo, hi))
        }
        _ => None,
    };
    Reading { value, range }
}

/// Whether a report was made with repeats, and how many runs it holds.
fn repeats_of(report: &Compared) -> Option<usize> {
    report.repeats.as_ref().map(|r| r.runs.len())
}

/// A ratio of one report's figure to the first report's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ratio {
    /// `None` when either value is missing; infinite when only the base is 0.
    pub value: Option<f64>,
    /// `Some(false)`: the two `[min, max]` ranges overlap, so the difference
    /// is inside the run-to-run spread. `None`: no repeats to tell.
    pub significant: Option<bool>,
}

pub(super) fn ratio(base: &Reading, other: &Reading) -> Ratio {
    let value = match (base.value, other.value) {
        // 0 → 0 is no change; 0 → n has no finite ratio.
        (Some(a), Some(b)) if a == 0.0 && b == 0.0 => Some(1.0),
        (Some(a), Some(b)) => Some(if a == 0.0 { f64::INFINITY } else { b / a }),
        _ => None,
    };
    let significant = match (base.range, other.range) {
        (Some((alo, ahi)), Some((blo, bhi))) => Some(!(alo <= bhi && blo <= ahi)),
        _ => None,
    };
    Ratio { value, significant }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub figure: String,
    pub(super) unit: Unit,
    pub(super) values: Vec<Reading>,
    /// One per report after the first, relative to the first.
    pub ratios: Vec<Ratio>,
}

impl Row {
    pub(crate) fn value(&self, report: usize) -> Option<f64> {
        self.values.get(report).and_then(|r| r.value)
    }
}

/// The comparison, ready to render as text or JSON.
pub(crate) struct Table {
    /// id (A, B, …), label, file, number of repeat runs (`Some(0)` when the
    /// report has `repeats` without runs).
    pub columns: Vec<(String, String, PathBuf, Option<usize>)>,
    pub rows: Vec<Row>,
    /// Verdict codes of each report, in its own order.
    pub verdicts: Vec<Vec<String>>,
    /// What makes a comparison meaningless or shaky.
    pub notes: Vec<String>,
    pub footnotes: Vec<String>,
}

impl Table {
    pub(crate) fn build(inputs: &[Input]) -> Table {
        let columns: Vec<_> = inputs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    letter(i),
                    r.label.clone(),
                    r.path.clone(),
                    repeats_of(&r.report),
                )
            })
            .collect();
        let rows = lines(inputs)
            .into_iter()
            .map(|line| {
                let values: Vec<Reading> =
                    inputs.iter().map(|r| read(&r.report, &line.read)).collect();
                let ratios = values[1..].iter().map(|v| ratio(&values[0], v)).collect();
                Row {
                    figure: line.name,
                    unit: line.unit,
                    values,
                    ratios,
                }
            })
            .collect();
        let verdicts = inputs
            .iter()
            .map(|r| {
                r.report
                    .verdicts
                    .iter()
                    .map(|v| v.code.to_string())
                    .collect()
            })
            .collect();
        let notes = notes(inputs);
        let mut footnotes = Vec::new();
        let without: Vec<&str> = columns
            .iter()
            .filter(|c| c.3.is_none())
            .map(|c| c.0.as_str())
            .collect();
        if without.len() == columns.len() {
            footnotes.push(
                "significance needs repeats: these are single runs, so no ratio can be told apart from run-to-run noise (rerun each condition several times)".to_string(),
            );
        } else {
            footnotes.push(
                "(ns) = not significant: the [min, max] ranges over the repeats overlap, so the difference is inside the run-to-run spread".to_string(),
            );
            if !without.is_empty() {
                let (is, them) = if without.len() == 1 {
                    ("is a single run", "it")
                } else {
                    ("are single runs", "them")
                };
                footnotes.push(format!(
                    "significance needs repeats in both reports; {} {is}, so ratios involving {them} are unmarked",
                    without.join(", "),
                ));
            }
        }
        Table {
            columns,
            rows,
            verdicts,
            notes,
            footnotes,
        }
    }

    #[cfg(test)]
    pub(crate) fn row(&self, figure: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.figure == figure)
    }
}

/// Reports that did not measure what the others did: cut short, or with an
/// error verdict (no experiment, an agent lost, corrupt data). Also loads
/// that differ — the duration, the scenarios, a scenario's offered rate —
/// which make counts incomparable.
fn notes(inputs: &[Input]) -> Vec<String> {
    let mut notes = Vec::new();
    for (i, r) in inputs.iter().enumerate() {
        let id = letter(i);
        let mut seen = BTreeSet::new();
        for v in &r.report.verdicts {
            if v.level != VerdictLevel::Error || !seen.insert(v.code) {
                continue;
            }
            let mut note = format!("{id}: {} — comparing it is meaningless", v.code);
            if !v.message.is_empty() {
                note.push_str(&format!(" ({})", v.message));
            }
            notes.push(note);
        }
        if r.report.partial {
            notes.push(format!(
                "{id}: PARTIAL — the run was cut short and its figures cover only part of the schedule; comparing it is meaningless"
            ));
        }
    }
    let base = &inputs[0].report;
    let differs = |a: f64, b: f64| (a - b).abs() > 1e-6 * a.abs().max(1.0);
    let names =
        |r: &Compared| -> Vec<String> { r.scenarios.iter().map(|s| s.name.clone()).collect() };
    for (i, r) in inputs.iter().enumerate().skip(1) {
        let id = letter(i);
        let other = &r.report;
        let (a, b) = (base.run.duration_s, other.run.duration_s);
        if differs(a, b) {
            notes.push(format!(
                "{id}: duration {}s differs from A's {}s; counts are not comparable, only rates and latencies",
                fmt_number(b),
                fmt_number(a)
            ));
        }
        if names(base) != names(other) {
            notes.push(format!(
                "{id}: scenarios [{}] differ from A's [{}]; the plans differ, so the totals mix different loads",
                names(other).join(", "),
                names(base).join(", ")
            ));
            continue;
        }
        for (sa, sb) in base.scenarios.iter().zip(&other.scenarios) {
            let what = if base.scenarios.len() == 1 {
                "rate".to_string()
            } else {
                format!("{} rate", sa.name)
            };
            match (sa.offered_rps, sb.offered_rps) {
                (Some(a), Some(b)) if differs(a, b) => notes.push(format!(
                    "{id}: {what} {} req/s offered differs from A's {} req/s; counts are not comparable, only latencies (and the ratios of rates to what was offered)",
                    fmt_number(b),
                    fmt_number(a)
                )),
                _ => {}
            }
            if sa.model != sb.model {
                notes.push(format!(
                    "{id}: scenario {} is {}, A's is {}; the plans differ",
                    sa.name, sb.model, sa.model
                ));
            }
        }
    }
    notes
}

/// `100`, `12.5`, `0.333`: a figure in a sentence, without noise digits.
pub(super) fn fmt_number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Column ids: A, B, …, Z, AA, AB, …
pub(crate) fn letter(i: usize) -> String {
    let mut n = i + 1;
    let mut s = Vec::new();
    while n > 0 {
        n -= 1;
        s.push(b'A' + (n % 26) as u8);
        n /= 26;
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}
