//! A flow's steps (`[[scenario.step]]`): requests that each arrival (or
//! each client's loop) runs in order. A step is read exactly as a request
//! of a mix is (see [`super::requests`]), with what it captures from its
//! answer, the checks that answer must pass, the pause after it, and
//! whether a failure ends the flow. Its placeholders may name only values
//! the steps before it captured: the agents fill them in that order.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use loadfleet_proto::bounds::{MAX_CAPTURES_PER_STEP, MAX_CHECKS_PER_STEP, MAX_STEPS, MAX_THINK};
use loadfleet_proto::flow;
use toml::Spanned;

use super::check::Check;
use super::names;
use super::placeholders::Placeholders;
use super::raw::{RawRequest, RawScenario};
use super::requests;
use super::validated::StepPlan;

/// Names a capture may not take: the built-in placeholders'.
const RESERVED: [&str; 4] = ["seq", "agent", "random_id", "data"];

/// What a scenario's steps make of it: none for a mix of requests.
pub(super) struct Flow {
    pub steps: Vec<StepPlan>,
    /// A cookie jar per flow.
    pub cookies: bool,
}

/// The steps of scenario `i`; `columns` are its data table's, `sse` says
/// it holds event streams (which take no steps).
pub(super) fn flow(
    c: &mut Check<'_>,
    i: usize,
    spanned: &Spanned<RawScenario>,
    columns: &[String],
    base: &Path,
    sse: bool,
) -> Flow {
    let s = spanned.get_ref();
    let at = format!("scenario[{i}].step");
    let cookies = s.cookies.as_ref().is_none_or(|v| *v.get_ref());
    let none = Flow {
        steps: Vec::new(),
        cookies: false,
    };
    let first = s.step.first().map(Spanned::span);
    if s.step.is_empty() {
        if let Some(v) = &s.cookies {
            c.err(
                format!("scenario[{i}].cookies"),
                Some(v.span()),
                "cookies applies to a flow; add [[scenario.step]] tables or leave cookies out",
            );
        }
        return none;
    }
    if !s.request.is_empty() {
        c.err(
            &at,
            first,
            "the scenario has both [[scenario.request]] (a weighted mix, one request per arrival) and [[scenario.step]] (a flow, every step in order per arrival); keep the steps for a flow or the requests for a mix, or make them two scenarios",
        );
        return none;
    }
    if sse {
        c.err(
            &at,
            first,
            "a subscription scenario (kind = \"sse\") holds one event stream per arrival and runs no steps; move the flow to a scenario of its own",
        );
        return none;
    }
    if !c.at_most_entries(
        &at,
        s.step.get(MAX_STEPS).map(Spanned::span),
        s.step.len(),
        MAX_STEPS,
        "merge steps or split the flow",
    ) {
        return none;
    }
    let captures: Vec<Vec<(String, String)>> = s
        .step
        .iter()
        .enumerate()
        .map(|(k, r)| captures(c, &format!("{at}[{k}]"), r))
        .collect();
    let mut captured: Vec<String> = Vec::new();
    let mut requests = Vec::with_capacity(s.step.len());
    let mut rest = Vec::with_capacity(s.step.len());
    for (k, r) in s.step.iter().enumerate() {
        let here = format!("{at}[{k}]");
        let later: Vec<(String, String)> = captures
            .iter()
            .enumerate()
            .skip(k)
            .flat_map(|(j, list)| {
                let place = match (j == k, &s.step[j].get_ref().name) {
                    (true, _) => "this step itself, from its answer".to_string(),
                    (false, Some(name)) => format!("step {:?} ({at}[{j}])", name.get_ref()),
                    (false, None) => format!("{at}[{j}]"),
                };
                list.iter().map(move |(n, _)| (n.clone(), place.clone()))
            })
            .collect();
        let names = Placeholders {
            columns,
            captured: &captured,
            later: &later,
            in_flow: true,
        };
        let request = unweighted(c, &here, r);
        requests.push(requests::request(c, &here, &request, &names, base));
        rest.push((
            checks(c, &here, r),
            think(c, &format!("{here}.think"), &r.get_ref().think),
            on_failure(c, &format!("{here}.on_failure"), &r.get_ref().on_failure),
        ));
        for (name, _) in &captures[k] {
            if !captured.contains(name) {
                captured.push(name.clone());
            }
        }
    }
    names::assign(c, &at, &s.step, &mut requests);
    let steps = requests
        .into_iter()
        .zip(captures)
        .zip(rest)
        .map(
            |((request, captures), (checks, (think_min, think_max), continue_on_failure))| {
                StepPlan {
                    request,
                    captures,
                    checks,
                    think_min,
                    think_max,
                    continue_on_failure,
                }
            },
        )
        .collect();
    Flow { steps, cookies }
}

