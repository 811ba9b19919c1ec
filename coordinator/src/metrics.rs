//! `--metrics-listen ADDR`: the live run as Prometheus metrics, for Grafana.
//!
//! The fleet actor renders the exposition text once per tick and publishes
//! it on a watch channel; this server only hands out the latest text, so a
//! slow or hostile scraper can never touch the run's state.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::prometheus_text::{self, CONTENT_TYPE};
use prometheus_client::encoding::{
    EncodeCounterValue, EncodeGaugeValue, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::aggregate::Aggregate;
use loadfleet_proto::vocab::UnsentReason;

/// Serves `GET /metrics` until the process ends.
pub async fn serve(listener: TcpListener, text: watch::Receiver<String>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let text = text.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let body = text.borrow().clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        Response::builder()
                            .header("content-type", CONTENT_TYPE)
                            .body(Full::new(Bytes::from(body)))
                    } else {
                        Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::from_static(b"try /metrics\n")))
                    };
                    Ok::<_, Infallible>(
                        resp.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))),
                    )
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}

/// Samples of one family, one per label value, in the label's order. The
/// figures are read from the aggregate at each tick, so a family is made
/// of its current values rather than of counters kept apart from it.
#[derive(Debug)]
struct ByLabel<V> {
    kind: MetricType,
    label: &'static str,
    samples: Vec<(String, V)>,
}

impl<V> ByLabel<V> {
    fn counter(label: &'static str, samples: Vec<(String, V)>) -> Self {
        Self {
            kind: MetricType::Counter,
            label,
            samples,
        }
    }
}

