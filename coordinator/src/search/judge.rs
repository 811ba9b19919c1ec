//! A step's report read as the search needs it: did the SLO hold and did
//! the target keep up with the arrivals, or does the report say nothing
//! about the target at all? The second question comes first. A step the
//! fleet could not offer, or in which no experiment happened, is never a
//! pass or a fail of the target; a step the target fell behind in
//! (`NOT_STEADY`) is a failure whatever its SLO says.

use loadfleet_proto::vocab::{AgentStatus, UnsentReason, VerdictCode, VerdictLevel};

use super::ladder::Judged;
use crate::figures::Unit;
use crate::fleet::RunResult;
use crate::report::format::threshold_actual;
use crate::report::verdicts::steady;
use crate::report_model::{Checked, Report, SteadyVerdict};
use crate::thresholds::Threshold;

/// Unsent reasons that say the target was slow, not the fleet short: an
/// arrival past `--max-lag` behind, or one over the in-flight cap because
/// earlier requests still waited for answers. Any other reason (no
/// connection in time, no agent, still queued at the end) is the fleet's.
const TARGET_SIDE_UNSENT: [UnsentReason; 2] = [UnsentReason::Late, UnsentReason::ConcurrencyLimit];

/// What one run shows before its SLO is read: `Some` when it says nothing
/// about the target's capacity.
pub(super) fn honesty(result: &RunResult, report: &Report, slo: &[Threshold]) -> Option<Judged> {
    if let Some(why) = &result.failure {
        return Some(Judged::Broken(why.clone()));
    }
    if let Some(lost) = report.agents.iter().find(|a| a.status == AgentStatus::Lost) {
        return Some(Judged::Generator(format!(
            "agent {} was lost ({})",
            lost.id,
            lost.lost_reason.as_deref().unwrap_or("no reason given")
        )));
    }
    if result.cut_short {
        return Some(Judged::Broken("the step was stopped before its end".into()));
    }
    let verdict = |code: VerdictCode, error_only: bool| {
        report
            .verdicts
            .iter()
            .find(|v| v.code == code && (!error_only || v.level == VerdictLevel::Error))
    };
    if let Some(v) = verdict(VerdictCode::NoExperiment, false) {
        return Some(Judged::NoExperiment(format!(
            "NO_EXPERIMENT: {}",
            v.message
        )));
    }
    // Saturation at the warning level is high agent CPU alone: no headroom,
    // but the schedule was kept. Lag (the error level) means it was not,
    // unless arrivals met the in-flight cap: then the agents were waiting
    // on answers that did not come back, the target's backlog, which the
    // SLO judges (`unsent==0` makes it a failure of its own).
    let backlog = report.totals.unsent.concurrency_limit > 0;
    let explained = || target_beyond_lag(report, slo);
    if let Some(v) =
        verdict(VerdictCode::GeneratorSaturated, true).filter(|_| !backlog && !explained())
    {
        return Some(Judged::Generator(format!(
            "GENERATOR_SATURATED: {}",
            v.message
        )));
    }
    if let Some(v) = verdict(VerdictCode::GeneratorPool, false) {
        return Some(Judged::Generator(format!("GENERATOR_POOL: {}", v.message)));
    }
    let fleet_side: Vec<String> = report
        .totals
        .unsent
        .other
        .iter()
        .filter(|(reason, n)| {
            **n > 0
                && !TARGET_SIDE_UNSENT
                    .iter()
                    .any(|r| r.as_str() == reason.as_str())
        })
        .map(|(reason, n)| format!("{n} unsent {reason}"))
        .collect();
    if !fleet_side.is_empty() {
        return Some(Judged::Generator(format!(
            "arrivals the fleet did not send: {}",
            fleet_side.join(", ")
        )));
    }
    None
}

/// Whether the step broke a latency rule by more than the agents' worst
/// send lag: latency runs from the intended send time, so a late agent
/// adds at most its lag to any request, and a p99 of 540 ms against a
/// 200 ms rule with 35 ms of lag is the target's, lag or not.
fn target_beyond_lag(report: &Report, slo: &[Threshold]) -> bool {
    let lag = report
        .agents
        .iter()
        .filter_map(|a| a.lag_ms.as_ref().map(|l| l.max))
        .fold(0.0, f64::max);
    report.thresholds.iter().filter(|c| !c.passed).any(|c| {
        slo.iter().any(|t| {
            t.to_string() == c.threshold
                && t.figure().unit() == Unit::Ms
                && t.unit() == Unit::Ms.suffix()
                && c.actual.is_some_and(|a| a - lag > t.limit())
        })
    })
}

/// Whether a generator limit may pass on its own: a load machine held up
/// by something else (lag with its CPU free) can be over by the next run;
/// a pool too small or an agent lost cannot.
pub(super) fn transient(why: &str) -> bool {
    why.starts_with(SATURATED)
}

/// How a saturation's reason starts.
const SATURATED: &str = "GENERATOR_SATURATED";

/// The SLO's rules as the report checked them: a pass when all held, else
/// a failure naming each broken rule and its figure.
fn slo(checked: &[Checked]) -> Judged {
    let broken: Vec<String> = checked.iter().filter(|c| !c.passed).map(broken).collect();
    if broken.is_empty() {
        Judged::Pass
    } else {
        Judged::Fail(broken.join(", "))
    }
}

