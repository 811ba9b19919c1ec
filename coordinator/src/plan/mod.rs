//! Plans: what to send, how fast, for how long — from a TOML file or from
//! flags — validated so that every mistake names its field, its line and a
//! fix.
//!
//! A plan has run settings (`[run]`: warm-up, drain, seed), a target
//! (`[target]`: base URL, timeouts, in-flight cap, pool size), agent shares
//! (`[agents]`) and one or more `[[scenario]]`s. Each scenario is open
//! (a rate profile: constant, ramps, steps, pauses; uniform or Poisson) or
//! closed (a client population with think time), starts at an offset or
//! after the previous one, and sends a weighted mix of templated requests.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use loadfleet_proto::closed::Population;
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::v1;

use crate::thresholds::Threshold;

mod check;
mod files;
mod grpc;
mod model;
mod overlay;
mod raw;
mod requests;
mod shape;
mod sse;
mod timing;
mod tls;
mod validate;

pub use check::{PlanError, PlanErrors};
pub use overlay::{Overlay, ProcessArg};
pub use sse::SsePlan;
pub use tls::TargetTls;

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
pub const TESTBED_URL: &str = "testbed";

/// The built-in testbed's gRPC method (`loadfleet-testbed --grpc`), which
/// `run --grpc` calls when no other method is given.
pub const TESTBED_GRPC_METHOD: &str = "loadfleet.testbed.v1.Testbed/Work";
/// The message `run --grpc` sends it.
pub const TESTBED_GRPC_MESSAGE: &str = r#"{"payload": "request {{seq}}"}"#;

/// Where a plan made of flags alone comes from, in messages.
const FLAGS_SOURCE: &str = "the command line";

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
    pub connections: u32,
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
    pub method: String,
    /// A path joined to the target URL, or an absolute URL.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub weight: u32,
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
    pub requests: Vec<RequestPlan>,
    pub data: Option<Data>,
    pub seed: u64,
    /// Set for a subscription scenario (`kind = "sse"`).
    pub sse: Option<SsePlan>,
}

impl Scenario {
    pub fn end(&self) -> Duration {
        self.start + self.duration
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
            .any(|s| s.requests.iter().any(|r| r.grpc.is_some()))
    }

