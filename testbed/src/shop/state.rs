//! What the shop remembers: the sessions, carts and orders it issued, each
//! in a table bounded to [`MAX_LIVE`] entries that forgets its oldest when
//! full, and the payment count the decline rule runs on.
//!
//! An id is a sequence number, which orders a table's entries by age so the
//! oldest can be found without a second index, and a random secret, which
//! makes ids unguessable enough that a scenario cannot succeed by replaying
//! or inventing one: the shop exists to tell a correct flow from one that
//! merely sends the right paths.

use std::collections::HashMap;
use std::fmt;

/// Most entries a table remembers. One entry costs about 40 bytes, so the
/// three tables stay within about 120 MB however long a run lasts.
pub(super) const MAX_LIVE: usize = 1_000_000;

/// An id the shop issued: 32 lowercase hex digits, the secret then the
/// sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Id {
    seq: u64,
    secret: u64,
}

impl Id {
    /// Reads an id back; `None` for anything the shop cannot have issued.
    pub(super) fn parse(text: &str) -> Option<Id> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let secret = u64::from_str_radix(text.get(..16)?, 16).ok()?;
        let seq = u64::from_str_radix(text.get(16..)?, 16).ok()?;
        Some(Id { seq, secret })
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.secret, self.seq)
    }
}

/// Issued ids of one kind with a value each, oldest forgotten first.
pub(super) struct Table<V> {
    live: HashMap<u64, (u64, V)>,
    /// The sequence number of the next id.
    next: u64,
    /// No live entry is older than this.
    oldest: u64,
    cap: usize,
    /// Entries dropped to make room.
    forgotten: u64,
}

impl<V> Table<V> {
    fn new(cap: usize) -> Self {
        Table {
            live: HashMap::new(),
            next: 0,
            oldest: 0,
            // A cap of 0 could never hold the id just issued.
            cap: cap.max(1),
            forgotten: 0,
        }
    }

    /// Remembers `value` under a fresh id, forgetting the oldest entry
    /// first when the table is full.
    pub(super) fn issue(&mut self, value: V) -> Id {
        // Each sequence number is passed once, so this costs O(1) per issue
        // over a run, holes left by taken entries included; it ends because
        // a full table has a live entry at or after `oldest`.
        while self.live.len() >= self.cap && self.oldest < self.next {
            if self.live.remove(&self.oldest).is_some() {
                self.forgotten += 1;
            }
            self.oldest += 1;
        }
        let id = Id {
            seq: self.next,
            secret: rand::random(),
        };
        self.next += 1;
        self.live.insert(id.seq, (id.secret, value));
        id
    }

    /// The value of a live id (the secret must match too).
    pub(super) fn get_mut(&mut self, id: Id) -> Option<&mut V> {
        match self.live.get_mut(&id.seq) {
            Some((secret, value)) if *secret == id.secret => Some(value),
            _ => None,
        }
    }

    /// Takes a live id out, so it is accepted only once.
    pub(super) fn take(&mut self, id: Id) -> Option<V> {
        self.get_mut(id)?;
        self.live.remove(&id.seq).map(|(_, value)| value)
    }
}

/// Everything the shop remembers, behind one lock: a step touches at most
/// two tables, and holding one lock for it keeps each step atomic.
pub(super) struct State {
    /// Session id → the secret of the bearer token issued with it; the
    /// token is that secret with the session's sequence number, so it
    /// names its session and no other.
    pub(super) sessions: Table<u64>,
    /// Carts not yet ordered.
    pub(super) carts: Table<()>,
    /// Orders → whether a payment was answered for it (paid or declined).
    pub(super) orders: Table<bool>,
    /// Payments decided so far: the k of the decline rule.
    settled: u64,
    decline: f64,
}

impl State {
    /// Tables of `cap` entries each; `decline` within `0.0..=1.0`.
    pub(super) fn new(cap: usize, decline: f64) -> Self {
        State {
            sessions: Table::new(cap),
            carts: Table::new(cap),
            orders: Table::new(cap),
            settled: 0,
            decline,
        }
    }

