//! The merged state against the values the snapshots carried: exact sums
//! whatever the agents, intervals and (per request) the split.

use super::*;
use loadfleet_proto::histogram::encode;
use loadfleet_proto::v1;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The snapshot as the fleet hands it over: decoded.
fn decoded(s: v1::Snapshot) -> Snapshot {
    Snapshot::try_from(&s).expect("an honest snapshot")
}

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
    agg.add(0, &decoded(snapshot(0, &[100, 2000, 30000], 200)));
    let (agent, totals) = (&agg.agents[0], &agg.totals);
    assert_eq!(agent.completed, totals.completed);
    assert_eq!(agent.intended, totals.intended);
    assert!(agent.latency.is_empty() && agent.service_time.is_empty());
    assert!(!totals.latency.is_empty());
    assert_eq!(agent.lag.len(), totals.lag.len());
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
            a.add(
                agent,
                &decoded(snapshot(i, &[1000 + i, 2000 + i, 3000 + i], 200)),
            );
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
    a.add(0, &decoded(snapshot(100, &[9_000_000], 200)));
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

/// Each scenario keeps its own part of a second: its counts, in-flight
/// gauge and latency, read the same before and after the second folds.
#[test]
fn each_scenario_keeps_its_own_seconds() {
    let mut a = Aggregate::new(2, 2);
    let of = |scenario: u32, agent_in_flight: u64, values: &[u64]| {
        let mut s = decoded(snapshot(3, values, 200));
        s.scenario = scenario;
        s.gauges.in_flight = agent_in_flight;
        s
    };
    a.add(0, &of(0, 5, &[1000, 1000, 1000]));
    a.add(1, &of(0, 7, &[3000]));
    a.add(0, &of(1, 2, &[90_000, 91_000]));
    let iv = &a.intervals[&3];
    let first = iv.scenarios[&0];
    assert_eq!(
        (
            first.intended,
            first.sent,
            first.unsent,
            first.completed,
            first.in_flight
        ),
        (6, 4, 2, 4, 12)
    );
    assert_eq!(iv.scenarios[&1].in_flight, 2);
    assert_eq!(iv.in_flight, 14);
    let mut whole = new_histogram();
    for v in [1000, 1000, 1000, 3000] {
        whole.record(v).unwrap();
    }
    let expected = IntervalLatency {
        p50_us: Some(whole.value_at_quantile(0.5)),
        p99_us: Some(whole.value_at_quantile(0.99)),
    };
    assert_eq!(iv.scenario_latency(0), expected);
    let other = iv.scenario_latency(1);
    assert!(other.p50_us.is_some_and(|p| p >= 89_000));
    assert_eq!(iv.scenario_latency(7), IntervalLatency::default());
    // Booked unsent arrivals count in their scenario's second too.
    a.book_unsent(1, 1, 3, 4, UnsentReason::AgentLost);
    assert_eq!(a.intervals[&3].scenarios[&1].unsent, 1 + 4);
    assert_eq!(a.intervals[&3].scenarios[&1].intended, 3 + 4);
    a.fold_settled(10);
    let iv = &a.intervals[&3];
    assert!(iv.latency_by_class.is_empty());
    assert_eq!(iv.scenario_latency(0), expected);
    assert_eq!(iv.scenario_latency(1), other);
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
            agg.add(*agent, &decoded(snapshot(*index, values, *code)));
            for &v in values { whole.record(v).unwrap(); }
            count += values.len() as u64;
        }
        let t = &agg.totals;
        prop_assert_eq!(t.completed, count);
        prop_assert_eq!(t.intended, t.sent + t.unsent.total());
        let all = t.latency.all();
        prop_assert_eq!(all.len(), whole.len());
        if !whole.is_empty() {
            prop_assert_eq!(all.value_at_quantile(0.99), whole.value_at_quantile(0.99));
            prop_assert_eq!(all.max(), whole.max());
        }
        let per_agent: u64 = agg.agents.iter().map(|a| a.completed).sum();
        prop_assert_eq!(per_agent, count);
        let per_interval: u64 = agg.intervals.values().map(|i| i.completed).sum();
        prop_assert_eq!(per_interval, count);
        let status_sum = t.status.total();
        prop_assert_eq!(status_sum, count);
    }
}

/// A snapshot whose completions are split over two requests the way an
/// agent splits them: request 0 answers `ok`, request 1 `code`.
fn split(index: u64, values: &[(bool, u64)], code: u32) -> v1::Snapshot {
    let mut whole = new_histogram();
    let mut parts = [new_histogram(), new_histogram()];
    let mut status: BTreeMap<u32, u64> = BTreeMap::new();
    let mut requests = vec![
        v1::RequestFigures {
            request: 0,
            ..Default::default()
        },
        v1::RequestFigures {
            request: 1,
            ..Default::default()
        },
    ];
    for &(second, v) in values {
        let k = usize::from(second);
        let c = if second { code } else { 200 };
        whole.record(v).unwrap();
        parts[k].record(v).unwrap();
        *status.entry(c).or_default() += 1;
        requests[k].completed += 1;
        *requests[k].status.entry(c).or_default() += 1;
    }
    for (r, h) in requests.iter_mut().zip(&parts) {
        r.latency = encode(h).unwrap();
    }
    requests.retain(|r| r.completed > 0);
    v1::Snapshot {
        interval_index: index,
        intended: values.len() as u64,
        sent: values.len() as u64,
        completed: values.len() as u64,
        status: status.into_iter().collect(),
        latency: [("2xx".to_string(), encode(&whole).unwrap())].into(),
        requests,
        ..Default::default()
    }
}

proptest! {
    /// However snapshots are spread over agents and intervals, each
    /// request's merged counts are the sums of its parts, they add up
    /// to the scenario's, each keeps its own statuses, and its merged
    /// histogram equals one histogram of its values.
    #[test]
    fn per_request_figures_are_exact_sums(
        parts in prop::collection::vec(
            (0usize..3, 0u64..10, prop::collection::vec((any::<bool>(), 1u64..10_000_000), 0..40)),
            1..20)
    ) {
        let mut agg = Aggregate::new(3, 1);
        let mut by_kind = [new_histogram(), new_histogram()];
        for (agent, index, values) in &parts {
            agg.add(*agent, &Snapshot::try_from(&split(*index, values, 503)).unwrap());
            for &(second, v) in values {
                by_kind[usize::from(second)].record(v).unwrap();
            }
        }
        let requests = &agg.requests[0];
        let sum: u64 = requests.iter().map(|r| r.completed).sum();
        prop_assert_eq!(sum, agg.scenarios[0].completed);
        for (k, h) in by_kind.iter().enumerate() {
            let r = requests.get(k).cloned().unwrap_or_default();
            prop_assert_eq!(r.completed, h.len());
            prop_assert_eq!(r.latency.len(), h.len());
            if !h.is_empty() {
                prop_assert_eq!(r.latency.value_at_quantile(0.99), h.value_at_quantile(0.99));
                prop_assert_eq!(r.latency.max(), h.max());
            }
            let own = if k == 0 { 200 } else { 503 };
            prop_assert!(r.status.iter().all(|(c, _)| c == own), "{:?}", r.status);
            prop_assert_eq!(r.failures(), if k == 0 { 0 } else { h.len() });
        }
    }
}
