//! The human summary printed at the end of `run`: verdicts first, then
//! (with `--repeat`) the medians and each run, then intended / sent /
//! unsent, outcomes, percentiles, arrivals against completions per second,
//! agents and thresholds. Its exact shape is pinned by a snapshot test
//! (tests/text_report.rs), so a change to it is a deliberate one.

use std::io::Write;

use loadfleet_proto::vocab::{GrpcStatus, VerdictLevel};

use super::format::{ms, protocol_line, threshold_actual};
use super::repeats::{Unit, COLUMNS};
use crate::report_model::{Grpc, IntervalReport, Percentiles, Report, Scenario};
use crate::report_model::{HeadlinePercentiles, Repeats};

fn percentile_row(
    out: &mut impl Write,
    label: &str,
    p: &Option<Percentiles>,
) -> std::io::Result<()> {
    match p {
        Some(p) => writeln!(
            out,
            "  {label:<14} p50 {:>9}  p90 {:>9}  p95 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}  mean {:>9}",
            ms(p.p50),
            ms(p.p90),
            ms(p.p95),
            ms(p.p99),
            ms(p.p999),
            ms(p.max),
            ms(p.mean)
        ),
        None => writeln!(out, "  {label:<14} (nothing completed)"),
    }
}

/// `OK: 950 (95.00%)  UNAVAILABLE: 50 (5.00%)`, statuses in code order.
fn grpc_line(g: &Grpc) -> String {
    GrpcStatus::ALL
        .iter()
        .filter_map(|s| {
            let n = g.status.get(s.as_str())?;
            let rate = g.rate.get(s.as_str()).copied().unwrap_or(0.0);
            Some(format!("{s}: {n} ({:.2}%)", 100.0 * rate))
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// The human summary: verdicts first, then intended/sent/unsent, outcomes,
/// the full percentile set, throughput and the agents.
pub fn write_text(out: &mut impl Write, r: &Report, color: bool) -> std::io::Result<()> {
    let paint = |level: VerdictLevel, s: &str| -> String {
        if !color {
            return s.to_string();
        }
        let code = match level {
            VerdictLevel::Error => "1;31",
            VerdictLevel::Warn => "33",
            VerdictLevel::Info => "36",
        };
        format!("\x1b[{code}m{s}\x1b[0m")
    };
    writeln!(out)?;
    writeln!(
        out,
        "loadfleet report — {} — {:.1}s on {}{} agent(s){}",
        r.run.target,
        r.run.duration_s,
        r.run.agents,
        if r.run.agents_expected > r.run.agents {
            format!(" of {}", r.run.agents_expected)
        } else {
            String::new()
        },
        if r.partial { " — PARTIAL" } else { "" }
    )?;
    for s in &r.scenarios {
        // The shape as the plan gave it (`report::shape`), so a ramp or a
        // population is read as such, not as a mean rate.
        let load = if s.load.is_empty() {
            s.model.clone()
        } else {
            format!("{}, {}", s.model, s.load)
        };
        writeln!(
            out,
            "  scenario {:<16} {load}; {:.1}s from t={:.1}s, window {:.1}s..{:.1}s",
            s.name, s.duration_s, s.start_s, s.window.start_s, s.window.end_s
        )?;
    }
    if let Some(line) = protocol_line(r) {
        writeln!(out, "  {line}")?;
    }
    for v in &r.verdicts {
        writeln!(
            out,
            "{}",
            paint(
                v.level,
                &format!(
                    "  [{}] {}: {}",
                    v.level.as_str().to_uppercase(),
                    v.code,
                    v.message
                )
            )
        )?;
    }
    // With --repeat the medians lead, then each run; the figures after
    // them are one run's, and say so.
    if let Some(rep) = &r.repeats {
        write_medians(out, rep)?;
        write_repeats(out, rep)?;
        writeln!(out)?;
        writeln!(
            out,
            "  run {} of {} in full (the one with the median p99):",
            rep.representative + 1,
            rep.count
        )?;
    }
    let t = &r.totals;
    writeln!(out)?;
    writeln!(
        out,
        "  intended {}   sent {}   unsent {}{}",
        t.intended,
        t.sent,
        super::format::unsent(&t.unsent),
        if t.unreported > 0 {
            format!(
                "   unreported {} (lost agents' arrivals of unknown fate: sent or not, nobody can say)",
                t.unreported
            )
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "  completed {}   in window {}   in flight at end {}   throughput {:.1} req/s ({:.1} req/s ok) over the {:.1}s window",
        t.completed,
        t.completed_in_window,
        t.in_flight_at_end,
        t.throughput_rps,
        t.throughput_ok_rps,
        r.run.window_s
    )?;
    let status: Vec<String> = t.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    writeln!(
        out,
        "  status    {}",
        if status.is_empty() {
            "-".into()
        } else {
            status.join("  ")
        }
    )?;
    let errors: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    writeln!(
        out,
        "  errors    {}",
        if errors.is_empty() {
            "-".into()
        } else {
            errors.join("  ")
        }
    )?;
    if let Some(g) = &t.grpc {
        writeln!(out, "  grpc      {}", grpc_line(g))?;
    }
    writeln!(
        out,
        "  failures  {} ({:.2}% of completed: errors, 4xx and 5xx{})",
        t.failures,
        100.0 * t.failures as f64 / t.completed.max(1) as f64,
        if t.grpc.is_some() {
            ", gRPC other than OK"
        } else {
            ""
        }
    )?;
    writeln!(out)?;
    if t.latency_lower_bound {
        writeln!(
            out,
            "  latency from the intended send time — LOWER BOUNDS: {} requests without an outcome are left out:",
            t.in_flight_at_end
        )?;
    } else {
        writeln!(out, "  latency from the intended send time:")?;
    }
    percentile_row(out, "all", &t.latency_ms)?;
    for (class, p) in &t.latency_by_class_ms {
        percentile_row(out, class, &Some(p.clone()))?;
    }
    percentile_row(out, "service time", &t.service_time_ms)?;
    let p = &t.phases;
    for (name, phase) in [
        (" connect", &p.connect_ms),
        (" tls handshake", &p.tls_handshake_ms),
        (" first byte", &p.ttfb_ms),
        (" body", &p.body_ms),
    ] {
        if phase.is_some() {
            percentile_row(out, name, phase)?;
        }
    }
    if t.pool_wait_ms.is_some() {
        percentile_row(out, "pool wait", &t.pool_wait_ms)?;
    }
    if p.connections_opened + p.connections_reused > 0 {
        // The protocol line counts every connection established; this one
        // the requests that were first on one. Those opened ahead of the
        // start that no request needed are the difference.
        let established: u64 = r.run.protocol.connections.values().sum();
        let unused = established.saturating_sub(p.connections_opened);
        writeln!(
            out,
            "  connections    {} opened, {} requests on a reused one{}",
            p.connections_opened,
            p.connections_reused,
            if unused > 0 {
                format!("; {unused} more opened ahead of the start and never used")
            } else {
                String::new()
            }
        )?;
    }
    if t.warmup.seconds > 0.0 {
        percentile_row(out, "warm-up", &t.warmup.latency_ms)?;
    }
    if r.scenarios.len() > 1 {
        writeln!(out)?;
        writeln!(out, "  per scenario:")?;
        for s in &r.scenarios {
            let t = &s.totals;
            writeln!(
                out,
                "  {:<16} {:<6} intended {} sent {} unsent {}{} completed {} in flight at end {} failures {} throughput {:.1} req/s ({:.1} ok)",
                s.name,
                s.model,
                t.intended,
                t.sent,
                t.unsent.total,
                super::format::unreported(t.unreported),
                t.completed,
                t.in_flight_at_end,
                t.failures,
                t.throughput_rps,
                t.throughput_ok_rps
            )?;
            percentile_row(out, "", &t.latency_ms)?;
            write_requests(out, s)?;
        }
    } else if let Some(s) = r.scenarios.first() {
        write_requests(out, s)?;
    }
    for s in &r.scenarios {
        if let Some(sse) = &s.sse {
            write_sse(out, &s.name, &s.totals, sse)?;
        }
        if let Some(flows) = &s.flows {
            super::text_flows::write(out, s, flows)?;
        }
    }
    write_per_second(out, &r.intervals)?;
    writeln!(out)?;
    writeln!(out, "  agents:")?;
    for a in &r.agents {
        let lag = a.lag_ms.as_ref().map_or("-".into(), |l| {
            format!("p50 {} p99 {} max {}", ms(l.p50), ms(l.p99), ms(l.max))
        });
        // Only when it happened: a pool that held requests back.
        let pool = if a.pool_saturated_share > 0.0 {
            format!(" pool busy {:.0}%", a.pool_saturated_share * 100.0)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {:<18} {:<9} intended {:>7} sent {:>7} unsent {:>6} cpu {:>5.1}% lag {}{pool}{}",
            a.id,
            a.status.as_str(),
            a.intended,
            a.sent,
            a.unsent,
            a.cpu * 100.0,
            lag,
            super::format::unreported(a.unreported)
        )?;
    }
    for a in &r.late_agents {
        writeln!(
            out,
            "  {:<18} {:<9} joined late, no share of this run",
            a.id, a.outcome
        )?;
    }
    if !r.thresholds.is_empty() {
        writeln!(out)?;
        writeln!(out, "  thresholds:")?;
        for c in &r.thresholds {
            let actual = threshold_actual(c);
            let mark = if c.passed {
                paint(VerdictLevel::Info, "pass")
            } else {
                paint(VerdictLevel::Error, "FAIL")
            };
            writeln!(out, "  {mark} {} (actual {actual})", c.threshold)?;
        }
    }
    Ok(())
}

/// A scenario of several requests: one row per request of its mix, so a
/// fast GET and a failing POST are not read as one average. Nothing for a
/// scenario of one request, whose figures are the scenario's.
fn write_requests(out: &mut impl Write, s: &Scenario) -> std::io::Result<()> {
    if s.requests.len() <= 1 {
        return Ok(());
    }
    let width = s
        .requests
        .iter()
        .map(|q| q.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 40);
    writeln!(out)?;
    writeln!(out, "  requests of {}:", s.name)?;
    writeln!(
        out,
        "  {:<width$} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}  status",
        "name", "completed", "failures", "req/s", "p50", "p99", "max"
    )?;
    for q in &s.requests {
        let (p50, p99, max) = q
            .latency_ms
            .as_ref()
            .map_or(("-".into(), "-".into(), "-".into()), |p| {
                (ms(p.p50), ms(p.p99), ms(p.max))
            });
        let outcomes: Vec<String> = q
            .status
            .iter()
            .chain(&q.errors)
            .chain(&q.grpc_status)
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        writeln!(
            out,
            "  {:<width$} {:>9} {:>9} {:>11.1} {p50:>9} {p99:>9} {max:>9}  {}",
            q.name,
            q.completed,
            q.failures,
            q.throughput_rps,
            if outcomes.is_empty() {
                "-".into()
            } else {
                outcomes.join("  ")
            }
        )?;
    }
    Ok(())
}

/// A subscription scenario: subscribers, events, delivery latency with
/// what it rests on, fan-out.
fn write_sse(
    out: &mut impl Write,
    name: &str,
    t: &crate::report_model::Totals,
    s: &crate::report_model::SseReport,
) -> std::io::Result<()> {
    let list = |m: &std::collections::BTreeMap<String, u64>| -> String {
        if m.is_empty() {
            "-".into()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("  ")
        }
    };
    writeln!(out)?;
    writeln!(out, "  subscriptions of {name}:")?;
    writeln!(
        out,
        "  subscribers intended {}   opened {}   unsent {}   not opened {}",
        t.intended,
        s.opened,
        super::format::unsent(&t.unsent),
        t.sent.saturating_sub(s.opened)
    )?;
    percentile_row(out, "to subscribe", &t.latency_ms)?;
    percentile_row(out, "to 1st event", &s.first_event_ms)?;
    let per = s.events_per_subscriber.as_ref().map_or("-".into(), |c| {
        format!("min {} p50 {} max {}", c.min, c.p50, c.max)
    });
    writeln!(
        out,
        "  events {}   per subscriber {per}   duplicates {}   keep-alives {}",
        s.events, s.duplicates, s.comments
    )?;
    percentile_row(out, "event gap", &s.gap_ms)?;
    writeln!(
        out,
        "  ended by server {}   reconnects {} ({} with Last-Event-ID)   stream errors {}   refused {}",
        s.ended_by_server,
        s.reconnects,
        s.resumed,
        list(&s.stream_errors),
        list(&s.refused)
    )?;
    let d = &s.delivery;
    writeln!(out, "  delivery latency (send time from {}):", d.send_time)?;
    percentile_row(out, "delivery", &d.latency_ms)?;
    if d.negative > 0 {
        percentile_row(out, &format!("NEGATIVE {}", d.negative), &d.negative_ms)?;
    }
    if d.no_send_time > 0 {
        writeln!(
            out,
            "  {} events carried no readable send time",
            d.no_send_time
        )?;
    }
    writeln!(out, "  rests on: {}", d.rests_on)?;
    let f = &s.fanout;
    if f.ids > 0 {
        writeln!(
            out,
            "  fan-out: {} event ids reached several subscribers; spread first to last receipt p50 {} max {}",
            f.ids,
            f.spread_p50_ms.map_or("-".into(), ms),
            f.spread_max_ms.map_or("-".into(), ms),
        )?;
        for row in f.rows.iter().take(10) {
            writeln!(
                out,
                "    id {:<12} {:>7} subscribers  first t={:.3}s  spread {}",
                row.id,
                row.subscribers,
                row.first_s,
                ms(row.spread_ms)
            )?;
        }
    }
    Ok(())
}

/// The medians of the headline figures over the runs, labelled as such:
/// what a repeated run leads with.
fn write_medians(out: &mut impl Write, rep: &Repeats) -> std::io::Result<()> {
    let m = &rep.median;
    let n = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
    let rate = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    writeln!(out)?;
    writeln!(out, "  medians of {} runs:", rep.count)?;
    writeln!(
        out,
        "  intended {}   sent {}   unsent {}",
        n(m.intended),
        n(m.sent),
        n(m.unsent.as_ref().and_then(|u| u.total))
    )?;
    writeln!(
        out,
        "  completed {}   in window {}   in flight at end {}   failures {}   throughput {} req/s ({} req/s ok)",
        n(m.completed),
        n(m.completed_in_window),
        n(m.in_flight_at_end),
        n(m.failures),
        rate(m.throughput_rps),
        rate(m.throughput_ok_rps)
    )?;
    let quantiles = |h: &Option<_>| h.as_ref().and_then(HeadlinePercentiles::as_percentiles);
    percentile_row(out, "latency", &quantiles(&m.latency_ms))?;
    percentile_row(out, "service time", &quantiles(&m.service_time_ms))
}

/// Columns of the per-second table; a longer run is shown in spans of
/// whole seconds, so the table keeps to a terminal's width.
const SECOND_COLUMNS: usize = 20;

/// Arrivals against completions, second by second, with the gap and what
/// was in flight: a target that falls behind shows as a gap that never
/// closes and an in-flight count that climbs.
fn write_per_second(out: &mut impl Write, intervals: &[IntervalReport]) -> std::io::Result<()> {
    if intervals.is_empty() {
        return Ok(());
    }
    let span = intervals.len().div_ceil(SECOND_COLUMNS);
    let spans: Vec<&[IntervalReport]> = intervals.chunks(span).collect();
    // Per second on average over a span; in flight at its end.
    let per_s = |c: &[IntervalReport], f: fn(&IntervalReport) -> u64| {
        c.iter().map(f).sum::<u64>() as f64 / c.len() as f64
    };
    let rows: [(&str, Vec<String>); 5] = [
        (
            "t (s)",
            spans.iter().map(|c| format!("{:.0}", c[0].t)).collect(),
        ),
        (
            "arrivals/s",
            spans
                .iter()
                .map(|c| format!("{:.0}", per_s(c, |i| i.intended)))
                .collect(),
        ),
        (
            "completed/s",
            spans
                .iter()
                .map(|c| format!("{:.0}", per_s(c, |i| i.completed)))
                .collect(),
        ),
        (
            "gap/s",
            spans
                .iter()
                .map(|c| {
                    format!(
                        "{:+.0}",
                        per_s(c, |i| i.intended) - per_s(c, |i| i.completed)
                    )
                })
                .collect(),
        ),
        (
            "in flight",
            spans
                .iter()
                .map(|c| c.last().map_or(0, |i| i.in_flight).to_string())
                .collect(),
        ),
    ];
    let width = rows
        .iter()
        .flat_map(|(_, cells)| cells.iter().map(String::len))
        .max()
        .unwrap_or(1)
        + 1;
    writeln!(out)?;
    writeln!(
        out,
        "  arrivals vs completions, per second{} (gap = arrivals − completions; in flight at the end):",
        if span > 1 {
            format!(", each column {span} s on average")
        } else {
            String::new()
        }
    )?;
    for (label, cells) in rows {
        let mut line = format!("  {label:<12}");
        for c in cells {
            line.push_str(&format!("{c:>width$}"));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The runs side by side, then their median, min and max.
fn write_repeats(out: &mut impl Write, rep: &Repeats) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "  each of the {} runs:", rep.count)?;
    let mut head = format!("  {:<8}", "");
    for (name, _, _) in COLUMNS {
        head.push_str(&format!(" {name:>10}"));
    }
    writeln!(out, "{head}")?;
    for (label, values) in rep.table() {
        let mut line = format!("  {label:<8}");
        for ((_, _, unit), v) in COLUMNS.iter().zip(values) {
            let cell = match (v, unit) {
                (Some(x), Unit::Millis) => ms(x),
                (Some(x), Unit::PerSecond) => format!("{x:.1}"),
                (Some(x), Unit::Count) => format!("{x:.0}"),
                (None, _) => "-".into(),
            };
            line.push_str(&format!(" {cell:>10}"));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
