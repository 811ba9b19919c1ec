//! `search.json` and the text summary. The schema, key by key, is
//! documented in `docs/search.md`; a change here is a change to it.

use std::collections::BTreeMap;
use std::io::Write;

use loadfleet_proto::vocab::VerdictLevel;
use serde::{Deserialize, Serialize};

use super::ladder::{Outcome, Purpose, Undecided};
use crate::cli::Vary;
use crate::report::format::{ms, num};
use crate::report_model::{Checked, Percentiles, Report, Warmup};

pub(crate) const SCHEMA: &str = "loadfleet.search/v1";

/// The whole search, as written to `search.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SearchRecord {
    pub schema: String,
    pub target: String,
    /// The SLO's rules, as written.
    pub slo: Vec<String>,
    pub settings: SettingsRecord,
    pub result: ResultRecord,
    /// Verdicts about the search as a whole (`NOT_RECOVERED`).
    pub verdicts: Vec<SearchVerdict>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SettingsRecord {
    /// `rate` (steps, `from`, `to`, capacities in req/s) or `clients`
    /// (in clients).
    pub varies: Vary,
    pub from: f64,
    pub to: f64,
    /// A fraction: 0.05 is 5%.
    pub resolution: f64,
    pub step_s: f64,
    pub warmup_s: f64,
    pub drain_s: f64,
    pub repeat: u32,
    pub agents: usize,
}

/// How the search ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResultRecord {
    /// `capacity`, `from_fails` or `undecided`.
    pub status: String,
    /// The highest rate that passed; with `undecided`, a lower bound.
    pub capacity: Option<f64>,
    /// True when `capacity` is only a lower bound (undecided, or `to`
    /// passed).
    pub lower_bound: bool,
    /// The lowest rate that failed the SLO, and the rules it broke.
    pub failed_at: Option<f64>,
    pub failed_why: Option<String>,
    /// With `undecided`: `generator`, `no_experiment` or `broken`, the rate
    /// of the step that stopped the search, and why.
    pub undecided: Option<Undecided>,
    pub stopped_at: Option<f64>,
    pub why: Option<String>,
    /// After the first failure, the last passing rate was run again: did
    /// it pass? `null` when no step failed.
    pub recovered: Option<bool>,
    /// The sentence the text report leads with.
    pub summary: String,
    pub exit_status: u8,
}

/// A verdict on the search as a whole, as a report's verdicts read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SearchVerdict {
    pub level: VerdictLevel,
    pub code: String,
    pub message: String,
}

/// One step: a rate, run once or `--repeat` times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Step {
    /// 1-based, in the order run.
    pub index: usize,
    pub offered: f64,
    pub purpose: Purpose,
    /// `pass`, `fail`, `generator`, `no_experiment` or `broken`.
    pub judged: String,
    pub passed: bool,
    /// False when the target fell behind the arrivals (`NOT_STEADY`) in
    /// more than half of the step's runs, which fails the step; `why`
    /// then gives the figures.
    #[serde(default = "yes")]
    pub steady: bool,
    /// The rules broken, or why the step says nothing of the target.
    pub why: Option<String>,
    /// Each run's own pass or fail against the SLO.
    pub runs_passed: Vec<bool>,
    /// The runs did not all agree: the medians decided.
    pub repeats_disagree: bool,
    /// Each run's report, relative to the search's folder.
    pub reports: Vec<String>,
    /// The figures the SLO was checked on: the run whose p99 is the median
    /// when repeated.
    pub figures: Figures,
    /// The SLO's rules as checked (on the medians when repeated).
    pub slo: Vec<Checked>,
    /// The verdicts of the step's runs, `LEVEL CODE` each, once.
    pub verdicts: Vec<String>,
    /// Reports of runs in which the fleet was held up and that were run
    /// again (at most twice per step): kept, never judged.
    #[serde(default)]
    pub held_up: Vec<String>,
}

/// A search written before steps were judged on steadiness passed none
/// for being unsteady.
fn yes() -> bool {
    true
}

/// A step's headline figures, as the report names them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Figures {
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub unsent_by_reason: BTreeMap<String, u64>,
    pub completed_in_window: u64,
    pub failures: u64,
    /// Failures / completed, as a fraction.
    pub failure_rate: f64,
    pub throughput_rps: f64,
    pub throughput_ok_rps: f64,
    pub latency_ms: Option<Percentiles>,
    pub warmup: Warmup,
}