    /// The gRPC methods the plan calls, each once, for the messages a
    /// refusal names.
    pub fn grpc_methods(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .scenarios
            .iter()
            .flat_map(|s| s.requests.iter().filter_map(|r| r.grpc.as_deref()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Takes the message types asked from the target's reflection service
    /// and checks every gRPC request's message against them, as the
    /// validator does for a descriptor set file.
    pub fn set_grpc_descriptors(&mut self, descriptors: Vec<u8>) -> Result<(), PlanErrors> {
        let errors = grpc::check_messages(self, &descriptors);
        if !errors.is_empty() {
            return Err(PlanErrors {
                source: "the plan".into(),
                errors: errors
                    .into_iter()
                    .map(|e| PlanError {
                        message: format!(
                            "{} (types from the target's reflection service)",
                            e.message
                        ),
                        ..e
                    })
                    .collect(),
            });
        }
        self.target.grpc_descriptors = descriptors;
        Ok(())
    }

    /// The wire form of every scenario, with request paths joined to `base`.
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
                requests: s
                    .requests
                    .iter()
                    .map(|r| v1::RequestTemplate {
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
                    })
                    .collect(),
                // Only scenarios that call gRPC carry the types.
                grpc_descriptors: if s.requests.iter().any(|r| r.grpc.is_some()) {
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
            })
            .collect()
    }
}

/// Joins a request path to the base URL; an absolute URL stays as it is.
pub fn join_url(base: &str, path: &str) -> String {
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

/// The plan for a run or a preview: the file (if any) with the flags laid
/// over it, or a one-scenario plan made of the flags alone.
pub fn resolve(file: Option<&Path>, flags: &Overlay) -> Result<Plan, PlanErrors> {
    let (text, source, base) = match file {
        Some(path) => (
            read(path)?,
            path.display().to_string(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
        None => (String::new(), FLAGS_SOURCE.to_string(), Default::default()),
    };
    let mut raw = match file {
        Some(_) => from_toml(&text, &source)?,
        None => overlay::flags_only(),
    };
    let laid = flags.lay_over(&mut raw, file.is_some());
    validate::validate(
        &raw,
        validate::Input {
            text: &text,
            source: &source,
            base: &base,
            flags: laid.flags,
            errors: laid.errors,
            thresholds: flags.thresholds.clone(),
        },
    )
}

/// Reads and validates a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    resolve(Some(path), &Overlay::default())
}

/// Parses and validates plan text; relative data and body files are read
/// from `base`.
pub fn parse(text: &str, source: &str, base: &Path) -> Result<Plan, PlanErrors> {
    let raw = from_toml(text, source)?;
    validate::validate(
        &raw,
        validate::Input {
            text,
            source,
            base,
            flags: BTreeMap::new(),
            errors: Vec::new(),
            thresholds: Vec::new(),
        },
    )
}

fn read(path: &Path) -> Result<String, PlanErrors> {
    std::fs::read_to_string(path).map_err(|e| PlanErrors {
        source: path.display().to_string(),
        errors: vec![PlanError {
            field: "plan".into(),
            line: None,
            message: format!("cannot read the plan file: {e}"),
        }],
    })
}

fn from_toml(text: &str, source: &str) -> Result<raw::RawPlan, PlanErrors> {
    toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        PlanErrors {
            source: source.to_string(),
            errors: vec![PlanError {
                field: validate::field_of_toml_error(e.message()),
                line,
                message: validate::fix_for_toml_error(e.message()),
            }],
        }
    })
}

/// Most rows `plan preview` shows per scenario: a longer scenario is shown
/// in coarser buckets, so the preview of any accepted plan stays small.
pub const PREVIEW_ROWS: u64 = 600;
/// Agents `plan preview` shows one by one (the fleet column counts all).
pub const PREVIEW_AGENTS: usize = 8;

/// Expected load of one scenario, for `plan preview`: one row per bucket of
/// `bucket_secs` (1 s unless the scenario is longer than [`PREVIEW_ROWS`]
/// seconds), with the fleet's figure and the first [`PREVIEW_AGENTS`]
/// agents'.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    pub bucket_secs: u64,
    /// Per bucket: the fleet's figure and the shown agents' shares.
    pub rows: Vec<(u64, Vec<u64>)>,
}

/// Open: arrivals of the real schedule in each bucket; closed: clients
/// active at the start of each bucket. Memory is at most [`PREVIEW_ROWS`] ×
/// [`PREVIEW_AGENTS`] counts whatever the plan or `agents`.
pub fn preview(s: &Scenario, agents: usize) -> Preview {
    use loadfleet_proto::partition::Interleave;
    let seconds = (s.duration.as_secs() + u64::from(s.duration.subsec_nanos() > 0)).max(1);
    let bucket_secs = seconds.div_ceil(PREVIEW_ROWS).max(1);
    let bucket_ns = bucket_secs * 1_000_000_000;
    let rows = seconds.div_ceil(bucket_secs) as usize;
    let agents = agents.max(1);
    let shown = agents.min(PREVIEW_AGENTS);
    let Ok(interleave) = Interleave::equal(agents) else {
        return Preview {
            bucket_secs,
            rows: Vec::new(),
        };
    };
    let mut out = vec![(0u64, vec![0u64; shown]); rows];
    match &s.model {
        Model::Open(schedule) => {
            for (k, t) in schedule.arrivals().enumerate() {
                if let Some(row) = out.get_mut((t / bucket_ns) as usize) {
                    row.0 += 1;
                    if let Some(n) = row.1.get_mut(interleave.owner(k as u64)) {
                        *n += 1;
                    }
                }
            }
        }
        Model::Closed(population) => {
            for (b, row) in out.iter_mut().enumerate() {
                // Client c is active while the count is at least c + 1, so
                // floor(count) clients run; with equal shares each agent
                // owns one client of every `agents` in a row.
                let active = clients_at(&population.stages, b as u64 * bucket_ns);
                row.0 = active;
                let whole = active / agents as u64;
                for n in row.1.iter_mut() {
                    *n = whole;
                }
                for c in whole * agents as u64..active {
                    if let Some(n) = row.1.get_mut(interleave.owner(c)) {
                        *n += 1;
                    }
                }
            }
        }
    }
    Preview {
        bucket_secs,
        rows: out,
    }
}

