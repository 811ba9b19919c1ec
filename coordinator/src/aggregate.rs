//! The merged state of a run: every agent's snapshots added together.
//!
//! Snapshots are deltas, so merging is addition: counts are summed and
//! histograms are added bucket by bucket, which makes the result independent
//! of the order and grouping in which snapshots arrive. Percentiles are only
//! ever read from merged histograms, never averaged.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{merge_into, new_histogram, CodecError};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{OutcomeClass, UnsentReason};

/// Intervals tracked per agent for the plan check: the longest scenario
/// allowed, in seconds (the snapshot interval is a second).
const MAX_TRACKED_INTERVALS: usize = loadfleet_proto::bounds::MAX_SCENARIO.as_secs() as usize;

/// Counts and histograms summed over any set of snapshots.
#[derive(Debug, Clone)]
pub struct Merged {
    pub intended: u64,
    pub sent: u64,
    pub unsent: BTreeMap<String, u64>,
    pub completed: u64,
    pub completed_in_window: u64,
    pub status: BTreeMap<u32, u64>,
    pub errors: BTreeMap<String, u64>,
    /// gRPC calls by the name of their grpc-status.
    pub grpc_status: BTreeMap<String, u64>,
    pub latency: BTreeMap<String, Histogram<u64>>,
    pub service_time: Histogram<u64>,
    pub warmup_latency: Histogram<u64>,
    pub lag: Histogram<u64>,
    pub cpu_seconds: f64,
    /// Sum and number of host-CPU samples, to report the mean.
    pub host_cpu: (f64, u64),
    /// 2xx responses inside the measurement window.
    pub completed_ok_in_window: u64,
    /// Time requests waited for a connection in the agents' own pools
    /// (each agent's workers' time divided by their number), nanoseconds.
    pub pool_saturated_ns: u64,
    /// How long requests that found every connection busy waited (µs).
    pub pool_wait: Histogram<u64>,
    /// Where measured requests' time went on the wire (µs): connect and
    /// TLS handshake of new connections, time to first byte, body.
    pub connect_time: Histogram<u64>,
    pub tls_time: Histogram<u64>,
    pub ttfb: Histogram<u64>,
    pub body_time: Histogram<u64>,
    pub connections_opened: u64,
    pub connections_reused: u64,
    /// Connections the agents established, by the protocol spoken on them
    /// (a `vocab::HttpProtocol` word).
    pub connections: BTreeMap<String, u64>,
}

impl Default for Merged {
    fn default() -> Self {
        Self {
            intended: 0,
            sent: 0,
            unsent: BTreeMap::new(),
            completed: 0,
            completed_in_window: 0,
            status: BTreeMap::new(),
            errors: BTreeMap::new(),
            grpc_status: BTreeMap::new(),
            latency: BTreeMap::new(),
            service_time: new_histogram(),
            warmup_latency: new_histogram(),
            lag: new_histogram(),
            cpu_seconds: 0.0,
            host_cpu: (0.0, 0),
            completed_ok_in_window: 0,
            pool_saturated_ns: 0,
            pool_wait: new_histogram(),
            connect_time: new_histogram(),
            tls_time: new_histogram(),
            ttfb: new_histogram(),
            body_time: new_histogram(),
            connections_opened: 0,
            connections_reused: 0,
            connections: BTreeMap::new(),
        }
    }
}

