//! Flags as an overlay on the raw plan: `run` and `plan preview` take the
//! same flags, lay them over the plan file (or over a one-scenario plan when
//! there is no file), and the one validator checks the result. A mistake in
//! a value a flag set names the flag.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use loadfleet_proto::bounds::MAX_RATE;
use loadfleet_proto::vocab::HttpProtocol;
use toml::Spanned;

use super::check::PlanError;
use super::raw::{RawPlan, RawRequest, RawScenario, RawTarget, RawTls};
use super::timeline::Timeline;
use super::validated::{TESTBED_GRPC_MESSAGE, TESTBED_GRPC_METHOD, TESTBED_URL};
use crate::thresholds::Threshold;

/// Rate of a plan made of flags when neither --rate nor --clients is given.
const FLAGS_RATE: f64 = 500.0;
/// Length of a plan made of flags when --duration is not given.
const FLAGS_DURATION: &str = "10s";
/// Name of the scenario of a plan made of flags.
const FLAGS_SCENARIO: &str = "default";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProcessArg {
    /// Evenly spaced arrivals.
    Uniform,
    /// Poisson arrivals (seeded, reproducible).
    Poisson,
}

/// The flags that describe or override a plan.
#[derive(Debug, Clone, Default, Args)]
pub struct Overlay {
    /// Target URL. Without it (and without a plan), a local run starts the
    /// built-in testbed and aims at it.
    #[arg(long)]
    pub url: Option<String>,
    /// Fleet-wide arrival rate in requests per second (open model).
    #[arg(long, value_parser = parse_rate, conflicts_with = "clients")]
    pub rate: Option<f64>,
    /// Closed model: this many clients fleet-wide, each sending its next
    /// request when the previous one completed (plus --think).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub clients: Option<u32>,
    /// Closed model: pause between a response and the client's next request.
    #[arg(long, value_parser = humantime::parse_duration, requires = "clients")]
    pub think: Option<Duration>,
    /// Ramp from 0 to the rate (or client count) over this long, then hold
    /// for the rest of the duration.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ramp: Option<Duration>,
    /// Length of the schedule, warm-up included (e.g. 30s, 2m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Leading part of the schedule whose requests are reported apart.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub warmup: Option<Duration>,
    /// How long agents wait for in-flight requests after the schedule ends
    /// (default 5s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub drain: Option<Duration>,
    /// Arrival process (default uniform).
    #[arg(long, value_enum)]
    pub process: Option<ProcessArg>,
    /// What becomes of a lost agent's share: `continue` (default) leaves it
    /// unsent, `redistribute` hands its remaining arrivals to the others
    /// about a second after the loss is noticed, `abort` stops the run. In
    /// every mode what nobody sent is counted unsent `agent_lost`.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["continue", "redistribute", "abort"]))]
    pub on_agent_loss: Option<String>,
    /// Seed of the Poisson process and random picks (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most requests in flight at once per agent; arrivals beyond are counted
    /// unsent (`concurrency_limit`), never queued (default 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: Option<u32>,
    /// An arrival later than this behind schedule is counted unsent (`late`)
    /// (default 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_lag: Option<Duration>,
    /// Per-request timeout (default 10s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Keep-alive connections per agent opened ahead of the start, as many
    /// as its first moments need (default 64); over HTTP/1.1 more open on
    /// demand, up to --max-connections.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: Option<u32>,
    /// Most connections per agent (default: --max-in-flight, so the
    /// target sees the offered load). Set it to --connections for a fixed
    /// pool; the report's GENERATOR_POOL verdict says when it held load
    /// back.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Speak HTTP/2 to the target (plan: `[target] protocol = "h2"`):
    /// negotiated by ALPN on https://, with prior knowledge (h2c) on
    /// http://. Streams are multiplexed on --connections connections.
    #[arg(long)]
    pub http2: bool,
    /// Accept any TLS certificate the target shows (self-signed test
    /// targets; plan: `[tls] insecure = true`). The report says so.
    #[arg(long)]
    pub insecure: bool,
    /// The least latency the target can answer with (its known work); a
    /// run whose successes are far faster is flagged NO_EXPERIMENT.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub latency_floor: Option<Duration>,
    /// HTTP method (default GET).
    #[arg(long)]
    pub method: Option<String>,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long)]
    pub body: Option<String>,
    /// Call this gRPC unary method, package.Service/Method, instead of
    /// sending an HTTP request; its message types come from
    /// --descriptor-set or --reflection.
    #[arg(long, value_name = "METHOD")]
    pub grpc_method: Option<String>,
    /// The gRPC request message as JSON, with placeholders like --body
    /// (default {}).
    #[arg(long, value_name = "JSON", requires = "grpc_method")]
    pub grpc_message: Option<String>,
    /// gRPC metadata, 'key: value' (repeatable).
    #[arg(long, value_name = "KEY: VALUE", requires = "grpc_method")]
    pub metadata: Vec<String>,
    /// gRPC message types from this descriptor set file (protoc
    /// --include_imports -o FILE, buf build -o FILE).
    #[arg(long, value_name = "FILE", conflicts_with = "reflection")]
    pub descriptor_set: Option<PathBuf>,
    /// gRPC message types from the target's reflection service, asked
    /// before any load is sent.
    #[arg(long)]
    pub reflection: bool,
    /// Start the built-in testbed as a gRPC server (h2c, with reflection)
    /// and, without a plan file or --grpc-method, call its Work method.
    #[arg(long)]
    pub grpc: bool,
    /// Subscribe instead of sending requests: each arrival (or client)
    /// holds a Server-Sent Events stream on the URL (`kind = "sse"`).
    #[arg(long)]
    pub sse: bool,
    /// With --sse and --rate: how long each subscriber holds its stream
    /// (default: until the schedule ends).
    #[arg(long, value_parser = humantime::parse_duration, requires = "sse")]
    pub hold: Option<Duration>,
    /// With --sse: where events carry the server's send time, "id" or
    /// "data.FIELD" (a JSON number), for the delivery latency.
    #[arg(long, requires = "sse")]
    pub send_time: Option<String>,
    /// With --send-time: its unit since the Unix epoch, s, ms (default),
    /// us or ns.
    #[arg(long, requires = "send_time")]
    pub send_time_unit: Option<String>,
    /// Pass/fail rule checked at the end, e.g. 'p99<500ms', 'unsent==0',
    /// 'errors<1%', 'grpc.unavailable<1%', or per scenario
    /// 'checkout.p99<300ms' (repeatable). A failed one makes the exit
    /// status 1.
    #[arg(long = "threshold")]
    pub thresholds: Vec<Threshold>,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{s:?} is not a rate; write requests per second, e.g. 500"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?}: the rate must be a number above 0"));
    }
    if v > MAX_RATE {
        return Err(format!("{s:?}: the rate must be at most {MAX_RATE}"));
    }
    Ok(v)
}

