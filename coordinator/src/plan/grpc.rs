//! gRPC requests in a plan: `grpc = "package.Service/Method"` with its
//! JSON `message` and `metadata`, and the message types they are encoded
//! with (`[target] descriptor_set` or `reflection`). Every message is
//! checked against its method's input type before anything is sent, so a
//! misspelt field is a plan error that names it, not a run of errors.

use std::path::Path;

use loadfleet_proto::bounds::{MAX_GRPC_METHOD_BYTES, MAX_HEADERS, MAX_HEADER_BYTES};
use loadfleet_proto::grpc;
use loadfleet_proto::rng::SplitMix64;
use loadfleet_proto::template::{Text, Values};
use toml::Spanned;

use super::check::{Check, PlanError, PlanErrors};
use super::files;
use super::placeholders::Placeholders;
use super::raw::{RawRequest, RawTarget};
use super::validated::{GrpcSource, Plan, RequestPlan};

/// Metadata a plan may not set: gRPC itself sends these (the deadline
/// comes from `timeout`).
fn reserved(name: &str) -> bool {
    name.starts_with("grpc-") || matches!(name, "content-type" | "te" | "host")
}

/// Where `[target]` says message types come from; the descriptor set file
/// is read (relative to `base`) into `descriptors`.
pub(super) fn source(
    c: &mut Check<'_>,
    t: &RawTarget,
    base: &Path,
    descriptors: &mut Vec<u8>,
) -> Option<GrpcSource> {
    let reflection = t.reflection.as_ref().filter(|r| *r.get_ref());
    match (&t.descriptor_set, reflection) {
        (Some(file), Some(_)) => {
            c.err(
                "target.descriptor_set",
                Some(file.span()),
                "give descriptor_set or reflection = true, not both",
            );
            None
        }
        (Some(file), None) => {
            let path = base.join(file.get_ref());
            match files::descriptor_set(&path) {
                Ok(bytes) => {
                    *descriptors = bytes;
                    Some(GrpcSource::DescriptorSet(path))
                }
                Err(e) => {
                    c.err("target.descriptor_set", Some(file.span()), e);
                    None
                }
            }
        }
        (None, Some(_)) => Some(GrpcSource::Reflection),
        (None, None) => None,
    }
}

