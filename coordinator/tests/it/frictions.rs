//! Off the happy path (issue 13, items 6, 7, 8 and 11), through the real
//! binaries: each test reproduces what a user hit and asserts the fix.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The address in `coordinator listening on ADDR; waiting for …`.
fn control_address(line: &str) -> String {
    line.split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("address in the line")
        .to_string()
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// Item 6: `--out` naming a file, or a place that cannot be made, is
/// refused before the testbed or any agent starts (exit 2, naming --out);
/// the run's results can no longer be lost at the end.
#[test]
fn a_bad_out_is_refused_before_any_load() {
    let dir = temp_dir("bad-out");
    let file = write(&dir, "a-file", "");
    let unwritable = std::path::PathBuf::from("/proc/loadfleet-no/such");
    for (out, says) in [
        (&file, "is a file, not a folder"),
        (&unwritable, "cannot create"),
    ] {
        let started = Instant::now();
        let mut cmd = coordinator();
        cmd.args(["run", "--rate", "50", "--duration", "5s", "--out"])
            .arg(out);
        let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
        assert_eq!(status.code(), Some(2), "{output}");
        assert!(
            output.contains("--out") && output.contains(says),
            "{output}"
        );
        assert!(
            !output.contains("testbed listening"),
            "nothing started: {output}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused before the 5 s run: {output}"
        );
    }
}

/// Item 7: two runs started in the same second without `--out` write into
/// two folders named by a readable UTC time, the second with a suffix.
#[test]
fn default_out_folders_never_collide() {
    let dir = temp_dir("default-out");
    let start = || {
        let mut cmd = coordinator();
        cmd.current_dir(&dir).args([
            "run",
            "--local-agents",
            "1",
            "--rate",
            "20",
            "--duration",
            "1s",
        ]);
        Proc::spawn(cmd, "coordinator")
    };
    let (a, b) = (start(), start());
    let statuses: Vec<_> = [a, b]
        .into_iter()
        .map(|p| p.wait(Duration::from_secs(90)))
        .collect();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read the folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    for n in &names {
        // loadfleet-out-20261130T101500Z, maybe with -2.
        let stamp = n.strip_prefix("loadfleet-out-").expect("prefix");
        let (date, time) = stamp.split_once('T').expect("a T in the time");
        assert!(
            date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()),
            "{n}"
        );
        assert!(time[..6].bytes().all(|b| b.is_ascii_digit()), "{n}");
        assert!(time[6..].starts_with('Z'), "{n}");
        assert!(dir.join(n).join("report.json").is_file(), "{n}");
    }
    // Each run ended as its own report says it should.
    for (n, (status, output)) in names.iter().zip(statuses) {
        let r = read_report(&dir.join(n));
        assert_ok_or_saturated(status, &r, &output);
    }
    if names[0][..30] == names[1][..30] {
        assert!(names[1].ends_with("-2"), "{names:?}");
    }
}

/// Item 8: a target that does not resolve is refused before the start,
/// naming the host, instead of stalling the agents.
#[test]
fn an_unresolvable_target_is_refused_before_the_start() {
    let dir = temp_dir("unresolvable");
    let started = Instant::now();
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        "http://nonexistent.invalid:8080/",
        "--rate",
        "50",
        "--duration",
        "2s",
        "--out",
    ])
    .arg(&dir);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("nonexistent.invalid") && output.contains("does not resolve"),
        "{output}"
    );
    assert!(
        !output.contains("waiting for"),
        "no agent started: {output}"
    );
    assert!(started.elapsed() < Duration::from_secs(15), "{output}");
}

