//! The driver of a flow scenario, and the one place a flow runs: each
//! arrival starts a flow in a task of its own, which runs the steps in
//! order, each from its ready instant (the flow's intended start for the
//! first, the previous step's end plus its think time after that).
//!
//! Timing is honest inside the flow as it is for single requests: a
//! step's latency runs from its ready instant, so a late start or a stall
//! of the agent shows in it (and in the step start lag, ready to send);
//! the flow's latency runs from its intended start to its last step's end.
//!
//! Nothing vanishes: a flow counts as sent when it starts and stays in
//! flight until it ends; a step counts reached, then sent or unsent; the
//! steps after a failure count not reached (`flow_failed`), and the steps
//! a flow had not reached when the run ended count `run_ended`, from the
//! live counts its hook keeps ([`FlowHook::book_run_end`]).

use std::time::Duration;

use loadfleet_proto::bounds::MAX_ANSWER_KEPT_BYTES;
use loadfleet_proto::vocab::{FlowFailure, NotReached};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::shared::Shared;
use crate::flow::hook::FlowHook;
use crate::flow::jar::Jar;
use crate::flow::{judge, read_grpc};
use crate::recorder::{FlowEnd, Outcome, StepDone};

/// Starts a flow per arrival.
pub(super) struct Flows<'a> {
    shared: &'a Shared,
    hook: &'a std::rc::Rc<FlowHook>,
    stop: &'a CancellationToken,
}

impl<'a> Flows<'a> {
    pub(super) fn new(
        shared: &'a Shared,
        hook: &'a std::rc::Rc<FlowHook>,
        stop: &'a CancellationToken,
    ) -> Self {
        Self { shared, hook, stop }
    }
}

impl Driver for Flows<'_> {
    async fn submit(&mut self, arrival: Arrival) -> Submitted {
        let (shared, hook) = (self.shared.clone(), self.hook.clone());
        shared.hand_over(arrival.interval, arrival.lag, true);
        let (seq, intended) = (arrival.seq, arrival.intended);
        tokio::task::spawn_local(async move { run_flow(&shared, &hook, seq, intended).await });
        Submitted::Sent
    }

    async fn wait(&mut self, sleep: Sleep<'_>, _due: Option<Instant>) -> Waited {
        sleep.waited(self.stop).await
    }
}

/// Where a flow stands while its steps run.
struct Course {
    /// The last step reached.
    at: usize,
    /// The outcome of the last step that ran, and when it ended.
    outcome: Outcome,
    end: Instant,
    failure: Option<FlowFailure>,
    /// Think time slept, kept out of the flow's active time.
    slept: Duration,
}

