//! Command-line interface. Flags parse into precise types (durations,
//! rates, thresholds), so a bad value is refused by name before anything runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::thresholds::Threshold;

#[derive(Debug, Parser)]
#[command(
    name = "loadfleet-coordinator",
    version,
    about = "Run a distributed open-model load test and report what really happened"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a load test with a local or remote fleet of agents.
    Run(Box<RunArgs>),
    /// Compare two or more report.json files side by side, with ratios to
    /// the first.
    Compare(CompareArgs),
    /// Check or preview a plan file without sending anything.
    #[command(subcommand)]
    Plan(PlanCommand),
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Validate a plan: exit 0 when it is fine, 2 with every problem (field,
    /// line, fix) when not.
    Check {
        /// The plan file (TOML).
        file: PathBuf,
    },
    /// Show the rate (or clients) per second for the fleet and per agent,
    /// as a table and a small chart.
    Preview {
        /// The plan file (TOML).
        file: PathBuf,
        /// Number of agents to split the load across.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
        agents: u32,
    },
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Reports to compare (report.json files, or the folders holding them);
    /// ratios are relative to the first.
    #[arg(required = true, num_args = 2.., value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProcessArg {
    /// Evenly spaced arrivals.
    Uniform,
    /// Poisson arrivals (seeded, reproducible).
    Poisson,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Plan file (TOML). Flags given with it override the plan's values.
    pub plan: Option<PathBuf>,
    /// Target URL. Without it (and without a plan), a local run starts the
    /// built-in testbed and aims at it.
    #[arg(long)]
    pub url: Option<String>,
    /// Fleet-wide arrival rate in requests per second (open model).
    #[arg(long, value_parser = parse_rate, conflicts_with = "clients")]
    pub rate: Option<f64>,
    /// Closed model: this many clients fleet-wide, each sending its next
    /// request when the previous one completed (plus --think).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub clients: Option<u32>,
    /// Closed model: pause between a response and the client's next request.
    #[arg(long, value_parser = humantime::parse_duration, requires = "clients")]
    pub think: Option<Duration>,
    /// Ramp from 0 to the rate (or client count) over this long, then hold
    /// for the rest of the duration.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ramp: Option<Duration>,
    /// Length of the schedule, warm-up included (e.g. 30s, 2m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Leading part of the schedule whose requests are reported apart.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub warmup: Option<Duration>,
    /// How long agents wait for in-flight requests after the schedule ends
    /// (default 5s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub drain: Option<Duration>,
    /// Arrival process (default uniform).
    #[arg(long, value_enum)]
    pub process: Option<ProcessArg>,
    /// Seed of the Poisson process and random picks (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most requests in flight at once per agent; arrivals beyond are counted
    /// unsent (`concurrency_limit`), never queued (default 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: Option<u32>,
    /// An arrival later than this behind schedule is counted unsent (`late`)
    /// (default 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_lag: Option<Duration>,
    /// Per-request timeout (default 10s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Keep-alive connections per agent (default 64).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: Option<u32>,
    /// The least latency the target can answer with (its known work); a
    /// run whose successes are far faster is flagged NO_EXPERIMENT.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub latency_floor: Option<Duration>,
    /// HTTP method (default GET).
    #[arg(long)]
    pub method: Option<String>,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long)]
    pub body: Option<String>,
    /// Pass/fail rule checked at the end, e.g. 'p99<500ms', 'unsent==0',
    /// 'errors<1%', or per scenario 'checkout.p99<300ms' (repeatable). A
    /// failed one makes the exit status 1.
    #[arg(long = "threshold")]
    pub thresholds: Vec<Threshold>,
    /// Run the plan N times, one after another on the same fleet with fresh
    /// connections; the report keeps each run and adds median, min and max.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Start N agent processes on this machine.
    #[arg(long, conflicts_with = "expect_agents")]
    pub local_agents: Option<u32>,
    /// Wait for N remote agents to join before starting.
    #[arg(long)]
    pub expect_agents: Option<u32>,
    /// Address the control plane listens on (agents dial it).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Shared secret agents must present. Required with --expect-agents;
    /// a local run makes a random one.
    #[arg(long, env = "LOADFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve the control plane over TLS with this certificate chain (PEM);
    /// agents then dial https://HOST:PORT. Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// How long to wait for the expected agents.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub agent_timeout: Duration,
    /// Serve live Prometheus metrics (GET /metrics) on this address while
    /// the run goes, e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Folder for report.json, report.html and the interval log (default: a
    /// fresh loadfleet-out-<time> folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
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

fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{s:?} is not a rate; write requests per second, e.g. 500"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?}: the rate must be a number above 0"));
    }
    if v > crate::plan::MAX_RATE {
        return Err(format!(
            "{s:?}: the rate must be at most {}",
            crate::plan::MAX_RATE
        ));
    }
    Ok(v)
}
