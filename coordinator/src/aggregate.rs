//! The merged state of a run: every agent's snapshots added together.
//!
//! Snapshots are deltas, so merging is addition: counts are summed and
//! histograms are added bucket by bucket, which makes the result independent
//! of the order and grouping in which snapshots arrive. Percentiles are only
//! ever read from merged histograms, never averaged.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use loadfleet_proto::figures::{
    Figure, Figures, FlowFigures, RequestFigures, Snapshot, UnsentCounts,
};
use loadfleet_proto::histogram::new_histogram;
use loadfleet_proto::vocab::{OutcomeClass, UnsentReason};

/// Intervals tracked per agent for the plan check: the longest scenario
/// allowed, in seconds (the snapshot interval is a second).
const MAX_TRACKED_INTERVALS: usize = loadfleet_proto::bounds::MAX_SCENARIO.as_secs() as usize;

/// The whole run's merged state: totals, per scenario, per agent, per
/// interval.
#[derive(Debug, Default)]
pub struct Aggregate {
    pub totals: Figures,
    pub scenarios: Vec<Figures>,
    /// Per agent: counts, CPU, pool time and send lag only (see
    /// `add_agent`); its latency histograms stay empty.
    pub agents: Vec<Figures>,
    pub intervals: BTreeMap<u64, IntervalAgg>,
    /// Seconds below this were folded by [`Aggregate::fold_settled`].
    folded_below: u64,
    /// Folded seconds that stragglers have added latency to since.
    straggled: std::collections::BTreeSet<u64>,
    /// Arrivals each agent reported intended, per scenario and interval
    /// (`[agent][scenario][interval]`), to set against the plan when an
    /// agent is lost.
    pub reported: Vec<Vec<Vec<u64>>>,
    /// Arrivals each agent reported intended and not yet sent or unsent,
    /// per scenario (`[agent][scenario]`): those waiting for one of its
    /// connections. A lost agent's are booked unsent `agent_lost`.
    held: Vec<Vec<u64>>,
    /// Subscription figures per scenario (`None` for request scenarios).
    pub sse: Vec<Option<crate::sse::SseMerged>>,
    /// Per scenario, each request of its mix (or step of its flow) by
    /// index.
    pub requests: Vec<Vec<RequestFigures>>,
    /// Per scenario, what only flows have (`None` for other scenarios).
    pub flows: Vec<Option<FlowFigures>>,
    /// Lost agents' arrivals whose fate is unknown, by scope.
    pub unreported: Unreported,
}

/// Arrivals of lost agents' shares due between their last report and the
/// instant they had certainly stopped: nobody can say whether they were
/// sent, so they are neither `sent` nor `unsent`, and `intended == sent +
/// unsent.total + unreported` holds in every scope (docs/report.md).
/// Booked by the coordinator, never reported by an agent; it goes down
/// when an agent's last figures arrive after its loss.
#[derive(Debug, Clone, Default)]
pub struct Unreported {
    pub total: u64,
    /// By scenario (flows, for a flow scenario: it counts flows).
    pub scenarios: Vec<u64>,
    /// By agent, as [`Aggregate::agents`].
    pub agents: Vec<u64>,
}

/// One second of the run, all agents together.
#[derive(Debug, Clone, Default)]
pub struct IntervalAgg {
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub unsent_by_reason: UnsentCounts,
    /// Lost agents' arrivals due in this second whose fate is unknown.
    pub unreported: u64,
    pub completed: u64,
    pub classes: BTreeMap<OutcomeClass, u64>,
    pub errors: u64,
    pub in_flight: u64,
    /// Sum over agents and workers of their largest in-flight count: an
    /// upper bound of the fleet's in-flight requests during the interval.
    pub max_in_flight: u64,
    pub latency: Option<Histogram<u64>>,
    pub max_lag_us: u64,
    /// Latency per (scenario index, outcome class), for the HdrHistogram
    /// interval log.
    pub latency_by_class: BTreeMap<(u32, OutcomeClass), Histogram<u64>>,
    /// Set once the second was folded by [`Aggregate::fold_settled`]: its
    /// histograms were handed to the interval log and dropped, and only
    /// these figures of its latency are kept, so memory does not grow with
    /// run length.
    pub folded: Option<IntervalLatency>,
    /// Each scenario's part of the second, by scenario index: the
    /// steadiness check reads a scenario's own seconds, not the run's mix.
    pub scenarios: BTreeMap<u32, ScenarioSecond>,
}

