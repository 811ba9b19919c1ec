//! The plan's `[search]` table (docs/search.md), with the `search` flags
//! laid over it and checked like the rest of the plan: each mistake names
//! its field and line, or its flag. What only a search needs (an SLO, the
//! highest step) is asked for by `crate::search`, since `plan check` and
//! `run` take a plan without them.

use std::time::Duration;

use loadfleet_proto::bounds::MAX_RATE;
use toml::Spanned;

use super::check::Check;
use super::raw::RawSearch;
use crate::thresholds::Threshold;

/// The measured window of each step.
pub(super) const DEFAULT_STEP: Duration = Duration::from_secs(30);
/// The warm-up before each step's window: fresh connections and a cold
/// target are reported apart.
pub(super) const DEFAULT_WARMUP: Duration = Duration::from_secs(5);
/// 5%: the gap between the last pass and the first failure, as a share
/// of the passing rate, at which bisection stops.
const DEFAULT_RESOLUTION: f64 = 0.05;
/// Most times a step near the boundary is run.
const MAX_REPEAT: i64 = 9;

/// What a capacity search varies from step to step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Vary {
    /// The open-model scenarios' arrival rate, scaled together.
    Rate,
    /// The closed-model scenarios' client count, scaled together.
    Clients,
}

impl Vary {
    /// The word of the flag and the plan.
    pub fn word(self) -> &'static str {
        match self {
            Vary::Rate => "rate",
            Vary::Clients => "clients",
        }
    }

    /// An amount of what is varied, as the summary writes it: whole
    /// requests or clients when it is one.
    pub fn amount(self, v: f64) -> String {
        let unit = match self {
            Vary::Rate => "req/s",
            Vary::Clients => "clients",
        };
        if (v - v.round()).abs() < 1e-6 {
            format!("{v:.0} {unit}")
        } else {
            format!("{v:.1} {unit}")
        }
    }

    /// What the steps are named by, in a sentence.
    pub fn noun(self) -> &'static str {
        match self {
            Vary::Rate => "rate",
            Vary::Clients => "client count",
        }
    }
}

/// A search's course and judge as the plan and flags give them, defaults
/// filled in; `slo` and `to` may still be missing.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    pub slo: Vec<Threshold>,
    /// `None` until the plan's scenarios decide (see `crate::search`).
    pub vary: Option<Vary>,
    pub from: f64,
    pub to: Option<f64>,
    pub resolution: f64,
    /// The measured window of each step.
    pub step: Duration,
    /// The warm-up before it, reported apart.
    pub warmup: Duration,
    pub repeat: u32,
}

impl SearchPlan {
    /// The rate the ladder starts from when neither `--from` nor the plan
    /// says: low enough for almost any target to pass.
    pub const DEFAULT_FROM: f64 = 10.0;
}

/// The `[search]` table, defaults filled in.
pub(super) fn search(c: &mut Check<'_>, raw: Option<&Spanned<RawSearch>>) -> SearchPlan {
    let empty = RawSearch::default();
    let s = raw.map_or(&empty, Spanned::get_ref);
    let mut slo = Vec::new();
    for (i, t) in s.slo.iter().enumerate() {
        match t.get_ref().parse::<Threshold>() {
            Ok(th) => slo.push(th),
            Err(e) => c.err(format!("search.slo[{i}]"), Some(t.span()), e),
        }
    }
    let mut rate = |field: &str, v: &Option<Spanned<f64>>| {
        let v = v.as_ref()?;
        let r = *v.get_ref();
        if r.is_finite() && r > 0.0 && r <= MAX_RATE {
            return Some(r);
        }
        c.err(
            field,
            Some(v.span()),
            format!("{r}: a rate in req/s (or clients) above 0 and at most {MAX_RATE}"),
        );
        None
    };
    let from = rate("search.from", &s.from).unwrap_or(SearchPlan::DEFAULT_FROM);
    let to = rate("search.to", &s.to);
    if let Some(to) = to.filter(|&to| to <= from) {
        c.err(
            "search.to",
            s.to.as_ref().map(Spanned::span),
            format!("{to} must be above --from {from} (`from` in [search]): the search looks between them"),
        );
    }
    let resolution = s.resolution.as_ref().and_then(|r| {
        let read = crate::thresholds::percent(r.get_ref()).and_then(|v| {
            if (0.001..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "{:.1}%: give 0.1% to 100% of the rate, e.g. 5%",
                    v * 100.0
                ))
            }
        });
        read.map_err(|e| c.err("search.resolution", Some(r.span()), e))
            .ok()
    });
    let step = c.duration("search.step", &s.step).unwrap_or(DEFAULT_STEP);
    if step < Duration::from_secs(1) {
        c.err(
            "search.step",
            s.step.as_ref().map(Spanned::span),
            "must be at least 1s: the window is read in whole seconds",
        );
    }
    let vary = s.vary.as_ref().and_then(|v| match v.get_ref().as_str() {
        "rate" => Some(Vary::Rate),
        "clients" => Some(Vary::Clients),
        other => {
            c.err(
                "search.vary",
                Some(v.span()),
                format!("{other:?}: use \"rate\" (the open scenarios' rate) or \"clients\" (the closed population)"),
            );
            None
        }
    });
    SearchPlan {
        slo,
        vary,
        from,
        to,
        resolution: resolution.unwrap_or(DEFAULT_RESOLUTION),
        step,
        warmup: c
            .duration("search.warmup", &s.warmup)
            .unwrap_or(DEFAULT_WARMUP),
        repeat: c
            .positive("search.repeat", &s.repeat, MAX_REPEAT)
            .unwrap_or(1),
    }
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
