//! The closed model: a fixed population of clients, each sending its next
//! request when the previous one's answer and the think time are in.

use std::time::Duration;

use std::sync::Arc;

use loadfleet_proto::closed::{client_windows, Population};
use loadfleet_proto::handover::{Handover, Owners};
use loadfleet_proto::partition::Interleave;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::flows::run_flow;
use super::plan::{Handovers, WorkerPlan};
use super::shared::Shared;
use super::sources::handover_news;

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
        if let Some(hook) = &shared.flow {
            // A client loops the flow, as a k6 VU loops its iteration.
            shared.hand_over(arrival.interval, arrival.lag, true);
            let flow = run_flow(shared, hook, arrival.seq, arrival.intended);
            return tokio::select! {
                _ = flow => Submitted::Sent,
                _ = self.stop.cancelled() => Submitted::Abandoned,
                _ = tokio::time::sleep_until(self.end + self.drain) => Submitted::Abandoned,
            };
        }
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
/// windows, until they are done. A hand-over (`--on-agent-loss
/// redistribute`) moves a lost agent's clients to the survivors from its
/// instant on, so the fleet keeps the plan's population.
pub(super) async fn run(
    plan: &WorkerPlan,
    population: &Population,
    (interleave, max_clients): (&Arc<Interleave>, u64),
    mut handovers: Handovers,
    shared: &Shared,
    stop: &CancellationToken,
) {
    let (agent, worker, workers) = (plan.agent_index, plan.worker_index, plan.workers);
    let stages = &population.stages;
    let spawn = |set: &mut JoinSet<()>, c: u64, from_ns: u64| {
        let windows = clipped(client_windows(stages, c), from_ns);
        let me = (shared.clone(), stop.clone());
        set.spawn_local(client(
            me,
            c,
            windows,
            (population.think, max_clients),
            plan.drain,
        ));
    };
    let mut set = JoinSet::new();
    let mine = (0..max_clients).filter(|&c| interleave.owner(c) == agent);
    for (_, c) in mine.enumerate().filter(|(n, _)| n % workers == worker) {
        spawn(&mut set, c, 0);
    }
    let offset_ns = nanos(shared.scenario_start - shared.common_start);
    let end =
        shared.scenario_start + Duration::from_nanos(stages.iter().map(|s| s.duration_ns).sum());
    // Hand-overs made before this worker started are taken up at once.
    handovers.mark_changed();
    let mut known = 0;
    loop {
        tokio::select! {
            joined = set.join_next(), if !set.is_empty() => {
                if let Some(Err(e)) = joined {
                    tracing::error!("a closed-model client failed: {e}");
                }
            }
            _ = handover_news(&mut handovers) => {
                let list = handovers.borrow_and_update().clone();
                let taken = taken_clients(interleave, &list, known, (agent, max_clients));
                known = list.len();
                let dealt = taken.into_iter().enumerate().filter(|(n, _)| n % workers == worker);
                for (_, (c, level)) in dealt {
                    spawn(&mut set, c, list[level - 1].from_ns.saturating_sub(offset_ns));
                }
            }
            _ = tokio::time::sleep_until(end), if set.is_empty() => break,
            _ = stop.cancelled(), if set.is_empty() => break,
        }
    }
}

/// The clients that hand-overs after the first `known` of `list` gave to
/// `agent`, with the hand-over (1-based) that did. Clients are handed over
/// as arrivals are, by [`Owners`] over the client indexes, so every
/// survivor deals them alike and each client has exactly one owner.
fn taken_clients(
    interleave: &Arc<Interleave>,
    list: &Arc<[Handover]>,
    known: usize,
    (agent, max_clients): (usize, u64),
) -> Vec<(u64, usize)> {
    let mut owners = Owners::new(interleave.clone(), list.clone());
    (0..max_clients)
        .filter_map(|c| match owners.owner_and_level(c, u64::MAX) {
            (owner, level) if owner == agent && level > known => Some((c, level)),
            _ => None,
        })
        .collect()
}

/// A client's windows from `from_ns` (ns from the scenario start) on.
fn clipped(windows: Vec<(u64, u64)>, from_ns: u64) -> Vec<(u64, u64)> {
    windows
        .into_iter()
        .filter(|&(_, hi)| hi > from_ns)
        .map(|(lo, hi)| (lo.max(from_ns), hi))
        .collect()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Client `c`, active in `windows`: sends its next request when the last
/// one's answer and the think time are in.
async fn client(
    (shared, stop): (Shared, CancellationToken),
    c: u64,
    windows: Vec<(u64, u64)>,
    (think, max_clients): (Duration, u64),
    drain: Duration,
) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lost agent's clients go to the survivors, each to exactly one;
    /// a survivor lost later hands on its own clients and those it took.
    #[test]
    fn handed_over_clients_have_exactly_one_new_owner() {
        let weights = [1, 1, 1];
        let base = Arc::new(Interleave::new(&weights).expect("weights"));
        let owned_by = |a: usize| {
            (0..30u64)
                .filter(|&c| base.owner(c) == a)
                .collect::<Vec<_>>()
        };
        let first = Handover::new(1, 5, vec![0, 2], &weights).expect("hand-over");
        let list: Arc<[Handover]> = vec![first.clone()].into();
        let to_0 = taken_clients(&base, &list, 0, (0, 30));
        let to_2 = taken_clients(&base, &list, 0, (2, 30));
        let mut dealt: Vec<u64> = to_0.iter().chain(&to_2).map(|&(c, _)| c).collect();
        dealt.sort_unstable();
        assert_eq!(dealt, owned_by(1));
        assert!(to_0
            .iter()
            .all(|&(c, level)| level == 1 && !to_2.contains(&(c, 1))));
        assert_eq!(taken_clients(&base, &list, 1, (0, 30)), vec![], "known");
        let second = Handover::new(2, 9, vec![0], &weights).expect("hand-over");
        let list: Arc<[Handover]> = vec![first, second].into();
        let mut again: Vec<u64> = taken_clients(&base, &list, 1, (0, 30))
            .into_iter()
            .map(|(c, level)| {
                assert_eq!(level, 2);
                c
            })
            .collect();
        again.sort_unstable();
        let mut expected: Vec<u64> = owned_by(2)
            .into_iter()
            .chain(to_2.iter().map(|&(c, _)| c))
            .collect();
        expected.sort_unstable();
        assert_eq!(again, expected);
    }

    #[test]
    fn a_taken_client_starts_at_the_hand_over() {
        let windows = vec![(0, 10), (20, 40), (50, 60)];
        assert_eq!(clipped(windows.clone(), 0), windows);
        assert_eq!(clipped(windows, 30), vec![(30, 40), (50, 60)]);
    }
}
