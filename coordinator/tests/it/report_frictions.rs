//! What new users hit in the reports and the output folder (issue 40),
//! through the real binaries against the built-in testbed: each test
//! reproduces what a user met and asserts the fix.

use crate::browser;
use crate::common;

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use browser::*;
use common::*;

/// Runs `coordinator run ARGS --out OUT` to the end; the exit status and
/// the output.
fn run_into(out: &Path, args: &[&str]) -> (ExitStatus, String) {
    let mut cmd = coordinator();
    cmd.arg("run").args(args).arg("--out").arg(out);
    run(cmd, "coordinator", Duration::from_secs(120))
}

/// The `points` of the polyline drawn for `series`, as (x, y) pixels.
fn polyline(html: &str, series: &str) -> Vec<(f64, f64)> {
    let needle = format!("<polyline data-series=\"{series}\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no {series} series in report.html"));
    let rest = &html[at..];
    let start = rest.find("points=\"").expect("points") + 8;
    let end = start + rest[start..].find('"').expect("end of points");
    rest[start..end]
        .split_whitespace()
        .map(|xy| {
            let (x, y) = xy.split_once(',').expect("x,y");
            (
                x.parse().expect("x is a number"),
                y.parse().expect("y is a number"),
            )
        })
        .collect()
}

/// Item 1: a run that turns into 503s part way shows it in the page: the
/// completions per second are drawn per outcome class, stacked, with a
/// legend, and the 5xx layer is empty at the start and thick once the
/// testbed's pool (4 slots of 20 ms: 200 req/s) is outgrown by the ramp.
#[test]
fn completions_per_second_are_drawn_per_outcome_class() {
    let out = temp_dir("class-chart");
    let (status, output) = run_into(
        &out,
        &[
            "--local-agents",
            "1",
            "--rate",
            "400",
            "--ramp",
            "3s",
            "--duration",
            "6s",
            "--testbed-delay",
            "20ms",
            "--testbed-pool",
            "4",
            "--testbed-pool-timeout",
            "30ms",
        ],
    );
    let r = read_report(&out);
    assert_exit_follows_the_report(status.code(), &r, &output);
    let intervals = r["intervals"].as_array().expect("intervals");
    let five_xx: Vec<u64> = intervals.iter().map(|iv| u(&iv["completed_5xx"])).collect();
    assert_eq!(
        five_xx[0], 0,
        "the first second is under capacity: {five_xx:?}"
    );
    // Second 4 is held at 400 req/s, twice what the pool can take.
    let late = intervals
        .iter()
        .position(|iv| f(&iv["t"]) == 4.0)
        .expect("an interval at t=4");
    assert!(
        five_xx[late] > 50,
        "the ramp outgrows the pool: 5xx per second {five_xx:?}\n{output}"
    );

    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("Completions per second by outcome class"),
        "no per-class chart"
    );
    let ok = polyline(&html, "2xx");
    let failed = polyline(&html, "5xx");
    assert_eq!(ok.len(), intervals.len(), "one 2xx point per second");
    assert_eq!(failed.len(), intervals.len(), "one 5xx point per second");
    // The 5xx layer sits on the 2xx one: its top is the 2xx top plus the
    // 5xx count, so its thickness in pixels is 0 at first, then not.
    let thickness = |i: usize| ok[i].1 - failed[i].1;
    assert!(
        thickness(0).abs() < 0.2,
        "no 5xx in second 0, yet {} px",
        thickness(0)
    );
    assert!(
        thickness(late) > 20.0,
        "5xx layer in second {late}: {} px",
        thickness(late)
    );
    // A legend names the classes, each with its swatch.
    for class in ["2xx", "5xx"] {
        assert!(
            html.contains(&format!(">{class}</text>")),
            "legend lacks {class}"
        );
    }
}

/// Item 2: the charts take the page's width (one per row, scaled), in a
/// wide window and in a narrow one, instead of a fixed 760 px drawing.
#[test]
fn charts_take_the_width_of_the_page() {
    require_chromium();
    let out = temp_dir("wide-charts");
    let (status, output) = run_into(
        &out,
        &[
            "--local-agents",
            "1",
            "--rate",
            "100",
            "--duration",
            "3s",
            "--testbed-delay",
            "5ms",
        ],
    );
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let html = out.join("report.html");
    // The p50 and sent strokes are this blue, and nothing else on the page.
    let blue = [0x25, 0x63, 0xc9];
    for width in [1400u32, 900] {
        let png = out.join(format!("report-{width}.png"));
        screenshot(&html, &png, &out.join("profile"), width, 2400);
        let img = decode(&png);
        let xs = img.xs_of(blue, 12);
        let (left, right) = (
            xs.iter().copied().min().unwrap_or(0),
            xs.iter().copied().max().unwrap_or(0),
        );
        eprintln!(
            "{width} px window: chart strokes from x={left} to x={right} ({} px)",
            xs.len()
        );
        // Across most of the window, and inside the page's 32 px padding:
        // a drawing of fixed size is either too narrow for the wide window
        // or spills out of the narrow one.
        assert!(
            right as f64 > 0.75 * f64::from(width),
            "{width} px window: strokes end at x={right}, not across the page"
        );
        assert!(
            right + 32 < width as usize,
            "{width} px window: strokes reach x={right}, past the page"
        );
    }
}

