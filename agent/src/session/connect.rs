//! Opening the control stream: dialling the coordinator and the first
//! message, with the agent's clock the coordinator's probes read.

use std::time::Duration;

use loadfleet_proto::bounds::MAX_MESSAGE_BYTES;
use loadfleet_proto::v1::{self, agent_message, control_client::ControlClient};
use loadfleet_proto::PROTOCOL_HEADER;
use tokio::time::Instant;

use super::error::SessionError;
use crate::config::AgentConfig;
use crate::sys;

/// The agent's clock: nanoseconds since this process's epoch (monotonic).
pub(super) struct Clock(pub(super) Instant);

impl Clock {
    pub(super) fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// Connects, retrying while the coordinator is not up yet (agents are often
/// started before it, e.g. as a Kubernetes Indexed Job).
pub(super) async fn connect(
    config: &AgentConfig,
) -> Result<ControlClient<tonic::transport::Channel>, SessionError> {
    let endpoint = endpoint(config, KeepAlive::SESSION)?;
    let deadline = Instant::now() + config.connect_timeout;
    let mut backoff = Duration::from_millis(100);
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(client(channel)),
            Err(e) if Instant::now() + backoff < deadline => {
                tracing::info!("coordinator not reachable yet ({e}); retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(source) => {
                return Err(SessionError::Unreachable {
                    url: config.coordinator.clone(),
                    timeout: config.connect_timeout,
                    source,
                })
            }
        }
    }
}

/// How soon a silent connection to the coordinator is given up.
pub(super) struct KeepAlive {
    interval: Duration,
    timeout: Duration,
}

impl KeepAlive {
    /// The run's session: a dead link must end it well within the
    /// dead-man window.
    pub(super) const SESSION: KeepAlive = KeepAlive {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(3),
    };
    /// Delivering the last figures: a coordinator that stalled answers
    /// once it runs again, so the connection waits for it longer.
    pub(super) const DELIVERY: KeepAlive = KeepAlive {
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(20),
    };
}

/// The coordinator's address as an endpoint, with TLS when it is https://.
pub(super) fn endpoint(
    config: &AgentConfig,
    keep_alive: KeepAlive,
) -> Result<tonic::transport::Endpoint, SessionError> {
    let endpoint = tonic::transport::Endpoint::from_shared(config.coordinator.clone())
        .map_err(|source| SessionError::CoordinatorUrl {
            url: config.coordinator.clone(),
            source,
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keep_alive.interval)
        .keep_alive_timeout(keep_alive.timeout);
    // https:// checks the coordinator's certificate against the system's
    // trust store and --ca-cert: the token then never crosses the network
    // in the clear, and nobody can pose as the coordinator.
    if !config.coordinator.starts_with("https://") {
        return Ok(endpoint);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(pem) = &config.coordinator_ca {
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
    }
    if let Some((cert, key)) = &config.client_identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
    }
    endpoint
        .tls_config(tls)
        .map_err(SessionError::CoordinatorTls)
}

/// A client on `channel`. Assignments carry the plan's data tables (up to
/// 16 MiB of CSV), well past tonic's 4 MiB default.
pub(super) fn client(
    channel: tonic::transport::Channel,
) -> ControlClient<tonic::transport::Channel> {
    ControlClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

/// The call that opens a stream of `messages`, with the token and the
/// protocol version as metadata.
pub(super) fn call<S>(
    config: &AgentConfig,
    messages: S,
) -> Result<tonic::Request<S>, SessionError> {
    let mut request = tonic::Request::new(messages);
    let bearer = format!("Bearer {}", config.token)
        .parse()
        .map_err(|_| SessionError::Token)?;
    request.metadata_mut().insert("authorization", bearer);
    request
        .metadata_mut()
        .insert(PROTOCOL_HEADER, config.protocol_version.into());
    Ok(request)
}

/// Wraps one message for the stream.
pub(super) fn message(kind: agent_message::Kind) -> v1::AgentMessage {
    v1::AgentMessage { kind: Some(kind) }
}

/// Who we are, the first message of every session.
pub(super) fn hello(config: &AgentConfig, clock: &Clock) -> v1::AgentMessage {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let wall_minus_mono_ns = i64::try_from(wall - i128::from(clock.now_ns())).unwrap_or(0);
    message(agent_message::Kind::Hello(v1::Hello {
        protocol_version: config.protocol_version,
        agent_id: config.id.clone(),
        host: sys::hostname(),
        host_addresses: sys::host_addresses()
            .iter()
            .map(|a| a.to_string())
            .collect(),
        source_address: config.source.map(|ip| ip.to_string()).unwrap_or_default(),
        cpus: config.workers as u32,
        label: config.label.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        wall_minus_mono_ns,
        open_files: config.open_files,
    }))
}
