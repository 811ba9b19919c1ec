//! Pass/fail rules checked against a report (`p99<500ms`, `unsent==0`,
//! `failures<1%`, `incomplete==0`, `ok_rps>=900`, `grpc.unavailable<1%`,
//! and for flows `purchase.flow.failed<1%`, `checks>99%`).
//!
//! A threshold names a figure of the registry ([`crate::figures`]) and is
//! checked against any [`Source`] of figures, so a run's totals, the
//! medians of repeat runs and anything else that can name figures are
//! checked by the same rules.

use std::fmt;
use std::str::FromStr;

use loadfleet_proto::vocab::GrpcStatus;

use crate::figures::{Figure, Source, Unit, THRESHOLD_NAMES};
use crate::report_model::Checked;
use crate::suggest::{closest, did_you_mean};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

/// A parsed `--threshold` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    text: String,
    /// Checked against this scenario only (`checkout.p99<300ms`); else totals.
    scenario: Option<String>,
    figure: Figure,
    op: Op,
    /// In the figure's unit (milliseconds for latencies) or in percent.
    value: f64,
    /// The value is a percentage of what the figure is a share of
    /// ([`Figure::share_of`]).
    percent: bool,
}

impl FromStr for Threshold {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let pos = text
            .find(['<', '>', '='])
            .ok_or_else(|| format!("{s:?}: expected METRIC OP VALUE, e.g. 'p99<500ms'"))?;
        let (name, rest) = text.split_at(pos);
        // `grpc.STATUS` is one metric name with a dot in it: the scenario,
        // if any, is what stands before it.
        let (scenario, name) = match grpc_metric(name) {
            Some((sc, metric)) => (sc.map(str::to_string), metric),
            None => {
                let (sc, metric) = Figure::split_scope(name);
                (sc.map(str::to_string), metric)
            }
        };
        let (op, value) = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(tok, op)| rest.strip_prefix(tok).map(|v| (*op, v)))
        .ok_or_else(|| format!("{s:?}: the operator must be one of < <= > >= =="))?;
        let figure = match Figure::by_threshold_name(name) {
            Some(figure) => figure,
            None => match name.strip_prefix("grpc.") {
                Some(status) => Figure::Grpc(grpc_status(status).ok_or_else(|| {
                    format!(
                        "{s:?}: {status:?} is not a gRPC status; use one of {}",
                        GrpcStatus::ALL
                            .iter()
                            .map(|g| g.threshold_name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?),
                None => {
                    let (name, hint) = misspelt_metric(scenario.as_deref(), name);
                    return Err(format!(
                        "{s:?}: unknown metric {name:?}; use p50, p90, p95, p99, p99.9 (p999), max, mean, unsent, errors, failures (failed), incomplete, rps, ok_rps, checks or grpc.STATUS (e.g. grpc.unavailable){hint}"
                    ));
                }
            },
        };
        // (number, is a percentage, milliseconds per unit when a time unit)
        let (number, percent, unit) = if let Some(v) = value.strip_suffix('%') {
            (v, true, None)
        } else if let Some(v) = value.strip_suffix("ms") {
            (v, false, Some(1.0))
        } else if let Some(v) = value.strip_suffix("us") {
            (v, false, Some(0.001))
        } else if let Some(v) = value.strip_suffix('s') {
            (v, false, Some(1000.0))
        } else {
            (value, false, None)
        };
        let scale = unit.unwrap_or(1.0);
        let value: f64 = number
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("{s:?}: {value:?} is not a number >= 0 (e.g. 500ms, 1%, 0)"))?;
        if percent && figure.share_of().is_none() {
            return Err(format!(
                "{s:?}: a percentage only applies to unsent, errors, failures, incomplete, checks and grpc.STATUS"
            ));
        }
        if figure.unit() != Unit::Ms && unit.is_some() {
            return Err(format!("{s:?}: time units only apply to latency metrics"));
        }
        Ok(Self {
            text,
            scenario,
            figure,
            op,
            value: value * scale,
            percent,
        })
    }
}

/// An unknown metric as the user most likely meant it, and the closest
/// name to it. A misspelt name with a dot (`p9.9`) was split at that dot
/// into a scope and a metric (`9`): it is judged whole when it is close to
/// a dotted name.
fn misspelt_metric(scope: Option<&str>, metric: &str) -> (String, String) {
    let names = || THRESHOLD_NAMES.iter().map(|(n, _)| *n);
    if let Some(last) = scope.and_then(|s| s.rsplit('.').next()) {
        let whole = format!("{last}.{metric}");
        if let Some(meant) = closest(&whole, names().filter(|n| n.contains('.'))) {
            return (whole, format!("; did you mean `{meant}`?"));
        }
    }
    (metric.to_string(), did_you_mean(metric, names()))
}

/// The status a threshold names in lower case (`unavailable`), or in the
/// vocabulary's own spelling.
fn grpc_status(name: &str) -> Option<GrpcStatus> {
    GrpcStatus::ALL
        .iter()
        .copied()
        .find(|g| g.threshold_name() == name.to_ascii_lowercase())
}

/// Splits `[SCENARIO.]grpc.STATUS` into the scenario and `grpc.STATUS`;
/// `None` when the name is not about a gRPC status (a scenario named
/// `grpc` with a plain metric, `grpc.p99`, stays a scenario's metric).
fn grpc_metric(name: &str) -> Option<(Option<&str>, &str)> {
    let (scenario, metric) = if let Some(status) = name.strip_prefix("grpc.") {
        (None, status)
    } else {
        let at = name.rfind(".grpc.")?;
        (Some(&name[..at]), &name[at + ".grpc.".len()..])
    };
    // An unknown word after `grpc.` is still meant as a status (and is
    // refused as one), unless it is one of the plain metrics.
    let plain = THRESHOLD_NAMES.iter().any(|(n, _)| *n == metric);
    if grpc_status(metric).is_none() && plain {
        return None;
    }
    let metric_at = name.len() - metric.len() - "grpc.".len();
    Some((scenario, &name[metric_at..]))
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Reads a gRPC status a source never saw as seen 0 times, so that
/// `grpc.unavailable==0` holds for a run without any.
struct UnseenGrpcIsZero<'a, S: ?Sized>(&'a S);

impl<S: Source + ?Sized> Source for UnseenGrpcIsZero<'_, S> {
    fn get(&self, figure: &Figure) -> Option<f64> {
        self.0
            .get(figure)
            .or_else(|| matches!(figure, Figure::Grpc(_)).then_some(0.0))
    }
}

