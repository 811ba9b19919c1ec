//! A flow scenario in the text report: how its flows ended, with their
//! latency (from each flow's intended start) and active time, then the
//! funnel, one row per step, and each check by its text.

use std::io::Write;

use super::format::ms;
use crate::report_model::{FlowReport, Percentiles, Scenario};

fn p3(p: &Option<Percentiles>) -> (String, String, String) {
    p.as_ref()
        .map_or(("-".into(), "-".into(), "-".into()), |p| {
            (ms(p.p50), ms(p.p95), ms(p.p99))
        })
}

/// The flows of scenario `s`, its steps and their checks.
pub(super) fn write(out: &mut impl Write, s: &Scenario, f: &FlowReport) -> std::io::Result<()> {
    writeln!(out)?;
    let reasons: Vec<String> = f
        .failed_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    writeln!(
        out,
        "  flows of {}: intended {} started {} unsent {}{} completed {} failed {}{} in flight at end {} · {:.1} flows/s completed",
        s.name,
        f.intended,
        f.started,
        f.unsent.total,
        super::format::unreported(f.unreported),
        f.completed,
        f.failed,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        f.in_flight_at_end,
        f.throughput_fps
    )?;
    let (p50, p95, p99) = p3(&f.latency_ms);
    let (a50, a95, a99) = p3(&f.active_ms);
    writeln!(
        out,
        "  flow latency   p50 {p50:>9}  p95 {p95:>9}  p99 {p99:>9}   active (less think time) p50 {a50:>9}  p95 {a95:>9}  p99 {a99:>9}"
    )?;
    let width = s
        .steps
        .iter()
        .map(|q| q.request.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 40);
    writeln!(
        out,
        "  {:<width$} {:>8} {:>8} {:>7} {:>11} {:>9} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "step",
        "reached",
        "sent",
        "unsent",
        "not reached",
        "completed",
        "failures",
        "p50",
        "p95",
        "p99",
        "start lag99"
    )?;
    for q in &s.steps {
        let (p50, p95, p99) = p3(&q.request.latency_ms);
        let lag = q.start_lag_ms.as_ref().map_or("-".into(), |p| ms(p.p99));
        writeln!(
            out,
            "  {:<width$} {:>8} {:>8} {:>7} {:>11} {:>9} {:>8} {p50:>9} {p95:>9} {p99:>9} {lag:>11}",
            q.request.name,
            q.reached,
            q.sent,
            q.unsent.values().sum::<u64>(),
            q.not_reached.values().sum::<u64>(),
            q.request.completed,
            q.request.failures,
        )?;
    }
    for q in &s.steps {
        for c in &q.checks {
            writeln!(
                out,
                "  check {} {:?}: passed {} failed {}",
                q.request.name, c.check, c.passed, c.failed
            )?;
        }
    }
    Ok(())
}
