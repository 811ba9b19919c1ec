//! Per-worker recording of what happened, bucketed into snapshot intervals.
//!
//! Each worker thread owns one `Recorder` (no lock, no atomics on the request
//! path). Arrival events (intended/sent/unsent) go to the interval of their
//! intended instant, completions to the interval in which they completed.
//! Only the few intervals not yet flushed are kept, so memory does not grow
//! with run length.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{encode, new_histogram};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, OutcomeClass, UnsentReason};

/// One latency histogram per outcome class, as in the report.
const CLASSES: usize = OutcomeClass::ALL.len();

/// Everything one worker saw during one interval.
struct Interval {
    intended: u64,
    sent: u64,
    unsent: Vec<(UnsentReason, u64)>,
    completed: u64,
    completed_in_window: u64,
    status: Vec<(u16, u64)>,
    errors: Vec<(ErrorKind, u64)>,
    latency: [Histogram<u64>; CLASSES],
    service_time: Histogram<u64>,
    warmup_latency: Histogram<u64>,
    lag: Histogram<u64>,
    max_in_flight: u64,
}

/// Adds one to the count for `key` in a short list (a handful of distinct
/// keys per interval, so a linear scan beats hashing).
fn bump<K: PartialEq + Copy>(list: &mut Vec<(K, u64)>, key: K) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => list.push((key, 1)),
    }
}

impl Interval {
    fn new() -> Self {
        Self {
            intended: 0,
            sent: 0,
            unsent: Vec::new(),
            completed: 0,
            completed_in_window: 0,
            status: Vec::new(),
            errors: Vec::new(),
            latency: std::array::from_fn(|_| new_histogram()),
            service_time: new_histogram(),
            warmup_latency: new_histogram(),
            lag: new_histogram(),
            max_in_flight: 0,
        }
    }

    fn to_snapshot(&self, scenario: u32, index: u64, in_flight: u64) -> v1::Snapshot {
        let mut latency = std::collections::HashMap::new();
        for (class, h) in OutcomeClass::ALL.iter().zip(&self.latency) {
            if !h.is_empty() {
                latency.insert(class.as_str().to_string(), encode_or_empty(h));
            }
        }
        v1::Snapshot {
            interval_index: index,
            intended: self.intended,
            sent: self.sent,
            unsent: self
                .unsent
                .iter()
                .map(|&(k, n)| (k.as_str().to_string(), n))
                .collect(),
            completed: self.completed,
            completed_in_window: self.completed_in_window,
            status: self
                .status
                .iter()
                .map(|&(c, n)| (u32::from(c), n))
                .collect(),
            errors: self
                .errors
                .iter()
                .map(|&(k, n)| (k.as_str().to_string(), n))
                .collect(),
            latency,
            service_time: encode_or_empty(&self.service_time),
            warmup_latency: encode_or_empty(&self.warmup_latency),
            lag: encode_or_empty(&self.lag),
            in_flight,
            cpu_seconds: 0.0,
            host_cpu: 0.0,
            scenario,
            max_in_flight: self.max_in_flight,
        }
    }
}

/// Encoding an in-memory histogram only fails on an internal bug; losing one
/// interval's histogram is then logged rather than crashing the run.
fn encode_or_empty(h: &Histogram<u64>) -> Vec<u8> {
    encode(h).unwrap_or_else(|e| {
        tracing::error!("dropping a histogram that failed to encode: {e}");
        Vec::new()
    })
}

/// Records into a histogram, widening it when needed; values are clamped to
/// at least 1 µs because HdrHistogram cannot hold 0 usefully at this scale.
fn record(h: &mut Histogram<u64>, micros: u64) {
    if let Err(e) = h.record(micros.max(1)) {
        tracing::error!("histogram rejected {micros}µs: {e}");
    }
}

/// The recorder of one worker for one scenario.
pub struct Recorder {
    scenario: u32,
    /// Index of the first interval still open (not yet flushed).
    base: u64,
    open: VecDeque<Interval>,
    /// Recycled intervals, so flushing does not reallocate histograms.
    spare: Vec<Interval>,
}

