//! Many agents on one coordinator, with real processes.
//!
//! - A swarm of 50 synthetic agents (`loadfleet-swarm`: real gRPC sessions,
//!   real protocol, snapshots of ~1,000 distinct latency values each):
//!   nobody is lost and the merged report equals, figure for figure, one
//!   histogram fed everything the swarm sent.
//! - 50 real agent processes, each sending from its own source address
//!   (127.0.0.x via `--bind`), end to end against the testbed.
//!
//! The scale benchmark itself (100 – 1,000 agents, CPU, memory, start time)
//! is `bench/scale.sh`; its results are in BENCHMARKS.md.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Starts `loadfleet-coordinator run` waiting for `agents` on a free port
/// of 127.0.0.1; returns it and the URL agents dial.
fn start_coordinator(
    test: &str,
    agents: usize,
    args: &[&str],
) -> (Proc, String, std::path::PathBuf) {
    let out = temp_dir(test);
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", "scale-token"])
        .args(["--expect-agents", &agents.to_string()])
        .args(args)
        .arg("--out")
        .arg(out.join("report"));
    let mut proc = Proc::spawn(cmd, "coordinator");
    let line = proc.wait_for_line("coordinator listening on", Duration::from_secs(30));
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("address in the listening line");
    (proc, format!("http://{addr}"), out)
}

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn a_swarm_of_50_merges_exactly_and_nobody_is_lost() {
    const AGENTS: usize = 50;
    // 1,000 arrivals per agent per second: snapshots of ~1,000 distinct
    // latency values, as from a busy real agent.
    let (coord, url, dir) = start_coordinator(
        "scale-swarm",
        AGENTS,
        &[
            "--url",
            "http://127.0.0.1:9/",
            "--rate",
            "50000",
            "--duration",
            "3s",
        ],
    );
    let mut swarm = Command::new(bin("loadfleet-swarm"));
    swarm
        .args(["--coordinator", &url, "--token", "scale-token"])
        .args(["--agents", &AGENTS.to_string(), "--timeout", "90s"])
        .arg("--out")
        .arg(dir.join("swarm.json"));
    let (swarm_status, swarm_output) = run(swarm, "swarm", Duration::from_secs(120));
    let (status, output) = coord.wait(Duration::from_secs(60));
    assert!(
        swarm_status.success(),
        "swarm:\n{swarm_output}\ncoordinator:\n{output}"
    );
    assert!(
        status.success(),
        "coordinator exit {:?}:\n{output}",
        status.code()
    );

    let report = read_report(&dir.join("report"));
    let swarm = read_json(&dir.join("swarm.json"));
    let sent = &swarm["sent"];
    assert!(
        sent["distinct_values_per_snapshot"]
            .as_f64()
            .expect("distinct")
            > 800.0,
        "snapshots are as rich as a busy agent's: {sent}"
    );

    // Nobody lost, everybody finished.
    assert_eq!(u(&swarm["closed_cleanly"]), AGENTS as u64, "{swarm}");
    let agents = report["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), AGENTS);
    for a in agents {
        assert_eq!(a["status"], "finished", "{a}");
    }
    let codes: Vec<&str> = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter_map(|v| v["code"].as_str())
        .collect();
    assert!(!codes.contains(&"AGENT_LOST"), "{codes:?}");
    assert!(!codes.contains(&"CORRUPT_SNAPSHOT"), "{codes:?}");

    // Exactness: the merged totals are the sums of what was sent...
    let t = &report["totals"];
    assert_eq!(u(&t["intended"]), 150_000, "the plan's count");
    for key in ["intended", "sent", "completed", "completed_in_window"] {
        assert_eq!(t[key], sent[key], "{key}");
    }
    assert_eq!(t["status"], sent["status"]);
    assert_eq!(t["errors"], sent["errors"]);
    // ...and every percentile equals that of one histogram fed every value.
    let keys = ["p50", "p90", "p99", "p999", "max", "count"];
    for key in keys {
        assert_eq!(
            t["latency_ms"][key], sent["latency_ms"][key],
            "latency {key}"
        );
    }
    let classes = sent["latency_by_class_ms"].as_object().expect("classes");
    assert_eq!(classes.len(), 4, "2xx, 4xx, 5xx and error all occur");
    for (class, expected) in classes {
        for key in keys {
            assert_eq!(
                t["latency_by_class_ms"][class][key], expected[key],
                "{class} {key}"
            );
        }
    }

    // The coordinator kept up: heartbeats flowed (it sends four a second;
    // the slack is for a busy test machine) and the start came promptly.
    let timing = &swarm["timing"];
    let gap = timing["heartbeat_gap_max_ms"].as_f64().expect("gap");
    assert!(gap < 2_000.0, "heartbeat gap {gap} ms: {timing}");
    let start = timing["last_hello_to_start_s"].as_f64().expect("start");
    assert!(
        start < 10.0,
        "start {start} s after the last hello: {timing}"
    );
}

/// 50 agent processes, each bound to its own 127.0.0.x, against the
/// testbed: every one joins, sends from its address and finishes, and the
/// fleet's figures add up. About 15 s on a 2-CPU machine.
#[test]
fn fifty_real_agents_from_their_own_addresses() {
    const AGENTS: usize = 50;
    let (_testbed, target) = start_testbed(&["--workers", "1"]);
    let url = format!("http://{target}/");
    let (coord, coordinator_url, dir) = start_coordinator(
        "scale-agents",
        AGENTS,
        &[
            "--url",
            &url,
            "--rate",
            "500",
            "--duration",
            "4s",
            "--agent-timeout",
            "90s",
        ],
    );
    let mut agents: Vec<Proc> = (0..AGENTS)
        .map(|i| {
            let mut cmd = agent();
            cmd.args(["--coordinator", &coordinator_url, "--token", "scale-token"])
                .args(["--id", &format!("agent-{i}")])
                .args(["--bind", &format!("127.0.0.{}", i + 2)])
                .args(["--workers", "1"]);
            Proc::spawn(cmd, &format!("agent-{i}"))
        })
        .collect();
    let (status, output) = coord.wait(Duration::from_secs(120));
    for a in agents.drain(..) {
        let what = a.what.clone();
        let (s, out) = a.wait(Duration::from_secs(30));
        assert!(s.success(), "{what} exit {:?}:\n{out}", s.code());
    }
    let report = read_report(&dir.join("report"));
    let t = &report["totals"];
    assert_eq!(u(&t["intended"]), 2_000, "the plan's count\n{output}");
    assert_eq!(
        u(&t["intended"]),
        u(&t["sent"]) + u(&t["unsent"]["total"]),
        "{output}"
    );
    let reported = report["agents"].as_array().expect("agents");
    assert_eq!(reported.len(), AGENTS, "{output}");
    let mut sources: Vec<&str> = reported
        .iter()
        .map(|a| {
            assert_eq!(a["status"], "finished", "{a}");
            assert!(u(&a["sent"]) > 0, "{a}");
            a["source"].as_str().expect("source")
        })
        .collect();
    sources.sort();
    sources.dedup();
    assert_eq!(sources.len(), AGENTS, "every agent its own address");
    assert!(
        status.success() || status.code() == Some(3),
        "exit {:?}:\n{output}",
        status.code()
    );
}
