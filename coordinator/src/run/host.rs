//! What a run starts and must stop again: the built-in testbed, the
//! control plane the agents dial, the local agent processes, the watch on
//! Ctrl-C and SIGTERM, and the metrics endpoint. The [`Host`] owns them
//! all, from the target's checks to the teardown after the fleet, so that
//! `run` and `search` only say what the fleet runs and what becomes of its
//! results. Every process it starts dies with it (`kill_on_drop`), also
//! when a refusal returns early.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context;
use loadfleet_proto::v1;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

use super::setup::{ControlTls, RunSetup};
use super::target::{check_target_resolves, is_loopback_target, reflect};
use super::{folder, progress};
use crate::console::Console;
use crate::error::{self, Error};
use crate::fleet::{
    self, ControlService, FleetEvent, NextSchedule, Progress, RunResult, RunSpec, Sink,
};
use crate::local;
use crate::plan;
use crate::report::{Placement, PlanInfo};

/// How long the control plane may take to close once the fleet is done.
const SERVER_CLOSE: Duration = Duration::from_secs(3);
/// How long a local agent may take to exit on its own before it is killed.
const AGENT_EXIT: Duration = Duration::from_secs(5);

/// See the module's comment.
pub(crate) struct Host {
    console: Console,
    /// The run's folder, made and proven writable.
    pub out_dir: PathBuf,
    /// The target's URL: the plan's, or the built-in testbed's address.
    pub target: String,
    target_ips: Vec<IpAddr>,
    split: Option<local::CpuSplit>,
    agent_bin: Option<PathBuf>,
    testbed: Option<Child>,
}

/// The control plane and what dials it, from [`Host::serve`] until the
/// fleet is run.
pub(crate) struct Served {
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    shutdown: oneshot::Sender<()>,
    agents: Vec<Child>,
    events: mpsc::Receiver<FleetEvent>,
    interrupt: Pin<Box<dyn Future<Output = ()> + Send>>,
    metrics: Option<watch::Sender<String>>,
}

impl Served {
    /// Where the scrape endpoint's text goes (with `--metrics-listen`),
    /// for the sink the fleet is run with (`output::start`).
    pub(crate) fn scrape(&mut self) -> Option<watch::Sender<String>> {
        self.metrics.take()
    }
}

impl Host {
    /// Checks the target, finds the local programs, prepares the run's
    /// folder (`--out`), starts the built-in testbed when the run aims at
    /// it, and asks the target's reflection service for the plan's gRPC
    /// message types. Nothing is sent yet.
    pub(crate) async fn start(
        setup: &mut RunSetup,
        out: Option<&Path>,
        overwrite: bool,
        plan_file: Option<&Path>,
        console: &Console,
    ) -> Result<Host, Error> {
        let local = setup.is_local();
        let target_ips = match setup.plan.target.url.as_str() {
            plan::TESTBED_URL => Vec::new(),
            url => check_target_resolves(url, local, console).await?,
        };
        // The local programs are found before anything starts: one missing
        // is said at once, not after the testbed or the coordinator came up.
        let testbed_bin = setup
            .testbed
            .as_ref()
            .map(|_| local::sibling_binary("loadfleet-testbed"))
            .transpose()?;
        let agent_bin = setup
            .local_agents
            .map(|_| local::sibling_binary("loadfleet-agent"))
            .transpose()?;
        let out_dir = folder::prepare_out_dir(out, overwrite)?;
        let mut host = Host {
            console: console.clone(),
            out_dir,
            target: setup.plan.target.url.clone(),
            target_ips,
            split: local
                .then(|| local::split_cpus(&local::allowed_cpus()))
                .flatten(),
            agent_bin,
            testbed: None,
        };
        if let (Some(bin), Some(tb_args)) = (&testbed_bin, &setup.testbed) {
            let cpus = host.split.as_ref().map(|s| s.target.as_slice());
            let (child, addr) = local::start_testbed(bin, tb_args, cpus).await?;
            host.testbed = Some(child);
            console.line(&format!(
                "testbed listening on {addr} ({})",
                tb_args.join(" ")
            ));
            host.target = format!("http://{addr}/");
        }
        let plan = &mut setup.plan;
        if plan.target.grpc_source == Some(plan::GrpcSource::Reflection) && plan.has_grpc() {
            let descriptors = reflect(plan, &host.target).await?;
            plan.set_grpc_descriptors(descriptors)
                .map_err(|e| from_reflection(e, plan_file))?;
        }
        Ok(host)
    }

