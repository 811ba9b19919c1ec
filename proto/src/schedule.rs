//! Open-model arrival schedules.
//!
//! A schedule is a piecewise-linear rate profile (a list of [`Stage`]s) and an
//! arrival process. Arrival instants come from inverting the cumulative rate
//! `Λ(t) = ∫₀ᵗ rate`: the uniform process puts arrival `k` at `Λ⁻¹(k)`, the
//! Poisson process at `Λ⁻¹(E₁ + … + Eₖ₊₁)` with `Eᵢ ~ Exp(1)` (time
//! rescaling). One formula therefore serves constant rates, ramps, steps and
//! pauses, and the instants never depend on how the server behaves: the
//! schedule is open by construction.
//!
//! Instants are absolute offsets from the common start, so a slow moment on
//! an agent never shifts the arrivals after it.

use crate::rng::SplitMix64;
use crate::v1;

/// One segment of the rate profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// Length of the segment in nanoseconds.
    pub duration_ns: u64,
    /// Rate (requests/s) at the start of the segment.
    pub from_rps: f64,
    /// Rate (requests/s) at the end of the segment.
    pub to_rps: f64,
}

impl Stage {
    /// Converts to the wire form.
    pub fn to_proto(&self) -> v1::Stage {
        v1::Stage {
            duration_ns: self.duration_ns,
            from_rps: self.from_rps,
            to_rps: self.to_rps,
        }
    }

    /// Reads the wire form (values are checked where a schedule is built).
    pub fn from_proto(s: &v1::Stage) -> Self {
        Stage {
            duration_ns: s.duration_ns,
            from_rps: s.from_rps,
            to_rps: s.to_rps,
        }
    }
}

/// How arrivals are placed inside the rate profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// Evenly spaced (in cumulative-rate time).
    Uniform,
    /// A Poisson process, reproducible from its seed.
    Poisson { seed: u64 },
}

/// A schedule that cannot be turned into arrivals.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// There is nothing to run.
    #[error("the schedule has no stages")]
    Empty,
    /// A rate is negative, NaN or infinite.
    #[error("stage {stage}: rate {rate} is not a finite number >= 0")]
    BadRate { stage: usize, rate: f64 },
    /// The arrival process field was left unset.
    #[error("the arrival process is unspecified")]
    UnspecifiedProcess,
}

/// The fleet-wide open-model schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrivalSchedule {
    stages: Vec<Stage>,
    process: Process,
}

impl ArrivalSchedule {
    /// Validates the stages; rates must be finite and non-negative.
    pub fn new(stages: Vec<Stage>, process: Process) -> Result<Self, ScheduleError> {
        if stages.is_empty() {
            return Err(ScheduleError::Empty);
        }
        for (i, s) in stages.iter().enumerate() {
            for rate in [s.from_rps, s.to_rps] {
                if !rate.is_finite() || rate < 0.0 {
                    return Err(ScheduleError::BadRate { stage: i, rate });
                }
            }
        }
        Ok(Self { stages, process })
    }

    /// A constant rate for a duration, the most common case.
    pub fn constant(rps: f64, duration_ns: u64, process: Process) -> Result<Self, ScheduleError> {
        Self::new(
            vec![Stage {
                duration_ns,
                from_rps: rps,
                to_rps: rps,
            }],
            process,
        )
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    pub fn process(&self) -> Process {
        self.process
    }

    /// Total length of the schedule.
    pub fn duration_ns(&self) -> u64 {
        self.stages.iter().map(|s| s.duration_ns).sum()
    }

    /// Expected number of arrivals, `Λ(duration)`.
    pub fn expected_count(&self) -> f64 {
        self.stages.iter().map(stage_mass).sum()
    }

    /// The exact fleet-wide arrival count. Cheap for uniform; for Poisson it
    /// walks the schedule (still O(arrivals), no allocation).
    pub fn count(&self) -> u64 {
        self.arrivals().count() as u64
    }

    /// Arrival instants (ns from start), in order.
    pub fn arrivals(&self) -> Arrivals<'_> {
        Arrivals {
            schedule: self,
            stage: 0,
            stage_start_ns: 0,
            stage_start_mass: 0.0,
            next_mass: 0.0,
            rng: match self.process {
                Process::Uniform => None,
                Process::Poisson { seed } => Some(SplitMix64::new(seed)),
            },
            started: false,
        }
    }

    /// Converts to the wire form.
    pub fn to_proto(&self) -> v1::FleetSchedule {
        let (process, seed) = match self.process {
            Process::Uniform => (v1::ArrivalProcess::Uniform, 0),
            Process::Poisson { seed } => (v1::ArrivalProcess::Poisson, seed),
        };
        v1::FleetSchedule {
            stages: self.stages.iter().map(Stage::to_proto).collect(),
            process: process as i32,
            seed,
        }
    }

