//! The report's data: the serde structs written as `report.json` and read
//! back by `compare`. The schema, key by key with units, is documented in
//! `docs/report.md`; a change here is a change to that contract.
//!
//! Plain data with no behaviour: the report's modules, the figure registry
//! and the thresholds all read it, so it sits below them and depends on
//! none of them.

use std::collections::BTreeMap;

use loadfleet_proto::vocab::{AgentStatus, VerdictCode, VerdictLevel};
use serde::{Deserialize, Serialize};

pub(crate) use loadfleet_proto::histogram::Percentiles;

pub(crate) const SCHEMA: &str = "loadfleet.report/v1";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unsent {
    pub total: u64,
    pub concurrency_limit: u64,
    pub late: u64,
    #[serde(flatten)]
    pub other: BTreeMap<String, u64>,
}

/// The headline figures, for the totals and for each scenario. The words
/// (errors, failures, successful throughput) are defined once, in
/// docs/report.md, and each figure keeps its one name in every format.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Totals {
    pub intended: u64,
    pub sent: u64,
    pub completed: u64,
    pub completed_in_window: u64,
    /// Of those, the 2xx responses.
    #[serde(default)]
    pub completed_ok_in_window: u64,
    /// Sent and without an outcome: still in flight when the drain ended
    /// (or on an agent lost before it reported them); `sent - completed`.
    pub in_flight_at_end: u64,
    pub unsent: Unsent,
    /// Arrivals of lost agents' shares whose fate is unknown (due before
    /// the agent had certainly stopped, never reported), neither sent nor
    /// unsent: `intended == sent + unsent.total + unreported`.
    #[serde(default)]
    pub unreported: u64,
    pub status: BTreeMap<String, u64>,
    /// Transport errors (no HTTP status) by kind.
    pub errors: BTreeMap<String, u64>,
    /// gRPC calls by grpc-status; absent when nothing answered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<Grpc>,
    /// Requests that did not succeed: transport errors + 4xx + 5xx.
    #[serde(default)]
    pub failures: u64,
    /// Completions inside the measurement window / window length.
    pub throughput_rps: f64,
    /// 2xx completions inside the measurement window / window length.
    #[serde(default)]
    pub throughput_ok_rps: f64,
    /// True when requests had no outcome at the end (`in_flight_at_end >
    /// 0`): they waited at least as long as the drain, so every latency
    /// figure, which leaves them out, is optimistic.
    #[serde(default)]
    pub latency_lower_bound: bool,
    /// How long requests that found all of their agent's connections busy
    /// waited for one; null when none had to.
    #[serde(default)]
    pub pool_wait_ms: Option<Percentiles>,
    /// From the intended send time; null when nothing completed.
    pub latency_ms: Option<Percentiles>,
    /// From the actual send time.
    pub service_time_ms: Option<Percentiles>,
    /// Where the service time went on the wire, and connection reuse.
    #[serde(default)]
    pub phases: Phases,
    pub latency_by_class_ms: BTreeMap<String, Percentiles>,
    /// The latency distribution as HdrHistogram plots show it: value at
    /// percentiles 0, 50, 75, 87.5, … (halving the remainder each step) and 100.
    pub latency_curve_ms: Vec<CurvePoint>,
    /// Requests intended during warm-up, reported apart.
    pub warmup: Warmup,
}

/// Where measured requests' time went on the wire, as k6 splits it
/// (`http_req_connecting`, `_tls_handshaking`, `_waiting`, `_receiving`).
/// The wait for the agent's own pool is `pool_wait_ms`, never a phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// TCP connect of the requests that opened their connection.
    pub connect_ms: Option<Percentiles>,
    /// TLS handshake of the requests that opened a TLS connection.
    pub tls_handshake_ms: Option<Percentiles>,
    /// From going on the wire to the response headers.
    pub ttfb_ms: Option<Percentiles>,
    /// From the headers to the end of the body.
    pub body_ms: Option<Percentiles>,
    /// Requests that opened a new connection, warm-up included.
    pub connections_opened: u64,
    /// Requests sent on a connection an earlier request had used.
    pub connections_reused: u64,
}