/// Item 3: the scenario line says the load's shape, not only a mean rate:
/// a ramp, a staircase, a closed population with its think time, the
/// arrival process; the same words in report.json and the page.
#[test]
fn the_scenario_line_states_the_shape() {
    let dir = temp_dir("shape-line");
    let plan = write_plan(
        &dir,
        r#"
[target]
url = "testbed"

[[scenario]]
name = "ramp"
process = "poisson"
stages = [{ to = 100, over = "2s" }, { hold = "1s" }]

[[scenario]]
name = "stairs"
after = "previous"
steps = { from = 20, to = 60, step = 20, every = "1s" }

[[scenario]]
name = "users"
after = "previous"
model = "closed"
clients = 5
think = "100ms"
duration = "2s"
"#,
    );
    let plan = plan.to_str().expect("UTF-8 path");
    let out = dir.join("out");
    let (status, output) = run_into(
        &out,
        &[plan, "--local-agents", "1", "--testbed-delay", "1ms"],
    );
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let want = [
        (
            "ramp",
            "open, ramp 0→100 req/s over 2s then 100 req/s (poisson, 66.67 req/s on average)",
        ),
        (
            "stairs",
            "open, steps 20→60 req/s by 20 every 1s (uniform, 40 req/s on average)",
        ),
        ("users", "closed, 5 clients, think 100ms"),
    ];
    let r = read_report(&out);
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    for (i, (name, line)) in want.iter().enumerate() {
        assert!(
            output.contains(&format!("scenario {name:<16} {line};")),
            "{name}: {line:?} not in\n{output}"
        );
        let (model, load) = line.split_once(", ").expect("model, load");
        assert_eq!(r["scenarios"][i]["load"], *load, "{name}");
        assert!(
            html.contains(&format!("{model} model, {load}")),
            "{name} in the page"
        );
    }

    // Flags make the same words: `--rate 200 --ramp 2s --duration 4s`.
    let out = dir.join("flags");
    let (status, output) = run_into(
        &out,
        &[
            "--local-agents",
            "1",
            "--rate",
            "200",
            "--ramp",
            "2s",
            "--duration",
            "4s",
            "--testbed-delay",
            "1ms",
        ],
    );
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let line = "open, ramp 0→200 req/s over 2s then 200 req/s (uniform, 150 req/s on average);";
    assert!(output.contains(line), "{line:?} not in\n{output}");
}

/// Item 4: `--out` naming a folder with files in it is refused, naming
/// --overwrite, before any load; with --overwrite the files an earlier run
/// wrote (here the run-N files of a --repeat) are gone and the user's own
/// files are kept.
#[test]
fn a_used_out_folder_needs_overwrite_which_clears_only_loadfleet_files() {
    let dir = temp_dir("out-reuse");
    let out = dir.join("out");
    let short = [
        "--local-agents",
        "1",
        "--rate",
        "20",
        "--duration",
        "1s",
        "--testbed-delay",
        "1ms",
    ];
    let repeated: Vec<&str> = short.iter().copied().chain(["--repeat", "2"]).collect();
    let (status, output) = run_into(&out, &repeated);
    assert_ok_or_saturated(status, &read_report(&out), &output);
    let run_files = [
        "latency.run-1.hlog",
        "latency.run-2.hlog",
        "intervals.run-1.csv",
        "intervals.run-2.csv",
    ];
    for f in run_files {
        assert!(out.join(f).is_file(), "--repeat 2 wrote no {f}");
    }
    std::fs::write(out.join("notes.md"), "mine").expect("write a user's file");
    let before = std::fs::read(out.join("report.json")).expect("report.json");

    // Without --overwrite: refused up front, nothing touched.
    let (status, output) = run_into(&out, &short);
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("--overwrite") && output.contains("not empty"),
        "{output}"
    );
    assert!(
        !output.contains("testbed listening"),
        "nothing started: {output}"
    );
    assert_eq!(
        std::fs::read(out.join("report.json")).expect("report.json"),
        before,
        "the earlier report was left alone"
    );

    // With --overwrite: the earlier run's files are gone, the user's kept.
    let overwrite: Vec<&str> = short.iter().copied().chain(["--overwrite"]).collect();
    let (status, output) = run_into(&out, &overwrite);
    assert_ok_or_saturated(status, &read_report(&out), &output);
    for f in run_files {
        assert!(!out.join(f).exists(), "stale {f} left behind");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("notes.md")).expect("notes.md kept"),
        "mine"
    );
    let r = read_report(&out);
    assert!(r["repeats"].is_null(), "report.json is the new single run");
    for f in [
        "report.json",
        "report.html",
        "latency.hlog",
        "intervals.csv",
    ] {
        assert!(out.join(f).is_file(), "no {f}");
    }

    // --overwrite says what it needs.
    let mut cmd = coordinator();
    cmd.args(["run", "--overwrite", "--rate", "20", "--duration", "1s"]);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("--out"), "{output}");
}

