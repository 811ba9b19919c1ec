//! Decoding refuses what is out of bounds by name; merging is exact and
//! does not depend on order or grouping; the wire round-trips.

use super::*;
use crate::histogram::new_histogram;
use proptest::prelude::*;

fn histogram(values: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for &v in values {
        h.record(v).expect("in range");
    }
    h
}

prop_compose! {
    /// One agent's interval whose counts agree: intended is sent plus
    /// unsent, every outcome is a completion.
    fn interval()(
        sent in 0u64..500,
        unsent in prop::collection::vec((0..UnsentReason::ALL.len(), 1u64..50), 0..4),
        codes in prop::collection::vec((prop_oneof![Just(200u16), Just(429), Just(503), Just(301)], 1u64..50), 0..4),
        errors in prop::collection::vec((0..ErrorKind::ALL.len(), 1u64..20), 0..3),
        grpc in prop::collection::vec((0..GrpcStatus::ALL.len(), 1u64..20), 0..3),
        latency in prop::collection::vec((0..OutcomeClass::ALL.len(), prop::collection::vec(1u64..10_000_000, 1..20)), 0..3),
        service in prop::collection::vec(1u64..1_000_000, 0..20),
        lag in prop::collection::vec(1u64..1_000, 0..10),
        cpu_quarters in 0u32..4000,
        host in prop::option::of(1u32..4),
        protocols in prop::collection::vec((0..HttpProtocol::ALL.len(), 1u64..5), 0..2),
    ) -> Figures {
        let mut f = Figures { sent, ..Figures::default() };
        for (r, n) in unsent {
            f.unsent.add(UnsentReason::ALL[r], n);
        }
        f.intended = f.sent + f.unsent.total();
        for (c, n) in codes {
            f.status.add(c, n);
        }
        for (k, n) in errors {
            f.errors.add(ErrorKind::ALL[k], n);
        }
        for (k, n) in grpc {
            f.grpc_status.add(GrpcStatus::ALL[k], n);
        }
        f.completed = f.status.total() + f.errors.total() + f.grpc_status.total();
        f.completed_in_window = f.completed / 2;
        for (c, values) in latency {
            Figure::add(f.latency.get_mut(OutcomeClass::ALL[c]), &histogram(&values));
        }
        f.service_time = histogram(&service);
        f.lag = histogram(&lag);
        // Quarters add exactly in floating point, in any order.
        f.cpu_seconds = f64::from(cpu_quarters) / 4.0;
        f.host_cpu = Figure::decode(&host.map_or(0.0, |h| f64::from(h) / 4.0), "host_cpu").expect("in range");
        for (k, n) in protocols {
            f.connections.add(HttpProtocol::ALL[k], n);
        }
        f
    }
}

fn sum<'a>(parts: impl IntoIterator<Item = &'a Figures>) -> Figures {
    let mut out = Figures::default();
    for p in parts {
        out += p;
    }
    out
}

proptest! {
    /// What the agent encodes, the coordinator decodes to the same figures.
    #[test]
    fn decode_of_encode_is_the_same(f in interval(), index in 0u64..100, seq in 1u64..100) {
        let s = Snapshot { interval_index: index, seq, figures: f, ..Snapshot::default() };
        let back = Snapshot::try_from(&s.encode()).expect("honest figures decode");
        prop_assert_eq!(back, s);
    }

    /// Adding in any order and any grouping gives the same sum, and
    /// intended == sent + unsent.total holds for the sum as for each part.
    #[test]
    fn merging_is_order_and_grouping_free(
        parts in prop::collection::vec(interval(), 1..8),
        cut in 0usize..8,
    ) {
        let forward = sum(&parts);
        let backward = sum(parts.iter().rev());
        prop_assert!(forward == backward, "order changed the sum");
        let cut = cut.min(parts.len());
        let mut grouped = sum(&parts[..cut]);
        grouped += &sum(&parts[cut..]);
        prop_assert!(forward == grouped, "grouping changed the sum");
        prop_assert_eq!(forward.intended, forward.sent + forward.unsent.total());
        let completed: u64 = parts.iter().map(|p| p.completed).sum();
        prop_assert_eq!(forward.completed, completed);
        let values: u64 = parts.iter().map(|p| p.latency.all().len()).sum();
        prop_assert_eq!(forward.latency.all().len(), values);
    }

    /// Per-request and subscription figures merge the same way.
    #[test]
    fn request_and_sse_figures_merge_order_free(
        parts in prop::collection::vec((interval(), 0u64..100, 0u64..5), 1..6),
    ) {
        let requests: Vec<RequestFigures> = parts.iter().map(|(f, _, _)| f.as_request()).collect();
        let sse: Vec<SseFigures> = parts
            .iter()
            .map(|(f, events, first)| {
                let mut s = SseFigures { events: *events, latency: f.service_time.clone(), ..SseFigures::default() };
                s.stream_errors = f.errors;
                s.fanout.add_id("7", Receipts { subscribers: 1, first_ns: *first, last_ns: first + 3 });
                s
            })
            .collect();
        let mut a = RequestFigures::default();
        let mut b = RequestFigures::default();
        for r in &requests { a += r; }
        for r in requests.iter().rev() { b += r; }
        prop_assert!(a == b);
        let mut c = SseFigures::default();
        let mut d = SseFigures::default();
        for s in &sse { c += s; }
        for s in sse.iter().rev() { d += s; }
        prop_assert!(c == d);
        prop_assert_eq!(c.fanout.0["7"].subscribers, parts.len() as u64);
    }
}

