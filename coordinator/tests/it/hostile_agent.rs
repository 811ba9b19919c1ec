//! Hostile agents against a real coordinator process, next to one real
//! honest agent: raw tonic clients that speak the real protocol (hello,
//! clock probes, heartbeats) and, once assigned, each send one kind of
//! hostile snapshot. Two more try hellos out of bounds before the run. The
//! coordinator must not panic, its peak RSS (VmHWM) must grow by less than
//! 50 MiB, the honest agent's figures must be exact, and each refusal must
//! be named in the report.

use crate::common;

use std::time::Duration;

use common::*;
use loadfleet_proto::v1::{
    self, agent_message, control_client::ControlClient, coordinator_message,
};
use loadfleet_proto::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const TOKEN: &str = "hostile";
const RATE: u64 = 200;
const SECS: u64 = 3;

/// Peak resident memory of a process, in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// A V2 histogram with the given header, as a hostile agent builds it
/// (the coordinator must read nothing past the header).
fn histogram(payload_len: u32, digits: u32, highest: u64) -> Vec<u8> {
    let mut inner = Vec::new();
    inner.extend_from_slice(&0x1c84_9313u32.to_be_bytes());
    inner.extend_from_slice(&payload_len.to_be_bytes());
    inner.extend_from_slice(&0u32.to_be_bytes());
    inner.extend_from_slice(&digits.to_be_bytes());
    inner.extend_from_slice(&1u64.to_be_bytes());
    inner.extend_from_slice(&highest.to_be_bytes());
    inner.extend_from_slice(&1.0f64.to_be_bytes());
    inner
}

/// What one hostile agent does once it has its assignment.
#[derive(Clone, Copy, Debug)]
enum Attack {
    Bomb,
    HugeRange,
    UnknownClass,
    FarInterval,
    NearMax,
    Duplicate,
    AfterLost,
    FinishedMismatch,
    /// Per-request figures for a request the scenario does not have.
    UnknownRequest,
    /// Per-request figures with a count past any agent's.
    RequestOverBound,
    /// Sends a snapshot as soon as it is welcomed, before any run.
    OutOfPhase,
}

impl Attack {
    fn id(self) -> String {
        format!("hostile-{self:?}").to_lowercase()
    }

    /// The refusal the report must name for it.
    fn named(self) -> &'static str {
        match self {
            Attack::Bomb => "corrupt_histogram",
            Attack::HugeRange => "corrupt_histogram",
            Attack::UnknownClass => "unknown_class",
            Attack::FarInterval => "interval_out_of_range",
            Attack::NearMax => "count_out_of_range",
            Attack::Duplicate => "duplicate",
            Attack::AfterLost => "sequence_gap",
            Attack::FinishedMismatch => "finished_mismatch",
            Attack::UnknownRequest => "request_out_of_range",
            Attack::RequestOverBound => "count_out_of_range",
            Attack::OutOfPhase => "out_of_phase",
        }
    }

    fn snapshots(self) -> Vec<v1::Snapshot> {
        let one = |seq| v1::Snapshot {
            seq,
            intended: 1,
            sent: 1,
            completed: 1,
            status: [(200, 1)].into(),
            ..Default::default()
        };
        let with_latency = |bytes: Vec<u8>| {
            let mut s = one(1);
            s.latency.insert("2xx".into(), bytes);
            vec![s]
        };
        match self {
            Attack::Bomb => {
                let bomb = histogram(1 << 31, 3, 2048);
                assert!(bomb.len() <= 48, "the bomb is {} bytes", bomb.len());
                with_latency(bomb)
            }
            Attack::HugeRange => with_latency(histogram(0, 5, 1 << 62)),
            Attack::UnknownClass => {
                let mut s = one(1);
                s.latency.insert("class-0000001".into(), Vec::new());
                vec![s]
            }
            Attack::FarInterval => vec![v1::Snapshot {
                interval_index: 1 << 40,
                ..one(1)
            }],
            Attack::NearMax => vec![v1::Snapshot {
                intended: u64::MAX - 1,
                sent: u64::MAX - 1,
                ..one(1)
            }],
            // One good empty snapshot, then the same number again.
            Attack::Duplicate => {
                let empty = v1::Snapshot {
                    seq: 1,
                    ..Default::default()
                };
                vec![
                    empty.clone(),
                    v1::Snapshot {
                        intended: 1,
                        sent: 1,
                        ..empty
                    },
                ]
            }
            // The run's one request is request 0.
            Attack::UnknownRequest => vec![v1::Snapshot {
                requests: vec![v1::RequestFigures {
                    request: 7,
                    completed: 1,
                    status: [(200, 1)].into(),
                    ..Default::default()
                }],
                ..one(1)
            }],
            Attack::RequestOverBound => vec![v1::Snapshot {
                requests: vec![v1::RequestFigures {
                    request: 0,
                    completed: u64::MAX - 1,
                    ..Default::default()
                }],
                ..one(1)
            }],
            // A gap (dropped), then a hundred snapshots after being lost.
            Attack::AfterLost => (5..105).map(one).collect(),
            Attack::FinishedMismatch | Attack::OutOfPhase => vec![v1::Snapshot {
                seq: 1,
                ..Default::default()
            }],
        }
    }
}

