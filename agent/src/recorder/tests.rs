//! The recorder against the events of a worker's requests.

use super::*;
use loadfleet_proto::histogram::decode;
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus};
use std::time::Duration;

#[test]
fn events_land_in_their_intervals_and_flush_in_order() {
    let mut r = Recorder::new(2);
    r.arrival(0, 10, 4, false);
    r.went_out(0);
    r.arrival_unsent(1, UnsentReason::ConcurrencyLimit);
    r.completed(1, done(Outcome::Status(200), 1500, 900, None, true));
    r.completed(1, done(Outcome::Status(503), 2500, 2000, Some(700), true));
    r.completed(
        1,
        done(Outcome::Error(ErrorKind::Refused), 100, 100, None, false),
    );
    let snaps = r.flush(2, Gauge::new(3, Duration::from_millis(5)));
    assert_eq!(snaps.len(), 2);
    assert_eq!((snaps[0].intended, snaps[0].sent), (1, 1));
    assert_eq!((snaps[0].scenario, snaps[0].max_in_flight), (2, 4));
    assert_eq!(snaps[1].unsent[UnsentReason::ConcurrencyLimit.as_str()], 1);
    assert_eq!(snaps[1].completed, 3);
    assert_eq!(snaps[1].completed_in_window, 2);
    assert_eq!(snaps[1].completed_ok_in_window, 1);
    assert_eq!(snaps[1].status[&200], 1);
    assert_eq!(snaps[1].status[&503], 1);
    assert_eq!(snaps[1].errors[ErrorKind::Refused.as_str()], 1);
    assert!(snaps[1].grpc_status.is_empty());
    assert_eq!(
        decode(&snaps[1].latency[OutcomeClass::ServerError.as_str()])
            .unwrap()
            .len(),
        1
    );
    assert_eq!(decode(&snaps[1].service_time).unwrap().len(), 3);
    assert_eq!((snaps[0].in_flight, snaps[1].in_flight), (0, 3));
    // The pool's figures: one wait, and its saturated time on the
    // newest interval.
    assert_eq!(decode(&snaps[1].pool_wait).unwrap().len(), 1);
    assert!(snaps[0].pool_wait.is_empty());
    assert_eq!(
        (snaps[0].pool_saturated_ns, snaps[1].pool_saturated_ns),
        (0, 5_000_000)
    );
}

fn done(
    outcome: Outcome,
    latency_micros: u64,
    service_micros: u64,
    pool_wait_micros: Option<u64>,
    in_window: bool,
) -> Completion {
    Completion {
        outcome,
        latency_micros,
        service_micros,
        pool_wait_micros,
        warmup: false,
        in_window,
        phases: Phases::default(),
        kind: 0,
    }
}

/// An interval with no sends at all (every arrival unsent, or the
/// drain) still has requests in flight: its peak is never below the
/// gauge at either of its edges.
#[test]
fn peak_in_flight_is_never_below_the_gauges() {
    let mut r = Recorder::new(0);
    r.arrival(0, 10, 5, false);
    r.went_out(0);
    let first = r.flush(1, Gauge::new(912, Duration::ZERO));
    assert_eq!((first[0].in_flight, first[0].max_in_flight), (912, 912));
    r.arrival_unsent(1, UnsentReason::ConcurrencyLimit);
    let second = r.flush(2, Gauge::new(400, Duration::ZERO));
    assert_eq!((second[0].in_flight, second[0].max_in_flight), (400, 912));
}

#[test]
fn late_event_for_flushed_interval_is_kept() {
    let mut r = Recorder::new(0);
    r.flush(3, Gauge::default());
    r.arrival_unsent(1, UnsentReason::Late);
    let snaps = r.flush(4, Gauge::default());
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].interval_index, 3);
    assert_eq!(snaps[0].unsent[UnsentReason::Late.as_str()], 1);
}

/// gRPC statuses are counted apart from HTTP statuses, in their own
/// latency classes; OK is the successful throughput.
#[test]
fn grpc_statuses_are_their_own_outcomes() {
    let mut r = Recorder::new(0);
    r.completed(0, done(Outcome::Grpc(GrpcStatus::Ok), 10, 10, None, true));
    r.completed(
        0,
        done(
            Outcome::Grpc(GrpcStatus::ResourceExhausted),
            20,
            20,
            None,
            true,
        ),
    );
    r.completed(
        0,
        done(Outcome::Grpc(GrpcStatus::Unavailable), 30, 30, None, true),
    );
    let s = &r.flush(1, Gauge::default())[0];
    assert!(s.status.is_empty() && s.errors.is_empty());
    assert_eq!(s.grpc_status["OK"], 1);
    assert_eq!(s.grpc_status["RESOURCE_EXHAUSTED"], 1);
    assert_eq!(s.grpc_status["UNAVAILABLE"], 1);
    assert_eq!((s.completed, s.completed_ok_in_window), (3, 1));
    for class in ["grpc_ok", "grpc_client_error", "grpc_server_error"] {
        assert_eq!(decode(&s.latency[class]).unwrap().len(), 1, "{class}");
    }
}

/// Each completion is counted under its request kind as well, so the
/// kinds add up to the scenario and keep their outcomes apart.
#[test]
fn completions_are_split_by_request_kind() {
    let mut r = Recorder::new(0);
    let of = |kind, outcome, in_window| Completion {
        kind,
        ..done(outcome, 100, 100, None, in_window)
    };
    r.completed(0, of(0, Outcome::Status(200), true));
    r.completed(0, of(0, Outcome::Status(200), false));
    r.completed(0, of(2, Outcome::Status(404), true));
    r.completed(0, of(2, Outcome::Error(ErrorKind::Timeout), true));
    r.completed(0, of(1, Outcome::Unsent(UnsentReason::Late), true));
    let s = &r.flush(1, Gauge::default())[0];
    let kinds: Vec<u32> = s.requests.iter().map(|k| k.request).collect();
    assert_eq!(kinds, [0, 2], "a kind with no completion is left out");
    let sum: u64 = s.requests.iter().map(|k| k.completed).sum();
    assert_eq!(sum, s.completed);
    let (a, b) = (&s.requests[0], &s.requests[1]);
    assert_eq!(
        (a.completed, a.completed_in_window, a.completed_ok_in_window),
        (2, 1, 1)
    );
    assert_eq!(a.status[&200], 2);
    assert!(a.errors.is_empty() && !a.status.contains_key(&404));
    assert_eq!(
        (b.status[&404], b.errors[ErrorKind::Timeout.as_str()]),
        (1, 1)
    );
    assert_eq!(decode(&b.latency).unwrap().len(), 2);
    // Recycled: the next interval starts with no kind.
    r.completed(1, of(1, Outcome::Status(200), true));
    let s = &r.flush(2, Gauge::default())[0];
    assert_eq!(s.requests.len(), 1);
    assert_eq!((s.requests[0].request, s.requests[0].completed), (1, 1));
}

#[test]
fn recycled_intervals_start_empty() {
    let mut r = Recorder::new(0);
    r.completed(
        0,
        Completion {
            warmup: true,
            ..done(Outcome::Status(200), 5, 5, Some(3), false)
        },
    );
    r.flush(1, Gauge::default());
    let snaps = r.flush(2, Gauge::default());
    assert!(snaps[0].pool_wait.is_empty());
    assert_eq!(snaps[0].completed, 0);
    assert!(snaps[0].warmup_latency.is_empty());
}
