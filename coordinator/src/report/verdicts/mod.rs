//! Every verdict the report makes about the run, in one place: whether the
//! experiment happened, whether the generator kept up, whether the target
//! kept up with the arrivals (`steady`), whether clocks and hardware can
//! be trusted. The codes and levels are documented in
//! docs/report.md; the exit status follows from them.

use std::net::IpAddr;

use loadfleet_proto::vocab::{
    AgentStatus, GrpcStatus, OutcomeClass, UnsentReason, VerdictCode, VerdictLevel,
};

use super::plan_info::{Placement, PlanInfo};
use crate::report_model::{AgentReport, Report, Scenario, Totals, Verdict};
use offered::{completeness_verdicts, failures_verdict, pool_verdict};

mod offered;
pub(crate) mod steady;
mod transport;
use crate::fleet::{LateFigures, RunResult};
use crate::plan::OnAgentLoss;
use crate::units;

/// All verdicts of one run, errors first.
pub(crate) fn all(
    result: &RunResult,
    t: &Totals,
    scenarios: &[Scenario],
    agents: &[AgentReport],
    info: &PlanInfo,
) -> Vec<Verdict> {
    let mut v = run_verdicts(result, t, agents, info);
    // Unsent because nothing started: the run's own verdict says why.
    if result.started {
        v.extend(completeness_verdicts(t, agents));
    }
    v.extend(pool_verdict(t, agents, info));
    v.extend(failures_verdict(t, info.failure_limits));
    v.extend(steady::verdicts(scenarios));
    v.extend(health_verdicts(result, t, agents, info));
    v.extend(localhost_verdicts(result, info));
    v.extend(delivery_clock_verdicts(result, info));
    v.extend(tls_verdict(info));
    v.extend(file_limit_verdicts(result, info));
    sort(&mut v);
    v
}

/// `--insecure`: the run measured whoever answered, with no proof that it
/// was the intended server. Said in every report of such a run, so a
/// figure taken from it is not mistaken for one taken with checks on.
fn tls_verdict(info: &PlanInfo) -> Option<Verdict> {
    info.tls.insecure.then(|| Verdict {
        level: VerdictLevel::Info,
        code: VerdictCode::InsecureTls,
        message: "target TLS certificates were not verified (--insecure / [tls] insecure = true): nothing proves the answers came from the intended server".into(),
    })
}

/// Agents whose open-file limit (as raised at start, from their hello) is
/// below what the plan lets them hold: past it, connections and streams fail
/// with errors that are the agent's, not the target's, so an error rate or
/// a count of open streams would be read against the wrong side.
fn file_limit_verdicts(result: &RunResult, info: &PlanInfo) -> Vec<Verdict> {
    let needed = loadfleet_proto::bounds::files_needed(info.max_in_flight, info.max_connections);
    result
        .agents
        .iter()
        .filter(|a| a.hello.open_files != 0 && a.hello.open_files < needed)
        .map(|a| Verdict {
            level: VerdictLevel::Warn,
            code: VerdictCode::GeneratorSaturated,
            message: format!(
                "agent {}'s open-file limit is {}, below the {needed} descriptors this plan lets it hold (max_in_flight {} + max_connections {} + a margin): past it, its connections and streams fail with errors of its own, not the target's; raise its hard limit (ulimit -Hn, LimitNOFILE=) or lower --max-in-flight",
                a.hello.agent_id, a.hello.open_files, info.max_in_flight, info.max_connections
            ),
        })
        .collect()
}

/// Errors first, then warnings, then the rest; otherwise in the order made.
pub(crate) fn sort(v: &mut [Verdict]) {
    v.sort_by_key(|v| v.level);
}

