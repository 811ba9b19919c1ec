//! Test harness: real binaries, their own temp folders, readiness read from
//! their output (never a sleep), children stopped by handle, and their
//! output printed when a test fails.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) fn bin(name: &str) -> PathBuf {
    // Integration tests get this crate's binary; the others are siblings
    // built by the same workspace build.
    let own = PathBuf::from(env!("CARGO_BIN_EXE_loadfleet-coordinator"));
    let path = own.with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

pub(crate) fn coordinator() -> Command {
    Command::new(bin("loadfleet-coordinator"))
}

pub(crate) fn agent() -> Command {
    Command::new(bin("loadfleet-agent"))
}

/// A fresh folder for one test's outputs.
pub(crate) fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadfleet-test-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Writes `text` as `plan.toml` in `dir`; returns its path.
pub(crate) fn write_plan(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).expect("write plan");
    path
}

/// A child whose stderr is collected line by line in the background.
pub(crate) struct Proc {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
    pub what: String,
}

impl Proc {
    pub(crate) fn spawn(mut cmd: Command, what: &str) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr piped");
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx2.send(line);
            }
        });
        let stdout = child.stdout.take().expect("stdout piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(format!("[stdout] {line}"));
            }
        });
        Proc {
            child,
            lines: rx,
            seen: Vec::new(),
            what: what.to_string(),
        }
    }

    /// Waits for an output line containing `needle`; returns it.
    pub(crate) fn wait_for_line(&mut self, needle: &str, patience: Duration) -> String {
        let deadline = Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.seen.push(line.clone());
                    if hit {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "{}: no line containing {needle:?} within {patience:?}; output so far:\n{}",
                    self.what,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits until each of `needles` is in some output line, in any order,
    /// counting the lines already read.
    pub(crate) fn wait_for_lines(&mut self, needles: &[String], patience: Duration) {
        let deadline = Instant::now() + patience;
        let missing = |seen: &[String]| -> Vec<String> {
            needles
                .iter()
                .filter(|n| !seen.iter().any(|l| l.contains(n.as_str())))
                .cloned()
                .collect()
        };
        loop {
            let left = missing(&self.seen);
            if left.is_empty() {
                return;
            }
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "{}: no lines containing {left:?} within {patience:?}; output so far:\n{}",
                    self.what,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for exit within `patience` (killing it after), returning the
    /// status and all output.
    pub(crate) fn wait(mut self, patience: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + patience;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not exit within {patience:?}; output:\n{}",
                    self.what,
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Collect what the reader threads still hold.
        let end = Instant::now() + Duration::from_secs(2);
        while let Ok(line) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        (status, self.seen.join("\n"))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command to completion, with a time limit.
pub(crate) fn run(cmd: Command, what: &str, patience: Duration) -> (ExitStatus, String) {
    Proc::spawn(cmd, what).wait(patience)
}

/// Runs the coordinator with `args` plus `--out` a fresh folder, to the end;
/// returns its exit code, its output, the report and the folder. A missing
/// report fails the test with the coordinator's output.
pub(crate) fn run_report(
    test: &str,
    args: &[&str],
) -> (ExitStatus, String, serde_json::Value, PathBuf) {
    run_report_with_env(test, args, &[])
}

/// [`run_report`] with extra environment variables for the coordinator (and
/// so for the agents it starts).
pub(crate) fn run_report_with_env(
    test: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (ExitStatus, String, serde_json::Value, PathBuf) {
    let out = temp_dir(test);
    let mut cmd = coordinator();
    cmd.args(args).arg("--out").arg(&out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(120));
    if !out.join("report.json").is_file() {
        panic!(
            "no report.json (exit {:?}); output:\n{output}",
            status.code()
        );
    }
    let report = read_report(&out);
    (status, output, report, out)
}

/// Asserts that a run ended well, or that its only error verdict is
/// `GENERATOR_SATURATED` (exit 3): a stall of the shared test machine (a
/// vCPU descheduled for tens of ms) makes the agent late enough for the
/// report to say, rightly, that the generator set the pace. Any other error
/// verdict, or any other exit status, fails the test.
pub(crate) fn assert_ok_or_saturated(status: ExitStatus, report: &serde_json::Value, output: &str) {
    let errors: Vec<&str> = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["level"] == "error")
        .filter_map(|v| v["code"].as_str())
        .collect();
    match status.code() {
        Some(0) => assert!(errors.is_empty(), "{errors:?}: {output}"),
        Some(3) => assert!(
            !errors.is_empty() && errors.iter().all(|c| *c == "GENERATOR_SATURATED"),
            "{errors:?}: {output}"
        ),
        other => panic!("exit {other:?}: {output}"),
    }
}

/// Asserts the exit status the README gives for what the report holds: 3
/// with an error verdict, else 1 with a failed threshold, else 0. For runs
/// that overload the target on purpose, where whether a share crosses a
/// verdict's limit depends on timing but the status must still follow
/// from the report; a crash (101) or a signal fails.
pub(crate) fn assert_exit_follows_the_report(
    code: Option<i32>,
    report: &serde_json::Value,
    output: &str,
) {
    let error = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .any(|v| v["level"] == "error");
    let failed = report["thresholds"]
        .as_array()
        .is_some_and(|t| t.iter().any(|c| c["passed"] == false));
    let documented = if error {
        3
    } else if failed {
        1
    } else {
        0
    };
    assert_eq!(code, Some(documented), "{output}");
}

pub(crate) fn read_report(dir: &Path) -> serde_json::Value {
    let path = dir.join("report.json");
    let mut s = String::new();
    std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
        .read_to_string(&mut s)
        .expect("read report");
    serde_json::from_str(&s).expect("report.json is JSON")
}

/// The report's verdict of `code`, if it has one.
pub(crate) fn verdict<'a>(r: &'a serde_json::Value, code: &str) -> Option<&'a serde_json::Value> {
    r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["code"] == code)
}

/// The count under `key` in a report's map of counts, 0 when absent.
pub(crate) fn count_of(map: &serde_json::Value, key: &str) -> u64 {
    map.get(key).map_or(0, u)
}

pub(crate) fn u(v: &serde_json::Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned number: {v}"))
}

pub(crate) fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Starts the testbed on 127.0.0.1 (extra flags appended); returns it and
/// its `host:port`, read from its readiness line.
pub(crate) fn start_testbed(extra: &[&str]) -> (Proc, String) {
    let mut cmd = Command::new(bin("loadfleet-testbed"));
    cmd.args(["--listen", "127.0.0.1:0"]).args(extra);
    let mut testbed = Proc::spawn(cmd, "testbed");
    let line = testbed.wait_for_line("listening on", Duration::from_secs(20));
    let addr = line
        .rsplit(' ')
        .next()
        .expect("address in the line")
        .to_string();
    (testbed, addr)
}

/// Writes a self-signed certificate for `localhost` and its key into
/// `dir`; returns their paths.
pub(crate) fn localhost_certificate(dir: &Path) -> (String, String) {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).expect("write cert");
    std::fs::write(&key_path, key_pair.serialize_pem()).expect("write key");
    (
        cert_path.to_string_lossy().into_owned(),
        key_path.to_string_lossy().into_owned(),
    )
}

/// A port on 127.0.0.1 with nothing listening (bound, then released).
pub(crate) fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Sends SIGINT/SIGKILL to a child we started, by its pid.
pub(crate) fn signal(pid: u32, sig: i32) {
    let signal = nix::sys::signal::Signal::try_from(sig).expect("a known signal");
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    // A child that already exited is not an error here, as before.
    let _ = nix::sys::signal::kill(pid, signal);
}

const HLOG_SUMMARY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/hlog_summary.py");

/// Fails, pointing at scripts/test.sh, when python3 or its hdrh module is missing:
/// a check that silently passes without its reader checks nothing.
pub(crate) fn require_hdrh() {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", "import hdrh.log, hdrh.histogram"]);
    let ok = cmd.output().map(|o| o.status.success()).unwrap_or(false);
    assert!(
        ok,
        "python3 with the `hdrh` module (PyPI package `hdrhistogram`) is needed to read \
         latency.hlog independently; scripts/test.sh installs it (python3 -m pip install hdrhistogram)"
    );
}

/// An interval log read by an independent implementation (the `hdrh`
/// module, through tests/support/hlog_summary.py): its RESULT line.
pub(crate) fn hlog_summary(hlog: &Path) -> serde_json::Value {
    let mut cmd = Command::new("python3");
    cmd.arg(HLOG_SUMMARY).arg(hlog);
    let (status, output) = run(cmd, "hlog_summary.py", Duration::from_secs(60));
    assert!(status.success(), "hlog_summary.py failed:\n{output}");
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix("[stdout] RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line from hlog_summary.py:\n{output}"));
    serde_json::from_str(line).expect("RESULT is JSON")
}

