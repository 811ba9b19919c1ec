//! The one validator: a raw plan (from a file, from flags, or a file with
//! flags laid over it) becomes a [`Plan`], or every mistake in it. Defaults
//! are written here, once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use loadfleet_proto::bounds::{
    MAX_AGENTS, MAX_CONNECTIONS, MAX_DRAIN, MAX_IN_FLIGHT, MAX_LAG, MAX_NAME_BYTES, MAX_SCENARIO,
    MAX_SCENARIOS, MAX_TIMEOUT, MAX_URL_BYTES,
};
use loadfleet_proto::target::check_url;
use loadfleet_proto::vocab::HttpProtocol;
use toml::Spanned;

use super::check::{Check, PlanError, PlanErrors};
use super::raw::{RawAgents, RawPlan, RawRequest, RawScenario, RawTarget};
use super::validated::{
    join_url, GrpcSource, Model, OnAgentLoss, Plan, RequestPlan, RunSettings, Scenario, Shares,
    Target, TESTBED_URL,
};
use super::{grpc, model, requests, shape, steps, timing, tls};
use crate::thresholds::Threshold;

/// Drain when the plan gives none.
const DEFAULT_DRAIN: Duration = Duration::from_secs(5);
/// Per-request timeout when the plan gives none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-agent in-flight cap when the plan gives none.
const DEFAULT_MAX_IN_FLIGHT: u32 = 1000;
/// Keep-alive connections per agent when the plan gives none.
const DEFAULT_CONNECTIONS: u32 = 64;
/// Lateness beyond which an arrival is unsent, when the plan gives none.
const DEFAULT_MAX_LAG: Duration = Duration::from_secs(1);
/// Seed when the plan gives none.
const DEFAULT_SEED: u64 = 1;

/// What the validator is handed besides the raw plan.
pub(super) struct Input<'a> {
    /// The plan's text (empty for a plan made of flags), for line numbers.
    pub text: &'a str,
    /// Where the plan came from, for messages.
    pub source: &'a str,
    /// Folder that relative data and body files are read from.
    pub base: &'a Path,
    /// Fields set by flags, with the flag (see [`Check`]).
    pub flags: BTreeMap<String, &'static str>,
    /// Mistakes already found while reading the file and laying the flags
    /// over it.
    pub errors: Vec<PlanError>,
    /// Fields left out of the raw plan for those mistakes (see [`Check`]).
    pub dropped: Vec<String>,
    /// Thresholds given as flags, already parsed.
    pub thresholds: Vec<Threshold>,
}

