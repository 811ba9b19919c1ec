//! One swarm agent: a real gRPC session over its own TCP connection, saying
//! what a real agent says — hello, a pong for every ping, heartbeats twice a
//! second, its slice's snapshots just after each interval closes, then
//! finished — and timing what the coordinator does in return.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::bounds::MAX_MESSAGE_BYTES;
use loadfleet_proto::v1::{
    self, agent_message, control_client::ControlClient, coordinator_message,
};
use loadfleet_proto::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use tokio::sync::{mpsc, Mutex, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::payload::Ledger;
use crate::slices::{fleet_key, slice_table, AgentCells, SliceTable};

/// What every agent of the swarm shares.
pub struct Swarm {
    pub coordinator: String,
    pub token: String,
    /// One clock for the whole swarm: every agent's `*_ns` counts from it.
    pub epoch: Instant,
    pub ledger: Ledger,
    /// The slice table of the current assignment, built by the first agent
    /// that receives it.
    tables: Mutex<Option<(String, Arc<SliceTable>)>>,
}

impl Swarm {
    pub fn new(coordinator: String, token: String) -> Self {
        Swarm {
            coordinator,
            token,
            epoch: Instant::now(),
            ledger: Ledger::default(),
            tables: Mutex::new(None),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The slices of `a`, computed once for the whole swarm, off the
    /// runtime's threads.
    async fn table(&self, a: &v1::Assignment) -> anyhow::Result<Arc<SliceTable>> {
        let key = fleet_key(a);
        let mut cached = self.tables.lock().await;
        if let Some((k, t)) = cached.as_ref() {
            if *k == key {
                return Ok(t.clone());
            }
        }
        let owned = a.clone();
        let table = Arc::new(tokio::task::spawn_blocking(move || slice_table(&owned)).await??);
        *cached = Some((key, table.clone()));
        Ok(table)
    }
}

/// What one agent saw, for the summary.
#[derive(Debug, Default)]
pub struct Outcome {
    pub hello_sent: Option<Instant>,
    pub welcomed: Option<Instant>,
    pub assigned: Option<Instant>,
    /// The common start, on the swarm's clock, as this agent was told.
    pub start: Option<Instant>,
    pub finished: Option<Instant>,
    /// Longest time between two coordinator heartbeats, welcome to end.
    pub heartbeat_gap: Duration,
    /// The same, for gaps that began before the common start (gathering
    /// agents, clock probes, assignment).
    pub heartbeat_gap_before_run: Duration,
    /// The same, for gaps that began between the common start and this
    /// agent's finished message.
    pub heartbeat_gap_in_run: Duration,
    /// The same, for gaps that began after this agent finished (the
    /// coordinator waiting for the others, then writing the report).
    pub heartbeat_gap_after_run: Duration,
    pub heartbeats: u64,
    pub snapshots: u64,
    /// The coordinator closed the stream after the run: a clean end.
    pub closed_cleanly: bool,
    pub error: Option<String>,
}

/// The run this agent is playing.
struct Play {
    cells: AgentCells,
    start: Instant,
    interval: Duration,
    intervals: u64,
    scenarios: u32,
    /// Next interval whose snapshots are due.
    next: u64,
}

fn message(kind: agent_message::Kind) -> v1::AgentMessage {
    v1::AgentMessage { kind: Some(kind) }
}

/// Runs agent `index` to the end of its session; never panics, the outcome
/// says what went wrong.
/// `joining` is held until the coordinator answered the hello, so a large
/// swarm joins in bursts rather than all at once.
pub async fn run(
    swarm: Arc<Swarm>,
    index: usize,
    source: Option<IpAddr>,
    joining: Option<OwnedSemaphorePermit>,
) -> Outcome {
    let mut out = Outcome::default();
    if let Err(e) = session(&swarm, index, source, joining, &mut out).await {
        out.error = Some(format!("{e:#}"));
    }
    out
}

async fn session(
    swarm: &Swarm,
    index: usize,
    source: Option<IpAddr>,
    joining: Option<OwnedSemaphorePermit>,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let channel = tonic::transport::Endpoint::from_shared(swarm.coordinator.clone())?
        .local_address(source)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    let mut client = ControlClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel::<v1::AgentMessage>(256);
    tx.send(message(agent_message::Kind::Hello(v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        agent_id: format!("swarm-{index}"),
        host: "swarm".into(),
        host_addresses: Vec::new(),
        cpus: 1,
        label: String::new(),
        version: env!("CARGO_PKG_VERSION").into(),
        source_address: source.map(|ip| ip.to_string()).unwrap_or_default(),
        // Simulated agents hold no streams: nothing to set against clocks
        // or file limits.
        ..Default::default()
    })))
    .await?;
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {}", swarm.token).parse()?);
    request
        .metadata_mut()
        .insert(PROTOCOL_HEADER, PROTOCOL_VERSION.into());
    out.hello_sent = Some(Instant::now());
    let mut inbound = client.session(request).await?.into_inner();
    drop(joining);

    let mut heartbeat = tokio::time::interval(Duration::from_millis(500));
    let mut last_heartbeat: Option<Instant> = None;
    let mut play: Option<Play> = None;
    // Parked far ahead until an assignment sets the first due instant.
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    loop {
        let due = match &play {
            Some(p) if out.finished.is_none() => {
                // Just after the interval closes, as a real agent flushes.
                p.start + p.interval * (p.next as u32 + 1) + Duration::from_millis(5)
            }
            _ => far,
        };
        tokio::select! {
            msg = inbound.message() => {
                let Some(msg) = msg? else {
                    anyhow::ensure!(out.finished.is_some(), "the coordinator closed the stream before the run ended");
                    out.closed_cleanly = true;
                    return Ok(());
                };
                match msg.kind {
                    Some(coordinator_message::Kind::Welcome(_)) => out.welcomed = Some(Instant::now()),
                    Some(coordinator_message::Kind::Ping(p)) => {
                        let recv = swarm.now_ns();
                        tx.send(message(agent_message::Kind::Pong(v1::Pong {
                            seq: p.seq,
                            coordinator_send_ns: p.coordinator_send_ns,
                            agent_recv_ns: recv,
                            agent_send_ns: swarm.now_ns(),
                        }))).await?;
                    }
                    Some(coordinator_message::Kind::Heartbeat(_)) => {
                        let now = Instant::now();
                        if let Some(last) = last_heartbeat {
                            let gap = now - last;
                            out.heartbeat_gap = out.heartbeat_gap.max(gap);
                            let phase = if out.finished.is_some_and(|f| last >= f) {
                                &mut out.heartbeat_gap_after_run
                            } else if out.start.is_some_and(|s| last >= s) {
                                &mut out.heartbeat_gap_in_run
                            } else {
                                &mut out.heartbeat_gap_before_run
                            };
                            *phase = (*phase).max(gap);
                        }
                        out.heartbeats += 1;
                        last_heartbeat = Some(now);
                    }
                    Some(coordinator_message::Kind::Assignment(a)) => {
                        anyhow::ensure!(play.is_none(), "a second assignment arrived (the swarm plays one run)");
                        out.assigned = Some(Instant::now());
                        let start = swarm.epoch + Duration::from_nanos(a.start_at_agent_ns);
                        out.start = Some(start);
                        let table = swarm.table(&a).await?;
                        let cells = table
                            .agents
                            .get(a.agent_index as usize)
                            .cloned()
                            .ok_or_else(|| anyhow::anyhow!("agent index {} outside the weights", a.agent_index))?;
                        play = Some(Play {
                            cells,
                            start,
                            interval: Duration::from_nanos(a.interval_ns),
                            intervals: table.intervals,
                            scenarios: a.scenarios.len() as u32,
                            next: 0,
                        });
                    }
                    Some(coordinator_message::Kind::Stop(_)) if out.finished.is_none() => {
                        finish(&tx, out, true).await?;
                    }
                    // A swarm agent is never lost mid-run nor late, so
                    // hand-overs and standby do not concern it.
                    Some(coordinator_message::Kind::Stop(_))
                    | Some(coordinator_message::Kind::Takeover(_))
                    | Some(coordinator_message::Kind::Standby(_))
                    | None => {}
                }
            }
            _ = heartbeat.tick() => {
                let hb = message(agent_message::Kind::Heartbeat(v1::Heartbeat {
                    now_ns: swarm.now_ns(),
                    ..Default::default()
                }));
                // A full queue means the coordinator is not reading; the
                // next tick tries again, as a real agent does.
                let _ = tx.try_send(hb);
            }
            _ = tokio::time::sleep_until(due) => {
                let Some(p) = play.as_mut() else { continue };
                for scenario in 0..p.scenarios {
                    let Some(cell) = p.cells.get(&(scenario, p.next)) else { continue };
                    let payload = swarm.ledger.take(index as u64 + p.next, cell.measured, cell.warmup);
                    let mut snapshot = payload.snapshot.clone();
                    snapshot.interval_index = p.next;
                    snapshot.scenario = scenario;
                    snapshot.seq = out.snapshots + 1;
                    tx.send(message(agent_message::Kind::Snapshot(snapshot))).await?;
                    out.snapshots += 1;
                }
                p.next += 1;
                if p.next >= p.intervals {
                    finish(&tx, out, false).await?;
                }
            }
        }
    }
}

async fn finish(
    tx: &mpsc::Sender<v1::AgentMessage>,
    out: &mut Outcome,
    cut_short: bool,
) -> anyhow::Result<()> {
    tx.send(message(agent_message::Kind::Finished(v1::Finished {
        in_flight_at_end: 0,
        cut_short,
        snapshots: out.snapshots,
    })))
    .await?;
    out.finished = Some(Instant::now());
    Ok(())
}
