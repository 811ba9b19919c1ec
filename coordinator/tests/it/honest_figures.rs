//! Issue 13, items 3, 4, 5, 9 and 10, through the real binaries: each test
//! reproduces what a user saw (a limit of the generator's own pool hidden,
//! requests without an outcome, nearly everything unsent, words meaning two
//! things, figures that disagree) and asserts what the report says now.
//! Counts are asserted exactly; times and shares get slack, because these
//! runs share two cores with much else.

use crate::common;

use common::*;
use serde_json::Value;

/// The testbed's pool of 10 at 100 ms answers 100 req/s; 300 req/s from
/// two agents whose pools are capped at 64 connections each cannot reach
/// its pool's queue: the agents' 128 connections make it a closed model,
/// and GENERATOR_POOL says so, with the figures. (Uncapped, the agents open
/// what the load needs: tests/open_model.rs.)
#[test]
fn agents_connection_limit_is_generator_pool() {
    let (_testbed, addr) =
        start_testbed(&["--pool", "10", "--delay", "100ms", "--pool-timeout", "2s"]);
    let url = format!("http://{addr}/");
    let (status, output, r, _) = run_report(
        "gen-pool",
        &[
            "run",
            "--url",
            &url,
            "--local-agents",
            "2",
            "--rate",
            "300",
            "--duration",
            "4s",
            "--drain",
            "1s",
            "--max-connections",
            "64",
        ],
    );
    let pool =
        verdict(&r, "GENERATOR_POOL").unwrap_or_else(|| panic!("no GENERATOR_POOL: {output}"));
    assert_eq!(pool["level"], "error", "{pool}");
    let message = pool["message"].as_str().expect("message");
    assert!(
        message.contains("at most 128 concurrent requests"),
        "{message}"
    );
    assert!(message.contains("p99"), "{message}");
    assert_eq!(u(&r["run"]["connections_per_agent"]), 64);
    let waits = &r["totals"]["pool_wait_ms"];
    assert!(
        u(&waits["count"]) > 100,
        "requests waited for a connection: {waits}"
    );
    for a in r["agents"].as_array().expect("agents") {
        assert!(
            f(&a["pool_saturated_share"]) > 0.05,
            "each agent's pool was saturated for a good share of the run: {a}"
        );
    }
    assert_eq!(status.code(), Some(3), "{output}");
    assert!(output.contains("GENERATOR_POOL"), "{output}");
    assert!(output.contains("pool wait"), "{output}");
    assert!(output.contains("pool busy"), "{output}");
}

/// One connection and a 300 ms timeout against a 100 ms service, at 100
/// req/s. A freed connection always goes to the oldest waiter, which has
/// almost none of its wait left: it has its whole timeout on the wire and
/// is answered, and those whose wait ran out are unsent `pool_timeout`,
/// never the target's `timeout`.
#[test]
fn timeouts_spent_waiting_for_the_pool_are_pool_timeouts() {
    let (_testbed, addr) = start_testbed(&["--delay", "100ms"]);
    let url = format!("http://{addr}/");
    let (status, output, r, _) = run_report(
        "pool-timeout",
        &[
            "run",
            "--url",
            &url,
            "--local-agents",
            "1",
            "--rate",
            "100",
            "--duration",
            "2s",
            "--connections",
            "1",
            "--max-connections",
            "1",
            "--timeout",
            "300ms",
            "--drain",
            "1s",
        ],
    );
    let t = &r["totals"];
    let pool_timeouts = count_of(&t["unsent"], "pool_timeout");
    assert!(pool_timeouts > 100, "{}\n{output}", t["unsent"]);
    assert_eq!(
        count_of(&t["errors"], "timeout"),
        0,
        "a request that waited for the agent's connection is not the target's timeout: {}",
        t["errors"]
    );
    assert!(count_of(&t["status"], "200") > 10, "{output}");
    let pool = verdict(&r, "GENERATOR_POOL").expect("GENERATOR_POOL");
    assert_eq!(pool["level"], "error", "{pool}");
    assert!(
        pool["message"]
            .as_str()
            .unwrap_or("")
            .contains("pool_timeout"),
        "{pool}"
    );
    assert_eq!(status.code(), Some(3), "{output}");
}

