//! `report.json`: the report exactly as its serde structs say (the schema
//! is in docs/report.md).

use std::io::Write;

use crate::report_model::Report;

/// Pretty-printed, so a report can be read and diffed by people too.
pub fn write_json(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, r).map_err(std::io::Error::other)?;
    writeln!(out)
}