pub(super) fn validate(raw: &RawPlan, input: Input<'_>) -> Result<Plan, PlanErrors> {
    let flags = input.flags.clone();
    let mut c = Check::new(input.text, input.flags, input.errors, input.dropped);
    let run = RunSettings {
        warmup: raw
            .run
            .as_ref()
            .and_then(|r| c.bounded_duration("run.warmup", &r.warmup, MAX_SCENARIO))
            .unwrap_or_default(),
        drain: raw
            .run
            .as_ref()
            .and_then(|r| c.bounded_duration("run.drain", &r.drain, MAX_DRAIN))
            .unwrap_or(DEFAULT_DRAIN),
        seed: raw
            .run
            .as_ref()
            .and_then(|r| r.seed)
            .unwrap_or(DEFAULT_SEED),
        on_agent_loss: raw
            .run
            .as_ref()
            .and_then(|r| r.on_agent_loss.as_ref())
            .and_then(|v| match v.get_ref().parse() {
                Ok(mode) => Some(mode),
                Err(e) => {
                    c.err(
                        "run.on_agent_loss",
                        Some(v.span()),
                        format!(
                            "{e}; continue keeps the others to their shares, redistribute hands the lost share to them, abort stops the run{}",
                            crate::suggest::did_you_mean(
                                v.get_ref(),
                                OnAgentLoss::ALL.map(OnAgentLoss::as_str)
                            )
                        ),
                    );
                    None
                }
            })
            .unwrap_or_default(),
    };
    let target = match &raw.target {
        None => {
            c.err("target", None, "missing; add a [target] table with url = \"http://HOST:PORT\" (or \"testbed\" for the built-in target), or give --url");
            None
        }
        Some(t) => Some(target(&mut c, t, input.base)),
    };
    let target_tls = tls::tls(&mut c, raw.tls.as_ref(), input.base);
    let shares = raw
        .agents
        .as_ref()
        .map_or_else(Shares::default, |a| shares(&mut c, a));

    let mut thresholds = Vec::new();
    for (i, t) in raw.thresholds.iter().enumerate() {
        match t.get_ref().parse::<Threshold>() {
            Ok(th) => thresholds.push(th),
            Err(e) => c.err(format!("thresholds[{i}]"), Some(t.span()), e),
        }
    }
    thresholds.extend(input.thresholds);

    if raw.scenario.is_empty() {
        c.err("scenario", None, "the plan has no [[scenario]]; add at least one, e.g. [[scenario]] rate = 100 duration = \"30s\"");
    }
    let mut scenarios: Vec<Scenario> = Vec::new();
    let base_url = target.as_ref().map_or("", |t| t.url.as_str());
    if c.at_most_entries(
        "scenario",
        raw.scenario.get(MAX_SCENARIOS).map(Spanned::span),
        raw.scenario.len(),
        MAX_SCENARIOS,
        "split the plan into several runs",
    ) {
        let shared = Shared {
            run: &run,
            warmup: timing::RunWarmup {
                value: run.warmup,
                span: raw
                    .run
                    .as_ref()
                    .and_then(|r| r.warmup.as_ref())
                    .map(Spanned::span),
            },
            base: input.base,
            base_url,
        };
        for (i, s) in raw.scenario.iter().enumerate() {
            if let Some(sc) = scenario(&mut c, i, s, &scenarios, &shared) {
                scenarios.push(sc);
            }
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
            if let Some(problem) = super::names::threshold_scope(&scenarios, name, th.figure()) {
                c.err("thresholds", None, format!("{th} {problem}"));
            }
        }
    }
    let outputs = super::outputs::outputs(&mut c, &raw.output, input.base);
    let search = super::search::search(&mut c, raw.search.as_ref());
    let mut plan = match (c.errors.is_empty(), target) {
        (true, Some(target)) => Plan {
            run,
            target,
            shares,
            scenarios,
            thresholds,
            tls: target_tls,
            outputs,
            search,
        },
        _ => {
            return Err(PlanErrors {
                source: input.source.to_string(),
                errors: c.errors,
            })
        }
    };
    // gRPC messages are checked against their types once the whole plan
    // stands; with reflection that happens when `run` has asked the target.
    let mut errors = match &plan.target.grpc_source {
        _ if !plan.has_grpc() => Vec::new(),
        None => vec![PlanError {
            field: "target".into(),
            line: None,
            message: format!(
                "the plan calls gRPC ({}) but does not say where its message types come from; add descriptor_set = \"FILE\" (from protoc --include_imports -o or buf build) or reflection = true to [target]",
                plan.grpc_methods().join(", ")
            ),
        }],
        Some(GrpcSource::DescriptorSet(_)) => {
            grpc::check_messages(&plan, &plan.target.grpc_descriptors)
        }
        Some(GrpcSource::Reflection) => Vec::new(),
    };
    // gRPC runs over HTTP/2: a plan that calls it speaks h2 (by ALPN on
    // https://, with prior knowledge on http://) unless it says otherwise.
    if plan.has_grpc() && plan.target.protocol == HttpProtocol::Http1 {
        match raw.target.as_ref().and_then(|t| t.get_ref().protocol.as_ref()) {
            None => plan.target.protocol = HttpProtocol::H2,
            Some(_) => errors.push(PlanError {
                field: "target.protocol".into(),
                line: None,
                message: "gRPC runs over HTTP/2, but the plan asks for http1; use \"h2\" or \"h2c\", or leave protocol out".into(),
            }),
        }
    }
    if errors.is_empty() {
        return Ok(plan);
    }
    // Through the checker, so a mistake in a value a flag set names the
    // flag.
    let mut c = Check::new(input.text, flags, Vec::new(), Vec::new());
    for e in errors {
        c.err(e.field, None, e.message);
    }
    Err(PlanErrors {
        source: input.source.to_string(),
        errors: c.errors,
    })
}