/// A value a flag put into the raw plan: it has no place in the file.
pub(super) fn flag_value<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
}

fn flag_duration(d: Duration) -> Option<Spanned<String>> {
    Some(flag_value(humantime::format_duration(d).to_string()))
}

/// The raw plan that flags alone describe before they are laid over it:
/// one scenario of [`FLAGS_RATE`] for [`FLAGS_DURATION`] at the built-in
/// testbed.
pub(super) fn flags_only() -> RawPlan {
    RawPlan {
        target: Some(flag_value(RawTarget {
            url: Some(flag_value(TESTBED_URL.to_string())),
            ..RawTarget::default()
        })),
        scenario: vec![flag_value(RawScenario {
            name: Some(FLAGS_SCENARIO.to_string()),
            rate: Some(flag_value(FLAGS_RATE)),
            duration: Some(flag_value(FLAGS_DURATION.to_string())),
            ..RawScenario::default()
        })],
        ..RawPlan::default()
    }
}

/// What laying the flags over a raw plan found out: which fields the flags
/// set (so that their mistakes name the flag), and mistakes of the flags
/// themselves.
#[derive(Default)]
pub(super) struct Laid {
    pub flags: BTreeMap<String, &'static str>,
    pub errors: Vec<PlanError>,
}

impl Laid {
    pub(super) fn set(&mut self, field: impl Into<String>, flag: &'static str) {
        self.flags.insert(field.into(), flag);
    }

