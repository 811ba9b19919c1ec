use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::load::Compared;
use super::render::fmt_ratio;
use super::table::{fmt_number, letter, ratio, Ratio, Reading};
use super::*;
use crate::figures::median;
use crate::report_model::SCHEMA;

/// A real report (tests/fixtures/report.json: 100 req/s for 3 s) with
/// its totals' figures replaced.
fn report(p50: f64, p99: f64, completed: u64, status: Value) -> Value {
    let mut r: Value =
        serde_json::from_str(include_str!("../../tests/fixtures/report.json")).unwrap();
    let t = &mut r["totals"];
    t["completed"] = json!(completed);
    t["completed_in_window"] = json!(completed);
    t["status"] = status;
    t["throughput_rps"] = json!(completed as f64 / 10.0);
    for key in ["latency_ms", "service_time_ms"] {
        for (k, v) in [
            ("p50", p50),
            ("p90", p50),
            ("p95", p50),
            ("p99", p99),
            ("p999", p99),
            ("max", p99),
        ] {
            t[key][k] = json!(v);
        }
    }
    r
}

fn input(label: &str, report: Value) -> Input {
    Input {
        label: label.into(),
        path: PathBuf::from(format!("/x/{label}/report.json")),
        report: Compared::from_value(report).unwrap(),
    }
}

fn text(t: &Table) -> String {
    let mut out = Vec::new();
    t.write_text(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn line<'a>(s: &'a str, figure: &str) -> &'a str {
    s.lines()
        .find(|l| l.trim_start().starts_with(&format!("{figure}  ")))
        .unwrap_or_else(|| panic!("no row {figure:?} in\n{s}"))
}

/// gRPC statuses get their count and share rows, `-` where a report
/// lacks the status, and non-OK statuses are failures.
#[test]
fn grpc_statuses_are_rows_of_their_own() {
    let mut a = report(10.0, 20.0, 1000, json!({}));
    a["totals"]["grpc"] = json!({"calls": 1000, "status": {"OK": 1000}, "rate": {"OK": 1.0}});
    let mut b = report(10.0, 20.0, 1000, json!({}));
    b["totals"]["grpc"] = json!({
        "calls": 1000,
        "status": {"OK": 950, "UNAVAILABLE": 50},
        "rate": {"OK": 0.95, "UNAVAILABLE": 0.05}
    });
    let t = Table::build(&[input("a", a), input("b", b)]);
    let s = text(&t);
    assert_eq!(t.row("grpc UNAVAILABLE").unwrap().cell(0), "-", "{s}");
    assert!(line(&s, "grpc UNAVAILABLE %").contains('5'), "{s}");
    assert!(line(&s, "grpc OK").contains("950"), "{s}");
    assert!(line(&s, "failure %").contains('5'), "{s}");
}

#[test]
fn compare_table_has_headline_rows_in_order_with_ratios() {
    let a = input("fast", report(10.0, 20.0, 1000, json!({"200": 1000})));
    let b = input(
        "slow",
        report(20.0, 80.0, 1000, json!({"200": 900, "503": 100})),
    );
    let t = Table::build(&[a, b]);
    let names: Vec<&str> = t.rows.iter().map(|r| r.figure.as_str()).collect();
    assert_eq!(
        &names[..3],
        ["intended", "sent", "unsent"],
        "what was intended, sent and never sent leads"
    );
    assert!(names.contains(&"status 200") && names.contains(&"status 503"));
    assert_eq!(t.row("latency_ms p50").unwrap().ratios[0].value, Some(2.0));
    assert_eq!(t.row("latency_ms p99").unwrap().ratios[0].value, Some(4.0));
    // A has no 503 key at all: unknown, shown as "-", not 0.
    let s503 = t.row("status 503").unwrap();
    assert_eq!(s503.value(0), None);
    assert_eq!(s503.cell(0), "-");
    assert_eq!(s503.ratios[0].value, None);
    // 100 × 5xx over 1000 completed: failures, not (transport) errors.
    assert_eq!(t.row("failure %").unwrap().value(1), Some(10.0));
    assert_eq!(t.row("failure %").unwrap().cell(0), "0.00%");
    assert_eq!(t.row("error %").unwrap().value(1), Some(0.0));

    let s = text(&t);
    assert!(
        s.contains("fast") && s.contains("slow") && s.contains("B/A"),
        "{s}"
    );
    assert!(line(&s, "latency_ms p50").ends_with("2.00"), "{s}");
    assert!(line(&s, "status 503").contains(" - "), "{s}");
    assert!(line(&s, "verdicts").contains("LOCALHOST"), "{s}");
    assert!(s.contains("significance needs repeats"), "{s}");
    assert!(!s.contains("(ns)"), "{s}");
    assert!(!s.contains("notes:"), "the same load: {s}");
    let ordered: Vec<usize> = ["intended", "sent", "unsent", "completed", "latency_ms p50"]
        .iter()
        .map(|f| s.find(line(&s, f)).unwrap())
        .collect();
    assert!(ordered.windows(2).all(|w| w[0] < w[1]), "{s}");
}

