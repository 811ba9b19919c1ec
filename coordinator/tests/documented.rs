//! Documented features, each run end to end with the real binaries and
//! checked as README.md and docs/*.md promise it: first that the run did
//! its work (requests sent, and the target counted them), then the figure
//! the feature is about, then the exact exit status.
//!
//! One test binary with the themes as modules, so that adding a check
//! links no further copy of the coordinator.

mod common;
#[path = "nginx/mod.rs"]
mod nginx;
#[path = "outputs_support/mod.rs"]
mod outputs_support;

#[path = "documented/fleet.rs"]
mod fleet;
#[path = "documented/outputs.rs"]
mod outputs;
#[path = "documented/plans.rs"]
mod plans;
