//! The fleet under faults, with real processes: a coordinator, agents on
//! their own loopback addresses (127.0.0.2, 127.0.0.3) and the testbed,
//! whose per-source request counts (`GET /__stats`) say what really reached
//! the target. An agent is killed (SIGKILL), frozen (SIGSTOP), cut off
//! (its network namespace's veth link taken down) or joins late;
//! the report must keep `intended` at the plan's count and account for every
//! arrival: sent, unsent, or unreported (its fate unknown) — and what the
//! target received from a lost agent beyond its `sent` must lie within its
//! `unreported`.
//!
//! Exit status: a lost agent makes a run degraded whatever the mode, so
//! `run` exits 3: AGENT_LOST is an error verdict, as a run with agents
//! missing or lost is not a clean measurement.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "faults-token";
/// 200 req/s for 8 s: the plan's 1,600 arrivals.
const RATE: &str = "200";
const DURATION: &str = "8s";
const PLANNED: u64 = 1600;

/// A coordinator waiting for `agents` agents, aimed at the testbed.
fn coordinator_for(
    testbed: &str,
    agents: u32,
    out: &std::path::Path,
    (rate, duration): (&str, &str),
    extra: &[&str],
) -> Proc {
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--agent-timeout", "20s", "--expect-agents"])
        .arg(agents.to_string())
        .args(["--url", &format!("http://{testbed}/")])
        .args(["--rate", rate, "--duration", duration, "--drain", "2s"])
        .arg("--out")
        .arg(out)
        .args(extra);
    Proc::spawn(cmd, "coordinator")
}

fn start_agent(control: &str, source: &str) -> Proc {
    let mut cmd = Command::new(bin("loadfleet-agent"));
    cmd.args(["--coordinator", control, "--token", TOKEN])
        .args(["--bind", source, "--id", source, "--workers", "1"]);
    Proc::spawn(cmd, &format!("agent {source}"))
}

/// What every mode must show: the plan's count intended, every arrival
/// sent, unsent or unreported (exactly, in the totals and per agent), the
/// lost agent's remainder counted `agent_lost`, and exit 3.
fn check_accounting(report: &serde_json::Value, status: std::process::ExitStatus, output: &str) {
    assert_eq!(status.code(), Some(3), "{output}");
    let t = &report["totals"];
    assert_eq!(u(&t["intended"]), PLANNED, "intended follows the plan: {t}");
    assert_eq!(
        u(&t["sent"]) + u(&t["unsent"]["total"]) + u(&t["unreported"]),
        PLANNED,
        "every arrival is sent, unsent or unreported: {t}"
    );
    for a in report["agents"].as_array().expect("agents") {
        assert_eq!(
            u(&a["intended"]),
            u(&a["sent"]) + u(&a["unsent"]) + u(&a["unreported"]),
            "{a}"
        );
    }
    assert!(u(&t["unsent"]["agent_lost"]) > 0, "{t}");
    let per_second: u64 = report["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| u(&i["intended"]))
        .sum();
    assert_eq!(per_second, PLANNED, "per second too");
    let per_agent: u64 = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| u(&a["intended"]))
        .sum();
    assert_eq!(per_agent, PLANNED, "per agent too");
    let lost = lost_agent(report);
    assert_eq!(lost["source"], "127.0.0.3");
    let verdict = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["code"] == "AGENT_LOST")
        .expect("an AGENT_LOST verdict");
    let text = verdict["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("s into the run") && text.contains("agent_lost"),
        "{text}"
    );
}

/// What the target received from the lost agent (on 127.0.0.3) beyond
/// what it reported sent: those it sent in its last moments without living
/// to report them. None can be missing, and all must lie within its
/// `unreported`, the arrivals whose fate the report says it cannot know.
fn check_target_agrees(report: &serde_json::Value, addr: &str) -> u64 {
    let lost = by_source(report, "127.0.0.3");
    let received = testbed_counts(addr).get("127.0.0.3").copied().unwrap_or(0);
    let sent = u(&lost["sent"]);
    assert!(sent > 0, "it sent before it was killed: {lost}");
    assert!(
        received >= sent,
        "the target got {received}, fewer than the {sent} reported sent: {lost}"
    );
    assert!(
        received - sent <= u(&lost["unreported"]),
        "the target got {received}, {} more than reported sent, beyond the unreported: {lost}",
        received - sent
    );
    received - sent
}