#[test]
fn compare_missing_figures_show_as_dash() {
    let mut none = report(10.0, 20.0, 0, json!({}));
    none["totals"]["latency_ms"] = Value::Null;
    let full = report(10.0, 20.0, 100, json!({"200": 100}));
    let t = Table::build(&[input("none", none), input("full", full)]);
    let p50 = t.row("latency_ms p50").unwrap();
    assert_eq!(p50.cell(0), "-");
    assert_eq!(p50.cell(1), "10.00");
    assert_eq!(fmt_ratio(&p50.ratios[0]), "-");
    // The status row of a report without that status is unknown, not 0.
    assert_eq!(t.row("status 200").unwrap().cell(0), "-");
    // Nothing completed: no error percentage either.
    assert_eq!(t.row("error %").unwrap().cell(0), "-");
    let j = t.to_json();
    assert_eq!(j["reports"][1]["id"], "B");
    assert_eq!(j["rows"][0]["figure"], "intended");
}

#[test]
fn compare_reads_reports_older_than_the_newest_keys() {
    // Keys compare does not read may be absent (the report's own
    // later additions are optional in its types, `#[serde(default)]`).
    let mut r = report(10.0, 20.0, 100, json!({"200": 100}));
    r.as_object_mut().unwrap().remove("thresholds");
    r.as_object_mut().unwrap().remove("agents");
    r.as_object_mut().unwrap().remove("intervals");
    let c = Compared::from_value(r).unwrap();
    assert_eq!(c.totals.completed, 100);
    // A key of the wrong type is refused, not guessed at.
    let mut odd = report(10.0, 20.0, 100, json!({"200": 100}));
    odd["totals"]["intended"] = json!("many");
    let e = Compared::from_value(odd).unwrap_err().to_string();
    assert!(e.contains("invalid type"), "{e}");
}

#[test]
fn compare_ratio_formatting() {
    let r = |v: f64| Ratio {
        value: Some(v),
        significant: None,
    };
    assert_eq!(fmt_ratio(&r(1.0)), "1.00");
    assert_eq!(fmt_ratio(&r(1.0449)), "1.04");
    assert_eq!(fmt_ratio(&r(0.5)), "0.50");
    assert_eq!(fmt_ratio(&r(12.34)), "12.3");
    assert_eq!(fmt_ratio(&r(250.4)), "250");
    assert_eq!(fmt_ratio(&r(f64::INFINITY)), "inf");
    assert_eq!(
        fmt_ratio(&Ratio {
            value: None,
            significant: None
        }),
        "-"
    );
    let ns = Ratio {
        value: Some(1.04),
        significant: Some(false),
    };
    assert_eq!(fmt_ratio(&ns), "1.04 (ns)");
    let sig = Ratio {
        value: Some(3.0),
        significant: Some(true),
    };
    assert_eq!(fmt_ratio(&sig), "3.00");
    // Zero over zero is "no change", not a division error.
    let zero = Reading {
        value: Some(0.0),
        range: None,
    };
    assert_eq!(ratio(&zero, &zero).value, Some(1.0));
    assert_eq!(letter(0), "A");
    assert_eq!(letter(25), "Z");
    assert_eq!(letter(26), "AA");
    assert_eq!(fmt_number(100.0), "100");
    assert_eq!(fmt_number(12.5), "12.5");
}

