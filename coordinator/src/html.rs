//! The HTML report: one self-contained page rendered from the same
//! [`Report`] as the JSON.
//!
//! Nothing is fetched from anywhere: no scripts, fonts, style sheets or
//! images. Charts are inline SVG drawn here, with axes, tick labels and a
//! legend, so the page can be mailed, attached to a ticket or opened years
//! later offline. The page follows the text report's order of importance:
//! verdicts first, then intended / sent / unsent, then everything else.
//!
//! Every string that comes from the run (agent ids, hosts, the target URL,
//! verdict messages, threshold text) is escaped, and every number that ends
//! up in an SVG attribute is checked to be finite, so a strange report can
//! give an odd-looking page but never a broken or injectable one.

use std::fmt::{self, Write as _};

use crate::report::{Percentiles, Report, Totals};

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

// Series colours: one meaning each, and used for chart strokes only (the
// page's own accents below are deliberately different shades), so the
// screenshot test in tests/html.rs can tell a drawn chart from a verdict
// border or an outcome bar.
const C_INTENDED: &str = "#6b6b6b";
const C_SENT: &str = "#2563c9";
const C_COMPLETED: &str = "#1f9a4a";
const C_UNSENT: &str = "#d0342c";
const C_P50: &str = "#2563c9";
const C_P99: &str = "#d0342c";
const C_CURVE: &str = "#7b3fc4";
const C_IN_FLIGHT: &str = "#7b3fc4";
const C_MAX_IN_FLIGHT: &str = "#e07b00";

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
    charts(h, r)?;
    outcomes(h, &r.totals)?;
    agents(h, r)?;
    writeln!(
        h,
        "<footer>{} · written by loadfleet · the full report is embedded below as JSON \
         (<code>script#report</code>)</footer>",
        esc(r.schema)
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
    for s in &r.scenarios {
        let load = match (s.model, s.offered_rps) {
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
        let level = match v.level {
            "error" | "warn" | "info" => v.level,
            _ => "info",
        };
        writeln!(
            h,
            "<div class=\"verdict {level}\"><b>{} · {}</b>{}</div>",
            esc(&v.level.to_uppercase()),
            esc(v.code),
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
                c.actual.map_or("n/a".into(), |a| num(a, 3)),
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
         <th>completed in window</th><th>in flight at end</th><th>throughput</th></tr>"
    )?;
    let unsent_class = if t.unsent.total > 0 {
        " class=\"unsent\""
    } else {
        ""
    };
    writeln!(
        h,
        "<tr><td>{}</td><td>{}</td><td{unsent_class}>{} ({}%)<span class=\"sub\">{}</span></td>\
         <td>{}</td><td>{}</td><td>{}</td><td>{} req/s<span class=\"sub\">over the {} s window</span></td></tr></table>",
        count(t.intended),
        count(t.sent),
        count(t.unsent.total),
        num(share(t.unsent.total, t.intended) * 100.0, 1),
        unsent_reasons(t),
        count(t.completed),
        count(t.completed_in_window),
        count(t.in_flight_at_end),
        num(t.throughput_rps, 1),
        secs(r.run.window_s),
    )?;

    writeln!(
        h,
        "<h3>Latency and service time (ms)</h3><table class=\"latency\"><tr><th class=\"l\"></th><th>count</th>\
         <th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th></tr>"
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
    for (class, p) in &t.latency_by_class_ms {
        percentile_row(h, &format!("latency, {class}"), "", Some(p))?;
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
    writeln!(h, "</table>")
}

fn unsent_reasons(t: &Totals) -> String {
    let mut parts = vec![
        format!("concurrency_limit {}", count(t.unsent.concurrency_limit)),
        format!("late {}", count(t.unsent.late)),
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

/// With --repeat: every run's headline figures, then median, min and max.
fn repeats(h: &mut String, r: &Report) -> fmt::Result {
    use crate::repeats::{Unit, COLUMNS};
    let Some(rep) = &r.repeats else {
        return Ok(());
    };
    writeln!(
        h,
        "<h2>Repeats</h2><p>{} runs; the figures above are run {}, the one with the median p99.</p><table><tr><th class=\"l\">run</th>",
        rep.count,
        rep.representative + 1
    )?;
    for (name, _, unit) in COLUMNS {
        let suffix = if unit == Unit::Millis { " (ms)" } else { "" };
        write!(h, "<th>{}{suffix}</th>", esc(name))?;
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
         <th>intended</th><th>sent</th><th>unsent</th><th>completed</th><th>throughput (req/s)</th>\
         <th>p50 (ms)</th><th>p99 (ms)</th></tr>"
    )?;
    for s in &r.scenarios {
        let t = &s.totals;
        let lat =
            |f: fn(&Percentiles) -> f64| t.latency_ms.as_ref().map_or("–".into(), |p| ms(f(p)));
        writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}–{}</td><td>{}</td><td>{}</td>\
             <td{}>{} ({}%)</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            esc(s.model),
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
            num(t.throughput_rps, 1),
            lat(|p| p.p50),
            lat(|p| p.p99),
        )?;
    }
    writeln!(h, "</table>")
}

fn charts(h: &mut String, r: &Report) -> fmt::Result {
    writeln!(h, "<h2>Charts</h2>")?;
    let ivs = &r.intervals;
    // Each interval covers [t, t+1): its value is drawn at the middle.
    let x_end = ivs.iter().map(|iv| fin(iv.t) + 1.0).fold(0.0, f64::max);
    let mid = |t: f64| fin(t) + 0.5;
    let bands = bands(r, x_end);
    let seconds = XAxis::Seconds { end: x_end };

    let latency = Chart {
        title: "Latency per second (from the intended send time)",
        y_label: "ms",
        x: seconds,
        bands: bands.clone(),
        series: vec![
            Series::line(
                "p50",
                C_P50,
                ivs.iter().map(|iv| (mid(iv.t), iv.p50)).collect(),
            ),
            Series::line(
                "p99",
                C_P99,
                ivs.iter().map(|iv| (mid(iv.t), iv.p99)).collect(),
            ),
        ],
    };
    latency.render(h, "no latency data: nothing completed")?;

    let per_second = |f: fn(&crate::report::IntervalReport) -> u64| -> Vec<(f64, Option<f64>)> {
        ivs.iter()
            .map(|iv| (mid(iv.t), Some(f(iv) as f64)))
            .collect()
    };
    let mut intended = Series::line("intended", C_INTENDED, per_second(|iv| iv.intended));
    intended.dashed = true;
    intended.width = 1.5;
    let requests = Chart {
        title: "Requests per second: intended, sent, completed, unsent",
        y_label: "requests / s",
        x: seconds,
        bands: bands.clone(),
        series: vec![
            intended,
            Series {
                width: 6.0,
                ..Series::line("sent", C_SENT, per_second(|iv| iv.sent))
            },
            Series::line("completed", C_COMPLETED, per_second(|iv| iv.completed)),
            Series::line("unsent", C_UNSENT, per_second(|iv| iv.unsent)),
        ],
    };
    requests.render(h, "no per-second data: no interval was reported")?;

    let (curve, decades) = curve_points(&r.totals);
    let mut dist = Series::line("latency", C_CURVE, curve);
    dist.markers = true;
    let distribution = Chart {
        title: "Latency by percentile (from the intended send time, whole run)",
        y_label: "ms",
        x: XAxis::LogPercentile { decades },
        bands: Vec::new(),
        series: vec![dist],
    };
    distribution.render(h, "no latency distribution: nothing completed")?;

    let in_flight = Chart {
        title: "Requests in flight",
        y_label: "requests",
        x: seconds,
        bands,
        series: vec![
            Series::line(
                "in flight (end of second)",
                C_IN_FLIGHT,
                per_second(|iv| iv.in_flight),
            ),
            Series::line(
                "max in flight (upper bound)",
                C_MAX_IN_FLIGHT,
                per_second(|iv| iv.max_in_flight),
            ),
        ],
    };
    in_flight.render(h, "no in-flight data: no interval was reported")
}

/// Shaded spans of the time charts: each scenario's warm-up and the drain
/// after the last scenario, which are reported apart from the window.
fn bands(r: &Report, x_end: f64) -> Vec<(f64, f64, &'static str)> {
    let mut out = Vec::new();
    for s in &r.scenarios {
        if s.warmup_s > 0.0 {
            out.push((fin(s.start_s), fin(s.start_s + s.warmup_s), "warm-up"));
        }
    }
    let end = fin(r.run.duration_s);
    if end > 0.0 && x_end > end {
        out.push((end, x_end, "drain"));
    }
    out
}

/// The position of a percentile on the HdrHistogram-style axis: the number
/// of decades of 1/(1-p), so 0% → 0, 90% → 1, 99% → 2, 99.9% → 3.
pub fn percentile_x(percentile: f64) -> f64 {
    let rest = 1.0 - percentile / 100.0;
    if rest > 0.0 && rest.is_finite() {
        (1.0 / rest).log10().max(0.0)
    } else {
        f64::INFINITY
    }
}

/// The label of decade `d` on that axis: 0%, 90%, 99%, 99.9%, 99.99%, …
pub fn decade_label(d: u32) -> String {
    match d {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        _ => format!("99.{}%", "9".repeat(d as usize - 2)),
    }
}

/// The latency curve as (axis x, ms) points, and how many decades the axis
/// spans. 100% (the max) cannot sit at an infinite x: it is drawn at
/// 1/(1-p) = count, the resolution of the data, where the next percentile
/// step would be.
fn curve_points(t: &Totals) -> (Vec<(f64, Option<f64>)>, u32) {
    let mut points: Vec<(f64, Option<f64>)> = Vec::new();
    let mut last_x: f64 = 0.0;
    for p in &t.latency_curve_ms {
        if !p.ms.is_finite() || !p.percentile.is_finite() {
            continue;
        }
        let x = percentile_x(p.percentile);
        let x = if x.is_finite() {
            x
        } else {
            let n = t.latency_ms.as_ref().map_or(0, |l| l.count) as f64;
            if n > 1.0 {
                n.log10().max(last_x)
            } else {
                last_x + 0.3
            }
        };
        last_x = last_x.max(x);
        points.push((x, Some(p.ms)));
    }
    let decades = (last_x.ceil() as u32).clamp(1, 12);
    (points, decades)
}

#[derive(Debug, Clone, Copy)]
enum XAxis {
    /// Seconds from the common start, 0..end.
    Seconds { end: f64 },
    /// Decades of 1/(1-percentile), 0..decades.
    LogPercentile { decades: u32 },
}

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    dashed: bool,
    markers: bool,
    /// Stroke width in pixels. Wide strokes are drawn first, so a series
    /// that usually coincides with another (sent under completed) shows as
    /// a band around it instead of disappearing.
    width: f64,
    /// x and y; a missing y breaks the line.
    points: Vec<(f64, Option<f64>)>,
}

impl<'a> Series<'a> {
    fn line(name: &'a str, color: &'a str, points: Vec<(f64, Option<f64>)>) -> Self {
        Self {
            name,
            color,
            dashed: false,
            markers: false,
            width: 2.0,
            points,
        }
    }
}

struct Chart<'a> {
    title: &'a str,
    y_label: &'a str,
    x: XAxis,
    bands: Vec<(f64, f64, &'static str)>,
    series: Vec<Series<'a>>,
}

const W: f64 = 760.0;
const H: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 44.0;

impl Chart<'_> {
    fn render(&self, h: &mut String, no_data: &str) -> fmt::Result {
        let ys = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().filter_map(|p| p.1))
                .filter(|y| y.is_finite())
        };
        if ys().next().is_none() {
            return writeln!(
                h,
                "<figure><figcaption>{}</figcaption><p class=\"nodata\">{}</p></figure>",
                esc(self.title),
                esc(no_data)
            );
        }
        // 5% headroom, so a series at its maximum is not drawn on the frame.
        let (y_top, y_step) = nice_scale(ys().fold(0.0, f64::max) * 1.05);
        let (x0, x1, x_ticks): (f64, f64, Vec<(f64, String)>) = match self.x {
            XAxis::Seconds { end } => {
                let (top, step) = nice_scale(end);
                let ticks = ticks(top, step)
                    .into_iter()
                    .map(|v| (v, tick_label(v, step)))
                    .collect();
                (0.0, top, ticks)
            }
            XAxis::LogPercentile { decades } => (
                0.0,
                f64::from(decades),
                (0..=decades)
                    .map(|d| (f64::from(d), decade_label(d)))
                    .collect(),
            ),
        };
        let plot_w = W - LEFT - RIGHT;
        let plot_h = H - TOP - BOTTOM;
        let px = |x: f64| fin(LEFT + (fin(x) - x0) / (x1 - x0).max(1e-12) * plot_w);
        let py = |y: f64| fin(TOP + plot_h - fin(y) / y_top.max(1e-12) * plot_h);

        writeln!(
            h,
            "<figure><figcaption>{}</figcaption><svg class=\"chart\" width=\"{W}\" height=\"{H}\" \
             viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">",
            esc(self.title),
            esc(self.title)
        )?;
        writeln!(
            h,
            "<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#ffffff\"/>"
        )?;
        for &(a, b, label) in &self.bands {
            let (a, b) = (px(a.max(x0)), px(b.min(x1)));
            if b > a {
                writeln!(
                    h,
                    "<rect x=\"{a:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{plot_h}\" fill=\"#f1f1f1\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#888\" text-anchor=\"middle\">{}</text>",
                    b - a,
                    (a + b) / 2.0,
                    TOP + 12.0,
                    esc(label)
                )?;
            }
        }
        // Grid and y ticks.
        for v in ticks(y_top, y_step) {
            let y = py(v);
            writeln!(
                h,
                "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e6e6e6\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">{}</text>",
                W - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                tick_label(v, y_step)
            )?;
        }
        // X ticks.
        for (v, label) in &x_ticks {
            let x = px(*v);
            writeln!(
                h,
                "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eeeeee\"/>\
                 <line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">{}</text>",
                TOP + plot_h,
                TOP + plot_h,
                TOP + plot_h + 4.0,
                TOP + plot_h + 16.0,
                esc(label)
            )?;
        }
        // Axes and their labels.
        let x_label = match self.x {
            XAxis::Seconds { .. } => "seconds from the start",
            XAxis::LogPercentile { .. } => "percentile (log scale of 1/(1−p))",
        };
        writeln!(
            h,
            "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{:.1}\" stroke=\"#888\"/>\
             <line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">{}</text>\
             <text x=\"14\" y=\"{:.1}\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
            TOP + plot_h,
            TOP + plot_h,
            W - RIGHT,
            TOP + plot_h,
            LEFT + plot_w / 2.0,
            H - 8.0,
            esc(x_label),
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0,
            esc(self.y_label)
        )?;
        // Series: one polyline per unbroken run of points; wide strokes
        // first, dashed ones last (on top), the legend in the given order.
        let mut order: Vec<&Series> = self.series.iter().collect();
        order.sort_by(|a, b| a.dashed.cmp(&b.dashed).then(b.width.total_cmp(&a.width)));
        for s in order {
            let dash = if s.dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for &(x, y) in &s.points {
                match y.filter(|y| y.is_finite()) {
                    Some(y) => runs.last_mut().expect("one run").push((px(x), py(y))),
                    None => runs.push(Vec::new()),
                }
            }
            for run in runs.iter().filter(|r| !r.is_empty()) {
                let pts: Vec<String> = run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                writeln!(
                    h,
                    "<polyline data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" \
                     stroke-linejoin=\"round\"{dash} points=\"{}\"/>",
                    esc(s.name),
                    s.color,
                    fin(s.width),
                    pts.join(" ")
                )?;
                if s.markers || run.len() == 1 {
                    for (x, y) in run {
                        writeln!(
                            h,
                            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{}\"/>",
                            s.color
                        )?;
                    }
                }
            }
        }
        // Legend, across the top.
        let mut lx = LEFT;
        for s in &self.series {
            let dash = if s.dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            writeln!(
                h,
                "<line x1=\"{lx:.1}\" y1=\"14\" x2=\"{:.1}\" y2=\"14\" stroke=\"{}\" stroke-width=\"3\"{dash}/>\
                 <text x=\"{:.1}\" y=\"18\" font-size=\"12\" fill=\"#333\">{}</text>",
                lx + 22.0,
                s.color,
                lx + 27.0,
                esc(s.name)
            )?;
            lx += 40.0 + 7.0 * s.name.chars().count() as f64;
        }
        writeln!(h, "</svg></figure>")
    }
}

