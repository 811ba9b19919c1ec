//! Every plan in examples/ run end to end, shortened so the suite stays
//! quick, each checked against the figure its comment promises.
//!
//! A single-scenario plan is shortened with `--duration` (and `--warmup`
//! where its own warm-up would fill the shortened run). A plan of several
//! scenarios refuses those flags ("these reshape a single scenario"), so
//! for those the test writes a shortened copy of the plan into its temp
//! folder, each replaced setting checked to be there; when per-scenario
//! overrides exist the copies can go.

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// The plan's text with each `(from, to)` replaced, every `from` present
/// exactly once, so a changed example fails here rather than running long.
fn shortened(name: &str, edits: &[(&str, &str)]) -> String {
    let path = example(name);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for (from, to) in edits {
        assert_eq!(
            text.matches(from).count(),
            1,
            "{name}: expected {from:?} once; update the shortened copy"
        );
        text = text.replace(from, to);
    }
    text
}

fn scenario<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no scenario {name}: {r:#}"))
}

/// Every arrival sent and answered 200, nothing unsent or failed.
fn all_answered(s: &Value, output: &str) {
    let intended = u(&s["intended"]);
    assert!(intended > 0, "{output}");
    assert_eq!(u(&s["sent"]), intended, "{output}");
    assert_eq!(u(&s["unsent"]["total"]), 0, "{output}");
    assert_eq!(u(&s["completed"]), intended, "{output}");
    assert_eq!(u(&s["status"]["200"]), intended, "{output}");
}

