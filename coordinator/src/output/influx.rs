//! InfluxDB line protocol: per frame, one `loadfleet` point per scenario
//! (millisecond stamps), plus one `loadfleet_fleet` point and, when asked,
//! one `loadfleet_agent` point per agent.
//!
//! A point carries the step's own counts (`intended`, `sent`, …: sum them
//! over time) and the run's totals so far (`intended_total`, …: take the
//! last), so a lost point loses the step's detail but never the totals.
//! The counts and their field names are the catalogue's
//! ([`catalogue::counts`], [`Metric::influx`]). Percentiles
//! ([`catalogue::QUANTILES`]) come from the exact merged histogram of the
//! step's seconds (`p50_ms`, …) and of the run so far (`p50_ms_total`, …).
//!
//! A flow scenario's point adds its flows (`flows_started_total`, …) and
//! each of its steps gets a `loadfleet_step` point (tags `scenario` and
//! `step`): the run's totals so far only, every field ending in `_total`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use hdrhistogram::Histogram;

use super::catalogue::{self, Metric, Unit, Value};
use super::delivery::{Encoded, Encoder};
use super::frame::{Counts, FlowFrame, Frame};
use crate::units;

pub(crate) struct Influx {
    /// Tags on every point: run_id, plan, the user's.
    pub tags: BTreeMap<String, String>,
    pub per_agent: bool,
    pub repeats: bool,
}

impl Encoder for Influx {
    fn encode(&mut self, frame: &Frame) -> Encoded {
        Encoded {
            body: Bytes::from(self.lines(frame)),
            headers: vec![("content-type", "text/plain; charset=utf-8")],
        }
    }
}

/// Tag keys and values, and measurement names: commas, spaces and `=`
/// escaped.
fn tag(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ' ' | '=' | '\\') {
            out.push('\\');
        }
        if c == '\n' {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Field keys: as tags. (Only fixed names and reasons/codes go here.)
fn key(s: &str) -> String {
    tag(s)
}

impl Influx {
    pub(crate) fn lines(&self, frame: &Frame) -> String {
        let mut tags = self.tags.clone();
        // The verdicts are the whole report's, not one repeat's.
        if self.repeats && frame.verdicts.is_empty() {
            tags.insert("repeat".into(), (frame.run + 1).to_string());
        }
        let base: String = tags
            .iter()
            .map(|(k, v)| format!(",{}={}", tag(k), tag(v)))
            .collect();
        let mut out = String::new();
        for (code, level, message) in &frame.verdicts {
            let message = message.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "loadfleet_verdict{base},code={},level={} message=\"{message}\" {}",
                tag(code),
                tag(level),
                frame.time_ms
            );
        }
        if !frame.verdicts.is_empty() {
            return out;
        }
        for s in &frame.scenarios {
            let mut fields = Vec::new();
            counts(&mut fields, &s.name, &s.step, "");
            counts(&mut fields, &s.name, &s.totals, "_total");
            percentiles(&mut fields, &s.step_latency, "");
            percentiles(&mut fields, &s.latency, "_total");
            if let Some(f) = &s.flow {
                flows(&mut fields, &s.name, f);
            }
            let _ = writeln!(
                out,
                "loadfleet{base},scenario={} {} {}",
                tag(&s.name),
                fields.join(","),
                frame.time_ms
            );
            if let Some(f) = &s.flow {
                steps(&mut out, &base, &s.name, f, frame.time_ms);
            }
        }
        let _ = writeln!(
            out,
            "loadfleet_fleet{base} {}={}i,{}={}i,{}={}i,last={} {}",
            catalogue::IN_FLIGHT.influx,
            frame.in_flight,
            catalogue::AGENTS_ALIVE.influx,
            frame.agents_alive,
            catalogue::ELAPSED.influx,
            frame.seconds.end,
            frame.last,
            frame.time_ms
        );
        if self.per_agent {
            for a in &frame.agents {
                let _ = writeln!(
                    out,
                    "loadfleet_agent{base},agent={} {}={}i,{}={}i,{}={},{}={} {}",
                    tag(&a.name),
                    catalogue::AGENT_SENT.influx,
                    a.sent,
                    catalogue::AGENT_COMPLETED.influx,
                    a.completed,
                    catalogue::AGENT_CPU.influx,
                    a.cpu_seconds,
                    catalogue::AGENT_MAX_LAG.influx,
                    units::us_to_ms(a.max_lag_us),
                    frame.time_ms
                );
            }
        }
        out
    }
}

/// A scenario's counts as fields named by the catalogue, `suffix` after
/// each; plus `unsent`, the sum over reasons.
fn counts(fields: &mut Vec<String>, scenario: &str, c: &Counts, suffix: &str) {
    fields.push(format!("unsent{suffix}={}i", c.unsent_total()));
    for p in catalogue::counts(scenario, c) {
        let name = field(p.metric, p.labels.get(1).map(String::as_str));
        let value = match (p.value, p.metric.unit) {
            (Value::Number(v), Unit::Seconds) => v.to_string(),
            (Value::Number(v), _) => format!("{v}i"),
            (Value::Micros(us), _) => units::us_to_s(us).to_string(),
            (Value::Histogram(h), _) => format!("{}i", h.len()),
        };
        fields.push(format!("{}{suffix}={value}", key(&name)));
    }
}

/// A flow scenario's flows as its point's fields (totals so far). Its
/// flow latency is the scenario's own (`p50_ms`, …): its figures count
/// flows.
fn flows(fields: &mut Vec<String>, scenario: &str, f: &FlowFrame) {
    for p in catalogue::flows(scenario, f) {
        // Steps have points of their own.
        if p.metric.labels.contains(&"step") {
            continue;
        }
        if let Value::Number(v) = p.value {
            let name = field(p.metric, p.labels.get(1).map(String::as_str));
            fields.push(format!("{}_total={v}i", key(&name)));
        }
    }
}

