//! The control stream: register, answer clock pings, take the assignment,
//! run the workers, stream their snapshots, and stop on our own when the
//! coordinator goes quiet (the dead-man switch).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use loadfleet_proto::closed::max_clients;
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::schedule::{ArrivalSchedule, Stage};
use loadfleet_proto::v1::{
    self, agent_message, control_client::ControlClient, coordinator_message, scenario_assignment,
};
use loadfleet_proto::PROTOCOL_HEADER;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::client::ClientConfig;
use crate::request::RequestMix;
use crate::sys;
use crate::worker::{self, Model, ScenarioPlan, WorkerEvent, WorkerPlan};

/// How the agent was started.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub coordinator: String,
    pub token: String,
    pub id: String,
    pub label: String,
    pub source: Option<IpAddr>,
    pub workers: usize,
    pub connect_timeout: Duration,
    /// Shortest time between two wake-ups of a worker's open-model loop.
    pub wake_quantum: Duration,
    /// Targets this agent may be sent at (`host` or `host:port`); empty
    /// means any. The agent refuses an assignment aimed elsewhere.
    pub allow_targets: Vec<String>,
    /// TLS settings for https:// targets.
    pub tls: Arc<rustls::ClientConfig>,
    /// The --ca-cert PEM, also trusted for an https:// coordinator.
    pub coordinator_ca: Option<Vec<u8>>,
    /// Only used by tests: announce this protocol version instead of ours.
    pub protocol_version: u32,
}

/// Largest control message accepted: an assignment with the biggest data
/// table a plan may ship, plus framing.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How a session ended, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The schedule ran and every snapshot was delivered.
    Finished,
    /// The coordinator told us to stop early; what we measured was delivered.
    Stopped,
}

/// The agent's clock: nanoseconds since this process's epoch (monotonic).
struct Clock(Instant);

