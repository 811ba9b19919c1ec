//! Live outputs: credentials and headers on every push (docs/outputs.md),
//! checked by a receiver that refuses a push without them (nginx in front
//! of a real Prometheus), and the pool-saturation counter of the scrape
//! endpoint (`--metrics-listen`, README.md).

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::nginx::Nginx;
use crate::outputs_support::{prometheus, promql_value, Receiver};

/// Prometheus behind nginx, which lets a push through only when
/// `checks` (nginx directives in its `server`) allow it. nginx checks
/// `auth_basic` only for a request it serves in its content phase, as
/// `proxy_pass` does (a `return` would answer before the check).
fn guarded_prometheus(dir: &Path, checks: &str) -> (Receiver, Nginx) {
    let prom = prometheus(dir);
    let gate_dir = dir.join("gate");
    std::fs::create_dir_all(&gate_dir).expect("gate folder");
    let gate = Nginx::start(
        &gate_dir,
        &format!(
            "{checks}\n location / {{ proxy_pass http://{}; }}",
            prom.addr
        ),
    );
    (prom, gate)
}

/// What every check of a pushed run starts with: load was sent, the
/// target answered all of it, and the receiver took every push.
fn assert_pushed(report: &serde_json::Value, target: &str, gate: &Nginx, output: &str) -> u64 {
    let sent = u(&report["totals"]["sent"]);
    assert!(sent > 0, "nothing sent:\n{output}");
    assert_eq!(testbed_counts(target)["total"], sent, "{output}");
    assert!(
        verdict(report, "OUTPUT_LOST").is_none(),
        "pushes were lost:\n{output}"
    );
    let statuses = gate.statuses();
    assert!(
        !statuses.is_empty(),
        "no push reached the receiver:\n{output}"
    );
    assert!(
        statuses.iter().all(|s| (200..300).contains(s)),
        "the receiver refused pushes: {statuses:?}\n{output}"
    );
    sent
}

/// `--out-basic-auth-file PATH`: `user:password` from a file (a trailing
/// newline is no part of it) goes as basic auth on every push, so a
/// receiver that demands it holds the run's figures.
#[test]
fn out_basic_auth_file_reaches_a_receiver_that_demands_it() {
    let dir = temp_dir("documented-basic-auth");
    // nginx's own `{PLAIN}` scheme: the password as written.
    std::fs::write(dir.join("htpasswd"), "loadfleet:{PLAIN}pw-basic-7\n").expect("htpasswd");
    let (prom, gate) = guarded_prometheus(
        &dir,
        &format!(
            "auth_basic \"receiver\"; auth_basic_user_file {};",
            dir.join("htpasswd").display()
        ),
    );
    let secret = dir.join("basic");
    std::fs::write(&secret, "loadfleet:pw-basic-7\n").expect("secret");
    let (_testbed, target) = start_testbed(&["--delay", "2ms"]);
    let url = format!("http://{target}/");
    let write_url = format!("http://{}/api/v1/write", gate.addr);
    let secret = secret.to_string_lossy().into_owned();
    let (status, output, r, _) = run_report(
        "documented-basic-auth-run",
        &[
            "run",
            "--local-agents",
            "1",
            "--url",
            &url,
            "--rate",
            "50",
            "--duration",
            "3s",
            "--drain",
            "1s",
            "--out-prometheus",
            &write_url,
            "--out-basic-auth-file",
            &secret,
            "--out-run-id",
            "basic-auth",
        ],
    );
    let sent = assert_pushed(&r, &target, &gate, &output);
    let pushed = promql_value(
        &prom.addr,
        r#"sum(loadfleet_requests_sent_total{run_id="basic-auth"})"#,
    );
    assert_eq!(pushed, sent as f64, "{output}");
    assert_eq!(status.code(), Some(0), "{output}");
}

