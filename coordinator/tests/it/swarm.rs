//! The fleet on Docker swarm mode, this machine's engine as a one-node
//! swarm: deploy/swarm/stack.yaml deployed with `docker stack deploy`, the
//! token as a swarm secret, the plan as a swarm config, three agent
//! replicas against the stack's testbed. Three parts, one stack each, in
//! one test because they share the one swarm:
//!
//! - a clean run: three agents, an exact partition, and the token in no
//!   `docker inspect` of the services, tasks or containers;
//! - an agent task killed mid-run: swarm restarts it, the lost share is
//!   booked `agent_lost`, the replacement is named as a latecomer;
//! - the coordinator killed mid-run: the agents stop within 5 s (the
//!   testbed's own count says so), swarm restarts them, and a new
//!   coordinator task runs the plan afresh with nothing of the old one sent
//!   again.
//!
//! The swarm, stacks, secret and image are removed afterwards whatever
//! happens (a guard's `Drop`); an engine already in swarm mode is left
//! alone and the test refuses to run.

use crate::common;
// The harness in swarm/, beside this file; the path is needed because a
// test target's modules are otherwise looked up in tests/ itself.
mod docker;

use std::time::{Duration, Instant};

use common::*;
use docker::{docker, docker_try, lines, Swarm};

/// The partition is exact: every agent's `intended` is its `sent +
/// unsent`, and they add up to the totals, which add up too.
fn assert_exact(r: &serde_json::Value, intended: u64) {
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), intended, "{t}");
    assert_eq!(
        u(&t["intended"]),
        u(&t["sent"]) + u(&t["unsent"]["total"]),
        "{t}"
    );
    let agents = r["agents"].as_array().expect("agents");
    let mut sum = 0;
    for a in agents {
        assert_eq!(u(&a["intended"]), u(&a["sent"]) + u(&a["unsent"]), "{a}");
        sum += u(&a["intended"]);
    }
    assert_eq!(sum, intended, "per-agent intended adds up to the total");
}

fn errors(r: &serde_json::Value) -> Vec<String> {
    r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["level"] == "error")
        .filter_map(|v| v["code"].as_str().map(String::from))
        .collect()
}

const PLAN: &str = "[target]\nurl = \"http://testbed:8080/\"\n\n[[scenario]]\nname = \"steady\"\n";

#[test]
fn fleet_runs_on_docker_swarm() {
    let mut swarm = Swarm::init();
    swarm.build_image();
    let token = format!(
        "swarm-token-{}-{:x}",
        std::process::id(),
        rand::random::<u64>()
    );
    swarm.create_secret(&token);
    let id = std::process::id();
    clean_run(&mut swarm, &format!("lf{id}a"), &token);
    agent_killed(&mut swarm, &format!("lf{id}b"));
    coordinator_killed(&mut swarm, &format!("lf{id}c"));
}

/// Three agents, 150/s for 4 s: all of it sent, split three ways, and the
/// token only in the secret.
fn clean_run(swarm: &mut Swarm, name: &str, token: &str) {
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 150\nduration = \"4s\"\n"), 1);
    let code = stack.wait_coordinator_exit(None, Duration::from_secs(150));
    let r = stack.report();
    let logs = stack.logs("coordinator");
    // A container starved for a moment on the shared machine makes the
    // report say, rightly, that the generator set the pace.
    match code {
        0 => assert!(
            errors(&r).is_empty(),
            "{:?}\n{logs}\n{}",
            errors(&r),
            stack.tasks("testbed")
        ),
        3 => assert!(
            errors(&r).iter().all(|c| c == "GENERATOR_SATURATED"),
            "{:?}\n{logs}\n{}",
            errors(&r),
            stack.tasks("testbed")
        ),
        other => panic!("the coordinator exited {other}:\n{logs}"),
    }
    assert_exact(&r, 600);
    assert_eq!(u(&r["totals"]["unsent"]["total"]), 0, "{logs}");
    let agents = r["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 3, "{logs}");
    for a in agents {
        assert_eq!(u(&a["intended"]), 200);
        let id = a["id"].as_str().expect("id");
        assert!(
            id.starts_with(&format!("{name}_agent.")),
            "named after its task: {id}"
        );
    }
    // What the target saw is what the report says was sent.
    assert_eq!(stack.testbed_count(), Some(u(&r["totals"]["sent"])));

    // The token is in no spec, task or container the engine shows.
    let services = lines(&docker(&["stack", "services", "-q", name]));
    assert_eq!(services.len(), 3);
    let tasks = lines(&docker(&["stack", "ps", "-q", name]));
    let containers = lines(&docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=com.docker.stack.namespace={name}"),
    ]));
    assert!(containers.len() >= 5, "{containers:?}");
    let inspect = |what: &[&str], ids: &[String]| {
        let mut args = what.to_vec();
        args.extend(ids.iter().map(String::as_str));
        docker(&args)
    };
    let shown = inspect(&["service", "inspect"], &services)
        + &inspect(&["inspect"], &tasks)
        + &inspect(&["inspect"], &containers);
    assert!(shown.contains("LOADFLEET_TOKEN_FILE") && shown.contains(&swarm.secret));
    assert!(!shown.contains(token), "the token shows in docker inspect");
    assert!(
        !shown.contains("LOADFLEET_TOKEN="),
        "a token variable in the environment"
    );
}

