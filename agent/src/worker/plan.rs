//! What a worker is given and what it reports back.

use std::sync::Arc;
use std::time::Duration;

use loadfleet_proto::closed::Population;
use loadfleet_proto::handover::Handover;
use loadfleet_proto::partition::Interleave;
use loadfleet_proto::schedule::ArrivalSchedule;
use loadfleet_proto::v1;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ClientConfig;
use crate::flow::FlowSpec;
use crate::request::RequestMix;
use crate::sse::SseSpec;

/// The run's hand-overs so far (`--on-agent-loss redistribute`), as the
/// session received them, in order.
pub(crate) type Handovers = watch::Receiver<Arc<[Handover]>>;

/// What a worker reports to the session.
pub(crate) enum WorkerEvent {
    /// Closed intervals, ready to stream.
    Snapshots(Vec<v1::Snapshot>),
    /// The worker is done; requests it abandoned while draining.
    Done { in_flight_at_end: u64 },
    /// The worker woke up this long after it should have: the process was
    /// frozen. It fired nothing more.
    Frozen(Duration),
}

/// How a scenario's load is generated.
pub(crate) enum Model {
    /// Arrivals on a schedule that ignores the server (open model).
    Open {
        schedule: Arc<ArrivalSchedule>,
        interleave: Arc<Interleave>,
    },
    /// A fixed population of clients, each waiting for its previous response
    /// plus the think time (closed model).
    Closed {
        population: Arc<Population>,
        interleave: Arc<Interleave>,
        /// Fleet-wide client count at its largest, for client numbering.
        max_clients: u64,
    },
}

/// One scenario as a worker runs it.
pub(crate) struct ScenarioPlan {
    pub index: u32,
    /// The scenario's own start (common start + its offset).
    pub start: Instant,
    pub warmup: Duration,
    pub duration: Duration,
    pub model: Model,
    pub mix: Arc<RequestMix>,
    pub seed: u64,
    /// Set for a subscription scenario: each arrival or client holds an
    /// event stream (see [`crate::sse`]).
    pub sse: Option<Arc<SseSpec>>,
    /// Set for a flow scenario: each arrival or client runs its steps (the
    /// mix's requests, one per step; see [`crate::flow`]).
    pub flow: Option<Arc<FlowSpec>>,
}

/// Everything one worker needs; shared parts are behind `Arc`.
pub(crate) struct WorkerPlan {
    pub agent_index: usize,
    pub worker_index: usize,
    pub workers: usize,
    /// The common start: intervals count from here for every scenario.
    pub start: Instant,
    pub interval: Duration,
    pub drain: Duration,
    pub max_in_flight: u64,
    pub max_lag: Duration,
    /// Shortest time between two wake-ups of an open-model loop.
    pub wake_quantum: Duration,
    pub client: ClientConfig,
    pub scenarios: Vec<ScenarioPlan>,
}
