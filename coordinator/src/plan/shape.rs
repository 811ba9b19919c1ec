//! Rate shapes: a scenario's profile (rate, or client count, over time) from
//! `rate`/`clients` with `duration`, from `stages`, or from `steps`; and the
//! reshaping flags laid over it.

use std::ops::Range;
use std::time::Duration;

use loadfleet_proto::bounds::{MAX_CLIENTS, MAX_RATE, MAX_SCENARIO, MAX_STAGES};
use loadfleet_proto::schedule::Stage;
use toml::Spanned;

use super::check::Check;
use super::raw::{RawScenario, RawStage, RawSteps, Reshape};

/// What the levels of a profile count, for messages and bounds.
#[derive(Clone, Copy)]
pub(super) struct Unit {
    pub name: &'static str,
    pub ceiling: f64,
}

impl Unit {
    pub(super) fn of(closed: bool) -> Self {
        if closed {
            Unit {
                name: "clients",
                ceiling: MAX_CLIENTS,
            }
        } else {
            Unit {
                name: "rate",
                ceiling: MAX_RATE,
            }
        }
    }

    /// Is `v` a level a plan may ask for? Records the mistake when not.
    fn check(self, c: &mut Check<'_>, field: String, sp: Range<usize>, v: f64) -> bool {
        let unit = self.name;
        if !v.is_finite() || v < 0.0 {
            c.err(
                field,
                Some(sp),
                format!("{unit} {v} is negative or not a number; use a {unit} >= 0 (0 pauses)"),
            );
            false
        } else if v > self.ceiling {
            c.err(
                field,
                Some(sp),
                format!(
                    "{unit} {v} is more than {} a single plan can drive; split it into scenarios or check the units",
                    self.ceiling
                ),
            );
            false
        } else {
            true
        }
    }
}

/// The scenario's profile as written (empty when it is missing or wrong).
pub(super) fn profile(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    unit: Unit,
) -> Vec<Stage> {
    let span = spanned.span();
    let s = spanned.get_ref();
    let at = |field: &str| format!("scenario[{i}].{field}");
    let shapes = [
        s.stages.is_some(),
        s.steps.is_some(),
        s.rate.is_some() || s.clients.is_some(),
    ];
    if shapes.iter().filter(|&&b| b).count() > 1 {
        c.err(
            at("stages"),
            Some(span.clone()),
            "give one shape: rate/clients with duration, stages, or steps",
        );
    }
    if s.duration.is_some() && s.is_shaped() {
        c.err(
            at("duration"),
            s.duration.as_ref().map(Spanned::span),
            "stages and steps set the length themselves; remove duration",
        );
    }
    if let Some(raw_stages) = &s.stages {
        if raw_stages.is_empty() {
            c.err(
                at("stages"),
                Some(span.clone()),
                "stages is empty; add e.g. { to = 100, over = \"10s\" }",
            );
        }
        if !c.at_most_entries(
            &at("stages"),
            Some(span.clone()),
            raw_stages.len(),
            MAX_STAGES,
            "use fewer, longer stages",
        ) {
            return Vec::new();
        }
        let from = match &s.from {
            None => 0.0,
            Some(f) => {
                if !unit.check(c, at("from"), f.span(), *f.get_ref()) {
                    return Vec::new();
                }
                *f.get_ref()
            }
        };
        stages(c, i, raw_stages, from, unit)
    } else if let Some(steps) = &s.steps {
        self::steps(c, i, steps, unit)
    } else {
        constant(c, i, spanned, unit)
    }
}

