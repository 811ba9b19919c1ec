//! Live outputs: the fleet-merged figures pushed once per settled second
//! to Prometheus (remote write), InfluxDB (line protocol) and OpenTelemetry
//! (OTLP/HTTP), and served to scrapers (`--metrics-listen`), next to the
//! files of `run::folder::live` (docs/outputs.md). Every one of them
//! writes the series of one [`catalogue`].
//!
//! [`Tee`] stands in the fleet's [`Sink`] slot: on each call it makes a
//! [`frame::Frame`] from the merged state (before the live files fold the
//! settled seconds away), renders it for the scrape endpoint, hands it to
//! every pushing output's bounded queue, then passes the call on.
//! Everything slow happens on the outputs' own tasks ([`delivery`]), so
//! the run and its figures are the same with or without outputs; what an
//! output lost comes back as an `OUTPUT_LOST` verdict.

pub(crate) mod catalogue;
pub(crate) mod config;
pub(crate) mod delivery;
pub(crate) mod frame;
pub(crate) mod influx;
pub(crate) mod otlp;
pub(crate) mod prometheus;
pub(crate) mod scrape;
pub(crate) mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loadfleet_proto::vocab::{VerdictCode, VerdictLevel};

pub(crate) use config::{specs, OutputSpec};

use crate::aggregate::Aggregate;
use crate::fleet::{Settled, Sink};
use crate::report::{Report, Verdict};

/// Identity of the run on every series and point.
#[derive(Debug, Clone)]
pub(crate) struct RunLabels {
    pub run_id: String,
    /// The plan file's stem, or `flags` for a run made from flags alone.
    pub plan: String,
    pub scenarios: Vec<String>,
    /// Each scenario's steps' names (empty for one that is not a flow),
    /// the outputs' `step` label.
    pub steps: Vec<Vec<String>>,
    pub repeats: usize,
}

impl RunLabels {
    /// `run_id` from --out-run-id or else the output folder's name, `plan`
    /// from the plan file's name.
    pub(crate) fn new(
        run_id: Option<&str>,
        plan: Option<&std::path::Path>,
        out_dir: &std::path::Path,
        info: &crate::report::PlanInfo,
        repeats: usize,
    ) -> Self {
        let run_id = run_id.map_or_else(
            || {
                out_dir
                    .canonicalize()
                    .unwrap_or_else(|_| out_dir.to_path_buf())
                    .file_name()
                    .map_or_else(|| "loadfleet".into(), |n| n.to_string_lossy().into_owned())
            },
            str::to_string,
        );
        let plan = plan
            .and_then(|p| p.file_stem())
            .map_or_else(|| "flags".into(), |n| n.to_string_lossy().into_owned());
        Self {
            run_id,
            plan,
            scenarios: info.scenarios.iter().map(|s| s.name.clone()).collect(),
            steps: info
                .scenarios
                .iter()
                .map(|s| s.steps.iter().map(|q| q.name.clone()).collect())
                .collect(),
            repeats,
        }
    }
}

/// The running outputs: the fleet's end ([`Tee`]) and the waiting end.
pub(crate) struct Outputs {
    workers: Vec<(delivery::Worker, Duration)>,
}

/// Wraps the fleet's sink (the live files, none in a search) with the
/// scrape endpoint and the outputs' queues.
pub(crate) struct Tee {
    inner: Option<Box<dyn Sink>>,
    scrape: Option<scrape::Scrape>,
    queues: Vec<delivery::Queue>,
    framer: frame::Framer,
    scenarios: Vec<String>,
    steps: Vec<Vec<String>>,
    per_agent: bool,
}