impl Clock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// Connects, retrying while the coordinator is not up yet (agents are often
/// started before it, e.g. as a Kubernetes Indexed Job).
async fn connect(config: &AgentConfig) -> anyhow::Result<ControlClient<tonic::transport::Channel>> {
    let endpoint = tonic::transport::Endpoint::from_shared(config.coordinator.clone())
        .with_context(|| {
            format!(
                "--coordinator {:?} is not a valid URL (expected http://HOST:PORT or https://HOST:PORT)",
                config.coordinator
            )
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(3));
    // https:// checks the coordinator's certificate against the system's
    // trust store and --ca-cert: the token then never crosses the network
    // in the clear, and nobody can pose as the coordinator.
    let endpoint = if config.coordinator.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        if let Some(pem) = &config.coordinator_ca {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint
            .tls_config(tls)
            .context("--coordinator: cannot set up TLS")?
    } else {
        endpoint
    };
    let deadline = Instant::now() + config.connect_timeout;
    let mut backoff = Duration::from_millis(100);
    loop {
        match endpoint.connect().await {
            // Assignments carry the plan's data tables (up to 16 MiB of
            // CSV), well past tonic's 4 MiB default.
            Ok(channel) => {
                return Ok(ControlClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
            }
            Err(e) if Instant::now() + backoff < deadline => {
                tracing::info!("coordinator not reachable yet ({e}); retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                return Err(anyhow!(e)).with_context(|| {
                    format!(
                        "cannot reach the coordinator at {} within {:?}",
                        config.coordinator, config.connect_timeout
                    )
                })
            }
        }
    }
}

/// Runs one session from registration to the end of the run.
pub async fn run(config: AgentConfig) -> anyhow::Result<SessionEnd> {
    let clock = Clock(Instant::now());
    let mut client = connect(&config).await?;

    let (out_tx, out_rx) = mpsc::channel::<v1::AgentMessage>(4096);
    let send = |kind: agent_message::Kind| v1::AgentMessage { kind: Some(kind) };
    out_tx
        .send(send(agent_message::Kind::Hello(v1::Hello {
            protocol_version: config.protocol_version,
            agent_id: config.id.clone(),
            host: sys::hostname(),
            host_addresses: sys::host_addresses()
                .iter()
                .map(|a| a.to_string())
                .collect(),
            source_address: config.source.map(|ip| ip.to_string()).unwrap_or_default(),
            cpus: config.workers as u32,
            label: config.label.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })))
        .await
        .context("internal: the outbound queue closed before hello")?;

    let mut request = tonic::Request::new(ReceiverStream::new(out_rx));
    let bearer = format!("Bearer {}", config.token)
        .parse()
        .context("--token contains characters that cannot go in a header")?;
    request.metadata_mut().insert("authorization", bearer);
    request.metadata_mut().insert(
        PROTOCOL_HEADER,
        config
            .protocol_version
            .to_string()
            .parse()
            .context("internal: protocol version header")?,
    );
    let mut inbound = client.session(request).await.map_err(refusal)?.into_inner();

    let mut dead_man = Duration::from_secs(3);
    let mut last_heard = Instant::now();
    let mut heartbeat = tokio::time::interval(Duration::from_millis(500));
    let mut stop = CancellationToken::new();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<WorkerEvent>();
    let mut workers_running = 0usize;
    // A coordinator may run the plan several times (--repeat) over one
    // session: each assignment is one run, and the session ends when the
    // coordinator closes the stream after the last.
    let mut running = false;
    let mut refused = false;
    let mut last_end: Option<SessionEnd> = None;
    let mut snapshots = 0u64;
    let mut in_flight_at_end = 0u64;
    let mut cut_short = false;
    let mut threads = Vec::new();
    let mut cpu = CpuSampler::new();
    let mut cpu_interval: Option<(Instant, Duration, u64)> = None;

    let result = loop {
        tokio::select! {
            msg = inbound.message() => {
                let msg = match msg {
                    Ok(Some(m)) => m,
                    Ok(None) => match (running, last_end) {
                        (false, Some(end)) => break Ok(end),
                        _ => break Err(anyhow!("the coordinator closed the control stream")),
                    },
                    Err(status) => break Err(refusal(status)),
                };
                last_heard = Instant::now();
                match msg.kind {
                    Some(coordinator_message::Kind::Welcome(w)) => {
                        if w.dead_man_secs > 0 {
                            dead_man = Duration::from_secs(u64::from(w.dead_man_secs));
                        }
                        tracing::info!("joined the fleet as agent {}", w.agent_index);
                    }
                    Some(coordinator_message::Kind::Ping(p)) => {
                        let recv = clock.now_ns();
                        let pong = send(agent_message::Kind::Pong(v1::Pong {
                            seq: p.seq,
                            coordinator_send_ns: p.coordinator_send_ns,
                            agent_recv_ns: recv,
                            agent_send_ns: clock.now_ns(),
                        }));
                        if out_tx.send(pong).await.is_err() {
                            break Err(anyhow!("the control stream closed"));
                        }
                    }
                    Some(coordinator_message::Kind::Assignment(a)) => {
                        if running {
                            break Err(anyhow!("the coordinator sent an assignment during a run"));
                        }
                        running = true;
                        stop = CancellationToken::new();
                        snapshots = 0;
                        in_flight_at_end = 0;
                        cut_short = false;
                        cpu = CpuSampler::new();
                        if let Err(reason) = check_targets(&a, &config.allow_targets) {
                            let refusal = send(agent_message::Kind::Refusal(v1::Refusal { reason: reason.clone() }));
                            let _ = out_tx.send(refusal).await;
                            refused = true;
                            break Err(anyhow!("refused the assignment: {reason}"));
                        }
                        let start = clock.0 + Duration::from_nanos(a.start_at_agent_ns);
                        let plans = match plan_workers(&a, &config, start) {
                            Ok(p) => p,
                            Err(e) => break Err(e.context("the assignment cannot be carried out")),
                        };
                        cpu_interval = Some((start, Duration::from_nanos(a.interval_ns), 0));
                        workers_running = plans.len();
                        for plan in plans {
                            threads.push(spawn_worker(plan, ev_tx.clone(), stop.clone())?);
                        }
                        tracing::info!("assignment taken: {} workers, start in {:?}",
                            workers_running, start.saturating_duration_since(Instant::now()));
                    }
                    Some(coordinator_message::Kind::Heartbeat(_)) => {}
                    Some(coordinator_message::Kind::Stop(s)) => {
                        tracing::warn!("coordinator asked to stop: {}", s.reason);
                        cut_short = true;
                        stop.cancel();
                        if !running {
                            break Ok(SessionEnd::Stopped);
                        }
                    }
                    None => {}
                }
            }
            Some(ev) = ev_rx.recv() => match ev {
                WorkerEvent::Snapshots(snaps) => {
                    let mut stalled = false;
                    for s in snaps {
                        snapshots += 1;
                        // A coordinator that stopped reading fills the queue;
                        // waiting on it must not outlast the dead-man switch.
                        let sent = tokio::time::timeout(
                            dead_man,
                            out_tx.send(send(agent_message::Kind::Snapshot(s))),
                        )
                        .await;
                        match sent {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => {
                                stop.cancel();
                                break;
                            }
                            Err(_) => {
                                stalled = true;
                                break;
                            }
                        }
                    }
                    if stalled {
                        break Err(anyhow!(
                            "the coordinator stopped reading for {dead_man:?}; stopped sending (dead-man switch)"
                        ));
                    }
                }
                WorkerEvent::Done { in_flight_at_end: n } => {
                    in_flight_at_end += n;
                    workers_running -= 1;
                    if workers_running == 0 {
                        // The last partial interval's CPU use, then done.
                        if let Some((start, interval, _)) = cpu_interval {
                            let idx = Instant::now().saturating_duration_since(start).as_nanos() as u64
                                / interval.as_nanos().max(1) as u64;
                            snapshots += 1;
                            let _ = out_tx.send(send(agent_message::Kind::Snapshot(cpu.snapshot(idx)))).await;
                        }
                        let fin = send(agent_message::Kind::Finished(v1::Finished {
                            in_flight_at_end,
                            cut_short,
                            snapshots,
                        }));
                        let _ = out_tx.send(fin).await;
                        running = false;
                        cpu_interval = None;
                        last_end = Some(if cut_short { SessionEnd::Stopped } else { SessionEnd::Finished });
                        for t in threads.drain(..) {
                            let _ = t.join();
                        }
                    }
                }
            },
            _ = heartbeat.tick() => {
                if last_heard.elapsed() > dead_man {
                    break Err(anyhow!(
                        "no word from the coordinator for {:?}; stopped sending (dead-man switch)",
                        last_heard.elapsed()
                    ));
                }
                let hb = send(agent_message::Kind::Heartbeat(v1::Heartbeat { now_ns: clock.now_ns() }));
                if out_tx.try_send(hb).is_err() {
                    tracing::debug!("outbound queue full; skipping a heartbeat");
                }
                // Per-interval CPU use, on the same interval grid as the workers.
                if let Some((start, interval, next)) = cpu_interval.as_mut() {
                    let boundary = *start + *interval * (*next as u32 + 1);
                    if Instant::now() >= boundary {
                        snapshots += 1;
                        let _ = out_tx.try_send(send(agent_message::Kind::Snapshot(cpu.snapshot(*next))));
                        *next += 1;
                    }
                }
            }
        }
    };
    // Whatever happened, nothing keeps firing after the session ends.
    stop.cancel();
    if result.is_ok() || refused {
        // Let the outbound queue drain (a refusal must reach the
        // coordinator) and the coordinator close the stream.
        drop(out_tx);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Ok(Some(_)) = inbound.message().await {}
        })
        .await;
    }
    for t in threads {
        if result.is_ok() {
            let _ = t.join();
        }
    }
    result
}

