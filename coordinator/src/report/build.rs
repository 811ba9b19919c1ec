//! From what the fleet measured ([`RunResult`]) and what was planned
//! ([`PlanInfo`]) to the [`Report`]: the only place that turns histograms
//! into figures.

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::percentiles;
use loadfleet_proto::vocab::{AgentStatus, OutcomeClass};

use super::parts::{per_second, request_of, unsent_of};
use super::plan_info::{Placement, PlanInfo, ScenarioInfo};
use super::{sse, verdicts};
use crate::aggregate::IntervalAgg;
use crate::figures::Scope;
use crate::fleet::RunResult;
use crate::report_model::{
    AgentReport, Checked, CurvePoint, Grpc, IntervalReport, Lag, LateAgentReport, Phases,
    ProtocolInfo, Report, RequestReport, RunInfo, Scenario, Totals, Warmup, Window, SCHEMA,
};
use crate::units;
use loadfleet_proto::figures::{Figures, RequestFigures};

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
            ms: units::us_to_ms(h.value_at_quantile(q)),
        });
        k += 1;
    }
    out.push(CurvePoint {
        percentile: 100.0,
        ms: units::us_to_ms(h.max()),
    });
    out
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

/// The totals of merged figures `m`, of which `unreported` arrivals have
/// an unknown fate (booked apart from the figures, `Aggregate::unreported`).
fn totals_of(m: &Figures, unreported: u64, window_s: f64, warmup_s: f64) -> Totals {
    // Every request sent either completed (with a status or an error) or
    // has no outcome: that is what is left in flight, the same way for the
    // totals, each scenario and each agent, so they add up.
    let in_flight_at_end = m.sent.saturating_sub(m.completed);
    let per_window = |n: u64| per_second(n, window_s);
    let all = m.latency.all();
    Totals {
        intended: m.intended,
        sent: m.sent,
        completed: m.completed,
        completed_in_window: m.completed_in_window,
        completed_ok_in_window: m.completed_ok_in_window,
        in_flight_at_end,
        unsent: unsent_of(&m.unsent),
        unreported,
        status: m.status.by_word(),
        errors: m.errors.by_word(),
        grpc: grpc_of(m),
        failures: m.failures(),
        throughput_rps: per_window(m.completed_in_window),
        throughput_ok_rps: per_window(m.completed_ok_in_window),
        latency_lower_bound: in_flight_at_end > 0,
        pool_wait_ms: percentiles(&m.pool_wait),
        latency_ms: percentiles(&all),
        latency_curve_ms: curve(&all),
        service_time_ms: percentiles(&m.service_time),
        phases: Phases {
            connect_ms: percentiles(&m.connect_time),
            tls_handshake_ms: percentiles(&m.tls_time),
            ttfb_ms: percentiles(&m.ttfb),
            body_ms: percentiles(&m.body_time),
            connections_opened: m.connections_opened,
            connections_reused: m.connections_reused,
        },
        latency_by_class_ms: m
            .latency
            .iter()
            .filter_map(|(k, h)| percentiles(h).map(|p| (k.as_str().to_owned(), p)))
            .collect(),
        warmup: Warmup {
            seconds: warmup_s,
            completed: m.warmup_latency.len(),
            latency_ms: percentiles(&m.warmup_latency),
        },
    }
}

/// The gRPC figures of `m`; `None` when no call answered a grpc-status,
/// so an HTTP run's report has no `grpc` key.
fn grpc_of(m: &Figures) -> Option<Grpc> {
    let calls = m.grpc_status.total();
    if calls == 0 {
        return None;
    }
    let of = m.completed.max(calls) as f64;
    Some(Grpc {
        calls,
        status: m.grpc_status.by_word(),
        rate: m
            .grpc_status
            .iter()
            .map(|(k, n)| (k.as_str().to_owned(), n as f64 / of))
            .collect(),
    })
}

/// Each request of a scenario's mix, named as in the plan, from its merged
/// figures; throughput over the scenario's window of `window_s` seconds.
fn requests_of(names: &[String], merged: &[RequestFigures], window_s: f64) -> Vec<RequestReport> {
    names
        .iter()
        .enumerate()
        .map(|(k, name)| request_of(name, &merged.get(k).cloned().unwrap_or_default(), window_s))
        .collect()
}

