//! What a lost agent never reported of its share, split by what can be
//! known of it. Arrivals due before the agent had certainly stopped (its
//! "unknown until", `loss.rs`) may have been sent or not: their fate is
//! unknown, and they are booked `unreported`. Those due after were
//! certainly not sent by it: unsent `agent_lost`. The agent's own figures,
//! delivered after its loss, take arrivals back out of the booking, the
//! unknown ones first; once they are whole (its `Finished`), whatever is
//! still unknown was never sent. The arithmetic ([`Split`], [`Booking`]) and
//! its bookings in the merged state are here, property-tested: the parts
//! always add up to what the agent left unreported, and `intended == sent
//! + unsent + unreported` holds in every scope throughout.

use loadfleet_proto::figures::Snapshot;
use loadfleet_proto::vocab::UnsentReason;

use crate::aggregate::Aggregate;

/// One interval of a lost agent's booking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Split {
    /// Fate unknown.
    pub(super) unreported: u64,
    /// Certainly not sent by it.
    pub(super) lost: u64,
}

impl Split {
    /// What a lost agent left unreported of one interval: of `planned`
    /// arrivals of its share, it reported `reported` intended, and
    /// `before` were due before it had certainly stopped. It handles its
    /// arrivals in time order, so those it reported are its earliest: the
    /// ones due before the cut that it did not report are unknown, the
    /// rest certainly not sent. `unreported + lost` is always `planned -
    /// reported` (nothing, for an agent that reported more than planned).
    pub(super) fn of(planned: u64, reported: u64, before: u64) -> Split {
        let missing = planned.saturating_sub(reported);
        let unreported = before.min(planned).saturating_sub(reported).min(missing);
        Split {
            unreported,
            lost: missing - unreported,
        }
    }

    pub(super) fn total(self) -> u64 {
        self.unreported + self.lost
    }
}

/// A late snapshot reports more arrivals of an interval than the agent's
/// share left unreported there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Beyond {
    /// What the booking held for that interval.
    pub(super) booked: u64,
}

/// One lost agent's booking in one scenario.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Booking {
    /// By interval.
    pub(super) rows: Vec<Split>,
    /// Arrivals it had reported intended and never sent or unsent when it
    /// was lost (they waited for its connections): unknown too, booked at
    /// `held_at` with no `intended` of their own.
    pub(super) held: u64,
    pub(super) held_at: u64,
}

impl Booking {
    /// Books lost agent `agent`'s share of `scenario` that it never
    /// reported into `agg`: `plan` gives, per interval, the arrivals of its
    /// share and those due before it had certainly stopped (none for a
    /// closed-model scenario, which has no schedule to count). What it
    /// reported intended and never sent or unsent is unknown too, at its
    /// last reported interval.
    pub(super) fn book(
        agg: &mut Aggregate,
        agent: usize,
        scenario: usize,
        plan: impl Iterator<Item = (u64, u64)>,
    ) -> Booking {
        let held_at = agg.reported(agent, scenario).len().saturating_sub(1) as u64;
        let held = agg.book_held_unreported(agent, scenario, held_at);
        let mut rows = Vec::new();
        for (interval, (planned, before)) in plan.enumerate() {
            let reported = agg
                .reported(agent, scenario)
                .get(interval)
                .copied()
                .unwrap_or(0);
            let split = Split::of(planned, reported, before);
            let at = interval as u64;
            agg.book_unreported(agent, scenario, at, split.unreported, split.unreported);
            agg.book_unsent(agent, scenario, at, split.lost, UnsentReason::AgentLost);
            rows.push(split);
        }
        Booking {
            rows,
            held,
            held_at,
        }
    }

    /// Adds one of lost agent `agent`'s late snapshots `s` (checked as any)
    /// to `agg`: in an `open` scenario its arrivals come out of the booking
    /// first, the unknown ones first ([`Booking::take`]), so they are
    /// counted once; arrivals it resolves that were held when it was lost
    /// leave the unknown. Refused, with nothing changed, when it reports
    /// more arrivals of its interval than the booking holds.
    pub(super) fn take_in(
        &mut self,
        agg: &mut Aggregate,
        agent: usize,
        s: &Snapshot,
        open: bool,
    ) -> Result<(), Beyond> {
        let (sc, f) = (s.scenario as usize, &s.figures);
        let split = if open {
            self.take(s.interval_index, f.intended)?
        } else {
            Split::default()
        };
        let held_before = agg.held(agent, sc);
        let resolved = f.sent + f.unsent.total();
        let from_held = self.resolve_held(resolved.saturating_sub(held_before + f.intended));
        agg.unbook(agent, sc, s.interval_index, split.unreported, split.lost);
        agg.add(agent, s);
        agg.settle_unreported(agent, sc, self.held_at, from_held, None);
        Ok(())
    }

