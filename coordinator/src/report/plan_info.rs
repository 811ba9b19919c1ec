//! What the report knows of the plan and of where the run happened, made
//! once from the [`Plan`] so the plan-to-report mapping lives in one place.
//! Both [`super::build`] and [`super::verdicts`] read it; neither depends on
//! the other for it.

use std::net::IpAddr;
use std::time::Duration;

use loadfleet_proto::schedule::Process;
use loadfleet_proto::target::check_url;
use loadfleet_proto::vocab::HttpProtocol;

use crate::report_model::TlsInfo;

use crate::plan::{join_url, Model, Plan};
use crate::thresholds::Threshold;

/// Everything the report needs from the plan and the run's setup, made
/// once by [`PlanInfo::new`], so the plan-to-report mapping lives here and
/// nowhere else.
#[derive(Debug, Clone)]
pub(crate) struct PlanInfo {
    /// The URL the agents were sent to (the built-in testbed's real
    /// address, not its placeholder).
    pub target: String,
    /// `HOST:PORT` of every address the plan's requests go to (the target
    /// URL's, and any absolute URL's), in the plan's order, each once;
    /// an address a placeholder writes is not known here and not listed.
    /// What a verdict names when nothing answered there.
    pub addresses: Vec<String>,
    pub scenarios: Vec<ScenarioInfo>,
    /// Until the last scenario ends.
    pub duration: Duration,
    pub drain: Duration,
    pub max_in_flight: u32,
    /// Keep-alive connections per agent opened ahead of the start.
    pub connections: u32,
    /// Most connections per agent: the most requests it can have on the
    /// target at once over HTTP/1.1.
    pub max_connections: u32,
    pub thresholds: Vec<Threshold>,
    /// Arrivals later than this were dropped as `late`.
    pub max_lag: Duration,
    /// The least latency the target can answer with (its configured work):
    /// successes much faster than this mean the work did not happen.
    pub latency_floor: Option<Duration>,
    /// Where agents and target ran, for the LOCALHOST verdicts.
    pub placement: Placement,
    /// The HTTP protocol the plan asked for.
    pub protocol: HttpProtocol,
    /// TLS towards the target, as the report states it.
    pub tls: TlsInfo,
    /// When failures raise the FAILURES verdict.
    pub failure_limits: FailureLimits,
}

/// Where the agents ran relative to the target: shared hardware makes
/// latency and capacity figures indicative only.
#[derive(Debug, Clone)]
pub(crate) enum Placement {
    /// Agents, coordinator and target on this machine; `pinning` says what
    /// could be kept apart (e.g. which CPUs each got).
    Local { pinning: String },
    /// Agents elsewhere. `loopback` when the target URL names this host;
    /// `target_ips` are its resolved addresses, to spot an agent on the
    /// target's own host.
    Remote {
        loopback: bool,
        target_ips: Vec<IpAddr>,
    },
}

impl PlanInfo {
    /// The one mapping from a plan to what its report says about it.
    pub(crate) fn new(
        plan: &Plan,
        target: &str,
        latency_floor: Option<Duration>,
        placement: Placement,
    ) -> Self {
        let scenarios = plan
            .scenarios
            .iter()
            .map(|s| ScenarioInfo {
                name: s.name.clone(),
                model: s.model.name(),
                start: s.start,
                duration: s.duration,
                warmup: s.warmup,
                process: match &s.model {
                    Model::Open(sched) => Some(
                        match sched.process() {
                            Process::Uniform => "uniform",
                            Process::Poisson { .. } => "poisson",
                        }
                        .to_string(),
                    ),
                    Model::Closed { .. } => None,
                },
                offered_rps: match &s.model {
                    Model::Open(sched) => {
                        Some(sched.expected_count() / s.duration.as_secs_f64().max(1e-9))
                    }
                    Model::Closed { .. } => None,
                },
                sse_send_time: s.sse.as_ref().map(|sse| sse.send_time_source()),
                requests: s.requests.iter().map(|r| r.name.clone()).collect(),
                steps: s
                    .steps
                    .iter()
                    .map(|step| StepInfo {
                        name: step.request.name.clone(),
                        checks: step.checks.clone(),
                    })
                    .collect(),
            })
            .collect();
        let mut addresses: Vec<String> = Vec::new();
        for r in plan.scenarios.iter().flat_map(|s| s.all_requests()) {
            if let Some(a) = address(&join_url(target, &r.path)) {
                if !addresses.contains(&a) {
                    addresses.push(a);
                }
            }
        }
        Self {
            target: target.to_string(),
            addresses,
            scenarios,
            duration: plan.duration(),
            drain: plan.run.drain,
            max_in_flight: plan.target.max_in_flight,
            connections: plan.target.connections,
            max_connections: plan.target.max_connections,
            thresholds: plan.thresholds.clone(),
            max_lag: plan.target.max_lag,
            latency_floor,
            placement,
            protocol: plan.target.protocol,
            tls: TlsInfo {
                insecure: plan.tls.insecure,
                ca_cert: plan.tls.ca_cert.is_some(),
                client_cert: plan.tls.client.is_some(),
            },
            failure_limits: Default::default(),
        }
    }
}

/// `HOST:PORT` a URL connects to (the scheme's port when none is
/// written), or `None` when its host is not literal (a placeholder) or it
/// is no URL.
fn address(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains("{{") {
        return None;
    }
    let uri = check_url(&format!("{scheme}://{authority}/")).ok()?;
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some(format!("{}:{port}", uri.host()?))
}

/// What the report needs to know of each planned scenario.
#[derive(Debug, Clone)]
pub(crate) struct ScenarioInfo {
    pub name: String,
    pub model: &'static str,
    pub start: Duration,
    pub duration: Duration,
    pub warmup: Duration,
    pub process: Option<String>,
    pub offered_rps: Option<f64>,
    /// Subscription scenarios: where events carry their send time ("none"
    /// when nowhere); `None` for request scenarios.
    pub sse_send_time: Option<String>,
    /// The names of the requests of its mix, in the plan's order.
    pub requests: Vec<String>,
    /// A flow scenario's steps, in the plan's order; empty for others.
    pub steps: Vec<StepInfo>,
}

/// What the report names of a flow's step: the step, and its checks by
/// their text.
#[derive(Debug, Clone)]
pub(crate) struct StepInfo {
    pub name: String,
    pub checks: Vec<String>,
}

/// When failures (errors, 4xx and 5xx) make a run suspect: a warning above
/// `warn` of the completions, an error above `error`. Settings, as a
/// target that sheds load with 429s by design may fail often on purpose;
/// shares of the completions, from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FailureLimits {
    pub warn: f64,
    pub error: f64,
}

impl Default for FailureLimits {
    fn default() -> Self {
        Self {
            warn: 0.05,
            error: 0.5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::address;

    #[test]
    fn addresses_are_host_and_port() {
        for (url, expected) in [
            ("http://127.0.0.1:1/", Some("127.0.0.1:1")),
            ("http://h/x?y", Some("h:80")),
            ("https://h", Some("h:443")),
            ("https://user@h:8443/x", Some("h:8443")),
            ("http://[::1]:8080/", Some("[::1]:8080")),
            ("http://{{host}}:80/", None),
            ("http://h:{{port}}/", None),
            ("testbed", None),
        ] {
            assert_eq!(address(url).as_deref(), expected, "{url}");
        }
    }
}
