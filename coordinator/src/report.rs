//! The report: one set of serde structs rendered as JSON (the contract in
//! PRODUCT.md), a text summary, an HTML page and an HdrHistogram interval
//! log. Renderers write to any `impl Write`, so tests can read them.

use std::collections::BTreeMap;
use std::io::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::aggregate::{Merged, CLASSES};
use crate::fleet::RunResult;
pub use crate::thresholds::Checked;
use crate::thresholds::{Figures, Threshold};

pub const SCHEMA: &str = "loadfleet.report/v1";

#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
    /// Number of values the percentiles were read from.
    pub count: u64,
}

impl Percentiles {
    /// Reads microsecond histograms as milliseconds.
    fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Self {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
            count: h.len(),
        })
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            "max" => self.max,
            "mean" => self.mean,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Unsent {
    pub total: u64,
    pub concurrency_limit: u64,
    pub late: u64,
    #[serde(flatten)]
    pub other: BTreeMap<String, u64>,
}

/// The headline figures, for the totals and for each scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    pub intended: u64,
    pub sent: u64,
    pub completed: u64,
    pub completed_in_window: u64,
    pub in_flight_at_end: u64,
    pub unsent: Unsent,
    pub status: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    /// Completions inside the measurement window / window length.
    pub throughput_rps: f64,
    /// From the intended send time; null when nothing completed.
    pub latency_ms: Option<Percentiles>,
    /// From the actual send time.
    pub service_time_ms: Option<Percentiles>,
    pub latency_by_class_ms: BTreeMap<String, Percentiles>,
    /// The latency distribution as HdrHistogram plots show it: value at
    /// percentiles 0, 50, 75, 87.5, … (halving the remainder each step) and 100.
    pub latency_curve_ms: Vec<CurvePoint>,
    /// Requests intended during warm-up, reported apart.
    pub warmup: Warmup,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct CurvePoint {
    pub percentile: f64,
    pub ms: f64,
}

/// Percentiles 1 - 1/2^k up to the histogram's resolution of its count.
fn curve(h: &Histogram<u64>) -> Vec<CurvePoint> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut k = 0;
    loop {
        let q = 1.0 - 0.5f64.powi(k);
        if (1.0 - q) * (h.len() as f64) < 1.0 || k > 30 {
            break;
        }
        out.push(CurvePoint {
            percentile: q * 100.0,
            ms: h.value_at_quantile(q) as f64 / 1000.0,
        });
        k += 1;
    }
    out.push(CurvePoint {
        percentile: 100.0,
        ms: h.max() as f64 / 1000.0,
    });
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct Warmup {
    pub seconds: f64,
    pub completed: u64,
    pub latency_ms: Option<Percentiles>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    /// "open" (arrivals on a schedule) or "closed" (a client population).
    pub model: &'static str,
    /// Offset of the scenario from the common start.
    pub start_s: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// The measurement window, as offsets from the common start.
    pub window: Window,
    /// Open model: the arrival process and the mean offered rate.
    pub process: Option<String>,
    pub offered_rps: Option<f64>,
    #[serde(flatten)]
    pub totals: Totals,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
}

/// What the report needs to know of each planned scenario.
#[derive(Debug, Clone)]
pub struct ScenarioInfo {
    pub name: String,
    pub model: &'static str,
    pub start: std::time::Duration,
    pub duration: std::time::Duration,
    pub warmup: std::time::Duration,
    pub process: Option<String>,
    pub offered_rps: Option<f64>,
}

impl ScenarioInfo {
    fn window(&self) -> Window {
        Window {
            start_s: (self.start + self.warmup).as_secs_f64(),
            end_s: (self.start + self.duration).as_secs_f64(),
        }
    }
}

/// Total length covered by a set of windows (overlaps counted once).
fn union_length(windows: &[Window]) -> f64 {
    let mut w: Vec<Window> = windows.to_vec();
    w.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for x in w {
        current = match current {
            Some((lo, hi)) if x.start_s <= hi => Some((lo, hi.max(x.end_s))),
            Some((lo, hi)) => {
                total += hi - lo;
                Some((x.start_s, x.end_s))
            }
            None => Some((x.start_s, x.end_s)),
        };
    }
    if let Some((lo, hi)) = current {
        total += hi - lo;
    }
    total
}