/// Events that arrived before they were sent, by the clocks' account: the
/// target's clock and the agents' disagree by at least that much, so every
/// delivery latency of the scenario is off by an unknown amount. The
/// figures stay in the report (counted, never clamped); this says so.
fn delivery_clock_verdicts(result: &RunResult, info: &PlanInfo) -> Vec<Verdict> {
    let offsets = super::sse::wall_offsets(result);
    let measured = match (
        offsets.iter().map(|&(o, _)| o).max_by_key(|o| o.unsigned_abs()),
        offsets.iter().map(|&(_, u)| u).max(),
    ) {
        (Some(o), Some(u)) => format!(
            "the agents' wall clocks agree with the coordinator's to within {:+.3} ms (±{:.3} ms), so the target's clock is the likely culprit",
            units::ns_to_ms(o),
            units::ns_to_ms(u)
        ),
        _ => "the agents' wall-clock offsets were not measured".to_owned(),
    };
    info.scenarios
        .iter()
        .zip(&result.aggregate.sse)
        .filter_map(|(s, m)| Some((s, m.as_ref()?)))
        .filter(|(_, m)| m.figures.negative > 0)
        .map(|(s, m)| {
            let with_time = m.figures.negative + m.figures.latency.len();
            Verdict {
                level: VerdictLevel::Warn,
                code: VerdictCode::Clock,
                message: format!(
                    "scenario {}: {} of {} events ({:.1}%) arrived before the target says it sent them, by up to {:.1} ms (p50 {:.1} ms): the target's and the agents' clocks disagree at least that much; {measured}. Delivery latency is off by that much; synchronise the clocks (chrony/NTP) or read it as relative",
                    s.name,
                    m.figures.negative,
                    with_time,
                    100.0 * m.figures.negative as f64 / with_time.max(1) as f64,
                    units::us_to_ms(m.figures.negative_latency.max()),
                    units::us_to_ms(m.figures.negative_latency.value_at_quantile(0.5)),
                ),
            }
        })
        .collect()
}

/// Agents sharing hardware with each other or with the target: the
/// generator and the server fight for the same CPUs, caches and kernel.
fn localhost_verdicts(result: &RunResult, info: &PlanInfo) -> Vec<Verdict> {
    // A run that never started measured nothing to be indicative of.
    if !result.started {
        return Vec::new();
    }
    let target = &info.target;
    let warn = |message: String| Verdict {
        level: VerdictLevel::Warn,
        code: VerdictCode::Localhost,
        message,
    };
    match &info.placement {
        Placement::Local { pinning } => vec![warn(format!(
            "agents, coordinator and target share one machine ({pinning}); memory, caches and the kernel are still shared, so treat latency and capacity as indicative — run agents on other hosts for numbers you can trust"
        ))],
        Placement::Remote {
            loopback,
            target_ips,
        } => {
            let mut v = Vec::new();
            if *loopback {
                v.push(warn(format!(
                    "the target {target} is a loopback address: it runs on the same host as the agents"
                )));
            }
            v.extend(shared_host(result, target_ips).map(|a| {
                warn(format!(
                    "the target {target} resolves to an address of agent {}'s own host ({}): that agent and the target share hardware",
                    a.hello.agent_id, a.hello.host
                ))
            }));
            v
        }
    }
}

/// Agents with one of the target's (non-loopback) addresses as their own.
fn shared_host<'a>(
    result: &'a RunResult,
    target_ips: &'a [IpAddr],
) -> impl Iterator<Item = &'a crate::fleet::AgentView> {
    result.agents.iter().filter(|a| {
        a.hello
            .host_addresses
            .iter()
            .filter_map(|h| h.parse::<IpAddr>().ok())
            .any(|h| !h.is_loopback() && target_ips.contains(&h))
    })
}

/// Send-lag p99 above this means the agent could not keep the schedule.
pub(crate) const SATURATED_LAG_MS: f64 = 10.0;
/// CPU use (of the agent's cores) above this leaves no headroom.
pub(crate) const SATURATED_CPU: f64 = 0.9;
/// Clock uncertainty (half the best probe round trip) above this makes the
/// common start instant too loose to compare agents second by second.
pub(crate) const CLOCK_TOLERANCE_MS: f64 = 5.0;