    /// Lost agent `agent`'s late figures are whole (its `Finished` came):
    /// whatever of `scenario` is still unknown was never sent, nor what it
    /// reported intended and never resolved. Both become unsent
    /// `agent_lost` in `agg`.
    pub(super) fn close(&mut self, agg: &mut Aggregate, agent: usize, scenario: usize) {
        for (interval, n) in self.settle() {
            agg.settle_unreported(agent, scenario, interval, n, Some(UnsentReason::AgentLost));
        }
        let held = agg.held(agent, scenario);
        let last = agg.reported(agent, scenario).len().saturating_sub(1) as u64;
        agg.book_held_unsent(agent, scenario, last, held, UnsentReason::AgentLost);
    }

    /// A late snapshot reports `n` arrivals of interval `i` intended: they
    /// come out of the booking, the unknown ones first, and the split
    /// taken is returned. Refused when the booking holds fewer: the agent
    /// would add arrivals beyond its share.
    fn take(&mut self, i: u64, n: u64) -> Result<Split, Beyond> {
        if n == 0 {
            return Ok(Split::default());
        }
        let Some(row) = usize::try_from(i).ok().and_then(|i| self.rows.get_mut(i)) else {
            return Err(Beyond { booked: 0 });
        };
        if n > row.total() {
            return Err(Beyond {
                booked: row.total(),
            });
        }
        let unreported = n.min(row.unreported);
        let taken = Split {
            unreported,
            lost: n - unreported,
        };
        row.unreported -= taken.unreported;
        row.lost -= taken.lost;
        Ok(taken)
    }

    /// A late snapshot resolved (sent or unsent) `n` arrivals that were
    /// held when the agent was lost: they leave the unknown; returns how
    /// many the booking held.
    fn resolve_held(&mut self, n: u64) -> u64 {
        let n = n.min(self.held);
        self.held -= n;
        n
    }