#[derive(Debug, Clone, Serialize)]
pub struct Lag {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentReport {
    pub id: String,
    pub host: String,
    /// Local address the agent sends load from, when it was bound to one.
    pub source: Option<String>,
    /// Where the agent's control connection came from.
    pub peer: Option<String>,
    /// Addresses of the agent's host (for the localhost check).
    pub host_addresses: Vec<String>,
    pub share: f64,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub completed: u64,
    /// Process CPU use as a fraction of the agent's CPUs (0..1).
    pub cpu: f64,
    /// Process CPU use in cores.
    pub cpu_cores: f64,
    /// Process CPU time over the run (user + system).
    pub cpu_seconds: f64,
    pub cpus: u32,
    /// Mean host-wide CPU use seen by the agent (0..1).
    pub host_cpu: f64,
    /// Schedule lag: actual minus intended send time.
    pub lag_ms: Option<Lag>,
    pub clock_offset_ms: Option<f64>,
    pub clock_rtt_ms: Option<f64>,
    pub status: &'static str,
    pub lost_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub level: &'static str,
    pub code: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct IntervalReport {
    /// Seconds from the common start to the interval's start.
    pub t: f64,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub unsent_by_reason: BTreeMap<String, u64>,
    pub completed: u64,
    /// Transport errors completed in the interval.
    pub errors: u64,
    #[serde(flatten)]
    pub classes: BTreeMap<String, u64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub in_flight: u64,
    /// Upper bound of requests in flight at once during the interval.
    pub max_in_flight: u64,
    pub max_lag_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub target: String,
    /// Until the last scenario ends.
    pub duration_s: f64,
    /// Length of the union of the scenarios' measurement windows.
    pub window_s: f64,
    pub drain_s: f64,
    pub max_in_flight_per_agent: u32,
    pub agents: usize,
    pub local: bool,
    pub started_at_unix: f64,
    pub elapsed_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// True when the run was cut short: figures cover what was measured.
    pub partial: bool,
    pub run: RunInfo,
    pub verdicts: Vec<Verdict>,
    pub thresholds: Vec<Checked>,
    pub totals: Totals,
    pub scenarios: Vec<Scenario>,
    pub agents: Vec<AgentReport>,
    pub intervals: Vec<IntervalReport>,
    /// With --repeat: every run's headline figures and their median/min/max.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<crate::repeats::Repeats>,
}

/// Facts about the run that the fleet result does not carry.
#[derive(Clone)]
pub struct Context<'a> {
    pub target: &'a str,
    pub scenarios: Vec<ScenarioInfo>,
    pub duration: std::time::Duration,
    pub drain: std::time::Duration,
    pub max_in_flight: u32,
    pub local: bool,
    /// Verdicts decided outside the fleet (e.g. shared hardware).
    pub extra_verdicts: Vec<Verdict>,
    pub thresholds: &'a [Threshold],
    /// Arrivals later than this were dropped as `late`.
    pub max_lag: std::time::Duration,
    /// The least latency the target can answer with (its configured work):
    /// successes much faster than this mean the work did not happen.
    pub latency_floor: Option<std::time::Duration>,
}

/// Send-lag p99 above this means the agent could not keep the schedule.
pub const SATURATED_LAG_MS: f64 = 10.0;
/// CPU use (of the agent's cores) above this leaves no headroom.
pub const SATURATED_CPU: f64 = 0.9;
/// Clock uncertainty (half the best probe round trip) above this makes the
/// common start instant too loose to compare agents second by second.
pub const CLOCK_TOLERANCE_MS: f64 = 5.0;

fn totals_for(m: &Merged, window_s: f64, warmup_s: f64) -> Totals {
    totals(m, window_s, warmup_s, 0)
}

fn totals(m: &Merged, window_s: f64, warmup_s: f64, in_flight_at_end: u64) -> Totals {
    let mut other = m.unsent.clone();
    let concurrency_limit = other
        .remove(loadfleet_proto::UNSENT_CONCURRENCY_LIMIT)
        .unwrap_or(0);
    let late = other.remove(loadfleet_proto::UNSENT_LATE).unwrap_or(0);
    let all = m.latency_all();
    Totals {
        intended: m.intended,
        sent: m.sent,
        completed: m.completed,
        completed_in_window: m.completed_in_window,
        in_flight_at_end,
        unsent: Unsent {
            total: m.unsent_total(),
            concurrency_limit,
            late,
            other,
        },
        status: m.status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        errors: m.errors.clone(),
        throughput_rps: if window_s > 0.0 {
            m.completed_in_window as f64 / window_s
        } else {
            0.0
        },
        latency_ms: Percentiles::of(&all),
        latency_curve_ms: curve(&all),
        service_time_ms: Percentiles::of(&m.service_time),
        latency_by_class_ms: m
            .latency
            .iter()
            .filter_map(|(k, h)| Percentiles::of(h).map(|p| (k.clone(), p)))
            .collect(),
        warmup: Warmup {
            seconds: warmup_s,
            completed: m.warmup_latency.len(),
            latency_ms: Percentiles::of(&m.warmup_latency),
        },
    }
}

/// Builds the report and decides the verdicts.
pub fn build(result: &RunResult, ctx: Context<'_>) -> Report {
    // A run cut short only measured until it stopped: its windows end there,
    // or throughput would be divided by time that never happened.
    let clip = |w: Window| -> Window {
        if result.cut_short {
            let end = result.elapsed.as_secs_f64();
            Window {
                start_s: w.start_s.min(end),
                end_s: w.end_s.min(end),
            }
        } else {
            w
        }
    };
    let windows: Vec<Window> = ctx.scenarios.iter().map(|s| clip(s.window())).collect();
    let window_s = union_length(&windows);
    let in_flight_at_end: u64 = result
        .agents
        .iter()
        .filter_map(|a| a.finished.as_ref().map(|f| f.in_flight_at_end))
        .sum();
    let elapsed_s = result.elapsed.as_secs_f64();
    let warmup_total: f64 = ctx.scenarios.iter().map(|s| s.warmup.as_secs_f64()).sum();
    let totals = totals(
        &result.aggregate.totals,
        window_s,
        warmup_total,
        in_flight_at_end,
    );
    let scenarios: Vec<Scenario> = ctx
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, info)| {
            let m = result
                .aggregate
                .scenarios
                .get(i)
                .cloned()
                .unwrap_or_default();
            let w = clip(info.window());
            Scenario {
                name: info.name.clone(),
                model: info.model,
                start_s: info.start.as_secs_f64(),
                duration_s: info.duration.as_secs_f64(),
                warmup_s: info.warmup.as_secs_f64(),
                window: w,
                process: info.process.clone(),
                offered_rps: info.offered_rps,
                // In-flight at the end is known per agent, not per scenario.
                totals: totals_for(&m, w.end_s - w.start_s, info.warmup.as_secs_f64()),
            }
        })
        .collect();

    let agents: Vec<AgentReport> = result
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let m = result.aggregate.agents.get(i).cloned().unwrap_or_default();
            let cpus = a.hello.cpus.max(1);
            let cores = if elapsed_s > 0.0 {
                m.cpu_seconds / elapsed_s
            } else {
                0.0
            };
            AgentReport {
                id: a.hello.agent_id.clone(),
                host: a.hello.host.clone(),
                source: Some(a.hello.source_address.clone()).filter(|s| !s.is_empty()),
                host_addresses: a.hello.host_addresses.clone(),
                peer: a.peer.map(|p| p.to_string()),
                share: a.share,
                intended: m.intended,
                sent: m.sent,
                unsent: m.unsent_total(),
                completed: m.completed,
                cpu: cores / f64::from(cpus),
                cpu_cores: cores,
                cpu_seconds: m.cpu_seconds,
                cpus,
                host_cpu: if m.host_cpu.1 > 0 {
                    m.host_cpu.0 / m.host_cpu.1 as f64
                } else {
                    0.0
                },
                lag_ms: (!m.lag.is_empty()).then(|| Lag {
                    p50: m.lag.value_at_quantile(0.5) as f64 / 1000.0,
                    p99: m.lag.value_at_quantile(0.99) as f64 / 1000.0,
                    max: m.lag.max() as f64 / 1000.0,
                }),
                clock_offset_ms: a.clock.map(|c| c.1 as f64 / 1e6),
                clock_rtt_ms: a.clock.map(|c| c.0 as f64 / 1e6),
                status: if a.lost.is_some() {
                    "lost"
                } else if a.finished.as_ref().is_some_and(|f| f.cut_short) {
                    "stopped"
                } else if a.finished.is_some() {
                    "finished"
                } else {
                    "unfinished"
                },
                lost_reason: a.lost.clone(),
            }
        })
        .collect();

    let interval_s = 1.0;
    let intervals: Vec<IntervalReport> = result
        .aggregate
        .intervals
        .iter()
        .map(|(&i, iv)| {
            let q = |q: f64| {
                iv.latency
                    .as_ref()
                    .filter(|h| !h.is_empty())
                    .map(|h| h.value_at_quantile(q) as f64 / 1000.0)
            };
            IntervalReport {
                t: i as f64 * interval_s,
                intended: iv.intended,
                sent: iv.sent,
                unsent: iv.unsent,
                unsent_by_reason: iv.unsent_by_reason.clone(),
                completed: iv.completed,
                errors: iv.errors,
                classes: CLASSES
                    .iter()
                    .map(|c| {
                        (
                            format!("completed_{c}"),
                            iv.classes.get(c).copied().unwrap_or(0),
                        )
                    })
                    .collect(),
                p50: q(0.5),
                p99: q(0.99),
                in_flight: iv.in_flight,
                max_in_flight: iv.max_in_flight,
                max_lag_ms: iv.max_lag_us as f64 / 1000.0,
            }
        })
        .collect();

    let mut verdicts = verdicts(result, &totals, &agents);
    verdicts.extend(health_verdicts(result, &totals, &agents, &ctx));
    verdicts.extend(ctx.extra_verdicts);
    verdicts.sort_by_key(|v| match v.level {
        "error" => 0,
        "warn" => 1,
        _ => 2,
    });

    let thresholds = ctx
        .thresholds
        .iter()
        .map(|th| {
            let t = match th.scenario() {
                Some(name) => scenarios.iter().find(|s| s.name == name).map(|s| &s.totals),
                None => Some(&totals),
            };
            match t {
                Some(t) => th.check(&figures(t)),
                None => Checked {
                    threshold: th.to_string(),
                    actual: None,
                    passed: false,
                },
            }
        })
        .collect();

    Report {
        schema: SCHEMA,
        partial: result.cut_short || result.failure.is_some(),
        run: RunInfo {
            target: ctx.target.to_string(),
            duration_s: ctx.duration.as_secs_f64(),
            window_s,
            drain_s: ctx.drain.as_secs_f64(),
            max_in_flight_per_agent: ctx.max_in_flight,
            agents: result.agents.len(),
            local: ctx.local,
            started_at_unix: result
                .started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            elapsed_s,
        },
        verdicts,
        thresholds,
        scenarios,
        totals,
        agents,
        intervals,
        repeats: None,
    }
}

