//! `loadfleet-agent` from the command line to its exit status.

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::allow::AllowList;
use crate::config::AgentConfig;
use crate::exit;
use crate::session::{self, SessionEnd, SessionError};
use crate::sys;
use anyhow::Context;
use clap::Parser;

/// The wake quantum the agent runs with unless told otherwise (see
/// `--wake-quantum`): the longest that keeps send-lag p99 under 0.5 ms.
const DEFAULT_WAKE_QUANTUM: &str = "500us";

/// A loadfleet agent: joins a coordinator and sends its share of the load.
#[derive(Debug, Parser)]
#[command(name = "loadfleet-agent", version)]
struct Cli {
    /// Coordinator address, e.g. http://10.0.0.5:7070.
    #[arg(long, env = "LOADFLEET_COORDINATOR")]
    coordinator: String,
    /// Shared secret the coordinator expects (prefer the environment variable:
    /// command lines are visible to other users).
    #[arg(long, env = "LOADFLEET_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the shared secret from this file instead (a Docker swarm or
    /// Kubernetes secret), so it is in no environment or command line that
    /// `docker inspect` or `ps` shows; a trailing newline is not part of it.
    /// Not with --token.
    #[arg(long, env = "LOADFLEET_TOKEN_FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Name in the report (default: host name and process id).
    #[arg(long, env = "LOADFLEET_AGENT_ID")]
    id: Option<String>,
    /// Label used by plans to weight this agent's share.
    #[arg(long, default_value = "")]
    label: String,
    /// Local address to send load from (e.g. 127.0.0.2), so several agents on
    /// one machine look like distinct hosts to the target. Several
    /// (comma-separated or repeated): connections go from the first until it
    /// has no port left for the target, then from the next, and so on, so
    /// one agent can hold more than one address's ~28,000 ports.
    #[arg(long, value_delimiter = ',')]
    bind: Vec<IpAddr>,
    /// Pin the agent to these CPUs (e.g. 1 or 2-3), before any thread starts.
    #[arg(long)]
    cpus: Option<String>,
    /// Worker threads (default: the CPUs the agent may run on).
    #[arg(long)]
    workers: Option<usize>,
    /// How long to keep trying to reach the coordinator.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    connect_timeout: Duration,
    /// After losing the coordinator mid-run (no word from it for the
    /// dead-man window, a broken connection, this agent frozen), the agent
    /// stops sending at once, then keeps trying this long to deliver what
    /// it measured, so the report counts what it really sent. 0 gives up at
    /// once.
    #[arg(long, env = "LOADFLEET_DELIVER_GRACE", default_value = "60s", value_parser = humantime::parse_duration)]
    deliver_grace: Duration,
    /// Shortest time between two wake-ups of a worker: arrivals closer
    /// together than this leave together, up to this late (shown in the
    /// lag figures). Smaller is more precise, larger costs less CPU at high
    /// rates (each wake-up is a context switch). The default is the longest
    /// that keeps send-lag p99 under 0.5 ms (BENCHMARKS.md, "Pacing
    /// precision").
    #[arg(long, env = "LOADFLEET_WAKE_QUANTUM", default_value = DEFAULT_WAKE_QUANTUM, value_parser = humantime::parse_duration)]
    wake_quantum: Duration,
    /// Print no line when joining, taking an assignment or finishing
    /// (warnings and errors still go to stderr).
    #[arg(long)]
    quiet: bool,
    /// Only send to these targets (`host` or `host:port`, repeatable or
    /// comma-separated): an assignment aimed anywhere else is refused, so a
    /// coordinator — or whoever impersonates one — cannot turn this agent on
    /// a target it was not meant to hit.
    #[arg(
        long = "allow-target",
        env = "LOADFLEET_ALLOW_TARGETS",
        value_delimiter = ','
    )]
    allow_targets: Vec<String>,
    /// Extra CA certificate (PEM) to trust, besides the system's trust
    /// store, for https:// targets and an https:// coordinator.
    #[arg(long, env = "LOADFLEET_CA_CERT")]
    ca_cert: Option<std::path::PathBuf>,
    /// Client certificate (PEM) this agent shows an https:// coordinator
    /// that runs with --client-ca (mutual TLS). Needs --tls-key.
    #[arg(long, env = "LOADFLEET_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "LOADFLEET_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
    /// Announce a different protocol version (for testing refusals).
    #[arg(long, hide = true, default_value_t = loadfleet_proto::PROTOCOL_VERSION)]
    protocol_version: u32,
}

/// Why the agent stops without finishing; each maps to one exit status
/// (see `crate::exit` and the README's table).
enum Failure {
    /// A flag is wrong.
    Flags(anyhow::Error),
    /// The control runtime could not start, so no assignment can run.
    Start(std::io::Error),
    /// The session with the coordinator failed.
    Session(SessionError),
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Flags(_) => exit::BAD_FLAGS,
            Failure::Start(_) => exit::ASSIGNMENT,
            Failure::Session(e) => e.exit_code(),
        }
    }

    /// The message for stderr: the error and each of its causes.
    fn report(self) -> String {
        match self {
            Failure::Flags(e) => format!("{e:#}"),
            Failure::Start(e) => format!("cannot start the control runtime: {e}"),
            Failure::Session(e) => format!("{:#}", anyhow::Error::from(e)),
        }
    }
}

