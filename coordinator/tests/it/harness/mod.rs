//! In-process fleet harness: the coordinator's real tonic service and fleet
//! actor, and scripted fake agents that speak the real protocol over
//! in-memory `tokio::io::duplex` pipes — no processes, no sockets, so the
//! tests can run on paused time.
//!
//! Tests run on tokio's current-thread runtime, so every task (server,
//! service, agents) runs on the test's thread; a panic hook records panics
//! per thread, and [`Fleet::finish`] fails the test if any task panicked.

#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use loadfleet_coordinator::console::Console;
use loadfleet_coordinator::fleet::{self, ControlService, FleetEvent, RunResult, RunSpec};
use loadfleet_coordinator::plan::Shares;
use loadfleet_proto::v1::{
    self, agent_message, control_client::ControlClient, control_server::ControlServer,
    coordinator_message,
};
use loadfleet_proto::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Endpoint, Server};

pub(crate) const TOKEN: &str = "harness-token";

thread_local! {
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records every panic on this thread (tokio catches those of spawned tasks,
/// which would otherwise pass unseen), then lets the default hook print it.
fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.borrow_mut().push(info.to_string()));
            previous(info);
        }));
    });
}

/// A plan small enough to reason about: one open scenario of 10 req/s for 2 s.
pub(crate) fn spec(expect_agents: usize) -> RunSpec {
    let scenario = v1::ScenarioAssignment {
        name: "default".into(),
        duration_ns: 2_000_000_000,
        model: Some(v1::scenario_assignment::Model::Open(v1::FleetSchedule {
            stages: vec![v1::Stage {
                duration_ns: 2_000_000_000,
                from_rps: 10.0,
                to_rps: 10.0,
            }],
            process: v1::ArrivalProcess::Uniform as i32,
            seed: 1,
        })),
        ..Default::default()
    };
    RunSpec {
        scenarios: vec![scenario],
        shares: Shares::default(),
        duration: Duration::from_secs(2),
        drain: Duration::from_secs(1),
        max_in_flight: 100,
        max_lag: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        connections: 1,
        max_connections: 1,
        interval: Duration::from_secs(1),
        expect_agents,
        min_agents: expect_agents,
        agent_timeout: Duration::from_secs(5),
        repeats: 1,
        on_agent_loss: loadfleet_coordinator::plan::OnAgentLoss::Continue,
        protocol: loadfleet_proto::vocab::HttpProtocol::Http1,
        tls: None,
    }
}

/// A running coordinator: the tonic server over duplex pipes, and the fleet
/// actor whose results the test awaits.
pub(crate) struct Fleet {
    connections: mpsc::Sender<Result<DuplexStream, std::io::Error>>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    actor: JoinHandle<Vec<RunResult>>,
    agents: Vec<JoinHandle<()>>,
}

impl Fleet {
    /// Starts the service and the actor; `stop` plays the user's Ctrl-C.
    pub(crate) fn start(spec: RunSpec, stop: impl Future<Output = ()> + Send + 'static) -> Self {
        watch_panics();
        let (events_tx, events_rx) = mpsc::channel::<FleetEvent>(4096);
        let (connections, incoming) = mpsc::channel(16);
        let server = tokio::spawn(
            Server::builder()
                .add_service(ControlServer::new(ControlService::new(
                    TOKEN.into(),
                    events_tx,
                )))
                .serve_with_incoming(ReceiverStream::new(incoming)),
        );
        let outputs = fleet::Outputs {
            progress: Box::new(|_| {}),
            sink: None,
            console: Console::captured(),
        };
        let actor = tokio::spawn(fleet::run_with(spec, events_rx, stop, outputs));
        Fleet {
            connections,
            server,
            actor,
            agents: Vec::new(),
        }
    }