/// The figures thresholds read from a set of totals.
fn figures(t: &Totals) -> Figures<'_> {
    let errors = t.errors.values().sum::<u64>()
        + t.status
            .iter()
            .filter(|(code, _)| code.starts_with('5'))
            .map(|(_, n)| n)
            .sum::<u64>();
    Figures {
        latency: t.latency_ms.as_ref(),
        intended: t.intended,
        unsent: t.unsent.total,
        completed: t.completed,
        errors,
        throughput_rps: t.throughput_rps,
    }
}

/// Whether the generator, the clocks or the target's known floor make the
/// figures untrustworthy.
fn health_verdicts(
    result: &RunResult,
    t: &Totals,
    agents: &[AgentReport],
    ctx: &Context<'_>,
) -> Vec<Verdict> {
    let floor = ctx.latency_floor;
    // Late drops only say the agent fell behind when the allowed lag was
    // itself generous; a tiny --max-lag makes them a choice, not a symptom.
    let late_means_behind = ctx.max_lag.as_secs_f64() * 1000.0 >= SATURATED_LAG_MS;
    let mut v = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        let late = result
            .aggregate
            .agents
            .get(i)
            .and_then(|m| m.unsent.get(loadfleet_proto::UNSENT_LATE).copied())
            .unwrap_or(0);
        let lag_p99 = a.lag_ms.as_ref().map_or(0.0, |l| l.p99);
        let lag_bad = lag_p99 > SATURATED_LAG_MS || (late > 0 && late_means_behind);
        let cpu_bad = a.cpu >= SATURATED_CPU;
        if lag_bad || cpu_bad {
            let mut figures = vec![
                format!("send-lag p99 {lag_p99:.2} ms (limit {SATURATED_LAG_MS} ms)"),
                format!("CPU {:.0}% of {} core(s)", a.cpu * 100.0, a.cpus),
            ];
            if late > 0 && late_means_behind {
                figures.push(format!("{late} arrivals dropped as late"));
            }
            v.push(Verdict {
                // Lag means the schedule was not kept: the measurement is
                // degraded. High CPU alone is a warning of no headroom.
                level: if lag_bad { "error" } else { "warn" },
                code: "GENERATOR_SATURATED",
                message: format!(
                    "agent {} set the pace, not the target: {}; add agents or cores, or lower the rate",
                    a.id,
                    figures.join(", ")
                ),
            });
        }
        if let Some(rtt) = a.clock_rtt_ms {
            if rtt / 2.0 > CLOCK_TOLERANCE_MS {
                v.push(Verdict {
                    level: "warn",
                    code: "CLOCK",
                    message: format!(
                        "agent {}'s clock offset is only known to ±{:.1} ms (best probe round trip {rtt:.1} ms): its start and per-second figures may be misaligned by that much",
                        a.id,
                        rtt / 2.0
                    ),
                });
            }
        }
    }
    if let (Some(floor), Some(ok)) = (floor, t.latency_by_class_ms.get("2xx")) {
        let floor_ms = floor.as_secs_f64() * 1000.0;
        if floor_ms > 0.0 && ok.p50 < floor_ms / 2.0 {
            v.push(Verdict {
                level: "error",
                code: "NO_EXPERIMENT",
                message: format!(
                    "successful responses took {:.2} ms at the median, far below the target's known floor of {floor_ms:.1} ms: the work did not happen (a cache, a stub or the wrong target answered)",
                    ok.p50
                ),
            });
        }
    }
    v
}

