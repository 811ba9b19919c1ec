//! Plans end to end: shapes, the closed model and scenarios in sequence,
//! on a real local fleet; bad plans refused by the real binary.

use crate::common;

use std::time::Duration;

use common::*;

/// A ramp 0 -> 1,000 req/s over 10 s: the per-second `intended` series
/// follows the ramp (second i carries 100·i + 50 arrivals).
#[test]
fn ramp_is_followed_second_by_second() {
    let dir = temp_dir("ramp");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "2",
        "--rate",
        "1000",
        "--ramp",
        "10s",
        "--duration",
        "10s",
    ])
    .args(["--testbed-delay", "1ms", "--out"])
    .arg(&dir);
    // --ramp equal to --duration is refused; use a 10 s ramp then 1 s hold.
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("--ramp"), "{output}");

    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\n[[scenario]]\nname = \"ramp\"\nstages = [{ to = 1000, over = \"10s\" }]\n",
    );
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "2", "--testbed-delay", "1ms", "--out"])
        .arg(&dir)
        // The plan sits in the folder; --overwrite keeps it.
        .arg("--overwrite");
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(90));
    let r = read_report(&dir);
    // What this checks is the schedule; a stall of the shared test machine
    // may add GENERATOR_SATURATED, which is not about it.
    assert_ok_or_saturated(status, &r, &output);
    let intervals = r["intervals"].as_array().expect("intervals");
    for i in 0..10u64 {
        let iv = intervals
            .iter()
            .find(|iv| iv["t"].as_f64() == Some(i as f64))
            .unwrap_or_else(|| panic!("no interval {i}"));
        let expected = 100 * i + 50;
        let got = u(&iv["intended"]);
        assert!(
            got.abs_diff(expected) <= 2,
            "second {i}: intended {got}, expected {expected}"
        );
    }
    assert_eq!(u(&r["totals"]["intended"]), 5000);
    assert_eq!(u(&r["totals"]["unsent"]["total"]), 0, "{output}");
}

/// Closed model: 20 clients against 50 ms of work never have more than 20
/// requests in flight and deliver about 20 / 0.05 s = 400 req/s.
#[test]
fn closed_model_keeps_its_population() {
    let dir = temp_dir("closed");
    let mut cmd = coordinator();
    cmd.args([
        "run",
        "--local-agents",
        "2",
        "--clients",
        "20",
        "--duration",
        "5s",
    ])
    .args(["--testbed-delay", "50ms", "--out"])
    .arg(&dir);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{output}");
    let r = read_report(&dir);
    assert_eq!(r["scenarios"][0]["model"], "closed");
    for iv in r["intervals"].as_array().expect("intervals") {
        assert!(
            u(&iv["max_in_flight"]) <= 20,
            "in flight above the population: {iv}"
        );
    }
    let peak = r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|iv| u(&iv["max_in_flight"]))
        .max()
        .unwrap_or(0);
    assert_eq!(peak, 20, "all 20 clients were busy at some point");
    let rps = r["totals"]["throughput_rps"].as_f64().expect("rps");
    assert!(
        (340.0..=410.0).contains(&rps),
        "throughput {rps}, expected about 400"
    );
    assert!(
        output.contains("closed"),
        "the summary says which model: {output}"
    );
}

