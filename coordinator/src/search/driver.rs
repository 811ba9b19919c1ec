//! The glue between the fleet and the course: `run` sets the fleet and the
//! target up once, then the fleet asks the driver after every run which
//! schedule comes next. The driver builds the run's report, keeps it in
//! `step-N/`, judges the step when its runs are in, and asks the course
//! ([`super::ladder`]) for the next rate. At the end it writes
//! `search.json`, `search.html` and the text summary.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use loadfleet_proto::v1::{self, scenario_assignment};

use super::judge;
use super::ladder::{Judged, Next, Outcome, Purpose, Search};
use super::record::{self, Figures, SearchRecord, SettingsRecord, Step, SCHEMA};
use super::settings::{Settings, MAX_RUNS};
use crate::cli::Vary;
use crate::console::Console;
use crate::error::{self, Error};
use crate::fleet::{NextSchedule, RunResult, RunSpec};
use crate::plan::{Model, Plan};
use crate::report::{self, PlanInfo};

/// Runs of a step the fleet was held up in that are made again before
/// the search stops on the generator.
const GENERATOR_RETRIES: usize = 2;

/// What `run` hands the search: see the module's comment.
pub(crate) struct Driver {
    settings: Settings,
    state: Arc<Mutex<State>>,
}

/// The step being run.
struct Current {
    index: usize,
    rate: f64,
    runs: u32,
    purpose: Purpose,
    reports: Vec<report::Report>,
    results_passed: Vec<bool>,
    /// Runs of this step the fleet was held up in and that were run again.
    retried: Vec<String>,
}

struct State {
    settings: Settings,
    search: Search,
    /// What the steps vary, once the plan is known.
    vary: Vary,
    /// The plan's scenarios, at the plan's rates.
    base: Vec<v1::ScenarioAssignment>,
    /// What is varied, added up over the scenarios (each at its peak).
    base_rate: f64,
    info: Option<PlanInfo>,
    out_dir: PathBuf,
    console: Console,
    current: Option<Current>,
    steps: Vec<Step>,
    outcome: Option<Outcome>,
    /// Results observed so far.
    seen: usize,
    /// The first file that could not be written.
    failed_write: Option<anyhow::Error>,
}