/// Item 4: requests still in flight when the drain ends have no outcome;
/// the slowest are exactly the ones left out. 1 s answers with a 200 ms
/// drain leave every request sent in the last ~0.8 s without one.
#[test]
fn requests_without_an_outcome_are_incomplete_and_latency_a_lower_bound() {
    let (status, output, r, _) = run_report(
        "incomplete",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--drain",
            "200ms",
            "--testbed-delay",
            "1s",
            "--threshold",
            "incomplete==0",
            "--threshold",
            "incomplete<1%",
        ],
    );
    let t = &r["totals"];
    let left = u(&t["in_flight_at_end"]);
    assert!(left >= 20, "{t}");
    assert_eq!(left, u(&t["sent"]) - u(&t["completed"]));
    assert_eq!(t["latency_lower_bound"], true);
    let incomplete = verdict(&r, "INCOMPLETE").unwrap_or_else(|| panic!("no INCOMPLETE: {output}"));
    assert_eq!(incomplete["level"], "error", "{incomplete}");
    assert!(
        incomplete["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{left} of ")),
        "{incomplete}"
    );
    let checked = r["thresholds"].as_array().expect("thresholds");
    assert!(checked.iter().all(|c| c["passed"] == false), "{checked:?}");
    assert_eq!(f(&checked[0]["actual"]), left as f64);
    assert_eq!(checked[1]["unit"], "%");
    // Every view agrees: the scenario, the agent's own count, the text.
    assert_eq!(u(&r["scenarios"][0]["in_flight_at_end"]), left);
    assert_eq!(u(&r["agents"][0]["in_flight_at_end"]), left);
    assert!(output.contains("LOWER BOUNDS"), "{output}");
    assert_eq!(status.code(), Some(3), "{output}");
}

/// Item 5: with `--max-lag 50us` nearly every arrival is unsent as late
/// (1,490 of 1,500 on the run the issue saw) and the run exited 0 with a
/// warning. Above 5% unsent it is an error: the load offered was not the
/// load planned.
///
/// Arrivals every 125 µs against the 500 µs wake quantum make the lateness
/// certain rather than a matter of the machine: arrivals wait for the next
/// wake-up, up to 500 µs, and most leave more than the 50 µs allowed late,
/// however quiet the machine.
#[test]
fn mostly_unsent_is_an_error() {
    let (status, output, r, _) = run_report(
        "unsent",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "8000",
            "--duration",
            "2s",
            "--max-lag",
            "50us",
            "--testbed-delay",
            "1ms",
        ],
    );
    let t = &r["totals"];
    let (unsent, intended) = (u(&t["unsent"]["total"]), u(&t["intended"]));
    assert_eq!(intended, 16_000);
    assert!(
        unsent * 20 > intended,
        "more than 5% of arrivals are late at 50 µs: {t}"
    );
    let v = verdict(&r, "UNSENT").expect("UNSENT");
    assert_eq!(v["level"], "error", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{unsent} of 16000")),
        "{v}"
    );
    assert_eq!(status.code(), Some(3), "{output}");
}

/// Item 9: with 20% of answers 500, the `errors` line said `-` while
/// `errors<1%` failed at a bare "19.667", and throughput counted the 500s.
/// Now errors (no status), failures (errors + 4xx + 5xx) and the successful
/// throughput each have their own name, and a threshold shows its unit.
#[test]
fn errors_failures_and_successful_throughput_are_told_apart() {
    let (_testbed, addr) = start_testbed(&["--error-rate", "0.2", "--delay", "2ms"]);
    let url = format!("http://{addr}/");
    let (status, output, r, _) = run_report(
        "words",
        &[
            "run",
            "--url",
            &url,
            "--local-agents",
            "1",
            "--rate",
            "150",
            "--duration",
            "2s",
            "--threshold",
            "failures<1%",
            "--threshold",
            "errors<1%",
            "--threshold",
            "ok_rps>=1000",
        ],
    );
    let t = &r["totals"];
    let five = count_of(&t["status"], "500");
    assert!(five > 20 && five < 120, "about 20% of 300: {t}");
    assert_eq!(
        u(&t["failures"]),
        five,
        "no transport errors, so failures are the 500s"
    );
    assert!(t["errors"].as_object().expect("errors").is_empty(), "{t}");
    let window = f(&r["run"]["window_s"]);
    let ok = u(&t["completed_ok_in_window"]);
    assert!(ok < u(&t["completed_in_window"]), "{t}");
    assert!(
        (f(&t["throughput_ok_rps"]) - ok as f64 / window).abs() < 1e-6,
        "{t}"
    );
    assert!(f(&t["throughput_ok_rps"]) < f(&t["throughput_rps"]), "{t}");
    let checked = r["thresholds"].as_array().expect("thresholds");
    let failures = &checked[0];
    assert_eq!(
        (failures["passed"].clone(), failures["unit"].clone()),
        (Value::Bool(false), Value::from("%"))
    );
    let share = f(&failures["actual"]);
    assert!(share > 5.0 && share < 40.0, "{failures}");
    assert_eq!(
        checked[1]["passed"], true,
        "no transport error at all: {checked:?}"
    );
    assert_eq!(checked[2]["unit"], "req/s");
    assert!(output.contains(&format!("failures  {five} (")), "{output}");
    assert!(
        output.contains(&format!("FAIL failures<1% (actual {share:.2}%)")),
        "{output}"
    );
    assert!(output.contains("req/s ok)"), "{output}");
    // 1 for the failed threshold (3 if the machine held the agent up).
    assert_exit_follows_the_report(status.code(), &r, &output);
}