    /// Connects a fake agent on its own connection and, if its script says
    /// hello, waits until the fleet welcomed it, so join order is the order
    /// of these calls.
    pub(crate) async fn join(&mut self, script: Script) -> Log {
        let log = Log::default();
        let connections = self.connections.clone();
        let channel = Endpoint::from_static("http://fleet.harness")
            .connect_with_connector(tower::service_fn(move |_| {
                let connections = connections.clone();
                async move {
                    let (client, server) = tokio::io::duplex(1 << 20);
                    connections
                        .send(Ok(server))
                        .await
                        .map_err(|_| std::io::Error::other("the harness server is gone"))?;
                    Ok::<_, std::io::Error>(TokioIo::new(client))
                }
            }))
            .await
            .expect("connect over duplex");
        let (welcomed_tx, welcomed) = oneshot::channel();
        let says_hello = script.hello;
        self.agents.push(tokio::spawn(agent(
            ControlClient::new(channel),
            script,
            log.clone(),
            welcomed_tx,
        )));
        if says_hello {
            welcomed.await.expect("the fleet welcomed the agent");
        }
        log
    }

    /// Waits for the fleet's results (bounded, so a hang fails the test),
    /// then checks that no server, service or agent task panicked.
    pub(crate) async fn finish(self) -> Vec<RunResult> {
        let results = tokio::time::timeout(Duration::from_secs(120), self.actor)
            .await
            .expect("the fleet ended within 120 s")
            .expect("the fleet actor did not panic");
        // The agents end when the fleet drops their streams.
        for a in self.agents {
            tokio::time::timeout(Duration::from_secs(30), a)
                .await
                .expect("agents end once the fleet is done")
                .expect("agent task did not panic");
        }
        if self.server.is_finished() {
            self.server
                .await
                .expect("server task did not panic")
                .expect("server ran");
        } else {
            self.server.abort();
        }
        let panics = PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()));
        assert!(panics.is_empty(), "tasks panicked: {panics:#?}");
        results
    }
}

/// What a fake agent does.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    pub label: String,
    pub cpus: u32,
    /// Whether it says hello at all.
    pub hello: bool,
    /// Whether it answers clock probes.
    pub pong: bool,
    /// What it does with an assignment.
    pub on_assignment: OnAssignment,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnAssignment {
    /// Reports its whole slice, every arrival sent, one snapshot per
    /// interval, then finishes.
    Finish,
    /// Reports its first interval, lets it arrive, then drops its stream.
    Leave,
    /// Reports its first interval, then goes silent (a frozen process)
    /// this long after the common start, keeping its stream open.
    FreezeAfter(Duration),
    /// Like `FreezeAfter`, and once the coordinator has given up on it and
    /// ended its stream, delivers the rest of its slice on a new stream
    /// (`Deliver`, the snapshots, `Finished`).
    FreezeThenDeliver(Duration),
    /// Like `Finish`, but first sends this many extra empty snapshots as
    /// fast as it can.
    Flood(usize),
}

impl Script {
    pub(crate) fn new(label: &str) -> Self {
        Script {
            label: label.into(),
            cpus: 1,
            hello: true,
            pong: true,
            on_assignment: OnAssignment::Finish,
        }
    }
}

/// What one fake agent saw, shared with the test.
#[derive(Clone, Default, Debug)]
pub(crate) struct Log(Arc<Mutex<Seen>>);

#[derive(Default, Debug)]
pub(crate) struct Seen {
    pub welcome: Option<v1::Welcome>,
    pub pings: usize,
    pub assignments: Vec<v1::Assignment>,
    pub stops: Vec<String>,
    /// When each heartbeat from the coordinator arrived.
    pub heartbeats: Vec<Instant>,
    /// How the session ended, if the service refused it.
    pub refused: Option<tonic::Status>,
    /// Each delivery of its last figures: the `snapshots_merged` the
    /// coordinator confirmed, or `None` when it did not.
    pub deliveries: Vec<Option<u64>>,
}

impl Log {
    pub(crate) fn get(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().expect("log lock")
    }
    pub(crate) fn assignments(&self) -> Vec<v1::Assignment> {
        self.get().assignments.clone()
    }
}

fn send(kind: agent_message::Kind) -> v1::AgentMessage {
    v1::AgentMessage { kind: Some(kind) }
}

