//! Limits on everything that crosses a boundary: plans, assignments and
//! snapshots. Both sides check them before they allocate or add, so the
//! numbers live here, once. A coordinator refuses a plan that an agent would
//! refuse as an assignment, and an agent refuses what no valid plan makes:
//! [`check_assignment`] is the agent's side, and the coordinator's plan
//! validator tests each field against the same constants (docs/plans.md,
//! "Plan bounds", lists them for users).

use std::time::Duration;

use crate::partition::MAX_TOTAL_WEIGHT;
use crate::v1::{self, scenario_assignment};
use crate::vocab::HttpProtocol;

/// Highest open-model rate, fleet-wide (arrivals per second).
pub const MAX_RATE: f64 = 10_000_000.0;
/// Most closed-model clients, fleet-wide.
pub const MAX_CLIENTS: f64 = 1_000_000.0;
/// Most arrivals one scenario may hold (every agent walks them all).
pub const MAX_ARRIVALS: f64 = 2e9;
/// Longest scenario (warm-up included).
pub const MAX_SCENARIO: Duration = Duration::from_secs(30 * 24 * 3600);
/// Latest start of a scenario after the run's start; with
/// [`MAX_SCENARIO`] this keeps every end instant far from overflow.
pub const MAX_START: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most scenarios in one plan.
pub const MAX_SCENARIOS: usize = 100;
/// Most stages in one profile (`stages` or the stages `steps` expands to).
pub const MAX_STAGES: usize = 10_000;
/// Longest scenario name.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest per-request timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Longest wait for in-flight requests after a scenario.
pub const MAX_DRAIN: Duration = Duration::from_secs(3600);
/// Longest closed-model think time.
pub const MAX_THINK: Duration = Duration::from_secs(3600);
/// Longest allowed lag behind schedule before an arrival is `late`.
pub const MAX_LAG: Duration = Duration::from_secs(3600);
/// Longest wake quantum an agent takes (`--wake-quantum`): arrivals may
/// leave up to a quantum late, and past 100 ms that is not pacing.
pub const MAX_WAKE_QUANTUM: Duration = Duration::from_millis(100);
/// Shortest snapshot interval: each interval is a set of histograms on the
/// agent and in the report, so a tiny one would allocate without end.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Longest snapshot interval (the live view and the dead-man switch need
/// regular snapshots).
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Longest dead-man window: an agent stops sending on its own after at most
/// this long without a word from its coordinator, whatever the coordinator
/// says.
pub const MAX_DEAD_MAN_SECS: u32 = 30;
/// Longest an agent that lost its coordinator mid-run keeps trying to
/// deliver its last figures (`--deliver-grace`): past an hour the run they
/// belong to is long over.
pub const MAX_DELIVERY_GRACE: Duration = Duration::from_secs(3600);
/// Most snapshot bytes (encoded) an agent keeps for the coordinator to
/// take in: normally a second's worth, and the whole dead-man window when
/// the coordinator stalls. An agent that would keep more gives up its
/// delivery rather than grow.
pub const MAX_UNDELIVERED_BYTES: usize = 64 * 1024 * 1024;
/// Most snapshots one agent may deliver after its loss in one run
/// (`Deliver`): a minute of a busy agent's snapshots is a few thousand.
/// The agent keeps no more; the coordinator refuses the rest.
pub const MAX_LATE_SNAPSHOTS: u64 = 100_000;
/// Latest common start after the assignment arrives (on the agent's clock):
/// a start days away would hold the agent's workers idle but armed.
pub const MAX_START_DELAY: Duration = Duration::from_secs(600);
/// Most requests in flight per agent.
pub const MAX_IN_FLIGHT: u32 = 1_000_000;
/// Most keep-alive connections per agent.
pub const MAX_CONNECTIONS: u32 = 100_000;
/// Descriptors an agent needs besides its load: the control connection,
/// the runtime, logs and a margin.
const FILES_BESIDES_LOAD: u64 = 64;

