//! The verdicts, checked on runs built by hand.
use super::*;
use crate::aggregate::Aggregate;
use crate::fleet::AgentView;
use crate::report::build::build;
use crate::report::plan_info::ScenarioInfo;
use loadfleet_proto::figures::Snapshot;
use loadfleet_proto::histogram::{encode, new_histogram};
use loadfleet_proto::v1;
use std::time::Duration;

/// One agent whose snapshot has `n` 200s at `latency_us`, `lag_us` of
/// send lag and `cpu_seconds` over a 10 s run.
fn result(n: u64, latency_us: u64, lag_us: u64, cpu_seconds: f64, rtt_ms: u64) -> RunResult {
    let mut lat = new_histogram();
    let mut lag = new_histogram();
    for _ in 0..n {
        lat.record(latency_us).unwrap();
        lag.record(lag_us).unwrap();
    }
    let mut aggregate = Aggregate::new(1, 1);
    aggregate.add(
        0,
        &Snapshot::try_from(&v1::Snapshot {
            intended: n,
            sent: n,
            completed: n,
            completed_in_window: n,
            status: [(200, n)].into_iter().collect(),
            latency: [(OutcomeClass::Success.to_string(), encode(&lat).unwrap())]
                .into_iter()
                .collect(),
            lag: encode(&lag).unwrap(),
            cpu_seconds,
            ..Default::default()
        })
        .unwrap(),
    );
    RunResult {
        agents_expected: 1,
        agents_joined: 1,
        agents: vec![AgentView {
            hello: v1::Hello {
                agent_id: "a0".into(),
                cpus: 1,
                ..Default::default()
            },
            peer: None,
            clock: Some((rtt_ms * 1_000_000, 0)),
            finished: Some(v1::Finished::default()),
            lost: None,
            share: 1.0,
            lost_at: None,
            unknown_until: None,
            late: Default::default(),
            handed_over_at: None,
            messages_after_loss: 0,
        }],
        late_agents: Vec::new(),
        aggregate,
        failure: None,
        cut_short: false,
        started: true,
        started_at: std::time::SystemTime::now(),
        wall_minus_mono_ns: 0,
        elapsed: Duration::from_secs(10),
        corrupt_snapshots: 0,
        protocol: Vec::new(),
        on_agent_loss: OnAgentLoss::Continue,
        aborted: None,
    }
}

fn context(floor: Option<Duration>) -> PlanInfo {
    PlanInfo {
        target: "http://t/".into(),
        addresses: vec!["t:80".into()],
        scenarios: vec![ScenarioInfo {
            name: "s".into(),
            model: "open",
            start: Duration::ZERO,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            process: Some("uniform".into()),
            offered_rps: Some(10.0),
            sse_send_time: None,
            requests: Vec::new(),
            steps: Vec::new(),
        }],
        duration: Duration::from_secs(10),
        drain: Duration::from_secs(1),
        max_in_flight: 100,
        connections: 64,
        max_connections: 100,
        thresholds: Vec::new(),
        max_lag: Duration::from_secs(1),
        latency_floor: floor,
        placement: Placement::Remote {
            loopback: false,
            target_ips: Vec::new(),
        },
        protocol: loadfleet_proto::vocab::HttpProtocol::Http1,
        tls: Default::default(),
        failure_limits: Default::default(),
    }
}

fn codes(r: &Report) -> Vec<(VerdictCode, VerdictLevel)> {
    r.verdicts.iter().map(|v| (v.code, v.level)).collect()
}

#[test]
fn a_healthy_run_has_no_verdicts_and_exits_0() {
    let r = build(
        &result(100, 5_000, 50, 0.5, 1),
        &context(Some(Duration::from_millis(2))),
    );
    assert!(r.verdicts.is_empty(), "{:?}", r.verdicts);
    assert_eq!(exit_status(&r), 0);
    assert_eq!(r.totals.latency_ms.as_ref().map(|p| p.count), Some(100));
}

