//! What one scenario's tasks share on a worker thread, and the one place an
//! arrival is rendered, counted sent and has its outcome recorded, whichever
//! way it went out.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use loadfleet_proto::rng::SplitMix64;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::Arrival;
use crate::client::{DirectPool, Exchanged, Outcome, Phases, Queued, Transport};
use crate::flow::hook::FlowHook;
use crate::recorder::{Completion, Recorder};
use crate::request::RequestMix;
use crate::sse::hook::Hook;

/// A rendered request.
pub(super) type Request = http::Request<Full<Bytes>>;

/// What the open loop keeps with a request in a [`DirectPool`]: its
/// intended instant, when it was sent, and its kind (its request's index
/// in the mix, [`RequestMix::kind`]).
pub(super) type Sent = (Instant, Instant, usize);

/// State one scenario's tasks share on a worker thread.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) recorder: Rc<RefCell<Recorder>>,
    /// This scenario's requests in flight (the reported gauge).
    pub(super) in_flight: Rc<Cell<u64>>,
    /// This scenario's requests handed to the transport that have not left
    /// the agent's queue yet: at the end, the ones never sent.
    pub(super) held: Rc<Cell<u64>>,
    /// Every scenario's requests in flight on this worker: the cap applies
    /// to the agent, however many scenarios overlap.
    pub(super) worker_in_flight: Rc<Cell<u64>>,
    pub(super) client: Transport,
    pub(super) mix: Arc<RequestMix>,
    /// A subscription scenario's streams and figures.
    pub(super) sse: Option<Rc<Hook>>,
    /// A flow scenario's steps and the flows under way.
    pub(super) flow: Option<Rc<FlowHook>>,
    pub(super) rng: Rc<RefCell<SplitMix64>>,
    pub(super) common_start: Instant,
    pub(super) interval_ns: u64,
    pub(super) scenario_start: Instant,
    pub(super) warmup: Duration,
    pub(super) duration: Duration,
    /// The only scenario this worker runs: nothing else on its thread
    /// (another scenario's arrivals, a subscriber's events) would be held
    /// up by a tick's blind sleep.
    pub(super) alone: bool,
    /// The pool the open loop drives itself, when the scenario can use one;
    /// its requests then never reach `client`.
    pub(super) direct: Option<Rc<DirectPool<Sent>>>,
}

impl Shared {
    /// An arrival is handed to the transport now: one more in flight,
    /// counted intended; it counts as sent once it leaves the agent's queue
    /// ([`Self::went_out`]).
    pub(super) fn mark_sent(&self, interval: u64, lag: Duration) {
        self.hand_over(interval, lag, false);
    }

    /// An arrival handed to the transport now, `out` when it is already on
    /// the wire (or opening its connection): then it counts as sent at
    /// once, in one step, the common case of the loop's own pool.
    pub(super) fn hand_over(&self, interval: u64, lag: Duration, out: bool) {
        let in_flight = self.in_flight.get() + 1;
        self.in_flight.set(in_flight);
        self.worker_in_flight.set(self.worker_in_flight.get() + 1);
        if !out {
            self.held.set(self.held.get() + 1);
        }
        self.recorder
            .borrow_mut()
            .arrival(interval, lag.as_micros() as u64, in_flight, out);
    }

    /// The arrival intended at `intended` left the agent's queue: it is on
    /// the wire, or opening its connection.
    pub(super) fn went_out(&self, intended: Instant) {
        let interval = self.interval_of(intended);
        self.held.set(self.held.get().saturating_sub(1));
        self.recorder.borrow_mut().went_out(interval);
    }