    /// The agent's figures are whole: every arrival still unknown was
    /// never sent. Returns them as (interval, count), held ones included;
    /// the rows keep theirs as lost.
    fn settle(&mut self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = self
            .rows
            .iter_mut()
            .enumerate()
            .filter(|(_, r)| r.unreported > 0)
            .map(|(i, r)| {
                let n = std::mem::take(&mut r.unreported);
                r.lost += n;
                (i as u64, n)
            })
            .collect();
        if self.held > 0 {
            out.push((self.held_at, std::mem::take(&mut self.held)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl Booking {
        /// Arrivals of the booking whose fate is unknown.
        fn unreported(&self) -> u64 {
            self.rows.iter().map(|r| r.unreported).sum::<u64>() + self.held
        }
    }

    #[test]
    fn the_arrivals_before_the_cut_are_unknown() {
        // 10 planned, 3 reported, 6 due before the cut: 3 unknown, 4 not sent.
        assert_eq!(
            Split::of(10, 3, 6),
            Split {
                unreported: 3,
                lost: 4
            }
        );
        // It reported past the cut: nothing unknown is left.
        assert_eq!(
            Split::of(10, 8, 6),
            Split {
                unreported: 0,
                lost: 2
            }
        );
        assert_eq!(Split::of(5, 9, 5), Split::default());
    }

    fn snapshot(interval: u64, intended: u64, sent: u64, unsent: u64) -> Snapshot {
        let s = loadfleet_proto::v1::Snapshot {
            interval_index: interval,
            intended,
            sent,
            unsent: [("late".to_string(), unsent)].into_iter().collect(),
            ..Default::default()
        };
        Snapshot::try_from(&s).expect("a sound snapshot")
    }

    /// `intended == sent + unsent + unreported + held` for the agent, its
    /// scenario and the totals, and the seconds add up to the totals.
    fn books_balance(agg: &Aggregate, planned: u64) -> Result<(), TestCaseError> {
        let held = agg.held(0, 0);
        for (scope, f, unknown) in [
            ("totals", &agg.totals, agg.unreported.total),
            ("scenario", &agg.scenarios[0], agg.unreported.scenarios[0]),
            ("agent", &agg.agents[0], agg.unreported.agents[0]),
        ] {
            prop_assert_eq!(f.intended, planned, "{} intended", scope);
            prop_assert_eq!(
                f.intended,
                f.sent + f.unsent.total() + unknown + held,
                "{}",
                scope
            );
        }
        let per_second: (u64, u64) = agg
            .intervals
            .values()
            .fold((0, 0), |(i, u), iv| (i + iv.intended, u + iv.unreported));
        prop_assert_eq!(per_second, (planned, agg.unreported.total));
        Ok(())
    }

    proptest! {
        /// The books balance through everything a lost agent's share goes
        /// through: what it reported before its loss (some of it still
        /// waiting for its connections), the booking at the loss, late
        /// snapshots taken in or refused (a refused one changes nothing),
        /// and its `Finished`, after which nothing is of unknown fate.
        #[test]
        fn the_books_balance_from_loss_to_late_figures(
            planned in prop::collection::vec(0u64..40, 1..8),
            reported in 0usize..8,
            cut in 0usize..9,
            cut_part in 0u64..40,
            resolve in prop::collection::vec((0u64..60, 0u64..10), 8),
            late in prop::collection::vec((0u64..9, 0u64..60, 0u64..80, 0u64..5), 0..10),
        ) {
            let total: u64 = planned.iter().sum();
            let mut agg = Aggregate::new(1, 1);
            // Before the loss: its first intervals, whole as intended,
            // resolving what it can of them and of earlier ones.
            let mut held = 0u64;
            for (i, &p) in planned.iter().enumerate().take(reported) {
                let (sent, unsent) = resolve[i];
                let sent = sent.min(held + p);
                let unsent = unsent.min(held + p - sent);
                held = held + p - sent - unsent;
                agg.add(0, &snapshot(i as u64, p, sent, unsent));
            }
            let plan = planned.iter().enumerate().map(|(i, &p)| {
                let before = match i.cmp(&cut) {
                    std::cmp::Ordering::Less => p,
                    std::cmp::Ordering::Equal => cut_part.min(p),
                    std::cmp::Ordering::Greater => 0,
                };
                (p, before)
            });
            let mut booking = Booking::book(&mut agg, 0, 0, plan);
            books_balance(&agg, total)?;
            prop_assert_eq!(agg.held(0, 0), 0, "held arrivals are unknown now");
            for (interval, intended, sent, unsent) in late {
                let before = (agg.totals.clone(), agg.unreported.clone(), booking.clone());
                let sent = sent.min(agg.held(0, 0) + booking.held + intended);
                let unsent = unsent.min(agg.held(0, 0) + booking.held + intended - sent);
                let s = snapshot(interval, intended, sent, unsent);
                if booking.take_in(&mut agg, 0, &s, true).is_err() {
                    prop_assert!(agg.totals == before.0, "a refusal changes nothing");
                    prop_assert_eq!(agg.unreported.total, before.1.total);
                    prop_assert_eq!(&booking, &before.2);
                }
                books_balance(&agg, total)?;
            }
            booking.close(&mut agg, 0, 0);
            books_balance(&agg, total)?;
            prop_assert_eq!(agg.unreported.total, 0);
            prop_assert_eq!(agg.held(0, 0), 0);
        }

        /// The split adds up exactly to what the agent left unreported, and
        /// nothing due after the cut is ever unknown.
        #[test]
        fn the_split_adds_up(planned in 0u64..10_000, reported in 0u64..12_000, before in 0u64..12_000) {
            let s = Split::of(planned, reported, before);
            prop_assert_eq!(s.total(), planned.saturating_sub(reported));
            prop_assert!(s.unreported <= before.min(planned));
            // Every arrival due after the cut is lost, bar those reported
            // beyond the cut.
            let after = planned - before.min(planned);
            prop_assert!(s.lost + reported.saturating_sub(before.min(planned)) >= after);
        }

        /// Whatever late figures take out of a booking, the booking and what
        /// was taken always add up to the split it began as; an intake
        /// beyond an interval's booking is refused and changes nothing;
        /// the unknown only ever shrinks; and once settled nothing is
        /// unknown and the whole remainder is lost.
        #[test]
        fn late_figures_keep_the_booking_whole(
            rows in prop::collection::vec((0u64..200, 0u64..200, 0u64..200), 1..12),
            held in 0u64..50,
            takes in prop::collection::vec((0u64..14, 0u64..250), 0..30),
            resolves in prop::collection::vec(0u64..30, 0..5),
        ) {
            let splits: Vec<Split> = rows.iter().map(|&(p, r, b)| Split::of(p, r, b)).collect();
            let start: u64 = splits.iter().map(|s| s.total()).sum::<u64>() + held;
            let mut b = Booking { rows: splits, held, held_at: 0 };
            let mut taken = 0u64;
            let mut unknown = b.unreported();
            for (i, n) in takes {
                let before = b.clone();
                match b.take(i, n) {
                    Ok(t) => {
                        prop_assert_eq!(t.total(), n);
                        taken += n;
                    }
                    Err(Beyond { booked }) => {
                        prop_assert!(n > booked);
                        prop_assert_eq!(&b, &before);
                    }
                }
                prop_assert!(b.unreported() <= unknown);
                unknown = b.unreported();
                let booked: u64 = b.rows.iter().map(|s| s.total()).sum::<u64>() + b.held;
                prop_assert_eq!(booked + taken, start);
            }
            for n in resolves {
                taken += b.resolve_held(n);
            }
            let (unknown, held_left) = (b.unreported(), b.held);
            let settled: u64 = b.settle().iter().map(|&(_, n)| n).sum();
            prop_assert_eq!(settled, unknown);
            prop_assert_eq!(b.unreported(), 0);
            let lost: u64 = b.rows.iter().map(|s| s.lost).sum::<u64>() + held_left;
            prop_assert_eq!(lost + taken, start);
        }
    }
}
