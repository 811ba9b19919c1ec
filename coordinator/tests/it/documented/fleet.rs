//! The processes around a run: an agent's `LOADFLEET_ALLOW_TARGETS`
//! (docs/deploy.md), the testbed the coordinator starts from
//! `LOADFLEET_TESTBED_BIN` (README.md), and a search whose first step
//! already fails (docs/search.md).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// An agent started with `--id id`, sending from `source`, whose allow
/// list comes only from `LOADFLEET_ALLOW_TARGETS`.
fn allow_listed_agent(coordinator: &str, id: &str, source: &str, allowed: &str) -> Proc {
    let mut cmd = agent();
    cmd.args(["--coordinator", coordinator, "--token", "allow"])
        .args(["--id", id, "--bind", source, "--connect-timeout", "10s"])
        .env("LOADFLEET_ALLOW_TARGETS", allowed);
    Proc::spawn(cmd, id)
}

/// `LOADFLEET_ALLOW_TARGETS=a:80,b` is the agent's `--allow-target` list:
/// the agent whose list names the target sends its share; the one whose
/// list does not refuses the assignment (exit 5), sends nothing, and the
/// report names the refusal. The testbed sees load from the first agent's
/// address only.
#[test]
fn allow_targets_from_the_environment_bound_where_agents_send() {
    let (_testbed, target) = start_testbed(&["--delay", "1ms"]);
    let out = temp_dir("documented-allow-targets");
    let url = format!("http://{target}/");
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", "allow"])
        .args(["--expect-agents", "2", "--agent-timeout", "20s"])
        .args(["--url", &url, "--rate", "40", "--duration", "2s"])
        .args(["--drain", "1s", "--out"])
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let control = control_url(&mut c);
    let allowed = allow_listed_agent(
        &control,
        "allowed",
        "127.0.0.2",
        &format!("127.0.0.1:1,{target}"),
    );
    let refusing = allow_listed_agent(&control, "refusing", "127.0.0.3", "127.0.0.1:1,localhost");
    let (status, output) = c.wait(Duration::from_secs(60));
    let (allowed_status, allowed_output) = allowed.wait(Duration::from_secs(20));
    let (refusing_status, refusing_output) = refusing.wait(Duration::from_secs(20));
    let r = read_report(&out);
    let agent = |id: &str| -> Value {
        r["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no agent {id}:\n{output}"))
            .clone()
    };
    let (ok, refused) = (agent("allowed"), agent("refusing"));
    let sent = u(&ok["sent"]);
    assert!(sent > 0, "{output}\n{allowed_output}");
    let seen = testbed_counts(&target);
    assert_eq!(seen.get("127.0.0.2"), Some(&sent), "{seen:?}\n{output}");
    assert_eq!(u(&r["totals"]["sent"]), sent, "{output}");
    assert_eq!(seen["total"], sent, "only the allowed agent sent: {seen:?}");
    assert_eq!(u(&refused["sent"]), 0, "{refused}");
    let reason = refused["lost_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("allow-target"), "{refused}\n{output}");
    assert!(
        refusing_output.contains("--allow-target"),
        "{refusing_output}"
    );
    assert_eq!(refusing_status.code(), Some(5), "{refusing_output}");
    assert_eq!(allowed_status.code(), Some(0), "{allowed_output}");
    // An agent lost: the run was carried out only in part.
    assert_eq!(status.code(), Some(3), "{output}");
}

/// `LOADFLEET_TESTBED_BIN` names the testbed a local run starts. The one
/// named here is a script that keeps the flags it is given and announces
/// the address of a testbed this test runs, as the real one announces its
/// own: the load reaching that testbed, and the script's flags, show the
/// coordinator started the binary the variable names and drove the run
/// through it.
#[test]
fn testbed_bin_names_the_testbed_a_local_run_starts() {
    let dir = temp_dir("documented-testbed-bin");
    let (_testbed, target) = start_testbed(&["--delay", "5ms"]);
    let script = dir.join("my-testbed");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho 'listening on {target}'\nexec sleep 120\n",
            dir.join("args").display()
        ),
    );
    let script = script.to_string_lossy().into_owned();
    let (status, output, r, _) = run_report_with_env(
        "documented-testbed-bin-out",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--drain",
            "1s",
            "--testbed-delay",
            "5ms",
        ],
        &[("LOADFLEET_TESTBED_BIN", &script)],
    );
    let sent = u(&r["totals"]["sent"]);
    assert_eq!(sent, 100, "{output}");
    assert_eq!(testbed_counts(&target)["total"], sent, "{output}");
    assert_eq!(count_of(&r["totals"]["status"], "200"), sent, "{output}");
    assert!(
        output.contains(&format!("testbed listening on {target}")),
        "{output}"
    );
    let args = std::fs::read_to_string(dir.join("args")).expect("the script kept its flags");
    let args: Vec<&str> = args.lines().collect();
    assert!(
        args.windows(2).any(|w| w == ["--delay", "5ms"]),
        "flags given: {args:?}"
    );
    assert_eq!(status.code(), Some(0), "{output}");
}

/// Writes an executable script.
fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write the script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .expect("make the script executable");
}

/// `search` exits 1 "when even `--from` failed": against a target that
/// answers in 50 ms, an SLO of p99 under 10 ms fails the first step, and
/// the search ends there (`result.status` `from_fails`).
#[test]
fn search_exits_1_when_even_from_fails() {
    let (_testbed, target) = start_testbed(&["--delay", "50ms"]);
    let out = temp_dir("documented-search-from-fails");
    let url = format!("http://{target}/");
    let mut cmd = coordinator();
    cmd.args(["search", "--local-agents", "1", "--url", &url])
        .args(["--slo", "p99<10ms", "--from", "20", "--to", "80"])
        .args(["--step", "2s", "--warmup", "1s", "--drain", "1s", "--out"])
        .arg(&out);
    let (status, output) = run(cmd, "coordinator search", Duration::from_secs(120));
    let text = std::fs::read_to_string(out.join("search.json"))
        .unwrap_or_else(|e| panic!("no search.json: {e}\n{output}"));
    let s: Value = serde_json::from_str(&text).expect("search.json is JSON");
    let steps = s["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{output}");
    let step = &steps[0];
    // Runs held up by the machine were sent too, and are run again.
    let mut reports: Vec<String> = Vec::new();
    for key in ["reports", "held_up"] {
        for p in step[key].as_array().expect("report paths") {
            reports.push(p.as_str().expect("a path").to_string());
        }
    }
    let sent: u64 = reports
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(out.join(p)).expect("a step's report");
            let r: Value = serde_json::from_str(&text).expect("report.json is JSON");
            u(&r["totals"]["sent"])
        })
        .sum();
    assert!(sent > 0, "{output}");
    assert_eq!(testbed_counts(&target)["total"], sent, "{output}");
    assert_eq!(f(&step["offered"]), 20.0, "{step}");
    assert_eq!(step["judged"], "fail", "{step}");
    let result = &s["result"];
    assert_eq!(result["status"], "from_fails", "{result}");
    assert!(result["capacity"].is_null(), "{result}");
    assert_eq!(f(&result["failed_at"]), 20.0, "{result}");
    let why = result["failed_why"].as_str().unwrap_or_default();
    assert!(why.contains("p99<10ms"), "{result}");
    assert_eq!(u(&result["exit_status"]), 1, "{result}");
    assert_eq!(status.code(), Some(1), "{output}");
}
