//! The fleet actor in process: the real tonic service and actor, scripted
//! fake agents over in-memory pipes, paused time. Covers what the process
//! tests cannot pin down: who gets which slice, agents that never say
//! hello or leave mid-run, a stop during the clock probes, repeats, and
//! what the user is told.

use crate::harness;

use std::time::Duration;

use harness::{spec, Fleet, OnAssignment, Script};
use loadfleet_coordinator::console::Console;
use loadfleet_coordinator::fleet::{self, FleetEvent, LastSeen, Loss};
use loadfleet_coordinator::plan::OnAgentLoss;
use loadfleet_proto::v1::{self, agent_message, coordinator_message};
use loadfleet_proto::vocab::{AgentStatus, UnsentReason};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

fn never() -> std::future::Pending<()> {
    std::future::pending()
}

#[tokio::test(start_paused = true)]
async fn weighted_agents_get_their_weight_and_index() {
    let mut spec = spec(3);
    spec.shares.by_label = [("big".to_string(), 3), ("mid".to_string(), 2)].into();
    let mut fleet = Fleet::start(spec, never());
    let big = fleet.join(Script::new("big")).await;
    let small = fleet.join(Script::new("small")).await;
    let mid = fleet.join(Script::new("mid")).await;
    let results = fleet.finish().await;

    for (index, log) in [&big, &small, &mid].into_iter().enumerate() {
        let assignments = log.assignments();
        assert_eq!(assignments.len(), 1, "agent #{index}");
        assert_eq!(assignments[0].weights, [3, 1, 2], "agent #{index}");
        assert_eq!(assignments[0].agent_index, index as u32);
        assert_eq!(log.get().welcome.map(|w| w.agent_index), Some(index as u32));
    }
    // Every agent's clock runs 1 s ahead; one common start on theirs.
    let starts: Vec<u64> = [&big, &small, &mid]
        .iter()
        .map(|l| l.assignments()[0].start_at_agent_ns)
        .collect();
    assert!(
        starts.iter().all(|&s| s.abs_diff(starts[0]) < 1_000_000),
        "{starts:?}"
    );

    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert_eq!(run.failure, None);
    assert!(run.started && !run.cut_short);
    let shares: Vec<f64> = run.agents.iter().map(|a| a.share).collect();
    assert_eq!(shares, [0.5, 1.0 / 6.0, 2.0 / 6.0]);
    assert!(run
        .agents
        .iter()
        .all(|a| a.status() == AgentStatus::Finished));
    // 10 req/s for 2 s, whoever sends it.
    assert_eq!(run.aggregate.totals.intended, 20);
    assert_eq!(run.aggregate.totals.sent, 20);
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_never_says_hello_fails_the_run_after_the_wait() {
    let mut fleet = Fleet::start(spec(3), never());
    let a = fleet.join(Script::new("a")).await;
    let b = fleet.join(Script::new("b")).await;
    let mute = fleet
        .join(Script {
            hello: false,
            ..Script::new("mute")
        })
        .await;
    let began = Instant::now();
    let results = fleet.finish().await;

    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    let failure = run.failure.as_deref().unwrap_or_default();
    assert!(failure.contains("only 2 of 3 agent(s) joined"), "{failure}");
    assert!(!run.started && !run.cut_short);
    assert!(a.assignments().is_empty() && b.assignments().is_empty());
    // The service gave up on the mute one too, with a reason.
    let refused = mute
        .get()
        .refused
        .clone()
        .expect("the mute agent was refused");
    assert_eq!(refused.code(), tonic::Code::DeadlineExceeded);
    assert!(
        began.elapsed() <= Duration::from_secs(11),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_leaves_mid_run_is_lost_and_the_others_finish() {
    let mut fleet = Fleet::start(spec(2), never());
    let stays = fleet.join(Script::new("stays")).await;
    let leaves = fleet
        .join(Script {
            on_assignment: OnAssignment::Leave,
            ..Script::new("leaves")
        })
        .await;
    let results = fleet.finish().await;

    assert_eq!(stays.assignments().len(), 1);
    assert_eq!(leaves.assignments().len(), 1);
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert_eq!(run.failure, None);
    assert!(
        run.started && !run.cut_short,
        "a lost agent does not cut the run short: the other ran to the end"
    );
    assert_eq!(run.agents[0].status(), AgentStatus::Finished);
    assert_eq!(run.agents[1].status(), AgentStatus::Lost);
    let reason = run.agents[1].lost.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("its connection to the coordinator"),
        "{reason}"
    );
    // What it sent before leaving still counts (its first second: 5 of
    // the 10 arrivals); the rest of its share is booked from the plan.
    let t = &run.aggregate.totals;
    assert_eq!(t.sent, 10 + 5);
    assert_eq!(t.intended, 20, "intended follows the plan");
    assert_eq!(t.unsent.get(UnsentReason::AgentLost), 5);
    assert_eq!(
        run.aggregate.agents[1].unsent.get(UnsentReason::AgentLost),
        5
    );
    assert_eq!(run.aggregate.agents[1].intended, 10);
    // Per second too: the second second's 10 are 5 sent and 5 agent_lost.
    let second = &run.aggregate.intervals[&1];
    assert_eq!((second.intended, second.sent, second.unsent), (10, 5, 5));
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_clock_probes_ends_the_run_at_once() {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    };
    let mut fleet = Fleet::start(spec(2), stop);
    let a = fleet.join(Script::new("a")).await;
    let b = fleet.join(Script::new("b")).await;
    while a.get().pings == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop_tx.send(()).expect("the fleet listens for a stop");
    let stopped = Instant::now();
    let results = fleet.finish().await;

    assert!(
        stopped.elapsed() < Duration::from_millis(100),
        "{:?}",
        stopped.elapsed()
    );
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    let failure = run.failure.as_deref().unwrap_or_default();
    assert!(failure.contains("interrupted while probing"), "{failure}");
    assert!(!run.started);
    assert!(a.assignments().is_empty() && b.assignments().is_empty());
    assert!(a.get().pings < 8, "probing went on after the stop");
}

#[tokio::test(start_paused = true)]
async fn repeats_run_on_the_same_session() {
    let mut spec = spec(2);
    spec.repeats = 2;
    let mut fleet = Fleet::start(spec, never());
    let a = fleet.join(Script::new("a")).await;
    let b = fleet.join(Script::new("b")).await;
    let results = fleet.finish().await;

    assert_eq!(results.len(), 2);
    for run in &results {
        assert_eq!(run.failure, None);
        assert!(run.started && !run.cut_short);
        assert!(run
            .agents
            .iter()
            .all(|a| a.status() == AgentStatus::Finished));
        assert_eq!(run.aggregate.totals.intended, 20);
    }
    for log in [&a, &b] {
        let runs = log.assignments();
        assert_eq!(runs.len(), 2);
        assert!(
            runs[1].start_at_agent_ns >= runs[0].start_at_agent_ns + 1_000_000_000,
            "the second run starts after the pause between runs"
        );
        assert_eq!(
            log.get().welcome.iter().count(),
            1,
            "one session for both runs"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_frozen_agent_is_lost_within_3_s_and_its_share_is_booked() {
    let mut spec = spec(2);
    spec.duration = Duration::from_secs(12);
    spec.scenarios[0].duration_ns = 12_000_000_000;
    if let Some(loadfleet_proto::v1::scenario_assignment::Model::Open(p)) =
        &mut spec.scenarios[0].model
    {
        p.stages[0].duration_ns = 12_000_000_000;
    }
    let mut fleet = Fleet::start(spec, never());
    let _honest = fleet.join(Script::new("honest")).await;
    let _frozen = fleet
        .join(Script {
            on_assignment: OnAssignment::FreezeAfter(Duration::from_secs(2)),
            ..Script::new("frozen")
        })
        .await;
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    let lost = &run.agents[1];
    assert_eq!(lost.status(), AgentStatus::Lost);
    assert!(
        lost.lost.as_deref().unwrap_or_default().contains("silent"),
        "{lost:?}"
    );
    let at = lost.lost_at.expect("noticed during the run");
    assert!(
        at > Duration::from_secs(2) && at <= Duration::from_secs(5),
        "frozen at 2 s, noticed at {at:?}"
    );
    // Silent, it may have sent until its own dead-man switch fired: 3 s
    // after the last word it had from us, and a second to stop.
    let until = lost.unknown_until.expect("an unknown window");
    assert_eq!(until, at + Duration::from_secs(4));
    assert!(!run.cut_short);
    let t = &run.aggregate.totals;
    // 10 req/s for 12 s: the plan's 120. The frozen agent reported its
    // first second's 5 of its 60: the 55 left are unreported up to the
    // instant it had certainly stopped (5 a second, 5 per 1 s interval),
    // unsent agent_lost after.
    assert_eq!(t.intended, 120);
    assert_eq!(t.sent, 60 + 5);
    let unknown = run.aggregate.unreported.total;
    let lost_after = t.unsent.get(UnsentReason::AgentLost);
    assert_eq!(unknown + lost_after, 55);
    let before = (until.as_secs_f64() * 5.0).ceil() as u64 - 5;
    assert!(
        unknown.abs_diff(before) <= 1,
        "{unknown} unreported, {before} due in 1 s..{until:?}"
    );
    assert_eq!(t.intended, t.sent + t.unsent.total() + unknown);
    assert_eq!(run.aggregate.unreported.agents[1], unknown);
}

/// An agent that froze and was lost comes back with what it had not
/// reported: its figures come out of the arrivals booked unreported, so
/// its `sent` is whole and nothing is left of unknown fate.
#[tokio::test(start_paused = true)]
async fn a_lost_agents_late_figures_make_its_sent_whole() {
    let mut fleet = Fleet::start(spec(2), never());
    let _honest = fleet.join(Script::new("honest")).await;
    let late = fleet
        .join(Script {
            on_assignment: OnAssignment::FreezeThenDeliver(Duration::from_millis(500)),
            ..Script::new("late")
        })
        .await;
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    let lost = &run.agents[1];
    assert_eq!(lost.status(), AgentStatus::Lost);
    assert_eq!(lost.late, fleet::LateFigures::Whole { snapshots: 1 });
    // Its first snapshot, the one delivered late, then Finished.
    assert_eq!(late.get().deliveries, [Some(2)]);
    let t = &run.aggregate.totals;
    assert_eq!((t.intended, t.sent), (20, 20));
    assert_eq!(t.unsent.total(), 0);
    assert_eq!(run.aggregate.unreported.total, 0);
    assert_eq!(run.aggregate.agents[1].sent, 10);
    assert_eq!(run.aggregate.unreported.agents[1], 0);
    // Per second too: the late second is whole.
    let second = &run.aggregate.intervals[&1];
    assert_eq!(
        (second.intended, second.sent, second.unreported),
        (10, 10, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn abort_stops_the_fleet_and_books_what_was_left() {
    let mut spec = spec(2);
    spec.on_agent_loss = OnAgentLoss::Abort;
    let mut fleet = Fleet::start(spec, never());
    let stays = fleet.join(Script::new("stays")).await;
    let _leaves = fleet
        .join(Script {
            on_assignment: OnAssignment::Leave,
            ..Script::new("leaves")
        })
        .await;
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert!(run.cut_short, "an abort cuts the run short");
    assert_eq!(run.aborted.as_deref(), Some("fake-leaves"));
    // The scripted survivor reports its whole slice at once, so it had
    // finished before the loss: nothing was left to stop.
    assert_eq!(stays.assignments().len(), 1);
    let t = &run.aggregate.totals;
    assert_eq!(t.intended, 20);
    assert_eq!(t.intended, t.sent + t.unsent.total());
}

/// An abort stops an agent that was still running: what it never reached
/// is booked `aborted`, apart from the lost agent's `agent_lost`, and the
/// plan's arrivals still add up.
#[tokio::test(start_paused = true)]
async fn abort_books_a_running_agents_remainder_aborted() {
    let mut spec = spec(2);
    spec.on_agent_loss = OnAgentLoss::Abort;
    let mut fleet = Fleet::start(spec, never());
    // Reports its first second, then runs on (answering heartbeats) until
    // it is stopped.
    let stays = fleet
        .join(Script {
            on_assignment: OnAssignment::FreezeAfter(Duration::from_secs(3600)),
            ..Script::new("stays")
        })
        .await;
    let _leaves = fleet
        .join(Script {
            on_assignment: OnAssignment::Leave,
            ..Script::new("leaves")
        })
        .await;
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert_eq!(run.aborted.as_deref(), Some("fake-leaves"));
    assert_eq!(stays.get().stops.len(), 1, "the survivor was stopped");
    let t = &run.aggregate.totals;
    // 10 req/s for 2 s over two agents: each reported its first second's
    // 5, and the second second's 5 of each went unsent, for its own reason.
    assert_eq!((t.intended, t.sent), (20, 10));
    assert_eq!(t.unsent.get(UnsentReason::AgentLost), 5);
    assert_eq!(t.unsent.get(UnsentReason::Aborted), 5);
    assert_eq!(t.intended, t.sent + t.unsent.total());
}

/// An agent that neither reads nor says anything after its hello is lost
/// on its own; the others run on time, and their heartbeats never stop.
#[tokio::test(start_paused = true)]
async fn a_deaf_agent_is_lost_not_a_brake() {
    let mut fleet = Fleet::start(spec(2), never());
    let honest = fleet.join(Script::new("honest")).await;
    let _deaf = fleet
        .join(Script {
            on_assignment: OnAssignment::FreezeAfter(Duration::ZERO),
            ..Script::new("deaf")
        })
        .await;
    let began = Instant::now();
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert_eq!(run.agents[0].status(), AgentStatus::Finished);
    assert_eq!(run.agents[1].status(), AgentStatus::Lost);
    // The run ends once the honest one finished and the deaf one is lost:
    // within the schedule plus the silence limit, not at a deadline.
    assert!(
        began.elapsed() < Duration::from_secs(6),
        "{:?}",
        began.elapsed()
    );
    let beats = honest.get().heartbeats.clone();
    let gap = beats
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    assert!(gap <= Duration::from_millis(300), "heartbeat gap {gap:?}");
}

/// A flood of snapshots from one agent (real time, not paused: decoding
/// takes real time) does not hold up the heartbeats to another.
#[tokio::test]
async fn a_snapshot_flood_does_not_delay_heartbeats() {
    let mut spec = spec(2);
    spec.duration = Duration::from_secs(3);
    spec.scenarios[0].duration_ns = 3_000_000_000;
    let mut fleet = Fleet::start(spec, never());
    let honest = fleet.join(Script::new("honest")).await;
    let _flood = fleet
        .join(Script {
            on_assignment: OnAssignment::Flood(50_000),
            ..Script::new("flood")
        })
        .await;
    let results = fleet.finish().await;
    let [run] = results.as_slice() else {
        panic!("one run: {results:?}")
    };
    assert!(
        run.agents
            .iter()
            .all(|a| a.status() == AgentStatus::Finished),
        "nobody is lost under the flood"
    );
    let beats = honest.get().heartbeats.clone();
    assert!(beats.len() >= 8, "{} heartbeats", beats.len());
    let gap = beats
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    assert!(gap < Duration::from_secs(1), "heartbeat gap {gap:?}");
}

/// Joins an agent straight through the actor's events, as the service
/// would; returns its index (or the refusal) and its queue of messages.
async fn join_directly(
    events: &mpsc::Sender<FleetEvent>,
    id: &str,
) -> (
    Result<u32, tonic::Status>,
    mpsc::Receiver<Result<v1::CoordinatorMessage, tonic::Status>>,
) {
    let (tx, rx) = mpsc::channel(64);
    let (reply, joined) = oneshot::channel();
    let hello = v1::Hello {
        agent_id: id.into(),
        cpus: 1,
        ..Default::default()
    };
    let join = FleetEvent::Join {
        hello,
        peer: None,
        tx,
        seen: LastSeen::new(),
        reply,
    };
    assert!(events.send(join).await.is_ok(), "the actor takes events");
    let index = joined.await.expect("the actor answers a join");
    (index, rx)
}

/// The console is what the user reads: a newcomer refused once the fleet
/// is full, and an agent lost during the run, with when and why.
#[tokio::test(start_paused = true)]
async fn the_user_is_told_of_a_refused_and_a_lost_agent() {
    let console = Console::captured();
    let (events, events_rx) = mpsc::channel(64);
    let outputs = fleet::Outputs {
        progress: Box::new(|_| {}),
        sink: None,
        console: console.clone(),
    };
    let actor = tokio::spawn(fleet::run_with(spec(1), events_rx, never(), outputs));
    let (index, mut solo) = join_directly(&events, "solo").await;
    let index = index.expect("the first agent is welcomed");
    let (refused, _) = join_directly(&events, "late").await;
    assert_eq!(
        refused.map_err(|s| s.code()),
        Err(tonic::Code::ResourceExhausted)
    );
    // Answers the clock probes until the assignment, then leaves.
    while let Some(Ok(m)) = solo.recv().await {
        match m.kind {
            Some(coordinator_message::Kind::Ping(p)) => {
                let pong = agent_message::Kind::Pong(v1::Pong {
                    seq: p.seq,
                    coordinator_send_ns: p.coordinator_send_ns,
                    agent_recv_ns: p.coordinator_send_ns,
                    agent_send_ns: p.coordinator_send_ns,
                });
                let msg = FleetEvent::Message {
                    agent: index,
                    msg: Box::new(v1::AgentMessage { kind: Some(pong) }),
                    received: Instant::now(),
                };
                assert!(events.send(msg).await.is_ok());
            }
            Some(coordinator_message::Kind::Assignment(_)) => break,
            _ => {}
        }
    }
    let gone = FleetEvent::Gone {
        agent: index,
        loss: Loss::StreamClosed,
    };
    assert!(events.send(gone).await.is_ok());
    let results = actor.await.expect("the fleet actor did not panic");

    assert_eq!(results[0].agents[0].status(), AgentStatus::Lost);
    // The refused latecomer is named for the report.
    let late = &results[0].late_agents;
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].id, "late");
    assert!(!late[0].stood_by);
    assert_eq!(
        console.lines(),
        [
            "agent solo joined from a local socket (1 of 1)",
            "refused agent late from None: the fleet already has its 1 agent(s) and the run has begun; no later run is planned (--repeat 1), so this agent gets no share",
            "agent solo assigned 100.0% of the schedule",
            "agent solo lost 0.0s into the run: its connection to the coordinator closed before it finished",
        ]
    );
}
