//! Subscription figures of one scenario, merged over agents and intervals
//! like every other figure ([`SseFigures`]: counts added, histograms added
//! bucket by bucket, fan-out receipts merged per event id), plus what only
//! the whole run can decide: the streams open per interval, and a cap on
//! the event ids kept.

use std::collections::BTreeMap;

use loadfleet_proto::figures::{Receipts, Sse, SseFigures};

/// Most event ids kept for the fan-out table over a whole run; ids beyond
/// it are counted as untracked. Bounds the coordinator's memory whatever
/// the agents send.
pub(crate) const MAX_FANOUT_IDS_KEPT: usize = 10_000;

/// One scenario's subscription figures, all agents together.
#[derive(Debug, Clone, Default)]
pub struct SseMerged {
    pub figures: SseFigures,
    /// Per interval: streams open at its end and at most during it, summed
    /// over agents.
    pub open_streams: BTreeMap<u64, (u64, u64)>,
}

impl SseMerged {
    /// Adds one agent's interval. Ids that find no room among those kept
    /// are counted untracked, so memory stays bounded over a long run.
    pub fn add(&mut self, interval: u64, sse: &Sse) {
        let kept = &self.figures.fanout.0;
        let room = MAX_FANOUT_IDS_KEPT.saturating_sub(kept.len());
        let new_ids = sse
            .figures
            .fanout
            .0
            .keys()
            .filter(|id| !kept.contains_key(*id));
        if new_ids.count() > room {
            let mut f = sse.figures.clone();
            let mut admitted = 0;
            f.fanout.0.retain(|id, r| {
                let keep = kept.contains_key(id) || admitted < room;
                if !kept.contains_key(id) && keep {
                    admitted += 1;
                }
                if !keep {
                    f.fanout_untracked = f.fanout_untracked.saturating_add(r.subscribers);
                }
                keep
            });
            self.figures += &f;
        } else {
            self.figures += &sse.figures;
        }
        let open = self.open_streams.entry(interval).or_default();
        open.0 = open.0.saturating_add(sse.open_streams.in_flight);
        open.1 = open.1.saturating_add(sse.open_streams.max_in_flight);
    }

    /// Event ids that more than one subscriber received: the fan-out rows.
    pub fn fanned_out(&self) -> impl Iterator<Item = (&String, &Receipts)> {
        self.figures
            .fanout
            .0
            .iter()
            .filter(|(_, r)| r.subscribers > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::v1;

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
        m.add(3, &Sse::try_from(&figures(500, 900, 2)).unwrap());
        m.add(3, &Sse::try_from(&figures(300, 700, 3)).unwrap());
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
        assert_eq!(m.figures.events, 5);
        assert_eq!(m.open_streams[&3], (4, 4));
    }
}
