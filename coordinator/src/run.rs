//! `loadfleet-coordinator run`: from flags to a written report.

mod out;
mod target;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use loadfleet_proto::v1;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::TcpListenerStream;

use crate::cli::RunArgs;
use crate::console::Console;
use crate::error::{self, Error};
use crate::fleet::ControlService;
use crate::fleet::{self, Progress, RunSpec};
use crate::local;
use crate::plan;
use crate::report;
pub use out::prepare_out_dir;
use out::write_outputs;
use target::{check_target_resolves, is_loopback_target, reflect};

/// Agents a local run starts when --local-agents is not given.
const DEFAULT_LOCAL_AGENTS: u32 = 2;

/// A random token for a local run, from the OS's randomness.
fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The live view: a bar with elapsed/remaining and the current rates on a
/// terminal, one plain line per second otherwise (logs, CI). After the
/// schedule ends the clock counts the drain against its own limit, so a
/// line never reads `[10.0s/5s]`.
fn print_progress(console: &Console, p: &Progress, drain: Duration) {
    let elapsed = p.elapsed.as_secs_f64();
    let total = p.duration.as_secs_f64().max(1e-9);
    let figures = format!(
        "sent {}/s done {}/s · intended {} sent {} unsent {} · failures {} (errors {}) · in flight {} · p99 {} · agents {}",
        p.sent_rps,
        p.completed_rps,
        p.intended,
        p.sent,
        p.unsent,
        p.failures,
        p.errors,
        p.in_flight,
        p.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms")),
        p.agents_alive
    );
    let clock = clock(p.elapsed, p.duration, drain);
    if console.is_terminal() {
        let done = (elapsed / total).clamp(0.0, 1.0);
        let width = 24;
        let filled = (done * width as f64).round() as usize;
        console.redraw(&format!(
            "[{}{}] {:>3.0}% {clock} · {figures}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            done * 100.0
        ));
    } else {
        console.line(&format!("[{clock}] {figures}"));
    }
}

/// `  3.0s/5s` while the schedule runs, `drain 2.0s/5s` after it.
fn clock(elapsed: Duration, duration: Duration, drain: Duration) -> String {
    let total = duration.as_secs_f64();
    match elapsed.checked_sub(duration) {
        Some(over) if !over.is_zero() => format!(
            "drain {:.1}s/{:.0}s",
            over.as_secs_f64().min(drain.as_secs_f64()),
            drain.as_secs_f64()
        ),
        _ => format!("{:>5.1}s/{total:.0}s", elapsed.as_secs_f64()),
    }
}

/// Local agents to start (none: the fleet is remote), and how many agents
/// the run waits for. The plan's `[agents] expect` asks for remote agents
/// as `--expect-agents` does; `--local-agents` overrides it.
fn agents(args: &RunArgs, plan: &plan::Plan) -> Result<(Option<u32>, usize), Error> {
    if args.failures_warn > args.failures_error {
        return Err(error::flags(format!(
            "--failures-warn {:.0}% is above --failures-error {:.0}%; the warning must come first",
            args.failures_warn * 100.0,
            args.failures_error * 100.0
        )));
    }
    let remote = match (args.local_agents, args.expect_agents) {
        (Some(0), _) => return Err(error::flags("--local-agents must be at least 1")),
        (_, Some(0)) => return Err(error::flags("--expect-agents must be at least 1")),
        (Some(_), Some(_)) => {
            return Err(error::flags(
                "give either --local-agents or --expect-agents, not both",
            ))
        }
        (Some(_), None) => None,
        (None, Some(n)) => Some(n),
        (None, None) => plan.shares.expect,
    };
    Ok(match remote {
        Some(n) => (None, n as usize),
        None => {
            let n = args.local_agents.unwrap_or(DEFAULT_LOCAL_AGENTS);
            (Some(n), n as usize)
        }
    })
}

/// How many of the expected agents the run may start with: all of them
/// unless `--min-agents` (or the plan's `[agents] min`) says fewer.
fn min_agents(args: &RunArgs, plan: &plan::Plan, expect: usize) -> Result<usize, Error> {
    let Some(min) = args.min_agents.or(plan.shares.min) else {
        return Ok(expect);
    };
    let min = min as usize;
    if min > expect {
        return Err(error::flags(format!(
            "--min-agents {min} is more than the {expect} agent(s) the run waits for; it must be at most --expect-agents"
        )));
    }
    Ok(min)
}

