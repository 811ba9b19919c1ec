//! The closed model: a fixed population of clients, each sending its next
//! request when the previous one's answer and the think time are in.

use std::time::Duration;

use loadfleet_proto::closed::client_windows;
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::schedule::Stage;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::plan::WorkerPlan;
use super::shared::Shared;

/// One client of the population: it sends a request and waits for its
/// answer, or holds a subscriber's stream, before the next.
struct Client<'a> {
    shared: &'a Shared,
    stop: &'a CancellationToken,
    /// The end of the client's current active window.
    end: Instant,
    /// How long a request may stay out after the window's end.
    drain: Duration,
}

impl Driver for Client<'_> {
    async fn submit(&mut self, arrival: Arrival) -> Submitted {
        let shared = self.shared;
        let Some(request) = shared.take(&arrival) else {
            return Submitted::Unrendered;
        };
        let (intended, kind) = (arrival.intended, shared.mix.kind(arrival.seq));
        if let Some(hook) = &shared.sse {
            // A subscriber holds until its window ends, reconnecting as
            // the standard says.
            shared
                .subscribe(hook, (request, kind), intended, self.end, self.stop)
                .await;
            return Submitted::Held;
        }
        tokio::select! {
            _ = shared.exchange(request, kind, intended, intended, None) => Submitted::Sent,
            _ = self.stop.cancelled() => Submitted::Abandoned,
            _ = tokio::time::sleep_until(self.end + self.drain) => Submitted::Abandoned,
        }
    }

    async fn wait(&mut self, sleep: Sleep<'_>, _due: Option<Instant>) -> Waited {
        sleep.waited(self.stop).await
    }
}

/// Runs this worker's clients of a closed scenario, each inside its active
/// windows, until they are done.
pub(super) async fn run(
    plan: &WorkerPlan,
    stages: &[Stage],
    think: Duration,
    interleave: &Interleave,
    max_clients: u64,
    shared: &Shared,
    stop: &CancellationToken,
) {
    let mine: Vec<u64> = (0..max_clients)
        .filter(|&c| interleave.owner(c) == plan.agent_index)
        .enumerate()
        .filter(|(n, _)| n % plan.workers == plan.worker_index)
        .map(|(_, c)| c)
        .collect();
    let clients: Vec<_> = mine
        .into_iter()
        .map(|c| {
            let windows = client_windows(stages, c);
            let (shared, stop, drain) = (shared.clone(), stop.clone(), plan.drain);
            tokio::task::spawn_local(async move {
                let start = shared.scenario_start;
                let mut client = Client {
                    shared: &shared,
                    stop: &stop,
                    end: start,
                    drain,
                };
                let mut n = 0u64;
                for (lo, hi) in windows {
                    client.end = start + Duration::from_nanos(hi);
                    let window = Sleep {
                        timer: None,
                        wake: start + Duration::from_nanos(lo),
                        exact: false,
                    };
                    if client.wait(window, None).await == Waited::Stopped {
                        return;
                    }
                    while Instant::now() < client.end && !stop.is_cancelled() {
                        // A closed client is ready now: that is the intended
                        // instant, so latency equals service time.
                        let intended = Instant::now();
                        let seq = n * max_clients + c;
                        n += 1;
                        let arrival = Arrival {
                            seq,
                            interval: shared.interval_of(intended),
                            intended,
                            now: intended,
                            lag: Duration::ZERO,
                        };
                        match client.submit(arrival).await {
                            Submitted::Unrendered => {
                                // A bad rendering must not spin the client.
                                tokio::time::sleep(think.max(Duration::from_millis(1))).await;
                                continue;
                            }
                            Submitted::Held => break,
                            Submitted::Abandoned => return,
                            Submitted::Sent => {}
                        }
                        if think.is_zero() {
                            // A request that fails without ever waiting (no
                            // ports left, say) must not hog the worker.
                            tokio::task::yield_now().await;
                        } else {
                            tokio::select! {
                                _ = tokio::time::sleep(think) => {}
                                _ = stop.cancelled() => return,
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
}
