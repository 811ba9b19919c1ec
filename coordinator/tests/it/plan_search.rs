//! The plan's `[search]` table is checked with the rest of the plan: `plan
//! check` refuses a bad value with exit status 2, naming its field and
//! line, as it does for a scenario's.

use crate::common;

use std::time::Duration;

use common::*;

const PLAN: &str = "[target]\nurl = \"testbed\"\n\n[[scenario]]\nrate = 10\nduration = \"5s\"\n\n[search]\nslo = [\"p99<500ms\"]\n";

/// Each bad `[search]` value, on line 10 of the plan: `plan check` exits
/// 2 naming the field and the line, and a good table passes.
#[test]
fn plan_check_refuses_a_bad_search_value_by_field_and_line() {
    let dir = temp_dir("plan-search");
    let good = write_plan(&dir, &format!("{PLAN}to = 500\n"));
    let mut cmd = coordinator();
    cmd.args(["plan", "check"]).arg(&good);
    let (status, output) = run(cmd, "plan check", Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("ok — 1 scenario(s)"), "{output}");

    for (line, field, says) in [
        ("to = -5", "search.to", "above 0"),
        ("step = \"soon\"", "search.step", "not a duration"),
        ("step = \"200ms\"", "search.step", "at least 1s"),
        ("resolution = \"250%\"", "search.resolution", "out of range"),
        ("vary = \"users\"", "search.vary", "\"rate\""),
        ("repeat = 12", "search.repeat", "from 1 to 9"),
        ("slow = 3", "search.slow", "unknown field"),
    ] {
        let plan = write_plan(&dir, &format!("{PLAN}{line}\n"));
        let mut cmd = coordinator();
        cmd.args(["plan", "check"]).arg(&plan);
        let (status, output) = run(cmd, "plan check", Duration::from_secs(20));
        assert_eq!(status.code(), Some(2), "{line}: {output}");
        assert!(
            output.contains(&format!("line 10: {field}: ")) && output.contains(says),
            "{line}: {output}"
        );
    }
}
