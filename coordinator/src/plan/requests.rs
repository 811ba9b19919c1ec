//! What a scenario sends: its weighted mix of templated requests, and the
//! data table their placeholders draw from.

use std::path::Path;

use loadfleet_proto::bounds::{
    MAX_HEADERS, MAX_HEADER_BYTES, MAX_METHOD_BYTES, MAX_REQUESTS, MAX_REQUEST_WEIGHT,
};
use loadfleet_proto::partition::MAX_TOTAL_WEIGHT;
use toml::Spanned;

use super::check::Check;
use super::files::{body_file, data_table};
use super::grpc;
use super::names;
use super::placeholders::Placeholders;
use super::raw::{RawData, RawRequest};
use super::validated::{Data, RequestPlan};

/// The data table of scenario `i`, read from `base`.
pub(super) fn data(c: &mut Check<'_>, i: usize, d: &Spanned<RawData>, base: &Path) -> Option<Data> {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let sp = d.span();
    let d = d.get_ref();
    let random = match d.pick.as_ref().map(|p| p.get_ref().as_str()) {
        None | Some("round_robin") => false,
        Some("random") => true,
        Some(other) => {
            c.err(
                at("data.pick"),
                Some(sp),
                format!("{other:?} is not a pick rule; use \"round_robin\" or \"random\""),
            );
            false
        }
    };
    match data_table(&base.join(d.file.get_ref())) {
        Ok((columns, rows)) => Some(Data {
            columns,
            rows,
            random,
        }),
        Err(e) => {
            c.err(at("data.file"), Some(d.file.span()), e);
            None
        }
    }
}

/// The requests of scenario `i` (one `GET` of the target when none is
/// given); placeholders may name the data table's `columns`.
pub(super) fn requests(
    c: &mut Check<'_>,
    i: usize,
    raw: &[Spanned<RawRequest>],
    columns: &[String],
    base: &Path,
) -> Vec<RequestPlan> {
    if raw.is_empty() {
        return vec![RequestPlan {
            grpc: None,
            name: "GET".into(),
            method: "GET".into(),
            path: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
            weight: 1,
        }];
    }
    let at = format!("scenario[{i}].request");
    if !c.at_most_entries(
        &at,
        raw.get(MAX_REQUESTS).map(Spanned::span),
        raw.len(),
        MAX_REQUESTS,
        "merge request kinds or split the scenario",
    ) {
        return Vec::new();
    }
    let names = Placeholders {
        columns,
        ..Placeholders::default()
    };
    let mut requests: Vec<RequestPlan> = raw
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let at = format!("{at}[{k}]");
            flow_only(c, &at, r);
            request(c, &at, r, &names, base)
        })
        .collect();
    names::assign(c, &at, raw, &mut requests);
    // Agents deal arrivals to requests by an interleave of the weights.
    let total: u64 = requests.iter().map(|r| u64::from(r.weight)).sum();
    if total > MAX_TOTAL_WEIGHT {
        c.err(
            format!("{at}.weight"),
            raw.first().map(Spanned::span),
            format!("the weights add up to {total}, more than {MAX_TOTAL_WEIGHT}; use smaller weights in the same proportions"),
        );
    }
    requests
}

/// Refuses a flow step's keys on a request of a mix, which runs alone:
/// there is no step after it to use a capture, nor a flow to stop.
fn flow_only(c: &mut Check<'_>, at: &str, spanned: &Spanned<RawRequest>) {
    let r = spanned.get_ref();
    for (key, given) in [
        ("capture", !r.capture.is_empty()),
        ("check", !r.check.is_empty()),
        ("think", r.think.is_some()),
        ("on_failure", r.on_failure.is_some()),
    ] {
        if given {
            c.err(
                format!("{at}.{key}"),
                Some(spanned.span()),
                format!("{key} belongs to a flow's step; write the flow as [[scenario.step]] tables instead of [[scenario.request]]"),
            );
        }
    }
}

/// One request (of a mix, or a flow's step), at `at`; its placeholders
/// may use `names`. It is named later, with its siblings.
pub(super) fn request(
    c: &mut Check<'_>,
    at: &str,
    spanned: &Spanned<RawRequest>,
    names: &Placeholders<'_>,
    base: &Path,
) -> RequestPlan {
    if let Some(method) = &spanned.get_ref().grpc {
        return grpc::request(c, at, spanned, method, names, base);
    }
    grpc::not_grpc(c, at, spanned);
    let sp = spanned.span();
    let f = |name: &str| format!("{at}.{name}");
    let r = spanned.get_ref();
    let method = r
        .method
        .clone()
        .unwrap_or_else(|| "GET".into())
        .to_uppercase();
    if method.len() > MAX_METHOD_BYTES {
        c.err(
            f("method"),
            Some(sp.clone()),
            format!("is {} bytes long, more than {MAX_METHOD_BYTES}; use a standard method such as GET or POST", method.len()),
        );
    } else if http::Method::from_bytes(method.as_bytes()).is_err() {
        c.err(
            f("method"),
            Some(sp.clone()),
            format!("{method:?} is not an HTTP method"),
        );
    }
    let path = r.path.clone().unwrap_or_default();
    if let Err(e) = names.parse(&path) {
        c.err(f("path"), Some(sp.clone()), e);
    }
    c.at_most_entries(
        &f("headers"),
        Some(sp.clone()),
        r.headers.len(),
        MAX_HEADERS,
        "send fewer headers",
    );
    for (name, value) in &r.headers {
        if name.len() + value.len() > MAX_HEADER_BYTES {
            c.err(
                f(&format!("headers.{name}")),
                Some(sp.clone()),
                format!(
                    "name and value are {} bytes, more than {MAX_HEADER_BYTES}; shorten the value",
                    name.len() + value.len()
                ),
            );
        }
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            c.err(
                f("headers"),
                Some(sp.clone()),
                format!("{name:?} is not a valid header name"),
            );
        }
        if let Err(e) = names.parse(value) {
            c.err(f(&format!("headers.{name}")), Some(sp.clone()), e);
        }
    }
    let body = match (&r.body, &r.body_file) {
        (Some(_), Some(bf)) => {
            c.err(
                f("body_file"),
                Some(bf.span()),
                "give body or body_file, not both",
            );
            Vec::new()
        }
        (Some(b), None) => {
            if let Err(e) = names.parse(b) {
                c.err(f("body"), Some(sp.clone()), e);
            }
            b.clone().into_bytes()
        }
        (None, Some(bf)) => body_file(c, &f("body_file"), bf, names, base),
        (None, None) => Vec::new(),
    };
    let weight = c
        .positive(&f("weight"), &r.weight, i64::from(MAX_REQUEST_WEIGHT))
        .unwrap_or(1);
    RequestPlan {
        grpc: None,
        // Given by `names::assign` once every request is parsed.
        name: String::new(),
        method,
        path,
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        body,
        weight,
    }
}
