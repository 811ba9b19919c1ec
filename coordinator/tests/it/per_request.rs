//! Per-request figures (issue 40, "per-request figures"), through the real
//! binaries: a local fleet of two agents sends a two-request mix to the
//! built-in testbed, one request answered 200 and one 400, and every
//! output splits the scenario by request with each request's own figures.

use crate::common;

use std::time::Duration;

use common::*;

/// A mix of a GET the testbed answers 200 and one it answers 400 (`/bytes/`
/// wants a size), three to one, with thresholds on each request.
const PLAN: &str = r#"
thresholds = ["mix.items.failures==0", "mix.broken.failures>=99%", "mix.items.p99<10s"]
[target]
url = "testbed"

[[scenario]]
name = "mix"
rate = 100
duration = "3s"

[[scenario.request]]
name = "items"
path = "/items/{{seq}}?user=1"
weight = 3

[[scenario.request]]
name = "broken"
path = "/bytes/many"
weight = 1

[[scenario.request]]
method = "POST"
path = "/cart"
weight = 1
"#;

#[test]
fn a_mix_is_reported_per_request_and_adds_up() {
    let dir = temp_dir("per-request");
    let plan = write_plan(&dir, PLAN);
    let plan = plan.to_str().expect("a UTF-8 path");
    // `plan check` shows the names the report will use, derived ones too.
    let mut check = coordinator();
    check.args(["plan", "check", plan]);
    let (status, said) = run(check, "plan check", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains(
            r#"requests: "items" (weight 3), "broken" (weight 1), "POST /cart" (weight 1)"#
        ),
        "{said}"
    );
    let (status, output, r, out) = run_report(
        "per-request-run",
        &["run", plan, "--local-agents", "2", "--testbed-delay", "2ms"],
    );
    assert_ok_or_saturated(status, &r, &output);
    let ctx = format!("report: {:#}\noutput:\n{output}", r["scenarios"]);
    let s = &r["scenarios"][0];
    let requests = s["requests"].as_array().expect("scenarios[0].requests");
    let names: Vec<&str> = requests.iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(names, ["items", "broken", "POST /cart"], "{ctx}");
    // The parts add up to the scenario, status by status.
    let sum = |key: &str| -> u64 { requests.iter().map(|q| u(&q[key])).sum() };
    for key in [
        "completed",
        "completed_in_window",
        "completed_ok_in_window",
        "failures",
    ] {
        assert_eq!(sum(key), u(&s[key]), "{key}: {ctx}");
    }
    assert!(
        u(&s["completed"]) >= 250,
        "most of 300 arrivals completed: {ctx}"
    );
    for (code, n) in s["status"].as_object().expect("status") {
        let parts: u64 = requests
            .iter()
            .map(|q| q["status"][code].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(parts, u(n), "status {code}: {ctx}");
    }
    // Each request's statuses are its own: the weights deal 3 of 5
    // arrivals to items, 1 to broken and 1 to the cart.
    let (items, broken, cart) = (&requests[0], &requests[1], &requests[2]);
    let codes = |q: &serde_json::Value| -> Vec<String> {
        q["status"]
            .as_object()
            .expect("status")
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(codes(items), ["200"], "{ctx}");
    assert_eq!(codes(broken), ["400"], "{ctx}");
    assert_eq!(codes(cart), ["200"], "{ctx}");
    assert_eq!(u(&items["failures"]), 0, "{ctx}");
    assert_eq!(u(&broken["failures"]), u(&broken["completed"]), "{ctx}");
    let (ni, nb) = (
        u(&items["completed"]) as f64,
        u(&broken["completed"]) as f64,
    );
    assert!(
        (ni / nb - 3.0).abs() < 0.3,
        "items {ni} : broken {nb}: {ctx}"
    );
    for q in requests {
        assert!(f(&q["throughput_rps"]) > 0.0, "{ctx}");
        assert!(q["latency_ms"]["p50"].is_number(), "{ctx}");
    }
    // Each keeps its own latency: the testbed refuses the bad size before
    // its delay, and serves the others after it.
    for q in [items, cart] {
        assert!(
            f(&q["latency_ms"]["p50"]) >= 2.0,
            "the testbed's delay: {ctx}"
        );
    }
    // The thresholds read each request's own figures.
    let checked = r["thresholds"].as_array().expect("thresholds");
    assert_eq!(checked.len(), 3, "{ctx}");
    for c in checked {
        assert_eq!(c["passed"], true, "{c}: {ctx}");
    }
    assert_eq!(f(&checked[1]["actual"]), 100.0, "{ctx}");

    // The text report and the page show the split.
    assert!(output.contains("requests of mix:"), "{output}");
    let row = output
        .lines()
        .map(|l| l.trim_start_matches("[stdout]").trim())
        .find(|l| l.starts_with("broken "))
        .unwrap_or_else(|| panic!("no row for broken: {output}"));
    assert!(row.contains("400: "), "{row}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("<h2>Requests</h2>") && html.contains("POST /cart"),
        "report.html"
    );

    // compare has rows per scenario.request.
    let mut cmd = coordinator();
    cmd.arg("compare")
        .arg(out.join("report.json"))
        .arg(out.join("report.json"));
    let (status, table) = run(cmd, "compare", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{table}");
    for row in [
        "mix.items completed",
        "mix.broken failure %",
        "mix.POST /cart latency_ms p99",
    ] {
        assert!(table.contains(row), "no row {row:?}:\n{table}");
    }
}