impl Merged {
    /// One snapshot, decoded. Fails as a whole on corrupt histogram bytes,
    /// so a bad snapshot cannot leave counts and histograms disagreeing.
    pub fn from_snapshot(s: &v1::Snapshot) -> Result<Self, CodecError> {
        let decode = |bytes: &[u8]| -> Result<Histogram<u64>, CodecError> {
            let mut h = new_histogram();
            merge_into(&mut h, bytes)?;
            Ok(h)
        };
        let mut latency = BTreeMap::new();
        for (class, bytes) in &s.latency {
            latency.insert(class.clone(), decode(bytes)?);
        }
        Ok(Self {
            intended: s.intended,
            sent: s.sent,
            unsent: s.unsent.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            completed: s.completed,
            completed_in_window: s.completed_in_window,
            status: s.status.iter().map(|(k, v)| (*k, *v)).collect(),
            errors: s.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            grpc_status: s.grpc_status.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            latency,
            service_time: decode(&s.service_time)?,
            warmup_latency: decode(&s.warmup_latency)?,
            lag: decode(&s.lag)?,
            cpu_seconds: s.cpu_seconds,
            host_cpu: if s.host_cpu > 0.0 {
                (s.host_cpu, 1)
            } else {
                (0.0, 0)
            },
            completed_ok_in_window: s.completed_ok_in_window,
            pool_saturated_ns: s.pool_saturated_ns,
            pool_wait: decode(&s.pool_wait)?,
            connect_time: decode(&s.connect_time)?,
            tls_time: decode(&s.tls_time)?,
            ttfb: decode(&s.ttfb)?,
            body_time: decode(&s.body_time)?,
            connections_opened: s.connections_opened,
            connections_reused: s.connections_reused,
            connections: s.connections.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        })
    }

    pub fn unsent_total(&self) -> u64 {
        self.unsent.values().sum()
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Requests that did not succeed: transport errors, 4xx/5xx answers
    /// and gRPC statuses other than OK (1xx and 3xx are neither; see
    /// docs/report.md).
    pub fn failures(&self) -> u64 {
        self.by_class()
            .into_iter()
            .filter(|(class, _)| class.is_failure())
            .map(|(_, n)| n)
            .sum()
    }

    /// Latency over every outcome class.
    pub fn latency_all(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for h in self.latency.values() {
            add_hist(&mut all, h);
        }
        all
    }

    /// Completions per status class (1xx..5xx) and "error".
    pub fn by_class(&self) -> BTreeMap<OutcomeClass, u64> {
        let mut out: BTreeMap<OutcomeClass, u64> = BTreeMap::new();
        for (&code, &n) in &self.status {
            *out.entry(OutcomeClass::of_wire_status(code)).or_default() += n;
        }
        let errors = self.errors_total();
        if errors > 0 {
            out.insert(OutcomeClass::Error, errors);
        }
        for (name, &n) in &self.grpc_status {
            *out.entry(OutcomeClass::of_grpc_word(name)).or_default() += n;
        }
        out
    }
}

/// Both sides are auto-resizing, so `add` can only fail on a precision
/// mismatch, which cannot happen between histograms made by `new_histogram`.
fn add_hist(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if let Err(e) = into.add(from) {
        tracing::error!("histogram merge failed: {e:?}");
    }
}

/// The whole run's merged state: totals, per scenario, per agent, per
/// interval.
#[derive(Debug, Default)]
pub struct Aggregate {
    pub totals: Merged,
    pub scenarios: Vec<Merged>,
    /// Per agent: counts, CPU, pool time and send lag only (see
    /// `merge_agent`); its latency histograms stay empty.
    pub agents: Vec<Merged>,
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
    /// Per scenario, each request of its mix by index (`per_request`).
    pub requests: Vec<Vec<crate::per_request::RequestMerged>>,
}

/// One second of the run, all agents together.
#[derive(Debug, Clone, Default)]
pub struct IntervalAgg {
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub unsent_by_reason: BTreeMap<String, u64>,
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
    pub latency_by_class: BTreeMap<(u32, String), Histogram<u64>>,
    /// Set once the second was folded by [`Aggregate::fold_settled`]: its
    /// histograms were handed to the interval log and dropped, and only
    /// these figures of its latency are kept, so memory does not grow with
    /// run length.
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
    pub latency_by_class: BTreeMap<(u32, String), Histogram<u64>>,
}

impl Aggregate {
    pub fn new(agents: usize, scenarios: usize) -> Self {
        Self {
            totals: Merged::default(),
            scenarios: vec![Merged::default(); scenarios],
            agents: vec![Merged::default(); agents],
            intervals: BTreeMap::new(),
            folded_below: 0,
            straggled: Default::default(),
            reported: vec![vec![Vec::new(); scenarios]; agents],
            held: vec![vec![0; scenarios]; agents],
            sse: vec![None; scenarios],
            requests: vec![Vec::new(); scenarios],
        }
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
        let mut one = Merged {
            intended,
            ..Merged::default()
        };
        one.unsent.insert(reason.as_str().to_string(), n);
        merge(&mut self.totals, &one);
        if let Some(a) = self.agents.get_mut(agent) {
            merge_agent(a, &one);
        }
        if let Some(sc) = self.scenarios.get_mut(scenario) {
            merge(sc, &one);
        }
        let iv = self.intervals.entry(interval).or_default();
        iv.intended += intended;
        iv.unsent += n;
        *iv.unsent_by_reason
            .entry(reason.as_str().to_string())
            .or_default() += n;
    }

