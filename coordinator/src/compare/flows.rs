//! The comparison's rows for flow scenarios: each one's flows (started,
//! completed, failed, the flow latency and active time, the checks that
//! held) and each of its steps (reached, failures, latency p95), read as
//! thresholds on `S.flow` and `S.STEP` read them.

use super::line::{Line, Read};
use super::load::Input;
use crate::figures::{FlowFigure, StepFigure};

/// Rows for the flow scenarios any report has (`purchase flows failed %`),
/// then for their steps (`purchase.login reached`), in the first
/// report's order, then any only later reports have.
pub(super) fn lines(inputs: &[Input]) -> Vec<Line> {
    let mut flows: Vec<String> = Vec::new();
    let mut steps: Vec<(String, String)> = Vec::new();
    for s in inputs
        .iter()
        .flat_map(|i| &i.report.scenarios)
        .filter(|s| s.flows.is_some() || !s.steps.is_empty())
    {
        if !flows.contains(&s.name) {
            flows.push(s.name.clone());
        }
        for st in &s.steps {
            let key = (s.name.clone(), st.request.name.clone());
            if !steps.contains(&key) {
                steps.push(key);
            }
        }
    }
    let mut out = Vec::new();
    for name in flows {
        out.extend(FlowFigure::ALL.map(|figure| Line {
            name: format!("{name} {}", figure.label()),
            unit: figure.unit(),
            read: Read::Flow(name.clone(), figure),
        }));
    }
    for (scenario, step) in steps {
        out.extend(StepFigure::ALL.map(|figure| Line {
            name: format!("{scenario}.{step} {}", figure.label()),
            unit: figure.unit(),
            read: Read::Step(scenario.clone(), step.clone(), figure),
        }));
    }
    out
}
