//! `[[output]]` tables in a plan: `plan check` names each output (never
//! its credentials) and refuses a bad one with exit status 2, as `run` does
//! before any load is sent.

use crate::common;

use std::time::Duration;

use common::*;

const PLAN: &str = r#"
[target]
url = "testbed"

[[scenario]]
rate = 10
duration = "1s"

[[output]]
kind = "prometheus"
url = "http://writer:s3cret@127.0.0.1:9/api/v1/write"
token_env = "SOME_TOKEN"

[[output]]
kind = "influxdb"
url = "http://127.0.0.1:9/write?db=loadfleet&p=pass-s3cret"
"#;

#[test]
fn plan_check_names_outputs_and_refuses_bad_ones() {
    let dir = temp_dir("outputs-plan");
    let plan = write_plan(&dir, PLAN);
    let mut cmd = coordinator();
    cmd.args(["plan", "check"]).arg(&plan);
    let (status, output) = run(cmd, "plan check", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(
        output.contains("output prometheus http://127.0.0.1:9/api/v1/write"),
        "{output}"
    );
    assert!(
        output.contains("output influxdb http://127.0.0.1:9/write"),
        "{output}"
    );
    assert!(
        !output.contains("s3cret") && !output.contains("writer"),
        "{output}"
    );

    // A third table, good but for one key.
    for (kind, url, extra, says) in [
        ("statsd", "http://h:9/api/v1/write", "", "is not an output"),
        ("prometheus", "http://h:9/", "", "write path"),
        (
            "prometheus",
            "http://h:9/w",
            "labels = { scenario = \"x\" }",
            "cannot be a label",
        ),
        (
            "prometheus",
            "http://h:9/w",
            "colour = \"red\"",
            "unknown field",
        ),
    ] {
        let text = format!("{PLAN}\n[[output]]\nkind = \"{kind}\"\nurl = \"{url}\"\n{extra}\n");
        let plan = write_plan(&dir, &text);
        for run_it in [false, true] {
            let mut cmd = coordinator();
            if run_it {
                cmd.arg("run").arg(&plan).args(["--local-agents", "1"]);
                cmd.env("SOME_TOKEN", "t");
            } else {
                cmd.args(["plan", "check"]).arg(&plan);
            }
            let (status, output) = run(cmd, "coordinator", Duration::from_secs(30));
            assert_eq!(
                status.code(),
                Some(2),
                "{kind} {url} {extra} (run: {run_it}): {output}"
            );
            assert!(output.contains(says), "{says}: {output}");
            assert!(
                !output.contains("testbed listening"),
                "load was prepared: {output}"
            );
        }
    }
}