/// Runs the whole command; the value is the process exit status.
pub async fn run(args: RunArgs) -> Result<u8, Error> {
    run_steps(args, None).await
}

/// Every flag laid over the plan of `args`.
fn flags(args: &RunArgs, search: Option<plan::SearchFlags>) -> plan::Flags {
    plan::Flags {
        plan: args.flags.clone(),
        outputs: args.outputs.clone(),
        search,
    }
}

/// `run`, or with `search` the search's sequence of steps on the same
/// fleet and target: the search picks each step's rate, and writes its
/// own outputs instead of the one report.
pub async fn run_steps(args: RunArgs, search: Option<plan::SearchFlags>) -> Result<u8, Error> {
    let console = Console::stderr();
    let searching = search.is_some();
    let mut plan = plan::resolve_all(args.plan.as_deref(), &flags(&args, search))?;
    let mut search = match searching {
        true => Some(crate::search::Driver::new(
            crate::search::Settings::from_plan(&plan.search)?,
        )),
        false => None,
    };
    if let Some(search) = &search {
        search.prepare_plan(&mut plan)?;
    }
    let (local_agents, expect) = agents(&args, &plan)?;
    let local = local_agents.is_some();
    let token = match (args.token()?, local) {
        (Some(t), _) => t,
        (None, true) => random_token(),
        (None, false) => {
            return Err(error::flags(
                "--token (or LOADFLEET_TOKEN), or --token-file (or LOADFLEET_TOKEN_FILE), is required with --expect-agents (or the plan's [agents] expect), so strangers cannot join the run",
            ))
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(_), Some(_)) if local => {
            return Err(error::flags(
                "--tls-cert secures agents on other hosts; a local run stays on loopback, so leave it out (or use --expect-agents)",
            ))
        }
        (Some(cert), Some(key)) => {
            let read = |flag: &str, p: &Path| {
                std::fs::read(p).map_err(|e| error::flags(format!("{flag} {}: {e}", p.display())))
            };
            let tls = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(read("--tls-cert", cert)?, read("--tls-key", key)?),
            );
            // Client authentication is required (tonic's default once a
            // client CA is set): an agent without a certificate from this CA
            // fails the handshake before it can show any token.
            Some(match &args.client_ca {
                Some(ca) => tls.client_ca_root(tonic::transport::Certificate::from_pem(read("--client-ca", ca)?)),
                None => tls,
            })
        }
        _ => None,
    };
    if args.client_ca.is_some() && tls.is_none() {
        return Err(error::flags(if local {
            "--client-ca checks agents on other hosts; a local run stays on loopback, so leave it out (or use --expect-agents with --tls-cert/--tls-key)"
        } else {
            "--client-ca needs the control plane on TLS: add --tls-cert and --tls-key (the coordinator's own certificate and key)"
        }));
    }
    if plan.target.url == plan::TESTBED_URL && !local {
        return Err(error::flags(
            "--url is required with --expect-agents or the plan's [agents] expect (the built-in testbed only runs locally)",
        ));
    }
    let target_ips = match plan.target.url.as_str() {
        plan::TESTBED_URL => Vec::new(),
        url => check_target_resolves(url, local, &console).await?,
    };
    let mut output_specs = crate::output::specs(&plan.outputs, &|k| std::env::var(k).ok())?;
    if search.is_some() && !output_specs.is_empty() {
        // A search's steps are reports of their own, written to --out.
        console.notice(
            "live outputs ([[output]], --out-*) are not sent during a search; each step's report is kept in --out",
        );
        output_specs.clear();
    }
    // The local programs are found before anything starts: one missing is
    // said at once, not after the testbed or the coordinator came up.
    let testbed_bin = (plan.target.url == plan::TESTBED_URL)
        .then(|| local::sibling_binary("loadfleet-testbed"))
        .transpose()?;
    let agent_bin = local_agents
        .map(|_| local::sibling_binary("loadfleet-agent"))
        .transpose()?;
    let out_dir = prepare_out_dir(args.out.as_deref(), args.overwrite)?;

    let split = if local {
        local::split_cpus(&local::allowed_cpus())
    } else {
        None
    };

    // The built-in target, when no URL was given.
    let mut testbed = None;
    // The built-in testbed's floor is its configured delay.
    let latency_floor = match plan.target.url.as_str() {
        plan::TESTBED_URL => plan.target.latency_floor.or(Some(args.testbed_delay)),
        _ => plan.target.latency_floor,
    };
    let target = match &testbed_bin {
        Some(bin) => {
            let mut tb_args = vec![
                "--delay".to_string(),
                humantime::format_duration(args.testbed_delay).to_string(),
            ];
            if args.flags.grpc {
                tb_args.push("--grpc".to_string());
            }
            if let Some(pool) = args.testbed_pool {
                tb_args.extend([
                    "--pool".to_string(),
                    pool.to_string(),
                    "--pool-timeout".to_string(),
                    humantime::format_duration(args.testbed_pool_timeout).to_string(),
                ]);
            }
            let (child, addr) =
                local::start_testbed(bin, &tb_args, split.as_ref().map(|s| s.target.as_slice()))
                    .await?;
            testbed = Some(child);
            console.line(&format!(
                "testbed listening on {addr} ({})",
                tb_args.join(" ")
            ));
            format!("http://{addr}/")
        }
        None => plan.target.url.clone(),
    };
    if plan.target.grpc_source == Some(plan::GrpcSource::Reflection) && plan.has_grpc() {
        let descriptors = reflect(&plan, &target).await?;
        plan.set_grpc_descriptors(descriptors).map_err(|mut e| {
            // Name the plan file, or the flags that made the request.
            match &args.plan {
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
            e
        })?;
    }
    let placement = if local {
        let pinning = match (&split, testbed.is_some()) {
            (Some(s), true) => format!(
                "target pinned to CPU {} and agents to CPU {}",
                local::cpu_list(&s.target),
                local::cpu_list(&s.agents)
            ),
            (Some(s), false) => format!("agents pinned to CPU {}", local::cpu_list(&s.agents)),
            (None, _) => "a single CPU: nothing could be pinned apart".to_string(),
        };
        report::Placement::Local { pinning }
    } else {
        report::Placement::Remote {
            loopback: is_loopback_target(&target),
            target_ips,
        }
    };
    let mut info = report::PlanInfo::new(&plan, &target, latency_floor, placement);
    info.failure_limits = report::FailureLimits {
        warn: args.failures_warn,
        error: args.failures_error,
    };
    let mut spec = RunSpec {
        scenarios: plan.assignments(&target),
        shares: plan.shares.clone(),
        duration: plan.duration(),
        drain: plan.run.drain,
        max_in_flight: plan.target.max_in_flight,
        max_lag: plan.target.max_lag,
        timeout: plan.target.timeout,
        connections: plan.target.connections,
        max_connections: plan.target.max_connections,
        interval: Duration::from_secs(1),
        expect_agents: expect,
        min_agents: min_agents(&args, &plan, expect)?,
        repeats: args.repeat as usize,
        on_agent_loss: plan.run.on_agent_loss,
        protocol: plan.target.protocol,
        tls: plan.tls.to_proto(),
        agent_timeout: if local {
            Duration::from_secs(20)
        } else {
            args.agent_timeout
        },
    };
    if let Some(search) = &mut search {
        search.prepare_spec(&mut spec, &info, &out_dir, &console)?;
    }

    // The control plane.
    let listen: SocketAddr = match (args.listen, local) {
        (Some(a), _) => a,
        (None, true) => SocketAddr::from(([127, 0, 0, 1], 0)),
        (None, false) => SocketAddr::from(([0, 0, 0, 0], 7070)),
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("--listen {listen}: cannot bind the control plane"))?;
    let bound = listener.local_addr().context("control plane address")?;
    let (events_tx, events_rx) = mpsc::channel(4096);
    let service = ControlService::new(token.clone(), events_tx);
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let mut builder = tonic::transport::Server::builder().tcp_nodelay(true);
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| error::flags(format!("--tls-cert/--tls-key: {e}")))?;
    }
    let server = tokio::spawn(
        builder
            .add_service(v1::control_server::ControlServer::new(service))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = shutdown_rx.await;
            }),
    );
    console.line(&format!(
        "coordinator listening on {bound}; waiting for {expect} agent(s)"
    ));

    let mut agents = Vec::new();
    if let (Some(n), Some(bin)) = (local_agents, &agent_bin) {
        let url = format!("http://{bound}");
        let cpus = split.as_ref().map(|s| s.agents.as_slice());
        agents = local::start_agents(bin, n, &url, &token, cpus)?;
    }

    // Ctrl-C and SIGTERM (Kubernetes, docker stop) both cut the run short
    // and keep what was measured. Once registered, tokio's handler stays in
    // place, so a SIGTERM that arrives while the report is being written
    // cannot kill the process half-way through it.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch for SIGTERM")?;
    let interrupt = async move {
        tokio::select! {
            r = tokio::signal::ctrl_c() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            _ = terminate.recv() => {}
        }
    };
    let metrics = match args.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}: cannot bind"))?;
            let bound = listener.local_addr().context("metrics address")?;
            console.line(&format!("metrics on http://{bound}/metrics"));
            let (tx, rx) = tokio::sync::watch::channel(String::new());
            tokio::spawn(crate::metrics::serve(listener, rx));
            Some(tx)
        }
        None => None,
    };
    let drain = spec.drain;
    // The live outputs: what is measured reaches --out as each second
    // settles, so it outlives a coordinator that is killed.
    // A search keeps each step's report instead (`search::Driver`).
    let (sink, live_outputs) = match search {
        Some(_) => (None, None),
        None => {
            let (live, live_writer) = report::live::LiveOutputs::start(
                &out_dir,
                spec.repeats.max(1),
                info.clone(),
                console.clone(),
            )?;
            let output_labels = crate::output::RunLabels::new(
                args.outputs.out_run_id.as_deref(),
                args.plan.as_deref(),
                &out_dir,
                &info,
                spec.repeats,
            );
            let (sink, outputs) =
                crate::output::start(&output_specs, &output_labels, Box::new(live))?;
            (Some(sink), Some((live_writer, outputs)))
        }
    };
    let shown = console.clone();
    let fleet_outputs = fleet::Outputs {
        progress: Box::new(move |p: &Progress| print_progress(&shown, p, drain)),
        metrics,
        sink,
        console: console.clone(),
    };
    let (results, search) = match search {
        Some(search) => {
            let (next, search) = search.into_next();
            let results =
                fleet::run_sequence(spec.clone(), events_rx, interrupt, fleet_outputs, next).await;
            (results, Some(search))
        }
        None => (
            fleet::run_with(spec.clone(), events_rx, interrupt, fleet_outputs).await,
            None,
        ),
    };
    // The fleet is done with the live outputs: let them reach the disk.
    let outputs = live_outputs.map(|(live_writer, outputs)| {
        live_writer.finish();
        outputs
    });
    if console.is_terminal() {
        // Ends the progress bar's line.
        console.line("");
    }

    let _ = shutdown_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(3), server).await;
    for mut a in agents {
        if tokio::time::timeout(Duration::from_secs(5), a.wait())
            .await
            .is_err()
        {
            let _ = a.kill().await;
        }
    }
    if let Some(mut t) = testbed {
        let _ = t.kill().await;
    }

    // A search writes its own outputs; a run always has its live ones.
    let outputs = match (search, outputs) {
        (Some(search), _) => return search.finish(&results, &out_dir),
        (None, Some(outputs)) => outputs,
        (None, None) => {
            return Err(anyhow::anyhow!("the run's live outputs were not started").into())
        }
    };
    let mut reports: Vec<report::Report> =
        results.iter().map(|r| report::build(r, &info)).collect();
    let (mut report, shown) = if reports.len() > 1 {
        report::repeats::combine(reports, &plan.thresholds)
    } else {
        (reports.remove(0), 0)
    };
    report::shape::name_loads(&mut report, &plan);
    outputs.finish(&mut report).await;
    write_outputs(&out_dir, &report, shown, spec.repeats.max(1))?;
    let summary = (|| {
        let mut stdout = std::io::stdout().lock();
        report::text::write_text(&mut stdout, &report, std::io::stdout().is_terminal())?;
        use std::io::Write;
        writeln!(
            stdout,
            "\n  report: {} (page: {})",
            out_dir.join("report.json").display(),
            out_dir.join("report.html").display()
        )
    })();
    match summary {
        // `run … | head`: the report is written, and the verdict still
        // decides the exit status.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write the summary"))?
        }
        _ => Ok(report::exit_status(&report)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_counts_the_drain_apart() {
        let s = Duration::from_secs_f64;
        assert_eq!(clock(s(3.0), s(5.0), s(5.0)), "  3.0s/5s");
        assert_eq!(clock(s(5.0), s(5.0), s(5.0)), "  5.0s/5s");
        assert_eq!(clock(s(7.0), s(5.0), s(5.0)), "drain 2.0s/5s");
        // Agents reporting late never push the drain past its limit.
        assert_eq!(clock(s(12.0), s(5.0), s(5.0)), "drain 5.0s/5s");
    }
}
