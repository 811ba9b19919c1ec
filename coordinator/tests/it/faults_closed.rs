//! A lost agent in a closed-model run: under `--on-agent-loss
//! redistribute` the survivors take over its clients, so the target sees
//! the plan's population again after the hand-over; under `continue` the
//! population stays a third short. Real processes: a coordinator, three
//! agents on their own loopback addresses and the testbed, whose
//! `GET /__stats` counts what reached it.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "closed-loss-token";
/// Nine clients, no think time, against a 50 ms delay: each completes
/// about 20 requests a second, so the testbed answers about 180 a second
/// while all nine run. By Little's law the rate over the delay is the
/// concurrency the target sees.
const CLIENTS: &str = "9";
const DELAY: Duration = Duration::from_millis(50);

fn start_agent(control: &str, source: &str) -> Proc {
    let mut cmd = Command::new(bin("loadfleet-agent"));
    cmd.args(["--coordinator", control, "--token", TOKEN])
        .args(["--bind", source, "--id", source, "--workers", "1"]);
    Proc::spawn(cmd, &format!("agent {source}"))
}

/// The concurrency the testbed saw over `window`, from its answer count
/// (rate × delay).
fn concurrency(addr: &str, window: Duration) -> f64 {
    let (t0, n0) = (Instant::now(), testbed_counts(addr)["total"]);
    std::thread::sleep(window);
    let (t1, n1) = (Instant::now(), testbed_counts(addr)["total"]);
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64() * DELAY.as_secs_f64()
}

/// Runs nine clients on three agents, SIGKILLs the one on 127.0.0.3 3 s
/// in, and returns the concurrency the target saw before the kill and
/// after the hand-over, with the report and the coordinator's output.
fn kill_one_closed(test: &str, mode: &str) -> (f64, f64, serde_json::Value, String) {
    let (_testbed, addr) = start_testbed(&["--delay", "50ms"]);
    let out = temp_dir(test);
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--agent-timeout", "20s", "--expect-agents", "3"])
        .args(["--url", &format!("http://{addr}/")])
        .args(["--clients", CLIENTS, "--duration", "10s", "--drain", "2s"])
        .args(["--on-agent-loss", mode])
        .arg("--out")
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    let _d = start_agent(&control, "127.0.0.4");
    wait_for_run_second(&mut c, 1);
    let before = concurrency(&addr, Duration::from_millis(1500));
    signal(b.pid(), nix::sys::signal::Signal::SIGKILL as i32);
    // The loss is noticed at once (the stream breaks) and the hand-over
    // comes at the first second boundary at least 1 s later: by 7 s the
    // survivors have run the taken clients for a second or more.
    wait_for_run_second(&mut c, 7);
    let after = concurrency(&addr, Duration::from_millis(1500));
    let (status, output) = c.wait(Duration::from_secs(60));
    eprintln!("{mode}: concurrency {before:.2} before the kill, {after:.2} after");
    assert_eq!(status.code(), Some(3), "a lost agent is an error: {output}");
    (before, after, read_report(&out), output)
}

#[test]
fn redistribute_keeps_a_closed_population_after_an_agent_is_killed() {
    let (before, after, report, output) = kill_one_closed("closed-redistribute", "redistribute");
    assert!(output.contains("take over its arrivals from"), "{output}");
    assert!(
        before > 6.0,
        "nine clients make about 9 requests outstanding, saw {before:.1}: {output}"
    );
    assert!(
        after > before * 0.85,
        "the survivors took over the lost clients: {before:.1} before, {after:.1} after\n{output}"
    );
    assert!(
        after < before * 1.15,
        "no client runs twice: {before:.1} before, {after:.1} after\n{output}"
    );
    let lost = lost_agent(&report);
    assert_eq!(lost["source"], "127.0.0.3", "{output}");
}

/// The control: without a hand-over the target sees a third fewer
/// clients, so the test above can tell a take-over from none.
#[test]
fn continue_leaves_a_closed_population_short_after_an_agent_is_killed() {
    let (before, after, _, output) = kill_one_closed("closed-continue", "continue");
    assert!(
        after < before * 0.8,
        "three of nine clients were lost: {before:.1} before, {after:.1} after\n{output}"
    );
}