fn by_source<'a>(report: &'a serde_json::Value, source: &str) -> &'a serde_json::Value {
    report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["source"] == source)
        .unwrap_or_else(|| panic!("no agent from {source}"))
}

fn has_verdict(report: &serde_json::Value, code: &str) -> bool {
    report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .any(|v| v["code"] == code)
}

/// Two agents; the one on 127.0.0.3 is killed 3 s into the run. Returns
/// the testbed too, still running, for its counts.
fn kill_one(
    test: &str,
    mode: &str,
) -> (
    serde_json::Value,
    String,
    (Proc, String),
    std::path::PathBuf,
) {
    let (testbed, addr) = start_testbed(&[]);
    let out = temp_dir(test);
    let mut c = coordinator_for(&addr, 2, &out, (RATE, DURATION), &["--on-agent-loss", mode]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 3);
    signal(b.pid(), nix::sys::signal::Signal::SIGKILL as i32);
    let (status, output) = c.wait(Duration::from_secs(60));
    let report = read_report(&out);
    check_accounting(&report, status, &output);
    (report, output, (testbed, addr), out)
}

/// The sum of `intervals.csv`'s column `name`.
fn csv_sum(out: &std::path::Path, name: &str) -> u64 {
    let csv = std::fs::read_to_string(out.join("intervals.csv")).expect("intervals.csv");
    let header = csv.lines().next().unwrap_or_default();
    let column = header
        .split(',')
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no {name} column: {header}"));
    csv.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(column)?.parse::<u64>().ok())
        .sum()
}

#[test]
fn sigkill_with_continue_counts_the_lost_share_unsent() {
    let (report, output, (_testbed, addr), out) = kill_one("kill-continue", "continue");
    let beyond = check_target_agrees(&report, &addr);
    // Every headline names the lost share, in its two parts: the text
    // report's line and intervals.csv's columns, as the verdict and the
    // page do.
    let t = &report["totals"];
    let (lost, unreported) = (u(&t["unsent"]["agent_lost"]), u(&t["unreported"]));
    assert!(lost > 0, "{output}");
    assert!(unreported > 0, "its last second is of unknown fate: {t}");
    let headline = output
        .lines()
        .find(|l| l.contains("intended ") && l.contains("   unsent "))
        .unwrap_or_default();
    assert!(
        headline.contains(&format!("agent_lost {lost}"))
            && headline.contains(&format!("unreported {unreported}")),
        "{headline}\n{output}"
    );
    assert_eq!(csv_sum(&out, "unsent_agent_lost"), lost);
    assert_eq!(csv_sum(&out, "unreported"), unreported);
    let verdict = verdict(&report, "AGENT_LOST").expect("AGENT_LOST");
    assert!(
        verdict["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{unreported} arrival(s) due before"))),
        "{verdict}"
    );
    eprintln!("the killed agent's last moments: {beyond} sent without living to report them, {unreported} unreported, {lost} agent_lost");
    assert!(
        !has_verdict(&report, "PARTIAL"),
        "nothing cut the run short: {output}"
    );
    assert_eq!(report["partial"], false);
    let survivor = by_source(&report, "127.0.0.2");
    assert_eq!(u(&survivor["intended"]), PLANNED / 2, "kept to its share");
}

