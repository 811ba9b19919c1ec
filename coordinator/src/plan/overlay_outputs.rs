//! The `--out-*` flags as an overlay on the plan's `[[output]]` tables:
//! each flag-given output becomes one more table, and the settings flags
//! fill in what a table leaves out. The one validator
//! ([`super::outputs`]) then checks them all; a mistake in a value a flag
//! set names the flag.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::outputs::{check_label_name, histograms, split_userinfo, Kind};
use super::overlay::{flag_value, Laid};
use super::raw::{RawOutput, RawPlan};

/// The `run` flags of the live outputs (docs/outputs.md).
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Push each settled second to a Prometheus remote-write receiver
    /// (remote write 1.0: protobuf + snappy), e.g.
    /// http://127.0.0.1:9090/api/v1/write. May be given more than once.
    #[arg(long, value_name = "URL")]
    pub out_prometheus: Vec<String>,
    /// Push each settled second to InfluxDB as line protocol: a v1 URL
    /// (http://HOST:8086/write?db=NAME) or a v2 one
    /// (http://HOST:8086/api/v2/write?org=ORG&bucket=BUCKET).
    #[arg(long, value_name = "URL")]
    pub out_influxdb: Vec<String>,
    /// Push each settled second as OpenTelemetry metrics over OTLP/HTTP
    /// (protobuf), e.g. http://127.0.0.1:4318/v1/metrics.
    #[arg(long, value_name = "URL")]
    pub out_otlp: Vec<String>,
    /// How long one push may take before it is retried (three tries in
    /// all), and how long the coordinator waits at its end for the last
    /// pushes.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub out_timeout: Option<Duration>,
    /// Seconds an output may have waiting; past that the oldest is dropped
    /// and counted as lost.
    #[arg(long, value_name = "N")]
    pub out_queue: Option<usize>,
    /// Latency histograms for Prometheus: `native` (default) or `classic`
    /// (`_bucket` series with `le`), for receivers without native ones.
    #[arg(long, value_name = "KIND")]
    pub out_histograms: Option<String>,
    /// A label on every series (KEY=VALUE), e.g. `--out-label team=web`.
    #[arg(long, value_name = "KEY=VALUE")]
    pub out_label: Vec<String>,
    /// Also push per-agent series (sent, completed, CPU, lag) with an
    /// `agent` label.
    #[arg(long)]
    pub out_per_agent: bool,
    /// The `run_id` label (default: the --out folder's name).
    #[arg(long, value_name = "ID")]
    pub out_run_id: Option<String>,
    /// A file holding the bearer token of the flag-given outputs (sent as
    /// `Authorization: Bearer`, or `Token` to InfluxDB). Also read from
    /// LOADFLEET_OUT_TOKEN.
    #[arg(long, value_name = "PATH")]
    pub out_token_file: Option<PathBuf>,
    /// A file holding `user:password` for basic auth of the flag-given
    /// outputs. Also read from LOADFLEET_OUT_BASIC_AUTH.
    #[arg(long, value_name = "PATH")]
    pub out_basic_auth_file: Option<PathBuf>,
    /// A header on every push of the flag-given outputs, `NAME: VALUE`;
    /// `NAME: @PATH` reads the value from a file.
    #[arg(long, value_name = "HEADER")]
    pub out_header: Vec<String>,
    /// A CA certificate (PEM) that https:// receivers of the flag-given
    /// outputs may be signed by, besides the system's trust store.
    #[arg(long, value_name = "PATH")]
    pub out_ca_file: Option<PathBuf>,
}

