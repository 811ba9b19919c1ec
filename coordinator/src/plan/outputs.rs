//! The plan's live outputs (`[[output]]` tables and the `--out-*` flags,
//! docs/outputs.md), checked like every other part of the plan: each
//! mistake names its field and line, or its flag. Credentials in files are
//! read here; those in environment variables are named here and read when
//! the run starts (`crate::output::config`), since `plan check` may run
//! where the run's secrets are not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use loadfleet_proto::bounds;
use toml::Spanned;

use super::check::Check;
use super::raw::RawOutput;

pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub(super) const DEFAULT_QUEUE: usize = 60;

/// A credential: shown as `<hidden>` by `Debug`, never printed.
#[derive(Clone, PartialEq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl Secret {
    pub fn new(s: String) -> Self {
        Secret(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Where a credential comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    /// Read with the plan: from a file, the URL or the plan's text.
    Given(Secret),
    /// An environment variable, read when the run starts.
    Env {
        var: String,
        /// An unset variable is a mistake (a plan's `token_env`), or means
        /// no credential (`LOADFLEET_OUT_TOKEN` under the flags).
        required: bool,
        /// The field that named it, for the message when it is unset.
        field: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Prometheus,
    Influx,
    Otlp,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Prometheus, Kind::Influx, Kind::Otlp];

    /// The word of a plan's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prometheus => "prometheus",
            Kind::Influx => "influxdb",
            Kind::Otlp => "otlp",
        }
    }

    /// The flag that gives an output of this kind.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Prometheus => "--out-prometheus",
            Kind::Influx => "--out-influxdb",
            Kind::Otlp => "--out-otlp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Histograms {
    Native,
    Classic,
}

/// One output as the plan (with the flags over it) says. Its credentials
/// are `Credential`s until the run starts, when the output module reads
/// them into `Secret`s (`OutputPlan<Secret>`): one field list for both.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputPlan<C = Credential> {
    pub kind: Kind,
    /// The URL without credentials (what messages show).
    pub url: String,
    pub timeout: Duration,
    pub queue: usize,
    pub histograms: Histograms,
    pub per_agent: bool,
    pub labels: BTreeMap<String, String>,
    pub bearer: Option<C>,
    pub basic: Option<C>,
    pub headers: Vec<(String, C)>,
    /// Extra trust anchors for an https:// receiver.
    pub ca_file: Option<PathBuf>,
}

impl<C> OutputPlan<C> {
    /// `prometheus http://host:9090/api/v1/write`: see [`label`].
    pub fn label(&self) -> String {
        label(self.kind, &self.url)
    }
}

/// An output as messages name it, without credentials or query (a v1
/// InfluxDB URL may carry a password there).
pub(crate) fn label(kind: Kind, url: &str) -> String {
    let shown = url.split('?').next().unwrap_or(url);
    format!("{} {shown}", kind.name())
}

/// The `[[output]]` tables (flag outputs among them, see
/// `super::overlay_outputs`); relative files are read from `base`.
pub(super) fn outputs(
    c: &mut Check<'_>,
    raw: &[Spanned<RawOutput>],
    base: &Path,
) -> Vec<OutputPlan> {
    if raw.len() > bounds::MAX_OUTPUTS {
        c.err(
            "output",
            raw.get(bounds::MAX_OUTPUTS).map(Spanned::span),
            format!(
                "{} live outputs asked; at most {} can run at once",
                raw.len(),
                bounds::MAX_OUTPUTS
            ),
        );
        return Vec::new();
    }
    raw.iter()
        .enumerate()
        .filter_map(|(i, o)| output(c, i, o, base))
        .collect()
}

