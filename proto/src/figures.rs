//! The figures of a snapshot, decoded: one type from the agent that
//! records them to the report that reads them.
//!
//! Each figure is written once, as a field of [`Figures`] (a scenario's
//! interval), [`RequestFigures`] (one request of its mix) or
//! [`SseFigures`] (its subscribers); the `figures!` declaration gives each
//! type its decoding from the wire message (`TryFrom`, which checks every
//! word against the vocabulary and every count and histogram against the
//! bounds before anything is added), its encoding back, and `+=`. Snapshots
//! are deltas, so merging is addition: counts are summed and histograms
//! added bucket by bucket, and the result does not depend on the order or
//! grouping in which snapshots arrive. A new figure is one field here, with
//! its wire field in control.proto and its key in the report.

use hdrhistogram::Histogram;

use crate::bounds::{MAX_IN_FLIGHT, MAX_REQUESTS, MAX_STREAM_ERROR_KINDS};
use crate::histogram::CodecError;
use crate::v1;
use crate::vocab::{
    ErrorKind, FlowFailure, GrpcStatus, HttpProtocol, NotReached, OutcomeClass, UnknownWord,
    UnsentReason,
};

mod kinds;

pub use kinds::{ByClass, ByIndex, Codes, Counts, Fanout, Figure, Mean, Receipts};

/// Unsent arrivals by reason.
pub type UnsentCounts = Counts<UnsentReason, { UnsentReason::ALL.len() }>;
/// Transport errors by kind.
pub type ErrorCounts = Counts<ErrorKind, { ErrorKind::ALL.len() }>;
/// gRPC calls by grpc-status.
pub type GrpcCounts = Counts<GrpcStatus, { GrpcStatus::ALL.len() }>;
/// Connections by the protocol spoken on them.
pub type ProtocolCounts = Counts<HttpProtocol, { HttpProtocol::ALL.len() }>;
/// Failed flows by reason.
pub type FlowFailures = Counts<FlowFailure, { FlowFailure::ALL.len() }>;
/// Steps not reached by reason.
pub type NotReachedCounts = Counts<NotReached, { NotReached::ALL.len() }>;
/// Completions by outcome class.
pub type ClassCounts = Counts<OutcomeClass, { OutcomeClass::ALL.len() }>;