fn verdicts(result: &RunResult, t: &Totals, agents: &[AgentReport]) -> Vec<Verdict> {
    let mut v = Vec::new();
    let mut say = |level, code, message: String| {
        v.push(Verdict {
            level,
            code,
            message,
        })
    };
    if let Some(f) = &result.failure {
        say(
            "error",
            "NO_EXPERIMENT",
            format!("the run could not be carried out: {f}"),
        );
    }
    for a in agents.iter().filter(|a| a.status == "lost") {
        say(
            "error",
            "AGENT_LOST",
            format!(
                "agent {} was lost ({}); its share of the load was not (fully) sent and the figures are partial",
                a.id,
                a.lost_reason.as_deref().unwrap_or("unknown")
            ),
        );
    }
    let served: u64 = t
        .status
        .iter()
        .filter(|(c, _)| c.starts_with('2') || c.starts_with('3'))
        .map(|(_, n)| n)
        .sum();
    if result.started && t.intended == 0 && result.failure.is_none() {
        say(
            "error",
            "NO_EXPERIMENT",
            "the schedule intended no requests at all (every rate is 0 or the run ended before the first arrival)".into(),
        );
    }
    if result.started && t.intended > 0 {
        if t.sent == 0 {
            say(
                "error",
                "NO_EXPERIMENT",
                format!(
                    "none of the {} intended requests was sent: the experiment did not happen",
                    t.intended
                ),
            );
        } else if t.completed == 0 {
            say(
                "error",
                "NO_EXPERIMENT",
                format!(
                    "{} requests were sent and not one was answered or failed before the run ended: the experiment did not happen",
                    t.sent
                ),
            );
        } else if served == 0 {
            let how = if !t.errors.is_empty() && t.status.is_empty() {
                let kinds: Vec<String> = t.errors.iter().map(|(k, n)| format!("{n} {k}")).collect();
                format!("every request failed in transport ({})", kinds.join(", "))
            } else {
                let codes: Vec<String> =
                    t.status.iter().map(|(k, n)| format!("{n}× {k}")).collect();
                format!("no request succeeded (responses: {})", codes.join(", "))
            };
            say(
                "error",
                "NO_EXPERIMENT",
                format!("{how}: the experiment did not happen, these latencies describe failures, not the service"),
            );
        }
    }
    if t.unsent.total > 0 {
        let share = 100.0 * t.unsent.total as f64 / t.intended.max(1) as f64;
        say(
            "warn",
            "UNSENT",
            format!(
                "{} of {} intended requests ({share:.1}%) were never sent ({} concurrency_limit, {} late); latency figures describe only what was sent",
                t.unsent.total, t.intended, t.unsent.concurrency_limit, t.unsent.late
            ),
        );
    }
    if result.cut_short {
        say(
            "warn",
            "PARTIAL",
            "the run was cut short; the figures cover what was measured until then".into(),
        );
    }
    if result.corrupt_snapshots > 0 {
        say(
            "error",
            "CORRUPT_SNAPSHOT",
            format!(
                "{} snapshot(s) could not be decoded and are missing from the totals",
                result.corrupt_snapshots
            ),
        );
    }
    v
}

