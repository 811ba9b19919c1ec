//! `--repeat N`: one report over several runs of the same plan.
//!
//! One run can be lucky or unlucky, so the combined report keeps every
//! run's totals and the median, min and max of each headline figure; the
//! text report and the page lead with the medians and each run, then show
//! the run whose p99 is the median (the representative one) in full; and
//! thresholds are checked against the medians. `compare` reads the min..max spread to
//! tell real differences from run-to-run noise.

use serde_json::{Map, Value};

use super::verdicts;
use crate::figures::{median, Figure, Quantile, Source, Unit as FigureUnit, HEADLINE};
use crate::report_model::{
    Checked, Headline, HeadlinePercentiles, Percentiles, Repeats, Report, Totals, Verdict,
};
use crate::thresholds::Threshold;

impl Headline {
    /// From a map of figures by key path; every value is a number in its
    /// place, so nothing is lost (a test checks).
    fn from_map(map: Map<String, Value>) -> Headline {
        serde_json::from_value(Value::Object(map)).unwrap_or_default()
    }

    /// The figure at a key path ([`Figure::key`]).
    pub fn get(&self, path: &str) -> Option<f64> {
        get(&serde_json::to_value(self).ok()?, path)
    }
}

impl HeadlinePercentiles {
    /// As a percentile set for the rows that show one; `None` when no run
    /// had a latency (nothing completed). A figure missing alone shows as
    /// a dash.
    pub(crate) fn as_percentiles(&self) -> Option<Percentiles> {
        let v = |x: Option<f64>| x.unwrap_or(f64::NAN);
        Some(Percentiles {
            p50: self.p50?,
            p90: v(self.p90),
            p95: v(self.p95),
            p99: v(self.p99),
            p999: v(self.p999),
            max: v(self.max),
            mean: v(self.mean),
            count: 0,
        })
    }
}

/// How a column of the repeats table is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Count,
    PerSecond,
    Millis,
}

/// The columns of the repeats table (text and HTML): title, figure, unit.
pub(crate) const COLUMNS: [(&str, Figure, Unit); 7] = [
    ("intended", Figure::Intended, Unit::Count),
    ("sent", Figure::Sent, Unit::Count),
    ("unsent", Figure::Unsent, Unit::Count),
    ("req/s", Figure::Throughput, Unit::PerSecond),
    ("p50", Figure::Latency(Quantile::P50), Unit::Millis),
    ("p99", Figure::Latency(Quantile::P99), Unit::Millis),
    ("max", Figure::Latency(Quantile::Max), Unit::Millis),
];

impl Repeats {
    /// Rows of the repeats table: each run, then median, min and max, with
    /// one value per column of [`COLUMNS`].
    pub fn table(&self) -> Vec<(String, Vec<Option<f64>>)> {
        let row = |v: &Value| COLUMNS.iter().map(|(_, f, _)| get(v, &f.key())).collect();
        let headline = |h: &Headline| COLUMNS.iter().map(|(_, f, _)| h.get(&f.key())).collect();
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

/// A run's totals as JSON, with the transport errors' total
/// ([`Figure::Errors`]), which the totals hold only by kind, and each
/// scenario's steadiness verdict (null where none was judged), since only
/// the representative run's scenarios are kept whole.
fn run_value(r: &Report) -> Value {
    let t = &r.totals;
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        if let Some(errors) = Figure::Errors.of(t) {
            map.insert(Figure::Errors.key(), Value::from(errors as u64));
        }
        let steadiness = r
            .scenarios
            .iter()
            .map(|s| {
                s.steadiness
                    .as_ref()
                    .and_then(|st| serde_json::to_value(st.verdict).ok())
                    .unwrap_or(Value::Null)
            })
            .collect();
        map.insert("steadiness".into(), Value::Array(steadiness));
    }
    v
}

/// The figures of several runs, each the median over the runs that have
/// it. Counts are whole: the median of an even number of runs is rounded.
struct Medians<'a>(Vec<&'a Totals>);

impl Source for Medians<'_> {
    fn get(&self, figure: &Figure) -> Option<f64> {
        let values = self.0.iter().filter_map(|t| match figure {
            // A run that never saw a status saw it 0 times, so a status
            // seen in one run of three has a median of 0.
            Figure::Grpc(_) => Some(figure.of(t).unwrap_or(0.0)),
            _ => figure.of(t),
        });
        let m = median(values.collect())?;
        Some(if figure.unit() == FigureUnit::Count {
            m.round()
        } else {
            m
        })
    }
}

