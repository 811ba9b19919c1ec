//! Flows through the real binaries: a coordinator, two agent processes and
//! the testbed's shop (`--shop`), which accepts only the ids it issued and
//! only with the session cookie and bearer token its login set. So a flow
//! that completes proves its captures, its cookie jar and its templates
//! worked, and the shop's own counts are the ground truth for each step.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;

/// The purchase flow of docs/plans.md against the shop at `addr`, at
/// `rate` flows per second for `secs` seconds; `payment_check` is the last
/// step's check.
pub(crate) fn purchase(addr: &str, rate: u32, secs: u32, payment_check: &str) -> String {
    format!(
        r#"
[target]
url = "http://{addr}"

[[scenario]]
name = "purchase"
rate = {rate}
duration = "{secs}s"

[[scenario.step]]
name = "login"
method = "POST"
path = "/login"
body = '{{"user": "u{{{{seq}}}}"}}'
capture = {{ token = "json.token" }}

[[scenario.step]]
name = "cart_add"
method = "POST"
path = "/cart"
body = '{{"item": {{{{seq}}}}}}'
check = ["status == 201", "json.cart_id exists"]
capture = {{ cart = "json.cart_id" }}
think = "5ms..20ms"

[[scenario.step]]
name = "order_create"
method = "POST"
path = "/orders"
headers = {{ "Authorization" = "Bearer {{{{token}}}}" }}
body = '{{"cart": "{{{{cart}}}}"}}'
capture = {{ order = "json.order.id", where = "header.location" }}

[[scenario.step]]
name = "payment_create"
method = "POST"
path = "/payments/{{{{order}}}}"
check = [{payment_check}]
"#
    )
}

/// The report's flows and steps of its one scenario.
fn flows_and_steps(r: &Value) -> (&Value, &Vec<Value>) {
    let s = &r["scenarios"][0];
    (&s["flows"], s["steps"].as_array().expect("steps"))
}

/// Every flow and step count adds up: intended = started + unsent,
/// started = completed + failed + in flight at the end, each step's
/// reached = sent + unsent, and the first step reached by every flow
/// started.
fn assert_flows_add_up(r: &Value) {
    let (flows, steps) = flows_and_steps(r);
    assert_eq!(
        u(&flows["intended"]),
        u(&flows["started"]) + u(&flows["unsent"]["total"]),
        "{flows}"
    );
    assert_eq!(
        u(&flows["started"]),
        u(&flows["completed"]) + u(&flows["failed"]) + u(&flows["in_flight_at_end"]),
        "{flows}"
    );
    let by_reason: u64 = flows["failed_by_reason"]
        .as_object()
        .expect("failed_by_reason")
        .values()
        .map(u)
        .sum();
    assert_eq!(by_reason, u(&flows["failed"]), "{flows}");
    assert_eq!(u(&steps[0]["reached"]), u(&flows["started"]), "{steps:?}");
    for s in steps {
        let unsent: u64 = s["unsent"]
            .as_object()
            .expect("unsent")
            .values()
            .map(u)
            .sum();
        assert_eq!(u(&s["reached"]), u(&s["sent"]) + unsent, "{s}");
    }
}

fn shop(stats: &BTreeMap<String, u64>, key: &str) -> u64 {
    stats.get(key).copied().unwrap_or(0)
}