    /// Reads the wire form, validating it as [`ArrivalSchedule::new`] does.
    pub fn from_proto(p: &v1::FleetSchedule) -> Result<Self, ScheduleError> {
        let process = match v1::ArrivalProcess::try_from(p.process) {
            Ok(v1::ArrivalProcess::Uniform) => Process::Uniform,
            Ok(v1::ArrivalProcess::Poisson) => Process::Poisson { seed: p.seed },
            _ => return Err(ScheduleError::UnspecifiedProcess),
        };
        Self::new(p.stages.iter().map(Stage::from_proto).collect(), process)
    }
}

/// Number of arrivals a stage carries: the area under its rate line.
fn stage_mass(s: &Stage) -> f64 {
    (s.from_rps + s.to_rps) * 0.5 * (s.duration_ns as f64 / 1e9)
}

/// Inverts the cumulative rate inside one stage: the offset (seconds) at which
/// `m` arrivals' worth of mass has accumulated. With `Λ(τ) = b·τ + a·τ²`,
/// `τ = 2m / (b + √(b² + 4am))`, which stays accurate when `a` is tiny or
/// negative (ramps down), unlike the textbook form.
fn invert_in_stage(s: &Stage, m: f64) -> f64 {
    let d = s.duration_ns as f64 / 1e9;
    let b = s.from_rps;
    let a = (s.to_rps - s.from_rps) / (2.0 * d);
    if m <= 0.0 {
        return 0.0;
    }
    let disc = (b * b + 4.0 * a * m).max(0.0);
    let denom = b + disc.sqrt();
    if denom <= 0.0 {
        return d;
    }
    (2.0 * m / denom).min(d)
}

/// Iterator over arrival instants in nanoseconds from the start.
pub struct Arrivals<'a> {
    schedule: &'a ArrivalSchedule,
    stage: usize,
    stage_start_ns: u64,
    stage_start_mass: f64,
    /// Cumulative mass at which the next arrival happens.
    next_mass: f64,
    rng: Option<SplitMix64>,
    started: bool,
}

