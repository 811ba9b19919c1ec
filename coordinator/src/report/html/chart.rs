//! Inline SVG charts with axes, tick labels and a legend; every number that
//! reaches an SVG attribute goes through [`fin`], so a strange report can
//! draw an odd chart but never a broken one. SVG elements are written with
//! an end tag (`<line ...></line>`): inside `<svg>` a start tag without one
//! would hold its siblings as children.

use loadfleet_proto::vocab::OutcomeClass;
use maud::{html, Markup};

use crate::report::format::fin;
use crate::report_model::{IntervalReport, Report, Totals};

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
const C_GAP: &str = "#a0307a";

/// Each outcome class's stroke and the lighter fill of its layer in the
/// stacked chart: 2xx the green of `completed`, 4xx amber, 5xx a deep red
/// apart from `unsent`'s, transport errors brown.
fn class_colours(c: OutcomeClass) -> (&'static str, &'static str) {
    match c {
        OutcomeClass::Informational => ("#7d8fa3", "#d5dce4"),
        OutcomeClass::Success => (C_COMPLETED, "#bfe3cb"),
        OutcomeClass::Redirect => ("#3d8eb0", "#c6e1ec"),
        OutcomeClass::ClientError => ("#c98a00", "#f2dfb0"),
        OutcomeClass::ServerError => ("#b71c1c", "#f2c4c1"),
        OutcomeClass::Error => ("#5d4037", "#d7ccc8"),
        OutcomeClass::GrpcOk => ("#2e7d32", "#c8e6c9"),
        OutcomeClass::GrpcClientError => ("#e65100", "#ffd8b8"),
        OutcomeClass::GrpcServerError => ("#880e4f", "#f0bcd3"),
    }
}

