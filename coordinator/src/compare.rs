//! `loadfleet-coordinator compare A.json B.json [C.json ...]`: the headline
//! figures of several reports side by side, with ratios to the first.
//!
//! Reports are read into the report's own types ([`crate::report::model`]),
//! so the schema is written once: a report this coordinator cannot read
//! (another schema, a key of the wrong type, a key it needs missing) is
//! refused by name, and a figure a report does not have (no latency, a
//! status code it never saw) shows as `-`, never as 0. Keys added after a
//! report was written are optional in the types, so older reports load.
//!
//! Rows follow the order of the run report, so intended / sent / unsent
//! come first (a table without them once made the worse configuration look
//! better). Each report after the first gets a ratio column `B/A`.
//!
//! Significance: one run per condition cannot tell a real difference from
//! run-to-run noise. A report made with repeats carries
//! `repeats = { runs: [..], median: {..}, min: {..}, max: {..} }`. When both
//! reports of a ratio have a `[min, max]` range for a figure and the ranges
//! overlap, the ratio is marked `(ns)`: the difference is inside the
//! spread. Without repeats ratios are printed bare and a footnote says that
//! significance needs repeats. With repeats the columns show the median, as
//! the report does (docs/report.md, `repeats`).
//!
//! Notes say when the reports did not measure the same thing: a different
//! duration, a scenario's offered rate, or different scenarios altogether.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::cli::CompareArgs;
use crate::error::Error;
use crate::report::model::{Percentiles, Phases, RunInfo, Scenario, Totals, Verdict, SCHEMA};
use crate::report::repeats::{Headline, HeadlinePercentiles, Repeats};
use loadfleet_proto::vocab::{GrpcStatus, VerdictLevel};

fn bad(msg: impl Into<String>) -> Error {
    Error::CompareInput(msg.into())
}

/// `compare`: loads every report (all of them, before printing anything, so
/// a bad file is reported instead of half a table) and writes the table.
pub fn run(args: &CompareArgs, out: &mut impl Write) -> Result<u8, Error> {
    if args.reports.len() < 2 {
        return Err(bad(
            "compare needs at least two reports, e.g. compare a/report.json b/report.json",
        ));
    }
    let mut inputs = Vec::with_capacity(args.reports.len());
    for path in &args.reports {
        let (file, report) = load(path)?;
        inputs.push(Input {
            label: label_for(&file),
            path: file,
            report,
        });
    }
    let table = Table::build(&inputs);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &table.to_json()).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        table.write_text(out)?;
    }
    out.flush()?;
    Ok(0)
}

/// One report to compare.
#[derive(Debug, Clone)]
pub struct Input {
    /// Column label: the report's folder name, or the file stem.
    pub label: String,
    pub path: PathBuf,
    pub report: Compared,
}

/// The parts of a `report.json` that `compare` reads, in the report's own
/// types; other keys are left unread.
#[derive(Debug, Clone, Deserialize)]
pub struct Compared {
    #[serde(default)]
    pub partial: bool,
    pub run: RunInfo,
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub totals: Totals,
    #[serde(default)]
    pub scenarios: Vec<Scenario>,
    #[serde(default)]
    pub repeats: Option<Repeats>,
    /// `repeats.runs`, each read as totals.
    #[serde(skip)]
    pub runs: Vec<Totals>,
}

