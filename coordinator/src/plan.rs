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
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use loadfleet_proto::closed::max_clients;
use loadfleet_proto::schedule::{ArrivalSchedule, Process, Stage};
use loadfleet_proto::template::Text;
use loadfleet_proto::v1;
use serde::Deserialize;
use toml::Spanned;

use crate::thresholds::Threshold;

/// The special target URL that means "the built-in testbed" (local runs).
pub const TESTBED_URL: &str = "testbed";

/// Largest data or body file shipped to agents with the assignment.
const MAX_DATA_BYTES: u64 = 16 * 1024 * 1024;
/// Highest rate (requests/s) a stage may ask for.
pub const MAX_RATE: f64 = 10_000_000.0;
/// Most closed-model clients a stage may ask for.
pub const MAX_CLIENTS: f64 = 1_000_000.0;
/// Most arrivals one open scenario may hold (every agent walks them all).
pub const MAX_ARRIVALS: f64 = 2e9;
/// Longest scenario.
pub const MAX_SCENARIO: Duration = Duration::from_secs(30 * 24 * 3600);

/// One mistake in a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    /// Dotted path of the field, e.g. `scenario[1].rate`.
    pub field: String,
    /// 1-based line in the plan file, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

/// Every mistake found in a plan (validation goes on after the first).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanErrors {
    pub source: String,
    pub errors: Vec<PlanError>,
}

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} has {} problem(s):", self.source, self.errors.len())?;
        for e in &self.errors {
            writeln!(f, "  {}: {e}", self.source)?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanErrors {}

/// Run-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    pub warmup: Duration,
    pub drain: Duration,
    pub seed: u64,
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

#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    Open(ArrivalSchedule),
    Closed {
        clients: Vec<Stage>,
        think: Duration,
    },
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
                    Model::Closed { clients, think } => {
                        v1::scenario_assignment::Model::Closed(v1::ClosedModel {
                            stages: clients
                                .iter()
                                .map(|c| v1::Stage {
                                    duration_ns: c.duration_ns,
                                    from_rps: c.from_rps,
                                    to_rps: c.to_rps,
                                })
                                .collect(),
                            think_ns: think.as_nanos() as u64,
                        })
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
                    })
                    .collect(),
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

