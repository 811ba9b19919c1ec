//! The deployment files agree with each other and with the binaries: the
//! Kubernetes manifests (read with PyYAML, and validated against the
//! Kubernetes schemas by `kubernetes-validate`), the plan they ship (checked by
//! the real `plan check`), and the systemd unit (by `systemd-analyze
//! verify`). No cluster or VM is reachable here, so these are checked as
//! files; the container path is exercised for real in `containers.rs`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn arg<'a>(args: &'a [serde_json::Value], flag: &str) -> Option<&'a str> {
    args.iter()
        .filter_map(|a| a.as_str())
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
}

#[test]
fn kubernetes_manifests_fit_together() {
    let mut py = Command::new("python3");
    py.arg(repo().join("coordinator/tests/support/k8s_facts.py"))
        .arg(repo().join("deploy/k8s"));
    let (status, output) = run(py, "k8s_facts.py", Duration::from_secs(30));
    assert!(
        status.success(),
        "reading the manifests failed (PyYAML is installed by scripts/test.sh):\n{output}"
    );
    let json = output
        .lines()
        .find_map(|l| l.split("RESULT ").nth(1))
        .expect("a RESULT line");
    let f: serde_json::Value = serde_json::from_str(json).expect("facts");

    // Agents: an Indexed Job, all at once, as many as the coordinator expects.
    assert_eq!(f["completion_mode"], "Indexed");
    assert_eq!(f["parallelism"], f["completions"]);
    let coord_args = f["coordinator_args"].as_array().expect("args");
    let expect: u64 = arg(coord_args, "--expect-agents")
        .and_then(|v| v.parse().ok())
        .expect("--expect-agents");
    assert_eq!(u(&f["parallelism"]), expect);
    // They dial the Service, on its port, which selects the coordinator.
    let agent_args = f["agent_args"].as_array().expect("args");
    let dial = arg(agent_args, "--coordinator").expect("--coordinator");
    assert_eq!(
        dial,
        format!("http://loadfleet-coordinator:{}", u(&f["service_port"]))
    );
    assert_eq!(f["service_selector"], f["coordinator_labels"]);
    assert_eq!(
        arg(coord_args, "--listen"),
        Some(format!("0.0.0.0:{}", u(&f["service_port"])).as_str())
    );
    // One token, from the Secret, on both sides.
    assert_eq!(
        f["agent_secret"]["LOADFLEET_TOKEN"],
        f["coordinator_secret"]["LOADFLEET_TOKEN"]
    );
    let key = f["agent_secret"]["LOADFLEET_TOKEN"]["key"]
        .as_str()
        .expect("key");
    assert!(f["secret_keys"]
        .as_array()
        .expect("keys")
        .iter()
        .any(|k| k == key));
    // Agents are in the Guaranteed QoS class: requests equal limits, for
    // memory as well as CPU, so a node under memory pressure evicts them
    // last and the CPU manager can give them whole cores.
    let res = &f["agent_resources"];
    for kind in ["cpu", "memory"] {
        assert!(
            res["requests"][kind].is_string(),
            "agent {kind} request: {res}"
        );
        assert_eq!(
            res["requests"][kind], res["limits"][kind],
            "agent {kind}: {res}"
        );
    }
    let coord_res = &f["coordinator_resources"];
    for kind in ["cpu", "memory"] {
        assert!(
            coord_res["requests"][kind].is_string(),
            "coordinator {kind}: {coord_res}"
        );
    }
    // Agents keep away from each other, and from the target's nodes: a
    // rule the scheduler must keep, by the label the user sets.
    assert_eq!(f["anti_affinity_self"], f["agent_labels"]);
    assert!(
        f["anti_affinity_required"]
            .as_array()
            .expect("required anti-affinity")
            .iter()
            .any(|m| m["loadfleet-role"] == "target"),
        "agents must never share a node with the target: {}",
        f["anti_affinity_required"]
    );
    // The coordinator Job ends by its deadline, derived from the plan: the
    // wait for agents, the schedule, its drain and a minute to spare.
    let plan: toml::Value = toml::from_str(f["plan"].as_str().expect("plan")).expect("plan TOML");
    let secs = |v: Option<&toml::Value>, default: &str| {
        humantime::parse_duration(v.and_then(|v| v.as_str()).unwrap_or(default))
            .expect("a duration")
            .as_secs()
    };
    let schedule = plan["scenario"]
        .as_array()
        .expect("scenarios")
        .iter()
        .map(|s| secs(s.get("start"), "0s") + secs(s.get("duration"), "0s"))
        .max()
        .unwrap_or(0);
    let drain = secs(plan.get("run").and_then(|r| r.get("drain")), "5s");
    let wait =
        humantime::parse_duration(arg(coord_args, "--agent-timeout").expect("--agent-timeout"))
            .expect("a duration")
            .as_secs();
    let deadline = u(&f["active_deadline_s"]);
    assert!(
        (wait + schedule + drain..=wait + schedule + drain + 120).contains(&deadline),
        "activeDeadlineSeconds {deadline} for a {wait} s wait, a {schedule} s plan and a {drain} s drain"
    );
    let min: u64 = arg(coord_args, "--min-agents")
        .and_then(|v| v.parse().ok())
        .expect("--min-agents");
    assert!(
        (1..=expect).contains(&min),
        "--min-agents {min} of {expect}"
    );
    assert!(
        arg(agent_args, "--allow-target").is_some(),
        "agents are limited to the target"
    );

    // The shipped plan is valid and expects the same number of agents.
    let dir = temp_dir("k8s-plan");
    let plan = write_plan(&dir, f["plan"].as_str().expect("plan text"));
    let mut check = coordinator();
    check.args(["plan", "check"]).arg(&plan);
    let (status, output) = run(check, "plan check", Duration::from_secs(20));
    assert!(status.success(), "{output}");
    assert!(f["plan"]
        .as_str()
        .unwrap_or("")
        .contains(&format!("expect = {expect}")));
}

