//! The loadfleet wire contract.
//!
//! Coordinator and agents must give every message exactly one meaning, so the
//! functions that interpret them live here, next to the generated types, as
//! plain code without I/O: a schedule description becomes arrival instants
//! ([`schedule`]), a fleet schedule is cut into agent slices ([`partition`]),
//! and histograms cross the wire as HdrHistogram V2 bytes
//! ([`histogram`]). Both sides link this crate, so they cannot disagree.

pub mod bounds;
pub mod closed;
pub mod figures;
pub mod flow;
pub mod grpc;
pub mod handover;
pub mod histogram;
pub mod partition;
pub mod rng;
pub mod schedule;
pub mod target;
pub mod template;
pub mod vocab;

/// Generated protobuf and tonic code for `loadfleet.v1`. Generated code is
/// exempt from style lints it cannot follow (e.g. boxing oneof variants).
#[allow(clippy::large_enum_variant)]
pub mod v1 {
    tonic::include_proto!("loadfleet.v1");
}

/// Version of the control protocol. Coordinator and agent refuse to work
/// together unless they agree, because a silently different interpretation of
/// a field would corrupt the merged numbers rather than fail loudly. Version 2
/// sends histograms as plain V2 bytes, not deflated ([`histogram`]).
pub const PROTOCOL_VERSION: u32 = 2;

/// gRPC metadata key carrying [`PROTOCOL_VERSION`], checked before any message
/// flows so a mismatch is refused with a clear status.
pub const PROTOCOL_HEADER: &str = "loadfleet-protocol";