/// Reads the control address from the coordinator's `listening on` line.
pub(crate) fn control_url(c: &mut Proc) -> String {
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("address in the line");
    format!("http://{addr}")
}

/// A target that only counts connection attempts, to prove no load was sent.
pub(crate) struct Silent(std::net::TcpListener);

impl Silent {
    pub(crate) fn new() -> Self {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        Silent(l)
    }
    pub(crate) fn url(&self) -> String {
        format!("http://{}/", self.0.local_addr().expect("addr"))
    }
    pub(crate) fn connections(&self) -> usize {
        std::iter::from_fn(|| self.0.accept().ok()).count()
    }
}

/// Requests the testbed answered per source address (and in total), from
/// its `GET /__stats`: what really reached the target.
pub(crate) fn testbed_counts(addr: &str) -> BTreeMap<String, u64> {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the testbed");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /__stats HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("ask for stats");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read stats");
    stats_counts(&text)
}

/// [`testbed_counts`] of a testbed serving https with the certificate
/// `cert` (a PEM file, for `localhost`), which is checked.
pub(crate) fn testbed_counts_tls(addr: &str, cert: &str) -> BTreeMap<String, u64> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let cert = rustls_pki_types::CertificateDer::from_pem_file(cert).expect("the testbed's PEM");
    roots.add(cert).expect("a usable certificate");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
    let tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("TLS");
    let tcp = std::net::TcpStream::connect(addr).expect("connect to the testbed");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut s = rustls::StreamOwned::new(tls, tcp);
    write!(
        s,
        "GET /__stats HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("ask for stats");
    let mut text = String::new();
    // A peer closing without close_notify still gave the whole answer.
    if let Err(e) = s.read_to_string(&mut text) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "read stats: {e}"
        );
    }
    stats_counts(&text)
}