/// A `[[scenario.request]]` with `grpc = …`: a POST of its JSON message to
/// `/package.Service/Method` with its metadata as headers.
pub(super) fn request(
    c: &mut Check<'_>,
    at: &str,
    spanned: &Spanned<RawRequest>,
    method: &Spanned<String>,
    names: &Placeholders<'_>,
    base: &Path,
) -> RequestPlan {
    let sp = spanned.span();
    let f = |name: &str| format!("{at}.{name}");
    let r = spanned.get_ref();
    for (key, given) in [
        ("method", r.method.is_some()),
        ("path", r.path.is_some()),
        ("body", r.body.is_some()),
        ("body_file", r.body_file.is_some()),
        ("headers", !r.headers.is_empty()),
    ] {
        if given {
            c.err(
                f(key),
                Some(sp.clone()),
                format!("a gRPC request (grpc = \"{}\") takes message or message_file and metadata, not {key}", method.get_ref()),
            );
        }
    }
    let name = method.get_ref().trim_start_matches('/').to_string();
    if name.len() > MAX_GRPC_METHOD_BYTES {
        c.err(
            f("grpc"),
            Some(method.span()),
            format!("is longer than {MAX_GRPC_METHOD_BYTES} bytes"),
        );
    } else if let Err(e) = grpc::method_name(&name) {
        c.err(f("grpc"), Some(method.span()), e.to_string());
    }
    c.at_most_entries(
        &f("metadata"),
        Some(sp.clone()),
        r.metadata.len(),
        MAX_HEADERS,
        "send less metadata",
    );
    for (key, value) in &r.metadata {
        let field = f(&format!("metadata.{key}"));
        if key.len() + value.len() > MAX_HEADER_BYTES {
            c.err(
                &field,
                Some(sp.clone()),
                format!(
                    "key and value are {} bytes, more than {MAX_HEADER_BYTES}; shorten the value",
                    key.len() + value.len()
                ),
            );
        }
        if http::HeaderName::from_bytes(key.as_bytes()).is_err() || key.to_lowercase() != *key {
            c.err(
                &field,
                Some(sp.clone()),
                format!("{key:?} is not a metadata key; use lower-case letters, digits, - and _"),
            );
        } else if reserved(key) {
            c.err(
                &field,
                Some(sp.clone()),
                format!("{key:?} is set by gRPC itself (the deadline comes from target.timeout); leave it out"),
            );
        }
        if let Err(e) = names.parse(value) {
            c.err(&field, Some(sp.clone()), e);
        }
    }
    let body = match (&r.message, &r.message_file) {
        (Some(_), Some(file)) => {
            c.err(
                f("message_file"),
                Some(file.span()),
                "give message or message_file, not both",
            );
            Vec::new()
        }
        (Some(m), None) => {
            if let Err(e) = names.parse(m) {
                c.err(f("message"), Some(sp.clone()), e);
            }
            m.clone().into_bytes()
        }
        (None, Some(file)) => files::message_file(c, &f("message_file"), file, names, base),
        // The empty message: every field at its default.
        (None, None) => b"{}".to_vec(),
    };
    let weight = c
        .positive(
            &f("weight"),
            &r.weight,
            i64::from(loadfleet_proto::bounds::MAX_REQUEST_WEIGHT),
        )
        .unwrap_or(1);
    RequestPlan {
        grpc: Some(name.clone()),
        // Given by `names::assign` once every request is parsed.
        name: String::new(),
        method: "POST".into(),
        path: format!("/{name}"),
        headers: r
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        body,
        weight,
    }
}

/// Refuses the keys of a gRPC request on an HTTP one: without `grpc` they
/// would be ignored.
pub(super) fn not_grpc(c: &mut Check<'_>, at: &str, spanned: &Spanned<RawRequest>) {
    let r = spanned.get_ref();
    for (key, given) in [
        ("message", r.message.is_some()),
        ("message_file", r.message_file.is_some()),
        ("metadata", !r.metadata.is_empty()),
    ] {
        if given {
            c.err(
                format!("{at}.{key}"),
                Some(spanned.span()),
                format!("{key} belongs to a gRPC request; add grpc = \"package.Service/Method\" (or use body and headers for HTTP)"),
            );
        }
    }
}

