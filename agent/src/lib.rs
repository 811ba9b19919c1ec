//! The loadfleet agent.
//!
//! An agent dials its coordinator, takes its slice of the fleet's open-model
//! schedule, fires each arrival at its intended instant and streams
//! per-second snapshots back. It is the measuring instrument, so the request
//! path is kept lean (see [`worker`]), and it never fires without a
//! coordinator: a lost control stream stops it within seconds.
//!
//! The flow: [`session`] holds the control stream; [`assignment`] vets an
//! assignment (plan bounds, [`allow`] list) and turns it into worker plans; each [`worker`] thread renders requests
//! ([`request`]; gRPC calls with [`client::grpc`]; a flow's steps with
//! [`flow`]), sends them through its own
//! [`client`] and counts what happened in its [`recorder`].

mod allow;
mod assignment;
mod client;
mod command;
mod config;
mod flow;
mod recorder;
mod request;
mod runners;
mod session;
mod sse;
mod worker;

/// Exit statuses of `loadfleet-agent`, as README.md's table lists them, so
/// a supervisor (systemd, a Kubernetes Job) can tell a finished run from a
/// stopped one and both from a failure.
mod exit {
    /// Every run the coordinator assigned finished, and it closed the
    /// session.
    pub(crate) const FINISHED: u8 = 0;
    /// A flag is wrong; the message names it (clap uses 2 as well).
    pub(crate) const BAD_FLAGS: u8 = 2;
    /// The coordinator stopped the run early (e.g. Ctrl-C on it); what was
    /// measured was delivered. The coordinator's own status for a cut-short
    /// run is 3 too.
    pub(crate) const STOPPED: u8 = 3;
    /// No session, or it broke: the coordinator could not be reached,
    /// refused this agent (token, protocol version, no room), went silent
    /// (dead-man switch) or closed the stream mid-run.
    pub(crate) const COORDINATOR: u8 = 4;
    /// This agent refused its assignment (`--allow-target`) or could not
    /// carry it out; nothing was sent.
    pub(crate) const ASSIGNMENT: u8 = 5;
}

/// The system calls (CPU time and pinning, interfaces, the precise timer)
/// live in `loadfleet-sys`, shared with the testbed and the coordinator.
use loadfleet_sys::{self as sys, timer};

pub use command::main;
