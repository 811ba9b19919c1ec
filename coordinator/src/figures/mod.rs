//! The figure registry: every figure that thresholds, `compare` and
//! `--repeat` read from a report, with its key in `report.json`, the names
//! it is shown and written under and its unit; the `compute` module holds
//! the one way each is computed from the report model.
//!
//! Readers never compute a figure themselves: they name a [`Figure`] and
//! ask a [`Source`] for it (a report's totals, or the medians of several
//! runs), so a threshold, a `compare` row and a repeats median of one
//! figure cannot disagree. A share (`failures<1%`, `failure %`) is a figure
//! over the one it is a share of ([`Figure::share_of`]). This module names
//! no report type, so what only names figures (the threshold language,
//! and plans through it) does not depend on the report.

use loadfleet_proto::vocab::GrpcStatus;

/// The unit a figure is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Percent,
    /// Per second of the measurement window.
    Rate,
    Ms,
}

impl Unit {
    /// As written after a threshold's actual figure: `ms`, `%`, `req/s`,
    /// or empty for a count.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Percent => "%",
            Unit::Rate => "req/s",
            Unit::Ms => "ms",
        }
    }
}

/// A figure of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Quantile {
    P50,
    P90,
    P95,
    P99,
    P999,
    Max,
    Mean,
}

impl Quantile {
    pub const ALL: [Quantile; 7] = [
        Quantile::P50,
        Quantile::P90,
        Quantile::P95,
        Quantile::P99,
        Quantile::P999,
        Quantile::Max,
        Quantile::Mean,
    ];

    /// Its key in a percentiles object, and its threshold name.
    pub fn name(self) -> &'static str {
        match self {
            Quantile::P50 => "p50",
            Quantile::P90 => "p90",
            Quantile::P95 => "p95",
            Quantile::P99 => "p99",
            Quantile::P999 => "p999",
            Quantile::Max => "max",
            Quantile::Mean => "mean",
        }
    }
}

/// A phase of the service time on the wire (`totals.phases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Connect,
    TlsHandshake,
    Ttfb,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Connect, Phase::TlsHandshake, Phase::Ttfb];

    /// Its key in `totals.phases`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connect => "connect_ms",
            Phase::TlsHandshake => "tls_handshake_ms",
            Phase::Ttfb => "ttfb_ms",
        }
    }
}

/// A figure of one set of totals (the run's, a scenario's, a repeat run's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Figure {
    Intended,
    Sent,
    /// Arrivals never sent, every reason together.
    Unsent,
    /// Arrivals of lost agents' shares whose fate is unknown.
    Unreported,
    Completed,
    CompletedInWindow,
    /// Sent and without an outcome when the drain ended (`incomplete`).
    InFlightAtEnd,
    /// Transport errors (no HTTP status), every kind together.
    Errors,
    /// Transport errors, 4xx and 5xx answers, gRPC statuses other than OK.
    Failures,
    /// Completions in the window per second.
    Throughput,
    /// 2xx and gRPC OK completions in the window per second.
    ThroughputOk,
    /// From the intended send time.
    Latency(Quantile),
    /// From the actual send time.
    ServiceTime(Quantile),
    Phase(Phase, Quantile),
    ConnectionsOpened,
    /// Answers with this HTTP status code; absent when none came.
    Status(String),
    /// Transport errors of this kind; absent when none happened.
    ErrorKind(String),
    /// gRPC calls answered with this status; absent when none was.
    Grpc(GrpcStatus),
    /// Checks of flow steps that held; absent where no step has a check.
    ChecksPassed,
    /// Checks of flow steps judged, held or not.
    Checks,
}

/// The headline figures: `--repeat` keeps their median, min and max, and
/// `compare` quotes those for a repeated report.
pub(crate) const HEADLINE: [Figure; 25] = [
    Figure::Intended,
    Figure::Sent,
    Figure::Unsent,
    Figure::Unreported,
    Figure::Completed,
    Figure::CompletedInWindow,
    Figure::InFlightAtEnd,
    Figure::Errors,
    Figure::Failures,
    Figure::Throughput,
    Figure::ThroughputOk,
    Figure::Latency(Quantile::P50),
    Figure::Latency(Quantile::P90),
    Figure::Latency(Quantile::P95),
    Figure::Latency(Quantile::P99),
    Figure::Latency(Quantile::P999),
    Figure::Latency(Quantile::Max),
    Figure::Latency(Quantile::Mean),
    Figure::ServiceTime(Quantile::P50),
    Figure::ServiceTime(Quantile::P90),
    Figure::ServiceTime(Quantile::P95),
    Figure::ServiceTime(Quantile::P99),
    Figure::ServiceTime(Quantile::P999),
    Figure::ServiceTime(Quantile::Max),
    Figure::ServiceTime(Quantile::Mean),
];