#[test]
fn a_purchase_flow_is_counted_step_by_step_and_the_shop_agrees() {
    let (_testbed, addr) = start_testbed(&["--shop", "--delay", "2ms"]);
    let dir = temp_dir("flows-purchase");
    let plan = write_plan(
        &dir,
        &purchase(
            &addr,
            40,
            3,
            r#""status == 200", "json.status == \"paid\"""#,
        ),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-purchase-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    // The work was done: 120 flows, each one through all four steps.
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["intended"]), 120, "{output}");
    assert_eq!(u(&flows["started"]), 120, "{output}");
    assert_flows_add_up(&r);
    // The shop refused nothing: every id and token the flows sent on was
    // one it issued, to that flow's session.
    for key in [
        "shop_orders_refused",
        "shop_payments_refused",
        "shop_unauthorized",
    ] {
        assert_eq!(shop(&stats, key), 0, "{key}: {stats:?}\n{output}");
    }
    for (step, key) in steps.iter().zip([
        "shop_login_served",
        "shop_cart_served",
        "shop_orders_served",
        "shop_payments_served",
    ]) {
        assert_eq!(
            u(&step["sent"]),
            shop(&stats, key),
            "{} vs {key}: {stats:?}",
            step["name"]
        );
        assert_eq!(u(&step["completed"]), u(&step["sent"]), "{step}");
    }
    assert_eq!(u(&flows["completed"]), 120, "{flows}\n{output}");
    assert_eq!(u(&flows["failed"]), 0, "{flows}");
    let pay = &steps[3];
    assert_eq!(u(&pay["checks"][1]["passed"]), 120, "{pay}");
    // A flow lasts at least its four 2 ms answers and its 5 ms think.
    assert!(f(&flows["latency_ms"]["p50"]) >= 13.0, "{flows}");
    assert!(
        f(&flows["active_ms"]["p50"]) < f(&flows["latency_ms"]["p50"]),
        "{flows}"
    );
    assert!(output.contains("flows of purchase:"), "{output}");
    assert_ok_or_saturated(status, &r, &output);
}

#[test]
fn a_check_failing_on_a_known_share_fails_exactly_those_flows() {
    // The shop declines every fourth payment: 200 {"status": "declined"}.
    let (_testbed, addr) = start_testbed(&["--shop", "--shop-decline", "0.25"]);
    let dir = temp_dir("flows-decline");
    let plan = write_plan(
        &dir,
        &purchase(&addr, 40, 2, r#""json.status == \"paid\"""#),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-decline-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["started"]), 80, "{output}");
    assert_flows_add_up(&r);
    let declined = shop(&stats, "shop_payments_declined");
    assert_eq!(declined, 20, "{stats:?}");
    assert_eq!(u(&flows["failed"]), declined, "{flows}");
    assert_eq!(u(&flows["failed_by_reason"]["check"]), declined, "{flows}");
    let check = &steps[3]["checks"][0];
    assert_eq!(
        (u(&check["passed"]), u(&check["failed"])),
        (60, 20),
        "{check}"
    );
    assert_eq!(u(&flows["completed"]), 60, "{flows}");
    assert_exit_follows_the_report(status.code(), &r, &output);
}

#[test]
fn a_capture_that_finds_nothing_ends_the_flow_and_the_rest_is_not_reached() {
    let (_testbed, addr) = start_testbed(&["--shop"]);
    let dir = temp_dir("flows-capture");
    let text = purchase(&addr, 20, 2, r#""status == 200""#).replace(
        r#"capture = { token = "json.token" }"#,
        r#"capture = { token = "json.no_such_key" }"#,
    );
    let plan = write_plan(&dir, &text);
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-capture-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["started"]), 40, "{output}");
    assert_eq!(shop(&stats, "shop_login_served"), 40, "{stats:?}");
    assert_flows_add_up(&r);
    assert_eq!(u(&flows["failed_by_reason"]["capture"]), 40, "{flows}");
    for s in &steps[1..] {
        assert_eq!(u(&s["reached"]), 0, "{s}");
        assert_eq!(u(&s["not_reached"]["flow_failed"]), 40, "{s}");
    }
    assert_eq!(shop(&stats, "shop_cart_served"), 0, "{stats:?}");
    assert_exit_follows_the_report(status.code(), &r, &output);
}

