//! The HTTP protocol (`[target] protocol`, `--http2`) and TLS towards the
//! target (`[tls]`, `--insecure`). Certificate files are read and checked
//! here, next to the plan, and shipped to agents in the assignment: an
//! agent in a Kubernetes pod or on an EC2 instance then needs no files of
//! its own, and a bad file is refused before any agent is involved.

use std::path::Path;

use loadfleet_proto::bounds::MAX_PEM_BYTES;
use loadfleet_proto::v1;
use loadfleet_proto::vocab::HttpProtocol;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;

use super::check::Check;
use super::raw::RawTls;

/// TLS towards the target, as the plan asks for it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetTls {
    /// Accept any certificate the target shows.
    pub insecure: bool,
    /// Extra CA certificates (PEM) to trust.
    pub ca_cert: Option<Vec<u8>>,
    /// Client certificate chain and key (PEM), shown to a target that asks.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TargetTls {
    /// The wire form; `None` when the plan asks for nothing special, so an
    /// assignment without TLS settings stays as it was.
    pub fn to_proto(&self) -> Option<v1::TargetTls> {
        if *self == TargetTls::default() {
            return None;
        }
        let (client_cert, client_key) = self.client.clone().unwrap_or_default();
        Some(v1::TargetTls {
            insecure: self.insecure,
            ca_cert: self.ca_cert.clone().unwrap_or_default(),
            client_cert,
            client_key,
        })
    }
}

/// The protocol `[target] protocol` names (http1 when absent). `h2c` is
/// HTTP/2 without TLS, so it cannot reach an https:// URL.
pub(super) fn protocol(c: &mut Check<'_>, v: &Option<Spanned<String>>, url: &str) -> HttpProtocol {
    let Some(v) = v else {
        return HttpProtocol::Http1;
    };
    match v.get_ref().parse::<HttpProtocol>() {
        Ok(HttpProtocol::H2c) if url.starts_with("https://") => {
            c.err(
                "target.protocol",
                Some(v.span()),
                "h2c is HTTP/2 without TLS, but the target URL is https://; use protocol = \"h2\" (HTTP/2 over TLS by ALPN)",
            );
            HttpProtocol::H2c
        }
        Ok(p) => p,
        Err(_) => {
            c.err(
                "target.protocol",
                Some(v.span()),
                format!(
                    "{:?} is not a protocol; use \"http1\" (HTTP/1.1), \"h2\" (HTTP/2, over TLS by ALPN on https://) or \"h2c\" (HTTP/2 in cleartext with prior knowledge){}",
                    v.get_ref(),
                    crate::suggest::did_you_mean(
                        v.get_ref(),
                        HttpProtocol::ALL.iter().map(|p| p.as_str())
                    )
                ),
            );
            HttpProtocol::Http1
        }
    }
}

/// The `[tls]` table: files are read relative to the plan's folder.
pub(super) fn tls(c: &mut Check<'_>, raw: Option<&Spanned<RawTls>>, base: &Path) -> TargetTls {
    let Some(raw) = raw else {
        return TargetTls::default();
    };
    let span = raw.span();
    let raw = raw.get_ref();
    let ca_cert = raw
        .ca_cert
        .as_ref()
        .and_then(|f| pem_file(c, "tls.ca_cert", f, base, Pem::Certificates));
    let client = match (&raw.client_cert, &raw.client_key) {
        (None, None) => None,
        (Some(_), None) => {
            c.err(
                "tls.client_key",
                Some(span),
                "missing; client_cert needs client_key = \"FILE.pem\" (its private key)",
            );
            None
        }
        (None, Some(_)) => {
            c.err(
                "tls.client_cert",
                Some(span),
                "missing; client_key needs client_cert = \"FILE.pem\" (the certificate it belongs to)",
            );
            None
        }
        (Some(cert), Some(key)) => {
            let cert = pem_file(c, "tls.client_cert", cert, base, Pem::Certificates);
            let key = pem_file(c, "tls.client_key", key, base, Pem::Key);
            cert.zip(key)
        }
    };
    TargetTls {
        insecure: raw.insecure.unwrap_or(false),
        ca_cert,
        client,
    }
}

/// What a PEM file must hold.
#[derive(Clone, Copy)]
enum Pem {
    /// One or more certificates.
    Certificates,
    /// A private key (PKCS#8, PKCS#1 or SEC1).
    Key,
}

