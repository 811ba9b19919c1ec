//! Flows whose steps are gRPC unary calls, through the real binaries: a
//! coordinator, two agent processes and the Python gRPC server of
//! tests/support/grpc_server.py (PyPI's grpcio). Its `Ok` method answers
//! `hello NAME`, so a second step that sends what the first captured from
//! that answer reaches the server as `hello NAME`: the server's own record
//! of the names it received proves the capture read the response message
//! as JSON and the placeholder carried it on.

use crate::common;
use crate::grpc_fixture;

use common::*;
use grpc_fixture::*;
use serde_json::Value;

/// Two calls of `Ok`: the first captures its reply's `message`, the
/// second sends it back as its `name` and checks its own reply with
/// `check`.
fn greet_twice(addr: &str, check: &str) -> String {
    format!(
        r#"
[target]
url = "http://{addr}"
descriptor_set = "fixture.protoset"
timeout = "5s"

[[scenario]]
name = "greet"
rate = 20
duration = "2s"

[[scenario.step]]
name = "hello"
grpc = "fixture.v1.Fixture/Ok"
message = '{{"name": "ann"}}'
capture = {{ greeting = "json.message" }}

[[scenario.step]]
name = "hello_again"
grpc = "fixture.v1.Fixture/Ok"
message = '{{"name": "{{{{greeting}}}}"}}'
check = [{check}]
"#
    )
}

/// Runs [`greet_twice`] with `check` against a fresh server; returns the
/// run's exit status, output and report, and what the server received.
fn run(name: &str, check: &str) -> (std::process::ExitStatus, String, Value, Stopped) {
    let dir = temp_dir(name);
    let set = dir.join("fixture.protoset");
    let set_arg = set.to_string_lossy().into_owned();
    let (server, addr) = start_fixture(&["--descriptor-out", &set_arg]);
    let plan = write_plan(&dir, &greet_twice(&addr, check));
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, report, _out) = run_report(
        &format!("{name}-run"),
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    (status, output, report, stop(server))
}

#[test]
fn a_grpc_flow_captures_from_one_reply_and_checks_the_next() {
    let (status, output, r, server) = run(
        "flows-grpc",
        r#"'json.message == "hello hello ann"', 'body contains "hello hello"'"#,
    );
    let s = &r["scenarios"][0];
    let (flows, steps) = (&s["flows"], s["steps"].as_array().expect("steps"));
    assert_eq!(u(&flows["intended"]), 40, "{output}");
    assert_eq!(u(&flows["started"]), 40, "{flows}\n{output}");
    assert_eq!(u(&flows["completed"]), 40, "{flows}\n{output}");
    assert_eq!(u(&flows["failed"]), 0, "{flows}");
    // The server received the first step's name and, from the second, the
    // reply to it that the first step captured: once per flow each.
    let received = &server.received["Ok"];
    assert_eq!(u(&received["ann"]), 40, "{received}");
    assert_eq!(u(&received["hello ann"]), 40, "{received}");
    assert_eq!(server_count(&server.counts, "Ok", "OK"), 80);
    for step in steps {
        assert_eq!(u(&step["sent"]), 40, "{step}");
        assert_eq!(u(&step["completed"]), 40, "{step}");
    }
    let checks = &steps[1]["checks"];
    for i in 0..2 {
        assert_eq!(
            (u(&checks[i]["passed"]), u(&checks[i]["failed"])),
            (40, 0),
            "{checks}"
        );
    }
    assert_ok_or_saturated(status, &r, &output);
}

#[test]
fn a_grpc_check_that_cannot_hold_fails_every_flow() {
    let (status, output, r, server) = run("flows-grpc-check", r#"'json.message == "nope"'"#);
    let s = &r["scenarios"][0];
    let (flows, steps) = (&s["flows"], s["steps"].as_array().expect("steps"));
    assert_eq!(u(&flows["started"]), 40, "{flows}\n{output}");
    assert_eq!(u(&flows["completed"]), 0, "{flows}");
    assert_eq!(u(&flows["failed"]), 40, "{flows}");
    assert_eq!(u(&flows["failed_by_reason"]["check"]), 40, "{flows}");
    // Both calls went out and were answered OK: only the check failed.
    assert_eq!(u(&steps[1]["sent"]), 40, "{}", steps[1]);
    assert_eq!(server_count(&server.counts, "Ok", "OK"), 80);
    let check = &steps[1]["checks"][0];
    assert_eq!(
        (u(&check["passed"]), u(&check["failed"])),
        (0, 40),
        "{check}"
    );
    assert_exit_follows_the_report(status.code(), &r, &output);
}