/// The open-file limit an agent needs for an assignment: every request in
/// flight (a held stream is one) holds a descriptor, and so does every
/// pooled connection, which never outnumber the requests in flight by more
/// than the connections opened ahead. One figure for the agent's warning
/// and the coordinator's verdict, so they cannot disagree about what
/// "enough" means.
pub fn files_needed(max_in_flight: u32, max_connections: u32) -> u64 {
    u64::from(max_in_flight) + u64::from(max_connections) + FILES_BESIDES_LOAD
}
/// Most agents in a fleet.
pub const MAX_AGENTS: usize = 10_000;
/// Most kinds of request in one scenario's mix.
pub const MAX_REQUESTS: usize = 1_000;
/// Longest name of one request of a mix (plan key `name`): it heads a
/// row of the report and of `compare`, so it stays short.
pub const MAX_REQUEST_NAME_BYTES: usize = 128;
/// Highest weight of one request in a mix; all of a mix's weights together
/// stay within [`MAX_TOTAL_WEIGHT`].
pub const MAX_REQUEST_WEIGHT: u32 = 10_000;
/// Longest request URL (template), base URL and path joined.
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// Longest HTTP method name.
pub const MAX_METHOD_BYTES: usize = 32;
/// Most headers on one request.
pub const MAX_HEADERS: usize = 64;
/// Longest header (name and value template together).
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Most columns in a data file.
pub const MAX_DATA_COLUMNS: usize = 256;
/// Most rows in a data file.
pub const MAX_DATA_ROWS: usize = 1_000_000;
/// Largest data file or request body shipped to agents.
pub const MAX_DATA_BYTES: u64 = 16 * 1024 * 1024;
/// Largest gRPC descriptor set (an encoded `FileDescriptorSet`) shipped
/// with a scenario: the message types of a few services with their
/// imports are tens of KiB; the bound keeps a hostile set from making the
/// agent decode without end.
pub const MAX_GRPC_DESCRIPTORS_BYTES: usize = 4 * 1024 * 1024;
/// Longest gRPC method name (`package.Service/Method`).
pub const MAX_GRPC_METHOD_BYTES: usize = 1024;
/// Largest PEM file (CA certificates, client certificate chain or key)
/// a plan's `[tls]` ships to agents: a long chain is a few KiB.
pub const MAX_PEM_BYTES: usize = 64 * 1024;
/// Largest control message either side accepts (an assignment carries the
/// data files).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Largest value a histogram records, in microseconds (about 203 days):
/// the agent clamps to it, so every honest histogram stays under
/// [`MAX_HISTOGRAM_HIGHEST`].
pub const MAX_RECORDED_MICROS: u64 = 1 << 44;
/// Highest trackable value a histogram header may claim. The counts array
/// grows with the log of this, so the bound caps the memory one decoded
/// histogram takes (about 300 KiB at 3 digits).
pub const MAX_HISTOGRAM_HIGHEST: u64 = 1 << 46;
/// Most significant digits a histogram header may claim: the precision the
/// agent encodes with ([`crate::histogram::SIGFIG`]); each extra digit is
/// ten times the memory.
pub const MAX_HISTOGRAM_DIGITS: u8 = 3;
/// Most bytes one encoded histogram may take: a full counts array within
/// [`MAX_HISTOGRAM_HIGHEST`] and [`MAX_HISTOGRAM_DIGITS`] at 9 bytes per
/// count, with room to spare.
pub const MAX_HISTOGRAM_BYTES: usize = 1024 * 1024;

/// Largest count one snapshot may carry in any field: more than 10^12
/// requests in one interval (at most a minute) is no real agent. With the
/// coordinator's checked sums, no total can wrap.
pub const MAX_SNAPSHOT_COUNT: u64 = 1 << 40;
/// Most live outputs in one run (`--out-*` flags and `[[output]]` tables
/// together): each holds a queue and a thread of deliveries.
pub const MAX_OUTPUTS: usize = 16;
/// Most seconds one output may hold while its receiver is slow: a queue
/// longer than an hour only delays the verdict that the sink is gone.
pub const MAX_OUTPUT_QUEUE: usize = 3600;
/// Most labels an output adds to every series (cardinality stays bounded).
pub const MAX_OUTPUT_LABELS: usize = 32;
/// Largest credential file (token, basic auth, header value) an output reads.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;
/// Longest agent id, host name, label or version in a hello.
pub const MAX_HELLO_STRING_BYTES: usize = 256;
/// Most host addresses in a hello.
pub const MAX_HOST_ADDRESSES: usize = 256;
/// Longest host address (or source address) in a hello: an IPv6 address
/// with a zone fits with room to spare.
pub const MAX_ADDRESS_BYTES: usize = 64;
/// Most CPUs an agent may claim: more than any machine has, and few enough
/// that `share = "cores"` weights stay within the fleet's total weight.
pub const MAX_CPUS: u32 = 4096;

/// Longest hold of an open-model subscriber.
pub const MAX_HOLD: Duration = MAX_SCENARIO;
/// Longest reconnection time before the server's own `retry:`.
pub const MAX_RECONNECT: Duration = Duration::from_secs(3600);
/// Longest name of the JSON field holding an event's send time, and of the
/// event type tracked for fan-out.
pub const MAX_SSE_NAME_BYTES: usize = 128;
/// Most event ids one snapshot reports for the fan-out spread; an agent
/// counts the rest as untracked.
pub const MAX_FANOUT_IDS: usize = 512;
/// Longest event id tracked for the fan-out spread.
pub const MAX_FANOUT_ID_BYTES: usize = 64;
/// Most distinct stream-error kinds in one snapshot (error kinds, plus
/// `status_<code>` per refused reconnect status).
pub const MAX_STREAM_ERROR_KINDS: usize = 64;

