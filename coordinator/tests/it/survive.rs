//! Results survive the coordinator: one killed with SIGKILL mid-run leaves
//! the interval log, the CSV and a partial report of what it measured on
//! disk, and its agents stop on their own. Real processes: a testbed, two
//! separately started agents (so the test owns their PIDs) and the
//! coordinator.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const RATE: u64 = 100;

/// Waits for the progress line that shows at least `secs` elapsed since the
/// common start (`[  6.0s/10s] ...`).
fn wait_for_elapsed(c: &mut Proc, secs: f64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = c.wait_for_line("s/10s]", deadline.saturating_duration_since(Instant::now()));
        let elapsed: f64 = line
            .trim_start_matches('[')
            .split("s/")
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no elapsed time in {line:?}"));
        if elapsed >= secs {
            return;
        }
    }
}

/// `intervals.csv` as (header, rows of cells), checking every row is whole.
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("a header line")
        .split(',')
        .map(str::to_string)
        .collect();
    assert!(text.ends_with('\n'), "a half-written last line:\n{text}");
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .collect();
    for row in &rows {
        assert_eq!(row.len(), header.len(), "row {row:?} of:\n{text}");
    }
    (header, rows)
}

#[test]
fn coordinator_sigkill_leaves_results_on_disk_and_agents_stop() {
    require_hdrh();
    let (_testbed, addr) = start_testbed(&[]);
    let out = temp_dir("survive-sigkill");
    let token = "survive";
    let mut cmd = coordinator();
    cmd.args(["run", "--listen", "127.0.0.1:0", "--token", token])
        .args(["--expect-agents", "2", "--agent-timeout", "20s"])
        .args(["--url", &format!("http://{addr}/")])
        .args(["--rate", &RATE.to_string(), "--duration", "10s", "--out"])
        .arg(&out);
    let mut c = Proc::spawn(cmd, "coordinator");
    let url = control_url(&mut c);
    let agents: Vec<Proc> = (0..2)
        .map(|_| {
            let mut cmd = agent();
            cmd.args(["--coordinator", &url, "--token", token]);
            cmd.args(["--connect-timeout", "10s"]);
            Proc::spawn(cmd, "agent")
        })
        .collect();

    wait_for_elapsed(&mut c, 6.0);
    signal(c.pid(), libc::SIGKILL);
    let killed = Instant::now();

    // Every agent stops within 5 s of the coordinator's death.
    for a in agents {
        let patience = Duration::from_secs(5).saturating_sub(killed.elapsed());
        let (_, output) = a.wait(patience);
        assert!(!output.is_empty(), "the agent said nothing");
    }
    let (_, coordinator_output) = c.wait(Duration::from_secs(5));
    let ctx = format!("coordinator output:\n{coordinator_output}");
    assert!(
        !out.join("report.json").exists(),
        "a killed coordinator wrote no final report: {ctx}"
    );

    // The interval log, read by an independent implementation, covers
    // at least the first 4 s, in whole lines.
    let s = hlog_summary(&out.join("latency.hlog"));
    assert_eq!(
        u(&s["intervals"]),
        u(&s["interval_lines"]),
        "hdrh skipped lines: {s}\n{ctx}"
    );
    let seconds: Vec<f64> = s["seconds"]
        .as_array()
        .expect("seconds")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect();
    for t in 0..4 {
        assert!(
            seconds.contains(&f64::from(t)),
            "second {t} missing from latency.hlog: {s}\n{ctx}"
        );
    }
    assert!(
        u(&s["count"]) >= 4 * RATE / 2,
        "too few latencies: {s}\n{ctx}"
    );

    // The CSV holds each of the first 4 s, exactly as planned: the fleet's
    // uniform schedule intends RATE arrivals a second, every one sent or
    // counted unsent.
    let (header, rows) = read_csv(&out.join("intervals.csv"));
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (t, intended, sent, unsent) = (col("t"), col("intended"), col("sent"), col("unsent"));
    let n = |row: &Vec<String>, i: usize| -> u64 { row[i].parse().expect("a count") };
    for second in 0..4 {
        let row = rows
            .iter()
            .find(|r| r[t] == second.to_string())
            .unwrap_or_else(|| panic!("second {second} missing from intervals.csv: {rows:?}"));
        assert_eq!(n(row, intended), RATE, "second {second}: {row:?}");
        assert_eq!(
            n(row, sent) + n(row, unsent),
            RATE,
            "second {second}: {row:?}"
        );
    }

    // The partial report parses, says so, and holds what was measured.
    let path = out.join("report.partial.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}\n{ctx}", path.display()));
    let r: serde_json::Value = serde_json::from_str(&text).expect("report.partial.json is JSON");
    assert_eq!(r["schema"], "loadfleet.report/v1", "{text}");
    assert_eq!(r["partial"], true, "{text}");
    assert!(u(&r["totals"]["intended"]) >= 3 * RATE, "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A clean end leaves the final files and no partial report; the CSV
/// written live and the one rewritten at the end agree with report.json.
#[test]
fn a_clean_end_removes_the_partial_report() {
    let (_, output, report, out) = run_report(
        "survive-clean",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "50",
            "--duration",
            "5s",
        ],
    );
    assert!(
        !out.join("report.partial.json").exists(),
        "left a partial report:\n{output}"
    );
    assert!(!out.join("report.partial.json.tmp").exists());
    let (_, rows) = read_csv(&out.join("intervals.csv"));
    let intervals = report["intervals"].as_array().expect("intervals");
    assert_eq!(rows.len(), intervals.len(), "{output}");
    let intended: u64 = rows
        .iter()
        .map(|r| r[1].parse::<u64>().expect("a count"))
        .sum();
    assert_eq!(intended, u(&report["totals"]["intended"]), "{output}");
    let _ = std::fs::remove_dir_all(&out);
}