    /// What the report says of the plan and where it ran, and what the
    /// fleet is asked to do.
    pub(crate) fn describe(&self, setup: &RunSetup) -> (PlanInfo, RunSpec) {
        let plan = &setup.plan;
        let mut info = PlanInfo::new(plan, &self.target, setup.latency_floor, self.placement());
        info.failure_limits = setup.failure_limits;
        let spec = RunSpec {
            scenarios: plan.assignments(&self.target),
            shares: plan.shares.clone(),
            duration: plan.duration(),
            drain: plan.run.drain,
            max_in_flight: plan.target.max_in_flight,
            max_lag: plan.target.max_lag,
            timeout: plan.target.timeout,
            connections: plan.target.connections,
            max_connections: plan.target.max_connections,
            interval: Duration::from_secs(1),
            expect_agents: setup.expect,
            min_agents: setup.min_agents,
            repeats: setup.repeats,
            on_agent_loss: plan.run.on_agent_loss,
            protocol: plan.target.protocol,
            tls: plan.tls.to_proto(),
            agent_timeout: setup.agent_timeout,
        };
        (info, spec)
    }

    fn placement(&self) -> Placement {
        if self.agent_bin.is_none() {
            return Placement::Remote {
                loopback: is_loopback_target(&self.target),
                target_ips: self.target_ips.clone(),
            };
        }
        let pinning = match (&self.split, self.testbed.is_some()) {
            (Some(s), true) => format!(
                "target pinned to CPU {} and agents to CPU {}",
                local::cpu_list(&s.target),
                local::cpu_list(&s.agents)
            ),
            (Some(s), false) => format!("agents pinned to CPU {}", local::cpu_list(&s.agents)),
            (None, _) => "a single CPU: nothing could be pinned apart".to_string(),
        };
        Placement::Local { pinning }
    }

