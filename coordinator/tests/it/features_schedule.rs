//! How the load is shaped, end to end against the testbed, each checked by
//! the figure it changes: Poisson arrivals and their seed, think time,
//! `steps` and a stage pinned with `at`, and `share = "cores"`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Fleet-wide intended arrivals per one-second interval.
fn per_second(r: &Value) -> Vec<u64> {
    r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| u(&i["intended"]))
        .collect()
}

fn poisson_run(test: &str, seed: &str) -> Vec<u64> {
    let (status, output, r, _) = run_report(
        test,
        &[
            "run",
            "--rate",
            "300",
            "--duration",
            "3s",
            "--process",
            "poisson",
            "--seed",
            seed,
            "--testbed-delay",
            "0ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    assert_eq!(r["scenarios"][0]["process"], "poisson", "{output}");
    let t = &r["totals"];
    assert_eq!(u(&t["sent"]), u(&t["intended"]), "{output}");
    per_second(&r)
}

/// The same seed gives the same arrivals, second by second; another seed
/// gives others; and neither is the uniform 300 a second.
#[test]
fn poisson_arrivals_follow_their_seed() {
    let first = poisson_run("poisson-seed-7a", "7");
    let again = poisson_run("poisson-seed-7b", "7");
    let other = poisson_run("poisson-seed-8", "8");
    assert_eq!(first, again, "one seed, one schedule");
    assert_ne!(first, other, "another seed, another schedule");
    assert!(
        first[..3].iter().any(|&n| n != 300),
        "Poisson counts vary: {first:?}"
    );
}

/// Four closed clients thinking 100 ms between requests to a target that
/// answers at once: each completes about ten a second, so 2 s hold at most
/// 4 × (2 s / 100 ms) = 80 (plus the four first ones), and on a busy
/// machine still well over half of that.
#[test]
fn think_time_paces_closed_clients() {
    let (status, output, r, _) = run_report(
        "think",
        &[
            "run",
            "--clients",
            "4",
            "--think",
            "100ms",
            "--duration",
            "2s",
            "--testbed-delay",
            "0ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = &r["scenarios"][0];
    assert_eq!(s["model"], "closed", "{output}");
    let completed = u(&s["completed"]);
    assert!(
        (40..=84).contains(&completed),
        "{completed} completed: {output}"
    );
    assert_eq!(u(&s["status"]["200"]), completed, "{output}");
}

/// `steps` expands to holds of one second each, and a stage pinned with
/// `at` leaves a pause before it: the arrivals per second are exactly the
/// steps' rates, then 100, nothing, 200.
#[test]
fn steps_and_at_shape_the_arrivals_per_second() {
    let dir = temp_dir("steps-at-plan");
    let plan = write_plan(
        &dir,
        r#"
[target]
url = "testbed"
[[scenario]]
name = "stairs"
steps = { from = 50, to = 150, step = 50, every = "1s" }
[[scenario]]
name = "pinned"
after = "previous"
stages = [{ rate = 100, for = "1s" }, { at = "2s", rate = 200, for = "1s" }]
"#,
    );
    let (status, output, r, _) = run_report(
        "steps-at",
        &[
            "run",
            plan.to_str().expect("utf-8 path"),
            "--testbed-delay",
            "0ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let seconds = per_second(&r);
    assert_eq!(
        seconds[..6],
        [50, 100, 150, 100, 0, 200],
        "{seconds:?}: {output}"
    );
    assert!(seconds[6..].iter().all(|&n| n == 0), "{seconds:?}");
    let pinned = r["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .find(|s| s["name"] == "pinned")
        .expect("the pinned scenario");
    assert_eq!(f(&pinned["start_s"]), 3.0);
    assert_eq!(f(&pinned["duration_s"]), 3.0);
    assert_eq!(u(&pinned["intended"]), 300);
}

/// `share = "cores"`: an agent with two workers takes twice the arrivals
/// of one with one.
#[test]
fn share_by_cores_splits_by_worker_count() {
    const TOKEN: &str = "cores-token";
    let (_testbed, addr) = start_testbed(&["--delay", "0ms"]);
    let dir = temp_dir("share-cores-plan");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "http://{addr}/"
[agents]
expect = 2
share = "cores"
[[scenario]]
name = "split"
rate = 300
duration = "1s"
"#
        ),
    );
    let out = temp_dir("share-cores");
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .arg(&plan)
        .arg("--out")
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let url = control_url(&mut c);
    let agent_with = |workers: &str| {
        let mut a = Command::new(bin("loadfleet-agent"));
        a.args(["--coordinator", &url, "--token", TOKEN]).args([
            "--id",
            &format!("workers-{workers}"),
            "--workers",
            workers,
        ]);
        Proc::spawn(a, &format!("agent with {workers} worker(s)"))
    };
    let (_one, _two) = (agent_with("1"), agent_with("2"));
    let (status, output) = c.wait(Duration::from_secs(60));
    let r = read_report(&out);
    assert_ok_or_saturated(status, &r, &output);
    let intended = |id: &str| {
        r["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .find(|a| a["id"] == id)
            .map(|a| (u(&a["cpus"]), u(&a["intended"])))
            .unwrap_or_else(|| panic!("no agent {id}: {output}"))
    };
    assert_eq!(intended("workers-1"), (1, 100), "{output}");
    assert_eq!(intended("workers-2"), (2, 200), "{output}");
}
