//! The plan as a whole: parsing, validation messages, assignments and
//! the preview.

use std::path::Path;
use std::time::Duration;

use super::validated::join_url;
use super::*;

const TARGET: &str = "[target]\nurl = \"http://127.0.0.1:8080\"\n";

fn parse_str(text: &str) -> Result<Plan, PlanErrors> {
    parse(text, "test.toml", Path::new("."))
}

fn errors(text: &str) -> Vec<PlanError> {
    match parse_str(text) {
        Ok(_) => panic!("plan was accepted:\n{text}"),
        Err(e) => e.errors,
    }
}

#[test]
fn every_example_plan_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 6, "expected the example plans, found {n}");
}

/// Each malformed plan names the field (and its line where it has one)
/// and nothing panics.
#[test]
fn sse_scenario_becomes_its_assignment() {
    let plan = parse_str(&format!(
        "{TARGET}[[scenario]]\nkind = \"sse\"\nrate = 100\nduration = \"10s\"\nhold = \"5s\"\nsend_time = \"data.sent_us\"\nsend_time_unit = \"us\"\nfanout_event = \"broadcast\"\nreconnect = \"250ms\"\n[[scenario.request]]\npath = \"/sse\"\n"
    ))
    .unwrap();
    let a = plan.assignments("http://127.0.0.1:8080");
    let sse = a[0].sse.as_ref().expect("an sse scenario");
    assert_eq!(sse.hold_ns, 5_000_000_000);
    assert_eq!(sse.reconnect_ns, 250_000_000);
    assert_eq!(
        (sse.send_time.as_str(), sse.send_time_unit.as_str()),
        ("sent_us", "us")
    );
    assert_eq!(sse.fanout_event, "broadcast");
    // The last subscriber arrives at 10s and holds until 15s.
    assert_eq!(a[0].duration_ns, 15_000_000_000);
    assert_eq!(
        plan.scenarios[0].sse.as_ref().unwrap().send_time_source(),
        "data.sent_us (us)"
    );
    let plain = parse_str(&format!(
        "{TARGET}[[scenario]]\nrate = 1\nduration = \"1s\"\n"
    ))
    .unwrap();
    assert!(plain.assignments("http://h:1")[0].sse.is_none());
}

#[test]
fn bad_plans_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("wrong type", "[[scenario]]\nrate = \"fast\"\nduration = \"1s\"\n", "invalid type"),
        ("negative rate", "[[scenario]]\nrate = -5\nduration = \"1s\"\n", "scenario[0].rate"),
        ("unknown key", "[[scenario]]\nrat = 5\nduration = \"1s\"\n", "rat"),
        ("bad duration", "[[scenario]]\nrate = 5\nduration = \"soon\"\n", "scenario[0].duration"),
        ("missing duration", "[[scenario]]\nrate = 5\n", "scenario[0].duration"),
        ("no scenario", "", "scenario"),
        (
            "overlapping stages",
            "[[scenario]]\nstages = [{ rate = 5, for = \"10s\" }, { rate = 9, for = \"5s\", at = \"5s\" }]\n",
            "scenario[0].stages[1].at",
        ),
        ("bad stage", "[[scenario]]\nstages = [{ to = 5 }]\n", "scenario[0].stages[0]"),
        ("closed with rate", "[[scenario]]\nmodel = \"closed\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].rate"),
        ("unknown model", "[[scenario]]\nmodel = \"half-open\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].model"),
        ("unknown process", "[[scenario]]\nprocess = \"bursty\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].process"),
        ("unreadable data file", "[[scenario]]\nrate = 5\nduration = \"1s\"\ndata = { file = \"/nonexistent/users.csv\" }\n", "scenario[0].data.file"),
        ("unreadable body file", "[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\nbody_file = \"/nonexistent/body.json\"\n", "scenario[0].request[0].body_file"),
        ("unknown placeholder", "[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\npath = \"/{{user}}\"\n", "scenario[0].request[0].path"),
        ("after nothing", "[[scenario]]\nafter = \"previous\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].after"),
        ("warm-up too long", "[[scenario]]\nrate = 5\nduration = \"1s\"\nwarmup = \"2s\"\n", "scenario[0].warmup"),
        ("bad threshold", "[[scenario]]\nrate = 5\nduration = \"1s\"\n", "thresholds[0]"),
        ("zero in-flight", "[[scenario]]\nrate = 5\nduration = \"1s\"\n", "target.max_in_flight"),
        ("unknown kind", "[[scenario]]\nkind = \"websocket\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].kind"),
        ("hold without sse", "[[scenario]]\nhold = \"5s\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].hold"),
        ("hold of a closed subscriber", "[[scenario]]\nkind = \"sse\"\nmodel = \"closed\"\nclients = 5\nhold = \"5s\"\nduration = \"1s\"\n", "scenario[0].hold"),
        ("send time nowhere", "[[scenario]]\nkind = \"sse\"\nsend_time = \"header.date\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].send_time"),
        ("send time unit", "[[scenario]]\nkind = \"sse\"\nsend_time = \"id\"\nsend_time_unit = \"h\"\nrate = 5\nduration = \"1s\"\n", "scenario[0].send_time_unit"),
    ];
    for (what, body, field) in cases {
        let text = if *what == "zero in-flight" {
            format!("[target]\nurl = \"http://h:1\"\nmax_in_flight = 0\n{body}")
        } else if *what == "bad threshold" {
            format!("thresholds = [\"p98<1ms\"]\n{TARGET}{body}")
        } else {
            format!("{TARGET}{body}")
        };
        let errs = errors(&text);
        let all: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e)).collect();
        assert!(
            errs.iter()
                .any(|e| e.field.contains(field) || e.message.contains(field)),
            "{what}: expected an error about {field:?}, got {all:?}"
        );
    }
}

