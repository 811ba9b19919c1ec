//! The plan file as written, before any check. Flags are laid over this
//! form too (see [`super::overlay`]), so a plan from a file, from flags, or
//! from both goes through the one validator.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    pub run: Option<RawRun>,
    pub target: Option<Spanned<RawTarget>>,
    pub agents: Option<RawAgents>,
    pub tls: Option<Spanned<RawTls>>,
    #[serde(default)]
    pub scenario: Vec<Spanned<RawScenario>>,
    #[serde(default)]
    pub thresholds: Vec<Spanned<String>>,
    /// Live outputs (see [`super::outputs`]).
    #[serde(default)]
    pub output: Vec<Spanned<RawOutput>>,
    /// The capacity search's settings (see [`super::search`]).
    pub search: Option<Spanned<RawSearch>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub warmup: Option<Spanned<String>>,
    pub drain: Option<Spanned<String>>,
    pub seed: Option<u64>,
    /// "continue" (default), "redistribute" or "abort".
    pub on_agent_loss: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub url: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub max_in_flight: Option<Spanned<i64>>,
    pub connections: Option<Spanned<i64>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_lag: Option<Spanned<String>>,
    pub latency_floor: Option<Spanned<String>>,
    /// The message types of gRPC requests: a descriptor set file
    /// (`protoc -o`, `buf build`) …
    pub descriptor_set: Option<Spanned<String>>,
    /// … or the target's reflection service.
    pub reflection: Option<Spanned<bool>>,
    /// "http1" (default), "h2" or "h2c".
    pub protocol: Option<Spanned<String>>,
}

/// TLS towards the target; files relative to the plan's folder.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub insecure: Option<bool>,
    pub ca_cert: Option<Spanned<String>>,
    pub client_cert: Option<Spanned<String>>,
    pub client_key: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgents {
    pub expect: Option<Spanned<i64>>,
    /// Start with this many when not all of `expect` came in time.
    pub min: Option<Spanned<i64>>,
    /// "equal" (default) or "cores".
    pub share: Option<Spanned<String>>,
    #[serde(default)]
    pub shares: BTreeMap<String, Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub name: Option<String>,
    pub model: Option<Spanned<String>>,
    pub process: Option<Spanned<String>>,
    pub seed: Option<u64>,
    pub rate: Option<Spanned<f64>>,
    /// Starting rate (or client count) for `stages`.
    pub from: Option<Spanned<f64>>,
    pub duration: Option<Spanned<String>>,
    pub start: Option<Spanned<String>>,
    pub after: Option<Spanned<String>>,
    pub warmup: Option<Spanned<String>>,
    pub stages: Option<Vec<Spanned<RawStage>>>,
    pub steps: Option<Spanned<RawSteps>>,
    pub clients: Option<Spanned<i64>>,
    pub think: Option<Spanned<String>>,
    #[serde(default)]
    pub request: Vec<Spanned<RawRequest>>,
    /// A flow's steps, run in order by every arrival (or client loop):
    /// written as requests are, with the flow-only keys.
    #[serde(default)]
    pub step: Vec<Spanned<RawRequest>>,
    /// A flow keeps a cookie jar of its own (default true).
    pub cookies: Option<Spanned<bool>>,
    pub data: Option<Spanned<RawData>>,
    /// "http" (default) or "sse": held event streams.
    pub kind: Option<Spanned<String>>,
    /// Open-model subscribers: how long each holds its stream.
    pub hold: Option<Spanned<String>>,
    /// Wait before reconnecting, until the server sends `retry:`.
    pub reconnect: Option<Spanned<String>>,
    /// "id" or "data.FIELD": where events carry the server's send time.
    pub send_time: Option<Spanned<String>>,
    /// "s", "ms" (default), "us" or "ns" since the Unix epoch.
    pub send_time_unit: Option<Spanned<String>>,
    /// Event type whose ids are tracked for the fan-out spread.
    pub fanout_event: Option<Spanned<String>>,
    /// Flags that reshape a scenario given as `stages` or `steps`; a
    /// constant scenario takes them as its own `rate`/`duration` instead.
    #[serde(skip)]
    pub reshape: Reshape,
}

