//! Plan frictions a new user met (issue 40), each checked on the real
//! binary: `--duration` on a plan with a warm-up, run-wide flags on plans of
//! several scenarios, and `plan check` reporting every problem at once.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn examples() -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(example(""))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    all.sort();
    assert!(all.len() >= 8, "expected the example plans, found {all:?}");
    all
}

/// Runs `loadfleet-coordinator COMMAND PLAN FLAGS` to the end; its exit
/// code and output.
fn coordinator_with(command: &[&str], plan: &Path, flags: &[&str]) -> (Option<i32>, String) {
    let mut cmd = coordinator();
    cmd.args(command).arg(plan).args(flags);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(30));
    (status.code(), output)
}

fn approx(v: &serde_json::Value, expected: f64) -> bool {
    (f(v) - expected).abs() < 1e-3
}

/// `--duration 5s` works on every example: the warm-up shrinks with the
/// run (constant.toml: 10 s of 60 s becomes 5/6 s of 5 s), and a warm-up
/// that does not fit in the plan itself is named `run.warmup` at its line.
#[test]
fn duration_fits_every_example_and_shrinks_the_warmup() {
    for plan in examples() {
        let (code, output) = coordinator_with(&["plan", "preview"], &plan, &["--duration", "5s"]);
        assert_eq!(code, Some(0), "{}: {output}", plan.display());
    }

    let constant = example("constant.toml");
    let (status, output, r, _) = run_report(
        "frictions-duration",
        &[
            "run",
            constant.to_str().expect("path"),
            "--duration",
            "5s",
            "--local-agents",
            "2",
            "--testbed-delay",
            "1ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    let s = &r["scenarios"][0];
    assert!(approx(&s["duration_s"], 5.0), "{s}");
    assert!(approx(&s["warmup_s"], 5.0 / 6.0), "{s}");
    assert_eq!(u(&s["intended"]), 1500, "{s}");

    let dir = temp_dir("frictions-run-warmup");
    let text = std::fs::read_to_string(&constant).expect("constant.toml");
    let plan = write_plan(
        &dir,
        &text.replace("duration = \"60s\"", "duration = \"10s\""),
    );
    let (code, output) = coordinator_with(&["plan", "check"], &plan, &[]);
    assert_eq!(code, Some(2), "{output}");
    assert!(output.contains("line 3: run.warmup"), "{output}");
    assert!(output.contains("[run] warmup"), "{output}");
    assert!(!output.contains("scenario[0].warmup"), "{output}");
    assert!(!output.contains("line 11"), "{output}");
}

/// `--seed`, `--warmup`, `--duration`, `--process`, `--max-in-flight` and
/// `--timeout` apply to every scenario of a plan; the flags that shape one
/// scenario's profile are refused, each naming the plan key to edit.
#[test]
fn run_wide_flags_apply_to_plans_of_several_scenarios() {
    let run_wide = [
        "--seed",
        "7",
        "--warmup",
        "1s",
        "--process",
        "poisson",
        "--max-in-flight",
        "50",
        "--timeout",
        "2s",
        "--drain",
        "1s",
    ];
    for name in ["steps.toml", "sequence.toml"] {
        let (code, output) = coordinator_with(&["plan", "preview"], &example(name), &run_wide);
        assert_eq!(code, Some(0), "{name}: {output}");
    }

    // The seed reaches the schedules: another seed, other Poisson arrivals.
    let preview = |seed: &str| {
        let flags = ["--process", "poisson", "--seed", seed];
        let (code, output) = coordinator_with(&["plan", "preview"], &example("steps.toml"), &flags);
        assert_eq!(code, Some(0), "{output}");
        output
    };
    assert_eq!(preview("1"), preview("1"));
    assert_ne!(preview("1"), preview("2"));

    let steps = example("steps.toml");
    let (status, output, r, _) = run_report(
        "frictions-run-wide",
        &[
            "run",
            steps.to_str().expect("path"),
            "--duration",
            "3s",
            "--seed",
            "7",
            "--warmup",
            "200ms",
            "--max-in-flight",
            "50",
            "--local-agents",
            "2",
            "--testbed-delay",
            "1ms",
        ],
    );
    assert_ok_or_saturated(status, &r, &output);
    assert!(approx(&r["run"]["duration_s"], 3.0), "{}", r["run"]);
    assert_eq!(u(&r["run"]["max_in_flight_per_agent"]), 50, "{}", r["run"]);
    // 50 s of steps then 25 s of stages, in 3 s: 2 s then 1 s.
    let scenarios = r["scenarios"].as_array().expect("scenarios");
    let timeline: Vec<(f64, f64, f64)> = scenarios
        .iter()
        .map(|s| (f(&s["start_s"]), f(&s["duration_s"]), f(&s["warmup_s"])))
        .collect();
    assert_eq!(timeline, vec![(0.0, 2.0, 0.2), (2.0, 1.0, 0.2)], "{output}");

    for (flag, value, key) in [
        ("--rate", "100", "`rate` (or `stages`, `steps`)"),
        ("--clients", "10", "`clients`"),
        ("--ramp", "1s", "`stages`"),
    ] {
        let (code, output) = coordinator_with(&["plan", "preview"], &steps, &[flag, value]);
        assert_eq!(code, Some(2), "{flag}: {output}");
        assert!(
            output.contains(&format!("{flag}: shapes a single scenario")),
            "{output}"
        );
        assert!(output.contains(key), "{flag}: {output}");
    }
}

/// An unknown field, a value of the wrong type and a semantic mistake are
/// all reported in one run, each with its field and line.
#[test]
fn plan_check_reports_every_problem() {
    let dir = temp_dir("frictions-every-problem");
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\ntimout = \"1s\"\nmax_lag = \"soon\"\n\n[[scenario]]\nrate = \"100/s\"\nduration = \"5s\"\n",
    );
    for (command, flags) in [
        (&["plan", "check"][..], &[][..]),
        (&["run"], &["--local-agents", "1"]),
    ] {
        let (code, output) = coordinator_with(command, &plan, flags);
        assert_eq!(code, Some(2), "{output}");
        assert!(output.contains("3 problem(s)"), "{output}");
        for (line, field) in [
            (3, "target.timout: unknown field"),
            (7, "scenario[0].rate: invalid type"),
            (4, "target.max_lag: \"soon\" is not a duration"),
        ] {
            assert!(
                output.contains(&format!("line {line}: {field}")),
                "{field}: {output}"
            );
        }
        assert!(!output.contains(": plan:"), "{output}");
    }
}

/// Issue 52: a misspelt plan key or value is named with the closest valid
/// one, beside the list of valid ones, in the same one pass; a word close
/// to none gets no guess.
#[test]
fn misspelt_plan_keys_and_values_get_a_suggestion() {
    let dir = temp_dir("frictions-did-you-mean");
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\ntimout = \"1s\"\nprotocol = \"http11\"\n\n[run]\non_agent_loss = \"redistibute\"\n\n[[scenario]]\nrat = 100\nduration = \"5s\"\nmodle = \"open\"\nzzzzzz = 1\n",
    );
    let (code, output) = coordinator_with(&["plan", "check"], &plan, &[]);
    assert_eq!(code, Some(2), "{output}");
    for (line, field, meant) in [
        (
            3,
            "target.timout: unknown field `timout`, expected one of",
            "timeout",
        ),
        (4, "target.protocol: \"http11\" is not a protocol", "http1"),
        (
            7,
            "run.on_agent_loss: \"redistibute\" is not one of",
            "redistribute",
        ),
        (10, "scenario[0].rat: unknown field `rat`", "rate"),
        (12, "scenario[0].modle: unknown field `modle`", "model"),
    ] {
        let found = output
            .lines()
            .find(|l| l.contains(&format!("line {line}: {field}")))
            .unwrap_or_else(|| panic!("no line {line} {field}: {output}"));
        assert!(
            found.contains(&format!("did you mean `{meant}`?")),
            "{found}"
        );
    }
    let far = output
        .lines()
        .find(|l| l.contains("scenario[0].zzzzzz: unknown field"))
        .unwrap_or_else(|| panic!("{output}"));
    assert!(!far.contains("did you mean"), "{far}");
}