/// Most steps in one flow: every arrival walks them all in order, so the
/// count bounds one arrival's work and the report's rows per scenario.
pub const MAX_STEPS: usize = 64;
/// Most captures one flow step takes: each is a value an arrival holds
/// until its journey ends, multiplied by the arrivals in flight.
pub const MAX_CAPTURES_PER_STEP: usize = 16;
/// Most checks on one flow step: each is evaluated on every answer.
pub const MAX_CHECKS_PER_STEP: usize = 16;
/// Longest captured value: it is held per arrival in flight and pasted
/// into later requests, so a larger one is refused (the capture comes out
/// absent) rather than multiplied by the in-flight count.
pub const MAX_CAPTURE_VALUE_BYTES: usize = 4096;
/// Longest name of a captured value, the `NAME` of its `{{NAME}}`.
pub const MAX_CAPTURE_NAME_BYTES: usize = 64;
/// Most body bytes of one answer kept for captures and checks: the agent
/// reads and drops the rest, so a huge answer holds no memory per arrival
/// (a body cut short is usually no longer JSON, so JSON reads fail).
pub const MAX_ANSWER_KEPT_BYTES: usize = 1024 * 1024;
/// Deepest nesting of a JSON body that captures and checks will read:
/// parsing and dropping recurse per level, and no real API nests deeper.
pub const MAX_JSON_DEPTH: usize = 64;
/// Longest capture or check expression (a regex pattern included): short
/// enough that an error message can quote it whole.
pub const MAX_EXPRESSION_BYTES: usize = 1024;
/// Most memory one compiled capture regex may take (its program, and its
/// lazy DFA cache), so a short pattern such as `\w{1000}{1000}` is refused
/// at parse time instead of growing on the agent.
pub const MAX_REGEX_COMPILED_BYTES: usize = 1024 * 1024;
/// Most cookies an arrival's cookie jar holds across its flow: the jar
/// lives as long as the arrival, once per arrival in flight.
pub const MAX_COOKIES_PER_FLOW: usize = 64;
/// Longest cookie (name and value) the jar keeps; browsers keep 4 KiB too.
pub const MAX_COOKIE_BYTES: usize = 4096;

/// A field outside its bound. The agent sends this back as its refusal, so
/// it names the field exactly as the wire has it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct BoundsError {
    /// Dotted path of the field, e.g. `scenarios[0].closed.stages[2].to_rps`.
    pub field: String,
    /// What is wrong, with the bound.
    pub problem: String,
}

/// Checks a hello before the coordinator stores anything of it: every
/// string and list is bounded, and so is the CPU count that weights shares.
pub fn check_hello(h: &v1::Hello) -> Result<(), BoundsError> {
    for (field, value) in [
        ("hello.agent_id", &h.agent_id),
        ("hello.host", &h.host),
        ("hello.label", &h.label),
        ("hello.version", &h.version),
    ] {
        if value.len() > MAX_HELLO_STRING_BYTES {
            return Err(err(
                field,
                format!(
                    "is {} bytes, more than {MAX_HELLO_STRING_BYTES}",
                    value.len()
                ),
            ));
        }
    }
    if h.source_address.len() > MAX_ADDRESS_BYTES {
        return Err(err(
            "hello.source_address",
            format!(
                "is {} bytes, more than {MAX_ADDRESS_BYTES}",
                h.source_address.len()
            ),
        ));
    }
    count(
        "hello.host_addresses",
        h.host_addresses.len(),
        0,
        MAX_HOST_ADDRESSES,
    )?;
    if let Some(i) = h
        .host_addresses
        .iter()
        .position(|a| a.len() > MAX_ADDRESS_BYTES)
    {
        return Err(err(
            format!("hello.host_addresses[{i}]"),
            format!("is longer than {MAX_ADDRESS_BYTES} bytes"),
        ));
    }
    within("hello.cpus", u64::from(h.cpus), 0, u64::from(MAX_CPUS))
}

/// Checks a delivery of a lost agent's last figures before the
/// coordinator looks anything of it up.
pub fn check_deliver(d: &v1::Deliver) -> Result<(), BoundsError> {
    if d.agent_id.len() > MAX_HELLO_STRING_BYTES {
        return Err(err(
            "deliver.agent_id",
            format!(
                "is {} bytes, more than {MAX_HELLO_STRING_BYTES}",
                d.agent_id.len()
            ),
        ));
    }
    if d.run_key == 0 {
        return Err(err("deliver.run_key", "is 0; it names no run"));
    }
    Ok(())
}

