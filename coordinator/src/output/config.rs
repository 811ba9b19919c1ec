//! Which outputs a run pushes to, from the `--out-*` flags and the plan's
//! `[[output]]` tables, with their credentials read from files or the
//! environment. A secret is kept only in [`Secret`], whose `Debug` hides
//! it, so it cannot reach a log or the report by accident.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use loadfleet_proto::bounds;

use crate::error::{self, Error};

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

/// A credential: shown as `<hidden>` by `Debug`, never printed.
#[derive(Clone, PartialEq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Prometheus,
    Influx,
    Otlp,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prometheus => "prometheus",
            Kind::Influx => "influxdb",
            Kind::Otlp => "otlp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Histograms {
    Native,
    Classic,
}

/// One output, ready to start.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    pub kind: Kind,
    /// The URL without credentials (what messages show).
    pub url: String,
    pub timeout: Duration,
    pub queue: usize,
    pub histograms: Histograms,
    pub per_agent: bool,
    pub labels: BTreeMap<String, String>,
    pub bearer: Option<Secret>,
    pub basic: Option<Secret>,
    pub headers: Vec<(String, Secret)>,
    /// Extra trust anchors for an https:// receiver.
    pub ca_file: Option<PathBuf>,
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_QUEUE: usize = 60;

impl OutputSpec {
    /// `prometheus http://host:9090/api/v1/write`: the output as messages
    /// name it, without credentials or query (a v1 InfluxDB URL may carry
    /// a password there).
    pub fn label(&self) -> String {
        let shown = self.url.split('?').next().unwrap_or(&self.url);
        format!("{} {shown}", self.kind.name())
    }

    /// Where to post: InfluxDB is told the stamps are milliseconds.
    pub fn push_url(&self) -> String {
        match self.kind {
            Kind::Prometheus | Kind::Otlp => self.url.clone(),
            Kind::Influx if self.url.contains('?') => format!("{}&precision=ms", self.url),
            Kind::Influx => format!("{}?precision=ms", self.url),
        }
    }

