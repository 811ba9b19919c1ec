//! End-to-end: a flow run's flows and steps reach a real Prometheus by
//! remote write, and what it holds at the end is the report's count: flows
//! started, completed and failed by reason, and each step's requests sent,
//! completed and failed, against the testbed's shop declining a share of
//! payments (so some flows fail on a check and the rest complete).

use crate::common;
use crate::outputs_support;

use common::*;
use outputs_support::*;

/// The shop's purchase at 30 flows/s for 3 s; the payment's check fails
/// on every payment the shop declines.
fn plan(addr: &str) -> String {
    format!(
        r#"
[target]
url = "http://{addr}"

[[scenario]]
name = "buy"
rate = 30
duration = "3s"

[[scenario.step]]
name = "login"
method = "POST"
path = "/login"
capture = {{ token = "json.token" }}

[[scenario.step]]
name = "cart_add"
method = "POST"
path = "/cart"
capture = {{ cart = "json.cart_id" }}

[[scenario.step]]
name = "order_create"
method = "POST"
path = "/orders"
headers = {{ "Authorization" = "Bearer {{{{token}}}}" }}
body = '{{"cart": "{{{{cart}}}}"}}'
capture = {{ order = "json.order.id" }}

[[scenario.step]]
name = "payment_create"
method = "POST"
path = "/payments/{{{{order}}}}"
check = ["json.status == \"paid\""]
"#
    )
}

#[test]
fn a_flow_runs_flows_and_steps_reach_prometheus_as_the_report_counts_them() {
    let (_testbed, addr) = start_testbed(&["--shop", "--shop-decline", "0.3", "--delay", "2ms"]);
    let dir = temp_dir("flows-outputs");
    let prom = prometheus(&dir);
    let plan = write_plan(&dir, &plan(&addr));
    let plan = plan.to_str().expect("a UTF-8 path");
    let url = format!("http://{}/api/v1/write", prom.addr);
    let (status, output, r, _out) = run_report(
        "flows-outputs-run",
        &[
            "run",
            plan,
            "--local-agents",
            "1",
            "--out-run-id",
            "flows-out",
            "--out-prometheus",
            &url,
        ],
    );
    let s = &r["scenarios"][0];
    let flows = &s["flows"];
    // Some flows completed and some failed on the check: both are counted.
    assert!(
        u(&flows["completed"]) > 0 && u(&flows["failed_by_reason"]["check"]) > 0,
        "exit {status:?}: {output}"
    );
    let sel = r#"run_id="flows-out",scenario="buy""#;
    let value = |q: String| promql_value(&prom.addr, &q);
    assert_eq!(
        value(format!("loadfleet_flows_started_total{{{sel}}}")),
        f(&flows["started"]),
        "{output}"
    );
    assert_eq!(
        value(format!("loadfleet_flows_completed_total{{{sel}}}")),
        f(&flows["completed"]),
        "{output}"
    );
    assert_eq!(
        value(format!("sum(loadfleet_flows_failed_total{{{sel}}})")),
        f(&flows["failed"]),
        "{output}"
    );
    for (reason, n) in flows["failed_by_reason"].as_object().expect("reasons") {
        assert_eq!(
            value(format!(
                r#"loadfleet_flows_failed_total{{{sel},reason="{reason}"}}"#
            )),
            f(n),
            "{reason}: {output}"
        );
    }
    let steps = s["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    for q in steps {
        let step = q["name"].as_str().expect("a step's name");
        let of = |metric: &str| value(format!(r#"{metric}{{{sel},step="{step}"}}"#));
        assert_eq!(
            of("loadfleet_step_requests_sent_total"),
            f(&q["sent"]),
            "{step}"
        );
        assert_eq!(
            of("loadfleet_step_requests_completed_total"),
            f(&q["completed"]),
            "{step}"
        );
        assert_eq!(
            of("loadfleet_step_failures_total"),
            f(&q["failures"]),
            "{step}"
        );
        assert_eq!(
            value(format!(
                r#"histogram_count(loadfleet_step_latency_seconds{{{sel},step="{step}"}})"#
            )),
            f(&q["completed"]),
            "{step}"
        );
    }
}
