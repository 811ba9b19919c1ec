//! Flows against a hostile target (tests/support/hostile_http.py, Python's
//! standard library): a 10 MiB body to capture from, JSON nested 100,000
//! deep, a regex's worst case, a storm of cookies. Each is refused or
//! bounded, the flows it touches fail with their reason or pass their
//! checks, and every count still adds up against the target's own.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::*;

const PLAN: &str = r#"
[target]
url = "http://ADDR"

[[scenario]]
name = "big"
rate = 5
duration = "2s"
[[scenario.step]]
path = "/big"
capture = { token = "json.token" }

[[scenario]]
name = "deep"
rate = 5
duration = "2s"
[[scenario.step]]
path = "/deep"
capture = { first = "json[0]" }

[[scenario]]
name = "regex"
rate = 5
duration = "2s"
[[scenario.step]]
path = "/aaaa"
check = ["body contains \"ab\""]
capture = { run = 'regex "(a+)+$"' }

[[scenario]]
name = "storm"
rate = 5
duration = "2s"
[[scenario.step]]
path = "/storm"
[[scenario.step]]
path = "/cookies"

[[scenario]]
name = "jar"
rate = 5
duration = "2s"
[[scenario.step]]
path = "/many"
[[scenario.step]]
path = "/cookies"
check = ["json.count == 64", "json.huge == false"]
"#;

/// What the hostile target served, per path.
fn served(addr: &str) -> BTreeMap<String, u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /__stats HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("ask");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(p, n)| Some((p.to_string(), n.trim().parse().ok()?)))
        .collect()
}

#[test]
fn hostile_answers_are_bounded_and_every_flow_is_counted() {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("coordinator/tests/support/hostile_http.py"));
    let mut target = Proc::spawn(cmd, "hostile target");
    let line = target.wait_for_line("listening on", Duration::from_secs(20));
    let addr = line.rsplit(' ').next().expect("address").to_string();
    let dir = temp_dir("flows-hostile");
    let plan = write_plan(&dir, &PLAN.replace("ADDR", &addr));
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-hostile-run",
        &["run", plan, "--local-agents", "2", "--drain", "10s"],
    );
    let served = served(&addr);
    let scenario = |name: &str| {
        r["scenarios"]
            .as_array()
            .expect("scenarios")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("scenario {name}: {output}"))
            .clone()
    };
    // The work was done: ten flows each, every request the target saw is
    // a step the report counts sent.
    for (name, path) in [
        ("big", "/big"),
        ("deep", "/deep"),
        ("regex", "/aaaa"),
        ("storm", "/storm"),
        ("jar", "/many"),
    ] {
        let s = scenario(name);
        assert_eq!(u(&s["flows"]["started"]), 10, "{name}: {output}");
        assert_eq!(
            u(&s["steps"][0]["sent"]),
            served[path],
            "{name}: {served:?}"
        );
        assert_eq!(
            u(&s["steps"][0]["completed"]),
            10,
            "{name}: {}",
            s["steps"][0]
        );
    }
    // Only the first MiB of a body is kept: the token at the end of 10 MiB
    // is not there to capture.
    assert_eq!(
        u(&scenario("big")["flows"]["failed_by_reason"]["capture"]),
        10
    );
    // JSON nested deeper than 64 is not read as JSON.
    assert_eq!(
        u(&scenario("deep")["flows"]["failed_by_reason"]["capture"]),
        10
    );
    // A linear-time regex finds no match and takes no time over it.
    let regex = scenario("regex");
    assert_eq!(
        u(&regex["flows"]["failed_by_reason"]["capture"]),
        10,
        "{regex}"
    );
    assert_eq!(u(&regex["steps"][0]["checks"][0]["passed"]), 10, "{regex}");
    assert!(f(&regex["flows"]["latency_ms"]["max"]) < 2000.0, "{regex}");
    // A head of 1,001 headers is refused as a protocol error: the flow
    // fails there and its next step is not reached, counted.
    let storm = scenario("storm");
    assert_eq!(
        u(&storm["flows"]["failed_by_reason"]["error"]),
        10,
        "{storm}"
    );
    assert_eq!(
        u(&storm["steps"][1]["not_reached"]["flow_failed"]),
        10,
        "{storm}"
    );
    // A flow's jar keeps 64 cookies of the 91 set, and not the 8 KiB one.
    let jar = scenario("jar");
    assert_eq!(
        served.get("/cookies").copied(),
        Some(10),
        "{served:?} {jar}"
    );
    assert_eq!(u(&jar["flows"]["completed"]), 10, "{jar}");
    for check in jar["steps"][1]["checks"].as_array().expect("checks") {
        assert_eq!(u(&check["passed"]), 10, "{check}");
    }
    assert_exit_follows_the_report(status.code(), &r, &output);
}

/// A data file deals one row per flow, to every step of it: three steps
/// render the row's user, and the target sees each user exactly as often
/// as the rows dealt it, three times per flow, with a random pick too.
#[test]
fn a_data_row_is_dealt_once_per_flow_to_all_its_steps() {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("coordinator/tests/support/hostile_http.py"));
    let mut target = Proc::spawn(cmd, "target");
    let line = target.wait_for_line("listening on", Duration::from_secs(20));
    let addr = line.rsplit(' ').next().expect("address").to_string();
    let dir = temp_dir("flows-rows");
    let users: String = (0..5).map(|i| format!("user{i}\n")).collect();
    std::fs::write(dir.join("users.csv"), format!("user\n{users}")).expect("write users.csv");
    let steps = "[[scenario.step]]\npath = \"/seen?u={{data.user}}&s=1\"\n\
                 [[scenario.step]]\npath = \"/seen?u={{data.user}}&s=2\"\n\
                 [[scenario.step]]\npath = \"/seen?u={{data.user}}&s=3\"\n";
    let plan = write_plan(
        &dir,
        &format!(
            "[target]\nurl = \"http://{addr}\"\n\n\
             [[scenario]]\nname = \"turns\"\nrate = 20\nduration = \"2s\"\ndata = {{ file = \"users.csv\" }}\n{steps}\n\
             [[scenario]]\nname = \"drawn\"\nrate = 20\nduration = \"2s\"\ndata = {{ file = \"users.csv\", pick = \"random\" }}\n{}",
            steps.replace("&s=", "&r=")
        ),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-rows-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let served = served(&addr);
    for s in r["scenarios"].as_array().expect("scenarios") {
        assert_eq!(u(&s["flows"]["completed"]), 40, "{output}");
    }
    // In turn: 40 flows over 5 rows, 8 flows per user, each step once.
    for i in 0..5 {
        for step in 1..=3 {
            let key = format!("seen?u=user{i}&s={step}");
            assert_eq!(served.get(&key).copied(), Some(8), "{key}: {served:?}");
        }
    }
    // Drawn at random, once per flow: each user's three steps agree.
    let mut drawn = 0;
    for i in 0..5 {
        let n: Vec<u64> = (1..=3)
            .map(|step| {
                served
                    .get(&format!("seen?u=user{i}&r={step}"))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        assert!(n.iter().all(|x| *x == n[0]), "user{i}: {n:?} {served:?}");
        drawn += n[0];
    }
    assert_eq!(drawn, 40, "{served:?}");
    assert_ok_or_saturated(status, &r, &output);
}
