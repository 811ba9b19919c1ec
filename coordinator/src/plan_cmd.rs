//! `plan check` and `plan preview`: look at a plan without sending anything.

use std::io::Write;
use std::path::Path;

use crate::error::Error;
use crate::plan::{self, Model, Overlay};

/// Validates the plan, its `[[output]]` and `[search]` tables included,
/// and summarises it.
pub(crate) fn check(file: &Path, out: &mut impl Write) -> Result<(), Error> {
    let plan = plan::load(file)?;
    writeln!(
        out,
        "{}: ok — {} scenario(s), {:.1}s, target {}",
        file.display(),
        plan.scenarios.len(),
        plan.duration().as_secs_f64(),
        plan.target.url
    )?;
    for s in &plan.scenarios {
        let load = match &s.model {
            Model::Open(schedule) if s.is_flow() => format!("open, {} flows", schedule.count()),
            Model::Open(schedule) => format!("open, {} arrivals", schedule.count()),
            Model::Closed(population) => format!(
                "closed, up to {} clients, think {}",
                population.max_clients(),
                humantime::format_duration(population.think)
            ),
        };
        let sends = match s.is_flow() {
            true => format!("a flow of {} step(s)", s.steps.len()),
            false => format!("{} request kind(s)", s.requests.len()),
        };
        writeln!(
            out,
            "  {:<16} {load}; starts at {:.1}s, lasts {:.1}s, warm-up {:.1}s, {sends}{}",
            s.name,
            s.start.as_secs_f64(),
            s.duration.as_secs_f64(),
            s.warmup.as_secs_f64(),
            s.data
                .as_ref()
                .map_or(String::new(), |d| format!(", {} data rows", d.rows.len()))
        )?;
        // The names the report and thresholds use, derived ones included.
        if s.requests.len() > 1 {
            let names: Vec<String> = s
                .requests
                .iter()
                .map(|r| format!("{:?} (weight {})", r.name, r.weight))
                .collect();
            writeln!(out, "    requests: {}", names.join(", "))?;
        }
        if s.is_flow() {
            let names: Vec<String> = s.step_names().map(|n| format!("{n:?}")).collect();
            writeln!(out, "    steps: {}", names.join(", "))?;
        }
    }
    for o in &plan.outputs {
        writeln!(out, "  output {}", o.label())?;
    }
    Ok(())
}

/// Per-second load for the fleet and each agent, with a text chart: the
/// plan with `flags` laid over it, exactly as `run` would send it.
pub(crate) fn preview(
    file: &Path,
    flags: &Overlay,
    agents: u32,
    out: &mut impl Write,
) -> Result<(), Error> {
    let plan = plan::resolve(Some(file), flags)?;
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}");
    for s in &plan.scenarios {
        let preview = plan::preview(s, agents as usize);
        let unit = preview.unit;
        let per = match preview.bucket_secs {
            1 => "second".to_string(),
            n => format!("{n} s (one row per {n} s keeps the preview short)"),
        };
        w(
            out,
            format!(
                "\nscenario {} ({}), {unit} per {per}, starting at t={:.1}s, split across {agents} agent(s):",
                s.name,
                s.model.name(),
                s.start.as_secs_f64()
            ),
        )?;
        if !preview.steps.is_empty() {
            w(out, "each flow runs, in order:".to_string())?;
            for step in &preview.steps {
                w(out, format!("  {step}"))?;
            }
        }
        let peak = preview.rows.iter().map(|r| r.0).max().unwrap_or(0).max(1);
        let shown = (agents as usize).min(plan::PREVIEW_AGENTS);
        let mut head = format!("{:>7} {:>9}", "t", "fleet");
        for a in 0..shown {
            head.push_str(&format!(" {:>8}", format!("agent{a}")));
        }
        if shown < agents as usize {
            head.push_str(" …");
        }
        w(out, head)?;
        for (row, (fleet, per_agent)) in preview.rows.iter().enumerate() {
            let t = s.start.as_secs() + row as u64 * preview.bucket_secs;
            let mut line = format!("{t:>6}s {fleet:>9}");
            for n in per_agent {
                line.push_str(&format!(" {n:>8}"));
            }
            let bar = ((*fleet as f64 / peak as f64) * 40.0).round() as usize;
            line.push_str(&format!("  {}", "#".repeat(bar)));
            w(out, line)?;
        }
    }
    Ok(())
}
