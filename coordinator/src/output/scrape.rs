//! `--metrics-listen ADDR`: the live run as Prometheus metrics, for a
//! scraper, as one more output of the per-second [`Frame`].
//!
//! [`Scrape::show`] renders each frame's [`catalogue::points`] in the text
//! format (0.0.4), on the fleet actor, and publishes the text on a watch
//! channel; the server only hands out the latest text, so a slow or
//! hostile scraper can never touch the run's state. The series are those
//! remote write pushes, with the same labels; latency and service time
//! are classic histograms at [`catalogue::CLASSIC_BOUNDS`], as the text
//! format has no native ones.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::catalogue::{self, Kind, Point, Value};
use super::frame::Frame;
use crate::units;

/// The text format's media type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `GET /metrics` until the process ends.
pub(crate) async fn serve(listener: TcpListener, text: watch::Receiver<String>) {
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

/// The scrape endpoint's end in the fleet: renders each frame it is shown.
pub(crate) struct Scrape {
    pub text: watch::Sender<String>,
    /// Labels on every series: run_id and plan.
    pub labels: BTreeMap<String, String>,
    /// Whether the run is one of several (--repeat): adds `repeat`.
    pub repeats: bool,
}

impl Scrape {
    /// Replaces the served text with this frame's.
    pub(crate) fn show(&self, frame: &Frame) {
        let mut labels = self.labels.clone();
        if self.repeats {
            labels.insert("repeat".into(), (frame.run + 1).to_string());
        }
        self.text
            .send_replace(render(&catalogue::points(frame, false), &labels));
    }
}

/// A label value or HELP text with `\`, `"` (labels only) and newlines
/// escaped, as the text format asks.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// `{a="1",b="2"}`: the run's labels, then the series' own.
fn label_set(base: &BTreeMap<String, String>, own: &[(&str, &str)]) -> String {
    let all: Vec<String> = base
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(own.iter().copied())
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v, true)))
        .collect();
    format!("{{{}}}", all.join(","))
}

/// Renders the points of one frame, one family per catalogue entry that
/// has samples, in catalogue order.
pub(crate) fn render(points: &[Point<'_>], base: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for metric in catalogue::ALL {
        let mine: Vec<&Point<'_>> = points
            .iter()
            .filter(|p| p.metric.name == metric.name)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let name = metric.prometheus();
        let kind = match metric.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}.", escape(metric.help, false));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for p in mine {
            let own: Vec<(&str, &str)> = p.pairs().collect();
            match p.value {
                Value::Number(v) => {
                    let _ = writeln!(out, "{name}{} {v}", label_set(base, &own));
                }
                Value::Micros(us) => {
                    let v = units::us_to_s(us);
                    let _ = writeln!(out, "{name}{} {v}", label_set(base, &own));
                }
                Value::Histogram(h) => histogram(&mut out, &name, base, &own, h),
            }
        }
    }
    out
}

