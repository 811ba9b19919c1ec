//! `loadfleet-swarm`: N synthetic agents against one coordinator, for the
//! scale benchmark (`bench/scale.sh`) and `coordinator/tests/it/scale.rs`.
//! Not a product binary: it sends no HTTP load.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use loadfleet_swarm::session::{self, Swarm};
use loadfleet_swarm::summary::summary;
use tokio::sync::Semaphore;

/// N synthetic agents, each with its own gRPC session, in one process.
#[derive(Debug, Parser)]
#[command(name = "loadfleet-swarm")]
struct Cli {
    /// Coordinator address, e.g. http://127.0.0.1:7070.
    #[arg(long)]
    coordinator: String,
    /// The coordinator's --token.
    #[arg(long, env = "LOADFLEET_TOKEN", hide_env_values = true)]
    token: String,
    /// How many agents to open.
    #[arg(long)]
    agents: usize,
    /// Source addresses for the agents' connections, taken in turn
    /// (repeatable or comma-separated, e.g. 127.0.0.1,127.0.0.2), so a very
    /// large swarm does not run out of ports on one address.
    #[arg(long = "source", value_delimiter = ',')]
    sources: Vec<IpAddr>,
    /// Where to write the summary (JSON).
    #[arg(long)]
    out: PathBuf,
    /// Connections opened at once while joining.
    #[arg(long, default_value_t = 64)]
    connect_burst: usize,
    /// Give up (and write what was seen) after this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("loadfleet-swarm: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let swarm = Arc::new(Swarm::new(cli.coordinator.clone(), cli.token.clone()));
        let burst = Arc::new(Semaphore::new(cli.connect_burst.max(1)));
        let mut tasks = Vec::with_capacity(cli.agents);
        for i in 0..cli.agents {
            let source = (!cli.sources.is_empty()).then(|| cli.sources[i % cli.sources.len()]);
            let (swarm, burst) = (swarm.clone(), burst.clone());
            tasks.push(tokio::spawn(async move {
                // Held only while connecting and saying hello.
                let permit = burst.acquire_owned().await;
                session::run(swarm, i, source, permit.ok()).await
            }));
        }
        let deadline = tokio::time::Instant::now() + cli.timeout;
        let mut outcomes = Vec::with_capacity(cli.agents);
        for (i, t) in tasks.into_iter().enumerate() {
            let abort = t.abort_handle();
            match tokio::time::timeout_at(deadline, t).await {
                Ok(Ok(o)) => outcomes.push(o),
                Ok(Err(e)) => outcomes.push(session::Outcome {
                    error: Some(format!("task failed: {e}")),
                    ..Default::default()
                }),
                Err(_) => {
                    abort.abort();
                    outcomes.push(session::Outcome {
                        error: Some(format!(
                            "swarm-{i} still running after --timeout {:?}",
                            cli.timeout
                        )),
                        ..Default::default()
                    });
                }
            }
        }
        let sent = swarm.ledger.sent();
        let report = summary(&outcomes, &sent);
        std::fs::write(&cli.out, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("cannot write --out {}", cli.out.display()))?;
        let ok = outcomes
            .iter()
            .all(|o| o.error.is_none() && o.closed_cleanly);
        eprintln!(
            "swarm: {} agents, {} finished, {} failed; {} snapshots sent; summary in {}",
            outcomes.len(),
            outcomes.iter().filter(|o| o.finished.is_some()).count(),
            outcomes.iter().filter(|o| o.error.is_some()).count(),
            sent.snapshots,
            cli.out.display()
        );
        Ok(ok)
    })
}
