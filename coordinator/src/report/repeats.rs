//! `--repeat N`: one report over several runs of the same plan.
//!
//! Conclusions come from several runs with the median quoted, not from one
//! lucky or unlucky run. The combined report keeps every run's headline
//! figures, adds their median, min and max, shows the run whose p99 is the
//! median as the representative one, and checks thresholds against the
//! medians. `compare` reads the min..max spread to tell real differences
//! from run-to-run noise.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::model::{Checked, Report, Verdict};
use super::verdicts;
use crate::thresholds::{Figures, Latency, Threshold};

/// Headline figures, as key paths into a run's totals.
const HEADLINE: &[&str] = &[
    "intended",
    "sent",
    "unsent.total",
    "completed",
    "completed_in_window",
    "in_flight_at_end",
    "errors_total",
    "failures",
    "throughput_rps",
    "throughput_ok_rps",
    "latency_ms.p50",
    "latency_ms.p90",
    "latency_ms.p95",
    "latency_ms.p99",
    "latency_ms.p999",
    "latency_ms.max",
    "latency_ms.mean",
    "service_time_ms.p50",
    "service_time_ms.p90",
    "service_time_ms.p95",
    "service_time_ms.p99",
    "service_time_ms.p999",
    "service_time_ms.max",
    "service_time_ms.mean",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repeats {
    /// How many runs were carried out.
    pub count: usize,
    /// Index (0-based) of the run shown as the report's totals: the one
    /// whose latency p99 is the median.
    pub representative: usize,
    /// Each run's totals, in order, with `errors_total` (transport errors,
    /// every kind together).
    pub runs: Vec<Value>,
    pub median: Headline,
    pub min: Headline,
    pub max: Headline,
}

/// `repeats.median`, `.min` and `.max`: the [`HEADLINE`] figures, each
/// absent when no run had it (a run with no completion has no latency).
/// Absent keys stay absent, never 0, so `compare` can show `-`. Fields are
/// in key order, as the maps they replace were written, so the JSON is
/// unchanged; a figure added to [`HEADLINE`] needs its field here (a test
/// says so).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_in_window: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_at_end: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<HeadlinePercentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_time_ms: Option<HeadlinePercentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_ok_rps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_rps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<HeadlineUnsent>,
}

/// The latency figures of a [`Headline`], in key order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeadlinePercentiles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999: Option<f64>,
}

/// `unsent.total` of a [`Headline`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeadlineUnsent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
}

impl Headline {
    /// From the map `combine` builds by key path; every value is a number
    /// in its place, so nothing is lost (see the test).
    fn from_map(map: Map<String, Value>) -> Headline {
        serde_json::from_value(Value::Object(map)).unwrap_or_default()
    }

    /// The figure at a [`HEADLINE`] key path.
    pub fn get(&self, path: &str) -> Option<f64> {
        get(&serde_json::to_value(self).ok()?, path)
    }
}

/// How a column of the repeats table is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    PerSecond,
    Millis,
}

/// The columns of the repeats table (text and HTML): title, key path, unit.
pub const COLUMNS: [(&str, &str, Unit); 7] = [
    ("intended", "intended", Unit::Count),
    ("sent", "sent", Unit::Count),
    ("unsent", "unsent.total", Unit::Count),
    ("req/s", "throughput_rps", Unit::PerSecond),
    ("p50", "latency_ms.p50", Unit::Millis),
    ("p99", "latency_ms.p99", Unit::Millis),
    ("max", "latency_ms.max", Unit::Millis),
];

impl Repeats {
    /// Rows of the repeats table: each run, then median, min and max, with
    /// one value per column of [`COLUMNS`].
    pub fn table(&self) -> Vec<(String, Vec<Option<f64>>)> {
        let row = |v: &Value| COLUMNS.iter().map(|(_, path, _)| get(v, path)).collect();
        let headline = |h: &Headline| COLUMNS.iter().map(|(_, path, _)| h.get(path)).collect();
        self.runs
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("run {}", i + 1), row(v)))
            .chain([
                ("median".to_string(), headline(&self.median)),
                ("min".to_string(), headline(&self.min)),
                ("max".to_string(), headline(&self.max)),
            ])
            .collect()
    }
}