    /// Serves the control plane, starts the local agents, watches for
    /// Ctrl-C and SIGTERM and serves `--metrics-listen`.
    pub(crate) async fn serve(&self, setup: &RunSetup) -> Result<Served, Error> {
        let listener = tokio::net::TcpListener::bind(setup.listen)
            .await
            .with_context(|| format!("--listen {}: cannot bind the control plane", setup.listen))?;
        let bound = listener.local_addr().context("control plane address")?;
        let (events_tx, events) = mpsc::channel(4096);
        let service = ControlService::new(setup.token.clone(), events_tx);
        let (shutdown, shutdown_rx) = oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder().tcp_nodelay(true);
        if let Some(tls) = &setup.tls {
            builder = builder
                .tls_config(server_tls(tls)?)
                .map_err(|e| error::flags(format!("--tls-cert/--tls-key: {e}")))?;
        }
        let server = tokio::spawn(
            builder
                .add_service(v1::control_server::ControlServer::new(service))
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = shutdown_rx.await;
                }),
        );
        self.console.line(&format!(
            "coordinator listening on {bound}; waiting for {} agent(s)",
            setup.expect
        ));
        let mut agents = Vec::new();
        if let (Some(n), Some(bin)) = (setup.local_agents, &self.agent_bin) {
            let url = format!("http://{bound}");
            let cpus = self.split.as_ref().map(|s| s.agents.as_slice());
            agents = local::start_agents(bin, n, &url, &setup.token, cpus)?;
        }
        Ok(Served {
            server,
            shutdown,
            agents,
            events,
            interrupt: Box::pin(interrupt()?),
            metrics: self.serve_metrics(setup.metrics_listen).await?,
        })
    }

    /// `--metrics-listen`: the endpoint that serves the text the scrape
    /// output (`output::scrape`) renders of each settled second.
    async fn serve_metrics(
        &self,
        addr: Option<SocketAddr>,
    ) -> Result<Option<watch::Sender<String>>, Error> {
        let Some(addr) = addr else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-listen {addr}: cannot bind"))?;
        let bound = listener.local_addr().context("metrics address")?;
        self.console
            .line(&format!("metrics on http://{bound}/metrics"));
        let (tx, rx) = watch::channel(String::new());
        tokio::spawn(crate::output::scrape::serve(listener, rx));
        Ok(Some(tx))
    }

    /// Runs the fleet (`spec`'s runs, or with `next` the schedules it
    /// picks as it goes), then stops everything this host started.
    pub(crate) async fn run_fleet(
        mut self,
        served: Served,
        spec: RunSpec,
        sink: Option<Box<dyn Sink>>,
        next: Option<NextSchedule>,
    ) -> Vec<RunResult> {
        let shown = self.console.clone();
        let drain = spec.drain;
        let outputs = fleet::Outputs {
            progress: Box::new(move |p: &Progress| progress::print(&shown, p, drain)),
            sink,
            console: self.console.clone(),
        };
        let results = match next {
            Some(next) => {
                fleet::run_sequence(spec, served.events, served.interrupt, outputs, next).await
            }
            None => fleet::run_with(spec, served.events, served.interrupt, outputs).await,
        };
        if self.console.is_terminal() {
            // Ends the progress bar's line.
            self.console.line("");
        }
        let _ = served.shutdown.send(());
        let _ = tokio::time::timeout(SERVER_CLOSE, served.server).await;
        for mut a in served.agents {
            if tokio::time::timeout(AGENT_EXIT, a.wait()).await.is_err() {
                let _ = a.kill().await;
            }
        }
        if let Some(mut t) = self.testbed.take() {
            let _ = t.kill().await;
        }
        results
    }
}

/// The control plane's TLS: client authentication is required (tonic's
/// default once a client CA is set), so an agent without a certificate
/// from that CA fails the handshake before it can show any token.
fn server_tls(tls: &ControlTls) -> Result<tonic::transport::ServerTlsConfig, Error> {
    let read = |flag: &str, p: &Path| {
        std::fs::read(p).map_err(|e| error::flags(format!("{flag} {}: {e}", p.display())))
    };
    let config =
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            read("--tls-cert", &tls.cert)?,
            read("--tls-key", &tls.key)?,
        ));
    Ok(match &tls.client_ca {
        Some(ca) => config.client_ca_root(tonic::transport::Certificate::from_pem(read(
            "--client-ca",
            ca,
        )?)),
        None => config,
    })
}

/// Ctrl-C and SIGTERM (Kubernetes, docker stop) both cut the run short
/// and keep what was measured. Once registered, tokio's handler stays in
/// place, so a SIGTERM that arrives while the report is being written
/// cannot kill the process half-way through it.
fn interrupt() -> Result<impl Future<Output = ()> + Send, Error> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            r = tokio::signal::ctrl_c() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            _ = terminate.recv() => {}
        }
    })
}

/// A gRPC message that does not fit the types the target's reflection
/// gave: named in the plan file, or by the flags that made the request.
fn from_reflection(mut e: plan::PlanErrors, plan_file: Option<&Path>) -> Error {
    match plan_file {
        Some(path) => e.source = path.display().to_string(),
        None => {
            e.source = "the command line".into();
            for err in &mut e.errors {
                if err.field.ends_with(".message") {
                    err.field = "--grpc-message".into();
                } else if err.field.ends_with(".grpc") {
                    err.field = "--grpc-method".into();
                }
            }
        }
    }
    e.into()
}