/// Two scenarios one after another: each is reported apart, with its own
/// window, and the totals add them up.
#[test]
fn scenarios_in_sequence_are_reported_apart() {
    let dir = temp_dir("sequence");
    let plan = write_plan(
        &dir,
        r#"
[run]
warmup = "1s"

[target]
url = "testbed"

[[scenario]]
name = "first"
rate = 100
duration = "3s"

[[scenario]]
name = "second"
after = "previous"
rate = 200
duration = "3s"

[[scenario.request]]
path = "/item/{{seq}}"
"#,
    );
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--local-agents", "2", "--testbed-delay", "1ms", "--out"])
        .arg(&dir)
        // The plan sits in the folder; --overwrite keeps it.
        .arg("--overwrite");
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{output}");
    let r = read_report(&dir);
    let s = r["scenarios"].as_array().expect("scenarios");
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0]["name"].as_str(), s[1]["name"].as_str()),
        (Some("first"), Some("second"))
    );
    assert_eq!(u(&s[0]["intended"]), 300);
    assert_eq!(u(&s[1]["intended"]), 600);
    assert_eq!(s[0]["window"]["start_s"].as_f64(), Some(1.0));
    assert_eq!(s[0]["window"]["end_s"].as_f64(), Some(3.0));
    assert_eq!(s[1]["window"]["start_s"].as_f64(), Some(4.0));
    assert_eq!(s[1]["window"]["end_s"].as_f64(), Some(6.0));
    let rps0 = s[0]["throughput_rps"].as_f64().expect("rps");
    let rps1 = s[1]["throughput_rps"].as_f64().expect("rps");
    assert!(
        (rps0 - 100.0).abs() < 10.0 && (rps1 - 200.0).abs() < 20.0,
        "{rps0} {rps1}"
    );
    assert_eq!(u(&r["totals"]["intended"]), 900);
    // The first scenario's arrivals are all in its own seconds.
    let early: u64 = r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .filter(|iv| iv["t"].as_f64().unwrap_or(99.0) < 3.0)
        .map(|iv| u(&iv["intended"]))
        .sum();
    assert_eq!(early, 300);
}

/// Bad plans: exit 2 with the field and line, from `plan check` and `run`.
#[test]
fn bad_plan_is_refused_with_field_and_line() {
    let dir = temp_dir("badplan");
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"testbed\"\n\n[[scenario]]\nrate = -3\nduration = \"5s\"\n",
    );
    for args in [vec!["plan", "check"], vec!["run"]] {
        let mut cmd = coordinator();
        cmd.args(&args).arg(&plan).args(["--local-agents", "1"]);
        if args[0] == "plan" {
            cmd = coordinator();
            cmd.args(&args).arg(&plan);
        }
        let (status, output) = run(cmd, "coordinator", Duration::from_secs(20));
        assert_eq!(status.code(), Some(2), "{args:?}: {output}");
        assert!(
            output.contains("line 5") && output.contains("scenario[0].rate"),
            "{output}"
        );
    }
    let mut cmd = coordinator();
    cmd.args(["plan", "check"]).arg(dir.join("missing.toml"));
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("missing.toml"), "{output}");
}

/// `plan preview` shows the fleet and per-agent rate without sending.
#[test]
fn preview_splits_the_rate_across_agents() {
    let dir = temp_dir("preview");
    let plan = write_plan(
        &dir,
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[scenario]]\nname = \"p\"\nrate = 90\nduration = \"2s\"\n",
    );
    let mut cmd = coordinator();
    cmd.args(["plan", "preview"])
        .arg(&plan)
        .args(["--agents", "3"]);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("agent2"), "{output}");
    let line = output
        .lines()
        .find(|l| l.trim_start().starts_with("[stdout]") && l.contains("0s ") && l.contains(" 90 "))
        .unwrap_or_else(|| panic!("no first-second line: {output}"));
    assert_eq!(line.matches(" 30").count(), 3, "{line}");
}

