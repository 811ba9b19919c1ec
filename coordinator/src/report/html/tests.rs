use std::collections::BTreeMap;

use loadfleet_proto::vocab::{AgentStatus, OutcomeClass, UnsentReason, VerdictCode, VerdictLevel};

use super::chart::{curve_points, decade_label, nice_scale, percentile_x};
use super::page::render;
use crate::report::format::{count, secs, utc};
use crate::report_model::{
    AgentReport, CurvePoint, IntervalReport, Lag, Percentiles, Phases, Report, RunInfo, Scenario,
    Totals, Unsent, Verdict, Warmup, Window, SCHEMA,
};

fn pct(base: f64, count: u64) -> Percentiles {
    Percentiles {
        p50: base,
        p90: base * 2.0,
        p95: base * 3.0,
        p99: base * 4.0,
        p999: base * 5.0,
        max: base * 6.0,
        mean: base * 1.5,
        count,
    }
}

fn totals(completed: u64) -> Totals {
    let latency = (completed > 0).then(|| pct(5.0, completed));
    Totals {
        intended: completed + 10,
        sent: completed,
        completed,
        completed_in_window: completed,
        completed_ok_in_window: completed,
        in_flight_at_end: 0,
        unsent: Unsent {
            total: 10,
            concurrency_limit: 7,
            late: 3,
            other: BTreeMap::new(),
        },
        unreported: 0,
        status: if completed > 0 {
            [("200".to_string(), completed)].into_iter().collect()
        } else {
            BTreeMap::new()
        },
        errors: BTreeMap::new(),
        grpc: None,
        failures: 0,
        throughput_rps: completed as f64 / 4.0,
        throughput_ok_rps: completed as f64 / 4.0,
        latency_lower_bound: false,
        pool_wait_ms: None,
        latency_ms: latency.clone(),
        service_time_ms: latency.clone(),
        phases: Phases {
            ttfb_ms: latency.clone(),
            connections_opened: 1,
            connections_reused: completed.saturating_sub(1),
            ..Phases::default()
        },
        latency_by_class_ms: latency
            .clone()
            .map(|p| (OutcomeClass::Success.to_string(), p))
            .into_iter()
            .collect(),
        latency_curve_ms: if completed > 0 {
            [0.0, 50.0, 75.0, 87.5, 93.75, 100.0]
                .iter()
                .map(|&p| CurvePoint {
                    percentile: p,
                    ms: 5.0 + p / 10.0,
                })
                .collect()
        } else {
            Vec::new()
        },
        warmup: Warmup {
            seconds: 0.0,
            completed: 0,
            latency_ms: None,
        },
    }
}

fn report(intervals: usize, completed: u64) -> Report {
    let t = totals(completed);
    Report {
        schema: SCHEMA.into(),
        partial: false,
        run: RunInfo {
            target: "http://127.0.0.1:8080/".into(),
            duration_s: intervals as f64,
            window_s: intervals as f64,
            drain_s: 5.0,
            max_in_flight_per_agent: 1000,
            connections_per_agent: 64,
            max_connections_per_agent: 1000,
            agents: 1,
            agents_expected: 1,
            local: true,
            started_at_unix: 1_700_000_000.0,
            elapsed_s: intervals as f64,
            protocol: Default::default(),
            tls: Default::default(),
        },
        verdicts: vec![Verdict {
            level: VerdictLevel::Warn,
            code: VerdictCode::Localhost,
            message: "one machine".into(),
        }],
        thresholds: Vec::new(),
        scenarios: vec![Scenario {
            name: "default".into(),
            model: "open".into(),
            start_s: 0.0,
            duration_s: intervals as f64,
            warmup_s: 0.0,
            window: Window {
                start_s: 0.0,
                end_s: intervals as f64,
            },
            load: "100 req/s (uniform)".into(),
            process: Some("uniform".into()),
            offered_rps: Some(100.0),
            totals: t.clone(),
            sse: None,
            requests: Vec::new(),
            flows: None,
            steps: Vec::new(),
            steadiness: None,
        }],
        totals: t,
        agents: vec![AgentReport {
            id: "agent-1".into(),
            host: "host-a".into(),
            source: None,
            peer: None,
            host_addresses: Vec::new(),
            share: 1.0,
            intended: completed + 10,
            sent: completed,
            unreported: 0,
            unsent: 10,
            completed,
            cpu: 0.1,
            cpu_cores: 0.2,
            cpu_seconds: 1.0,
            cpus: 2,
            host_cpu: 0.3,
            lag_ms: Some(Lag {
                p50: 0.1,
                p99: 0.5,
                max: 1.0,
            }),
            clock_offset_ms: Some(0.01),
            clock_rtt_ms: Some(0.2),
            clock_uncertainty_ms: Some(0.1),
            in_flight_at_end: Some(0),
            pool_saturated_share: 0.0,
            protocol: Default::default(),
            status: AgentStatus::Finished,
            lost_reason: None,
        }],
        late_agents: Vec::new(),
        intervals: (0..intervals)
            .map(|i| IntervalReport {
                t: i as f64,
                intended: 100,
                sent: 98,
                unsent: 2,
                unsent_by_reason: [(UnsentReason::Late.to_string(), 2)].into_iter().collect(),
                unreported: 0,
                completed: 97,
                errors: 0,
                classes: BTreeMap::new(),
                p50: (completed > 0).then_some(5.0 + i as f64),
                p99: (completed > 0).then_some(20.0 + i as f64),
                in_flight: 3,
                max_in_flight: 9,
                max_lag_ms: 0.4,
            })
            .collect(),
        repeats: None,
    }
}