// ---------------------------------------------------------------------------
// The file format, as written.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    run: Option<RawRun>,
    target: Option<Spanned<RawTarget>>,
    agents: Option<RawAgents>,
    #[serde(default)]
    scenario: Vec<Spanned<RawScenario>>,
    #[serde(default)]
    thresholds: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    warmup: Option<Spanned<String>>,
    drain: Option<Spanned<String>>,
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    url: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    max_in_flight: Option<Spanned<i64>>,
    connections: Option<Spanned<i64>>,
    max_lag: Option<Spanned<String>>,
    latency_floor: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgents {
    expect: Option<Spanned<i64>>,
    /// "equal" (default) or "cores".
    share: Option<Spanned<String>>,
    #[serde(default)]
    shares: BTreeMap<String, Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    model: Option<Spanned<String>>,
    process: Option<Spanned<String>>,
    seed: Option<u64>,
    rate: Option<Spanned<f64>>,
    /// Starting rate (or client count) for `stages`.
    from: Option<Spanned<f64>>,
    duration: Option<Spanned<String>>,
    start: Option<Spanned<String>>,
    after: Option<Spanned<String>>,
    warmup: Option<Spanned<String>>,
    stages: Option<Vec<Spanned<RawStage>>>,
    steps: Option<Spanned<RawSteps>>,
    clients: Option<Spanned<i64>>,
    think: Option<Spanned<String>>,
    #[serde(default)]
    request: Vec<Spanned<RawRequest>>,
    data: Option<Spanned<RawData>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    /// Ramp linearly to this rate (or client count) …
    to: Option<f64>,
    /// … over this long.
    over: Option<String>,
    /// Keep the current rate this long.
    hold: Option<String>,
    /// Jump to this rate …
    rate: Option<f64>,
    /// … and keep it this long.
    #[serde(rename = "for")]
    for_: Option<String>,
    /// Absolute start of the stage within the scenario (optional).
    at: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSteps {
    from: f64,
    to: f64,
    step: f64,
    every: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    body_file: Option<Spanned<String>>,
    weight: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    file: Spanned<String>,
    /// "round_robin" (default) or "random".
    pick: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------

/// Collects errors with their lines.
struct Check<'a> {
    text: &'a str,
    errors: Vec<PlanError>,
}

impl Check<'_> {
    fn line_of(&self, span: std::ops::Range<usize>) -> Option<usize> {
        let end = span.start.min(self.text.len());
        Some(self.text[..end].matches('\n').count() + 1)
    }

    fn err(
        &mut self,
        field: impl Into<String>,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
    ) {
        let line = span.and_then(|s| self.line_of(s));
        self.errors.push(PlanError {
            field: field.into(),
            line,
            message: message.into(),
        });
    }

    fn duration(&mut self, field: &str, v: &Option<Spanned<String>>) -> Option<Duration> {
        let v = v.as_ref()?;
        match humantime::parse_duration(v.get_ref()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(
                    field,
                    Some(v.span()),
                    format!(
                        "{:?} is not a duration ({e}); write e.g. \"30s\", \"2m\" or \"500ms\"",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// A duration that must be above zero.
    fn nonzero_duration(&mut self, field: &str, v: &Option<Spanned<String>>) -> Option<Duration> {
        let d = self.duration(field, v)?;
        if d.is_zero() {
            self.err(
                field,
                v.as_ref().map(Spanned::span),
                "must be longer than 0s",
            );
            return None;
        }
        Some(d)
    }

    fn plain_duration(
        &mut self,
        field: &str,
        span: std::ops::Range<usize>,
        v: &str,
    ) -> Option<Duration> {
        match humantime::parse_duration(v) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(
                    field,
                    Some(span),
                    format!("{v:?} is not a duration ({e}); write e.g. \"30s\""),
                );
                None
            }
        }
    }

    fn positive(&mut self, field: &str, v: &Option<Spanned<i64>>, max: i64) -> Option<u32> {
        let v = v.as_ref()?;
        let n = *v.get_ref();
        if n < 1 || n > max {
            self.err(
                field,
                Some(v.span()),
                format!("{n} is out of range; use a whole number from 1 to {max}"),
            );
            return None;
        }
        Some(n as u32)
    }
}

/// Reads and validates a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| PlanErrors {
        source: source.clone(),
        errors: vec![PlanError {
            field: "plan".into(),
            line: None,
            message: format!("cannot read the plan file: {e}"),
        }],
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, &source, &base)
}

