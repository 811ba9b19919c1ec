//! The outputs a run pushes to, ready to start: the plan's outputs
//! (`[[output]]` tables and `--out-*` flags, read and checked by
//! `crate::plan`) with the credentials they name in environment variables
//! read now. A secret is kept only in [`Secret`], whose `Debug` hides it,
//! so it cannot reach a log or the report by accident.

use loadfleet_proto::bounds;

use crate::error::{self, Error};
use crate::plan::{Credential, OutputPlan};
pub(crate) use crate::plan::{Histograms, OutputKind as Kind, Secret};

/// One output, ready to start: its credentials read.
pub(crate) type OutputSpec = OutputPlan<Secret>;

impl OutputSpec {
    /// Where to post: InfluxDB is told the stamps are milliseconds.
    pub(crate) fn push_url(&self) -> String {
        match self.kind {
            Kind::Prometheus | Kind::Otlp => self.url.clone(),
            Kind::Influx if self.url.contains('?') => format!("{}&precision=ms", self.url),
            Kind::Influx => format!("{}?precision=ms", self.url),
        }
    }

    /// The headers that carry the credentials.
    pub(crate) fn auth_headers(&self) -> Vec<(String, String)> {
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

/// The outputs with every credential read: those the plan names in
/// environment variables are read from `env` (a parameter for tests).
pub(crate) fn specs(
    outputs: &[OutputPlan],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<OutputSpec>, Error> {
    let read = |c: &Option<Credential>| -> Result<Option<Secret>, Error> {
        match c {
            None => Ok(None),
            Some(Credential::Given(s)) => Ok(Some(s.clone())),
            Some(Credential::Env {
                var,
                required,
                field,
            }) => match env(var) {
                Some(v) => Ok(Some(Secret::new(v))),
                None if *required => Err(error::flags(format!(
                    "{field} names {var}, which is not set; set it, or take the credential from a file"
                ))),
                None => Ok(None),
            },
        }
    };
    let mut specs = Vec::new();
    for o in outputs {
        let mut headers = Vec::new();
        for (name, value) in &o.headers {
            if let Some(v) = read(&Some(value.clone()))? {
                if name.len() + v.expose().len() > bounds::MAX_HEADER_BYTES {
                    return Err(error::flags(format!(
                        "{}: the header {name} is over {} bytes",
                        o.label(),
                        bounds::MAX_HEADER_BYTES
                    )));
                }
                headers.push((name.clone(), v));
            }
        }
        specs.push(OutputSpec {
            kind: o.kind,
            url: o.url.clone(),
            timeout: o.timeout,
            queue: o.queue,
            histograms: o.histograms,
            per_agent: o.per_agent,
            labels: o.labels.clone(),
            bearer: read(&o.bearer)?,
            basic: read(&o.basic)?,
            headers,
            ca_file: o.ca_file.clone(),
        });
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{self, Flags, OutputArgs};
    use std::path::Path;
    use std::time::Duration;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// The outputs of a plan made of flags, or every mistake in them.
    fn resolve(
        args: &OutputArgs,
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<OutputSpec>, Error> {
        let flags = Flags {
            outputs: args.clone(),
            ..Flags::default()
        };
        specs(&plan::resolve_all(file, &flags)?.outputs, env)
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
            assert!(
                e.contains("--out-queue: ") && e.contains("out of range"),
                "{e}"
            );
        }
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_timeout: Some(Duration::ZERO),
            ..Default::default()
        });
        assert!(e.contains("--out-timeout: "), "{e}");
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_label: (0..=bounds::MAX_OUTPUT_LABELS)
                .map(|i| format!("l{i}=v"))
                .collect(),
            ..Default::default()
        });
        assert!(e.contains("--out-label: "), "{e}");
        let e = bad(OutputArgs {
            out_prometheus: url(),
            out_header: vec![format!("X-Big: {}", "x".repeat(bounds::MAX_HEADER_BYTES))],
            ..Default::default()
        });
        assert!(e.contains("--out-header: "), "{e}");
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
            e.contains("--out-token-file: ") && e.contains("no credential"),
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
[target]
url = "testbed"
[[scenario]]
rate = 1
duration = "1s"
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
        let e = resolve(&OutputArgs::default(), Some(&plan), &no_env).unwrap_err();
        assert!(
            e.to_string()
                .contains("output[0].headers_env.X-Extra names EXTRA, which is not set"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
