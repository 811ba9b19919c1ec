//! TLS towards https:// receivers: the system's trust store plus an
//! optional CA file (`--out-ca-file`, `ca_file`), with certificate checks
//! always on, so a push never goes to a receiver that could not prove who
//! it is.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A client config for one output, made before the run, so a bad CA file
/// stops the run before any load is sent.
pub(crate) fn connector(ca_file: Option<&Path>) -> anyhow::Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    // Certificates the system store holds but rustls cannot use are
    // skipped; a store that cannot be read leaves only the CA file.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read it ({e})", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate ({e})", path.display()))?;
        if certs.is_empty() {
            anyhow::bail!("{}: no certificate in the file", path.display());
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("{}: not usable as a CA ({e})", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS protocol versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The handshake over `stream`, checking the certificate against `host`.
pub(crate) async fn handshake(
    connector: &TlsConnector,
    host: &str,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>, String> {
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| format!("{host}: not a host name for TLS ({e})"))?;
    connector
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS with {host}: {e}"))
}