impl RawScenario {
    /// Is the profile given as `stages` or `steps` (rather than one level
    /// held for `duration`)?
    pub(super) fn is_shaped(&self) -> bool {
        self.stages.is_some() || self.steps.is_some()
    }
}

/// What `--rate`/`--clients`, `--duration` and `--ramp` ask of a scenario's
/// profile once it is resolved.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Reshape {
    /// Scale the profile so that its peak is this level; the flag that
    /// asked for it.
    pub level: Option<(f64, &'static str)>,
    /// Stretch or shrink every stage so that the profile lasts this long.
    pub duration: Option<Duration>,
    /// Replace the profile's first stretch by a linear ramp from 0.
    pub ramp: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStage {
    /// Ramp linearly to this rate (or client count) …
    pub to: Option<f64>,
    /// … over this long.
    pub over: Option<String>,
    /// Keep the current rate this long.
    pub hold: Option<String>,
    /// Jump to this rate …
    pub rate: Option<f64>,
    /// … and keep it this long.
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// Absolute start of the stage within the scenario (optional).
    pub at: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSteps {
    pub from: f64,
    pub to: f64,
    pub step: f64,
    pub every: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequest {
    /// The request's row in the report; derived when not given.
    pub name: Option<Spanned<String>>,
    pub method: Option<String>,
    pub path: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
    pub body_file: Option<Spanned<String>>,
    pub weight: Option<Spanned<i64>>,
    /// A gRPC unary call to `package.Service/Method` instead of an HTTP
    /// request; it takes `message`/`message_file` and `metadata`.
    pub grpc: Option<Spanned<String>>,
    /// The request message as JSON (placeholders allowed).
    pub message: Option<String>,
    pub message_file: Option<Spanned<String>>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    // A flow's step only (`[[scenario.step]]`): one struct for both, so a
    // step takes every key a request takes, and a request given a step's
    // key is told where it belongs rather than that the key is unknown.
    /// Values taken from the answer: name → expression.
    #[serde(default)]
    pub capture: BTreeMap<String, Spanned<String>>,
    /// Check expressions the answer must pass.
    #[serde(default)]
    pub check: Vec<Spanned<String>>,
    /// Pause after the step: a duration or "A..B".
    pub think: Option<Spanned<String>>,
    /// "stop" (default) or "continue".
    pub on_failure: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawData {
    pub file: Spanned<String>,
    /// "round_robin" (default) or "random".
    pub pick: Option<Spanned<String>>,
}

/// A `[[output]]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutput {
    /// "prometheus", "influxdb" or "otlp".
    pub kind: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub queue: Option<Spanned<i64>>,
    /// "native" (default) or "classic".
    pub histograms: Option<Spanned<String>>,
    pub per_agent: Option<bool>,
    #[serde(default)]
    pub labels: BTreeMap<String, Spanned<String>>,
    pub token_file: Option<Spanned<String>>,
    pub token_env: Option<Spanned<String>>,
    pub basic_auth_file: Option<Spanned<String>>,
    pub basic_auth_env: Option<Spanned<String>>,
    /// Header values given in the plan; `@PATH` reads one from a file.
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    /// Header values read from environment variables (header → variable).
    #[serde(default)]
    pub headers_env: BTreeMap<String, Spanned<String>>,
    /// A CA certificate (PEM) for an https:// receiver.
    pub ca_file: Option<Spanned<String>>,
    /// An output given by flags: its environment variables
    /// (`LOADFLEET_OUT_TOKEN`, …) may be unset.
    #[serde(skip)]
    pub env_optional: bool,
}

/// The `[search]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearch {
    #[serde(default)]
    pub slo: Vec<Spanned<String>>,
    pub from: Option<Spanned<f64>>,
    pub to: Option<Spanned<f64>>,
    pub resolution: Option<Spanned<String>>,
    pub step: Option<Spanned<String>>,
    pub warmup: Option<Spanned<String>>,
    pub repeat: Option<Spanned<i64>>,
    /// "rate" or "clients".
    pub vary: Option<Spanned<String>>,
}