/// One `loadfleet_step` point per step of a flow, its counts and latency
/// so far.
fn steps(out: &mut String, base: &str, scenario: &str, f: &FlowFrame, time_ms: i64) {
    for q in &f.steps {
        let mut fields = vec![
            format!("{}_total={}i", catalogue::STEP_SENT.influx, q.sent),
            format!(
                "{}_total={}i",
                catalogue::STEP_COMPLETED.influx,
                q.completed
            ),
            format!("{}_total={}i", catalogue::STEP_FAILURES.influx, q.failures),
        ];
        percentiles(&mut fields, &q.latency, "_total");
        let _ = writeln!(
            out,
            "loadfleet_step{base},scenario={},step={} {} {time_ms}",
            tag(scenario),
            tag(&q.name),
            fields.join(",")
        );
    }
}

/// The field of a metric, followed by its second label's value (the
/// first is the scenario, a tag) when it has one: `status_503`.
fn field(metric: &Metric, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{}{v}", metric.influx),
        None => metric.influx.to_string(),
    }
}

fn percentiles(fields: &mut Vec<String>, h: &Histogram<u64>, suffix: &str) {
    fields.push(format!("count{suffix}={}i", h.len()));
    if h.is_empty() {
        return;
    }
    for (q, _, name) in catalogue::QUANTILES {
        let ms = units::us_to_ms(h.value_at_quantile(q));
        fields.push(format!("{name}_ms{suffix}={ms}"));
    }
    fields.push(format!("max_ms{suffix}={}", units::us_to_ms(h.max())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::frame::ScenarioFrame;
    use loadfleet_proto::histogram::new_histogram;

    #[test]
    fn one_point_per_scenario_with_escaped_tags() {
        let mut h = new_histogram();
        h.record(2500).unwrap();
        let mut totals = Counts {
            intended: 10,
            sent: 9,
            ..Default::default()
        };
        totals.unsent.insert("late".into(), 1);
        totals.status.insert(200, 9);
        let frame = Frame {
            run: 0,
            seconds: 0..1,
            time_ms: 1_700_000_000_000,
            started_ms: 0,
            scenarios: vec![ScenarioFrame {
                name: "checkout, eu=1".into(),
                totals: totals.clone(),
                step: totals,
                latency: h.clone(),
                service_time: h.clone(),
                step_latency: h,
                flow: None,
            }],
            in_flight: 3,
            agents_alive: 2,
            agents: vec![],
            last: true,
            verdicts: vec![],
        };
        let influx = Influx {
            tags: [("run_id".to_string(), "r 1".to_string())]
                .into_iter()
                .collect(),
            per_agent: false,
            repeats: false,
        };
        let text = influx.lines(&frame);
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(r"loadfleet,run_id=r\ 1,scenario=checkout\,\ eu\=1 "),
            "{first}"
        );
        assert!(first.contains("unsent=1i,intended=10i,sent=9i"), "{first}");
        assert!(first.contains("unsent_late=1i,unsent_"), "{first}");
        assert!(first.contains("status_200_total=9i"), "{first}");
        assert!(first.contains("p50_ms=2.5"), "{first}");
        assert!(first.ends_with(" 1700000000000"));
        assert!(
            text.contains("loadfleet_fleet,run_id=r\\ 1 in_flight=3i,agents_alive=2i,elapsed_seconds=1i,last=true")
        );
    }

    /// A flow scenario's point carries its flows so far, and each step gets
    /// a `loadfleet_step` point tagged with its name.
    #[test]
    fn a_flow_scenario_adds_flows_and_step_points() {
        use crate::output::frame::{FlowFrame, StepFrame};
        let mut h = new_histogram();
        h.record(4000).unwrap();
        let frame = Frame {
            run: 0,
            seconds: 0..1,
            time_ms: 7,
            started_ms: 0,
            scenarios: vec![ScenarioFrame {
                name: "shop".into(),
                totals: Counts::default(),
                step: Counts::default(),
                latency: h.clone(),
                service_time: h.clone(),
                step_latency: h.clone(),
                flow: Some(FlowFrame {
                    started: 5,
                    completed: 3,
                    failed: [("status".to_string(), 1)].into(),
                    latency: h.clone(),
                    steps: vec![StepFrame {
                        name: "POST /login".into(),
                        sent: 5,
                        completed: 4,
                        failures: 1,
                        latency: h,
                    }],
                }),
            }],
            in_flight: 0,
            agents_alive: 1,
            agents: vec![],
            last: false,
            verdicts: vec![],
        };
        let influx = Influx {
            tags: BTreeMap::new(),
            per_agent: false,
            repeats: false,
        };
        let text = influx.lines(&frame);
        let first = text.lines().next().unwrap();
        assert!(
            first.contains(
                "flows_started_total=5i,flows_completed_total=3i,flows_failed_check_total=0i"
            ),
            "{first}"
        );
        assert!(first.contains("flows_failed_status_total=1i"), "{first}");
        let step = text.lines().nth(1).unwrap();
        assert_eq!(
            step,
            "loadfleet_step,scenario=shop,step=POST\\ /login sent_total=5i,completed_total=4i,failures_total=1i,\
             count_total=1i,p50_ms_total=4.001,p90_ms_total=4.001,p99_ms_total=4.001,p999_ms_total=4.001,max_ms_total=4.001 7"
        );
    }
}
