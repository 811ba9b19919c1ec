//! gRPC unary targets end to end: the real coordinator and agents against a
//! gRPC server we did not write (PyPI's grpcio, tests/support/grpc_server.py,
//! installed by scripts/test.sh) and against `loadfleet-testbed --grpc`.
//! Each report is held against the server's own counters, printed when it
//! stops.

use crate::common;
use crate::grpc_fixture;

use std::time::Duration;

use common::*;
use grpc_fixture::*;
use serde_json::Value;

/// A status's count in a report's `grpc.status`, 0 when absent.
fn grpc_count(totals: &Value, status: &str) -> u64 {
    totals["grpc"]["status"][status].as_u64().unwrap_or(0)
}

/// Every gRPC status in the report matches the server's own count, kept
/// apart from HTTP statuses and transport errors; the descriptor-set path.
#[test]
fn each_status_is_counted_apart_as_the_server_counted_it() {
    let dir = temp_dir("grpc-statuses");
    let set = dir.join("fixture.protoset");
    let set_arg = set.to_string_lossy().into_owned();
    let (server, addr) =
        start_fixture(&["--exhausted-share", "0.25", "--descriptor-out", &set_arg]);
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}"
descriptor_set = "fixture.protoset"
timeout = "5s"

[[scenario]]
name = "mixed"
rate = 80
duration = "3s"

[[scenario.request]]
grpc = "fixture.v1.Fixture/Ok"
message = '{{"name": "user-{{{{seq}}}}", "id": "{{{{seq}}}}"}}'
metadata = {{ "x-run" = "test-{{{{agent}}}}" }}

[[scenario.request]]
grpc = "fixture.v1.Fixture/Limited"
message = '{{"id": "{{{{seq}}}}"}}'
weight = 3
"#
        ),
    );
    let plan_arg = plan.to_string_lossy().into_owned();
    let (status, output, report, out) = run_report(
        "grpc-statuses-run",
        &[
            "run",
            &plan_arg,
            "--local-agents",
            "2",
            "--threshold",
            "grpc.resource_exhausted>15%",
            "--threshold",
            "grpc.ok>70%",
        ],
    );
    let counts = stop_and_count(server);
    let t = &report["totals"];
    let ok = server_count(&counts, "Ok", "OK") + server_count(&counts, "Limited", "OK");
    let exhausted = server_count(&counts, "Limited", "RESOURCE_EXHAUSTED");
    assert_eq!(u(&t["intended"]), 240, "{output}");
    assert_eq!(u(&t["sent"]), 240, "{output}");
    assert_eq!(grpc_count(t, "OK"), ok, "server {counts}; report {t}");
    assert_eq!(grpc_count(t, "RESOURCE_EXHAUSTED"), exhausted, "{counts}");
    // A quarter of the Limited calls (three quarters of all calls).
    assert_eq!(exhausted, 45, "{counts}");
    assert_eq!(ok, 195, "{counts}");
    assert_eq!(u(&t["grpc"]["calls"]), 240);
    assert_eq!(u(&t["completed"]), 240);
    // Kept apart from HTTP statuses and transport errors.
    assert_eq!(t["status"], serde_json::json!({}), "{t}");
    assert_eq!(t["errors"], serde_json::json!({}), "{t}");
    assert_eq!(u(&t["failures"]), exhausted);
    let rate = t["grpc"]["rate"]["RESOURCE_EXHAUSTED"].as_f64().unwrap();
    assert!((rate - 45.0 / 240.0).abs() < 1e-9, "{rate}");
    // Each class has its own latency, as 2xx and 4xx do.
    let classes = &t["latency_by_class_ms"];
    assert_eq!(u(&classes["grpc_ok"]["count"]), ok, "{classes}");
    assert_eq!(u(&classes["grpc_client_error"]["count"]), exhausted);
    // OK is the successful throughput.
    assert!(t["throughput_ok_rps"].as_f64().unwrap() > 0.0, "{t}");
    assert_eq!(
        report["scenarios"][0]["grpc"]["status"],
        t["grpc"]["status"]
    );
    assert!(
        report["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["passed"] == true),
        "{}",
        report["thresholds"]
    );
    assert_ok_or_saturated(status, &report, &output);
    assert!(output.contains("grpc      OK: 195 (81.25%)"), "{output}");
    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        page.contains("grpc RESOURCE_EXHAUSTED</td><td>45<"),
        "the page's outcomes lack the gRPC rows"
    );
}

/// Without a descriptor set, the types come from the server's reflection
/// service; a flags-only run.
#[test]
fn reflection_gives_the_message_types() {
    let (server, addr) = start_fixture(&[]);
    let url = format!("http://{addr}");
    let (status, output, report, _) = run_report(
        "grpc-reflection",
        &[
            "run",
            "--url",
            &url,
            "--reflection",
            "--grpc-method",
            "fixture.v1.Fixture/Ok",
            "--grpc-message",
            r#"{"name": "{{random_id}}"}"#,
            "--metadata",
            "x-test: reflection",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--local-agents",
            "1",
        ],
    );
    let counts = stop_and_count(server);
    let t = &report["totals"];
    assert_ok_or_saturated(status, &report, &output);
    assert_eq!(u(&t["sent"]), 100, "{output}");
    assert_eq!(grpc_count(t, "OK"), 100, "{t}");
    assert_eq!(server_count(&counts, "Ok", "OK"), 100, "{counts}");
}

