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

pub(crate) mod compare;
mod driver;
mod html;
mod judge;
pub(crate) mod ladder;
pub(crate) mod record;
mod settings;

pub(crate) use driver::Driver;
pub(crate) use settings::Settings;

use crate::cli::{self, RunArgs, SearchArgs};
use crate::console::Console;
use crate::error::Error;
use crate::plan::{self, SearchFlags, SearchPlan};
use crate::run::{self as runs, Host};

/// Runs the whole command: the search's steps on one fleet and target,
/// each step's rate picked by the [`Driver`]. The value is the exit
/// status: 0 a capacity was found, 1 even `--from` failed the SLO, 3
/// undecided.
pub(crate) async fn run(args: SearchArgs) -> Result<u8, Error> {
    let console = Console::stderr();
    let (args, flags) = prepare(args)?;
    let mut plan = plan::resolve_all(args.plan.as_deref(), &runs::flags(&args, Some(flags)))?;
    let mut driver = Driver::new(Settings::from_plan(&plan.search)?);
    driver.prepare_plan(&mut plan)?;
    let mut setup = runs::setup(&args, plan, args.token()?, &|k| std::env::var(k).ok())?;
    if !setup.outputs.is_empty() {
        // A search's steps are reports of their own, written to --out.
        console.notice(
            "live outputs ([[output]], --out-*) are not sent during a search; each step's report is kept in --out",
        );
        setup.outputs.clear();
    }
    let (file, out) = (args.plan.as_deref(), args.out.as_deref());
    let host = Host::start(&mut setup, out, args.overwrite, file, &console).await?;
    let (info, mut spec) = host.describe(&setup);
    driver.prepare_spec(&mut spec, &info, &host.out_dir, &console)?;
    let mut served = host.serve(&setup).await?;
    let out_dir = host.out_dir.clone();
    // Only the scrape endpoint is fed: it serves the step under way. Each
    // step is a run of its own, not a repeat, so no `repeat` label.
    let labels =
        crate::output::RunLabels::new(args.outputs.out_run_id.as_deref(), file, &out_dir, &info, 1);
    let (sink, _) = crate::output::start(&[], &labels, served.scrape(), None)?;
    let (next, driver) = driver.into_next();
    let results = host.run_fleet(served, spec, sink, Some(next)).await;
    driver.finish(&results, &out_dir)
}

/// The flags of the search's runs and the search's own flags, laid over
/// the plan's `[search]` table by `crate::plan`.
fn prepare(args: SearchArgs) -> Result<(RunArgs, SearchFlags), Error> {
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
