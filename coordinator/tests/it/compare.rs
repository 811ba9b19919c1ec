//! End-to-end: two real runs against the testbed with different service
//! delays, then `compare` on their reports.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// Runs the local fleet at 100 req/s for 2 s against a testbed with `delay`,
/// writing into `out`.
fn real_run(out: &Path, delay: &str) {
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "100",
        "--duration",
        "2s",
    ])
    .args(["--testbed-delay", delay, "--out"])
    .arg(out);
    let (status, output) = run(
        cmd,
        &format!("coordinator ({delay})"),
        Duration::from_secs(60),
    );
    // The ratio below needs a real run: a clean one, or one a stall of the
    // shared machine made the agent late in, which the report rightly says
    // (GENERATOR_SATURATED) and which still measured both delays.
    assert!(out.join("report.json").is_file(), "{output}");
    assert_ok_or_saturated(status, &read_report(out), &output);
}

/// The figure's cells in a text table row: `label  a  b  ratio`.
fn row<'a>(output: &'a str, figure: &str) -> Vec<&'a str> {
    let line = output
        .lines()
        .map(|l| l.trim_start_matches("[stdout]").trim())
        .find(|l| l.starts_with(&format!("{figure}  ")))
        .unwrap_or_else(|| panic!("no row {figure:?} in:\n{output}"));
    line[figure.len()..].split_whitespace().collect()
}

#[test]
fn compare_two_real_reports_shows_both_columns_and_the_latency_ratio() {
    let dir = temp_dir("compare");
    let fast = dir.join("delay-5ms");
    let slow = dir.join("delay-20ms");
    real_run(&fast, "5ms");
    real_run(&slow, "20ms");

    let mut cmd = coordinator();
    cmd.arg("compare")
        .arg(fast.join("report.json"))
        .arg(slow.join("report.json"));
    let (status, output) = run(cmd, "compare", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(
        output.contains("delay-5ms") && output.contains("delay-20ms"),
        "{output}"
    );
    assert!(output.contains("B/A"), "{output}");
    assert_eq!(row(&output, "intended"), ["200", "200", "1.00"], "{output}");
    let p50 = row(&output, "latency_ms p50");
    let ratio: f64 = p50[2]
        .parse()
        .unwrap_or_else(|_| panic!("ratio {:?} is not a number:\n{output}", p50[2]));
    assert!(
        ratio > 1.5,
        "20ms / 5ms should show at p50: {ratio}\n{output}"
    );
    assert!(output.contains("significance needs repeats"), "{output}");

    // The same comparison for scripts, from the folders.
    let mut cmd = coordinator();
    cmd.args(["compare", "--json"]).arg(&fast).arg(&slow);
    let (status, output) = run(cmd, "compare --json", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
    let json: String = output
        .lines()
        .filter_map(|l| l.strip_prefix("[stdout] "))
        .collect::<Vec<_>>()
        .join("\n");
    let v: serde_json::Value = serde_json::from_str(&json).expect("compare --json is JSON");
    let p50 = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["figure"] == "latency_ms p50")
        .expect("p50 row");
    assert!(p50["ratios"][0]["ratio"].as_f64().unwrap() > 1.5, "{json}");

    // Bad input: a missing file is named, exit status 2.
    let missing = dir.join("no-such-run").join("report.json");
    let mut cmd = coordinator();
    cmd.arg("compare")
        .arg(fast.join("report.json"))
        .arg(&missing);
    let (status, output) = run(cmd, "compare missing", Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("no-such-run"), "{output}");

    // One report is not a comparison: refused by the flag parser.
    let mut cmd = coordinator();
    cmd.arg("compare").arg(fast.join("report.json"));
    let (status, output) = run(cmd, "compare one", Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{output}");
}

/// Two real runs at different rates, one of them against a testbed pool too
/// small for it (503s): `compare` says that the rates differ, and shows `-`
/// for the 503s of the run that had none (it never saw that status, so 0
/// would be a claim the report does not make).
#[test]
fn compare_says_the_rates_differ_and_dashes_a_status_a_report_lacks() {
    let dir = temp_dir("compare-rates");
    let (calm, busy) = (dir.join("rate-50"), dir.join("rate-100-pool-1"));
    for (out, extra) in [
        (&calm, &["--rate", "50"][..]),
        (
            &busy,
            &[
                "--rate",
                "100",
                "--testbed-pool",
                "1",
                "--testbed-pool-timeout",
                "1ms",
            ][..],
        ),
    ] {
        let mut cmd = coordinator();
        cmd.args(["run", "--local-agents", "1", "--duration", "2s"])
            .args(extra)
            .arg("--out")
            .arg(out);
        let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
        if out == &calm {
            assert_ok_or_saturated(status, &read_report(out), &output);
        } else {
            // Whether the 503s pass the FAILURES error limit depends on
            // timing; the status must follow the report either way.
            assert_exit_follows_the_report(status.code(), &read_report(out), &output);
        }
    }
    let mut cmd = coordinator();
    cmd.arg("compare").arg(&calm).arg(&busy);
    let (status, output) = run(cmd, "compare", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(
        output.contains("B: rate 100 req/s offered differs from A's 50 req/s"),
        "{output}"
    );
    let s503 = row(&output, "status 503");
    assert_eq!(s503[0], "-", "{output}");
    assert!(s503[1].parse::<u64>().is_ok_and(|n| n > 0), "{output}");
    assert_eq!(s503[2], "-", "no ratio to a missing figure: {output}");
}