fn output(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawOutput>,
    base: &Path,
) -> Option<OutputPlan> {
    let at = |key: &str| format!("output[{i}].{key}");
    let before = c.errors.len();
    let o = spanned.get_ref();
    let kind = match &o.kind {
        None => {
            c.err(
                at("kind"),
                Some(spanned.span()),
                "missing; give kind = \"prometheus\", \"influxdb\" or \"otlp\"",
            );
            None
        }
        Some(k) => {
            let kind = Kind::ALL
                .into_iter()
                .find(|kind| kind.name() == k.get_ref());
            if kind.is_none() {
                c.err(
                    at("kind"),
                    Some(k.span()),
                    format!(
                        "{:?} is not an output; use \"prometheus\", \"influxdb\" or \"otlp\"",
                        k.get_ref()
                    ),
                );
            }
            kind
        }
    };
    let (url, userinfo) = match &o.url {
        None => {
            c.err(at("url"), Some(spanned.span()), "missing; give the receiver's URL, e.g. url = \"http://127.0.0.1:9090/api/v1/write\"");
            (String::new(), None)
        }
        Some(u) => {
            let (url, userinfo) = split_userinfo(u.get_ref());
            if let Some(kind) = kind {
                if let Err(e) = check_url(&url, kind) {
                    c.err(at("url"), Some(u.span()), e);
                }
            }
            if url.len() > bounds::MAX_URL_BYTES {
                c.err(
                    at("url"),
                    Some(u.span()),
                    format!(
                        "the URL is {} bytes; at most {}",
                        url.len(),
                        bounds::MAX_URL_BYTES
                    ),
                );
            }
            (url, userinfo)
        }
    };
    let timeout = c
        .nonzero_duration(&at("timeout"), &o.timeout)
        .filter(|&d| {
            c.at_most(
                &at("timeout"),
                o.timeout.as_ref().map(Spanned::span),
                d,
                bounds::MAX_TIMEOUT,
            )
        })
        .unwrap_or(DEFAULT_TIMEOUT);
    let queue = c
        .positive(&at("queue"), &o.queue, bounds::MAX_OUTPUT_QUEUE as i64)
        .map_or(DEFAULT_QUEUE, |q| q as usize);
    let histograms = match &o.histograms {
        None => Histograms::Native,
        Some(h) => histograms(h.get_ref()).unwrap_or_else(|e| {
            c.err(at("histograms"), Some(h.span()), e);
            Histograms::Native
        }),
    };
    let labels = labels(c, &at("labels"), &o.labels);
    let secret = |c: &mut Check<'_>, key: &str, file: &Spanned<String>| {
        let path = base.join(file.get_ref());
        match read_secret(&path) {
            Ok(s) => Some(Credential::Given(s)),
            Err(e) => {
                c.err(
                    at(key),
                    Some(file.span()),
                    format!("{}: {e}", path.display()),
                );
                None
            }
        }
    };
    let env = |key: &str, var: &Spanned<String>| Credential::Env {
        var: var.get_ref().clone(),
        required: !o.env_optional,
        field: at(key),
    };
    let bearer = match (&o.token_file, &o.token_env) {
        (Some(file), _) => secret(c, "token_file", file),
        (None, Some(var)) => Some(env("token_env", var)),
        (None, None) => None,
    };
    let basic = match (&o.basic_auth_file, &o.basic_auth_env) {
        (Some(file), _) => secret(c, "basic_auth_file", file),
        (None, Some(var)) => Some(env("basic_auth_env", var)),
        (None, None) => userinfo.map(Credential::Given),
    };
    let mut headers = Vec::new();
    for (name, value) in &o.headers {
        let value = match value.get_ref().strip_prefix('@') {
            Some(path) => secret(
                c,
                &format!("headers.{name}"),
                &Spanned::new(value.span(), path.to_string()),
            ),
            None => Some(Credential::Given(Secret(value.get_ref().clone()))),
        };
        headers.extend(value.map(|v| (name.clone(), v)));
    }
    for (name, var) in &o.headers_env {
        headers.push((name.clone(), env(&format!("headers_env.{name}"), var)));
    }
    let too_big = headers.iter().any(|(k, v)| match v {
        Credential::Given(v) => k.len() + v.0.len() > bounds::MAX_HEADER_BYTES,
        Credential::Env { .. } => false,
    });
    if headers.len() > bounds::MAX_HEADERS || too_big {
        c.err(
            at("headers"),
            Some(spanned.span()),
            format!(
                "give at most {} headers, each at most {} bytes",
                bounds::MAX_HEADERS,
                bounds::MAX_HEADER_BYTES
            ),
        );
    }
    if c.errors.len() > before {
        return None;
    }
    Some(OutputPlan {
        kind: kind?,
        url,
        timeout,
        queue,
        histograms,
        per_agent: o.per_agent.unwrap_or(false),
        labels,
        bearer,
        basic,
        headers,
        ca_file: o.ca_file.as_ref().map(|p| base.join(p.get_ref())),
    })
}

