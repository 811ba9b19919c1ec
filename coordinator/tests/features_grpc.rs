//! `message_file`: a gRPC request's message read from a file next to the
//! plan, against the testbed's gRPC service and its reflection. A file
//! that fits the method's request type makes every call OK; one naming a
//! field the type lacks is refused before any call, naming that field, so
//! the file's content is what is encoded and sent.

mod common;

use common::*;

fn plan_with_message_file(test: &str, addr: &str, message: &str) -> std::path::PathBuf {
    let dir = temp_dir(test);
    std::fs::write(dir.join("work.json"), message).expect("write the message file");
    write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}"
reflection = true
[[scenario]]
name = "work"
rate = 20
duration = "1s"
[[scenario.request]]
grpc = "loadfleet.testbed.v1.Testbed/Work"
message_file = "work.json"
"#
        ),
    )
}

#[test]
fn message_file_is_the_message_sent() {
    let (_testbed, addr) = start_testbed(&["--grpc"]);

    let plan = plan_with_message_file("message-file-plan", &addr, r#"{"payload": "from a file"}"#);
    let (status, output, r, _) = run_report(
        "message-file",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--local-agents",
            "1",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let grpc = &r["totals"]["grpc"];
    assert_eq!(u(&grpc["calls"]), 20, "{output}");
    assert_eq!(u(&grpc["status"]["OK"]), 20, "{output}");

    let plan = plan_with_message_file("message-file-misspelt", &addr, r#"{"paylod": "x"}"#);
    let mut cmd = coordinator();
    cmd.args(["run", plan.to_str().expect("utf-8 path")])
        .args(["--local-agents", "1", "--out"])
        .arg(temp_dir("message-file-misspelt-out"));
    let (status, output) = run(cmd, "coordinator", std::time::Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    // (The refusal calls the field `message`, though the plan wrote
    // `message_file`.)
    assert!(
        output.contains("paylod") && output.contains("loadfleet.testbed.v1.WorkRequest"),
        "the refusal names the file's field and the type: {output}"
    );
}