/// Reads a PEM file and checks that it holds what it must, within
/// [`MAX_PEM_BYTES`]; `None` after an error (recorded).
fn pem_file(
    c: &mut Check<'_>,
    field: &str,
    file: &Spanned<String>,
    base: &Path,
    want: Pem,
) -> Option<Vec<u8>> {
    let path = base.join(file.get_ref());
    let fail = |c: &mut Check<'_>, message: String| {
        c.err(field, Some(file.span()), message);
        None
    };
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) => return fail(c, format!("cannot read {}: {e}", path.display())),
    };
    if size > MAX_PEM_BYTES as u64 {
        return fail(
            c,
            format!(
                "{} is {size} bytes, more than {MAX_PEM_BYTES}; give the PEM file itself, not a bundle",
                path.display()
            ),
        );
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return fail(c, format!("cannot read {}: {e}", path.display())),
    };
    let ok = match want {
        Pem::Certificates => {
            let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
            matches!(certs, Ok(list) if !list.is_empty())
        }
        Pem::Key => PrivateKeyDer::from_pem_slice(&bytes).is_ok(),
    };
    if !ok {
        let what = match want {
            Pem::Certificates => "a PEM certificate (-----BEGIN CERTIFICATE-----)",
            Pem::Key => "a PEM private key (-----BEGIN PRIVATE KEY-----)",
        };
        return fail(c, format!("{} holds no {what}", path.display()));
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::super::{parse, resolve, Overlay, PlanError};
    use super::*;

    fn errors(text: &str, base: &Path) -> Vec<PlanError> {
        match parse(text, "test.toml", base) {
            Ok(_) => panic!("plan was accepted:\n{text}"),
            Err(e) => e.errors,
        }
    }

    const SCENARIO: &str = "[[scenario]]\nrate = 5\nduration = \"1s\"\n";

    #[test]
    fn protocol_words_and_h2c_over_tls_are_checked() {
        let plan = |url: &str, protocol: &str| {
            format!("[target]\nurl = \"{url}\"\nprotocol = \"{protocol}\"\n{SCENARIO}")
        };
        let base = Path::new(".");
        for (url, protocol, want) in [
            ("http://h:1", "h2", HttpProtocol::H2),
            ("https://h:1", "h2", HttpProtocol::H2),
            ("http://h:1", "h2c", HttpProtocol::H2c),
            ("http://h:1", "http1", HttpProtocol::Http1),
        ] {
            let p = parse(&plan(url, protocol), "t", base).unwrap();
            assert_eq!(p.target.protocol, want);
        }
        let e = errors(&plan("http://h:1", "h3"), base);
        assert_eq!(
            (e[0].field.as_str(), e[0].line),
            ("target.protocol", Some(3))
        );
        assert!(e[0].message.contains("\"h2c\""), "{e:?}");
        let e = errors(&plan("https://h:1", "h2c"), base);
        assert!(e[0].message.contains("use protocol = \"h2\""), "{e:?}");
        // --http2 names itself when it is what went wrong.
        let flags = Overlay {
            url: Some("https://h:1".into()),
            http2: true,
            ..Overlay::default()
        };
        let p = resolve(None, &flags).unwrap();
        assert_eq!(p.target.protocol, HttpProtocol::H2);
    }

    #[test]
    fn tls_files_are_read_checked_and_shipped() {
        let dir = std::env::temp_dir().join(format!("lf-plan-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("c.pem"), cert.cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), cert.key_pair.serialize_pem()).unwrap();
        std::fs::write(dir.join("junk.pem"), "hello").unwrap();
        let target = "[target]\nurl = \"https://h:1\"\n";
        let p = parse(
            &format!("{target}[tls]\nca_cert = \"c.pem\"\nclient_cert = \"c.pem\"\nclient_key = \"k.pem\"\n{SCENARIO}"),
            "t",
            &dir,
        )
        .unwrap();
        let wire = p.tls.to_proto().unwrap();
        assert!(!wire.insecure && !wire.ca_cert.is_empty() && !wire.client_key.is_empty());
        for (tls, field) in [
            ("ca_cert = \"junk.pem\"", "tls.ca_cert"),
            ("ca_cert = \"missing.pem\"", "tls.ca_cert"),
            ("client_cert = \"c.pem\"", "tls.client_key"),
            (
                "client_cert = \"c.pem\"\nclient_key = \"c.pem\"",
                "tls.client_key",
            ),
            ("insecure = \"yes\"", "invalid type"),
        ] {
            let e = errors(&format!("{target}[tls]\n{tls}\n{SCENARIO}"), &dir);
            assert!(
                e.iter()
                    .any(|e| e.field == field || e.message.contains(field)),
                "{tls}: {e:?}"
            );
        }
        // No [tls]: nothing is shipped; --insecure alone ships the flag.
        let p = parse(&format!("{target}{SCENARIO}"), "t", &dir).unwrap();
        assert_eq!(p.tls.to_proto(), None);
        let flags = Overlay {
            url: Some("https://h:1".into()),
            insecure: true,
            ..Overlay::default()
        };
        let p = resolve(None, &flags).unwrap();
        assert!(p.tls.to_proto().is_some_and(|t| t.insecure));
    }
}