/// Checks a welcome: the dead-man window must stay within
/// [`MAX_DEAD_MAN_SECS`], so no coordinator can switch the switch off.
pub fn check_welcome(w: &v1::Welcome) -> Result<(), BoundsError> {
    if w.dead_man_secs > MAX_DEAD_MAN_SECS {
        return Err(err(
            "welcome.dead_man_secs",
            format!(
                "= {} is above the {MAX_DEAD_MAN_SECS} s limit",
                w.dead_man_secs
            ),
        ));
    }
    Ok(())
}

/// Checks every number and size in an assignment against the bounds a plan
/// is held to. `agent_now_ns` is the agent's clock, to bound how far away
/// the start is. Nothing here allocates in proportion to the assignment.
pub fn check_assignment(a: &v1::Assignment, agent_now_ns: u64) -> Result<(), BoundsError> {
    if a.start_at_agent_ns.saturating_sub(agent_now_ns) > nanos(MAX_START_DELAY) {
        return Err(err(
            "start_at_agent_ns",
            format!(
                "is {} s away, more than the {} s limit",
                (a.start_at_agent_ns - agent_now_ns) / 1_000_000_000,
                MAX_START_DELAY.as_secs()
            ),
        ));
    }
    count("weights", a.weights.len(), 1, MAX_AGENTS)?;
    let total: u64 = a.weights.iter().map(|&w| u64::from(w)).sum();
    if let Some(i) = a.weights.iter().position(|&w| w == 0) {
        return Err(err(
            format!("weights[{i}]"),
            "is 0; every agent weighs at least 1",
        ));
    }
    if total > MAX_TOTAL_WEIGHT {
        return Err(err(
            "weights",
            format!("add up to {total}, more than {MAX_TOTAL_WEIGHT}"),
        ));
    }
    if a.agent_index as usize >= a.weights.len() {
        return Err(err(
            "agent_index",
            format!(
                "= {} but there are {} agents",
                a.agent_index,
                a.weights.len()
            ),
        ));
    }
    within(
        "max_in_flight",
        u64::from(a.max_in_flight),
        1,
        u64::from(MAX_IN_FLIGHT),
    )?;
    within(
        "connections",
        u64::from(a.connections),
        1,
        u64::from(MAX_CONNECTIONS),
    )?;
    if a.max_connections != 0 {
        within(
            "max_connections",
            u64::from(a.max_connections),
            u64::from(a.connections),
            u64::from(MAX_CONNECTIONS),
        )?;
    }
    duration("max_lag_ns", a.max_lag_ns, Duration::ZERO, MAX_LAG)?;
    duration(
        "timeout_ns",
        a.timeout_ns,
        Duration::from_nanos(1),
        MAX_TIMEOUT,
    )?;
    duration("drain_ns", a.drain_ns, Duration::ZERO, MAX_DRAIN)?;
    duration("interval_ns", a.interval_ns, MIN_INTERVAL, MAX_INTERVAL)?;
    count("scenarios", a.scenarios.len(), 1, MAX_SCENARIOS)?;
    for (i, sc) in a.scenarios.iter().enumerate() {
        check_scenario(sc, &format!("scenarios[{i}]"))?;
    }
    if !a.protocol.is_empty() && a.protocol.parse::<HttpProtocol>().is_err() {
        return Err(err(
            "protocol",
            format!(
                "{:?} is not one of http1, h2, h2c",
                a.protocol.chars().take(32).collect::<String>()
            ),
        ));
    }
    if let Some(tls) = &a.tls {
        bytes("tls.ca_cert", tls.ca_cert.len(), MAX_PEM_BYTES)?;
        bytes("tls.client_cert", tls.client_cert.len(), MAX_PEM_BYTES)?;
        bytes("tls.client_key", tls.client_key.len(), MAX_PEM_BYTES)?;
        if tls.client_cert.is_empty() != tls.client_key.is_empty() {
            return Err(err(
                "tls.client_key",
                "a client certificate and its key come together or not at all",
            ));
        }
    }
    Ok(())
}

