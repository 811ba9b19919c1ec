//! The loadfleet coordinator.
//!
//! It waits for agents, estimates their clock offsets, hands each a slice of
//! one open-model schedule with a common start instant, merges their
//! per-second snapshots exactly, and writes a report that leads with what
//! was intended, sent and never sent. The tonic service ([`fleet::ControlService`]) is
//! thin; the run lives in the fleet actor ([`fleet`]), the merged numbers in
//! [`aggregate`], and every output format in [`report`].

pub mod aggregate;
pub mod cli;
pub mod compare;
pub mod console;
pub mod error;
pub mod figures;
pub mod fleet;
pub mod grpc;
pub mod local;
pub mod output;
pub mod plan;
pub mod plan_cmd;
pub mod report;
pub mod report_model;
pub mod run;
pub mod search;
pub mod sse;
pub mod thresholds;
pub mod units;
