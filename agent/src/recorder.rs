//! Per-worker recording of what happened, bucketed into snapshot intervals.
//!
//! Each worker thread owns one `Recorder` (no lock, no atomics on the request
//! path). Arrival events (intended/sent/unsent) go to the interval of their
//! intended instant, completions to the interval in which they completed.
//! Only the few intervals not yet flushed are kept, so memory does not grow
//! with run length.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use loadfleet_proto::figures::{Figures, FlowFigures, RequestFigures};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{OutcomeClass, UnsentReason};

/// How a request ended; defined with the rest of a finished exchange.
pub(crate) use crate::client::outcome::Outcome;
use crate::client::outcome::Phases;

/// Everything one worker saw during one interval: the snapshot's figures
/// themselves, recorded in place and encoded at the flush.
struct Interval {
    figures: Figures,
    max_in_flight: u64,
    /// The completions split by request of the mix, indexed by its kind
    /// (its place in the mix); grown on a kind's first completion and kept
    /// through recycling, so recording allocates nothing once warm.
    requests: Vec<RequestFigures>,
    /// A flow scenario's own figures ([`flows`]); `None` for any other.
    flow: Option<FlowFigures>,
}

/// Where a measured request's time went on the wire (see [`Phases`]), and
/// whether it opened or reused a connection. Connections opened count
/// warm-up included: one opened during the warm-up still serves the
/// measured requests.
fn add_phases(f: &mut Figures, p: &Phases, measured: bool) {
    f.connections_opened += u64::from(p.new_connection);
    f.connections_reused += u64::from(p.reused);
    if !measured {
        return;
    }
    for (h, d) in [
        (&mut f.connect_time, p.connect),
        (&mut f.tls_time, p.tls),
        (&mut f.ttfb, p.ttfb),
        (&mut f.body_time, p.body),
    ] {
        if let Some(d) = d {
            record(h, d.as_micros() as u64);
        }
    }
}

impl Interval {
    fn new() -> Self {
        Self {
            figures: Figures::default(),
            max_in_flight: 0,
            requests: Vec::new(),
            flow: None,
        }
    }

    /// The figures of request kind `kind`, made on its first completion.
    fn kind(&mut self, kind: usize) -> &mut RequestFigures {
        if self.requests.len() <= kind {
            self.requests.resize_with(kind + 1, RequestFigures::default);
        }
        &mut self.requests[kind]
    }

