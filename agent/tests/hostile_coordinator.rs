//! A hostile coordinator: a raw tonic server, written here against the
//! generated `Control` trait, that speaks the real protocol to the real
//! agent binary (started with `--allow-target`) and sends what no valid
//! plan makes. The agent must refuse each one, tell the coordinator why,
//! and send nothing: a victim listener on another loopback address, outside
//! the allow list, counts every connection it is offered.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loadfleet_proto::v1::{
    self, agent_message, control_server::Control, control_server::ControlServer,
    coordinator_message, scenario_assignment,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// What the raw coordinator says to the one agent that joins, and what it
/// heard back.
struct Script {
    welcome: v1::Welcome,
    assignment: v1::Assignment,
    heard: Arc<Mutex<Vec<agent_message::Kind>>>,
}

struct RawCoordinator(Arc<Script>);

#[tonic::async_trait]
impl Control for RawCoordinator {
    type SessionStream = ReceiverStream<Result<v1::CoordinatorMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let script = self.0.clone();
        tokio::spawn(async move {
            let send = |kind| {
                let tx = tx.clone();
                async move {
                    let _ = tx
                        .send(Ok(v1::CoordinatorMessage { kind: Some(kind) }))
                        .await;
                }
            };
            // Hello first, then the script; every later message is kept.
            let Ok(Some(_hello)) = inbound.message().await else {
                return;
            };
            send(coordinator_message::Kind::Welcome(script.welcome)).await;
            send(coordinator_message::Kind::Assignment(
                script.assignment.clone(),
            ))
            .await;
            let mut beat = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    msg = inbound.message() => match msg {
                        Ok(Some(v1::AgentMessage { kind: Some(kind) })) => {
                            let done = matches!(
                                kind,
                                agent_message::Kind::Finished(_) | agent_message::Kind::Refusal(_)
                            );
                            script.heard.lock().unwrap().push(kind);
                            // A finished run or a refusal ends the session,
                            // as with the real coordinator: close our half.
                            if done {
                                return;
                            }
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => return,
                    },
                    _ = beat.tick() => {
                        send(coordinator_message::Kind::Heartbeat(v1::Heartbeat {
                            now_ns: 0,
                            ..Default::default()
                        })).await;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A listener that counts the connections it is offered (and answers HTTP
/// requests with an empty 200, so an allowed target completes).
struct Counting {
    addr: SocketAddr,
    /// Every peer accepted so far, in accept order.
    peers: Arc<Mutex<Vec<SocketAddr>>>,
    /// Woken at each accept.
    accepted: Arc<Notify>,
    /// This test's own probe connections, not counted.
    probes: Mutex<Vec<SocketAddr>>,
}

impl Counting {
    async fn new(ip: &str) -> Self {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let peers = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(Notify::new());
        let (seen, woken) = (peers.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, peer)) = listener.accept().await {
                seen.lock().unwrap().push(peer);
                woken.notify_waiters();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    // At most a few hundred requests per connection in
                    // these tests; the loop ends when the agent closes it.
                    while let Ok(n) = sock.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                            if sock.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Counting {
            addr,
            peers,
            accepted,
            probes: Mutex::new(Vec::new()),
        }
    }

    /// The connections accepted from anyone but this test's probes, once
    /// every connection made before this call has been accepted: a probe
    /// joins the back of the accept queue, so by the time it is accepted,
    /// so is everything queued ahead of it.
    async fn hits(&self) -> usize {
        let probe = TcpStream::connect(self.addr).await.unwrap();
        let me = probe.local_addr().unwrap();
        self.probes.lock().unwrap().push(me);
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let woken = self.accepted.notified();
                if self.peers.lock().unwrap().contains(&me) {
                    return;
                }
                woken.await;
            }
        })
        .await
        .expect("the probe connection is accepted within 10 s");
        let probes = self.probes.lock().unwrap();
        self.peers
            .lock()
            .unwrap()
            .iter()
            .filter(|p| !probes.contains(p))
            .count()
    }
}

/// A small valid assignment: 20 requests over one second to `url`.
fn assignment(url: &str, data: Option<(&str, &str)>) -> v1::Assignment {
    v1::Assignment {
        weights: vec![1],
        agent_index: 0,
        start_at_agent_ns: 300_000_000,
        max_in_flight: 10,
        max_lag_ns: 1_000_000_000,
        timeout_ns: 2_000_000_000,
        drain_ns: 1_000_000_000,
        connections: 2,
        interval_ns: 1_000_000_000,
        scenarios: vec![v1::ScenarioAssignment {
            name: "s".into(),
            duration_ns: 1_000_000_000,
            model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                stages: vec![v1::Stage {
                    duration_ns: 1_000_000_000,
                    from_rps: 20.0,
                    to_rps: 20.0,
                }],
                process: v1::ArrivalProcess::Uniform as i32,
                seed: 1,
            })),
            requests: vec![v1::RequestTemplate {
                method: "GET".into(),
                url: url.into(),
                weight: 1,
                ..Default::default()
            }],
            data: data.map(|(column, value)| v1::DataTable {
                columns: vec![column.into()],
                rows: vec![v1::DataRow {
                    values: vec![value.into()],
                }],
                random: false,
            }),
            seed: 1,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn welcome() -> v1::Welcome {
    v1::Welcome {
        agent_index: 0,
        dead_man_secs: 3,
    }
}

/// Serves `script` to one real agent and returns its exit status, stderr
/// and every message the coordinator heard.
async fn run_agent(
    welcome: v1::Welcome,
    assignment: v1::Assignment,
    allow: &str,
) -> (Option<i32>, String, Vec<agent_message::Kind>) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Script {
        welcome,
        assignment,
        heard: heard.clone(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ControlServer::new(RawCoordinator(script)))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stop_rx.await;
            }),
    );
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadfleet-agent"))
        .args([
            "--coordinator",
            &format!("http://{addr}"),
            "--token",
            "t",
            "--id",
            "hostile-test",
            "--workers",
            "1",
            "--connect-timeout",
            "10s",
            "--allow-target",
            allow,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the agent ended within 30 s")
        .unwrap();
    let _ = stop_tx.send(());
    let _ = server.await;
    let heard = std::mem::take(&mut *heard.lock().unwrap());
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        heard,
    )
}

fn refusal(heard: &[agent_message::Kind]) -> Option<&str> {
    heard.iter().find_map(|k| match k {
        agent_message::Kind::Refusal(r) => Some(r.reason.as_str()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_assignments_are_refused_and_nothing_is_sent() {
    let allowed_target = Counting::new("127.0.0.2").await;
    let victim_target = Counting::new("127.0.0.3").await;
    let (allowed, victim) = (allowed_target.addr, victim_target.addr);
    let allow = allowed.to_string();
    let good = format!("http://{allowed}/");
    let closed = |clients: f64| {
        let mut a = assignment(&good, None);
        a.scenarios[0].model = Some(scenario_assignment::Model::Closed(v1::ClosedModel {
            stages: vec![v1::Stage {
                duration_ns: 1_000_000_000,
                from_rps: clients,
                to_rps: clients,
            }],
            think_ns: 0,
        }));
        a
    };
    let rate = |rps: f64| {
        let mut a = assignment(&good, None);
        if let Some(scenario_assignment::Model::Open(o)) = &mut a.scenarios[0].model {
            o.stages[0].from_rps = rps;
            o.stages[0].to_rps = rps;
        }
        a
    };
    let at_victim = format!("http://{victim}/?");
    let cases: Vec<(&str, v1::Welcome, v1::Assignment, &str)> = vec![
        (
            "a snapshot every nanosecond",
            welcome(),
            v1::Assignment {
                interval_ns: 1,
                ..assignment(&good, None)
            },
            "interval_ns",
        ),
        (
            "a dead-man window of 11 days",
            v1::Welcome {
                dead_man_secs: 1_000_000,
                ..welcome()
            },
            assignment(&good, None),
            "dead_man_secs",
        ),
        (
            "infinitely many closed clients",
            welcome(),
            closed(f64::INFINITY),
            "scenarios[0].closed.stages[0].from_rps",
        ),
        (
            "a rate of 1e12",
            welcome(),
            rate(1e12),
            "scenarios[0].open.stages[0].from_rps",
        ),
        (
            "a placeholder for the scheme",
            welcome(),
            assignment(
                &format!("{{{{data.u}}}}://{allowed}/"),
                Some(("u", &at_victim)),
            ),
            "no fixed scheme and host",
        ),
        (
            "a placeholder for the host",
            welcome(),
            assignment("http://{{data.h}}/", Some(("h", &victim.to_string()))),
            "no fixed scheme and host",
        ),
        (
            "a placeholder for the port",
            welcome(),
            assignment(
                &format!("http://{}:{{{{data.p}}}}/", allowed.ip()),
                Some(("p", &victim.port().to_string())),
            ),
            "no fixed scheme and host",
        ),
        (
            "a placeholder right after the authority",
            welcome(),
            assignment(
                "http://127.0.0.{{data.x}}/",
                Some(("x", &format!("3:{}", victim.port()))),
            ),
            "no fixed scheme and host",
        ),
        (
            "the victim itself",
            welcome(),
            assignment(&format!("http://{victim}/"), None),
            "is not in this agent's --allow-target list",
        ),
    ];
    for (what, welcome, assignment, named) in cases {
        let (code, stderr, heard) = run_agent(welcome, assignment, &allow).await;
        assert_eq!(code, Some(5), "{what}: exit status; stderr: {stderr}");
        let reason = refusal(&heard).unwrap_or_else(|| panic!("{what}: no refusal in {heard:?}"));
        assert!(reason.contains(named), "{what}: refusal {reason:?}");
        assert!(
            !heard.iter().any(|k| matches!(
                k,
                agent_message::Kind::Snapshot(_) | agent_message::Kind::Finished(_)
            )),
            "{what}: the agent ran something: {heard:?}"
        );
    }
    assert_eq!(victim_target.hits().await, 0, "the victim was hit");
    assert_eq!(
        allowed_target.hits().await,
        0,
        "a refused assignment still sent load"
    );

    // A data value that would name the victim, after a fixed authority,
    // only changes the path: the run goes ahead, to the allowed host only.
    let (code, stderr, heard) = run_agent(
        welcome(),
        assignment(
            &format!("http://{allowed}/{{{{data.p}}}}"),
            Some(("p", &format!("@{victim}/"))),
        ),
        &allow,
    )
    .await;
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(refusal(&heard), None);
    let sent: u64 = heard
        .iter()
        .filter_map(|k| match k {
            agent_message::Kind::Snapshot(s) => Some(s.sent),
            _ => None,
        })
        .sum();
    assert_eq!(sent, 20, "{heard:?}");
    assert!(allowed_target.hits().await > 0);
    assert_eq!(victim_target.hits().await, 0, "the victim was hit");
}
