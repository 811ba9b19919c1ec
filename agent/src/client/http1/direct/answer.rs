//! One exchange on a connection: the request written, its answer read in
//! pieces as it arrives, and its times (on the wire, first byte, end) taken
//! from the kernel's arrival stamps.

use std::time::Duration;

use mio::{Interest, Token};
use tokio::time::Instant;

use super::connection::Exchange;
use super::outgoing::Job;
use super::socket::Received;
use super::state::State;
use super::DirectPool;
use crate::client::failure::ClientFailure;
use crate::client::http1::read::{arrived, give_buffer, READ_CHUNK, READ_MAX};
use crate::client::http1::wire::{Fed, ResponseReader};
use crate::client::outcome::{Exchanged, Outcome, Phases};

/// The most answer one look takes from one connection: the rest waits for
/// the next look, so that a server streaming an endless body as fast as
/// loopback goes cannot hold the loop in its reads, away from its
/// arrivals and from that request's deadline.
pub(super) const LOOK_BUDGET: usize = 4 * READ_MAX;

impl<T: Copy + 'static> DirectPool<T> {
    /// Writes `job` onto the connection at `token`, which must be open and
    /// not busy. A connection that cannot take it is closed and the job
    /// fails.
    pub(super) fn put_on_wire(
        &self,
        state: &mut State<T>,
        token: usize,
        job: Job<T>,
        on_wire: Instant,
        pool_wait: Option<Duration>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let State {
            registry,
            slots,
            out,
            next_check,
            ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        let wire = job.request.wire(&self.host, out);
        let opened = slot.fresh.take();
        let written = slot.send(wire).and_then(|()| {
            if slot.pending() {
                registry.reregister(
                    &mut slot.stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
            }
            Ok(())
        });
        if let Err(e) = written {
            done.push((
                job.tag,
                Exchanged {
                    outcome: Outcome::Error(ClientFailure::Io(e).kind()),
                    on_wire: Some(on_wire),
                    pool_wait,
                    phases: phases(opened, None),
                    answered: None,
                },
            ));
            state.close(token);
            return;
        }
        // Its whole time again on the wire: a waiter handed a connection
        // with little of its wait left would otherwise close it.
        let deadline = on_wire + self.timeout;
        *next_check = (*next_check).min(deadline);
        slot.busy = Some(Exchange {
            tag: job.tag,
            deadline,
            reader: ResponseReader::new(job.request.method()),
            on_wire,
            head_at: None,
            last_at: None,
            pool_wait,
            opened,
            chunk: READ_CHUNK,
            size: 0,
        });
    }

    /// Writes what the socket at `token` did not take before.
    pub(super) fn flush(&self, state: &mut State<T>, token: usize, done: &mut Vec<(T, Exchanged)>) {
        let State {
            registry, slots, ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        match slot.push() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.finish(state, token, Err(ClientFailure::Io(e)), done),
        }
        if let Err(e) = registry.reregister(&mut slot.stream, Token(token), Interest::READABLE) {
            self.finish(state, token, Err(ClientFailure::Io(e)), done);
        }
    }

    /// Reads what the connection at `token` has: its answer, or, on an
    /// idle connection, the server's close (or bytes nobody asked for,
    /// which end it too). A read that leaves room in the buffer took all
    /// there was, so the next edge will say when more comes, unless the
    /// peer has `ended` its side: that edge is this one, and only the read
    /// after the data sees the end.
    pub(super) fn read(
        &self,
        state: &mut State<T>,
        token: usize,
        ended: bool,
        clocks: Option<&loadfleet_sys::Clocks>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let State {
            slots,
            raw,
            ledger,
            unfinished,
            ..
        } = state;
        let Some(slot) = slots.get_mut(token).and_then(Option::as_mut) else {
            return;
        };
        if slot.busy.is_none() {
            // A FIN that came with a session's ticket is this edge's too:
            // the read that takes the ticket may not reach it.
            if ended || !slot.idle_read(raw) {
                state.close(token);
            }
            return;
        }
        // Answer bytes this look found in the socket.
        let mut taken = 0;
        let result = loop {
            let chunk = slot.busy.as_ref().map_or(READ_CHUNK, |ex| ex.chunk);
            let before = slot.input.len();
            let received = slot.receive(raw, chunk);
            let Some(ex) = slot.busy.as_mut() else {
                break None;
            };
            match received {
                Ok(Received::Nothing) => break None,
                Ok(Received::End) => {
                    // The body's last byte came with the last read that
                    // had any; the close only confirmed it.
                    let end = ex.last_at.unwrap_or_else(Instant::now);
                    break Some(
                        ex.reader
                            .closed()
                            .map(|c| (c.status, false, end))
                            .map_err(ClientFailure::Wire),
                    );
                }
                Ok(Received::Bytes {
                    filled,
                    stamp,
                    closed,
                }) => {
                    // Over TLS a read may hold only the session's own
                    // messages (a ticket, the close_notify): the answer's
                    // times are those of its own bytes.
                    taken += slot.input.len() - before;
                    ex.size += slot.input.len() - before;
                    ledger.saw_answer(ex.size, false);
                    if slot.input.len() > before || ex.last_at.is_none() {
                        ex.last_at =
                            Some(arrived(stamp.and_then(|s| clocks?.instant(s)), ex.on_wire));
                    }
                    let at = ex.last_at.unwrap_or(ex.on_wire);
                    if filled {
                        // More is likely waiting: read it in larger pieces.
                        ex.chunk = (ex.chunk * 2).min(READ_MAX);
                    }
                    let spent = taken >= LOOK_BUDGET;
                    match ex
                        .reader
                        .feed_remembering(&slot.input, Some(&mut slot.memo))
                    {
                        Ok(Fed::More(used)) => {
                            slot.input.drain(..used);
                            if ex.head_at.is_none() && ex.reader.head_done() {
                                ex.head_at = Some(at);
                            }
                            if closed {
                                // The TLS peer said it is done: as a FIN
                                // after these bytes.
                                break Some(
                                    ex.reader
                                        .closed()
                                        .map(|c| (c.status, false, at))
                                        .map_err(ClientFailure::Wire),
                                );
                            }
                            if !filled && !ended {
                                break None;
                            }
                            if spent {
                                unfinished.push((token, ended));
                                break None;
                            }
                        }
                        Ok(Fed::Done(used, complete)) => {
                            // Bytes after the answer, a request not yet all
                            // written, or the peer's end (whose edge this
                            // is) end the connection.
                            let clean =
                                used == slot.input.len() && !slot.pending() && !ended && !closed;
                            give_buffer(std::mem::take(&mut slot.input));
                            break Some(Ok((complete.status, complete.reusable && clean, at)));
                        }
                        Err(e) => break Some(Err(ClientFailure::Wire(e))),
                    }
                }
                Err(failure) => break Some(Err(failure)),
            }
        };
        if let Some(slot) = state.slots.get_mut(token).and_then(Option::as_mut) {
            if let (Some(Ok(_)), Some(ex)) = (&result, &slot.busy) {
                state.ledger.saw_answer(ex.size, true);
            }
            // The session had something to say back that the socket did
            // not take (see [`Slot::receive`]).
            if slot.pending() {
                let _ = state.registry.reregister(
                    &mut slot.stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                );
            }
        }
        if let Some(result) = result {
            self.finish(state, token, result, done);
        }
    }

    /// Ends the exchange at `token` with `result` (status, whether the
    /// connection may carry another, when the answer ended): the
    /// connection goes idle, or closes.
    fn finish(
        &self,
        state: &mut State<T>,
        token: usize,
        result: Result<(u16, bool, Instant), ClientFailure>,
        done: &mut Vec<(T, Exchanged)>,
    ) {
        let Some(ex) = state
            .slots
            .get_mut(token)
            .and_then(Option::as_mut)
            .and_then(|slot| slot.busy.take())
        else {
            return;
        };
        let exchanged = match result {
            // An answer that ended after its deadline, read late because the
            // loop slept through it, is the timeout that expiring it at its
            // deadline would have said; it came whole, so its connection
            // can carry another.
            Ok((_, reusable, end)) if end > ex.deadline => {
                if reusable {
                    state.ledger.push_idle(token);
                } else {
                    state.close(token);
                }
                self.out_of_time(&ex)
            }
            Ok((status, reusable, end)) => {
                // An answer that arrived whole in one read has its head
                // and its end at the same instant.
                let head_at = ex.head_at.unwrap_or(end);
                if reusable {
                    state.ledger.push_idle(token);
                } else {
                    state.close(token);
                }
                Exchanged {
                    outcome: Outcome::Status(status),
                    on_wire: Some(ex.on_wire),
                    pool_wait: ex.pool_wait,
                    phases: phases(
                        ex.opened,
                        Some((
                            head_at.saturating_duration_since(ex.on_wire),
                            end.saturating_duration_since(head_at),
                        )),
                    ),
                    answered: Some(end),
                }
            }
            Err(failure) => {
                state.close(token);
                Exchanged {
                    outcome: Outcome::Error(failure.kind()),
                    on_wire: Some(ex.on_wire),
                    pool_wait: ex.pool_wait,
                    phases: phases(ex.opened, None),
                    answered: None,
                }
            }
        };
        done.push((ex.tag, exchanged));
    }
}

/// A request's phases: its connection's opening when it was the first on
/// it, and its time to first byte and body when it was answered.
pub(super) fn phases(
    opened: Option<(Duration, Option<Duration>)>,
    answer: Option<(Duration, Duration)>,
) -> Phases {
    Phases {
        connect: opened.map(|(connect, _)| connect),
        tls: opened.and_then(|(_, tls)| tls),
        ttfb: answer.map(|(ttfb, _)| ttfb),
        body: answer.map(|(_, body)| body),
        new_connection: opened.is_some(),
        reused: opened.is_none(),
    }
}