/// Kubernetes versions the manifests are validated against: the oldest and
/// newest whose schemas `kubernetes-validate` bundles.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];

/// Runs `kubernetes-validate --strict` (unknown fields are errors) on `files`.
fn validate(version: &str, files: &[PathBuf]) -> (bool, String) {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "kubernetes_validate", "--strict", "-k", version])
        .args(files);
    let (status, output) = run(cmd, "kubernetes-validate", Duration::from_secs(60));
    assert!(
        !output.contains("No module named"),
        "kubernetes-validate is missing (scripts/test.sh installs it from PyPI):\n{output}"
    );
    (status.success(), output)
}

#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/k8s"))
        .expect("deploy/k8s")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for version in KUBERNETES_VERSIONS {
        let (ok, output) = validate(version, &files);
        assert!(ok, "Kubernetes {version}:\n{output}");
        // Every resource of every file was checked, not skipped.
        assert_eq!(
            output.matches(" passed for resource ").count(),
            5,
            "{output}"
        );
    }
    // The validator is not a rubber stamp: a misspelt field is refused.
    let dir = temp_dir("k8s-schema");
    let bad = dir.join("agents.yaml");
    let agents = std::fs::read_to_string(repo().join("deploy/k8s/agents.yaml")).expect("read");
    std::fs::write(&bad, agents.replace("parallelism:", "paralelism:")).expect("write");
    let (ok, output) = validate(KUBERNETES_VERSIONS[1], &[bad]);
    assert!(!ok && output.contains("paralelism"), "{output}");
}

#[test]
fn systemd_unit_verifies() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/ec2/loadfleet-agent.service")).expect("unit");
    // Point it at the agent just built, so verify can check the command.
    let unit = unit.replace(
        "/usr/local/bin/loadfleet-agent",
        bin("loadfleet-agent").to_str().expect("utf-8 path"),
    );
    // The mutual-TLS variant the unit documents: its commented lines on,
    // the plain ExecStart= off.
    let plain_start = "\nExecStart=";
    assert_eq!(unit.matches(plain_start).count(), 1, "{unit}");
    let mtls = unit
        .replace("\n#ExecStart=", "\nMTLS_START=")
        .replace(plain_start, "\n#ExecStart=")
        .replace("\nMTLS_START=", "\nExecStart=")
        .replace("\n#LoadCredential=", "\nLoadCredential=");
    assert_eq!(mtls.matches("\nLoadCredential=").count(), 2, "{mtls}");
    let starts: Vec<&str> = mtls
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(starts.len(), 1, "{mtls}");
    assert!(
        starts[0].contains(" --tls-cert ${CREDENTIALS_DIRECTORY}/"),
        "{mtls}"
    );
    for (name, unit) in [("systemd", unit.clone()), ("systemd-mtls", mtls)] {
        let dir = temp_dir(name);
        let path = dir.join("loadfleet-agent.service");
        std::fs::write(&path, unit).expect("write unit");
        let mut verify = Command::new("systemd-analyze");
        verify.arg("verify").arg(&path);
        let (status, output) = run(verify, "systemd-analyze verify", Duration::from_secs(30));
        assert!(status.success(), "{name}: {output}");
        assert!(!output.contains("Unknown"), "{name}: {output}");
    }
}