/// The "Defaults" section of the run guide (docs/run.md, which the README
/// points to), as a user reads it.
fn readme_defaults() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/run.md"))
        .expect("read docs/run.md");
    let start = readme
        .find("## Defaults")
        .expect("docs/run.md has a Defaults section");
    let rest = &readme[start + 2..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// Item 5: the README states the defaults a user meets, and they are the
/// ones the binaries use: a bare `run` (2 local agents on the built-in
/// testbed, 500 req/s for 10 s, 1000 in flight and 64 connections per
/// agent, a 5 s drain, a control plane on 127.0.0.1), `--listen
/// 0.0.0.0:7070` with remote agents, `plan preview --agents 2`.
#[test]
fn the_readme_states_the_defaults_the_binaries_use() {
    let says = readme_defaults();
    let dir = temp_dir("defaults");
    let mut cmd = coordinator();
    cmd.current_dir(&dir).arg("run");
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(120));
    assert!(output.contains("testbed listening on"), "{output}");
    assert!(
        output.contains("coordinator listening on 127.0.0.1:"),
        "{output}"
    );
    let folder = std::fs::read_dir(&dir)
        .expect("read the folder")
        .filter_map(|e| e.ok())
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("loadfleet-out-")
        })
        .expect("a fresh loadfleet-out-<time> folder")
        .path();
    let r = read_report(&folder);
    assert_ok_or_saturated(status, &r, &output);
    let run_info = &r["run"];
    let scenario = &r["scenarios"][0];
    let measured = [
        format!("**{} local agent processes**", u(&run_info["agents"])),
        format!(
            "**{} req/s for {}s**",
            f(&scenario["offered_rps"]),
            f(&scenario["duration_s"])
        ),
        format!(
            "`--max-in-flight {}`",
            u(&run_info["max_in_flight_per_agent"])
        ),
        format!("`--connections {}`", u(&run_info["connections_per_agent"])),
        format!("drains for {}s", f(&run_info["drain_s"])),
        "`127.0.0.1`".to_string(),
        "`loadfleet-out-<UTC time>`".to_string(),
    ];
    assert!(run_info["local"].as_bool().expect("local"), "{run_info}");
    for m in &measured {
        assert!(
            says.contains(m.as_str()),
            "README Defaults lacks {m:?}:\n{says}"
        );
    }

    // Remote agents: the control plane listens on 0.0.0.0:7070 (or says
    // it cannot bind there, when something on this machine holds it).
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--url",
        "http://127.0.0.1:9/",
        "--expect-agents",
        "1",
    ])
    .args(["--token", "t", "--agent-timeout", "1s", "--duration", "1s"])
    .arg("--out")
    .arg(dir.join("remote"));
    let (_, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert!(
        output.contains("listening on 0.0.0.0:7070") || output.contains("--listen 0.0.0.0:7070"),
        "{output}"
    );
    assert!(says.contains("`0.0.0.0:7070`"), "{says}");

    // plan preview splits across 2 agents unless told.
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\n[[scenario]]\nrate = 10\nduration = \"2s\"\n",
    );
    let mut cmd = coordinator();
    cmd.args(["plan", "preview"]).arg(&plan);
    let (status, output) = run(cmd, "plan preview", Duration::from_secs(30));
    assert!(status.success(), "{output}");
    assert!(output.contains("split across 2 agent(s)"), "{output}");
    assert!(says.contains("`plan preview --agents 2`"), "{says}");
}
