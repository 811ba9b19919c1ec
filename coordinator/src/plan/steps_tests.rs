//! Flows: `[[scenario.step]]` read, checked and put on the wire.

use std::path::Path;
use std::time::Duration;

use loadfleet_proto::bounds::MAX_STEPS;
use loadfleet_proto::v1;

use crate::plan::{load, parse, PlanErrors};

const TARGET: &str = "[target]\nurl = \"http://127.0.0.1:8080\"\n";

fn flow(steps: &str) -> String {
    format!("{TARGET}[[scenario]]\nname = \"f\"\nrate = 5\nduration = \"1s\"\n{steps}")
}

fn refusal(text: &str) -> String {
    match parse(text, "test.toml", Path::new(".")) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(PlanErrors { errors, .. }) => errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn header(name: &str, value: &str) -> v1::Header {
    v1::Header {
        name: name.into(),
        value: value.into(),
    }
}

fn step(name: &str, path: &str, body: &str) -> v1::FlowStep {
    v1::FlowStep {
        request: Some(v1::RequestTemplate {
            method: "POST".into(),
            url: format!("http://h:1{path}"),
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            weight: 1,
            grpc_method: String::new(),
            name: name.into(),
        }),
        ..v1::FlowStep::default()
    }
}

fn captures(list: &[(&str, &str)]) -> Vec<v1::Capture> {
    list.iter()
        .map(|(name, expression)| v1::Capture {
            name: (*name).into(),
            expression: (*expression).into(),
        })
        .collect()
}

#[test]
fn the_purchase_example_becomes_its_flow_steps() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/purchase-flow.toml");
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let s = &plan.scenarios[0];
    assert!(s.is_flow() && s.requests.is_empty());
    assert_eq!(
        s.step_names().collect::<Vec<_>>(),
        ["login", "cart_add", "order_create", "payment_create"]
    );
    let a = &plan.assignments("http://h:1")[0];
    assert!(a.requests.is_empty());
    assert!(a.cookies);
    assert!(a.grpc_descriptors.is_empty());
    let login = v1::FlowStep {
        captures: captures(&[("token", "json.token")]),
        ..step("login", "/login", r#"{"user": "{{data.user}}"}"#)
    };
    let cart_add = v1::FlowStep {
        captures: captures(&[("cart", "json.cart_id")]),
        checks: vec!["status == 201".into(), "json.cart_id exists".into()],
        think_min_ns: 200_000_000,
        think_max_ns: 200_000_000,
        ..step(
            "cart_add",
            "/cart",
            r#"{"user": "{{data.user}}", "item": {{seq}}}"#,
        )
    };
    let mut order_create = v1::FlowStep {
        // In the plan's order, not the names'.
        captures: captures(&[("order", "json.order.id"), ("where", "header.location")]),
        continue_on_failure: true,
        ..step("order_create", "/orders", r#"{"cart": "{{cart}}"}"#)
    };
    if let Some(r) = order_create.request.as_mut() {
        r.headers = vec![header("Authorization", "Bearer {{token}}")];
    }
    let payment_create = v1::FlowStep {
        checks: vec![
            "status == 200".into(),
            "json.status == \"paid\"".into(),
            "body contains \"paid\"".into(),
        ],
        ..step("payment_create", "/payments/{{order}}", "")
    };
    assert_eq!(a.steps, vec![login, cart_add, order_create, payment_create]);
}

#[test]
fn a_placeholder_captured_only_later_is_refused_naming_the_step() {
    let e = refusal(&flow(
        "[[scenario.step]]\nname = \"order\"\npath = \"/orders/{{cart}}\"\n[[scenario.step]]\nname = \"cart\"\npath = \"/cart\"\ncapture = { cart = \"json.id\" }\n",
    ));
    assert!(
        e.contains("line 7: scenario[0].step[0].path: {{cart}} is captured only later, by step \"cart\" (scenario[0].step[1])"),
        "{e}"
    );
    // Its own capture is not there yet when the step is sent.
    let e = refusal(&flow(
        "[[scenario.step]]\npath = \"/a\"\nheaders = { \"X-Id\" = \"{{id}}\" }\ncapture = { id = \"json.id\" }\n",
    ));
    assert!(
        e.contains(
            "scenario[0].step[0].headers.X-Id: {{id}} is captured only later, by this step itself"
        ),
        "{e}"
    );
    // Captured nowhere.
    let e = refusal(&flow(
        "[[scenario.step]]\npath = \"/a\"\ncapture = { id = \"json.id\" }\n[[scenario.step]]\nbody = \"{{idd}}\"\n",
    ));
    assert!(
        e.contains("scenario[0].step[1].body: {{idd}} is not captured by an earlier step (captured so far: id)"),
        "{e}"
    );
}

#[test]
fn bad_captures_and_checks_are_named() {
    let e = refusal(&flow(
        "[[scenario.step]]\npath = \"/a\"\ncapture = { token = \"jsn.token\", seq = \"json.n\", \"a-b\" = \"json.x\" }\ncheck = [\"status == 200\", \"status =! 201\"]\non_failure = \"retry\"\nweight = 2\n",
    ));
    for needle in [
        "scenario[0].step[0].capture.token: \"jsn.token\"",
        "scenario[0].step[0].capture.seq: \"seq\" is a built-in placeholder",
        "scenario[0].step[0].capture.a-b: \"a-b\" is not a capture name",
        "scenario[0].step[0].check[1]: \"status =! 201\"",
        "scenario[0].step[0].on_failure: \"retry\" is not a failure rule",
        "scenario[0].step[0].weight: a flow runs each of its steps once",
    ] {
        assert!(e.contains(needle), "expected {needle:?} in\n{e}");
    }
    assert!(!e.contains("check[0]"), "{e}");
}

#[test]
fn requests_and_steps_together_are_refused() {
    let e = refusal(&flow(
        "[[scenario.request]]\npath = \"/a\"\n[[scenario.step]]\npath = \"/b\"\n",
    ));
    assert!(
        e.contains("scenario[0].step: the scenario has both [[scenario.request]]")
            && e.contains("keep the steps for a flow or the requests for a mix"),
        "{e}"
    );
    // A step's keys on a request say where they belong.
    let e = refusal(&flow(
        "[[scenario.request]]\npath = \"/a\"\ncapture = { id = \"json.id\" }\n",
    ));
    assert!(
        e.contains("scenario[0].request[0].capture: capture belongs to a flow's step"),
        "{e}"
    );
    let e = refusal(&format!(
        "{TARGET}[[scenario]]\nkind = \"sse\"\nrate = 5\nduration = \"1s\"\n[[scenario.step]]\npath = \"/sse\"\n"
    ));
    assert!(
        e.contains("scenario[0].step: a subscription scenario (kind = \"sse\")"),
        "{e}"
    );
    let e = refusal(&flow("cookies = false\n"));
    assert!(
        e.contains("scenario[0].cookies: cookies applies to a flow"),
        "{e}"
    );
}

#[test]
fn think_is_a_pause_or_a_range() {
    let think = |value: &str| {
        let text = flow(&format!(
            "cookies = false\n[[scenario.step]]\npath = \"/a\"\nthink = \"{value}\"\n"
        ));
        parse(&text, "test.toml", Path::new(".")).map(|p| {
            let s = &p.scenarios[0];
            assert!(!s.cookies);
            (s.steps[0].think_min, s.steps[0].think_max)
        })
    };
    let ms = Duration::from_millis;
    assert_eq!(think("100ms..500ms"), Ok((ms(100), ms(500))));
    assert_eq!(think("200ms"), Ok((ms(200), ms(200))));
    assert_eq!(think("1s .. 1s"), Ok((ms(1000), ms(1000))));
    for (value, needle) in [
        ("500ms..100ms", "starts above its end"),
        ("2h", "limit; use at most 1h"),
        ("1s..2h", "limit; use at most 1h"),
        ("soon", "is not a pause"),
        ("1s..", "is not a pause"),
    ] {
        let e = think(value).map(|_| ()).map_err(|e| e.to_string());
        assert!(
            e.as_ref()
                .is_err_and(|e| e.contains("scenario[0].step[0].think") && e.contains(needle)),
            "{value}: expected {needle:?} in {e:?}"
        );
    }
}

#[test]
fn too_many_steps_are_refused() {
    let steps = "[[scenario.step]]\npath = \"/a\"\n".repeat(MAX_STEPS + 1);
    let e = refusal(&flow(&steps));
    assert!(
        e.contains(&format!(
            "scenario[0].step: has {} entries, more than the {MAX_STEPS} allowed",
            MAX_STEPS + 1
        )),
        "{e}"
    );
    // Unnamed steps get derived names, unique within the flow.
    let plan = parse(
        &flow(&"[[scenario.step]]\npath = \"/a\"\n".repeat(2)),
        "test.toml",
        Path::new("."),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plan.scenarios[0].step_names().collect::<Vec<_>>(),
        ["GET /a", "GET /a #1"]
    );
}

#[test]
fn unknown_step_keys_and_wrong_types_are_named_with_their_lines() {
    let e = refusal(&flow(
        "[[scenario.step]]\npath = \"/a\"\ncaptur = { id = \"json.id\" }\n[[scenario.step]]\npath = \"/b\"\ncapture = { id = 1 }\ncheck = \"status == 200\"\nthink = 2\n",
    ));
    for needle in [
        "line 9: scenario[0].step[0].captur: unknown field `captur`",
        "line 12: scenario[0].step[1].capture.id: invalid type",
        "line 13: scenario[0].step[1].check: invalid type",
        "line 14: scenario[0].step[1].think: invalid type",
    ] {
        assert!(e.contains(needle), "expected {needle:?} in\n{e}");
    }
}

/// Thresholds may name a flow scenario's flows (`f.flow`), a step
/// (`f.pay`) and checks; a scope the plan lacks is refused at `plan
/// check`, naming the flow's steps.
#[test]
fn thresholds_may_name_the_flows_a_step_and_checks() {
    let steps = "[[scenario.step]]\nname = \"login\"\nmethod = \"POST\"\npath = \"/login\"\ncheck = [\"status == 200\"]\n\n[[scenario.step]]\nname = \"pay\"\npath = \"/pay\"\n";
    let mix = "\n[[scenario]]\nname = \"shop\"\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\nname = \"items\"\npath = \"/items\"\n";
    let with = |th: &str| format!("thresholds = [\"{th}\"]\n{}{mix}", flow(steps));
    for th in [
        "f.flow.p95<15s",
        "f.flow.failed<1%",
        "f.failed<1%",
        "f.pay.p95<500ms",
        "f.login.failures<1%",
        "checks>99%",
        "f.checks>99%",
        "f.flow.checks>99%",
        "f.login.checks>99%",
        "shop.checks>99%",
    ] {
        if let Err(e) = parse(&with(th), "test.toml", Path::new(".")) {
            panic!("{th}: {e:?}");
        }
    }
    for (th, needle) in [
        (
            "f.payment.p95<1s",
            "no step of that name; name its flows (\"f.flow\") or one of its steps: \"f.login\", \"f.pay\"",
        ),
        ("f.pay.unsent==0", "names a step"),
        ("shop.flow.p95<1s", "no [[scenario.step]]"),
        ("shop.items.checks>99%", "names a request"),
        ("nope.flow.p95<1s", "neither a scenario"),
    ] {
        let e = refusal(&with(th));
        assert!(e.contains(needle), "{th}: {e}");
    }
}
