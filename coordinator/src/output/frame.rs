//! What every output pushes for one settled step of the run: the fleet's
//! merged figures per scenario, cumulative since the run's start, plus the
//! latency of the seconds the step covers, and a flow scenario's flows and
//! steps.
//!
//! A frame is made on the fleet actor from the merged state before the
//! live files fold those seconds away, then shared read-only by every
//! output, so the sinks never touch the run's state.

use std::collections::BTreeMap;
use std::ops::Range;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::new_histogram;

use crate::aggregate::Aggregate;
use loadfleet_proto::figures::{Figures, FlowFigures, RequestFigures};

/// One scenario's figures in a frame.
#[derive(Debug, Clone)]
pub(crate) struct ScenarioFrame {
    pub name: String,
    /// Since the run's start (counters).
    pub totals: Counts,
    /// The seconds of [`Frame::seconds`] alone.
    pub step: Counts,
    /// Latency from the intended send time, every outcome, since the start
    /// (µs).
    pub latency: Histogram<u64>,
    pub service_time: Histogram<u64>,
    /// Latency of the frame's seconds alone (µs), for per-second points.
    pub step_latency: Histogram<u64>,
    /// A flow scenario's flows and steps; `None` for other scenarios.
    pub flow: Option<FlowFrame>,
}

/// A flow scenario's flows since the run's start. Its scenario's own
/// counts count flows too (sent = started); these name what only flows
/// have, so a dashboard of flows need not know that.
#[derive(Debug, Clone)]
pub(crate) struct FlowFrame {
    pub started: u64,
    /// Flows that ended with every step passed.
    pub completed: u64,
    /// Flows that ended failed, by reason.
    pub failed: BTreeMap<String, u64>,
    /// From each flow's intended start to its last step's end (µs).
    pub latency: Histogram<u64>,
    /// In the plan's order.
    pub steps: Vec<StepFrame>,
}

/// One step of a flow since the run's start.
#[derive(Debug, Clone)]
pub(crate) struct StepFrame {
    pub name: String,
    pub sent: u64,
    pub completed: u64,
    pub failures: u64,
    /// From the step's ready instant, every outcome (µs).
    pub latency: Histogram<u64>,
}

impl FlowFrame {
    /// From a flow scenario's merged figures `m` (which count flows), its
    /// flow figures `f` and its steps' figures, named by `names` (the
    /// plan's order).
    fn of(m: &Figures, f: &FlowFigures, steps: &[RequestFigures], names: &[String]) -> Self {
        let failed = f.failed.total();
        FlowFrame {
            started: m.sent,
            completed: m.completed.saturating_sub(failed),
            failed: f.failed.by_word(),
            latency: m.latency.all(),
            steps: names
                .iter()
                .enumerate()
                .map(|(k, name)| {
                    let q = steps.get(k).cloned().unwrap_or_default();
                    StepFrame {
                        name: name.clone(),
                        sent: q.sent,
                        completed: q.completed,
                        failures: q.failures(),
                        latency: q.latency,
                    }
                })
                .collect(),
        }
    }
}

/// The counts the outputs carry, named as the scrape endpoint names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counts {
    pub intended: u64,
    pub sent: u64,
    pub unsent: BTreeMap<String, u64>,
    /// Lost agents' arrivals whose fate is unknown: a gauge, which goes
    /// down when an agent's last figures arrive after its loss.
    pub unreported: u64,
    pub completed: u64,
    pub status: BTreeMap<u32, u64>,
    pub errors: BTreeMap<String, u64>,
    pub grpc_status: BTreeMap<String, u64>,
    pub failures: u64,
    pub pool_saturated_ns: u64,
}

impl Counts {
    fn of(m: &Figures, unreported: u64) -> Self {
        Self {
            intended: m.intended,
            sent: m.sent,
            unsent: m.unsent.by_word(),
            unreported,
            completed: m.completed,
            status: m.status.iter().map(|(c, n)| (u32::from(c), n)).collect(),
            errors: m.errors.by_word(),
            grpc_status: m.grpc_status.by_word(),
            failures: m.failures(),
            pool_saturated_ns: m.pool_saturated_ns,
        }
    }