/// Item 8, agent side: remote agents may resolve names the coordinator
/// cannot, so the run goes ahead with a warning; each request then fails as
/// `dns` at once, nothing stalls, and no agent is lost.
#[test]
fn an_unresolvable_name_on_an_agent_is_a_dns_error_per_request() {
    let dir = temp_dir("unresolvable-agent");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        "http://nonexistent.invalid:8080/",
        "--rate",
        "50",
        "--duration",
        "2s",
        "--expect-agents",
        "1",
        "--token",
        "t",
        "--listen",
        "127.0.0.1:0",
        "--out",
    ])
    .arg(&dir);
    let started = Instant::now();
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let mut a = agent();
    a.args([
        "--coordinator",
        &format!("http://{}", control_address(&line)),
    ])
    .args(["--token", "t", "--allow-target", "nonexistent.invalid:8080"]);
    let a = Proc::spawn(a, "agent");
    let (status, output) = c.wait(Duration::from_secs(60));
    let elapsed = started.elapsed();
    let (agent_status, agent_output) = a.wait(Duration::from_secs(15));
    assert!(
        output.contains("does not resolve on this machine"),
        "{output}"
    );
    let r = read_report(&dir);
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 100, "{output}\n{agent_output}");
    // Every arrival was sent and failed its lookup: not left unsent.
    assert_eq!(u(&t["sent"]), 100, "{t}\n{agent_output}");
    assert_eq!(u(&t["unsent"]["total"]), 0, "{t}");
    // Every request failed: FAILURES is an error (exit 3); the agent
    // finished its share (exit 0).
    assert_eq!(status.code(), Some(3), "{output}");
    assert_eq!(agent_status.code(), Some(0), "{agent_output}");
    assert_eq!(u(&t["errors"]["dns"]), u(&t["completed"]), "{t}");
    assert_eq!(u(&t["completed"]) + u(&t["unsent"]["total"]), 100, "{t}");
    assert_eq!(u(&t["in_flight_at_end"]), 0, "{t}");
    let codes: Vec<&str> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter_map(|v| v["code"].as_str())
        .collect();
    assert!(!codes.contains(&"AGENT_LOST"), "{codes:?}: {output}");
    // 2 s of schedule; the drain has nothing to wait for. Slack for a busy
    // machine, well under the ~8 s a stalled agent took.
    assert!(elapsed < Duration::from_secs(7), "{elapsed:?}: {output}");
}

/// Item 11: a threshold naming a scenario the plan does not have fails
/// before the run (exit 2, naming the scenario).
#[test]
fn a_threshold_on_an_unknown_scenario_fails_before_the_run() {
    let dir = temp_dir("threshold-scenario");
    let plan = write(
        &dir,
        "plan.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nname = \"browse\"\nrate = 50\nduration = \"5s\"\n",
    );
    let started = Instant::now();
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--threshold", "checkout.p99<100ms", "--out"])
        .arg(dir.join("out"));
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("\"checkout\""), "{output}");
    assert!(!output.contains("testbed listening"), "{output}");
    assert!(started.elapsed() < Duration::from_secs(5), "{output}");
}

/// Item 11: a plan without `[target]` runs when `--url` gives one.
#[test]
fn a_plan_without_target_runs_with_url() {
    let (_testbed, addr) = start_testbed(&[]);
    let dir = temp_dir("plan-no-target");
    let plan = write(
        &dir,
        "plan.toml",
        "[[scenario]]\nrate = 20\nduration = \"1s\"\n",
    );
    let url = format!("http://{addr}/");
    let plan_arg = plan.to_string_lossy().into_owned();
    let (status, output, r, _) = run_report(
        "plan-no-target-out",
        &["run", &plan_arg, "--url", &url, "--local-agents", "1"],
    );
    assert_ok_or_saturated(status, &r, &output);
    assert_eq!(r["run"]["target"], url.as_str());
    assert_eq!(u(&r["totals"]["intended"]), 20);
}

