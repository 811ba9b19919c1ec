//! Prometheus remote write 1.0: a `WriteRequest` (protobuf, snappy block
//! format) per frame.
//!
//! The series are the catalogue's ([`catalogue::points`]), as the scrape
//! endpoint names them, with `run_id`, `plan` and the user's labels on
//! each; counters are the run's totals so far, so a lost push loses
//! resolution, never a count. Latency and service time go as native
//! histograms (exponential buckets of [`SCHEMA`], read from the exact
//! merged HDR histogram), or as classic `_bucket` series when asked.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use hdrhistogram::Histogram;
use prost::Message;

use loadfleet_proto::histogram::new_histogram;

use super::catalogue::{self, Kind, Value};
use super::config::Histograms;
use super::delivery::{Encoded, Encoder};
use super::frame::Frame;
use crate::units;

/// The messages of remote write 1.0 (prometheus/prompb types.proto and
/// remote.proto), with only the fields loadfleet sends.
pub(crate) mod prompb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub histograms: Vec<Histogram>,
    }

    #[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
    pub(crate) struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }

    /// A native histogram with integer counts.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Histogram {
        #[prost(uint64, tag = "1")]
        pub count_int: u64,
        #[prost(double, tag = "3")]
        pub sum: f64,
        #[prost(sint32, tag = "4")]
        pub schema: i32,
        #[prost(double, tag = "5")]
        pub zero_threshold: f64,
        #[prost(uint64, tag = "6")]
        pub zero_count_int: u64,
        #[prost(message, repeated, tag = "11")]
        pub positive_spans: Vec<BucketSpan>,
        /// Each bucket's count minus the previous bucket's.
        #[prost(sint64, repeated, tag = "12")]
        pub positive_deltas: Vec<i64>,
        #[prost(int64, tag = "15")]
        pub timestamp: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct BucketSpan {
        /// Gap to the previous span (or the first bucket's index).
        #[prost(sint32, tag = "1")]
        pub offset: i32,
        #[prost(uint32, tag = "2")]
        pub length: u32,
    }
}

/// Native-histogram schema: 2^SCHEMA buckets per doubling, so a bucket is
/// 2^(1/32) ≈ 2.2% wide and a quantile read from it is that close to the
/// exact one.
pub(crate) const SCHEMA: i32 = 5;

pub(crate) struct Prometheus {
    pub histograms: Histograms,
    pub per_agent: bool,
    /// Labels on every series: run_id, plan, the user's.
    pub labels: BTreeMap<String, String>,
    /// Whether the run is one of several (--repeat): adds `repeat`.
    pub repeats: bool,
    /// Counter series written so far: a new one first gets a zero at the
    /// run's start, so `increase()` over the run is its whole count.
    pub seen: HashSet<Vec<prompb::Label>>,
}

impl Encoder for Prometheus {
    fn encode(&mut self, frame: &Frame) -> Encoded {
        let req = self.write_request(frame);
        let raw = req.encode_to_vec();
        let body = snap::raw::Encoder::new()
            .compress_vec(&raw)
            // Snappy only fails on inputs over 4 GiB.
            .unwrap_or_default();
        Encoded {
            body: Bytes::from(body),
            headers: vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "snappy"),
                ("x-prometheus-remote-write-version", "0.1.0"),
            ],
        }
    }
}

impl Prometheus {
    pub(crate) fn write_request(&mut self, frame: &Frame) -> prompb::WriteRequest {
        let mut out = Series {
            ts: frame.time_ms,
            start: frame.started_ms,
            base: self.labels.clone(),
            all: Vec::new(),
            seen: &mut self.seen,
        };
        // The verdicts are the whole report's, not one repeat's.
        if self.repeats && frame.verdicts.is_empty() {
            out.base
                .insert("repeat".into(), (frame.run + 1).to_string());
        }
        for p in catalogue::points(frame, self.per_agent) {
            let name = p.metric.prometheus();
            let labels: Vec<(&str, &str)> = p.pairs().collect();
            let counter = p.metric.kind == Kind::Counter;
            match p.value {
                Value::Number(v) => out.sample(&name, &labels, counter, v),
                Value::Micros(us) => out.sample(&name, &labels, counter, units::us_to_s(us)),
                Value::Histogram(h) => match self.histograms {
                    Histograms::Native => out.native(&name, &labels, h),
                    Histograms::Classic => out.classic(&name, &labels, h),
                },
            }
        }
        prompb::WriteRequest {
            timeseries: out.all,
        }
    }
}