/// What an honest agent reports intended (and sent) for its slice of the
/// assignment, per scenario and interval: the same walk the real agent's
/// workers make.
pub(crate) fn honest_counts(a: &v1::Assignment) -> Vec<(u32, u64, u64)> {
    use loadfleet_proto::partition::{AgentSlice, Interleave};
    use loadfleet_proto::schedule::ArrivalSchedule;
    let interleave = Interleave::new(&a.weights).expect("weights");
    let mut out = Vec::new();
    for (i, sc) in a.scenarios.iter().enumerate() {
        let Some(v1::scenario_assignment::Model::Open(p)) = &sc.model else {
            continue;
        };
        let schedule = ArrivalSchedule::from_proto(p).expect("schedule");
        let slice = AgentSlice::new(&schedule, &interleave, a.agent_index as usize).expect("slice");
        let mut per: std::collections::BTreeMap<u64, u64> = Default::default();
        for t in slice.arrivals() {
            *per.entry((sc.start_offset_ns + t) / a.interval_ns)
                .or_default() += 1;
        }
        out.extend(per.into_iter().map(|(iv, n)| (i as u32, iv, n)));
    }
    out
}

fn snapshot(scenario: u32, interval: u64, n: u64) -> v1::Snapshot {
    v1::Snapshot {
        scenario,
        interval_index: interval,
        intended: n,
        sent: n,
        ..Default::default()
    }
}