/// A login then a cart, no think time: the shortest flow that needs what
/// its first step captured (the session cookie).
fn two_steps(addr: &str, load: &str, secs: u32) -> String {
    format!(
        r#"
[target]
url = "http://{addr}"

[[scenario]]
name = "short"
{load}
duration = "{secs}s"

[[scenario.step]]
name = "login"
method = "POST"
path = "/login"

[[scenario.step]]
name = "cart_add"
method = "POST"
path = "/cart"
check = ["status == 201"]
"#
    )
}

/// A 2 s stall of the target in a 10 s constant-rate run. Every flow that
/// started during the stall waits for its end, so its latency is the rest
/// of the stall from its own intended start: uniform over 0..2 s for the
/// 20% of flows that started in it. The top 10% of all flows are the half
/// of those that started first, so p90 is about 1 s and the max about 2 s;
/// a generator that timed each step from its send would show none of it,
/// and none of them may be missing from the figures.
#[test]
fn a_stall_of_the_target_shows_in_every_flow_that_touched_it() {
    let (testbed, addr) = start_testbed(&["--shop", "--delay", "1ms"]);
    let dir = temp_dir("flows-stall");
    let plan = write_plan(&dir, &two_steps(&addr, "rate = 20", 10));
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "2", "--drain", "5s", "--out"])
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    wait_for_run_second(&mut c, 4);
    signal(testbed.pid(), nix::sys::signal::Signal::SIGSTOP as i32);
    std::thread::sleep(std::time::Duration::from_secs(2));
    signal(testbed.pid(), nix::sys::signal::Signal::SIGCONT as i32);
    let (status, output) = c.wait(std::time::Duration::from_secs(90));
    let r = read_report(&out);
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["started"]), 200, "{output}");
    assert_flows_add_up(&r);
    assert_eq!(
        u(&flows["completed"]),
        200,
        "none dropped: {flows}\n{output}"
    );
    assert_eq!(u(&steps[1]["completed"]), 200, "{output}");
    let latency = &flows["latency_ms"];
    let (p90, max) = (f(&latency["p90"]), f(&latency["max"]));
    assert!((700.0..=1400.0).contains(&p90), "p90 {p90} ms: {latency}");
    assert!((1800.0..=2800.0).contains(&max), "max {max} ms: {latency}");
    assert!(
        f(&latency["p50"]) < 100.0,
        "most flows missed the stall: {latency}"
    );
    assert_exit_follows_the_report(status.code(), &r, &output);
}

