//! What the plan intends, per agent and per interval: the coordinator walks
//! every open scenario's schedule with the same interleave (and hand-overs)
//! the agents use, so it knows each agent's count per second without
//! trusting any agent to report it. A lost agent's arrivals that it never
//! reported are then booked (unreported, or unsent `agent_lost`, split at
//! the instant it had certainly stopped), and `intended` follows the plan
//! whatever happens to the fleet.
//!
//! Memory is one counter per (agent, interval) per open scenario, never one
//! per arrival.

use std::sync::Arc;

use loadfleet_proto::handover::{Handover, Owners};
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::v1::{self, scenario_assignment};

/// Arrivals intended per agent slot and interval, for one scenario:
/// `counts[slot][interval]`. `None` for a closed-model scenario, whose
/// requests follow the responses and so have no schedule to count.
pub(super) type Counts = Option<Planned>;

/// One open scenario's arrivals by owner and interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Planned {
    /// `counts[slot][interval]`.
    pub(super) counts: Vec<Vec<u64>>,
    /// Per slot with a cut: of its arrivals in the interval that holds the
    /// cut, those due before it.
    before_cut: Vec<u64>,
}

impl Planned {
    /// Of `slot`'s arrivals in `interval`, those due before the instant
    /// `cut_ns` it was counted with (all of them when the interval ends
    /// before the cut, none when it starts after).
    pub(super) fn before(
        &self,
        slot: usize,
        interval: usize,
        cut_ns: u64,
        interval_ns: u64,
    ) -> u64 {
        let planned = self
            .counts
            .get(slot)
            .and_then(|row| row.get(interval))
            .copied()
            .unwrap_or(0);
        let cut_interval = (cut_ns / interval_ns.max(1)) as usize;
        match interval.cmp(&cut_interval) {
            std::cmp::Ordering::Less => planned,
            std::cmp::Ordering::Equal => self.before_cut.get(slot).copied().unwrap_or(0),
            std::cmp::Ordering::Greater => 0,
        }
    }
}