/// Builds the report and decides the verdicts.
pub(crate) fn build(result: &RunResult, ctx: &PlanInfo) -> Report {
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
    let elapsed_s = result.elapsed.as_secs_f64();
    let warmup_total: f64 = ctx.scenarios.iter().map(|s| s.warmup.as_secs_f64()).sum();
    let unreported = &result.aggregate.unreported;
    let mut totals = totals_of(
        &result.aggregate.totals,
        unreported.total,
        window_s,
        warmup_total,
    );
    let mut scenarios: Vec<Scenario> = ctx
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
            let unreported = unreported.scenarios.get(i).copied().unwrap_or(0);
            Scenario {
                name: info.name.clone(),
                model: info.model.to_string(),
                start_s: info.start.as_secs_f64(),
                duration_s: info.duration.as_secs_f64(),
                warmup_s: info.warmup.as_secs_f64(),
                window: w,
                load: String::new(),
                process: info.process.clone(),
                offered_rps: info.offered_rps,
                totals: totals_of(
                    &m,
                    unreported,
                    w.end_s - w.start_s,
                    info.warmup.as_secs_f64(),
                ),
                sse: info.sse_send_time.as_ref().map(|send_time| {
                    let merged = result
                        .aggregate
                        .sse
                        .get(i)
                        .cloned()
                        .flatten()
                        .unwrap_or_default();
                    sse::report(&merged, send_time, result, 1.0)
                }),
                flows: result
                    .aggregate
                    .flows
                    .get(i)
                    .and_then(Option::as_ref)
                    .map(|f| super::flows::flows_of(&m, f, unreported, w.end_s - w.start_s)),
                steps: super::flows::steps_of(
                    &info.steps,
                    result.aggregate.requests.get(i).map_or(&[], Vec::as_slice),
                    w.end_s - w.start_s,
                ),
                requests: if !info.steps.is_empty() {
                    Vec::new()
                } else if info.requests.len() == 1 {
                    // Agents keep no split for a mix of one: its figures
                    // are the scenario's.
                    requests_of(&info.requests, &[m.as_request()], w.end_s - w.start_s)
                } else {
                    requests_of(
                        &info.requests,
                        result.aggregate.requests.get(i).map_or(&[], Vec::as_slice),
                        w.end_s - w.start_s,
                    )
                },
                steadiness: None,
            }
        })
        .collect();
    // A flow fails by its checks and captures too, not only by the status
    // of the step that ended it: its scenario's failures are its failed
    // flows, and the run's add up the scenarios'.
    if scenarios.iter().any(|s| s.flows.is_some()) {
        for s in &mut scenarios {
            if let Some(f) = &s.flows {
                s.totals.failures = f.failed;
            }
        }
        totals.failures = scenarios.iter().map(|s| s.totals.failures).sum();
    }

    verdicts::steady::judge(result, &mut scenarios, &ctx.scenarios);

    let agents = agent_reports(result, elapsed_s);
    let intervals = interval_reports(result);
    let verdicts = verdicts::all(result, &totals, &scenarios, &agents, ctx);

    let thresholds = ctx
        .thresholds
        .iter()
        .map(|th| match Scope::find(&totals, &scenarios, th.scenario()) {
            Some(t) => th.check(&t),
            None => Checked {
                threshold: th.to_string(),
                actual: None,
                unit: th.unit().to_string(),
                passed: false,
            },
        })
        .collect();

    Report {
        schema: SCHEMA.to_string(),
        partial: result.cut_short || result.failure.is_some(),
        run: RunInfo {
            target: ctx.target.to_string(),
            duration_s: ctx.duration.as_secs_f64(),
            window_s,
            drain_s: ctx.drain.as_secs_f64(),
            max_in_flight_per_agent: ctx.max_in_flight,
            connections_per_agent: ctx.connections,
            max_connections_per_agent: ctx.max_connections,
            agents: result.agents.len(),
            agents_expected: result.agents_expected,
            local: matches!(ctx.placement, Placement::Local { .. }),
            started_at_unix: result
                .started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            elapsed_s,
            protocol: ProtocolInfo {
                asked: ctx.protocol.as_str().to_string(),
                connections: result.aggregate.totals.connections.by_word(),
            },
            tls: ctx.tls.clone(),
        },
        verdicts,
        thresholds,
        scenarios,
        totals,
        agents,
        late_agents: result
            .late_agents
            .iter()
            .map(|a| LateAgentReport {
                id: a.id.clone(),
                host: a.host.clone(),
                peer: a.peer.map(|p| p.to_string()),
                outcome: if a.stood_by { "standby" } else { "refused" }.to_string(),
                reason: a.reason.clone(),
            })
            .collect(),
        intervals,
        repeats: None,
    }
}