    /// A new session and its bearer token.
    pub(super) fn login(&mut self) -> (Id, Id) {
        let token_secret = rand::random();
        let session = self.sessions.issue(token_secret);
        let token = Id {
            seq: session.seq,
            secret: token_secret,
        };
        (session, token)
    }

    /// Whether `session` is live and `token` was issued with it.
    pub(super) fn token_matches(&mut self, session: Id, token: Id) -> bool {
        token.seq == session.seq
            && self
                .sessions
                .get_mut(session)
                .is_some_and(|secret| *secret == token.secret)
    }

    /// Decides the next payment: true when it is declined. The k-th
    /// payment is declined when `floor(k * F) > floor((k - 1) * F)`, in
    /// f64, so of the first n payments exactly `floor(n * F)` are.
    pub(super) fn next_declined(&mut self) -> bool {
        self.settled += 1;
        let k = self.settled as f64;
        (k * self.decline).floor() > ((k - 1.0) * self.decline).floor()
    }

    /// Entries forgotten to stay within the cap, all tables together.
    pub(super) fn forgotten(&self) -> u64 {
        self.sessions.forgotten + self.carts.forgotten + self.orders.forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_strangers() {
        let mut table = Table::new(10);
        let id = table.issue(7);
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(Id::parse(&text), Some(id));
        assert_eq!(table.get_mut(id), Some(&mut 7));
        for bad in ["", "xyz", &text[1..], &format!("{text}0"), &"g".repeat(32)] {
            assert_eq!(Id::parse(bad), None, "{bad:?}");
        }
        // Right sequence number, wrong secret: not issued.
        let forged = Id {
            seq: id.seq,
            secret: id.secret ^ 1,
        };
        assert_eq!(table.get_mut(forged), None);
        assert_eq!(table.take(forged), None);
        assert_eq!(table.take(id), Some(7));
        assert_eq!(table.take(id), None, "an id is taken once");
    }

    #[test]
    fn a_full_table_forgets_its_oldest() {
        let mut table = Table::new(2);
        let first = table.issue(1);
        let second = table.issue(2);
        let third = table.issue(3);
        assert_eq!(table.get_mut(first), None);
        assert_eq!(table.get_mut(second), Some(&mut 2));
        assert_eq!(table.forgotten, 1);
        // A taken entry leaves room, so nothing more is forgotten.
        assert_eq!(table.take(second), Some(2));
        let fourth = table.issue(4);
        assert_eq!(table.forgotten, 1);
        assert_eq!(table.get_mut(third), Some(&mut 3));
        let _fifth = table.issue(5);
        assert_eq!(table.get_mut(third), None);
        assert_eq!(table.get_mut(fourth), Some(&mut 4));
        assert_eq!(table.forgotten, 2);
    }

    #[test]
    fn a_token_belongs_to_its_own_session() {
        let mut state = State::new(10, 0.0);
        let (alice, alice_token) = state.login();
        let (bob, bob_token) = state.login();
        assert!(state.token_matches(alice, alice_token));
        assert!(state.token_matches(bob, bob_token));
        assert!(!state.token_matches(alice, bob_token));
        assert!(!state.token_matches(bob, alice_token));
        // A token is not a session id, nor the reverse.
        assert!(!state.token_matches(alice_token, alice));
    }

    #[test]
    fn the_decline_rule_declines_floor_of_n_times_f() {
        for (decline, n, declined) in [
            (0.25, 8, vec![4, 8]),
            (0.0, 5, vec![]),
            (1.0, 3, vec![1, 2, 3]),
            (0.5, 5, vec![2, 4]),
        ] {
            let mut state = State::new(10, decline);
            let got: Vec<u64> = (1..=n).filter(|_| state.next_declined()).collect();
            assert_eq!(got, declined, "F = {decline}");
        }
        for decline in [0.1, 0.3, 1.0 / 3.0, 0.999] {
            let mut state = State::new(10, decline);
            let n = 1000u32;
            let got = (0..n).filter(|_| state.next_declined()).count();
            assert_eq!(
                got as f64,
                (f64::from(n) * decline).floor(),
                "F = {decline}"
            );
        }
    }
}