    /// What was added since `before` (counters never go down within a
    /// run); a gauge keeps its value now.
    fn since(&self, before: &Counts) -> Counts {
        let sub = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
            a.iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(b.get(k).copied().unwrap_or(0))))
                .collect()
        };
        Counts {
            intended: self.intended.saturating_sub(before.intended),
            sent: self.sent.saturating_sub(before.sent),
            unsent: sub(&self.unsent, &before.unsent),
            unreported: self.unreported,
            completed: self.completed.saturating_sub(before.completed),
            status: self
                .status
                .iter()
                .map(|(k, v)| {
                    (
                        *k,
                        v.saturating_sub(before.status.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect(),
            errors: sub(&self.errors, &before.errors),
            grpc_status: sub(&self.grpc_status, &before.grpc_status),
            failures: self.failures.saturating_sub(before.failures),
            pool_saturated_ns: self
                .pool_saturated_ns
                .saturating_sub(before.pool_saturated_ns),
        }
    }

    pub(crate) fn unsent_total(&self) -> u64 {
        self.unsent.values().sum()
    }
}

/// One push: the run so far, as of the end of `seconds`.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    /// Which run of the plan (0-based, with --repeat).
    pub run: usize,
    /// The settled seconds (from the common start) this frame is the first
    /// to carry; an output that cannot deliver it loses these.
    pub seconds: Range<u64>,
    /// Milliseconds since the Unix epoch the figures are stamped with:
    /// strictly increasing within a run, so receivers keep every sample.
    pub time_ms: i64,
    /// The run's common start, ms since the Unix epoch.
    pub started_ms: i64,
    pub scenarios: Vec<ScenarioFrame>,
    /// Requests in flight at the end of the last settled second.
    pub in_flight: u64,
    pub agents_alive: u64,
    /// Per agent (only with per-agent series asked for): name and totals.
    pub agents: Vec<AgentFrame>,
    /// The last frame of a run: its totals are final.
    pub last: bool,
    /// Only in the frame pushed after the report is made: its verdicts as
    /// (code, level, message); such a frame carries nothing else.
    pub verdicts: Vec<(String, String, String)>,
}

#[derive(Debug, Clone)]
pub(crate) struct AgentFrame {
    pub name: String,
    pub sent: u64,
    pub completed: u64,
    pub cpu_seconds: f64,
    /// Largest send lag so far (µs).
    pub max_lag_us: u64,
}

/// Makes frames from the merged state, remembering what the previous frame
/// of the run carried.
#[derive(Debug, Default)]
pub(crate) struct Framer {
    run: Option<usize>,
    /// Seconds below this were carried by an earlier frame.
    below: u64,
    last_ms: i64,
    previous: Vec<Counts>,
}

impl Framer {
    /// Whether [`Framer::frame`] would make a frame now: a new second
    /// settled, a new run began, or the run is over.
    pub(crate) fn due(&self, run: usize, below: u64) -> bool {
        self.run != Some(run) || below == u64::MAX || below > self.below
    }

    /// The frame for the seconds settled since the last call, or `None`
    /// when no new second settled and the run is not over. `below` is the
    /// fleet's settled bound (`u64::MAX` at the end); `started_ms` the
    /// common start on the wall clock; `steps` each scenario's steps'
    /// names (empty for a scenario that is not a flow).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn frame(
        &mut self,
        run: usize,
        started_ms: i64,
        below: u64,
        agg: &Aggregate,
        names: &[String],
        steps: &[Vec<String>],
        agents: Vec<AgentFrame>,
        agents_alive: u64,
        now_ms: i64,
    ) -> Option<Frame> {
        if self.run != Some(run) {
            *self = Framer {
                run: Some(run),
                ..Framer::default()
            };
        }
        let last = below == u64::MAX;
        let end = if last {
            agg.intervals
                .keys()
                .next_back()
                .map_or(self.below, |&i| (i + 1).max(self.below))
        } else {
            below
        };
        if !last && end <= self.below {
            return None;
        }
        let seconds = self.below..end;
        // Stamped with the end of its last second, or now at the end of the
        // run; never at or before the previous stamp.
        let stamp = if last {
            now_ms
        } else {
            started_ms.saturating_add(i64::try_from(end).unwrap_or(i64::MAX / 2000) * 1000)
        };
        let time_ms = stamp.max(self.last_ms + 1);
        let scenarios: Vec<ScenarioFrame> = agg
            .scenarios
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let totals = Counts::of(m, agg.unreported.scenarios.get(i).copied().unwrap_or(0));
                let step = totals.since(self.previous.get(i).unwrap_or(&Counts::default()));
                let mut step_latency = new_histogram();
                for (_, iv) in agg.intervals.range(seconds.clone()) {
                    for ((sc, _), h) in &iv.latency_by_class {
                        if *sc as usize == i {
                            // Both from `new_histogram`: adding cannot fail.
                            let _ = step_latency.add(h);
                        }
                    }
                }
                ScenarioFrame {
                    name: names
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("scenario-{i}")),
                    totals,
                    step,
                    latency: m.latency.all(),
                    service_time: m.service_time.clone(),
                    step_latency,
                    flow: agg.flows.get(i).and_then(Option::as_ref).map(|f| {
                        FlowFrame::of(
                            m,
                            f,
                            agg.requests.get(i).map_or(&[], Vec::as_slice),
                            steps.get(i).map_or(&[], Vec::as_slice),
                        )
                    }),
                }
            })
            .collect();
        let in_flight = end
            .checked_sub(1)
            .and_then(|i| agg.intervals.get(&i))
            .map_or(0, |iv| iv.in_flight);
        self.previous = scenarios.iter().map(|s| s.totals.clone()).collect();
        self.below = end;
        self.last_ms = time_ms;
        Some(Frame {
            run,
            seconds,
            time_ms,
            started_ms,
            scenarios,
            in_flight,
            agents_alive,
            agents,
            last,
            verdicts: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::figures::Snapshot;
    use loadfleet_proto::histogram::encode;
    use loadfleet_proto::v1;

    fn snapshot(index: u64, scenario: u32, n: u64) -> v1::Snapshot {
        let mut h = new_histogram();
        for v in 0..n {
            h.record(1000 + v).unwrap();
        }
        v1::Snapshot {
            interval_index: index,
            scenario,
            intended: n + 1,
            sent: n,
            unsent: [("late".to_string(), 1)].into_iter().collect(),
            completed: n,
            status: [(200, n)].into_iter().collect(),
            latency: [("2xx".to_string(), encode(&h).unwrap())]
                .into_iter()
                .collect(),
            service_time: encode(&h).unwrap(),
            ..Default::default()
        }
    }

    /// Each frame carries the seconds settled since the one before, with
    /// cumulative totals and the step's own counts; the last frame takes
    /// every remaining second and is stamped after the others.
    #[test]
    fn frames_cover_each_second_once() {
        let mut agg = Aggregate::new(1, 2);
        let names = vec!["a".to_string(), "b".to_string()];
        let mut f = Framer::default();
        for i in 0..4 {
            agg.add(0, &Snapshot::try_from(&snapshot(i, 0, 3)).unwrap());
            agg.add(0, &Snapshot::try_from(&snapshot(i, 1, 2)).unwrap());
        }
        assert!(f.frame(0, 0, 0, &agg, &names, &[], vec![], 1, 0).is_none());
        let one = f.frame(0, 0, 2, &agg, &names, &[], vec![], 1, 0).unwrap();
        assert_eq!(one.seconds, 0..2);
        assert_eq!(one.time_ms, 2000);
        assert_eq!(one.scenarios[0].totals.intended, 16);
        assert_eq!(one.scenarios[0].step_latency.len(), 6);
        assert!(f.frame(0, 0, 2, &agg, &names, &[], vec![], 1, 0).is_none());
        assert!(!f.due(0, 2) && f.due(0, 3) && f.due(0, u64::MAX) && f.due(1, 0));
        agg.add(0, &Snapshot::try_from(&snapshot(4, 0, 5)).unwrap());
        let end = f
            .frame(0, 0, u64::MAX, &agg, &names, &[], vec![], 1, 10)
            .unwrap();
        assert_eq!(end.seconds, 2..5);
        assert!(end.last && end.time_ms == 2001);
        assert_eq!(end.scenarios[0].totals.sent, 17);
        assert_eq!(end.scenarios[0].step.sent, 5);
        assert_eq!(end.scenarios[1].step.intended, 0);
        // A new run starts afresh.
        let next = f
            .frame(1, 100_000, 1, &agg, &names, &[], vec![], 1, 0)
            .unwrap();
        assert_eq!(next.seconds, 0..1);
        assert_eq!(next.scenarios[0].step.sent, 17);
    }

    /// A flow scenario's frame carries its flows (completed = ended less
    /// failed) and every step of the plan, in order, with its counts and
    /// latency; a step no snapshot named yet is there at zero.
    #[test]
    fn a_flow_scenario_carries_its_flows_and_steps() {
        let mut agg = Aggregate::new(1, 1);
        let mut one = snapshot(0, 0, 10);
        one.flow = Some(v1::FlowFigures {
            failed: [("check".to_string(), 2), ("timeout".to_string(), 1)].into(),
            active: Vec::new(),
        });
        let mut h = new_histogram();
        h.record(700).unwrap();
        one.requests = vec![v1::RequestFigures {
            request: 0,
            completed: 12,
            sent: 12,
            reached: 12,
            status: [(200, 10), (500, 2)].into(),
            latency: encode(&h).unwrap(),
            ..Default::default()
        }];
        agg.add(0, &Snapshot::try_from(&one).unwrap());
        let names = vec!["shop".to_string()];
        let steps = vec![vec!["login".to_string(), "cart".to_string()]];
        let frame = Framer::default()
            .frame(0, 0, u64::MAX, &agg, &names, &steps, vec![], 1, 5)
            .unwrap();
        let flow = frame.scenarios[0].flow.as_ref().expect("a flow scenario");
        assert_eq!((flow.started, flow.completed), (10, 7));
        assert_eq!(flow.failed.get("check"), Some(&2));
        assert_eq!(flow.latency.len(), 10);
        let got: Vec<_> = flow
            .steps
            .iter()
            .map(|q| {
                (
                    q.name.as_str(),
                    q.sent,
                    q.completed,
                    q.failures,
                    q.latency.len(),
                )
            })
            .collect();
        assert_eq!(got, [("login", 12, 12, 2, 1), ("cart", 0, 0, 0, 0)]);
        // A scenario that is not a flow has none.
        let plain = Aggregate::new(1, 1);
        let frame = Framer::default()
            .frame(0, 0, u64::MAX, &plain, &names, &[], vec![], 1, 5)
            .unwrap();
        assert!(frame.scenarios[0].flow.is_none());
    }
}
