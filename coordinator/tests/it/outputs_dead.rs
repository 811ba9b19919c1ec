//! End-to-end: outputs that never answer (a port that accepts and stays
//! silent) or refuse connections (a closed port) change nothing in the
//! run: its figures equal those of a run without outputs, the report
//! carries an `OUTPUT_LOST` verdict naming each output and the seconds
//! lost, and the exit status follows the usual rules.

use crate::common;
use crate::outputs_support;

use std::time::{Duration, Instant};

use common::*;
use outputs_support::*;

fn run_with(test: &str, extra: &[String]) -> (Option<i32>, serde_json::Value, String, Duration) {
    let out = temp_dir(test);
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "50",
        "--duration",
        "3s",
    ])
    .args(["--testbed-delay", "2ms"])
    .args(extra)
    .arg("--out")
    .arg(&out)
    // Credentials: none may reach the output, the report or the files.
    .env("LOADFLEET_OUT_TOKEN", "tok-hunter2");
    let started = Instant::now();
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(120));
    for entry in std::fs::read_dir(&out).expect("the out folder") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("hunter2"),
            "a credential in {}",
            path.display()
        );
    }
    assert!(
        !output.contains("hunter2"),
        "a credential in the output:\n{output}"
    );
    (status.code(), read_report(&out), output, started.elapsed())
}

#[test]
fn dead_sinks_change_no_figure() {
    let mute = Mute::new();
    let closed = closed_port();
    let (plain_status, plain, plain_out, plain_took) = run_with("outputs-dead-plain", &[]);
    let (status, r, output, took) = run_with(
        "outputs-dead",
        &[
            "--out-timeout".into(),
            "1s".into(),
            "--out-prometheus".into(),
            format!("http://{}/api/v1/write", mute.addr),
            "--out-header".into(),
            "X-Api-Key: key-hunter2".into(),
            "--out-prometheus".into(),
            "http://user:pw-hunter2@127.0.0.1:1/api/v1/write".into(),
            "--out-influxdb".into(),
            format!("http://127.0.0.1:{closed}/write?db=x"),
        ],
    );
    // What the schedule fixes is the same with and without dead outputs.
    for key in ["intended", "sent", "completed"] {
        assert_eq!(
            r["totals"][key], plain["totals"][key],
            "{key}\n{output}\n{plain_out}"
        );
    }
    assert_eq!(r["totals"]["unsent"], plain["totals"]["unsent"]);
    assert_eq!(r["totals"]["status"], plain["totals"]["status"]);
    assert_eq!(r["totals"]["errors"], plain["totals"]["errors"]);
    let lost: Vec<&str> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["code"] == "OUTPUT_LOST")
        .map(|v| {
            assert_eq!(v["level"], "warn", "{v}");
            v["message"].as_str().expect("message")
        })
        .collect();
    assert_eq!(lost.len(), 3, "{lost:?}\n{output}");
    assert!(
        lost.iter()
            .any(|m| m.contains(&format!("prometheus http://{}", mute.addr))),
        "{lost:?}"
    );
    assert!(
        lost.iter()
            .any(|m| m.contains(&format!("influxdb http://127.0.0.1:{closed}/write"))),
        "{lost:?}"
    );
    for m in &lost {
        assert!(m.contains("seconds were not delivered (seconds 0-"), "{m}");
        assert!(m.contains("totals stop short"), "{m}");
    }
    // A warning: the exit status is the one the run without outputs got.
    assert_eq!(status, plain_status, "{output}");
    // The dead sinks cost at most their timeout (and retry pauses) at the end.
    assert!(
        took < plain_took + Duration::from_secs(4),
        "took {took:?}, without outputs {plain_took:?}"
    );
    // No secret or query string leaks into the report.
    assert!(!r.to_string().contains("db=x"));
}
