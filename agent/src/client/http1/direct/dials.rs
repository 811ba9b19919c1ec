//! Opening the pool's connections: each dial in a task of the worker's
//! (resolution, `--bind`, connect, TLS are the [`Dialer`]'s), taken up by
//! the next drive.
//!
//! [`Dialer`]: crate::client::dial::Dialer

use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::outgoing::Job;
use super::state::State;
use super::DirectPool;
use crate::client::dial::Dialed;
use loadfleet_proto::vocab::ErrorKind;

use crate::client::failure::ClientFailure;
use crate::client::outcome::{Exchanged, Outcome, Phases};

/// A finished dial and the job that asked for it: its pool wait, and the
/// connection, the dial's failure, or `Err(())` when its time ran out.
pub(super) type DialDone<T> = (
    Job<T>,
    Option<Duration>,
    Result<Result<Dialed, ClientFailure>, ()>,
);

impl<T: Copy + 'static> DirectPool<T> {
    /// Opens up to `n` connections before any request needs them, as
    /// [`crate::client::Transport::open_ahead`] does for the task-driven
    /// pool: the first request on each reports its connect time as its own.
    /// A connection takes its slot only once it is open, so dials dropped
    /// unfinished (the run started first) hold none.
    pub(crate) async fn open_ahead(&self, n: usize) {
        let n = n.min(self.state.borrow().ledger.slots_left());
        let dials = (0..n).map(|_| self.dialer.dial(&self.uri));
        for dialed in futures::future::join_all(dials).await {
            let mut state = self.state.borrow_mut();
            let adopted = dialed.map_err(|e| format!("{e:?}")).and_then(|d| {
                if !state.ledger.take_slot() {
                    return Err("every slot is taken".to_string());
                }
                match state.adopt(d.io) {
                    Ok(token) => Ok((token, d.connect, d.tls)),
                    Err(e) => {
                        state.ledger.free_slot();
                        Err(e.to_string())
                    }
                }
            });
            match adopted {
                Ok((token, connect, tls)) => {
                    if let Some(slot) = state.slot(token) {
                        slot.fresh = Some((connect, tls));
                    }
                    state.ledger.push_idle(token);
                }
                Err(e) => tracing::debug!("opening a connection ahead of the run: {e}"),
            }
        }
    }

    /// Opens a connection for `job` in a task of its own, within the job's
    /// time; the job goes on it when [`Self::drive`] takes the dial up. Its
    /// slot is taken.
    pub(super) fn dial(self: &Rc<Self>, job: Job<T>, pool_wait: Option<Duration>) {
        let pool = self.clone();
        self.dialing.set(self.dialing.get() + 1);
        tokio::task::spawn_local(async move {
            let deadline = Instant::now() + pool.timeout;
            let result = tokio::time::timeout_at(deadline, pool.dialer.dial(&pool.uri))
                .await
                .map_err(|_| ());
            pool.dialing.set(pool.dialing.get().saturating_sub(1));
            pool.dialed.borrow_mut().push((job, pool_wait, result));
            if let Some(waker) = pool.dial_waker.take() {
                waker.wake();
            }
        });
    }

    /// Takes up a finished dial: its job goes onto the new connection, or
    /// fails with the dial, giving the slot back.
    pub(super) fn dial_finished(
        self: &Rc<Self>,
        state: &mut State<T>,
        job: Job<T>,
        pool_wait: Option<Duration>,
        result: Result<Result<Dialed, ClientFailure>, ()>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let outcome = match result {
            Ok(Ok(dialed)) => {
                let opened = (dialed.connect, dialed.tls);
                match state.adopt(dialed.io) {
                    Ok(token) => {
                        if let Some(slot) = state.slot(token) {
                            slot.fresh = Some(opened);
                        }
                        self.put_on_wire(state, token, job, Instant::now(), pool_wait, done);
                        return;
                    }
                    Err(e) => Outcome::Error(ClientFailure::Connect(e).kind()),
                }
            }
            Ok(Err(failure)) => Outcome::Error(failure.kind()),
            Err(()) => Outcome::Error(ErrorKind::Timeout),
        };
        state.ledger.free_slot();
        done.push((
            job.tag,
            Exchanged {
                outcome,
                on_wire: None,
                pool_wait,
                phases: Phases::default(),
                answered: None,
            },
        ));
    }
}
