//! End-to-end: VictoriaMetrics (Debian's package), which takes remote
//! write too, holds the report's counts exactly. It has no native
//! histograms, so one output sends classic buckets, whose count is the
//! report's; another, from the plan's `[[output]]`, sends native ones,
//! which it must take without refusing the rest of the push.

use crate::common;
use crate::outputs_support;

use std::time::{Duration, Instant};

use common::*;
use outputs_support::*;

/// VictoriaMetrics makes what it took searchable within a second or two:
/// the query's value once it equals `want`, or the last one after 15 s.
fn settled_value(addr: &str, query: &str, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = promql(addr, query)
            .first()
            .and_then(|v| v["value"][1].as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn victoria_metrics_holds_the_reports_counts() {
    let dir = temp_dir("outputs-victoria");
    let vm = victoria_metrics(&dir);
    let url = format!("http://{}/api/v1/write", vm.addr);
    let plan = write_plan(
        &dir,
        &format!(
            r#"
[target]
url = "testbed"

[[scenario]]
name = "browse"
rate = 100
duration = "3s"

[[output]]
kind = "prometheus"
url = "{url}"
labels = {{ via = "native" }}
"#
        ),
    );
    let out = dir.join("out");
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "1", "--testbed-delay", "5ms"])
        .args(["--out-run-id", "vm-e2e", "--out-label", "via=classic"])
        .args(["--out-histograms", "classic", "--out-prometheus", &url])
        .arg("--out")
        .arg(&out);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(120));
    let r = read_report(&out);
    assert!(!output.contains("OUTPUT_LOST"), "{output}");
    let t = &r["totals"];
    for via in ["native", "classic"] {
        let sel = format!(r#"run_id="vm-e2e",via="{via}""#);
        for (name, key) in [
            ("loadfleet_requests_intended_total", "intended"),
            ("loadfleet_requests_sent_total", "sent"),
            ("loadfleet_requests_completed_total", "completed"),
        ] {
            let want = f(&t[key]);
            let got = settled_value(&vm.addr, &format!("sum({name}{{{sel}}})"), want);
            assert_eq!(got, want, "{via} {name}");
        }
        let want = f(&t["status"]["200"]);
        let q = format!(r#"sum(loadfleet_responses_total{{{sel},code="200"}})"#);
        assert_eq!(settled_value(&vm.addr, &q, want), want, "{via} 200s");
    }
    let want = f(&t["latency_ms"]["count"]);
    let q = r#"loadfleet_latency_seconds_count{run_id="vm-e2e",via="classic"}"#;
    assert_eq!(settled_value(&vm.addr, q, want), want);
}