/// The step as a request: `weight` is refused (a flow runs each step
/// once) and left out, so it is not refused twice.
fn unweighted<'r>(
    c: &mut Check<'_>,
    at: &str,
    spanned: &'r Spanned<RawRequest>,
) -> Cow<'r, Spanned<RawRequest>> {
    let Some(w) = &spanned.get_ref().weight else {
        return Cow::Borrowed(spanned);
    };
    c.err(
        format!("{at}.weight"),
        Some(w.span()),
        "a flow runs each of its steps once, in order; leave weight out",
    );
    let mut r = spanned.get_ref().clone();
    r.weight = None;
    Cow::Owned(Spanned::new(spanned.span(), r))
}

/// A step's captures, `(name, expression)` in the order the plan writes
/// them, each name an identifier and each expression one the agents read.
fn captures(c: &mut Check<'_>, at: &str, spanned: &Spanned<RawRequest>) -> Vec<(String, String)> {
    let given = &spanned.get_ref().capture;
    if !c.at_most_entries(
        &format!("{at}.capture"),
        Some(spanned.span()),
        given.len(),
        MAX_CAPTURES_PER_STEP,
        "capture fewer values in this step",
    ) {
        return Vec::new();
    }
    let mut ordered: Vec<(&String, &Spanned<String>)> = given.iter().collect();
    ordered.sort_by_key(|(_, e)| e.span().start);
    let mut out = Vec::with_capacity(ordered.len());
    for (name, expression) in ordered {
        let field = format!("{at}.capture.{name}");
        let sp = Some(expression.span());
        if !is_identifier(name) {
            c.err(&field, sp.clone(), format!("{name:?} is not a capture name; use letters, digits and _, starting with a letter or _ (it is used as {{{{NAME}}}})"));
        } else if RESERVED.contains(&name.as_str()) {
            c.err(
                &field,
                sp.clone(),
                format!("{name:?} is a built-in placeholder; give the capture another name"),
            );
        }
        if let Err(e) = flow::Capture::parse(expression.get_ref()) {
            c.err(&field, sp, format!("{:?}: {e}", expression.get_ref()));
        }
        out.push((name.clone(), expression.get_ref().clone()));
    }
    out
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// A step's checks, each one the agents read.
fn checks(c: &mut Check<'_>, at: &str, spanned: &Spanned<RawRequest>) -> Vec<String> {
    let given = &spanned.get_ref().check;
    if !c.at_most_entries(
        &format!("{at}.check"),
        given.get(MAX_CHECKS_PER_STEP).map(Spanned::span),
        given.len(),
        MAX_CHECKS_PER_STEP,
        "check fewer things in this step, or join them in a later step",
    ) {
        return Vec::new();
    }
    for (j, check) in given.iter().enumerate() {
        if let Err(e) = flow::Check::parse(check.get_ref()) {
            c.err(
                format!("{at}.check[{j}]"),
                Some(check.span()),
                format!("{:?}: {e}", check.get_ref()),
            );
        }
    }
    given.iter().map(|v| v.get_ref().clone()).collect()
}

/// The pause after a step: `"200ms"`, or `"100ms..500ms"` for one drawn
/// uniformly (seeded) in that range; none when not given.
fn think(c: &mut Check<'_>, field: &str, v: &Option<Spanned<String>>) -> (Duration, Duration) {
    let none = (Duration::ZERO, Duration::ZERO);
    let Some(v) = v else { return none };
    let text = v.get_ref();
    let (low, high) = text.split_once("..").unwrap_or((text, text));
    let parsed = [low, high].map(|part| humantime::parse_duration(part.trim()));
    let [Ok(low), Ok(high)] = parsed else {
        c.err(
            field,
            Some(v.span()),
            format!("{text:?} is not a pause; write a duration (\"200ms\") or a range (\"100ms..500ms\")"),
        );
        return none;
    };
    if !c.at_most(field, Some(v.span()), high, MAX_THINK) {
        return none;
    }
    if low > high {
        c.err(
            field,
            Some(v.span()),
            format!("{text:?} starts above its end; write the shorter pause first, e.g. \"100ms..500ms\""),
        );
        return none;
    }
    (low, high)
}

/// Does a failure of the step leave the flow going (`on_failure`)?
fn on_failure(c: &mut Check<'_>, field: &str, v: &Option<Spanned<String>>) -> bool {
    match v.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
        None | Some(("stop", _)) => false,
        Some(("continue", _)) => true,
        Some((other, sp)) => {
            c.err(
                field,
                Some(sp),
                format!("{other:?} is not a failure rule; use \"stop\" (end the flow, the default) or \"continue\" (go on to the next step)"),
            );
            false
        }
    }
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