/// The `host:port` a URL (template) points at; `None` when it has no
/// authority or builds it from placeholders.
fn url_authority(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains("{{") || authority.is_empty() {
        return None;
    }
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(port) => (h, port),
            Err(_) => (authority, default_port),
        },
        _ => (authority, default_port),
    };
    Some((host.trim_matches(['[', ']']).to_ascii_lowercase(), port))
}

/// Refuses an assignment that aims at a target outside `allow`.
fn check_targets(a: &v1::Assignment, allow: &[String]) -> Result<(), String> {
    if allow.is_empty() {
        return Ok(());
    }
    for sc in &a.scenarios {
        for r in &sc.requests {
            let Some((host, port)) = url_authority(&r.url) else {
                return Err(format!(
                    "target {:?} has no fixed host, and this agent only sends to --allow-target {}",
                    r.url,
                    allow.join(",")
                ));
            };
            let allowed = allow.iter().any(|entry| {
                let entry = entry.trim().to_ascii_lowercase();
                match entry.rsplit_once(':') {
                    Some((h, p)) if p.parse::<u16>().is_ok() => {
                        h.trim_matches(['[', ']']) == host && p.parse::<u16>().ok() == Some(port)
                    }
                    _ => entry.trim_matches(['[', ']']) == host,
                }
            });
            if !allowed {
                return Err(format!(
                    "target {host}:{port} is not in this agent's --allow-target list ({})",
                    allow.join(",")
                ));
            }
        }
    }
    Ok(())
}

