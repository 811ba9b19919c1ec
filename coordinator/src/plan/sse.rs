//! The keys of a subscription scenario (`kind = "sse"`): how long each
//! subscriber holds on, how it reconnects, and where the events carry the
//! server's send time.

use std::time::Duration;

use loadfleet_proto::bounds::{MAX_HOLD, MAX_RECONNECT, MAX_SSE_NAME_BYTES};
use loadfleet_proto::v1;
use toml::Spanned;

use super::check::Check;
use super::raw::RawScenario;

/// Wait before a reconnect until the server says otherwise (`retry:`): what
/// browsers use.
const DEFAULT_RECONNECT: Duration = Duration::from_secs(3);

/// A subscription scenario's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsePlan {
    /// Open model: how long each subscriber holds its subscription; the
    /// scenario lasts its schedule plus this. `None` holds until the
    /// schedule ends.
    pub hold: Option<Duration>,
    pub reconnect: Duration,
    /// "" (none), "id", or a JSON field of the data.
    pub send_time: String,
    /// "s", "ms", "us" or "ns".
    pub send_time_unit: String,
    /// Event type tracked for the fan-out spread; "" for every event.
    pub fanout_event: String,
}

impl SsePlan {
    pub fn to_proto(&self) -> v1::SseScenario {
        v1::SseScenario {
            hold_ns: self.hold.map_or(0, |d| d.as_nanos() as u64),
            reconnect_ns: self.reconnect.as_nanos() as u64,
            send_time: self.send_time.clone(),
            send_time_unit: self.send_time_unit.clone(),
            fanout_event: self.fanout_event.clone(),
        }
    }

    /// What the send time rests on, in words for the report.
    pub fn send_time_source(&self) -> String {
        match self.send_time.as_str() {
            "" => "none".to_owned(),
            "id" => format!("event id ({})", self.send_time_unit),
            field => format!("data.{field} ({})", self.send_time_unit),
        }
    }
}

/// The scenario's SSE settings: `None` for a request scenario. Keys that
/// only a subscription scenario takes are mistakes elsewhere.
pub(super) fn sse(c: &mut Check<'_>, i: usize, s: &RawScenario, closed: bool) -> Option<SsePlan> {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let is_sse = match s.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
        None | Some(("http", _)) => false,
        Some(("sse", _)) => true,
        Some((other, sp)) => {
            c.err(
                at("kind"),
                Some(sp),
                format!("{other:?} is not a scenario kind; use \"http\" (requests) or \"sse\" (held event streams)"),
            );
            return None;
        }
    };
    let sse_only: [(&str, Option<std::ops::Range<usize>>); 5] = [
        ("hold", s.hold.as_ref().map(Spanned::span)),
        ("reconnect", s.reconnect.as_ref().map(Spanned::span)),
        ("send_time", s.send_time.as_ref().map(Spanned::span)),
        (
            "send_time_unit",
            s.send_time_unit.as_ref().map(Spanned::span),
        ),
        ("fanout_event", s.fanout_event.as_ref().map(Spanned::span)),
    ];
    if !is_sse {
        for (key, span) in sse_only {
            if let Some(span) = span {
                c.err(
                    at(key),
                    Some(span),
                    format!("{key} only applies to kind = \"sse\"; add it or remove {key}"),
                );
            }
        }
        return None;
    }
    if closed && s.hold.is_some() {
        c.err(
            at("hold"),
            s.hold.as_ref().map(Spanned::span),
            "a closed-model subscriber holds until its client leaves; hold is for open-model subscribers",
        );
    }
    let hold = c.bounded_duration(&at("hold"), &s.hold, MAX_HOLD);
    if hold == Some(Duration::ZERO) {
        c.err(
            at("hold"),
            s.hold.as_ref().map(Spanned::span),
            "a subscriber that holds for 0s never sees an event; use e.g. hold = \"60s\"",
        );
    }
    let reconnect = c
        .bounded_duration(&at("reconnect"), &s.reconnect, MAX_RECONNECT)
        .unwrap_or(DEFAULT_RECONNECT);
    let name = |c: &mut Check<'_>, key: &str, v: &Option<Spanned<String>>| -> String {
        let Some(v) = v else { return String::new() };
        let text = v.get_ref();
        if text.len() > MAX_SSE_NAME_BYTES || text.contains('"') || text.contains('\\') {
            c.err(
                at(key),
                Some(v.span()),
                format!("must be a plain name of at most {MAX_SSE_NAME_BYTES} bytes, without quotes or backslashes"),
            );
        }
        text.clone()
    };
    let send_time = name(c, "send_time", &s.send_time);
    let send_time = match send_time.strip_prefix("data.") {
        Some(field) if !field.is_empty() => field.to_owned(),
        _ if send_time.is_empty() || send_time == "id" => send_time,
        _ => {
            c.err(
                at("send_time"),
                s.send_time.as_ref().map(Spanned::span),
                format!("{send_time:?} is not a place for a send time; use \"id\" or \"data.FIELD\" (a JSON number field of the event's data)"),
            );
            String::new()
        }
    };
    let fanout_event = name(c, "fanout_event", &s.fanout_event);
    let send_time_unit = match s
        .send_time_unit
        .as_ref()
        .map(|u| (u.get_ref().as_str(), u.span()))
    {
        None => "ms".to_owned(),
        Some((unit @ ("s" | "ms" | "us" | "ns"), _)) => unit.to_owned(),
        Some((other, sp)) => {
            c.err(
                at("send_time_unit"),
                Some(sp),
                format!("{other:?} is not a unit; use \"s\", \"ms\", \"us\" or \"ns\" (since the Unix epoch)"),
            );
            String::new()
        }
    };
    Some(SsePlan {
        hold,
        reconnect,
        send_time,
        send_time_unit,
        fanout_event,
    })
}
