//! What a lost agent leaves behind, with real processes: the arrivals of
//! its share whose fate nobody can know are `unreported`, neither sent nor
//! unsent; an agent that stopped on its own (its dead-man switch) delivers
//! its last figures once the coordinator answers again, so its `sent` is
//! the target's count; with `--on-agent-loss redistribute` no arrival it
//! may have sent is sent again; and a peer that delivers figures beyond its
//! share is refused.

use crate::capture::Capture;
use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use loadfleet_proto::v1::{
    self, agent_message, control_client::ControlClient, coordinator_message,
};
use loadfleet_proto::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const TOKEN: &str = "lost-figures";

fn start_agent(control: &str, source: &str) -> Proc {
    let mut cmd = Command::new(bin("loadfleet-agent"));
    cmd.args(["--coordinator", control, "--token", TOKEN])
        .args(["--bind", source, "--id", source, "--workers", "1"]);
    Proc::spawn(cmd, &format!("agent {source}"))
}

/// A coordinator waiting for two agents, running `args` (a plan or
/// `--url` and a rate), writing to `out`.
fn coordinator_with(out: &std::path::Path, args: &[&str]) -> Proc {
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--agent-timeout", "20s", "--expect-agents", "2"])
        .args(["--drain", "2s"])
        .args(args)
        .arg("--out")
        .arg(out);
    Proc::spawn(cmd, "coordinator")
}

/// The coordinator stalls (SIGSTOP) 3 s into a 10 s run at 200 req/s, for
/// 6 s: both agents stop by their dead-man switch while it is stopped,
/// then, once it runs again, deliver what it had not taken in. The report's
/// `sent` is the target's count, agent by agent, and nothing is left of
/// unknown fate.
#[test]
fn a_stalled_coordinator_gets_the_agents_last_figures_and_sent_is_the_targets_count() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("stalled-coordinator");
    let url = format!("http://{addr}/");
    let mut c = coordinator_with(&out, &["--url", &url, "--rate", "200", "--duration", "10s"]);
    let control = control_url(&mut c);
    let mut a = start_agent(&control, "127.0.0.2");
    let mut b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 3);
    signal(c.pid(), libc::SIGSTOP);
    let stalled = Instant::now();
    for agent in [&mut a, &mut b] {
        let line = agent.wait_for_line("lost the coordinator", Duration::from_secs(8));
        assert!(line.contains("dead-man"), "{line}");
    }
    let stopped_after = stalled.elapsed();
    // Requests on the wire when they stopped get their answers.
    std::thread::sleep(Duration::from_millis(500));
    let quiet = testbed_counts(&addr)["total"];
    std::thread::sleep(Duration::from_secs(6).saturating_sub(stalled.elapsed()));
    assert_eq!(
        testbed_counts(&addr)["total"],
        quiet,
        "the agents sent nothing after their dead-man switch"
    );
    signal(c.pid(), libc::SIGCONT);
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "two agents were lost: {output}");
    for agent in [a, b] {
        let (status, agent_output) = agent.wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(4), "{agent_output}");
        assert!(
            agent_output.contains("delivered the run's last figures"),
            "{agent_output}"
        );
    }
    let r = read_report(&out);
    let counts = testbed_counts(&addr);
    let t = &r["totals"];
    assert!(u(&t["sent"]) > 400, "load went out before the stall: {t}");
    assert_eq!(u(&t["sent"]), counts["total"], "{counts:?}\n{output}");
    for source in ["127.0.0.2", "127.0.0.3"] {
        let agent = r["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .find(|a| a["source"] == source)
            .unwrap_or_else(|| panic!("no agent from {source}"));
        assert_eq!(agent["status"], "lost", "{agent}");
        assert_eq!(u(&agent["sent"]), counts[source], "{agent}\n{counts:?}");
        assert_eq!(u(&agent["unreported"]), 0, "{agent}");
    }
    assert_eq!(u(&t["intended"]), 2000, "{t}");
    assert_eq!(u(&t["unreported"]), 0, "every figure came: {t}");
    assert_eq!(u(&t["sent"]) + u(&t["unsent"]["total"]), 2000, "{t}");
    assert!(
        u(&t["unsent"]["agent_lost"]) > 0,
        "the rest was not sent: {t}"
    );
    let lost: Vec<&serde_json::Value> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["code"] == "AGENT_LOST")
        .collect();
    assert_eq!(lost.len(), 2, "{output}");
    for v in lost {
        let m = v["message"].as_str().unwrap_or_default();
        assert!(m.contains("delivered its last figures afterwards"), "{m}");
    }
    eprintln!(
        "both agents stopped {stopped_after:?} into the stall; the target got {}, the report says sent {}",
        counts["total"],
        u(&t["sent"])
    );
}

