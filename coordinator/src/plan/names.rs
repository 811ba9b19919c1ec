//! The names of a scenario's requests (`[[scenario.request]] name`): the
//! rows the report and `compare` split a scenario's figures into. A name
//! given is checked; one not given is derived from the request (`GET
//! /items/{{seq}}`: the method and the path template without its query,
//! or the gRPC method), so every request has one and, within its
//! scenario, no two share one.

use std::collections::BTreeSet;

use loadfleet_proto::bounds::MAX_REQUEST_NAME_BYTES;
use toml::Spanned;

use super::check::Check;
use super::raw::RawRequest;
use super::validated::{RequestPlan, Scenario};
use crate::figures::{Figure, FLOW_SCOPE};
use crate::thresholds::request_scopes;

/// Gives each of `requests` (parsed from `raw`, at `at` =
/// `scenario[i].request`) its name: the one given, checked, or a derived
/// one. A derived name that another request already has gets its
/// position appended (`GET /items #1`); a given name that repeats another
/// is an error, since the user meant two rows and would get one.
pub(super) fn assign(
    c: &mut Check<'_>,
    at: &str,
    raw: &[Spanned<RawRequest>],
    requests: &mut [RequestPlan],
) {
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (k, (r, given)) in requests.iter_mut().zip(raw).enumerate() {
        let Some(name) = &given.get_ref().name else {
            continue;
        };
        let field = format!("{at}[{k}].name");
        let text = name.get_ref();
        let problem = if text.trim().is_empty() {
            Some("is empty; give the request a short name such as \"items\", or leave name out to have one derived".to_string())
        } else if text.len() > MAX_REQUEST_NAME_BYTES {
            Some(format!(
                "is {} bytes, more than {MAX_REQUEST_NAME_BYTES}; use a shorter name",
                text.len()
            ))
        } else if text.chars().any(char::is_control) {
            Some("holds a control character; use printable text".to_string())
        } else if !taken.insert(text.clone()) {
            Some(format!(
                "{text:?} names another request of this scenario too; give each request its own name"
            ))
        } else {
            None
        };
        match problem {
            Some(p) => c.err(field, Some(name.span()), p),
            None => r.name = text.clone(),
        }
    }
    for (k, (r, given)) in requests.iter_mut().zip(raw).enumerate() {
        if given.get_ref().name.is_some() {
            continue;
        }
        let mut name = derived(r);
        if taken.contains(&name) {
            let suffix = format!(" #{k}");
            name = shortened(&name, MAX_REQUEST_NAME_BYTES - suffix.len()) + &suffix;
        }
        taken.insert(name.clone());
        r.name = name;
    }
}

/// What a threshold's scope `S.R` names within scenario `S`.
enum Part {
    Request,
    Step,
}

/// What is wrong with the scope `name` of a threshold (`checkout.p99`,
/// `shop.items.p99` for request `items` of scenario `shop`,
/// `purchase.flow.p95` for the flows of flow scenario `purchase`,
/// `purchase.login.p95` for its step `login`) about `figure`; `None` when
/// the plan has it. A scenario of that very name comes first, then the
/// flows, then requests and steps, as the report resolves them
/// ([`crate::figures::Scope::find`]).
pub(super) fn threshold_scope(
    scenarios: &[Scenario],
    name: &str,
    figure: &Figure,
) -> Option<String> {
    if scenarios.iter().any(|s| s.name == name) {
        return None;
    }
    let flows_of = name
        .strip_suffix(FLOW_SCOPE)
        .and_then(|n| n.strip_suffix('.'))
        .and_then(|n| scenarios.iter().find(|s| s.name == n));
    if let Some(s) = flows_of {
        return (!s.is_flow()).then(|| {
            format!(
                "names the flows of scenario {:?}, which has no [[scenario.step]]; name the scenario itself ({:?})",
                s.name, s.name
            )
        });
    }
    let part = request_scopes(name).find_map(|(scenario, request)| {
        let s = scenarios.iter().find(|s| s.name == scenario)?;
        if s.requests.iter().any(|r| r.name == request) {
            Some(Part::Request)
        } else {
            s.step_names().any(|n| n == request).then_some(Part::Step)
        }
    });
    match part {
        Some(Part::Request) if figure.is_per_request() => None,
        Some(Part::Request) => Some(format!(
            "names a request, which has completions, failures, throughput and latency, not {}; check it on the scenario",
            figure.label()
        )),
        Some(Part::Step) if figure.is_per_request() || figure.is_from_steps() => None,
        Some(Part::Step) => Some(format!(
            "names a step, which has completions, failures, throughput, latency and checks, not {}; check it on the flows (SCENARIO.{FLOW_SCOPE})",
            figure.label()
        )),
        None => Some(unknown_scope(scenarios, name)),
    }
}

