//! A validated plan: what the validator makes of a plan file and flags,
//! and what `run`, the fleet and the report read. The validator checks
//! every value against its bound, so readers need no checks of their own.

use std::collections::BTreeMap;
use std::time::Duration;

use loadfleet_proto::closed::Population;
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::v1;

use super::outputs::OutputPlan;
use super::search::SearchPlan;
use super::sse::SsePlan;
use super::tls::TargetTls;
use crate::thresholds::Threshold;

/// What becomes of a lost agent's share of the schedule
/// (`--on-agent-loss`, `[run] on_agent_loss`). In every mode the arrivals
/// nobody sent are counted unsent `agent_lost`, so `intended` is the plan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnAgentLoss {
    /// The survivors keep their own shares; the lost share goes unsent.
    #[default]
    Continue,
    /// From a hand-over instant after the loss, the survivors also send the
    /// lost agent's remaining arrivals.
    Redistribute,
    /// The whole fleet stops at once: the run is cut short.
    Abort,
}

impl OnAgentLoss {
    /// Every mode, in the order the help lists them.
    pub const ALL: [OnAgentLoss; 3] = [Self::Continue, Self::Redistribute, Self::Abort];

    /// The word used by the flag, the plan and the report.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Redistribute => "redistribute",
            Self::Abort => "abort",
        }
    }
}

impl std::fmt::Display for OnAgentLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnAgentLoss {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of continue, redistribute, abort"))
    }
}

/// The special target URL that means "the built-in testbed" (local runs).
pub(crate) const TESTBED_URL: &str = "testbed";

/// The built-in testbed's gRPC method (`loadfleet-testbed --grpc`), which
/// `run --grpc` calls when no other method is given.
pub(crate) const TESTBED_GRPC_METHOD: &str = "loadfleet.testbed.v1.Testbed/Work";
/// The message `run --grpc` sends it.
pub(crate) const TESTBED_GRPC_MESSAGE: &str = r#"{"payload": "request {{seq}}"}"#;

/// Run-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    pub warmup: Duration,
    pub drain: Duration,
    pub seed: u64,
    /// What becomes of a lost agent's share.
    pub on_agent_loss: OnAgentLoss,
}

/// Where and how requests go.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Base URL, or [`TESTBED_URL`].
    pub url: String,
    pub timeout: Duration,
    pub max_in_flight: u32,
    /// Connections per agent opened ahead of the start, at most.
    pub connections: u32,
    /// Most connections per agent: the pool grows on demand up to this.
    pub max_connections: u32,
    pub max_lag: Duration,
    /// The least latency the target can answer with, when known.
    pub latency_floor: Option<Duration>,
    /// The HTTP protocol agents speak to it.
    pub protocol: loadfleet_proto::vocab::HttpProtocol,
    /// Where the message types of gRPC requests come from; `None` when the
    /// plan sends none.
    pub grpc_source: Option<GrpcSource>,
    /// The encoded `FileDescriptorSet` of those types: read with the plan
    /// from a descriptor set file, or filled in by `run` from reflection
    /// ([`Plan::set_grpc_descriptors`]). Empty until known.
    pub grpc_descriptors: Vec<u8>,
}

/// Where the message types of a plan's gRPC requests come from.
#[derive(Debug, Clone, PartialEq)]
pub enum GrpcSource {
    /// A descriptor set file (`protoc -o`, `buf build`), read and checked
    /// with the plan.
    DescriptorSet(std::path::PathBuf),
    /// The target's reflection service, asked before any load is sent.
    Reflection,
}

/// How the fleet's load is shared among agents.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shares {
    /// Weight by agent label; unlisted labels weigh 1.
    pub by_label: BTreeMap<String, u32>,
    /// Weight every agent by its CPU count instead.
    pub by_cores: bool,
    pub expect: Option<u32>,
    /// With fewer than `expect` after the agent timeout, start anyway when
    /// at least this many came.
    pub min: Option<u32>,
}

impl Shares {
    /// The weight of an agent with this label and CPU count.
    pub fn weight(&self, label: &str, cpus: u32) -> u32 {
        if self.by_cores {
            cpus.max(1)
        } else {
            self.by_label.get(label).copied().unwrap_or(1)
        }
    }
}

/// How a scenario's load is made.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// Arrivals on a schedule, whatever the target does.
    Open(ArrivalSchedule),
    /// A population of clients, each waiting for its response.
    Closed(Population),
}

