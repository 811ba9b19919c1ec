//! One request kind's figures within a recorder's interval: the part of
//! a snapshot that splits a scenario's completions by request of its mix.

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::new_histogram;
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus};

use super::{bump, by_code, by_word, encode_or_empty, record, Outcome};
use loadfleet_proto::vocab::OutcomeClass;

/// One request kind's completions in one interval: the scenario's outcome
/// counts and one latency histogram (every class together).
pub(super) struct KindFigures {
    completed: u64,
    completed_in_window: u64,
    completed_ok_in_window: u64,
    status: Vec<(u16, u64)>,
    errors: Vec<(ErrorKind, u64)>,
    grpc: Vec<(GrpcStatus, u64)>,
    latency: Histogram<u64>,
}

impl KindFigures {
    pub(super) fn new() -> Self {
        Self {
            completed: 0,
            completed_in_window: 0,
            completed_ok_in_window: 0,
            status: Vec::new(),
            errors: Vec::new(),
            grpc: Vec::new(),
            latency: new_histogram(),
        }
    }

    /// Whether anything of this kind completed in the interval: only
    /// those go into the snapshot.
    pub(super) fn any(&self) -> bool {
        self.completed > 0
    }

    /// One completion of this kind, of `class`; `latency_micros` for a
    /// measured (not warm-up) one.
    pub(super) fn record(
        &mut self,
        outcome: Outcome,
        class: OutcomeClass,
        in_window: bool,
        latency_micros: Option<u64>,
    ) {
        self.completed += 1;
        if in_window {
            self.completed_in_window += 1;
            if class.is_ok() {
                self.completed_ok_in_window += 1;
            }
        }
        match outcome {
            Outcome::Status(code) => bump(&mut self.status, code),
            Outcome::Error(e) => bump(&mut self.errors, e),
            Outcome::Grpc(status) => bump(&mut self.grpc, status),
            Outcome::Unsent(_) => {}
        }
        if let Some(micros) = latency_micros {
            record(&mut self.latency, micros);
        }
    }

    /// Clears it for the next interval; one with nothing recorded is
    /// already clear (every record counts a completion), so an idle kind
    /// costs nothing per interval.
    pub(super) fn reset(&mut self) {
        if !self.any() {
            return;
        }
        self.completed = 0;
        self.completed_in_window = 0;
        self.completed_ok_in_window = 0;
        self.status.clear();
        self.errors.clear();
        self.grpc.clear();
        self.latency.reset();
    }

    pub(super) fn to_proto(&self, request: u32) -> v1::RequestFigures {
        v1::RequestFigures {
            request,
            completed: self.completed,
            completed_in_window: self.completed_in_window,
            completed_ok_in_window: self.completed_ok_in_window,
            status: by_code(&self.status),
            errors: by_word(&self.errors, |k| k.as_str()),
            grpc_status: by_word(&self.grpc, |k| k.as_str()),
            latency: if self.latency.is_empty() {
                Vec::new()
            } else {
                encode_or_empty(&self.latency)
            },
        }
    }
}
