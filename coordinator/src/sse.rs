//! Subscription figures of one scenario, merged over agents and intervals
//! like every other figure: counts added, histograms added bucket by
//! bucket, fan-out receipts merged per event id (first = earliest, last =
//! latest, subscribers added). Counts saturate rather than wrap: the
//! fleet's validator bounds each snapshot, not their sum over a long run.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{merge_into, new_histogram, CodecError};
use loadfleet_proto::v1;

/// Most event ids kept for the fan-out table over a whole run; ids beyond
/// it are counted as untracked. Bounds the coordinator's memory whatever
/// the agents send.
pub const MAX_FANOUT_IDS_KEPT: usize = 10_000;

/// Receipts of one event id, fleet-wide: subscribers, first and last
/// receipt (ns after the common start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipts {
    pub subscribers: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// One scenario's subscription figures, all agents together.
#[derive(Debug, Clone)]
pub struct SseMerged {
    pub opened: u64,
    pub first_event: Histogram<u64>,
    pub events: u64,
    pub events_per_subscriber: Histogram<u64>,
    pub gap: Histogram<u64>,
    pub ended_by_server: u64,
    pub reconnects: u64,
    pub resumed: u64,
    pub latency: Histogram<u64>,
    pub negative_latency: Histogram<u64>,
    pub negative: u64,
    pub no_send_time: u64,
    pub duplicates: u64,
    pub comments: u64,
    pub stream_errors: BTreeMap<String, u64>,
    pub refused: BTreeMap<u32, u64>,
    pub fanout: BTreeMap<String, Receipts>,
    pub fanout_untracked: u64,
    /// Per interval: streams open at its end and at most during it, summed
    /// over agents.
    pub open_streams: BTreeMap<u64, (u64, u64)>,
}

impl Default for SseMerged {
    fn default() -> Self {
        SseMerged {
            opened: 0,
            first_event: new_histogram(),
            events: 0,
            events_per_subscriber: new_histogram(),
            gap: new_histogram(),
            ended_by_server: 0,
            reconnects: 0,
            resumed: 0,
            latency: new_histogram(),
            negative_latency: new_histogram(),
            negative: 0,
            no_send_time: 0,
            duplicates: 0,
            comments: 0,
            stream_errors: BTreeMap::new(),
            refused: BTreeMap::new(),
            fanout: BTreeMap::new(),
            fanout_untracked: 0,
            open_streams: BTreeMap::new(),
        }
    }
}

impl SseMerged {
    /// Adds one agent's interval. Histograms are decoded first, so a
    /// corrupt one leaves nothing half-added.
    pub fn add(&mut self, interval: u64, f: &v1::SseFigures) -> Result<(), CodecError> {
        let decode = |bytes: &[u8]| -> Result<Histogram<u64>, CodecError> {
            let mut h = new_histogram();
            merge_into(&mut h, bytes)?;
            Ok(h)
        };
        let hists = [
            decode(&f.first_event)?,
            decode(&f.events_per_subscriber)?,
            decode(&f.gap)?,
            decode(&f.latency)?,
            decode(&f.negative_latency)?,
        ];
        for (into, from) in [
            &mut self.first_event,
            &mut self.events_per_subscriber,
            &mut self.gap,
            &mut self.latency,
            &mut self.negative_latency,
        ]
        .into_iter()
        .zip(&hists)
        {
            if let Err(e) = into.add(from) {
                tracing::error!("histogram merge failed: {e:?}");
            }
        }
        self.opened = self.opened.saturating_add(f.opened);
        self.events = self.events.saturating_add(f.events);
        self.ended_by_server = self.ended_by_server.saturating_add(f.ended_by_server);
        self.reconnects = self.reconnects.saturating_add(f.reconnects);
        self.resumed = self.resumed.saturating_add(f.resumed);
        self.negative = self.negative.saturating_add(f.negative);
        self.no_send_time = self.no_send_time.saturating_add(f.no_send_time);
        self.duplicates = self.duplicates.saturating_add(f.duplicates);
        self.comments = self.comments.saturating_add(f.comments);
        self.fanout_untracked = self.fanout_untracked.saturating_add(f.fanout_untracked);
        for (k, n) in &f.stream_errors {
            let count = self.stream_errors.entry(k.clone()).or_default();
            *count = count.saturating_add(*n);
        }
        for (k, n) in &f.refused {
            let count = self.refused.entry(*k).or_default();
            *count = count.saturating_add(*n);
        }
        for r in &f.fanout {
            let kept = self.fanout.len();
            match self.fanout.get_mut(&r.id) {
                Some(seen) => {
                    seen.subscribers = seen.subscribers.saturating_add(r.subscribers);
                    seen.first_ns = seen.first_ns.min(r.first_ns);
                    seen.last_ns = seen.last_ns.max(r.last_ns);
                }
                None if kept < MAX_FANOUT_IDS_KEPT => {
                    self.fanout.insert(
                        r.id.clone(),
                        Receipts {
                            subscribers: r.subscribers,
                            first_ns: r.first_ns,
                            last_ns: r.last_ns,
                        },
                    );
                }
                None => self.fanout_untracked = self.fanout_untracked.saturating_add(r.subscribers),
            }
        }
        let open = self.open_streams.entry(interval).or_default();
        open.0 = open.0.saturating_add(f.open_streams);
        open.1 = open.1.saturating_add(f.max_open_streams);
        Ok(())
    }

    /// Event ids that more than one subscriber received: the fan-out rows.
    pub fn fanned_out(&self) -> impl Iterator<Item = (&String, &Receipts)> {
        self.fanout.iter().filter(|(_, r)| r.subscribers > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_merges_first_and_last_over_agents() {
        let mut m = SseMerged::default();
        let figures = |first, last, subscribers| v1::SseFigures {
            events: subscribers,
            open_streams: 2,
            max_open_streams: 2,
            fanout: vec![v1::SseFanout {
                id: "9".into(),
                subscribers,
                first_ns: first,
                last_ns: last,
            }],
            ..Default::default()
        };
        m.add(3, &figures(500, 900, 2)).unwrap();
        m.add(3, &figures(300, 700, 3)).unwrap();
        let (id, r) = m.fanned_out().next().unwrap();
        assert_eq!(id, "9");
        assert_eq!(
            *r,
            Receipts {
                subscribers: 5,
                first_ns: 300,
                last_ns: 900
            }
        );
        assert_eq!(m.events, 5);
        assert_eq!(m.open_streams[&3], (4, 4));
    }
}