/// A snapshot (or part of one) that cannot be taken in: which field, and
/// why. [`FigureError::what`] is the short stable name the fleet counts
/// and reports refusals by.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// A key that is no word of its vocabulary: it would be a new series
    /// kept for the whole run.
    #[error("{field} key {:?} is not in the vocabulary", word.word)]
    UnknownWord {
        field: &'static str,
        word: UnknownWord,
    },
    /// A count, gauge or list beyond its bound.
    #[error("{field}: {detail}")]
    OutOfRange { field: &'static str, detail: String },
    /// A status code that is not three digits.
    #[error("{field} status {code} is not a 3-digit HTTP status")]
    BadStatus { field: &'static str, code: u32 },
    /// Histogram bytes that are corrupt or claim more than the bounds.
    #[error("{field}: {error}")]
    Histogram {
        field: &'static str,
        error: CodecError,
    },
    /// A fan-out receipt that cannot be (an empty one, last before first).
    #[error("{field}: {detail}")]
    BadFanout { field: &'static str, detail: String },
    /// Per-request figures that repeat a request or come out of order.
    #[error("request {request} after request {after}: each request comes once, in order")]
    RequestOutOfOrder { request: u32, after: u32 },
}

impl FigureError {
    /// The short stable name of the refusal.
    pub fn what(&self) -> &'static str {
        match self {
            FigureError::UnknownWord { word, .. } => match word.vocabulary {
                "OutcomeClass" => "unknown_class",
                "UnsentReason" => "unknown_reason",
                "ErrorKind" => "unknown_error_kind",
                "GrpcStatus" => "unknown_grpc_status",
                "HttpProtocol" => "unknown_protocol",
                "FlowFailure" => "unknown_flow_failure",
                "NotReached" => "unknown_not_reached",
                _ => "unknown_word",
            },
            FigureError::OutOfRange { .. } => "count_out_of_range",
            FigureError::BadStatus { .. } => "bad_status",
            FigureError::Histogram { .. } => "corrupt_histogram",
            FigureError::BadFanout { .. } => "bad_fanout",
            FigureError::RequestOutOfOrder { .. } => "request_out_of_order",
        }
    }
}

/// Declares a figure type over the figure fields of a wire message (same
/// names): the struct, `Default`, decoding (`TryFrom`), encoding, `+=`,
/// the overflow check, counts-only addition, reset and equality, each over
/// the one field list.
macro_rules! figures {
    (
        $(#[$meta:meta])*
        pub struct $name:ident from $wire:ty, named $prefix:literal {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )+
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: <$ty as Figure>::empty(), )+ }
            }
        }

        impl TryFrom<&$wire> for $name {
            type Error = FigureError;
            /// All of it or nothing: the first field out of bounds refuses
            /// the whole, so counts and histograms never disagree.
            fn try_from(w: &$wire) -> Result<Self, FigureError> {
                Ok(Self {
                    $( $field: <$ty as Figure>::decode(
                        &w.$field,
                        concat!($prefix, stringify!($field)),
                    )?, )+
                })
            }
        }

        impl $name {
            /// Writes every figure into its wire field; the message's other
            /// fields are left as they are.
            pub fn encode_into(&self, w: &mut $wire) {
                $( w.$field = Figure::encode(&self.$field); )+
            }

            /// Back to nothing counted, keeping every allocation.
            pub fn reset(&mut self) {
                $( Figure::reset(&mut self.$field); )+
            }

            /// The first field (by its wire name) whose counts would
            /// overflow `total`'s if this were added in; `None` when all
            /// fit.
            pub fn overflows(&self, total: &Self) -> Option<&'static str> {
                $( if !Figure::fits_into(&self.$field, &total.$field) {
                    return Some(concat!($prefix, stringify!($field)));
                } )+
                None
            }

            /// Adds the counts of `other` (no histogram), for rows that
            /// report counts only.
            pub fn add_counts(&mut self, other: &Self) {
                $( if <$ty as Figure>::COUNT {
                    Figure::add(&mut self.$field, &other.$field);
                } )+
            }
        }

        impl std::ops::AddAssign<&$name> for $name {
            fn add_assign(&mut self, other: &$name) {
                $( Figure::add(&mut self.$field, &other.$field); )+
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                true $( && Figure::same(&self.$field, &other.$field) )+
            }
        }
    };
}

figures! {
    /// What one scenario's requests did: one agent's interval as it
    /// arrives, or any sum of them (totals, a scenario, an agent).
    pub struct Figures from v1::Snapshot, named "" {
        intended: u64,
        sent: u64,
        unsent: UnsentCounts,
        completed: u64,
        /// Completions inside the measurement window.
        completed_in_window: u64,
        /// Of those, the successes (2xx, gRPC OK): the successful throughput.
        completed_ok_in_window: u64,
        status: Codes,
        errors: ErrorCounts,
        grpc_status: GrpcCounts,
        /// From the intended send time, per outcome class (µs).
        latency: ByClass,
        /// From the actual send time (µs).
        service_time: Histogram<u64>,
        warmup_latency: Histogram<u64>,
        /// Scheduler lag of the arrivals sent (µs).
        lag: Histogram<u64>,
        cpu_seconds: f64,
        /// Host-wide CPU use, 0..1 of all cores.
        host_cpu: Mean,
        /// Time every connection of a worker's pool was busy (see
        /// control.proto), nanoseconds.
        pool_saturated_ns: u64,
        /// Waits for a connection of the agent's own pool (µs).
        pool_wait: Histogram<u64>,
        /// Where measured requests' time went on the wire (µs).
        connect_time: Histogram<u64>,
        tls_time: Histogram<u64>,
        ttfb: Histogram<u64>,
        body_time: Histogram<u64>,
        connections_opened: u64,
        connections_reused: u64,
        connections: ProtocolCounts,
    }
}