#[test]
fn sigkill_with_redistribute_hands_the_rest_over_and_the_target_agrees() {
    let (report, output, (_testbed, addr), _) = kill_one("kill-redistribute", "redistribute");
    assert!(!has_verdict(&report, "PARTIAL"), "{output}");
    assert!(output.contains("take over its arrivals from"), "{output}");
    let survivor = by_source(&report, "127.0.0.2");
    let lost = by_source(&report, "127.0.0.3");
    assert!(
        u(&survivor["intended"]) > PLANNED / 2 + 100,
        "the survivor took over: {survivor}"
    );
    // What the target received from each source: the survivor exactly what
    // it reported sent; the killed agent at least what it reported (it may
    // have sent some in its last second without living to report them,
    // which the report counts unreported).
    let counts = testbed_counts(&addr);
    assert_eq!(
        counts.get("127.0.0.2").copied().unwrap_or(0),
        u(&survivor["sent"]),
        "{counts:?}"
    );
    let beyond = check_target_agrees(&report, &addr);
    let t = &report["totals"];
    assert_eq!(counts["total"], u(&t["sent"]) + beyond, "{counts:?}");
    assert_eq!(
        u(&lost["unreported"]),
        u(&t["unreported"]),
        "only the lost agent has arrivals of unknown fate"
    );
}

#[test]
fn sigkill_with_abort_stops_the_fleet() {
    let (report, output, _, _) = kill_one("kill-abort", "abort");
    assert!(
        has_verdict(&report, "PARTIAL"),
        "an abort cuts the run short"
    );
    assert!(output.contains("aborting the run"), "{output}");
    let elapsed = report["run"]["elapsed_s"].as_f64().expect("elapsed");
    assert!(elapsed < 7.0, "stopped at once, not at the end: {elapsed}");
}

#[test]
fn a_frozen_agent_is_lost_within_3_s_and_sends_nothing_after_sigcont() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("sigstop");
    let mut c = coordinator_for(&addr, 2, &out, (RATE, DURATION), &[]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 2);
    signal(b.pid(), nix::sys::signal::Signal::SIGSTOP as i32);
    let frozen = Instant::now();
    c.wait_for_line("agent 127.0.0.3 lost", Duration::from_secs(10));
    let noticed = frozen.elapsed();
    // Within 3 s, with half a second for a busy machine to print the line.
    assert!(
        noticed < Duration::from_millis(3500),
        "noticed after {noticed:?}"
    );
    let before = testbed_counts(&addr).get("127.0.0.3").copied().unwrap_or(0);
    signal(b.pid(), nix::sys::signal::Signal::SIGCONT as i32);
    let (_, agent_output) = b.wait(Duration::from_secs(20));
    let after = testbed_counts(&addr).get("127.0.0.3").copied().unwrap_or(0);
    assert_eq!(after, before, "nothing sent after SIGCONT: {agent_output}");
    let (status, output) = c.wait(Duration::from_secs(60));
    let report = read_report(&out);
    check_accounting(&report, status, &output);
    assert!(!has_verdict(&report, "PARTIAL"), "{output}");
    // Woken, it delivered the figures it had not: its sent is the
    // target's count, and nothing of its share is of unknown fate.
    assert!(
        agent_output.contains("delivered the run's last figures"),
        "{agent_output}"
    );
    let frozen = by_source(&report, "127.0.0.3");
    assert_eq!(u(&frozen["sent"]), after, "{frozen}");
    assert_eq!(u(&frozen["unreported"]), 0, "{frozen}");
}

#[test]
fn a_late_agent_is_told_it_has_no_share_and_waits_for_the_next_run() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("late");
    let mut c = coordinator_for(&addr, 1, &out, ("50", "3s"), &["--repeat", "2"]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    wait_for_run_second(&mut c, 1);
    let mut late = start_agent(&control, "127.0.0.3");
    late.wait_for_line("standing by", Duration::from_secs(20));
    c.wait_for_line("joined late", Duration::from_secs(20));
    let (status, output) = c.wait(Duration::from_secs(60));
    // A stall of the shared machine may rightly make the agent late
    // (GENERATOR_SATURATED); anything else is a failure.
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let (_, late_output) = late.wait(Duration::from_secs(20));
    assert!(
        late_output.contains("no share of the running schedule"),
        "{late_output}"
    );
    // Both runs had exactly one agent: the late one only stood by, and
    // the report names it so.
    let report = read_report(&out);
    assert_eq!(u(&report["totals"]["intended"]), 150, "{output}");
    let late_agents = report["late_agents"].as_array().expect("late_agents");
    assert_eq!(late_agents.len(), 1, "{late_agents:?}");
    assert_eq!(late_agents[0]["outcome"], "standby", "{late_agents:?}");
    assert_eq!(
        testbed_counts(&addr).get("127.0.0.3").copied().unwrap_or(0),
        0
    );
}