/// The table of malformed plans, through the real binary: each one exits 2
/// with a message naming the field, and none panics. The rows after the
/// first few are the bounds (`loadfleet_proto::bounds`, README "Plan
/// bounds"): each names its field and line and says what to write instead,
/// and `plan check` and `plan preview` both refuse it quickly.
#[test]
fn every_malformed_plan_exits_2_naming_the_field() {
    let dir = temp_dir("bad-plans");
    let target = "[target]\nurl = \"http://127.0.0.1:9/\"\n";
    let one = "[[scenario]]\nrate = 5\nduration = \"1s\"\n";
    let wide = dir.join("wide.csv");
    let header: Vec<String> = (0..257).map(|c| format!("c{c}")).collect();
    std::fs::write(
        &wide,
        format!("{}\n{}\n", header.join(","), vec!["1"; 257].join(",")),
    )
    .expect("write csv");
    let long = dir.join("long.csv");
    std::fs::write(&long, format!("u\n{}", "1\n".repeat(1_000_001))).expect("write csv");
    let many_stages = vec!["{ rate = 1, for = \"1s\" }"; 10_001].join(", ");
    let many_requests = "[[scenario.request]]\npath = \"/\"\n".repeat(1001);
    let many_headers: Vec<String> = (0..65).map(|h| format!("\"x-{h}\" = \"v\"")).collect();
    let heavy = "[[scenario.request]]\nweight = 10000\n".repeat(7);
    // (what, plan, field, a word of the fix)
    let cases: Vec<(&str, String, &str, &str)> = vec![
        ("wrong type", format!("{target}[[scenario]]\nrate = \"fast\"\nduration = \"1s\"\n"), "rate", "plain numbers"),
        ("negative rate", format!("{target}[[scenario]]\nrate = -5\nduration = \"1s\"\n"), "scenario[0].rate", ">= 0"),
        ("unknown key", format!("{target}[[scenario]]\nrat = 5\nduration = \"1s\"\n"), "rat", "spelling"),
        ("missing target", "[[scenario]]\nrate = 5\nduration = \"1s\"\n".to_string(), "target", "add"),
        (
            "overlapping stages",
            format!("{target}[[scenario]]\nstages = [{{ rate = 5, for = \"10s\" }}, {{ rate = 9, for = \"5s\", at = \"5s\" }}]\n"),
            "scenario[0].stages[1].at",
            "move it later",
        ),
        (
            "unreadable data file",
            format!("{target}[[scenario]]\nrate = 5\nduration = \"1s\"\ndata = {{ file = \"no-such.csv\" }}\n"),
            "scenario[0].data.file",
            "cannot read",
        ),
        ("not TOML at all", "this is = = not toml\n".to_string(), "line 1", "line 1"),
        // The bounds.
        (
            "infinite closed clients from",
            format!("{target}[[scenario]]\nmodel = \"closed\"\nfrom = inf\nstages = [{{ hold = \"1s\" }}]\n"),
            "scenario[0].from",
            "use a clients >= 0",
        ),
        (
            "a rate above the bound",
            format!("{target}[[scenario]]\nrate = 1e12\nduration = \"1s\"\n"),
            "scenario[0].rate",
            "split it into scenarios",
        ),
        ("start a century away", format!("{target}[[scenario]]\nstart = \"100years\"\nrate = 5\nduration = \"1s\"\n"), "scenario[0].start", "use at most"),
        ("drain of two hours", format!("[run]\ndrain = \"2h\"\n{target}{one}"), "run.drain", "use at most"),
        ("warm-up of a millennium", format!("[run]\nwarmup = \"1000years\"\n{target}{one}"), "run.warmup", "use at most"),
        ("timeout of two hours", format!("[target]\nurl = \"http://127.0.0.1:9/\"\ntimeout = \"2h\"\n{one}"), "target.timeout", "use at most"),
        ("max_lag of two hours", format!("[target]\nurl = \"http://127.0.0.1:9/\"\nmax_lag = \"2h\"\n{one}"), "target.max_lag", "use at most"),
        ("latency floor of two hours", format!("[target]\nurl = \"http://127.0.0.1:9/\"\nlatency_floor = \"2h\"\n{one}"), "target.latency_floor", "use at most"),
        ("too many connections", format!("[target]\nurl = \"http://127.0.0.1:9/\"\nconnections = 100001\n{one}"), "target.connections", "from 1 to 100000"),
        ("too many agents expected", format!("{target}[agents]\nexpect = 10001\n{one}"), "agents.expect", "from 1 to 10000"),
        (
            "think of two hours",
            format!("{target}[[scenario]]\nmodel = \"closed\"\nclients = 1\nthink = \"2h\"\nduration = \"1s\"\n"),
            "scenario[0].think",
            "use at most",
        ),
        ("a scenario of a millennium", format!("{target}[[scenario]]\nrate = 5\nduration = \"1000years\"\n"), "scenario[0].duration", "use at most"),
        (
            "a stage of a millennium",
            format!("{target}[[scenario]]\nstages = [{{ rate = 1, for = \"1000years\" }}]\n"),
            "scenario[0].stages[0].duration",
            "use at most",
        ),
        (
            "steps beyond the stage bound",
            format!("{target}[[scenario]]\nsteps = {{ from = 0, to = 100000, step = 1, every = \"1s\" }}\n"),
            "scenario[0].steps",
            "use a larger step",
        ),
        ("too many stages", format!("{target}[[scenario]]\nstages = [{many_stages}]\n"), "scenario[0].stages", "fewer, longer stages"),
        ("too many scenarios", format!("{target}{}", one.repeat(101)), "scenario", "split the plan"),
        ("a long name", format!("{target}[[scenario]]\nname = \"{}\"\nrate = 5\nduration = \"1s\"\n", "n".repeat(300)), "scenario[0].name", "shorter name"),
        ("too many request kinds", format!("{target}{one}{many_requests}"), "scenario[0].request", "merge request kinds"),
        (
            "too many headers",
            format!("{target}{one}[[scenario.request]]\nheaders = {{ {} }}\n", many_headers.join(", ")),
            "scenario[0].request[0].headers",
            "fewer headers",
        ),
        (
            "a huge header",
            format!("{target}{one}[[scenario.request]]\nheaders = {{ x = \"{}\" }}\n", "v".repeat(9000)),
            "scenario[0].request[0].headers.x",
            "shorten the value",
        ),
        (
            "a long method",
            format!("{target}{one}[[scenario.request]]\nmethod = \"{}\"\n", "M".repeat(40)),
            "scenario[0].request[0].method",
            "standard method",
        ),
        ("request weights too heavy", format!("{target}{one}{heavy}"), "scenario[0].request.weight", "same proportions"),
        (
            "a long path",
            format!("{target}{one}[[scenario.request]]\npath = \"/{}\"\n", "p".repeat(9000)),
            "scenario[0].request[0].path",
            "shorten it",
        ),
        (
            "too many data columns",
            format!("{target}{one}data = {{ file = {:?} }}\n", wide.display().to_string()),
            "scenario[0].data.file",
            "only the columns",
        ),
        (
            "too many data rows",
            format!("{target}{one}data = {{ file = {:?} }}\n", long.display().to_string()),
            "scenario[0].data.file",
            "smaller sample",
        ),
        ("a NaN threshold", format!("thresholds = [\"p99<NaNms\"]\n{target}{one}"), "thresholds[0]", "number >= 0"),
    ];
    const FIRST_BOUND: usize = 7;
    assert_eq!(cases[FIRST_BOUND].0, "infinite closed clients from");
    let mut slowest = Duration::ZERO;
    for (i, (what, text, field, fix)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).expect("write plan");
        for command in ["check", "preview"] {
            let mut cmd = coordinator();
            cmd.args(["plan", command]).arg(&path);
            let started = std::time::Instant::now();
            let (status, output) = run(cmd, "plan", Duration::from_secs(20));
            let took = started.elapsed();
            slowest = slowest.max(took);
            assert_eq!(status.code(), Some(2), "{what} ({command}): {output}");
            assert!(
                output.contains(field),
                "{what} ({command}): no mention of {field:?} in:\n{output}"
            );
            // Every bound names its line (a missing table has none).
            assert!(
                i < FIRST_BOUND || output.contains("line "),
                "{what} ({command}): no line in:\n{output}"
            );
            assert!(
                output.contains(fix),
                "{what} ({command}): no fix {fix:?} in:\n{output}"
            );
            assert!(!output.contains("panicked"), "{what} ({command}): {output}");
            // Well under a second each on an idle machine; the slack is
            // for a busy one (process start included).
            assert!(
                took < Duration::from_secs(5),
                "{what} ({command}) took {took:?}"
            );
        }
    }
    eprintln!(
        "slowest plan check/preview over {} bad plans: {slowest:?}",
        cases.len()
    );
}