    pub(super) fn err(&mut self, flag: &str, message: impl Into<String>) {
        self.errors.push(PlanError {
            field: flag.to_string(),
            line: None,
            message: message.into(),
        });
    }
}

impl Overlay {
    /// The flags that shape one scenario's profile, which a plan of several
    /// cannot take: each flag with the plan keys to edit instead.
    fn per_scenario(&self) -> Vec<(&'static str, &'static str)> {
        let mut flags = Vec::new();
        if self.rate.is_some() {
            flags.push((
                "--rate",
                "`rate` (or `stages`, `steps`) in each [[scenario]]",
            ));
        }
        if self.clients.is_some() {
            flags.push((
                "--clients",
                "`clients` and `think` in each closed [[scenario]]",
            ));
        }
        if self.ramp.is_some() {
            flags.push((
                "--ramp",
                "the `stages` of each [[scenario]], e.g. stages = [{ to = 100, over = \"10s\" }, { hold = \"50s\" }]",
            ));
        }
        flags
    }

    /// Lays the flags over `raw`; `from_file` says whether `raw` was read
    /// from a plan file (or made by [`flags_only`]). `timeline` is
    /// `--duration` over a plan of several scenarios (see
    /// [`super::timeline`]).
    pub(super) fn lay_over(
        &self,
        raw: &mut RawPlan,
        from_file: bool,
        timeline: Option<&Timeline>,
    ) -> Laid {
        let mut laid = Laid::default();
        self.lay_target(raw, &mut laid);
        if self.insecure {
            raw.tls
                .get_or_insert_with(|| flag_value(RawTls::default()))
                .get_mut()
                .insecure = Some(true);
        }
        self.lay_run(raw, &mut laid);
        match raw.scenario.as_mut_slice() {
            [only] => self.lay_scenario(only.get_mut(), &mut laid),
            many => {
                let n = many.len();
                for (flag, keys) in self.per_scenario() {
                    laid.err(
                        flag,
                        format!(
                            "shapes a single scenario, but the plan has {n}; instead, edit {keys}"
                        ),
                    );
                }
                if let Some(t) = timeline {
                    t.lay(raw, |field, flag| laid.set(field, flag));
                }
            }
        }
        if self.sse {
            match raw.scenario.as_mut_slice() {
                [only] => self.lay_sse(only.get_mut(), &mut laid),
                many => laid.err(
                    "--sse",
                    format!(
                        "--sse turns a single scenario into subscriptions, but the plan has {}; set kind = \"sse\" in the plan instead",
                        many.len()
                    ),
                ),
            }
        }
        let request = self.method.is_some() || !self.headers.is_empty() || self.body.is_some();
        let grpc = self.grpc_method.is_some();
        if grpc && request {
            laid.err(
                "--grpc-method",
                "a gRPC call takes --grpc-message and --metadata, not --method/--header/--body",
            );
        }
        if (request || grpc) && from_file {
            laid.err(
                if grpc {
                    "--grpc-method/--grpc-message/--metadata"
                } else {
                    "--method/--header/--body"
                },
                "these describe the request of a plan made of flags; with a plan file, edit its [[scenario.request]]",
            );
        } else if request || grpc || (self.grpc && !from_file) {
            let request = if grpc || !request {
                self.grpc_request(&mut laid)
            } else {
                self.request(&mut laid)
            };
            for s in &mut raw.scenario {
                s.get_mut().request = vec![flag_value(request.clone())];
            }
        }
        laid
    }