/// Parses and validates plan text; relative data and body files are read
/// from `base`.
pub fn parse(text: &str, source: &str, base: &Path) -> Result<Plan, PlanErrors> {
    let fail = |errors| PlanErrors {
        source: source.to_string(),
        errors,
    };
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        fail(vec![PlanError {
            field: field_of_toml_error(e.message()),
            line,
            message: fix_for_toml_error(e.message()),
        }])
    })?;
    let mut c = Check {
        text,
        errors: Vec::new(),
    };

    let run = RunSettings {
        warmup: raw
            .run
            .as_ref()
            .and_then(|r| c.duration("run.warmup", &r.warmup))
            .unwrap_or_default(),
        drain: raw
            .run
            .as_ref()
            .and_then(|r| c.duration("run.drain", &r.drain))
            .unwrap_or(Duration::from_secs(5)),
        seed: raw.run.as_ref().and_then(|r| r.seed).unwrap_or(1),
    };

    let target = match &raw.target {
        None => {
            c.err("target", None, "missing; add a [target] table with url = \"http://HOST:PORT\" (or \"testbed\" for the built-in target)");
            None
        }
        Some(t) => {
            let span = t.span();
            let t = t.get_ref();
            let url = match &t.url {
                None => {
                    c.err(
                        "target.url",
                        Some(span),
                        "missing; add url = \"http://HOST:PORT\" (or \"testbed\")",
                    );
                    String::new()
                }
                Some(u) if u.get_ref() == TESTBED_URL => TESTBED_URL.to_string(),
                Some(u) => {
                    if let Err(e) = check_base_url(u.get_ref()) {
                        c.err("target.url", Some(u.span()), e);
                    }
                    u.get_ref().clone()
                }
            };
            Some(Target {
                url,
                timeout: c
                    .nonzero_duration("target.timeout", &t.timeout)
                    .unwrap_or(Duration::from_secs(10)),
                max_in_flight: c
                    .positive("target.max_in_flight", &t.max_in_flight, 1_000_000)
                    .unwrap_or(1000),
                connections: c
                    .positive("target.connections", &t.connections, 100_000)
                    .unwrap_or(64),
                max_lag: c
                    .nonzero_duration("target.max_lag", &t.max_lag)
                    .unwrap_or(Duration::from_secs(1)),
                latency_floor: c.duration("target.latency_floor", &t.latency_floor),
            })
        }
    };

    let mut shares = Shares::default();
    if let Some(a) = &raw.agents {
        shares.expect = c.positive("agents.expect", &a.expect, 10_000);
        if let Some(s) = &a.share {
            match s.get_ref().as_str() {
                "equal" => {}
                "cores" => shares.by_cores = true,
                other => c.err(
                    "agents.share",
                    Some(s.span()),
                    format!("{other:?} is not a sharing rule; use \"equal\" or \"cores\""),
                ),
            }
        }
        for (label, w) in &a.shares {
            if let Some(w) = c.positive(&format!("agents.shares.{label}"), &Some(w.clone()), 1000) {
                shares.by_label.insert(label.clone(), w);
            }
        }
        if shares.by_cores && !shares.by_label.is_empty() {
            c.err(
                "agents.shares",
                None,
                "give either share = \"cores\" or shares by label, not both",
            );
        }
    }

    let mut thresholds = Vec::new();
    for (i, t) in raw.thresholds.iter().enumerate() {
        match t.get_ref().parse::<Threshold>() {
            Ok(th) => thresholds.push(th),
            Err(e) => c.err(format!("thresholds[{i}]"), Some(t.span()), e),
        }
    }

    if raw.scenario.is_empty() {
        c.err("scenario", None, "the plan has no [[scenario]]; add at least one, e.g. [[scenario]] rate = 100 duration = \"30s\"");
    }
    let mut scenarios: Vec<Scenario> = Vec::new();
    for (i, s) in raw.scenario.iter().enumerate() {
        if let Some(sc) = scenario(&mut c, i, s, &scenarios, &run, base) {
            scenarios.push(sc);
        }
    }
    let mut names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        c.err(
            "scenario.name",
            None,
            format!("two scenarios are named {:?}; names must be unique", w[0]),
        );
    }
    for th in &thresholds {
        if let Some(name) = th.scenario() {
            if !scenarios.iter().any(|s| s.name == name) {
                c.err(
                    "thresholds",
                    None,
                    format!("{th} names scenario {name:?}, which the plan does not have"),
                );
            }
        }
    }

    match (c.errors.is_empty(), target) {
        (true, Some(target)) => Ok(Plan {
            run,
            target,
            shares,
            scenarios,
            thresholds,
        }),
        _ => Err(fail(c.errors)),
    }
}

/// The dotted field a toml/serde message is about, for the error's head.
fn field_of_toml_error(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            return rest[..end].to_string();
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(end) = rest.find('`') {
            return rest[..end].to_string();
        }
    }
    "plan".to_string()
}

fn fix_for_toml_error(message: &str) -> String {
    let message = message.trim();
    if message.starts_with("unknown field") {
        format!("{message}; check the spelling against the README's plan reference")
    } else if message.starts_with("invalid type") {
        format!(
            "{message}; durations are quoted strings (\"30s\"), rates and counts are plain numbers"
        )
    } else {
        message.to_string()
    }
}