/// One scenario's part of a second, all agents together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScenarioSecond {
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub completed: u64,
    /// In flight at the second's end, summed over the agents.
    pub in_flight: u64,
    /// Kept when the second is folded, as [`IntervalAgg::folded`] is.
    pub folded: Option<IntervalLatency>,
}

/// The figures of one second's latency that outlive its histogram
/// (microseconds); `None` inside when nothing completed in that second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntervalLatency {
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
}

impl IntervalAgg {
    /// p50 and p99 of the second, from its histogram while it is held and
    /// from what was kept of it once folded.
    pub fn latency_summary(&self) -> IntervalLatency {
        if let Some(kept) = self.folded {
            return kept;
        }
        let q = |q: f64| {
            self.latency
                .as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(q))
        };
        IntervalLatency {
            p50_us: q(0.5),
            p99_us: q(0.99),
        }
    }

    /// p50 and p99 of one scenario's completions in the second: merged
    /// from its classes while they are held, what was kept once folded.
    pub fn scenario_latency(&self, scenario: u32) -> IntervalLatency {
        if let Some(kept) = self.scenarios.get(&scenario).and_then(|s| s.folded) {
            return kept;
        }
        let mut merged: Option<Histogram<u64>> = None;
        for (_, h) in self
            .latency_by_class
            .range((scenario, OutcomeClass::ALL[0])..)
            .take_while(|((s, _), _)| *s == scenario)
        {
            Figure::add(merged.get_or_insert_with(new_histogram), h);
        }
        let q = |q: f64| {
            merged
                .as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(q))
        };
        IntervalLatency {
            p50_us: q(0.5),
            p99_us: q(0.99),
        }
    }
}

/// What [`Aggregate::fold_settled`] hands over of one second.
#[derive(Debug)]
pub struct SettledSecond {
    pub index: u64,
    /// The second's figures (without histograms) when it is folded for the
    /// first time; `None` for stragglers: latency of a second folded
    /// earlier, which arrived after it was folded.
    pub first: Option<IntervalAgg>,
    /// Latency per (scenario index, outcome class), taken out of memory.
    pub latency_by_class: BTreeMap<(u32, OutcomeClass), Histogram<u64>>,
}

impl Aggregate {
    pub fn new(agents: usize, scenarios: usize) -> Self {
        Self {
            totals: Figures::default(),
            scenarios: vec![Figures::default(); scenarios],
            agents: vec![Figures::default(); agents],
            intervals: BTreeMap::new(),
            folded_below: 0,
            straggled: Default::default(),
            reported: vec![vec![Vec::new(); scenarios]; agents],
            held: vec![vec![0; scenarios]; agents],
            sse: vec![None; scenarios],
            requests: vec![Vec::new(); scenarios],
            flows: vec![None; scenarios],
            unreported: Unreported {
                total: 0,
                scenarios: vec![0; scenarios],
                agents: vec![0; agents],
            },
        }
    }

    /// Keeps only the agents `keep` says, in order, in every per-agent
    /// figure (the report lists agents by position).
    pub fn keep_agents(&mut self, keep: &[bool]) {
        let mut i = 0;
        self.agents.retain(|_| {
            i += 1;
            keep.get(i - 1).copied().unwrap_or(true)
        });
        let mut i = 0;
        self.unreported.agents.retain(|_| {
            i += 1;
            keep.get(i - 1).copied().unwrap_or(true)
        });
    }