    /// The gRPC call of a plan made of flags: --grpc-method, or with
    /// --grpc alone the built-in testbed's Work method.
    fn grpc_request(&self, laid: &mut Laid) -> RawRequest {
        let at = |field: &str| format!("scenario[0].request[0].{field}");
        let mut metadata = BTreeMap::new();
        for m in &self.metadata {
            match m.split_once(':') {
                Some((key, value)) => {
                    laid.set(at(&format!("metadata.{}", key.trim())), "--metadata");
                    metadata.insert(key.trim().to_string(), value.trim().to_string());
                }
                None => laid.err("--metadata", format!("{m:?}: write it as 'key: value'")),
            }
        }
        laid.set(at("metadata"), "--metadata");
        laid.set(at("grpc"), "--grpc-method");
        laid.set(at("message"), "--grpc-message");
        let (method, message) = match &self.grpc_method {
            Some(m) => (m.clone(), self.grpc_message.clone()),
            None => (
                TESTBED_GRPC_METHOD.to_string(),
                Some(TESTBED_GRPC_MESSAGE.to_string()),
            ),
        };
        RawRequest {
            grpc: Some(flag_value(method)),
            message,
            metadata,
            ..RawRequest::default()
        }
    }

    fn lay_target(&self, raw: &mut RawPlan, laid: &mut Laid) {
        if let Some(url) = &self.url {
            let t = raw
                .target
                .get_or_insert_with(|| flag_value(RawTarget::default()));
            t.get_mut().url = Some(flag_value(url.clone()));
            laid.set("target.url", "--url");
        }
        // Without a [target] (and --url) the plan is refused for that; the
        // other target flags have nothing to lay over.
        let Some(t) = raw.target.as_mut() else {
            return;
        };
        let t = t.get_mut();
        if let Some(d) = self.timeout {
            t.timeout = flag_duration(d);
            laid.set("target.timeout", "--timeout");
        }
        if let Some(n) = self.max_in_flight {
            t.max_in_flight = Some(flag_value(i64::from(n)));
            laid.set("target.max_in_flight", "--max-in-flight");
        }
        if let Some(n) = self.connections {
            t.connections = Some(flag_value(i64::from(n)));
            laid.set("target.connections", "--connections");
        }
        if let Some(n) = self.max_connections {
            t.max_connections = Some(flag_value(i64::from(n)));
            laid.set("target.max_connections", "--max-connections");
        }
        if let Some(d) = self.max_lag {
            t.max_lag = flag_duration(d);
            laid.set("target.max_lag", "--max-lag");
        }
        if let Some(d) = self.latency_floor {
            t.latency_floor = flag_duration(d);
            laid.set("target.latency_floor", "--latency-floor");
        }
        if let Some(path) = &self.descriptor_set {
            // Relative to where the command runs, not to the plan file.
            let path = std::env::current_dir()
                .map(|d| d.join(path))
                .unwrap_or_else(|_| path.clone());
            t.descriptor_set = Some(flag_value(path.display().to_string()));
            t.reflection = None;
            laid.set("target.descriptor_set", "--descriptor-set");
        }
        // --grpc aims at the testbed's service, which serves reflection.
        let testbed = t.url.as_ref().is_some_and(|u| u.get_ref() == TESTBED_URL);
        if self.reflection || (self.grpc && testbed && self.descriptor_set.is_none()) {
            t.reflection = Some(flag_value(true));
            t.descriptor_set = None;
            laid.set("target.reflection", "--reflection");
        }
        if self.grpc && !testbed {
            laid.err(
                "--grpc",
                "--grpc starts the built-in testbed as a gRPC server; for another target leave --grpc out and give --grpc-method with --descriptor-set or --reflection",
            );
        }
        if self.http2 {
            t.protocol = Some(flag_value(HttpProtocol::H2.as_str().to_string()));
            laid.set("target.protocol", "--http2");
        }
    }

