//! Turning the coordinator's assignment into worker plans: refuse a target
//! outside `--allow-target`, parse every scenario once, and split the
//! agent's in-flight cap and connections across its workers.

use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::closed::Population;
use loadfleet_proto::partition::{Interleave, PartitionError};
use loadfleet_proto::schedule::{ArrivalSchedule, ScheduleError};
use loadfleet_proto::v1::{self, scenario_assignment};
use tokio::time::Instant;

use crate::client::ClientConfig;
use crate::request::{MixError, RequestMix};
use crate::session::AgentConfig;
use crate::worker::{Model, ScenarioPlan, WorkerPlan};

/// Why this agent will not send where an assignment points. The message
/// goes back to the coordinator, whose report names the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetRefused {
    /// The URL builds its host from placeholders, so it cannot be checked
    /// before sending.
    #[error(
        "target {url:?} has no fixed host, and this agent only sends to --allow-target {allow}"
    )]
    NoFixedHost {
        /// The URL template.
        url: String,
        /// The allow list, comma-separated.
        allow: String,
    },
    /// The host and port are not in the allow list.
    #[error("target {host}:{port} is not in this agent's --allow-target list ({allow})")]
    NotAllowed {
        /// The target's host, lower-cased.
        host: String,
        /// The target's port (the scheme's default when not written).
        port: u16,
        /// The allow list, comma-separated.
        allow: String,
    },
}

/// Why an assignment cannot be carried out. A coordinator builds
/// assignments from validated plans, so these mean a mismatched or broken
/// coordinator; the agent then sends nothing.
#[derive(Debug, thiserror::Error)]
pub enum AssignmentError {
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
    /// A scenario's request templates cannot be used.
    #[error("scenario {name:?}")]
    Requests {
        /// The scenario's name.
        name: String,
        /// What is wrong with its requests.
        #[source]
        source: MixError,
    },
}

/// The `host:port` a URL (template) points at; `None` when it has no
/// authority or builds it from placeholders.
fn url_authority(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains("{{") || authority.is_empty() {
        return None;
    }
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(port) => (h, port),
            Err(_) => (authority, default_port),
        },
        _ => (authority, default_port),
    };
    Some((host.trim_matches(['[', ']']).to_ascii_lowercase(), port))
}

/// Refuses an assignment that aims at a target outside `allow` (empty
/// allows any).
pub fn check_targets(a: &v1::Assignment, allow: &[String]) -> Result<(), TargetRefused> {
    if allow.is_empty() {
        return Ok(());
    }
    for sc in &a.scenarios {
        for r in &sc.requests {
            let Some((host, port)) = url_authority(&r.url) else {
                return Err(TargetRefused::NoFixedHost {
                    url: r.url.clone(),
                    allow: allow.join(","),
                });
            };
            let allowed = allow.iter().any(|entry| {
                let entry = entry.trim().to_ascii_lowercase();
                match entry.rsplit_once(':') {
                    Some((h, p)) if p.parse::<u16>().is_ok() => {
                        h.trim_matches(['[', ']']) == host && p.parse::<u16>().ok() == Some(port)
                    }
                    _ => entry.trim_matches(['[', ']']) == host,
                }
            });
            if !allowed {
                return Err(TargetRefused::NotAllowed {
                    host,
                    port,
                    allow: allow.join(","),
                });
            }
        }
    }
    Ok(())
}

/// A scenario's model, parsed once before being handed to every worker.
enum ParsedModel {
    Open(Arc<ArrivalSchedule>),
    Closed(Arc<Population>),
}

/// Splits the assignment into one plan per worker, all starting at
/// `start` on this agent's clock.
pub fn plan_workers(
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
        let mix =
            RequestMix::from_proto(&sc.requests, sc.data.as_ref(), agent).map_err(|source| {
                AssignmentError::Requests {
                    name: sc.name.clone(),
                    source,
                }
            })?;
        parsed.push((i as u32, sc, model, Arc::new(mix)));
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
                    source: config.source,
                    tls: config.tls.clone(),
                },
                scenarios: parsed
                    .iter()
                    .map(|(index, sc, model, mix)| ScenarioPlan {
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
                    })
                    .collect(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(url: &str) -> v1::Assignment {
        v1::Assignment {
            scenarios: vec![v1::ScenarioAssignment {
                requests: vec![v1::RequestTemplate {
                    url: url.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn allow_list_checks_host_and_port() {
        let allow = vec!["10.0.0.9:8080".to_string(), "api.example".to_string()];
        assert!(check_targets(&assignment("http://10.0.0.9:8080/x"), &allow).is_ok());
        assert!(check_targets(&assignment("http://API.example/x?y"), &allow).is_ok());
        assert!(check_targets(&assignment("http://api.example:9000/"), &allow).is_ok());
        let e = check_targets(&assignment("http://10.0.0.9:9090/"), &allow)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("10.0.0.9:9090") && e.contains("--allow-target"),
            "{e}"
        );
        assert!(check_targets(&assignment("http://{{data.host}}/"), &allow).is_err());
        assert!(check_targets(&assignment("http://anything/"), &[]).is_ok());
    }

    #[test]
    fn authorities_parse() {
        assert_eq!(url_authority("http://h:81/p"), Some(("h".into(), 81)));
        assert_eq!(url_authority("http://h"), Some(("h".into(), 80)));
        assert_eq!(url_authority("http://[::1]:9/"), Some(("::1".into(), 9)));
        assert_eq!(url_authority("https://h/x"), Some(("h".into(), 443)));
        assert_eq!(url_authority("/relative"), None);
    }
}