/// The names a threshold expression gives figures (besides
/// `grpc.STATUS`), aliases included. `p99.9` is how the text report and
/// the page label the column whose key is `p999`, so a reader may name it
/// either way; the threshold language splits a scope from a metric with
/// that dot in mind ([`Figure::split_scope`]).
pub(crate) const THRESHOLD_NAMES: [(&str, Figure); 18] = [
    ("p50", Figure::Latency(Quantile::P50)),
    ("p90", Figure::Latency(Quantile::P90)),
    ("p95", Figure::Latency(Quantile::P95)),
    ("p99", Figure::Latency(Quantile::P99)),
    ("p999", Figure::Latency(Quantile::P999)),
    ("p99.9", Figure::Latency(Quantile::P999)),
    ("max", Figure::Latency(Quantile::Max)),
    ("mean", Figure::Latency(Quantile::Mean)),
    ("unsent", Figure::Unsent),
    ("errors", Figure::Errors),
    ("failures", Figure::Failures),
    // The word for flows: a flow scope's failures are its failed flows.
    ("failed", Figure::Failures),
    ("checks", Figure::ChecksPassed),
    ("incomplete", Figure::InFlightAtEnd),
    ("rps", Figure::Throughput),
    ("throughput", Figure::Throughput),
    ("ok_rps", Figure::ThroughputOk),
    ("throughput_ok", Figure::ThroughputOk),
];

impl Figure {
    /// The figure a threshold names `name` (`p99`, `failures`, `ok_rps`);
    /// `grpc.STATUS` is parsed by the threshold language itself.
    pub fn by_threshold_name(name: &str) -> Option<Figure> {
        THRESHOLD_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
    }

    /// Splits `[SCOPE.]METRIC` (`checkout.p99`, `shop.items.p99.9`) into
    /// the scope, if any, and the metric. The metric is what follows the
    /// last dot, unless the text ends in a threshold name that holds a dot
    /// itself (`p99.9`): read at the last dot, `p99.9` would be metric `9`
    /// of a scope `p99`.
    pub fn split_scope(name: &str) -> (Option<&str>, &str) {
        for (dotted, _) in THRESHOLD_NAMES.iter().filter(|(n, _)| n.contains('.')) {
            if name == *dotted {
                return (None, name);
            }
            let scope = name
                .strip_suffix(dotted)
                .and_then(|s| s.strip_suffix('.'))
                .filter(|s| !s.is_empty());
            if let Some(scope) = scope {
                return (Some(scope), &name[scope.len() + 1..]);
            }
        }
        match name.rsplit_once('.') {
            Some((scope, metric)) if !scope.is_empty() => (Some(scope), metric),
            _ => (None, name),
        }
    }

    /// The key path in `totals` (and in `repeats.median`), e.g.
    /// `unsent.total`, `latency_ms.p99`.
    pub fn key(&self) -> String {
        match self {
            Figure::Intended => "intended".into(),
            Figure::Sent => "sent".into(),
            Figure::Unsent => "unsent.total".into(),
            Figure::Unreported => "unreported".into(),
            Figure::Completed => "completed".into(),
            Figure::CompletedInWindow => "completed_in_window".into(),
            Figure::InFlightAtEnd => "in_flight_at_end".into(),
            // Written into each `repeats.runs[]`: the totals hold the kinds only.
            Figure::Errors => "errors_total".into(),
            Figure::Failures => "failures".into(),
            Figure::Throughput => "throughput_rps".into(),
            Figure::ThroughputOk => "throughput_ok_rps".into(),
            Figure::Latency(q) => format!("latency_ms.{}", q.name()),
            Figure::ServiceTime(q) => format!("service_time_ms.{}", q.name()),
            Figure::Phase(p, q) => format!("phases.{}.{}", p.name(), q.name()),
            Figure::ConnectionsOpened => "phases.connections_opened".into(),
            Figure::Status(code) => format!("status.{code}"),
            Figure::ErrorKind(kind) => format!("errors.{kind}"),
            Figure::Grpc(s) => format!("grpc.status.{}", s.as_str()),
            // Not in totals: each step's `checks[]` add up to them.
            Figure::ChecksPassed => "checks_passed".into(),
            Figure::Checks => "checks".into(),
        }
    }