fn threshold_passed(r: &Value, threshold: &str) {
    let t = r["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .find(|t| t["threshold"] == threshold)
        .unwrap_or_else(|| panic!("threshold {threshold} not evaluated: {r:#}"));
    assert_eq!(t["passed"], true, "{t}");
}

/// 300 req/s, 3 s with 1 s of warm-up (the plan's 10 s warm-up would be
/// the whole shortened run): exactly 900 arrivals, the first 300 reported
/// as warm-up.
#[test]
fn constant() {
    let plan = example("constant.toml");
    let (status, output, r, _) = run_report(
        "example-constant",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--duration",
            "3s",
            "--warmup",
            "1s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = scenario(&r, "steady");
    all_answered(s, &output);
    assert_eq!(u(&s["intended"]), 900, "{output}");
    assert_eq!(f(&s["warmup_s"]), 1.0, "{output}");
    assert_eq!(u(&s["warmup"]["completed"]), 300, "{}", s["warmup"]);
}

/// 100 closed clients with 10 ms of think time against the testbed's
/// 20 ms: no more than 100 / 30 ms = 3,333 req/s can complete, whatever
/// the generator could do. Two agents, so that each one's 64 connections
/// hold its 50 clients.
#[test]
fn closed() {
    let plan = example("closed.toml");
    let (status, output, r, _) = run_report(
        "example-closed",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--duration",
            "2s",
            "--local-agents",
            "2",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = scenario(&r, "capacity");
    assert_eq!(s["model"], "closed", "{output}");
    assert!(u(&s["completed"]) > 100, "{output}");
    assert_eq!(u(&s["status"]["200"]), u(&s["completed"]), "{output}");
    let rps = f(&s["throughput_rps"]);
    assert!(rps <= 3333.0 * 1.05, "{rps} req/s from 100 clients");
}

/// A gRPC unary method through reflection, against the testbed's gRPC
/// service (`--url` in place of the plan's fixed port): 400 calls, all OK,
/// and the plan's thresholds held.
#[test]
fn grpc() {
    let (_testbed, addr) = start_testbed(&["--grpc"]);
    let plan = example("grpc.toml");
    let (status, output, r, _) = run_report(
        "example-grpc",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--url",
            &format!("http://{addr}"),
            "--duration",
            "2s",
        ],
    );
    let t = &r["totals"];
    assert_eq!(u(&t["intended"]), 400, "{output}");
    assert_eq!(u(&t["grpc"]["calls"]), 400, "{output}");
    assert_eq!(u(&t["grpc"]["status"]["OK"]), 400, "{output}");
    threshold_passed(&r, "grpc.ok>99%");
    // The latency a stall of the machine can move: this test is retried
    // (.config/nextest.toml).
    threshold_passed(&r, "p99<250ms");
    assert_eq!(status.code(), Some(0), "{output}");
}

/// HTTP/2 with prior knowledge on http:// (h2c), against the testbed:
/// every request answered over at most the plan's 4 connections per agent.
#[test]
fn http2() {
    let (_testbed, addr) = start_testbed(&[]);
    let plan = example("http2.toml");
    let (status, output, r, _) = run_report(
        "example-http2",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--url",
            &format!("http://{addr}/"),
            "--duration",
            "1s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    all_answered(scenario(&r, "h2"), &output);
    let spoken = &r["run"]["protocol"]["connections"];
    let agents = r["agents"].as_array().expect("agents").len() as u64;
    // HTTP/2 connections open on demand up to the plan's 4 per agent, so
    // how many a short run needs depends on how the streams overlapped.
    let h2c = u(&spoken["h2c"]);
    assert!(
        (agents..=4 * agents).contains(&h2c),
        "{agents} agents with at most 4 connections each spoke h2c on {h2c}: {output}"
    );
    assert_eq!(spoken.as_object().map(|o| o.len()), Some(1), "{spoken}");
}

/// The weighted mix drawing users from users.csv: 400 requests answered,
/// 8 in 10 of them items and 2 cart, each reported under its name, and
/// the plan's thresholds passed.
#[test]
fn mix() {
    let plan = example("mix.toml");
    let (status, output, r, _) = run_report(
        "example-mix",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--duration",
            "2s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = scenario(&r, "shop");
    all_answered(s, &output);
    assert_eq!(u(&s["intended"]), 400, "{output}");
    threshold_passed(&r, "shop.p99<500ms");
    threshold_passed(&r, "unsent==0");
    threshold_passed(&r, "shop.items.p99<500ms");
    let requests: Vec<(&str, u64)> = s["requests"]
        .as_array()
        .expect("scenarios[].requests")
        .iter()
        .map(|q| (q["name"].as_str().unwrap_or_default(), u(&q["completed"])))
        .collect();
    assert_eq!(requests, [("items", 320), ("cart", 80)], "{output}");
}

/// Poisson arrivals at 500 req/s on average for 2 s: about 1,000 (the
/// count's standard deviation is √1000 ≈ 32; ±160 is five of them).
#[test]
fn poisson() {
    let plan = example("poisson.toml");
    let (status, output, r, _) = run_report(
        "example-poisson",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--duration",
            "2s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = scenario(&r, "bursty");
    all_answered(s, &output);
    assert_eq!(s["process"], "poisson", "{output}");
    let n = u(&s["intended"]) as i64;
    assert!((n - 1000).abs() <= 160, "{n} arrivals");
}

/// The ramp's stages squeezed into 2 s: its offered rate averages below
/// the 1,000 req/s peak and above zero, and every arrival is answered.
#[test]
fn ramp() {
    let plan = example("ramp.toml");
    let (status, output, r, _) = run_report(
        "example-ramp",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--duration",
            "2s",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = scenario(&r, "ramp");
    all_answered(s, &output);
    let offered = f(&s["offered_rps"]);
    assert!(offered > 100.0 && offered < 1000.0, "offered {offered}");
    assert!(
        (u(&s["intended"]) as f64 - offered * 2.0).abs() <= 2.0,
        "{output}"
    );
}

/// A closed probe, then an open overload started when it ends, each with
/// its own window (shortened copy: see the module comment).
#[test]
fn sequence() {
    let dir = temp_dir("example-sequence-plan");
    let text = shortened(
        "sequence.toml",
        &[
            ("warmup = \"2s\"", "warmup = \"500ms\""),
            ("duration = \"20s\"", "duration = \"2s\""),
            ("duration = \"30s\"", "duration = \"2s\""),
        ],
    );
    let plan = write_plan(&dir, &text);
    let (status, output, r, _) = run_report(
        "example-sequence",
        &["run", plan.to_str().expect("utf-8 path")],
    );
    assert_ok_or_saturated(status, &r, &output);
    let (probe, overload) = (scenario(&r, "probe"), scenario(&r, "overload"));
    assert_eq!(probe["model"], "closed");
    assert!(u(&probe["completed"]) > 0, "{output}");
    assert_eq!(overload["model"], "open");
    assert_eq!(f(&probe["start_s"]), 0.0);
    assert_eq!(f(&overload["start_s"]), 2.0, "after the probe's 2 s");
    all_answered(overload, &output);
    assert_eq!(u(&overload["intended"]), 600, "{output}");
}

/// The staircase 100..500 req/s, a second per step, then stages with a
/// pause: exactly the arrivals of each shape, the second scenario started
/// when the first ends (shortened copy: see the module comment).
#[test]
fn steps() {
    let dir = temp_dir("example-steps-plan");
    let text = shortened(
        "steps.toml",
        &[
            ("every = \"10s\"", "every = \"1s\""),
            (
                "{ rate = 200, for = \"10s\" }",
                "{ rate = 200, for = \"1s\" }",
            ),
            ("{ rate = 0, for = \"5s\" }", "{ rate = 0, for = \"1s\" }"),
            (
                "{ rate = 400, for = \"10s\" }",
                "{ rate = 400, for = \"1s\" }",
            ),
        ],
    );
    let plan = write_plan(&dir, &text);
    let (status, output, r, _) = run_report(
        "example-steps",
        &["run", plan.to_str().expect("utf-8 path")],
    );
    assert_ok_or_saturated(status, &r, &output);
    let (stairs, pause) = (scenario(&r, "staircase"), scenario(&r, "with-pause"));
    all_answered(stairs, &output);
    all_answered(pause, &output);
    assert_eq!(u(&stairs["intended"]), 100 + 200 + 300 + 400 + 500);
    assert_eq!(u(&pause["intended"]), 200 + 400);
    assert_eq!(f(&stairs["duration_s"]), 5.0);
    assert_eq!(f(&pause["start_s"]), 5.0);
}

/// Subscribers, then broadcasts to all of them, against the testbed
/// (shortened copy: see the module comment): 200 subscribers, 2 broadcasts,
/// each reaching every subscriber once.
#[test]
fn sse_broadcast() {
    let (_testbed, addr) = start_testbed(&["--sse-interval", "0s"]);
    let dir = temp_dir("example-sse-plan");
    let text = shortened(
        "sse-broadcast.toml",
        &[
            (
                "url = \"http://127.0.0.1:8080\"",
                &format!("url = \"http://{addr}\""),
            ),
            ("rate = 1000", "rate = 100"),
            ("duration = \"20s\"", "duration = \"2s\""),
            ("hold = \"60s\"", "hold = \"5s\""),
            ("start = \"30s\"", "start = \"3s\""),
            ("rate = 0.2", "rate = 1"),
            ("duration = \"25s\"", "duration = \"2s\""),
        ],
    );
    let plan = write_plan(&dir, &text);
    let (status, output, r, _) =
        run_report("example-sse", &["run", plan.to_str().expect("utf-8 path")]);
    assert_ok_or_saturated(status, &r, &output);
    let subscribers = scenario(&r, "subscribers");
    let sse = &subscribers["sse"];
    assert_eq!(u(&sse["opened"]), 200, "{output}");
    all_answered(scenario(&r, "broadcast"), &output);
    assert_eq!(u(&scenario(&r, "broadcast")["intended"]), 2);
    assert_eq!(u(&sse["events"]), 2 * 200, "{sse}");
    assert_eq!(u(&sse["duplicates"]), 0, "{sse}");
    assert_eq!(u(&sse["fanout"]["ids"]), 2, "{}", sse["fanout"]);
}