impl Model {
    pub fn name(&self) -> &'static str {
        match self {
            Model::Open(_) => "open",
            Model::Closed { .. } => "closed",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RequestPlan {
    /// `package.Service/Method` of a gRPC call; `None` for HTTP. A gRPC
    /// call is a POST of `body` (its JSON message) to `path`
    /// (`/package.Service/Method`) with `headers` as its metadata.
    pub grpc: Option<String>,
    /// Its row in the report: unique within the scenario (see
    /// `plan::names`).
    pub name: String,
    pub method: String,
    /// A path joined to the target URL, or an absolute URL.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub weight: u32,
}

/// One step of a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    /// What it sends; its `name` is the step's name (unique within the
    /// flow), its `weight` unused.
    pub request: RequestPlan,
    /// `(name, expression)`, in the plan's order.
    pub captures: Vec<(String, String)>,
    /// Check expressions, in the plan's order (the report counts them by
    /// index).
    pub checks: Vec<String>,
    /// The pause after the step is drawn from this range (both zero: none).
    pub think_min: Duration,
    pub think_max: Duration,
    /// A failed check or a missing capture does not end the flow.
    pub continue_on_failure: bool,
}

impl StepPlan {
    fn to_proto(&self, base: &str) -> v1::FlowStep {
        v1::FlowStep {
            request: Some(template(base, &self.request)),
            captures: self
                .captures
                .iter()
                .map(|(name, expression)| v1::Capture {
                    name: name.clone(),
                    expression: expression.clone(),
                })
                .collect(),
            checks: self.checks.clone(),
            think_min_ns: self.think_min.as_nanos() as u64,
            think_max_ns: self.think_max.as_nanos() as u64,
            continue_on_failure: self.continue_on_failure,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Data {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub random: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub start: Duration,
    pub duration: Duration,
    pub warmup: Duration,
    pub model: Model,
    /// The mix of a request scenario; empty for a flow.
    pub requests: Vec<RequestPlan>,
    /// A flow's steps, in order: each arrival (or client loop) runs them
    /// all. Empty for a mix of requests.
    pub steps: Vec<StepPlan>,
    /// A flow keeps a cookie jar of its own.
    pub cookies: bool,
    pub data: Option<Data>,
    pub seed: u64,
    /// Set for a subscription scenario (`kind = "sse"`).
    pub sse: Option<SsePlan>,
}

impl Scenario {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }

    /// Does each arrival run a flow of steps (rather than one request of
    /// a mix)?
    pub fn is_flow(&self) -> bool {
        !self.steps.is_empty()
    }

    /// The names of a flow's steps, in order: the rows of its funnel, and
    /// what `SCENARIO.STEP` names in a threshold.
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.request.name.as_str())
    }

    /// Every request the scenario may send: its mix's, or its steps'.
    pub fn all_requests(&self) -> impl Iterator<Item = &RequestPlan> {
        self.requests
            .iter()
            .chain(self.steps.iter().map(|s| &s.request))
    }
}

/// A validated plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub run: RunSettings,
    pub target: Target,
    pub shares: Shares,
    pub scenarios: Vec<Scenario>,
    pub thresholds: Vec<Threshold>,
    /// TLS towards the target (`[tls]`, `--insecure`).
    pub tls: TargetTls,
    /// Live outputs (`[[output]]`, `--out-*`).
    pub outputs: Vec<OutputPlan>,
    /// A capacity search's settings (`[search]`, `search`'s flags).
    pub search: SearchPlan,
}

impl Plan {
    /// When the last scenario ends.
    pub fn duration(&self) -> Duration {
        self.scenarios
            .iter()
            .map(Scenario::end)
            .max()
            .unwrap_or_default()
    }

    /// Does any scenario send a gRPC call?
    pub fn has_grpc(&self) -> bool {
        self.scenarios
            .iter()
            .any(|s| s.all_requests().any(|r| r.grpc.is_some()))
    }

    /// The gRPC methods the plan calls, each once, for the messages a
    /// refusal names.
    pub fn grpc_methods(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .scenarios
            .iter()
            .flat_map(|s| s.all_requests().filter_map(|r| r.grpc.as_deref()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The wire form of every scenario, with request and step paths joined
    /// to `base`.
    pub fn assignments(&self, base: &str) -> Vec<v1::ScenarioAssignment> {
        self.scenarios
            .iter()
            .map(|s| v1::ScenarioAssignment {
                name: s.name.clone(),
                start_offset_ns: s.start.as_nanos() as u64,
                duration_ns: s.duration.as_nanos() as u64,
                warmup_ns: s.warmup.as_nanos() as u64,
                model: Some(match &s.model {
                    Model::Open(schedule) => {
                        v1::scenario_assignment::Model::Open(schedule.to_proto())
                    }
                    Model::Closed(population) => {
                        v1::scenario_assignment::Model::Closed(population.to_proto())
                    }
                }),
                requests: s.requests.iter().map(|r| template(base, r)).collect(),
                // Only scenarios that call gRPC carry the types.
                grpc_descriptors: if s.all_requests().any(|r| r.grpc.is_some()) {
                    self.target.grpc_descriptors.clone()
                } else {
                    Vec::new()
                },
                data: s.data.as_ref().map(|d| v1::DataTable {
                    columns: d.columns.clone(),
                    rows: d
                        .rows
                        .iter()
                        .map(|r| v1::DataRow { values: r.clone() })
                        .collect(),
                    random: d.random,
                }),
                seed: s.seed,
                sse: s.sse.as_ref().map(SsePlan::to_proto),
                steps: s.steps.iter().map(|step| step.to_proto(base)).collect(),
                cookies: s.cookies,
            })
            .collect()
    }
}

/// The wire form of one request, its path joined to `base`.
fn template(base: &str, r: &RequestPlan) -> v1::RequestTemplate {
    v1::RequestTemplate {
        method: r.method.clone(),
        url: join_url(base, &r.path),
        headers: r
            .headers
            .iter()
            .map(|(name, value)| v1::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        body: r.body.clone(),
        weight: r.weight,
        grpc_method: r.grpc.clone().unwrap_or_default(),
        name: r.name.clone(),
    }
}

/// Joins a request path to the base URL; an absolute URL stays as it is.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    if path.starts_with("http://") || path.starts_with("https://") {
        return path.to_string();
    }
    if path.is_empty() {
        return base.to_string();
    }
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}
