//! The search's settings: flags first, then the plan's `[search]` table,
//! then the defaults. Every mistake names the flag or the plan key.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::ladder::Course;
use crate::cli::{percent, SearchArgs, Vary};
use crate::error::{self, Error};
use crate::plan::Overlay;
use crate::thresholds::Threshold;

/// The rate the ladder starts from when neither `--from` nor the plan
/// says: low enough for almost any target to pass.
const DEFAULT_FROM: f64 = 10.0;
/// The measured window of each step.
const DEFAULT_STEP: Duration = Duration::from_secs(30);
/// The warm-up before each step's window: fresh connections and a cold
/// target are reported apart.
const DEFAULT_WARMUP: Duration = Duration::from_secs(5);
/// 5%: the gap between the last pass and the first failure, as a share
/// of the passing rate, at which bisection stops.
const DEFAULT_RESOLUTION: f64 = 0.05;
/// Steps a search may take (runs, repeats and the recovery run included):
/// doubling from 1 to the highest rate and bisecting to 1% fits well in it.
pub const MAX_RUNS: usize = 100;

/// The plan's `[search]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    #[serde(default)]
    slo: Vec<String>,
    from: Option<f64>,
    to: Option<f64>,
    resolution: Option<String>,
    step: Option<String>,
    warmup: Option<String>,
    repeat: Option<u32>,
    vary: Option<Vary>,
}

/// Everything the search follows.
#[derive(Debug, Clone)]
pub struct Settings {
    pub slo: Vec<Threshold>,
    /// `None` until the plan says: see `Driver::prepare_plan`.
    pub vary: Option<Vary>,
    pub course: Course,
    /// The measured window of each step.
    pub step: Duration,
    /// The warm-up before it, reported apart.
    pub warmup: Duration,
}

impl Settings {
    /// From the flags, with the plan's `[search]` table under them.
    pub fn resolve(args: &SearchArgs) -> Result<Settings, Error> {
        let run = &args.run;
        if run.flags.duration.is_some() {
            return Err(error::flags(
                "search sets each step's length: use --step (the measured window) and --warmup instead of --duration",
            ));
        }
        if run.flags.rate.is_some() || run.flags.clients.is_some() {
            return Err(error::flags(
                "search chooses each step's load itself: use --from and --to instead of --rate or --clients (with --vary clients for a closed population)",
            ));
        }
        if !run.flags.thresholds.is_empty() {
            return Err(error::flags(
                "search judges each step by --slo (same language as --threshold): write --slo 'p99<300ms' instead",
            ));
        }
        if run.flags.ramp.is_some() {
            return Err(error::flags(
                "search holds each step's rate for its whole length: leave --ramp out (--warmup keeps the first seconds apart)",
            ));
        }
        let raw = match &run.plan {
            Some(path) => read_table(path)?,
            None => RawSearch::default(),
        };
        let at = |key: &str| match &run.plan {
            Some(p) => format!("{}: [search] {key}", p.display()),
            None => key.to_string(),
        };
        let mut slo = args.slo.clone();
        if slo.is_empty() {
            for text in &raw.slo {
                slo.push(
                    text.parse()
                        .map_err(|e: String| error::flags(format!("{}: {e}", at("slo"))))?,
                );
            }
        }
        if slo.is_empty() {
            return Err(error::flags(
                "search needs an SLO: give --slo once per rule, e.g. --slo 'p99<300ms' --slo 'failures<1%' (or slo = [...] in the plan's [search] table)",
            ));
        }
        let from = args.from.or(raw.from).unwrap_or(DEFAULT_FROM);
        let to = args.to.or(raw.to).ok_or_else(|| {
            error::flags(
                "search needs --to, the highest step to try (req/s, or clients with --vary clients), e.g. --to 5000 (or to = 5000 in the plan's [search] table)",
            )
        })?;
        for (name, v) in [("--from", from), ("--to", to)] {
            if !v.is_finite() || v <= 0.0 || v > loadfleet_proto::bounds::MAX_RATE {
                return Err(error::flags(format!(
                    "{name} {v}: a rate in req/s (or clients) above 0 and at most {}",
                    loadfleet_proto::bounds::MAX_RATE
                )));
            }
        }
        if to <= from {
            return Err(error::flags(format!(
                "--to {to} must be above --from {from}: the search looks between them"
            )));
        }
        let resolution = match (args.resolution, &raw.resolution) {
            (Some(r), _) => r,
            (None, Some(text)) => {
                percent(text).map_err(|e| error::flags(format!("{}: {e}", at("resolution"))))?
            }
            (None, None) => DEFAULT_RESOLUTION,
        };
        if !(0.001..=1.0).contains(&resolution) {
            return Err(error::flags(format!(
                "--resolution {:.1}%: give 0.1% to 100% of the rate, e.g. 5%",
                resolution * 100.0
            )));
        }
        let duration =
            |flag: Option<Duration>, raw: &Option<String>, key: &str, default| match (flag, raw) {
                (Some(d), _) => Ok(d),
                (None, Some(text)) => humantime::parse_duration(text)
                    .map_err(|e| error::flags(format!("{}: {text:?}: {e}", at(key)))),
                (None, None) => Ok(default),
            };
        let step = duration(args.step, &raw.step, "step", DEFAULT_STEP)?;
        let warmup = duration(run.flags.warmup, &raw.warmup, "warmup", DEFAULT_WARMUP)?;
        if step < Duration::from_secs(1) {
            return Err(error::flags(
                "--step must be at least 1s: the window is read in whole seconds",
            ));
        }
        let repeat = if run.repeat > 1 {
            run.repeat
        } else {
            raw.repeat.unwrap_or(1)
        };
        if !(1..=9).contains(&repeat) {
            return Err(error::flags(format!(
                "{} {repeat}: repeat steps 1 to 9 times",
                at("repeat")
            )));
        }
        Ok(Settings {
            slo,
            vary: args.vary.or(raw.vary),
            course: Course {
                from,
                to,
                resolution,
                repeat,
            },
            step,
            warmup,
        })
    }

    /// Each step's schedule: the warm-up, then the measured window.
    pub fn lay_over(&self, flags: &mut Overlay) {
        flags.duration = Some(self.warmup + self.step);
        flags.warmup = Some(self.warmup);
    }
}

/// The plan's `[search]` table, if it has one.
fn read_table(path: &Path) -> Result<RawSearch, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| error::flags(format!("{}: {e}", path.display())))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| error::flags(format!("{}: {}", path.display(), e.message())))?;
    match table.get("search") {
        None => Ok(RawSearch::default()),
        Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| {
            error::flags(format!("{}: [search]: {}", path.display(), e.message()))
        }),
    }
}