#[test]
fn missing_target_is_named() {
    let errs = errors("[[scenario]]\nrate = 5\nduration = \"1s\"\n");
    assert!(errs.iter().any(|e| e.field == "target"), "{errs:?}");
    let errs = errors("[target]\ntimeout = \"1s\"\n[[scenario]]\nrate = 5\nduration = \"1s\"\n");
    assert!(
        errs.iter()
            .any(|e| e.field == "target.url" && e.line == Some(1)),
        "{errs:?}"
    );
}

#[test]
fn lines_point_at_the_mistake() {
    let errs = errors(&format!(
        "{TARGET}\n[[scenario]]\nname = \"a\"\nrate = -1\nduration = \"1s\"\n"
    ));
    assert_eq!(errs[0].line, Some(6), "{errs:?}");
}

#[test]
fn shapes_resolve_to_stages() {
    let plan = parse_str(&format!(
        "{TARGET}[[scenario]]\nname = \"s\"\nsteps = {{ from = 100, to = 300, step = 100, every = \"10s\" }}\n\
         [[scenario]]\nname = \"r\"\nafter = \"s\"\nfrom = 10\nstages = [{{ to = 20, over = \"5s\" }}, {{ hold = \"5s\" }}, {{ rate = 0, for = \"2s\" }}]\n"
    ))
    .unwrap();
    let Model::Open(steps) = &plan.scenarios[0].model else {
        panic!("open")
    };
    let levels: Vec<f64> = steps.stages().iter().map(|s| s.from_rps).collect();
    assert_eq!(levels, vec![100.0, 200.0, 300.0]);
    assert_eq!(plan.scenarios[1].start, Duration::from_secs(30));
    let Model::Open(r) = &plan.scenarios[1].model else {
        panic!("open")
    };
    let shape: Vec<(f64, f64)> = r.stages().iter().map(|s| (s.from_rps, s.to_rps)).collect();
    assert_eq!(shape, vec![(10.0, 20.0), (20.0, 20.0), (0.0, 0.0)]);
    assert_eq!(plan.duration(), Duration::from_secs(42));
}

#[test]
fn a_gap_before_an_absolute_stage_is_a_pause() {
    let plan = parse_str(&format!(
        "{TARGET}[[scenario]]\nstages = [{{ rate = 5, for = \"2s\" }}, {{ rate = 5, for = \"2s\", at = \"5s\" }}]\n"
    ))
    .unwrap();
    let Model::Open(s) = &plan.scenarios[0].model else {
        panic!("open")
    };
    let rates: Vec<f64> = s.stages().iter().map(|s| s.to_rps).collect();
    assert_eq!(rates, vec![5.0, 0.0, 5.0]);
}

#[test]
fn urls_join_paths() {
    assert_eq!(join_url("http://h:1/", "/a"), "http://h:1/a");
    assert_eq!(join_url("http://h:1", "a"), "http://h:1/a");
    assert_eq!(join_url("http://h:1/", ""), "http://h:1/");
    assert_eq!(join_url("http://h:1/", "http://other/x"), "http://other/x");
}

#[test]
fn shares_weigh_agents() {
    let mut s = Shares::default();
    s.by_label.insert("big".into(), 3);
    assert_eq!(s.weight("big", 1), 3);
    assert_eq!(s.weight("", 8), 1);
    s.by_cores = true;
    assert_eq!(s.weight("big", 8), 8);
}

