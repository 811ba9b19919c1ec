//! Agents that never arrive (Pending pods, tasks that cannot be placed):
//! `--agent-timeout` ends the wait with exit 3 and no load, naming how
//! many came of how many; `--min-agents` starts with those that came
//! instead, and the report says how many of how many joined. Real
//! processes: a coordinator, agents on their own loopback addresses, the
//! testbed.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

const TOKEN: &str = "missing-token";

fn coordinator_waiting_for(testbed: &str, out: &std::path::Path, extra: &[&str]) -> Proc {
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--expect-agents", "3", "--agent-timeout", "3s"])
        .args(["--url", &format!("http://{testbed}/")])
        .args(["--rate", "50", "--duration", "2s", "--drain", "1s"])
        .args(extra)
        .arg("--out")
        .arg(out);
    Proc::spawn(cmd, "coordinator")
}

fn agent_from(control: &str, source: &str) -> Proc {
    let mut cmd = Command::new(bin("loadfleet-agent"));
    cmd.args(["--coordinator", control, "--token", TOKEN])
        .args(["--bind", source, "--id", source, "--workers", "1"]);
    Proc::spawn(cmd, &format!("agent {source}"))
}

#[test]
fn two_of_three_agents_is_exit_3_with_no_load() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("missing-2-of-3");
    let mut c = coordinator_waiting_for(&addr, &out, &[]);
    let control = control_url(&mut c);
    let _a = agent_from(&control, "127.0.0.2");
    let _b = agent_from(&control, "127.0.0.3");
    let (status, output) = c.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{output}");
    assert!(output.contains("only 2 of 3 agent(s) joined"), "{output}");
    assert!(
        output.contains("--min-agents"),
        "the fix is named: {output}"
    );
    let r = read_report(&out);
    assert_eq!(u(&r["totals"]["sent"]), 0, "no load: {output}");
    assert_eq!(u(&r["totals"]["unsent"]["no_agents"]), 100);
}

#[test]
fn min_agents_starts_with_those_that_came() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("missing-min-2");
    let mut c = coordinator_waiting_for(&addr, &out, &["--min-agents", "2"]);
    let control = control_url(&mut c);
    let _a = agent_from(&control, "127.0.0.2");
    let _b = agent_from(&control, "127.0.0.3");
    let (status, output) = c.wait(Duration::from_secs(40));
    assert!(
        output.contains("only 2 of 3 agent(s) joined") && output.contains("starting with them"),
        "{output}"
    );
    let r = read_report(&out);
    assert_eq!(u(&r["run"]["agents"]), 2, "{output}");
    assert_eq!(u(&r["run"]["agents_expected"]), 3, "{output}");
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 100, "intended follows the plan");
    assert_eq!(u(&t["sent"]) + u(&t["unsent"]["total"]), 100);
    assert!(u(&t["sent"]) >= 95, "the two carried the load: {output}");
    for a in r["agents"].as_array().expect("agents") {
        assert!((f(&a["share"]) - 0.5).abs() < 1e-9, "{a}");
    }
    let missing = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["code"] == "AGENTS_MISSING")
        .unwrap_or_else(|| panic!("no AGENTS_MISSING: {output}"));
    assert_eq!(missing["level"], "warn");
    assert!(
        missing["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2 of 3"),
        "{missing}"
    );
    assert!(output.contains("on 2 of 3 agent(s)"), "{output}");
    assert_ok_or_saturated(status, &r, &output);
}

#[test]
fn min_agents_above_expect_is_refused() {
    let mut cmd = coordinator();
    cmd.args(["run", "--token", TOKEN, "--expect-agents", "2"])
        .args(["--min-agents", "3", "--rate", "10", "--duration", "1s"])
        .args(["--url", "http://127.0.0.1:9/"]);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("--min-agents 3"), "{output}");
}
