//! An agent that loses its coordinator mid-run delivers its last figures.
//! A raw coordinator, written here against the generated `Control` trait,
//! welcomes the real agent binary, assigns it a run, confirms its snapshots
//! for a while and then falls silent: the agent's dead-man switch stops it,
//! and it dials again with `Deliver`. What the coordinator heard on both
//! streams must be every snapshot of the run, once each by its sequence
//! number, and their `sent` must be what the target received.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loadfleet_proto::v1::{
    self, agent_message, control_server::Control, control_server::ControlServer,
    coordinator_message, scenario_assignment,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// The agent's place in the fleet and its run's key, as the raw
/// coordinator gives them.
const INDEX: u32 = 7;
const RUN_KEY: u64 = 42;

/// What the raw coordinator heard.
#[derive(Default)]
struct Heard {
    /// Snapshots on the run's stream, by sequence number.
    run: BTreeMap<u64, v1::Snapshot>,
    /// The last sequence number it confirmed there.
    confirmed: u64,
    deliver: Option<v1::Deliver>,
    /// Snapshots delivered after the loss, in the order they came.
    late: Vec<v1::Snapshot>,
    finished: Option<v1::Finished>,
}

struct Raw {
    target: String,
    /// Refuse the delivery, as a coordinator whose run is over does.
    refuse: bool,
    heard: Arc<Mutex<Heard>>,
}

fn say(kind: coordinator_message::Kind) -> Result<v1::CoordinatorMessage, Status> {
    Ok(v1::CoordinatorMessage { kind: Some(kind) })
}

#[tonic::async_trait]
impl Control for Raw {
    type SessionStream = ReceiverStream<Result<v1::CoordinatorMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound.message().await?.and_then(|m| m.kind);
        let (tx, rx) = mpsc::channel(64);
        let heard = self.heard.clone();
        match first {
            Some(agent_message::Kind::Hello(_)) => {
                let assignment = assignment(&self.target);
                tokio::spawn(run_stream(inbound, tx, assignment, heard));
            }
            Some(agent_message::Kind::Deliver(d)) => {
                heard.lock().unwrap().deliver = Some(d);
                if self.refuse {
                    return Err(Status::failed_precondition("the run is over"));
                }
                tokio::spawn(async move {
                    while let Ok(Some(m)) = inbound.message().await {
                        match m.kind {
                            Some(agent_message::Kind::Snapshot(s)) => {
                                heard.lock().unwrap().late.push(s)
                            }
                            Some(agent_message::Kind::Finished(f)) => {
                                heard.lock().unwrap().finished = Some(f);
                                let hb = v1::Heartbeat {
                                    now_ns: 0,
                                    snapshots_merged: f.snapshots,
                                };
                                let _ =
                                    tx.send(say(coordinator_message::Kind::Heartbeat(hb))).await;
                                return;
                            }
                            _ => {}
                        }
                    }
                });
            }
            _ => return Err(Status::invalid_argument("a hello or a delivery first")),
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The run's stream: welcome, assignment, then heartbeats confirming the
/// snapshots for 1.5 s, then silence (the stream stays open, as a stalled
/// coordinator's does).
async fn run_stream(
    mut inbound: Streaming<v1::AgentMessage>,
    tx: mpsc::Sender<Result<v1::CoordinatorMessage, Status>>,
    assignment: v1::Assignment,
    heard: Arc<Mutex<Heard>>,
) {
    let welcome = v1::Welcome {
        agent_index: INDEX,
        dead_man_secs: 1,
    };
    let _ = tx
        .send(say(coordinator_message::Kind::Welcome(welcome)))
        .await;
    let _ = tx
        .send(say(coordinator_message::Kind::Assignment(assignment)))
        .await;
    let silent_from = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut beat = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(v1::AgentMessage { kind: Some(agent_message::Kind::Snapshot(s)) })) => {
                    heard.lock().unwrap().run.insert(s.seq, s);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            },
            _ = beat.tick(), if tokio::time::Instant::now() < silent_from => {
                let confirmed = {
                    let mut h = heard.lock().unwrap();
                    h.confirmed = h.run.keys().next_back().copied().unwrap_or(0);
                    h.confirmed
                };
                let hb = v1::Heartbeat { now_ns: 0, snapshots_merged: confirmed };
                let _ = tx.send(say(coordinator_message::Kind::Heartbeat(hb))).await;
            }
        }
    }
}