/// Item 11: stderr that is not a terminal carries no colour codes and no
/// Debug forms like `Some(127.0.0.1:50722)`: not from the coordinator's log
/// line about a refused agent, not from the agent.
#[test]
fn logs_off_a_terminal_are_plain() {
    let dir = temp_dir("plain-logs");
    let mut cmd = coordinator();
    cmd.env("RUST_LOG", "warn")
        .args([
            "run",
            "--url",
            "http://127.0.0.1:9/",
            "--expect-agents",
            "1",
            "--token",
            "right",
            "--agent-timeout",
            "4s",
            "--listen",
            "127.0.0.1:0",
            "--out",
        ])
        .arg(&dir);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let mut a = agent();
    a.env("RUST_LOG", "info")
        .args([
            "--coordinator",
            &format!("http://{}", control_address(&line)),
        ])
        .args(["--token", "wrong", "--connect-timeout", "5s"]);
    let (status, agent_output) = run(a, "agent", Duration::from_secs(30));
    // Refused by the coordinator: exit 4, as the README's table says.
    assert_eq!(status.code(), Some(4), "{agent_output}");
    let refused = c.wait_for_line("refused an agent from", Duration::from_secs(10));
    assert!(refused.contains("from 127.0.0.1:"), "{refused}");
    // No agent came: exit 3 with no load.
    let (status, output) = c.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{output}");
    for (who, text) in [("coordinator", &output), ("agent", &agent_output)] {
        assert!(!text.contains('\x1b'), "{who} wrote colour codes: {text:?}");
        assert!(!text.contains("Some("), "{who} wrote a Debug form: {text}");
    }
}

/// Item 11: `plan preview … | head` ends quietly with exit 0 when `head`
/// stops reading: no "Broken pipe", no exit 3.
#[test]
fn preview_into_a_closed_pipe_ends_quietly() {
    let dir = temp_dir("preview-pipe");
    // An hour of seconds: far more lines than a pipe buffers.
    let plan = write(
        &dir,
        "plan.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nrate = 10\nduration = \"1h\"\n",
    );
    let mut cmd = coordinator();
    cmd.args(["plan", "preview"])
        .arg(&plan)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start the coordinator");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    for _ in 0..10 {
        lines.next().expect("a line").expect("read a line");
    }
    drop(lines);
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Item 11: during the drain the progress line counts the drain against
/// its own limit (`drain 1.0s/5s`), never `[3.0s/2s]`.
#[test]
fn progress_counts_the_drain_apart() {
    let dir = temp_dir("progress-drain");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "10",
        "--duration",
        "2s",
        "--testbed-delay",
        "2500ms",
        "--out",
    ])
    .arg(&dir);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(60));
    let progress: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with('[') && !l.starts_with("[stdout]") && l.contains("intended"))
        .collect();
    assert!(
        progress.iter().any(|l| l.starts_with("[drain ")),
        "{output}"
    );
    for l in &progress {
        let clock = &l[1..l.find(']').expect("a clock")];
        if let Some(running) = clock.trim().strip_suffix("s/2s") {
            let t: f64 = running.parse().expect("seconds");
            assert!(t <= 2.0, "past the schedule without saying drain: {l}");
        } else {
            assert!(
                clock.starts_with("drain ") && clock.ends_with("s/5s"),
                "{l}"
            );
        }
    }
}

/// A wake quantum past the bound (or one so long it would overflow the
/// clock) is refused at the start, naming the flag and the limit, not a
/// panic in the middle of a run.
#[test]
fn an_agent_refuses_a_wake_quantum_past_its_bound() {
    for quantum in ["101ms", "1h", "500000000years"] {
        let mut a = agent();
        a.args([
            "--coordinator",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--wake-quantum",
            quantum,
        ]);
        let (status, output) = run(a, "agent", Duration::from_secs(30));
        assert_eq!(status.code(), Some(2), "{quantum}: {output}");
        assert!(
            output.contains("--wake-quantum") && output.contains("at most 100ms"),
            "{quantum}: {output}"
        );
        assert!(!output.contains("panicked"), "{quantum}: {output}");
    }
}

/// Item 11: an agent dialling `http://` at a TLS coordinator is told to use
/// https://, not "h2 protocol error".
#[test]
fn an_agent_dialling_http_at_a_tls_coordinator_is_told_to_use_https() {
    let dir = temp_dir("plain-to-tls");
    let (cert, key) = localhost_certificate(&dir);
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        "http://127.0.0.1:9/",
        "--expect-agents",
        "1",
        "--token",
        "t",
        "--agent-timeout",
        "5s",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--out",
    ])
    .arg(dir.join("out"));
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let addr = control_address(&line);
    let mut a = agent();
    a.args(["--coordinator", &format!("http://{addr}")]).args([
        "--token",
        "t",
        "--connect-timeout",
        "5s",
    ]);
    let (status, output) = run(a, "agent", Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains(&format!("the coordinator speaks TLS: use https://{addr}")),
        "{output}"
    );
    assert!(
        !output.contains("h2 protocol error: http2 error (Internal)"),
        "{output}"
    );
    let _ = c.wait(Duration::from_secs(30));
}

