//! What the report says about a run: thresholds and exit statuses, the
//! unsent share, and a starved generator named as the bottleneck.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn local_run(test: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let mut all = vec![
        "run",
        "--local-agents",
        "1",
        "--rate",
        "100",
        "--duration",
        "2s",
        "--testbed-delay",
        "5ms",
    ];
    all.extend_from_slice(extra);
    let (status, output, r, _) = run_report(test, &all);
    (status.code(), output, r)
}

#[test]
fn passing_thresholds_exit_0() {
    let (code, output, r) = local_run(
        "th-pass",
        &[
            "--threshold",
            "p99<2s",
            "--threshold",
            "unsent==0",
            "--threshold",
            "errors<1%",
        ],
    );
    assert_eq!(code, Some(0), "{output}");
    let checked = r["thresholds"].as_array().expect("thresholds");
    assert_eq!(checked.len(), 3);
    assert!(checked.iter().all(|t| t["passed"] == true), "{checked:?}");
}

#[test]
fn failing_threshold_exits_1_and_is_listed() {
    let (code, output, r) = local_run(
        "th-fail",
        &["--threshold", "p50<1ms", "--threshold", "unsent==0"],
    );
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("FAIL p50<1ms"), "{output}");
    let failed: Vec<&str> = r["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .filter(|t| t["passed"] == false)
        .filter_map(|t| t["threshold"].as_str())
        .collect();
    assert_eq!(failed, ["p50<1ms"]);
}

/// The testbed's work is 20 ms but the answers come back in well under
/// 10 ms: something else answered, and the report says so.
#[test]
fn latency_below_the_known_floor_is_no_experiment() {
    let (code, output, r) = local_run("floor", &["--latency-floor", "200ms"]);
    assert_eq!(code, Some(3), "{output}");
    let v = r["verdicts"].as_array().expect("verdicts");
    assert!(
        v.iter().any(|v| v["code"] == "NO_EXPERIMENT"
            && v["message"].as_str().unwrap_or("").contains("floor")),
        "{v:?}"
    );
}

/// An agent whose core is taken by a higher-priority busy loop cannot keep
/// the schedule: GENERATOR_SATURATED names it, and the run is degraded.
#[test]
fn starved_agent_is_named_as_the_bottleneck() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "this test needs two CPUs (target and agent apart)"
    );
    let (_testbed, addr) = start_testbed(&["--cpus", "0"]);

    // taskset and nice exec into python, so the handle is the busy loop
    // itself: it ends by itself after 30 s, and is killed by handle sooner.
    let mut hog = Command::new("taskset");
    hog.args(["-c", "1", "nice", "-n", "-20", "python3", "-c"])
        .arg("import time\nend = time.time() + 30\nwhile time.time() < end: pass");
    let hog = Proc::spawn(hog, "busy loop");

    let out = temp_dir("starved");
    let mut c = coordinator();
    c.args([
        "run",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "t",
        "--expect-agents",
        "1",
    ])
    .args([
        "--rate",
        "500",
        "--duration",
        "4s",
        "--max-lag",
        "50ms",
        "--url",
    ])
    .arg(format!("http://{addr}/"))
    .arg("--out")
    .arg(&out);
    let mut c = Proc::spawn(c, "coordinator");
    let control = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let control = control
        .split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("address")
        .to_string();
    let mut a = agent();
    a.args([
        "--coordinator",
        &format!("http://{control}"),
        "--token",
        "t",
        "--id",
        "starved",
    ])
    .args(["--cpus", "1"]);
    let a = Proc::spawn(a, "agent");
    let (status, output) = c.wait(Duration::from_secs(60));
    drop(hog);
    drop(a);
    let r = read_report(&out);
    let v = r["verdicts"].as_array().expect("verdicts");
    let sat = v
        .iter()
        .find(|v| v["code"] == "GENERATOR_SATURATED")
        .unwrap_or_else(|| panic!("no GENERATOR_SATURATED verdict: {v:?}\n{output}"));
    assert!(
        sat["message"]
            .as_str()
            .unwrap_or("")
            .contains("agent starved"),
        "{sat}"
    );
    assert_eq!(
        status.code(),
        Some(3),
        "a generator-bound run is degraded: {output}"
    );
}

/// --metrics-listen serves the live run in Prometheus' text format.
#[test]
fn live_metrics_for_prometheus() {
    use std::io::{Read, Write};
    let out = temp_dir("metrics");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "100",
        "--duration",
        "4s",
    ])
    .args([
        "--testbed-delay",
        "2ms",
        "--metrics-listen",
        "127.0.0.1:0",
        "--out",
    ])
    .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("metrics on http://", Duration::from_secs(20));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.strip_suffix("/metrics"))
        .expect("metrics address")
        .to_string();
    c.wait_for_line("sent 100/s", Duration::from_secs(20));
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect to metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("response");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("# TYPE loadfleet_requests_intended_total counter"),
        "{body}"
    );
    let series = |name: &str, label: &str| {
        body.lines()
            .any(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
    };
    assert!(
        series("loadfleet_responses_total", "code=\"200\"}"),
        "{body}"
    );
    assert!(
        series("loadfleet_latency_exact_seconds", "quantile=\"0.99\"}"),
        "{body}"
    );
    let (status, output) = c.wait(Duration::from_secs(30));
    assert_ok_or_saturated(status, &read_report(&out), &output);
}