impl Recorder {
    pub fn new(scenario: u32) -> Self {
        Self {
            scenario,
            base: 0,
            open: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// The interval for an event; one that belongs to an already flushed
    /// interval (a very late arrival) lands in the oldest open one, so it is
    /// counted late rather than lost.
    fn at(&mut self, index: u64) -> &mut Interval {
        let offset = index.saturating_sub(self.base) as usize;
        while self.open.len() <= offset {
            let fresh = self.spare.pop().unwrap_or_else(Interval::new);
            self.open.push_back(fresh);
        }
        &mut self.open[offset]
    }

    /// An arrival that went out; `in_flight` counts it.
    pub fn arrival_sent(&mut self, interval: u64, lag_micros: u64, in_flight: u64) {
        let i = self.at(interval);
        i.intended += 1;
        i.sent += 1;
        i.max_in_flight = i.max_in_flight.max(in_flight);
        record(&mut i.lag, lag_micros);
    }

    /// An arrival that was never sent, with the reason.
    pub fn arrival_unsent(&mut self, interval: u64, reason: UnsentReason) {
        let i = self.at(interval);
        i.intended += 1;
        bump(&mut i.unsent, reason);
    }

    /// A finished request: a response with `status`, or a transport error.
    pub fn completed(
        &mut self,
        interval: u64,
        outcome: Outcome,
        latency_micros: u64,
        service_micros: u64,
        warmup: bool,
        in_window: bool,
    ) {
        let i = self.at(interval);
        i.completed += 1;
        if in_window {
            i.completed_in_window += 1;
        }
        let class = match outcome {
            Outcome::Status(code) => {
                bump(&mut i.status, code);
                OutcomeClass::of_status(code)
            }
            Outcome::Error(kind) => {
                bump(&mut i.errors, kind);
                OutcomeClass::Error
            }
        };
        if warmup {
            record(&mut i.warmup_latency, latency_micros);
        } else {
            record(&mut i.latency[class.index()], latency_micros);
            record(&mut i.service_time, service_micros);
        }
    }

    /// Closes every interval before `up_to` and returns their snapshots.
    /// `in_flight` is the gauge at the moment of the flush; it is attached to
    /// the newest closed interval only.
    pub fn flush(&mut self, up_to: u64, in_flight: u64) -> Vec<v1::Snapshot> {
        let mut out = Vec::new();
        while self.base < up_to {
            let interval = self.open.pop_front().unwrap_or_else(Interval::new);
            let last = self.base + 1 == up_to;
            out.push(interval.to_snapshot(
                self.scenario,
                self.base,
                if last { in_flight } else { 0 },
            ));
            self.spare.push(reset(interval));
            self.base += 1;
        }
        out
    }
}

fn reset(mut i: Interval) -> Interval {
    i.intended = 0;
    i.sent = 0;
    i.unsent.clear();
    i.max_in_flight = 0;
    i.completed = 0;
    i.completed_in_window = 0;
    i.status.clear();
    i.errors.clear();
    for h in i.latency.iter_mut() {
        h.reset();
    }
    i.service_time.reset();
    i.warmup_latency.reset();
    i.lag.reset();
    i
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response arrived with this status code.
    Status(u16),
    /// No response: a transport error of this kind.
    Error(ErrorKind),
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::histogram::decode;

    #[test]
    fn events_land_in_their_intervals_and_flush_in_order() {
        let mut r = Recorder::new(2);
        r.arrival_sent(0, 10, 4);
        r.arrival_unsent(1, UnsentReason::ConcurrencyLimit);
        r.completed(1, Outcome::Status(200), 1500, 900, false, true);
        r.completed(1, Outcome::Status(503), 2500, 2000, false, true);
        r.completed(
            1,
            Outcome::Error(ErrorKind::Refused),
            100,
            100,
            false,
            false,
        );
        let snaps = r.flush(2, 3);
        assert_eq!(snaps.len(), 2);
        assert_eq!((snaps[0].intended, snaps[0].sent), (1, 1));
        assert_eq!((snaps[0].scenario, snaps[0].max_in_flight), (2, 4));
        assert_eq!(snaps[1].unsent[UnsentReason::ConcurrencyLimit.as_str()], 1);
        assert_eq!(snaps[1].completed, 3);
        assert_eq!(snaps[1].completed_in_window, 2);
        assert_eq!(snaps[1].status[&200], 1);
        assert_eq!(snaps[1].status[&503], 1);
        assert_eq!(snaps[1].errors[ErrorKind::Refused.as_str()], 1);
        assert_eq!(
            decode(&snaps[1].latency[OutcomeClass::ServerError.as_str()])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(decode(&snaps[1].service_time).unwrap().len(), 3);
        assert_eq!((snaps[0].in_flight, snaps[1].in_flight), (0, 3));
    }

    #[test]
    fn late_event_for_flushed_interval_is_kept() {
        let mut r = Recorder::new(0);
        r.flush(3, 0);
        r.arrival_unsent(1, UnsentReason::Late);
        let snaps = r.flush(4, 0);
        assert_eq!(snaps.len(), 1);
        assert_eq!(snaps[0].interval_index, 3);
        assert_eq!(snaps[0].unsent[UnsentReason::Late.as_str()], 1);
    }

    #[test]
    fn recycled_intervals_start_empty() {
        let mut r = Recorder::new(0);
        r.completed(0, Outcome::Status(200), 5, 5, true, false);
        r.flush(1, 0);
        let snaps = r.flush(2, 0);
        assert_eq!(snaps[0].completed, 0);
        assert!(snaps[0].warmup_latency.is_empty());
    }
}
