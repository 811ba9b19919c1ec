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

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `docker ARGS` within `patience`; its stdout on success. Never
/// panics, so the guard's `Drop` can use it too.
fn docker_try(args: &[&str], env: &[(&str, String)], patience: Duration) -> Result<String, String> {
    let mut cmd = Command::new("docker");
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| format!("docker {args:?}: {e}"))?;
    let deadline = Instant::now() + patience;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("docker {args:?} did not end within {patience:?}"));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "docker {args:?} failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn docker(args: &[&str]) -> String {
    docker_try(args, &[], Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"))
}

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The swarm this test made, and everything in it; all removed on drop.
struct Swarm {
    tag: String,
    secret: String,
    stacks: Vec<String>,
    dirs: Vec<PathBuf>,
    /// `docker swarm init` makes this bridge; removed only if it did.
    made_gwbridge: bool,
}

impl Swarm {
    fn init() -> Swarm {
        let state = docker_try(
            &["info", "--format", "{{.Swarm.LocalNodeState}}"],
            &[],
            Duration::from_secs(30),
        )
        .expect("this test needs a running Docker engine (the rust-docker machines have one)");
        assert_eq!(
            state.trim(),
            "inactive",
            "this Docker engine is already in swarm mode ({}); the test makes and destroys a swarm of its own, so it refuses to touch this one: run it on an engine outside swarm mode",
            state.trim()
        );
        let had_gwbridge = !docker(&["network", "ls", "-q", "--filter", "name=^docker_gwbridge$"])
            .trim()
            .is_empty();
        let id = std::process::id();
        let swarm = Swarm {
            tag: format!("loadfleet:swarm-test-{id}"),
            secret: format!("lf-swarm-token-{id}"),
            stacks: Vec::new(),
            dirs: Vec::new(),
            made_gwbridge: !had_gwbridge,
        };
        docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"]);
        swarm
    }

    /// Builds the image from this build's binaries, as containers.rs does.
    fn build_image(&self) {
        let bins = bin("loadfleet-agent")
            .parent()
            .expect("binary folder")
            .to_path_buf();
        let mut build = Command::new("bash");
        build
            .arg(repo().join("deploy/container/build.sh"))
            .arg(&bins)
            .arg(&self.tag);
        let (status, output) = run(build, "image build", Duration::from_secs(300));
        assert!(status.success(), "{output}");
    }

    /// The token as a swarm secret, from a file ending in a newline (as
    /// `echo` writes it), which --token-file must trim.
    fn create_secret(&mut self, token: &str) {
        let dir = temp_dir("swarm-secret");
        self.dirs.push(dir.clone());
        let file = dir.join("token");
        std::fs::write(&file, format!("{token}\n")).expect("write token");
        docker(&["secret", "create", &self.secret, &file.to_string_lossy()]);
    }

