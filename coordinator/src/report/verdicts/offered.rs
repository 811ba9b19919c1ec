//! Whether the load planned was offered and answered: arrivals never sent
//! (UNSENT), requests without an outcome (INCOMPLETE), the agents' own
//! pools holding load back (GENERATOR_POOL), and answers that were
//! failures (FAILURES). The limits are documented in docs/report.md.

use loadfleet_proto::vocab::{AgentStatus, GrpcStatus, UnsentReason, VerdictCode, VerdictLevel};

use crate::report::plan_info::{FailureLimits, PlanInfo};
use crate::report_model::{AgentReport, Totals, Verdict};

/// Unsent arrivals above this share of the intended ones make the run
/// degraded: the load offered was not the load planned.
pub(super) const UNSENT_ERROR_SHARE: f64 = 0.05;
/// Requests without an outcome above this share of those sent make the run
/// degraded: the latency figures leave out the slowest of them.
pub(super) const INCOMPLETE_ERROR_SHARE: f64 = 0.01;
/// An agent whose connections were all busy, with requests waiting, for
/// at least this share of the run held the load back: the run was partly
/// a closed model.
pub(super) const POOL_ERROR_SHARE: f64 = 0.05;

fn level_above(share: f64, limit: f64) -> VerdictLevel {
    if share > limit {
        VerdictLevel::Error
    } else {
        VerdictLevel::Warn
    }
}

/// Whether the load planned went out (UNSENT) and every request sent has
/// an outcome (INCOMPLETE).
pub(super) fn completeness_verdicts(t: &Totals, agents: &[AgentReport]) -> Vec<Verdict> {
    let mut v = Vec::new();
    if t.unsent.total > 0 {
        let share = t.unsent.total as f64 / t.intended.max(1) as f64;
        v.push(Verdict {
            level: level_above(share, UNSENT_ERROR_SHARE),
            code: VerdictCode::Unsent,
            message: format!(
                "{} of {} intended requests ({:.1}%, limit {:.0}%) were never sent ({}); the load offered was not the load planned, and latency figures describe only what was sent",
                t.unsent.total,
                t.intended,
                share * 100.0,
                UNSENT_ERROR_SHARE * 100.0,
                crate::report::format::unsent_reasons(&t.unsent).unwrap_or_default(),
            ),
        });
    }
    if t.in_flight_at_end > 0 {
        let share = t.in_flight_at_end as f64 / t.sent.max(1) as f64;
        let lost = agents.iter().any(|a| a.status == AgentStatus::Lost);
        v.push(Verdict {
            level: level_above(share, INCOMPLETE_ERROR_SHARE),
            code: VerdictCode::Incomplete,
            message: format!(
                "{} of {} requests sent ({:.1}%, limit {:.0}%) were still in flight when the drain ended{} and have no outcome; each took at least as long as the drain, so every latency figure, which leaves them out, is a lower bound — lengthen --drain or lower the load",
                t.in_flight_at_end,
                t.sent,
                share * 100.0,
                INCOMPLETE_ERROR_SHARE * 100.0,
                if lost {
                    " (or were on a lost agent, whose outcomes never arrived)"
                } else {
                    ""
                },
            ),
        });
    }
    v
}

/// The agents' own connection pools held load back: requests waited for a
/// connection, so the target never saw more than the pools' size in
/// concurrent requests, whatever the schedule asked for.
pub(super) fn pool_verdict(t: &Totals, agents: &[AgentReport], info: &PlanInfo) -> Option<Verdict> {
    let waits = t.pool_wait_ms.as_ref()?;
    let worst = agents
        .iter()
        .map(|a| a.pool_saturated_share)
        .fold(0.0, f64::max);
    let busy: Vec<String> = agents
        .iter()
        .filter(|a| a.pool_saturated_share > 0.0)
        .map(|a| format!("{} {:.0}%", a.id, a.pool_saturated_share * 100.0))
        .collect();
    let pool_timeouts = t
        .unsent
        .other
        .get(UnsentReason::PoolTimeout.as_str())
        .copied()
        .unwrap_or(0);
    let fleet = u64::from(info.max_connections) * agents.len() as u64;
    let mut message = format!(
        "the agents' connections (at most {} per agent, {fleet} in all) were all busy, with requests waiting, for up to {:.0}% of the run ({}); {} request(s) waited for a connection (p50 {}, p99 {})",
        info.max_connections,
        worst * 100.0,
        if busy.is_empty() { "-".to_string() } else { busy.join(", ") },
        waits.count,
        crate::report::format::ms(waits.p50),
        crate::report::format::ms(waits.p99),
    );
    if pool_timeouts > 0 {
        message.push_str(&format!(
            " and {pool_timeouts} ran out of time waiting and were never sent (unsent {})",
            UnsentReason::PoolTimeout
        ));
    }
    message.push_str(&format!(
        ": the target saw at most {fleet} concurrent request{}, so the run was partly a closed model and its latency includes the generator's own queue — raise --max-connections (or lower the rate)",
        if fleet == 1 { "" } else { "s" }
    ));
    Some(Verdict {
        level: if worst >= POOL_ERROR_SHARE || pool_timeouts > 0 {
            VerdictLevel::Error
        } else {
            VerdictLevel::Warn
        },
        code: VerdictCode::GeneratorPool,
        message,
    })
}

/// Failures above the limits: the run's figures describe a target that
/// mostly said no, which a latency figure alone hides (a 503 in 2 ms is
/// fast). States the share by status and by error kind.
pub(super) fn failures_verdict(t: &Totals, limits: FailureLimits) -> Option<Verdict> {
    let share = t.failures as f64 / t.completed.max(1) as f64;
    if t.failures == 0 || share <= limits.warn {
        return None;
    }
    let by_status = t
        .status
        .iter()
        .filter(|(code, _)| code.parse::<u16>().is_ok_and(|c| c >= 400))
        .map(|(code, n)| format!("{code} {n}"));
    let by_kind = t.errors.iter().map(|(kind, n)| format!("{kind} {n}"));
    let by_grpc = t.grpc.iter().flat_map(|g| {
        g.status
            .iter()
            .filter(|(name, _)| name.as_str() != GrpcStatus::Ok.as_str())
            .map(|(name, n)| format!("grpc {name} {n}"))
    });
    let parts: Vec<String> = by_status.chain(by_kind).chain(by_grpc).collect();
    Some(Verdict {
        level: if share > limits.error {
            VerdictLevel::Error
        } else {
            VerdictLevel::Warn
        },
        code: VerdictCode::Failures,
        message: format!(
            "{} of {} completed requests ({:.1}%) failed ({}); warn above {:.0}% (--failures-warn), error above {:.0}% (--failures-error): the latency figures mostly describe refusals, not the work",
            t.failures,
            t.completed,
            share * 100.0,
            parts.join(", "),
            limits.warn * 100.0,
            limits.error * 100.0,
        ),
    })
}
