//! `--repeat N`: the same fleet runs the plan N times; the report keeps
//! every run and their median, min and max.

use crate::common;

use common::*;

#[test]
fn repeated_runs_are_kept_with_their_spread() {
    let (status, output, r, _) = run_report(
        "repeat",
        &[
            "run",
            "--local-agents",
            "2",
            "--rate",
            "200",
            "--duration",
            "2s",
            "--repeat",
            "3",
            "--testbed-delay",
            "2ms",
            "--threshold",
            "p99<5s",
        ],
    );
    // A stall of a shared test machine makes a run GENERATOR_SATURATED:
    // that is the run's verdict to give, not this test's concern.
    assert_ok_or_saturated(status, &r, &output);
    let rep = &r["repeats"];
    assert_eq!(u(&rep["count"]), 3, "{rep}");
    let runs = rep["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    let mut p99s = Vec::new();
    for run in runs {
        assert_eq!(u(&run["intended"]), 400);
        assert_eq!(u(&run["sent"]) + u(&run["unsent"]["total"]), 400);
        // Every answer waited out the testbed's 2 ms.
        let p99 = run["latency_ms"]["p99"].as_f64().expect("p99");
        assert!(p99 >= 2.0, "p99 {p99} ms under the 2 ms delay: {run}");
        p99s.push(p99);
    }
    assert_eq!(rep["median"]["intended"].as_f64(), Some(400.0));
    p99s.sort_by(f64::total_cmp);
    let p99 = |of: &str| rep[of]["latency_ms"]["p99"].as_f64();
    assert_eq!(
        (p99("min"), p99("median"), p99("max")),
        (Some(p99s[0]), Some(p99s[1]), Some(p99s[2])),
        "{rep}"
    );
    // The threshold is checked against that median.
    assert_eq!(r["thresholds"][0]["actual"].as_f64(), Some(p99s[1]), "{r}");
    let shown = u(&rep["representative"]) as usize;
    assert!(shown < 3);
    assert_eq!(
        r["totals"]["latency_ms"]["p99"],
        runs[shown]["latency_ms"]["p99"]
    );
    assert!(output.contains("3 runs"), "{output}");
    assert!(r["thresholds"][0]["threshold"]
        .as_str()
        .unwrap_or("")
        .contains("median of 3 runs"));
}