/// A path given as a flag, read from the working folder (the plan's own
/// paths are read from the plan's folder).
fn from_here(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

impl OutputArgs {
    /// Lays the flags over the plan's `[[output]]` tables, then adds one
    /// table per flag-given output.
    pub(super) fn lay_over(&self, raw: &mut RawPlan, laid: &mut Laid) {
        let labels = self.labels(laid);
        if let Some(Err(e)) = self.out_histograms.as_deref().map(histograms) {
            laid.err("--out-histograms", e);
        }
        let settings = RawOutput {
            timeout: self
                .out_timeout
                .map(|d| flag_value(humantime::format_duration(d).to_string())),
            queue: self
                .out_queue
                .map(|q| flag_value(i64::try_from(q).unwrap_or(i64::MAX))),
            histograms: self
                .out_histograms
                .clone()
                .filter(|h| histograms(h).is_ok())
                .map(flag_value),
            per_agent: self.out_per_agent.then_some(true),
            ..RawOutput::default()
        };
        for (i, o) in raw.output.iter_mut().enumerate() {
            fill(
                o.get_mut(),
                &settings,
                &labels,
                &format!("output[{i}]"),
                laid,
            );
        }
        let flagged = Kind::ALL.into_iter().flat_map(|kind| {
            let urls = match kind {
                Kind::Prometheus => &self.out_prometheus,
                Kind::Influx => &self.out_influxdb,
                Kind::Otlp => &self.out_otlp,
            };
            urls.iter().map(move |u| (kind, u))
        });
        for (kind, url) in flagged {
            let at = format!("output[{}]", raw.output.len());
            let mut o = self.output(kind, url, &at, laid);
            fill(&mut o, &settings, &labels, &at, laid);
            raw.output.push(flag_value(o));
        }
    }

    /// The `--out-label` pairs; a bad one is named even when no output is
    /// given.
    fn labels(&self, laid: &mut Laid) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        for l in &self.out_label {
            let Some((k, v)) = l.split_once('=') else {
                laid.err(
                    "--out-label",
                    format!("{l:?}: give KEY=VALUE, e.g. --out-label team=web"),
                );
                continue;
            };
            match check_label_name(k) {
                Ok(()) => {
                    labels.insert(k.to_string(), v.to_string());
                }
                Err(e) => laid.err("--out-label", e),
            }
        }
        labels
    }

    /// One flag-given output, with the flags' credentials.
    fn output(&self, kind: Kind, url: &str, at: &str, laid: &mut Laid) -> RawOutput {
        laid.set(format!("{at}.kind"), kind.flag());
        laid.set(format!("{at}.url"), kind.flag());
        let mut o = RawOutput {
            kind: Some(flag_value(kind.name().to_string())),
            url: Some(flag_value(url.to_string())),
            env_optional: true,
            ..RawOutput::default()
        };
        match &self.out_token_file {
            Some(p) => {
                o.token_file = Some(flag_value(from_here(p)));
                laid.set(format!("{at}.token_file"), "--out-token-file");
            }
            None => o.token_env = Some(flag_value("LOADFLEET_OUT_TOKEN".to_string())),
        }
        // Credentials in the URL come before the flags'.
        if split_userinfo(url).1.is_none() {
            match &self.out_basic_auth_file {
                Some(p) => {
                    o.basic_auth_file = Some(flag_value(from_here(p)));
                    laid.set(format!("{at}.basic_auth_file"), "--out-basic-auth-file");
                }
                None => o.basic_auth_env = Some(flag_value("LOADFLEET_OUT_BASIC_AUTH".to_string())),
            }
        }
        for h in &self.out_header {
            let Some((k, v)) = h.split_once(':') else {
                laid.err(
                    "--out-header",
                    format!(
                        "give NAME: VALUE (the header {:?} has no colon)",
                        h.split(':').next().unwrap_or("")
                    ),
                );
                continue;
            };
            let (k, v) = (k.trim().to_string(), v.trim());
            let v = match v.strip_prefix('@') {
                Some(p) => format!("@{}", from_here(Path::new(p))),
                None => v.to_string(),
            };
            laid.set(format!("{at}.headers.{k}"), "--out-header");
            o.headers.insert(k, flag_value(v));
        }
        laid.set(format!("{at}.headers"), "--out-header");
        laid.set(format!("{at}.labels"), "--out-label");
        if let Some(p) = &self.out_ca_file {
            o.ca_file = Some(flag_value(from_here(p)));
        }
        o
    }
}

/// What `o` leaves out, from the settings flags and `--out-label`.
fn fill(
    o: &mut RawOutput,
    settings: &RawOutput,
    labels: &BTreeMap<String, String>,
    at: &str,
    laid: &mut Laid,
) {
    if o.timeout.is_none() && settings.timeout.is_some() {
        o.timeout.clone_from(&settings.timeout);
        laid.set(format!("{at}.timeout"), "--out-timeout");
    }
    if o.queue.is_none() && settings.queue.is_some() {
        o.queue.clone_from(&settings.queue);
        laid.set(format!("{at}.queue"), "--out-queue");
    }
    if o.histograms.is_none() && settings.histograms.is_some() {
        o.histograms.clone_from(&settings.histograms);
        laid.set(format!("{at}.histograms"), "--out-histograms");
    }
    o.per_agent = o.per_agent.or(settings.per_agent);
    for (k, v) in labels {
        if !o.labels.contains_key(k) {
            o.labels.insert(k.clone(), flag_value(v.clone()));
            laid.set(format!("{at}.labels.{k}"), "--out-label");
        }
    }
}
