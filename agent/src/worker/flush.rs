//! Closing intervals: each at its boundary on the common clock while the
//! worker runs, and what is left when it ends.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use loadfleet_proto::v1;
use loadfleet_proto::vocab::{HttpProtocol, UnsentReason};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::plan::WorkerEvent;
use super::shared::{Sent, Shared};
use crate::client::{DirectPool, Transport};
use crate::recorder::{Gauge, Recorder};
use crate::sse::hook::Hook;

/// Where a worker's requests wait for connections, for the figures the
/// flush reports: the transport's pool, or the loop's own.
#[derive(Clone)]
pub(super) enum PoolFigures {
    Transport(Transport),
    Direct(Rc<DirectPool<Sent>>),
}

impl PoolFigures {
    /// The figures of the pool a scenario's requests go through.
    pub(super) fn of(direct: Option<&Rc<DirectPool<Sent>>>, client: &Transport) -> Self {
        match direct {
            Some(d) => PoolFigures::Direct(d.clone()),
            None => PoolFigures::Transport(client.clone()),
        }
    }

    fn take_saturated(&self, now: Instant) -> Duration {
        match self {
            PoolFigures::Transport(t) => t.take_saturated(now),
            PoolFigures::Direct(d) => d.take_saturated(now),
        }
    }

    fn take_connections(&self) -> Vec<(HttpProtocol, u64)> {
        match self {
            PoolFigures::Transport(t) => t.take_connections(),
            PoolFigures::Direct(d) => d.take_connections(),
        }
    }
}

/// Closes each interval at its boundary on the common clock and hands its
/// snapshots to the session; with the worker's `pool` (and the agent's
/// number of workers), also the time it held requests waiting.
pub(super) async fn flush_loop(
    recorder: Rc<RefCell<Recorder>>,
    in_flight: Rc<Cell<u64>>,
    pool: Option<(PoolFigures, usize)>,
    sse: Option<Rc<Hook>>,
    start: Instant,
    interval: Duration,
    events: UnboundedSender<WorkerEvent>,
) {
    let mut closed = 0u64;
    loop {
        closed += 1;
        let boundary = start + interval * closed as u32;
        tokio::time::sleep_until(boundary).await;
        let saturated = pool.as_ref().map_or(Duration::ZERO, |(p, workers)| {
            p.take_saturated(Instant::now()) / (*workers).max(1) as u32
        });
        let mut snaps = recorder
            .borrow_mut()
            .flush(closed, Gauge::new(in_flight.get(), saturated));
        if let Some(sse) = &sse {
            sse.attach(&mut snaps, closed);
        }
        if let Some((transport, _)) = &pool {
            attach_connections(&mut snaps, transport);
        }
        if events.send(WorkerEvent::Snapshots(snaps)).is_err() {
            return;
        }
    }
}

/// Closes every scenario's open intervals up to now once the worker is
/// done, and tells the session it is. The pool's saturated time goes with
/// the first scenario's snapshots only, as in [`flush_loop`].
pub(super) fn flush_last(
    states: &[Shared],
    client: &Transport,
    start: Instant,
    interval_ns: u64,
    workers: usize,
    events: &UnboundedSender<WorkerEvent>,
) {
    let elapsed = Instant::now().saturating_duration_since(start);
    let up_to = elapsed.as_nanos() as u64 / interval_ns + 1;
    let mut in_flight_at_end = 0;
    let figures = PoolFigures::of(states.first().and_then(|s| s.direct.as_ref()), client);
    let mut pool_saturated = figures.take_saturated(Instant::now()) / workers.max(1) as u32;
    for s in states {
        // What still waits for a connection was never sent: booked so,
        // and in flight only what is on the wire.
        let queued = s.held.replace(0);
        let on_wire = s.in_flight.get().saturating_sub(queued);
        let mut recorder = s.recorder.borrow_mut();
        recorder.held_unsent(up_to.saturating_sub(1), UnsentReason::QueuedAtEnd, queued);
        if let Some(flow) = &s.flow {
            flow.book_run_end(&mut recorder, up_to.saturating_sub(1));
        }
        let gauge = Gauge::new(on_wire, std::mem::take(&mut pool_saturated));
        let mut snaps = recorder.flush(up_to, gauge);
        drop(recorder);
        if let Some(sse) = &s.sse {
            sse.attach(&mut snaps, up_to);
        }
        attach_connections(&mut snaps, &figures);
        let _ = events.send(WorkerEvent::Snapshots(snaps));
        in_flight_at_end += on_wire;
    }
    let _ = events.send(WorkerEvent::Done { in_flight_at_end });
}

/// Puts the connections the worker's transport established since the last
/// flush on the newest snapshot, by the protocol spoken on them; with no
/// snapshot to carry them they wait for the next flush.
fn attach_connections(snaps: &mut [v1::Snapshot], transport: &PoolFigures) {
    if let Some(last) = snaps.last_mut() {
        for (protocol, n) in transport.take_connections() {
            *last
                .connections
                .entry(protocol.as_str().to_string())
                .or_default() += n;
        }
    }
}
