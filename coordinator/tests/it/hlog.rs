//! End-to-end: the HdrHistogram interval log (latency.hlog) read back by an
//! independent implementation, the `hdrhistogram` package from PyPI (module
//! `hdrh`), must give the same distribution as report.json.
//!
//! The log holds the measured (non-warm-up) completions of every outcome
//! class, one tagged entry per second and class, which is exactly what
//! `totals.latency_ms` and `totals.latency_by_class_ms` cover.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Whether `ms` (from report.json) and a bucket (microseconds, from hdrh)
/// agree: inside the bucket's equivalent range, or within 1%.
fn agrees(ms: f64, bucket: &Value) -> bool {
    let us = (ms * 1000.0).round();
    let lowest = bucket["lowest"].as_f64().expect("lowest");
    let highest = bucket["highest"].as_f64().expect("highest");
    let value = bucket["value"].as_f64().expect("value");
    (lowest..=highest).contains(&us) || (us - value).abs() <= 0.01 * value.max(1.0)
}

#[test]
fn hlog_read_by_hdrh_matches_the_report() {
    require_hdrh();
    let out = temp_dir("hlog");
    let mut cmd = coordinator();
    // A pool of one at 5 ms serves ~200 req/s of the 300 offered: the rest
    // wait 10 ms and get 503, so the log carries more than one tag. The
    // first second is warm-up, which neither the log nor the totals hold.
    cmd.args(["run", "--local-agents", "2", "--rate", "300"])
        .args([
            "--duration",
            "4s",
            "--warmup",
            "1s",
            "--testbed-delay",
            "5ms",
        ])
        .args(["--testbed-pool", "1", "--testbed-pool-timeout", "10ms"])
        .arg("--out")
        .arg(&out);
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(90));
    let hlog = out.join("latency.hlog");
    assert!(hlog.is_file(), "no latency.hlog written:\n{output}");
    let r = read_report(&out);
    let t = &r["totals"];
    let latency = &t["latency_ms"];
    let count = u(&latency["count"]);
    assert!(count > 0, "nothing completed:\n{output}");
    assert!(
        u(&t["warmup"]["completed"]) > 0,
        "no warm-up completions, so their exclusion is not tested:\n{output}"
    );

    let s = hlog_summary(&hlog);
    let ctx = format!("hdrh read {s}\nreport totals {t}");
    assert_eq!(
        u(&s["intervals"]),
        u(&s["interval_lines"]),
        "hdrh skipped interval lines: {ctx}"
    );
    assert_eq!(u(&s["count"]), count, "total count: {ctx}");

    // Per tag (SCENARIO.CLASS): each outcome class's count.
    let tags = s["tags"].as_object().expect("tags");
    let classes = t["latency_by_class_ms"].as_object().expect("classes");
    assert!(
        tags.len() >= 2,
        "expected 2xx and 5xx entries in the log: {ctx}"
    );
    let tag_classes: Vec<String> = tags
        .keys()
        .map(|k| {
            let (scenario, class) = k.rsplit_once('.').expect("SCENARIO.CLASS tag");
            assert_eq!(scenario, "default", "tag {k}: {ctx}");
            class.to_string()
        })
        .collect();
    assert_eq!(
        tag_classes,
        classes.keys().cloned().collect::<Vec<_>>(),
        "tags vs classes: {ctx}"
    );
    for (tag, n) in tags {
        let class = tag.rsplit_once('.').map_or(tag.as_str(), |(_, c)| c);
        assert_eq!(
            u(n),
            u(&classes[class]["count"]),
            "count of class {class}: {ctx}"
        );
    }

    // The percentiles, within HdrHistogram's precision (3 significant
    // digits) under either rank convention.
    for (key, p) in [
        ("p50", "50.0"),
        ("p90", "90.0"),
        ("p95", "95.0"),
        ("p99", "99.0"),
        ("p999", "99.9"),
    ] {
        let ms = latency[key].as_f64().expect("percentile");
        let candidates = s["percentiles"][p].as_array().expect("candidates");
        assert!(
            candidates.iter().any(|b| agrees(ms, b)),
            "{key}: report {ms} ms, hdrh {candidates:?} µs\n{ctx}"
        );
    }
    let max = latency["max"].as_f64().expect("max");
    assert!(agrees(max, &s["max"]), "max: report {max} ms\n{ctx}");
    let mean_us = s["mean"].as_f64().expect("mean");
    let mean = latency["mean"].as_f64().expect("mean") * 1000.0;
    assert!(
        (mean - mean_us).abs() <= 0.01 * mean_us,
        "mean: report {mean} µs, hdrh {mean_us} µs\n{ctx}"
    );
    let _ = std::fs::remove_dir_all(&out);
}