/// Whether the generator, the clocks or the target's known floor make the
/// figures untrustworthy.
fn health_verdicts(
    result: &RunResult,
    t: &Totals,
    agents: &[AgentReport],
    ctx: &PlanInfo,
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
            .map_or(0, |m| m.unsent.get(UnsentReason::Late));
        let capped = result
            .aggregate
            .agents
            .get(i)
            .map_or(0, |m| m.unsent.get(UnsentReason::ConcurrencyLimit));
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
                level: if lag_bad {
                    VerdictLevel::Error
                } else {
                    VerdictLevel::Warn
                },
                code: VerdictCode::GeneratorSaturated,
                message: format!(
                    "agent {} set the pace, not the target: {}; {}",
                    a.id,
                    figures.join(", "),
                    saturation_fix(
                        a,
                        result.agents.get(i).map_or(0, |v| v.hello.open_files),
                        capped,
                        ctx,
                        cpu_bad
                    ),
                ),
            });
        }
        if let Some(rtt) = a.clock_rtt_ms {
            if rtt / 2.0 > CLOCK_TOLERANCE_MS {
                v.push(Verdict {
                    level: VerdictLevel::Warn,
                    code: VerdictCode::Clock,
                    message: format!(
                        "agent {}'s clock offset is only known to ±{:.1} ms (best probe round trip {rtt:.1} ms): its start and per-second figures may be misaligned by that much",
                        a.id,
                        rtt / 2.0
                    ),
                });
            }
        }
    }
    let ok = t
        .latency_by_class_ms
        .get(OutcomeClass::Success.as_str())
        .or_else(|| t.latency_by_class_ms.get(OutcomeClass::GrpcOk.as_str()));
    if let (Some(floor), Some(ok)) = (floor, ok) {
        let floor_ms = floor.as_secs_f64() * 1000.0;
        if floor_ms > 0.0 && ok.p50 < floor_ms / 2.0 {
            v.push(Verdict {
                level: VerdictLevel::Error,
                code: VerdictCode::NoExperiment,
                message: format!(
                    "successful responses took {:.2} ms at the median, far below the target's known floor of {floor_ms:.1} ms: the work did not happen (a cache, a stub or the wrong target answered)",
                    ok.p50
                ),
            });
        }
    }
    v
}

/// What held a lagging agent back, and its fix: the CPU only when it was
/// busy; otherwise the limit it met (its connections, its in-flight cap,
/// its open files), or, with none met, the machine it shares.
fn saturation_fix(
    a: &AgentReport,
    open_files: u64,
    capped: u64,
    ctx: &PlanInfo,
    cpu_bad: bool,
) -> String {
    if cpu_bad {
        return "add agents or cores, or lower the rate".to_string();
    }
    let mut limits = Vec::new();
    if a.pool_saturated_share > 0.0 {
        limits.push(format!(
            "its connections were all busy for {:.0}% of the run (at most {}; raise --max-connections)",
            a.pool_saturated_share * 100.0,
            ctx.max_connections
        ));
    }
    if capped > 0 {
        limits.push(format!(
            "{capped} arrivals met its in-flight cap (--max-in-flight {})",
            ctx.max_in_flight
        ));
    }
    let needed = loadfleet_proto::bounds::files_needed(ctx.max_in_flight, ctx.max_connections);
    if open_files > 0 && open_files < needed {
        limits.push(format!(
            "its open-file limit {open_files} is below the {needed} this plan needs (raise ulimit -n)"
        ));
    }
    if limits.is_empty() {
        "its CPU was not busy, so something else on its machine held its loop up (another process, or the kernel): run agents where nothing else competes, or lower the rate".to_string()
    } else {
        format!("not its CPU: {}", limits.join("; "))
    }
}