/// Why `name` names nothing: for `S.X` of a flow scenario `S`, the names
/// its scope may take; else what a scope may be.
fn unknown_scope(scenarios: &[Scenario], name: &str) -> String {
    let flow = request_scopes(name)
        .find_map(|(scenario, _)| scenarios.iter().find(|s| s.name == scenario && s.is_flow()));
    match flow {
        Some(s) => format!(
            "names {name:?}, but scenario {:?} has no step of that name; name its flows ({:?}) or one of its steps: {}",
            s.name,
            format!("{}.{FLOW_SCOPE}", s.name),
            s.step_names()
                .map(|step| format!("{:?}", format!("{}.{step}", s.name)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!(
            "names {name:?}, which is neither a scenario of the plan nor SCENARIO.REQUEST of one (a request named without spaces), SCENARIO.{FLOW_SCOPE} or SCENARIO.STEP of a flow"
        ),
    }
}

/// The name of a request that was given none: its gRPC method, or its
/// method and path template without the query (`GET /items/{{seq}}`;
/// an absolute URL's scheme and host are left out too), within
/// [`MAX_REQUEST_NAME_BYTES`].
pub(super) fn derived(r: &RequestPlan) -> String {
    if let Some(method) = &r.grpc {
        return shortened(method, MAX_REQUEST_NAME_BYTES);
    }
    let mut path = r.path.as_str();
    for scheme in ["http://", "https://"] {
        if let Some(rest) = path.strip_prefix(scheme) {
            path = rest.find('/').map_or("", |at| &rest[at..]);
        }
    }
    let path = path.split('?').next().unwrap_or_default();
    let name = match path {
        "" => r.method.clone(),
        p if p.starts_with('/') => format!("{} {p}", r.method),
        p => format!("{} /{p}", r.method),
    };
    shortened(&name, MAX_REQUEST_NAME_BYTES)
}

/// `text` cut to at most `max` bytes on a character boundary.
fn shortened(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(method: &str, path: &str) -> RequestPlan {
        RequestPlan {
            grpc: None,
            name: String::new(),
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            weight: 1,
        }
    }

    #[test]
    fn a_derived_name_is_the_method_and_the_path_template() {
        assert_eq!(
            derived(&http("GET", "/items/{{seq}}?user={{data.user}}")),
            "GET /items/{{seq}}"
        );
        assert_eq!(derived(&http("POST", "cart")), "POST /cart");
        assert_eq!(derived(&http("GET", "")), "GET");
        assert_eq!(derived(&http("GET", "https://h:8443/a/b?q=1")), "GET /a/b");
        assert_eq!(derived(&http("GET", "http://h:8080")), "GET");
        let long = derived(&http("GET", &format!("/{}", "é".repeat(200))));
        assert!(long.len() <= MAX_REQUEST_NAME_BYTES, "{}", long.len());
        let mut grpc = http("POST", "/echo.Echo/Say");
        grpc.grpc = Some("echo.Echo/Say".into());
        assert_eq!(derived(&grpc), "echo.Echo/Say");
    }
}
