//! Handing a lost agent's remaining arrivals to the survivors.
//!
//! With `--on-agent-loss redistribute`, the coordinator names a hand-over
//! instant `H` after it noticed the loss. Every arrival the lost agent owned
//! at or after `H` is dealt among the survivors by a second interleave,
//! over the survivors' weights, indexed by the arrival's position among the
//! lost agent's arrivals from `H` on. Both the coordinator (to know what
//! each agent should have sent) and every survivor (to know what to send)
//! walk the schedule with the same [`Owners`], so every arrival still has
//! exactly one owner and the fleet schedule stays exact, whatever the
//! number of hand-overs (a survivor lost later hands over what it took too).

use std::sync::Arc;

use crate::partition::{Interleave, PartitionError};

/// One hand-over, as every agent applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// Fleet index of the lost agent.
    pub lost: usize,
    /// From this instant (ns after the common start) the survivors own the
    /// lost agent's arrivals; before it they stay the lost agent's.
    pub from_ns: u64,
    /// Fleet indexes of the survivors, in fleet order.
    pub survivors: Vec<usize>,
    interleave: Interleave,
}

impl Handover {
    /// `weights` are the whole fleet's, indexed by agent (the assignment's).
    pub fn new(
        lost: usize,
        from_ns: u64,
        survivors: Vec<usize>,
        weights: &[u32],
    ) -> Result<Self, PartitionError> {
        let mut picked = Vec::with_capacity(survivors.len());
        for &s in &survivors {
            let w = *weights.get(s).ok_or(PartitionError::BadIndex {
                index: s,
                agents: weights.len(),
            })?;
            picked.push(w);
        }
        if lost >= weights.len() {
            return Err(PartitionError::BadIndex {
                index: lost,
                agents: weights.len(),
            });
        }
        Ok(Self {
            lost,
            from_ns,
            interleave: Interleave::new(&picked)?,
            survivors,
        })
    }
}

/// Who sends each arrival of one scenario, hand-overs included. Stateful:
/// feed it every arrival of the scenario in order, none skipped.
/// It owns what it reads, so an agent's worker can keep one per hand-over
/// for as long as it sends.
#[derive(Debug, Clone)]
pub struct Owners {
    base: Arc<Interleave>,
    handovers: Arc<[Handover]>,
    /// Per hand-over: the lost agent's arrivals at or after its instant so far.
    taken: Vec<u64>,
}

impl Owners {
    pub fn new(base: Arc<Interleave>, handovers: Arc<[Handover]>) -> Self {
        Self {
            taken: vec![0; handovers.len()],
            base,
            handovers,
        }
    }

    /// The owner of arrival `k`, intended at `at_ns` after the common start.
    pub fn owner(&mut self, k: u64, at_ns: u64) -> usize {
        self.owner_and_level(k, at_ns).0
    }

    /// The owner of arrival `k`, and how many hand-overs (in order) moved
    /// it: 0 means it is still its first owner's.
    pub fn owner_and_level(&mut self, k: u64, at_ns: u64) -> (usize, usize) {
        let mut owner = self.base.owner(k);
        let mut level = 0;
        for (j, h) in self.handovers.iter().enumerate() {
            if owner == h.lost && at_ns >= h.from_ns {
                let m = self.taken[j];
                self.taken[j] += 1;
                owner = h.survivors[h.interleave.owner(m)];
                level = j + 1;
            }
        }
        (owner, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn survivors_share_by_weight() {
        let base = Arc::new(Interleave::equal(3).unwrap());
        let h: Arc<[Handover]> = vec![Handover::new(1, 10, vec![0, 2], &[1, 1, 1]).unwrap()].into();
        let mut owners = Owners::new(base, h);
        let got: Vec<usize> = (0..12).map(|k| owners.owner(k, k)).collect();
        // Before 10 agent 1 keeps its own; from 10 on its arrivals alternate.
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 2]);
        assert!(Handover::new(5, 0, vec![0], &[1, 1]).is_err());
        assert!(Handover::new(1, 0, vec![], &[1, 1]).is_err());
    }

    proptest! {
        /// Whatever the hand-overs, every arrival has exactly one owner, the
        /// lost never own anything at or after their instant, and what
        /// moved went to survivors.
        #[test]
        fn handovers_keep_one_owner_per_arrival(
            weights in prop::collection::vec(1u32..5, 2..8),
            losses in prop::collection::vec((0usize..8, 0u64..200), 1..4),
        ) {
            let base = Arc::new(Interleave::new(&weights).unwrap());
            let mut alive: Vec<usize> = (0..weights.len()).collect();
            let mut handovers = Vec::new();
            let mut from = 0;
            for (pick, step) in losses {
                if alive.len() < 2 { break; }
                let lost = alive.remove(pick % alive.len());
                from += step;
                handovers.push(Handover::new(lost, from, alive.clone(), &weights).unwrap());
            }
            let mut owners = Owners::new(base, handovers.clone().into());
            for k in 0..400u64 {
                let o = owners.owner(k, k);
                for h in &handovers {
                    prop_assert!(!(o == h.lost && k >= h.from_ns), "arrival {k} owned by lost {o}");
                }
                prop_assert!(o < weights.len());
            }
        }
    }
}