/// Combines the reports of several runs; the second value is the index of
/// the representative run (whose interval log is written).
pub(crate) fn combine(reports: Vec<Report>, thresholds: &[Threshold]) -> (Report, usize) {
    let runs: Vec<Value> = reports.iter().map(run_value).collect();
    let (mut med, mut lo, mut hi) = (Map::new(), Map::new(), Map::new());
    for figure in &HEADLINE {
        let mut values: Vec<f64> = reports
            .iter()
            .filter_map(|r| figure.of(&r.totals))
            .collect();
        values.sort_by(f64::total_cmp);
        let (Some(&min), Some(&max)) = (values.first(), values.last()) else {
            continue;
        };
        let Some(m) = median(values) else { continue };
        let key = figure.key();
        set(&mut med, &key, m);
        set(&mut lo, &key, min);
        set(&mut hi, &key, max);
    }

    // The representative run: p99 closest to the median p99.
    let p99 = Figure::Latency(Quantile::P99);
    let representative = match median(reports.iter().filter_map(|r| p99.of(&r.totals)).collect()) {
        Some(m) => reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| p99.of(&r.totals).map(|p| (i, (p - m).abs())))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(i, _)| i),
        None => 0,
    };

    let count = reports.len();
    let verdicts = merged_verdicts(&reports);
    let partial = reports.iter().any(|r| r.partial);
    let checked: Vec<Checked> = {
        let medians = Medians(reports.iter().map(|r| &r.totals).collect());
        let shown = &reports[representative].thresholds;
        thresholds
            .iter()
            .map(|th| {
                // Per-scenario figures, and checks (counted by step), are
                // only kept for the representative run.
                if th.scenario().is_some() || th.figure().is_from_steps() {
                    shown
                        .iter()
                        .find(|c| c.threshold == th.to_string())
                        .cloned()
                        .unwrap_or_else(|| th.check(&medians))
                } else {
                    th.check(&medians)
                }
            })
            .map(|mut c| {
                c.threshold = format!("{} (median of {count} runs)", c.threshold);
                c
            })
            .collect()
    };
    // Latecomers of every run: one that stood by in run 1 may fill a
    // lost agent's place in run 2, and the reader needs both facts.
    let late_agents = reports
        .iter()
        .flat_map(|r| r.late_agents.iter().cloned())
        .collect();
    let mut main = reports
        .into_iter()
        .nth(representative)
        .expect("the representative index comes from the runs");
    main.verdicts = verdicts;
    main.partial = partial;
    main.thresholds = checked;
    main.late_agents = late_agents;
    main.repeats = Some(Repeats {
        count,
        representative,
        runs,
        median: Headline::from_map(med),
        min: Headline::from_map(lo),
        max: Headline::from_map(hi),
    });
    (main, representative)
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
        for (i, figure) in HEADLINE.iter().enumerate() {
            set(&mut m, &figure.key(), i as f64 + 0.5);
        }
        let h = Headline::from_map(m.clone());
        assert_eq!(serde_json::to_value(&h).unwrap(), Value::Object(m.clone()));
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            serde_json::to_string(&Value::Object(m)).unwrap()
        );
        for (i, figure) in HEADLINE.iter().enumerate() {
            assert_eq!(h.get(&figure.key()), Some(i as f64 + 0.5), "{figure:?}");
        }
        // Absent figures stay absent.
        let mut partial = Map::new();
        set(&mut partial, "latency_ms.p99", 3.0);
        let h = Headline::from_map(partial.clone());
        assert_eq!(h.intended, None);
        assert_eq!(serde_json::to_value(&h).unwrap(), Value::Object(partial));
    }

    /// The table's columns are headline figures, in the unit the registry
    /// gives them.
    #[test]
    fn columns_are_headline_figures_in_their_unit() {
        for (title, figure, unit) in COLUMNS {
            assert!(HEADLINE.contains(&figure), "{title}");
            let expected = match figure.unit() {
                FigureUnit::Count => Unit::Count,
                FigureUnit::Rate => Unit::PerSecond,
                FigureUnit::Ms => Unit::Millis,
                FigureUnit::Percent => panic!("{title}: no percent column"),
            };
            assert_eq!(unit, expected, "{title}");
        }
    }
}
