//! gRPC unary calls, as both sides must read them: the method name, the
//! message types a descriptor set gives it, a JSON request turned into
//! protobuf bytes, the 5-byte frame, the deadline header, and a response
//! message turned back into JSON for a flow step's captures and checks.
//!
//! The coordinator uses these to refuse a plan whose JSON does not fit the
//! method's input type, naming the field, before any load goes out; the
//! agent uses the same ones to encode each request. Both decode the same
//! descriptor set with `prost-reflect`, so a message the coordinator
//! accepted is one the agent can encode.

use std::time::Duration;

use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions,
};

/// A `package.Service/Method` name, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName<'a> {
    /// The fully qualified service, `package.Service`.
    pub service: &'a str,
    /// The method within it.
    pub method: &'a str,
}

/// Why a gRPC method or its request message cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrpcError {
    /// Not of the form `package.Service/Method`.
    #[error("{0:?} is not a gRPC method; write it as package.Service/Method (e.g. helloworld.Greeter/SayHello)")]
    MethodForm(String),
    /// The descriptor set cannot be read.
    #[error("the descriptor set cannot be read: {0}")]
    Descriptors(String),
    /// The service is not in the descriptor set.
    #[error("service {service:?} is not in the descriptor set (services: {known})")]
    NoService {
        /// The service asked for.
        service: String,
        /// Those the set has, for the fix.
        known: String,
    },
    /// The service has no such method.
    #[error("service {service:?} has no method {method:?} (methods: {known})")]
    NoMethod {
        /// The service.
        service: String,
        /// The method asked for.
        method: String,
        /// Those the service has.
        known: String,
    },
    /// A streaming method: only unary calls are sent.
    #[error("{0} is a streaming method; only unary methods can be loaded")]
    Streaming(String),
    /// The JSON is not a valid request message.
    #[error("the message is not a valid {message} in JSON: {reason}")]
    Message {
        /// The input type's full name.
        message: String,
        /// What is wrong, as prost-reflect's JSON reader says (it names
        /// the field).
        reason: String,
    },
    /// A response's bytes are not a message of the method's output type
    /// (cut short by the keep, compressed, or of another type).
    #[error("the response is not a valid {message}: {reason}")]
    Reply {
        /// The output type's full name.
        message: String,
        /// What is wrong, as prost's decoder says.
        reason: String,
    },
}

/// Splits `package.Service/Method`; a leading `/` (the HTTP/2 path form) is
/// accepted too.
pub fn method_name(text: &str) -> Result<MethodName<'_>, GrpcError> {
    let bad = || GrpcError::MethodForm(text.chars().take(200).collect());
    let (service, method) = text
        .strip_prefix('/')
        .unwrap_or(text)
        .split_once('/')
        .ok_or_else(bad)?;
    let word = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|part| {
                !part.is_empty()
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !part.starts_with(|c: char| c.is_ascii_digit())
            })
    };
    if !word(service) || !word(method) || method.contains('.') {
        return Err(bad());
    }
    Ok(MethodName { service, method })
}

/// Decodes an encoded `FileDescriptorSet`.
pub fn decode_descriptors(bytes: &[u8]) -> Result<DescriptorPool, GrpcError> {
    DescriptorPool::decode(bytes).map_err(|e| GrpcError::Descriptors(e.to_string()))
}

/// The input type of a unary method in `pool`.
pub fn input_type(pool: &DescriptorPool, method: &str) -> Result<MessageDescriptor, GrpcError> {
    Ok(unary_method(pool, method)?.input())
}

/// The output type of a unary method in `pool`: what its answers decode as.
pub fn output_type(pool: &DescriptorPool, method: &str) -> Result<MessageDescriptor, GrpcError> {
    Ok(unary_method(pool, method)?.output())
}