/// A deadline (the plan's timeout) shorter than the server's delay is
/// DEADLINE_EXCEEDED, not a transport timeout.
#[test]
fn a_deadline_shorter_than_the_delay_is_deadline_exceeded() {
    let dir = temp_dir("grpc-deadline");
    let set = dir.join("fixture.protoset");
    let set_arg = set.to_string_lossy().into_owned();
    let (server, addr) = start_fixture(&["--delay", "0.5", "--descriptor-out", &set_arg]);
    let url = format!("http://{addr}");
    let (_, output, report, _) = run_report(
        "grpc-deadline-run",
        &[
            "run",
            "--url",
            &url,
            "--descriptor-set",
            &set_arg,
            "--grpc-method",
            "fixture.v1.Fixture/Slow",
            "--timeout",
            "100ms",
            "--rate",
            "20",
            "--duration",
            "2s",
            "--local-agents",
            "1",
        ],
    );
    drop(stop_and_count(server));
    let t = &report["totals"];
    assert_eq!(u(&t["completed"]), 40, "{output}");
    assert_eq!(grpc_count(t, "DEADLINE_EXCEEDED"), 40, "{t}");
    assert_eq!(grpc_count(t, "OK"), 0, "{t}");
    assert_eq!(t["errors"], serde_json::json!({}), "{t}");
    let p50 = t["latency_by_class_ms"]["grpc_server_error"]["p50"]
        .as_f64()
        .unwrap();
    assert!(
        (90.0..450.0).contains(&p50),
        "deadline at 100 ms, p50 {p50}"
    );
}

/// A message that does not fit the method's input type is refused before
/// anything is sent, naming the request and the field.
#[test]
fn a_misspelt_field_is_refused_before_any_call() {
    let dir = temp_dir("grpc-misspelt");
    let set = dir.join("fixture.protoset");
    let set_arg = set.to_string_lossy().into_owned();
    let (server, addr) = start_fixture(&["--descriptor-out", &set_arg]);
    let url = format!("http://{addr}");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        &url,
        "--descriptor-set",
        &set_arg,
        "--grpc-method",
        "fixture.v1.Fixture/Ok",
        "--grpc-message",
        r#"{"nmae": "x"}"#,
        "--rate",
        "20",
        "--duration",
        "1s",
        "--local-agents",
        "1",
        "--out",
    ])
    .arg(dir.join("out"));
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("--grpc-message")
            && output.contains("nmae")
            && output.contains("fixture.v1.Req"),
        "{output}"
    );
    // The same mistake through reflection is refused too.
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        &url,
        "--reflection",
        "--grpc-method",
        "fixture.v1.Fixture/Nope",
        "--rate",
        "20",
        "--duration",
        "1s",
        "--local-agents",
        "1",
        "--out",
    ])
    .arg(dir.join("out2"));
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("Nope") && output.contains("Limited"),
        "{output}"
    );
    let counts = stop_and_count(server);
    assert_eq!(counts, serde_json::json!({}), "nothing was sent");
}

/// `loadfleet-testbed --grpc`: admission answers RESOURCE_EXHAUSTED, as
/// many as the testbed itself counted, through its own reflection.
#[test]
fn the_testbed_answers_grpc_with_its_knobs() {
    let (testbed, addr) = start_testbed(&["--grpc", "--delay", "100ms", "--admission", "5"]);
    let url = format!("http://{addr}");
    let (_, output, report, _) = run_report(
        "grpc-testbed",
        &[
            "run",
            "--url",
            &url,
            "--reflection",
            "--grpc-method",
            "loadfleet.testbed.v1.Testbed/Work",
            "--rate",
            "100",
            "--duration",
            "2s",
            "--local-agents",
            "2",
        ],
    );
    let counts = stop_and_count(testbed);
    let t = &report["totals"];
    let ok = server_count(&counts, "", "OK");
    let exhausted = server_count(&counts, "", "RESOURCE_EXHAUSTED");
    assert_eq!(u(&t["sent"]), 200, "{output}");
    assert_eq!(grpc_count(t, "OK"), ok, "{counts} {t}");
    assert_eq!(grpc_count(t, "RESOURCE_EXHAUSTED"), exhausted, "{counts}");
    assert_eq!(ok + exhausted, 200, "{counts}");
    // 100/s at 100 ms needs ~10 at once; 5 are admitted.
    assert!(exhausted > 50, "{counts}");
    // The fast refusals and the slow successes keep apart.
    let classes = &t["latency_by_class_ms"];
    let refused = classes["grpc_client_error"]["p50"].as_f64().unwrap();
    let served = classes["grpc_ok"]["p50"].as_f64().unwrap();
    assert!(refused < 50.0 && served >= 100.0, "{classes}");
}

/// The one-command local run aims at the testbed's gRPC service.
#[test]
fn the_local_run_can_aim_at_the_grpc_testbed() {
    let (status, output, report, _) = run_report(
        "grpc-local",
        &[
            "run",
            "--grpc",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--local-agents",
            "2",
        ],
    );
    let t = &report["totals"];
    assert_ok_or_saturated(status, &report, &output);
    assert_eq!(grpc_count(t, "OK"), 100, "{t}");
    assert_eq!(
        report["run"]["protocol"]["asked"], "h2",
        "{}",
        report["run"]
    );
    assert!(output.contains("--grpc"), "{output}");
}