/// The ways a threshold's scope (`shop.items` of `shop.items.p99`) reads
/// as `(SCENARIO, REQUEST)`, at each dot: names may hold dots themselves,
/// so every split is tried, the plan validator and the report alike.
pub fn request_scopes(scope: &str) -> impl Iterator<Item = (&str, &str)> {
    scope
        .match_indices('.')
        .map(move |(at, _)| (&scope[..at], &scope[at + 1..]))
}

impl Threshold {
    /// The same rule, whatever its spelling (`p99.9<1s`, `p999 < 1000ms`).
    pub fn same_rule(&self, other: &Threshold) -> bool {
        (
            &self.scenario,
            &self.figure,
            self.op,
            self.value,
            self.percent,
        ) == (
            &other.scenario,
            &other.figure,
            other.op,
            other.value,
            other.percent,
        )
    }

    /// The scenario this threshold is about, if not the totals.
    pub fn scenario(&self) -> Option<&str> {
        self.scenario.as_deref()
    }

    /// The figure this threshold is about.
    pub fn figure(&self) -> &Figure {
        &self.figure
    }

    /// The limit the figure is held to, in [`Threshold::unit`] (a latency
    /// in milliseconds): where a chart draws the rule.
    pub fn limit(&self) -> f64 {
        self.value
    }

    /// The unit its figure is in (see [`Checked::unit`]).
    pub fn unit(&self) -> &'static str {
        if self.percent {
            Unit::Percent.suffix()
        } else {
            self.figure.unit().suffix()
        }
    }

    /// The figure this threshold reads from `src`, in its unit.
    pub fn actual<S: Source + ?Sized>(&self, src: &S) -> Option<f64> {
        let src = UnseenGrpcIsZero(src);
        if self.percent {
            self.figure.share(&src)
        } else {
            src.get(&self.figure)
        }
    }

    /// Checks `src`. A figure the source lacks fails: nothing measured
    /// (no latency, a percentage of nothing) shows nothing good enough.
    pub fn check<S: Source + ?Sized>(&self, src: &S) -> Checked {
        let actual = self.actual(src);
        let passed = actual.is_some_and(|a| match self.op {
            Op::Lt => a < self.value,
            Op::Le => a <= self.value,
            Op::Gt => a > self.value,
            Op::Ge => a >= self.value,
            Op::Eq => (a - self.value).abs() < 1e-9,
        });
        Checked {
            threshold: self.text.clone(),
            actual,
            unit: self.unit().to_string(),
            passed,
        }
    }
}