    /// What `agent` reported intended in `scenario`, interval by interval.
    pub fn reported(&self, agent: usize, scenario: usize) -> &[u64] {
        self.reported
            .get(agent)
            .and_then(|a| a.get(scenario))
            .map_or(&[], Vec::as_slice)
    }

    /// Arrivals `agent` reported intended in `scenario` and never reported
    /// sent or unsent.
    pub fn held(&self, agent: usize, scenario: usize) -> u64 {
        self.held
            .get(agent)
            .and_then(|a| a.get(scenario))
            .copied()
            .unwrap_or(0)
    }

    /// Books `n` arrivals the plan intended and nobody sent as unsent for
    /// `reason`, in the totals, the scenario, the agent and the interval, so
    /// that `intended == sent + unsent` keeps holding everywhere.
    pub fn book_unsent(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        n: u64,
        reason: UnsentReason,
    ) {
        if n == 0 {
            return;
        }
        self.book(agent, scenario, interval, n, n, reason);
    }

    /// Books `n` arrivals `agent` reported intended but never sent or
    /// unsent (it was lost while they waited for its connections) as unsent
    /// for `reason`.
    pub fn book_held_unsent(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        n: u64,
        reason: UnsentReason,
    ) {
        let held = self.held(agent, scenario).min(n);
        if held == 0 {
            return;
        }
        if let Some(h) = self.held.get_mut(agent).and_then(|a| a.get_mut(scenario)) {
            *h -= held;
        }
        self.book(agent, scenario, interval, 0, held, reason);
    }

    /// Books arrivals of a lost agent's share whose fate is unknown:
    /// `intended` more planned arrivals it never reported, and `n`
    /// unreported (those, and any it reported intended and never resolved),
    /// in the totals, the scenario, the agent and the interval.
    pub fn book_unreported(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        intended: u64,
        n: u64,
    ) {
        if intended == 0 && n == 0 {
            return;
        }
        self.revise(agent, scenario, |f| f.intended += intended);
        self.shift_unreported(agent, scenario, interval, n, true);
        self.intervals.entry(interval).or_default().intended += intended;
    }

    /// Takes the arrivals `agent` reported held (intended, neither sent nor
    /// unsent) in `scenario`: it was lost, and they are booked unreported
    /// at `interval`. Returns how many.
    pub fn book_held_unreported(&mut self, agent: usize, scenario: usize, interval: u64) -> u64 {
        let Some(h) = self.held.get_mut(agent).and_then(|a| a.get_mut(scenario)) else {
            return 0;
        };
        let held = std::mem::take(h);
        self.shift_unreported(agent, scenario, interval, held, true);
        held
    }

    /// Takes back arrivals booked for a lost agent that its own late
    /// figures now report: `unreported` of those booked unknown and `lost`
    /// of those booked unsent `agent_lost`, intended with them (the
    /// snapshot that reports them adds them again).
    pub fn unbook(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        unreported: u64,
        lost: u64,
    ) {
        let n = unreported + lost;
        if n == 0 {
            return;
        }
        self.revise(agent, scenario, |f| {
            f.intended = f.intended.saturating_sub(n);
            f.unsent.take(UnsentReason::AgentLost, lost);
        });
        self.shift_unreported(agent, scenario, interval, unreported, false);
        let iv = self.intervals.entry(interval).or_default();
        iv.intended = iv.intended.saturating_sub(n);
        iv.unsent = iv.unsent.saturating_sub(lost);
        iv.unsent_by_reason.take(UnsentReason::AgentLost, lost);
    }

    /// `n` arrivals booked unreported are known now: resolved by a
    /// snapshot already added (`into` is `None`), or certainly never sent
    /// (`Some(reason)`, booked unsent), at `interval`.
    pub fn settle_unreported(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        n: u64,
        into: Option<UnsentReason>,
    ) {
        if n == 0 {
            return;
        }
        self.shift_unreported(agent, scenario, interval, n, false);
        if let Some(reason) = into {
            self.book(agent, scenario, interval, 0, n, reason);
        }
    }