fn check_base_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| {
        format!("{url:?} is not a valid URL ({e}); write e.g. \"http://HOST:PORT\"")
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(s) => {
            return Err(format!(
                "scheme {s:?} is not supported; use http:// or https://"
            ))
        }
        None => return Err(format!("{url:?} has no scheme; write \"http://{url}\"")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

/// Resolves one scenario; `before` holds the scenarios already resolved.
fn scenario(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    before: &[Scenario],
    run: &RunSettings,
    base: &Path,
) -> Option<Scenario> {
    let span = spanned.span();
    let s = spanned.get_ref();
    let at = |field: &str| format!("scenario[{i}].{field}");
    let errors_before = c.errors.len();
    let name = s.name.clone().unwrap_or_else(|| format!("scenario-{i}"));
    let closed = match s.model.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("open", _)) => false,
        Some(("closed", _)) => true,
        Some((other, sp)) => {
            c.err(
                at("model"),
                Some(sp),
                format!("{other:?} is not a model; use \"open\" or \"closed\""),
            );
            false
        }
    };

    // The profile: rate (or clients) + duration, stages, or steps.
    let shapes = [
        s.stages.is_some(),
        s.steps.is_some(),
        s.rate.is_some() || s.clients.is_some(),
    ];
    if shapes.iter().filter(|&&b| b).count() > 1 {
        c.err(
            at("stages"),
            Some(span.clone()),
            "give one shape: rate/clients with duration, stages, or steps",
        );
    }
    if closed && s.rate.is_some() {
        c.err(
            at("rate"),
            s.rate.as_ref().map(Spanned::span),
            "a closed scenario has clients, not a rate; use clients = N",
        );
    }
    if !closed && s.clients.is_some() {
        c.err(
            at("clients"),
            s.clients.as_ref().map(Spanned::span),
            "clients only apply to model = \"closed\"; use rate for an open scenario",
        );
    }
    if !closed && s.think.is_some() {
        c.err(
            at("think"),
            s.think.as_ref().map(Spanned::span),
            "think time only applies to model = \"closed\"",
        );
    }
    let unit = if closed { "clients" } else { "rate" };
    let mut stages: Vec<Stage> = Vec::new();
    let ceiling = if closed { MAX_CLIENTS } else { MAX_RATE };
    let level_ok = |c: &mut Check<'_>, field: String, sp: std::ops::Range<usize>, v: f64| -> bool {
        if !v.is_finite() || v < 0.0 {
            c.err(
                field,
                Some(sp),
                format!("{unit} {v} is negative or not a number; use a {unit} >= 0 (0 pauses)"),
            );
            false
        } else if v > ceiling {
            c.err(
                field,
                Some(sp),
                format!("{unit} {v} is more than {ceiling} a single plan can drive; split it into scenarios or check the units"),
            );
            false
        } else {
            true
        }
    };
    if let Some(raw_stages) = &s.stages {
        let mut level = s.from.as_ref().map_or(0.0, |f| *f.get_ref());
        let mut elapsed = Duration::ZERO;
        if raw_stages.is_empty() {
            c.err(
                at("stages"),
                Some(span.clone()),
                "stages is empty; add e.g. { to = 100, over = \"10s\" }",
            );
        }
        for (k, st) in raw_stages.iter().enumerate() {
            let sp = st.span();
            let f = |name: &str| format!("scenario[{i}].stages[{k}].{name}");
            let st = st.get_ref();
            if let Some(at_s) = &st.at {
                if let Some(at_d) = c.plain_duration(&f("at"), sp.clone(), at_s) {
                    if at_d < elapsed {
                        c.err(
                            f("at"),
                            Some(sp.clone()),
                            format!("overlapping stages: this stage starts at {at_s} but the stages before it run until {}; move it later or shorten them", humantime::format_duration(elapsed)),
                        );
                    } else if at_d > elapsed {
                        // A gap between stages is a pause.
                        stages.push(Stage {
                            duration_ns: (at_d - elapsed).as_nanos() as u64,
                            from_rps: 0.0,
                            to_rps: 0.0,
                        });
                        level = 0.0;
                        elapsed = at_d;
                    }
                }
            }
            let kinds = [
                st.to.is_some() || st.over.is_some(),
                st.hold.is_some(),
                st.rate.is_some() || st.for_.is_some(),
            ];
            if kinds.iter().filter(|&&b| b).count() != 1 {
                c.err(
                    format!("scenario[{i}].stages[{k}]"),
                    Some(sp.clone()),
                    "a stage is one of { to = R, over = \"10s\" }, { hold = \"30s\" } or { rate = R, for = \"30s\" }",
                );
                continue;
            }
            let (from, to, dur) = if let (Some(to), Some(over)) = (st.to, &st.over) {
                (level, to, c.plain_duration(&f("over"), sp.clone(), over))
            } else if let Some(hold) = &st.hold {
                (level, level, c.plain_duration(&f("hold"), sp.clone(), hold))
            } else if let (Some(r), Some(d)) = (st.rate, &st.for_) {
                (r, r, c.plain_duration(&f("for"), sp.clone(), d))
            } else {
                c.err(
                    format!("scenario[{i}].stages[{k}]"),
                    Some(sp.clone()),
                    "incomplete stage: { to, over } and { rate, for } need both keys",
                );
                continue;
            };
            if !level_ok(
                c,
                f(if st.rate.is_some() { "rate" } else { "to" }),
                sp.clone(),
                to,
            ) {
                continue;
            }
            if let Some(d) = dur {
                if d.is_zero() {
                    c.err(
                        f("duration"),
                        Some(sp.clone()),
                        "a stage must last longer than 0s",
                    );
                    continue;
                }
                stages.push(Stage {
                    duration_ns: d.as_nanos() as u64,
                    from_rps: from,
                    to_rps: to,
                });
                elapsed = elapsed.saturating_add(d);
                level = to;
            }
        }
    } else if let Some(steps) = &s.steps {
        let sp = steps.span();
        let st = steps.get_ref();
        if let Some(every) = c.plain_duration(&at("steps.every"), sp.clone(), &st.every) {
            let ok = level_ok(c, at("steps.from"), sp.clone(), st.from)
                & level_ok(c, at("steps.to"), sp.clone(), st.to);
            if st.step <= 0.0 || !st.step.is_finite() {
                c.err(
                    at("steps.step"),
                    Some(sp.clone()),
                    "step must be above 0 (it is added until `to` is reached)",
                );
            } else if every.is_zero() {
                c.err(
                    at("steps.every"),
                    Some(sp.clone()),
                    "every must be longer than 0s",
                );
            } else if ok {
                let down = st.to < st.from;
                let mut level = st.from;
                loop {
                    stages.push(Stage {
                        duration_ns: every.as_nanos() as u64,
                        from_rps: level,
                        to_rps: level,
                    });
                    if (!down && level >= st.to)
                        || (down && level <= st.to)
                        || stages.len() > 10_000
                    {
                        break;
                    }
                    level = if down {
                        (level - st.step).max(st.to)
                    } else {
                        (level + st.step).min(st.to)
                    };
                }
            }
        }
    } else {
        let level = if closed {
            s.clients.as_ref().map(|v| (*v.get_ref() as f64, v.span()))
        } else {
            s.rate.as_ref().map(|v| (*v.get_ref(), v.span()))
        };
        let duration = c.duration(&at("duration"), &s.duration);
        match (level, duration) {
            (None, _) => c.err(
                at(unit),
                Some(span.clone()),
                format!("missing; give {unit} = N with duration, or stages, or steps"),
            ),
            (Some(_), None) if s.duration.is_none() => c.err(
                at("duration"),
                Some(span.clone()),
                "missing; add duration = \"30s\"",
            ),
            (Some((v, sp)), Some(d)) => {
                if d.is_zero() {
                    c.err(
                        at("duration"),
                        s.duration.as_ref().map(Spanned::span),
                        "must be longer than 0s",
                    );
                } else if level_ok(c, at(unit), sp, v) {
                    stages.push(Stage {
                        duration_ns: d.as_nanos() as u64,
                        from_rps: v,
                        to_rps: v,
                    });
                }
            }
            _ => {}
        }
    }
    if s.duration.is_some() && (s.stages.is_some() || s.steps.is_some()) {
        c.err(
            at("duration"),
            s.duration.as_ref().map(Spanned::span),
            "stages and steps set the length themselves; remove duration",
        );
    }

    let seed = s.seed.unwrap_or(run.seed.wrapping_add(i as u64));
    let model = if closed {
        let think = c.duration(&at("think"), &s.think).unwrap_or_default();
        if stages.iter().all(|st| st.from_rps < 1.0 && st.to_rps < 1.0)
            && c.errors.len() == errors_before
        {
            c.err(
                at("clients"),
                Some(span.clone()),
                "the scenario never has a single client; use clients >= 1",
            );
        }
        Some(Model::Closed {
            clients: stages.clone(),
            think,
        })
    } else {
        let process = match s.process.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
            None | Some(("uniform", _)) => Process::Uniform,
            Some(("poisson", _)) => Process::Poisson { seed },
            Some((other, sp)) => {
                c.err(
                    at("process"),
                    Some(sp),
                    format!("{other:?} is not an arrival process; use \"uniform\" or \"poisson\""),
                );
                Process::Uniform
            }
        };
        if stages.is_empty() {
            None
        } else {
            match ArrivalSchedule::new(stages.clone(), process) {
                Ok(schedule) => Some(Model::Open(schedule)),
                Err(e) => {
                    c.err(at("stages"), Some(span.clone()), e.to_string());
                    None
                }
            }
        }
    };
    let total_ns: u128 = stages.iter().map(|s| u128::from(s.duration_ns)).sum();
    if total_ns > MAX_SCENARIO.as_nanos() {
        c.err(
            at("duration"),
            Some(span.clone()),
            format!(
                "the scenario lasts longer than {}; shorten it",
                humantime::format_duration(MAX_SCENARIO)
            ),
        );
        return None;
    }
    let duration = Duration::from_nanos(total_ns as u64);
    if let Some(Model::Open(schedule)) = &model {
        if schedule.expected_count() > MAX_ARRIVALS {
            c.err(
                at("rate"),
                Some(span.clone()),
                format!(
                    "the scenario asks for {:.0} arrivals, more than the {MAX_ARRIVALS:.0} one scenario may hold; lower the rate or the duration",
                    schedule.expected_count()
                ),
            );
            return None;
        }
    }

    // When it starts.
    let start = match (&s.start, &s.after) {
        (Some(_), Some(a)) => {
            c.err(at("after"), Some(a.span()), "give start or after, not both");
            Duration::ZERO
        }
        (Some(_), None) => c.duration(&at("start"), &s.start).unwrap_or_default(),
        (None, Some(a)) => {
            let wanted = a.get_ref();
            let prev = if wanted == "previous" {
                before.last()
            } else {
                before.iter().find(|p| &p.name == wanted)
            };
            match prev {
                Some(p) => p.end(),
                None => {
                    c.err(
                        at("after"),
                        Some(a.span()),
                        if wanted == "previous" {
                            "there is no previous scenario; remove after or use start".to_string()
                        } else {
                            format!("no earlier scenario is named {wanted:?}; use \"previous\" or an earlier scenario's name")
                        },
                    );
                    Duration::ZERO
                }
            }
        }
        (None, None) => Duration::ZERO,
    };
    let warmup = c.duration(&at("warmup"), &s.warmup).unwrap_or(run.warmup);
    if !duration.is_zero() && warmup >= duration {
        c.err(
            at("warmup"),
            s.warmup.as_ref().map(Spanned::span).or(Some(span.clone())),
            format!(
            "warm-up ({}) is as long as the scenario ({}): nothing would be measured; shorten it",
            humantime::format_duration(warmup),
            humantime::format_duration(duration)
        ),
        );
    }

    // Data for templates.
    let data = s.data.as_ref().and_then(|d| {
        let sp = d.span();
        let d = d.get_ref();
        let random = match d.pick.as_ref().map(|p| p.get_ref().as_str()) {
            None | Some("round_robin") => false,
            Some("random") => true,
            Some(other) => {
                c.err(
                    at("data.pick"),
                    Some(sp.clone()),
                    format!("{other:?} is not a pick rule; use \"round_robin\" or \"random\""),
                );
                false
            }
        };
        match read_csv(&base.join(d.file.get_ref())) {
            Ok((columns, rows)) => Some(Data {
                columns,
                rows,
                random,
            }),
            Err(e) => {
                c.err(at("data.file"), Some(d.file.span()), e);
                None
            }
        }
    });
    let columns: Vec<String> = data.as_ref().map_or_else(Vec::new, |d| d.columns.clone());

    // Requests.
    let mut requests = Vec::new();
    if s.request.is_empty() {
        requests.push(RequestPlan {
            method: "GET".into(),
            path: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
            weight: 1,
        });
    }
    for (k, r) in s.request.iter().enumerate() {
        let sp = r.span();
        let f = |name: &str| format!("scenario[{i}].request[{k}].{name}");
        let r = r.get_ref();
        let method = r
            .method
            .clone()
            .unwrap_or_else(|| "GET".into())
            .to_uppercase();
        if http::Method::from_bytes(method.as_bytes()).is_err() {
            c.err(
                f("method"),
                Some(sp.clone()),
                format!("{method:?} is not an HTTP method"),
            );
        }
        let path = r.path.clone().unwrap_or_default();
        if let Err(e) = Text::parse(&path, &columns) {
            c.err(f("path"), Some(sp.clone()), e.to_string());
        }
        for (name, value) in &r.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                c.err(
                    f("headers"),
                    Some(sp.clone()),
                    format!("{name:?} is not a valid header name"),
                );
            }
            if let Err(e) = Text::parse(value, &columns) {
                c.err(
                    f(&format!("headers.{name}")),
                    Some(sp.clone()),
                    e.to_string(),
                );
            }
        }
        let body = match (&r.body, &r.body_file) {
            (Some(_), Some(bf)) => {
                c.err(
                    f("body_file"),
                    Some(bf.span()),
                    "give body or body_file, not both",
                );
                Vec::new()
            }
            (Some(b), None) => {
                if let Err(e) = Text::parse(b, &columns) {
                    c.err(f("body"), Some(sp.clone()), e.to_string());
                }
                b.clone().into_bytes()
            }
            (None, Some(bf)) => {
                let path: PathBuf = base.join(bf.get_ref());
                let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_DATA_BYTES);
                match std::fs::read(&path) {
                    Ok(_) if too_big => {
                        c.err(
                            f("body_file"),
                            Some(bf.span()),
                            format!(
                                "{} is larger than {MAX_DATA_BYTES} bytes; use a smaller body",
                                path.display()
                            ),
                        );
                        Vec::new()
                    }
                    Ok(bytes) => {
                        if let Ok(text) = std::str::from_utf8(&bytes) {
                            if let Err(e) = Text::parse(text, &columns) {
                                c.err(f("body_file"), Some(bf.span()), e.to_string());
                            }
                        }
                        bytes
                    }
                    Err(e) => {
                        c.err(
                            f("body_file"),
                            Some(bf.span()),
                            format!("cannot read {}: {e}", path.display()),
                        );
                        Vec::new()
                    }
                }
            }
            (None, None) => Vec::new(),
        };
        let weight = c.positive(&f("weight"), &r.weight, 10_000).unwrap_or(1);
        requests.push(RequestPlan {
            method,
            path,
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
            weight,
        });
    }

    if c.errors.len() > errors_before {
        return None;
    }
    Some(Scenario {
        name,
        start,
        duration,
        warmup,
        model: model?,
        requests,
        data,
        seed,
    })
}