/// Item 8 as the user hit it: the agent's resolver takes seconds to give up
/// (here a name server that never answers, in a mount namespace of the
/// agent's own). Before, every arrival waited on its own lookup, the agent
/// stopped answering the coordinator, the dead-man switch fired and most
/// requests were lost (`AGENT_LOST`, 24 of 100 completed, 12 s). Now one
/// lookup per host runs off the send loop and all 100 requests end as
/// `dns` when it fails. Needs root (a port-53 socket, `unshare -m`): it
/// fails without, and is in nextest's `root` profile, which
/// scripts/test.sh runs as root.
#[test]
fn a_slow_resolver_on_an_agent_stalls_nothing() {
    let blackhole = std::net::UdpSocket::bind("127.0.0.78:53").unwrap_or_else(|e| {
        panic!("cannot bind 127.0.0.78:53 for a silent name server ({e}): this test needs root (run scripts/test.sh as root)")
    });
    let unshare = std::process::Command::new("unshare")
        .args(["-m", "true"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run unshare (Debian package util-linux): {e}"));
    assert!(
        unshare.status.success(),
        "unshare -m failed: this test needs root (run scripts/test.sh as root): {}",
        String::from_utf8_lossy(&unshare.stderr)
    );
    // Swallow every query, for as long as the test runs.
    blackhole
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let quiet = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = blackhole.recv(&mut buf);
            }
        })
    };
    let dir = temp_dir("slow-resolver");
    let resolv = write(
        &dir,
        "resolv.conf",
        "nameserver 127.0.0.78\noptions timeout:3 attempts:2\n",
    );
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        "http://slow-name.example:8080/",
        "--rate",
        "50",
        "--duration",
        "2s",
        "--expect-agents",
        "1",
        "--token",
        "t",
        "--listen",
        "127.0.0.1:0",
        "--out",
    ])
    .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let mut a = std::process::Command::new("unshare");
    a.args(["-m", "sh", "-c"]).arg(format!(
        "mount --bind {} /etc/resolv.conf && exec {} --coordinator http://{} --token t --allow-target slow-name.example:8080",
        resolv.display(),
        bin("loadfleet-agent").display(),
        control_address(&line)
    ));
    let a = Proc::spawn(a, "agent");
    let (status, output) = c.wait(Duration::from_secs(60));
    let (agent_status, agent_output) = a.wait(Duration::from_secs(15));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    quiet.join().expect("the silent name server");
    let r = read_report(&out);
    let t = &r["totals"];
    let codes: Vec<&str> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter_map(|v| v["code"].as_str())
        .collect();
    assert!(
        !codes.contains(&"AGENT_LOST") && !codes.contains(&"PARTIAL"),
        "{codes:?}\n{output}\n{agent_output}"
    );
    assert_eq!(u(&t["sent"]), 100, "{t}");
    assert_eq!(u(&t["errors"]["dns"]), 100, "{t}\n{agent_output}");
    assert_eq!(u(&t["in_flight_at_end"]), 0, "{t}");
    assert_eq!(status.code(), Some(3), "every request failed: {output}");
    assert_eq!(agent_status.code(), Some(0), "{agent_output}");
}