    /// The interval on the common clock that `at` falls in.
    pub(super) fn interval_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.common_start).as_nanos() as u64 / self.interval_ns
    }

    /// Builds arrival `seq`'s request, or counts it unsent when the rendered
    /// template is not a valid request. Not async: the RefCell borrows end
    /// here.
    pub(super) fn build_or_count(&self, seq: u64, interval: u64) -> Option<Request> {
        let built = self.mix.build(seq, &mut self.rng.borrow_mut());
        match built {
            Ok(r) => Some(r),
            Err(reason) => {
                self.recorder.borrow_mut().arrival_unsent(interval, reason);
                None
            }
        }
    }

    /// An arrival's request, counted sent; `None` (counted unsent) when its
    /// template does not render to a valid request. The one path from an
    /// arrival to a request for the drivers that hand it on whole.
    pub(super) fn take(&self, arrival: &Arrival) -> Option<Request> {
        let request = self.build_or_count(arrival.seq, arrival.interval)?;
        self.mark_sent(arrival.interval, arrival.lag);
        Some(request)
    }

    /// Sends one request of kind `kind` through the transport and records
    /// its outcome.
    pub(super) async fn exchange(
        &self,
        request: Request,
        kind: usize,
        intended: Instant,
        sent_at: Instant,
        queued: Option<Queued>,
    ) {
        let out = || self.went_out(intended);
        let exchanged = self.client.send(request, sent_at, queued, &out).await;
        self.record(&exchanged, kind, intended, sent_at);
    }

    /// Records one request's outcome and takes it out of the in-flight
    /// counts. One that never left the queue is unsent, booked with its
    /// arrival.
    pub(super) fn record(
        &self,
        exchanged: &Exchanged,
        kind: usize,
        intended: Instant,
        sent_at: Instant,
    ) {
        let done = exchanged.answered.unwrap_or_else(Instant::now);
        let in_scenario = done.saturating_duration_since(self.scenario_start);
        let in_window = in_scenario >= self.warmup && in_scenario < self.duration;
        let warmup = intended.saturating_duration_since(self.scenario_start) < self.warmup;
        let interval = match exchanged.outcome {
            Outcome::Unsent(_) => {
                self.held.set(self.held.get().saturating_sub(1));
                self.interval_of(intended)
            }
            _ => self.interval_of(done),
        };
        self.recorder.borrow_mut().completed(
            interval,
            Completion {
                outcome: exchanged.outcome,
                latency_micros: done.saturating_duration_since(intended).as_micros() as u64,
                // A wait for one of the agent's own connections is not the
                // target's: service time starts on the connection.
                service_micros: done
                    .saturating_duration_since(exchanged.on_wire.unwrap_or(sent_at))
                    .as_micros() as u64,
                pool_wait_micros: exchanged.pool_wait.map(|w| w.as_micros() as u64),
                warmup,
                in_window,
                phases: exchanged.phases,
                kind,
            },
        );
        self.done_one();
    }

    /// One subscriber of a subscription scenario: it holds a stream until
    /// `until`. Its first answer is its outcome, recorded like a request's
    /// (latency = time to subscribe, from the intended instant to the
    /// response headers); it stays in flight while it holds on.
    pub(super) async fn subscribe(
        &self,
        hook: &Hook,
        (request, kind): (Request, usize),
        intended: Instant,
        until: Instant,
        stop: &CancellationToken,
    ) {
        let sent_at = Instant::now();
        self.went_out(intended);
        let answered = Cell::new(false);
        hook.subscribe(&request, intended, until, stop, |outcome, at, opening| {
            answered.set(true);
            let in_scenario = at.saturating_duration_since(self.scenario_start);
            self.recorder.borrow_mut().completed(
                self.interval_of(at),
                Completion {
                    outcome,
                    latency_micros: at.saturating_duration_since(intended).as_micros() as u64,
                    service_micros: at.saturating_duration_since(sent_at).as_micros() as u64,
                    pool_wait_micros: None,
                    warmup: intended.saturating_duration_since(self.scenario_start) < self.warmup,
                    in_window: in_scenario >= self.warmup && in_scenario < self.duration,
                    phases: Phases {
                        connect: opening.connect,
                        tls: opening.tls,
                        ttfb: opening.ttfb,
                        body: None,
                        new_connection: opening.connect.is_some(),
                        reused: false,
                    },
                    kind,
                },
            );
        })
        .await;
        // One never answered (stopped first) is abandoned, as a request
        // would be: it stays in flight at the end.
        if answered.get() {
            self.done_one();
        }
    }

    /// One request, subscriber or flow less in flight.
    pub(super) fn done_one(&self) {
        self.in_flight.set(self.in_flight.get() - 1);
        self.worker_in_flight.set(self.worker_in_flight.get() - 1);
    }
}
