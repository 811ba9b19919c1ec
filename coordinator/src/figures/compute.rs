//! How each figure of the registry is computed from the report model: the
//! one place that reads figures out of a [`Totals`] or a [`Scenario`].

use loadfleet_proto::vocab::{GrpcStatus, OutcomeClass};

use super::{Figure, Phase, Quantile, Source, SseFigure};
use crate::report_model::{Percentiles, Phases, RequestReport, Scenario, Totals};

impl Quantile {
    pub fn of(self, p: &Percentiles) -> f64 {
        match self {
            Quantile::P50 => p.p50,
            Quantile::P90 => p.p90,
            Quantile::P95 => p.p95,
            Quantile::P99 => p.p99,
            Quantile::P999 => p.p999,
            Quantile::Max => p.max,
            Quantile::Mean => p.mean,
        }
    }
}

impl Phase {
    fn of(self, p: &Phases) -> Option<&Percentiles> {
        match self {
            Phase::Connect => p.connect_ms.as_ref(),
            Phase::TlsHandshake => p.tls_handshake_ms.as_ref(),
            Phase::Ttfb => p.ttfb_ms.as_ref(),
        }
    }
}

impl Figure {
    /// This figure of a set of totals; `None` when the totals do not have
    /// it (no latency when nothing completed, a status never seen), which
    /// readers show as unknown, never as 0.
    pub fn of(&self, t: &Totals) -> Option<f64> {
        let count = |n: u64| Some(n as f64);
        let counted = |n: Option<&u64>| n.map(|n| *n as f64);
        match self {
            Figure::Intended => count(t.intended),
            Figure::Sent => count(t.sent),
            Figure::Unsent => count(t.unsent.total),
            Figure::Unreported => count(t.unreported),
            Figure::Completed => count(t.completed),
            Figure::CompletedInWindow => count(t.completed_in_window),
            Figure::InFlightAtEnd => count(t.in_flight_at_end),
            Figure::Errors => count(t.errors.values().sum()),
            Figure::Failures => count(failures(t)),
            Figure::Throughput => Some(t.throughput_rps),
            Figure::ThroughputOk => Some(t.throughput_ok_rps),
            Figure::Latency(q) => t.latency_ms.as_ref().map(|p| q.of(p)),
            Figure::ServiceTime(q) => t.service_time_ms.as_ref().map(|p| q.of(p)),
            Figure::Phase(phase, q) => phase.of(&t.phases).map(|p| q.of(p)),
            Figure::ConnectionsOpened => count(t.phases.connections_opened),
            Figure::Status(code) => counted(t.status.get(code)),
            Figure::ErrorKind(kind) => counted(t.errors.get(kind)),
            Figure::Grpc(s) => counted(t.grpc.as_ref()?.status.get(s.as_str())),
            // Counted by step: read through a [`super::flows::Scope`].
            Figure::ChecksPassed | Figure::Checks => None,
        }
    }
}

impl Figure {
    /// This figure of one request of a scenario's mix
    /// (`scenarios[].requests[]`); `None` for the figures a request does
    /// not have: arrivals (intended, sent, unsent) and the service time
    /// and phases are the scenario's.
    pub fn of_request(&self, q: &RequestReport) -> Option<f64> {
        if !self.is_per_request() {
            return None;
        }
        let count = |n: u64| Some(n as f64);
        let counted = |n: Option<&u64>| n.map(|n| *n as f64);
        match self {
            Figure::Completed => count(q.completed),
            Figure::CompletedInWindow => count(q.completed_in_window),
            Figure::Errors => count(q.errors.values().sum()),
            Figure::Failures => count(q.failures),
            Figure::Throughput => Some(q.throughput_rps),
            Figure::ThroughputOk => Some(q.throughput_ok_rps),
            Figure::Latency(quantile) => q.latency_ms.as_ref().map(|p| quantile.of(p)),
            Figure::Status(code) => counted(q.status.get(code)),
            Figure::ErrorKind(kind) => counted(q.errors.get(kind)),
            Figure::Grpc(s) => counted(q.grpc_status.get(s.as_str())),
            _ => None,
        }
    }

    /// Whether a request of a mix has this figure (see
    /// [`Figure::of_request`]): what a threshold on `SCENARIO.REQUEST`
    /// may name.
    pub fn is_per_request(&self) -> bool {
        !matches!(
            self,
            Figure::Intended
                | Figure::Sent
                | Figure::Unsent
                | Figure::Unreported
                | Figure::InFlightAtEnd
                | Figure::ServiceTime(_)
                | Figure::Phase(..)
                | Figure::ConnectionsOpened
                | Figure::ChecksPassed
                | Figure::Checks
        )
    }

    /// Whether this figure is counted over flow steps (checks) rather than
    /// kept in a set of totals: a threshold on it reads a report's steps,
    /// never the medians of repeat runs' totals.
    pub fn is_from_steps(&self) -> bool {
        matches!(self, Figure::ChecksPassed | Figure::Checks)
    }
}

impl Source for RequestReport {
    fn get(&self, figure: &Figure) -> Option<f64> {
        figure.of_request(self)
    }
}

/// Failures counted from the outcome maps, with the vocabulary's
/// [`OutcomeClass::is_failure`]: the rule the aggregate counts
/// `totals.failures` by, so a report written before that key existed
/// reads the same.
fn failures(t: &Totals) -> u64 {
    let transport: u64 = t.errors.values().sum();
    let answers: u64 = t
        .status
        .iter()
        .filter(|(code, _)| {
            code.parse::<u16>()
                .is_ok_and(|c| OutcomeClass::of_status(c).is_failure())
        })
        .map(|(_, n)| n)
        .sum();
    // A status name outside the vocabulary reads as UNKNOWN, as the
    // aggregate reads it.
    let grpc: u64 = t.grpc.as_ref().map_or(0, |g| {
        g.status
            .iter()
            .filter(|(name, _)| {
                name.parse::<GrpcStatus>()
                    .unwrap_or(GrpcStatus::Unknown)
                    .class()
                    .is_failure()
            })
            .map(|(_, n)| n)
            .sum()
    });
    transport + answers + grpc
}

impl SseFigure {
    /// This figure of a scenario; `None` for a scenario without
    /// subscriptions and for a figure it could not measure.
    pub(crate) fn of(self, s: &Scenario) -> Option<f64> {
        let sse = s.sse.as_ref()?;
        let delivery = |q: Quantile| sse.delivery.latency_ms.as_ref().map(|p| q.of(p));
        match self {
            SseFigure::Opened => Some(sse.opened as f64),
            SseFigure::Events => Some(sse.events as f64),
            SseFigure::Reconnects => Some(sse.reconnects as f64),
            SseFigure::DeliveryP50 => delivery(Quantile::P50),
            SseFigure::DeliveryP99 => delivery(Quantile::P99),
            SseFigure::NegativeDeliveries => Some(sse.delivery.negative as f64),
            SseFigure::FanoutSpreadMax => sse.fanout.spread_max_ms,
        }
    }
}

impl Source for Totals {
    fn get(&self, figure: &Figure) -> Option<f64> {
        figure.of(self)
    }
}