fn polyline_points(html: &str, series: &str) -> Vec<usize> {
    let needle = format!("<polyline data-series=\"{series}\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let rest = &html[i..];
            let start = rest.find("points=\"").expect("points") + 8;
            let end = start + rest[start..].find('"').expect("end");
            rest[start..end].split_whitespace().count()
        })
        .collect()
}

#[test]
fn text_from_the_report_is_escaped() {
    let mut r = report(3, 100);
    r.run.target = "http://x/\"><script>alert(1)</script>".into();
    r.agents[0].id = "<img src=x onerror=alert(2)>".into();
    r.verdicts[0].message = "</script><script>alert(3)</script> & 'q'".into();
    let html = render(&r).unwrap();
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(3)&lt;/script&gt; &amp; 'q'"));
    // Exactly one </script>: the end of the embedded JSON.
    assert_eq!(html.matches("</script>").count(), 1);
    // Quotes are escaped too, so no text can close an attribute.
    r.agents[0].lost_reason = None;
    r.scenarios[0].name = "\" onload=\"alert(4)".into();
    let html = render(&r).unwrap();
    assert!(
        html.contains("<b>&quot; onload=&quot;alert(4)</b>"),
        "{html}"
    );
    assert!(!html.contains("\" onload=\"alert"));
}

#[test]
fn embedded_json_is_the_report() {
    let mut r = report(2, 10);
    r.verdicts[0].message = "</script> <!-- x".into();
    let html = render(&r).unwrap();
    let open = "<script type=\"application/json\" id=\"report\">";
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    let embedded: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(embedded, serde_json::to_value(&r).unwrap());
}

#[test]
fn empty_report_renders_without_nan() {
    let mut r = report(0, 0);
    r.run.duration_s = f64::NAN;
    r.totals.throughput_rps = f64::NAN;
    r.agents.clear();
    r.scenarios.clear();
    r.verdicts.clear();
    let html = render(&r).unwrap();
    assert!(!html.contains("NaN"), "{html}");
    assert!(!html.replace("info", "").contains("inf"), "{html}");
    assert!(!html.contains("<polyline"), "no chart without data");
    assert!(html.contains("no latency data"));
    assert!(html.contains("no per-second data"));
    assert!(html.contains("no latency distribution"));
    assert!(html.contains("nothing completed"));
}

#[test]
fn intervals_without_latency_break_the_line_not_the_chart() {
    let mut r = report(5, 100);
    r.intervals[2].p50 = None;
    r.intervals[2].p99 = None;
    r.intervals[3].p99 = Some(f64::NAN);
    let html = render(&r).unwrap();
    assert!(!html.contains("NaN"));
    assert_eq!(polyline_points(&html, "p50"), [2, 2]);
    assert_eq!(polyline_points(&html, "p99"), [2, 1]);
}

#[test]
fn chart_polylines_have_one_point_per_interval() {
    let html = render(&report(7, 500)).unwrap();
    for s in ["intended", "sent", "completed", "unsent", "p50", "p99"] {
        assert_eq!(polyline_points(&html, s), [7], "series {s}");
    }
    // Six curve points: five percentiles below 100% and the max.
    assert_eq!(polyline_points(&html, "latency"), [6]);
    assert!(!html.contains("NaN"));
}

