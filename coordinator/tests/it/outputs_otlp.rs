//! End-to-end: OpenTelemetry metrics over OTLP/HTTP, decoded by an
//! independent implementation (PyPI's `opentelemetry-proto`, through
//! tests/support/otlp_receiver.py). The last export's cumulative sums
//! equal the report's counts, and each scenario's exponential latency
//! histogram holds the report's count, with a sum that agrees with the
//! report's mean.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const RECEIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/otlp_receiver.py"
);

fn point<'a>(
    export: &'a Value,
    metric: &str,
    scenario: &str,
    extra: Option<(&str, &str)>,
) -> Option<&'a Value> {
    export["metrics"][metric]["points"]
        .as_array()?
        .iter()
        .find(|p| {
            p["attributes"]["scenario"] == scenario
                && extra.is_none_or(|(k, v)| p["attributes"][k] == v)
        })
}

#[test]
fn otlp_exports_hold_the_reports_figures() {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 with PyPI's opentelemetry-proto is needed; .ci/run installs it (python3 -m pip install opentelemetry-proto)"
    );
    let mut cmd = Command::new("python3");
    cmd.arg(RECEIVER);
    let mut receiver = Proc::spawn(cmd, "otlp_receiver.py");
    let line = receiver.wait_for_line("LISTENING", Duration::from_secs(30));
    let port = line.rsplit(' ').next().expect("a port").to_string();
    let dir = temp_dir("outputs-otlp");
    // One request in flight per worker, each taking the testbed's 20 ms,
    // holds the agent to at most 100 req/s of the 240 it is offered: the
    // unsent counts are never zero on any machine.
    let plan = write_plan(
        &dir,
        r#"
[target]
url = "testbed"
max_in_flight = 2

[[scenario]]
name = "browse"
rate = 200
duration = "3s"

[[scenario]]
name = "buy"
rate = 40
duration = "3s"
"#,
    );
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "1", "--testbed-delay", "20ms"])
        .args(["--out-run-id", "otlp-e2e", "--out-otlp"])
        .arg(format!("http://127.0.0.1:{port}/v1/metrics"))
        .arg("--out")
        .arg(&out);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(120));
    let r = read_report(&out);
    assert!(!output.contains("OUTPUT_LOST"), "{output}");
    // The receiver has printed every export by the time the coordinator,
    // which waited for their answers, has ended.
    let _ = receiver.child.kill();
    let (_, printed) = receiver.wait(Duration::from_secs(10));
    assert!(!printed.contains("[stdout] BAD"), "{printed}");
    let exports: Vec<Value> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("[stdout] EXPORT "))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let last = exports
        .iter()
        .rev()
        .find(|e| e["metrics"].get("loadfleet.requests.intended").is_some())
        .unwrap_or_else(|| panic!("no export with counts:\n{printed}"));
    assert_eq!(last["resource"]["loadfleet.run_id"], "otlp-e2e");
    assert_eq!(last["resource"]["service.name"], "loadfleet");
    let intended = &last["metrics"]["loadfleet.requests.intended"];
    assert_eq!(intended["kind"], "sum");
    assert_eq!(intended["monotonic"], true);
    assert_eq!(intended["temporality"], 2, "cumulative");
    assert!(
        exports
            .iter()
            .any(|e| e["metrics"].get("loadfleet.verdict").is_some()),
        "no verdicts exported"
    );
    let scenarios = r["scenarios"].as_array().expect("scenarios");
    assert!(
        u(&r["totals"]["unsent"]["total"]) > 0,
        "nothing unsent: {output}"
    );
    for s in scenarios {
        let name = s["name"].as_str().expect("name");
        for (metric, key) in [
            ("loadfleet.requests.intended", "intended"),
            ("loadfleet.requests.sent", "sent"),
            ("loadfleet.requests.completed", "completed"),
        ] {
            let p = point(last, metric, name, None).unwrap_or_else(|| panic!("{metric} {name}"));
            assert_eq!(f(&p["value"]), f(&s[key]), "{name} {metric}");
        }
        let unsent: f64 = last["metrics"]["loadfleet.requests.unsent"]["points"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter(|p| p["attributes"]["scenario"] == name)
                    .map(|p| f(&p["value"]))
                    .sum()
            })
            .unwrap_or(0.0);
        assert_eq!(unsent, f(&s["unsent"]["total"]), "{name} unsent");
        if let Some(n) = s["status"]["200"].as_f64() {
            let p = point(last, "loadfleet.responses", name, Some(("code", "200"))).expect("200s");
            assert_eq!(f(&p["value"]), n, "{name} 200s");
        }
        let h = point(last, "loadfleet.latency", name, None).expect("latency histogram");
        let lat = &s["latency_ms"];
        let count = u(&lat["count"]);
        assert_eq!(u(&h["count"]), count, "{name} count");
        let buckets: u64 = h["bucket_counts"]
            .as_array()
            .expect("buckets")
            .iter()
            .map(u)
            .sum::<u64>()
            + u(&h["zero_count"]);
        assert_eq!(buckets, count, "{name} buckets");
        assert_eq!(h["scale"], 5);
        // The sum is read at each HDR bucket's top, the report's mean at
        // its middle: within HDR's 0.1%.
        let want = f(&lat["mean"]) * count as f64 / 1000.0;
        let got = f(&h["sum"]);
        assert!(
            (got - want).abs() <= want * 0.002,
            "{name} sum {got} vs {want}"
        );
    }
}