fn get(v: &Value, path: &str) -> Option<f64> {
    path.split('.').try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn set(root: &mut Map<String, Value>, path: &str, value: f64) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut node = root;
    for p in parts {
        let entry = node
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(map) = entry else { return };
        node = map;
    }
    node.insert(last.to_string(), Value::from(value));
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// A run's totals as JSON, with the transport errors' total, which
/// thresholds and compare read as `errors`.
fn run_value(r: &Report) -> Value {
    let mut v = serde_json::to_value(&r.totals).unwrap_or(Value::Null);
    let errors: u64 = r.totals.errors.values().sum();
    if let Value::Object(map) = &mut v {
        map.insert("errors_total".into(), Value::from(errors));
    }
    v
}

/// Combines the reports of several runs; the second value is the index of
/// the representative run (whose interval log is written).
pub fn combine(reports: Vec<Report>, thresholds: &[Threshold]) -> (Report, usize) {
    let runs: Vec<Value> = reports.iter().map(run_value).collect();
    let (mut med, mut lo, mut hi) = (Map::new(), Map::new(), Map::new());
    for path in HEADLINE {
        let mut values: Vec<f64> = runs.iter().filter_map(|r| get(r, path)).collect();
        if values.is_empty() {
            continue;
        }
        values.sort_by(f64::total_cmp);
        set(&mut med, path, median(&values));
        set(&mut lo, path, values[0]);
        set(&mut hi, path, values[values.len() - 1]);
    }
    let med_map = med.clone();
    let med = Value::Object(med);

    // The representative run: p99 closest to the median p99.
    let representative = match get(&med, "latency_ms.p99") {
        Some(m) => runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| get(r, "latency_ms.p99").map(|p| (i, (p - m).abs())))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(i, _)| i),
        None => 0,
    };

    let count = reports.len();
    let verdicts = merged_verdicts(&reports);
    let partial = reports.iter().any(|r| r.partial);
    let mut main = reports
        .into_iter()
        .nth(representative)
        .expect("the representative index comes from the runs");
    main.verdicts = verdicts;
    main.partial = partial;
    let figures = median_figures(&med, &runs);
    main.thresholds = thresholds
        .iter()
        .map(|th| match th.scenario() {
            // Per-scenario figures are only kept for the representative run.
            Some(_) => main
                .thresholds
                .iter()
                .find(|c| c.threshold == th.to_string())
                .cloned()
                .unwrap_or_else(|| th.check(&figures)),
            None => th.check(&figures),
        })
        .map(|mut c: Checked| {
            c.threshold = format!("{} (median of {count} runs)", c.threshold);
            c
        })
        .collect();
    main.repeats = Some(Repeats {
        count,
        representative,
        runs,
        median: Headline::from_map(med_map),
        min: Headline::from_map(lo),
        max: Headline::from_map(hi),
    });
    (main, representative)
}

/// The median latency percentiles, for thresholds.
fn median_latency(med: &Value) -> Option<Latency> {
    let p50 = get(med, "latency_ms.p50")?;
    let q = |k: &str| get(med, &format!("latency_ms.{k}")).unwrap_or(f64::NAN);
    Some(Latency {
        p50,
        p90: q("p90"),
        p95: q("p95"),
        p99: q("p99"),
        p999: q("p999"),
        max: q("max"),
        mean: q("mean"),
    })
}

/// Threshold figures from the medians; each gRPC status's count is its
/// median over the runs (0 in a run that never saw it).
fn median_figures(med: &Value, runs: &[Value]) -> Figures {
    let mut names = std::collections::BTreeSet::new();
    for r in runs {
        if let Some(Value::Object(status)) = r.get("grpc").and_then(|g| g.get("status")) {
            names.extend(status.keys().cloned());
        }
    }
    let grpc = names
        .into_iter()
        .map(|name| {
            let mut counts: Vec<f64> = runs
                .iter()
                .map(|r| get(r, &format!("grpc.status.{name}")).unwrap_or(0.0))
                .collect();
            counts.sort_by(f64::total_cmp);
            let n = median(&counts).round() as u64;
            (name, n)
        })
        .collect();
    let n = |k: &str| get(med, k).unwrap_or(0.0).round() as u64;
    Figures {
        latency: median_latency(med),
        intended: n("intended"),
        unsent: n("unsent.total"),
        sent: n("sent"),
        completed: n("completed"),
        errors: n("errors_total"),
        failures: n("failures"),
        incomplete: n("in_flight_at_end"),
        throughput_rps: get(med, "throughput_rps").unwrap_or(0.0),
        throughput_ok_rps: get(med, "throughput_ok_rps").unwrap_or(0.0),
        grpc,
    }
}

/// Verdicts of all runs: one said by every run is kept once; others say
/// which run they are about.
fn merged_verdicts(reports: &[Report]) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        for v in &r.verdicts {
            let everywhere = reports.iter().all(|o| {
                o.verdicts
                    .iter()
                    .any(|w| w.code == v.code && w.message == v.message)
            });
            let v = if everywhere {
                v.clone()
            } else {
                Verdict {
                    level: v.level,
                    code: v.code,
                    message: format!("run {}: {}", i + 1, v.message),
                }
            };
            if !out
                .iter()
                .any(|o| o.code == v.code && o.message == v.message)
            {
                out.push(v);
            }
        }
    }
    verdicts::sort(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_set_and_get() {
        let mut m = Map::new();
        set(&mut m, "latency_ms.p99", 4.0);
        set(&mut m, "intended", 10.0);
        let v = Value::Object(m);
        assert_eq!(get(&v, "latency_ms.p99"), Some(4.0));
        assert_eq!(get(&v, "intended"), Some(10.0));
        assert_eq!(get(&v, "latency_ms.p50"), None);
    }

    /// Every headline figure has its field in [`Headline`], and the typed
    /// form writes exactly the map it was read from.
    #[test]
    fn every_headline_figure_round_trips_through_the_typed_struct() {
        let mut m = Map::new();
        for (i, path) in HEADLINE.iter().enumerate() {
            set(&mut m, path, i as f64 + 0.5);
        }
        let h = Headline::from_map(m.clone());
        assert_eq!(serde_json::to_value(&h).unwrap(), Value::Object(m.clone()));
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            serde_json::to_string(&Value::Object(m)).unwrap()
        );
        for (i, path) in HEADLINE.iter().enumerate() {
            assert_eq!(h.get(path), Some(i as f64 + 0.5), "{path}");
        }
        // Absent figures stay absent.
        let mut partial = Map::new();
        set(&mut partial, "latency_ms.p99", 3.0);
        let h = Headline::from_map(partial.clone());
        assert_eq!(h.intended, None);
        assert_eq!(serde_json::to_value(&h).unwrap(), Value::Object(partial));
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }
}
