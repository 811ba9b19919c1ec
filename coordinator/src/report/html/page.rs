//! The page around the charts: header, verdicts, the headline figures,
//! repeats, scenarios, outcomes and agents, in the text report's order.

use std::fmt::{self, Write as _};

use super::chart::charts;
use loadfleet_proto::vocab::{AgentStatus, GrpcStatus, OutcomeClass, UnsentReason};

use crate::report::format::{count, esc, fin, ms, num, secs, share, utc};
use crate::report::model::{Lag, Percentiles, Report, Totals};
use crate::report::repeats::{Unit, COLUMNS};

/// Writes the page for `r` to `out`.
pub fn write_html(out: &mut impl std::io::Write, r: &Report) -> std::io::Result<()> {
    out.write_all(render(r)?.as_bytes())
}

/// The page for `r` as a string.
pub fn render(r: &Report) -> std::io::Result<String> {
    let json = serde_json::to_string(r).map_err(std::io::Error::other)?;
    let mut h = String::with_capacity(64 * 1024 + json.len());
    page(&mut h, r, &json).map_err(std::io::Error::other)?;
    Ok(h)
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:0;padding:24px 32px;color:#1d1d1f;background:#fff;line-height:1.4;max-width:1180px}\
h1{font-size:24px;margin:0 0 4px}\
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e3e3e3;padding-bottom:4px}\
h3{font-size:14px;margin:16px 0 4px;color:#444}\
.run{color:#444;margin:0 0 4px}\
.run code{background:#f3f3f3;padding:1px 4px;border-radius:3px}\
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:700;vertical-align:middle}\
.badge.partial{background:#c62828;color:#fff}\
.verdict{border-left:5px solid;padding:6px 10px;margin:6px 0;border-radius:3px}\
.verdict b{margin-right:6px}\
.verdict.error{border-color:#c62828;background:#fdecea;color:#8a1c16}\
.verdict.warn{border-color:#e09b00;background:#fff6e0;color:#6d4a00}\
.verdict.info{border-color:#3b7dd8;background:#eaf1fc;color:#173f80}\
table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}\
th,td{border:1px solid #dcdcdc;padding:4px 8px;text-align:right;font-variant-numeric:tabular-nums}\
th{background:#f5f5f7;font-weight:600}\
th.l,td.l{text-align:left}\
td.unsent{color:#b3261e;font-weight:700}\
p.lowerbound{color:#b3261e}\
.sub{display:block;font-size:11px;color:#666;font-weight:400}\
.none{color:#888;font-style:italic}\
.nodata{color:#888;font-style:italic;border:1px dashed #ccc;padding:12px;margin:4px 0;max-width:760px}\
.pass{color:#1f7a3a;font-weight:700}.fail{color:#b3261e;font-weight:700}\
.lost{color:#b3261e;font-weight:700}\
.barcell{width:260px}\
.bar{height:12px;min-width:1px;border-radius:2px}\
figure{margin:8px 0 16px}\
figcaption{font-weight:600;font-size:14px;margin-bottom:2px}\
svg text{font-family:system-ui,Helvetica,Arial,sans-serif}\
footer{margin-top:32px;color:#888;font-size:12px}";

fn page(h: &mut String, r: &Report, json: &str) -> fmt::Result {
    writeln!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>loadfleet report — {}</title><style>{STYLE}</style></head><body>",
        esc(&r.run.target)
    )?;
    header(h, r)?;
    verdicts(h, r)?;
    headline(h, r)?;
    repeats(h, r)?;
    scenarios(h, r)?;
    subscriptions(h, r)?;
    charts(h, r)?;
    outcomes(h, &r.totals)?;
    agents(h, r)?;
    writeln!(
        h,
        "<footer>{} · written by loadfleet · the full report is embedded below as JSON \
         (<code>script#report</code>)</footer>",
        esc(&r.schema)
    )?;
    // `<` only ever appears inside JSON strings, where \u003c means the same
    // thing; with none left, nothing in the data can close the script.
    writeln!(
        h,
        "<script type=\"application/json\" id=\"report\">{}</script>\n</body></html>",
        json.replace('<', "\\u003c")
    )
}

fn header(h: &mut String, r: &Report) -> fmt::Result {
    writeln!(
        h,
        "<h1>loadfleet report{}</h1>",
        if r.partial {
            " <span class=\"badge partial\" title=\"the run was cut short: figures cover what was measured\">PARTIAL</span>"
        } else {
            ""
        }
    )?;
    let run = &r.run;
    writeln!(
        h,
        "<p class=\"run\">target <code>{}</code> · {} s run, {} s measurement window · {} agent(s){} · started {} · took {} s</p>",
        esc(&run.target),
        secs(run.duration_s),
        secs(run.window_s),
        run.agents,
        if run.local { " (local fleet)" } else { "" },
        utc(run.started_at_unix),
        secs(run.elapsed_s),
    )?;
    if let Some(line) = crate::report::format::protocol_line(r) {
        writeln!(h, "<p class=\"run protocol\">{}</p>", esc(&line))?;
    }
    for s in &r.scenarios {
        let load = match (s.model.as_str(), s.offered_rps) {
            ("open", Some(rps)) => format!(
                "open model, {} req/s offered on average ({})",
                num(rps, 1),
                esc(s.process.as_deref().unwrap_or("uniform"))
            ),
            (model, _) => format!("{} model", esc(model)),
        };
        writeln!(
            h,
            "<p class=\"run\">scenario <b>{}</b>: {load}; {} s from t={} s, warm-up {} s, window {}–{} s</p>",
            esc(&s.name),
            secs(s.duration_s),
            secs(s.start_s),
            secs(s.warmup_s),
            secs(s.window.start_s),
            secs(s.window.end_s),
        )?;
    }
    Ok(())
}

fn verdicts(h: &mut String, r: &Report) -> fmt::Result {
    writeln!(h, "<h2>Verdicts</h2>")?;
    if r.verdicts.is_empty() {
        writeln!(
            h,
            "<p class=\"none\">No verdicts: nothing looked wrong.</p>"
        )?;
    }
    for v in &r.verdicts {
        let level = v.level.as_str();
        writeln!(
            h,
            "<div class=\"verdict {level}\"><b>{} · {}</b>{}</div>",
            esc(&level.to_uppercase()),
            esc(v.code.as_str()),
            esc(&v.message)
        )?;
    }
    if !r.thresholds.is_empty() {
        writeln!(
            h,
            "<h3>Thresholds</h3><table><tr><th class=\"l\">threshold</th><th>actual</th><th>result</th></tr>"
        )?;
        for c in &r.thresholds {
            writeln!(
                h,
                "<tr><td class=\"l\"><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&c.threshold),
                esc(&crate::report::format::threshold_actual(c)),
                if c.passed {
                    "<span class=\"pass\">pass</span>"
                } else {
                    "<span class=\"fail\">FAIL</span>"
                }
            )?;
        }
        writeln!(h, "</table>")?;
    }
    Ok(())
}

fn headline(h: &mut String, r: &Report) -> fmt::Result {
    let t = &r.totals;
    writeln!(h, "<h2>Headline</h2>")?;
    writeln!(
        h,
        "<table class=\"headline\"><tr><th>intended</th><th>sent</th><th>unsent</th><th>completed</th>\
         <th>completed in window</th><th>in flight at end</th><th>failures</th><th>throughput</th></tr>"
    )?;
    let unsent_class = if t.unsent.total > 0 {
        " class=\"unsent\""
    } else {
        ""
    };
    writeln!(
        h,
        "<tr><td>{}</td><td>{}</td><td{unsent_class}>{} ({}%)<span class=\"sub\">{}</span></td>\
         <td>{}</td><td>{}</td><td{}>{} ({}% of sent)</td><td>{} ({}%)<span class=\"sub\">errors, 4xx and 5xx</span></td>\
         <td>{} req/s<span class=\"sub\">{} req/s ok (2xx), over the {} s window</span></td></tr></table>",
        count(t.intended),
        count(t.sent),
        count(t.unsent.total),
        num(share(t.unsent.total, t.intended) * 100.0, 1),
        unsent_reasons(t),
        count(t.completed),
        count(t.completed_in_window),
        if t.in_flight_at_end > 0 {
            " class=\"unsent\""
        } else {
            ""
        },
        count(t.in_flight_at_end),
        num(share(t.in_flight_at_end, t.sent) * 100.0, 1),
        count(t.failures),
        num(share(t.failures, t.completed) * 100.0, 1),
        num(t.throughput_rps, 1),
        num(t.throughput_ok_rps, 1),
        secs(r.run.window_s),
    )?;

    if t.latency_lower_bound {
        writeln!(
            h,
            "<p class=\"lowerbound\"><b>Lower bounds:</b> {} requests still in flight when the drain ended are left out of every figure below; each took at least as long as the drain.</p>",
            count(t.in_flight_at_end)
        )?;
    }
    writeln!(
        h,
        "<h3>Latency and service time{}</h3><table class=\"latency\"><tr><th class=\"l\"></th><th>count</th>\
         <th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th></tr>",
        if t.latency_lower_bound {
            " (lower bounds)"
        } else {
            ""
        }
    )?;
    percentile_row(
        h,
        "latency",
        "from the intended send time",
        t.latency_ms.as_ref(),
    )?;
    percentile_row(
        h,
        "service time",
        "from the actual send time",
        t.service_time_ms.as_ref(),
    )?;
    for (name, note, phase) in [
        (
            "connect",
            "TCP connect, requests that opened their connection",
            &t.phases.connect_ms,
        ),
        (
            "TLS handshake",
            "requests that opened a TLS connection",
            &t.phases.tls_handshake_ms,
        ),
        (
            "first byte",
            "from going on the wire to the response headers",
            &t.phases.ttfb_ms,
        ),
        (
            "body",
            "from the headers to the end of the body",
            &t.phases.body_ms,
        ),
    ] {
        if phase.is_some() {
            percentile_row(h, name, note, phase.as_ref())?;
        }
    }
    for (class, p) in &t.latency_by_class_ms {
        percentile_row(h, &format!("latency, {class}"), "", Some(p))?;
    }
    if t.pool_wait_ms.is_some() {
        percentile_row(
            h,
            "pool wait",
            "for one of the agent's own connections, requests that had to",
            t.pool_wait_ms.as_ref(),
        )?;
    }
    if t.warmup.seconds > 0.0 {
        percentile_row(
            h,
            "warm-up latency",
            &format!(
                "first {} s, reported apart ({} completed)",
                secs(t.warmup.seconds),
                count(t.warmup.completed)
            ),
            t.warmup.latency_ms.as_ref(),
        )?;
    }
    writeln!(h, "</table>")?;
    let p = &t.phases;
    if p.connections_opened + p.connections_reused > 0 {
        writeln!(
            h,
            "<p>Connections: {} opened, {} requests on a reused one.</p>",
            count(p.connections_opened),
            count(p.connections_reused)
        )?;
    }
    Ok(())
}

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
        parts.push(format!("{} {}", esc(reason), count(*n)));
    }
    parts.join(" · ")
}

fn percentile_row(h: &mut String, label: &str, note: &str, p: Option<&Percentiles>) -> fmt::Result {
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("<span class=\"sub\">{}</span>", esc(note))
    };
    match p {
        Some(p) => writeln!(
            h,
            "<tr><th class=\"l\">{}{note}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(label),
            count(p.count),
            ms(p.p50),
            ms(p.p90),
            ms(p.p95),
            ms(p.p99),
            ms(p.p999),
            ms(p.max),
            ms(p.mean)
        ),
        None => writeln!(
            h,
            "<tr><th class=\"l\">{}{note}</th><td colspan=\"8\" class=\"none\">nothing completed</td></tr>",
            esc(label)
        ),
    }
}

/// Subscription scenarios: subscribers, events, delivery latency with what
/// it rests on, and the fan-out per event id.
fn subscriptions(h: &mut String, r: &Report) -> fmt::Result {
    for s in &r.scenarios {
        let Some(sse) = &s.sse else { continue };
        let t = &s.totals;
        writeln!(h, "<h2>Subscriptions: {}</h2>", esc(&s.name))?;
        let per = sse.events_per_subscriber.as_ref().map_or("–".into(), |c| {
            format!("{} / {} / {}", count(c.min), count(c.p50), count(c.max))
        });
        let list = |m: &std::collections::BTreeMap<String, u64>| -> String {
            if m.is_empty() {
                "–".into()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{} {}", esc(k), count(*v)))
                    .collect::<Vec<_>>()
                    .join(" · ")
            }
        };
        let rows = [
            ("subscribers intended", count(t.intended)),
            ("opened", count(sse.opened)),
            (
                "unsent",
                format!("{} ({})", count(t.unsent.total), unsent_reasons(t)),
            ),
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
        writeln!(h, "<table>")?;
        for (label, value) in rows {
            writeln!(h, "<tr><th class=\"l\">{label}</th><td>{value}</td></tr>")?;
        }
        writeln!(h, "</table>")?;
        let d = &sse.delivery;
        writeln!(
            h,
            "<table class=\"latency\"><tr><th class=\"l\"></th><th>count</th>\
             <th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th></tr>"
        )?;
        percentile_row(
            h,
            "to subscribe",
            "intended instant to response headers",
            t.latency_ms.as_ref(),
        )?;
        percentile_row(
            h,
            "to first event",
            "intended instant to the first event",
            sse.first_event_ms.as_ref(),
        )?;
        percentile_row(
            h,
            "event gap",
            "between events of one stream",
            sse.gap_ms.as_ref(),
        )?;
        percentile_row(
            h,
            "delivery",
            &format!("send time from {}", d.send_time),
            d.latency_ms.as_ref(),
        )?;
        if d.negative > 0 {
            percentile_row(
                h,
                "NEGATIVE delivery",
                "how early, by the clocks' account",
                d.negative_ms.as_ref(),
            )?;
        }
        writeln!(
            h,
            "</table><p>Delivery latency rests on {}.</p>",
            esc(&d.rests_on)
        )?;
        let f = &sse.fanout;
        if f.ids > 0 {
            writeln!(
                h,
                "<h3>Fan-out</h3><p>{} event ids reached several subscribers; first to last receipt: p50 {}, max {}.</p>\
                 <table><tr><th class=\"l\">id</th><th>subscribers</th><th>first (s)</th><th>last (s)</th><th>spread</th></tr>",
                count(f.ids),
                f.spread_p50_ms.map_or("–".into(), ms),
                f.spread_max_ms.map_or("–".into(), ms),
            )?;
            for row in &f.rows {
                writeln!(
                    h,
                    "<tr><th class=\"l\">{}</th><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
                    esc(&row.id),
                    count(row.subscribers),
                    row.first_s,
                    row.last_s,
                    ms(row.spread_ms)
                )?;
            }
            writeln!(h, "</table>")?;
        }
    }
    Ok(())
}

/// With --repeat: every run's headline figures, then median, min and max.
fn repeats(h: &mut String, r: &Report) -> fmt::Result {
    let Some(rep) = &r.repeats else {
        return Ok(());
    };
    writeln!(
        h,
        "<h2>Repeats</h2><p>{} runs; the figures above are run {}, the one with the median p99.</p><table><tr><th class=\"l\">run</th>",
        rep.count,
        rep.representative + 1
    )?;
    for (name, _, _) in COLUMNS {
        write!(h, "<th>{}</th>", esc(name))?;
    }
    writeln!(h, "</tr>")?;
    for (label, values) in rep.table() {
        write!(h, "<tr><td class=\"l\">{}</td>", esc(&label))?;
        for ((_, _, unit), v) in COLUMNS.iter().zip(values) {
            let cell = match (v, unit) {
                (Some(x), Unit::Millis) => ms(x),
                (Some(x), Unit::PerSecond) => num(x, 1),
                (Some(x), Unit::Count) => num(x, 0),
                (None, _) => "–".into(),
            };
            write!(h, "<td>{cell}</td>")?;
        }
        writeln!(h, "</tr>")?;
    }
    writeln!(h, "</table>")
}

fn scenarios(h: &mut String, r: &Report) -> fmt::Result {
    if r.scenarios.len() <= 1 {
        return Ok(());
    }
    writeln!(
        h,
        "<h2>Scenarios</h2><table><tr><th class=\"l\">scenario</th><th class=\"l\">model</th><th>window (s)</th>\
         <th>intended</th><th>sent</th><th>unsent</th><th>completed</th><th>in flight at end</th><th>failures</th>\
         <th>throughput (req/s)</th><th>ok (req/s)</th><th>p50</th><th>p99</th></tr>"
    )?;
    for s in &r.scenarios {
        let t = &s.totals;
        let lat =
            |f: fn(&Percentiles) -> f64| t.latency_ms.as_ref().map_or("–".into(), |p| ms(f(p)));
        writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}–{}</td><td>{}</td><td>{}</td>\
             <td{}>{} ({}%)</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            esc(&s.model),
            secs(s.window.start_s),
            secs(s.window.end_s),
            count(t.intended),
            count(t.sent),
            if t.unsent.total > 0 {
                " class=\"unsent\""
            } else {
                ""
            },
            count(t.unsent.total),
            num(share(t.unsent.total, t.intended) * 100.0, 1),
            count(t.completed),
            count(t.in_flight_at_end),
            count(t.failures),
            num(t.throughput_rps, 1),
            num(t.throughput_ok_rps, 1),
            lat(|p| p.p50),
            lat(|p| p.p99),
        )?;
    }
    writeln!(h, "</table>")
}

/// Requests in, with what each status code, error kind and unsent reason
/// amounts to as a share of what was intended.
fn outcomes(h: &mut String, t: &Totals) -> fmt::Result {
    writeln!(h, "<h2>Outcomes: status codes and errors</h2>")?;
    let mut rows: Vec<(String, u64, &str)> = Vec::new();
    for (code, n) in &t.status {
        let color = match code.chars().next() {
            Some('2') => "#43a047",
            Some('3') => "#1c8ca8",
            Some('4') => "#f0a30a",
            Some('5') => "#c62828",
            _ => "#757575",
        };
        rows.push((format!("status {code}"), *n, color));
    }
    // gRPC statuses in code order, coloured by their latency class.
    if let Some(g) = &t.grpc {
        for status in GrpcStatus::ALL {
            if let Some(&n) = g.status.get(status.as_str()) {
                let color = match status.class() {
                    OutcomeClass::GrpcOk => "#43a047",
                    OutcomeClass::GrpcClientError => "#f0a30a",
                    _ => "#c62828",
                };
                rows.push((format!("grpc {status}"), n, color));
            }
        }
    }
    for (kind, n) in &t.errors {
        rows.push((format!("error: {kind}"), *n, "#8a1c6e"));
    }
    for (reason, n) in [
        (
            UnsentReason::ConcurrencyLimit.as_str(),
            t.unsent.concurrency_limit,
        ),
        (UnsentReason::Late.as_str(), t.unsent.late),
    ]
    .into_iter()
    .chain(t.unsent.other.iter().map(|(k, v)| (k.as_str(), *v)))
    {
        if n > 0 {
            rows.push((format!("unsent: {reason}"), n, "#9e9e9e"));
        }
    }
    if t.in_flight_at_end > 0 {
        rows.push(("in flight at end".into(), t.in_flight_at_end, "#c7c7c7"));
    }
    if rows.is_empty() {
        return writeln!(h, "<p class=\"nodata\">no outcomes: nothing was sent</p>");
    }
    let base = if t.intended > 0 {
        t.intended
    } else {
        rows.iter().map(|r| r.1).sum()
    };
    writeln!(
        h,
        "<table class=\"outcomes\"><tr><th class=\"l\">outcome</th><th>count</th>\
         <th>share of intended</th><th class=\"l barcell\"></th></tr>"
    )?;
    for (label, n, color) in rows {
        let pct = share(n, base) * 100.0;
        writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}%</td><td class=\"l barcell\">\
             <div class=\"bar\" style=\"width:{:.1}%;background:{color}\"></div></td></tr>",
            esc(&label),
            count(n),
            num(pct, 1),
            fin(pct).clamp(0.0, 100.0)
        )?;
    }
    writeln!(h, "</table>")
}

fn agents(h: &mut String, r: &Report) -> fmt::Result {
    writeln!(h, "<h2>Agents</h2>")?;
    if r.agents.is_empty() {
        return writeln!(h, "<p class=\"nodata\">no agents took part</p>");
    }
    writeln!(
        h,
        "<table class=\"agents\"><tr><th class=\"l\">id</th><th class=\"l\">host</th><th class=\"l\">source</th>\
         <th class=\"l\">status</th><th>share</th><th>intended</th><th>sent</th><th>unsent</th><th>completed</th>\
         <th>cpu</th><th>lag p50</th><th>lag p99</th><th>lag max</th>\
         <th>pool busy</th><th>in flight at end</th><th>clock ± (ms)</th><th>clock rtt (ms)</th></tr>"
    )?;
    for a in &r.agents {
        let status = match &a.lost_reason {
            Some(why) => format!(
                "<span class=\"lost\">{}</span><span class=\"sub\">{}</span>",
                esc(a.status.as_str()),
                esc(why)
            ),
            None if a.status == AgentStatus::Lost => {
                format!("<span class=\"lost\">{}</span>", esc(a.status.as_str()))
            }
            None => esc(a.status.as_str()),
        };
        let lag = |f: fn(&Lag) -> f64| a.lag_ms.as_ref().map_or("–".into(), |l| ms(f(l)));
        let opt = |v: Option<f64>| v.map_or("–".into(), |v| num(v, 3));
        writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{status}</td>\
             <td>{}%</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{}%<span class=\"sub\">{} of {} CPU(s)</span></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&a.id),
            esc(&a.host),
            esc(a.source.as_deref().unwrap_or("–")),
            num(a.share * 100.0, 1),
            count(a.intended),
            count(a.sent),
            if a.unsent > 0 { " class=\"unsent\"" } else { "" },
            count(a.unsent),
            count(a.completed),
            num(a.cpu * 100.0, 1),
            num(a.cpu_cores, 2),
            a.cpus,
            lag(|l| l.p50),
            lag(|l| l.p99),
            lag(|l| l.max),
            num(a.pool_saturated_share * 100.0, 1),
            a.in_flight_at_end.map_or("–".into(), count),
            opt(a.clock_uncertainty_ms),
            opt(a.clock_rtt_ms),
        )?;
    }
    writeln!(h, "</table>")
}
