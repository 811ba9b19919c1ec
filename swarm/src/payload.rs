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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{encode, new_histogram, CodecError};
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, OutcomeClass};

/// Distinct payloads per (c, w): agents and intervals take turns, so
/// neighbouring snapshots differ.
pub const VARIANTS: u64 = 16;

/// One built snapshot and the values inside it.
#[derive(Debug)]
pub struct Payload {
    /// Everything but `interval_index` and `scenario`, set at each send.
    pub snapshot: v1::Snapshot,
    /// Measured completions: (class, latency µs).
    values: Vec<(OutcomeClass, u64)>,
    /// Distinct histogram values over the classes' latency histograms.
    pub distinct: u64,
}

/// What a completion became: the status (or transport error) and class.
fn outcome(r: u64) -> (OutcomeClass, Option<u32>) {
    match r % 100 {
        0..=89 => (OutcomeClass::Success, Some(200)),
        90..=94 => (OutcomeClass::ClientError, Some(429)),
        95..=97 => (OutcomeClass::ServerError, Some(503)),
        _ => (OutcomeClass::Error, None),
    }
}

impl Payload {
    /// Builds the snapshot of `measured` + `warmup` completions.
    pub fn build(variant: u64, measured: u64, warmup: u64) -> Result<Payload, CodecError> {
        let mut rng = SplitMix64::new(
            variant
                .wrapping_mul(0x9E37_79B9)
                .wrapping_add(measured.wrapping_mul(31))
                .wrapping_add(warmup),
        );
        let mut classes: BTreeMap<OutcomeClass, Histogram<u64>> = BTreeMap::new();
        let mut service = new_histogram();
        let mut lag = new_histogram();
        let mut warm = new_histogram();
        let mut status: HashMap<u32, u64> = HashMap::new();
        let mut errors: HashMap<String, u64> = HashMap::new();
        let mut values = Vec::with_capacity(measured as usize);
        for j in 0..measured + warmup {
            let (class, code) = outcome(rng.next_u64());
            // Mean 20 ms, from 1 ms up: most values land in distinct buckets.
            let latency = 1_000 + (rng.exp1() * 19_000.0) as u64;
            let lagged = 20 + rng.next_u64() % 300;
            match code {
                Some(code) => *status.entry(code).or_default() += 1,
                None => *errors.entry(ErrorKind::Timeout.to_string()).or_default() += 1,
            }
            if j < warmup {
                record(&mut warm, latency);
            } else {
                record(classes.entry(class).or_insert_with(new_histogram), latency);
                record(&mut service, latency - lagged.min(latency - 1));
                values.push((class, latency));
            }
            record(&mut lag, lagged);
        }
        let distinct = classes
            .values()
            .map(|h| h.iter_recorded().count() as u64)
            .sum();
        let mut latency = HashMap::new();
        for (class, h) in &classes {
            latency.insert(class.to_string(), encode(h)?);
        }
        let all = measured + warmup;
        Ok(Payload {
            snapshot: v1::Snapshot {
                intended: all,
                sent: all,
                completed: all,
                completed_in_window: measured,
                status,
                errors,
                latency,
                service_time: encode(&service)?,
                warmup_latency: encode(&warm)?,
                lag: encode(&lag)?,
                ..Default::default()
            },
            values,
            distinct,
        })
    }
}

/// Values are generated in range, so recording cannot fail.
fn record(h: &mut Histogram<u64>, v: u64) {
    let _ = h.record(v);
}

/// A payload's key: (variant, measured, warm-up).
type Key = (u64, u64, u64);

/// Built payloads and how often each was sent.
#[derive(Debug, Default)]
pub struct Ledger {
    payloads: Mutex<HashMap<Key, (Arc<Payload>, u64)>>,
}

/// What the swarm sent, summed: the reference the report must equal.
#[derive(Debug)]
pub struct Sent {
    pub intended: u64,
    pub sent: u64,
    pub completed: u64,
    pub completed_in_window: u64,
    pub status: BTreeMap<u32, u64>,
    pub errors: BTreeMap<String, u64>,
    /// One histogram fed every measured latency sent.
    pub latency: Histogram<u64>,
    pub by_class: BTreeMap<String, Histogram<u64>>,
    pub snapshots: u64,
    /// Mean distinct latency values per snapshot sent.
    pub distinct_per_snapshot: f64,
}

impl Ledger {
    /// The payload for `measured` + `warmup` completions, counted as sent.
    pub fn take(
        &self,
        variant: u64,
        measured: u64,
        warmup: u64,
    ) -> Result<Arc<Payload>, CodecError> {
        let key = (variant % VARIANTS, measured, warmup);
        let mut payloads = self
            .payloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, sends)) = payloads.get_mut(&key) {
            *sends += 1;
            return Ok(p.clone());
        }
        let p = Arc::new(Payload::build(key.0, measured, warmup)?);
        payloads.insert(key, (p.clone(), 1));
        Ok(p)
    }

    /// Everything sent, with every latency recorded as often as it went out.
    pub fn sent(&self) -> Sent {
        let payloads = self
            .payloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Sent {
            intended: 0,
            sent: 0,
            completed: 0,
            completed_in_window: 0,
            status: BTreeMap::new(),
            errors: BTreeMap::new(),
            latency: new_histogram(),
            by_class: BTreeMap::new(),
            snapshots: 0,
            distinct_per_snapshot: 0.0,
        };
        let mut distinct = 0u64;
        for (p, sends) in payloads.values() {
            let (s, n) = (&p.snapshot, *sends);
            out.intended += s.intended * n;
            out.sent += s.sent * n;
            out.completed += s.completed * n;
            out.completed_in_window += s.completed_in_window * n;
            for (code, c) in &s.status {
                *out.status.entry(*code).or_default() += c * n;
            }
            for (kind, c) in &s.errors {
                *out.errors.entry(kind.clone()).or_default() += c * n;
            }
            for (class, v) in &p.values {
                let _ = out.latency.record_n(*v, n);
                let h = out
                    .by_class
                    .entry(class.to_string())
                    .or_insert_with(new_histogram);
                let _ = h.record_n(*v, n);
            }
            out.snapshots += n;
            distinct += p.distinct * n;
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
        let p = Payload::build(3, 1000, 0).unwrap();
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
        let a = ledger.take(1, 100, 10).unwrap();
        ledger.take(1, 100, 10).unwrap();
        ledger.take(2, 50, 0).unwrap();
        let sent = ledger.sent();
        assert_eq!(sent.snapshots, 3);
        assert_eq!(sent.intended, 2 * 110 + 50);
        assert_eq!(sent.completed_in_window, 250);
        assert_eq!(sent.latency.len(), 250);
        let twice = decode(&a.snapshot.latency["2xx"]).unwrap().len() * 2;
        let b = ledger.take(2, 50, 0).unwrap();
        let b2xx = decode(&b.snapshot.latency["2xx"]).unwrap().len();
        assert_eq!(sent.by_class["2xx"].len(), twice + b2xx);
    }
}