/// One agent task killed early in the first of two 10 s runs at 90/s
/// (`--repeat 2`): swarm restarts it, the killed agent's share is
/// `agent_lost`, the restarted task comes as a new agent that stands by
/// and fills the lost one's place in the second run, and every run's
/// totals stay exact.
fn agent_killed(swarm: &mut Swarm, name: &str) {
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 90\nduration = \"10s\"\n"), 2);
    let agents = stack.wait_running("agent", 3, Duration::from_secs(60));
    stack.wait_load(120, Duration::from_secs(90));
    let (victim_id, victim_task) = agents[0].clone();
    docker(&["kill", &victim_id]);
    let code = stack.wait_coordinator_exit(None, Duration::from_secs(120));
    let r = stack.report();
    let logs = stack.logs("coordinator");
    assert_eq!(code, 3, "a lost agent degrades the run:\n{logs}");
    assert!(verdict(&r, "AGENT_LOST").is_some(), "{logs}");
    let runs = r["repeats"]["runs"].as_array().expect("repeats.runs");
    assert_eq!(runs.len(), 2, "{logs}");
    for t in runs {
        assert_eq!(u(&t["intended"]), 900, "{t}\n{logs}");
        assert_eq!(
            u(&t["sent"]) + u(&t["unsent"]["total"]) + u(&t["unreported"]),
            900,
            "{t}"
        );
    }
    let booked = count_of(&runs[0]["unsent"], "agent_lost");
    assert!(
        booked > 0,
        "the first run books the lost share: {}",
        runs[0]
    );
    assert_eq!(
        count_of(&runs[1]["unsent"], "agent_lost"),
        0,
        "the restarted agent filled the place in the second run: {}\n{logs}",
        runs[1]
    );
    // Swarm started the killed slot again: a new task, a new agent, on
    // standby for the second run.
    let slot = victim_task
        .rsplit_once('.')
        .map(|(s, _)| s.to_string())
        .expect("task name SERVICE.SLOT.ID");
    let late = r["late_agents"]
        .as_array()
        .unwrap_or_else(|| panic!("late_agents:\n{logs}"));
    assert!(
        late.iter().any(|a| {
            let id = a["id"].as_str().unwrap_or("");
            id.starts_with(&format!("{slot}.")) && id != victim_task && a["outcome"] == "standby"
        }),
        "the restarted task {slot}.* stands by: {late:?}\n{}",
        stack.tasks("agent")
    );
    eprintln!(
        "agent {victim_task} killed: {booked} arrivals booked agent_lost in run 1, none in run 2; late: {late:?}"
    );
}