/// Closed model: each client loops the flow, pausing the scenario's think
/// time between flows; every flow it started ended.
#[test]
fn closed_clients_loop_the_flow() {
    let (_testbed, addr) = start_testbed(&["--shop", "--delay", "5ms"]);
    let dir = temp_dir("flows-closed");
    let plan = write_plan(
        &dir,
        &two_steps(
            &addr,
            "model = \"closed\"\nclients = 4\nthink = \"20ms\"",
            3,
        ),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-closed-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    let (flows, steps) = flows_and_steps(&r);
    // 4 clients, each flow at least 10 ms of answers and 20 ms of think:
    // at most 3 s / 30 ms = 100 flows each.
    let started = u(&flows["started"]);
    assert!((40..=400).contains(&started), "{flows}\n{output}");
    assert_flows_add_up(&r);
    assert_eq!(u(&flows["failed"]), 0, "{flows}");
    assert_eq!(
        shop(&stats, "shop_cart_served"),
        u(&steps[1]["sent"]),
        "{stats:?}"
    );
    assert_eq!(r["scenarios"][0]["model"], "closed");
    assert_ok_or_saturated(status, &r, &output);
}

/// Poisson arrivals of flows: a different count every run, the same
/// accounting.
#[test]
fn poisson_flows_add_up() {
    let (_testbed, addr) = start_testbed(&["--shop"]);
    let dir = temp_dir("flows-poisson");
    let plan = write_plan(
        &dir,
        &two_steps(&addr, "rate = 50\nprocess = \"poisson\"", 3),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-poisson-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    let (flows, steps) = flows_and_steps(&r);
    assert!(u(&flows["started"]) > 60, "{flows}\n{output}");
    assert_flows_add_up(&r);
    assert_eq!(
        shop(&stats, "shop_login_served"),
        u(&steps[0]["sent"]),
        "{stats:?}"
    );
    assert_eq!(u(&flows["completed"]), u(&flows["started"]), "{flows}");
    assert_ok_or_saturated(status, &r, &output);
}

/// An agent frozen (SIGSTOP) for 0.8 s, less than it takes to be declared
/// lost: the flows it was late to start carry that lateness in their
/// latency and in the first step's start lag, and the flows it had under
/// way in the next steps' start lag; none is dropped.
#[test]
fn flows_an_agent_was_late_to_start_show_it() {
    const TOKEN: &str = "flows-sigstop";
    let (_testbed, addr) = start_testbed(&["--shop", "--delay", "1ms"]);
    let dir = temp_dir("flows-sigstop");
    let plan = write_plan(&dir, &two_steps(&addr, "rate = 40", 6));
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--listen", "127.0.0.1:0", "--token", TOKEN])
        .args(["--expect-agents", "2", "--drain", "3s", "--out"])
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let control = control_url(&mut c);
    let agent = |source: &str| {
        let mut cmd = std::process::Command::new(bin("loadfleet-agent"));
        cmd.args(["--coordinator", &control, "--token", TOKEN])
            .args(["--bind", source, "--id", source]);
        Proc::spawn(cmd, &format!("agent {source}"))
    };
    let _a = agent("127.0.0.2");
    let b = agent("127.0.0.3");
    wait_for_run_second(&mut c, 2);
    signal(b.pid(), nix::sys::signal::Signal::SIGSTOP as i32);
    std::thread::sleep(std::time::Duration::from_millis(800));
    signal(b.pid(), nix::sys::signal::Signal::SIGCONT as i32);
    let (status, output) = c.wait(std::time::Duration::from_secs(90));
    let r = read_report(&out);
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["intended"]), 240, "{output}");
    assert_flows_add_up(&r);
    assert_eq!(
        u(&flows["completed"]),
        u(&flows["started"]),
        "none dropped: {flows}\n{output}"
    );
    let lag = f(&steps[0]["start_lag_ms"]["max"]);
    assert!(
        lag >= 600.0,
        "the first step's start lag: {lag} ms\n{output}"
    );
    let max = f(&flows["latency_ms"]["max"]);
    assert!(max >= 600.0, "the flow latency: {max} ms\n{output}");
    assert!(f(&flows["latency_ms"]["p50"]) < 100.0, "{flows}");
    assert_exit_follows_the_report(status.code(), &r, &output);
}

/// A server we did not write sets the session: nginx answers the login with
/// a `Set-Cookie` and a token, and answers the account page 200 only with
/// that cookie and that bearer token (401 otherwise). Every flow's second
/// step got through: its jar sent the cookie, its template the token.
#[test]
fn cookies_and_bearer_tokens_reach_nginx() {
    let dir = temp_dir("flows-nginx");
    let nginx = crate::nginx::Nginx::start(
        &dir,
        r#"
  location = /login {
    add_header Set-Cookie "session=n1; Path=/; HttpOnly";
    default_type application/json;
    return 200 '{"token": "t1"}';
  }
  location = /account {
    set $ok "";
    if ($cookie_session = "n1") { set $ok "cookie"; }
    if ($http_authorization = "Bearer t1") { set $ok "${ok}+token"; }
    if ($ok != "cookie+token") { return 401; }
    return 200 'yours';
  }
"#,
    );
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{}"

[[scenario]]
name = "account"
rate = 20
duration = "2s"

[[scenario.step]]
method = "POST"
path = "/login"
capture = {{ token = "json.token" }}

[[scenario.step]]
path = "/account"
headers = {{ "Authorization" = "Bearer {{{{token}}}}" }}
check = ["status == 200", "body contains \"yours\""]
"#,
            nginx.addr
        ),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-nginx-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let statuses = nginx.statuses();
    let (flows, steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["started"]), 40, "{output}");
    assert_eq!(
        statuses.len(),
        80,
        "nginx answered both steps of 40 flows: {statuses:?}"
    );
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_flows_add_up(&r);
    assert_eq!(u(&flows["completed"]), 40, "{flows}");
    assert_eq!(u(&steps[1]["checks"][1]["passed"]), 40, "{}", steps[1]);
    assert_ok_or_saturated(status, &r, &output);
}

