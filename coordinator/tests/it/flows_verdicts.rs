//! Thresholds on flows and `compare` of flow reports, through the real
//! binaries against the testbed's shop declining every fourth payment
//! (`--shop-decline 0.25`): a check on the share of checks held fails the
//! run with exit status 1 and the exact share, while thresholds on the
//! flow latency (`purchase.flow.p95`) and on a step's
//! (`purchase.payment_create.p95`) pass; `compare --json` of two such
//! runs has a row for each flow figure and each step's.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const THRESHOLDS: [&str; 3] = [
    "checks>99%",
    "purchase.flow.p95<15s",
    "purchase.payment_create.p95<5s",
];

/// One run of the purchase flow at 40 flows/s for 2 s against `addr`,
/// with [`THRESHOLDS`] in the plan; returns the report's folder.
fn declined_run(addr: &str, test: &str) -> std::path::PathBuf {
    let dir = temp_dir(&format!("{test}-plan"));
    let thresholds = THRESHOLDS.map(|t| format!("{t:?}")).join(", ");
    let text = format!(
        "thresholds = [{thresholds}]\n{}",
        crate::flows::purchase(addr, 40, 2, r#""json.status == \"paid\"""#)
    );
    let plan = write_plan(&dir, &text);
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, out) =
        run_report(test, &["run", plan, "--local-agents", "2", "--drain", "5s"]);
    let flows = &r["scenarios"][0]["flows"];
    assert_eq!(u(&flows["started"]), 80, "{output}");
    assert_eq!(u(&flows["failed_by_reason"]["check"]), 20, "{flows}");
    // Only the checks fail the run: exit 1, no error verdict.
    assert_eq!(status.code(), Some(1), "{output}");
    let checked = |text: &str| -> &Value {
        r["thresholds"]
            .as_array()
            .expect("thresholds")
            .iter()
            .find(|c| c["threshold"] == text)
            .unwrap_or_else(|| panic!("no threshold {text}: {}", r["thresholds"]))
    };
    // The share of every step's checks that held, from the report itself.
    let (mut passed, mut judged) = (0, 0);
    for step in r["scenarios"][0]["steps"].as_array().expect("steps") {
        for check in step["checks"].as_array().expect("checks") {
            passed += u(&check["passed"]);
            judged += u(&check["passed"]) + u(&check["failed"]);
        }
    }
    // Cart: 2 checks held 80 times; payment: 60 paid of 80.
    assert_eq!(
        (passed, judged),
        (220, 240),
        "{}",
        r["scenarios"][0]["steps"]
    );
    let checks = checked("checks>99%");
    assert_eq!(checks["passed"], false, "{checks}");
    assert_eq!(checks["unit"], "%", "{checks}");
    let share = 100.0 * passed as f64 / judged as f64;
    assert!(
        (f(&checks["actual"]) - share).abs() < 1e-9,
        "{checks} vs {share}"
    );
    let flow = checked("purchase.flow.p95<15s");
    assert_eq!(flow["passed"], true, "{flow}");
    assert_eq!(
        f(&flow["actual"]),
        f(&flows["latency_ms"]["p95"]),
        "{flow} vs {flows}"
    );
    let pay = checked("purchase.payment_create.p95<5s");
    assert_eq!(pay["passed"], true, "{pay}");
    assert_eq!(
        f(&pay["actual"]),
        f(&r["scenarios"][0]["steps"][3]["latency_ms"]["p95"]),
        "{pay}"
    );
    out
}

#[test]
fn thresholds_on_flows_steps_and_checks_decide_the_exit_and_compare_shows_them() {
    let (_testbed, addr) = start_testbed(&["--shop", "--shop-decline", "0.25"]);
    let a = declined_run(&addr, "flows-verdicts-a");
    let b = declined_run(&addr, "flows-verdicts-b");

    let mut cmd = coordinator();
    cmd.args(["compare", "--json"]).arg(&a).arg(&b);
    let (status, output) = run(cmd, "compare --json", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
    let json: String = output
        .lines()
        .filter_map(|l| l.strip_prefix("[stdout] "))
        .collect::<Vec<_>>()
        .join("\n");
    let v: Value = serde_json::from_str(&json).expect("compare --json is JSON");
    let rows = v["rows"].as_array().expect("rows");
    let row = |figure: &str| -> &Value {
        rows.iter()
            .find(|r| r["figure"] == figure)
            .unwrap_or_else(|| panic!("no row {figure:?} in {json}"))
    };
    let both = |figure: &str| -> (f64, f64) {
        let r = row(figure);
        (f(&r["values"][0]), f(&r["values"][1]))
    };
    assert_eq!(both("purchase flows started"), (80.0, 80.0));
    assert_eq!(both("purchase flows completed"), (60.0, 60.0));
    assert_eq!(both("purchase flows failed"), (20.0, 20.0));
    assert_eq!(both("purchase flows failed %"), (25.0, 25.0));
    assert_eq!(row("purchase flows failed")["ratios"][0]["ratio"], 1.0);
    let share = 100.0 * 220.0 / 240.0;
    let (ca, cb) = both("purchase checks passed %");
    assert!(
        (ca - share).abs() < 1e-9 && (cb - share).abs() < 1e-9,
        "{ca} {cb}"
    );
    for figure in [
        "purchase flow latency_ms p50",
        "purchase flow latency_ms p95",
        "purchase flow latency_ms p99",
        "purchase flow active_ms p95",
    ] {
        let (x, y) = both(figure);
        assert!(x > 0.0 && y > 0.0, "{figure}: {x} {y}");
    }
    for step in ["login", "cart_add", "order_create", "payment_create"] {
        assert_eq!(
            both(&format!("purchase.{step} reached")),
            (80.0, 80.0),
            "{step}"
        );
        assert_eq!(
            both(&format!("purchase.{step} failures")),
            (0.0, 0.0),
            "{step}"
        );
        let (x, y) = both(&format!("purchase.{step} latency_ms p95"));
        assert!(x > 0.0 && y > 0.0, "{step}: {x} {y}");
    }
}