/// The gRPC outcomes of a set of totals: every grpc-status apart, as a
/// count and as a share of all completions (which also hold the calls that
/// got an HTTP error status or a transport error instead), so that
/// `grpc.ok` and `grpc.unavailable` read like `failures` does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Grpc {
    /// Calls answered with a grpc-status (any).
    pub calls: u64,
    /// Calls per status name ("OK", "RESOURCE_EXHAUSTED", ...); only the
    /// statuses seen.
    pub status: BTreeMap<String, u64>,
    /// Each status's count / `completed`, as a fraction 0..1.
    pub rate: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CurvePoint {
    pub percentile: f64,
    pub ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Warmup {
    pub seconds: f64,
    pub completed: u64,
    pub latency_ms: Option<Percentiles>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    /// "open" (arrivals on a schedule) or "closed" (a client population).
    pub model: String,
    /// Offset of the scenario from the common start.
    pub start_s: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// The measurement window, as offsets from the common start.
    pub window: Window,
    /// The load's shape in words: `ramp 0→2000 req/s over 3s then 2000
    /// req/s (uniform, 1500 req/s on average)`, `50 clients, think 100ms`.
    /// Set by [`super::shape::name_loads`] once the run is over; empty in
    /// a partial report and in one written before it was kept.
    #[serde(default)]
    pub load: String,
    /// Open model: the arrival process and the mean offered rate.
    pub process: Option<String>,
    pub offered_rps: Option<f64>,
    #[serde(flatten)]
    pub totals: Totals,
    /// Subscription scenarios only: what the subscribers got. Their
    /// intended/sent/unsent count subscribers, status/errors and latency
    /// their first subscribe request (latency: time to subscribe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<SseReport>,
    /// Each request of the scenario's mix apart, in the plan's order,
    /// named as the plan names it (`[[scenario.request]] name`, or its
    /// method and path). Their completions add up to the scenario's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestReport>,
    /// Flow scenarios only: how the flows ended. The scenario's own
    /// intended/sent/unsent count flows (sent = started), its latency runs
    /// from a flow's intended start to its end, and its status and errors
    /// are those of the step that ended each flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<FlowReport>,
    /// Flow scenarios only: each step, in the plan's order (the funnel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
    /// Open-model scenarios (not subscriptions): whether the target kept
    /// up with the arrivals through the window, second by second (the
    /// `NOT_STEADY` verdict). Absent for the other scenarios, in a run
    /// cut short, and in reports written before the check existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steadiness: Option<Steadiness>,
}

/// `scenarios[].steadiness`: the figures the steadiness check read, over
/// the whole seconds of the window past the scenario's first answers.
/// Rules and thresholds in docs/report.md (verdicts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steadiness {
    pub verdict: SteadyVerdict,
    /// The seconds read, from the common start: `[from_s, to_s)`.
    pub from_s: f64,
    pub to_s: f64,
    pub seconds: u64,
    /// Arrivals due, sent and answered (any outcome) per second over them.
    pub offered_rps: f64,
    pub sent_rps: f64,
    pub completed_rps: f64,
    /// Arrivals of those seconds never sent.
    pub unsent: u64,
    /// Sent minus answered over those seconds: how far the answers fell
    /// behind (negative when they caught up).
    pub behind: i64,
    /// Seconds in which more went out than came back.
    pub behind_seconds: u64,
    /// In flight just before the first second read, and at the end of
    /// the last.
    pub in_flight_start: u64,
    pub in_flight_end: u64,
    /// The trend of the per-second latency percentiles; null with fewer
    /// than 3 seconds that completed something.
    pub p50: Option<Trend>,
    pub p99: Option<Trend>,
}

/// `steady`, `not_steady`, or `too_short` (fewer than 3 seconds to read:
/// nothing is said).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteadyVerdict {
    Steady,
    NotSteady,
    TooShort,
}

/// A least-squares line through a latency percentile, second by second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// Change per second, and the standard error of that slope.
    pub slope_ms_per_s: f64,
    pub spread_ms_per_s: f64,
    /// The line's value at the first second, and its rise to the last.
    pub start_ms: f64,
    pub rise_ms: f64,
    /// The slope is positive, at least 3 times its spread, and the rise
    /// at least a quarter of the start.
    pub rising: bool,
}

