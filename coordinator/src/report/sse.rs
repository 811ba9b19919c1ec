//! The subscription section of a scenario's report (`scenarios[].sse`):
//! what the subscribers got, how late events arrived, and what that
//! lateness rests on.
//!
//! Delivery latency mixes two clocks: the agent's wall clock at receipt and
//! the target's at sending. It is only as good as their agreement, so the
//! section says what is known of it (each agent's wall-clock offset to the
//! coordinator, measured with the same probes that place the common
//! start), what is assumed (the target's clock agrees with the agents'),
//! and keeps every negative latency, counted and with its size, instead of
//! clamping it to zero: a negative figure is a clock error made visible.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::new_histogram;
use serde::{Deserialize, Serialize};

use super::build::percentiles;
use super::model::Percentiles;
use crate::fleet::RunResult;
use crate::sse::SseMerged;

/// Most fan-out rows (event ids) the report lists; the spread figures
/// cover every id.
pub const MAX_FANOUT_ROWS: usize = 100;

/// One scenario's subscription figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SseReport {
    /// Subscribers whose first response was a 2xx event stream.
    pub opened: u64,
    /// Time from a subscriber's intended instant to its first event.
    pub first_event_ms: Option<Percentiles>,
    /// Events received over all subscribers, reconnects included.
    pub events: u64,
    /// Events per subscriber over its life (reconnects included).
    pub events_per_subscriber: Option<Counts>,
    /// Time between consecutive events of one stream.
    pub gap_ms: Option<Percentiles>,
    /// Streams the server ended while the subscriber still wanted them.
    pub ended_by_server: u64,
    pub reconnects: u64,
    /// Reconnects that sent Last-Event-ID.
    pub resumed: u64,
    /// Events whose id was not above the last one the subscriber had seen.
    pub duplicates: u64,
    /// Comment lines (keep-alives).
    pub comments: u64,
    /// Errors on open streams and on reconnects, by kind.
    pub stream_errors: BTreeMap<String, u64>,
    /// Reconnects answered without a stream, by status.
    pub refused: BTreeMap<String, u64>,
    /// Event delivery latency and what it rests on.
    pub delivery: Delivery,
    pub fanout: Fanout,
    /// Streams open per second, all agents together.
    pub open_streams: Vec<OpenStreams>,
}

/// A distribution of counts (not times).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Counts {
    pub min: u64,
    pub p50: u64,
    pub max: u64,
    /// How many values (subscribers).
    pub count: u64,
}

/// Event delivery latency: agent wall clock at receipt minus the send time
/// in the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// Where the send time was read ("data.sent_us (us)", "event id (ms)"
    /// or "none").
    pub send_time: String,
    /// Latencies of zero or more.
    pub latency_ms: Option<Percentiles>,
    /// Events whose latency came out negative: received before they were
    /// sent, by the clocks' account. Never clamped, never dropped.
    pub negative: u64,
    /// How negative (magnitudes).
    pub negative_ms: Option<Percentiles>,
    /// Events without a readable send time.
    pub no_send_time: u64,
    /// What the figure rests on, in words.
    pub rests_on: String,
    /// Largest wall-clock offset of an agent to the coordinator, as
    /// measured (ms; either sign, the largest magnitude).
    pub agent_wall_offset_ms: Option<f64>,
    /// How well those offsets are known: the largest half probe round trip.
    pub agent_wall_uncertainty_ms: Option<f64>,
}

