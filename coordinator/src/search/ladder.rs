//! The search's course as pure functions: which rate to try next, given
//! what the steps so far showed. Nothing here runs anything, so every path
//! (ladder, bisection, repeats, recovery, the honesty stops) is checked by
//! properties against an imaginary target with a known capacity.
//!
//! The course: an expanding ladder from `from`, doubling up to `to`, until
//! a step fails; then the last passing rate once more (does the target
//! recover?); then bisection between the last pass and the first failure
//! until they are within `resolution` of each other. Each step of the
//! bisection, and the failing ladder step, is run `repeat` times, and the
//! medians decide (the caller folds a step's runs into one [`Judged`]).

use serde::{Deserialize, Serialize};

/// The settings the course follows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Course {
    pub from: f64,
    pub to: f64,
    /// The gap, as a share of the passing rate, at which bisection stops.
    pub resolution: f64,
    /// Runs of each step near the boundary (1: no repeats).
    pub repeat: u32,
}

/// What a step (all of its runs) showed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Judged {
    /// Every SLO rule held (on the medians).
    Pass,
    /// An SLO rule broke; the text says which and by how much.
    Fail(String),
    /// The fleet could not offer the rate: nothing can be said of the target.
    Generator(String),
    /// No experiment happened (everything refused, answers below the floor).
    NoExperiment(String),
    /// The run itself failed (agents lost, interrupted).
    Broken(String),
}

/// Why a step was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Purpose {
    Ladder,
    Bisect,
    /// The last passing rate again, after a failure.
    Recovery,
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    /// Run a step at this rate, this many times.
    Step {
        rate: f64,
        runs: u32,
        purpose: Purpose,
    },
    /// The search is over.
    Done(Outcome),
}

/// How the search ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The highest passing rate, and the lowest failing one (none when
    /// `to` itself passed: the capacity is at least `to`).
    Capacity {
        rate: f64,
        failed: Option<(f64, String)>,
        /// After the failure, the last passing rate failed too: the found
        /// rate is not a steady state.
        recovered: bool,
    },
    /// Even `from` broke the SLO.
    FromFails { rate: f64, why: String },
    /// The search could not decide; `lower_bound` is the highest rate
    /// proven to pass, if any.
    Undecided {
        rate: f64,
        why: String,
        kind: Undecided,
        lower_bound: Option<f64>,
    },
}

/// Why a search was undecided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Undecided {
    Generator,
    NoExperiment,
    Broken,
}

/// The course so far.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    course: Course,
    /// The highest rate proven to pass.
    low: Option<f64>,
    /// The lowest rate seen to fail, with why.
    high: Option<(f64, String)>,
    /// Recovery: `None` until checked.
    recovered: Option<bool>,
    /// The step being run.
    current: Option<(f64, Purpose)>,
}

impl Search {
    pub(crate) fn new(course: Course) -> Self {
        Search {
            course,
            low: None,
            high: None,
            recovered: None,
            current: None,
        }
    }

    /// The first step.
    pub(crate) fn start(&mut self) -> Next {
        self.step(self.course.from, Purpose::Ladder, 1)
    }

    fn step(&mut self, rate: f64, purpose: Purpose, runs: u32) -> Next {
        self.current = Some((rate, purpose));
        Next::Step {
            rate,
            runs,
            purpose,
        }
    }

    /// Takes what the current step showed; says what comes next.
    pub(crate) fn observe(&mut self, judged: Judged) -> Next {
        let Some((rate, purpose)) = self.current.take() else {
            return Next::Done(self.undecided(
                self.course.from,
                "the search was asked to go on after it ended".into(),
                Undecided::Broken,
            ));
        };
        match judged {
            Judged::Generator(why) => Next::Done(self.undecided(rate, why, Undecided::Generator)),
            Judged::NoExperiment(why) => {
                Next::Done(self.undecided(rate, why, Undecided::NoExperiment))
            }
            Judged::Broken(why) => Next::Done(self.undecided(rate, why, Undecided::Broken)),
            Judged::Pass if purpose == Purpose::Recovery => {
                self.recovered = Some(true);
                self.bisect()
            }
            Judged::Fail(_) if purpose == Purpose::Recovery => {
                // The target stays slow at a rate it sustained before: the
                // rate is not its steady capacity, and bisecting on a
                // target that has not recovered would measure its backlog.
                self.recovered = Some(false);
                self.finish()
            }
            Judged::Pass => {
                self.low = Some(self.low.map_or(rate, |l| l.max(rate)));
                match (purpose, &self.high) {
                    (Purpose::Ladder, None) if rate >= self.course.to => self.finish(),
                    (Purpose::Ladder, None) => {
                        let next = (rate * 2.0).min(self.course.to);
                        self.step(next, Purpose::Ladder, 1)
                    }
                    _ => self.bisect(),
                }
            }
            Judged::Fail(why) => {
                if self.high.as_ref().is_none_or(|(h, _)| rate < *h) {
                    self.high = Some((rate, why.clone()));
                }
                match self.low {
                    None => Next::Done(Outcome::FromFails { rate, why }),
                    Some(low) if self.recovered.is_none() => self.step(low, Purpose::Recovery, 1),
                    Some(_) => self.bisect(),
                }
            }
        }
    }