/// Clients a closed profile runs at `t` ns after its start.
fn clients_at(stages: &[loadfleet_proto::schedule::Stage], t: u64) -> u64 {
    let mut start = 0u64;
    for st in stages {
        let end = start.saturating_add(st.duration_ns);
        if t < end {
            let into = (t - start) as f64 / st.duration_ns.max(1) as f64;
            let level = (st.from_rps + (st.to_rps - st.from_rps) * into).max(0.0);
            // As agents cut windows: while rising, a client whose level is
            // reached is on; while falling, one is off once its level is
            // reached.
            return if st.to_rps < st.from_rps {
                (level.ceil() as u64).saturating_sub(1)
            } else {
                level.floor() as u64
            };
        }
        start = end;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: &str = "[target]\nurl = \"http://127.0.0.1:8080\"\n";

    fn parse_str(text: &str) -> Result<Plan, PlanErrors> {
        parse(text, "test.toml", Path::new("."))
    }

    fn errors(text: &str) -> Vec<PlanError> {
        match parse_str(text) {
            Ok(_) => panic!("plan was accepted:\n{text}"),
            Err(e) => e.errors,
        }
    }

    #[test]
    fn every_example_plan_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                load(&path).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 6, "expected the example plans, found {n}");
    }

    /// Each malformed plan names the field (and its line where it has one)
    /// and nothing panics.
    #[test]
    fn sse_scenario_becomes_its_assignment() {
        let plan = parse_str(&format!(
            "{TARGET}[[scenario]]\nkind = \"sse\"\nrate = 100\nduration = \"10s\"\nhold = \"5s\"\nsend_time = \"data.sent_us\"\nsend_time_unit = \"us\"\nfanout_event = \"broadcast\"\nreconnect = \"250ms\"\n[[scenario.request]]\npath = \"/sse\"\n"
        ))
        .unwrap();
        let a = plan.assignments("http://127.0.0.1:8080");
        let sse = a[0].sse.as_ref().expect("an sse scenario");
        assert_eq!(sse.hold_ns, 5_000_000_000);
        assert_eq!(sse.reconnect_ns, 250_000_000);
        assert_eq!(
            (sse.send_time.as_str(), sse.send_time_unit.as_str()),
            ("sent_us", "us")
        );
        assert_eq!(sse.fanout_event, "broadcast");
        // The last subscriber arrives at 10s and holds until 15s.
        assert_eq!(a[0].duration_ns, 15_000_000_000);
        assert_eq!(
            plan.scenarios[0].sse.as_ref().unwrap().send_time_source(),
            "data.sent_us (us)"
        );
        let plain = parse_str(&format!(
            "{TARGET}[[scenario]]\nrate = 1\nduration = \"1s\"\n"
        ))
        .unwrap();
        assert!(plain.assignments("http://h:1")[0].sse.is_none());
    }

    #[test]
    fn bad_plans_name_the_field() {
        let cases: &[(&str, &str, &str)] = &[
            ("wrong type", "[[scenario]]\nrate = \"fast\"\nduration = \"1s\"\n", "invalid type"),
            ("negative rate", "[[scenario]]\nrate = -5\nduration = \"1s\"\n", "scenario[0].rate"),
            ("unknown key", "[[scenario]]\nrat = 5\nduration = \"1s\"\n", "rat"),
            ("bad duration", "[[scenario]]\nrate = 5\nduration = \"soon\"\n", "scenario[0].duration"),
            ("missing duration", "[[scenario]]\nrate = 5\n", "scenario[0].duration"),
            ("no scenario", "", "scenario"),
            (
                "overlapping stages",
                "[[scenario]]\nstages = [{ rate = 5, for = \"10s\" }, { rate = 9, for = \"5s\", at = \"5s\" }]\n",
                "scenario[0].stages[1].at",
            ),
            ("bad stage", "[[scenario]]\nstages = [{ to = 5 }]\n", "scenario[0].stages[0]"),
            ("closed with rate", "[[scenario]]\nmodel = \"closed\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].rate"),
            ("unknown model", "[[scenario]]\nmodel = \"half-open\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].model"),
            ("unknown process", "[[scenario]]\nprocess = \"bursty\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].process"),
            ("unreadable data file", "[[scenario]]\nrate = 5\nduration = \"1s\"\ndata = { file = \"/nonexistent/users.csv\" }\n", "scenario[0].data.file"),
            ("unreadable body file", "[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\nbody_file = \"/nonexistent/body.json\"\n", "scenario[0].request[0].body_file"),
            ("unknown placeholder", "[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\npath = \"/{{user}}\"\n", "scenario[0].request[0].path"),
            ("after nothing", "[[scenario]]\nafter = \"previous\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].after"),
            ("warm-up too long", "[[scenario]]\nrate = 5\nduration = \"1s\"\nwarmup = \"2s\"\n", "scenario[0].warmup"),
            ("bad threshold", "[[scenario]]\nrate = 5\nduration = \"1s\"\n", "thresholds[0]"),
            ("zero in-flight", "[[scenario]]\nrate = 5\nduration = \"1s\"\n", "target.max_in_flight"),
            ("unknown kind", "[[scenario]]\nkind = \"websocket\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].kind"),
            ("hold without sse", "[[scenario]]\nhold = \"5s\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].hold"),
            ("hold of a closed subscriber", "[[scenario]]\nkind = \"sse\"\nmodel = \"closed\"\nclients = 5\nhold = \"5s\"\nduration = \"1s\"\n", "scenario[0].hold"),
            ("send time nowhere", "[[scenario]]\nkind = \"sse\"\nsend_time = \"header.date\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].send_time"),
            ("send time unit", "[[scenario]]\nkind = \"sse\"\nsend_time = \"id\"\nsend_time_unit = \"h\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].send_time_unit"),
        ];
        for (what, body, field) in cases {
            let text = if *what == "zero in-flight" {
                format!("[target]\nurl = \"http://h:1\"\nmax_in_flight = 0\n{body}")
            } else if *what == "bad threshold" {
                format!("thresholds = [\"p98<1ms\"]\n{TARGET}{body}")
            } else {
                format!("{TARGET}{body}")
            };
            let errs = errors(&text);
            let all: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e)).collect();
            assert!(
                errs.iter()
                    .any(|e| e.field.contains(field) || e.message.contains(field)),
                "{what}: expected an error about {field:?}, got {all:?}"
            );
        }
    }

    #[test]
    fn missing_target_is_named() {
        let errs = errors("[[scenario]]\nrate = 5\nduration = \"1s\"\n");
        assert!(errs.iter().any(|e| e.field == "target"), "{errs:?}");
        let errs =
            errors("[target]\ntimeout = \"1s\"\n[[scenario]]\nrate = 5\nduration = \"1s\"\n");
        assert!(
            errs.iter()
                .any(|e| e.field == "target.url" && e.line == Some(1)),
            "{errs:?}"
        );
    }

    #[test]
    fn lines_point_at_the_mistake() {
        let errs = errors(&format!(
            "{TARGET}\n[[scenario]]\nname = \"a\"\nrate = -1\nduration = \"1s\"\n"
        ));
        assert_eq!(errs[0].line, Some(6), "{errs:?}");
    }

    #[test]
    fn shapes_resolve_to_stages() {
        let plan = parse_str(&format!(
            "{TARGET}[[scenario]]\nname = \"s\"\nsteps = {{ from = 100, to = 300, step = 100, every = \"10s\" }}\n\
             [[scenario]]\nname = \"r\"\nafter = \"s\"\nfrom = 10\nstages = [{{ to = 20, over = \"5s\" }}, {{ hold = \"5s\" }}, {{ rate = 0, for = \"2s\" }}]\n"
        ))
        .unwrap();
        let Model::Open(steps) = &plan.scenarios[0].model else {
            panic!("open")
        };
        let levels: Vec<f64> = steps.stages().iter().map(|s| s.from_rps).collect();
        assert_eq!(levels, vec![100.0, 200.0, 300.0]);
        assert_eq!(plan.scenarios[1].start, Duration::from_secs(30));
        let Model::Open(r) = &plan.scenarios[1].model else {
            panic!("open")
        };
        let shape: Vec<(f64, f64)> = r.stages().iter().map(|s| (s.from_rps, s.to_rps)).collect();
        assert_eq!(shape, vec![(10.0, 20.0), (20.0, 20.0), (0.0, 0.0)]);
        assert_eq!(plan.duration(), Duration::from_secs(42));
    }

    #[test]
    fn a_gap_before_an_absolute_stage_is_a_pause() {
        let plan = parse_str(&format!(
            "{TARGET}[[scenario]]\nstages = [{{ rate = 5, for = \"2s\" }}, {{ rate = 5, for = \"2s\", at = \"5s\" }}]\n"
        ))
        .unwrap();
        let Model::Open(s) = &plan.scenarios[0].model else {
            panic!("open")
        };
        let rates: Vec<f64> = s.stages().iter().map(|s| s.to_rps).collect();
        assert_eq!(rates, vec![5.0, 0.0, 5.0]);
    }

    #[test]
    fn urls_join_paths() {
        assert_eq!(join_url("http://h:1/", "/a"), "http://h:1/a");
        assert_eq!(join_url("http://h:1", "a"), "http://h:1/a");
        assert_eq!(join_url("http://h:1/", ""), "http://h:1/");
        assert_eq!(join_url("http://h:1/", "http://other/x"), "http://other/x");
    }

    #[test]
    fn shares_weigh_agents() {
        let mut s = Shares::default();
        s.by_label.insert("big".into(), 3);
        assert_eq!(s.weight("big", 1), 3);
        assert_eq!(s.weight("", 8), 1);
        s.by_cores = true;
        assert_eq!(s.weight("big", 8), 8);
    }

    /// The closed preview counts what the agents will run: for every
    /// bucket, the clients whose windows (as agents compute them) hold its
    /// start, split by the same interleave.
    #[test]
    fn closed_preview_matches_client_windows() {
        use loadfleet_proto::partition::Interleave;
        let plan = parse_str(&format!(
            "{TARGET}[[scenario]]\nmodel = \"closed\"\nstages = [{{ to = 25, over = \"7s\" }}, {{ hold = \"2s\" }}, {{ to = 3, over = \"4s\" }}]\n"
        ))
        .unwrap();
        let s = &plan.scenarios[0];
        let Model::Closed(population) = &s.model else {
            panic!("closed");
        };
        let agents = 3;
        let interleave = Interleave::equal(agents).unwrap();
        let p = preview(s, agents);
        assert_eq!((p.bucket_secs, p.rows.len()), (1, 13));
        for (sec, (fleet, per_agent)) in p.rows.iter().enumerate() {
            let t = sec as u64 * 1_000_000_000;
            let mut expected = vec![0u64; agents];
            for c in 0..population.max_clients() {
                let active = loadfleet_proto::closed::client_windows(&population.stages, c)
                    .iter()
                    .any(|&(lo, hi)| t >= lo && t < hi);
                if active {
                    expected[interleave.owner(c)] += 1;
                }
            }
            assert_eq!(*fleet, expected.iter().sum::<u64>(), "second {sec}");
            assert_eq!(per_agent, &expected, "second {sec}");
        }
    }

    /// However long the scenario and however many agents, the preview holds
    /// at most PREVIEW_ROWS × PREVIEW_AGENTS counts.
    #[test]
    fn preview_is_bounded() {
        let plan = parse_str(&format!(
            "{TARGET}[[scenario]]\nmodel = \"closed\"\nclients = 1000\nduration = \"30days\"\n"
        ))
        .unwrap();
        let p = preview(&plan.scenarios[0], 1000);
        assert_eq!(p.rows.len() as u64, PREVIEW_ROWS);
        assert!(p
            .rows
            .iter()
            .all(|r| r.1.len() == PREVIEW_AGENTS && r.0 == 1000));
        assert_eq!(p.bucket_secs, 30 * 24 * 3600 / PREVIEW_ROWS);
    }
}