impl<V: EncodeCounterValue + EncodeGaugeValue> EncodeMetric for ByLabel<V> {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        for (value, v) in &self.samples {
            let labels = [(self.label, value.as_str())];
            let mut sample = encoder.encode_family(&labels)?;
            match self.kind {
                MetricType::Counter => sample.encode_counter::<NoLabelSet, _, u64>(v, None)?,
                _ => sample.encode_gauge(v)?,
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

fn counts<K: ToString>(label: &'static str, map: &BTreeMap<K, u64>) -> ByLabel<u64> {
    ByLabel::counter(
        label,
        map.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
    )
}

/// Renders the run so far in the Prometheus text format (0.0.4). Names
/// are given without `_total`: the encoder adds it to every counter.
pub fn render(agg: &Aggregate, in_flight: u64, agents_alive: usize, elapsed_s: f64) -> String {
    let t = &agg.totals;
    let mut r = Registry::default();
    r.register(
        "loadfleet_requests_intended",
        "Arrivals due so far by the schedule",
        ConstCounter::new(t.intended),
    );
    r.register(
        "loadfleet_requests_sent",
        "Requests written to the wire",
        ConstCounter::new(t.sent),
    );
    // Every reason, zeros included, as Prometheus exposes a counter that
    // has not moved yet: `rate()` over a series that appears only on its
    // first increment misses that increment.
    let unsent = UnsentReason::ALL
        .iter()
        .map(|r| (r.to_string(), t.unsent.get(*r)))
        .collect();
    r.register(
        "loadfleet_requests_unsent",
        "Arrivals never sent, by reason",
        ByLabel::counter("reason", unsent),
    );
    r.register(
        "loadfleet_requests_completed",
        "Requests that got a response or an error",
        ConstCounter::new(t.completed),
    );
    r.register(
        "loadfleet_responses",
        "Responses by status code",
        counts("code", &t.status.by_word()),
    );
    r.register(
        "loadfleet_errors",
        "Transport errors by kind",
        counts("kind", &t.errors.by_word()),
    );
    r.register(
        "loadfleet_grpc_responses",
        "gRPC calls by grpc-status (OK, UNAVAILABLE, ...), apart from HTTP statuses",
        counts("grpc_status", &t.grpc_status.by_word()),
    );
    r.register(
        "loadfleet_failures",
        "Requests that did not succeed: transport errors, 4xx and 5xx answers, gRPC statuses other than OK",
        ConstCounter::new(t.failures()),
    );
    r.register(
        "loadfleet_pool_saturated_seconds",
        "Time every connection of an agent's own pool was busy with requests waiting (mean over each agent's pools, summed over agents)",
        ConstCounter::new(t.pool_saturated_ns as f64 / 1e9),
    );
    r.register(
        "loadfleet_in_flight",
        "Requests in flight at the end of the last second",
        ConstGauge::new(in_flight),
    );
    r.register(
        "loadfleet_agents_alive",
        "Agents taking part in the run",
        ConstGauge::new(agents_alive as u64),
    );
    r.register(
        "loadfleet_run_elapsed_seconds",
        "Time since the common start",
        ConstGauge::new(elapsed_s),
    );
    // The latency over the whole run so far, under a summary's sample
    // names; prometheus-client has no summary type, so its quantiles,
    // sum and count are gauges.
    let all = t.latency.all();
    if !all.is_empty() {
        let quantiles = [0.5, 0.9, 0.99, 0.999]
            .iter()
            .map(|&q| (q.to_string(), all.value_at_quantile(q) as f64 / 1e6))
            .collect();
        r.register(
            "loadfleet_latency_seconds",
            "Latency from the intended send time, whole run so far",
            ByLabel {
                kind: MetricType::Gauge,
                label: "quantile",
                samples: quantiles,
            },
        );
        r.register(
            "loadfleet_latency_seconds_sum",
            "Sum of those latencies",
            ConstGauge::new(all.mean() * all.len() as f64 / 1e6),
        );
        r.register(
            "loadfleet_latency_seconds_count",
            "Number of those latencies",
            ConstGauge::new(all.len()),
        );
    }
    let mut out = String::new();
    if let Err(e) = prometheus_text::encode(&mut out, &r) {
        tracing::error!("metrics exposition not written: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::vocab::{ErrorKind, GrpcStatus, OutcomeClass, UnsentReason};

    #[test]
    fn renders_conventional_names_and_labels() {
        let mut agg = Aggregate::new(1, 1);
        agg.totals.intended = 10;
        agg.totals.unsent.add(UnsentReason::Late, 2);
        agg.totals.errors.bump(ErrorKind::Reset);
        agg.totals.status.add(503, 4);
        agg.totals.status.add(200, 5);
        let text = render(&agg, 3, 1, 1.5);
        assert!(text.contains(
            "# HELP loadfleet_requests_intended_total Arrivals due so far by the schedule.\n\
             # TYPE loadfleet_requests_intended_total counter\n"
        ));
        assert!(text.contains(r#"loadfleet_responses_total{code="200"} 5"#));
        assert!(text.contains("loadfleet_requests_intended_total 10"));
        assert!(text.contains(r#"loadfleet_requests_unsent_total{reason="late"} 2"#));
        assert!(
            text.contains(r#"loadfleet_requests_unsent_total{reason="pool_timeout"} 0"#),
            "a reason that has not happened is exposed at zero"
        );
        assert!(
            text.contains(r#"loadfleet_errors_total{kind="reset"} 1"#),
            "{text}"
        );
        assert!(text.contains("loadfleet_in_flight 3"));
        assert!(text.contains("loadfleet_failures_total 5"), "{text}");
        // gRPC statuses are their own family, and the non-OK ones fail.
        agg.totals.grpc_status.add(GrpcStatus::Ok, 7);
        agg.totals.grpc_status.add(GrpcStatus::Unavailable, 2);
        let text = render(&agg, 3, 1, 1.5);
        assert!(
            text.contains(r#"loadfleet_grpc_responses_total{grpc_status="UNAVAILABLE"} 2"#),
            "{text}"
        );
        assert!(text.contains("loadfleet_failures_total 7"), "{text}");
        // The latency under a summary's sample names, in seconds.
        let mut h = loadfleet_proto::histogram::new_histogram();
        h.record(1_000).unwrap();
        *agg.totals.latency.get_mut(OutcomeClass::Success) = h;
        let text = render(&agg, 3, 1, 1.5);
        for line in [
            r#"loadfleet_latency_seconds{quantile="0.99"} 0.001"#,
            "loadfleet_latency_seconds_sum 0.001",
            "loadfleet_latency_seconds_count 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
