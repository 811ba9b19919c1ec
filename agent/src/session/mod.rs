//! The control stream, as a [`Session`] that moves through explicit
//! [`Phase`]s: join the fleet, answer clock probes, take an assignment, run
//! the workers and stream their snapshots, then wait for the next repeat or
//! the end of the session. Whatever the phase, the agent stops on its own
//! when the coordinator goes quiet (the dead-man switch) or the stream
//! breaks: it never fires without a coordinator. Stopped so mid-run, it
//! then delivers the run's last figures (`deliver`) for up to
//! `--deliver-grace`.

mod connect;
mod cpu;
mod deliver;
mod error;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use loadfleet_proto::bounds;
use loadfleet_proto::handover::Handover;
use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::assignment::{plan_workers, vet};
use crate::config::AgentConfig;
use crate::worker::{self, WorkerEvent, WorkerPlan};

use connect::{connect, hello, message, Clock};
use cpu::CpuSampler;
use deliver::Undelivered;
use error::refusal_or_tls;
pub(crate) use error::{SessionEnd, SessionError};

/// Warns when the open-file limit is below what the assignment may need:
/// running out shows up as `local_address` or `connect` errors that are the
/// agent's, not the target's. The coordinator's report says it too.
fn warn_if_few_files(a: &v1::Assignment, open_files: u64) {
    let needed = loadfleet_proto::bounds::files_needed(
        a.max_in_flight,
        a.max_connections.max(a.connections),
    );
    if open_files != 0 && open_files < needed {
        tracing::warn!(
            "the open-file limit is {open_files}, below the {needed} this assignment may need (max_in_flight {} + connections {} + a margin); raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower max_in_flight",
            a.max_in_flight,
            a.connections
        );
    }
}

/// Runs one session from registration to the end of the last run.
pub(crate) async fn run(config: AgentConfig) -> Result<SessionEnd, SessionError> {
    let clock = Clock(Instant::now());
    let mut client = connect(&config).await?;

    let (out_tx, out_rx) = mpsc::channel::<v1::AgentMessage>(4096);
    out_tx
        .send(hello(&config, &clock))
        .await
        .map_err(|_| SessionError::OutboundClosed)?;
    let request = connect::call(&config, ReceiverStream::new(out_rx))?;
    let mut inbound = match client.session(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return Err(refusal_or_tls(status, &config.coordinator, true).await),
    };

    let (events, mut worker_events) = mpsc::unbounded_channel::<WorkerEvent>();
    let mut session = Session {
        config: &config,
        clock,
        outbound: out_tx,
        events,
        dead_man: Duration::from_secs(3),
        last_heard: Instant::now(),
        phase: Phase::Joining,
        fleet_index: None,
    };
    let mut heartbeat = tokio::time::interval(Duration::from_millis(500));
    let result = loop {
        let step = tokio::select! {
            msg = inbound.message() => session.on_inbound(msg).await,
            Some(ev) = worker_events.recv() => session.on_worker(ev).await,
            _ = heartbeat.tick() => session.on_tick(),
        };
        match step {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(end)) => break Ok(end),
            Err(e) => break Err(e),
        }
    };
    // Stopped mid-run without its coordinator: the workers wind down here
    // and the run's last figures go out on a fresh connection, once this
    // one is closed.
    let last = match &result {
        Err(e) if e.lost_contact() => session.wind_down(e, &mut worker_events).await,
        _ => None,
    };
    session.close(&result, &mut inbound).await;
    drop((inbound, client));
    if let Some(last) = last {
        deliver::report(&config, &last, deliver::deliver(&config, &last).await);
    }
    result
}

/// Where the session stands. Each message moves it at most one step:
/// `Joining` → `Ready` (welcome) → `Running` (assignment) → `Ready` (all
/// workers done) → `Running` (next repeat) … until the coordinator closes
/// the stream.
enum Phase {
    /// Hello sent, no welcome yet (clock probes may already come).
    Joining,
    /// In the fleet with no run going: answering clock probes and waiting
    /// for an assignment — after a run, for the next repeat or the end.
    Ready {
        /// How the last run ended; the session may end well only after one.
        last_run: Option<SessionEnd>,
    },
    /// Workers are running an assignment.
    Running(Run),
}

