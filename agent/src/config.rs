//! How the agent was started: its flags, resolved once in `main`, read by
//! the session and by assignment checks alike (so neither imports the other
//! for it).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::allow::AllowList;

/// How the agent was started.
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    pub coordinator: String,
    pub token: String,
    pub id: String,
    pub label: String,
    pub source: Option<IpAddr>,
    /// Further `--bind` addresses, used when `source` runs out of ports.
    pub more_sources: Vec<IpAddr>,
    pub workers: usize,
    pub connect_timeout: Duration,
    /// How long a run's last figures are offered to the coordinator after
    /// the agent lost it mid-run; zero gives up at once.
    pub deliver_grace: Duration,
    /// Shortest time between two wake-ups of a worker's open-model loop.
    pub wake_quantum: Duration,
    /// Targets this agent may be sent at (`host` or `host:port`); empty
    /// means any. The agent refuses an assignment aimed elsewhere and
    /// never sends a rendered request outside it.
    pub allow_targets: AllowList,
    /// Trust anchors for https:// targets (system store and --ca-cert);
    /// each assignment adds the plan's TLS settings to them.
    pub target_roots: Arc<crate::client::tls::TargetRoots>,
    /// The --ca-cert PEM, also trusted for an https:// coordinator.
    pub coordinator_ca: Option<Vec<u8>>,
    /// --tls-cert and --tls-key (PEM): the client certificate shown to a
    /// coordinator running mutual TLS (--client-ca).
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Only used by tests: announce this protocol version instead of ours.
    pub protocol_version: u32,
    /// The open-file limit after raising it at start: every connection and
    /// held stream takes one.
    pub open_files: u64,
    /// No join, assignment or finish lines on stderr: a coordinator that
    /// starts local agents prints them itself.
    pub quiet: bool,
}