fn with_repeats(p99s: &[f64]) -> Value {
    let runs: Vec<Value> = p99s
        .iter()
        .map(|p| report(10.0, *p, 1000, json!({"200": 1000}))["totals"].clone())
        .collect();
    let lo = p99s.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = p99s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut r = report(10.0, 999.0, 1000, json!({"200": 1000}));
    r["repeats"] = json!({
        "count": p99s.len(),
        "representative": 0,
        "runs": runs,
        "median": {"latency_ms": {"p99": median(p99s.to_vec()).unwrap()}},
        "min": {"latency_ms": {"p99": lo}},
        "max": {"latency_ms": {"p99": hi}},
    });
    r
}

#[test]
fn compare_overlapping_repeat_ranges_are_not_significant() {
    let a = input("a", with_repeats(&[100.0, 110.0, 120.0]));
    let b = input("b", with_repeats(&[105.0, 115.0, 125.0]));
    let c = input("c", with_repeats(&[200.0, 210.0, 220.0]));
    let t = Table::build(&[a, b, c]);
    let p99 = t.row("latency_ms p99").unwrap();
    // The median is quoted, not the totals' 999.
    assert_eq!(p99.value(0), Some(110.0));
    assert_eq!(p99.ratios[0].significant, Some(false));
    assert_eq!(fmt_ratio(&p99.ratios[0]), "1.05 (ns)");
    assert_eq!(p99.ratios[1].significant, Some(true));
    assert_eq!(fmt_ratio(&p99.ratios[1]), "1.91");
    // Figures missing from min/max come from the runs themselves; the
    // runs all agree on p50, so equal ranges overlap.
    let p50 = t.row("latency_ms p50").unwrap();
    assert_eq!(p50.ratios[0].significant, Some(false));
    // A derived figure never reads the min/max objects, only the runs.
    assert_eq!(
        t.row("failure %").unwrap().ratios[0].significant,
        Some(false)
    );
    let s = text(&t);
    assert!(s.contains("(3 repeats, median shown)"), "{s}");
    assert!(s.contains("(ns) = not significant"), "{s}");
    assert!(!s.contains("significance needs repeats"), "{s}");
    let j = t.to_json();
    let row = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["figure"] == "latency_ms p99")
        .unwrap();
    assert_eq!(row["ratios"][0]["significant"], false);
    assert_eq!(row["ranges"][2], json!([200.0, 220.0]));
}

#[test]
fn compare_repeats_on_one_side_only_leave_ratios_unmarked() {
    let a = input("a", with_repeats(&[100.0, 110.0]));
    let b = input("b", report(10.0, 105.0, 1000, json!({"200": 1000})));
    let t = Table::build(&[a, b]);
    let p99 = t.row("latency_ms p99").unwrap();
    assert_eq!(p99.ratios[0].significant, None);
    assert_eq!(fmt_ratio(&p99.ratios[0]), "1.00");
    let s = text(&t);
    assert!(s.contains("B is a single run"), "{s}");
}

#[test]
fn compare_flags_no_experiment_and_partial_reports() {
    let a = input("a", report(10.0, 20.0, 1000, json!({"200": 1000})));
    let mut broken = report(0.1, 0.2, 1000, json!({"503": 1000}));
    broken["verdicts"] = json!([
        {"level": "error", "code": "NO_EXPERIMENT", "message": "no request succeeded"},
        {"level": "warn", "code": "LOCALHOST", "message": "x"},
    ]);
    let mut cut = report(10.0, 20.0, 500, json!({"200": 500}));
    cut["partial"] = json!(true);
    let t = Table::build(&[a, input("broken", broken), input("cut", cut)]);
    let s = text(&t);
    assert!(
        s.contains("B: NO_EXPERIMENT — comparing it is meaningless"),
        "{s}"
    );
    assert!(!s.contains("B: LOCALHOST"), "{s}");
    assert!(s.contains("C: PARTIAL"), "{s}");
    assert!(!s.contains("A: "), "A is fine: {s}");
    assert!(
        line(&s, "verdicts").contains("NO_EXPERIMENT,LOCALHOST"),
        "{s}"
    );
}

