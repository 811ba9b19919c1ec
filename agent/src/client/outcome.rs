//! What one finished exchange comes to: its [`Outcome`], where its time
//! went ([`Phases`]) and when it went on and off the wire ([`Exchanged`]).
//!
//! A leaf: the transports fill these in, the recorder and the gRPC
//! classification read them, and none of them is needed to name them.

use std::time::Duration;

use loadfleet_proto::vocab::{ErrorKind, GrpcStatus, UnsentReason};
use tokio::time::Instant;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A response arrived with this status code.
    Status(u16),
    /// No response: a transport error of this kind.
    Error(ErrorKind),
    /// A gRPC call answered with this grpc-status (over HTTP 200).
    Grpc(GrpcStatus),
    /// Never written: it waited for one of the agent's own connections (or
    /// streams) until its time ran out. Counted unsent, not completed, so
    /// `sent` holds only what the target could have seen.
    Unsent(UnsentReason),
}

/// Where one request's time went on the wire, as k6 splits it
/// (`http_req_connecting`, `…_tls_handshaking`, `…_waiting`,
/// `…_receiving`). A wait for the agent's own pool is not among them: it is
/// kept apart as the pool wait, so a busy agent is not read as a slow
/// network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Phases {
    /// TCP connect, when this request opened its connection.
    pub connect: Option<Duration>,
    /// TLS handshake, when this request opened a TLS connection.
    pub tls: Option<Duration>,
    /// From going on the wire to the response's headers.
    pub ttfb: Option<Duration>,
    /// From the headers to the end of the body.
    pub body: Option<Duration>,
    /// The request opened a new connection (even if the exchange failed).
    pub new_connection: bool,
    /// The request went out on a connection an earlier request had used.
    pub reused: bool,
}

/// What became of one request in the transport.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exchanged {
    pub outcome: Outcome,
    /// When the request went onto a connection (the start of its service
    /// time), if it did.
    pub on_wire: Option<Instant>,
    /// How long it waited for one of the pool's connections, if it had to.
    pub pool_wait: Option<Duration>,
    pub phases: Phases,
    /// When the answer's last byte arrived, for HTTP/1.1: by the kernel's
    /// stamp over plain TCP (the end of the request's latency even if the
    /// answer was read later), by the read over TLS; for a request whose
    /// time ran out in the worker's queue, its deadline. `None` from
    /// HTTP/2, whose answers end when the exchange returns.
    pub answered: Option<Instant>,
}
