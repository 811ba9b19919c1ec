//! When a scenario starts (at an offset, or after another one) and how much
//! of its beginning is warm-up.

use std::ops::Range;
use std::time::Duration;

use loadfleet_proto::bounds::MAX_START;
use toml::Spanned;

use super::check::Check;
use super::raw::RawScenario;
use super::validated::Scenario;

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

/// What a scenario inherits from `[run] warmup`: its value and where the
/// file says it, so that a mistake names `run.warmup` and its line.
pub(super) struct RunWarmup {
    pub value: Duration,
    pub span: Option<Range<usize>>,
}

/// The warm-up of scenario `i` (named `name`), which must leave something
/// to measure. `scale` is how much `--duration` shortened or lengthened the
/// scenario's schedule: a shorter run keeps the plan's split between
/// warm-up and measurement, so its warm-up shrinks alike; a longer one
/// keeps the warm-up as written (the target needs no longer to warm up). A
/// warm-up given by `--warmup` is taken as given.
pub(super) fn warmup(
    c: &mut Check<'_>,
    (i, name): (usize, &str),
    spanned: &Spanned<RawScenario>,
    run: &RunWarmup,
    duration: Duration,
    scale: f64,
) -> Duration {
    let s = spanned.get_ref();
    let own = format!("scenario[{i}].warmup");
    let (field, span, written) = match c.duration(&own, &s.warmup) {
        Some(w) => (own, s.warmup.as_ref().map(Spanned::span), w),
        None => ("run.warmup".to_string(), run.span.clone(), run.value),
    };
    let warmup = if scale < 1.0 && !c.set_by_flag(&field) {
        written.mul_f64(scale)
    } else {
        written
    };
    if !duration.is_zero() && warmup >= duration {
        let (whose, fix) = if c.set_by_flag(&field) {
            ("the warm-up", "give a shorter --warmup")
        } else if field == "run.warmup" {
            (
                "the [run] warmup",
                "shorten it, or give this scenario its own warmup",
            )
        } else {
            ("the scenario's warmup", "shorten it")
        };
        c.err(
            field,
            span.or(Some(spanned.span())),
            format!(
                "{whose} ({}) is as long as scenario {name:?} ({}): nothing would be measured; {fix}",
                humantime::format_duration(warmup),
                humantime::format_duration(duration)
            ),
        );
    }
    warmup
}