    /// The headers that carry the credentials.
    pub fn auth_headers(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(t) = &self.bearer {
            let scheme = match self.kind {
                Kind::Prometheus | Kind::Otlp => "Bearer",
                Kind::Influx => "Token",
            };
            out.push(("authorization".into(), format!("{scheme} {}", t.expose())));
        }
        if let Some(b) = &self.basic {
            out.push((
                "authorization".into(),
                format!("Basic {}", base64(b.expose().as_bytes())),
            ));
        }
        for (k, v) in &self.headers {
            out.push((k.clone(), v.expose().to_string()));
        }
        out
    }
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A plan's `[[output]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    kind: String,
    url: String,
    timeout: Option<String>,
    queue: Option<usize>,
    histograms: Option<String>,
    per_agent: Option<bool>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    basic_auth_file: Option<PathBuf>,
    basic_auth_env: Option<String>,
    /// Header values given in the plan; `@PATH` reads one from a file.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Header values read from environment variables (header → variable).
    #[serde(default)]
    headers_env: BTreeMap<String, String>,
    /// A CA certificate (PEM) for an https:// receiver.
    ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
struct RawOutputs {
    #[serde(default)]
    output: Vec<RawOutput>,
}

/// Every output of the run: the plan's `[[output]]` tables, then the
/// flags' ones. `env` reads the environment (a parameter for tests).
pub fn resolve(
    args: &OutputArgs,
    plan: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<OutputSpec>, Error> {
    let timeout = args.out_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let queue = args.out_queue.unwrap_or(DEFAULT_QUEUE);
    let histograms = histograms(args.out_histograms.as_deref(), "--out-histograms")?;
    let mut labels = BTreeMap::new();
    for l in &args.out_label {
        let (k, v) = l.split_once('=').ok_or_else(|| {
            error::flags(format!(
                "--out-label {l:?}: give KEY=VALUE, e.g. --out-label team=web"
            ))
        })?;
        check_label_name(k, "--out-label")?;
        labels.insert(k.to_string(), v.to_string());
    }
    let mut out = Vec::new();
    if let Some(path) = plan {
        let text = std::fs::read_to_string(path)
            .map_err(|e| error::flags(format!("{}: {e}", path.display())))?;
        let raw: RawOutputs = toml::from_str(&text).map_err(|e| {
            error::flags(format!("{}: [[output]]: {}", path.display(), e.message()))
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        for (i, o) in raw.output.into_iter().enumerate() {
            let at = format!("{}: [[output]] #{}", path.display(), i + 1);
            out.push(from_plan(o, &at, base, args, &labels, env)?);
        }
    }
    let flag_bearer = match &args.out_token_file {
        Some(p) => Some(read_secret(p, "--out-token-file")?),
        None => env("LOADFLEET_OUT_TOKEN").map(Secret),
    };
    let flag_basic = match &args.out_basic_auth_file {
        Some(p) => Some(read_secret(p, "--out-basic-auth-file")?),
        None => env("LOADFLEET_OUT_BASIC_AUTH").map(Secret),
    };
    let mut flag_headers = Vec::new();
    for h in &args.out_header {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            error::flags(format!(
                "--out-header: give NAME: VALUE (the header {:?} has no colon)",
                h.split(':').next().unwrap_or("")
            ))
        })?;
        flag_headers.push((
            k.trim().to_string(),
            header_value(v.trim(), Path::new("."), "--out-header")?,
        ));
    }
    let flagged = args
        .out_prometheus
        .iter()
        .map(|u| (Kind::Prometheus, u))
        .chain(args.out_influxdb.iter().map(|u| (Kind::Influx, u)))
        .chain(args.out_otlp.iter().map(|u| (Kind::Otlp, u)));
    for (kind, url) in flagged {
        let flag = format!("--out-{}", kind.name());
        let (url, userinfo) = split_userinfo(url);
        check_url(&url, kind, &flag)?;
        out.push(OutputSpec {
            kind,
            url,
            timeout,
            queue,
            histograms,
            per_agent: args.out_per_agent,
            labels: labels.clone(),
            bearer: flag_bearer.clone(),
            basic: userinfo.or_else(|| flag_basic.clone()),
            headers: flag_headers.clone(),
            ca_file: args.out_ca_file.clone(),
        });
    }
    check_bounds(&out)?;
    Ok(out)
}

/// The outputs against proto's bounds, before anything is allocated for
/// them: the plan and the flags are the user's input.
fn check_bounds(outputs: &[OutputSpec]) -> Result<(), Error> {
    if outputs.len() > bounds::MAX_OUTPUTS {
        return Err(error::flags(format!(
            "{} live outputs asked; at most {} can run at once",
            outputs.len(),
            bounds::MAX_OUTPUTS
        )));
    }
    for o in outputs {
        let what = o.label();
        if o.queue == 0 || o.queue > bounds::MAX_OUTPUT_QUEUE {
            return Err(error::flags(format!(
                "{what}: queue {} is out of range; give 1 to {} seconds (--out-queue or queue)",
                o.queue,
                bounds::MAX_OUTPUT_QUEUE
            )));
        }
        if o.timeout.is_zero() || o.timeout > bounds::MAX_TIMEOUT {
            return Err(error::flags(format!(
                "{what}: timeout {} is out of range; give more than 0 and at most {} (--out-timeout or timeout)",
                humantime::format_duration(o.timeout),
                humantime::format_duration(bounds::MAX_TIMEOUT)
            )));
        }
        if o.url.len() > bounds::MAX_URL_BYTES {
            return Err(error::flags(format!(
                "{what}: the URL is {} bytes; at most {}",
                o.url.len(),
                bounds::MAX_URL_BYTES
            )));
        }
        if o.labels.len() > bounds::MAX_OUTPUT_LABELS
            || o.labels
                .iter()
                .any(|(k, v)| k.len() + v.len() > bounds::MAX_NAME_BYTES)
        {
            return Err(error::flags(format!(
                "{what}: give at most {} labels (--out-label or labels), each name and value together at most {} bytes",
                bounds::MAX_OUTPUT_LABELS,
                bounds::MAX_NAME_BYTES
            )));
        }
        if o.headers.len() > bounds::MAX_HEADERS
            || o.headers
                .iter()
                .any(|(k, v)| k.len() + v.0.len() > bounds::MAX_HEADER_BYTES)
        {
            return Err(error::flags(format!(
                "{what}: give at most {} headers (--out-header or headers), each at most {} bytes",
                bounds::MAX_HEADERS,
                bounds::MAX_HEADER_BYTES
            )));
        }
    }
    Ok(())
}

/// The plan's `[[output]]` tables checked for `plan check`: kinds, URLs,
/// labels, settings and credential files; environment variables are taken
/// as set, since the check may run where the run's secrets are not.
pub fn check_plan(plan: &Path) -> Result<Vec<OutputSpec>, Error> {
    resolve(&OutputArgs::default(), Some(plan), &|_| Some(String::new()))
}

fn from_plan(
    o: RawOutput,
    at: &str,
    base: &Path,
    args: &OutputArgs,
    labels: &BTreeMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<OutputSpec, Error> {
    let kind = match o.kind.as_str() {
        "prometheus" => Kind::Prometheus,
        "influxdb" => Kind::Influx,
        "otlp" => Kind::Otlp,
        other => {
            return Err(error::flags(format!(
            "{at}: kind {other:?} is not an output; use \"prometheus\", \"influxdb\" or \"otlp\""
        )))
        }
    };
    let (url, userinfo) = split_userinfo(&o.url);
    check_url(&url, kind, &format!("{at}: url"))?;
    let timeout = match &o.timeout {
        Some(t) => humantime::parse_duration(t)
            .map_err(|e| error::flags(format!("{at}: timeout {t:?}: {e}")))?,
        None => args.out_timeout.unwrap_or(DEFAULT_TIMEOUT),
    };
    let from_env = |var: &Option<String>, what: &str| -> Result<Option<Secret>, Error> {
        match var {
            Some(v) => env(v)
                .map(|s| Some(Secret(s)))
                .ok_or_else(|| error::flags(format!("{at}: {what} names {v}, which is not set"))),
            None => Ok(None),
        }
    };
    let bearer = match &o.token_file {
        Some(p) => Some(read_secret(&base.join(p), &format!("{at}: token_file"))?),
        None => from_env(&o.token_env, "token_env")?,
    };
    let basic = match &o.basic_auth_file {
        Some(p) => Some(read_secret(
            &base.join(p),
            &format!("{at}: basic_auth_file"),
        )?),
        None => from_env(&o.basic_auth_env, "basic_auth_env")?.or(userinfo),
    };
    let mut headers = Vec::new();
    for (k, v) in &o.headers {
        headers.push((k.clone(), header_value(v, base, at)?));
    }
    for (k, var) in &o.headers_env {
        let v = from_env(&Some(var.clone()), "headers_env")?;
        headers.extend(v.map(|v| (k.clone(), v)));
    }
    let mut all_labels = labels.clone();
    for k in o.labels.keys() {
        check_label_name(k, at)?;
    }
    all_labels.extend(o.labels);
    Ok(OutputSpec {
        kind,
        url,
        timeout,
        queue: o.queue.or(args.out_queue).unwrap_or(DEFAULT_QUEUE),
        histograms: match &o.histograms {
            Some(h) => histograms(Some(h), &format!("{at}: histograms"))?,
            None => histograms(args.out_histograms.as_deref(), "--out-histograms")?,
        },
        per_agent: o.per_agent.unwrap_or(args.out_per_agent),
        labels: all_labels,
        bearer,
        basic,
        headers,
        ca_file: o.ca_file.map(|p| base.join(p)),
    })
}

fn histograms(v: Option<&str>, what: &str) -> Result<Histograms, Error> {
    match v {
        None | Some("native") => Ok(Histograms::Native),
        Some("classic") => Ok(Histograms::Classic),
        Some(other) => Err(error::flags(format!(
            "{what} {other:?}: use \"native\" or \"classic\""
        ))),
    }
}

fn check_label_name(k: &str, what: &str) -> Result<(), Error> {
    let ok = k
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
        && !k.is_empty()
        && !k.starts_with("__");
    if ok && !["run_id", "plan", "scenario", "repeat", "agent"].contains(&k) {
        Ok(())
    } else {
        Err(error::flags(format!(
            "{what}: {k:?} cannot be a label name: use letters, digits and _, not starting with a digit or __, and none of run_id, plan, scenario, repeat, agent"
        )))
    }
}

fn check_url(url: &str, kind: Kind, what: &str) -> Result<(), Error> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| error::flags(format!("{what} {url:?}: not a URL ({e})")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(error::flags(format!(
            "{what} {url:?}: give an http:// or https:// URL with a host"
        )));
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
    Err(error::flags(match kind {
        Kind::Prometheus => format!(
            "{what} {url:?}: give the receiver's write path, e.g. http://127.0.0.1:9090/api/v1/write"
        ),
        Kind::Otlp => format!(
            "{what} {url:?}: give the collector's metrics path, e.g. http://127.0.0.1:4318/v1/metrics"
        ),
        Kind::Influx => format!(
            "{what} {url:?}: give http://HOST:8086/write?db=NAME (InfluxDB 1.x) or http://HOST:8086/api/v2/write?org=ORG&bucket=BUCKET (2.x)"
        ),
    }))
}

/// `http://user:pass@host/…` → the URL without them, and them as a secret.
fn split_userinfo(url: &str) -> (String, Option<Secret>) {
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

fn read_secret(path: &Path, what: &str) -> Result<Secret, Error> {
    loadfleet_sys::read_secret(path, bounds::MAX_SECRET_BYTES)
        .map(Secret)
        .map_err(|e| error::flags(format!("{what} {}: {e}", path.display())))
}

fn header_value(v: &str, base: &Path, what: &str) -> Result<Secret, Error> {
    match v.strip_prefix('@') {
        Some(p) => read_secret(&base.join(p), what),
        None => Ok(Secret(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn credentials_never_show() {
        let args = OutputArgs {
            out_prometheus: vec!["http://alice:s3cret@127.0.0.1:9090/api/v1/write".into()],
            out_header: vec!["X-Scope-OrgID: tenant-9".into()],
            ..Default::default()
        };
        let env = |k: &str| (k == "LOADFLEET_OUT_TOKEN").then(|| "tok-123".to_string());
        let specs = resolve(&args, None, &env).unwrap();
        let shown = format!("{specs:?} {}", specs[0].label());
        for secret in ["s3cret", "tok-123", "tenant-9", "alice"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let headers = specs[0].auth_headers();
        assert!(headers.contains(&("authorization".into(), "Bearer tok-123".into())));
        assert!(headers.contains(&(
            "authorization".into(),
            format!("Basic {}", base64(b"alice:s3cret"))
        )));
        assert_eq!(base64(b"alice:s3cret"), "YWxpY2U6czNjcmV0");
    }

    #[test]
    fn bad_urls_and_labels_are_refused() {
        let bad = |args: OutputArgs| resolve(&args, None, &no_env).unwrap_err().to_string();
        assert!(bad(OutputArgs {
            out_influxdb: vec!["http://h:8086/".into()],
            ..Default::default()
        })
        .contains("write?db=NAME"));
        assert!(bad(OutputArgs {
            out_prometheus: vec!["ftp://h/api/v1/write".into()],
            ..Default::default()
        })
        .contains("http://"));
        assert!(bad(OutputArgs {
            out_label: vec!["scenario=x".into()],
            ..Default::default()
        })
        .contains("cannot be a label"));
    }

    #[test]
    fn outputs_beyond_the_bounds_are_refused_by_name() {
        let bad = |args: OutputArgs| resolve(&args, None, &no_env).unwrap_err().to_string();
        let url = || vec!["http://127.0.0.1:9090/api/v1/write".to_string()];
        let many = OutputArgs {
            out_prometheus: (0..=bounds::MAX_OUTPUTS)
                .map(|_| url()[0].clone())
                .collect(),
            ..Default::default()
        };
        assert!(bad(many).contains("at most 16 can run at once"));
        for queue in [0, bounds::MAX_OUTPUT_QUEUE + 1, usize::MAX] {
            let e = bad(OutputArgs {
                out_prometheus: url(),
                out_queue: Some(queue),
                ..Default::default()
            });
            assert!(e.contains("queue") && e.contains("--out-queue"), "{e}");
        }
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_timeout: Some(Duration::ZERO),
            ..Default::default()
        });
        assert!(e.contains("--out-timeout"), "{e}");
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_label: (0..=bounds::MAX_OUTPUT_LABELS)
                .map(|i| format!("l{i}=v"))
                .collect(),
            ..Default::default()
        });
        assert!(e.contains("--out-label"), "{e}");
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_header: vec![format!("X-Big: {}", "x".repeat(bounds::MAX_HEADER_BYTES))],
            ..Default::default()
        });
        assert!(e.contains("--out-header"), "{e}");
        let e = bad(OutputArgs {
            out_prometheus: vec![format!(
                "http://127.0.0.1:9090/api/v1/write?{}",
                "a".repeat(bounds::MAX_URL_BYTES)
            )],
            ..Default::default()
        });
        assert!(e.contains("the URL is"), "{e}");
        let dir = std::env::temp_dir().join(format!("loadfleet-outbig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("token");
        std::fs::write(&big, vec![b'x'; bounds::MAX_SECRET_BYTES as usize + 1]).unwrap();
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_token_file: Some(big),
            ..Default::default()
        });
        assert!(
            e.contains("--out-token-file") && e.contains("no credential"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plan_outputs_read_secrets_from_files_and_env() {
        let dir = std::env::temp_dir().join(format!("loadfleet-outcfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "file-token\n").unwrap();
        let plan = dir.join("plan.toml");
        std::fs::write(
            &plan,
            r#"
[[scenario]]
rate = 1
[[output]]
kind = "influxdb"
url = "http://127.0.0.1:8086/api/v2/write?org=o&bucket=b"
token_file = "token"
headers_env = { "X-Extra" = "EXTRA" }
labels = { team = "web" }
"#,
        )
        .unwrap();
        let env = |k: &str| (k == "EXTRA").then(|| "from-env".to_string());
        let specs = resolve(&OutputArgs::default(), Some(&plan), &env).unwrap();
        assert_eq!(specs.len(), 1);
        let h = specs[0].auth_headers();
        assert!(h.contains(&("authorization".into(), "Token file-token".into())));
        assert!(h.contains(&("X-Extra".into(), "from-env".into())));
        assert_eq!(specs[0].labels["team"], "web");
        assert!(specs[0].push_url().ends_with("&precision=ms"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