struct Series<'a> {
    ts: i64,
    /// The run's start, where a new counter series gets its zero.
    start: i64,
    base: BTreeMap<String, String>,
    all: Vec<prompb::TimeSeries>,
    seen: &'a mut HashSet<Vec<prompb::Label>>,
}

impl Series<'_> {
    /// Whether this is the series' first sample of the run and it is a
    /// counter (a classic histogram's parts included): then a zero goes
    /// first.
    fn zero_first(&mut self, counter: bool, labels: &[prompb::Label]) -> bool {
        counter && self.start < self.ts && self.seen.insert(labels.to_vec())
    }

    fn labels(&self, name: &str, extra: &[(&str, &str)]) -> Vec<prompb::Label> {
        let mut l: BTreeMap<&str, &str> = self
            .base
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        l.extend(extra.iter().copied());
        l.insert("__name__", name);
        // Sorted by name, as receivers expect.
        l.into_iter()
            .map(|(k, v)| prompb::Label {
                name: k.into(),
                value: v.into(),
            })
            .collect()
    }

    /// A counter or gauge sample (remote write 1.0 has no types).
    fn sample(&mut self, name: &str, extra: &[(&str, &str)], counter: bool, value: f64) {
        let labels = self.labels(name, extra);
        let mut samples = Vec::new();
        if self.zero_first(counter, &labels) {
            samples.push(prompb::Sample {
                value: 0.0,
                timestamp: self.start,
            });
        }
        samples.push(prompb::Sample {
            value,
            timestamp: self.ts,
        });
        self.all.push(prompb::TimeSeries {
            labels,
            samples,
            histograms: Vec::new(),
        });
    }

    fn native(&mut self, name: &str, extra: &[(&str, &str)], h: &Histogram<u64>) {
        let labels = self.labels(name, extra);
        let mut histograms = Vec::new();
        if self.zero_first(true, &labels) {
            histograms.push(native(&new_histogram(), self.start));
        }
        histograms.push(native(h, self.ts));
        self.all.push(prompb::TimeSeries {
            labels,
            samples: Vec::new(),
            histograms,
        });
    }

    fn classic(&mut self, name: &str, extra: &[(&str, &str)], h: &Histogram<u64>) {
        let bucket = format!("{name}_bucket");
        for (le, n) in catalogue::classic_buckets(h) {
            let l: Vec<(&str, &str)> = extra.iter().copied().chain([("le", le.as_str())]).collect();
            self.sample(&bucket, &l, true, n as f64);
        }
        let sum = catalogue::sum_seconds(h);
        self.sample(&format!("{name}_sum"), extra, true, sum);
        self.sample(&format!("{name}_count"), extra, true, h.len() as f64);
    }
}

/// The native bucket of a value in seconds: bucket `i` holds
/// (2^((i-1)/2^SCHEMA), 2^(i/2^SCHEMA)].
pub(crate) fn bucket_index(seconds: f64) -> i32 {
    let scale = f64::from(1u32 << SCHEMA);
    let mut i = (seconds.log2() * scale).ceil() as i32;
    // Guard the float edges: the value must be above the lower bound and
    // at most the upper one.
    let upper = |i: i32| (f64::from(i) / scale).exp2();
    if seconds > upper(i) {
        i += 1;
    } else if seconds <= upper(i - 1) {
        i -= 1;
    }
    i
}

