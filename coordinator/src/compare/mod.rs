//! `loadfleet-coordinator compare A.json B.json [C.json ...]`: the headline
//! figures of several reports side by side, with ratios to the first.
//!
//! [`load`] reads the reports, [`table`] works out the rows from the figure
//! registry ([`crate::figures`]) and [`render`] writes them as text or
//! JSON. A figure a report does not have (no latency, a status code it
//! never saw) shows as `-`, never as 0.
//!
//! One run per condition cannot tell a real difference from run-to-run
//! noise, so a ratio between two reports made with `--repeat` whose
//! `[min, max]` ranges overlap is marked `(ns)`, and the columns show the
//! median. Without repeats ratios are bare and a footnote says that
//! significance needs repeats. Notes say when the reports did not measure
//! the same thing: a different duration, a scenario's offered rate, or
//! different scenarios altogether.

mod flows;
mod line;
pub(crate) mod load;
mod render;
mod table;
#[cfg(test)]
mod tests;

use std::io::Write;

pub(crate) use load::{label_for, load, Input};
pub(crate) use table::Table;

use crate::cli::CompareArgs;
use crate::error::Error;

fn bad(msg: impl Into<String>) -> Error {
    Error::CompareInput(msg.into())
}

/// `compare`: loads every report (all of them, before printing anything, so
/// a bad file is reported instead of half a table) and writes the table.
pub(crate) fn run(args: &CompareArgs, out: &mut impl Write) -> Result<u8, Error> {
    if args.reports.len() < 2 {
        return Err(bad(
            "compare needs at least two reports, e.g. compare a/report.json b/report.json",
        ));
    }
    if let Some(done) = crate::search::compare::run(&args.reports, args.json, out) {
        return done;
    }
    let mut inputs = Vec::with_capacity(args.reports.len());
    for path in &args.reports {
        let (file, report) = load(path)?;
        inputs.push(Input {
            label: label_for(&file),
            path: file,
            report,
        });
    }
    let table = Table::build(&inputs);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &table.to_json()).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        table.write_text(out)?;
    }
    out.flush()?;
    Ok(0)
}
