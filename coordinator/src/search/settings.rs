//! The search's settings: the plan's `[search]` table with the search's
//! flags laid over it (read and checked by `crate::plan`), and what only a
//! search asks of them. Every mistake names the flag or the plan key.

use std::time::Duration;

use super::ladder::Course;
use crate::cli::{RunArgs, SearchArgs, Vary};
use crate::error::{self, Error};
use crate::plan::{SearchFlags, SearchPlan};
use crate::thresholds::Threshold;

/// Steps a search may take (runs, repeats and the recovery run included):
/// doubling from 1 to the highest rate and bisecting to 1% fits well in it.
pub(super) const MAX_RUNS: usize = 100;

/// Everything the search follows.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub slo: Vec<Threshold>,
    /// `None` until the plan says: see `Driver::prepare_plan`.
    pub vary: Option<Vary>,
    pub course: Course,
    /// The measured window of each step.
    pub step: Duration,
    /// The warm-up before it, reported apart.
    pub warmup: Duration,
}

/// The `run` flags a search sets itself, refused by name.
pub(super) fn refuse_run_flags(run: &RunArgs) -> Result<(), Error> {
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
    Ok(())
}

/// The search's flags, to lay over the plan's `[search]` table.
pub(super) fn flags(args: &SearchArgs) -> SearchFlags {
    SearchFlags {
        slo: args.slo.clone(),
        vary: args.vary,
        from: args.from,
        to: args.to,
        resolution: args.resolution,
        step: args.step,
        warmup: args.run.flags.warmup,
        repeat: (args.run.repeat > 1).then_some(args.run.repeat),
    }
}

impl Settings {
    /// From the plan's search settings; an SLO and the highest step are
    /// what a search cannot go without.
    pub(crate) fn from_plan(s: &SearchPlan) -> Result<Settings, Error> {
        if s.slo.is_empty() {
            return Err(error::flags(
                "search needs an SLO: give --slo once per rule, e.g. --slo 'p99<300ms' --slo 'failures<1%' (or slo = [...] in the plan's [search] table)",
            ));
        }
        let to = s.to.ok_or_else(|| {
            error::flags(
                "search needs --to, the highest step to try (req/s, or clients with --vary clients), e.g. --to 5000 (or to = 5000 in the plan's [search] table)",
            )
        })?;
        Ok(Settings {
            slo: s.slo.clone(),
            vary: s.vary,
            course: Course {
                from: s.from,
                to,
                resolution: s.resolution,
                repeat: s.repeat,
            },
            step: s.step,
            warmup: s.warmup,
        })
    }
}
