//! `loadfleet-coordinator search`: the highest open rate (or closed
//! population) a target sustains within its SLO, found by running steps of
//! rising load on one fleet.
//!
//! [`settings`] turns flags and the plan's `[search]` table into the
//! course; [`ladder`] decides, as pure functions, which rate comes next;
//! [`judge`] reads a step's report into pass, fail or "no verdict on the
//! target" (the generator was the limit, no experiment happened);
//! [`driver`] is the glue the fleet calls between runs; [`record`] writes
//! `search.json` and the text summary, [`html`] the knee chart, and
//! [`compare`] sets two searches side by side. The guide is
//! `docs/search.md`.

pub mod compare;
mod driver;
mod html;
mod judge;
pub mod ladder;
pub mod record;
mod settings;

pub use driver::Driver;
pub use settings::Settings;

use crate::cli::{self, RunArgs, SearchArgs};
use crate::error::Error;
use crate::plan::{SearchFlags, SearchPlan};

/// The flags of the search's runs and the search's own flags, laid over
/// the plan's `[search]` table: `run::run_steps` runs them (the command's
/// exit status is then 0 a capacity was found, 1 even `--from` failed the
/// SLO, 3 undecided).
pub fn prepare(args: SearchArgs) -> Result<(RunArgs, SearchFlags), Error> {
    settings::refuse_run_flags(&args.run)?;
    let flags = settings::flags(&args);
    let mut run = args.run;
    if args.vary == Some(cli::Vary::Clients) && run.plan.is_none() {
        // Without a plan the flags make the scenario: a closed one, whose
        // client count each step then sets.
        let from = args.from.unwrap_or(SearchPlan::DEFAULT_FROM);
        run.flags.clients = Some(from.round().max(1.0) as u32);
    }
    // `--repeat` repeats steps near the boundary, not the whole search.
    run.repeat = 1;
    Ok((run, flags))
}