pub(super) fn charts(r: &Report) -> Markup {
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

    let per_second = |f: fn(&IntervalReport) -> u64| -> Vec<(f64, Option<f64>)> {
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

    // The gap is drawn while arrivals are due: in the drain it is only
    // the answers coming home.
    let mut arrivals = Series::line("arrivals", C_INTENDED, per_second(|iv| iv.intended));
    arrivals.dashed = true;
    let gap = ivs
        .iter()
        .map(|iv| {
            let gap = iv.intended as f64 - iv.completed as f64;
            (mid(iv.t), (iv.intended > 0).then_some(gap))
        })
        .collect();
    let behind = Chart {
        title: "Arrivals vs completions per second, and the gap",
        y_label: "requests / s",
        x: seconds,
        bands: bands.clone(),
        series: vec![
            arrivals,
            Series::line("completions", C_COMPLETED, per_second(|iv| iv.completed)),
            Series::line("gap (arrivals − completions)", C_GAP, gap),
        ],
    };

    let by_class = Chart {
        title: "Completions per second by outcome class (stacked)",
        y_label: "completions / s",
        x: seconds,
        bands: bands.clone(),
        series: class_layers(ivs),
    };

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
    html! {
        h2 { "Charts" }
        (latency.render("no latency data: nothing completed"))
        (requests.render("no per-second data: no interval was reported"))
        (behind.render("no per-second data: no interval was reported"))
        (by_class.render("no completions: nothing was answered or failed"))
        (distribution.render("no latency distribution: nothing completed"))
        (in_flight.render("no in-flight data: no interval was reported"))
    }
}

/// One stacked layer per outcome class that occurs in the run, in the
/// vocabulary's order (2xx at the bottom), so the top of the stack is
/// `completed` and a run that turns into 503s shows the 5xx layer taking
/// the place of the 2xx one while the total stays flat.
fn class_layers(ivs: &[IntervalReport]) -> Vec<Series<'static>> {
    let mut floor = vec![0.0; ivs.len()];
    let mut layers = Vec::new();
    for &class in OutcomeClass::ALL {
        let key = format!("completed_{class}");
        let counts: Vec<f64> = ivs
            .iter()
            .map(|iv| iv.classes.get(&key).copied().unwrap_or(0) as f64)
            .collect();
        if counts.iter().all(|&n| n == 0.0) {
            continue;
        }
        let (stroke, fill) = class_colours(class);
        let top: Vec<f64> = floor.iter().zip(&counts).map(|(f, n)| f + n).collect();
        layers.push(Series {
            width: 1.5,
            area: Some(Area {
                fill,
                floor: std::mem::replace(&mut floor, top.clone()),
            }),
            ..Series::line(
                class.as_str(),
                stroke,
                ivs.iter()
                    .zip(top)
                    .map(|(iv, y)| (fin(iv.t) + 0.5, Some(y)))
                    .collect(),
            )
        });
    }
    layers
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
pub(super) fn percentile_x(percentile: f64) -> f64 {
    let rest = 1.0 - percentile / 100.0;
    if rest > 0.0 && rest.is_finite() {
        (1.0 / rest).log10().max(0.0)
    } else {
        f64::INFINITY
    }
}

/// The label of decade `d` on that axis: 0%, 90%, 99%, 99.9%, 99.99%, …
pub(super) fn decade_label(d: u32) -> String {
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
pub(super) fn curve_points(t: &Totals) -> (Vec<(f64, Option<f64>)>, u32) {
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
pub(crate) enum XAxis {
    /// Seconds from the common start, 0..end.
    Seconds { end: f64 },
    /// Offered rate in req/s, 0..end (`search`'s knee chart).
    Rate { end: f64 },
    /// Closed clients, 0..end (the knee chart of a search on clients).
    Clients { end: f64 },
    /// Decades of 1/(1-percentile), 0..decades.
    LogPercentile { decades: u32 },
}

pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) color: &'a str,
    pub(crate) dashed: bool,
    pub(crate) markers: bool,
    /// Stroke width in pixels. Wide strokes are drawn first, so a series
    /// that usually coincides with another (sent under completed) shows as
    /// a band around it instead of disappearing.
    pub(crate) width: f64,
    /// x and y; a missing y breaks the line.
    pub(crate) points: Vec<(f64, Option<f64>)>,
    /// A layer of a stacked chart: filled down to its floor.
    area: Option<Area<'a>>,
}

/// The fill of a stacked layer, from its line down to `floor` (the top of
/// the layer below, one value per point).
struct Area<'a> {
    fill: &'a str,
    floor: Vec<f64>,
}

impl<'a> Series<'a> {
    pub(crate) fn line(name: &'a str, color: &'a str, points: Vec<(f64, Option<f64>)>) -> Self {
        Self {
            name,
            color,
            dashed: false,
            markers: false,
            width: 2.0,
            points,
            area: None,
        }
    }
}

pub(crate) struct Chart<'a> {
    pub(crate) title: &'a str,
    pub(crate) y_label: &'a str,
    pub(crate) x: XAxis,
    pub(crate) bands: Vec<(f64, f64, &'static str)>,
    pub(crate) series: Vec<Series<'a>>,
}

// The drawing's own size: the page scales it to its width (style
// `svg.chart`), so these set the proportions and the size of the text at
// about the widest a page gets.
const W: f64 = 1100.0;
const H: f64 = 320.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 44.0;