fn check_scenario(sc: &v1::ScenarioAssignment, at: &str) -> Result<(), BoundsError> {
    let f = |name: &str| format!("{at}.{name}");
    if sc.name.len() > MAX_NAME_BYTES {
        return Err(err(
            f("name"),
            format!("is {} bytes, more than {MAX_NAME_BYTES}", sc.name.len()),
        ));
    }
    duration(
        &f("start_offset_ns"),
        sc.start_offset_ns,
        Duration::ZERO,
        MAX_START,
    )?;
    duration(
        &f("duration_ns"),
        sc.duration_ns,
        Duration::from_nanos(1),
        MAX_SCENARIO,
    )?;
    if sc.warmup_ns >= sc.duration_ns {
        return Err(err(
            f("warmup_ns"),
            "is not shorter than the scenario; nothing would be measured",
        ));
    }
    match &sc.model {
        Some(scenario_assignment::Model::Open(open)) => {
            if v1::ArrivalProcess::try_from(open.process)
                .map_or(true, |p| p == v1::ArrivalProcess::Unspecified)
            {
                return Err(err(f("open.process"), "is not uniform or poisson"));
            }
            let arrivals = check_stages(&open.stages, &f("open.stages"), MAX_RATE)?;
            if arrivals > MAX_ARRIVALS {
                return Err(err(
                    f("open.stages"),
                    format!("hold {arrivals:.0} arrivals, more than {MAX_ARRIVALS:.0}"),
                ));
            }
        }
        Some(scenario_assignment::Model::Closed(closed)) => {
            check_stages(&closed.stages, &f("closed.stages"), MAX_CLIENTS)?;
            duration(
                &f("closed.think_ns"),
                closed.think_ns,
                Duration::ZERO,
                MAX_THINK,
            )?;
        }
        None => return Err(err(f("model"), "is neither open nor closed")),
    }
    if let Some(sse) = &sc.sse {
        duration(&f("sse.hold_ns"), sse.hold_ns, Duration::ZERO, MAX_HOLD)?;
        duration(
            &f("sse.reconnect_ns"),
            sse.reconnect_ns,
            Duration::ZERO,
            MAX_RECONNECT,
        )?;
        bytes(&f("sse.send_time"), sse.send_time.len(), MAX_SSE_NAME_BYTES)?;
        if !["", "s", "ms", "us", "ns"].contains(&sse.send_time_unit.as_str()) {
            return Err(err(f("sse.send_time_unit"), "is not s, ms, us or ns"));
        }
        bytes(
            &f("sse.fanout_event"),
            sse.fanout_event.len(),
            MAX_SSE_NAME_BYTES,
        )?;
    }
    if sc.steps.is_empty() {
        count(&f("requests"), sc.requests.len(), 1, MAX_REQUESTS)?;
    } else {
        count(&f("requests"), sc.requests.len(), 0, 0)?;
        check_steps(sc, at)?;
    }
    let mut total_weight = 0u64;
    for (k, r) in sc.requests.iter().enumerate() {
        total_weight += check_request(r, &format!("{at}.requests[{k}]"), sc)?;
    }
    bytes(
        &f("grpc_descriptors"),
        sc.grpc_descriptors.len(),
        MAX_GRPC_DESCRIPTORS_BYTES,
    )?;
    if total_weight > MAX_TOTAL_WEIGHT {
        return Err(err(
            f("requests"),
            format!("weights add up to {total_weight}, more than {MAX_TOTAL_WEIGHT}"),
        ));
    }
    if let Some(data) = &sc.data {
        count(&f("data.columns"), data.columns.len(), 0, MAX_DATA_COLUMNS)?;
        count(&f("data.rows"), data.rows.len(), 0, MAX_DATA_ROWS)?;
        let mut total = data.columns.iter().map(String::len).sum::<usize>();
        for (r, row) in data.rows.iter().enumerate() {
            count(
                &format!("{at}.data.rows[{r}]"),
                row.values.len(),
                0,
                MAX_DATA_COLUMNS,
            )?;
            total += row.values.iter().map(String::len).sum::<usize>();
        }
        bytes(&f("data"), total, MAX_DATA_BYTES as usize)?;
    }
    Ok(())
}

/// Checks a profile's stages (rates or client counts up to `ceiling`) and
/// returns the arrivals (or client-seconds) it holds.
fn check_stages(stages: &[v1::Stage], at: &str, ceiling: f64) -> Result<f64, BoundsError> {
    count(at, stages.len(), 1, MAX_STAGES)?;
    let mut total_ns: u128 = 0;
    let mut mass = 0.0;
    for (k, s) in stages.iter().enumerate() {
        for (name, level) in [("from_rps", s.from_rps), ("to_rps", s.to_rps)] {
            if !(0.0..=ceiling).contains(&level) {
                return Err(err(
                    format!("{at}[{k}].{name}"),
                    format!("= {level} is not a number from 0 to {ceiling}"),
                ));
            }
        }
        if s.duration_ns == 0 {
            return Err(err(format!("{at}[{k}].duration_ns"), "is 0"));
        }
        total_ns += u128::from(s.duration_ns);
        mass += (s.from_rps + s.to_rps) * 0.5 * (s.duration_ns as f64 / 1e9);
    }
    if total_ns > MAX_SCENARIO.as_nanos() {
        return Err(err(
            at,
            format!("last longer than {} s", MAX_SCENARIO.as_secs()),
        ));
    }
    Ok(mass)
}