/// An HDR histogram (µs) as a native histogram (seconds), cumulative.
pub(crate) fn native(h: &Histogram<u64>, ts: i64) -> prompb::Histogram {
    let mut buckets: BTreeMap<i32, u64> = BTreeMap::new();
    let mut zero = 0;
    for v in h.iter_recorded() {
        let us = v.value_iterated_to();
        if us == 0 {
            zero += v.count_at_value();
        } else {
            *buckets.entry(bucket_index(units::us_to_s(us))).or_default() += v.count_at_value();
        }
    }
    let mut spans: Vec<prompb::BucketSpan> = Vec::new();
    let mut deltas = Vec::new();
    let (mut prev_index, mut prev_count) = (None::<i32>, 0i64);
    for (&i, &n) in &buckets {
        match (prev_index, spans.last_mut()) {
            (Some(p), Some(span)) if i == p + 1 => span.length += 1,
            (Some(p), _) => spans.push(prompb::BucketSpan {
                offset: i - p - 1,
                length: 1,
            }),
            (None, _) => spans.push(prompb::BucketSpan {
                offset: i,
                length: 1,
            }),
        }
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        deltas.push(n - prev_count);
        prev_count = n;
        prev_index = Some(i);
    }
    prompb::Histogram {
        count_int: h.len(),
        sum: catalogue::sum_seconds(h),
        schema: SCHEMA,
        zero_threshold: 0.0,
        zero_count_int: zero,
        positive_spans: spans,
        positive_deltas: deltas,
        timestamp: ts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_hold_at_the_edges() {
        let scale = f64::from(1u32 << SCHEMA);
        for i in -400..200 {
            let upper = (f64::from(i) / scale).exp2();
            assert_eq!(bucket_index(upper), i, "upper bound of {i}");
            assert_eq!(bucket_index(upper * 1.0001), i + 1);
        }
        assert_eq!(bucket_index(1.0), 0);
    }

    /// Spans and deltas give back every bucket's count, and the quantile a
    /// receiver reads from them is within one bucket of the exact one.
    #[test]
    fn native_histograms_keep_the_distribution() {
        let mut h = new_histogram();
        for v in [1_000u64, 1_000, 1_020, 5_000, 80_000, 80_100, 2_000_000] {
            h.record(v).unwrap();
        }
        let n = native(&h, 7);
        assert_eq!(n.count_int, 7);
        let mut index = 0;
        let mut count = 0i64;
        let mut seen = Vec::new();
        let mut d = n.positive_deltas.iter();
        for (k, span) in n.positive_spans.iter().enumerate() {
            index += span.offset + if k == 0 { 0 } else { 1 };
            for j in 0..span.length {
                if j > 0 {
                    index += 1;
                }
                count += d.next().unwrap();
                seen.push((index, count));
            }
        }
        assert_eq!(seen.iter().map(|(_, c)| *c as u64).sum::<u64>(), 7);
        assert_eq!(
            seen.last().unwrap().0,
            bucket_index(units::us_to_s(h.highest_equivalent(2_000_000)))
        );
        let mut req = Prometheus {
            histograms: Histograms::Native,
            per_agent: false,
            labels: BTreeMap::new(),
            repeats: false,
            seen: HashSet::new(),
        };
        let frame = super::super::frame::Frame {
            run: 0,
            seconds: 0..1,
            time_ms: 5,
            started_ms: 0,
            scenarios: vec![],
            in_flight: 0,
            agents_alive: 2,
            agents: vec![],
            last: false,
            verdicts: vec![],
        };
        let wr = req.write_request(&frame);
        // The fleet's gauges: in flight, agents alive, elapsed.
        assert_eq!(wr.timeseries.len(), 3);
        assert_eq!(wr.timeseries[1].labels[0].name, "__name__");
        let body = req.clone_encode(&frame);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        assert_eq!(prompb::WriteRequest::decode(raw.as_slice()).unwrap(), wr);
    }

    impl Prometheus {
        fn clone_encode(&self, frame: &Frame) -> Vec<u8> {
            let mut me = Prometheus {
                histograms: self.histograms,
                per_agent: self.per_agent,
                labels: self.labels.clone(),
                repeats: self.repeats,
                seen: HashSet::new(),
            };
            me.encode(frame).body.to_vec()
        }
    }
}