/// Starts every output's worker on the current runtime, and feeds the
/// scrape endpoint's text (`--metrics-listen`) when given. With neither
/// the sink is handed back unchanged.
pub(crate) fn start(
    specs: &[OutputSpec],
    labels: &RunLabels,
    scrape: Option<tokio::sync::watch::Sender<String>>,
    inner: Option<Box<dyn Sink>>,
) -> anyhow::Result<(Option<Box<dyn Sink>>, Outputs)> {
    if specs.is_empty() && scrape.is_none() {
        return Ok((
            inner,
            Outputs {
                workers: Vec::new(),
            },
        ));
    }
    let mut queues = Vec::new();
    let mut workers = Vec::new();
    for spec in specs {
        let mut base: BTreeMap<String, String> = spec.labels.clone();
        base.insert("run_id".into(), labels.run_id.clone());
        base.insert("plan".into(), labels.plan.clone());
        let repeats = labels.repeats > 1;
        let encoder: Box<dyn delivery::Encoder> = match spec.kind {
            config::Kind::Prometheus => Box::new(prometheus::Prometheus {
                histograms: spec.histograms,
                per_agent: spec.per_agent,
                labels: base,
                repeats,
                seen: Default::default(),
            }),
            config::Kind::Influx => Box::new(influx::Influx {
                tags: base,
                per_agent: spec.per_agent,
                repeats,
            }),
            config::Kind::Otlp => Box::new(otlp::Otlp {
                resource: base,
                per_agent: spec.per_agent,
                repeats,
            }),
        };
        let (queue, worker) = delivery::start(spec, encoder)?;
        eprintln!("pushing live results to {}", spec.label());
        queues.push(queue);
        workers.push((worker, spec.timeout));
    }
    let scrape = scrape.map(|text| scrape::Scrape {
        text,
        labels: [
            ("run_id".to_string(), labels.run_id.clone()),
            ("plan".to_string(), labels.plan.clone()),
        ]
        .into(),
        repeats: labels.repeats > 1,
    });
    let tee = Tee {
        inner,
        scrape,
        queues,
        framer: frame::Framer::default(),
        scenarios: labels.scenarios.clone(),
        steps: labels.steps.clone(),
        per_agent: specs.iter().any(|s| s.per_agent),
    };
    Ok((Some(Box::new(tee)), Outputs { workers }))
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Sink for Tee {
    fn settled(&mut self, s: Settled<'_>) {
        // Called on every tick: the work below only when a second settled.
        if !self.framer.due(s.run, s.below) {
            if let Some(inner) = &mut self.inner {
                inner.settled(s);
            }
            return;
        }
        // Agents from a result around an empty aggregate: cheap, and the
        // merged state stays where it is.
        let views = (s.so_far)(Aggregate::default()).agents;
        let alive = views.iter().filter(|a| a.lost.is_none()).count() as u64;
        let agents = if self.per_agent {
            views
                .iter()
                .zip(&s.aggregate.agents)
                .map(|(v, m)| frame::AgentFrame {
                    name: v.hello.agent_id.clone(),
                    sent: m.sent,
                    completed: m.completed,
                    cpu_seconds: m.cpu_seconds,
                    max_lag_us: if m.lag.is_empty() { 0 } else { m.lag.max() },
                })
                .collect()
        } else {
            Vec::new()
        };
        let frame = self.framer.frame(
            s.run,
            millis(s.started_at),
            s.below,
            s.aggregate,
            &self.scenarios,
            &self.steps,
            agents,
            alive,
            millis(SystemTime::now()),
        );
        if let Some(frame) = frame {
            if let Some(scrape) = &self.scrape {
                scrape.show(&frame);
            }
            let frame = Arc::new(frame);
            for q in &self.queues {
                q.push(frame.clone());
            }
        }
        if let Some(inner) = &mut self.inner {
            inner.settled(s);
        }
    }
}

impl Outputs {
    /// Waits for the last pushes (each output at most its timeout, after
    /// the fleet dropped its [`Tee`]), then adds an `OUTPUT_LOST` verdict
    /// for each output that lost seconds.
    pub(crate) async fn finish(self, report: &mut Report) {
        let verdicts = Arc::new(frame::Frame {
            run: 0,
            seconds: 0..0,
            time_ms: millis(SystemTime::now()),
            started_ms: 0,
            scenarios: Vec::new(),
            in_flight: 0,
            agents_alive: 0,
            agents: Vec::new(),
            last: false,
            verdicts: report
                .verdicts
                .iter()
                .map(|v| (v.code.to_string(), v.level.to_string(), v.message.clone()))
                .collect(),
        });
        let verdicts = (!verdicts.verdicts.is_empty()).then_some(verdicts);
        // All at once: a dead sink's wait does not add to another's.
        let ledgers =
            futures::future::join_all(self.workers.into_iter().map(|(worker, timeout)| {
                let verdicts = verdicts.clone();
                async move {
                    let name = worker.name.clone();
                    // Room for the retries' pauses on top of one timeout.
                    let grace = timeout + Duration::from_secs(1);
                    (name, worker.finish(verdicts, grace).await)
                }
            }))
            .await;
        for (name, ledger) in ledgers {
            if let Some(v) = verdict(&name, &ledger) {
                eprintln!("warning: {}", v.message);
                report.verdicts.push(v);
            }
        }
    }
}

/// The verdict for one output's ledger, if it lost anything.
pub(crate) fn verdict(name: &str, ledger: &delivery::Ledger) -> Option<Verdict> {
    let ranges = ledger.lost_ranges();
    if ranges.is_empty() && ledger.frames_lost == 0 {
        return None;
    }
    let seconds: Vec<String> = ranges
        .iter()
        .map(|r| {
            if r.end == r.start + 1 {
                r.start.to_string()
            } else {
                format!("{}-{}", r.start, r.end - 1)
            }
        })
        .collect();
    let lost = ledger.seconds_lost();
    let what = if seconds.is_empty() {
        "the final push was not delivered".to_string()
    } else {
        format!(
            "{lost} second{} not delivered (second{} {} from the start)",
            if lost == 1 { " was" } else { "s were" },
            if seconds.len() == 1 && lost == 1 {
                ""
            } else {
                "s"
            },
            seconds.join(", ")
        )
    };
    Some(Verdict {
        level: VerdictLevel::Warn,
        code: VerdictCode::OutputLost,
        message: format!(
            "output {name}: {what}{}; its dashboards have gaps there, and {}. The report's figures are whole",
            ledger
                .last_error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
            if ledger.final_delivered {
                "its final totals arrived"
            } else {
                "its totals stop short of the report's"
            }
        ),
    })
}