/// Counts every open scenario's arrivals by owner and interval. `weights`
/// are the slots' weights as assigned; `handovers` are in the order sent;
/// `cuts[slot]`, when given, is an instant (ns after the common start)
/// that slot's count is also split at ([`Planned::before`]).
pub(super) fn planned(
    scenarios: &[v1::ScenarioAssignment],
    weights: &[u32],
    handovers: &[Handover],
    interval_ns: u64,
    cuts: &[Option<u64>],
) -> Result<Vec<Counts>, String> {
    let base = Arc::new(Interleave::new(weights).map_err(|e| e.to_string())?);
    let handovers: Arc<[Handover]> = handovers.into();
    let interval_ns = interval_ns.max(1);
    scenarios
        .iter()
        .map(|sc| {
            let Some(scenario_assignment::Model::Open(p)) = &sc.model else {
                return Ok(None);
            };
            let schedule = ArrivalSchedule::from_proto(p)
                .map_err(|e| format!("scenario {:?}: {e}", sc.name))?;
            let mut counts = vec![Vec::new(); weights.len()];
            let mut before_cut = vec![0; weights.len()];
            let mut owners = Owners::new(base.clone(), handovers.clone());
            for (k, t) in schedule.arrivals().enumerate() {
                let at = sc.start_offset_ns.saturating_add(t);
                let owner = owners.owner(k as u64, at);
                let interval = (at / interval_ns) as usize;
                let row: &mut Vec<u64> = &mut counts[owner];
                if row.len() <= interval {
                    row.resize(interval + 1, 0);
                }
                row[interval] += 1;
                if let Some(Some(cut)) = cuts.get(owner) {
                    if at < *cut && at / interval_ns == cut / interval_ns {
                        before_cut[owner] += 1;
                    }
                }
            }
            Ok(Some(Planned { counts, before_cut }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::partition::AgentSlice;
    use proptest::prelude::*;

    fn scenario(
        stages: Vec<(u64, f64, f64)>,
        poisson: Option<u64>,
        offset_ms: u64,
    ) -> v1::ScenarioAssignment {
        let (process, seed) = match poisson {
            Some(seed) => (v1::ArrivalProcess::Poisson, seed),
            None => (v1::ArrivalProcess::Uniform, 0),
        };
        v1::ScenarioAssignment {
            name: "s".into(),
            start_offset_ns: offset_ms * 1_000_000,
            model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                stages: stages
                    .into_iter()
                    .map(|(ms, a, b)| v1::Stage {
                        duration_ns: ms * 1_000_000,
                        from_rps: a,
                        to_rps: b,
                    })
                    .collect(),
                process: process as i32,
                seed,
            })),
            ..Default::default()
        }
    }

    proptest! {
        /// The coordinator's per-agent, per-interval counts add up to the
        /// schedule's per-interval counts, and each agent's row equals what
        /// an honest agent walking its own slice counts (the agent puts an
        /// arrival in the interval of its intended instant, as here).
        #[test]
        fn planned_counts_match_the_schedule_and_honest_agents(
            stages in prop::collection::vec((1u64..3_000, 0.0f64..800.0, 0.0f64..800.0), 1..4),
            poisson in prop::option::of(any::<u64>()),
            offset_ms in 0u64..1_500,
            weights in prop::collection::vec(1u32..6, 1..12),
        ) {
            let sc = scenario(stages, poisson, offset_ms);
            let interval = 1_000_000_000u64;
            let counts = planned(std::slice::from_ref(&sc), &weights, &[], interval, &[]).unwrap();
            let counts = &counts[0].as_ref().unwrap().counts;
            let Some(scenario_assignment::Model::Open(p)) = &sc.model else { unreachable!() };
            let schedule = ArrivalSchedule::from_proto(p).unwrap();
            let offset = sc.start_offset_ns;
            // Per interval, all agents together: the schedule itself.
            let mut fleet: Vec<u64> = Vec::new();
            for t in schedule.arrivals() {
                let i = ((offset + t) / interval) as usize;
                if fleet.len() <= i { fleet.resize(i + 1, 0); }
                fleet[i] += 1;
            }
            let width = counts.iter().map(Vec::len).max().unwrap_or(0).max(fleet.len());
            for i in 0..width {
                let sum: u64 = counts.iter().map(|row| row.get(i).copied().unwrap_or(0)).sum();
                prop_assert_eq!(sum, fleet.get(i).copied().unwrap_or(0), "interval {}", i);
            }
            // Per agent: what its own slice holds.
            let interleave = Interleave::new(&weights).unwrap();
            for (a, row) in counts.iter().enumerate() {
                let slice = AgentSlice::new(&schedule, &interleave, a).unwrap();
                let mut honest: Vec<u64> = Vec::new();
                for t in slice.arrivals() {
                    let i = ((offset + t) / interval) as usize;
                    if honest.len() <= i { honest.resize(i + 1, 0); }
                    honest[i] += 1;
                }
                let trimmed: Vec<u64> = row.clone();
                prop_assert_eq!(trimmed, honest, "agent {}", a);
            }
        }

        /// A cut splits a slot's interval exactly: the arrivals before it,
        /// counted apart, are those of the slot's own slice due before the
        /// cut in that interval.
        #[test]
        fn a_cut_counts_the_arrivals_before_it(
            rate in 1.0f64..500.0,
            weights in prop::collection::vec(1u32..6, 1..6),
            slot in 0usize..6,
            cut_ms in 0u64..4_000,
        ) {
            let sc = scenario(vec![(4_000, rate, rate)], Some(7), 0);
            let interval = 1_000_000_000u64;
            let slot = slot % weights.len();
            let cut = cut_ms * 1_000_000;
            let mut cuts = vec![None; weights.len()];
            cuts[slot] = Some(cut);
            let p = planned(std::slice::from_ref(&sc), &weights, &[], interval, &cuts).unwrap();
            let p = p[0].as_ref().unwrap();
            let Some(scenario_assignment::Model::Open(fs)) = &sc.model else { unreachable!() };
            let schedule = ArrivalSchedule::from_proto(fs).unwrap();
            let interleave = Interleave::new(&weights).unwrap();
            let slice = AgentSlice::new(&schedule, &interleave, slot).unwrap();
            for i in 0..5usize {
                let honest = slice
                    .arrivals()
                    .filter(|&t| (t / interval) as usize == i && t < cut)
                    .count() as u64;
                prop_assert_eq!(p.before(slot, i, cut, interval), honest, "interval {}", i);
            }
        }

        /// With hand-overs, the counts still add up to the schedule, and a
        /// lost agent owns nothing from its hand-over interval on.
        #[test]
        fn handovers_keep_the_fleet_count(
            rate in 1.0f64..500.0,
            weights in prop::collection::vec(1u32..6, 2..8),
            lost in 0usize..8,
            from_s in 0u64..4,
        ) {
            let sc = scenario(vec![(4_000, rate, rate)], None, 0);
            let interval = 1_000_000_000u64;
            let lost = lost % weights.len();
            let survivors: Vec<usize> = (0..weights.len()).filter(|&i| i != lost).collect();
            let h = [Handover::new(lost, from_s * interval, survivors, &weights).unwrap()];
            let with = planned(std::slice::from_ref(&sc), &weights, &h, interval, &[]).unwrap();
            let without = planned(std::slice::from_ref(&sc), &weights, &[], interval, &[]).unwrap();
            let (with, without) = (&with[0].as_ref().unwrap().counts, &without[0].as_ref().unwrap().counts);
            let total = |c: &Vec<Vec<u64>>| -> u64 { c.iter().flatten().sum() };
            prop_assert_eq!(total(with), total(without));
            prop_assert!(with[lost].iter().skip(from_s as usize).all(|&n| n == 0));
            for i in 0..from_s as usize {
                let at = |row: &Vec<u64>| row.get(i).copied().unwrap_or(0);
                prop_assert_eq!(at(&with[lost]), at(&without[lost]), "second {} is still its own", i);
            }
        }
    }
}