/// The replacement an orchestrator starts for a killed agent stands by
/// and takes the lost one's place in the next run: its clock is probed
/// then, and it sends its share, so the second run is whole.
#[test]
fn a_replacement_agent_fills_the_lost_place_in_the_next_run() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("replace");
    let mut c = coordinator_for(&addr, 2, &out, ("50", "3s"), &["--repeat", "2"]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 1);
    signal(b.pid(), nix::sys::signal::Signal::SIGKILL as i32);
    let mut replacement = start_agent(&control, "127.0.0.4");
    replacement.wait_for_line("standing by", Duration::from_secs(20));
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_eq!(
        status.code(),
        Some(3),
        "the first run lost an agent: {output}"
    );
    let report = read_report(&out);
    let runs = report["repeats"]["runs"].as_array().expect("repeats.runs");
    assert_eq!(runs.len(), 2, "{output}");
    assert!(count_of(&runs[0]["unsent"], "agent_lost") > 0, "{output}");
    assert_eq!(u(&runs[1]["intended"]), 150, "{output}");
    assert_eq!(
        u(&runs[1]["unsent"]["total"]),
        0,
        "the second run is whole: {output}"
    );
    assert!(!output.contains("did not answer clock probes"), "{output}");
    assert_eq!(
        testbed_counts(&addr).get("127.0.0.4").copied().unwrap_or(0),
        75,
        "the replacement sent half of the second run"
    );
}

/// A network namespace joined to this one by a veth pair, removed on drop
/// (deleting the namespace deletes both ends of the pair).
struct Netns {
    name: String,
    host_if: String,
    host_ip: String,
}