/// A flow scenario's flows (`scenarios[].flows`):
/// `intended == started + unsent.total + unreported` and
/// `started == completed + failed + in_flight_at_end`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowReport {
    pub intended: u64,
    pub started: u64,
    pub unsent: Unsent,
    /// Flows of lost agents' shares whose fate is unknown:
    /// `intended == started + unsent.total + unreported`.
    #[serde(default)]
    pub unreported: u64,
    /// Flows whose every step passed.
    pub completed: u64,
    pub failed: u64,
    /// Failed flows by reason (check, capture, status, error, timeout,
    /// unsent).
    pub failed_by_reason: BTreeMap<String, u64>,
    pub in_flight_at_end: u64,
    /// Completed flows that ended inside the window / its length.
    pub throughput_fps: f64,
    /// From a flow's intended start to its last step's end, failed flows
    /// included; null when none ended after the warm-up.
    pub latency_ms: Option<Percentiles>,
    /// The latency less the think time the flow slept.
    pub active_ms: Option<Percentiles>,
}

/// One step of a flow (`scenarios[].steps[]`): its answers as a request's
/// (`completed`, `status`, `latency_ms` from its ready instant…), and its
/// funnel: `reached == sent + unsent.total`; `not_reached` counts the
/// flows that never got to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    #[serde(flatten)]
    pub request: RequestReport,
    pub reached: u64,
    pub sent: u64,
    pub unsent: BTreeMap<String, u64>,
    pub not_reached: BTreeMap<String, u64>,
    /// Each check by its text, passed and failed.
    pub checks: Vec<CheckReport>,
    /// From the step's send.
    pub service_time_ms: Option<Percentiles>,
    /// From its ready instant to its send.
    pub start_lag_ms: Option<Percentiles>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckReport {
    pub check: String,
    pub passed: u64,
    pub failed: u64,
}