/// Whether two lists of rules (`search`'s SLOs) say the same, however
/// spelt: `p99.9<1s` is `p999<1000ms`. Rules that do not parse are
/// compared as written.
pub fn same_rules(a: &[String], b: &[String]) -> bool {
    let parse = |rules: &[String]| -> Option<Vec<Threshold>> {
        rules.iter().map(|r| r.parse().ok()).collect()
    };
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => {
            let within = |x: &[Threshold], y: &[Threshold]| {
                x.iter().all(|t| y.iter().any(|u| t.same_rule(u)))
            };
            within(&x, &y) && within(&y, &x)
        }
        _ => a == b,
    }
}

/// A share written as a percentage, `5%` or `5`, as a fraction 0..=1: the
/// one reading of a percentage, for flags and plan keys alike.
pub fn percent(s: &str) -> Result<f64, String> {
    let n: f64 = s
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage; write e.g. 5%"))?;
    if !(0.0..=100.0).contains(&n) {
        return Err(format!("{s:?} is out of range; use 0% to 100%"));
    }
    Ok(n / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::Quantile;

    /// Totals with every kind of outcome: 5 transport errors, 185 answers
    /// of 503 and 10 UNAVAILABLE make 200 failures.
    fn figures(check: &Threshold) -> Checked {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../tests/fixtures/report.json"))
                .expect("the fixture is a report");
        let t = &mut v["totals"];
        for (q, ms) in [
            ("p50", 1.0),
            ("p90", 1.0),
            ("p95", 1.0),
            ("p99", 420.0),
            ("p999", 1.0),
            ("max", 1.0),
            ("mean", 1.0),
        ] {
            t["latency_ms"][q] = serde_json::json!(ms);
        }
        for (key, n) in [
            ("intended", 1000),
            ("sent", 990),
            ("completed", 980),
            ("in_flight_at_end", 10),
        ] {
            t[key] = serde_json::json!(n);
        }
        t["unsent"]["total"] = serde_json::json!(10);
        t["throughput_rps"] = serde_json::json!(99.0);
        t["throughput_ok_rps"] = serde_json::json!(78.0);
        t["status"] = serde_json::json!({"503": 185});
        t["errors"] = serde_json::json!({"timeout": 5});
        t["grpc"] = serde_json::json!({
            "calls": 980,
            "status": {"OK": 970, "UNAVAILABLE": 10},
            "rate": {}
        });
        let totals: crate::report_model::Totals =
            serde_json::from_value(t.clone()).expect("totals");
        check.check(&totals)
    }

    #[test]
    fn thresholds_parse_and_check() {
        for (text, pass) in [
            ("p99<500ms", true),
            ("p99 < 0.4s", false),
            ("unsent==0", false),
            ("unsent<=1%", true),
            ("errors<1%", true),
            ("errors==5", true),
            ("failures<1%", false),
            ("failures<=200", true),
            ("incomplete==0", false),
            ("incomplete<1.1%", true),
            ("rps>=100", false),
            ("ok_rps>=78", true),
            ("throughput_ok>80", false),
            ("grpc.ok>98%", true),
            ("grpc.ok>99%", false),
            ("grpc.unavailable<1%", false),
            ("grpc.unavailable<=10", true),
            ("grpc.resource_exhausted==0", true),
            ("grpc.DEADLINE_EXCEEDED==0", true),
        ] {
            let t: Threshold = text.parse().unwrap();
            assert_eq!(figures(&t).passed, pass, "{text}");
        }
    }

    /// What a threshold was checked against says its unit, so a report
    /// can show "19.7%", never a bare "19.667".
    #[test]
    fn actual_figures_carry_their_unit() {
        let checked = |t: &str| figures(&t.parse().unwrap());
        let c = checked("failures<1%");
        assert_eq!(
            (c.unit.as_str(), c.actual.map(|a| a.round())),
            ("%", Some(20.0))
        );
        assert_eq!(checked("p99<1s").unit, "ms");
        assert_eq!(checked("ok_rps>1").unit, "req/s");
        assert_eq!(checked("incomplete==0").unit, "");
    }

    #[test]
    fn thresholds_may_name_a_scenario() {
        let t: Threshold = "checkout.p99<300ms".parse().unwrap();
        assert_eq!(t.scenario(), Some("checkout"));
        assert_eq!("p99<300ms".parse::<Threshold>().unwrap().scenario(), None);
        let t: Threshold = "grpc.unavailable<1%".parse().unwrap();
        assert_eq!(
            (t.scenario(), t.figure()),
            (None, &Figure::Grpc(GrpcStatus::Unavailable))
        );
        let t: Threshold = "checkout.grpc.ok>99%".parse().unwrap();
        assert_eq!(
            (t.scenario(), t.figure()),
            (Some("checkout"), &Figure::Grpc(GrpcStatus::Ok))
        );
        // Flows, steps and checks.
        for (text, scope, figure) in [
            (
                "purchase.flow.p95<15s",
                Some("purchase.flow"),
                Figure::Latency(Quantile::P95),
            ),
            (
                "purchase.flow.failed<1%",
                Some("purchase.flow"),
                Figure::Failures,
            ),
            (
                "purchase.pay.p95<500ms",
                Some("purchase.pay"),
                Figure::Latency(Quantile::P95),
            ),
            ("checks>99%", None, Figure::ChecksPassed),
            (
                "purchase.checks>99%",
                Some("purchase"),
                Figure::ChecksPassed,
            ),
        ] {
            let t: Threshold = text.parse().unwrap();
            assert_eq!((t.scenario(), t.figure()), (scope, &figure), "{text}");
        }
        // A scenario that happens to be named grpc keeps its plain metrics.
        let t: Threshold = "grpc.p99<1s".parse().unwrap();
        assert_eq!(
            (t.scenario(), t.figure()),
            (Some("grpc"), &Figure::Latency(Quantile::P99))
        );
    }

    /// The text report and the page label the column `p99.9`; its key is
    /// `p999`. Either names it, over the run, a scenario or a request, and
    /// a scope's own dots stay the scope's.
    #[test]
    fn p99_9_is_named_as_the_report_labels_it() {
        let p999 = Figure::Latency(Quantile::P999);
        for (text, scope) in [
            ("p99.9<1s", None),
            ("p999<1s", None),
            ("p99.9 < 1s", None),
            ("checkout.p99.9<1s", Some("checkout")),
            ("checkout.p999<1s", Some("checkout")),
            ("shop.items.p99.9<300ms", Some("shop.items")),
            ("purchase.flow.p99.9<15s", Some("purchase.flow")),
        ] {
            let t: Threshold = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((t.scenario(), t.figure()), (scope, &p999), "{text}");
        }
        // Checked against the same figure as `p999`.
        let (dotted, plain) = (
            figures(&"p99.9<2ms".parse().unwrap()),
            figures(&"p999<2ms".parse().unwrap()),
        );
        assert_eq!(dotted.threshold, "p99.9<2ms");
        assert_eq!(
            (dotted.actual, dotted.passed, dotted.unit),
            (plain.actual, plain.passed, plain.unit)
        );
    }

    /// `search` compares SLOs as rules: spelt apart, the same rule is the
    /// same SLO.
    #[test]
    fn the_same_rule_spelt_apart_is_the_same_slo() {
        let rules = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(same_rules(
            &rules(&["p99.9<1s", "failures<1%"]),
            &rules(&["failures < 1%", "p999<1000ms"])
        ));
        assert!(!same_rules(&rules(&["p99.9<1s"]), &rules(&["p99<1s"])));
        assert!(!same_rules(&rules(&["p99.9<1s"]), &rules(&["p99.9<=1s"])));
        assert!(!same_rules(
            &rules(&["p99<1s"]),
            &rules(&["p99<1s", "unsent==0"])
        ));
        assert!(same_rules(&rules(&["nonsense"]), &rules(&["nonsense"])));
    }

    /// A misspelt metric is answered with the closest name.
    #[test]
    fn a_misspelt_metric_is_offered_the_closest_name() {
        for (text, meant) in [
            ("failurs<1%", "failures"),
            ("checkout.ok_rsp>1", "ok_rps"),
            ("checkout.p9.9<1s", "p99.9"),
        ] {
            let e = text.parse::<Threshold>().unwrap_err();
            assert!(
                e.contains(&format!("did you mean `{meant}`?")),
                "{text}: {e}"
            );
        }
        let e = "zzz<1".parse::<Threshold>().unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn bad_thresholds_say_what_is_wrong() {
        for (text, needle) in [
            ("p98<1ms", "unknown metric"),
            ("p99~1", "METRIC OP VALUE"),
            ("p99<fast", "not a number"),
            ("rps>5%", "percentage"),
            ("unsent<5ms", "time units"),
            ("grpc.unavailible<1%", "not a gRPC status"),
            ("grpc.ok>5ms", "time units"),
            ("checks>5ms", "time units"),
        ] {
            let e = text.parse::<Threshold>().unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
