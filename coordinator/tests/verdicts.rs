//! What the report says about a run: thresholds and exit statuses, the
//! unsent share, and a starved generator named as the bottleneck.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn local_run(test: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let out = temp_dir(test);
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "100",
        "--duration",
        "2s",
    ])
    .args(["--testbed-delay", "5ms", "--out"])
    .arg(&out)
    .args(extra);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    (status.code(), output, read_report(&out))
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

/// Overload with a small cap: the UNSENT verdict states the right share,
/// and the per-second series shows unsent only once in-flight hit the cap.
#[test]
fn unsent_share_and_series_under_overload() {
    let out = temp_dir("unsent-series");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "2",
        "--rate",
        "300",
        "--duration",
        "4s",
    ])
    .args(["--max-in-flight", "15", "--testbed-delay", "100ms"])
    .args([
        "--testbed-pool",
        "10",
        "--testbed-pool-timeout",
        "150ms",
        "--out",
    ])
    .arg(&out);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{output}");
    let r = read_report(&out);
    let t = &r["totals"];
    let share = 100.0 * u(&t["unsent"]["total"]) as f64 / u(&t["intended"]) as f64;
    let verdict = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["code"] == "UNSENT")
        .expect("UNSENT verdict")["message"]
        .as_str()
        .expect("message")
        .to_string();
    assert!(
        verdict.contains(&format!("({share:.1}%)")),
        "{verdict} vs {share:.1}%"
    );
    let cap = 2 * 15;
    let mut seen_unsent = false;
    for iv in r["intervals"].as_array().expect("intervals") {
        let unsent = iv["unsent_by_reason"]["concurrency_limit"]
            .as_u64()
            .unwrap_or(0);
        if unsent > 0 {
            seen_unsent = true;
            assert!(
                u(&iv["max_in_flight"]) >= cap,
                "unsent before the cap was reached: {iv}"
            );
        }
    }
    assert!(seen_unsent, "the series shows unsent seconds");
    let csv = std::fs::read_to_string(out.join("intervals.csv")).expect("intervals.csv");
    assert!(
        csv.starts_with("t,intended,sent,unsent,unsent_concurrency_limit"),
        "{csv}"
    );
    assert_eq!(
        csv.lines().count(),
        r["intervals"].as_array().map_or(0, Vec::len) + 1
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
    let mut tb = Command::new(bin("loadfleet-testbed"));
    tb.args(["--listen", "127.0.0.1:0", "--cpus", "0"]);
    let mut testbed = Proc::spawn(tb, "testbed");
    let line = testbed.wait_for_line("listening on", Duration::from_secs(20));
    let addr = line.rsplit(' ').next().expect("addr").to_string();

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
    assert!(
        body.contains("loadfleet_responses_total{code=\"200\"}"),
        "{body}"
    );
    assert!(
        body.contains("loadfleet_latency_seconds{quantile=\"0.99\"}"),
        "{body}"
    );
    let (status, output) = c.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
}