/// `search` over a flow scenario searches its rate of flows: the built-in
/// shop with 4 workers of 20 ms answers at most 200 requests a second, so
/// 100 two-step flows a second, and a search for p99 < 300 ms finds no
/// more than that, and most of it.
#[test]
fn search_finds_the_flow_rate_the_shop_sustains() {
    let dir = temp_dir("flows-search");
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\n\n[[scenario]]\nname = \"short\"\nrate = 20\nduration = \"3s\"\n\n\
         [[scenario.step]]\nname = \"login\"\nmethod = \"POST\"\npath = \"/login\"\n\n\
         [[scenario.step]]\nname = \"cart_add\"\nmethod = \"POST\"\npath = \"/cart\"\ncheck = [\"status == 201\"]\n",
    );
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("search")
        .arg(&plan)
        .args([
            "--local-agents",
            "2",
            "--testbed-delay",
            "20ms",
            "--testbed-pool",
            "4",
        ])
        .args([
            "--slo",
            "p99<300ms",
            "--from",
            "40",
            "--to",
            "320",
            "--step",
            "2s",
        ])
        .arg("--out")
        .arg(&out);
    let (status, output) = run(
        cmd,
        "coordinator search",
        std::time::Duration::from_secs(170),
    );
    let text = std::fs::read_to_string(out.join("search.json"))
        .unwrap_or_else(|e| panic!("no search.json (exit {:?}): {e}\n{output}", status.code()));
    let s: Value = serde_json::from_str(&text).expect("search.json is JSON");
    assert_eq!(status.code(), Some(0), "{output}");
    // Each step ran the flow: its report has flows and both steps.
    let step1 = read_report(&out.join("step-01"));
    assert!(
        u(&step1["scenarios"][0]["flows"]["started"]) > 0,
        "{output}"
    );
    let capacity = f(&s["result"]["capacity"]);
    assert!(
        (70.0..=105.0).contains(&capacity),
        "capacity {capacity}: {output}"
    );
}

/// The purchase flow over HTTP/2 (h2c, which the testbed speaks on the
/// same port): cookies, tokens and ids go through as over HTTP/1.1, and
/// every connection spoke h2c.
#[test]
fn a_purchase_flow_runs_over_http2() {
    let (_testbed, addr) = start_testbed(&["--shop", "--delay", "2ms"]);
    let dir = temp_dir("flows-h2");
    let plan = write_plan(
        &dir,
        &purchase(&addr, 20, 2, r#""json.status == \"paid\"""#)
            .replace("[target]\n", "[target]\nprotocol = \"h2\"\n"),
    );
    let plan = plan.to_str().expect("a UTF-8 path");
    let (status, output, r, _out) = run_report(
        "flows-h2-run",
        &["run", plan, "--local-agents", "2", "--drain", "5s"],
    );
    let stats = testbed_counts(&addr);
    let (flows, _steps) = flows_and_steps(&r);
    assert_eq!(u(&flows["started"]), 40, "{output}");
    assert_flows_add_up(&r);
    assert_eq!(shop(&stats, "shop_payments_served"), 40, "{stats:?}");
    assert_eq!(u(&flows["completed"]), 40, "{flows}");
    let spoken = &r["run"]["protocol"]["connections"];
    assert!(
        u(&spoken["h2c"]) > 0 && count_of(spoken, "http1") == 0,
        "{spoken}"
    );
    assert_ok_or_saturated(status, &r, &output);
}
