//! Cutting the fleet schedule into agent slices.
//!
//! Every agent receives the *whole* fleet schedule plus every agent's weight,
//! and keeps the arrivals whose index the weighted interleave gives to it.
//! Because the interleave is a pure function of the arrival index, the slices
//! are disjoint and their union is the fleet schedule by construction: no
//! arrival can be lost or doubled, whatever the shape or process.
//!
//! The interleave is built by Balinski and Young's quota method, which
//! keeps every agent within one arrival of its exact share after any number
//! of arrivals (so within two over any stretch of them), where smooth
//! weighted round-robin can drift past one.

use crate::schedule::ArrivalSchedule;

/// Weights that cannot form an interleave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// A fleet needs at least one agent.
    #[error("no agents to share the schedule")]
    NoAgents,
    /// A zero weight would leave an agent idle while counted in the fleet.
    #[error("agent {0} has weight 0; give every agent a weight of at least 1")]
    ZeroWeight(usize),
    /// The interleave table is one entry per unit of weight; keep it small.
    #[error("the weights add up to {0}, more than {MAX_TOTAL_WEIGHT}; use smaller weights")]
    TooHeavy(u64),
    /// The agent index is outside the fleet.
    #[error("agent index {index} is outside a fleet of {agents}")]
    BadIndex { index: usize, agents: usize },
}

/// Upper bound on the sum of weights (the interleave table's length).
pub const MAX_TOTAL_WEIGHT: u64 = 1 << 16;

/// Which agent owns arrival `k`: `table[k % table.len()]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interleave {
    table: Vec<u32>,
    agents: usize,
}

impl Interleave {
    /// Builds one cycle (one entry per unit of weight) by the quota method:
    /// each next arrival goes, among the agents whose count would stay
    /// within the upper quota `ceil(k·w/W)`, to the one with the largest
    /// `w / (count + 1)` (D'Hondt). Balinski and Young proved this keeps
    /// every count between `floor(k·w/W)` and `ceil(k·w/W)` for every k.
    /// Ties go to the lowest index, so the order is deterministic.
    pub fn new(weights: &[u32]) -> Result<Self, PartitionError> {
        if weights.is_empty() {
            return Err(PartitionError::NoAgents);
        }
        if let Some(i) = weights.iter().position(|&w| w == 0) {
            return Err(PartitionError::ZeroWeight(i));
        }
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        if total > MAX_TOTAL_WEIGHT {
            return Err(PartitionError::TooHeavy(total));
        }
        let mut counts = vec![0u64; weights.len()];
        let mut table = Vec::with_capacity(total as usize);
        for k in 1..=total {
            let mut best: Option<usize> = None;
            for (i, &w) in weights.iter().enumerate() {
                let w = u64::from(w);
                // Upper quota: (count + 1) <= ceil(k·w / total).
                if (counts[i] + 1) * total > k * w + total - 1 {
                    continue;
                }
                // Larger w / (count + 1) wins, compared without division.
                let better = best
                    .is_none_or(|b| w * (counts[b] + 1) > u64::from(weights[b]) * (counts[i] + 1));
                if better {
                    best = Some(i);
                }
            }
            // The theorem guarantees an eligible agent; the fallback only
            // keeps the table complete should that ever not hold.
            let pick = best.unwrap_or(0);
            counts[pick] += 1;
            table.push(pick as u32);
        }
        Ok(Self {
            table,
            agents: weights.len(),
        })
    }

    /// Equal shares for `agents` agents (plain round-robin).
    pub fn equal(agents: usize) -> Result<Self, PartitionError> {
        Self::new(&vec![1; agents])
    }

    pub fn agents(&self) -> usize {
        self.agents
    }

    /// The agent that sends fleet arrival number `k`.
    pub fn owner(&self, k: u64) -> usize {
        self.table[(k % self.table.len() as u64) as usize] as usize
    }
}

/// One agent's part of the fleet schedule.
#[derive(Debug, Clone)]
pub struct AgentSlice<'a> {
    schedule: &'a ArrivalSchedule,
    interleave: &'a Interleave,
    index: usize,
}

impl<'a> AgentSlice<'a> {
    pub fn new(
        schedule: &'a ArrivalSchedule,
        interleave: &'a Interleave,
        index: usize,
    ) -> Result<Self, PartitionError> {
        if index >= interleave.agents() {
            return Err(PartitionError::BadIndex {
                index,
                agents: interleave.agents(),
            });
        }
        Ok(Self {
            schedule,
            interleave,
            index,
        })
    }

