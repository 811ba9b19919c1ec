//! TLS for https:// targets: the system's trust store plus an optional CA
//! file, so a staging target with its own CA is tested with its real
//! certificate checks on, not with verification switched off. A plan may
//! add CAs and a client certificate, or switch checks off for a
//! self-signed test target (`[tls]`, `--insecure`); those come in the
//! assignment ([`target_config`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why `--ca-cert` (or the TLS settings) cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
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
}

/// The trust anchors for https:// targets: the system's store and
/// `--ca-cert`, kept apart from a client config so each assignment can add
/// the plan's own CAs to them.
///
/// `--ca-cert` is read and checked at start, so a bad flag stops the agent
/// at once. The system's store is read the first time an assignment needs
/// it: it is a file per CA to read and decode, over five times the
/// instructions of all the rest of the agent's start (19 of 22.5 million
/// under callgrind), which a run against plain http:// targets never needs.
#[derive(Debug)]
pub(crate) struct TargetRoots {
    /// `--ca-cert`'s anchors, checked.
    flag: rustls::RootCertStore,
    /// The system's anchors and the flag's, once read.
    all: OnceLock<Arc<rustls::RootCertStore>>,
}

impl TargetRoots {
    /// Reads and checks `--ca-cert`; the system's store is left for later.
    pub(crate) fn new(ca_cert: Option<&Path>) -> Result<Self, TlsError> {
        let mut flag = rustls::RootCertStore::empty();
        if let Some(path) = ca_cert {
            let certs = CertificateDer::pem_file_iter(path).map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            for cert in certs {
                let cert = cert.map_err(|source| TlsError::NotPem {
                    path: path.to_path_buf(),
                    source,
                })?;
                flag.add(cert).map_err(|source| TlsError::NotCa {
                    path: path.to_path_buf(),
                    source,
                })?;
            }
            if flag.is_empty() {
                return Err(TlsError::Empty {
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(Self {
            flag,
            all: OnceLock::new(),
        })
    }

    /// Every anchor: the system's store (read now if it was not yet) and
    /// `--ca-cert`'s.
    pub(crate) fn all(&self) -> Arc<rustls::RootCertStore> {
        self.all
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_native_certs::load_native_certs().certs {
                    // A malformed entry in the system store is skipped, as
                    // browsers do.
                    let _ = roots.add(cert);
                }
                roots.extend(self.flag.roots.iter().cloned());
                Arc::new(roots)
            })
            .clone()
    }

    /// Whether the system's store has been read.
    #[cfg(test)]
    pub(crate) fn read(&self) -> bool {
        self.all.get().is_some()
    }
}

/// Why the plan's TLS settings (shipped in the assignment) cannot be used.
/// The coordinator checked the files, so these mean a broken coordinator.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetTlsError {
    /// `tls.ca_cert` holds something that is not a usable CA certificate.
    #[error("tls.ca_cert: not a usable PEM CA certificate")]
    Ca,
    /// `tls.client_cert` holds no PEM certificate.
    #[error("tls.client_cert: not a PEM certificate chain")]
    ClientCert,
    /// `tls.client_key` holds no PEM private key.
    #[error("tls.client_key: not a PEM private key")]
    ClientKey,
    /// rustls refuses the certificate and key (e.g. they do not match).
    #[error("tls.client_cert/client_key")]
    Identity(#[source] rustls::Error),
    /// The crypto provider supports none of the safe protocol versions.
    #[error("TLS protocol versions")]
    Versions(#[source] rustls::Error),
}

/// The client TLS settings for one assignment's target: `roots` (system
/// and --ca-cert) plus the plan's CAs, its client certificate, or no
/// checks at all when it says `insecure`; `alpn` is what the transport
/// offers, most wanted first.
pub(crate) fn target_config(
    roots: &rustls::RootCertStore,
    plan: Option<&loadfleet_proto::v1::TargetTls>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, TargetTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TargetTlsError::Versions)?;
    let builder = match plan {
        Some(tls) if tls.insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider))),
        Some(tls) if !tls.ca_cert.is_empty() => {
            let mut roots = roots.clone();
            for cert in CertificateDer::pem_slice_iter(&tls.ca_cert) {
                let cert = cert.map_err(|_| TargetTlsError::Ca)?;
                roots.add(cert).map_err(|_| TargetTlsError::Ca)?;
            }
            builder.with_root_certificates(roots)
        }
        _ => builder.with_root_certificates(roots.clone()),
    };
    let mut config = match plan {
        Some(tls) if !tls.client_cert.is_empty() => {
            let chain = CertificateDer::pem_slice_iter(&tls.client_cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| TargetTlsError::ClientCert)?;
            if chain.is_empty() {
                return Err(TargetTlsError::ClientCert);
            }
            let key = PrivateKeyDer::from_pem_slice(&tls.client_key)
                .map_err(|_| TargetTlsError::ClientKey)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TargetTlsError::Identity)?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// `insecure`: any certificate is taken as the target's, while the
/// handshake's signatures are still checked (so the connection is at
/// least encrypted to whoever holds the certificate's key).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// TLS for tests' own servers.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;

    /// A server's TLS settings for `localhost`, with a certificate made
    /// here, and a client's (offering `alpn`) that trusts it through a
    /// plan's `ca_cert`.
    pub(crate) fn localhost(alpn: &[&[u8]]) -> (rustls::ServerConfig, Arc<rustls::ClientConfig>) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(
            cert.key_pair.serialize_pem().as_bytes(),
        )
        .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let plan = loadfleet_proto::v1::TargetTls {
            ca_cert: cert.cert.pem().into_bytes(),
            ..Default::default()
        };
        let client =
            super::target_config(&rustls::RootCertStore::empty(), Some(&plan), alpn).unwrap();
        (server, client)
    }
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
            let e = TargetRoots::new(Some(&path)).err().unwrap().to_string();
            assert!(e.contains("--ca-cert"), "{e}");
        }
        assert!(TargetRoots::new(None).is_ok());
    }

    #[test]
    fn plan_tls_builds_or_names_the_field() {
        let roots = TargetRoots::new(None).unwrap().all();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let good = loadfleet_proto::v1::TargetTls {
            insecure: false,
            ca_cert: cert.cert.pem().into_bytes(),
            client_cert: cert.cert.pem().into_bytes(),
            client_key: cert.key_pair.serialize_pem().into_bytes(),
        };
        let config = target_config(&roots, Some(&good), &[b"h2"]).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        let insecure = loadfleet_proto::v1::TargetTls {
            insecure: true,
            ..Default::default()
        };
        assert!(target_config(&roots, Some(&insecure), &[b"http/1.1"]).is_ok());
        let bad_key = loadfleet_proto::v1::TargetTls {
            client_key: b"not a key".to_vec(),
            ..good
        };
        let e = target_config(&roots, Some(&bad_key), &[]).unwrap_err();
        assert!(e.to_string().contains("tls.client_key"), "{e}");
    }
}