/// Exit status per PRODUCT.md: 3 run not carried out / degraded (an error
/// verdict), 1 a threshold failed, 0 otherwise.
pub fn exit_status(r: &Report) -> u8 {
    if r.verdicts.iter().any(|v| v.level == "error") || r.partial {
        3
    } else if r.thresholds.iter().any(|t| !t.passed) {
        1
    } else {
        0
    }
}

fn fmt_ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2}s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.1}ms")
    } else {
        format!("{v:.2}ms")
    }
}

fn percentile_row(
    out: &mut impl Write,
    label: &str,
    p: &Option<Percentiles>,
) -> std::io::Result<()> {
    match p {
        Some(p) => writeln!(
            out,
            "  {label:<14} p50 {:>9}  p90 {:>9}  p95 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}  mean {:>9}",
            fmt_ms(p.p50),
            fmt_ms(p.p90),
            fmt_ms(p.p95),
            fmt_ms(p.p99),
            fmt_ms(p.p999),
            fmt_ms(p.max),
            fmt_ms(p.mean)
        ),
        None => writeln!(out, "  {label:<14} (nothing completed)"),
    }
}

/// The human summary: verdicts first, then intended/sent/unsent, outcomes,
/// the full percentile set, throughput and the agents.
pub fn write_text(out: &mut impl Write, r: &Report, color: bool) -> std::io::Result<()> {
    let paint = |level: &str, s: &str| -> String {
        if !color {
            return s.to_string();
        }
        let code = match level {
            "error" => "1;31",
            "warn" => "33",
            _ => "36",
        };
        format!("\x1b[{code}m{s}\x1b[0m")
    };
    writeln!(out)?;
    writeln!(
        out,
        "loadfleet report — {} — {:.1}s on {} agent(s){}",
        r.run.target,
        r.run.duration_s,
        r.run.agents,
        if r.partial { " — PARTIAL" } else { "" }
    )?;
    for s in &r.scenarios {
        let load = match (s.model, s.offered_rps) {
            ("open", Some(rps)) => format!(
                "open, {rps:.0} req/s offered on average ({})",
                s.process.as_deref().unwrap_or("uniform")
            ),
            (model, _) => model.to_string(),
        };
        writeln!(
            out,
            "  scenario {:<16} {load}; {:.1}s from t={:.1}s, window {:.1}s..{:.1}s",
            s.name, s.duration_s, s.start_s, s.window.start_s, s.window.end_s
        )?;
    }
    for v in &r.verdicts {
        writeln!(
            out,
            "{}",
            paint(
                v.level,
                &format!("  [{}] {}: {}", v.level.to_uppercase(), v.code, v.message)
            )
        )?;
    }
    let t = &r.totals;
    writeln!(out)?;
    writeln!(
        out,
        "  intended {}   sent {}   unsent {} (concurrency_limit {}, late {})",
        t.intended, t.sent, t.unsent.total, t.unsent.concurrency_limit, t.unsent.late
    )?;
    writeln!(
        out,
        "  completed {}   in window {}   in flight at end {}   throughput {:.1} req/s over the {:.1}s window",
        t.completed, t.completed_in_window, t.in_flight_at_end, t.throughput_rps, r.run.window_s
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
    writeln!(out)?;
    writeln!(out, "  latency from the intended send time:")?;
    percentile_row(out, "all", &t.latency_ms)?;
    for (class, p) in &t.latency_by_class_ms {
        percentile_row(out, class, &Some(p.clone()))?;
    }
    percentile_row(out, "service time", &t.service_time_ms)?;
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
                "  {:<16} {:<6} intended {} sent {} unsent {} completed {} throughput {:.1} req/s",
                s.name, s.model, t.intended, t.sent, t.unsent.total, t.completed, t.throughput_rps
            )?;
            percentile_row(out, "", &t.latency_ms)?;
        }
    }
    writeln!(out)?;
    writeln!(out, "  agents:")?;
    for a in &r.agents {
        let lag = a.lag_ms.as_ref().map_or("-".into(), |l| {
            format!(
                "p50 {} p99 {} max {}",
                fmt_ms(l.p50),
                fmt_ms(l.p99),
                fmt_ms(l.max)
            )
        });
        writeln!(
            out,
            "  {:<18} {:<9} intended {:>7} sent {:>7} unsent {:>6} cpu {:>5.1}% lag {}",
            a.id,
            a.status,
            a.intended,
            a.sent,
            a.unsent,
            a.cpu * 100.0,
            lag
        )?;
    }
    if let Some(rep) = &r.repeats {
        write_repeats(out, rep)?;
    }
    if !r.thresholds.is_empty() {
        writeln!(out)?;
        writeln!(out, "  thresholds:")?;
        for c in &r.thresholds {
            let actual = c.actual.map_or("n/a".into(), |a| format!("{a:.3}"));
            let mark = if c.passed {
                paint("info", "pass")
            } else {
                paint("error", "FAIL")
            };
            writeln!(out, "  {mark} {} (actual {actual})", c.threshold)?;
        }
    }
    Ok(())
}

