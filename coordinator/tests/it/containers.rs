//! The fleet in containers: the image built FROM scratch by
//! deploy/container/build.sh, and deploy/compose.yaml running the testbed, a
//! coordinator and two agents, each in its own container on a private
//! Docker network (separate hosts, as far as the fleet can tell).

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn compose_fleet_runs_across_containers() {
    let docker_ok = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        docker_ok,
        "this test needs a running Docker engine and docker-compose (the rust-docker machines have both)"
    );
    let tag = format!("loadfleet:test-{}", std::process::id());
    build_image(&tag);

    let out = temp_dir("compose");
    let project = format!("lf{}", std::process::id());
    let compose = |args: &[&str]| {
        let mut c = Command::new("docker-compose");
        c.args(["-p", &project, "-f"])
            .arg(repo().join("deploy/compose.yaml"))
            .args(args)
            .env("IMAGE", &tag)
            .env("LOADFLEET_TOKEN", "compose-secret")
            .env("OUT_DIR", &out)
            .env("AGENTS", "2")
            .env("RATE", "200")
            .env("DURATION", "4s");
        c
    };
    let (status, output) = run(
        compose(&[
            "up",
            "--scale",
            "agent=2",
            "--exit-code-from",
            "coordinator",
        ]),
        "docker-compose up",
        Duration::from_secs(240),
    );
    let _ = run(
        compose(&["down", "--timeout", "2"]),
        "docker-compose down",
        Duration::from_secs(120),
    );
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let r = read_report(&out.join("report"));
    // On a shared 2-core machine a container can be starved for a moment.
    assert_ok_or_saturated(status, &r, &output);
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 800, "{output}");
    assert_eq!(u(&t["unsent"]["total"]), 0);
    assert_eq!(u(&t["status"]["200"]), u(&t["completed"]));
    let agents = r["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 2);
    let hosts: std::collections::BTreeSet<&str> =
        agents.iter().filter_map(|a| a["host"].as_str()).collect();
    assert_eq!(hosts.len(), 2, "each agent on its own host: {hosts:?}");
    for a in agents {
        assert_eq!(u(&a["intended"]), 400);
    }
    assert!(
        !r["verdicts"]
            .as_array()
            .expect("verdicts")
            .iter()
            .any(|v| v["code"] == "LOCALHOST"),
        "the target is another container, not an agent's own host"
    );
}
