//! InfluxDB line protocol: per frame, one `loadfleet` point per scenario
//! (millisecond stamps), plus one `loadfleet_fleet` point and, when asked,
//! one `loadfleet_agent` point per agent.
//!
//! A point carries the step's own counts (`intended`, `sent`, …: sum them
//! over time) and the run's totals so far (`intended_total`, …: take the
//! last), so a lost point loses the step's detail but never the totals.
//! Percentiles come from the exact merged histogram of the step's seconds
//! (`p50_ms`, …) and of the run so far (`p50_ms_total`, …).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use hdrhistogram::Histogram;

use super::delivery::{Encoded, Encoder};
use super::frame::{Counts, Frame};

pub struct Influx {
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
    pub fn lines(&self, frame: &Frame) -> String {
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
            counts(&mut fields, &s.step, "");
            counts(&mut fields, &s.totals, "_total");
            percentiles(&mut fields, &s.step_latency, "");
            percentiles(&mut fields, &s.latency, "_total");
            let _ = writeln!(
                out,
                "loadfleet{base},scenario={} {} {}",
                tag(&s.name),
                fields.join(","),
                frame.time_ms
            );
        }
        let _ = writeln!(
            out,
            "loadfleet_fleet{base} in_flight={}i,agents_alive={}i,last={} {}",
            frame.in_flight, frame.agents_alive, frame.last, frame.time_ms
        );
        if self.per_agent {
            for a in &frame.agents {
                let _ = writeln!(
                    out,
                    "loadfleet_agent{base},agent={} sent_total={}i,completed_total={}i,cpu_seconds_total={},max_lag_ms={} {}",
                    tag(&a.name),
                    a.sent,
                    a.completed,
                    a.cpu_seconds,
                    a.max_lag_us as f64 / 1000.0,
                    frame.time_ms
                );
            }
        }
        out
    }
}

fn counts(fields: &mut Vec<String>, c: &Counts, suffix: &str) {
    let mut f = |name: String, n: u64| fields.push(format!("{}={n}i", key(&name)));
    f(format!("intended{suffix}"), c.intended);
    f(format!("sent{suffix}"), c.sent);
    f(format!("unsent{suffix}"), c.unsent_total());
    f(format!("completed{suffix}"), c.completed);
    f(format!("failures{suffix}"), c.failures);
    for (reason, n) in &c.unsent {
        f(format!("unsent_{reason}{suffix}"), *n);
    }
    for (code, n) in &c.status {
        f(format!("status_{code}{suffix}"), *n);
    }
    for (kind, n) in &c.errors {
        f(format!("error_{kind}{suffix}"), *n);
    }
    for (status, n) in &c.grpc_status {
        f(format!("grpc_{status}{suffix}"), *n);
    }
}

fn percentiles(fields: &mut Vec<String>, h: &Histogram<u64>, suffix: &str) {
    fields.push(format!("count{suffix}={}i", h.len()));
    if h.is_empty() {
        return;
    }
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
        fields.push(format!(
            "{name}_ms{suffix}={}",
            h.value_at_quantile(q) as f64 / 1000.0
        ));
    }
    fields.push(format!("max_ms{suffix}={}", h.max() as f64 / 1000.0));
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
        assert!(first.contains("intended=10i,sent=9i,unsent=1i"), "{first}");
        assert!(first.contains("status_200_total=9i"), "{first}");
        assert!(first.contains("p50_ms=2.5"), "{first}");
        assert!(first.ends_with(" 1700000000000"));
        assert!(
            text.contains("loadfleet_fleet,run_id=r\\ 1 in_flight=3i,agents_alive=2i,last=true")
        );
    }
}
