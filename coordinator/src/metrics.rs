//! `--metrics-listen ADDR`: the live run as Prometheus metrics, for Grafana.
//!
//! The fleet actor renders the exposition text once per tick and publishes
//! it on a watch channel; this server only hands out the latest text, so a
//! slow or hostile scraper can never touch the run's state.

use std::convert::Infallible;
use std::fmt::Write as _;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::aggregate::Aggregate;

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
                            .header("content-type", "text/plain; version=0.0.4")
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

/// One metric family: HELP and TYPE lines, then its samples.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{labels} {v}");
    }
}

fn label(key: &str, value: &str) -> String {
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("{{{key}=\"{escaped}\"}}")
}

/// Renders the run so far in the Prometheus text format.
pub fn render(agg: &Aggregate, in_flight: u64, agents_alive: usize, elapsed_s: f64) -> String {
    let t = &agg.totals;
    let mut out = String::new();
    let one = |v: f64| vec![(String::new(), v)];
    family(
        &mut out,
        "loadfleet_requests_intended_total",
        "counter",
        "Arrivals due so far by the schedule.",
        &one(t.intended as f64),
    );
    family(
        &mut out,
        "loadfleet_requests_sent_total",
        "counter",
        "Requests actually sent.",
        &one(t.sent as f64),
    );
    family(
        &mut out,
        "loadfleet_requests_unsent_total",
        "counter",
        "Arrivals never sent, by reason.",
        &t.unsent
            .iter()
            .map(|(k, n)| (label("reason", k), *n as f64))
            .collect::<Vec<_>>(),
    );
    family(
        &mut out,
        "loadfleet_requests_completed_total",
        "counter",
        "Requests that got a response or an error.",
        &one(t.completed as f64),
    );
    family(
        &mut out,
        "loadfleet_responses_total",
        "counter",
        "Responses by status code.",
        &t.status
            .iter()
            .map(|(k, n)| (label("code", &k.to_string()), *n as f64))
            .collect::<Vec<_>>(),
    );
    family(
        &mut out,
        "loadfleet_errors_total",
        "counter",
        "Transport errors by kind.",
        &t.errors
            .iter()
            .map(|(k, n)| (label("kind", k), *n as f64))
            .collect::<Vec<_>>(),
    );
    family(
        &mut out,
        "loadfleet_grpc_responses_total",
        "counter",
        "gRPC calls by grpc-status (OK, UNAVAILABLE, ...), apart from HTTP statuses.",
        &t.grpc_status
            .iter()
            .map(|(k, n)| (label("grpc_status", k), *n as f64))
            .collect::<Vec<_>>(),
    );
    family(
        &mut out,
        "loadfleet_failures_total",
        "counter",
        "Requests that did not succeed: transport errors, 4xx and 5xx answers, gRPC statuses other than OK.",
        &one(t.failures() as f64),
    );
    family(
        &mut out,
        "loadfleet_pool_saturated_seconds_total",
        "counter",
        "Time every connection of an agent's own pool was busy with requests waiting (mean over each agent's pools, summed over agents).",
        &one(t.pool_saturated_ns as f64 / 1e9),
    );
    family(
        &mut out,
        "loadfleet_in_flight",
        "gauge",
        "Requests in flight at the end of the last second.",
        &one(in_flight as f64),
    );
    family(
        &mut out,
        "loadfleet_agents_alive",
        "gauge",
        "Agents taking part in the run.",
        &one(agents_alive as f64),
    );
    family(
        &mut out,
        "loadfleet_run_elapsed_seconds",
        "gauge",
        "Time since the common start.",
        &one(elapsed_s),
    );
    let all = t.latency_all();
    if !all.is_empty() {
        let q = [0.5, 0.9, 0.99, 0.999];
        let mut samples: Vec<(String, f64)> = q
            .iter()
            .map(|&q| {
                (
                    label("quantile", &q.to_string()),
                    all.value_at_quantile(q) as f64 / 1e6,
                )
            })
            .collect();
        samples.push(("_sum".to_string(), all.mean() * all.len() as f64 / 1e6));
        samples.push(("_count".to_string(), all.len() as f64));
        let _ = writeln!(out, "# HELP loadfleet_latency_seconds Latency from the intended send time, whole run so far.");
        let _ = writeln!(out, "# TYPE loadfleet_latency_seconds summary");
        for (l, v) in samples {
            if let Some(suffix) = l.strip_prefix('_') {
                let _ = writeln!(out, "loadfleet_latency_seconds_{suffix} {v}");
            } else {
                let _ = writeln!(out, "loadfleet_latency_seconds{l} {v}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::vocab::{GrpcStatus, UnsentReason};

    #[test]
    fn renders_conventional_names_and_escapes_labels() {
        let mut agg = Aggregate::new(1, 1);
        agg.totals.intended = 10;
        agg.totals.unsent.insert(UnsentReason::Late.to_string(), 2);
        agg.totals.errors.insert(r#"re"set"#.into(), 1);
        agg.totals.status.insert(503, 4);
        agg.totals.status.insert(200, 5);
        let text = render(&agg, 3, 1, 1.5);
        assert!(text.contains("# TYPE loadfleet_requests_intended_total counter"));
        assert!(text.contains("loadfleet_requests_intended_total 10"));
        assert!(text.contains(r#"loadfleet_requests_unsent_total{reason="late"} 2"#));
        assert!(
            text.contains(r#"loadfleet_errors_total{kind="re\"set"} 1"#),
            "{text}"
        );
        assert!(text.contains("loadfleet_in_flight 3"));
        assert!(text.contains("loadfleet_failures_total 5"), "{text}");
        // gRPC statuses are their own family, and the non-OK ones fail.
        agg.totals.grpc_status.insert(GrpcStatus::Ok.to_string(), 7);
        agg.totals
            .grpc_status
            .insert(GrpcStatus::Unavailable.to_string(), 2);
        let text = render(&agg, 3, 1, 1.5);
        assert!(
            text.contains(r#"loadfleet_grpc_responses_total{grpc_status="UNAVAILABLE"} 2"#),
            "{text}"
        );
        assert!(text.contains("loadfleet_failures_total 7"), "{text}");
    }
}
