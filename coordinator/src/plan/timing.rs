//! When a scenario starts (at an offset, or after another one) and how much
//! of its beginning is warm-up.

use std::time::Duration;

use loadfleet_proto::bounds::MAX_START;
use toml::Spanned;

use super::check::Check;
use super::raw::RawScenario;
use super::validated::{RunSettings, Scenario};

/// The start of scenario `i`; `before` holds the scenarios already resolved.
/// It is at most [`MAX_START`] after the run's start, so no end instant can
/// overflow.
pub(super) fn start(c: &mut Check<'_>, i: usize, s: &RawScenario, before: &[Scenario]) -> Duration {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let start = resolve(c, i, s, before);
    let (field, span) = match (&s.start, &s.after) {
        (_, Some(a)) => (at("after"), Some(a.span())),
        (s, None) => (at("start"), s.as_ref().map(Spanned::span)),
    };
    if c.at_most(&field, span, start, MAX_START) {
        start
    } else {
        Duration::ZERO
    }
}

fn resolve(c: &mut Check<'_>, i: usize, s: &RawScenario, before: &[Scenario]) -> Duration {
    let at = |field: &str| format!("scenario[{i}].{field}");
    match (&s.start, &s.after) {
        (Some(_), Some(a)) => {
            c.err(at("after"), Some(a.span()), "give start or after, not both");
            Duration::ZERO
        }
        (Some(_), None) => c.duration(&at("start"), &s.start).unwrap_or_default(),
        (None, Some(a)) => {
            let wanted = a.get_ref();
            let prev = if wanted == "previous" {
                before.last()
            } else {
                before.iter().find(|p| &p.name == wanted)
            };
            match prev {
                Some(p) => p.end(),
                None => {
                    c.err(
                        at("after"),
                        Some(a.span()),
                        if wanted == "previous" {
                            "there is no previous scenario; remove after or use start".to_string()
                        } else {
                            format!("no earlier scenario is named {wanted:?}; use \"previous\" or an earlier scenario's name")
                        },
                    );
                    Duration::ZERO
                }
            }
        }
        (None, None) => Duration::ZERO,
    }
}

/// The warm-up of scenario `i`, which must leave something to measure.
pub(super) fn warmup(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    run: &RunSettings,
    duration: Duration,
) -> Duration {
    let s = spanned.get_ref();
    let field = format!("scenario[{i}].warmup");
    let warmup = c.duration(&field, &s.warmup).unwrap_or(run.warmup);
    if !duration.is_zero() && warmup >= duration {
        c.err(
            field,
            s.warmup.as_ref().map(Spanned::span).or(Some(spanned.span())),
            format!(
                "warm-up ({}) is as long as the scenario ({}): nothing would be measured; shorten it",
                humantime::format_duration(warmup),
                humantime::format_duration(duration)
            ),
        );
    }
    warmup
}
