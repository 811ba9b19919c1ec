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
//! Its live outputs (`[[output]]`) and a capacity search's settings
//! (`[search]`) are part of the same plan: one reader, one overlay of
//! flags ([`Flags`]), one validator.

use std::collections::BTreeMap;
use std::path::Path;

mod check;
mod files;
mod grpc;
mod model;
mod names;
mod outputs;
mod overlay;
mod overlay_outputs;
mod overlay_search;
mod parse;
mod placeholders;
mod preview;
mod raw;
mod requests;
mod search;
mod shape;
mod sse;
mod steps;
mod timeline;
mod timing;
mod tls;
mod validate;
mod validated;

pub(crate) use check::{PlanError, PlanErrors};
pub(crate) use outputs::{Credential, Histograms, Kind as OutputKind, OutputPlan, Secret};
pub(crate) use overlay::Overlay;
pub(crate) use overlay_outputs::OutputArgs;
pub(crate) use overlay_search::SearchFlags;
pub(crate) use search::{SearchPlan, Vary};
pub(crate) use validated::{join_url, GrpcSource, TESTBED_URL};

pub use preview::{preview, PREVIEW_AGENTS, PREVIEW_ROWS};
pub use validated::{Model, OnAgentLoss, Plan, Shares};

/// Where a plan made of flags alone comes from, in messages.
const FLAGS_SOURCE: &str = "the command line";

/// Every flag laid over a plan: those of its scenarios and target, of its
/// live outputs, and, for `search`, of its `[search]` table.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub plan: Overlay,
    pub outputs: OutputArgs,
    pub search: Option<SearchFlags>,
}

impl Flags {
    /// Flags for a plan's scenarios and target alone (`plan preview`).
    pub fn plan(plan: &Overlay) -> Flags {
        Flags {
            plan: plan.clone(),
            ..Flags::default()
        }
    }

    fn lay_over(
        &self,
        raw: &mut raw::RawPlan,
        from_file: bool,
        timeline: Option<&timeline::Timeline>,
    ) -> overlay::Laid {
        let mut laid = self.plan.lay_over(raw, from_file, timeline);
        self.outputs.lay_over(raw, &mut laid);
        if let Some(search) = &self.search {
            search.lay_over(raw, &mut laid);
        }
        laid
    }
}

/// The plan for a preview: [`resolve_all`] with the flags of its
/// scenarios and target alone.
pub fn resolve(file: Option<&Path>, flags: &Overlay) -> Result<Plan, PlanErrors> {
    resolve_all(file, &Flags::plan(flags))
}

/// The plan for a run or a search: the file (if any) with the flags laid
/// over it, or a one-scenario plan made of the flags alone.
pub fn resolve_all(file: Option<&Path>, flags: &Flags) -> Result<Plan, PlanErrors> {
    let (text, source, base) = match file {
        Some(path) => (
            read(path)?,
            path.display().to_string(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
        None => (String::new(), FLAGS_SOURCE.to_string(), Default::default()),
    };
    let read = || match file {
        Some(_) => from_toml(&text, &source),
        None => Ok(parse::Parsed {
            raw: overlay::flags_only(),
            errors: Vec::new(),
            dropped: Vec::new(),
        }),
    };
    let laid_over =
        |mut parsed: parse::Parsed, flags: &Flags, timeline: Option<&timeline::Timeline>| {
            let laid = flags.lay_over(&mut parsed.raw, file.is_some(), timeline);
            parsed.errors.extend(laid.errors);
            validate::validate(
                &parsed.raw,
                validate::Input {
                    text: &text,
                    source: &source,
                    base: &base,
                    flags: laid.flags,
                    errors: parsed.errors,
                    dropped: parsed.dropped,
                    thresholds: flags.plan.thresholds.clone(),
                },
            )
        };
    let parsed = read()?;
    // A search's steps each last its warm-up and its measured window.
    let stepped;
    let flags = match &flags.search {
        Some(search) => {
            let (warmup, step) = search.step_length(&parsed.raw);
            let mut f = flags.clone();
            f.plan.duration = Some(warmup + step);
            f.plan.warmup = Some(warmup);
            stepped = f;
            &stepped
        }
        None => flags,
    };
    let Some(duration) = flags
        .plan
        .duration
        .filter(|_| parsed.raw.scenario.len() > 1)
    else {
        return laid_over(parsed, flags, None);
    };
    // --duration over several scenarios scales the plan's timeline, which
    // is known once the plan as written (with the other flags) stands. The
    // warm-ups play no part in it, and may only fit the scaled timeline.
    let mut parsed = parsed;
    if let Some(run) = parsed.raw.run.as_mut() {
        run.warmup = None;
    }
    for s in &mut parsed.raw.scenario {
        s.get_mut().warmup = None;
    }
    let written = laid_over(
        parsed,
        &Flags {
            plan: Overlay {
                duration: None,
                warmup: None,
                ..flags.plan.clone()
            },
            ..flags.clone()
        },
        None,
    )?;
    let timeline = timeline::Timeline::new(&written, duration).map_err(|e| PlanErrors {
        source: source.clone(),
        errors: vec![e],
    })?;
    laid_over(read()?, flags, Some(&timeline))
}

/// Reads and validates a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    resolve_all(Some(path), &Flags::default())
}

/// Parses and validates plan text; relative data and body files are read
/// from `base`.
pub fn parse(text: &str, source: &str, base: &Path) -> Result<Plan, PlanErrors> {
    let parsed = from_toml(text, source)?;
    validate::validate(
        &parsed.raw,
        validate::Input {
            text,
            source,
            base,
            flags: BTreeMap::new(),
            errors: parsed.errors,
            dropped: parsed.dropped,
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

fn from_toml(text: &str, source: &str) -> Result<parse::Parsed, PlanErrors> {
    parse::parse(text).map_err(|errors| PlanErrors {
        source: source.to_string(),
        errors,
    })
}

#[cfg(test)]
mod tests;