#[test]
fn lag_saturation_is_an_error_cpu_alone_a_warning() {
    let r = build(&result(100, 5_000, 20_000, 0.5, 1), &context(None));
    assert!(
        codes(&r).contains(&(VerdictCode::GeneratorSaturated, VerdictLevel::Error)),
        "{:?}",
        r.verdicts
    );
    assert_eq!(exit_status(&r), 3);
    let r = build(&result(100, 5_000, 50, 9.5, 1), &context(None));
    assert!(
        codes(&r).contains(&(VerdictCode::GeneratorSaturated, VerdictLevel::Warn)),
        "{:?}",
        r.verdicts
    );
    assert!(
        r.verdicts[0].message.contains("CPU 95%"),
        "{}",
        r.verdicts[0].message
    );
    assert_eq!(exit_status(&r), 0);
}

/// An agent that said at hello it may open fewer files than the plan
/// lets it hold gets a warning naming the figures; one with room (or one
/// that did not say) gets none.
#[test]
fn an_open_file_limit_below_the_plan_is_a_warning() {
    let ctx = context(None);
    let needed = loadfleet_proto::bounds::files_needed(ctx.max_in_flight, ctx.max_connections);
    for (limit, warned) in [(needed - 1, true), (needed, false), (0, false)] {
        let mut run = result(100, 5_000, 50, 0.5, 1);
        run.agents[0].hello.open_files = limit;
        let r = build(&run, &ctx);
        let found = r
            .verdicts
            .iter()
            .find(|v| v.message.contains("open-file limit"));
        assert_eq!(found.is_some(), warned, "limit {limit}: {:?}", r.verdicts);
        if let Some(v) = found {
            assert_eq!(v.code, VerdictCode::GeneratorSaturated);
            assert_eq!(v.level, VerdictLevel::Warn);
            assert!(
                v.message
                    .contains(&format!("is {limit}, below the {needed}")),
                "{}",
                v.message
            );
        }
    }
}

#[test]
fn loose_clock_is_flagged() {
    let r = build(&result(100, 5_000, 50, 0.5, 30), &context(None));
    let clock = r
        .verdicts
        .iter()
        .find(|v| v.code == VerdictCode::Clock)
        .expect("CLOCK verdict");
    assert!(clock.message.contains("±15.0 ms"), "{}", clock.message);
}

#[test]
fn answers_below_the_floor_are_no_experiment() {
    let r = build(
        &result(100, 300, 50, 0.5, 1),
        &context(Some(Duration::from_millis(100))),
    );
    assert!(
        codes(&r).contains(&(VerdictCode::NoExperiment, VerdictLevel::Error)),
        "{:?}",
        r.verdicts
    );
    assert_eq!(exit_status(&r), 3);
}

#[test]
fn localhost_is_said_for_one_machine_loopback_and_a_shared_host() {
    let localhost = |placement: Placement, addresses: &[&str]| {
        let mut r = result(100, 5_000, 50, 0.5, 1);
        r.agents[0].hello.host_addresses = addresses.iter().map(|a| a.to_string()).collect();
        let info = PlanInfo {
            placement,
            ..context(None)
        };
        build(&r, &info)
            .verdicts
            .into_iter()
            .filter(|v| v.code == VerdictCode::Localhost)
            .map(|v| v.message)
            .collect::<Vec<_>>()
    };
    let one_machine = localhost(
        Placement::Local {
            pinning: "agents pinned to CPU 1".into(),
        },
        &[],
    );
    assert!(
        one_machine[0].contains("(agents pinned to CPU 1)"),
        "{one_machine:?}"
    );
    let loopback = localhost(
        Placement::Remote {
            loopback: true,
            target_ips: Vec::new(),
        },
        &[],
    );
    assert!(loopback[0].contains("loopback"), "{loopback:?}");
    let ip: IpAddr = "10.0.0.7".parse().unwrap();
    let shared = localhost(
        Placement::Remote {
            loopback: false,
            target_ips: vec![ip],
        },
        &["127.0.0.1", "10.0.0.7"],
    );
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert!(shared[0].contains("agent a0's own host"), "{shared:?}");
    // Loopback addresses are every host's own: they prove nothing.
    let apart = localhost(
        Placement::Remote {
            loopback: false,
            target_ips: vec!["127.0.0.1".parse().unwrap()],
        },
        &["127.0.0.1"],
    );
    assert!(apart.is_empty(), "{apart:?}");
}