/// The closed preview counts what the agents will run: for every
/// bucket, the clients whose windows (as agents compute them) hold its
/// start, split by the same interleave.
#[test]
fn closed_preview_matches_client_windows() {
    use loadfleet_proto::partition::Interleave;
    let plan = parse_str(&format!(
        "{TARGET}[[scenario]]\nmodel = \"closed\"\nstages = [{{ to = 25, over = \"7s\" }}, {{ hold = \"2s\" }}, {{ to = 3, over = \"4s\" }}]\n"
    ))
    .unwrap();
    let s = &plan.scenarios[0];
    let Model::Closed(population) = &s.model else {
        panic!("closed");
    };
    let agents = 3;
    let interleave = Interleave::equal(agents).unwrap();
    let p = preview(s, agents);
    assert_eq!((p.bucket_secs, p.rows.len()), (1, 13));
    for (sec, (fleet, per_agent)) in p.rows.iter().enumerate() {
        let t = sec as u64 * 1_000_000_000;
        let mut expected = vec![0u64; agents];
        for c in 0..population.max_clients() {
            let active = loadfleet_proto::closed::client_windows(&population.stages, c)
                .iter()
                .any(|&(lo, hi)| t >= lo && t < hi);
            if active {
                expected[interleave.owner(c)] += 1;
            }
        }
        assert_eq!(*fleet, expected.iter().sum::<u64>(), "second {sec}");
        assert_eq!(per_agent, &expected, "second {sec}");
    }
}

/// However long the scenario and however many agents, the preview holds
/// at most PREVIEW_ROWS × PREVIEW_AGENTS counts.
#[test]
fn preview_is_bounded() {
    let plan = parse_str(&format!(
        "{TARGET}[[scenario]]\nmodel = \"closed\"\nclients = 1000\nduration = \"30days\"\n"
    ))
    .unwrap();
    let p = preview(&plan.scenarios[0], 1000);
    assert_eq!(p.rows.len() as u64, PREVIEW_ROWS);
    assert!(p
        .rows
        .iter()
        .all(|r| r.1.len() == PREVIEW_AGENTS && r.0 == 1000));
    assert_eq!(p.bucket_secs, 30 * 24 * 3600 / PREVIEW_ROWS);
}

fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn with(flags: Overlay, name: &str) -> Plan {
    resolve(Some(&example(name)), &flags).unwrap_or_else(|e| panic!("{e}"))
}

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A shorter run keeps the plan's split of warm-up and measurement; a
/// longer one keeps the warm-up as written; --warmup is taken as given.
#[test]
fn duration_scales_the_warmup_only_down() {
    let shorter = Overlay {
        duration: Some(SECS(6)),
        ..Overlay::default()
    };
    // constant.toml: 10 s of warm-up in 60 s.
    assert_eq!(
        with(shorter.clone(), "constant.toml").scenarios[0].warmup,
        SECS(1)
    );
    let longer = Overlay {
        duration: Some(SECS(120)),
        ..Overlay::default()
    };
    assert_eq!(with(longer, "constant.toml").scenarios[0].warmup, SECS(10));
    let given = Overlay {
        warmup: Some(SECS(2)),
        ..shorter
    };
    assert_eq!(with(given, "constant.toml").scenarios[0].warmup, SECS(2));
}

/// Over several scenarios --duration scales the whole timeline, so that
/// the run lasts it and the scenarios keep their order and proportions.
#[test]
fn duration_scales_the_timeline_of_several_scenarios() {
    let flags = Overlay {
        duration: Some(SECS(5)),
        ..Overlay::default()
    };
    // sequence.toml: 20 s, then 30 s, each with 2 s of warm-up.
    let plan = with(flags.clone(), "sequence.toml");
    assert_eq!(plan.duration(), SECS(5));
    let times: Vec<_> = plan
        .scenarios
        .iter()
        .map(|s| (s.start, s.duration, s.warmup))
        .collect();
    let ms = Duration::from_millis;
    assert_eq!(
        times,
        vec![(SECS(0), SECS(2), ms(200)), (SECS(2), SECS(3), ms(200))]
    );
    // sse-broadcast.toml: subscribers 20 s + 60 s held, broadcast at 30 s.
    let plan = with(flags, "sse-broadcast.toml");
    assert_eq!(plan.duration(), SECS(5));
    assert_eq!(
        plan.scenarios[1].start,
        Duration::from_secs_f64(30.0 / 16.0)
    );
}

#[test]
fn seed_and_warmup_are_run_wide() {
    let flags = Overlay {
        seed: Some(7),
        warmup: Some(SECS(3)),
        ..Overlay::default()
    };
    let plan = with(flags, "steps.toml");
    assert_eq!(plan.run.seed, 7);
    let seeds: Vec<_> = plan.scenarios.iter().map(|s| (s.seed, s.warmup)).collect();
    assert_eq!(seeds, vec![(7, SECS(3)), (8, SECS(3))]);
}

