//! The headline figures and the latency tables: the totals, then each
//! subscription scenario's own figures, one percentile row per
//! distribution.

use std::collections::BTreeMap;

use maud::{html, Markup};

use loadfleet_proto::vocab::UnsentReason;

use crate::report::format::{count, ms, num, secs, share};
use crate::report_model::{Percentiles, Report, Totals};

pub(super) fn headline(r: &Report) -> Markup {
    let t = &r.totals;
    let p = &t.phases;
    let phases = [
        (
            "connect",
            "TCP connect, requests that opened their connection",
            &p.connect_ms,
        ),
        (
            "TLS handshake",
            "requests that opened a TLS connection",
            &p.tls_handshake_ms,
        ),
        (
            "first byte",
            "from going on the wire to the response headers",
            &p.ttfb_ms,
        ),
        (
            "body",
            "from the headers to the end of the body",
            &p.body_ms,
        ),
    ];
    html! {
        // With --repeat the medians came first: this is one run's.
        @if let Some(rep) = &r.repeats {
            h2 { "Run " (rep.representative + 1) " of " (rep.count) " in full (the one with the median p99)" }
        } @else {
            h2 { "Headline" }
        }
        table class="headline" {
            tr {
                th { "intended" } th { "sent" } th { "unsent" }
                @if t.unreported > 0 { th { "unreported" } }
                th { "completed" }
                th { "completed in window" } th { "in flight at end" } th { "failures" }
                th { "throughput" }
            }
            tr {
                td { (count(t.intended)) }
                td { (count(t.sent)) }
                td class=[(t.unsent.total > 0).then_some("unsent")] {
                    (count(t.unsent.total)) " (" (num(share(t.unsent.total, t.intended) * 100.0, 1)) "%)"
                    span class="sub" { (unsent_reasons(t)) }
                }
                // Only after a loss: lost agents' arrivals nobody can say
                // were sent or not (intended = sent + unsent + unreported).
                @if t.unreported > 0 {
                    td class="unsent" {
                        (count(t.unreported)) " (" (num(share(t.unreported, t.intended) * 100.0, 1)) "%)"
                        span class="sub" { "lost agents' arrivals of unknown fate: sent or not, nobody can say" }
                    }
                }
                td { (count(t.completed)) }
                td { (count(t.completed_in_window)) }
                td class=[(t.in_flight_at_end > 0).then_some("unsent")] {
                    (count(t.in_flight_at_end)) " ("
                    (num(share(t.in_flight_at_end, t.sent) * 100.0, 1)) "% of sent)"
                }
                td {
                    (count(t.failures)) " (" (num(share(t.failures, t.completed) * 100.0, 1)) "%)"
                    span class="sub" { "errors, 4xx and 5xx" }
                }
                td {
                    (num(t.throughput_rps, 1)) " req/s"
                    span class="sub" {
                        (num(t.throughput_ok_rps, 1)) " req/s ok (2xx), over the "
                        (secs(r.run.window_s)) " s window"
                    }
                }
            }
        }
        @if t.latency_lower_bound {
            p class="lowerbound" {
                b { "Lower bounds:" } " " (count(t.in_flight_at_end))
                " requests still in flight when the drain ended are left out of every figure below; each took at least as long as the drain."
            }
        }
        h3 {
            "Latency and service time"
            @if t.latency_lower_bound { " (lower bounds)" }
        }
        table class="latency" {
            (percentile_head())
            (percentile_row("latency", "from the intended send time", t.latency_ms.as_ref()))
            (percentile_row("service time", "from the actual send time", t.service_time_ms.as_ref()))
            @for (name, note, phase) in phases {
                @if phase.is_some() {
                    (percentile_row(name, note, phase.as_ref()))
                }
            }
            @for (class, p) in &t.latency_by_class_ms {
                (percentile_row(&format!("latency, {class}"), "", Some(p)))
            }
            @if t.pool_wait_ms.is_some() {
                (percentile_row(
                    "pool wait",
                    "for one of the agent's own connections, requests that had to",
                    t.pool_wait_ms.as_ref(),
                ))
            }
            @if t.warmup.seconds > 0.0 {
                (percentile_row(
                    "warm-up latency",
                    &format!(
                        "first {} s, reported apart ({} completed)",
                        secs(t.warmup.seconds),
                        count(t.warmup.completed)
                    ),
                    t.warmup.latency_ms.as_ref(),
                ))
            }
        }
        @if p.connections_opened + p.connections_reused > 0 {
            p {
                "Connections: " (count(p.connections_opened)) " opened, "
                (count(p.connections_reused)) " requests on a reused one."
            }
        }
    }
}

