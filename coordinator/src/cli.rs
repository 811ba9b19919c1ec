//! Command-line interface. Flags parse into precise types (durations,
//! rates, thresholds), so a bad value is refused by name before anything runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use loadfleet_proto::bounds;

use crate::error::{self, Error};
use crate::plan::Overlay;
pub(crate) use crate::plan::Vary;
use crate::thresholds::percent;

#[derive(Debug, Parser)]
#[command(
    name = "loadfleet-coordinator",
    version,
    about = "Run a distributed open-model load test and report what really happened"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a load test with a local or remote fleet of agents.
    Run(Box<RunArgs>),
    /// Find the highest open rate the target sustains within an SLO.
    ///
    /// Steps of rising rate on one fleet, doubling then bisecting; the
    /// guide is docs/search.md.
    Search(Box<SearchArgs>),
    /// Compare two or more report.json files side by side, with ratios to
    /// the first.
    ///
    /// Given search.json files, the ratio of their capacities instead.
    Compare(CompareArgs),
    /// Check or preview a plan file without sending anything.
    #[command(subcommand)]
    Plan(PlanCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Validate a plan: exit 0 when it is fine, 2 with every problem (field,
    /// line, fix) when not.
    Check {
        /// The plan file (TOML).
        file: PathBuf,
    },
    /// Show the rate (or clients) per second for the fleet and per agent,
    /// as a table and a small chart. Takes the same flags as `run`, so the
    /// load can be seen before it is sent.
    Preview {
        /// The plan file (TOML).
        file: PathBuf,
        /// Number of agents to split the load across.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
        agents: u32,
        /// Flags laid over the plan, as `run` takes them.
        #[command(flatten)]
        flags: Box<Overlay>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Reports to compare (report.json files, or the folders holding them;
    /// or search.json files); ratios are relative to the first.
    #[arg(required = true, num_args = 2.., value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    /// A rule every step must keep, in the --threshold language, e.g.
    /// 'p99<300ms', 'failures<1%', 'unsent==0' (repeatable; plan:
    /// `[search] slo = [...]`).
    #[arg(long = "slo", value_name = "EXPR")]
    pub slo: Vec<crate::thresholds::Threshold>,
    /// What is varied: `rate`, the open scenarios' rate, or `clients`,
    /// the closed scenarios' population (default: `rate` when the plan has
    /// an open scenario, else `clients`; plan: `[search] vary`).
    #[arg(long, value_enum)]
    pub vary: Option<Vary>,
    /// The first step, fleet-wide: req/s, or clients with --vary clients
    /// (default 10).
    #[arg(long, value_parser = rate)]
    pub from: Option<f64>,
    /// The highest step tried, fleet-wide: req/s, or clients with --vary
    /// clients.
    #[arg(long, value_parser = rate)]
    pub to: Option<f64>,
    /// Bisection stops when the last pass and the first failure are this
    /// close, as a share of the rate (default 5%).
    #[arg(long, value_parser = percent)]
    pub resolution: Option<f64>,
    /// The measured window of each step, after its --warmup (default 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub step: Option<Duration>,
    /// The run's flags: the plan, the fleet, the target. --repeat N runs
    /// each step near the boundary N times; the medians decide.
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Plan file (TOML). Flags given with it override the plan's values.
    pub plan: Option<PathBuf>,
    /// Flags laid over the plan (or making one, without a file).
    #[command(flatten)]
    pub flags: Overlay,
    /// Run the plan N times, one after another on the same fleet with fresh
    /// connections; the report keeps each run and adds median, min and max.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// A FAILURES warning when more than this share of the completed
    /// requests failed (errors, 4xx and 5xx), e.g. `5%`.
    #[arg(long, default_value = "5%", value_parser = percent)]
    pub failures_warn: f64,
    /// A FAILURES error (exit 3) when more than this share failed, e.g.
    /// `50%`; at least --failures-warn.
    #[arg(long, default_value = "50%", value_parser = percent)]
    pub failures_error: f64,
    /// Start N agent processes on this machine.
    #[arg(long, conflicts_with = "expect_agents")]
    pub local_agents: Option<u32>,
    /// Wait for N remote agents to join before starting.
    #[arg(long)]
    pub expect_agents: Option<u32>,
    /// When fewer than --expect-agents joined by --agent-timeout (pods
    /// still Pending, tasks that cannot be placed), start with those that
    /// came if at least M did, instead of exiting 3; the report says how
    /// many of how many joined. Plan: `[agents] min`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub min_agents: Option<u32>,
    /// Address the control plane listens on (agents dial it).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Shared secret agents must present. Required with --expect-agents;
    /// a local run makes a random one.
    #[arg(long, env = "LOADFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the shared secret from this file instead (a Docker swarm or
    /// Kubernetes secret), so it is in no environment or command line that
    /// `docker inspect` or `ps` shows; a trailing newline is not part of it.
    /// Not with --token.
    #[arg(long, env = "LOADFLEET_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve the control plane over TLS with this certificate chain (PEM);
    /// agents then dial https://HOST:PORT. Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: agents must present a client certificate (their
    /// --tls-cert/--tls-key) signed by this CA (PEM), so a leaked token
    /// alone does not let a stranger join. Needs --tls-cert/--tls-key.
    #[arg(long)]
    pub client_ca: Option<PathBuf>,
    /// How long to wait for the expected agents.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub agent_timeout: Duration,
    /// Serve live Prometheus metrics (GET /metrics) on this address while
    /// the run goes, e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Live outputs: Prometheus remote write, InfluxDB, OTLP (crate::output).
    #[command(flatten)]
    pub outputs: crate::plan::OutputArgs,
    /// Folder for report.json, report.html and the interval log (default: a
    /// fresh loadfleet-out-<time> folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Let --out name a folder that is not empty: the files an earlier run
    /// wrote there (reports, interval logs and CSVs, --repeat's run-N files)
    /// are removed first; other files are kept.
    #[arg(long, requires = "out")]
    pub overwrite: bool,
    /// Service delay of the built-in testbed (local runs without --url).
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub testbed_delay: Duration,
    /// Pool size of the built-in testbed: at most this many requests work at
    /// once, the rest wait up to --testbed-pool-timeout and then get 503.
    #[arg(long)]
    pub testbed_pool: Option<u32>,
    /// Wait timeout of the built-in testbed's pool.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub testbed_pool_timeout: Duration,
}

impl RunArgs {
    /// The shared secret from --token or --token-file (`None`: neither).
    /// Both at once is refused rather than one silently winning: with two
    /// sources, a stale variable left in the environment could override the
    /// secret the operator meant.
    pub(crate) fn token(&self) -> Result<Option<String>, Error> {
        match (&self.token, &self.token_file) {
            (Some(_), Some(_)) => Err(error::flags(
                "--token (LOADFLEET_TOKEN) and --token-file (LOADFLEET_TOKEN_FILE) are both set; give the token one way: --token-file for a secret file, otherwise --token",
            )),
            (Some(t), None) if t.is_empty() => Err(error::flags("--token must not be empty")),
            (Some(t), None) => Ok(Some(t.clone())),
            (None, Some(path)) => {
                let token = loadfleet_sys::read_secret(path, bounds::MAX_SECRET_BYTES)
                    .map_err(|e| error::flags(format!("--token-file {}: {e}", path.display())))?;
                if token.is_empty() {
                    return Err(error::flags(format!(
                        "--token-file {} is empty; write the shared secret into it",
                        path.display()
                    )));
                }
                Ok(Some(token))
            }
            (None, None) => Ok(None),
        }
    }
}

/// A rate flag: `500` or `500/s`.
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    s.trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{s:?} is not a rate; write requests per second, e.g. 500"))
}