/// The whole agent: flags, the session with its coordinator, and the exit
/// status (README, "Exit status"). The binary is only this call.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(end) => ExitCode::from(end.exit_code()),
        Err(failure) => {
            let code = failure.exit_code();
            eprintln!("loadfleet-agent: error: {}", failure.report());
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<SessionEnd, Failure> {
    let config = config(cli).map_err(Failure::Flags)?;
    // The control plane gets its own small runtime; the workers each run
    // their own, so the session never competes with the request path.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::Start)?;
    runtime
        .block_on(session::run(config))
        .map_err(Failure::Session)
}

/// Checks the flags and pins the process; any error here is the user's to fix.
fn config(cli: Cli) -> anyhow::Result<AgentConfig> {
    if let Some(list) = &cli.cpus {
        let cpus: sys::CpuList = list.parse().with_context(|| format!("--cpus {list:?}"))?;
        sys::pin_to_cpus(&cpus).with_context(|| format!("--cpus {cpus}"))?;
    }
    let workers = match cli.workers {
        Some(0) => anyhow::bail!("--workers must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if cli.wake_quantum > loadfleet_proto::bounds::MAX_WAKE_QUANTUM {
        anyhow::bail!(
            "--wake-quantum {} is too long: at most {} (arrivals may leave up to a quantum late; the default is {DEFAULT_WAKE_QUANTUM})",
            humantime::format_duration(cli.wake_quantum),
            humantime::format_duration(loadfleet_proto::bounds::MAX_WAKE_QUANTUM)
        );
    }
    if cli.deliver_grace > loadfleet_proto::bounds::MAX_DELIVERY_GRACE {
        anyhow::bail!(
            "--deliver-grace {} is too long: at most {} (the run the figures belong to is long over by then)",
            humantime::format_duration(cli.deliver_grace),
            humantime::format_duration(loadfleet_proto::bounds::MAX_DELIVERY_GRACE)
        );
    }
    let token = token(&cli)?;
    let client_identity = client_identity(&cli)?;
    let open_files = open_files();
    Ok(AgentConfig {
        coordinator: cli.coordinator,
        token,
        id: cli
            .id
            .unwrap_or_else(|| format!("{}-{}", sys::hostname(), std::process::id())),
        label: cli.label,
        source: cli.bind.first().copied(),
        more_sources: cli.bind.iter().skip(1).copied().collect(),
        workers,
        connect_timeout: cli.connect_timeout,
        deliver_grace: cli.deliver_grace,
        wake_quantum: cli.wake_quantum,
        allow_targets: AllowList::parse(&cli.allow_targets)?,
        target_roots: Arc::new(crate::client::tls::TargetRoots::new(
            cli.ca_cert.as_deref(),
        )?),
        coordinator_ca: match &cli.ca_cert {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("--ca-cert {}: cannot read it", path.display()))?,
            ),
            None => None,
        },
        client_identity,
        protocol_version: cli.protocol_version,
        open_files,
        quiet: cli.quiet,
    })
}

/// The shared secret from --token or --token-file, exactly one of them:
/// with two sources, a stale variable left in the environment could
/// silently override the secret the operator meant.
fn token(cli: &Cli) -> anyhow::Result<String> {
    let path = match (&cli.token, &cli.token_file) {
        (Some(_), Some(_)) => anyhow::bail!(
            "--token (LOADFLEET_TOKEN) and --token-file (LOADFLEET_TOKEN_FILE) are both set; give the token one way: --token-file for a secret file, otherwise --token"
        ),
        (None, None) => anyhow::bail!(
            "the shared secret is missing: give --token-file (or LOADFLEET_TOKEN_FILE) naming a file that holds it, or --token (or LOADFLEET_TOKEN)"
        ),
        (Some(t), None) if t.is_empty() => anyhow::bail!("--token must not be empty"),
        (Some(t), None) => return Ok(t.clone()),
        (None, Some(path)) => path,
    };
    let secret = sys::read_secret(path, loadfleet_proto::bounds::MAX_SECRET_BYTES)
        .with_context(|| format!("--token-file {}", path.display()))?;
    if secret.is_empty() {
        anyhow::bail!(
            "--token-file {} is empty; write the shared secret into it",
            path.display()
        );
    }
    Ok(secret)
}

/// Raises the open-file limit to the hard limit, and says so: each held
/// stream is a file descriptor, and the default soft limit (often 1,024)
/// would cap an SSE scenario far below what the agent can hold.
fn open_files() -> u64 {
    match sys::raise_open_files() {
        Ok(limits) => {
            if limits.now > limits.before {
                eprintln!(
                    "loadfleet-agent: open-file limit raised from {} to {} (the hard limit)",
                    limits.before, limits.now
                );
            }
            limits.now
        }
        Err(e) => {
            eprintln!("loadfleet-agent: warning: cannot raise the open-file limit: {e}");
            0
        }
    }
}

/// Reads --tls-cert/--tls-key, the identity shown to a coordinator that asks
/// for client certificates (mutual TLS); both or neither, and only towards
/// an https:// coordinator, since a plain one could never check it.
fn client_identity(cli: &Cli) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let read = |flag: &str, path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("{flag} {}: cannot read it", path.display()))
    };
    match (&cli.tls_cert, &cli.tls_key) {
        (None, None) => Ok(None),
        (Some(_), None) => anyhow::bail!("--tls-cert needs --tls-key (the private key of the client certificate)"),
        (None, Some(_)) => anyhow::bail!("--tls-key needs --tls-cert (the client certificate the key belongs to)"),
        (Some(_), Some(_)) if !cli.coordinator.starts_with("https://") => anyhow::bail!(
            "--tls-cert/--tls-key are a client certificate for a TLS coordinator: use --coordinator https://HOST:PORT (with --ca-cert if its certificate is not in the system's trust store)"
        ),
        (Some(cert), Some(key)) => Ok(Some((read("--tls-cert", cert)?, read("--tls-key", key)?))),
    }
}