    fn to_snapshot(&self, scenario: u32, index: u64, gauge: Gauge) -> v1::Snapshot {
        let mut s = v1::Snapshot {
            interval_index: index,
            in_flight: gauge.in_flight,
            // Numbered by the session as it sends the snapshot.
            seq: 0,
            scenario,
            // Sends raise the peak; the gauge at either edge of the interval
            // bounds it from below too, so an interval with no sends (all
            // unsent, or the drain) still shows what was in flight.
            max_in_flight: self.max_in_flight.max(gauge.in_flight).max(gauge.at_start),
            // Attached by the worker for subscription scenarios.
            sse: None,
            // A request (or step) with nothing counted is left out.
            requests: self
                .requests
                .iter()
                .enumerate()
                .filter(|(_, k)| counted(k))
                .map(|(kind, k)| k.encode(kind as u32))
                .collect(),
            flow: self.flow.as_ref().map(|f| {
                let mut w = v1::FlowFigures::default();
                f.encode_into(&mut w);
                w
            }),
            ..Default::default()
        };
        // CPU is the session's, and `connections` the worker's: both set
        // on the snapshot after this.
        self.figures.encode_into(&mut s);
        s
    }
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
pub(crate) struct Gauge {
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
    pub(crate) fn new(in_flight: u64, pool_saturated: std::time::Duration) -> Self {
        Self {
            in_flight,
            pool_saturated,
            at_start: 0,
        }
    }
}

/// One finished request, as the recorder needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
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
pub(crate) struct Recorder {
    /// Completions are also kept per request of the mix; not for a mix of
    /// one, whose figures are the scenario's (a second histogram record
    /// per request, some 4% of the agent's instructions, for nothing).
    split_by_request: bool,
    /// A flow scenario's: every snapshot carries its flow figures.
    flows: bool,
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
    pub(crate) fn new(scenario: u32) -> Self {
        Self {
            split_by_request: true,
            flows: false,
            scenario,
            base: 0,
            last_in_flight: 0,
            open: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// Whether the scenario is a flow scenario (see [`flows`]).
    pub(crate) fn flows(mut self, flows: bool) -> Self {
        self.flows = flows;
        self
    }

    /// Whether completions are kept per request of the mix as well.
    pub(crate) fn split_by_request(mut self, split: bool) -> Self {
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
    pub(crate) fn arrival(&mut self, interval: u64, lag_micros: u64, in_flight: u64, out: bool) {
        let i = self.at(interval);
        i.figures.intended += 1;
        i.figures.sent += u64::from(out);
        i.max_in_flight = i.max_in_flight.max(in_flight);
        record(&mut i.figures.lag, lag_micros);
    }

    /// An arrival of `interval` left the agent's queue: it is on the wire,
    /// or opening the connection it goes on. Lands in its own interval
    /// while that is open, so an interval's `sent` and `unsent` add up to
    /// its `intended` unless a request waited for a connection past the
    /// interval's end.
    pub(crate) fn went_out(&mut self, interval: u64) {
        self.at(interval).figures.sent += 1;
    }

    /// An arrival that was never sent, with the reason.
    pub(crate) fn arrival_unsent(&mut self, interval: u64, reason: UnsentReason) {
        let f = &mut self.at(interval).figures;
        f.intended += 1;
        f.unsent.bump(reason);
    }

    /// `n` arrivals, already intended, still waiting for a connection when
    /// the drain ended: never sent.
    pub(crate) fn held_unsent(&mut self, interval: u64, reason: UnsentReason, n: u64) {
        if n > 0 {
            self.at(interval).figures.unsent.add(reason, n);
        }
    }

    /// A finished request: a response with a status, or a transport error;
    /// or one that ended unsent in the agent's queue, whose `interval` is
    /// then its arrival's.
    pub(crate) fn completed(&mut self, interval: u64, c: Completion) {
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
        let split = self.split_by_request;
        let i = self.at(interval);
        let f = &mut i.figures;
        if let Some(wait) = pool_wait_micros {
            record(&mut f.pool_wait, wait);
        }
        let Some(class) = count_outcome(
            outcome,
            in_window,
            &mut f.completed,
            &mut f.completed_in_window,
            &mut f.completed_ok_in_window,
            (&mut f.status, &mut f.errors, &mut f.grpc_status),
        ) else {
            if let Outcome::Unsent(reason) = outcome {
                f.unsent.bump(reason);
            }
            return;
        };
        add_phases(f, &phases, !warmup);
        if warmup {
            record(&mut f.warmup_latency, latency_micros);
        } else {
            record(f.latency.get_mut(class), latency_micros);
            record(&mut f.service_time, service_micros);
        }
        if split {
            let r = i.kind(kind);
            count_outcome(
                outcome,
                in_window,
                &mut r.completed,
                &mut r.completed_in_window,
                &mut r.completed_ok_in_window,
                (&mut r.status, &mut r.errors, &mut r.grpc_status),
            );
            if !warmup {
                record(&mut r.latency, latency_micros);
            }
        }
    }

    /// Closes every interval before `up_to` and returns their snapshots.
    /// The gauge is read at the moment of the flush; it is attached to the
    /// newest closed interval only.
    pub(crate) fn flush(&mut self, up_to: u64, gauge: Gauge) -> Vec<v1::Snapshot> {
        let mut out = Vec::new();
        while self.base < up_to {
            let mut interval = self.open.pop_front().unwrap_or_else(Interval::new);
            let last = self.base + 1 == up_to;
            // Only the first interval closed here starts at the last gauge.
            let at_start = if out.is_empty() {
                self.last_in_flight
            } else {
                0
            };
            let gauge = if last {
                Gauge { at_start, ..gauge }
            } else {
                Gauge {
                    at_start,
                    ..Gauge::default()
                }
            };
            interval.figures.pool_saturated_ns = gauge.pool_saturated.as_nanos() as u64;
            if self.flows {
                interval.flow.get_or_insert_with(FlowFigures::default);
            }
            out.push(interval.to_snapshot(self.scenario, self.base, gauge));
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
    i.figures.reset();
    i.max_in_flight = 0;
    // A kind with nothing recorded is already clear (every record counts
    // something), so an idle kind costs nothing per interval.
    for k in i.requests.iter_mut().filter(|k| counted(k)) {
        k.reset();
    }
    if let Some(f) = &mut i.flow {
        f.reset();
    }
    i
}

/// Whether a request of the mix (or a step of a flow) counted anything.
fn counted(k: &RequestFigures) -> bool {
    k.completed > 0 || k.reached > 0 || k.not_reached.total() > 0
}

/// Counts one outcome where a snapshot (or a request's part of it) counts
/// it, and gives its class; `None` for an arrival that ended unsent.
#[inline]
fn count_outcome(
    outcome: Outcome,
    in_window: bool,
    completed: &mut u64,
    completed_in_window: &mut u64,
    completed_ok_in_window: &mut u64,
    (status, errors, grpc): (
        &mut loadfleet_proto::figures::Codes,
        &mut loadfleet_proto::figures::ErrorCounts,
        &mut loadfleet_proto::figures::GrpcCounts,
    ),
) -> Option<OutcomeClass> {
    let class = match outcome {
        Outcome::Status(code) => {
            status.bump(code);
            OutcomeClass::of_status(code)
        }
        Outcome::Error(kind) => {
            errors.bump(kind);
            OutcomeClass::Error
        }
        Outcome::Grpc(s) => {
            grpc.bump(s);
            s.class()
        }
        Outcome::Unsent(_) => return None,
    };
    *completed += 1;
    if in_window {
        *completed_in_window += 1;
        if class.is_ok() {
            *completed_ok_in_window += 1;
        }
    }
    Some(class)
}

mod flows;

pub(crate) use flows::{FlowEnd, StepDone};

#[cfg(test)]
mod tests;