/// Reads a report. A folder stands for the `report.json` inside it. Any
/// failure is bad input (exit status 2) and names the file.
pub fn load(path: &Path) -> Result<(PathBuf, Compared), Error> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let shown = file.display();
    let text = std::fs::read_to_string(&file)
        .map_err(|e| bad(format!("{shown}: cannot read the report: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("{shown}: not a JSON report: {e}")))?;
    match value.get("schema") {
        Some(Value::String(s)) if s == SCHEMA => {}
        Some(Value::String(s)) => {
            return Err(bad(format!(
                "{shown}: schema is {s:?}, this coordinator compares {SCHEMA:?} reports"
            )))
        }
        Some(other) => {
            return Err(bad(format!(
                "{shown}: \"schema\" is {other}, expected {SCHEMA:?}"
            )))
        }
        None => {
            return Err(bad(format!(
                "{shown}: no \"schema\" key; not a loadfleet report (expected {SCHEMA:?})"
            )))
        }
    }
    let report = Compared::from_value(value).map_err(|e| {
        bad(format!(
            "{shown}: a {SCHEMA} report this coordinator cannot read: {e}"
        ))
    })?;
    Ok((file, report))
}

impl Compared {
    /// The report's parts, and each repeat run's totals.
    pub fn from_value(value: Value) -> Result<Compared, serde_json::Error> {
        let mut report: Compared = serde_json::from_value(value)?;
        if let Some(r) = &report.repeats {
            report.runs = r
                .runs
                .iter()
                .map(Totals::deserialize)
                .collect::<Result<_, _>>()?;
        }
        Ok(report)
    }
}

/// The folder's name for `…/NAME/report.json`, the file stem otherwise.
pub fn label_for(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "report" {
        let dir = file
            .parent()
            .and_then(|p| {
                // `report.json` given bare: name the working folder.
                if p.as_os_str().is_empty() {
                    std::env::current_dir().ok()
                } else {
                    Some(p.to_path_buf())
                }
            })
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        if let Some(dir) = dir.filter(|d| !d.is_empty()) {
            return dir;
        }
    }
    if stem.is_empty() {
        file.display().to_string()
    } else {
        stem
    }
}

/// Column ids: A, B, …, Z, AA, AB, …
pub fn letter(i: usize) -> String {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Count,
    Percent,
    Rate,
    Ms,
}

type Getter = Box<dyn Fn(&Totals) -> Option<f64>>;
type HeadlineGetter = Box<dyn Fn(&Headline) -> Option<f64>>;
type ScenarioGetter = Box<dyn Fn(&Compared) -> Option<f64>>;

/// A headline figure, read from a report's totals (or a repeat run's).
struct Figure {
    name: String,
    unit: Unit,
    get: Getter,
    /// The same figure in `repeats.median` / `.min` / `.max`; `None` for
    /// figures those do not hold, and for derived ones (a percentage):
    /// their median / min / max must come from the runs (min of a ratio is
    /// not the ratio of the mins).
    headline: Option<HeadlineGetter>,
    /// A figure of one scenario rather than of the totals (a subscription
    /// scenario's): read from the whole report.
    scenario: Option<ScenarioGetter>,
}

impl Figure {
    fn new(
        name: &str,
        unit: Unit,
        get: impl Fn(&Totals) -> Option<f64> + 'static,
        headline: impl Fn(&Headline) -> Option<f64> + 'static,
    ) -> Self {
        Figure {
            name: name.to_string(),
            unit,
            get: Box::new(get),
            headline: Some(Box::new(headline)),
            scenario: None,
        }
    }

    /// A count inside a map of counts (`status`, `errors`): a key the
    /// report lacks is unknown, shown as `-`.
    fn counted(name: String, map: fn(&Totals) -> &BTreeMap<String, u64>, key: String) -> Self {
        Figure {
            name,
            unit: Unit::Count,
            get: Box::new(move |t| map(t).get(&key).map(|n| *n as f64)),
            headline: None,
            scenario: None,
        }
    }

    fn derived(name: &str, get: impl Fn(&Totals) -> Option<f64> + 'static) -> Self {
        Figure {
            name: name.to_string(),
            unit: Unit::Percent,
            get: Box::new(get),
            headline: None,
            scenario: None,
        }
    }
}

fn percent(n: f64, of: f64) -> Option<f64> {
    (of > 0.0).then(|| 100.0 * n / of)
}

/// Transport errors over completed requests, as the `errors<1%` threshold
/// counts them.
fn error_percent(t: &Totals) -> Option<f64> {
    let transport: u64 = t.errors.values().sum();
    percent(transport as f64, t.completed as f64)
}

/// Failures (transport errors, 4xx and 5xx answers, gRPC statuses other
/// than OK) over completed requests, as the `failures<1%` threshold counts
/// them; counted from the maps, so a report written before `failures`
/// existed reads the same.
fn failure_percent(t: &Totals) -> Option<f64> {
    let transport: u64 = t.errors.values().sum();
    let answers: u64 = t
        .status
        .iter()
        .filter(|(c, _)| c.starts_with('4') || c.starts_with('5'))
        .map(|(_, n)| n)
        .sum();
    let grpc: u64 = t.grpc.as_ref().map_or(0, |g| {
        g.status
            .iter()
            .filter(|(name, _)| name.as_str() != GrpcStatus::Ok.as_str())
            .map(|(_, n)| n)
            .sum()
    });
    percent((transport + answers + grpc) as f64, t.completed as f64)
}

/// A gRPC status's count, and its share of completed requests as the
/// `grpc.STATUS<1%` threshold reads it; both unknown (`-`) in a report
/// without that status.
fn grpc_figures(status: String) -> [Figure; 2] {
    let name = status.clone();
    let count = Figure {
        name: format!("grpc {status}"),
        unit: Unit::Count,
        get: Box::new(move |t| Some(*t.grpc.as_ref()?.status.get(&name)? as f64)),
        headline: None,
        scenario: None,
    };
    let share = Figure::derived(&format!("grpc {status} %"), move |t| {
        let n = *t.grpc.as_ref()?.status.get(&status)?;
        percent(n as f64, t.completed as f64)
    });
    [count, share]
}

fn unsent_percent(t: &Totals) -> Option<f64> {
    percent(t.unsent.total as f64, t.intended as f64)
}

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

fn count(n: u64) -> Option<f64> {
    Some(n as f64)
}

type Pick = fn(&Percentiles) -> f64;
type HeadlinePick = fn(&HeadlinePercentiles) -> Option<f64>;

/// The percentiles compare shows, in the report's and the headline's form.
const PERCENTILES: [(&str, Pick, HeadlinePick); 6] = [
    ("p50", |p| p.p50, |h| h.p50),
    ("p90", |p| p.p90, |h| h.p90),
    ("p95", |p| p.p95, |h| h.p95),
    ("p99", |p| p.p99, |h| h.p99),
    ("p999", |p| p.p999, |h| h.p999),
    ("max", |p| p.max, |h| h.max),
];

fn figures(inputs: &[Input]) -> Vec<Figure> {
    let mut f = vec![
        Figure::new(
            "intended",
            Unit::Count,
            |t| count(t.intended),
            |h| h.intended,
        ),
        Figure::new("sent", Unit::Count, |t| count(t.sent), |h| h.sent),
        Figure::new(
            "unsent",
            Unit::Count,
            |t| count(t.unsent.total),
            |h| h.unsent.as_ref()?.total,
        ),
        Figure::derived("unsent %", unsent_percent),
        Figure::new(
            "completed",
            Unit::Count,
            |t| count(t.completed),
            |h| h.completed,
        ),
        Figure::new(
            "completed_in_window",
            Unit::Count,
            |t| count(t.completed_in_window),
            |h| h.completed_in_window,
        ),
        Figure::new(
            "in_flight_at_end",
            Unit::Count,
            |t| count(t.in_flight_at_end),
            |h| h.in_flight_at_end,
        ),
        Figure::new(
            "throughput_rps",
            Unit::Rate,
            |t| Some(t.throughput_rps),
            |h| h.throughput_rps,
        ),
        Figure::new(
            "throughput_ok_rps",
            Unit::Rate,
            |t| Some(t.throughput_ok_rps),
            |h| h.throughput_ok_rps,
        ),
        Figure::derived("error %", error_percent),
        Figure::derived("failure %", failure_percent),
    ];
    let codes: BTreeSet<String> = all_totals(inputs)
        .flat_map(|t| t.status.keys().cloned())
        .collect();
    for code in sorted_codes(codes) {
        f.push(Figure::counted(
            format!("status {code}"),
            |t| &t.status,
            code,
        ));
    }
    let kinds: BTreeSet<String> = all_totals(inputs)
        .flat_map(|t| t.errors.keys().cloned())
        .collect();
    for kind in kinds {
        f.push(Figure::counted(
            format!("error {kind}"),
            |t| &t.errors,
            kind,
        ));
    }
    let grpc: BTreeSet<String> = all_totals(inputs)
        .filter_map(|t| t.grpc.as_ref())
        .flat_map(|g| g.status.keys().cloned())
        .collect();
    // In the vocabulary's order (OK first), as the report lists them.
    for status in GrpcStatus::ALL
        .iter()
        .map(|s| s.as_str().to_string())
        .filter(|s| grpc.contains(s))
    {
        f.extend(grpc_figures(status));
    }
    for (name, pick, headline) in PERCENTILES {
        f.push(Figure::new(
            &format!("latency_ms {name}"),
            Unit::Ms,
            move |t| t.latency_ms.as_ref().map(pick),
            move |h| h.latency_ms.as_ref().and_then(headline),
        ));
    }
    for (name, pick, headline) in PERCENTILES
        .into_iter()
        .filter(|p| matches!(p.0, "p50" | "p99"))
    {
        f.push(Figure::new(
            &format!("service_time_ms {name}"),
            Unit::Ms,
            move |t| t.service_time_ms.as_ref().map(pick),
            move |h| h.service_time_ms.as_ref().and_then(headline),
        ));
    }
    // The phases, k6's connecting / tls_handshaking / waiting: a change in
    // one of them says where a latency change comes from.
    type PhasePick = fn(&Phases) -> Option<&Percentiles>;
    let phases: [(&str, PhasePick); 3] = [
        ("connect_ms", |p| p.connect_ms.as_ref()),
        ("tls_handshake_ms", |p| p.tls_handshake_ms.as_ref()),
        ("ttfb_ms", |p| p.ttfb_ms.as_ref()),
    ];
    for (phase, of) in phases {
        for (name, pick, _) in PERCENTILES
            .into_iter()
            .filter(|p| matches!(p.0, "p50" | "p99"))
        {
            f.push(Figure {
                name: format!("{phase} {name}"),
                unit: Unit::Ms,
                get: Box::new(move |t| of(&t.phases).map(pick)),
                headline: None,
                scenario: None,
            });
        }
    }
    f.push(Figure {
        name: "connections_opened".into(),
        unit: Unit::Count,
        get: Box::new(|t| count(t.phases.connections_opened)),
        headline: None,
        scenario: None,
    });
    f.extend(sse_figures(inputs));
    f
}

/// The figures of every subscription scenario (by name, over all inputs):
/// subscribers opened, events, delivery latency, negative deliveries and
/// the fan-out spread.
fn sse_figures(inputs: &[Input]) -> Vec<Figure> {
    let names: BTreeSet<String> = inputs
        .iter()
        .flat_map(|i| &i.report.scenarios)
        .filter(|s| s.sse.is_some())
        .map(|s| s.name.clone())
        .collect();
    type Pick = fn(&crate::report::sse::SseReport) -> Option<f64>;
    let picks: [(&str, Unit, Pick); 7] = [
        ("opened", Unit::Count, |s| count(s.opened)),
        ("events", Unit::Count, |s| count(s.events)),
        ("reconnects", Unit::Count, |s| count(s.reconnects)),
        ("delivery p50", Unit::Ms, |s| {
            s.delivery.latency_ms.as_ref().map(|p| p.p50)
        }),
        ("delivery p99", Unit::Ms, |s| {
            s.delivery.latency_ms.as_ref().map(|p| p.p99)
        }),
        ("negative deliveries", Unit::Count, |s| {
            count(s.delivery.negative)
        }),
        ("fan-out spread max", Unit::Ms, |s| s.fanout.spread_max_ms),
    ];
    let mut f = Vec::new();
    for name in names {
        for (figure, unit, pick) in picks {
            let of = name.clone();
            f.push(Figure {
                name: format!("{name} sse {figure}"),
                unit,
                get: Box::new(|_| None),
                headline: None,
                scenario: Some(Box::new(move |r: &Compared| {
                    let s = r.scenarios.iter().find(|s| s.name == of)?;
                    pick(s.sse.as_ref()?)
                })),
            });
        }
    }
    f
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// What a report says about one figure: the value shown, and the
/// run-to-run range when it was repeated.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    value: Option<f64>,
    range: Option<(f64, f64)>,
}

fn read(report: &Compared, fig: &Figure) -> Reading {
    if let Some(of_scenario) = &fig.scenario {
        return Reading {
            value: of_scenario(report),
            range: None,
        };
    }
    let from = |pick: fn(&Repeats) -> &Headline| {
        let headline = fig.headline.as_ref()?;
        headline(pick(report.repeats.as_ref()?))
    };
    let per_run: Vec<f64> = report.runs.iter().filter_map(|r| (fig.get)(r)).collect();
    let value = from(|r| &r.median)
        .or_else(|| median(per_run.clone()))
        .or_else(|| (fig.get)(&report.totals));
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
pub struct Ratio {
    /// `None` when either value is missing; infinite when only the base is 0.
    pub value: Option<f64>,
    /// `Some(false)`: the two `[min, max]` ranges overlap, so the difference
    /// is inside the run-to-run spread. `None`: no repeats to tell.
    pub significant: Option<bool>,
}

fn ratio(base: &Reading, other: &Reading) -> Ratio {
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

/// `1.04`, `12.3`, `250`, `inf`; `(ns)` when not significant.
pub fn fmt_ratio(r: &Ratio) -> String {
    let Some(v) = r.value else {
        return "-".into();
    };
    let s = if v.is_infinite() {
        "inf".to_string()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    };
    if r.significant == Some(false) {
        format!("{s} (ns)")
    } else {
        s
    }
}

fn fmt_value(v: Option<f64>, unit: Unit) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    match unit {
        Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
        Unit::Count | Unit::Rate => format!("{v:.1}"),
        Unit::Percent => format!("{v:.2}%"),
        Unit::Ms if v < 1.0 => format!("{v:.3}"),
        Unit::Ms if v < 1000.0 => format!("{v:.2}"),
        Unit::Ms => format!("{v:.1}"),
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: String,
    unit: Unit,
    values: Vec<Reading>,
    /// One per report after the first, relative to the first.
    pub ratios: Vec<Ratio>,
}

impl Row {
    pub fn value(&self, report: usize) -> Option<f64> {
        self.values.get(report).and_then(|r| r.value)
    }

    pub fn cell(&self, report: usize) -> String {
        fmt_value(self.value(report), self.unit)
    }
}

/// The comparison, ready to render as text or JSON.
pub struct Table {
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
    pub fn build(inputs: &[Input]) -> Table {
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
        let rows = figures(inputs)
            .into_iter()
            .map(|fig| {
                let values: Vec<Reading> = inputs.iter().map(|r| read(&r.report, &fig)).collect();
                let ratios = values[1..].iter().map(|v| ratio(&values[0], v)).collect();
                Row {
                    figure: fig.name,
                    unit: fig.unit,
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

    pub fn row(&self, figure: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.figure == figure)
    }

    /// The table as text: a legend, one row per figure, notes, footnotes.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "loadfleet compare — {} reports, ratios relative to A",
            self.columns.len()
        )?;
        writeln!(out)?;
        let label_w = self.columns.iter().map(|c| c.1.len()).max().unwrap_or(0);
        for (id, label, path, repeats) in &self.columns {
            let reps = match repeats {
                Some(n) if *n > 0 => format!("  ({n} repeats, median shown)"),
                Some(_) => "  (repeats, median shown)".to_string(),
                None => String::new(),
            };
            writeln!(out, "  {id}  {label:<label_w$}  {}{reps}", path.display())?;
        }
        writeln!(out)?;

        let mut header = vec!["figure".to_string()];
        header.extend(self.columns.iter().map(|c| c.1.clone()));
        header.extend(self.columns[1..].iter().map(|c| format!("{}/A", c.0)));
        let mut lines = vec![header];
        for row in &self.rows {
            let mut line = vec![row.figure.clone()];
            line.extend((0..self.columns.len()).map(|i| row.cell(i)));
            line.extend(row.ratios.iter().map(fmt_ratio));
            lines.push(line);
        }
        let mut verdicts = vec!["verdicts".to_string()];
        verdicts.extend(self.verdicts.iter().map(|v| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        }));
        verdicts.extend(self.columns[1..].iter().map(|_| String::new()));
        lines.push(verdicts);

        let widths: Vec<usize> = (0..lines[0].len())
            .map(|c| {
                lines
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for line in &lines {
            let mut s = format!("  {:<w$}", line[0], w = widths[0]);
            for (cell, w) in line[1..].iter().zip(&widths[1..]) {
                s.push_str(&format!("  {cell:>w$}"));
            }
            writeln!(out, "{}", s.trim_end())?;
        }

        if !self.notes.is_empty() {
            writeln!(out)?;
            writeln!(out, "notes:")?;
            for n in &self.notes {
                writeln!(out, "  {n}")?;
            }
        }
        writeln!(out)?;
        for f in &self.footnotes {
            writeln!(out, "  * {f}")?;
        }
        Ok(())
    }

    /// The same table for scripts (`compare --json`).
    pub fn to_json(&self) -> Value {
        let finite = |v: Option<f64>| {
            v.filter(|x| x.is_finite())
                .map_or(Value::Null, |x| json!(x))
        };
        let reports: Vec<Value> = self
            .columns
            .iter()
            .map(|(id, label, path, repeats)| {
                json!({
                    "id": id,
                    "label": label,
                    "path": path.display().to_string(),
                    "repeats": repeats,
                })
            })
            .collect();
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let ratios: Vec<Value> = r
                    .ratios
                    .iter()
                    .zip(&self.columns[1..])
                    .map(|(q, c)| {
                        json!({
                            "of": format!("{}/A", c.0),
                            "ratio": finite(q.value),
                            "infinite": q.value.is_some_and(f64::is_infinite),
                            "significant": q.significant,
                        })
                    })
                    .collect();
                let ranges: Vec<Value> = r
                    .values
                    .iter()
                    .map(|v| v.range.map_or(Value::Null, |(lo, hi)| json!([lo, hi])))
                    .collect();
                json!({
                    "figure": r.figure,
                    "values": r.values.iter().map(|v| finite(v.value)).collect::<Vec<_>>(),
                    "ranges": ranges,
                    "ratios": ratios,
                })
            })
            .collect();
        json!({
            "schema": "loadfleet.compare/v1",
            "reports": reports,
            "rows": rows,
            "verdicts": self.verdicts,
            "notes": self.notes,
            "footnotes": self.footnotes,
        })
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
fn fmt_number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real report (tests/fixtures/report.json: 100 req/s for 3 s) with
    /// its totals' figures replaced.
    fn report(p50: f64, p99: f64, completed: u64, status: Value) -> Value {
        let mut r: Value =
            serde_json::from_str(include_str!("../tests/fixtures/report.json")).unwrap();
        let t = &mut r["totals"];
        t["completed"] = json!(completed);
        t["completed_in_window"] = json!(completed);
        t["status"] = status;
        t["throughput_rps"] = json!(completed as f64 / 10.0);
        for key in ["latency_ms", "service_time_ms"] {
            for (k, v) in [
                ("p50", p50),
                ("p90", p50),
                ("p95", p50),
                ("p99", p99),
                ("p999", p99),
                ("max", p99),
            ] {
                t[key][k] = json!(v);
            }
        }
        r
    }

    fn input(label: &str, report: Value) -> Input {
        Input {
            label: label.into(),
            path: PathBuf::from(format!("/x/{label}/report.json")),
            report: Compared::from_value(report).unwrap(),
        }
    }

    fn text(t: &Table) -> String {
        let mut out = Vec::new();
        t.write_text(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn line<'a>(s: &'a str, figure: &str) -> &'a str {
        s.lines()
            .find(|l| l.trim_start().starts_with(&format!("{figure}  ")))
            .unwrap_or_else(|| panic!("no row {figure:?} in\n{s}"))
    }

    /// gRPC statuses get their count and share rows, `-` where a report
    /// lacks the status, and non-OK statuses are failures.
    #[test]
    fn grpc_statuses_are_rows_of_their_own() {
        let mut a = report(10.0, 20.0, 1000, json!({}));
        a["totals"]["grpc"] = json!({"calls": 1000, "status": {"OK": 1000}, "rate": {"OK": 1.0}});
        let mut b = report(10.0, 20.0, 1000, json!({}));
        b["totals"]["grpc"] = json!({
            "calls": 1000,
            "status": {"OK": 950, "UNAVAILABLE": 50},
            "rate": {"OK": 0.95, "UNAVAILABLE": 0.05}
        });
        let t = Table::build(&[input("a", a), input("b", b)]);
        let s = text(&t);
        assert_eq!(t.row("grpc UNAVAILABLE").unwrap().cell(0), "-", "{s}");
        assert!(line(&s, "grpc UNAVAILABLE %").contains('5'), "{s}");
        assert!(line(&s, "grpc OK").contains("950"), "{s}");
        assert!(line(&s, "failure %").contains('5'), "{s}");
    }

    #[test]
    fn compare_table_has_headline_rows_in_order_with_ratios() {
        let a = input("fast", report(10.0, 20.0, 1000, json!({"200": 1000})));
        let b = input(
            "slow",
            report(20.0, 80.0, 1000, json!({"200": 900, "503": 100})),
        );
        let t = Table::build(&[a, b]);
        let names: Vec<&str> = t.rows.iter().map(|r| r.figure.as_str()).collect();
        assert_eq!(
            &names[..3],
            ["intended", "sent", "unsent"],
            "lesson 1 leads"
        );
        assert!(names.contains(&"status 200") && names.contains(&"status 503"));
        assert_eq!(t.row("latency_ms p50").unwrap().ratios[0].value, Some(2.0));
        assert_eq!(t.row("latency_ms p99").unwrap().ratios[0].value, Some(4.0));
        // A has no 503 key at all: unknown, shown as "-", not 0.
        let s503 = t.row("status 503").unwrap();
        assert_eq!(s503.value(0), None);
        assert_eq!(s503.cell(0), "-");
        assert_eq!(s503.ratios[0].value, None);
        // 100 × 5xx over 1000 completed.
        // 100 × 5xx over 1000 completed: failures, not (transport) errors.
        assert_eq!(t.row("failure %").unwrap().value(1), Some(10.0));
        assert_eq!(t.row("failure %").unwrap().cell(0), "0.00%");
        assert_eq!(t.row("error %").unwrap().value(1), Some(0.0));

        let s = text(&t);
        assert!(
            s.contains("fast") && s.contains("slow") && s.contains("B/A"),
            "{s}"
        );
        assert!(line(&s, "latency_ms p50").ends_with("2.00"), "{s}");
        assert!(line(&s, "status 503").contains(" - "), "{s}");
        assert!(line(&s, "verdicts").contains("LOCALHOST"), "{s}");
        assert!(s.contains("significance needs repeats"), "{s}");
        assert!(!s.contains("(ns)"), "{s}");
        assert!(!s.contains("notes:"), "the same load: {s}");
        let ordered: Vec<usize> = ["intended", "sent", "unsent", "completed", "latency_ms p50"]
            .iter()
            .map(|f| s.find(line(&s, f)).unwrap())
            .collect();
        assert!(ordered.windows(2).all(|w| w[0] < w[1]), "{s}");
    }

    #[test]
    fn compare_missing_figures_show_as_dash() {
        let mut none = report(10.0, 20.0, 0, json!({}));
        none["totals"]["latency_ms"] = Value::Null;
        let full = report(10.0, 20.0, 100, json!({"200": 100}));
        let t = Table::build(&[input("none", none), input("full", full)]);
        let p50 = t.row("latency_ms p50").unwrap();
        assert_eq!(p50.cell(0), "-");
        assert_eq!(p50.cell(1), "10.00");
        assert_eq!(fmt_ratio(&p50.ratios[0]), "-");
        // The status row of a report without that status is unknown, not 0.
        assert_eq!(t.row("status 200").unwrap().cell(0), "-");
        // Nothing completed: no error percentage either.
        assert_eq!(t.row("error %").unwrap().cell(0), "-");
        let j = t.to_json();
        assert_eq!(j["reports"][1]["id"], "B");
        assert_eq!(j["rows"][0]["figure"], "intended");
    }

    #[test]
    fn compare_reads_reports_older_than_the_newest_keys() {
        // Keys compare does not read may be absent (the report's own
        // later additions are optional in its types, `#[serde(default)]`).
        let mut r = report(10.0, 20.0, 100, json!({"200": 100}));
        r.as_object_mut().unwrap().remove("thresholds");
        r.as_object_mut().unwrap().remove("agents");
        r.as_object_mut().unwrap().remove("intervals");
        let c = Compared::from_value(r).unwrap();
        assert_eq!(c.totals.completed, 100);
        // A key of the wrong type is refused, not guessed at.
        let mut odd = report(10.0, 20.0, 100, json!({"200": 100}));
        odd["totals"]["intended"] = json!("many");
        let e = Compared::from_value(odd).unwrap_err().to_string();
        assert!(e.contains("invalid type"), "{e}");
    }

    #[test]
    fn compare_ratio_formatting() {
        let r = |v: f64| Ratio {
            value: Some(v),
            significant: None,
        };
        assert_eq!(fmt_ratio(&r(1.0)), "1.00");
        assert_eq!(fmt_ratio(&r(1.0449)), "1.04");
        assert_eq!(fmt_ratio(&r(0.5)), "0.50");
        assert_eq!(fmt_ratio(&r(12.34)), "12.3");
        assert_eq!(fmt_ratio(&r(250.4)), "250");
        assert_eq!(fmt_ratio(&r(f64::INFINITY)), "inf");
        assert_eq!(
            fmt_ratio(&Ratio {
                value: None,
                significant: None
            }),
            "-"
        );
        let ns = Ratio {
            value: Some(1.04),
            significant: Some(false),
        };
        assert_eq!(fmt_ratio(&ns), "1.04 (ns)");
        let sig = Ratio {
            value: Some(3.0),
            significant: Some(true),
        };
        assert_eq!(fmt_ratio(&sig), "3.00");
        // Zero over zero is "no change", not a division error.
        let zero = Reading {
            value: Some(0.0),
            range: None,
        };
        assert_eq!(ratio(&zero, &zero).value, Some(1.0));
        assert_eq!(letter(0), "A");
        assert_eq!(letter(25), "Z");
        assert_eq!(letter(26), "AA");
        assert_eq!(fmt_number(100.0), "100");
        assert_eq!(fmt_number(12.5), "12.5");
    }

    fn with_repeats(p99s: &[f64]) -> Value {
        let runs: Vec<Value> = p99s
            .iter()
            .map(|p| report(10.0, *p, 1000, json!({"200": 1000}))["totals"].clone())
            .collect();
        let lo = p99s.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p99s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut r = report(10.0, 999.0, 1000, json!({"200": 1000}));
        r["repeats"] = json!({
            "count": p99s.len(),
            "representative": 0,
            "runs": runs,
            "median": {"latency_ms": {"p99": median(p99s.to_vec()).unwrap()}},
            "min": {"latency_ms": {"p99": lo}},
            "max": {"latency_ms": {"p99": hi}},
        });
        r
    }

    #[test]
    fn compare_overlapping_repeat_ranges_are_not_significant() {
        let a = input("a", with_repeats(&[100.0, 110.0, 120.0]));
        let b = input("b", with_repeats(&[105.0, 115.0, 125.0]));
        let c = input("c", with_repeats(&[200.0, 210.0, 220.0]));
        let t = Table::build(&[a, b, c]);
        let p99 = t.row("latency_ms p99").unwrap();
        // The median is quoted, not the totals' 999.
        assert_eq!(p99.value(0), Some(110.0));
        assert_eq!(p99.ratios[0].significant, Some(false));
        assert_eq!(fmt_ratio(&p99.ratios[0]), "1.05 (ns)");
        assert_eq!(p99.ratios[1].significant, Some(true));
        assert_eq!(fmt_ratio(&p99.ratios[1]), "1.91");
        // Figures missing from min/max come from the runs themselves; the
        // runs all agree on p50, so equal ranges overlap.
        let p50 = t.row("latency_ms p50").unwrap();
        assert_eq!(p50.ratios[0].significant, Some(false));
        // A derived figure never reads the min/max objects, only the runs.
        assert_eq!(
            t.row("failure %").unwrap().ratios[0].significant,
            Some(false)
        );
        let s = text(&t);
        assert!(s.contains("(3 repeats, median shown)"), "{s}");
        assert!(s.contains("(ns) = not significant"), "{s}");
        assert!(!s.contains("significance needs repeats"), "{s}");
        let j = t.to_json();
        let row = j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["figure"] == "latency_ms p99")
            .unwrap();
        assert_eq!(row["ratios"][0]["significant"], false);
        assert_eq!(row["ranges"][2], json!([200.0, 220.0]));
    }

    #[test]
    fn compare_repeats_on_one_side_only_leave_ratios_unmarked() {
        let a = input("a", with_repeats(&[100.0, 110.0]));
        let b = input("b", report(10.0, 105.0, 1000, json!({"200": 1000})));
        let t = Table::build(&[a, b]);
        let p99 = t.row("latency_ms p99").unwrap();
        assert_eq!(p99.ratios[0].significant, None);
        assert_eq!(fmt_ratio(&p99.ratios[0]), "1.00");
        let s = text(&t);
        assert!(s.contains("B is a single run"), "{s}");
    }

    #[test]
    fn compare_flags_no_experiment_and_partial_reports() {
        let a = input("a", report(10.0, 20.0, 1000, json!({"200": 1000})));
        let mut broken = report(0.1, 0.2, 1000, json!({"503": 1000}));
        broken["verdicts"] = json!([
            {"level": "error", "code": "NO_EXPERIMENT", "message": "no request succeeded"},
            {"level": "warn", "code": "LOCALHOST", "message": "x"},
        ]);
        let mut cut = report(10.0, 20.0, 500, json!({"200": 500}));
        cut["partial"] = json!(true);
        let t = Table::build(&[a, input("broken", broken), input("cut", cut)]);
        let s = text(&t);
        assert!(
            s.contains("B: NO_EXPERIMENT — comparing it is meaningless"),
            "{s}"
        );
        assert!(!s.contains("B: LOCALHOST"), "{s}");
        assert!(s.contains("C: PARTIAL"), "{s}");
        assert!(!s.contains("A: "), "A is fine: {s}");
        assert!(
            line(&s, "verdicts").contains("NO_EXPERIMENT,LOCALHOST"),
            "{s}"
        );
    }

    /// Rates, durations and plans that differ are said, from what the
    /// report has: run.duration_s and each scenario's offered_rps.
    #[test]
    fn compare_says_when_the_loads_differ() {
        let a = input("a", report(10.0, 20.0, 300, json!({"200": 300})));
        let mut faster = report(10.0, 20.0, 600, json!({"200": 600}));
        faster["scenarios"][0]["offered_rps"] = json!(200.0);
        let mut longer = report(10.0, 20.0, 600, json!({"200": 600}));
        longer["run"]["duration_s"] = json!(6.0);
        let mut other = report(10.0, 20.0, 300, json!({"200": 300}));
        other["scenarios"][0]["name"] = json!("checkout");
        let t = Table::build(&[
            a,
            input("faster", faster),
            input("longer", longer),
            input("other", other),
        ]);
        let s = text(&t);
        assert!(
            s.contains("B: rate 200 req/s offered differs from A's 100 req/s"),
            "{s}"
        );
        assert!(s.contains("C: duration 6s differs from A's 3s"), "{s}");
        assert!(
            s.contains("D: scenarios [checkout] differ from A's [default]"),
            "{s}"
        );
        assert_eq!(t.notes.len(), 3, "{s}");
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("loadfleet-compare-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    fn bad_message(path: &Path) -> String {
        let e = load(path).expect_err("bad input");
        assert_eq!(e.exit_code(), 2, "{e:#} is bad input");
        format!("{e:#}")
    }

    #[test]
    fn compare_bad_inputs_name_the_file_and_the_problem() {
        let missing = temp("missing.json");
        let m = bad_message(&missing);
        assert!(
            m.contains("missing.json") && m.contains("cannot read"),
            "{m}"
        );

        let garbled = temp("garbled.json");
        std::fs::write(&garbled, "{\"schema\": ").unwrap();
        let m = bad_message(&garbled);
        assert!(
            m.contains("garbled.json") && m.contains("not a JSON report"),
            "{m}"
        );

        let other = temp("other.json");
        std::fs::write(&other, r#"{"schema": "loadfleet.report/v9"}"#).unwrap();
        let m = bad_message(&other);
        assert!(
            m.contains("other.json") && m.contains("loadfleet.report/v9"),
            "{m}"
        );

        let none = temp("none.json");
        std::fs::write(&none, "[1, 2]").unwrap();
        let m = bad_message(&none);
        assert!(
            m.contains("none.json") && m.contains("no \"schema\" key"),
            "{m}"
        );

        let hollow = temp("hollow.json");
        std::fs::write(&hollow, json!({"schema": SCHEMA}).to_string()).unwrap();
        let m = bad_message(&hollow);
        assert!(
            m.contains("hollow.json") && m.contains("cannot read") && m.contains("missing field"),
            "{m}"
        );

        // run() refuses before printing half a table.
        let good = temp("good.json");
        std::fs::write(&good, report(1.0, 2.0, 3, json!({"200": 3})).to_string()).unwrap();
        let mut out = Vec::new();
        let args = CompareArgs {
            reports: vec![good.clone(), missing],
            json: false,
        };
        assert!(run(&args, &mut out).is_err());
        assert!(out.is_empty());
        let args = CompareArgs {
            reports: vec![good.clone(), good],
            json: true,
        };
        assert_eq!(run(&args, &mut out).unwrap(), 0);
        let j: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(j["schema"], "loadfleet.compare/v1");
    }

    #[test]
    fn compare_labels_come_from_folder_or_stem() {
        assert_eq!(label_for(Path::new("/runs/pool-10/report.json")), "pool-10");
        assert_eq!(label_for(Path::new("/runs/baseline.json")), "baseline");
        assert_eq!(label_for(Path::new("b.json")), "b");
    }
}
