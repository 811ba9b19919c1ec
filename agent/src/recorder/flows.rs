//! Recording a flow scenario: each step's funnel (reached, sent, unsent,
//! not reached), its checks and its times, and each flow's end. The flow's
//! own counts (intended, sent, in flight) are the scenario's, recorded as
//! an arrival's are; its end is the scenario's completion, with the
//! outcome of the step that ended it.

use std::ops::Range;

use loadfleet_proto::figures::FlowFigures;
use loadfleet_proto::vocab::{FlowFailure, NotReached, OutcomeClass, UnsentReason};

use super::{add_phases, count_outcome, record, Outcome, Phases, Recorder};

/// One step's answer (or error), as the recorder needs it.
pub(crate) struct StepDone<'a> {
    pub outcome: Outcome,
    /// From the step's ready instant.
    pub latency_micros: u64,
    /// From when it went onto a connection.
    pub service_micros: u64,
    /// From its ready instant to its send.
    pub start_lag_micros: u64,
    pub pool_wait_micros: Option<u64>,
    /// Each check's result, in the step's order.
    pub checks: &'a [bool],
    /// Its flow was intended during the warm-up.
    pub warmup: bool,
    pub in_window: bool,
    pub phases: Phases,
}

/// How a flow ended.
pub(crate) struct FlowEnd {
    /// The outcome of the step that ended it (the last, or the failing one).
    pub outcome: Outcome,
    /// From the flow's intended start to its end.
    pub latency_micros: u64,
    /// The latency less the think time it slept.
    pub active_micros: u64,
    pub failure: Option<FlowFailure>,
    pub warmup: bool,
    pub in_window: bool,
}

impl Recorder {
    /// The figures only flows have, in `interval`.
    fn flow_at(&mut self, interval: u64) -> &mut FlowFigures {
        self.at(interval)
            .flow
            .get_or_insert_with(FlowFigures::default)
    }

    /// A flow reached step `step` (at its ready instant, in `interval`).
    pub(crate) fn step_reached(&mut self, interval: u64, step: usize) {
        self.at(interval).kind(step).reached += 1;
    }

    /// Step `step`, reached in `interval`, went onto the wire.
    pub(crate) fn step_sent(&mut self, interval: u64, step: usize) {
        self.at(interval).kind(step).sent += 1;
    }

    /// Step `step`, reached in `interval`, was never written.
    pub(crate) fn step_unsent(&mut self, interval: u64, step: usize, reason: UnsentReason) {
        self.at(interval).kind(step).unsent.bump(reason);
    }

    /// `n` flows will never reach `steps`.
    pub(crate) fn steps_not_reached(
        &mut self,
        interval: u64,
        steps: Range<usize>,
        reason: NotReached,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        let i = self.at(interval);
        for step in steps {
            i.kind(step).not_reached.add(reason, n);
        }
    }

    /// Step `step`'s answer came in `interval`.
    pub(crate) fn step_done(&mut self, interval: u64, step: usize, d: StepDone<'_>) {
        let i = self.at(interval);
        if let Some(wait) = d.pool_wait_micros {
            record(&mut i.figures.pool_wait, wait);
        }
        add_phases(&mut i.figures, &d.phases, !d.warmup);
        // The scenario's service time is its requests' (its steps'), as
        // its connections and phases are: a flow has no send of its own.
        if !d.warmup {
            record(&mut i.figures.service_time, d.service_micros);
        }
        let r = i.kind(step);
        count_outcome(
            d.outcome,
            d.in_window,
            &mut r.completed,
            &mut r.completed_in_window,
            &mut r.completed_ok_in_window,
            (&mut r.status, &mut r.errors, &mut r.grpc_status),
        );
        for (index, &ok) in d.checks.iter().enumerate() {
            if ok {
                r.checks_passed.add(index, 1);
            } else {
                r.checks_failed.add(index, 1);
            }
        }
        if !d.warmup {
            record(&mut r.latency, d.latency_micros);
            record(&mut r.service_time, d.service_micros);
            record(&mut r.start_lag, d.start_lag_micros);
        }
    }

    /// A flow ended in `interval`: the scenario's completion. It succeeds
    /// (counts toward the successful throughput) only when no step failed
    /// it, whatever the last step's status.
    pub(crate) fn flow_ended(&mut self, interval: u64, end: FlowEnd) {
        let i = self.at(interval);
        let f = &mut i.figures;
        let class = match end.outcome {
            Outcome::Status(code) => {
                f.status.bump(code);
                OutcomeClass::of_status(code)
            }
            Outcome::Error(kind) => {
                f.errors.bump(kind);
                OutcomeClass::Error
            }
            Outcome::Grpc(s) => {
                f.grpc_status.bump(s);
                s.class()
            }
            // A step that was never written has no answer to count.
            Outcome::Unsent(_) => OutcomeClass::Error,
        };
        f.completed += 1;
        if end.in_window {
            f.completed_in_window += 1;
            f.completed_ok_in_window += u64::from(end.failure.is_none());
        }
        if end.warmup {
            record(&mut f.warmup_latency, end.latency_micros);
        } else {
            record(f.latency.get_mut(class), end.latency_micros);
        }
        let warmup = end.warmup;
        let flow = self.flow_at(interval);
        if let Some(reason) = end.failure {
            flow.failed.bump(reason);
        }
        if !warmup {
            record(&mut flow.active, end.active_micros);
        }
    }
}