/// `result` plus one more snapshot of agent a0, built by `extra`.
fn with(extra: v1::Snapshot) -> Report {
    let mut r = result(100, 5_000, 50, 0.5, 1);
    r.aggregate.add(0, &Snapshot::try_from(&extra).unwrap());
    build(&r, &context(None))
}

fn level_of(r: &Report, code: VerdictCode) -> Option<VerdictLevel> {
    r.verdicts.iter().find(|v| v.code == code).map(|v| v.level)
}

#[test]
fn unsent_is_an_error_above_five_percent() {
    let unsent = |n: u64| {
        with(v1::Snapshot {
            intended: n,
            unsent: [(UnsentReason::Late.to_string(), n)].into_iter().collect(),
            ..Default::default()
        })
    };
    // 3 of 103 (2.9%) is a caveat; 10 of 110 (9.1%) a degraded run.
    assert_eq!(
        level_of(&unsent(3), VerdictCode::Unsent),
        Some(VerdictLevel::Warn)
    );
    let r = unsent(10);
    assert_eq!(level_of(&r, VerdictCode::Unsent), Some(VerdictLevel::Error));
    assert_eq!(exit_status(&r), 3);
}

#[test]
fn requests_without_an_outcome_are_incomplete_above_one_percent() {
    let open = |n: u64| {
        with(v1::Snapshot {
            intended: n,
            sent: n,
            ..Default::default()
        })
    };
    let r = open(1);
    assert_eq!(r.totals.in_flight_at_end, 1);
    assert!(r.totals.latency_lower_bound);
    assert_eq!(
        level_of(&r, VerdictCode::Incomplete),
        Some(VerdictLevel::Warn)
    );
    let r = open(5);
    assert_eq!(
        level_of(&r, VerdictCode::Incomplete),
        Some(VerdictLevel::Error)
    );
    assert!(r.verdicts.iter().any(|v| v.message.contains("5 of 105")));
    // Every request accounted for: no verdict, no lower bound.
    let r = build(&result(100, 5_000, 50, 0.5, 1), &context(None));
    assert!(!r.totals.latency_lower_bound);
    assert_eq!(level_of(&r, VerdictCode::Incomplete), None);
}

#[test]
fn a_saturated_pool_is_generator_pool_with_its_figures() {
    let pool = |saturated: Duration| {
        let mut waits = new_histogram();
        waits.record(2_000).unwrap();
        with(v1::Snapshot {
            pool_saturated_ns: saturated.as_nanos() as u64,
            pool_wait: encode(&waits).unwrap(),
            ..Default::default()
        })
    };
    // 0.2 s of a 10 s run: a warning; 1 s (10%): an error.
    let r = pool(Duration::from_millis(200));
    assert_eq!(
        level_of(&r, VerdictCode::GeneratorPool),
        Some(VerdictLevel::Warn)
    );
    assert!((r.agents[0].pool_saturated_share - 0.02).abs() < 1e-9);
    let r = pool(Duration::from_secs(1));
    let v = r
        .verdicts
        .iter()
        .find(|v| v.code == VerdictCode::GeneratorPool)
        .expect("GENERATOR_POOL");
    assert_eq!(v.level, VerdictLevel::Error);
    for needle in [
        "at most 100 per agent",
        "10%",
        "1 request(s) waited",
        "p50 2.00ms",
        "at most 100 concurrent",
    ] {
        assert!(v.message.contains(needle), "{needle}: {}", v.message);
    }
    // Nobody waited: no verdict.
    let r = build(&result(100, 5_000, 50, 0.5, 1), &context(None));
    assert_eq!(level_of(&r, VerdictCode::GeneratorPool), None);
}

