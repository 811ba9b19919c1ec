//! Closed-model populations: which client is active when.
//!
//! A closed scenario describes the fleet-wide number of clients over time
//! as a piecewise-linear profile. Client `c` is active while the count is at
//! least `c + 1`, so at any instant exactly `floor(count)` clients run. Each
//! client is owned by one agent (the same interleave as open arrivals), so a
//! fleet never runs more clients than the plan says.

use std::time::Duration;

use crate::schedule::Stage;
use crate::v1;

/// A closed-model population as both sides hold it: the fleet-wide client
/// count over time (stages whose rates are client counts) and the think time
/// between a response and the client's next request.
#[derive(Debug, Clone, PartialEq)]
pub struct Population {
    /// Client-count profile; `from_rps`/`to_rps` hold client counts.
    pub stages: Vec<Stage>,
    /// Pause after each response before the client's next request.
    pub think: Duration,
}

impl Population {
    /// Converts to the wire form.
    pub fn to_proto(&self) -> v1::ClosedModel {
        v1::ClosedModel {
            stages: self.stages.iter().map(Stage::to_proto).collect(),
            think_ns: u64::try_from(self.think.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Reads the wire form.
    pub fn from_proto(p: &v1::ClosedModel) -> Self {
        Population {
            stages: p.stages.iter().map(Stage::from_proto).collect(),
            think: Duration::from_nanos(p.think_ns),
        }
    }

    /// Largest number of clients the profile ever asks for.
    pub fn max_clients(&self) -> u64 {
        max_clients(&self.stages)
    }
}

/// The windows `[start, end)` (ns from scenario start) in which client `c`
/// is active, in order.
pub fn client_windows(stages: &[Stage], client: u64) -> Vec<(u64, u64)> {
    let threshold = client as f64 + 1.0;
    let mut windows: Vec<(u64, u64)> = Vec::new();
    let mut stage_start = 0u64;
    for s in stages {
        let d = s.duration_ns;
        let (a, b) = (s.from_rps, s.to_rps);
        // Within the stage the count is a + (b - a)·τ/d: the set where it is
        // >= threshold is one interval, found by solving the line.
        let cross = |t: f64| -> u64 { ((t * d as f64).ceil() as u64).min(d) };
        let window = if a >= threshold && b >= threshold {
            Some((0, d))
        } else if a < threshold && b < threshold {
            None
        } else {
            let at = (threshold - a) / (b - a);
            if b > a {
                Some((cross(at), d))
            } else {
                Some((0, cross(at)))
            }
        };
        if let Some((lo, hi)) = window.filter(|(lo, hi)| lo < hi) {
            let (lo, hi) = (stage_start + lo, stage_start + hi);
            match windows.last_mut() {
                Some(last) if last.1 == lo => last.1 = hi,
                _ => windows.push((lo, hi)),
            }
        }
        stage_start += d;
    }
    windows
}

/// Largest number of clients the profile ever asks for.
pub fn max_clients(stages: &[Stage]) -> u64 {
    stages
        .iter()
        .map(|s| s.from_rps.max(s.to_rps).floor() as u64)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn constant_population_is_always_on() {
        let stages = [Stage {
            duration_ns: 10 * S,
            from_rps: 20.0,
            to_rps: 20.0,
        }];
        assert_eq!(client_windows(&stages, 0), vec![(0, 10 * S)]);
        assert_eq!(client_windows(&stages, 19), vec![(0, 10 * S)]);
        assert!(client_windows(&stages, 20).is_empty());
        assert_eq!(max_clients(&stages), 20);
    }

    #[test]
    fn ramp_up_then_down() {
        let stages = [
            Stage {
                duration_ns: 10 * S,
                from_rps: 0.0,
                to_rps: 10.0,
            },
            Stage {
                duration_ns: 10 * S,
                from_rps: 10.0,
                to_rps: 0.0,
            },
        ];
        // Client 4 starts when the count reaches 5 (5 s) and stops when it
        // falls below 5 again (15 s).
        assert_eq!(client_windows(&stages, 4), vec![(5 * S, 15 * S)]);
    }

    fn stages() -> impl Strategy<Value = Vec<Stage>> {
        prop::collection::vec(
            (1u64..5_000, 0u32..50, 0u32..50).prop_map(|(ms, a, b)| Stage {
                duration_ns: ms * 1_000_000,
                from_rps: f64::from(a),
                to_rps: f64::from(b),
            }),
            1..5,
        )
    }

    proptest! {
        /// At any instant, the number of active clients is floor(count(t)).
        #[test]
        fn active_clients_follow_the_profile(stages in stages(), frac in 0.0f64..1.0) {
            let total: u64 = stages.iter().map(|s| s.duration_ns).sum();
            let t = ((total as f64 * frac) as u64).min(total - 1);
            let mut start = 0;
            let mut count = 0.0;
            for s in &stages {
                if t < start + s.duration_ns {
                    let tau = (t - start) as f64 / s.duration_ns as f64;
                    count = s.from_rps + (s.to_rps - s.from_rps) * tau;
                    break;
                }
                start += s.duration_ns;
            }
            let active = (0..max_clients(&stages) + 1)
                .filter(|&c| client_windows(&stages, c).iter().any(|&(lo, hi)| t >= lo && t < hi))
                .count() as f64;
            // Boundaries are rounded to whole nanoseconds: allow one client
            // of slack exactly at a crossing.
            prop_assert!((active - count.floor()).abs() <= 1.0, "t={t} active={active} count={count}");
        }
    }
}
