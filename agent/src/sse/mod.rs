//! Subscription scenarios: each arrival (open model) or client (closed
//! model) holds a Server-Sent Events stream instead of sending requests.
//!
//! [`parser`] reads the event-stream format (its HTTP/1.1 is the request
//! pools' codec, `client::wire`), [`subscriber`] runs one subscriber with its
//! reconnects, and [`record`] buckets what subscribers saw into the
//! snapshot intervals. The scheduler (open arrivals, closed clients, the
//! in-flight cap, unsent accounting) is the worker's, unchanged: a
//! subscriber is one arrival that stays in flight while it holds its stream.

pub(crate) mod hook;
pub(crate) mod parser;
pub(crate) mod record;
pub(crate) mod subscriber;

use std::time::Duration;

use loadfleet_proto::v1;

use subscriber::Number;

/// A subscription scenario's settings, parsed once from the assignment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseSpec {
    /// Open model: how long each subscriber holds on.
    pub hold: Duration,
    /// Reconnection time until the server sends `retry:`.
    pub reconnect: Duration,
    pub send_time: SendTime,
    /// Event type tracked for the fan-out spread; empty for all.
    pub fanout_event: String,
}

/// Where an event carries the server's send time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SendTime {
    /// Nowhere: no delivery latency.
    None,
    /// The event id is the time.
    Id(Unit),
    /// A top-level JSON number field of the data; `quoted` is the field
    /// name in quotes, as it appears in the JSON.
    Field { quoted: Vec<u8>, unit: Unit },
}

/// The unit of a send time since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    fn ns_per(self) -> i128 {
        match self {
            Unit::Seconds => 1_000_000_000,
            Unit::Millis => 1_000_000,
            Unit::Micros => 1_000,
            Unit::Nanos => 1,
        }
    }

    /// A time in this unit, as ns since the epoch.
    fn to_ns(self, value: Number) -> Option<i128> {
        match value {
            Number::Int(n) => i128::from(n).checked_mul(self.ns_per()),
            Number::Float(f) => {
                let ns = f * self.ns_per() as f64;
                (ns.abs() < 1e30).then_some(ns as i128)
            }
        }
    }
}

/// An SSE setting of the assignment that this agent cannot use. The
/// coordinator validated the plan, so this means a mismatched coordinator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SpecError {
    #[error("sse.send_time_unit {0:?} is not one of s, ms, us, ns")]
    Unit(String),
}

impl SseSpec {
    pub(crate) fn from_proto(p: &v1::SseScenario) -> Result<Self, SpecError> {
        let unit = match p.send_time_unit.as_str() {
            "s" => Unit::Seconds,
            "" | "ms" => Unit::Millis,
            "us" => Unit::Micros,
            "ns" => Unit::Nanos,
            other => return Err(SpecError::Unit(other.to_owned())),
        };
        let send_time = match p.send_time.as_str() {
            "" => SendTime::None,
            "id" => SendTime::Id(unit),
            field => SendTime::Field {
                quoted: format!("\"{field}\"").into_bytes(),
                unit,
            },
        };
        Ok(SseSpec {
            hold: Duration::from_nanos(p.hold_ns),
            reconnect: Duration::from_nanos(p.reconnect_ns),
            send_time,
            fanout_event: p.fanout_event.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_time_from_a_field_or_the_id() {
        let field = SseSpec::from_proto(&v1::SseScenario {
            send_time: "sent_us".into(),
            send_time_unit: "us".into(),
            ..Default::default()
        })
        .unwrap();
        let data = br#"{"seq":3, "sent_us" : 1700000000123456,"x":1}"#;
        assert_eq!(
            field.send_time.read(b"", data),
            Some(1_700_000_000_123_456_000)
        );
        assert_eq!(field.send_time.read(b"", b"{\"seq\":3}"), None);
        assert_eq!(field.send_time.read(b"", b"{\"sent_us\":\"soon\"}"), None);
        let id = SendTime::Id(Unit::Millis);
        assert_eq!(
            id.read(b"1700000000123", b""),
            Some(1_700_000_000_123_000_000)
        );
        assert_eq!(id.read(b"1.5", b""), Some(1_500_000));
        assert_eq!(SendTime::None.read(b"1", b"{}"), None);
        assert!(SseSpec::from_proto(&v1::SseScenario {
            send_time_unit: "h".into(),
            ..Default::default()
        })
        .is_err());
    }
}
