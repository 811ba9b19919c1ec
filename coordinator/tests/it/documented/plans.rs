//! Plan keys as docs/plans.md gives them: `[tls] insecure = true`,
//! `after = "NAME"` and `[run] seed`, each run against a testbed that
//! counts what reached it.

use serde_json::Value;

use crate::common::*;

/// Fleet-wide intended arrivals per one-second interval.
fn per_second(r: &Value) -> Vec<u64> {
    r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| u(&i["intended"]))
        .collect()
}

/// Runs `plan` (TOML, written into a fresh folder) with one local agent;
/// the exit status, the output and the report.
fn run_plan(test: &str, plan: &str) -> (Option<i32>, String, Value) {
    let dir = temp_dir(test);
    let plan = write_plan(&dir, plan);
    let plan = plan.to_string_lossy().into_owned();
    let (status, output, r, _) = run_report(
        &format!("{test}-out"),
        &["run", &plan, "--local-agents", "1"],
    );
    (status.code(), output, r)
}

/// `[tls] insecure = true`, "like --insecure": the agents take a
/// self-signed certificate they have no CA for, every request is
/// answered, and the report says the certificates went unchecked
/// (`run.tls.insecure`, the info verdict `INSECURE_TLS`).
#[test]
fn tls_insecure_in_a_plan_accepts_a_self_signed_target() {
    let dir = temp_dir("documented-insecure-certs");
    let (cert, key) = localhost_certificate(&dir);
    let (_testbed, target) = start_testbed(&["--tls-cert", &cert, "--tls-key", &key]);
    let (code, output, r) = run_plan(
        "documented-insecure",
        &format!(
            r#"
[run]
drain = "1s"

[target]
url = "https://{target}/"

[tls]
insecure = true

[[scenario]]
rate = 50
duration = "2s"
"#
        ),
    );
    let t = &r["totals"];
    let sent = u(&t["sent"]);
    assert_eq!(sent, 100, "{output}");
    assert_eq!(
        testbed_counts_tls(&target, &cert)["total"],
        sent,
        "{output}"
    );
    assert_eq!(count_of(&t["status"], "200"), sent, "{output}");
    assert_eq!(r["run"]["tls"]["insecure"], true, "{output}");
    let v = verdict(&r, "INSECURE_TLS").unwrap_or_else(|| panic!("{output}"));
    assert_eq!(v["level"], "info", "{v}");
    assert_eq!(code, Some(0), "{output}");
}

/// `after = "a"` starts a scenario when the one named `a` ends, not when
/// the one before it in the file does: `c` (100 req/s for 1 s) follows
/// `a` (50 req/s for 2 s) at 2 s while `b` (10 req/s) still runs until
/// 4 s, so the third second carries 110 arrivals.
#[test]
fn after_a_named_scenario_starts_when_that_one_ends() {
    let (_testbed, target) = start_testbed(&["--delay", "1ms"]);
    let (code, output, r) = run_plan(
        "documented-after",
        &format!(
            r#"
[run]
drain = "1s"

[target]
url = "http://{target}/"

[[scenario]]
name = "a"
rate = 50
duration = "2s"

[[scenario]]
name = "b"
rate = 10
duration = "4s"

[[scenario]]
name = "c"
after = "a"
rate = 100
duration = "1s"
"#
        ),
    );
    let sent = u(&r["totals"]["sent"]);
    assert_eq!(sent, 240, "{output}");
    assert_eq!(testbed_counts(&target)["total"], sent, "{output}");
    let c = &r["scenarios"][2];
    assert_eq!(c["name"], "c", "{output}");
    assert_eq!(f(&c["start_s"]), 2.0, "{c}");
    assert_eq!(u(&c["sent"]), 100, "{c}");
    let seconds = per_second(&r);
    assert_eq!(seconds[..4], [60, 60, 110, 10], "{seconds:?}");
    assert!(seconds[4..].iter().all(|&n| n == 0), "{seconds:?}");
    assert_eq!(code, Some(0), "{output}");
}

/// Two Poisson scenarios in sequence under `[run] seed`.
fn seeded(target: &str, seed: u64, scenarios: usize) -> String {
    let mut plan =
        format!("[run]\nseed = {seed}\ndrain = \"1s\"\n\n[target]\nurl = \"http://{target}/\"\n");
    for i in 0..scenarios {
        let after = if i > 0 { "after = \"previous\"\n" } else { "" };
        plan.push_str(&format!(
            "\n[[scenario]]\nname = \"s{i}\"\n{after}process = \"poisson\"\nrate = 200\nduration = \"2s\"\n"
        ));
    }
    plan
}

/// `[run] seed` makes Poisson arrivals reproducible, scenario *i* drawing
/// from seed + *i*: the second scenario of a plan seeded 42 has, second
/// by second, the arrivals of the first scenario of a plan seeded 43, and
/// not those of its own first scenario.
#[test]
fn run_seed_fixes_each_scenarios_poisson_arrivals() {
    let (_testbed, target) = start_testbed(&["--delay", "1ms"]);
    let (mut runs, mut codes) = (Vec::new(), Vec::new());
    for (test, seed, scenarios) in [("documented-seed-42", 42, 2), ("documented-seed-43", 43, 1)] {
        let before = testbed_counts(&target)["total"];
        let (code, output, r) = run_plan(test, &seeded(&target, seed, scenarios));
        let t = &r["totals"];
        let sent = u(&t["sent"]);
        assert_eq!(sent, u(&t["intended"]), "{output}");
        assert!(sent > 0, "{output}");
        assert_eq!(testbed_counts(&target)["total"] - before, sent, "{output}");
        assert_eq!(r["scenarios"][0]["process"], "poisson", "{output}");
        runs.push(per_second(&r));
        codes.push((code, output));
    }
    let (two, one) = (&runs[0], &runs[1]);
    assert_eq!(
        two[2..4],
        one[..2],
        "seed 42 + 1 is seed 43: {two:?} {one:?}"
    );
    assert_ne!(two[..2], two[2..4], "seed 42 is not seed 43: {two:?}");
    assert!(
        two[..4].iter().any(|&n| n != 200),
        "Poisson counts vary: {two:?}"
    );
    for (code, output) in codes {
        assert_eq!(code, Some(0), "{output}");
    }
}
