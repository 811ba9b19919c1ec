//! NOT_STEADY: whether the target kept up with the arrivals through a
//! scenario's window, read second by second. A rate at which answers fall
//! behind arrivals while latency climbs is no steady state: the queue
//! grows for as long as the rate is held, and no capacity can be read from
//! it, however short the window that kept it within an SLO.
//!
//! Each rule is a figure against a constant below; docs/report.md
//! (verdicts) gives them with the reasoning and the figures measured. A
//! run on a shared machine jitters (a per-second p99 doubles when a vCPU
//! is descheduled), so the verdict asks for three things at once, each of
//! which noise gives alone now and then but a real backlog always gives
//! together: answers behind by a share of what was sent, behind in most
//! seconds, and a latency percentile rising steeply against both its own
//! spread and its level.

use std::collections::BTreeMap;

use loadfleet_proto::vocab::{VerdictCode, VerdictLevel};

use crate::aggregate::IntervalAgg;
use crate::fleet::RunResult;
use crate::report::plan_info::ScenarioInfo;
use crate::report_model::{Scenario, Steadiness, SteadyVerdict, Trend, Verdict, Window};
use crate::units;

/// Fewer seconds than this are not judged (`too_short`): a line through
/// two points has no spread to test it against.
const MIN_SECONDS: usize = 3;
/// Answers behind by at least this share of what was sent...
const BEHIND_SHARE: f64 = 0.01;
/// ...and by at least this many requests (a slow rate's jitter).
const BEHIND_MIN: i64 = 10;
/// More sent than answered in at least this share of the seconds: a
/// backlog that builds, not one stall at the window's end.
const BEHIND_SECONDS_SHARE: f64 = 0.75;
/// A rising latency: its slope at least this many times its spread...
const TREND_SPREADS: f64 = 3.0;
/// ...and its rise over the seconds at least this share of its start.
const RISE_SHARE: f64 = 0.25;

/// One second of one scenario, as the check reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Second {
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub completed: u64,
    /// In flight at the second's end.
    pub in_flight: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A least-squares line `y = intercept + slope·x`, with the standard
/// error of its slope.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fit {
    pub slope: f64,
    pub intercept: f64,
    /// sqrt(SSE / (n − 2) / Sxx): how far the slope could move by the
    /// scatter of the points around the line.
    pub spread: f64,
}