impl Chart<'_> {
    /// Draws the chart as one SVG element, top to bottom in paint order
    /// (frame, bands, grid and ticks, series, legend). The steps share one
    /// coordinate mapping, so they stay in one function.
    pub(crate) fn render(&self, no_data: &str) -> Markup {
        let ys = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().filter_map(|p| p.1))
                .filter(|y| y.is_finite())
        };
        if ys().next().is_none() {
            return html! {
                figure { figcaption { (self.title) } p class="nodata" { (no_data) } }
            };
        }
        // 5% headroom, so a series at its maximum is not drawn on the
        // frame. The axis starts at 0, or below it for a series that goes
        // negative (a gap that closes), on the same round steps.
        let (y_max, y_min) = (ys().fold(0.0, f64::max), ys().fold(0.0, f64::min));
        let (top, y_step) = nice_scale((y_max - y_min) * 1.05);
        let (y_low, y_top) = if y_min < 0.0 {
            let low = (y_min * 1.05 / y_step).floor() * y_step;
            let high = (y_max * 1.05 / y_step - 1e-9).ceil() * y_step;
            (low, high.max(low + y_step))
        } else {
            (0.0, top)
        };
        let (x0, x1, x_ticks): (f64, f64, Vec<(f64, String)>) = match self.x {
            XAxis::Seconds { end } | XAxis::Rate { end } | XAxis::Clients { end } => {
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
        let bottom = TOP + plot_h;
        let px = |x: f64| fin(LEFT + (fin(x) - x0) / (x1 - x0).max(1e-12) * plot_w);
        let py =
            |y: f64| fin(TOP + plot_h - (fin(y) - y_low) / (y_top - y_low).max(1e-12) * plot_h);
        let bands: Vec<(f64, f64, &str)> = self
            .bands
            .iter()
            .map(|&(a, b, label)| (px(a.max(x0)), px(b.min(x1)), label))
            .filter(|(a, b, _)| b > a)
            .collect();
        let x_label = match self.x {
            XAxis::Seconds { .. } => "seconds from the start",
            XAxis::Rate { .. } => "offered rate (req/s)",
            XAxis::Clients { .. } => "clients",
            XAxis::LogPercentile { .. } => "percentile (log scale of 1/(1−p))",
        };
        // Filled layers first, then wide strokes, dashed ones last (on
        // top); the legend keeps the given order.
        let mut order: Vec<&Series> = self.series.iter().collect();
        order.sort_by(|a, b| {
            (b.area.is_some().cmp(&a.area.is_some()))
                .then(a.dashed.cmp(&b.dashed))
                .then(b.width.total_cmp(&a.width))
        });
        let mut legend_x = LEFT;
        let legend: Vec<(f64, &Series)> = self
            .series
            .iter()
            .map(|s| {
                let x = legend_x;
                legend_x += 40.0 + 7.0 * s.name.chars().count() as f64;
                (x, s)
            })
            .collect();
        let mid_y = TOP + plot_h / 2.0;
        html! {
            figure {
                figcaption { (self.title) }
                svg class="chart" width=(W) height=(H) viewBox=(format!("0 0 {W} {H}"))
                    role="img" aria-label=(self.title) {
                    rect x="0" y="0" width=(W) height=(H) fill="#ffffff" {}
                    @for (a, b, label) in bands {
                        rect x=(f1(a)) y=(TOP) width=(f1(b - a)) height=(plot_h) fill="#f1f1f1" {}
                        text x=(f1((a + b) / 2.0)) y=(f1(TOP + 12.0)) font-size="10" fill="#888"
                            text-anchor="middle" { (label) }
                    }
                    @for v in ticks_from(y_low, y_top, y_step) {
                        @let y = f1(py(v));
                        line x1=(LEFT) y1=(y) x2=(f1(W - RIGHT)) y2=(y)
                            stroke=(if v == 0.0 && y_low < 0.0 { "#888888" } else { "#e6e6e6" }) {}
                        text x=(f1(LEFT - 6.0)) y=(f1(py(v) + 4.0)) font-size="11" fill="#555"
                            text-anchor="end" { (tick_label(v, y_step)) }
                    }
                    @for (v, label) in &x_ticks {
                        @let x = f1(px(*v));
                        line x1=(x) y1=(TOP) x2=(x) y2=(f1(bottom)) stroke="#eeeeee" {}
                        line x1=(x) y1=(f1(bottom)) x2=(x) y2=(f1(bottom + 4.0)) stroke="#888" {}
                        text x=(x) y=(f1(bottom + 16.0)) font-size="11" fill="#555"
                            text-anchor="middle" { (label) }
                    }
                    line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(f1(bottom)) stroke="#888" {}
                    line x1=(LEFT) y1=(f1(bottom)) x2=(f1(W - RIGHT)) y2=(f1(bottom))
                        stroke="#888" {}
                    text x=(f1(LEFT + plot_w / 2.0)) y=(f1(H - 8.0)) font-size="11" fill="#444"
                        text-anchor="middle" { (x_label) }
                    text x="14" y=(f1(mid_y)) font-size="11" fill="#444" text-anchor="middle"
                        transform=(format!("rotate(-90 14 {})", f1(mid_y))) { (self.y_label) }
                    @for s in &order {
                        @if let Some(area) = &s.area {
                            polygon fill=(area.fill) stroke="none"
                                points=(points(&s.area_outline(area, &px, &py))) {}
                        }
                    }
                    @for s in order {
                        @for run in s.runs(&px, &py) {
                            polyline data-series=(s.name) fill="none" stroke=(s.color)
                                stroke-width=(fin(s.width)) stroke-linejoin="round"
                                stroke-dasharray=[s.dashed.then_some("6 4")]
                                points=(points(&run)) {}
                            @if s.markers || run.len() == 1 {
                                @for &(x, y) in &run {
                                    circle cx=(f1(x)) cy=(f1(y)) r="3" fill=(s.color) {}
                                }
                            }
                        }
                    }
                    @for (x, s) in legend {
                        @if let Some(area) = &s.area {
                            rect x=(f1(x)) y="8" width="22" height="12" fill=(area.fill)
                                stroke=(s.color) stroke-width="1.5" {}
                        } @else {
                            line x1=(f1(x)) y1="14" x2=(f1(x + 22.0)) y2="14" stroke=(s.color)
                                stroke-width="3" stroke-dasharray=[s.dashed.then_some("6 4")] {}
                        }
                        text x=(f1(x + 27.0)) y="18" font-size="12" fill="#333" { (s.name) }
                    }
                }
            }
        }
    }
}

