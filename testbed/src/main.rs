//! `loadfleet-testbed` binary: parse flags, pin CPUs, build the runtime, serve.
//!
//! Exit status: 0 after SIGINT/SIGTERM, 2 for bad input (flags, CPU list),
//! 1 when the server could not run (e.g. the address is in use).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use loadfleet_testbed::{pin_to_cpus, serve, serve_grpc, Cli, Config};
use tracing_subscriber::EnvFilter;

/// Bad flags or values: what clap itself exits with, for consistency.
const EXIT_BAD_INPUT: u8 = 2;
/// The server could not be run.
const EXIT_FAILED: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();

    // Before the runtime exists, so that every worker thread inherits the
    // affinity and the default worker count sees only the pinned CPUs.
    if let Some(cpus) = &cli.cpus {
        if let Err(err) = pin_to_cpus(cpus).with_context(|| format!("--cpus {cpus}")) {
            return fail(EXIT_BAD_INPUT, &err);
        }
    }

    // Every held event stream is a descriptor: tens of thousands of them
    // need more than the usual soft limit of 1,024.
    if let Err(err) = loadfleet_sys::raise_open_files() {
        eprintln!("loadfleet-testbed: warning: cannot raise the open-file limit: {err}");
    }

    let tls = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => match loadfleet_testbed::tls_acceptor(cert, key) {
            Ok(acceptor) => Some(acceptor),
            Err(err) => return fail(EXIT_BAD_INPUT, &err),
        },
        _ => None,
    };
    let runtime = match build_runtime(&cli) {
        Ok(runtime) => runtime,
        Err(err) => return fail(EXIT_FAILED, &err),
    };
    match runtime.block_on(run(cli.listen, Arc::new(cli.config()), tls, cli.grpc)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(EXIT_FAILED, &err),
    }
}

/// Logs to stderr (stdout carries only the readiness line), filtered by
/// RUST_LOG, default "warn".
fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// One worker uses a current-thread runtime: on a single pinned core that
/// avoids cross-thread wake-ups, which is what benchmarks run.
fn build_runtime(cli: &Cli) -> anyhow::Result<tokio::runtime::Runtime> {
    let workers = match cli.workers {
        Some(workers) => workers.get(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    builder
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

/// Binds, announces readiness on stdout, and serves until SIGINT/SIGTERM.
async fn run(
    listen: SocketAddr,
    config: Arc<Config>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    grpc: bool,
) -> anyhow::Result<()> {
    // Signal handlers go in before the readiness line, so a signal sent as
    // soon as the line is read still ends the process cleanly.
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("--listen {listen}: cannot bind"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {local}")
        .and_then(|()| stdout.flush())
        .context("writing the readiness line to stdout")?;
    drop(stdout);

    if grpc {
        return serve_grpc(listener, config, shutdown).await;
    }
    serve(listener, config, tls, shutdown).await;
    Ok(())
}

/// A future that completes on SIGINT or SIGTERM; handlers are installed now.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// A future that completes on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

fn fail(code: u8, err: &anyhow::Error) -> ExitCode {
    eprintln!("loadfleet-testbed: error: {err:#}");
    ExitCode::from(code)
}