/// One assignment being carried out.
struct Run {
    /// Cancelled to stop every worker of this run.
    stop: CancellationToken,
    threads: Vec<JoinHandle<()>>,
    workers_running: usize,
    /// Snapshots sent so far, so the coordinator can tell none was lost.
    snapshots: u64,
    in_flight_at_end: u64,
    /// The coordinator stopped this run early.
    cut_short: bool,
    cpu: CpuSampler,
    /// `Assignment.run_key`, quoted when delivering the last figures.
    run_key: u64,
    /// Snapshots the coordinator has not confirmed yet (boxed: a run is
    /// large enough as it is, and `Phase` holds one).
    undelivered: Box<Undelivered>,
    /// The assignment's weights and this agent's index in them, to read
    /// hand-overs with.
    weights: Vec<u32>,
    agent_index: usize,
    /// Hand-overs received so far, shared with the workers.
    handovers: watch::Sender<Arc<[Handover]>>,
    /// The common start and interval of the snapshot grid, and the next
    /// interval whose CPU use is due.
    start: Instant,
    interval: Duration,
    next_cpu_interval: u64,
}

/// One agent's session with its coordinator.
struct Session<'a> {
    config: &'a AgentConfig,
    clock: Clock,
    outbound: mpsc::Sender<v1::AgentMessage>,
    /// Handed to each worker; the session holds it too, so the receiving
    /// end never closes between runs.
    events: mpsc::UnboundedSender<WorkerEvent>,
    /// How long the coordinator may stay silent (its welcome may set it).
    dead_man: Duration,
    last_heard: Instant,
    phase: Phase,
    /// `Welcome.agent_index`, which names this agent when it delivers a
    /// run's last figures.
    fleet_index: Option<u32>,
}

/// What a handler decides: carry on, or end the session well.
type Step = Result<ControlFlow<SessionEnd>, SessionError>;