impl Fit {
    fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// The least-squares line through `points`; `None` with fewer than 3
/// points (no spread can be known) or when every x is the same. Sums are
/// taken about the means, so large offsets do not eat the precision.
fn least_squares(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len();
    if n < 3 || points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let sse: f64 = points
        .iter()
        .map(|&(x, y)| (y - (intercept + slope * x)).powi(2))
        .sum();
    Some(Fit {
        slope,
        intercept,
        spread: (sse / (nf - 2.0) / sxx).sqrt(),
    })
}

/// The trend of one percentile over the seconds that have it (x is the
/// second's place in the window).
fn trend(seconds: &[Second], pick: fn(&Second) -> Option<f64>) -> Option<Trend> {
    let points: Vec<(f64, f64)> = seconds
        .iter()
        .enumerate()
        .filter_map(|(i, s)| pick(s).map(|y| (i as f64, y)))
        .collect();
    let fit = least_squares(&points)?;
    let (first, last) = (points[0].0, points[points.len() - 1].0);
    let start = fit.at(first);
    let rise = fit.slope * (last - first);
    // A line that starts at or below zero has no level to compare with:
    // the mean of the points stands for it.
    let level = if start > 0.0 {
        start
    } else {
        points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64
    };
    Some(Trend {
        slope_ms_per_s: fit.slope,
        spread_ms_per_s: fit.spread,
        start_ms: start,
        rise_ms: rise,
        rising: fit.slope > 0.0
            && fit.slope >= TREND_SPREADS * fit.spread
            && rise >= RISE_SHARE * level,
    })
}

/// Judges `seconds` (whole, consecutive, the first starting at `from_s`
/// on the common clock), with `in_flight_before` in flight just before.
fn assess(seconds: &[Second], from_s: f64, in_flight_before: u64) -> Steadiness {
    let n = seconds.len();
    let sum = |f: fn(&Second) -> u64| seconds.iter().map(f).sum::<u64>();
    let (sent, completed) = (sum(|s| s.sent), sum(|s| s.completed));
    let per_s = |v: u64| if n == 0 { 0.0 } else { v as f64 / n as f64 };
    // Counts are bounded far below i64::MAX (proto/src/bounds.rs).
    let behind = sent as i64 - completed as i64;
    let behind_seconds = seconds.iter().filter(|s| s.sent > s.completed).count();
    let p50 = trend(seconds, |s| s.p50_ms);
    let p99 = trend(seconds, |s| s.p99_ms);
    let verdict = if n < MIN_SECONDS {
        SteadyVerdict::TooShort
    } else {
        let far_behind = behind >= BEHIND_MIN && behind as f64 >= BEHIND_SHARE * sent as f64;
        let mostly_behind = behind_seconds as f64 >= (BEHIND_SECONDS_SHARE * n as f64).ceil();
        let rising = [p50, p99].iter().flatten().any(|t| t.rising);
        if far_behind && mostly_behind && rising {
            SteadyVerdict::NotSteady
        } else {
            SteadyVerdict::Steady
        }
    };
    Steadiness {
        verdict,
        from_s,
        to_s: from_s + n as f64,
        seconds: n as u64,
        offered_rps: per_s(sum(|s| s.intended)),
        sent_rps: per_s(sent),
        completed_rps: per_s(completed),
        unsent: sum(|s| s.unsent),
        behind,
        behind_seconds: behind_seconds as u64,
        in_flight_start: in_flight_before,
        in_flight_end: seconds.last().map_or(in_flight_before, |s| s.in_flight),
        p50,
        p99,
    }
}

/// The seconds a scenario's check reads: the whole seconds of its window
/// that start once its first answers can have come back — a second after
/// it started, or its p99 latency if longer — since until then what is in
/// flight is still filling up to its level, and the first seconds hold
/// only the fastest answers. With the in-flight count just before them.
fn seconds_of(
    intervals: &BTreeMap<u64, IntervalAgg>,
    scenario: u32,
    start_s: f64,
    window: Window,
    p99_ms: f64,
) -> (f64, Vec<Second>, u64) {
    let ramp = (p99_ms / 1000.0).max(1.0);
    let first = window.start_s.max(start_s + ramp).ceil().max(0.0) as u64;
    let end = window.end_s.floor().max(0.0) as u64;
    let part = |i: u64| intervals.get(&i).and_then(|iv| iv.scenarios.get(&scenario));
    let seconds = (first..end)
        .map(|i| {
            let p = part(i).copied().unwrap_or_default();
            let latency = intervals
                .get(&i)
                .map(|iv| iv.scenario_latency(scenario))
                .unwrap_or_default();
            Second {
                intended: p.intended,
                sent: p.sent,
                unsent: p.unsent,
                completed: p.completed,
                in_flight: p.in_flight,
                p50_ms: latency.p50_us.map(units::us_to_ms),
                p99_ms: latency.p99_us.map(units::us_to_ms),
            }
        })
        .collect();
    let before = first
        .checked_sub(1)
        .and_then(part)
        .map_or(0, |p| p.in_flight);
    (first as f64, seconds, before)
}

/// Sets `steadiness` on every open-model scenario that completed
/// something (subscriptions and closed populations have no arrivals to
/// keep up with). A run cut short is not judged: its last seconds are
/// not whole, and `PARTIAL` already says its figures are incomplete.
pub(crate) fn judge(result: &RunResult, scenarios: &mut [Scenario], infos: &[ScenarioInfo]) {
    if result.cut_short || result.failure.is_some() {
        return;
    }
    for (i, (s, info)) in scenarios.iter_mut().zip(infos).enumerate() {
        let p99 = s.totals.latency_ms.as_ref().map(|p| p.p99);
        let (true, Some(p99)) = (info.model == "open" && info.sse_send_time.is_none(), p99) else {
            continue;
        };
        let (from, seconds, before) = seconds_of(
            &result.aggregate.intervals,
            i as u32,
            s.start_s,
            s.window,
            p99,
        );
        s.steadiness = Some(assess(&seconds, from, before));
    }
}

/// A `NOT_STEADY` warning for each scenario that was not steady, named
/// when the run has several.
pub(crate) fn verdicts(scenarios: &[Scenario]) -> Vec<Verdict> {
    let named = scenarios.len() > 1;
    scenarios
        .iter()
        .filter_map(|s| {
            let name = named.then_some(s.name.as_str());
            verdict(s.steadiness.as_ref()?, name)
        })
        .collect()
}

/// A rate as the message gives it: whole above 100/s, one decimal below.
fn rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.1}/s")
    }
}