/// A scripted agent: the real session protocol, its answers chosen by the
/// script. Its clock runs 1 s ahead of the coordinator's, as a distinct
/// host's would.
async fn agent(
    mut client: ControlClient<tonic::transport::Channel>,
    script: Script,
    log: Log,
    welcomed: oneshot::Sender<()>,
) {
    let epoch = Instant::now();
    let clock = move || epoch.elapsed().as_nanos() as u64 + 1_000_000_000;
    let (out, rx) = mpsc::channel(64);
    if script.hello {
        let hello = v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            agent_id: format!("fake-{}", script.label),
            host: "harness".into(),
            cpus: script.cpus,
            label: script.label.clone(),
            ..Default::default()
        };
        out.send(send(agent_message::Kind::Hello(hello)))
            .await
            .expect("queue hello");
    }
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    let meta = request.metadata_mut();
    meta.insert(
        PROTOCOL_HEADER,
        PROTOCOL_VERSION.to_string().parse().expect("version"),
    );
    meta.insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("token"),
    );
    let mut inbound = match client.session(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            log.get().refused = Some(status);
            return;
        }
    };
    let mut welcomed = Some(welcomed);
    // Snapshot sequence number of the current run, as a real agent keeps it.
    let mut seq = 0u64;
    // Silent from this instant on (FreezeAfter), on the coordinator's clock.
    let mut frozen_from: Option<Instant> = None;
    // What it did not report before it froze, for FreezeThenDeliver.
    let mut rest: Vec<(u32, u64, u64)> = Vec::new();
    while let Ok(Some(m)) = inbound.message().await {
        if frozen_from.is_some_and(|f| Instant::now() >= f) {
            // Frozen: it says nothing more and ignores what comes, until
            // the coordinator ends the stream.
            while let Ok(Some(_)) = inbound.message().await {}
            if let OnAssignment::FreezeThenDeliver(_) = script.on_assignment {
                let merged = deliver(&mut client, &log, &rest, seq).await;
                log.get().deliveries.push(merged);
            }
            return;
        }
        let reply = match m.kind {
            Some(coordinator_message::Kind::Welcome(w)) => {
                log.get().welcome = Some(w);
                if let Some(w) = welcomed.take() {
                    let _ = w.send(());
                }
                None
            }
            Some(coordinator_message::Kind::Ping(p)) => {
                log.get().pings += 1;
                script.pong.then(|| {
                    let t = clock();
                    agent_message::Kind::Pong(v1::Pong {
                        seq: p.seq,
                        coordinator_send_ns: p.coordinator_send_ns,
                        agent_recv_ns: t,
                        agent_send_ns: t,
                    })
                })
            }
            Some(coordinator_message::Kind::Heartbeat(_)) => {
                log.get().heartbeats.push(Instant::now());
                Some(agent_message::Kind::Heartbeat(v1::Heartbeat {
                    now_ns: clock(),
                    ..Default::default()
                }))
            }
            Some(coordinator_message::Kind::Stop(s)) => {
                log.get().stops.push(s.reason);
                Some(agent_message::Kind::Finished(v1::Finished {
                    cut_short: true,
                    snapshots: seq,
                    ..Default::default()
                }))
            }
            Some(coordinator_message::Kind::Assignment(a)) => {
                let counts = honest_counts(&a);
                seq = 0;
                // Its clock runs 1 s ahead of the coordinator's.
                let start =
                    epoch + Duration::from_nanos(a.start_at_agent_ns.saturating_sub(1_000_000_000));
                log.get().assignments.push(a);
                let first: Vec<_> = counts.iter().filter(|c| c.1 == 0).collect();
                rest = counts.iter().filter(|c| c.1 > 0).copied().collect();
                let to_send: Vec<_> = match script.on_assignment {
                    OnAssignment::Finish | OnAssignment::Flood(_) => counts.iter().collect(),
                    _ => first,
                };
                if let OnAssignment::Flood(n) = script.on_assignment {
                    for _ in 0..n {
                        seq += 1;
                        let s = v1::Snapshot {
                            seq,
                            ..snapshot(0, 0, 0)
                        };
                        if out
                            .send(send(agent_message::Kind::Snapshot(s)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                for &&(sc, iv, n) in &to_send {
                    seq += 1;
                    let s = v1::Snapshot {
                        seq,
                        ..snapshot(sc, iv, n)
                    };
                    if out
                        .send(send(agent_message::Kind::Snapshot(s)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                match script.on_assignment {
                    OnAssignment::Leave => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return;
                    }
                    OnAssignment::FreezeAfter(d) | OnAssignment::FreezeThenDeliver(d) => {
                        frozen_from = Some(start + d);
                        None
                    }
                    OnAssignment::Finish | OnAssignment::Flood(_) => {
                        Some(agent_message::Kind::Finished(v1::Finished {
                            snapshots: seq,
                            ..Default::default()
                        }))
                    }
                }
            }
            Some(coordinator_message::Kind::Takeover(_))
            | Some(coordinator_message::Kind::Standby(_))
            | None => None,
        };
        if let Some(kind) = reply {
            if out.send(send(kind)).await.is_err() {
                return;
            }
        }
    }
}

/// Delivers `rest` (scenario, interval, arrivals) as a lost agent does:
/// `Deliver` naming its place and run, the snapshots numbered on from
/// `seq`, then `Finished`. Returns what the coordinator confirmed.
async fn deliver(
    client: &mut ControlClient<tonic::transport::Channel>,
    log: &Log,
    rest: &[(u32, u64, u64)],
    mut seq: u64,
) -> Option<u64> {
    let (index, key) = {
        let seen = log.get();
        (
            seen.welcome.as_ref()?.agent_index,
            seen.assignments.last()?.run_key,
        )
    };
    let (out, rx) = mpsc::channel(rest.len() + 2);
    let _ = out.try_send(send(agent_message::Kind::Deliver(v1::Deliver {
        protocol_version: PROTOCOL_VERSION,
        agent_id: "late".into(),
        agent_index: index,
        run_key: key,
    })));
    for &(sc, iv, n) in rest {
        seq += 1;
        let s = v1::Snapshot {
            seq,
            ..snapshot(sc, iv, n)
        };
        let _ = out.try_send(send(agent_message::Kind::Snapshot(s)));
    }
    let _ = out.try_send(send(agent_message::Kind::Finished(v1::Finished {
        cut_short: true,
        snapshots: seq,
        ..Default::default()
    })));
    drop(out);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    let meta = request.metadata_mut();
    meta.insert(
        PROTOCOL_HEADER,
        PROTOCOL_VERSION.to_string().parse().expect("version"),
    );
    meta.insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("token"),
    );
    let mut inbound = client.session(request).await.ok()?.into_inner();
    while let Ok(Some(m)) = inbound.message().await {
        if let Some(coordinator_message::Kind::Heartbeat(hb)) = m.kind {
            return Some(hb.snapshots_merged);
        }
    }
    None
}
