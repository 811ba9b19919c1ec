//! A scenario's load in words, made once from the validated plan and kept
//! in the report (`scenarios[].load`) by [`name_loads`], so the text
//! report and the page say the same thing: `ramp 0→2000 req/s over 3s
//! then 2000 req/s (uniform, 1500 req/s on average)`, `50 clients, think
//! 100ms`. A mean offered rate alone hides a ramp, and a bare `closed`
//! hides the population.

use loadfleet_proto::schedule::{Process, Stage};

use super::format::secs;
use crate::plan::{Model, Plan};
use crate::report_model::Report;
use crate::units;

/// At most this many parts are spelled out; the rest are counted, so a
/// plan with hundreds of stages still gives one readable line.
const MAX_PARTS: usize = 6;

/// Names each scenario's load in `report` from the `plan` it ran; the
/// report's scenarios are the plan's, in the plan's order. A flow
/// scenario's arrivals are flows, and its rates say so.
pub(crate) fn name_loads(report: &mut Report, plan: &Plan) {
    for (s, planned) in report.scenarios.iter_mut().zip(&plan.scenarios) {
        let per = if planned.is_flow() {
            "flows/s"
        } else {
            "req/s"
        };
        s.load = describe(&planned.model, per);
    }
}

/// The shape of `model` for a scenario line, without the model's name;
/// `per` names an open model's rate (`req/s`, `flows/s`).
pub(crate) fn describe(model: &Model, per: &'static str) -> String {
    match model {
        Model::Open(schedule) => {
            let parts = parts(schedule.stages());
            let process = match schedule.process() {
                Process::Uniform => "uniform",
                Process::Poisson { .. } => "poisson",
            };
            let seconds = units::ns_to_s(schedule.duration_ns());
            // A held rate is its own mean.
            let held = matches!(parts[..], [Part::Hold { .. }]);
            let mean = if !held && seconds > 0.0 {
                format!(
                    ", {} {per} on average",
                    level(schedule.expected_count() / seconds)
                )
            } else {
                String::new()
            };
            format!("{} ({process}{mean})", render(&parts, Unit::Rate(per)))
        }
        Model::Closed(population) => {
            let think = if population.think.is_zero() {
                "no think time".to_string()
            } else {
                format!("think {}", duration(population.think.as_nanos() as u64))
            };
            format!(
                "{}, {think}",
                render(&parts(&population.stages), Unit::Clients)
            )
        }
    }
}

