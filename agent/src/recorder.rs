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
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus, OutcomeClass, UnsentReason};

/// How a request ended; defined with the rest of a finished exchange.
pub use crate::client::outcome::Outcome;
use crate::client::outcome::Phases;

use kinds::KindFigures;

mod kinds;

/// One latency histogram per outcome class, as in the report.
const CLASSES: usize = OutcomeClass::ALL.len();

/// Everything one worker saw during one interval.
struct Interval {
    intended: u64,
    sent: u64,
    unsent: Vec<(UnsentReason, u64)>,
    completed: u64,
    completed_in_window: u64,
    /// 2xx responses inside the window: the successful throughput.
    completed_ok_in_window: u64,
    status: Vec<(u16, u64)>,
    errors: Vec<(ErrorKind, u64)>,
    /// gRPC calls by their grpc-status.
    grpc: Vec<(GrpcStatus, u64)>,
    latency: [Histogram<u64>; CLASSES],
    service_time: Histogram<u64>,
    warmup_latency: Histogram<u64>,
    lag: Histogram<u64>,
    max_in_flight: u64,
    /// Waits for a connection of the worker's pool, by requests that had to.
    pool_wait: Histogram<u64>,
    phases: PhaseHistograms,
    /// The completions split by request of the mix, indexed by its kind
    /// (its place in the mix); grown on a kind's first completion and kept
    /// through recycling, so recording allocates nothing once warm.
    requests: Vec<KindFigures>,
}

/// Where measured requests' time went on the wire (see
/// [`Phases`]), and how many opened or reused a connection.
struct PhaseHistograms {
    connect: Histogram<u64>,
    tls: Histogram<u64>,
    ttfb: Histogram<u64>,
    body: Histogram<u64>,
    /// Connections opened, warm-up included: a connection opened during
    /// the warm-up still serves the measured requests.
    opened: u64,
    reused: u64,
}

impl PhaseHistograms {
    fn new() -> Self {
        Self {
            connect: new_histogram(),
            tls: new_histogram(),
            ttfb: new_histogram(),
            body: new_histogram(),
            opened: 0,
            reused: 0,
        }
    }

    fn add(&mut self, p: &Phases, measured: bool) {
        if p.new_connection {
            self.opened += 1;
        }
        if p.reused {
            self.reused += 1;
        }
        if !measured {
            return;
        }
        for (h, d) in [
            (&mut self.connect, p.connect),
            (&mut self.tls, p.tls),
            (&mut self.ttfb, p.ttfb),
            (&mut self.body, p.body),
        ] {
            if let Some(d) = d {
                record(h, d.as_micros() as u64);
            }
        }
    }

    fn reset(&mut self) {
        for h in [
            &mut self.connect,
            &mut self.tls,
            &mut self.ttfb,
            &mut self.body,
        ] {
            h.reset();
        }
        self.opened = 0;
        self.reused = 0;
    }
}

/// A short list of counts as the wire's map of words.
fn by_word<K: Copy>(
    list: &[(K, u64)],
    word: impl Fn(K) -> &'static str,
) -> std::collections::HashMap<String, u64> {
    list.iter()
        .map(|&(k, n)| (word(k).to_string(), n))
        .collect()
}

/// A short list of status counts as the wire's map of codes.
fn by_code(list: &[(u16, u64)]) -> std::collections::HashMap<u32, u64> {
    list.iter().map(|&(c, n)| (u32::from(c), n)).collect()
}

/// Adds one to the count for `key` in a short list (a handful of distinct
/// keys per interval, so a linear scan beats hashing).
fn bump<K: PartialEq + Copy>(list: &mut Vec<(K, u64)>, key: K) {
    add(list, key, 1);
}