/// With `--on-agent-loss redistribute`, an agent killed mid-run: every
/// request carries its arrival's fleet-wide index in its path, and the
/// target sees no path twice. The survivors take over only from when the
/// killed agent had certainly stopped, so the arrivals it may have sent in
/// its last moment (unreported) are never sent again; what the target got
/// beyond the report's `sent` lies within them.
#[test]
fn redistribute_never_sends_an_arrival_of_unknown_fate_again() {
    let target = Capture::start(Duration::ZERO);
    let dir = temp_dir("redistribute-unknown");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "{}"

[[scenario]]
name = "numbered"
rate = 200
duration = "8s"

[[scenario.request]]
path = "/n/{{{{seq}}}}"
"#,
            target.url()
        ),
    );
    let out = dir.join("out");
    let plan = plan.to_string_lossy().to_string();
    let mut c = coordinator_with(&out, &[&plan, "--on-agent-loss", "redistribute"]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 3);
    signal(b.pid(), libc::SIGKILL);
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{output}");
    let r = read_report(&out);
    let t = &r["totals"];
    let seen = target.seen();
    let mut paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    let received = paths.len() as u64;
    paths.sort_unstable();
    paths.dedup();
    assert_eq!(
        paths.len() as u64,
        received,
        "an arrival was sent twice\n{output}"
    );
    assert_eq!(u(&t["intended"]), 1600, "{t}");
    assert_eq!(
        u(&t["sent"]) + u(&t["unsent"]["total"]) + u(&t["unreported"]),
        1600,
        "{t}"
    );
    let unreported = u(&t["unreported"]);
    assert!(unreported > 0, "its last moment is of unknown fate: {t}");
    assert!(received >= u(&t["sent"]), "{received} received: {t}");
    assert!(
        received - u(&t["sent"]) <= unreported,
        "{received} received, beyond the sent and the unreported: {t}"
    );
    let verdict = verdict(&r, "AGENT_LOST").expect("AGENT_LOST");
    let m = verdict["message"].as_str().unwrap_or_default();
    let number = |after: &str| -> f64 {
        m.split(after)
            .nth(1)
            .and_then(|rest| rest.split('s').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no instant after {after:?} in {m}"))
    };
    let (until, from) = (number("due before "), number("arrivals from "));
    assert!(
        from >= until,
        "the hand-over at {from}s starts before the agent had certainly stopped ({until}s): {m}"
    );
}

fn message(kind: agent_message::Kind) -> v1::AgentMessage {
    v1::AgentMessage { kind: Some(kind) }
}

fn call(rx: mpsc::Receiver<v1::AgentMessage>) -> tonic::Request<ReceiverStream<v1::AgentMessage>> {
    let mut r = tonic::Request::new(ReceiverStream::new(rx));
    r.metadata_mut().insert(
        PROTOCOL_HEADER,
        PROTOCOL_VERSION.to_string().parse().expect("version"),
    );
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("token"),
    );
    r
}