fn message(kind: agent_message::Kind) -> v1::AgentMessage {
    v1::AgentMessage { kind: Some(kind) }
}

fn request(
    rx: mpsc::Receiver<v1::AgentMessage>,
) -> tonic::Request<ReceiverStream<v1::AgentMessage>> {
    let mut r = tonic::Request::new(ReceiverStream::new(rx));
    r.metadata_mut().insert(
        PROTOCOL_HEADER,
        PROTOCOL_VERSION.to_string().parse().unwrap(),
    );
    r.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    r
}

/// A hello out of bounds: the coordinator refuses it and names the field.
async fn bad_hello(url: &str, hello: v1::Hello, field: &str) {
    let mut client = ControlClient::connect(url.to_string())
        .await
        .expect("connect")
        .max_encoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(4);
    tx.send(message(agent_message::Kind::Hello(hello)))
        .await
        .unwrap();
    let status = client
        .session(request(rx))
        .await
        .expect_err("the hello is refused");
    assert!(
        status.message().contains(field) && status.message().contains("protocol violation"),
        "{status:?}"
    );
}

/// A hostile agent: joins, answers probes, heartbeats, and attacks once
/// assigned. Returns when the coordinator ends its stream.
async fn hostile(url: String, attack: Attack, attacked: mpsc::Sender<Attack>) {
    let mut client = ControlClient::connect(url).await.expect("connect");
    let (tx, rx) = mpsc::channel(256);
    tx.send(message(agent_message::Kind::Hello(v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        agent_id: attack.id(),
        host: "hostile".into(),
        cpus: 1,
        ..Default::default()
    })))
    .await
    .unwrap();
    let mut inbound = client
        .session(request(rx))
        .await
        .expect("joined")
        .into_inner();
    let beat = tx.clone();
    let mut tx = Some(tx);
    let mut heartbeat = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let hb = message(agent_message::Kind::Heartbeat(v1::Heartbeat {
                now_ns: 1,
                ..Default::default()
            }));
            if beat.send(hb).await.is_err() {
                return;
            }
        }
    });
    while let Ok(Some(m)) = inbound.message().await {
        match m.kind {
            Some(coordinator_message::Kind::Welcome(_)) if matches!(attack, Attack::OutOfPhase) => {
                for s in attack.snapshots() {
                    if let Some(tx) = &tx {
                        let _ = tx.send(message(agent_message::Kind::Snapshot(s))).await;
                    }
                }
                let _ = attacked.send(attack).await;
            }
            Some(coordinator_message::Kind::Ping(p)) => {
                let pong = v1::Pong {
                    seq: p.seq,
                    coordinator_send_ns: p.coordinator_send_ns,
                    agent_recv_ns: p.coordinator_send_ns,
                    agent_send_ns: p.coordinator_send_ns,
                };
                if let Some(tx) = &tx {
                    let _ = tx.send(message(agent_message::Kind::Pong(pong))).await;
                }
            }
            Some(coordinator_message::Kind::Assignment(_)) => {
                for s in attack.snapshots() {
                    if let Some(tx) = &tx {
                        let _ = tx.send(message(agent_message::Kind::Snapshot(s))).await;
                    }
                }
                if let Attack::FinishedMismatch = attack {
                    let f = v1::Finished {
                        snapshots: 5,
                        ..Default::default()
                    };
                    if let Some(tx) = &tx {
                        let _ = tx.send(message(agent_message::Kind::Finished(f))).await;
                    }
                }
                let _ = attacked.send(attack).await;
                if let Attack::Duplicate = attack {
                    // Leaves: lost as any agent whose stream ends. It
                    // half-closes rather than drops the call, so the
                    // snapshots still queued in the channel reach the
                    // coordinator before the end does; dropping the call
                    // could reset the stream with them unsent.
                    heartbeat.abort();
                    let _ = (&mut heartbeat).await;
                    tx = None;
                }
            }
            _ => {}
        }
    }
    heartbeat.abort();
}