impl Netns {
    /// Fails the test when this machine cannot make namespaces (no `ip`,
    /// not root, or no CAP_NET_ADMIN): a cut that was never made proves
    /// nothing. The test is in nextest's `root` profile, which
    /// scripts/test.sh runs as root.
    fn create() -> Netns {
        let id = std::process::id() % 200 + 20;
        let (name, host_if, ns_if) = (format!("lfcut{id}"), format!("lfh{id}"), format!("lfn{id}"));
        let (host_ip, ns_ip) = (format!("10.213.{id}.1"), format!("10.213.{id}.2"));
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
                panic!("cannot run ip (Debian package iproute2; scripts/test.sh installs it): {e}")
            });
            out.status.success() || {
                eprintln!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                false
            }
        };
        let _ = ip(&["netns", "del", &name]);
        assert!(
            ip(&["netns", "add", &name]),
            "cannot create network namespace {name}: this test needs root (run scripts/test.sh as root)"
        );
        let ns = Netns {
            name: name.clone(),
            host_if: host_if.clone(),
            host_ip: host_ip.clone(),
        };
        let ok = ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]) && ip(&["link", "set", &ns_if, "netns", &name])
            && ip(&["addr", "add", &format!("{host_ip}/24"), "dev", &host_if])
            && ip(&["link", "set", &host_if, "up"])
            && ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("{ns_ip}/24"),
                "dev",
                &ns_if,
            ])
            && ip(&["-n", &name, "link", "set", &ns_if, "up"])
            && ip(&["-n", &name, "link", "set", "lo", "up"]);
        assert!(ok, "could not wire namespace {name} (ip link/addr failed)");
        ns
    }

    /// Cuts the link: the host end goes down, so nothing passes either way.
    fn cut(&self) {
        let status = Command::new("ip")
            .args(["link", "set", &self.host_if, "down"])
            .status()
            .expect("run ip");
        assert!(status.success(), "could not take {} down", self.host_if);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn a_network_cut_is_noticed_by_both_sides_and_the_agent_stops() {
    let ns = Netns::create();
    // Target and coordinator listen on the host end of the pair, so the
    // agent inside the namespace reaches both only through the veth link.
    let mut tb = Command::new(bin("loadfleet-testbed"));
    tb.args(["--listen", &format!("{}:0", ns.host_ip)]);
    let mut testbed = Proc::spawn(tb, "testbed");
    let line = testbed.wait_for_line("listening on", Duration::from_secs(20));
    let addr = line.rsplit(' ').next().expect("address").to_string();
    let out = temp_dir("netcut");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--listen",
        &format!("{}:0", ns.host_ip),
        "--token",
        TOKEN,
    ])
    .args(["--agent-timeout", "20s", "--expect-agents", "2"])
    .args(["--url", &format!("http://{addr}/")])
    .args(["--rate", RATE, "--duration", DURATION, "--drain", "2s"])
    .arg("--out")
    .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let control = control_url(&mut c);
    let _host_agent = start_agent(&control, "127.0.0.2");
    let mut inside = Command::new("ip");
    inside
        .args(["netns", "exec", &ns.name])
        .arg(bin("loadfleet-agent"))
        .args(["--coordinator", &control, "--token", TOKEN])
        .args(["--id", "inside", "--workers", "1"]);
    let mut agent = Proc::spawn(inside, "agent in the namespace");
    wait_for_run_second(&mut c, 3);
    ns.cut();
    let cut = Instant::now();
    c.wait_for_line("agent inside lost", Duration::from_secs(10));
    let coordinator_noticed = cut.elapsed();
    // It stops sending, then keeps trying to deliver its last figures
    // (--deliver-grace) through a link that stays down.
    let agent_output = agent.wait_for_line("lost the coordinator", Duration::from_secs(10));
    let agent_stopped = cut.elapsed();
    eprintln!("cut noticed by the coordinator after {coordinator_noticed:?}, the agent stopped sending after {agent_stopped:?}");
    assert!(
        coordinator_noticed < Duration::from_secs(5),
        "coordinator noticed after {coordinator_noticed:?}"
    );
    assert!(
        agent_stopped < Duration::from_secs(5),
        "the agent stopped after {agent_stopped:?}: {agent_output}"
    );
    let (status, output) = c.wait(Duration::from_secs(60));
    let report = read_report(&out);
    assert_eq!(status.code(), Some(3), "{output}");
    let t = &report["totals"];
    assert_eq!(u(&t["intended"]), PLANNED, "intended follows the plan: {t}");
    assert_eq!(
        u(&t["sent"]) + u(&t["unsent"]["total"]) + u(&t["unreported"]),
        PLANNED,
        "{t}"
    );
    // Silent, it may have sent until its own dead-man switch fired, 4 s
    // after the loss was noticed (here about when the schedule ends): what
    // it never reported until then is of unknown fate, not unsent. Its
    // link stays down, so no late figures change that.
    let inside = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["id"] == "inside")
        .expect("the agent inside");
    assert!(u(&inside["unreported"]) > 0, "{inside}");
    assert_eq!(
        u(&inside["intended"]),
        u(&inside["sent"]) + u(&inside["unsent"]) + u(&inside["unreported"]),
        "{inside}"
    );
    assert!(has_verdict(&report, "AGENT_LOST"), "{output}");
}

/// `report.partial.json`, written as the run goes, books a lost agent's
/// share as soon as it is lost, not only in the final report; and the final
/// report books it once, not again.
#[test]
fn the_partial_report_books_a_lost_agent_as_it_happens() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("kill-partial");
    let mut c = coordinator_for(&addr, 2, &out, (RATE, DURATION), &[]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 2);
    signal(b.pid(), nix::sys::signal::Signal::SIGKILL as i32);
    c.wait_for_line("lost", Duration::from_secs(10));
    let path = out.join("report.partial.json");
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut partial_lost = 0;
    while Instant::now() < deadline && partial_lost == 0 {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(r) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        partial_lost = r["totals"]["unsent"]["agent_lost"].as_u64().unwrap_or(0);
    }
    assert!(
        partial_lost > 0,
        "report.partial.json never showed agent_lost while the run went on"
    );
    let (status, output) = c.wait(Duration::from_secs(60));
    let report = read_report(&out);
    check_accounting(&report, status, &output);
    assert_eq!(
        u(&report["totals"]["unsent"]["agent_lost"]),
        partial_lost,
        "booked once: {output}"
    );
}
