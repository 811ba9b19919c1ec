//! Synthetic snapshots, and the one histogram that checks the coordinator.
//!
//! A snapshot carries `c` measured and `w` warm-up completions whose
//! latencies are drawn (seeded) over 1 ms – a few hundred ms across the
//! outcome classes, so a snapshot of ~1,000 completions holds ~1,000
//! distinct histogram values: what the coordinator decodes and merges for a
//! busy real agent. Building and compressing histograms costs the swarm far
//! more than the coordinator's decoding, so a payload is built once per
//! (variant, c, w) and sent many times; the [`Ledger`] counts every send,
//! so the reference histogram is fed exactly what went over the wire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use loadfleet_proto::figures::Figures;
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, OutcomeClass};

/// Distinct payloads per (c, w): agents and intervals take turns, so
/// neighbouring snapshots differ.
pub const VARIANTS: u64 = 16;

/// One built snapshot: its figures, and their wire form.
#[derive(Debug)]
pub struct Payload {
    /// Everything but `interval_index` and `scenario`, set at each send.
    pub snapshot: v1::Snapshot,
    /// What the snapshot carries, as the coordinator decodes it.
    figures: Figures,
    /// Distinct histogram values over the classes' latency histograms.
    pub distinct: u64,
}

/// What a completion became: the status (or transport error) and class.
fn outcome(r: u64) -> (OutcomeClass, Option<u16>) {
    match r % 100 {
        0..=89 => (OutcomeClass::Success, Some(200)),
        90..=94 => (OutcomeClass::ClientError, Some(429)),
        95..=97 => (OutcomeClass::ServerError, Some(503)),
        _ => (OutcomeClass::Error, None),
    }
}

impl Payload {
    /// Builds the snapshot of `measured` + `warmup` completions.
    pub fn build(variant: u64, measured: u64, warmup: u64) -> Payload {
        let mut rng = SplitMix64::new(
            variant
                .wrapping_mul(0x9E37_79B9)
                .wrapping_add(measured.wrapping_mul(31))
                .wrapping_add(warmup),
        );
        let all = measured + warmup;
        let mut f = Figures {
            intended: all,
            sent: all,
            completed: all,
            completed_in_window: measured,
            ..Figures::default()
        };
        for j in 0..all {
            let (class, code) = outcome(rng.next_u64());
            // Mean 20 ms, from 1 ms up: most values land in distinct buckets.
            let latency = 1_000 + (rng.exp1() * 19_000.0) as u64;
            let lagged = 20 + rng.next_u64() % 300;
            match code {
                Some(code) => f.status.bump(code),
                None => f.errors.bump(ErrorKind::Timeout),
            }
            if j < warmup {
                record(&mut f.warmup_latency, latency);
            } else {
                record(f.latency.get_mut(class), latency);
                record(&mut f.service_time, latency - lagged.min(latency - 1));
            }
            record(&mut f.lag, lagged);
        }
        let distinct = f
            .latency
            .iter()
            .map(|(_, h)| h.iter_recorded().count() as u64)
            .sum();
        let mut snapshot = v1::Snapshot::default();
        f.encode_into(&mut snapshot);
        Payload {
            snapshot,
            figures: f,
            distinct,
        }
    }
}

/// Values are generated in range, so recording cannot fail.
fn record(h: &mut Histogram<u64>, v: u64) {
    let _ = h.record(v);
}

/// `f` added to itself `n` times, in O(log n) additions: merging is
/// associative, so doubling gives the same sum as one addition per send.
fn times(f: &Figures, mut n: u64) -> Figures {
    let mut out = Figures::default();
    let mut power = f.clone();
    while n > 0 {
        if n & 1 == 1 {
            out += &power;
        }
        n >>= 1;
        if n > 0 {
            let twice = power.clone();
            power += &twice;
        }
    }
    out
}

/// A payload's key: (variant, measured, warm-up).
type Key = (u64, u64, u64);

/// Built payloads and how often each was sent.
#[derive(Debug, Default)]
pub struct Ledger {
    payloads: Mutex<HashMap<Key, (Arc<Payload>, u64)>>,
}

/// What the swarm sent, merged as the coordinator merges it: the
/// reference the report must equal.
#[derive(Debug)]
pub struct Sent {
    pub figures: Figures,
    pub snapshots: u64,
    /// Mean distinct latency values per snapshot sent.
    pub distinct_per_snapshot: f64,
}

impl Ledger {
    /// The payload for `measured` + `warmup` completions, counted as sent.
    pub fn take(&self, variant: u64, measured: u64, warmup: u64) -> Arc<Payload> {
        let key = (variant % VARIANTS, measured, warmup);
        let mut payloads = self
            .payloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, sends)) = payloads.get_mut(&key) {
            *sends += 1;
            return p.clone();
        }
        let p = Arc::new(Payload::build(key.0, measured, warmup));
        payloads.insert(key, (p.clone(), 1));
        p
    }

    /// Everything sent, each payload counted as often as it went out.
    pub fn sent(&self) -> Sent {
        let payloads = self
            .payloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Sent {
            figures: Figures::default(),
            snapshots: 0,
            distinct_per_snapshot: 0.0,
        };
        let mut distinct = 0u64;
        for (p, sends) in payloads.values() {
            out.figures += &times(&p.figures, *sends);
            out.snapshots += sends;
            distinct += p.distinct * sends;
        }
        out.distinct_per_snapshot = distinct as f64 / out.snapshots.max(1) as f64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::histogram::decode;

    #[test]
    fn a_thousand_completions_hold_about_a_thousand_distinct_values() {
        let p = Payload::build(3, 1000, 0);
        assert!(p.distinct > 800, "{}", p.distinct);
        assert_eq!(p.snapshot.completed, 1000);
        assert_eq!(p.snapshot.latency.len(), 4, "every outcome class occurs");
        let mut count = 0;
        for bytes in p.snapshot.latency.values() {
            count += decode(bytes).unwrap().len();
        }
        assert_eq!(count, 1000);
        let statuses: u64 =
            p.snapshot.status.values().sum::<u64>() + p.snapshot.errors.values().sum::<u64>();
        assert_eq!(statuses, 1000);
    }

    #[test]
    fn the_ledger_counts_every_send() {
        let ledger = Ledger::default();
        let a = ledger.take(1, 100, 10);
        ledger.take(1, 100, 10);
        ledger.take(2, 50, 0);
        let sent = ledger.sent();
        assert_eq!(sent.snapshots, 3);
        assert_eq!(sent.figures.intended, 2 * 110 + 50);
        assert_eq!(sent.figures.completed_in_window, 250);
        assert_eq!(sent.figures.latency.all().len(), 250);
        let twice = decode(&a.snapshot.latency["2xx"]).unwrap().len() * 2;
        let b = ledger.take(2, 50, 0);
        let b2xx = decode(&b.snapshot.latency["2xx"]).unwrap().len();
        let by_class = sent
            .figures
            .latency
            .get(OutcomeClass::Success)
            .map_or(0, |h| h.len());
        assert_eq!(by_class, twice + b2xx);
    }
}