/// `[[output]] headers = { NAME = "@PATH" }` reads the value from a file
/// beside the plan, and `headers_env = { NAME = "VAR" }` from the
/// environment: a receiver that demands both holds the run's figures.
#[test]
fn output_headers_from_a_file_and_the_environment_reach_the_receiver() {
    let dir = temp_dir("documented-headers");
    let (prom, gate) = guarded_prometheus(
        &dir,
        "if ($http_x_scope_orgid != \"tenant-7\") { return 403; }\n\
         if ($http_x_api_key != \"key-from-env-9\") { return 403; }",
    );
    let (_testbed, target) = start_testbed(&["--delay", "2ms"]);
    std::fs::write(dir.join("tenant"), "tenant-7\n").expect("header file");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{target}/"

[[scenario]]
rate = 50
duration = "3s"

[[output]]
kind = "prometheus"
url = "http://{}/api/v1/write"
headers = {{ "X-Scope-OrgID" = "@tenant" }}
headers_env = {{ "X-Api-Key" = "DOCUMENTED_API_KEY" }}
"#,
            gate.addr
        ),
    );
    let plan = plan.to_string_lossy().into_owned();
    let (status, output, r, _) = run_report_with_env(
        "documented-headers-run",
        &[
            "run",
            &plan,
            "--local-agents",
            "1",
            "--drain",
            "1s",
            "--out-run-id",
            "headers",
        ],
        &[("DOCUMENTED_API_KEY", "key-from-env-9")],
    );
    let sent = assert_pushed(&r, &target, &gate, &output);
    let pushed = promql_value(
        &prom.addr,
        r#"sum(loadfleet_requests_sent_total{run_id="headers"})"#,
    );
    assert_eq!(pushed, sent as f64, "{output}");
    assert_eq!(status.code(), Some(0), "{output}");
}

/// One scrape of `GET /metrics`; `None` once nothing listens.
fn scrape(addr: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The sum of a family's samples in an exposition, whatever its labels;
/// `None` when it has none.
fn sample_sum(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        .map(|rest| {
            let value = rest.rsplit(' ').next().unwrap_or("");
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name}{rest}: not a number"))
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// `loadfleet_pool_saturated_seconds_total` on the scrape endpoint: one
/// connection (`--max-connections 1`) to a target answering in 100 ms
/// serves 10 req/s, so at 40 req/s every connection of the agent is busy
/// the whole run. The counter climbs while the run goes, to most of the
/// saturated time the report gives (`pool_saturated_share` of the run) and
/// never past it.
#[test]
fn pool_saturated_seconds_are_scraped_while_the_run_goes() {
    let (_testbed, target) = start_testbed(&["--delay", "100ms"]);
    let metrics = format!("127.0.0.1:{}", closed_port());
    let out = temp_dir("documented-pool-saturated");
    let url = format!("http://{target}/");
    let mut cmd = coordinator();
    cmd.args(["run", "--local-agents", "1", "--url", &url])
        .args(["--rate", "40", "--duration", "6s", "--drain", "1s"])
        .args(["--connections", "1", "--max-connections", "1"])
        .args(["--metrics-listen", &metrics])
        .arg("--out")
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    wait_for_run_second(&mut c, 2);
    // Scrape until the endpoint goes with the process; the last scrape is
    // the run's end as the endpoint last showed it.
    let mut scrapes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(text) = scrape(&metrics) {
        let saturated = sample_sum(&text, "loadfleet_pool_saturated_seconds_total")
            .unwrap_or_else(|| panic!("no loadfleet_pool_saturated_seconds_total in:\n{text}"));
        scrapes.push(saturated);
        assert!(Instant::now() < deadline, "the endpoint outlived the run");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, output) = c.wait(Duration::from_secs(60));
    let r = read_report(&out);
    let sent = u(&r["totals"]["sent"]);
    assert!(sent > 0, "nothing sent:\n{output}");
    assert_eq!(testbed_counts(&target)["total"], sent, "{output}");
    let (first, last) = match (scrapes.first(), scrapes.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => panic!("the endpoint never answered:\n{output}"),
    };
    assert!(
        scrapes.windows(2).all(|w| w[0] <= w[1]),
        "a counter never falls: {scrapes:?}"
    );
    assert!(last > first, "it climbed while the run went: {scrapes:?}");
    let agent = &r["agents"][0];
    let report_s = f(&agent["pool_saturated_share"]) * f(&r["run"]["elapsed_s"]);
    assert!(
        report_s >= 5.0,
        "saturated {report_s} s of the run:\n{output}"
    );
    // The endpoint shows the seconds settled so far, so it trails the
    // report's total by the seconds still settling when the process ended.
    assert!(
        last <= report_s + 0.05 && last >= report_s / 2.0,
        "scraped {last} s, report {report_s} s: {scrapes:?}\n{output}"
    );
    let pool = verdict(&r, "GENERATOR_POOL").unwrap_or_else(|| panic!("{output}"));
    assert_eq!(pool["level"], "error", "{pool}");
    assert_eq!(status.code(), Some(3), "{output}");
}