#[test]
fn log_percentile_axis_maps_99_to_two_decades() {
    assert!((percentile_x(99.0) - 2.0).abs() < 1e-9);
    assert!((percentile_x(90.0) - 1.0).abs() < 1e-9);
    assert!((percentile_x(99.9) - 3.0).abs() < 1e-9);
    assert_eq!(percentile_x(0.0), 0.0);
    assert!(percentile_x(100.0).is_infinite());
    assert_eq!(decade_label(0), "0%");
    assert_eq!(decade_label(2), "99%");
    assert_eq!(decade_label(4), "99.99%");
    // The max is drawn where 1/(1-p) equals the count: 1000 → 3 decades.
    let mut t = totals(1000);
    t.latency_curve_ms = vec![
        CurvePoint {
            percentile: 99.0,
            ms: 9.0,
        },
        CurvePoint {
            percentile: 100.0,
            ms: 10.0,
        },
    ];
    let (points, decades) = curve_points(&t);
    assert!((points[0].0 - 2.0).abs() < 1e-9);
    assert!((points[1].0 - 3.0).abs() < 1e-9);
    assert_eq!(decades, 3);
}

#[test]
fn partial_runs_and_scenarios_show() {
    let mut r = report(3, 100);
    r.partial = true;
    let mut second = r.scenarios[0].clone();
    second.name = "spike<1>".into();
    r.scenarios.push(second);
    let html = render(&r).unwrap();
    assert!(html.contains(">PARTIAL</span>"));
    assert!(html.contains("<h2>Scenarios</h2>"));
    assert!(html.contains("spike&lt;1&gt;"));
    assert!(!render(&report(3, 100))
        .unwrap()
        .contains("<h2>Scenarios</h2>"));
}

/// A lost agent's arrivals of unknown fate get a column of their own in
/// the headline and the agents' table, and none when there are none.
#[test]
fn unreported_arrivals_show_only_when_an_agent_left_some() {
    let mut r = report(3, 100);
    let html = render(&r).unwrap();
    assert!(!html.contains("<th>unreported</th>"), "{html}");
    r.totals.unreported = 7;
    r.agents[0].unreported = 7;
    let html = render(&r).unwrap();
    assert_eq!(html.matches("<th>unreported</th>").count(), 2, "{html}");
    assert!(html.contains("lost agents' arrivals of unknown fate"));
}

#[test]
fn scales_and_formats() {
    assert_eq!(nice_scale(0.0), (1.0, 0.2));
    assert_eq!(nice_scale(f64::NAN), (1.0, 0.2));
    assert_eq!(nice_scale(7.0), (8.0, 2.0));
    assert_eq!(nice_scale(300.0), (300.0, 100.0));
    assert_eq!(nice_scale(301.0), (400.0, 100.0));
    assert_eq!(count(18_000), "18,000");
    assert_eq!(count(999), "999");
    assert_eq!(count(1_234_567), "1,234,567");
    assert_eq!(secs(4.0), "4");
    assert_eq!(secs(2.5), "2.5");
    assert_eq!(utc(1_700_000_000.0), "2023-11-14 22:13:20 UTC");
    assert_eq!(utc(951_782_400.5), "2000-02-29 00:00:00 UTC");
    for unreadable in [0.0, -1.0, f64::NAN, 1e300] {
        assert_eq!(utc(unreadable), "–");
    }
}

#[test]
fn completions_are_stacked_by_the_classes_the_run_had() {
    let mut r = report(4, 400);
    for (i, iv) in r.intervals.iter_mut().enumerate() {
        let failed = 30 * i as u64;
        iv.classes = [
            ("completed_2xx".to_string(), 97 - failed),
            ("completed_4xx".to_string(), 0),
            ("completed_5xx".to_string(), failed),
        ]
        .into_iter()
        .collect();
    }
    let html = render(&r).unwrap();
    assert_eq!(polyline_points(&html, "2xx"), [4]);
    assert_eq!(polyline_points(&html, "5xx"), [4]);
    assert!(
        polyline_points(&html, "4xx").is_empty(),
        "a class the run never had is not drawn"
    );
    // One filled layer per class drawn, under the lines.
    assert_eq!(html.matches("<polygon ").count(), 2);
    // Without per-class counts there is nothing to stack.
    let html = render(&report(4, 400)).unwrap();
    assert!(html.contains("no completions: nothing was answered or failed"));
}

/// A scenario of several requests gets the "Requests" table, a row per
/// request with its own outcomes, escaped like all text; one of a single
/// request gets none (its figures are the scenario's).
#[test]
fn a_mix_gets_a_requests_table() {
    let request = |name: &str, code: &str, n: u64| crate::report_model::RequestReport {
        name: name.into(),
        completed: n,
        completed_in_window: n,
        completed_ok_in_window: 0,
        failures: 0,
        throughput_rps: 1.0,
        throughput_ok_rps: 0.0,
        status: [(code.to_string(), n)].into(),
        errors: BTreeMap::new(),
        grpc_status: BTreeMap::new(),
        latency_ms: Some(pct(1.0, n)),
    };
    let mut r = report(3, 100);
    r.scenarios[0].requests = vec![request("GET /items/{{seq}}", "200", 75)];
    assert!(!render(&r).unwrap().contains("<h2>Requests</h2>"));
    r.scenarios[0]
        .requests
        .push(request("<b>cart</b>", "404", 25));
    let html = render(&r).unwrap();
    assert!(html.contains("<h2>Requests</h2>"), "{html}");
    assert!(
        html.contains("GET /items/{{seq}}") && html.contains("404: 25"),
        "{html}"
    );
    assert!(html.contains("&lt;b&gt;cart&lt;/b&gt;"), "{html}");
    assert!(!html.contains("<b>cart"), "{html}");
}