    /// Deploys the stack as `name`, the plan `plan` (rate and duration),
    /// three agents; returns where its report lands and the testbed's port.
    fn deploy(&mut self, name: &str, plan: &str) -> Stack {
        let out = temp_dir(&format!("swarm-{name}"));
        self.dirs.push(out.clone());
        let plan_file = write_plan(&out, plan);
        let port = closed_port();
        self.stacks.push(name.to_string());
        let env = [
            ("IMAGE", self.tag.clone()),
            ("OUT_DIR", out.to_string_lossy().into_owned()),
            ("PLAN", plan_file.to_string_lossy().into_owned()),
            ("AGENTS", "3".into()),
            ("MIN_AGENTS", "3".into()),
            ("AGENT_TIMEOUT", "60s".into()),
            // One node holds all three.
            ("AGENTS_PER_NODE", "3".into()),
            ("TOKEN_SECRET", self.secret.clone()),
            ("TESTBED_PORT", port.to_string()),
        ];
        let stack_file = repo().join("deploy/swarm/stack.yaml");
        docker_try(
            &["stack", "deploy", "-c", &stack_file.to_string_lossy(), name],
            &env,
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Stack {
            name: name.to_string(),
            report: out.join("report"),
            port,
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        let quick = Duration::from_secs(60);
        for stack in &self.stacks {
            let _ = docker_try(&["stack", "rm", stack], &[], quick);
        }
        // Task containers and the stacks' networks go in the background.
        let deadline = Instant::now() + Duration::from_secs(60);
        for stack in &self.stacks {
            let label = format!("label=com.docker.stack.namespace={stack}");
            while Instant::now() < deadline {
                let left = docker_try(&["ps", "-aq", "--filter", &label], &[], quick)
                    .unwrap_or_default()
                    + &docker_try(&["network", "ls", "-q", "--filter", &label], &[], quick)
                        .unwrap_or_default();
                if left.trim().is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        let _ = docker_try(&["secret", "rm", &self.secret], &[], quick);
        let _ = docker_try(&["swarm", "leave", "--force"], &[], quick);
        for stack in &self.stacks {
            let label = format!("label=com.docker.stack.namespace={stack}");
            for id in lines(
                &docker_try(&["ps", "-aq", "--filter", &label], &[], quick).unwrap_or_default(),
            ) {
                let _ = docker_try(&["rm", "-f", &id], &[], quick);
            }
        }
        if self.made_gwbridge {
            let _ = docker_try(&["network", "rm", "docker_gwbridge"], &[], quick);
        }
        let _ = docker_try(&["rmi", "-f", &self.tag], &[], quick);
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One deployed stack.
struct Stack {
    name: String,
    report: PathBuf,
    port: u16,
}

impl Stack {
    fn service(&self, role: &str) -> String {
        format!("{}_{role}", self.name)
    }

    /// The role's containers, newest first: (id, task name, state), the
    /// state as `docker ps` says it (`created`, `running`, `exited`, ...).
    fn containers(&self, role: &str) -> Vec<(String, String, String)> {
        let filter = format!("label=com.docker.swarm.service.name={}", self.service(role));
        let text = docker(&[
            "ps",
            "-a",
            "--filter",
            &filter,
            "--format",
            "{{.ID}} {{.Label \"com.docker.swarm.task.name\"}} {{.State}}",
        ]);
        lines(&text)
            .iter()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((
                    w.next()?.to_string(),
                    w.next()?.to_string(),
                    w.next()?.to_string(),
                ))
            })
            .collect()
    }

    /// Waits for `n` running containers of `role`.
    fn wait_running(&self, role: &str, n: usize, patience: Duration) -> Vec<(String, String)> {
        let deadline = Instant::now() + patience;
        loop {
            let up: Vec<(String, String)> = self
                .containers(role)
                .into_iter()
                .filter(|c| c.2 == "running")
                .map(|c| (c.0, c.1))
                .collect();
            if up.len() >= n {
                return up;
            }
            assert!(
                Instant::now() < deadline,
                "{n} {role} task(s) of {} not running within {patience:?}: {}",
                self.name,
                self.tasks(role)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `docker service ps` of the role, for messages.
    fn tasks(&self, role: &str) -> String {
        docker_try(
            &[
                "service",
                "ps",
                "--no-trunc",
                "--format",
                "{{.Name}} {{.CurrentState}} {{.Error}}",
                &self.service(role),
            ],
            &[],
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| e)
    }

    fn logs(&self, role: &str) -> String {
        let out = Command::new("docker")
            .args(["service", "logs", "--raw", &self.service(role)])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default();
        out
    }

    /// Waits for a coordinator container other than `not` to exit;
    /// returns its exit code.
    fn wait_coordinator_exit(&self, not: Option<&str>, patience: Duration) -> i64 {
        let deadline = Instant::now() + patience;
        loop {
            let done = self
                .containers("coordinator")
                .into_iter()
                .find(|c| Some(c.0.as_str()) != not && (c.2 == "exited" || c.2 == "dead"));
            if let Some((id, _, _)) = done {
                let code = docker(&["inspect", "--format", "{{.State.ExitCode}}", &id]);
                return code.trim().parse().expect("an exit code");
            }
            assert!(
                Instant::now() < deadline,
                "the coordinator of {} did not finish within {patience:?}: {}\n{}",
                self.name,
                self.tasks("coordinator"),
                self.logs("coordinator")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// What the testbed was asked, by its own count (`GET /__stats`).
    fn testbed_count(&self) -> Option<u64> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"GET /__stats HTTP/1.1\r\nHost: testbed\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let body = text.split("\r\n\r\n").nth(1)?;
        body.lines()
            .find_map(|l| l.strip_prefix("total "))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Waits until the testbed has counted more than `n` requests: load flows.
    fn wait_load(&self, n: u64, patience: Duration) -> u64 {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(c) = self.testbed_count().filter(|&c| c > n) {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "no load reached the testbed of {} within {patience:?}:\n{}",
                self.name,
                self.logs("coordinator")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn report(&self) -> serde_json::Value {
        assert!(
            self.report.join("report.json").is_file(),
            "no report in {}: {}\n{}",
            self.report.display(),
            self.tasks("coordinator"),
            self.logs("coordinator")
        );
        read_report(&self.report)
    }
}

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
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 150\nduration = \"4s\"\n"));
    let code = stack.wait_coordinator_exit(None, Duration::from_secs(150));
    let r = stack.report();
    let logs = stack.logs("coordinator");
    // A container starved for a moment on the shared machine makes the
    // report say, rightly, that the generator set the pace.
    match code {
        0 => assert!(errors(&r).is_empty(), "{:?}\n{logs}", errors(&r)),
        3 => assert!(
            errors(&r).iter().all(|c| c == "GENERATOR_SATURATED"),
            "{:?}\n{logs}",
            errors(&r)
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

/// One agent task killed 2 s into a 10 s run at 90/s: swarm restarts it,
/// its lost share is `agent_lost`, the restarted task came as a new agent
/// that the report names as late (refused: no later run), and the totals
/// stay exact.
fn agent_killed(swarm: &mut Swarm, name: &str) {
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 90\nduration = \"10s\"\n"));
    let agents = stack.wait_running("agent", 3, Duration::from_secs(60));
    stack.wait_load(120, Duration::from_secs(90));
    let (victim_id, victim_task) = agents[0].clone();
    docker(&["kill", &victim_id]);
    let code = stack.wait_coordinator_exit(None, Duration::from_secs(90));
    let r = stack.report();
    let logs = stack.logs("coordinator");
    assert_eq!(code, 3, "a lost agent degrades the run:\n{logs}");
    assert_exact(&r, 900);
    let list = r["agents"].as_array().expect("agents");
    assert_eq!(list.len(), 3, "{logs}");
    let lost = list
        .iter()
        .find(|a| a["id"] == victim_task.as_str())
        .unwrap_or_else(|| panic!("{victim_task} in the report:\n{logs}"));
    assert_eq!(lost["status"], "lost", "{lost}");
    assert!(u(&lost["unsent"]) > 0, "{lost}");
    assert_eq!(
        u(&r["totals"]["unsent"]["agent_lost"]),
        u(&lost["unsent"]),
        "the lost share is booked agent_lost"
    );
    assert!(verdict(&r, "AGENT_LOST").is_some(), "{logs}");
    // Swarm started the killed slot again: a new task, a new agent.
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
            id.starts_with(&format!("{slot}.")) && id != victim_task && a["outcome"] == "refused"
        }),
        "the restarted task {slot}.* is named as a latecomer: {late:?}\n{}",
        stack.tasks("agent")
    );
    eprintln!(
        "agent {victim_task} killed: {} of its {} arrivals booked agent_lost; late: {late:?}",
        u(&lost["unsent"]),
        u(&lost["intended"])
    );
    let restarted = stack.containers("agent");
    assert!(
        restarted
            .iter()
            .any(|c| c.1.starts_with(&format!("{slot}.")) && c.1 != victim_task),
        "swarm restarted {slot}: {}",
        stack.tasks("agent")
    );
}

/// The coordinator killed 2 s into a 12 s run at 60/s: the agents stop
/// within 5 s, swarm restarts them (they exited non-zero), and a new
/// coordinator task runs the plan afresh; the testbed's count grows by
/// exactly that run's `sent`, so nothing of the old schedule left again.
fn coordinator_killed(swarm: &mut Swarm, name: &str) {
    let stack = swarm.deploy(name, &format!("{PLAN}rate = 60\nduration = \"12s\"\n"));
    let first = stack.wait_running("agent", 3, Duration::from_secs(60));
    stack.wait_load(60, Duration::from_secs(90));
    let (coordinator, _) = stack.wait_running("coordinator", 1, Duration::from_secs(5))[0].clone();
    let mut count = stack.testbed_count().expect("testbed count");
    docker(&["kill", &coordinator]);
    let killed = Instant::now();
    // The testbed's count, every 100 ms for 8 s: when did it last grow?
    // Agents that kept to the old schedule would have sent until its end,
    // 9 s or more after the kill.
    let mut last_growth = Duration::ZERO;
    while killed.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(c) = stack.testbed_count() {
            if c != count {
                count = c;
                last_growth = killed.elapsed();
            }
        }
    }
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
            "{:?}\n{logs}",
            errors(&r)
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