/// A raw client speaking the real protocol: joins, answers the clock
/// probes and takes its assignment, then leaves (it is lost) and comes
/// back with `Deliver` and a snapshot that claims far more arrivals than
/// its share left. Returns what the coordinator answered that delivery,
/// and one naming a run key it was never given.
async fn hostile(url: String) -> (tonic::Status, tonic::Status) {
    let mut client = ControlClient::connect(url.clone()).await.expect("connect");
    let (tx, rx) = mpsc::channel(64);
    tx.send(message(agent_message::Kind::Hello(v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        agent_id: "hostile-late".into(),
        host: "hostile".into(),
        cpus: 1,
        ..Default::default()
    })))
    .await
    .expect("hello");
    let mut inbound = client.session(call(rx)).await.expect("joined").into_inner();
    let (mut index, mut key) = (None, None);
    while let Ok(Some(m)) = inbound.message().await {
        match m.kind {
            Some(coordinator_message::Kind::Welcome(w)) => index = Some(w.agent_index),
            Some(coordinator_message::Kind::Ping(p)) => {
                let pong = v1::Pong {
                    seq: p.seq,
                    coordinator_send_ns: p.coordinator_send_ns,
                    agent_recv_ns: p.coordinator_send_ns,
                    agent_send_ns: p.coordinator_send_ns,
                };
                let _ = tx.send(message(agent_message::Kind::Pong(pong))).await;
            }
            Some(coordinator_message::Kind::Assignment(a)) => {
                key = Some(a.run_key);
                break;
            }
            _ => {}
        }
    }
    // Leaves: its stream ends, and it is lost.
    drop(tx);
    drop(inbound);
    let (index, key) = (index.expect("welcomed"), key.expect("assigned"));
    assert_ne!(key, 0, "every assignment names its run");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deliver = |run_key: u64, snapshots: Vec<v1::Snapshot>| {
        let url = url.clone();
        async move {
            let mut client = ControlClient::connect(url).await.expect("connect");
            let (tx, rx) = mpsc::channel(64);
            let first = message(agent_message::Kind::Deliver(v1::Deliver {
                protocol_version: PROTOCOL_VERSION,
                agent_id: "hostile-late".into(),
                agent_index: index,
                run_key,
            }));
            tx.send(first).await.expect("deliver");
            for s in snapshots {
                tx.send(message(agent_message::Kind::Snapshot(s)))
                    .await
                    .expect("snapshot");
            }
            let mut inbound = match client.session(call(rx)).await {
                Ok(r) => r.into_inner(),
                Err(status) => return status,
            };
            loop {
                match inbound.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => return tonic::Status::ok("ended without a refusal"),
                    Err(status) => return status,
                }
            }
        }
    };
    let beyond = v1::Snapshot {
        seq: 1,
        interval_index: 0,
        intended: 1_000_000,
        sent: 1_000_000,
        completed: 1_000_000,
        status: [(200, 1_000_000)].into(),
        ..Default::default()
    };
    let refused = deliver(key, vec![beyond]).await;
    let wrong_key = deliver(key.wrapping_add(1).max(1), Vec::new()).await;
    (refused, wrong_key)
}

/// A peer that was lost and comes back with late figures claiming a
/// million arrivals of a second whose share was a hundred is refused, and
/// one naming a run it was not given is refused at once: the report keeps
/// the plan's count, the honest agent's figures are exact, and the refusal
/// is named.
#[test]
fn late_figures_beyond_the_share_are_refused() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("late-beyond");
    let url = format!("http://{addr}/");
    let mut c = coordinator_with(&out, &["--url", &url, "--rate", "200", "--duration", "3s"]);
    let control = control_url(&mut c);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let attack = rt.spawn(hostile(control.clone()));
    let _honest = start_agent(&control, "127.0.0.2");
    let (refused, wrong_key) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), attack).await })
        .expect("the hostile peer was assigned and answered")
        .expect("task");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("late_beyond_share"),
        "{refused:?}"
    );
    assert_eq!(
        wrong_key.code(),
        tonic::Code::FailedPrecondition,
        "{wrong_key:?}"
    );
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{output}");
    let r = read_report(&out);
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 600, "{t}");
    assert_eq!(
        u(&t["sent"]) + u(&t["unsent"]["total"]) + u(&t["unreported"]),
        600,
        "{t}"
    );
    let agents = r["agents"].as_array().expect("agents");
    let honest = agents
        .iter()
        .find(|a| a["id"] == "127.0.0.2")
        .expect("honest agent");
    let hostile = agents
        .iter()
        .find(|a| a["id"] == "hostile-late")
        .expect("hostile agent");
    assert_eq!(u(&honest["sent"]), u(&honest["intended"]), "{honest}");
    assert_eq!(u(&t["sent"]), u(&honest["sent"]), "{t}");
    assert_eq!(u(&honest["intended"]) + u(&hostile["intended"]), 600);
    assert_eq!(u(&hostile["sent"]), 0, "{hostile}");
    let named = r["verdicts"].as_array().expect("verdicts").iter().any(|v| {
        v["code"] == "PROTOCOL_VIOLATION"
            && v["message"]
                .as_str()
                .is_some_and(|m| m.contains("hostile-late") && m.contains("late_beyond_share"))
    });
    assert!(named, "{output}");
}

