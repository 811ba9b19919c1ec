//! Flags laid over plans: what each reshaping flag makes of a plan, and
//! that a mistake in a flag's value names the flag.

use std::path::{Path, PathBuf};

use loadfleet_proto::schedule::Stage;

use super::*;
use crate::plan::{resolve, Model, Plan, PlanErrors};

const S: u64 = 1_000_000_000;

fn plan_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadfleet-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn stages(plan: &Plan) -> Vec<(u64, f64, f64)> {
    let stages: &[Stage] = match &plan.scenarios[0].model {
        Model::Open(s) => s.stages(),
        Model::Closed(p) => &p.stages,
    };
    stages
        .iter()
        .map(|s| (s.duration_ns, s.from_rps, s.to_rps))
        .collect()
}

fn arrivals(plan: &Plan) -> u64 {
    match &plan.scenarios[0].model {
        Model::Open(s) => s.count(),
        Model::Closed(_) => panic!("open"),
    }
}

fn refused(file: Option<&Path>, flags: &Overlay) -> PlanErrors {
    resolve(file, flags).expect_err("refused")
}

#[test]
fn flags_alone_make_a_plan() {
    let plan = resolve(None, &Overlay::default()).unwrap();
    assert_eq!(plan.target.url, TESTBED_URL);
    assert_eq!(stages(&plan), vec![(10 * S, 500.0, 500.0)]);
    let flags = Overlay {
        clients: Some(20),
        duration: Some(Duration::from_secs(5)),
        ..Overlay::default()
    };
    let plan = resolve(None, &flags).unwrap();
    assert_eq!(plan.scenarios[0].model.name(), "closed");
    assert_eq!(stages(&plan), vec![(5 * S, 20.0, 20.0)]);
}

#[test]
fn duration_on_a_constant_plan_keeps_the_rate() {
    let path = plan_file(
        "constant.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nrate = 100\nduration = \"10s\"\n",
    );
    let flags = Overlay {
        duration: Some(Duration::from_secs(2)),
        ..Overlay::default()
    };
    let plan = resolve(Some(&path), &flags).unwrap();
    assert_eq!(stages(&plan), vec![(2 * S, 100.0, 100.0)]);
    assert_eq!(arrivals(&plan), 200);
}

#[test]
fn duration_on_a_shaped_plan_keeps_the_shape() {
    let path = plan_file(
        "ramp.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nstages = [{ to = 200, over = \"10s\" }]\n",
    );
    let flags = Overlay {
        duration: Some(Duration::from_secs(5)),
        ..Overlay::default()
    };
    let plan = resolve(Some(&path), &flags).unwrap();
    assert_eq!(stages(&plan), vec![(5 * S, 0.0, 200.0)]);
    assert_eq!(arrivals(&plan), 500);
    // The example: 0 -> 1,000 over 10 s, hold 20 s, down over 5 s, in 6 s.
    let flags = Overlay {
        duration: Some(Duration::from_secs(7)),
        ..Overlay::default()
    };
    let plan = resolve(Some(&example("ramp.toml")), &flags).unwrap();
    assert_eq!(
        stages(&plan),
        vec![
            (2 * S, 0.0, 1000.0),
            (4 * S, 1000.0, 1000.0),
            (S, 1000.0, 0.0)
        ]
    );
}

#[test]
fn rate_scales_the_shape() {
    let flags = Overlay {
        rate: Some(500.0),
        ..Overlay::default()
    };
    let plan = resolve(Some(&example("ramp.toml")), &flags).unwrap();
    let peak = stages(&plan).iter().map(|s| s.2).fold(0.0, f64::max);
    assert_eq!(peak, 500.0);
    assert_eq!(stages(&plan)[0], (10 * S, 0.0, 500.0));
    assert_eq!(plan.duration(), Duration::from_secs(35));
}

#[test]
fn ramp_reaches_the_plans_rate() {
    let path = plan_file(
        "held.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nrate = 200\nduration = \"10s\"\n",
    );
    let flags = Overlay {
        ramp: Some(Duration::from_secs(1)),
        ..Overlay::default()
    };
    let plan = resolve(Some(&path), &flags).unwrap();
    assert_eq!(stages(&plan), vec![(S, 0.0, 200.0), (9 * S, 200.0, 200.0)]);
    assert_eq!(arrivals(&plan), 100 + 1800);
    let path = plan_file(
        "ramped.toml",
        "[target]\nurl = \"testbed\"\n[[scenario]]\nstages = [{ to = 200, over = \"10s\" }]\n",
    );
    let plan = resolve(Some(&path), &flags).unwrap();
    let last = *stages(&plan).last().unwrap();
    assert_eq!(last.2, 200.0, "{:?}", stages(&plan));
}

#[test]
fn mistakes_in_flags_name_the_flag() {
    let cases: &[(Overlay, &str)] = &[
        (
            Overlay {
                url: Some("ftp://x/".into()),
                ..Overlay::default()
            },
            "--url",
        ),
        (
            Overlay {
                url: Some("localhost:80".into()),
                ..Overlay::default()
            },
            "--url",
        ),
        (
            Overlay {
                headers: vec!["nope".into()],
                ..Overlay::default()
            },
            "--header",
        ),
        (
            Overlay {
                method: Some("BAD METHOD".into()),
                ..Overlay::default()
            },
            "--method",
        ),
        (
            Overlay {
                ramp: Some(Duration::from_secs(10)),
                ..Overlay::default()
            },
            "--ramp",
        ),
        (
            Overlay {
                clients: Some(2_000_000),
                ..Overlay::default()
            },
            "--clients",
        ),
        (
            Overlay {
                duration: Some(Duration::ZERO),
                ..Overlay::default()
            },
            "--duration",
        ),
        (
            Overlay {
                warmup: Some(Duration::from_secs(10)),
                ..Overlay::default()
            },
            "--warmup",
        ),
        (
            Overlay {
                rate: Some(1e7),
                duration: Some(Duration::from_secs(3600)),
                ..Overlay::default()
            },
            "--rate",
        ),
    ];
    for (flags, flag) in cases {
        let e = refused(None, flags);
        assert!(
            e.errors
                .iter()
                .any(|e| e.field == *flag && e.line.is_none()),
            "{flag}: {e}"
        );
        assert!(e.to_string().contains(flag), "{e}");
    }
}

#[test]
fn a_plan_without_target_takes_the_url_flag() {
    let path = plan_file(
        "no-target.toml",
        "[[scenario]]\nrate = 5\nduration = \"1s\"\n",
    );
    let flags = Overlay {
        url: Some("http://127.0.0.1:9/".into()),
        ..Overlay::default()
    };
    assert_eq!(
        resolve(Some(&path), &flags).unwrap().target.url,
        "http://127.0.0.1:9/"
    );
}

#[test]
fn reshaping_many_scenarios_is_refused() {
    let flags = Overlay {
        rate: Some(10.0),
        ..Overlay::default()
    };
    let e = refused(Some(&example("sequence.toml")), &flags);
    assert!(e.to_string().contains("--rate"), "{e}");
}