/// Ten seconds of one scenario: each second `sent` out and `completed`
/// back, the latency of the second `i` at `latency_ms(i)`, and in flight
/// growing by what did not come back; then a drain that answers the rest.
fn seconds(sent: u64, completed: u64, latency_ms: fn(u64) -> u64) -> RunResult {
    let mut r = result(0, 5_000, 50, 0.5, 1);
    r.aggregate = Aggregate::new(1, 1);
    for i in 0..10u64 {
        let mut lat = new_histogram();
        for _ in 0..completed {
            lat.record(latency_ms(i) * 1000).unwrap();
        }
        let snapshot = v1::Snapshot {
            interval_index: i,
            seq: i + 1,
            intended: sent,
            sent,
            completed,
            completed_in_window: completed,
            status: [(200, completed)].into_iter().collect(),
            latency: [(OutcomeClass::Success.to_string(), encode(&lat).unwrap())]
                .into_iter()
                .collect(),
            in_flight: 20 + (sent - completed) * (i + 1),
            ..Default::default()
        };
        r.aggregate.add(0, &Snapshot::try_from(&snapshot).unwrap());
    }
    // The drain answers what was left.
    let left = 10 * (sent - completed);
    let mut lat = new_histogram();
    for _ in 0..left {
        lat.record(latency_ms(10) * 1000).unwrap();
    }
    let drain = v1::Snapshot {
        interval_index: 10,
        seq: 11,
        completed: left,
        status: [(200, left)].into_iter().collect(),
        latency: [(OutcomeClass::Success.to_string(), encode(&lat).unwrap())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    r.aggregate.add(0, &Snapshot::try_from(&drain).unwrap());
    r
}

/// A target 12/s short of 412/s, its latency climbing 30 ms a second, is
/// told NOT_STEADY with its figures, as a warning: the exit status stays
/// 0. The same rate answered in full, at a flat latency, is steady.
#[test]
fn a_target_that_falls_behind_is_not_steady_and_warned() {
    let r = build(&seconds(412, 400, |i| 50 + 30 * i), &context(None));
    let st = r.scenarios[0].steadiness.as_ref().expect("judged");
    assert_eq!(st.verdict, crate::report_model::SteadyVerdict::NotSteady);
    assert_eq!((st.from_s, st.seconds, st.behind), (1.0, 9, 108));
    assert_eq!((st.in_flight_start, st.in_flight_end), (32, 140));
    let v = r
        .verdicts
        .iter()
        .find(|v| v.code == VerdictCode::NotSteady)
        .expect("NOT_STEADY");
    assert_eq!(v.level, VerdictLevel::Warn);
    assert!(
        v.message.starts_with(
            "completions 400/s of 412/s offered; p50 rising 30 ms per second (±0.0), p99 rising 30 ms per second (±0.0); in flight grew from 32 to 140"
        ),
        "{}",
        v.message
    );
    assert_eq!(exit_status(&r), 0);

    let r = build(&seconds(412, 412, |_| 50), &context(None));
    let st = r.scenarios[0].steadiness.as_ref().expect("judged");
    assert_eq!(st.verdict, crate::report_model::SteadyVerdict::Steady);
    assert!(!r.verdicts.iter().any(|v| v.code == VerdictCode::NotSteady));
}

/// A run cut short is not judged: its last seconds are not whole.
#[test]
fn a_run_cut_short_is_not_judged_for_steadiness() {
    let mut run = seconds(412, 400, |i| 50 + 30 * i);
    run.cut_short = true;
    run.elapsed = Duration::from_secs(10);
    let r = build(&run, &context(None));
    assert!(r.scenarios[0].steadiness.is_none());
    assert!(!r.verdicts.iter().any(|v| v.code == VerdictCode::NotSteady));
}