/// Checks every gRPC request (and flow step) of `plan` against the message types in
/// `descriptors` (an encoded `FileDescriptorSet`): the method must exist and
/// be unary, and the message, rendered with the first arrival's values
/// (seq 0, agent 0, the first data row), must be a valid JSON form of its
/// input type. Rendered values that break the JSON later (another data
/// row, a flow's captured value) are counted unsent `invalid_request` by
/// the agents.
pub(super) fn check_messages(plan: &Plan, descriptors: &[u8]) -> Vec<PlanError> {
    let mut errors = Vec::new();
    let mut err = |field: String, message: String| {
        errors.push(PlanError {
            field,
            line: None,
            message,
        })
    };
    let source_field = match &plan.target.grpc_source {
        Some(GrpcSource::DescriptorSet(_)) => "target.descriptor_set",
        _ => "target.reflection",
    };
    let pool = match grpc::decode_descriptors(descriptors) {
        Ok(pool) => pool,
        Err(e) => {
            err(source_field.into(), e.to_string());
            return errors;
        }
    };
    for (i, s) in plan.scenarios.iter().enumerate() {
        let columns: &[String] = s.data.as_ref().map_or(&[], |d| &d.columns);
        let row = s
            .data
            .as_ref()
            .and_then(|d| d.rows.first())
            .map(Vec::as_slice);
        let sent = (s.requests.iter().enumerate())
            .map(|(k, r)| (format!("scenario[{i}].request[{k}]"), r))
            .chain(
                (s.steps.iter().enumerate())
                    .map(|(k, step)| (format!("scenario[{i}].step[{k}]"), &step.request)),
            );
        for (place, r) in sent {
            let Some(method) = &r.grpc else { continue };
            let at = |key: &str| format!("{place}.{key}");
            let input = match grpc::input_type(&pool, method) {
                Ok(input) => input,
                Err(e) => {
                    err(at("grpc"), e.to_string());
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&r.body);
            let Ok(template) = Text::parse(&text, columns) else {
                // Already refused by the validator, or a step's message
                // holding captured values, known only when the flow runs.
                continue;
            };
            let mut rendered = String::new();
            template.render(
                &mut Values {
                    seq: 0,
                    agent: 0,
                    rng: &mut SplitMix64::new(s.seed),
                    row,
                },
                &mut rendered,
            );
            if let Err(e) = grpc::encode_json(&input, &rendered) {
                let shown = if template.is_static() {
                    String::new()
                } else {
                    let cut: String = rendered.chars().take(200).collect();
                    format!(" (as the first request renders it: {cut})")
                };
                err(at("message"), format!("{e}{shown}"));
            }
        }
    }
    errors
}

// Here rather than beside `Plan` in validated.rs, which stays a leaf that
// this file reads.
impl Plan {
    /// Takes the message types asked from the target's reflection service
    /// and checks every gRPC request's message against them, as the
    /// validator does for a descriptor set file.
    pub fn set_grpc_descriptors(&mut self, descriptors: Vec<u8>) -> Result<(), PlanErrors> {
        let errors = check_messages(self, &descriptors);
        if !errors.is_empty() {
            return Err(PlanErrors {
                source: "the plan".into(),
                errors: errors
                    .into_iter()
                    .map(|e| PlanError {
                        message: format!(
                            "{} (types from the target's reflection service)",
                            e.message
                        ),
                        ..e
                    })
                    .collect(),
            });
        }
        self.target.grpc_descriptors = descriptors;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use prost::Message;
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::*;

    use crate::plan::{parse, PlanErrors};

    /// A folder holding `t.protoset`: `package t; message Req { string
    /// name = 1; }` and a unary `t.S/M`.
    fn folder() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("loadfleet-plan-grpc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let set = FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("t.proto".into()),
                package: Some("t".into()),
                syntax: Some("proto3".into()),
                message_type: vec![DescriptorProto {
                    name: Some("Req".into()),
                    field: vec![FieldDescriptorProto {
                        name: Some("name".into()),
                        number: Some(1),
                        label: Some(Label::Optional as i32),
                        r#type: Some(Type::String as i32),
                        json_name: Some("name".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                service: vec![ServiceDescriptorProto {
                    name: Some("S".into()),
                    method: vec![MethodDescriptorProto {
                        name: Some("M".into()),
                        input_type: Some(".t.Req".into()),
                        output_type: Some(".t.Req".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        std::fs::write(dir.join("t.protoset"), set.encode_to_vec()).unwrap();
        dir
    }

    fn plan(target: &str, request: &str) -> Result<crate::plan::Plan, PlanErrors> {
        let text = format!(
            "[target]\nurl = \"http://127.0.0.1:1\"\n{target}\n[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.request]]\n{request}\n"
        );
        parse(&text, "test.toml", &folder())
    }

    fn refusal(target: &str, request: &str) -> String {
        let e = plan(target, request).expect_err("refused");
        e.errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn a_grpc_request_becomes_a_post_with_its_types() {
        let p = plan(
            "descriptor_set = \"t.protoset\"",
            "grpc = \"t.S/M\"\nmessage = '{\"name\": \"{{seq}}\"}'\nmetadata = { \"x-a\" = \"b\" }",
        )
        .unwrap();
        let a = p.assignments("http://127.0.0.1:1/");
        let r = &a[0].requests[0];
        assert_eq!(r.grpc_method, "t.S/M");
        assert_eq!(
            (r.method.as_str(), r.url.as_str()),
            ("POST", "http://127.0.0.1:1/t.S/M")
        );
        assert_eq!(r.headers[0].name, "x-a");
        assert!(!a[0].grpc_descriptors.is_empty());
        // gRPC speaks HTTP/2 without being told.
        assert_eq!(p.target.protocol, loadfleet_proto::vocab::HttpProtocol::H2);
        // Reflection: checked when run has asked the target.
        assert!(plan("reflection = true", "grpc = \"t.S/M\"").is_ok());
    }

    #[test]
    fn a_flow_step_may_call_grpc() {
        let text = "[target]\nurl = \"http://127.0.0.1:1\"\ndescriptor_set = \"t.protoset\"\n[[scenario]]\nrate = 5\nduration = \"1s\"\n[[scenario.step]]\npath = \"/login\"\ncapture = { token = \"json.token\" }\n[[scenario.step]]\ngrpc = \"t.S/M\"\nmessage = '{\"name\": \"{{token}}\"}'\n";
        let p = parse(text, "test.toml", &folder()).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.has_grpc());
        assert_eq!(p.grpc_methods(), ["t.S/M"]);
        let a = p.assignments("http://127.0.0.1:1/");
        let call = a[0].steps[1].request.as_ref().expect("a request");
        assert_eq!(
            (call.grpc_method.as_str(), call.name.as_str()),
            ("t.S/M", "t.S/M")
        );
        assert!(!a[0].grpc_descriptors.is_empty());
        // A step's message is checked against its type as a request's is.
        let wrong = text
            .replace("{{token}}", "x")
            .replace("\"name\"", "\"nmae\"");
        let e = parse(&wrong, "test.toml", &folder()).expect_err("refused");
        assert!(
            e.errors
                .iter()
                .any(|e| e.field == "scenario[0].step[1].message"),
            "{e}"
        );
    }

    #[test]
    fn grpc_mistakes_name_the_field() {
        let set = "descriptor_set = \"t.protoset\"";
        for (target, request, needle) in [
            (
                set,
                "grpc = \"t.S/M\"\nmessage = '{\"nmae\": 1}'",
                "scenario[0].request[0].message: the message is not a valid t.Req",
            ),
            (
                set,
                "grpc = \"t.S/X\"",
                "scenario[0].request[0].grpc: service \"t.S\" has no method \"X\" (methods: M)",
            ),
            (set, "grpc = \"t.S\"", "scenario[0].request[0].grpc"),
            (
                set,
                "grpc = \"t.S/M\"\nbody = \"{}\"",
                "scenario[0].request[0].body",
            ),
            (
                set,
                "grpc = \"t.S/M\"\nmetadata = { \"grpc-timeout\" = \"1S\" }",
                "scenario[0].request[0].metadata.grpc-timeout",
            ),
            (
                set,
                "message = '{}'",
                "scenario[0].request[0].message: message belongs to a gRPC request",
            ),
            (
                "",
                "grpc = \"t.S/M\"",
                "target: the plan calls gRPC (t.S/M)",
            ),
            (
                "descriptor_set = \"missing.protoset\"",
                "grpc = \"t.S/M\"",
                "target.descriptor_set: cannot read",
            ),
            (
                "descriptor_set = \"t.protoset\"\nreflection = true",
                "grpc = \"t.S/M\"",
                "not both",
            ),
            (
                "descriptor_set = \"t.protoset\"\nprotocol = \"http1\"",
                "grpc = \"t.S/M\"",
                "target.protocol: gRPC runs over HTTP/2",
            ),
        ] {
            let e = refusal(target, request);
            assert!(e.contains(needle), "{request}: expected {needle:?} in\n{e}");
        }
        let e = refusal(set, "grpc = \"t.S/M\"\nmessage = '{\"nmae\": 1}'");
        assert!(e.contains("nmae"), "{e}");
    }
}
