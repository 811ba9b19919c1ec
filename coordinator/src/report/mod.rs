//! The report, in the order data flows through it: [`crate::report_model`]
//! is the data (`report.json`, documented in docs/report.md; it sits below
//! the report, the figures and the thresholds that all read it), [`build`]
//! makes it from what the fleet measured and what was planned,
//! [`verdicts`] says what the run is worth and the exit status, [`repeats`]
//! combines several runs, and one module per renderer writes it
//! ([`text`], [`json`], [`csv`], [`hlog`], [`html`]), all sharing
//! [`format`]. Renderers write to any `impl Write`, so tests can read them.

pub(crate) mod build;
pub(crate) mod csv;
mod flows;
pub(crate) mod format;
pub(crate) mod hlog;
pub(crate) mod html;
pub mod json;
mod parts;
pub(crate) mod plan_info;
pub(crate) mod repeats;
pub(crate) mod shape;
pub(crate) mod sse;
pub mod text;
mod text_flows;
pub(crate) mod verdicts;

pub use crate::report_model::Report;
pub(crate) use crate::report_model::*;
pub(crate) use build::build;
pub(crate) use plan_info::{FailureLimits, Placement, PlanInfo};
pub(crate) use verdicts::exit_status;