/// Each agent's share of the work and how it kept up.
fn agent_reports(result: &RunResult, elapsed_s: f64) -> Vec<AgentReport> {
    result
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
                unsent: m.unsent.total(),
                unreported: result
                    .aggregate
                    .unreported
                    .agents
                    .get(i)
                    .copied()
                    .unwrap_or(0),
                completed: m.completed,
                cpu: cores / f64::from(cpus),
                cpu_cores: cores,
                cpu_seconds: m.cpu_seconds,
                cpus,
                host_cpu: m.host_cpu.get().unwrap_or(0.0),
                lag_ms: (!m.lag.is_empty()).then(|| Lag {
                    p50: units::us_to_ms(m.lag.value_at_quantile(0.5)),
                    p99: units::us_to_ms(m.lag.value_at_quantile(0.99)),
                    max: units::us_to_ms(m.lag.max()),
                }),
                clock_offset_ms: a.clock.map(|c| units::ns_to_ms(c.1)),
                clock_rtt_ms: a.clock.map(|c| units::ns_to_ms(c.0)),
                clock_uncertainty_ms: a.clock.map(|c| units::ns_to_ms(c.0) / 2.0),
                in_flight_at_end: a.finished.as_ref().map(|f| f.in_flight_at_end),
                pool_saturated_share: if elapsed_s > 0.0 {
                    (units::ns_to_s(m.pool_saturated_ns) / elapsed_s).min(1.0)
                } else {
                    0.0
                },
                protocol: m.connections.by_word(),
                status: if a.lost.is_some() {
                    AgentStatus::Lost
                } else if a.finished.as_ref().is_some_and(|f| f.cut_short) {
                    AgentStatus::Stopped
                } else if a.finished.is_some() {
                    AgentStatus::Finished
                } else {
                    AgentStatus::Unfinished
                },
                lost_reason: a.lost.clone(),
            }
        })
        .collect()
}

/// The per-second series.
fn interval_reports(result: &RunResult) -> Vec<IntervalReport> {
    result
        .aggregate
        .intervals
        .iter()
        .map(|(&i, iv)| interval_report(i, iv))
        .collect()
}

/// One second of the series, from its merged (or folded) state: what the
/// final report's `intervals[]` and the live `intervals.csv` both show.
pub(crate) fn interval_report(i: u64, iv: &IntervalAgg) -> IntervalReport {
    let interval_s = 1.0;
    let latency = iv.latency_summary();
    let ms = |us: Option<u64>| us.map(units::us_to_ms);
    IntervalReport {
        t: i as f64 * interval_s,
        intended: iv.intended,
        sent: iv.sent,
        unsent: iv.unsent,
        unsent_by_reason: iv.unsent_by_reason.by_word(),
        unreported: iv.unreported,
        completed: iv.completed,
        errors: iv.errors,
        classes: OutcomeClass::ALL
            .iter()
            .map(|c| {
                (
                    format!("completed_{c}"),
                    iv.classes.get(c).copied().unwrap_or(0),
                )
            })
            .collect(),
        p50: ms(latency.p50_us),
        p99: ms(latency.p99_us),
        in_flight: iv.in_flight,
        max_in_flight: iv.max_in_flight,
        max_lag_ms: units::us_to_ms(iv.max_lag_us),
    }
}
