//! The swarm the test makes and the stacks it deploys, through the
//! `docker` CLI with a time limit on every call: a guard that removes
//! everything on drop, and what a test asks of a stack (its tasks'
//! containers, its coordinator's exit, its testbed's own count).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// Runs `docker ARGS` within `patience`; its stdout on success. Never
/// panics, so the guard's `Drop` can use it too.
pub(crate) fn docker_try(
    args: &[&str],
    env: &[(&str, String)],
    patience: Duration,
) -> Result<String, String> {
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

pub(crate) fn docker(args: &[&str]) -> String {
    docker_try(args, &[], Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The swarm this test made, and everything in it; all removed on drop.
pub(crate) struct Swarm {
    tag: String,
    pub secret: String,
    stacks: Vec<String>,
    dirs: Vec<PathBuf>,
    /// `docker swarm init` makes this bridge; removed only if it did.
    made_gwbridge: bool,
}

impl Swarm {
    pub(crate) fn init() -> Swarm {
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
    pub(crate) fn build_image(&self) {
        build_image(&self.tag);
    }

    /// The token as a swarm secret, from a file ending in a newline (as
    /// `echo` writes it), which --token-file must trim.
    pub(crate) fn create_secret(&mut self, token: &str) {
        let dir = temp_dir("swarm-secret");
        self.dirs.push(dir.clone());
        let file = dir.join("token");
        std::fs::write(&file, format!("{token}\n")).expect("write token");
        docker(&["secret", "create", &self.secret, &file.to_string_lossy()]);
    }

    /// Deploys the stack as `name`, the plan `plan` (rate and duration),
    /// three agents; returns where its report lands and the testbed's port.
    pub(crate) fn deploy(&mut self, name: &str, plan: &str, repeat: u32) -> Stack {
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
            ("REPEAT", repeat.to_string()),
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
pub(crate) struct Stack {
    pub name: String,
    report: PathBuf,
    port: u16,
}

impl Stack {
    pub(crate) fn service(&self, role: &str) -> String {
        format!("{}_{role}", self.name)
    }

    /// The role's containers, newest first: (id, task name, state), the
    /// state as `docker ps` says it (`created`, `running`, `exited`, ...).
    pub(crate) fn containers(&self, role: &str) -> Vec<(String, String, String)> {
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
    pub(crate) fn wait_running(
        &self,
        role: &str,
        n: usize,
        patience: Duration,
    ) -> Vec<(String, String)> {
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
    pub(crate) fn tasks(&self, role: &str) -> String {
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

    pub(crate) fn logs(&self, role: &str) -> String {
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
    pub(crate) fn wait_coordinator_exit(&self, not: Option<&str>, patience: Duration) -> i64 {
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
    pub(crate) fn testbed_count(&self) -> Option<u64> {
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
    pub(crate) fn wait_load(&self, n: u64, patience: Duration) -> u64 {
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

    pub(crate) fn report(&self) -> serde_json::Value {
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