/// What the levels count.
#[derive(Clone, Copy)]
enum Unit {
    /// Arrivals per second, named (`req/s`, `flows/s`).
    Rate(&'static str),
    Clients,
}

impl Unit {
    fn of(self, v: f64) -> String {
        match self {
            Unit::Rate(per) => format!("{} {per}", level(v)),
            Unit::Clients if v == 1.0 => "1 client".into(),
            Unit::Clients => format!("{} clients", level(v)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Rate(per) => per,
            Unit::Clients => "clients",
        }
    }
}

/// A stretch of the profile as a reader names it.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// One level (0 is a pause).
    Hold { level: f64, ns: u64 },
    /// A linear change.
    Ramp { from: f64, to: f64, ns: u64 },
    /// Equal holds, each `step` above (or below) the one before; the last
    /// may be a smaller step, where a staircase is clipped at its `to`.
    Steps {
        from: f64,
        to: f64,
        step: f64,
        every_ns: u64,
    },
}

/// The stages as holds and ramps, holds at one level merged, and
/// staircases taken as one part.
fn parts(stages: &[Stage]) -> Vec<Part> {
    let mut simple: Vec<Part> = Vec::new();
    for s in stages {
        if s.from_rps == s.to_rps {
            if let Some(Part::Hold { level, ns }) = simple.last_mut() {
                if *level == s.from_rps {
                    *ns = ns.saturating_add(s.duration_ns);
                    continue;
                }
            }
            simple.push(Part::Hold {
                level: s.from_rps,
                ns: s.duration_ns,
            });
        } else {
            simple.push(Part::Ramp {
                from: s.from_rps,
                to: s.to_rps,
                ns: s.duration_ns,
            });
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < simple.len() {
        match staircase(&simple[i..]) {
            Some((n, steps)) => {
                out.push(steps);
                i += n;
            }
            None => {
                out.push(simple[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// The staircase at the start of `parts`, and how many parts it takes:
/// three or more holds of one length, each one step further than the one
/// before (the last step may be shorter, where a staircase is clipped).
fn staircase(parts: &[Part]) -> Option<(usize, Part)> {
    let holds: Vec<(f64, u64)> = parts
        .iter()
        .map_while(|p| match p {
            Part::Hold { level, ns } => Some((*level, *ns)),
            _ => None,
        })
        .collect();
    let [(first, every), (second, _), ..] = holds[..] else {
        return None;
    };
    let step = second - first;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    let (mut n, mut last) = (1, first);
    for &(level, ns) in &holds[1..] {
        let d = level - last;
        if ns != every || d.signum() != step.signum() || (d.abs() > step.abs() && !close(d, step)) {
            break;
        }
        n += 1;
        last = level;
        if !close(d, step) {
            break;
        }
    }
    (n >= 3).then_some((
        n,
        Part::Steps {
            from: first,
            to: last,
            step: step.abs(),
            every_ns: every,
        },
    ))
}

fn render(parts: &[Part], unit: Unit) -> String {
    let last = parts.len().saturating_sub(1);
    let mut words: Vec<String> = parts
        .iter()
        .take(MAX_PARTS)
        .enumerate()
        .map(|(k, p)| match *p {
            Part::Hold { level, .. } if level > 0.0 && k == last => unit.of(level),
            Part::Hold { level, ns } if level > 0.0 => {
                format!("{} for {}", unit.of(level), duration(ns))
            }
            Part::Hold { ns, .. } => format!("pause {}", duration(ns)),
            Part::Ramp { from, to, ns } => format!(
                "ramp {}→{} {} over {}",
                self::level(from),
                self::level(to),
                unit.name(),
                duration(ns)
            ),
            Part::Steps {
                from,
                to,
                step,
                every_ns,
            } => format!(
                "steps {}→{} {} by {} every {}",
                self::level(from),
                self::level(to),
                unit.name(),
                self::level(step),
                duration(every_ns)
            ),
        })
        .collect();
    match parts.len().saturating_sub(MAX_PARTS) {
        0 => {}
        1 => words.push("1 more stretch".into()),
        n => words.push(format!("{n} more stretches")),
    }
    words.join(" then ")
}

/// A level without noise: 2000, 0.5, 33.33.
fn level(v: f64) -> String {
    if (v - v.round()).abs() < 0.005 {
        format!("{:.0}", v.round())
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A stage's length: 3s, 2.5s, 250ms.
fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{}s", secs(units::ns_to_s(ns)))
    } else {
        format!("{}ms", secs(units::ns_to_ms(ns)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::closed::Population;
    use loadfleet_proto::schedule::ArrivalSchedule;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn stage(secs: u64, from: f64, to: f64) -> Stage {
        Stage {
            duration_ns: secs * S,
            from_rps: from,
            to_rps: to,
        }
    }

    fn open(stages: Vec<Stage>, process: Process) -> String {
        describe(
            &Model::Open(ArrivalSchedule::new(stages, process).expect("a valid schedule")),
            "req/s",
        )
    }

    #[test]
    fn a_constant_rate_is_its_rate() {
        assert_eq!(
            open(vec![stage(30, 2000.0, 2000.0)], Process::Uniform),
            "2000 req/s (uniform)"
        );
    }

    #[test]
    fn a_ramp_then_a_hold_names_both_and_the_mean() {
        assert_eq!(
            open(
                vec![stage(3, 0.0, 2000.0), stage(3, 2000.0, 2000.0)],
                Process::Poisson { seed: 1 }
            ),
            "ramp 0→2000 req/s over 3s then 2000 req/s (poisson, 1500 req/s on average)"
        );
    }

    #[test]
    fn a_staircase_is_one_part_even_when_clipped() {
        let stairs: Vec<Stage> = [100.0, 200.0, 300.0, 350.0]
            .into_iter()
            .map(|r| stage(10, r, r))
            .collect();
        assert_eq!(
            open(stairs, Process::Uniform),
            "steps 100→350 req/s by 100 every 10s (uniform, 237.5 req/s on average)"
        );
    }

    #[test]
    fn gaps_are_pauses_and_two_levels_are_no_staircase() {
        assert_eq!(
            open(
                vec![
                    stage(5, 100.0, 100.0),
                    stage(2, 0.0, 0.0),
                    stage(5, 200.0, 200.0)
                ],
                Process::Uniform
            ),
            "100 req/s for 5s then pause 2s then 200 req/s (uniform, 125 req/s on average)"
        );
    }

    #[test]
    fn many_stretches_are_counted_not_listed() {
        let zigzag: Vec<Stage> = (0..10)
            .map(|k| {
                if k % 2 == 0 {
                    stage(1, 0.0, 100.0)
                } else {
                    stage(1, 100.0, 0.0)
                }
            })
            .collect();
        let line = open(zigzag, Process::Uniform);
        assert!(line.contains("then 4 more stretches"), "{line}");
        assert_eq!(line.matches("ramp").count(), MAX_PARTS, "{line}");
    }

    #[test]
    fn a_population_says_its_clients_and_think_time() {
        let closed =
            |stages, think| describe(&Model::Closed(Population { stages, think }), "req/s");
        assert_eq!(
            closed(vec![stage(10, 50.0, 50.0)], Duration::from_millis(100)),
            "50 clients, think 100ms"
        );
        assert_eq!(
            closed(
                vec![stage(10, 0.0, 20.0), stage(20, 20.0, 20.0)],
                Duration::ZERO
            ),
            "ramp 0→20 clients over 10s then 20 clients, no think time"
        );
        assert_eq!(
            closed(vec![stage(1, 1.0, 1.0)], Duration::from_millis(1500)),
            "1 client, think 1.5s"
        );
    }
}
