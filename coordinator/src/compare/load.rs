//! Reading the reports to compare, into the report's own types
//! ([`crate::report_model`]) so the schema is written once.
//!
//! A report this coordinator cannot read (another schema, a key of the
//! wrong type, a key it needs missing) is refused by name, as bad input.
//! Keys added after a report was written are optional in the types, so
//! older reports load.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::bad;
use crate::error::Error;
use crate::report_model::Repeats;
use crate::report_model::{RunInfo, Scenario, Totals, Verdict, SCHEMA};

/// One report to compare.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// Column label: the report's folder name, or the file stem.
    pub label: String,
    pub path: PathBuf,
    pub report: Compared,
}

/// The parts of a `report.json` that `compare` reads, in the report's own
/// types; other keys are left unread.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Compared {
    #[serde(default)]
    pub partial: bool,
    pub run: RunInfo,
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub totals: Totals,
    #[serde(default)]
    pub scenarios: Vec<Scenario>,
    #[serde(default)]
    pub repeats: Option<Repeats>,
    /// `repeats.runs`, each read as totals.
    #[serde(skip)]
    pub runs: Vec<Totals>,
}

/// Reads a report. A folder stands for the `report.json` inside it. Any
/// failure is bad input (exit status 2) and names the file.
pub(crate) fn load(path: &Path) -> Result<(PathBuf, Compared), Error> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let shown = file.display();
    let text = std::fs::read_to_string(&file)
        .map_err(|e| bad(format!("{shown}: cannot read the report: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("{shown}: not a JSON report: {e}")))?;
    match value.get("schema") {
        Some(Value::String(s)) if s == SCHEMA => {}
        Some(Value::String(s)) => {
            return Err(bad(format!(
                "{shown}: schema is {s:?}, this coordinator compares {SCHEMA:?} reports"
            )))
        }
        Some(other) => {
            return Err(bad(format!(
                "{shown}: \"schema\" is {other}, expected {SCHEMA:?}"
            )))
        }
        None => {
            return Err(bad(format!(
                "{shown}: no \"schema\" key; not a loadfleet report (expected {SCHEMA:?})"
            )))
        }
    }
    let report = Compared::from_value(value).map_err(|e| {
        bad(format!(
            "{shown}: a {SCHEMA} report this coordinator cannot read: {e}"
        ))
    })?;
    Ok((file, report))
}

impl Compared {
    /// The report's parts, and each repeat run's totals.
    pub(crate) fn from_value(value: Value) -> Result<Compared, serde_json::Error> {
        let mut report: Compared = serde_json::from_value(value)?;
        if let Some(r) = &report.repeats {
            report.runs = r
                .runs
                .iter()
                .map(Totals::deserialize)
                .collect::<Result<_, _>>()?;
        }
        Ok(report)
    }
}

/// The folder's name for `…/NAME/report.json`, the file stem otherwise.
pub(crate) fn label_for(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "report" {
        let dir = file
            .parent()
            .and_then(|p| {
                // `report.json` given bare: name the working folder.
                if p.as_os_str().is_empty() {
                    std::env::current_dir().ok()
                } else {
                    Some(p.to_path_buf())
                }
            })
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        if let Some(dir) = dir.filter(|d| !d.is_empty()) {
            return dir;
        }
    }
    if stem.is_empty() {
        file.display().to_string()
    } else {
        stem
    }
}