impl Driver {
    pub(crate) fn new(settings: Settings) -> Driver {
        let state = State {
            search: Search::new(settings.course),
            vary: settings.vary.unwrap_or(Vary::Rate),
            settings: settings.clone(),
            base: Vec::new(),
            base_rate: 0.0,
            info: None,
            out_dir: PathBuf::new(),
            console: Console::stderr(),
            current: None,
            steps: Vec::new(),
            outcome: None,
            seen: 0,
            failed_write: None,
        };
        Driver {
            settings,
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The SLO becomes the plan's thresholds: each step's report checks
    /// exactly its rules. What is varied is settled here: the open rate
    /// when the plan has an open scenario, else the closed population,
    /// unless `--vary` said.
    pub(crate) fn prepare_plan(&self, plan: &mut Plan) -> Result<(), Error> {
        let has = |open: bool| {
            plan.scenarios
                .iter()
                .any(|s| matches!(s.model, Model::Open(_)) == open)
        };
        let vary = match self.settings.vary {
            Some(v) => v,
            None if has(true) => Vary::Rate,
            None => Vary::Clients,
        };
        match vary {
            Vary::Rate if !has(true) => {
                return Err(error::flags(
                    "search --vary rate varies the open rate, and this plan has no open-model scenario: give a scenario a rate, or search its clients with --vary clients",
                ))
            }
            Vary::Clients if !has(false) => {
                return Err(error::flags(
                    "search --vary clients varies the closed population, and this plan has no closed-model scenario: give a scenario clients, or search the rate with --vary rate",
                ))
            }
            Vary::Clients if self.settings.course.to > loadfleet_proto::bounds::MAX_CLIENTS => {
                return Err(error::flags(format!(
                    "--to {}: with --vary clients, at most {} clients",
                    self.settings.course.to,
                    loadfleet_proto::bounds::MAX_CLIENTS
                )))
            }
            _ => {}
        }
        self.state().vary = vary;
        plan.thresholds = self.settings.slo.clone();
        Ok(())
    }

    /// The first step's schedule, and room in the fleet for every step.
    pub(crate) fn prepare_spec(
        &mut self,
        spec: &mut RunSpec,
        info: &PlanInfo,
        out_dir: &Path,
        console: &Console,
    ) -> Result<(), Error> {
        let mut st = self.state();
        let vary = st.vary;
        st.base_rate = offered(&spec.scenarios, vary);
        if st.base_rate <= 0.0 {
            return Err(error::flags(format!(
                "search varies the {}, and the plan's scenarios have none above 0",
                vary.noun()
            )));
        }
        st.base = spec.scenarios.clone();
        st.info = Some(info.clone());
        st.out_dir = out_dir.to_path_buf();
        st.console = console.clone();
        spec.repeats = MAX_RUNS;
        console.line(&format!(
            "search: SLO {} between {} and {}; steps of {} after a {} warm-up, resolution {}%",
            self.settings
                .slo
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            vary.amount(self.settings.course.from),
            vary.amount(self.settings.course.to),
            humantime::format_duration(self.settings.step),
            humantime::format_duration(self.settings.warmup),
            self.settings.course.resolution * 100.0
        ));
        let next = st.search.start();
        match st.begin(next) {
            Some(scenarios) => spec.scenarios = scenarios,
            None => return Err(anyhow::anyhow!("the search ended before its first step").into()),
        }
        Ok(())
    }

    /// The fleet's side: after each run, the next schedule.
    pub(crate) fn into_next(self) -> (NextSchedule, Driver) {
        let state = Arc::clone(&self.state);
        let next: NextSchedule = Box::new(move |result: &RunResult| {
            state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .observe(result)
        });
        (next, self)
    }

    /// After the fleet: runs it did not hand over are judged, then the
    /// outputs are written; the value is the exit status.
    pub(crate) fn finish(self, results: &[RunResult], out_dir: &Path) -> Result<u8, Error> {
        let mut st = self.state();
        let seen = st.seen;
        for r in results.iter().skip(seen) {
            st.observe(r);
        }
        if let Some(e) = st.failed_write.take() {
            return Err(e.into());
        }
        let outcome = match st.outcome.clone() {
            Some(o) => o,
            None => st.search.stopped(
                "the fleet ended before the search decided (interrupted, or agents lost)".into(),
            ),
        };
        let vary = st.vary;
        let (result, verdicts) = record::result(&outcome, self.settings.course.resolution, vary);
        let info = st.info.as_ref();
        let rec = SearchRecord {
            schema: SCHEMA.into(),
            target: info.map(|i| i.target.clone()).unwrap_or_default(),
            slo: self.settings.slo.iter().map(|t| t.to_string()).collect(),
            settings: SettingsRecord {
                varies: vary,
                from: self.settings.course.from,
                to: self.settings.course.to,
                resolution: self.settings.course.resolution,
                step_s: self.settings.step.as_secs_f64(),
                warmup_s: self.settings.warmup.as_secs_f64(),
                drain_s: info.map_or(0.0, |i| i.drain.as_secs_f64()),
                repeat: self.settings.course.repeat,
                agents: results.first().map_or(0, |r| r.agents.len()),
            },
            result,
            verdicts,
            steps: std::mem::take(&mut st.steps),
        };
        write(&out_dir.join("search.json"), |w| {
            serde_json::to_writer_pretty(&mut *w, &rec).map_err(std::io::Error::other)
        })?;
        write(&out_dir.join("search.html"), |w| {
            std::io::Write::write_all(w, super::html::render(&rec).as_bytes())
        })?;
        let mut stdout = std::io::stdout().lock();
        let shown = record::write_text(&mut stdout, &rec).and_then(|()| {
            use std::io::Write;
            writeln!(
                stdout,
                "\n  search: {} (page: {}; each step's report in step-N/)",
                out_dir.join("search.json").display(),
                out_dir.join("search.html").display()
            )
        });
        match shown {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::new(e)
                .context("cannot write the summary")
                .into()),
            _ => Ok(rec.result.exit_status),
        }
    }
}

impl State {
    /// Starts what the course asks for; `None` when it is over.
    fn begin(&mut self, next: Next) -> Option<Vec<v1::ScenarioAssignment>> {
        match next {
            Next::Done(o) => {
                self.outcome = Some(o);
                None
            }
            Next::Step {
                rate,
                runs,
                purpose,
            } => {
                let index = self.steps.len() + 1;
                self.console.line(&format!(
                    "search step {index}: {} ({}{})",
                    self.vary.amount(rate),
                    purpose_word(purpose),
                    if runs > 1 {
                        format!(", {runs} runs")
                    } else {
                        String::new()
                    }
                ));
                self.current = Some(Current {
                    index,
                    rate,
                    runs,
                    purpose,
                    reports: Vec::new(),
                    results_passed: Vec::new(),
                    retried: Vec::new(),
                });
                Some(scaled(&self.base, (self.base_rate, rate), self.vary))
            }
        }
    }