fn labels(
    c: &mut Check<'_>,
    field: &str,
    raw: &BTreeMap<String, Spanned<String>>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for (k, v) in raw {
        if let Err(e) = check_label_name(k) {
            c.err(format!("{field}.{k}"), Some(v.span()), e);
        } else {
            labels.insert(k.clone(), v.get_ref().clone());
        }
    }
    if labels.len() > bounds::MAX_OUTPUT_LABELS
        || labels
            .iter()
            .any(|(k, v)| k.len() + v.len() > bounds::MAX_NAME_BYTES)
    {
        c.err(
            field,
            raw.values().next().map(Spanned::span),
            format!(
                "give at most {} labels, each name and value together at most {} bytes",
                bounds::MAX_OUTPUT_LABELS,
                bounds::MAX_NAME_BYTES
            ),
        );
    }
    labels
}

/// `native` or `classic` Prometheus histograms.
pub(super) fn histograms(v: &str) -> Result<Histograms, String> {
    match v {
        "native" => Ok(Histograms::Native),
        "classic" => Ok(Histograms::Classic),
        other => Err(format!("{other:?}: use \"native\" or \"classic\"")),
    }
}

/// A label every series may carry: not one of those the outputs set.
pub(super) fn check_label_name(k: &str) -> Result<(), String> {
    let ok = k
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
        && !k.is_empty()
        && !k.starts_with("__");
    if ok && !["run_id", "plan", "scenario", "repeat", "agent"].contains(&k) {
        Ok(())
    } else {
        Err(format!(
            "{k:?} cannot be a label name: use letters, digits and _, not starting with a digit or __, and none of run_id, plan, scenario, repeat, agent"
        ))
    }
}

fn check_url(url: &str, kind: Kind) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?}: not a URL ({e})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!(
            "{url:?}: give an http:// or https:// URL with a host"
        ));
    }
    let path = uri.path();
    let fine = match kind {
        Kind::Prometheus | Kind::Otlp => path.len() > 1,
        Kind::Influx => {
            (path == "/write" && uri.query().is_some_and(|q| q.contains("db=")))
                || (path == "/api/v2/write" && uri.query().is_some_and(|q| q.contains("bucket=")))
        }
    };
    if fine {
        return Ok(());
    }
    Err(match kind {
        Kind::Prometheus => format!(
            "{url:?}: give the receiver's write path, e.g. http://127.0.0.1:9090/api/v1/write"
        ),
        Kind::Otlp => format!(
            "{url:?}: give the collector's metrics path, e.g. http://127.0.0.1:4318/v1/metrics"
        ),
        Kind::Influx => format!(
            "{url:?}: give http://HOST:8086/write?db=NAME (InfluxDB 1.x) or http://HOST:8086/api/v2/write?org=ORG&bucket=BUCKET (2.x)"
        ),
    })
}

/// `http://user:pass@host/…` → the URL without them, and them as a secret.
pub(super) fn split_userinfo(url: &str) -> (String, Option<Secret>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rsplit_once('@') {
        Some((userinfo, host)) => (
            format!("{scheme}://{host}{}", &rest[host_end..]),
            Some(Secret(userinfo.to_string())),
        ),
        None => (url.to_string(), None),
    }
}

fn read_secret(path: &Path) -> Result<Secret, std::io::Error> {
    loadfleet_sys::read_secret(path, bounds::MAX_SECRET_BYTES).map(Secret)
}