/// One request of a scenario's mix (`scenarios[].requests[]`): its
/// completions, with the words and rules of the scenario's own figures.
/// Arrivals are dealt to requests by weight before they are sent, so
/// intended/sent/unsent stay the scenario's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestReport {
    pub name: String,
    pub completed: u64,
    pub completed_in_window: u64,
    /// Of those, the 2xx (and gRPC OK) responses.
    pub completed_ok_in_window: u64,
    /// Transport errors, 4xx and 5xx answers, gRPC statuses other than OK.
    pub failures: u64,
    /// Completions inside the scenario's window / its length.
    pub throughput_rps: f64,
    pub throughput_ok_rps: f64,
    pub status: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    /// gRPC calls by grpc-status; absent when none answered one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_status: BTreeMap<String, u64>,
    /// From the intended send time, every outcome together; null when
    /// nothing of this request completed after the warm-up.
    pub latency_ms: Option<Percentiles>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lag {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// An agent that came too late for the run (`late_agents[]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LateAgentReport {
    pub id: String,
    pub host: String,
    pub peer: Option<String>,
    /// `standby` (it waits for the next `--repeat`) or `refused` (no later
    /// run was planned).
    pub outcome: String,
    /// What the coordinator told it.
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentReport {
    pub id: String,
    pub host: String,
    /// Local address the agent sends load from, when it was bound to one.
    pub source: Option<String>,
    /// Where the agent's control connection came from.
    pub peer: Option<String>,
    /// Addresses of the agent's host (for the localhost check).
    pub host_addresses: Vec<String>,
    pub share: f64,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    /// Arrivals of its share whose fate is unknown (it was lost before it
    /// reported them).
    #[serde(default)]
    pub unreported: u64,
    pub completed: u64,
    /// Process CPU use as a fraction of the agent's CPUs (0..1).
    pub cpu: f64,
    /// Process CPU use in cores.
    pub cpu_cores: f64,
    /// Process CPU time over the run (user + system).
    pub cpu_seconds: f64,
    pub cpus: u32,
    /// Mean host-wide CPU use seen by the agent (0..1).
    pub host_cpu: f64,
    /// Schedule lag: actual minus intended send time.
    pub lag_ms: Option<Lag>,
    /// Offset between the agent's and the coordinator's monotonic clocks:
    /// an arbitrary number (each clock counts from its own boot or start),
    /// used only to place the common start on the agent's clock.
    pub clock_offset_ms: Option<f64>,
    pub clock_rtt_ms: Option<f64>,
    /// How far the common start may be misplaced on this agent: half the
    /// best probe round trip. The figure a reader should look at.
    #[serde(default)]
    pub clock_uncertainty_ms: Option<f64>,
    /// Requests the agent itself counted as still in flight when it
    /// stopped draining; null when it never said it finished.
    #[serde(default)]
    pub in_flight_at_end: Option<u64>,
    /// Share of the run (0..1, mean over the agent's pools) during which
    /// every connection was busy and requests waited for one.
    #[serde(default)]
    pub pool_saturated_share: f64,
    /// Connections the agent established, by the protocol actually spoken
    /// on them (http1, h2, h2c).
    #[serde(default)]
    pub protocol: BTreeMap<String, u64>,
    pub status: AgentStatus,
    pub lost_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub level: VerdictLevel,
    pub code: VerdictCode,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalReport {
    /// Seconds from the common start to the interval's start.
    pub t: f64,
    pub intended: u64,
    pub sent: u64,
    pub unsent: u64,
    pub unsent_by_reason: BTreeMap<String, u64>,
    /// Lost agents' arrivals due in the interval whose fate is unknown.
    #[serde(default)]
    pub unreported: u64,
    pub completed: u64,
    /// Transport errors completed in the interval.
    pub errors: u64,
    #[serde(flatten)]
    pub classes: BTreeMap<String, u64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub in_flight: u64,
    /// Upper bound of requests in flight at once during the interval.
    pub max_in_flight: u64,
    pub max_lag_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub target: String,
    /// Until the last scenario ends.
    pub duration_s: f64,
    /// Length of the union of the scenarios' measurement windows.
    pub window_s: f64,
    pub drain_s: f64,
    pub max_in_flight_per_agent: u32,
    /// Keep-alive connections each agent opens ahead of the start.
    #[serde(default)]
    pub connections_per_agent: u32,
    /// The most connections each agent may open: the most concurrent
    /// requests it can put on the target over HTTP/1.1.
    #[serde(default)]
    pub max_connections_per_agent: u32,
    pub agents: usize,
    /// Agents the run waited for; more than those that joined only when
    /// `--min-agents` let it start short.
    #[serde(default)]
    pub agents_expected: usize,
    pub local: bool,
    pub started_at_unix: f64,
    pub elapsed_s: f64,
    /// The HTTP protocol asked for and the one the connections spoke.
    #[serde(default)]
    pub protocol: ProtocolInfo,
    /// TLS towards the target, as the plan set it.
    #[serde(default)]
    pub tls: TlsInfo,
}

/// What the plan asked for and what the target agreed to: a target that
/// will not speak HTTP/2 shows here (and as `no_h2` errors), never as a
/// silent HTTP/1.1 run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProtocolInfo {
    /// `protocol` in the plan (`--http2` makes it h2): http1, h2 or h2c.
    pub asked: String,
    /// Connections established by all agents, by the protocol actually
    /// spoken on them: http1, h2 (over TLS, by ALPN) or h2c (cleartext).
    pub connections: BTreeMap<String, u64>,
}

/// TLS towards the target (`[tls]`, `--insecure`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TlsInfo {
    /// True when target certificates were not checked (`--insecure`).
    pub insecure: bool,
    /// True when the plan gave CA certificates of its own.
    pub ca_cert: bool,
    /// True when agents showed the plan's client certificate.
    pub client_cert: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    /// True when the run was cut short: figures cover what was measured.
    pub partial: bool,
    pub run: RunInfo,
    pub verdicts: Vec<Verdict>,
    pub thresholds: Vec<Checked>,
    pub totals: Totals,
    pub scenarios: Vec<Scenario>,
    pub agents: Vec<AgentReport>,
    /// Agents that came once the fleet was complete or the schedule dealt,
    /// with no share of this run; absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_agents: Vec<LateAgentReport>,
    pub intervals: Vec<IntervalReport>,
    /// With --repeat: every run's headline figures and their median/min/max.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Repeats>,
}

