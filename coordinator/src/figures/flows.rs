//! Where a threshold's figures are read ([`Scope`]: the run, a scenario,
//! a flow scenario's flows, a request of a mix, a step of a flow) and the
//! figures of flows and steps that `compare` shows ([`FlowFigure`],
//! [`StepFigure`]).
//!
//! A flow scenario's own totals count flows, but its `failures` key is
//! its failed flows (checks and captures fail a flow with a 2xx answer),
//! which the outcome maps [`Figure::of`] counts from cannot tell; and
//! checks are counted per step. A scope reads both where they are, so
//! `purchase.flow.failed<1%` and `checks>99%` mean what the report shows.

use super::{Figure, Quantile, Source, Unit};
use crate::report_model::{RequestReport, Scenario, StepReport, Totals};
use crate::thresholds::request_scopes;

/// What a threshold scoped to a name (or to the run) reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// The run's totals; its checks are every step's of every scenario.
    Run {
        totals: &'a Totals,
        scenarios: &'a [Scenario],
    },
    /// A scenario's totals (`S`, and `S.flow` for a flow scenario).
    Scenario(&'a Scenario),
    /// A request of a scenario's mix (`S.R`).
    Request(&'a RequestReport),
    /// A step of a flow scenario (`S.STEP`): its request's figures and its
    /// checks.
    Step(&'a StepReport),
}

/// The name of the scope of a flow scenario's flows, after `S.`.
pub(crate) const FLOW_SCOPE: &str = "flow";

impl<'a> Scope<'a> {
    /// The scope `name` names (`None`: the run), resolved as the plan
    /// validator does (`plan::names::threshold_scope`): a scenario of that
    /// very name first, then `S.flow` for flow scenario `S`, then `S.R`
    /// for request or step `R` of `S`, at every dot (names hold dots).
    pub(crate) fn find(
        totals: &'a Totals,
        scenarios: &'a [Scenario],
        name: Option<&str>,
    ) -> Option<Scope<'a>> {
        let Some(name) = name else {
            return Some(Scope::Run { totals, scenarios });
        };
        if let Some(s) = scenarios.iter().find(|s| s.name == name) {
            return Some(Scope::Scenario(s));
        }
        if let Some(s) = name
            .strip_suffix(FLOW_SCOPE)
            .and_then(|n| n.strip_suffix('.'))
            .and_then(|n| scenarios.iter().find(|s| s.name == n))
            .filter(|s| s.flows.is_some() || !s.steps.is_empty())
        {
            return Some(Scope::Scenario(s));
        }
        request_scopes(name).find_map(|(scenario, request)| {
            let s = scenarios.iter().find(|s| s.name == scenario)?;
            if let Some(q) = s.requests.iter().find(|q| q.name == request) {
                return Some(Scope::Request(q));
            }
            s.steps
                .iter()
                .find(|st| st.request.name == request)
                .map(Scope::Step)
        })
    }

    /// Checks held and judged in this scope; `None` when it has no check
    /// at all, so a threshold on checks fails there as one on any figure
    /// the scope lacks.
    fn checks(&self) -> Option<(u64, u64)> {
        let steps: Vec<&StepReport> = match self {
            Scope::Run { scenarios, .. } => scenarios.iter().flat_map(|s| &s.steps).collect(),
            Scope::Scenario(s) => s.steps.iter().collect(),
            Scope::Request(_) => Vec::new(),
            Scope::Step(st) => vec![st],
        };
        let checks: Vec<_> = steps.iter().flat_map(|st| &st.checks).collect();
        if checks.is_empty() {
            return None;
        }
        let passed = checks.iter().map(|c| c.passed).sum::<u64>();
        let failed = checks.iter().map(|c| c.failed).sum::<u64>();
        Some((passed, passed + failed))
    }
}

impl Source for Scope<'_> {
    fn get(&self, figure: &Figure) -> Option<f64> {
        match (self, figure) {
            (_, Figure::ChecksPassed) => self.checks().map(|(passed, _)| passed as f64),
            (_, Figure::Checks) => self.checks().map(|(_, judged)| judged as f64),
            // The report's `failures` of a run with flows add up its
            // scenarios', failed flows included.
            (Scope::Run { totals, scenarios }, Figure::Failures)
                if scenarios.iter().any(|s| s.flows.is_some()) =>
            {
                Some(totals.failures as f64)
            }
            (Scope::Run { totals, .. }, f) => f.of(totals),
            (Scope::Scenario(s), Figure::Failures) if s.flows.is_some() => {
                s.flows.as_ref().map(|f| f.failed as f64)
            }
            (Scope::Scenario(s), f) => f.of(&s.totals),
            (Scope::Request(q), f) => f.of_request(q),
            (Scope::Step(st), f) => f.of_request(&st.request),
        }
    }
}

/// A figure of a flow scenario's flows (`scenarios[].flows`), as
/// `compare` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowFigure {
    Started,
    Completed,
    Failed,
    /// Failed flows as a share of the flows that ended: what
    /// `S.flow.failed` reads as a percentage.
    FailedShare,
    Latency(Quantile),
    Active(Quantile),
    /// Checks held as a share of checks judged, over all its steps.
    ChecksShare,
}

