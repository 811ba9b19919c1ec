//! The report, in the order data flows through it: [`crate::report_model`]
//! is the data (`report.json`, documented in docs/report.md; it sits below
//! the report, the figures and the thresholds that all read it), [`build`]
//! makes it from what the fleet measured and what was planned,
//! [`verdicts`] says what the run is worth and the exit status, [`repeats`]
//! combines several runs, and one module per renderer writes it
//! ([`text`], [`json`], [`csv`], [`hlog`], [`html`]), all sharing
//! [`format`]. Renderers write to any `impl Write`, so tests can read them.

pub mod build;
pub mod csv;
pub mod format;
pub mod hlog;
pub mod html;
pub mod json;
pub mod plan_info;
pub mod repeats;
pub mod shape;
pub mod sse;
pub mod text;
pub mod verdicts;

pub use crate::report_model::*;
pub use build::build;
pub use plan_info::{FailureLimits, Placement, PlanInfo, ScenarioInfo};
pub use verdicts::exit_status;