/// One subscription scenario's figures (`scenarios[].sse`). Delivery
/// latency mixes the agent's wall clock at receipt with the target's at
/// sending, so [`Delivery`] says what that rests on, and negative
/// latencies are kept and counted: a negative figure is a clock error made
/// visible, never clamped to zero.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SseReport {
    /// Subscribers whose first response was a 2xx event stream.
    pub opened: u64,
    /// Time from a subscriber's intended instant to its first event.
    pub first_event_ms: Option<Percentiles>,
    /// Events received over all subscribers, reconnects included.
    pub events: u64,
    /// Events per subscriber over its life (reconnects included).
    pub events_per_subscriber: Option<Counts>,
    /// Time between consecutive events of one stream.
    pub gap_ms: Option<Percentiles>,
    /// Streams the server ended while the subscriber still wanted them.
    pub ended_by_server: u64,
    pub reconnects: u64,
    /// Reconnects that sent Last-Event-ID.
    pub resumed: u64,
    /// Events whose id was not above the last one the subscriber had seen.
    pub duplicates: u64,
    /// Comment lines (keep-alives).
    pub comments: u64,
    /// Errors on open streams and on reconnects, by kind.
    pub stream_errors: BTreeMap<String, u64>,
    /// Reconnects answered without a stream, by status.
    pub refused: BTreeMap<String, u64>,
    /// Event delivery latency and what it rests on.
    pub delivery: Delivery,
    pub fanout: Fanout,
    /// Streams open per second, all agents together.
    pub open_streams: Vec<OpenStreams>,
}

/// A distribution of counts (not times).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Counts {
    pub min: u64,
    pub p50: u64,
    pub max: u64,
    /// How many values (subscribers).
    pub count: u64,
}

/// Event delivery latency: agent wall clock at receipt minus the send time
/// in the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// Where the send time was read ("data.sent_us (us)", "event id (ms)"
    /// or "none").
    pub send_time: String,
    /// Latencies of zero or more.
    pub latency_ms: Option<Percentiles>,
    /// Events whose latency came out negative: received before they were
    /// sent, by the clocks' account. Never clamped, never dropped.
    pub negative: u64,
    /// How negative (magnitudes).
    pub negative_ms: Option<Percentiles>,
    /// Events without a readable send time.
    pub no_send_time: u64,
    /// What the figure rests on, in words.
    pub rests_on: String,
    /// Largest wall-clock offset of an agent to the coordinator, as
    /// measured (ms; either sign, the largest magnitude).
    pub agent_wall_offset_ms: Option<f64>,
    /// How well those offsets are known: the largest half probe round trip.
    pub agent_wall_uncertainty_ms: Option<f64>,
}

/// The spread, per event id, from the first subscriber receiving it to the
/// last, across the fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fanout {
    /// Event ids received by more than one subscriber.
    pub ids: u64,
    pub spread_p50_ms: Option<f64>,
    pub spread_max_ms: Option<f64>,
    /// Events that could not be tracked (too many ids).
    pub untracked: u64,
    /// Per id, the largest fan-outs first, a bounded number of them; the
    /// spread figures above cover every id.
    pub rows: Vec<FanoutRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FanoutRow {
    pub id: String,
    pub subscribers: u64,
    /// First and last receipt, seconds after the common start.
    pub first_s: f64,
    pub last_s: f64,
    pub spread_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenStreams {
    /// Seconds from the common start to the interval's start.
    pub t: f64,
    /// Open at the end of the second.
    pub open: u64,
    /// Upper bound of streams open at once during the second.
    pub max_open: u64,
}

/// One checked threshold, as it appears in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checked {
    pub threshold: String,
    pub actual: Option<f64>,
    /// The unit of `actual`: `ms`, `%`, `req/s`, or empty for a count.
    #[serde(default)]
    pub unit: String,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repeats {
    /// How many runs were carried out.
    pub count: usize,
    /// Index (0-based) of the run shown as the report's totals: the one
    /// whose latency p99 is the median.
    pub representative: usize,
    /// Each run's totals, in order, with `errors_total` (transport errors,
    /// every kind together).
    pub runs: Vec<serde_json::Value>,
    pub median: Headline,
    pub min: Headline,
    pub max: Headline,
}

/// `repeats.median`, `.min` and `.max`: the
/// [`HEADLINE`](crate::figures::HEADLINE) figures, each absent when no run
/// had it (a run with no completion has no latency), never 0, so `compare`
/// can show `-`. Fields are in key order, so the JSON is that of a map of
/// the same keys; every headline figure needs its field here (a test
/// checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_in_window: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_at_end: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<HeadlinePercentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_time_ms: Option<HeadlinePercentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_ok_rps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_rps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreported: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<HeadlineUnsent>,
}

/// The latency figures of a [`Headline`], in key order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeadlinePercentiles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999: Option<f64>,
}

/// `unsent.total` of a [`Headline`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeadlineUnsent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
}