/// Item 10: on an overload run (two scenarios against a testbed pool that
/// holds requests), the totals, the scenarios, the agents and the per-second
/// series tell one story: scenarios add up to the totals, intervals add up
/// to the totals, the agents' own in-flight counts add up to the totals,
/// and no interval's peak in flight is below what it ended with.
#[test]
fn totals_scenarios_agents_and_intervals_agree_on_an_overload_run() {
    let (_testbed, addr) =
        start_testbed(&["--pool", "10", "--delay", "100ms", "--pool-timeout", "2s"]);
    let dir = temp_dir("agree-plan");
    let plan = write_plan(
        &dir,
        &format!(
            "[run]\ndrain = \"1s\"\n\n[target]\nurl = \"http://{addr}/\"\nmax_in_flight = 200\n\n\
             [[scenario]]\nname = \"a\"\nrate = 150\nduration = \"3s\"\n\n\
             [[scenario]]\nname = \"b\"\nrate = 150\nduration = \"3s\"\n"
        ),
    );
    let plan = plan.to_string_lossy().into_owned();
    let (_, output, r, out) = run_report("agree", &["run", &plan, "--local-agents", "2"]);
    let t = &r["totals"];
    assert!(
        u(&t["in_flight_at_end"]) > 0,
        "the overload leaves requests in flight: {output}"
    );
    assert!(
        u(&t["unsent"]["total"]) > 0,
        "and the cap drops some: {output}"
    );
    let scenarios = r["scenarios"].as_array().expect("scenarios");
    assert_eq!(scenarios.len(), 2);
    for key in [
        "intended",
        "sent",
        "completed",
        "completed_in_window",
        "in_flight_at_end",
        "failures",
    ] {
        let sum: u64 = scenarios.iter().map(|s| u(&s[key])).sum();
        assert_eq!(sum, u(&t[key]), "scenarios' {key} add up to the totals");
    }
    for s in scenarios {
        assert_eq!(
            u(&s["in_flight_at_end"]),
            u(&s["sent"]) - u(&s["completed"]),
            "{s}"
        );
    }
    let agents = r["agents"].as_array().expect("agents");
    let agents_left: u64 = agents.iter().map(|a| u(&a["in_flight_at_end"])).sum();
    assert_eq!(
        agents_left,
        u(&t["in_flight_at_end"]),
        "the agents' own counts agree"
    );
    for a in agents {
        assert!(
            (f(&a["clock_uncertainty_ms"]) * 2.0 - f(&a["clock_rtt_ms"])).abs() < 1e-9,
            "{a}"
        );
    }
    let intervals = r["intervals"].as_array().expect("intervals");
    for key in ["intended", "sent", "completed", "errors"] {
        let sum: u64 = intervals.iter().map(|iv| u(&iv[key])).sum();
        let total = if key == "errors" {
            t["errors"]
                .as_object()
                .expect("errors")
                .values()
                .map(u)
                .sum()
        } else {
            u(&t[key])
        };
        assert_eq!(sum, total, "intervals' {key} add up to the totals");
    }
    for iv in intervals {
        assert!(u(&iv["max_in_flight"]) >= u(&iv["in_flight"]), "{iv}");
    }
    assert!(intervals.iter().any(|iv| u(&iv["in_flight"]) > 0));
    // The CSV holds the same series.
    let csv = std::fs::read_to_string(out.join("intervals.csv")).expect("intervals.csv");
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} in {head:?}"))
    };
    let (now, peak) = (col("in_flight"), col("max_in_flight"));
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let n = |i: usize| cells[i].parse::<u64>().expect("a count");
        assert!(n(peak) >= n(now), "{line}");
    }
}
