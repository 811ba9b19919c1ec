//! The properties the `fuzz/` targets `plan_parse` and `threshold_parse`
//! check, on stable in the normal suite with a bounded number of cases:
//! arbitrary text never panics a parser, and what a parser accepts stays
//! within `proto::bounds`.

use std::path::Path;

use loadfleet_coordinator::plan::{self, Model, Plan, PREVIEW_AGENTS, PREVIEW_ROWS};
use loadfleet_coordinator::thresholds::Threshold;
use loadfleet_proto::bounds;
use proptest::prelude::*;

/// A base that does not exist: data and body files are never read.
const BASE: &str = "/nonexistent/loadfleet-fuzz-props";

/// Everything an accepted plan promises the agents and `plan preview`.
fn assert_within_bounds(p: &Plan) -> Result<(), TestCaseError> {
    prop_assert!(p.scenarios.len() <= bounds::MAX_SCENARIOS);
    prop_assert!(p.run.drain <= bounds::MAX_DRAIN);
    prop_assert!(p.target.timeout <= bounds::MAX_TIMEOUT);
    for s in &p.scenarios {
        prop_assert!(s.start <= bounds::MAX_START, "start {:?}", s.start);
        prop_assert!(s.duration <= bounds::MAX_SCENARIO);
        prop_assert!(s.requests.len() <= bounds::MAX_REQUESTS);
        match &s.model {
            Model::Open(sched) => {
                prop_assert!(sched.stages().len() <= bounds::MAX_STAGES);
                for st in sched.stages() {
                    for r in [st.from_rps, st.to_rps] {
                        prop_assert!((0.0..=bounds::MAX_RATE).contains(&r), "rate {r}");
                    }
                }
                prop_assert!(sched.expected_count() <= bounds::MAX_ARRIVALS);
            }
            Model::Closed(pop) => {
                prop_assert!(pop.stages.len() <= bounds::MAX_STAGES);
                prop_assert!(pop.max_clients() as f64 <= bounds::MAX_CLIENTS);
                prop_assert!(pop.think <= bounds::MAX_THINK);
            }
        }
        // `preview` walks every arrival of an open schedule: only small
        // ones here, so each case stays fast.
        if matches!(&s.model, Model::Open(sched) if sched.expected_count() > 1e5) {
            continue;
        }
        let pv = plan::preview(s, 3);
        prop_assert!(pv.rows.len() as u64 <= PREVIEW_ROWS);
        prop_assert!(pv.rows.iter().all(|(_, a)| a.len() <= PREVIEW_AGENTS));
    }
    Ok(())
}

/// Numbers as a user (or a fuzzer) might write them, in and far out of
/// bounds, TOML's special floats included.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        80 => (1u64..2000).prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<f64>().prop_map(|f| format!("{f:?}")),
        1 => Just("inf".to_string()),
        1 => Just("nan".to_string()),
        1 => Just("-0.0".to_string()),
        1 => Just("1e300".to_string()),
        1 => Just("10000000".to_string()),
        1 => Just("10000001".to_string()),
    ]
}

/// Durations, in and out of bounds, well and badly formed.
fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        80 => (1u64..100).prop_map(|n| format!("\"{n}s\"")),
        1 => any::<u64>().prop_map(|n| format!("\"{n}s\"")),
        1 => any::<u64>().prop_map(|n| format!("\"{n}ns\"")),
        1 => Just("\"31days\"".to_string()),
        1 => Just("\"0s\"".to_string()),
        1 => Just("\"-1s\"".to_string()),
        1 => Just("5".to_string()),
        1 => Just("\"\"".to_string()),
    ]
}

/// One scenario of a well-formed plan with arbitrary numbers.
fn scenario() -> impl Strategy<Value = String> {
    (
        0usize..5,
        number(),
        number(),
        duration(),
        duration(),
        number(),
        number(),
    )
        .prop_map(|(shape, a, b, d1, d2, c, w)| match shape {
            0 => format!("[[scenario]]\nrate = {a}\nduration = {d1}\nstart = {d2}\n"),
            1 => format!(
                "[[scenario]]\nstages = [{{ rate = {a}, for = {d1} }}, {{ to = {c}, over = {d2} }}, {{ rate = {b}, for = {d2} }}]\n"
            ),
            2 => format!(
                "[[scenario]]\nsteps = {{ from = {a}, to = {b}, step = {c}, every = {d1} }}\n"
            ),
            3 => format!(
                "[[scenario]]\nfrom = {b}\nstages = [{{ rate = {a}, for = {d1} }}]\nwarmup = {d2}\n"
            ),
            _ => format!(
                "[[scenario]]\nmodel = \"closed\"\nclients = {a}\nthink = {d1}\nduration = {d2}\n[[scenario.request]]\npath = \"/{{{{seq}}}}\"\nweight = {w}\n"
            ),
        })
}

fn plan_text() -> impl Strategy<Value = String> {
    (
        duration(),
        duration(),
        number(),
        prop::collection::vec(scenario(), 0..3),
    )
        .prop_map(|(drain, timeout, in_flight, scenarios)| {
            format!(
                "[run]\ndrain = {drain}\n[target]\nurl = \"http://127.0.0.1:1\"\ntimeout = {timeout}\nmax_in_flight = {in_flight}\n{}",
                scenarios.concat()
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary text: refused or accepted, never a panic.
    #[test]
    fn arbitrary_plan_text_never_panics(text in ".{0,200}") {
        if let Ok(p) = plan::parse(&text, "props", Path::new(BASE)) {
            assert_within_bounds(&p)?;
        }
    }

    /// Well-formed plans with arbitrary numbers and durations: whatever is
    /// accepted is within bounds.
    #[test]
    fn accepted_plans_are_within_bounds(text in plan_text()) {
        if let Ok(p) = plan::parse(&text, "props", Path::new(BASE)) {
            assert_within_bounds(&p)?;
        }
    }

    /// Arbitrary threshold text never panics, and an accepted threshold
    /// prints as text that parses back to the same threshold.
    #[test]
    fn thresholds_parse_and_round_trip(
        text in prop_oneof![
            ".{0,32}",
            (
                "([a-z]{1,6}\\.)?(p50|p99|p999|max|mean|unsent|errors|failures|incomplete|rps|ok_rps|x)",
                "(<|<=|>|>=|==|=|!)",
                "-?[0-9]{0,4}(\\.[0-9]{0,3})?(e[0-9]{1,3})?(ms|us|s|%|)|inf|NaN",
            )
                .prop_map(|(m, op, v)| format!("{m}{op}{v}")),
        ]
    ) {
        if let Ok(t) = text.parse::<Threshold>() {
            let back: Threshold = t.to_string().parse().map_err(TestCaseError::fail)?;
            prop_assert_eq!(back, t);
        }
    }
}

/// The generators reach the code past the parser: enough of their plans
/// and thresholds are accepted that the bounds checks above are exercised.
#[test]
fn generators_make_accepted_input() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = plan_text();
    let accepted = (0..256)
        .filter(|_| {
            let text = strategy.new_tree(&mut runner).expect("generator").current();
            plan::parse(&text, "props", Path::new(BASE)).is_ok_and(|p| !p.scenarios.is_empty())
        })
        .count();
    assert!(
        accepted >= 5,
        "only {accepted} of 256 generated plans accepted"
    );
}