/// The spread, per event id, from the first subscriber receiving it to the
/// last, across the fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fanout {
    /// Event ids received by more than one subscriber.
    pub ids: u64,
    pub spread_p50_ms: Option<f64>,
    pub spread_max_ms: Option<f64>,
    /// Events that could not be tracked (too many ids).
    pub untracked: u64,
    /// Per id, the largest fan-outs first, at most [`MAX_FANOUT_ROWS`].
    pub rows: Vec<FanoutRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FanoutRow {
    pub id: String,
    pub subscribers: u64,
    /// First and last receipt, seconds after the common start.
    pub first_s: f64,
    pub last_s: f64,
    pub spread_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenStreams {
    /// Seconds from the common start to the interval's start.
    pub t: f64,
    /// Open at the end of the second.
    pub open: u64,
    /// Upper bound of streams open at once during the second.
    pub max_open: u64,
}

/// Each agent's wall-clock offset to the coordinator and its uncertainty
/// (ns): its monotonic offset, measured by the clock probes, carried over
/// to wall clocks by the pairs (wall, monotonic) both sides read.
pub fn wall_offsets(result: &RunResult) -> Vec<(i64, u64)> {
    result
        .agents
        .iter()
        .filter(|a| a.hello.wall_minus_mono_ns != 0)
        .filter_map(|a| {
            let (rtt, offset) = a.clock?;
            // agent wall - coordinator wall at one instant
            //   = (mono offset) + (agent wall - agent mono)
            //     - (coordinator wall - coordinator mono)
            let wall = i128::from(offset) + i128::from(a.hello.wall_minus_mono_ns)
                - i128::from(result.wall_minus_mono_ns);
            Some((i64::try_from(wall).unwrap_or(i64::MAX), rtt / 2))
        })
        .collect()
}

fn counts(h: &Histogram<u64>) -> Option<Counts> {
    (!h.is_empty()).then(|| Counts {
        min: h.min(),
        p50: h.value_at_quantile(0.5),
        max: h.max(),
        count: h.len(),
    })
}

/// The section for one scenario's merged figures.
pub fn report(m: &SseMerged, send_time: &str, result: &RunResult, interval_s: f64) -> SseReport {
    let offsets = wall_offsets(result);
    let agent_wall_offset_ms = offsets
        .iter()
        .map(|&(o, _)| o)
        .max_by_key(|o| o.unsigned_abs())
        .map(|o| o as f64 / 1e6);
    let agent_wall_uncertainty_ms = offsets
        .iter()
        .map(|&(_, u)| u)
        .max()
        .map(|u| u as f64 / 1e6);
    let rests_on = if send_time == "none" {
        "no send time configured: no delivery latency".to_owned()
    } else {
        let measured = match (agent_wall_offset_ms, agent_wall_uncertainty_ms) {
            (Some(o), Some(u)) => format!(
                "the agents' wall clocks, measured against the coordinator's to within {o:+.3} ms (±{u:.3} ms)"
            ),
            _ => "the agents' wall clocks (their offsets to the coordinator were not measured)".to_owned(),
        };
        format!(
            "agent wall clock at receipt minus the send time in {send_time}: {measured}; the target's clock is assumed to agree with them (not measured)"
        )
    };
    let mut spreads = new_histogram();
    let mut rows: Vec<FanoutRow> = m
        .fanned_out()
        .map(|(id, r)| {
            let spread_us = (r.last_ns - r.first_ns.min(r.last_ns)) / 1000;
            if let Err(e) = spreads.record(spread_us) {
                tracing::error!("fan-out spread {spread_us} µs not recorded: {e}");
            }
            FanoutRow {
                id: id.clone(),
                subscribers: r.subscribers,
                first_s: r.first_ns as f64 / 1e9,
                last_s: r.last_ns as f64 / 1e9,
                spread_ms: spread_us as f64 / 1000.0,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.subscribers
            .cmp(&a.subscribers)
            .then(a.first_s.total_cmp(&b.first_s))
    });
    rows.truncate(MAX_FANOUT_ROWS);
    // Rows in time order read as a timeline of broadcasts.
    rows.sort_by(|a, b| a.first_s.total_cmp(&b.first_s));
    SseReport {
        opened: m.opened,
        first_event_ms: percentiles(&m.first_event),
        events: m.events,
        events_per_subscriber: counts(&m.events_per_subscriber),
        gap_ms: percentiles(&m.gap),
        ended_by_server: m.ended_by_server,
        reconnects: m.reconnects,
        resumed: m.resumed,
        duplicates: m.duplicates,
        comments: m.comments,
        stream_errors: m.stream_errors.clone(),
        refused: m.refused.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        delivery: Delivery {
            send_time: send_time.to_owned(),
            latency_ms: percentiles(&m.latency),
            negative: m.negative,
            negative_ms: percentiles(&m.negative_latency),
            no_send_time: m.no_send_time,
            rests_on,
            agent_wall_offset_ms,
            agent_wall_uncertainty_ms,
        },
        fanout: Fanout {
            ids: spreads.len(),
            spread_p50_ms: (!spreads.is_empty())
                .then(|| spreads.value_at_quantile(0.5) as f64 / 1000.0),
            spread_max_ms: (!spreads.is_empty()).then(|| spreads.max() as f64 / 1000.0),
            untracked: m.fanout_untracked,
            rows,
        },
        open_streams: m
            .open_streams
            .iter()
            .map(|(&i, &(open, max_open))| OpenStreams {
                t: i as f64 * interval_s,
                open,
                max_open,
            })
            .collect(),
    }
}