/// A mistake in `[run] warmup` names it and its line, not the scenario
/// that inherits it.
#[test]
fn a_run_warmup_too_long_names_run_warmup() {
    let errs = errors(&format!(
        "[run]\nwarmup = \"10s\"\n{TARGET}[[scenario]]\nrate = 1\nduration = \"5s\"\n"
    ));
    assert_eq!(
        (errs[0].field.as_str(), errs[0].line),
        ("run.warmup", Some(2)),
        "{errs:?}"
    );
    assert!(errs[0].message.contains("[run] warmup"), "{errs:?}");
}

/// Unknown fields, wrong types and semantic mistakes in one pass, and no
/// second message about a field already reported.
#[test]
fn every_kind_of_mistake_is_reported_at_once() {
    let errs = errors(&format!(
        "{TARGET}timout = \"1s\"\nmax_lag = \"soon\"\n[[scenario]]\nrate = \"100/s\"\nduration = \"5s\"\n"
    ));
    let fields: Vec<_> = errs.iter().map(|e| (e.field.as_str(), e.line)).collect();
    assert_eq!(
        fields,
        vec![
            ("target.timout", Some(3)),
            ("scenario[0].rate", Some(6)),
            ("target.max_lag", Some(4)),
        ]
    );
}

/// Every request has a name in its assignment: the one given, or its
/// method and path template; a derived name that repeats another gets its
/// position, and a given name that repeats another is refused by field.
#[test]
fn requests_are_named_uniquely_within_their_scenario() {
    let scenario = "[[scenario]]\nrate = 5\nduration = \"1s\"\n";
    let plan = parse_str(&format!(
        "{TARGET}{scenario}[[scenario.request]]\npath = \"/items/{{{{seq}}}}?u=1\"\n[[scenario.request]]\nname = \"cart\"\nmethod = \"post\"\npath = \"/cart\"\n[[scenario.request]]\npath = \"/items/{{{{seq}}}}?u=2\"\n"
    ))
    .unwrap();
    let names: Vec<String> = plan.assignments("http://h:1")[0]
        .requests
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(
        names,
        ["GET /items/{{seq}}", "cart", "GET /items/{{seq}} #2"]
    );
    let twice = "[[scenario.request]]\nname = \"a\"\npath = \"/x\"\n[[scenario.request]]\nname = \"a\"\npath = \"/y\"\n";
    let errs = errors(&format!("{TARGET}{scenario}{twice}"));
    assert!(
        errs.iter()
            .any(|e| e.field == "scenario[0].request[1].name" && e.message.contains("another")),
        "{errs:?}"
    );
    let long = format!(
        "[[scenario.request]]\nname = \"{}\"\n",
        "n".repeat(loadfleet_proto::bounds::MAX_REQUEST_NAME_BYTES + 1)
    );
    let errs = errors(&format!("{TARGET}{scenario}{long}"));
    assert!(
        errs.iter()
            .any(|e| e.field == "scenario[0].request[0].name"),
        "{errs:?}"
    );
}

/// A threshold may name a request of a scenario (`shop.cart.p99`) for the
/// figures a request has; an unknown request or an arrival figure is
/// refused by the plan check.
#[test]
fn thresholds_may_name_a_request() {
    let body = "[[scenario]]\nname = \"shop\"\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\nname = \"items\"\npath = \"/items\"\n[[scenario.request]]\nname = \"cart\"\npath = \"/cart\"\n";
    let with = |th: &str| format!("thresholds = [\"{th}\"]\n{TARGET}{body}");
    for ok in [
        "shop.cart.failures<1%",
        "shop.items.p99<300ms",
        "shop.unsent==0",
    ] {
        parse_str(&with(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for (bad, says) in [
        ("shop.nope.p99<1ms", "neither a scenario"),
        ("shop.cart.unsent==0", "check it on the scenario"),
    ] {
        let errs = errors(&with(bad));
        assert!(
            errs.iter().any(|e| e.message.contains(says)),
            "{bad}: {errs:?}"
        );
    }
    // Names with dots of their own: every split is tried.
    let dotted = body
        .replace("\"shop\"", "\"shop.v2\"")
        .replace("\"items\"", "\"items.old\"");
    parse_str(&format!(
        "thresholds = [\"shop.v2.items.old.p99<1s\"]\n{TARGET}{dotted}"
    ))
    .unwrap_or_else(|e| panic!("dotted names: {e}"));
}