impl Figures {
    pub(crate) fn of(r: &Report) -> Figures {
        let t = &r.totals;
        let mut unsent_by_reason = t.unsent.other.clone();
        unsent_by_reason.insert("late".into(), t.unsent.late);
        unsent_by_reason.insert("concurrency_limit".into(), t.unsent.concurrency_limit);
        unsent_by_reason.retain(|_, n| *n > 0);
        Figures {
            intended: t.intended,
            sent: t.sent,
            unsent: t.unsent.total,
            unsent_by_reason,
            completed_in_window: t.completed_in_window,
            failures: t.failures,
            failure_rate: crate::report::format::share(t.failures, t.completed),
            throughput_rps: t.throughput_rps,
            throughput_ok_rps: t.throughput_ok_rps,
            latency_ms: t.latency_ms.clone(),
            warmup: t.warmup.clone(),
        }
    }
}

/// `LEVEL CODE` of each verdict, once, in the reports' order.
pub(crate) fn verdict_codes<'a>(reports: impl Iterator<Item = &'a Report>) -> Vec<String> {
    let mut codes: Vec<String> = Vec::new();
    for r in reports {
        for v in &r.verdicts {
            let code = format!("{} {}", level(v.level), v.code);
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
    }
    codes
}

fn level(l: VerdictLevel) -> &'static str {
    match l {
        VerdictLevel::Error => "ERROR",
        VerdictLevel::Warn => "WARN",
        VerdictLevel::Info => "INFO",
    }
}

/// The result: what is written to `search.json` and the exit status.
pub(crate) fn result(
    outcome: &Outcome,
    resolution: f64,
    vary: Vary,
) -> (ResultRecord, Vec<SearchVerdict>) {
    let rps = |v: f64| vary.amount(v);
    let within = format!("resolution {}%", num(resolution * 100.0, 1));
    let mut verdicts = Vec::new();
    let blank = ResultRecord {
        status: String::new(),
        capacity: None,
        lower_bound: false,
        failed_at: None,
        failed_why: None,
        undecided: None,
        stopped_at: None,
        why: None,
        recovered: None,
        summary: String::new(),
        exit_status: 3,
    };
    let record = match outcome {
        Outcome::Capacity {
            rate,
            failed,
            recovered,
        } => {
            let summary = match failed {
                Some((high, why)) => format!(
                    "sustains {} within the SLO (next step {} failed on {why}); {within}",
                    rps(*rate),
                    rps(*high)
                ),
                None => format!(
                    "sustains at least {} within the SLO: --to passed, so the capacity may be higher (raise --to)",
                    rps(*rate)
                ),
            };
            if !recovered {
                verdicts.push(SearchVerdict {
                    level: VerdictLevel::Warn,
                    code: "NOT_RECOVERED".into(),
                    message: format!(
                        "after the failing step, {} (which had passed) failed too: the target did not recover from the overload within a step, so {} is not a steady-state capacity",
                        rps(*rate),
                        rps(*rate)
                    ),
                });
            }
            ResultRecord {
                status: "capacity".into(),
                capacity: Some(*rate),
                lower_bound: failed.is_none(),
                failed_at: failed.as_ref().map(|f| f.0),
                failed_why: failed.as_ref().map(|f| f.1.clone()),
                recovered: failed.as_ref().map(|_| *recovered),
                summary,
                exit_status: 0,
                ..blank
            }
        }
        Outcome::FromFails { rate, why } => ResultRecord {
            status: "from_fails".into(),
            failed_at: Some(*rate),
            failed_why: Some(why.clone()),
            summary: format!(
                "fails the SLO at the first step already: {} failed on {why}; lower --from",
                rps(*rate)
            ),
            exit_status: 1,
            ..blank
        },
        Outcome::Undecided {
            rate,
            why,
            kind,
            lower_bound,
        } => {
            let proven = match lower_bound {
                Some(l) => format!(
                    "the highest {} proven within the SLO is {} (a lower bound)",
                    vary.noun(),
                    rps(*l)
                ),
                None => format!("no {} was proven within the SLO", vary.noun()),
            };
            let head = match kind {
                Undecided::Generator => format!(
                    "the fleet could not offer {}: add agents or cores ({why})",
                    rps(*rate)
                ),
                Undecided::NoExperiment => format!(
                    "no experiment at {}: the search cannot decide ({why})",
                    rps(*rate)
                ),
                Undecided::Broken => format!(
                    "the search stopped at {} before it could decide ({why})",
                    rps(*rate)
                ),
            };
            ResultRecord {
                status: "undecided".into(),
                capacity: *lower_bound,
                lower_bound: lower_bound.is_some(),
                undecided: Some(*kind),
                stopped_at: Some(*rate),
                why: Some(why.clone()),
                summary: format!("{head}; {proven}"),
                exit_status: 3,
                ..blank
            }
        }
    };
    (record, verdicts)
}