/// The per-second series as CSV, for spreadsheets and plotting tools.
pub fn write_csv(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    write!(
        out,
        "t,intended,sent,unsent,unsent_concurrency_limit,unsent_late,completed,errors"
    )?;
    for c in CLASSES {
        write!(out, ",completed_{c}")?;
    }
    writeln!(out, ",p50_ms,p99_ms,in_flight,max_in_flight,max_lag_ms")?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for iv in &r.intervals {
        let reason = |k: &str| iv.unsent_by_reason.get(k).copied().unwrap_or(0);
        write!(
            out,
            "{},{},{},{},{},{},{},{}",
            iv.t,
            iv.intended,
            iv.sent,
            iv.unsent,
            reason(loadfleet_proto::UNSENT_CONCURRENCY_LIMIT),
            reason(loadfleet_proto::UNSENT_LATE),
            iv.completed,
            iv.errors
        )?;
        for c in CLASSES {
            write!(
                out,
                ",{}",
                iv.classes
                    .get(&format!("completed_{c}"))
                    .copied()
                    .unwrap_or(0)
            )?;
        }
        writeln!(
            out,
            ",{},{},{},{},{:.3}",
            opt(iv.p50),
            opt(iv.p99),
            iv.in_flight,
            iv.max_in_flight,
            iv.max_lag_ms
        )?;
    }
    Ok(())
}