/// A round axis top at or above `max` and a step that divides it into about
/// five parts (1, 2 or 5 times a power of ten).
pub fn nice_scale(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let top = (max / step - 1e-9).ceil().max(1.0) * step;
    (top, step)
}

fn ticks(top: f64, step: f64) -> Vec<f64> {
    let n = (top / step).round() as usize;
    (0..=n.min(50)).map(|i| i as f64 * step).collect()
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.decimals$}")
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
    for (kind, n) in &t.errors {
        rows.push((format!("error: {kind}"), *n, "#8a1c6e"));
    }
    for (reason, n) in [
        ("concurrency_limit", t.unsent.concurrency_limit),
        ("late", t.unsent.late),
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
         <th>cpu</th><th>lag p50 (ms)</th><th>lag p99 (ms)</th><th>lag max (ms)</th>\
         <th>clock offset (ms)</th><th>clock rtt (ms)</th></tr>"
    )?;
    for a in &r.agents {
        let status = match &a.lost_reason {
            Some(why) => format!(
                "<span class=\"lost\">{}</span><span class=\"sub\">{}</span>",
                esc(a.status),
                esc(why)
            ),
            None if a.status == "lost" => format!("<span class=\"lost\">{}</span>", esc(a.status)),
            None => esc(a.status),
        };
        let lag = |f: fn(&crate::report::Lag) -> f64| {
            a.lag_ms.as_ref().map_or("–".into(), |l| ms(f(l)))
        };
        let opt = |v: Option<f64>| v.map_or("–".into(), |v| num(v, 3));
        writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{status}</td>\
             <td>{}%</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{}%<span class=\"sub\">{} of {} CPU(s)</span></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
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
            opt(a.clock_offset_ms),
            opt(a.clock_rtt_ms),
        )?;
    }
    writeln!(h, "</table>")
}

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A finite number or 0: what goes into SVG attributes.
fn fin(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A number with a fixed number of decimals, or a dash when it is not one.
fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "–".into()
    }
}

