//! Builds the subscription section of a scenario's report
//! ([`SseReport`]): what the subscribers got, how late events arrived, and
//! what that lateness rests on.
//!
//! Delivery latency is only as good as the agreement of two clocks, the
//! agent's at receipt and the target's at sending, so the section states
//! what is measured of it (each agent's wall-clock offset to the
//! coordinator, from the probes that place the common start) and what is
//! assumed (the target's clock agrees with the agents').

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{new_histogram, percentiles};

use crate::fleet::RunResult;
use crate::report_model::SseReport;
use crate::report_model::{Counts, Delivery, Fanout, FanoutRow, OpenStreams};
use crate::sse::SseMerged;
use crate::units;

/// Most fan-out rows (event ids) the report lists, so a broadcast-heavy
/// run keeps a readable report; the spread figures cover every id.
const MAX_FANOUT_ROWS: usize = 100;

/// Each agent's wall-clock offset to the coordinator and its uncertainty
/// (ns): its monotonic offset, measured by the clock probes, carried over
/// to wall clocks by the pairs (wall, monotonic) both sides read.
pub(crate) fn wall_offsets(result: &RunResult) -> Vec<(i64, u64)> {
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
pub(crate) fn report(
    m: &SseMerged,
    send_time: &str,
    result: &RunResult,
    interval_s: f64,
) -> SseReport {
    let offsets = wall_offsets(result);
    let agent_wall_offset_ms = offsets
        .iter()
        .map(|&(o, _)| o)
        .max_by_key(|o| o.unsigned_abs())
        .map(units::ns_to_ms);
    let agent_wall_uncertainty_ms = offsets.iter().map(|&(_, u)| u).max().map(units::ns_to_ms);
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
            let spread_us = units::ns_to_us(r.last_ns - r.first_ns.min(r.last_ns));
            if let Err(e) = spreads.record(spread_us) {
                tracing::error!("fan-out spread {spread_us} µs not recorded: {e}");
            }
            FanoutRow {
                id: id.clone(),
                subscribers: r.subscribers,
                first_s: units::ns_to_s(r.first_ns),
                last_s: units::ns_to_s(r.last_ns),
                spread_ms: units::us_to_ms(spread_us),
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
        opened: m.figures.opened,
        first_event_ms: percentiles(&m.figures.first_event),
        events: m.figures.events,
        events_per_subscriber: counts(&m.figures.events_per_subscriber),
        gap_ms: percentiles(&m.figures.gap),
        ended_by_server: m.figures.ended_by_server,
        reconnects: m.figures.reconnects,
        resumed: m.figures.resumed,
        duplicates: m.figures.duplicates,
        comments: m.figures.comments,
        stream_errors: m.figures.stream_errors.by_word(),
        refused: m.figures.refused.by_word(),
        delivery: Delivery {
            send_time: send_time.to_owned(),
            latency_ms: percentiles(&m.figures.latency),
            negative: m.figures.negative,
            negative_ms: percentiles(&m.figures.negative_latency),
            no_send_time: m.figures.no_send_time,
            rests_on,
            agent_wall_offset_ms,
            agent_wall_uncertainty_ms,
        },
        fanout: Fanout {
            ids: spreads.len(),
            spread_p50_ms: (!spreads.is_empty())
                .then(|| units::us_to_ms(spreads.value_at_quantile(0.5))),
            spread_max_ms: (!spreads.is_empty()).then(|| units::us_to_ms(spreads.max())),
            untracked: m.figures.fanout_untracked,
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