/// Rates, durations and plans that differ are said, from what the
/// report has: run.duration_s and each scenario's offered_rps.
#[test]
fn compare_says_when_the_loads_differ() {
    let a = input("a", report(10.0, 20.0, 300, json!({"200": 300})));
    let mut faster = report(10.0, 20.0, 600, json!({"200": 600}));
    faster["scenarios"][0]["offered_rps"] = json!(200.0);
    let mut longer = report(10.0, 20.0, 600, json!({"200": 600}));
    longer["run"]["duration_s"] = json!(6.0);
    let mut other = report(10.0, 20.0, 300, json!({"200": 300}));
    other["scenarios"][0]["name"] = json!("checkout");
    let t = Table::build(&[
        a,
        input("faster", faster),
        input("longer", longer),
        input("other", other),
    ]);
    let s = text(&t);
    assert!(
        s.contains("B: rate 200 req/s offered differs from A's 100 req/s"),
        "{s}"
    );
    assert!(s.contains("C: duration 6s differs from A's 3s"), "{s}");
    assert!(
        s.contains("D: scenarios [checkout] differ from A's [default]"),
        "{s}"
    );
    assert_eq!(t.notes.len(), 3, "{s}");
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loadfleet-compare-unit-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn bad_message(path: &Path) -> String {
    let e = load(path).expect_err("bad input");
    assert_eq!(e.exit_code(), 2, "{e:#} is bad input");
    format!("{e:#}")
}

#[test]
fn compare_bad_inputs_name_the_file_and_the_problem() {
    let missing = temp("missing.json");
    let m = bad_message(&missing);
    assert!(
        m.contains("missing.json") && m.contains("cannot read"),
        "{m}"
    );

    let garbled = temp("garbled.json");
    std::fs::write(&garbled, "{\"schema\": ").unwrap();
    let m = bad_message(&garbled);
    assert!(
        m.contains("garbled.json") && m.contains("not a JSON report"),
        "{m}"
    );

    let other = temp("other.json");
    std::fs::write(&other, r#"{"schema": "loadfleet.report/v9"}"#).unwrap();
    let m = bad_message(&other);
    assert!(
        m.contains("other.json") && m.contains("loadfleet.report/v9"),
        "{m}"
    );

    let none = temp("none.json");
    std::fs::write(&none, "[1, 2]").unwrap();
    let m = bad_message(&none);
    assert!(
        m.contains("none.json") && m.contains("no \"schema\" key"),
        "{m}"
    );

    let hollow = temp("hollow.json");
    std::fs::write(&hollow, json!({"schema": SCHEMA}).to_string()).unwrap();
    let m = bad_message(&hollow);
    assert!(
        m.contains("hollow.json") && m.contains("cannot read") && m.contains("missing field"),
        "{m}"
    );

    // run() refuses before printing half a table.
    let good = temp("good.json");
    std::fs::write(&good, report(1.0, 2.0, 3, json!({"200": 3})).to_string()).unwrap();
    let mut out = Vec::new();
    let args = CompareArgs {
        reports: vec![good.clone(), missing],
        json: false,
    };
    assert!(run(&args, &mut out).is_err());
    assert!(out.is_empty());
    let args = CompareArgs {
        reports: vec![good.clone(), good],
        json: true,
    };
    assert_eq!(run(&args, &mut out).unwrap(), 0);
    let j: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["schema"], "loadfleet.compare/v1");
}

#[test]
fn compare_labels_come_from_folder_or_stem() {
    assert_eq!(label_for(Path::new("/runs/pool-10/report.json")), "pool-10");
    assert_eq!(label_for(Path::new("/runs/baseline.json")), "baseline");
    assert_eq!(label_for(Path::new("b.json")), "b");
}

/// A scenario of several requests gets rows per request, read from each
/// report's `scenarios[].requests[]`: a request one report lacks is `-`
/// there, and failure % is the request's own.
#[test]
fn requests_of_a_mix_get_rows_of_their_own() {
    let request = |name: &str, completed: u64, failures: u64, p99: f64| {
        json!({"name": name, "completed": completed, "completed_in_window": completed,
               "completed_ok_in_window": completed - failures, "failures": failures,
               "throughput_rps": completed as f64 / 3.0, "throughput_ok_rps": 0.0,
               "status": {}, "errors": {},
               "latency_ms": {"p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": p99, "p999": p99,
                              "max": p99, "mean": 1.0, "count": completed}})
    };
    let mut a = report(10.0, 20.0, 300, json!({"200": 300}));
    a["scenarios"][0]["requests"] =
        json!([request("items", 200, 0, 5.0), request("cart", 100, 50, 8.0)]);
    let mut b = report(10.0, 20.0, 300, json!({"200": 300}));
    b["scenarios"][0]["requests"] =
        json!([request("items", 300, 0, 10.0), request("search", 1, 0, 1.0)]);
    let t = Table::build(&[input("a", a), input("b", b)]);
    let p99 = t.row("default.items latency_ms p99").unwrap();
    assert_eq!((p99.cell(0), p99.cell(1)), ("5.00".into(), "10.00".into()));
    assert_eq!(p99.ratios[0].value, Some(2.0));
    assert_eq!(
        t.row("default.cart failure %").unwrap().value(0),
        Some(50.0)
    );
    assert_eq!(t.row("default.cart completed").unwrap().cell(1), "-");
    // A request only B has gets its rows too, after A's.
    let search = t.row("default.search completed").unwrap();
    assert_eq!((search.cell(0), search.cell(1)), ("-".into(), "1".into()));
    let rows: Vec<&str> = t.rows.iter().map(|r| r.figure.as_str()).collect();
    let at = |name: &str| rows.iter().position(|r| *r == name).unwrap();
    assert!(at("default.items completed") < at("default.cart completed"));
    assert!(at("default.cart completed") < at("default.search completed"));
}

/// A flow scenario gets rows for its flows and for each step, read from
/// `scenarios[].flows` and `scenarios[].steps[]`.
#[test]
fn flows_and_their_steps_get_rows_of_their_own() {
    let p = |p95: f64| {
        json!({"p50": p95 / 2.0, "p90": p95, "p95": p95, "p99": p95, "p999": p95,
               "max": p95, "mean": p95, "count": 10})
    };
    let flow = |failed: u64, p95: f64, pay_p95: f64| {
        let mut r = report(10.0, 20.0, 100, json!({"200": 100}));
        let s = &mut r["scenarios"][0];
        s["flows"] = json!({
            "intended": 100, "started": 100,
            "unsent": {"total": 0, "concurrency_limit": 0, "late": 0},
            "completed": 100 - failed, "failed": failed, "failed_by_reason": {"check": failed},
            "in_flight_at_end": 0, "throughput_fps": 30.0,
            "latency_ms": p(p95), "active_ms": p(p95 / 2.0),
        });
        s["completed"] = json!(100);
        s["steps"] = json!([{
            "name": "pay", "completed": 100, "completed_in_window": 100,
            "completed_ok_in_window": 100, "failures": 0, "throughput_rps": 30.0,
            "throughput_ok_rps": 30.0, "status": {"200": 100}, "errors": {},
            "latency_ms": p(pay_p95), "reached": 100, "sent": 100, "unsent": {},
            "not_reached": {}, "service_time_ms": null, "start_lag_ms": null,
            "checks": [{"check": "json.status == \"paid\"", "passed": 100 - failed,
                        "failed": failed}],
        }]);
        r
    };
    let t = Table::build(&[
        input("a", flow(25, 800.0, 40.0)),
        input("b", flow(5, 400.0, 20.0)),
    ]);
    let row = |name: &str| {
        let r = t.row(name).unwrap_or_else(|| panic!("no row {name:?}"));
        (r.value(0), r.value(1), r.ratios[0].value)
    };
    assert_eq!(
        row("default flows failed %"),
        (Some(25.0), Some(5.0), Some(0.2))
    );
    assert_eq!(
        row("default flows started"),
        (Some(100.0), Some(100.0), Some(1.0))
    );
    assert_eq!(row("default flows completed").1, Some(95.0));
    assert_eq!(row("default flow latency_ms p95").2, Some(0.5));
    assert_eq!(row("default flow active_ms p95").0, Some(400.0));
    assert_eq!(row("default checks passed %").0, Some(75.0));
    assert_eq!(
        row("default.pay latency_ms p95"),
        (Some(40.0), Some(20.0), Some(0.5))
    );
    assert_eq!(row("default.pay reached").0, Some(100.0));
    assert_eq!(row("default.pay failures").0, Some(0.0));
}
