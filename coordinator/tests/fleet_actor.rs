//! The fleet actor in process: the real tonic service and actor, scripted
//! fake agents over in-memory pipes, paused time. Covers what the process
//! tests cannot pin down: who gets which slice, agents that never say
//! hello or leave mid-run, a stop during the clock probes, and repeats.

mod harness;

use std::time::Duration;

use harness::{spec, Fleet, OnAssignment, Script};
use loadfleet_proto::vocab::AgentStatus;
use tokio::sync::oneshot;
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
    assert_eq!(run.aggregate.totals.intended, 6);
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
        run.started && run.cut_short,
        "a lost agent cuts the run short"
    );
    assert_eq!(run.agents[0].status(), AgentStatus::Finished);
    assert_eq!(run.agents[1].status(), AgentStatus::Lost);
    let reason = run.agents[1].lost.as_deref().unwrap_or_default();
    assert!(reason.starts_with("stream "), "{reason}");
    // What it sent before leaving still counts.
    assert_eq!(run.aggregate.totals.sent, 2);
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
        assert_eq!(run.aggregate.totals.intended, 2);
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