/// Seconds, without trailing noise: 4, 2.5, 0.25.
fn secs(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Milliseconds with precision that fits their size.
fn ms(v: f64) -> String {
    let d = match v.abs() {
        v if v < 1.0 => 3,
        v if v < 100.0 => 2,
        v if v < 10_000.0 => 1,
        _ => 0,
    };
    num(v, d)
}

/// A count with thousands separators: 18,000.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Unix time as a UTC date and time, without a date library.
fn utc(unix: f64) -> String {
    if !unix.is_finite() || unix <= 0.0 {
        return "–".into();
    }
    let secs = unix.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::{
        AgentReport, CurvePoint, IntervalReport, Lag, RunInfo, Scenario, Unsent, Verdict, Warmup,
        Window, SCHEMA,
    };

    fn pct(base: f64, count: u64) -> Percentiles {
        Percentiles {
            p50: base,
            p90: base * 2.0,
            p95: base * 3.0,
            p99: base * 4.0,
            p999: base * 5.0,
            max: base * 6.0,
            mean: base * 1.5,
            count,
        }
    }

    fn totals(completed: u64) -> Totals {
        let latency = (completed > 0).then(|| pct(5.0, completed));
        Totals {
            intended: completed + 10,
            sent: completed,
            completed,
            completed_in_window: completed,
            in_flight_at_end: 0,
            unsent: Unsent {
                total: 10,
                concurrency_limit: 7,
                late: 3,
                other: BTreeMap::new(),
            },
            status: if completed > 0 {
                [("200".to_string(), completed)].into_iter().collect()
            } else {
                BTreeMap::new()
            },
            errors: BTreeMap::new(),
            throughput_rps: completed as f64 / 4.0,
            latency_ms: latency.clone(),
            service_time_ms: latency.clone(),
            latency_by_class_ms: latency
                .clone()
                .map(|p| ("2xx".to_string(), p))
                .into_iter()
                .collect(),
            latency_curve_ms: if completed > 0 {
                [0.0, 50.0, 75.0, 87.5, 93.75, 100.0]
                    .iter()
                    .map(|&p| CurvePoint {
                        percentile: p,
                        ms: 5.0 + p / 10.0,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            warmup: Warmup {
                seconds: 0.0,
                completed: 0,
                latency_ms: None,
            },
        }
    }

    fn report(intervals: usize, completed: u64) -> Report {
        let t = totals(completed);
        Report {
            schema: SCHEMA,
            partial: false,
            run: RunInfo {
                target: "http://127.0.0.1:8080/".into(),
                duration_s: intervals as f64,
                window_s: intervals as f64,
                drain_s: 5.0,
                max_in_flight_per_agent: 1000,
                agents: 1,
                local: true,
                started_at_unix: 1_700_000_000.0,
                elapsed_s: intervals as f64,
            },
            verdicts: vec![Verdict {
                level: "warn",
                code: "LOCALHOST",
                message: "one machine".into(),
            }],
            thresholds: Vec::new(),
            scenarios: vec![Scenario {
                name: "default".into(),
                model: "open",
                start_s: 0.0,
                duration_s: intervals as f64,
                warmup_s: 0.0,
                window: Window {
                    start_s: 0.0,
                    end_s: intervals as f64,
                },
                process: Some("uniform".into()),
                offered_rps: Some(100.0),
                totals: t.clone(),
            }],
            totals: t,
            agents: vec![AgentReport {
                id: "agent-1".into(),
                host: "host-a".into(),
                source: None,
                peer: None,
                host_addresses: Vec::new(),
                share: 1.0,
                intended: completed + 10,
                sent: completed,
                unsent: 10,
                completed,
                cpu: 0.1,
                cpu_cores: 0.2,
                cpu_seconds: 1.0,
                cpus: 2,
                host_cpu: 0.3,
                lag_ms: Some(Lag {
                    p50: 0.1,
                    p99: 0.5,
                    max: 1.0,
                }),
                clock_offset_ms: Some(0.01),
                clock_rtt_ms: Some(0.2),
                status: "finished",
                lost_reason: None,
            }],
            intervals: (0..intervals)
                .map(|i| IntervalReport {
                    t: i as f64,
                    intended: 100,
                    sent: 98,
                    unsent: 2,
                    unsent_by_reason: [("late".to_string(), 2)].into_iter().collect(),
                    completed: 97,
                    errors: 0,
                    classes: BTreeMap::new(),
                    p50: (completed > 0).then_some(5.0 + i as f64),
                    p99: (completed > 0).then_some(20.0 + i as f64),
                    in_flight: 3,
                    max_in_flight: 9,
                    max_lag_ms: 0.4,
                })
                .collect(),
            repeats: None,
        }
    }

    fn polyline_points(html: &str, series: &str) -> Vec<usize> {
        let needle = format!("<polyline data-series=\"{series}\"");
        html.match_indices(&needle)
            .map(|(i, _)| {
                let rest = &html[i..];
                let start = rest.find("points=\"").expect("points") + 8;
                let end = start + rest[start..].find('"').expect("end");
                rest[start..end].split_whitespace().count()
            })
            .collect()
    }

    #[test]
    fn text_from_the_report_is_escaped() {
        let mut r = report(3, 100);
        r.run.target = "http://x/\"><script>alert(1)</script>".into();
        r.agents[0].id = "<img src=x onerror=alert(2)>".into();
        r.verdicts[0].message = "</script><script>alert(3)</script> & 'q'".into();
        let html = render(&r).unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;"));
        assert!(
            html.contains("&lt;/script&gt;&lt;script&gt;alert(3)&lt;/script&gt; &amp; &#39;q&#39;")
        );
        // Exactly one </script>: the end of the embedded JSON.
        assert_eq!(html.matches("</script>").count(), 1);
        assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    }

    #[test]
    fn embedded_json_is_the_report() {
        let mut r = report(2, 10);
        r.verdicts[0].message = "</script> <!-- x".into();
        let html = render(&r).unwrap();
        let open = "<script type=\"application/json\" id=\"report\">";
        let start = html.find(open).unwrap() + open.len();
        let end = start + html[start..].find("</script>").unwrap();
        let embedded: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(embedded, serde_json::to_value(&r).unwrap());
    }

    #[test]
    fn empty_report_renders_without_nan() {
        let mut r = report(0, 0);
        r.run.duration_s = f64::NAN;
        r.totals.throughput_rps = f64::NAN;
        r.agents.clear();
        r.scenarios.clear();
        r.verdicts.clear();
        let html = render(&r).unwrap();
        assert!(!html.contains("NaN"), "{html}");
        assert!(!html.replace("info", "").contains("inf"), "{html}");
        assert!(!html.contains("<polyline"), "no chart without data");
        assert!(html.contains("no latency data"));
        assert!(html.contains("no per-second data"));
        assert!(html.contains("no latency distribution"));
        assert!(html.contains("nothing completed"));
    }

    #[test]
    fn intervals_without_latency_break_the_line_not_the_chart() {
        let mut r = report(5, 100);
        r.intervals[2].p50 = None;
        r.intervals[2].p99 = None;
        r.intervals[3].p99 = Some(f64::NAN);
        let html = render(&r).unwrap();
        assert!(!html.contains("NaN"));
        assert_eq!(polyline_points(&html, "p50"), [2, 2]);
        assert_eq!(polyline_points(&html, "p99"), [2, 1]);
    }

    #[test]
    fn chart_polylines_have_one_point_per_interval() {
        let html = render(&report(7, 500)).unwrap();
        for s in ["intended", "sent", "completed", "unsent", "p50", "p99"] {
            assert_eq!(polyline_points(&html, s), [7], "series {s}");
        }
        // Six curve points: five percentiles below 100% and the max.
        assert_eq!(polyline_points(&html, "latency"), [6]);
        assert!(!html.contains("NaN"));
    }

    #[test]
    fn log_percentile_axis_maps_99_to_two_decades() {
        assert!((percentile_x(99.0) - 2.0).abs() < 1e-9);
        assert!((percentile_x(90.0) - 1.0).abs() < 1e-9);
        assert!((percentile_x(99.9) - 3.0).abs() < 1e-9);
        assert_eq!(percentile_x(0.0), 0.0);
        assert!(percentile_x(100.0).is_infinite());
        assert_eq!(decade_label(0), "0%");
        assert_eq!(decade_label(2), "99%");
        assert_eq!(decade_label(4), "99.99%");
        // The max is drawn where 1/(1-p) equals the count: 1000 → 3 decades.
        let mut t = totals(1000);
        t.latency_curve_ms = vec![
            CurvePoint {
                percentile: 99.0,
                ms: 9.0,
            },
            CurvePoint {
                percentile: 100.0,
                ms: 10.0,
            },
        ];
        let (points, decades) = curve_points(&t);
        assert!((points[0].0 - 2.0).abs() < 1e-9);
        assert!((points[1].0 - 3.0).abs() < 1e-9);
        assert_eq!(decades, 3);
    }

    #[test]
    fn partial_runs_and_scenarios_show() {
        let mut r = report(3, 100);
        r.partial = true;
        let mut second = r.scenarios[0].clone();
        second.name = "spike<1>".into();
        r.scenarios.push(second);
        let html = render(&r).unwrap();
        assert!(html.contains(">PARTIAL</span>"));
        assert!(html.contains("<h2>Scenarios</h2>"));
        assert!(html.contains("spike&lt;1&gt;"));
        assert!(!render(&report(3, 100))
            .unwrap()
            .contains("<h2>Scenarios</h2>"));
    }

    #[test]
    fn scales_and_formats() {
        assert_eq!(nice_scale(0.0), (1.0, 0.2));
        assert_eq!(nice_scale(f64::NAN), (1.0, 0.2));
        assert_eq!(nice_scale(7.0), (8.0, 2.0));
        assert_eq!(nice_scale(300.0), (300.0, 100.0));
        assert_eq!(nice_scale(301.0), (400.0, 100.0));
        assert_eq!(count(18_000), "18,000");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(secs(4.0), "4");
        assert_eq!(secs(2.5), "2.5");
        assert_eq!(utc(1_700_000_000.0), "2023-11-14 22:13:20 UTC");
    }
}