figures! {
    /// One request of a scenario's mix, or one step of a flow: its
    /// completions' outcomes and latency (every class together, µs), and
    /// for a step its funnel, its checks and its times (see control.proto).
    pub struct RequestFigures from v1::RequestFigures, named "requests." {
        completed: u64,
        completed_in_window: u64,
        completed_ok_in_window: u64,
        status: Codes,
        errors: ErrorCounts,
        grpc_status: GrpcCounts,
        latency: Histogram<u64>,
        reached: u64,
        sent: u64,
        unsent: UnsentCounts,
        not_reached: NotReachedCounts,
        service_time: Histogram<u64>,
        start_lag: Histogram<u64>,
        checks_passed: ByIndex,
        checks_failed: ByIndex,
    }
}

figures! {
    /// What only a flow scenario's flows have beyond a scenario's figures.
    pub struct FlowFigures from v1::FlowFigures, named "flow." {
        failed: FlowFailures,
        /// Latency minus the think time slept (µs).
        active: Histogram<u64>,
    }
}

figures! {
    /// A subscription scenario's subscribers (see control.proto).
    pub struct SseFigures from v1::SseFigures, named "sse." {
        opened: u64,
        first_event: Histogram<u64>,
        events: u64,
        events_per_subscriber: Histogram<u64>,
        gap: Histogram<u64>,
        ended_by_server: u64,
        reconnects: u64,
        resumed: u64,
        latency: Histogram<u64>,
        negative_latency: Histogram<u64>,
        negative: u64,
        no_send_time: u64,
        duplicates: u64,
        comments: u64,
        stream_errors: ErrorCounts,
        refused: Codes,
        fanout: Fanout,
        fanout_untracked: u64,
    }
}

/// Completions per outcome class, from their statuses and errors.
fn outcomes(status: &Codes, errors: &ErrorCounts, grpc: &GrpcCounts) -> ClassCounts {
    let mut out = ClassCounts::default();
    for (code, n) in status.iter() {
        out.add(OutcomeClass::of_status(code), n);
    }
    out.add(OutcomeClass::Error, errors.total());
    for (s, n) in grpc.iter() {
        out.add(s.class(), n);
    }
    out
}

fn failures_of(classes: &ClassCounts) -> u64 {
    classes
        .iter()
        .filter(|(c, _)| c.is_failure())
        .fold(0, |a, (_, n)| a.saturating_add(n))
}

impl Figures {
    /// Completions per outcome class.
    pub fn by_class(&self) -> ClassCounts {
        outcomes(&self.status, &self.errors, &self.grpc_status)
    }

    /// Requests that did not succeed: transport errors, 4xx/5xx answers
    /// and gRPC statuses other than OK (1xx and 3xx are neither; see
    /// docs/report.md).
    pub fn failures(&self) -> u64 {
        failures_of(&self.by_class())
    }

    /// The scenario's figures as those of its one request, for a mix of
    /// one (whose agents do not split them).
    pub fn as_request(&self) -> RequestFigures {
        RequestFigures {
            completed: self.completed,
            completed_in_window: self.completed_in_window,
            completed_ok_in_window: self.completed_ok_in_window,
            status: self.status.clone(),
            errors: self.errors,
            grpc_status: self.grpc_status,
            latency: self.latency.all(),
            ..RequestFigures::default()
        }
    }
}

impl RequestFigures {
    /// Requests that did not succeed, by the rule of [`Figures::failures`].
    pub fn failures(&self) -> u64 {
        failures_of(&outcomes(&self.status, &self.errors, &self.grpc_status))
    }
}

/// Gauges: what stood at the end of an interval (and its peak), summed
/// over agents per interval, never over time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub in_flight: u64,
    pub max_in_flight: u64,
}

/// The subscription part of a snapshot: its figures and its gauges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sse {
    pub figures: SseFigures,
    /// Streams open at the end of the interval, and at most during it.
    pub open_streams: Gauges,
}

/// One snapshot, decoded: where it belongs, its gauges and its figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub interval_index: u64,
    pub scenario: u32,
    pub seq: u64,
    pub gauges: Gauges,
    pub figures: Figures,
    /// Per request of the mix, by index, in increasing order.
    pub requests: Vec<(u32, RequestFigures)>,
    pub sse: Option<Sse>,
    pub flow: Option<FlowFigures>,
}