/// `stages = [...]`: ramps, holds, jumps, and gaps (pauses) before stages
/// placed with `at`.
fn stages(
    c: &mut Check<'_>,
    i: usize,
    raw: &[Spanned<RawStage>],
    from: f64,
    unit: Unit,
) -> Vec<Stage> {
    let mut stages = Vec::new();
    let mut level = from;
    let mut elapsed = Duration::ZERO;
    for (k, st) in raw.iter().enumerate() {
        let sp = st.span();
        let f = |name: &str| format!("scenario[{i}].stages[{k}].{name}");
        let st = st.get_ref();
        if let Some(at_s) = &st.at {
            if let Some(at_d) = c
                .plain_duration(&f("at"), sp.clone(), at_s)
                .filter(|&d| c.at_most(&f("at"), Some(sp.clone()), d, MAX_SCENARIO))
            {
                if at_d < elapsed {
                    c.err(
                        f("at"),
                        Some(sp.clone()),
                        format!("overlapping stages: this stage starts at {at_s} but the stages before it run until {}; move it later or shorten them", humantime::format_duration(elapsed)),
                    );
                } else if at_d > elapsed {
                    // A gap between stages is a pause.
                    stages.push(Stage {
                        duration_ns: (at_d - elapsed).as_nanos() as u64,
                        from_rps: 0.0,
                        to_rps: 0.0,
                    });
                    level = 0.0;
                    elapsed = at_d;
                }
            }
        }
        let kinds = [
            st.to.is_some() || st.over.is_some(),
            st.hold.is_some(),
            st.rate.is_some() || st.for_.is_some(),
        ];
        if kinds.iter().filter(|&&b| b).count() != 1 {
            c.err(
                format!("scenario[{i}].stages[{k}]"),
                Some(sp.clone()),
                "a stage is one of { to = R, over = \"10s\" }, { hold = \"30s\" } or { rate = R, for = \"30s\" }",
            );
            continue;
        }
        let (from, to, dur) = if let (Some(to), Some(over)) = (st.to, &st.over) {
            (level, to, c.plain_duration(&f("over"), sp.clone(), over))
        } else if let Some(hold) = &st.hold {
            (level, level, c.plain_duration(&f("hold"), sp.clone(), hold))
        } else if let (Some(r), Some(d)) = (st.rate, &st.for_) {
            (r, r, c.plain_duration(&f("for"), sp.clone(), d))
        } else {
            c.err(
                format!("scenario[{i}].stages[{k}]"),
                Some(sp.clone()),
                "incomplete stage: { to, over } and { rate, for } need both keys",
            );
            continue;
        };
        let field = f(if st.rate.is_some() { "rate" } else { "to" });
        if !unit.check(c, field, sp.clone(), to) {
            continue;
        }
        if let Some(d) = dur {
            if d.is_zero() {
                c.err(
                    f("duration"),
                    Some(sp.clone()),
                    "a stage must last longer than 0s",
                );
                continue;
            }
            if !c.at_most(&f("duration"), Some(sp.clone()), d, MAX_SCENARIO) {
                continue;
            }
            stages.push(Stage {
                duration_ns: d.as_nanos() as u64,
                from_rps: from,
                to_rps: to,
            });
            elapsed = elapsed.saturating_add(d);
            level = to;
        }
    }
    stages
}

/// `steps = { from, to, step, every }`: a staircase.
fn steps(c: &mut Check<'_>, i: usize, steps: &Spanned<RawSteps>, unit: Unit) -> Vec<Stage> {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let sp = steps.span();
    let st = steps.get_ref();
    let mut stages = Vec::new();
    let Some(every) = c.plain_duration(&at("steps.every"), sp.clone(), &st.every) else {
        return stages;
    };
    let ok = unit.check(c, at("steps.from"), sp.clone(), st.from)
        & unit.check(c, at("steps.to"), sp.clone(), st.to);
    if st.step <= 0.0 || !st.step.is_finite() {
        c.err(
            at("steps.step"),
            Some(sp),
            "step must be above 0 (it is added until `to` is reached)",
        );
    } else if every.is_zero() {
        c.err(at("steps.every"), Some(sp), "every must be longer than 0s");
    } else if !c.at_most(&at("steps.every"), Some(sp.clone()), every, MAX_SCENARIO) {
    } else if ok {
        // Refused, never cut short: a staircase that stopped early would
        // not be the one asked for.
        let count = ((st.to - st.from).abs() / st.step).ceil() + 1.0;
        if count > MAX_STAGES as f64 {
            c.err(
                at("steps"),
                Some(sp),
                format!(
                    "expands to {count:.0} stages, more than the {MAX_STAGES} allowed; use a larger step"
                ),
            );
            return stages;
        }
        let down = st.to < st.from;
        let mut level = st.from;
        loop {
            stages.push(Stage {
                duration_ns: every.as_nanos() as u64,
                from_rps: level,
                to_rps: level,
            });
            if (!down && level >= st.to) || (down && level <= st.to) || stages.len() >= MAX_STAGES {
                break;
            }
            level = if down {
                (level - st.step).max(st.to)
            } else {
                (level + st.step).min(st.to)
            };
        }
    }
    stages
}

/// `rate = R` (or `clients = N`) held for `duration`.
fn constant(c: &mut Check<'_>, i: usize, spanned: &Spanned<RawScenario>, unit: Unit) -> Vec<Stage> {
    let span = spanned.span();
    let s = spanned.get_ref();
    let at = |field: &str| format!("scenario[{i}].{field}");
    let level = if unit.name == "clients" {
        s.clients.as_ref().map(|v| (*v.get_ref() as f64, v.span()))
    } else {
        s.rate.as_ref().map(|v| (*v.get_ref(), v.span()))
    };
    let duration = c.duration(&at("duration"), &s.duration);
    match (level, duration) {
        // A shape taken out for its type is reported already.
        (None, _) if c.dropped(&at("stages")) || c.dropped(&at("steps")) => {}
        (None, _) => c.err(
            at(unit.name),
            Some(span),
            format!(
                "missing; give {} = N with duration, or stages, or steps",
                unit.name
            ),
        ),
        (Some(_), None) if s.duration.is_none() => c.err(
            at("duration"),
            Some(span),
            "missing; add duration = \"30s\"",
        ),
        (Some((v, sp)), Some(d)) => {
            if d.is_zero() {
                c.err(
                    at("duration"),
                    s.duration.as_ref().map(Spanned::span),
                    "must be longer than 0s",
                );
            } else if !c.at_most(
                &at("duration"),
                s.duration.as_ref().map(Spanned::span),
                d,
                MAX_SCENARIO,
            ) {
            } else if unit.check(c, at(unit.name), sp, v) {
                return vec![Stage {
                    duration_ns: d.as_nanos() as u64,
                    from_rps: v,
                    to_rps: v,
                }];
            }
        }
        _ => {}
    }
    Vec::new()
}