/// Turns a refused call into a message that says what to fix.
fn refusal(status: tonic::Status) -> anyhow::Error {
    match status.code() {
        tonic::Code::Unauthenticated => anyhow!(
            "the coordinator refused this agent: {} (check --token / LOADFLEET_TOKEN)",
            status.message()
        ),
        tonic::Code::FailedPrecondition => {
            anyhow!("the coordinator refused this agent: {}", status.message())
        }
        tonic::Code::ResourceExhausted => anyhow!(
            "the coordinator has no room for this agent: {}",
            status.message()
        ),
        _ => anyhow!(
            "control stream failed: {} ({:?})",
            status.message(),
            status.code()
        ),
    }
}

fn plan_workers(
    a: &v1::Assignment,
    config: &AgentConfig,
    start: Instant,
) -> anyhow::Result<Vec<WorkerPlan>> {
    if a.interval_ns == 0 {
        bail!("assignment interval is 0");
    }
    if a.scenarios.is_empty() {
        bail!("assignment has no scenarios");
    }
    let interleave = Arc::new(Interleave::new(&a.weights)?);
    let agent = a.agent_index;
    // Parse every scenario once; workers share the result.
    let mut parsed = Vec::new();
    for (i, sc) in a.scenarios.iter().enumerate() {
        let model = match &sc.model {
            Some(scenario_assignment::Model::Open(schedule)) => ParsedModel::Open(Arc::new(
                ArrivalSchedule::from_proto(schedule)
                    .with_context(|| format!("scenario {:?}", sc.name))?,
            )),
            Some(scenario_assignment::Model::Closed(closed)) => {
                let stages: Vec<Stage> = closed
                    .stages
                    .iter()
                    .map(|s| Stage {
                        duration_ns: s.duration_ns,
                        from_rps: s.from_rps,
                        to_rps: s.to_rps,
                    })
                    .collect();
                ParsedModel::Closed(Arc::new(stages), Duration::from_nanos(closed.think_ns))
            }
            None => bail!("scenario {:?} has no model", sc.name),
        };
        let mix = RequestMix::from_proto(&sc.requests, sc.data.as_ref(), agent)
            .with_context(|| format!("scenario {:?}", sc.name))?;
        parsed.push((i as u32, sc, model, Arc::new(mix)));
    }
    // No more workers than the in-flight cap or the connections allow: each
    // worker needs at least one of each.
    let workers = config
        .workers
        .min(a.max_in_flight.max(1) as usize)
        .min(a.connections.max(1) as usize)
        .max(1);
    let cap = u64::from(a.max_in_flight.max(1));
    let conns = u64::from(a.connections.max(1));
    Ok((0..workers)
        .map(|w| {
            // Split the agent's cap and pool across workers, remainder first.
            let share = |total: u64| {
                total / workers as u64 + u64::from((w as u64) < total % workers as u64)
            };
            WorkerPlan {
                agent_index: agent as usize,
                worker_index: w,
                workers,
                start,
                interval: Duration::from_nanos(a.interval_ns),
                drain: Duration::from_nanos(a.drain_ns),
                max_in_flight: share(cap).max(1),
                max_lag: Duration::from_nanos(a.max_lag_ns),
                wake_quantum: config.wake_quantum,
                client: ClientConfig {
                    timeout: Duration::from_nanos(a.timeout_ns.max(1)),
                    connections: share(conns).max(1) as usize,
                    source: config.source,
                    tls: config.tls.clone(),
                },
                scenarios: parsed
                    .iter()
                    .map(|(index, sc, model, mix)| ScenarioPlan {
                        index: *index,
                        start: start + Duration::from_nanos(sc.start_offset_ns),
                        warmup: Duration::from_nanos(sc.warmup_ns),
                        duration: Duration::from_nanos(sc.duration_ns),
                        model: match model {
                            ParsedModel::Open(schedule) => Model::Open {
                                schedule: schedule.clone(),
                                interleave: interleave.clone(),
                            },
                            ParsedModel::Closed(stages, think) => Model::Closed {
                                max_clients: max_clients(stages),
                                stages: stages.clone(),
                                think: *think,
                                interleave: interleave.clone(),
                            },
                        },
                        mix: mix.clone(),
                        seed: sc.seed,
                    })
                    .collect(),
            }
        })
        .collect())
}