/// Reads a CSV data file: a header row, then values.
fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > MAX_DATA_BYTES {
        return Err(format!(
            "{} is {} bytes, more than the {MAX_DATA_BYTES} that can be shipped to agents; use a smaller sample",
            path.display(),
            meta.len()
        ));
    }
    let mut reader =
        csv::Reader::from_path(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let columns: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{}: bad header row: {e}", path.display()))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut rows = Vec::new();
    for (n, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("{}: row {}: {e}", path.display(), n + 2))?;
        rows.push(record.iter().map(str::to_string).collect());
    }
    if rows.is_empty() {
        return Err(format!("{} has a header but no rows", path.display()));
    }
    Ok((columns, rows))
}

/// Expected load per second, for `plan preview` (open: arrivals of the real
/// schedule; closed: clients active at the start of the second).
pub fn per_second(s: &Scenario, agents: usize) -> Vec<(u64, Vec<u64>)> {
    use loadfleet_proto::partition::Interleave;
    let seconds = s.duration.as_secs_f64().ceil() as usize;
    let agents = agents.max(1);
    let Ok(interleave) = Interleave::equal(agents) else {
        return Vec::new();
    };
    let mut out = vec![(0u64, vec![0u64; agents]); seconds];
    match &s.model {
        Model::Open(schedule) => {
            for (k, t) in schedule.arrivals().enumerate() {
                let sec = (t / 1_000_000_000) as usize;
                if let Some(row) = out.get_mut(sec) {
                    row.0 += 1;
                    row.1[interleave.owner(k as u64)] += 1;
                }
            }
        }
        Model::Closed { clients, .. } => {
            let max = max_clients(clients);
            for (sec, row) in out.iter_mut().enumerate() {
                let t = sec as u64 * 1_000_000_000;
                for client in 0..max {
                    let active = loadfleet_proto::closed::client_windows(clients, client)
                        .iter()
                        .any(|&(lo, hi)| t >= lo && t < hi);
                    if active {
                        row.0 += 1;
                        row.1[interleave.owner(client)] += 1;
                    }
                }
            }
        }
    }
    out
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
}