fn add<K: PartialEq + Copy>(list: &mut Vec<(K, u64)>, key: K, by: u64) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += by,
        None => list.push((key, by)),
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
            completed_ok_in_window: 0,
            status: Vec::new(),
            errors: Vec::new(),
            grpc: Vec::new(),
            latency: std::array::from_fn(|_| new_histogram()),
            service_time: new_histogram(),
            warmup_latency: new_histogram(),
            lag: new_histogram(),
            max_in_flight: 0,
            pool_wait: new_histogram(),
            phases: PhaseHistograms::new(),
            requests: Vec::new(),
        }
    }

    /// The figures of request kind `kind`, made on its first completion.
    fn kind(&mut self, kind: usize) -> &mut KindFigures {
        if self.requests.len() <= kind {
            self.requests.resize_with(kind + 1, KindFigures::new);
        }
        &mut self.requests[kind]
    }

    fn to_snapshot(&self, scenario: u32, index: u64, gauge: Gauge) -> v1::Snapshot {
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
            unsent: by_word(&self.unsent, |k| k.as_str()),
            completed: self.completed,
            completed_in_window: self.completed_in_window,
            completed_ok_in_window: self.completed_ok_in_window,
            status: by_code(&self.status),
            grpc_status: by_word(&self.grpc, |k| k.as_str()),
            errors: by_word(&self.errors, |k| k.as_str()),
            latency,
            service_time: encode_or_empty(&self.service_time),
            warmup_latency: encode_or_empty(&self.warmup_latency),
            lag: encode_or_empty(&self.lag),
            in_flight: gauge.in_flight,
            cpu_seconds: 0.0,
            host_cpu: 0.0,
            // Numbered by the session as it sends the snapshot.
            seq: 0,
            // Set by the worker on the newest snapshot of its flush.
            connections: Default::default(),
            scenario,
            // Sends raise the peak; the gauge at either edge of the interval
            // bounds it from below too, so an interval with no sends (all
            // unsent, or the drain) still shows what was in flight.
            max_in_flight: self.max_in_flight.max(gauge.in_flight).max(gauge.at_start),
            pool_saturated_ns: gauge.pool_saturated.as_nanos() as u64,
            pool_wait: encode_or_empty(&self.pool_wait),
            connect_time: encode_or_empty(&self.phases.connect),
            tls_time: encode_or_empty(&self.phases.tls),
            ttfb: encode_or_empty(&self.phases.ttfb),
            body_time: encode_or_empty(&self.phases.body),
            connections_opened: self.phases.opened,
            connections_reused: self.phases.reused,
            // Attached by the worker for subscription scenarios.
            sse: None,
            requests: self
                .requests
                .iter()
                .enumerate()
                .filter(|(_, k)| k.any())
                .map(|(kind, k)| k.to_proto(kind as u32))
                .collect(),
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
/// at least 1 µs because HdrHistogram cannot hold 0 usefully at this scale,
/// and to at most `MAX_RECORDED_MICROS` (about 203 days) so the histogram
/// stays within the bounds the coordinator holds every histogram to.
fn record(h: &mut Histogram<u64>, micros: u64) {
    if let Err(e) = h.record(micros.clamp(1, loadfleet_proto::bounds::MAX_RECORDED_MICROS)) {
        tracing::error!("histogram rejected {micros}µs: {e}");
    }
}

/// Gauges read at a flush, attached to the newest interval it closes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauge {
    /// Requests of this scenario in flight at the flush.
    pub in_flight: u64,
    /// Time the worker's pool held requests waiting since the last flush,
    /// divided by the agent's workers, so that the agent's snapshots add
    /// up to the mean over its pools (given to one scenario's recorder
    /// only: the pool is the worker's).
    pub pool_saturated: std::time::Duration,
    /// In flight at the previous flush: at the start of the interval.
    at_start: u64,
}

impl Gauge {
    pub fn new(in_flight: u64, pool_saturated: std::time::Duration) -> Self {
        Self {
            in_flight,
            pool_saturated,
            at_start: 0,
        }
    }
}

/// One finished request, as the recorder needs it.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub outcome: Outcome,
    /// From the intended send time.
    pub latency_micros: u64,
    /// From when it went onto a connection.
    pub service_micros: u64,
    /// How long it waited for one of the pool's connections, if it had to.
    pub pool_wait_micros: Option<u64>,
    /// Intended during the warm-up: its latency is kept apart.
    pub warmup: bool,
    /// Completed inside the measurement window.
    pub in_window: bool,
    pub phases: Phases,
    /// Which request of the scenario's mix it was (its index there).
    pub kind: usize,
}

/// The recorder of one worker for one scenario.
pub struct Recorder {
    /// Completions are also kept per request of the mix; not for a mix of
    /// one, whose figures are the scenario's (a second histogram record
    /// per request, some 4% of the agent's instructions, for nothing).
    split_by_request: bool,
    scenario: u32,
    /// Index of the first interval still open (not yet flushed).
    base: u64,
    /// In flight at the last flush, the floor of the next interval's peak.
    last_in_flight: u64,
    open: VecDeque<Interval>,
    /// Recycled intervals, so flushing does not reallocate histograms.
    spare: Vec<Interval>,
}

