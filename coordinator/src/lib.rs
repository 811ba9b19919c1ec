//! The loadfleet coordinator.
//!
//! It waits for agents, estimates their clock offsets, hands each a slice of
//! one open-model schedule with a common start instant, merges their
//! per-second snapshots exactly, and writes a report that leads with what
//! was intended, sent and never sent. The tonic service ([`fleet::ControlService`]) is
//! thin; the run lives in the fleet actor ([`fleet`]), the merged numbers in
//! [`aggregate`], and every output format in [`report`].

mod aggregate;
mod cli;
mod command;
mod compare;
pub mod console;
mod error;
mod figures;
pub mod fleet;
mod grpc;
mod local;
mod output;
pub mod plan;
mod plan_cmd;
pub mod report;
mod report_model;
mod run;
mod search;
mod sse;
mod suggest;
pub mod thresholds;
mod units;

pub use command::main;
