//! TLS for https:// targets: the system's trust store plus an optional CA
//! file, so a staging target with its own CA is tested with its real
//! certificate checks on, not with verification switched off.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// Why `--ca-cert` (or the TLS settings) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be opened or read.
    #[error("--ca-cert {}: cannot read it", .path.display())]
    Read {
        /// The flag's value.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// An entry is not a PEM certificate.
    #[error("--ca-cert {}: not a PEM certificate", .path.display())]
    NotPem {
        /// The flag's value.
        path: PathBuf,
        /// The PEM parser's complaint.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate rustls will not take as a trust anchor.
    #[error("--ca-cert {}: the certificate is not usable as a CA", .path.display())]
    NotCa {
        /// The flag's value.
        path: PathBuf,
        /// rustls's complaint.
        #[source]
        source: rustls::Error,
    },
    /// The file holds no certificate at all.
    #[error("--ca-cert {}: no certificate in the file", .path.display())]
    Empty {
        /// The flag's value.
        path: PathBuf,
    },
    /// The crypto provider supports none of the safe protocol versions.
    #[error("TLS protocol versions")]
    Versions(#[source] rustls::Error),
}

/// The client TLS settings every worker shares (HTTP/1.1 over ALPN).
pub fn client_config(ca_cert: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A malformed entry in the system store is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_cert {
        let mut added = 0;
        let certs = CertificateDer::pem_file_iter(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        for cert in certs {
            let cert = cert.map_err(|source| TlsError::NotPem {
                path: path.to_path_buf(),
                source,
            })?;
            roots.add(cert).map_err(|source| TlsError::NotCa {
                path: path.to_path_buf(),
                source,
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(TlsError::Empty {
                path: path.to_path_buf(),
            });
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?
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
            let e = client_config(Some(&path)).unwrap_err().to_string();
            assert!(e.contains("--ca-cert"), "{e}");
        }
        assert!(client_config(None).is_ok());
    }
}