    /// The highest rate proven to pass and the lowest seen to fail.
    pub(crate) fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.low, self.high.as_ref().map(|h| h.0))
    }

    /// The search ended before it decided (the user stopped it, the fleet
    /// ended): undecided at the step being run.
    pub(crate) fn stopped(&self, why: String) -> Outcome {
        let rate = self.current.map_or(self.course.from, |c| c.0);
        self.undecided(rate, why, Undecided::Broken)
    }

    /// Narrows the gap, or ends when it is within the resolution.
    fn bisect(&mut self) -> Next {
        match (self.low, &self.high) {
            (Some(low), Some((high, _))) if !within(low, *high, self.course.resolution) => {
                let mid = midpoint(low, *high);
                self.step(mid, Purpose::Bisect, self.course.repeat.max(1))
            }
            _ => self.finish(),
        }
    }

    fn finish(&mut self) -> Next {
        Next::Done(match self.low {
            Some(rate) => Outcome::Capacity {
                rate,
                failed: self.high.clone(),
                recovered: self.recovered != Some(false),
            },
            None => self.undecided(self.course.from, "no step passed".into(), Undecided::Broken),
        })
    }

    fn undecided(&self, rate: f64, why: String, kind: Undecided) -> Outcome {
        Outcome::Undecided {
            rate,
            why,
            kind,
            lower_bound: self.low,
        }
    }
}

/// Whether the gap between a passing and a failing rate is small enough.
pub(crate) fn within(low: f64, high: f64, resolution: f64) -> bool {
    high - low <= resolution * low
}