/// Runs flow `seq` (intended at `intended`, already counted sent and in
/// flight) to its end, recording each step and the flow. Dropped midway
/// (a stop, the end of the drain) it stays in flight, and `hook` keeps
/// the step it stood at for [`FlowHook::book_run_end`].
pub(super) async fn run_flow(shared: &Shared, hook: &FlowHook, seq: u64, intended: Instant) {
    let spec = &hook.spec;
    let steps = spec.steps.len();
    let warmup = intended.saturating_duration_since(shared.scenario_start) < shared.warmup;
    let mut vars: Vec<Option<String>> = vec![None; spec.vars.len()];
    let mut jar = Jar::default();
    let row = shared.mix.row(seq, &mut shared.rng.borrow_mut());
    let mut ready = intended;
    let mut c = Course {
        at: 0,
        outcome: Outcome::Unsent(loadfleet_proto::vocab::UnsentReason::InvalidRequest),
        end: intended,
        failure: None,
        slept: Duration::ZERO,
    };
    for k in 0..steps {
        tokio::time::sleep_until(ready).await;
        hook.reach(k);
        c.at = k;
        let interval = shared.interval_of(ready);
        shared.recorder.borrow_mut().step_reached(interval, k);
        let built = shared
            .mix
            .build_kind(k, seq, row, &vars, &mut shared.rng.borrow_mut());
        let mut request = match built {
            Ok(r) => r,
            Err(reason) => {
                shared
                    .recorder
                    .borrow_mut()
                    .step_unsent(interval, k, reason);
                (c.outcome, c.end, c.failure) = (
                    Outcome::Unsent(reason),
                    Instant::now(),
                    Some(FlowFailure::Unsent),
                );
                break;
            }
        };
        let uri = request.uri().clone();
        if spec.cookies {
            jar.attach(&uri, request.headers_mut());
        }
        let sent_at = Instant::now();
        let out = || shared.recorder.borrow_mut().step_sent(interval, k);
        let keep = if spec.keeps_answer(k) {
            MAX_ANSWER_KEPT_BYTES
        } else {
            0
        };
        let (exchanged, mut kept) = shared
            .client
            .send_keeping(request, sent_at, None, &out, keep)
            .await;
        if let (Some(kept), Some(decoder)) = (&mut kept, shared.mix.grpc_decoder(k)) {
            read_grpc(kept, exchanged.outcome, decoder);
        }
        let done = exchanged.answered.unwrap_or_else(Instant::now);
        (c.outcome, c.end) = (exchanged.outcome, done);
        if let Outcome::Unsent(reason) = exchanged.outcome {
            shared
                .recorder
                .borrow_mut()
                .step_unsent(interval, k, reason);
            c.failure = Some(FlowFailure::Unsent);
            break;
        }
        if let (true, Some(kept)) = (spec.cookies, &kept) {
            jar.keep(&uri, &kept.headers);
        }
        let step = &spec.steps[k];
        let judged = judge(step, exchanged.outcome, kept.as_ref(), &mut vars);
        let in_scenario = done.saturating_duration_since(shared.scenario_start);
        shared.recorder.borrow_mut().step_done(
            shared.interval_of(done),
            k,
            StepDone {
                outcome: exchanged.outcome,
                latency_micros: micros(done.saturating_duration_since(ready)),
                service_micros: micros(
                    done.saturating_duration_since(exchanged.on_wire.unwrap_or(sent_at)),
                ),
                start_lag_micros: micros(sent_at.saturating_duration_since(ready)),
                pool_wait_micros: exchanged.pool_wait.map(micros),
                checks: &judged.checks,
                warmup,
                in_window: in_scenario >= shared.warmup && in_scenario < shared.duration,
                phases: exchanged.phases,
            },
        );
        if let (Some(f), false) = (judged.failure, step.continue_on_failure) {
            c.failure = Some(f);
            break;
        }
        if k + 1 < steps {
            let think = pick(step.think, &mut shared.rng.borrow_mut());
            c.slept += think;
            ready = done + think;
        }
    }
    hook.leave(c.at);
    let end_interval = shared.interval_of(c.end);
    let mut recorder = shared.recorder.borrow_mut();
    recorder.steps_not_reached(end_interval, c.at + 1..steps, NotReached::FlowFailed, 1);
    let latency = c.end.saturating_duration_since(intended);
    let in_scenario = c.end.saturating_duration_since(shared.scenario_start);
    recorder.flow_ended(
        end_interval,
        FlowEnd {
            outcome: c.outcome,
            latency_micros: micros(latency),
            active_micros: micros(latency.saturating_sub(c.slept)),
            failure: c.failure,
            warmup,
            in_window: in_scenario >= shared.warmup && in_scenario < shared.duration,
        },
    );
    drop(recorder);
    shared.done_one();
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// A think time uniform in `min..=max`, from the worker's seeded numbers.
fn pick((min, max): (Duration, Duration), rng: &mut loadfleet_proto::rng::SplitMix64) -> Duration {
    let span = max.saturating_sub(min).as_nanos() as u64;
    if span == 0 {
        return min;
    }
    min + Duration::from_nanos(rng.next_u64() % (span + 1))
}
