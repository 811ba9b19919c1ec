//! `message_file`: a gRPC request's message read from a file next to the
//! plan, against the Python gRPC server of tests/support (its reflection
//! gives the types). A file that fits the method's request type makes
//! every call OK, and the server received the file's content in each; one
//! naming a field the type lacks is refused before any call, naming that
//! field.

use crate::common;
use crate::grpc_fixture;

use common::*;
use grpc_fixture::*;

fn plan_with_message_file(test: &str, addr: &str, message: &str) -> std::path::PathBuf {
    let dir = temp_dir(test);
    std::fs::write(dir.join("req.json"), message).expect("write the message file");
    write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}"
reflection = true
[[scenario]]
name = "hello"
rate = 20
duration = "1s"
[[scenario.request]]
grpc = "fixture.v1.Fixture/Ok"
message_file = "req.json"
"#
        ),
    )
}

#[test]
fn message_file_is_the_message_sent() {
    let (server, addr) = start_fixture(&[]);
    let plan = plan_with_message_file("message-file-plan", &addr, r#"{"name": "from a file"}"#);
    let (status, output, r, _) = run_report(
        "message-file",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--local-agents",
            "1",
        ],
    );
    let seen = stop(server);
    assert_ok_or_saturated(status, &r, &output);
    let grpc = &r["totals"]["grpc"];
    assert_eq!(u(&grpc["calls"]), 20, "{output}");
    assert_eq!(u(&grpc["status"]["OK"]), 20, "{output}");
    // The server answered 20 calls, and each carried the file's name.
    assert_eq!(
        server_count(&seen.counts, "Ok", "OK"),
        20,
        "{}",
        seen.counts
    );
    assert_eq!(
        seen.received,
        serde_json::json!({ "Ok": { "from a file": 20 } })
    );

    let (server, addr) = start_fixture(&[]);
    let plan = plan_with_message_file("message-file-misspelt", &addr, r#"{"nmae": "x"}"#);
    let mut cmd = coordinator();
    cmd.args(["run", plan.to_str().expect("utf-8 path")])
        .args(["--local-agents", "1", "--out"])
        .arg(temp_dir("message-file-misspelt-out"));
    let (status, output) = run(cmd, "coordinator", std::time::Duration::from_secs(60));
    let seen = stop(server);
    assert_eq!(status.code(), Some(2), "{output}");
    // (The refusal calls the field `message`, though the plan wrote
    // `message_file`.)
    assert!(
        output.contains("nmae") && output.contains("fixture.v1.Req"),
        "the refusal names the file's field and the type: {output}"
    );
    assert_eq!(seen.counts, serde_json::json!({}), "no call was made");
}
