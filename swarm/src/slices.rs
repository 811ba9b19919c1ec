//! Every agent's slice of an assignment, counted per snapshot interval.
//!
//! A real agent walks the whole fleet schedule and keeps the arrivals the
//! weighted interleave gives to its own index ([`AgentSlice`]). A thousand
//! swarm agents doing that each would cost the swarm a thousand passes over
//! the same schedule, so the swarm makes one pass with the same
//! [`ArrivalSchedule`] and the same [`Interleave::owner`] and files every
//! arrival under its owner. The counts are the ones a real agent would send
//! (a test below holds the two ways equal).
//!
//! [`AgentSlice`]: loadfleet_proto::partition::AgentSlice

use std::collections::BTreeMap;

use loadfleet_proto::partition::{Interleave, PartitionError};
use loadfleet_proto::schedule::{ArrivalSchedule, ScheduleError};
use loadfleet_proto::v1::{self, scenario_assignment};

/// Why the swarm cannot play an assignment.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    /// Snapshots need an interval to bucket into.
    #[error("the assignment's interval is 0")]
    ZeroInterval,
    /// The agents' weights cannot be interleaved.
    #[error("agent weights")]
    Weights(#[source] PartitionError),
    /// An open scenario's schedule is invalid.
    #[error("scenario {name:?}")]
    Schedule {
        /// The scenario's name.
        name: String,
        /// What is wrong with its schedule.
        #[source]
        source: ScheduleError,
    },
    /// The swarm only fakes open-model arrivals; a closed model's counts
    /// depend on response times it does not simulate.
    #[error("scenario {0:?} is not an open model; the swarm plays open models only (use --rate)")]
    NotOpen(String),
}

/// Arrivals of one agent in one (scenario, interval): measured ones and
/// warm-up ones, which the report keeps apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cell {
    pub measured: u64,
    pub warmup: u64,
}

/// Per agent: (scenario index, interval index) → arrivals.
pub type AgentCells = BTreeMap<(u32, u64), Cell>;

/// Every agent's slice of one assignment.
#[derive(Debug)]
pub struct SliceTable {
    pub agents: Vec<AgentCells>,
    /// Intervals from the common start to the end of the last scenario.
    pub intervals: u64,
}

/// The part of an assignment that is the same for every agent (all but
/// its index and start), so one table serves the whole swarm. The debug
/// form of the generated types is complete, which is all a cache key needs.
pub fn fleet_key(a: &v1::Assignment) -> String {
    format!("{:?}|{}|{:?}", a.weights, a.interval_ns, a.scenarios)
}

/// Counts every agent's arrivals per (scenario, interval) in one pass.
pub fn slice_table(a: &v1::Assignment) -> Result<SliceTable, SliceError> {
    if a.interval_ns == 0 {
        return Err(SliceError::ZeroInterval);
    }
    let interleave = Interleave::new(&a.weights).map_err(SliceError::Weights)?;
    let mut agents = vec![AgentCells::new(); interleave.agents()];
    let mut end_ns = 0u64;
    for (index, sc) in a.scenarios.iter().enumerate() {
        let Some(scenario_assignment::Model::Open(fleet)) = &sc.model else {
            return Err(SliceError::NotOpen(sc.name.clone()));
        };
        let schedule =
            ArrivalSchedule::from_proto(fleet).map_err(|source| SliceError::Schedule {
                name: sc.name.clone(),
                source,
            })?;
        end_ns = end_ns.max(sc.start_offset_ns.saturating_add(sc.duration_ns));
        for (k, t) in schedule.arrivals().enumerate() {
            let owner = interleave.owner(k as u64);
            let interval = (sc.start_offset_ns + t) / a.interval_ns;
            let cell = agents[owner].entry((index as u32, interval)).or_default();
            if t < sc.warmup_ns {
                cell.warmup += 1;
            } else {
                cell.measured += 1;
            }
        }
    }
    Ok(SliceTable {
        agents,
        intervals: end_ns.div_ceil(a.interval_ns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::partition::AgentSlice;
    use loadfleet_proto::schedule::Process;

    fn assignment(weights: Vec<u32>, process: Process) -> v1::Assignment {
        let schedule = ArrivalSchedule::constant(997.0, 3_500_000_000, process).unwrap();
        v1::Assignment {
            weights,
            interval_ns: 1_000_000_000,
            scenarios: vec![v1::ScenarioAssignment {
                name: "s".into(),
                duration_ns: 3_500_000_000,
                warmup_ns: 500_000_000,
                model: Some(scenario_assignment::Model::Open(schedule.to_proto())),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The one-pass table gives each agent exactly what its own
    /// `AgentSlice` walk would.
    #[test]
    fn one_pass_equals_each_agents_own_slice() {
        for process in [Process::Uniform, Process::Poisson { seed: 7 }] {
            let a = assignment(vec![1, 3, 2, 1], process);
            let table = slice_table(&a).unwrap();
            assert_eq!(table.intervals, 4);
            let Some(scenario_assignment::Model::Open(fleet)) = &a.scenarios[0].model else {
                unreachable!()
            };
            let schedule = ArrivalSchedule::from_proto(fleet).unwrap();
            let interleave = Interleave::new(&a.weights).unwrap();
            let mut total = 0;
            for (agent, cells) in table.agents.iter().enumerate() {
                let mut own = AgentCells::new();
                for t in AgentSlice::new(&schedule, &interleave, agent)
                    .unwrap()
                    .arrivals()
                {
                    let cell = own.entry((0, t / a.interval_ns)).or_default();
                    if t < 500_000_000 {
                        cell.warmup += 1;
                    } else {
                        cell.measured += 1;
                    }
                    total += 1;
                }
                assert_eq!(cells, &own, "agent {agent}");
            }
            assert_eq!(total, schedule.count());
        }
    }

    #[test]
    fn closed_models_are_refused_by_name() {
        let mut a = assignment(vec![1], Process::Uniform);
        a.scenarios[0].model = Some(scenario_assignment::Model::Closed(
            v1::ClosedModel::default(),
        ));
        let e = slice_table(&a).unwrap_err().to_string();
        assert!(e.contains("\"s\"") && e.contains("open"), "{e}");
    }
}