/// A classic histogram's `_bucket`, `_sum` and `_count` samples.
fn histogram(
    out: &mut String,
    name: &str,
    base: &BTreeMap<String, String>,
    own: &[(&str, &str)],
    h: &Histogram<u64>,
) {
    for (le, n) in catalogue::classic_buckets(h) {
        let mut l = own.to_vec();
        l.push(("le", &le));
        let _ = writeln!(out, "{name}_bucket{} {n}", label_set(base, &l));
    }
    let l = label_set(base, own);
    let _ = writeln!(out, "{name}_sum{l} {}", catalogue::sum_seconds(h));
    let _ = writeln!(out, "{name}_count{l} {}", h.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::frame::{Counts, ScenarioFrame};
    use loadfleet_proto::histogram::new_histogram;

    fn frame(totals: Counts, latency: Histogram<u64>) -> Frame {
        Frame {
            run: 0,
            seconds: 0..2,
            time_ms: 2_000,
            started_ms: 0,
            scenarios: vec![ScenarioFrame {
                name: "buy".into(),
                totals: totals.clone(),
                step: totals,
                latency: latency.clone(),
                service_time: latency.clone(),
                step_latency: latency,
                flow: None,
            }],
            in_flight: 3,
            agents_alive: 1,
            agents: vec![],
            last: false,
            verdicts: vec![],
        }
    }

    #[test]
    fn renders_the_catalogue_with_escaped_labels() {
        let mut t = Counts {
            intended: 10,
            failures: 5,
            ..Default::default()
        };
        t.unsent.insert("late".into(), 2);
        t.errors.insert(r#"re"set"#.into(), 1);
        t.status.insert(503, 4);
        t.status.insert(200, 5);
        let mut h = new_histogram();
        h.record(1_000).unwrap();
        let (tx, rx) = watch::channel(String::new());
        let scrape = Scrape {
            text: tx,
            labels: [("run_id".to_string(), "r".to_string())].into(),
            repeats: false,
        };
        scrape.show(&frame(t, h));
        let text = rx.borrow().clone();
        for line in [
            "# HELP loadfleet_requests_intended_total Arrivals due so far by the schedule.\n\
             # TYPE loadfleet_requests_intended_total counter\n\
             loadfleet_requests_intended_total{run_id=\"r\",scenario=\"buy\"} 10\n",
            r#"loadfleet_responses_total{run_id="r",scenario="buy",code="200"} 5"#,
            r#"loadfleet_requests_unsent_total{run_id="r",scenario="buy",reason="late"} 2"#,
            r#"loadfleet_requests_unsent_total{run_id="r",scenario="buy",reason="pool_timeout"} 0"#,
            r#"loadfleet_errors_total{run_id="r",scenario="buy",kind="re\"set"} 1"#,
            r#"loadfleet_failures_total{run_id="r",scenario="buy"} 5"#,
            r#"loadfleet_in_flight{run_id="r"} 3"#,
            "# TYPE loadfleet_latency_seconds histogram\n",
            r#"loadfleet_latency_seconds_bucket{run_id="r",scenario="buy",le="0.0005"} 0"#,
            r#"loadfleet_latency_seconds_bucket{run_id="r",scenario="buy",le="0.001"} 1"#,
            r#"loadfleet_latency_seconds_bucket{run_id="r",scenario="buy",le="+Inf"} 1"#,
            r#"loadfleet_latency_seconds_count{run_id="r",scenario="buy"} 1"#,
            r#"loadfleet_latency_exact_seconds{run_id="r",scenario="buy",quantile="0.99"} 0.001"#,
            "# TYPE loadfleet_pool_saturated_seconds_total counter\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            !text.contains("loadfleet_verdict"),
            "no family without samples"
        );
    }

    /// A flow scenario's flows and steps reach the page: every failure
    /// reason (zeros included) and one series per step, labelled `step`.
    #[test]
    fn renders_a_flow_scenarios_flows_and_steps() {
        use crate::output::frame::{FlowFrame, StepFrame};
        let mut h = new_histogram();
        h.record(1_000).unwrap();
        let mut f = frame(Counts::default(), h.clone());
        f.scenarios[0].flow = Some(FlowFrame {
            started: 9,
            completed: 6,
            failed: [("check".to_string(), 2)].into(),
            latency: h.clone(),
            steps: ["login", "pay \"now\""]
                .iter()
                .map(|n| StepFrame {
                    name: n.to_string(),
                    sent: 8,
                    completed: 7,
                    failures: 1,
                    latency: h.clone(),
                })
                .collect(),
        });
        let text = render(&catalogue::points(&f, false), &BTreeMap::new());
        for line in [
            r#"loadfleet_flows_started_total{scenario="buy"} 9"#,
            r#"loadfleet_flows_completed_total{scenario="buy"} 6"#,
            r#"loadfleet_flows_failed_total{scenario="buy",reason="check"} 2"#,
            r#"loadfleet_flows_failed_total{scenario="buy",reason="timeout"} 0"#,
            r#"loadfleet_flow_latency_seconds_count{scenario="buy"} 1"#,
            r#"loadfleet_step_requests_sent_total{scenario="buy",step="login"} 8"#,
            r#"loadfleet_step_requests_completed_total{scenario="buy",step="pay \"now\""} 7"#,
            r#"loadfleet_step_failures_total{scenario="buy",step="login"} 1"#,
            r#"loadfleet_step_latency_seconds_bucket{scenario="buy",step="login",le="0.001"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert_eq!(
            text.matches("# TYPE loadfleet_step_requests_sent_total")
                .count(),
            1
        );
    }
}