impl Recorder {
    pub fn new(scenario: u32) -> Self {
        Self {
            split_by_request: true,
            scenario,
            base: 0,
            last_in_flight: 0,
            open: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// Whether completions are kept per request of the mix as well.
    pub fn split_by_request(mut self, split: bool) -> Self {
        self.split_by_request = split;
        self
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

    /// An arrival handed to the transport: intended now, and sent now when
    /// `out` (it left at once), otherwise once it leaves the agent's queue
    /// ([`Self::went_out`]); `in_flight` counts it.
    pub fn arrival(&mut self, interval: u64, lag_micros: u64, in_flight: u64, out: bool) {
        let i = self.at(interval);
        i.intended += 1;
        i.sent += u64::from(out);
        i.max_in_flight = i.max_in_flight.max(in_flight);
        record(&mut i.lag, lag_micros);
    }

    /// An arrival of `interval` left the agent's queue: it is on the wire,
    /// or opening the connection it goes on. Lands in its own interval
    /// while that is open, so an interval's `sent` and `unsent` add up to
    /// its `intended` unless a request waited for a connection past the
    /// interval's end.
    pub fn went_out(&mut self, interval: u64) {
        self.at(interval).sent += 1;
    }

    /// An arrival that was never sent, with the reason.
    pub fn arrival_unsent(&mut self, interval: u64, reason: UnsentReason) {
        let i = self.at(interval);
        i.intended += 1;
        bump(&mut i.unsent, reason);
    }

    /// `n` arrivals, already intended, still waiting for a connection when
    /// the drain ended: never sent.
    pub fn held_unsent(&mut self, interval: u64, reason: UnsentReason, n: u64) {
        if n > 0 {
            add(&mut self.at(interval).unsent, reason, n);
        }
    }

    /// A finished request: a response with a status, or a transport error;
    /// or one that ended unsent in the agent's queue, whose `interval` is
    /// then its arrival's.
    pub fn completed(&mut self, interval: u64, c: Completion) {
        let Completion {
            outcome,
            latency_micros,
            service_micros,
            pool_wait_micros,
            warmup,
            in_window,
            phases,
            kind,
        } = c;
        let i = self.at(interval);
        if let Some(wait) = pool_wait_micros {
            record(&mut i.pool_wait, wait);
        }
        if let Outcome::Unsent(reason) = outcome {
            bump(&mut i.unsent, reason);
            return;
        }
        i.completed += 1;
        if in_window {
            i.completed_in_window += 1;
        }
        i.phases.add(&phases, !warmup);
        let class = match outcome {
            Outcome::Status(code) => {
                bump(&mut i.status, code);
                OutcomeClass::of_status(code)
            }
            Outcome::Error(kind) => {
                bump(&mut i.errors, kind);
                OutcomeClass::Error
            }
            Outcome::Grpc(status) => {
                bump(&mut i.grpc, status);
                status.class()
            }
            Outcome::Unsent(_) => return,
        };
        if in_window && class.is_ok() {
            i.completed_ok_in_window += 1;
        }
        if warmup {
            record(&mut i.warmup_latency, latency_micros);
        } else {
            record(&mut i.latency[class.index()], latency_micros);
            record(&mut i.service_time, service_micros);
        }
        if self.split_by_request {
            let i = self.at(interval);
            i.kind(kind).record(
                outcome,
                class,
                in_window,
                (!warmup).then_some(latency_micros),
            );
        }
    }

    /// Closes every interval before `up_to` and returns their snapshots.
    /// The gauge is read at the moment of the flush; it is attached to the
    /// newest closed interval only.
    pub fn flush(&mut self, up_to: u64, gauge: Gauge) -> Vec<v1::Snapshot> {
        let mut out = Vec::new();
        while self.base < up_to {
            let interval = self.open.pop_front().unwrap_or_else(Interval::new);
            let last = self.base + 1 == up_to;
            // Only the first interval closed here starts at the last gauge.
            let at_start = if out.is_empty() {
                self.last_in_flight
            } else {
                0
            };
            out.push(interval.to_snapshot(
                self.scenario,
                self.base,
                if last {
                    Gauge { at_start, ..gauge }
                } else {
                    Gauge {
                        at_start,
                        ..Gauge::default()
                    }
                },
            ));
            self.spare.push(reset(interval));
            self.base += 1;
        }
        if !out.is_empty() {
            self.last_in_flight = gauge.in_flight;
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
    i.completed_ok_in_window = 0;
    i.status.clear();
    i.errors.clear();
    i.grpc.clear();
    for h in i.latency.iter_mut() {
        h.reset();
    }
    i.service_time.reset();
    i.warmup_latency.reset();
    i.lag.reset();
    i.pool_wait.reset();
    i.phases.reset();
    for k in &mut i.requests {
        k.reset();
    }
    i
}

#[cfg(test)]
mod tests;
