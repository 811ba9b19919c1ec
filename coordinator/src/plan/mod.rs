//! Plans: what to send, how fast, for how long — from a TOML file or from
//! flags — validated so that every mistake names its field, its line and a
//! fix.
//!
//! A plan has run settings (`[run]`: warm-up, drain, seed), a target
//! (`[target]`: base URL, timeouts, in-flight cap, pool size), agent shares
//! (`[agents]`) and one or more `[[scenario]]`s. Each scenario is open
//! (a rate profile: constant, ramps, steps, pauses; uniform or Poisson) or
//! closed (a client population with think time), starts at an offset or
//! after the previous one, and sends a weighted mix of templated requests.

use std::collections::BTreeMap;
use std::path::Path;

mod check;
mod files;
mod grpc;
mod model;
mod overlay;
mod preview;
mod raw;
mod requests;
mod shape;
mod sse;
mod timing;
mod tls;
mod validate;
mod validated;

pub use check::{PlanError, PlanErrors};
pub use overlay::{Overlay, ProcessArg};
pub use preview::{preview, Preview, PREVIEW_AGENTS, PREVIEW_ROWS};
pub use sse::SsePlan;
pub use tls::TargetTls;
pub use validated::{
    join_url, Data, GrpcSource, Model, OnAgentLoss, Plan, RequestPlan, RunSettings, Scenario,
    Shares, Target, TESTBED_GRPC_MESSAGE, TESTBED_GRPC_METHOD, TESTBED_URL,
};

/// Where a plan made of flags alone comes from, in messages.
const FLAGS_SOURCE: &str = "the command line";

/// The plan for a run or a preview: the file (if any) with the flags laid
/// over it, or a one-scenario plan made of the flags alone.
pub fn resolve(file: Option<&Path>, flags: &Overlay) -> Result<Plan, PlanErrors> {
    let (text, source, base) = match file {
        Some(path) => (
            read(path)?,
            path.display().to_string(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
        None => (String::new(), FLAGS_SOURCE.to_string(), Default::default()),
    };
    let mut raw = match file {
        Some(_) => from_toml(&text, &source)?,
        None => overlay::flags_only(),
    };
    let laid = flags.lay_over(&mut raw, file.is_some());
    validate::validate(
        &raw,
        validate::Input {
            text: &text,
            source: &source,
            base: &base,
            flags: laid.flags,
            errors: laid.errors,
            thresholds: flags.thresholds.clone(),
        },
    )
}

/// Reads and validates a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    resolve(Some(path), &Overlay::default())
}

/// Parses and validates plan text; relative data and body files are read
/// from `base`.
pub fn parse(text: &str, source: &str, base: &Path) -> Result<Plan, PlanErrors> {
    let raw = from_toml(text, source)?;
    validate::validate(
        &raw,
        validate::Input {
            text,
            source,
            base,
            flags: BTreeMap::new(),
            errors: Vec::new(),
            thresholds: Vec::new(),
        },
    )
}

fn read(path: &Path) -> Result<String, PlanErrors> {
    std::fs::read_to_string(path).map_err(|e| PlanErrors {
        source: path.display().to_string(),
        errors: vec![PlanError {
            field: "plan".into(),
            line: None,
            message: format!("cannot read the plan file: {e}"),
        }],
    })
}

fn from_toml(text: &str, source: &str) -> Result<raw::RawPlan, PlanErrors> {
    toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        PlanErrors {
            source: source.to_string(),
            errors: vec![PlanError {
                field: validate::field_of_toml_error(e.message()),
                line,
                message: validate::fix_for_toml_error(e.message()),
            }],
        }
    })
}

#[cfg(test)]
mod tests;