    /// Its row in `compare`.
    pub fn label(&self) -> String {
        match self {
            Figure::Unsent => "unsent".into(),
            Figure::Errors => "errors".into(),
            Figure::Latency(q) => format!("latency_ms {}", q.name()),
            Figure::ServiceTime(q) => format!("service_time_ms {}", q.name()),
            Figure::Phase(p, q) => format!("{} {}", p.name(), q.name()),
            Figure::ConnectionsOpened => "connections_opened".into(),
            Figure::Status(code) => format!("status {code}"),
            Figure::ErrorKind(kind) => format!("error {kind}"),
            Figure::Grpc(s) => format!("grpc {}", s.as_str()),
            Figure::ChecksPassed => "checks passed".into(),
            _ => self.key(),
        }
    }

    /// Its share's row in `compare` (`failure %`), for a figure that is a
    /// share of another ([`Figure::share_of`]).
    pub fn share_label(&self) -> String {
        let what = match self {
            Figure::Errors => "error".into(),
            Figure::Failures => "failure".into(),
            Figure::InFlightAtEnd => "incomplete".into(),
            _ => self.label(),
        };
        format!("{what} %")
    }

    pub fn unit(&self) -> Unit {
        match self {
            Figure::Throughput | Figure::ThroughputOk => Unit::Rate,
            Figure::Latency(_) | Figure::ServiceTime(_) | Figure::Phase(..) => Unit::Ms,
            _ => Unit::Count,
        }
    }

    /// What a percentage of this figure is of: unsent of intended,
    /// incomplete of sent, errors, failures and gRPC statuses of
    /// completed (for a flow scenario, of the flows that ended), checks
    /// passed of checks judged. `None` for figures no percentage applies to.
    pub fn share_of(&self) -> Option<Figure> {
        match self {
            Figure::Unsent => Some(Figure::Intended),
            Figure::InFlightAtEnd => Some(Figure::Sent),
            Figure::Errors | Figure::Failures | Figure::Grpc(_) => Some(Figure::Completed),
            Figure::ChecksPassed => Some(Figure::Checks),
            _ => None,
        }
    }

    /// This figure as a percentage of [`Figure::share_of`], from `src`.
    pub fn share<S: Source + ?Sized>(&self, src: &S) -> Option<f64> {
        percent(src.get(self)?, src.get(&self.share_of()?)?)
    }
}

/// A figure of a subscription scenario (`scenarios[].sse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SseFigure {
    Opened,
    Events,
    Reconnects,
    DeliveryP50,
    DeliveryP99,
    NegativeDeliveries,
    FanoutSpreadMax,
}

impl SseFigure {
    pub(crate) const ALL: [SseFigure; 7] = [
        SseFigure::Opened,
        SseFigure::Events,
        SseFigure::Reconnects,
        SseFigure::DeliveryP50,
        SseFigure::DeliveryP99,
        SseFigure::NegativeDeliveries,
        SseFigure::FanoutSpreadMax,
    ];

    /// Its row in `compare`, after `SCENARIO sse `.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SseFigure::Opened => "opened",
            SseFigure::Events => "events",
            SseFigure::Reconnects => "reconnects",
            SseFigure::DeliveryP50 => "delivery p50",
            SseFigure::DeliveryP99 => "delivery p99",
            SseFigure::NegativeDeliveries => "negative deliveries",
            SseFigure::FanoutSpreadMax => "fan-out spread max",
        }
    }

    pub(crate) fn unit(self) -> Unit {
        match self {
            SseFigure::DeliveryP50 | SseFigure::DeliveryP99 | SseFigure::FanoutSpreadMax => {
                Unit::Ms
            }
            _ => Unit::Count,
        }
    }
}

/// Where figures are read from: one set of totals, or a combination of
/// several (the medians of repeat runs).
pub trait Source {
    /// The figure's value; `None` when this source does not have it.
    fn get(&self, figure: &Figure) -> Option<f64>;
}

/// `n` as a percentage of `of`; `None` when `of` is 0: a percentage of
/// nothing is no evidence either way.
pub(crate) fn percent(n: f64, of: f64) -> Option<f64> {
    (of > 0.0).then(|| 100.0 * n / of)
}

/// The median, the mean of the middle two for an even count; `None` of
/// nothing.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

mod compute;
mod flows;
pub(crate) use flows::{FlowFigure, StepFigure};
pub(crate) use flows::{Scope, FLOW_SCOPE};
#[cfg(test)]
mod tests;