impl Series<'_> {
    /// The points in pixels, one run per unbroken stretch: a missing or
    /// non-finite y breaks the line.
    fn runs(&self, px: &impl Fn(f64) -> f64, py: &impl Fn(f64) -> f64) -> Vec<Vec<(f64, f64)>> {
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &self.points {
            match y.filter(|y| y.is_finite()) {
                Some(y) => runs.last_mut().expect("one run").push((px(x), py(y))),
                None => runs.push(Vec::new()),
            }
        }
        runs.retain(|r| !r.is_empty());
        runs
    }
}

impl Series<'_> {
    /// A stacked layer's outline in pixels: along its line, then back
    /// along its floor. Layers have a value at every point.
    fn area_outline(
        &self,
        area: &Area<'_>,
        px: &impl Fn(f64) -> f64,
        py: &impl Fn(f64) -> f64,
    ) -> Vec<(f64, f64)> {
        let top = self
            .points
            .iter()
            .map(|&(x, y)| (px(x), py(y.unwrap_or(0.0))));
        let floor = self
            .points
            .iter()
            .zip(&area.floor)
            .rev()
            .map(|(&(x, _), &y)| (px(x), py(y)));
        top.chain(floor).collect()
    }
}

/// A polyline's `points`: "x,y x,y ...".
fn points(run: &[(f64, f64)]) -> String {
    let xy: Vec<String> = run
        .iter()
        .map(|&(x, y)| format!("{},{}", f1(x), f1(y)))
        .collect();
    xy.join(" ")
}

/// One decimal, as every coordinate is written.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// A round axis top at or above `max` and a step that divides it into about
/// five parts (1, 2 or 5 times a power of ten).
pub(crate) fn nice_scale(max: f64) -> (f64, f64) {
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
    ticks_from(0.0, top, step)
}

/// Ticks from `low` to `top` (both on the step), at most 51 of them.
fn ticks_from(low: f64, top: f64, step: f64) -> Vec<f64> {
    let n = ((top - low) / step).round().max(0.0) as usize;
    (0..=n.min(50)).map(|i| low + i as f64 * step).collect()
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.decimals$}")
}
