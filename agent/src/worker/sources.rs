//! Where one worker's arrivals of an open scenario come from: its part of
//! the agent's own slice, and of every hand-over the agent takes part in.

use std::sync::Arc;

use loadfleet_proto::handover::{Handover, Owners};
use loadfleet_proto::partition::{AgentSlice, Interleave};
use loadfleet_proto::schedule::ArrivalSchedule;

use super::plan::Handovers;

/// One worker's arrivals of one open scenario, in time order. Each source
/// is dealt round-robin over the agent's workers by position.
pub(super) struct Sources<'a> {
    schedule: &'a ArrivalSchedule,
    interleave: &'a Arc<Interleave>,
    agent: usize,
    worker: usize,
    workers: usize,
    /// The scenario's offset from the common start, which hand-over
    /// instants count from.
    offset_ns: u64,
    streams: Vec<Stream<'a>>,
    /// Hand-overs already turned into streams.
    known: usize,
}

/// One source of arrivals (fleet index, ns from the scenario start), with
/// its next one looked at.
struct Stream<'a> {
    head: Option<(u64, u64)>,
    rest: Box<dyn Iterator<Item = (u64, u64)> + 'a>,
}

impl<'a> Stream<'a> {
    fn new(mut rest: Box<dyn Iterator<Item = (u64, u64)> + 'a>) -> Self {
        Self {
            head: rest.next(),
            rest,
        }
    }
}

impl<'a> Sources<'a> {
    /// The worker's share of `slice`, its agent's own arrivals; hand-overs
    /// join through [`Self::absorb`].
    pub(super) fn new(
        schedule: &'a ArrivalSchedule,
        interleave: &'a Arc<Interleave>,
        slice: &AgentSlice<'a>,
        (agent, worker, workers): (usize, usize, usize),
        offset_ns: u64,
    ) -> Self {
        let own = slice
            .indexed_arrivals()
            .enumerate()
            .filter(move |(n, _)| n % workers == worker)
            .map(|(_, a)| a);
        Self {
            schedule,
            interleave,
            agent,
            worker,
            workers,
            offset_ns,
            streams: vec![Stream::new(Box::new(own))],
            known: 0,
        }
    }

    /// Adds a stream per hand-over not seen yet. Hand-over `j` brings the
    /// arrivals that it (and no later one) gave to this agent; the earlier
    /// streams keep theirs, because only a lost agent loses arrivals and the
    /// coordinator sends nothing more to a lost agent.
    pub(super) fn absorb(&mut self, handovers: &Arc<[Handover]>) {
        while self.known < handovers.len() {
            let level = self.known + 1;
            self.known += 1;
            if !handovers[level - 1].survivors.contains(&self.agent) {
                continue;
            }
            let mut owners = Owners::new(self.interleave.clone(), handovers[..level].into());
            let (agent, offset) = (self.agent, self.offset_ns);
            let (worker, workers) = (self.worker, self.workers);
            let taken = self
                .schedule
                .arrivals()
                .enumerate()
                .map(|(k, t)| (k as u64, t))
                .filter(move |&(k, t)| {
                    owners.owner_and_level(k, offset.saturating_add(t)) == (agent, level)
                })
                .enumerate()
                .filter(move |(n, _)| n % workers == worker)
                .map(|(_, a)| a);
            self.streams.push(Stream::new(Box::new(taken)));
        }
    }

    /// The earliest next arrival over all streams, without taking it.
    pub(super) fn peek(&self) -> Option<(usize, (u64, u64))> {
        self.streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.head.map(|a| (i, a)))
            .min_by_key(|&(_, (_, t))| t)
    }

    pub(super) fn take(&mut self, stream: usize) {
        let s = &mut self.streams[stream];
        s.head = s.rest.next();
    }
}

/// Waits until a new hand-over arrives; never, once the session is gone.
pub(super) async fn handover_news(rx: &mut Handovers) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