    /// This agent's arrival instants (ns from the start), in order.
    pub fn arrivals(&self) -> impl Iterator<Item = u64> + 'a {
        self.indexed_arrivals().map(|(_, t)| t)
    }

    /// This agent's arrivals with their fleet-wide index (for `{{seq}}`).
    pub fn indexed_arrivals(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let interleave = self.interleave;
        let index = self.index;
        self.schedule
            .arrivals()
            .enumerate()
            .map(|(k, t)| (k as u64, t))
            .filter(move |(k, _)| interleave.owner(*k) == index)
    }

    /// Number of arrivals in this slice.
    pub fn count(&self) -> u64 {
        self.arrivals().count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Process, Stage};
    use proptest::prelude::*;

    #[test]
    fn equal_shares_round_robin() {
        let i = Interleave::equal(3).unwrap();
        let owners: Vec<usize> = (0..7).map(|k| i.owner(k)).collect();
        assert_eq!(owners, vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn weights_are_dealt_within_quota() {
        let i = Interleave::new(&[5, 1, 1]).unwrap();
        let owners: Vec<usize> = (0..7).map(|k| i.owner(k)).collect();
        assert_eq!(owners, vec![0, 0, 0, 1, 0, 0, 2]);
    }

    #[test]
    fn bad_weights_are_refused() {
        assert_eq!(Interleave::new(&[]), Err(PartitionError::NoAgents));
        assert_eq!(Interleave::new(&[1, 0]), Err(PartitionError::ZeroWeight(1)));
        assert!(matches!(
            Interleave::new(&[u32::MAX, 2]),
            Err(PartitionError::TooHeavy(_))
        ));
        let s = crate::schedule::ArrivalSchedule::constant(1.0, 1, Process::Uniform).unwrap();
        let i = Interleave::equal(2).unwrap();
        assert!(AgentSlice::new(&s, &i, 2).is_err());
    }

    fn schedule() -> impl Strategy<Value = ArrivalSchedule> {
        let stages = prop::collection::vec(
            (1u64..2_000, 0.0f64..3_000.0, 0.0f64..3_000.0).prop_map(|(ms, a, b)| Stage {
                duration_ns: ms * 1_000_000,
                from_rps: a,
                to_rps: b,
            }),
            1..4,
        );
        let process = prop_oneof![
            Just(Process::Uniform),
            any::<u64>().prop_map(|seed| Process::Poisson { seed })
        ];
        (stages, process).prop_map(|(s, p)| ArrivalSchedule::new(s, p).unwrap())
    }

    proptest! {
        /// The union of the slices is the fleet schedule, arrival for
        /// arrival, and no arrival appears in two slices.
        #[test]
        fn slices_partition_the_schedule_exactly(
            schedule in schedule(),
            weights in prop::collection::vec(1u32..20, 1..=64),
        ) {
            let interleave = Interleave::new(&weights).unwrap();
            let fleet: Vec<u64> = schedule.arrivals().collect();
            let mut merged: Vec<u64> = Vec::with_capacity(fleet.len());
            let mut total = 0u64;
            for index in 0..weights.len() {
                let slice = AgentSlice::new(&schedule, &interleave, index).unwrap();
                let mine: Vec<u64> = slice.arrivals().collect();
                total += mine.len() as u64;
                merged.extend(mine);
            }
            merged.sort_unstable();
            prop_assert_eq!(total, fleet.len() as u64);
            prop_assert_eq!(merged, fleet);
        }

        /// Over any run of arrivals, each agent's count stays within two of
        /// its weighted share (every prefix is within one, and a window is
        /// the difference of two prefixes).
        #[test]
        fn every_agent_stays_within_two_of_its_weighted_share(
            weights in prop::collection::vec(1u32..20, 1..=64),
            start in 0u64..10_000,
            len in 0u64..10_000,
        ) {
            let interleave = Interleave::new(&weights).unwrap();
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            let mut counts = vec![0u64; weights.len()];
            for k in start..start + len {
                counts[interleave.owner(k)] += 1;
            }
            for (i, &n) in counts.iter().enumerate() {
                let share = len as f64 * f64::from(weights[i]) / total as f64;
                prop_assert!((n as f64 - share).abs() < 2.0,
                    "agent {i}: {n} of {len} vs share {share}");
            }
        }

        /// Every prefix of the interleave keeps each agent within one of its
        /// exact share.
        #[test]
        fn every_prefix_is_within_one_of_the_share(weights in prop::collection::vec(1u32..20, 1..=64)) {
            let interleave = Interleave::new(&weights).unwrap();
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            let mut counts = vec![0u64; weights.len()];
            for k in 0..2 * total {
                counts[interleave.owner(k)] += 1;
                for (i, &n) in counts.iter().enumerate() {
                    // floor(k·w/W) <= n <= ceil(k·w/W), in integers.
                    let exact = (k + 1) * u64::from(weights[i]);
                    prop_assert!(n * total < exact + total && exact < (n + 1) * total,
                        "agent {i} after {} arrivals: {n} vs {}", k + 1, exact as f64 / total as f64);
                }
            }
        }

        /// Equal shares (round-robin) give every agent its count per second
        /// within one.
        #[test]
        fn equal_shares_per_second_within_one(agents in 1usize..=64, rate in 1.0f64..5_000.0) {
            let schedule = ArrivalSchedule::constant(rate, 3_000_000_000, Process::Uniform).unwrap();
            let interleave = Interleave::equal(agents).unwrap();
            for index in 0..agents {
                let slice = AgentSlice::new(&schedule, &interleave, index).unwrap();
                let mut per_sec = [0u64; 3];
                for t in slice.arrivals() {
                    per_sec[(t / 1_000_000_000) as usize] += 1;
                }
                for n in per_sec {
                    prop_assert!((n as f64 - rate / agents as f64).abs() <= 1.0 + 1e-9);
                }
            }
        }
    }
}