fn target(c: &mut Check<'_>, t: &Spanned<RawTarget>, base: &Path) -> Target {
    let span = t.span();
    let t = t.get_ref();
    let mut grpc_descriptors = Vec::new();
    let grpc_source = grpc::source(c, t, base, &mut grpc_descriptors);
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
            if let Err(e) = check_url(u.get_ref()) {
                c.err("target.url", Some(u.span()), e.to_string());
            }
            u.get_ref().clone()
        }
    };
    let max_in_flight = c
        .positive(
            "target.max_in_flight",
            &t.max_in_flight,
            i64::from(MAX_IN_FLIGHT),
        )
        .unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    let connections = c
        .positive(
            "target.connections",
            &t.connections,
            i64::from(MAX_CONNECTIONS),
        )
        .unwrap_or(DEFAULT_CONNECTIONS);
    let max_connections = max_connections(c, t, connections, max_in_flight);
    Target {
        timeout: c
            .nonzero_duration("target.timeout", &t.timeout)
            .filter(|&d| c.at_most("target.timeout", span_of(&t.timeout), d, MAX_TIMEOUT))
            .unwrap_or(DEFAULT_TIMEOUT),
        max_in_flight,
        connections,
        max_connections,
        max_lag: c
            .nonzero_duration("target.max_lag", &t.max_lag)
            .filter(|&d| c.at_most("target.max_lag", span_of(&t.max_lag), d, MAX_LAG))
            .unwrap_or(DEFAULT_MAX_LAG),
        latency_floor: c.bounded_duration("target.latency_floor", &t.latency_floor, MAX_TIMEOUT),
        grpc_source,
        grpc_descriptors,
        protocol: tls::protocol(c, &t.protocol, &url),
        url,
    }
}

fn span_of<T>(v: &Option<Spanned<T>>) -> Option<std::ops::Range<usize>> {
    v.as_ref().map(Spanned::span)
}

fn shares(c: &mut Check<'_>, a: &RawAgents) -> Shares {
    let mut shares = Shares {
        expect: c.positive("agents.expect", &a.expect, MAX_AGENTS as i64),
        min: c.positive("agents.min", &a.min, MAX_AGENTS as i64),
        ..Shares::default()
    };
    if let (Some(min), Some(expect)) = (shares.min, shares.expect) {
        if min > expect {
            c.err(
                "agents.min",
                span_of(&a.min),
                format!("{min} is more than agents.expect ({expect}); it must be at most that"),
            );
        }
    }
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
    shares
}

/// What every scenario is resolved against.
struct Shared<'a> {
    run: &'a RunSettings,
    /// `[run] warmup`, with its place in the file.
    warmup: timing::RunWarmup,
    /// Folder that relative data and body files are read from.
    base: &'a Path,
    /// The target's URL, which request paths are joined to.
    base_url: &'a str,
}

