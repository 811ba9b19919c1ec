//! `loadfleet-coordinator run`: from flags to a written report.
//!
//! `setup` turns flags and the plan into a [`RunSetup`], refusing what
//! cannot work before anything starts; the [`Host`] starts the target,
//! the control plane and the local agents, runs the fleet and stops them
//! all again; `folder` names and writes the run's files. `run` (here)
//! and `search` (`crate::search`) are thin callers of these three.

mod folder;
mod host;
mod progress;
mod setup;
mod target;

use std::io::IsTerminal;
use std::path::Path;

use crate::cli::RunArgs;
use crate::console::Console;
use crate::error::Error;
use crate::fleet::RunResult;
use crate::output::Outputs;
use crate::plan::{self, Plan};
use crate::report::{self, PlanInfo};
pub(crate) use host::Host;
pub(crate) use setup::{flags, setup};

/// Runs the whole command; the value is the process exit status.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Error> {
    let console = Console::stderr();
    let plan = plan::resolve_all(args.plan.as_deref(), &flags(&args, None))?;
    let mut setup = setup(&args, plan, args.token()?, &|k| std::env::var(k).ok())?;
    let (file, out) = (args.plan.as_deref(), args.out.as_deref());
    let host = Host::start(&mut setup, out, args.overwrite, file, &console).await?;
    let (info, spec) = host.describe(&setup);
    let mut served = host.serve(&setup).await?;
    // The live outputs: what is measured reaches --out as each second
    // settles, so it outlives a coordinator that is killed.
    let out_dir = host.out_dir.clone();
    let repeats = spec.repeats.max(1);
    let (live, live_writer) =
        folder::live::LiveOutputs::start(&out_dir, repeats, info.clone(), console.clone())?;
    let labels = crate::output::RunLabels::new(
        args.outputs.out_run_id.as_deref(),
        file,
        &out_dir,
        &info,
        spec.repeats,
    );
    let scrape = served.scrape();
    let (sink, outputs) =
        crate::output::start(&setup.outputs, &labels, scrape, Some(Box::new(live)))?;
    let results = host.run_fleet(served, spec, sink, None).await;
    // The fleet is done with the live outputs: let them reach the disk.
    live_writer.finish();
    finish(&results, &info, &setup.plan, outputs, &out_dir, repeats).await
}

/// The report of the runs: written into the run's folder, its summary on
/// stdout; the value is the exit status its verdicts give.
async fn finish(
    results: &[RunResult],
    info: &PlanInfo,
    plan: &Plan,
    outputs: Outputs,
    out_dir: &Path,
    repeats: usize,
) -> Result<u8, Error> {
    let mut reports: Vec<report::Report> = results.iter().map(|r| report::build(r, info)).collect();
    let (mut report, shown) = if reports.len() > 1 {
        report::repeats::combine(reports, &plan.thresholds)
    } else if reports.is_empty() {
        return Err(anyhow::anyhow!("the fleet ended without a run").into());
    } else {
        (reports.remove(0), 0)
    };
    report::shape::name_loads(&mut report, plan);
    outputs.finish(&mut report).await;
    folder::write_outputs(out_dir, &report, shown, repeats)?;
    let summary = (|| {
        let mut stdout = std::io::stdout().lock();
        report::text::write_text(&mut stdout, &report, std::io::stdout().is_terminal())?;
        use std::io::Write;
        writeln!(
            stdout,
            "\n  report: {} (page: {})",
            out_dir.join(folder::REPORT_JSON).display(),
            out_dir.join(folder::REPORT_HTML).display()
        )
    })();
    match summary {
        // `run … | head`: the report is written, and the verdict still
        // decides the exit status.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write the summary"))?
        }
        _ => Ok(report::exit_status(&report)),
    }
}