fn err(field: impl Into<String>, problem: impl Into<String>) -> BoundsError {
    BoundsError {
        field: field.into(),
        problem: problem.into(),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn within(field: &str, v: u64, min: u64, max: u64) -> Result<(), BoundsError> {
    if v < min || v > max {
        return Err(err(field, format!("= {v} is not within {min}..={max}")));
    }
    Ok(())
}

/// One request template (of a mix, or a flow's step) at `at`; its weight
/// as the mix counts it.
fn check_request(
    r: &v1::RequestTemplate,
    at: &str,
    sc: &v1::ScenarioAssignment,
) -> Result<u64, BoundsError> {
    let f = |name: &str| format!("{at}.{name}");
    bytes(&f("method"), r.method.len(), MAX_METHOD_BYTES)?;
    bytes(&f("name"), r.name.len(), MAX_REQUEST_NAME_BYTES)?;
    bytes(&f("url"), r.url.len(), MAX_URL_BYTES)?;
    count(&f("headers"), r.headers.len(), 0, MAX_HEADERS)?;
    for (h, header) in r.headers.iter().enumerate() {
        bytes(
            &format!("{at}.headers[{h}]"),
            header.name.len() + header.value.len(),
            MAX_HEADER_BYTES,
        )?;
    }
    bytes(&f("body"), r.body.len(), MAX_DATA_BYTES as usize)?;
    within(
        &f("weight"),
        u64::from(r.weight),
        0,
        u64::from(MAX_REQUEST_WEIGHT),
    )?;
    bytes(
        &f("grpc_method"),
        r.grpc_method.len(),
        MAX_GRPC_METHOD_BYTES,
    )?;
    if !r.grpc_method.is_empty() && sc.grpc_descriptors.is_empty() {
        return Err(err(
            f("grpc_method"),
            "names a gRPC method but the scenario carries no grpc_descriptors",
        ));
    }
    Ok(u64::from(r.weight.max(1)))
}

/// A flow's steps: how many, each one's request, captures, checks and
/// think time, before the agent parses an expression or keeps a value.
fn check_steps(sc: &v1::ScenarioAssignment, at: &str) -> Result<(), BoundsError> {
    count(&format!("{at}.steps"), sc.steps.len(), 1, MAX_STEPS)?;
    for (k, step) in sc.steps.iter().enumerate() {
        let f = |name: &str| format!("{at}.steps[{k}].{name}");
        let Some(r) = &step.request else {
            return Err(err(f("request"), "is missing"));
        };
        check_request(r, &f("request"), sc)?;
        count(
            &f("captures"),
            step.captures.len(),
            0,
            MAX_CAPTURES_PER_STEP,
        )?;
        for (c, capture) in step.captures.iter().enumerate() {
            let f = |name: &str| format!("{at}.steps[{k}].captures[{c}].{name}");
            bytes(&f("name"), capture.name.len(), MAX_CAPTURE_NAME_BYTES)?;
            bytes(
                &f("expression"),
                capture.expression.len(),
                MAX_EXPRESSION_BYTES,
            )?;
        }
        count(&f("checks"), step.checks.len(), 0, MAX_CHECKS_PER_STEP)?;
        for (c, check) in step.checks.iter().enumerate() {
            bytes(
                &format!("{at}.steps[{k}].checks[{c}]"),
                check.len(),
                MAX_EXPRESSION_BYTES,
            )?;
        }
        duration(
            &f("think_max_ns"),
            step.think_max_ns,
            Duration::ZERO,
            MAX_THINK,
        )?;
        within(&f("think_min_ns"), step.think_min_ns, 0, step.think_max_ns)?;
    }
    Ok(())
}

fn count(field: &str, n: usize, min: usize, max: usize) -> Result<(), BoundsError> {
    if n < min || n > max {
        return Err(err(
            field,
            format!("has {n} entries, not within {min}..={max}"),
        ));
    }
    Ok(())
}

fn bytes(field: &str, n: usize, max: usize) -> Result<(), BoundsError> {
    if n > max {
        return Err(err(field, format!("is {n} bytes, more than {max}")));
    }
    Ok(())
}

fn duration(field: &str, ns: u64, min: Duration, max: Duration) -> Result<(), BoundsError> {
    if ns < nanos(min) || ns > nanos(max) {
        return Err(err(
            field,
            format!(
                "= {ns} ns is not within {}..={}",
                fmt_duration(min),
                fmt_duration(max)
            ),
        ));
    }
    Ok(())
}

/// `100ms`, `30s`, `3600s`: short enough for a refusal line.
fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if Duration::from_millis(d.as_millis() as u64) == d {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assignment like the coordinator builds from a small valid plan.
    fn valid() -> v1::Assignment {
        v1::Assignment {
            weights: vec![1, 1],
            agent_index: 1,
            start_at_agent_ns: 2_000_000_000,
            max_in_flight: 1000,
            max_lag_ns: 1_000_000_000,
            timeout_ns: 10_000_000_000,
            drain_ns: 5_000_000_000,
            connections: 64,
            max_connections: 1000,
            interval_ns: 1_000_000_000,
            scenarios: vec![v1::ScenarioAssignment {
                name: "s".into(),
                duration_ns: 10_000_000_000,
                model: Some(scenario_assignment::Model::Open(v1::FleetSchedule {
                    stages: vec![v1::Stage {
                        duration_ns: 10_000_000_000,
                        from_rps: 100.0,
                        to_rps: 100.0,
                    }],
                    process: v1::ArrivalProcess::Uniform as i32,
                    seed: 1,
                })),
                requests: vec![v1::RequestTemplate {
                    method: "GET".into(),
                    url: "http://127.0.0.1:8080/".into(),
                    weight: 1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// One change that puts an assignment out of bounds.
    type Edit = dyn FnOnce(&mut v1::Assignment);

    fn refused(edit: impl FnOnce(&mut v1::Assignment)) -> String {
        let mut a = valid();
        edit(&mut a);
        check_assignment(&a, 0).unwrap_err().to_string()
    }

    #[test]
    fn a_plan_like_assignment_passes() {
        assert_eq!(check_assignment(&valid(), 0), Ok(()));
    }

    #[test]
    fn each_bound_names_its_field() {
        let closed = |clients: f64| {
            Some(scenario_assignment::Model::Closed(v1::ClosedModel {
                stages: vec![v1::Stage {
                    duration_ns: 1_000_000_000,
                    from_rps: clients,
                    to_rps: clients,
                }],
                think_ns: 0,
            }))
        };
        let cases: Vec<(&str, Box<Edit>)> = vec![
            ("interval_ns", Box::new(|a| a.interval_ns = 1)),
            (
                "interval_ns",
                Box::new(|a| a.interval_ns = 3_600_000_000_000),
            ),
            ("drain_ns", Box::new(|a| a.drain_ns = u64::MAX)),
            ("timeout_ns", Box::new(|a| a.timeout_ns = 0)),
            ("max_lag_ns", Box::new(|a| a.max_lag_ns = u64::MAX)),
            (
                "start_at_agent_ns",
                Box::new(|a| a.start_at_agent_ns = u64::MAX),
            ),
            ("connections", Box::new(|a| a.connections = u32::MAX)),
            ("protocol", Box::new(|a| a.protocol = "h3".into())),
            (
                "tls.client_cert",
                Box::new(|a| {
                    a.tls = Some(v1::TargetTls {
                        client_cert: vec![b'x'; MAX_PEM_BYTES + 1],
                        client_key: b"k".to_vec(),
                        ..Default::default()
                    })
                }),
            ),
            (
                "tls.client_key",
                Box::new(|a| {
                    a.tls = Some(v1::TargetTls {
                        client_cert: b"c".to_vec(),
                        ..Default::default()
                    })
                }),
            ),
            ("max_in_flight", Box::new(|a| a.max_in_flight = 0)),
            ("agent_index", Box::new(|a| a.agent_index = 2)),
            ("weights[0]", Box::new(|a| a.weights[0] = 0)),
            ("weights", Box::new(|a| a.weights = vec![u32::MAX, 1])),
            ("scenarios", Box::new(|a| a.scenarios.clear())),
            (
                "scenarios[0].open.stages[0].from_rps",
                Box::new(|a| {
                    if let Some(scenario_assignment::Model::Open(o)) = &mut a.scenarios[0].model {
                        o.stages[0].from_rps = 1e12;
                    }
                }),
            ),
            (
                "scenarios[0].open.stages[0].to_rps",
                Box::new(|a| {
                    if let Some(scenario_assignment::Model::Open(o)) = &mut a.scenarios[0].model {
                        o.stages[0].to_rps = f64::NAN;
                    }
                }),
            ),
            (
                "scenarios[0].closed.stages[0].from_rps",
                Box::new(move |a| a.scenarios[0].model = closed(f64::INFINITY)),
            ),
            (
                "scenarios[0].closed.think_ns",
                Box::new(move |a| {
                    a.scenarios[0].model = closed(5.0);
                    if let Some(scenario_assignment::Model::Closed(c)) = &mut a.scenarios[0].model {
                        c.think_ns = u64::MAX;
                    }
                }),
            ),
            (
                "scenarios[0].model",
                Box::new(|a| a.scenarios[0].model = None),
            ),
            (
                "scenarios[0].start_offset_ns",
                Box::new(|a| a.scenarios[0].start_offset_ns = u64::MAX),
            ),
            (
                "scenarios[0].warmup_ns",
                Box::new(|a| a.scenarios[0].warmup_ns = a.scenarios[0].duration_ns),
            ),
            (
                "scenarios[0].requests[0].weight",
                Box::new(|a| a.scenarios[0].requests[0].weight = u32::MAX),
            ),
            (
                "scenarios[0].requests[0].headers",
                Box::new(|a| {
                    a.scenarios[0].requests[0].headers =
                        vec![v1::Header::default(); MAX_HEADERS + 1]
                }),
            ),
            (
                "scenarios[0].requests[0].name",
                Box::new(|a| {
                    a.scenarios[0].requests[0].name = "n".repeat(MAX_REQUEST_NAME_BYTES + 1)
                }),
            ),
            (
                "scenarios[0].requests[0].url",
                Box::new(|a| a.scenarios[0].requests[0].url = "x".repeat(MAX_URL_BYTES + 1)),
            ),
            (
                "scenarios[0].grpc_descriptors",
                Box::new(|a| {
                    a.scenarios[0].grpc_descriptors = vec![0; MAX_GRPC_DESCRIPTORS_BYTES + 1]
                }),
            ),
            (
                "scenarios[0].requests[0].grpc_method",
                Box::new(|a| a.scenarios[0].requests[0].grpc_method = "a.B/C".into()),
            ),
            (
                "scenarios[0].data.rows",
                Box::new(|a| {
                    a.scenarios[0].data = Some(v1::DataTable {
                        rows: vec![v1::DataRow::default(); MAX_DATA_ROWS + 1],
                        ..Default::default()
                    })
                }),
            ),
        ];
        for (field, edit) in cases {
            let e = refused(edit);
            assert!(e.starts_with(&format!("{field} ")), "{field}: {e}");
        }
    }

    /// The valid assignment with its one request made a flow of `steps`.
    fn flow(steps: usize) -> v1::Assignment {
        let mut a = valid();
        let request = a.scenarios[0].requests.remove(0);
        let step = v1::FlowStep {
            request: Some(request),
            captures: vec![v1::Capture {
                name: "token".into(),
                expression: "json.token".into(),
            }],
            checks: vec!["status == 200".into()],
            think_min_ns: 0,
            think_max_ns: 1_000_000,
            continue_on_failure: false,
        };
        a.scenarios[0].steps = vec![step; steps];
        a
    }

    #[test]
    fn a_flows_steps_are_bounded() {
        assert!(check_assignment(&flow(3), 0).is_ok());
        type FlowEdit = fn(&mut v1::Assignment);
        let cases: Vec<(&str, FlowEdit)> = vec![
            ("scenarios[0].steps", |a| {
                let one = a.scenarios[0].steps[0].clone();
                a.scenarios[0].steps = vec![one; MAX_STEPS + 1]
            }),
            ("scenarios[0].steps[1].request", |a| {
                a.scenarios[0].steps[1].request = None
            }),
            ("scenarios[0].steps[0].checks", |a| {
                a.scenarios[0].steps[0].checks =
                    vec!["status == 200".into(); MAX_CHECKS_PER_STEP + 1]
            }),
            ("scenarios[0].steps[0].captures[0].expression", |a| {
                a.scenarios[0].steps[0].captures[0].expression =
                    "j".repeat(MAX_EXPRESSION_BYTES + 1)
            }),
            ("scenarios[0].steps[2].think_min_ns", |a| {
                a.scenarios[0].steps[2].think_min_ns = 2_000_000
            }),
            ("scenarios[0].requests", |a| {
                let one = a.scenarios[0].steps[0].request.clone().unwrap_or_default();
                a.scenarios[0].requests = vec![one]
            }),
        ];
        for (field, edit) in cases {
            let mut a = flow(3);
            edit(&mut a);
            let e = check_assignment(&a, 0).expect_err(field).to_string();
            assert!(e.starts_with(&format!("{field} ")), "{field}: {e}");
        }
    }

    #[test]
    fn the_dead_man_window_is_capped() {
        let w = |secs| v1::Welcome {
            agent_index: 0,
            dead_man_secs: secs,
        };
        assert!(check_welcome(&w(MAX_DEAD_MAN_SECS)).is_ok());
        let e = check_welcome(&w(1_000_000)).unwrap_err().to_string();
        assert!(e.contains("dead_man_secs") && e.contains("30"), "{e}");
    }

    /// A delivery names a run (a key of 0 names none) and a bounded id.
    #[test]
    fn a_delivery_names_its_run_and_a_short_id() {
        let d = |id: &str, key| v1::Deliver {
            agent_id: id.into(),
            run_key: key,
            ..Default::default()
        };
        assert!(check_deliver(&d("a", 42)).is_ok());
        let e = check_deliver(&d("a", 0)).unwrap_err().to_string();
        assert!(e.starts_with("deliver.run_key "), "{e}");
        let long = "x".repeat(MAX_HELLO_STRING_BYTES + 1);
        let e = check_deliver(&d(&long, 42)).unwrap_err().to_string();
        assert!(e.starts_with("deliver.agent_id "), "{e}");
    }
}