/// A step passes only when its SLO held and the target kept up: a
/// failure names the broken rules, then `NOT_STEADY` and its figures.
pub(super) fn step(checked: &[Checked], reports: &[Report]) -> Judged {
    match (slo(checked), not_steady(reports)) {
        (judged, None) => judged,
        (Judged::Fail(why), Some(behind)) => Judged::Fail(format!("{why}, {behind}")),
        (_, Some(behind)) => Judged::Fail(behind),
    }
}

/// `NOT_STEADY: completions 400/s of 413/s offered; …` when the target
/// fell behind in more than half of the step's runs (the medians decide
/// the SLO, and this alike), with the figures of the first such run.
pub(super) fn not_steady(reports: &[Report]) -> Option<String> {
    let behind: Vec<String> = reports.iter().filter_map(behind).collect();
    (behind.len() * 2 > reports.len()).then(|| format!("NOT_STEADY: {}", behind[0]))
}

/// The figures of every scenario of `r` that was not steady, named when
/// the run has several.
fn behind(r: &Report) -> Option<String> {
    let named = r.scenarios.len() > 1;
    let parts: Vec<String> = r
        .scenarios
        .iter()
        .filter_map(|s| {
            let st = s.steadiness.as_ref()?;
            (st.verdict == SteadyVerdict::NotSteady).then(|| {
                let figures = steady::figures(st);
                if named {
                    format!("scenario {}: {figures}", s.name)
                } else {
                    figures
                }
            })
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `p99 412.0ms (SLO p99<300ms)`.
pub(super) fn broken(c: &Checked) -> String {
    let name = c
        .threshold
        .split(['<', '>', '='])
        .next()
        .unwrap_or(&c.threshold);
    format!("{name} {} (SLO {})", threshold_actual(c), c.threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(threshold: &str, actual: f64, unit: &str, passed: bool) -> Checked {
        Checked {
            threshold: threshold.into(),
            actual: Some(actual),
            unit: unit.into(),
            passed,
        }
    }

    #[test]
    fn a_broken_rule_names_its_figure_and_the_slo() {
        let c = [
            checked("p99<300ms", 412.0, "ms", false),
            checked("failures<1%", 0.5, "%", true),
        ];
        assert_eq!(slo(&c), Judged::Fail("p99 412.0ms (SLO p99<300ms)".into()));
        assert_eq!(slo(&c[1..]), Judged::Pass);
    }

    /// A real run's report, its scenario judged `verdict`.
    fn report(verdict: SteadyVerdict) -> Report {
        let mut r: Report = serde_json::from_str(include_str!("../../tests/fixtures/report.json"))
            .expect("the fixture is a report");
        r.scenarios[0].steadiness = Some(crate::report_model::Steadiness {
            verdict,
            from_s: 1.0,
            to_s: 4.0,
            seconds: 3,
            offered_rps: 413.0,
            sent_rps: 413.0,
            completed_rps: 400.2,
            unsent: 0,
            behind: 38,
            behind_seconds: 3,
            in_flight_start: 20,
            in_flight_end: 150,
            p50: None,
            p99: None,
        });
        r
    }

    /// A step passes only when the SLO held and the target kept up in
    /// more than half of its runs; the failure names the broken rules,
    /// then NOT_STEADY and its figures.
    #[test]
    fn an_unsteady_step_fails_whatever_its_slo() {
        let (steady, behind) = (
            report(SteadyVerdict::Steady),
            report(SteadyVerdict::NotSteady),
        );
        let held = [checked("p99<300ms", 120.0, "ms", true)];
        let broke = [checked("p99<300ms", 412.0, "ms", false)];
        let figures =
            "NOT_STEADY: completions 400/s of 413/s offered; in flight grew from 20 to 150";
        assert_eq!(step(&held, std::slice::from_ref(&steady)), Judged::Pass);
        assert_eq!(
            step(&held, std::slice::from_ref(&behind)),
            Judged::Fail(figures.into())
        );
        assert_eq!(
            step(&broke, std::slice::from_ref(&behind)),
            Judged::Fail(format!("p99 412.0ms (SLO p99<300ms), {figures}"))
        );
        // Repeats: the majority decides, as the medians do for the SLO.
        let two_of_three = [behind.clone(), steady.clone(), behind.clone()];
        assert_eq!(not_steady(&two_of_three).as_deref(), Some(figures));
        let one_of_three = [behind.clone(), steady.clone(), steady.clone()];
        assert_eq!(not_steady(&one_of_three), None);
        assert_eq!(not_steady(&[behind.clone(), steady]), None);
        // Too short to judge is not unsteady.
        assert_eq!(not_steady(&[report(SteadyVerdict::TooShort)]), None);
    }

    #[test]
    fn only_a_held_up_machine_is_worth_another_try() {
        assert!(transient("GENERATOR_SATURATED: agent a set the pace"));
        assert!(!transient(
            "GENERATOR_POOL: the agents' connections were all busy"
        ));
        assert!(!transient("agent a was lost (silent)"));
    }
}
