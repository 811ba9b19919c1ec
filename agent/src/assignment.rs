//! Turning the coordinator's assignment into worker plans: refuse a target
//! outside `--allow-target`, parse every scenario once, and split the
//! agent's in-flight cap and connections across its workers.

use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::bounds::{self, BoundsError};
use loadfleet_proto::closed::Population;
use loadfleet_proto::partition::{Interleave, PartitionError};
use loadfleet_proto::schedule::{ArrivalSchedule, ScheduleError};
use loadfleet_proto::v1::{self, scenario_assignment};
use loadfleet_proto::vocab::HttpProtocol;
use tokio::time::Instant;

use crate::allow::{AllowList, TargetRefused};
use crate::client::tls::TargetTlsError;
use crate::client::ClientConfig;
use crate::config::AgentConfig;
use crate::flow::{FlowSpec, FlowSpecError};
use crate::request::{GrpcContext, MixError, RequestMix};
use crate::sse::{SpecError, SseSpec};
use crate::worker::{Model, ScenarioPlan, WorkerPlan};

/// Why this agent refuses an assignment. The message goes back to the
/// coordinator as a `Refusal`, whose report names it; nothing is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// A URL aims outside `--allow-target`, or could (a placeholder in its
    /// scheme or authority).
    #[error(transparent)]
    Target(#[from] TargetRefused),
    /// A field is outside the bounds every valid plan keeps to
    /// (`loadfleet_proto::bounds`).
    #[error("assignment out of bounds: {0}")]
    Bounds(#[from] BoundsError),
}

/// Checks an assignment before anything is parsed or allocated for it:
/// first its sizes and numbers against the plan bounds, then every URL
/// template against the allow list. `now_ns` is the agent's clock.
pub(crate) fn vet(a: &v1::Assignment, allow: &AllowList, now_ns: u64) -> Result<(), Refusal> {
    bounds::check_assignment(a, now_ns)?;
    for sc in &a.scenarios {
        let steps = sc.steps.iter().filter_map(|s| s.request.as_ref());
        for r in sc.requests.iter().chain(steps) {
            allow.check_template(&r.url)?;
        }
    }
    Ok(())
}

/// Why an assignment cannot be carried out. A coordinator builds
/// assignments from validated plans, so these mean a mismatched or broken
/// coordinator; the agent then sends nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AssignmentError {
    /// Snapshots need an interval to bucket into.
    #[error("assignment interval is 0")]
    ZeroInterval,
    /// Nothing to run.
    #[error("assignment has no scenarios")]
    NoScenarios,
    /// The agents' weights cannot be interleaved.
    #[error("agent weights")]
    Weights(#[source] PartitionError),
    /// An open scenario's schedule is invalid.
    #[error("scenario {name:?}")]
    Schedule {
        /// The scenario's name.
        name: String,
        /// What is wrong with the schedule.
        #[source]
        source: ScheduleError,
    },
    /// A scenario is neither open nor closed.
    #[error("scenario {0:?} has no model")]
    NoModel(String),
    /// A flow scenario's steps cannot be used.
    #[error("scenario {name:?}")]
    Flow {
        /// The scenario's name.
        name: String,
        /// What is wrong with them (boxed: expression errors are large, and
        /// this rides in every session result).
        #[source]
        source: Box<FlowSpecError>,
    },
    /// A subscription scenario's settings cannot be used.
    #[error("scenario {name:?}")]
    Sse {
        /// The scenario's name.
        name: String,
        /// What is wrong with them.
        #[source]
        source: SpecError,
    },
    /// A scenario's request templates cannot be used.
    #[error("scenario {name:?}")]
    Requests {
        /// The scenario's name.
        name: String,
        /// What is wrong with its requests.
        #[source]
        source: MixError,
    },
    /// The plan's TLS settings for the target cannot be used.
    #[error("target TLS")]
    Tls(#[source] TargetTlsError),
}

/// A scenario's model, parsed once before being handed to every worker.
enum ParsedModel {
    Open(Arc<ArrivalSchedule>),
    Closed(Arc<Population>),
}

/// Splits the assignment into one plan per worker, all starting at
/// `start` on this agent's clock.
pub(crate) fn plan_workers(
    a: &v1::Assignment,
    config: &AgentConfig,
    start: Instant,
) -> Result<Vec<WorkerPlan>, AssignmentError> {
    if a.interval_ns == 0 {
        return Err(AssignmentError::ZeroInterval);
    }
    if a.scenarios.is_empty() {
        return Err(AssignmentError::NoScenarios);
    }
    let interleave = Arc::new(Interleave::new(&a.weights).map_err(AssignmentError::Weights)?);
    // Vetted against the vocabulary already: empty means HTTP/1.1.
    let protocol = a.protocol.parse().unwrap_or(HttpProtocol::Http1);
    // The system's trust store is read only for a plan that may go over
    // TLS (see [`crate::client::tls::TargetRoots`]).
    let plain = a
        .scenarios
        .iter()
        .flat_map(|sc| &sc.requests)
        .all(|r| crate::request::plain_http_url(&r.url));
    let roots = if plain {
        Arc::new(rustls::RootCertStore::empty())
    } else {
        config.target_roots.all()
    };
    let tls = crate::client::tls::target_config(&roots, a.tls.as_ref(), alpn(protocol))
        .map_err(AssignmentError::Tls)?;
    let agent = a.agent_index;
    // Parse every scenario once; workers share the result.
    let mut parsed = Vec::new();
    for (i, sc) in a.scenarios.iter().enumerate() {
        let model = match &sc.model {
            Some(scenario_assignment::Model::Open(schedule)) => {
                ParsedModel::Open(Arc::new(ArrivalSchedule::from_proto(schedule).map_err(
                    |source| AssignmentError::Schedule {
                        name: sc.name.clone(),
                        source,
                    },
                )?))
            }
            Some(scenario_assignment::Model::Closed(closed)) => {
                ParsedModel::Closed(Arc::new(Population::from_proto(closed)))
            }
            None => return Err(AssignmentError::NoModel(sc.name.clone())),
        };
        let requests_error = |source| AssignmentError::Requests {
            name: sc.name.clone(),
            source,
        };
        let grpc = GrpcContext::new(&sc.grpc_descriptors, Duration::from_nanos(a.timeout_ns))
            .map_err(requests_error)?;
        let flow = if sc.steps.is_empty() {
            None
        } else {
            Some(Arc::new(
                FlowSpec::from_proto(&sc.steps, sc.cookies).map_err(|source| {
                    AssignmentError::Flow {
                        name: sc.name.clone(),
                        source: Box::new(source),
                    }
                })?,
            ))
        };
        let mix = match &flow {
            None => RequestMix::from_proto(
                &sc.requests,
                sc.data.as_ref(),
                grpc.as_ref(),
                agent,
                &config.allow_targets,
            ),
            Some(flow) => RequestMix::with_vars(
                &FlowSpec::requests(&sc.steps),
                sc.data.as_ref(),
                grpc.as_ref(),
                (agent, &config.allow_targets),
                &flow.vars,
            ),
        }
        .map_err(requests_error)?;
        let sse = match &sc.sse {
            Some(p) => Some(Arc::new(SseSpec::from_proto(p).map_err(|source| {
                AssignmentError::Sse {
                    name: sc.name.clone(),
                    source,
                }
            })?)),
            None => None,
        };
        parsed.push((i as u32, sc, model, Arc::new(mix), (sse, flow)));
    }
    // No more workers than the in-flight cap or the connections allow: each
    // worker needs at least one of each.
    let workers = config
        .workers
        .min(a.max_in_flight.max(1) as usize)
        .min(a.connections.max(1) as usize)
        .max(1);
    let cap = u64::from(a.max_in_flight.max(1));
    let conns = u64::from(a.connections.max(1));
    let max_conns = u64::from(a.max_connections.max(a.connections).max(1));
    Ok((0..workers)
        .map(|w| {
            // Split the agent's cap and pool across workers, remainder first.
            let share = |total: u64| {
                total / workers as u64 + u64::from((w as u64) < total % workers as u64)
            };
            WorkerPlan {
                agent_index: agent as usize,
                worker_index: w,
                workers,
                start,
                interval: Duration::from_nanos(a.interval_ns),
                drain: Duration::from_nanos(a.drain_ns),
                max_in_flight: share(cap).max(1),
                max_lag: Duration::from_nanos(a.max_lag_ns),
                wake_quantum: config.wake_quantum,
                client: ClientConfig {
                    timeout: Duration::from_nanos(a.timeout_ns.max(1)),
                    connections: share(conns).max(1) as usize,
                    max_connections: share(max_conns).max(1) as usize,
                    source: config.source,
                    more_sources: config.more_sources.clone(),
                    tls: tls.clone(),
                    protocol,
                },
                scenarios: parsed
                    .iter()
                    .map(|(index, sc, model, mix, (sse, flow))| ScenarioPlan {
                        index: *index,
                        start: start + Duration::from_nanos(sc.start_offset_ns),
                        warmup: Duration::from_nanos(sc.warmup_ns),
                        duration: Duration::from_nanos(sc.duration_ns),
                        model: match model {
                            ParsedModel::Open(schedule) => Model::Open {
                                schedule: schedule.clone(),
                                interleave: interleave.clone(),
                            },
                            ParsedModel::Closed(population) => Model::Closed {
                                max_clients: population.max_clients(),
                                population: population.clone(),
                                interleave: interleave.clone(),
                            },
                        },
                        mix: mix.clone(),
                        seed: sc.seed,
                        sse: sse.clone(),
                        flow: flow.clone(),
                    })
                    .collect(),
            }
        })
        .collect())
}

/// What a TLS connection offers by ALPN for `protocol`. HTTP/2 offers h2
/// only: a server that does not take it is an error of its own (`no_h2`),
/// not a silent fall back to HTTP/1.1 that would measure another protocol
/// than the plan asked for.
fn alpn(protocol: HttpProtocol) -> &'static [&'static [u8]] {
    match protocol {
        HttpProtocol::Http1 => &[b"http/1.1"],
        HttpProtocol::H2 | HttpProtocol::H2c => &[b"h2"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(url: &str) -> v1::Assignment {
        v1::Assignment {
            weights: vec![1],
            max_in_flight: 10,
            timeout_ns: 1_000_000_000,
            connections: 1,
            max_connections: 1,
            interval_ns: 1_000_000_000,
            scenarios: vec![v1::ScenarioAssignment {
                duration_ns: 1_000_000_000,
                model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                    stages: vec![v1::Stage {
                        duration_ns: 1_000_000_000,
                        from_rps: 1.0,
                        to_rps: 1.0,
                    }],
                    process: v1::ArrivalProcess::Uniform as i32,
                    seed: 1,
                })),
                requests: vec![v1::RequestTemplate {
                    url: url.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// A plan whose every URL is http:// never has the system's trust
    /// store read (most of an agent's start); one https:// URL does.
    #[test]
    fn only_a_plan_that_may_use_tls_reads_the_system_store() {
        let config = |roots| AgentConfig {
            coordinator: "http://127.0.0.1:1".into(),
            token: String::new(),
            id: "a".into(),
            label: String::new(),
            source: None,
            more_sources: Vec::new(),
            workers: 1,
            connect_timeout: Duration::from_secs(1),
            deliver_grace: Duration::ZERO,
            wake_quantum: Duration::from_micros(500),
            allow_targets: AllowList::default(),
            target_roots: roots,
            coordinator_ca: None,
            client_identity: None,
            protocol_version: 0,
            open_files: 1024,
            quiet: true,
        };
        let plain = config(Arc::new(
            crate::client::tls::TargetRoots::new(None).unwrap(),
        ));
        let mut both = assignment("http://127.0.0.1:9/a");
        plan_workers(&both, &plain, Instant::now()).unwrap();
        assert!(!plain.target_roots.read());
        let mut secure = assignment("HTTPS://127.0.0.1:9/b");
        both.scenarios[0]
            .requests
            .push(secure.scenarios[0].requests[0].clone());
        plan_workers(&both, &plain, Instant::now()).unwrap();
        assert!(plain.target_roots.read(), "a mix with one https:// URL");
        secure.scenarios[0].requests[0].url = "{{data.scheme}}://127.0.0.1:9/".into();
        let templated = config(Arc::new(
            crate::client::tls::TargetRoots::new(None).unwrap(),
        ));
        let _ = plan_workers(&secure, &templated, Instant::now());
        assert!(
            templated.target_roots.read(),
            "a scheme from data may be https"
        );
    }

    #[test]
    fn bounds_come_before_targets() {
        let allow = AllowList::parse(&["10.0.0.9:8080"]).unwrap();
        assert_eq!(
            vet(&assignment("http://10.0.0.9:8080/x"), &allow, 0),
            Ok(())
        );
        assert!(matches!(
            vet(&assignment("{{data.u}}://10.0.0.9:8080/"), &allow, 0),
            Err(Refusal::Target(TargetRefused::NoFixedHost { .. }))
        ));
        let mut a = assignment("http://10.0.0.9:8080/x");
        a.interval_ns = 1;
        let e = vet(&a, &allow, 0).unwrap_err().to_string();
        assert!(e.contains("interval_ns"), "{e}");
    }
}