/// `plan preview` of the largest plans the bounds accept stays short: a
/// month of a million closed clients, and a month of open arrivals, each in
/// at most 600 rows.
#[test]
fn preview_of_any_accepted_plan_stays_small() {
    let dir = temp_dir("big-preview");
    for (what, scenario) in [
        (
            "closed",
            "model = \"closed\"\nclients = 1000000\nduration = \"30days\"\n",
        ),
        ("open", "rate = 0.5\nduration = \"30days\"\n"),
    ] {
        let plan = write_plan(
            &dir,
            &format!("[target]\nurl = \"http://127.0.0.1:9/\"\n[[scenario]]\n{scenario}"),
        );
        let mut cmd = coordinator();
        cmd.args(["plan", "preview"])
            .arg(&plan)
            .args(["--agents", "1000"]);
        let started = std::time::Instant::now();
        let (status, output) = run(cmd, "plan preview", Duration::from_secs(60));
        let took = started.elapsed();
        assert_eq!(status.code(), Some(0), "{what}: {output}");
        let rows = output.lines().filter(|l| l.contains('#')).count();
        assert!((500..=600).contains(&rows), "{what}: {rows} rows");
        assert!(output.contains("per 4320 s"), "{what}: {output:.400}");
        assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
        if what == "closed" {
            // A million clients over 1,000 agents: 1,000 each.
            assert!(
                output.contains(" 1000000     1000     1000"),
                "{output:.600}"
            );
        }
    }
}