    /// The reshaping flags on the plan's one scenario. A constant scenario
    /// takes the new level as its own; a shaped one (stages, steps) is
    /// scaled after it is resolved, so that it keeps its shape.
    fn lay_scenario(&self, s: &mut RawScenario, laid: &mut Laid) {
        let at = |field: &str| format!("scenario[0].{field}");
        if let Some(rate) = self.rate {
            s.model = None;
            s.clients = None;
            s.think = None;
            if s.is_shaped() {
                s.reshape.level = Some((rate, "--rate"));
            } else {
                s.rate = Some(flag_value(rate));
                laid.set(at("rate"), "--rate");
            }
        }
        if let Some(clients) = self.clients {
            s.model = Some(flag_value("closed".to_string()));
            s.rate = None;
            s.process = None;
            if s.is_shaped() {
                s.reshape.level = Some((f64::from(clients), "--clients"));
            } else {
                s.clients = Some(flag_value(i64::from(clients)));
                laid.set(at("clients"), "--clients");
            }
        }
        if let Some(think) = self.think {
            s.think = flag_duration(think);
            laid.set(at("think"), "--think");
        }
        // Stretched after it is resolved, so that the warm-up can follow.
        s.reshape.duration = self.duration;
        s.reshape.ramp = self.ramp;
    }

    /// The run-wide flags: they apply to every scenario of the plan.
    fn lay_run(&self, raw: &mut RawPlan, laid: &mut Laid) {
        if let Some(d) = self.drain {
            raw.run.get_or_insert_default().drain = flag_duration(d);
            laid.set("run.drain", "--drain");
        }
        if let Some(mode) = &self.on_agent_loss {
            raw.run.get_or_insert_default().on_agent_loss = Some(flag_value(mode.clone()));
            laid.set("run.on_agent_loss", "--on-agent-loss");
        }
        // --warmup and --seed are [run] settings that a scenario may
        // override in the file; the flag overrides them all.
        if let Some(w) = self.warmup {
            raw.run.get_or_insert_default().warmup = flag_duration(w);
            laid.set("run.warmup", "--warmup");
            for s in &mut raw.scenario {
                s.get_mut().warmup = None;
            }
        }
        if let Some(seed) = self.seed {
            raw.run.get_or_insert_default().seed = Some(seed);
            for s in &mut raw.scenario {
                s.get_mut().seed = None;
            }
        }
        // Every scenario's arrival process; a closed one has none, and
        // ignores it.
        if let Some(p) = self.process {
            let name = match p {
                ProcessArg::Uniform => "uniform",
                ProcessArg::Poisson => "poisson",
            };
            for (i, s) in raw.scenario.iter_mut().enumerate() {
                s.get_mut().process = Some(flag_value(name.to_string()));
                laid.set(format!("scenario[{i}].process"), "--process");
            }
        }
    }

    /// `--sse` and its companions on the plan's one scenario.
    fn lay_sse(&self, s: &mut RawScenario, laid: &mut Laid) {
        let at = |field: &str| format!("scenario[0].{field}");
        s.kind = Some(flag_value("sse".to_string()));
        laid.set(at("kind"), "--sse");
        if let Some(hold) = self.hold {
            s.hold = flag_duration(hold);
            laid.set(at("hold"), "--hold");
        }
        if let Some(place) = &self.send_time {
            s.send_time = Some(flag_value(place.clone()));
            laid.set(at("send_time"), "--send-time");
        }
        if let Some(unit) = &self.send_time_unit {
            s.send_time_unit = Some(flag_value(unit.clone()));
            laid.set(at("send_time_unit"), "--send-time-unit");
        }
    }

    /// The request of a plan made of flags.
    fn request(&self, laid: &mut Laid) -> RawRequest {
        let at = |field: &str| format!("scenario[0].request[0].{field}");
        let mut headers = BTreeMap::new();
        for h in &self.headers {
            match h.split_once(':') {
                Some((name, value)) => {
                    laid.set(at(&format!("headers.{}", name.trim())), "--header");
                    headers.insert(name.trim().to_string(), value.trim().to_string());
                }
                None => laid.err("--header", format!("{h:?}: write it as 'Name: value'")),
            }
        }
        laid.set(at("headers"), "--header");
        laid.set(at("method"), "--method");
        laid.set(at("body"), "--body");
        RawRequest {
            method: self.method.clone(),
            headers,
            body: self.body.clone(),
            ..RawRequest::default()
        }
    }
}

#[cfg(test)]
#[path = "overlay_tests.rs"]
mod tests;
