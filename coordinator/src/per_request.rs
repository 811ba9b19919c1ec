//! Per-request figures of a scenario (`Snapshot.requests`), merged over
//! agents and intervals like every other figure: counts added, the latency
//! histogram added bucket by bucket, so the result does not depend on the
//! order snapshots arrive in. Indexed by the request's place in its
//! scenario's mix; the names live in the plan.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use loadfleet_proto::histogram::{merge_into, new_histogram, CodecError};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::OutcomeClass;

/// One request's completions, all agents together.
#[derive(Debug, Clone)]
pub struct RequestMerged {
    pub completed: u64,
    pub completed_in_window: u64,
    /// 2xx and gRPC OK completions inside the window.
    pub completed_ok_in_window: u64,
    pub status: BTreeMap<u32, u64>,
    pub errors: BTreeMap<String, u64>,
    pub grpc_status: BTreeMap<String, u64>,
    /// Latency from the intended send time of measured requests (µs),
    /// every outcome class together.
    pub latency: Histogram<u64>,
}

impl Default for RequestMerged {
    fn default() -> Self {
        Self {
            completed: 0,
            completed_in_window: 0,
            completed_ok_in_window: 0,
            status: BTreeMap::new(),
            errors: BTreeMap::new(),
            grpc_status: BTreeMap::new(),
            latency: new_histogram(),
        }
    }
}

impl RequestMerged {
    fn from_proto(r: &v1::RequestFigures) -> Result<Self, CodecError> {
        let mut latency = new_histogram();
        merge_into(&mut latency, &r.latency)?;
        Ok(Self {
            completed: r.completed,
            completed_in_window: r.completed_in_window,
            completed_ok_in_window: r.completed_ok_in_window,
            status: r.status.iter().map(|(k, v)| (*k, *v)).collect(),
            errors: r.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            grpc_status: r.grpc_status.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            latency,
        })
    }

    fn add(&mut self, from: &Self) {
        self.completed += from.completed;
        self.completed_in_window += from.completed_in_window;
        self.completed_ok_in_window += from.completed_ok_in_window;
        for (k, v) in &from.status {
            *self.status.entry(*k).or_default() += v;
        }
        for (k, v) in &from.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &from.grpc_status {
            *self.grpc_status.entry(k.clone()).or_default() += v;
        }
        if let Err(e) = self.latency.add(&from.latency) {
            tracing::error!("histogram merge failed: {e:?}");
        }
    }

    /// Requests that did not succeed, by the rule the scenario's
    /// `failures` follows ([`loadfleet_proto::vocab::OutcomeClass::is_failure`]).
    pub fn failures(&self) -> u64 {
        let answers: u64 = self
            .status
            .iter()
            .filter(|(code, _)| OutcomeClass::of_wire_status(**code).is_failure())
            .map(|(_, n)| n)
            .sum();
        let grpc: u64 = self
            .grpc_status
            .iter()
            .filter(|(name, _)| OutcomeClass::of_grpc_word(name).is_failure())
            .map(|(_, n)| n)
            .sum();
        self.errors.values().sum::<u64>() + answers + grpc
    }
}

/// A snapshot's per-request figures, decoded: all of them or none, so a
/// corrupt histogram leaves nothing half merged.
pub fn decode(s: &v1::Snapshot) -> Result<Vec<(usize, RequestMerged)>, CodecError> {
    s.requests
        .iter()
        .map(|r| Ok((r.request as usize, RequestMerged::from_proto(r)?)))
        .collect()
}

/// Adds decoded figures into one scenario's requests, growing the table to
/// the highest index seen (the fleet's validator bounds the index by the
/// scenario's mix).
pub fn merge(into: &mut Vec<RequestMerged>, decoded: &[(usize, RequestMerged)]) {
    for (kind, figures) in decoded {
        if into.len() <= *kind {
            into.resize_with(kind + 1, RequestMerged::default);
        }
        into[*kind].add(figures);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Aggregate;
    use loadfleet_proto::histogram::encode;
    use proptest::prelude::*;

    /// A snapshot whose completions are split over two requests the way an
    /// agent splits them: request 0 answers `ok`, request 1 `code`.
    fn split(index: u64, values: &[(bool, u64)], code: u32) -> v1::Snapshot {
        let mut whole = new_histogram();
        let mut parts = [new_histogram(), new_histogram()];
        let mut status: BTreeMap<u32, u64> = BTreeMap::new();
        let mut requests = vec![
            v1::RequestFigures {
                request: 0,
                ..Default::default()
            },
            v1::RequestFigures {
                request: 1,
                ..Default::default()
            },
        ];
        for &(second, v) in values {
            let k = usize::from(second);
            let c = if second { code } else { 200 };
            whole.record(v).unwrap();
            parts[k].record(v).unwrap();
            *status.entry(c).or_default() += 1;
            requests[k].completed += 1;
            *requests[k].status.entry(c).or_default() += 1;
        }
        for (r, h) in requests.iter_mut().zip(&parts) {
            r.latency = encode(h).unwrap();
        }
        requests.retain(|r| r.completed > 0);
        v1::Snapshot {
            interval_index: index,
            intended: values.len() as u64,
            sent: values.len() as u64,
            completed: values.len() as u64,
            status: status.into_iter().collect(),
            latency: [("2xx".to_string(), encode(&whole).unwrap())].into(),
            requests,
            ..Default::default()
        }
    }

    proptest! {
        /// However snapshots are spread over agents and intervals, each
        /// request's merged counts are the sums of its parts, they add up
        /// to the scenario's, each keeps its own statuses, and its merged
        /// histogram equals one histogram of its values.
        #[test]
        fn per_request_figures_are_exact_sums(
            parts in prop::collection::vec(
                (0usize..3, 0u64..10, prop::collection::vec((any::<bool>(), 1u64..10_000_000), 0..40)),
                1..20)
        ) {
            let mut agg = Aggregate::new(3, 1);
            let mut by_kind = [new_histogram(), new_histogram()];
            for (agent, index, values) in &parts {
                agg.add(*agent, &split(*index, values, 503)).unwrap();
                for &(second, v) in values {
                    by_kind[usize::from(second)].record(v).unwrap();
                }
            }
            let requests = &agg.requests[0];
            let sum: u64 = requests.iter().map(|r| r.completed).sum();
            prop_assert_eq!(sum, agg.scenarios[0].completed);
            for (k, h) in by_kind.iter().enumerate() {
                let r = requests.get(k).cloned().unwrap_or_default();
                prop_assert_eq!(r.completed, h.len());
                prop_assert_eq!(r.latency.len(), h.len());
                if !h.is_empty() {
                    prop_assert_eq!(r.latency.value_at_quantile(0.99), h.value_at_quantile(0.99));
                    prop_assert_eq!(r.latency.max(), h.max());
                }
                let own = if k == 0 { 200 } else { 503 };
                prop_assert!(r.status.keys().all(|c| *c == own), "{:?}", r.status);
                prop_assert_eq!(r.failures(), if k == 0 { 0 } else { h.len() });
            }
        }
    }

    #[test]
    fn a_corrupt_per_request_histogram_adds_nothing() {
        let mut agg = Aggregate::new(1, 1);
        let mut s = split(0, &[(false, 100), (true, 200)], 404);
        s.requests[1].latency = vec![1, 2, 3];
        assert!(agg.add(0, &s).is_err());
        assert_eq!(agg.scenarios[0].completed, 0);
        assert!(agg.requests[0].is_empty());
    }
}
