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
    "errors_total",
    "throughput_rps",
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
    /// Each run's totals, in order, with `errors_total` (transport + 5xx).
    pub runs: Vec<Value>,
    pub median: Value,
    pub min: Value,
    pub max: Value,
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
        self.runs
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("run {}", i + 1), row(v)))
            .chain([
                ("median".to_string(), row(&self.median)),
                ("min".to_string(), row(&self.min)),
                ("max".to_string(), row(&self.max)),
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

/// A run's totals as JSON, with the error count thresholds and compare use.
fn run_value(r: &Report) -> Value {
    let mut v = serde_json::to_value(&r.totals).unwrap_or(Value::Null);
    let t = &r.totals;
    let errors: u64 = t.errors.values().sum::<u64>()
        + t.status
            .iter()
            .filter(|(code, _)| code.starts_with('5'))
            .map(|(_, n)| n)
            .sum::<u64>();
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
    let (med, lo, hi) = (Value::Object(med), Value::Object(lo), Value::Object(hi));

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
    let figures = median_figures(&med);
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
        median: med,
        min: lo,
        max: hi,
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

/// Threshold figures from the medians.
fn median_figures(med: &Value) -> Figures {
    let n = |k: &str| get(med, k).unwrap_or(0.0).round() as u64;
    Figures {
        latency: median_latency(med),
        intended: n("intended"),
        unsent: n("unsent.total"),
        completed: n("completed"),
        errors: n("errors_total"),
        throughput_rps: get(med, "throughput_rps").unwrap_or(0.0),
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

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }
}