impl FlowFigure {
    pub(crate) const ALL: [FlowFigure; 9] = [
        FlowFigure::Started,
        FlowFigure::Completed,
        FlowFigure::Failed,
        FlowFigure::FailedShare,
        FlowFigure::Latency(Quantile::P50),
        FlowFigure::Latency(Quantile::P95),
        FlowFigure::Latency(Quantile::P99),
        FlowFigure::Active(Quantile::P95),
        FlowFigure::ChecksShare,
    ];

    /// Its row in `compare`, after `SCENARIO `.
    pub(crate) fn label(self) -> String {
        match self {
            FlowFigure::Started => "flows started".into(),
            FlowFigure::Completed => "flows completed".into(),
            FlowFigure::Failed => "flows failed".into(),
            FlowFigure::FailedShare => "flows failed %".into(),
            FlowFigure::Latency(q) => format!("flow latency_ms {}", q.name()),
            FlowFigure::Active(q) => format!("flow active_ms {}", q.name()),
            FlowFigure::ChecksShare => "checks passed %".into(),
        }
    }

    pub(crate) fn unit(self) -> Unit {
        match self {
            FlowFigure::Latency(_) | FlowFigure::Active(_) => Unit::Ms,
            FlowFigure::FailedShare | FlowFigure::ChecksShare => Unit::Percent,
            _ => Unit::Count,
        }
    }

    /// This figure of a scenario; `None` for one without flows, and for a
    /// latency or share of nothing.
    pub(crate) fn of(self, s: &Scenario) -> Option<f64> {
        let flows = s.flows.as_ref()?;
        let scope = Scope::Scenario(s);
        match self {
            FlowFigure::Started => Some(flows.started as f64),
            FlowFigure::Completed => Some(flows.completed as f64),
            FlowFigure::Failed => Some(flows.failed as f64),
            FlowFigure::FailedShare => Figure::Failures.share(&scope),
            FlowFigure::Latency(q) => flows.latency_ms.as_ref().map(|p| q.of(p)),
            FlowFigure::Active(q) => flows.active_ms.as_ref().map(|p| q.of(p)),
            FlowFigure::ChecksShare => Figure::ChecksPassed.share(&scope),
        }
    }
}

/// A figure of one step of a flow (`scenarios[].steps[]`), as `compare`
/// shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepFigure {
    Reached,
    Failures,
    FailureShare,
    Latency(Quantile),
}

impl StepFigure {
    pub(crate) const ALL: [StepFigure; 4] = [
        StepFigure::Reached,
        StepFigure::Failures,
        StepFigure::FailureShare,
        StepFigure::Latency(Quantile::P95),
    ];

    /// Its row in `compare`, after `SCENARIO.STEP `.
    pub(crate) fn label(self) -> String {
        match self {
            StepFigure::Reached => "reached".into(),
            StepFigure::Failures => Figure::Failures.label(),
            StepFigure::FailureShare => Figure::Failures.share_label(),
            StepFigure::Latency(q) => Figure::Latency(q).label(),
        }
    }

    pub(crate) fn unit(self) -> Unit {
        match self {
            StepFigure::Latency(_) => Unit::Ms,
            StepFigure::FailureShare => Unit::Percent,
            _ => Unit::Count,
        }
    }

