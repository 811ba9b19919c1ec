//! Protocol settings end to end against the testbed, each checked by the
//! figure it changes: `protocol = "h2c"` in a plan, the `--sse`/`--hold`/
//! `--send-time` flags, and an SSE scenario's `reconnect`.

use crate::common;

use common::*;
use serde_json::Value;

fn only_scenario(r: &Value) -> &Value {
    let scenarios = r["scenarios"].as_array().expect("scenarios");
    assert_eq!(scenarios.len(), 1, "{scenarios:?}");
    &scenarios[0]
}

/// A plan's `protocol = "h2c"`: every connection speaks h2c (HTTP/2 with
/// prior knowledge), and every request is answered over it.
#[test]
fn h2c_in_a_plan_speaks_h2c() {
    let (_testbed, addr) = start_testbed(&["--delay", "0ms"]);
    let dir = temp_dir("h2c-plan");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}/"
protocol = "h2c"
connections = 2
[[scenario]]
name = "h2c"
rate = 100
duration = "1s"
"#
        ),
    );
    let (status, output, r, _) = run_report(
        "h2c",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--local-agents",
            "1",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let protocol = &r["run"]["protocol"];
    assert_eq!(protocol["asked"], "h2c", "{protocol}");
    // Opened as streams need them, up to the plan's 2.
    let h2c = u(&protocol["connections"]["h2c"]);
    assert!((1..=2).contains(&h2c), "{protocol}");
    assert_eq!(
        protocol["connections"].as_object().map(|o| o.len()),
        Some(1),
        "{protocol}"
    );
    let s = only_scenario(&r);
    assert_eq!(u(&s["status"]["200"]), 100, "{output}");
}

/// `--sse --hold 1s --send-time data.sent_us` against a testbed sending an
/// event every 100 ms: 20 subscribers each hold their stream about 1 s, so
/// get about ten events (never more than the hold allows), and each event's
/// delivery latency is measured from the send time in its data.
#[test]
fn sse_flags_hold_streams_and_read_the_send_time() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "100ms"]);
    let url = format!("http://{addr}/sse");
    let (status, output, r, _) = run_report(
        "sse-flags",
        &[
            "run",
            "--url",
            &url,
            "--sse",
            "--hold",
            "1s",
            "--send-time",
            "data.sent_us",
            "--send-time-unit",
            "us",
            "--rate",
            "20",
            "--duration",
            "1s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let sse = &only_scenario(&r)["sse"];
    assert_eq!(u(&sse["opened"]), 20, "{output}");
    let per = &sse["events_per_subscriber"];
    assert!(
        u(&per["min"]) >= 5 && u(&per["max"]) <= 11,
        "1 s held at one event per 100 ms: {per}"
    );
    let delivery = &sse["delivery"];
    assert_eq!(delivery["send_time"], "data.sent_us (us)", "{delivery}");
    assert_eq!(
        u(&delivery["latency_ms"]["count"]),
        u(&sse["events"]),
        "every event's latency measured: {delivery}"
    );
    assert_eq!(u(&delivery["no_send_time"]), 0, "{delivery}");
}

/// `reconnect = "300ms"` against a testbed that ends every stream after
/// 400 ms: each of 10 subscribers holding 3 s opens a stream every
/// 400 + 300 ms, so reconnects 3 or 4 times (4 × 0.7 s = 2.8 s); without
/// the wait it would be 7 times, and with the default 3 s not at all.
#[test]
fn reconnect_waits_before_each_new_stream() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "100ms", "--sse-drop-after", "400ms"]);
    let dir = temp_dir("reconnect-plan");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}/"
[[scenario]]
name = "resubscribe"
kind = "sse"
rate = 10
duration = "1s"
hold = "3s"
reconnect = "300ms"
[[scenario.request]]
path = "/sse"
"#
        ),
    );
    let (status, output, r, _) =
        run_report("reconnect", &["run", plan.to_str().expect("utf-8 path")]);
    assert_ok_or_saturated(status, &r, &output);
    let sse = &only_scenario(&r)["sse"];
    assert_eq!(u(&sse["opened"]), 10, "{output}");
    let reconnects = u(&sse["reconnects"]);
    assert!(
        (30..=40).contains(&reconnects),
        "{reconnects} reconnects: {sse}"
    );
    assert!(u(&sse["ended_by_server"]) >= reconnects, "{sse}");
}