/// Resolves one scenario; `before` holds the scenarios already resolved.
fn scenario(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    before: &[Scenario],
    shared: &Shared<'_>,
) -> Option<Scenario> {
    let (run, base, base_url) = (shared.run, shared.base, shared.base_url);
    let s = spanned.get_ref();
    let errors_before = c.errors.len();
    let name = s.name.clone().unwrap_or_else(|| format!("scenario-{i}"));
    if name.len() > MAX_NAME_BYTES {
        c.err(
            format!("scenario[{i}].name"),
            Some(spanned.span()),
            format!(
                "is {} bytes long, more than {MAX_NAME_BYTES}; use a shorter name",
                name.len()
            ),
        );
    }
    let closed = model::is_closed(c, i, s);
    let sse = super::sse::sse(c, i, s, closed);
    let unit = shape::Unit::of(closed);
    let mut stages = shape::profile(c, i, spanned, unit);
    let written = shape::length(&stages);
    if c.errors.len() == errors_before && !stages.is_empty() {
        stages = shape::reshape(c, stages, &s.reshape, unit);
    }
    // How much --duration stretched the schedule, for the warm-up.
    let scale = match (written, shape::length(&stages)) {
        (0, _) | (_, 0) => 1.0,
        (before, after) => after as f64 / before as f64,
    };
    let seed = s.seed.unwrap_or(run.seed.wrapping_add(i as u64));
    let clean = c.errors.len() == errors_before;
    let modeled = model::model(c, i, spanned, stages, closed, seed, clean);
    let duration = modeled.as_ref().map_or(Duration::ZERO, |m| m.1);
    let start = timing::start(c, i, s, before);
    let warmup = timing::warmup(c, (i, &name), spanned, &shared.warmup, duration, scale);
    let data = s.data.as_ref().and_then(|d| requests::data(c, i, d, base));
    let columns = data.as_ref().map_or(&[][..], |d| &d.columns[..]);
    let flow = steps::flow(c, i, spanned, columns, base, sse.is_some());
    // A flow sends its steps; its mix stays empty rather than the default
    // GET.
    let requests = match s.step.is_empty() {
        true => requests::requests(c, i, &s.request, columns, base),
        false => Vec::new(),
    };
    let at = |kind: &str| format!("scenario[{i}].{kind}");
    urls_fit(c, &at("request"), &s.request, &requests, base_url);
    let sent: Vec<&RequestPlan> = flow.steps.iter().map(|st| &st.request).collect();
    urls_fit(c, &at("step"), &s.step, sent, base_url);
    let (model, mut duration) = modeled?;
    // An open-model subscriber that arrives last still holds for `hold`:
    // the scenario lasts that much longer than its schedule.
    if let (Some(hold), Model::Open(_)) = (sse.as_ref().and_then(|s| s.hold), &model) {
        duration += hold;
        if duration > MAX_SCENARIO {
            c.err(
                format!("scenario[{i}].hold"),
                s.hold.as_ref().map(Spanned::span),
                format!(
                    "the schedule and the last subscriber's hold last longer than {}; shorten one",
                    humantime::format_duration(MAX_SCENARIO)
                ),
            );
        }
    }
    if c.errors.len() > errors_before {
        return None;
    }
    Some(Scenario {
        name,
        start,
        duration,
        warmup,
        model,
        requests,
        steps: flow.steps,
        cookies: flow.cookies,
        data,
        seed,
        sse,
    })
}

/// Records each of `sent` (read from `raw`, at `at`) whose URL, joined to
/// the target's, is past its bound.
fn urls_fit<'r>(
    c: &mut Check<'_>,
    at: &str,
    raw: &[Spanned<RawRequest>],
    sent: impl IntoIterator<Item = &'r RequestPlan>,
    base_url: &str,
) {
    for (k, r) in sent.into_iter().enumerate() {
        let url = join_url(base_url, &r.path).len();
        if url > MAX_URL_BYTES {
            c.err(
                format!("{at}[{k}].path"),
                raw.get(k).map(Spanned::span),
                format!("joined to the target URL it is {url} bytes long, more than {MAX_URL_BYTES}; shorten it"),
            );
        }
    }
}

/// The most connections per agent: by default as many as requests may be
/// in flight, so that over HTTP/1.1 the pool never holds back an open
/// schedule; never fewer than are opened ahead.
fn max_connections(c: &mut Check, t: &RawTarget, connections: u32, max_in_flight: u32) -> u32 {
    let Some(given) = c.positive(
        "target.max_connections",
        &t.max_connections,
        i64::from(MAX_CONNECTIONS),
    ) else {
        return max_in_flight.clamp(connections, MAX_CONNECTIONS);
    };
    if given < connections {
        c.err(
            "target.max_connections",
            span_of(&t.max_connections),
            format!(
                "{given} is below target.connections ({connections}), the connections opened ahead; raise it or lower --connections"
            ),
        );
    }
    given.max(connections)
}