/// The figures that show the target fell behind, in one line: "completions
/// 400/s of 413/s offered; p99 rising 31 ms per second (±2.0); in flight
/// grew from 20 to 150". What `search` gives as a step's failure.
pub(crate) fn figures(s: &Steadiness) -> String {
    let mut text = format!(
        "completions {} of {} offered",
        rate(s.completed_rps),
        rate(s.offered_rps)
    );
    if s.unsent > 0 {
        text.push_str(&format!(" ({} unsent)", s.unsent));
    }
    let rising: Vec<String> = [("p50", &s.p50), ("p99", &s.p99)]
        .into_iter()
        .filter_map(|(name, t)| t.as_ref().filter(|t| t.rising).map(|t| (name, t)))
        .map(|(name, t)| {
            format!(
                "{name} rising {} ms per second (±{})",
                slope(t.slope_ms_per_s),
                slope(t.spread_ms_per_s)
            )
        })
        .collect();
    if !rising.is_empty() {
        text.push_str(&format!("; {}", rising.join(", ")));
    }
    text.push_str(&format!(
        "; in flight grew from {} to {}",
        s.in_flight_start, s.in_flight_end
    ));
    text
}

/// A slope in ms per second: whole from 10, one decimal below.
fn slope(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The verdict for a scenario that was not steady; `name` is given when
/// the run has several scenarios.
fn verdict(s: &Steadiness, name: Option<&str>) -> Option<Verdict> {
    (s.verdict == SteadyVerdict::NotSteady).then(|| Verdict {
        level: VerdictLevel::Warn,
        code: VerdictCode::NotSteady,
        message: format!(
            "{}{}: {} requests fell behind over the {} s from t={}s, so this rate is no steady state and no capacity can be read from it — the queue grows for as long as it is held",
            name.map(|n| format!("scenario {n}: ")).unwrap_or_default(),
            figures(s),
            s.behind,
            s.seconds,
            crate::report::format::secs(s.from_s),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn second(sent: u64, completed: u64, in_flight: u64, p50: f64, p99: f64) -> Second {
        Second {
            intended: sent,
            sent,
            unsent: 0,
            completed,
            in_flight,
            p50_ms: Some(p50),
            p99_ms: Some(p99),
        }
    }

    /// A target 12/s short of 412/s: 12 more in flight each second, and
    /// every request waits 12/400 s longer than the one a second before.
    fn behind(n: usize) -> Vec<Second> {
        (0..n)
            .map(|i| {
                let q = 12.0 * (i as f64 + 1.0);
                second(
                    412,
                    400,
                    20 + 12 * (i as u64 + 1),
                    50.0 + q / 0.4,
                    60.0 + q / 0.4,
                )
            })
            .collect()
    }

    #[test]
    fn a_target_that_falls_behind_is_not_steady_and_the_message_names_the_figures() {
        let s = assess(&behind(9), 1.0, 20);
        assert_eq!(s.verdict, SteadyVerdict::NotSteady);
        assert_eq!((s.behind, s.behind_seconds, s.seconds), (108, 9, 9));
        assert_eq!((s.in_flight_start, s.in_flight_end), (20, 128));
        let p99 = s.p99.expect("a trend");
        assert!((p99.slope_ms_per_s - 30.0).abs() < 1e-9, "{p99:?}");
        assert!(p99.spread_ms_per_s < 1e-9 && p99.rising);
        let v = verdict(&s, None).expect("a verdict");
        assert_eq!(v.level, VerdictLevel::Warn);
        assert!(
            v.message.starts_with(
                "completions 400/s of 412/s offered; p50 rising 30 ms per second (±0.0), p99 rising 30 ms per second (±0.0); in flight grew from 20 to 128: 108 requests fell behind over the 9 s from t=1s"
            ),
            "{}",
            v.message
        );
        let named = verdict(&s, Some("checkout")).expect("a verdict");
        assert!(named.message.starts_with("scenario checkout: completions"));
    }

    #[test]
    fn three_seconds_are_enough_and_two_say_nothing() {
        assert_eq!(
            assess(&behind(3), 1.0, 20).verdict,
            SteadyVerdict::NotSteady
        );
        let short = assess(&behind(2), 1.0, 20);
        assert_eq!(short.verdict, SteadyVerdict::TooShort);
        assert!(short.p50.is_none() && verdict(&short, None).is_none());
        assert_eq!(assess(&[], 0.0, 0).verdict, SteadyVerdict::TooShort);
    }

    /// A stall at the window's end: 60 more in flight and a p99 of 250 ms
    /// in the last second only. Behind, but not in most seconds, and a
    /// jump is no trend: steady.
    #[test]
    fn one_stall_at_the_end_is_not_a_backlog() {
        let mut s: Vec<Second> = (0..4).map(|_| second(300, 300, 15, 50.5, 52.0)).collect();
        s[3] = second(300, 240, 75, 52.0, 250.0);
        let a = assess(&s, 1.0, 15);
        assert_eq!(a.behind, 60);
        assert_eq!(a.verdict, SteadyVerdict::Steady);
        let p99 = a.p99.expect("a trend");
        assert!(
            p99.slope_ms_per_s < TREND_SPREADS * p99.spread_ms_per_s,
            "{p99:?}"
        );
    }

    /// Latency that climbs while every request is answered (a target that
    /// slows down and keeps up) is not a backlog; nor is a backlog whose
    /// latency stays flat (answers out of order, or noise).
    #[test]
    fn each_rule_alone_is_not_enough() {
        let climbing: Vec<Second> = (0..6)
            .map(|i| second(300, 300, 15, 50.0 + 10.0 * i as f64, 60.0 + 10.0 * i as f64))
            .collect();
        assert_eq!(assess(&climbing, 0.0, 15).verdict, SteadyVerdict::Steady);
        let flat: Vec<Second> = (0..6)
            .map(|i| second(300, 280, 15 + 20 * i, 50.0, 60.0))
            .collect();
        assert_eq!(assess(&flat, 0.0, 15).verdict, SteadyVerdict::Steady);
        // Behind by less than 1% of what was sent.
        let slight: Vec<Second> = (0..6)
            .map(|i| {
                second(
                    1000,
                    999,
                    50 + i,
                    50.0 + 10.0 * i as f64,
                    60.0 + 10.0 * i as f64,
                )
            })
            .collect();
        assert_eq!(assess(&slight, 0.0, 50).verdict, SteadyVerdict::Steady);
    }

    #[test]
    fn the_figures_name_unsent_and_only_the_rising_percentiles() {
        let mut s = assess(&behind(5), 1.0, 20);
        s.unsent = 7;
        if let Some(p50) = s.p50.as_mut() {
            p50.rising = false;
        }
        assert_eq!(
            figures(&s),
            "completions 400/s of 412/s offered (7 unsent); p99 rising 30 ms per second (±0.0); in flight grew from 20 to 80"
        );
        s.completed_rps = 41.25;
        s.offered_rps = 50.0;
        assert!(figures(&s).starts_with("completions 41.2/s of 50.0/s offered"));
    }

    #[test]
    fn a_line_through_too_few_or_equal_xs_has_no_fit() {
        assert_eq!(least_squares(&[(0.0, 1.0), (1.0, 2.0)]), None);
        assert_eq!(least_squares(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
        assert_eq!(
            least_squares(&[(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0)]),
            None
        );
    }

    #[test]
    fn the_spread_is_the_standard_error_of_the_slope() {
        // y = 0, 2, 1, 3: slope 0.8, intercept 0.3, residuals -0.3, 0.9,
        // -0.9, 0.3; SSE 1.8 over 2 degrees of freedom, Sxx 5.
        let f = least_squares(&[(0.0, 0.0), (1.0, 2.0), (2.0, 1.0), (3.0, 3.0)]).expect("a fit");
        assert!((f.slope - 0.8).abs() < 1e-12);
        assert!((f.intercept - 0.3).abs() < 1e-12);
        assert!((f.spread - (1.8f64 / 2.0 / 5.0).sqrt()).abs() < 1e-12);
    }

    proptest! {
        /// Points on a line give back that line, with no spread.
        #[test]
        fn a_straight_line_is_found_exactly(
            a in -1e4f64..1e4, b in -1e3f64..1e3, x0 in 0u32..1000, n in 3usize..120
        ) {
            let pts: Vec<(f64, f64)> = (0..n)
                .map(|i| { let x = f64::from(x0) + i as f64; (x, a + b * x) })
                .collect();
            let f = least_squares(&pts).expect("a fit");
            let scale = 1.0 + a.abs() + b.abs() * (f64::from(x0) + n as f64);
            prop_assert!((f.slope - b).abs() <= 1e-9 * scale, "{f:?}");
            prop_assert!((f.at(pts[0].0) - pts[0].1).abs() <= 1e-9 * scale);
            prop_assert!(f.spread <= 1e-9 * scale, "{f:?}");
        }

        /// Moving every point up leaves slope and spread as they were;
        /// scaling the ys scales both; reading the seconds backwards
        /// turns the slope round and keeps its spread.
        #[test]
        fn the_fit_follows_shifts_scales_and_reversal(
            ys in prop::collection::vec(0.0f64..1000.0, 3..40), c in -1e3f64..1e3, k in 0.1f64..10.0
        ) {
            let pts = |f: &dyn Fn(usize, f64) -> (f64, f64)| -> Vec<(f64, f64)> {
                ys.iter().enumerate().map(|(i, &y)| f(i, y)).collect()
            };
            let base = least_squares(&pts(&|i, y| (i as f64, y))).expect("a fit");
            let tol = 1e-7 * (1.0 + base.slope.abs() + base.spread);
            let up = least_squares(&pts(&|i, y| (i as f64, y + c))).expect("a fit");
            prop_assert!((up.slope - base.slope).abs() <= tol);
            prop_assert!((up.spread - base.spread).abs() <= tol);
            let scaled = least_squares(&pts(&|i, y| (i as f64, k * y))).expect("a fit");
            prop_assert!((scaled.slope - k * base.slope).abs() <= k * tol);
            prop_assert!((scaled.spread - k * base.spread).abs() <= k * tol);
            let n = ys.len() as f64;
            let back = least_squares(&pts(&|i, y| (n - 1.0 - i as f64, y))).expect("a fit");
            prop_assert!((back.slope + base.slope).abs() <= tol);
            prop_assert!((back.spread - base.spread).abs() <= tol);
        }

        /// The counts add up exactly: `behind` is sent minus completed
        /// over the seconds, the rates are the sums over their number,
        /// and a backlog that grows every second by a share above the
        /// limit, with latency rising, is never called steady.
        #[test]
        fn counts_add_up_and_a_growing_backlog_is_always_caught(
            rows in prop::collection::vec((0u64..5000, 0u64..5000, 0u64..100), 0..30),
            rate in 50u64..5000, excess in 2u64..20, n in 5usize..30
        ) {
            let seconds: Vec<Second> = rows.iter().map(|&(sent, completed, unsent)| Second {
                intended: sent + unsent, sent, unsent, completed, in_flight: 0, p50_ms: None, p99_ms: None,
            }).collect();
            let s = assess(&seconds, 0.0, 0);
            let sent: u64 = rows.iter().map(|r| r.0).sum();
            let completed: u64 = rows.iter().map(|r| r.1).sum();
            prop_assert_eq!(s.behind, sent as i64 - completed as i64);
            prop_assert_eq!(s.unsent, rows.iter().map(|r| r.2).sum::<u64>());
            if !rows.is_empty() {
                prop_assert!((s.sent_rps * rows.len() as f64 - sent as f64).abs() < 1e-6 * (1.0 + sent as f64));
            }
            // Without latency there is no trend, so never NOT_STEADY.
            prop_assert!(s.verdict != SteadyVerdict::NotSteady);

            let short = rate * excess / 100 + 1;
            let growing: Vec<Second> = (0..n).map(|i| {
                let queued = short * (i as u64 + 1);
                let wait = queued as f64 * 1000.0 / rate as f64;
                second(rate + short, rate, queued, 20.0 + wait, 30.0 + wait)
            }).collect();
            let g = assess(&growing, 0.0, 0);
            prop_assert_eq!(g.verdict, SteadyVerdict::NotSteady, "{:?}", g);
        }
    }
}