impl Session<'_> {
    async fn on_inbound(
        &mut self,
        msg: Result<Option<v1::CoordinatorMessage>, tonic::Status>,
    ) -> Step {
        let msg = match msg {
            Ok(Some(m)) => m,
            // A coordinator may run the plan several times (--repeat) over
            // one session: it closes the stream after the last run.
            Ok(None) => {
                return match self.phase {
                    Phase::Ready {
                        last_run: Some(end),
                    } => Ok(ControlFlow::Break(end)),
                    _ => Err(SessionError::Closed),
                }
            }
            Err(status) => {
                let joining = matches!(self.phase, Phase::Joining);
                return Err(refusal_or_tls(status, &self.config.coordinator, joining).await);
            }
        };
        self.last_heard = Instant::now();
        match msg.kind {
            Some(coordinator_message::Kind::Welcome(w)) => {
                if let Err(e) = bounds::check_welcome(&w) {
                    self.refuse(e.to_string()).await;
                    return Err(SessionError::WelcomeRefused(e));
                }
                if w.dead_man_secs > 0 {
                    self.dead_man = Duration::from_secs(u64::from(w.dead_man_secs));
                }
                self.fleet_index = Some(w.agent_index);
                if matches!(self.phase, Phase::Joining) {
                    self.phase = Phase::Ready { last_run: None };
                }
                // Plain lines on stderr, as the coordinator prints its side:
                // whoever watches an agent's log sees it join, take its
                // share and finish.
                self.say(&format!("joined the fleet as agent #{}", w.agent_index));
                Ok(ControlFlow::Continue(()))
            }
            Some(coordinator_message::Kind::Ping(p)) => self.on_ping(p).await,
            Some(coordinator_message::Kind::Assignment(a)) => self.on_assignment(a).await,
            Some(coordinator_message::Kind::Stop(s)) => {
                tracing::warn!("coordinator asked to stop: {}", s.reason);
                match &mut self.phase {
                    // The workers wind down; the run ends when they are done.
                    Phase::Running(run) => {
                        run.cut_short = true;
                        run.stop.cancel();
                        Ok(ControlFlow::Continue(()))
                    }
                    _ => Ok(ControlFlow::Break(SessionEnd::Stopped)),
                }
            }
            Some(coordinator_message::Kind::Takeover(t)) => self.on_takeover(t),
            Some(coordinator_message::Kind::Standby(s)) => {
                // Joined after the run began: no share of it. Stay
                // connected (heartbeats keep the dead-man switch quiet)
                // until a later run welcomes us or the coordinator ends.
                tracing::warn!("standing by: {}", s.reason);
                Ok(ControlFlow::Continue(()))
            }
            Some(coordinator_message::Kind::Heartbeat(hb)) => {
                if let Phase::Running(run) = &mut self.phase {
                    run.undelivered.merged(hb.snapshots_merged);
                }
                Ok(ControlFlow::Continue(()))
            }
            None => Ok(ControlFlow::Continue(())),
        }
    }

    /// Another agent was lost: from the stated instant this agent also
    /// sends its part of the lost agent's arrivals. The workers pick the
    /// hand-over up from the shared list.
    fn on_takeover(&mut self, t: v1::Takeover) -> Step {
        let Phase::Running(run) = &mut self.phase else {
            // The run is over here: there is nothing left to take over.
            return Ok(ControlFlow::Continue(()));
        };
        let survivors: Vec<usize> = t.survivors.iter().map(|&s| s as usize).collect();
        let lost = t.lost_agent_index as usize;
        if lost == run.agent_index || !survivors.contains(&run.agent_index) {
            return Err(SessionError::BadTakeover(format!(
                "agent {lost}'s arrivals go to agents {survivors:?}, which leaves out this agent ({})",
                run.agent_index
            )));
        }
        let handover = Handover::new(lost, t.from_ns_after_start, survivors, &run.weights)
            .map_err(|e| SessionError::BadTakeover(e.to_string()))?;
        tracing::warn!(
            "agent {lost} was lost: taking over part of its arrivals from {:.1}s after the start",
            t.from_ns_after_start as f64 / 1e9
        );
        run.handovers.send_modify(|list| {
            let mut all = list.to_vec();
            all.push(handover);
            *list = all.into();
        });
        Ok(ControlFlow::Continue(()))
    }

    /// A clock probe: stamp when it arrived and when the answer leaves.
    async fn on_ping(&mut self, p: v1::Ping) -> Step {
        let recv = self.clock.now_ns();
        let pong = message(agent_message::Kind::Pong(v1::Pong {
            seq: p.seq,
            coordinator_send_ns: p.coordinator_send_ns,
            agent_recv_ns: recv,
            agent_send_ns: self.clock.now_ns(),
        }));
        self.outbound
            .send(pong)
            .await
            .map_err(|_| SessionError::OutboundClosed)?;
        Ok(ControlFlow::Continue(()))
    }

    /// Checks the assignment, then starts its workers: `Ready` → `Running`.
    async fn on_assignment(&mut self, a: v1::Assignment) -> Step {
        if matches!(self.phase, Phase::Running(_)) {
            return Err(SessionError::AssignmentDuringRun);
        }
        let cpu = CpuSampler::new();
        if let Err(refused) = vet(&a, &self.config.allow_targets, self.clock.now_ns()) {
            self.refuse(refused.to_string()).await;
            return Err(SessionError::AssignmentRefused(refused));
        }
        warn_if_few_files(&a, self.config.open_files);
        let start = self.clock.0 + Duration::from_nanos(a.start_at_agent_ns);
        let plans = plan_workers(&a, self.config, start).map_err(SessionError::BadAssignment)?;
        let stop = CancellationToken::new();
        let workers = plans.len();
        let (handovers, handovers_rx) = watch::channel::<Arc<[Handover]>>(Arc::from(Vec::new()));
        // Running before any worker starts, so a failure to start the rest
        // still stops those already going.
        self.phase = Phase::Running(Run {
            stop: stop.clone(),
            threads: Vec::with_capacity(workers),
            workers_running: workers,
            snapshots: 0,
            in_flight_at_end: 0,
            cut_short: false,
            cpu,
            run_key: a.run_key,
            undelivered: Box::default(),
            weights: a.weights.clone(),
            agent_index: a.agent_index as usize,
            handovers,
            start,
            interval: Duration::from_nanos(a.interval_ns),
            next_cpu_interval: 0,
        });
        for plan in plans {
            let thread = spawn_worker(
                plan,
                self.events.clone(),
                stop.clone(),
                handovers_rx.clone(),
            )?;
            if let Phase::Running(run) = &mut self.phase {
                run.threads.push(thread);
            }
        }
        let total: u64 = a.weights.iter().map(|&w| u64::from(w)).sum();
        let mine = a.weights.get(a.agent_index as usize).copied().unwrap_or(0);
        self.say(&format!(
            "assigned {:.1}% of the schedule, {workers} worker(s), starting in {:.1}s",
            100.0 * f64::from(mine) / total.max(1) as f64,
            start
                .saturating_duration_since(Instant::now())
                .as_secs_f64()
        ));
        Ok(ControlFlow::Continue(()))
    }

    /// One line of what the agent does, for whoever watches its log.
    fn say(&self, what: &str) {
        if !self.config.quiet {
            eprintln!("loadfleet-agent {}: {what}", self.config.id);
        }
    }

    /// Tells the coordinator why this agent will not go on; its report
    /// names the reason.
    async fn refuse(&self, reason: String) {
        let refusal = message(agent_message::Kind::Refusal(v1::Refusal { reason }));
        let _ = self.outbound.send(refusal).await;
    }

    async fn on_worker(&mut self, event: WorkerEvent) -> Step {
        match event {
            WorkerEvent::Snapshots(snaps) => self.on_snapshots(snaps).await,
            WorkerEvent::Done { in_flight_at_end } => {
                let Phase::Running(run) = &mut self.phase else {
                    return Ok(ControlFlow::Continue(()));
                };
                run.in_flight_at_end += in_flight_at_end;
                run.workers_running -= 1;
                if run.workers_running == 0 {
                    self.finish_run().await;
                }
                Ok(ControlFlow::Continue(()))
            }
            WorkerEvent::Frozen(gap) => Err(SessionError::Frozen(gap)),
        }
    }

    /// Streams closed intervals to the coordinator.
    async fn on_snapshots(&mut self, mut snaps: Vec<v1::Snapshot>) -> Step {
        if let Phase::Running(run) = &mut self.phase {
            for s in &mut snaps {
                run.snapshots += 1;
                s.seq = run.snapshots;
                // Kept until the coordinator confirms it, in case it is
                // lost on the way, or never leaves because the stream did.
                run.undelivered.keep(s);
            }
        }
        for s in snaps {
            // A coordinator that stopped reading fills the queue; waiting
            // on it must not outlast the dead-man switch.
            let sent = tokio::time::timeout(
                self.dead_man,
                self.outbound
                    .send(message(agent_message::Kind::Snapshot(s))),
            )
            .await;
            match sent {
                Ok(Ok(())) => {}
                // The stream is gone: stop firing; the inbound side says why.
                Ok(Err(_)) => {
                    if let Phase::Running(run) = &self.phase {
                        run.stop.cancel();
                    }
                    break;
                }
                Err(_) => return Err(SessionError::NotReading(self.dead_man)),
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Every worker is done: the last partial interval's CPU use, then
    /// `Finished`, and `Running` → `Ready`.
    async fn finish_run(&mut self) {
        let Phase::Running(mut run) =
            std::mem::replace(&mut self.phase, Phase::Ready { last_run: None })
        else {
            return;
        };
        let index = Instant::now()
            .saturating_duration_since(run.start)
            .as_nanos() as u64
            / run.interval.as_nanos().max(1) as u64;
        run.snapshots += 1;
        let cpu = message(agent_message::Kind::Snapshot(v1::Snapshot {
            seq: run.snapshots,
            ..run.cpu.snapshot(index)
        }));
        let _ = self.outbound.send(cpu).await;
        self.say(&format!(
            "finished{}, {} request(s) still in flight",
            if run.cut_short {
                " (stopped early)"
            } else {
                ""
            },
            run.in_flight_at_end
        ));
        let fin = message(agent_message::Kind::Finished(v1::Finished {
            in_flight_at_end: run.in_flight_at_end,
            cut_short: run.cut_short,
            snapshots: run.snapshots,
        }));
        let _ = self.outbound.send(fin).await;
        for t in run.threads {
            let _ = t.join();
        }
        self.phase = Phase::Ready {
            last_run: Some(if run.cut_short {
                SessionEnd::Stopped
            } else {
                SessionEnd::Finished
            }),
        };
    }

    /// Twice a second: the dead-man check, a heartbeat, and the CPU use of
    /// an interval that just closed.
    fn on_tick(&mut self) -> Step {
        if self.last_heard.elapsed() > self.dead_man {
            return Err(SessionError::Silent(self.last_heard.elapsed()));
        }
        let hb = message(agent_message::Kind::Heartbeat(v1::Heartbeat {
            now_ns: self.clock.now_ns(),
            snapshots_merged: 0,
        }));
        if self.outbound.try_send(hb).is_err() {
            tracing::debug!("outbound queue full; skipping a heartbeat");
        }
        // Per-interval CPU use, on the same interval grid as the workers.
        if let Phase::Running(run) = &mut self.phase {
            let boundary = run.start + run.interval * (run.next_cpu_interval as u32 + 1);
            if Instant::now() >= boundary {
                let cpu = v1::Snapshot {
                    seq: run.snapshots + 1,
                    ..run.cpu.snapshot(run.next_cpu_interval)
                };
                // A snapshot that found the queue full is dropped without
                // using up its sequence number, so the coordinator sees no
                // gap (only this interval's CPU figure is missing).
                let kept = cpu.clone();
                if self
                    .outbound
                    .try_send(message(agent_message::Kind::Snapshot(cpu)))
                    .is_ok()
                {
                    run.snapshots += 1;
                    run.undelivered.keep(&kept);
                }
                run.next_cpu_interval += 1;
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Ends the session: nothing keeps firing, and after a good end or a
    /// refusal (which must reach the coordinator) the outbound queue drains
    /// and the coordinator closes the stream.
    async fn close(
        self,
        result: &Result<SessionEnd, SessionError>,
        inbound: &mut tonic::Streaming<v1::CoordinatorMessage>,
    ) {
        let Session {
            outbound, phase, ..
        } = self;
        if let Phase::Running(run) = &phase {
            run.stop.cancel();
        }
        if matches!(
            result,
            Ok(_) | Err(SessionError::AssignmentRefused(_) | SessionError::WelcomeRefused(_))
        ) {
            drop(outbound);
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while let Ok(Some(_)) = inbound.message().await {}
            })
            .await;
        }
        if let (Ok(_), Phase::Running(run)) = (result, phase) {
            for t in run.threads {
                let _ = t.join();
            }
        }
    }
}

fn spawn_worker(
    plan: WorkerPlan,
    events: mpsc::UnboundedSender<WorkerEvent>,
    stop: CancellationToken,
    handovers: worker::Handovers,
) -> Result<JoinHandle<()>, SessionError> {
    let name = format!("worker-{}", plan.worker_index);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(SessionError::Spawn)?;
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            crate::timer::tighten_timer_slack();
            runtime.block_on(worker::run(plan, events, stop, handovers))
        })
        .map_err(SessionError::Spawn)
}