    /// Adds one agent's snapshot to the totals, its agent and its interval.
    pub fn add(&mut self, agent: usize, s: &v1::Snapshot) -> Result<(), CodecError> {
        // Decode once, then add that everywhere.
        let one = Merged::from_snapshot(s)?;
        let requests = crate::per_request::decode(s)?;
        if let (Some(figures), Some(sse)) = (&s.sse, self.sse.get_mut(s.scenario as usize)) {
            // First, and all or nothing: a corrupt histogram here leaves
            // the rest of the snapshot unmerged too.
            sse.get_or_insert_with(Default::default)
                .add(s.interval_index, figures)?;
        }
        merge(&mut self.totals, &one);
        if let Some(a) = self.agents.get_mut(agent) {
            merge_agent(a, &one);
        }
        if let Some(sc) = self.scenarios.get_mut(s.scenario as usize) {
            merge(sc, &one);
        }
        if let Some(r) = self.requests.get_mut(s.scenario as usize) {
            crate::per_request::merge(r, &requests);
        }
        if let Some(h) = self
            .held
            .get_mut(agent)
            .and_then(|a| a.get_mut(s.scenario as usize))
        {
            // The agent's snapshots were checked to resolve no more than
            // they intended, so this never saturates for a sound agent.
            *h = (*h + one.intended).saturating_sub(one.sent + one.unsent_total());
        }
        if one.intended > 0 {
            if let Some(row) = self
                .reported
                .get_mut(agent)
                .and_then(|a| a.get_mut(s.scenario as usize))
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
        iv.unsent += one.unsent_total();
        for (reason, n) in &one.unsent {
            *iv.unsent_by_reason.entry(reason.clone()).or_default() += n;
        }
        iv.completed += one.completed;
        for (class, n) in one.by_class() {
            *iv.classes.entry(class).or_default() += n;
        }
        iv.errors += one.errors_total();
        iv.in_flight += s.in_flight;
        iv.max_in_flight += s.max_in_flight;
        if !one.lag.is_empty() {
            iv.max_lag_us = iv.max_lag_us.max(one.lag.max());
        }
        let all = one.latency_all();
        // A folded second keeps only its summary: stragglers go to the
        // totals and, through `latency_by_class`, to the interval log.
        if !all.is_empty() && iv.folded.is_none() {
            add_hist(iv.latency.get_or_insert_with(new_histogram), &all);
        }
        if iv.folded.is_some() && !one.latency.is_empty() {
            self.straggled.insert(s.interval_index);
        }
        for (class, h) in &one.latency {
            add_hist(
                iv.latency_by_class
                    .entry((s.scenario, class.clone()))
                    .or_insert_with(new_histogram),
                h,
            );
        }
        Ok(())
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
fn merge_agent(into: &mut Merged, from: &Merged) {
    let latency_free = Merged {
        intended: from.intended,
        sent: from.sent,
        unsent: from.unsent.clone(),
        completed: from.completed,
        completed_in_window: from.completed_in_window,
        status: from.status.clone(),
        errors: from.errors.clone(),
        cpu_seconds: from.cpu_seconds,
        host_cpu: from.host_cpu,
        completed_ok_in_window: from.completed_ok_in_window,
        pool_saturated_ns: from.pool_saturated_ns,
        connections_opened: from.connections_opened,
        connections_reused: from.connections_reused,
        connections: from.connections.clone(),
        ..Merged::default()
    };
    merge(into, &latency_free);
    add_hist(&mut into.lag, &from.lag);
}

fn merge(into: &mut Merged, from: &Merged) {
    into.intended += from.intended;
    into.sent += from.sent;
    for (k, v) in &from.unsent {
        *into.unsent.entry(k.clone()).or_default() += v;
    }
    into.completed += from.completed;
    into.completed_in_window += from.completed_in_window;
    for (k, v) in &from.status {
        *into.status.entry(*k).or_default() += v;
    }
    for (k, v) in &from.errors {
        *into.errors.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &from.grpc_status {
        *into.grpc_status.entry(k.clone()).or_default() += v;
    }
    for (k, h) in &from.latency {
        add_hist(
            into.latency.entry(k.clone()).or_insert_with(new_histogram),
            h,
        );
    }
    add_hist(&mut into.service_time, &from.service_time);
    add_hist(&mut into.warmup_latency, &from.warmup_latency);
    add_hist(&mut into.lag, &from.lag);
    into.cpu_seconds += from.cpu_seconds;
    into.host_cpu.0 += from.host_cpu.0;
    into.host_cpu.1 += from.host_cpu.1;
    into.completed_ok_in_window += from.completed_ok_in_window;
    into.pool_saturated_ns += from.pool_saturated_ns;
    add_hist(&mut into.pool_wait, &from.pool_wait);
    add_hist(&mut into.connect_time, &from.connect_time);
    add_hist(&mut into.tls_time, &from.tls_time);
    add_hist(&mut into.ttfb, &from.ttfb);
    add_hist(&mut into.body_time, &from.body_time);
    into.connections_opened += from.connections_opened;
    into.connections_reused += from.connections_reused;
    for (k, v) in &from.connections {
        *into.connections.entry(k.clone()).or_default() += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::histogram::encode;
    use proptest::prelude::*;

    fn snapshot(index: u64, values: &[u64], code: u32) -> v1::Snapshot {
        let mut h = new_histogram();
        for &v in values {
            h.record(v).unwrap();
        }
        let n = values.len() as u64;
        v1::Snapshot {
            interval_index: index,
            intended: n + 1,
            sent: n,
            unsent: [("late".to_string(), 1)].into_iter().collect(),
            completed: n,
            completed_in_window: n / 2,
            status: [(code, n)].into_iter().collect(),
            latency: [(
                OutcomeClass::of_wire_status(code).to_string(),
                encode(&h).unwrap(),
            )]
            .into_iter()
            .collect(),
            service_time: encode(&h).unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn agents_keep_counts_and_lag_but_no_latency_histograms() {
        let mut agg = Aggregate::new(1, 1);
        agg.add(0, &snapshot(0, &[100, 2000, 30000], 200)).unwrap();
        let (agent, totals) = (&agg.agents[0], &agg.totals);
        assert_eq!(agent.completed, totals.completed);
        assert_eq!(agent.intended, totals.intended);
        assert!(agent.latency.is_empty() && agent.service_time.is_empty());
        assert!(!totals.latency.is_empty());
        assert_eq!(agent.lag.len(), totals.lag.len());
    }

    #[test]
    fn corrupt_snapshot_adds_nothing() {
        let mut a = Aggregate::new(1, 1);
        let mut s = snapshot(0, &[5, 6], 200);
        s.service_time = vec![9, 9, 9];
        assert!(a.add(0, &s).is_err());
        assert_eq!(a.totals.intended, 0);
    }

    /// Folding as seconds settle keeps the per-second state flat in run
    /// length: after ten minutes of seconds, only the unsettled ones hold
    /// histograms, every second keeps its counts and p50/p99, and
    /// stragglers to a folded second reach the log, not its summary.
    #[test]
    fn folding_keeps_memory_flat_and_figures_exact() {
        let mut a = Aggregate::new(2, 1);
        for i in 0..600u64 {
            for agent in 0..2 {
                a.add(agent, &snapshot(i, &[1000 + i, 2000 + i, 3000 + i], 200))
                    .unwrap();
            }
            // Settled: all but the last two seconds.
            let folded = a.fold_settled(i.saturating_sub(1));
            assert!(folded.len() <= 1);
            assert!(a.interval_histograms() <= 4, "at {i}");
        }
        assert_eq!(a.intervals.len(), 600);
        let iv = &a.intervals[&100];
        assert_eq!(iv.completed, 6);
        assert!(iv.latency.is_none() && iv.latency_by_class.is_empty());
        let mut whole = new_histogram();
        for v in [1100, 2100, 3100, 1100, 2100, 3100] {
            whole.record(v).unwrap();
        }
        let expected = IntervalLatency {
            p50_us: Some(whole.value_at_quantile(0.5)),
            p99_us: Some(whole.value_at_quantile(0.99)),
        };
        assert_eq!(iv.latency_summary(), expected);
        // A straggler: counted, handed over once for the log, summary kept.
        a.add(0, &snapshot(100, &[9_000_000], 200)).unwrap();
        assert_eq!(a.intervals[&100].completed, 7);
        let again = a.fold_settled(598);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].index, 100);
        assert!(again[0].first.is_none());
        assert_eq!(
            again[0]
                .latency_by_class
                .values()
                .map(|h| h.len())
                .sum::<u64>(),
            1
        );
        assert_eq!(a.intervals[&100].latency_summary(), expected);
        assert!(a.fold_settled(598).is_empty());
        assert_eq!(a.totals.completed, 600 * 6 + 1);
    }

    proptest! {
        /// However snapshots are spread over agents and intervals, the totals
        /// equal the sum of the parts and the merged histogram equals one
        /// histogram of every value; intended == sent + unsent holds.
        #[test]
        fn totals_are_exact_sums(
            parts in prop::collection::vec(
                (0usize..4, 0u64..10, prop::collection::vec(1u64..10_000_000, 0..50), prop_oneof![Just(200u32), Just(429), Just(503)]),
                1..30)
        ) {
            let mut agg = Aggregate::new(4, 1);
            let mut whole = new_histogram();
            let mut count = 0u64;
            for (agent, index, values, code) in &parts {
                agg.add(*agent, &snapshot(*index, values, *code)).unwrap();
                for &v in values { whole.record(v).unwrap(); }
                count += values.len() as u64;
            }
            let t = &agg.totals;
            prop_assert_eq!(t.completed, count);
            prop_assert_eq!(t.intended, t.sent + t.unsent_total());
            let all = t.latency_all();
            prop_assert_eq!(all.len(), whole.len());
            if !whole.is_empty() {
                prop_assert_eq!(all.value_at_quantile(0.99), whole.value_at_quantile(0.99));
                prop_assert_eq!(all.max(), whole.max());
            }
            let per_agent: u64 = agg.agents.iter().map(|a| a.completed).sum();
            prop_assert_eq!(per_agent, count);
            let per_interval: u64 = agg.intervals.values().map(|i| i.completed).sum();
            prop_assert_eq!(per_interval, count);
            let status_sum: u64 = t.status.values().sum();
            prop_assert_eq!(status_sum, count);
        }
    }
}
