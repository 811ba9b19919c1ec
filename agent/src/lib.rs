//! The loadfleet agent.
//!
//! An agent dials its coordinator, takes its slice of the fleet's open-model
//! schedule, fires each arrival at its intended instant and streams
//! per-second snapshots back. It is the measuring instrument, so the request
//! path is kept lean (see [`worker`]), and it never fires without a
//! coordinator: a lost control stream stops it within seconds.

pub mod client;
pub mod recorder;
pub mod request;
pub mod session;
pub mod sys;
pub mod timer;
pub mod tls;
pub mod worker;
