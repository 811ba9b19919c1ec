//! What the agents put on the wire, end to end, as a capturing target
//! (tests/capture) sees it: `--method`/`-H`/`--body`, `body_file`, data
//! rows picked at random, and `{{seq}}` across agents.

use crate::capture;
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use capture::Capture;
use common::*;

/// Runs `args` (a plan or flags) against the capture target with two local
/// agents, and checks every arrival was sent and answered.
fn run_against(test: &str, args: &[&str]) -> (serde_json::Value, String) {
    let mut all = vec!["run", "--local-agents", "2"];
    all.extend_from_slice(args);
    let (status, output, r, _) = run_report(test, &all);
    assert_ok_or_saturated(status, &r, &output);
    let t = &r["totals"];
    assert_eq!(u(&t["sent"]), u(&t["intended"]), "{output}");
    assert_eq!(u(&t["status"]["200"]), u(&t["intended"]), "{output}");
    (r, output)
}

/// `--method`, `-H` and `--body` reach the target on every request.
#[test]
fn method_header_and_body_flags_reach_the_target() {
    let target = Capture::start(Duration::ZERO);
    let url = format!("{}/flags", target.url());
    let (r, output) = run_against(
        "flags-on-the-wire",
        &[
            "--url",
            &url,
            "--rate",
            "50",
            "--duration",
            "1s",
            "--method",
            "PUT",
            "-H",
            "X-Probe: on the wire",
            "--body",
            "payload",
        ],
    );
    let seen = target.seen();
    assert_eq!(seen.len() as u64, u(&r["totals"]["intended"]), "{output}");
    assert_eq!(seen.len(), 50, "{output}");
    for s in &seen {
        assert_eq!(
            (s.method.as_str(), s.path.as_str()),
            ("PUT", "/flags"),
            "{s:?}"
        );
        assert_eq!(s.header("x-probe"), Some("on the wire"), "{s:?}");
        assert_eq!(s.body, b"payload", "{s:?}");
        assert_eq!(s.header("content-length"), Some("7"), "{s:?}");
    }
}

/// `body_file`: the file's bytes, read relative to the plan, are every
/// request's body.
#[test]
fn body_file_is_the_body() {
    let target = Capture::start(Duration::ZERO);
    let dir = temp_dir("body-file-plan");
    let body = "{\"order\": [1, 2, 3],\n \"note\": \"from a file\"}\n";
    std::fs::write(dir.join("order.json"), body).expect("write the body file");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "{}"
[[scenario]]
name = "orders"
rate = 20
duration = "1s"
[[scenario.request]]
method = "POST"
path = "/orders"
headers = {{ "Content-Type" = "application/json" }}
body_file = "order.json"
"#,
            target.url()
        ),
    );
    run_against("body-file", &[plan.to_str().expect("utf-8 path")]);
    let seen = target.seen();
    assert_eq!(seen.len(), 20);
    for s in &seen {
        assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/orders"));
        assert_eq!(s.header("content-type"), Some("application/json"));
        assert_eq!(String::from_utf8_lossy(&s.body), body, "{s:?}");
    }
}

/// `pick = "random"` spreads the arrivals over every data row, roughly
/// evenly and not in round-robin order (the seed fixes the draw, so this
/// is not a matter of luck).
#[test]
fn random_pick_spreads_over_the_data_rows() {
    let target = Capture::start(Duration::ZERO);
    let dir = temp_dir("random-pick-plan");
    let users = ["ana", "bo", "cy", "di", "ed"];
    std::fs::write(
        dir.join("users.csv"),
        format!("user\n{}\n", users.join("\n")),
    )
    .expect("write users.csv");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "{}"
[[scenario]]
name = "pick"
rate = 100
duration = "2s"
data = {{ file = "users.csv", pick = "random" }}
[[scenario.request]]
path = "/u/{{{{data.user}}}}"
"#,
            target.url()
        ),
    );
    run_against("random-pick", &[plan.to_str().expect("utf-8 path")]);
    let seen = target.seen();
    assert_eq!(seen.len(), 200);
    let mut per: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &seen {
        let user = s.path.strip_prefix("/u/").expect("a /u/ path");
        *per.entry(user).or_default() += 1;
    }
    assert_eq!(
        per.keys().copied().collect::<Vec<_>>(),
        {
            let mut sorted = users.to_vec();
            sorted.sort();
            sorted
        },
        "every row is used, nothing else"
    );
    // 40 expected per row; the standard deviation is √(200·0.2·0.8) ≈ 5.7.
    assert!(per.values().all(|&n| (15..=65).contains(&n)), "{per:?}");
    // Round-robin would give exactly 40 each.
    assert!(per.values().any(|&n| n != 40), "{per:?}");
}

/// `{{seq}}` is the arrival's fleet-wide index: across two agents every
/// value is used once, and together they are one unbroken run of numbers.
#[test]
fn seq_is_unique_across_agents() {
    let target = Capture::start(Duration::ZERO);
    let dir = temp_dir("seq-plan");
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "{}"
[[scenario]]
name = "seq"
rate = 200
duration = "1s"
[[scenario.request]]
path = "/s/{{{{seq}}}}"
"#,
            target.url()
        ),
    );
    let (r, output) = run_against("seq-unique", &[plan.to_str().expect("utf-8 path")]);
    assert_eq!(r["agents"].as_array().map(Vec::len), Some(2), "{output}");
    let seqs: Vec<u64> = target
        .seen()
        .iter()
        .map(|s| {
            s.path
                .strip_prefix("/s/")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not /s/N: {}", s.path))
        })
        .collect();
    assert_eq!(seqs.len(), 200);
    let distinct: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(distinct.len(), 200, "a {{{{seq}}}} value was used twice");
    let (first, last) = (
        *distinct.first().expect("values"),
        *distinct.last().expect("values"),
    );
    assert!(first <= 1 && last - first == 199, "{first}..={last}");
}