    /// One run is over: keep its report, and when the step's runs are in
    /// (or one run says nothing of the target), judge the step.
    fn observe(&mut self, result: &RunResult) -> Option<Vec<v1::ScenarioAssignment>> {
        self.seen += 1;
        let (Some(mut cur), Some(info)) = (self.current.take(), self.info.as_ref()) else {
            return None;
        };
        let info = scaled_info(info, cur.rate / self.base_rate, self.vary);
        let report = report::build(result, &info);
        let early = judge::honesty(result, &report, &self.settings.slo);
        let held_up = match &early {
            Some(Judged::Generator(why)) if judge::transient(why) => Some(why),
            _ => None,
        };
        if let (Some(why), true) = (held_up, cur.retried.len() < GENERATOR_RETRIES) {
            // A load machine held up (another process, a noisy neighbour)
            // is not yet the fleet's limit: the run is kept apart and made
            // again; held up every time, the search stops.
            let path = format!(
                "step-{:02}/held-up-{}/report.json",
                cur.index,
                cur.retried.len() + 1
            );
            self.keep(&path, &report);
            self.console.line(&format!(
                "search step {}: the fleet was held up ({why}); running it once more",
                cur.index
            ));
            cur.retried.push(path);
            let rate = cur.rate;
            self.current = Some(cur);
            return Some(scaled(&self.base, (self.base_rate, rate), self.vary));
        }
        cur.results_passed.push(
            report.thresholds.iter().all(|c| c.passed)
                && judge::not_steady(std::slice::from_ref(&report)).is_none(),
        );
        cur.reports.push(report);
        if early.is_none() && cur.reports.len() < cur.runs as usize {
            let rate = cur.rate;
            self.current = Some(cur);
            return Some(scaled(&self.base, (self.base_rate, rate), self.vary));
        }
        self.close(cur, early)
    }

    /// The step's runs are in: keep its reports, judge it, and start what
    /// the course asks for next.
    fn close(
        &mut self,
        cur: Current,
        early: Option<Judged>,
    ) -> Option<Vec<v1::ScenarioAssignment>> {
        let dir = format!("step-{:02}", cur.index);
        let mut paths = Vec::new();
        let shown = if cur.reports.len() > 1 {
            for (k, r) in cur.reports.iter().enumerate() {
                let path = format!("{dir}/run-{}/report.json", k + 1);
                self.keep(&path, r);
                paths.push(path);
            }
            paths.push(format!("{dir}/report.json"));
            report::repeats::combine(cur.reports.clone(), &self.settings.slo).0
        } else {
            let r = cur.reports[0].clone();
            paths.push(format!("{dir}/report.json"));
            r
        };
        self.keep(&format!("{dir}/report.json"), &shown);
        // A step that says nothing of the target is not judged on it.
        let steady = early.is_some() || judge::not_steady(&cur.reports).is_none();
        let judged = early.unwrap_or_else(|| judge::step(&shown.thresholds, &cur.reports));
        let disagree = cur
            .results_passed
            .iter()
            .any(|&p| p != cur.results_passed[0]);
        let (word, why) = match &judged {
            Judged::Pass => ("pass", None),
            Judged::Fail(w) => ("fail", Some(w.clone())),
            Judged::Generator(w) => ("generator", Some(w.clone())),
            Judged::NoExperiment(w) => ("no_experiment", Some(w.clone())),
            Judged::Broken(w) => ("broken", Some(w.clone())),
        };
        self.steps.push(Step {
            index: cur.index,
            offered: cur.rate,
            purpose: cur.purpose,
            judged: word.into(),
            passed: judged == Judged::Pass,
            steady,
            why: why.clone(),
            runs_passed: cur.results_passed.clone(),
            repeats_disagree: disagree,
            reports: paths,
            figures: Figures::of(&shown),
            slo: shown.thresholds.clone(),
            verdicts: record::verdict_codes(cur.reports.iter()),
            held_up: cur.retried.clone(),
        });
        let next = self.search.observe(judged);
        let (low, high) = self.search.bracket();
        self.console.line(&format!(
            "search step {}: {} → {word}{}{} · so far: {}{}",
            cur.index,
            self.vary.amount(cur.rate),
            why.map(|w| format!(" ({w})")).unwrap_or_default(),
            if disagree {
                " · its runs disagree, the medians decided"
            } else {
                ""
            },
            low.map_or("nothing passed yet".into(), |l| format!(
                "sustains {}",
                self.vary.amount(l)
            )),
            high.map_or(String::new(), |h| format!(
                ", fails at {}",
                self.vary.amount(h)
            ))
        ));
        self.begin(next)
    }

    /// Writes a step's report into the search's folder.
    fn keep(&mut self, rel: &str, r: &report::Report) {
        let path = self.out_dir.join(rel);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .with_context(|| format!("cannot create the folder of {}", path.display()))
            .and_then(|()| write(&path, |w| report::json::write_json(w, r)));
        if let Err(e) = written {
            self.failed_write.get_or_insert(e);
        }
    }
}

fn purpose_word(p: Purpose) -> &'static str {
    match p {
        Purpose::Ladder => "ladder",
        Purpose::Bisect => "bisection",
        Purpose::Recovery => "recovery: the last passing rate again",
    }
}

