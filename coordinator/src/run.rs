//! `loadfleet-coordinator run`: from flags to a written report.

use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use loadfleet_proto::v1;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::TcpListenerStream;

use crate::cli::RunArgs;
use crate::error::{self, Error};
use crate::fleet::ControlService;
use crate::fleet::{self, Progress, RunSpec};
use crate::local;
use crate::plan;
use crate::report;

/// Agents a local run starts when --local-agents is not given.
const DEFAULT_LOCAL_AGENTS: u32 = 2;

/// Does the URL's host name a loopback address?
fn is_loopback_target(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// The output folder, made and proven writable before any load goes out:
/// a bad `--out` found after the run would lose its results. `--out` may
/// name a folder that exists (it is reused); without it a fresh
/// `loadfleet-out-<UTC time>` folder is made, with `-2`, `-3`, … when a
/// run started in the same second already took the name. Everything that
/// writes into the run's folder (the live files, the report) goes through
/// the folder this returns.
pub fn prepare_out_dir(out: Option<&Path>) -> Result<PathBuf, Error> {
    let dir = match out {
        Some(dir) if dir.exists() && !dir.is_dir() => {
            return Err(error::flags(format!(
                "--out {} is a file, not a folder; give --out a folder path (it is made if missing), or leave --out out for a fresh folder here",
                dir.display()
            )))
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                error::flags(format!(
                    "--out {}: cannot create the folder ({e}); give a folder path you can write to, or leave --out out for a fresh folder here",
                    dir.display()
                ))
            })?;
            dir.to_path_buf()
        }
        None => fresh_out_dir(Path::new(""), std::time::SystemTime::now()).map_err(|e| {
            error::flags(format!(
                "cannot create an output folder in the working folder ({e}); give --out with a folder you can write to"
            ))
        })?,
    };
    let probe = dir.join(".loadfleet-write-test");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            error::flags(format!(
                "--out {}: cannot write into the folder ({e}); give --out a folder you can write to",
                dir.display()
            ))
        })?;
    Ok(dir)
}