/// In a flow scenario the unit is the flow: an agent killed mid-run leaves
/// flows of unknown fate, booked `unreported` flows, so that `intended ==
/// started + unsent.total + unreported` holds for the flows as for the
/// totals; the text report's flows line and `compare` show them.
#[test]
fn a_killed_agents_flows_of_unknown_fate_are_unreported_flows() {
    let (_testbed, addr) = start_testbed(&[]);
    let dir = temp_dir("flows-unreported");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}"

[[scenario]]
name = "visit"
rate = 100
duration = "6s"

[[scenario.step]]
path = "/"

[[scenario.step]]
path = "/again"
"#
        ),
    );
    let out = dir.join("out");
    let plan = plan.to_string_lossy().to_string();
    let mut c = coordinator_with(&out, &[&plan]);
    let control = control_url(&mut c);
    let _a = start_agent(&control, "127.0.0.2");
    let b = start_agent(&control, "127.0.0.3");
    wait_for_run_second(&mut c, 2);
    signal(b.pid(), libc::SIGKILL);
    let (status, output) = c.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{output}");
    let r = read_report(&out);
    let scenario = &r["scenarios"][0];
    let flows = &scenario["flows"];
    assert_eq!(u(&flows["intended"]), 600, "{flows}");
    assert!(u(&flows["started"]) > 0, "{flows}");
    let unreported = u(&flows["unreported"]);
    assert!(unreported > 0, "{flows}");
    assert_eq!(
        u(&flows["started"]) + u(&flows["unsent"]["total"]) + unreported,
        600,
        "{flows}"
    );
    assert_eq!(u(&scenario["unreported"]), unreported, "{scenario}");
    assert_eq!(u(&r["totals"]["unreported"]), unreported);
    let line = output
        .lines()
        .find(|l| l.contains("flows of visit:"))
        .unwrap_or_else(|| panic!("no flows line:\n{output}"));
    assert!(line.contains(&format!("unreported {unreported}")), "{line}");
    let mut cmd = coordinator();
    cmd.arg("compare")
        .arg(out.join("report.json"))
        .arg(out.join("report.json"));
    let (status, compared) = run(cmd, "compare", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{compared}");
    let row = compared
        .lines()
        .map(|l| l.trim_start_matches("[stdout]").trim())
        .find(|l| l.starts_with("unreported  "))
        .unwrap_or_else(|| panic!("no unreported row:\n{compared}"));
    assert!(row.contains(&unreported.to_string()), "{row}");
}

/// A grace period past the bound is refused at the start, naming the flag
/// and the limit.
#[test]
fn an_agent_refuses_a_deliver_grace_past_its_bound() {
    for (grace, says) in [("2h", "at most 1h"), ("500000000years", "--deliver-grace")] {
        let mut a = agent();
        a.args(["--coordinator", "http://127.0.0.1:9", "--token", "t"])
            .args(["--deliver-grace", grace]);
        let (status, output) = run(a, "agent", Duration::from_secs(30));
        assert_eq!(status.code(), Some(2), "{grace}: {output}");
        assert!(
            output.contains("--deliver-grace") && output.contains(says),
            "{grace}: {output}"
        );
        assert!(!output.contains("panicked"), "{grace}: {output}");
    }
}
