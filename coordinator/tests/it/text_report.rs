//! The text report users read at the end of `run`, pinned as a snapshot:
//! a change to what they see must show up in review as a changed `.snap`
//! file (`cargo insta review`), never slip in by accident.
//!
//! The fixture is the `report.json` of a real local run
//! (`run --local-agents 2 --duration 3s --rate 100`), so it is also read
//! back through the typed report structs the way `compare` reads reports.

use loadfleet_coordinator::report::{text::write_text, Report};

#[test]
fn text_report_of_a_fixed_report_json() {
    let json = include_str!("../fixtures/report.json");
    let report: Report = serde_json::from_str(json).expect("the fixture is a report");
    let mut out = Vec::new();
    write_text(&mut out, &report, false).expect("render to memory");
    let text = String::from_utf8(out).expect("the text report is UTF-8");
    insta::assert_snapshot!(text);
}

/// The typed structs hold every key of a real report, in its order, so
/// reading a report and writing it again changes nothing.
#[test]
fn report_json_round_trips_through_the_typed_structs() {
    let json = include_str!("../fixtures/report.json");
    let report: Report = serde_json::from_str(json).expect("the fixture is a report");
    let mut out = Vec::new();
    loadfleet_coordinator::report::json::write_json(&mut out, &report).expect("render to memory");
    assert_eq!(String::from_utf8(out).expect("UTF-8"), json);
}

/// A scenario of several requests gets a table of them under its figures,
/// each request on its own row with its own outcomes; the fixture's
/// scenario is given three requests here, and only that table is pinned.
#[test]
fn text_report_splits_a_mix_by_request() {
    let json = include_str!("../fixtures/report.json");
    let mut value: serde_json::Value = serde_json::from_str(json).expect("the fixture is JSON");
    let latency = |p50: f64, p99: f64| serde_json::json!({"p50": p50, "p90": p99, "p95": p99, "p99": p99, "p999": p99, "max": p99, "mean": p50, "count": 1});
    value["scenarios"][0]["requests"] = serde_json::json!([
        {"name": "GET /items/{{seq}}", "completed": 180, "completed_in_window": 179, "completed_ok_in_window": 179,
         "failures": 0, "throughput_rps": 59.67, "throughput_ok_rps": 59.67,
         "status": {"200": 180}, "errors": {}, "latency_ms": latency(22.1, 58.1)},
        {"name": "cart", "completed": 60, "completed_in_window": 60, "completed_ok_in_window": 0,
         "failures": 60, "throughput_rps": 20.0, "throughput_ok_rps": 0.0,
         "status": {"404": 58}, "errors": {"timeout": 2}, "latency_ms": latency(0.3, 0.5)},
        {"name": "never", "completed": 0, "completed_in_window": 0, "completed_ok_in_window": 0,
         "failures": 0, "throughput_rps": 0.0, "throughput_ok_rps": 0.0,
         "status": {}, "errors": {}, "latency_ms": null}
    ]);
    let report: Report = serde_json::from_value(value).expect("a report with requests");
    let mut out = Vec::new();
    write_text(&mut out, &report, false).expect("render to memory");
    let text = String::from_utf8(out).expect("the text report is UTF-8");
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("  requests of "))
        .take_while(|l| !l.is_empty())
        .collect();
    insta::assert_snapshot!(table.join("\n"));
}