fn gauge(v: u64, field: &'static str) -> Result<u64, FigureError> {
    if v > u64::from(MAX_IN_FLIGHT) {
        return Err(FigureError::OutOfRange {
            field,
            detail: format!("{v} is more than {MAX_IN_FLIGHT}"),
        });
    }
    Ok(v)
}

impl TryFrom<&v1::SseFigures> for Sse {
    type Error = FigureError;
    fn try_from(f: &v1::SseFigures) -> Result<Self, FigureError> {
        let keys = f.stream_errors.len() + f.refused.len();
        if keys > MAX_STREAM_ERROR_KINDS {
            return Err(FigureError::OutOfRange {
                field: "sse.stream_errors",
                detail: format!("{keys} keys with sse.refused, more than {MAX_STREAM_ERROR_KINDS}"),
            });
        }
        Ok(Sse {
            open_streams: Gauges {
                in_flight: gauge(f.open_streams, "sse.open_streams")?,
                max_in_flight: gauge(f.max_open_streams, "sse.max_open_streams")?,
            },
            figures: SseFigures::try_from(f)?,
        })
    }
}

impl TryFrom<&v1::Snapshot> for Snapshot {
    type Error = FigureError;
    /// All of it or nothing. The cheap checks (gauges, the list of
    /// requests) come before any histogram is decoded.
    fn try_from(s: &v1::Snapshot) -> Result<Self, FigureError> {
        let gauges = Gauges {
            in_flight: gauge(s.in_flight, "in_flight")?,
            max_in_flight: gauge(s.max_in_flight, "max_in_flight")?,
        };
        if s.requests.len() > MAX_REQUESTS {
            return Err(FigureError::OutOfRange {
                field: "requests",
                detail: format!("{} entries, more than {MAX_REQUESTS}", s.requests.len()),
            });
        }
        for pair in s.requests.windows(2) {
            if pair[1].request <= pair[0].request {
                return Err(FigureError::RequestOutOfOrder {
                    request: pair[1].request,
                    after: pair[0].request,
                });
            }
        }
        let requests = s
            .requests
            .iter()
            .map(|r| Ok((r.request, RequestFigures::try_from(r)?)))
            .collect::<Result<_, FigureError>>()?;
        Ok(Snapshot {
            interval_index: s.interval_index,
            scenario: s.scenario,
            seq: s.seq,
            gauges,
            figures: Figures::try_from(s)?,
            requests,
            sse: s.sse.as_ref().map(Sse::try_from).transpose()?,
            flow: s.flow.as_ref().map(FlowFigures::try_from).transpose()?,
        })
    }
}

impl Sse {
    /// The wire form.
    pub fn encode(&self) -> v1::SseFigures {
        let mut f = v1::SseFigures {
            open_streams: self.open_streams.in_flight,
            max_open_streams: self.open_streams.max_in_flight,
            ..Default::default()
        };
        self.figures.encode_into(&mut f);
        f
    }
}

impl Snapshot {
    /// The wire form; [`TryFrom`] of it gives back an equal snapshot.
    pub fn encode(&self) -> v1::Snapshot {
        let mut s = v1::Snapshot {
            interval_index: self.interval_index,
            scenario: self.scenario,
            seq: self.seq,
            in_flight: self.gauges.in_flight,
            max_in_flight: self.gauges.max_in_flight,
            requests: self
                .requests
                .iter()
                .map(|(request, r)| r.encode(*request))
                .collect(),
            sse: self.sse.as_ref().map(Sse::encode),
            flow: self.flow.as_ref().map(|f| {
                let mut w = v1::FlowFigures::default();
                f.encode_into(&mut w);
                w
            }),
            ..Default::default()
        };
        self.figures.encode_into(&mut s);
        s
    }
}

impl RequestFigures {
    /// The wire form, for request `request` of the mix.
    pub fn encode(&self, request: u32) -> v1::RequestFigures {
        let mut r = v1::RequestFigures {
            request,
            ..Default::default()
        };
        self.encode_into(&mut r);
        r
    }
}

#[cfg(test)]
mod tests;
