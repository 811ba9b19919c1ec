//! gRPC unary calls: what turns a scenario's JSON request into a gRPC
//! request on the HTTP/2 transport, its answer into an outcome, and (for a
//! flow's step) its response message back into JSON.
//!
//! A call is an HTTP/2 POST to `/package.Service/Method` with
//! `content-type: application/grpc`, `te: trailers`, the deadline as
//! `grpc-timeout`, and the message protobuf-encoded in one 5-byte-prefixed
//! frame. Its outcome is the `grpc-status` of the trailers (or of the
//! headers, for a trailers-only answer), counted apart from HTTP statuses
//! and transport errors. An answer whose HTTP status is not 200 never
//! reached gRPC and stays an HTTP status.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use loadfleet_proto::grpc::{self, GrpcError};
use loadfleet_proto::vocab::{ErrorKind, GrpcStatus};
use prost_reflect::{DescriptorPool, MessageDescriptor};

use super::outcome::Outcome;

/// Marks a request as a gRPC call (an `http::Extensions` entry), so the
/// transport's answer is read for its grpc-status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call;

/// A request's message type, to encode its JSON with.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    input: MessageDescriptor,
}

impl Encoder {
    /// The encoder of `method`'s input type in `pool`.
    pub(crate) fn new(pool: &DescriptorPool, method: &str) -> Result<Self, GrpcError> {
        Ok(Self {
            input: grpc::input_type(pool, method)?,
        })
    }

    /// The framed protobuf body of one JSON message.
    pub(crate) fn encode(&self, json: &str) -> Result<Bytes, GrpcError> {
        Ok(Bytes::from(grpc::frame(&grpc::encode_json(
            &self.input,
            json,
        )?)))
    }
}

/// A method's response type, to read a kept response message as JSON:
/// what a flow step's captures and checks look at.
#[derive(Debug, Clone)]
pub(crate) struct Decoder {
    output: MessageDescriptor,
}

impl Decoder {
    /// The decoder of `method`'s output type in `pool`.
    pub(crate) fn new(pool: &DescriptorPool, method: &str) -> Result<Self, GrpcError> {
        Ok(Self {
            output: grpc::output_type(pool, method)?,
        })
    }

    /// The JSON text of one response message (unframed), at most `limit`
    /// bytes of it.
    pub(crate) fn json(&self, message: &[u8], limit: usize) -> Result<Bytes, GrpcError> {
        let mut out = Vec::with_capacity(message.len().saturating_mul(2).min(limit));
        grpc::decode_json(&self.output, message, limit, &mut out)?;
        Ok(Bytes::from(out))
    }
}

/// The headers every call carries, before its metadata: the deadline is
/// the request timeout, so the server can give up when the agent will.
pub(crate) fn call_headers(timeout: Duration) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(4);
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(http::header::TE, HeaderValue::from_static("trailers"));
    if let Ok(v) = HeaderValue::from_str(&grpc::timeout_header(timeout)) {
        h.insert(HeaderName::from_static("grpc-timeout"), v);
    }
    h
}

/// The outcome of a call from the HTTP status, headers and trailers of its
/// answer. A 200 without a grpc-status anywhere is not gRPC: a protocol
/// error.
pub(crate) fn outcome(status: u16, headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Outcome {
    if status != 200 {
        return Outcome::Status(status);
    }
    let value = trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| headers.get("grpc-status"));
    match value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
    {
        Some(code) => Outcome::Grpc(GrpcStatus::from_code(code)),
        None => Outcome::Error(ErrorKind::Protocol),
    }
}

/// A call whose time ran out on the wire has, for gRPC, exceeded its
/// deadline, as any gRPC client reports it; one that ran out waiting for
/// the agent's own connections stays unsent.
pub(crate) fn on_timeout(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Error(ErrorKind::Timeout) => Outcome::Grpc(GrpcStatus::DeadlineExceeded),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::vocab::UnsentReason;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn the_status_comes_from_trailers_or_a_trailers_only_answer() {
        let ok = map(&[("grpc-status", "0")]);
        let exhausted = map(&[("grpc-status", "8"), ("grpc-message", "busy")]);
        let empty = HeaderMap::new();
        assert_eq!(
            outcome(200, &empty, Some(&ok)),
            Outcome::Grpc(GrpcStatus::Ok)
        );
        assert_eq!(
            outcome(200, &exhausted, None),
            Outcome::Grpc(GrpcStatus::ResourceExhausted)
        );
        // Trailers win over headers.
        assert_eq!(
            outcome(200, &ok, Some(&exhausted)),
            Outcome::Grpc(GrpcStatus::ResourceExhausted)
        );
        assert_eq!(
            outcome(200, &empty, Some(&empty)),
            Outcome::Error(ErrorKind::Protocol)
        );
        assert_eq!(
            outcome(200, &map(&[("grpc-status", "x")]), None),
            Outcome::Error(ErrorKind::Protocol)
        );
        // Not gRPC at all: an HTTP status, whatever the headers say.
        assert_eq!(outcome(503, &ok, None), Outcome::Status(503));
    }

    #[test]
    fn calls_carry_the_grpc_headers_and_deadline() {
        let h = call_headers(Duration::from_millis(250));
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["grpc-timeout"], "250000u");
        assert_eq!(
            on_timeout(Outcome::Error(ErrorKind::Timeout)),
            Outcome::Grpc(GrpcStatus::DeadlineExceeded)
        );
        assert_eq!(
            on_timeout(Outcome::Unsent(UnsentReason::PoolTimeout)),
            Outcome::Unsent(UnsentReason::PoolTimeout)
        );
    }
}
