//! The checks against honest and hostile snapshots.

use super::*;
use loadfleet_proto::bounds::MAX_SNAPSHOT_COUNT;
use loadfleet_proto::histogram::{encode, new_histogram};
use proptest::prelude::*;

fn checks() -> Checks {
    Checks {
        scenarios: 1,
        kinds: vec![2],
        flows: vec![false],
        last_interval: 100,
        ledgers: Vec::new(),
    }
}

fn honest(seq: u64) -> v1::Snapshot {
    let mut h = new_histogram();
    h.record(1000).unwrap();
    v1::Snapshot {
        seq,
        interval_index: 3,
        intended: 5,
        sent: 4,
        unsent: [("late".to_string(), 1)].into(),
        completed: 4,
        status: [(200, 4)].into(),
        latency: [("2xx".to_string(), encode(&h).unwrap())].into(),
        ..Default::default()
    }
}

fn accepted(c: Check) -> bool {
    matches!(c, Check::Accept(_))
}

fn what(c: Check) -> &'static str {
    match c {
        Check::Violation(r) => r.what,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn honest_in_order_is_accepted_and_a_repeat_is_a_duplicate() {
    let mut c = checks();
    let t = Figures::default();
    assert!(accepted(c.snapshot(0, &honest(1), &t)));
    assert!(accepted(c.snapshot(0, &honest(2), &t)));
    assert_eq!(c.snapshot(0, &honest(2), &t), Check::Duplicate);
    assert_eq!(what(c.snapshot(0, &honest(4), &t)), "sequence_gap");
    assert!(c
        .finished(
            0,
            &v1::Finished {
                snapshots: 2,
                ..Default::default()
            }
        )
        .is_ok());
    let e = c.finished(
        0,
        &v1::Finished {
            snapshots: 3,
            ..Default::default()
        },
    );
    assert_eq!(e.unwrap_err().what, "finished_mismatch");
}

#[test]
fn each_hostile_field_is_named() {
    let t = Figures::default();
    let cases: Vec<(&str, v1::Snapshot)> = vec![
        (
            "scenario_out_of_range",
            v1::Snapshot {
                scenario: 7,
                ..honest(1)
            },
        ),
        (
            "interval_out_of_range",
            v1::Snapshot {
                interval_index: 1 << 40,
                ..honest(1)
            },
        ),
        ("unknown_class", {
            let mut s = honest(1);
            s.latency.insert("class-12345".into(), Vec::new());
            s
        }),
        ("unknown_reason", {
            let mut s = honest(1);
            s.unsent = [("whatever".to_string(), 1)].into();
            s
        }),
        ("unknown_error_kind", {
            let mut s = honest(1);
            s.errors.insert("gremlins".into(), 1);
            s
        }),
        ("bad_status", {
            let mut s = honest(1);
            s.status.insert(70_000, 1);
            s
        }),
        (
            "counts_disagree",
            v1::Snapshot {
                sent: 5,
                ..honest(1)
            },
        ),
        (
            "count_out_of_range",
            v1::Snapshot {
                intended: u64::MAX - 1,
                sent: u64::MAX - 2,
                ..honest(1)
            },
        ),
        (
            "count_out_of_range",
            v1::Snapshot {
                in_flight: 1 << 40,
                ..honest(1)
            },
        ),
        (
            "count_out_of_range",
            v1::Snapshot {
                cpu_seconds: f64::NAN,
                ..honest(1)
            },
        ),
    ];
    for (want, s) in cases {
        assert_eq!(what(checks().snapshot(0, &s, &t)), want, "{s:?}");
    }
    let full = Figures {
        intended: u64::MAX - 1,
        ..Figures::default()
    };
    assert_eq!(
        what(checks().snapshot(0, &honest(1), &full)),
        "count_overflow"
    );
}

/// A request may wait for a connection past its interval's end: a later
/// snapshot sends what an earlier one intended, but no agent sends more
/// than it intended so far.
#[test]
fn later_snapshots_may_send_what_earlier_ones_intended_never_more() {
    let mut c = checks();
    let t = Figures::default();
    let first = v1::Snapshot {
        seq: 1,
        intended: 5,
        sent: 2,
        ..Default::default()
    };
    let second = v1::Snapshot {
        seq: 2,
        intended: 1,
        sent: 3,
        unsent: [("pool_timeout".to_string(), 1)].into(),
        ..Default::default()
    };
    assert!(accepted(c.snapshot(0, &first, &t)));
    assert!(accepted(c.snapshot(0, &second, &t)));
    let greedy = v1::Snapshot {
        seq: 3,
        intended: 0,
        sent: 1,
        ..Default::default()
    };
    assert_eq!(what(c.snapshot(0, &greedy, &t)), "counts_disagree");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the counts, an accepted first snapshot resolves no more
    /// than it intended, stays within the bound, and never overflows the
    /// totals it joins.
    #[test]
    fn accepted_counts_are_consistent_and_bounded(
        intended in prop_oneof![0u64..10, any::<u64>()],
        sent in prop_oneof![0u64..10, any::<u64>()],
        late in prop_oneof![0u64..10, any::<u64>()],
        total in prop_oneof![0u64..10, any::<u64>()],
    ) {
        let s = v1::Snapshot {
            seq: 1,
            intended,
            sent,
            unsent: [("late".to_string(), late)].into(),
            ..Default::default()
        };
        let t = Figures { intended: total, sent: total, ..Figures::default() };
        if accepted(checks().snapshot(0, &s, &t)) {
            prop_assert!(sent + late <= intended);
            prop_assert!(intended <= MAX_SNAPSHOT_COUNT);
            prop_assert!(total.checked_add(intended).is_some());
        }
    }
}

/// Per-request figures name a request of the mix, once each, and add up
/// to the snapshot's own counts.
#[test]
fn per_request_figures_are_checked() {
    let t = Figures::default();
    let entry = |request, completed, code| v1::RequestFigures {
        request,
        completed,
        status: [(code, completed)].into(),
        ..Default::default()
    };
    let with = |requests: Vec<v1::RequestFigures>| v1::Snapshot {
        requests,
        ..honest(1)
    };
    let split = with(vec![entry(0, 3, 200), entry(1, 1, 200)]);
    assert!(accepted(checks().snapshot(0, &split, &t)));
    let cases = [
        ("request_out_of_range", with(vec![entry(2, 4, 200)])),
        (
            "request_out_of_order",
            with(vec![entry(1, 2, 200), entry(0, 2, 200)]),
        ),
        (
            "request_out_of_order",
            with(vec![entry(0, 2, 200), entry(0, 2, 200)]),
        ),
        ("counts_disagree", with(vec![entry(0, 3, 200)])),
        (
            "count_out_of_range",
            with(vec![entry(0, MAX_SNAPSHOT_COUNT + 1, 200)]),
        ),
        ("bad_status", with(vec![entry(0, 4, 42)])),
        (
            "unknown_error_kind",
            with(vec![v1::RequestFigures {
                errors: [("meteor".to_string(), 1)].into(),
                ..entry(0, 4, 200)
            }]),
        ),
        (
            "counts_disagree",
            with(vec![v1::RequestFigures {
                completed_in_window: 5,
                ..entry(0, 4, 200)
            }]),
        ),
    ];
    for (expected, s) in cases {
        assert_eq!(what(checks().snapshot(0, &s, &t)), expected, "{s:?}");
    }
}

#[test]
fn flow_figures_are_checked() {
    // A flow scenario (2 steps) next to a scenario of requests.
    let mut c = Checks {
        scenarios: 2,
        kinds: vec![2, 1],
        flows: vec![true, false],
        last_interval: 100,
        ledgers: Vec::new(),
    };
    let t = Figures::default();
    let step = |reached, sent, completed| v1::RequestFigures {
        request: 0,
        reached,
        sent,
        completed,
        status: [(200, completed)].into(),
        checks_passed: [(0, completed)].into(),
        ..Default::default()
    };
    let flow = |seq, s: v1::RequestFigures, failed| v1::Snapshot {
        flow: Some(v1::FlowFigures {
            failed: [("check".to_string(), failed)].into(),
            ..Default::default()
        }),
        requests: vec![s],
        ..honest(seq)
    };
    // Steps may complete more than the flows that ended: they are steps.
    assert!(accepted(c.snapshot(0, &flow(1, step(9, 9, 9), 1), &t)));
    assert_eq!(
        what(c.snapshot(0, &flow(2, step(3, 4, 3), 0), &t)),
        "counts_disagree",
        "sent more steps than reached"
    );
    assert_eq!(
        what(c.snapshot(1, &flow(1, step(1, 1, 1), 5), &t)),
        "counts_disagree",
        "more flows failed than ended"
    );
    let mut other = flow(1, step(1, 1, 1), 0);
    other.scenario = 1;
    assert_eq!(what(c.snapshot(2, &other, &t)), "flow_mismatch");
}