#[test]
fn hostile_agents_cannot_crash_bloat_or_skew_the_coordinator() {
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("hostile-agent");
    let attacks = [
        Attack::Bomb,
        Attack::HugeRange,
        Attack::UnknownClass,
        Attack::FarInterval,
        Attack::NearMax,
        Attack::Duplicate,
        Attack::AfterLost,
        Attack::FinishedMismatch,
        Attack::UnknownRequest,
        Attack::RequestOverBound,
    ];
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--expect-agents", &(attacks.len() + 1).to_string()])
        .args(["--agent-timeout", "60s", "--on-agent-loss", "continue"])
        .args(["--url", &format!("http://{addr}/")])
        .args([
            "--rate",
            &RATE.to_string(),
            "--duration",
            &format!("{SECS}s"),
        ])
        .arg("--out")
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    let addr_ctl = line
        .split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("address");
    let url = format!("http://{addr_ctl}");
    let pid = c.pid();
    let before = vm_hwm_kib(pid);

    let rt = tokio::runtime::Runtime::new().unwrap();
    // Hellos out of bounds, before anyone joins: refused, nothing stored.
    rt.block_on(bad_hello(
        &url,
        v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            agent_id: "x".repeat(1 << 20),
            ..Default::default()
        },
        "hello.agent_id",
    ));
    rt.block_on(bad_hello(
        &url,
        v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            agent_id: "many-cpus".into(),
            // 2^32 does not fit the wire's uint32: its largest value.
            cpus: u32::MAX,
            ..Default::default()
        },
        "hello.cpus",
    ));
    let after_hellos = vm_hwm_kib(pid);
    // A snapshot while the fleet gathers: dropped before it has a share (its
    // place is taken by the next agent).
    let (early_tx, mut early_rx) = mpsc::channel(1);
    let early = rt.spawn(hostile(url.clone(), Attack::OutOfPhase, early_tx));
    rt.block_on(async {
        early_rx.recv().await.expect("welcomed");
        tokio::time::timeout(Duration::from_secs(20), early)
            .await
            .expect("the coordinator ends the early agent's stream")
            .expect("task")
    });

    let mut honest = agent();
    honest.args(["--coordinator", &url, "--token", TOKEN, "--id", "honest"]);
    let _honest = Proc::spawn(honest, "honest agent");
    let (attacked, mut done) = mpsc::channel(16);
    let tasks: Vec<_> = attacks
        .iter()
        .map(|&a| rt.spawn(hostile(url.clone(), a, attacked.clone())))
        .collect();
    // Peak RSS once every attack was sent and the coordinator has read it:
    // it says so on stderr when it drops an agent that broke the protocol,
    // or loses the one that left after its duplicate. The run is still going
    // (it lasts SECS after the probes).
    let mut sent = Vec::new();
    rt.block_on(async {
        while sent.len() < attacks.len() {
            let a = tokio::time::timeout(Duration::from_secs(60), done.recv())
                .await
                .expect("every hostile agent gets an assignment")
                .expect("open");
            sent.push(a);
        }
    });
    let read: Vec<String> = attacks
        .iter()
        .map(|a| match a {
            Attack::Duplicate => format!("agent {} lost", a.id()),
            _ => format!("agent {} broke the protocol", a.id()),
        })
        .collect();
    c.wait_for_lines(&read, Duration::from_secs(30));
    let after_attacks = vm_hwm_kib(pid);
    let (status, output) = c.wait(Duration::from_secs(60));
    for t in tasks {
        let _ = rt.block_on(t);
    }
    eprintln!(
        "coordinator VmHWM: {before} KiB at start, {after_hellos} KiB after the hellos, {after_attacks} KiB after the attacks"
    );
    assert!(
        !output.contains("panicked"),
        "the coordinator panicked:\n{output}"
    );
    assert!(
        after_attacks.saturating_sub(before) < 50 * 1024,
        "peak RSS grew from {before} KiB to {after_attacks} KiB:\n{output}"
    );
    let r = read_report(&out);
    // Not killed by a signal, and not a crash: the status the report
    // calls for.
    assert_exit_follows_the_report(status.code(), &r, &output);
    let ctx = format!("report: {r:#}\ncoordinator output:\n{output}");
    let agents = r["agents"].as_array().expect("agents");
    let honest = agents
        .iter()
        .find(|a| a["id"] == "honest")
        .unwrap_or_else(|| panic!("no honest agent: {ctx}"));
    // Exactly the plan: every hostile count was refused, every lost share
    // was booked unsent, and the honest agent sent all of its share.
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), RATE * SECS, "{ctx}");
    assert!(u(&honest["intended"]) > 0, "{ctx}");
    assert_eq!(u(&honest["sent"]), u(&honest["intended"]), "{ctx}");
    assert_eq!(u(&honest["completed"]), u(&honest["sent"]), "{ctx}");
    assert_eq!(u(&t["sent"]), u(&honest["sent"]), "{ctx}");
    assert_eq!(u(&t["completed"]), u(&honest["completed"]), "{ctx}");
    // Nor did any hostile per-request figure reach the request's row.
    let request = &r["scenarios"][0]["requests"][0];
    assert_eq!(u(&request["completed"]), u(&honest["completed"]), "{ctx}");

    let verdicts: Vec<String> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["code"] == "PROTOCOL_VIOLATION")
        .map(|v| v["message"].as_str().unwrap_or_default().to_string())
        .collect();
    eprintln!("PROTOCOL_VIOLATION verdicts:\n{}", verdicts.join("\n"));
    // The two corrupt histograms (Bomb, HugeRange) are missing from the
    // totals, and the report says so as an error.
    let corrupt: Vec<&serde_json::Value> = r["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["code"] == "CORRUPT_SNAPSHOT")
        .collect();
    assert_eq!(corrupt.len(), 1, "one CORRUPT_SNAPSHOT verdict: {ctx}");
    assert_eq!(corrupt[0]["level"], "error", "{ctx}");
    assert!(
        corrupt[0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("2 snapshot(s) could not be decoded")),
        "{ctx}"
    );
    for a in attacks.into_iter().chain([Attack::OutOfPhase]) {
        assert!(
            verdicts
                .iter()
                .any(|m| m.contains(&a.id()) && m.contains(a.named())),
            "no PROTOCOL_VIOLATION naming {} and {}: {verdicts:#?}\n{ctx}",
            a.id(),
            a.named()
        );
    }
}