/// A unary method of `pool`, or why `method` names none.
fn unary_method(pool: &DescriptorPool, method: &str) -> Result<MethodDescriptor, GrpcError> {
    let name = method_name(method)?;
    let service = pool.get_service_by_name(name.service).ok_or_else(|| {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        GrpcError::NoService {
            service: name.service.to_string(),
            known: list(known),
        }
    })?;
    let found = service
        .methods()
        .find(|m| m.name() == name.method)
        .ok_or_else(|| GrpcError::NoMethod {
            service: name.service.to_string(),
            method: name.method.to_string(),
            known: list(service.methods().map(|m| m.name().to_string()).collect()),
        })?;
    if found.is_client_streaming() || found.is_server_streaming() {
        return Err(GrpcError::Streaming(method.to_string()));
    }
    Ok(found)
}

fn list(mut names: Vec<String>) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names.sort();
    names.truncate(20);
    names.join(", ")
}

/// Encodes a JSON request (proto3 JSON mapping) as protobuf bytes. Unknown
/// fields are refused, so a misspelt field name is a mistake, not a field
/// silently left out.
pub fn encode_json(message: &MessageDescriptor, json: &str) -> Result<Vec<u8>, GrpcError> {
    use prost::Message;
    let fail = |reason: String| GrpcError::Message {
        message: message.full_name().to_string(),
        reason,
    };
    let mut de = serde_json::Deserializer::from_str(json);
    let dynamic =
        DynamicMessage::deserialize(message.clone(), &mut de).map_err(|e| fail(e.to_string()))?;
    de.end().map_err(|e| fail(e.to_string()))?;
    Ok(dynamic.encode_to_vec())
}

/// How a response reads as JSON: every field present, defaults included
/// (so `json.count == 0` holds rather than finding nothing), under its name
/// in the .proto, and 64-bit integers as numbers (so `json.id == 7`
/// compares as it reads), unlike the proto3 mapping's strings.
const REPLY_JSON: SerializeOptions = SerializeOptions::new()
    .skip_default_fields(false)
    .use_proto_field_name(true)
    .stringify_64_bit_integers(false);

/// Decodes a response message (protobuf bytes, unframed) of type `message`
/// and writes it as JSON into `out`, of which at most `limit` bytes are
/// written: a longer text is cut there, as an HTTP body past the keep is,
/// and the writing stops rather than building the rest.
pub fn decode_json(
    message: &MessageDescriptor,
    bytes: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), GrpcError> {
    let dynamic = DynamicMessage::decode(message.clone(), bytes).map_err(|e| GrpcError::Reply {
        message: message.full_name().to_string(),
        reason: e.to_string(),
    })?;
    let mut writer = Bounded { out, limit };
    let mut ser = serde_json::Serializer::new(&mut writer);
    // The only error is the bound's, which leaves the text cut at it.
    let _ = dynamic.serialize_with_options(&mut ser, &REPLY_JSON);
    Ok(())
}