/// The text summary: the result first, then one line per step.
pub(crate) fn write_text(out: &mut impl Write, s: &SearchRecord) -> std::io::Result<()> {
    writeln!(out, "search: {}", s.result.summary)?;
    writeln!(out, "  SLO: {}", s.slo.join(", "))?;
    for v in &s.verdicts {
        writeln!(out, "  {} {}: {}", level(v.level), v.code, v.message)?;
    }
    writeln!(
        out,
        "\n  {:>4} {:>12} {:<9} {:<13} {:>10} {:>10} {:>9} {:>8}  why",
        "step",
        s.settings.varies.noun().split(' ').next().unwrap_or("rate"),
        "purpose",
        "result",
        "done/s",
        "p99",
        "failures",
        "unsent"
    )?;
    for st in &s.steps {
        let mut result = st.judged.clone();
        if !st.steady {
            result.push_str(" unsteady");
        }
        if st.repeats_disagree {
            result.push_str(" (split)");
        }
        let purpose = match st.purpose {
            Purpose::Ladder => "ladder",
            Purpose::Bisect => "bisect",
            Purpose::Recovery => "recovery",
        };
        writeln!(
            out,
            "  {:>4} {:>12} {:<9} {:<13} {:>10} {:>10} {:>8}% {:>8}  {}",
            st.index,
            s.settings.varies.amount(st.offered),
            purpose,
            result,
            num(st.figures.throughput_rps, 1),
            st.figures
                .latency_ms
                .as_ref()
                .map_or("-".to_string(), |p| ms(p.p99)),
            num(st.figures.failure_rate * 100.0, 2),
            st.figures.unsent,
            st.why.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_states_the_capacity_the_failure_and_the_resolution() {
        let (r, verdicts) = result(
            &Outcome::Capacity {
                rate: 400.0,
                failed: Some((420.0, "p99 412.0ms (SLO p99<300ms)".into())),
                recovered: true,
            },
            0.05,
            Vary::Rate,
        );
        assert_eq!(
            r.summary,
            "sustains 400 req/s within the SLO (next step 420 req/s failed on p99 412.0ms (SLO p99<300ms)); resolution 5.0%"
        );
        assert_eq!(
            (r.exit_status, r.lower_bound, verdicts.len()),
            (0, false, 0)
        );
    }

    #[test]
    fn a_target_that_did_not_recover_gets_a_verdict() {
        let (r, verdicts) = result(
            &Outcome::Capacity {
                rate: 400.0,
                failed: Some((800.0, "p99".into())),
                recovered: false,
            },
            0.05,
            Vary::Rate,
        );
        assert_eq!(r.recovered, Some(false));
        assert_eq!(verdicts[0].code, "NOT_RECOVERED");
    }

    #[test]
    fn undecided_searches_exit_3_with_their_lower_bound() {
        let (r, _) = result(
            &Outcome::Undecided {
                rate: 800.0,
                why: "GENERATOR_POOL: busy".into(),
                kind: Undecided::Generator,
                lower_bound: Some(400.0),
            },
            0.05,
            Vary::Rate,
        );
        assert_eq!(r.exit_status, 3);
        assert!(r.lower_bound && r.capacity == Some(400.0));
        assert!(
            r.summary
                .starts_with("the fleet could not offer 800 req/s: add agents or cores")
                && r.summary.ends_with("is 400 req/s (a lower bound)"),
            "{}",
            r.summary
        );
        let (r, _) = result(
            &Outcome::FromFails {
                rate: 50.0,
                why: "p99".into(),
            },
            0.05,
            Vary::Rate,
        );
        assert_eq!((r.exit_status, r.status.as_str()), (1, "from_fails"));
    }
}
