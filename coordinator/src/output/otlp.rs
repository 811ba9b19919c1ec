//! OpenTelemetry metrics over OTLP/HTTP (protobuf): an
//! `ExportMetricsServiceRequest` per frame.
//!
//! The metrics are the catalogue's ([`catalogue::points`]) under their
//! OpenTelemetry names, with its units and help. Counters are cumulative
//! monotonic sums from the run's start, so a lost
//! push loses resolution, never a count; latency and service time are
//! exponential histograms at the same scale as the Prometheus output's
//! native ones, read from the exact merged HDR histogram. The run's
//! identity (`loadfleet.run_id`, `loadfleet.plan`, the user's labels) goes
//! in the resource's attributes, the scenario in each point's.

use std::collections::BTreeMap;

use bytes::Bytes;
use hdrhistogram::Histogram;
use prost::Message;

use super::catalogue::{self, Kind, Metric, Value};
use super::delivery::{Encoded, Encoder};
use super::frame::Frame;
use super::prometheus::{bucket_index, SCHEMA};
use crate::units;

/// The messages of opentelemetry-proto (collector/metrics/v1,
/// metrics/v1, common/v1, resource/v1), with only the fields sent.
pub(crate) mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ExportMetricsServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_metrics: Vec<ResourceMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ResourceMetrics {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_metrics: Vec<ScopeMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ScopeMetrics {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub metrics: Vec<Metric>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    /// Only the string variant of AnyValue's oneof.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct AnyValue {
        #[prost(string, tag = "1")]
        pub string_value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Metric {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub description: String,
        #[prost(string, tag = "3")]
        pub unit: String,
        #[prost(oneof = "Data", tags = "5, 7, 10")]
        pub data: Option<Data>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Data {
        #[prost(message, tag = "5")]
        Gauge(Gauge),
        #[prost(message, tag = "7")]
        Sum(Sum),
        #[prost(message, tag = "10")]
        ExponentialHistogram(ExponentialHistogram),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Gauge {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<NumberDataPoint>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Sum {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<NumberDataPoint>,
        /// 2: cumulative.
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
        #[prost(bool, tag = "3")]
        pub is_monotonic: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct NumberDataPoint {
        #[prost(message, repeated, tag = "7")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed64, tag = "2")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(double, tag = "4")]
        pub as_double: f64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ExponentialHistogram {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<ExponentialHistogramDataPoint>,
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct ExponentialHistogramDataPoint {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed64, tag = "2")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(fixed64, tag = "4")]
        pub count: u64,
        #[prost(double, optional, tag = "5")]
        pub sum: Option<f64>,
        #[prost(sint32, tag = "6")]
        pub scale: i32,
        #[prost(fixed64, tag = "7")]
        pub zero_count: u64,
        #[prost(message, optional, tag = "8")]
        pub positive: Option<Buckets>,
        #[prost(double, optional, tag = "12")]
        pub min: Option<f64>,
        #[prost(double, optional, tag = "13")]
        pub max: Option<f64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Buckets {
        #[prost(sint32, tag = "1")]
        pub offset: i32,
        #[prost(uint64, repeated, tag = "2")]
        pub bucket_counts: Vec<u64>,
    }
}

const CUMULATIVE: i32 = 2;

pub(crate) struct Otlp {
    /// Resource attributes: run id, plan, the user's labels.
    pub resource: BTreeMap<String, String>,
    pub per_agent: bool,
    pub repeats: bool,
}

fn kv(key: &str, value: &str) -> pb::KeyValue {
    pb::KeyValue {
        key: key.into(),
        value: Some(pb::AnyValue {
            string_value: value.into(),
        }),
    }
}

impl Encoder for Otlp {
    fn encode(&mut self, frame: &Frame) -> Encoded {
        Encoded {
            body: Bytes::from(self.request(frame).encode_to_vec()),
            headers: vec![("content-type", "application/x-protobuf")],
        }
    }
}

/// The metrics of one push, gathered by name.
struct Metrics {
    start: u64,
    now: u64,
    all: BTreeMap<&'static str, pb::Metric>,
}

impl Metrics {
    /// The metric's entry, made empty of its kind on first use.
    fn entry(&mut self, metric: &'static Metric) -> &mut pb::Metric {
        self.all.entry(metric.name).or_insert_with(|| pb::Metric {
            name: metric.name.into(),
            description: metric.help.into(),
            unit: metric.unit.ucum().into(),
            data: Some(match metric.kind {
                Kind::Counter => pb::Data::Sum(pb::Sum {
                    data_points: Vec::new(),
                    aggregation_temporality: CUMULATIVE,
                    is_monotonic: true,
                }),
                Kind::Gauge => pb::Data::Gauge(pb::Gauge {
                    data_points: Vec::new(),
                }),
                Kind::Histogram => pb::Data::ExponentialHistogram(pb::ExponentialHistogram {
                    data_points: Vec::new(),
                    aggregation_temporality: CUMULATIVE,
                }),
            }),
        })
    }

    fn number(&mut self, metric: &'static Metric, attrs: &[(&str, &str)], v: f64) {
        let point = pb::NumberDataPoint {
            attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
            start_time_unix_nano: self.start,
            time_unix_nano: self.now,
            as_double: v,
        };
        match &mut self.entry(metric).data {
            Some(pb::Data::Sum(s)) => s.data_points.push(point),
            Some(pb::Data::Gauge(g)) => g.data_points.push(point),
            _ => {}
        }
    }

    fn histogram(&mut self, metric: &'static Metric, attrs: &[(&str, &str)], h: &Histogram<u64>) {
        let point = exponential(h, attrs, self.start, self.now);
        if let Some(pb::Data::ExponentialHistogram(e)) = &mut self.entry(metric).data {
            e.data_points.push(point);
        }
    }
}

impl Otlp {
    pub(crate) fn request(&self, frame: &Frame) -> pb::ExportMetricsServiceRequest {
        let now = u64::try_from(frame.time_ms).unwrap_or(0) * 1_000_000;
        let mut m = Metrics {
            start: (u64::try_from(frame.started_ms).unwrap_or(0) * 1_000_000).min(now),
            now,
            all: BTreeMap::new(),
        };
        for p in catalogue::points(frame, self.per_agent) {
            let attrs: Vec<(&str, &str)> = p.pairs().collect();
            match p.value {
                Value::Number(v) => m.number(p.metric, &attrs, v),
                Value::Micros(us) => m.number(p.metric, &attrs, units::us_to_s(us)),
                Value::Histogram(h) => m.histogram(p.metric, &attrs, h),
            }
        }
        let mut resource: Vec<pb::KeyValue> = vec![kv("service.name", "loadfleet")];
        for (k, v) in &self.resource {
            let key = match k.as_str() {
                "run_id" | "plan" => format!("loadfleet.{k}"),
                _ => k.clone(),
            };
            resource.push(kv(&key, v));
        }
        // The verdicts are the whole report's, not one repeat's.
        if self.repeats && frame.verdicts.is_empty() {
            resource.push(kv("loadfleet.repeat", &(frame.run + 1).to_string()));
        }
        pb::ExportMetricsServiceRequest {
            resource_metrics: vec![pb::ResourceMetrics {
                resource: Some(pb::Resource {
                    attributes: resource,
                }),
                scope_metrics: vec![pb::ScopeMetrics {
                    scope: Some(pb::InstrumentationScope {
                        name: "loadfleet-coordinator".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    metrics: m.all.into_values().collect(),
                }],
            }],
        }
    }
}

/// An HDR histogram (µs) as an exponential histogram (seconds). OTLP's
/// bucket `i` is (base^i, base^(i+1)], one below the native histogram's
/// index of the same bucket.
fn exponential(
    h: &Histogram<u64>,
    attrs: &[(&str, &str)],
    start: u64,
    now: u64,
) -> pb::ExponentialHistogramDataPoint {
    let mut buckets: BTreeMap<i32, u64> = BTreeMap::new();
    let mut zero = 0;
    for v in h.iter_recorded() {
        let us = v.value_iterated_to();
        if us == 0 {
            zero += v.count_at_value();
        } else {
            *buckets
                .entry(bucket_index(units::us_to_s(us)) - 1)
                .or_default() += v.count_at_value();
        }
    }
    let positive = match (buckets.keys().next(), buckets.keys().next_back()) {
        (Some(&lo), Some(&hi)) => {
            let mut counts = vec![0u64; usize::try_from(hi - lo + 1).unwrap_or(0)];
            for (&i, &n) in &buckets {
                if let Some(c) = counts.get_mut(usize::try_from(i - lo).unwrap_or(usize::MAX)) {
                    *c = n;
                }
            }
            Some(pb::Buckets {
                offset: lo,
                bucket_counts: counts,
            })
        }
        _ => None,
    };
    let (min, max) = if h.is_empty() {
        (None, None)
    } else {
        (Some(units::us_to_s(h.min())), Some(units::us_to_s(h.max())))
    };
    pb::ExponentialHistogramDataPoint {
        attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
        start_time_unix_nano: start,
        time_unix_nano: now,
        count: h.len(),
        sum: Some(catalogue::sum_seconds(h)),
        scale: SCHEMA,
        zero_count: zero,
        positive,
        min,
        max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::histogram::new_histogram;

    #[test]
    fn exponential_buckets_hold_every_count() {
        let mut h = new_histogram();
        for v in [0u64, 1_000, 1_000, 5_000, 2_000_000] {
            h.record(v).unwrap();
        }
        let p = exponential(&h, &[("scenario", "a")], 1, 2);
        assert_eq!(p.count, 5);
        assert_eq!(p.zero_count, 1);
        let b = p.positive.unwrap();
        assert_eq!(b.bucket_counts.iter().sum::<u64>(), 4);
        // 1 ms lies in (base^offset, base^(offset+1)].
        let base = 2f64.powf(2f64.powi(-SCHEMA));
        let upper = base.powi(b.offset + 1);
        assert!(base.powi(b.offset) < 0.001 && 0.001 <= upper * 1.0000001);
    }

    /// Every metric goes out under its catalogue name, with its unit,
    /// help and kind: the pool's saturation as a monotonic sum in seconds.
    #[test]
    fn metrics_carry_the_catalogue() {
        use crate::output::frame::{Counts, ScenarioFrame};
        let totals = Counts {
            pool_saturated_ns: 1_500_000_000,
            ..Default::default()
        };
        let h = new_histogram();
        let frame = Frame {
            run: 0,
            seconds: 0..1,
            time_ms: 2,
            started_ms: 1,
            scenarios: vec![ScenarioFrame {
                name: "a".into(),
                totals: totals.clone(),
                step: totals,
                latency: h.clone(),
                service_time: h.clone(),
                step_latency: h,
                flow: None,
            }],
            in_flight: 0,
            agents_alive: 1,
            agents: vec![],
            last: false,
            verdicts: vec![],
        };
        let otlp = Otlp {
            resource: BTreeMap::new(),
            per_agent: false,
            repeats: false,
        };
        let req = otlp.request(&frame);
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        let pool = metrics
            .iter()
            .find(|m| m.name == catalogue::POOL_SATURATED.name)
            .expect("the pool's saturation is exported");
        assert_eq!(
            (pool.unit.as_str(), pool.description.as_str()),
            ("s", catalogue::POOL_SATURATED.help)
        );
        match &pool.data {
            Some(pb::Data::Sum(s)) => {
                assert!(s.is_monotonic);
                assert_eq!(s.data_points[0].as_double, 1.5);
            }
            other => panic!("{other:?}"),
        }
        for m in metrics {
            let entry = catalogue::ALL
                .iter()
                .find(|c| c.name == m.name)
                .unwrap_or_else(|| panic!("{} is not in the catalogue", m.name));
            assert_eq!(m.unit, entry.unit.ucum(), "{}", m.name);
        }
    }
}