/// Whether the run happened as planned at all.
fn run_verdicts(
    result: &RunResult,
    t: &Totals,
    agents: &[AgentReport],
    info: &PlanInfo,
) -> Vec<Verdict> {
    let mut v = Vec::new();
    let mut say = |level, code, message: String| {
        v.push(Verdict {
            level,
            code,
            message,
        })
    };
    if result.started && result.agents_joined < result.agents_expected {
        say(
            VerdictLevel::Warn,
            VerdictCode::AgentsMissing,
            format!(
                "only {} of {} expected agents joined in time, and the run went ahead on them (--min-agents): each carried a larger share of the load than planned, so set its figures against a full fleet's with care",
                result.agents_joined, result.agents_expected
            ),
        );
    }
    if let Some(f) = &result.failure {
        say(
            VerdictLevel::Error,
            VerdictCode::NoExperiment,
            format!("the run could not be carried out: {f}"),
        );
    }
    for (i, (a, view)) in agents
        .iter()
        .zip(&result.agents)
        .enumerate()
        .filter(|(_, (a, _))| a.status == AgentStatus::Lost)
    {
        let lost = result
            .aggregate
            .agents
            .get(i)
            .map_or(0, |m| m.unsent.get(UnsentReason::AgentLost));
        say(
            VerdictLevel::Error,
            VerdictCode::AgentLost,
            agent_lost_message(a, view, lost, result.on_agent_loss),
        );
    }
    let served: u64 = t
        .status
        .iter()
        .filter(|(c, _)| c.starts_with('2') || c.starts_with('3'))
        .map(|(_, n)| n)
        .sum::<u64>()
        + t.grpc
            .as_ref()
            .and_then(|g| g.status.get(GrpcStatus::Ok.as_str()))
            .copied()
            .unwrap_or(0);
    if result.started && t.intended == 0 && result.failure.is_none() {
        say(
            VerdictLevel::Error,
            VerdictCode::NoExperiment,
            "the schedule intended no requests at all (every rate is 0 or the run ended before the first arrival)".into(),
        );
    }
    if result.started && t.intended > 0 {
        if t.sent == 0 {
            say(
                VerdictLevel::Error,
                VerdictCode::NoExperiment,
                format!(
                    "none of the {} intended requests was sent: the experiment did not happen",
                    t.intended
                ),
            );
        } else if t.completed == 0 {
            say(
                VerdictLevel::Error,
                VerdictCode::NoExperiment,
                format!(
                    "{} requests were sent and not one was answered or failed before the run ended: the experiment did not happen",
                    t.sent
                ),
            );
        } else if served == 0 {
            let how = if !t.errors.is_empty() && t.status.is_empty() && t.grpc.is_none() {
                let kinds: Vec<String> = t.errors.iter().map(|(k, n)| format!("{n} {k}")).collect();
                let cause = transport::likely_cause(&t.errors, &info.addresses)
                    .map_or_else(String::new, |c| format!(", most likely because {c}"));
                format!(
                    "every request failed in transport ({}){cause}",
                    kinds.join(", ")
                )
            } else {
                let codes: Vec<String> = t
                    .status
                    .iter()
                    .chain(t.grpc.iter().flat_map(|g| &g.status))
                    .map(|(k, n)| format!("{n}× {k}"))
                    .collect();
                format!("no request succeeded (responses: {})", codes.join(", "))
            };
            say(
                VerdictLevel::Error,
                VerdictCode::NoExperiment,
                format!("{how}: the experiment did not happen, these latencies describe failures, not the service"),
            );
        }
    }
    if result.cut_short {
        say(
            VerdictLevel::Warn,
            VerdictCode::Partial,
            match &result.aborted {
                Some(id) => format!("the run was aborted when agent {id} was lost (--on-agent-loss abort); the figures cover what was measured until then, and the arrivals left are counted unsent agent_lost"),
                None => "the run was cut short; the figures cover what was measured until then".into(),
            },
        );
    }
    for (a, ledger) in result.agents.iter().zip(&result.protocol) {
        if ledger.rejected.is_empty() {
            continue;
        }
        let counts: Vec<String> = ledger
            .rejected
            .iter()
            .map(|(what, n)| format!("{n} {what}"))
            .collect();
        let (level, text) = match &ledger.violation {
            Some(r) => (
                VerdictLevel::Error,
                format!(
                    "agent {} broke the protocol ({r}) and was dropped; what it sent before stays in the figures, the offending message does not; refused: {}",
                    a.hello.agent_id,
                    counts.join(", ")
                ),
            ),
            None => (
                VerdictLevel::Warn,
                format!(
                    "agent {} sent messages that were ignored: {}",
                    a.hello.agent_id,
                    counts.join(", ")
                ),
            ),
        };
        say(level, VerdictCode::ProtocolViolation, text);
    }
    if result.corrupt_snapshots > 0 {
        say(
            VerdictLevel::Error,
            VerdictCode::CorruptSnapshot,
            format!(
                "{} snapshot(s) could not be decoded and are missing from the totals",
                result.corrupt_snapshots
            ),
        );
    }
    v
}