/// A scenario's model, parsed once before being handed to every worker.
enum ParsedModel {
    Open(Arc<ArrivalSchedule>),
    Closed(Arc<Vec<Stage>>, Duration),
}

fn spawn_worker(
    plan: WorkerPlan,
    events: mpsc::UnboundedSender<WorkerEvent>,
    stop: CancellationToken,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let name = format!("worker-{}", plan.worker_index);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot build a worker runtime")?;
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            crate::timer::tighten_timer_slack();
            runtime.block_on(worker::run(plan, events, stop))
        })
        .context("cannot start a worker thread")
}

/// Process and host CPU use per interval.
struct CpuSampler {
    process: f64,
    host: Option<(u64, u64)>,
}

impl CpuSampler {
    fn new() -> Self {
        Self {
            process: sys::process_cpu_seconds(),
            host: sys::host_cpu_jiffies(),
        }
    }

    fn snapshot(&mut self, index: u64) -> v1::Snapshot {
        let process = sys::process_cpu_seconds();
        let host = sys::host_cpu_jiffies();
        let host_cpu = match (self.host, host) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
            _ => 0.0,
        };
        let cpu_seconds = (process - self.process).max(0.0);
        self.process = process;
        self.host = host;
        v1::Snapshot {
            interval_index: index,
            cpu_seconds,
            host_cpu,
            unsent: HashMap::new(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(url: &str) -> v1::Assignment {
        v1::Assignment {
            scenarios: vec![v1::ScenarioAssignment {
                requests: vec![v1::RequestTemplate {
                    url: url.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn allow_list_checks_host_and_port() {
        let allow = vec!["10.0.0.9:8080".to_string(), "api.example".to_string()];
        assert!(check_targets(&assignment("http://10.0.0.9:8080/x"), &allow).is_ok());
        assert!(check_targets(&assignment("http://API.example/x?y"), &allow).is_ok());
        assert!(check_targets(&assignment("http://api.example:9000/"), &allow).is_ok());
        let e = check_targets(&assignment("http://10.0.0.9:9090/"), &allow).unwrap_err();
        assert!(
            e.contains("10.0.0.9:9090") && e.contains("--allow-target"),
            "{e}"
        );
        assert!(check_targets(&assignment("http://{{data.host}}/"), &allow).is_err());
        assert!(check_targets(&assignment("http://anything/"), &[]).is_ok());
    }

    #[test]
    fn authorities_parse() {
        assert_eq!(url_authority("http://h:81/p"), Some(("h".into(), 81)));
        assert_eq!(url_authority("http://h"), Some(("h".into(), 80)));
        assert_eq!(url_authority("http://[::1]:9/"), Some(("::1".into(), 9)));
        assert_eq!(url_authority("https://h/x"), Some(("h".into(), 443)));
        assert_eq!(url_authority("/relative"), None);
    }
}
