//! `loadfleet-testbed`: the built-in HTTP target and the ground truth of
//! loadfleet's accuracy tests.
//!
//! Its behaviour is known exactly from its flags, so a load test run against
//! it can be checked: a fixed service delay bounds latency from below, a
//! bounded pool with a wait timeout produces the slow 503s of a saturated
//! connection pool, an admission semaphore in front of the pool produces the
//! fast 429s of admission control, and error injection produces 500s at a
//! known rate. These are the overload shapes a report must keep apart: a
//! fast 429 (refused at the door) and a slow 503 (given up after waiting)
//! mean different things, so their counts and latencies are never merged.
//!
//! The same binary is the target in benchmarks, so the default path (no
//! delay, no gates, no errors) answers from a static body without locks or
//! per-request allocations of its own.
//!
//! With `--shop` it also serves a small stateful shop ([`ShopConfig`]):
//! login, cart, order and payment endpoints whose ids are issued and
//! accepted once, so a multi-step scenario can be checked against what the
//! target itself counted.
//!
//! With `--grpc` it is a gRPC server instead ([`serve_grpc`]): the same
//! knobs, answered as gRPC statuses, with reflection.
//!
//! Readiness is explicit: after binding, the binary prints one line,
//! `listening on <addr>`, to stdout, which is how tests and the coordinator
//! learn the port when listening on port 0.

pub mod cli;
mod delay;
mod gate;
mod grpc;
mod h2;
mod reply;
mod server;
mod shop;
mod sse;
mod stamped;

use std::time::Duration;

pub use cli::{Cli, CpuList, ErrorRate};
pub use grpc::serve as serve_grpc;
/// Pinning is shared with the agent; see `loadfleet-sys` for why it must
/// happen before the runtime is built.
pub use loadfleet_sys::pin_to_cpus;
pub use server::serve;
pub use sse::SseConfig;

/// How the testbed behaves for every request except `GET /health`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// Fixed service delay, spent holding a pool slot.
    pub delay: Duration,
    /// Upper bound of a uniform random delay added to `delay`.
    pub delay_jitter: Duration,
    /// The bounded pool; its timeout ends in 503. `None`: unbounded.
    pub pool: Option<Limit>,
    /// The admission semaphore, checked before the pool; its timeout ends in
    /// 429. `None`: everyone is admitted.
    pub admission: Option<Limit>,
    /// Fraction of requests answered 500 after their work.
    pub error_rate: ErrorRate,
    /// The event streams of `GET /sse` (which bypass the gates and errors).
    pub sse: SseConfig,
    /// Most concurrent streams an HTTP/2 connection may carry (hyper's
    /// default, 200, when `None`).
    pub h2_max_streams: Option<u32>,
    /// The stateful shop endpoints; `None`: not served.
    pub shop: Option<ShopConfig>,
}

/// The shop's knobs (`--shop`, `--shop-pool`, `--shop-decline`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShopConfig {
    /// Permits of the shop's own pool, held while waiting out the delay in
    /// place of `Config::pool`; `None`: shop requests use `Config::pool`.
    pub pool: Option<usize>,
    /// Share of payments declined, within `0.0..=1.0`: the k-th is declined
    /// when `floor(k * decline) > floor((k - 1) * decline)`.
    pub decline: f64,
}

impl Config {
    /// True when requests need no work at all, so the server may answer them
    /// on the spot (the benchmark path).
    pub fn is_trivial(&self) -> bool {
        self.delay.is_zero()
            && self.delay_jitter.is_zero()
            && self.pool.is_none()
            && self.admission.is_none()
            && self.error_rate.get() == 0.0
    }
}

/// A bound on concurrent requests, with how long a request may wait for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// How many requests may hold a permit at once; at least 1.
    pub permits: usize,
    /// How long to wait for a permit: `None` without limit, zero not at all.
    pub timeout: Option<Duration>,
}

/// The TLS acceptor for `--tls-cert`/`--tls-key`, so the testbed can stand
/// in for an https:// target (h2 or HTTP/1.1 over ALPN).
pub fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use anyhow::Context;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}: cannot read it", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--tls-cert {}: not a PEM certificate chain", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {}: no certificate in the file", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| {
        format!(
            "--tls-key {}: not a readable PEM private key",
            key.display()
        )
    })?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--tls-key does not match --tls-cert")?;
    // h2 first: a client offering both gets HTTP/2, as from most servers.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}