/// When the loss was noticed, what it cost (what of its share has an
/// unknown fate and what was certainly not sent, or that its last figures
/// came after all), and what the fleet did about it, in one sentence.
fn agent_lost_message(
    a: &AgentReport,
    view: &crate::fleet::AgentView,
    lost: u64,
    on_agent_loss: OnAgentLoss,
) -> String {
    let reason = a.lost_reason.as_deref().unwrap_or("unknown");
    let Some(at) = view.lost_at else {
        return format!(
            "agent {} was lost before this run ({reason}) and had no share in it",
            a.id
        );
    };
    let mut text = format!(
        "agent {} was lost {:.1}s into the run ({reason}); ",
        a.id,
        at.as_secs_f64()
    );
    let until = view.unknown_until.unwrap_or(at).as_secs_f64();
    match &view.late {
        LateFigures::Whole { snapshots } => text.push_str(&format!(
            "it delivered its last figures afterwards ({snapshots} snapshot(s)), so every request it sent is counted, and the {lost} arrival(s) of its share it never reached are unsent agent_lost"
        )),
        late => {
            text.push_str(&format!(
                "of its share, {} arrival(s) due before {until:.1}s that it never reported are unreported (it may or may not have sent them: nobody can say), and {lost} due after, when it had certainly stopped, are unsent agent_lost",
                a.unreported
            ));
            match late {
                LateFigures::Partial { snapshots } => text.push_str(&format!(
                    "; its last figures came only in part ({snapshots} snapshot(s), without their end)"
                )),
                LateFigures::Refused(why) => {
                    text.push_str(&format!("; its last figures were refused ({why})"))
                }
                LateFigures::None | LateFigures::Whole { .. } => {}
            }
        }
    }
    match (on_agent_loss, view.handed_over_at) {
        (OnAgentLoss::Redistribute, Some(from)) => text.push_str(&format!(
            "; the other agents sent its arrivals from {:.1}s on (--on-agent-loss redistribute), none of those it may have sent",
            from.as_secs_f64()
        )),
        (OnAgentLoss::Redistribute, None) => {
            text.push_str("; no agent was left to take over its arrivals before the schedule ended")
        }
        (OnAgentLoss::Abort, _) => text.push_str("; the run was aborted (--on-agent-loss abort)"),
        (OnAgentLoss::Continue, _) => {
            text.push_str("; the others kept to their own shares (--on-agent-loss continue)")
        }
    }
    if view.messages_after_loss > 0 {
        text.push_str(&format!(
            "; it came back afterwards ({} message(s)), which were ignored",
            view.messages_after_loss
        ));
    }
    text
}

/// Exit status of `run` (the table is in docs/report.md): 3 the run was not
/// carried out or is degraded (an error verdict, or cut short), 1 a
/// threshold failed, 0 otherwise.
pub(crate) fn exit_status(r: &Report) -> u8 {
    if r.verdicts.iter().any(|v| v.level == VerdictLevel::Error) || r.partial {
        3
    } else if r.thresholds.iter().any(|t| !t.passed) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests;