/// The runs side by side, then their median, min and max.
fn write_repeats(out: &mut impl Write, rep: &crate::repeats::Repeats) -> std::io::Result<()> {
    use crate::repeats::{Unit, COLUMNS};
    writeln!(out)?;
    writeln!(
        out,
        "  {} runs (figures above are run {}, the one with the median p99):",
        rep.count,
        rep.representative + 1
    )?;
    let mut head = format!("  {:<8}", "");
    for (name, _, _) in COLUMNS {
        head.push_str(&format!(" {name:>10}"));
    }
    writeln!(out, "{head}")?;
    for (label, values) in rep.table() {
        let mut line = format!("  {label:<8}");
        for ((_, _, unit), v) in COLUMNS.iter().zip(values) {
            let cell = match (v, unit) {
                (Some(x), Unit::Millis) => fmt_ms(x),
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

pub fn write_json(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, r).map_err(std::io::Error::other)?;
    writeln!(out)
}

/// Tags may not hold spaces, commas or other separators of the log format.
fn hlog_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The HdrHistogram interval log: one tagged entry per interval and outcome
/// class, readable by the standard HdrHistogram tools.
pub fn write_hlog(
    out: &mut impl Write,
    result: &RunResult,
    scenarios: &[String],
) -> std::io::Result<()> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    let start = result
        .started_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("loadfleet latency from intended send time, microseconds")
        .with_start_time(std::time::UNIX_EPOCH + start)
        .with_base_time(std::time::UNIX_EPOCH + start)
        .with_max_value_divisor(1000.0);
    let mut writer = builder
        .begin_log_with(&mut *out, &mut serializer)
        .map_err(std::io::Error::other)?;
    for (&i, iv) in &result.aggregate.intervals {
        for ((scenario, class), h) in &iv.latency_by_class {
            if h.is_empty() {
                continue;
            }
            let name = scenarios
                .get(*scenario as usize)
                .map_or_else(|| format!("scenario-{scenario}"), |n| hlog_safe(n));
            let tag_text = format!("{name}.{class}");
            let tag = Tag::new(&tag_text);
            writer
                .write_histogram(
                    h,
                    std::time::Duration::from_secs(i),
                    std::time::Duration::from_secs(1),
                    tag,
                )
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Aggregate;
    use crate::fleet::AgentView;
    use loadfleet_proto::histogram::{encode, new_histogram};
    use loadfleet_proto::v1;
    use std::time::Duration;

    /// One agent whose snapshot has `n` 200s at `latency_us`, `lag_us` of
    /// send lag and `cpu_seconds` over a 10 s run.
    fn result(n: u64, latency_us: u64, lag_us: u64, cpu_seconds: f64, rtt_ms: u64) -> RunResult {
        let mut lat = new_histogram();
        let mut lag = new_histogram();
        for _ in 0..n {
            lat.record(latency_us).unwrap();
            lag.record(lag_us).unwrap();
        }
        let mut aggregate = Aggregate::new(1, 1);
        aggregate
            .add(
                0,
                &v1::Snapshot {
                    intended: n,
                    sent: n,
                    completed: n,
                    completed_in_window: n,
                    status: [(200, n)].into_iter().collect(),
                    latency: [("2xx".to_string(), encode(&lat).unwrap())]
                        .into_iter()
                        .collect(),
                    lag: encode(&lag).unwrap(),
                    cpu_seconds,
                    ..Default::default()
                },
            )
            .unwrap();
        RunResult {
            agents: vec![AgentView {
                hello: v1::Hello {
                    agent_id: "a0".into(),
                    cpus: 1,
                    ..Default::default()
                },
                peer: None,
                clock: Some((rtt_ms * 1_000_000, 0)),
                finished: Some(v1::Finished::default()),
                lost: None,
                share: 1.0,
            }],
            aggregate,
            failure: None,
            cut_short: false,
            started: true,
            started_at: std::time::SystemTime::now(),
            elapsed: Duration::from_secs(10),
            corrupt_snapshots: 0,
        }
    }

    fn context(floor: Option<Duration>) -> Context<'static> {
        Context {
            target: "http://t/",
            scenarios: vec![ScenarioInfo {
                name: "s".into(),
                model: "open",
                start: Duration::ZERO,
                duration: Duration::from_secs(10),
                warmup: Duration::ZERO,
                process: Some("uniform".into()),
                offered_rps: Some(10.0),
            }],
            duration: Duration::from_secs(10),
            drain: Duration::from_secs(1),
            max_in_flight: 100,
            local: false,
            extra_verdicts: Vec::new(),
            thresholds: &[],
            max_lag: Duration::from_secs(1),
            latency_floor: floor,
        }
    }

    fn codes(r: &Report) -> Vec<(&'static str, &'static str)> {
        r.verdicts.iter().map(|v| (v.code, v.level)).collect()
    }

    #[test]
    fn a_healthy_run_has_no_verdicts_and_exits_0() {
        let r = build(
            &result(100, 5_000, 50, 0.5, 1),
            context(Some(Duration::from_millis(2))),
        );
        assert!(r.verdicts.is_empty(), "{:?}", r.verdicts);
        assert_eq!(exit_status(&r), 0);
        assert_eq!(r.totals.latency_ms.as_ref().map(|p| p.count), Some(100));
    }

    #[test]
    fn lag_saturation_is_an_error_cpu_alone_a_warning() {
        let r = build(&result(100, 5_000, 20_000, 0.5, 1), context(None));
        assert!(
            codes(&r).contains(&("GENERATOR_SATURATED", "error")),
            "{:?}",
            r.verdicts
        );
        assert_eq!(exit_status(&r), 3);
        let r = build(&result(100, 5_000, 50, 9.5, 1), context(None));
        assert!(
            codes(&r).contains(&("GENERATOR_SATURATED", "warn")),
            "{:?}",
            r.verdicts
        );
        assert!(
            r.verdicts[0].message.contains("CPU 95%"),
            "{}",
            r.verdicts[0].message
        );
        assert_eq!(exit_status(&r), 0);
    }

    #[test]
    fn loose_clock_is_flagged() {
        let r = build(&result(100, 5_000, 50, 0.5, 30), context(None));
        let clock = r
            .verdicts
            .iter()
            .find(|v| v.code == "CLOCK")
            .expect("CLOCK verdict");
        assert!(clock.message.contains("±15.0 ms"), "{}", clock.message);
    }

    #[test]
    fn answers_below_the_floor_are_no_experiment() {
        let r = build(
            &result(100, 300, 50, 0.5, 1),
            context(Some(Duration::from_millis(100))),
        );
        assert!(
            codes(&r).contains(&("NO_EXPERIMENT", "error")),
            "{:?}",
            r.verdicts
        );
        assert_eq!(exit_status(&r), 3);
    }
}
