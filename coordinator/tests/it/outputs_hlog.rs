//! End-to-end: latency.hlog is read by the reference implementation, Java
//! HdrHistogram's `HistogramLogProcessor` (Debian's libhdrhistogram-java),
//! with no options: its untagged all-outcomes series holds every measured
//! completion, so the total count equals the report's; and the untagged
//! series, read by PyPI's hdrh, equals the tagged ones added up.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

const JAR: &str = "/usr/share/java/hdrhistogram.jar";

#[test]
fn the_reference_reader_takes_latency_hlog_without_options() {
    assert!(
        std::path::Path::new(JAR).is_file(),
        "{JAR} is needed (Debian package libhdrhistogram-java); .ci/run installs it"
    );
    require_hdrh();
    let out = temp_dir("outputs-hlog");
    let mut cmd = coordinator();
    // 503s next to 200s, so the log has more than one tag per second.
    cmd.args([
        "run",
        "--local-agents",
        "1",
        "--rate",
        "300",
        "--duration",
        "3s",
    ])
    .args(["--testbed-delay", "5ms", "--testbed-pool", "1"])
    .args(["--testbed-pool-timeout", "10ms", "--out"])
    .arg(&out);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(90));
    let r = read_report(&out);
    let count = u(&r["totals"]["latency_ms"]["count"]);
    assert!(count > 0, "{output}");
    let hlog = out.join("latency.hlog");
    let summary = hlog_summary(&hlog);
    assert!(
        summary["tags"].as_object().expect("tags").len() >= 2,
        "{summary}"
    );
    assert_eq!(u(&summary["count"]), count, "tagged: {summary}");
    assert_eq!(u(&summary["untagged"]), count, "untagged: {summary}");

    let mut java = Command::new("java");
    java.args(["-cp", JAR, "org.HdrHistogram.HistogramLogProcessor", "-i"])
        .arg(&hlog)
        .arg("-o")
        .arg(out.join("processed"));
    let (status, printed) = run(java, "HistogramLogProcessor", Duration::from_secs(60));
    assert!(status.success(), "{printed}");
    let hgrm = std::fs::read_to_string(out.join("processed.hgrm")).expect("processed.hgrm");
    let total: u64 = hgrm
        .lines()
        .find_map(|l| l.split("Total count").nth(1))
        .and_then(|rest| {
            rest.trim_start_matches([' ', '='])
                .trim_end_matches(']')
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no total count in:\n{hgrm}"));
    assert_eq!(total, count, "{hgrm}");
}