    /// Adds (`up`) or takes `n` unreported in every scope.
    fn shift_unreported(&mut self, agent: usize, scenario: usize, interval: u64, n: u64, up: bool) {
        let shift = |v: &mut u64| {
            *v = if up {
                v.saturating_add(n)
            } else {
                v.saturating_sub(n)
            }
        };
        let u = &mut self.unreported;
        shift(&mut u.total);
        if let Some(v) = u.scenarios.get_mut(scenario) {
            shift(v);
        }
        if let Some(v) = u.agents.get_mut(agent) {
            shift(v);
        }
        shift(&mut self.intervals.entry(interval).or_default().unreported);
    }

    /// Changes the counts of the totals, the scenario and the agent alike.
    fn revise(&mut self, agent: usize, scenario: usize, change: impl Fn(&mut Figures)) {
        change(&mut self.totals);
        if let Some(a) = self.agents.get_mut(agent) {
            change(a);
        }
        if let Some(sc) = self.scenarios.get_mut(scenario) {
            change(sc);
        }
    }

    /// Adds `intended` arrivals and `n` unsent for `reason` everywhere.
    fn book(
        &mut self,
        agent: usize,
        scenario: usize,
        interval: u64,
        intended: u64,
        n: u64,
        reason: UnsentReason,
    ) {
        let mut one = Figures {
            intended,
            ..Figures::default()
        };
        one.unsent.add(reason, n);
        self.totals += &one;
        if let Some(a) = self.agents.get_mut(agent) {
            add_agent(a, &one);
        }
        if let Some(sc) = self.scenarios.get_mut(scenario) {
            *sc += &one;
        }
        let iv = self.intervals.entry(interval).or_default();
        iv.intended += intended;
        iv.unsent += n;
        iv.unsent_by_reason.add(reason, n);
        let part = iv.scenarios.entry(scenario as u32).or_default();
        part.intended += intended;
        part.unsent += n;
    }

    /// Adds one agent's decoded snapshot (checked by the fleet) to the
    /// totals, its scenario, its agent and its interval.
    pub fn add(&mut self, agent: usize, s: &Snapshot) {
        let one = &s.figures;
        let scenario = s.scenario as usize;
        if let (Some(figures), Some(flow)) = (&s.flow, self.flows.get_mut(scenario)) {
            *flow.get_or_insert_with(Default::default) += figures;
        }
        if let (Some(figures), Some(sse)) = (&s.sse, self.sse.get_mut(scenario)) {
            sse.get_or_insert_with(Default::default)
                .add(s.interval_index, figures);
        }
        self.totals += one;
        if let Some(a) = self.agents.get_mut(agent) {
            add_agent(a, one);
        }
        if let Some(sc) = self.scenarios.get_mut(scenario) {
            *sc += one;
        }
        if let Some(into) = self.requests.get_mut(scenario) {
            for (kind, figures) in &s.requests {
                let kind = *kind as usize;
                if into.len() <= kind {
                    into.resize_with(kind + 1, RequestFigures::default);
                }
                into[kind] += figures;
            }
        }
        if let Some(h) = self.held.get_mut(agent).and_then(|a| a.get_mut(scenario)) {
            // The agent's snapshots were checked to resolve no more than
            // they intended, so this never saturates for a sound agent.
            *h = (*h + one.intended).saturating_sub(one.sent + one.unsent.total());
        }
        if one.intended > 0 {
            if let Some(row) = self
                .reported
                .get_mut(agent)
                .and_then(|a| a.get_mut(scenario))
            {
                // An index far past the run is a broken agent: it still
                // counts in the totals, but must not grow this table.
                let i = s.interval_index as usize;
                if i < MAX_TRACKED_INTERVALS {
                    if row.len() <= i {
                        row.resize(i + 1, 0);
                    }
                    row[i] += one.intended;
                }
            }
        }
        let iv = self.intervals.entry(s.interval_index).or_default();
        iv.intended += one.intended;
        iv.sent += one.sent;
        iv.unsent += one.unsent.total();
        Figure::add(&mut iv.unsent_by_reason, &one.unsent);
        iv.completed += one.completed;
        for (class, n) in one.by_class().iter() {
            *iv.classes.entry(class).or_default() += n;
        }
        iv.errors += one.errors.total();
        iv.in_flight += s.gauges.in_flight;
        iv.max_in_flight += s.gauges.max_in_flight;
        let part = iv.scenarios.entry(s.scenario).or_default();
        part.intended += one.intended;
        part.sent += one.sent;
        part.unsent += one.unsent.total();
        part.completed += one.completed;
        part.in_flight += s.gauges.in_flight;
        if !one.lag.is_empty() {
            iv.max_lag_us = iv.max_lag_us.max(one.lag.max());
        }
        let all = one.latency.all();
        // A folded second keeps only its summary: stragglers go to the
        // totals and, through `latency_by_class`, to the interval log.
        if !all.is_empty() && iv.folded.is_none() {
            Figure::add(iv.latency.get_or_insert_with(new_histogram), &all);
        }
        if iv.folded.is_some() && !one.latency.is_empty() {
            self.straggled.insert(s.interval_index);
        }
        for (class, h) in one.latency.iter() {
            Figure::add(
                iv.latency_by_class
                    .entry((s.scenario, class))
                    .or_insert_with(new_histogram),
                h,
            );
        }
    }
}