/// The next rate between a pass and a failure, rounded to a whole request
/// per second when the gap allows, so step rates read cleanly.
pub(crate) fn midpoint(low: f64, high: f64) -> f64 {
    let mid = (low + high) / 2.0;
    let round = mid.round();
    if round > low && round < high {
        round
    } else {
        mid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs the course against a target that passes below `capacity`.
    fn against(course: Course, capacity: f64, recovers: bool) -> (Outcome, Vec<(f64, Purpose)>) {
        let mut s = Search::new(course);
        let mut next = s.start();
        let mut steps = Vec::new();
        for _ in 0..200 {
            match next {
                Next::Done(o) => return (o, steps),
                Next::Step { rate, purpose, .. } => {
                    steps.push((rate, purpose));
                    let pass = rate <= capacity && (recovers || purpose != Purpose::Recovery);
                    next = s.observe(if pass {
                        Judged::Pass
                    } else {
                        Judged::Fail(format!("at {rate}"))
                    });
                }
            }
        }
        panic!("the course did not end in 200 steps: {steps:?}");
    }

    fn course(from: f64, to: f64) -> Course {
        Course {
            from,
            to,
            resolution: 0.05,
            repeat: 1,
        }
    }

    #[test]
    fn doubles_then_bisects_to_the_resolution() {
        let (o, steps) = against(course(50.0, 2000.0), 400.0, true);
        let rates: Vec<f64> = steps.iter().map(|s| s.0).collect();
        assert_eq!(&rates[..5], &[50.0, 100.0, 200.0, 400.0, 800.0]);
        assert_eq!(steps[5], (400.0, Purpose::Recovery));
        match o {
            Outcome::Capacity {
                rate,
                failed: Some((high, _)),
                recovered: true,
            } => {
                assert_eq!(rate, 400.0);
                assert!(within(rate, high, 0.05), "{rate} {high}");
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_target_that_does_not_recover_is_said_so() {
        let (o, _) = against(course(50.0, 2000.0), 400.0, false);
        assert!(
            matches!(o, Outcome::Capacity { rate, recovered: false, .. } if rate == 400.0),
            "{o:?}"
        );
    }

    #[test]
    fn from_failing_and_to_passing_are_their_own_ends() {
        let (o, steps) = against(course(50.0, 2000.0), 10.0, true);
        assert_eq!(steps.len(), 1);
        assert!(matches!(o, Outcome::FromFails { rate, .. } if rate == 50.0));
        let (o, steps) = against(course(50.0, 300.0), 1e9, true);
        assert_eq!(steps.last().map(|s| s.0), Some(300.0));
        assert!(matches!(o, Outcome::Capacity { rate, failed: None, .. } if rate == 300.0));
    }

    #[test]
    fn the_generator_ends_the_search_with_a_lower_bound() {
        let mut s = Search::new(course(50.0, 2000.0));
        s.start();
        s.observe(Judged::Pass);
        let next = s.observe(Judged::Generator("pool".into()));
        assert_eq!(
            next,
            Next::Done(Outcome::Undecided {
                rate: 100.0,
                why: "pool".into(),
                kind: Undecided::Generator,
                lower_bound: Some(50.0)
            })
        );
        let mut s = Search::new(course(50.0, 2000.0));
        s.start();
        assert!(matches!(
            s.observe(Judged::NoExperiment("refused".into())),
            Next::Done(Outcome::Undecided {
                kind: Undecided::NoExperiment,
                lower_bound: None,
                ..
            })
        ));
    }

    #[test]
    fn steps_near_the_boundary_are_repeated() {
        let mut s = Search::new(Course {
            repeat: 3,
            ..course(100.0, 1000.0)
        });
        assert!(matches!(s.start(), Next::Step { runs: 1, .. }));
        assert!(
            matches!(s.observe(Judged::Pass), Next::Step { runs: 1, rate, .. } if rate == 200.0)
        );
        // The failure is checked for recovery once, then bisected thrice a step.
        assert!(matches!(
            s.observe(Judged::Fail("p99".into())),
            Next::Step {
                runs: 1,
                purpose: Purpose::Recovery,
                ..
            }
        ));
        assert!(matches!(
            s.observe(Judged::Pass),
            Next::Step { runs: 3, purpose: Purpose::Bisect, rate, .. } if rate == 150.0
        ));
    }

    proptest! {
        /// Whatever the target's capacity, the search ends in few steps
        /// with a passing rate at or below the capacity and a failing one
        /// above it, within the resolution; never a rate outside from..to.
        #[test]
        fn brackets_any_capacity(
            from in 1.0f64..500.0,
            span in 1.5f64..200.0,
            capacity_at in 0.0f64..1.2,
            resolution in 0.01f64..0.3,
        ) {
            let to = from * span;
            let capacity = from + (to - from) * capacity_at;
            let c = Course { from, to, resolution, repeat: 1 };
            let (o, steps) = against(c, capacity, true);
            prop_assert!(steps.len() < 40, "{} steps", steps.len());
            for (rate, _) in &steps {
                prop_assert!(*rate >= from - 1e-9 && *rate <= to + 1e-9, "{rate}");
            }
            match o {
                Outcome::Capacity { rate, failed, recovered } => {
                    prop_assert!(recovered);
                    prop_assert!(rate <= capacity + 1e-9);
                    match failed {
                        Some((high, _)) => {
                            prop_assert!(high > capacity);
                            prop_assert!(within(rate, high, resolution));
                        }
                        None => prop_assert!(rate >= to - 1e-9 && capacity >= to - 1e-9),
                    }
                }
                Outcome::FromFails { rate, .. } => {
                    prop_assert!(rate == from && capacity < from);
                }
                Outcome::Undecided { .. } => prop_assert!(false, "undecided"),
            }
        }

        /// Whatever a target answers, in any order (a flaky one, a
        /// generator that gives out half-way), the search ends in a bounded
        /// number of steps, never asks for a rate outside from..to, and
        /// ends undecided exactly when a step said nothing of the target.
        #[test]
        fn any_answers_end_the_search(
            answers in proptest::collection::vec(0u8..10, 1..80),
            from in 1.0f64..100.0,
            span in 2.0f64..100.0,
        ) {
            let to = from * span;
            let mut s = Search::new(Course { from, to, resolution: 0.05, repeat: 2 });
            let mut next = s.start();
            let mut said_nothing = false;
            for (n, a) in answers.iter().cycle().enumerate() {
                prop_assert!(n < 200, "no end after 200 steps");
                let Next::Step { rate, runs, .. } = next else { break };
                prop_assert!(rate >= from - 1e-9 && rate <= to + 1e-9, "{rate}");
                prop_assert!(runs == 1 || runs == 2);
                let judged = match a {
                    0 => { said_nothing = true; Judged::Generator("limit".into()) }
                    1..=5 => Judged::Pass,
                    _ => Judged::Fail("slo".into()),
                };
                next = s.observe(judged);
            }
            let Next::Done(o) = next else { unreachable!("the loop ends only when done") };
            prop_assert_eq!(matches!(o, Outcome::Undecided { .. }), said_nothing);
        }

        /// The midpoint always lies strictly inside the gap.
        #[test]
        fn the_midpoint_is_inside(low in 0.1f64..1e6, gap in 1e-3f64..1e6) {
            let high = low + gap;
            let m = midpoint(low, high);
            prop_assert!(m > low && m < high);
        }
    }
}