/// `loadfleet-out-20261130T101500Z` under `parent`, made with `create_dir`
/// so two runs never share a folder: the one that loses the race for a name
/// takes the next suffix.
fn fresh_out_dir(parent: &Path, now: std::time::SystemTime) -> std::io::Result<PathBuf> {
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let base = format!("loadfleet-out-{stamp}");
    for n in 1..=1000u32 {
        let dir = parent.join(if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{base} and 999 suffixed folders already exist"),
    ))
}

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
fn print_progress(p: &Progress, drain: Duration) {
    let elapsed = p.elapsed.as_secs_f64();
    let total = p.duration.as_secs_f64().max(1e-9);
    let figures = format!(
        "sent {}/s done {}/s · intended {} sent {} unsent {} · errors {} · in flight {} · p99 {} · agents {}",
        p.sent_rps,
        p.completed_rps,
        p.intended,
        p.sent,
        p.unsent,
        p.errors,
        p.in_flight,
        p.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms")),
        p.agents_alive
    );
    let clock = clock(p.elapsed, p.duration, drain);
    if std::io::stderr().is_terminal() {
        let done = (elapsed / total).clamp(0.0, 1.0);
        let width = 24;
        let filled = (done * width as f64).round() as usize;
        eprint!(
            "\r\x1b[2K[{}{}] {:>3.0}% {clock} · {figures}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            done * 100.0
        );
    } else {
        eprintln!("[{clock}] {figures}");
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

/// Runs the whole command; the value is the process exit status.
pub async fn run(args: RunArgs) -> Result<u8, Error> {
    let mut plan = plan::resolve(args.plan.as_deref(), &args.flags)?;
    let (local_agents, expect) = agents(&args, &plan)?;
    let local = local_agents.is_some();
    let token = match (&args.token, local) {
        (Some(t), _) if t.is_empty() => return Err(error::flags("--token must not be empty")),
        (Some(t), _) => t.clone(),
        (None, true) => random_token(),
        (None, false) => {
            return Err(error::flags(
                "--token (or LOADFLEET_TOKEN) is required with --expect-agents (or the plan's [agents] expect), so strangers cannot join the run",
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
        url => check_target_resolves(url, local).await?,
    };
    let output_specs = crate::output::resolve(&args.outputs, args.plan.as_deref(), &|k| {
        std::env::var(k).ok()
    })?;
    let out_dir = prepare_out_dir(args.out.as_deref())?;

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
    let target = match plan.target.url.as_str() {
        plan::TESTBED_URL => {
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
                local::start_testbed(&tb_args, split.as_ref().map(|s| s.target.as_slice())).await?;
            testbed = Some(child);
            eprintln!("testbed listening on {addr} ({})", tb_args.join(" "));
            format!("http://{addr}/")
        }
        url => url.to_string(),
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
    let info = report::PlanInfo::new(&plan, &target, latency_floor, placement);
    let spec = RunSpec {
        scenarios: plan.assignments(&target),
        shares: plan.shares.clone(),
        duration: plan.duration(),
        drain: plan.run.drain,
        max_in_flight: plan.target.max_in_flight,
        max_lag: plan.target.max_lag,
        timeout: plan.target.timeout,
        connections: plan.target.connections,
        interval: Duration::from_secs(1),
        expect_agents: expect,
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
    eprintln!("coordinator listening on {bound}; waiting for {expect} agent(s)");

    let mut agents = Vec::new();
    if let Some(n) = local_agents {
        let url = format!("http://{bound}");
        agents = local::start_agents(n, &url, &token, split.as_ref().map(|s| s.agents.as_slice()))?;
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
            eprintln!("metrics on http://{bound}/metrics");
            let (tx, rx) = tokio::sync::watch::channel(String::new());
            tokio::spawn(crate::metrics::serve(listener, rx));
            Some(tx)
        }
        None => None,
    };
    let drain = spec.drain;
    // The live outputs: what is measured reaches --out as each second
    // settles, so it outlives a coordinator that is killed.
    let (live, live_writer) =
        report::live::LiveOutputs::start(&out_dir, spec.repeats.max(1), info.clone())?;
    let output_labels = crate::output::RunLabels::new(
        args.outputs.out_run_id.as_deref(),
        args.plan.as_deref(),
        &out_dir,
        &info,
        spec.repeats,
    );
    let (sink, outputs) = crate::output::start(&output_specs, &output_labels, Box::new(live))?;
    let results = fleet::run(
        spec.clone(),
        events_rx,
        interrupt,
        Box::new(move |p: &Progress| print_progress(p, drain)),
        metrics,
        Some(sink),
    )
    .await;
    // The fleet is done with the live outputs: let them reach the disk.
    live_writer.finish();
    if std::io::stderr().is_terminal() {
        eprintln!();
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

    let mut reports: Vec<report::Report> =
        results.iter().map(|r| report::build(r, &info)).collect();
    let (mut report, shown) = if reports.len() > 1 {
        report::repeats::combine(reports, &plan.thresholds)
    } else {
        (reports.remove(0), 0)
    };
    outputs.finish(&mut report).await;
    write_outputs(&out_dir, &report, shown, spec.repeats.max(1))?;
    let summary = (|| {
        let mut stdout = std::io::stdout().lock();
        report::text::write_text(&mut stdout, &report, std::io::stdout().is_terminal())?;
        use std::io::Write;
        writeln!(
            stdout,
            "\n  report: {}",
            out_dir.join("report.json").display()
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

/// How long the target's reflection service may take to give the message
/// types.
const REFLECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The message types of the plan's gRPC methods, from the target's
/// reflection service, before any agent is assigned: a target that cannot
/// say them would only give errors, so the run is refused (exit 2) with
/// what to do instead.
async fn reflect(plan: &plan::Plan, target: &str) -> Result<Vec<u8>, Error> {
    let mut services: Vec<String> = plan
        .grpc_methods()
        .iter()
        .filter_map(|m| loadfleet_proto::grpc::method_name(m).ok())
        .map(|m| m.service.to_string())
        .collect();
    services.dedup();
    crate::grpc::reflect(target, &services, REFLECTION_TIMEOUT)
        .await
        .map_err(|e| error::flags(format!("{e}; nothing was sent")))
}

/// How long the target's name may take to resolve before the run is
/// refused (or, with remote agents, goes ahead with a warning).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves the target's host once, before any agent is assigned: a name
/// that does not resolve would only give errors. Local agents share this
/// machine's resolver, so the run is refused (exit 2); remote agents may
/// resolve names this machine cannot (a cluster's internal DNS), so the
/// run goes ahead with a warning, and the agents count each failure as a
/// `dns` error. The addresses serve the localhost-contamination check.
async fn check_target_resolves(url: &str, local: bool) -> Result<Vec<IpAddr>, Error> {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return Ok(Vec::new());
    };
    let Some(host) = uri.host().map(|h| h.trim_matches(['[', ']']).to_string()) else {
        return Ok(Vec::new());
    };
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let resolved = match tokio::time::timeout(
        RESOLVE_TIMEOUT,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(addrs)) => Ok(addrs.map(|a| a.ip()).collect::<Vec<_>>()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", RESOLVE_TIMEOUT.as_secs())),
    };
    match resolved {
        Ok(ips) if !ips.is_empty() => Ok(ips),
        Ok(_) if local => Err(unresolved(url, &host, "no address")),
        Err(why) if local => Err(unresolved(url, &host, &why)),
        Ok(_) | Err(_) => {
            eprintln!(
                "warning: the target host {host:?} of {url} does not resolve on this machine; the remote agents will try their own resolver and count each failure as a dns error"
            );
            Ok(Vec::new())
        }
    }
}

fn unresolved(url: &str, host: &str, why: &str) -> Error {
    error::flags(format!(
        "the target host {host:?} of {url} does not resolve ({why}); nothing was sent. Check the host name in --url (or the plan's target.url)"
    ))
}

/// The final outputs, next to the live ones (`report::live`): the reports;
/// `intervals.csv` once more, from the report, so it also counts snapshots
/// that came in after their second was written; the representative run's
/// interval log as `latency.hlog` with --repeat. A clean end removes
/// `report.partial.json`.
fn write_outputs(
    dir: &Path,
    report: &report::Report,
    shown: usize,
    repeats: usize,
) -> anyhow::Result<()> {
    use report::live;
    let write =
        |name: &str, f: &dyn Fn(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>| {
            let path = dir.join(name);
            let file = std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = std::io::BufWriter::new(file);
            f(&mut w).with_context(|| format!("cannot write {}", path.display()))?;
            use std::io::Write;
            w.flush()
                .with_context(|| format!("cannot write {}", path.display()))
        };
    write("report.json", &|w| report::json::write_json(w, report))?;
    live::replace(&dir.join(live::CSV_NAME), |w| {
        report::csv::write_csv(w, report)
    })?;
    write("report.html", &|w| report::html::write_html(w, report))?;
    if repeats > 1 {
        let (from, _) = live::run_files(dir, shown, repeats);
        let to = dir.join(live::HLOG_NAME);
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    let partial = dir.join(live::PARTIAL_NAME);
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", partial.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_targets_are_recognised() {
        assert!(is_loopback_target("http://127.0.0.1:80/"));
        assert!(is_loopback_target("http://localhost/"));
        assert!(is_loopback_target("http://[::1]:8080/"));
        assert!(!is_loopback_target("http://10.1.2.3/"));
    }

    #[test]
    fn the_clock_counts_the_drain_apart() {
        let s = Duration::from_secs_f64;
        assert_eq!(clock(s(3.0), s(5.0), s(5.0)), "  3.0s/5s");
        assert_eq!(clock(s(5.0), s(5.0), s(5.0)), "  5.0s/5s");
        assert_eq!(clock(s(7.0), s(5.0), s(5.0)), "drain 2.0s/5s");
        // Agents reporting late never push the drain past its limit.
        assert_eq!(clock(s(12.0), s(5.0), s(5.0)), "drain 5.0s/5s");
    }

    #[test]
    fn default_out_dirs_never_collide() {
        let parent = std::env::temp_dir().join(format!("loadfleet-outdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).unwrap();
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_796_033_700);
        let a = fresh_out_dir(&parent, t).unwrap();
        let b = fresh_out_dir(&parent, t).unwrap();
        let c = fresh_out_dir(&parent, t).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name(&a), "loadfleet-out-20261130T101500Z");
        assert_eq!(name(&b), "loadfleet-out-20261130T101500Z-2");
        assert_eq!(name(&c), "loadfleet-out-20261130T101500Z-3");
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