/// `plan preview` takes the flags `run` takes: `examples/ramp.toml` (up to
/// 1,000 over 10 s, hold 20 s, down over 5 s: 27,500 arrivals in 35 s) in
/// 6 s keeps its shape and its rates, so it peaks at 1,000 per second and
/// sends 6/35 of the arrivals.
#[test]
fn preview_shows_the_plan_with_flags_laid_over_it() {
    let plan = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ramp.toml");
    let mut cmd = coordinator();
    cmd.args(["plan", "preview"])
        .arg(&plan)
        .args(["--duration", "6s", "--agents", "1"]);
    let (status, output) = run(cmd, "plan preview", Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{output}");
    let per_second: Vec<u64> = output
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("[stdout]"))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let t = words.next()?.strip_suffix('s')?;
            t.parse::<u64>().ok()?;
            words.next()?.parse().ok()
        })
        .collect();
    assert_eq!(per_second.len(), 6, "{output}");
    let total: u64 = per_second.iter().sum();
    assert!(total.abs_diff(27_500 * 6 / 35) <= 3, "{per_second:?}");
    let peak = per_second.iter().max().copied().unwrap_or(0);
    assert!((900..=1000).contains(&peak), "{per_second:?}");
    // The ramp up: the first second is below the peak, the next higher.
    assert!(per_second[0] < per_second[1], "{per_second:?}");

    let mut cmd = coordinator();
    cmd.args(["plan", "preview"])
        .arg(&plan)
        .args(["--ramp", "60s"]);
    let (status, output) = run(cmd, "plan preview", Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("--ramp"), "{output}");
}

