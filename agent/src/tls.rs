//! TLS for https:// targets: the system's trust store plus an optional CA
//! file, so a staging target with its own CA is tested with its real
//! certificate checks on, not with verification switched off.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// The client TLS settings every worker shares (HTTP/1.1 over ALPN).
pub fn client_config(ca_cert: Option<&Path>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A malformed entry in the system store is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_cert {
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path)
            .with_context(|| format!("--ca-cert {}: cannot read it", path.display()))?
        {
            let cert = cert
                .with_context(|| format!("--ca-cert {}: not a PEM certificate", path.display()))?;
            roots.add(cert).with_context(|| {
                format!(
                    "--ca-cert {}: the certificate is not usable as a CA",
                    path.display()
                )
            })?;
            added += 1;
        }
        if added == 0 {
            bail!("--ca-cert {}: no certificate in the file", path.display());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ca_files_name_the_flag() {
        let dir = std::env::temp_dir().join(format!("lf-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        for path in [dir.join("missing.pem"), empty] {
            let e = format!("{:#}", client_config(Some(&path)).unwrap_err());
            assert!(e.contains("--ca-cert"), "{e}");
        }
        assert!(client_config(None).is_ok());
    }
}
