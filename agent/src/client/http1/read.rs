//! What both HTTP/1.1 pools share when they read an answer: the buffer
//! sizes, the spare buffers between exchanges, and when bytes arrived.

use std::cell::RefCell;

use tokio::time::Instant;

/// Room made at the end of the read buffer before each read: a typical
/// response head fits in one read. Kept small, and held only while a
/// response is being read, because every connection in flight holds one.
pub(super) const READ_CHUNK: usize = 2 * 1024;

/// A large body is read in pieces up to this size; the buffer is given
/// back after the exchange.
pub(super) const READ_MAX: usize = 64 * 1024;

/// At most this many spare buffers wait: as many as one tick's answers
/// usually need, and 128 KiB at most.
const KEPT: usize = 64;

thread_local! {
    /// Read buffers between exchanges, shared by a worker's connections.
    /// A connection holds one only while an answer arrives, so idle and
    /// waiting connections cost no memory; reusing them, rather than
    /// freeing each after its exchange, keeps the allocator from
    /// consolidating its free lists every time (2 KiB is a "large" block
    /// to glibc). A worker is one thread, so no lock is needed.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty read buffer, with room for a typical answer.
pub(super) fn take_buffer() -> Vec<u8> {
    SPARE
        .with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| Vec::with_capacity(READ_CHUNK))
}

/// Keeps `buffer` for a later exchange, unless it grew for a large body
/// (it is freed then: a few large ones would hold megabytes) or enough
/// wait already.
pub(super) fn give_buffer(mut buffer: Vec<u8>) {
    if buffer.capacity() != READ_CHUNK {
        return;
    }
    buffer.clear();
    SPARE.with_borrow_mut(|kept| {
        if kept.len() < KEPT {
            kept.push(buffer);
        }
    });
}

/// When bytes read at this moment arrived: the kernel's stamp, on the
/// monotonic clock, when it makes sense — after the request went out, and
/// not in the future ([`crate::sys::Arrival::instant`]), which a
/// wall-clock step can break — and now otherwise.
pub(super) fn arrived(stamp: Option<Instant>, on_wire: Instant) -> Instant {
    stamp
        .filter(|at| *at >= on_wire)
        .unwrap_or_else(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_up_to_a_bound_and_large_ones_freed() {
        let first = take_buffer();
        assert_eq!(first.capacity(), READ_CHUNK);
        let at = first.as_ptr();
        give_buffer(first);
        let again = take_buffer();
        assert_eq!(again.as_ptr(), at, "the same buffer again");
        drop(again);
        give_buffer(Vec::with_capacity(64 * 1024));
        assert!(SPARE.with_borrow(Vec::is_empty), "a grown buffer is freed");
        for _ in 0..KEPT + 10 {
            give_buffer(Vec::with_capacity(READ_CHUNK));
        }
        assert_eq!(SPARE.with_borrow(Vec::len), KEPT);
    }
}