/// The counts of a `GET /__stats` answer, by name.
fn stats_counts(response: &str) -> BTreeMap<String, u64> {
    let body = response.split("\r\n\r\n").nth(1).expect("a body");
    body.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("a count")))
        .collect()
}

/// Waits until the coordinator's progress line shows at least `secs` of
/// the run.
/// The line is printed about once a second, not on each second, so a
/// given second may never appear: read the elapsed time off each line.
pub(crate) fn wait_for_run_second(c: &mut Proc, secs: u32) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = c.wait_for_line("s/", left);
        let elapsed = line
            .trim_start_matches(['[', ' '])
            .split('s')
            .next()
            .and_then(|t| t.parse::<f64>().ok());
        if elapsed.is_some_and(|t| t >= f64::from(secs)) {
            return;
        }
    }
}

/// The repository's root, for the deploy files the tests run.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds the `loadfleet` image tagged `tag` from this build's binaries
/// with deploy/container/build.sh, as a user builds it.
pub(crate) fn build_image(tag: &str) {
    let bins = bin("loadfleet-agent")
        .parent()
        .expect("binary folder")
        .to_path_buf();
    let mut build = Command::new("bash");
    build
        .arg(repo().join("deploy/container/build.sh"))
        .arg(&bins)
        .arg(tag);
    let (status, output) = run(build, "image build", Duration::from_secs(300));
    assert!(status.success(), "{output}");
}

/// The one agent a report says was lost.
pub(crate) fn lost_agent(report: &serde_json::Value) -> &serde_json::Value {
    report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["status"] == "lost")
        .expect("one agent lost")
}