/// `LOADFLEET_AGENT_BIN` naming no file is refused by name before the
/// testbed or the coordinator starts (exit 2), instead of a bare "No such
/// file" once they were up; set but empty, as `VAR=` leaves it in a shell,
/// it counts as unset and the agents next to the coordinator run.
#[test]
fn a_local_binary_variable_naming_no_file_is_refused_by_name() {
    let dir = temp_dir("agent-bin");
    let local_run = |out: &str, agent_bin: &std::ffi::OsStr| {
        let mut cmd = coordinator();
        cmd.args([
            "run",
            "--rate",
            "20",
            "--duration",
            "1s",
            "--local-agents",
            "1",
            "--out",
        ])
        .arg(dir.join(out))
        .env("LOADFLEET_AGENT_BIN", agent_bin);
        run(cmd, "coordinator", Duration::from_secs(60))
    };
    let missing = dir.join("no-such-agent");
    let (status, output) = local_run("out", missing.as_os_str());
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains(&format!("LOADFLEET_AGENT_BIN names {}", missing.display()))
            && output.contains("unset it"),
        "{output}"
    );
    assert!(
        !output.contains("testbed listening") && !output.contains("coordinator listening"),
        "nothing started: {output}"
    );
    let (status, output) = local_run("empty", "".as_ref());
    assert!(
        output.contains("agent local-0 finished"),
        "{status:?}: {output}"
    );
}

/// Issue 52: a URL whose port is past 65535 (or 0) is bad input, refused
/// before anything starts (exit 2), naming the flag or the plan key and
/// the range, like any other malformed URL.
#[test]
fn a_port_out_of_range_is_refused_as_bad_input() {
    let dir = temp_dir("port-range");
    for url in ["http://127.0.0.1:99999/", "http://127.0.0.1:0/"] {
        let started = Instant::now();
        let mut cmd = coordinator();
        cmd.args(["run", "--url", url, "--rate", "50", "--duration", "2s"])
            .arg("--out")
            .arg(dir.join("out"));
        let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
        assert_eq!(status.code(), Some(2), "{output}");
        let port = url.trim_end_matches('/').rsplit(':').next().unwrap_or("");
        assert!(
            output.contains(&format!(
                "--url: \"{url}\" has port {port}, out of range; a port is 1 to 65535"
            )),
            "{output}"
        );
        assert!(!output.contains("testbed listening"), "{output}");
        assert!(!output.contains("waiting for"), "{output}");
        assert!(started.elapsed() < Duration::from_secs(10), "{output}");
    }
    // In a plan, its key and line.
    let plan = write(
        &dir,
        "plan.toml",
        "[target]\nurl = \"http://127.0.0.1:99999/\"\n[[scenario]]\nrate = 50\nduration = \"2s\"\n",
    );
    let mut cmd = coordinator();
    cmd.args(["plan", "check"]).arg(&plan);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("line 2: target.url: \"http://127.0.0.1:99999/\" has port 99999, out of range; a port is 1 to 65535"),
        "{output}"
    );
}

/// Issue 52: a misspelt flag, subcommand or flag value is answered with
/// the closest valid one (clap's suggestions), on every binary, exit 2.
#[test]
fn misspelt_flags_and_subcommands_get_a_suggestion() {
    let testbed = || Command::new(bin("loadfleet-testbed"));
    let cases: Vec<(Command, &[&str], &str)> = vec![
        (
            coordinator(),
            &["run", "--rat", "5"],
            "a similar argument exists: '--rate'",
        ),
        (
            coordinator(),
            &["serch"],
            "a similar subcommand exists: 'search'",
        ),
        (
            coordinator(),
            &["plan", "chek", "x.toml"],
            "a similar subcommand exists: 'check'",
        ),
        (
            coordinator(),
            &["run", "--process", "poison"],
            "a similar value exists: 'poisson'",
        ),
        (
            agent(),
            &["--coordinatr", "http://127.0.0.1:1"],
            "a similar argument exists: '--coordinator'",
        ),
        (
            testbed(),
            &["--delya", "1ms"],
            "a similar argument exists: '--delay'",
        ),
    ];
    for (mut cmd, args, tip) in cases {
        cmd.args(args);
        let (status, output) = run(cmd, "binary", Duration::from_secs(30));
        assert_eq!(status.code(), Some(2), "{args:?}: {output}");
        assert!(output.contains(tip), "{args:?}: {output}");
    }
}