    /// This figure of a step, read as a threshold on `S.STEP` reads it.
    pub(crate) fn of(self, st: &StepReport) -> Option<f64> {
        let scope = Scope::Step(st);
        match self {
            StepFigure::Reached => Some(st.reached as f64),
            StepFigure::Failures => scope.get(&Figure::Failures),
            StepFigure::FailureShare => Figure::Failures.share(&scope),
            StepFigure::Latency(q) => scope.get(&Figure::Latency(q)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::report_model::Report;
    use crate::thresholds::Threshold;

    fn percentiles(p95: f64) -> Value {
        json!({"p50": p95 / 2.0, "p90": p95, "p95": p95, "p99": p95, "p999": p95,
               "max": p95, "mean": p95 / 2.0, "count": 100})
    }

    fn step(name: &str, failures: u64, p95: f64, checks: &[(u64, u64)]) -> Value {
        json!({
            "name": name, "completed": 100, "completed_in_window": 100,
            "completed_ok_in_window": 100 - failures, "failures": failures,
            "throughput_rps": 50.0, "throughput_ok_rps": 50.0,
            "status": {"200": 100 - failures, "500": failures}, "errors": {},
            "latency_ms": percentiles(p95),
            "reached": 100, "sent": 100, "unsent": {}, "not_reached": {},
            "checks": checks.iter().map(|(passed, failed)|
                json!({"check": "status == 200", "passed": passed, "failed": failed}))
                .collect::<Vec<_>>(),
            "service_time_ms": null, "start_lag_ms": null,
        })
    }

    /// The fixture report with a second scenario, `purchase`: 100 flows
    /// ended, 25 of them failed by a check on a 200 answer (so the outcome
    /// maps show no failure), through steps `login` (no check), `cart` (two
    /// checks, all held) and `pay` (one check, 75 held of 100).
    fn report() -> Report {
        let mut r: Value = serde_json::from_str(include_str!("../../tests/fixtures/report.json"))
            .expect("the fixture is a report");
        let mut s = r["scenarios"][0].clone();
        s["name"] = json!("purchase");
        s["completed"] = json!(100);
        s["status"] = json!({"200": 100});
        s["errors"] = json!({});
        s["failures"] = json!(25);
        s["latency_ms"] = percentiles(900.0);
        s["flows"] = json!({
            "intended": 100, "started": 100,
            "unsent": {"total": 0, "concurrency_limit": 0, "late": 0},
            "completed": 75, "failed": 25, "failed_by_reason": {"check": 25},
            "in_flight_at_end": 0, "throughput_fps": 25.0,
            "latency_ms": percentiles(900.0), "active_ms": percentiles(700.0),
        });
        s["steps"] = json!([
            step("login", 0, 10.0, &[]),
            step("cart", 0, 20.0, &[(100, 0), (100, 0)]),
            step("pay", 5, 40.0, &[(75, 25)]),
        ]);
        r["scenarios"].as_array_mut().expect("scenarios").push(s);
        r["totals"]["failures"] = json!(25);
        serde_json::from_value(r).expect("a report")
    }

    fn actual(r: &Report, threshold: &str) -> Option<f64> {
        let th: Threshold = threshold.parse().expect("parses");
        let scope = Scope::find(&r.totals, &r.scenarios, th.scenario())?;
        th.check(&scope).actual
    }

    #[test]
    fn a_flow_scope_reads_its_flows_and_a_step_scope_its_step() {
        let r = report();
        assert_eq!(actual(&r, "purchase.flow.p95<15s"), Some(900.0));
        assert_eq!(actual(&r, "purchase.flow.failed<1%"), Some(25.0));
        assert_eq!(actual(&r, "purchase.flow.failed<=25"), Some(25.0));
        // The scenario itself is its flows.
        assert_eq!(actual(&r, "purchase.failures<1%"), Some(25.0));
        assert_eq!(actual(&r, "purchase.pay.p95<500ms"), Some(40.0));
        assert_eq!(actual(&r, "purchase.pay.failures<10%"), Some(5.0));
        assert_eq!(actual(&r, "purchase.nope.p95<1s"), None);
        assert_eq!(actual(&r, "default.flow.p95<1s"), None);
    }

    #[test]
    fn checks_are_the_share_held_over_every_step_in_scope() {
        let r = report();
        let share = |t: &str| actual(&r, t).map(|a| (a * 1000.0).round() / 1000.0);
        // (100 + 100 + 75) of 300.
        assert_eq!(share("checks>99%"), Some(91.667));
        assert_eq!(share("purchase.checks>99%"), Some(91.667));
        assert_eq!(share("purchase.flow.checks>99%"), Some(91.667));
        assert_eq!(share("purchase.pay.checks>99%"), Some(75.0));
        assert_eq!(actual(&r, "checks>=1"), Some(275.0));
        // No check there: no figure, so the threshold fails.
        assert_eq!(actual(&r, "purchase.login.checks>99%"), None);
        assert_eq!(actual(&r, "default.checks>99%"), None);
        let th: Threshold = "default.checks>=0%".parse().expect("parses");
        let scope = Scope::find(&r.totals, &r.scenarios, th.scenario()).expect("a scope");
        assert!(!th.check(&scope).passed);
    }

    #[test]
    fn a_run_with_flows_fails_by_its_failed_flows() {
        let r = report();
        assert_eq!(actual(&r, "failures<=25"), Some(25.0));
        assert_eq!(actual(&r, "failed<=25"), Some(25.0));
    }

    /// `compare`'s flow and step rows read what thresholds on `S.flow` and
    /// `S.STEP` read.
    #[test]
    fn compare_rows_and_thresholds_agree() {
        let r = report();
        let s = &r.scenarios[1];
        for (figure, threshold) in [
            (FlowFigure::FailedShare, "purchase.flow.failed<1%"),
            (FlowFigure::Failed, "purchase.flow.failed<1"),
            (FlowFigure::Latency(Quantile::P95), "purchase.flow.p95<1s"),
            (FlowFigure::Latency(Quantile::P50), "purchase.flow.p50<1s"),
            (FlowFigure::ChecksShare, "purchase.checks>1%"),
        ] {
            assert_eq!(figure.of(s), actual(&r, threshold), "{threshold}");
        }
        let pay = &s.steps[2];
        for (figure, threshold) in [
            (StepFigure::Latency(Quantile::P95), "purchase.pay.p95<1s"),
            (StepFigure::Failures, "purchase.pay.failures<1"),
            (StepFigure::FailureShare, "purchase.pay.failures<1%"),
        ] {
            assert_eq!(figure.of(pay), actual(&r, threshold), "{threshold}");
        }
        assert_eq!(StepFigure::Reached.of(pay), Some(100.0));
        assert_eq!(FlowFigure::Active(Quantile::P95).of(s), Some(700.0));
        assert_eq!(FlowFigure::Started.of(&r.scenarios[0]), None);
    }
}