/// A flow scenario gets the "Flows" table (its flows and their latency)
/// and its funnel, a row for every step with its figures, and each check
/// with its counts, all escaped; a run without flows gets none.
#[test]
fn a_flow_scenario_gets_its_flows_and_funnel() {
    use crate::report_model::{CheckReport, FlowReport, RequestReport, StepReport};
    let step = |name: &str, reached: u64, completed: u64, failures: u64| StepReport {
        request: RequestReport {
            name: name.into(),
            completed,
            completed_in_window: completed,
            completed_ok_in_window: completed - failures,
            failures,
            throughput_rps: 1.0,
            throughput_ok_rps: 1.0,
            status: [("200".to_string(), completed)].into(),
            errors: BTreeMap::new(),
            grpc_status: BTreeMap::new(),
            latency_ms: Some(pct(2.0, completed)),
        },
        reached,
        sent: reached - 1,
        unsent: [("late".to_string(), 1)].into(),
        not_reached: [("failed_before".to_string(), 100 - reached)].into(),
        checks: vec![CheckReport {
            check: "status == 200 && body.id != \"<x>\"".into(),
            passed: completed - failures,
            failed: failures,
        }],
        service_time_ms: Some(pct(1.0, completed)),
        start_lag_ms: Some(pct(0.25, completed)),
    };
    let mut r = report(3, 100);
    assert!(!render(&r).unwrap().contains("<h2>Flows</h2>"));
    r.scenarios[0].flows = Some(FlowReport {
        intended: 110,
        started: 100,
        unsent: r.scenarios[0].totals.unsent.clone(),
        unreported: 0,
        completed: 77,
        failed: 21,
        failed_by_reason: [("check".to_string(), 13), ("status".to_string(), 8)].into(),
        in_flight_at_end: 2,
        throughput_fps: 25.5,
        latency_ms: Some(pct(40.0, 98)),
        active_ms: Some(pct(31.0, 98)),
    });
    r.scenarios[0].steps = vec![
        step("POST /login", 100, 99, 3),
        step("POST <cart>", 96, 95, 7),
        step("POST /orders", 88, 87, 11),
    ];
    let html = render(&r).unwrap();
    assert!(html.contains("<h2>Flows</h2>"), "{html}");
    assert!(html.contains("Funnel of default"), "{html}");
    // The flows row: counts, reasons, throughput, p99.9 and active p99.
    let flows = &html[html.find("class=\"flows\"").expect("flows table")..];
    let flows = &flows[..flows.find("</table>").expect("end of flows")];
    for needle in [
        "<td>77</td><td class=\"fail\">21</td>",
        "check: 13 status: 8",
        "<td>2</td><td>25.5</td><td>40.0ms</td><td>120.0ms</td><td>160.0ms</td><td>200.0ms</td>",
        "<td>31.0ms</td><td>93.0ms</td><td>124.0ms</td>",
    ] {
        assert!(flows.contains(needle), "{needle} missing: {flows}");
    }
    let funnel = &html[html.find("class=\"funnel\"").expect("funnel table")..];
    let funnel = &funnel[..funnel.find("</table>").expect("end of funnel")];
    assert_eq!(funnel.matches("<tr>").count(), 1 + 3, "{funnel}");
    for (name, reached, completed, failures) in [
        ("POST /login", 100, 99, 3),
        ("POST &lt;cart&gt;", 96, 95, 7),
        ("POST /orders", 88, 87, 11),
    ] {
        let row = format!(
            "<td class=\"l\">{name}</td><td>{reached}</td><td>{}</td><td class=\"unsent\">1</td><td>{}</td><td>{completed}</td><td>{failures}</td>",
            reached - 1,
            100 - reached
        );
        assert!(funnel.contains(&row), "{row} missing: {funnel}");
    }
    assert!(!html.contains("<cart>"), "{html}");
    let checks = &html[html.find("class=\"checks\"").expect("checks table")..];
    assert_eq!(
        checks.matches("body.id != &quot;&lt;x&gt;&quot;").count(),
        3
    );
    assert!(
        checks.contains("<td>96</td><td class=\"fail\">3</td>"),
        "{checks}"
    );
}