/// The unsent requests by reason, as plain text.
fn unsent_reasons(t: &Totals) -> String {
    let mut parts = vec![
        format!(
            "{} {}",
            UnsentReason::ConcurrencyLimit,
            count(t.unsent.concurrency_limit)
        ),
        format!("{} {}", UnsentReason::Late, count(t.unsent.late)),
    ];
    for (reason, n) in &t.unsent.other {
        parts.push(format!("{reason} {}", count(*n)));
    }
    parts.join(" · ")
}

fn percentile_head() -> Markup {
    html! {
        tr {
            th class="l" {} th { "count" }
            th { "p50" } th { "p90" } th { "p95" } th { "p99" } th { "p99.9" } th { "max" } th { "mean" }
        }
    }
}

fn percentile_row(label: &str, note: &str, p: Option<&Percentiles>) -> Markup {
    html! {
        tr {
            th class="l" {
                (label)
                @if !note.is_empty() { span class="sub" { (note) } }
            }
            @match p {
                Some(p) => {
                    td { (count(p.count)) }
                    @for v in [p.p50, p.p90, p.p95, p.p99, p.p999, p.max, p.mean] {
                        td { (ms(v)) }
                    }
                }
                None => { td colspan="8" class="none" { "nothing completed" } }
            }
        }
    }
}

/// Subscription scenarios: subscribers, events, delivery latency with what
/// it rests on, and the fan-out per event id.
pub(super) fn subscriptions(r: &Report) -> Markup {
    let list = |m: &BTreeMap<String, u64>| -> String {
        if m.is_empty() {
            "–".into()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} {}", count(*v)))
                .collect::<Vec<_>>()
                .join(" · ")
        }
    };
    html! {
        @for s in &r.scenarios {
            @if let Some(sse) = &s.sse {
                @let t = &s.totals;
                @let d = &sse.delivery;
                @let f = &sse.fanout;
                @let per = sse.events_per_subscriber.as_ref().map_or("–".into(), |c| {
                    format!("{} / {} / {}", count(c.min), count(c.p50), count(c.max))
                });
                @let rows = [
                    ("subscribers intended", count(t.intended)),
                    ("opened", count(sse.opened)),
                    ("unsent", format!("{} ({})", count(t.unsent.total), unsent_reasons(t))),
                    ("events", count(sse.events)),
                    ("events per subscriber (min / p50 / max)", per),
                    ("ended by the server", count(sse.ended_by_server)),
                    (
                        "reconnects (with Last-Event-ID)",
                        format!("{} ({})", count(sse.reconnects), count(sse.resumed)),
                    ),
                    ("duplicates", count(sse.duplicates)),
                    ("stream errors", list(&sse.stream_errors)),
                    ("refused reconnects", list(&sse.refused)),
                ];
                h2 { "Subscriptions: " (s.name) }
                table {
                    @for (label, value) in rows {
                        tr { th class="l" { (label) } td { (value) } }
                    }
                }
                table class="latency" {
                    (percentile_head())
                    @for (label, note, p) in [
                        ("to subscribe", "intended instant to response headers", &t.latency_ms),
                        ("to first event", "intended instant to the first event", &sse.first_event_ms),
                        ("event gap", "between events of one stream", &sse.gap_ms),
                    ] {
                        (percentile_row(label, note, p.as_ref()))
                    }
                    (percentile_row(
                        "delivery",
                        &format!("send time from {}", d.send_time),
                        d.latency_ms.as_ref(),
                    ))
                    @if d.negative > 0 {
                        (percentile_row(
                            "NEGATIVE delivery",
                            "how early, by the clocks' account",
                            d.negative_ms.as_ref(),
                        ))
                    }
                }
                p { "Delivery latency rests on " (d.rests_on) "." }
                @if f.ids > 0 {
                    h3 { "Fan-out" }
                    p {
                        (count(f.ids)) " event ids reached several subscribers; first to last receipt: p50 "
                        (f.spread_p50_ms.map_or("–".into(), ms)) ", max "
                        (f.spread_max_ms.map_or("–".into(), ms)) "."
                    }
                    table {
                        tr {
                            th class="l" { "id" } th { "subscribers" } th { "first (s)" }
                            th { "last (s)" } th { "spread" }
                        }
                        @for row in &f.rows {
                            tr {
                                th class="l" { (row.id) }
                                td { (count(row.subscribers)) }
                                td { (format!("{:.3}", row.first_s)) }
                                td { (format!("{:.3}", row.last_s)) }
                                td { (ms(row.spread_ms)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