impl Aggregate {
    /// Folds every second below `below`, which will get no more snapshots
    /// in the normal course: hands over its per-class histograms (for the
    /// interval log) and its figures (for the CSV), and keeps only its
    /// counts and [`IntervalLatency`]. Seconds folded before come back only
    /// when stragglers added latency to them since. In index order.
    pub fn fold_settled(&mut self, below: u64) -> Vec<SettledSecond> {
        let mut out = Vec::new();
        // Only the seconds that can have changed: stragglers, and those not
        // folded yet, so a call costs nothing in run length.
        let fresh = self.folded_below.min(below)..below;
        let straggled = std::mem::take(&mut self.straggled);
        let indices = straggled.into_iter().chain(
            self.intervals
                .range(fresh)
                .map(|(&i, _)| i)
                .collect::<Vec<_>>(),
        );
        for index in indices {
            let Some(iv) = self.intervals.get_mut(&index) else {
                continue;
            };
            if iv.folded.is_none() {
                // Each scenario's p50/p99 are read from its classes before
                // they are handed over.
                let kept: Vec<(u32, IntervalLatency)> = iv
                    .scenarios
                    .keys()
                    .map(|&k| (k, iv.scenario_latency(k)))
                    .collect();
                for (k, latency) in kept {
                    if let Some(part) = iv.scenarios.get_mut(&k) {
                        part.folded = Some(latency);
                    }
                }
            }
            let latency_by_class = std::mem::take(&mut iv.latency_by_class);
            let first = if iv.folded.is_none() {
                iv.folded = Some(iv.latency_summary());
                iv.latency = None;
                Some(iv.clone())
            } else if latency_by_class.is_empty() {
                continue;
            } else {
                None
            };
            out.push(SettledSecond {
                index,
                first,
                latency_by_class,
            });
        }
        self.folded_below = self.folded_below.max(below);
        out
    }

    /// Histograms held per second (not folded yet): what grows with run
    /// length when nothing folds.
    pub fn interval_histograms(&self) -> usize {
        self.intervals
            .values()
            .map(|iv| usize::from(iv.latency.is_some()) + iv.latency_by_class.len())
            .sum()
    }
}

/// Adds to one agent's figures only what the report reads per agent: the
/// counts, CPU, pool time and send lag. Its latency, service-time, warm-up and
/// pool-wait histograms are already in the totals and scenarios; keeping them
/// per agent would cost ~0.45 MiB an agent (half a gigabyte at 1,000 agents,
/// docs/design/fleet-protocol.md) for figures no report shows.
fn add_agent(into: &mut Figures, from: &Figures) {
    into.add_counts(from);
    Figure::add(&mut into.lag, &from.lag);
}

#[cfg(test)]
mod tests;