/// Lays the reshaping flags over a valid profile, in the order a user reads
/// them: the level (`--rate`/`--clients` scale the shape so that its peak
/// is the new level), the length (`--duration` stretches every stage alike,
/// so a ramp keeps its rates over the new length), then the start (`--ramp`
/// replaces the first stretch by a ramp from 0 to where the shape is then).
pub(super) fn reshape(
    c: &mut Check<'_>,
    mut stages: Vec<Stage>,
    r: &Reshape,
    unit: Unit,
) -> Vec<Stage> {
    if let Some((level, flag)) = r.level {
        let peak = stages
            .iter()
            .map(|s| s.from_rps.max(s.to_rps))
            .fold(0.0, f64::max);
        if level > unit.ceiling {
            c.err(flag, None, format!("must be at most {}", unit.ceiling));
            return Vec::new();
        }
        if peak <= 0.0 {
            c.err(
                flag,
                None,
                "the plan's shape never sends (its peak is 0), so there is nothing to scale",
            );
            return Vec::new();
        }
        for s in &mut stages {
            s.from_rps = s.from_rps / peak * level;
            s.to_rps = s.to_rps / peak * level;
        }
    }
    if let Some(d) = r.duration {
        if d.is_zero() || d > MAX_SCENARIO {
            c.err(
                "--duration",
                None,
                format!(
                    "must be above 0 and at most {}",
                    humantime::format_duration(MAX_SCENARIO)
                ),
            );
            return Vec::new();
        }
        stages = stretch(&stages, d.as_nanos() as u64);
    }
    if let Some(ramp) = r.ramp.filter(|r| !r.is_zero()) {
        let total = length(&stages);
        let ramp_ns = ramp.as_nanos() as u64;
        if ramp_ns >= total {
            c.err(
                "--ramp",
                None,
                format!(
                    "must be shorter than --duration ({}); the rest keeps the plan's shape",
                    humantime::format_duration(Duration::from_nanos(total))
                ),
            );
            return Vec::new();
        }
        stages = ramp_start(&stages, ramp_ns);
    }
    stages
}

/// How long a profile lasts, in nanoseconds.
pub(super) fn length(stages: &[Stage]) -> u64 {
    stages.iter().map(|s| s.duration_ns).sum()
}

/// The same shape over `total` nanoseconds: every stage scaled alike; the
/// last takes the rounding, so the length is exact.
fn stretch(stages: &[Stage], total: u64) -> Vec<Stage> {
    let old = length(stages);
    let factor = total as f64 / old.max(1) as f64;
    let mut out = Vec::with_capacity(stages.len());
    let mut used = 0u64;
    for (k, s) in stages.iter().enumerate() {
        let ns = if k + 1 == stages.len() {
            total.saturating_sub(used)
        } else {
            ((s.duration_ns as f64 * factor).round() as u64).min(total - used)
        };
        used += ns;
        if ns > 0 {
            out.push(Stage {
                duration_ns: ns,
                ..*s
            });
        }
    }
    out
}

/// The shape with its first `ramp_ns` replaced by a linear ramp from 0 to
/// the level the shape has at that instant (`ramp_ns` is inside the shape).
fn ramp_start(stages: &[Stage], ramp_ns: u64) -> Vec<Stage> {
    let mut out = Vec::with_capacity(stages.len() + 1);
    let mut start = 0u64;
    for s in stages {
        let end = start + s.duration_ns;
        if end <= ramp_ns {
            start = end;
            continue;
        }
        if start < ramp_ns {
            let into = (ramp_ns - start) as f64 / s.duration_ns as f64;
            let level = s.from_rps + (s.to_rps - s.from_rps) * into;
            out.push(Stage {
                duration_ns: ramp_ns,
                from_rps: 0.0,
                to_rps: level,
            });
            out.push(Stage {
                duration_ns: end - ramp_ns,
                from_rps: level,
                to_rps: s.to_rps,
            });
        } else {
            out.push(*s);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn stage(secs: u64, from: f64, to: f64) -> Stage {
        Stage {
            duration_ns: secs * S,
            from_rps: from,
            to_rps: to,
        }
    }

    #[test]
    fn stretching_keeps_the_rates() {
        let shape = [stage(10, 0.0, 200.0), stage(20, 200.0, 200.0)];
        let out = stretch(&shape, 15 * S);
        assert_eq!(out, vec![stage(5, 0.0, 200.0), stage(10, 200.0, 200.0)]);
    }

    #[test]
    fn a_ramp_reaches_the_shape_where_it_is() {
        let held = ramp_start(&[stage(10, 200.0, 200.0)], S);
        assert_eq!(held, vec![stage(1, 0.0, 200.0), stage(9, 200.0, 200.0)]);
        let ramped = ramp_start(&[stage(10, 0.0, 200.0)], 5 * S);
        assert_eq!(ramped, vec![stage(5, 0.0, 100.0), stage(5, 100.0, 200.0)]);
    }
}
