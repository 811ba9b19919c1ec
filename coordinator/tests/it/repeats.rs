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

/// Issue 52: a repeated run's text report and page lead with the medians
/// of the runs, labelled as such, then each run; one run's figures follow,
/// titled as that run's.
#[test]
fn the_report_leads_with_the_medians_of_the_runs() {
    let (status, output, r, out) = run_report(
        "repeat-medians",
        &[
            "run",
            "--local-agents",
            "1",
            "--rate",
            "100",
            "--duration",
            "2s",
            "--repeat",
            "3",
            "--testbed-delay",
            "2ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let rep = &r["repeats"];
    let runs = rep["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{rep}");
    for run in runs {
        assert_eq!(u(&run["intended"]), 200, "{run}");
        assert!(u(&run["completed"]) > 0, "{run}");
    }
    let shown = u(&rep["representative"]) + 1;
    let median = &rep["median"];
    let stdout: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("[stdout] "))
        .collect();
    let at = |needle: &str| {
        stdout
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{}", stdout.join("\n")))
    };
    // In this order: the medians, each run, then one run in full.
    let medians = at("medians of 3 runs:");
    let each = at("each of the 3 runs:");
    let full = at(&format!(
        "run {shown} of 3 in full (the one with the median p99):"
    ));
    let status_line = at("status    200:");
    assert!(
        medians < each && each < full && full < status_line,
        "{output}"
    );
    // The medians' figures are those of `repeats.median`.
    let lead = stdout[medians + 1..each].join("\n");
    let throughput = format!("throughput {:.1} req/s", f(&median["throughput_rps"]));
    assert!(lead.contains(&throughput), "{throughput}: {lead}");
    assert!(
        lead.contains(&format!("intended {}", f(&median["intended"]))),
        "{lead}"
    );
    // As the report writes milliseconds.
    let ms = |v: f64| {
        if v >= 1000.0 {
            format!("{:.2}s", v / 1000.0)
        } else if v >= 10.0 {
            format!("{v:.1}ms")
        } else {
            format!("{v:.2}ms")
        }
    };
    let p99_text = format!("p99 {:>9}", ms(f(&median["latency_ms"]["p99"])));
    assert!(lead.contains(&p99_text), "{p99_text}: {lead}");
    // The page too: the medians before the run shown in full.
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    let medians = html.find("Medians of 3 runs").expect("medians heading");
    let each = html.find("Each run").expect("each run heading");
    let full = html
        .find(&format!("Run {shown} of 3 in full"))
        .expect("the run shown in full");
    assert!(medians < each && each < full, "in that order");
}
