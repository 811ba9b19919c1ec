//! When requests run out of time: those on the wire end at their deadlines
//! as timeouts, their connections closed; those waiting for a connection
//! end as unsent `pool_timeout`, never written and taking no connection
//! down.

use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::answer::phases;
use super::connection::Exchange;
use super::state::State;
use super::DirectPool;
use loadfleet_proto::vocab::{ErrorKind, UnsentReason};

use crate::client::outcome::{Exchanged, Outcome, Phases};

impl<T: Copy + 'static> DirectPool<T> {
    /// When the pool must be driven again at the latest, for a request
    /// whose time runs out then.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let state = self.state.borrow();
        let busy = state.ledger.busy();
        let queued = state
            .ledger
            .first_waiter()
            .map(|w| w.job.deadline(self.timeout));
        busy.then_some(state.next_check)
            .into_iter()
            .chain(queued)
            .min()
    }

    /// What a request on the wire whose time ran out comes to: a timeout,
    /// at its deadline.
    pub(super) fn out_of_time(&self, ex: &Exchange<T>) -> Exchanged {
        Exchanged {
            outcome: Outcome::Error(ErrorKind::Timeout),
            on_wire: Some(ex.on_wire),
            pool_wait: ex.pool_wait,
            phases: phases(ex.opened, None),
            answered: Some(ex.deadline),
        }
    }

    /// Ends, at their deadlines, the requests whose time ran out by `now`:
    /// waiting ones as `pool_timeout`, never sent; those on the wire by
    /// where they spent it, their connections closed. Then sends waiting
    /// requests on whatever connections are free.
    pub(super) fn expire(
        self: &Rc<Self>,
        state: &mut State<T>,
        now: Instant,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        if now >= state.next_check {
            // Deadlines only come later than the earliest one kept, except
            // for a waiting request going onto the wire, which lowers it
            // (see `put_on_wire`): so nothing is looked at per request.
            let mut next = now + self.timeout;
            for token in 0..state.slots.len() {
                let Some(deadline) = state.slots[token]
                    .as_ref()
                    .and_then(|slot| slot.busy.as_ref())
                    .map(|ex| ex.deadline)
                else {
                    continue;
                };
                if deadline > now {
                    next = next.min(deadline);
                    continue;
                }
                let Some(ex) = state.slots[token].as_mut().and_then(|s| s.busy.take()) else {
                    continue;
                };
                state.close(token);
                let exchanged = self.out_of_time(&ex);
                done.push((ex.tag, exchanged));
            }
            // At least a millisecond apart: when requests time out one after
            // another, a scan per request over thousands of connections
            // would cost more than the requests.
            state.next_check = next.max(now + Duration::from_millis(1));
        }
        while let Some(front) = state.ledger.first_waiter() {
            let now = Instant::now();
            let deadline = front.job.deadline(self.timeout);
            let waited = now.saturating_duration_since(front.job.sent_at);
            if now >= deadline {
                if let Some(w) = state.ledger.next_waiter() {
                    done.push((
                        w.job.tag,
                        Exchanged {
                            outcome: Outcome::Unsent(UnsentReason::PoolTimeout),
                            on_wire: None,
                            pool_wait: Some(deadline.saturating_duration_since(w.job.sent_at)),
                            phases: Phases::default(),
                            answered: Some(deadline),
                        },
                    ));
                }
                continue;
            }
            if let Some(token) = state.ledger.take_newest_idle() {
                if let Some(w) = state.ledger.next_waiter() {
                    state.went_out.push(w.job.tag);
                    self.put_on_wire(state, token, w.job, now, Some(waited), done);
                }
            } else if state.ledger.take_slot() {
                // The dial is not a wait for the pool: the wait ends here.
                if let Some(w) = state.ledger.next_waiter() {
                    state.went_out.push(w.job.tag);
                    self.dial(w.job, Some(waited));
                }
            } else {
                break;
            }
        }
    }
}