/// Each thing out of bounds is refused by the name the fleet counts it
/// under, before the snapshot is taken in.
#[test]
fn each_refusal_is_named() {
    let honest = || v1::Snapshot {
        intended: 2,
        sent: 2,
        ..Default::default()
    };
    let cases: Vec<(&str, v1::Snapshot)> = vec![
        ("unknown_class", {
            let mut s = honest();
            s.latency.insert("class-12345".into(), Vec::new());
            s
        }),
        ("unknown_reason", {
            let mut s = honest();
            s.unsent.insert("whatever".into(), 1);
            s
        }),
        ("unknown_protocol", {
            let mut s = honest();
            s.connections.insert("h3".into(), 1);
            s
        }),
        ("bad_status", {
            let mut s = honest();
            s.status.insert(70_000, 1);
            s
        }),
        (
            "count_out_of_range",
            v1::Snapshot {
                sent: u64::MAX,
                ..honest()
            },
        ),
        (
            "count_out_of_range",
            v1::Snapshot {
                in_flight: 1 << 40,
                ..honest()
            },
        ),
        (
            "count_out_of_range",
            v1::Snapshot {
                cpu_seconds: f64::NAN,
                ..honest()
            },
        ),
        (
            "corrupt_histogram",
            v1::Snapshot {
                lag: vec![1, 2, 3],
                ..honest()
            },
        ),
        (
            "request_out_of_order",
            v1::Snapshot {
                requests: vec![
                    v1::RequestFigures {
                        request: 1,
                        ..Default::default()
                    },
                    v1::RequestFigures {
                        request: 1,
                        ..Default::default()
                    },
                ],
                ..honest()
            },
        ),
        (
            "unknown_error_kind",
            v1::Snapshot {
                sse: Some(v1::SseFigures {
                    stream_errors: [("gremlins".to_string(), 1)].into(),
                    ..Default::default()
                }),
                ..honest()
            },
        ),
        (
            "bad_fanout",
            v1::Snapshot {
                sse: Some(v1::SseFigures {
                    fanout: vec![v1::SseFanout {
                        id: "1".into(),
                        subscribers: 1,
                        first_ns: 9,
                        last_ns: 3,
                    }],
                    ..Default::default()
                }),
                ..honest()
            },
        ),
    ];
    for (want, s) in cases {
        let e = Snapshot::try_from(&s).expect_err(want);
        assert_eq!(e.what(), want, "{e}");
    }
}

/// A word of the vocabulary counts where it belongs, and a new reason is
/// one more word: it decodes, merges and encodes like the others.
#[test]
fn every_unsent_reason_round_trips_and_merges() {
    for &reason in UnsentReason::ALL {
        let wire = v1::Snapshot {
            intended: 3,
            unsent: [(reason.as_str().to_string(), 3)].into(),
            ..Default::default()
        };
        let one = Figures::try_from(&wire).expect("a known word");
        assert_eq!(one.unsent.get(reason), 3);
        let mut two = one.clone();
        two += &one;
        assert_eq!((two.intended, two.unsent.total()), (6, 6));
        let mut again = v1::Snapshot::default();
        two.encode_into(&mut again);
        assert_eq!(again.unsent[reason.as_str()], 6);
    }
}

/// Every count the type declares is held to its total, by its wire name:
/// a plain count, a count by word and a count by status code alike.
#[test]
fn overflows_names_the_first_count_that_would_wrap() {
    let mut one = Figures {
        sent: 1,
        ..Figures::default()
    };
    one.errors.bump(ErrorKind::Reset);
    one.status.bump(503);
    assert_eq!(one.overflows(&Figures::default()), None);

    let mut full = Figures::default();
    full.errors.add(ErrorKind::Reset, u64::MAX);
    assert_eq!(one.overflows(&full), Some("errors"));

    let mut full = Figures::default();
    full.status.add(503, u64::MAX);
    assert_eq!(one.overflows(&full), Some("status"));

    let full = Figures {
        sent: u64::MAX,
        ..Figures::default()
    };
    assert_eq!(one.overflows(&full), Some("sent"));

    let mut full = Figures::default();
    full.errors.add(ErrorKind::Refused, u64::MAX);
    assert_eq!(one.overflows(&full), None, "another word's total is apart");
}