/// 40 req/s for 5 s at `target`, from half a second after the agent began.
fn assignment(target: &str) -> v1::Assignment {
    v1::Assignment {
        weights: vec![1],
        agent_index: 0,
        start_at_agent_ns: 500_000_000,
        max_in_flight: 10,
        max_lag_ns: 1_000_000_000,
        timeout_ns: 2_000_000_000,
        drain_ns: 1_000_000_000,
        connections: 2,
        interval_ns: 1_000_000_000,
        run_key: RUN_KEY,
        scenarios: vec![v1::ScenarioAssignment {
            name: "s".into(),
            duration_ns: 5_000_000_000,
            model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                stages: vec![v1::Stage {
                    duration_ns: 5_000_000_000,
                    from_rps: 40.0,
                    to_rps: 40.0,
                }],
                process: v1::ArrivalProcess::Uniform as i32,
                seed: 1,
            })),
            requests: vec![v1::RequestTemplate {
                method: "GET".into(),
                url: target.into(),
                weight: 1,
                ..Default::default()
            }],
            seed: 1,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A target that answers every request with an empty 200 and counts them.
async fn target() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let (mut buf, mut seen) = (vec![0u8; 8192], Vec::new());
                while let Ok(n) = sock.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        counted.fetch_add(1, Ordering::Relaxed);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if sock.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, count)
}

/// Runs the real agent against a raw coordinator; returns its exit status,
/// its stderr, what the coordinator heard and what the target received.
async fn run(refuse: bool) -> (Option<i32>, String, Heard, u64) {
    let (target_addr, received) = target().await;
    let heard = Arc::new(Mutex::new(Heard::default()));
    let raw = Raw {
        target: format!("http://{target_addr}/"),
        refuse,
        heard: heard.clone(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ControlServer::new(raw))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadfleet-agent"))
        .args(["--coordinator", &format!("http://{addr}"), "--token", "t"])
        .args(["--id", "late", "--workers", "1", "--connect-timeout", "10s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the agent ended within 30 s, well before its grace period")
        .unwrap();
    server.abort();
    let heard = std::mem::take(&mut *heard.lock().unwrap());
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        heard,
        received.load(Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_coordinators_agent_delivers_every_snapshot_it_had_not_confirmed() {
    let (code, stderr, heard, received) = run(false).await;
    assert_eq!(code, Some(4), "the dead-man switch: {stderr}");
    assert!(stderr.contains("lost the coordinator"), "{stderr}");
    assert!(
        stderr.contains("delivered the run's last figures"),
        "{stderr}"
    );
    let d = heard.deliver.clone().expect("a delivery");
    assert_eq!((d.agent_index, d.run_key), (INDEX, RUN_KEY), "{d:?}");
    let finished = heard.finished.expect("Finished delivered");
    assert!(finished.cut_short, "{finished:?}");
    // The delivery starts no later than just after what was confirmed, and
    // its numbers run on without a gap to Finished.
    let late: Vec<u64> = heard.late.iter().map(|s| s.seq).collect();
    assert!(!late.is_empty());
    assert!(
        late[0] <= heard.confirmed + 1,
        "{late:?} after {}",
        heard.confirmed
    );
    assert!(late.windows(2).all(|w| w[1] == w[0] + 1), "{late:?}");
    assert_eq!(late.last().copied(), Some(finished.snapshots));
    // Both streams together: every snapshot once, and what they say was
    // sent is what the target received, though the agent stopped mid-run.
    let mut all = heard.run.clone();
    for s in &heard.late {
        all.insert(s.seq, s.clone());
    }
    let seqs: Vec<u64> = all.keys().copied().collect();
    assert_eq!(seqs, (1..=finished.snapshots).collect::<Vec<u64>>());
    let sent: u64 = all.values().map(|s| s.sent).sum();
    let intended: u64 = all.values().map(|s| s.intended).sum();
    assert!(sent > 40, "it sent for more than a second: {sent}");
    assert!(
        intended < 200,
        "it stopped before the schedule's end: {intended}"
    );
    assert_eq!(sent, received, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_is_not_tried_again() {
    let started = std::time::Instant::now();
    let (code, stderr, heard, _) = run(true).await;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(heard.deliver.is_some(), "it tried once");
    assert!(
        stderr.contains("refused the run's last figures: the run is over"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "it gave up at the refusal, not after --deliver-grace: {:?}",
        started.elapsed()
    );
}