/// A writer that takes at most `limit` bytes in all, then refuses.
struct Bounded<'a> {
    out: &'a mut Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.out.len());
        if room == 0 && !buf.is_empty() {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let n = buf.len().min(room);
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The gRPC length-prefixed frame of one uncompressed message: a zero flag
/// byte, the length as a big-endian u32, the message.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The `grpc-timeout` header value of a deadline: at most 8 digits and a
/// unit, the finest unit the value fits in (rounded up, so the server never
/// gets a shorter deadline than the client keeps).
pub fn timeout_header(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (unit, per) in [
        ("n", 1u128),
        ("u", 1_000),
        ("m", 1_000_000),
        ("S", 1_000_000_000),
        ("M", 60_000_000_000),
        ("H", 3_600_000_000_000),
    ] {
        let v = nanos.div_ceil(per);
        if v < 100_000_000 {
            return format!("{v}{unit}");
        }
    }
    "99999999H".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_split_or_say_the_form() {
        let m = method_name("helloworld.Greeter/SayHello").unwrap();
        assert_eq!((m.service, m.method), ("helloworld.Greeter", "SayHello"));
        assert_eq!(method_name("/a.B/C").unwrap().service, "a.B");
        assert_eq!(method_name("Greeter/Hi").unwrap().service, "Greeter");
        for bad in [
            "", "a.B", "a.B/", "/C", "a..B/C", "a.B/C/D", "a B/C", "a.B/C.D",
        ] {
            let e = method_name(bad).unwrap_err().to_string();
            assert!(e.contains("package.Service/Method"), "{bad}: {e}");
        }
    }

    #[test]
    fn timeouts_fit_the_header() {
        assert_eq!(timeout_header(Duration::from_millis(250)), "250000u");
        assert_eq!(timeout_header(Duration::from_secs(10)), "10000000u");
        assert_eq!(timeout_header(Duration::from_secs(3600)), "3600000m");
        assert_eq!(timeout_header(Duration::from_nanos(5)), "5n");
    }

    /// `package t; message Req { string name = 1; int64 id = 2; }` and a
    /// unary `S/M` and a streaming `S/Stream` taking it, as a descriptor set.
    fn pool() -> DescriptorPool {
        use prost::Message;
        use prost_types::field_descriptor_proto::{Label, Type};
        use prost_types::*;
        let field = |name: &str, number, ty: Type| FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(ty as i32),
            json_name: Some(name.into()),
            ..Default::default()
        };
        let method = |name: &str, streaming| MethodDescriptorProto {
            name: Some(name.into()),
            input_type: Some(".t.Req".into()),
            output_type: Some(".t.Req".into()),
            server_streaming: Some(streaming),
            ..Default::default()
        };
        let set = FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("t.proto".into()),
                package: Some("t".into()),
                syntax: Some("proto3".into()),
                message_type: vec![DescriptorProto {
                    name: Some("Req".into()),
                    field: vec![field("name", 1, Type::String), field("id", 2, Type::Int64)],
                    ..Default::default()
                }],
                service: vec![ServiceDescriptorProto {
                    name: Some("S".into()),
                    method: vec![method("M", false), method("Stream", true)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        decode_descriptors(&set.encode_to_vec()).unwrap()
    }

    #[test]
    fn json_becomes_the_input_message() {
        let pool = pool();
        let input = input_type(&pool, "t.S/M").unwrap();
        let bytes = encode_json(&input, r#"{"name": "ann", "id": "7"}"#).unwrap();
        // Field 1 (string "ann"), field 2 (varint 7).
        assert_eq!(bytes, vec![0x0a, 3, b'a', b'n', b'n', 0x10, 7]);
        let e = encode_json(&input, r#"{"nmae": "ann"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.Req") && e.contains("nmae"), "{e}");
        let e = encode_json(&input, r#"{"id": "x"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.Req"), "{e}");
        assert!(encode_json(&input, r#"{} {}"#).is_err());
    }

    #[test]
    fn a_response_reads_as_json_with_every_field() {
        let pool = pool();
        let output = output_type(&pool, "t.S/M").unwrap();
        let mut out = Vec::new();
        decode_json(
            &output,
            &[0x0a, 3, b'a', b'n', b'n', 0x10, 7],
            1000,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, br#"{"name":"ann","id":7}"#);
        out.clear();
        decode_json(&output, &[], 1000, &mut out).unwrap();
        assert_eq!(out, br#"{"name":"","id":0}"#, "defaults are present");
        out.clear();
        decode_json(&output, &[0x0a, 3, b'a', b'n', b'n'], 6, &mut out).unwrap();
        assert_eq!(out, br#"{"name"#, "cut at the bound");
        let e = decode_json(&output, &[0x0a, 9, b'a'], 1000, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.Req"), "{e}");
        assert!(output_type(&pool, "t.S/Stream").is_err());
    }

    #[test]
    fn unknown_services_and_methods_list_the_known_ones() {
        let pool = pool();
        let e = input_type(&pool, "t.X/M").unwrap_err().to_string();
        assert!(e.contains("t.S"), "{e}");
        let e = input_type(&pool, "t.S/N").unwrap_err().to_string();
        assert!(e.contains("M, Stream"), "{e}");
        let e = input_type(&pool, "t.S/Stream").unwrap_err().to_string();
        assert!(e.contains("streaming"), "{e}");
        assert!(decode_descriptors(b"not a set").is_err());
    }

    #[test]
    fn frames_carry_the_length() {
        assert_eq!(frame(b"ab"), vec![0, 0, 0, 0, 2, b'a', b'b']);
    }
}