/// The coordinator killed 2 s into a 12 s run at 60/s: the agents stop
/// within 5 s, swarm restarts them (they exited non-zero), and a new
/// coordinator task runs the plan afresh; the testbed's count grows by
/// exactly that run's `sent`, so nothing of the old schedule left again.
fn coordinator_killed(swarm: &mut Swarm, name: &str) {
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 60\nduration = \"12s\"\n"), 1);
    let first = stack.wait_running("agent", 3, Duration::from_secs(60));
    stack.wait_load(60, Duration::from_secs(90));
    let (coordinator, _) = stack.wait_running("coordinator", 1, Duration::from_secs(5))[0].clone();
    let mut count = stack.testbed_count().expect("testbed count");
    docker(&["kill", &coordinator]);
    let killed = Instant::now();
    // The testbed's count, every 100 ms for 8 s: when did it last grow?
    // Agents that kept to the old schedule would have sent until its end,
    // 9 s or more after the kill.
    // A read that fails sees nothing, so silence is proved only by reads
    // that succeeded, through to the end of the 8 s.
    let mut last_growth = Duration::ZERO;
    let (mut reads, mut failed, mut last_read) = (0u32, 0u32, Duration::ZERO);
    while killed.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(100));
        reads += 1;
        match stack.testbed_count() {
            Some(c) => {
                last_read = killed.elapsed();
                if c != count {
                    count = c;
                    last_growth = killed.elapsed();
                }
            }
            None => failed += 1,
        }
    }
    assert!(
        failed * 10 <= reads && last_read >= Duration::from_secs(7),
        "{failed} of {reads} reads of the testbed's count failed, the last good one {last_read:?} after the kill"
    );
    assert!(
        last_growth <= Duration::from_secs(5),
        "the agents still sent {last_growth:?} after the coordinator died"
    );
    eprintln!("agents stopped sending within {last_growth:?} of the coordinator's kill; the testbed had {count}");
    assert!(count < 720, "the run was cut short: {count}");
    // Each agent exited non-zero, so swarm starts its slot again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = stack.containers("agent");
        let fresh = now
            .iter()
            .filter(|c| c.2 == "running" && !first.iter().any(|f| f.0 == c.0))
            .count();
        if fresh == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "agents not restarted: {}",
            stack.tasks("agent")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let tasks = stack.tasks("agent");
    eprintln!("{tasks}");
    assert!(
        tasks.matches("non-zero exit").count() >= 3,
        "the agents exit non-zero when their coordinator dies: {tasks}"
    );
    // A new coordinator: a fresh task of the same service.
    docker_try(
        &[
            "service",
            "update",
            "--force",
            "--detach",
            &stack.service("coordinator"),
        ],
        &[],
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let code = stack.wait_coordinator_exit(Some(&coordinator), Duration::from_secs(120));
    let r = stack.report();
    let logs = stack.logs("coordinator");
    match code {
        0 => {}
        3 => assert!(
            errors(&r).iter().all(|c| c == "GENERATOR_SATURATED"),
            "{:?}\n{logs}\n{}",
            errors(&r),
            stack.tasks("testbed")
        ),
        other => panic!("the second coordinator exited {other}:\n{logs}"),
    }
    assert_exact(&r, 720);
    let agents = r["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 3);
    for a in agents {
        let id = a["id"].as_str().expect("id");
        assert!(
            !first.iter().any(|f| f.1 == id),
            "a restarted agent, not {id}"
        );
    }
    let after = stack.testbed_count().expect("testbed count");
    assert_eq!(
        after - count,
        u(&r["totals"]["sent"]),
        "the testbed saw the second run's requests and nothing else"
    );
}

/// `--token-file` on both binaries: with `--token` too, an empty file or a
/// missing one, each refused up front (exit 2) with a message naming the
/// flags and the fix; no Docker needed.
#[test]
fn token_file_is_refused_clearly() {
    let dir = temp_dir("token-file");
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let good = dir.join("token");
    std::fs::write(&good, "s3cret\n").expect("write");
    let missing = dir.join("missing");
    let runs: [(&str, &std::path::Path, Option<&str>, &[&str]); 3] = [
        (
            "both",
            &good,
            Some("s3cret"),
            &["--token (LOADFLEET_TOKEN) and --token-file (LOADFLEET_TOKEN_FILE) are both set"],
        ),
        (
            "empty",
            &empty,
            None,
            &["--token-file", "is empty; write the shared secret into it"],
        ),
        ("missing", &missing, None, &["--token-file", "No such file"]),
    ];
    for (case, file, token, needles) in runs {
        let mut coordinator = coordinator();
        coordinator.args([
            "run",
            "--expect-agents",
            "1",
            "--url",
            "http://127.0.0.1:9/",
            "--duration",
            "1s",
        ]);
        let mut agent = agent();
        agent.args([
            "--coordinator",
            "http://127.0.0.1:9",
            "--connect-timeout",
            "1s",
        ]);
        for (what, mut cmd) in [("coordinator", coordinator), ("agent", agent)] {
            cmd.env_remove("LOADFLEET_TOKEN")
                .env("LOADFLEET_TOKEN_FILE", file);
            if let Some(t) = token {
                cmd.env("LOADFLEET_TOKEN", t);
            }
            let (status, output) = run(cmd, what, Duration::from_secs(30));
            assert_eq!(status.code(), Some(2), "{what} {case}: {output}");
            for n in needles {
                assert!(output.contains(n), "{what} {case}: {n:?} in {output}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plan the stack's guide deploys is a valid plan.
#[test]
fn shipped_plan_checks() {
    let mut cmd = coordinator();
    cmd.args(["plan", "check"])
        .arg(repo().join("deploy/swarm/plan.toml"));
    let (status, output) = run(cmd, "plan check", Duration::from_secs(30));
    assert!(status.success(), "{output}");
}