impl Iterator for Arrivals<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        // Uniform: arrivals at mass 0, 1, 2, ...; Poisson: at cumulative sums
        // of Exp(1) draws.
        match &mut self.rng {
            None => {
                if self.started {
                    self.next_mass += 1.0;
                }
            }
            Some(rng) => self.next_mass += rng.exp1(),
        }
        self.started = true;
        loop {
            let s = self.schedule.stages.get(self.stage)?;
            let mass = stage_mass(s);
            let local = self.next_mass - self.stage_start_mass;
            // The arrival falls in this stage only if strictly inside its
            // mass; one exactly on the boundary belongs to the next stage, so
            // the schedule's end is exclusive.
            if local < mass {
                let offset_s = invert_in_stage(s, local);
                let offset_ns =
                    ((offset_s * 1e9).round() as u64).min(s.duration_ns.saturating_sub(1));
                return Some(self.stage_start_ns + offset_ns);
            }
            self.stage += 1;
            self.stage_start_ns += s.duration_ns;
            self.stage_start_mass += mass;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn constant_uniform_is_evenly_spaced_and_exact() {
        let s = ArrivalSchedule::constant(1000.0, 5 * S, Process::Uniform).unwrap();
        let a: Vec<u64> = s.arrivals().collect();
        assert_eq!(a.len(), 5000);
        assert_eq!(a[0], 0);
        assert_eq!(a[1], 1_000_000);
        assert_eq!(a[4999], 4_999_000_000);
    }

    #[test]
    fn zero_rate_is_a_pause() {
        let s = ArrivalSchedule::new(
            vec![
                Stage {
                    duration_ns: S,
                    from_rps: 10.0,
                    to_rps: 10.0,
                },
                Stage {
                    duration_ns: S,
                    from_rps: 0.0,
                    to_rps: 0.0,
                },
                Stage {
                    duration_ns: S,
                    from_rps: 10.0,
                    to_rps: 10.0,
                },
            ],
            Process::Uniform,
        )
        .unwrap();
        let a: Vec<u64> = s.arrivals().collect();
        assert_eq!(a.len(), 20);
        assert!(a.iter().all(|&t| !(S..2 * S).contains(&t)), "{a:?}");
    }

    #[test]
    fn ramp_follows_the_rate() {
        // 0 -> 1000 rps over 10 s: second i carries about 100*i + 50 arrivals.
        let s = ArrivalSchedule::new(
            vec![Stage {
                duration_ns: 10 * S,
                from_rps: 0.0,
                to_rps: 1000.0,
            }],
            Process::Uniform,
        )
        .unwrap();
        let mut per_sec = [0u64; 10];
        for t in s.arrivals() {
            per_sec[(t / S) as usize] += 1;
        }
        for (i, &n) in per_sec.iter().enumerate() {
            let expected = 100.0 * i as f64 + 50.0;
            assert!(
                (n as f64 - expected).abs() <= 1.0,
                "second {i}: {n} vs {expected}"
            );
        }
        assert_eq!(per_sec.iter().sum::<u64>(), 5000);
    }

    #[test]
    fn bad_rates_are_refused() {
        assert_eq!(
            ArrivalSchedule::constant(-1.0, S, Process::Uniform),
            Err(ScheduleError::BadRate {
                stage: 0,
                rate: -1.0
            })
        );
        assert!(ArrivalSchedule::constant(f64::NAN, S, Process::Uniform).is_err());
        assert_eq!(
            ArrivalSchedule::new(vec![], Process::Uniform),
            Err(ScheduleError::Empty)
        );
    }

    #[test]
    fn proto_round_trip() {
        let s = ArrivalSchedule::constant(12.5, S, Process::Poisson { seed: 7 }).unwrap();
        assert_eq!(ArrivalSchedule::from_proto(&s.to_proto()).unwrap(), s);
    }

    fn stages() -> impl Strategy<Value = Vec<Stage>> {
        prop::collection::vec(
            (1u64..3_000, 0.0f64..2_000.0, 0.0f64..2_000.0).prop_map(|(ms, a, b)| Stage {
                duration_ns: ms * 1_000_000,
                from_rps: a,
                to_rps: b,
            }),
            1..5,
        )
    }

    proptest! {
        /// Instants are sorted, inside the schedule, and the uniform count is
        /// the integral of the rate (rounded up, as arrival 0 is at mass 0).
        #[test]
        fn uniform_count_matches_integral(stages in stages()) {
            let s = ArrivalSchedule::new(stages, Process::Uniform).unwrap();
            let a: Vec<u64> = s.arrivals().collect();
            prop_assert!(a.windows(2).all(|w| w[0] <= w[1]));
            prop_assert!(a.iter().all(|&t| t < s.duration_ns()));
            let expected = s.expected_count();
            prop_assert!((a.len() as f64 - expected.ceil()).abs() <= 1.0,
                "{} arrivals vs integral {}", a.len(), expected);
        }

        /// Any interval holds the integral of the rate over it, within one.
        #[test]
        fn uniform_interval_counts_match_integral(stages in stages(), from in 0.0f64..1.0, len in 0.0f64..1.0) {
            let s = ArrivalSchedule::new(stages, Process::Uniform).unwrap();
            let total = s.duration_ns() as f64;
            let lo = (from * total) as u64;
            let hi = (lo as f64 + len * (total - lo as f64)) as u64;
            let n = s.arrivals().filter(|&t| t >= lo && t < hi).count() as f64;
            let integral = mass_between(&s, lo, hi);
            prop_assert!((n - integral).abs() <= 1.0 + 1e-6, "{n} arrivals in [{lo},{hi}) vs {integral}");
        }

        /// Poisson arrivals over any interval stay within five standard
        /// deviations of the integral of the rate there.
        #[test]
        fn poisson_interval_counts_match_integral(stages in stages(), seed in any::<u64>(), from in 0.0f64..1.0, len in 0.0f64..1.0) {
            let s = ArrivalSchedule::new(stages, Process::Poisson { seed }).unwrap();
            let total = s.duration_ns() as f64;
            let lo = (from * total) as u64;
            let hi = (lo as f64 + len * (total - lo as f64)) as u64;
            let n = s.arrivals().filter(|&t| t >= lo && t < hi).count() as f64;
            let mu = mass_between(&s, lo, hi);
            prop_assert!((n - mu).abs() <= 5.0 * mu.sqrt() + 3.0, "{n} arrivals in [{lo},{hi}) vs {mu}");
        }

        /// A seeded Poisson schedule is reproducible and its count stays
        /// within five standard deviations of the expected mass.
        #[test]
        fn poisson_is_reproducible_and_plausible(stages in stages(), seed in any::<u64>()) {
            let s = ArrivalSchedule::new(stages, Process::Poisson { seed }).unwrap();
            let a: Vec<u64> = s.arrivals().collect();
            let b: Vec<u64> = s.arrivals().collect();
            prop_assert_eq!(&a, &b);
            prop_assert!(a.windows(2).all(|w| w[0] <= w[1]));
            let mu = s.expected_count();
            prop_assert!((a.len() as f64 - mu).abs() <= 5.0 * mu.sqrt() + 2.0, "{} vs {}", a.len(), mu);
        }
    }

    /// Integral of the rate over [lo, hi) ns, by the closed form per stage.
    fn mass_between(s: &ArrivalSchedule, lo: u64, hi: u64) -> f64 {
        let cum = |t: u64| {
            let mut start = 0u64;
            let mut acc = 0.0;
            for st in s.stages() {
                let end = start + st.duration_ns;
                if t >= end {
                    acc += stage_mass(st);
                } else {
                    let tau = (t - start) as f64 / 1e9;
                    let d = st.duration_ns as f64 / 1e9;
                    acc += st.from_rps * tau + (st.to_rps - st.from_rps) / (2.0 * d) * tau * tau;
                    break;
                }
                start = end;
            }
            acc
        };
        cum(hi) - cum(lo)
    }
}