/// `plan preview` shows exactly what `run` sends: for the same plan and
/// flags, the fleet's arrivals per second in the preview are the run's
/// intended per second, and the per-agent columns are the agents' shares.
#[test]
fn preview_matches_what_run_intends() {
    let plan = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ramp.toml");
    let flags = ["--duration", "4s"];
    let mut cmd = coordinator();
    cmd.args(["plan", "preview"])
        .arg(&plan)
        .args(flags)
        .args(["--agents", "2"]);
    let (status, output) = run(cmd, "plan preview", Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{output}");
    // `     1s       991      496      495  ####`
    let rows: Vec<Vec<u64>> = output
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("[stdout]"))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.next()?.strip_suffix('s')?.parse::<u64>().ok()?;
            words.take(3).map(|w| w.parse().ok()).collect()
        })
        .collect();
    assert_eq!(rows.len(), 4, "{output}");
    let fleet: Vec<u64> = rows.iter().map(|r| r[0]).collect();
    let mut per_agent: Vec<u64> = (1..3).map(|a| rows.iter().map(|r| r[a]).sum()).collect();

    let plan_arg = plan.to_string_lossy().into_owned();
    let mut args = vec!["run", plan_arg.as_str(), "--local-agents", "2"];
    args.extend(flags);
    let (status, output, r, _) = run_report("preview-vs-run", &args);
    assert_ok_or_saturated(status, &r, &output);
    let intervals = r["intervals"].as_array().expect("intervals");
    let intended: Vec<u64> = intervals.iter().map(|i| u(&i["intended"])).collect();
    assert_eq!(
        intended[..4],
        fleet[..],
        "run {intended:?}, preview {fleet:?}"
    );
    assert!(intended[4..].iter().all(|n| *n == 0), "{intended:?}");
    let mut agents: Vec<u64> = r["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| u(&a["intended"]))
        .collect();
    // Which agent takes which share depends on who joins first.
    agents.sort_unstable();
    per_agent.sort_unstable();
    assert_eq!(agents, per_agent);
    assert_eq!(u(&r["totals"]["intended"]), fleet.iter().sum::<u64>());
}

/// `[agents] expect = 2` in a plan waits for two remote agents, as
/// `--expect-agents 2` does, and starts none of its own.
#[test]
fn plan_expect_waits_for_remote_agents() {
    let (_testbed, addr) = start_testbed(&[]);
    let dir = temp_dir("plan-expect");
    let plan = write_plan(
        &dir,
        &format!(
            "[target]\nurl = \"http://{addr}/\"\n[agents]\nexpect = 2\n[[scenario]]\nrate = 100\nduration = \"2s\"\n"
        ),
    );
    let mut cmd = coordinator();
    cmd.arg("run")
        .arg(&plan)
        .args(["--listen", "127.0.0.1:0", "--token", "t", "--out"])
        .arg(&dir)
        // The plan sits in the folder; --overwrite keeps it.
        .arg("--overwrite");
    let mut c = Proc::spawn(cmd, "coordinator");
    let line = c.wait_for_line("coordinator listening on", Duration::from_secs(20));
    assert!(line.contains("waiting for 2 agent(s)"), "{line}");
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("address in the line");
    let agents: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|id| {
            let mut cmd = agent();
            cmd.args(["--coordinator", &format!("http://{addr}")])
                .args(["--token", "t", "--connect-timeout", "10s", "--id", id]);
            Proc::spawn(cmd, "agent")
        })
        .collect();
    let (status, output) = c.wait(Duration::from_secs(60));
    let r = read_report(&dir);
    // On a busy test machine the agents may start late enough to be
    // flagged GENERATOR_SATURATED.
    assert_ok_or_saturated(status, &r, &output);
    for a in agents {
        let (status, output) = a.wait(Duration::from_secs(15));
        assert_eq!(status.code(), Some(0), "{output}");
    }
    let ids: Vec<&str> = r["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"a") && ids.contains(&"b"), "{ids:?}");
    assert_eq!(u(&r["totals"]["intended"]), 200);
}