fn write(
    path: &Path,
    f: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    f(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The stages of what `vary` names in one scenario: the open schedule's,
/// or the closed population's (whose `from_rps`/`to_rps` hold clients).
fn varied_stages(s: &mut v1::ScenarioAssignment, vary: Vary) -> Option<&mut Vec<v1::Stage>> {
    match (&mut s.model, vary) {
        (Some(scenario_assignment::Model::Open(o)), Vary::Rate) => Some(&mut o.stages),
        (Some(scenario_assignment::Model::Closed(c)), Vary::Clients) => Some(&mut c.stages),
        _ => None,
    }
}

/// What `vary` names, added up over the scenarios, each at its peak.
pub(super) fn offered(scenarios: &[v1::ScenarioAssignment], vary: Vary) -> f64 {
    scenarios
        .iter()
        .cloned()
        .filter_map(|mut s| {
            varied_stages(&mut s, vary)?
                .iter()
                .map(|st| st.from_rps.max(st.to_rps))
                .reduce(f64::max)
        })
        .sum()
}

/// The scenarios with what `vary` names scaled so it adds up to `rate`,
/// in the plan's proportions; the other model's scenarios as they are.
/// Client counts are rounded to whole clients, as only whole ones run.
pub(super) fn scaled(
    base: &[v1::ScenarioAssignment],
    (base_rate, rate): (f64, f64),
    vary: Vary,
) -> Vec<v1::ScenarioAssignment> {
    let factor = rate / base_rate;
    let scale = |v: f64| match vary {
        Vary::Rate => v * factor,
        Vary::Clients => (v * factor).round(),
    };
    base.iter()
        .cloned()
        .map(|mut s| {
            if let Some(stages) = varied_stages(&mut s, vary) {
                for st in stages {
                    st.from_rps = scale(st.from_rps);
                    st.to_rps = scale(st.to_rps);
                }
            }
            s
        })
        .collect()
}

/// The plan as the report states it, at the step's rate.
fn scaled_info(info: &PlanInfo, factor: f64, vary: Vary) -> PlanInfo {
    let mut info = info.clone();
    if vary == Vary::Rate {
        for s in &mut info.scenarios {
            s.offered_rps = s.offered_rps.map(|r| r * factor);
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn open(rates: &[(f64, f64)]) -> v1::ScenarioAssignment {
        v1::ScenarioAssignment {
            model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                stages: rates
                    .iter()
                    .map(|&(from_rps, to_rps)| v1::Stage {
                        duration_ns: 1_000_000_000,
                        from_rps,
                        to_rps,
                    })
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// A clients search scales the closed scenarios to whole clients in
    /// the plan's proportions and leaves the open ones as they are.
    #[test]
    fn a_clients_search_scales_whole_clients_only() {
        let closed = |n: f64| v1::ScenarioAssignment {
            model: Some(scenario_assignment::Model::Closed(v1::ClosedModel {
                stages: vec![v1::Stage {
                    duration_ns: 1_000_000_000,
                    from_rps: n,
                    to_rps: n,
                }],
                think_ns: 0,
            })),
            ..Default::default()
        };
        let base = vec![closed(30.0), closed(10.0), open(&[(50.0, 50.0)])];
        let total = offered(&base, Vary::Clients);
        assert_eq!(total, 40.0);
        let s = scaled(&base, (total, 21.0), Vary::Clients);
        assert_eq!(offered(&s[..1], Vary::Clients), 16.0, "15.75 rounds to 16");
        assert_eq!(offered(&s[1..2], Vary::Clients), 5.0, "5.25 rounds to 5");
        assert_eq!(s[2], base[2], "the open scenario keeps its rate");
        assert_eq!(offered(&s, Vary::Rate), 50.0);
    }

    proptest! {
        /// Scaled scenarios add up to the asked rate and keep the plan's
        /// proportions between scenarios and stages.
        #[test]
        fn scaling_keeps_the_proportions(
            a in 1.0f64..1000.0, b in 1.0f64..1000.0, ramp in 0.0f64..1.0, rate in 1.0f64..1e5
        ) {
            let base = vec![open(&[(0.0, a * ramp), (a, a)]), open(&[(b, b)]), Default::default()];
            let total = offered(&base, Vary::Rate);
            prop_assert!((total - (a + b)).abs() < 1e-9);
            let s = scaled(&base, (total, rate), Vary::Rate);
            let rate_of = |s: &[v1::ScenarioAssignment]| offered(s, Vary::Rate);
            prop_assert!((rate_of(&s) - rate).abs() < 1e-6 * rate);
            prop_assert!((rate_of(&s[..1]) / rate_of(&s[1..2]) - a / b).abs() < 1e-6 * a / b);
            prop_assert_eq!(&s[2], &base[2]);
        }
    }
}
