//! The load model a profile drives: open (arrivals at a rate, uniform or
//! Poisson) or closed (a client population with think time), with the
//! bounds every agent will hold it to.

use std::time::Duration;

use loadfleet_proto::bounds::{MAX_ARRIVALS, MAX_SCENARIO, MAX_STAGES, MAX_THINK};
use loadfleet_proto::closed::Population;
use loadfleet_proto::schedule::{ArrivalSchedule, Process, Stage};
use toml::Spanned;

use super::check::Check;
use super::raw::RawScenario;
use super::validated::Model;

/// Is the scenario closed? Records an unknown model, and the keys that only
/// one of the two models takes.
pub(super) fn is_closed(c: &mut Check<'_>, i: usize, s: &RawScenario) -> bool {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let closed = match s.model.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("open", _)) => false,
        Some(("closed", _)) => true,
        Some((other, sp)) => {
            c.err(
                at("model"),
                Some(sp),
                format!(
                    "{other:?} is not a model; use \"open\" or \"closed\"{}",
                    crate::suggest::did_you_mean(other, ["open", "closed"])
                ),
            );
            false
        }
    };
    if closed && s.rate.is_some() {
        c.err(
            at("rate"),
            s.rate.as_ref().map(Spanned::span),
            "a closed scenario has clients, not a rate; use clients = N",
        );
    }
    if !closed && s.clients.is_some() {
        c.err(
            at("clients"),
            s.clients.as_ref().map(Spanned::span),
            "clients only apply to model = \"closed\"; use rate for an open scenario",
        );
    }
    if !closed && s.think.is_some() {
        c.err(
            at("think"),
            s.think.as_ref().map(Spanned::span),
            "think time only applies to model = \"closed\"",
        );
    }
    closed
}

/// The model of scenario `i` over `stages`, and its length; `None` after a
/// mistake (recorded).
pub(super) fn model(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    stages: Vec<Stage>,
    closed: bool,
    seed: u64,
    clean: bool,
) -> Option<(Model, Duration)> {
    let span = spanned.span();
    let s = spanned.get_ref();
    let at = |field: &str| format!("scenario[{i}].{field}");
    let total_ns: u128 = stages.iter().map(|s| u128::from(s.duration_ns)).sum();
    // The profile as agents get it (gaps and --ramp add stages).
    if !c.at_most_entries(
        &at("stages"),
        Some(span.clone()),
        stages.len(),
        MAX_STAGES,
        "use fewer, longer stages",
    ) {
        return None;
    }
    let model = if closed {
        let think = c
            .bounded_duration(&at("think"), &s.think, MAX_THINK)
            .unwrap_or_default();
        if stages.iter().all(|st| st.from_rps < 1.0 && st.to_rps < 1.0) && clean {
            c.err(
                at("clients"),
                Some(span.clone()),
                "the scenario never has a single client; use clients >= 1",
            );
        }
        Some(Model::Closed(Population { stages, think }))
    } else {
        let process = match s.process.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
            None | Some(("uniform", _)) => Process::Uniform,
            Some(("poisson", _)) => Process::Poisson { seed },
            Some((other, sp)) => {
                c.err(
                    at("process"),
                    Some(sp),
                    format!("{other:?} is not an arrival process; use \"uniform\" or \"poisson\""),
                );
                Process::Uniform
            }
        };
        if stages.is_empty() {
            None
        } else {
            match ArrivalSchedule::new(stages, process) {
                Ok(schedule) => Some(Model::Open(schedule)),
                Err(e) => {
                    c.err(at("stages"), Some(span.clone()), e.to_string());
                    None
                }
            }
        }
    };
    if total_ns > MAX_SCENARIO.as_nanos() {
        c.err(
            at("duration"),
            Some(span),
            format!(
                "the scenario lasts longer than {}; shorten it",
                humantime::format_duration(MAX_SCENARIO)
            ),
        );
        return None;
    }
    if let Some(Model::Open(schedule)) = &model {
        if schedule.expected_count() > MAX_ARRIVALS {
            c.err(
                at("rate"),
                Some(span),
                format!(
                    "the scenario asks for {:.0} arrivals, more than the {MAX_ARRIVALS:.0} one scenario may hold; lower the rate or the duration",
                    schedule.expected_count()
                ),
            );
            return None;
        }
    }
    Some((model?, Duration::from_nanos(total_ns as u64)))
}
